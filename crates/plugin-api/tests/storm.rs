//! The seed scenario, proven: plugins that reset themselves from inside the
//! instruction callback of a load, every N-th load (N = 1, 7, 1000), over
//! every guest fixture, alone and alongside other plugins (one uninstalling
//! itself mid-run, one panicking), with resets from another thread, and
//! with every bundled plugin at once.
//!
//! Covered (see `FIXTURES`): `integer` (the 5000 sieve), `float`,
//! `syscalls`, `faults` (segv, ill, ebreak, abort, misaligned AMO, exit=7),
//! `signals` (handlers entered from kill/raise, a faulting store and an
//! illegal instruction), `fileio` (20 kB of stdin, and argv/env with a
//! small stdin), `sharedmap` (a `MAP_SHARED` file in a scratch directory,
//! whose content is checked after each run) and `malloc` (600 operations).
//! Sizes are chosen so that N=1, a reset per load at 4 to 10 µs each in the
//! test profile, keeps every fixture within a few seconds; the sieve, with
//! 4.6M loads, takes most of the binary's time.
//!
//! Each run checks that the guest wrote exactly what qemu-riscv64 wrote
//! (fixtures/guests/expected), that every reset's completion ran once, that
//! no callback of a completed registration ran again, and that the counts
//! gathered by callbacks equal an uninstrumented run's instruction count
//! (for `fileio`, whose mkstemp reads the clock, the run's own count).
//!
//! Own harness (`harness = false`): each guest gets a fresh scratch
//! directory, its stdin from a file and /dev/null as stdout and stderr, and
//! a plugin captures its stdout writes from guest memory instead. Arguments
//! are substring filters on case names. Under valgrind:
//! `valgrind --error-exitcode=1 target/debug/deps/storm-<hash> n=7`.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tcgkit_linux_user::{GuestExit, Process, SyscallObserver};
use tcgkit_plugin_api::plugins::howvec::InsnClass;
use tcgkit_plugin_api::plugins::insn::InsnCount;
use tcgkit_plugin_api::plugins::mem::MemCount;
use tcgkit_plugin_api::*;
use tcgkit_riscv::Rv64;

type Result<T = ()> = std::result::Result<T, String>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests")
}

/// Forwards linux-user's syscall hook on vCPU `.2` to the host, as the CLI
/// does, and counts the calls independently of any plugin.
struct Forward(PluginHost, Arc<AtomicU64>, u32);

impl SyscallObserver for Forward {
    fn on_syscall(&mut self, number: u64, args: &[u64; 6]) {
        self.1.fetch_add(1, Relaxed);
        self.0.on_syscall(self.2, number, args);
    }
    fn on_syscall_return(&mut self, number: u64, ret: u64) {
        self.0.on_syscall_return(self.2, number, ret);
    }
}

struct Outcome {
    exit: GuestExit,
    insns: u64,
    blocks: u64,
    syscalls: u64,
    /// Blocks planned with another engine's plan.
    adopted: u64,
}

/// A per-run scratch directory under the test target's temp dir, removed
/// when dropped (whatever the run's outcome).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Fixed widths: a file argument's length shifts the guest's stack,
        // and with it the instruction count, which must not vary by run.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "storm-{:010}-{:08}",
            std::process::id(),
            NEXT.fetch_add(1, Relaxed)
        ));
        // A leftover from a killed earlier run with the same pid goes first.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("scratch {}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Loads the guest while the host's descriptors 0, 1 and 2 are `stdin`,
/// /dev/null and /dev/null. The process duplicates them at load time, so
/// the guest keeps them while the harness gets its own back at once: the
/// guest's stdout is checked through the capture plugin instead.
fn load_with_stdio(
    path: &Path,
    argv: &[OsString],
    env: &[OsString],
    stdin: &File,
) -> Result<Process> {
    let null = File::options()
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("open /dev/null: {e}"))?;
    let saved = (
        rustix::io::dup(std::io::stdin().as_fd()).map_err(|e| format!("save stdin: {e}"))?,
        rustix::io::dup(std::io::stdout().as_fd()).map_err(|e| format!("save stdout: {e}"))?,
        rustix::io::dup(std::io::stderr().as_fd()).map_err(|e| format!("save stderr: {e}"))?,
    );
    let redirected = rustix::stdio::dup2_stdin(stdin)
        .and_then(|()| rustix::stdio::dup2_stdout(&null))
        .and_then(|()| rustix::stdio::dup2_stderr(&null));
    let process = redirected
        .map_err(|e| format!("redirect guest stdio: {e}"))
        .and_then(|()| {
            Process::load(path, argv, env).map_err(|e| format!("load {}: {e}", path.display()))
        });
    // Restore all three even if something failed above.
    let restored = rustix::stdio::dup2_stdin(&saved.0)
        .and_then(|()| rustix::stdio::dup2_stdout(&saved.1))
        .and_then(|()| rustix::stdio::dup2_stderr(&saved.2));
    restored.map_err(|e| format!("restore stdio: {e}"))?;
    process
}

/// A fixture's process, loaded and not run yet.
struct Loaded {
    process: Process,
    path: PathBuf,
    /// The file argument, if the fixture takes one.
    file: PathBuf,
    _scratch: Scratch,
}

