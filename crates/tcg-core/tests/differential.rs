//! The engine (cache, jump cache, flushes, invalidation, instrumentation)
//! must not change what a program computes: random toy programs run under
//! the engine and under a plain decode-and-execute reference interpreter.
mod common;
use common::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use proptest::prelude::*;
use tcgkit_tcg_core::*;

/// Generates a program that only branches forward (so it terminates).
fn program() -> impl Strategy<Value = Vec<u32>> {
    let reg = 1u32..8;
    let data_reg = prop::sample::select(vec![1u32, 2, 3, 5, 6, 7]);
    let insn = prop_oneof![
        4 => (data_reg.clone(), reg.clone(), -50i32..50).prop_map(|(rd, rs, imm)| addi(rd, rs, imm)),
        2 => (data_reg.clone(), 0i32..4088).prop_map(|(rd, off)| ld(rd, 4, off)),
        1 => (data_reg.clone(), 0i32..4092).prop_map(|(rd, off)| lw_signed(rd, 4, off)),
        1 => (data_reg.clone(), 0i32..4096).prop_map(|(rd, off)| lb(rd, 4, off)),
        2 => (reg.clone(), 0i32..4088).prop_map(|(src, off)| sd(src, 4, off)),
        1 => (reg.clone(), 0i32..4096).prop_map(|(src, off)| sb(src, 4, off)),
        1 => (data_reg.clone(), 0i32..4096).prop_map(|(rd, off)| ld(rd, 0, off)), // faults: page 0
        2 => (reg.clone(), reg.clone(), 1i32..6).prop_map(|(a, b, skip)| bne(a, b, 4 * skip)),
        1 => (1i32..6).prop_map(|skip| jmp(4 * skip)),
        1 => Just(fencei()),
        1 => Just(syscall()),
        1 => Just(brk()),
        1 => Just(0xee00_0000u32),
    ];
    prop::collection::vec(insn, 1..48).prop_map(|mut body| {
        // r4 = DATA: 0x20000 = 8 * 0x4000.
        let mut code = vec![addi(4, 0, 0x4000)];
        code.extend(std::iter::repeat_n(addi(4, 4, 0x4000), 7));
        code.append(&mut body);
        code.extend(std::iter::repeat_n(syscall(), 6)); // forward jumps land here
        code
    })
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    exit: CpuExit,
    cpu_pc: u64,
    regs: [u64; 16],
    data: Vec<u8>,
}

fn outcome(exit: CpuExit, cpu: &Cpu, mem: &mut GuestMemory) -> Outcome {
    let mut data = vec![0; PAGE_SIZE as usize];
    mem.read(DATA, &mut data).unwrap();
    Outcome {
        exit,
        cpu_pc: cpu.pc,
        regs: cpu.x,
        data,
    }
}

/// Decode and execute one instruction at a time, no cache at all.
fn reference(code: &[u32]) -> (Outcome, u64) {
    let mut mem = machine(code);
    let mut cpu = cpu_at(CODE);
    let toy = Toy;
    let mut count = 0;
    let exit = loop {
        let d = match toy.decode(&mut mem, cpu.pc) {
            Ok(d) => d,
            Err(DecodeError::Fault(f)) => break CpuExit::Fault(f),
            Err(DecodeError::Illegal { raw, .. }) => break CpuExit::IllegalInstruction { raw },
        };
        count += 1;
        let pc = cpu.pc;
        match Toy::execute(&mut cpu, &d.op, pc, &mut mem) {
            Flow::Next => cpu.pc += u64::from(d.len),
            Flow::Jump(target) => cpu.pc = target,
            Flow::Exit(CpuExit::FlushCode) => cpu.pc += u64::from(d.len),
            Flow::Exit(exit) => break exit,
        }
    };
    (outcome(exit, &cpu, &mut mem), count)
}

/// Requests a flush from an instruction callback every `every` instructions.
struct Resetter {
    every: u64,
    seen: Arc<AtomicU64>,
}

impl Instrumentation for Resetter {
    fn translate(&self, _tb: &TbView<'_>, plan: &mut TbPlan) {
        let (every, seen) = (self.every, self.seen.clone());
        let cb: InsnCallback = Arc::new(move |ctx: &mut CallbackContext<'_>| {
            if (seen.fetch_add(1, Relaxed) + 1) % every == 0 {
                ctx.request_flush();
            }
        });
        for insn in plan.insns() {
            insn.on_execute(Action::Callback(&cb));
        }
    }
}

fn engine_run(engine: &mut Engine<Toy>, code: &[u32]) -> Outcome {
    let mut mem = machine(code);
    let mut cpu = cpu_at(CODE);
    let exit = engine.run(&mut cpu, &mut mem);
    outcome(exit, &cpu, &mut mem)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_reference(code in program()) {
        let (want, count) = reference(&code);
        let mut engine = Engine::new(Toy);
        prop_assert_eq!(engine_run(&mut engine, &code), want);
        prop_assert_eq!(engine.stats().insns_executed, count);
        // Second run: everything comes from the cache.
        let (want, _) = reference(&code);
        prop_assert_eq!(engine_run(&mut engine, &code), want);
    }

    #[test]
    fn flushes_from_callbacks_do_not_change_results(code in program(), every in 1u64..6) {
        let (want, count) = reference(&code);
        let mut engine = Engine::new(Toy);
        let seen = Arc::new(AtomicU64::new(0));
        engine.set_instrumentation(Some(Arc::new(Resetter { every, seen: seen.clone() })));
        prop_assert_eq!(engine_run(&mut engine, &code), want);
        prop_assert_eq!(seen.load(Relaxed), count, "one callback per dispatched instruction");
        prop_assert_eq!(engine.stats().live_generations, 1);
    }

    #[test]
    fn invalidation_between_runs_does_not_change_results(
        code in program(),
        start in 0u64..256,
        len in 1u64..64,
    ) {
        let mut engine = Engine::new(Toy);
        let (want, _) = reference(&code);
        prop_assert_eq!(engine_run(&mut engine, &code), want);
        engine.invalidate_range(CODE + start, len);
        let (want, _) = reference(&code);
        prop_assert_eq!(engine_run(&mut engine, &code), want);
    }
}
