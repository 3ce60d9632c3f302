//! The format-generic software core behind the public F/D functions.
//!
//! Every operation works on raw bit patterns widened to `u64` and a [`Fmt`]
//! describing the binary interchange format. Finite values are unpacked to an
//! integer significand and a power-of-two exponent (`value = sig * 2^exp`), the
//! exact result (or an exact prefix of it plus a sticky bit) is computed with
//! integer arithmetic, and [`round_pack`] performs the single rounding step with
//! IEEE 754 flags, detecting tininess after rounding as RISC-V requires.

use core::cmp::Ordering;

use super::{Flags, RoundingMode};

/// The constants of one IEEE 754 binary format.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fmt {
    /// Width of the biased exponent field.
    exp_bits: u32,
    /// Width of the trailing significand field.
    frac_bits: u32,
}

/// binary32 (RISC-V F).
pub(crate) const F32: Fmt = Fmt {
    exp_bits: 8,
    frac_bits: 23,
};
/// binary64 (RISC-V D).
pub(crate) const F64: Fmt = Fmt {
    exp_bits: 11,
    frac_bits: 52,
};

impl Fmt {
    /// Precision in bits, including the implicit leading bit.
    const fn precision(self) -> u32 {
        self.frac_bits + 1
    }
    const fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }
    /// Unbiased exponent of the smallest normal number.
    const fn emin(self) -> i32 {
        1 - self.bias()
    }
    /// Biased exponent field of infinities and NaNs.
    const fn exp_max(self) -> u64 {
        (1 << self.exp_bits) - 1
    }
    const fn frac_mask(self) -> u64 {
        (1 << self.frac_bits) - 1
    }
    const fn sign_bit(self) -> u64 {
        1 << (self.exp_bits + self.frac_bits)
    }
    const fn quiet_bit(self) -> u64 {
        1 << (self.frac_bits - 1)
    }
    /// The canonical quiet NaN: positive, quiet bit only.
    pub(crate) const fn canonical_nan(self) -> u64 {
        (self.exp_max() << self.frac_bits) | self.quiet_bit()
    }
    const fn infinity(self, sign: bool) -> u64 {
        self.sign(sign) | (self.exp_max() << self.frac_bits)
    }
    const fn max_finite(self, sign: bool) -> u64 {
        self.sign(sign) | (((self.exp_max() - 1) << self.frac_bits) | self.frac_mask())
    }
    const fn zero(self, sign: bool) -> u64 {
        self.sign(sign)
    }
    const fn sign(self, sign: bool) -> u64 {
        if sign { self.sign_bit() } else { 0 }
    }
}

/// What an operand is, with finite nonzero values as `sig * 2^exp`.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Zero,
    Finite { exp: i32, sig: u64 },
    Inf,
    QuietNan,
    SignalingNan,
}

#[derive(Clone, Copy, Debug)]
struct Unpacked {
    sign: bool,
    kind: Kind,
}

impl Unpacked {
    fn is_nan(self) -> bool {
        matches!(self.kind, Kind::QuietNan | Kind::SignalingNan)
    }
    fn is_snan(self) -> bool {
        matches!(self.kind, Kind::SignalingNan)
    }
}

fn unpack(f: Fmt, bits: u64) -> Unpacked {
    let sign = bits & f.sign_bit() != 0;
    let biased = (bits >> f.frac_bits) & f.exp_max();
    let frac = bits & f.frac_mask();
    let kind = if biased == f.exp_max() {
        if frac == 0 {
            Kind::Inf
        } else if frac & f.quiet_bit() != 0 {
            Kind::QuietNan
        } else {
            Kind::SignalingNan
        }
    } else if biased == 0 {
        if frac == 0 {
            Kind::Zero
        } else {
            Kind::Finite {
                exp: f.emin() - f.frac_bits as i32,
                sig: frac,
            }
        }
    } else {
        // `biased` < 2^11, so the conversion cannot truncate.
        Kind::Finite {
            exp: biased as i32 - f.bias() - f.frac_bits as i32,
            sig: frac | (1 << f.frac_bits),
        }
    };
    Unpacked { sign, kind }
}

/// Shifts a finite significand so its leading one sits at bit `precision - 1`.
fn normalize(f: Fmt, exp: i32, sig: u64) -> (i32, u64) {
    let target = 63 - (f.precision() - 1);
    let shift = sig.leading_zeros().saturating_sub(target);
    (exp - shift as i32, sig << shift)
}

