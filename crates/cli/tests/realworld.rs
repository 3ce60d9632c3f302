//! Differential tests on real-world programs nobody here wrote: Lua, zstd
//! (multithreaded: `-T4`) and the sqlite3 shell, built from Debian source packages for RV64 by
//! `cargo xtask realworld`, each twice from the same objects: statically
//! linked into `target/realworld/bin/` and dynamically linked against the
//! cross glibc into `target/realworld/bin/dynamic/`. Each case runs under
//! `tcgkit run` and under Debian's `qemu-riscv64` with the same arguments,
//! stdin, environment and a fresh working directory, first the static
//! build, then the dynamic one with `-L /usr/riscv64-linux-gnu` given to
//! both emulators; stdout, the exit status and any files the case names
//! must be byte-identical. The dynamic build must also do under qemu what
//! the static one does (only glibc's linking differs), so a dynamic run
//! that fails the same way under both emulators is not taken for a match.
//!
//! Without the built programs or qemu-riscv64 the tests skip with a message,
//! and without the sysroot (`libc6-dev-riscv64-cross`) the dynamic half is
//! skipped; under CI (`CI=true`), where `cargo xtask test` builds the
//! programs first, a missing piece is a failure.

mod common;
use common::{SYSROOT, sysroot_available};

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

const QEMU: &str = "qemu-riscv64";

/// Generous: the slowest case takes a few seconds in a debug build.
const TIMEOUT: Duration = Duration::from_secs(300);

fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips (returns `None`) with a message when something is missing, or
/// fails under CI.
fn require(found: bool, what: &str) -> Option<()> {
    if found {
        return Some(());
    }
    assert!(!under_ci(), "{what} (required under CI)");
    eprintln!("skipped: {what}");
    None
}

/// The statically linked program `name`, next to the target directory
/// holding tcgkit.
fn program(name: &str) -> Option<PathBuf> {
    let tcgkit = Path::new(env!("CARGO_BIN_EXE_tcgkit"));
    let bin = tcgkit.parent()?.parent()?.join("realworld").join("bin");
    let path = bin.join(name);
    require(
        path.is_file(),
        &format!(
            "{} is not built; run `cargo xtask realworld`",
            path.display()
        ),
    )?;
    let qemu = Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require(
        qemu,
        &format!("{QEMU} is not installed (apt-get install qemu-user)"),
    )?;
    Some(path)
}

/// The dynamically linked build of the static `program` (`dynamic/NAME`
/// beside it), when the sysroot is there to run it.
fn dynamic_program(program: &Path) -> Option<PathBuf> {
    if !sysroot_available() {
        return None;
    }
    let path = program.parent()?.join("dynamic").join(program.file_name()?);
    require(
        path.is_file(),
        &format!(
            "{} is not built; run `cargo xtask realworld`",
            path.display()
        ),
    )?;
    Some(path)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/realworld")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `len` bytes of reproducible text; the twin of `corpus` in
/// xtask/src/realworld.rs (the benchmark's input), kept here so the tests
/// depend on nothing the build step writes.
fn corpus(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "alpha",
        "beta",
        "gamma",
        "delta",
        "emulator",
        "block",
        "cache",
        "flush",
        "vcpu",
        "plugin",
        "riscv",
        "translate",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |bound: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    };
    let mut out = Vec::with_capacity(len + 128);
    while out.len() < len {
        let words = 3 + next(10);
        for i in 0..words {
            if i > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(WORDS[next(WORDS.len() as u64) as usize].as_bytes());
        }
        out.extend_from_slice(format!(" {}\n", next(100_000)).as_bytes());
    }
    out.truncate(len);
    out
}

/// One program run, identical for both emulators.
struct Case<'a> {
    name: &'a str,
    /// The statically linked build; its dynamic twin is found from it.
    program: PathBuf,
    args: &'a [&'a str],
    stdin: Vec<u8>,
    /// Files put in the working directory first.
    inputs: Vec<(&'a str, Vec<u8>)>,
    /// Files the program writes in the working directory; compared too.
    outputs: &'a [&'a str],
    /// RV64 programs the case runs by name (statically linked builds; the
    /// dynamic case uses their dynamic twins): for tcgkit, links to them in
    /// a directory first on PATH, whose execve tcgkit runs itself; for
    /// qemu-riscv64, which needs binfmt_misc for that, host scripts there
    /// that start it on them. The host's /usr/bin and /bin follow.
    on_path: Vec<(&'a str, PathBuf)>,
    /// The program starts threads: it also runs with its guest threads
    /// taking turns on one host thread (`--threads turns`).
    threads: bool,
}

/// Which build of the case's program runs, and how both emulators are told.
struct Build<'a> {
    /// `static` or `dynamic`, for messages and work directory names.
    kind: &'a str,
    program: &'a Path,
    /// Options before the guest path, the same for both emulators.
    options: &'a [&'a str],
}

