//! `cargo xtask fixtures`: rebuild the guest programs in fixtures/guests/.
//!
//! Each `src/NAME.c` becomes a static RV64 executable `NAME` and a
//! dynamically linked one `dynamic/NAME` (a PIE against Debian's riscv64
//! glibc, run with `-L /usr/riscv64-linux-gnu`), built with Debian's cross
//! compiler, so `cargo test` itself never needs the compiler. Each
//! `src/NAME.cpp` is built the same two ways with the C++ cross compiler
//! (the dynamic one needs `libstdc++.so.6` and `libgcc_s.so.1` from the
//! sysroot).
//! `src/modules/` holds dynamic-only programs: each `src/modules/mod_*.c`
//! becomes a shared object `dynamic/lib<name>.so`, every other C file there a
//! dynamically linked program in `dynamic/` (e.g. `dlopen`, which loads them).
//! Then, if `qemu-riscv64` is installed, the differential tests record its
//! output in `expected/` (the reference used where qemu is missing).

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// The cross compiler the fixtures are built (and checked) with.
const CC: &str = "riscv64-linux-gnu-gcc";

/// The C++ cross compiler, for `src/*.cpp`.
const CXX: &str = "riscv64-linux-gnu-g++";

/// Debian packages that provide both compilers and the riscv64 glibc and
/// libstdc++ (`g++-riscv64-linux-gnu` pulls in libstdc++-12-dev-riscv64-cross).
const PACKAGES: &[&str] = &[
    "gcc-riscv64-linux-gnu",
    "g++-riscv64-linux-gnu",
    "libc6-dev-riscv64-cross",
];

/// Fixtures that keep their symbol table (for symbolising tools and plugins);
/// all others are stripped to keep the repository small.
const UNSTRIPPED: &[&str] = &["integer"];

/// Rebuilds every fixture under `root/fixtures/guests`.
pub fn run(root: &Path) -> Result<()> {
    ensure_compiler()?;
    let dir = root.join("fixtures").join("guests");
    let src = dir.join("src");
    let mut sources: Vec<_> = std::fs::read_dir(&src)
        .with_context(|| format!("reading {}", src.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "c" || e == "cpp"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        bail!("no C or C++ sources in {}", src.display());
    }
    std::fs::create_dir_all(dir.join("dynamic")).context("creating fixtures/guests/dynamic")?;
    for source in &sources {
        let name = source
            .file_stem()
            .and_then(|s| s.to_str())
            .context("fixture source name is not UTF-8")?;
        let cxx = source.extension().is_some_and(|e| e == "cpp");
        let compiler = if cxx { CXX } else { CC };
        for (linking, out) in [
            (&["-static"][..], dir.join(name)),
            (&[][..], dir.join("dynamic").join(name)),
        ] {
            let mut cmd = Command::new(compiler);
            cmd.args(["-O2", "-Wall", "-Werror"]).args(linking);
            if !UNSTRIPPED.contains(&name) {
                cmd.arg("-s");
            }
            // Reproducible builds: no build id differences from paths.
            cmd.arg("-ffile-prefix-map=".to_string() + &dir.display().to_string() + "=.");
            cmd.arg("-o").arg(&out).arg(source);
            // g++ links libm (libstdc++ needs it) by itself.
            if !cxx {
                cmd.arg("-lm");
            }
            let status = cmd
                .status()
                .with_context(|| format!("running {compiler}"))?;
            if !status.success() {
                bail!("{compiler} failed on {} ({status})", source.display());
            }
            println!("built {}", out.strip_prefix(root).unwrap_or(&out).display());
        }
    }
    build_modules(root, &dir)?;
    record_expected(root)
}

/// Builds `src/modules/`: `mod_NAME.c` as the shared object
/// `dynamic/libmod_NAME.so` (`-shared -fPIC`), and every other C file there
/// as a dynamically linked program `dynamic/NAME` (with `-ldl`, harmless
/// since glibc 2.34 has dlopen in libc). All stripped.
fn build_modules(root: &Path, dir: &Path) -> Result<()> {
    let src = dir.join("src").join("modules");
    if !src.is_dir() {
        return Ok(());
    }
    let mut sources: Vec<_> = std::fs::read_dir(&src)
        .with_context(|| format!("reading {}", src.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    sources.sort();
    for source in &sources {
        let name = source
            .file_stem()
            .and_then(|s| s.to_str())
            .context("fixture source name is not UTF-8")?;
        let shared = name.starts_with("mod_");
        let out = if shared {
            dir.join("dynamic").join(format!("lib{name}.so"))
        } else {
            dir.join("dynamic").join(name)
        };
        let mut cmd = Command::new(CC);
        cmd.args(["-O2", "-Wall", "-Werror", "-s"]);
        if shared {
            cmd.args(["-shared", "-fPIC"]);
        }
        cmd.arg("-ffile-prefix-map=".to_string() + &dir.display().to_string() + "=.");
        cmd.arg("-o").arg(&out).arg(source);
        if !shared {
            cmd.arg("-ldl");
        }
        let status = cmd.status().with_context(|| format!("running {CC}"))?;
        if !status.success() {
            bail!("{CC} failed on {} ({status})", source.display());
        }
        println!("built {}", out.strip_prefix(root).unwrap_or(&out).display());
    }
    Ok(())
}

/// Re-records qemu-riscv64's stdout and status for every differential case.
fn record_expected(root: &Path) -> Result<()> {
    let qemu = Command::new("qemu-riscv64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !qemu {
        println!("qemu-riscv64 not found: fixtures/guests/expected/ left as it is");
        return Ok(());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["test", "-p", "tcgkit-cli", "--test", "run_differential"])
        .env("TCGKIT_BLESS", "1")
        .current_dir(root)
        .status()
        .context("running the differential tests")?;
    if !status.success() {
        bail!("differential tests failed while recording expected output ({status})");
    }
    println!("recorded qemu-riscv64 output in fixtures/guests/expected/");
    Ok(())
}

/// Checks that the C and C++ cross compilers exist; installs them with
/// apt-get when running as root on a Debian-like system, otherwise says what
/// to install.
fn ensure_compiler() -> Result<()> {
    if compilers_work() {
        return Ok(());
    }
    let packages = PACKAGES;
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0");
    if !is_root {
        bail!(
            "{CC} or {CXX} not found; install them with `sudo apt-get install {}`",
            packages.join(" ")
        );
    }
    println!("{CC} or {CXX} not found; installing {}", packages.join(" "));
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(packages)
        .status()
        .context("running apt-get")?;
    if !status.success() || !compilers_work() {
        bail!("could not install {CC} and {CXX} ({status})");
    }
    Ok(())
}

fn compilers_work() -> bool {
    [CC, CXX].iter().all(|compiler| {
        Command::new(compiler)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}
