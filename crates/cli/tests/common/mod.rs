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

/// What a finished child printed and how it ended.
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Feeds `input` to a child spawned with all three streams piped, drains
/// stdout and stderr, and waits at most `timeout`, killing it and
/// panicking with `what()` on timeout. A broken stdin pipe is fine: the
/// guest may exit without reading everything.
pub fn finish(
    mut child: std::process::Child,
    input: Vec<u8>,
    timeout: std::time::Duration,
    what: impl Fn() -> String,
) -> Finished {
    use std::io::{Read, Write};
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let out_reader = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err_reader = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the guest") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} timed out after {timeout:?}", what());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let _ = writer.join();
    Finished {
        status,
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
    }
}
