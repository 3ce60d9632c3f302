//! The syscalls that can wait (a `read` of an empty pipe, `ppoll`,
//! `epoll_pwait`, `wait4`, `rt_sigsuspend`, ...) and what they wait for.
//!
//! On host threads one server makes every thread's syscalls, so it must
//! never wait in one: a thread's wait would hold the others' syscalls, and
//! when another thread's syscall is what ends the wait (the write to the
//! pipe, the kill), the process hangs. The server asks first
//! ([`Process::would_wait`]); a call that would wait goes back to its
//! thread with what to wait for ([`Wait`]), the thread waits on its own
//! and makes the call again. A signal that comes meanwhile interrupts the
//! wait as Linux's rules say ([`Process::interrupt`]).
//!
//! A blocking `write` or `writev` larger than the room in its pipe or
//! socket is made a piece at a time: the server writes what fits without
//! waiting (`RWF_NOWAIT`), the thread waits for room, and the write goes
//! on where it stopped ([`WriteProgress`]); a signal meanwhile ends it
//! with the count written, as on Linux. Before, the server made it whole
//! and waited, and a reader in another thread of the process never got to
//! read. A blocking `read` or `readv` of a pipe or socket is made by the
//! server without waiting (`RWF_NOWAIT`), its bytes kept for the call
//! ([`crate::syscall::ReadAhead`]); finding none, the thread waits for
//! some. So a read never waits in the server, even when another process
//! reading the same pipe takes the bytes between a look and the read.
//! (A host whose pipes cannot be read that way falls back to a look with
//! `poll` first, and that race.)

use std::io::IoSlice;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{FileType, OFlags};
use rustix::io::{Errno, ReadWriteFlags};
use tcgkit_tcg_core::GuestMemory;

use crate::abi::nr;
use crate::fd::dup_host;
use crate::process::{GuestExit, Process};
use crate::sigframe::UNBLOCKABLE;
use crate::signal::Signal;
use crate::syscall::{PollEntry, ReadNow, WriteProgress, ppoll_timeout, write_segments};

/// What a syscall would wait for.
#[derive(Debug)]
pub(crate) enum Wait {
    /// One of these host descriptors to be ready for its events (the
    /// server's duplicates: a close in another thread cannot take them
    /// away from the wait), or the timeout (`None`: for good).
    Ready {
        fds: Vec<(OwnedFd, PollFlags)>,
        timeout: Option<Duration>,
    },
    /// A child process to change state.
    Child,
    /// A signal.
    Signal,
}

/// `WNOHANG`, for `wait4` and `waitid`.
const WNOHANG: u64 = 1;
/// `SA_RESTART`: the handler's signal restarts the call it interrupts.
const SA_RESTART: u64 = 0x1000_0000;

