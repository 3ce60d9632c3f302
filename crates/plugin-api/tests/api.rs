//! The plugin API and the bundled plugins on small hand-assembled RV64
//! programs whose counts are known exactly.

mod common;
use common::{ECALL, Shared, addi, blt, i_type};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tcgkit_plugin_api::plugins::bb::BlockCount;
use tcgkit_plugin_api::plugins::cache::CacheSim;
use tcgkit_plugin_api::plugins::drcov::DrCov;
use tcgkit_plugin_api::plugins::hotblocks::HotBlocks;
use tcgkit_plugin_api::plugins::howvec::{HowVec, InsnClass};
use tcgkit_plugin_api::plugins::insn::InsnCount;
use tcgkit_plugin_api::plugins::mem::MemCount;
use tcgkit_plugin_api::plugins::syscall::{SyscallCount, SyscallStats};
use tcgkit_plugin_api::*;
use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, Perms};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const CODE: u64 = 0x1000;
const DATA: u64 = 0x10000;
const A0: u32 = 10;
const A1: u32 = 11;
const A2: u32 = 12;
const T0: u32 = 5;
const T1: u32 = 6;

fn ld(rd: u32, rs1: u32, imm: i32) -> u32 {
    i_type(0x03, 3, rd, rs1, imm)
}
fn sd(rs2: u32, rs1: u32, imm: i32) -> u32 {
    let imm = imm as u32;
    (((imm >> 5) & 0x7f) << 25) | (rs2 << 20) | (rs1 << 15) | (3 << 12) | ((imm & 0x1f) << 7) | 0x23
}
fn lui(rd: u32, imm20: u32) -> u32 {
    (imm20 << 12) | (rd << 7) | 0x37
}

/// The loop program: 10 iterations of two loads and one store.
/// 53 instructions, 20 loads, 10 stores, 11 blocks (7 + 9 x 5 + 1 insns).
fn loop_program() -> Vec<u32> {
    vec![
        lui(A0, (DATA >> 12) as u32),
        addi(A2, 0, 10),
        ld(T0, A0, 0), // loop:
        ld(T1, A0, 8),
        sd(T0, A0, 16),
        addi(A1, A1, 1),
        blt(A1, A2, -16),
        ECALL,
    ]
}
const LOOP_PC: u64 = CODE + 8;

/// A machine with `code` at CODE and a zeroed 64 KiB data area at DATA.
fn machine(code: &[u32]) -> Result<(GuestMemory, Cpu), Box<dyn std::error::Error>> {
    let mut mem = GuestMemory::new();
    mem.map(CODE, 0x1000, Perms::READ | Perms::EXEC)?;
    mem.map(DATA, 0x10000, Perms::READ | Perms::WRITE)?;
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write_initial(CODE, &bytes)?;
    let mut cpu = Cpu::new();
    cpu.set_pc(CODE);
    Ok((mem, cpu))
}

/// Runs `code` to its ecall under `host`, then finishes the host.
fn run(host: &PluginHost, code: &[u32]) -> Result<Engine<Rv64>, Box<dyn std::error::Error>> {
    let (mut mem, mut cpu) = machine(code)?;
    let mut engine = Engine::new(Rv64::new());
    host.attach(&mut engine);
    host.vcpu_init(0);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    host.vcpu_exit(0);
    host.finish()?;
    Ok(engine)
}

fn host() -> PluginHost {
    PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()))
}

fn args(name: &str, pairs: &[(&str, &str)]) -> PluginArgs {
    PluginArgs::new(name, pairs.iter().copied())
}

#[test]
fn insn_counts_equal_the_engine_inline_and_by_callback() -> TestResult {
    let host = host();
    let inline = Arc::new(InsnCount::from_args(
        &args("insn", &[("inline", "on")]),
        host.guest(),
    )?);
    let callback = Arc::new(InsnCount::from_args(
        &args("insn", &[("inline", "off")]),
        host.guest(),
    )?);
    host.install("insn", inline.clone())?;
    host.install("insn", callback.clone())?;
    let engine = run(&host, &loop_program())?;
    assert_eq!(engine.stats().insns_executed, 53);
    assert_eq!(inline.total(), 53);
    assert_eq!(callback.total(), 53);
    assert_eq!(inline.vcpu_count(0), 53);
    Ok(())
}

/// `insn` built for the engine's frontend counts through a callback the
/// engine compiles into its loop: the same count, alone on every block
/// (the loop it takes) or by name from the registry built for the
/// frontend, and beside another plugin's callback.
#[test]
fn insn_counts_through_a_callback_inlined_for_the_frontend() -> TestResult {
    let host = host();
    let inlined =
        Arc::new(InsnCount::from_args(&args("insn", &[]), host.guest())?.inlined_for::<Rv64>());
    host.install("insn", inlined.clone())?;
    let engine = run(&host, &loop_program())?;
    assert_eq!(engine.stats().insns_executed, 53);
    assert_eq!((inlined.total(), inlined.vcpu_count(0)), (53, 53));

    let registry = PluginRegistry::bundled_for::<Rv64>();
    for specs in [
        &["insn"][..],
        &["insn", "mem"],
        &["insn", "insn,inline=off"],
        &["mem"],
    ] {
        let out = Shared::default();
        let guest = GuestInfo::user("riscv64", 1);
        let host = PluginHost::from_specs_for(guest, &registry, specs, Box::new(out.clone()))?;
        run(&host, &loop_program())?;
        let text = out.text();
        let counts = text.matches("total insns: 53\n").count();
        assert_eq!(
            counts,
            specs.iter().filter(|s| s.starts_with("insn")).count(),
            "{text}"
        );
        assert_eq!(
            text.contains("loads: 20\n"),
            specs.contains(&"mem"),
            "{text}"
        );
        assert_eq!(
            text.contains("stores: 10\n"),
            specs.contains(&"mem"),
            "{text}"
        );
    }
    Ok(())
}