/// Index of the most significant set bit of a nonzero value.
fn msb(x: u128) -> u32 {
    127 - x.leading_zeros()
}

/// Shifts `x` right by `shift` bits and reports whether nonzero bits were lost.
fn shift_right_lossy(x: u128, shift: u32) -> (u128, bool) {
    if shift == 0 {
        (x, false)
    } else if shift >= 128 {
        (0, x != 0)
    } else {
        (x >> shift, x & ((1u128 << shift) - 1) != 0)
    }
}

/// Rounds `(sig + e) / 2^shift` to an integer, where `e` lies strictly
/// between 0 and 1 when `sticky` is set and is 0 otherwise.
///
/// `sticky` may only be set when `shift >= 1`: the part below the rounding
/// point must then be fully described by the discarded bits and the sticky
/// flag. Returns the rounded magnitude and whether it is inexact.
fn round_shift(sig: u128, shift: u32, sticky: bool, sign: bool, rm: RoundingMode) -> (u128, bool) {
    if shift == 0 {
        // Only reachable with exact values: the callers guarantee it.
        return (sig, sticky);
    }
    let (quotient, half_cmp, discarded_nonzero) = if shift < 128 {
        let rem = sig & ((1u128 << shift) - 1);
        (sig >> shift, rem.cmp(&(1u128 << (shift - 1))), rem != 0)
    } else if shift == 128 {
        (0, sig.cmp(&(1u128 << 127)), sig != 0)
    } else {
        // Half of the rounding unit is at least 2^128, above any `sig`.
        (0, Ordering::Less, sig != 0)
    };
    let half_cmp = if half_cmp == Ordering::Equal && sticky {
        Ordering::Greater
    } else {
        half_cmp
    };
    let inexact = discarded_nonzero || sticky;
    let up = match rm {
        RoundingMode::NearestEven => {
            half_cmp == Ordering::Greater || (half_cmp == Ordering::Equal && quotient & 1 == 1)
        }
        RoundingMode::TowardZero => false,
        RoundingMode::Down => sign && inexact,
        RoundingMode::Up => !sign && inexact,
        RoundingMode::NearestMaxMagnitude => half_cmp != Ordering::Less,
    };
    (quotient + u128::from(up), inexact)
}

/// Rounds the nonzero value `(-1)^sign * (sig + e) * 2^exp` to the format,
/// where `e` is in (0, 1) when `sticky` is set and 0 otherwise.
///
/// When `sticky` is set the caller must supply at least `precision + 1`
/// significant bits in `sig`, so the sticky part lies below the round bit.
fn round_pack(
    f: Fmt,
    sign: bool,
    exp: i32,
    sig: u128,
    sticky: bool,
    rm: RoundingMode,
) -> (u64, Flags) {
    debug_assert!(sig != 0);
    debug_assert!(!sticky || msb(sig) >= f.precision());
    let p = f.precision() as i32;
    let top = msb(sig) as i32;
    // Unbiased exponent of the leading bit of the exact value.
    let lead = exp + top;
    let emin = f.emin();
    let mut ulp_exp = lead.max(emin) - (p - 1);
    let shift = ulp_exp - exp;
    let (mut q, inexact) = if shift <= 0 {
        // The value has fewer significant bits than the destination: exact.
        // `sig < 2^p` here, so the left shift cannot overflow.
        (sig << shift.unsigned_abs(), sticky)
    } else {
        round_shift(sig, shift.unsigned_abs(), sticky, sign, rm)
    };
    if q == 1u128 << p {
        // Rounding carried into a new binade.
        q >>= 1;
        ulp_exp += 1;
    }

    let mut flags = Flags::default();
    if inexact {
        flags |= Flags::INEXACT;
        // Tininess after rounding: the value rounded to `p` bits with an
        // unbounded exponent is below the smallest normal magnitude.
        let tiny = lead < emin && {
            let unbounded_shift = top - (p - 1);
            if unbounded_shift <= 0 {
                true
            } else {
                let (q2, _) = round_shift(sig, unbounded_shift.unsigned_abs(), sticky, sign, rm);
                !(q2 == 1u128 << p && lead + 1 >= emin)
            }
        };
        if tiny {
            flags |= Flags::UNDERFLOW;
        }
    }

    if q == 0 {
        return (f.zero(sign), flags);
    }
    let normal_threshold = 1u128 << (p - 1);
    let biased = if q < normal_threshold {
        0
    } else {
        i64::from(ulp_exp) + i64::from(p - 1) + i64::from(f.bias())
    };
    if biased >= f.exp_max() as i64 {
        flags |= Flags::OVERFLOW | Flags::INEXACT;
        let to_infinity = match rm {
            RoundingMode::NearestEven | RoundingMode::NearestMaxMagnitude => true,
            RoundingMode::TowardZero => false,
            RoundingMode::Down => sign,
            RoundingMode::Up => !sign,
        };
        let bits = if to_infinity {
            f.infinity(sign)
        } else {
            f.max_finite(sign)
        };
        return (bits, flags);
    }
    // `q < 2^p <= 2^53` and `0 <= biased < exp_max`: both fit their fields.
    let frac = (q as u64) & f.frac_mask();
    let bits = f.sign(sign) | ((biased as u64) << f.frac_bits) | frac;
    (bits, flags)
}

