//! Decoding of RV64GC encodings into [`Inst`].
//!
//! Both decoders return `None` for anything illegal, reserved or outside
//! RV64GC + Zicsr + Zifencei; they never panic. Compressed encodings are
//! decoded straight to the op of their 32-bit expansion, built with the same
//! constructor helpers so both paths canonicalise identically.

use crate::op::{AmoOp, CsrId, CsrOp, CvtOp, FBinOp, FCmpOp, FSignOp, FmaOp, Inst, SINK};

/// Decodes the instruction whose low 16 bits are `raw & 0xffff`: a
/// compressed one when the two low bits are not `11`, else a 32-bit one.
/// Returns the op and its length in bytes.
pub(crate) fn decode_raw(raw: u32, pc: u64) -> Option<(Inst, u8)> {
    if raw & 3 != 3 {
        decode16(raw as u16, pc).map(|inst| (inst, 2))
    } else {
        decode32(raw, pc).map(|inst| (inst, 4))
    }
}

// ---- field extraction -------------------------------------------------

fn bits(raw: u32, hi: u32, lo: u32) -> u32 {
    (raw >> lo) & ((1u32 << (hi - lo + 1)) - 1)
}

/// Sign-extends the low `width` bits of `value`.
fn sext(value: u32, width: u32) -> i32 {
    let shift = 32 - width;
    ((value << shift) as i32) >> shift
}

fn reg(raw: u32, lo: u32) -> u8 {
    bits(raw, lo + 4, lo) as u8
}

fn imm_i(raw: u32) -> i32 {
    (raw as i32) >> 20
}

fn imm_s(raw: u32) -> i32 {
    sext((bits(raw, 31, 25) << 5) | bits(raw, 11, 7), 12)
}

fn imm_b(raw: u32) -> i32 {
    sext(
        (bits(raw, 31, 31) << 12)
            | (bits(raw, 7, 7) << 11)
            | (bits(raw, 30, 25) << 5)
            | (bits(raw, 11, 8) << 1),
        13,
    )
}

fn imm_j(raw: u32) -> i32 {
    sext(
        (bits(raw, 31, 31) << 20)
            | (bits(raw, 19, 12) << 12)
            | (bits(raw, 20, 20) << 11)
            | (bits(raw, 30, 21) << 1),
        21,
    )
}

fn offset(pc: u64, imm: i32) -> u64 {
    pc.wrapping_add(imm as i64 as u64)
}

/// Destination of an op with side effects besides the write (loads, AMOs,
/// CSR access, FP ops setting flags): x0 becomes the sink.
fn dest(rd: u8) -> u8 {
    if rd == 0 { SINK } else { rd }
}

// ---- canonicalising constructors shared by both decoders ---------------

/// An op whose only effect is writing `rd`: dropped when rd is x0.
fn pure(rd: u8, make: impl FnOnce(u8) -> Inst) -> Inst {
    if rd == 0 { Inst::Nop } else { make(rd) }
}

fn addi(rd: u8, rs1: u8, imm: i32) -> Inst {
    pure(rd, |rd| {
        if rs1 == 0 {
            Inst::Const {
                rd,
                value: imm as i64 as u64,
            }
        } else {
            Inst::Addi { rd, rs1, imm }
        }
    })
}

fn lui(rd: u8, value: i32) -> Inst {
    pure(rd, |rd| Inst::Const {
        rd,
        value: value as i64 as u64,
    })
}

fn jal(rd: u8, len: u8, target: u64) -> Inst {
    Inst::Jal {
        rd: dest(rd),
        len,
        target,
    }
}

fn jalr(rd: u8, rs1: u8, len: u8, imm: i32) -> Inst {
    Inst::Jalr {
        rd: dest(rd),
        rs1,
        len,
        imm,
    }
}

fn load(funct3: u32, rd: u8, rs1: u8, imm: i32) -> Option<Inst> {
    // A load into x0 still accesses memory and may fault: keep it.
    let rd = dest(rd);
    Some(match funct3 {
        0 => Inst::Lb { rd, rs1, imm },
        1 => Inst::Lh { rd, rs1, imm },
        2 => Inst::Lw { rd, rs1, imm },
        3 => Inst::Ld { rd, rs1, imm },
        4 => Inst::Lbu { rd, rs1, imm },
        5 => Inst::Lhu { rd, rs1, imm },
        6 => Inst::Lwu { rd, rs1, imm },
        _ => return None,
    })
}

