//! The JIT against the interpreter: random RV64IM programs (ALU ops,
//! loads and stores, a counted loop, faults) run under both, with every
//! block compiled on its first run; registers, memory, the exit, its pc
//! and the instruction count must be identical.

use proptest::prelude::*;
use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, JitConfig, Perms};

use super::enc;
use super::{CODE, DATA};
use crate::{Cpu, Rv64};

/// Holds DATA's address in every program; never a destination.
const BASE: u8 = 5;
/// The loop counter of `looped` programs; never a destination either.
const COUNTER: u8 = 31;

/// Registers the random instructions write.
fn dest() -> impl Strategy<Value = u8> {
    prop_oneof![Just(0u8), 1u8..=4, 6u8..=30]
}

fn src() -> impl Strategy<Value = u8> {
    0u8..=31
}

/// One random instruction of RV64IM (no control transfer).
fn insn() -> impl Strategy<Value = u32> {
    let rtype = (0usize..18, dest(), src(), src()).prop_map(|(k, rd, a, b)| {
        // (opcode, funct3, funct7): OP and OP-32, with M.
        const R: [(u32, u32, u32); 18] = [
            (0x33, 0, 0),
            (0x33, 0, 0x20),
            (0x33, 1, 0),
            (0x33, 2, 0),
            (0x33, 3, 0),
            (0x33, 4, 0),
            (0x33, 5, 0),
            (0x33, 5, 0x20),
            (0x33, 6, 0),
            (0x33, 7, 0),
            (0x33, 0, 1),
            (0x33, 1, 1),
            (0x33, 2, 1),
            (0x33, 3, 1),
            (0x33, 4, 1),
            (0x33, 5, 1),
            (0x33, 6, 1),
            (0x33, 7, 1),
        ];
        let (op, f3, f7) = R[k];
        enc::r(op, f3, f7, rd, a, b)
    });
    let wtype = (0usize..10, dest(), src(), src()).prop_map(|(k, rd, a, b)| {
        const W: [(u32, u32); 10] = [
            (0, 0),
            (0, 0x20),
            (1, 0),
            (5, 0),
            (5, 0x20),
            (0, 1),
            (4, 1),
            (5, 1),
            (6, 1),
            (7, 1),
        ];
        let (f3, f7) = W[k];
        enc::r(0x3b, f3, f7, rd, a, b)
    });
    let itype = (0usize..6, dest(), src(), -2048i32..2048).prop_map(|(k, rd, a, imm)| {
        const F3: [u32; 6] = [0, 2, 3, 4, 6, 7];
        enc::i(0x13, F3[k], rd, a, imm)
    });
    let shifts = (0usize..6, dest(), src(), 0u32..64).prop_map(|(k, rd, a, sh)| match k {
        0 => enc::slli(rd, a, sh),
        1 => enc::srli(rd, a, sh),
        2 => enc::srai(rd, a, sh),
        3 => enc::i(0x1b, 1, rd, a, (sh & 31) as i32),
        4 => enc::i(0x1b, 5, rd, a, (sh & 31) as i32),
        _ => enc::i(0x1b, 5, rd, a, ((sh & 31) | 0x400) as i32),
    });
    let upper = (dest(), any::<i32>(), any::<bool>()).prop_map(|(rd, v, pc_rel)| {
        if pc_rel {
            enc::auipc(rd, v)
        } else {
            enc::lui(rd, v)
        }
    });
    let addiw = (dest(), src(), -2048i32..2048).prop_map(|(rd, a, imm)| enc::addiw(rd, a, imm));
    // Loads and stores inside DATA's page (some straddle nothing, some are
    // misaligned), or far away to fault.
    let offset = prop_oneof![8 => 0i32..2040, 1 => Just(-2048i32)];
    let load = (0u32..7, dest(), offset.clone()).prop_map(|(f3, rd, off)| {
        let f3 = [0, 1, 2, 3, 4, 5, 6][f3 as usize];
        enc::load(f3, rd, BASE, off)
    });
    let store = (0u32..4, src(), offset).prop_map(|(f3, rs2, off)| enc::store(f3, BASE, rs2, off));
    prop_oneof![
        4 => rtype,
        3 => wtype,
        3 => itype,
        2 => shifts,
        1 => upper,
        1 => addiw,
        2 => load,
        2 => store,
    ]
}

