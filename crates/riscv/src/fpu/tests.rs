//! Hand-derived edge cases for every operation and rounding mode.
//!
//! Expected values are worked out from the definitions (noted next to each
//! case), not produced by the code under test.

use super::*;

use RoundingMode::{Down, NearestEven as Rne, NearestMaxMagnitude as Rmm, TowardZero as Rtz, Up};

const ALL_MODES: [RoundingMode; 5] = [Rne, Rtz, Down, Up, Rmm];

const NX: Flags = Flags::INEXACT;
const UF: Flags = Flags::UNDERFLOW;
const OF: Flags = Flags::OVERFLOW;
const DZ: Flags = Flags::DIVIDE_BY_ZERO;
const NV: Flags = Flags::INVALID;
const NONE: Flags = Flags(0);

const ONE: u32 = 0x3f80_0000;
const NEG_ONE: u32 = 0xbf80_0000;
const TWO: u32 = 0x4000_0000;
const POS_ZERO: u32 = 0;
const NEG_ZERO: u32 = 0x8000_0000;
const POS_INF: u32 = 0x7f80_0000;
const NEG_INF: u32 = 0xff80_0000;
const MAX: u32 = 0x7f7f_ffff;
const MIN_NORMAL: u32 = 0x0080_0000;
const MIN_SUB: u32 = 0x0000_0001;
const QNAN_PAYLOAD: u32 = 0xffc1_2345;
const SNAN: u32 = 0x7f80_0001;
const CNAN: u32 = F32_CANONICAL_NAN;

const D_ONE: u64 = 0x3ff0_0000_0000_0000;
const D_POS_INF: u64 = 0x7ff0_0000_0000_0000;
const D_MAX: u64 = 0x7fef_ffff_ffff_ffff;
const D_SNAN: u64 = 0x7ff0_0000_0000_0001;
const D_QNAN_PAYLOAD: u64 = 0xfff8_dead_beef_0001;
const D_CNAN: u64 = F64_CANONICAL_NAN;

fn f(x: f32) -> u32 {
    x.to_bits()
}
fn d(x: f64) -> u64 {
    x.to_bits()
}

#[test]
fn rounding_mode_encoding_round_trips() {
    for bits in 0..=4u8 {
        let rm = RoundingMode::from_bits(bits).map(RoundingMode::to_bits);
        assert_eq!(rm, Some(bits));
    }
    for bits in 5..=255u8 {
        assert_eq!(RoundingMode::from_bits(bits), None);
    }
}

#[test]
fn flags_use_the_fflags_layout() {
    assert_eq!((NX | UF | OF | DZ | NV).0, 0x1f);
    let mut acc = Flags::default();
    acc |= OF;
    acc |= NX;
    assert_eq!(acc, Flags(0x05));
    assert!(acc.contains(OF) && !acc.contains(NV) && !acc.is_empty());
}

#[test]
fn add_halfway_one_plus_half_ulp_in_every_mode() {
    // 1 + 2^-24 is exactly halfway between 1 and 1 + 2^-23.
    let half_ulp = f(2f32.powi(-24));
    let expected = [
        (Rne, ONE),     // tie to even: 1 has an even significand
        (Rtz, ONE),     // truncate
        (Down, ONE),    // positive: truncate
        (Up, ONE + 1),  // any inexact positive goes up
        (Rmm, ONE + 1), // tie away from zero
    ];
    for (rm, bits) in expected {
        assert_eq!(f32_add(ONE, half_ulp, rm), (bits, NX), "{rm:?}");
    }
    // The negated sum mirrors the directed modes.
    let neg_half_ulp = half_ulp | 0x8000_0000;
    let expected = [
        (Rne, NEG_ONE),
        (Rtz, NEG_ONE),
        (Down, NEG_ONE + 1),
        (Up, NEG_ONE),
        (Rmm, NEG_ONE + 1),
    ];
    for (rm, bits) in expected {
        assert_eq!(f32_add(NEG_ONE, neg_half_ulp, rm), (bits, NX), "{rm:?}");
    }
}

#[test]
fn add_above_and_below_half_ulp() {
    // 1 + 0.75 ulp: nearest modes go up, truncating ones stay.
    let three_quarter = f(1.5 * 2f32.powi(-24));
    for (rm, bits) in [
        (Rne, ONE + 1),
        (Rtz, ONE),
        (Down, ONE),
        (Up, ONE + 1),
        (Rmm, ONE + 1),
    ] {
        assert_eq!(f32_add(ONE, three_quarter, rm), (bits, NX), "{rm:?}");
    }
    // 1 + 0.25 ulp: only rounding up leaves 1.
    let quarter = f(2f32.powi(-25));
    for (rm, bits) in [
        (Rne, ONE),
        (Rtz, ONE),
        (Down, ONE),
        (Up, ONE + 1),
        (Rmm, ONE),
    ] {
        assert_eq!(f32_add(ONE, quarter, rm), (bits, NX), "{rm:?}");
    }
    // 1 - 2^-60: far below an ulp, only the directed modes move.
    let tiny = f(2f32.powi(-60));
    for (rm, bits) in [
        (Rne, ONE),
        (Rtz, ONE - 1),
        (Down, ONE - 1),
        (Up, ONE),
        (Rmm, ONE),
    ] {
        assert_eq!(f32_sub(ONE, tiny, rm), (bits, NX), "{rm:?}");
    }
}

