//! Before anything is timed: QEMU's C plugins built, and each emulator
//! tried on a tiny guest with every configuration, so that a broken plugin
//! stops the run (QEMU) or shows as "not measured" (tcgkit) instead of as
//! disagreements later.

use super::measure::{Counts, SHARED_LOG, qemu_command, qemu_plugin_command, shared_command};
use super::reset;
use super::workloads::{CONFIGS, Config, JIT_VAR, JitMode, Runner, probe_guest};
use crate::realworld::Layout;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Builds every bench/qemu-plugins/*.c into target/qemu-plugins/libNAME.so.
pub(super) fn build_qemu_plugins(root: &Path, layout: &Layout) -> Result<PathBuf> {
    let src = root.join("bench").join("qemu-plugins");
    let out = layout
        .dir
        .parent()
        .context("target directory")?
        .join("qemu-plugins");
    std::fs::create_dir_all(&out)?;
    let mut built = 0;
    for entry in std::fs::read_dir(&src).with_context(|| format!("reading {}", src.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "c") {
            continue;
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("plugin name")?;
        let lib = out.join(format!("lib{stem}.so"));
        let output = Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-fvisibility=hidden"])
            .args(["-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&lib)
            .arg(&path)
            .output()
            .context("running gcc")?;
        if !output.status.success() {
            bail!(
                "building {} failed:\n{}",
                path.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        built += 1;
    }
    if built == 0 {
        bail!("no plugin sources in {}", src.display());
    }
    Ok(out)
}

/// Checks that qemu-riscv64 loads each C plugin and that it reports what
/// its configuration compares: a broken plugin must stop the run, not show
/// up as "disagreements" later.
pub(super) fn probe_qemu(root: &Path, plugins: &Path) -> Result<()> {
    let guest = probe_guest(root);
    let log = std::env::temp_dir().join(format!("tcgkit-qemu-probe-{}", std::process::id()));
    std::fs::create_dir_all(&log)?;
    for config in CONFIGS.into_iter().filter(|c| *c != Config::Bare) {
        let _ = std::fs::remove_file(log.join("qemu-plugin.log"));
        let out = qemu_command(plugins, config, &guest, &log)
            .stdin(Stdio::null())
            .output()
            .context("running qemu-riscv64 with a plugin")?;
        let text = std::fs::read_to_string(log.join("qemu-plugin.log")).unwrap_or_default();
        if !out.status.success() || !Counts::parse(&text).complete(config) {
            bail!(
                "qemu-riscv64 with the `{}` plugin failed ({}); its log: {text:?}\n{}",
                config.label(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let _ = std::fs::remove_file(log.join("qemu-plugin.log"));
    let plugin = Some(("reset", reset::qemu_args(reset::PROBE_EVERY)));
    let out = qemu_plugin_command(plugins, plugin, &guest, &log)
        .stdin(Stdio::null())
        .output()
        .context("running qemu-riscv64 with the reset plugin")?;
    let text = std::fs::read_to_string(log.join("qemu-plugin.log")).unwrap_or_default();
    if !out.status.success() || !reset::reported(&Counts::parse(&text)) {
        bail!(
            "qemu-riscv64 with the `reset` plugin failed ({}); its log: {text:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&log);
    Ok(())
}

/// Which plugin configurations this tcgkit build supports in each mode,
/// found by trying each on a tiny guest; the reason it does not, where it
/// does not.
#[derive(Default)]
pub(super) struct Support {
    reasons: Vec<(JitMode, Runner, Config, String)>,
    /// Why the reset measurement cannot run on tcgkit in a mode.
    reset: Vec<(JitMode, String)>,
}

impl Support {
    /// Why tcgkit cannot run `config` as `runner` does in `mode`, if it
    /// cannot.
    pub fn get(&self, config: Config, runner: Runner, mode: JitMode) -> Option<String> {
        self.reasons
            .iter()
            .find(|(m, r, c, _)| (*m, *r, *c) == (mode, runner, config))
            .map(|(.., reason)| reason.clone())
    }

    /// Why the reset measurement cannot run on tcgkit in `mode`, if it
    /// cannot.
    pub fn reset(&self, mode: JitMode) -> Option<String> {
        self.reset
            .iter()
            .find(|(m, _)| *m == mode)
            .map(|(_, reason)| reason.clone())
    }
}

/// Tries each configuration, bundled and as QEMU's C plugin, and the reset
/// plugin on tcgkit in each of `modes`.
pub(super) fn probe_tcgkit(
    root: &Path,
    tcgkit: &Path,
    plugins: &Path,
    modes: &[JitMode],
) -> Result<Support> {
    let help = Command::new(tcgkit)
        .args(["run", "--help"])
        .output()
        .context("running tcgkit run --help")?;
    let help = String::from_utf8_lossy(&help.stdout);
    let flags = help.contains("--plugin") && help.contains("--plugin-out");
    let guest = root.join("fixtures").join("guests").join("faults");
    let out = std::env::temp_dir().join(format!("tcgkit-probe-{}.log", std::process::id()));
    let no_flags = "tcgkit run has no --plugin/--plugin-out yet";
    let mut support = Support::default();
    for &mode in modes {
        for config in CONFIGS {
            let Some(spec) = config.tcgkit_plugin() else {
                continue;
            };
            if !flags {
                support
                    .reasons
                    .push((mode, Runner::Bundled, config, no_flags.to_owned()));
                continue;
            }
            let (status, counts) = probe_plugin(tcgkit, mode, spec, &guest, &out)?;
            if !status.success() || !counts.complete(config) {
                support.reasons.push((
                    mode,
                    Runner::Bundled,
                    config,
                    format!("`--plugin {spec}` did not run or report counts ({status})"),
                ));
            }
        }
        let reset = if flags {
            let spec = reset::tcgkit_spec(reset::PROBE_EVERY);
            let (status, counts) = probe_plugin(tcgkit, mode, &spec, &guest, &out)?;
            (!status.success() || !reset::reported(&counts)).then(|| {
                format!("`--plugin {spec}` did not run or report resets and counts ({status})")
            })
        } else {
            Some(no_flags.to_owned())
        };
        support.reset.extend(reset.map(|r| (mode, r)));
        for (config, reason) in probe_shared(root, tcgkit, mode, plugins)? {
            support
                .reasons
                .push((mode, Runner::SharedObject, config, reason));
        }
    }
    let _ = std::fs::remove_file(&out);
    Ok(support)
}

/// Which configurations' C plugins this tcgkit build runs in `mode` and
/// reports as QEMU does, tried on a tiny guest; the reason it does not,
/// per configuration.
fn probe_shared(
    root: &Path,
    tcgkit: &Path,
    mode: JitMode,
    plugins: &Path,
) -> Result<Vec<(Config, String)>> {
    let guest = probe_guest(root);
    let dir = std::env::temp_dir().join(format!("tcgkit-so-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut reasons = Vec::new();
    for config in CONFIGS {
        let Some((lib, args)) = config.qemu_plugin() else {
            continue;
        };
        let _ = std::fs::remove_file(dir.join(SHARED_LOG));
        let status = shared_command(tcgkit, Some(mode), plugins, config, &guest, &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running tcgkit with a C plugin")?;
        let text = std::fs::read_to_string(dir.join(SHARED_LOG)).unwrap_or_default();
        if !status.success() || !Counts::parse(&text).complete(config) {
            reasons.push((
                config,
                format!("`-plugin lib{lib}.so{args}` did not run or report counts ({status})"),
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(reasons)
}

/// Runs `guest exit=0` under `tcgkit run --plugin spec` in `mode`, its
/// report going to `out`; the exit status and the counts the report holds.
fn probe_plugin(
    tcgkit: &Path,
    mode: JitMode,
    spec: &str,
    guest: &Path,
    out: &Path,
) -> Result<(ExitStatus, Counts)> {
    let _ = std::fs::remove_file(out);
    let status = Command::new(tcgkit)
        .env(JIT_VAR, mode.value())
        .args(["run", "-U", JIT_VAR, "--plugin", spec, "--plugin-out"])
        .arg(out)
        .arg(guest)
        .arg("exit=0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| {
            format!(
                "probing tcgkit --plugin {spec} ({JIT_VAR}={})",
                mode.value()
            )
        })?;
    Ok((
        status,
        Counts::parse(&std::fs::read_to_string(out).unwrap_or_default()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_is_kept_per_mode() {
        let support = Support {
            reasons: vec![(
                JitMode::Jit,
                Runner::SharedObject,
                Config::MemCallback,
                "no".to_owned(),
            )],
            reset: vec![(JitMode::Interp, "never".to_owned())],
        };
        let get = |r, m| support.get(Config::MemCallback, r, m);
        assert_eq!(
            get(Runner::SharedObject, JitMode::Jit).as_deref(),
            Some("no")
        );
        assert_eq!(get(Runner::SharedObject, JitMode::Interp), None);
        assert_eq!(get(Runner::Bundled, JitMode::Jit), None);
        assert_eq!(support.reset(JitMode::Interp).as_deref(), Some("never"));
        assert_eq!(support.reset(JitMode::Jit), None);
    }
}
