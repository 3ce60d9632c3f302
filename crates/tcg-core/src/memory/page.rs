//! The bytes of one guest page, shared by every thread that maps it.
//!
//! Guest threads on host threads touch the same bytes at the same time,
//! so a page is 512 `AtomicU64` words and every access here is atomic
//! (relaxed: the guest's own fences order them, see
//! [`super::GuestMemory::fence`]). An aligned access of any size reads or
//! writes within one word, so it is single-copy atomic as RISC-V requires;
//! a misaligned one that crosses a word is two accesses, which RISC-V
//! allows. A store narrower than a word replaces its bytes with a
//! compare-and-swap once the page may be shared (a load-modify-store
//! could undo another thread's store to the word's other bytes), and with
//! a plain load and store while one thread owns the address space.
//! Compiled code reads and writes the same words with plain host
//! instructions, which the host makes atomic per aligned access too. A
//! guest AMO is one host atomic instruction where the host has one for
//! it ([`FetchOp`]), else a compare-and-swap loop on its word.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use super::PAGE_SIZE;

const WORDS: usize = PAGE_SIZE as usize / 8;

/// One page's bytes, little-endian within each word.
pub(super) struct PageBytes([AtomicU64; WORDS]);

/// The low `n` bytes of a word (`n` in 1..=8).
#[inline(always)]
fn low_bytes(n: usize) -> u64 {
    if n >= 8 {
        u64::MAX
    } else {
        (1u64 << (n * 8)) - 1
    }
}

#[inline(always)]
pub(super) fn size_bytes(size: u8) -> usize {
    match size {
        1 => 1,
        2 => 2,
        4 => 4,
        _ => 8,
    }
}

impl PageBytes {
    /// A zero-filled page on the heap.
    pub(super) fn zeroed() -> Box<PageBytes> {
        Box::new(PageBytes([const { AtomicU64::new(0) }; WORDS]))
    }

    /// Address of the first byte, for compiled code's inline accesses.
    pub(super) fn host_address(&self) -> usize {
        self.0.as_ptr() as usize
    }

    #[inline(always)]
    fn word(&self, i: usize) -> Option<&AtomicU64> {
        self.0.get(i)
    }

    /// Reads `size` (1, 2, 4, 8; another counts as 8) bytes at `off`,
    /// zero-extended; `None` if they do not fit in the page.
    #[inline(always)]
    pub(super) fn read(&self, off: usize, size: u8) -> Option<u64> {
        let n = size_bytes(size);
        let (w, b) = (off / 8, off % 8);
        let lo = self.word(w)?.load(Relaxed);
        if b + n <= 8 {
            return Some((lo >> (b * 8)) & low_bytes(n));
        }
        let hi = self.word(w + 1)?.load(Relaxed);
        Some(((lo >> (b * 8)) | (hi << ((8 - b) * 8))) & low_bytes(n))
    }

    /// Writes the low `size` bytes of `value` at `off`; false (nothing
    /// written) if they do not fit in the page.
    #[inline(always)]
    pub(super) fn write(&self, off: usize, size: u8, value: u64, shared: bool) -> bool {
        let n = size_bytes(size);
        let (w, b) = (off / 8, off % 8);
        if b + n <= 8 {
            let Some(word) = self.word(w) else {
                return false;
            };
            if n == 8 {
                word.store(value, Relaxed);
            } else {
                let mask = low_bytes(n) << (b * 8);
                merge(word, mask, value << (b * 8), shared);
            }
            return true;
        }
        let (Some(lo), Some(hi)) = (self.word(w), self.word(w + 1)) else {
            return false;
        };
        merge(lo, u64::MAX << (b * 8), value << (b * 8), shared);
        let in_hi = n - (8 - b);
        merge(hi, low_bytes(in_hi), value >> ((8 - b) * 8), shared);
        true
    }

    /// The word an atomic access of `size` at `off` falls in, the bit
    /// shift of its bytes there and their count; `None` if `off` is not
    /// aligned to the size or outside the page.
    fn atomic_word(&self, off: usize, size: u8) -> Option<(&AtomicU64, usize, usize)> {
        let n = size_bytes(size);
        if !off.is_multiple_of(n) {
            return None;
        }
        Some((self.word(off / 8)?, (off % 8) * 8, n))
    }

    /// Atomically replaces the naturally aligned `size` (4 or 8) bytes at
    /// `off` with `update(old)`, `old` zero-extended; returns `(old, new)`
    /// or `None` if `off` is not aligned or outside the page.
    pub(super) fn update(
        &self,
        off: usize,
        size: u8,
        update: impl Fn(u64) -> u64,
    ) -> Option<(u64, u64)> {
        let (word, shift, n) = self.atomic_word(off, size)?;
        let mask = low_bytes(n) << shift;
        let mut current = word.load(Relaxed);
        loop {
            let old = (current & mask) >> shift;
            let new = update(old) & low_bytes(n);
            let next = (current & !mask) | (new << shift);
            // SeqCst: an AMO with aq and rl set is sequentially consistent,
            // and a weaker one may be made stronger.
            match word.compare_exchange_weak(current, next, SeqCst, Relaxed) {
                Ok(_) => return Some((old, new)),
                Err(seen) => current = seen,
            }
        }
    }