#[test]
fn add_of_min_subnormal_to_max_is_sticky_only() {
    // MAX + 2^-149: the addend is 2^-277 ulps, pure sticky.
    for (rm, bits, flags) in [
        (Rne, MAX, NX),
        (Rtz, MAX, NX),
        (Down, MAX, NX),
        (Up, POS_INF, OF | NX),
        (Rmm, MAX, NX),
    ] {
        assert_eq!(f32_add(MAX, MIN_SUB, rm), (bits, flags), "{rm:?}");
    }
}

#[test]
fn exact_results_raise_nothing() {
    assert_eq!(f32_add(f(0.5), f(0.25), Rne), (f(0.75), NONE));
    assert_eq!(f32_mul(f(3.0), f(-0.5), Rtz), (f(-1.5), NONE));
    assert_eq!(f32_div(f(1.0), f(4.0), Up), (f(0.25), NONE));
    assert_eq!(f32_sqrt(f(2.25), Down), (f(1.5), NONE));
    // Subnormal arithmetic that is exact raises no underflow.
    assert_eq!(f32_add(3, MIN_SUB, Rne), (4, NONE));
    assert_eq!(f32_mul(MIN_NORMAL, f(0.5), Rne), (0x0040_0000, NONE));
    assert_eq!(f32_sub(MIN_NORMAL, MIN_SUB, Rne), (0x007f_ffff, NONE));
}

#[test]
fn zero_signs_follow_ieee() {
    for rm in ALL_MODES {
        let cancel = if rm == Down { NEG_ZERO } else { POS_ZERO };
        assert_eq!(f32_add(POS_ZERO, NEG_ZERO, rm), (cancel, NONE), "{rm:?}");
        assert_eq!(f32_add(NEG_ZERO, NEG_ZERO, rm), (NEG_ZERO, NONE), "{rm:?}");
        assert_eq!(f32_sub(ONE, ONE, rm), (cancel, NONE), "{rm:?}");
        assert_eq!(f32_sub(NEG_ZERO, POS_ZERO, rm), (NEG_ZERO, NONE), "{rm:?}");
        assert_eq!(
            f64_sub(D_ONE, D_ONE, rm),
            (u64::from(cancel) << 32, NONE),
            "{rm:?}"
        );
        assert_eq!(f32_mul(NEG_ZERO, f(5.0), rm), (NEG_ZERO, NONE), "{rm:?}");
        assert_eq!(f32_div(POS_ZERO, f(-5.0), rm), (NEG_ZERO, NONE), "{rm:?}");
        assert_eq!(f32_add(NEG_ZERO, ONE, rm), (ONE, NONE), "{rm:?}");
    }
}

#[test]
fn invalid_operations_give_canonical_nan() {
    assert_eq!(f32_add(POS_INF, NEG_INF, Rne), (CNAN, NV));
    assert_eq!(f32_sub(POS_INF, POS_INF, Rne), (CNAN, NV));
    assert_eq!(f32_mul(POS_ZERO, NEG_INF, Rne), (CNAN, NV));
    assert_eq!(f32_div(POS_ZERO, NEG_ZERO, Rne), (CNAN, NV));
    assert_eq!(f32_div(POS_INF, NEG_INF, Rne), (CNAN, NV));
    assert_eq!(f32_sqrt(NEG_ONE, Rne), (CNAN, NV));
    assert_eq!(f32_sqrt(NEG_INF, Rne), (CNAN, NV));
    assert_eq!(f32_sqrt(MIN_SUB | 0x8000_0000, Rne), (CNAN, NV));
    assert_eq!(f64_mul(D_POS_INF, 0, Rne), (D_CNAN, NV));
}

#[test]
fn nan_operands_never_propagate_payloads() {
    assert_eq!(f32_add(QNAN_PAYLOAD, ONE, Rne), (CNAN, NONE));
    assert_eq!(f32_mul(ONE, QNAN_PAYLOAD, Rne), (CNAN, NONE));
    assert_eq!(f32_div(SNAN, ONE, Rne), (CNAN, NV));
    assert_eq!(f32_sub(QNAN_PAYLOAD, SNAN, Rne), (CNAN, NV));
    assert_eq!(f32_sqrt(QNAN_PAYLOAD, Rne), (CNAN, NONE));
    assert_eq!(f32_sqrt(SNAN, Rne), (CNAN, NV));
    // A NaN wins over the invalid-looking rest: inf - inf with a qNaN is quiet.
    assert_eq!(f32_add(POS_INF, QNAN_PAYLOAD, Rne), (CNAN, NONE));
    assert_eq!(f64_add(D_QNAN_PAYLOAD, D_ONE, Rne), (D_CNAN, NONE));
    assert_eq!(f64_mul(D_SNAN, D_ONE, Rne), (D_CNAN, NV));
}

#[test]
fn infinities() {
    assert_eq!(f32_add(POS_INF, f(-1e30), Rne), (POS_INF, NONE));
    assert_eq!(f32_mul(NEG_INF, f(-2.0), Rne), (POS_INF, NONE));
    assert_eq!(f32_div(NEG_INF, f(2.0), Rne), (NEG_INF, NONE));
    assert_eq!(f32_div(f(2.0), NEG_INF, Rne), (NEG_ZERO, NONE));
    assert_eq!(f32_sqrt(POS_INF, Rne), (POS_INF, NONE));
}

