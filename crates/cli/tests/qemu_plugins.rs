//! QEMU 7.2's own TCG plugins, unmodified, under tcgkit and under Debian's
//! qemu-riscv64: `cargo xtask qemu-plugins` builds them from Debian's qemu
//! source package into `target/qemu-plugins-7.2/` (tests/plugin: bb, empty,
//! insn, mem, syscall; contrib/plugins: cache, drcov, execlog, hotblocks,
//! hotpages, howvec, hwprofile, lockstep). Each case runs
//! `qemu-riscv64 -plugin LIB,ARGS -d plugin -D LOG GUEST` and
//! `tcgkit run -plugin LIB,ARGS -d plugin -D LOG GUEST` with the same
//! arguments and stdin, `LC_ALL=C` as the whole environment, in a fresh
//! directory;
//! the guest's stdout and exit status must be equal, and the logs are
//! compared as each plugin's section below says: byte for byte where the
//! output depends only on what the guest executed, and on what must be
//! equal where it also depends on how an emulator works inside. The
//! guests: `integer 5000`, `float`, `fileio` (arguments and stdin) and
//! `faults exit=0`, statically linked, and `dynamic/integer 5000` with
//! `-L /usr/riscv64-linux-gnu` on both sides.
//!
//! What legitimately differs between the two emulators, and why:
//!
//! - **Block boundaries.** qemu 7.2's RISC-V translator ends a block after
//!   every CSR instruction (`do_csr_post`: `frflags`, `fsflags`, `fsrm`,
//!   ...), and before an instruction that would cross a page *or end
//!   exactly at the page's end* (its `is_same_page(pc_next + len)` check
//!   is off by one), unless that instruction comes first in its block.
//!   tcgkit ends a block only at control flow, after 512 instructions, or
//!   when the next instruction starts on another page. So qemu's block
//!   starts are a superset of tcgkit's and its blocks are never longer,
//!   which the drcov case checks exactly; every count of blocks (bb's
//!   `bb's`, hotblocks' `collected N entries`) is therefore at least
//!   tcgkit's, and translation-time statistics (insn's `sizes=on`, counting
//!   each translated instruction) differ. Instruction, memory-access and
//!   syscall counts do not depend on blocks and must be equal.
//! - **Layout of a dynamically linked guest.** qemu 7.2 loads a PIE at
//!   0x4000000000 and ld.so after its stack; tcgkit loads a PIE at
//!   0x2aaaaaa000 (Linux's `ELF_ET_DYN_BASE` for Sv39) and ld.so where
//!   qemu puts its first mapping. Each module moves by a whole number of
//!   pages, so for that guest addresses are compared as page offsets (and
//!   cache statistics, whose sets are indexed within a page, stay equal).
//!   For the same reason the static `integer` runs with `5000`: its
//!   default sieve is allocated by mmap and freed before the sort's buffer
//!   is mapped, and tcgkit (first fit) puts the second mapping where the
//!   first was while qemu 7.2 maps it higher, so hotpages would merge two
//!   allocations' pages and the cache would see one fewer miss.
//! - **Hash-table order.** The plugins sort their tables with a comparison
//!   that never says "equal", over a glib hash table's values, so rows
//!   with equal counts come in an order that depends on the other keys in
//!   the table; rows of equal rank are compared as sets, and the last
//!   group of a cut-off table by its rank only.
//! - **Stale bytes after an instruction.** execlog and howvec read 4 bytes
//!   from `qemu_plugin_insn_data`, also for a 2-byte instruction: qemu's
//!   buffer holds whatever an earlier translation left after the 2 bytes,
//!   tcgkit's holds zeros. Opcodes are compared to the instruction's
//!   length; howvec, which counts by that 32-bit value, splits one
//!   compressed instruction into several rows under qemu.
//! - **qemu's own file descriptor.** qemu-user hands the guest the host's
//!   descriptors, and `-D LOG` is the host's fd 3, so the guest's `openat`
//!   returns one more than under tcgkit; thread ids come from the host.
//! - **qemu 7.2's `track=` bug.** mem's `track=r` counts writes and
//!   `track=w` every access under qemu 7.2 (`op_rw` in
//!   accel/tcg/plugin-gen.c reads the access's `QEMU_PLUGIN_MEM_R/W` value
//!   as a 0/1 "is write" flag); tcgkit filters as the API says. The mem
//!   track case checks both against the unfiltered count.
//!
//! What is not excused here and has its own test: the text of
//! `qemu_plugin_insn_disas` (qemu's disassembler prints the raw bytes and
//! its own operand syntax, which tcgkit's RISC-V frontend reproduces for
//! plugins), the name `qemu_plugin_insn_symbol` picks among
//! aliases at one address, loading contrib plugins linked the way
//! contrib/plugins/Makefile links them (without glib, which qemu's
//! executable provides), and QEMU's spellings of plugin options.
//!
//! lockstep needs two cooperating instances and is not run; hwprofile is
//! for system emulation only and must be refused the same way by both.
//! `fileio` creates its temporary file with `mkstemp`, whose random name
//! is drawn with rejection sampling (glibc's `__gen_tempname` draws again
//! about one time in twenty), so its counts vary from run to run under
//! either emulator: a `fileio` case that differs is run again, up to
//! five times.
//!
//! Without the built plugins or qemu-riscv64 the tests skip with a
//! message, and without the sysroot the dynamic guest is skipped; under
//! CI (`CI=true`), where `cargo xtask test` builds the plugins first, a
//! missing piece is a failure.

mod common;
use common::{SYSROOT, sysroot_available};

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

const QEMU: &str = "qemu-riscv64";

/// Generous: the slowest case (cache on `integer`) takes seconds.
const TIMEOUT: Duration = Duration::from_secs(300);

/// Runs of a nondeterministic guest before a difference counts.
const ATTEMPTS: usize = 5;

const PAGE: u64 = 4096;

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

/// `target/qemu-plugins-7.2`, beside the directory holding tcgkit.
fn plugin_dir() -> PathBuf {
    let tcgkit = Path::new(env!("CARGO_BIN_EXE_tcgkit"));
    tcgkit
        .parent()
        .and_then(Path::parent)
        .expect("tcgkit lives in target/PROFILE/")
        .join("qemu-plugins-7.2")
}

/// The built plugin `rel` (`libNAME.so`, `makefile/libNAME.so`), when it
/// and qemu-riscv64 are there.
fn plugin(rel: &str) -> Option<PathBuf> {
    let path = plugin_dir().join(rel);
    require(
        path.is_file(),
        &format!(
            "{} is not built; run `cargo xtask qemu-plugins`",
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
    assert!(
        !path.to_string_lossy().contains(','),
        "a plugin path with a comma would need QEMU's `,,` escape: {}",
        path.display()
    );
    Some(path)
}

/// One guest run, the same for both emulators.
struct Guest {
    /// For messages and work directory names.
    label: &'static str,
    program: PathBuf,
    args: &'static [&'static str],
    stdin: &'static [u8],
    /// Options before the guest path (`-L SYSROOT`), for both emulators.
    options: &'static [&'static str],
    /// Loaded at other addresses by the two emulators (see the top).
    relocated: bool,
    /// Its counts vary between runs (see the top).
    nondeterministic: bool,
}

