//! A host fast path for the common round-to-nearest-even case.
//!
//! The host's `+ - * /` and `sqrt` are correctly rounded to nearest even
//! (IEEE 754, which Rust guarantees for `f32`/`f64`), so for those
//! operations only the flags need extra work. Each function here returns
//! `None` (and the caller uses the software core) unless:
//!
//! * every operand is a normal number, so a host running with
//!   denormals-are-zero cannot see a different input; and
//! * the result is finite and strictly greater in magnitude than the
//!   smallest normal number, so neither overflow nor underflow (with
//!   tininess after rounding) can have occurred and flush-to-zero cannot
//!   have altered it.
//!
//! Inexactness (NX, the only flag left) is then decided exactly: with the
//! TwoSum error-free transform for sums, and by checking `r * y == x` (or
//! `r * r == x`) in exact integer or wide-float arithmetic for products,
//! quotients and square roots. binary32 quotients and square roots are
//! computed in binary64 and rounded again, which is correctly rounded
//! because 53 >= 2 * 24 + 2 (double rounding is innocuous then).
//!
//! The property tests check this path bit for bit and flag for flag against
//! the software core.

use super::Flags;

const F32_EXP_MASK: u32 = 0x7f80_0000;
const F64_EXP_MASK: u64 = 0x7ff0_0000_0000_0000;

fn f32_is_normal(bits: u32) -> bool {
    let exp = bits & F32_EXP_MASK;
    exp != 0 && exp != F32_EXP_MASK
}

fn f64_is_normal(bits: u64) -> bool {
    let exp = bits & F64_EXP_MASK;
    exp != 0 && exp != F64_EXP_MASK
}

/// Whether a host result can be returned with only NX to decide.
fn f32_result_ok(r: f32) -> bool {
    r.is_finite() && r.abs() > f32::MIN_POSITIVE
}

fn f64_result_ok(r: f64) -> bool {
    r.is_finite() && r.abs() > f64::MIN_POSITIVE
}

fn inexact_if(inexact: bool) -> Flags {
    if inexact {
        Flags::INEXACT
    } else {
        Flags::default()
    }
}

/// Integer significand and exponent of a normal binary64 number, without
/// its sign: `|x| = sig * 2^exp`.
fn f64_parts(bits: u64) -> (u64, i32) {
    let biased = ((bits >> 52) & 0x7ff) as i32;
    ((bits & 0x000f_ffff_ffff_ffff) | (1 << 52), biased - 1075)
}

/// Whether `|x| * |y| == |z|` exactly, for normal binary64 numbers.
fn f64_product_is(x: u64, y: u64, z: u64) -> bool {
    let (sx, ex) = f64_parts(x);
    let (sy, ey) = f64_parts(y);
    let (sz, ez) = f64_parts(z);
    let product = u128::from(sx) * u128::from(sy);
    // product * 2^(ex + ey) == sz * 2^ez needs product == sz << shift; with
    // product in [2^104, 2^106) and sz in [2^52, 2^53) only shifts 52 and
    // 53 can match, so anything outside a slightly wider range is unequal.
    let shift = ez - (ex + ey);
    (0..=54).contains(&shift) && product == u128::from(sz) << shift
}

/// TwoSum (Knuth): the rounding error of `s = x + y` is exactly representable
/// and computed without overflow when the operands are below half the range.
fn f32_sum_is_exact(x: f32, y: f32, s: f32) -> bool {
    let y_virtual = s - x;
    let x_virtual = s - y_virtual;
    (x - x_virtual) + (y - y_virtual) == 0.0
}

fn f64_sum_is_exact(x: f64, y: f64, s: f64) -> bool {
    let y_virtual = s - x;
    let x_virtual = s - y_virtual;
    (x - x_virtual) + (y - y_virtual) == 0.0
}

