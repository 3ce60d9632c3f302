//! Sparse, paged guest address space for user-mode emulation.
//!
//! Pages are 4 KiB, carry read/write/execute permissions and are allocated
//! (zero-filled) on first touch, so mapping a large region costs only its
//! bookkeeping. A small direct-mapped software TLB per access kind makes the
//! common case of [`GuestMemory::load`]/[`GuestMemory::store`] a shift, a
//! compare and an index; misses, permission faults and accesses that straddle
//! a page boundary take the slow path. The threads of one guest process
//! share an address space, each through a view of its own
//! ([`GuestMemory::share`]); `page.rs` says how their accesses to the same
//! bytes stay atomic.

mod page;

use std::collections::BTreeSet;
use std::fmt;
use std::ops::BitOr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use page::FetchOp;
use page::{PageBytes, size_bytes};

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

/// One mapped page; the bytes are allocated on first touch.
struct Page {
    perms: Perms,
    data: Option<Arc<PageBytes>>,
}

/// One TLB entry. `repr(C)`: compiled code reads `tag` and `host` at the
/// offsets [`JitTlb`] gives.
#[repr(C)]
struct TlbEntry {
    tag: u64,
    /// Host address of the page's bytes, which `page` keeps alive.
    host: usize,
    page: Option<Arc<PageBytes>>,
}

const EMPTY_TLB: TlbEntry = TlbEntry {
    tag: NO_TAG,
    host: 0,
    page: None,
};

type Tlb = Box<[TlbEntry; TLB_ENTRIES]>;

fn empty_tlb() -> Tlb {
    Box::new([const { EMPTY_TLB }; TLB_ENTRIES])
}

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

/// The page tables of an address space, shared by its views.
#[derive(Default)]
struct Layout {
    /// Mapped page numbers, ordered so gaps can be found.
    index: BTreeSet<u64>,
    /// The same pages hashed, for a TLB miss: a large working set misses
    /// often (zstd -9, malloc's hash chains), and a B-tree walk over
    /// thousands of pages cost them 5-15% of a run.
    pages: hashbrown::HashMap<u64, Page>,
}

/// An address space: its layout, and a count of the changes made to it
/// (each view drops its TLB when it sees the count move).
#[derive(Default)]
struct Space {
    layout: RwLock<Layout>,
    changes: AtomicU64,
}

