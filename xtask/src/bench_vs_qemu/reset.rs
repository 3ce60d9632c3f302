//! The cost of one reset requested from inside a callback. Each side runs
//! its `reset` plugin on the same workload twice: never resetting
//! (`every=0`) and resetting every N guest instructions from a block
//! execution callback, registering everything again in the completion.
//! Cost per reset = (fastest run resetting - fastest run with `every=0`) /
//! resets: the flush and the re-translation it causes. The fastest of at
//! least [`MIN_RUNS`] runs, not the median: tcgkit's resets add tens of
//! milliseconds to runs of seconds, less than this machine's run-to-run
//! noise, and noise only ever adds time. The plugins trigger on instruction
//! counts, which do not depend on where each translator ends its blocks, so
//! both sides must agree on the number of resets as well as on the
//! instructions. The reset-dominated runs ([`dense_workloads`]) measure the
//! same with resets so close together that they take most of the run on
//! both sides. tcgkit runs in each JIT mode measured, a row per mode.

use super::measure::{
    Counts, QEMU_LOG, Side, TCGKIT_LOG, measure as measure_once, median, qemu_plugin_command,
    tcgkit_plugin_command,
};
use super::report::secs;
use super::workloads::{JitMode, Workload};
use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;

/// The fewest runs of each kind the reset section makes, whatever
/// `--runs` says: its figures are differences of minima.
pub const MIN_RUNS: usize = 7;
/// Resets a measured run aims at, so their cost stands out of the noise
/// (QEMU's cost about a millisecond each on the real-world workloads).
const TARGET_RESETS: u64 = 2_000;
/// The fewest instructions between two resets: more than a block holds
/// (QEMU stops a block at 512 instructions), so no block skips a
/// threshold on one side only.
const MIN_EVERY: u64 = 10_000;
/// `every` of the probes, whose guest runs a few tens of thousands of
/// instructions.
pub const PROBE_EVERY: u64 = 1_000;
/// `every` of the reset-dominated runs: so few instructions between
/// resets that re-translating takes most of each resetting run on both
/// emulators, so the difference of the fastest runs is mostly signal
/// (still more than a block holds on either side).
pub const DENSE_EVERY: u64 = 1_000;

/// The guests of the reset-dominated runs: about 1.5-2.2 M
/// instructions, 1,500-2,200 resets at [`DENSE_EVERY`], 35-80 blocks
/// re-translated after each.
pub fn dense_workloads(root: &Path) -> Vec<Workload> {
    let guests = root.join("fixtures").join("guests");
    let guest = |name: &str, args: &[&str]| Workload {
        name: std::iter::once(name)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" "),
        program: guests.join(name),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        stdin: None,
        threaded: false,
    };
    vec![guest("float", &[]), guest("malloc", &["600"])]
}

/// The C plugin's arguments (appended to its library path).
pub fn qemu_args(every: u64) -> String {
    format!(",every={every}")
}

/// The tcgkit `--plugin` argument.
pub fn tcgkit_spec(every: u64) -> String {
    format!("reset,every={every}")
}

/// True when a reset plugin's report holds everything compared.
pub fn reported(counts: &Counts) -> bool {
    counts.resets.is_some() && counts.insns.is_some() && counts.cached_mean.is_some()
}

/// Instructions between resets for a workload of `insns` instructions.
pub fn every_for(insns: u64) -> u64 {
    (insns / TARGET_RESETS).max(MIN_EVERY)
}

/// Where the two emulators and their plugins are.
pub struct Sides<'a> {
    pub plugins: &'a Path,
    pub tcgkit: &'a Path,
    pub scratch: &'a Path,
}

/// One emulator's runs: never resetting, and resetting every N.
#[derive(Default)]
pub struct Pair {
    pub base: Side,
    pub reset: Side,
}

impl Pair {
    /// Resets the resetting run completed.
    pub fn resets(&self) -> Option<u64> {
        self.reset.counts?.resets
    }

    /// Seconds one reset costs.
    pub fn per_reset(&self) -> Option<f64> {
        let resets = self.resets().filter(|r| *r > 0)?;
        Some((self.reset.fastest()? - self.base.fastest()?) / resets as f64)
    }

