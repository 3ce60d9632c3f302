//! Differential tests against an independent oracle.
//!
//! The oracle is `rustc_apfloat` (a port of LLVM's APFloat), which implements
//! IEEE 754 arithmetic with all five rounding directions and status flags.
//! Where the RISC-V rules differ from APFloat's choices the expected value is
//! adjusted here, explicitly:
//!
//! * NaN results: RISC-V always returns the canonical NaN, APFloat propagates
//!   payloads, so any NaN from the oracle is mapped to the canonical NaN.
//! * Tininess: APFloat raises underflow when the *delivered* result is
//!   subnormal or zero; RISC-V detects tininess after rounding with an
//!   unbounded exponent. The expected UF flag is therefore recomputed by
//!   running the same operation in a format with the same precision and a
//!   much wider exponent range (so rounding there is rounding with an
//!   unbounded exponent) and checking the magnitude against the smallest
//!   normal number. As a check on that reasoning, the two conventions must
//!   agree on every result except ±(smallest normal number).
//! * Float to integer: APFloat's saturation differs for NaN, so the oracle
//!   rounds to an integral float with APFloat and applies the RISC-V table.
//! * Square root: APFloat has none. The oracle takes the host's correctly
//!   rounded square root (round to nearest even) and corrects it for the
//!   other modes by comparing exact squares computed in binary128.

use core::cmp::Ordering;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use rustc_apfloat::ieee::{Double, IeeeFloat, Quad, Semantics, Single};
use rustc_apfloat::{Float, FloatConvert, Round, Status, StatusAnd};

use super::*;

/// binary32's 24-bit precision with a 12-bit exponent field.
struct WideSingleS;
impl Semantics for WideSingleS {
    const BITS: usize = 36;
    const EXP_BITS: usize = 12;
}
type WideSingle = IeeeFloat<WideSingleS>;

/// binary64's 53-bit precision with a 15-bit exponent field.
struct WideDoubleS;
impl Semantics for WideDoubleS {
    const BITS: usize = 68;
    const EXP_BITS: usize = 15;
}
type WideDouble = IeeeFloat<WideDoubleS>;

const MODES: [RoundingMode; 5] = [
    RoundingMode::NearestEven,
    RoundingMode::TowardZero,
    RoundingMode::Down,
    RoundingMode::Up,
    RoundingMode::NearestMaxMagnitude,
];

fn to_round(rm: RoundingMode) -> Round {
    match rm {
        RoundingMode::NearestEven => Round::NearestTiesToEven,
        RoundingMode::TowardZero => Round::TowardZero,
        RoundingMode::Down => Round::TowardNegative,
        RoundingMode::Up => Round::TowardPositive,
        RoundingMode::NearestMaxMagnitude => Round::NearestTiesToAway,
    }
}

/// Maps APFloat status bits to fflags, leaving out underflow.
fn flags_without_underflow(status: Status) -> Flags {
    let mut flags = Flags::default();
    for (bit, flag) in [
        (Status::INVALID_OP, Flags::INVALID),
        (Status::DIV_BY_ZERO, Flags::DIVIDE_BY_ZERO),
        (Status::OVERFLOW, Flags::OVERFLOW),
        (Status::INEXACT, Flags::INEXACT),
    ] {
        if status.contains(bit) {
            flags |= flag;
        }
    }
    flags
}

/// One binary format under test: its oracle types and our functions.
trait Format {
    type N: Float + FloatConvert<Self::W> + FloatConvert<Quad>;
    type W: Float;
    const EXP_BITS: u32;
    const FRAC_BITS: u32;
    const CANONICAL_NAN: u64;
    fn add(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags);
    fn sub(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags);
    fn mul(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags);
    fn div(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags);
    fn sqrt(a: u64, rm: RoundingMode) -> (u64, Flags);
    fn fma(a: u64, b: u64, c: u64, rm: RoundingMode, np: bool, na: bool) -> (u64, Flags);
    /// Host square root, correctly rounded to nearest even.
    fn host_sqrt(a: u64) -> u64;
    fn to_i32(a: u64, rm: RoundingMode) -> (u64, Flags);
    fn to_u32(a: u64, rm: RoundingMode) -> (u64, Flags);
    fn to_i64(a: u64, rm: RoundingMode) -> (u64, Flags);
    fn to_u64(a: u64, rm: RoundingMode) -> (u64, Flags);
    fn from_i32(v: i32, rm: RoundingMode) -> (u64, Flags);
    fn from_u32(v: u32, rm: RoundingMode) -> (u64, Flags);
    fn from_i64(v: i64, rm: RoundingMode) -> (u64, Flags);
    fn from_u64(v: u64, rm: RoundingMode) -> (u64, Flags);
    /// The software core's format description.
    const SOFT: soft::Fmt;
    /// The host fast path for add, sub, mul, div (`op` 0-3) or sqrt (4).
    fn fast(op: usize, a: u64, b: u64) -> Option<(u64, Flags)>;
}

