//! What the bench runs: the guest programs, the plugin configurations, who
//! runs each configuration's plugin, and tcgkit's execution modes.

use crate::realworld::Layout;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// A guest program run the same way under both emulators.
pub(super) struct Workload {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub stdin: Option<PathBuf>,
    /// Several guest threads: instruction and memory counts depend on how
    /// they were scheduled (spins, futex retries), so they are reported
    /// but only the output must equal QEMU's.
    pub threaded: bool,
}

/// What is attached to the run: nothing, or one counting plugin.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Config {
    Bare,
    InsnInline,
    InsnCallback,
    /// The instruction callback with QEMU's side counting per vCPU too,
    /// as tcgkit's `insn` plugin always does (`InsnCallback` compares it
    /// with one global counter).
    InsnCallbackPerVcpu,
    MemCallback,
    BlockCount,
}

pub(super) const CONFIGS: [Config; 6] = [
    Config::Bare,
    Config::InsnInline,
    Config::InsnCallback,
    Config::InsnCallbackPerVcpu,
    Config::MemCallback,
    Config::BlockCount,
];

impl Config {
    pub fn label(self) -> &'static str {
        match self {
            Config::Bare => "bare",
            Config::InsnInline => "insn inline",
            Config::InsnCallback => "insn callback",
            Config::InsnCallbackPerVcpu => "insn callback per vCPU",
            Config::MemCallback => "mem callback",
            Config::BlockCount => "tb count",
        }
    }

    /// The configuration `--configs` names: its label, any case, with `-`
    /// or `_` for the spaces (`insn-callback-per-vcpu`).
    pub fn from_name(name: &str) -> Option<Config> {
        let wanted = name.trim().to_lowercase().replace(['-', '_'], " ");
        CONFIGS
            .into_iter()
            .find(|c| c.label().to_lowercase() == wanted)
    }

    /// The label of the rows where `runner` runs this configuration's
    /// plugin on tcgkit.
    pub fn row_label(self, runner: Runner) -> String {
        match runner {
            Runner::SharedObject => format!("{} (C .so)", self.label()),
            Runner::Qemu | Runner::Bundled => self.label().to_owned(),
        }
    }

    /// The C plugin (library stem) and its arguments.
    pub fn qemu_plugin(self) -> Option<(&'static str, &'static str)> {
        match self {
            Config::Bare => None,
            Config::InsnInline => Some(("insn", ",inline=true")),
            Config::InsnCallback => Some(("insn", ",inline=false")),
            Config::InsnCallbackPerVcpu => Some(("insn", ",inline=false,per_vcpu=true")),
            Config::MemCallback => Some(("mem", "")),
            Config::BlockCount => Some(("tb", "")),
        }
    }

    /// The equivalent `tcgkit run --plugin` argument.
    pub fn tcgkit_plugin(self) -> Option<&'static str> {
        match self {
            Config::Bare => None,
            Config::InsnInline => Some("insn,inline=true"),
            Config::InsnCallback | Config::InsnCallbackPerVcpu => Some("insn,inline=false"),
            Config::MemCallback => Some("mem"),
            Config::BlockCount => Some("bb,inline=true"),
        }
    }
}

/// Who runs a cell's plugin: QEMU with the C plugin, tcgkit with its
/// bundled plugin, or tcgkit with QEMU's C plugin (the same .so).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Runner {
    Qemu,
    Bundled,
    SharedObject,
}

/// tcgkit's two runners, in the order their rows appear.
pub(super) const TCGKIT_RUNNERS: [Runner; 2] = [Runner::Bundled, Runner::SharedObject];

impl Runner {
    /// Whose bare run this runner's plugin runs are compared with: the
    /// same emulator's.
    pub fn bare(self) -> Runner {
        match self {
            Runner::Qemu => Runner::Qemu,
            Runner::Bundled | Runner::SharedObject => Runner::Bundled,
        }
    }

    /// Who ran a side, as messages name it: `QEMU`, `tcgkit interp`,
    /// `tcgkit JIT (C .so)`.
    pub fn who(self, mode: JitMode) -> String {
        match self {
            Runner::Qemu => "QEMU".to_owned(),
            Runner::Bundled => format!("tcgkit {}", mode.label()),
            Runner::SharedObject => format!("tcgkit {} (C .so)", mode.label()),
        }
    }
}

/// The environment variable tcgkit reads its execution mode from.
pub(super) const JIT_VAR: &str = "TCGKIT_JIT";

/// How tcgkit executes guest code: `TCGKIT_JIT=off` or `on`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum JitMode {
    Interp,
    Jit,
}

