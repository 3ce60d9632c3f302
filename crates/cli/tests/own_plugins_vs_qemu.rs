//! The project's own version-1 C plugins (crates/qemu-plugin/tests/plugins)
//! under qemu-riscv64 (Debian's 7.2 speaks version 1) and under `tcgkit
//! run`, with the same command line after the emulator's name: the counts
//! that do not depend on where an emulator ends its blocks are equal, and
//! the seed scenario (resets from a load's callback) is exact on both.
//!
//! Without qemu-riscv64 the test skips, except under CI (`CI=true`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::guest;

fn qemu_available() -> bool {
    let found = Command::new("qemu-riscv64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "qemu-riscv64 is required under CI"
        );
        eprintln!("qemu-riscv64 is not installed: skipped");
    }
    found
}

/// Builds the plugin `NAME.c` for API version 1.
fn plugin(name: &str) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../qemu-plugin");
    let out = common::scratch("own-plugins", &format!("lib{name}.so"));
    let status = Command::new("cc")
        .args(["-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-I"])
        .arg(crate_dir.join("include"))
        .arg("-o")
        .arg(&out)
        .arg(crate_dir.join(format!("tests/plugins/{name}.c")))
        .arg("-l:libglib-2.0.so.0")
        .status()
        .expect("cc runs");
    assert!(status.success());
    out
}

/// Runs `emulator [pre...] -plugin SPEC -d plugin -D LOG GUEST ARGS` and
/// returns the plugin log.
fn plugin_log(emulator: &[&str], spec: &str, program: &str, args: &[&str]) -> String {
    let log = common::scratch(
        "own-plugins",
        &format!("{}-{program}-{}.log", emulator.len(), spec.len()),
    );
    let (exe, pre) = emulator.split_first().expect("an emulator");
    let status = Command::new(exe)
        .args(pre)
        .args(["-plugin", spec, "-d", "plugin", "-D"])
        .arg(&log)
        .arg(guest(program))
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("the emulator runs");
    assert!(status.success(), "{exe} {spec} {program}: {status:?}");
    std::fs::read_to_string(&log).expect("the plugin log")
}

fn number_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {text:?}"));
    text[at + label.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {text:?}"))
}

#[test]
fn own_plugins_count_the_same_under_qemu() {
    if !qemu_available() {
        return;
    }
    let tcgkit = env!("CARGO_BIN_EXE_tcgkit");
    let (versions, storm) = (plugin("versions"), plugin("storm"));
    let (versions, storm) = (versions.to_str().unwrap(), storm.to_str().unwrap());
    for (program, args) in [("float", &[][..]), ("malloc", &["1000"][..])] {
        let qemu = plugin_log(&["qemu-riscv64"], versions, program, args);
        let ours = plugin_log(&[tcgkit, "run"], versions, program, args);
        for field in [
            " insns_cb ",
            " insns_inline ",
            " loads ",
            " stores ",
            " syscalls ",
            " bad ",
        ] {
            assert_eq!(
                number_after(&ours, field),
                number_after(&qemu, field),
                "{program}{field}: tcgkit {ours} qemu {qemu}"
            );
        }
        let spec = format!("{storm},every=7");
        let qemu = plugin_log(&["qemu-riscv64"], &spec, program, args);
        let ours = plugin_log(&[tcgkit, "run"], &spec, program, args);
        assert_eq!(number_after(&qemu, "stale "), 0, "{qemu}");
        assert_eq!(number_after(&ours, "stale "), 0, "{ours}");
        for field in ["insns ", "loads "] {
            assert_eq!(
                number_after(&ours, field),
                number_after(&qemu, field),
                "{program} storm {field}: tcgkit {ours} qemu {qemu}"
            );
        }
    }
}
