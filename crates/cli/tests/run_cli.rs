//! `tcgkit run` as a command: argument passing, exit status, fatal signals,
//! error messages and `--strace` (compared with `qemu-riscv64 -strace` when
//! it is installed).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/guests")
        .join(name)
}

fn tcgkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(args)
        .env_clear()
        .env("TCGKIT_FIXTURE", "cli")
        .stdin(Stdio::null())
        .output()
        .expect("run tcgkit")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn everything_after_the_guest_is_the_guests() {
    let guest = fixture("fileio");
    let guest = guest.to_str().expect("utf-8 path");
    let out = tcgkit(&["run", guest, "--help", "--strace", "--", "-x", ""]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("argc=6\n"), "{stdout}");
    for (i, arg) in ["--help", "--strace", "--", "-x", ""].iter().enumerate() {
        let line = format!("argv[{}]=\"{arg}\" ({})\n", i + 1, arg.len());
        assert!(stdout.contains(&line), "missing {line:?} in {stdout}");
    }
    assert!(
        stdout.contains("TCGKIT_FIXTURE=cli\n"),
        "environment is passed: {stdout}"
    );
    // Our --strace was not taken: nothing but the guest's own stderr.
    assert_eq!(text(&out.stderr), "fileio: done\n");
}

#[test]
fn exit_status_and_fatal_signals() {
    let guest = fixture("faults");
    let guest = guest.to_str().expect("utf-8 path");
    let out = tcgkit(&["run", guest, "exit=42"]);
    assert_eq!(out.status.code(), Some(42));
    assert_eq!(text(&out.stdout), "faults: exit=42\n");
    for (mode, signal, name) in [
        ("segv", 11, "Segmentation fault"),
        ("ill", 4, "Illegal instruction"),
        ("ebreak", 5, "Trace/breakpoint trap"),
        ("abort", 6, "Aborted"),
        ("misaligned-amo", 7, "Bus error"),
    ] {
        let out = tcgkit(&["run", guest, mode]);
        assert_eq!(
            out.status.signal(),
            Some(signal),
            "{mode}: {:?}",
            out.status
        );
        assert_eq!(
            text(&out.stdout),
            format!("faults: {mode}\n"),
            "output before the fault is kept"
        );
        let expected = format!("tcgkit: uncaught target signal {signal} ({name}) - core dumped\n");
        assert_eq!(text(&out.stderr), expected);
    }
}

