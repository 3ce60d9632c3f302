//! Zicsr: fflags, frm, fcsr and the read-only counters.

use tcgkit_tcg_core::CpuExit;

use super::enc::{self, csr};
use super::{Machine, exec};

const A0: u8 = 10;
const A1: u8 = 11;
const A2: u8 = 12;
const FFLAGS: u32 = 0x001;
const FRM: u32 = 0x002;
const FCSR: u32 = 0x003;

#[test]
fn fcsr_fields_alias() {
    let m = exec(
        &[
            csr(1, A0, A1, FCSR),     // csrrw a0, fcsr, a1 (0x1ff -> 0xff kept)
            csr(2, A2, 0, FFLAGS),    // csrr a2, fflags
            csr(2, 5, 0, FRM),        // csrr t0, frm
            csr(7, 6, 0x03, FFLAGS),  // csrrci t1, fflags, 3
            csr(2, 7, 0, FCSR),       // csrr t2, fcsr
            csr(5, 28, 2, FRM),       // csrrwi t3, frm, 2
            csr(6, 29, 0x14, FFLAGS), // csrrsi t4, fflags, 0x14
            csr(2, 30, 0, FCSR),
        ],
        &[(A0, 99), (A1, 0x1ff)],
    );
    assert_eq!(m.x(A0), 0); // old fcsr
    assert_eq!(m.x(A2), 0x1f);
    assert_eq!(m.x(5), 7);
    assert_eq!(m.x(6), 0x1f);
    assert_eq!(m.x(7), 0xfc);
    assert_eq!(m.x(28), 7);
    assert_eq!(m.x(29), 0x1c);
    assert_eq!(m.x(30), (2 << 5) | 0x1c);
}

#[test]
fn register_forms_and_x0_sources() {
    let m = exec(
        &[
            csr(1, 0, A0, FCSR),   // fcsr = 0x42
            csr(2, A1, 0, FCSR),   // csrrs with x0 only reads
            csr(3, 0, A2, FFLAGS), // clear bit 1
            csr(2, 5, 0, FCSR),
            csr(2, 6, A0, FRM), // csrrs t1, frm, a0: old frm, frm |= 0x42 & 7
            csr(2, 7, 0, FCSR),
        ],
        &[(A0, 0x42), (A2, 2)],
    );
    assert_eq!(m.x(A1), 0x42);
    assert_eq!(m.x(5), 0x40);
    assert_eq!(m.x(6), 2);
    assert_eq!(m.cpu.fcsr(), 0x40);
    assert_eq!(m.x(7), 0x40);
}

#[test]
fn counters_are_monotonic_and_read_only() {
    let m = exec(
        &[
            csr(2, A0, 0, 0xc00),
            csr(2, A1, 0, 0xc01),
            csr(2, A2, 0, 0xc02),
            csr(6, 5, 0, 0xc00),
        ],
        &[],
    );
    assert!(m.x(A0) <= m.x(A1) && m.x(A1) <= m.x(A2) && m.x(A2) <= m.x(5));
    // Writing them is an illegal instruction at decode time.
    let rv = crate::Rv64::new();
    let mut machine = Machine::new(&[csr(1, A0, A1, 0xc00)]);
    use tcgkit_tcg_core::{DecodeError, Frontend};
    assert!(matches!(
        rv.decode(&mut machine.mem, super::CODE),
        Err(DecodeError::Illegal { .. })
    ));
}

#[test]
fn invalid_dynamic_rounding_mode_is_illegal_at_execution() {
    // frm = 5 (reserved), then fadd.s with rm = dyn.
    let fadd_dyn = enc::fp(0x00, 7, 1, 2, 3);
    let mut m = Machine::new(&[csr(5, 0, 5, FRM), fadd_dyn, enc::ECALL]);
    m.cpu.set_f(1, 0x1234);
    assert_eq!(m.run(10), CpuExit::IllegalInstruction { raw: fadd_dyn });
    assert_eq!(m.cpu.pc(), super::CODE + 4);
    assert_eq!(m.cpu.f(1), 0x1234, "destination untouched");
    // A static mode still works with a bad frm.
    let m = exec(&[csr(5, 0, 7, FRM), enc::fp(0x00, 0, 1, 2, 3)], &[]);
    assert_eq!(
        m.cpu.f(1),
        0xffff_ffff_7fc0_0000,
        "unboxed zero inputs read as NaN"
    );
}
