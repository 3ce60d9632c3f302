//! `--strace`: one line per syscall on stderr, in the shape `qemu-riscv64
//! -strace` prints (`PID name(args) = ret`).
//!
//! qemu formats each syscall with a printf-style template; the argument kinds
//! below reproduce those templates for the syscalls static programs make
//! (including their quirks, e.g. `%#x` keeping only the low 32 bits), and
//! fall back to six decimal arguments like qemu's generic format.

use std::fmt::Write as _;

use tcgkit_tcg_core::GuestMemory;

use crate::abi::{self, nr};

/// How one argument is printed.
#[derive(Clone, Copy)]
enum Arg {
    /// `%d`: the low 32 bits, signed.
    Int,
    /// `%ld` of the whole register.
    Long,
    /// `%#x`: low 32 bits in hex with `0x` (just `0` for zero).
    Hex,
    /// `%p`: the whole register in hex (`(nil)` for zero).
    Ptr,
    /// qemu's `print_pointer`: `NULL` or 16 hex digits.
    Addr,
    /// A NUL-terminated guest string, quoted.
    Str,
    /// A directory descriptor: `AT_FDCWD` or a number.
    AtFd,
    /// `open` flags.
    OpenFlags,
    /// A file mode in octal (`%#o`).
    Mode,
    /// `PROT_*` flags.
    Prot,
    /// `MAP_*` flags.
    MapFlags,
    /// `SEEK_*`.
    Whence,
    /// `CLOCK_*`.
    Clock,
    /// `F_*` command of fcntl.
    FcntlCmd,
    /// ioctl request.
    IoctlCmd,
    /// `R_OK|W_OK|X_OK` or `F_OK`.
    AccessMode,
    /// `FUTEX_*` operation.
    FutexOp,
    /// A signal number (`SIGSEGV`).
    Sig,
    /// `SIG_BLOCK`, `SIG_UNBLOCK` or `SIG_SETMASK`.
    SigHow,
    /// Socket domain (`PF_UNIX`).
    SockDomain,
    /// Socket type and flags (`SOCK_STREAM|SOCK_CLOEXEC`).
    SockType,
    /// Socket protocol (`IPPROTO_IP`).
    SockProto,
}

/// How the result is printed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ret {
    /// Decimal.
    Int,
    /// An address in 16 hex digits (brk, mmap).
    Addr,
    /// A `struct timespec` written by the call, shown after the result.
    Timespec,
    /// The process is gone: nothing is printed after the call.
    NoReturn,
}

fn spec(number: u64) -> Option<(&'static [Arg], Ret)> {
    use Arg::*;
    Some(match number {
        nr::READ | nr::WRITE => (&[Int, Hex, Int], Ret::Int),
        nr::WRITEV | nr::READV => (&[Int, Ptr, Hex], Ret::Int),
        nr::CLOSE | nr::DUP | nr::FSYNC | nr::FDATASYNC | nr::FCHDIR => (&[Int], Ret::Int),
        nr::DUP3 => (&[Int, Int, Int], Ret::Int),
        nr::OPENAT => (&[AtFd, Str, OpenFlags, Mode], Ret::Int),
        nr::READLINKAT => (&[AtFd, Str, Addr, Int], Ret::Int),
        nr::NEWFSTATAT => (&[AtFd, Str, Addr, Hex], Ret::Int),
        nr::FSTAT => (&[Int, Addr], Ret::Int),
        nr::FACCESSAT | nr::FACCESSAT2 => (&[AtFd, Str, AccessMode, Hex], Ret::Int),
        nr::UNLINKAT => (&[AtFd, Str, Hex], Ret::Int),
        nr::MKDIRAT => (&[AtFd, Str, Mode], Ret::Int),
        nr::RENAMEAT => (&[AtFd, Str, AtFd, Str], Ret::Int),
        nr::CHDIR => (&[Str], Ret::Int),
        nr::LSEEK => (&[Int, Long, Whence], Ret::Int),
        nr::FCNTL => (&[Int, FcntlCmd], Ret::Int),
        nr::IOCTL => (&[Int, IoctlCmd, Addr], Ret::Int),
        nr::BRK => (&[Addr], Ret::Addr),
        nr::MMAP => (&[Addr, Int, Prot, MapFlags, Int, Long], Ret::Addr),
        nr::MUNMAP => (&[Addr, Int], Ret::Int),
        nr::MPROTECT => (&[Addr, Int, Prot], Ret::Int),
        nr::CLOCK_GETTIME => (&[Clock, Addr], Ret::Timespec),
        nr::CLOCK_GETRES => (&[Clock, Addr], Ret::Int),
        nr::UNAME => (&[Ptr], Ret::Int),
        nr::GETCWD => (&[Ptr, Int], Ret::Int),
        nr::GETRANDOM => (&[Ptr, Int, Int], Ret::Int),
        nr::FUTEX => (&[Addr, FutexOp, Int, Addr, Addr, Int], Ret::Int),
        nr::GETPID
        | nr::GETPPID
        | nr::GETTID
        | nr::GETUID
        | nr::GETEUID
        | nr::GETGID
        | nr::GETEGID
        | nr::SCHED_YIELD
        | nr::SYNC => (&[], Ret::Int),
        nr::EXIT | nr::EXIT_GROUP => (&[Int], Ret::NoReturn),
        nr::KILL | nr::TKILL => (&[Int, Sig], Ret::Int),
        nr::TGKILL => (&[Int, Int, Sig], Ret::Int),
        nr::RT_SIGPROCMASK => (&[SigHow, Addr, Addr], Ret::Int),
        nr::SOCKET => (&[SockDomain, SockType, SockProto], Ret::Int),
        nr::CONNECT | nr::BIND => (&[Int, Hex, Int], Ret::Int),
        nr::RT_SIGACTION => (&[Sig, Addr, Addr], Ret::Int),
        _ => return None,
    })
}

