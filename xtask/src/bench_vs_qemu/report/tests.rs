//! The report's tables from cells of known times and counts.

use super::super::measure::{Counts, Ours};
use super::super::testing::{one_workload, side, workload};
use super::*;

#[test]
fn geometric_means() {
    let g = geometric_mean(&[2.0, 8.0]).unwrap();
    assert!((g - 4.0).abs() < 1e-12);
    // Non-positive values are left out.
    assert_eq!(geometric_mean(&[0.0, -1.0]), None);
    assert!((geometric_mean(&[3.0, 0.0]).unwrap() - 3.0).abs() < 1e-12);
}

fn insns(n: u64) -> Option<Counts> {
    Some(Counts {
        insns: Some(n),
        ..Counts::default()
    })
}

/// A cell of `config` on `workload` where QEMU took `qemu` s and tcgkit
/// in each mode the times given, bundled and with the C .so.
fn timed(
    workload: usize,
    config: Config,
    qemu: f64,
    interp: (f64, Option<f64>),
    jit: (f64, Option<f64>),
) -> Cell {
    let counts = (config != Config::Bare)
        .then_some(1_000_000)
        .and_then(insns);
    let mut cell = Cell::new(
        workload,
        config,
        &[JitMode::Interp, JitMode::Jit],
        |_, _| None,
    );
    cell.qemu = side(qemu, counts, b"out");
    for o in &mut cell.ours {
        let (bundled, shared) = match o.mode {
            JitMode::Interp => interp,
            JitMode::Jit => jit,
        };
        let t = match o.runner {
            Runner::SharedObject => shared,
            _ => Some(bundled),
        };
        o.side = t.map(|t| side(t, counts, b"out"));
    }
    cell
}

