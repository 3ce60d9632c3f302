//! The guest address-space layout and the memory syscalls' semantics:
//! brk, mmap, munmap, mprotect, mremap (on top of tcg-core's `GuestMemory`).
//!
//! Addresses follow qemu-riscv64 where that is cheap (stack just below
//! 0x40_0080_1000, mmap area from 0x40_0080_2000 upwards, brk right after the
//! highest segment) so address-dependent output looks alike; no fixture
//! depends on them.

use tcgkit_tcg_core::{GuestMemory, PAGE_SIZE, Perms};

use crate::abi::{errno, mman};

/// Base of the area qemu-riscv64 uses for the stack and mmap (`TASK_UNMAPPED_BASE`).
pub(crate) const TASK_UNMAPPED_BASE: u64 = 0x40_0000_0000;
/// Guest stack size (qemu's default, like `ulimit -s` 8 MiB).
pub(crate) const STACK_SIZE: u64 = 8 << 20;
/// The lowest address of the stack (one guard page above `TASK_UNMAPPED_BASE`).
pub(crate) const STACK_BOTTOM: u64 = TASK_UNMAPPED_BASE + PAGE_SIZE;
/// One past the highest stack byte.
pub(crate) const STACK_TOP: u64 = STACK_BOTTOM + STACK_SIZE;
/// Where anonymous mappings start (qemu keeps one page above the stack for
/// its signal trampoline).
pub(crate) const MMAP_BASE: u64 = STACK_TOP + PAGE_SIZE;
/// End of the guest's user address space (Sv48 user half).
pub(crate) const ADDRESS_SPACE_END: u64 = 0x8000_0000_0000;
/// Most guest memory mapped at once. Pages are allocated lazily, but the
/// page index is not, so this bounds what a hostile guest can make the host
/// allocate.
pub(crate) const MAX_MAPPED_BYTES: u64 = 16 << 30;

/// Rounds up to a page boundary (`None` on overflow).
pub(crate) fn page_up(value: u64) -> Option<u64> {
    value
        .checked_add(PAGE_SIZE - 1)
        .map(|v| v & !(PAGE_SIZE - 1))
}

/// Rounds down to a page boundary.
pub(crate) fn page_down(value: u64) -> u64 {
    value & !(PAGE_SIZE - 1)
}

/// `PROT_*` bits as page permissions (Linux makes write imply read on RISC-V
/// and every readable page is readable for instruction fetch only with X).
pub(crate) fn prot_to_perms(prot: u64) -> Perms {
    let mut perms = Perms::NONE;
    if prot & mman::PROT_READ != 0 {
        perms = perms | Perms::READ;
    }
    if prot & mman::PROT_WRITE != 0 {
        perms = perms | Perms::READ | Perms::WRITE;
    }
    if prot & mman::PROT_EXEC != 0 {
        perms = perms | Perms::EXEC;
    }
    perms
}

/// The brk and mmap bookkeeping of one process.
#[derive(Debug)]
pub(crate) struct AddressSpace {
    /// Where the heap starts (page-aligned end of the highest segment).
    brk_start: u64,
    /// The current break as the guest sees it.
    brk: u64,
    /// End of the pages mapped for the heap.
    brk_mapped_end: u64,
}

/// What a memory syscall changed that the execution engine must know.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CodeChange {
    /// A range whose translated code must be dropped.
    pub(crate) invalidate: Option<(u64, u64)>,
}

impl AddressSpace {
    /// Bookkeeping for a process whose segments end at `image_end`.
    pub(crate) fn new(image_end: u64) -> AddressSpace {
        let start = page_up(image_end).unwrap_or(image_end);
        AddressSpace {
            brk_start: start,
            brk: start,
            brk_mapped_end: start,
        }
    }

    /// The initial break.
    #[cfg(test)]
    pub(crate) fn brk_start(&self) -> u64 {
        self.brk_start
    }

    /// `brk(addr)`: returns the new break, or the unchanged one on failure
    /// (Linux reports failure that way, not with an errno).
    pub(crate) fn brk(&mut self, mem: &mut GuestMemory, addr: u64) -> u64 {
        if addr < self.brk_start {
            return self.brk;
        }
        let Some(want_end) = page_up(addr) else {
            return self.brk;
        };
        if want_end > self.brk_mapped_end {
            let grow = want_end - self.brk_mapped_end;
            if !self.is_free(mem, self.brk_mapped_end, grow) || !within_budget(mem, grow) {
                return self.brk;
            }
            if mem
                .map(self.brk_mapped_end, grow, Perms::READ | Perms::WRITE)
                .is_err()
            {
                return self.brk;
            }
        } else if want_end < self.brk_mapped_end {
            // Shrinking frees the pages; growing again gets zeroed ones.
            let _ = mem.unmap(want_end, self.brk_mapped_end - want_end);
        }
        self.brk_mapped_end = want_end;
        self.brk = addr;
        self.brk
    }

