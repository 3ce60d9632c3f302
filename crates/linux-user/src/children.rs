//! Child processes: `clone` without `CLONE_VM` (how glibc's `fork` asks)
//! and `vfork`, both a fork of the host process as qemu-user makes them;
//! `wait4` and `waitid` on the host's children; `execve`, where an RV64
//! program (or a script whose interpreter is one) starts under the
//! embedder's [`Launcher`] — tcgkit's own executable with the same options,
//! which is what qemu-user gets from binfmt_misc — and any other program
//! is executed by the host.
//!
//! A vfork is a fork, as in qemu-user: parent and child do not share
//! memory, and the parent does not wait for the child's exec.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

use tcgkit_tcg_core::GuestMemory;

use crate::abi::errno;
use crate::host::{self, RawRusage};

/// How an `execve` of an RV64 program runs it: the host command that
/// starts it the way this process was started (for tcgkit's command line,
/// its own executable and options).
///
/// ```
/// use std::ffi::OsString;
/// use std::path::{Path, PathBuf};
/// use tcgkit_linux_user::Launcher;
///
/// /// Runs exec'd RV64 programs under qemu-riscv64, say.
/// struct Qemu;
///
/// impl Launcher for Qemu {
///     fn command(&self, program: &Path, argv: &[OsString]) -> (PathBuf, Vec<OsString>) {
///         let mut args = vec![OsString::from("qemu-riscv64"), OsString::from("-0")];
///         args.extend(argv.first().cloned());
///         args.push(program.into());
///         args.extend(argv.iter().skip(1).cloned());
///         (PathBuf::from("/usr/bin/qemu-riscv64"), args)
///     }
/// }
///
/// let (program, args) = Qemu.command(Path::new("/bin/ls"), &["ls".into(), "-l".into()]);
/// assert_eq!(program, Path::new("/usr/bin/qemu-riscv64"));
/// assert_eq!(args, ["qemu-riscv64", "-0", "ls", "/bin/ls", "-l"]);
/// ```
pub trait Launcher: Send + Sync {
    /// The host program to execute and its complete argv (its own
    /// `argv[0]` first) for running RV64 `program` (a host path) with the
    /// guest's `argv` (`argv[0]` included). The environment is the guest's.
    fn command(&self, program: &Path, argv: &[OsString]) -> (PathBuf, Vec<OsString>);
}

/// The host's SIGCHLD, watched once the guest has forked: each one
/// becomes the guest's SIGCHLD at its next syscall, and wakes a guest
/// waiting in `rt_sigsuspend`.
pub(crate) struct ChildSignals {
    arrived: Arc<AtomicBool>,
    wake: OwnedFd,
}

impl ChildSignals {
    /// Starts watching; `None` if the host refuses (then the guest only
    /// learns of its children by waiting for them).
    pub(crate) fn install() -> Option<ChildSignals> {
        const SIGCHLD: i32 = 17;
        let arrived = Arc::new(AtomicBool::new(false));
        let (wake, write) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .ok()?;
        signal_hook::flag::register(SIGCHLD, Arc::clone(&arrived)).ok()?;
        signal_hook::low_level::pipe::register(SIGCHLD, write).ok()?;
        Some(ChildSignals { arrived, wake })
    }

    /// Whether a SIGCHLD arrived since the last call.
    pub(crate) fn take(&self) -> bool {
        if !self.arrived.swap(false, Ordering::AcqRel) {
            return false;
        }
        let mut drain = [0u8; 64];
        while matches!(rustix::io::read(&self.wake, &mut drain), Ok(n) if n > 0) {}
        true
    }

    /// Readable once a SIGCHLD arrived (until [`ChildSignals::take`]).
    pub(crate) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Sleeps until a SIGCHLD arrives (at once if one came already).
    pub(crate) fn wait(&self) {
        use rustix::event::{PollFd, PollFlags, poll};
        while !self.arrived.load(Ordering::Acquire) {
            let mut fds = [PollFd::new(&self.wake, PollFlags::IN)];
            let _ = poll(&mut fds, None);
        }
    }
}