/// Result of an operation with a NaN operand: canonical NaN, NV on sNaN.
fn nan_result(f: Fmt, operands: &[Unpacked]) -> (u64, Flags) {
    let flags = if operands.iter().any(|u| u.is_snan()) {
        Flags::INVALID
    } else {
        Flags::default()
    };
    (f.canonical_nan(), flags)
}

fn invalid(f: Fmt) -> (u64, Flags) {
    (f.canonical_nan(), Flags::INVALID)
}

/// Sign of an exact zero sum of operands with different signs (or of an
/// exact cancellation): -0 only when rounding down.
fn cancellation_sign(rm: RoundingMode) -> bool {
    rm == RoundingMode::Down
}

/// The exact sum of two finite nonzero values `sig * 2^exp`, as an integer
/// significand, exponent and sticky bit; `None` if it is exactly zero.
///
/// Both significands must be below 2^126. The result carries at least 123
/// significant bits whenever the sticky bit is set.
fn add_exact(
    (sign_a, exp_a, sig_a): (bool, i32, u128),
    (sign_b, exp_b, sig_b): (bool, i32, u128),
) -> Option<(bool, i32, u128, bool)> {
    // Put both leading ones at bit 125, leaving room for a carry.
    let norm = |exp: i32, sig: u128| {
        let shift = sig.leading_zeros().saturating_sub(2);
        (exp - shift as i32, sig << shift)
    };
    let (exp_a, sig_a) = norm(exp_a, sig_a);
    let (exp_b, sig_b) = norm(exp_b, sig_b);
    let ((sign_big, exp_big, sig_big), (sign_small, exp_small, sig_small)) =
        if (exp_a, sig_a) >= (exp_b, sig_b) {
            ((sign_a, exp_a, sig_a), (sign_b, exp_b, sig_b))
        } else {
            ((sign_b, exp_b, sig_b), (sign_a, exp_a, sig_a))
        };
    let distance = (i64::from(exp_big) - i64::from(exp_small)).min(200) as u32;
    let (aligned, lost) = shift_right_lossy(sig_small, distance);
    if sign_big == sign_small {
        Some((sign_big, exp_big, sig_big + aligned, lost))
    } else {
        // |big| > |small| unless they are equal (then nothing was lost).
        let diff = sig_big - aligned;
        if lost {
            // big - (aligned + e) = (diff - 1) + (1 - e), with 1 - e in (0, 1).
            Some((sign_big, exp_big, diff - 1, true))
        } else if diff == 0 {
            None
        } else {
            Some((sign_big, exp_big, diff, false))
        }
    }
}

pub(crate) fn add(f: Fmt, a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    let (ua, ub) = (unpack(f, a), unpack(f, b));
    if ua.is_nan() || ub.is_nan() {
        return nan_result(f, &[ua, ub]);
    }
    match (ua.kind, ub.kind) {
        (Kind::Inf, Kind::Inf) if ua.sign != ub.sign => invalid(f),
        (Kind::Inf, _) => (f.infinity(ua.sign), Flags::default()),
        (_, Kind::Inf) => (f.infinity(ub.sign), Flags::default()),
        (Kind::Zero, Kind::Zero) => {
            let sign = if ua.sign == ub.sign {
                ua.sign
            } else {
                cancellation_sign(rm)
            };
            (f.zero(sign), Flags::default())
        }
        (Kind::Zero, _) => (b, Flags::default()),
        (_, Kind::Zero) => (a, Flags::default()),
        (Kind::Finite { exp: ea, sig: sa }, Kind::Finite { exp: eb, sig: sb }) => {
            match add_exact((ua.sign, ea, sa.into()), (ub.sign, eb, sb.into())) {
                Some((sign, exp, sig, sticky)) => round_pack(f, sign, exp, sig, sticky, rm),
                None => (f.zero(cancellation_sign(rm)), Flags::default()),
            }
        }
        // NaNs were handled above.
        _ => invalid(f),
    }
}