    /// [`PageBytes::update`] for the operations the host has atomic
    /// instructions for: one `lock xadd`/`xchg`/`lock and|or|xor` where the
    /// operand fits the word (a 64-bit access; a 32-bit bitwise one; a
    /// 32-bit add to a word's upper half, whose carry leaves the word),
    /// else the compare-and-swap loop. Under contention a loop costs each
    /// access a second trip of the cache line.
    pub(super) fn fetch(
        &self,
        off: usize,
        size: u8,
        op: FetchOp,
        operand: u64,
    ) -> Option<(u64, u64)> {
        let (word, shift, n) = self.atomic_word(off, size)?;
        let mask = low_bytes(n) << shift;
        let bits = (operand & low_bytes(n)) << shift;
        let old_word = match (op, n) {
            (FetchOp::Add, 8) => word.fetch_add(operand, SeqCst),
            (FetchOp::Add, _) if shift == 32 => word.fetch_add(bits, SeqCst),
            (FetchOp::Swap, 8) => word.swap(operand, SeqCst),
            (FetchOp::And, _) => word.fetch_and(bits | !mask, SeqCst),
            (FetchOp::Or, _) => word.fetch_or(bits, SeqCst),
            (FetchOp::Xor, _) => word.fetch_xor(bits, SeqCst),
            (op, _) => return self.update(off, size, |old| op.apply(old, operand)),
        };
        let old = (old_word & mask) >> shift;
        Some((old, op.apply(old, operand) & low_bytes(n)))
    }

    /// Copies bytes starting at `off` into `buf`; false if they do not fit.
    pub(super) fn read_bytes(&self, off: usize, buf: &mut [u8]) -> bool {
        if off + buf.len() > PAGE_SIZE as usize {
            return false;
        }
        let mut at = off;
        for chunk in buf.chunks_mut(8) {
            // At most 8 bytes from `at`, crossing at most one word boundary.
            let n = chunk.len();
            if matches!(n, 1 | 2 | 4 | 8) {
                let v = self.read(at, n as u8).unwrap_or(0);
                chunk.copy_from_slice(v.to_le_bytes().get(..n).unwrap_or_default());
            } else {
                for (i, byte) in chunk.iter_mut().enumerate() {
                    *byte = self.read(at + i, 1).unwrap_or(0) as u8;
                }
            }
            at += n;
        }
        true
    }

    /// Copies `data` in starting at `off`; false (nothing written) if it
    /// does not fit.
    pub(super) fn write_bytes(&self, off: usize, data: &[u8], shared: bool) -> bool {
        if off + data.len() > PAGE_SIZE as usize {
            return false;
        }
        let mut at = off;
        for chunk in data.chunks(8) {
            let n = chunk.len();
            if matches!(n, 1 | 2 | 4 | 8) {
                let mut bytes = [0u8; 8];
                if let Some(dst) = bytes.get_mut(..n) {
                    dst.copy_from_slice(chunk);
                }
                self.write(at, n as u8, u64::from_le_bytes(bytes), shared);
            } else {
                for (i, &byte) in chunk.iter().enumerate() {
                    self.write(at + i, 1, u64::from(byte), shared);
                }
            }
            at += n;
        }
        true
    }

    /// Position of the first NUL in `[off, off + max)` (clamped to the
    /// page), or the bytes scanned if there is none.
    pub(super) fn find_nul(&self, off: usize, max: usize) -> (usize, bool) {
        let end = (off + max).min(PAGE_SIZE as usize);
        for at in off..end {
            if self.read(at, 1) == Some(0) {
                return (at - off, true);
            }
        }
        (end.saturating_sub(off), false)
    }
}

/// An atomic read-modify-write the host does in one instruction where the
/// operand fits its word ([`super::GuestMemory::atomic_fetch`]); other
/// updates go through a closure ([`super::GuestMemory::atomic_update`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchOp {
    /// `old + operand`, wrapping.
    Add,
    /// `operand`.
    Swap,
    /// `old & operand`.
    And,
    /// `old | operand`.
    Or,
    /// `old ^ operand`.
    Xor,
}

impl FetchOp {
    /// The new value from the old one (bits above the access size are
    /// the caller's to drop).
    pub fn apply(self, old: u64, operand: u64) -> u64 {
        match self {
            FetchOp::Add => old.wrapping_add(operand),
            FetchOp::Swap => operand,
            FetchOp::And => old & operand,
            FetchOp::Or => old | operand,
            FetchOp::Xor => old ^ operand,
        }
    }
}