fn widen((bits, flags): (u32, Flags)) -> (u64, Flags) {
    (u64::from(bits), flags)
}
/// Test inputs of binary32 are generated below 2^32.
fn n32(bits: u64) -> u32 {
    bits as u32
}
/// Integer results as their sign-extended 64-bit pattern.
fn pattern<T: Into<i128>>((v, flags): (T, Flags)) -> (u64, Flags) {
    (v.into() as u64, flags)
}

struct Binary32;
impl Format for Binary32 {
    type N = Single;
    type W = WideSingle;
    const EXP_BITS: u32 = 8;
    const FRAC_BITS: u32 = 23;
    const CANONICAL_NAN: u64 = F32_CANONICAL_NAN as u64;
    fn add(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        widen(f32_add(n32(a), n32(b), rm))
    }
    fn sub(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        widen(f32_sub(n32(a), n32(b), rm))
    }
    fn mul(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        widen(f32_mul(n32(a), n32(b), rm))
    }
    fn div(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        widen(f32_div(n32(a), n32(b), rm))
    }
    fn sqrt(a: u64, rm: RoundingMode) -> (u64, Flags) {
        widen(f32_sqrt(n32(a), rm))
    }
    fn fma(a: u64, b: u64, c: u64, rm: RoundingMode, np: bool, na: bool) -> (u64, Flags) {
        widen(f32_fma(n32(a), n32(b), n32(c), rm, np, na))
    }
    fn host_sqrt(a: u64) -> u64 {
        u64::from(f32::from_bits(n32(a)).sqrt().to_bits())
    }
    fn to_i32(a: u64, rm: RoundingMode) -> (u64, Flags) {
        pattern(f32_to_i32(n32(a), rm))
    }
    fn to_u32(a: u64, rm: RoundingMode) -> (u64, Flags) {
        pattern(f32_to_u32(n32(a), rm))
    }
    fn to_i64(a: u64, rm: RoundingMode) -> (u64, Flags) {
        pattern(f32_to_i64(n32(a), rm))
    }
    fn to_u64(a: u64, rm: RoundingMode) -> (u64, Flags) {
        f32_to_u64(n32(a), rm)
    }
    fn from_i32(v: i32, rm: RoundingMode) -> (u64, Flags) {
        widen(i32_to_f32(v, rm))
    }
    fn from_u32(v: u32, rm: RoundingMode) -> (u64, Flags) {
        widen(u32_to_f32(v, rm))
    }
    fn from_i64(v: i64, rm: RoundingMode) -> (u64, Flags) {
        widen(i64_to_f32(v, rm))
    }
    fn from_u64(v: u64, rm: RoundingMode) -> (u64, Flags) {
        widen(u64_to_f32(v, rm))
    }
    const SOFT: soft::Fmt = soft::F32;
    fn fast(op: usize, a: u64, b: u64) -> Option<(u64, Flags)> {
        let (a, b) = (n32(a), n32(b));
        let result = match op {
            0 => fast::f32_add(a, b),
            1 => fast::f32_add(a, b ^ 0x8000_0000),
            2 => fast::f32_mul(a, b),
            3 => fast::f32_div(a, b),
            _ => fast::f32_sqrt(a),
        };
        result.map(widen)
    }
}