use crate::abi::clone::{
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_PARENT_SETTID, CLONE_SETTLS, CLONE_VFORK,
    CLONE_VM, CSIGNAL,
};

/// A `clone` that makes a new process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ForkRequest {
    /// The child's stack pointer (0: the parent's).
    pub stack: u64,
    /// `CLONE_SETTLS`: the child's thread pointer.
    pub tls: Option<u64>,
    /// `CLONE_PARENT_SETTID`: where the parent gets the child's pid.
    pub parent_tid: Option<u64>,
    /// `CLONE_CHILD_SETTID`: where the child gets its own pid.
    pub child_tid: Option<u64>,
    /// `CLONE_CHILD_CLEARTID`: the child's clear-tid word.
    pub clear_tid: Option<u64>,
}

impl ForkRequest {
    /// The fork `clone`'s arguments ask for, as qemu-user accepts them: a
    /// vfork drops `CLONE_VM`; other sharing flags are `EINVAL`.
    pub(crate) fn from_clone(args: [u64; 6]) -> Result<ForkRequest, i32> {
        // RV64's argument order: flags, stack, parent tid, tls, child tid.
        let [mut flags, stack, parent_tid, tls, child_tid, _] = args;
        if flags & CLONE_VFORK != 0 {
            flags &= !(CLONE_VFORK | CLONE_VM);
        }
        let allowed = CSIGNAL
            | CLONE_SETTLS
            | CLONE_PARENT_SETTID
            | CLONE_CHILD_CLEARTID
            | CLONE_CHILD_SETTID;
        if flags & !allowed != 0 {
            return Err(errno::EINVAL);
        }
        let when = |flag: u64, value: u64| (flags & flag != 0).then_some(value);
        Ok(ForkRequest {
            stack,
            tls: when(CLONE_SETTLS, tls),
            parent_tid: when(CLONE_PARENT_SETTID, parent_tid),
            child_tid: when(CLONE_CHILD_SETTID, child_tid),
            clear_tid: when(CLONE_CHILD_CLEARTID, child_tid),
        })
    }
}

/// Longest path, argument or environment string `execve` takes.
const MAX_ARG_STRLEN: usize = 128 * 1024;
/// Most argv plus envp entries taken (Linux's limit is by bytes).
const MAX_ARG_COUNT: usize = 64 * 1024;

/// A NULL-terminated array of guest strings (argv, envp); a NULL array is
/// empty, as Linux takes it.
fn guest_strings(mem: &mut GuestMemory, mut at: u64) -> Result<Vec<Vec<u8>>, i32> {
    let mut all = Vec::new();
    if at == 0 {
        return Ok(all);
    }
    loop {
        let ptr = mem.load(at, 8).map_err(|_| errno::EFAULT)?;
        if ptr == 0 {
            return Ok(all);
        }
        if all.len() == MAX_ARG_COUNT {
            return Err(E2BIG);
        }
        all.push(read_string(mem, ptr)?);
        at = at.wrapping_add(8);
    }
}

fn read_string(mem: &mut GuestMemory, addr: u64) -> Result<Vec<u8>, i32> {
    let s = mem
        .read_cstr(addr, MAX_ARG_STRLEN + 1)
        .map_err(|_| errno::EFAULT)?;
    if s.len() > MAX_ARG_STRLEN {
        return Err(E2BIG);
    }
    Ok(s)
}

const E2BIG: i32 = 7;
const ENOEXEC: i32 = 8;

/// What an `execve` names, read from its first bytes.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// An RV64 ELF file.
    Rv64,
    /// Another ELF file: the host runs it.
    OtherElf,
    /// `#!interpreter [arg]`.
    Script {
        interpreter: Vec<u8>,
        arg: Option<Vec<u8>>,
    },
    /// Nothing Linux would run.
    Unknown,
}

/// Linux's limit on a `#!` line (`BINPRM_BUF_SIZE`).
const SHEBANG_MAX: usize = 256;