/// Replaces the bits `mask` of `word` with those of `bits`.
#[inline(always)]
fn merge(word: &AtomicU64, mask: u64, bits: u64, shared: bool) {
    let bits = bits & mask;
    if shared {
        let mut current = word.load(Relaxed);
        while let Err(seen) =
            word.compare_exchange_weak(current, (current & !mask) | bits, Relaxed, Relaxed)
        {
            current = seen;
        }
    } else {
        let old = word.load(Relaxed);
        word.store((old & !mask) | bits, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_every_size_and_offset_like_a_byte_array() {
        for shared in [false, true] {
            let page = PageBytes::zeroed();
            let mut model = vec![0u8; PAGE_SIZE as usize];
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for step in 0..20_000usize {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let size = [1u8, 2, 4, 8][step % 4];
                let n = size_bytes(size);
                let off = (x as usize >> 8) % (PAGE_SIZE as usize - n + 1);
                page.write(off, size, x, shared);
                model[off..off + n].copy_from_slice(&x.to_le_bytes()[..n]);
                let probe = (x as usize >> 24) % (PAGE_SIZE as usize - 7);
                let mut want = [0u8; 8];
                want.copy_from_slice(&model[probe..probe + 8]);
                assert_eq!(page.read(probe, 8), Some(u64::from_le_bytes(want)));
            }
            let mut all = vec![0u8; PAGE_SIZE as usize];
            assert!(page.read_bytes(0, &mut all));
            assert_eq!(all, model);
        }
    }

    #[test]
    fn accesses_past_the_page_fail_without_writing() {
        let page = PageBytes::zeroed();
        assert_eq!(page.read(4095, 2), None);
        assert!(!page.write(4093, 4, u64::MAX, true));
        assert!(!page.write_bytes(4090, &[1; 7], false));
        assert_eq!(page.read(4088, 8), Some(0));
        assert_eq!(page.update(4, 8, |v| v + 1), None, "misaligned");
    }

    #[test]
    fn byte_copies_of_odd_lengths_round_trip() {
        let page = PageBytes::zeroed();
        let data: Vec<u8> = (1..=77).collect();
        assert!(page.write_bytes(3, &data, true));
        let mut back = vec![0u8; 77];
        assert!(page.read_bytes(3, &mut back));
        assert_eq!(back, data);
        assert_eq!(page.find_nul(3, 100), (77, true));
        assert_eq!(page.find_nul(3, 10), (10, false));
    }

    #[test]
    fn narrow_stores_from_threads_never_undo_each_other() {
        let page = std::sync::Arc::new(PageBytes::zeroed());
        std::thread::scope(|s| {
            for t in 0..4usize {
                let page = &page;
                s.spawn(move || {
                    for round in 1..=2000u64 {
                        // Thread t owns byte t of word 0 and half t of word 1.
                        page.write(t, 1, round, true);
                        page.write(8 + 2 * t, 2, round, true);
                    }
                });
            }
        });
        assert_eq!(
            page.read(0, 4),
            Some(u64::from_le_bytes([208, 208, 208, 208, 0, 0, 0, 0]))
        );
        assert_eq!(page.read(8, 8), Some(0x07d0_07d0_07d0_07d0));
    }

    #[test]
    fn native_fetches_equal_the_update_loop_for_every_size_and_half() {
        let ops = [
            FetchOp::Add,
            FetchOp::Swap,
            FetchOp::And,
            FetchOp::Or,
            FetchOp::Xor,
        ];
        for op in ops {
            for (off, size) in [(0, 8), (0, 4), (4, 4), (8, 8)] {
                let (a, b) = (PageBytes::zeroed(), PageBytes::zeroed());
                for page in [&a, &b] {
                    page.write(0, 8, 0xffff_fffe_8000_00ff, false);
                    page.write(8, 8, u64::MAX - 1, false);
                }
                let operand = 0x8000_0003_8000_0101;
                let native = a.fetch(off, size, op, operand);
                let looped = b.update(off, size, |old| op.apply(old, operand));
                assert_eq!(native, looped, "{op:?} at {off} size {size}");
                assert_eq!(a.read(0, 8), b.read(0, 8), "{op:?} at {off} size {size}");
                assert_eq!(a.read(8, 8), b.read(8, 8), "{op:?} at {off} size {size}");
            }
        }
        assert_eq!(PageBytes::zeroed().fetch(2, 4, FetchOp::Add, 1), None);
    }

    #[test]
    fn updates_from_threads_are_atomic() {
        let page = std::sync::Arc::new(PageBytes::zeroed());
        std::thread::scope(|s| {
            for _ in 0..4 {
                let page = &page;
                s.spawn(move || {
                    for _ in 0..10_000 {
                        page.update(4, 4, |v| v + 1);
                        page.update(8, 8, |v| v + 3);
                        page.fetch(16, 8, FetchOp::Add, 5);
                        page.fetch(28, 4, FetchOp::Add, 1);
                        page.fetch(24, 4, FetchOp::Add, 2);
                    }
                });
            }
        });
        assert_eq!(page.read(4, 4), Some(40_000));
        assert_eq!(page.read(0, 4), Some(0), "the other half is untouched");
        assert_eq!(page.read(8, 8), Some(120_000));
        assert_eq!(page.read(16, 8), Some(200_000));
        assert_eq!(page.read(24, 4), Some(80_000));
        assert_eq!(page.read(28, 4), Some(40_000));
    }
}