struct Binary64;
impl Format for Binary64 {
    type N = Double;
    type W = WideDouble;
    const EXP_BITS: u32 = 11;
    const FRAC_BITS: u32 = 52;
    const CANONICAL_NAN: u64 = F64_CANONICAL_NAN;
    fn add(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        f64_add(a, b, rm)
    }
    fn sub(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        f64_sub(a, b, rm)
    }
    fn mul(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        f64_mul(a, b, rm)
    }
    fn div(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
        f64_div(a, b, rm)
    }
    fn sqrt(a: u64, rm: RoundingMode) -> (u64, Flags) {
        f64_sqrt(a, rm)
    }
    fn fma(a: u64, b: u64, c: u64, rm: RoundingMode, np: bool, na: bool) -> (u64, Flags) {
        f64_fma(a, b, c, rm, np, na)
    }
    fn host_sqrt(a: u64) -> u64 {
        f64::from_bits(a).sqrt().to_bits()
    }
    fn to_i32(a: u64, rm: RoundingMode) -> (u64, Flags) {
        pattern(f64_to_i32(a, rm))
    }
    fn to_u32(a: u64, rm: RoundingMode) -> (u64, Flags) {
        pattern(f64_to_u32(a, rm))
    }
    fn to_i64(a: u64, rm: RoundingMode) -> (u64, Flags) {
        pattern(f64_to_i64(a, rm))
    }
    fn to_u64(a: u64, rm: RoundingMode) -> (u64, Flags) {
        f64_to_u64(a, rm)
    }
    fn from_i32(v: i32, rm: RoundingMode) -> (u64, Flags) {
        i32_to_f64(v, rm)
    }
    fn from_u32(v: u32, rm: RoundingMode) -> (u64, Flags) {
        u32_to_f64(v, rm)
    }
    fn from_i64(v: i64, rm: RoundingMode) -> (u64, Flags) {
        i64_to_f64(v, rm)
    }
    fn from_u64(v: u64, rm: RoundingMode) -> (u64, Flags) {
        u64_to_f64(v, rm)
    }
    const SOFT: soft::Fmt = soft::F64;
    fn fast(op: usize, a: u64, b: u64) -> Option<(u64, Flags)> {
        match op {
            0 => fast::f64_add(a, b),
            1 => fast::f64_add(a, b ^ 1 << 63),
            2 => fast::f64_mul(a, b),
            3 => fast::f64_div(a, b),
            _ => fast::f64_sqrt(a),
        }
    }
}

fn exact_convert<A: FloatConvert<B>, B: Float>(x: A) -> B {
    let mut loses_info = false;
    let r = x.convert_r(Round::NearestTiesToEven, &mut loses_info);
    assert!(!loses_info && r.status.is_empty(), "widening must be exact");
    r.value
}

/// UF and OF of an inexact result per IEEE 754 (tininess after rounding),
/// from the same operation rounded with an unbounded exponent.
///
/// Checks on the way that APFloat's own flags only differ where its
/// conventions are known to differ: UF when it delivered ±(smallest normal),
/// OF when it delivered ±(largest finite) (APFloat raises only NX when an
/// overflow rounds to the largest finite number).
fn range_flags<N: Float + FloatConvert<W>, W: Float>(
    unbounded: W,
    delivered: N,
    status: Status,
) -> Flags {
    let mut flags = Flags::default();
    let min_normal: W = exact_convert(N::smallest_normalized());
    let max_finite: W = exact_convert(N::largest());
    let tiny = unbounded.is_finite_non_zero() && unbounded.abs() < min_normal;
    let huge = unbounded.is_finite() && unbounded.abs() > max_finite;
    if tiny {
        flags |= Flags::UNDERFLOW;
    }
    if huge {
        flags |= Flags::OVERFLOW;
    }
    if delivered.abs() != N::smallest_normalized() {
        assert_eq!(
            tiny,
            status.contains(Status::UNDERFLOW),
            "tininess conventions"
        );
    }
    if delivered.abs() != N::largest() {
        assert_eq!(
            huge,
            status.contains(Status::OVERFLOW),
            "overflow conventions"
        );
    }
    flags
}

/// An operation of the oracle on a slice of operands.
type OracleOp<T> = fn(&[T], Round) -> StatusAnd<T>;
/// One of our unary operations, results widened to 64 bits.
type Unary = fn(u64, RoundingMode) -> (u64, Flags);

/// The RISC-V result of an arithmetic operation according to the oracle.
///
/// `narrow` runs the operation in the real format; `wide` runs it in the
/// same precision with an unbounded exponent, to decide tininess.
fn expected<F: Format>(
    inputs: &[u64],
    rm: RoundingMode,
    narrow: OracleOp<F::N>,
    wide: OracleOp<F::W>,
) -> (u64, Flags) {
    let round = to_round(rm);
    let ns: Vec<F::N> = inputs.iter().map(|&b| F::N::from_bits(b.into())).collect();
    let StatusAnd { status, value } = narrow(&ns, round);
    let mut flags = flags_without_underflow(status);
    let bits = if value.is_nan() {
        F::CANONICAL_NAN
    } else {
        value.to_bits() as u64
    };
    if status.contains(Status::INEXACT) {
        let ws: Vec<F::W> = ns.iter().map(|&x| exact_convert::<F::N, F::W>(x)).collect();
        let unbounded = wide(&ws, round).value;
        flags |= range_flags::<F::N, F::W>(unbounded, value, status);
    }
    (bits, flags)
}