fn store(funct3: u32, rs1: u8, rs2: u8, imm: i32) -> Option<Inst> {
    Some(match funct3 {
        0 => Inst::Sb { rs1, rs2, imm },
        1 => Inst::Sh { rs1, rs2, imm },
        2 => Inst::Sw { rs1, rs2, imm },
        3 => Inst::Sd { rs1, rs2, imm },
        _ => return None,
    })
}

fn branch(funct3: u32, rs1: u8, rs2: u8, target: u64) -> Option<Inst> {
    Some(match funct3 {
        0 => Inst::Beq { rs1, rs2, target },
        1 => Inst::Bne { rs1, rs2, target },
        4 => Inst::Blt { rs1, rs2, target },
        5 => Inst::Bge { rs1, rs2, target },
        6 => Inst::Bltu { rs1, rs2, target },
        7 => Inst::Bgeu { rs1, rs2, target },
        _ => return None,
    })
}

/// Register-register ALU op by (funct7, funct3) of the OP major opcode.
fn op_reg(funct7: u32, funct3: u32, rd: u8, rs1: u8, rs2: u8) -> Option<Inst> {
    let make: fn(u8, u8, u8) -> Inst = match (funct7, funct3) {
        (0x00, 0) => |rd, rs1, rs2| Inst::Add { rd, rs1, rs2 },
        (0x20, 0) => |rd, rs1, rs2| Inst::Sub { rd, rs1, rs2 },
        (0x00, 1) => |rd, rs1, rs2| Inst::Sll { rd, rs1, rs2 },
        (0x00, 2) => |rd, rs1, rs2| Inst::Slt { rd, rs1, rs2 },
        (0x00, 3) => |rd, rs1, rs2| Inst::Sltu { rd, rs1, rs2 },
        (0x00, 4) => |rd, rs1, rs2| Inst::Xor { rd, rs1, rs2 },
        (0x00, 5) => |rd, rs1, rs2| Inst::Srl { rd, rs1, rs2 },
        (0x20, 5) => |rd, rs1, rs2| Inst::Sra { rd, rs1, rs2 },
        (0x00, 6) => |rd, rs1, rs2| Inst::Or { rd, rs1, rs2 },
        (0x00, 7) => |rd, rs1, rs2| Inst::And { rd, rs1, rs2 },
        (0x01, 0) => |rd, rs1, rs2| Inst::Mul { rd, rs1, rs2 },
        (0x01, 1) => |rd, rs1, rs2| Inst::Mulh { rd, rs1, rs2 },
        (0x01, 2) => |rd, rs1, rs2| Inst::Mulhsu { rd, rs1, rs2 },
        (0x01, 3) => |rd, rs1, rs2| Inst::Mulhu { rd, rs1, rs2 },
        (0x01, 4) => |rd, rs1, rs2| Inst::Div { rd, rs1, rs2 },
        (0x01, 5) => |rd, rs1, rs2| Inst::Divu { rd, rs1, rs2 },
        (0x01, 6) => |rd, rs1, rs2| Inst::Rem { rd, rs1, rs2 },
        (0x01, 7) => |rd, rs1, rs2| Inst::Remu { rd, rs1, rs2 },
        _ => return None,
    };
    Some(pure(rd, |rd| make(rd, rs1, rs2)))
}

/// Register-register op of the OP-32 major opcode.
fn op_reg32(funct7: u32, funct3: u32, rd: u8, rs1: u8, rs2: u8) -> Option<Inst> {
    let make: fn(u8, u8, u8) -> Inst = match (funct7, funct3) {
        (0x00, 0) => |rd, rs1, rs2| Inst::Addw { rd, rs1, rs2 },
        (0x20, 0) => |rd, rs1, rs2| Inst::Subw { rd, rs1, rs2 },
        (0x00, 1) => |rd, rs1, rs2| Inst::Sllw { rd, rs1, rs2 },
        (0x00, 5) => |rd, rs1, rs2| Inst::Srlw { rd, rs1, rs2 },
        (0x20, 5) => |rd, rs1, rs2| Inst::Sraw { rd, rs1, rs2 },
        (0x01, 0) => |rd, rs1, rs2| Inst::Mulw { rd, rs1, rs2 },
        (0x01, 4) => |rd, rs1, rs2| Inst::Divw { rd, rs1, rs2 },
        (0x01, 5) => |rd, rs1, rs2| Inst::Divuw { rd, rs1, rs2 },
        (0x01, 6) => |rd, rs1, rs2| Inst::Remw { rd, rs1, rs2 },
        (0x01, 7) => |rd, rs1, rs2| Inst::Remuw { rd, rs1, rs2 },
        _ => return None,
    };
    Some(pure(rd, |rd| make(rd, rs1, rs2)))
}

