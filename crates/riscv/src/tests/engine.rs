//! End to end: hand-assembled programs run by tcg-core's `Engine`.

use tcgkit_tcg_core::{CpuExit, Engine, Frontend, GuestMemory, MemFaultKind, Perms};

use super::enc::{self, csr, fp};
use super::{CODE, DATA};
use crate::{Cpu, Rv64};

const SP: u8 = 2;
const A0: u8 = 10;
const A1: u8 = 11;
const A2: u8 = 12;
const A7: u8 = 17;

/// Little-endian bytes of a mix of 32-bit words and 16-bit compressed ones.
enum W {
    L(u32),
    C(u16),
}

fn bytes(code: &[W]) -> Vec<u8> {
    code.iter()
        .flat_map(|w| match *w {
            W::L(x) => x.to_le_bytes().to_vec(),
            W::C(h) => h.to_le_bytes().to_vec(),
        })
        .collect()
}

fn setup(code: &[u8], code_perms: Perms) -> (Engine<Rv64>, Cpu, GuestMemory) {
    let mut mem = GuestMemory::new();
    mem.map(CODE, 0x1000, code_perms).unwrap();
    mem.write_initial(CODE, code).unwrap();
    mem.map(DATA, 0x4000, Perms::READ | Perms::WRITE).unwrap();
    let mut cpu = Cpu::new();
    cpu.set_pc(CODE);
    cpu.set_x(SP, DATA + 0x4000);
    (Engine::new(Rv64::new()), cpu, mem)
}

/// Runs to each syscall, lets `a7 == 93` end the run, and returns the exit
/// code plus the values passed in a0 to "write" syscalls (a7 == 64).
fn run_syscalls(
    engine: &mut Engine<Rv64>,
    cpu: &mut Cpu,
    mem: &mut GuestMemory,
) -> (u64, Vec<u64>) {
    let mut written = Vec::new();
    for _ in 0..100 {
        match engine.run(cpu, mem) {
            CpuExit::Syscall => match cpu.x(A7) {
                93 => return (cpu.x(A0), written),
                64 => {
                    written.push(cpu.x(A0));
                    cpu.set_x(A0, 0);
                    cpu.set_pc(cpu.pc() + 4);
                }
                n => panic!("unexpected syscall {n}"),
            },
            other => panic!("unexpected exit {other:?} at {:#x}", cpu.pc()),
        }
    }
    panic!("too many syscalls");
}

#[test]
fn counted_loop_with_compressed_code() {
    // a0 = sum(1..=1000) with c.addi/c.add/c.bnez, then exit(a0 & 0xff).
    let code = bytes(&[
        W::L(enc::addi(A1, 0, 1000)), // 0
        W::C(0x4501),                 // 4: c.li a0, 0
        W::C(0x952e),                 // 6: c.add a0, a1
        W::C(0x15fd),                 // 8: c.addi a1, -1
        W::C(0xfdf5),                 // 10: c.bnez a1, 6
        W::L(enc::addi(A7, 0, 93)),   // 12
        W::L(enc::ECALL),             // 16
    ]);
    let (mut engine, mut cpu, mut mem) = setup(&code, Perms::READ | Perms::EXEC);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x(A0), 500_500);
    assert_eq!(cpu.pc(), CODE + 16);
    let stats = engine.stats();
    // 2 setup + 3 * 1000 loop + 2 tail instructions, the ecall included.
    assert_eq!(stats.insns_executed, 2 + 3000 + 2);
    assert!(stats.tbs_translated <= 4, "{stats:?}");
}

#[test]
fn recursive_factorial_uses_the_stack() {
    // fact(n) = n <= 1 ? 1 : n * fact(n - 1), called for 20; then writes
    // the result via syscall 64 and exits 0.
    let code = [
        enc::addi(A0, 0, 20), // 0
        enc::jal(1, 24),      // 4: call fact (at 28)
        enc::addi(A7, 0, 64), // 8
        enc::ECALL,           // 12
        enc::addi(A0, 0, 0),  // 16
        enc::addi(A7, 0, 93), // 20
        enc::ECALL,           // 24
        // fact at 28:
        enc::addi(5, 0, 1),       // 28: t0 = 1
        enc::b(5, 5, A0, 40),     // 32: bge t0, a0, base (72)
        enc::addi(SP, SP, -16),   // 36
        enc::store(3, SP, 1, 8),  // 40: sd ra, 8(sp)
        enc::store(3, SP, A0, 0), // 44: sd a0, 0(sp)
        enc::addi(A0, A0, -1),    // 48
        enc::jal(1, -24),         // 52: call fact (28)
        enc::load(3, 6, SP, 0),   // 56: ld t1, 0(sp)
        enc::op(0, 1, A0, A0, 6), // 60: mul a0, a0, t1
        enc::load(3, 1, SP, 8),   // 64: ld ra, 8(sp)
        enc::addi(SP, SP, 16),    // 68
        enc::jalr(0, 1, 0),       // 72: ret (the base case n <= 1 returns n)
    ];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut engine, mut cpu, mut mem) = setup(&bytes, Perms::READ | Perms::EXEC);
    let (status, written) = run_syscalls(&mut engine, &mut cpu, &mut mem);
    assert_eq!(status, 0);
    assert_eq!(written, vec![2_432_902_008_176_640_000]);
    assert_eq!(cpu.x(SP), DATA + 0x4000);
}

