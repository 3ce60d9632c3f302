//! Linux syscalls of one guest process: the dispatcher and the process-wide
//! state they share (descriptors, address space, signal bookkeeping).
//!
//! Every handler returns `Result<u64, i32>`: a value for the guest's a0 or a
//! positive errno (the guest sees `-errno`). Guest pointers are read and
//! written only through `GuestMemory`, so a bad pointer is `EFAULT`, never a
//! host fault.

mod epoll;
mod file;
mod net;
mod poll;

pub(crate) use file::write_segments;
pub(crate) use poll::{PollEntry, ppoll_timeout};
mod system;

pub(crate) use system::sleep_request;

use std::collections::HashSet;
use std::path::PathBuf;

use tcgkit_tcg_core::GuestMemory;

use crate::abi::{errno, nr};
use crate::fd::FdTable;
use crate::mm::{AddressSpace, CodeChange};
use crate::modules::ModuleMap;
use crate::prefix::PathPrefix;
use crate::shared::SharedMaps;
use crate::signal::Signal;

/// Bytes of RV64's kernel `struct sigaction` (handler, flags, mask).
const SIGACTION_SIZE: usize = 24;

/// What a syscall did to the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Resume the guest with this value in a0.
    Return(u64),
    /// The process exited with this status (`exit`, `exit_group`).
    Exit(i32),
    /// The process was killed by this signal (SIGKILL; other signals are
    /// made pending and delivered by the run loop).
    Killed(Signal),
}

/// Guest-visible signal dispositions (bookkeeping only: no asynchronous
/// delivery, no guest handlers run yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    Default,
    Ignore,
    Handler,
}

/// The kernel state of one guest process.
pub(crate) struct Kernel {
    pub(crate) fds: FdTable,
    pub(crate) space: AddressSpace,
    /// Writable shared file mappings, synced with their files at syscalls.
    shared: SharedMaps,
    /// Absolute host path of the executable (what `/proc/self/exe` names).
    pub(crate) exe_path: PathBuf,
    /// Where absolute guest paths are looked up first (`-L`).
    prefix: PathPrefix,
    /// The ELF modules mapped executable, and what changed about them.
    pub(crate) modules: ModuleMap,
    /// Ranges whose translated code the engine must drop.
    pub(crate) code_changes: Vec<(u64, u64)>,
    /// Raw `struct sigaction` of each signal as the guest set it, 1..=64
    /// (RV64 has no `sa_restorer`: handler, flags, mask).
    sigactions: Vec<[u8; SIGACTION_SIZE]>,
    pub(crate) sigmask: u64,
    /// Signals raised but not delivered yet (bit n-1 for signal n), and for
    /// each whether a thread-directed call (tgkill/tkill) raised it.
    pending: u64,
    pending_by_thread: u64,
    /// Signals pending on the running thread alone (tkill/tgkill to it,
    /// SIGPIPE); each parked thread keeps its own (see `threads.rs`).
    pub(crate) thread_pending: u64,
    /// Signals sent to other threads by the last syscall, for the process
    /// to hand to them.
    pub(crate) directed: Vec<(u32, Signal)>,
    /// The running thread's id.
    pub(crate) current_tid: u32,
    /// Syscall numbers already reported as unsupported.
    warned: HashSet<u64>,
    /// Resource limits the guest lowered (`setrlimit`), by resource number.
    rlimits: Vec<(u32, u64, u64)>,
    /// The alternate signal stack (`stack_t`: sp, flags, size).
    pub(crate) altstack: [u64; 3],
    /// The thread name (`PR_SET_NAME`), at most 15 bytes.
    thread_name: Vec<u8>,
    /// Ids of the process's other threads (signals sent to them are the
    /// process's: see `threads.rs`).
    pub(crate) other_tids: Vec<u32>,
    /// `ppoll` and `epoll_pwait` return at once, whatever their timeout:
    /// on host threads the server makes them only once they need not
    /// wait (`blocking.rs`).
    pub(crate) never_wait: bool,
    /// The calling thread's blocking write that the server makes a piece
    /// at a time (host threads: `blocking.rs`), until it is complete.
    pub(crate) write_progress: Option<WriteProgress>,
    /// What the server read for the calling thread's `read` or `readv`
    /// without waiting (host threads: `blocking.rs`), which that call
    /// returns.
    pub(crate) read_ahead: Option<ReadAhead>,
}

/// Bytes read for a `read` or `readv` before it was made (see
/// [`Kernel::read_without_waiting`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ReadAhead {
    /// The call: its number and first three arguments.
    pub(crate) call: (u64, [u64; 3]),
    pub(crate) data: Vec<u8>,
}