    /// How far [`Pair::per_reset`] may be off: the spread (max - min) of
    /// the runs of both kinds, halved, per reset. Needs two runs of each.
    pub fn noise(&self) -> Option<f64> {
        let resets = self.resets().filter(|r| *r > 0)?;
        let spread = |side: &Side| {
            let finite = || side.seconds.iter().copied().filter(|x| x.is_finite());
            let max = finite().fold(f64::NEG_INFINITY, f64::max);
            let min = finite().fold(f64::INFINITY, f64::min);
            (finite().count() >= 2).then_some(max - min)
        };
        Some((spread(&self.base)? + spread(&self.reset)?) / 2.0 / resets as f64)
    }

    /// Problems and count mismatches within this side.
    fn problems(&self, side: &str, every: u64, found: &mut Vec<String>) {
        for problem in &self.base.problems {
            found.push(format!("{side} every=0: {problem}"));
        }
        for problem in &self.reset.problems {
            found.push(format!("{side} every={every}: {problem}"));
        }
        let base = self.base.counts.and_then(|c| c.insns);
        let reset = self.reset.counts.and_then(|c| c.insns);
        match (base, reset) {
            (Some(b), Some(r)) if b != r => found.push(format!(
                "{side} counts {r} instructions when resetting, {b} without"
            )),
            (Some(_), Some(_)) => {}
            _ => found.push(format!("{side} reported no counts")),
        }
        if self.resets().is_none() {
            found.push(format!("{side} reported no resets"));
        }
    }
}

/// tcgkit's runs of a reset cell in one JIT mode.
pub struct Ours {
    pub mode: JitMode,
    /// None when tcgkit cannot run the measurement in this mode.
    pub pair: Option<Pair>,
    /// Why tcgkit has no figures.
    pub unavailable: Option<String>,
}

impl Ours {
    pub fn new(mode: JitMode, unavailable: Option<String>) -> Ours {
        Ours {
            mode,
            pair: unavailable.is_none().then(Pair::default),
            unavailable,
        }
    }
}

/// The reset measurement of one workload.
pub struct ResetCell {
    pub workload: usize,
    /// Guest instructions between resets (0: not measured).
    pub every: u64,
    pub qemu: Pair,
    /// tcgkit's runs, one per JIT mode measured.
    pub tcgkit: Vec<Ours>,
}

impl ResetCell {
    /// Where the sides disagree, or a side disagrees with itself.
    pub fn disagreements(&self, workload: &str) -> Vec<String> {
        let mut found = self.qemu_problems();
        for ours in &self.tcgkit {
            found.extend(self.ours_disagreements(ours));
        }
        found
            .into_iter()
            .map(|d| format!("{workload} / reset: {d}"))
            .collect()
    }

    /// True when tcgkit measured `ours`' mode and nothing disagrees there.
    fn agrees(&self, ours: &Ours) -> bool {
        ours.pair.is_some()
            && self.qemu_problems().is_empty()
            && self.ours_disagreements(ours).is_empty()
    }

    fn qemu_problems(&self) -> Vec<String> {
        let mut found = Vec::new();
        if self.every == 0 {
            found.push("not measured: QEMU's plugin reported no instruction count".to_owned());
        }
        self.qemu.problems("QEMU", self.every, &mut found);
        found
    }

    /// Where tcgkit in `ours`' mode disagrees with itself or with QEMU.
    fn ours_disagreements(&self, ours: &Ours) -> Vec<String> {
        let mut found = Vec::new();
        let Some(pair) = &ours.pair else {
            return found;
        };
        let who = format!("tcgkit {}", ours.mode.label());
        pair.problems(&who, self.every, &mut found);
        for (label, q, t) in [
            ("every=0", &self.qemu.base, &pair.base),
            ("resetting", &self.qemu.reset, &pair.reset),
        ] {
            if q.first_output != t.first_output {
                found.push(format!("{label}: guest output differs ({who})"));
            }
        }
        let insns = |s: &Side| s.counts.and_then(|c| c.insns);
        if insns(&self.qemu.reset) != insns(&pair.reset) {
            found.push(format!(
                "instructions differ: QEMU {}, {who} {}",
                show(insns(&self.qemu.reset)),
                show(insns(&pair.reset))
            ));
        }
        if self.qemu.resets() != pair.resets() {
            found.push(format!(
                "resets differ: QEMU {}, {who} {}",
                show(self.qemu.resets()),
                show(pair.resets())
            ));
        }
        found
    }
}

fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "?".to_owned(), |v| v.to_string())
}

