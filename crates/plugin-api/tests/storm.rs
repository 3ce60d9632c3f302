//! The seed scenario, proven: plugins that reset themselves from inside the
//! instruction callback of a load, every N-th load (N = 1, 7, 1000), over
//! the guest fixtures, alone and alongside other plugins (one uninstalling
//! itself mid-run, one panicking).
//!
//! Each run checks that the guest wrote exactly what qemu-riscv64 wrote
//! (fixtures/guests/expected), that every reset's completion ran once, that
//! no callback of a completed registration ran again, and that the counts
//! gathered by callbacks equal an uninstrumented run's instruction count.
//!
//! Own harness (`harness = false`): the guests' stdout goes to /dev/null
//! for the whole process, and a plugin captures their writes from guest
//! memory instead. Arguments are substring filters on case names. Under
//! valgrind: `valgrind --error-exitcode=1 target/debug/deps/storm-<hash> n=7`.

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

type Result<T = ()> = std::result::Result<T, String>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests")
}

/// Forwards linux-user's syscall hook to the host, as the CLI does, and
/// counts the calls independently of any plugin.
struct Forward(PluginHost, Arc<AtomicU64>);

impl SyscallObserver for Forward {
    fn on_syscall(&mut self, number: u64, args: &[u64; 6]) {
        self.1.fetch_add(1, Relaxed);
        self.0.on_syscall(0, number, args);
    }
    fn on_syscall_return(&mut self, number: u64, ret: u64) {
        self.0.on_syscall_return(0, number, ret);
    }
}

struct Outcome {
    exit: GuestExit,
    insns: u64,
    blocks: u64,
    syscalls: u64,
}

