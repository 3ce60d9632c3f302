//! The guest's Linux ABI for RV64: syscall numbers (asm-generic), errno values,
//! auxiliary vector keys, signal numbers and a few flag values.
//!
//! Written from the kernel's UAPI headers; RV64 uses the generic tables, which
//! x86-64 hosts share for errno and signal numbers, so host errno values pass
//! through unchanged.

/// Syscall numbers of the asm-generic table used by RV64 Linux.
pub mod nr {
    #![allow(missing_docs)]
    pub const GETCWD: u64 = 17;
    pub const EPOLL_CREATE1: u64 = 20;
    pub const EPOLL_CTL: u64 = 21;
    pub const EPOLL_PWAIT: u64 = 22;
    pub const DUP: u64 = 23;
    pub const DUP3: u64 = 24;
    pub const FCNTL: u64 = 25;
    pub const IOCTL: u64 = 29;
    pub const FLOCK: u64 = 32;
    pub const MKDIRAT: u64 = 34;
    pub const UNLINKAT: u64 = 35;
    pub const SYMLINKAT: u64 = 36;
    pub const LINKAT: u64 = 37;
    pub const RENAMEAT: u64 = 38;
    pub const STATFS: u64 = 43;
    pub const FSTATFS: u64 = 44;
    pub const FTRUNCATE: u64 = 46;
    pub const FALLOCATE: u64 = 47;
    pub const FACCESSAT: u64 = 48;
    pub const CHDIR: u64 = 49;
    pub const FCHDIR: u64 = 50;
    pub const FCHMOD: u64 = 52;
    pub const FCHMODAT: u64 = 53;
    pub const FCHOWNAT: u64 = 54;
    pub const FCHOWN: u64 = 55;
    pub const OPENAT: u64 = 56;
    pub const CLOSE: u64 = 57;
    pub const PIPE2: u64 = 59;
    pub const GETDENTS64: u64 = 61;
    pub const LSEEK: u64 = 62;
    pub const READ: u64 = 63;
    pub const WRITE: u64 = 64;
    pub const READV: u64 = 65;
    pub const WRITEV: u64 = 66;
    pub const PREAD64: u64 = 67;
    pub const PWRITE64: u64 = 68;
    pub const PREADV: u64 = 69;
    pub const PWRITEV: u64 = 70;
    pub const PPOLL: u64 = 73;
    pub const READLINKAT: u64 = 78;
    pub const NEWFSTATAT: u64 = 79;
    pub const FSTAT: u64 = 80;
    pub const SYNC: u64 = 81;
    pub const FSYNC: u64 = 82;
    pub const FDATASYNC: u64 = 83;
    pub const SYNC_FILE_RANGE: u64 = 84;
    pub const UTIMENSAT: u64 = 88;
    pub const EXIT: u64 = 93;
    pub const EXIT_GROUP: u64 = 94;
    pub const SET_TID_ADDRESS: u64 = 96;
    pub const FUTEX: u64 = 98;
    pub const SET_ROBUST_LIST: u64 = 99;
    pub const NANOSLEEP: u64 = 101;
    pub const CLOCK_GETTIME: u64 = 113;
    pub const CLOCK_GETRES: u64 = 114;
    pub const CLOCK_NANOSLEEP: u64 = 115;
    pub const SCHED_GETAFFINITY: u64 = 123;
    pub const SCHED_YIELD: u64 = 124;
    pub const CLONE: u64 = 220;
    pub const EXECVE: u64 = 221;
    pub const WAIT4: u64 = 260;
    pub const WAITID: u64 = 95;
    pub const SETPGID: u64 = 154;
    pub const SETSID: u64 = 157;
    pub const CLONE3: u64 = 435;
    pub const KILL: u64 = 129;
    pub const TKILL: u64 = 130;
    pub const TGKILL: u64 = 131;
    pub const SIGALTSTACK: u64 = 132;
    pub const RT_SIGACTION: u64 = 134;
    pub const RT_SIGPROCMASK: u64 = 135;
    pub const RT_SIGSUSPEND: u64 = 133;
    pub const RT_SIGRETURN: u64 = 139;
    pub const TIMES: u64 = 153;
    pub const GETPGID: u64 = 155;
    pub const GETSID: u64 = 156;
    pub const GETGROUPS: u64 = 158;
    pub const UNAME: u64 = 160;
    pub const GETRLIMIT: u64 = 163;
    pub const SETRLIMIT: u64 = 164;
    pub const GETRUSAGE: u64 = 165;
    pub const UMASK: u64 = 166;
    pub const PRCTL: u64 = 167;
    pub const GETCPU: u64 = 168;
    pub const GETTIMEOFDAY: u64 = 169;
    pub const GETPID: u64 = 172;
    pub const GETPPID: u64 = 173;
    pub const GETUID: u64 = 174;
    pub const GETEUID: u64 = 175;
    pub const GETGID: u64 = 176;
    pub const GETEGID: u64 = 177;
    pub const GETTID: u64 = 178;
    pub const SYSINFO: u64 = 179;
    pub const SOCKET: u64 = 198;
    pub const BIND: u64 = 200;
    pub const LISTEN: u64 = 201;
    pub const ACCEPT: u64 = 202;
    pub const CONNECT: u64 = 203;
    pub const SENDTO: u64 = 206;
    pub const RECVFROM: u64 = 207;
    pub const SHUTDOWN: u64 = 210;
    pub const BRK: u64 = 214;
    pub const MUNMAP: u64 = 215;
    pub const MREMAP: u64 = 216;
    pub const MMAP: u64 = 222;
    pub const FADVISE64: u64 = 223;
    pub const MPROTECT: u64 = 226;
    pub const MSYNC: u64 = 227;
    pub const MADVISE: u64 = 233;
    pub const ACCEPT4: u64 = 242;
    pub const RISCV_FLUSH_ICACHE: u64 = 259;
    pub const PRLIMIT64: u64 = 261;
    pub const RENAMEAT2: u64 = 276;
    pub const GETRANDOM: u64 = 278;
    pub const STATX: u64 = 291;
    pub const RSEQ: u64 = 293;
    pub const FACCESSAT2: u64 = 439;
}