const GENERIC: &[Arg] = &[Arg::Long; 6];

/// The text printed before the syscall runs: `PID name(args)`, or qemu's
/// `PID Unknown syscall N` line (newline included) for a number it does not know.
pub(crate) fn format_call(pid: u32, number: u64, args: &[u64; 6], mem: &mut GuestMemory) -> String {
    let mut out = format!("{pid} ");
    let Some(name) = abi::syscall_name(number) else {
        let _ = writeln!(out, "Unknown syscall {number}");
        return out;
    };
    let (mut kinds, ret) = spec(number).unwrap_or((GENERIC, Ret::Int));
    // qemu shows openat's mode only when the flags make it meaningful.
    const O_CREAT: u64 = 0x40;
    const O_TMPFILE: u64 = 0x410000;
    if number == nr::OPENAT && args[2] & O_CREAT == 0 && args[2] & O_TMPFILE != O_TMPFILE {
        kinds = &kinds[..3];
    }
    out.push_str(name);
    out.push('(');
    for (i, (kind, &value)) in kinds.iter().zip(args).enumerate() {
        if i > 0 {
            out.push(',');
        }
        format_arg(&mut out, *kind, value, mem);
    }
    out.push(')');
    if ret == Ret::NoReturn {
        out.push('\n');
    }
    out
}

/// The text printed after the syscall returned (` = ret`, newline included);
/// empty for calls that do not return or that qemu shows as unknown.
pub(crate) fn format_return(
    number: u64,
    args: &[u64; 6],
    ret: i64,
    mem: &mut GuestMemory,
) -> String {
    if abi::syscall_name(number).is_none() {
        return String::new();
    }
    let kind = spec(number).map_or(Ret::Int, |(_, r)| r);
    if kind == Ret::NoReturn {
        return String::new();
    }
    if (-4095..0).contains(&ret) {
        let errno = -ret as i32;
        return format!(" = -1 errno={errno} ({})\n", strerror(errno));
    }
    match kind {
        Ret::Addr => format!(" = 0x{:016x}\n", ret as u64),
        Ret::Timespec => {
            let mut text = format!(" = {ret}");
            let mut raw = [0u8; 16];
            if args[1] != 0 && mem.read(args[1], &mut raw).is_ok() {
                let (sec, nsec) = raw.split_at(8);
                let sec = i64::from_le_bytes(sec.try_into().unwrap_or([0; 8]));
                let nsec = i64::from_le_bytes(nsec.try_into().unwrap_or([0; 8]));
                let _ = write!(text, " ({{tv_sec = {sec},tv_nsec = {nsec}}})");
            }
            text.push('\n');
            text
        }
        _ => format!(" = {ret}\n"),
    }
}

/// The host C library's message for `errno` (same numbering as the guest).
pub(crate) fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)" to the C library's message.
    match text.rfind(" (os error") {
        Some(end) => text[..end].to_string(),
        None => text,
    }
}