fn fixture(rel: &str) -> PathBuf {
    let path = common::guest(rel);
    path.canonicalize()
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

const FILEIO_STDIN: &[u8] =
    b"The quick brown fox\njumps over\tthe lazy dog\n\nA second paragraph, with punctuation!\n";

/// A statically linked guest without stdin.
fn static_guest(label: &'static str, args: &'static [&'static str]) -> Guest {
    Guest {
        label,
        program: fixture(label),
        args,
        stdin: b"",
        options: &[],
        relocated: false,
        nondeterministic: false,
    }
}

/// `integer 5000` (unstripped: it has symbols).
fn integer() -> Guest {
    static_guest("integer", &["5000"])
}

/// `faults exit=0`, the small guest (some 8000 instructions).
fn small_guest() -> Guest {
    static_guest("faults", &["exit=0"])
}

/// The guests every plugin runs on; the dynamic one only with the sysroot.
fn guests() -> Vec<Guest> {
    let mut all = vec![
        integer(),
        static_guest("float", &[]),
        Guest {
            stdin: FILEIO_STDIN,
            nondeterministic: true,
            ..static_guest("fileio", &["-x", "two words"])
        },
        small_guest(),
    ];
    if sysroot_available() {
        all.push(Guest {
            label: "dynamic-integer",
            program: fixture("dynamic/integer"),
            options: &["-L", SYSROOT],
            relocated: true,
            ..integer()
        });
    }
    all
}

#[derive(Clone, Copy, PartialEq)]
enum Emulator {
    Qemu,
    Tcgkit,
}

impl Emulator {
    fn name(self) -> &'static str {
        match self {
            Emulator::Qemu => QEMU,
            Emulator::Tcgkit => "tcgkit",
        }
    }
}

/// What one run left.
struct Run {
    log: String,
    stdout: Vec<u8>,
    stderr: String,
    status: ExitStatus,
    /// drcov's `file.drcov.trace` in the work directory, when written.
    drcov: Option<Vec<u8>>,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "status {:?} (code {:?}, signal {:?}), {} stdout bytes\n--- stderr\n{}",
            self.status,
            self.status.code(),
            self.status.signal(),
            self.stdout.len(),
            self.stderr
        )
    }
}

/// Runs `guest` under `emulator` with the plugin `lib` and `args` (comma
/// separated, possibly empty), in a fresh directory with `LC_ALL=C` as
/// the whole environment, killing it on timeout.
fn execute(emulator: Emulator, lib: &Path, args: &str, guest: &Guest) -> Run {
    let spec = if args.is_empty() {
        lib.display().to_string()
    } else {
        format!("{},{args}", lib.display())
    };
    let tag = format!(
        "{}-{}-{}",
        lib.file_stem().unwrap_or_default().to_string_lossy(),
        args.replace([',', '=', '/'], "_"),
        guest.label
    );
    execute_with(emulator, &["-plugin", &spec], &[], guest, &tag)
}

/// Runs `guest` under `emulator` with `plugin_options` (`-plugin SPEC`
/// pairs) and `env` added to `LC_ALL=C`; `tag` names the work directory.
fn execute_with(
    emulator: Emulator,
    plugin_options: &[&str],
    env: &[(&str, &str)],
    guest: &Guest,
    tag: &str,
) -> Run {
    // Unique among the tests running at once. The guest cannot see it:
    // its environment has no HOME or PWD, and it is only the guest's cwd.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "tcgkit-qemu-plugins-{}-{n}-{tag}-{}",
        std::process::id(),
        emulator.name()
    ));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("clear the work directory");
    }
    std::fs::create_dir_all(&dir).expect("create the work directory");
    let log = dir.join("plugin.log");
    let mut cmd = match emulator {
        Emulator::Qemu => Command::new(QEMU),
        Emulator::Tcgkit => {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcgkit"));
            cmd.arg("run");
            cmd
        }
    };
    let child = cmd
        .args(guest.options)
        .args(plugin_options)
        .args(["-d", "plugin", "-D"])
        .arg(&log)
        .arg(&guest.program)
        .args(guest.args)
        .env_clear()
        .env("LC_ALL", "C")
        .envs(env.iter().copied())
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", emulator.name()));
    let done = common::finish(child, guest.stdin.to_vec(), TIMEOUT, || {
        format!("{tag}: {}", emulator.name())
    });
    let (status, stdout) = (done.status, done.stdout);
    let stderr = String::from_utf8_lossy(&done.stderr).into_owned();
    let log = std::fs::read(&log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let drcov = std::fs::read(dir.join("file.drcov.trace")).ok();
    let _ = std::fs::remove_dir_all(&dir);
    Run {
        log,
        stdout,
        stderr,
        status,
        drcov,
    }
}

fn same_status(a: &Run, b: &Run) -> bool {
    a.status.code() == b.status.code() && a.status.signal() == b.status.signal()
}

/// What a check of the two logs says: `Err` describes the difference.
type Verdict = Result<(), String>;