/// Loads fixture `f` as its differential case does (same argv,
/// environment and stdin; a file argument in a fresh scratch directory).
/// Not from several threads at once: it swaps the host's stdio.
fn load(f: Fixture) -> Result<Loaded> {
    let path = fixtures().join(f.program);
    let scratch = Scratch::new()?;
    // argv[0] is the path, as qemu-riscv64 passes it (AT_EXECFN matches it).
    let mut argv = vec![path.clone().into_os_string()];
    argv.extend(f.args.iter().map(OsString::from));
    let file = scratch.0.join(f.program);
    if f.check_file.is_some() {
        argv.push(file.clone().into_os_string());
    }
    let env = [
        OsString::from("TCGKIT_FIXTURE=differential"),
        OsString::from("LC_ALL=C"),
    ];
    let stdin_path = scratch.0.join("stdin");
    std::fs::write(&stdin_path, (f.stdin)()).map_err(|e| format!("write stdin: {e}"))?;
    let stdin = File::open(&stdin_path).map_err(|e| format!("open stdin: {e}"))?;
    let process = load_with_stdio(&path, &argv, &env, &stdin)?;
    Ok(Loaded {
        process,
        path,
        file,
        _scratch: scratch,
    })
}

/// Runs fixture `f` (see [`load`]) instrumented with `host`, and checks
/// the files it leaves.
fn run(f: Fixture, host: Option<&PluginHost>) -> Result<Outcome> {
    let loaded = load(f)?;
    if let Some(host) = host {
        set_symbols(host, &loaded)?;
    }
    let outcome = run_loaded(f, loaded, host, 0)?;
    if let Some(host) = host {
        host.finish().map_err(|e| e.to_string())?;
    }
    Ok(outcome)
}

/// Gives `host` the symbols of the program `loaded` runs.
fn set_symbols(host: &PluginHost, loaded: &Loaded) -> Result {
    let elf = std::fs::read(&loaded.path).map_err(|e| e.to_string())?;
    host.set_symbols(SymbolTable::from_elf(&elf));
    Ok(())
}

/// Runs a loaded fixture on vCPU `vcpu` of `host`, one of the host's
/// engines; the caller gave the host its symbols and finishes it.
fn run_loaded(f: Fixture, loaded: Loaded, host: Option<&PluginHost>, vcpu: u32) -> Result<Outcome> {
    let Loaded {
        mut process,
        path: _,
        file,
        _scratch,
    } = loaded;
    let syscalls = Arc::new(AtomicU64::new(0));
    if let Some(host) = host {
        process.engine_mut().set_vcpu_index(vcpu);
        host.attach(process.engine_mut());
        process.set_syscall_observer(Box::new(Forward(host.clone(), syscalls.clone(), vcpu)));
        host.vcpu_init(vcpu);
    }
    let exit = process.run();
    if let Some(host) = host {
        host.vcpu_exit(vcpu);
    }
    let stats = process.engine().stats();
    // The process writes its shared mappings back when it ends, but owns
    // the descriptors until dropped.
    drop(process);
    if let Some(check) = f.check_file {
        let written = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        check(&written).map_err(|e| format!("file left by {}: {e}", f.program))?;
    }
    Ok(Outcome {
        exit,
        insns: stats.insns_executed,
        blocks: stats.blocks_executed,
        syscalls: syscalls.load(Relaxed),
        adopted: stats.plans_adopted,
    })
}

/// Captures what the guest writes to stdout, reading the buffers of its
/// `write`/`writev` calls from guest memory in a callback on `ecall`.
#[derive(Default)]
struct Capture {
    stdout: Mutex<Vec<u8>>,
    errors: Mutex<Vec<String>>,
}

impl Capture {
    fn grab(&self, ctx: &mut ExecContext<'_, '_>) -> std::result::Result<(), PluginError> {
        let (nr, fd) = (ctx.read_register("a7")?, ctx.read_register("a0")?);
        let (a1, a2) = (ctx.read_register("a1")?, ctx.read_register("a2")?);
        // Descriptor 1 is open from the start, so another file can only get
        // its number after a close/dup3 onto it: refuse to guess then.
        let replaces_stdout = match nr {
            57 => fd == 1,             // close
            24 => a1 == 1,             // dup3
            436 => fd <= 1 && 1 <= a1, // close_range
            _ => false,
        };
        if replaces_stdout {
            self.errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!(
                    "syscall {nr} replaces descriptor 1: stdout is no longer captured"
                ));
            return Ok(());
        }
        // Writes to any other descriptor (files, pipes, stderr) are not stdout.
        if fd != 1 {
            return Ok(());
        }
        let mut pieces = Vec::new();
        match nr {
            64 => pieces.push((a1, a2)),
            66 => {
                for i in 0..a2.min(1024) {
                    let mut iov = [0u8; 16];
                    ctx.read_memory(a1 + 16 * i, &mut iov)?;
                    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                    pieces.push((word(&iov[..8]), word(&iov[8..])));
                }
            }
            _ => return Ok(()),
        }
        for (addr, len) in pieces {
            let mut buf = vec![0u8; len.min(1 << 24) as usize];
            ctx.read_memory(addr, &mut buf)?;
            self.stdout
                .lock()
                .map_err(|_| PluginError::RegistersUnavailable)?
                .extend_from_slice(&buf);
        }
        Ok(())
    }
}

impl Plugin for Capture {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> std::result::Result<(), PluginError> {
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                if insn.raw() == 0x0000_0073 {
                    let me = Arc::clone(&self);
                    insn.on_exec(Access::REGISTERS | Access::MEMORY, move |ctx| {
                        if let Err(e) = me.grab(ctx) {
                            me.errors
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(e.to_string());
                        }
                    });
                }
            }
        });
        Ok(())
    }
}