fn expected_sqrt<F: Format>(a: u64, rm: RoundingMode) -> (u64, Flags) {
    let x = F::N::from_bits(a.into());
    if x.is_nan() {
        let flags = if x.is_signaling() {
            Flags::INVALID
        } else {
            Flags::default()
        };
        return (F::CANONICAL_NAN, flags);
    }
    if x.is_zero() {
        return (a, Flags::default());
    }
    if x.is_negative() {
        return (F::CANONICAL_NAN, Flags::INVALID);
    }
    if x.is_infinite() {
        return (a, Flags::default());
    }
    let nearest = F::host_sqrt(a);
    let root = F::N::from_bits(nearest.into());
    // binary128 holds the square of a 53-bit number exactly.
    let root_q: Quad = exact_convert(root);
    let x_q: Quad = exact_convert(x);
    let square = root_q.mul_r(root_q, Round::NearestTiesToEven);
    assert!(square.status.is_empty(), "exact square");
    // A square root is never halfway between two floats, so only the
    // direction of the nearest result matters for the other modes.
    let bits = match (square.value.partial_cmp(&x_q), rm) {
        (Some(Ordering::Equal), _) => return (nearest, Flags::default()),
        (Some(Ordering::Greater), RoundingMode::TowardZero | RoundingMode::Down) => nearest - 1,
        (Some(Ordering::Less), RoundingMode::Up) => nearest + 1,
        _ => nearest,
    };
    (bits, Flags::INEXACT)
}

/// Float to integer per the RISC-V table, from APFloat's round-to-integral.
fn expected_to_int<F: Format>(a: u64, signed: bool, width: u32, rm: RoundingMode) -> (u64, Flags) {
    let (min, max): (i128, i128) = if signed {
        (-(1i128 << (width - 1)), (1i128 << (width - 1)) - 1)
    } else {
        (0, (1i128 << width) - 1)
    };
    let saturate = |negative: bool| {
        let v = if negative { min } else { max };
        (v as u64, Flags::INVALID)
    };
    let x = F::N::from_bits(a.into());
    if x.is_nan() {
        return saturate(false);
    }
    if x.is_infinite() {
        return saturate(x.is_negative());
    }
    let integral = x.round_to_integral(to_round(rm)).value;
    let inexact = integral.partial_cmp(&x) != Some(Ordering::Equal);
    let limit = F::N::from_u128(1 << 100).value;
    if integral.abs() >= limit {
        return saturate(x.is_negative());
    }
    let mut is_exact = false;
    let v = integral
        .to_i128_r(128, Round::TowardZero, &mut is_exact)
        .value;
    if v < min || v > max {
        return saturate(x.is_negative());
    }
    let flags = if inexact {
        Flags::INEXACT
    } else {
        Flags::default()
    };
    (v as u64, flags)
}

fn expected_from_int<F: Format>(v: i128, rm: RoundingMode) -> (u64, Flags) {
    let StatusAnd { status, value } = F::N::from_i128_r(v, to_round(rm));
    (value.to_bits() as u64, flags_without_underflow(status))
}

fn add_n<T: Float>(x: &[T], r: Round) -> StatusAnd<T> {
    x[0].add_r(x[1], r)
}
fn sub_n<T: Float>(x: &[T], r: Round) -> StatusAnd<T> {
    x[0].sub_r(x[1], r)
}
fn mul_n<T: Float>(x: &[T], r: Round) -> StatusAnd<T> {
    x[0].mul_r(x[1], r)
}
fn div_n<T: Float>(x: &[T], r: Round) -> StatusAnd<T> {
    x[0].div_r(x[1], r)
}
/// `x[3]` and `x[4]` carry the negation choices as ±0 markers.
fn fma_n<T: Float>(x: &[T], r: Round) -> StatusAnd<T> {
    let a = if x[3].is_negative() { -x[0] } else { x[0] };
    let c = if x[4].is_negative() { -x[2] } else { x[2] };
    a.mul_add_r(x[1], c, r)
}