pub(crate) fn sub(f: Fmt, a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    // Flipping the sign keeps a NaN a NaN of the same kind.
    add(f, a, b ^ f.sign_bit(), rm)
}

pub(crate) fn mul(f: Fmt, a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    let (ua, ub) = (unpack(f, a), unpack(f, b));
    if ua.is_nan() || ub.is_nan() {
        return nan_result(f, &[ua, ub]);
    }
    let sign = ua.sign != ub.sign;
    match (ua.kind, ub.kind) {
        (Kind::Inf, Kind::Zero) | (Kind::Zero, Kind::Inf) => invalid(f),
        (Kind::Inf, _) | (_, Kind::Inf) => (f.infinity(sign), Flags::default()),
        (Kind::Zero, _) | (_, Kind::Zero) => (f.zero(sign), Flags::default()),
        (Kind::Finite { exp: ea, sig: sa }, Kind::Finite { exp: eb, sig: sb }) => {
            round_pack(f, sign, ea + eb, u128::from(sa) * u128::from(sb), false, rm)
        }
        _ => invalid(f),
    }
}

pub(crate) fn div(f: Fmt, a: u64, b: u64, rm: RoundingMode) -> (u64, Flags) {
    let (ua, ub) = (unpack(f, a), unpack(f, b));
    if ua.is_nan() || ub.is_nan() {
        return nan_result(f, &[ua, ub]);
    }
    let sign = ua.sign != ub.sign;
    match (ua.kind, ub.kind) {
        (Kind::Inf, Kind::Inf) | (Kind::Zero, Kind::Zero) => invalid(f),
        (Kind::Inf, _) => (f.infinity(sign), Flags::default()),
        (_, Kind::Inf) => (f.zero(sign), Flags::default()),
        (Kind::Zero, _) => (f.zero(sign), Flags::default()),
        (_, Kind::Zero) => (f.infinity(sign), Flags::DIVIDE_BY_ZERO),
        (Kind::Finite { exp: ea, sig: sa }, Kind::Finite { exp: eb, sig: sb }) => {
            let (ea, sa) = normalize(f, ea, sa);
            let (eb, sb) = normalize(f, eb, sb);
            // Both significands are in [2^(p-1), 2^p), so the quotient of the
            // shifted dividend is in (2^(p+1), 2^(p+3)): p + 2 bits at least.
            let extra = f.precision() + 2;
            let numerator = u128::from(sa) << extra;
            let divisor = u128::from(sb);
            let quotient = numerator / divisor;
            let sticky = !numerator.is_multiple_of(divisor);
            round_pack(f, sign, ea - eb - extra as i32, quotient, sticky, rm)
        }
        _ => invalid(f),
    }
}

/// Integer square root of `n < 2^120` and whether it was inexact.
///
/// A binary64 estimate is within a few units of the root (53 correct bits
/// of a root below 2^60); exact integer steps then fix it up.
fn isqrt(n: u128) -> (u128, bool) {
    debug_assert!(n < 1 << 120);
    let mut root = (n as f64).sqrt() as u128;
    while root * root > n {
        root -= 1;
    }
    while (root + 1) * (root + 1) <= n {
        root += 1;
    }
    (root, root * root != n)
}

pub(crate) fn sqrt(f: Fmt, a: u64, rm: RoundingMode) -> (u64, Flags) {
    let ua = unpack(f, a);
    if ua.is_nan() {
        return nan_result(f, &[ua]);
    }
    match ua.kind {
        Kind::Zero => (a, Flags::default()),
        _ if ua.sign => invalid(f),
        Kind::Inf => (a, Flags::default()),
        Kind::Finite { exp, sig } => {
            let (exp, sig) = normalize(f, exp, sig);
            // Widen the radicand to 2p + 3 or 2p + 4 bits with an even
            // exponent, so the root has at least p + 2 bits.
            let mut widen = f.precision() as i32 + 4;
            if (exp - widen) % 2 != 0 {
                widen += 1;
            }
            let radicand = u128::from(sig) << widen;
            let (root, sticky) = isqrt(radicand);
            round_pack(f, false, (exp - widen) / 2, root, sticky, rm)
        }
        _ => invalid(f),
    }
}

