//! Exact IEEE 754-2008 binary32 and binary64 arithmetic for the RISC-V F and
//! D extensions.
//!
//! The functions take and return raw bit patterns (`u32` for single, `u64`
//! for double precision) and report the exception flags they raise in the
//! `fflags` layout, so the caller only ORs them into `fcsr`. They implement
//! the rules of the RISC-V unprivileged specification on top of IEEE 754:
//!
//! * every NaN result is the canonical NaN (`0x7fc00000` or
//!   `0x7ff8000000000000`); payloads never propagate;
//! * tininess is detected after rounding, so underflow (UF) is raised when a
//!   nonzero result is inexact and, rounded with an unbounded exponent range,
//!   lies strictly between the negative and positive smallest normal numbers;
//! * `fmin`/`fmax` are IEEE 754-2019 minimumNumber/maximumNumber (-0 < +0);
//! * fused multiply-add raises NV for `0 * inf` even when the addend is a
//!   quiet NaN;
//! * float-to-integer conversions saturate out-of-range inputs (NaN converts
//!   to the largest positive integer) and then raise NV only, never NX.
//!
//! NaN-boxing, the `frm`/`fflags`/`fcsr` registers and the resolution of the
//! dynamic rounding mode belong to the caller: every function here receives
//! an already resolved [`RoundingMode`].
//!
//! The implementation is a software core written from the specification
//! (integer significands with guard and sticky information, a 128-bit
//! product for binary64, integer long division, an integer square root that
//! starts from a host estimate and is corrected exactly), allocation free and
//! panic free on every input.
//! Round-to-nearest-even add, subtract, multiply, divide and square root of
//! normal operands with normal results take a host fast path whose flags are
//! derived exactly (error-free transforms); tests hold it bit for bit and
//! flag for flag to the software core.
//!
//! ```
//! use tcgkit_riscv::fpu::{f32_add, Flags, RoundingMode};
//!
//! // 1 + 2^-24 lies exactly halfway between 1 and the next float.
//! let one = 1.0f32.to_bits();
//! let tiny = 2f32.powi(-24).to_bits();
//! assert_eq!(f32_add(one, tiny, RoundingMode::NearestEven), (one, Flags::INEXACT));
//! assert_eq!(f32_add(one, tiny, RoundingMode::Up), (one + 1, Flags::INEXACT));
//! assert_eq!(
//!     f32_add(f32::INFINITY.to_bits(), f32::NEG_INFINITY.to_bits(), RoundingMode::NearestEven),
//!     (0x7fc0_0000, Flags::INVALID),
//! );
//! ```

mod fast;
#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod qemu_vector_tests;
mod soft;
#[cfg(test)]
mod tests;

use core::ops::{BitOr, BitOrAssign};

use self::soft::{Compare, F32, F64, IntFormat};

/// An IEEE 754 rounding direction, as encoded in the `rm` field and `frm`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RoundingMode {
    /// Round to nearest, ties to even (`rne`, 0).
    NearestEven,
    /// Round towards zero (`rtz`, 1).
    TowardZero,
    /// Round down, towards negative infinity (`rdn`, 2).
    Down,
    /// Round up, towards positive infinity (`rup`, 3).
    Up,
    /// Round to nearest, ties away from zero (`rmm`, 4).
    NearestMaxMagnitude,
}

impl RoundingMode {
    /// Decodes a static `rm` field or the `frm` register value.
    ///
    /// Returns `None` for 5, 6 and 7: the caller resolves 7 (dynamic) through
    /// `frm` and treats the reserved values as illegal instructions.
    pub fn from_bits(rm: u8) -> Option<RoundingMode> {
        match rm {
            0 => Some(RoundingMode::NearestEven),
            1 => Some(RoundingMode::TowardZero),
            2 => Some(RoundingMode::Down),
            3 => Some(RoundingMode::Up),
            4 => Some(RoundingMode::NearestMaxMagnitude),
            _ => None,
        }
    }

    /// The encoding of this mode in `rm` and `frm`.
    pub fn to_bits(self) -> u8 {
        match self {
            RoundingMode::NearestEven => 0,
            RoundingMode::TowardZero => 1,
            RoundingMode::Down => 2,
            RoundingMode::Up => 3,
            RoundingMode::NearestMaxMagnitude => 4,
        }
    }
}

/// Accrued exception flags in the layout of the `fflags` register.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// NX: the rounded result differs from the exact one.
    pub const INEXACT: Flags = Flags(0x01);
    /// UF: the result is tiny (after rounding) and inexact.
    pub const UNDERFLOW: Flags = Flags(0x02);
    /// OF: the rounded result exceeded the largest finite number.
    pub const OVERFLOW: Flags = Flags(0x04);
    /// DZ: a finite nonzero number was divided by zero.
    pub const DIVIDE_BY_ZERO: Flags = Flags(0x08);
    /// NV: the operation was invalid (or an operand was a signaling NaN).
    pub const INVALID: Flags = Flags(0x10);

    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is also set in `self`.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