/// `mem` built for the engine's frontend counts through a callback the
/// engine compiles into its MemEach loop: the same loads and stores.
#[test]
fn mem_counts_through_a_callback_inlined_for_the_frontend() -> TestResult {
    for (pairs, loads, stores) in [
        (&[][..], 20, 10),
        (&[("rw", "r")][..], 20, 0),
        (&[("rw", "w")][..], 0, 10),
    ] {
        let host = host();
        let mem = MemCount::from_args(&args("mem", pairs), host.guest())?;
        let mem = Arc::new(mem.inlined_for::<Rv64>());
        host.install("mem", mem.clone())?;
        run(&host, &loop_program())?;
        assert_eq!((mem.loads(), mem.stores()), (loads, stores), "{pairs:?}");
    }
    Ok(())
}

#[test]
fn mem_counts_the_known_loads_and_stores() -> TestResult {
    for (pairs, loads, stores) in [
        (&[("inline", "on")][..], 20, 10),
        (&[("inline", "off")][..], 20, 10),
        (&[("rw", "r")][..], 20, 0),
        (&[("rw", "w"), ("inline", "on")][..], 0, 10),
    ] {
        let host = host();
        let mem = Arc::new(MemCount::from_args(&args("mem", pairs), host.guest())?);
        host.install("mem", mem.clone())?;
        run(&host, &loop_program())?;
        assert_eq!((mem.loads(), mem.stores()), (loads, stores), "{pairs:?}");
    }
    Ok(())
}

#[test]
fn mem_trace_prints_each_access() -> TestResult {
    let out = Shared::default();
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(out.clone()));
    host.install_spec(&PluginRegistry::bundled(), "mem,trace=on")?;
    run(&host, &loop_program())?;
    let text = out.text();
    assert_eq!(
        text.lines().filter(|l| l.contains(", load, ")).count(),
        20,
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.contains(", store, ")).count(), 10);
    assert!(
        text.contains(&format!(
            "{LOOP_PC:#x}, ld t0, 0(a0), {DATA:#x}, 64, load, 0x0"
        )),
        "{text}"
    );
    assert!(text.contains("loads: 20\nstores: 10\n"));
    Ok(())
}

#[test]
fn bb_and_hotblocks_count_blocks() -> TestResult {
    let host = host();
    let bb = Arc::new(BlockCount::from_args(
        &args("bb", &[("inline", "on")]),
        host.guest(),
    )?);
    let bb_cb = Arc::new(BlockCount::from_args(&args("bb", &[]), host.guest())?);
    let hot = Arc::new(HotBlocks::from_args(
        &args("hotblocks", &[("limit", "2")]),
        host.guest(),
    )?);
    host.install("bb", bb.clone())?;
    host.install("bb", bb_cb.clone())?;
    host.install("hotblocks", hot.clone())?;
    let engine = run(&host, &loop_program())?;
    assert_eq!((bb.blocks(), bb.insns()), (11, 53));
    assert_eq!((bb_cb.blocks(), bb_cb.insns()), (11, 53));
    assert_eq!(engine.stats().blocks_executed, 11);
    let blocks = hot.blocks();
    let summary: Vec<(u64, u64, u64)> = blocks
        .iter()
        .map(|b| (b.pc, b.insns, b.executions))
        .collect();
    assert_eq!(summary, [(LOOP_PC, 5, 9), (CODE, 7, 1), (CODE + 28, 1, 1)]);
    assert!(hot.report().lines().count() == 4, "{}", hot.report());
    Ok(())
}

#[test]
fn howvec_classifies_executed_instructions() -> TestResult {
    let host = host();
    let how = Arc::new(HowVec::from_args(&args("howvec", &[]), host.guest())?);
    host.install("howvec", how.clone())?;
    run(&host, &loop_program())?;
    assert_eq!(how.count(InsnClass::Load), 20);
    assert_eq!(how.count(InsnClass::Store), 10);
    assert_eq!(how.count(InsnClass::AluImm), 11);
    assert_eq!(how.count(InsnClass::UpperImm), 1);
    assert_eq!(how.count(InsnClass::Branch), 10);
    assert_eq!(how.count(InsnClass::System), 1);
    assert_eq!(how.histogram().iter().map(|h| h.1).sum::<u64>(), 53);
    assert!(HowVec::from_args(&args("howvec", &[]), &GuestInfo::user("x86_64", 1)).is_err());
    Ok(())
}

/// Appends 64 loads striding 64 bytes over 4 KiB from DATA (7
/// instructions: the loop is the last 4).
fn strided_loads(code: &mut Vec<u32>) {
    code.extend([
        lui(A0, (DATA >> 12) as u32),
        addi(A1, 0, 0),
        addi(A2, 0, 64),
        ld(T0, A0, 0),
        addi(A0, A0, 64),
        addi(A1, A1, 1),
        blt(A1, A2, -12),
    ]);
}

#[test]
fn cache_counts_known_misses() -> TestResult {
    // Two passes of 64 loads striding 64 bytes over 4 KiB: the first pass
    // misses on every line, the second hits (the 16 KiB cache holds it all).
    let mut code = Vec::new();
    strided_loads(&mut code);
    strided_loads(&mut code);
    code.push(ECALL);
    let host = host();
    let sim = Arc::new(CacheSim::from_args(&args("cache", &[]), host.guest())?);
    host.install("cache", sim.clone())?;
    let engine = run(&host, &code)?;
    let t = sim.totals();
    assert_eq!((t.data_accesses, t.data_misses), (128, 64));
    assert_eq!(t.insn_accesses, engine.stats().insns_executed);
    // 15 instructions (60 bytes) in one 64-byte line... from 0x1000: one miss.
    assert_eq!(t.insn_misses, 1);

    // A 2 KiB direct-mapped cache cannot hold 4 KiB: the second pass misses too.
    let host = self::host();
    let small = Arc::new(CacheSim::from_args(
        &args(
            "cache",
            &[("dcachesize", "2048"), ("dassoc", "1"), ("dblksize", "64")],
        ),
        host.guest(),
    )?);
    host.install("cache", small.clone())?;
    run(&host, &code)?;
    assert_eq!(small.totals().data_misses, 128);
    assert!(
        small.report().contains("ld t0, 0(a0)"),
        "{}",
        small.report()
    );
    assert!(CacheSim::from_args(&args("cache", &[("dcachesize", "3000")]), host.guest()).is_err());
    Ok(())
}

