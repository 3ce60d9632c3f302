//! `tcgkit run --plugin`: bundled plugins through the command line, their
//! counts checked against the engine's own count of the same run.

use std::process::Command;

mod common;
use common::guest;

fn scratch(name: &str) -> std::path::PathBuf {
    common::scratch("run-plugins", name)
}

/// The number after `label` on the first line that contains it.
fn number_after(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label:?} in {text}"));
    let rest = &line[line.find(label).unwrap() + label.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

fn run_with(plugins: &[&str], guest_name: &str) -> (String, String, String) {
    run_with_options(&[], plugins, guest_name)
}

/// [`run_with`], with tcgkit `options` first.
fn run_with_options(
    options: &[&str],
    plugins: &[&str],
    guest_name: &str,
) -> (String, String, String) {
    // Specs may name files: their path separators stay out of the name.
    let specs = plugins.join("+").replace('/', "_");
    let out_file = scratch(&format!("{guest_name}-{specs}{}.txt", options.join("")));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcgkit"));
    cmd.args(["run", "--stats"]).args(options);
    for p in plugins {
        cmd.args(["--plugin", p]);
    }
    cmd.arg("--plugin-out")
        .arg(&out_file)
        .arg(guest(guest_name));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        std::fs::read_to_string(&out_file).unwrap(),
    )
}

#[test]
fn insn_counts_equal_the_engines_count_inline_and_by_callback() {
    let bare = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .arg("run")
        .arg(guest("float"))
        .output()
        .unwrap();
    for spec in ["insn,inline=true", "insn,inline=false"] {
        let (stdout, stats, report) = run_with(&[spec], "float");
        // The plugin does not change what the guest prints.
        assert_eq!(stdout.as_bytes(), bare.stdout, "{spec}");
        let engine = number_after(&stats, "tcgkit: ");
        let plugin = number_after(&report, "total insns:");
        assert_eq!(plugin, engine, "{spec}: {report}\n{stats}");
    }
}

#[test]
fn several_plugins_at_once_each_report() {
    let (_, stats, report) = run_with(&["insn", "mem", "bb", "syscall"], "fileio");
    let engine = number_after(&stats, "tcgkit: ");
    assert_eq!(number_after(&report, "total insns:"), engine, "{report}");
    assert!(number_after(&report, "loads:") > 0, "{report}");
    assert!(number_after(&report, "stores:") > 0, "{report}");
}

