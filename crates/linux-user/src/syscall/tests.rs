//! Syscall results and errno values, driven directly through the dispatcher.

use std::path::PathBuf;

use tcgkit_tcg_core::{GuestMemory, PAGE_SIZE, Perms};

use super::{Kernel, Outcome, ReadNow};
use crate::abi::{AT_FDCWD, errno, nr};
use crate::fd::{FdTable, MAX_FDS};
use crate::mm::{AddressSpace, MMAP_BASE};
use crate::signal::Signal;

/// Scratch memory the tests pass pointers into.
const BUF: u64 = 0x10_000;

struct Setup {
    kernel: Kernel,
    mem: GuestMemory,
}

impl Setup {
    fn new() -> Setup {
        let mut mem = GuestMemory::new();
        mem.map(BUF, 16 * PAGE_SIZE, Perms::READ | Perms::WRITE)
            .expect("map");
        let kernel = Kernel::new(
            FdTable::empty(MAX_FDS),
            AddressSpace::new(0x40_000),
            PathBuf::from("/guest/exe"),
            crate::prefix::PathPrefix::default(),
        );
        Setup { kernel, mem }
    }

    fn call(&mut self, number: u64, args: &[u64]) -> Outcome {
        let mut all = [0u64; 6];
        all[..args.len()].copy_from_slice(args);
        self.kernel.syscall(&mut self.mem, number, all)
    }

    /// The a0 value as a signed result (`-errno` on failure).
    fn ret(&mut self, number: u64, args: &[u64]) -> i64 {
        match self.call(number, args) {
            Outcome::Return(v) => v as i64,
            other => panic!("syscall {number} did not return: {other:?}"),
        }
    }

    fn string(&mut self, addr: u64, s: &str) -> u64 {
        self.mem.write(addr, s.as_bytes()).expect("write");
        self.mem.write(addr + s.len() as u64, &[0]).expect("write");
        addr
    }

    fn temp_dir(&self) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tcgkit-syscall-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }
}

fn neg(e: i32) -> i64 {
    -i64::from(e)
}

#[test]
fn unknown_and_bad_descriptors() {
    let mut s = Setup::new();
    assert_eq!(s.ret(4000, &[]), neg(errno::ENOSYS));
    assert_eq!(s.ret(4000, &[1, 2, 3]), neg(errno::ENOSYS));
    assert_eq!(s.ret(nr::CLOSE, &[-1i64 as u64]), neg(errno::EBADF));
    assert_eq!(s.ret(nr::CLOSE, &[1000]), neg(errno::EBADF));
    assert_eq!(s.ret(nr::READ, &[1000, 0, 0]), neg(errno::EBADF));
    assert_eq!(s.ret(nr::FSTAT, &[7, BUF]), neg(errno::EBADF));
    assert_eq!(s.ret(nr::SET_ROBUST_LIST, &[BUF, 24]), neg(errno::ENOSYS));
}

/// A pipe made through the dispatcher with `flags`: (read, write) fds.
fn guest_pipe(s: &mut Setup, flags: u64) -> (u64, u64) {
    assert_eq!(s.ret(nr::PIPE2, &[BUF, flags]), 0);
    let r = s.mem.load(BUF, 4).expect("fd");
    let w = s.mem.load(BUF + 4, 4).expect("fd");
    (r, w)
}

/// Whether the host pipe behind guest fd `fd` has bytes to read now.
fn host_readable(s: &Setup, fd: u64) -> bool {
    let host = s.kernel.fds.get(fd).expect("open");
    let mut polled = [rustix::event::PollFd::new(
        &host,
        rustix::event::PollFlags::IN,
    )];
    rustix::event::poll(&mut polled, Some(&rustix::event::Timespec::default())).expect("poll") == 1
}

/// The host-threads server reads without waiting before it makes a read:
/// the bytes leave the host pipe then (a reader in another process finds
/// none), and the call returns them without reading the pipe again, so it
/// cannot wait for bytes the other reader took.
#[test]
fn a_read_made_ahead_returns_its_bytes_without_waiting() {
    let mut s = Setup::new();
    let (r, w) = guest_pipe(&mut s, 0);
    let args = [r, BUF + 0x100, 64];
    assert_eq!(
        s.kernel.read_without_waiting(&mut s.mem, nr::READ, args),
        ReadNow::Empty,
        "an empty pipe: the call would wait"
    );
    s.string(BUF + 64, "hello");
    assert_eq!(s.ret(nr::WRITE, &[w, BUF + 64, 5]), 5);
    assert_eq!(
        s.kernel.read_without_waiting(&mut s.mem, nr::READ, args),
        ReadNow::Read
    );
    assert!(!host_readable(&s, r), "the bytes left the host pipe");
    assert_eq!(s.ret(nr::READ, &args), 5);
    assert_eq!(s.mem.read_cstr(BUF + 0x100, 5).expect("read"), b"hello");
    assert_eq!(s.kernel.read_ahead, None);

    // readv: the bytes scattered as the call scatters them.
    s.string(BUF + 64, "abcdefg");
    assert_eq!(s.ret(nr::WRITE, &[w, BUF + 64, 7]), 7);
    let iov = BUF + 0x200;
    for (i, (base, len)) in [(BUF + 0x300, 3u64), (BUF + 0x400, 16)]
        .into_iter()
        .enumerate()
    {
        s.mem.store(iov + 16 * i as u64, 8, base).expect("iov");
        s.mem.store(iov + 16 * i as u64 + 8, 8, len).expect("iov");
    }
    let args = [r, iov, 2];
    assert_eq!(
        s.kernel.read_without_waiting(&mut s.mem, nr::READV, args),
        ReadNow::Read
    );
    assert_eq!(s.ret(nr::READV, &args), 7);
    assert_eq!(s.mem.read_cstr(BUF + 0x300, 3).expect("read"), b"abc");
    assert_eq!(s.mem.read_cstr(BUF + 0x400, 4).expect("read"), b"defg");

    // The end of the file: read ahead too, as nothing.
    assert_eq!(s.ret(nr::CLOSE, &[w]), 0);
    let args = [r, BUF + 0x100, 64];
    assert_eq!(
        s.kernel.read_without_waiting(&mut s.mem, nr::READ, args),
        ReadNow::Read
    );
    assert_eq!(s.ret(nr::READ, &args), 0);
}

