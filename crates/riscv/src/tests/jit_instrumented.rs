//! Instrumented blocks compiled with their plan against the same blocks
//! interpreted: instruction and block-entry callbacks (reading a
//! register), inline adds on entry and at accesses, a conditional
//! callback, memory callbacks seeing each access's value, and callbacks
//! that re-instrument or flush in the middle of the run, so that stale
//! compiled code must never run. Every event, in order, and every count
//! must be the interpreter's, whether the block-entry and conditional
//! callbacks say they read no registers ([`RegisterFree`]: compiled code
//! then keeps the guest registers in host registers around their calls)
//! or not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tcgkit_tcg_core::{
    Action, CallbackContext, Compare, Condition, CpuExit, Engine, GuestMemory, InlineKind,
    InlineOp, InlinedCallback, InlinedMemCallback, InsnCallback, Instrumentation, JitConfig,
    MemAccessInfo, MemAction, MemCallback, MemFilter, Perms, RegisterFree, Scoreboard, TbPlan,
    TbView,
};

use super::enc;
use super::{CODE, DATA};
use crate::{Cpu, Rv64};

const BASE: u8 = 5;
const COUNTER: u8 = 31;

/// What the callbacks saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Insn {
        pc: u64,
        t1: u64,
    },
    /// `t1` as the callback reads it: `None` for one that is
    /// register-free.
    Entry {
        pc: u64,
        t1: Option<u64>,
    },
    Cond {
        pc: u64,
    },
    Mem {
        pc: u64,
        addr: u64,
        size: u8,
        store: bool,
        value: u64,
    },
}

/// Every `every`-th instruction callback asks for `request` (0: none,
/// 1: re-instrument, 2: flush) and moves to the next phase: blocks
/// planned from then on call it before other instructions, so code
/// compiled for an earlier plan would log at the wrong places.
struct Watch {
    log: Arc<Mutex<Vec<Event>>>,
    phase: Arc<AtomicUsize>,
    board: Arc<Scoreboard>,
    insn: InsnCallback,
    entry: InsnCallback,
    cond: InsnCallback,
    mem: MemCallback,
}

/// A callback, as an [`InlinedCallback`] (which compiled code calls
/// directly) or a plain one (called through the hook helper); `free`:
/// one that reads no registers.
fn insn_callback<C>(inlined: bool, free: bool, f: C) -> InsnCallback
where
    C: Fn(&mut CallbackContext<'_>) + Send + Sync + 'static,
{
    match (inlined, free) {
        (true, false) => Arc::new(InlinedCallback::<Rv64, _>::new(f)),
        (true, true) => Arc::new(InlinedCallback::<Rv64, _>::new(RegisterFree(f))),
        (false, false) => Arc::new(f),
        (false, true) => Arc::new(RegisterFree(f)),
    }
}

fn mem_callback<C>(inlined: bool, f: C) -> MemCallback
where
    C: Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync + 'static,
{
    if inlined {
        Arc::new(InlinedMemCallback::<Rv64, _>::new(f))
    } else {
        Arc::new(f)
    }
}

impl Watch {
    fn new(every: u64, request: u8, inlined: bool, free: bool) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let board = Arc::new(Scoreboard::new(2, 1));
        let calls = Arc::new(Mutex::new(0u64));
        let phase = Arc::new(AtomicUsize::new(0));
        let next = Arc::clone(&phase);
        let l = Arc::clone(&log);
        let insn = insn_callback(inlined, false, move |ctx: &mut CallbackContext<'_>| {
            let t1 = ctx.read_register("t1").unwrap_or(u64::MAX);
            l.lock().unwrap().push(Event::Insn { pc: ctx.pc(), t1 });
            let mut n = calls.lock().unwrap();
            *n += 1;
            if every != 0 && (*n).is_multiple_of(every) {
                next.fetch_add(1, Ordering::Relaxed);
                match request {
                    1 => ctx.request_reinstrument(),
                    2 => ctx.request_flush(),
                    _ => {}
                }
            }
        });
        let l = Arc::clone(&log);
        let entry = insn_callback(inlined, free, move |ctx: &mut CallbackContext<'_>| {
            let t1 = ctx.read_register("t1");
            l.lock().unwrap().push(Event::Entry { pc: ctx.pc(), t1 });
        });
        let l = Arc::clone(&log);
        let cond = insn_callback(inlined, free, move |ctx: &mut CallbackContext<'_>| {
            l.lock().unwrap().push(Event::Cond { pc: ctx.pc() });
        });
        let l = Arc::clone(&log);
        let mem = mem_callback(
            inlined,
            move |ctx: &mut CallbackContext<'_>, i: &MemAccessInfo| {
                l.lock().unwrap().push(Event::Mem {
                    pc: ctx.pc(),
                    addr: i.addr,
                    size: i.size,
                    store: i.is_store,
                    value: i.value,
                });
            },
        );
        Watch {
            log,
            phase,
            board,
            insn,
            entry,
            cond,
            mem,
        }
    }
}

