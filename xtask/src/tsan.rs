//! `cargo xtask tsan`: the tests whose threads share the engine, under
//! ThreadSanitizer.
//!
//! A sanitizer build needs the standard library built with the sanitizer
//! (`-Zbuild-std`): a prebuilt std's `Arc` synchronises with a fence TSan
//! does not model, so every shared drop would be reported. Building std
//! needs its source for exactly this rustc: rustup's `rust-src` component
//! when it is installed, otherwise the `library/` of Debian's `rustc`
//! source package of the same version, fetched once into
//! `target/rust-src/<version>/`. A stable rustc takes the unstable flags
//! with `RUSTC_BOOTSTRAP=1`, set for this task's builds only.

use crate::realworld::{Tool, ensure_tools, recreate_dir};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian keeps rustc's source packages of recent releases; the
/// machine's own apt sources (a stable release) usually lag behind rustup.
const DEB_SRC_SUITES: &[&str] = &["sid", "experimental", "trixie-backports", "trixie"];

/// Each suite: a package, the test target, and the tests' filters. They
/// are the tests where host threads share an engine, a plugin host or
/// guest memory; the rest of the suite is single-threaded.
const SUITES: &[(&str, &[&str], &[&str])] = &[
    ("tcgkit-tcg-core", &["--lib"], &[]),
    ("tcgkit-riscv", &["--lib"], &[]),
    ("tcgkit-linux-user", &["--lib"], &[]),
    ("tcgkit-plugin-api", &["--lib"], &[]),
    // The seed scenario on four host threads, N = 1, 7 and 1000, but for
    // malloc's N = 1 and 7 (2.5 of the storm's 5 minutes under TSan; its
    // N = 1000 stays).
    (
        "tcgkit-plugin-api",
        &["--test", "storm"],
        &[
            "threads integer",
            "threads float",
            "threads syscalls",
            "threads faults",
            "threads signals",
            "threads fileio",
            "threads sharedmap",
            "threads malloc n=1000",
        ],
    ),
    // Threaded C, C++ and Go guests and child processes, in every mode.
    // forks_while_other_threads_run is left out: TSan's fork of a threaded
    // process makes it take 5 minutes alone.
    (
        "tcgkit-cli",
        &["--test", "run_differential"],
        &[
            "pthreads",
            "threads_waiting_in_the_kernel",
            "many_threads_alive_at_once",
            "threads_share_compiled_code",
            "signals_between_threads",
            "cxx_threads",
            "child_processes",
            "go_goroutines",
        ],
    ),
];

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("tsan takes no arguments (got `{arg}`)");
    }
    let rustc = Rustc::query()?;
    let target = crate::target_dir(root);
    let source_root = match rustc.rust_src_component() {
        Some(library) => {
            println!("tsan: std from rustup's rust-src ({})", library.display());
            None
        }
        None => Some(debian_library(&target.join("rust-src"), &rustc.release)?),
    };
    let target_dir = target.join("tsan");
    let cargo = |dir: &Path, args: &[&str]| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(dir)
            .args(args)
            .args(["-Zbuild-std", "--target", &rustc.host, "--target-dir"])
            .arg(&target_dir)
            .env("RUSTC_BOOTSTRAP", "1")
            .env("RUSTFLAGS", "-Zsanitizer=thread")
            // The first report fails the binary at once.
            .env("TSAN_OPTIONS", "halt_on_error=1");
        if let Some(library) = &source_root {
            // Cargo's (internal, test-only) variable for a std source
            // outside the sysroot; rustup's rust-src needs none.
            cmd.env("__CARGO_TESTS_ONLY_SRC_ROOT", library);
        }
        cmd
    };
    check_the_sanitizer(&target_dir.join("canary"), cargo)?;
    for (package, target, filters) in SUITES {
        println!("tsan: {package} {}", target.join(" "));
        let status = cargo(root, &["test", "-p", package])
            .args(*target)
            .arg("--")
            .args(*filters)
            .status()
            .context("running cargo test under TSan")?;
        if !status.success() {
            bail!(
                "{package} {} failed under ThreadSanitizer ({status})",
                target.join(" ")
            );
        }
    }
    println!("tsan: every suite passed with no report");
    Ok(())
}

