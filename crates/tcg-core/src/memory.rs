//! Sparse, paged guest address space for user-mode emulation.
//!
//! Pages are 4 KiB, carry read/write/execute permissions and are allocated
//! (zero-filled) on first touch, so mapping a large region costs only its
//! bookkeeping. A small direct-mapped software TLB per access kind makes the
//! common case of [`GuestMemory::load`]/[`GuestMemory::store`] a shift, a
//! compare and an index; misses, permission faults and accesses that straddle
//! a page boundary take the slow path.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::BitOr;

/// Size of one guest page in bytes.
pub const PAGE_SIZE: u64 = 4096;

const PAGE_SHIFT: u32 = 12;
const PAGE_MASK: u64 = PAGE_SIZE - 1;
const TLB_ENTRIES: usize = 1024;
const NO_TAG: u64 = u64::MAX;
// Compiled code indexes the TLB with a mask.
const _: () = assert!(TLB_ENTRIES.is_power_of_two());

/// Page permissions: a combination of [`Perms::READ`], [`Perms::WRITE`] and
/// [`Perms::EXEC`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Perms(u8);

impl Perms {
    /// No access at all (`PROT_NONE`).
    pub const NONE: Perms = Perms(0);
    /// Loads are allowed.
    pub const READ: Perms = Perms(1);
    /// Stores are allowed.
    pub const WRITE: Perms = Perms(2);
    /// Instruction fetch is allowed.
    pub const EXEC: Perms = Perms(4);

    /// True if every permission in `other` is also in `self`.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    /// The permission a given access needs.
    pub fn for_access(access: AccessKind) -> Perms {
        match access {
            AccessKind::Read => Perms::READ,
            AccessKind::Write => Perms::WRITE,
            AccessKind::Execute => Perms::EXEC,
        }
    }
}

impl BitOr for Perms {
    type Output = Perms;
    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

impl fmt::Display for Perms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = |p: Perms, c: char| if self.contains(p) { c } else { '-' };
        write!(
            f,
            "{}{}{}",
            flag(Perms::READ, 'r'),
            flag(Perms::WRITE, 'w'),
            flag(Perms::EXEC, 'x')
        )
    }
}

/// The kind of a guest memory access.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessKind {
    /// A data load.
    Read,
    /// A data store.
    Write,
    /// An instruction fetch.
    Execute,
}

/// Why a guest access failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemFaultKind {
    /// No page is mapped at the address (SIGSEGV, `SEGV_MAPERR`).
    Unmapped,
    /// The page is mapped without the needed permission (SIGSEGV, `SEGV_ACCERR`).
    Protection,
    /// The access must be naturally aligned and is not (e.g. atomics; SIGBUS).
    Misaligned,
}

/// A failed guest memory access, reported to the execution loop (never a panic).
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
#[error("{kind:?} fault on {access:?} access at {addr:#x}")]
pub struct MemFault {
    /// The first guest address that could not be accessed.
    pub addr: u64,
    /// What the guest tried to do.
    pub access: AccessKind,
    /// Why it failed.
    pub kind: MemFaultKind,
}

/// Errors of [`GuestMemory::map`], [`GuestMemory::unmap`] and
/// [`GuestMemory::protect`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// The start address is not page aligned.
    #[error("address {addr:#x} is not page aligned")]
    Unaligned {
        /// The offending address.
        addr: u64,
    },
    /// The range wraps around the end of the address space.
    #[error("range {addr:#x} + {len:#x} overflows the address space")]
    Overflow {
        /// Start of the range.
        addr: u64,
        /// Length of the range.
        len: u64,
    },
    /// `protect` found a page in the range that is not mapped (`ENOMEM`).
    #[error("page at {addr:#x} is not mapped")]
    NotMapped {
        /// Start of the first unmapped page.
        addr: u64,
    },
    /// `map` of more than [`GuestMemory::MAX_MAP_LEN`] bytes at once: refused
    /// rather than exhausting host memory on page bookkeeping (`ENOMEM`).
    #[error("mapping of {len:#x} bytes is larger than supported")]
    TooLarge {
        /// The requested length.
        len: u64,
    },
}

/// The bytes of one page. A fixed-size array, so an in-page offset indexes
/// it without a length check on the load/store fast path.
type PageData = [u8; PAGE_SIZE as usize];