impl JitMode {
    /// The value of [`JIT_VAR`] (and of tcgkit's `--jit`).
    pub fn value(self) -> &'static str {
        match self {
            JitMode::Interp => "off",
            JitMode::Jit => "on",
        }
    }

    /// How tables and messages name the mode.
    pub fn label(self) -> &'static str {
        match self {
            JitMode::Interp => "interp",
            JitMode::Jit => "JIT",
        }
    }

    /// The modes `--jit off|on|both` measures.
    pub fn parse_option(value: &str) -> Result<Vec<JitMode>> {
        Ok(match value {
            "off" => vec![JitMode::Interp],
            "on" => vec![JitMode::Jit],
            "both" => vec![JitMode::Interp, JitMode::Jit],
            other => bail!("--jit: `{other}` is not off, on or both"),
        })
    }
}

/// The tiny guest the probes run: `faults exit=0`.
pub(super) fn probe_guest(root: &Path) -> Workload {
    Workload {
        name: "probe".to_owned(),
        program: root.join("fixtures").join("guests").join("faults"),
        args: vec!["exit=0".to_owned()],
        stdin: None,
        threaded: false,
    }
}

/// The fixtures with real work in them, then the real-world programs when
/// `cargo xtask realworld` has built them.
pub(super) fn workloads(root: &Path, layout: &Layout) -> Vec<Workload> {
    let guests = root.join("fixtures").join("guests");
    let inputs = root.join("fixtures").join("realworld");
    let mut list = vec![
        Workload {
            name: "integer".to_owned(),
            program: guests.join("integer"),
            // A larger sieve than the default, so the run is not all start-up.
            args: vec!["3000000".to_owned()],
            stdin: None,
            threaded: false,
        },
        Workload {
            name: "float".to_owned(),
            program: guests.join("float"),
            args: Vec::new(),
            stdin: None,
            threaded: false,
        },
        Workload {
            name: "malloc".to_owned(),
            program: guests.join("malloc"),
            args: Vec::new(),
            stdin: None,
            threaded: false,
        },
        // 100 threads alive at once, each summing a million numbers with
        // the same code, side by side on both cores: each thread's engine
        // compiles the loop unless threads share compiled code.
        Workload {
            name: "many_threads 100".to_owned(),
            program: guests.join("many_threads"),
            args: vec!["100".to_owned(), "1000000".to_owned()],
            stdin: None,
            threaded: true,
        },
    ];
    match (
        layout.program("lua"),
        layout.program("zstd"),
        layout.program("sqlite3"),
    ) {
        (Some(lua), Some(zstd), Some(sqlite)) => {
            if let Some(zstd_mt) = layout.program("zstd-mt") {
                // Four worker threads on eight 50 KB jobs (a 2-core host).
                list.push(Workload {
                    name: "zstd -T4".to_owned(),
                    program: zstd_mt,
                    args: ["-T4", "-6", "-B50K", "-c"].map(str::to_owned).to_vec(),
                    stdin: Some(layout.corpus()),
                    threaded: true,
                });
            }
            list.push(Workload {
                name: "lua".to_owned(),
                program: lua,
                args: vec![inputs.join("workload.lua").display().to_string()],
                stdin: None,
                threaded: false,
            });
            list.push(Workload {
                name: "zstd -9".to_owned(),
                program: zstd,
                args: vec!["-9".to_owned(), "-c".to_owned()],
                stdin: Some(layout.corpus()),
                threaded: false,
            });
            list.push(Workload {
                name: "sqlite3".to_owned(),
                program: sqlite,
                args: vec![":memory:".to_owned()],
                stdin: Some(inputs.join("workload.sql")),
                threaded: false,
            });
        }
        _ => eprintln!(
            "bench-vs-qemu: real-world programs not built (`cargo xtask realworld`); fixtures only"
        ),
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_and_modes_are_named_on_the_command_line() {
        assert_eq!(Config::from_name("bare"), Some(Config::Bare));
        assert_eq!(
            Config::from_name("insn-callback-per-vcpu"),
            Some(Config::InsnCallbackPerVcpu)
        );
        assert_eq!(Config::from_name("tb_count"), Some(Config::BlockCount));
        assert_eq!(Config::from_name("mem callback"), Some(Config::MemCallback));
        assert_eq!(Config::from_name("insn"), None);
        for config in CONFIGS {
            assert_eq!(Config::from_name(config.label()), Some(config));
        }
        assert_eq!(JitMode::parse_option("off").unwrap(), [JitMode::Interp]);
        assert_eq!(JitMode::parse_option("on").unwrap(), [JitMode::Jit]);
        assert_eq!(
            JitMode::parse_option("both").unwrap(),
            [JitMode::Interp, JitMode::Jit]
        );
        assert!(JitMode::parse_option("yes").is_err());
        assert_eq!(Runner::SharedObject.who(JitMode::Jit), "tcgkit JIT (C .so)");
        assert_eq!(Runner::Qemu.who(JitMode::Jit), "QEMU");
    }
}
