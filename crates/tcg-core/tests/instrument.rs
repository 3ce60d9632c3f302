//! Instrumentation: callbacks, inline ops, memory callbacks, and resets
//! requested from inside callbacks (the QEMU plugin seed scenario).
mod common;
use common::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use tcgkit_tcg_core::*;

/// Instrumentation built from a closure, counting translations and flushes.
struct Instr<T> {
    plan: T,
    translations: AtomicU64,
    flushes: Arc<AtomicU64>,
}

impl<T: Fn(&TbView<'_>, &mut TbPlan) + Send + Sync> Instrumentation for Instr<T> {
    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
        self.translations.fetch_add(1, Relaxed);
        (self.plan)(tb, plan);
    }
    fn flushed(&self) {
        self.flushes.fetch_add(1, Relaxed);
    }
}

fn install<T: Fn(&TbView<'_>, &mut TbPlan) + Send + Sync + 'static>(
    engine: &mut Engine<Toy>,
    plan: T,
) -> Arc<Instr<T>> {
    let instr = Arc::new(Instr {
        plan,
        translations: AtomicU64::new(0),
        flushes: Arc::new(AtomicU64::new(0)),
    });
    engine.set_instrumentation(Some(instr.clone() as Arc<dyn Instrumentation>));
    instr
}

fn counter_cb(counter: &Arc<AtomicU64>) -> InsnCallback {
    let counter = counter.clone();
    Arc::new(move |_ctx: &mut CallbackContext<'_>| {
        counter.fetch_add(1, Relaxed);
    })
}

fn is_load(raw: u32) -> bool {
    matches!(raw >> 24, OP_LD | OP_LW_SIGNED | OP_LB)
}

#[test]
fn callbacks_and_inline_counters_match_the_engine_count() {
    let mut mem = machine(&loop_program(1000));
    let mut engine = Engine::new(Toy);
    let calls = Arc::new(AtomicU64::new(0));
    let board = Arc::new(Scoreboard::new(2, 1));
    let (cb, b) = (counter_cb(&calls), board.clone());
    let instr = install(&mut engine, move |tb, plan| {
        plan.on_entry(inline_add(&b, 1, 1));
        assert_eq!(plan.insn_count(), tb.insn_count());
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&cb));
            insn.on_execute(inline_add(&b, 0, 1));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], 1000);
    let stats = engine.stats();
    assert_eq!(stats.insns_executed, loop_insns(1000));
    assert_eq!(calls.load(Relaxed), loop_insns(1000));
    assert_eq!(board.sum(0), loop_insns(1000));
    assert_eq!(board.get(0, 1), stats.blocks_executed);
    assert_eq!(instr.translations.load(Relaxed), stats.tbs_translated);

    // Removing the instrumentation: blocks are retranslated bare.
    engine.set_instrumentation(None);
    let mut cpu = cpu_at(CODE);
    engine.run(&mut cpu, &mut mem);
    assert_eq!(
        calls.load(Relaxed),
        loop_insns(1000),
        "no callback after uninstall"
    );
    assert_eq!(engine.stats().tbs_translated, 6);
}

/// Actions attached out of instruction order (as two plugins each walking
/// the block do) still run in attachment order per instruction, with the
/// entry's first, and their memory actions stay with their instruction.
#[test]
fn actions_run_in_attachment_order_whatever_order_instructions_were_visited() {
    let code = [addi(1, 0, 1), ld(2, 4, 0), addi(3, 0, 3), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let log = Arc::new(Mutex::new(Vec::new()));
    let tagged = |tag: &'static str| -> InsnCallback {
        let log = log.clone();
        Arc::new(move |ctx: &mut CallbackContext<'_>| {
            log.lock().unwrap().push((ctx.pc(), tag));
        })
    };
    let on_load: MemCallback = {
        let log = log.clone();
        Arc::new(move |ctx: &mut CallbackContext<'_>, _: &MemAccessInfo| {
            log.lock().unwrap().push((ctx.pc(), "mem"));
        })
    };
    let (first, entry, second) = (tagged("first"), tagged("entry"), tagged("second"));
    install(&mut engine, move |_tb, plan| {
        let insns: Vec<_> = plan.insns().collect();
        for insn in insns.iter().rev() {
            insn.on_execute(Action::Callback(&first));
            insn.on_memory(MemFilter::All, MemAction::Callback(&on_load));
        }
        plan.on_entry(Action::Callback(&entry));
        for insn in &insns {
            insn.on_execute(Action::Callback(&second));
        }
    });
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let pc = |i: u64| CODE + 4 * i;
    let mut expected = vec![(CODE, "entry")];
    for i in 0..4 {
        expected.extend([(pc(i), "first"), (pc(i), "second")]);
        if i == 1 {
            expected.push((pc(i), "mem"));
        }
    }
    assert_eq!(*log.lock().unwrap(), expected);
}

#[test]
fn translation_view_describes_the_block() {
    let code = [addi(1, 0, 1), ld(2, 4, 0), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    install(&mut engine, move |tb, _plan| {
        let lines: Vec<String> = (0..tb.insn_count())
            .filter_map(|i| tb.disassemble(i))
            .collect();
        s.lock()
            .unwrap()
            .push((tb.pc(), tb.size(), tb.flags(), tb.insns().to_vec(), lines));
        assert!(tb.disassemble(tb.insn_count()).is_none());
        assert_eq!(tb.register_names().first(), Some(&"pc"));
    });
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    engine.run(&mut cpu, &mut mem);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let (pc, size, flags, insns, lines) = &seen[0];
    assert_eq!((*pc, *size, *flags), (CODE, 12, 0));
    assert_eq!(
        insns[1],
        InsnInfo {
            pc: CODE + 4,
            len: 4,
            raw: ld(2, 4, 0)
        }
    );
    assert_eq!(lines[2], format!("op{OP_SYSCALL} 0x0"));
}

#[test]
fn memory_callbacks_see_address_size_sign_and_value() {
    let code = [
        addi(1, 0, -16),    // r1 = 0xffff_ffff_ffff_fff0
        sd(1, 4, 0),        // DATA[0..8] = r1
        lw_signed(3, 4, 0), // r3 = sext(0xffff_fff0)
        lb(5, 4, 1),        // r5 = 0xff
        addi(6, 0, 5),      // r6 = 5
        amoadd(6, 4),       // DATA += 5, r6 = old
        syscall(),
    ];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let all = Arc::new(Mutex::new(Vec::new()));
    let reads = Arc::new(AtomicU64::new(0));
    let board = Arc::new(Scoreboard::new(1, 1));
    let (a, r, b) = (all.clone(), reads.clone(), board.clone());
    install(&mut engine, move |_tb, plan| {
        let a = a.clone();
        let log: MemCallback =
            Arc::new(move |ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
                assert_eq!(
                    ctx.read_register("r1"),
                    None,
                    "registers are not readable here"
                );
                let mut byte = [0u8; 1];
                ctx.read_memory(info.addr, &mut byte).unwrap();
                a.lock().unwrap().push((ctx.vcpu(), ctx.pc(), *info));
            });
        let r = r.clone();
        let count_reads: MemCallback = Arc::new(
            move |_ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
                assert!(!info.is_store);
                r.fetch_add(1, Relaxed);
            },
        );
        for insn in plan.insns() {
            insn.on_memory(MemFilter::All, MemAction::Callback(&log));
            insn.on_memory(MemFilter::Reads, MemAction::Callback(&count_reads));
            insn.on_memory(
                MemFilter::Writes,
                MemAction::Inline(InlineOp {
                    board: &b,
                    slot: 0,
                    kind: InlineKind::Add(1),
                }),
            );
        }
    });
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let info = |addr, size, sign_extended, is_store, value| MemAccessInfo {
        addr,
        size,
        sign_extended,
        is_store,
        value,
    };
    let expected = vec![
        (
            0,
            CODE + 4,
            info(DATA, 8, false, true, 0xffff_ffff_ffff_fff0),
        ),
        (
            0,
            CODE + 8,
            info(DATA, 4, true, false, 0xffff_ffff_ffff_fff0),
        ),
        (0, CODE + 12, info(DATA + 1, 1, false, false, 0xff)),
        (
            0,
            CODE + 20,
            info(DATA, 8, false, false, 0xffff_ffff_ffff_fff0),
        ),
        (
            0,
            CODE + 20,
            info(DATA, 8, false, true, 0xffff_ffff_ffff_fff5),
        ),
    ];
    assert_eq!(*all.lock().unwrap(), expected);
    assert_eq!(reads.load(Relaxed), 3);
    assert_eq!(board.get(0, 0), 2);
    assert_eq!(cpu.x[3], 0xffff_ffff_ffff_fff0);
    assert_eq!(cpu.x[5], 0xff);
}

/// Stores, sign- and zero-extending loads and an atomic, then a syscall.
fn memory_program() -> [u32; 7] {
    [
        addi(1, 0, -16),    // r1 = 0xffff_ffff_ffff_fff0
        sd(1, 4, 0),        // DATA[0..8] = r1
        lw_signed(3, 4, 0), // r3 = sext(0xffff_fff0)
        lb(5, 4, 1),        // r5 = 0xff
        addi(6, 0, 5),      // r6 = 5
        amoadd(6, 4),       // DATA += 5, r6 = old
        syscall(),
    ]
}

type MemTrace = Arc<Mutex<Vec<(u64, MemAccessInfo)>>>;

fn tracing_callback(trace: &MemTrace) -> MemCallback {
    let trace = trace.clone();
    Arc::new(move |ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
        trace.lock().unwrap().push((ctx.pc(), *info));
    })
}

/// Runs `memory_program` with `attach` planning every instruction; returns
/// the exit, the cpu, the engine and the memory.
fn run_memory_program(
    attach: impl Fn(&InsnPlan) + Send + Sync + 'static,
) -> (CpuExit, Cpu, Engine<Toy>, GuestMemory) {
    let mut mem = machine(&memory_program());
    let mut engine = Engine::new(Toy);
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            attach(&insn);
        }
    });
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    let exit = engine.run(&mut cpu, &mut mem);
    (exit, cpu, engine, mem)
}