fn kind_of(path: &Path) -> Result<Kind, i32> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| io_errno(&e))?;
    let mut head = Vec::with_capacity(SHEBANG_MAX);
    (&mut file)
        .take(SHEBANG_MAX as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_errno(&e))?;
    Ok(classify(&head))
}

fn classify(head: &[u8]) -> Kind {
    const EM_RISCV: u16 = 243;
    if head.starts_with(b"\x7fELF") {
        let class64 = head.get(4) == Some(&2);
        let machine = head.get(18..20).map(|m| u16::from_le_bytes([m[0], m[1]]));
        return if class64 && machine == Some(EM_RISCV) {
            Kind::Rv64
        } else {
            Kind::OtherElf
        };
    }
    let Some(line) = head.strip_prefix(b"#!") else {
        return Kind::Unknown;
    };
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.trim_ascii();
    // As Linux: the interpreter ends at the first blank; the rest, trimmed,
    // is one argument.
    let split = line.iter().position(|b| b.is_ascii_whitespace());
    let (interpreter, rest) = match split {
        Some(i) => (&line[..i], line[i..].trim_ascii()),
        None => (line, &[][..]),
    };
    if interpreter.is_empty() {
        return Kind::Unknown;
    }
    Kind::Script {
        interpreter: interpreter.to_vec(),
        arg: (!rest.is_empty()).then(|| rest.to_vec()),
    }
}

fn io_errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(errno::EIO)
}

/// What to execute on the host for a guest `execve`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ExecPlan {
    pub program: PathBuf,
    pub argv: Vec<OsString>,
}

/// Plans the `execve(path, argv)` the guest asked for; `resolve` maps a
/// guest path to the host's (the `-L` prefix).
pub(crate) fn plan_exec(
    path: &[u8],
    argv: &[Vec<u8>],
    resolve: &dyn Fn(&[u8]) -> Vec<u8>,
    launcher: Option<&dyn Launcher>,
) -> Result<ExecPlan, i32> {
    if path.is_empty() {
        return Err(errno::ENOENT);
    }
    let host = PathBuf::from(OsStr::from_bytes(&resolve(path)));
    check_executable(&host)?;
    let os = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
    let guest_argv: Vec<OsString> = argv.iter().map(|a| os(a)).collect();
    let launch = |program: &Path, argv: &[OsString]| match launcher {
        Some(launcher) => {
            let (program, argv) = launcher.command(program, argv);
            Ok(ExecPlan { program, argv })
        }
        // Like qemu-user without binfmt_misc: the host cannot run it.
        None => Err(ENOEXEC),
    };
    match kind_of(&host)? {
        Kind::Rv64 => launch(&host, &guest_argv),
        Kind::Script { interpreter, arg } => {
            let interp_host = PathBuf::from(OsStr::from_bytes(&resolve(&interpreter)));
            let interp_kind = check_executable(&interp_host).and_then(|()| kind_of(&interp_host));
            if interp_kind == Ok(Kind::Rv64) {
                // Linux's argv for a script: interpreter, its argument, the
                // script's path, then the arguments after argv[0].
                let mut args = vec![os(&interpreter)];
                args.extend(arg.as_deref().map(os));
                args.push(os(path));
                args.extend(guest_argv.iter().skip(1).cloned());
                launch(&interp_host, &args)
            } else {
                Ok(ExecPlan {
                    program: host,
                    argv: guest_argv,
                })
            }
        }
        Kind::OtherElf => Ok(ExecPlan {
            program: host,
            argv: guest_argv,
        }),
        Kind::Unknown => Err(ENOEXEC),
    }
}

/// The checks Linux makes before it reads a file to execute: it exists,
/// is a regular file, and may be executed.
fn check_executable(path: &Path) -> Result<(), i32> {
    let meta = std::fs::metadata(path).map_err(|e| io_errno(&e))?;
    if !meta.is_file() {
        return Err(errno::EACCES);
    }
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).map_err(crate::syscall::host_errno)
}

/// `execve`'s arguments as the guest passed them.
pub(crate) struct ExecArgs {
    pub path: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    pub envp: Vec<Vec<u8>>,
}