#[test]
fn the_headline_is_tcgkit_over_qemu_per_configuration_and_mode() {
    let workloads = [workload("a"), workload("b"), workload("short")];
    let modes = [JitMode::Interp, JitMode::Jit];
    let cells = vec![
        // a: interp 4x QEMU bare, the JIT 2x; b: 1x and 0.5x.
        timed(0, Config::Bare, 0.1, (0.4, None), (0.2, None)),
        timed(1, Config::Bare, 0.2, (0.2, None), (0.1, None)),
        // Start-up only: left out of every summary.
        timed(2, Config::Bare, 0.01, (0.1, None), (0.1, None)),
        // a: 2x and 1x (C .so 3x and 1.5x); b: 8x and 4x (4x and 2x).
        timed(
            0,
            Config::InsnCallback,
            0.5,
            (1.0, Some(1.5)),
            (0.5, Some(0.75)),
        ),
        timed(
            1,
            Config::InsnCallback,
            0.25,
            (2.0, Some(1.0)),
            (1.0, Some(0.5)),
        ),
        timed(
            2,
            Config::InsnCallback,
            0.01,
            (9.0, Some(9.0)),
            (9.0, Some(9.0)),
        ),
    ];
    let report = Report::new(&workloads, &cells, &modes);
    let v = |config, runner, mode| report.versus_qemu(config, runner, mode).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let bare = v(Config::Bare, Runner::Bundled, JitMode::Interp);
    assert!(
        close(bare.geomean, 2.0) && close(bare.worst, 4.0),
        "{bare:?}"
    );
    assert_eq!(bare.worst_workload, 0);
    let bare = v(Config::Bare, Runner::Bundled, JitMode::Jit);
    assert!(
        close(bare.geomean, 1.0) && close(bare.worst, 2.0),
        "{bare:?}"
    );
    let call = v(Config::InsnCallback, Runner::Bundled, JitMode::Interp);
    assert!(
        close(call.geomean, 4.0) && close(call.worst, 8.0),
        "{call:?}"
    );
    assert_eq!(call.worst_workload, 1);
    let call = v(Config::InsnCallback, Runner::Bundled, JitMode::Jit);
    assert!(
        close(call.geomean, 2.0) && close(call.worst, 4.0),
        "{call:?}"
    );
    let so = v(Config::InsnCallback, Runner::SharedObject, JitMode::Interp);
    assert!(
        close(so.geomean, 12f64.sqrt()) && close(so.worst, 4.0),
        "{so:?}"
    );
    assert_eq!(so.worst_workload, 1);
    let so = v(Config::InsnCallback, Runner::SharedObject, JitMode::Jit);
    assert!(
        close(so.geomean, 3f64.sqrt()) && close(so.worst, 2.0),
        "{so:?}"
    );
    assert_eq!(so.worst_workload, 1);
    assert_eq!(
        report.versus_qemu(Config::Bare, Runner::SharedObject, JitMode::Jit),
        None
    );

    let text = report.markdown().unwrap();
    let headline = [
        "| config | interp/QEMU, geomean | interp/QEMU, worst | JIT/QEMU, geomean | JIT/QEMU, worst |",
        "|---|---:|---:|---:|---:|",
        "| bare | 2.00x | 4.00x (a) | 1.00x | 2.00x (a) |",
        "| insn callback | 4.00x | 8.00x (b) | 2.00x | 4.00x (b) |",
        "| insn callback (C .so) | 3.46x | 4.00x (b) | 1.73x | 2.00x (b) |",
    ]
    .join("\n");
    assert!(text.contains(&headline), "{headline}\n\n{text}");
    // The headline is the first table, right after the intro.
    let intro_end = text.find("left out of this and the next table").unwrap();
    assert!(text[..intro_end].matches('|').count() == 0, "{text}");
    assert!(text.find(&headline).unwrap() < text.find("Per plugin kind").unwrap());
    assert!(text.find("Per plugin kind").unwrap() < text.find("Per workload").unwrap());
    assert!(text.contains("(start-up dominates them): short."), "{text}");
    assert!(
        text.contains("tcgkit modes: interp = `TCGKIT_JIT=off`, JIT = `TCGKIT_JIT=on`."),
        "{text}"
    );

    // The per-kind table: a: interp (1.0 - 0.4) s over 1e6 insns is
    // 600 ns, b: 1800 ns, median 1200; QEMU (0.4, 0.05) s, 225 ns.
    for row in [
        "| config | QEMU ns added | tcgkit interp ns added | tcgkit JIT ns added |",
        "| insn callback | 225.00 | 1200.00 | 600.00 |",
        // The C .so over tcgkit's bare run: (1.1, 0.8) s, 950 ns; the
        // JIT (0.55, 0.4) s, 475 ns.
        "| insn callback (C .so) | 225.00 | 950.00 | 475.00 |",
        // Every workload in the full table, the short one too.
        "| workload | config | QEMU s | tcgkit interp s | tcgkit JIT s | interp/QEMU | JIT/QEMU \
         | QEMU count | tcgkit count | agree |",
        "| a | bare | 0.100 | 0.400 | 0.200 | 4.00x | 2.00x |  |  | yes |",
        "| short | insn callback (C .so) | 0.010 | 9.000 | 9.000 | 900.00x | 900.00x \
         | 1000000 | 1000000 | yes |",
    ] {
        assert!(text.contains(row), "{row}\n{text}");
    }
    assert!(!text.contains("bare (C .so)"), "{text}");

    // The chart's bars are the headline's, none for a bare C .so.
    let (series, groups) = report.chart_groups();
    assert_eq!(
        series,
        [
            "tcgkit interp",
            "tcgkit JIT",
            "tcgkit interp (C .so)",
            "tcgkit JIT (C .so)"
        ]
    );
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].0, "bare");
    assert_eq!(groups[0].1[2], None);
    let bar = groups[1].1[1].unwrap();
    assert!(close(bar.value.unwrap(), 2.0) && close(bar.high.unwrap(), 4.0));
}