/// Runs `workload` `runs` times in each of the ways, alternating QEMU and
/// tcgkit (in each of `modes`, with why tcgkit cannot run a mode if it
/// cannot), resetting every `every` instructions, or when that is `None`,
/// every N from QEMU's first instruction count ([`every_for`]).
pub fn measure(
    sides: &Sides<'_>,
    index: usize,
    workload: &Workload,
    runs: usize,
    modes: &[(JitMode, Option<String>)],
    every: Option<u64>,
) -> Result<ResetCell> {
    let mut cell = ResetCell {
        workload: index,
        every: every.unwrap_or(0),
        qemu: Pair::default(),
        tcgkit: modes
            .iter()
            .map(|(mode, why)| Ours::new(*mode, why.clone()))
            .collect(),
    };
    let qemu_log = sides.scratch.join(QEMU_LOG);
    let tcgkit_log = sides.scratch.join(TCGKIT_LOG);
    let qemu = |every: u64| {
        let plugin = Some(("reset", qemu_args(every)));
        qemu_plugin_command(sides.plugins, plugin, workload, sides.scratch)
    };
    let ours = |mode: JitMode, every: u64| {
        let spec = tcgkit_spec(every);
        tcgkit_plugin_command(
            sides.tcgkit,
            Some(mode),
            Some(&spec),
            workload,
            sides.scratch,
        )
    };
    for _ in 0..runs {
        measure_once(&mut cell.qemu.base, qemu(0), workload, &qemu_log)?;
        if cell.every == 0 {
            match cell.qemu.base.counts.and_then(|c| c.insns) {
                Some(insns) => cell.every = every_for(insns),
                // Reported as a disagreement; nothing to compare.
                None => return Ok(cell),
            }
        }
        for o in &mut cell.tcgkit {
            if let Some(pair) = o.pair.as_mut() {
                measure_once(&mut pair.base, ours(o.mode, 0), workload, &tcgkit_log)?;
            }
        }
        measure_once(&mut cell.qemu.reset, qemu(cell.every), workload, &qemu_log)?;
        for o in &mut cell.tcgkit {
            if let Some(pair) = o.pair.as_mut() {
                let cmd = ours(o.mode, cell.every);
                measure_once(&mut pair.reset, cmd, workload, &tcgkit_log)?;
            }
        }
    }
    Ok(cell)
}

/// The section of the report: one row per workload and mode, then the
/// medians.
pub fn markdown(workloads: &[Workload], cells: &[ResetCell]) -> Result<String> {
    let mut s = String::new();
    writeln!(s, "\n### Reset from inside a callback\n")?;
    writeln!(
        s,
        "Each side runs its `reset` plugin (`bench/qemu-plugins/reset.c` on \
         QEMU, the bundled `reset` on tcgkit): an inline add per instruction \
         and a callback on every block entry, which resets the plugin \
         (`qemu_plugin_reset`, `PluginHandle::reset`) every N guest \
         instructions; the completion registers everything again. Cost of \
         one reset, with what it makes the next blocks cost (QEMU: the \
         flush and re-translation; tcgkit: the re-instrumentation and \
         planning the blocks again, their decoded code kept) = (fastest \
         run resetting - fastest run with `every=0`, which makes the same \
         check on every block and never reaches its threshold) / resets, \
         with N = max(instructions / {TARGET_RESETS}, {MIN_EVERY}) and at \
         least {MIN_RUNS} runs of each (the fastest, because tcgkit's resets \
         add less time than this machine's run-to-run noise, and noise only \
         adds). Blocks cached = \
         blocks whose `tb_trans` ran since the previous reset when a reset \
         ran (mean). QEMU/tcgkit = how many times cheaper a \
         tcgkit reset is; with several runs, ± is half the spread of the \
         runs per reset, and (≥) the ratio should tcgkit's cost be that much \
         higher. A row per tcgkit mode (interp: `TCGKIT_JIT=off`, JIT: `on`), \
         the QEMU columns repeated.\n"
    )?;
    table(&mut s, workloads, cells)?;
    Ok(s)
}

/// The reset-dominated runs' section: the same measurement with
/// [`DENSE_EVERY`] on smaller guests.
pub fn dense_markdown(workloads: &[Workload], cells: &[ResetCell]) -> Result<String> {
    let mut s = String::new();
    writeln!(s, "\n#### Reset-dominated runs\n")?;
    writeln!(
        s,
        "The same measurement with N = {DENSE_EVERY} on guests of 1.5-2.2 M \
         instructions: resets then take most of each resetting run on both \
         emulators, so the figures stand out of the run-to-run noise that \
         the rows above are within. Fewer blocks are re-translated after \
         each reset than on the larger workloads above.\n"
    )?;
    table(&mut s, workloads, cells)?;
    Ok(s)
}

