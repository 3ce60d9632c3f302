//! Running and timing both emulators: their command lines, one timed run,
//! the counts their plugins report, and whether two sides agree.

use super::QEMU;
use super::workloads::{Config, JIT_VAR, JitMode, Runner, TCGKIT_RUNNERS, Workload};
use anyhow::{Context, Result};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::Instant;

/// What a counting plugin reported; each side prints the same lines.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub(super) struct Counts {
    pub insns: Option<u64>,
    pub loads: Option<u64>,
    pub stores: Option<u64>,
    pub blocks: Option<u64>,
    /// The `reset` plugins: resets completed, and the mean and largest
    /// number of blocks translated since the previous reset when one ran.
    pub resets: Option<u64>,
    pub cached_mean: Option<f64>,
    pub cached_max: Option<u64>,
}

impl Counts {
    /// Reads `total insns: N`, `loads: N`, `stores: N`,
    /// `total: bbs: N, insns: N`, `resets: N` and
    /// `blocks cached at reset: mean M, max N` lines; anything else is
    /// ignored.
    pub fn parse(text: &str) -> Counts {
        let mut counts = Counts::default();
        let number = |s: &str| s.trim().parse::<u64>().ok();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("total insns:") {
                counts.insns = number(n);
            } else if let Some(n) = line.strip_prefix("loads:") {
                counts.loads = number(n);
            } else if let Some(n) = line.strip_prefix("stores:") {
                counts.stores = number(n);
            } else if let Some((bbs, insns)) = line
                .strip_prefix("total: bbs:")
                .and_then(|rest| rest.split_once(", insns:"))
            {
                counts.blocks = number(bbs);
                counts.insns = number(insns);
            } else if let Some(n) = line.strip_prefix("resets:") {
                counts.resets = number(n);
            } else if let Some((mean, max)) = line
                .strip_prefix("blocks cached at reset: mean")
                .and_then(|rest| rest.split_once(", max"))
            {
                counts.cached_mean = mean.trim().parse::<f64>().ok().filter(|m| m.is_finite());
                counts.cached_max = number(max);
            }
        }
        counts
    }

    /// The figures that must be equal on both sides for `config` (block
    /// counts are not: where a block ends is each translator's choice).
    pub fn compared(self, config: Config) -> Vec<Option<u64>> {
        match config {
            Config::Bare => Vec::new(),
            Config::InsnInline
            | Config::InsnCallback
            | Config::InsnCallbackPerVcpu
            | Config::BlockCount => vec![self.insns],
            Config::MemCallback => vec![self.loads, self.stores],
        }
    }

    /// True when the report holds every figure `config` compares.
    pub fn complete(self, config: Config) -> bool {
        let compared = self.compared(config);
        !compared.is_empty() && compared.iter().all(Option::is_some)
    }

    pub fn show(self, config: Config) -> String {
        let n = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        match config {
            Config::Bare => String::new(),
            Config::InsnInline | Config::InsnCallback | Config::InsnCallbackPerVcpu => {
                n(self.insns)
            }
            Config::MemCallback => format!("{} ld / {} st", n(self.loads), n(self.stores)),
            Config::BlockCount => format!("{} tb / {} insns", n(self.blocks), n(self.insns)),
        }
    }
}

/// The measurements of one side in one cell.
#[derive(Clone, Default)]
pub(super) struct Side {
    pub seconds: Vec<f64>,
    pub counts: Option<Counts>,
    /// Stdout and status of the first run, to check both sides agree.
    pub first_output: Option<(Vec<u8>, String)>,
    pub problems: Vec<String>,
    /// The workload's counts depend on thread scheduling (see
    /// `Workload::threaded`): the first run's are kept, not compared.
    pub scheduling_dependent: bool,
}

impl Side {
    pub fn median(&self) -> Option<f64> {
        median(&self.seconds)
    }

    /// The fastest run.
    pub fn fastest(&self) -> Option<f64> {
        self.seconds
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .min_by(f64::total_cmp)
    }
}

/// One of tcgkit's sides in a cell: a runner in a JIT mode.
pub(super) struct Ours {
    pub runner: Runner,
    pub mode: JitMode,
    /// None when tcgkit cannot run it (see `unavailable`).
    pub side: Option<Side>,
    /// Why tcgkit has no figures here.
    pub unavailable: Option<String>,
}

/// One workload run in one configuration by every side.
pub(super) struct Cell {
    pub workload: usize,
    pub config: Config,
    pub qemu: Side,
    /// tcgkit's sides, for each JIT mode its bundled plugin then QEMU's
    /// C plugin (none for the bare run, which has no plugin): the order
    /// they run in.
    pub ours: Vec<Ours>,
}