fn format_arg(out: &mut String, kind: Arg, value: u64, mem: &mut GuestMemory) {
    let low = value as u32;
    let _ = match kind {
        Arg::Int => write!(out, "{}", low as i32),
        Arg::Long => write!(out, "{}", value as i64),
        Arg::Hex if low == 0 => write!(out, "0"),
        Arg::Hex => write!(out, "{low:#x}"),
        Arg::Ptr if value == 0 => write!(out, "(nil)"),
        Arg::Ptr => write!(out, "{value:#x}"),
        Arg::Addr if value == 0 => write!(out, "NULL"),
        Arg::Addr => write!(out, "0x{value:016x}"),
        Arg::Str => match mem.read_cstr(value, 4096) {
            Ok(bytes) => write!(out, "\"{}\"", String::from_utf8_lossy(&bytes)),
            Err(_) => write!(out, "0x{value:016x}"),
        },
        Arg::AtFd if low as i32 == abi::AT_FDCWD => write!(out, "AT_FDCWD"),
        Arg::AtFd => write!(out, "{}", low as i32),
        Arg::OpenFlags => {
            let access = match low & 3 {
                0 => "O_RDONLY",
                1 => "O_WRONLY",
                2 => "O_RDWR",
                _ => "O_ACCMODE",
            };
            out.push_str(access);
            let rest = low & !3;
            if rest != 0 {
                out.push('|');
                flags(out, rest, OPEN_FLAGS);
            }
            Ok(())
        }
        // C's `%#o`: a leading 0, not Rust's `0o`.
        Arg::Mode if low == 0 => write!(out, "0"),
        Arg::Mode => write!(out, "0{low:o}"),
        Arg::Prot if low == 0 => write!(out, "PROT_NONE"),
        Arg::Prot => {
            flags(out, low, PROT_FLAGS);
            Ok(())
        }
        Arg::MapFlags => {
            flags(out, low, MAP_FLAGS);
            Ok(())
        }
        Arg::Whence => match low {
            0 => write!(out, "SEEK_SET"),
            1 => write!(out, "SEEK_CUR"),
            2 => write!(out, "SEEK_END"),
            3 => write!(out, "SEEK_DATA"),
            4 => write!(out, "SEEK_HOLE"),
            _ => write!(out, "{low:#x}"),
        },
        Arg::Clock => match CLOCKS.get(low as usize) {
            Some(name) => write!(out, "{name}"),
            None => write!(out, "{}", low as i32),
        },
        Arg::FcntlCmd => match FCNTL_CMDS.iter().find(|(v, _)| *v == low) {
            Some((_, name)) => write!(out, "{name}"),
            None => write!(out, "{low:#x}"),
        },
        Arg::IoctlCmd => match IOCTLS.iter().find(|(v, _)| *v == low) {
            Some((_, name)) => write!(out, "{name}"),
            None => write!(out, "{low:#x}"),
        },
        Arg::AccessMode if low == 0 => write!(out, "F_OK"),
        Arg::AccessMode => {
            flags(out, low, ACCESS_FLAGS);
            Ok(())
        }
        Arg::Sig => match signal_name(low) {
            Some(name) => write!(out, "{name}"),
            None => write!(out, "{}", low as i32),
        },
        Arg::SigHow => match low {
            0 => write!(out, "SIG_BLOCK"),
            1 => write!(out, "SIG_UNBLOCK"),
            2 => write!(out, "SIG_SETMASK"),
            _ => write!(out, "{low}"),
        },
        Arg::SockDomain => match low {
            1 => write!(out, "PF_UNIX"),
            2 => write!(out, "PF_INET"),
            10 => write!(out, "PF_INET6"),
            16 => write!(out, "PF_NETLINK"),
            17 => write!(out, "PF_PACKET"),
            _ => write!(out, "{low}"),
        },
        Arg::SockType => {
            let _ = match low & 0xf {
                1 => write!(out, "SOCK_STREAM"),
                2 => write!(out, "SOCK_DGRAM"),
                3 => write!(out, "SOCK_RAW"),
                4 => write!(out, "SOCK_RDM"),
                5 => write!(out, "SOCK_SEQPACKET"),
                10 => write!(out, "SOCK_PACKET"),
                other => write!(out, "{other}"),
            };
            if low & 0x80000 != 0 {
                out.push_str("|SOCK_CLOEXEC");
            }
            if low & 0x800 != 0 {
                out.push_str("|SOCK_NONBLOCK");
            }
            Ok(())
        }
        Arg::SockProto => match low {
            0 => write!(out, "IPPROTO_IP"),
            6 => write!(out, "IPPROTO_TCP"),
            17 => write!(out, "IPPROTO_UDP"),
            _ => write!(out, "{low}"),
        },
        Arg::FutexOp => {
            let op = low & 0x7f;
            match FUTEX_OPS.get(op as usize) {
                Some(name) => {
                    if low & 128 != 0 {
                        out.push_str("FUTEX_PRIVATE_FLAG|");
                    }
                    if low & 256 != 0 {
                        out.push_str("FUTEX_CLOCK_REALTIME|");
                    }
                    write!(out, "{name}")
                }
                None => write!(out, "{low:#x}"),
            }
        }
    };
}