pub(crate) fn fma(
    f: Fmt,
    a: u64,
    b: u64,
    c: u64,
    rm: RoundingMode,
    negate_product: bool,
    negate_addend: bool,
) -> (u64, Flags) {
    let (ua, ub, uc) = (unpack(f, a), unpack(f, b), unpack(f, c));
    let zero_times_inf = matches!(
        (ua.kind, ub.kind),
        (Kind::Zero, Kind::Inf) | (Kind::Inf, Kind::Zero)
    );
    if zero_times_inf {
        // RISC-V raises NV for 0 * inf even when the addend is a quiet NaN.
        return invalid(f);
    }
    if ua.is_nan() || ub.is_nan() || uc.is_nan() {
        return nan_result(f, &[ua, ub, uc]);
    }
    let product_sign = (ua.sign != ub.sign) != negate_product;
    let addend_sign = uc.sign != negate_addend;
    let product_inf = matches!(ua.kind, Kind::Inf) || matches!(ub.kind, Kind::Inf);
    let product_zero = matches!(ua.kind, Kind::Zero) || matches!(ub.kind, Kind::Zero);
    match uc.kind {
        Kind::Inf if product_inf && product_sign != addend_sign => return invalid(f),
        Kind::Inf => return (f.infinity(addend_sign), Flags::default()),
        _ if product_inf => return (f.infinity(product_sign), Flags::default()),
        _ => {}
    }
    if product_zero {
        let bits = match uc.kind {
            Kind::Zero if addend_sign == product_sign => f.zero(addend_sign),
            Kind::Zero => f.zero(cancellation_sign(rm)),
            // The addend is representable, so the sum is exact.
            _ => (c & !f.sign_bit()) | f.sign(addend_sign),
        };
        return (bits, Flags::default());
    }
    let (Kind::Finite { exp: ea, sig: sa }, Kind::Finite { exp: eb, sig: sb }) = (ua.kind, ub.kind)
    else {
        return invalid(f);
    };
    let product = (product_sign, ea + eb, u128::from(sa) * u128::from(sb));
    match uc.kind {
        Kind::Zero => round_pack(f, product.0, product.1, product.2, false, rm),
        Kind::Finite { exp: ec, sig: sc } => {
            match add_exact(product, (addend_sign, ec, sc.into())) {
                Some((sign, exp, sig, sticky)) => round_pack(f, sign, exp, sig, sticky, rm),
                None => (f.zero(cancellation_sign(rm)), Flags::default()),
            }
        }
        _ => invalid(f),
    }
}

/// Orders non-NaN values; `zero_sign_matters` makes -0 sort below +0.
fn order_key(f: Fmt, bits: u64, zero_sign_matters: bool) -> i128 {
    let magnitude = i128::from(bits & !f.sign_bit());
    if bits & f.sign_bit() == 0 {
        magnitude
    } else if zero_sign_matters {
        -magnitude - 1
    } else {
        -magnitude
    }
}

/// minimumNumber (`want_max == false`) or maximumNumber of IEEE 754-2019.
pub(crate) fn min_max(f: Fmt, a: u64, b: u64, want_max: bool) -> (u64, Flags) {
    let (ua, ub) = (unpack(f, a), unpack(f, b));
    let flags = if ua.is_snan() || ub.is_snan() {
        Flags::INVALID
    } else {
        Flags::default()
    };
    let bits = match (ua.is_nan(), ub.is_nan()) {
        (true, true) => f.canonical_nan(),
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            let a_first = order_key(f, a, true) <= order_key(f, b, true);
            if a_first != want_max { a } else { b }
        }
    };
    (bits, flags)
}

/// The comparison predicates of `feq`, `flt` and `fle`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Compare {
    Equal,
    Less,
    LessOrEqual,
}

pub(crate) fn compare(f: Fmt, a: u64, b: u64, predicate: Compare) -> (bool, Flags) {
    let (ua, ub) = (unpack(f, a), unpack(f, b));
    if ua.is_nan() || ub.is_nan() {
        // feq is a quiet comparison; flt and fle are signaling.
        let signaling = predicate != Compare::Equal;
        let flags = if signaling || ua.is_snan() || ub.is_snan() {
            Flags::INVALID
        } else {
            Flags::default()
        };
        return (false, flags);
    }
    let (ka, kb) = (order_key(f, a, false), order_key(f, b, false));
    let result = match predicate {
        Compare::Equal => ka == kb,
        Compare::Less => ka < kb,
        Compare::LessOrEqual => ka <= kb,
    };
    (result, Flags::default())
}

