//! The report: the headline (tcgkit's wall time over QEMU's per
//! configuration, each JIT mode), the nanoseconds each plugin kind adds,
//! the per-workload table, the disagreements, and the headline's chart.

use super::measure::{Cell, Side, agrees};
use super::plot::{self, Bar, Group};
use super::reset::{self, ResetCell};
use super::workloads::{CONFIGS, Config, JitMode, Runner, TCGKIT_RUNNERS, Workload};
use super::{CHART, machine, utc_now};
use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;

/// Workloads whose bare QEMU run is shorter than this are left out of the
/// summaries: their times are mostly process start-up and noise.
pub(super) const SUMMARY_MIN_SECONDS: f64 = 0.05;

/// Seconds as the tables show them, or `n/a`.
pub(super) fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"))
}

/// A ratio as the tables show it (`3.99x`), or `n/a`.
fn times(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}x"))
}

pub(super) fn geometric_mean(values: &[f64]) -> Option<f64> {
    let positive: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
    if positive.is_empty() {
        return None;
    }
    let log_sum: f64 = positive.iter().map(|v| v.ln()).sum();
    Some((log_sum / positive.len() as f64).exp())
}

/// tcgkit's wall time over QEMU's in one configuration, over the
/// summarised workloads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Versus {
    pub geomean: f64,
    /// The largest ratio, and the workload it was measured on.
    pub worst: f64,
    pub worst_workload: usize,
}

pub(super) struct Report<'a> {
    pub workloads: &'a [Workload],
    pub cells: &'a [Cell],
    /// tcgkit's modes measured, in the order of the columns.
    pub modes: &'a [JitMode],
    pub resets: &'a [ResetCell],
    /// The reset-dominated runs ([`reset::dense_workloads`]), apart: their
    /// cells name workloads of that list.
    pub dense_workloads: &'a [Workload],
    pub dense_resets: &'a [ResetCell],
    pub runs: usize,
    pub command: String,
}

impl<'a> Report<'a> {
    /// A report of `cells` over `workloads` in `modes`, with no reset
    /// sections, one run per cell.
    pub fn new(workloads: &'a [Workload], cells: &'a [Cell], modes: &'a [JitMode]) -> Self {
        Report {
            workloads,
            cells,
            modes,
            resets: &[],
            dense_workloads: &[],
            dense_resets: &[],
            runs: 1,
            command: "cargo xtask bench-vs-qemu".to_owned(),
        }
    }