#[test]
fn divide_by_zero() {
    assert_eq!(f32_div(ONE, POS_ZERO, Rne), (POS_INF, DZ));
    assert_eq!(f32_div(ONE, NEG_ZERO, Rne), (NEG_INF, DZ));
    assert_eq!(f32_div(MIN_SUB | 0x8000_0000, NEG_ZERO, Rtz), (POS_INF, DZ));
    // Infinity over zero is exact: no DZ.
    assert_eq!(f32_div(POS_INF, POS_ZERO, Rne), (POS_INF, NONE));
    assert_eq!(f64_div(D_ONE, 0, Rne), (D_POS_INF, DZ));
}

#[test]
fn overflow_depends_on_mode_and_sign() {
    let expected = [
        (Rne, POS_INF, NEG_INF),
        (Rtz, MAX, MAX | 0x8000_0000),
        (Down, MAX, NEG_INF),
        (Up, POS_INF, MAX | 0x8000_0000),
        (Rmm, POS_INF, NEG_INF),
    ];
    for (rm, pos, neg) in expected {
        assert_eq!(f32_add(MAX, MAX, rm), (pos, OF | NX), "{rm:?}");
        assert_eq!(f32_mul(MAX, f(-2.0), rm), (neg, OF | NX), "{rm:?}");
        assert_eq!(f32_div(MAX, f(0.5), rm), (pos, OF | NX), "{rm:?}");
        assert_eq!(f64_to_f32(d(1e300), rm), (pos, OF | NX), "{rm:?}");
        let d_neg = if neg == NEG_INF {
            D_POS_INF | 1 << 63
        } else {
            D_MAX | 1 << 63
        };
        assert_eq!(f64_mul(D_MAX, d(-2.0), rm), (d_neg, OF | NX), "{rm:?}");
    }
    // MAX + half an ulp of MAX rounds to even (infinity) in RNE: overflow.
    let half_ulp_of_max = f(2f32.powi(103));
    assert_eq!(f32_add(MAX, half_ulp_of_max, Rne), (POS_INF, OF | NX));
    assert_eq!(f32_add(MAX, half_ulp_of_max, Rtz), (MAX, NX));
}

#[test]
fn underflow_to_zero_and_to_min_subnormal() {
    // 2^-150 is half of the smallest subnormal: a tie between 0 and 2^-149.
    let half = f(0.5);
    for (rm, bits) in [(Rne, 0), (Rtz, 0), (Down, 0), (Up, MIN_SUB), (Rmm, MIN_SUB)] {
        assert_eq!(f32_mul(MIN_SUB, half, rm), (bits, UF | NX), "{rm:?}");
    }
    // 3 * 2^-151 = 0.75 of the smallest subnormal.
    let three_quarters = f(0.75);
    for (rm, bits) in [
        (Rne, MIN_SUB),
        (Rtz, 0),
        (Down, 0),
        (Up, MIN_SUB),
        (Rmm, MIN_SUB),
    ] {
        assert_eq!(
            f32_mul(MIN_SUB, three_quarters, rm),
            (bits, UF | NX),
            "{rm:?}"
        );
    }
    // Negative: the directed modes swap.
    let neg_half = f(-0.5);
    for (rm, bits) in [
        (Rne, NEG_ZERO),
        (Rtz, NEG_ZERO),
        (Down, MIN_SUB | 0x8000_0000),
        (Up, NEG_ZERO),
        (Rmm, MIN_SUB | 0x8000_0000),
    ] {
        assert_eq!(f32_mul(MIN_SUB, neg_half, rm), (bits, UF | NX), "{rm:?}");
    }
}

#[test]
fn tininess_is_detected_after_rounding() {
    // (1 - 2^-24) * 2^-126 = 2^-126 - 2^-150 is exact at 24 bits with an
    // unbounded exponent, so it is tiny; in the subnormal range it is a tie
    // between 0x7fffff and 0x800000 (even). UF must be raised in every mode.
    let below_one = 0x3f7f_ffff;
    for (rm, bits) in [
        (Rne, MIN_NORMAL),
        (Rtz, 0x007f_ffff),
        (Down, 0x007f_ffff),
        (Up, MIN_NORMAL),
        (Rmm, MIN_NORMAL),
    ] {
        assert_eq!(
            f32_mul(below_one, MIN_NORMAL, rm),
            (bits, UF | NX),
            "{rm:?}"
        );
    }

    // 2^-126 - 2^-151: with 24 bits and an unbounded exponent it is a tie
    // between 2^-126 - 2^-150 and 2^-126; RNE picks 2^-126 (even), so it is
    // NOT tiny and only NX is raised; RTZ stays below 2^-126, so UF.
    let tie = d(2f64.powi(-126) - 2f64.powi(-151));
    for (rm, bits, flags) in [
        (Rne, MIN_NORMAL, NX),
        (Rtz, 0x007f_ffff, UF | NX),
        (Down, 0x007f_ffff, UF | NX),
        (Up, MIN_NORMAL, NX),
        (Rmm, MIN_NORMAL, NX),
    ] {
        assert_eq!(f64_to_f32(tie, rm), (bits, flags), "{rm:?}");
    }
    // 2^-126 - 2^-152 is above that midpoint: RNE is not tiny either.
    let above = d(2f64.powi(-126) - 2f64.powi(-152));
    assert_eq!(f64_to_f32(above, Rne), (MIN_NORMAL, NX));
    // 2^-126 - 2^-150 + 2^-160 lies between the two midpoints: above the
    // subnormal one (so RNE delivers 2^-126) but below the unbounded one
    // (so it is tiny): UF although the result is normal.
    let between = d(2f64.powi(-126) - 2f64.powi(-150) + 2f64.powi(-160));
    assert_eq!(f64_to_f32(between, Rne), (MIN_NORMAL, UF | NX));
    // Just below the subnormal midpoint, RNE delivers the largest subnormal.
    let below = d(2f64.powi(-126) - 2f64.powi(-150) - 2f64.powi(-160));
    assert_eq!(f64_to_f32(below, Rne), (0x007f_ffff, UF | NX));

    // The same boundary for binary64 through fma: (1 - 2^-53) * 2^-1022 + 0.
    let d_below_one = 0x3fef_ffff_ffff_ffff;
    let d_min_normal = 0x0010_0000_0000_0000;
    assert_eq!(
        f64_fma(d_below_one, d_min_normal, 0, Rne, false, false),
        (d_min_normal, UF | NX)
    );
    assert_eq!(
        f64_mul(d_below_one, d_min_normal, Rtz),
        (d_min_normal - 1, UF | NX)
    );
}

