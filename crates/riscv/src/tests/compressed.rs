//! RV64C: every 16-bit word either decodes to exactly the op of its 32-bit
//! expansion, is a HINT with no effect, or is illegal. The expansion here is
//! an independent transcription of the spec's tables.

use proptest::prelude::*;
use tcgkit_tcg_core::{Flow, GuestMemory};

use super::enc;
use crate::Cpu;
use crate::decode::decode_raw;
use crate::exec::execute;
use crate::op::Inst;

enum Expansion {
    Word(u32),
    Hint,
    Illegal,
}
use Expansion::{Hint, Illegal, Word};

/// Scatters bits of `h` into an immediate: each pair is (bit of h, bit of imm).
fn gather(h: u32, map: &[(u32, u32)]) -> u32 {
    map.iter()
        .fold(0, |acc, &(from, to)| acc | (((h >> from) & 1) << to))
}

fn sext(v: u32, bits: u32) -> i32 {
    ((v << (32 - bits)) as i32) >> (32 - bits)
}

fn expand(h: u16) -> Expansion {
    let h = u32::from(h);
    let field = |hi: u32, lo: u32| (h >> lo) & ((1 << (hi - lo + 1)) - 1);
    let rdp = 8 + field(4, 2) as u8;
    let rs1p = 8 + field(9, 7) as u8;
    let rd = field(11, 7) as u8;
    let rs2 = field(6, 2) as u8;
    let imm6 = sext(
        gather(h, &[(12, 5), (6, 4), (5, 3), (4, 2), (3, 1), (2, 0)]),
        6,
    );
    let shamt = gather(h, &[(12, 5), (6, 4), (5, 3), (4, 2), (3, 1), (2, 0)]);
    let uimm_d = gather(h, &[(12, 5), (11, 4), (10, 3), (6, 7), (5, 6)]) as i32;
    let uimm_w = gather(h, &[(12, 5), (11, 4), (10, 3), (6, 2), (5, 6)]) as i32;
    let jump = sext(
        gather(
            h,
            &[
                (12, 11),
                (11, 4),
                (10, 9),
                (9, 8),
                (8, 10),
                (7, 6),
                (6, 7),
                (5, 3),
                (4, 2),
                (3, 1),
                (2, 5),
            ],
        ),
        12,
    );
    let branch = sext(
        gather(
            h,
            &[
                (12, 8),
                (11, 4),
                (10, 3),
                (6, 7),
                (5, 6),
                (4, 2),
                (3, 1),
                (2, 5),
            ],
        ),
        9,
    );
    match (h & 3, field(15, 13)) {
        (0, 0) => {
            let imm = gather(
                h,
                &[
                    (12, 5),
                    (11, 4),
                    (10, 9),
                    (9, 8),
                    (8, 7),
                    (7, 6),
                    (6, 2),
                    (5, 3),
                ],
            );
            if imm == 0 {
                Illegal
            } else {
                Word(enc::addi(rdp, 2, imm as i32))
            }
        }
        (0, 1) => Word(enc::fld(rdp, rs1p, uimm_d)),
        (0, 2) => Word(enc::load(2, rdp, rs1p, uimm_w)),
        (0, 3) => Word(enc::load(3, rdp, rs1p, uimm_d)),
        (0, 4) => Illegal,
        (0, 5) => Word(enc::fsd(rs1p, rdp, uimm_d)),
        (0, 6) => Word(enc::store(2, rs1p, rdp, uimm_w)),
        (0, 7) => Word(enc::store(3, rs1p, rdp, uimm_d)),
        (1, 0) if rd != 0 && imm6 == 0 => Hint,
        (1, 0) if rd == 0 && imm6 != 0 => Hint,
        (1, 0) => Word(enc::addi(rd, rd, imm6)),
        (1, 1) if rd == 0 => Illegal,
        (1, 1) => Word(enc::addiw(rd, rd, imm6)),
        (1, 2) if rd == 0 => Hint,
        (1, 2) => Word(enc::addi(rd, 0, imm6)),
        (1, 3) if rd == 2 => {
            let imm = sext(
                gather(h, &[(12, 9), (6, 4), (5, 6), (4, 8), (3, 7), (2, 5)]),
                10,
            );
            if imm == 0 {
                Illegal
            } else {
                Word(enc::addi(2, 2, imm))
            }
        }
        (1, 3) => {
            let imm = sext(
                gather(h, &[(12, 17), (6, 16), (5, 15), (4, 14), (3, 13), (2, 12)]),
                18,
            );
            match (imm, rd) {
                (0, _) => Illegal,
                (_, 0) => Hint,
                _ => Word(enc::lui(rd, imm)),
            }
        }
        (1, 4) => match field(11, 10) {
            0 | 1 if shamt == 0 => Hint,
            0 => Word(enc::srli(rs1p, rs1p, shamt)),
            1 => Word(enc::srai(rs1p, rs1p, shamt)),
            2 => Word(enc::andi(rs1p, rs1p, imm6)),
            _ => match (field(12, 12), field(6, 5)) {
                (0, 0) => Word(enc::sub(rs1p, rs1p, rdp)),
                (0, 1) => Word(enc::op(4, 0, rs1p, rs1p, rdp)),
                (0, 2) => Word(enc::op(6, 0, rs1p, rs1p, rdp)),
                (0, 3) => Word(enc::op(7, 0, rs1p, rs1p, rdp)),
                (1, 0) => Word(enc::op32(0, 0x20, rs1p, rs1p, rdp)),
                (1, 1) => Word(enc::op32(0, 0, rs1p, rs1p, rdp)),
                _ => Illegal,
            },
        },
        (1, 5) => Word(enc::jal(0, jump)),
        (1, 6) => Word(enc::b(0, rs1p, 0, branch)),
        (1, 7) => Word(enc::b(1, rs1p, 0, branch)),
        (2, 0) if rd == 0 || shamt == 0 => Hint,
        (2, 0) => Word(enc::slli(rd, rd, shamt)),
        (2, 1) => Word(enc::fld(
            rd,
            2,
            gather(h, &[(12, 5), (6, 4), (5, 3), (4, 8), (3, 7), (2, 6)]) as i32,
        )),
        (2, 2) if rd == 0 => Illegal,
        (2, 2) => Word(enc::load(
            2,
            rd,
            2,
            gather(h, &[(12, 5), (6, 4), (5, 3), (4, 2), (3, 7), (2, 6)]) as i32,
        )),
        (2, 3) if rd == 0 => Illegal,
        (2, 3) => Word(enc::load(
            3,
            rd,
            2,
            gather(h, &[(12, 5), (6, 4), (5, 3), (4, 8), (3, 7), (2, 6)]) as i32,
        )),
        (2, 4) => match (field(12, 12), rd, rs2) {
            (0, 0, 0) => Illegal,
            (0, _, 0) => Word(enc::jalr(0, rd, 0)),
            (0, 0, _) => Hint,
            (0, _, _) => Word(enc::add(rd, 0, rs2)),
            (_, 0, 0) => Word(enc::EBREAK),
            (_, _, 0) => Word(enc::jalr(1, rd, 0)),
            (_, 0, _) => Hint,
            _ => Word(enc::add(rd, rd, rs2)),
        },
        (2, 5) => Word(enc::fsd(
            2,
            rs2,
            gather(h, &[(12, 5), (11, 4), (10, 3), (9, 8), (8, 7), (7, 6)]) as i32,
        )),
        (2, 6) => Word(enc::store(
            2,
            2,
            rs2,
            gather(h, &[(12, 5), (11, 4), (10, 3), (9, 2), (8, 7), (7, 6)]) as i32,
        )),
        (2, 7) => Word(enc::store(
            3,
            2,
            rs2,
            gather(h, &[(12, 5), (11, 4), (10, 3), (9, 8), (8, 7), (7, 6)]) as i32,
        )),
        _ => unreachable!("quadrant 3 is not compressed"),
    }
}