fn check_binary<F: Format>(
    op: usize,
    a: u64,
    b: u64,
    rm: RoundingMode,
) -> Result<(), TestCaseError> {
    type Pair<F> = (
        fn(u64, u64, RoundingMode) -> (u64, Flags),
        OracleOp<<F as Format>::N>,
        OracleOp<<F as Format>::W>,
        &'static str,
    );
    let table: [Pair<F>; 4] = [
        (F::add, add_n, add_n, "add"),
        (F::sub, sub_n, sub_n, "sub"),
        (F::mul, mul_n, mul_n, "mul"),
        (F::div, div_n, div_n, "div"),
    ];
    let (ours, narrow, wide, name) = table[op % 4];
    let got = ours(a, b, rm);
    let want = expected::<F>(&[a, b], rm, narrow, wide);
    prop_assert_eq!(got, want, "{}({:#x}, {:#x}, {:?})", name, a, b, rm);
    Ok(())
}

/// The host fast path, when it answers, must agree with the software core.
/// Returns whether it answered.
fn check_fast_path<F: Format>(op: usize, a: u64, b: u64) -> Result<bool, TestCaseError> {
    let Some(fast) = F::fast(op, a, b) else {
        return Ok(false);
    };
    let rne = RoundingMode::NearestEven;
    let soft = match op {
        0 => soft::add(F::SOFT, a, b, rne),
        1 => soft::sub(F::SOFT, a, b, rne),
        2 => soft::mul(F::SOFT, a, b, rne),
        3 => soft::div(F::SOFT, a, b, rne),
        _ => soft::sqrt(F::SOFT, a, rne),
    };
    prop_assert_eq!(fast, soft, "fast path op {} on ({:#x}, {:#x})", op, a, b);
    Ok(true)
}

fn check_fma<F: Format>(
    a: u64,
    b: u64,
    c: u64,
    rm: RoundingMode,
    negate_product: bool,
    negate_addend: bool,
) -> Result<(), TestCaseError> {
    let got = F::fma(a, b, c, rm, negate_product, negate_addend);
    let sign = 1u64 << (F::EXP_BITS + F::FRAC_BITS);
    let marker = |negative: bool| if negative { sign } else { 0 };
    let inputs = [a, b, c, marker(negate_product), marker(negate_addend)];
    let want = expected::<F>(&inputs, rm, fma_n, fma_n);
    prop_assert_eq!(
        got,
        want,
        "fma({:#x}, {:#x}, {:#x}, {:?}, {}, {})",
        a,
        b,
        c,
        rm,
        negate_product,
        negate_addend
    );
    Ok(())
}

fn check_unary<F: Format>(a: u64, rm: RoundingMode) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        F::sqrt(a, rm),
        expected_sqrt::<F>(a, rm),
        "sqrt({:#x}, {:?})",
        a,
        rm
    );
    let conversions: [(Unary, bool, u32, &str); 4] = [
        (F::to_i32, true, 32, "to_i32"),
        (F::to_u32, false, 32, "to_u32"),
        (F::to_i64, true, 64, "to_i64"),
        (F::to_u64, false, 64, "to_u64"),
    ];
    for (ours, signed, width, name) in conversions {
        let want = expected_to_int::<F>(a, signed, width, rm);
        prop_assert_eq!(ours(a, rm), want, "{}({:#x}, {:?})", name, a, rm);
    }
    Ok(())
}

fn check_from_int<F: Format>(v: i64, rm: RoundingMode) -> Result<(), TestCaseError> {
    let v32 = v as i32;
    let u32v = v as u32;
    let u64v = v as u64;
    prop_assert_eq!(
        F::from_i64(v, rm),
        expected_from_int::<F>(v.into(), rm),
        "from_i64({}, {:?})",
        v,
        rm
    );
    prop_assert_eq!(
        F::from_u64(u64v, rm),
        expected_from_int::<F>(u64v.into(), rm),
        "from_u64({}, {:?})",
        u64v,
        rm
    );
    prop_assert_eq!(
        F::from_i32(v32, rm),
        expected_from_int::<F>(v32.into(), rm),
        "from_i32({}, {:?})",
        v32,
        rm
    );
    prop_assert_eq!(
        F::from_u32(u32v, rm),
        expected_from_int::<F>(u32v.into(), rm),
        "from_u32({}, {:?})",
        u32v,
        rm
    );
    Ok(())
}

fn expected_f32_to_f64(a: u32) -> (u64, Flags) {
    let StatusAnd { status, value } =
        Single::from_bits(a.into()).convert_r(Round::NearestTiesToEven, &mut false);
    let value: Double = value;
    let bits = if value.is_nan() {
        F64_CANONICAL_NAN
    } else {
        value.to_bits() as u64
    };
    (bits, flags_without_underflow(status))
}