#[test]
fn division_rounding_of_one_third() {
    // 1/3 = 1.0101...b * 2^-2; the first dropped bit is 1 with more bits
    // after it, so it lies above the midpoint.
    for (rm, bits) in [
        (Rne, 0x3eaa_aaab),
        (Rtz, 0x3eaa_aaaa),
        (Down, 0x3eaa_aaaa),
        (Up, 0x3eaa_aaab),
        (Rmm, 0x3eaa_aaab),
    ] {
        assert_eq!(f32_div(ONE, f(3.0), rm), (bits, NX), "{rm:?}");
        assert_eq!(f32_div(NEG_ONE, f(-3.0), rm), (bits, NX), "{rm:?}");
    }
    // For binary64 the dropped tail of 1/3 starts with 0101...: below half.
    for (rm, bits) in [
        (Rne, 0x3fd5_5555_5555_5555),
        (Rtz, 0x3fd5_5555_5555_5555),
        (Up, 0x3fd5_5555_5555_5556),
        (Rmm, 0x3fd5_5555_5555_5555),
    ] {
        assert_eq!(f64_div(D_ONE, d(3.0), rm), (bits, NX), "{rm:?}");
    }
}

#[test]
fn square_root_rounding() {
    // sqrt(2) = 1.0110101000001001111001100|110... : the bit after the 23rd
    // fraction bit is 0, so nearest rounds down and RUP is one ulp above.
    let rne = 0x3fb5_04f3;
    let r = f64::from(f32::from_bits(rne));
    assert!(
        r * r < 2.0,
        "derivation check: the truncated root squares below 2"
    );
    for (rm, bits) in [
        (Rne, rne),
        (Rtz, rne),
        (Down, rne),
        (Up, rne + 1),
        (Rmm, rne),
    ] {
        assert_eq!(f32_sqrt(TWO, rm), (bits, NX), "{rm:?}");
    }
    assert_eq!(f32_sqrt(NEG_ZERO, Rne), (NEG_ZERO, NONE));
    assert_eq!(f32_sqrt(POS_ZERO, Rne), (POS_ZERO, NONE));
    // sqrt(2^-149) = 2^-74.5: a subnormal input gives a normal result.
    assert_eq!(f32_sqrt(MIN_SUB, Rne), (f(2f32.powf(-74.5)), NX));
    // sqrt(4 * 2^-1074) = 2^-536 exactly.
    assert_eq!(f64_sqrt(4, Rne), (d(2f64.powi(-536)), NONE));
    assert_eq!(f64_sqrt(d(2.0), Rne), (d(2f64.sqrt()), NX));
}

#[test]
fn fused_multiply_add_rounds_once() {
    // (1 + 2^-23)^2 - (1 + 2^-22) = 2^-46 exactly; mul-then-add gives 0.
    let a = ONE + 1;
    let c = 0xbf80_0002;
    assert_eq!(
        f32_fma(a, a, c, Rne, false, false),
        (f(2f32.powi(-46)), NONE)
    );
    assert_eq!(f32_add(f32_mul(a, a, Rne).0, c, Rne), (POS_ZERO, NONE));
}

#[test]
fn fused_multiply_add_variants_and_signs() {
    let (two, three, one) = (f(2.0), f(3.0), ONE);
    assert_eq!(f32_fma(two, three, one, Rne, false, false), (f(7.0), NONE)); // fmadd
    assert_eq!(f32_fma(two, three, one, Rne, false, true), (f(5.0), NONE)); // fmsub
    assert_eq!(f32_fma(two, three, one, Rne, true, false), (f(-5.0), NONE)); // fnmsub
    assert_eq!(f32_fma(two, three, one, Rne, true, true), (f(-7.0), NONE)); // fnmadd
    // Exact cancellation: +0, or -0 when rounding down.
    for rm in ALL_MODES {
        let zero = if rm == Down { NEG_ZERO } else { POS_ZERO };
        assert_eq!(
            f32_fma(ONE, ONE, NEG_ONE, rm, false, false),
            (zero, NONE),
            "{rm:?}"
        );
        // A zero product plus a zero addend follows the addition rules.
        assert_eq!(
            f32_fma(NEG_ZERO, ONE, NEG_ZERO, rm, false, false),
            (NEG_ZERO, NONE)
        );
        assert_eq!(
            f32_fma(NEG_ZERO, ONE, POS_ZERO, rm, false, false),
            (zero, NONE)
        );
        assert_eq!(
            f32_fma(POS_ZERO, ONE, POS_ZERO, rm, true, true),
            (NEG_ZERO, NONE)
        );
    }
    // A zero product leaves the addend (here a subnormal) untouched.
    assert_eq!(
        f32_fma(POS_ZERO, MAX, MIN_SUB, Rne, false, true),
        (MIN_SUB | NEG_ZERO, NONE)
    );
}

