//! RV64I and M: arithmetic edge cases, loads/stores, control transfer.

use tcgkit_tcg_core::{AccessKind, CpuExit, MemFaultKind};

use super::enc::{self, op, op32};
use super::{DATA, Machine, exec};

const A0: u8 = 10;
const A1: u8 = 11;
const A2: u8 = 12;
const MIN: u64 = i64::MIN as u64;

/// Runs one R-type instruction `a2 = a0 <op> a1`.
fn rr(word: u32, a: u64, b: u64) -> u64 {
    exec(&[word], &[(A0, a), (A1, b)]).x(A2)
}

#[test]
fn add_sub_wrap() {
    assert_eq!(rr(enc::add(A2, A0, A1), u64::MAX, 2), 1);
    assert_eq!(rr(enc::sub(A2, A0, A1), 0, 1), u64::MAX);
    assert_eq!(rr(enc::add(A2, A0, A1), MIN - 1, 1), MIN);
}

#[test]
fn comparisons() {
    let slt = |a, b| rr(op(2, 0, A2, A0, A1), a, b);
    let sltu = |a, b| rr(op(3, 0, A2, A0, A1), a, b);
    assert_eq!(slt(u64::MAX, 0), 1);
    assert_eq!(sltu(u64::MAX, 0), 0);
    assert_eq!(slt(0, u64::MAX), 0);
    assert_eq!(sltu(0, u64::MAX), 1);
    // sltiu compares against the sign-extended immediate: x < 2^64-1.
    let m = exec(&[enc::i(0x13, 3, A2, A0, -1)], &[(A0, 5)]);
    assert_eq!(m.x(A2), 1);
    let m = exec(&[enc::i(0x13, 2, A2, A0, -1)], &[(A0, 5)]);
    assert_eq!(m.x(A2), 0);
}

#[test]
fn shifts_mask_their_amount() {
    assert_eq!(rr(op(1, 0, A2, A0, A1), 1, 64 + 3), 8); // sll
    assert_eq!(rr(op(5, 0, A2, A0, A1), MIN, 63), 1); // srl
    assert_eq!(rr(op(5, 0x20, A2, A0, A1), MIN, 63), u64::MAX); // sra
    assert_eq!(
        exec(&[enc::srai(A2, A0, 4)], &[(A0, MIN)]).x(A2),
        0xf800_0000_0000_0000
    );
    assert_eq!(exec(&[enc::slli(A2, A0, 63)], &[(A0, 3)]).x(A2), MIN);
}

#[test]
fn word_ops_sign_extend() {
    // addw overflows 32 bits and sign-extends.
    assert_eq!(
        rr(op32(0, 0, A2, A0, A1), 0x7fff_ffff, 1),
        0xffff_ffff_8000_0000
    );
    // subw ignores the upper halves.
    assert_eq!(
        rr(op32(0, 0x20, A2, A0, A1), 0xdead_0000_0000_0000, 1),
        u64::MAX
    );
    // sllw/srlw/sraw use only 5 bits of the amount.
    assert_eq!(
        rr(op32(1, 0, A2, A0, A1), 1, 32 + 31),
        0xffff_ffff_8000_0000
    );
    assert_eq!(rr(op32(1, 0, A2, A0, A1), 1, 32), 1);
    assert_eq!(rr(op32(5, 0, A2, A0, A1), 0x8000_0000, 32 + 4), 0x0800_0000);
    assert_eq!(
        rr(op32(5, 0, A2, A0, A1), 0x8000_0000, 0),
        0xffff_ffff_8000_0000
    );
    assert_eq!(
        rr(op32(5, 0x20, A2, A0, A1), 0x8000_0000, 4),
        0xffff_ffff_f800_0000
    );
    assert_eq!(
        exec(&[enc::addiw(A2, A0, 0)], &[(A0, 0x1_ffff_ffff)]).x(A2),
        u64::MAX
    );
    assert_eq!(
        exec(&[enc::i(0x1b, 1, A2, A0, 31)], &[(A0, 1)]).x(A2),
        0xffff_ffff_8000_0000
    );
    assert_eq!(
        exec(&[enc::i(0x1b, 5, A2, A0, 0x400 | 31)], &[(A0, 0x8000_0000)]).x(A2),
        u64::MAX
    );
    assert_eq!(
        exec(&[enc::i(0x1b, 5, A2, A0, 31)], &[(A0, 0x8000_0000)]).x(A2),
        1
    );
}