/// One mapped page; the bytes are allocated on first touch.
struct Page {
    perms: Perms,
    data: Option<Box<PageData>>,
}

/// One TLB entry. `repr(C)`: compiled code reads `tag` and `host` at the
/// offsets [`JitTlb`] gives.
#[derive(Clone, Copy)]
#[repr(C)]
struct TlbEntry {
    tag: u64,
    /// Host address of the page's bytes (allocated before an entry is
    /// made; entries are dropped before a page's bytes are freed).
    host: usize,
    slot: u32,
}

const EMPTY_TLB: TlbEntry = TlbEntry {
    tag: NO_TAG,
    host: 0,
    slot: 0,
};

/// Where compiled code finds the data TLBs, for its inline access path:
/// entry `(addr >> 12) & (entries - 1)` of a table matches when its `tag`
/// (a u64 at offset [`JitTlb::TAG`]) is `addr >> 12`; its page's bytes
/// are at the host address (a usize at [`JitTlb::HOST`]). The tables stay
/// at these addresses for the life of the [`GuestMemory`]; an entry's
/// host address is valid while the entry is, and nothing changes entries
/// but `&mut GuestMemory` calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JitTlb {
    pub(crate) read: usize,
    pub(crate) write: usize,
}

impl JitTlb {
    pub(crate) const ENTRIES: u64 = TLB_ENTRIES as u64;
    pub(crate) const ENTRY_SIZE: i64 = std::mem::size_of::<TlbEntry>() as i64;
    pub(crate) const TAG: i32 = std::mem::offset_of!(TlbEntry, tag) as i32;
    pub(crate) const HOST: i32 = std::mem::offset_of!(TlbEntry, host) as i32;
    pub(crate) const PAGE_SHIFT: i64 = PAGE_SHIFT as i64;
}

/// A sparse paged guest address space with permissions and a software TLB.
///
/// Every access checks permissions; failures come back as [`MemFault`].
/// Accesses of several bytes may be misaligned and may straddle pages (as
/// user-mode RISC-V Linux allows); they either complete entirely or fault
/// without side effects.
pub struct GuestMemory {
    /// Page number -> slot in `pages`; ordered so gaps can be found.
    index: BTreeMap<u64, u32>,
    /// The same map hashed, for a TLB miss: a large working set misses
    /// often (zstd -9, malloc's hash chains), and a B-tree walk over
    /// thousands of pages cost them 5-15% of a run.
    slot_of_page: hashbrown::HashMap<u64, u32>,
    pages: Vec<Page>,
    free_slots: Vec<u32>,
    tlb_read: Box<[TlbEntry; TLB_ENTRIES]>,
    tlb_write: Box<[TlbEntry; TLB_ENTRIES]>,
    tlb_exec: Box<[TlbEntry; TLB_ENTRIES]>,
}

impl Default for GuestMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for GuestMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestMemory")
            .field("mapped_pages", &self.index.len())
            .finish_non_exhaustive()
    }
}

/// Page-number range `[first, end)` covering `[addr, addr + len)`.
fn page_span(addr: u64, len: u64) -> Result<(u64, u64), MemError> {
    if addr & PAGE_MASK != 0 {
        return Err(MemError::Unaligned { addr });
    }
    let overflow = MemError::Overflow { addr, len };
    let end = addr.checked_add(len).ok_or(overflow.clone())?;
    let end = end.checked_add(PAGE_MASK).ok_or(overflow)?;
    Ok((addr >> PAGE_SHIFT, end >> PAGE_SHIFT))
}

impl GuestMemory {
    /// Largest length one [`GuestMemory::map`] call accepts (16 GiB): each
    /// mapped page costs some host bookkeeping even before it is touched.
    pub const MAX_MAP_LEN: u64 = 1 << 34;

    /// An empty address space.
    pub fn new() -> Self {
        GuestMemory {
            index: BTreeMap::new(),
            slot_of_page: hashbrown::HashMap::new(),
            pages: Vec::new(),
            free_slots: Vec::new(),
            tlb_read: Box::new([EMPTY_TLB; TLB_ENTRIES]),
            tlb_write: Box::new([EMPTY_TLB; TLB_ENTRIES]),
            tlb_exec: Box::new([EMPTY_TLB; TLB_ENTRIES]),
        }
    }