impl Process {
    /// What syscall `number` would wait for if made now; `None` when it
    /// would not wait (or would fail: the call itself then says how).
    pub(crate) fn would_wait(&mut self, number: u64, args: [u64; 6]) -> Option<Wait> {
        let [a0, a1, a2, a3, ..] = args;
        if matches!(number, nr::WAIT4 | nr::WAITID | nr::RT_SIGSUSPEND)
            && self.child_signals.as_ref().is_some_and(|c| c.take())
        {
            // As the call itself would: the news of a child is SIGCHLD
            // (which may interrupt the wait), and the thread that waits
            // for it is not woken by it again.
            self.kernel.raise(Signal::CHLD, false);
        }
        match number {
            nr::READ | nr::READV => {
                let read = self
                    .kernel
                    .read_without_waiting(&mut self.mem, number, [a0, a1, a2]);
                match read {
                    ReadNow::Read => None,
                    ReadNow::Empty => {
                        let host = self.kernel.fds.get(a0).ok()?;
                        dup_host(host).map(|fd| Wait::Ready {
                            fds: vec![(fd, PollFlags::IN)],
                            timeout: None,
                        })
                    }
                    ReadNow::Unknown => self.fd_would_wait(a0, PollFlags::IN),
                }
            }
            nr::RECVFROM | nr::ACCEPT | nr::ACCEPT4 => self.fd_would_wait(a0, PollFlags::IN),
            nr::WRITE | nr::WRITEV => self.write_would_wait(number, [a0, a1, a2]),
            nr::SENDTO => self.fd_would_wait(a0, PollFlags::OUT),
            nr::PPOLL => self.ppoll_would_wait(a0, a1, a2),
            nr::EPOLL_PWAIT => {
                let ms = a3 as i32;
                if ms == 0 {
                    return None;
                }
                let epoll = self.kernel.fds.get(a0).ok()?;
                let timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
                waits_for(&[(epoll, PollFlags::IN)], timeout)
            }
            nr::WAIT4 if a2 & WNOHANG == 0 => {
                let pid = a0 as i32;
                // wait4's pid as waitid's (idtype, id).
                let (idtype, id) = match pid {
                    -1 => (P_ALL, 0),
                    0 => (P_PGID, 0),
                    p if p < 0 => (P_PGID, p.unsigned_abs()),
                    p => (P_PID, p as u32),
                };
                // WUNTRACED is waitid's WSTOPPED; the rest mean the same.
                child_would_wait(idtype, id, a2 | WEXITED)
            }
            nr::WAITID if a3 & WNOHANG == 0 => child_would_wait(a0 as u32, a1 as u32, a3),
            nr::RT_SIGSUSPEND => {
                if a1 != 8 {
                    return None;
                }
                let mask = self.mem.load(a0, 8).ok()? & !UNBLOCKABLE;
                let k = &self.kernel;
                let open = (k.process_pending() | k.thread_pending) & !mask;
                (open & k.interrupting() == 0).then_some(Wait::Signal)
            }
            _ => None,
        }
    }

    /// A blocking `write` or `writev`, made here as far as it goes without
    /// waiting: complete, the call returns what was written; else the
    /// thread waits for room and calls again, and the write goes on where
    /// it stopped. Only pipes and sockets wait for room; a write to
    /// anything else, or one that fails before anything is written, is
    /// made by the call itself, as before.
    fn write_would_wait(&mut self, number: u64, args: [u64; 3]) -> Option<Wait> {
        let host = self.kernel.fds.get(args[0]).ok()?;
        let kind = FileType::from_raw_mode(rustix::fs::fstat(host).ok()?.st_mode);
        let flags = rustix::fs::fcntl_getfl(host).ok()?;
        if !matches!(kind, FileType::Fifo | FileType::Socket) || flags.contains(OFlags::NONBLOCK) {
            // A non-blocking one says EAGAIN itself.
            return None;
        }
        let mut progress = match self.kernel.write_progress {
            Some(p) if p.call == (number, args) && !p.complete => p,
            _ => WriteProgress {
                call: (number, args),
                done: 0,
                complete: false,
            },
        };
        let pieces = write_segments(&mut self.mem, number, args[1], args[2]).ok()?;
        let total: u64 = pieces.iter().map(|p| p.1).sum();
        let room = |host| {
            dup_host(host).map(|fd| Wait::Ready {
                fds: vec![(fd, PollFlags::OUT)],
                timeout: None,
            })
        };
        // `Some(wait)`: for room; `None`: no more to write, or it failed.
        let wait = loop {
            if progress.done >= total {
                break None;
            }
            let Ok(data) = gather(&mut self.mem, &pieces, progress.done, WRITE_PIECE) else {
                break None;
            };
            let nowait = ReadWriteFlags::NOWAIT;
            match rustix::io::pwritev2(host, &[IoSlice::new(&data)], u64::MAX, nowait) {
                Ok(n) if n == data.len() => progress.done += n as u64,
                Ok(n) => {
                    progress.done += n as u64;
                    break room(host);
                }
                Err(Errno::AGAIN) => break room(host),
                Err(_) => break None,
            }
        };
        let failed_at_once = wait.is_none() && progress.done == 0 && total > 0;
        progress.complete = wait.is_none();
        // Failed before a byte was written: the call is made as it is, and
        // fails (or, where the host cannot write without waiting, writes)
        // as it would have. Else it returns what was written once complete.
        self.kernel.write_progress = (!failed_at_once).then_some(progress);
        wait
    }