impl Cell {
    /// A cell to measure in `modes`; `unavailable` says why tcgkit cannot
    /// run a runner in a mode, if it cannot.
    pub fn new(
        workload: usize,
        config: Config,
        modes: &[JitMode],
        unavailable: impl Fn(Runner, JitMode) -> Option<String>,
    ) -> Cell {
        let mut ours = Vec::new();
        for &mode in modes {
            for runner in TCGKIT_RUNNERS {
                if runner == Runner::SharedObject && config == Config::Bare {
                    continue;
                }
                let unavailable = unavailable(runner, mode);
                ours.push(Ours {
                    runner,
                    mode,
                    side: unavailable.is_none().then(Side::default),
                    unavailable,
                });
            }
        }
        Cell {
            workload,
            config,
            qemu: Side::default(),
            ours,
        }
    }

    pub fn ours(&self, runner: Runner, mode: JitMode) -> Option<&Ours> {
        self.ours
            .iter()
            .find(|o| o.runner == runner && o.mode == mode)
    }

    /// The side `runner` measured in `mode` (QEMU's has no mode).
    pub fn side(&self, runner: Runner, mode: JitMode) -> Option<&Side> {
        match runner {
            Runner::Qemu => Some(&self.qemu),
            _ => self.ours(runner, mode)?.side.as_ref(),
        }
    }

    /// Every side measured, QEMU's first, with who ran it.
    pub fn sides(&self) -> Vec<(String, &Side)> {
        let ours = self
            .ours
            .iter()
            .filter_map(|o| Some((o.runner.who(o.mode), o.side.as_ref()?)));
        std::iter::once(("QEMU".to_owned(), &self.qemu))
            .chain(ours)
            .collect()
    }
}

/// True when `ours` ran cleanly and its guest output and compared counts
/// are QEMU's.
pub(super) fn agrees(config: Config, qemu: &Side, ours: &Side) -> bool {
    let output = ours.first_output == qemu.first_output;
    let counts = config == Config::Bare
        || qemu.scheduling_dependent
        || matches!((qemu.counts, ours.counts),
            (Some(a), Some(b)) if a.compared(config) == b.compared(config));
    output && counts && ours.problems.is_empty() && qemu.problems.is_empty()
}

pub(super) fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Where QEMU's plugins log, under the scratch directory.
pub(super) const QEMU_LOG: &str = "qemu-plugin.log";
/// Where tcgkit's bundled plugins report, under the scratch directory.
pub(super) const TCGKIT_LOG: &str = "tcgkit-plugin.log";
/// Where tcgkit running a C plugin logs, under the scratch directory.
pub(super) const SHARED_LOG: &str = "tcgkit-so-plugin.log";

pub(super) fn qemu_command(
    plugins: &Path,
    config: Config,
    workload: &Workload,
    scratch: &Path,
) -> Command {
    let plugin = config
        .qemu_plugin()
        .map(|(lib, args)| (lib, args.to_owned()));
    qemu_plugin_command(plugins, plugin, workload, scratch)
}

/// qemu-riscv64 running `workload`, with the C plugin `lib` (a library stem
/// under `plugins`) and its `,key=value` arguments if given.
pub(super) fn qemu_plugin_command(
    plugins: &Path,
    plugin: Option<(&str, String)>,
    workload: &Workload,
    scratch: &Path,
) -> Command {
    let log = scratch.join(QEMU_LOG);
    with_c_plugin(Command::new(QEMU), plugins, plugin, &log, workload, scratch)
}

/// `tcgkit run`, in `mode` if given: [`JIT_VAR`] set for tcgkit and, with
/// `-U`, kept out of the guest's environment, so that the guest sees what
/// it sees under QEMU (its start-up walks the environment: one variable
/// more changes its instruction count).
/// The variables in [`PASSED_VARS`], when set for the bench, are passed
/// to tcgkit alike (the runs' environment is cleared otherwise).
pub(super) fn tcgkit_run(tcgkit: &Path, mode: Option<JitMode>) -> Command {
    let mut cmd = Command::new(tcgkit);
    cmd.arg("run");
    if let Some(mode) = mode {
        cmd.env(JIT_VAR, mode.value()).args(["-U", JIT_VAR]);
    }
    for var in PASSED_VARS {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value).args(["-U", var]);
        }
    }
    cmd
}

/// tcgkit's variables a bench may be run with: how guest threads run,
/// whether their engines share compiled code.
const PASSED_VARS: [&str; 2] = ["TCGKIT_THREADS", "TCGKIT_JIT_SHARE"];

