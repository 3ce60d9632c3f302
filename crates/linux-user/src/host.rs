//! The host process calls a guest's child processes need and no safe
//! wrapper offers: `fork`, `wait4` and `waitid` with their rusage, `kill`
//! of another process, and `execve` with the guest's descriptor table laid
//! out as host descriptors. The only `unsafe` of this crate lives here.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char};
use std::os::fd::{AsRawFd, BorrowedFd};

/// The calling thread's errno after a failed call.
fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Which side of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forked {
    /// The parent, with the child's pid.
    Parent(u32),
    /// The child.
    Child,
}

/// Forks the host process. The caller must have stopped the host threads
/// it owns (the JIT's compiler, the threads' ticker): the child has only
/// the calling thread.
pub(crate) fn fork() -> Result<Forked, i32> {
    // SAFETY: fork has no memory-safety preconditions of its own. The
    // child runs on a copy of this thread only; glibc's malloc and stdio
    // stay usable there (their locks are reset by glibc's atfork handlers),
    // and the caller stopped the threads whose locks or channels the child
    // would otherwise wait on.
    match unsafe { libc::fork() } {
        -1 => Err(last_errno()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid as u32)),
    }
}

/// `struct rusage` as 18 longs: two timevals, then 14 counters (the same
/// layout on x86-64 and RV64).
pub(crate) type RawRusage = [i64; 18];

fn rusage_words(r: &libc::rusage) -> RawRusage {
    [
        r.ru_utime.tv_sec,
        r.ru_utime.tv_usec,
        r.ru_stime.tv_sec,
        r.ru_stime.tv_usec,
        r.ru_maxrss,
        r.ru_ixrss,
        r.ru_idrss,
        r.ru_isrss,
        r.ru_minflt,
        r.ru_majflt,
        r.ru_nswap,
        r.ru_inblock,
        r.ru_oublock,
        r.ru_msgsnd,
        r.ru_msgrcv,
        r.ru_nsignals,
        r.ru_nvcsw,
        r.ru_nivcsw,
    ]
}

/// `wait4(pid, &status, options, &rusage)`: the pid waited for (0 with
/// `WNOHANG` and nothing to report), its wait status and resource usage.
pub(crate) fn wait4(pid: i32, options: i32) -> Result<(i32, i32, RawRusage), i32> {
    let mut status = 0i32;
    // SAFETY: rusage is plain integers, for which all zeroes is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both out-pointers are to live locals of the right types.
    let got = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
    if got == -1 {
        return Err(last_errno());
    }
    Ok((got, status, rusage_words(&usage)))
}

/// Bytes of a `siginfo_t` (the same on x86-64 and RV64).
pub(crate) const SIGINFO_SIZE: usize = 128;

/// The raw `waitid(idtype, id, &info, options, &rusage)` syscall (its
/// fifth argument is Linux's, not POSIX's): the siginfo bytes and usage.
pub(crate) fn waitid(
    idtype: u32,
    id: u32,
    options: i32,
) -> Result<([u8; SIGINFO_SIZE], RawRusage), i32> {
    let mut info = [0u8; SIGINFO_SIZE];
    // SAFETY: rusage is plain integers, for which all zeroes is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most a siginfo_t (128 bytes) at the
    // first pointer and a struct rusage at the second; both are live
    // locals at least that large.
    let got = unsafe {
        libc::syscall(
            libc::SYS_waitid,
            idtype as libc::c_long,
            id as libc::c_long,
            info.as_mut_ptr(),
            options as libc::c_long,
            &mut usage as *mut libc::rusage,
        )
    };
    if got == -1 {
        return Err(last_errno());
    }
    Ok((info, rusage_words(&usage)))
}

/// `kill(pid, sig)` of any host process or group.
pub(crate) fn kill(pid: i32, sig: i32) -> Result<(), i32> {
    // SAFETY: kill takes plain integers and touches no memory of ours.
    match unsafe { libc::kill(pid, sig) } {
        0 => Ok(()),
        _ => Err(last_errno()),
    }
}