/// qemu's name for a signal number (it calls 6 `SIGIOT`).
fn signal_name(number: u32) -> Option<&'static str> {
    const NAMES: [&str; 23] = [
        "", "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGIOT", "SIGBUS", "SIGFPE",
        "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "", "SIGCHLD",
        "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU",
    ];
    NAMES
        .get(number as usize)
        .copied()
        .filter(|n| !n.is_empty())
}

/// Why a fatal signal arrived, for the `--- SIG... {...} ---` line.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SignalCause {
    /// A fault: `si_code` and the faulting address (or pc).
    Fault { code: u32, addr: u64 },
    /// Sent by the process itself with `kill` (`SI_USER`) or `tgkill`/`tkill` (`SI_TKILL`).
    Sent { by_thread: bool, pid: u32, uid: u32 },
}

/// qemu's line for a signal delivered to the guest, newline included.
pub(crate) fn format_signal(number: u8, cause: SignalCause) -> String {
    let name = signal_name(u32::from(number)).map_or_else(|| number.to_string(), str::to_string);
    match cause {
        SignalCause::Fault { code, addr } => {
            let addr = if addr == 0 {
                "NULL".to_string()
            } else {
                format!("0x{addr:016x}")
            };
            format!("--- {name} {{si_signo={name}, si_code={code}, si_addr={addr}}} ---\n")
        }
        SignalCause::Sent {
            by_thread,
            pid,
            uid,
        } => {
            let code = if by_thread { "SI_TKILL" } else { "SI_USER" };
            format!(
                "--- {name} {{si_signo={name}, si_code={code}, si_pid={pid}, si_uid={uid}}} ---\n"
            )
        }
    }
}

/// qemu's `print_flags`: known names joined by `|`, unknown bits in hex.
fn flags(out: &mut String, value: u32, table: &[(u32, &str)]) {
    let mut rest = value;
    let mut any = false;
    for &(bits, name) in table {
        if bits != 0 && rest & bits == bits {
            if any {
                out.push('|');
            }
            out.push_str(name);
            rest &= !bits;
            any = true;
        }
    }
    if !any {
        let _ = write!(out, "{value:#x}");
    } else if rest != 0 {
        let _ = write!(out, "|{rest:#x}");
    }
}

const OPEN_FLAGS: &[(u32, &str)] = &[
    (0x400, "O_APPEND"),
    (0x40, "O_CREAT"),
    (0x80, "O_EXCL"),
    (0x8000, "O_LARGEFILE"),
    (0x100, "O_NOCTTY"),
    (0x800, "O_NONBLOCK"),
    (0x101000, "O_SYNC"),
    (0x1000, "O_DSYNC"),
    (0x2000, "O_ASYNC"),
    (0x200, "O_TRUNC"),
    (0x4000, "O_DIRECT"),
    (0x10000, "O_DIRECTORY"),
    (0x20000, "O_NOFOLLOW"),
    (0x40000, "O_NOATIME"),
    (0x80000, "O_CLOEXEC"),
    (0x200000, "O_PATH"),
    (0x410000, "O_TMPFILE"),
];

const PROT_FLAGS: &[(u32, &str)] = &[(1, "PROT_READ"), (2, "PROT_WRITE"), (4, "PROT_EXEC")];

const MAP_FLAGS: &[(u32, &str)] = &[
    (0x01, "MAP_SHARED"),
    (0x02, "MAP_PRIVATE"),
    (0x20, "MAP_ANONYMOUS"),
    (0x800, "MAP_DENYWRITE"),
    (0x10, "MAP_FIXED"),
    (0x100, "MAP_GROWSDOWN"),
    (0x1000, "MAP_EXECUTABLE"),
    (0x2000, "MAP_LOCKED"),
    (0x10000, "MAP_NONBLOCK"),
    (0x4000, "MAP_NORESERVE"),
    (0x8000, "MAP_POPULATE"),
    (0x20000, "MAP_STACK"),
    (0x40000, "MAP_HUGETLB"),
];

