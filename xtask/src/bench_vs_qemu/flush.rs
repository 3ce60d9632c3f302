//! The mass-flush curve: tcg-core's flush sweep in bench/benches/tcg.rs
//! prints a table (criterion cannot drive it: every sample needs a fresh
//! cache of up to 1e6 blocks); this runs it, reads the table and charts
//! flush and reclaim time against the number of cached blocks.

use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// The chart's file name under docs/.
pub const CHART: &str = "tcg-flush.png";

/// One line of the sweep: blocks cached, flush and reclaim medians (s).
#[derive(Debug, PartialEq)]
pub struct Row {
    pub blocks: u64,
    pub flush: f64,
    pub reclaim: f64,
}

/// Runs the sweep (`cargo bench -p tcgkit-bench --bench tcg -- tcg_flush`).
pub fn measure(root: &Path) -> Result<Vec<Row>> {
    eprintln!("bench-vs-qemu: running the tcg-core flush sweep ...");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "bench",
            "-q",
            "-p",
            "tcgkit-bench",
            "--bench",
            "tcg",
            "--",
            "tcg_flush",
        ])
        .current_dir(root)
        .output()
        .context("running the flush bench")?;
    if !out.status.success() {
        bail!(
            "the flush bench failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rows = parse(&String::from_utf8_lossy(&out.stdout));
    if rows.is_empty() {
        bail!("the flush bench printed no table");
    }
    Ok(rows)
}

/// Reads the rows after the `tcg_flush:` heading: blocks, runs, flush,
/// reclaim (as Rust prints a `Duration`), then anything.
pub fn parse(text: &str) -> Vec<Row> {
    text.lines()
        .skip_while(|l| !l.starts_with("tcg_flush"))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [blocks, _runs, flush, reclaim, ..] = fields[..] else {
                return None;
            };
            Some(Row {
                blocks: blocks.parse().ok()?,
                flush: duration(flush)?,
                reclaim: duration(reclaim)?,
            })
        })
        .collect()
}

/// Seconds in a `Duration`'s Debug text, e.g. `12.5µs`, `3ms`, `810ns`.
fn duration(text: &str) -> Option<f64> {
    let units = [
        ("ns", 1e-9),
        ("µs", 1e-6),
        ("us", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
    ];
    units.iter().find_map(|(unit, scale)| {
        let number = text.strip_suffix(unit)?;
        number.parse::<f64>().ok().map(|v| v * scale)
    })
}

/// A table of the sweep for docs/benchmarks.md.
pub fn markdown(rows: &[Row]) -> Result<String> {
    let mut s = String::new();
    writeln!(
        s,
        "\nMass flush against the number of cached blocks (tcg-core's flush \
         sweep in `bench/benches/tcg.rs`, medians): the flush retires the \
         generation; the reclaim frees it later at a quiescent point.\n"
    )?;
    writeln!(s, "| cached blocks | flush | reclaim |")?;
    writeln!(s, "|---:|---:|---:|")?;
    for r in rows {
        writeln!(
            s,
            "| {} | {:.2} µs | {:.2} µs |",
            r.blocks,
            r.flush * 1e6,
            r.reclaim * 1e6
        )?;
    }
    writeln!(s, "\n![Flush and reclaim time vs cached blocks]({CHART})")?;
    Ok(s)
}

/// Log-log chart of flush and reclaim time against cached blocks.
pub fn chart(path: &Path, rows: &[Row]) -> Result<()> {
    let points = |pick: fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .map(|r| (r.blocks as f64, pick(r) * 1e6))
            .collect()
    };
    super::plot::log_log_lines(
        path,
        "Mass flush cost vs cached translation blocks",
        "cached blocks",
        "time (µs)",
        &[
            ("flush (retire)", points(|r| r.flush)),
            ("reclaim (free)", points(|r| r.reclaim)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flush_sweep_table_is_read() {
        let out = "criterion noise\n\ntcg_flush: cost of a mass flush (median of runs)\n\
                   \x20  blocks   runs flush (retire)     reclaim (free)    retired MiB\n\
                   \x20    1000     15        1.201µs           35.5µs            0.2\n\
                   \x20 1000000      5          950ns         48.25ms          180.0\n";
        let rows = parse(out);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].blocks, 1000);
        assert!((rows[0].flush - 1.201e-6).abs() < 1e-12);
        assert!((rows[1].flush - 950e-9).abs() < 1e-12);
        assert!((rows[1].reclaim - 48.25e-3).abs() < 1e-12);
        assert!(
            parse("1000 15 1ms 2ms 0.1\n").is_empty(),
            "needs the heading"
        );
        let text = markdown(&rows).unwrap();
        assert!(text.contains("| 1000 | 1.20 µs | 35.50 µs |"), "{text}");
    }
}