/// A program built as the suites are must be reported when it races on a
/// plain variable, and must not be when its threads share an `Arc` (which
/// an uninstrumented std would make a false report). Either failing means
/// the suites' silence would prove nothing.
fn check_the_sanitizer(dir: &Path, cargo: impl Fn(&Path, &[&str]) -> Command) -> Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(dir.join("Cargo.toml"), CANARY_MANIFEST)?;
    std::fs::write(dir.join("src/main.rs"), CANARY_MAIN)?;
    for (mode, should_report) in [("race", true), ("arc", false)] {
        let out = cargo(dir, &["run", "-q"])
            .args(["--", mode])
            .output()
            .context("running the TSan canary")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reported = stderr.contains("WARNING: ThreadSanitizer");
        if reported != should_report || (!should_report && !out.status.success()) {
            bail!(
                "the canary's `{mode}` run was {}reported by ThreadSanitizer ({}):\n{stderr}",
                if reported { "" } else { "not " },
                out.status
            );
        }
    }
    println!("tsan: a plain race is reported, Arc's synchronisation is not");
    Ok(())
}

const CANARY_MANIFEST: &str = r#"[package]
name = "tsan-canary"
version = "0.0.0"
edition = "2024"
publish = false

# Not part of the project's workspace.
[workspace]
"#;

const CANARY_MAIN: &str = r#"use std::sync::Arc;
use std::thread;

static mut COUNTER: u64 = 0;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("race") {
        // Deliberately racy: two threads add to one plain variable.
        // SAFETY: none; the data race is what this program is for.
        let other = thread::spawn(|| unsafe { COUNTER += 1 });
        // SAFETY: as above.
        unsafe { COUNTER += 1 };
        other.join().unwrap();
    } else {
        let shared = Arc::new(vec![1u8; 64]);
        let sums: Vec<_> = (0..4)
            .map(|_| {
                let mine = Arc::clone(&shared);
                thread::spawn(move || mine.iter().map(|&b| u64::from(b)).sum::<u64>())
            })
            .collect();
        drop(shared);
        let total: u64 = sums.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total, 256);
    }
}
"#;

/// The rustc cargo builds with.
struct Rustc {
    /// `1.95.0`, or `1.97.0-nightly`.
    release: String,
    host: String,
    sysroot: PathBuf,
}

impl Rustc {
    fn query() -> Result<Self> {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let verbose = output(Command::new(&rustc).arg("-vV"))?;
        let field = |name: &str| {
            verbose
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .with_context(|| format!("`{rustc} -vV` printed no `{name}`"))
        };
        let sysroot = output(Command::new(&rustc).args(["--print", "sysroot"]))?;
        Ok(Rustc {
            release: field("release:")?,
            host: field("host:")?,
            sysroot: PathBuf::from(sysroot.trim()),
        })
    }

    fn rust_src_component(&self) -> Option<PathBuf> {
        let library = self.sysroot.join("lib/rustlib/src/rust/library");
        library.join("Cargo.toml").is_file().then_some(library)
    }
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("{cmd:?} printed non-UTF-8"))
}

/// `dir/<release>/library`, fetched from Debian's `rustc` source package
/// of `release` unless it is already there.
fn debian_library(dir: &Path, release: &str) -> Result<PathBuf> {
    let library = dir.join(release).join("library");
    if library.join("Cargo.toml").is_file() {
        return Ok(library);
    }
    if release.contains('-') {
        bail!(
            "rustc {release} is a pre-release, which Debian does not package; \
             install its source with `rustup component add rust-src`"
        );
    }
    ensure_tools(&[
        Tool::new("apt-get", &[]),
        Tool::new("curl", &["curl"]),
        Tool::new("xz", &["xz-utils"]),
        Tool::new("sha256sum", &["coreutils"]),
    ])?;
    let apt = AptSources::create(&dir.join("apt"))?;
    let version = apt.rustc_version(release)?;
    let (uri, name, sha256) = apt.orig_tarball(&version)?;
    let download = dir.join("download");
    recreate_dir(&download)?;
    let tarball = download.join(&name);
    println!("tsan: fetching {uri}");
    output(
        Command::new("curl")
            .args(["-fsSL", "-o"])
            .arg(&tarball)
            .arg(&uri),
    )?;
    let sum = output(Command::new("sha256sum").arg(&tarball))?;
    if sum.split_whitespace().next() != Some(sha256.as_str()) {
        bail!("{name}: SHA-256 is not the archive's {sha256}");
    }
    let unpacked = dir.join(format!("{release}.partial"));
    recreate_dir(&unpacked)?;
    output(
        Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&unpacked)
            .args(["--strip-components=1", "--wildcards", "*/library/*"]),
    )?;
    let final_dir = dir.join(release);
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir)?;
    }
    std::fs::rename(&unpacked, &final_dir)
        .with_context(|| format!("moving {} into place", unpacked.display()))?;
    std::fs::remove_dir_all(&download)?;
    if !library.join("Cargo.toml").is_file() {
        bail!("{name} holds no library/Cargo.toml");
    }
    Ok(library)
}