/// One row per cell and mode, then the medians over them.
fn table(s: &mut String, workloads: &[Workload], cells: &[ResetCell]) -> Result<()> {
    writeln!(
        s,
        "| workload | tcgkit | N | resets QEMU / tcgkit | blocks cached QEMU / tcgkit | \
         QEMU s, fastest (0 / N) | tcgkit s, fastest (0 / N) | QEMU µs/reset | tcgkit µs/reset | \
         QEMU/tcgkit | agree |"
    )?;
    writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")?;
    let micros = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{:.1}", v * 1e6));
    let cost = |p: Option<&Pair>| {
        let cost = micros(p.and_then(Pair::per_reset));
        match p.and_then(Pair::noise) {
            Some(noise) => format!("{cost} ± {:.1}", noise * 1e6),
            None => cost,
        }
    };
    let cached = |p: Option<&Pair>| {
        p.and_then(|p| p.reset.counts?.cached_mean)
            .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.1}"))
    };
    let times = |p: Option<&Pair>| match p {
        Some(p) => format!("{} / {}", secs(p.base.fastest()), secs(p.reset.fastest())),
        None => "n/a".to_owned(),
    };
    let mut qemu_costs = Vec::new();
    // Each mode's costs, in the order the modes first appear.
    let mut our_costs: Vec<(JitMode, Vec<f64>)> = Vec::new();
    for cell in cells {
        let name = workloads
            .get(cell.workload)
            .map_or("?", |w| w.name.as_str());
        let q = cell.qemu.per_reset();
        qemu_costs.extend(q);
        for ours in &cell.tcgkit {
            let pair = ours.pair.as_ref();
            let t = pair.and_then(Pair::per_reset);
            match our_costs.iter_mut().find(|(m, _)| *m == ours.mode) {
                Some((_, costs)) => costs.extend(t),
                None => our_costs.push((ours.mode, t.into_iter().collect())),
            }
            let agree = match pair {
                None => "n/a",
                Some(_) if cell.agrees(ours) => "yes",
                Some(_) => "**NO**",
            };
            writeln!(
                s,
                "| {name} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {agree} |",
                ours.mode.label(),
                cell.every,
                show(cell.qemu.resets()),
                pair.map_or_else(|| "n/a".to_owned(), |p| show(p.resets())),
                cached(Some(&cell.qemu)),
                cached(pair),
                times(Some(&cell.qemu)),
                times(pair),
                cost(Some(&cell.qemu)),
                cost(pair),
                bounded_ratio(q, t, pair.and_then(Pair::noise)),
            )?;
        }
    }
    let q = median(&qemu_costs);
    let ours: Vec<String> = our_costs
        .iter()
        .map(|(mode, costs)| {
            let t = median(costs);
            format!(
                "tcgkit {} {} µs (QEMU/tcgkit {})",
                mode.label(),
                micros(t),
                ratio(q, t)
            )
        })
        .collect();
    writeln!(
        s,
        "\nMedian over workloads: QEMU {} µs per reset; {}.",
        micros(q),
        ours.join("; ")
    )?;
    let mut unavailable: Vec<String> = Vec::new();
    for ours in cells.iter().flat_map(|c| &c.tcgkit) {
        if let Some(reason) = &ours.unavailable {
            let line = format!("{}: {reason}", ours.mode.label());
            if !unavailable.contains(&line) {
                unavailable.push(line);
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
    Ok(())
}

/// `qemu / ours` when both costs are positive (a cost at or below zero
/// is lost in the noise of the two runs it is the difference of).
fn ratio(qemu: Option<f64>, ours: Option<f64>) -> String {
    match (qemu, ours) {
        (Some(q), Some(t)) if q > 0.0 && t > 0.0 => format!("{:.1}x", q / t),
        _ => "n/a".to_owned(),
    }
}

/// [`ratio`], then the ratio should tcgkit's cost be higher by `noise`:
/// the claim that survives the noise (alone when the cost is lost in it).
pub fn bounded_ratio(qemu: Option<f64>, ours: Option<f64>, noise: Option<f64>) -> String {
    let Some(noise) = noise.filter(|n| *n > 0.0) else {
        return ratio(qemu, ours);
    };
    match (qemu, ours) {
        (Some(q), Some(t)) if q > 0.0 && t > 0.0 => {
            format!("{:.1}x (≥ {:.1}x)", q / t, q / (t + noise))
        }
        (Some(q), Some(t)) if q > 0.0 => format!("≥ {:.1}x", q / (t.max(0.0) + noise)),
        _ => "n/a".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::Report;
    use super::super::testing::{one_workload, side};
    use super::*;

    fn log(resets: u64, insns: u64) -> Option<Counts> {
        Some(Counts::parse(&format!(
            "resets: {resets}\ntotal insns: {insns}\nblocks cached at reset: mean 20.0, max 40\n"
        )))
    }

    fn pair(base: f64, reset: f64, resets: u64, insns: u64) -> Pair {
        Pair {
            base: side(base, log(0, insns), b"out"),
            reset: side(reset, log(resets, insns), b"out"),
        }
    }

    fn ours(mode: JitMode, pair: Pair) -> Ours {
        Ours {
            mode,
            pair: Some(pair),
            unavailable: None,
        }
    }

    #[test]
    fn reset_reports_are_read() {
        let qemu_log = "resets: 500\ntotal insns: 1000000\nblocks executed: 9\n\
                        blocks translated: 7000\nblocks cached at reset: mean 12.5, max 527\n";
        let c = Counts::parse(qemu_log);
        assert_eq!(
            (c.resets, c.insns, c.cached_max),
            (Some(500), Some(1_000_000), Some(527))
        );
        assert_eq!(c.cached_mean, Some(12.5));
        assert!(reported(&c));
        assert!(!reported(&Counts::parse("total insns: 5\n")));
        assert_eq!(
            Counts::parse("blocks cached at reset: mean NaN, max 1\n").cached_mean,
            None
        );
        // A few hundred resets, never fewer than 10k instructions apart.
        assert_eq!(every_for(104_673_150), 52_336);
        assert_eq!(every_for(2_000_000), 10_000);
    }

    #[test]
    fn resets_are_costed_and_bounded() {
        // No resets: no cost, rather than a division by zero.
        assert_eq!(pair(1.0, 1.0, 0, 5).per_reset(), None);
        // Noise: half the spread of both kinds of runs, per reset.
        let mut noisy = pair(1.0, 1.1, 500, 10);
        assert_eq!(noisy.noise(), None, "one run has no spread");
        noisy.base.seconds.push(1.02);
        noisy.reset.seconds.push(1.14);
        // The fastest run of each kind: (1.1 - 1.0) / 500.
        assert!((noisy.per_reset().unwrap() - 0.1 / 500.0).abs() < 1e-12);
        assert!((noisy.noise().unwrap() - 0.03 / 500.0).abs() < 1e-12);
        assert_eq!(
            bounded_ratio(Some(200e-6), Some(4e-6), Some(6e-6)),
            "50.0x (≥ 20.0x)"
        );
        assert_eq!(
            bounded_ratio(Some(200e-6), Some(-1e-6), Some(10e-6)),
            "≥ 20.0x"
        );
        assert_eq!(bounded_ratio(Some(200e-6), Some(4e-6), None), "50.0x");
        assert_eq!(bounded_ratio(None, Some(4e-6), Some(1e-6)), "n/a");
    }

    #[test]
    fn each_mode_gets_a_row_and_its_disagreements() {
        let workloads = one_workload();
        // QEMU: 0.1 s more for 500 resets = 200 µs each; tcgkit 4 µs each
        // interpreting, 10 µs with the JIT.
        let good = ResetCell {
            workload: 0,
            every: 20_000,
            qemu: pair(1.0, 1.1, 500, 10_000_000),
            tcgkit: vec![
                ours(JitMode::Interp, pair(2.0, 2.002, 500, 10_000_000)),
                ours(JitMode::Jit, pair(0.5, 0.505, 500, 10_000_000)),
            ],
        };
        assert!((good.qemu.per_reset().unwrap() - 200e-6).abs() < 1e-12);
        let interp = good.tcgkit[0].pair.as_ref().unwrap();
        assert!((interp.per_reset().unwrap() - 4e-6).abs() < 1e-12);
        assert!(
            good.disagreements("w").is_empty(),
            "{:?}",
            good.disagreements("w")
        );
        // The interpreter agrees; the JIT loses an instruction and a reset
        // and prints something else.
        let bad = ResetCell {
            workload: 0,
            every: 20_000,
            qemu: pair(1.0, 1.1, 500, 10_000_000),
            tcgkit: vec![
                ours(JitMode::Interp, pair(2.0, 2.1, 500, 10_000_000)),
                ours(
                    JitMode::Jit,
                    Pair {
                        base: side(2.0, log(0, 10_000_000), b"out"),
                        reset: side(2.1, log(499, 10_000_001), b"other"),
                    },
                ),
            ],
        };
        let found = bad.disagreements("w");
        assert_eq!(
            found,
            [
                "w / reset: tcgkit JIT counts 10000001 instructions when resetting, 10000000 without",
                "w / reset: resetting: guest output differs (tcgkit JIT)",
                "w / reset: instructions differ: QEMU 10000000, tcgkit JIT 10000001",
                "w / reset: resets differ: QEMU 500, tcgkit JIT 499",
            ]
        );
        let cells = [good, bad];
        let modes = [JitMode::Interp, JitMode::Jit];
        let mut report = Report::new(&workloads, &[], &modes);
        report.resets = &cells;
        assert_eq!(report.disagreements().len(), 4);
        let text = report.markdown().unwrap();
        for row in [
            "| w | interp | 20000 | 500 / 500 | 20.0 / 20.0 | 1.000 / 1.100 | 2.000 / 2.002 \
             | 200.0 | 4.0 | 50.0x | yes |",
            "| w | JIT | 20000 | 500 / 500 | 20.0 / 20.0 | 1.000 / 1.100 | 0.500 / 0.505 \
             | 200.0 | 10.0 | 20.0x | yes |",
            // 0.1 s for 500 resets: agrees, and costs as much as QEMU's.
            "| w | interp | 20000 | 500 / 500 | 20.0 / 20.0 | 1.000 / 1.100 | 2.000 / 2.100 \
             | 200.0 | 200.0 | 1.0x | yes |",
            // 0.1 s for 499 resets.
            "| w | JIT | 20000 | 500 / 499 | 20.0 / 20.0 | 1.000 / 1.100 | 2.000 / 2.100 \
             | 200.0 | 200.4 | 1.0x | **NO** |",
            // Medians of (200, 200), (4, 200) and (10, 200.4).
            "Median over workloads: QEMU 200.0 µs per reset; \
             tcgkit interp 102.0 µs (QEMU/tcgkit 2.0x); tcgkit JIT 105.2 µs (QEMU/tcgkit 1.9x).",
        ] {
            assert!(text.contains(row), "{row}\n{text}");
        }
        assert!(!text.contains("Reset-dominated"), "{text}");

        // The same cells as reset-dominated runs: their own section after
        // the first, and their disagreements counted too.
        report.dense_workloads = &workloads;
        report.dense_resets = &cells;
        assert_eq!(report.disagreements().len(), 8);
        let text = report.markdown().unwrap();
        let (spread, dense) = text.split_once("#### Reset-dominated runs").unwrap();
        for part in [spread, dense] {
            assert!(part.contains("| 200.0 | 4.0 | 50.0x | yes |"), "{text}");
            assert!(part.contains("tcgkit interp 102.0 µs"), "{text}");
        }
    }

    #[test]
    fn a_mode_tcgkit_cannot_run_is_named() {
        let workloads = one_workload();
        let cells = [ResetCell {
            workload: 0,
            every: 20_000,
            qemu: pair(1.0, 1.1, 500, 10_000_000),
            tcgkit: vec![
                ours(JitMode::Interp, pair(2.0, 2.002, 500, 10_000_000)),
                Ours::new(JitMode::Jit, Some("no reset plugin".to_owned())),
            ],
        }];
        let mut s = String::new();
        table(&mut s, &workloads, &cells).unwrap();
        assert!(
            s.contains("| w | JIT | 20000 | 500 / n/a | 20.0 / n/a | 1.000 / 1.100 | n/a | 200.0 | n/a | n/a | n/a |"),
            "{s}"
        );
        assert!(s.contains("tcgkit JIT n/a µs (QEMU/tcgkit n/a)."), "{s}");
        assert!(
            s.contains("Not measured on tcgkit (n/a): JIT: no reset plugin."),
            "{s}"
        );
        assert!(cells[0].disagreements("w").is_empty());
    }
}
