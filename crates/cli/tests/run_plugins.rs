//! `tcgkit run --plugin`: bundled plugins through the command line, their
//! counts checked against the engine's own count of the same run.

use std::process::Command;

mod common;
use common::guest;

fn scratch(name: &str) -> std::path::PathBuf {
    common::scratch("run-plugins", name)
}

/// The number after `label` on the first line that contains it.
fn number_after(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label:?} in {text}"));
    let rest = &line[line.find(label).unwrap() + label.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

fn run_with(plugins: &[&str], guest_name: &str) -> (String, String, String) {
    let out_file = scratch(&format!("{guest_name}-{}.txt", plugins.join("+")));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcgkit"));
    cmd.args(["run", "--stats"]);
    for p in plugins {
        cmd.args(["--plugin", p]);
    }
    cmd.arg("--plugin-out")
        .arg(&out_file)
        .arg(guest(guest_name));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        std::fs::read_to_string(&out_file).unwrap(),
    )
}

#[test]
fn insn_counts_equal_the_engines_count_inline_and_by_callback() {
    let bare = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .arg("run")
        .arg(guest("float"))
        .output()
        .unwrap();
    for spec in ["insn,inline=true", "insn,inline=false"] {
        let (stdout, stats, report) = run_with(&[spec], "float");
        // The plugin does not change what the guest prints.
        assert_eq!(stdout.as_bytes(), bare.stdout, "{spec}");
        let engine = number_after(&stats, "tcgkit: ");
        let plugin = number_after(&report, "total insns:");
        assert_eq!(plugin, engine, "{spec}: {report}\n{stats}");
    }
}

#[test]
fn several_plugins_at_once_each_report() {
    let (_, stats, report) = run_with(&["insn", "mem", "bb", "syscall"], "fileio");
    let engine = number_after(&stats, "tcgkit: ");
    assert_eq!(number_after(&report, "total insns:"), engine, "{report}");
    assert!(number_after(&report, "loads:") > 0, "{report}");
    assert!(number_after(&report, "stores:") > 0, "{report}");
}

#[test]
fn bad_plugin_spec_is_a_usage_error() {
    for spec in ["no-such-plugin", "insn,inline=maybe"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
            .args(["run", "--plugin", spec])
            .arg(guest("integer"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spec}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 2, "{err}");
        assert!(err.contains("--help"), "{err}");
        assert!(out.stdout.is_empty());
    }
}
