//! Replays results recorded from `qemu-riscv64` (Debian qemu-user 7.2).
//!
//! `testdata/qemu_vectors.txt` was produced once by
//! `testdata/gen_qemu_vectors.py`, which runs `testdata/qemu_vectors.c` (one
//! real F/D instruction per line, dynamic rounding mode from `frm`) under
//! qemu. It is a third, independent reference besides the hand-derived cases
//! and the APFloat oracle, and it pins the RISC-V-specific conventions
//! (canonical NaNs, NV for `fma(0, inf, qNaN)`, the `fcvt` saturation table,
//! tininess after rounding). The test itself needs neither tool.

use super::*;

const VECTORS: &str = include_str!("testdata/qemu_vectors.txt");

/// The register value our function produces for one recorded instruction,
/// as qemu leaves it in the destination register (single-precision results
/// without their NaN-boxing, 32-bit integer results sign-extended).
fn run(op: &str, rm: RoundingMode, a: u64, b: u64, c: u64) -> Option<(u64, Flags)> {
    let (s_a, s_b, s_c) = (a as u32, b as u32, c as u32);
    let single = |(r, f): (u32, Flags)| (u64::from(r), f);
    let boolean = |(r, f): (bool, Flags)| (u64::from(r), f);
    let word = |(r, f): (i32, Flags)| (i64::from(r) as u64, f);
    let uword = |(r, f): (u32, Flags)| (i64::from(r as i32) as u64, f);
    let result = match op {
        "f32_add" => single(f32_add(s_a, s_b, rm)),
        "f32_sub" => single(f32_sub(s_a, s_b, rm)),
        "f32_mul" => single(f32_mul(s_a, s_b, rm)),
        "f32_div" => single(f32_div(s_a, s_b, rm)),
        "f32_sqrt" => single(f32_sqrt(s_a, rm)),
        "f32_fmadd" => single(f32_fma(s_a, s_b, s_c, rm, false, false)),
        "f32_fmsub" => single(f32_fma(s_a, s_b, s_c, rm, false, true)),
        "f32_fnmsub" => single(f32_fma(s_a, s_b, s_c, rm, true, false)),
        "f32_fnmadd" => single(f32_fma(s_a, s_b, s_c, rm, true, true)),
        "f32_min" => single(f32_min(s_a, s_b)),
        "f32_max" => single(f32_max(s_a, s_b)),
        "f32_eq" => boolean(f32_eq(s_a, s_b)),
        "f32_lt" => boolean(f32_lt(s_a, s_b)),
        "f32_le" => boolean(f32_le(s_a, s_b)),
        "f32_classify" => (f32_classify(s_a), Flags::default()),
        "f32_to_i32" => word(f32_to_i32(s_a, rm)),
        "f32_to_u32" => uword(f32_to_u32(s_a, rm)),
        "f32_to_i64" => {
            let (r, f) = f32_to_i64(s_a, rm);
            (r as u64, f)
        }
        "f32_to_u64" => f32_to_u64(s_a, rm),
        "i32_to_f32" => single(i32_to_f32(a as i32, rm)),
        "u32_to_f32" => single(u32_to_f32(a as u32, rm)),
        "i64_to_f32" => single(i64_to_f32(a as i64, rm)),
        "u64_to_f32" => single(u64_to_f32(a, rm)),
        "f64_add" => f64_add(a, b, rm),
        "f64_sub" => f64_sub(a, b, rm),
        "f64_mul" => f64_mul(a, b, rm),
        "f64_div" => f64_div(a, b, rm),
        "f64_sqrt" => f64_sqrt(a, rm),
        "f64_fmadd" => f64_fma(a, b, c, rm, false, false),
        "f64_fmsub" => f64_fma(a, b, c, rm, false, true),
        "f64_fnmsub" => f64_fma(a, b, c, rm, true, false),
        "f64_fnmadd" => f64_fma(a, b, c, rm, true, true),
        "f64_min" => f64_min(a, b),
        "f64_max" => f64_max(a, b),
        "f64_eq" => boolean(f64_eq(a, b)),
        "f64_lt" => boolean(f64_lt(a, b)),
        "f64_le" => boolean(f64_le(a, b)),
        "f64_classify" => (f64_classify(a), Flags::default()),
        "f64_to_i32" => word(f64_to_i32(a, rm)),
        "f64_to_u32" => uword(f64_to_u32(a, rm)),
        "f64_to_i64" => {
            let (r, f) = f64_to_i64(a, rm);
            (r as u64, f)
        }
        "f64_to_u64" => f64_to_u64(a, rm),
        "i32_to_f64" => i32_to_f64(a as i32, rm),
        "u32_to_f64" => u32_to_f64(a as u32, rm),
        "i64_to_f64" => i64_to_f64(a as i64, rm),
        "u64_to_f64" => u64_to_f64(a, rm),
        "f32_to_f64" => f32_to_f64(s_a),
        "f64_to_f32" => single(f64_to_f32(a, rm)),
        _ => return None,
    };
    Some(result)
}

fn hex(field: Option<&str>) -> u64 {
    let text = field.unwrap_or_else(|| panic!("short vector line"));
    u64::from_str_radix(text, 16).unwrap_or_else(|e| panic!("bad hex {text:?}: {e}"))
}

#[test]
fn matches_results_recorded_from_qemu() {
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for line in VECTORS.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let op = fields.next().unwrap_or_default();
        let rm_bits: u8 = fields
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(u8::MAX);
        let rm = RoundingMode::from_bits(rm_bits).unwrap_or_else(|| panic!("bad rm in {line:?}"));
        let (a, b, c) = (hex(fields.next()), hex(fields.next()), hex(fields.next()));
        let want = (hex(fields.next()), Flags(hex(fields.next()) as u8));
        let got = run(op, rm, a, b, c).unwrap_or_else(|| panic!("unknown op in {line:?}"));
        if got != want {
            mismatches.push(format!("{line}: got {:#x} {:#x}", got.0, got.1.0));
        }
        checked += 1;
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(checked > 3000, "only {checked} vectors");
}