/// The seed scenario's plugin: counts instructions and loads, and from the
/// instruction callback of every `every`-th load calls `reset`,
/// re-registering in the completion. Every callback carries the epoch of
/// its registration; one running after its epoch's completion is a
/// violation.
struct Storm {
    every: u64,
    /// Only loads on this vCPU count towards the N-th (any vCPU's if None).
    resetter: Option<u32>,
    resetter_loads: AtomicU64,
    epoch: AtomicU64,
    insns: AtomicU64,
    load_insns: AtomicU64,
    load_accesses: AtomicU64,
    /// Reads by any instruction (atomics included), as the `mem` plugin counts.
    reads: AtomicU64,
    resets: AtomicU64,
    completions: AtomicU64,
    violations: AtomicU64,
    /// Set while a reset is requested and its completion has not run.
    pending: AtomicBool,
    handle: Mutex<Option<PluginHandle>>,
}

impl Storm {
    fn new(every: u64) -> Arc<Self> {
        Self::resetting_on(every, None)
    }

    fn resetting_on(every: u64, resetter: Option<u32>) -> Arc<Self> {
        Arc::new(Storm {
            every,
            resetter,
            resetter_loads: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            insns: AtomicU64::new(0),
            load_insns: AtomicU64::new(0),
            load_accesses: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            violations: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            handle: Mutex::new(None),
        })
    }

    /// Resets the plugin; the completion counts, moves to the next epoch
    /// and registers again.
    fn reset(self: &Arc<Self>, h: &PluginHandle) -> std::result::Result<(), PluginError> {
        let me = Arc::clone(self);
        h.reset(move |h| {
            me.completions.fetch_add(1, Relaxed);
            me.epoch.fetch_add(1, Relaxed);
            me.pending.store(false, Relaxed);
            me.register(h);
        })
    }

    fn check(&self, epoch: u64) {
        if self.epoch.load(Relaxed) != epoch {
            self.violations.fetch_add(1, Relaxed);
        }
    }

    fn register(self: &Arc<Self>, handle: &PluginHandle) {
        let epoch = self.epoch.load(Relaxed);
        let me = Arc::clone(self);
        let h = handle.clone();
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                let m = Arc::clone(&me);
                insn.on_exec(Access::NONE, move |_| {
                    m.check(epoch);
                    m.insns.fetch_add(1, Relaxed);
                });
                let m = Arc::clone(&me);
                insn.on_mem(MemFilter::Reads, Access::NONE, move |_, _| {
                    m.check(epoch);
                    m.reads.fetch_add(1, Relaxed);
                });
                if !matches!(
                    InsnClass::of_riscv(insn.raw()),
                    InsnClass::Load | InsnClass::FpLoad
                ) {
                    continue;
                }
                let (m, h) = (Arc::clone(&me), h.clone());
                insn.on_exec(Access::NONE, move |ctx| {
                    m.check(epoch);
                    m.load_insns.fetch_add(1, Relaxed);
                    if m.resetter.is_some_and(|v| v != ctx.vcpu()) {
                        return;
                    }
                    let n = m.resetter_loads.fetch_add(1, Relaxed) + 1;
                    if n % m.every == 0 && !m.pending.swap(true, Relaxed) {
                        m.resets.fetch_add(1, Relaxed);
                        if m.reset(&h).is_err() {
                            m.violations.fetch_add(1, Relaxed);
                        }
                    }
                });
                let m = Arc::clone(&me);
                insn.on_mem(MemFilter::Reads, Access::NONE, move |_, _| {
                    m.check(epoch);
                    m.load_accesses.fetch_add(1, Relaxed);
                });
            }
        });
    }
}

impl Plugin for Storm {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> std::result::Result<(), PluginError> {
        *self.handle.lock().map_err(|_| PluginError::NotInstalled {
            plugin: "storm".into(),
        })? = Some(handle.clone());
        self.register(handle);
        Ok(())
    }
}

/// Counts instructions and uninstalls itself after `quota` of them.
struct Quitter {
    quota: u64,
    insns: AtomicU64,
    completions: AtomicU64,
    atexit: AtomicU64,
}

impl Plugin for Quitter {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> std::result::Result<(), PluginError> {
        let (me, h) = (Arc::clone(&self), handle.clone());
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                let (m, h) = (Arc::clone(&me), h.clone());
                insn.on_exec(Access::NONE, move |_| {
                    if m.insns.fetch_add(1, Relaxed) + 1 == m.quota {
                        let m2 = Arc::clone(&m);
                        let _ = h.uninstall(move || {
                            m2.completions.fetch_add(1, Relaxed);
                        });
                    }
                });
            }
        });
        handle.on_atexit(move || {
            self.atexit.fetch_add(1, Relaxed);
        });
        Ok(())
    }
}

/// Panics in a memory callback after `after` accesses.
struct Faulty {
    after: u64,
    accesses: AtomicU64,
    atexit: AtomicU64,
}

impl Plugin for Faulty {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> std::result::Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                let m = Arc::clone(&me);
                insn.on_mem(MemFilter::All, Access::NONE, move |_, _| {
                    if m.accesses.fetch_add(1, Relaxed) + 1 == m.after {
                        panic!("faulty plugin gives up");
                    }
                });
            }
        });
        handle.on_atexit(move || {
            self.atexit.fetch_add(1, Relaxed);
        });
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct Fixture {
    /// How case names call it (what the filters match).
    name: &'static str,
    /// The program in fixtures/guests.
    program: &'static str,
    /// Its differential case: the expected stdout and status.
    case: &'static str,
    args: &'static [&'static str],
    stdin: fn() -> Vec<u8>,
    /// Set for a program whose last argument is a file to create: a path
    /// in the run's scratch directory is appended, and this checks what
    /// the file holds after the run.
    check_file: Option<fn(&[u8]) -> Result>,
    /// The N of the crowd cases (the crowd costs about three storms).
    crowd: &'static [u64],
    /// Whether to run every bundled plugin over it too.
    bundled: bool,
    /// The N of the threaded cases ([`THREADS`] processes at once, each
    /// reset a rendezvous of them all).
    threads: &'static [u64],
    /// Whether every run executes exactly as many instructions (see
    /// [`executed`]).
    exact: bool,
}