/// Replaces this process with `program` (`argv`, `env`), whose descriptor
/// `n` is the host descriptor `fds` pairs with `n`, and which inherits no
/// other descriptor. Returns only on failure, with the errno: before any
/// descriptor moved if it can tell, otherwise with this process's own
/// descriptors rearranged (the caller then ends the process, as Linux
/// kills a process whose exec fails past the point of no return).
pub(crate) fn exec(
    program: &CStr,
    argv: &[CString],
    env: &[CString],
    fds: &[(u32, BorrowedFd<'_>)],
) -> ExecFailure {
    let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const c_char> = env.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    // Every descriptor open now, listed before any moves.
    let open: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(e) => return ExecFailure::Before(e.raw_os_error().unwrap_or(libc::EIO)),
    };
    let top = fds.iter().map(|&(n, _)| n as i32 + 1).max().unwrap_or(0);
    // Copies above every target number, so that no move overwrites a
    // source still to be moved.
    let mut staged = Vec::with_capacity(fds.len());
    for &(n, host) in fds {
        // SAFETY: F_DUPFD_CLOEXEC takes an integer argument and creates a
        // new descriptor, which `staged` then owns until the exec.
        let copy = unsafe { libc::fcntl(host.as_raw_fd(), libc::F_DUPFD_CLOEXEC, top) };
        if copy == -1 {
            let e = last_errno();
            for &(_, copy) in &staged {
                // SAFETY: closing descriptors this function created.
                unsafe { libc::close(copy) };
            }
            return ExecFailure::Before(e);
        }
        staged.push((n as i32, copy));
    }
    // The point of no return: nothing of ours but the guest's table may
    // reach the new program.
    for fd in open {
        if !staged.iter().any(|&(n, _)| n == fd) {
            // SAFETY: F_SETFD with an integer flag; an fd that is no longer
            // open fails with EBADF, which is harmless.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
    for &(n, copy) in &staged {
        // SAFETY: dup2 onto a number the guest's table names; whatever of
        // ours was there is being replaced along with this process image.
        if unsafe { libc::dup2(copy, n) } == -1 {
            return ExecFailure::After(last_errno());
        }
    }
    // SAFETY: program is a NUL-terminated string; both pointer arrays are
    // NUL-terminated and point into `argv` and `env`, which outlive the call.
    unsafe { libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
    ExecFailure::After(last_errno())
}

/// How [`exec`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExecFailure {
    /// Nothing changed: the guest gets this errno.
    Before(i32),
    /// The descriptor table was rearranged already: the process must end.
    After(i32),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that exits 7 is reported with its status and usage, and a
    /// second wait has nobody left.
    #[test]
    fn fork_and_wait_report_the_child() {
        match fork().unwrap() {
            Forked::Child => {
                // SAFETY: _exit ends the child at once, running none of
                // the test harness's code in it.
                unsafe { libc::_exit(7) }
            }
            Forked::Parent(pid) => {
                let (got, status, _usage) = wait4(pid as i32, 0).unwrap();
                assert_eq!(got, pid as i32);
                assert!(libc::WIFEXITED(status));
                assert_eq!(libc::WEXITSTATUS(status), 7);
                assert_eq!(wait4(pid as i32, 0), Err(libc::ECHILD));
            }
        }
    }

    /// waitid reports a killed child in the siginfo layout the guest reads.
    #[test]
    fn waitid_reports_a_killed_child() {
        match fork().unwrap() {
            Forked::Child => loop {
                // SAFETY: pause only waits for a signal.
                unsafe { libc::pause() };
            },
            Forked::Parent(pid) => {
                kill(pid as i32, libc::SIGTERM).unwrap();
                const P_PID: u32 = 1;
                let (info, _) = waitid(P_PID, pid, libc::WEXITED).unwrap();
                let word = |at: usize| i32::from_le_bytes(info[at..at + 4].try_into().unwrap());
                assert_eq!(word(0), libc::SIGCHLD);
                assert_eq!(word(8), 2, "si_code CLD_KILLED");
                assert_eq!(word(16), pid as i32);
                assert_eq!(word(24), libc::SIGTERM);
            }
        }
    }

    /// The new program gets exactly the descriptors it is given, at the
    /// numbers given (run in a child, which the exec replaces).
    #[test]
    fn exec_gives_the_program_exactly_the_guest_descriptors() {
        let (read, write) = rustix::pipe::pipe().unwrap();
        match fork().unwrap() {
            Forked::Child => {
                // The program sees guest fd 1 = the pipe's write end and
                // nothing else but what it opens itself.
                let program = CString::new("/bin/sh").unwrap();
                let argv =
                    ["sh", "-c", "ls /proc/$$/fd; echo done"].map(|a| CString::new(a).unwrap());
                let failure = exec(
                    &program,
                    &argv,
                    &[],
                    &[(1, std::os::fd::AsFd::as_fd(&write))],
                );
                // Only reached on failure.
                let code = match failure {
                    ExecFailure::Before(e) | ExecFailure::After(e) => e,
                };
                // SAFETY: as above, the child ends without running more.
                unsafe { libc::_exit(100 + code) }
            }
            Forked::Parent(pid) => {
                drop(write);
                let mut out = String::new();
                std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut out).unwrap();
                let (_, status, _) = wait4(pid as i32, 0).unwrap();
                assert_eq!(libc::WEXITSTATUS(status), 0, "{out}");
                // The shell's descriptors: its stdout only (neither the test
                // process's stdin and stderr nor the pipe's read end).
                assert_eq!(out, "1\ndone\n");
            }
        }
    }
}