/// Each vCPU simulates caches of its own: a second vCPU running the same
/// loads after the first misses on every line again, and the totals are
/// the two vCPUs' sums.
#[test]
fn cache_simulates_each_vcpu_apart() -> TestResult {
    let mut code = Vec::new();
    strided_loads(&mut code);
    code.push(ECALL);
    let host = PluginHost::new(GuestInfo::user("riscv64", 2), Box::new(std::io::sink()));
    let sim = Arc::new(CacheSim::from_args(&args("cache", &[]), host.guest())?);
    host.install("cache", sim.clone())?;
    let (mut mem, mut cpu0) = machine(&code)?;
    let mut cpu1 = cpu0.clone();
    let mut engine = Engine::new(Rv64::new());
    host.attach(&mut engine);
    host.vcpu_init(0);
    assert_eq!(engine.run(&mut cpu0, &mut mem), CpuExit::Syscall);
    let first = sim.totals();
    assert_eq!((first.data_accesses, first.data_misses), (64, 64));
    let mut vcpu1 = engine.new_vcpu();
    host.vcpu_init(1);
    assert_eq!(
        engine.run_vcpu(&mut vcpu1, &mut cpu1, &mut mem),
        CpuExit::Syscall
    );
    host.vcpu_exit(1);
    host.vcpu_exit(0);
    host.finish()?;
    let t = sim.totals();
    assert_eq!((t.data_accesses, t.data_misses), (128, 128));
    assert_eq!(t.insn_accesses, engine.stats().insns_executed);
    // Each vCPU fetches the 8 instructions' one line once.
    assert_eq!(t.insn_misses, 2);
    Ok(())
}

/// `drcov` covers the blocks that ran inside the program's code, each
/// once, as offsets from the start of the code; a block starting past the
/// end of the code is not the program's.
#[test]
fn drcov_covers_the_blocks_run_inside_the_code() -> TestResult {
    // The covered blocks and the file written.
    type Coverage = (Vec<(u32, u16)>, Vec<u8>);
    let covered = |end_code: u64| -> Result<Coverage, Box<dyn std::error::Error>> {
        let program = GuestProgram {
            path: "/guest/loop".into(),
            start_code: CODE,
            end_code,
            entry: CODE,
        };
        let host = PluginHost::new(
            GuestInfo::user("riscv64", 1).with_program(program),
            Box::new(std::io::sink()),
        );
        let file = std::env::temp_dir().join(format!("tcgkit-api-{}.drcov", std::process::id()));
        let filename = file.display().to_string();
        let cov = Arc::new(DrCov::from_args(
            &args("drcov", &[("filename", &filename)]),
            host.guest(),
        )?);
        host.install("drcov", cov.clone())?;
        run(&host, &loop_program())?;
        let written = std::fs::read(&file)?;
        std::fs::remove_file(&file)?;
        assert_eq!(written, cov.file_bytes());
        Ok((cov.covered(), written))
    };
    // The entry block (7 instructions up to the branch), the loop (from
    // its head to the branch), the ecall after it.
    let (all, bytes) = covered(CODE + 0x20)?;
    assert_eq!(all, [(0, 0x1c), (8, 0x14), (0x1c, 4)]);
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with(
            "DRCOV VERSION: 2\nDRCOV FLAVOR: drcov-64\nModule Table: version 2, count 1\n\
             Columns: id, base, end, entry, path\n0, 0x1000, 0x1020, 0x1000, /guest/loop\n\
             BB Table: 3 bbs\n"
        ),
        "{text}"
    );
    let entries = &bytes[bytes.len() - 24..];
    assert_eq!(&entries[8..16], [8, 0, 0, 0, 0x14, 0, 0, 0]);
    let (cut, _) = covered(CODE + 0x1c)?;
    assert_eq!(cut, [(0, 0x1c), (8, 0x14)]);
    // Without a program there is nothing to cover.
    let err = DrCov::from_args(&args("drcov", &[]), &GuestInfo::user("riscv64", 1));
    assert!(
        err.is_err_and(|e| e.to_string().contains("guest program")),
        "drcov without a program"
    );
    Ok(())
}

#[test]
fn syscall_counts_calls_and_errors() -> TestResult {
    let out = Shared::default();
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(out.clone()));
    let sys = Arc::new(SyscallCount::from_args(&args(
        "syscall",
        &[("print", "on")],
    ))?);
    host.install("syscall", sys.clone())?;
    for (nr, ret) in [(64, 5), (64, (-9i64) as u64), (63, 0), (64, 1), (93, 0)] {
        host.on_syscall(0, nr, &[1, 2, 3, 4, 5, 6]);
        host.on_syscall_return(0, nr, ret);
    }
    host.finish()?;
    let stats = sys.stats();
    assert_eq!(
        stats.get(&64),
        Some(&SyscallStats {
            calls: 3,
            errors: 1
        })
    );
    assert_eq!(
        stats.get(&63),
        Some(&SyscallStats {
            calls: 1,
            errors: 0
        })
    );
    assert_eq!(stats.len(), 3);
    let text = out.text();
    assert!(text.contains("write(64) returned -9"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("write(64)") && l.contains(" 3 ") && l.ends_with(" 1")),
        "{text}"
    );
    Ok(())
}