#[test]
fn fence_i_makes_modified_code_visible() {
    // Loop twice over "a0 += 1": the first pass patches that instruction
    // into "a0 += 100" and executes fence.i; the second pass must see it.
    let patched = enc::addi(A0, A0, 100);
    let code = [
        enc::addi(A2, 0, 2),     // 0: two passes
        enc::addi(A0, A0, 1),    // 4: patched below
        enc::addi(A2, A2, -1),   // 8
        enc::b(0, A2, 0, 28),    // 12: done -> 40
        enc::store(2, A1, 6, 4), // 16: sw t1, 4(a1)
        enc::FENCE_I,            // 20
        enc::jal(0, -20),        // 24: back to 4
        enc::EBREAK,             // 28
        enc::EBREAK,             // 32
        enc::EBREAK,             // 36
        enc::ECALL,              // 40
    ];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut engine, mut cpu, mut mem) = setup(&bytes, Perms::READ | Perms::WRITE | Perms::EXEC);
    cpu.set_x(A1, CODE);
    cpu.set_x(6, u64::from(patched));
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    assert_eq!(cpu.x(A0), 101);
    assert!(engine.stats().flushes >= 1);
}

#[test]
fn exits_reach_the_embedder_with_the_pc_on_the_instruction() {
    // Illegal instruction after two good ones.
    let code = [enc::addi(A0, 0, 1), enc::addi(A0, A0, 1), 0xffff_ffff];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut engine, mut cpu, mut mem) = setup(&bytes, Perms::READ | Perms::EXEC);
    assert_eq!(
        engine.run(&mut cpu, &mut mem),
        CpuExit::IllegalInstruction { raw: 0xffff_ffff }
    );
    assert_eq!((cpu.pc(), cpu.x(A0)), (CODE + 8, 2));

    // A store fault.
    let code = [enc::lui(A1, 0x7000_0000), enc::store(3, A1, A0, 0)];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut engine, mut cpu, mut mem) = setup(&bytes, Perms::READ | Perms::EXEC);
    match engine.run(&mut cpu, &mut mem) {
        CpuExit::Fault(f) => assert_eq!((f.addr, f.kind), (0x7000_0000, MemFaultKind::Unmapped)),
        other => panic!("{other:?}"),
    }
    assert_eq!(cpu.pc(), CODE + 4);

    // Running off the end of the code page into unmapped memory.
    let (mut engine, mut cpu, mut mem) = setup(&[], Perms::READ | Perms::EXEC);
    cpu.set_pc(CODE + 0x1000);
    assert!(matches!(engine.run(&mut cpu, &mut mem), CpuExit::Fault(_)));

    // ebreak, then resume past it to an ecall.
    let code = [enc::EBREAK, enc::ECALL];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut engine, mut cpu, mut mem) = setup(&bytes, Perms::READ | Perms::EXEC);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Breakpoint);
    cpu.set_pc(cpu.pc() + 4);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
}

#[test]
fn floating_point_series() {
    // Sum 1/k for k = 1..=10 in double precision with fcvt.d.l / fdiv.d /
    // fadd.d, round to nearest, then convert 1000 * sum to an integer.
    let code = [
        enc::addi(A1, 0, 10),  // 0: k = 10
        fp(0x79, 0, 0, 0, 0),  // 4: fmv.d.x f0, x0 (sum = 0)
        enc::addi(5, 0, 1),    // 8
        fp(0x69, 7, 1, 5, 2),  // 12: fcvt.d.l f1, t0 (1.0)
        fp(0x69, 7, 2, A1, 2), // 16: loop: fcvt.d.l f2, k
        fp(0x0d, 7, 3, 1, 2),  // 20: fdiv.d f3, f1, f2
        fp(0x01, 7, 0, 0, 3),  // 24: fadd.d f0, f0, f3
        enc::addi(A1, A1, -1), // 28
        enc::b(1, A1, 0, -16), // 32: bnez k, loop
        enc::addi(6, 0, 1000), // 36
        fp(0x69, 7, 4, 6, 2),  // 40: fcvt.d.l f4, t1
        fp(0x09, 7, 0, 0, 4),  // 44: fmul.d f0, f0, f4
        fp(0x61, 1, A0, 0, 2), // 48: fcvt.l.d a0, f0, rtz
        csr(2, A2, 0, 0x001),  // 52: frflags a2
        enc::ECALL,            // 56
    ];
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut engine, mut cpu, mut mem) = setup(&bytes, Perms::READ | Perms::EXEC);
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    let expected: f64 = (1..=10).rev().fold(0.0, |s, k| s + 1.0 / f64::from(k));
    assert_eq!(cpu.f(0), (expected * 1000.0).to_bits());
    assert_eq!(cpu.x(A0), 2928);
    assert_eq!(cpu.x(A2), 1, "only inexact");
    assert_eq!(Rv64::read_register(&cpu, "fa0"), Some(cpu.f(10)));
}
