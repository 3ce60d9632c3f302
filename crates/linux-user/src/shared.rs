//! Writable `MAP_SHARED` file mappings.
//!
//! Guest memory is a host-side page array, not a host `mmap`, so a shared
//! file mapping cannot alias the host page cache. Instead each mapping keeps
//! its own handle on the file and a shadow copy of what the file held at the
//! last synchronisation, and the two are reconciled at syscall boundaries:
//!
//! - before a syscall that can observe or change the file or the mapping
//!   (read/write families, fsync, msync, ftruncate, fcntl, close, munmap,
//!   mremap, mprotect, exit), every page the guest changed since the last
//!   sync (it differs from the shadow) is written back to the file;
//! - after a syscall that changed the file (write family, ftruncate,
//!   fallocate, `open(O_TRUNC)`), the mappings of that file are reloaded.
//!
//! With one process and one vCPU the guest can only observe the file through
//! syscalls, so it sees exactly what Linux would show it. Other host
//! processes see the guest's stores only at those sync points (at the latest
//! when the mapping is unmapped or the guest exits).
//!
//! Bytes of the mapping beyond the end of the file read as zero and are never
//! written back (Linux would raise SIGBUS for whole pages past EOF; the file
//! never grows through a mapping either way).

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use tcgkit_tcg_core::{GuestMemory, PAGE_SIZE, Perms};

use crate::abi::errno;
use crate::syscall::host_errno;

const PAGE: usize = PAGE_SIZE as usize;

/// One tracked mapping: guest pages `[addr, addr + pages * PAGE_SIZE)` show
/// the file from `offset` on.
struct SharedMap {
    addr: u64,
    file: OwnedFd,
    /// The file's identity (device, inode), to find the mappings a write to
    /// some other descriptor of the same file affects.
    id: (u64, u64),
    offset: u64,
    /// Page contents as of the last sync, `None` for an all-zero page (so
    /// mapping a large range costs nothing until it is touched).
    shadow: Vec<Option<Box<[u8]>>>,
}

impl SharedMap {
    fn len(&self) -> u64 {
        self.shadow.len() as u64 * PAGE_SIZE
    }

    fn end(&self) -> u64 {
        self.addr + self.len()
    }

    fn overlaps(&self, addr: u64, len: u64) -> bool {
        addr < self.end() && self.addr < addr.saturating_add(len)
    }
}

/// Whether `page` equals the shadow entry `shadow`.
fn same(shadow: &Option<Box<[u8]>>, page: &[u8]) -> bool {
    match shadow {
        Some(old) => **old == *page,
        None => page.iter().all(|&b| b == 0),
    }
}

fn shadow_of(page: &[u8]) -> Option<Box<[u8]>> {
    if page.iter().all(|&b| b == 0) {
        None
    } else {
        Some(page.into())
    }
}

fn file_id(fd: BorrowedFd<'_>) -> Result<((u64, u64), u64), i32> {
    let st = rustix::fs::fstat(fd).map_err(host_errno)?;
    #[allow(clippy::unnecessary_cast)] // field types differ between hosts
    Ok(((st.st_dev as u64, st.st_ino as u64), st.st_size as u64))
}

/// Reads the file page at `offset` (zeros past EOF) into `buf`.
fn read_page(file: BorrowedFd<'_>, offset: u64, size: u64, buf: &mut [u8; PAGE]) {
    buf.fill(0);
    let want = size.saturating_sub(offset).min(PAGE_SIZE) as usize;
    let mut done = 0;
    while done < want {
        match rustix::io::pread(file, &mut buf[done..want], offset + done as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => done += n,
        }
    }
}

/// The process's writable shared file mappings.
#[derive(Default)]
pub(crate) struct SharedMaps {
    maps: Vec<SharedMap>,
}

impl SharedMaps {
    /// Whether no shared mapping exists (the common, free case).
    pub(crate) fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Starts tracking the freshly mapped `[addr, addr + len)` (page-aligned)
    /// that shows `file` from `offset`; its current guest contents are taken
    /// as the file's.
    pub(crate) fn add(
        &mut self,
        mem: &mut GuestMemory,
        addr: u64,
        len: u64,
        file: BorrowedFd<'_>,
        offset: u64,
    ) -> Result<(), i32> {
        let (id, _) = file_id(file)?;
        let file = crate::fd::dup_host(file).ok_or(errno::EMFILE)?;
        let pages = len.div_ceil(PAGE_SIZE);
        let mut shadow = Vec::new();
        shadow
            .try_reserve_exact(usize::try_from(pages).map_err(|_| errno::ENOMEM)?)
            .map_err(|_| errno::ENOMEM)?;
        let mut buf = [0u8; PAGE];
        for i in 0..pages {
            // Pages the guest cannot read hold what the file held (zeros
            // when it could not be read): nothing to compare against yet.
            let page = addr + i * PAGE_SIZE;
            buf.fill(0);
            let _ = mem.read(page, &mut buf);
            shadow.push(shadow_of(&buf));
        }
        self.maps.push(SharedMap {
            addr,
            file,
            id,
            offset,
            shadow,
        });
        Ok(())
    }

