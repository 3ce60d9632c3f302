//! `tcgkit run [--strace] [-L PREFIX] GUEST [ARGS...]`: run an RV64 Linux
//! program, static or dynamically linked, like `qemu-riscv64`, with the
//! host's stdin/stdout/stderr and environment, ending with the guest's exit
//! status or by the guest's fatal signal.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tcgkit_image_core::{Image, ImageRegistry};
use tcgkit_linux_user::{GuestExit, Module, ModuleObserver, Options, Process, SyscallObserver};
use tcgkit_plugin_api::{
    GuestInfo, GuestProgram, ModuleInfo, PluginHost, PluginLifecycle, PluginRegistry, SymbolTable,
};
use tcgkit_profiler::{
    Event, EventKind, GuestExitStatus, PluginEvent, ProcessExit, Profiler, Syscall, TbFlushed,
    TbRangeInvalidated, TbTranslated, VcpuEvent,
};
use tcgkit_riscv::Rv64;
use tcgkit_tcg_core::{EngineEvents, JitConfig};

/// Arguments of `tcgkit run`.
#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Print each guest syscall on stderr, like `qemu-riscv64 -strace`.
    #[arg(long)]
    strace: bool,
    /// At the end, print the engine's counters and guest instructions per
    /// second on stderr.
    #[arg(long)]
    stats: bool,
    /// Look up absolute guest paths (the program interpreter, libraries,
    /// /etc files) under PREFIX first, like `qemu-riscv64 -L`; the
    /// `QEMU_LD_PREFIX` environment variable says the same.
    #[arg(short = 'L', value_name = "PREFIX")]
    prefix: Option<PathBuf>,
    /// Set VAR to VALUE in the guest's environment (repeatable), like
    /// `qemu-riscv64 -E`.
    #[arg(short = 'E', value_name = "VAR=VALUE", value_parser = parse_assignment)]
    set_env: Vec<OsString>,
    /// Remove VAR from the guest's environment (repeatable), like
    /// `qemu-riscv64 -U`.
    #[arg(short = 'U', value_name = "VAR")]
    unset_env: Vec<OsString>,
    /// The guest's `argv[0]` (by default the program path as given), like
    /// `qemu-riscv64 -0`.
    #[arg(short = '0', value_name = "ARGV0")]
    argv0: Option<OsString>,
    /// The RV64 Linux executable to run, then its arguments, passed
    /// verbatim (even ones that look like options, such as `--help`).
    #[arg(value_name = "GUEST [ARGS]", required = true, num_args = 1.., allow_hyphen_values = true)]
    command: Vec<OsString>,
    /// Install a plugin, QEMU style, `NAME[,key=value...]` (repeatable): a
    /// bundled plugin, or a QEMU plugin shared object when NAME contains a
    /// slash or ends in .so (QEMU's file=PATH and -plugin spellings work
    /// too); e.g. `insn,inline=true`, `mem`, `hotblocks,limit=10`,
    /// `drcov,filename=cov.drcov`.
    #[arg(long = "plugin", value_name = "NAME[,k=v...]")]
    plugins: Vec<String>,
    /// Send plugin output to FILE instead of stderr (QEMU's `-D FILE`).
    #[arg(long, short = 'D', value_name = "FILE")]
    plugin_out: Option<PathBuf>,
    /// QEMU's `-d ITEMS`: `plugin` (plugin output on stderr, tcgkit's
    /// default anyway); other items are not logged.
    #[arg(short = 'd', value_name = "ITEMS")]
    log_items: Option<String>,
    /// Compile hot blocks to host code (`on`) or only interpret (`off`);
    /// the `TCGKIT_JIT` environment variable says the same. Default: on.
    #[arg(long, value_name = "on|off", env = "TCGKIT_JIT", value_parser = parse_switch)]
    jit: Option<bool>,
    /// With `--jit on`: interpreted runs before a block is compiled (0
    /// compiles every block at once; `TCGKIT_JIT_THRESHOLD` says the same).
    #[arg(long, value_name = "N", env = "TCGKIT_JIT_THRESHOLD")]
    jit_threshold: Option<u32>,
    /// With `--jit on`: compile hot blocks on a background thread while
    /// they go on running interpreted (`on`, the default unless the
    /// threshold is 0), or in line before their next run (`off`);
    /// `TCGKIT_JIT_BACKGROUND` says the same.
    #[arg(long, value_name = "on|off", env = "TCGKIT_JIT_BACKGROUND", value_parser = parse_switch)]
    jit_background: Option<bool>,
    /// With `--jit on` and host threads: a block hot in several guest
    /// threads is compiled once, its code shared by their engines (`on`,
    /// the default), or once per thread (`off`); `TCGKIT_JIT_SHARE` says
    /// the same.
    #[arg(long, value_name = "on|off", env = "TCGKIT_JIT_SHARE", value_parser = parse_switch)]
    jit_share: Option<bool>,
    /// How guest threads run: each on a host thread of its own (`host`,
    /// the default, as qemu-user runs them), or taking turns on one
    /// (`turns`); `TCGKIT_THREADS` says the same.
    #[arg(long, value_name = "host|turns", env = "TCGKIT_THREADS", value_parser = parse_threads)]
    threads: Option<bool>,
    #[command(flatten)]
    trace: crate::trace::TraceArgs,
    /// Set by tcgkit itself when a guest's `execve` starts an RV64 program
    /// (see `ExecLauncher`): plugin output (`-D`) is appended to, not
    /// truncated.
    #[arg(long, hide = true)]
    exec_child: bool,
}