/// What a read cannot be made ahead of: a non-blocking pipe (it says
/// EAGAIN itself), a buffer the call will refuse (nothing may be taken
/// from the pipe then), a descriptor that is not open.
#[test]
fn a_read_is_made_ahead_only_where_it_would_wait() {
    let mut s = Setup::new();
    let (r, w) = guest_pipe(&mut s, 0o4000);
    let ahead = |s: &mut Setup, args| s.kernel.read_without_waiting(&mut s.mem, nr::READ, args);
    assert_eq!(ahead(&mut s, [r, BUF + 0x100, 8]), ReadNow::Unknown);
    let (r, w2) = guest_pipe(&mut s, 0);
    s.string(BUF + 64, "x");
    assert_eq!(s.ret(nr::WRITE, &[w2, BUF + 64, 1]), 1);
    assert_eq!(ahead(&mut s, [r, 0x7000_0000, 8]), ReadNow::Unknown);
    assert!(host_readable(&s, r), "nothing taken");
    assert_eq!(ahead(&mut s, [99, BUF + 0x100, 8]), ReadNow::Unknown);
    assert_eq!(s.ret(nr::CLOSE, &[w]), 0);
}

#[test]
fn pipe_roundtrip_dup_and_fcntl() {
    let mut s = Setup::new();
    assert_eq!(s.ret(nr::PIPE2, &[BUF, 0x80000]), 0);
    let r = s.mem.load(BUF, 4).expect("fd");
    let w = s.mem.load(BUF + 4, 4).expect("fd");
    assert_eq!((r, w), (0, 1), "lowest free numbers");
    assert_eq!(s.ret(nr::FCNTL, &[r, 1]), 1, "O_CLOEXEC shows in F_GETFD");
    s.string(BUF + 64, "ping");
    assert_eq!(s.ret(nr::WRITE, &[w, BUF + 64, 4]), 4);
    // Reading into an unmapped buffer is EFAULT and consumes nothing.
    assert_eq!(s.ret(nr::READ, &[r, 0x7000_0000, 4]), neg(errno::EFAULT));
    assert_eq!(s.ret(nr::READ, &[r, BUF + 128, 16]), 4);
    // Zero-length transfers never touch the (here NULL) buffer.
    assert_eq!(s.ret(nr::WRITE, &[w, 0, 0]), 0);
    assert_eq!(s.ret(nr::WRITE, &[w, 0x7000_0000, 1]), neg(errno::EFAULT));
    assert_eq!(s.mem.read_cstr(BUF + 128, 16).expect("read"), b"ping");
    let d = s.ret(nr::DUP, &[r]);
    assert_eq!(d, 2);
    assert_eq!(
        s.ret(nr::FCNTL, &[d as u64, 1]),
        0,
        "dup clears close-on-exec"
    );
    assert_eq!(s.ret(nr::FCNTL, &[d as u64, 2, 1]), 0);
    assert_eq!(s.ret(nr::FCNTL, &[d as u64, 1]), 1);
    assert_eq!(
        s.ret(nr::FCNTL, &[r, 1030, 10]),
        10,
        "F_DUPFD_CLOEXEC honours the minimum"
    );
    assert_eq!(s.ret(nr::DUP3, &[r, r, 0]), neg(errno::EINVAL));
    assert_eq!(
        s.ret(nr::DUP3, &[r, 20, 1]),
        neg(errno::EINVAL),
        "bad flags"
    );
    assert_eq!(s.ret(nr::DUP3, &[r, 20, 0]), 20);
    assert_eq!(s.ret(nr::FCNTL, &[r, 999]), neg(errno::EINVAL));
    assert_eq!(s.ret(nr::LSEEK, &[r, 0, 0]), neg(29), "ESPIPE on a pipe");
    assert_eq!(
        s.ret(nr::IOCTL, &[r, 0x5401, BUF]),
        neg(errno::ENOTTY),
        "TCGETS on a pipe"
    );
    // Closing the read end makes writes fail with SIGPIPE.
    for fd in [r, d as u64, 10, 20] {
        assert_eq!(s.ret(nr::CLOSE, &[fd]), 0);
    }
    assert_eq!(s.ret(nr::WRITE, &[w, BUF + 64, 4]), neg(errno::EPIPE));
    assert_eq!(
        s.kernel.take_deliverable(),
        Some((Signal::PIPE, true)),
        "SIGPIPE pending"
    );
    assert_eq!(s.kernel.take_deliverable(), None);
}

