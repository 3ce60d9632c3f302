//! F and D: NaN-boxing, bit moves, rounding-mode resolution and flag
//! accumulation. The arithmetic itself is tested in `fpu`.

use super::enc::{self, csr, fma, fp};
use super::{DATA, Machine};

const A0: u8 = 10;
const A1: u8 = 11;
const BOX: u64 = 0xffff_ffff_0000_0000;
const NX: u64 = 0x01;
const DZ: u64 = 0x08;
const NV: u64 = 0x10;

fn s(v: f32) -> u64 {
    BOX | u64::from(v.to_bits())
}

fn d(v: f64) -> u64 {
    v.to_bits()
}

/// Runs `code` with float registers preset; returns the machine.
fn fexec(code: &[u32], fregs: &[(u8, u64)], xregs: &[(u8, u64)]) -> Machine {
    let mut words = code.to_vec();
    words.push(enc::ECALL);
    let mut m = Machine::new(&words);
    for &(r, v) in fregs {
        m.cpu.set_f(r, v);
    }
    for &(r, v) in xregs {
        m.cpu.set_x(r, v);
    }
    m.run_to_ecall();
    m
}

fn fflags(m: &Machine) -> u64 {
    m.cpu.fcsr() & 0x1f
}

#[test]
fn loads_box_and_stores_move_raw_bits() {
    let mut m = Machine::new(&[
        enc::flw(1, A0, 0),
        enc::fsw(A0, 2, 8), // f2 is not boxed: its low half is stored anyway
        enc::fld(3, A0, 8),
        enc::fsd(A0, 3, 16),
        enc::ECALL,
    ]);
    m.mem.store(DATA, 4, 0x3f80_0000).unwrap();
    m.cpu.set_x(A0, DATA);
    m.cpu.set_f(2, 0x1234_5678_9abc_def0);
    m.run_to_ecall();
    assert_eq!(m.cpu.f(1), s(1.0));
    assert_eq!(m.cpu.f(3), 0x9abc_def0);
    assert_eq!(m.mem.load(DATA + 16, 8).unwrap(), 0x9abc_def0);
}

#[test]
fn moves_between_register_files() {
    let m = fexec(
        &[
            fp(0x70, 0, A0, 1, 0), // fmv.x.w a0, f1 (sign-extends)
            fp(0x70, 0, A1, 2, 0), // fmv.x.w a1, f2: raw bits, no box check
            fp(0x78, 0, 3, A0, 0), // fmv.w.x f3, a0 (boxes low 32 bits)
            fp(0x71, 0, 5, 4, 0),  // fmv.x.d t0, f4
            fp(0x79, 0, 6, 5, 0),  // fmv.d.x f6, t0
        ],
        &[(1, s(-0.0)), (2, 0x0000_0001_7fff_ffff), (4, d(-2.5))],
        &[],
    );
    assert_eq!(m.x(A0), 0xffff_ffff_8000_0000);
    assert_eq!(m.x(A1), 0x7fff_ffff);
    assert_eq!(m.cpu.f(3), s(-0.0));
    assert_eq!(m.x(5), d(-2.5));
    assert_eq!(m.cpu.f(6), d(-2.5));
    assert_eq!(fflags(&m), 0);
}

#[test]
fn unboxed_singles_read_as_canonical_nan() {
    let m = fexec(
        &[
            fp(0x00, 0, 3, 1, 2),  // fadd.s f3, f1, f2
            fp(0x10, 1, 4, 1, 2),  // fsgnjn.s f4, f1(unboxed), f2
            fp(0x70, 1, A0, 1, 0), // fclass.s a0, f1
            fp(0x10, 0, 5, 2, 2),  // fsgnj.s f5, f2, f2 (properly boxed)
        ],
        &[(1, 0x0000_0000_3f80_0000), (2, s(1.0))],
        &[],
    );
    assert_eq!(m.cpu.f(3), BOX | 0x7fc0_0000);
    assert_eq!(m.cpu.f(4), BOX | 0xffc0_0000);
    assert_eq!(m.x(A0), 1 << 9); // quiet NaN
    assert_eq!(m.cpu.f(5), s(1.0));
    assert_eq!(fflags(&m), 0);
}

#[test]
fn sign_injection_double() {
    let m = fexec(
        &[
            fp(0x11, 0, 3, 1, 2),
            fp(0x11, 1, 4, 1, 2),
            fp(0x11, 2, 5, 2, 2),
        ],
        &[(1, d(1.5)), (2, d(-3.0))],
        &[],
    );
    assert_eq!(m.cpu.f(3), d(-1.5));
    assert_eq!(m.cpu.f(4), d(1.5));
    assert_eq!(m.cpu.f(5), d(3.0)); // fabs via fsgnjx
}