/// What [`Kernel::read_without_waiting`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadNow {
    /// The bytes there were (none at the end of the file) are kept for
    /// the call.
    Read,
    /// There were none yet: the call would wait.
    Empty,
    /// It cannot tell: not a pipe or socket, a non-blocking descriptor, a
    /// host that cannot read a pipe without waiting, arguments the call
    /// itself will refuse.
    Unknown,
}

/// How far the server has got with a thread's blocking `write` or
/// `writev` on host threads, which it makes without waiting, as much as
/// fits each time the thread calls again (`blocking.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteProgress {
    /// The call: its number and first three arguments.
    pub(crate) call: (u64, [u64; 3]),
    /// Bytes written so far.
    pub(crate) done: u64,
    /// No more will be written: the call returns `done`.
    pub(crate) complete: bool,
}

/// A guest `struct timespec` at `addr`, validated as Linux does.
pub(crate) fn timespec_at(mem: &mut GuestMemory, addr: u64) -> Result<(i64, i64), i32> {
    system::get_timespec(mem, addr)
}

impl Kernel {
    pub(crate) fn new(
        fds: FdTable,
        space: AddressSpace,
        exe_path: PathBuf,
        prefix: PathPrefix,
    ) -> Kernel {
        Kernel {
            fds,
            space,
            shared: SharedMaps::default(),
            exe_path,
            prefix,
            modules: ModuleMap::default(),
            code_changes: Vec::new(),
            sigactions: vec![[0; SIGACTION_SIZE]; 65],
            sigmask: 0,
            pending: 0,
            pending_by_thread: 0,
            thread_pending: 0,
            directed: Vec::new(),
            current_tid: std::process::id(),
            warned: HashSet::new(),
            rlimits: Vec::new(),
            // SS_DISABLE: no alternate stack yet.
            altstack: [0, 2, 0],
            thread_name: Vec::new(),
            other_tids: Vec::new(),
            never_wait: false,
            write_progress: None,
            read_ahead: None,
        }
    }

    /// Whether the server has made this call already (host threads: see
    /// [`WriteProgress`]).
    fn write_complete(&self, number: u64, args: [u64; 3]) -> bool {
        self.write_progress
            .is_some_and(|p| p.complete && p.call == (number, args))
    }

    /// The host path for guest path `path` (the `-L` prefix applied).
    pub(crate) fn resolve_path(&self, path: &[u8]) -> Vec<u8> {
        self.prefix.resolve(path)
    }

    /// Replaces the `-L` prefix of guest paths.
    pub(crate) fn set_prefix(&mut self, prefix: PathPrefix) {
        self.prefix = prefix;
    }