fn expected_f64_to_f32(a: u64, rm: RoundingMode) -> (u32, Flags) {
    let round = to_round(rm);
    let x = Double::from_bits(a.into());
    let StatusAnd {
        status,
        value: narrowed,
    }: StatusAnd<Single> = x.convert_r(round, &mut false);
    let bits = if narrowed.is_nan() {
        F32_CANONICAL_NAN
    } else {
        narrowed.to_bits() as u32
    };
    let mut flags = flags_without_underflow(status);
    if status.contains(Status::INEXACT) {
        let unbounded: WideSingle = x.convert_r(round, &mut false).value;
        flags |= range_flags::<Single, WideSingle>(unbounded, narrowed, status);
    }
    (bits, flags)
}

// ---- input generation ----

fn pack(exp_bits: u32, frac_bits: u32, sign: bool, exp: u64, frac: u64) -> u64 {
    let exp_mask = (1u64 << exp_bits) - 1;
    let frac_mask = (1u64 << frac_bits) - 1;
    (u64::from(sign) << (exp_bits + frac_bits))
        | ((exp & exp_mask) << frac_bits)
        | (frac & frac_mask)
}

/// Significand fields that exercise rounding: extremes, single bits, runs
/// of ones (carries), halfway tails and random bits.
fn fraction(frac_bits: u32) -> BoxedStrategy<u64> {
    let mask = (1u64 << frac_bits) - 1;
    prop_oneof![
        3 => any::<u64>().prop_map(move |x| x & mask),
        1 => Just(0u64),
        1 => Just(mask),
        1 => Just(1u64),
        1 => (0..frac_bits).prop_map(|k| 1u64 << k),
        1 => (0..frac_bits).prop_map(move |k| mask >> k),
        1 => (0..frac_bits).prop_map(move |k| (mask << k) & mask),
        1 => (any::<u64>(), 1..frac_bits).prop_map(move |(x, k)| x & mask & !((1u64 << k) - 1)),
    ]
    .boxed()
}

fn exponent(exp_bits: u32) -> BoxedStrategy<u64> {
    let max = (1u64 << exp_bits) - 1;
    let bias = (1u64 << (exp_bits - 1)) - 1;
    prop_oneof![
        3 => 0..=max,
        2 => 0..=3u64,
        2 => (max - 3)..=max,
        3 => (bias - 30)..=(bias + 30),
        1 => 1..40u64,
    ]
    .boxed()
}

fn float_bits<F: Format>() -> BoxedStrategy<u64> {
    let (e, m) = (F::EXP_BITS, F::FRAC_BITS);
    let all = if e + m + 1 == 32 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    prop_oneof![
        2 => any::<u64>().prop_map(move |x| x & all),
        6 => (any::<bool>(), exponent(e), fraction(m)).prop_map(move |(s, x, f)| pack(e, m, s, x, f)),
    ]
    .boxed()
}

/// A value whose exponent is `delta` away from `base`'s, for cancellation,
/// alignment and sticky-bit cases.
fn near<F: Format>(base: u64, delta: i64, sign: bool, frac: u64) -> u64 {
    let (e, m) = (F::EXP_BITS, F::FRAC_BITS);
    let max = (1i64 << e) - 1;
    let base_exp = ((base >> m) as i64) & max;
    let exp = (base_exp + delta).clamp(0, max);
    pack(e, m, sign, exp as u64, frac)
}

fn related_pair<F: Format>() -> BoxedStrategy<(u64, u64)> {
    (
        float_bits::<F>(),
        -80i64..80,
        any::<bool>(),
        fraction(F::FRAC_BITS),
        0..4u8,
    )
        .prop_map(|(a, delta, sign, frac, how)| {
            let b = match how {
                // Same exponent, nearly equal significands: cancellation.
                0 => a ^ (frac & 0xff) ^ (u64::from(sign) << (F::EXP_BITS + F::FRAC_BITS)),
                1 => near::<F>(a, delta.clamp(-3, 3), sign, frac),
                _ => near::<F>(a, delta, sign, frac),
            };
            (a, b)
        })
        .boxed()
}