fn slli(rd: u8, rs1: u8, shamt: u8) -> Inst {
    pure(rd, |rd| Inst::Slli { rd, rs1, shamt })
}

fn srli(rd: u8, rs1: u8, shamt: u8) -> Inst {
    pure(rd, |rd| Inst::Srli { rd, rs1, shamt })
}

fn srai(rd: u8, rs1: u8, shamt: u8) -> Inst {
    pure(rd, |rd| Inst::Srai { rd, rs1, shamt })
}

/// Rounding-mode field: 5 and 6 are reserved (illegal at decode); 7 means
/// "use frm", checked when executed.
fn rounding(rm: u32) -> Option<u8> {
    match rm {
        5 | 6 => None,
        _ => Some(rm as u8),
    }
}

// ---- 32-bit encodings ---------------------------------------------------

fn decode32(raw: u32, pc: u64) -> Option<Inst> {
    let opcode = raw & 0x7f;
    let rd = reg(raw, 7);
    let rs1 = reg(raw, 15);
    let rs2 = reg(raw, 20);
    let funct3 = bits(raw, 14, 12);
    let funct7 = bits(raw, 31, 25);
    match opcode {
        0x37 => Some(lui(rd, (raw & 0xffff_f000) as i32)),
        0x17 => Some(pure(rd, |rd| Inst::Const {
            rd,
            value: offset(pc, (raw & 0xffff_f000) as i32),
        })),
        0x6f => Some(jal(rd, 4, offset(pc, imm_j(raw)))),
        0x67 if funct3 == 0 => Some(jalr(rd, rs1, 4, imm_i(raw))),
        0x63 => branch(funct3, rs1, rs2, offset(pc, imm_b(raw))),
        0x03 => load(funct3, rd, rs1, imm_i(raw)),
        0x23 => store(funct3, rs1, rs2, imm_s(raw)),
        0x13 => decode_op_imm(raw, rd, rs1, funct3),
        0x1b => decode_op_imm32(raw, rd, rs1, funct3),
        0x33 => op_reg(funct7, funct3, rd, rs1, rs2),
        0x3b => op_reg32(funct7, funct3, rd, rs1, rs2),
        // fence; unused fields are ignored as the spec asks for forward
        // compatibility.
        0x0f => match funct3 {
            0 => Some(Inst::Fence),
            1 => Some(Inst::FenceI),
            _ => None,
        },
        0x73 => decode_system(raw, rd, rs1, funct3),
        0x2f => decode_amo(raw, rd, rs1, rs2, funct3),
        0x07 => match funct3 {
            2 => Some(Inst::Flw {
                rd,
                rs1,
                imm: imm_i(raw),
            }),
            3 => Some(Inst::Fld {
                rd,
                rs1,
                imm: imm_i(raw),
            }),
            _ => None,
        },
        0x27 => match funct3 {
            2 => Some(Inst::Fsw {
                rs1,
                rs2,
                imm: imm_s(raw),
            }),
            3 => Some(Inst::Fsd {
                rs1,
                rs2,
                imm: imm_s(raw),
            }),
            _ => None,
        },
        0x43 | 0x47 | 0x4b | 0x4f => {
            let op = match opcode {
                0x43 => FmaOp::Madd,
                0x47 => FmaOp::Msub,
                0x4b => FmaOp::Nmsub,
                _ => FmaOp::Nmadd,
            };
            let dbl = match bits(raw, 26, 25) {
                0 => false,
                1 => true,
                _ => return None,
            };
            Some(Inst::Fma {
                op,
                dbl,
                rd,
                rs1,
                rs2,
                rs3: reg(raw, 27),
                rm: rounding(funct3)?,
            })
        }
        0x53 => decode_op_fp(rd, rs1, rs2, funct3, funct7),
        _ => None,
    }
}