/// The op with jump link lengths normalised (2 vs 4 is the only expected
/// difference between a compressed op and its expansion).
fn normalise(inst: Inst) -> Inst {
    match inst {
        Inst::Jal { rd, target, .. } => Inst::Jal { rd, len: 4, target },
        Inst::Jalr { rd, rs1, imm, .. } => Inst::Jalr {
            rd,
            rs1,
            len: 4,
            imm,
        },
        other => other,
    }
}

fn check(h: u16, pc: u64, seed: u64) {
    let decoded = decode_raw(u32::from(h), pc);
    match expand(h) {
        Word(w) => {
            let (c, len) = decoded.unwrap_or_else(|| panic!("{h:#06x} should decode"));
            assert_eq!(len, 2);
            let (full, len32) =
                decode_raw(w, pc).unwrap_or_else(|| panic!("expansion {w:#010x} of {h:#06x}"));
            assert_eq!(len32, 4);
            assert_eq!(normalise(c), normalise(full), "{h:#06x} vs {w:#010x}");
            if let Inst::Jal { len, .. } | Inst::Jalr { len, .. } = c {
                assert_eq!(len, 2);
            }
        }
        Hint => {
            let (c, _) = decoded.unwrap_or_else(|| panic!("HINT {h:#06x} should decode"));
            // A HINT changes no architectural state.
            let mut cpu = Cpu::new();
            for r in 1..32u8 {
                cpu.set_x(r, seed.wrapping_mul(u64::from(r)).rotate_left(u32::from(r)));
            }
            let before = cpu.clone();
            let mut mem = GuestMemory::new();
            assert_eq!(execute(&mut cpu, &c, pc, &mut mem), Flow::Next, "{h:#06x}");
            assert_eq!(cpu.x, before.x, "HINT {h:#06x} changed a register");
        }
        Illegal => assert_eq!(decoded, None, "{h:#06x} should be illegal"),
    }
}