/// Magnitude bit patterns of 2^126 and 2^1022: operands below them keep
/// TwoSum's intermediates finite.
const F32_SUM_LIMIT: u32 = 0x7e80_0000;
const F64_SUM_LIMIT: u64 = 0x7fd0_0000_0000_0000;

pub(crate) fn f32_add(a: u32, b: u32) -> Option<(u32, Flags)> {
    if !f32_is_normal(a) || !f32_is_normal(b) {
        return None;
    }
    if a & 0x7fff_ffff >= F32_SUM_LIMIT || b & 0x7fff_ffff >= F32_SUM_LIMIT {
        return None;
    }
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    let s = x + y;
    f32_result_ok(s).then(|| (s.to_bits(), inexact_if(!f32_sum_is_exact(x, y, s))))
}

pub(crate) fn f64_add(a: u64, b: u64) -> Option<(u64, Flags)> {
    if !f64_is_normal(a) || !f64_is_normal(b) {
        return None;
    }
    if a & !(1 << 63) >= F64_SUM_LIMIT || b & !(1 << 63) >= F64_SUM_LIMIT {
        return None;
    }
    let (x, y) = (f64::from_bits(a), f64::from_bits(b));
    let s = x + y;
    f64_result_ok(s).then(|| (s.to_bits(), inexact_if(!f64_sum_is_exact(x, y, s))))
}

pub(crate) fn f32_mul(a: u32, b: u32) -> Option<(u32, Flags)> {
    if !f32_is_normal(a) || !f32_is_normal(b) {
        return None;
    }
    // The binary64 product of two binary32 numbers is exact (48 bits).
    let exact = f64::from(f32::from_bits(a)) * f64::from(f32::from_bits(b));
    let r = exact as f32;
    f32_result_ok(r).then(|| (r.to_bits(), inexact_if(f64::from(r) != exact)))
}

pub(crate) fn f64_mul(a: u64, b: u64) -> Option<(u64, Flags)> {
    if !f64_is_normal(a) || !f64_is_normal(b) {
        return None;
    }
    let r = f64::from_bits(a) * f64::from_bits(b);
    f64_result_ok(r).then(|| (r.to_bits(), inexact_if(!f64_product_is(a, b, r.to_bits()))))
}

pub(crate) fn f32_div(a: u32, b: u32) -> Option<(u32, Flags)> {
    if !f32_is_normal(a) || !f32_is_normal(b) {
        return None;
    }
    let (x, y) = (f64::from(f32::from_bits(a)), f64::from(f32::from_bits(b)));
    let r = (x / y) as f32;
    // r * y is exact in binary64 (48 bits), so it equals x iff r is exact.
    f32_result_ok(r).then(|| (r.to_bits(), inexact_if(f64::from(r) * y != x)))
}

pub(crate) fn f64_div(a: u64, b: u64) -> Option<(u64, Flags)> {
    if !f64_is_normal(a) || !f64_is_normal(b) {
        return None;
    }
    let r = f64::from_bits(a) / f64::from_bits(b);
    f64_result_ok(r).then(|| (r.to_bits(), inexact_if(!f64_product_is(r.to_bits(), b, a))))
}

pub(crate) fn f32_sqrt(a: u32) -> Option<(u32, Flags)> {
    if !f32_is_normal(a) || a >> 31 != 0 {
        return None;
    }
    let x = f64::from(f32::from_bits(a));
    let r = x.sqrt() as f32;
    let wide = f64::from(r);
    f32_result_ok(r).then(|| (r.to_bits(), inexact_if(wide * wide != x)))
}

pub(crate) fn f64_sqrt(a: u64) -> Option<(u64, Flags)> {
    if !f64_is_normal(a) || a >> 63 != 0 {
        return None;
    }
    let r = f64::from_bits(a).sqrt();
    f64_result_ok(r).then(|| {
        (
            r.to_bits(),
            inexact_if(!f64_product_is(r.to_bits(), r.to_bits(), a)),
        )
    })
}
