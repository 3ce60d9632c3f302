//! Paths shared by the cli's tests.

#![allow(dead_code)] // each test binary uses a subset

use std::path::{Path, PathBuf};

/// A committed fixture under `fixtures/<dir>/<name>`.
pub fn fixture(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(dir)
        .join(name)
}

/// A bundled guest program.
pub fn guest(name: &str) -> PathBuf {
    fixture("guests", name)
}

/// `name` inside a per-process scratch directory for the test binary `tag`.
pub fn scratch(tag: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcgkit-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The sysroot of Debian's riscv64 glibc (`libc6-dev-riscv64-cross`), which
/// dynamically linked guests run with as `-L`.
pub const SYSROOT: &str = "/usr/riscv64-linux-gnu";

/// Whether dynamically linked guests can run here: CI installs the sysroot
/// (a missing one fails there); elsewhere its absence skips them, saying so.
pub fn sysroot_available() -> bool {
    let found = Path::new(SYSROOT).join("lib/libc.so.6").exists();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{SYSROOT} is required under CI (apt-get install libc6-dev-riscv64-cross)"
        );
        eprintln!("{SYSROOT} is missing: the dynamically linked guests are skipped");
    }
    found
}