/// Starts the RV64 programs a guest `execve`s under tcgkit again, with the
/// options of this run (what qemu-user gets from binfmt_misc): the same
/// plugins, JIT mode, prefix and strace; the environment is the guest's,
/// and each program writes its trace to a file of its own.
struct ExecLauncher {
    exe: PathBuf,
    /// This run's options, trace aside.
    options: Vec<OsString>,
    trace: crate::trace::TraceArgs,
}

impl ExecLauncher {
    fn new(args: &RunArgs, prefix: Option<&std::path::Path>, jit: bool) -> ExecLauncher {
        let mut options: Vec<OsString> = vec!["run".into(), "--exec-child".into()];
        let mut option = |name: &str, value: OsString| {
            options.push(name.into());
            options.push(value);
        };
        if let Some(prefix) = prefix {
            option("-L", prefix.into());
        }
        for plugin in &args.plugins {
            option("--plugin", plugin.into());
        }
        if let Some(out) = &args.plugin_out {
            option("-D", out.into());
        }
        if let Some(items) = &args.log_items {
            option("-d", items.into());
        }
        option("--jit", if jit { "on" } else { "off" }.into());
        if let Some(threshold) = args.jit_threshold {
            option("--jit-threshold", threshold.to_string().into());
        }
        if let Some(background) = args.jit_background {
            option(
                "--jit-background",
                if background { "on" } else { "off" }.into(),
            );
        }
        if let Some(share) = args.jit_share {
            option("--jit-share", if share { "on" } else { "off" }.into());
        }
        if let Some(host) = args.threads {
            option("--threads", if host { "host" } else { "turns" }.into());
        }
        if args.strace {
            options.push("--strace".into());
        }
        if args.stats {
            options.push("--stats".into());
        }
        ExecLauncher {
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
            options,
            trace: args.trace.clone(),
        }
    }
}

impl tcgkit_linux_user::Launcher for ExecLauncher {
    fn command(&self, program: &std::path::Path, argv: &[OsString]) -> (PathBuf, Vec<OsString>) {
        let mut args: Vec<OsString> = vec!["tcgkit".into()];
        args.extend(self.options.iter().cloned());
        // The exec keeps this process's pid.
        args.extend(self.trace.child_args(std::process::id()));
        args.push("-0".into());
        args.push(argv.first().cloned().unwrap_or_else(|| program.into()));
        args.push("--".into());
        args.push(program.into());
        args.extend(argv.iter().skip(1).cloned());
        (self.exe.clone(), args)
    }
}

/// `host` (true) or `turns` (false).
fn parse_threads(s: &str) -> Result<bool, String> {
    match s {
        "host" => Ok(true),
        "turns" => Ok(false),
        _ => Err(format!("expected host or turns, not {s:?}")),
    }
}

/// `on`/`off` (also `1`/`0`, `true`/`false`, `yes`/`no`).
fn parse_switch(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err(format!("expected on or off, not {s:?}")),
    }
}

