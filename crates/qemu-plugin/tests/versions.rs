//! One plugin source built against every plugin API version, 1 to 7: each
//! build gets its version's signatures (insn_data as a pointer or a copy,
//! read_register returning int or bool, v7's user data on every callback)
//! and they all count the same; several versions share one process.

mod common;

use common::{build_plugin, number_after, run, run_with};
use tcgkit_linux_user::GuestExit;

const GUEST: &str = "float";

/// The fields of a `versions vN:` report line, by name.
fn field(line: &str, name: &str) -> u64 {
    let label = format!(" {name} ");
    if name == "sp" || name == "init_sp" {
        let at = line.find(&format!(" {name} 0x")).expect("sp") + name.len() + 4;
        let hex: String = line[at..]
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        return u64::from_str_radix(&hex, 16).expect("hex sp");
    }
    number_after(line, &label)
}

#[test]
fn every_version_counts_the_same() {
    let mut reference: Option<String> = None;
    for version in 1..=7u32 {
        let plugin = build_plugin("versions", version);
        let out = run(GUEST, &[], &[(&plugin, &[])]);
        assert_eq!(out.exit, GuestExit::Exited(0));
        let line = out
            .output
            .lines()
            .find(|l| l.starts_with(&format!("versions v{version}:")))
            .unwrap_or_else(|| panic!("v{version} reported nothing: {}", out.output))
            .to_owned();
        assert_eq!(field(&line, "bad"), 0, "v{version}: {line}");
        // Callbacks and inline adds (raw pointer in v1, scoreboard after)
        // count every instruction the engine ran.
        assert_eq!(field(&line, "insns_cb"), out.insns, "v{version}: {line}");
        assert_eq!(
            field(&line, "insns_inline"),
            out.insns,
            "v{version}: {line}"
        );
        assert!(
            field(&line, "loads") > 1000 && field(&line, "stores") > 1000,
            "{line}"
        );
        if version >= 2 {
            assert_eq!(
                field(&line, "sp"),
                out.initial_sp,
                "v{version} read sp: {line}"
            );
        }
        if version >= 3 {
            // Inline ticks per block and a callback when they reach 100.
            assert_eq!(
                field(&line, "hits"),
                field(&line, "tbs") / 100,
                "v{version}: {line}"
            );
        }
        if version >= 4 {
            assert_eq!(
                field(&line, "argc"),
                1,
                "v{version} read argc at sp: {line}"
            );
            assert_ne!(field(&line, "values"), 0, "{line}");
        }
        // What every version sees alike.
        let shared = |l: &str| {
            ["insns_cb", "tbs", "loads", "stores", "bytes", "syscalls"].map(|f| field(l, f))
        };
        match &reference {
            None => reference = Some(line),
            Some(first) => assert_eq!(shared(&line), shared(first), "v{version} against v1"),
        }
    }
}

#[test]
fn plugins_of_different_versions_and_bundled_ones_run_together() {
    let (v1, v3, v7) = (
        build_plugin("versions", 1),
        build_plugin("versions", 3),
        build_plugin("versions", 7),
    );
    let together = run_with(GUEST, &[], &[(&v1, &[]), (&v3, &[]), (&v7, &[])], &["insn"]);
    assert_eq!(together.exit, GuestExit::Exited(0));
    let lines: Vec<&str> = together
        .output
        .lines()
        .filter(|l| l.starts_with("versions v"))
        .collect();
    assert_eq!(lines.len(), 3, "{}", together.output);
    for line in &lines {
        assert_eq!(field(line, "bad"), 0, "{line}");
        assert_eq!(field(line, "insns_cb"), together.insns, "{line}");
        assert_eq!(field(line, "insns_inline"), together.insns, "{line}");
    }
    // The bundled insn plugin counts the same instructions beside them.
    assert_eq!(
        number_after(&together.output, "total insns: "),
        together.insns
    );
    // Each loaded its own copy of the same source: the counts agree.
    let loads: Vec<u64> = lines.iter().map(|l| field(l, "loads")).collect();
    assert!(loads.windows(2).all(|w| w[0] == w[1]), "{loads:?}");
}