#[test]
fn from_specs_runs_every_bundled_plugin_and_reports_at_exit() -> TestResult {
    let out = Shared::default();
    let specs = [
        "insn",
        "insn,inline=on",
        "mem",
        "bb",
        "hotblocks,limit=1",
        "howvec",
        "syscall",
        "cache",
    ];
    let host = PluginHost::from_specs(&specs, Box::new(out.clone()))?;
    assert_eq!(host.installed().len(), specs.len());
    run(&host, &loop_program())?;
    let text = out.text();
    assert_eq!(text.matches("total insns: 53\n").count(), 2, "{text}");
    for needle in [
        "loads: 20\n",
        "total: bbs: 11, insns: 53\n",
        "load ",
        "dmem accesses",
        "collected 3 blocks",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from\n{text}");
    }
    // finish is idempotent: nothing is printed twice.
    host.finish()?;
    assert_eq!(out.text(), text);
    Ok(())
}

#[test]
fn bad_specs_are_clear_errors() {
    let err = |spec: &str| {
        PluginHost::from_specs(&[spec], Box::new(std::io::sink()))
            .err()
            .map(|e| e.to_string())
    };
    let unknown = err("nope").unwrap_or_default();
    assert!(
        unknown.contains("nope") && unknown.contains("insn") && unknown.contains("cache"),
        "{unknown}"
    );
    let typo = err("insn,inlin=on").unwrap_or_default();
    assert!(typo.contains("inlin") && typo.contains("insn"), "{typo}");
    let value = err("hotblocks,limit=lots").unwrap_or_default();
    assert!(value.contains("limit") && value.contains("lots"), "{value}");
    assert!(err("mem,inline=on,trace=on").is_some());
    assert!(err("insn,inline").is_some());
}

/// A plugin built from closures, for API tests.
struct Custom<F: Fn(&PluginHandle) + Send + Sync + 'static>(F);
impl<F: Fn(&PluginHandle) + Send + Sync + 'static> Plugin for Custom<F> {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        (self.0)(handle);
        Ok(())
    }
}

#[test]
fn access_must_be_declared() -> TestResult {
    let host = host();
    let results = Arc::new(Mutex::new(Vec::<String>::new()));
    let r = results.clone();
    host.install(
        "access",
        Arc::new(Custom(move |h: &PluginHandle| {
            let r = r.clone();
            h.on_tb_trans(move |tb| {
                if tb.pc() != CODE {
                    return;
                }
                let names = tb.register_names();
                assert!(names.contains(&"a0") && names.contains(&"pc"));
                let Some(mut insn) = tb.insn(2) else { return };
                let (r1, r2, r3, r4) = (r.clone(), r.clone(), r.clone(), r.clone());
                insn.on_exec(Access::NONE, move |ctx| {
                    r1.lock().unwrap().push(format!(
                        "none: {:?}",
                        ctx.read_register("a0").map_err(|e| e.to_string())
                    ));
                });
                insn.on_exec(Access::REGISTERS | Access::MEMORY, move |ctx| {
                    let mut word = [0u8; 4];
                    let mem = ctx
                        .read_memory(CODE, &mut word)
                        .map(|()| u32::from_le_bytes(word));
                    let bad = ctx.read_memory(0x9_0000, &mut word).is_err();
                    let unknown = ctx.read_register("nope").map_err(|e| e.to_string());
                    r2.lock().unwrap().push(format!(
                        "regs: a0={:#x} pc={:#x} mem={:#x?} bad={bad} {unknown:?}",
                        ctx.read_register("a0").unwrap_or(0),
                        ctx.read_register("pc").unwrap_or(0),
                        mem.unwrap_or(0)
                    ));
                });
                insn.on_exec(Access::REGISTERS, move |ctx| {
                    let mut b = [0u8; 1];
                    r3.lock().unwrap().push(format!(
                        "nomem: {:?}",
                        ctx.read_memory(CODE, &mut b).is_err()
                    ));
                });
                insn.on_mem(MemFilter::All, Access::REGISTERS, move |ctx, access| {
                    r4.lock().unwrap().push(format!(
                        "mem: {:?} {:#x} {} {} {}",
                        ctx.read_register("a0").map_err(|e| e.to_string()),
                        access.addr,
                        access.size,
                        access.is_store,
                        access.sign_extended
                    ));
                });
            });
        })),
    )?;
    run(&host, &loop_program())?;
    let got = results.lock().map_err(|e| e.to_string())?.clone();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(
        got[0],
        "none: Err(\"this callback did not declare register access\")"
    );
    assert_eq!(
        got[1],
        format!(
            "regs: a0={DATA:#x} pc={LOOP_PC:#x} mem={:#x} bad=true Err(\"unknown register \\\"nope\\\"\")",
            loop_program()[0]
        )
    );
    assert_eq!(got[2], "nomem: true");
    assert_eq!(
        got[3],
        format!(
            "mem: Err(\"registers are not readable in this kind of callback\") {DATA:#x} 8 false false"
        )
    );
    Ok(())
}

#[test]
fn conditional_callbacks_follow_the_scoreboard() -> TestResult {
    let host = host();
    let calls = Arc::new(AtomicU64::new(0));
    let block_calls = Arc::new(AtomicU64::new(0));
    let (c, bc) = (calls.clone(), block_calls.clone());
    host.install(
        "cond",
        Arc::new(Custom(move |h: &PluginHandle| {
            let board = h.scoreboard(2);
            let (c, bc) = (c.clone(), bc.clone());
            h.on_tb_trans(move |tb| {
                tb.on_exec_inline(&board, 1, InlineKind::Add(1));
                let bc = bc.clone();
                // Blocks entered while fewer than 3 blocks were entered before.
                tb.on_exec_cond(&board, 1, Compare::Le, 3, Access::NONE, move |_| {
                    bc.fetch_add(1, Relaxed);
                });
                for mut insn in tb.insns() {
                    insn.on_exec_inline(&board, 0, InlineKind::Add(1));
                    let c = c.clone();
                    insn.on_exec_cond(&board, 0, Compare::Ge, 50, Access::NONE, move |_| {
                        c.fetch_add(1, Relaxed);
                    });
                }
            });
        })),
    )?;
    run(&host, &loop_program())?;
    assert_eq!(calls.load(Relaxed), 4); // instructions 50..=53
    assert_eq!(block_calls.load(Relaxed), 3);
    Ok(())
}