#[test]
fn multiply_high_parts() {
    let mulh = |a, b| rr(op(1, 1, A2, A0, A1), a, b);
    let mulhsu = |a, b| rr(op(2, 1, A2, A0, A1), a, b);
    let mulhu = |a, b| rr(op(3, 1, A2, A0, A1), a, b);
    assert_eq!(rr(op(0, 1, A2, A0, A1), u64::MAX, u64::MAX), 1);
    assert_eq!(mulh(u64::MAX, u64::MAX), 0); // (-1)(-1) = 1
    assert_eq!(mulh(MIN, MIN), 1 << 62);
    assert_eq!(mulh(MIN, 1), u64::MAX);
    assert_eq!(mulhu(u64::MAX, u64::MAX), u64::MAX - 1);
    assert_eq!(mulhsu(u64::MAX, u64::MAX), u64::MAX); // -1 * (2^64-1)
    assert_eq!(mulhsu(2, u64::MAX), 1);
    assert_eq!(
        rr(op32(0, 1, A2, A0, A1), 0x1_0000_0001, 0x8000_0000),
        0xffff_ffff_8000_0000
    );
}

#[test]
fn division_edge_cases() {
    let div = |a, b| rr(op(4, 1, A2, A0, A1), a, b);
    let divu = |a, b| rr(op(5, 1, A2, A0, A1), a, b);
    let rem = |a, b| rr(op(6, 1, A2, A0, A1), a, b);
    let remu = |a, b| rr(op(7, 1, A2, A0, A1), a, b);
    assert_eq!(div(7, 0), u64::MAX);
    assert_eq!(divu(7, 0), u64::MAX);
    assert_eq!(rem(7, 0), 7);
    assert_eq!(remu(7, 0), 7);
    assert_eq!(div(MIN, u64::MAX), MIN);
    assert_eq!(rem(MIN, u64::MAX), 0);
    assert_eq!(div(-7i64 as u64, 2), -3i64 as u64);
    assert_eq!(rem(-7i64 as u64, 2), -1i64 as u64);
    assert_eq!(divu(u64::MAX, 2), u64::MAX / 2);

    let divw = |a, b| rr(op32(4, 1, A2, A0, A1), a, b);
    let divuw = |a, b| rr(op32(5, 1, A2, A0, A1), a, b);
    let remw = |a, b| rr(op32(6, 1, A2, A0, A1), a, b);
    let remuw = |a, b| rr(op32(7, 1, A2, A0, A1), a, b);
    assert_eq!(divw(5, 0), u64::MAX);
    assert_eq!(divuw(5, 0), u64::MAX);
    assert_eq!(remw(0xffff_ffff_8000_0000, 0), 0xffff_ffff_8000_0000);
    assert_eq!(remuw(0x1_8000_0000, 0), 0xffff_ffff_8000_0000);
    assert_eq!(divw(0x8000_0000, 0xffff_ffff), 0xffff_ffff_8000_0000);
    assert_eq!(remw(0x8000_0000, 0xffff_ffff), 0);
    // Upper halves are ignored: (2^32 + 6) / (2^32 + 3) as words is 2.
    assert_eq!(divuw(0x1_0000_0006, 0x1_0000_0003), 2);
    assert_eq!(divuw(0xffff_fffe, 1), 0xffff_ffff_ffff_fffe);
}

#[test]
fn upper_immediates() {
    let m = exec(
        &[enc::lui(A0, 0x8000_0000u32 as i32), enc::auipc(A1, 0x1000)],
        &[],
    );
    assert_eq!(m.x(A0), 0xffff_ffff_8000_0000);
    assert_eq!(m.x(A1), super::CODE + 4 + 0x1000);
    let m = exec(&[enc::auipc(A1, -0x1000)], &[]);
    assert_eq!(m.x(A1), super::CODE - 0x1000);
}

#[test]
fn writes_to_x0_are_dropped() {
    let m = exec(
        &[enc::addi(0, 0, 5), enc::lui(0, 0x1000), enc::add(A0, 0, 0)],
        &[(A0, 9)],
    );
    assert_eq!(m.x(0), 0);
    assert_eq!(m.x(A0), 0);
}