/// Forwards the engine's translations, flushes and invalidations to the
/// profiler. Only the engine's slow paths call it.
struct EngineTrace {
    profiler: Profiler,
    generation: u64,
    /// The engine's vCPU (each guest thread has an engine of its own on
    /// host threads).
    vcpu: u32,
}

impl EngineEvents for EngineTrace {
    fn block_translated(&mut self, pc: u64, insns: u32, bytes: u32) {
        let generation = self.generation;
        self.profiler.raise_with(EventKind::TbTranslated, || {
            Event::TbTranslated(TbTranslated {
                vcpu: self.vcpu,
                pc,
                guest_bytes: bytes,
                insns,
                generation,
            })
        });
    }

    fn flushed(&mut self, blocks_retired: usize) {
        let generation = self.generation;
        self.generation += 1;
        self.profiler.raise_with(EventKind::TbFlushed, || {
            Event::TbFlushed(TbFlushed {
                generation,
                count: blocks_retired as u64,
            })
        });
    }

    fn range_invalidated(&mut self, start: u64, len: u64, blocks_dropped: usize) {
        self.profiler.raise_with(EventKind::TbRangeInvalidated, || {
            Event::TbRangeInvalidated(TbRangeInvalidated {
                start,
                end: start.saturating_add(len),
                count: blocks_dropped as u64,
            })
        });
    }
}

/// Tells the plugins of every module the guest maps and unmaps, with the
/// module's function symbols at their guest addresses.
struct PluginModules(PluginHost);

impl ModuleObserver for PluginModules {
    fn module_loaded(&mut self, module: &Module) {
        let info = ModuleInfo::new(module.path.clone(), module.start, module.end)
            .with_build_id(module.build_id.clone())
            .with_entry(module.entry);
        // A module that cannot be read again just has no symbols.
        let symbols = Image::open(&module.path)
            .map(|image| SymbolTable::from_elf_at(image.bytes(), module.bias))
            .unwrap_or_default();
        self.0.module_loaded(info, symbols);
    }

    fn module_unloaded(&mut self, module: &Module) {
        self.0.module_unloaded(module.start);
    }
}

/// Forwards the guest's syscalls to the plugins (entry and return) and to
/// the profiler (one `syscall` event per completed call, with its result).
struct SyscallHooks {
    plugins: Option<PluginHost>,
    profiler: Option<Profiler>,
    pending: Option<(u64, [u64; 6])>,
    /// The vCPU of the running guest thread.
    vcpu: u32,
    /// The trace, which a forked child continues in a file of its own.
    trace: Option<(std::sync::Arc<tcgkit_profiler::TraceSession>, PathBuf)>,
}

impl SyscallHooks {
    /// Writes out buffered plugin output (before a fork or an exec).
    fn flush_plugin_output(&self) {
        if let Some(plugins) = &self.plugins
            && let Err(e) = plugins.flush_output()
        {
            eprintln!("tcgkit: warning: plugin output: {e}");
        }
    }
}

impl SyscallObserver for SyscallHooks {
    fn on_syscall(&mut self, number: u64, args: &[u64; 6]) {
        if let Some(plugins) = &self.plugins {
            plugins.on_syscall(self.vcpu, number, args);
        }
        self.pending = Some((number, *args));
    }

    fn on_syscall_return(&mut self, number: u64, ret: u64) {
        if let Some(plugins) = &self.plugins {
            plugins.on_syscall_return(self.vcpu, number, ret);
        }
        let Some(profiler) = &self.profiler else {
            return;
        };
        let args = match self.pending.take() {
            Some((n, args)) if n == number => args,
            _ => [0; 6],
        };
        let vcpu = self.vcpu;
        profiler.raise_with(EventKind::Syscall, || {
            Event::Syscall(Syscall {
                vcpu,
                number,
                args,
                ret: ret as i64,
            })
        });
    }