struct Outcome {
    exit: CpuExit,
    pc: u64,
    regs: Vec<u64>,
    data: Vec<u8>,
    insns: u64,
    /// Blocks that ran as compiled code.
    compiled_runs: u64,
    /// Times the vCPU loop entered compiled code.
    compiled_entries: u64,
}

fn run(code: &[u32], regs: &[u64], jit: JitConfig) -> Outcome {
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut mem = GuestMemory::new();
    mem.map(CODE, 0x4000, Perms::READ | Perms::EXEC).unwrap();
    mem.write_initial(CODE, &bytes).unwrap();
    mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE).unwrap();
    let mut cpu = Cpu::new();
    for (i, &v) in regs.iter().enumerate() {
        cpu.set_x(i as u8 + 1, v);
    }
    cpu.set_x(BASE, DATA);
    cpu.set_pc(CODE);
    let mut engine = Engine::new(Rv64::new());
    engine.set_jit(jit).expect("cranelift supports this host");
    let exit = engine.run(&mut cpu, &mut mem);
    let stats = engine.stats();
    if jit.enabled {
        // Blocks were compiled before their first run (all but a lone
        // `ecall`, of which nothing lowers) and ran compiled.
        assert!(stats.blocks_compiled > 0, "{stats:?}");
        assert!(stats.compiled_blocks_executed > 0, "{stats:?}");
    } else {
        assert_eq!(stats.blocks_compiled, 0);
    }
    let mut data = vec![0u8; 0x1000];
    mem.read(DATA, &mut data).unwrap();
    Outcome {
        exit,
        pc: cpu.pc(),
        regs: (0..32).map(|i| cpu.x(i)).collect(),
        data,
        insns: stats.insns_executed,
        compiled_runs: stats.compiled_blocks_executed,
        compiled_entries: stats.compiled_entries,
    }
}

fn same(code: &[u32], regs: &[u64]) -> Result<(), TestCaseError> {
    let interp = run(code, regs, JitConfig::OFF);
    let jit = run(code, regs, JitConfig::on(0));
    prop_assert_eq!(interp.exit, jit.exit);
    prop_assert_eq!(interp.pc, jit.pc);
    prop_assert_eq!(&interp.regs, &jit.regs);
    prop_assert!(interp.data == jit.data, "memory differs");
    prop_assert_eq!(interp.insns, jit.insns);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A straight line of random instructions, then `ecall`.
    #[test]
    fn straight_line(body in prop::collection::vec(insn(), 1..40),
                     regs in prop::collection::vec(any::<u64>(), 31)) {
        let mut code = body;
        code.push(enc::ECALL);
        same(&code, &regs)?;
    }

    /// The body runs `n` times around a `bne` loop (a block compiled on its
    /// first run and then re-entered), then `ecall`.
    #[test]
    fn looped(body in prop::collection::vec(insn(), 1..12),
              regs in prop::collection::vec(any::<u64>(), 31),
              n in 1i32..40) {
        let mut code = vec![enc::addi(COUNTER, 0, n)];
        let len = body.len() as i32;
        code.extend(body);
        code.push(enc::addi(COUNTER, COUNTER, -1));
        // Back to the body's first instruction.
        code.push(enc::b(1, COUNTER, 0, -4 * (len + 1)));
        code.push(enc::ECALL);
        same(&code, &regs)?;
        // Unless it faulted first, the loop body ran compiled every time
        // (chained to itself).
        let jit = run(&code, &regs, JitConfig::on(0));
        if !matches!(jit.exit, CpuExit::Fault(_)) {
            prop_assert!(jit.compiled_runs >= n as u64, "{} runs", jit.compiled_runs);
        }
    }
}

