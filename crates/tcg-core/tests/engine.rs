//! Block cache, generations, invalidation and the vCPU loop, on a toy ISA.
mod common;
use common::*;
use tcgkit_tcg_core::*;

#[test]
fn loop_program_runs_and_caches_blocks() {
    let mut mem = machine(&loop_program(1000));
    let mut cpu = cpu_at(CODE);
    let mut engine = Engine::new(Toy);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.pc, CODE + 0x40);
    assert_eq!(cpu.x[1], 1000);
    assert_eq!(cpu.x[4], DATA);
    assert_eq!(mem.load(DATA + 8, 8), Ok(1000));
    let stats = engine.stats();
    // Blocks: prologue+first body (ends at bne), body, syscall.
    assert_eq!(stats.tbs_translated, 3);
    assert_eq!(stats.tbs_cached, 3);
    assert_eq!(stats.blocks_executed, 1001);
    assert_eq!(stats.insns_executed, loop_insns(1000));
    // The body block is found in the jump cache after its first lookup.
    assert_eq!(stats.index_hits, 0);
}

#[test]
fn blocks_are_reused_across_runs_and_retranslated_after_flush() {
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    engine.run(&mut cpu, &mut mem);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(
        engine.stats().tbs_translated,
        3,
        "second run hits the cache"
    );

    engine.flush();
    let s = engine.stats();
    assert_eq!(s.tbs_cached, 0);
    assert_eq!(s.flushes, 1);
    assert_eq!(
        s.live_generations, 1,
        "no vCPU is inside the old generation: freed at once"
    );
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(engine.stats().tbs_translated, 6);
    assert_eq!(cpu.x[1], 10);
}

#[test]
fn retired_generation_waits_for_every_vcpu_to_pass_a_quiescent_point() {
    let mut mem = machine(&loop_program(50));
    let mut engine = Engine::new(Toy);
    let mut a = engine.new_vcpu();
    let mut b = engine.new_vcpu();
    assert_eq!((a.index(), b.index()), (1, 2));
    let mut cpu_a = cpu_at(CODE);
    let mut cpu_b = cpu_at(CODE);
    // Both vCPUs execute in generation 0 and stop at the syscall.
    assert_eq!(
        engine.run_vcpu(&mut a, &mut cpu_a, &mut mem),
        CpuExit::Syscall
    );
    assert_eq!(
        engine.run_vcpu(&mut b, &mut cpu_b, &mut mem),
        CpuExit::Syscall
    );
    let before = engine.stats();
    assert!(before.current_bytes > 0);

    engine.flush();
    let parked = engine.stats();
    assert_eq!(
        parked.live_generations, 2,
        "a and b last announced generation 0"
    );
    assert!(parked.retired_bytes > 0);
    assert_eq!(parked.tbs_cached, 0);

    // a passes a quiescent point (it runs a block); b has not yet.
    cpu_a = cpu_at(CODE);
    engine.run_vcpu(&mut a, &mut cpu_a, &mut mem);
    assert_eq!(
        engine.stats().live_generations,
        2,
        "b may still be inside generation 0"
    );

    // b going offline (or running) releases the last reference.
    b.go_offline();
    cpu_a = cpu_at(CODE);
    engine.run_vcpu(&mut a, &mut cpu_a, &mut mem);
    let freed = engine.stats();
    assert_eq!(freed.live_generations, 1);
    assert_eq!(freed.retired_bytes, 0);

    // Dropping a context unregisters it as well.
    engine.flush();
    assert_eq!(
        engine.stats().live_generations,
        2,
        "a is still registered at the old generation"
    );
    drop(a);
    cpu_b = cpu_at(CODE);
    engine.run_vcpu(&mut b, &mut cpu_b, &mut mem);
    assert_eq!(engine.stats().live_generations, 1);
}

#[test]
fn range_invalidation_drops_only_overlapping_blocks() {
    // Two independent code pages: page 0 computes, page 1 holds a subroutine.
    let mut code = vec![addi(1, 1, 1), jmp(0x1000 - 4)];
    code.resize(0x400, 0);
    code[0x400 - 1] = 0; // padding is illegal, never reached
    code.extend([addi(2, 2, 5), syscall()]);
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(engine.stats().tbs_cached, 2);
    assert_eq!((cpu.x[1], cpu.x[2]), (1, 5));

    // Patch the subroutine; without invalidation the stale block would run.
    mem.write_initial(CODE + 0x1000, &addi(2, 2, 7).to_le_bytes())
        .unwrap();
    cpu.pc = CODE;
    engine.run(&mut cpu, &mut mem);
    assert_eq!(cpu.x[2], 10, "cached translation still used");

    engine.invalidate_range(CODE + 0x1000, 4);
    let s = engine.stats();
    assert_eq!(s.tbs_invalidated, 1);
    assert_eq!(s.tbs_cached, 1, "the block on the other page survives");
    cpu.pc = CODE;
    engine.run(&mut cpu, &mut mem);
    assert_eq!(cpu.x[2], 17, "retranslated from the patched code");
    assert_eq!(engine.stats().tbs_translated, 3);

    // A range touching no block is a no-op; a range covering all kills all.
    engine.invalidate_range(DATA, PAGE_SIZE);
    assert_eq!(engine.stats().tbs_cached, 2);
    engine.invalidate_range(0, u64::MAX);
    assert_eq!(engine.stats().tbs_cached, 0);
    engine.invalidate_range(CODE, 0);
}