#[test]
fn one_memory_action_on_every_instruction_sees_what_separate_ones_see() {
    // The same callback everywhere (the block's one memory action), then a
    // new callback per instruction (the general path).
    let shared: MemTrace = Arc::default();
    let one = tracing_callback(&shared);
    let (exit, cpu, _, _) = run_memory_program(move |insn| {
        insn.on_memory(MemFilter::All, MemAction::Callback(&one));
    });
    assert_eq!(
        (exit, cpu.x[3], cpu.x[5]),
        (CpuExit::Syscall, 0xffff_ffff_ffff_fff0, 0xff)
    );
    let separate: MemTrace = Arc::default();
    let s = separate.clone();
    run_memory_program(move |insn| {
        insn.on_memory(MemFilter::All, MemAction::Callback(&tracing_callback(&s)));
    });
    let shared = shared.lock().unwrap().clone();
    assert_eq!(shared, *separate.lock().unwrap());
    let seen: Vec<(u64, u64, u8, bool, bool)> = shared
        .iter()
        .map(|(pc, i)| (*pc, i.addr, i.size, i.is_store, i.sign_extended))
        .collect();
    assert_eq!(
        seen,
        [
            (CODE + 4, DATA, 8, true, false),
            (CODE + 8, DATA, 4, false, true),
            (CODE + 12, DATA + 1, 1, false, false),
            (CODE + 20, DATA, 8, false, false),
            (CODE + 20, DATA, 8, true, false),
        ]
    );
    assert_eq!(
        shared[4].1.value, 0xffff_ffff_ffff_fff5,
        "the atomic's store"
    );

    // One filtered callback, and one inline add, alone on every instruction.
    let reads = Arc::new(AtomicU64::new(0));
    let r = reads.clone();
    let count_reads: MemCallback = Arc::new(
        move |_ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
            assert!(!info.is_store);
            r.fetch_add(1, Relaxed);
        },
    );
    run_memory_program(move |insn| {
        insn.on_memory(MemFilter::Reads, MemAction::Callback(&count_reads));
    });
    assert_eq!(reads.load(Relaxed), 3);
    let board = Arc::new(Scoreboard::new(1, 1));
    let b = board.clone();
    run_memory_program(move |insn| {
        let add = InlineOp {
            board: &b,
            slot: 0,
            kind: InlineKind::Add(1),
        };
        insn.on_memory(MemFilter::Writes, MemAction::Inline(add));
    });
    assert_eq!(board.get(0, 0), 2);
    // Several inline operations and no callback: each access applies
    // exactly those its filter selects. With at most one per direction
    // (the `mem,inline=on` plugin's shape) they are resolved for the run;
    // an operation on a slot past the board does nothing.
    type InlineOps = &'static [(MemFilter, usize, InlineKind)];
    let inline_only = |ops: InlineOps| {
        let board = Arc::new(Scoreboard::new(3, 1));
        let b = board.clone();
        run_memory_program(move |insn| {
            for &(filter, slot, kind) in ops {
                let op = InlineOp {
                    board: &b,
                    slot,
                    kind,
                };
                insn.on_memory(filter, MemAction::Inline(op));
            }
        });
        (board.get(0, 0), board.get(0, 1), board.get(0, 2))
    };
    use InlineKind::{Add, Store};
    use MemFilter::{All, Reads, Writes};
    let cases: [(InlineOps, (u64, u64, u64)); 4] = [
        (
            &[(Reads, 0, Add(1)), (Writes, 1, Add(1)), (All, 2, Add(10))],
            (3, 2, 50),
        ),
        (&[(Reads, 0, Add(1)), (Writes, 1, Add(1))], (3, 2, 0)),
        (&[(All, 2, Add(10)), (Reads, 7, Add(1))], (0, 0, 50)),
        (&[(Writes, 0, Store(9)), (Reads, 1, Store(4))], (9, 4, 0)),
    ];
    for (ops, expected) in cases {
        assert_eq!(inline_only(ops), expected, "{ops:?}");
    }
}

#[test]
fn exit_requested_from_a_memory_callback_on_every_instruction_stops_after_it() {
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let exit_on_first_load: MemCallback =
        Arc::new(move |ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
            c.fetch_add(1, Relaxed);
            if !info.is_store && ctx.pc() == CODE + 8 {
                ctx.request_exit();
            }
        });
    let (exit, mut cpu, mut engine, mut mem) = run_memory_program(move |insn| {
        insn.on_memory(MemFilter::All, MemAction::Callback(&exit_on_first_load));
    });
    assert_eq!(exit, CpuExit::ExitRequested);
    assert_eq!(cpu.pc, CODE + 12, "the load whose callback asked completed");
    assert_eq!((cpu.x[3], cpu.x[5]), (0xffff_ffff_ffff_fff0, 0));
    assert_eq!(engine.stats().insns_executed, 3);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[5], 0xff);
    assert_eq!(calls.load(Relaxed), 5, "each access's callback ran once");
}

/// A flush asked for through a handle (as from another thread) by a memory
/// callback of a block with the same memory callback on every access takes
/// effect at the end of that block: its later accesses still run their
/// callbacks, and the next block is translated anew.
#[test]
fn a_flush_through_a_handle_from_a_memory_callback_takes_effect_at_the_block_end() {
    // Two blocks: three loads ending in a jump, then a load and the exit.
    let code = [
        ld(1, 4, 0),
        ld(2, 4, 8),
        ld(3, 4, 16),
        jmp(4),
        ld(5, 4, 24),
        syscall(),
    ];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let flush = engine.flush_handle();
    let translations = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (t, s) = (translations.clone(), seen.clone());
    let on_load: MemCallback = Arc::new(move |ctx: &mut CallbackContext<'_>, _: &MemAccessInfo| {
        s.lock().unwrap().push((ctx.pc(), t.load(Relaxed)));
        if ctx.pc() == CODE {
            flush.request_flush();
        }
    });
    let t = translations.clone();
    install(&mut engine, move |_tb, plan| {
        t.fetch_add(1, Relaxed);
        for insn in plan.insns() {
            insn.on_memory(MemFilter::Reads, MemAction::Callback(&on_load));
        }
    });
    let flushes = engine.stats().flushes;
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    // The first block's loads ran under its one translation; the second
    // block was translated after the flush (translation 2), and nothing was
    // translated twice.
    assert_eq!(
        *seen.lock().unwrap(),
        [(CODE, 1), (CODE + 4, 1), (CODE + 8, 1), (CODE + 16, 2)]
    );
    assert_eq!(engine.stats().flushes, flushes + 1);
    assert_eq!(translations.load(Relaxed), 2);
}

/// An exit asked through a handle while a block with callbacks runs: from
/// the callback's own thread it takes effect once the callback's
/// instruction is complete; from another thread (a kick: a signal, another
/// vCPU's reset) at the block's end, as QEMU's `cpu_exit` does, so that
/// the block is not entered again midway (a per-block count would count
/// its tail twice).
#[test]
fn an_exit_asked_from_another_thread_waits_for_the_blocks_end() {
    let code = [
        ld(1, 4, 0),
        ld(2, 4, 8),
        ld(3, 4, 16),
        jmp(4),
        ld(5, 4, 24),
        syscall(),
    ];
    for from_another_thread in [false, true] {
        let mut mem = machine(&code);
        let mut engine = Engine::new(Toy);
        let exit = engine.exit_handle();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let on_insn: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
            s.lock().unwrap().push(ctx.pc());
            if ctx.pc() == CODE {
                if from_another_thread {
                    let exit = exit.clone();
                    std::thread::spawn(move || exit.request_exit())
                        .join()
                        .unwrap();
                } else {
                    exit.request_exit();
                }
            }
        });
        let loads = Arc::new(AtomicU64::new(0));
        let l = loads.clone();
        let on_load: MemCallback =
            Arc::new(move |_: &mut CallbackContext<'_>, _: &MemAccessInfo| {
                l.fetch_add(1, Relaxed);
            });
        // Not on the jump: a block's instructions then have callbacks of
        // different kinds, which the general loop runs.
        install(&mut engine, move |_tb, plan| {
            for insn in plan.insns().filter(|i| i.index() < 3) {
                insn.on_execute(Action::Callback(&on_insn));
                insn.on_memory(MemFilter::Reads, MemAction::Callback(&on_load));
            }
        });
        let mut cpu = cpu_at(CODE);
        cpu.x[4] = DATA;
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
        let (pc, pcs, loads_seen) = if from_another_thread {
            (CODE + 16, vec![CODE, CODE + 4, CODE + 8], 3)
        } else {
            (CODE + 4, vec![CODE], 1)
        };
        assert_eq!(cpu.pc, pc, "another thread: {from_another_thread}");
        assert_eq!(*seen.lock().unwrap(), pcs);
        assert_eq!(loads.load(Relaxed), loads_seen);
        // The run goes on where it stopped, each block entered once.
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        assert_eq!(loads.load(Relaxed), 4);
        // Left midway, the block's tail (two loads and the jump) became a
        // block of its own, with a callback on the jump too.
        let tail = if from_another_thread { 0 } else { 1 };
        assert_eq!(seen.lock().unwrap().len(), 5 + tail);
    }
}

#[test]
fn memory_actions_on_instructions_without_accesses_are_dropped_at_translation() {
    // Two addis and a syscall: no instruction the frontend marks as
    // accessing memory, so the memory callback is not kept by the block
    // (nothing but the test holds it) and the block runs as plain code.
    let code = [addi(1, 0, 1), addi(2, 1, 1), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let on_access: MemCallback = Arc::new(
        move |_ctx: &mut CallbackContext<'_>, _info: &MemAccessInfo| {
            c.fetch_add(1, Relaxed);
        },
    );
    let cb = on_access.clone();
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_memory(MemFilter::All, MemAction::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[2], 2);
    assert_eq!(calls.load(Relaxed), 0);
    // One handle here, one in the instrumentation's closure: none in the cache.
    assert_eq!(Arc::strong_count(&on_access), 2);

    // The same callback on a block with a load is kept, and runs once.
    let code = [addi(1, 0, 1), ld(2, 4, 0), syscall()];
    let mut mem = machine(&code);
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    engine.flush();
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(calls.load(Relaxed), 1);
    assert!(Arc::strong_count(&on_access) > 2, "the cache holds it");
    // A flush lets go of it everywhere in the engine.
    engine.flush();
    assert_eq!(Arc::strong_count(&on_access), 2);
}