    fn fd_would_wait(&self, fd: u64, events: PollFlags) -> Option<Wait> {
        let host = self.kernel.fds.get(fd).ok()?;
        let wait = waits_for(&[(host, events)], None)?;
        // A non-blocking descriptor says EAGAIN instead.
        let flags = rustix::fs::fcntl_getfl(host).ok()?;
        (!flags.contains(rustix::fs::OFlags::NONBLOCK)).then_some(wait)
    }

    fn ppoll_would_wait(&mut self, fds: u64, nfds: u64, timeout: u64) -> Option<Wait> {
        let timeout = ppoll_timeout(&mut self.mem, timeout).ok()?;
        if timeout == Some(Duration::ZERO) {
            return None;
        }
        let set = self.kernel.poll_set(&mut self.mem, fds, nfds).ok()?;
        let mut polled = Vec::new();
        for entry in set.entries {
            match entry {
                PollEntry::Open(fd, events) => polled.push((fd, events)),
                // It returns at once with POLLNVAL.
                PollEntry::Closed => return None,
                PollEntry::Skipped => {}
            }
        }
        waits_for(&polled, timeout)
    }

    /// A signal came while the thread waited (or was pending when it
    /// called): the wait ends as Linux ends it, `Some` when the process is
    /// over. `None` from the outer option: no signal interrupts it, the
    /// thread waits again.
    pub(crate) fn interrupt(&mut self, number: u64, args: [u64; 6]) -> Option<Option<GuestExit>> {
        let k = &self.kernel;
        let open = (k.process_pending() | k.thread_pending) & !k.sigmask & k.interrupting();
        if open == 0 {
            return None;
        }
        // A write that got some of its bytes out returns their count, as
        // on Linux (neither EINTR nor a restart).
        let call = (number, [args[0], args[1], args[2]]);
        if let Some(p) = self
            .kernel
            .write_progress
            .take()
            .filter(|p| p.call == call && p.done > 0)
        {
            self.begin_syscall(number, &args);
            self.finish_syscall(number, &args, p.done);
            return Some(self.deliver_pending());
        }
        let k = &self.kernel;
        let restarts = restartable(number)
            && (1..=64u64)
                .filter(|n| open & (1 << (n - 1)) != 0)
                .filter_map(Signal::from_number)
                .all(|sig| k.sigaction(sig).1 & SA_RESTART != 0);
        if !restarts {
            let eintr = (-i64::from(crate::abi::errno::EINTR)) as u64;
            self.begin_syscall(number, &args);
            self.finish_syscall(number, &args, eintr);
        }
        // Restarted, the pc stays at the ecall: the handler returns to it
        // and the call is made again.
        Some(self.deliver_pending())
    }
}

/// The calls a handler with `SA_RESTART` restarts (Linux never restarts
/// `ppoll`, `epoll_pwait` or `rt_sigsuspend`).
fn restartable(number: u64) -> bool {
    matches!(
        number,
        nr::READ
            | nr::READV
            | nr::RECVFROM
            | nr::ACCEPT
            | nr::ACCEPT4
            | nr::WRITE
            | nr::WRITEV
            | nr::SENDTO
            | nr::WAIT4
            | nr::WAITID
    )
}

/// The most a write copies from the guest for one try: a pipe holds at
/// most 1 MiB unless its owner raised `/proc/sys/fs/pipe-max-size`.
const WRITE_PIECE: u64 = 1 << 20;

/// Up to `most` bytes of `pieces` (guest (base, len) ranges, in order)
/// from byte `from` of them all.
fn gather(
    mem: &mut GuestMemory,
    pieces: &[(u64, u64)],
    mut from: u64,
    most: u64,
) -> Result<Vec<u8>, ()> {
    let mut data = Vec::new();
    for &(base, len) in pieces {
        if from >= len {
            from -= len;
            continue;
        }
        let take = (len - from).min(most - data.len() as u64);
        let at = data.len();
        data.resize(at + take as usize, 0);
        mem.read(base + from, &mut data[at..]).map_err(|_| ())?;
        from = 0;
        if data.len() as u64 == most {
            break;
        }
    }
    Ok(data)
}