/// The name `strace` shows for syscall `nr`, if this crate knows it.
pub fn syscall_name(number: u64) -> Option<&'static str> {
    use nr::*;
    Some(match number {
        GETCWD => "getcwd",
        DUP => "dup",
        DUP3 => "dup3",
        FCNTL => "fcntl",
        IOCTL => "ioctl",
        FLOCK => "flock",
        MKDIRAT => "mkdirat",
        UNLINKAT => "unlinkat",
        SYMLINKAT => "symlinkat",
        LINKAT => "linkat",
        RENAMEAT => "renameat",
        STATFS => "statfs",
        FSTATFS => "fstatfs",
        FTRUNCATE => "ftruncate",
        FALLOCATE => "fallocate",
        FACCESSAT => "faccessat",
        CHDIR => "chdir",
        FCHDIR => "fchdir",
        FCHMOD => "fchmod",
        FCHMODAT => "fchmodat",
        FCHOWNAT => "fchownat",
        FCHOWN => "fchown",
        OPENAT => "openat",
        CLOSE => "close",
        PIPE2 => "pipe2",
        GETDENTS64 => "getdents64",
        LSEEK => "lseek",
        READ => "read",
        WRITE => "write",
        READV => "readv",
        WRITEV => "writev",
        PREAD64 => "pread64",
        PWRITE64 => "pwrite64",
        PREADV => "preadv",
        PWRITEV => "pwritev",
        PPOLL => "ppoll",
        READLINKAT => "readlinkat",
        NEWFSTATAT => "newfstatat",
        FSTAT => "fstat",
        SYNC => "sync",
        FSYNC => "fsync",
        FDATASYNC => "fdatasync",
        SYNC_FILE_RANGE => "sync_file_range",
        UTIMENSAT => "utimensat",
        EXIT => "exit",
        EXIT_GROUP => "exit_group",
        SET_TID_ADDRESS => "set_tid_address",
        FUTEX => "futex",
        SET_ROBUST_LIST => "set_robust_list",
        NANOSLEEP => "nanosleep",
        CLOCK_GETTIME => "clock_gettime",
        CLOCK_GETRES => "clock_getres",
        CLOCK_NANOSLEEP => "clock_nanosleep",
        SCHED_GETAFFINITY => "sched_getaffinity",
        SCHED_YIELD => "sched_yield",
        KILL => "kill",
        TKILL => "tkill",
        TGKILL => "tgkill",
        SIGALTSTACK => "sigaltstack",
        RT_SIGACTION => "rt_sigaction",
        RT_SIGPROCMASK => "rt_sigprocmask",
        RT_SIGRETURN => "rt_sigreturn",
        TIMES => "times",
        GETPGID => "getpgid",
        GETSID => "getsid",
        GETGROUPS => "getgroups",
        UNAME => "uname",
        GETRLIMIT => "getrlimit",
        SETRLIMIT => "setrlimit",
        GETRUSAGE => "getrusage",
        UMASK => "umask",
        PRCTL => "prctl",
        GETCPU => "getcpu",
        GETTIMEOFDAY => "gettimeofday",
        GETPID => "getpid",
        GETPPID => "getppid",
        GETUID => "getuid",
        GETEUID => "geteuid",
        GETGID => "getgid",
        GETEGID => "getegid",
        GETTID => "gettid",
        SYSINFO => "sysinfo",
        SOCKET => "socket",
        BIND => "bind",
        LISTEN => "listen",
        ACCEPT => "accept",
        CONNECT => "connect",
        SENDTO => "sendto",
        RECVFROM => "recvfrom",
        SHUTDOWN => "shutdown",
        BRK => "brk",
        MUNMAP => "munmap",
        MREMAP => "mremap",
        MMAP => "mmap",
        FADVISE64 => "fadvise64",
        MPROTECT => "mprotect",
        MSYNC => "msync",
        MADVISE => "madvise",
        ACCEPT4 => "accept4",
        RISCV_FLUSH_ICACHE => "riscv_flush_icache",
        PRLIMIT64 => "prlimit64",
        RENAMEAT2 => "renameat2",
        GETRANDOM => "getrandom",
        STATX => "statx",
        RSEQ => "rseq",
        FACCESSAT2 => "faccessat2",
        _ => return None,
    })
}