impl Fixture {
    /// A fixture with no stdin and no file, and every case.
    const fn new(name: &'static str, case: &'static str, args: &'static [&'static str]) -> Self {
        Fixture {
            name,
            program: name,
            case,
            args,
            stdin: Vec::new,
            check_file: None,
            crowd: &[7, 1000],
            bundled: true,
            threads: &[1, 7, 1000],
            exact: true,
        }
    }
}

// Sizes: N=1 makes every load a reset (the blocks are instrumented again),
// 4 to 10 µs each in the test profile, so a fixture costs about a second
// per 100k to 250k loads at N=1; the arguments below keep each fixture
// within a few seconds, the sieve being the largest.
const FIXTURES: &[Fixture] = &[
    // The smaller sieve (argument 5000) still runs 23M instructions, the
    // qsort and CRC being fixed: N=1 takes most of the binary's time, and
    // the crowd at N=7 (half a minute) and the bundled plugins are left out.
    Fixture {
        crowd: &[1000],
        bundled: false,
        // 4.6M rendezvous of four threads at N=1 take 40 s.
        threads: &[1000],
        ..Fixture::new("integer", "integer_with_argument", &["5000"])
    },
    Fixture::new("float", "float", &[]),
    Fixture::new("syscalls", "syscalls", &[]),
    // Loads that fault, a misaligned AMO, ebreak, abort() and plain exits.
    Fixture::new("faults", "fault_segv", &["segv"]),
    Fixture {
        name: "faults-ill",
        ..Fixture::new("faults", "fault_illegal_instruction", &["ill"])
    },
    Fixture {
        name: "faults-ebreak",
        ..Fixture::new("faults", "fault_ebreak", &["ebreak"])
    },
    Fixture {
        name: "faults-abort",
        ..Fixture::new("faults", "fault_abort", &["abort"])
    },
    Fixture {
        name: "faults-amo",
        ..Fixture::new("faults", "fault_misaligned_atomic", &["misaligned-amo"])
    },
    Fixture {
        name: "faults-exit",
        ..Fixture::new("faults", "exit_status_1", &["exit=7"])
    },
    // Handlers entered from raise/kill, from a faulting store and from an
    // illegal instruction, left by sigreturn and siglongjmp; ends by SIGUSR1.
    Fixture::new("signals", "signal_handlers", &[]),
    // 20 kB of stdin read in 4 kB pieces, and a temp file in /tmp that the
    // guest creates and removes itself (its writes are not stdout). The
    // differential 150 kB case would take 10 s at N=1; this smaller one was
    // recorded with `env -i TCGKIT_FIXTURE=differential LC_ALL=C
    // qemu-riscv64 fixtures/guests/fileio 20k < stdin` (stdin as below).
    // mkstemp draws the name from the host's clock and draws again when a
    // draw would bias it: a run now and then executes a few dozen more
    // instructions, so the callbacks are checked against the run's own count.
    Fixture {
        stdin: stdin_20k,
        exact: false,
        ..Fixture::new("fileio", "storm_fileio_20k_stdin", &["20k"])
    },
    Fixture {
        name: "fileio-args",
        stdin: small_stdin,
        exact: false,
        ..Fixture::new(
            "fileio",
            "fileio_with_arguments_stdin_and_env",
            &["-x", "a b", "", "--strace", "\u{e9}t\u{e9}"],
        )
    },
    // A MAP_SHARED file mapping in the run's scratch directory, checked
    // after the run: stores and resets must not lose the write-back.
    Fixture {
        check_file: Some(check_shared_file),
        ..Fixture::new("sharedmap", "shared_file_mapping", &[])
    },
    // 600 operations instead of 60000 (malloc.c's argument): 2.2M
    // instructions instead of 200M and 350k loads, about 2 s at N=1; the
    // crowd runs at N=1000 only.
    // Recorded with `env -i TCGKIT_FIXTURE=differential LC_ALL=C
    // qemu-riscv64 fixtures/guests/malloc 600 < /dev/null`.
    Fixture {
        crowd: &[1000],
        ..Fixture::new("malloc", "storm_malloc_small", &["600"])
    },
];

/// The stdin of `fileio_with_arguments_stdin_and_env` (run_differential.rs).
fn small_stdin() -> Vec<u8> {
    b"The quick brown fox\njumps over\tthe lazy dog\n\nA second paragraph, with punctuation!\n"
        .to_vec()
}

/// The text of `fileio_large_stdin` (run_differential.rs), cut to 20 kB:
/// several reads of 4096 bytes, a partial last one, and every letter.
fn stdin_20k() -> Vec<u8> {
    (0..20_000u32)
        .map(|i| match i % 61 {
            0 => b'\n',
            n if n % 7 == 0 => b' ',
            n => b'a' + ((i / 61 + n) % 26) as u8,
        })
        .collect()
}