    /// The data TLBs, for compiled code (see [`JitTlb`]).
    pub(crate) fn jit_tlb(&self) -> JitTlb {
        JitTlb {
            read: self.tlb_read.as_ptr() as usize,
            write: self.tlb_write.as_ptr() as usize,
        }
    }

    /// Drops the TLB entries of pages `[first, end)`: one by one for a
    /// range smaller than a table (an mmap, an munmap), else wholesale.
    fn flush_tlb(&mut self, first: u64, end: u64) {
        if end.saturating_sub(first) >= TLB_ENTRIES as u64 {
            self.tlb_read.fill(EMPTY_TLB);
            self.tlb_write.fill(EMPTY_TLB);
            self.tlb_exec.fill(EMPTY_TLB);
            return;
        }
        for vpn in first..end {
            let i = (vpn as usize) % TLB_ENTRIES;
            for table in [&mut self.tlb_read, &mut self.tlb_write, &mut self.tlb_exec] {
                if table[i].tag == vpn {
                    table[i] = EMPTY_TLB;
                }
            }
        }
    }

    /// Maps `[addr, addr + len)` (length rounded up to whole pages) with
    /// `perms`, zero-filled. Pages already mapped there are replaced.
    pub fn map(&mut self, addr: u64, len: u64, perms: Perms) -> Result<(), MemError> {
        let (first, end) = page_span(addr, len)?;
        if len > Self::MAX_MAP_LEN {
            return Err(MemError::TooLarge { len });
        }
        for vpn in first..end {
            let page = Page { perms, data: None };
            match self.slot_of_page.get(&vpn) {
                Some(&slot) => {
                    if let Some(p) = self.pages.get_mut(slot as usize) {
                        *p = page;
                    }
                }
                None => {
                    let slot = match self.free_slots.pop() {
                        Some(slot) => {
                            if let Some(p) = self.pages.get_mut(slot as usize) {
                                *p = page;
                            }
                            slot
                        }
                        None => {
                            self.pages.push(page);
                            // Slot numbers are u32: 2^32 pages = 16 TiB of
                            // touched guest memory, far beyond host memory.
                            u32::try_from(self.pages.len() - 1).unwrap_or(u32::MAX)
                        }
                    };
                    self.index.insert(vpn, slot);
                    self.slot_of_page.insert(vpn, slot);
                }
            }
        }
        self.flush_tlb(first, end);
        Ok(())
    }

    /// Unmaps `[addr, addr + len)`; pages that were not mapped are ignored.
    pub fn unmap(&mut self, addr: u64, len: u64) -> Result<(), MemError> {
        let (first, end) = page_span(addr, len)?;
        let doomed: Vec<u64> = self.index.range(first..end).map(|(&vpn, _)| vpn).collect();
        for vpn in doomed {
            if let Some(slot) = self.index.remove(&vpn) {
                self.slot_of_page.remove(&vpn);
                if let Some(p) = self.pages.get_mut(slot as usize) {
                    p.data = None;
                    p.perms = Perms::NONE;
                }
                self.free_slots.push(slot);
            }
        }
        self.flush_tlb(first, end);
        Ok(())
    }

    /// Changes the permissions of `[addr, addr + len)`. Fails without
    /// changing anything if a page in the range is not mapped.
    pub fn protect(&mut self, addr: u64, len: u64, perms: Perms) -> Result<(), MemError> {
        let (first, end) = page_span(addr, len)?;
        if let Some(vpn) = self.first_hole(first, end) {
            return Err(MemError::NotMapped {
                addr: vpn << PAGE_SHIFT,
            });
        }
        for (_, &slot) in self.index.range(first..end) {
            if let Some(p) = self.pages.get_mut(slot as usize) {
                p.perms = perms;
            }
        }
        self.flush_tlb(first, end);
        Ok(())
    }

    /// First unmapped page number in `[first, end)`, if any.
    fn first_hole(&self, first: u64, end: u64) -> Option<u64> {
        let mut expect = first;
        for (&vpn, _) in self.index.range(first..end) {
            if vpn != expect {
                return Some(expect);
            }
            expect = vpn + 1;
        }
        (expect < end).then_some(expect)
    }

    /// Permissions of the page holding `addr`, `None` if unmapped.
    pub fn perms(&self, addr: u64) -> Option<Perms> {
        let slot = *self.slot_of_page.get(&(addr >> PAGE_SHIFT))?;
        self.pages.get(slot as usize).map(|p| p.perms)
    }