    /// Runs syscall `number` with `args`.
    pub(crate) fn syscall(
        &mut self,
        mem: &mut GuestMemory,
        number: u64,
        args: [u64; 6],
    ) -> Outcome {
        let [a0, a1, a2, a3, a4, a5] = args;
        if !matches!(number, nr::READ | nr::READV) {
            // Never left over; if it were, no call could return it.
            self.read_ahead = None;
        }
        let mut synced = Ok(());
        if !self.shared.is_empty() && syncs_before(number, a2) {
            synced = self.shared.write_back(mem);
        }
        let result = match number {
            nr::EXIT | nr::EXIT_GROUP => return Outcome::Exit(a0 as i32),
            nr::KILL | nr::TKILL | nr::TGKILL => {
                let signal = if number == nr::TGKILL { a2 } else { a1 };
                return self.kill(number, a0, a1, signal);
            }
            nr::READ => self.read(mem, a0, a1, a2),
            // Made already, a piece at a time, while its thread waited.
            nr::WRITE | nr::WRITEV if self.write_complete(number, [a0, a1, a2]) => {
                Ok(self.write_progress.take().map_or(0, |p| p.done))
            }
            nr::WRITE => self.write(mem, a0, a1, a2),
            nr::READV => self.readv(mem, a0, a1, a2, None),
            nr::WRITEV => self.writev(mem, a0, a1, a2, None),
            nr::PREAD64 => self.pread(mem, a0, a1, a2, a3),
            nr::PWRITE64 => self.pwrite(mem, a0, a1, a2, a3),
            nr::PREADV => self.readv(mem, a0, a1, a2, Some(a3)),
            nr::PWRITEV => self.writev(mem, a0, a1, a2, Some(a3)),
            nr::OPENAT => self.openat(mem, a0, a1, a2, a3),
            nr::CLOSE => self.fds.close(a0).map(|()| 0),
            nr::LSEEK => self.lseek(a0, a1, a2),
            nr::DUP => self.dup(a0),
            nr::DUP3 => self.dup3(a0, a1, a2),
            nr::FCNTL => self.fcntl(mem, a0, a1, a2),
            nr::IOCTL => self.ioctl(mem, a0, a1, a2),
            nr::PIPE2 => self.pipe2(mem, a0, a1),
            nr::NEWFSTATAT => self.newfstatat(mem, a0, a1, a2, a3),
            nr::FSTAT => self.fstat(mem, a0, a1),
            nr::READLINKAT => self.readlinkat(mem, a0, a1, a2, a3),
            nr::GETCWD => self.getcwd(mem, a0, a1),
            nr::CHDIR => self.chdir(mem, a0),
            nr::FCHDIR => self.fchdir(a0),
            nr::GETDENTS64 => self.getdents64(mem, a0, a1, a2),
            nr::FACCESSAT => self.faccessat(mem, a0, a1, a2, 0),
            nr::FACCESSAT2 => self.faccessat(mem, a0, a1, a2, a3),
            nr::UNLINKAT => self.unlinkat(mem, a0, a1, a2),
            nr::MKDIRAT => self.mkdirat(mem, a0, a1, a2),
            nr::RENAMEAT => self.renameat(mem, a0, a1, a2, a3, 0),
            nr::RENAMEAT2 => self.renameat(mem, a0, a1, a2, a3, a4),
            nr::SYMLINKAT => self.symlinkat(mem, a0, a1, a2),
            nr::LINKAT => self.linkat(mem, a0, a1, a2, a3, a4),
            nr::FCHMOD => self.fchmod(a0, a1),
            nr::FCHMODAT => self.fchmodat(mem, a0, a1, a2),
            nr::FCHOWN => self.fchown(a0, a1, a2),
            nr::FCHOWNAT => self.fchownat(mem, a0, a1, a2, a3, a4),
            nr::FTRUNCATE => self.ftruncate(a0, a1),
            nr::FALLOCATE => self.fallocate(a0, a1, a2, a3),
            nr::STATX => self.statx(mem, a0, a1, a2, a3, a4),
            nr::STATFS => self.statfs(mem, Some(a0), 0, a1),
            nr::FSTATFS => self.statfs(mem, None, a0, a1),
            nr::PPOLL => self.ppoll(mem, a0, a1, a2),
            nr::EPOLL_CREATE1 => self.epoll_create1(a0),
            nr::EPOLL_CTL => self.epoll_ctl(mem, a0, a1, a2, a3),
            nr::EPOLL_PWAIT => self.epoll_pwait(mem, args, None),
            nr::SOCKET => self.socket(a0, a1, a2),
            nr::CONNECT => self.connect(mem, a0, a1, a2),
            nr::BIND => self.bind(mem, a0, a1, a2),
            nr::LISTEN => self.listen(a0, a1),
            nr::ACCEPT => self.accept4(mem, a0, a1, a2, 0),
            nr::ACCEPT4 => self.accept4(mem, a0, a1, a2, a3),
            nr::SENDTO => self.sendto(mem, a0, a1, a2, a3, a4, a5),
            nr::RECVFROM => self.recvfrom(mem, a0, a1, a2, a3, a4, a5),
            nr::SHUTDOWN => self.shutdown(a0, a1),
            nr::FSYNC | nr::FDATASYNC | nr::SYNC_FILE_RANGE => self.fsync(number, a0),
            nr::SYNC => {
                rustix::fs::sync();
                Ok(0)
            }
            nr::FADVISE64 => self.fds.get(a0).map(|_| 0),
            nr::FLOCK => self.flock(a0, a1),
            nr::UTIMENSAT => self.utimensat(mem, a0, a1, a2, a3),
            nr::UMASK => Ok(u64::from(
                rustix::process::umask(rustix::fs::Mode::from_bits_retain(a0 as u32 & 0o777))
                    .bits(),
            )),
            nr::BRK => Ok(self.space.brk(mem, a0)),
            nr::MMAP => self.mmap(mem, a0, a1, a2, a3, a4, a5),
            nr::MUNMAP => self.munmap(mem, a0, a1),
            nr::MPROTECT => self
                .space
                .mprotect(mem, a0, a1, a2)
                .map(|c| self.note(c, 0)),
            nr::MREMAP => self.mremap(mem, a0, a1, a2, a3, a4),
            nr::MADVISE => self.madvise(mem, a0, a1, a2),
            nr::MSYNC => {
                if a0 % tcgkit_tcg_core::PAGE_SIZE != 0 {
                    Err(errno::EINVAL)
                } else if !mem.is_range_mapped(a0, a1) {
                    Err(errno::ENOMEM)
                } else {
                    // The write-back already happened (msync is a sync point).
                    synced.map(|()| 0)
                }
            }
            nr::UNAME => system::uname(mem, a0),
            nr::GETRANDOM => system::getrandom(mem, a0, a1, a2),
            nr::CLOCK_GETTIME => system::clock_gettime(mem, a0, a1),
            nr::CLOCK_GETRES => system::clock_getres(mem, a0, a1),
            nr::GETTIMEOFDAY => system::gettimeofday(mem, a0, a1),
            nr::NANOSLEEP => system::sleep(mem, None, a0, a1),
            nr::CLOCK_NANOSLEEP => system::sleep(mem, Some((a0, a1)), a2, a3),
            nr::SET_TID_ADDRESS => Ok(u64::from(std::process::id())),
            // Like qemu-riscv64 7.2: the robust futex list is not emulated,
            // and glibc copes with ENOSYS for it and for rseq.
            // As qemu-riscv64 7.2 (glibc then uses clone).
            nr::SET_ROBUST_LIST | nr::RSEQ | nr::CLONE3 => Err(errno::ENOSYS),
            nr::FUTEX => system::futex(mem, args),
            nr::GETRLIMIT => self.prlimit(mem, 0, a0, 0, a1),
            nr::SETRLIMIT => self.prlimit(mem, 0, a0, a1, 0),
            nr::PRLIMIT64 => self.prlimit(mem, a0, a1, a2, a3),
            nr::RT_SIGACTION => self.rt_sigaction(mem, a0, a1, a2, a3),
            nr::RT_SIGPROCMASK => self.rt_sigprocmask(mem, a0, a1, a2, a3),
            nr::GETPID | nr::GETTID => Ok(u64::from(std::process::id())),
            nr::GETPPID => {
                Ok(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u64))
            }
            nr::GETUID => Ok(u64::from(rustix::process::getuid().as_raw())),
            nr::GETEUID => Ok(u64::from(rustix::process::geteuid().as_raw())),
            nr::GETGID => Ok(u64::from(rustix::process::getgid().as_raw())),
            nr::GETEGID => Ok(u64::from(rustix::process::getegid().as_raw())),
            nr::SYSINFO => system::sysinfo(mem, a0),
            nr::GETPGID => system::getpgid(a0),
            nr::GETRUSAGE => system::getrusage(mem, a0, a1),
            nr::TIMES => system::times(mem, a0),
            nr::GETSID => system::getsid(a0),
            nr::SETPGID => system::setpgid(a0, a1),
            nr::SETSID => rustix::process::setsid()
                .map(|p| p.as_raw_nonzero().get() as u64)
                .map_err(host_errno),
            nr::GETGROUPS => system::getgroups(mem, a0, a1),
            nr::GETCPU => system::getcpu(mem, a0, a1),
            nr::SIGALTSTACK => self.sigaltstack(mem, a0, a1),
            nr::PRCTL => self.prctl(mem, a0, a1),
            nr::RISCV_FLUSH_ICACHE => self.flush_icache(a0, a1),
            nr::SCHED_GETAFFINITY => system::sched_getaffinity(mem, a0, a1, a2),
            nr::SCHED_YIELD => {
                std::thread::yield_now();
                Ok(0)
            }
            _ => {
                if self.warned.insert(number) {
                    eprintln!("tcgkit: unsupported syscall: {number}");
                }
                Err(errno::ENOSYS)
            }
        };
        if let Ok(value) = result
            && !self.shared.is_empty()
            && reloads_after(number, a2)
        {
            // open(O_TRUNC) changed the file behind the descriptor it returns.
            let fd = if number == nr::OPENAT { value } else { a0 };
            if let Ok(host) = self.fds.get(fd) {
                self.shared.reload(mem, host, &mut self.code_changes);
            }
        }
        if result == Err(errno::EPIPE)
            && matches!(number, nr::WRITE | nr::WRITEV | nr::PWRITE64 | nr::PWRITEV)
        {
            // Writing to a pipe nobody reads also raises SIGPIPE (by
            // default fatal), delivered when the call returns.
            self.raise(Signal::PIPE, true);
        }
        Outcome::Return(match result {
            Ok(value) => value,
            Err(e) => (-i64::from(e)) as u64,
        })
    }

    /// Writes back every shared mapping before the process ends (exit,
    /// fatal signal), so the file holds the guest's last stores.
    pub(crate) fn finish(&mut self, mem: &mut GuestMemory) {
        if !self.shared.is_empty() {
            let _ = self.shared.write_back(mem);
        }
    }

    /// `munmap`: the range was written back (a sync point) and is no longer
    /// tracked once it is gone.
    fn munmap(&mut self, mem: &mut GuestMemory, addr: u64, len: u64) -> Result<u64, i32> {
        let change = self.space.munmap(mem, addr, len)?;
        let pages = crate::mm::page_up(len).unwrap_or(u64::MAX);
        self.modules.unmap(addr, addr.saturating_add(pages));
        if !self.shared.is_empty() {
            self.shared
                .forget(addr, crate::mm::page_up(len).unwrap_or(u64::MAX));
        }
        Ok(self.note(change, 0))
    }

    /// `mremap`: a shared mapping that moves or grows keeps showing its file
    /// (the grown part is loaded from it); the moved-from range is forgotten.
    fn mremap(
        &mut self,
        mem: &mut GuestMemory,
        old: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        new_addr: u64,
    ) -> Result<u64, i32> {
        let old_pages = crate::mm::page_up(old_len).ok_or(errno::EINVAL)?;
        let source = self
            .shared
            .lookup(old, old_pages.max(1))
            .and_then(|(file, offset)| crate::fd::dup_host(file).map(|f| (f, offset)));
        let (addr, change) = self
            .space
            .mremap(mem, old, old_len, new_len, flags, new_addr)?;
        let new_pages = crate::mm::page_up(new_len).unwrap_or(u64::MAX);
        if addr != old {
            self.modules.unmap(old, old.saturating_add(old_pages));
        } else if new_pages < old_pages {
            self.modules
                .unmap(old.saturating_add(new_pages), old.saturating_add(old_pages));
        }
        if !self.shared.is_empty() {
            self.shared.forget(old, old_pages);
            let new_pages = crate::mm::page_up(new_len).unwrap_or(u64::MAX);
            self.shared.forget(addr, new_pages);
            if let Some((file, offset)) = source {
                use rustix::fd::AsFd as _;
                // Without the handle the pages keep their bytes but stop
                // reaching the file (only if the host runs out of fds).
                if self
                    .shared
                    .add(mem, addr, new_pages, file.as_fd(), offset)
                    .is_ok()
                {
                    self.shared
                        .reload(mem, file.as_fd(), &mut self.code_changes);
                }
            }
        }
        Ok(self.note(change, addr))
    }

    /// Records the code ranges a memory syscall touched; returns `value`.
    fn note(&mut self, change: CodeChange, value: u64) -> u64 {
        if let Some(range) = change.invalidate {
            self.code_changes.push(range);
        }
        value
    }

    /// `riscv_flush_icache(start, end, flags)`: code written to memory is
    /// to run. `fence.i` makes it so on its own hart; this call on every
    /// hart, so the blocks of the range are dropped by every thread's
    /// engine (`SYS_RISCV_FLUSH_ICACHE_LOCAL`, for the caller alone, does
    /// the same: more than asked is still correct). Flags Linux does not
    /// know are not refused (EINVAL there): qemu-riscv64 takes them too.
    fn flush_icache(&mut self, start: u64, end: u64) -> Result<u64, i32> {
        if end > start {
            self.code_changes.push((start, end - start));
        }
        Ok(0)
    }

    fn kill(&mut self, number: u64, a0: u64, a1: u64, signal: u64) -> Outcome {
        let me = u64::from(std::process::id());
        let target_ok = match number {
            // kill(pid): 0 is our group, our pid, -1 everyone (includes us).
            nr::KILL => a0 == me || a0 == 0 || a0 as i64 == -1 || (a0 as i64) == -(me as i64),
            nr::TKILL => a0 == me || self.is_other_thread(a0),
            _ => a0 == me && (a1 == me || self.is_other_thread(a1)),
        };
        if !target_ok {
            // Another process or group (a child, say): the host delivers
            // it. Threads of other processes are not reached.
            let result = match number {
                nr::KILL => crate::host::kill(a0 as i32, signal as i32).map(|()| 0),
                _ => Err(errno::ESRCH),
            };
            return Outcome::Return(match result {
                Ok(v) => v,
                Err(e) => (-i64::from(e)) as u64,
            });
        }
        if signal == 0 {
            return Outcome::Return(0);
        }
        let Some(sig) = Signal::from_number(signal) else {
            return Outcome::Return((-i64::from(errno::EINVAL)) as u64);
        };
        if sig == Signal::KILL {
            return Outcome::Killed(sig);
        }
        let target = match number {
            nr::TKILL => Some(a0),
            nr::TGKILL => Some(a1),
            _ => None,
        };
        match target {
            Some(tid) if tid != u64::from(self.current_tid) => {
                self.directed.push((tid as u32, sig));
            }
            _ => self.raise(sig, number != nr::KILL),
        }
        Outcome::Return(0)
    }

    fn is_other_thread(&self, tid: u64) -> bool {
        self.other_tids.iter().any(|&t| u64::from(t) == tid)
    }

    /// Marks `sig` pending (unless it is ignored: then it is discarded).
    pub(crate) fn raise(&mut self, sig: Signal, by_thread: bool) {
        if self.disposition(sig) == Disposition::Ignore {
            return;
        }
        let bit = 1u64 << (sig.number() - 1);
        if by_thread {
            self.thread_pending |= bit;
            self.pending_by_thread |= bit;
        } else {
            self.pending |= bit;
            self.pending_by_thread &= !bit;
        }
    }

    /// The signals that end a wait when they arrive: every one with a
    /// handler or a terminating default action.
    pub(crate) fn interrupting(&self) -> u64 {
        (1..=64u64)
            .filter_map(Signal::from_number)
            .filter(|&sig| match self.disposition(sig) {
                Disposition::Ignore => false,
                Disposition::Default => sig.default_terminates(),
                Disposition::Handler => true,
            })
            .fold(0, |bits, sig| bits | 1u64 << (sig.number() - 1))
    }

    /// The signals pending on the whole process.
    pub(crate) fn process_pending(&self) -> u64 {
        self.pending
    }

    /// Takes the lowest signal pending on the running thread or on the
    /// process that the mask lets through, with whether a thread-directed
    /// call raised it.
    pub(crate) fn take_deliverable(&mut self) -> Option<(Signal, bool)> {
        let ready = (self.pending | self.thread_pending) & !self.sigmask;
        if ready == 0 {
            return None;
        }
        let bit = ready & ready.wrapping_neg();
        if self.thread_pending & bit != 0 {
            self.thread_pending &= !bit;
        } else {
            self.pending &= !bit;
        }
        let by_thread = self.pending_by_thread & bit != 0;
        Signal::from_number(u64::from(bit.trailing_zeros()) + 1).map(|sig| (sig, by_thread))
    }

    /// Whether `sig` is blocked by the current mask.
    pub(crate) fn is_blocked(&self, sig: Signal) -> bool {
        self.sigmask & (1u64 << (sig.number() - 1)) != 0
    }

    /// The handler address, flags and mask the guest installed for `sig`.
    pub(crate) fn sigaction(&self, sig: Signal) -> (u64, u64, u64) {
        let raw = self
            .sigactions
            .get(usize::from(sig.number()))
            .copied()
            .unwrap_or([0; SIGACTION_SIZE]);
        let word =
            |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        (word(0), word(1), word(2))
    }

    /// Resets `sig` to its default action (`SA_RESETHAND`).
    pub(crate) fn reset_handler(&mut self, sig: Signal) {
        if let Some(slot) = self.sigactions.get_mut(usize::from(sig.number())) {
            *slot = [0; SIGACTION_SIZE];
        }
    }

    pub(crate) fn disposition(&self, sig: Signal) -> Disposition {
        match self.sigaction(sig).0 {
            0 => Disposition::Default,
            1 => Disposition::Ignore,
            _ => Disposition::Handler,
        }
    }

    fn rt_sigaction(
        &mut self,
        mem: &mut GuestMemory,
        sig: u64,
        act: u64,
        oldact: u64,
        sigsetsize: u64,
    ) -> Result<u64, i32> {
        if sigsetsize != 8 {
            return Err(errno::EINVAL);
        }
        let signal = Signal::from_number(sig).ok_or(errno::EINVAL)?;
        let index = usize::from(signal.number());
        let current = self.sigactions.get(index).copied().ok_or(errno::EINVAL)?;
        if act != 0 && (signal == Signal::KILL || signal.number() == 19) {
            return Err(errno::EINVAL);
        }
        let mut new = [0u8; SIGACTION_SIZE];
        if act != 0 {
            mem.read(act, &mut new).map_err(|_| errno::EFAULT)?;
        }
        if oldact != 0 {
            mem.write(oldact, &current).map_err(|_| errno::EFAULT)?;
        }
        if act != 0 {
            if let Some(slot) = self.sigactions.get_mut(index) {
                *slot = new;
            }
            // Setting SIG_IGN discards a pending instance (POSIX).
            if self.disposition(signal) == Disposition::Ignore {
                self.pending &= !(1u64 << (signal.number() - 1));
                self.thread_pending &= !(1u64 << (signal.number() - 1));
            }
        }
        Ok(0)
    }

    fn rt_sigprocmask(
        &mut self,
        mem: &mut GuestMemory,
        how: u64,
        set: u64,
        oldset: u64,
        sigsetsize: u64,
    ) -> Result<u64, i32> {
        if sigsetsize != 8 {
            return Err(errno::EINVAL);
        }
        let old = self.sigmask;
        if set != 0 {
            let value = mem.load(set, 8).map_err(|_| errno::EFAULT)?;
            let value = value & !crate::sigframe::UNBLOCKABLE;
            self.sigmask = match how {
                0 => old | value,
                1 => old & !value,
                2 => value,
                _ => return Err(errno::EINVAL),
            };
        }
        if oldset != 0 {
            mem.store(oldset, 8, old).map_err(|_| errno::EFAULT)?;
        }
        Ok(0)
    }

    fn sigaltstack(&mut self, mem: &mut GuestMemory, new: u64, old: u64) -> Result<u64, i32> {
        const SS_DISABLE: u64 = 2;
        const SS_AUTODISARM: u64 = 1 << 31;
        const MINSIGSTKSZ: u64 = 2048;
        let mut next = None;
        if new != 0 {
            let sp = mem.load(new, 8).map_err(|_| errno::EFAULT)?;
            let flags = mem.load(new + 8, 4).map_err(|_| errno::EFAULT)?;
            let size = mem.load(new + 16, 8).map_err(|_| errno::EFAULT)?;
            if flags & !(SS_DISABLE | SS_AUTODISARM) != 0 {
                return Err(errno::EINVAL);
            }
            if flags & SS_DISABLE == 0 && size < MINSIGSTKSZ {
                return Err(errno::ENOMEM);
            }
            next = Some(if flags & SS_DISABLE != 0 {
                [0, SS_DISABLE, 0]
            } else {
                [sp, flags, size]
            });
        }
        if old != 0 {
            let [sp, flags, size] = self.altstack;
            mem.store(old, 8, sp).map_err(|_| errno::EFAULT)?;
            mem.store(old + 8, 8, flags).map_err(|_| errno::EFAULT)?;
            mem.store(old + 16, 8, size).map_err(|_| errno::EFAULT)?;
        }
        if let Some(next) = next {
            self.altstack = next;
        }
        Ok(0)
    }

    fn prctl(&mut self, mem: &mut GuestMemory, option: u64, arg: u64) -> Result<u64, i32> {
        const PR_SET_NAME: u64 = 15;
        const PR_GET_NAME: u64 = 16;
        match option {
            PR_SET_NAME => {
                let name = mem.read_cstr(arg, 16).map_err(|_| errno::EFAULT)?;
                self.thread_name = name.into_iter().take(15).collect();
                Ok(0)
            }
            PR_GET_NAME => {
                let mut raw = [0u8; 16];
                let name = if self.thread_name.is_empty() {
                    // Linux names a thread after the executable's file name.
                    self.exe_path
                        .file_name()
                        .map(|n| n.as_encoded_bytes().to_vec())
                        .unwrap_or_default()
                } else {
                    self.thread_name.clone()
                };
                for (dst, src) in raw.iter_mut().zip(name.iter().take(15)) {
                    *dst = *src;
                }
                mem.write(arg, &raw).map_err(|_| errno::EFAULT)?;
                Ok(0)
            }
            _ => Err(errno::EINVAL),
        }
    }

    fn prlimit(
        &mut self,
        mem: &mut GuestMemory,
        pid: u64,
        resource: u64,
        new: u64,
        old: u64,
    ) -> Result<u64, i32> {
        if pid != 0 && pid != u64::from(std::process::id()) {
            return Err(errno::ESRCH);
        }
        let resource = u32::try_from(resource)
            .ok()
            .filter(|&r| r < 16)
            .ok_or(errno::EINVAL)?;
        let (cur, max) = match self.rlimits.iter().find(|(r, _, _)| *r == resource) {
            Some(&(_, cur, max)) => (cur, max),
            None => system::host_rlimit(resource),
        };
        if new != 0 {
            let new_cur = mem.load(new, 8).map_err(|_| errno::EFAULT)?;
            let new_max = mem.load(new + 8, 8).map_err(|_| errno::EFAULT)?;
            if new_cur > new_max {
                return Err(errno::EINVAL);
            }
            // An unprivileged process cannot raise its hard limit; the guest
            // keeps its own view, so refuse as Linux would for non-root.
            if new_max > max && !rustix::process::geteuid().is_root() {
                return Err(errno::EPERM);
            }
        }
        if old != 0 {
            mem.store(old, 8, cur).map_err(|_| errno::EFAULT)?;
            mem.store(old + 8, 8, max).map_err(|_| errno::EFAULT)?;
        }
        if new != 0 {
            let new_cur = mem.load(new, 8).map_err(|_| errno::EFAULT)?;
            let new_max = mem.load(new + 8, 8).map_err(|_| errno::EFAULT)?;
            self.rlimits.retain(|(r, _, _)| *r != resource);
            self.rlimits.push((resource, new_cur, new_max));
        }
        Ok(0)
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        &mut self,
        mem: &mut GuestMemory,
        addr: u64,
        len: u64,
        prot: u64,
        flags: u64,
        fd: u64,
        offset: u64,
    ) -> Result<u64, i32> {
        use crate::abi::mman::*;
        let kind = flags & MAP_TYPE;
        if kind != MAP_PRIVATE && kind != MAP_SHARED && kind != MAP_SHARED_VALIDATE {
            return Err(errno::EINVAL);
        }
        if prot & !7 != 0 || !offset.is_multiple_of(tcgkit_tcg_core::PAGE_SIZE) {
            return Err(errno::EINVAL);
        }
        let mut tracked = false;
        let contents = if flags & MAP_ANONYMOUS != 0 {
            Vec::new()
        } else {
            let host = self.fds.get(fd)?;
            let mode = rustix::fs::fcntl_getfl(host).map_err(host_errno)?;
            let access = mode & rustix::fs::OFlags::RWMODE;
            if access == rustix::fs::OFlags::WRONLY {
                return Err(errno::EACCES);
            }
            if kind != MAP_PRIVATE && prot & PROT_WRITE != 0 {
                // Stores must reach the file: it has to be open for writing.
                if access != rustix::fs::OFlags::RDWR {
                    return Err(errno::EACCES);
                }
                tracked = true;
            }
            file::read_for_mmap(host, offset, len)?
        };
        if !self.shared.is_empty() && flags & MAP_FIXED != 0 {
            // The new mapping replaces whatever shared pages were there.
            let _ = self.shared.write_back(mem);
            self.shared
                .forget(addr, crate::mm::page_up(len).unwrap_or(u64::MAX));
        }
        let (addr, change) = self.space.mmap(mem, addr, len, prot, flags, &contents)?;
        let end = addr.saturating_add(crate::mm::page_up(len).unwrap_or(u64::MAX));
        if flags & MAP_FIXED != 0 {
            // Whatever was mapped there is gone, executable module text too.
            self.modules.unmap(addr, end);
        }
        if flags & MAP_ANONYMOUS == 0 && prot & PROT_EXEC != 0 {
            let host = self.fds.get(fd)?;
            if let Some((key, path)) = file::identity(host) {
                self.modules.map_exec(key, &path, addr, end);
            }
        }
        if tracked {
            let host = self.fds.get(fd)?;
            let pages = crate::mm::page_up(len).ok_or(errno::ENOMEM)?;
            if let Err(e) = self.shared.add(mem, addr, pages, host, offset) {
                // Untracked stores would be lost: undo the mapping.
                let _ = self.space.munmap(mem, addr, pages);
                return Err(e);
            }
        }
        Ok(self.note(change, addr))
    }

    fn madvise(
        &mut self,
        mem: &mut GuestMemory,
        addr: u64,
        len: u64,
        advice: u64,
    ) -> Result<u64, i32> {
        const MADV_DONTNEED: u64 = 4;
        if !addr.is_multiple_of(tcgkit_tcg_core::PAGE_SIZE) {
            return Err(errno::EINVAL);
        }
        if advice == MADV_DONTNEED && len > 0 {
            // Shared file pages already equal the file (written back before
            // this call), which is what Linux re-reads them from.
            if !self.shared.is_empty() {
                let _ = self.shared.write_back(mem);
            }
            // Private anonymous pages read back as zero after DONTNEED.
            let len = crate::mm::page_up(len).ok_or(errno::EINVAL)?;
            if !mem.is_range_mapped(addr, len) {
                return Err(errno::ENOMEM);
            }
            let mut page = addr;
            while page < addr + len {
                let perms = mem.perms(page).ok_or(errno::ENOMEM)?;
                if !self.shared.contains(page) {
                    mem.map(page, tcgkit_tcg_core::PAGE_SIZE, perms)
                        .map_err(|_| errno::ENOMEM)?;
                }
                page += tcgkit_tcg_core::PAGE_SIZE;
            }
        }
        Ok(0)
    }
}