#[test]
fn fused_multiply_add_invalid_cases() {
    // RISC-V raises NV for 0 * inf even with a quiet NaN addend.
    assert_eq!(
        f32_fma(POS_ZERO, POS_INF, QNAN_PAYLOAD, Rne, false, false),
        (CNAN, NV)
    );
    assert_eq!(
        f32_fma(NEG_INF, NEG_ZERO, ONE, Rne, false, false),
        (CNAN, NV)
    );
    assert_eq!(
        f64_fma(0, D_POS_INF, D_QNAN_PAYLOAD, Rne, false, false),
        (D_CNAN, NV)
    );
    // inf * x - inf is invalid; inf * x + inf is not.
    assert_eq!(f32_fma(POS_INF, TWO, POS_INF, Rne, false, true), (CNAN, NV));
    assert_eq!(
        f32_fma(POS_INF, TWO, POS_INF, Rne, false, false),
        (POS_INF, NONE)
    );
    assert_eq!(
        f32_fma(POS_INF, TWO, POS_INF, Rne, true, true),
        (NEG_INF, NONE)
    );
    // Quiet NaNs elsewhere are quiet; a signaling one anywhere is NV.
    assert_eq!(
        f32_fma(QNAN_PAYLOAD, POS_ZERO, POS_INF, Rne, false, false),
        (CNAN, NONE)
    );
    assert_eq!(f32_fma(ONE, ONE, SNAN, Rne, false, false), (CNAN, NV));
    // A finite product with an infinite addend is the infinity, even if
    // the product alone would overflow.
    assert_eq!(
        f32_fma(MAX, MAX, NEG_INF, Rne, false, false),
        (NEG_INF, NONE)
    );
}

#[test]
fn fused_multiply_add_overflow_and_underflow() {
    assert_eq!(
        f32_fma(MAX, TWO, NEG_ONE, Rne, false, false),
        (POS_INF, OF | NX)
    );
    assert_eq!(
        f32_fma(MAX, TWO, NEG_ONE, Rtz, false, false),
        (MAX, OF | NX)
    );
    // 2^-149 * 2^-1 + 0: a tie to zero in RNE.
    assert_eq!(
        f32_fma(MIN_SUB, f(0.5), POS_ZERO, Rne, false, false),
        (POS_ZERO, UF | NX)
    );
    assert_eq!(
        f32_fma(MIN_SUB, f(0.5), POS_ZERO, Up, false, false),
        (MIN_SUB, UF | NX)
    );
    // 2^-149 * 2^-1 - 2^-149 = -2^-150: a tie between -0 (even) and -2^-149.
    let neg_min = MIN_SUB | 0x8000_0000;
    assert_eq!(
        f32_fma(MIN_SUB, f(0.5), neg_min, Rne, false, false),
        (NEG_ZERO, UF | NX)
    );
    assert_eq!(
        f32_fma(MIN_SUB, f(0.5), neg_min, Rmm, false, false),
        (neg_min, UF | NX)
    );
    assert_eq!(
        f32_fma(MIN_SUB, f(0.5), neg_min, Down, false, false),
        (neg_min, UF | NX)
    );
    // A product far below the addend only contributes its sticky bit.
    assert_eq!(f32_fma(MIN_SUB, MIN_SUB, ONE, Rne, false, false), (ONE, NX));
    assert_eq!(
        f32_fma(MIN_SUB, MIN_SUB, ONE, Up, false, false),
        (ONE + 1, NX)
    );
    // tiny - 1 truncates towards zero to -(1 - 2^-24).
    assert_eq!(
        f32_fma(MIN_SUB, MIN_SUB, ONE, Rtz, false, true),
        (0xbf7f_ffff, NX)
    );
    assert_eq!(
        f32_fma(MIN_SUB, MIN_SUB, ONE, Rtz, true, false),
        (0x3f7f_ffff, NX)
    );
}