/// Reads `execve`'s arguments from the guest: the path, argv and envp.
pub(crate) fn exec_args(
    mem: &mut GuestMemory,
    path: u64,
    argv: u64,
    envp: u64,
) -> Result<ExecArgs, i32> {
    Ok(ExecArgs {
        path: read_string(mem, path)?,
        argv: guest_strings(mem, argv)?,
        envp: guest_strings(mem, envp)?,
    })
}

/// Converts to C strings for the host's `execve` (no guest string holds a
/// NUL: each was read up to one).
pub(crate) fn c_strings<'a>(items: impl Iterator<Item = &'a [u8]>) -> Result<Vec<CString>, i32> {
    items
        .map(|b| CString::new(b.to_vec()).map_err(|_| errno::EINVAL))
        .collect()
}

/// Writes a `struct rusage` to the guest.
fn put_rusage(mem: &mut GuestMemory, addr: u64, usage: &RawRusage) -> Result<(), i32> {
    let bytes: Vec<u8> = usage.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write(addr, &bytes).map_err(|_| errno::EFAULT)
}

/// `wait4(pid, status, options, rusage)`.
pub(crate) fn wait4(
    mem: &mut GuestMemory,
    pid: u64,
    status: u64,
    options: u64,
    rusage: u64,
) -> Result<u64, i32> {
    // WNOHANG, WUNTRACED, WCONTINUED, __WNOTHREAD, __WALL, __WCLONE.
    const KNOWN: u64 = 1 | 2 | 8 | 0x2000_0000 | 0x4000_0000 | 0x8000_0000;
    if options & !KNOWN != 0 {
        return Err(errno::EINVAL);
    }
    let (got, code, usage) = host::wait4(pid as i32, options as i32)?;
    if got > 0 {
        if status != 0 {
            mem.store(status, 4, u64::from(code as u32))
                .map_err(|_| errno::EFAULT)?;
        }
        if rusage != 0 {
            put_rusage(mem, rusage, &usage)?;
        }
    }
    Ok(got as u64)
}