#[test]
fn a_mode_that_disagrees_is_named() {
    let workloads = one_workload();
    let modes = [JitMode::Interp, JitMode::Jit];
    let mut cell = timed(
        0,
        Config::InsnInline,
        1.0,
        (2.0, Some(2.0)),
        (1.5, Some(1.5)),
    );
    cell.ours[1].side.as_mut().unwrap().counts = insns(999);
    // The JIT cannot run the C .so here.
    cell.ours[3] = Ours {
        runner: Runner::SharedObject,
        mode: JitMode::Jit,
        side: None,
        unavailable: Some("no C plugins".to_owned()),
    };
    let cells = [cell];
    let report = Report::new(&workloads, &cells, &modes);
    assert_eq!(
        report.disagreements(),
        [
            "w / insn inline: counts differ: QEMU 1000000, tcgkit interp (C .so) 999",
            "w / insn inline: counts differ: tcgkit interp 1000000, tcgkit interp (C .so) 999",
            "w / insn inline: counts differ: tcgkit interp (C .so) 999, tcgkit JIT 1000000",
        ]
    );
    let text = report.markdown().unwrap();
    for row in [
        "| w | insn inline | 1.000 | 2.000 | 1.500 | 2.00x | 1.50x | 1000000 | 1000000 | yes |",
        "| w | insn inline (C .so) | 1.000 | 2.000 | n/a | 2.00x | n/a | 1000000 \
         | interp: 999; JIT: n/a | **NO** (interp) |",
        "Not measured on tcgkit (n/a): insn inline (C .so), JIT: no C plugins.",
    ] {
        assert!(text.contains(row), "{row}\n{text}");
    }
}