#[test]
fn min_and_max() {
    assert_eq!(f32_min(NEG_ZERO, POS_ZERO), (NEG_ZERO, NONE));
    assert_eq!(f32_min(POS_ZERO, NEG_ZERO), (NEG_ZERO, NONE));
    assert_eq!(f32_max(NEG_ZERO, POS_ZERO), (POS_ZERO, NONE));
    assert_eq!(f32_max(POS_ZERO, NEG_ZERO), (POS_ZERO, NONE));
    assert_eq!(f32_min(f(-3.0), f(2.0)), (f(-3.0), NONE));
    assert_eq!(f32_max(NEG_INF, f(-3.0)), (f(-3.0), NONE));
    assert_eq!(f32_max(f(-3.0), f(-4.0)), (f(-3.0), NONE));
    assert_eq!(f32_min(MIN_SUB, POS_ZERO), (POS_ZERO, NONE));
    // One NaN: the number; signaling NaNs also raise NV.
    assert_eq!(f32_min(QNAN_PAYLOAD, ONE), (ONE, NONE));
    assert_eq!(f32_max(ONE, QNAN_PAYLOAD), (ONE, NONE));
    assert_eq!(f32_min(SNAN, ONE), (ONE, NV));
    assert_eq!(f32_max(NEG_INF, SNAN), (NEG_INF, NV));
    // Two NaNs: the canonical NaN.
    assert_eq!(f32_min(QNAN_PAYLOAD, QNAN_PAYLOAD), (CNAN, NONE));
    assert_eq!(f32_max(SNAN, QNAN_PAYLOAD), (CNAN, NV));
    assert_eq!(f64_min(1 << 63, 0), (1 << 63, NONE));
    assert_eq!(f64_max(D_SNAN, D_QNAN_PAYLOAD), (D_CNAN, NV));
    assert_eq!(f64_max(D_QNAN_PAYLOAD, D_ONE), (D_ONE, NONE));
}

#[test]
fn comparisons() {
    assert_eq!(f32_eq(POS_ZERO, NEG_ZERO), (true, NONE));
    assert_eq!(f32_lt(NEG_ZERO, POS_ZERO), (false, NONE));
    assert_eq!(f32_le(POS_ZERO, NEG_ZERO), (true, NONE));
    assert_eq!(f32_lt(f(-2.0), f(-1.0)), (true, NONE));
    assert_eq!(f32_lt(f(-1.0), f(-2.0)), (false, NONE));
    assert_eq!(f32_le(NEG_INF, MIN_SUB), (true, NONE));
    assert_eq!(f32_lt(MIN_SUB, MIN_SUB + 1), (true, NONE));
    assert_eq!(f32_eq(ONE, ONE + 1), (false, NONE));
    // feq is quiet, flt and fle are signaling.
    assert_eq!(f32_eq(QNAN_PAYLOAD, QNAN_PAYLOAD), (false, NONE));
    assert_eq!(f32_eq(SNAN, ONE), (false, NV));
    assert_eq!(f32_lt(QNAN_PAYLOAD, ONE), (false, NV));
    assert_eq!(f32_le(ONE, QNAN_PAYLOAD), (false, NV));
    assert_eq!(f64_eq(D_QNAN_PAYLOAD, D_ONE), (false, NONE));
    assert_eq!(f64_eq(D_SNAN, D_ONE), (false, NV));
    assert_eq!(f64_le(D_ONE, D_ONE), (true, NONE));
    assert_eq!(f64_lt(D_ONE, D_QNAN_PAYLOAD), (false, NV));
}

#[test]
fn classify_every_class() {
    let cases = [
        (NEG_INF, 0),
        (NEG_ONE, 1),
        (MIN_SUB | NEG_ZERO, 2),
        (NEG_ZERO, 3),
        (POS_ZERO, 4),
        (0x007f_ffff, 5),
        (MIN_NORMAL, 6),
        (POS_INF, 7),
        (SNAN, 8),
        (QNAN_PAYLOAD, 9),
        (CNAN, 9),
    ];
    for (bits, class) in cases {
        assert_eq!(f32_classify(bits), 1 << class, "{bits:#x}");
    }
    let d_cases = [
        (D_POS_INF | 1 << 63, 0),
        (D_MAX | 1 << 63, 1),
        (1 | 1 << 63, 2),
        (1 << 63, 3),
        (0, 4),
        (0x000f_ffff_ffff_ffff, 5),
        (D_ONE, 6),
        (D_POS_INF, 7),
        (D_SNAN, 8),
        (D_CNAN, 9),
    ];
    for (bits, class) in d_cases {
        assert_eq!(f64_classify(bits), 1 << class, "{bits:#x}");
    }
}

#[test]
fn float_to_integer_rounding() {
    // 2.5 and -2.5 in every mode.
    for (rm, pos, neg) in [
        (Rne, 2, -2),
        (Rtz, 2, -2),
        (Down, 2, -3),
        (Up, 3, -2),
        (Rmm, 3, -3),
    ] {
        assert_eq!(f32_to_i32(f(2.5), rm), (pos, NX), "{rm:?}");
        assert_eq!(f32_to_i32(f(-2.5), rm), (neg, NX), "{rm:?}");
        assert_eq!(f64_to_i64(d(2.5), rm), (i64::from(pos), NX), "{rm:?}");
        assert_eq!(f64_to_i64(d(-2.5), rm), (i64::from(neg), NX), "{rm:?}");
    }
    // Small magnitudes: 0.5 is a tie, 2^-149 is almost nothing.
    for (rm, half, tiny_neg) in [
        (Rne, 0, 0),
        (Rtz, 0, 0),
        (Down, 0, -1),
        (Up, 1, 0),
        (Rmm, 1, 0),
    ] {
        assert_eq!(f32_to_i32(f(0.5), rm), (half, NX), "{rm:?}");
        assert_eq!(f32_to_i64(MIN_SUB | NEG_ZERO, rm), (tiny_neg, NX), "{rm:?}");
    }
    assert_eq!(f32_to_i32(f(-7.0), Rne), (-7, NONE));
    assert_eq!(f32_to_i32(NEG_ZERO, Rne), (0, NONE));
    assert_eq!(f64_to_u64(d(1e19), Rne), (10_000_000_000_000_000_000, NONE));
}

