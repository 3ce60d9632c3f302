//! `ppoll` of host descriptors for the guest's, and the pieces of it
//! that host threads need to find out whether it would wait
//! (`blocking.rs`).

use std::time::Duration;

use rustix::event::PollFlags;
use rustix::fd::BorrowedFd;
use tcgkit_tcg_core::GuestMemory;

use super::file::{check_writable, put, read_guest};
use super::{Kernel, host_errno};
use crate::abi::errno;

type SysResult = Result<u64, i32>;

impl Kernel {
    /// ppoll: guest descriptors mapped to host ones; the signal mask is
    /// ignored (no asynchronous signals are delivered).
    pub(super) fn ppoll(
        &mut self,
        mem: &mut GuestMemory,
        fds: u64,
        nfds: u64,
        timeout: u64,
    ) -> SysResult {
        use rustix::event::{PollFd, Timespec};
        const POLLNVAL: u16 = 0x20;
        let set = self.poll_set(mem, fds, nfds)?;
        check_writable(mem, fds, nfds * 8)?;
        let wait = match ppoll_timeout(mem, timeout)? {
            _ if self.never_wait => Some(Duration::ZERO),
            wait => wait,
        };
        let wait = wait.map(|d| Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as _,
        });
        let mut revents = vec![0u16; nfds as usize];
        let mut polled = Vec::new();
        let mut slots = Vec::new();
        for (i, entry) in set.entries.into_iter().enumerate() {
            match entry {
                PollEntry::Open(host, events) => {
                    polled.push(PollFd::from_borrowed_fd(host, events));
                    slots.push(i);
                }
                PollEntry::Closed => revents[i] = POLLNVAL,
                PollEntry::Skipped => {}
            }
        }
        let raw = set.raw;
        let invalid = revents.iter().filter(|&&r| r != 0).count();
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // With an invalid descriptor the call returns at once, like Linux.
        let wait = if invalid > 0 {
            Some(&zero)
        } else {
            wait.as_ref()
        };
        if !polled.is_empty() || wait.is_some() {
            rustix::event::poll(&mut polled, wait).map_err(host_errno)?;
        }
        for (p, &i) in polled.iter().zip(&slots) {
            revents[i] = p.revents().bits();
        }
        let mut out = raw;
        for (entry, r) in out.chunks_exact_mut(8).zip(&revents) {
            entry[6..8].copy_from_slice(&r.to_le_bytes());
        }
        put(mem, fds, &out)?;
        Ok(revents.iter().filter(|&&r| r != 0).count() as u64)
    }

    /// The guest's `struct pollfd` array of `nfds` entries at `fds`.
    pub(crate) fn poll_set(
        &self,
        mem: &mut GuestMemory,
        fds: u64,
        nfds: u64,
    ) -> Result<PollSet<'_>, i32> {
        if nfds > crate::fd::MAX_FDS as u64 {
            return Err(errno::EINVAL);
        }
        let raw = read_guest(mem, fds, nfds * 8)?;
        let entries = raw
            .chunks_exact(8)
            .map(|entry| {
                let fd = i32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]);
                let events = u16::from_le_bytes([entry[4], entry[5]]);
                if fd < 0 {
                    return PollEntry::Skipped;
                }
                match self.fds.get(fd as u64) {
                    Ok(host) => PollEntry::Open(host, PollFlags::from_bits_retain(events)),
                    Err(_) => PollEntry::Closed,
                }
            })
            .collect();
        Ok(PollSet { raw, entries })
    }
}

/// A guest `struct pollfd` array: its bytes, and what each entry polls.
pub(crate) struct PollSet<'k> {
    pub(crate) raw: Vec<u8>,
    pub(crate) entries: Vec<PollEntry<'k>>,
}

pub(crate) enum PollEntry<'k> {
    /// A negative descriptor: never reports.
    Skipped,
    /// Not open: reports POLLNVAL at once.
    Closed,
    /// This host descriptor, for these events.
    Open(BorrowedFd<'k>, PollFlags),
}

/// `ppoll`'s timeout at `addr` (`None`: for good, a null pointer).
pub(crate) fn ppoll_timeout(mem: &mut GuestMemory, addr: u64) -> Result<Option<Duration>, i32> {
    if addr == 0 {
        return Ok(None);
    }
    let sec = mem.load(addr, 8).map_err(|_| errno::EFAULT)? as i64;
    let nsec = mem.load(addr + 8, 8).map_err(|_| errno::EFAULT)? as i64;
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return Err(errno::EINVAL);
    }
    Ok(Some(Duration::new(sec as u64, nsec as u32)))
}