    fn is_free(&self, mem: &GuestMemory, addr: u64, len: u64) -> bool {
        mem.find_free(len, addr, addr.saturating_add(len)) == Some(addr)
    }

    /// `mmap` of an anonymous or already-read file range: picks the address,
    /// maps `len` bytes zero-filled with `perms` and returns the address.
    /// `contents` (file data) is copied to the start of the mapping.
    pub(crate) fn mmap(
        &mut self,
        mem: &mut GuestMemory,
        hint: u64,
        len: u64,
        prot: u64,
        flags: u64,
        contents: &[u8],
    ) -> Result<(u64, CodeChange), i32> {
        if len == 0
            || !hint.is_multiple_of(PAGE_SIZE)
                && flags & (mman::MAP_FIXED | mman::MAP_FIXED_NOREPLACE) != 0
        {
            return Err(errno::EINVAL);
        }
        let len = page_up(len).ok_or(errno::ENOMEM)?;
        if len > ADDRESS_SPACE_END {
            return Err(errno::ENOMEM);
        }
        let mut change = CodeChange::default();
        let addr = if flags & mman::MAP_FIXED != 0 {
            let end = hint.checked_add(len).ok_or(errno::ENOMEM)?;
            if end > ADDRESS_SPACE_END {
                return Err(errno::ENOMEM);
            }
            change.invalidate = Some((hint, len));
            hint
        } else if flags & mman::MAP_FIXED_NOREPLACE != 0 {
            let end = hint.checked_add(len).ok_or(errno::ENOMEM)?;
            if end > ADDRESS_SPACE_END {
                return Err(errno::ENOMEM);
            }
            if !self.is_free(mem, hint, len) {
                return Err(errno::EEXIST);
            }
            hint
        } else {
            let hinted = page_down(hint);
            if hint != 0
                && hinted >= self.brk_mapped_end
                && hinted
                    .checked_add(len)
                    .is_some_and(|e| e <= ADDRESS_SPACE_END)
                && self.is_free(mem, hinted, len)
            {
                hinted
            } else {
                mem.find_free(len, MMAP_BASE, ADDRESS_SPACE_END)
                    .ok_or(errno::ENOMEM)?
            }
        };
        if !within_budget(mem, len) {
            return Err(errno::ENOMEM);
        }
        let perms = prot_to_perms(prot);
        mem.map(addr, len, perms).map_err(|_| errno::ENOMEM)?;
        if !contents.is_empty() {
            mem.write_initial(addr, contents)
                .map_err(|_| errno::EFAULT)?;
        }
        Ok((addr, change))
    }

    /// `munmap(addr, len)`.
    pub(crate) fn munmap(
        &mut self,
        mem: &mut GuestMemory,
        addr: u64,
        len: u64,
    ) -> Result<CodeChange, i32> {
        if !addr.is_multiple_of(PAGE_SIZE) || len == 0 {
            return Err(errno::EINVAL);
        }
        let len = page_up(len).ok_or(errno::EINVAL)?;
        if addr
            .checked_add(len)
            .is_none_or(|end| end > ADDRESS_SPACE_END)
        {
            return Err(errno::EINVAL);
        }
        mem.unmap(addr, len).map_err(|_| errno::EINVAL)?;
        Ok(CodeChange {
            invalidate: Some((addr, len)),
        })
    }

    /// `mprotect(addr, len, prot)`: `ENOMEM` if part of the range is unmapped.
    pub(crate) fn mprotect(
        &mut self,
        mem: &mut GuestMemory,
        addr: u64,
        len: u64,
        prot: u64,
    ) -> Result<CodeChange, i32> {
        if !addr.is_multiple_of(PAGE_SIZE) || prot & !7 != 0 {
            return Err(errno::EINVAL);
        }
        if len == 0 {
            return Ok(CodeChange::default());
        }
        let len = page_up(len).ok_or(errno::ENOMEM)?;
        if addr.checked_add(len).is_none() {
            return Err(errno::ENOMEM);
        }
        if !mem.is_range_mapped(addr, len) {
            return Err(errno::ENOMEM);
        }
        mem.protect(addr, len, prot_to_perms(prot))
            .map_err(|_| errno::ENOMEM)?;
        Ok(CodeChange {
            invalidate: Some((addr, len)),
        })
    }