#[test]
fn inline_store_sets_the_entry() -> TestResult {
    let host = host();
    let board = Arc::new(Mutex::new(None));
    let b = board.clone();
    host.install(
        "store",
        Arc::new(Custom(move |h: &PluginHandle| {
            let sb = h.scoreboard(1);
            *b.lock().unwrap() = Some(sb.clone());
            h.on_tb_trans(move |tb| {
                let pc = tb.pc();
                tb.on_exec_inline(&sb, 0, InlineKind::Store(pc));
            });
        })),
    )?;
    run(&host, &loop_program())?;
    let sb = board
        .lock()
        .map_err(|e| e.to_string())?
        .clone()
        .ok_or("no board")?;
    assert_eq!(sb.get(0, 0), CODE + 28); // the last block entered: the ecall
    Ok(())
}

#[test]
fn tb_trans_sees_bytes_disassembly_and_symbols() -> TestResult {
    let host = host();
    host.set_symbols(SymbolTable::new([
        (CODE, 8, "start".to_owned()),
        (LOOP_PC, 20, "body".to_owned()),
    ]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    host.install(
        "view",
        Arc::new(Custom(move |h: &PluginHandle| {
            let s = s.clone();
            h.on_tb_trans(move |tb| {
                let (pc, n, size) = (tb.pc(), tb.insn_count(), tb.size());
                for insn in tb.insns() {
                    s.lock().unwrap().push((
                        pc,
                        n,
                        size,
                        insn.pc(),
                        insn.size(),
                        insn.bytes(),
                        insn.disassembly(),
                        insn.symbol().map(str::to_owned),
                        insn.qemu_disassembly(),
                    ));
                }
            });
        })),
    )?;
    run(&host, &loop_program())?;
    let seen = seen.lock().map_err(|e| e.to_string())?.clone();
    assert_eq!(seen.len(), 7 + 5 + 1);
    let first = &seen[0];
    assert_eq!(
        (first.0, first.1, first.2, first.3, first.4),
        (CODE, 7, 28, CODE, 4)
    );
    assert_eq!(first.5, loop_program()[0].to_le_bytes());
    assert_eq!(first.6, format!("li a0, {DATA:#x}"));
    // QEMU's text, as qemu_plugin_insn_disas gives it (the riscv frontend
    // has QEMU's syntax): hex encoding, columns, trailing padding.
    assert_eq!(
        first.8,
        "00010537          lui                     a0,65536"
    );
    assert_eq!(seen[12].8, "00000073          ecall                   ");
    assert_eq!(first.7.as_deref(), Some("start"));
    assert_eq!(seen[2].7.as_deref(), Some("body"));
    assert_eq!(seen[12].7, None); // the ecall, past both symbols
    Ok(())
}

#[test]
fn reset_and_uninstall_lifecycle() -> TestResult {
    let host = host();
    let handle = Arc::new(Mutex::new(None::<PluginHandle>));
    let h = handle.clone();
    let id = host.install(
        "life",
        Arc::new(Custom(move |ph: &PluginHandle| {
            *h.lock().unwrap() = Some(ph.clone())
        })),
    )?;
    let ph = handle
        .lock()
        .map_err(|e| e.to_string())?
        .clone()
        .ok_or("no handle")?;
    assert_eq!(
        (ph.id(), ph.name(), ph.guest().arch.as_str()),
        (id, "life", "riscv64")
    );
    assert!(ph.is_installed());
    // Without an engine, completions run at finish, each exactly once.
    let done = Arc::new(AtomicU64::new(0));
    for _ in 0..3 {
        let d = done.clone();
        ph.reset(move |_| {
            d.fetch_add(1, Relaxed);
        })?;
    }
    let d = done.clone();
    ph.uninstall(move || {
        d.fetch_add(10, Relaxed);
    })?;
    assert!(matches!(
        ph.reset(|_| {}),
        Err(PluginError::Uninstalling { .. })
    ));
    assert!(matches!(
        ph.uninstall(|| {}),
        Err(PluginError::Uninstalling { .. })
    ));
    assert_eq!(done.load(Relaxed), 0);
    host.finish()?;
    assert_eq!(done.load(Relaxed), 13);
    assert!(!ph.is_installed());
    assert!(host.installed().is_empty());
    assert!(matches!(
        ph.reset(|_| {}),
        Err(PluginError::NotInstalled { .. })
    ));
    ph.on_atexit(|| panic!("registered after uninstall: must never run"));
    host.finish()?;
    Ok(())
}

#[test]
fn failing_installs_are_refused() {
    struct Refuses;
    impl Plugin for Refuses {
        fn install(self: Arc<Self>, h: &PluginHandle) -> Result<(), PluginError> {
            h.on_atexit(|| panic!("a refused plugin's callback ran"));
            Err(PluginError::InstallFailed {
                plugin: "refuses".into(),
                reason: "no".into(),
            })
        }
    }
    struct Panics;
    impl Plugin for Panics {
        fn install(self: Arc<Self>, _: &PluginHandle) -> Result<(), PluginError> {
            panic!("boom at install")
        }
    }
    let host = host();
    assert!(host.install("refuses", Arc::new(Refuses)).is_err());
    let err = host
        .install("panics", Arc::new(Panics))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("panics") && err.contains("boom at install"),
        "{err}"
    );
    assert!(host.installed().is_empty());
    assert!(host.finish().is_ok());
}

#[test]
fn a_panicking_tb_trans_removes_only_its_plugin() -> TestResult {
    let out = Shared::default();
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(out.clone()));
    let counter = Arc::new(InsnCount::from_args(&args("insn", &[]), host.guest())?);
    host.install("insn", counter.clone())?;
    let atexit = Arc::new(AtomicU64::new(0));
    let a = atexit.clone();
    host.install(
        "crashy",
        Arc::new(Custom(move |h: &PluginHandle| {
            h.on_tb_trans(|tb| {
                for mut insn in tb.insns() {
                    insn.on_exec(Access::NONE, |_| {});
                }
                if tb.pc() == LOOP_PC {
                    panic!("crashy cannot translate the loop");
                }
            });
            let a = a.clone();
            h.on_atexit(move || {
                a.fetch_add(1, Relaxed);
            });
        })),
    )?;
    run(&host, &loop_program())?;
    assert_eq!(counter.total(), 53);
    let failures = host.failures();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0].contains("crashy")
            && failures[0].contains("tb_trans")
            && failures[0].contains("the loop")
    );
    assert!(out.text().contains(&failures[0]));
    assert_eq!(
        atexit.load(Relaxed),
        1,
        "a failed plugin's atexit still runs once"
    );
    assert_eq!(host.installed().len(), 1);
    Ok(())
}