fn decode_op_imm(raw: u32, rd: u8, rs1: u8, funct3: u32) -> Option<Inst> {
    let imm = imm_i(raw);
    let shamt = bits(raw, 25, 20) as u8;
    let funct6 = bits(raw, 31, 26);
    Some(match funct3 {
        0 => addi(rd, rs1, imm),
        2 => pure(rd, |rd| Inst::Slti { rd, rs1, imm }),
        3 => pure(rd, |rd| Inst::Sltiu { rd, rs1, imm }),
        4 => pure(rd, |rd| Inst::Xori { rd, rs1, imm }),
        6 => pure(rd, |rd| Inst::Ori { rd, rs1, imm }),
        7 => pure(rd, |rd| Inst::Andi { rd, rs1, imm }),
        1 if funct6 == 0 => slli(rd, rs1, shamt),
        5 if funct6 == 0 => srli(rd, rs1, shamt),
        5 if funct6 == 0x10 => srai(rd, rs1, shamt),
        _ => return None,
    })
}

fn decode_op_imm32(raw: u32, rd: u8, rs1: u8, funct3: u32) -> Option<Inst> {
    let shamt = bits(raw, 24, 20) as u8;
    let funct7 = bits(raw, 31, 25);
    Some(match funct3 {
        0 => addiw(rd, rs1, imm_i(raw)),
        1 if funct7 == 0 => pure(rd, |rd| Inst::Slliw { rd, rs1, shamt }),
        5 if funct7 == 0 => pure(rd, |rd| Inst::Srliw { rd, rs1, shamt }),
        5 if funct7 == 0x20 => pure(rd, |rd| Inst::Sraiw { rd, rs1, shamt }),
        _ => return None,
    })
}

fn addiw(rd: u8, rs1: u8, imm: i32) -> Inst {
    pure(rd, |rd| Inst::Addiw { rd, rs1, imm })
}

fn decode_system(raw: u32, rd: u8, rs1: u8, funct3: u32) -> Option<Inst> {
    let op = match funct3 {
        0 => {
            return match raw {
                0x0000_0073 => Some(Inst::Ecall),
                0x0010_0073 => Some(Inst::Ebreak),
                // wfi, xret, sfence.vma...: privileged, illegal in user mode.
                _ => None,
            };
        }
        1 => CsrOp::Rw,
        2 => CsrOp::Rs,
        3 => CsrOp::Rc,
        5 => CsrOp::Rwi,
        6 => CsrOp::Rsi,
        7 => CsrOp::Rci,
        _ => return None,
    };
    let csr = match raw >> 20 {
        0x001 => CsrId::Fflags,
        0x002 => CsrId::Frm,
        0x003 => CsrId::Fcsr,
        0xc00 => CsrId::Cycle,
        0xc01 => CsrId::Time,
        0xc02 => CsrId::Instret,
        _ => return None,
    };
    // csrrs/csrrc with x0 (or a zero immediate) do not write the CSR.
    let writes = matches!(op, CsrOp::Rw | CsrOp::Rwi) || rs1 != 0;
    let read_only = matches!(csr, CsrId::Cycle | CsrId::Time | CsrId::Instret);
    if writes && read_only {
        return None;
    }
    Some(Inst::Csr {
        op,
        rd: dest(rd),
        src: rs1,
        csr,
    })
}

fn decode_amo(raw: u32, rd: u8, rs1: u8, rs2: u8, funct3: u32) -> Option<Inst> {
    let dbl = match funct3 {
        2 => false,
        3 => true,
        _ => return None,
    };
    // Bits 26 (aq) and 25 (rl) only order accesses between harts; one vCPU
    // observes program order anyway.
    let funct5 = bits(raw, 31, 27);
    let rd = dest(rd);
    let op = match funct5 {
        0x02 if rs2 == 0 => {
            return Some(if dbl {
                Inst::LrD { rd, rs1 }
            } else {
                Inst::LrW { rd, rs1 }
            });
        }
        0x03 => {
            return Some(if dbl {
                Inst::ScD { rd, rs1, rs2 }
            } else {
                Inst::ScW { rd, rs1, rs2 }
            });
        }
        0x01 => AmoOp::Swap,
        0x00 => AmoOp::Add,
        0x04 => AmoOp::Xor,
        0x0c => AmoOp::And,
        0x08 => AmoOp::Or,
        0x10 => AmoOp::Min,
        0x14 => AmoOp::Max,
        0x18 => AmoOp::Minu,
        0x1c => AmoOp::Maxu,
        _ => return None,
    };
    Some(if dbl {
        Inst::AmoD { op, rd, rs1, rs2 }
    } else {
        Inst::AmoW { op, rd, rs1, rs2 }
    })
}