/// An addend whose magnitude is close to that of the product `a * b`.
fn fma_triple<F: Format>() -> BoxedStrategy<(u64, u64, u64)> {
    let bias = (1i64 << (F::EXP_BITS - 1)) - 1;
    (
        float_bits::<F>(),
        float_bits::<F>(),
        float_bits::<F>(),
        -60i64..60,
        any::<bool>(),
        fraction(F::FRAC_BITS),
        any::<bool>(),
    )
        .prop_map(move |(a, b, c, delta, sign, frac, related)| {
            if !related {
                return (a, b, c);
            }
            let max = (1i64 << F::EXP_BITS) - 1;
            let ea = ((a >> F::FRAC_BITS) as i64) & max;
            let eb = ((b >> F::FRAC_BITS) as i64) & max;
            let target = ea + eb - bias + delta;
            let exp = target.clamp(0, max - 1);
            (
                a,
                b,
                pack(F::EXP_BITS, F::FRAC_BITS, sign, exp as u64, frac),
            )
        })
        .boxed()
}

fn mode() -> impl Strategy<Value = RoundingMode> {
    prop::sample::select(MODES.to_vec())
}

/// Boundary values of a format, both signs.
fn specials<F: Format>() -> Vec<u64> {
    let (e, m) = (F::EXP_BITS, F::FRAC_BITS);
    let frac_mask = (1u64 << m) - 1;
    let max_exp = (1u64 << e) - 1;
    let bias = (1u64 << (e - 1)) - 1;
    let positive = [
        0,
        1,
        2,
        3,
        frac_mask,
        frac_mask - 1,
        1 << m,
        (1 << m) | 1,
        3 << (m - 1),
        pack(e, m, false, max_exp - 1, frac_mask),
        pack(e, m, false, max_exp - 1, frac_mask - 1),
        pack(e, m, false, max_exp - 1, 0),
        pack(e, m, false, max_exp, 0),
        pack(e, m, false, max_exp, 1 << (m - 1)),
        pack(e, m, false, max_exp, frac_mask),
        pack(e, m, false, max_exp, 1),
        pack(e, m, false, max_exp, (1 << (m - 1)) - 1),
        pack(e, m, false, bias, 0),
        pack(e, m, false, bias, 1),
        pack(e, m, false, bias - 1, frac_mask),
        pack(e, m, false, bias + 1, 0),
        pack(e, m, false, bias, 1 << (m - 1)),
        pack(e, m, false, bias + 1, 1 << (m - 1)),
        pack(e, m, false, bias - u64::from(m) - 1, 0),
        pack(e, m, false, bias - u64::from(m), 1 << (m - 1)),
        pack(e, m, false, bias + u64::from(m), 0),
        pack(e, m, false, bias + 31, 0),
        pack(e, m, false, bias + 32, 0),
        pack(e, m, false, bias + 63, 0),
        pack(e, m, false, bias + 64, 0),
        pack(e, m, false, bias + 30, frac_mask),
        pack(e, m, false, bias + 62, frac_mask),
        pack(e, m, false, bias - 1, 0),
        pack(e, m, false, bias - 1, 1 << (m - 1)),
        pack(e, m, false, bias / 2, 0),
        pack(e, m, false, bias + bias / 2, frac_mask),
    ];
    let sign = 1u64 << (e + m);
    positive.iter().flat_map(|&p| [p, p | sign]).collect()
}

// ---- the tests ----

const CASES: u32 = 8000;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