impl Instrumentation for Watch {
    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
        let add = |slot| {
            Action::Inline(InlineOp {
                board: &self.board,
                slot,
                kind: InlineKind::Add(1),
            })
        };
        plan.on_entry(add(0));
        // Blocks at odd multiples of 4 bytes (the loop) also get an entry
        // callback.
        if tb.pc() & 4 != 0 {
            plan.on_entry(Action::Callback(&self.entry));
        }
        let phase = self.phase.load(Ordering::Relaxed);
        for insn in plan.insns() {
            if insn.index() % 3 == phase % 3 {
                insn.on_execute(Action::Callback(&self.insn));
            } else if insn.index() != 1 {
                // Hooks of inline operations only (compiled inline).
                insn.on_execute(add(1));
            }
            if insn.index() == 1 {
                let when = Condition {
                    board: &self.board,
                    slot: 0,
                    compare: Compare::Ge,
                    value: 5,
                };
                insn.on_execute(Action::Conditional(when, &self.cond));
            }
            insn.on_memory(MemFilter::All, MemAction::Callback(&self.mem));
            // Other instructions' accesses run the one callback (which
            // compiled code calls directly when it is inlined).
            if insn.index() != 2 {
                continue;
            }
            insn.on_memory(
                MemFilter::Writes,
                MemAction::Inline(InlineOp {
                    board: &self.board,
                    slot: 1,
                    kind: InlineKind::Add(2),
                }),
            );
        }
    }
}

struct Outcome {
    exit: CpuExit,
    regs: Vec<u64>,
    insns: u64,
    log: Vec<Event>,
    board: [u64; 2],
    compiled_runs: u64,
}

/// A loop of loads, stores and arithmetic, with a load of an unmapped
/// page at its end (a fault inside an instrumented block).
fn program() -> Vec<u32> {
    vec![
        enc::addi(COUNTER, 0, 60),
        // loop:
        enc::load(3, 6, BASE, 0),
        enc::addi(6, 6, 3),
        enc::store(3, BASE, 6, 0),
        enc::load(2, 7, BASE, 8),
        enc::add(7, 7, 6),
        enc::store(1, BASE, 7, 8),
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -28),
        enc::addi(6, 6, 1),
        enc::load(3, 7, 0, 0x100),
        enc::ECALL,
    ]
}

fn run(jit: JitConfig, every: u64, request: u8, inlined: bool, free: bool) -> Outcome {
    run_on(0, jit, every, request, inlined, free)
}

/// [`run`] on vCPU `vcpu`; the board's counts are that vCPU's.
fn run_on(
    vcpu: u32,
    jit: JitConfig,
    every: u64,
    request: u8,
    inlined: bool,
    free: bool,
) -> Outcome {
    let watch = Arc::new(Watch::new(every, request, inlined, free));
    let mut engine = Engine::new(Rv64::new());
    engine.set_vcpu_index(vcpu);
    engine.set_jit(jit).unwrap();
    engine.set_instrumentation(Some(Arc::clone(&watch) as Arc<dyn Instrumentation>));
    let (exit, regs) = run_code(&mut engine, CODE, &program());
    let stats = engine.stats();
    let log = watch.log.lock().unwrap().clone();
    Outcome {
        exit,
        regs,
        insns: stats.insns_executed,
        log,
        board: [watch.board.get(vcpu, 0), watch.board.get(vcpu, 1)],
        compiled_runs: stats.compiled_blocks_executed,
    }
}