/// A wait for `fds` unless one of them is ready now.
fn waits_for(fds: &[(BorrowedFd<'_>, PollFlags)], timeout: Option<Duration>) -> Option<Wait> {
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|(fd, events)| PollFd::from_borrowed_fd(*fd, *events))
        .collect();
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if !polled.is_empty() && rustix::event::poll(&mut polled, Some(&zero)).ok()? > 0 {
        return None;
    }
    let fds = fds
        .iter()
        .map(|(fd, events)| Some((dup_host(*fd)?, *events)))
        .collect::<Option<Vec<_>>>()?;
    Some(Wait::Ready { fds, timeout })
}

const P_ALL: u32 = 0;
const P_PID: u32 = 1;
const P_PGID: u32 = 2;
const WEXITED: u64 = 4;
const WNOWAIT: u64 = 0x0100_0000;

/// A wait for a child unless one (as `waitid(idtype, id, options)`
/// chooses them) has something to report now.
fn child_would_wait(idtype: u32, id: u32, options: u64) -> Option<Wait> {
    // Looked at, not reaped: the call itself reaps it.
    let peek = (options | WNOHANG | WNOWAIT) as i32;
    let (info, _) = crate::host::waitid(idtype, id, peek).ok()?;
    // siginfo_t's si_pid, 0 when no child has anything to report.
    let pid = i32::from_ne_bytes([info[16], info[17], info[18], info[19]]);
    (pid == 0).then_some(Wait::Child)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_empty_pipe_waits_until_written() {
        let (read, write) = rustix::pipe::pipe().expect("pipe");
        let wait = waits_for(&[(read.as_fd(), PollFlags::IN)], None);
        let Some(Wait::Ready { fds, timeout }) = wait else {
            panic!("an empty pipe must wait, got {wait:?}");
        };
        assert_eq!((fds.len(), timeout), (1, None));
        // Its own duplicate: still open when the guest's is closed.
        let dup = &fds[0].0;
        rustix::io::write(&write, b"x").expect("write");
        drop(read);
        let mut polled = [PollFd::new(dup, PollFlags::IN)];
        assert_eq!(rustix::event::poll(&mut polled, None).expect("poll"), 1);
    }

    #[test]
    fn a_ready_descriptor_does_not_wait() {
        let (read, write) = rustix::pipe::pipe().expect("pipe");
        rustix::io::write(&write, b"x").expect("write");
        assert!(waits_for(&[(read.as_fd(), PollFlags::IN)], None).is_none());
        assert!(waits_for(&[(write.as_fd(), PollFlags::OUT)], None).is_none());
    }

    #[test]
    fn nothing_to_poll_is_a_sleep() {
        let wait = waits_for(&[], Some(Duration::from_millis(5)));
        assert!(matches!(wait, Some(Wait::Ready { fds, timeout: Some(_) }) if fds.is_empty()));
    }

    #[test]
    fn without_children_a_wait_fails_at_once_instead() {
        // ECHILD: the call itself reports it.
        assert!(child_would_wait(P_ALL, 0, WEXITED).is_none());
    }

    #[test]
    fn a_write_goes_on_from_where_it_stopped_across_its_pieces() {
        use tcgkit_tcg_core::Perms;
        let mut mem = GuestMemory::new();
        mem.map(0x1_0000, 0x1000, Perms::READ | Perms::WRITE)
            .unwrap();
        mem.write(0x1_0000, b"abcdefghij").unwrap();
        // writev's pieces: "abc", "" and "efghij".
        let pieces = [(0x1_0000, 3), (0x1_0004, 0), (0x1_0004, 6)];
        let mut at = |from, most| gather(&mut mem, &pieces, from, most).unwrap();
        assert_eq!(at(0, 100), b"abcefghij");
        assert_eq!(at(2, 3), b"cef");
        assert_eq!(at(3, 4), b"efgh");
        assert_eq!(at(8, 4), b"j");
        assert!(at(9, 4).is_empty());
        // An unmapped piece: the call itself then says EFAULT.
        assert!(gather(&mut mem, &[(0x2_0000, 4)], 0, 4).is_err());
    }

    #[test]
    fn only_the_calls_linux_restarts_are_restarted() {
        assert!(restartable(nr::READ) && restartable(nr::WAIT4));
        assert!(!restartable(nr::PPOLL) && !restartable(nr::EPOLL_PWAIT));
        assert!(!restartable(nr::RT_SIGSUSPEND));
    }
}
