//! The A extension: LR/SC reservations and AMOs (single hart).

use tcgkit_tcg_core::{AccessKind, CpuExit, MemFaultKind};

use super::enc::{self, amo};
use super::{CountingMemory, DATA, Machine, exec};

const A0: u8 = 10;
const A1: u8 = 11;
const A2: u8 = 12;
const A3: u8 = 13;

const LR: u32 = 0x02;
const SC: u32 = 0x03;
const W: u32 = 2;
const D: u32 = 3;

fn mem_u64(m: &mut Machine, addr: u64) -> u64 {
    m.mem.load(addr, 8).unwrap()
}

#[test]
fn lr_sc_succeeds_once() {
    let mut m = exec(
        &[
            amo(LR, D, 2, A0, A1, 0),  // lr.d.aq a0, (a1)
            amo(SC, D, 1, A2, A1, A3), // sc.d.rl a2, a3, (a1) -> 0
            amo(SC, D, 0, 5, A1, A3),  // sc.d t0, a3, (a1) -> 1 (no reservation)
        ],
        &[(A1, DATA), (A3, 77)],
    );
    assert_eq!(m.x(A0), 0);
    assert_eq!(m.x(A2), 0);
    assert_eq!(m.x(5), 1);
    assert_eq!(mem_u64(&mut m, DATA), 77);
}

#[test]
fn sc_fails_without_matching_reservation() {
    // No LR at all: memory untouched.
    let mut m = exec(&[amo(SC, W, 0, A2, A1, A3)], &[(A1, DATA), (A3, 5)]);
    assert_eq!(m.x(A2), 1);
    assert_eq!(mem_u64(&mut m, DATA), 0);
    // LR at one address, SC at another.
    let mut m = exec(
        &[amo(LR, W, 0, A0, A1, 0), amo(SC, W, 0, A2, 5, A3)],
        &[(A1, DATA), (5, DATA + 8), (A3, 5)],
    );
    assert_eq!(m.x(A2), 1);
    assert_eq!(mem_u64(&mut m, DATA + 8), 0);
    // LR.W then SC.D: the reservation covers a different size.
    let m = exec(
        &[amo(LR, W, 0, A0, A1, 0), amo(SC, D, 0, A2, A1, A3)],
        &[(A1, DATA)],
    );
    assert_eq!(m.x(A2), 1);
    // The reserved value changed in between (compare-and-swap semantics).
    let mut m = exec(
        &[
            amo(LR, D, 0, A0, A1, 0),
            enc::store(3, A1, A3, 0),
            amo(SC, D, 0, A2, A1, 6),
        ],
        &[(A1, DATA), (A3, 9), (6, 1)],
    );
    assert_eq!(m.x(A2), 1);
    assert_eq!(mem_u64(&mut m, DATA), 9);
    // A misaligned SC without reservation simply fails (qemu-user does too).
    let m = exec(&[amo(SC, D, 0, A2, A1, A3)], &[(A1, DATA + 3)]);
    assert_eq!(m.x(A2), 1);
}

#[test]
fn lr_w_sign_extends() {
    let mut m = Machine::new(&[
        amo(LR, W, 0, A0, A1, 0),
        amo(SC, W, 0, A2, A1, A3),
        enc::ECALL,
    ]);
    m.mem.store(DATA, 4, 0x8000_0001).unwrap();
    m.cpu.set_x(A1, DATA);
    m.cpu.set_x(A3, 0x1_2345_6789);
    m.run_to_ecall();
    assert_eq!(m.x(A0), 0xffff_ffff_8000_0001);
    assert_eq!(m.x(A2), 0);
    assert_eq!(m.mem.load(DATA, 8).unwrap(), 0x2345_6789);
}

/// Runs one AMO on memory holding `old`; returns (rd, new memory value).
fn run_amo(funct5: u32, width: u32, old: u64, src: u64) -> (u64, u64) {
    let mut m = Machine::new(&[amo(funct5, width, 3, A0, A1, A2), enc::ECALL]);
    m.mem.store(DATA, 8, old).unwrap();
    m.cpu.set_x(A1, DATA);
    m.cpu.set_x(A2, src);
    m.run_to_ecall();
    (m.x(A0), m.mem.load(DATA, 8).unwrap())
}

#[test]
fn amo_doubleword_ops() {
    let neg = (-5i64) as u64;
    assert_eq!(run_amo(0x01, D, 1, 2), (1, 2)); // swap
    assert_eq!(run_amo(0x00, D, u64::MAX, 2), (u64::MAX, 1)); // add wraps
    assert_eq!(run_amo(0x04, D, 0b1100, 0b1010), (0b1100, 0b0110)); // xor
    assert_eq!(run_amo(0x0c, D, 0b1100, 0b1010), (0b1100, 0b1000)); // and
    assert_eq!(run_amo(0x08, D, 0b1100, 0b1010), (0b1100, 0b1110)); // or
    assert_eq!(run_amo(0x10, D, 3, neg), (3, neg)); // min signed
    assert_eq!(run_amo(0x14, D, 3, neg), (3, 3)); // max signed
    assert_eq!(run_amo(0x18, D, 3, neg), (3, 3)); // minu
    assert_eq!(run_amo(0x1c, D, 3, neg), (3, neg)); // maxu
}

