//! The guest's file descriptor table.
//!
//! Guest descriptor numbers are virtual: each open guest descriptor owns one
//! host descriptor (a `dup` of the host's own stdin/stdout/stderr for 0-2), so
//! closing or redirecting a guest descriptor never disturbs the emulator's own
//! streams, and numbers are handed out lowest-first exactly as Linux does.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::abi::errno;

/// Highest number of guest descriptors (the usual `RLIMIT_NOFILE` soft limit).
pub(crate) const MAX_FDS: usize = 1024;

struct Entry {
    host: OwnedFd,
    cloexec: bool,
}

/// Guest descriptor number -> host descriptor.
pub(crate) struct FdTable {
    slots: Vec<Option<Entry>>,
    limit: usize,
}

impl FdTable {
    /// A table whose 0, 1 and 2 are duplicates of the host's stdin, stdout and
    /// stderr (left closed where the host's is closed).
    pub(crate) fn with_stdio() -> FdTable {
        let mut table = FdTable {
            slots: Vec::new(),
            limit: MAX_FDS,
        };
        let stdio = [
            dup_host(std::io::stdin().as_fd()),
            dup_host(std::io::stdout().as_fd()),
            dup_host(std::io::stderr().as_fd()),
        ];
        for host in stdio {
            table.slots.push(host.map(|host| Entry {
                host,
                cloexec: false,
            }));
        }
        table
    }

    /// An empty table (for tests that need no stdio).
    #[cfg(test)]
    pub(crate) fn empty(limit: usize) -> FdTable {
        FdTable {
            slots: Vec::new(),
            limit,
        }
    }

    /// The host descriptor behind guest descriptor `fd`, or `EBADF`.
    pub(crate) fn get(&self, fd: u64) -> Result<BorrowedFd<'_>, i32> {
        usize::try_from(fd as i32)
            .ok()
            .and_then(|i| self.slots.get(i))
            .and_then(Option::as_ref)
            .map(|e| e.host.as_fd())
            .ok_or(errno::EBADF)
    }

    /// The descriptors a new program inherits (`execve`): every one not
    /// marked close-on-exec, with its guest number.
    pub(crate) fn inherited(&self) -> Vec<(u32, BorrowedFd<'_>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(n, slot)| {
                let e = slot.as_ref().filter(|e| !e.cloexec)?;
                Some((n as u32, e.host.as_fd()))
            })
            .collect()
    }

    /// Installs `host` at the lowest free number >= `min`; `EMFILE` if none.
    pub(crate) fn insert(&mut self, host: OwnedFd, cloexec: bool, min: usize) -> Result<u64, i32> {
        let free = (min..self.limit).find(|&i| self.slots.get(i).is_none_or(Option::is_none));
        let Some(index) = free else {
            return Err(errno::EMFILE);
        };
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || None);
        }
        self.slots[index] = Some(Entry { host, cloexec });
        Ok(index as u64)
    }

    /// Installs `host` at exactly `fd`, closing what was there (dup2/dup3).
    pub(crate) fn insert_at(&mut self, fd: u64, host: OwnedFd, cloexec: bool) -> Result<u64, i32> {
        let index = usize::try_from(fd as i32)
            .ok()
            .filter(|&i| i < self.limit)
            .ok_or(errno::EBADF)?;
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || None);
        }
        self.slots[index] = Some(Entry { host, cloexec });
        Ok(index as u64)
    }

    /// Closes guest descriptor `fd`.
    pub(crate) fn close(&mut self, fd: u64) -> Result<(), i32> {
        let slot = usize::try_from(fd as i32)
            .ok()
            .and_then(|i| self.slots.get_mut(i))
            .ok_or(errno::EBADF)?;
        match slot.take() {
            Some(_) => Ok(()),
            None => Err(errno::EBADF),
        }
    }

    /// The guest-visible close-on-exec flag of `fd`.
    pub(crate) fn cloexec(&self, fd: u64) -> Result<bool, i32> {
        self.entry(fd).map(|e| e.cloexec)
    }

    /// Sets the close-on-exec flag of `fd`.
    pub(crate) fn set_cloexec(&mut self, fd: u64, cloexec: bool) -> Result<(), i32> {
        let index = usize::try_from(fd as i32).map_err(|_| errno::EBADF)?;
        match self.slots.get_mut(index).and_then(Option::as_mut) {
            Some(e) => {
                e.cloexec = cloexec;
                Ok(())
            }
            None => Err(errno::EBADF),
        }
    }

    fn entry(&self, fd: u64) -> Result<&Entry, i32> {
        usize::try_from(fd as i32)
            .ok()
            .and_then(|i| self.slots.get(i))
            .and_then(Option::as_ref)
            .ok_or(errno::EBADF)
    }
}

/// A close-on-exec duplicate of a host descriptor (close-on-exec so a host
/// child process never inherits guest files by accident).
pub(crate) fn dup_host(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(fd, 3).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some_fd() -> OwnedFd {
        let (r, _w) = rustix::pipe::pipe().expect("pipe");
        r
    }

    #[test]
    fn lowest_free_number_and_ebadf() {
        let mut t = FdTable::empty(MAX_FDS);
        assert_eq!(t.insert(some_fd(), false, 0), Ok(0));
        assert_eq!(t.insert(some_fd(), true, 0), Ok(1));
        assert_eq!(t.insert(some_fd(), false, 5), Ok(5));
        assert_eq!(t.close(0), Ok(()));
        assert_eq!(t.close(0), Err(errno::EBADF));
        assert_eq!(t.insert(some_fd(), false, 0), Ok(0));
        assert_eq!(t.cloexec(1), Ok(true));
        assert!(t.get(3).is_err());
        assert!(t.get(u64::MAX).is_err());
        assert_eq!(t.close(-1i64 as u64), Err(errno::EBADF));
        assert_eq!(t.insert_at(3, some_fd(), false), Ok(3));
        assert!(t.get(3).is_ok());
        assert_eq!(
            t.insert_at(MAX_FDS as u64, some_fd(), false),
            Err(errno::EBADF)
        );
    }

    #[test]
    fn table_full_is_emfile() {
        let mut t = FdTable::empty(8);
        let (r, _w) = rustix::pipe::pipe().expect("pipe");
        for i in 0..8 {
            let fd = dup_host(r.as_fd()).expect("dup");
            assert_eq!(t.insert(fd, false, 0), Ok(i as u64));
        }
        let fd = dup_host(r.as_fd()).expect("dup");
        assert_eq!(t.insert(fd, false, 0), Err(errno::EMFILE));
    }
}
