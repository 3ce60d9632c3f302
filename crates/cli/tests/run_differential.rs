//! Differential tests: every guest fixture runs under `tcgkit run` and under
//! Debian's `qemu-riscv64` with the same arguments, stdin and environment;
//! stdout must be byte-identical and the exit status (or fatal signal) equal.
//!
//! Without qemu-riscv64 the tests compare with qemu's output committed in
//! fixtures/guests/expected/ (and say so), except under CI (`CI=true`),
//! where the live reference is required. `TCGKIT_BLESS=1` rewrites those
//! files from qemu-riscv64.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

mod common;
use common::{SYSROOT, sysroot_available};

const QEMU: &str = "qemu-riscv64";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests")
}

fn qemu_available() -> bool {
    let found = Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{QEMU} is required under CI (apt-get install qemu-user)"
        );
        eprintln!("{QEMU} is not installed: comparing with its recorded output");
    }
    found
}

/// How a run ended, as recorded in the expected files.
fn status_text(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}\n"),
        (None, Some(sig)) => format!("signal {sig}\n"),
        _ => format!("unknown {status:?}\n"),
    }
}

/// qemu-riscv64's recorded stdout and status for a case.
fn recorded(case: &str) -> (PathBuf, PathBuf) {
    let dir = fixtures().join("expected");
    (
        dir.join(format!("{case}.stdout")),
        dir.join(format!("{case}.status")),
    )
}

use common::Finished as Outcome;

/// How long one run may take before it counts as hung (and is killed):
/// far above the slowest case in a debug build.
const HUNG_AFTER: Duration = Duration::from_secs(300);

/// Runs `program` on `guest` with a fixed small environment and `stdin`.
fn execute(program: &str, pre_args: &[&str], guest: &Path, args: &[&str], stdin: &[u8]) -> Outcome {
    let child = Command::new(program)
        .args(pre_args)
        .arg(guest)
        .args(args)
        .env_clear()
        .env("TCGKIT_FIXTURE", "differential")
        .env("LC_ALL", "C")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    common::finish(child, stdin.to_vec(), HUNG_AFTER, || {
        format!("{program} {pre_args:?} {} {args:?}", guest.display())
    })
}

/// Runs the fixture, statically linked and then dynamically linked (from
/// `dynamic/`, with `-L` on both sides), under both emulators and compares
/// stdout and status; `case` names the recorded reference (`dynamic_CASE`
/// for the dynamic build).
fn differential(case: &str, fixture: &str, args: &[&str], stdin: &[u8]) {
    differential_in(&MODES, case, fixture, args, stdin);
}

/// [`differential`] of a program that starts threads: under every mode,
/// and again with its guest threads on host threads.
fn differential_threaded(case: &str, fixture: &str, args: &[&str], stdin: &[u8]) {
    differential_in(&THREADED_MODES, case, fixture, args, stdin);
}

/// [`differential`] of a program whose threads wait in the kernel for
/// each other: only with guest threads on host threads (taking turns, one
/// thread's wait holds them all).
fn differential_host_threaded(case: &str, fixture: &str, args: &[&str], stdin: &[u8]) {
    differential_in(&THREADED_MODES[2..], case, fixture, args, stdin);
}

fn differential_in(modes: &[&[&str]], case: &str, fixture: &str, args: &[&str], stdin: &[u8]) {
    let guest = fixtures().join(fixture);
    compare_with(modes, case, &guest, &[], args, args, stdin);
    if sysroot_available() {
        let guest = fixtures().join("dynamic").join(fixture);
        let case = format!("dynamic_{case}");
        compare_with(modes, &case, &guest, &["-L", SYSROOT], args, args, stdin);
    }
}

/// The execution modes every case runs under: the interpreter, and the
/// JIT compiling every block on its first run.
const MODES: [&[&str]; 2] = [&["--jit", "off"], &["--jit", "on", "--jit-threshold", "0"]];