#[test]
fn files_stat_seek_vectors_and_directories() {
    let mut s = Setup::new();
    let dir = s.temp_dir();
    let file = dir.join("data.txt");
    let path = s.string(BUF, file.to_str().expect("utf-8"));
    let fdcwd = AT_FDCWD as i64 as u64;
    // O_RDWR | O_CREAT | O_EXCL, 0600
    let fd = s.ret(nr::OPENAT, &[fdcwd, path, 0xc2, 0o600]);
    assert_eq!(fd, 0);
    let fd = fd as u64;
    assert_eq!(
        s.ret(nr::OPENAT, &[fdcwd, path, 0xc2, 0o600]),
        neg(errno::EEXIST)
    );
    // writev of two pieces.
    s.string(BUF + 0x800, "hello, ");
    s.string(BUF + 0x900, "world\n");
    for (i, (base, len)) in [(BUF + 0x800, 7u64), (BUF + 0x900, 6)].iter().enumerate() {
        s.mem
            .store(BUF + 0x400 + 16 * i as u64, 8, *base)
            .expect("iov");
        s.mem
            .store(BUF + 0x408 + 16 * i as u64, 8, *len)
            .expect("iov");
    }
    assert_eq!(s.ret(nr::WRITEV, &[fd, BUF + 0x400, 2]), 13);
    assert_eq!(
        s.ret(nr::WRITEV, &[fd, BUF + 0x400, 5000]),
        neg(errno::EINVAL)
    );
    assert_eq!(s.ret(nr::PWRITE64, &[fd, BUF + 0x900, 5, 7]), 5);
    assert_eq!(s.ret(nr::LSEEK, &[fd, 0, 2]), 13);
    assert_eq!(s.ret(nr::LSEEK, &[fd, -1i64 as u64, 0]), neg(errno::EINVAL));
    assert_eq!(s.ret(nr::LSEEK, &[fd, 0, 42]), neg(errno::EINVAL));
    assert_eq!(s.ret(nr::PREAD64, &[fd, BUF + 0xa00, 100, 0]), 13);
    assert_eq!(
        s.mem.read_cstr(BUF + 0xa00, 13).expect("read"),
        b"hello, world\n"
    );
    // fstat: size at offset 48, mode at 16 (asm-generic layout).
    assert_eq!(s.ret(nr::FSTAT, &[fd, BUF + 0xc00]), 0);
    assert_eq!(s.mem.load(BUF + 0xc00 + 48, 8), Ok(13));
    assert_eq!(s.mem.load(BUF + 0xc00 + 16, 4), Ok(0o100600));
    // newfstatat with AT_EMPTY_PATH on the descriptor agrees.
    let empty = s.string(BUF + 0xb00, "");
    assert_eq!(s.ret(nr::NEWFSTATAT, &[fd, empty, BUF + 0xd00, 0x1000]), 0);
    assert_eq!(s.mem.load(BUF + 0xd00 + 48, 8), Ok(13));
    assert_eq!(
        s.ret(nr::NEWFSTATAT, &[fdcwd, path, BUF + 0xd00, 0x4000_0000]),
        neg(errno::EINVAL)
    );
    assert_eq!(
        s.ret(nr::FCNTL, &[fd, 3]),
        2,
        "F_GETFL is O_RDWR, as qemu-riscv64 reports it"
    );
    assert_eq!(s.ret(nr::FTRUNCATE, &[fd, 5]), 0);
    assert_eq!(s.ret(nr::FSYNC, &[fd]), 0);
    // Record locks of one process never conflict with each other.
    s.mem.write(BUF + 0xe00, &[0; 32]).expect("flock");
    s.mem.store(BUF + 0xe00, 2, 1).expect("F_WRLCK");
    assert_eq!(s.ret(nr::FCNTL, &[fd, 6, BUF + 0xe00]), 0);
    assert_eq!(s.ret(nr::FCNTL, &[fd, 5, BUF + 0xe00]), 0);
    assert_eq!(s.mem.load(BUF + 0xe00, 2), Ok(2), "F_GETLK says F_UNLCK");
    assert_eq!(s.ret(nr::CLOSE, &[fd]), 0);
    // access, directory listing, rename, unlink.
    assert_eq!(s.ret(nr::FACCESSAT, &[fdcwd, path, 4]), 0);
    assert_eq!(s.ret(nr::FACCESSAT, &[fdcwd, path, 8]), neg(errno::EINVAL));
    let dpath = s.string(BUF + 0x1000, dir.to_str().expect("utf-8"));
    let dfd = s.ret(nr::OPENAT, &[fdcwd, dpath, 0x10000, 0]) as u64;
    assert_eq!(
        s.ret(nr::GETDENTS64, &[dfd, BUF + 0x2000, 4]),
        neg(errno::EINVAL),
        "buffer too small"
    );
    let n = s.ret(nr::GETDENTS64, &[dfd, BUF + 0x2000, 4096]);
    assert!(n > 0);
    let mut names = Vec::new();
    let mut at = 0u64;
    while at < n as u64 {
        let reclen = s.mem.load(BUF + 0x2000 + at + 16, 2).expect("reclen");
        assert_eq!(reclen % 8, 0);
        let name = s.mem.read_cstr(BUF + 0x2000 + at + 19, 256).expect("name");
        names.push(String::from_utf8(name).expect("utf-8"));
        at += reclen;
    }
    names.sort();
    assert_eq!(names, [".", "..", "data.txt"]);
    assert_eq!(
        s.ret(nr::GETDENTS64, &[dfd, BUF + 0x2000, 4096]),
        0,
        "end of directory"
    );
    let renamed = s.string(BUF + 0x3000, "renamed.txt");
    assert_eq!(s.ret(nr::RENAMEAT, &[fdcwd, path, dfd, renamed]), 0);
    assert_eq!(s.ret(nr::UNLINKAT, &[fdcwd, path, 0]), neg(errno::ENOENT));
    assert_eq!(s.ret(nr::UNLINKAT, &[dfd, renamed, 0]), 0);
    let sub = s.string(BUF + 0x3100, "sub");
    assert_eq!(s.ret(nr::MKDIRAT, &[dfd, sub, 0o755]), 0);
    assert_eq!(s.ret(nr::MKDIRAT, &[dfd, sub, 0o755]), neg(errno::EEXIST));
    assert_eq!(s.ret(nr::UNLINKAT, &[dfd, sub, 0x200]), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn paths_and_identity() {
    let mut s = Setup::new();
    let fdcwd = AT_FDCWD as i64 as u64;
    let exe = s.string(BUF, "/proc/self/exe");
    assert_eq!(s.ret(nr::READLINKAT, &[fdcwd, exe, BUF + 0x100, 4096]), 10);
    assert_eq!(
        s.mem.read_cstr(BUF + 0x100, 10).expect("read"),
        b"/guest/exe"
    );
    assert_eq!(
        s.ret(nr::READLINKAT, &[fdcwd, exe, BUF + 0x100, 0]),
        neg(errno::EINVAL)
    );
    let missing = s.string(BUF + 0x200, "/nonexistent/tcgkit");
    assert_eq!(
        s.ret(nr::OPENAT, &[fdcwd, missing, 0, 0]),
        neg(errno::ENOENT)
    );
    assert_eq!(
        s.ret(nr::OPENAT, &[fdcwd, 0x7000_0000, 0, 0]),
        neg(errno::EFAULT)
    );
    let cwd = std::env::current_dir().expect("cwd");
    let len = cwd.as_os_str().len() as i64 + 1;
    assert_eq!(s.ret(nr::GETCWD, &[BUF + 0x300, 4096]), len);
    assert_eq!(s.ret(nr::GETCWD, &[BUF + 0x300, 1]), neg(errno::ERANGE));
    assert_eq!(s.ret(nr::UNAME, &[BUF + 0x800]), 0);
    assert_eq!(s.mem.read_cstr(BUF + 0x800, 65).expect("sysname"), b"Linux");
    assert_eq!(
        s.mem.read_cstr(BUF + 0x800 + 4 * 65, 65).expect("machine"),
        b"riscv64"
    );
    assert_eq!(s.ret(nr::UNAME, &[0x7000_0000]), neg(errno::EFAULT));
    let pid = i64::from(std::process::id());
    assert_eq!(s.ret(nr::GETPID, &[]), pid);
    assert_eq!(s.ret(nr::GETTID, &[]), pid);
    assert_eq!(s.ret(nr::SET_TID_ADDRESS, &[BUF]), pid);
    assert_eq!(
        s.ret(nr::GETUID, &[]),
        i64::from(rustix::process::getuid().as_raw())
    );
    assert_eq!(s.ret(nr::GETRANDOM, &[BUF, 16, 0]), 16);
    assert_eq!(s.ret(nr::GETRANDOM, &[BUF, 16, 8]), neg(errno::EINVAL));
    assert_eq!(s.ret(nr::CLOCK_GETTIME, &[1, BUF]), 0);
    assert_eq!(s.ret(nr::CLOCK_GETTIME, &[99, BUF]), neg(errno::EINVAL));
    assert_eq!(
        s.ret(nr::CLOCK_GETTIME, &[0, 0x7000_0000]),
        neg(errno::EFAULT)
    );
    let sec = s.mem.load(BUF, 8).expect("sec");
    let nsec = s.mem.load(BUF + 8, 8).expect("nsec");
    assert!(sec > 0 && nsec < 1_000_000_000, "{sec}.{nsec}");
    // nanosleep validates its timespec.
    s.mem.store(BUF, 8, 0).expect("sec");
    s.mem.store(BUF + 8, 8, 2_000_000_000).expect("nsec");
    assert_eq!(s.ret(nr::NANOSLEEP, &[BUF, 0]), neg(errno::EINVAL));
    s.mem.store(BUF + 8, 8, 1000).expect("nsec");
    assert_eq!(s.ret(nr::NANOSLEEP, &[BUF, 0]), 0);
    assert_eq!(s.ret(nr::SYSINFO, &[BUF]), 0);
    assert!(s.mem.load(BUF + 32, 8).expect("totalram") > 0);
    assert_eq!(s.ret(nr::SCHED_GETAFFINITY, &[0, 8, BUF]), 8);
    assert_ne!(s.mem.load(BUF, 8), Ok(0));
    assert_eq!(
        s.ret(nr::SCHED_GETAFFINITY, &[0, 3, BUF]),
        neg(errno::EINVAL)
    );
}

#[test]
fn limits_signals_and_futex() {
    let mut s = Setup::new();
    assert_eq!(s.ret(nr::PRLIMIT64, &[0, 7, 0, BUF]), 0);
    let (cur, max) = (
        s.mem.load(BUF, 8).expect("cur"),
        s.mem.load(BUF + 8, 8).expect("max"),
    );
    assert!(cur <= MAX_FDS as u64 && cur <= max);
    // Lowering the soft limit is remembered.
    s.mem.store(BUF + 16, 8, 64).expect("cur");
    s.mem.store(BUF + 24, 8, max).expect("max");
    assert_eq!(s.ret(nr::SETRLIMIT, &[7, BUF + 16]), 0);
    assert_eq!(s.ret(nr::GETRLIMIT, &[7, BUF]), 0);
    assert_eq!(s.mem.load(BUF, 8), Ok(64));
    s.mem.store(BUF + 16, 8, max + 1).expect("cur > max");
    assert_eq!(s.ret(nr::SETRLIMIT, &[7, BUF + 16]), neg(errno::EINVAL));
    assert_eq!(s.ret(nr::PRLIMIT64, &[0, 99, 0, BUF]), neg(errno::EINVAL));

    // Signal bookkeeping: masks and dispositions.
    s.mem.store(BUF, 8, 1 << 9).expect("set");
    assert_eq!(s.ret(nr::RT_SIGPROCMASK, &[0, BUF, BUF + 8, 8]), 0);
    assert_eq!(s.ret(nr::RT_SIGPROCMASK, &[0, 0, BUF + 8, 8]), 0);
    assert_eq!(s.mem.load(BUF + 8, 8), Ok(1 << 9));
    assert_eq!(
        s.ret(nr::RT_SIGPROCMASK, &[7, BUF, 0, 8]),
        neg(errno::EINVAL)
    );
    assert_eq!(
        s.ret(nr::RT_SIGPROCMASK, &[0, BUF, 0, 4]),
        neg(errno::EINVAL)
    );
    let pid = u64::from(std::process::id());
    // SIGUSR1 is blocked: it stays pending. SIGTERM is deliverable.
    assert_eq!(s.call(nr::TGKILL, &[pid, pid, 10]), Outcome::Return(0));
    assert_eq!(s.call(nr::TGKILL, &[pid, pid, 0]), Outcome::Return(0));
    assert_eq!(s.kernel.take_deliverable(), None, "SIGUSR1 is blocked");
    assert_eq!(s.call(nr::KILL, &[pid, 15]), Outcome::Return(0));
    assert_eq!(
        s.kernel.take_deliverable(),
        Some((Signal::TERM, false)),
        "kill is SI_USER"
    );
    // Unblocking lets the pending SIGUSR1 through (raised by tgkill).
    assert_eq!(s.ret(nr::RT_SIGPROCMASK, &[1, BUF, 0, 8]), 0);
    assert_eq!(s.kernel.take_deliverable().map(|d| d.0.number()), Some(10));
    // Another pid goes to the host's kill: pid_max is one no process can
    // have (pid + 1 could be a thread of this test binary, and the host
    // would signal the whole binary).
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("pid_max is a number");
    assert_eq!(
        s.call(nr::KILL, &[pid_max, 15]),
        Outcome::Return(neg(errno::ESRCH) as u64)
    );
    assert_eq!(
        s.call(nr::KILL, &[pid, 65]),
        Outcome::Return(neg(errno::EINVAL) as u64)
    );
    assert_eq!(s.call(nr::KILL, &[pid, 9]), Outcome::Killed(Signal::KILL));
    // SIG_IGN discards; the old action reads back; SIG_DFL makes it pending.
    let mut act = [0u8; 24];
    act[0] = 1;
    s.mem.write(BUF + 64, &act).expect("act");
    assert_eq!(s.ret(nr::RT_SIGACTION, &[6, BUF + 64, 0, 8]), 0);
    assert_eq!(s.call(nr::TGKILL, &[pid, pid, 6]), Outcome::Return(0));
    assert_eq!(s.kernel.take_deliverable(), None, "ignored");
    s.mem.write(BUF + 128, &[0xee; 32]).expect("fill");
    assert_eq!(s.ret(nr::RT_SIGACTION, &[6, 0, BUF + 128, 8]), 0);
    assert_eq!(s.mem.load(BUF + 128, 8), Ok(1));
    assert_eq!(
        s.mem.load(BUF + 128 + 24, 8),
        Ok(0xeeee_eeee_eeee_eeee),
        "24 bytes written, no more"
    );
    s.mem.write(BUF + 64, &[0; 24]).expect("act");
    assert_eq!(s.ret(nr::RT_SIGACTION, &[6, BUF + 64, 0, 8]), 0);
    assert_eq!(s.call(nr::TGKILL, &[pid, pid, 6]), Outcome::Return(0));
    assert_eq!(s.kernel.take_deliverable(), Some((Signal::ABRT, true)));
    assert_eq!(
        s.ret(nr::RT_SIGACTION, &[9, BUF + 64, 0, 8]),
        neg(errno::EINVAL)
    );
    assert_eq!(s.ret(nr::RT_SIGACTION, &[0, 0, 0, 8]), neg(errno::EINVAL));
    assert_eq!(s.call(nr::EXIT_GROUP, &[3]), Outcome::Exit(3));

    // futex with one thread.
    s.mem.store(BUF + 256, 4, 5).expect("word");
    assert_eq!(s.ret(nr::FUTEX, &[BUF + 256, 0, 6, 0]), neg(errno::EAGAIN));
    s.mem.store(BUF + 300, 8, 0).expect("timeout");
    s.mem.store(BUF + 308, 8, 1000).expect("timeout");
    assert_eq!(
        s.ret(nr::FUTEX, &[BUF + 256, 0x80, 5, BUF + 300]),
        neg(errno::ETIMEDOUT)
    );
    assert_eq!(s.ret(nr::FUTEX, &[BUF + 256, 1, 1]), 0, "wakes nobody");
    assert_eq!(
        s.ret(nr::FUTEX, &[BUF + 258, 1, 1]),
        neg(errno::EINVAL),
        "misaligned"
    );
    assert_eq!(
        s.ret(nr::FUTEX, &[0x7000_0000, 0, 1, 0]),
        neg(errno::EFAULT)
    );
}

#[test]
fn memory_syscalls() {
    let mut s = Setup::new();
    assert_eq!(s.ret(nr::BRK, &[0]), 0x40_000);
    assert_eq!(s.ret(nr::BRK, &[0x48_000]), 0x48_000);
    // mmap: anonymous, placed in the mmap area, zeroed.
    let a = s.ret(nr::MMAP, &[0, 8192, 3, 0x22, -1i64 as u64, 0]);
    assert_eq!(a as u64, MMAP_BASE);
    assert_eq!(s.mem.load(a as u64, 8), Ok(0));
    assert_eq!(
        s.ret(nr::MMAP, &[0, 4096, 3, 0x02, 99, 0]),
        neg(errno::EBADF)
    );
    assert_eq!(
        s.ret(nr::MMAP, &[0, 4096, 3, 0x00, -1i64 as u64, 0]),
        neg(errno::EINVAL),
        "no map type"
    );
    assert_eq!(
        s.ret(nr::MMAP, &[0, 4096, 3, 0x22, -1i64 as u64, 1]),
        neg(errno::EINVAL),
        "unaligned offset"
    );
    assert_eq!(s.ret(nr::MPROTECT, &[a as u64, 4096, 1]), 0);
    assert!(s.mem.store(a as u64, 1, 1).is_err());
    assert_eq!(
        s.kernel.code_changes.last(),
        Some(&(a as u64, 4096)),
        "engine is told"
    );
    assert_eq!(
        s.ret(nr::MPROTECT, &[a as u64 + 1, 4096, 1]),
        neg(errno::EINVAL)
    );
    assert_eq!(s.ret(nr::MUNMAP, &[a as u64, 8192]), 0);
    assert_eq!(
        s.ret(nr::MPROTECT, &[a as u64, 4096, 1]),
        neg(errno::ENOMEM)
    );
    // MADV_DONTNEED zeroes private anonymous pages.
    s.mem.store(BUF, 8, 77).expect("store");
    assert_eq!(s.ret(nr::MADVISE, &[BUF, 4096, 4]), 0);
    assert_eq!(s.mem.load(BUF, 8), Ok(0));
    // A file-backed private mapping sees the file's bytes.
    let dir = s.temp_dir();
    let file = dir.join("mapped");
    std::fs::write(&file, b"mapped contents").expect("write");
    let path = s.string(BUF + 0x100, file.to_str().expect("utf-8"));
    let fd = s.ret(nr::OPENAT, &[AT_FDCWD as i64 as u64, path, 0, 0]) as u64;
    let m = s.ret(nr::MMAP, &[0, 4096, 1, 0x02, fd, 0]) as u64;
    assert_eq!(s.mem.read_cstr(m, 64).expect("read"), b"mapped contents");
    assert_eq!(
        s.ret(nr::MMAP, &[0, 4096, 3, 0x01, fd, 0]),
        neg(errno::EACCES),
        "shared writable needs a descriptor open for writing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shared_file_mappings_are_coherent_with_file_io() {
    const O_RDWR_CREAT_TRUNC: u64 = 0o2 | 0o100 | 0o1000;
    let mut s = Setup::new();
    let dir = s.temp_dir().join("shared");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("shm");
    let path = s.string(BUF + 0x100, file.to_str().expect("utf-8"));
    let at = AT_FDCWD as i64 as u64;
    let fd = s.ret(nr::OPENAT, &[at, path, O_RDWR_CREAT_TRUNC, 0o644]) as u64;
    assert_eq!(s.ret(nr::FTRUNCATE, &[fd, 8192]), 0);
    // Like sqlite's -shm: read/write, MAP_SHARED, two pages.
    let m = s.ret(nr::MMAP, &[0, 8192, 3, 0x01, fd, 0]) as u64;
    assert_eq!(m, MMAP_BASE);
    s.mem
        .write(m + 4096, b"through the mapping")
        .expect("store");
    // pread sees the store at once.
    assert_eq!(s.ret(nr::PREAD64, &[fd, BUF, 19, 4096]), 19);
    let mut got = [0u8; 19];
    s.mem.read(BUF, &mut got).expect("read");
    assert_eq!(&got, b"through the mapping");
    // The mapping sees pwrite (here through a second descriptor).
    let fd2 = s.ret(nr::OPENAT, &[at, path, 0o2, 0]) as u64;
    s.mem.write(BUF, b"via write").expect("buf");
    assert_eq!(s.ret(nr::PWRITE64, &[fd2, BUF, 9, 0]), 9);
    assert_eq!(s.mem.read_cstr(m, 9).expect("read"), b"via write");
    // msync, then the host sees the store; stores never grow the file.
    s.mem.store(m + 8191, 1, 0x5a).expect("store");
    assert_eq!(s.ret(nr::MSYNC, &[m, 8192, 4]), 0);
    let data = std::fs::read(&file).expect("read");
    assert_eq!((data.len(), data[8191]), (8192, 0x5a));
    // Shrinking the file zeroes the mapping past the new end.
    assert_eq!(s.ret(nr::FTRUNCATE, &[fd, 4096]), 0);
    assert_eq!(s.mem.load(m + 8191, 1), Ok(0));
    s.mem.store(m + 8000, 1, 1).expect("store");
    // munmap of the first page writes back and stops tracking it; the
    // second page is past EOF and never reaches the file.
    s.mem.store(m + 10, 1, b'X'.into()).expect("store");
    assert_eq!(s.ret(nr::MUNMAP, &[m, 4096]), 0);
    let data = std::fs::read(&file).expect("read");
    assert_eq!((data.len(), data[10]), (4096, b'X'));
    // mremap grows the rest; the new page shows the file (zeros past EOF).
    let moved = s.ret(nr::MREMAP, &[m + 4096, 4096, 8192, 1, 0]) as u64;
    assert!(moved > 0, "mremap: {}", moved as i64);
    assert_eq!(s.ret(nr::FTRUNCATE, &[fd, 16384]), 0);
    s.mem.store(moved + 4096 + 7, 1, 0x77).expect("store");
    assert_eq!(s.ret(nr::CLOSE, &[fd]), 0);
    assert_eq!(std::fs::read(&file).expect("read")[4096 + 4096 + 7], 0x77);
    // The rest reaches the file when the process ends.
    s.mem.store(moved + 4096 + 8, 1, 0x78).expect("store");
    s.kernel.finish(&mut s.mem);
    assert_eq!(std::fs::read(&file).expect("read")[4096 + 4096 + 8], 0x78);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn statx_statfs_ppoll_and_process_bits() {
    let mut s = Setup::new();
    let dir = s.temp_dir();
    let file = dir.join("sized");
    std::fs::write(&file, [7u8; 1234]).expect("write");
    let path = s.string(BUF, file.to_str().expect("utf-8"));
    let fdcwd = AT_FDCWD as i64 as u64;
    // statx: STATX_BASIC_STATS, size at offset 40, mode at 28.
    assert_eq!(s.ret(nr::STATX, &[fdcwd, path, 0, 0x7ff, BUF + 0x1000]), 0);
    assert_eq!(s.mem.load(BUF + 0x1000 + 40, 8), Ok(1234));
    assert_eq!(
        s.mem.load(BUF + 0x1000 + 28, 2).map(|m| m & 0o170000),
        Ok(0o100000)
    );
    assert_eq!(s.ret(nr::STATFS, &[path, BUF + 0x2000]), 0);
    assert!(s.mem.load(BUF + 0x2000 + 8, 8).expect("f_bsize") > 0);
    let fd = s.ret(nr::OPENAT, &[fdcwd, path, 2, 0]) as u64;
    assert_eq!(s.ret(nr::FSTATFS, &[fd, BUF + 0x2000]), 0);
    assert_eq!(s.ret(nr::FALLOCATE, &[fd, 0, 0, 8192]), 0);
    assert_eq!(std::fs::metadata(&file).expect("stat").len(), 8192);
    assert_eq!(s.ret(nr::FALLOCATE, &[fd, 0, 0, 0]), neg(errno::EINVAL));

    // ppoll: an empty pipe is writable, not readable; a bad fd is POLLNVAL.
    assert_eq!(s.ret(nr::PIPE2, &[BUF + 0x3000, 0]), 0);
    let r = s.mem.load(BUF + 0x3000, 4).expect("r");
    let w = s.mem.load(BUF + 0x3004, 4).expect("w");
    let pollfd = |fd: u64, events: u64| fd | (events << 32);
    s.mem.store(BUF + 0x3100, 8, pollfd(r, 1)).expect("pollfd");
    s.mem.store(BUF + 0x3108, 8, pollfd(w, 4)).expect("pollfd");
    s.mem.store(BUF + 0x3200, 8, 0).expect("timeout");
    s.mem.store(BUF + 0x3208, 8, 0).expect("timeout");
    assert_eq!(s.ret(nr::PPOLL, &[BUF + 0x3100, 2, BUF + 0x3200]), 1);
    assert_eq!(s.mem.load(BUF + 0x3106, 2), Ok(0), "nothing to read");
    assert_eq!(s.mem.load(BUF + 0x310e, 2), Ok(4), "POLLOUT");
    s.string(BUF + 0x3300, "x");
    assert_eq!(s.ret(nr::WRITE, &[w, BUF + 0x3300, 1]), 1);
    assert_eq!(
        s.ret(nr::PPOLL, &[BUF + 0x3100, 1, 0]),
        1,
        "readable now (no timeout: waits)"
    );
    assert_eq!(s.mem.load(BUF + 0x3106, 2), Ok(1), "POLLIN");
    assert_eq!(s.ret(nr::IOCTL, &[r, 0x541b, BUF + 0x3400]), 0);
    assert_eq!(
        s.mem.load(BUF + 0x3400, 4),
        Ok(1),
        "FIONREAD: one byte waiting"
    );
    s.mem
        .store(BUF + 0x3100, 8, pollfd(900, 1))
        .expect("pollfd");
    assert_eq!(s.ret(nr::PPOLL, &[BUF + 0x3100, 1, 0]), 1);
    assert_eq!(s.mem.load(BUF + 0x3106, 2), Ok(0x20), "POLLNVAL");
    assert_eq!(
        s.ret(nr::PPOLL, &[BUF + 0x3100, 5000, 0]),
        neg(errno::EINVAL)
    );

    // sigaltstack bookkeeping, thread name, cpu, groups.
    assert_eq!(s.ret(nr::SIGALTSTACK, &[0, BUF + 0x4000]), 0);
    assert_eq!(s.mem.load(BUF + 0x4008, 4), Ok(2), "SS_DISABLE initially");
    s.mem.store(BUF + 0x4100, 8, 0x1234_0000).expect("ss_sp");
    s.mem.store(BUF + 0x4108, 8, 0).expect("ss_flags");
    s.mem.store(BUF + 0x4110, 8, 100).expect("ss_size");
    assert_eq!(
        s.ret(nr::SIGALTSTACK, &[BUF + 0x4100, 0]),
        neg(errno::ENOMEM),
        "too small"
    );
    s.mem.store(BUF + 0x4110, 8, 65536).expect("ss_size");
    assert_eq!(s.ret(nr::SIGALTSTACK, &[BUF + 0x4100, 0]), 0);
    assert_eq!(s.ret(nr::SIGALTSTACK, &[0, BUF + 0x4000]), 0);
    assert_eq!(s.mem.load(BUF + 0x4000, 8), Ok(0x1234_0000));
    assert_eq!(s.ret(nr::PRCTL, &[16, BUF + 0x5000]), 0);
    assert_eq!(s.mem.read_cstr(BUF + 0x5000, 16).expect("name"), b"exe");
    s.string(BUF + 0x5100, "a-much-longer-thread-name");
    assert_eq!(s.ret(nr::PRCTL, &[15, BUF + 0x5100]), 0);
    assert_eq!(s.ret(nr::PRCTL, &[16, BUF + 0x5000]), 0);
    assert_eq!(
        s.mem.read_cstr(BUF + 0x5000, 16).expect("name"),
        b"a-much-longer-t"
    );
    assert_eq!(s.ret(nr::PRCTL, &[9999, 0]), neg(errno::EINVAL));
    assert_eq!(s.ret(nr::GETCPU, &[BUF + 0x6000, 0]), 0);
    assert_eq!(s.mem.load(BUF + 0x6000, 4), Ok(0));
    assert_eq!(s.ret(nr::GETRUSAGE, &[0, BUF + 0x6100]), 0);
    assert_eq!(s.ret(nr::GETRUSAGE, &[5, BUF + 0x6100]), neg(errno::EINVAL));
    assert!(s.ret(nr::TIMES, &[BUF + 0x6200]) > 0);
    let groups = s.ret(nr::GETGROUPS, &[0, 0]);
    assert!(groups >= 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unix_sockets_roundtrip() {
    let mut s = Setup::new();
    let dir = s.temp_dir();
    let path = dir.join("sock");
    // struct sockaddr_un: family 1, then the path.
    let mut addr = vec![1u8, 0];
    addr.extend_from_slice(path.to_str().expect("utf-8").as_bytes());
    addr.push(0);
    s.mem.write(BUF, &addr).expect("addr");
    let len = addr.len() as u64;
    let server = s.ret(nr::SOCKET, &[1, 1 | 0x80000, 0]);
    assert!(server >= 0, "{server}");
    let server = server as u64;
    assert_eq!(s.ret(nr::BIND, &[server, BUF, len]), 0);
    assert_eq!(s.ret(nr::LISTEN, &[server, 4]), 0);
    let client = s.ret(nr::SOCKET, &[1, 1, 0]) as u64;
    assert_eq!(s.ret(nr::CONNECT, &[client, BUF, len]), 0);
    let conn = s.ret(nr::ACCEPT4, &[server, 0, 0, 0x80000]);
    assert!(conn >= 0, "{conn}");
    s.string(BUF + 0x200, "over the socket");
    assert_eq!(s.ret(nr::SENDTO, &[client, BUF + 0x200, 15, 0, 0, 0]), 15);
    assert_eq!(
        s.ret(nr::RECVFROM, &[conn as u64, BUF + 0x300, 64, 0, 0, 0]),
        15
    );
    assert_eq!(
        s.mem.read_cstr(BUF + 0x300, 15).expect("data"),
        b"over the socket"
    );
    assert_eq!(s.ret(nr::SHUTDOWN, &[client, 1]), 0);
    assert_eq!(
        s.ret(nr::RECVFROM, &[conn as u64, BUF + 0x300, 64, 0, 0, 0]),
        0,
        "EOF after shutdown"
    );
    assert_eq!(s.ret(nr::SHUTDOWN, &[client, 7]), neg(errno::EINVAL));
    // Connecting to a missing path is ENOENT; an unknown family is refused.
    let missing = s.string(BUF + 0x400, "\u{1}\0/nonexistent/tcgkit.sock");
    let other = s.ret(nr::SOCKET, &[1, 1, 0]) as u64;
    assert_eq!(
        s.ret(nr::CONNECT, &[other, missing, 28]),
        neg(errno::ENOENT)
    );
    s.mem.store(BUF + 0x500, 2, 99).expect("family");
    assert_eq!(s.ret(nr::CONNECT, &[other, BUF + 0x500, 16]), neg(97));
    assert_eq!(
        s.ret(nr::CONNECT, &[other, BUF + 0x500, 1]),
        neg(errno::EINVAL)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn riscv_flush_icache_drops_the_range_from_every_engine() {
    let mut s = Setup::new();
    assert_eq!(s.ret(nr::RISCV_FLUSH_ICACHE, &[0x1000, 0x3000, 0]), 0);
    assert_eq!(s.kernel.code_changes.last(), Some(&(0x1000, 0x2000)));
    // SYS_RISCV_FLUSH_ICACHE_LOCAL, and (as qemu-riscv64) unknown flags.
    assert_eq!(s.ret(nr::RISCV_FLUSH_ICACHE, &[0x1000, 0x2000, 1]), 0);
    assert_eq!(s.ret(nr::RISCV_FLUSH_ICACHE, &[0x1000, 0x2000, 2]), 0);
    // An empty range drops nothing.
    let before = s.kernel.code_changes.len();
    assert_eq!(s.ret(nr::RISCV_FLUSH_ICACHE, &[0x2000, 0x2000, 0]), 0);
    assert_eq!(s.kernel.code_changes.len(), before);
}