    fn on_vcpu_start(&mut self, vcpu: u32, cpu: &tcgkit_riscv::Cpu) {
        if let Some(plugins) = &self.plugins {
            // QEMU plugins may read the new vCPU's registers in vcpu_init.
            let read = |name: &str| <Rv64 as tcgkit_tcg_core::Frontend>::read_register(cpu, name);
            tcgkit_qemu_plugin::with_registers(&read, || plugins.vcpu_init(vcpu));
        }
        if let Some(profiler) = &self.profiler {
            profiler.raise_with(EventKind::VcpuStarted, || {
                Event::VcpuStarted(VcpuEvent { vcpu })
            });
        }
    }

    fn on_vcpu_exit(&mut self, vcpu: u32) {
        if let Some(plugins) = &self.plugins {
            plugins.vcpu_exit(vcpu);
        }
        if let Some(profiler) = &self.profiler {
            profiler.raise_with(EventKind::VcpuStopped, || {
                Event::VcpuStopped(VcpuEvent { vcpu })
            });
        }
    }

    fn on_vcpu_running(&mut self, vcpu: u32) {
        self.vcpu = vcpu;
    }

    fn before_fork(&mut self) {
        self.flush_plugin_output();
        if let Some((session, _)) = &self.trace
            && let Err(e) = session.flush()
        {
            eprintln!("tcgkit: warning: trace: {e}");
        }
    }

    fn after_fork(&mut self, child: Option<u32>) {
        if child.is_some() {
            return;
        }
        // The child: plugin output goes on in the same file or stream, as
        // QEMU's log does; the trace is the parent's, so the child starts
        // its own beside it.
        if let Some((session, path)) = &self.trace {
            let own = crate::trace::per_process_path(path, std::process::id());
            if let Err(e) = session.continue_in(&own) {
                eprintln!("tcgkit: warning: trace: {e}");
            }
            // The thread that completes the trace on Ctrl-C stayed behind.
            if let Err(e) = finish_trace_on_interrupt(std::sync::Arc::clone(session)) {
                eprintln!("tcgkit: warning: {e:#}");
            }
        }
    }

    fn before_exec(&mut self) {
        self.flush_plugin_output();
        if let Some((session, _)) = &self.trace
            && let Err(e) = session.finish()
        {
            eprintln!("tcgkit: warning: trace: {e}");
        }
    }
}

/// Scoreboard rows a plugin's board is made with in user mode, as QEMU
/// allocates them (16, "avoid frequent reallocation"); a guest thread's
/// vCPU past them grows every board it writes.
const USER_VCPU_ROWS: u32 = 16;