fn agree(every: u64, request: u8, inlined: bool) -> Outcome {
    let free = agree_with(every, request, inlined, true);
    let entry_t1 = |o: &Outcome| {
        o.log
            .iter()
            .filter_map(|e| match e {
                Event::Entry { t1, .. } => Some(*t1),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(entry_t1(&free).iter().all(Option::is_none));
    let reading = agree_with(every, request, inlined, false);
    assert!(entry_t1(&reading).iter().all(Option::is_some));
    assert!(!entry_t1(&reading).is_empty());
    reading
}

fn agree_with(every: u64, request: u8, inlined: bool, free: bool) -> Outcome {
    let interp = run(JitConfig::OFF, every, request, inlined, free);
    let jit = run(JitConfig::on(0), every, request, inlined, free);
    assert!(
        matches!(interp.exit, CpuExit::Fault(_)),
        "{:?}",
        interp.exit
    );
    assert_eq!(jit.exit, interp.exit);
    assert_eq!(jit.regs, interp.regs);
    assert_eq!(jit.insns, interp.insns);
    assert_eq!(jit.board, interp.board);
    assert_eq!(jit.log.len(), interp.log.len());
    for (i, (j, t)) in jit.log.iter().zip(&interp.log).enumerate() {
        assert_eq!(j, t, "event {i}");
    }
    jit
}

#[test]
fn compiled_plans_see_what_the_interpreter_sees() {
    for inlined in [false, true] {
        let jit = agree(0, 0, inlined);
        assert!(
            jit.compiled_runs > 50,
            "{} compiled runs",
            jit.compiled_runs
        );
        let saw = |f: fn(&Event) -> bool| jit.log.iter().any(f);
        assert!(saw(|e| matches!(e, Event::Cond { .. })));
        assert!(saw(|e| matches!(e, Event::Entry { .. })));
        assert!(saw(|e| matches!(e, Event::Mem { store: true, .. })));
    }
}

/// A vCPU with no row on the board when its blocks were compiled (a guest
/// thread started after the plugin made its board): compiled inline
/// operations grow its row and count what vCPU 0's count.
#[test]
fn compiled_inline_operations_of_a_later_vcpu_grow_the_board() {
    for inlined in [false, true] {
        let first = run_on(0, JitConfig::on(0), 0, 0, inlined, true);
        for vcpu in [1, 2, 37] {
            let later = run_on(vcpu, JitConfig::on(0), 0, 0, inlined, true);
            assert_eq!(later.board, first.board, "vCPU {vcpu}");
            assert_eq!(later.log, first.log, "vCPU {vcpu}");
            assert!(later.compiled_runs > 50, "{}", later.compiled_runs);
        }
        assert!(first.board.iter().all(|&n| n > 0), "{:?}", first.board);
    }
}

#[test]
fn reinstrumenting_from_compiled_code_never_runs_stale_code() {
    for every in [1, 7, 40] {
        agree(every, 1, false);
        agree(every, 1, true);
    }
}

#[test]
fn flushing_from_compiled_code_agrees() {
    for every in [1, 7, 40] {
        agree(every, 2, false);
        agree(every, 2, true);
    }
}

/// Counts blocks with an inline add on entry: the interpreter runs such
/// blocks in runs, going on from one into the next without the vCPU loop.
struct CountBlocks {
    board: Arc<Scoreboard>,
}

impl Instrumentation for CountBlocks {
    fn translate(&self, _tb: &TbView<'_>, plan: &mut TbPlan) {
        plan.on_entry(Action::Inline(InlineOp {
            board: &self.board,
            slot: 0,
            kind: InlineKind::Add(1),
        }));
    }
}

/// Blocks the interpreter reaches only inside its runs still become hot
/// and compile: a loop of three blocks gets all three compiled, and the
/// block count is the interpreter's.
#[test]
fn blocks_inside_interpreted_runs_get_compiled() {
    let code = [
        enc::addi(COUNTER, 0, 200),
        // loop: a, then over one instruction to b, then c
        enc::addi(6, 6, 1),
        enc::b(1, 0, 6, 8),
        enc::addi(7, 7, 1),
        enc::addi(7, 7, 2),
        enc::b(0, 0, 0, 4),
        enc::addi(COUNTER, COUNTER, -1),
        enc::b(1, COUNTER, 0, -24),
        enc::ECALL,
    ];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let count = |jit: JitConfig, vcpu: u32| {
        let mut mem = GuestMemory::new();
        mem.map(CODE, 0x4000, Perms::READ | Perms::EXEC).unwrap();
        mem.write_initial(CODE, &bytes).unwrap();
        let mut cpu = Cpu::new();
        cpu.set_pc(CODE);
        let counter = Arc::new(CountBlocks {
            board: Arc::new(Scoreboard::new(1, 1)),
        });
        let mut engine = Engine::new(Rv64::new());
        engine.set_vcpu_index(vcpu);
        engine.set_jit(jit).unwrap();
        engine.set_instrumentation(Some(Arc::clone(&counter) as Arc<dyn Instrumentation>));
        engine.run(&mut cpu, &mut mem);
        let board = &counter.board;
        assert_eq!(board.sum(0), board.get(vcpu, 0), "only vCPU {vcpu} counted");
        (board.get(vcpu, 0), cpu.x(7), engine.stats())
    };
    let (interp_blocks, interp_x7, _) = count(JitConfig::OFF, 0);
    let config = JitConfig {
        enabled: true,
        threshold: 5,
        background: false,
    };
    let (blocks, x7, stats) = count(config, 0);
    assert_eq!((blocks, x7), (interp_blocks, interp_x7));
    // A vCPU past the board's first row (a thread started later): its
    // tallies, compiled and interpreted, grow the board and count the same.
    for vcpu in [1, 9, 1000] {
        assert_eq!(count(config, vcpu).0, interp_blocks, "vCPU {vcpu}");
        assert_eq!(count(JitConfig::OFF, vcpu).0, interp_blocks, "vCPU {vcpu}");
    }
    assert!(stats.blocks_compiled >= 3, "{stats:?}");
    assert!(
        stats.compiled_blocks_executed > 400,
        "{} compiled runs",
        stats.compiled_blocks_executed
    );
}

/// Runs `code` at `at` (a fresh memory) on `engine`; the exit and the
/// registers.
fn run_code(engine: &mut Engine<Rv64>, at: u64, code: &[u32]) -> (CpuExit, Vec<u64>) {
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut mem = GuestMemory::new();
    mem.map(at, 0x4000, Perms::READ | Perms::EXEC).unwrap();
    mem.write_initial(at, &bytes).unwrap();
    mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE).unwrap();
    let mut cpu = Cpu::new();
    cpu.set_x(BASE, DATA);
    cpu.set_pc(at);
    let exit = engine.run(&mut cpu, &mut mem);
    (exit, (0..32).map(|i| cpu.x(i)).collect())
}

#[test]
fn an_engine_sharing_code_runs_planned_blocks_with_its_own_hooks() {
    // Callbacks through the hook helper: the code names hooks by index
    // in its generation, which differs between the two engines.
    let watch = Arc::new(Watch::new(0, 0, false, false));
    let jit = JitConfig::on(0);
    let engine = || {
        let mut engine = Engine::new(Rv64::new());
        engine.set_jit(jit).unwrap();
        engine.set_instrumentation(Some(Arc::clone(&watch) as Arc<dyn Instrumentation>));
        engine
    };
    let counts = |vcpu| [watch.board.get(vcpu, 0), watch.board.get(vcpu, 1)];
    let take_log = || std::mem::take(&mut *watch.log.lock().unwrap());

    let mut first = engine();
    let first_end = run_code(&mut first, CODE, &program());
    let first_log = take_log();
    let first_counts = counts(0);
    let compiled = first.stats().blocks_compiled;
    assert!(compiled >= 2, "{compiled} blocks compiled");

    let mut second = engine();
    second.share_compiled_code(&first);
    // Blocks elsewhere first (counted on vCPU 2): the second engine's
    // hooks for the program come at other indices than the first one's.
    second.set_vcpu_index(2);
    let elsewhere = CODE + 0x8000;
    let other = [enc::addi(6, 0, 5), enc::store(3, BASE, 6, 0), enc::ECALL];
    assert_eq!(run_code(&mut second, elsewhere, &other).0, CpuExit::Syscall);
    assert!(!take_log().is_empty());
    // Then the program on vCPU 1: its row of the board (which the
    // conditional callback reads) starts at 0 as the first one's did.
    second.set_vcpu_index(1);
    let before = counts(1);
    assert_eq!(run_code(&mut second, CODE, &program()), first_end);
    let log = take_log();
    let differ = log.iter().zip(&first_log).position(|(a, b)| a != b);
    assert_eq!(differ, None, "the first event that differs");
    assert_eq!(log.len(), first_log.len());
    let after = counts(1);
    assert_eq!(
        [after[0] - before[0], after[1] - before[1]],
        first_counts,
        "the board's counts"
    );
    let stats = second.stats();
    assert_eq!(stats.blocks_adopted, compiled, "{stats:?}");
}