/// What sharedmap.c leaves in its file: three pages, "Via pwrite" at 0 (the
/// store of 'V' written back by munmap), the string stored through the
/// mapping in page 1, and the one stored just before `_exit` (written back
/// at exit); page 2 was truncated away and regrown, so it is zero.
fn check_shared_file(file: &[u8]) -> Result {
    const PAGE: usize = 4096;
    let mut want = vec![0u8; 3 * PAGE];
    for (at, text) in [
        (0, &b"Via pwrite"[..]),
        (PAGE, b"through the mapping"),
        (PAGE + 32, b"stored before exit"),
    ] {
        want[at..at + text.len()].copy_from_slice(text);
    }
    ensure(file == want, || {
        let first = file.iter().zip(&want).position(|(a, b)| a != b);
        format!(
            "{} bytes (want {}), first difference at {first:?}",
            file.len(),
            want.len()
        )
    })
}

fn expected(case: &str) -> Result<(Vec<u8>, String)> {
    let dir = fixtures().join("expected");
    let stdout = std::fs::read(dir.join(format!("{case}.stdout")))
        .map_err(|e| format!("{case}.stdout: {e}"))?;
    let status =
        std::fs::read_to_string(dir.join(format!("{case}.status"))).map_err(|e| e.to_string())?;
    Ok((stdout, status.trim().to_owned()))
}

fn status_text(exit: GuestExit) -> String {
    match exit {
        GuestExit::Exited(code) => format!("exit {code}"),
        GuestExit::Signaled(sig) => format!("signal {}", sig.number()),
    }
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result {
    if cond { Ok(()) } else { Err(what()) }
}

/// Installs the capture plugin and checks the run's output and status.
fn check_output(f: Fixture, capture: &Capture, exit: GuestExit) -> Result {
    let (stdout, status) = expected(f.case)?;
    ensure(status_text(exit) == status, || {
        format!("status {} != expected {status}", status_text(exit))
    })?;
    let errors = capture.errors.lock().map_err(|_| "poisoned")?.clone();
    ensure(errors.is_empty(), || format!("capture errors: {errors:?}"))?;
    let got = capture.stdout.lock().map_err(|_| "poisoned")?.clone();
    ensure(got == stdout, || {
        format!(
            "guest stdout differs ({} bytes, expected {}):\n{}",
            got.len(),
            stdout.len(),
            String::from_utf8_lossy(&got)
        )
    })
}

fn host() -> PluginHost {
    PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()))
}

fn inline_insn(host: &PluginHost) -> Result<Arc<InsnCount>> {
    let p = Arc::new(
        InsnCount::from_args(&PluginArgs::new("insn", [("inline", "on")]), host.guest())
            .map_err(|e| e.to_string())?,
    );
    host.install("insn", p.clone()).map_err(|e| e.to_string())?;
    Ok(p)
}

/// The seed scenario alone (plus the capture plugin), on one fixture.
fn storm_alone(f: Fixture, every: u64, baseline: u64) -> Result<String> {
    let host = host();
    let capture = Arc::new(Capture::default());
    host.install("capture", capture.clone())
        .map_err(|e| e.to_string())?;
    let storm = Storm::new(every);
    host.install("storm", storm.clone())
        .map_err(|e| e.to_string())?;
    let out = run(f, Some(&host))?;
    check_output(f, &capture, out.exit)?;
    let baseline = executed(f, baseline, &out)?;
    check_storm(&storm, baseline, 1)?;
    Ok(format!("{} resets", storm.resets.load(Relaxed)))
}

/// Guest processes at once, one per host thread, each on an engine of its
/// own attached to one host as vCPUs 0 to 3.
const THREADS: u32 = 4;

