//! `cargo xtask`: project automation (ci, fixtures, corpus checks, bench reports).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("test") => test(&root),
        Some(other) => bail!("unknown task `{other}`\n{USAGE}"),
        None => {
            println!("{USAGE}");
            Ok(())
        }
    }
}

const USAGE: &str = "usage: cargo xtask <task>
tasks:
  ci    run what CI runs: fmt check, clippy -D warnings, then `test`
  test  the test suite: every crate's tests and the corpus checks";

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
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
        &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"],
    )?;
    test(root)
}

fn test(root: &Path) -> Result<()> {
    cargo(root, &["test", "--workspace"])?;
    Ok(())
}