/// errno values (asm-generic; identical on x86-64 and RV64).
pub mod errno {
    #![allow(missing_docs)]
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EINTR: i32 = 4;
    pub const EIO: i32 = 5;
    pub const ENXIO: i32 = 6;
    pub const EBADF: i32 = 9;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const EACCES: i32 = 13;
    pub const EFAULT: i32 = 14;
    pub const EEXIST: i32 = 17;
    pub const ENODEV: i32 = 19;
    pub const ENOTDIR: i32 = 20;
    pub const EINVAL: i32 = 22;
    pub const EMFILE: i32 = 24;
    pub const ENOTTY: i32 = 25;
    pub const ESPIPE: i32 = 29;
    pub const EPIPE: i32 = 32;
    pub const ERANGE: i32 = 34;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOSYS: i32 = 38;
    pub const ETIMEDOUT: i32 = 110;
}

/// Auxiliary vector keys.
pub mod auxv {
    #![allow(missing_docs)]
    pub const AT_NULL: u64 = 0;
    pub const AT_PHDR: u64 = 3;
    pub const AT_PHENT: u64 = 4;
    pub const AT_PHNUM: u64 = 5;
    pub const AT_PAGESZ: u64 = 6;
    pub const AT_BASE: u64 = 7;
    pub const AT_FLAGS: u64 = 8;
    pub const AT_ENTRY: u64 = 9;
    pub const AT_UID: u64 = 11;
    pub const AT_EUID: u64 = 12;
    pub const AT_GID: u64 = 13;
    pub const AT_EGID: u64 = 14;
    pub const AT_HWCAP: u64 = 16;
    pub const AT_CLKTCK: u64 = 17;
    pub const AT_SECURE: u64 = 23;
    pub const AT_RANDOM: u64 = 25;
    pub const AT_EXECFN: u64 = 31;
}

/// `AT_HWCAP` for RV64GC: one bit per single-letter extension (bit = letter -
/// 'A'), I, M, A, F, D and C, as qemu-riscv64 reports it.
pub const HWCAP_RV64GC: u64 = {
    const fn bit(letter: u8) -> u64 {
        1 << (letter - b'A')
    }
    bit(b'I') | bit(b'M') | bit(b'A') | bit(b'F') | bit(b'D') | bit(b'C')
};

/// `AT_CLKTCK`: clock ticks per second.
pub const CLOCK_TICKS: u64 = 100;

/// Directory file descriptor meaning "the current directory".
pub const AT_FDCWD: i32 = -100;
/// `AT_SYMLINK_NOFOLLOW`.
pub const AT_SYMLINK_NOFOLLOW: u32 = 0x100;
/// `AT_REMOVEDIR`.
pub const AT_REMOVEDIR: u32 = 0x200;
/// `AT_EMPTY_PATH`.
pub const AT_EMPTY_PATH: u32 = 0x1000;

/// `clone` flags (`<linux/sched.h>`).
pub mod clone {
    #![allow(missing_docs)]
    /// The exit signal's bits.
    pub const CSIGNAL: u64 = 0xff;
    pub const CLONE_VM: u64 = 0x100;
    pub const CLONE_FILES: u64 = 0x400;
    pub const CLONE_SIGHAND: u64 = 0x800;
    pub const CLONE_VFORK: u64 = 0x4000;
    pub const CLONE_THREAD: u64 = 0x1_0000;
    pub const CLONE_SETTLS: u64 = 0x8_0000;
    pub const CLONE_PARENT_SETTID: u64 = 0x10_0000;
    pub const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
    pub const CLONE_CHILD_SETTID: u64 = 0x100_0000;
}

/// Memory protection and mapping flags.
pub mod mman {
    #![allow(missing_docs)]
    pub const PROT_READ: u64 = 1;
    pub const PROT_WRITE: u64 = 2;
    pub const PROT_EXEC: u64 = 4;
    pub const MAP_SHARED: u64 = 0x01;
    pub const MAP_PRIVATE: u64 = 0x02;
    pub const MAP_SHARED_VALIDATE: u64 = 0x03;
    pub const MAP_TYPE: u64 = 0x0f;
    pub const MAP_FIXED: u64 = 0x10;
    pub const MAP_ANONYMOUS: u64 = 0x20;
    pub const MAP_FIXED_NOREPLACE: u64 = 0x100000;
    pub const MREMAP_MAYMOVE: u64 = 1;
    pub const MREMAP_FIXED: u64 = 2;
    pub const MREMAP_DONTUNMAP: u64 = 4;
}