const ACCESS_FLAGS: &[(u32, &str)] = &[(4, "R_OK"), (2, "W_OK"), (1, "X_OK")];

const CLOCKS: &[&str] = &[
    "CLOCK_REALTIME",
    "CLOCK_MONOTONIC",
    "CLOCK_PROCESS_CPUTIME_ID",
    "CLOCK_THREAD_CPUTIME_ID",
    "CLOCK_MONOTONIC_RAW",
    "CLOCK_REALTIME_COARSE",
    "CLOCK_MONOTONIC_COARSE",
    "CLOCK_BOOTTIME",
    "CLOCK_REALTIME_ALARM",
    "CLOCK_BOOTTIME_ALARM",
    "CLOCK_SGI_CYCLE",
    "CLOCK_TAI",
];

const FCNTL_CMDS: &[(u32, &str)] = &[
    (0, "F_DUPFD"),
    (1, "F_GETFD"),
    (2, "F_SETFD"),
    (3, "F_GETFL"),
    (4, "F_SETFL"),
    (5, "F_GETLK"),
    (6, "F_SETLK"),
    (7, "F_SETLKW"),
    (1030, "F_DUPFD_CLOEXEC"),
];

const IOCTLS: &[(u32, &str)] = &[
    (0x5401, "TCGETS"),
    (0x5402, "TCSETS"),
    (0x5403, "TCSETSW"),
    (0x5404, "TCSETSF"),
    (0x540f, "TIOCGPGRP"),
    (0x5410, "TIOCSPGRP"),
    (0x5413, "TIOCGWINSZ"),
    (0x5414, "TIOCSWINSZ"),
    (0x541b, "FIONREAD"),
    (0x5421, "FIONBIO"),
];

const FUTEX_OPS: &[&str] = &[
    "FUTEX_WAIT",
    "FUTEX_WAKE",
    "FUTEX_FD",
    "FUTEX_REQUEUE",
    "FUTEX_CMP_REQUEUE",
    "FUTEX_WAKE_OP",
    "FUTEX_LOCK_PI",
    "FUTEX_UNLOCK_PI",
    "FUTEX_TRYLOCK_PI",
    "FUTEX_WAIT_BITSET",
    "FUTEX_WAKE_BITSET",
];

#[cfg(test)]
mod tests {
    use super::*;
    use tcgkit_tcg_core::Perms;

    fn memory_with(addr: u64, bytes: &[u8]) -> GuestMemory {
        let mut mem = GuestMemory::new();
        mem.map(addr, 4096, Perms::READ | Perms::WRITE)
            .expect("map");
        mem.write(addr, bytes).expect("write");
        mem
    }

    fn line(number: u64, args: [u64; 6], ret: i64, mem: &mut GuestMemory) -> String {
        format_call(42, number, &args, mem) + &format_return(number, &args, ret, mem)
    }