#[test]
fn a_faulting_access_runs_no_memory_callback() {
    let code = [ld(1, 0, 0x40), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    install(&mut engine, move |_tb, plan| {
        let c = c.clone();
        let cb: MemCallback = Arc::new(move |_: &mut CallbackContext<'_>, _: &MemAccessInfo| {
            c.fetch_add(1, Relaxed);
        });
        for insn in plan.insns() {
            insn.on_memory(MemFilter::All, MemAction::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert!(matches!(engine.run(&mut cpu, &mut mem), CpuExit::Fault(_)));
    assert_eq!(calls.load(Relaxed), 0);
}

#[test]
fn conditional_callbacks_run_only_when_the_condition_holds() {
    let mut mem = machine(&loop_program(100));
    let mut engine = Engine::new(Toy);
    let board = Arc::new(Scoreboard::new(1, 1));
    let fired = Arc::new(AtomicU64::new(0));
    let never = Arc::new(AtomicU64::new(0));
    let (b, f, n) = (board.clone(), counter_cb(&fired), counter_cb(&never));
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_execute(inline_add(&b, 0, 1));
            let cond = |compare, value| Condition {
                board: &b,
                slot: 0,
                compare,
                value,
            };
            insn.on_execute(Action::Conditional(cond(Compare::Gt, 100), &f));
            insn.on_execute(Action::Conditional(cond(Compare::Never, 0), &n));
        }
    });
    let mut cpu = cpu_at(CODE);
    engine.run(&mut cpu, &mut mem);
    let total = loop_insns(100);
    assert_eq!(board.get(0, 0), total);
    // The counter is already incremented when the condition is evaluated:
    // it exceeds 100 from the 101st instruction on.
    assert_eq!(fired.load(Relaxed), total - 100);
    assert_eq!(never.load(Relaxed), 0);
    assert!(Compare::Le.holds(3, 3) && Compare::Lt.holds(2, 3) && !Compare::Ne.holds(3, 3));
    assert!(Compare::Ge.holds(3, 3) && Compare::Eq.holds(1, 1) && Compare::Always.holds(0, 9));
}

#[test]
fn instruction_callbacks_read_registers_and_memory() {
    let code = [addi(1, 0, 77), sd(1, 4, 0), addi(2, 0, 1), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    install(&mut engine, move |_tb, plan| {
        let s = s.clone();
        let cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
            let mut word = [0u8; 8];
            ctx.read_memory(DATA, &mut word).unwrap();
            let bad = ctx.read_memory(0x10, &mut word);
            assert!(bad.is_err());
            *s.lock().unwrap() = Some((
                ctx.pc(),
                ctx.read_register("pc"),
                ctx.read_register("r1"),
                ctx.read_register("bogus"),
                word,
            ));
        });
        if let Some(insn) = plan.insn(2) {
            insn.on_execute(Action::Callback(&cb));
        }
        assert!(plan.insn(99).is_none());
    });
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    engine.run(&mut cpu, &mut mem);
    let got = seen.lock().unwrap().take().expect("callback ran");
    assert_eq!(
        got,
        (
            CODE + 8,
            Some(CODE + 8),
            Some(77),
            None,
            77u64.to_le_bytes()
        )
    );
}

#[test]
fn one_callback_on_every_instruction_reads_each_ones_registers_and_memory() {
    // The same callback before every instruction runs the block through
    // one context (`ExecMode::CallEach`): each call must still see its own
    // instruction's pc and the state the previous instructions left.
    let code = [addi(1, 0, 77), sd(1, 4, 0), addi(1, 1, 1), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
        let mut word = [0u8; 8];
        ctx.read_memory(DATA, &mut word).unwrap();
        s.lock().unwrap().push((
            ctx.pc(),
            ctx.read_register("pc"),
            ctx.read_register("r1"),
            u64::from_le_bytes(word),
        ));
    });
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    engine.run(&mut cpu, &mut mem);
    let pcs = |i: u64| CODE + 4 * i;
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (pcs(0), Some(pcs(0)), Some(0), 0),
            (pcs(1), Some(pcs(1)), Some(77), 0),
            (pcs(2), Some(pcs(2)), Some(77), 77),
            (pcs(3), Some(pcs(3)), Some(78), 77),
        ]
    );
    assert_eq!(cpu.x[1], 78);
}

#[test]
fn exit_requested_from_a_callback_stops_after_the_instruction() {
    let code = [addi(1, 0, 1), addi(2, 0, 2), addi(3, 0, 3), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let once = Arc::new(AtomicBool::new(false));
    let o = once.clone();
    install(&mut engine, move |_tb, plan| {
        let o = o.clone();
        let cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
            if !o.swap(true, Relaxed) {
                ctx.request_exit();
            }
        });
        if let Some(insn) = plan.insn(1) {
            insn.on_execute(Action::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    assert_eq!(
        cpu.pc,
        CODE + 8,
        "the instruction whose callback asked completed"
    );
    assert_eq!((cpu.x[2], cpu.x[3]), (2, 0));
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[3], 3);
}

/// Runs `loop_program(40)` with a callback before every instruction that
/// records the pc and r1 it sees: one callback attached everywhere
/// (`shared`), or a new one per instruction.
fn trace_every_instruction(shared: bool) -> (Vec<(u64, u64)>, u64) {
    let mut mem = machine(&loop_program(40));
    let mut engine = Engine::new(Toy);
    let trace = Arc::new(Mutex::new(Vec::new()));
    let make = {
        let trace = trace.clone();
        move || -> InsnCallback {
            let trace = trace.clone();
            Arc::new(move |ctx: &mut CallbackContext<'_>| {
                let r1 = ctx.read_register("r1").unwrap_or(u64::MAX);
                trace.lock().unwrap().push((ctx.pc(), r1));
            })
        }
    };
    let one = make();
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            let cb = if shared { one.clone() } else { make() };
            insn.on_execute(Action::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], 40);
    let trace = trace.lock().unwrap().clone();
    (trace, engine.stats().insns_executed)
}

#[test]
fn one_callback_on_every_instruction_sees_what_separate_ones_see() {
    let (shared, insns) = trace_every_instruction(true);
    let (separate, separate_insns) = trace_every_instruction(false);
    assert_eq!(insns, loop_insns(40));
    assert_eq!(separate_insns, insns);
    assert_eq!(shared.len() as u64, insns, "one call per instruction");
    assert_eq!(shared, separate);
    // Before each instruction, in program order: the first is the entry.
    assert_eq!(shared.first(), Some(&(CODE, 0)));
    assert_eq!(shared.last(), Some(&(CODE + 0x40, 40)), "the syscall, last");
}

#[test]
fn exit_requested_from_a_callback_on_every_instruction_stops_after_it() {
    let code = [addi(1, 0, 1), addi(2, 0, 2), addi(3, 0, 3), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
        if c.fetch_add(1, Relaxed) == 1 {
            ctx.request_exit();
        }
    });
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    assert_eq!(
        cpu.pc,
        CODE + 8,
        "the instruction whose callback asked completed"
    );
    assert_eq!((cpu.x[2], cpu.x[3]), (2, 0));
    assert_eq!(engine.stats().insns_executed, 2);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[3], 3);
    assert_eq!(
        calls.load(Relaxed),
        4,
        "each instruction's callback ran once"
    );
}

/// A loop whose body spans three blocks, as a real loop's often does: a
/// load, a block with no memory access, then a store and the branch back.
/// `n` iterations; DATA[8] ends as `n`, r6 as `2n`.
fn three_block_loop(n: i32) -> Vec<u32> {
    let mut code = loop_program(n);
    code.truncate(11);
    code.extend([
        addi(1, 1, 1),  // 0x2c: loop head
        ld(3, 4, 0),    // 0x30
        jmp(4),         // 0x34 -> 0x38
        addi(6, 6, 1),  // 0x38: no memory access
        addi(6, 6, 1),  // 0x3c
        jmp(4),         // 0x40 -> 0x44
        sd(1, 4, 8),    // 0x44
        bne(1, 2, -28), // 0x48 -> 0x2c
        syscall(),      // 0x4c
    ]);
    code
}

/// Instructions `three_block_loop(n)` runs up to and including the syscall.
fn three_block_loop_insns(n: u64) -> u64 {
    11 + 8 * n + 1
}

/// An engine with `plan` installed, memory holding `three_block_loop(1000)`
/// and a cpu at its start.
fn three_block_machine<T: Fn(&TbView<'_>, &mut TbPlan) + Send + Sync + 'static>(
    plan: T,
) -> (Engine<Toy>, GuestMemory, Cpu) {
    let mut engine = Engine::new(Toy);
    install(&mut engine, plan);
    (engine, machine(&three_block_loop(1000)), cpu_at(CODE))
}

/// Runs `three_block_loop(1000)` with `attach` planning every instruction,
/// to its end; returns the exits, the cpu and the engine's stats.
fn run_three_block_loop(
    attach: impl Fn(&InsnPlan) + Send + Sync + 'static,
) -> (Vec<CpuExit>, Cpu, EngineStats) {
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        for insn in plan.insns() {
            attach(&insn);
        }
    });
    let mut exits = Vec::new();
    while exits.last() != Some(&CpuExit::Syscall) && exits.len() < 100 {
        exits.push(engine.run(&mut cpu, &mut mem));
    }
    (exits, cpu, engine.stats())
}

/// An [`InlinedCallback`] runs its blocks in the loop compiled around
/// it: the same calls, pcs and counts as a plain callback, alone, beside
/// blocks carrying another callback (the run ends there and goes on in the
/// plain loop) and when it asks for an exit deep in a run; one built for
/// another frontend is an ordinary callback.
#[test]
fn inlined_callbacks_run_as_plain_ones() {
    let (_, plain_cpu, plain) = run_three_block_loop(|_| {});

    // Alone: every block is a CallEach block with the inlined callback.
    let (calls, pcs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (c, p) = (calls.clone(), pcs.clone());
    let cb: InsnCallback = Arc::new(InlinedCallback::<Toy, _>::new(
        move |ctx: &mut CallbackContext<'_>| {
            c.fetch_add(1, Relaxed);
            p.fetch_add(ctx.pc() - CODE, Relaxed);
        },
    ));
    let (exits, cpu, stats) = run_three_block_loop(move |insn| {
        insn.on_execute(Action::Callback(&cb));
    });
    assert_eq!(exits, [CpuExit::Syscall]);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(calls.load(Relaxed), plain.insns_executed);
    assert_eq!(stats.insns_executed, plain.insns_executed);
    // The same pcs as a plain callback sees.
    let plain_pcs = Arc::new(AtomicU64::new(0));
    let p = plain_pcs.clone();
    let plain_cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
        p.fetch_add(ctx.pc() - CODE, Relaxed);
    });
    run_three_block_loop(move |insn| insn.on_execute(Action::Callback(&plain_cb)));
    assert_eq!(pcs.load(Relaxed), plain_pcs.load(Relaxed));

    // Beside blocks carrying a plain callback: each counts its own.
    let (inlined_calls, other_calls) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let c = inlined_calls.clone();
    let inlined: InsnCallback = Arc::new(InlinedCallback::<Toy, _>::new(
        move |_: &mut CallbackContext<'_>| {
            c.fetch_add(1, Relaxed);
        },
    ));
    let other = counter_cb(&other_calls);
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |tb, plan| {
        // The loop's middle block (three instructions) takes the plain one.
        let cb = if tb.pc() == CODE + 0x38 {
            &other
        } else {
            &inlined
        };
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(cb));
        }
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(
        inlined_calls.load(Relaxed) + other_calls.load(Relaxed),
        plain.insns_executed
    );
    assert_eq!(other_calls.load(Relaxed), 3 * 1000);

    // An exit asked for deep in a run stops it right after that
    // instruction.
    exit_after_the_61st_jump(true, &plain_cpu, plain.insns_executed);

    // Built for another frontend: called through the plain loop, the same.
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let elsewhere: InsnCallback = Arc::new(InlinedCallback::<Elsewhere, _>::new(
        move |_: &mut CallbackContext<'_>| {
            c.fetch_add(1, Relaxed);
        },
    ));
    let (_, cpu, _) = run_three_block_loop(move |insn| {
        insn.on_execute(Action::Callback(&elsewhere));
    });
    assert_eq!(cpu, plain_cpu);
    assert_eq!(calls.load(Relaxed), plain.insns_executed);
}

