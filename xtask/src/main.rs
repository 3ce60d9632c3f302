//! `cargo xtask`: project automation (ci, fixtures, corpus checks, bench reports).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

mod bench_vs_qemu;
mod corpus_images;
mod fixtures;
mod qemu_plugins;
mod realworld;
mod tsan;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("test") => test(&root),
        Some("fixtures") => fixtures::run(&root),
        Some("corpus-images") => corpus_images::run(&args[1..]),
        Some("realworld") => realworld::run(&root, &args[1..]),
        Some("qemu-plugins") => qemu_plugins::run(&root, &args[1..]),
        Some("bench-vs-qemu") => bench_vs_qemu::run(&root, &args[1..]),
        Some("reset-count") => bench_vs_qemu::reset_count(&root, &args[1..]),
        Some("tsan") => tsan::run(&root, &args[1..]),
        Some(other) => bail!("unknown task `{other}`\n{USAGE}"),
        None => {
            println!("{USAGE}");
            Ok(())
        }
    }
}

const USAGE: &str = "usage: cargo xtask <task>
tasks:
  ci    run what CI runs: fmt check, clippy -D warnings, doc -D warnings, `test`, then `tsan`
  test  the test suite: every crate's tests and the corpus checks
  tsan  the tests where host threads share the engine, under ThreadSanitizer (std built with it: rustup's rust-src, else Debian's rustc source package of this rustc's version, fetched into target/rust-src/)
  corpus-images [DIR...]  compare image-core with monodis on every assembly (default /usr/lib/mono)
  fixtures  rebuild the RV64 guest programs in fixtures/guests/ (needs riscv64-linux-gnu-gcc)
  realworld [--force]  build lua, zstd and sqlite3 for RV64 from Debian source packages into target/realworld/
  qemu-plugins [--force]  build QEMU 7.2's own TCG plugins from Debian's qemu source package into target/qemu-plugins-7.2/, for tests/qemu_plugins.rs ($TCGKIT_QEMU_SRC: use that unpacked tree)
  bench-vs-qemu [--runs N] [--workloads NAME,...] [--configs NAME,...] [--jit off|on|both] [--flush] [--no-docs]  time qemu-riscv64 vs tcgkit (TCGKIT_JIT=off and on by default), bare and with plugins; --workloads (or --only) and --configs (bare, insn-inline, insn-callback, insn-callback-per-vcpu, mem-callback, tb-count, reset) pick a subset; --flush: also the mass-flush curve; update docs/benchmarks.md
  reset-count [--only NAME,...] [--no-docs]  host instructions per reset from a callback, both emulators under callgrind (default workload: malloc); update docs/benchmarks.md";

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

/// The workspace's target directory: `$CARGO_TARGET_DIR` (relative to
/// the root) or `target/`.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { root.join(t) })
        .unwrap_or_else(|| root.join("target"))
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    cargo_with_env(root, &[], args)
}

fn cargo_with_env(root: &Path, env: &[(&str, &str)], args: &[&str]) -> Result<()> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn ci(root: &Path) -> Result<()> {
    cargo(root, &["fmt", "--all", "--check"])?;
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // Broken intra-doc links and bad examples' markup, as docs.rs would
    // show them.
    cargo_with_env(
        root,
        &[("RUSTDOCFLAGS", "-D warnings")],
        &["doc", "--workspace", "--no-deps"],
    )?;
    test(root)?;
    tsan::run(root, &[])
}

fn test(root: &Path) -> Result<()> {
    realworld::prepare_for_tests(root)?;
    qemu_plugins::prepare_for_tests(root)?;
    cargo(root, &["test", "--workspace"])?;
    // plugin-api's retire rounds in every interleaving loom finds
    // (`crates/plugin-api/src/rounds.rs`); built apart, as `--cfg loom`
    // changes what the crate is built from.
    cargo_with_env(
        root,
        &[("RUSTFLAGS", "--cfg loom")],
        &[
            "test",
            "-p",
            "tcgkit-plugin-api",
            "--lib",
            "--target-dir",
            "target/loom",
            "rounds::model",
        ],
    )?;
    // Under CI a missing monodis is installed (or fails the run); locally it is skipped.
    if std::env::var_os("CI").is_none() && !corpus_images::monodis_available() {
        println!("corpus-images: skipped, monodis not installed (apt-get install mono-utils)");
    } else {
        corpus_images::run(&[])?;
    }
    Ok(())
}