#[test]
fn fence_i_flushes_and_resumes_after_the_instruction() {
    // Self-modifying: store a new instruction word over 0x18, fence.i, run it.
    let new_word = addi(7, 7, 42);
    let code = vec![
        addi(4, 0, 0x18),   // 0x00: r4 = 0x18
        addi(4, 4, 0x7fff), // 0x04
        addi(4, 4, 0x7fff), // 0x08
        addi(4, 4, 2),      // 0x0c: r4 = CODE + 0x18 (0x18 + 0x10000)
        sd(5, 4, 0),        // 0x10: store r5 (the new word, set by the test)
        fencei(),           // 0x14
        addi(7, 7, 1),      // 0x18: replaced by addi r7, r7, 42
        syscall(),          // 0x1c
    ];
    let mut mem = machine(&code);
    mem.protect(CODE, PAGE_SIZE, Perms::READ | Perms::WRITE | Perms::EXEC)
        .unwrap();
    let mut engine = Engine::new(Toy);
    // Translate the old code once so a stale block exists.
    let mut cpu = cpu_at(CODE + 0x18);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[7], 1);

    let mut cpu = cpu_at(CODE);
    cpu.x[5] = u64::from(new_word) | (u64::from(syscall()) << 32);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[7], 42, "the patched instruction ran");
    assert_eq!(cpu.pc, CODE + 0x1c);
    assert!(engine.stats().flushes >= 1);
}

#[test]
fn faults_leave_pc_at_the_faulting_instruction() {
    // Load from an unmapped address after two good instructions.
    let code = [addi(1, 0, 1), addi(2, 0, 0x100), ld(3, 2, 0), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    let exit = engine.run(&mut cpu, &mut mem);
    assert_eq!(
        exit,
        CpuExit::Fault(MemFault {
            addr: 0x100,
            access: AccessKind::Read,
            kind: MemFaultKind::Unmapped
        })
    );
    assert_eq!(cpu.pc, CODE + 8);
    assert_eq!(cpu.x[1], 1, "earlier instructions of the block completed");
    assert_eq!(engine.stats().insns_executed, 3);

    // A store to an unmapped page.
    let code = [addi(2, 0, 0), sb(1, 2, 0x10), syscall()];
    let mut mem = machine(&code);
    let mut cpu = cpu_at(CODE);
    let mut engine = Engine::new(Toy);
    let exit = engine.run(&mut cpu, &mut mem);
    assert_eq!(
        exit,
        CpuExit::Fault(MemFault {
            addr: 0x10,
            access: AccessKind::Write,
            kind: MemFaultKind::Unmapped
        })
    );
}

#[test]
fn protection_faults_and_execute_permission() {
    let code = [addi(1, 0, 1), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    // Store into the (read-only) code page.
    let mut cpu = cpu_at(CODE);
    cpu.x[2] = CODE;
    let store = [sb(1, 2, 0)];
    mem.map(0x30000, PAGE_SIZE, Perms::READ | Perms::EXEC)
        .unwrap();
    mem.write_initial(0x30000, &store[0].to_le_bytes()).unwrap();
    cpu.pc = 0x30000;
    assert_eq!(
        engine.run(&mut cpu, &mut mem),
        CpuExit::Fault(MemFault {
            addr: CODE,
            access: AccessKind::Write,
            kind: MemFaultKind::Protection
        })
    );
    // Executing the data page (rw-) is a fetch fault.
    cpu.pc = DATA;
    assert_eq!(
        engine.run(&mut cpu, &mut mem),
        CpuExit::Fault(MemFault {
            addr: DATA,
            access: AccessKind::Execute,
            kind: MemFaultKind::Protection
        })
    );
    assert_eq!(cpu.pc, DATA);
    // Executing nowhere.
    cpu.pc = 0x9990000;
    assert!(matches!(
        engine.run(&mut cpu, &mut mem),
        CpuExit::Fault(MemFault {
            kind: MemFaultKind::Unmapped,
            access: AccessKind::Execute,
            ..
        })
    ));
}

#[test]
fn illegal_instruction_mid_block_executes_the_prefix_first() {
    let code = [addi(1, 0, 3), addi(1, 1, 4), 0xff00_0000, syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    assert_eq!(
        engine.run(&mut cpu, &mut mem),
        CpuExit::IllegalInstruction { raw: 0xff00_0000 }
    );
    assert_eq!(cpu.x[1], 7);
    assert_eq!(cpu.pc, CODE + 8);
    // Breakpoints exit with the pc on the breakpoint. (A fresh engine: the
    // old one caches translations of the previous program at the same pc.)
    let mut engine = Engine::new(Toy);
    let mut mem = machine(&[addi(1, 0, 1), brk()]);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Breakpoint);
    assert_eq!(cpu.pc, CODE + 4);
}

#[test]
fn exit_requests_stop_at_a_block_boundary() {
    let mut mem = machine(&loop_program(100));
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    engine.request_exit();
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
    assert_eq!(cpu.pc, CODE, "nothing ran");
    assert_eq!(engine.stats().insns_executed, 0);
    // The request is consumed: the next run completes.
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    // From another thread, through a handle.
    let handle = engine.exit_handle();
    std::thread::spawn(move || handle.request_exit())
        .join()
        .unwrap();
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::ExitRequested);
}

#[test]
fn generation_cap_flushes_automatically() {
    let mut mem = machine(&loop_program(20));
    let mut engine = Engine::new(Toy);
    engine.set_max_tbs(2);
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x[1], 20);
    let s = engine.stats();
    assert!(s.flushes >= 1);
    assert!(s.tbs_cached <= 2);
}