#[test]
fn disagreeing_counts_and_outputs_are_flagged() {
    let workloads = one_workload();
    let mem = |l, s| {
        Some(Counts {
            loads: Some(l),
            stores: Some(s),
            ..Counts::default()
        })
    };
    let insns = |n| {
        Some(Counts {
            insns: Some(n),
            ..Counts::default()
        })
    };
    // QEMU, tcgkit with its bundled plugin, tcgkit with QEMU's C .so.
    let cell = |config, qemu, tcgkit, shared: Option<Side>| {
        let mut cell = Cell::new(0, config, &[JitMode::Interp], |_, _| None);
        cell.qemu = qemu;
        cell.ours[0].side = Some(tcgkit);
        if let Some(o) = cell.ours.get_mut(1) {
            o.side = shared;
        }
        cell
    };
    let mut tb = Cell::new(0, Config::BlockCount, &[JitMode::Interp], |runner, _| {
        Some(match runner {
            Runner::SharedObject => "no C plugins".to_owned(),
            _ => "no bb plugin".to_owned(),
        })
    });
    tb.qemu = side(
        1.2,
        Some(Counts::parse("total: bbs: 7, insns: 21\n")),
        b"out",
    );
    let cells = vec![
        cell(
            Config::Bare,
            side(1.0, None, b"out"),
            side(2.0, None, b"out"),
            None,
        ),
        cell(
            Config::InsnInline,
            side(1.5, insns(1000), b"out"),
            side(2.5, insns(1000), b"out"),
            Some(side(3.0, insns(1000), b"out")),
        ),
        cell(
            Config::InsnCallback,
            side(2.0, insns(1000), b"out"),
            side(3.0, insns(999), b"out"),
            Some(side(4.0, insns(1000), b"out")),
        ),
        cell(
            Config::InsnCallbackPerVcpu,
            side(2.0, insns(1000), b"out"),
            side(3.0, insns(1000), b"out"),
            Some(side(4.0, None, b"out")),
        ),
        cell(
            Config::MemCallback,
            side(2.0, mem(10, 5), b"out"),
            side(3.0, mem(10, 5), b"different"),
            Some(side(3.5, mem(10, 4), b"out")),
        ),
        tb,
    ];
    let report = Report::new(&workloads, &cells, &[JitMode::Interp]);
    // Each tcgkit side against QEMU, then the two against each other.
    let exit = r#"Some("exit 0")"#;
    assert_eq!(
        report.disagreements(),
        [
            "w / insn callback: counts differ: QEMU 1000, tcgkit interp 999".to_owned(),
            "w / insn callback: counts differ: tcgkit interp 999, tcgkit interp (C .so) 1000"
                .to_owned(),
            "w / insn callback per vCPU: tcgkit interp (C .so) reported no counts".to_owned(),
            format!(
                "w / mem callback: guest output differs (QEMU {exit}, tcgkit interp {exit})"
            ),
            "w / mem callback: counts differ: QEMU 10 ld / 5 st, tcgkit interp (C .so) 10 ld / 4 st"
                .to_owned(),
            format!(
                "w / mem callback: guest output differs (tcgkit interp {exit}, tcgkit interp (C .so) {exit})"
            ),
            "w / mem callback: counts differ: tcgkit interp 10 ld / 5 st, tcgkit interp (C .so) 10 ld / 4 st"
                .to_owned(),
        ]
    );
    let text = report.markdown().unwrap();
    for row in [
        "| config | interp/QEMU, geomean | interp/QEMU, worst |",
        "| bare | 2.00x | 2.00x (w) |",
        "| insn inline | 1.67x | 1.67x (w) |",
        "| tb count | n/a | n/a |",
        "| tb count (C .so) | n/a | n/a |",
        "| w | insn inline | 1.500 | 2.500 | 1.67x | 1000 | 1000 | yes |",
        "| w | insn inline (C .so) | 1.500 | 3.000 | 2.00x | 1000 | 1000 | yes |",
        "| w | insn callback | 2.000 | 3.000 | 1.50x | 1000 | 999 | **NO** |",
        // The C .so agrees with QEMU, whatever the bundled plugin says.
        "| w | insn callback (C .so) | 2.000 | 4.000 | 2.00x | 1000 | 1000 | yes |",
        "| w | insn callback per vCPU (C .so) | 2.000 | 4.000 | 2.00x | 1000 |  | **NO** |",
        "| w | mem callback (C .so) | 2.000 | 3.500 | 1.75x | 10 ld / 5 st | 10 ld / 4 st | **NO** |",
        "| w | tb count | 1.200 | n/a | n/a | 7 tb / 21 insns | n/a | n/a |",
        "| w | tb count (C .so) | 1.200 | n/a | n/a | 7 tb / 21 insns | n/a | n/a |",
        // 0.5 ns per insn, 1 with the .so (over tcgkit's bare run).
        "| insn inline | 500000.00 | 500000.00 |",
        "| insn inline (C .so) | 500000.00 | 1000000.00 |",
    ] {
        assert!(text.contains(row), "{row}\n{text}");
    }
    assert!(!text.contains("bare (C .so)"), "{text}");
    assert!(
        text.contains("tb count, interp: no bb plugin; tb count (C .so), interp: no C plugins."),
        "{text}"
    );
    let added = |r| {
        report
            .added_cost(Config::InsnInline, r, JitMode::Interp)
            .unwrap()
    };
    assert!((added(Runner::Qemu) - 5e5).abs() < 1e-3);
    assert!((added(Runner::Bundled) - 5e5).abs() < 1e-3);
    assert!((added(Runner::SharedObject) - 1e6).abs() < 1e-3);
}

#[test]
fn a_run_of_short_workloads_only_summarises_them_all() {
    let workloads = [workload("float"), workload("tiny")];
    let modes = [JitMode::Interp];
    let cells = vec![
        timed(0, Config::Bare, 0.02, (0.01, None), (0.0, None)),
        timed(1, Config::Bare, 0.01, (0.04, None), (0.0, None)),
    ];
    let report = Report::new(&workloads, &cells, &modes);
    let bare = report
        .versus_qemu(Config::Bare, Runner::Bundled, JitMode::Interp)
        .unwrap();
    // 0.5x and 4x: geometric mean 1.41x, the worst on tiny.
    assert!((bare.geomean - 2f64.sqrt()).abs() < 1e-9, "{bare:?}");
    assert!((bare.worst - 4.0).abs() < 1e-9 && bare.worst_workload == 1);
    let text = report.markdown().unwrap();
    assert!(text.contains("| bare | 1.41x | 4.00x (tiny) |"), "{text}");
    assert!(
        text.contains(
            "(start-up dominates them): none (every workload measured is shorter, so all are kept)."
        ),
        "{text}"
    );
}