/// The bit pattern of the canonical single-precision NaN.
pub const F32_CANONICAL_NAN: u32 = 0x7fc0_0000;
/// The bit pattern of the canonical double-precision NaN.
pub const F64_CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

const I32: IntFormat = IntFormat {
    signed: true,
    bits: 32,
};
const U32: IntFormat = IntFormat {
    signed: false,
    bits: 32,
};
const I64: IntFormat = IntFormat {
    signed: true,
    bits: 64,
};
const U64: IntFormat = IntFormat {
    signed: false,
    bits: 64,
};

/// Narrows a result of the generic core on binary32, whose patterns fit in
/// 32 bits by construction.
fn narrow((bits, flags): (u64, Flags)) -> (u32, Flags) {
    (bits as u32, flags)
}

/// The single-precision `a + b` (`fadd`), rounded per `rm`.
pub fn f32_add(a: u32, b: u32, rm: RoundingMode) -> (u32, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f32_add(a, b)
    {
        return result;
    }
    narrow(soft::add(F32, u64::from(a), u64::from(b), rm))
}

/// The single-precision `a - b` (`fsub`), rounded per `rm`.
pub fn f32_sub(a: u32, b: u32, rm: RoundingMode) -> (u32, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f32_add(a, b ^ 0x8000_0000)
    {
        return result;
    }
    narrow(soft::sub(F32, u64::from(a), u64::from(b), rm))
}

/// The single-precision `a * b` (`fmul`), rounded per `rm`.
pub fn f32_mul(a: u32, b: u32, rm: RoundingMode) -> (u32, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f32_mul(a, b)
    {
        return result;
    }
    narrow(soft::mul(F32, u64::from(a), u64::from(b), rm))
}

/// The single-precision `a / b` (`fdiv`), rounded per `rm`; DZ for a
/// finite nonzero `a` over zero.
pub fn f32_div(a: u32, b: u32, rm: RoundingMode) -> (u32, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f32_div(a, b)
    {
        return result;
    }
    narrow(soft::div(F32, u64::from(a), u64::from(b), rm))
}

/// The single-precision square root (`fsqrt`), rounded per `rm`; NV for
/// negative nonzero operands (`sqrt(-0)` is `-0`).
pub fn f32_sqrt(a: u32, rm: RoundingMode) -> (u32, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f32_sqrt(a)
    {
        return result;
    }
    narrow(soft::sqrt(F32, u64::from(a), rm))
}

/// The single-precision fused multiply-add with a single rounding.
///
/// Computes `±(a * b) ± c`: `fmadd` is `(false, false)`, `fmsub`
/// `(false, true)`, `fnmsub` `(true, false)` and `fnmadd` `(true, true)`.
pub fn f32_fma(
    a: u32,
    b: u32,
    c: u32,
    rm: RoundingMode,
    negate_product: bool,
    negate_addend: bool,
) -> (u32, Flags) {
    narrow(soft::fma(
        F32,
        u64::from(a),
        u64::from(b),
        u64::from(c),
        rm,
        negate_product,
        negate_addend,
    ))
}

/// `fmin`: the smaller operand, -0 below +0; a single NaN operand is
/// ignored, two give the canonical NaN; NV if either is signaling.
pub fn f32_min(a: u32, b: u32) -> (u32, Flags) {
    narrow(soft::min_max(F32, u64::from(a), u64::from(b), false))
}

/// `fmax`: the larger operand, +0 above -0; a single NaN operand is
/// ignored, two give the canonical NaN; NV if either is signaling.
pub fn f32_max(a: u32, b: u32) -> (u32, Flags) {
    narrow(soft::min_max(F32, u64::from(a), u64::from(b), true))
}

/// `feq`: quiet equality (false with a NaN; NV only for signaling NaNs).
pub fn f32_eq(a: u32, b: u32) -> (bool, Flags) {
    soft::compare(F32, u64::from(a), u64::from(b), Compare::Equal)
}

/// `flt`: signaling less-than (false and NV with any NaN).
pub fn f32_lt(a: u32, b: u32) -> (bool, Flags) {
    soft::compare(F32, u64::from(a), u64::from(b), Compare::Less)
}

/// `fle`: signaling less-or-equal (false and NV with any NaN).
pub fn f32_le(a: u32, b: u32) -> (bool, Flags) {
    soft::compare(F32, u64::from(a), u64::from(b), Compare::LessOrEqual)
}