    /// True if every page overlapping `[addr, addr + len)` is mapped
    /// (`len == 0` is trivially mapped).
    pub fn is_range_mapped(&self, addr: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(last) = addr.checked_add(len - 1) else {
            return false;
        };
        self.first_hole(addr >> PAGE_SHIFT, (last >> PAGE_SHIFT) + 1)
            .is_none()
    }

    /// The lowest page-aligned address `a` in `[lo, hi)` such that
    /// `[a, a + len)` lies in `[lo, hi)` and is entirely unmapped.
    pub fn find_free(&self, len: u64, lo: u64, hi: u64) -> Option<u64> {
        if len == 0 || hi <= lo {
            return None;
        }
        let pages = len.checked_add(PAGE_MASK)? >> PAGE_SHIFT;
        let first = lo.checked_add(PAGE_MASK)? >> PAGE_SHIFT;
        let end = hi >> PAGE_SHIFT;
        let mut candidate = first;
        for (&vpn, _) in self.index.range(first..end) {
            if vpn.checked_sub(candidate)? >= pages {
                break;
            }
            candidate = vpn + 1;
        }
        let fits = candidate.checked_add(pages).is_some_and(|e| e <= end);
        fits.then_some(candidate << PAGE_SHIFT)
    }

    /// Number of mapped pages.
    pub fn mapped_pages(&self) -> usize {
        self.index.len()
    }

    /// Resolves a page for `access`; with `check` false only the mapping is
    /// required (the loader writes read-only segments this way).
    fn page_slot(&mut self, addr: u64, access: AccessKind, check: bool) -> Result<u32, MemFault> {
        let fault = |kind| MemFault { addr, access, kind };
        let slot = *self
            .slot_of_page
            .get(&(addr >> PAGE_SHIFT))
            .ok_or(fault(MemFaultKind::Unmapped))?;
        let page = self
            .pages
            .get_mut(slot as usize)
            .ok_or(fault(MemFaultKind::Unmapped))?;
        if check && !page.perms.contains(Perms::for_access(access)) {
            return Err(fault(MemFaultKind::Protection));
        }
        if page.data.is_none() {
            // Through a zeroed `Vec` (calloc) rather than a 4 KiB stack temporary.
            page.data = vec![0u8; PAGE_SIZE as usize]
                .into_boxed_slice()
                .try_into()
                .ok();
        }
        Ok(slot)
    }

    /// Slow path: resolve (and cache in the TLB) the page for a checked access.
    fn fill_tlb(&mut self, addr: u64, access: AccessKind) -> Result<u32, MemFault> {
        let slot = self.page_slot(addr, access, true)?;
        let vpn = addr >> PAGE_SHIFT;
        let host = self.page_data(slot).map_or(0, |p| p.as_ptr() as usize);
        let entry = TlbEntry {
            tag: vpn,
            host,
            slot,
        };
        let i = (vpn as usize) % TLB_ENTRIES;
        if host == 0 {
            // No bytes (cannot happen: `page_slot` allocates them), so no
            // entry compiled code could follow.
            return Ok(slot);
        }
        match access {
            AccessKind::Read => self.tlb_read[i] = entry,
            AccessKind::Write => self.tlb_write[i] = entry,
            AccessKind::Execute => self.tlb_exec[i] = entry,
        }
        Ok(slot)
    }

    #[inline(always)]
    fn lookup(&mut self, addr: u64, access: AccessKind) -> Result<u32, MemFault> {
        let vpn = addr >> PAGE_SHIFT;
        let i = (vpn as usize) % TLB_ENTRIES;
        let entry = match access {
            AccessKind::Read => self.tlb_read[i],
            AccessKind::Write => self.tlb_write[i],
            AccessKind::Execute => self.tlb_exec[i],
        };
        if entry.tag == vpn {
            Ok(entry.slot)
        } else {
            self.fill_tlb(addr, access)
        }
    }

    fn page_bytes(&self, slot: u32) -> &[u8] {
        match self.page_data(slot) {
            Some(bytes) => bytes,
            None => &[],
        }
    }

    #[inline(always)]
    fn page_data(&self, slot: u32) -> Option<&PageData> {
        self.pages
            .get(slot as usize)
            .and_then(|p| p.data.as_deref())
    }