    /// Writes every page the guest changed since the last sync back to its
    /// file (clipped to the file's size). Returns the first host error.
    pub(crate) fn write_back(&mut self, mem: &mut GuestMemory) -> Result<(), i32> {
        let mut result = Ok(());
        let mut buf = [0u8; PAGE];
        for map in &mut self.maps {
            let mut size = None;
            for (i, shadow) in map.shadow.iter_mut().enumerate() {
                let page = map.addr + i as u64 * PAGE_SIZE;
                // A page without write permission cannot have changed since
                // the last sync: mprotect is itself a sync point.
                if !mem.perms(page).is_some_and(|p| p.contains(Perms::WRITE))
                    || mem.read(page, &mut buf).is_err()
                    || same(shadow, &buf)
                {
                    continue;
                }
                *shadow = shadow_of(&buf);
                let size = match size {
                    Some(size) => size,
                    None => {
                        let s = file_id(map.file.as_fd()).map_or(0, |(_, s)| s);
                        size = Some(s);
                        s
                    }
                };
                let at = map.offset + i as u64 * PAGE_SIZE;
                let n = size.saturating_sub(at).min(PAGE_SIZE) as usize;
                let mut done = 0;
                while done < n {
                    match rustix::io::pwrite(map.file.as_fd(), &buf[done..n], at + done as u64) {
                        Ok(0) => {
                            result = result.and(Err(errno::EIO));
                            break;
                        }
                        Ok(k) => done += k,
                        Err(e) => {
                            result = result.and(Err(host_errno(e)));
                            break;
                        }
                    }
                }
            }
        }
        result
    }

    /// Reloads the mappings of `file` from it after a syscall changed the
    /// file; pages of executable mappings that changed are added to
    /// `code_changes`.
    pub(crate) fn reload(
        &mut self,
        mem: &mut GuestMemory,
        file: BorrowedFd<'_>,
        code_changes: &mut Vec<(u64, u64)>,
    ) {
        let Ok((id, _)) = file_id(file) else {
            return;
        };
        let mut buf = [0u8; PAGE];
        for map in self.maps.iter_mut().filter(|m| m.id == id) {
            let size = file_id(map.file.as_fd()).map_or(0, |(_, s)| s);
            for (i, shadow) in map.shadow.iter_mut().enumerate() {
                let page = map.addr + i as u64 * PAGE_SIZE;
                read_page(
                    map.file.as_fd(),
                    map.offset + i as u64 * PAGE_SIZE,
                    size,
                    &mut buf,
                );
                if same(shadow, &buf) {
                    continue;
                }
                *shadow = shadow_of(&buf);
                // Permissions do not apply: the kernel, not the guest, is
                // updating the page.
                if mem.write_initial(page, &buf).is_ok()
                    && mem.perms(page).is_some_and(|p| p.contains(Perms::EXEC))
                {
                    code_changes.push((page, PAGE_SIZE));
                }
            }
        }
    }

    /// Whether `page` belongs to a tracked mapping.
    pub(crate) fn contains(&self, page: u64) -> bool {
        self.maps.iter().any(|m| m.overlaps(page, 1))
    }

    /// Stops tracking `[addr, addr + len)` (after it was written back and is
    /// about to be unmapped or replaced); mappings straddling its edges keep
    /// their outer parts.
    pub(crate) fn forget(&mut self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let mut kept = Vec::with_capacity(self.maps.len());
        for mut map in std::mem::take(&mut self.maps) {
            if !map.overlaps(addr, len) {
                kept.push(map);
                continue;
            }
            if end < map.end() {
                let skip = ((end - map.addr) / PAGE_SIZE) as usize;
                if let Some(file) = crate::fd::dup_host(map.file.as_fd()) {
                    kept.push(SharedMap {
                        addr: end,
                        file,
                        id: map.id,
                        offset: map.offset + (end - map.addr),
                        shadow: map.shadow.split_off(skip.min(map.shadow.len())),
                    });
                }
            }
            if map.addr < addr {
                map.shadow
                    .truncate(((addr - map.addr) / PAGE_SIZE) as usize);
                kept.push(map);
            }
        }
        self.maps = kept;
    }