/// Runs `lib,args` on `guest` under both emulators and checks the guests
/// behaved the same and `check(qemu, tcgkit)` holds; a nondeterministic
/// guest gets further attempts. Returns the failure, if any, for the
/// caller to collect.
fn differential(
    lib: &Path,
    args: &str,
    guest: &Guest,
    check: &dyn Fn(&Run, &Run, &Guest) -> Verdict,
) -> Verdict {
    let attempts = if guest.nondeterministic { ATTEMPTS } else { 1 };
    let name = lib.file_name().unwrap_or_default().to_string_lossy();
    let what = format!("{name},{args} on {}", guest.label);
    let mut last = String::new();
    for _ in 0..attempts {
        let qemu = execute(Emulator::Qemu, lib, args, guest);
        let ours = execute(Emulator::Tcgkit, lib, args, guest);
        assert!(
            !ours.stderr.contains("panicked"),
            "{what}: tcgkit panicked:\n{}",
            ours.stderr
        );
        if !qemu.status.success() {
            // The reference itself failed: the case is wrong, not tcgkit.
            panic!("{what}: {QEMU} failed: {}", qemu.describe());
        }
        if ours.stdout != qemu.stdout || !same_status(&ours, &qemu) {
            return Err(format!(
                "{what}: the guest ran differently (or tcgkit refused the plugin)\n\
                 === tcgkit: {}\n=== {QEMU}: {}",
                ours.describe(),
                qemu.describe()
            ));
        }
        match check(&qemu, &ours, guest) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(format!("{what}: {last}"))
}

/// Runs every case and fails with all the differences found, so one run
/// of a test names every guest and argument set that differs.
fn run_cases(
    lib: &str,
    arg_sets: &[&str],
    guests: &[Guest],
    check: &dyn Fn(&Run, &Run, &Guest) -> Verdict,
) {
    let Some(lib) = plugin(lib) else { return };
    let mut failures = Vec::new();
    for args in arg_sets {
        for guest in guests {
            if let Err(e) = differential(&lib, args, guest, check) {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The logs must be byte-identical.
fn identical(qemu: &Run, ours: &Run, _: &Guest) -> Verdict {
    if qemu.log == ours.log {
        return Ok(());
    }
    Err(format!(
        "logs differ\n{}",
        first_difference(&qemu.log, &ours.log)
    ))
}

/// The first differing line of two texts, with its neighbours.
fn first_difference(qemu: &str, ours: &str) -> String {
    let q: Vec<&str> = qemu.lines().collect();
    let t: Vec<&str> = ours.lines().collect();
    let at = q
        .iter()
        .zip(&t)
        .position(|(a, b)| a != b)
        .unwrap_or(q.len().min(t.len()));
    let window = |lines: &[&str]| {
        lines
            .get(at.saturating_sub(2)..(at + 3).min(lines.len()))
            .unwrap_or_default()
            .join("\n")
    };
    format!(
        "first difference at line {} ({} vs {} lines)\n--- {QEMU}\n{}\n--- tcgkit\n{}",
        at + 1,
        q.len(),
        t.len(),
        window(&q),
        window(&t)
    )
}

/// Every unsigned number in `line`, in order (hex with `0x`).
fn numbers(line: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(|c: char| c.is_ascii_digit()) {
        rest = &rest[at..];
        let (radix, digits) = match rest.strip_prefix("0x") {
            Some(hex) => (16, hex),
            None => (10, rest),
        };
        let len = digits
            .find(|c: char| !c.is_digit(radix))
            .unwrap_or(digits.len());
        if len == 0 {
            // A lone `0` before an `x`.
            out.push(0);
            rest = &rest[1..];
            continue;
        }
        out.push(u64::from_str_radix(&digits[..len], radix).unwrap_or(u64::MAX));
        rest = &digits[len..];
    }
    out
}

/// The numbers on the line starting with `prefix`.
fn line_numbers(log: &str, prefix: &str) -> Result<Vec<u64>, String> {
    log.lines()
        .find(|l| l.starts_with(prefix))
        .map(numbers)
        .ok_or_else(|| format!("no line starting {prefix:?} in\n{log}"))
}

/// An address as compared: itself, or its offset in its page when the two
/// emulators load the guest at different addresses.
fn address(addr: u64, guest: &Guest) -> u64 {
    if guest.relocated { addr % PAGE } else { addr }
}

/// A row of a table sorted by a count, highest first.
struct Ranked {
    rank: u64,
    /// Everything compared, already normalised.
    row: String,
}

/// Compares two count-sorted tables: the same ranks in the same order,
/// and rows of equal rank the same as sets (their order is hash-table
/// order), except the last group, which the table's limit may cut
/// anywhere and is compared by rank only.
fn compare_ranked(what: &str, qemu: &[Ranked], ours: &[Ranked]) -> Verdict {
    let ranks = |t: &[Ranked]| t.iter().map(|r| r.rank).collect::<Vec<_>>();
    if ranks(qemu) != ranks(ours) {
        return Err(format!(
            "{what}: the counts differ\n--- {QEMU}\n{}\n--- tcgkit\n{}",
            rows(qemu),
            rows(ours)
        ));
    }
    let mut start = 0;
    while start < qemu.len() {
        let rank = qemu[start].rank;
        let end = qemu[start..]
            .iter()
            .position(|r| r.rank != rank)
            .map_or(qemu.len(), |n| start + n);
        if end == qemu.len() {
            break;
        }
        if group(qemu, start..end) != group(ours, start..end) {
            return Err(format!(
                "{what}: the rows counted {rank} differ\n--- {QEMU}\n{}\n--- tcgkit\n{}",
                group(qemu, start..end).join("\n"),
                group(ours, start..end).join("\n")
            ));
        }
        start = end;
    }
    Ok(())
}

/// The rows `range` of `t`, sorted.
fn group(t: &[Ranked], range: std::ops::Range<usize>) -> Vec<&str> {
    let mut g: Vec<&str> = t[range].iter().map(|r| r.row.as_str()).collect();
    g.sort_unstable();
    g
}

fn rows(t: &[Ranked]) -> String {
    t.iter()
        .map(|r| r.row.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------- insn --

/// insn's counts (`cpu 0 insns`/`total insns`, or `insns` inline) are of
/// executed instructions: identical.
#[test]
fn insn_counts_are_identical() {
    run_cases("libinsn.so", &["", "inline=on"], &guests(), &identical);
}

/// `sizes=on` counts instructions as they are *translated*, per length:
/// the lengths seen must be the same, the counts follow each emulator's
/// blocks (an instruction in two overlapping blocks counts twice).
#[test]
fn insn_sizes_list_the_same_lengths() {
    let lengths = |log: &str| -> BTreeSet<u64> {
        log.lines()
            .filter(|l| l.starts_with("len "))
            .filter_map(|l| numbers(l).first().copied())
            .collect()
    };
    run_cases("libinsn.so", &["sizes=on"], &guests(), &|q, t, _| {
        let (lq, lt) = (lengths(&q.log), lengths(&t.log));
        if lq.is_empty() || lq != lt {
            return Err(format!(
                "instruction lengths differ\n--- {QEMU}\n{}--- tcgkit\n{}",
                q.log, t.log
            ));
        }
        Ok(())
    });
}

// ------------------------------------------------------------------ bb --

/// bb prints `bb's: B, insns: I`: I must be equal; B counts executed
/// blocks, and qemu's blocks are never longer than tcgkit's (see the top),
/// so B is at least tcgkit's.
#[test]
fn bb_instructions_are_identical_and_blocks_no_more_than_qemus() {
    run_cases("libbb.so", &["", "inline=on"], &guests(), &|q, t, _| {
        let nq = line_numbers(&q.log, "bb's:")?;
        let nt = line_numbers(&t.log, "bb's:")?;
        let (&[bq, iq], &[bt, it]) = (&nq[..], &nt[..]) else {
            return Err(format!("unexpected output\n{}\n{}", q.log, t.log));
        };
        if iq != it || bt == 0 || bt > bq || q.log.lines().count() != 1 {
            return Err(format!(
                "insns must be equal and tcgkit's blocks no more than qemu's:\n\
                 --- {QEMU}\n{}--- tcgkit\n{}",
                q.log, t.log
            ));
        }
        Ok(())
    });
}

// ----------------------------------------------------------------- mem --

/// Memory accesses, counted inline and by callback (and through the
/// hwaddr queries, which in user mode find no I/O): identical.
#[test]
fn mem_counts_are_identical() {
    run_cases(
        "libmem.so",
        &["inline=on,callback=on", "haddr=on,callback=on"],
        &guests(),
        &identical,
    );
}

/// mem's (inline, callback) counts.
fn mem_counts(run: &Run) -> Result<(u64, u64), String> {
    let inline = line_numbers(&run.log, "inline mem accesses:")?;
    let callback = line_numbers(&run.log, "callback mem accesses:")?;
    Ok((inline[0], callback[0]))
}

/// The track case's verdict on its three runs (unfiltered, `track=r`,
/// `track=w`), each a pair of (qemu, tcgkit).
fn check_tracks(runs: &[(String, Run, Run)]) -> Verdict {
    let counts = mem_counts;
    for (args, q, t) in runs {
        if t.stdout != q.stdout || !same_status(t, q) {
            return Err(format!(
                "{args}: the guest ran differently\n=== tcgkit: {}\n=== {QEMU}: {}",
                t.describe(),
                q.describe()
            ));
        }
    }
    let [(_, q_all, t_all), (_, q_r, t_r), (_, q_w, t_w)] = runs else {
        return Err("three runs expected".into());
    };
    let (q_all, t_all) = (counts(q_all)?, counts(t_all)?);
    let (q_r, t_r, q_w, t_w) = (counts(q_r)?, counts(t_r)?, counts(q_w)?, counts(t_w)?);
    let sum = (t_r.0 + t_w.0, t_r.1 + t_w.1);
    if q_all != t_all || sum != t_all || t_w != q_r || q_w != q_all || t_r.0 == 0 || t_w.0 == 0 {
        return Err(format!(
            "(inline, callback) counts: all {QEMU} {q_all:?} tcgkit {t_all:?}; \
             track=r {QEMU} {q_r:?} tcgkit {t_r:?}; track=w {QEMU} {q_w:?} tcgkit {t_w:?}"
        ));
    }
    Ok(())
}

/// `track=r` and `track=w` (inline and by callback). tcgkit filters as
/// the API says; qemu 7.2 counts writes for `track=r` and every access for
/// `track=w` (see the top). Checked against the unfiltered count of the
/// same guest: tcgkit's reads plus writes are all accesses, its writes are
/// what qemu counts for `track=r`, and qemu's `track=w` count is all.
#[test]
fn mem_track_filters_reads_and_writes() {
    let Some(lib) = plugin("libmem.so") else {
        return;
    };
    let mut failures = Vec::new();
    for guest in guests() {
        // Six runs per attempt, each of which may draw again in mkstemp.
        let attempts = if guest.nondeterministic {
            2 * ATTEMPTS
        } else {
            1
        };
        let mut verdict = Ok(());
        for _ in 0..attempts {
            let mut runs = Vec::new();
            for args in ["", "track=r,", "track=w,"] {
                let args = format!("{args}inline=on,callback=on");
                let q = execute(Emulator::Qemu, &lib, &args, &guest);
                let t = execute(Emulator::Tcgkit, &lib, &args, &guest);
                runs.push((args, q, t));
            }
            verdict = check_tracks(&runs);
            if verdict.is_ok() {
                break;
            }
        }
        if let Err(e) = verdict {
            failures.push(format!("{}: {e}", guest.label));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ------------------------------------------------------------- syscall --

/// Syscall statistics (number, calls, errors): identical.
#[test]
fn syscall_statistics_are_identical() {
    run_cases("libsyscall.so", &[""], &guests(), &identical);
}

/// `print=on`: every syscall and its result in order. The numbers must be
/// equal, and the results too, except thread ids (the host's), the
/// descriptors `openat`/`dup`/`dup3` return (one more under qemu, whose
/// `-D` log is the host's fd 3), and, for the relocated guest, addresses
/// from `brk` and `mmap`, compared within their page.
#[test]
fn syscall_print_shows_the_same_calls_and_results() {
    const SET_TID_ADDRESS: u64 = 96;
    const HOST_IDS: &[u64] = &[SET_TID_ADDRESS, 172, 173, 178];
    const NEW_FD: &[u64] = &[23, 24, 56];
    const ADDRESSES: &[u64] = &[214, 222];
    run_cases("libsyscall.so", &["print=on"], &guests(), &|q, t, guest| {
        let parse = |log: &str| -> Vec<(u64, Option<i64>)> {
            log.lines()
                .filter_map(|l| {
                    let rest = l.strip_prefix("syscall #")?;
                    Some(match rest.split_once(" returned -> ") {
                        Some((n, r)) => (n.parse().ok()?, Some(r.parse().ok()?)),
                        None => (rest.parse().ok()?, None),
                    })
                })
                .collect()
        };
        let (cq, ct) = (parse(&q.log), parse(&t.log));
        if cq.len() != q.log.lines().count() || cq.is_empty() {
            return Err(format!("unexpected output from {QEMU}:\n{}", q.log));
        }
        if cq.len() != ct.len() {
            return Err(first_difference(&q.log, &t.log));
        }
        for (i, (&(nq, rq), &(nt, rt))) in cq.iter().zip(&ct).enumerate() {
            let same = nq == nt
                && match (rq, rt) {
                    (Some(a), Some(b)) if HOST_IDS.contains(&nq) => (a > 0) == (b > 0),
                    (Some(a), Some(b)) if NEW_FD.contains(&nq) && b >= 3 => a == b + 1,
                    (Some(a), Some(b)) if ADDRESSES.contains(&nq) && a >= 0 && b >= 0 => {
                        address(a as u64, guest) == address(b as u64, guest)
                    }
                    (a, b) => a == b,
                };
            if !same {
                return Err(format!(
                    "line {}: {QEMU} {nq} -> {rq:?}, tcgkit {nt} -> {rt:?}\n{}",
                    i + 1,
                    first_difference(&q.log, &t.log)
                ));
            }
        }
        Ok(())
    });
}

// ----------------------------------------------------------- hotblocks --

/// hotblocks' table (pc, tcount, icount, ecount of the 20 most executed
/// blocks) must be the same; the number of distinct blocks
/// (`collected N entries`) is at least tcgkit's under qemu, which splits
/// blocks where tcgkit does not.
#[test]
fn hotblocks_top_blocks_are_identical() {
    run_cases(
        "libhotblocks.so",
        &["", "inline=on"],
        &guests(),
        &|q, t, guest| {
            let entries = |log: &str| line_numbers(log, "collected ").map(|n| n[0]);
            let (eq, et) = (entries(&q.log)?, entries(&t.log)?);
            if et == 0 || et > eq {
                return Err(format!(
                    "collected {eq} blocks under {QEMU}, {et} under tcgkit"
                ));
            }
            let table = |log: &str| -> Vec<Ranked> {
                log.lines()
                    .skip(2)
                    .map(|l| match numbers(l)[..] {
                        [pc, tcount, icount, ecount] => Ranked {
                            rank: ecount,
                            row: format!("{:#x}, {tcount}, {icount}, {ecount}", address(pc, guest)),
                        },
                        _ => Ranked {
                            rank: u64::MAX,
                            row: l.to_owned(),
                        },
                    })
                    .collect()
            };
            compare_ranked("hotblocks", &table(&q.log), &table(&t.log))
        },
    );
}

/// A block several threads run is translated once, as under QEMU, whose
/// threads share one block cache: `tcount` is never higher under tcgkit
/// for a block in both tables, in either execution mode. On `threads`,
/// whose four workers run the same loop, each thread translated it once
/// before translations were shared (tcount 6 against qemu's 1). (Not
/// equal: qemu itself translates some blocks twice, when threads race.)
#[test]
fn hotblocks_threads_translate_a_block_once() {
    let Some(lib) = plugin("libhotblocks.so") else {
        return;
    };
    let guest = static_guest("threads", &["2000"]);
    let tcounts = |log: &str| -> BTreeMap<u64, u64> {
        log.lines()
            .skip(2)
            .filter_map(|l| match numbers(l)[..] {
                [pc, tcount, _icount, _ecount] => Some((pc, tcount)),
                _ => None,
            })
            .collect()
    };
    let spec = lib.display().to_string();
    let qemu = execute_with(Emulator::Qemu, &["-plugin", &spec], &[], &guest, "tcount");
    assert!(qemu.status.success(), "{QEMU}: {}", qemu.describe());
    let in_qemu = tcounts(&qemu.log);
    let mut failures = Vec::new();
    for jit in ["on", "off"] {
        let env = [("TCGKIT_JIT", jit)];
        let ours = execute_with(
            Emulator::Tcgkit,
            &["-plugin", &spec],
            &env,
            &guest,
            "tcount",
        );
        assert_eq!(ours.stdout, qemu.stdout, "jit {jit}: {}", ours.describe());
        let both: Vec<(u64, u64, u64)> = tcounts(&ours.log)
            .into_iter()
            .filter_map(|(pc, t)| Some((pc, in_qemu.get(&pc).copied()?, t)))
            .collect();
        if both.len() < 10 {
            failures.push(format!(
                "jit {jit}: {} blocks in both tables\n{}\n{}",
                both.len(),
                qemu.log,
                ours.log
            ));
        }
        for (pc, q, t) in both.into_iter().filter(|&(_, q, t)| t > q) {
            failures.push(format!(
                "jit {jit}: block {pc:#x} translated {t} times, {q} under {QEMU}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// -------------------------------------------------------------- howvec --

/// One `Instr:` row of howvec: hits and the 32-bit value read at the
/// instruction (the class names are the same for every row here).
struct HowvecRow {
    hits: u64,
    opcode: u32,
}

fn howvec_rows(log: &str) -> Result<(Vec<String>, Vec<HowvecRow>), String> {
    let mut header = Vec::new();
    let mut rows = Vec::new();
    for line in log.lines() {
        if !line.starts_with("Instr: ") {
            header.push(line.to_owned());
            continue;
        }
        let (_, counts) = line
            .split_once('\t')
            .ok_or_else(|| format!("unexpected howvec line {line:?}"))?;
        let n = numbers(counts);
        let (&[hits, opcode, ..], true) = (&n[..], counts.ends_with("/Unclassified)")) else {
            return Err(format!("unexpected howvec line {line:?}"));
        };
        rows.push(HowvecRow {
            hits,
            opcode: u32::try_from(opcode).map_err(|e| e.to_string())?,
        });
    }
    Ok((header, rows))
}

/// An opcode as far as the instruction goes: 16 bits for a compressed one.
fn instruction_bits(opcode: u32) -> u32 {
    if opcode & 3 == 3 {
        opcode
    } else {
        opcode & 0xffff
    }
}

/// howvec counts executions per 32-bit value read at each instruction
/// (RISC-V has no class table: everything is counted individually) and
/// lists the 49 most counted. The class lines must be identical and both
/// tables full. A 4-byte instruction's count is the same under both, so
/// qemu's row and tcgkit's must agree, and a row with more hits than the
/// other table's last must be in that table too. A compressed instruction
/// is one row under tcgkit, possibly several under qemu (by the stale bytes
/// after it), so tcgkit's count is at least the sum of qemu's rows for it
/// (and listed if that sum beats its last row). The instruction text has
/// its own test.
#[test]
fn howvec_counts_agree() {
    run_cases("libhowvec.so", &["", "inline=on"], &guests(), &|q, t, _| {
        let (hq, rq) = howvec_rows(&q.log)?;
        let (ht, rt) = howvec_rows(&t.log)?;
        let (Some(last_q), Some(last_t)) = (rq.last(), rt.last()) else {
            return Err(format!("empty tables\n{}\n{}", q.log, t.log));
        };
        if hq != ht || rq.len() != rt.len() {
            return Err(format!(
                "class lines or table sizes differ\n{}",
                first_difference(&q.log, &t.log)
            ));
        }
        let ours: BTreeMap<u32, u64> = rt.iter().map(|r| (r.opcode, r.hits)).collect();
        let theirs: BTreeMap<u32, u64> = rq.iter().map(|r| (r.opcode, r.hits)).collect();
        let mut qemu_sums: BTreeMap<u32, u64> = BTreeMap::new();
        for r in &rq {
            *qemu_sums.entry(instruction_bits(r.opcode)).or_default() += r.hits;
        }
        for (&bits, &sum) in &qemu_sums {
            let exact = bits & 3 == 3;
            let agrees = match ours.get(&bits) {
                Some(&hits) if exact => hits == sum,
                Some(&hits) => hits >= sum,
                None => sum <= last_t.hits,
            };
            if !agrees {
                return Err(format!(
                    "op {bits:#010x}: {sum} hits in {QEMU}'s rows, tcgkit {:?} (its last row {})",
                    ours.get(&bits),
                    last_t.hits
                ));
            }
        }
        for r in rt.iter().filter(|r| r.opcode & 3 == 3) {
            if !theirs.contains_key(&r.opcode) && r.hits > last_q.hits {
                return Err(format!(
                    "op {:#010x}: {} hits under tcgkit, not in {QEMU}'s table (its last row {})",
                    r.opcode, r.hits, last_q.hits
                ));
            }
        }
        Ok(())
    });
}

// ------------------------------------------------------------ hotpages --

/// hotpages' 50 busiest pages (reads, writes, the CPUs that did them):
/// the same, page addresses included (as page offsets, i.e. counts only,
/// for the relocated guest).
#[test]
fn hotpages_are_identical() {
    run_cases("libhotpages.so", &[""], &guests(), &|q, t, guest| {
        if q.log.lines().next() != t.log.lines().next() {
            return Err(first_difference(&q.log, &t.log));
        }
        let table = |log: &str| -> Vec<Ranked> {
            log.lines()
                .skip(1)
                .map(|l| match numbers(l)[..] {
                    [page, rcpus, reads, wcpus, writes] => Ranked {
                        rank: reads + writes,
                        row: format!(
                            "{:#x}, {rcpus:#x}, {reads}, {wcpus:#x}, {writes}",
                            address(page, guest)
                        ),
                    },
                    _ => Ranked {
                        rank: u64::MAX,
                        row: l.to_owned(),
                    },
                })
                .collect()
        };
        compare_ranked("hotpages", &table(&q.log), &table(&t.log))
    });
}

// --------------------------------------------------------------- cache --

/// The parts of cache's report compared here: the statistics lines, and
/// each "top" table's rows as (address, misses); the symbol and the
/// instruction text have their own tests.
fn cache_report(log: &str, guest: &Guest) -> (Vec<String>, Vec<Vec<Ranked>>) {
    let mut stats = Vec::new();
    let mut tables: Vec<Vec<Ranked>> = Vec::new();
    for line in log.lines() {
        if line.starts_with("address, ") {
            tables.push(Vec::new());
            stats.push(line.to_owned());
        } else if let (Some(table), true) = (tables.last_mut(), line.starts_with("0x")) {
            let addr = numbers(line)[0];
            let misses = line
                .split(", ")
                .nth(1)
                .and_then(|m| m.parse().ok())
                .unwrap_or(u64::MAX);
            table.push(Ranked {
                rank: misses,
                row: format!("{:#x}, {misses}", address(addr, guest)),
            });
        } else {
            stats.push(line.to_owned());
        }
    }
    (stats, tables)
}

/// The simulated caches see the same instruction and data address streams
/// (up to whole pages for the relocated guest), so the statistics must be
/// identical, and so must the most-missing instructions.
#[test]
fn cache_statistics_are_identical() {
    run_cases("libcache.so", &[""], &guests(), &|q, t, guest| {
        let (sq, tq) = cache_report(&q.log, guest);
        let (st, tt) = cache_report(&t.log, guest);
        if sq != st || tq.len() != tt.len() || tq.is_empty() {
            return Err(format!(
                "statistics differ\n--- {QEMU}\n{}\n--- tcgkit\n{}",
                sq.join("\n"),
                st.join("\n")
            ));
        }
        for (a, b) in tq.iter().zip(&tt) {
            compare_ranked("cache misses", a, b)?;
        }
        Ok(())
    });
}

// ------------------------------------------------------------- execlog --

/// One execlog line: `CPU, PC, OPCODE, "DISASSEMBLY"` and the accesses.
#[derive(PartialEq)]
struct ExecLine<'a> {
    /// CPU, PC and opcode (cut to the instruction's length).
    head: String,
    disas: &'a str,
    /// `, load, ADDR` / `, store, ADDR` for each access.
    accesses: &'a str,
}

fn exec_line(line: &str) -> Option<ExecLine<'_>> {
    let (head, rest) = line.split_once(", \"")?;
    let (disas, accesses) = rest.rsplit_once('"')?;
    let fields: Vec<&str> = head.split(", ").collect();
    let [cpu, pc, opcode] = fields[..] else {
        return None;
    };
    let opcode = u32::from_str_radix(opcode.strip_prefix("0x")?, 16).ok()?;
    Some(ExecLine {
        head: format!("{cpu}, {pc}, {:#x}", instruction_bits(opcode)),
        disas,
        accesses,
    })
}

/// Whether two execlog lines agree: equal, but for the stale bytes after
/// a 2-byte instruction's opcode (see the top of this file).
fn same_exec_line(qemu: &str, ours: &str) -> bool {
    match (exec_line(qemu), exec_line(ours)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => qemu == ours,
        _ => false,
    }
}

/// execlog prints every executed instruction with its memory accesses:
/// the same instructions, opcodes (to the instruction's length),
/// disassembly (see insn_disas_is_qemus_text) and accesses, in the same
/// order.
#[test]
fn execlog_traces_are_identical() {
    run_cases("libexeclog.so", &[""], &[small_guest()], &|q, t, _| {
        let (lq, lt): (Vec<&str>, Vec<&str>) = (q.log.lines().collect(), t.log.lines().collect());
        if lq.len() != lt.len() || lq.len() < 1000 {
            return Err(format!(
                "{} lines under {QEMU}, {} under tcgkit\n{}",
                lq.len(),
                lt.len(),
                first_difference(&q.log, &t.log)
            ));
        }
        for (i, (a, b)) in lq.iter().zip(&lt).enumerate() {
            if !same_exec_line(a, b) {
                return Err(format!("line {}:\n{QEMU}: {a}\ntcgkit: {b}", i + 1));
            }
        }
        Ok(())
    });
}

// --------------------------------------------------------------- drcov --

/// A drcov file: the text header (module table) and the BB table's
/// (start, size) entries.
fn drcov(bytes: &[u8]) -> Result<(String, Vec<(u32, u16)>), String> {
    const MARK: &[u8] = b" bbs\n";
    let at = bytes
        .windows(MARK.len())
        .position(|w| w == MARK)
        .ok_or("no BB table")?
        + MARK.len();
    let header = String::from_utf8_lossy(&bytes[..at]).into_owned();
    let table = &bytes[at..];
    if !table.len().is_multiple_of(8) {
        return Err(format!("a BB table of {} bytes", table.len()));
    }
    let blocks = table
        .chunks_exact(8)
        .map(|e| {
            (
                u32::from_ne_bytes([e[0], e[1], e[2], e[3]]),
                u16::from_ne_bytes([e[4], e[5]]),
            )
        })
        .collect();
    Ok((header, blocks))
}

/// drcov writes its module line (start_code, end_code, entry, path) and
/// every executed block (truncated start, size in bytes). The module line
/// must be the same (for the relocated guest: the same size and entry
/// page offset) and the covered bytes the same; the blocks follow the
/// boundaries described at the top, which are checked exactly for the
/// static guests: every tcgkit block starts where a qemu block does, no
/// qemu block starting there is longer.
#[test]
fn drcov_covers_the_same_code() {
    run_cases("libdrcov.so", &[""], &guests(), &|q, t, guest| {
        if !q.log.is_empty() || !t.log.is_empty() {
            return Err(format!("drcov logs: {:?} / {:?}", q.log, t.log));
        }
        let (hq, bq) = drcov(q.drcov.as_deref().ok_or("qemu wrote no drcov file")?)?;
        let (ht, bt) = drcov(t.drcov.as_deref().ok_or("tcgkit wrote no drcov file")?)?;
        let module = |h: &str| -> Result<(Vec<u64>, String), String> {
            let line = h
                .lines()
                .find(|l| l.starts_with("0, 0x"))
                .ok_or_else(|| format!("no module line in {h}"))?;
            let n = numbers(line);
            let path = line.rsplit(", ").next().unwrap_or_default().to_owned();
            Ok((n[1..4].to_vec(), path))
        };
        let ((mq, pq), (mt, pt)) = (module(&hq)?, module(&ht)?);
        let lines = |h: &str| h.lines().take(4).collect::<Vec<_>>().join("\n");
        let same_module = if guest.relocated {
            mq[1] - mq[0] == mt[1] - mt[0] && mq[2] % PAGE == mt[2] % PAGE
        } else {
            mq == mt
        };
        if lines(&hq) != lines(&ht) || !same_module || pq != pt {
            return Err(format!("headers differ\n--- {QEMU}\n{hq}--- tcgkit\n{ht}"));
        }
        let bytes_covered = |b: &[(u32, u16)]| -> BTreeSet<u64> {
            b.iter()
                .flat_map(|&(s, n)| u64::from(s)..u64::from(s) + u64::from(n))
                .collect()
        };
        let (cq, ct) = (bytes_covered(&bq), bytes_covered(&bt));
        if guest.relocated {
            // Other bases: the amount of code covered, and the blocks.
            if cq.len() != ct.len() || bt.len() > bq.len() {
                return Err(format!(
                    "{} bytes in {} blocks under {QEMU}, {} bytes in {} blocks under tcgkit",
                    cq.len(),
                    bq.len(),
                    ct.len(),
                    bt.len()
                ));
            }
            return Ok(());
        }
        if cq != ct {
            let only_q: Vec<String> = cq
                .difference(&ct)
                .take(8)
                .map(|a| format!("{a:#x}"))
                .collect();
            let only_t: Vec<String> = ct
                .difference(&cq)
                .take(8)
                .map(|a| format!("{a:#x}"))
                .collect();
            return Err(format!(
                "covered bytes differ: only {QEMU} {only_q:?}, only tcgkit {only_t:?}"
            ));
        }
        let starts: BTreeMap<u32, u16> = bq.iter().copied().collect();
        for &(start, size) in &bt {
            match starts.get(&start) {
                Some(&qsize) if qsize <= size => {}
                other => {
                    return Err(format!(
                        "tcgkit's block {start:#x} ({size} bytes) is under {QEMU} {other:?}"
                    ));
                }
            }
        }
        Ok(())
    });
}

// --------------------------------------------------------------- empty --

/// The empty plugin prints nothing and changes nothing.
#[test]
fn empty_prints_nothing() {
    run_cases("libempty.so", &[""], &guests(), &|q, t, g| {
        identical(q, t, g)?;
        if q.log.is_empty() {
            Ok(())
        } else {
            Err(format!("empty printed {:?}", q.log))
        }
    });
}

// ----------------------------------------------------------- hwprofile --

/// hwprofile is for system emulation: its install prints why and returns
/// -1, and both emulators then exit 1 before the guest runs.
#[test]
fn hwprofile_is_refused_in_user_mode() {
    let Some(lib) = plugin("libhwprofile.so") else {
        return;
    };
    let guest = small_guest();
    let q = execute(Emulator::Qemu, &lib, "", &guest);
    let t = execute(Emulator::Tcgkit, &lib, "", &guest);
    const WHY: &str = "hwprofile: plugin only useful for system emulation";
    assert!(
        same_status(&q, &t)
            && q.status.code() == Some(1)
            && q.stdout.is_empty()
            && t.stdout.is_empty()
            && q.stderr.contains(WHY)
            && t.stderr.contains(WHY)
            && q.stderr.contains("Could not load plugin"),
        "=== tcgkit: {}\n=== {QEMU}: {}",
        t.describe(),
        q.describe()
    );
}

// ----------------------------------- what tcgkit does not match (yet) --

/// `qemu_plugin_insn_disas` must give qemu's text: its RISC-V disassembler
/// prints the instruction's bytes in hex, then the mnemonic and operands
/// in its own syntax, padded (`"00067197          auipc
/// gp,421888               # 0x77676"`). execlog, cache, howvec and insn's
/// `match=` print or match it. Compared over every instruction of the
/// small guest (tcgkit's riscv crate, `disas_qemu.rs`, checks each
/// instruction class against qemu's text).
#[test]
fn insn_disas_is_qemus_text() {
    let Some(lib) = plugin("libexeclog.so") else {
        return;
    };
    let guest = small_guest();
    let disassembly = |run: &Run| -> BTreeMap<String, String> {
        run.log
            .lines()
            .filter_map(exec_line)
            .map(|l| {
                let pc = l.head.split(", ").nth(1).unwrap_or_default().to_owned();
                (pc, l.disas.to_owned())
            })
            .collect()
    };
    let q = disassembly(&execute(Emulator::Qemu, &lib, "", &guest));
    let t = disassembly(&execute(Emulator::Tcgkit, &lib, "", &guest));
    assert!(!q.is_empty(), "{QEMU}'s execlog is empty");
    let differing: Vec<String> = q
        .iter()
        .filter(|&(pc, text)| t.get(pc) != Some(text))
        .map(|(pc, text)| {
            format!(
                "{pc}: {QEMU} {text:?}, tcgkit {:?}",
                t.get(pc).map_or("(none)", String::as_str)
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} instructions are disassembled differently, e.g.\n{}",
        differing.len(),
        q.len(),
        differing[..differing.len().min(12)].join("\n")
    );
}

/// `qemu_plugin_insn_symbol` must name the symbol qemu names. qemu 7.2
/// keeps the `.symtab`'s defined `STT_FUNC` symbols (dropping the others
/// by moving the last entry into their slot), sorts them by address with
/// glibc's `qsort` (a stable merge sort) and finds an address with glibc's
/// `bsearch` over `[value, value + size)`: among aliases (`malloc` and
/// `__malloc`, `write` and `__write`) that decides which one is printed.
/// Compared on cache's tables, which name the function of each listed
/// instruction (`integer` keeps its symbols).
#[test]
fn insn_symbol_is_qemus_choice_among_aliases() {
    let Some(lib) = plugin("libcache.so") else {
        return;
    };
    let guest = integer();
    let symbols = |run: &Run| -> BTreeMap<u64, String> {
        run.log
            .lines()
            .filter(|l| l.starts_with("0x"))
            .filter_map(|l| {
                let (addr, rest) = l.split_once(' ')?;
                let symbol = rest.strip_prefix('(')?.split_once("), ")?.0;
                Some((numbers(addr)[0], symbol.to_owned()))
            })
            .collect()
    };
    let q = symbols(&execute(Emulator::Qemu, &lib, "", &guest));
    let t = symbols(&execute(Emulator::Tcgkit, &lib, "", &guest));
    assert!(q.len() > 10, "{QEMU} named few symbols: {q:?}");
    let differing: Vec<String> = q
        .iter()
        .filter(|&(addr, name)| t.get(addr).is_some_and(|ours| ours != name))
        .map(|(addr, name)| format!("{addr:#x}: {QEMU} {name}, tcgkit {}", t[addr]))
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} symbols differ:\n{}",
        differing.len(),
        q.len(),
        differing.join("\n")
    );
}

/// contrib/plugins/Makefile links the plugins without glib: their
/// `g_*` references bind to the glib qemu's executable is linked with.
/// Plugins built that way (`makefile/libNAME.so`) must load and work
/// under tcgkit as under qemu; the log is checked as for the glib-linked
/// build, on the small guest.
#[test]
fn contrib_plugins_linked_as_qemus_makefile_links_them_load() {
    let guest = small_guest();
    let mut failures = Vec::new();
    for name in [
        "cache",
        "drcov",
        "execlog",
        "hotblocks",
        "hotpages",
        "howvec",
    ] {
        let Some(lib) = plugin(&format!("makefile/lib{name}.so")) else {
            return;
        };
        let check: &dyn Fn(&Run, &Run, &Guest) -> Verdict = &|q, t, _| {
            if name == "drcov" {
                return if q.drcov.is_some() && t.drcov.is_some() {
                    Ok(())
                } else {
                    Err("no drcov file".into())
                };
            }
            if t.log.is_empty() {
                return Err(first_difference(&q.log, &t.log));
            }
            // execlog's lines are equal (but for the stale opcode bytes
            // after a 2-byte instruction, see the top of this file);
            // hotblocks' first line is the number of blocks, which follows
            // block boundaries (see hotblocks_top_blocks_are_identical): as
            // many lines on both; the others' first lines are equal.
            let same = match name {
                "execlog" => {
                    q.log.lines().count() == t.log.lines().count()
                        && q.log
                            .lines()
                            .zip(t.log.lines())
                            .all(|(a, b)| same_exec_line(a, b))
                }
                "hotblocks" => q.log.lines().count() == t.log.lines().count(),
                _ => q.log.lines().next() == t.log.lines().next(),
            };
            if !same {
                return Err(first_difference(&q.log, &t.log));
            }
            Ok(())
        };
        if let Err(e) = differential(&lib, "", &guest, check) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} plugin(s) do not load or differ:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// QEMU's ways of giving a plugin its arguments (`plugin_add` in
/// plugins/loader.c over QemuOpts): a bare `flag` is `flag=on` and
/// `noflag` is `flag=off` (with a deprecation warning), the
/// deprecated `arg=flag`, `file=PATH`, the same path given twice (one
/// plugin, loaded once, with the arguments of both), and the
/// `QEMU_PLUGIN` environment variable of qemu-user. Each must reach the
/// plugin as under qemu: the same log, stdout and exit status.
#[test]
fn plugin_option_spellings_are_qemus() {
    let Some(lib) = plugin("libinsn.so") else {
        return;
    };
    let lib = lib.display().to_string();
    let guest = small_guest();
    let with = |args: &str| format!("{lib},{args}");
    let plugin = |spec: String| vec!["-plugin".to_owned(), spec];
    // (what, options before the guest, QEMU_PLUGIN if set)
    let cases = [
        ("bare flag", plugin(with("inline")), None),
        ("no-flag", plugin(with("noinline")), None),
        ("arg=", plugin(with("arg=inline")), None),
        ("file=", plugin(format!("file={lib},inline=on")), None),
        (
            "the same path twice",
            [plugin(with("sizes=on")), plugin(with("inline=on"))].concat(),
            None,
        ),
        ("QEMU_PLUGIN", Vec::new(), Some(with("inline=on"))),
    ];
    let mut failures = Vec::new();
    for (i, (what, options, env)) in cases.iter().enumerate() {
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|v| ("QEMU_PLUGIN", v.as_str())).collect();
        let tag = format!("spelling{i}");
        let q = execute_with(Emulator::Qemu, &options, &env, &guest, &tag);
        let t = execute_with(Emulator::Tcgkit, &options, &env, &guest, &tag);
        if !q.status.success() || q.log.is_empty() {
            panic!("{what}: {QEMU} failed: {}", q.describe());
        }
        if q.log != t.log || q.stdout != t.stdout || !same_status(&q, &t) {
            failures.push(format!(
                "{what} ({options:?} {env:?}):\n--- {QEMU} log\n{}--- tcgkit log\n{}\
                 === tcgkit: {}",
                q.log,
                t.log,
                t.describe()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} spelling(s) differ:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

// ------------------------------------------- the comparisons themselves --

fn ranked(rows: &[(u64, &str)]) -> Vec<Ranked> {
    rows.iter()
        .map(|&(rank, row)| Ranked {
            rank,
            row: row.to_owned(),
        })
        .collect()
}

#[test]
fn numbers_are_read_in_decimal_and_hex() {
    assert_eq!(
        numbers("bb's: 4775152, insns: 23481616"),
        [4775152, 23481616]
    );
    assert_eq!(
        numbers("0x0000004002865db2, 1, 4, 717943"),
        [0x4002865db2, 1, 4, 717943]
    );
    assert_eq!(numbers("len 2 bytes: 3157 insns, Δ+5"), [2, 3157, 5]);
    assert_eq!(numbers("0xg"), [0]);
    assert!(numbers("no digits").is_empty());
}

#[test]
fn ranked_tables_allow_only_tie_order_and_a_cut_last_group() {
    let qemu = ranked(&[(9, "a"), (5, "b"), (5, "c"), (2, "d"), (2, "e")]);
    // Equal ranks in another order, and another member of the cut group.
    let ours = ranked(&[(9, "a"), (5, "c"), (5, "b"), (2, "x"), (2, "d")]);
    assert!(compare_ranked("t", &qemu, &ours).is_ok());
    let other_member = ranked(&[(9, "a"), (5, "b"), (5, "x"), (2, "d"), (2, "e")]);
    assert!(compare_ranked("t", &qemu, &other_member).is_err());
    let other_count = ranked(&[(9, "a"), (5, "b"), (4, "c"), (2, "d"), (2, "e")]);
    assert!(compare_ranked("t", &qemu, &other_count).is_err());
    let shorter = ranked(&[(9, "a"), (5, "b"), (5, "c"), (2, "d")]);
    assert!(compare_ranked("t", &qemu, &shorter).is_err());
}

#[test]
fn execlog_lines_keep_an_instructions_own_bytes() {
    let qemu_line = "0, 0x10662, 0xcfcd6582, \"6582              ld                      a1,0(sp)\", load, 0x4000800e50";
    let ours_line = "0, 0x10662, 0x6582, \"6582              ld                      a1,0(sp)\", load, 0x4000800e50";
    let (qemu, ours) = (exec_line(qemu_line).unwrap(), exec_line(ours_line).unwrap());
    assert_eq!(qemu.head, ours.head);
    assert_eq!(qemu.accesses, ", load, 0x4000800e50");
    assert_eq!(
        ours.disas,
        "6582              ld                      a1,0(sp)"
    );
    assert!(same_exec_line(qemu_line, ours_line));
    assert!(!same_exec_line(
        qemu_line,
        &ours_line.replace("a1,0", "a1,8")
    ));
    assert!(!same_exec_line(
        qemu_line,
        &ours_line.replace("800e50", "800e58")
    ));
    let wide = exec_line("0, 0x10676, 0x67197, \"auipc gp, 421888\"").unwrap();
    assert_eq!(wide.head, "0, 0x10676, 0x67197");
    assert_eq!(instruction_bits(0x0aa0_5e63), 0x0aa0_5e63);
    assert_eq!(instruction_bits(0x140a_85ea), 0x85ea);
}

#[test]
fn drcov_files_are_split_into_header_and_blocks() {
    let mut file = b"DRCOV VERSION: 2\nBB Table: 2 bbs\n".to_vec();
    for (start, size) in [(0x10654u32, 6u16), (0x10676, 12)] {
        file.extend_from_slice(&start.to_ne_bytes());
        file.extend_from_slice(&size.to_ne_bytes());
        file.extend_from_slice(&0u16.to_ne_bytes());
    }
    let (header, blocks) = drcov(&file).unwrap();
    assert!(header.ends_with("2 bbs\n"));
    assert_eq!(blocks, [(0x10654, 6), (0x10676, 12)]);
    assert!(drcov(&file[..file.len() - 1]).is_err());
}