fn decode_op_fp(rd: u8, rs1: u8, rs2: u8, funct3: u32, funct7: u32) -> Option<Inst> {
    // The low two bits of funct7 are the format: 0 single, 1 double.
    let dbl = match funct7 & 3 {
        0 => false,
        1 => true,
        _ => return None,
    };
    let xd = dest(rd);
    Some(match funct7 >> 2 {
        0x00..=0x03 => {
            let op = match funct7 >> 2 {
                0 => FBinOp::Add,
                1 => FBinOp::Sub,
                2 => FBinOp::Mul,
                _ => FBinOp::Div,
            };
            Inst::FBin {
                op,
                dbl,
                rd,
                rs1,
                rs2,
                rm: rounding(funct3)?,
            }
        }
        0x0b if rs2 == 0 => Inst::FSqrt {
            dbl,
            rd,
            rs1,
            rm: rounding(funct3)?,
        },
        0x04 => {
            let op = match funct3 {
                0 => FSignOp::Sgnj,
                1 => FSignOp::Sgnjn,
                2 => FSignOp::Sgnjx,
                _ => return None,
            };
            Inst::FSign {
                op,
                dbl,
                rd,
                rs1,
                rs2,
            }
        }
        0x05 => {
            let op = match funct3 {
                0 => FSignOp::Min,
                1 => FSignOp::Max,
                _ => return None,
            };
            Inst::FSign {
                op,
                dbl,
                rd,
                rs1,
                rs2,
            }
        }
        0x14 => {
            let op = match funct3 {
                0 => FCmpOp::Le,
                1 => FCmpOp::Lt,
                2 => FCmpOp::Eq,
                _ => return None,
            };
            Inst::FCmp {
                op,
                dbl,
                rd: xd,
                rs1,
                rs2,
            }
        }
        0x18 => {
            let op = match (dbl, rs2) {
                (false, 0) => CvtOp::WS,
                (false, 1) => CvtOp::WuS,
                (false, 2) => CvtOp::LS,
                (false, 3) => CvtOp::LuS,
                (true, 0) => CvtOp::WD,
                (true, 1) => CvtOp::WuD,
                (true, 2) => CvtOp::LD,
                (true, 3) => CvtOp::LuD,
                _ => return None,
            };
            Inst::FCvt {
                op,
                rd: xd,
                rs1,
                rm: rounding(funct3)?,
            }
        }
        0x1a => {
            let op = match (dbl, rs2) {
                (false, 0) => CvtOp::SW,
                (false, 1) => CvtOp::SWu,
                (false, 2) => CvtOp::SL,
                (false, 3) => CvtOp::SLu,
                (true, 0) => CvtOp::DW,
                (true, 1) => CvtOp::DWu,
                (true, 2) => CvtOp::DL,
                (true, 3) => CvtOp::DLu,
                _ => return None,
            };
            Inst::FCvt {
                op,
                rd,
                rs1,
                rm: rounding(funct3)?,
            }
        }
        // fcvt.s.d has fmt S and rs2 = 1 (D); fcvt.d.s has fmt D and rs2 = 0.
        0x08 => {
            let op = match (dbl, rs2) {
                (false, 1) => CvtOp::SD,
                (true, 0) => CvtOp::DS,
                _ => return None,
            };
            Inst::FCvt {
                op,
                rd,
                rs1,
                rm: rounding(funct3)?,
            }
        }
        0x1c if rs2 == 0 => match (funct3, dbl) {
            (0, false) => Inst::FMvXW { rd: xd, rs1 },
            (0, true) => Inst::FMvXD { rd: xd, rs1 },
            (1, _) => Inst::FClass { dbl, rd: xd, rs1 },
            _ => return None,
        },
        0x1e if rs2 == 0 && funct3 == 0 => {
            if dbl {
                Inst::FMvDX { rd, rs1 }
            } else {
                Inst::FMvWX { rd, rs1 }
            }
        }
        _ => return None,
    })
}

