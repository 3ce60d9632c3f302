//! Paths shared by the cli's trace and plugin tests.

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