    fn cell(&self, workload: usize, config: Config) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.workload == workload && c.config == config)
    }

    fn name(&self, workload: usize) -> &str {
        self.workloads
            .get(workload)
            .map_or("?", |w| w.name.as_str())
    }

    /// The configurations measured, in the tables' order.
    fn configs(&self) -> Vec<Config> {
        CONFIGS
            .into_iter()
            .filter(|c| self.cells.iter().any(|cell| cell.config == *c))
            .collect()
    }

    /// The headline's rows: each configuration measured, then its (C .so)
    /// row where tcgkit ran QEMU's plugin.
    fn rows(&self) -> Vec<(Config, Runner)> {
        let mut rows = Vec::new();
        for config in self.configs() {
            for runner in TCGKIT_RUNNERS {
                let ran = self.cells.iter().any(|cell| {
                    cell.config == config && cell.ours.iter().any(|o| o.runner == runner)
                });
                if ran {
                    rows.push((config, runner));
                }
            }
        }
        rows
    }

    /// Everything where the sides do not agree: counts, guest output. Each
    /// tcgkit side is compared with QEMU, and tcgkit's with each other.
    pub fn disagreements(&self) -> Vec<String> {
        let mut found = Vec::new();
        for cell in self.cells {
            let name = format!("{} / {}", self.name(cell.workload), cell.config.label());
            let sides = cell.sides();
            for (who, side) in &sides {
                for problem in &side.problems {
                    found.push(format!("{name}: {who} {problem}"));
                }
                if cell.config != Config::Bare && side.counts.is_none() {
                    found.push(format!("{name}: {who} reported no counts"));
                }
            }
            for (i, (a, x)) in sides.iter().enumerate() {
                for (b, y) in &sides[i + 1..] {
                    if x.first_output != y.first_output {
                        let status = |s: &Side| s.first_output.as_ref().map(|(_, st)| st.clone());
                        found.push(format!(
                            "{name}: guest output differs ({a} {:?}, {b} {:?})",
                            status(x),
                            status(y)
                        ));
                    }
                    // A threaded workload's counts vary with scheduling.
                    let differ = x
                        .counts
                        .zip(y.counts)
                        .filter(|_| !x.scheduling_dependent)
                        .filter(|(p, q)| p.compared(cell.config) != q.compared(cell.config));
                    if let Some((p, q)) = differ {
                        found.push(format!(
                            "{name}: counts differ: {a} {}, {b} {}",
                            p.show(cell.config),
                            q.show(cell.config)
                        ));
                    }
                }
            }
        }
        for (workloads, cells) in [
            (self.workloads, self.resets),
            (self.dense_workloads, self.dense_resets),
        ] {
            for cell in cells {
                let name = workloads
                    .get(cell.workload)
                    .map_or("?", |w| w.name.as_str());
                found.extend(cell.disagreements(name));
            }
        }
        found
    }

    /// The reference instruction and access counts of a workload (QEMU's,
    /// from any configuration that counts them).
    fn reference_counts(&self, workload: usize) -> (Option<u64>, Option<u64>) {
        let qemu = |config| self.cell(workload, config).and_then(|c| c.qemu.counts);
        let insns = [
            Config::InsnInline,
            Config::InsnCallback,
            Config::InsnCallbackPerVcpu,
            Config::BlockCount,
        ]
        .into_iter()
        .find_map(|config| qemu(config)?.insns);
        let accesses = qemu(Config::MemCallback).and_then(|c| Some(c.loads? + c.stores?));
        (insns, accesses)
    }

    /// Workloads long enough to enter the summaries: those whose bare QEMU
    /// run (or, with no bare cell, whose shortest QEMU run) takes
    /// [`SUMMARY_MIN_SECONDS`] or more; every workload measured when none
    /// does (a quick run of short ones).
    fn summarised(&self) -> Vec<usize> {
        let measured: Vec<usize> = (0..self.workloads.len())
            .filter(|w| self.cells.iter().any(|c| c.workload == *w))
            .collect();
        let long: Vec<usize> = measured
            .iter()
            .copied()
            .filter(|w| !self.is_short(*w))
            .collect();
        if long.is_empty() { measured } else { long }
    }

    /// True when workload `w`'s bare QEMU run (with no bare cell, its
    /// shortest QEMU run) takes under [`SUMMARY_MIN_SECONDS`].
    fn is_short(&self, w: usize) -> bool {
        let bare = self.cell(w, Config::Bare).and_then(|c| c.qemu.median());
        let any = || {
            self.cells
                .iter()
                .filter(|c| c.workload == w)
                .filter_map(|c| c.qemu.median())
                .min_by(f64::total_cmp)
        };
        bare.or_else(any).is_none_or(|t| t < SUMMARY_MIN_SECONDS)
    }

    /// The workloads the summaries leave out, as the text names them.
    fn left_out(&self) -> String {
        let kept = self.summarised();
        let left: Vec<&str> = (0..self.workloads.len())
            .filter(|w| !kept.contains(w))
            .map(|w| self.name(w))
            .collect();
        if left.is_empty() && !kept.is_empty() && kept.iter().all(|w| self.is_short(*w)) {
            "none (every workload measured is shorter, so all are kept)".to_owned()
        } else if left.is_empty() {
            "none".to_owned()
        } else {
            left.join(", ")
        }
    }

    /// tcgkit's median wall time over QEMU's for `config` run by `runner`
    /// in `mode`: geometric mean and largest over the summarised workloads.
    pub fn versus_qemu(&self, config: Config, runner: Runner, mode: JitMode) -> Option<Versus> {
        let ratios: Vec<(usize, f64)> = self
            .summarised()
            .into_iter()
            .filter_map(|w| {
                let cell = self.cell(w, config)?;
                let qemu = cell.qemu.median().filter(|q| *q > 0.0)?;
                let ours = cell.side(runner, mode)?.median()?;
                Some((w, ours / qemu))
            })
            .collect();
        let values: Vec<f64> = ratios.iter().map(|(_, r)| *r).collect();
        let geomean = geometric_mean(&values)?;
        let (worst_workload, worst) = ratios.into_iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
        Some(Versus {
            geomean,
            worst,
            worst_workload,
        })
    }

    /// The median times of `runner`'s bare run and its run of `config` in
    /// `mode` on workload `w`.
    fn bare_and(
        &self,
        w: usize,
        config: Config,
        runner: Runner,
        mode: JitMode,
    ) -> Option<(f64, f64)> {
        let bare = self
            .cell(w, Config::Bare)?
            .side(runner.bare(), mode)?
            .median()?;
        let cell = self.cell(w, config)?.side(runner, mode)?.median()?;
        Some((bare, cell))
    }

    /// Nanoseconds `config` run by `runner` in `mode` adds per guest
    /// instruction (per memory access for the memory callback) over the
    /// same emulator's bare run in the same mode, median over workloads.
    pub fn added_cost(&self, config: Config, runner: Runner, mode: JitMode) -> Option<f64> {
        let mut added = Vec::new();
        for w in self.summarised() {
            let (insns, accesses) = self.reference_counts(w);
            let per = if config == Config::MemCallback {
                accesses
            } else {
                insns
            };
            let (Some(per), Some((bare, cell))) = (per, self.bare_and(w, config, runner, mode))
            else {
                continue;
            };
            if per > 0 {
                added.push((cell - bare) * 1e9 / per as f64);
            }
        }
        super::measure::median(&added)
    }

    pub fn markdown(&self) -> Result<String> {
        let mut s = String::new();
        writeln!(s, "## Side by side with QEMU\n")?;
        let modes: Vec<String> = self
            .modes
            .iter()
            .map(|m| format!("{} = `TCGKIT_JIT={}`", m.label(), m.value()))
            .collect();
        writeln!(
            s,
            "Produced by `{}` on {}, {}. **tcgkit's wall time over QEMU's** \
             for the same guest and plugin (lower is better; 1.00x is QEMU's \
             time), per configuration: the geometric mean over the workloads \
             and the worst of them. tcgkit modes: {}. Workloads whose bare \
             QEMU run takes under {:.0} ms are left out of this and the next \
             table (start-up dominates them): {}.\n",
            self.command,
            utc_now(),
            machine(),
            modes.join(", "),
            SUMMARY_MIN_SECONDS * 1e3,
            self.left_out(),
        )?;
        self.headline(&mut s)?;
        writeln!(
            s,
            "\n![tcgkit / QEMU wall time per configuration]({CHART})\n"
        )?;
        writeln!(
            s,
            "{} run(s) per cell, QEMU and tcgkit (each mode) alternating; each \
             time is the median wall time in seconds (process start to exit). \
             QEMU runs the C plugins in `bench/qemu-plugins/`, tcgkit its \
             bundled `insn`, `mem` and `bb` plugins; in the rows marked (C \
             .so), tcgkit runs the very .so QEMU runs, with the same arguments \
             (`tcgkit run -plugin PATH,ARGS -d plugin -D LOG`, through \
             crates/qemu-plugin). The counts each side reported must agree, in \
             every mode (block counts excepted: where a block ends is each \
             translator's choice).\n",
            self.runs
        )?;
        self.added_table(&mut s)?;
        self.workload_table(&mut s)?;
        if !self.resets.is_empty() {
            s.push_str(&reset::markdown(self.workloads, self.resets)?);
        }
        if !self.dense_resets.is_empty() {
            s.push_str(&reset::dense_markdown(
                self.dense_workloads,
                self.dense_resets,
            )?);
        }
        let mut unavailable = Vec::new();
        for &mode in self.modes {
            for runner in TCGKIT_RUNNERS {
                for config in CONFIGS {
                    let cell = self.cells.iter().find(|cell| cell.config == config);
                    let ours = cell.and_then(|cell| cell.ours(runner, mode));
                    if let Some(reason) = ours.and_then(|o| o.unavailable.as_ref()) {
                        unavailable.push(format!(
                            "{}, {}: {reason}",
                            config.row_label(runner),
                            mode.label()
                        ));
                    }
                }
            }
        }
        if !unavailable.is_empty() {
            writeln!(
                s,
                "\nNot measured on tcgkit (n/a): {}.",
                unavailable.join("; ")
            )?;
        }
        let disagreements = self.disagreements();
        if !disagreements.is_empty() {
            writeln!(s, "\nDisagreements found by this run:\n")?;
            for d in &disagreements {
                writeln!(s, "- {d}")?;
            }
        }
        writeln!(
            s,
            "\nTo re-take: `cargo xtask realworld` (once, for the real-world \
             workloads), then `cargo xtask bench-vs-qemu --flush`."
        )?;
        Ok(s)
    }

    /// tcgkit/QEMU per configuration and mode: geometric mean and worst.
    fn headline(&self, s: &mut String) -> Result<()> {
        let mut header = "| config |".to_owned();
        for mode in self.modes {
            let m = mode.label();
            write!(header, " {m}/QEMU, geomean | {m}/QEMU, worst |")?;
        }
        writeln!(s, "{header}")?;
        writeln!(s, "|---|{}", "---:|".repeat(2 * self.modes.len()))?;
        for (config, runner) in self.rows() {
            let mut row = format!("| {} |", config.row_label(runner));
            for &mode in self.modes {
                match self.versus_qemu(config, runner, mode) {
                    Some(v) => write!(
                        row,
                        " {} | {} ({}) |",
                        times(Some(v.geomean)),
                        times(Some(v.worst)),
                        self.name(v.worst_workload)
                    )?,
                    None => row.push_str(" n/a | n/a |"),
                }
            }
            writeln!(s, "{row}")?;
        }
        Ok(())
    }

    /// Nanoseconds added per guest instruction (per access), per plugin
    /// kind and mode.
    fn added_table(&self, s: &mut String) -> Result<()> {
        writeln!(
            s,
            "Per plugin kind: the nanoseconds added per guest instruction (per \
             memory access for the memory callback) over the same emulator's \
             bare run in the same mode, median over workloads, using QEMU's \
             counts; a (C .so) row is tcgkit running QEMU's C plugin, over \
             tcgkit's bare run, beside QEMU running it.\n"
        )?;
        let mut header = "| config | QEMU ns added |".to_owned();
        for mode in self.modes {
            write!(header, " tcgkit {} ns added |", mode.label())?;
        }
        writeln!(s, "{header}")?;
        writeln!(s, "|---|---:|{}", "---:|".repeat(self.modes.len()))?;
        let ns = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
        for (config, runner) in self.rows() {
            if config == Config::Bare {
                continue;
            }
            let qemu = self.added_cost(config, Runner::Qemu, JitMode::Interp);
            let mut row = format!("| {} | {} |", config.row_label(runner), ns(qemu));
            for &mode in self.modes {
                write!(row, " {} |", ns(self.added_cost(config, runner, mode)))?;
            }
            writeln!(s, "{row}")?;
        }
        Ok(())
    }

    /// Every cell: QEMU's time and tcgkit's in each mode, the ratios, the
    /// counts and whether they agree.
    fn workload_table(&self, s: &mut String) -> Result<()> {
        writeln!(s, "\nPer workload:\n")?;
        let mut header = "| workload | config | QEMU s |".to_owned();
        for mode in self.modes {
            write!(header, " tcgkit {} s |", mode.label())?;
        }
        for mode in self.modes {
            write!(header, " {}/QEMU |", mode.label())?;
        }
        header.push_str(" QEMU count | tcgkit count | agree |");
        writeln!(s, "{header}")?;
        writeln!(
            s,
            "|---|---|---:|{}---:|---:|:---:|",
            "---:|".repeat(2 * self.modes.len())
        )?;
        for cell in self.cells {
            let workload = self.name(cell.workload);
            let q = cell.qemu.median();
            let qc = cell
                .qemu
                .counts
                .map(|c| c.show(cell.config))
                .unwrap_or_default();
            // A row for the bundled plugin; one for the C plugin after it.
            for runner in TCGKIT_RUNNERS {
                let ours: Vec<_> = self
                    .modes
                    .iter()
                    .filter_map(|m| cell.ours(runner, *m))
                    .collect();
                if ours.is_empty() {
                    continue;
                }
                let mut row = format!(
                    "| {workload} | {} | {} |",
                    cell.config.row_label(runner),
                    secs(q)
                );
                let medians: Vec<Option<f64>> = self
                    .modes
                    .iter()
                    .map(|m| cell.side(runner, *m).and_then(Side::median))
                    .collect();
                for t in &medians {
                    write!(row, " {} |", secs(*t))?;
                }
                for t in &medians {
                    let ratio = match (q, t) {
                        (Some(q), Some(t)) if q > 0.0 => Some(t / q),
                        _ => None,
                    };
                    write!(row, " {} |", times(ratio))?;
                }
                // The count once when every mode reported the same.
                let mut counts: Vec<(JitMode, String)> = Vec::new();
                for o in &ours {
                    let shown = match &o.side {
                        Some(side) => side.counts.map(|c| c.show(cell.config)).unwrap_or_default(),
                        None => "n/a".to_owned(),
                    };
                    counts.push((o.mode, shown));
                }
                let tc = if counts.iter().all(|(_, c)| *c == counts[0].1) {
                    counts[0].1.clone()
                } else {
                    let each: Vec<String> = counts
                        .iter()
                        .map(|(m, c)| format!("{}: {c}", m.label()))
                        .collect();
                    each.join("; ")
                };
                let measured: Vec<(JitMode, &Side)> = ours
                    .iter()
                    .filter_map(|o| Some((o.mode, o.side.as_ref()?)))
                    .collect();
                let failed: Vec<&str> = measured
                    .iter()
                    .filter(|(_, side)| !agrees(cell.config, &cell.qemu, side))
                    .map(|(m, _)| m.label())
                    .collect();
                let agree = if measured.is_empty() {
                    "n/a".to_owned()
                } else if failed.is_empty() && cell.qemu.scheduling_dependent {
                    "yes (output; counts vary with scheduling)".to_owned()
                } else if failed.is_empty() {
                    "yes".to_owned()
                } else if self.modes.len() > 1 {
                    format!("**NO** ({})", failed.join(", "))
                } else {
                    "**NO**".to_owned()
                };
                writeln!(s, "{row} {qc} | {tc} | {agree} |")?;
            }
        }
        Ok(())
    }

    /// The headline's bars: per configuration, tcgkit/QEMU's geometric
    /// mean for each runner and mode, a whisker up to the worst workload.
    pub fn chart_groups(&self) -> (Vec<String>, Vec<Group>) {
        let mut series = Vec::new();
        for runner in TCGKIT_RUNNERS {
            for &mode in self.modes {
                series.push(runner.who(mode));
            }
        }
        let rows = self.rows();
        let groups = self
            .configs()
            .into_iter()
            .map(|config| {
                let mut bars = Vec::new();
                for runner in TCGKIT_RUNNERS {
                    for &mode in self.modes {
                        bars.push(rows.contains(&(config, runner)).then(|| {
                            let v = self.versus_qemu(config, runner, mode);
                            Bar {
                                value: v.map(|v| v.geomean),
                                high: v.map(|v| v.worst),
                            }
                        }));
                    }
                }
                (config.label().to_owned(), bars)
            })
            .collect();
        (series, groups)
    }

    /// The headline as grouped bars (docs/bench-vs-qemu.png).
    pub fn chart(&self, path: &Path) -> Result<()> {
        let (series, groups) = self.chart_groups();
        let series: Vec<&str> = series.iter().map(String::as_str).collect();
        plot::grouped_bars(
            path,
            "tcgkit / QEMU wall time per configuration \
             (bar: geometric mean over workloads; line: worst workload)",
            "tcgkit time / QEMU time (x)",
            &series,
            &groups,
            Some((1.0, "1.00x = QEMU's time")),
        )
    }
}

#[cfg(test)]
mod tests;