/// Runs the guest; returns its exit status, or does not return when a
/// signal killed it (this process then dies by the same signal).
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // One positional list, so that everything after GUEST is the guest's
    // even when it looks like one of our options.
    let prefix = args
        .prefix
        .clone()
        .or_else(|| std::env::var_os("QEMU_LD_PREFIX").map(PathBuf::from));
    let jit = args.jit.unwrap_or(true);
    let launcher = ExecLauncher::new(&args, prefix.as_deref(), jit);
    let mut argv = args.command;
    let guest = PathBuf::from(argv.first().context("no guest program given")?);
    if let (Some(first), Some(argv0)) = (argv.first_mut(), args.argv0) {
        *first = argv0;
    }
    let env = guest_environment(std::env::vars_os(), &args.set_env, &args.unset_env);
    let trace = args.trace.open()?.map(std::sync::Arc::new);
    if let Some(session) = &trace {
        finish_trace_on_interrupt(std::sync::Arc::clone(session))?;
    }
    if args
        .plugins
        .iter()
        .any(|s| tcgkit_qemu_plugin::is_shared_object(s))
    {
        // A C plugin's crash is named, and the trace completed, before the
        // process dies by its signal.
        let session = trace.clone();
        tcgkit_qemu_plugin::report_crashes(move || {
            if let Some(session) = &session {
                let _ = session.finish();
            }
        });
    }
    let image =
        Image::open(&guest).map_err(|e| anyhow::anyhow!("cannot run {}: {e}", guest.display()))?;
    let image = &image;
    let options = Options::default()
        .with_strace(args.strace)
        .with_prefix(prefix)
        .with_launcher(Some(std::sync::Arc::new(launcher)))
        .with_host_threads(args.threads.unwrap_or(true))
        .with_shared_code(args.jit_share.unwrap_or(true));
    let mut process = Process::from_image_with_options(image, &guest, &argv, &env, options)
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", guest.display()))?;
    // Every module the guest maps (the program, ld.so, its libraries,
    // what it dlopens) is an image in this registry, so a trace sees each
    // one load and unload.
    let mut modules = ImageRegistry::new();
    if let Some(session) = &trace {
        modules.add_observer(session.image_observer());
    }
    process.set_module_registry(modules);
    if jit {
        let threshold = args.jit_threshold.unwrap_or(JitConfig::DEFAULT_THRESHOLD);
        let mut config = JitConfig::on(threshold);
        if let Some(background) = args.jit_background {
            config.background = background;
        }
        if let Err(e) = process.engine_mut().set_jit(config) {
            eprintln!("tcgkit: warning: {e}; interpreting only");
        }
    }
    let specs = match plugin_specs(&args.plugins) {
        Ok(specs) => specs,
        Err(e) => {
            eprintln!("tcgkit: error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let plugins = if specs.is_empty() {
        None
    } else {
        let out: Box<dyn std::io::Write + Send> = match &args.plugin_out {
            Some(path) => {
                // An exec'd program adds to its parent's output.
                let file = if args.exec_child {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                } else {
                    std::fs::File::create(path)
                };
                Box::new(std::io::BufWriter::new(file.with_context(|| {
                    format!("creating plugin output {}", path.display())
                })?))
            }
            None => Box::new(std::io::stderr()),
        };
        let layout = process.layout();
        let program = GuestProgram {
            path: guest.clone(),
            start_code: layout.start_code,
            end_code: layout.end_code,
            entry: layout.entry,
        };
        let info = GuestInfo::user("riscv64", USER_VCPU_ROWS).with_program(program);
        // Built for the engine's frontend: `insn`'s callback is compiled
        // into its loop.
        let registry = PluginRegistry::bundled_for::<Rv64>();
        let host = PluginHost::new(info, out);
        // In command-line order, as QEMU installs them.
        for spec in specs {
            match spec {
                PluginSpec::Shared(parsed) => {
                    // A plugin that cannot load stops the run before the
                    // guest starts, with one line naming it (QEMU exits 1).
                    for warning in &parsed.warnings {
                        eprintln!("tcgkit: warning: {warning}");
                    }
                    tcgkit_qemu_plugin::install_for::<Rv64>(&host, &parsed.path, &parsed.args)?;
                }
                PluginSpec::Bundled(spec) => {
                    if let Err(e) = host.install_spec(&registry, &spec) {
                        // A bad --plugin is a bad command line: one line, a
                        // hint, 2.
                        eprintln!(
                            "tcgkit: error: {e}\nFor more information, try 'tcgkit run --help'."
                        );
                        return Ok(ExitCode::from(2));
                    }
                }
            }
        }
        // Symbols come with each module (the program's first).
        process.set_module_observer(Box::new(PluginModules(host.clone())));
        host.attach(process.engine_mut());
        // QEMU plugins may read the vCPU's registers in vcpu_init.
        let cpu = process.cpu();
        let read = |name: &str| <Rv64 as tcgkit_tcg_core::Frontend>::read_register(cpu, name);
        tcgkit_qemu_plugin::with_registers(&read, || host.vcpu_init(0));
        Some(host)
    };
    let profiler = trace.as_ref().map(|t| t.profiler().clone());
    if plugins.is_some() || profiler.is_some() {
        process.set_syscall_observer(Box::new(SyscallHooks {
            plugins: plugins.clone(),
            profiler: profiler.clone(),
            pending: None,
            vcpu: 0,
            trace: trace
                .clone()
                .zip(args.trace.path().map(std::path::Path::to_path_buf)),
        }));
    }
    if let (Some(profiler), Some(plugins)) = (&profiler, &plugins) {
        // Installed before the trace could watch: report them now; resets
        // and uninstalls are reported as they complete.
        for (id, name) in plugins.installed() {
            profiler.raise_with(EventKind::PluginInstalled, || {
                Event::PluginInstalled(PluginEvent {
                    id: id.0,
                    name: &name,
                })
            });
        }
        let watcher = profiler.clone();
        plugins.on_lifecycle(move |what, id, name| {
            let event = PluginEvent { id: id.0, name };
            match what {
                PluginLifecycle::Installed => {
                    watcher.raise_with(EventKind::PluginInstalled, || Event::PluginInstalled(event))
                }
                PluginLifecycle::Reset => {
                    watcher.raise_with(EventKind::PluginReset, || Event::PluginReset(event))
                }
                PluginLifecycle::Uninstalled => watcher
                    .raise_with(EventKind::PluginUninstalled, || {
                        Event::PluginUninstalled(event)
                    }),
            }
        });
    }
    if let Some(profiler) = &profiler {
        process
            .engine_mut()
            .set_event_sink(Some(Box::new(EngineTrace {
                profiler: profiler.clone(),
                generation: 0,
                vcpu: 0,
            })));
        profiler.raise_with(EventKind::VcpuStarted, || {
            Event::VcpuStarted(VcpuEvent { vcpu: 0 })
        });
    }
    // With guest threads on host threads, each thread's engine (made by
    // linux-user with the first one's JIT) gets the plugins and the trace.
    let (setup_plugins, setup_profiler) = (plugins.clone(), profiler.clone());
    process.set_engine_setup(std::sync::Arc::new(move |vcpu, engine| {
        if let Some(host) = &setup_plugins {
            host.attach(engine);
        }
        if let Some(profiler) = &setup_profiler {
            engine.set_event_sink(Some(Box::new(EngineTrace {
                profiler: profiler.clone(),
                generation: 0,
                vcpu,
            })));
        }
    }));
    let started = std::time::Instant::now();
    let end = process.run();
    if interrupted() {
        // The interrupt thread is completing the trace and will end this
        // process by the signal; the guest's own ending (a read cut short,
        // say) must not win that race with a normal exit.
        loop {
            std::thread::park();
        }
    }
    if args.stats {
        let elapsed = started.elapsed().as_secs_f64();
        let stats = process.stats();
        eprintln!(
            "tcgkit: {} guest instructions in {elapsed:.3} s ({:.1} M/s), {} blocks translated ({} more with another thread's plan), {} executed",
            stats.insns_executed,
            stats.insns_executed as f64 / elapsed.max(1e-9) / 1e6,
            stats.tbs_translated,
            stats.plans_adopted,
            stats.blocks_executed
        );
        if jit {
            eprintln!(
                "tcgkit: jit: {} blocks compiled ({} bytes), {} compiled block runs in {} entries; {} blocks placed code compiled before (by another thread, or before a flush)",
                stats.blocks_compiled,
                stats.compiled_bytes,
                stats.compiled_blocks_executed,
                stats.compiled_entries,
                stats.blocks_adopted
            );
        }
    }
    if let Some(plugins) = &plugins {
        // Plugins' atexit output is complete before we possibly die by the
        // guest's signal below.
        plugins.vcpu_exit(0);
        for failure in plugins.failures() {
            eprintln!("tcgkit: {failure}");
        }
        plugins.finish().context("finishing plugins")?;
    }
    if let Some(profiler) = &profiler {
        profiler.raise_with(EventKind::VcpuStopped, || {
            Event::VcpuStopped(VcpuEvent { vcpu: 0 })
        });
        let status = match end {
            GuestExit::Exited(code) => GuestExitStatus::Exited(i32::from(code)),
            GuestExit::Signaled(sig) => GuestExitStatus::Signaled(i32::from(sig.number())),
        };
        profiler.raise_with(EventKind::ProcessExit, || {
            Event::ProcessExit(ProcessExit { status })
        });
    }
    // The modules were unloaded when the guest ended; complete the trace
    // before this process possibly dies by the guest's signal, which would
    // skip destructors.
    if let Some(session) = &trace {
        session.finish().context("finishing the trace")?;
    }
    match end {
        GuestExit::Exited(code) => Ok(ExitCode::from(code)),
        GuestExit::Signaled(sig) => {
            if let Some(message) = end.uncaught_signal_message("tcgkit") {
                eprintln!("{message}");
            }
            die_by(sig.number());
            // The signal's default action does not terminate (or it is
            // ignored by the host): report it the way a shell would.
            Ok(ExitCode::from(end.shell_status().clamp(0, 255) as u8))
        }
    }
}

/// One plugin to install.
enum PluginSpec {
    /// A bundled plugin: `NAME[,k=v...]`.
    Bundled(String),
    /// A QEMU plugin shared object with all the arguments given for it.
    Shared(tcgkit_qemu_plugin::SharedObjectSpec),
}

/// The plugins to install, in order: `QEMU_PLUGIN`'s first (qemu-user
/// reads its environment before its command line), then `--plugin`'s. A
/// shared object named again by the same path is one plugin with every
/// argument given for it, as QEMU loads it.
fn plugin_specs(given: &[String]) -> anyhow::Result<Vec<PluginSpec>> {
    let from_env = std::env::var("QEMU_PLUGIN").ok();
    let mut specs: Vec<PluginSpec> = Vec::new();
    for spec in from_env.iter().chain(given) {
        if !tcgkit_qemu_plugin::is_shared_object(spec) {
            specs.push(PluginSpec::Bundled(spec.clone()));
            continue;
        }
        for parsed in tcgkit_qemu_plugin::SharedObjectSpec::parse_all(spec)? {
            let known = specs.iter_mut().find_map(|s| match s {
                PluginSpec::Shared(known) if known.path == parsed.path => Some(known),
                _ => None,
            });
            match known {
                Some(known) => known.merge(parsed),
                None => specs.push(PluginSpec::Shared(parsed)),
            }
        }
    }
    Ok(specs)
}

/// `-E`'s value: `VAR=VALUE` (a bad one is a bad command line).
fn parse_assignment(value: &str) -> Result<OsString, String> {
    match value.split_once('=') {
        Some((name, _)) if !name.is_empty() => Ok(OsString::from(value)),
        _ => Err(format!("expected VAR=VALUE, got '{value}'")),
    }
}

/// The guest's environment as `NAME=value` strings: the host's, in its
/// order, then each `-E` assignment replacing its variable in place or
/// appended, then each `-U` name removed (qemu-user applies them in
/// command-line order; the two differ only for a variable named in both).
fn guest_environment(
    host: impl Iterator<Item = (OsString, OsString)>,
    set: &[OsString],
    unset: &[OsString],
) -> Vec<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let name_of = |entry: &OsString| -> Vec<u8> {
        let bytes = entry.as_bytes();
        let end = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
        bytes[..end].to_vec()
    };
    let mut env: Vec<OsString> = host
        .map(|(k, v)| {
            let mut entry = k;
            entry.push("=");
            entry.push(v);
            entry
        })
        .collect();
    for assignment in set {
        let name = name_of(assignment);
        match env.iter_mut().find(|e| name_of(e) == name) {
            Some(existing) => *existing = assignment.clone(),
            None => env.push(assignment.clone()),
        }
    }
    for name in unset {
        env.retain(|e| name_of(e) != name.as_bytes());
    }
    env
}