    #[test]
    fn shapes_match_qemu() {
        let mut mem = memory_with(0x1000, b"/proc/self/exe\0");
        let fdcwd = abi::AT_FDCWD as i64 as u64;
        assert_eq!(
            line(
                nr::READLINKAT,
                [fdcwd, 0x1000, 0x40007ff740, 4096, 0, 0],
                35,
                &mut mem
            ),
            "42 readlinkat(AT_FDCWD,\"/proc/self/exe\",0x00000040007ff740,4096) = 35\n"
        );
        assert_eq!(
            line(nr::READ, [0, 0x40007ff670, 4096, 0, 0, 0], 0, &mut mem),
            "42 read(0,0x7ff670,4096) = 0\n"
        );
        assert_eq!(
            line(nr::BRK, [0, 0, 0, 0, 0, 0], 0x7e000, &mut mem),
            "42 brk(NULL) = 0x000000000007e000\n"
        );
        assert_eq!(
            line(
                nr::MMAP,
                [0, 12288, 3, 0x22, -1i64 as u64, 0],
                0x4000802000,
                &mut mem
            ),
            "42 mmap(NULL,12288,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0) = 0x0000004000802000\n"
        );
        assert_eq!(
            line(
                nr::MMAP,
                [0x2_0000_0000, 4096, 3, 0x100022, -1i64 as u64, 0],
                -9,
                &mut mem
            ),
            "42 mmap(0x0000000200000000,4096,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|0x100000,-1,0) = -1 errno=9 (Bad file descriptor)\n"
        );
        assert_eq!(
            line(nr::OPENAT, [fdcwd, 0x1000, 0xc2, 0o600, 0, 0], 3, &mut mem),
            "42 openat(AT_FDCWD,\"/proc/self/exe\",O_RDWR|O_CREAT|O_EXCL,0600) = 3\n"
        );
        assert_eq!(
            line(nr::OPENAT, [fdcwd, 0x1000, 0, 0, 0, 0], -2, &mut mem),
            "42 openat(AT_FDCWD,\"/proc/self/exe\",O_RDONLY) = -1 errno=2 (No such file or directory)\n"
        );
        assert_eq!(
            line(nr::LSEEK, [0, 0, 42, 0, 0, 0], -22, &mut mem),
            "42 lseek(0,0,0x2a) = -1 errno=22 (Invalid argument)\n"
        );
        assert_eq!(
            line(
                nr::SET_ROBUST_LIST,
                [516320, 24, -32i64 as u64, 1, 512760, 516320],
                -38,
                &mut mem
            ),
            "42 set_robust_list(516320,24,-32,1,512760,516320) = -1 errno=38 (Function not implemented)\n"
        );
        assert_eq!(
            line(nr::EXIT_GROUP, [0; 6], 0, &mut mem),
            "42 exit_group(0)\n"
        );
        assert_eq!(
            line(4000, [0; 6], -38, &mut mem),
            "42 Unknown syscall 4000\n"
        );
        assert_eq!(line(nr::GETPID, [0; 6], 42, &mut mem), "42 getpid() = 42\n");
        assert_eq!(
            line(
                nr::FUTEX,
                [0x40007fe4e8, 0, 12345, 0, 0x18, 24],
                -11,
                &mut mem
            ),
            "42 futex(0x00000040007fe4e8,FUTEX_WAIT,12345,NULL,0x0000000000000018,24) = -1 errno=11 (Resource temporarily unavailable)\n"
        );
    }

    #[test]
    fn signals_are_named_like_qemu() {
        let mut mem = GuestMemory::new();
        assert_eq!(
            line(nr::TGKILL, [7, 7, 6, 0, 0, 0], 0, &mut mem),
            "42 tgkill(7,7,SIGIOT) = 0\n"
        );
        assert_eq!(
            format_signal(11, SignalCause::Fault { code: 1, addr: 0 }),
            "--- SIGSEGV {si_signo=SIGSEGV, si_code=1, si_addr=NULL} ---\n"
        );
        assert_eq!(
            format_signal(
                4,
                SignalCause::Fault {
                    code: 1,
                    addr: 0x1059e
                }
            ),
            "--- SIGILL {si_signo=SIGILL, si_code=1, si_addr=0x000000000001059e} ---\n"
        );
        assert_eq!(
            format_signal(
                6,
                SignalCause::Sent {
                    by_thread: true,
                    pid: 9,
                    uid: 0
                }
            ),
            "--- SIGIOT {si_signo=SIGIOT, si_code=SI_TKILL, si_pid=9, si_uid=0} ---\n"
        );
    }

    #[test]
    fn sockets_like_qemu() {
        let mut mem = GuestMemory::new();
        assert_eq!(
            line(nr::SOCKET, [1, 0x80801, 0, 0, 0, 0], 3, &mut mem),
            "42 socket(PF_UNIX,SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK,IPPROTO_IP) = 3\n"
        );
        assert_eq!(
            line(nr::CONNECT, [3, 0x40007fee68, 110, 0, 0, 0], -2, &mut mem),
            "42 connect(3,0x7fee68,110) = -1 errno=2 (No such file or directory)\n"
        );
    }

    #[test]
    fn timespec_result_is_shown() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&482i64.to_le_bytes());
        raw.extend_from_slice(&333289405i64.to_le_bytes());
        let mut mem = memory_with(0x2000, &raw);
        assert_eq!(
            line(nr::CLOCK_GETTIME, [1, 0x2000, 0, 0, 0, 0], 0, &mut mem),
            "42 clock_gettime(CLOCK_MONOTONIC,0x0000000000002000) = 0 ({tv_sec = 482,tv_nsec = 333289405})\n"
        );
    }
}