/// [`MODES`] with each guest thread on a host thread (the default), then
/// both with the threads taking turns on one.
const THREADED_MODES: [&[&str]; 4] = [
    &["--jit", "off", "--threads", "turns"],
    &["--jit", "on", "--jit-threshold", "0", "--threads", "turns"],
    &["--jit", "off", "--threads", "host"],
    &["--jit", "on", "--jit-threshold", "0", "--threads", "host"],
];

/// One side-by-side run per execution mode; `options` go before the guest
/// on both command lines.
fn compare(case: &str, guest: &Path, options: &[&str], args: &[&str], stdin: &[u8]) {
    compare_with(&MODES, case, guest, options, args, args, stdin);
}

/// [`compare`], where qemu-riscv64 gets `reference_args` instead of `args`.
fn compare_with(
    modes: &[&[&str]],
    case: &str,
    guest: &Path,
    options: &[&str],
    args: &[&str],
    reference_args: &[&str],
    stdin: &[u8],
) {
    let fixture = guest.display();
    assert!(guest.exists(), "missing fixture {fixture}");
    let (stdout_file, status_file) = recorded(case);
    let reference = qemu_available().then(|| {
        let reference = execute(QEMU, options, guest, reference_args, stdin);
        if std::env::var("TCGKIT_BLESS").as_deref() == Ok("1") {
            std::fs::create_dir_all(fixtures().join("expected")).expect("expected dir");
            std::fs::write(&stdout_file, &reference.stdout).expect("write recorded stdout");
            std::fs::write(&status_file, status_text(&reference.status))
                .expect("write recorded status");
        }
        reference
    });
    for mode in modes {
        let ours_options: Vec<&str> = std::iter::once("run")
            .chain(mode.iter().copied())
            .chain(options.iter().copied())
            .collect();
        let ours = execute(
            env!("CARGO_BIN_EXE_tcgkit"),
            &ours_options,
            guest,
            args,
            stdin,
        );
        let Some(reference) = &reference else {
            let stdout = std::fs::read(&stdout_file).expect("recorded stdout");
            let status = std::fs::read_to_string(&status_file).expect("recorded status");
            assert!(
                ours.stdout == stdout && status_text(&ours.status) == status,
                "{case} {mode:?}: differs from recorded {QEMU} output ({status:?}):\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&ours.stderr)
            );
            continue;
        };
        let show = |o: &Outcome| {
            format!(
                "status {:?} (code {:?}, signal {:?})\n--- stdout\n{}\n--- stderr\n{}",
                o.status,
                o.status.code(),
                o.status.signal(),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        assert!(
            ours.stdout == reference.stdout
                && ours.status.code() == reference.status.code()
                && ours.status.signal() == reference.status.signal(),
            "{fixture} {args:?} {mode:?} differs from {QEMU}\n=== tcgkit: {}\n=== {QEMU}: {}",
            show(&ours),
            show(reference)
        );
        assert!(!ours.stdout.is_empty(), "{fixture} printed nothing");
        let ours_stderr = String::from_utf8_lossy(&ours.stderr);
        assert!(
            !ours_stderr.contains("panicked"),
            "host panic: {ours_stderr}"
        );
    }
}

#[test]
fn integer() {
    differential("integer", "integer", &[], b"");
}

#[test]
fn integer_with_argument() {
    differential("integer_with_argument", "integer", &["5000"], b"");
}

#[test]
fn float() {
    differential("float", "float", &[], b"");
}

#[test]
fn malloc() {
    differential("malloc", "malloc", &[], b"");
}

#[test]
fn pthreads() {
    // clone, futex (mutexes, condition variables, join, barrier, once),
    // a thread spinning until another runs, sleeping and detached threads.
    differential_threaded("threads", "threads", &[], b"");
    differential_threaded("threads_with_argument", "threads", &["20000"], b"");
}

/// pthread_kill reaches the target thread (also in a condition wait, which
/// goes on after the handler), a blocked signal waits for its thread to
/// unblock it, and a process-directed one finds the thread that does not
/// block it.
#[test]
fn threads_waiting_in_the_kernel() {
    // A read of a pipe, poll, waitpid, sigsuspend, and a read that a
    // signal interrupts or restarts, each ended by another thread.
    differential_host_threaded("thread_waits", "thread_waits", &[], b"");
}

#[test]
fn forks_while_other_threads_run() {
    // Each child maps memory and mallocs: with a lock another thread held
    // at the fork, it would hang there.
    differential_threaded("fork_threads", "fork_threads", &["50"], b"");
}

#[test]
fn many_threads_alive_at_once() {
    // Two barriers keep 40 threads alive together; 100 threads with a
    // smaller stack each (glibc's thread cache, clone's stacks reused).
    differential_threaded("many_threads", "many_threads", &[], b"");
    differential_threaded("many_threads_100", "many_threads", &["100", "2000"], b"");
}

#[test]
fn threads_share_compiled_code() {
    // 40 threads running the same code: with sharing (the default) one
    // engine compiles a block and the others place its code; without,
    // each thread compiles its own (placing again only what it compiled
    // before a flush). The output is the same either way.
    let guest = fixtures().join("many_threads");
    let expected = std::fs::read(recorded("many_threads").0).expect("recorded stdout");
    let run = |share: &str| {
        let options = [
            "run",
            "--stats",
            "--jit",
            "on",
            "--jit-threshold",
            "0",
            "--threads",
            "host",
            "--jit-share",
            share,
        ];
        let ours = execute(env!("CARGO_BIN_EXE_tcgkit"), &options, &guest, &[], b"");
        let stderr = String::from_utf8_lossy(&ours.stderr).into_owned();
        assert!(ours.stdout == expected, "--jit-share {share}: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.starts_with("tcgkit: jit: "))
            .unwrap_or_else(|| panic!("no jit statistics in {stderr}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |at: usize| -> u64 { words[at].parse().expect(line) };
        let placed_at = words
            .iter()
            .position(|w| *w == "placed")
            .expect(line)
            .checked_sub(2)
            .expect(line);
        // Blocks Cranelift compiled.
        number(2) - number(placed_at)
    };
    let (shared, alone) = (run("on"), run("off"));
    assert!(
        shared * 2 < alone,
        "{shared} compiled sharing, {alone} alone"
    );
}

#[test]
fn signals_between_threads() {
    differential_threaded("thread_signals", "thread_signals", &[], b"");
}

#[test]
fn cxx_threads() {
    differential_threaded("cxx_threads", "cxx_threads", &[], b"");
}

/// fork (and vfork, posix_spawn, system, popen), pipes, dup2, every kind
/// of wait, and execve of host programs and of RV64 ones: `children SELF`
/// execs SELF to run itself again. tcgkit gets the fixture's own path (its
/// execve starts RV64 programs under tcgkit with the same options);
/// qemu-riscv64, which would need binfmt_misc for that, gets a host script
/// that starts qemu-riscv64 on the fixture.
#[test]
fn child_processes() {
    let dir = std::env::temp_dir().join(format!("tcgkit-children-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cases = vec![("children", fixtures().join("children"), vec![])];
    if sysroot_available() {
        let dynamic = fixtures().join("dynamic").join("children");
        cases.push(("dynamic_children", dynamic, vec!["-L", SYSROOT]));
    }
    for (case, guest, options) in cases {
        let wrapper = dir.join(case);
        let script = format!(
            "#!/bin/sh\nexec {QEMU} {} {} \"$@\"\n",
            options.join(" "),
            guest.display()
        );
        std::fs::write(&wrapper, script).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ours = guest.to_string_lossy().into_owned();
        let theirs = wrapper.to_string_lossy().into_owned();
        compare_with(&MODES, case, &guest, &options, &[&ours], &[&theirs], b"");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Go program (goroutines on four OS threads, channels, a mutex,
/// atomics, timers through the runtime's epoll netpoller, a recovered
/// panic; exit status 3). Go links statically by itself: no dynamic twin.
#[test]
fn go_goroutines_and_timers() {
    let guest = fixtures().join("go_threads");
    compare_with(&THREADED_MODES, "go_threads", &guest, &[], &[], &[], b"");
}

#[test]
fn cxx_runtime() {
    // libstdc++: iostream, containers, exceptions (unwinding), RTTI, static
    // constructors/destructors; dynamically linked against the sysroot's
    // libstdc++.so.6 and libgcc_s.so.1.
    differential("cxx", "cxx", &[], b"");
}

#[test]
fn syscalls() {
    differential("syscalls", "syscalls", &[], b"");
}

#[test]
fn shared_file_mapping() {
    // A writable MAP_SHARED file mapping, coherent with file I/O.
    let file = std::env::temp_dir().join(format!("tcgkit-sharedmap-{}", std::process::id()));
    let path = file.to_string_lossy().into_owned();
    differential("shared_file_mapping", "sharedmap", &[&path], b"");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn fileio_with_arguments_stdin_and_env() {
    let text =
        b"The quick brown fox\njumps over\tthe lazy dog\n\nA second paragraph, with punctuation!\n";
    differential(
        "fileio_with_arguments_stdin_and_env",
        "fileio",
        &["-x", "a b", "", "--strace", "\u{e9}t\u{e9}"],
        text,
    );
}

#[test]
fn fileio_large_stdin() {
    // Several reads of 4096 bytes, a partial last one, and every letter.
    let text: Vec<u8> = (0..150_000u32)
        .map(|i| match i % 61 {
            0 => b'\n',
            n if n % 7 == 0 => b' ',
            n => b'a' + ((i / 61 + n) % 26) as u8,
        })
        .collect();
    differential("fileio_large_stdin", "fileio", &["big"], &text);
}

#[test]
fn fileio_empty_stdin() {
    differential("fileio_empty_stdin", "fileio", &[], b"");
}

#[test]
fn fault_segv() {
    differential("fault_segv", "faults", &["segv"], b"");
}

#[test]
fn fault_illegal_instruction() {
    differential("fault_illegal_instruction", "faults", &["ill"], b"");
}

#[test]
fn fault_ebreak() {
    differential("fault_ebreak", "faults", &["ebreak"], b"");
}

#[test]
fn fault_abort() {
    differential("fault_abort", "faults", &["abort"], b"");
}

#[test]
fn fault_misaligned_atomic() {
    differential(
        "fault_misaligned_atomic",
        "faults",
        &["misaligned-amo"],
        b"",
    );
}

#[test]
fn exit_status() {
    differential("exit_status_1", "faults", &["exit=7"], b"");
    differential("exit_status_2", "faults", &["exit=256"], b"");
}

#[test]
fn signal_handlers() {
    differential("signal_handlers", "signals", &[], b"");
}

#[test]
fn no_fault() {
    differential("no_fault", "faults", &["none"], b"");
}

#[test]
fn qemu_user_options_argv0_and_environment() {
    // -0 replaces argv[0] (AT_EXECFN stays the path); -E sets or replaces
    // a variable, -U removes one; both emulators get the same options.
    let options = [
        "-0",
        "renamed",
        "-E",
        "TCGKIT_FIXTURE=from-E",
        "-U",
        "LC_ALL",
    ];
    compare(
        "options_syscalls",
        &fixtures().join("syscalls"),
        &options,
        &[],
        b"",
    );
    compare(
        "options_fileio",
        &fixtures().join("fileio"),
        &options,
        &["x"],
        b"a b\n",
    );
}

#[test]
fn dlopen_dlclose_reload_loop() {
    // dynamic/dlopen loads and unloads libmod_a.so and libmod_b.so (same
    // layout, different code) 20 times each: B is mapped where A was, so
    // translated code of an unmapped module must not run again, and each
    // module's statics start fresh after every dlopen. The directory is
    // absolute (the guests run in the temp dir); the output names no path.
    if !sysroot_available() {
        return;
    }
    let dir = fixtures().join("dynamic");
    let dir = dir.canonicalize().unwrap_or(dir);
    compare(
        "dynamic_dlopen",
        &fixtures().join("dynamic/dlopen"),
        &["-L", SYSROOT],
        &[&dir.to_string_lossy(), "20"],
        b"",
    );
}