/// Set inside the signal handler itself (before an interrupted host call
/// returns), so the main thread cannot miss it: the process then ends by
/// that signal from the interrupt thread.
static INTERRUPTED: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
    std::sync::OnceLock::new();

fn interrupted() -> bool {
    INTERRUPTED
        .get()
        .is_some_and(|flag| flag.load(std::sync::atomic::Ordering::Acquire))
}

/// Ctrl-C or `kill` would end the process without running destructors,
/// leaving a truncated trace: complete it first, then die by that signal.
fn finish_trace_on_interrupt(
    session: std::sync::Arc<tcgkit_profiler::TraceSession>,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let flag = INTERRUPTED.get_or_init(Default::default);
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(flag))
            .context("installing the interrupt handler")?;
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing the interrupt handler")?;
    std::thread::Builder::new()
        .name("trace-interrupt".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                if let Err(e) = session.finish() {
                    eprintln!("tcgkit: error: finishing the trace: {e}");
                }
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                std::process::exit(128 + signal);
            }
        })
        .context("starting the interrupt handler")?;
    Ok(())
}

/// Ends this process by `signal` with its default action, so the parent sees
/// the same wait status as for the guest under Linux. No host core file: the
/// crash is the guest's, not ours (qemu does the same).
fn die_by(signal: u8) {
    let no_core = rustix::process::Rlimit {
        current: Some(0),
        maximum: None,
    };
    let _ = rustix::process::setrlimit(rustix::process::Resource::Core, no_core);
    let _ = signal_hook::low_level::emulate_default_handler(i32::from(signal));
}