    /// The file and file offset shown at `addr` if `[addr, addr + len)` lies
    /// within one tracked mapping (for `mremap`, which moves it).
    pub(crate) fn lookup(&self, addr: u64, len: u64) -> Option<(BorrowedFd<'_>, u64)> {
        self.maps
            .iter()
            .find(|m| m.addr <= addr && addr.saturating_add(len) <= m.end())
            .map(|m| (m.file.as_fd(), m.offset + (addr - m.addr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, contents: &[u8]) -> (std::path::PathBuf, std::fs::File) {
        let path =
            std::env::temp_dir().join(format!("tcgkit-shared-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("write");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        (path, file)
    }

    const BASE: u64 = 0x100_000;

    #[test]
    fn stores_reach_the_file_only_inside_it_and_only_when_changed() {
        let (path, file) = temp_file("writeback", &[7u8; PAGE + 100]);
        let mut mem = GuestMemory::new();
        mem.map(BASE, 3 * PAGE_SIZE, Perms::READ | Perms::WRITE)
            .expect("map");
        let mut contents = vec![7u8; PAGE + 100];
        contents.resize(3 * PAGE, 0);
        mem.write(BASE, &contents).expect("fill");
        let mut maps = SharedMaps::default();
        assert!(maps.is_empty());
        maps.add(&mut mem, BASE, 3 * PAGE_SIZE, file.as_fd(), 0)
            .expect("add");
        assert!(!maps.is_empty() && maps.contains(BASE + 2 * PAGE_SIZE));
        // Nothing changed: the file is untouched even after the host
        // rewrites it behind our back.
        std::fs::write(&path, [9u8; PAGE + 100]).expect("rewrite");
        maps.write_back(&mut mem).expect("sync");
        assert_eq!(std::fs::read(&path).expect("read"), vec![9u8; PAGE + 100]);
        // A store in page 1 (partly past EOF) and one in page 2 (all past).
        mem.store(BASE + PAGE_SIZE + 1, 1, 0xaa).expect("store");
        mem.store(BASE + PAGE_SIZE + 200, 1, 0xbb).expect("store");
        mem.store(BASE + 2 * PAGE_SIZE, 1, 0xcc).expect("store");
        maps.write_back(&mut mem).expect("sync");
        let data = std::fs::read(&path).expect("read");
        assert_eq!(data.len(), PAGE + 100, "the file never grows");
        assert_eq!(data[PAGE + 1], 0xaa);
        assert_eq!(&data[..PAGE], &[9u8; PAGE][..], "page 0 was clean");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn reload_and_partial_forget() {
        let (path, file) = temp_file("reload", &[1u8; 4 * PAGE]);
        let mut mem = GuestMemory::new();
        let rwx = Perms::READ | Perms::WRITE | Perms::EXEC;
        mem.map(BASE, 4 * PAGE_SIZE, rwx).expect("map");
        mem.write(BASE, &[1u8; 4 * PAGE]).expect("fill");
        let mut maps = SharedMaps::default();
        maps.add(&mut mem, BASE, 4 * PAGE_SIZE, file.as_fd(), 0)
            .expect("add");
        rustix::io::pwrite(file.as_fd(), b"new", 2 * PAGE_SIZE + 5).expect("pwrite");
        let mut changes = Vec::new();
        maps.reload(&mut mem, file.as_fd(), &mut changes);
        assert_eq!(changes, vec![(BASE + 2 * PAGE_SIZE, PAGE_SIZE)]);
        let mut got = [0u8; 3];
        mem.read(BASE + 2 * PAGE_SIZE + 5, &mut got).expect("read");
        assert_eq!(&got, b"new");
        // Punch out page 1: pages 0 and 2..4 stay tracked, at their offsets.
        maps.forget(BASE + PAGE_SIZE, PAGE_SIZE);
        assert!(!maps.contains(BASE + PAGE_SIZE));
        assert!(maps.contains(BASE) && maps.contains(BASE + 3 * PAGE_SIZE));
        assert_eq!(
            maps.lookup(BASE + 2 * PAGE_SIZE, 2 * PAGE_SIZE)
                .map(|(_, off)| off),
            Some(2 * PAGE_SIZE)
        );
        assert!(maps.lookup(BASE, 2 * PAGE_SIZE).is_none());
        mem.store(BASE + 3 * PAGE_SIZE, 1, 0x55).expect("store");
        maps.write_back(&mut mem).expect("sync");
        assert_eq!(std::fs::read(&path).expect("read")[3 * PAGE], 0x55);
        maps.forget(0, u64::MAX);
        assert!(maps.is_empty());
        let _ = std::fs::remove_file(&path);
    }
}