#[test]
fn arithmetic_and_accumulated_flags() {
    let m = fexec(
        &[
            fp(0x00, 7, 3, 1, 2),  // fadd.s f3 = 1 + 2
            fp(0x0d, 7, 4, 5, 6),  // fdiv.d f4 = 1 / 0 -> inf, DZ
            fp(0x0d, 7, 7, 5, 8),  // fdiv.d f7 = 1 / 3 -> NX (accumulates)
            fp(0x2d, 0, 9, 10, 0), // fsqrt.d f9 = sqrt(2)
        ],
        &[
            (1, s(1.0)),
            (2, s(2.0)),
            (5, d(1.0)),
            (6, d(0.0)),
            (8, d(3.0)),
            (10, d(2.0)),
        ],
        &[],
    );
    assert_eq!(m.cpu.f(3), s(3.0));
    assert_eq!(m.cpu.f(4), d(f64::INFINITY));
    assert_eq!(m.cpu.f(7), d(1.0 / 3.0));
    assert_eq!(m.cpu.f(9), d(2f64.sqrt()));
    assert_eq!(fflags(&m), DZ | NX);
}

#[test]
fn fused_multiply_add_forms() {
    let regs = [(1, d(2.0)), (2, d(3.0)), (3, d(1.0))];
    let m = fexec(
        &[
            fma(0x43, 1, 7, 10, 1, 2, 3),    // fmadd.d
            fma(0x47, 1, 7, 11, 1, 2, 3),    // fmsub.d
            fma(0x4b, 1, 7, 12, 1, 2, 3),    // fnmsub.d
            fma(0x4f, 1, 7, 13, 1, 2, 3),    // fnmadd.d
            fma(0x43, 0, 0, 14, 15, 16, 17), // fmadd.s
        ],
        &[
            regs[0],
            regs[1],
            regs[2],
            (15, s(2.0)),
            (16, s(3.0)),
            (17, s(1.0)),
        ],
        &[],
    );
    assert_eq!(m.cpu.f(10), d(7.0));
    assert_eq!(m.cpu.f(11), d(5.0));
    assert_eq!(m.cpu.f(12), d(-5.0));
    assert_eq!(m.cpu.f(13), d(-7.0));
    assert_eq!(m.cpu.f(14), s(7.0));
}

#[test]
fn comparisons_write_integers_and_flag_nans() {
    let snan = d(f64::from_bits(0x7ff0_0000_0000_0001));
    let m = fexec(
        &[
            fp(0x51, 2, A0, 1, 2), // feq.d a0 = (1 == 2)
            fp(0x51, 1, A1, 1, 2), // flt.d a1 = (1 < 2)
            fp(0x51, 0, 5, 2, 2),  // fle.d t0
            fp(0x51, 2, 0, 3, 1),  // feq.d x0, sNaN, 1.0: NV even though rd = x0
        ],
        &[(1, d(1.0)), (2, d(2.0)), (3, snan)],
        &[],
    );
    assert_eq!((m.x(A0), m.x(A1), m.x(5), m.x(0)), (0, 1, 1, 0));
    assert_eq!(fflags(&m), NV);
    // flt with a quiet NaN signals; feq does not.
    let m = fexec(
        &[fp(0x51, 2, A0, 1, 2)],
        &[(1, d(f64::NAN)), (2, d(1.0))],
        &[],
    );
    assert_eq!(fflags(&m), 0);
    let m = fexec(
        &[fp(0x51, 1, A0, 1, 2)],
        &[(1, d(f64::NAN)), (2, d(1.0))],
        &[],
    );
    assert_eq!(fflags(&m), NV);
}

#[test]
fn min_max_and_classify() {
    let m = fexec(
        &[
            fp(0x15, 0, 3, 1, 2),  // fmin.d(-0, +0)
            fp(0x15, 1, 4, 1, 2),  // fmax.d
            fp(0x71, 1, A0, 5, 0), // fclass.d -inf
            fp(0x14, 0, 6, 7, 8),  // fmin.s(NaN, 2) = 2
        ],
        &[
            (1, d(-0.0)),
            (2, d(0.0)),
            (5, d(f64::NEG_INFINITY)),
            (7, s(f32::NAN)),
            (8, s(2.0)),
        ],
        &[],
    );
    assert_eq!(m.cpu.f(3), d(-0.0));
    assert_eq!(m.cpu.f(4), d(0.0));
    assert_eq!(m.x(A0), 1);
    assert_eq!(m.cpu.f(6), s(2.0));
}

