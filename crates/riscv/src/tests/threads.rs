//! Litmus: harts on host threads, each with its own engine and view of
//! one address space, hammering the same words with AMOs, LR/SC loops
//! and narrow stores; the totals must come out exact, interpreted and
//! compiled.

use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, JitConfig, Perms};

use super::enc::{self, amo};
use super::{CODE, DATA};
use crate::{Cpu, Rv64};

const THREADS: u64 = 4;
const ROUNDS: u64 = 20_000;

const T0: u8 = 5;
const T1: u8 = 6;
const T2: u8 = 7;
const A0: u8 = 10;
const A1: u8 = 11;
const A4: u8 = 14;

const AMOADD: u32 = 0x00;
const LR: u32 = 0x02;
const SC: u32 = 0x03;
const W: u32 = 2;
const D: u32 = 3;

/// a0 rounds of: `amoadd.d` 1 at a1; a `lr.w`/`sc.w` increment of the
/// word at a1+8; `amoadd.w` 1 at a1+12 (the other half of that
/// doubleword); `fence`; `sb` of a4 at a1+16+a4.
fn program() -> Vec<u8> {
    program_adding(1)
}

/// [`program`] with `step` in place of the 1 the AMOs add.
fn program_adding(step: i32) -> Vec<u8> {
    let code = [
        enc::addi(T1, 0, step),
        enc::addi(A1 + 1, A1, 8),  // a2 = a1 + 8
        enc::addi(A1 + 2, A1, 12), // a3 = a1 + 12
        enc::add(A1 + 4, A1, A4),  // a5 = a1 + a4
        // loop:
        amo(AMOADD, D, 0, 0, A1, T1),
        // retry:
        amo(LR, W, 2, T0, A1 + 1, 0),
        enc::addiw(T0, T0, 1),
        amo(SC, W, 1, T2, A1 + 1, T0),
        enc::b(1, T2, 0, -12), // bnez t2, retry
        amo(AMOADD, W, 3, 0, A1 + 2, T1),
        0x0ff0_000f, // fence iorw,iorw
        enc::store(0, A1 + 4, A4, 16),
        enc::addi(A0, A0, -1),
        enc::b(1, A0, 0, -36), // bnez a0, loop
        0x73,                  // ecall
    ];
    code.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Memory holding `code` at CODE and an empty DATA page.
fn memory(code: &[u8]) -> GuestMemory {
    let mut mem = GuestMemory::new();
    mem.map(CODE, 0x1000, Perms::READ | Perms::EXEC).unwrap();
    mem.write_initial(CODE, code).unwrap();
    mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE).unwrap();
    mem
}

/// Runs the litmus on `THREADS` harts; with `share`, their engines share
/// compiled code (see `Engine::share_compiled_code`).
fn hammer(jit: JitConfig, share: bool) {
    let mut mem = memory(&program());
    let views: Vec<GuestMemory> = (0..THREADS).map(|_| mem.share()).collect();
    let mut first = Engine::new(Rv64::new());
    first.set_jit(jit).unwrap();
    let mut engines = vec![first];
    for _ in 1..THREADS {
        let mut engine = Engine::new(Rv64::new());
        engine.set_jit(jit).unwrap();
        if share {
            engine.share_compiled_code(&engines[0]);
        }
        engines.push(engine);
    }
    std::thread::scope(|s| {
        for (t, (mut view, mut engine)) in views.into_iter().zip(engines).enumerate() {
            s.spawn(move || {
                let mut cpu = Cpu::new();
                cpu.set_pc(CODE);
                cpu.set_x(A0, ROUNDS);
                cpu.set_x(A1, DATA);
                cpu.set_x(A4, t as u64 + 1);
                assert_eq!(engine.run(&mut cpu, &mut view), CpuExit::Syscall);
                assert_eq!(cpu.x(A0), 0);
            });
        }
    });
    let total = THREADS * ROUNDS;
    assert_eq!(mem.load(DATA, 8), Ok(total), "amoadd.d");
    assert_eq!(mem.load(DATA + 8, 4), Ok(total), "lr.w/sc.w");
    assert_eq!(mem.load(DATA + 12, 4), Ok(total), "amoadd.w");
    for t in 1..=THREADS {
        assert_eq!(mem.load(DATA + 16 + t, 1), Ok(t), "sb of thread {t}");
    }
}

#[test]
fn interpreted_harts_on_threads_count_exactly() {
    hammer(JitConfig::OFF, false);
}

#[test]
fn compiled_harts_on_threads_count_exactly() {
    hammer(JitConfig::on(0), false);
}

#[test]
fn compiled_harts_sharing_code_count_exactly() {
    hammer(JitConfig::on(0), true);
    // Compiled in the background while the harts run, adopted by some.
    hammer(JitConfig::on(50), true);
}

/// Runs `code` on one hart of `engine` for 100 rounds; the doubleword
/// the `amoadd.d` adds to.
fn run_alone(engine: &mut Engine<Rv64>, code: &[u8]) -> u64 {
    let mut mem = memory(code);
    let mut cpu = Cpu::new();
    cpu.set_pc(CODE);
    cpu.set_x(A0, 100);
    cpu.set_x(A1, DATA);
    cpu.set_x(A4, 1);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    mem.load(DATA, 8).unwrap()
}

#[test]
fn engines_sharing_code_adopt_equal_blocks_only() {
    let jit = JitConfig::on(0);
    let mut first = Engine::new(Rv64::new());
    first.set_jit(jit).unwrap();
    assert_eq!(run_alone(&mut first, &program()), 100);
    let compiled = first.stats().blocks_compiled;
    assert!(compiled >= 2, "{compiled} blocks compiled");
    assert_eq!(first.stats().blocks_adopted, 0);

    // The same code: every block's code is the first engine's.
    let mut second = Engine::new(Rv64::new());
    second.set_jit(jit).unwrap();
    second.share_compiled_code(&first);
    assert_eq!(run_alone(&mut second, &program()), 100);
    let stats = second.stats();
    assert_eq!(
        (stats.blocks_compiled, stats.blocks_adopted),
        (compiled, compiled)
    );
    assert_eq!(
        stats.compiled_blocks_executed,
        first.stats().compiled_blocks_executed
    );

    // Other instructions at the same addresses (the first block adds 2):
    // that block compiles anew, the unchanged loop blocks are adopted.
    let mut third = Engine::new(Rv64::new());
    third.share_compiled_code(&first);
    third.set_jit(jit).unwrap();
    assert_eq!(run_alone(&mut third, &program_adding(2)), 200);
    let stats = third.stats();
    assert_eq!(stats.blocks_compiled, compiled);
    assert!(
        stats.blocks_adopted > 0 && stats.blocks_adopted < compiled,
        "{} of {compiled} adopted",
        stats.blocks_adopted
    );
}
