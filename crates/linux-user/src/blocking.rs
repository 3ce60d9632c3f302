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
//! What is left: a write larger than a pipe's free space still waits in
//! the server (poll only says that some space is free), and so does a
//! read that another thread's read of the same pipe got to first.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};

use crate::abi::nr;
use crate::fd::dup_host;
use crate::process::{GuestExit, Process};
use crate::sigframe::UNBLOCKABLE;
use crate::signal::Signal;
use crate::syscall::{PollEntry, ppoll_timeout};

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
            nr::READ | nr::READV | nr::RECVFROM | nr::ACCEPT | nr::ACCEPT4 => {
                self.fd_would_wait(a0, PollFlags::IN)
            }
            nr::WRITE | nr::WRITEV | nr::SENDTO => self.fd_would_wait(a0, PollFlags::OUT),
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
    fn only_the_calls_linux_restarts_are_restarted() {
        assert!(restartable(nr::READ) && restartable(nr::WAIT4));
        assert!(!restartable(nr::PPOLL) && !restartable(nr::EPOLL_PWAIT));
        assert!(!restartable(nr::RT_SIGSUSPEND));
    }
}