    /// `mremap(old, old_len, new_len, flags, new_addr)`.
    pub(crate) fn mremap(
        &mut self,
        mem: &mut GuestMemory,
        old: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        new_addr: u64,
    ) -> Result<(u64, CodeChange), i32> {
        if !old.is_multiple_of(PAGE_SIZE)
            || flags & !(mman::MREMAP_MAYMOVE | mman::MREMAP_FIXED | mman::MREMAP_DONTUNMAP) != 0
            || flags & mman::MREMAP_FIXED != 0 && flags & mman::MREMAP_MAYMOVE == 0
            || new_len == 0
        {
            return Err(errno::EINVAL);
        }
        if flags & mman::MREMAP_DONTUNMAP != 0 {
            // Only meaningful with userfaultfd, which the guest cannot have.
            return Err(errno::EINVAL);
        }
        let old_len = page_up(old_len).ok_or(errno::EINVAL)?;
        let new_len = page_up(new_len).ok_or(errno::ENOMEM)?;
        // The old range must be one mapping: mapped throughout with one set
        // of permissions (Linux says EFAULT otherwise).
        let check_len = old_len.max(PAGE_SIZE);
        if old.checked_add(check_len).is_none() || !mem.is_range_mapped(old, check_len) {
            return Err(errno::EFAULT);
        }
        let perms = mem.perms(old).ok_or(errno::EFAULT)?;
        let uniform =
            (0..check_len / PAGE_SIZE).all(|i| mem.perms(old + i * PAGE_SIZE) == Some(perms));
        if !uniform {
            return Err(errno::EFAULT);
        }
        let invalidate = Some((old, old_len));
        if flags & mman::MREMAP_FIXED != 0 {
            if !new_addr.is_multiple_of(PAGE_SIZE)
                || new_addr
                    .checked_add(new_len)
                    .is_none_or(|e| e > ADDRESS_SPACE_END)
            {
                return Err(errno::EINVAL);
            }
            let overlaps = new_addr < old + old_len && old < new_addr + new_len;
            if overlaps {
                return Err(errno::EINVAL);
            }
            let _ = mem.unmap(new_addr, new_len);
            self.move_pages(mem, old, old_len, new_addr, new_len, perms)?;
            return Ok((new_addr, CodeChange { invalidate }));
        }
        if new_len <= old_len {
            if new_len < old_len {
                let _ = mem.unmap(old + new_len, old_len - new_len);
            }
            return Ok((old, CodeChange { invalidate }));
        }
        let tail = old + old_len;
        let grow = new_len - old_len;
        if tail
            .checked_add(grow)
            .is_some_and(|e| e <= ADDRESS_SPACE_END)
            && self.is_free(mem, tail, grow)
        {
            if !within_budget(mem, grow) {
                return Err(errno::ENOMEM);
            }
            mem.map(tail, grow, perms).map_err(|_| errno::ENOMEM)?;
            return Ok((old, CodeChange::default()));
        }
        if flags & mman::MREMAP_MAYMOVE == 0 {
            return Err(errno::ENOMEM);
        }
        let target = mem
            .find_free(new_len, MMAP_BASE, ADDRESS_SPACE_END)
            .ok_or(errno::ENOMEM)?;
        self.move_pages(mem, old, old_len, target, new_len, perms)?;
        Ok((target, CodeChange { invalidate }))
    }

    /// Copies `[old, old + old_len)` to a fresh mapping at `target` of
    /// `new_len` bytes, then unmaps the old range.
    fn move_pages(
        &mut self,
        mem: &mut GuestMemory,
        old: u64,
        old_len: u64,
        target: u64,
        new_len: u64,
        perms: Perms,
    ) -> Result<(), i32> {
        if !within_budget(mem, new_len) {
            return Err(errno::ENOMEM);
        }
        mem.map(target, new_len, Perms::READ | Perms::WRITE)
            .map_err(|_| errno::ENOMEM)?;
        // Reading may need READ permission the old pages lack; they are
        // going away, so lend it to them.
        mem.protect(old, old_len, Perms::READ)
            .map_err(|_| errno::EFAULT)?;
        let mut chunk = vec![0u8; 64 * 1024];
        let copy_len = old_len.min(new_len);
        let mut done = 0;
        while done < copy_len {
            let n = (copy_len - done).min(chunk.len() as u64) as usize;
            let buf = &mut chunk[..n];
            mem.read(old + done, buf).map_err(|_| errno::EFAULT)?;
            mem.write_initial(target + done, buf)
                .map_err(|_| errno::EFAULT)?;
            done += n as u64;
        }
        mem.protect(target, new_len, perms)
            .map_err(|_| errno::ENOMEM)?;
        mem.unmap(old, old_len).map_err(|_| errno::EINVAL)?;
        Ok(())
    }
}