#[test]
fn float_to_integer_saturation() {
    for rm in ALL_MODES {
        // NaN converts to the largest positive integer.
        assert_eq!(f32_to_i32(QNAN_PAYLOAD, rm), (i32::MAX, NV));
        assert_eq!(f32_to_u32(SNAN, rm), (u32::MAX, NV));
        assert_eq!(f32_to_i64(CNAN, rm), (i64::MAX, NV));
        assert_eq!(f64_to_u64(D_QNAN_PAYLOAD, rm), (u64::MAX, NV));
        assert_eq!(f64_to_i32(D_CNAN, rm), (i32::MAX, NV));
        // Infinities.
        assert_eq!(f32_to_i32(NEG_INF, rm), (i32::MIN, NV));
        assert_eq!(f32_to_u32(NEG_INF, rm), (0, NV));
        assert_eq!(f64_to_u64(D_POS_INF, rm), (u64::MAX, NV));
        assert_eq!(f64_to_i64(D_POS_INF | 1 << 63, rm), (i64::MIN, NV));
        // Exactly representable extremes are in range.
        assert_eq!(f32_to_i32(f(-2147483648.0), rm), (i32::MIN, NONE));
        assert_eq!(f32_to_i64(f(-(2f32.powi(63))), rm), (i64::MIN, NONE));
        // 2^31 and 2^63 are one past the signed maximum.
        assert_eq!(f32_to_i32(f(2147483648.0), rm), (i32::MAX, NV));
        assert_eq!(f64_to_i64(d(2f64.powi(63)), rm), (i64::MAX, NV));
        assert_eq!(f64_to_u64(d(18446744073709551616.0), rm), (u64::MAX, NV));
        assert_eq!(f64_to_u32(d(-1.0), rm), (0, NV));
        assert_eq!(f32_to_u64(MAX, rm), (u64::MAX, NV));
        assert_eq!(f32_to_i64(MAX | NEG_ZERO, rm), (i64::MIN, NV));
    }
    // Rounding decides whether a value is in range; NV excludes NX.
    let just_below = d(2147483647.5);
    assert_eq!(f64_to_i32(just_below, Rtz), (i32::MAX, NX));
    assert_eq!(f64_to_i32(just_below, Rne), (i32::MAX, NV));
    let just_beyond_min = d(-2147483648.75);
    assert_eq!(f64_to_i32(just_beyond_min, Up), (i32::MIN, NX));
    assert_eq!(f64_to_i32(just_beyond_min, Rmm), (i32::MIN, NV));
    // Negative fractions are valid for unsigned targets if they round to 0.
    assert_eq!(f32_to_u32(f(-0.5), Rtz), (0, NX));
    assert_eq!(f32_to_u32(f(-0.5), Rne), (0, NX));
    assert_eq!(f32_to_u32(f(-0.5), Rmm), (0, NV));
    assert_eq!(f32_to_u32(f(-0.5), Down), (0, NV));
    assert_eq!(f64_to_u64(d(-0.9), Up), (0, NX));
    assert_eq!(f64_to_u32(d(4294967295.4), Rne), (u32::MAX, NX));
    assert_eq!(f64_to_u32(d(4294967295.5), Rne), (u32::MAX, NV));
    // The u32 result of fcvt.wu is the raw pattern; the caller sign-extends.
    assert_eq!(f32_to_u32(f(3e9), Rne), (3_000_000_000, NONE));
}

#[test]
fn integer_to_float() {
    // 2^24 + 1 is a tie between 2^24 and 2^24 + 2.
    let (lo, hi) = (f(16777216.0), f(16777218.0));
    for (rm, bits) in [(Rne, lo), (Rtz, lo), (Down, lo), (Up, hi), (Rmm, hi)] {
        assert_eq!(i32_to_f32(16_777_217, rm), (bits, NX), "{rm:?}");
        assert_eq!(u64_to_f32(16_777_217, rm), (bits, NX), "{rm:?}");
    }
    // -(2^24 + 3) is a tie between -(2^24 + 2) (odd) and -(2^24 + 4) (even).
    let (near_zero, away) = (f(-16777218.0), f(-16777220.0));
    for (rm, bits) in [
        (Rne, away),
        (Rtz, near_zero),
        (Down, away),
        (Up, near_zero),
        (Rmm, away),
    ] {
        assert_eq!(i64_to_f32(-16_777_219, rm), (bits, NX), "{rm:?}");
    }
    assert_eq!(i32_to_f32(0, Down), (POS_ZERO, NONE));
    assert_eq!(i32_to_f32(-1, Rne), (NEG_ONE, NONE));
    assert_eq!(i32_to_f32(i32::MIN, Rne), (f(-2147483648.0), NONE));
    assert_eq!(i64_to_f64(i64::MIN, Rne), (d(-(2f64.powi(63))), NONE));
    assert_eq!(i32_to_f64(i32::MIN, Rne), (d(-2147483648.0), NONE));
    assert_eq!(u32_to_f64(u32::MAX, Rne), (d(4294967295.0), NONE));
    assert_eq!(u32_to_f32(u32::MAX, Rne), (f(4294967296.0), NX));
    assert_eq!(u32_to_f32(u32::MAX, Rtz), (f(4294967040.0), NX));
    // u64::MAX = 2^64 - 1 rounds to 2^64 or to the float just below it.
    assert_eq!(u64_to_f32(u64::MAX, Rne), (0x5f80_0000, NX));
    assert_eq!(u64_to_f32(u64::MAX, Rtz), (0x5f7f_ffff, NX));
    assert_eq!(u64_to_f64(u64::MAX, Down), (0x43ef_ffff_ffff_ffff, NX));
    assert_eq!(u64_to_f64(1 << 63, Down), (0x43e0_0000_0000_0000, NONE));
    assert_eq!(i64_to_f64((1 << 53) + 1, Rmm), (d(9007199254740994.0), NX));
}