/// One callback on every instruction of `three_block_loop(1000)` (an
/// [`InlinedCallback`] if `inlined`), asking for an exit at the 61st jump
/// out of the loop's first block: the run stops right after that jump,
/// and the guest then goes on to the end a plain run reached (`plain_cpu`,
/// after `plain_insns` instructions), every instruction's callback called
/// once.
fn exit_after_the_61st_jump(inlined: bool, plain_cpu: &Cpu, plain_insns: u64) {
    let (calls, jumps) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (c, j) = (calls.clone(), jumps.clone());
    let counting = move |ctx: &mut CallbackContext<'_>| {
        c.fetch_add(1, Relaxed);
        if ctx.pc() == CODE + 0x34 && j.fetch_add(1, Relaxed) == 60 {
            ctx.request_exit();
        }
    };
    let exit_once: InsnCallback = if inlined {
        Arc::new(InlinedCallback::<Toy, _>::new(counting))
    } else {
        Arc::new(counting)
    };
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&exit_once));
        }
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    assert_eq!(
        cpu.pc,
        CODE + 0x38,
        "the jump whose callback asked completed"
    );
    assert_eq!(engine.stats().insns_executed, 11 + 8 * 60 + 3);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(&cpu, plain_cpu);
    assert_eq!(calls.load(Relaxed), plain_insns);
    assert_eq!(engine.stats().insns_executed, plain_insns);
}

/// A frontend no engine here runs.
struct Elsewhere;

impl Frontend for Elsewhere {
    type Cpu = ();
    type Op = ();
    fn pc(_: &()) -> u64 {
        0
    }
    fn set_pc(_: &mut (), _: u64) {}
    fn decode(&self, _: &mut GuestMemory, pc: u64) -> Result<Decoded<()>, DecodeError> {
        Err(DecodeError::Illegal { pc, raw: 0 })
    }
    fn execute<M: MemAccess>(_: &mut (), _: &(), _: u64, _: &mut M) -> Flow {
        Flow::Next
    }
    fn disassemble(&self, _: &[u8], _: u64) -> String {
        String::new()
    }
    fn read_register(_: &(), _: &str) -> Option<u64> {
        None
    }
    fn register_names(&self) -> &'static [&'static str] {
        &[]
    }
}

/// Blocks with one callback on every instruction, one memory action on
/// every access, or a block-entry callback run several in a row out of the
/// vCPU loop: the engine still counts every block and instruction, every
/// callback runs once, a request from a callback deep in such a run stops
/// it after that instruction, and blocks a re-instrumentation left to plan
/// again are planned on the way.
#[test]
fn runs_of_instrumented_blocks_keep_counts_and_stop_where_asked() {
    let (plain_exits, plain_cpu, plain) = run_three_block_loop(|_| {});
    assert_eq!(plain_exits, [CpuExit::Syscall]);
    assert_eq!(plain.insns_executed, three_block_loop_insns(1000));
    assert_eq!((plain_cpu.x[1], plain_cpu.x[6]), (1000, 2000));

    // One callback on every instruction: every block is a CallEach block.
    let calls = Arc::new(AtomicU64::new(0));
    let cb = counter_cb(&calls);
    let (exits, cpu, stats) = run_three_block_loop(move |insn| {
        insn.on_execute(Action::Callback(&cb));
    });
    assert_eq!(exits, [CpuExit::Syscall]);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(
        (stats.blocks_executed, stats.insns_executed),
        (plain.blocks_executed, plain.insns_executed)
    );
    assert_eq!(calls.load(Relaxed), plain.insns_executed);

    // One memory callback on every access: the block without one is plain.
    let accesses = Arc::new(AtomicU64::new(0));
    let a = accesses.clone();
    let count: MemCallback = Arc::new(move |_: &mut CallbackContext<'_>, _: &MemAccessInfo| {
        a.fetch_add(1, Relaxed);
    });
    let (exits, cpu, stats) = run_three_block_loop(move |insn| {
        insn.on_memory(MemFilter::All, MemAction::Callback(&count));
    });
    assert_eq!(exits, [CpuExit::Syscall]);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(
        (stats.blocks_executed, stats.insns_executed),
        (plain.blocks_executed, plain.insns_executed)
    );
    assert_eq!(accesses.load(Relaxed), 2 * 1000);

    // One callback on block entry: every block runs its entry actions, then
    // the plain loop (`ExecMode::OnEntry`), in runs of such blocks.
    let entries = Arc::new(AtomicU64::new(0));
    let (cb, e) = (counter_cb(&entries), entries.clone());
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        plan.on_entry(Action::Callback(&cb));
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu, plain_cpu);
    let stats = engine.stats();
    assert_eq!(
        (stats.blocks_executed, stats.insns_executed),
        (plain.blocks_executed, plain.insns_executed)
    );
    assert_eq!(e.load(Relaxed), plain.blocks_executed);

    // The same, re-instrumented (as by a plugin reset) through a handle on
    // entering every 100th block: the blocks of the loop are planned again
    // on their way, and nothing is counted twice or missed.
    let entries = Arc::new(AtomicU64::new(0));
    let handle = Arc::new(OnceLock::<FlushHandle>::new());
    let (e, h) = (entries.clone(), handle.clone());
    let reinstrument_every_100th: InsnCallback = Arc::new(move |_: &mut CallbackContext<'_>| {
        if e.fetch_add(1, Relaxed) % 100 == 99 {
            h.get().expect("set before the run").request_reinstrument();
        }
    });
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        plan.on_entry(Action::Callback(&reinstrument_every_100th));
    });
    handle.set(engine.flush_handle()).expect("set once");
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu, plain_cpu);
    let stats = engine.stats();
    assert_eq!(stats.insns_executed, plain.insns_executed);
    assert_eq!(entries.load(Relaxed), stats.blocks_executed);
    assert!(
        stats.tbs_replanned >= 3 * 29,
        "each of the loop's blocks planned again after most of the 30 resets: {stats:?}"
    );

    // The same, with an exit asked for on entering the 100th block: it
    // stops after that block's first instruction.
    let entries = Arc::new(AtomicU64::new(0));
    let e = entries.clone();
    let exit_on_100th: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
        if e.fetch_add(1, Relaxed) == 99 {
            ctx.request_exit();
        }
    });
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        plan.on_entry(Action::Callback(&exit_on_100th));
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    // Block 1 is the set-up with the loop's first block, blocks 2 and 3
    // end the first iteration, and each further iteration is three blocks:
    // the 100th starts the 34th.
    assert_eq!(
        cpu.pc,
        CODE + 0x30,
        "stopped after the block's first instruction"
    );
    assert_eq!(engine.stats().insns_executed, 14 + 5 + 8 * 32 + 1);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(entries.load(Relaxed), engine.stats().blocks_executed);

    // Exits asked for by the callback of the 61st jump out of the first
    // block, and by the 777th store's: each run stops right after that
    // instruction, and the guest then goes on to the same end.
    exit_after_the_61st_jump(false, &plain_cpu, plain.insns_executed);

    exit_after_the_777th_store(false, &plain_cpu);
}

/// One memory callback on every access of `three_block_loop(1000)` (an
/// [`InlinedMemCallback`] if `inlined`), asking for an exit at the 777th
/// store: the run stops right after that store, and the guest then goes
/// on to the end a plain run reached (`plain_cpu`), every access seen
/// once.
fn exit_after_the_777th_store(inlined: bool, plain_cpu: &Cpu) {
    let (loads, stores) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (l, s, pcs) = (
        loads.clone(),
        stores.clone(),
        Arc::new(Mutex::new(Vec::new())),
    );
    let seen = pcs.clone();
    let counting = move |ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
        if !info.is_store {
            l.fetch_add(1, Relaxed);
        } else if s.fetch_add(1, Relaxed) == 776 {
            seen.lock().unwrap().push((ctx.pc(), info.value));
            ctx.request_exit();
        }
    };
    let exit_on_store: MemCallback = if inlined {
        Arc::new(InlinedMemCallback::<Toy, _>::new(counting))
    } else {
        Arc::new(counting)
    };
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_memory(MemFilter::All, MemAction::Callback(&exit_on_store));
        }
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    assert_eq!(*pcs.lock().unwrap(), [(CODE + 0x44, 777)]);
    assert_eq!(
        cpu.pc,
        CODE + 0x48,
        "the store whose callback asked completed"
    );
    assert_eq!(engine.stats().insns_executed, 11 + 8 * 776 + 7);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(&cpu, plain_cpu);
    assert_eq!((loads.load(Relaxed), stores.load(Relaxed)), (1000, 1000));
}