/// fcvt.<int>.<fp> with funct7 `f7`, integer kind `rs2` and rounding `rm`.
fn to_int(f7: u32, rs2: u8, rm: u32, src: u64) -> (u64, u64) {
    let m = fexec(&[fp(f7, rm, A0, 1, rs2)], &[(1, src)], &[]);
    (m.x(A0), fflags(&m))
}

#[test]
fn conversions_to_integers() {
    // fcvt.w.s saturates with NV; fcvt.wu.s results are sign-extended.
    assert_eq!(to_int(0x60, 0, 0, s(3e9)), (0x7fff_ffff, NV));
    assert_eq!(to_int(0x60, 1, 0, s(3e9)), (0xffff_ffff_b2d0_5e00, 0));
    assert_eq!(to_int(0x60, 0, 0, s(f32::NAN)), (0x7fff_ffff, NV));
    assert_eq!(to_int(0x60, 0, 0, s(-3e9)), (0xffff_ffff_8000_0000, NV));
    assert_eq!(to_int(0x60, 1, 0, s(-1.0)), (0, NV));
    assert_eq!(to_int(0x60, 3, 0, s(-1.0)), (0, NV));
    // Static rounding modes on 2.5 / -2.5.
    assert_eq!(to_int(0x61, 0, 0, d(2.5)), (2, NX)); // rne
    assert_eq!(to_int(0x61, 0, 1, d(2.5)), (2, NX)); // rtz
    assert_eq!(to_int(0x61, 0, 2, d(-2.5)), ((-3i64) as u64, NX)); // rdn
    assert_eq!(to_int(0x61, 0, 3, d(2.5)), (3, NX)); // rup
    assert_eq!(to_int(0x61, 0, 4, d(2.5)), (3, NX)); // rmm
    assert_eq!(to_int(0x61, 2, 0, d(-4.0)), ((-4i64) as u64, 0)); // fcvt.l.d exact
    assert_eq!(to_int(0x61, 3, 0, d(1.8446744073709552e19)), (u64::MAX, NV));
    assert_eq!(to_int(0x61, 1, 1, d(4294967295.9)), (u64::MAX, NX)); // wu: 0xffffffff sign-extended
}

#[test]
fn dynamic_rounding_uses_frm() {
    for (frm, expected) in [(0, 2), (1, 2), (2, 2), (3, 3), (4, 3)] {
        let m = fexec(
            &[csr(5, 0, frm, 0x002), fp(0x61, 7, A0, 1, 0)],
            &[(1, d(2.5))],
            &[],
        );
        assert_eq!(m.x(A0), expected, "frm {frm}");
    }
    let m = fexec(
        &[csr(5, 0, 2, 0x002), fp(0x61, 7, A0, 1, 0)],
        &[(1, d(-2.1))],
        &[],
    );
    assert_eq!(m.x(A0), (-3i64) as u64);
}

#[test]
fn conversions_from_integers_and_between_formats() {
    let m = fexec(
        &[
            fp(0x68, 7, 2, A0, 0), // fcvt.s.w f2, a0 (uses low 32 bits)
            fp(0x69, 7, 3, A1, 3), // fcvt.d.lu f3, a1
            fp(0x68, 7, 4, A1, 2), // fcvt.s.l f4, a1 (-1)
            fp(0x69, 7, 5, A0, 1), // fcvt.d.wu f5, a0
        ],
        &[],
        &[(A0, 0x1_ffff_fffe), (A1, u64::MAX)],
    );
    assert_eq!(m.cpu.f(2), s(-2.0));
    assert_eq!(m.cpu.f(3), d(1.8446744073709552e19));
    assert_eq!(m.cpu.f(4), s(-1.0));
    assert_eq!(m.cpu.f(5), d(4294967294.0));
    assert_eq!(fflags(&m), NX); // from u64::MAX to double

    let m = fexec(
        &[fp(0x20, 0, 2, 1, 1), fp(0x21, 0, 3, 2, 0)], // fcvt.s.d, fcvt.d.s
        &[(1, d(0.1))],
        &[],
    );
    assert_eq!(m.cpu.f(2), s(0.1f32));
    assert_eq!(m.cpu.f(3), d(f64::from(0.1f32)));
    assert_eq!(fflags(&m), NX);
}