/// `fclass`: a mask with exactly one of bits 0-9 set (-inf, negative
/// normal, negative subnormal, -0, +0, positive subnormal, positive normal,
/// +inf, signaling NaN, quiet NaN).
pub fn f32_classify(a: u32) -> u64 {
    soft::classify(F32, u64::from(a))
}

/// `fcvt.w`: to a signed 32-bit integer rounded per `rm`; out of range and
/// NaN saturate (NaN to `i32::MAX`) with NV, otherwise NX if inexact.
pub fn f32_to_i32(a: u32, rm: RoundingMode) -> (i32, Flags) {
    let (bits, flags) = soft::to_int(F32, u64::from(a), I32, rm);
    (bits as i32, flags)
}

/// `fcvt.wu`: to an unsigned 32-bit integer rounded per `rm`; out of range
/// and NaN saturate (NaN and +inf to `u32::MAX`, negatives to 0) with NV.
pub fn f32_to_u32(a: u32, rm: RoundingMode) -> (u32, Flags) {
    let (bits, flags) = soft::to_int(F32, u64::from(a), U32, rm);
    (bits as u32, flags)
}

/// `fcvt.l`: to a signed 64-bit integer rounded per `rm`; out of range and
/// NaN saturate (NaN to `i64::MAX`) with NV, otherwise NX if inexact.
pub fn f32_to_i64(a: u32, rm: RoundingMode) -> (i64, Flags) {
    let (bits, flags) = soft::to_int(F32, u64::from(a), I64, rm);
    (bits as i64, flags)
}

/// `fcvt.lu`: to an unsigned 64-bit integer rounded per `rm`; out of range
/// and NaN saturate (NaN and +inf to `u64::MAX`, negatives to 0) with NV.
pub fn f32_to_u64(a: u32, rm: RoundingMode) -> (u64, Flags) {
    soft::to_int(F32, u64::from(a), U64, rm)
}

/// `fcvt.s.w`: a signed 32-bit integer to single precision (NX if inexact).
pub fn i32_to_f32(v: i32, rm: RoundingMode) -> (u32, Flags) {
    narrow(soft::from_int(F32, v < 0, u64::from(v.unsigned_abs()), rm))
}

/// `fcvt.s.wu`: an unsigned 32-bit integer to single precision (NX if inexact).
pub fn u32_to_f32(v: u32, rm: RoundingMode) -> (u32, Flags) {
    narrow(soft::from_int(F32, false, u64::from(v), rm))
}

/// `fcvt.s.l`: a signed 64-bit integer to single precision (NX if inexact).
pub fn i64_to_f32(v: i64, rm: RoundingMode) -> (u32, Flags) {
    narrow(soft::from_int(F32, v < 0, v.unsigned_abs(), rm))
}

/// `fcvt.s.lu`: an unsigned 64-bit integer to single precision (NX if inexact).
pub fn u64_to_f32(v: u64, rm: RoundingMode) -> (u32, Flags) {
    narrow(soft::from_int(F32, false, v, rm))
}

/// The double-precision `a + b` (`fadd`), rounded per `rm`.
pub fn f64_add(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f64_add(a, b)
    {
        return result;
    }
    soft::add(F64, a, b, rm)
}

/// The double-precision `a - b` (`fsub`), rounded per `rm`.
pub fn f64_sub(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f64_add(a, b ^ 1 << 63)
    {
        return result;
    }
    soft::sub(F64, a, b, rm)
}

/// The double-precision `a * b` (`fmul`), rounded per `rm`.
pub fn f64_mul(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f64_mul(a, b)
    {
        return result;
    }
    soft::mul(F64, a, b, rm)
}

/// The double-precision `a / b` (`fdiv`), rounded per `rm`; DZ for a
/// finite nonzero `a` over zero.
pub fn f64_div(a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f64_div(a, b)
    {
        return result;
    }
    soft::div(F64, a, b, rm)
}

/// The double-precision square root (`fsqrt`), rounded per `rm`; NV for
/// negative nonzero operands (`sqrt(-0)` is `-0`).
pub fn f64_sqrt(a: u64, rm: RoundingMode) -> (u64, Flags) {
    if rm == RoundingMode::NearestEven
        && let Some(result) = fast::f64_sqrt(a)
    {
        return result;
    }
    soft::sqrt(F64, a, rm)
}

/// The double-precision fused multiply-add with a single rounding.
///
/// Computes `±(a * b) ± c`: `fmadd` is `(false, false)`, `fmsub`
/// `(false, true)`, `fnmsub` `(true, false)` and `fnmadd` `(true, true)`.
pub fn f64_fma(
    a: u64,
    b: u64,
    c: u64,
    rm: RoundingMode,
    negate_product: bool,
    negate_addend: bool,
) -> (u64, Flags) {
    soft::fma(F64, a, b, c, rm, negate_product, negate_addend)
}