pub(crate) fn classify(f: Fmt, a: u64) -> u64 {
    let ua = unpack(f, a);
    let is_subnormal = (a >> f.frac_bits) & f.exp_max() == 0;
    let bit = match (ua.kind, ua.sign) {
        (Kind::Inf, true) => 0,
        (Kind::Finite { .. }, true) if !is_subnormal => 1,
        (Kind::Finite { .. }, true) => 2,
        (Kind::Zero, true) => 3,
        (Kind::Zero, false) => 4,
        (Kind::Finite { .. }, false) if is_subnormal => 5,
        (Kind::Finite { .. }, false) => 6,
        (Kind::Inf, false) => 7,
        (Kind::SignalingNan, _) => 8,
        (Kind::QuietNan, _) => 9,
    };
    1 << bit
}

/// The destination of a float-to-integer conversion.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IntFormat {
    /// Two's complement signed rather than unsigned.
    pub(crate) signed: bool,
    /// Width in bits: 32 or 64.
    pub(crate) bits: u32,
}

impl IntFormat {
    fn max(self) -> u64 {
        if self.signed {
            (1u64 << (self.bits - 1)) - 1
        } else {
            u64::MAX >> (64 - self.bits)
        }
    }
    /// The most negative value as a sign-extended 64-bit pattern.
    fn min(self) -> u64 {
        if self.signed {
            (1u64 << (self.bits - 1)).wrapping_neg()
        } else {
            0
        }
    }
    /// Largest representable magnitude for the given sign.
    fn max_magnitude(self, negative: bool) -> u128 {
        match (self.signed, negative) {
            (true, true) => 1u128 << (self.bits - 1),
            (false, true) => 0,
            _ => u128::from(self.max()),
        }
    }
}

/// Float to integer per the RISC-V `fcvt` table, as a sign-extended pattern.
pub(crate) fn to_int(f: Fmt, a: u64, to: IntFormat, rm: RoundingMode) -> (u64, Flags) {
    let ua = unpack(f, a);
    let saturated = |negative: bool| {
        let bits = if negative { to.min() } else { to.max() };
        (bits, Flags::INVALID)
    };
    match ua.kind {
        Kind::QuietNan | Kind::SignalingNan => saturated(false),
        Kind::Inf => saturated(ua.sign),
        Kind::Zero => (0, Flags::default()),
        Kind::Finite { exp, sig } => {
            let (magnitude, inexact) = if exp >= 0 {
                if exp > 64 {
                    return saturated(ua.sign);
                }
                (u128::from(sig) << exp, false)
            } else {
                round_shift(sig.into(), exp.unsigned_abs(), false, ua.sign, rm)
            };
            if magnitude > to.max_magnitude(ua.sign) {
                return saturated(ua.sign);
            }
            // magnitude <= 2^64 - 1 here (or exactly 2^63 for a signed minimum).
            let low = magnitude as u64;
            let bits = if ua.sign { low.wrapping_neg() } else { low };
            let flags = if inexact {
                Flags::INEXACT
            } else {
                Flags::default()
            };
            (bits, flags)
        }
    }
}

/// Integer (sign and magnitude) to float, rounded per `rm`.
pub(crate) fn from_int(f: Fmt, negative: bool, magnitude: u64, rm: RoundingMode) -> (u64, Flags) {
    if magnitude == 0 {
        return (f.zero(false), Flags::default());
    }
    round_pack(f, negative, 0, magnitude.into(), false, rm)
}

/// Converts between formats: exact when widening, rounded when narrowing.
pub(crate) fn convert(from: Fmt, to: Fmt, a: u64, rm: RoundingMode) -> (u64, Flags) {
    let ua = unpack(from, a);
    match ua.kind {
        Kind::QuietNan | Kind::SignalingNan => nan_result(to, &[ua]),
        Kind::Inf => (to.infinity(ua.sign), Flags::default()),
        Kind::Zero => (to.zero(ua.sign), Flags::default()),
        Kind::Finite { exp, sig } => round_pack(to, ua.sign, exp, sig.into(), false, rm),
    }
}