/// How a plugin in [`a_panicking_callback_stops_its_plugin_after_that_instruction`]
/// panics.
#[derive(Clone, Copy, Debug)]
enum PanicIn {
    /// Its one shared callback on every instruction (the CallEach loop).
    SharedExec,
    /// The first of two callbacks on every instruction; the second panics
    /// too once the first did (the general loop).
    FirstOfTwo,
    /// Its one shared memory callback on every access (the MemEach loop).
    SharedMemory,
}

/// A plugin whose callback panics on its 5th call is removed with one
/// message; its callbacks stop after the instruction that was executing
/// (callbacks still due for it run), the guest runs to its end, and another
/// plugin, if any, counts every instruction. The 5th call is in the middle
/// of the first block (7 instructions). Alone, the plugin's blocks run
/// through the loops of one callback kind, which test requests through a
/// handle at the block's end only; with the inline counter, through the
/// general loop.
#[test]
fn a_panicking_callback_stops_its_plugin_after_that_instruction() -> TestResult {
    let cases = [
        (PanicIn::SharedExec, false),
        (PanicIn::SharedExec, true),
        (PanicIn::FirstOfTwo, true),
        (PanicIn::SharedMemory, false),
        (PanicIn::SharedMemory, true),
    ];
    for (case, with_counter) in cases {
        let out = Shared::default();
        let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(out.clone()));
        let counter = Arc::new(InsnCount::from_args(
            &args("insn", &[("inline", "on")]),
            host.guest(),
        )?);
        if with_counter {
            host.install("insn", counter.clone())?;
        }
        let case_name = format!("{case:?}, counter: {with_counter}");
        // Calls of the panicking callback, and of the one after it.
        let (calls, after) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (c, a) = (calls.clone(), after.clone());
        host.install(
            "crashy",
            Arc::new(Custom(move |h: &PluginHandle| {
                let counted = c.clone();
                let crash = move || {
                    if counted.fetch_add(1, Relaxed) + 1 == 5 {
                        panic!("crashy gives up");
                    }
                };
                match case {
                    PanicIn::SharedExec => {
                        let shared = h.shared_exec_callback(Access::NONE, move |_| crash());
                        h.on_tb_trans(move |tb| {
                            for mut insn in tb.insns() {
                                insn.on_exec_shared(&shared);
                            }
                        });
                    }
                    PanicIn::FirstOfTwo => {
                        let (a, c) = (a.clone(), c.clone());
                        let crash = Arc::new(crash);
                        h.on_tb_trans(move |tb| {
                            for mut insn in tb.insns() {
                                let crash = crash.clone();
                                insn.on_exec(Access::NONE, move |_| crash());
                                let (a, c) = (a.clone(), c.clone());
                                insn.on_exec(Access::NONE, move |_| {
                                    a.fetch_add(1, Relaxed);
                                    if c.load(Relaxed) >= 5 {
                                        panic!("crashy's second callback gives up too");
                                    }
                                });
                            }
                        });
                    }
                    PanicIn::SharedMemory => {
                        let shared = h.shared_mem_callback(Access::NONE, move |_, _| crash());
                        h.on_tb_trans(move |tb| {
                            for mut insn in tb.insns() {
                                insn.on_mem_shared(MemFilter::All, &shared);
                            }
                        });
                    }
                }
            })),
        )?;
        let (mut mem, mut cpu) = machine(&loop_program())?;
        let mut engine = Engine::new(Rv64::new());
        host.attach(&mut engine);
        host.vcpu_init(0);
        assert_eq!(
            engine.run(&mut cpu, &mut mem),
            CpuExit::Syscall,
            "{case_name}"
        );
        host.vcpu_exit(0);
        host.finish()?;
        assert_eq!(cpu.x(A1 as u8), 10, "{case_name}: the loop ran to its end");
        if with_counter {
            assert_eq!(counter.total(), 53, "{case_name}");
        }
        assert_eq!(
            calls.load(Relaxed),
            5,
            "{case_name}: no call after the panic"
        );
        if let PanicIn::FirstOfTwo = case {
            assert_eq!(
                after.load(Relaxed),
                5,
                "the panicking instruction's second callback still runs, no later one"
            );
        }
        let failures = host.failures();
        assert_eq!(
            failures.len(),
            1,
            "{case_name}: reported once: {failures:?}"
        );
        assert!(
            failures[0].contains("crashy") && failures[0].contains("crashy gives up"),
            "{case_name}: {failures:?}"
        );
        assert!(out.text().contains(&failures[0]), "{case_name}");
        assert_eq!(
            host.installed().len(),
            usize::from(with_counter),
            "{case_name}"
        );
    }
    Ok(())
}