    #[inline(always)]
    fn page_data_mut(&mut self, slot: u32) -> Option<&mut PageData> {
        self.pages
            .get_mut(slot as usize)
            .and_then(|p| p.data.as_deref_mut())
    }

    fn page_bytes_mut(&mut self, slot: u32) -> &mut [u8] {
        match self
            .pages
            .get_mut(slot as usize)
            .and_then(|p| p.data.as_deref_mut())
        {
            Some(bytes) => bytes.as_mut_slice(),
            None => &mut [],
        }
    }

    /// Validates a multi-page access before any byte moves, so a faulting
    /// access has no partial effect. Returns the first page's slot.
    fn check_span(
        &mut self,
        addr: u64,
        len: usize,
        access: AccessKind,
        check: bool,
    ) -> Result<(), MemFault> {
        if len == 0 {
            return Ok(());
        }
        let last = addr.checked_add(len as u64 - 1).ok_or(MemFault {
            addr,
            access,
            kind: MemFaultKind::Unmapped,
        })?;
        let mut page = addr & !PAGE_MASK;
        loop {
            let at = page.max(addr);
            if check {
                self.lookup(at, access)?;
            } else {
                self.page_slot(at, access, false)?;
            }
            if page >= last & !PAGE_MASK {
                return Ok(());
            }
            page += PAGE_SIZE;
        }
    }

    fn copy_out(&mut self, addr: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemFault> {
        self.check_span(addr, buf.len(), access, true)?;
        let mut done = 0;
        while done < buf.len() {
            let at = addr + done as u64;
            let slot = self.lookup(at, access)?;
            let off = (at & PAGE_MASK) as usize;
            let n = (PAGE_SIZE as usize - off).min(buf.len() - done);
            let src = self.page_bytes(slot);
            if let (Some(dst), Some(src)) = (buf.get_mut(done..done + n), src.get(off..off + n)) {
                dst.copy_from_slice(src);
            }
            done += n;
        }
        Ok(())
    }

    fn copy_in(&mut self, addr: u64, data: &[u8], check: bool) -> Result<(), MemFault> {
        let access = AccessKind::Write;
        self.check_span(addr, data.len(), access, check)?;
        let mut done = 0;
        while done < data.len() {
            let at = addr + done as u64;
            let slot = if check {
                self.lookup(at, access)?
            } else {
                self.page_slot(at, access, false)?
            };
            let off = (at & PAGE_MASK) as usize;
            let n = (PAGE_SIZE as usize - off).min(data.len() - done);
            let dst = self.page_bytes_mut(slot);
            if let (Some(dst), Some(src)) = (dst.get_mut(off..off + n), data.get(done..done + n)) {
                dst.copy_from_slice(src);
            }
            done += n;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `addr`; needs READ on every page.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.copy_out(addr, buf, AccessKind::Read)
    }

    /// Writes `data` at `addr`; needs WRITE on every page. Nothing is written
    /// if any page faults.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.copy_in(addr, data, true)
    }

    /// Writes `data` at `addr` ignoring permissions (for loaders filling
    /// read-only segments); the pages must still be mapped.
    pub fn write_initial(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.copy_in(addr, data, false)
    }

    /// Reads instruction bytes at `addr`; needs EXEC on every page.
    pub fn fetch(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.copy_out(addr, buf, AccessKind::Execute)
    }

    /// Loads a little-endian value of `size` (1, 2, 4 or 8) bytes,
    /// zero-extended. Misaligned addresses are allowed. Another `size` is
    /// treated as 8.
    #[inline]
    pub fn load(&mut self, addr: u64, size: u8) -> Result<u64, MemFault> {
        let off = (addr & PAGE_MASK) as usize;
        // Fast path: a warm TLB entry and an access within the page (the
        // fixed-size page makes that one compare); anything else, including
        // a page-straddling access, goes the slow way.
        let vpn = addr >> PAGE_SHIFT;
        let entry = self.tlb_read[(vpn as usize) % TLB_ENTRIES];
        if entry.tag == vpn
            && let Some(v) = self
                .page_data(entry.slot)
                .and_then(|p| read_le(p, off, size))
        {
            return Ok(v);
        }
        self.load_slow(addr, size)
    }

    #[inline(never)]
    fn load_slow(&mut self, addr: u64, size: u8) -> Result<u64, MemFault> {
        let n = size_bytes(size);
        let off = (addr & PAGE_MASK) as usize;
        if off + n <= PAGE_SIZE as usize {
            // A TLB miss: fill the entry and read in place.
            let slot = self.fill_tlb(addr, AccessKind::Read)?;
            if let Some(v) = self.page_data(slot).and_then(|p| read_le(p, off, size)) {
                return Ok(v);
            }
        }
        let mut buf = [0u8; 8];
        let dst = buf.get_mut(..n).unwrap_or_default();
        self.copy_out(addr, dst, AccessKind::Read)?;
        Ok(u64::from_le_bytes(buf))
    }

    /// Stores the low `size` (1, 2, 4 or 8) bytes of `value`, little-endian.
    /// Misaligned addresses are allowed. Another `size` is treated as 8.
    #[inline]
    pub fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        let off = (addr & PAGE_MASK) as usize;
        let vpn = addr >> PAGE_SHIFT;
        let entry = self.tlb_write[(vpn as usize) % TLB_ENTRIES];
        if entry.tag == vpn
            && let Some(page) = self.page_data_mut(entry.slot)
            && write_le(page, off, size, value)
        {
            return Ok(());
        }
        self.store_slow(addr, size, value)
    }