impl Space {
    fn read(&self) -> RwLockReadGuard<'_, Layout> {
        // A panic while holding the lock leaves the layout consistent
        // (every change is a whole-page update), so a poisoned lock is
        // still usable.
        self.layout.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Layout> {
        self.layout.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A sparse paged guest address space with permissions and a software TLB.
///
/// Every access checks permissions; failures come back as [`MemFault`].
/// Accesses of several bytes may be misaligned and may straddle pages (as
/// user-mode RISC-V Linux allows); they either complete entirely or fault
/// without side effects.
///
/// Threads of one guest process each use their own view of one address
/// space ([`GuestMemory::share`]): the pages and their bytes are common,
/// the TLBs are the view's own. A view sees another's `map`, `unmap` and
/// `protect` at its next [`GuestMemory::sync`] (the engine syncs between
/// blocks); until then a stale TLB entry still reaches the old bytes,
/// which it keeps alive, so no access ever touches freed memory.
pub struct GuestMemory {
    space: Arc<Space>,
    /// `space.changes` when this view's TLBs were last known current.
    seen: u64,
    /// Another view of the space may exist (set on [`GuestMemory::share`],
    /// never cleared): narrow stores then merge with compare-and-swap.
    shared: bool,
    tlb_read: Tlb,
    tlb_write: Tlb,
    tlb_exec: Tlb,
}

impl Default for GuestMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for GuestMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestMemory")
            .field("mapped_pages", &self.mapped_pages())
            .field("shared", &self.shared)
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

/// An atomic access at `addr` is not aligned to its size (SIGBUS).
fn misaligned_store(addr: u64) -> MemFault {
    MemFault {
        addr,
        access: AccessKind::Write,
        kind: MemFaultKind::Misaligned,
    }
}

/// First unmapped page number in `[first, end)`, if any.
fn first_hole(layout: &Layout, first: u64, end: u64) -> Option<u64> {
    let mut expect = first;
    for &vpn in layout.index.range(first..end) {
        if vpn != expect {
            return Some(expect);
        }
        expect = vpn + 1;
    }
    (expect < end).then_some(expect)
}

impl GuestMemory {
    /// Largest length one [`GuestMemory::map`] call accepts (16 GiB): each
    /// mapped page costs some host bookkeeping even before it is touched.
    pub const MAX_MAP_LEN: u64 = 1 << 34;

    /// An empty address space.
    pub fn new() -> Self {
        GuestMemory {
            space: Arc::default(),
            seen: 0,
            shared: false,
            tlb_read: empty_tlb(),
            tlb_write: empty_tlb(),
            tlb_exec: empty_tlb(),
        }
    }

    /// Another view of the same address space, for another thread: what
    /// one view maps, writes or unmaps, every view sees.
    pub fn share(&mut self) -> GuestMemory {
        self.shared = true;
        GuestMemory {
            space: Arc::clone(&self.space),
            seen: self.space.changes.load(Ordering::Acquire),
            shared: true,
            tlb_read: empty_tlb(),
            tlb_write: empty_tlb(),
            tlb_exec: empty_tlb(),
        }
    }

    /// True if `other` is a view of the same address space.
    pub fn same_space(&self, other: &GuestMemory) -> bool {
        Arc::ptr_eq(&self.space, &other.space)
    }

    /// Catches up with the mappings other views changed since this view
    /// last looked: one atomic load when nothing changed.
    #[inline(always)]
    pub fn sync(&mut self) {
        let changes = self.space.changes.load(Ordering::Acquire);
        if changes != self.seen {
            self.seen = changes;
            self.flush_tlb(0, u64::MAX);
        }
    }

    /// A fence between the guest's memory accesses (RISC-V `fence`),
    /// ordering them for the other threads of the address space.
    #[inline]
    pub fn fence(&self) {
        if self.shared {
            std::sync::atomic::fence(Ordering::SeqCst);
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
            for table in [&mut self.tlb_read, &mut self.tlb_write, &mut self.tlb_exec] {
                table.fill_with(|| EMPTY_TLB);
            }
            return;
        }
        for vpn in first..end {
            let i = (vpn as usize) % TLB_ENTRIES;
            for table in [&mut self.tlb_read, &mut self.tlb_write, &mut self.tlb_exec] {
                if let Some(entry) = table.get_mut(i)
                    && entry.tag == vpn
                {
                    *entry = EMPTY_TLB;
                }
            }
        }
    }

    /// Records a change to the layout (made under its write lock), and
    /// drops this view's entries for `[first, end)`; other views drop
    /// theirs at their next [`GuestMemory::sync`].
    fn changed(&mut self, first: u64, end: u64) {
        let before = self.space.changes.fetch_add(1, Ordering::Release);
        // Changes are counted under the layout's write lock, one at a
        // time: a view that had seen every change before this one is
        // current once it drops the changed range.
        if before == self.seen {
            self.seen = before + 1;
            self.flush_tlb(first, end);
        } else {
            self.flush_tlb(0, u64::MAX);
            self.seen = self.space.changes.load(Ordering::Acquire);
        }
    }

    /// Maps `[addr, addr + len)` (length rounded up to whole pages) with
    /// `perms`, zero-filled. Pages already mapped there are replaced.
    pub fn map(&mut self, addr: u64, len: u64, perms: Perms) -> Result<(), MemError> {
        let (first, end) = page_span(addr, len)?;
        if len > Self::MAX_MAP_LEN {
            return Err(MemError::TooLarge { len });
        }
        let space = Arc::clone(&self.space);
        let mut layout = space.write();
        for vpn in first..end {
            layout.pages.insert(vpn, Page { perms, data: None });
            layout.index.insert(vpn);
        }
        self.changed(first, end);
        Ok(())
    }

    /// Unmaps `[addr, addr + len)`; pages that were not mapped are ignored.
    pub fn unmap(&mut self, addr: u64, len: u64) -> Result<(), MemError> {
        let (first, end) = page_span(addr, len)?;
        let space = Arc::clone(&self.space);
        let mut layout = space.write();
        let doomed: Vec<u64> = layout.index.range(first..end).copied().collect();
        for vpn in doomed {
            layout.index.remove(&vpn);
            layout.pages.remove(&vpn);
        }
        self.changed(first, end);
        Ok(())
    }

    /// Changes the permissions of `[addr, addr + len)`. Fails without
    /// changing anything if a page in the range is not mapped.
    pub fn protect(&mut self, addr: u64, len: u64, perms: Perms) -> Result<(), MemError> {
        let (first, end) = page_span(addr, len)?;
        let space = Arc::clone(&self.space);
        let mut layout = space.write();
        if let Some(vpn) = first_hole(&layout, first, end) {
            return Err(MemError::NotMapped {
                addr: vpn << PAGE_SHIFT,
            });
        }
        let Layout { index, pages } = &mut *layout;
        for vpn in index.range(first..end) {
            if let Some(p) = pages.get_mut(vpn) {
                p.perms = perms;
            }
        }
        self.changed(first, end);
        Ok(())
    }

    /// Permissions of the page holding `addr`, `None` if unmapped.
    pub fn perms(&self, addr: u64) -> Option<Perms> {
        self.space
            .read()
            .pages
            .get(&(addr >> PAGE_SHIFT))
            .map(|p| p.perms)
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
        first_hole(
            &self.space.read(),
            addr >> PAGE_SHIFT,
            (last >> PAGE_SHIFT) + 1,
        )
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
        for &vpn in self.space.read().index.range(first..end) {
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
        self.space.read().index.len()
    }

    /// The bytes of the page holding `addr` for `access`; with `check`
    /// false only the mapping is required (the loader writes read-only
    /// segments this way). Allocates them on first touch.
    fn page_of(
        &self,
        addr: u64,
        access: AccessKind,
        check: bool,
    ) -> Result<Arc<PageBytes>, MemFault> {
        let fault = |kind| MemFault { addr, access, kind };
        let vpn = addr >> PAGE_SHIFT;
        {
            let layout = self.space.read();
            let page = layout
                .pages
                .get(&vpn)
                .ok_or(fault(MemFaultKind::Unmapped))?;
            if check && !page.perms.contains(Perms::for_access(access)) {
                return Err(fault(MemFaultKind::Protection));
            }
            if let Some(data) = &page.data {
                return Ok(Arc::clone(data));
            }
        }
        // First touch: allocate under the write lock, unless another
        // thread did in between (or unmapped the page).
        let mut layout = self.space.write();
        let page = layout
            .pages
            .get_mut(&vpn)
            .ok_or(fault(MemFaultKind::Unmapped))?;
        if check && !page.perms.contains(Perms::for_access(access)) {
            return Err(fault(MemFaultKind::Protection));
        }
        Ok(Arc::clone(
            page.data.get_or_insert_with(|| PageBytes::zeroed().into()),
        ))
    }

    fn tlb(&self, access: AccessKind) -> &Tlb {
        match access {
            AccessKind::Read => &self.tlb_read,
            AccessKind::Write => &self.tlb_write,
            AccessKind::Execute => &self.tlb_exec,
        }
    }

    /// Slow path: resolve (and cache in the TLB) the page for a checked access.
    fn fill_tlb(&mut self, addr: u64, access: AccessKind) -> Result<Arc<PageBytes>, MemFault> {
        let page = self.page_of(addr, access, true)?;
        let vpn = addr >> PAGE_SHIFT;
        let entry = TlbEntry {
            tag: vpn,
            host: page.host_address(),
            page: Some(Arc::clone(&page)),
        };
        let table = match access {
            AccessKind::Read => &mut self.tlb_read,
            AccessKind::Write => &mut self.tlb_write,
            AccessKind::Execute => &mut self.tlb_exec,
        };
        if let Some(slot) = table.get_mut((vpn as usize) % TLB_ENTRIES) {
            *slot = entry;
        }
        Ok(page)
    }

    /// The page for a checked access, from the TLB (filled first on a
    /// miss). Borrowed: cloning its `Arc` on every access would make
    /// threads that share a page contend for its count.
    #[inline(always)]
    fn lookup(&mut self, addr: u64, access: AccessKind) -> Result<&PageBytes, MemFault> {
        let vpn = addr >> PAGE_SHIFT;
        let i = (vpn as usize) % TLB_ENTRIES;
        let hit = |tlb: &Tlb| matches!(tlb.get(i), Some(TlbEntry { tag, page: Some(_), .. }) if *tag == vpn);
        if !hit(self.tlb(access)) {
            self.fill_tlb(addr, access)?;
        }
        match self.tlb(access).get(i) {
            Some(TlbEntry {
                page: Some(page), ..
            }) => Ok(page),
            // Unreachable: the fill above made the entry.
            _ => Err(MemFault {
                addr,
                access,
                kind: MemFaultKind::Unmapped,
            }),
        }
    }

    /// Validates a multi-page access before any byte moves, so a faulting
    /// access has no partial effect; returns each page touched.
    fn pages_for(
        &mut self,
        addr: u64,
        len: usize,
        access: AccessKind,
        check: bool,
    ) -> Result<Vec<Arc<PageBytes>>, MemFault> {
        let mut pages = Vec::new();
        if len == 0 {
            return Ok(pages);
        }
        let last = addr.checked_add(len as u64 - 1).ok_or(MemFault {
            addr,
            access,
            kind: MemFaultKind::Unmapped,
        })?;
        let mut page = addr & !PAGE_MASK;
        loop {
            let at = page.max(addr);
            pages.push(self.page_of(at, access, check)?);
            if page >= last & !PAGE_MASK {
                return Ok(pages);
            }
            page += PAGE_SIZE;
        }
    }

    fn copy_out(&mut self, addr: u64, buf: &mut [u8], access: AccessKind) -> Result<(), MemFault> {
        let pages = self.pages_for(addr, buf.len(), access, true)?;
        let mut done = 0;
        for page in pages {
            let off = ((addr + done as u64) & PAGE_MASK) as usize;
            let n = (PAGE_SIZE as usize - off).min(buf.len() - done);
            if let Some(dst) = buf.get_mut(done..done + n) {
                page.read_bytes(off, dst);
            }
            done += n;
        }
        Ok(())
    }

    fn copy_in(&mut self, addr: u64, data: &[u8], check: bool) -> Result<(), MemFault> {
        let pages = self.pages_for(addr, data.len(), AccessKind::Write, check)?;
        let mut done = 0;
        for page in pages {
            let off = ((addr + done as u64) & PAGE_MASK) as usize;
            let n = (PAGE_SIZE as usize - off).min(data.len() - done);
            if let Some(src) = data.get(done..done + n) {
                page.write_bytes(off, src, self.shared);
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
        // Fast path: a warm TLB entry and an access within the page;
        // anything else, including a page-straddling access, goes the
        // slow way.
        let vpn = addr >> PAGE_SHIFT;
        if let Some(TlbEntry {
            tag,
            page: Some(page),
            ..
        }) = self.tlb_read.get((vpn as usize) % TLB_ENTRIES)
            && *tag == vpn
            && let Some(v) = page.read((addr & PAGE_MASK) as usize, size)
        {
            return Ok(v);
        }
        self.load_slow(addr, size)
    }

    #[inline(never)]
    fn load_slow(&mut self, addr: u64, size: u8) -> Result<u64, MemFault> {
        let off = (addr & PAGE_MASK) as usize;
        if off + size_bytes(size) <= PAGE_SIZE as usize {
            // A TLB miss: fill the entry and read in place.
            if let Some(v) = self.fill_tlb(addr, AccessKind::Read)?.read(off, size) {
                return Ok(v);
            }
        }
        let mut buf = [0u8; 8];
        let dst = buf.get_mut(..size_bytes(size)).unwrap_or_default();
        self.copy_out(addr, dst, AccessKind::Read)?;
        Ok(u64::from_le_bytes(buf))
    }

    /// Stores the low `size` (1, 2, 4 or 8) bytes of `value`, little-endian.
    /// Misaligned addresses are allowed. Another `size` is treated as 8.
    #[inline]
    pub fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        let vpn = addr >> PAGE_SHIFT;
        if let Some(TlbEntry {
            tag,
            page: Some(page),
            ..
        }) = self.tlb_write.get((vpn as usize) % TLB_ENTRIES)
            && *tag == vpn
            && page.write((addr & PAGE_MASK) as usize, size, value, self.shared)
        {
            return Ok(());
        }
        self.store_slow(addr, size, value)
    }

    #[inline(never)]
    fn store_slow(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        let off = (addr & PAGE_MASK) as usize;
        if off + size_bytes(size) <= PAGE_SIZE as usize {
            let page = self.fill_tlb(addr, AccessKind::Write)?;
            if page.write(off, size, value, self.shared) {
                return Ok(());
            }
        }
        let bytes = value.to_le_bytes();
        let src = bytes.get(..size_bytes(size)).unwrap_or_default();
        self.copy_in(addr, src, true)
    }

    /// Atomically replaces the naturally aligned `size` (4 or 8) bytes at
    /// `addr` with `update(old)` (`old` zero-extended, the result
    /// truncated) and returns `(old, new)`: a RISC-V AMO, or a
    /// compare-and-swap when `update` returns `old` on a mismatch.
    /// `update` may run more than once when another thread races. Needs
    /// WRITE; faults as a store, and as misaligned if `addr` is not
    /// aligned to `size`.
    pub fn atomic_update(
        &mut self,
        addr: u64,
        size: u8,
        update: impl Fn(u64) -> u64,
    ) -> Result<(u64, u64), MemFault> {
        self.atomic_page(addr, size)?
            .update((addr & PAGE_MASK) as usize, size, update)
            .ok_or(misaligned_store(addr))
    }

    /// [`GuestMemory::atomic_update`] with `op(old, operand)`, in one host
    /// atomic instruction where the host has one.
    pub fn atomic_fetch(
        &mut self,
        addr: u64,
        size: u8,
        op: FetchOp,
        operand: u64,
    ) -> Result<(u64, u64), MemFault> {
        self.atomic_page(addr, size)?
            .fetch((addr & PAGE_MASK) as usize, size, op, operand)
            .ok_or(misaligned_store(addr))
    }

    /// The page of an atomic access: aligned to its size, writable.
    fn atomic_page(&mut self, addr: u64, size: u8) -> Result<&PageBytes, MemFault> {
        if !addr.is_multiple_of(size_bytes(size) as u64) {
            return Err(misaligned_store(addr));
        }
        self.lookup(addr, AccessKind::Write)
    }

    /// Reads a NUL-terminated string at `addr` (the NUL is not included),
    /// scanning at most `max` bytes; a string without NUL within `max` bytes
    /// is returned truncated to `max` bytes.
    pub fn read_cstr(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, MemFault> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let page = self.lookup(at, AccessKind::Read)?;
            let off = (at & PAGE_MASK) as usize;
            let (len, found) = page.find_nul(off, max - out.len());
            let start = out.len();
            out.resize(start + len, 0);
            if let Some(dst) = out.get_mut(start..) {
                page.read_bytes(off, dst);
            }
            if found {
                return Ok(out);
            }
            at = match at.checked_add(len as u64) {
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