/// An [`InlinedMemCallback`] runs its blocks in the MemEach loop compiled
/// around it: the same accesses as a plain memory callback, alone, beside
/// blocks whose accesses run another callback, and when it asks for an
/// exit deep in a run; one built for another frontend is an ordinary
/// callback.
#[test]
fn inlined_memory_callbacks_run_as_plain_ones() {
    let (_, plain_cpu, _) = run_three_block_loop(|_| {});
    exit_after_the_777th_store(true, &plain_cpu);

    // Beside blocks whose accesses run a plain callback: each sees its
    // own, together what one plain callback sees (a store weighs 1001).
    let weigh = |info: &MemAccessInfo| 1 + u64::from(info.is_store) * 1000;
    let plain_seen = Arc::new(AtomicU64::new(0));
    let p = plain_seen.clone();
    let plain: MemCallback = Arc::new(move |_: &mut CallbackContext<'_>, info: &MemAccessInfo| {
        p.fetch_add(weigh(info), Relaxed);
    });
    run_three_block_loop(move |insn| {
        insn.on_memory(MemFilter::All, MemAction::Callback(&plain));
    });
    let (inlined_seen, other_seen) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (i, o) = (inlined_seen.clone(), other_seen.clone());
    let inlined: MemCallback = Arc::new(InlinedMemCallback::<Toy, _>::new(
        move |_: &mut CallbackContext<'_>, info: &MemAccessInfo| {
            i.fetch_add(weigh(info), Relaxed);
        },
    ));
    let other: MemCallback = Arc::new(move |_: &mut CallbackContext<'_>, info: &MemAccessInfo| {
        o.fetch_add(weigh(info), Relaxed);
    });
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |tb, plan| {
        // The loop's last block (its store) takes the plain one.
        let cb = if tb.pc() == CODE + 0x44 {
            &other
        } else {
            &inlined
        };
        for insn in plan.insns() {
            insn.on_memory(MemFilter::All, MemAction::Callback(cb));
        }
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(
        other_seen.load(Relaxed),
        1000 * 1001,
        "the loop's 1000 stores"
    );
    assert_eq!(
        inlined_seen.load(Relaxed) + other_seen.load(Relaxed),
        plain_seen.load(Relaxed)
    );

    // Built for another frontend: an ordinary callback, the same accesses.
    let seen = Arc::new(AtomicU64::new(0));
    let e = seen.clone();
    let elsewhere: MemCallback = Arc::new(InlinedMemCallback::<Elsewhere, _>::new(
        move |_: &mut CallbackContext<'_>, info: &MemAccessInfo| {
            e.fetch_add(weigh(info), Relaxed);
        },
    ));
    let (_, cpu, _) = run_three_block_loop(move |insn| {
        insn.on_memory(MemFilter::All, MemAction::Callback(&elsewhere));
    });
    assert_eq!(cpu, plain_cpu);
    assert_eq!(seen.load(Relaxed), plain_seen.load(Relaxed));
}

/// The seed scenario: loop body `addi r1; sd r1 -> DATA; ld r3 <- DATA; bne`.
fn storm_program(n: i32) -> Vec<u32> {
    let mut code = loop_program(n);
    // Replace the body (0x2c..0x3c) with: addi r1; sd r1,0(r4); ld r3,0(r4); amoadd r7,(r4)+8; bne
    code[11] = addi(1, 1, 1);
    code[12] = sd(1, 4, 0);
    code[13] = ld(3, 4, 0);
    code[14] = addi(7, 0, 0);
    code
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResetFrom {
    /// `ctx.request_flush()` in the instruction callback of the load.
    InsnCallback,
    /// `ctx.request_flush()` in the memory callback of the load.
    MemCallback,
    /// A plugin-held `FlushHandle` in the instruction callback of the load.
    Handle,
}

struct Storm {
    insn_calls: AtomicU64,
    load_calls: AtomicU64,
    store_calls: AtomicU64,
    resets: AtomicU64,
    /// Value the next load must see (the store before it wrote it).
    last_stored: AtomicU64,
    bad_values: AtomicU64,
    /// Callbacks of a generation retired before `flushed()` ran.
    stale_calls: AtomicU64,
    flushes: AtomicU64,
    every: u64,
    from: ResetFrom,
    retire: Retire,
    handle: OnceLock<FlushHandle>,
}

/// What a reset asks of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retire {
    /// A flush: every block is decoded again.
    Flush,
    /// A re-instrumentation: blocks keep their code and are planned again.
    Reinstrument,
}

impl Storm {
    fn request(&self, ctx: &mut CallbackContext<'_>) {
        match self.retire {
            Retire::Flush => ctx.request_flush(),
            Retire::Reinstrument => ctx.request_reinstrument(),
        }
    }

    fn request_through_handle(&self) {
        let handle = self.handle.get().expect("handle");
        match self.retire {
            Retire::Flush => handle.request_flush(),
            Retire::Reinstrument => handle.request_reinstrument(),
        }
    }
}

impl Storm {
    fn new(every: u64, from: ResetFrom, retire: Retire) -> Arc<Self> {
        Arc::new(Storm {
            insn_calls: AtomicU64::new(0),
            load_calls: AtomicU64::new(0),
            store_calls: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            last_stored: AtomicU64::new(0),
            bad_values: AtomicU64::new(0),
            stale_calls: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            every,
            from,
            retire,
            handle: OnceLock::new(),
        })
    }
}

/// The storm plugin: counts everything, resets every `every`-th load.
struct StormInstr(Arc<Storm>);

impl Instrumentation for StormInstr {
    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
        // Each translation records the flush count it belongs to; a callback
        // running after a later flush would be a use of a retired list.
        let generation = self.0.flushes.load(Relaxed);
        for (index, info) in tb.insns().iter().enumerate() {
            let Some(insn) = plan.insn(index) else {
                continue;
            };
            let st = self.0.clone();
            let load = is_load(info.raw);
            let on_insn: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
                if st.flushes.load(Relaxed) != generation {
                    st.stale_calls.fetch_add(1, Relaxed);
                }
                st.insn_calls.fetch_add(1, Relaxed);
                if load {
                    let k = st.load_calls.load(Relaxed) + 1;
                    if k.is_multiple_of(st.every) {
                        match st.from {
                            ResetFrom::InsnCallback => st.request(ctx),
                            ResetFrom::Handle => st.request_through_handle(),
                            ResetFrom::MemCallback => {}
                        }
                        if st.from != ResetFrom::MemCallback {
                            st.resets.fetch_add(1, Relaxed);
                        }
                    }
                }
            });
            insn.on_execute(Action::Callback(&on_insn));
            let st = self.0.clone();
            let on_access: MemCallback = Arc::new(
                move |ctx: &mut CallbackContext<'_>, access: &MemAccessInfo| {
                    if st.flushes.load(Relaxed) != generation {
                        st.stale_calls.fetch_add(1, Relaxed);
                    }
                    if access.is_store {
                        st.store_calls.fetch_add(1, Relaxed);
                        if access.addr == DATA {
                            st.last_stored.store(access.value, Relaxed);
                        }
                    } else {
                        let k = st.load_calls.fetch_add(1, Relaxed) + 1;
                        if access.addr == DATA && access.value != st.last_stored.load(Relaxed) {
                            st.bad_values.fetch_add(1, Relaxed);
                        }
                        if st.from == ResetFrom::MemCallback && k.is_multiple_of(st.every) {
                            st.request(ctx);
                            st.resets.fetch_add(1, Relaxed);
                        }
                    }
                },
            );
            insn.on_memory(MemFilter::All, MemAction::Callback(&on_access));
        }
    }

    fn flushed(&self) {
        self.0.flushes.fetch_add(1, Relaxed);
    }
}

fn storm(every: u64, from: ResetFrom) {
    storm_retiring(every, from, Retire::Flush);
    storm_retiring(every, from, Retire::Reinstrument);
}

fn storm_retiring(every: u64, from: ResetFrom, retire: Retire) {
    const N: u64 = 2000;
    let mut mem = machine(&storm_program(N as i32));
    let mut engine = Engine::new(Toy);
    let st = Storm::new(every, from, retire);
    st.handle.set(engine.flush_handle()).expect("set once");
    engine.set_instrumentation(Some(Arc::new(StormInstr(st.clone()))));
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], N);
    assert_eq!(cpu.x[3], N, "guest result unchanged");

    let stats = engine.stats();
    let label = format!("every {every} from {from:?} by {retire:?}");
    assert_eq!(st.insn_calls.load(Relaxed), stats.insns_executed, "{label}");
    assert_eq!(stats.insns_executed, loop_insns(N), "{label}");
    // One load per iteration (the prologue has none).
    assert_eq!(st.load_calls.load(Relaxed), N, "{label}");
    assert_eq!(st.store_calls.load(Relaxed), N, "{label}");
    assert_eq!(st.bad_values.load(Relaxed), 0, "{label}");
    assert_eq!(st.stale_calls.load(Relaxed), 0, "{label}");
    let resets = st.resets.load(Relaxed);
    assert_eq!(resets, N / every, "{label}");
    assert_eq!(
        st.flushes.load(Relaxed),
        resets,
        "one flush per reset: {label}"
    );
    match retire {
        // Installing the instrumentation flushed once.
        Retire::Flush => {
            assert_eq!(stats.flushes, resets + 1, "{label}");
            assert!(stats.tbs_translated > resets, "{label}");
        }
        Retire::Reinstrument => {
            // Blocks keep their decoded code: besides the loop, only the
            // block that starts after the load (where each reset stops
            // the executing block) is ever translated.
            assert_eq!(stats.flushes, 1, "{label}");
            assert_eq!(stats.reinstrumentations, resets, "{label}");
            assert!(stats.tbs_translated <= 8, "{label}: {stats:?}");
            assert!(stats.tbs_replanned >= resets, "{label}: {stats:?}");
        }
    }
    assert_eq!(
        stats.live_generations, 1,
        "retired generations reclaimed: {label}"
    );
    assert_eq!(stats.retired_bytes, 0, "{label}");
}

#[test]
fn reset_from_the_instruction_callback_of_a_load() {
    for every in [1, 7, 1000] {
        storm(every, ResetFrom::InsnCallback);
    }
}

#[test]
fn reset_from_the_memory_callback_of_a_load() {
    for every in [1, 7, 1000] {
        storm(every, ResetFrom::MemCallback);
    }
}

#[test]
fn reset_through_a_flush_handle_from_a_callback() {
    for every in [1, 7, 1000] {
        storm(every, ResetFrom::Handle);
    }
}