#[test]
fn amo_word_ops_touch_32_bits_and_sign_extend() {
    // Upper word of memory must survive; rd gets the sign-extended old word.
    let old = 0xaaaa_aaaa_8000_0000;
    let (rd, new) = run_amo(0x00, W, old, 0xffff_ffff_ffff_ffff);
    assert_eq!(rd, 0xffff_ffff_8000_0000);
    assert_eq!(new, 0xaaaa_aaaa_7fff_ffff);
    // min/max compare as 32-bit values, ignoring upper register bits.
    assert_eq!(run_amo(0x10, W, 0x8000_0000, 0x1_0000_0001).1, 0x8000_0000); // min(-2^31, 1)
    assert_eq!(run_amo(0x14, W, 0x8000_0000, 0x1_0000_0001).1, 1);
    assert_eq!(run_amo(0x18, W, 0x8000_0000, 0x1_0000_0001).1, 1);
    assert_eq!(run_amo(0x1c, W, 0x8000_0000, 0x1_0000_0001).1, 0x8000_0000);
    assert_eq!(
        run_amo(0x01, W, 0x1234_5678_9abc_def0, 0x1111_2222_3333_4444).1,
        0x1234_5678_3333_4444
    );
}

#[test]
fn misaligned_atomics_fault_like_qemu_user() {
    for word in [
        amo(0x00, D, 0, A0, A1, A2),
        amo(LR, D, 0, A0, A1, 0),
        amo(0x01, W, 0, A0, A1, A2),
    ] {
        let mut m = Machine::new(&[word, enc::ECALL]);
        m.cpu.set_x(A1, DATA + 2);
        match m.run(2) {
            CpuExit::Fault(f) => assert_eq!((f.addr, f.kind), (DATA + 2, MemFaultKind::Misaligned)),
            other => panic!("{word:#x}: {other:?}"),
        }
        assert_eq!(m.x(A0), 0);
    }
}

#[test]
fn amo_on_read_only_memory_is_a_store_fault() {
    let mut m = Machine::new(&[amo(0x00, W, 0, A0, A1, A2), enc::ECALL]);
    m.cpu.set_x(A1, super::CODE);
    match m.run(2) {
        CpuExit::Fault(f) => assert_eq!(
            (f.access, f.kind),
            (AccessKind::Write, MemFaultKind::Protection)
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.x(A0), 0);
    let mut m = Machine::new(&[amo(0x00, W, 0, A0, A1, A2), enc::ECALL]);
    m.cpu.set_x(A1, 0x9000);
    match m.run(2) {
        CpuExit::Fault(f) => assert_eq!(
            (f.access, f.kind),
            (AccessKind::Write, MemFaultKind::Unmapped)
        ),
        other => panic!("{other:?}"),
    }
}

/// (loads, stores) seen through `MemAccess` by the last instruction of `code`.
fn accesses_of_last(code: &[u32], regs: &[(u8, u64)]) -> (u32, u32) {
    use tcgkit_tcg_core::Frontend;
    let mut m = super::Machine::new(code);
    for &(r, v) in regs {
        m.cpu.set_x(r, v);
    }
    for _ in 1..code.len() {
        m.step();
    }
    let pc = m.cpu.pc();
    let rv = crate::Rv64::new();
    let d = rv.decode(&mut m.mem, pc).unwrap();
    let mut counting = CountingMemory {
        mem: &mut m.mem,
        loads: 0,
        stores: 0,
    };
    crate::Rv64::execute(&mut m.cpu, &d.op, pc, &mut counting);
    (counting.loads, counting.stores)
}

#[test]
fn matching_sc_is_a_load_and_a_store_like_qemus_compare_and_swap() {
    // Success: LR then SC at the same address.
    let ok = accesses_of_last(
        &[amo(LR, D, 0, A0, A1, 0), amo(SC, D, 0, A2, A1, A3)],
        &[(A1, DATA), (A3, 9)],
    );
    assert_eq!(ok, (1, 1));
    // Matching reservation but the value changed: still a load and a store
    // (of the unchanged value), as qemu-user's cmpxchg expansion does.
    let changed = accesses_of_last(
        &[
            amo(LR, D, 0, A0, A1, 0),
            enc::store(3, A1, A3, 0), // sd a3, 0(a1): the value changes
            amo(SC, D, 0, A2, A1, A3),
        ],
        &[(A1, DATA), (A3, 9)],
    );
    assert_eq!(changed, (1, 1));
    // No matching reservation: no access at all.
    let none = accesses_of_last(&[amo(SC, D, 0, A2, A1, A3)], &[(A1, DATA)]);
    assert_eq!(none, (0, 0));
}
