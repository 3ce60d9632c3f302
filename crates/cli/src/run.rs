//! `tcgkit run [--strace] GUEST [ARGS...]`: run a static RV64 Linux program
//! like `qemu-riscv64`, with the host's stdin/stdout/stderr and environment,
//! ending with the guest's exit status or by the guest's fatal signal.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tcgkit_image_core::ImageRegistry;
use tcgkit_linux_user::{GuestExit, Options, Process, SyscallObserver};
use tcgkit_profiler::{
    Event, EventKind, GuestExitStatus, ProcessExit, Profiler, Syscall, VcpuEvent,
};

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
    /// The static RV64 Linux executable to run, then its arguments, passed
    /// verbatim (even ones that look like options, such as `--help`).
    #[arg(value_name = "GUEST [ARGS]", required = true, num_args = 1.., allow_hyphen_values = true)]
    command: Vec<OsString>,
    #[command(flatten)]
    trace: crate::trace::TraceArgs,
}

/// Forwards the guest's syscalls to the profiler (one `syscall` event per
/// completed call, with its result).
struct SyscallEvents {
    profiler: Profiler,
    pending: Option<(u64, [u64; 6])>,
}

impl SyscallObserver for SyscallEvents {
    fn on_syscall(&mut self, number: u64, args: &[u64; 6]) {
        self.pending = Some((number, *args));
    }

    fn on_syscall_return(&mut self, number: u64, ret: u64) {
        let args = match self.pending.take() {
            Some((n, args)) if n == number => args,
            _ => [0; 6],
        };
        self.profiler.raise_with(EventKind::Syscall, || {
            Event::Syscall(Syscall {
                vcpu: 0,
                number,
                args,
                ret: ret as i64,
            })
        });
    }
}

/// Runs the guest; returns its exit status, or does not return when a
/// signal killed it (this process then dies by the same signal).
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // One positional list, so that everything after GUEST is the guest's
    // even when it looks like one of our options.
    let argv = args.command;
    let guest = PathBuf::from(argv.first().context("no guest program given")?);
    let env: Vec<OsString> = std::env::vars_os()
        .map(|(k, v)| {
            let mut entry = k;
            entry.push("=");
            entry.push(v);
            entry
        })
        .collect();
    // The executable is opened through a registry, so a trace sees it load
    // and unload like any other image.
    let trace = args.trace.open()?.map(std::sync::Arc::new);
    if let Some(session) = &trace {
        finish_trace_on_interrupt(std::sync::Arc::clone(session))?;
    }
    let mut registry = ImageRegistry::new();
    if let Some(session) = &trace {
        registry.add_observer(session.image_observer());
    }
    let handle = registry
        .load(&guest)
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", guest.display()))?;
    let image = registry
        .image(handle.id())
        .context("the registry lost the image it just loaded")?
        .image();
    let mut process = Process::from_image(image, &guest, &argv, &env)
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", guest.display()))?
        .with_options(Options::default().with_strace(args.strace));
    let profiler = trace.as_ref().map(|t| t.profiler().clone());
    if let Some(profiler) = &profiler {
        process.set_syscall_observer(Box::new(SyscallEvents {
            profiler: profiler.clone(),
            pending: None,
        }));
        profiler.raise_with(EventKind::VcpuStarted, || {
            Event::VcpuStarted(VcpuEvent { vcpu: 0 })
        });
    }
    let started = std::time::Instant::now();
    let end = process.run();
    if args.stats {
        let elapsed = started.elapsed().as_secs_f64();
        let stats = process.engine().stats();
        eprintln!(
            "tcgkit: {} guest instructions in {elapsed:.3} s ({:.1} M/s), {} blocks translated, {} executed",
            stats.insns_executed,
            stats.insns_executed as f64 / elapsed.max(1e-9) / 1e6,
            stats.tbs_translated,
            stats.blocks_executed
        );
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
    // Unload the executable (its unload span closes the trace's story), then
    // complete the trace before this process possibly dies by the guest's
    // signal, which would skip destructors.
    registry.close(handle).context("closing the guest image")?;
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

/// Ctrl-C or `kill` would end the process without running destructors,
/// leaving a truncated trace: complete it first, then die by that signal.
fn finish_trace_on_interrupt(
    session: std::sync::Arc<tcgkit_profiler::TraceSession>,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
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