/// A private apt configuration listing Debian's source suites, so the
/// machine's own sources stay as they are.
struct AptSources {
    options: Vec<String>,
}

impl AptSources {
    fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir.join("lists/partial"))?;
        let list = dir.join("sources.list");
        let lines: String = DEB_SRC_SUITES
            .iter()
            .map(|suite| format!("deb-src http://deb.debian.org/debian {suite} main\n"))
            .collect();
        std::fs::write(&list, lines)?;
        let options = vec![
            "-o".into(),
            format!("Dir::Etc::sourcelist={}", list.display()),
            "-o".into(),
            "Dir::Etc::sourceparts=/dev/null".into(),
            "-o".into(),
            format!("Dir::State::Lists={}", dir.join("lists").display()),
        ];
        let apt = AptSources { options };
        output(
            Command::new("apt-get")
                .args(&apt.options)
                .args(["update", "-q"]),
        )?;
        Ok(apt)
    }

    /// The Debian version of `rustc` whose upstream version is `release`.
    fn rustc_version(&self, release: &str) -> Result<String> {
        let text = output(
            Command::new("apt-cache")
                .args(&self.options)
                .args(["showsrc", "rustc"]),
        )?;
        text.lines()
            .filter_map(|l| l.strip_prefix("Version: "))
            .find(|v| upstream_version(v) == release)
            .map(str::to_owned)
            .with_context(|| {
                format!("Debian has no rustc {release} source package in {DEB_SRC_SUITES:?}")
            })
    }

    /// The URI, file name and SHA-256 of `rustc`'s upstream tarball.
    fn orig_tarball(&self, version: &str) -> Result<(String, String, String)> {
        let text = output(
            Command::new("apt-get")
                .args(&self.options)
                .args(["--print-uris", "source"])
                .arg(format!("rustc={version}")),
        )?;
        text.lines()
            .filter_map(parse_uri_line)
            .find(|(_, name, _)| name.contains(".orig.tar."))
            .with_context(|| format!("apt-get listed no upstream tarball for rustc {version}"))
    }
}

/// `1.95.0` of `1.95.0+dfsg1-2` (or `1:1.95.0-1`).
fn upstream_version(debian: &str) -> &str {
    let without_epoch = debian.split_once(':').map_or(debian, |(_, v)| v);
    without_epoch
        .split(['+', '-', '~'])
        .next()
        .unwrap_or(without_epoch)
}

/// `'URI' name size SHA256:hex`, as `apt-get --print-uris` prints a file.
fn parse_uri_line(line: &str) -> Option<(String, String, String)> {
    let mut words = line.split_whitespace();
    let uri = words.next()?.strip_prefix('\'')?.strip_suffix('\'')?;
    let name = words.next()?;
    let _size = words.next()?;
    let sha256 = words.next()?.strip_prefix("SHA256:")?;
    Some((uri.to_owned(), name.to_owned(), sha256.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_versions_give_their_upstream_release() {
        assert_eq!(upstream_version("1.95.0+dfsg1-2"), "1.95.0");
        assert_eq!(upstream_version("1.95.0+dfsg1-2~bpo13+1"), "1.95.0");
        assert_eq!(upstream_version("1:1.96.1-1"), "1.96.1");
        assert_ne!(upstream_version("1.95.1+dfsg1-1"), "1.95.0");
    }

    #[test]
    fn apt_uri_lines_are_read() {
        let line = "'http://deb.debian.org/debian/pool/main/r/rustc/rustc_1.95.0%2bdfsg1.orig.tar.xz' \
                    rustc_1.95.0+dfsg1.orig.tar.xz 88190992 SHA256:fee0a2";
        assert_eq!(
            parse_uri_line(line),
            Some((
                "http://deb.debian.org/debian/pool/main/r/rustc/rustc_1.95.0%2bdfsg1.orig.tar.xz"
                    .into(),
                "rustc_1.95.0+dfsg1.orig.tar.xz".into(),
                "fee0a2".into()
            ))
        );
        assert_eq!(
            parse_uri_line("Need to get 88.3 MB of source archives."),
            None
        );
    }
}