/// The seed scenario across threads: the fixture runs on [`THREADS`] host
/// threads at once, each its own engine (vCPU 0 to 3) under one host; the
/// storm resets from the instruction callback of every N-th load of vCPU
/// 0, while the other vCPUs run loads with live memory callbacks. Every
/// reset must wait for all of them: the counts stay exact, and no callback
/// runs after its registration's completion on any thread. The engines
/// share translations, as a guest's threads' engines do (the same program
/// at the same addresses): each block is planned by one of them and taken
/// by the others, also after each reset, so no engine may take a plan of
/// the registrations a reset retired.
fn storm_threads(f: Fixture, every: u64, baseline: u64) -> Result<String> {
    let host = PluginHost::new(
        GuestInfo::user("riscv64", THREADS),
        Box::new(std::io::sink()),
    );
    let storm = Storm::resetting_on(every, Some(0));
    host.install("storm", storm.clone())
        .map_err(|e| e.to_string())?;
    let mut loaded = (0..THREADS).map(|_| load(f)).collect::<Result<Vec<_>>>()?;
    if let Some((first, others)) = loaded.split_first_mut() {
        // Once for all: new symbols would change the plan stamp.
        set_symbols(&host, first)?;
        for other in others {
            let engine = other.process.engine_mut();
            engine.share_translations(first.process.engine_mut());
        }
    }
    let outcomes = std::thread::scope(|scope| {
        let threads: Vec<_> = loaded
            .into_iter()
            .zip(0..)
            .map(|(loaded, vcpu)| {
                let host = &host;
                scope.spawn(move || run_loaded(f, loaded, Some(host), vcpu))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().map_err(|_| "a guest thread panicked".to_owned())?)
            .collect::<Result<Vec<_>>>()
    })?;
    host.finish().map_err(|e| e.to_string())?;
    let status = expected(f.case)?.1;
    let mut executed_all = 0;
    for out in &outcomes {
        ensure(status_text(out.exit) == status, || {
            format!("status {} != expected {status}", status_text(out.exit))
        })?;
        executed_all += executed(f, baseline, out)?;
    }
    check_storm(&storm, executed_all, THREADS as u64)?;
    let adopted: u64 = outcomes.iter().map(|o| o.adopted).sum();
    ensure(adopted > 0, || "no engine took another's plan".into())?;
    Ok(format!(
        "{} resets, {adopted} plans taken",
        storm.resets.load(Relaxed)
    ))
}

/// How far a run of a fixture that is not `exact` may stray from the
/// uninstrumented one: a few retried draws of a temp file name.
const INEXACT_SLACK: u64 = 1000;

/// The instruction count the callbacks of run `out` must add up to. It is
/// the uninstrumented run's, which the instrumented run must match, or
/// for a fixture that is not `exact`, the run's own (near the other).
fn executed(f: Fixture, baseline: u64, out: &Outcome) -> Result<u64> {
    ensure(same_run_count(f, out.insns, baseline), || {
        format!(
            "engine executed {} insns, uninstrumented {baseline}",
            out.insns
        )
    })?;
    Ok(out.insns)
}

/// Whether two runs of `f` counted alike: equal, or for a fixture that is
/// not `exact`, within its slack (a retried draw also loads and stores).
fn same_run_count(f: Fixture, a: u64, b: u64) -> bool {
    if f.exact {
        a == b
    } else {
        a.abs_diff(b) <= INEXACT_SLACK
    }
}

/// What the storm saw over `processes` runs that executed `baseline`
/// instructions in all.
fn check_storm(storm: &Storm, baseline: u64, processes: u64) -> Result {
    let (resets, completions) = (storm.resets.load(Relaxed), storm.completions.load(Relaxed));
    let (insns, loads, accesses) = (
        storm.insns.load(Relaxed),
        storm.load_insns.load(Relaxed),
        storm.load_accesses.load(Relaxed),
    );
    let resetter_loads = storm.resetter_loads.load(Relaxed);
    ensure(storm.violations.load(Relaxed) == 0, || {
        format!(
            "{} callbacks ran after their registration's completion",
            storm.violations.load(Relaxed)
        )
    })?;
    ensure(resets == completions, || {
        format!("{resets} resets but {completions} completions")
    })?;
    ensure(resets == resetter_loads / storm.every, || {
        format!(
            "{resets} resets for {resetter_loads} loads at N={}",
            storm.every
        )
    })?;
    ensure(resets > 0 || resetter_loads < storm.every, || {
        "no reset happened".into()
    })?;
    ensure(insns == baseline, || {
        format!("storm counted {insns} insns, uninstrumented run executed {baseline}")
    })?;
    // Each load's memory callback still ran after a reset requested in its
    // instruction callback (a faulting load, one per process, has none).
    ensure(accesses <= loads && loads - accesses <= processes, || {
        format!("{loads} load insns but {accesses} load accesses")
    })
}

/// Several plugins at once: the storm, two counters, a mem counter, one
/// that uninstalls itself mid-run and one that panics mid-run.
fn storm_crowd(f: Fixture, every: u64, baseline: u64) -> Result<String> {
    let host = host();
    let capture = Arc::new(Capture::default());
    host.install("capture", capture.clone())
        .map_err(|e| e.to_string())?;
    let counter = inline_insn(&host)?;
    let storm = Storm::new(every);
    host.install("storm", storm.clone())
        .map_err(|e| e.to_string())?;
    let mem = Arc::new(
        MemCount::from_args(&PluginArgs::default(), host.guest()).map_err(|e| e.to_string())?,
    );
    host.install("mem", mem.clone())
        .map_err(|e| e.to_string())?;
    let quitter = Arc::new(Quitter {
        quota: baseline / 3,
        insns: AtomicU64::new(0),
        completions: AtomicU64::new(0),
        atexit: AtomicU64::new(0),
    });
    host.install("quitter", quitter.clone())
        .map_err(|e| e.to_string())?;
    let faulty = Arc::new(Faulty {
        after: 500,
        accesses: AtomicU64::new(0),
        atexit: AtomicU64::new(0),
    });
    host.install("faulty", faulty.clone())
        .map_err(|e| e.to_string())?;
    let second = Storm::new(every * 3 + 1);
    host.install("storm2", second.clone())
        .map_err(|e| e.to_string())?;

    let out = run(f, Some(&host))?;
    check_output(f, &capture, out.exit)?;
    let baseline = executed(f, baseline, &out)?;
    check_storm(&storm, baseline, 1)?;
    check_storm(&second, baseline, 1)?;
    ensure(counter.total() == baseline, || {
        format!(
            "insn plugin counted {}, expected {baseline}",
            counter.total()
        )
    })?;
    ensure(mem.loads() == storm.reads.load(Relaxed), || {
        format!(
            "mem plugin saw {} loads, storm {}",
            mem.loads(),
            storm.reads.load(Relaxed)
        )
    })?;
    let q = quitter.insns.load(Relaxed);
    ensure(q == quitter.quota, || {
        format!("quitter counted {q} insns, quota {}", quitter.quota)
    })?;
    ensure(quitter.completions.load(Relaxed) == 1, || {
        "quitter's completion did not run exactly once".into()
    })?;
    ensure(quitter.atexit.load(Relaxed) == 0, || {
        "an uninstalled plugin's atexit ran".into()
    })?;
    ensure(faulty.accesses.load(Relaxed) == faulty.after, || {
        format!(
            "faulty plugin ran {} times after failing",
            faulty.accesses.load(Relaxed) - faulty.after
        )
    })?;
    ensure(faulty.atexit.load(Relaxed) == 1, || {
        "the failed plugin's atexit did not run once".into()
    })?;
    let failures = host.failures();
    ensure(
        failures.len() == 1 && failures[0].contains("faulty") && failures[0].contains("gives up"),
        || format!("failures: {failures:?}"),
    )?;
    let names: Vec<String> = host.installed().into_iter().map(|(_, n)| n).collect();
    ensure(
        names == ["capture", "insn", "storm", "mem", "storm2"],
        || format!("installed at the end: {names:?}"),
    )?;
    Ok(format!(
        "{} + {} resets",
        storm.resets.load(Relaxed),
        second.resets.load(Relaxed)
    ))
}

/// Every bundled plugin over a real guest, cross-checked against the
/// engine, an independent syscall count, and each other.
fn bundled(f: Fixture, baseline: u64) -> Result<String> {
    use tcgkit_plugin_api::plugins::{
        bb::BlockCount, cache::CacheSim, hotblocks::HotBlocks, howvec::HowVec,
        syscall::SyscallCount,
    };
    let host = host();
    let capture = Arc::new(Capture::default());
    host.install("capture", capture.clone())
        .map_err(|e| e.to_string())?;
    let e = |e: PluginError| e.to_string();
    let g = host.guest().clone();
    let none = |name: &str| PluginArgs::new(name, Vec::<(String, String)>::new());
    let insn = Arc::new(InsnCount::from_args(&none("insn"), &g).map_err(e)?);
    let mem = Arc::new(MemCount::from_args(&none("mem"), &g).map_err(e)?);
    let inline_args = PluginArgs::new("mem", [("inline", "on")]);
    let mem_inline = Arc::new(MemCount::from_args(&inline_args, &g).map_err(e)?);
    let bb = Arc::new(BlockCount::from_args(&none("bb"), &g).map_err(e)?);
    let hot = Arc::new(HotBlocks::from_args(&none("hotblocks"), &g).map_err(e)?);
    let how = Arc::new(HowVec::from_args(&none("howvec"), &g).map_err(e)?);
    let sys = Arc::new(SyscallCount::from_args(&none("syscall")).map_err(e)?);
    let cache = Arc::new(CacheSim::from_args(&none("cache"), &g).map_err(e)?);
    host.install("insn", insn.clone()).map_err(e)?;
    host.install("mem", mem.clone()).map_err(e)?;
    host.install("mem", mem_inline.clone()).map_err(e)?;
    host.install("bb", bb.clone()).map_err(e)?;
    host.install("hotblocks", hot.clone()).map_err(e)?;
    host.install("howvec", how.clone()).map_err(e)?;
    host.install("syscall", sys.clone()).map_err(e)?;
    host.install("cache", cache.clone()).map_err(e)?;
    let out = run(f, Some(&host))?;
    check_output(f, &capture, out.exit)?;
    let baseline = executed(f, baseline, &out)?;
    ensure(insn.total() == baseline, || {
        format!("insn {} != {baseline}", insn.total())
    })?;
    let (loads, stores) = (mem.loads(), mem.stores());
    ensure(
        (loads, stores) == (mem_inline.loads(), mem_inline.stores()),
        || {
            format!(
                "mem by callback {loads}/{stores}, inline {}/{}",
                mem_inline.loads(),
                mem_inline.stores()
            )
        },
    )?;
    ensure(bb.blocks() == out.blocks, || {
        format!("bb {} blocks, engine {}", bb.blocks(), out.blocks)
    })?;
    // A block counts all its instructions on entry: only a faulting block
    // is counted past where it stopped.
    ensure(
        bb.insns() >= baseline && bb.insns() - baseline < 512,
        || format!("bb insns {} vs {baseline}", bb.insns()),
    )?;
    let blocks = hot.blocks();
    let hot_execs: u64 = blocks.iter().map(|b| b.executions).sum();
    let hot_insns: u64 = blocks.iter().map(|b| b.executions * b.insns).sum();
    ensure(hot_execs == bb.blocks() && hot_insns == bb.insns(), || {
        format!(
            "hotblocks {hot_execs}/{hot_insns} vs bb {}/{}",
            bb.blocks(),
            bb.insns()
        )
    })?;
    let how_total: u64 = how.histogram().iter().map(|h| h.1).sum();
    ensure(how_total == baseline, || {
        format!("howvec total {how_total} != {baseline}")
    })?;
    let calls: u64 = sys.stats().values().map(|s| s.calls).sum();
    ensure(calls == out.syscalls, || {
        format!("syscall plugin {calls}, observed {}", out.syscalls)
    })?;
    let t = cache.totals();
    ensure(t.insn_accesses == baseline, || {
        format!("cache fetched {} insns", t.insn_accesses)
    })?;
    ensure(t.data_accesses == loads + stores, || {
        format!("cache {} data accesses", t.data_accesses)
    })?;
    ensure(t.data_misses > 0 && t.data_misses < t.data_accesses, || {
        format!("{t:?}")
    })?;
    // `insn` alone, built for the engine's frontend: its callback is
    // compiled into the engine's loop, over the same guest (its faults and
    // signals included).
    let inlined = InsnCount::from_args(&none("insn"), &g).map_err(e)?;
    let inlined = Arc::new(inlined.inlined_for::<Rv64>());
    let out = run_alone(f, "insn", inlined.clone())?;
    let inlined_baseline = executed(f, baseline, &out)?;
    ensure(inlined.total() == inlined_baseline, || {
        format!("inlined insn {} != {inlined_baseline}", inlined.total())
    })?;
    // `mem` alone, built for the frontend: the same loads and stores as
    // above (near them for a fixture that is not `exact`).
    let inlined = MemCount::from_args(&none("mem"), &g).map_err(e)?;
    let inlined = Arc::new(inlined.inlined_for::<Rv64>());
    run_alone(f, "mem", inlined.clone())?;
    ensure(
        same_run_count(f, inlined.loads(), loads) && same_run_count(f, inlined.stores(), stores),
        || {
            format!(
                "inlined mem {}/{}, by callback {loads}/{stores}",
                inlined.loads(),
                inlined.stores()
            )
        },
    )?;
    Ok(format!(
        "{loads} loads, {stores} stores, {calls} syscalls, {} dmisses",
        t.data_misses
    ))
}

/// Runs `f` with `plugin` as the only plugin besides the output capture,
/// and checks the guest's output.
fn run_alone(f: Fixture, name: &str, plugin: Arc<dyn Plugin>) -> Result<Outcome> {
    let host = host();
    let capture = Arc::new(Capture::default());
    host.install("capture", capture.clone())
        .map_err(|e| e.to_string())?;
    host.install(name, plugin).map_err(|e| e.to_string())?;
    let out = run(f, Some(&host))?;
    check_output(f, &capture, out.exit)?;
    Ok(out)
}

/// Resets requested from another thread at arbitrary moments while the
/// guest runs: the target still sees every instruction exactly once.
fn foreign_thread_resets(f: Fixture, baseline: u64) -> Result<String> {
    let host = host();
    let capture = Arc::new(Capture::default());
    host.install("capture", capture.clone())
        .map_err(|e| e.to_string())?;
    let counter = inline_insn(&host)?;
    let target = Storm::new(u64::MAX);
    host.install("target", target.clone())
        .map_err(|e| e.to_string())?;
    let handle = target
        .handle
        .lock()
        .map_err(|_| "poisoned")?
        .clone()
        .ok_or("no handle")?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (stop, target) = (stop.clone(), target.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                // One reset at a time, as the plugin re-registers in each completion.
                if !target.pending.swap(true, Relaxed) {
                    target.resets.fetch_add(1, Relaxed);
                    if target.reset(&handle).is_err() {
                        target.violations.fetch_add(1, Relaxed);
                    }
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        })
    };
    let out = run(f, Some(&host));
    stop.store(true, Relaxed);
    thread.join().map_err(|_| "reset thread panicked")?;
    let out = out?;
    // Resets requested after the run ended complete in a final finish.
    host.finish().map_err(|e| e.to_string())?;
    check_output(f, &capture, out.exit)?;
    let baseline = executed(f, baseline, &out)?;
    ensure(counter.total() == baseline, || {
        format!(
            "insn plugin counted {}, expected {baseline}",
            counter.total()
        )
    })?;
    let (r, d) = (
        target.resets.load(Relaxed),
        target.completions.load(Relaxed),
    );
    ensure(r == d, || format!("{r} resets requested, {d} completions"))?;
    ensure(target.violations.load(Relaxed) == 0, || {
        "a callback ran after its completion".into()
    })?;
    let seen = target.insns.load(Relaxed);
    ensure(seen == baseline, || {
        format!("target counted {seen} insns across {r} foreign resets, expected {baseline}")
    })?;
    Ok(format!("{r} foreign resets"))
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let selected =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    // The faulty plugin's panic is expected: keep the log to one line for it.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info
            .payload()
            .downcast_ref::<&str>()
            .is_some_and(|m| m.contains("faulty plugin gives up"))
        {
            return;
        }
        default_hook(info);
    }));
    let mut failed = 0;
    let mut passed = 0;
    for &f in FIXTURES {
        type Case = Box<dyn Fn(u64) -> Result<String>>;
        let mut cases: Vec<(String, Case)> = Vec::new();
        for every in [1u64, 7, 1000] {
            cases.push((
                format!("storm {} n={every}", f.name),
                Box::new(move |b| storm_alone(f, every, b)),
            ));
        }
        for &every in f.crowd {
            cases.push((
                format!("crowd {} n={every}", f.name),
                Box::new(move |b| storm_crowd(f, every, b)),
            ));
        }
        for &every in f.threads {
            cases.push((
                format!("threads {} n={every}", f.name),
                Box::new(move |b| storm_threads(f, every, b)),
            ));
        }
        cases.push((
            format!("foreign {}", f.name),
            Box::new(move |b| foreign_thread_resets(f, b)),
        ));
        if f.bundled {
            cases.push((
                format!("bundled {}", f.name),
                Box::new(move |b| bundled(f, b)),
            ));
        }
        cases.retain(|(name, _)| selected(name));
        if cases.is_empty() {
            continue;
        }
        // The uninstrumented reference: two plain runs must agree, and end
        // as qemu-riscv64's did.
        let plain = (|| -> Result<u64> {
            let a = run(f, None)?;
            let b = run(f, None)?;
            executed(f, a.insns, &b).map_err(|e| format!("not deterministic: {e}"))?;
            let status = expected(f.case)?.1;
            ensure(status_text(a.exit) == status, || {
                format!("status {} != expected {status}", status_text(a.exit))
            })?;
            Ok(a.insns)
        })();
        let baseline = match plain {
            Ok(n) => n,
            Err(e) => {
                eprintln!("{}: uninstrumented run FAILED: {e}", f.name);
                failed += 1;
                continue;
            }
        };
        for (name, case) in cases {
            let start = std::time::Instant::now();
            match case(baseline) {
                Ok(note) => {
                    passed += 1;
                    eprintln!(
                        "{name} ({baseline} insns): ok, {note}, {:.2?}",
                        start.elapsed()
                    );
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("{name}: FAILED: {e}");
                }
            }
        }
    }
    eprintln!("storm: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
