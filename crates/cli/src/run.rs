//! `tcgkit run [--strace] GUEST [ARGS...]`: run a static RV64 Linux program
//! like `qemu-riscv64`, with the host's stdin/stdout/stderr and environment,
//! ending with the guest's exit status or by the guest's fatal signal.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tcgkit_linux_user::{GuestExit, Options, Process};

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
    let mut process = Process::load(&guest, &argv, &env)
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", guest.display()))?
        .with_options(Options::default().with_strace(args.strace));
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