/// Branches of every kind, taken and not, and jal/jalr with a link, in
/// blocks that each compile.
#[test]
fn branches_and_jumps() {
    for f3 in [0, 1, 4, 5, 6, 7] {
        for (a, b) in [(1u64, 1u64), (1, 2), (u64::MAX, 1), (1, u64::MAX), (0, 0)] {
            let code = [
                enc::b(f3, 6, 7, 12),
                enc::addi(8, 8, 1),
                enc::jal(1, 8),
                enc::addi(8, 8, 100),
                enc::auipc(9, 0),
                enc::jalr(10, 9, 12),
                enc::addi(8, 8, 1000),
                enc::ECALL,
            ];
            let mut regs = vec![0u64; 31];
            regs[5] = a; // x6
            regs[6] = b; // x7
            same(&code, &regs).unwrap();
        }
    }
}

/// A load from an unmapped page leaves the JIT at the faulting
/// instruction, with the instructions before it done.
#[test]
fn fault_is_precise() {
    let code = [
        enc::addi(6, 0, 7),
        enc::load(3, 7, 0, 0x100), // x0 + 0x100: unmapped
        enc::addi(6, 0, 9),
        enc::ECALL,
    ];
    let jit = run(&code, &[0; 31], JitConfig::on(0));
    assert!(matches!(jit.exit, CpuExit::Fault(_)), "{:?}", jit.exit);
    assert_eq!(jit.pc, CODE + 4);
    assert_eq!(jit.regs[6], 7);
    assert_eq!(jit.insns, 2);
    same(&code, &[0; 31]).unwrap();
}

/// Blocks the JIT compiled run again from the cache, and the JIT agrees
/// with the interpreter after a `fence.i` flush retired them.
#[test]
fn compiled_code_survives_a_flush() {
    let code = [
        enc::addi(COUNTER, 0, 30),
        enc::addi(6, 6, 3),
        enc::FENCE_I,
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -12),
        enc::ECALL,
    ];
    same(&code, &[0; 31]).unwrap();
    let jit = run(&code, &[0; 31], JitConfig::on(0));
    assert_eq!(jit.regs[6], 90);
}

/// A loop calling a function through `jal` and returning through `jalr`:
/// the return is an indirect jump, taken straight into the compiled block
/// after the call through the jump table.
#[test]
fn calls_and_returns_stay_compiled() {
    let code = [
        enc::addi(COUNTER, 0, 50),
        // loop: call f, count down, again
        enc::jal(1, 16),
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -8),
        enc::ECALL,
        // f: x6 += 3; ret
        enc::addi(6, 6, 3),
        enc::jalr(0, 1, 0),
    ];
    same(&code, &[0; 31]).unwrap();
    let jit = run(&code, &[0; 31], JitConfig::on(0));
    assert_eq!(jit.regs[6], 150);
    // Every iteration's three blocks ran compiled, jumping into each other
    // (the return through the jump table): the loop entered compiled code
    // only while links were being made.
    assert!(
        jit.compiled_runs >= 150,
        "{} compiled runs",
        jit.compiled_runs
    );
    assert!(
        jit.compiled_entries <= 10,
        "{} entries",
        jit.compiled_entries
    );
}

/// `code` mapped at CODE, and an engine whose JIT compiles blocks that ran
/// 10 times on its background thread.
fn background_engine(code: &[u32]) -> (GuestMemory, Engine<Rv64>) {
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut mem = GuestMemory::new();
    mem.map(CODE, 0x4000, Perms::READ | Perms::EXEC).unwrap();
    mem.write_initial(CODE, &bytes).unwrap();
    let mut engine = Engine::new(Rv64::new());
    let config = JitConfig {
        enabled: true,
        threshold: 10,
        background: true,
    };
    engine.set_jit(config).unwrap();
    (mem, engine)
}