macro_rules! differential_suite {
    ($module:ident, $format:ty) => {
        mod $module {
            use super::*;

            type F = $format;

            proptest! {
                #![proptest_config(config())]

                #[test]
                fn arithmetic_on_random_inputs(op in 0..4usize, a in float_bits::<F>(), b in float_bits::<F>(), rm in mode()) {
                    check_binary::<F>(op, a, b, rm)?;
                }

                #[test]
                fn arithmetic_on_related_inputs(op in 0..4usize, (a, b) in related_pair::<F>(), rm in mode()) {
                    check_binary::<F>(op, a, b, rm)?;
                }

                #[test]
                fn fused_multiply_add(
                    (a, b, c) in fma_triple::<F>(),
                    rm in mode(),
                    negate_product in any::<bool>(),
                    negate_addend in any::<bool>(),
                ) {
                    check_fma::<F>(a, b, c, rm, negate_product, negate_addend)?;
                }

                #[test]
                fn square_root_and_conversions_to_integers(a in float_bits::<F>(), rm in mode()) {
                    check_unary::<F>(a, rm)?;
                }

                #[test]
                fn conversions_from_integers(
                    v in prop_oneof![
                        any::<i64>(),
                        (0..64u32, any::<i64>()).prop_map(|(k, x)| x >> k),
                        (0..64u32, 0..3i64).prop_map(|(k, d)| (1i64 << k).wrapping_add(d - 1)),
                    ],
                    rm in mode(),
                ) {
                    check_from_int::<F>(v, rm)?;
                }
            }

            proptest! {
                #![proptest_config(ProptestConfig { cases: 4 * CASES, ..config() })]

                #[test]
                fn fast_path_agrees_with_the_software_core(op in 0..5usize, (a, b) in related_pair::<F>()) {
                    check_fast_path::<F>(op, a, b)?;
                }
            }

            #[test]
            fn fast_path_is_taken_for_ordinary_operands() {
                // Normal operands of moderate magnitude: the fast path must
                // answer nearly always, or it would test nothing.
                let bias = (1u64 << (F::EXP_BITS - 1)) - 1;
                let mut answered = 0;
                let mut total = 0;
                for i in 0..2000u64 {
                    let frac = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - F::FRAC_BITS);
                    let a = pack(F::EXP_BITS, F::FRAC_BITS, i % 3 == 0, bias + i % 40, frac);
                    let b = pack(F::EXP_BITS, F::FRAC_BITS, i % 5 == 0, bias - i % 37, frac.rotate_left(7));
                    for op in 0..5 {
                        total += 1;
                        // Square roots of negative numbers are invalid: not ordinary.
                        let a = if op == 4 { a & !(1 << (F::EXP_BITS + F::FRAC_BITS)) } else { a };
                        match check_fast_path::<F>(op, a, b) {
                            Ok(true) => answered += 1,
                            Ok(false) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                assert!(answered * 100 >= total * 95, "fast path answered {answered} of {total}");
            }

            #[test]
            fn every_pair_of_boundary_values() {
                let values = specials::<F>();
                for &a in &values {
                    for &b in &values {
                        for rm in MODES {
                            for op in 0..4 {
                                if let Err(e) = check_binary::<F>(op, a, b, rm) {
                                    panic!("{e}");
                                }
                            }
                        }
                        for op in 0..5 {
                            if let Err(e) = check_fast_path::<F>(op, a, b) {
                                panic!("{e}");
                            }
                        }
                    }
                }
            }

            #[test]
            fn boundary_triples_for_fma() {
                let values = specials::<F>();
                let few: Vec<u64> = values.iter().copied().step_by(3).collect();
                for &a in &few {
                    for &b in &few {
                        for &c in &few {
                            for rm in [RoundingMode::NearestEven, RoundingMode::Down] {
                                for (np, na) in [(false, false), (true, false), (false, true)] {
                                    if let Err(e) = check_fma::<F>(a, b, c, rm, np, na) {
                                        panic!("{e}");
                                    }
                                }
                            }
                        }
                    }
                }
            }

            #[test]
            fn boundary_values_unary() {
                for &a in &specials::<F>() {
                    for rm in MODES {
                        if let Err(e) = check_unary::<F>(a, rm) {
                            panic!("{e}");
                        }
                    }
                }
            }
        }
    };
}

differential_suite!(binary32, Binary32);
differential_suite!(binary64, Binary64);

proptest! {
    #![proptest_config(config())]

    #[test]
    fn widening_matches_the_oracle(a in float_bits::<Binary32>()) {
        prop_assert_eq!(f32_to_f64(n32(a)), expected_f32_to_f64(n32(a)), "{:#x}", a);
    }

    #[test]
    fn narrowing_matches_the_oracle(a in float_bits::<Binary64>(), rm in mode()) {
        prop_assert_eq!(f64_to_f32(a, rm), expected_f64_to_f32(a, rm), "{:#x} {:?}", a, rm);
    }

    #[test]
    fn narrowing_near_binary32_boundaries(
        exp in prop_oneof![1023 - 160..1023 - 120u64, 1023 + 120..1023 + 130u64],
        frac in fraction(52),
        sign in any::<bool>(),
        rm in mode(),
    ) {
        let a = pack(11, 52, sign, exp, frac);
        prop_assert_eq!(f64_to_f32(a, rm), expected_f64_to_f32(a, rm), "{:#x} {:?}", a, rm);
    }
}

#[test]
fn square_root_over_a_sweep_of_binary32() {
    // Every 4099th pattern: all exponents, both signs, NaNs included.
    let mut bits: u32 = 0;
    loop {
        for rm in MODES {
            let a = u64::from(bits);
            assert_eq!(
                Binary32::sqrt(a, rm),
                expected_sqrt::<Binary32>(a, rm),
                "{a:#x} {rm:?}"
            );
        }
        match bits.checked_add(4099) {
            Some(next) => bits = next,
            None => break,
        }
    }
}