#[test]
fn reset_inside_an_atomic_keeps_the_store_callbacks_of_that_instruction() {
    // amoadd loads then stores; the flush requested by the load's memory
    // callback must not cut off the store's callback of the same instruction.
    let code = [
        addi(6, 0, 1),
        amoadd(6, 4),
        amoadd(6, 4),
        amoadd(6, 4),
        syscall(),
    ];
    let mut mem = machine(&code);
    mem.store(DATA, 8, 40).unwrap();
    let mut engine = Engine::new(Toy);
    let log = Arc::new(Mutex::new(Vec::new()));
    let flushes = Arc::new(AtomicU64::new(0));
    let (l, f) = (log.clone(), flushes.clone());
    let instr = Arc::new(Instr {
        plan: move |_tb: &TbView<'_>, plan: &mut TbPlan| {
            let l = l.clone();
            let generation = f.load(Relaxed);
            let f = f.clone();
            let cb: MemCallback = Arc::new(
                move |ctx: &mut CallbackContext<'_>, access: &MemAccessInfo| {
                    if !access.is_store {
                        ctx.request_flush();
                    }
                    l.lock().unwrap().push((
                        ctx.pc(),
                        access.is_store,
                        access.value,
                        generation,
                        f.load(Relaxed),
                    ));
                },
            );
            for insn in plan.insns() {
                insn.on_memory(MemFilter::All, MemAction::Callback(&cb));
            }
        },
        translations: AtomicU64::new(0),
        flushes: flushes.clone(),
    });
    engine.set_instrumentation(Some(instr.clone()));
    let mut cpu = cpu_at(CODE);
    cpu.x[4] = DATA;
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(mem.load(DATA, 8), Ok(122));
    let log = log.lock().unwrap();
    let expect = [
        (CODE + 4, false, 40, 0, 0),
        (CODE + 4, true, 41, 0, 0),
        (CODE + 8, false, 41, 1, 1),
        (CODE + 8, true, 81, 1, 1),
        (CODE + 12, false, 81, 2, 2),
        (CODE + 12, true, 122, 2, 2),
    ];
    assert_eq!(*log, expect);
    assert_eq!(flushes.load(Relaxed), 3);
    assert_eq!(instr.translations.load(Relaxed), 4);
    assert_eq!(engine.stats().live_generations, 1);
}

#[test]
fn a_flush_requested_by_an_exiting_instruction_happens_before_run_returns() {
    let code = [addi(1, 0, 1), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let instr = install(&mut engine, |_tb, plan| {
        let cb: InsnCallback = Arc::new(|ctx: &mut CallbackContext<'_>| ctx.request_flush());
        let last = plan.insn_count().saturating_sub(1);
        if let Some(last) = plan.insn(last) {
            last.on_execute(Action::Callback(&cb));
        }
    });
    let mut cpu = cpu_at(CODE);
    let before = engine.stats().flushes;
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.pc, CODE + 4);
    assert_eq!(engine.stats().flushes, before + 1);
    assert_eq!(
        instr.flushes.load(Relaxed),
        1,
        "the instrumentation was told"
    );
    assert_eq!(engine.stats().tbs_cached, 0);
}

#[test]
fn scoreboards_and_callbacks_see_each_vcpus_index() {
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let board = Arc::new(Scoreboard::new(1, 3));
    let vcpus_seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let (b, v) = (board.clone(), vcpus_seen.clone());
    install(&mut engine, move |_tb, plan| {
        let v = v.clone();
        let on_entry: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
            v.lock().unwrap().insert(ctx.vcpu());
        });
        plan.on_entry(Action::Callback(&on_entry));
        for insn in plan.insns() {
            insn.on_execute(inline_add(&b, 0, 1));
        }
    });
    let mut one = engine.new_vcpu();
    let mut two = engine.new_vcpu();
    let mut three = engine.new_vcpu(); // index 3: past the board, grown
    for which in [1, 2, 2, 3] {
        let vcpu = match which {
            1 => &mut one,
            2 => &mut two,
            _ => &mut three,
        };
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run_vcpu(vcpu, &mut cpu, &mut mem), CpuExit::Syscall);
    }
    let per_run = loop_insns(10);
    assert_eq!(
        (board.get(0, 0), board.get(1, 0), board.get(2, 0)),
        (0, per_run, 2 * per_run)
    );
    assert_eq!(board.get(3, 0), per_run);
    assert_eq!(board.sum(0), 4 * per_run);
    assert_eq!(board.vcpus(), 6, "a segment of three rows grown");
    assert_eq!(*vcpus_seen.lock().unwrap(), [1, 2, 3].into_iter().collect());
    assert_eq!(
        engine.stats().tbs_translated,
        3,
        "the vCPUs share one cache"
    );
}

/// Attaches a conditional callback that never runs to `insn`: the block
/// then takes the engine's general loop, for comparing a specialised loop
/// with it.
fn force_general_loop(insn: &InsnPlan, board: &Arc<Scoreboard>, never: &InsnCallback) {
    let never_true = Condition {
        board,
        slot: 0,
        compare: Compare::Never,
        value: 0,
    };
    insn.on_execute(Action::Conditional(never_true, never));
}

/// Inline adds only (entry and per instruction, several entries, distinct
/// immediates): `weights[i]` is added to slot 0 before instruction `i`,
/// 10 to slot 1 on block entry and 1 to slot 2 before instruction 0.
/// With `force_steps`, a never-true conditional callback makes the block
/// take the general step-stream path, for comparison.
fn run_inline_adds(code: &[u32], force_steps: bool) -> (CpuExit, [u64; 3], u64) {
    let mut mem = machine(code);
    let mut engine = Engine::new(Toy);
    let board = Arc::new(Scoreboard::new(3, 1));
    let b = board.clone();
    let never = counter_cb(&Arc::new(AtomicU64::new(0)));
    install(&mut engine, move |_tb, plan| {
        let add = |slot, imm| inline_add(&b, slot, imm);
        plan.on_entry(add(1, 10));
        for insn in plan.insns() {
            let i = insn.index();
            insn.on_execute(add(0, i as u64 + 1));
            if i == 0 {
                insn.on_execute(add(2, 1));
            }
            if force_steps {
                force_general_loop(&insn, &b, &never);
            }
        }
    });
    let mut cpu = cpu_at(CODE);
    let exit = engine.run(&mut cpu, &mut mem);
    let counts = [board.get(0, 0), board.get(0, 1), board.get(0, 2)];
    (exit, counts, engine.stats().insns_executed)
}

#[test]
fn inline_adds_count_only_the_instructions_that_ran() {
    // The load at index 2 faults: instructions 0..=2 were dispatched.
    let code = [
        addi(1, 1, 1),
        addi(1, 1, 1),
        ld(2, 0, 0x40),
        addi(1, 1, 1),
        syscall(),
    ];
    for force_steps in [false, true] {
        let (exit, counts, insns) = run_inline_adds(&code, force_steps);
        assert!(matches!(exit, CpuExit::Fault(_)), "{exit:?}");
        assert_eq!(insns, 3);
        assert_eq!(counts, [1 + 2 + 3, 10, 1], "force_steps={force_steps}");
    }
}

#[test]
fn inline_adds_agree_between_the_fast_and_general_paths() {
    let code = loop_program(50);
    let fast = run_inline_adds(&code, false);
    let general = run_inline_adds(&code, true);
    assert_eq!(fast.0, CpuExit::Syscall);
    assert_eq!(fast, general);
    assert!(fast.1[1] > 0 && fast.1[0] > fast.2);
}

#[test]
fn reclaiming_a_generation_releases_its_callbacks_even_when_its_memory_is_reused() {
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let cb = counter_cb(&Arc::new(AtomicU64::new(0)));
    let c = cb.clone();
    let instr = install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&c));
        }
    });
    for _ in 0..3 {
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        assert!(
            Arc::strong_count(&cb) > 2,
            "the generation holds the callback"
        );
        // Retired, then reclaimed (the built-in vCPU is offline between runs).
        engine.flush();
        assert_eq!(engine.stats().live_generations, 1);
        assert_eq!(engine.stats().tbs_cached, 0);
        assert_eq!(
            Arc::strong_count(&cb),
            2,
            "only the test and the plan closure"
        );
    }
    engine.set_instrumentation(None);
    drop(instr);
    assert_eq!(Arc::strong_count(&cb), 1);
}

#[test]
fn reinstrumentation_keeps_code_and_bounds_the_superseded_plans() {
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let calls = Arc::new(AtomicU64::new(0));
    // 1 or 2 callbacks per instruction: a plan of a new shape cannot take
    // the place of the old one.
    let per_insn = Arc::new(AtomicU64::new(1));
    let (cb, n) = (counter_cb(&calls), per_insn.clone());
    let instr = install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            for _ in 0..n.load(Relaxed) {
                insn.on_execute(Action::Callback(&cb));
            }
        }
    });
    let mut expected_calls = 0;
    let mut round = |engine: &mut Engine<Toy>, per: u64| {
        per_insn.store(per, Relaxed);
        engine.reinstrument();
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        expected_calls += per * loop_insns(10);
        engine.stats()
    };
    round(&mut engine, 1);
    let settled = round(&mut engine, 1);
    // Plans of the same shape take the old ones' place: nothing grows.
    for _ in 0..1000 {
        let now = round(&mut engine, 1);
        assert_eq!(now.current_bytes, settled.current_bytes, "{now:?}");
        assert_eq!(now.flushes, settled.flushes);
    }
    // Alternating shapes leave garbage behind, bounded by a flush once it
    // outweighs the live plans.
    let mut peak_bytes = 0;
    const ROUNDS: u64 = 20_000;
    for r in 0..ROUNDS {
        peak_bytes = peak_bytes.max(round(&mut engine, 1 + r % 2).current_bytes);
    }
    let stats = engine.stats();
    assert_eq!(
        calls.load(Relaxed),
        expected_calls,
        "every run fully instrumented"
    );
    assert_eq!(
        instr.flushes.load(Relaxed),
        ROUNDS + 1002,
        "the instrumentation hears of each"
    );
    assert_eq!(
        stats.tbs_replanned + stats.tbs_translated,
        instr.translations.load(Relaxed)
    );
    assert!(stats.flushes > settled.flushes, "never flushed: {stats:?}");
    assert!(stats.reinstrumentations > stats.flushes * 100, "{stats:?}");
    assert!(
        stats.tbs_translated < stats.tbs_replanned / 100,
        "{stats:?}"
    );
    assert!(peak_bytes < 16 << 20, "peak {peak_bytes} bytes");
}