#[test]
fn format_conversions() {
    assert_eq!(f32_to_f64(SNAN), (D_CNAN, NV));
    assert_eq!(f32_to_f64(QNAN_PAYLOAD), (D_CNAN, NONE));
    assert_eq!(f32_to_f64(MIN_SUB), (d(2f64.powi(-149)), NONE));
    assert_eq!(f32_to_f64(NEG_ZERO), (1 << 63, NONE));
    assert_eq!(f32_to_f64(NEG_INF), (D_POS_INF | 1 << 63, NONE));
    assert_eq!(f32_to_f64(MAX), (d(f64::from(f32::MAX)), NONE));
    assert_eq!(f64_to_f32(D_SNAN, Rne), (CNAN, NV));
    assert_eq!(f64_to_f32(D_QNAN_PAYLOAD, Rne), (CNAN, NONE));
    assert_eq!(f64_to_f32(d(0.1), Rne), (f(0.1), NX));
    assert_eq!(f64_to_f32(d(0.1), Rtz), (f(0.1) - 1, NX));
    assert_eq!(f64_to_f32(d(2f64.powi(-149)), Rne), (MIN_SUB, NONE));
    // The largest binary64 subnormal is far below half of 2^-149.
    let d_max_sub = 0x000f_ffff_ffff_ffff;
    assert_eq!(f64_to_f32(d_max_sub, Rne), (POS_ZERO, UF | NX));
    assert_eq!(f64_to_f32(d_max_sub, Up), (MIN_SUB, UF | NX));
    assert_eq!(f64_to_f32(d_max_sub | 1 << 63, Up), (NEG_ZERO, UF | NX));
    // Just below MAX + half an ulp (exact in binary64: 48 significant
    // bits): nearest rounds to MAX, no overflow.
    let below_overflow = d(f64::from(f32::MAX) + 2f64.powi(103) - 2f64.powi(80));
    assert_eq!(f64_to_f32(below_overflow, Rne), (MAX, NX));
    assert_eq!(f64_to_f32(below_overflow, Up), (POS_INF, OF | NX));
}

#[test]
fn binary64_halfway_cases() {
    let half_ulp = d(2f64.powi(-53));
    for (rm, bits) in [
        (Rne, D_ONE),
        (Rtz, D_ONE),
        (Down, D_ONE),
        (Up, D_ONE + 1),
        (Rmm, D_ONE + 1),
    ] {
        assert_eq!(f64_add(D_ONE, half_ulp, rm), (bits, NX), "{rm:?}");
    }
    // 0.1 + 0.2 in round-to-nearest is the famous 0.30000000000000004.
    assert_eq!(f64_add(d(0.1), d(0.2), Rne), (0x3fd3_3333_3333_3334, NX));
    assert_eq!(f64_add(d(0.1), d(0.2), Rtz), (0x3fd3_3333_3333_3333, NX));
    // MIN subnormal halved: tie to zero.
    assert_eq!(f64_mul(1, d(0.5), Rne), (0, UF | NX));
    assert_eq!(f64_mul(1, d(0.5), Rmm), (1, UF | NX));
    assert_eq!(f64_div(1, d(-2.0), Down), (1 | 1 << 63, UF | NX));
}

#[test]
fn strided_sweep_of_all_binary32_patterns_never_panics() {
    // A prime stride visits every exponent and many fraction patterns.
    let mut bits: u32 = 0;
    let mut count = 0u32;
    loop {
        for rm in ALL_MODES {
            let (r, flags) = f32_sqrt(bits, rm);
            assert!(flags.0 < 0x20);
            assert_eq!(f32_classify(r).count_ones(), 1);
            let _ = f32_to_i32(bits, rm);
            let _ = f32_to_u64(bits, rm);
            let _ = f32_mul(bits, bits.rotate_left(7), rm);
            let _ = f32_div(bits, bits.rotate_left(13), rm);
            let _ = f32_fma(
                bits,
                bits.rotate_left(3),
                bits.rotate_left(21),
                rm,
                false,
                true,
            );
        }
        // Widening then narrowing is the identity on non-NaN values.
        let is_nan = bits & 0x7f80_0000 == 0x7f80_0000 && bits & 0x007f_ffff != 0;
        if !is_nan {
            let (wide, flags) = f32_to_f64(bits);
            assert_eq!(flags, NONE);
            assert_eq!(f64_to_f32(wide, Rtz), (bits, NONE));
        }
        count += 1;
        match bits.checked_add(65_521) {
            Some(next) => bits = next,
            None => break,
        }
    }
    assert!(count > 65_000);
}