/// `tcgkit run` with QEMU's command line for `config`: the same C plugin
/// .so and arguments (`-plugin PATH,ARGS -d plugin -D LOG`).
pub(super) fn shared_command(
    tcgkit: &Path,
    mode: Option<JitMode>,
    plugins: &Path,
    config: Config,
    workload: &Workload,
    scratch: &Path,
) -> Command {
    let plugin = config
        .qemu_plugin()
        .map(|(lib, args)| (lib, args.to_owned()));
    let log = scratch.join(SHARED_LOG);
    with_c_plugin(
        tcgkit_run(tcgkit, mode),
        plugins,
        plugin,
        &log,
        workload,
        scratch,
    )
}

/// `cmd` (an emulator and what comes before its options) running
/// `workload` as qemu-riscv64 does, with the C plugin `lib` (a library
/// stem under `plugins`) and its `,key=value` arguments if given, logging
/// to `log`.
fn with_c_plugin(
    mut cmd: Command,
    plugins: &Path,
    plugin: Option<(&str, String)>,
    log: &Path,
    workload: &Workload,
    scratch: &Path,
) -> Command {
    if let Some((lib, args)) = plugin {
        let path = plugins.join(format!("lib{lib}.so"));
        cmd.arg("-plugin").arg(format!("{}{args}", path.display()));
        // Plugin output goes to QEMU's log, enabled by `-d plugin`.
        cmd.args(["-d", "plugin", "-D"]).arg(log);
    }
    // Workloads may write scratch files in their working directory.
    cmd.arg(&workload.program)
        .args(&workload.args)
        .current_dir(scratch);
    cmd
}

pub(super) fn tcgkit_command(
    tcgkit: &Path,
    mode: JitMode,
    config: Config,
    workload: &Workload,
    scratch: &Path,
) -> Command {
    tcgkit_plugin_command(
        tcgkit,
        Some(mode),
        config.tcgkit_plugin(),
        workload,
        scratch,
    )
}

/// `tcgkit run` of `workload` in `mode` (tcgkit's default if none), with
/// `--plugin SPEC` if given.
pub(super) fn tcgkit_plugin_command(
    tcgkit: &Path,
    mode: Option<JitMode>,
    spec: Option<&str>,
    workload: &Workload,
    scratch: &Path,
) -> Command {
    let mut cmd = tcgkit_run(tcgkit, mode);
    if let Some(spec) = spec {
        cmd.args(["--plugin", spec, "--plugin-out"])
            .arg(scratch.join(TCGKIT_LOG));
    }
    // Workloads may write scratch files in their working directory.
    cmd.arg(&workload.program)
        .args(&workload.args)
        .current_dir(scratch);
    cmd
}

/// Runs `cmd` on `workload`'s input to completion, output captured, in a
/// fixed environment: `LC_ALL=C` and what `cmd` sets itself ([`JIT_VAR`]).
pub(super) fn run_workload(cmd: &mut Command, workload: &Workload) -> Result<Output> {
    let stdin = match &workload.stdin {
        Some(path) => Stdio::from(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        ),
        None => Stdio::null(),
    };
    // `env_clear` drops the variables set on `cmd` too: set them again.
    let own: Vec<(OsString, OsString)> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // One fixed variable for the guest: counts must not depend on the
        // caller's environment, nor on its order (qemu-user reverses it).
        .env_clear()
        .env("LC_ALL", "C")
        .envs(own)
        .output()
        .with_context(|| format!("running {cmd:?}"))
}

fn status_text(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => format!("{status}"),
    }
}