/// A callback named by many actions of many blocks lives exactly as long
/// as some block's plan names it: re-planning every block for a new one
/// drops it, and re-planning only some keeps it for the others.
#[test]
fn a_replaced_callback_is_dropped_once_no_plan_names_it() {
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let calls = Arc::new(AtomicU64::new(0));
    let current = Arc::new(Mutex::new(counter_cb(&calls)));
    let c = current.clone();
    install(&mut engine, move |_tb, plan| {
        let cb = c.lock().unwrap().clone();
        plan.on_entry(Action::Callback(&cb));
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&cb));
        }
    });
    let run = |engine: &mut Engine<Toy>, mem: &mut GuestMemory| {
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, mem), CpuExit::Syscall);
    };
    run(&mut engine, &mut mem);
    let first = Arc::downgrade(&current.lock().unwrap());
    assert!(first.strong_count() > 1, "the cache holds it");

    // Every block is planned again (all run again) with a new callback.
    *current.lock().unwrap() = counter_cb(&calls);
    engine.reinstrument();
    run(&mut engine, &mut mem);
    assert_eq!(first.strong_count(), 0, "no plan names the first one");
    let second = Arc::downgrade(&current.lock().unwrap());

    // Only the block at the syscall runs again: the others keep theirs.
    *current.lock().unwrap() = counter_cb(&calls);
    engine.reinstrument();
    let replanned = engine.stats().tbs_replanned;
    let mut cpu = cpu_at(CODE + 4 * 16);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(engine.stats().tbs_replanned, replanned + 1);
    assert!(
        second.strong_count() > 0,
        "blocks not run again still name it"
    );
}

#[test]
fn reinstrumented_inline_counters_stay_exact() {
    // Inline adds only: the blocks run as tallies, and each new plan (a
    // different immediate every round) takes the old one's place.
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let board = Arc::new(Scoreboard::new(1, 1));
    let imm = Arc::new(AtomicU64::new(1));
    let (b, i) = (board.clone(), imm.clone());
    install(&mut engine, move |_tb, plan| {
        for insn in plan.insns() {
            insn.on_execute(inline_add(&b, 0, i.load(Relaxed)));
        }
    });
    let mut expected = 0;
    for round in 1..=200u64 {
        imm.store(round, Relaxed);
        engine.reinstrument();
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        expected += round * loop_insns(10);
        assert_eq!(board.get(0, 0), expected, "round {round}");
    }
    assert_eq!(engine.stats().tbs_translated, 3);
}

#[test]
fn batched_inline_counts_are_exact_wherever_the_vcpu_looks() {
    // Every instruction but the syscall adds 3 to slot 0 (blocks without
    // entry adds: their adds are batched across blocks) and every block
    // entry adds 1 to slot 1 of another board (its blocks keep per-block
    // tallies). The syscall's callback reads both, as do translations (the
    // instrumentation runs on the vCPU too) and the embedder after `run`.
    const N: i32 = 3000; // 15k instructions: past the batching bound
    let mut mem = machine(&loop_program(N));
    let mut engine = Engine::new(Toy);
    let insns = Arc::new(Scoreboard::new(1, 1));
    let entries = Arc::new(Scoreboard::new(2, 1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_again = seen.clone();
    let (i, e, s) = (insns.clone(), entries.clone(), seen.clone());
    let reader_seen = seen.clone();
    let (ri, re) = (insns.clone(), entries.clone());
    let reader: InsnCallback = Arc::new(move |_ctx: &mut CallbackContext<'_>| {
        reader_seen
            .lock()
            .unwrap()
            .push(("callback", ri.get(0, 0), re.get(0, 1)));
    });
    install(&mut engine, move |tb, plan| {
        s.lock()
            .unwrap()
            .push(("translate", i.get(0, 0), e.get(0, 1)));
        let syscall_block = tb.insns().first().is_some_and(|x| x.raw == syscall());
        if syscall_block {
            if let Some(first) = plan.insn(0) {
                first.on_execute(Action::Callback(&reader));
            }
            return;
        }
        if tb.pc() == CODE {
            plan.on_entry(inline_add(&e, 1, 1));
        }
        for insn in plan.insns() {
            insn.on_execute(inline_add(&i, 0, 3));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let before_syscall = loop_insns(N as u64) - 1;
    assert_eq!(insns.get(0, 0), 3 * before_syscall, "after run returns");
    assert_eq!(entries.get(0, 1), 1);
    let seen = seen.lock().unwrap();
    // Translations: the first block (nothing ran yet), the loop (after the
    // first block: its 11 set-up instructions and the first iteration's 5),
    // the syscall block (after the whole loop).
    assert_eq!(
        *seen,
        vec![
            ("translate", 0, 0),
            ("translate", 3 * 16, 1),
            ("translate", 3 * before_syscall, 1),
            ("callback", 3 * before_syscall, 1),
        ]
    );
    drop(seen);
    // Again, with every block cached: only the callback looks.
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let seen = seen_again.lock().unwrap();
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[4], ("callback", 6 * before_syscall, 2));
    assert_eq!(insns.get(0, 0), 6 * before_syscall);
}

#[test]
fn instruction_counters_on_different_boards_stay_exact() {
    // The first block (the set-up and the first iteration) and the syscall
    // block count 1 per instruction on one board, the loop block 2 per
    // instruction on another: every block is a Count block, but they stop
    // sharing one tally when the loop block is translated, with the first
    // block's count still pending.
    const N: i32 = 1000;
    let mut mem = machine(&loop_program(N));
    let mut engine = Engine::new(Toy);
    let (outer, inner) = (
        Arc::new(Scoreboard::new(1, 1)),
        Arc::new(Scoreboard::new(1, 1)),
    );
    let (o, i) = (outer.clone(), inner.clone());
    install(&mut engine, move |tb, plan| {
        let (board, add) = if tb.pc() == CODE + 0x2c {
            (&i, 2)
        } else {
            (&o, 1)
        };
        for insn in plan.insns() {
            insn.on_execute(inline_add(board, 0, add));
        }
    });
    let first_and_syscall = 11 + 5 + 1;
    let loop_block = 5 * (N as u64 - 1);
    for run in 1..=2u64 {
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        assert_eq!(outer.get(0, 0), run * first_and_syscall, "run {run}");
        assert_eq!(inner.get(0, 0), run * 2 * loop_block, "run {run}");
    }
    assert_eq!(
        engine.stats().insns_executed,
        2 * (first_and_syscall + loop_block)
    );
}

#[test]
fn a_new_counter_board_on_every_reinstrumentation_stays_exact() {
    // 300 rounds, each counting into a board of its own: batched counts
    // must land on the board the round's blocks were planned with.
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let current: Arc<Mutex<Arc<Scoreboard>>> =
        Arc::new(Mutex::new(Arc::new(Scoreboard::new(1, 1))));
    let c = current.clone();
    install(&mut engine, move |_tb, plan| {
        let board = c.lock().unwrap().clone();
        for insn in plan.insns() {
            insn.on_execute(inline_add(&board, 0, 2));
        }
    });
    for round in 0..300 {
        let board = Arc::new(Scoreboard::new(1, 1));
        *current.lock().unwrap() = board.clone();
        engine.reinstrument();
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        assert_eq!(board.get(0, 0), 2 * loop_insns(10), "round {round}");
    }
    assert_eq!(engine.stats().tbs_translated, 3, "no flush needed");
}

/// Block-counter-like inline adds (on block entry, a different amount per
/// block) to `ENTRIES` slots, more than a run of tally blocks sums in
/// locals, and an add per instruction growing with its index to one more;
/// with `force_steps`, a never-true conditional callback makes every block
/// take the general path instead.
fn run_block_tallies(n: i32, force_steps: bool) -> (CpuExit, Vec<u64>, EngineStats) {
    const ENTRIES: usize = 7;
    let mut mem = machine(&loop_program(n));
    let mut engine = Engine::new(Toy);
    let board = Arc::new(Scoreboard::new(ENTRIES + 1, 1));
    let b = board.clone();
    let never = counter_cb(&Arc::new(AtomicU64::new(0)));
    install(&mut engine, move |tb, plan| {
        let insns = tb.insns().len() as u64;
        // Slot 0 counts blocks, slot 1 their instructions, slot k > 1
        // k times their instructions.
        plan.on_entry(inline_add(&b, 0, 1));
        for slot in 1..ENTRIES {
            plan.on_entry(inline_add(&b, slot, slot as u64 * insns));
        }
        for insn in plan.insns() {
            insn.on_execute(inline_add(&b, ENTRIES, insn.index() as u64 + 1));
            if force_steps {
                force_general_loop(&insn, &b, &never);
            }
        }
    });
    let mut cpu = cpu_at(CODE);
    let exit = engine.run(&mut cpu, &mut mem);
    let counts = (0..=ENTRIES).map(|slot| board.get(0, slot)).collect();
    (exit, counts, engine.stats())
}

#[test]
fn runs_of_tally_blocks_count_every_entry_exactly() {
    // 3000 iterations: runs reach their block limit and start again.
    const N: i32 = 3000;
    let (exit, fast, stats) = run_block_tallies(N, false);
    let (general_exit, general, _) = run_block_tallies(N, true);
    assert_eq!(exit, CpuExit::Syscall);
    assert_eq!(general_exit, CpuExit::Syscall);
    assert_eq!(fast, general);
    // The first block (set-up and the first iteration), the loop block
    // N - 1 times, the syscall block.
    let blocks = N as u64 + 1;
    assert_eq!(stats.blocks_executed, blocks);
    assert_eq!(fast[0], blocks);
    assert_eq!(fast[1], loop_insns(N as u64));
    for (slot, &count) in fast.iter().enumerate().take(7).skip(1) {
        assert_eq!(count, slot as u64 * loop_insns(N as u64), "slot {slot}");
    }
    // Per instruction: 1 + ... + 16 in the first block, 1 + ... + 5 in
    // the loop block, 1 for the syscall.
    assert_eq!(fast[7], 136 + 15 * (N as u64 - 1) + 1);
}

#[test]
fn a_tally_run_left_by_a_fault_counts_what_ran() {
    // The first block runs to the faulting load (index 2 of the second
    // block, which then counts its entry adds and instructions 0..=2).
    let code = [
        addi(1, 1, 1),
        bne(1, 0, 4),
        addi(1, 1, 1),
        addi(1, 1, 1),
        ld(2, 0, 0x40),
        syscall(),
    ];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let board = Arc::new(Scoreboard::new(2, 1));
    let b = board.clone();
    install(&mut engine, move |tb, plan| {
        plan.on_entry(inline_add(&b, 0, 100 * tb.insns().len() as u64));
        for insn in plan.insns() {
            insn.on_execute(inline_add(&b, 1, 1 << insn.index()));
        }
    });
    let mut cpu = cpu_at(CODE);
    assert!(matches!(engine.run(&mut cpu, &mut mem), CpuExit::Fault(_)));
    assert_eq!(engine.stats().insns_executed, 5);
    assert_eq!(board.get(0, 0), 100 * 2 + 100 * 4);
    assert_eq!(board.get(0, 1), (1 + 2) + (1 + 2 + 4));
}

#[test]
fn tally_runs_settle_before_a_callback_and_on_new_boards_after_a_reset() {
    // Every block but the syscall's counts itself and its instructions on
    // entry (tally blocks); the syscall's callback reads both. Each round
    // re-instruments with a board of its own: its counts land there, and
    // the previous round's board no longer changes.
    const N: i32 = 500;
    let mut mem = machine(&loop_program(N));
    let mut engine = Engine::new(Toy);
    let current = Arc::new(Mutex::new(Arc::new(Scoreboard::new(2, 1))));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, s) = (current.clone(), seen.clone());
    install(&mut engine, move |tb, plan| {
        let board = c.lock().unwrap().clone();
        if tb.insns().first().is_some_and(|x| x.raw == syscall()) {
            let (reader, seen) = (board.clone(), s.clone());
            let cb: InsnCallback = Arc::new(move |_ctx: &mut CallbackContext<'_>| {
                seen.lock()
                    .unwrap()
                    .push((reader.get(0, 0), reader.get(0, 1)));
            });
            if let Some(first) = plan.insn(0) {
                first.on_execute(Action::Callback(&cb));
            }
            return;
        }
        plan.on_entry(inline_add(&board, 0, 1));
        plan.on_entry(inline_add(&board, 1, tb.insns().len() as u64));
    });
    let mut previous: Option<Arc<Scoreboard>> = None;
    for round in 0..50 {
        let board = Arc::new(Scoreboard::new(2, 1));
        *current.lock().unwrap() = board.clone();
        engine.reinstrument();
        let mut cpu = cpu_at(CODE);
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        let expected = (N as u64, loop_insns(N as u64) - 1);
        assert_eq!(
            seen.lock().unwrap().last(),
            Some(&expected),
            "round {round}"
        );
        assert_eq!((board.get(0, 0), board.get(0, 1)), expected);
        if let Some(old) = &previous {
            assert_eq!((old.get(0, 0), old.get(0, 1)), expected, "round {round}");
        }
        previous = Some(board);
    }
    assert_eq!(engine.stats().tbs_translated, 3, "no flush needed");
}

/// Three callbacks on every instruction of `three_block_loop(1000)`, the
/// first asking for an exit before the loop's 61st load (in the middle of
/// a block); with `force_steps`, a never-true conditional callback after
/// them makes every block take the general loop. Returns every call as
/// (callback, pc), where the exit left the guest (pc, instructions run),
/// and the cpu and stats at the end.
#[allow(clippy::type_complexity)]
fn run_callback_list(force_steps: bool) -> (Vec<(u8, u64)>, (u64, u64), Cpu, EngineStats) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let loads = Arc::new(AtomicU64::new(0));
    let recorder = |name: u8| -> InsnCallback {
        let (calls, loads) = (calls.clone(), loads.clone());
        Arc::new(move |ctx: &mut CallbackContext<'_>| {
            calls.lock().unwrap().push((name, ctx.pc()));
            if name == 0 && ctx.pc() == CODE + 0x30 && loads.fetch_add(1, Relaxed) == 60 {
                ctx.request_exit();
            }
        })
    };
    let list = [recorder(0), recorder(1), recorder(2)];
    let never = counter_cb(&Arc::new(AtomicU64::new(0)));
    let board = Arc::new(Scoreboard::new(1, 1));
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        for insn in plan.insns() {
            for cb in &list {
                insn.on_execute(Action::Callback(cb));
            }
            if force_steps {
                force_general_loop(&insn, &board, &never);
            }
        }
    });
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    let exited = (cpu.pc, engine.stats().insns_executed);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let calls = std::mem::take(&mut *calls.lock().unwrap());
    (calls, exited, cpu, engine.stats())
}

