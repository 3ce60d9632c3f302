//! The engine-event hook and direct block chaining, on the toy ISA.
mod common;
use std::sync::{Arc, Mutex};

use common::*;
use tcgkit_tcg_core::*;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Translated {
        pc: u64,
        insns: u32,
        bytes: u32,
    },
    Flushed(usize),
    Invalidated {
        start: u64,
        len: u64,
        dropped: usize,
    },
}

/// A sink that appends every event to a shared log the test reads.
struct Recorder(Arc<Mutex<Vec<Event>>>);

impl EngineEvents for Recorder {
    fn block_translated(&mut self, pc: u64, insns: u32, bytes: u32) {
        self.push(Event::Translated { pc, insns, bytes });
    }
    fn flushed(&mut self, blocks_retired: usize) {
        self.push(Event::Flushed(blocks_retired));
    }
    fn range_invalidated(&mut self, start: u64, len: u64, blocks_dropped: usize) {
        self.push(Event::Invalidated {
            start,
            len,
            dropped: blocks_dropped,
        });
    }
}

impl Recorder {
    fn push(&self, event: Event) {
        self.0.lock().expect("log lock").push(event);
    }
}

fn recorded(engine: &mut Engine<Toy>) -> Arc<Mutex<Vec<Event>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let previous = engine.set_event_sink(Some(Box::new(Recorder(Arc::clone(&log)))));
    assert!(previous.is_none());
    log
}

fn take(log: &Mutex<Vec<Event>>) -> Vec<Event> {
    std::mem::take(&mut *log.lock().expect("log lock"))
}

#[test]
fn translations_flushes_and_invalidations_are_reported() {
    let mut mem = machine(&loop_program(100));
    let mut engine = Engine::new(Toy);
    let log = recorded(&mut engine);

    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    // Prologue plus first pass of the body (16 insns, up to the bne), the
    // body on its own (5 insns), the syscall (1 insn); nothing per execution.
    assert_eq!(
        take(&log),
        vec![
            Event::Translated {
                pc: CODE,
                insns: 16,
                bytes: 64
            },
            Event::Translated {
                pc: CODE + 0x2c,
                insns: 5,
                bytes: 20
            },
            Event::Translated {
                pc: CODE + 0x40,
                insns: 1,
                bytes: 4
            },
        ]
    );
    assert_eq!(engine.stats().blocks_executed, 101);

    // The body's first word lies in the first two blocks, not the third.
    engine.invalidate_range(CODE + 0x2c, 4);
    assert_eq!(
        take(&log),
        vec![Event::Invalidated {
            start: CODE + 0x2c,
            len: 4,
            dropped: 2
        }]
    );

    engine.flush();
    assert_eq!(take(&log), vec![Event::Flushed(1)]);
    engine.flush();
    assert_eq!(take(&log), vec![Event::Flushed(0)]);
}

#[test]
fn flushes_from_inside_the_loop_are_reported() {
    // fence.i flushes at a safe point and resumes after it.
    let program = vec![addi(1, 1, 1), fencei(), addi(1, 1, 1), syscall()];
    let mut mem = machine(&program);
    let mut engine = Engine::new(Toy);
    let log = recorded(&mut engine);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], 2);
    let events = take(&log);
    assert_eq!(
        events,
        vec![
            Event::Translated {
                pc: CODE,
                insns: 2,
                bytes: 8
            },
            Event::Flushed(1),
            Event::Translated {
                pc: CODE + 8,
                insns: 2,
                bytes: 8
            },
        ]
    );

    // A one-block cap flushes before each new translation.
    let mut mem = machine(&loop_program(3));
    let mut engine = Engine::new(Toy);
    engine.set_max_tbs(1);
    let log = recorded(&mut engine);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], 3);
    let events = take(&log);
    let flushes = events
        .iter()
        .filter(|e| matches!(e, Event::Flushed(1)))
        .count() as u64;
    let translations = events
        .iter()
        .filter(|e| matches!(e, Event::Translated { .. }))
        .count() as u64;
    assert_eq!(translations, engine.stats().tbs_translated);
    assert_eq!(flushes, translations - 1);
    assert_eq!(flushes, engine.stats().flushes);
}

#[test]
fn removing_the_sink_stops_the_events_and_returns_it() {
    let mut mem = machine(&loop_program(5));
    let mut engine = Engine::new(Toy);
    let log = recorded(&mut engine);
    assert!(engine.set_event_sink(None).is_some());
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    engine.flush();
    assert!(take(&log).is_empty());
    assert_eq!(engine.stats().tbs_translated, 3);
}

/// `A: addi r1; jmp +8` then `B: addi r2, imm; syscall` at +0xc. A chains
/// straight to B after the first pass; B is then patched and invalidated
/// while A stays cached with its chain slot still naming the old B.
#[test]
fn a_chain_into_an_invalidated_block_is_not_followed() {
    let program = vec![addi(1, 1, 1), jmp(8), brk(), addi(2, 2, 1), syscall()];
    let mut mem = machine(&program);
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    for _ in 0..3 {
        cpu.pc = CODE;
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    }
    assert_eq!((cpu.x[1], cpu.x[2]), (3, 3));
    assert_eq!(engine.stats().tbs_translated, 2);

    // Patch B's first instruction to add 5 and drop B only.
    mem.write_initial(CODE + 0xc, &addi(2, 2, 5).to_le_bytes())
        .expect("patch");
    engine.invalidate_range(CODE + 0xc, 4);
    assert_eq!(engine.stats().tbs_invalidated, 1);
    assert_eq!(engine.stats().tbs_cached, 1, "A is still cached");
    for _ in 0..2 {
        cpu.pc = CODE;
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    }
    assert_eq!((cpu.x[1], cpu.x[2]), (5, 13));
    assert_eq!(engine.stats().tbs_translated, 3, "only B was retranslated");
}

/// Chaining between runs of one loop: the exact block and instruction
/// counts are those of an unchained interpreter.
#[test]
fn chained_execution_counts_every_block_and_instruction() {
    let mut mem = machine(&loop_program(1000));
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], 1000);
    let stats = engine.stats();
    assert_eq!(stats.blocks_executed, 1001);
    assert_eq!(stats.insns_executed, loop_insns(1000));
    assert_eq!(stats.tbs_translated, 3);
}
