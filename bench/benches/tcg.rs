//! tcg-core benchmarks on a toy guest ISA (so they measure the engine, not a
//! real frontend's decoder):
//! - per-instruction dispatch cost: uninstrumented, inline counter,
//!   instruction callback, memory callback (criterion);
//! - range invalidation cost with a large cache (criterion);
//! - mass flush cost against the number of cached blocks, 1e3 to 1e6: the
//!   retirement (what a flush costs the vCPU) and, separately, the release of
//!   the retired memory at the quiescent point. Criterion cannot drive this
//!   one (each sample needs a freshly built cache of up to 1e6 blocks, far
//!   costlier than the flush itself), so it is timed directly and printed as
//!   a table of medians.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use tcgkit_tcg_core::{
    Action, CallbackContext, CpuExit, DecodeError, Decoded, Engine, Flow, Frontend, GuestMemory,
    InlineKind, InlineOp, InsnCallback, Instrumentation, MemAccess, MemAccessInfo, MemAction,
    MemCallback, MemFilter, PAGE_SIZE, Perms, Scoreboard, TbPlan, TbView,
};

/// Toy ISA: `opcode:8 | rd:4 | rs:4 | imm:16`.
#[derive(Clone, Copy)]
enum Op {
    Addi { rd: u8, rs: u8, imm: i64 },
    Load { rd: u8, rs: u8, imm: i64 },
    Store { rd: u8, rs: u8, imm: i64 },
    Bne { rd: u8, rs: u8, imm: i64 },
    Jmp { imm: i64 },
    Syscall,
}

struct Cpu {
    pc: u64,
    x: [u64; 16],
}

struct Toy;

fn enc(op: u32, rd: u32, rs: u32, imm: i32) -> u32 {
    (op << 24) | (rd << 20) | (rs << 16) | (imm as u32 & 0xffff)
}

impl Frontend for Toy {
    type Cpu = Cpu;
    type Op = Op;
    fn pc(cpu: &Cpu) -> u64 {
        cpu.pc
    }
    fn set_pc(cpu: &mut Cpu, pc: u64) {
        cpu.pc = pc;
    }
    fn decode(&self, mem: &mut GuestMemory, pc: u64) -> Result<Decoded<Op>, DecodeError> {
        let mut w = [0u8; 4];
        mem.fetch(pc, &mut w).map_err(DecodeError::Fault)?;
        let raw = u32::from_le_bytes(w);
        let (rd, rs, imm) = (
            ((raw >> 20) & 15) as u8,
            ((raw >> 16) & 15) as u8,
            i64::from(raw as u16 as i16),
        );
        let (op, ends_block) = match raw >> 24 {
            1 => (Op::Addi { rd, rs, imm }, false),
            2 => (Op::Load { rd, rs, imm }, false),
            3 => (Op::Store { rd, rs, imm }, false),
            4 => (Op::Bne { rd, rs, imm }, true),
            5 => (Op::Jmp { imm }, true),
            6 => (Op::Syscall, true),
            _ => return Err(DecodeError::Illegal { pc, raw }),
        };
        Ok(Decoded {
            op,
            len: 4,
            raw,
            ends_block,
            accesses_memory: matches!(op, Op::Load { .. } | Op::Store { .. }),
        })
    }
    #[inline(always)]
    fn execute<M: MemAccess>(cpu: &mut Cpu, op: &Op, pc: u64, mem: &mut M) -> Flow {
        let r = |cpu: &Cpu, i: u8| cpu.x[usize::from(i & 15)];
        match *op {
            Op::Addi { rd, rs, imm } => {
                cpu.x[usize::from(rd & 15)] = r(cpu, rs).wrapping_add(imm as u64);
                Flow::Next
            }
            Op::Load { rd, rs, imm } => {
                match mem.load(r(cpu, rs).wrapping_add(imm as u64), 8, false) {
                    Ok(v) => {
                        cpu.x[usize::from(rd & 15)] = v;
                        Flow::Next
                    }
                    Err(f) => Flow::Exit(CpuExit::Fault(f)),
                }
            }
            Op::Store { rd, rs, imm } => {
                match mem.store(r(cpu, rs).wrapping_add(imm as u64), 8, r(cpu, rd)) {
                    Ok(()) => Flow::Next,
                    Err(f) => Flow::Exit(CpuExit::Fault(f)),
                }
            }
            Op::Bne { rd, rs, imm } if r(cpu, rd) != r(cpu, rs) => {
                Flow::Jump(pc.wrapping_add(imm as u64))
            }
            Op::Bne { .. } => Flow::Next,
            Op::Jmp { imm } => Flow::Jump(pc.wrapping_add(imm as u64)),
            Op::Syscall => Flow::Exit(CpuExit::Syscall),
        }
    }
    fn disassemble(&self, raw: &[u8], _pc: u64) -> String {
        format!("{raw:02x?}")
    }
    fn read_register(cpu: &Cpu, name: &str) -> Option<u64> {
        match name {
            "pc" => Some(cpu.pc),
            _ => cpu
                .x
                .get(name.strip_prefix('r')?.parse::<usize>().ok()?)
                .copied(),
        }
    }
    fn register_names(&self) -> &'static [&'static str] {
        &["pc"]
    }
}