#[test]
fn bad_command_lines_and_bad_guests() {
    let out = tcgkit(&["run"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    assert!(text(&out.stderr).contains("Usage"));

    let out = tcgkit(&["run", "/nonexistent/guest"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("tcgkit: error: cannot run /nonexistent/guest"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");

    let host = std::env::current_exe().expect("this test binary");
    let out = tcgkit(&["run", host.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not a 64-bit little-endian RISC-V executable"));
}

#[test]
fn unknown_syscall_warns_once_and_returns_enosys() {
    let guest = fixture("syscalls");
    let out = tcgkit(&["run", guest.to_str().expect("utf-8")]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout)
            .contains("syscall(4000) = -1 errno=38\nsyscall(4000, 1, 2, 3) = -1 errno=38\n")
    );
    assert_eq!(
        text(&out.stderr),
        "tcgkit: unsupported syscall: 4000\n",
        "one warning for two calls"
    );
}

/// The strace of a run, with process ids replaced (they differ per run).
fn strace_lines(program: &str, pre: &[&str], guest: &Path, args: &[&str]) -> (Vec<String>, Output) {
    let out = Command::new(program)
        .args(pre)
        .arg(guest)
        .args(args)
        .env_clear()
        .env("TCGKIT_FIXTURE", "strace")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let lines = text(&out.stderr)
        .lines()
        .filter(|l| !l.starts_with("tcgkit: "))
        .map(normalize_pids)
        .collect();
    (lines, out)
}

/// Replaces every run of digits that equals the line's leading pid by `PID`.
fn normalize_pids(line: &str) -> String {
    let first: String = line.chars().take_while(char::is_ascii_digit).collect();
    let mut out = String::new();
    let mut digits = String::new();
    for c in line.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty() {
            let is_pid = digits.len() >= 2
                && (digits == first || first.is_empty() && line.contains("si_pid="));
            out.push_str(if is_pid { "PID" } else { &digits });
            digits.clear();
        }
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

#[test]
fn strace_matches_qemu() {
    let guest = fixture("faults");
    let ours = strace_lines(
        env!("CARGO_BIN_EXE_tcgkit"),
        &["run", "--strace"],
        &guest,
        &["exit=3"],
    )
    .0;
    assert!(ours.iter().any(|l| l == "PID exit_group(3)"), "{ours:#?}");
    assert!(
        ours.iter().any(|l| l.starts_with("PID brk(NULL) = 0x")),
        "{ours:#?}"
    );
    let has_qemu = Command::new("qemu-riscv64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_qemu {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "qemu-riscv64 is required under CI"
        );
        eprintln!("skipping the comparison: qemu-riscv64 is not installed");
        return;
    }
    let signals = fixture("signals");
    let cases: [(&Path, &[&str]); 5] = [
        (&guest, &["exit=3"]),
        (&guest, &["segv"]),
        (&guest, &["ill"]),
        (&guest, &["abort"]),
        (&signals, &[]),
    ];
    for (program, args) in cases {
        let ours = strace_lines(
            env!("CARGO_BIN_EXE_tcgkit"),
            &["run", "--strace"],
            program,
            args,
        )
        .0;
        let reference = strace_lines("qemu-riscv64", &["-strace"], program, args).0;
        assert_eq!(ours, reference, "strace of {} {args:?}", program.display());
    }
}

#[test]
fn dynamic_programs_find_their_interpreter_through_the_prefix() {
    let guest = fixture("dynamic/fileio");
    let guest = guest.to_str().expect("utf-8 path");
    // A prefix without the interpreter, on a host without it: one line
    // naming the interpreter, status 1, before the guest starts.
    let empty = std::env::temp_dir().join(format!("tcgkit-empty-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("make empty prefix");
    if !Path::new("/lib/ld-linux-riscv64-lp64d.so.1").exists() {
        let out = tcgkit(&["run", "-L", empty.to_str().expect("utf-8"), guest]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("cannot load the program interpreter /lib/ld-linux-riscv64-lp64d.so.1"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(out.stdout.is_empty(), "the guest did not start");
    }
    let _ = std::fs::remove_dir(&empty);

    if !common::sysroot_available() {
        return;
    }
    let sysroot = common::SYSROOT;
    // QEMU_LD_PREFIX means what -L means.
    let by_option = tcgkit(&["run", "-L", sysroot, guest, "one"]);
    let by_env = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", guest, "one"])
        .env_clear()
        .env("TCGKIT_FIXTURE", "cli")
        .env("QEMU_LD_PREFIX", sysroot)
        .stdin(Stdio::null())
        .output()
        .expect("run tcgkit");
    assert!(by_option.status.success(), "{}", text(&by_option.stderr));
    assert!(by_env.status.success(), "{}", text(&by_env.stderr));
    assert!(text(&by_option.stdout).starts_with("argc=2\nargv[1]=\"one\" (3)\n"));
    assert_eq!(by_option.stdout, by_env.stdout);
}

#[test]
fn bad_environment_assignment_is_a_usage_error() {
    let guest = fixture("faults");
    let out = tcgkit(&[
        "run",
        "-E",
        "NOEQUALS",
        guest.to_str().expect("utf-8"),
        "exit=0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("expected VAR=VALUE"),
        "{}",
        text(&out.stderr)
    );
}

/// Builds the qemu-plugin crate's test plugin `bad.c` with `-D<define>`.
fn bad_plugin(define: &str) -> PathBuf {
    test_plugin("bad", define)
}

/// Builds the qemu-plugin crate's test plugin `NAME.c` with `-D<define>`.
fn test_plugin(name: &str, define: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcgkit-cli-plugins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let out = dir.join(format!("lib{name}-{define}.so"));
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../qemu-plugin");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-fvisibility=hidden", "-I"])
        .arg(crate_dir.join("include"))
        .arg(format!("-D{define}"))
        .arg("-o")
        .arg(&out)
        .arg(crate_dir.join(format!("tests/plugins/{name}.c")))
        .status()
        .expect("cc runs");
    assert!(status.success());
    out
}

#[test]
fn a_qemu_plugin_that_cannot_load_stops_the_run_before_the_guest() {
    let guest = fixture("faults");
    let guest = guest.to_str().expect("utf-8");
    for (define, expected) in [
        ("BAD_VERSION", "needs plugin API version 99"),
        ("NO_VERSION", "does not declare qemu_plugin_version"),
        (
            "MISSING_SYMBOL",
            "undefined symbol: qemu_plugin_no_such_function",
        ),
        ("FAIL_INSTALL", "qemu_plugin_install returned error code 3"),
    ] {
        let plugin = bad_plugin(define);
        let plugin = plugin.to_str().expect("utf-8");
        // tcgkit's spelling and QEMU's.
        for args in [
            vec!["run", "--plugin", plugin, guest, "exit=0"],
            vec![
                "run",
                "-plugin",
                &format!("file={plugin}"),
                "-d",
                "plugin",
                guest,
                "exit=0",
            ],
        ] {
            let out = tcgkit(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{define}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{define}: {stderr}");
            assert!(
                stderr.starts_with(&format!("tcgkit: error: cannot load plugin {plugin}")),
                "{stderr}"
            );
            assert!(stderr.contains(expected), "{define}: {stderr}");
            assert!(out.stdout.is_empty(), "{define}: the guest did not start");
        }
    }
    let missing = tcgkit(&["run", "--plugin", "./no-such-plugin.so", guest, "exit=0"]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        text(&missing.stderr),
        "tcgkit: error: cannot load plugin ./no-such-plugin.so: no such file\n"
    );
    // The same source without a switch loads, and the guest runs.
    let good = bad_plugin("GOOD");
    let out = tcgkit(&[
        "run",
        "--plugin",
        good.to_str().expect("utf-8"),
        guest,
        "exit=0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "bad: ok\n");
}

#[test]
fn a_crashing_qemu_plugin_is_named_the_trace_completed_and_the_process_dies_by_its_signal() {
    let plugin = test_plugin("crash", "CRASH");
    let plugin = plugin.to_str().expect("utf-8");
    let guest = fixture("faults");
    let guest = guest.to_str().expect("utf-8");
    for (how, signal, name) in [("how=null", 11, "SIGSEGV"), ("how=abort", 6, "SIGABRT")] {
        let trace =
            std::env::temp_dir().join(format!("tcgkit-crash-{}-{how}.json", std::process::id()));
        let spec = format!("{plugin},{how}");
        let trace_arg = trace.to_str().expect("utf-8");
        let out = tcgkit(&[
            "run", "--trace", trace_arg, "--plugin", &spec, guest, "exit=0",
        ]);
        assert_eq!(out.status.signal(), Some(signal), "{how}: {:?}", out.status);
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("tcgkit: plugin {plugin} crashed ({name})")),
            "{stderr}"
        );
        // The trace was completed before the process died: valid JSON.
        let bytes = std::fs::read(&trace).expect("trace written");
        let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("a complete trace");
        assert!(doc["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
        let _ = std::fs::remove_file(&trace);
    }
}