#[test]
fn loads_extend_and_stores_truncate() {
    let m = exec(
        &[
            enc::store(3, A0, A1, 0),  // sd
            enc::load(0, 5, A0, 0),    // lb
            enc::load(4, 6, A0, 0),    // lbu
            enc::load(1, 7, A0, 6),    // lh
            enc::load(5, 28, A0, 6),   // lhu
            enc::load(2, 29, A0, 4),   // lw
            enc::load(6, 30, A0, 4),   // lwu
            enc::load(3, 31, A0, 0),   // ld
            enc::store(0, A0, A1, 9),  // sb
            enc::store(1, A0, A1, 10), // sh (misaligned store is allowed)
            enc::load(3, A2, A0, 8),
        ],
        &[(A0, DATA), (A1, 0x8765_4321_fedc_ba80)],
    );
    assert_eq!(m.x(5), 0xffff_ffff_ffff_ff80);
    assert_eq!(m.x(6), 0x80);
    assert_eq!(m.x(7), 0xffff_ffff_ffff_8765);
    assert_eq!(m.x(28), 0x8765);
    assert_eq!(m.x(29), 0xffff_ffff_8765_4321);
    assert_eq!(m.x(30), 0x8765_4321);
    assert_eq!(m.x(31), 0x8765_4321_fedc_ba80);
    assert_eq!(m.x(A2), 0xba80_8000);
}

#[test]
fn a_load_into_x0_still_faults() {
    let mut m = Machine::new(&[enc::load(3, 0, A0, 0), enc::ECALL]);
    m.cpu.set_x(A0, 0x5000);
    match m.run(10) {
        CpuExit::Fault(f) => {
            assert_eq!(
                (f.addr, f.access, f.kind),
                (0x5000, AccessKind::Read, MemFaultKind::Unmapped)
            );
        }
        other => panic!("{other:?}"),
    }
    // The pc stays on the faulting instruction and x0 is untouched.
    assert_eq!(m.cpu.pc(), super::CODE);
    assert_eq!(m.x(0), 0);
    // A successful load into x0 leaves x0 zero.
    let m = exec(&[enc::load(3, 0, A0, 0)], &[(A0, DATA)]);
    assert_eq!(m.x(0), 0);
}

#[test]
fn store_to_read_only_memory_faults() {
    let mut m = Machine::new(&[enc::store(3, A0, A1, 0), enc::ECALL]);
    m.cpu.set_x(A0, super::CODE);
    match m.run(10) {
        CpuExit::Fault(f) => assert_eq!(
            (f.access, f.kind),
            (AccessKind::Write, MemFaultKind::Protection)
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn branches_and_jumps() {
    // a0 counts down from 5 to 0; a1 accumulates; then jal over a trap.
    let m = exec(
        &[
            enc::add(A1, A1, A0),  // 0
            enc::addi(A0, A0, -1), // 4
            enc::b(1, A0, 0, -8),  // 8: bne a0, x0, 0
            enc::jal(1, 8),        // 12: jal ra, 20
            enc::EBREAK,           // 16
            enc::b(4, A2, 0, 8),   // 20: blt a2(-1), x0, 28
            enc::EBREAK,           // 24
            enc::b(6, A2, 0, 8),   // 28: bltu a2, x0 -> not taken
            enc::b(5, 0, A2, 8),   // 32: bge x0, a2 -> taken to 40
            enc::EBREAK,           // 36
            enc::b(7, A2, 0, 8),   // 40: bgeu a2, x0 -> taken to 48
            enc::EBREAK,           // 44
            enc::b(0, 0, 0, 8),    // 48: beq -> 56
            enc::EBREAK,           // 52
        ],
        &[(A0, 5), (A2, u64::MAX)],
    );
    assert_eq!(m.x(A1), 15);
    assert_eq!(m.x(1), super::CODE + 16);
    assert_eq!(m.cpu.pc(), super::CODE + 56);
}

#[test]
fn jalr_clears_bit_zero_and_links_after_reading_rs1() {
    // jalr a0, 9(a0): target (a0 + 9) & !1, link into the same register.
    let mut m = Machine::new(&[enc::jalr(A0, A0, 9), enc::EBREAK, enc::EBREAK, enc::ECALL]);
    m.cpu.set_x(A0, super::CODE + 3);
    assert_eq!(m.run(10), CpuExit::Syscall);
    assert_eq!(m.cpu.pc(), super::CODE + 12);
    assert_eq!(m.x(A0), super::CODE + 4);
}

#[test]
fn system_exits() {
    let mut m = Machine::new(&[enc::EBREAK]);
    assert_eq!(m.run(1), CpuExit::Breakpoint);
    let mut m = Machine::new(&[enc::FENCE_I]);
    assert_eq!(m.run(1), CpuExit::FlushCode);
    // fence (any fields) is a no-op.
    let m = exec(&[0x0ff0_000f, 0x8330_000f, enc::addi(A0, 0, 1)], &[]);
    assert_eq!(m.x(A0), 1);
}