/// `fmin`: the smaller operand, -0 below +0; a single NaN operand is
/// ignored, two give the canonical NaN; NV if either is signaling.
pub fn f64_min(a: u64, b: u64) -> (u64, Flags) {
    soft::min_max(F64, a, b, false)
}

/// `fmax`: the larger operand, +0 above -0; a single NaN operand is
/// ignored, two give the canonical NaN; NV if either is signaling.
pub fn f64_max(a: u64, b: u64) -> (u64, Flags) {
    soft::min_max(F64, a, b, true)
}

/// `feq`: quiet equality (false with a NaN; NV only for signaling NaNs).
pub fn f64_eq(a: u64, b: u64) -> (bool, Flags) {
    soft::compare(F64, a, b, Compare::Equal)
}

/// `flt`: signaling less-than (false and NV with any NaN).
pub fn f64_lt(a: u64, b: u64) -> (bool, Flags) {
    soft::compare(F64, a, b, Compare::Less)
}

/// `fle`: signaling less-or-equal (false and NV with any NaN).
pub fn f64_le(a: u64, b: u64) -> (bool, Flags) {
    soft::compare(F64, a, b, Compare::LessOrEqual)
}

/// `fclass`: a mask with exactly one of bits 0-9 set (-inf, negative
/// normal, negative subnormal, -0, +0, positive subnormal, positive normal,
/// +inf, signaling NaN, quiet NaN).
pub fn f64_classify(a: u64) -> u64 {
    soft::classify(F64, a)
}

/// `fcvt.w`: to a signed 32-bit integer rounded per `rm`; out of range and
/// NaN saturate (NaN to `i32::MAX`) with NV, otherwise NX if inexact.
pub fn f64_to_i32(a: u64, rm: RoundingMode) -> (i32, Flags) {
    let (bits, flags) = soft::to_int(F64, a, I32, rm);
    (bits as i32, flags)
}

/// `fcvt.wu`: to an unsigned 32-bit integer rounded per `rm`; out of range
/// and NaN saturate (NaN and +inf to `u32::MAX`, negatives to 0) with NV.
pub fn f64_to_u32(a: u64, rm: RoundingMode) -> (u32, Flags) {
    let (bits, flags) = soft::to_int(F64, a, U32, rm);
    (bits as u32, flags)
}

/// `fcvt.l`: to a signed 64-bit integer rounded per `rm`; out of range and
/// NaN saturate (NaN to `i64::MAX`) with NV, otherwise NX if inexact.
pub fn f64_to_i64(a: u64, rm: RoundingMode) -> (i64, Flags) {
    let (bits, flags) = soft::to_int(F64, a, I64, rm);
    (bits as i64, flags)
}

/// `fcvt.lu`: to an unsigned 64-bit integer rounded per `rm`; out of range
/// and NaN saturate (NaN and +inf to `u64::MAX`, negatives to 0) with NV.
pub fn f64_to_u64(a: u64, rm: RoundingMode) -> (u64, Flags) {
    soft::to_int(F64, a, U64, rm)
}

/// `fcvt.d.w`: a signed 32-bit integer to double precision (NX if inexact).
pub fn i32_to_f64(v: i32, rm: RoundingMode) -> (u64, Flags) {
    soft::from_int(F64, v < 0, u64::from(v.unsigned_abs()), rm)
}

/// `fcvt.d.wu`: an unsigned 32-bit integer to double precision (NX if inexact).
pub fn u32_to_f64(v: u32, rm: RoundingMode) -> (u64, Flags) {
    soft::from_int(F64, false, u64::from(v), rm)
}

/// `fcvt.d.l`: a signed 64-bit integer to double precision (NX if inexact).
pub fn i64_to_f64(v: i64, rm: RoundingMode) -> (u64, Flags) {
    soft::from_int(F64, v < 0, v.unsigned_abs(), rm)
}

/// `fcvt.d.lu`: an unsigned 64-bit integer to double precision (NX if inexact).
pub fn u64_to_f64(v: u64, rm: RoundingMode) -> (u64, Flags) {
    soft::from_int(F64, false, v, rm)
}

/// `fcvt.d.s`: widens exactly; NaN gives the canonical NaN (NV if signaling).
pub fn f32_to_f64(a: u32) -> (u64, Flags) {
    // Widening is exact, so the rounding mode never matters.
    soft::convert(F32, F64, u64::from(a), RoundingMode::NearestEven)
}

/// `fcvt.s.d`: narrows with rounding per `rm` (all of NX, UF and OF may be
/// raised); NaN gives the canonical NaN (NV if signaling).
pub fn f64_to_f32(a: u64, rm: RoundingMode) -> (u32, Flags) {
    narrow(soft::convert(F64, F32, a, rm))
}