#[test]
fn vcpu_events_and_per_vcpu_scoreboards() -> TestResult {
    let host = PluginHost::new(GuestInfo::user("riscv64", 2), Box::new(std::io::sink()));
    let events = Arc::new(Mutex::new(Vec::new()));
    let counter = Arc::new(InsnCount::from_args(
        &args("insn", &[("inline", "on")]),
        host.guest(),
    )?);
    host.install("insn", counter.clone())?;
    host.vcpu_init(0);
    let e = events.clone();
    host.install(
        "events",
        Arc::new(Custom(move |h: &PluginHandle| {
            let log = |name: &'static str| {
                let e = e.clone();
                move |v: u32| e.lock().unwrap().push(format!("{name} {v}"))
            };
            h.on_vcpu_init(log("init"));
            h.on_vcpu_exit(log("exit"));
            h.on_vcpu_idle(log("idle"));
            h.on_vcpu_resume(log("resume"));
            let e = e.clone();
            h.on_flush(move || e.lock().unwrap().push("flush".into()));
        })),
    )?;
    // Registered after vCPU 0 started: its init callback ran right away.
    assert_eq!(
        events.lock().map_err(|e| e.to_string())?.clone(),
        ["init 0"]
    );

    let (mut mem, mut cpu0) = machine(&loop_program())?;
    let mut cpu1 = cpu0.clone();
    let mut engine = Engine::new(Rv64::new());
    host.attach(&mut engine);
    let mut vcpu1 = engine.new_vcpu();
    host.vcpu_init(1);
    assert_eq!(engine.run(&mut cpu0, &mut mem), CpuExit::Syscall);
    host.vcpu_idle(1);
    host.vcpu_resume(1);
    assert_eq!(
        engine.run_vcpu(&mut vcpu1, &mut cpu1, &mut mem),
        CpuExit::Syscall
    );
    engine.flush();
    host.vcpu_exit(1);
    host.vcpu_exit(0);
    host.finish()?;
    assert_eq!(
        (
            counter.vcpu_count(0),
            counter.vcpu_count(1),
            counter.total()
        ),
        (53, 53, 106)
    );
    assert_eq!(
        events.lock().map_err(|e| e.to_string())?.clone(),
        [
            "init 0", "init 1", "idle 1", "resume 1", "flush", "exit 1", "exit 0"
        ]
    );
    Ok(())
}

/// What plugin-api relies on from tcg-core, checked without plugin-api's
/// own generation guard: a flush requested from a load's instruction
/// callback lets that load's memory callback run, then retires every block
/// at once, and no callback attached before the flush runs after it.
#[test]
fn tcg_core_never_runs_retired_callbacks() -> TestResult {
    use tcgkit_tcg_core::{
        Action, CallbackContext, InsnCallback, Instrumentation, MemAction, MemCallback, TbPlan,
        TbView,
    };

    #[derive(Default)]
    struct Raw {
        epoch: Arc<AtomicU64>,
        flush_requested_at: Arc<AtomicU64>,
        mem_after_request: Arc<AtomicU64>,
        stale: Arc<AtomicU64>,
        insns: Arc<AtomicU64>,
        flushes: AtomicU64,
    }
    impl Instrumentation for Raw {
        fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
            let epoch = self.epoch.load(Relaxed);
            for (i, insn) in tb.insns().iter().enumerate() {
                let Some(p) = plan.insn(i) else { continue };
                let is_load = insn.raw & 0x7f == 0x03;
                let (e, stale, insns, req) = (
                    self.epoch.clone(),
                    self.stale.clone(),
                    self.insns.clone(),
                    self.flush_requested_at.clone(),
                );
                let on_insn: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
                    if e.load(Relaxed) != epoch {
                        stale.fetch_add(1, Relaxed);
                    }
                    insns.fetch_add(1, Relaxed);
                    if is_load {
                        req.store(ctx.pc(), Relaxed);
                        ctx.request_flush();
                    }
                });
                p.on_execute(Action::Callback(&on_insn));
                let (e, stale, req, after) = (
                    self.epoch.clone(),
                    self.stale.clone(),
                    self.flush_requested_at.clone(),
                    self.mem_after_request.clone(),
                );
                let on_load: MemCallback = Arc::new(
                    move |ctx: &mut CallbackContext<'_>, _: &tcgkit_tcg_core::MemAccessInfo| {
                        if e.load(Relaxed) != epoch {
                            stale.fetch_add(1, Relaxed);
                        }
                        if req.load(Relaxed) == ctx.pc() {
                            after.fetch_add(1, Relaxed);
                        }
                    },
                );
                p.on_memory(MemFilter::Reads, MemAction::Callback(&on_load));
            }
        }
        fn flushed(&self) {
            self.epoch.fetch_add(1, Relaxed);
            self.flushes.fetch_add(1, Relaxed);
        }
    }
    let raw = Arc::new(Raw::default());
    let (mut mem, mut cpu) = machine(&loop_program())?;
    let mut engine = Engine::new(Rv64::new());
    engine.set_instrumentation(Some(raw.clone()));
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(raw.insns.load(Relaxed), 53);
    assert_eq!(raw.flushes.load(Relaxed), 20, "one flush per load");
    assert_eq!(
        raw.mem_after_request.load(Relaxed),
        20,
        "each load's memory callback ran after its flush request"
    );
    assert_eq!(raw.stale.load(Relaxed), 0, "a retired block's callback ran");
    // Every retired generation was freed once the vCPU left them.
    assert_eq!(engine.stats().live_generations, 1);
    Ok(())
}