/// Whether syscall `number` (with third argument `a2`) may observe or
/// change a shared mapping's file or the mapping itself, so the guest's
/// stores must reach the file first.
fn syncs_before(number: u64, a2: u64) -> bool {
    matches!(
        number,
        nr::READ
            | nr::READV
            | nr::PREAD64
            | nr::PREADV
            | nr::WRITE
            | nr::WRITEV
            | nr::PWRITE64
            | nr::PWRITEV
            | nr::FSYNC
            | nr::FDATASYNC
            | nr::SYNC_FILE_RANGE
            | nr::SYNC
            | nr::MSYNC
            | nr::FTRUNCATE
            | nr::FALLOCATE
            | nr::FCNTL
            | nr::CLOSE
            | nr::MUNMAP
            | nr::MREMAP
            | nr::MPROTECT
    ) || number == nr::OPENAT && a2 & O_TRUNC != 0
}

/// Whether syscall `number` may have changed the contents of the file behind
/// its descriptor (its first argument, or the result of `open`), so mappings
/// of that file must be reloaded. A lock request (fcntl) is where another
/// process's changes become due.
fn reloads_after(number: u64, a2: u64) -> bool {
    matches!(
        number,
        nr::WRITE
            | nr::WRITEV
            | nr::PWRITE64
            | nr::PWRITEV
            | nr::FTRUNCATE
            | nr::FALLOCATE
            | nr::FCNTL
    ) || number == nr::OPENAT && a2 & O_TRUNC != 0
}

/// `O_TRUNC` (asm-generic numbering, shared by RV64 and the usual hosts).
const O_TRUNC: u64 = 0o1000;

/// Maps a host error to the guest errno (the numbering is shared).
pub(crate) fn host_errno(e: rustix::io::Errno) -> i32 {
    e.raw_os_error()
}

#[cfg(test)]
mod tests;