/// `waitid(idtype, id, infop, options, rusage)`.
pub(crate) fn waitid(mem: &mut GuestMemory, args: [u64; 6]) -> Result<u64, i32> {
    let [idtype, id, infop, options, rusage, _] = args;
    let (info, usage) = host::waitid(idtype as u32, id as u32, options as i32)?;
    if infop != 0 {
        mem.write(infop, &info).map_err(|_| errno::EFAULT)?;
    }
    if rusage != 0 {
        put_rusage(mem, rusage, &usage)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_flags_as_glibc_and_posix_spawn_pass_them() {
        const SIGCHLD: u64 = 17;
        // glibc's fork.
        let fork = ForkRequest::from_clone([
            CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD,
            0,
            0,
            0,
            0x1000,
            0,
        ])
        .unwrap();
        assert_eq!(fork.child_tid, Some(0x1000));
        assert_eq!(fork.clear_tid, Some(0x1000));
        assert_eq!((fork.parent_tid, fork.tls, fork.stack), (None, None, 0));
        // posix_spawn: CLONE_VM | CLONE_VFORK on a stack of its own.
        let spawn = ForkRequest::from_clone([CLONE_VM | CLONE_VFORK | SIGCHLD, 0x8000, 0, 0, 0, 0])
            .unwrap();
        assert_eq!(spawn.stack, 0x8000);
        // Sharing files or handlers with another process is not emulated.
        use crate::abi::clone::CLONE_FILES;
        assert_eq!(
            ForkRequest::from_clone([CLONE_FILES | SIGCHLD, 0, 0, 0, 0, 0]),
            Err(errno::EINVAL)
        );
        // CLONE_VM without vfork (and without a thread) neither.
        assert_eq!(
            ForkRequest::from_clone([CLONE_VM | SIGCHLD, 0, 0, 0, 0, 0]),
            Err(errno::EINVAL)
        );
    }

    #[test]
    fn shebang_lines_split_as_linux_splits_them() {
        assert_eq!(
            classify(b"#!/bin/sh\necho hi\n"),
            Kind::Script {
                interpreter: b"/bin/sh".to_vec(),
                arg: None
            }
        );
        assert_eq!(
            classify(b"#! /usr/bin/env  python3 -u \nx"),
            Kind::Script {
                interpreter: b"/usr/bin/env".to_vec(),
                arg: Some(b"python3 -u".to_vec())
            }
        );
        assert_eq!(classify(b"#!\n"), Kind::Unknown);
        assert_eq!(classify(b"plain text"), Kind::Unknown);
        let mut rv64 = b"\x7fELF\x02\x01\x01".to_vec();
        rv64.resize(18, 0);
        rv64.extend_from_slice(&243u16.to_le_bytes());
        assert_eq!(classify(&rv64), Kind::Rv64);
        rv64[18] = 62; // x86-64
        assert_eq!(classify(&rv64), Kind::OtherElf);
    }

    struct Recorder;

    impl Launcher for Recorder {
        fn command(&self, program: &Path, argv: &[OsString]) -> (PathBuf, Vec<OsString>) {
            let mut all = vec![OsString::from("tcgkit"), program.into()];
            all.extend(argv.iter().cloned());
            (PathBuf::from("/proc/self/exe"), all)
        }
    }

    #[test]
    fn rv64_programs_and_their_scripts_go_to_the_launcher() {
        let dir = std::env::temp_dir().join(format!("tcgkit-exec-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests/faults");
        let script = dir.join("script");
        std::fs::write(&script, format!("#!{} -v\n", guest.display())).unwrap();
        let host_script = dir.join("host-script");
        std::fs::write(&host_script, "#!/bin/sh\n").unwrap();
        let text = dir.join("text");
        std::fs::write(&text, "no magic\n").unwrap();
        for file in [&script, &host_script, &text] {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let bytes = |p: &Path| p.as_os_str().as_bytes().to_vec();
        let same = |p: &[u8]| p.to_vec();
        let argv = [b"name".to_vec(), b"x".to_vec()];
        let plan = plan_exec(&bytes(&guest), &argv, &same, Some(&Recorder)).unwrap();
        assert_eq!(plan.program, Path::new("/proc/self/exe"));
        assert_eq!(
            plan.argv[1..],
            [guest.clone().into_os_string(), "name".into(), "x".into()]
        );
        // The script runs its RV64 interpreter: interpreter, arg, script.
        let plan = plan_exec(&bytes(&script), &argv, &same, Some(&Recorder)).unwrap();
        let mut want = vec![guest.clone().into_os_string()];
        want.extend([guest.clone().into_os_string(), "-v".into()]);
        want.extend([script.clone().into_os_string(), "x".into()]);
        assert_eq!(plan.argv[1..], want[..]);
        // Host programs and scripts run as they are.
        let plan = plan_exec(&bytes(&host_script), &argv, &same, Some(&Recorder)).unwrap();
        assert_eq!(plan.program, host_script);
        assert_eq!(plan.argv, ["name", "x"]);
        let plan = plan_exec(b"/bin/sh", &argv, &same, None).unwrap();
        assert_eq!(plan.program, Path::new("/bin/sh"));
        // What Linux refuses.
        assert_eq!(plan_exec(&bytes(&text), &argv, &same, None), Err(ENOEXEC));
        assert_eq!(plan_exec(&bytes(&guest), &argv, &same, None), Err(ENOEXEC));
        assert_eq!(
            plan_exec(b"/nonexistent", &argv, &same, None),
            Err(errno::ENOENT)
        );
        assert_eq!(plan_exec(b"", &argv, &same, None), Err(errno::ENOENT));
        assert_eq!(
            plan_exec(&bytes(&dir), &argv, &same, None),
            Err(errno::EACCES)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn waiting_without_children_is_echild() {
        // The test process's other tests may have children of their own
        // for a moment: only check a pid that is certainly not ours.
        let mut mem = GuestMemory::new();
        assert_eq!(wait4(&mut mem, 1, 0, 0, 0), Err(10), "ECHILD");
        assert_eq!(wait4(&mut mem, 1, 0, 0x100, 0), Err(errno::EINVAL));
    }
}