struct Outcome {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: ExitStatus,
    /// Contents of `Case::outputs`, in order (`None` when not written).
    files: Vec<Option<Vec<u8>>>,
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "status {:?} (code {:?}, signal {:?}), {} stdout bytes\n--- stderr\n{}",
            self.status,
            self.status.code(),
            self.status.signal(),
            self.stdout.len(),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

/// Runs `build` of `case` with `runner` (`[tcgkit, run]` or
/// `[qemu-riscv64]`) in a fresh directory, with a small fixed environment,
/// killing it on timeout.
fn execute(case: &Case, build: &Build, runner: &[&str], tag: &str) -> Outcome {
    let dir = std::env::temp_dir().join(format!(
        "tcgkit-realworld-{}-{}-{}-{tag}",
        std::process::id(),
        case.name,
        build.kind
    ));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("clear the work directory");
    }
    std::fs::create_dir_all(&dir).expect("create the work directory");
    for (name, bytes) in &case.inputs {
        std::fs::write(dir.join(name), bytes).expect("write an input file");
    }
    let (exe, pre) = runner.split_first().expect("a runner");
    let mut command = Command::new(exe);
    command.env_clear();
    if !case.on_path.is_empty() {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("create the PATH directory");
        for (name, program) in &case.on_path {
            let program = if build.kind == "dynamic" {
                dynamic_program(program).expect("the dynamic build")
            } else {
                program.clone()
            };
            let entry = bin.join(name);
            if *exe == QEMU {
                let script = format!(
                    "#!/bin/sh\nexec {QEMU} {} {} \"$@\"\n",
                    build.options.join(" "),
                    program.display()
                );
                std::fs::write(&entry, script).expect("write a wrapper");
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755))
                    .expect("make the wrapper executable");
            } else {
                std::os::unix::fs::symlink(&program, &entry).expect("link a program");
            }
        }
        command.env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    }
    let child = command
        .args(pre)
        .args(build.options)
        .arg(build.program)
        .args(case.args)
        .env("LC_ALL", "C")
        .env("HOME", &dir)
        .env("TZ", "UTC")
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {exe}: {e}"));
    let done = common::finish(child, case.stdin.clone(), TIMEOUT, || {
        format!("{} ({}): {exe}", case.name, build.kind)
    });
    let (status, stdout, stderr) = (done.status, done.stdout, done.stderr);
    let files = case
        .outputs
        .iter()
        .map(|name| std::fs::read(dir.join(name)).ok())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    Outcome {
        stdout,
        stderr,
        status,
        files,
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

fn same_status(a: &Outcome, b: &Outcome) -> bool {
    a.status.code() == b.status.code() && a.status.signal() == b.status.signal()
}

/// Runs the case's static build under both emulators, then its dynamic
/// build with `-L SYSROOT` on both sides (unless the sysroot is missing),
/// and asserts identical results each time; returns qemu's outcome of the
/// static build so a test can also check it did what the case intends.
fn differential(case: &Case) -> Outcome {
    let reference = compare(
        case,
        &Build {
            kind: "static",
            program: &case.program,
            options: &[],
        },
    );
    if let Some(program) = dynamic_program(&case.program) {
        let dynamic = compare(
            case,
            &Build {
                kind: "dynamic",
                program: &program,
                options: &["-L", SYSROOT],
            },
        );
        // Same objects, same input: only how glibc is linked differs, so
        // qemu must see the same results (which also rules out both
        // emulators failing to load the dynamic build in the same way).
        assert!(
            dynamic.stdout == reference.stdout
                && same_status(&dynamic, &reference)
                && dynamic.files == reference.files,
            "{}: under {QEMU} the dynamic build differs from the static one\n\
             === dynamic: {}\n=== static: {}",
            case.name,
            dynamic.describe(),
            reference.describe()
        );
    }
    reference
}

/// The execution modes tcgkit runs each case under: the interpreter, and
/// the JIT compiling every block on its first run (guest threads on host
/// threads, the default); a case with threads runs both with its guest
/// threads taking turns on one host thread too.
const MODES: [(&str, &[&str]); 4] = [
    ("interp", &["--jit", "off"]),
    ("jit", &["--jit", "on", "--jit-threshold", "0"]),
    ("interp-turns", &["--jit", "off", "--threads", "turns"]),
    (
        "jit-turns",
        &["--jit", "on", "--jit-threshold", "0", "--threads", "turns"],
    ),
];

/// One side-by-side run of `build` per execution mode: asserts tcgkit's
/// results equal qemu's and returns qemu's.
fn compare(case: &Case, build: &Build) -> Outcome {
    let reference = execute(case, build, &[QEMU], "qemu");
    let modes = if case.threads {
        &MODES[..]
    } else {
        &MODES[..2]
    };
    for &(mode, flags) in modes {
        let runner: Vec<&str> = [env!("CARGO_BIN_EXE_tcgkit"), "run"]
            .into_iter()
            .chain(flags.iter().copied())
            .collect();
        let ours = execute(case, build, &runner, &format!("tcgkit-{mode}"));
        if ours.stdout != reference.stdout || !same_status(&ours, &reference) {
            let at = first_difference(&ours.stdout, &reference.stdout);
            let window = |s: &[u8]| {
                let from = at.saturating_sub(80);
                String::from_utf8_lossy(&s[from.min(s.len())..(at + 80).min(s.len())]).into_owned()
            };
            panic!(
                "{} ({} {}, {mode}): tcgkit differs from {QEMU} (stdout differs from byte {at})\n\
                 === tcgkit: {}\n--- stdout near there\n{}\n\
                 === {QEMU}: {}\n--- stdout near there\n{}",
                case.name,
                build.kind,
                build.program.display(),
                ours.describe(),
                window(&ours.stdout),
                reference.describe(),
                window(&reference.stdout),
            );
        }
        // A file both left absent (e.g. removed by the program) also agrees.
        for (i, name) in case.outputs.iter().enumerate() {
            assert!(
                ours.files[i] == reference.files[i],
                "{} ({}, {mode}): output file {name} differs ({:?} vs {:?} bytes)",
                case.name,
                build.kind,
                ours.files[i].as_ref().map(Vec::len),
                reference.files[i].as_ref().map(Vec::len)
            );
        }
    }
    reference
}

#[test]
fn lua_runs_a_string_table_and_float_workload() {
    let Some(lua) = program("lua") else { return };
    let case = Case {
        name: "lua-workload",
        program: lua,
        args: &["workload.lua", "first", "second arg"],
        stdin: Vec::new(),
        inputs: vec![("workload.lua", fixture("workload.lua"))],
        outputs: &[],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert_eq!(reference.status.code(), Some(3), "{}", reference.describe());
    let text = String::from_utf8_lossy(&reference.stdout);
    assert!(text.contains("first,second arg"), "{text}");
}

#[test]
fn lua_reads_stdin_line_by_line() {
    let Some(lua) = program("lua") else { return };
    let script = "local lines, words, longest = 0, 0, 0 \
                  for l in io.lines() do lines = lines + 1; longest = math.max(longest, #l) \
                  for _ in l:gmatch('%S+') do words = words + 1 end end \
                  print(lines, words, longest, string.format('%.3f', words / lines))";
    let case = Case {
        name: "lua-stdin",
        program: lua,
        args: &["-e", script],
        stdin: corpus(100_000),
        inputs: Vec::new(),
        outputs: &[],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
}

#[test]
fn zstd_compresses_stdin_to_stdout_at_two_levels() {
    let Some(zstd) = program("zstd") else { return };
    for (name, args) in [
        ("zstd-default", &["-c"][..]),
        ("zstd-level9", &["-9", "-c", "--no-check"][..]),
    ] {
        let case = Case {
            name,
            program: zstd.clone(),
            args,
            stdin: corpus(200_000),
            inputs: Vec::new(),
            outputs: &[],
            on_path: Vec::new(),
            threads: false,
        };
        let reference = differential(&case);
        assert!(reference.status.success(), "{}", reference.describe());
        assert!(
            reference.stdout.len() < 100_000,
            "{name}: text must compress"
        );
    }
}

#[test]
fn zstd_round_trips_through_files_and_stdin() {
    let Some(zstd) = program("zstd") else { return };
    let text = corpus(200_000);
    // File to file: exercises open/stat/chmod/utime paths, compares the file.
    let case = Case {
        name: "zstd-file",
        program: zstd.clone(),
        args: &["-q", "corpus.txt", "-o", "corpus.txt.zst"],
        stdin: Vec::new(),
        inputs: vec![("corpus.txt", text.clone())],
        outputs: &["corpus.txt.zst"],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    let compressed = reference.files[0].clone().expect("compressed file");
    decompresses_to("zstd-decompress", zstd, compressed, &text);
}

/// `zstd -d -c` of `compressed` under both emulators gives back `text`.
fn decompresses_to(name: &'static str, zstd: PathBuf, compressed: Vec<u8>, text: &[u8]) {
    let case = Case {
        name,
        program: zstd,
        args: &["-d", "-c"],
        stdin: compressed,
        inputs: Vec::new(),
        outputs: &[],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(
        reference.stdout == text,
        "decompression must restore the input"
    );
}

/// A shell script with pipes, subshells, command substitution, here
/// documents, background jobs and `wait` (SIGCHLD and sigsuspend), redirections,
/// an EXIT trap, host programs, and RV64 programs found on PATH: dash
/// itself again and the `fileio` fixture.
#[test]
fn dash_runs_a_script_with_pipes_and_child_processes() {
    let Some(dash) = program("dash") else { return };
    let fileio = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests/fileio");
    let case = Case {
        name: "dash-script",
        program: dash.clone(),
        args: &["children.sh"],
        stdin: Vec::new(),
        inputs: vec![("children.sh", fixture("children.sh"))],
        outputs: &["late.txt", "fd3.txt"],
        on_path: vec![("dash", dash), ("fileio", fileio)],
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    let text = String::from_utf8_lossy(&reference.stdout);
    for line in ["nested status 6", "fileio status 0", "exit trap ran"] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
}

#[test]
fn zstd_compresses_with_four_threads() {
    let Some(zstd) = program("zstd-mt") else {
        return;
    };
    // Six 512 KiB jobs: zstd starts its pool of worker threads (clone,
    // futex between the workers and the main thread); the frame is the
    // same whatever order they finish in.
    let text = corpus(3_000_000);
    let case = Case {
        name: "zstd-threads",
        program: zstd.clone(),
        args: &["-T4", "-3", "-B512K", "-c"],
        stdin: text.clone(),
        inputs: Vec::new(),
        outputs: &[],
        on_path: Vec::new(),
        threads: true,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    decompresses_to("zstd-threads-decompress", zstd, reference.stdout, &text);
}

#[test]
fn zstd_compresses_several_files_and_lists_them() {
    let Some(zstd) = program("zstd") else { return };
    let text = corpus(150_000);
    let half = text.get(..75_000).expect("corpus length").to_vec();
    // `--rm` removes the sources after compressing: unlink, stat, chmod, utimes.
    let case = Case {
        name: "zstd-multi",
        program: zstd.clone(),
        args: &["-q", "--rm", "-5", "a.txt", "b.txt"],
        stdin: Vec::new(),
        inputs: vec![("a.txt", text), ("b.txt", half)],
        outputs: &["a.txt.zst", "b.txt.zst", "a.txt", "b.txt"],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    let [Some(a), Some(b), None, None] = &reference.files[..] else {
        panic!("zstd --rm must leave exactly the two .zst files");
    };
    let case = Case {
        name: "zstd-list",
        program: zstd,
        args: &["-l", "a.txt.zst", "b.txt.zst"],
        stdin: Vec::new(),
        inputs: vec![("a.txt.zst", a.clone()), ("b.txt.zst", b.clone())],
        outputs: &[],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    let listing = String::from_utf8_lossy(&reference.stdout);
    assert!(listing.contains("2 files"), "{listing}");
}

#[test]
fn zstd_rejects_corrupt_input_the_same_way() {
    let Some(zstd) = program("zstd") else { return };
    let case = Case {
        name: "zstd-corrupt",
        program: zstd,
        args: &["-d", "-c"],
        stdin: b"\x28\xb5\x2f\xfd this is not a zstd frame".to_vec(),
        inputs: Vec::new(),
        outputs: &[],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(!reference.status.success(), "{}", reference.describe());
}

#[test]
fn sqlite_runs_a_script_on_a_database_file() {
    let Some(sqlite) = program("sqlite3") else {
        return;
    };
    let case = Case {
        name: "sqlite-workload",
        program: sqlite,
        args: &["work.db"],
        stdin: fixture("workload.sql"),
        inputs: Vec::new(),
        outputs: &["work.db"],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    let text = String::from_utf8_lossy(&reference.stdout);
    assert!(
        text.contains("\nok\n"),
        "integrity_check must pass:\n{text}"
    );
}

#[test]
fn sqlite_runs_in_write_ahead_log_mode() {
    // WAL mode maps the `-shm` file shared and writable: it needs
    // mmap(MAP_SHARED, PROT_WRITE) of a file to work as under Linux.
    let Some(sqlite) = program("sqlite3") else {
        return;
    };
    let case = Case {
        name: "sqlite-wal",
        program: sqlite,
        args: &["wal.db"],
        stdin: fixture("wal.sql"),
        inputs: Vec::new(),
        outputs: &["wal.db"],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert!(reference.status.success(), "{}", reference.describe());
    let text = String::from_utf8_lossy(&reference.stdout);
    assert!(
        text.starts_with("wal\n") && text.ends_with("delete\nok\n"),
        "{text}"
    );
}

#[test]
fn sqlite_reports_an_sql_error_with_the_same_status() {
    let Some(sqlite) = program("sqlite3") else {
        return;
    };
    let case = Case {
        name: "sqlite-error",
        program: sqlite,
        args: &[":memory:", "SELECT 1; SELECT * FROM missing_table;"],
        stdin: Vec::new(),
        inputs: Vec::new(),
        outputs: &[],
        on_path: Vec::new(),
        threads: false,
    };
    let reference = differential(&case);
    assert_eq!(reference.status.code(), Some(1), "{}", reference.describe());
}