// ---- 16-bit (C) encodings -------------------------------------------------

/// A 3-bit compressed register field names x8..x15 (or f8..f15).
fn creg(h: u32, lo: u32) -> u8 {
    8 + bits(h, lo + 2, lo) as u8
}

/// The 6-bit signed immediate of c.addi, c.li, c.andi... (bit 12 and 6:2).
fn c_imm6(h: u32) -> i32 {
    sext((bits(h, 12, 12) << 5) | bits(h, 6, 2), 6)
}

/// The 6-bit shift amount of c.slli/c.srli/c.srai.
fn c_shamt(h: u32) -> u8 {
    ((bits(h, 12, 12) << 5) | bits(h, 6, 2)) as u8
}

/// Offsets scaled by 8 (c.ld, c.sd, c.fld, c.fsd).
fn c_uimm_d(h: u32) -> i32 {
    ((bits(h, 12, 10) << 3) | (bits(h, 6, 5) << 6)) as i32
}

/// Offsets scaled by 4 (c.lw, c.sw).
fn c_uimm_w(h: u32) -> i32 {
    ((bits(h, 12, 10) << 3) | (bits(h, 6, 6) << 2) | (bits(h, 5, 5) << 6)) as i32
}

fn decode16(h: u16, pc: u64) -> Option<Inst> {
    let h = u32::from(h);
    let funct3 = bits(h, 15, 13);
    match h & 3 {
        0 => decode_c0(h, funct3),
        1 => decode_c1(h, funct3, pc),
        2 => decode_c2(h, funct3),
        _ => None,
    }
}

fn decode_c0(h: u32, funct3: u32) -> Option<Inst> {
    let rd = creg(h, 2);
    let rs1 = creg(h, 7);
    match funct3 {
        0 => {
            // c.addi4spn; a zero immediate (including the all-zero
            // halfword) is reserved.
            let imm = (bits(h, 12, 11) << 4)
                | (bits(h, 10, 7) << 6)
                | (bits(h, 6, 6) << 2)
                | (bits(h, 5, 5) << 3);
            if imm == 0 {
                return None;
            }
            Some(addi(rd, 2, imm as i32))
        }
        1 => Some(Inst::Fld {
            rd,
            rs1,
            imm: c_uimm_d(h),
        }),
        2 => load(2, rd, rs1, c_uimm_w(h)),
        3 => load(3, rd, rs1, c_uimm_d(h)),
        5 => Some(Inst::Fsd {
            rs1,
            rs2: rd,
            imm: c_uimm_d(h),
        }),
        6 => store(2, rs1, rd, c_uimm_w(h)),
        7 => store(3, rs1, rd, c_uimm_d(h)),
        // funct3 4 is reserved in RV64GC (Zcb lives there).
        _ => None,
    }
}

fn decode_c1(h: u32, funct3: u32, pc: u64) -> Option<Inst> {
    let rd = reg(h, 7);
    match funct3 {
        // c.addi (c.nop when rd is x0; a zero immediate is a HINT).
        0 => Some(addi(rd, rd, c_imm6(h))),
        1 => {
            if rd == 0 {
                return None;
            }
            Some(addiw(rd, rd, c_imm6(h)))
        }
        // c.li; rd = x0 is a HINT.
        2 => Some(addi(rd, 0, c_imm6(h))),
        3 if rd == 2 => {
            let imm = sext(
                (bits(h, 12, 12) << 9)
                    | (bits(h, 6, 6) << 4)
                    | (bits(h, 5, 5) << 6)
                    | (bits(h, 4, 3) << 7)
                    | (bits(h, 2, 2) << 5),
                10,
            );
            if imm == 0 {
                return None;
            }
            Some(addi(2, 2, imm))
        }
        3 => {
            let imm = sext((bits(h, 12, 12) << 17) | (bits(h, 6, 2) << 12), 18);
            if imm == 0 {
                return None;
            }
            Some(lui(rd, imm))
        }
        4 => decode_c1_alu(h),
        5 => Some(jal(0, 2, offset(pc, c_jump_offset(h)))),
        6 => branch(0, creg(h, 7), 0, offset(pc, c_branch_offset(h))),
        _ => branch(1, creg(h, 7), 0, offset(pc, c_branch_offset(h))),
    }
}