/// Runs `cmd` once with the workload's stdin, times it from spawn to exit,
/// and records its time, output and plugin counts into `side`.
pub(super) fn measure(
    side: &mut Side,
    mut cmd: Command,
    workload: &Workload,
    log: &Path,
) -> Result<()> {
    let _ = std::fs::remove_file(log);
    side.scheduling_dependent = workload.threaded;
    let started = Instant::now();
    let output = run_workload(&mut cmd, workload)?;
    let seconds = started.elapsed().as_secs_f64();
    side.seconds.push(seconds);
    let status = status_text(output.status);
    if output.status.code().is_none() {
        side.problems.push(format!(
            "ended by {status}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    match &side.first_output {
        None => side.first_output = Some((output.stdout, status)),
        Some((stdout, first)) if *stdout != output.stdout || *first != status => {
            side.problems.push("output differs between runs".to_owned());
        }
        Some(_) => {}
    }
    if log.exists() {
        let counts = Counts::parse(&std::fs::read_to_string(log).unwrap_or_default());
        match side.counts {
            None => side.counts = Some(counts),
            Some(first) if first != counts && !workload.threaded => {
                side.problems.push("counts differ between runs".to_owned());
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::workloads::CONFIGS;
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn counts_are_read_from_both_sides_report_lines() {
        let c = Counts::parse("cpu 0 insns: 5\ntotal insns: 28633739\n");
        assert_eq!(c.insns, Some(28_633_739));
        let c = Counts::parse("loads: 10\nstores: 4\ntotal accesses: 14\n");
        assert_eq!((c.loads, c.stores), (Some(10), Some(4)));
        assert_eq!(c.compared(Config::MemCallback), vec![Some(10), Some(4)]);
        assert!(c.complete(Config::MemCallback));
        assert!(!c.complete(Config::InsnInline));
        assert!(!c.complete(Config::Bare));
        let c = Counts::parse("cpu 0: bbs: 3, insns: 9\ntotal: bbs: 7, insns: 21\n");
        assert_eq!((c.blocks, c.insns), (Some(7), Some(21)));
        assert_eq!(c.compared(Config::BlockCount), vec![Some(21)]);
        assert_eq!(Counts::parse("garbage: x\n"), Counts::default());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
        assert_eq!(median(&[]), None);
    }

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn guest() -> Workload {
        Workload {
            name: "w".to_owned(),
            program: PathBuf::from("/g/prog"),
            args: vec!["-x".to_owned()],
            stdin: None,
            threaded: false,
        }
    }

    #[test]
    fn tcgkit_runs_the_c_plugin_with_qemus_command_line() {
        let guest = guest();
        let (plugins, scratch) = (Path::new("/p"), Path::new("/s"));
        for config in CONFIGS {
            let qemu = qemu_command(plugins, config, &guest, scratch);
            let ours = shared_command(
                Path::new("/t/tcgkit"),
                None,
                plugins,
                config,
                &guest,
                scratch,
            );
            assert_eq!(ours.get_program(), "/t/tcgkit");
            let mut expected = args(&qemu);
            if config != Config::Bare {
                // Only the log's name differs.
                let log = expected.iter().position(|a| a == "-D").unwrap() + 1;
                expected[log] = format!("/s/{SHARED_LOG}");
            }
            expected.insert(0, "run".to_owned());
            assert_eq!(args(&ours), expected);
        }
        let ours = shared_command(
            Path::new("tcgkit"),
            Some(JitMode::Jit),
            plugins,
            Config::InsnCallback,
            &guest,
            scratch,
        );
        assert_eq!(
            args(&ours),
            [
                "run",
                "-U",
                "TCGKIT_JIT",
                "-plugin",
                "/p/libinsn.so,inline=false",
                "-d",
                "plugin",
                "-D",
                "/s/tcgkit-so-plugin.log",
                "/g/prog",
                "-x"
            ]
        );
        let envs: Vec<_> = ours.get_envs().collect();
        assert_eq!(
            envs,
            [(
                std::ffi::OsStr::new("TCGKIT_JIT"),
                Some(std::ffi::OsStr::new("on"))
            )]
        );
    }

    #[test]
    fn tcgkit_gets_its_mode_and_its_guest_does_not() {
        let guest = guest();
        let cmd = tcgkit_command(
            Path::new("/t/tcgkit"),
            JitMode::Interp,
            Config::MemCallback,
            &guest,
            Path::new("/s"),
        );
        assert_eq!(
            args(&cmd),
            [
                "run",
                "-U",
                "TCGKIT_JIT",
                "--plugin",
                "mem",
                "--plugin-out",
                "/s/tcgkit-plugin.log",
                "/g/prog",
                "-x"
            ]
        );
        assert_eq!(
            cmd.get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect::<Vec<_>>(),
            [("TCGKIT_JIT".into(), Some("off".into()))]
        );
        // No mode: tcgkit's own default, nothing added (reset-count).
        let cmd = tcgkit_plugin_command(Path::new("t"), None, None, &guest, Path::new("/s"));
        assert_eq!(args(&cmd), ["run", "/g/prog", "-x"]);
        assert_eq!(cmd.get_envs().count(), 0);
    }

    #[test]
    fn a_run_sees_only_the_fixed_environment_and_its_own_variables() {
        let env = Path::new("/usr/bin/env");
        if !env.is_file() {
            eprintln!("skipped: no /usr/bin/env");
            return;
        }
        let workload = Workload {
            name: "env".to_owned(),
            program: env.to_owned(),
            args: Vec::new(),
            stdin: None,
            threaded: false,
        };
        let mut cmd = Command::new(env);
        cmd.env(JIT_VAR, "on");
        let out = run_workload(&mut cmd, &workload).unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        assert_eq!(lines, ["LC_ALL=C", "TCGKIT_JIT=on"]);
    }
}