const CODE: u64 = 0x10_0000;
const DATA: u64 = 0x4000;
const ITERATIONS: i32 = 10_000;
/// Loop body: 8 instructions, one load and one store.
const BODY: u64 = 8;

fn memory_with(code: &[u32]) -> GuestMemory {
    let mut mem = GuestMemory::new();
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.map(CODE, bytes.len() as u64, Perms::READ | Perms::EXEC)
        .expect("map code");
    mem.write_initial(CODE, &bytes).expect("load code");
    mem.map(DATA, PAGE_SIZE, Perms::READ | Perms::WRITE)
        .expect("map data");
    mem
}

/// r1 counts to r2 (= ITERATIONS); r4 = DATA.
fn loop_program() -> Vec<u32> {
    vec![
        enc(1, 2, 0, ITERATIONS),
        enc(1, 4, 0, DATA as i32),
        enc(1, 1, 1, 1),   // loop: r1 += 1
        enc(2, 3, 4, 0),   // r3 = [r4]
        enc(1, 3, 3, 3),   // r3 += 3
        enc(3, 3, 4, 8),   // [r4 + 8] = r3
        enc(1, 5, 5, 1),   // r5 += 1
        enc(1, 6, 5, 2),   // r6 = r5 + 2
        enc(1, 7, 6, -1),  // r7 = r6 - 1
        enc(4, 1, 2, -28), // bne r1, r2, loop
        enc(6, 0, 0, 0),
    ]
}

fn loop_insns() -> u64 {
    2 + BODY * ITERATIONS as u64 + 1
}

struct Attach(Box<dyn Fn(&mut TbPlan) + Send + Sync>);

impl Instrumentation for Attach {
    fn translate(&self, _tb: &TbView<'_>, plan: &mut TbPlan) {
        (self.0)(plan);
    }
}

fn bench_dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("tcg_dispatch");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    group.throughput(Throughput::Elements(loop_insns()));
    let board = Arc::new(Scoreboard::new(1, 1));
    let calls = Arc::new(AtomicU64::new(0));
    let insn_cb: InsnCallback = {
        let calls = calls.clone();
        Arc::new(move |_ctx: &mut CallbackContext<'_>| {
            calls.fetch_add(1, Ordering::Relaxed);
        })
    };
    let mem_cb: MemCallback = {
        let calls = calls.clone();
        Arc::new(
            move |_ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
                calls.fetch_add(info.size.into(), Ordering::Relaxed);
            },
        )
    };
    let variants: Vec<(&str, Option<Attach>)> = vec![
        ("uninstrumented", None),
        ("inline_counter", {
            let board = board.clone();
            Some(Attach(Box::new(move |plan| {
                for insn in plan.insns() {
                    insn.on_execute(Action::Inline(InlineOp {
                        board: &board,
                        slot: 0,
                        kind: InlineKind::Add(1),
                    }));
                }
            })))
        }),
        ("insn_callback", {
            let cb = insn_cb.clone();
            Some(Attach(Box::new(move |plan| {
                for insn in plan.insns() {
                    insn.on_execute(Action::Callback(&cb));
                }
            })))
        }),
        ("mem_callback", {
            let cb = mem_cb.clone();
            Some(Attach(Box::new(move |plan| {
                for insn in plan.insns() {
                    insn.on_memory(MemFilter::All, MemAction::Callback(&cb));
                }
            })))
        }),
    ];
    for (name, attach) in variants {
        let mut engine = Engine::new(Toy);
        if let Some(a) = attach {
            engine.set_instrumentation(Some(Arc::new(a)));
        }
        let mut mem = memory_with(&loop_program());
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut cpu = Cpu {
                    pc: CODE,
                    x: [0; 16],
                };
                let exit = engine.run(&mut cpu, &mut mem);
                assert_eq!(exit, CpuExit::Syscall);
                black_box(cpu.x[7])
            })
        });
    }
    // An engine-event sink is called on translation only: the loop must run
    // at the uninstrumented speed with one installed.
    struct Translations(Arc<AtomicU64>);
    impl tcgkit_tcg_core::EngineEvents for Translations {
        fn block_translated(&mut self, _pc: u64, _insns: u32, _bytes: u32) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut engine = Engine::new(Toy);
    engine.set_event_sink(Some(Box::new(Translations(calls.clone()))));
    let mut mem = memory_with(&loop_program());
    group.bench_function("uninstrumented_with_event_sink", |b| {
        b.iter(|| {
            let mut cpu = Cpu {
                pc: CODE,
                x: [0; 16],
            };
            let exit = engine.run(&mut cpu, &mut mem);
            assert_eq!(exit, CpuExit::Syscall);
            black_box(cpu.x[7])
        })
    });
    group.finish();
    black_box(calls.load(Ordering::Relaxed));
}