#[test]
fn every_halfword_matches_its_expansion() {
    // 49152 compressed encodings: cheap enough to check exhaustively.
    for h in 0..=u16::MAX {
        if h & 3 != 3 {
            check(h, 0x1_0000, u64::from(h) | 0x9e37_79b9_0000_0000);
        }
    }
}

proptest! {
    #[test]
    fn compressed_matches_expansion_at_any_pc(h in any::<u16>(), pc in any::<u64>(), seed in any::<u64>()) {
        prop_assume!(h & 3 != 3);
        check(h, pc & !1, seed);
    }
}

#[test]
fn known_compressed_forms() {
    let d = |h: u16| decode_raw(u32::from(h), 0x1000).map(|(i, _)| i);
    // c.li a0, -1
    assert_eq!(
        d(0x557d),
        Some(Inst::Const {
            rd: 10,
            value: u64::MAX
        })
    );
    // c.ret = c.jr ra
    assert_eq!(
        d(0x8082),
        Some(Inst::Jalr {
            rd: crate::op::SINK,
            rs1: 1,
            len: 2,
            imm: 0
        })
    );
    // c.ebreak
    assert_eq!(d(0x9002), Some(Inst::Ebreak));
    // c.j .-2
    assert_eq!(
        d(0xbffd),
        Some(Inst::Jal {
            rd: crate::op::SINK,
            len: 2,
            target: 0xffe
        })
    );
    // The all-zero halfword is defined illegal.
    assert_eq!(d(0x0000), None);
    // c.addi16sp sp, -64
    assert_eq!(
        d(0x7139),
        Some(Inst::Addi {
            rd: 2,
            rs1: 2,
            imm: -64
        })
    );
    // c.sdsp ra, 8(sp)
    assert_eq!(
        d(0xe406),
        Some(Inst::Sd {
            rs1: 2,
            rs2: 1,
            imm: 8
        })
    );
}