    #[inline(never)]
    fn store_slow(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        let off = (addr & PAGE_MASK) as usize;
        if off + size_bytes(size) <= PAGE_SIZE as usize {
            let slot = self.fill_tlb(addr, AccessKind::Write)?;
            if let Some(page) = self.page_data_mut(slot)
                && write_le(page, off, size, value)
            {
                return Ok(());
            }
        }
        let bytes = value.to_le_bytes();
        let src = bytes.get(..size_bytes(size)).unwrap_or_default();
        self.copy_in(addr, src, true)
    }

    /// Reads a NUL-terminated string at `addr` (the NUL is not included),
    /// scanning at most `max` bytes; a string without NUL within `max` bytes
    /// is returned truncated to `max` bytes.
    pub fn read_cstr(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, MemFault> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let slot = self.lookup(at, AccessKind::Read)?;
            let off = (at & PAGE_MASK) as usize;
            let want = (PAGE_SIZE as usize - off).min(max - out.len());
            let chunk = self
                .page_bytes(slot)
                .get(off..off + want)
                .unwrap_or_default();
            if let Some(nul) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(chunk.get(..nul).unwrap_or_default());
                return Ok(out);
            }
            out.extend_from_slice(chunk);
            at = match at.checked_add(want as u64) {
                Some(next) => next,
                None => {
                    return Err(MemFault {
                        addr: at,
                        access: AccessKind::Read,
                        kind: MemFaultKind::Unmapped,
                    });
                }
            };
        }
        Ok(out)
    }
}

#[inline(always)]
fn size_bytes(size: u8) -> usize {
    match size {
        1 => 1,
        2 => 2,
        4 => 4,
        _ => 8,
    }
}

/// Reads `size` bytes at `off` of a page; `None` if they do not fit in it.
/// Fixed-width reads per size, so each compiles to one host load.
#[inline(always)]
fn read_le(page: &PageData, off: usize, size: u8) -> Option<u64> {
    Some(match size {
        1 => u64::from(*page.get(off)?),
        2 => u64::from(u16::from_le_bytes(*page.get(off..)?.first_chunk()?)),
        4 => u64::from(u32::from_le_bytes(*page.get(off..)?.first_chunk()?)),
        _ => u64::from_le_bytes(*page.get(off..)?.first_chunk()?),
    })
}

/// Writes the low `size` bytes of `value` at `off` of a page; false (and
/// nothing written) if they do not fit in it.
#[inline(always)]
fn write_le(page: &mut PageData, off: usize, size: u8, value: u64) -> bool {
    fn put<const N: usize>(page: &mut PageData, off: usize, bytes: [u8; N]) -> bool {
        match page.get_mut(off..).and_then(|p| p.first_chunk_mut::<N>()) {
            Some(dst) => {
                *dst = bytes;
                true
            }
            None => false,
        }
    }
    match size {
        1 => put(page, off, [value as u8]),
        2 => put(page, off, (value as u16).to_le_bytes()),
        4 => put(page, off, (value as u32).to_le_bytes()),
        _ => put(page, off, value.to_le_bytes()),
    }
}