/// Several callbacks on every instruction (several instruction-counting
/// plugins) run in their own loop (`ExecMode::CallList`): each instruction
/// calls them all, in order, before it executes, even after one of them
/// asked for an exit, which then stops the run after that instruction, as
/// the general loop does.
#[test]
fn a_list_of_callbacks_on_every_instruction_runs_as_in_the_general_loop() {
    let (plain_exits, plain_cpu, plain) = run_three_block_loop(|_| {});
    assert_eq!(plain_exits, [CpuExit::Syscall]);
    let (calls, exited, cpu, stats) = run_callback_list(false);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(stats.insns_executed, plain.insns_executed);
    assert_eq!(calls.len() as u64, 3 * plain.insns_executed);
    for (i, triple) in calls.chunks(3).enumerate() {
        let pc = triple[0].1;
        assert_eq!(triple, [(0, pc), (1, pc), (2, pc)], "instruction {i}");
    }
    // The exit came right after the 61st load (all three of its calls
    // made), in the middle of its block.
    let exit_at = 11 + 8 * 60 + 2;
    assert_eq!(exited, (CODE + 0x34, exit_at));
    assert_eq!(calls[3 * exit_at as usize - 1], (2, CODE + 0x30));
    let general = run_callback_list(true);
    assert_eq!(general.0, calls);
    assert_eq!(general.1, exited);
    assert_eq!(general.3.insns_executed, stats.insns_executed);
    assert_eq!(general.3.blocks_executed, stats.blocks_executed);
}

/// An instruction callback on every instruction and a memory callback on
/// every access of `three_block_loop(1000)`, logging each call as (0, pc,
/// 0) or (1, pc, address); the instruction callback asks for an exit
/// before the 61st run of the loop's first instruction without memory
/// access (in the middle of a block), the memory callback on the 777th
/// store.
/// With `force_steps`, a never-true conditional callback makes every block
/// take the general loop. Returns the log, where each exit left the guest
/// (pc, instructions run), and the cpu and stats at the end.
#[allow(clippy::type_complexity)]
fn run_insn_and_mem_callbacks(
    force_steps: bool,
    distinct: bool,
    ask_at: u64,
) -> (Vec<(u8, u64, u64)>, Vec<(u64, u64)>, Cpu, EngineStats) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (adds, stores) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (l, n) = (log.clone(), adds.clone());
    let insn_cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
        l.lock().unwrap().push((0, ctx.pc(), 0));
        if ctx.pc() == ask_at && n.fetch_add(1, Relaxed) == 60 {
            ctx.request_exit();
        }
    });
    let (l, n) = (log.clone(), stores.clone());
    let mem_cb: MemCallback =
        Arc::new(move |ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
            l.lock().unwrap().push((1, ctx.pc(), info.addr));
            if info.is_store && n.fetch_add(1, Relaxed) == 776 {
                ctx.request_exit();
            }
        });
    let never = counter_cb(&Arc::new(AtomicU64::new(0)));
    let board = Arc::new(Scoreboard::new(1, 1));
    let (mut engine, mut mem, mut cpu) = three_block_machine(move |_tb, plan| {
        for insn in plan.insns() {
            if distinct {
                // A closure of its own for each instruction (QEMU's
                // per-instruction userdata): the same calls, but no
                // callback is shared by every instruction.
                let shared = insn_cb.clone();
                let own: InsnCallback =
                    Arc::new(move |ctx: &mut CallbackContext<'_>| shared.call(ctx));
                insn.on_execute(Action::Callback(&own));
            } else {
                insn.on_execute(Action::Callback(&insn_cb));
            }
            insn.on_memory(MemFilter::All, MemAction::Callback(&mem_cb));
            if force_steps {
                force_general_loop(&insn, &board, &never);
            }
        }
    });
    let mut exits = Vec::new();
    while engine.run(&mut cpu, &mut mem) == CpuExit::ExitRequested {
        exits.push((cpu.pc, engine.stats().insns_executed));
    }
    let log = std::mem::take(&mut *log.lock().unwrap());
    (log, exits, cpu, engine.stats())
}

/// An instruction counter beside a memory watcher (the README's main job)
/// runs in the MemEach loop with the instruction callback added
/// (`ExecMode::CallEachWithMem`), through the blocks without memory
/// accesses too: every call in the same order as the general loop's, and
/// each exit asked for right after its instruction.
#[test]
fn an_instruction_callback_beside_a_memory_callback_runs_as_in_the_general_loop() {
    let (_, plain_cpu, plain) = run_three_block_loop(|_| {});
    let (log, exits, cpu, stats) = run_insn_and_mem_callbacks(false, false, CODE + 0x38);
    assert_eq!(cpu, plain_cpu);
    assert_eq!(stats.insns_executed, plain.insns_executed);
    let insn_calls = log.iter().filter(|e| e.0 == 0).count() as u64;
    assert_eq!(insn_calls, plain.insns_executed);
    assert_eq!(log.len() as u64 - insn_calls, 2 * 1000);
    // Exits: after the 61st iteration's 4th instruction, and after the
    // 777th store (the 7th instruction of the 777th iteration).
    assert_eq!(
        exits,
        [
            (CODE + 0x3c, 11 + 8 * 60 + 4),
            (CODE + 0x48, 11 + 8 * 776 + 7)
        ]
    );
    let general = run_insn_and_mem_callbacks(true, false, CODE + 0x38);
    assert_eq!(general.0, log);
    assert_eq!(general.1, exits);
    assert_eq!(general.3.insns_executed, stats.insns_executed);
}

/// A callback of its own on every instruction beside memory callbacks
/// (the `cache` plugin's shape) runs each instruction's sole callback
/// without walking its action list, in the general loop with memory
/// actions: the same calls, in the same order, and the same stopping
/// points as when that list is walked.
#[test]
fn distinct_instruction_callbacks_beside_memory_callbacks_run_as_when_listed() {
    // Asked at the loop head, which does not access memory, in the block
    // with the load: the request is the instruction callback's alone.
    let ask_at = CODE + 0x2c;
    let shared = run_insn_and_mem_callbacks(false, false, ask_at);
    let (log, exits, cpu, stats) = run_insn_and_mem_callbacks(false, true, ask_at);
    assert_eq!(
        exits,
        [
            (CODE + 0x30, 11 + 8 * 60 + 1),
            (CODE + 0x48, 11 + 8 * 776 + 7)
        ]
    );
    assert_eq!(log, shared.0);
    assert_eq!(exits, shared.1);
    assert_eq!(cpu, shared.2);
    assert_eq!(stats.insns_executed, shared.3.insns_executed);
    let listed = run_insn_and_mem_callbacks(true, true, ask_at);
    assert_eq!(listed.0, log);
    assert_eq!(listed.1, exits);
    assert_eq!(listed.3.insns_executed, stats.insns_executed);
}