/// With the background compiler, hot blocks go on running in the
/// interpreter until their code comes back, then run compiled; the
/// results are the interpreter's either way. The same engine runs the
/// program again until the code has arrived (bounded: a compiler thread
/// that never answers fails the test).
#[test]
fn background_compiler_publishes_code_between_runs() {
    let code = [
        enc::addi(COUNTER, 0, 2000),
        enc::addi(6, 6, 3),
        enc::slli(7, 6, 2),
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -12),
        enc::ECALL,
    ];
    let interp = run(&code, &[0; 31], JitConfig::OFF);
    let (mut mem, mut engine) = background_engine(&code);
    let mut compiled = false;
    for _ in 0..2000 {
        let mut cpu = Cpu::new();
        cpu.set_x(BASE, DATA);
        cpu.set_pc(CODE);
        let exit = engine.run(&mut cpu, &mut mem);
        assert_eq!(exit, interp.exit);
        assert_eq!(cpu.pc(), interp.pc);
        assert_eq!((0..32).map(|i| cpu.x(i)).collect::<Vec<_>>(), interp.regs);
        if engine.stats().compiled_blocks_executed > 0 {
            compiled = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(compiled, "no code came back: {:?}", engine.stats());
    assert!(engine.stats().blocks_compiled > 0);
}

/// Stopping the engine's host threads (before a fork) waits for the
/// compiler thread's jobs and publishes them: the next run executes
/// compiled code without waiting, and a later hot block starts the thread
/// again.
#[test]
fn stopping_host_threads_publishes_every_compile_in_flight() {
    let code = [
        enc::addi(COUNTER, 0, 50),
        enc::addi(6, 6, 3),
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -8),
        enc::ECALL,
    ];
    let interp = run(&code, &[0; 31], JitConfig::OFF);
    let (mut mem, mut engine) = background_engine(&code);
    let run_once = |engine: &mut Engine<Rv64>, mem: &mut GuestMemory| {
        let mut cpu = Cpu::new();
        cpu.set_x(BASE, DATA);
        cpu.set_pc(CODE);
        assert_eq!(engine.run(&mut cpu, mem), interp.exit);
        assert_eq!((0..32).map(|i| cpu.x(i)).collect::<Vec<_>>(), interp.regs);
    };
    // The loop body becomes hot within the first run and is sent away.
    run_once(&mut engine, &mut mem);
    engine.stop_host_threads();
    assert!(engine.stats().blocks_compiled > 0, "{:?}", engine.stats());
    let before = engine.stats().compiled_blocks_executed;
    run_once(&mut engine, &mut mem);
    assert!(
        engine.stats().compiled_blocks_executed > before,
        "the published code did not run: {:?}",
        engine.stats()
    );
    // Stopped twice, or with nothing in flight: nothing to do.
    engine.stop_host_threads();
    run_once(&mut engine, &mut mem);
}

/// An engine dropped while the compiler thread still has its blocks
/// stops the thread and frees everything (valgrind sees no leak or
/// error here).
#[test]
fn engine_drops_with_compiles_in_flight() {
    let code = [
        enc::addi(COUNTER, 0, 5),
        enc::addi(6, 6, 3),
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -8),
        enc::ECALL,
    ];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut mem = GuestMemory::new();
    mem.map(CODE, 0x4000, Perms::READ | Perms::EXEC).unwrap();
    mem.write_initial(CODE, &bytes).unwrap();
    let mut engine = Engine::new(Rv64::new());
    engine.set_jit(JitConfig::on(1)).unwrap();
    let mut cpu = Cpu::new();
    cpu.set_pc(CODE);
    engine.run(&mut cpu, &mut mem);
    assert_eq!(cpu.x(6), 15);
    drop(engine);
}