#[test]
fn bad_plugin_spec_is_a_usage_error() {
    for spec in ["no-such-plugin", "insn,inline=maybe"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
            .args(["run", "--plugin", spec])
            .arg(guest("integer"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spec}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 2, "{err}");
        assert!(err.contains("--help"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

/// `drcov` writes the program's module line (its code bounds and entry,
/// as QEMU's loader computes them: for the `integer` fixture, from its
/// one executable segment, 0x10000 + 0x609e4 file bytes, entry 0x10898)
/// and one 8-byte entry per covered block, all inside the code; the
/// `_start` block, at the entry, is one of them.
#[test]
fn drcov_writes_the_programs_covered_blocks() {
    let file = scratch("integer.drcov");
    let _ = std::fs::remove_file(&file);
    let spec = format!("drcov,filename={}", file.display());
    let (_, _, report) = run_with(&[&spec], "integer");
    let bytes = std::fs::read(&file).unwrap();
    let table = b"BB Table: ";
    let at = bytes
        .windows(table.len())
        .position(|w| w == table)
        .expect("a BB table");
    let line_end = at + bytes[at..].iter().position(|&b| b == b'\n').unwrap();
    let header = std::str::from_utf8(&bytes[..line_end]).unwrap();
    let mut lines = header.lines();
    assert_eq!(lines.next(), Some("DRCOV VERSION: 2"));
    assert_eq!(lines.next(), Some("DRCOV FLAVOR: drcov-64"));
    assert_eq!(lines.next(), Some("Module Table: version 2, count 1"));
    assert_eq!(lines.next(), Some("Columns: id, base, end, entry, path"));
    let module = lines.next().unwrap();
    let expected = format!(
        "0, 0x10000, 0x709e4, 0x10898, {}",
        guest("integer").display()
    );
    assert_eq!(module, expected);
    let count = number_after(lines.next().unwrap(), "BB Table:") as usize;
    let entries = &bytes[line_end + 1..];
    assert_eq!(entries.len(), count * 8, "{count} entries of 8 bytes");
    assert!(count > 50, "{count} blocks covered");
    let blocks: Vec<(u32, u16, u16)> = entries
        .chunks_exact(8)
        .map(|e| {
            (
                u32::from_le_bytes(e[..4].try_into().unwrap()),
                u16::from_le_bytes(e[4..6].try_into().unwrap()),
                u16::from_le_bytes(e[6..].try_into().unwrap()),
            )
        })
        .collect();
    for &(offset, size, module) in &blocks {
        assert_eq!(module, 0);
        assert!(size > 0 && u64::from(offset) + u64::from(size) <= 0x609e4);
    }
    assert!(blocks.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
    assert!(blocks.iter().any(|b| b.0 == 0x898), "the entry block");
    assert!(
        report.contains(&format!("drcov: {count} blocks of ")),
        "{report}"
    );
}

/// The plugin specs `tcgkit run --help` gives as examples all run.
#[test]
fn the_help_examples_of_plugin_specs_run() {
    let help = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let line = help
        .lines()
        .find(|l| l.contains("--plugin <"))
        .expect("the --plugin option");
    let examples: Vec<&str> = line
        .split("e.g.")
        .nth(1)
        .expect("examples")
        .split('`')
        .skip(1)
        .step_by(2)
        .collect();
    assert!(examples.len() >= 3, "{line}");
    let dir = scratch("help-examples");
    std::fs::create_dir_all(&dir).unwrap();
    for spec in examples {
        let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
            .current_dir(&dir)
            .args(["run", "--plugin", spec, "--plugin-out", "report.txt"])
            .arg(guest("float"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{spec}: {out:?}");
    }
}

/// With a dynamic guest that dlopens and dlcloses two shared objects in
/// turn, `drcov` lists every module it mapped (the program first, as
/// QEMU's drcov does, then ld.so, libc and each load of the two objects, as
/// DynamoRIO's does) and attributes each covered block to its module; and
/// `hotblocks` names each block as module+offset.
#[test]
fn drcov_and_hotblocks_know_every_module_of_a_dynamic_guest() {
    if !common::sysroot_available() {
        return;
    }
    let sysroot = common::SYSROOT;
    let dir = guest("dynamic").canonicalize().unwrap();
    let file = scratch("dlopen.drcov");
    let report_file = scratch("dlopen-report.txt");
    let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "-L", sysroot, "--plugin"])
        .arg(format!("drcov,filename={}", file.display()))
        .args(["--plugin", "hotblocks,limit=5", "--plugin-out"])
        .arg(&report_file)
        .arg(dir.join("dlopen"))
        .arg(&dir)
        .arg("2")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&file).unwrap();
    let table = b"BB Table: ";
    let at = bytes.windows(table.len()).position(|w| w == table).unwrap();
    let line_end = at + bytes[at..].iter().position(|&b| b == b'\n').unwrap();
    let header = std::str::from_utf8(&bytes[..line_end]).unwrap();
    let rows: Vec<(u64, u64, String)> = header
        .lines()
        .skip_while(|l| !l.starts_with("Columns:"))
        .skip(1)
        .take_while(|l| !l.starts_with("BB Table"))
        .map(|l| {
            let f: Vec<&str> = l.split(", ").collect();
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            let name = f[4].rsplit('/').next().unwrap().to_string();
            (hex(f[1]), hex(f[2]), name)
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(
        names,
        [
            "dlopen",
            "ld-linux-riscv64-lp64d.so.1",
            "libc.so.6",
            "libmod_a.so",
            "libmod_b.so",
            "libmod_a.so",
            "libmod_b.so"
        ],
        "{header}"
    );
    assert!(header.contains(&format!("Module Table: version 2, count {}", rows.len())));
    let entries = &bytes[line_end + 1..];
    let mut per_module = vec![0usize; rows.len()];
    for e in entries.chunks_exact(8) {
        let offset = u64::from(u32::from_le_bytes(e[..4].try_into().unwrap()));
        let size = u64::from(u16::from_le_bytes(e[4..6].try_into().unwrap()));
        let module = usize::from(u16::from_le_bytes(e[6..].try_into().unwrap()));
        let (base, end, _) = &rows[module];
        assert!(
            base + offset + size <= *end,
            "block {offset:#x} outside module {module}"
        );
        per_module[module] += 1;
    }
    // Each load of each object ran its own code, and so did libc and ld.so.
    assert!(per_module.iter().all(|&n| n > 0), "{per_module:?}");
    let report = std::fs::read_to_string(&report_file).unwrap();
    assert!(
        report.contains("pc, tcount, icount, ecount, module\n"),
        "{report}"
    );
    let hottest = report
        .lines()
        .skip_while(|l| !l.starts_with("pc, tcount"))
        .nth(1)
        .unwrap();
    assert!(
        hottest.contains(", libmod_"),
        "the modules' loops are hottest: {report}"
    );
}

/// Every bundled counting plugin reports the same under the interpreter
/// and under the JIT compiling every block before its first run (inline
/// counters then run in compiled blocks that jump into each other; the
/// callbacks keep their blocks interpreted), and the inline count equals
/// the engine's.
#[test]
fn counts_are_the_same_in_both_execution_modes() {
    let run = |mode: &[&str], spec: &str| {
        let out_file = scratch(&format!("modes-{}-{spec}.txt", mode.join("")));
        let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
            .arg("run")
            .arg("--stats")
            .args(mode)
            .args(["--plugin", spec, "--plugin-out"])
            .arg(&out_file)
            .arg(guest("integer"))
            .arg("20000")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stats = String::from_utf8(out.stderr).unwrap();
        (stats, std::fs::read_to_string(&out_file).unwrap())
    };
    let interp: &[&str] = &["--jit", "off"];
    let jit: &[&str] = &["--jit", "on", "--jit-threshold", "0"];
    for spec in [
        "insn,inline=true",
        "insn",
        "bb,inline=true",
        "mem,inline=true",
        "mem",
    ] {
        let (_, a) = run(interp, spec);
        let (stats, b) = run(jit, spec);
        assert_eq!(a, b, "{spec}: the two modes report differently");
        if spec == "insn,inline=true" {
            assert_eq!(
                number_after(&b, "total insns:"),
                number_after(&stats, "tcgkit: "),
                "{spec}"
            );
            // The counting blocks ran compiled, jumping into each other.
            let runs = number_after(&stats, "bytes), ");
            let entries = number_after(&stats, "block runs in ");
            assert!(runs > 10 * entries, "{stats}");
        }
    }
}

#[test]
fn every_guest_thread_is_counted_on_its_own_vcpu() {
    // The main thread, four workers, a detached thread, a spinner and three
    // at a barrier: ten threads. On host threads they get vCPU indices as
    // QEMU gives them, one past the highest of the live threads, so the
    // indices of exited threads are taken again (qemu-riscv64's insn
    // plugin shows cpu 0 to 4; how many depends on which threads are
    // alive when another starts); taking turns, each thread has its own:
    // ten. Inline and callback counts, per vCPU, add up to what the
    // engines executed in the same run.
    let specs = ["insn,inline=true", "insn,inline=false", "bb,inline=true"];
    for (spec, threads) in specs.into_iter().flat_map(|s| [(s, "turns"), (s, "host")]) {
        let (stdout, stats, report) = run_with_options(&["--threads", threads], &[spec], "threads");
        assert!(stdout.contains("worker 3: "), "{spec}: {stdout}");
        let engine = number_after(&stats, "tcgkit: ");
        // `cpu N insns: M` (insn) or `cpu N: bbs: B, insns: M` (bb).
        let insns_of = |prefix: &str| -> Vec<u64> {
            report
                .lines()
                .filter(|l| l.starts_with(prefix))
                .map(|l| number_after(l, "insns:"))
                .collect()
        };
        let rows = insns_of("cpu ");
        if threads == "host" {
            assert!((5..10).contains(&rows.len()), "{spec} {threads}: {report}");
        } else {
            assert_eq!(rows.len(), 10, "{spec} {threads}: {report}");
        }
        // Each worker adds 200000 numbers: more instructions than that.
        assert!(rows[1..5].iter().all(|&n| n > 200_000), "{spec}: {report}");
        assert_eq!(rows.iter().sum::<u64>(), engine, "{spec}: {report}");
        assert_eq!(insns_of("total"), [engine], "{spec}: {report}");
    }
}

#[test]
fn scoreboards_grow_for_threads_past_their_first_rows() {
    // 40 threads alive at once, beside the main thread: past the 16 rows
    // a plugin's scoreboards are made with. Every vCPU's row counts, in
    // both ways of running threads and both JIT modes, and the rows add
    // up to what the engines executed; the cache simulator makes each
    // vCPU's caches at its first access and sees every access the `mem`
    // plugin counts. bb counts a block whole on entry: that adds up only
    // if no block is left midway when another thread kicks this one (into
    // a syscall, a signal, a reset), which memory callbacks once allowed.
    let modes = [
        ("host", "on"),
        ("host", "off"),
        ("turns", "on"),
        ("turns", "off"),
    ];
    let plugin_sets: [&[&str]; 2] = [
        &["insn,inline=true", "cache", "mem,inline=true"],
        &["bb,inline=true", "cache", "mem,inline=false"],
    ];
    for ((threads, jit), plugins) in modes
        .into_iter()
        .flat_map(|mode| plugin_sets.map(|set| (mode, set)))
    {
        let options = ["--threads", threads, "--jit", jit];
        let (stdout, stats, report) = run_with_options(&options, plugins, "many_threads");
        let case = format!("{plugins:?}, {threads}, jit {jit}");
        assert!(
            stdout.ends_with("40 threads, total 179778720576\n"),
            "{case}: {stdout}"
        );
        let rows: Vec<u64> = report
            .lines()
            .filter(|l| l.starts_with("cpu "))
            .map(|l| number_after(l, "insns:"))
            .collect();
        assert_eq!(rows.len(), 41, "{case}: {report}");
        // Each thread adds 20000 numbers: more instructions than that.
        assert!(rows.iter().all(|&n| n > 20_000), "{case}: {report}");
        let engine = number_after(&stats, "tcgkit: ");
        assert_eq!(rows.iter().sum::<u64>(), engine, "{case}: {report}");
        if plugins.contains(&"cache") {
            let accesses = number_after(&report, "total accesses:");
            let mut lines = report.lines().skip_while(|l| !l.contains("dmem accesses"));
            let cache = lines.nth(1).expect("the cache's totals");
            assert_eq!(number_after(cache, ""), accesses, "{case}: {report}");
        }
    }
}

#[test]
fn resets_from_threads_keep_every_count() {
    // `reset` resets itself from a block callback every N instructions,
    // whichever guest thread runs then, and counts on through each
    // completion: its total must be the engines', exactly. On host
    // threads, the others run on meanwhile (and wait in futexes for the
    // resetting one).
    let cases = ["7", "1000"]
        .into_iter()
        .flat_map(|every| [(every, "turns"), (every, "host")]);
    for (every, threads) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
            .args(["run", "--threads", threads, "--stats", "--plugin"])
            .arg(format!("reset,every={every}"))
            .arg(guest("cxx_threads"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let engine = number_after(&stderr, "tcgkit: ");
        let resets = number_after(&stderr, "resets:");
        assert_eq!(number_after(&stderr, "total insns:"), engine, "{stderr}");
        // In turns a reset completes at the next block; on host threads
        // it waits for every running thread's next safe point, and no new
        // one is asked for meanwhile: how many fit depends on the host's
        // scheduling.
        let fewest = if threads == "turns" { engine / 1000 } else { 1 };
        assert!(resets >= fewest, "every={every}, {threads}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with("shared 400000 atomic 400000"),
            "{stdout}"
        );
    }
}