/// Resets requested from loads executed on vCPU 1, while vCPU 0 also runs
/// the program: every vCPU's instructions are counted exactly once.
#[test]
fn reset_from_a_second_vcpu() -> TestResult {
    struct PerVcpu {
        board: Arc<Scoreboard>,
        resets: AtomicU64,
        completions: AtomicU64,
    }
    impl PerVcpu {
        fn register(self: &Arc<Self>, handle: &PluginHandle) {
            let (me, h) = (self.clone(), handle.clone());
            handle.on_tb_trans(move |tb| {
                for mut insn in tb.insns() {
                    let is_load = insn.raw() & 0x7f == 0x03;
                    let (me, h) = (me.clone(), h.clone());
                    insn.on_exec(Access::NONE, move |ctx| {
                        let v = ctx.vcpu();
                        me.board.set(v, 0, me.board.get(v, 0) + 1);
                        if is_load && v == 1 {
                            me.resets.fetch_add(1, Relaxed);
                            let me2 = me.clone();
                            h.reset(move |h| {
                                me2.completions.fetch_add(1, Relaxed);
                                me2.register(h);
                            })
                            .unwrap();
                        }
                    });
                }
            });
        }
    }
    impl Plugin for PerVcpu {
        fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
            self.register(handle);
            Ok(())
        }
    }
    let host = PluginHost::new(GuestInfo::user("riscv64", 2), Box::new(std::io::sink()));
    let plugin = Arc::new(PerVcpu {
        board: Arc::new(Scoreboard::new(1, 2)),
        resets: AtomicU64::new(0),
        completions: AtomicU64::new(0),
    });
    host.install("per-vcpu", plugin.clone())?;
    let counter = Arc::new(InsnCount::from_args(
        &args("insn", &[("inline", "on")]),
        host.guest(),
    )?);
    host.install("insn", counter.clone())?;
    let (mut mem, cpu) = machine(&loop_program())?;
    let mut engine = Engine::new(Rv64::new());
    host.attach(&mut engine);
    let mut vcpu1 = engine.new_vcpu();
    let (mut c0, mut c1, mut c0b) = (cpu.clone(), cpu.clone(), cpu);
    assert_eq!(engine.run(&mut c0, &mut mem), CpuExit::Syscall);
    assert_eq!(
        engine.run_vcpu(&mut vcpu1, &mut c1, &mut mem),
        CpuExit::Syscall
    );
    assert_eq!(engine.run(&mut c0b, &mut mem), CpuExit::Syscall);
    host.finish()?;
    assert_eq!((plugin.board.get(0, 0), plugin.board.get(1, 0)), (106, 53));
    assert_eq!((counter.vcpu_count(0), counter.vcpu_count(1)), (106, 53));
    assert_eq!(plugin.resets.load(Relaxed), 20);
    assert_eq!(plugin.completions.load(Relaxed), 20);
    Ok(())
}

/// Counts into `counter` with a shared callback made now, attached to every
/// instruction (and, if given, `stale` attached too).
fn count_with_shared(
    handle: &PluginHandle,
    counter: &Arc<AtomicU64>,
    stale: Option<SharedExecCallback>,
) -> SharedExecCallback {
    let c = counter.clone();
    let shared = handle.shared_exec_callback(Access::NONE, move |_| {
        c.fetch_add(1, Relaxed);
    });
    let attach = shared.clone();
    handle.on_tb_trans(move |tb| {
        for mut insn in tb.insns() {
            insn.on_exec_shared(&attach);
            if let Some(stale) = &stale {
                insn.on_exec_shared(stale);
            }
        }
    });
    shared
}

/// Counts loads into `counter` with a shared memory callback made now,
/// attached to every instruction (and, if given, `stale` attached too).
fn count_loads_with_shared(
    handle: &PluginHandle,
    counter: &Arc<AtomicU64>,
    stale: Option<SharedMemCallback>,
) -> SharedMemCallback {
    let c = counter.clone();
    let shared = handle.shared_mem_callback(Access::NONE, move |_, access| {
        assert!(!access.is_store, "the filter lets loads through only");
        c.fetch_add(1, Relaxed);
    });
    let attach = shared.clone();
    handle.on_tb_trans(move |tb| {
        for mut insn in tb.insns() {
            insn.on_mem_shared(MemFilter::Reads, &attach);
            if let Some(stale) = &stale {
                insn.on_mem_shared(MemFilter::Reads, stale);
            }
        }
    });
    shared
}

/// A plugin that `register`s a shared callback counting into a counter and
/// attaching it everywhere: the loop program makes it count `expected`
/// (`why`). After a reset whose completion registers again and attaches the
/// callback made before the reset too, only the new one counts.
fn shared_callbacks_die_with_their_registration<C: Clone + Send + 'static>(
    register: fn(&PluginHandle, &Arc<AtomicU64>, Option<C>) -> C,
    expected: u64,
    why: &str,
) -> TestResult {
    let host = host();
    let (first, second) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let handle = Arc::new(Mutex::new(None::<(PluginHandle, C)>));
    let (h, f) = (handle.clone(), first.clone());
    host.install(
        "shared",
        Arc::new(Custom(move |ph: &PluginHandle| {
            let shared = register(ph, &f, None);
            *h.lock().unwrap() = Some((ph.clone(), shared));
        })),
    )?;
    let (ph, old) = handle
        .lock()
        .map_err(|e| e.to_string())?
        .clone()
        .ok_or("no handle")?;
    let (mut mem, mut cpu) = machine(&loop_program())?;
    let mut engine = Engine::new(Rv64::new());
    host.attach(&mut engine);
    host.vcpu_init(0);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(first.load(Relaxed), expected, "{why}");

    let s = second.clone();
    ph.reset(move |ph| {
        register(ph, &s, Some(old));
    })?;
    let (mut mem, mut cpu) = machine(&loop_program())?;
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(
        first.load(Relaxed),
        expected,
        "the old registration's callback is dead"
    );
    assert_eq!(second.load(Relaxed), expected);
    host.vcpu_exit(0);
    host.finish()?;
    Ok(())
}

#[test]
fn shared_callbacks_count_every_attachment_and_die_with_their_registration() -> TestResult {
    shared_callbacks_die_with_their_registration(count_with_shared, 53, "one call per instruction")
}

#[test]
fn shared_memory_callbacks_see_every_access_and_die_with_their_registration() -> TestResult {
    shared_callbacks_die_with_their_registration(
        count_loads_with_shared,
        20,
        "two loads in each of 10 iterations",
    )
}