/// Runs `fixture` with `args` (argv[0] added); instruments it with `host`.
fn run(fixture: &str, args: &[&str], host: Option<&PluginHost>) -> Result<Outcome> {
    let path = fixtures().join(fixture);
    // argv[0] is the path, as qemu-riscv64 passes it (AT_EXECFN matches it).
    let mut argv = vec![path.clone().into_os_string()];
    argv.extend(args.iter().map(OsString::from));
    let env = [
        OsString::from("TCGKIT_FIXTURE=differential"),
        OsString::from("LC_ALL=C"),
    ];
    let mut process =
        Process::load(&path, &argv, &env).map_err(|e| format!("load {fixture}: {e}"))?;
    let syscalls = Arc::new(AtomicU64::new(0));
    if let Some(host) = host {
        let elf = std::fs::read(&path).map_err(|e| e.to_string())?;
        host.set_symbols(SymbolTable::from_elf(&elf));
        host.attach(process.engine_mut());
        process.set_syscall_observer(Box::new(Forward(host.clone(), syscalls.clone())));
        host.vcpu_init(0);
    }
    let exit = process.run();
    if let Some(host) = host {
        host.vcpu_exit(0);
        host.finish().map_err(|e| e.to_string())?;
    }
    let stats = process.engine().stats();
    Ok(Outcome {
        exit,
        insns: stats.insns_executed,
        blocks: stats.blocks_executed,
        syscalls: syscalls.load(Relaxed),
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
        if fd != 1 {
            return Ok(());
        }
        let (a1, a2) = (ctx.read_register("a1")?, ctx.read_register("a2")?);
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
        Arc::new(Storm {
            every,
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
                insn.on_exec(Access::NONE, move |_| {
                    m.check(epoch);
                    let n = m.load_insns.fetch_add(1, Relaxed) + 1;
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
    name: &'static str,
    case: &'static str,
    args: &'static [&'static str],
}

const FIXTURES: &[Fixture] = &[
    // The smaller sieve keeps N=1 (a reset per load) within seconds; `malloc`
    // (200M instructions) is left to the CLI's differential tests.
    Fixture {
        name: "integer",
        case: "integer_with_argument",
        args: &["5000"],
    },
    Fixture {
        name: "float",
        case: "float",
        args: &[],
    },
    Fixture {
        name: "syscalls",
        case: "syscalls",
        args: &[],
    },
    Fixture {
        name: "faults",
        case: "fault_segv",
        args: &["segv"],
    },
];

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
    let out = run(f.name, f.args, Some(&host))?;
    check_output(f, &capture, out.exit)?;
    check_storm(&storm, baseline)?;
    ensure(out.insns == baseline, || {
        format!(
            "engine executed {} insns, uninstrumented {baseline}",
            out.insns
        )
    })?;
    Ok(format!("{} resets", storm.resets.load(Relaxed)))
}

fn check_storm(storm: &Storm, baseline: u64) -> Result {
    let (resets, completions) = (storm.resets.load(Relaxed), storm.completions.load(Relaxed));
    let (insns, loads, accesses) = (
        storm.insns.load(Relaxed),
        storm.load_insns.load(Relaxed),
        storm.load_accesses.load(Relaxed),
    );
    ensure(storm.violations.load(Relaxed) == 0, || {
        format!(
            "{} callbacks ran after their registration's completion",
            storm.violations.load(Relaxed)
        )
    })?;
    ensure(resets == completions, || {
        format!("{resets} resets but {completions} completions")
    })?;
    ensure(resets == loads / storm.every, || {
        format!("{resets} resets for {loads} loads at N={}", storm.every)
    })?;
    ensure(resets > 0 || loads < storm.every, || {
        "no reset happened".into()
    })?;
    ensure(insns == baseline, || {
        format!("storm counted {insns} insns, uninstrumented run executed {baseline}")
    })?;
    // Each load's memory callback still ran after a reset requested in its
    // instruction callback (a faulting load has none).
    ensure(accesses <= loads && loads - accesses <= 1, || {
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

    let out = run(f.name, f.args, Some(&host))?;
    check_output(f, &capture, out.exit)?;
    check_storm(&storm, baseline)?;
    check_storm(&second, baseline)?;
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
    let out = run(f.name, f.args, Some(&host))?;
    check_output(f, &capture, out.exit)?;
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
    Ok(format!(
        "{loads} loads, {stores} stores, {calls} syscalls, {} dmisses",
        t.data_misses
    ))
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
    let out = run(f.name, f.args, Some(&host));
    stop.store(true, Relaxed);
    thread.join().map_err(|_| "reset thread panicked")?;
    let out = out?;
    // Resets requested after the run ended complete in a final finish.
    host.finish().map_err(|e| e.to_string())?;
    check_output(f, &capture, out.exit)?;
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
    // The guests' own stdout goes nowhere; the capture plugin checks it.
    let devnull = File::options()
        .write(true)
        .open("/dev/null")
        .expect("open /dev/null");
    let saved = rustix::io::dup(std::io::stdout().as_fd()).expect("dup stdout");
    rustix::stdio::dup2_stdout(&devnull).expect("redirect stdout");

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
        // The crowd at N=7 on the 23M-instruction sieve would take half a minute.
        let crowd: &[u64] = if f.name == "integer" {
            &[1000]
        } else {
            &[7, 1000]
        };
        for &every in crowd {
            cases.push((
                format!("crowd {} n={every}", f.name),
                Box::new(move |b| storm_crowd(f, every, b)),
            ));
        }
        cases.push((
            format!("foreign {}", f.name),
            Box::new(move |b| foreign_thread_resets(f, b)),
        ));
        if f.name != "integer" {
            cases.push((
                format!("bundled {}", f.name),
                Box::new(move |b| bundled(f, b)),
            ));
        }
        cases.retain(|(name, _)| selected(name));
        if cases.is_empty() {
            continue;
        }
        // The uninstrumented reference: two plain runs must agree.
        let plain = (|| -> Result<u64> {
            let a = run(f.name, f.args, None)?;
            let b = run(f.name, f.args, None)?;
            ensure(a.insns == b.insns, || {
                format!(
                    "{} is not deterministic: {} vs {} insns",
                    f.name, a.insns, b.insns
                )
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
    rustix::stdio::dup2_stdout(&saved).expect("restore stdout");
    eprintln!("storm: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
