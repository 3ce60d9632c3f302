//! Litmus: harts on host threads, each with its own engine and view of
//! one address space, hammering the same words with AMOs, LR/SC loops
//! and narrow stores; the totals must come out exact, interpreted and
//! compiled.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tcgkit_tcg_core::{
    Action, CallbackContext, CpuExit, Engine, EngineStats, GuestMemory, InsnCallback,
    Instrumentation, JitConfig, Perms, PlanStamp, TbPlan, TbView,
};

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

/// Counts its translations per block, and the block entries it plans a
/// callback for; its plans are shared under `version` unless `unstamped`.
struct Translations {
    translated: Mutex<BTreeMap<u64, u32>>,
    entries: Arc<AtomicU64>,
    entry: InsnCallback,
    version: AtomicU64,
    unstamped: bool,
}

impl Translations {
    fn new(unstamped: bool) -> Arc<Translations> {
        let entries = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&entries);
        Arc::new(Translations {
            translated: Mutex::new(BTreeMap::new()),
            entries,
            entry: Arc::new(move |_: &mut CallbackContext<'_>| {
                counter.fetch_add(1, Ordering::Relaxed);
            }),
            version: AtomicU64::new(1),
            unstamped,
        })
    }

    /// How many times each block was planned.
    fn counts(&self) -> Vec<u32> {
        self.translated.lock().unwrap().values().copied().collect()
    }
}

impl Instrumentation for Translations {
    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
        *self.translated.lock().unwrap().entry(tb.pc()).or_default() += 1;
        plan.on_entry(Action::Callback(&self.entry));
    }

    fn plan_stamp(&self) -> Option<PlanStamp> {
        let version = self.version.load(Ordering::Acquire);
        (!self.unstamped).then(|| PlanStamp::new(7, version))
    }
}

/// Runs the litmus on `THREADS` harts sharing translations, each engine
/// instrumented by `instr`; returns their stats summed.
fn hammer_planned(jit: JitConfig, instr: &Arc<Translations>) -> EngineStats {
    let mut mem = memory(&program());
    let mut engines: Vec<Engine<Rv64>> = Vec::new();
    for t in 0..THREADS {
        let mut engine = Engine::new(Rv64::new());
        engine.set_jit(jit).unwrap();
        engine.set_vcpu_index(t as u32);
        engine.set_instrumentation(Some(Arc::clone(instr) as Arc<dyn Instrumentation>));
        match engines.first_mut() {
            Some(first) => engine.share_translations(first),
            None => engine.publish_translations(),
        }
        engines.push(engine);
    }
    let views: Vec<GuestMemory> = (0..THREADS).map(|_| mem.share()).collect();
    let stats = std::thread::scope(|s| {
        let runs: Vec<_> = views
            .into_iter()
            .zip(engines)
            .enumerate()
            .map(|(t, (mut view, mut engine))| {
                s.spawn(move || {
                    let mut cpu = Cpu::new();
                    cpu.set_pc(CODE);
                    cpu.set_x(A0, ROUNDS);
                    cpu.set_x(A1, DATA);
                    cpu.set_x(A4, t as u64 + 1);
                    assert_eq!(engine.run(&mut cpu, &mut view), CpuExit::Syscall);
                    engine.stats()
                })
            })
            .collect();
        let mut total = EngineStats::default();
        for run in runs {
            total += run.join().unwrap();
        }
        total
    });
    assert_eq!(mem.load(DATA, 8), Ok(THREADS * ROUNDS), "amoadd.d");
    stats
}

/// Harts sharing translations plan each block once between them, however
/// they race to it, and every hart runs the shared plan's callbacks: one
/// per block entry, as many as the blocks the harts entered.
#[test]
fn harts_sharing_translations_plan_each_block_once() {
    for jit in [JitConfig::OFF, JitConfig::on(0), JitConfig::on(50)] {
        let instr = Translations::new(false);
        let stats = hammer_planned(jit, &instr);
        let counts = instr.counts();
        assert!(counts.len() >= 3, "{counts:?}");
        assert!(counts.iter().all(|&n| n == 1), "{jit:?}: {counts:?}");
        assert_eq!(stats.tbs_translated, counts.len() as u64);
        // Every other block an engine holds came planned (the LR/SC retry
        // block only to the harts that lost a race).
        assert_eq!(stats.plans_adopted + stats.tbs_translated, stats.tbs_cached);
        assert!(stats.plans_adopted >= (THREADS - 1) * 3, "{stats:?}");
        assert_eq!(
            instr.entries.load(Ordering::Relaxed),
            stats.blocks_executed,
            "{jit:?}"
        );
    }
}

/// An instrumentation whose plans carry no stamp is asked by every
/// engine, as before sharing.
#[test]
fn unstamped_plans_are_made_by_every_engine() {
    let instr = Translations::new(true);
    let stats = hammer_planned(JitConfig::OFF, &instr);
    let counts = instr.counts();
    // Each engine planned every block it ran (the first block, all of
    // them; the LR/SC retry block, only those that lost a race).
    assert_eq!(counts.first(), Some(&(THREADS as u32)), "{counts:?}");
    assert!(counts.iter().all(|&n| n <= THREADS as u32), "{counts:?}");
    assert_eq!(counts.iter().sum::<u32>() as u64, stats.tbs_translated);
    assert_eq!(stats.plans_adopted, 0);
}

/// A shared plan is taken only for the same bytes, and only under the
/// stamp it was made with: other code at the same address is planned
/// anew, and after the stamp changes (a reset) the engines plan again,
/// once between them.
#[test]
fn shared_plans_follow_the_code_and_the_stamp() {
    let instr = Translations::new(false);
    let as_dyn = || Some(Arc::clone(&instr) as Arc<dyn Instrumentation>);
    let mut first = Engine::new(Rv64::new());
    first.set_instrumentation(as_dyn());
    first.publish_translations();
    let mut second = Engine::new(Rv64::new());
    second.set_instrumentation(as_dyn());
    second.share_translations(&mut first);

    assert_eq!(run_alone(&mut first, &program()), 100);
    let blocks = instr.counts().len();
    assert_eq!(run_alone(&mut second, &program()), 100);
    assert_eq!(second.stats().plans_adopted, blocks as u64);
    assert!(instr.counts().iter().all(|&n| n == 1));

    // The first block adds 2 instead: planned anew, the rest taken.
    let mut third = Engine::new(Rv64::new());
    third.set_instrumentation(as_dyn());
    third.share_translations(&mut first);
    assert_eq!(run_alone(&mut third, &program_adding(2)), 200);
    assert_eq!(third.stats().plans_adopted, blocks as u64 - 1);
    assert_eq!(third.stats().tbs_translated, 1);

    // A reset: the stamp changes, then every engine plans again.
    instr.version.fetch_add(1, Ordering::Release);
    let before: u32 = instr.counts().iter().sum();
    for engine in [&mut first, &mut second] {
        engine.reinstrument();
        assert_eq!(run_alone(engine, &program()), 100);
    }
    let replanned = first.stats().tbs_replanned + second.stats().tbs_replanned;
    assert_eq!(replanned, blocks as u64);
    let after: u32 = instr.counts().iter().sum();
    assert_eq!(
        after - before,
        blocks as u32,
        "each block planned once more"
    );
}