#[test]
fn cached_block_reports_instructions() {
    let code = [addi(1, 0, 1), addi(2, 0, 2), syscall()];
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    engine.run(&mut cpu, &mut mem);
    let block = engine.cached_block(CODE, 0).expect("cached");
    assert_eq!(block.len(), 3);
    assert_eq!(
        block[2],
        InsnInfo {
            pc: CODE + 8,
            len: 4,
            raw: syscall()
        }
    );
    assert_eq!(block[0].bytes(), addi(1, 0, 1).to_le_bytes().to_vec());
    assert!(engine.cached_block(CODE + 4, 0).is_none());
}

#[test]
fn engine_and_handles_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send::<Engine<Toy>>();
    assert_send::<Vcpu>();
    assert_send::<GuestMemory>();
    assert_send_sync::<ExitHandle>();
    assert_send_sync::<FlushHandle>();
    assert_send_sync::<Scoreboard>();
}

#[test]
fn flush_handle_from_another_thread_takes_effect_at_the_next_block() {
    let mut mem = machine(&loop_program(10));
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    engine.run(&mut cpu, &mut mem);
    assert_eq!(engine.stats().tbs_cached, 3);
    let handle = engine.flush_handle();
    std::thread::spawn(move || handle.request_flush())
        .join()
        .unwrap();
    assert_eq!(
        engine.stats().flushes,
        0,
        "nothing happens until a safe point"
    );
    assert!(
        !Engine::new(Toy).flush_if_requested(),
        "another engine has no request"
    );
    let mut cpu = cpu_at(CODE);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let s = engine.stats();
    assert_eq!(s.flushes, 1);
    assert_eq!(
        s.tbs_translated, 6,
        "everything was retranslated after the flush"
    );
}

#[test]
fn repeated_invalidation_of_a_hot_page_keeps_the_right_blocks() {
    // Two blocks on the first code page, one on the next.
    let mut code = vec![addi(1, 1, 1), jmp(8), 0, addi(2, 2, 1), jmp(0x1000 - 16)];
    code.resize(0x400, 0);
    code.extend([addi(3, 3, 1), syscall()]);
    let mut mem = machine(&code);
    let mut engine = Engine::new(Toy);
    for round in 1..=50u64 {
        let mut cpu = cpu_at(CODE);
        cpu.x[1] = round;
        assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
        assert_eq!(cpu.x[1], round + 1);
        assert_eq!(engine.stats().tbs_cached, 3);
        // Kill only the block at CODE + 12 (the second one).
        engine.invalidate_range(CODE + 12, 1);
        assert_eq!(engine.stats().tbs_cached, 2);
        assert!(engine.cached_block(CODE, 0).is_some());
        assert!(engine.cached_block(CODE + 12, 0).is_none());
        assert!(engine.cached_block(CODE + 0x1000, 0).is_some());
    }
    let s = engine.stats();
    assert_eq!(s.tbs_invalidated, 50);
    assert_eq!(s.tbs_translated, 3 + 49);
}

#[test]
fn a_pending_flush_can_be_applied_outside_the_loop() {
    let mut mem = machine(&loop_program(3));
    let mut engine = Engine::new(Toy);
    let mut cpu = cpu_at(CODE);
    engine.run(&mut cpu, &mut mem);
    engine.flush_handle().request_flush();
    engine.request_exit();
    assert!(engine.flush_if_requested());
    assert!(!engine.flush_if_requested(), "the request was consumed");
    assert_eq!(engine.stats().flushes, 1);
    assert_eq!(engine.stats().tbs_cached, 0);
    let mut cpu = cpu_at(CODE);
    assert_eq!(
        engine.run(&mut cpu, &mut mem),
        CpuExit::ExitRequested,
        "the exit request stays"
    );
}