fn c_jump_offset(h: u32) -> i32 {
    sext(
        (bits(h, 12, 12) << 11)
            | (bits(h, 11, 11) << 4)
            | (bits(h, 10, 9) << 8)
            | (bits(h, 8, 8) << 10)
            | (bits(h, 7, 7) << 6)
            | (bits(h, 6, 6) << 7)
            | (bits(h, 5, 3) << 1)
            | (bits(h, 2, 2) << 5),
        12,
    )
}

fn c_branch_offset(h: u32) -> i32 {
    sext(
        (bits(h, 12, 12) << 8)
            | (bits(h, 11, 10) << 3)
            | (bits(h, 6, 5) << 6)
            | (bits(h, 4, 3) << 1)
            | (bits(h, 2, 2) << 5),
        9,
    )
}

fn decode_c1_alu(h: u32) -> Option<Inst> {
    let rd = creg(h, 7);
    let rs2 = creg(h, 2);
    match bits(h, 11, 10) {
        // A zero shift amount is a HINT in RV64C.
        0 => Some(match c_shamt(h) {
            0 => Inst::Nop,
            s => srli(rd, rd, s),
        }),
        1 => Some(match c_shamt(h) {
            0 => Inst::Nop,
            s => srai(rd, rd, s),
        }),
        2 => Some(pure(rd, |rd| Inst::Andi {
            rd,
            rs1: rd,
            imm: c_imm6(h),
        })),
        _ => match (bits(h, 12, 12), bits(h, 6, 5)) {
            (0, 0) => op_reg(0x20, 0, rd, rd, rs2),
            (0, 1) => op_reg(0, 4, rd, rd, rs2),
            (0, 2) => op_reg(0, 6, rd, rd, rs2),
            (0, 3) => op_reg(0, 7, rd, rd, rs2),
            (1, 0) => op_reg32(0x20, 0, rd, rd, rs2),
            (1, 1) => op_reg32(0, 0, rd, rd, rs2),
            _ => None,
        },
    }
}

fn decode_c2(h: u32, funct3: u32) -> Option<Inst> {
    let rd = reg(h, 7);
    let rs2 = reg(h, 2);
    let sp_uimm_d = ((bits(h, 12, 12) << 5) | (bits(h, 6, 5) << 3) | (bits(h, 4, 2) << 6)) as i32;
    let sp_store_d = ((bits(h, 12, 10) << 3) | (bits(h, 9, 7) << 6)) as i32;
    match funct3 {
        // c.slli; rd = x0 or a zero shift amount is a HINT.
        0 => Some(match c_shamt(h) {
            0 => Inst::Nop,
            s => slli(rd, rd, s),
        }),
        1 => Some(Inst::Fld {
            rd,
            rs1: 2,
            imm: sp_uimm_d,
        }),
        2 => {
            if rd == 0 {
                return None;
            }
            let imm = (bits(h, 12, 12) << 5) | (bits(h, 6, 4) << 2) | (bits(h, 3, 2) << 6);
            load(2, rd, 2, imm as i32)
        }
        3 => {
            if rd == 0 {
                return None;
            }
            load(3, rd, 2, sp_uimm_d)
        }
        4 => match (bits(h, 12, 12), rd, rs2) {
            (0, 0, 0) => None,
            (0, rs1, 0) => Some(jalr(0, rs1, 2, 0)),
            (0, rd, rs2) => op_reg(0, 0, rd, 0, rs2),
            (_, 0, 0) => Some(Inst::Ebreak),
            (_, rs1, 0) => Some(jalr(1, rs1, 2, 0)),
            (_, rd, rs2) => op_reg(0, 0, rd, rd, rs2),
        },
        5 => Some(Inst::Fsd {
            rs1: 2,
            rs2,
            imm: sp_store_d,
        }),
        6 => {
            let imm = (bits(h, 12, 9) << 2) | (bits(h, 8, 7) << 6);
            store(2, 2, rs2, imm as i32)
        }
        _ => store(3, 2, rs2, sp_store_d),
    }
}