fn within_budget(mem: &GuestMemory, extra: u64) -> bool {
    let mapped = mem.mapped_pages() as u64 * PAGE_SIZE;
    mapped.saturating_add(extra) <= MAX_MAPPED_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: u64 = mman::PROT_READ | mman::PROT_WRITE;
    const ANON: u64 = mman::MAP_PRIVATE | mman::MAP_ANONYMOUS;

    #[test]
    fn brk_grows_zeroed_and_shrinks() {
        let mut mem = GuestMemory::new();
        let mut space = AddressSpace::new(0x7d_b00);
        assert_eq!(space.brk_start(), 0x7e_000);
        assert_eq!(space.brk(&mut mem, 0), 0x7e_000);
        assert_eq!(space.brk(&mut mem, 0x7e_b00), 0x7e_b00);
        mem.store(0x7e_aff, 1, 0xaa).expect("heap is writable");
        assert_eq!(space.brk(&mut mem, 0x90_000), 0x90_000);
        assert_eq!(mem.load(0x8f_fff, 1), Ok(0));
        // Shrinking releases pages; growing again yields zeroes.
        assert_eq!(space.brk(&mut mem, 0x7f_000), 0x7f_000);
        assert!(mem.load(0x80_000, 1).is_err());
        assert_eq!(space.brk(&mut mem, 0x81_000), 0x81_000);
        assert_eq!(mem.load(0x80_000, 1), Ok(0));
        // Below the start or colliding with a mapping: unchanged break.
        assert_eq!(space.brk(&mut mem, 0x1000), 0x81_000);
        mem.map(0x100_000, PAGE_SIZE, Perms::READ).expect("map");
        assert_eq!(space.brk(&mut mem, 0x200_000), 0x81_000);
        assert_eq!(space.brk(&mut mem, u64::MAX), 0x81_000);
    }

    #[test]
    fn mmap_places_and_validates() {
        let mut mem = GuestMemory::new();
        let mut space = AddressSpace::new(0x10_000);
        let (a, _) = space
            .mmap(&mut mem, 0, 3 * PAGE_SIZE, RW, ANON, &[])
            .expect("mmap");
        assert_eq!(a, MMAP_BASE);
        let (b, _) = space.mmap(&mut mem, 0, 1, RW, ANON, b"hi").expect("mmap");
        assert_eq!(b, MMAP_BASE + 3 * PAGE_SIZE);
        assert_eq!(mem.load(b, 2), Ok(u64::from(u16::from_le_bytes(*b"hi"))));
        assert_eq!(
            space.mmap(&mut mem, 0, 0, RW, ANON, &[]),
            Err(errno::EINVAL)
        );
        assert_eq!(
            space.mmap(&mut mem, 0, u64::MAX, RW, ANON, &[]),
            Err(errno::ENOMEM)
        );
        let fixed = 0x2_0000_0000;
        let noreplace = ANON | mman::MAP_FIXED_NOREPLACE;
        assert_eq!(
            space
                .mmap(&mut mem, fixed, 10, RW, noreplace, &[])
                .map(|r| r.0),
            Ok(fixed)
        );
        assert_eq!(
            space.mmap(&mut mem, fixed, 10, RW, noreplace, &[]),
            Err(errno::EEXIST)
        );
        assert_eq!(
            space.mmap(&mut mem, fixed + 1, 10, RW, ANON | mman::MAP_FIXED, &[]),
            Err(errno::EINVAL)
        );
        // MAP_FIXED replaces and asks for code invalidation.
        let (c, change) = space
            .mmap(
                &mut mem,
                fixed,
                10,
                mman::PROT_READ,
                ANON | mman::MAP_FIXED,
                &[],
            )
            .expect("fixed");
        assert_eq!((c, change.invalidate), (fixed, Some((fixed, PAGE_SIZE))));
        assert_eq!(mem.perms(fixed), Some(Perms::READ));
        // A free hint is honoured.
        let hint = 0x3_0000_0000;
        assert_eq!(
            space.mmap(&mut mem, hint, 1, RW, ANON, &[]).map(|r| r.0),
            Ok(hint)
        );
        // Too much memory at once.
        assert_eq!(
            space.mmap(&mut mem, 0, MAX_MAPPED_BYTES + PAGE_SIZE, RW, ANON, &[]),
            Err(errno::ENOMEM)
        );
    }

    #[test]
    fn munmap_and_mprotect_errors() {
        let mut mem = GuestMemory::new();
        let mut space = AddressSpace::new(0x10_000);
        let (a, _) = space
            .mmap(&mut mem, 0, 2 * PAGE_SIZE, RW, ANON, &[])
            .expect("mmap");
        assert_eq!(space.mprotect(&mut mem, a + 1, 1, 1), Err(errno::EINVAL));
        assert_eq!(space.mprotect(&mut mem, a, 1, 8), Err(errno::EINVAL));
        assert_eq!(
            space.mprotect(&mut mem, a, 3 * PAGE_SIZE, 1),
            Err(errno::ENOMEM)
        );
        assert!(space.mprotect(&mut mem, a, PAGE_SIZE, 1).is_ok());
        assert!(mem.store(a, 1, 1).is_err());
        assert!(mem.store(a + PAGE_SIZE, 1, 1).is_ok());
        assert_eq!(space.munmap(&mut mem, a + 1, 1), Err(errno::EINVAL));
        assert_eq!(space.munmap(&mut mem, a, 0), Err(errno::EINVAL));
        assert!(space.munmap(&mut mem, a, 2 * PAGE_SIZE).is_ok());
        assert!(!mem.is_range_mapped(a, 1));
        // Unmapping nothing is fine.
        assert!(space.munmap(&mut mem, a, PAGE_SIZE).is_ok());
    }

    #[test]
    fn mremap_grows_moves_and_refuses_split_ranges() {
        let mut mem = GuestMemory::new();
        let mut space = AddressSpace::new(0x10_000);
        let (a, _) = space
            .mmap(&mut mem, 0, 3 * PAGE_SIZE, RW, ANON, &[])
            .expect("mmap");
        let (_b, _) = space
            .mmap(&mut mem, 0, PAGE_SIZE, RW, ANON, &[])
            .expect("blocker");
        mem.store(a, 1, 1).expect("store");
        mem.store(a + 3 * PAGE_SIZE - 1, 1, 2).expect("store");
        // Cannot grow in place (blocked) without MAYMOVE.
        assert_eq!(
            space.mremap(&mut mem, a, 3 * PAGE_SIZE, 8 * PAGE_SIZE, 0, 0),
            Err(errno::ENOMEM)
        );
        let (moved, _) = space
            .mremap(
                &mut mem,
                a,
                3 * PAGE_SIZE,
                8 * PAGE_SIZE,
                mman::MREMAP_MAYMOVE,
                0,
            )
            .expect("move");
        assert_ne!(moved, a);
        assert_eq!(mem.load(moved, 1), Ok(1));
        assert_eq!(mem.load(moved + 3 * PAGE_SIZE - 1, 1), Ok(2));
        assert_eq!(mem.load(moved + 8 * PAGE_SIZE - 1, 1), Ok(0));
        assert!(!mem.is_range_mapped(a, 1));
        // Shrink in place.
        assert_eq!(
            space
                .mremap(&mut mem, moved, 8 * PAGE_SIZE, PAGE_SIZE, 0, 0)
                .map(|r| r.0),
            Ok(moved)
        );
        assert!(!mem.is_range_mapped(moved + PAGE_SIZE, 1));
        // Grow in place into the freed tail.
        assert_eq!(
            space
                .mremap(&mut mem, moved, PAGE_SIZE, 2 * PAGE_SIZE, 0, 0)
                .map(|r| r.0),
            Ok(moved)
        );
        // A range with two permission sets is two mappings: EFAULT.
        space
            .mprotect(&mut mem, moved, PAGE_SIZE, mman::PROT_READ)
            .expect("mprotect");
        assert_eq!(
            space.mremap(
                &mut mem,
                moved,
                2 * PAGE_SIZE,
                4 * PAGE_SIZE,
                mman::MREMAP_MAYMOVE,
                0
            ),
            Err(errno::EFAULT)
        );
        assert_eq!(
            space.mremap(&mut mem, 0x1234_5000, PAGE_SIZE, 2 * PAGE_SIZE, 1, 0),
            Err(errno::EFAULT)
        );
        assert_eq!(
            space.mremap(&mut mem, moved + 1, PAGE_SIZE, 2 * PAGE_SIZE, 1, 0),
            Err(errno::EINVAL)
        );
    }
}