/// `n` one-instruction blocks (`jmp +4`) followed by a syscall.
fn chain_program(n: usize) -> Vec<u32> {
    let mut code = vec![enc(5, 0, 0, 4); n];
    code.push(enc(6, 0, 0, 0));
    code
}

/// An engine with `n` cached blocks (plus the final syscall block).
fn engine_with_blocks(mem: &mut GuestMemory) -> Engine<Toy> {
    let mut engine = Engine::new(Toy);
    let mut cpu = Cpu {
        pc: CODE,
        x: [0; 16],
    };
    assert_eq!(engine.run(&mut cpu, mem), CpuExit::Syscall);
    engine
}

fn bench_invalidate(c: &mut Criterion) {
    let mut group = c.benchmark_group("tcg_invalidate");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let n = 100_000;
    let mut mem = memory_with(&chain_program(n));
    let mut engine = engine_with_blocks(&mut mem);
    // The range holds no block: the cost of finding out, with 1e5 cached.
    group.bench_function("empty_page_of_1e5", |b| {
        b.iter(|| engine.invalidate_range(black_box(DATA), PAGE_SIZE))
    });
    // Invalidate one block and translate it again (the fence.i / SMC path).
    let target = CODE + 4 * 5000;
    group.bench_function("one_block_and_retranslate_of_1e5", |b| {
        b.iter(|| {
            engine.invalidate_range(black_box(target), 4);
            let mut cpu = Cpu {
                pc: CODE + 4 * (n as u64 - 1),
                x: [0; 16],
            };
            engine.run(&mut cpu, &mut mem)
        })
    });
    group.finish();
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Flush cost against cache size, timed directly (see the file comment).
fn flush_sweep() {
    println!("\ntcg_flush: cost of a mass flush against cached blocks (median of runs)");
    println!(
        "{:>9} {:>6} {:>14} {:>18} {:>14}",
        "blocks", "runs", "flush (retire)", "reclaim (free)", "retired MiB"
    );
    for (n, runs) in [(1_000usize, 15), (10_000, 11), (100_000, 7), (1_000_000, 5)] {
        let mut mem = memory_with(&chain_program(n));
        let (mut retire, mut reclaim, mut mib) = (Vec::new(), Vec::new(), 0.0);
        for _ in 0..runs {
            let mut engine = engine_with_blocks(&mut mem);
            // One untimed flush and rebuild first, so what is timed below is
            // the steady state (no first-touch page faults on engine memory).
            engine.flush();
            let mut cpu = Cpu {
                pc: CODE,
                x: [0; 16],
            };
            assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
            // A second vCPU still inside the generation keeps it parked, so the
            // flush itself and the later release are timed apart.
            let mut other = engine.new_vcpu();
            let mut cpu = Cpu {
                pc: CODE + 4 * n as u64,
                x: [0; 16],
            };
            engine.run_vcpu(&mut other, &mut cpu, &mut mem);
            assert_eq!(engine.stats().tbs_cached as usize, n + 1);
            // Building a large cache evicts the engine's own few cache lines;
            // touch them (a no-op reclaim) so the timing shows the flush's
            // work, not DRAM latency.
            engine.reclaim();
            let t = Instant::now();
            engine.flush();
            retire.push(t.elapsed());
            let stats = engine.stats();
            assert_eq!((stats.tbs_cached, stats.live_generations), (0, 2));
            mib = stats.retired_bytes as f64 / (1 << 20) as f64;
            other.go_offline();
            let t = Instant::now();
            engine.reclaim();
            reclaim.push(t.elapsed());
            assert_eq!(engine.stats().live_generations, 1);
        }
        println!(
            "{:>9} {:>6} {:>14?} {:>18?} {:>14.1}",
            n,
            runs,
            median(retire),
            median(reclaim),
            mib
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_dispatch(&mut c);
    bench_invalidate(&mut c);
    c.final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not and
    // runs this file in test mode: keep that quick. Like criterion, honour a
    // name filter (any argument not a flag).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let test_mode = !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--list");
    let filtered_out = args
        .iter()
        .any(|a| !a.starts_with('-') && !"tcg_flush".contains(a.as_str()));
    if !test_mode && !filtered_out {
        flush_sweep();
    }
}
