//! objdump-like text for decoded ops. Compressed instructions print as
//! their 32-bit expansion; `li` stands for lui/auipc/addi-from-x0 with the
//! resulting value, and `nop` for anything whose only effect was a write
//! to x0.

use std::fmt::Write as _;

use crate::cpu::{F_NAMES, X_NAMES};
use crate::op::{AmoOp, CsrId, CsrOp, CvtOp, FBinOp, FCmpOp, FSignOp, FmaOp, Inst};

fn x(r: u8) -> &'static str {
    // The sink slot (writes to x0) prints as x0.
    X_NAMES.get(usize::from(r)).copied().unwrap_or("zero")
}

fn f(r: u8) -> &'static str {
    F_NAMES.get(usize::from(r & 31)).copied().unwrap_or("ft0")
}

fn suffix(dbl: bool) -> &'static str {
    if dbl { "d" } else { "s" }
}

fn rm_suffix(rm: u8) -> &'static str {
    match rm {
        0 => ", rne",
        1 => ", rtz",
        2 => ", rdn",
        3 => ", rup",
        4 => ", rmm",
        _ => "",
    }
}

fn value(v: u64) -> String {
    let s = v as i64;
    if (-4096..4096).contains(&s) {
        s.to_string()
    } else {
        format!("{v:#x}")
    }
}

/// Formats one op.
pub(crate) fn format(inst: &Inst) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = write_inst(&mut s, inst);
    s
}

fn write_inst(s: &mut String, inst: &Inst) -> std::fmt::Result {
    macro_rules! r3 {
        ($m:literal, $rd:expr, $rs1:expr, $rs2:expr) => {
            write!(s, "{} {}, {}, {}", $m, x($rd), x($rs1), x($rs2))
        };
    }
    macro_rules! imm {
        ($m:literal, $rd:expr, $rs1:expr, $imm:expr) => {
            write!(s, "{} {}, {}, {}", $m, x($rd), x($rs1), $imm)
        };
    }
    macro_rules! mem {
        ($m:literal, $r:expr, $rs1:expr, $imm:expr) => {
            write!(s, "{} {}, {}({})", $m, $r, $imm, x($rs1))
        };
    }
    macro_rules! br {
        ($m:literal, $rs1:expr, $rs2:expr, $t:expr) => {
            write!(s, "{} {}, {}, {:#x}", $m, x($rs1), x($rs2), $t)
        };
    }
    match *inst {
        Inst::Nop => write!(s, "nop"),
        Inst::Const { rd, value: v } => write!(s, "li {}, {}", x(rd), value(v)),
        Inst::Jal { rd, target, .. } => match rd {
            1 => write!(s, "jal {target:#x}"),
            32 => write!(s, "j {target:#x}"),
            _ => write!(s, "jal {}, {target:#x}", x(rd)),
        },
        Inst::Jalr {
            rd: 32,
            rs1: 1,
            imm: 0,
            ..
        } => write!(s, "ret"),
        Inst::Jalr { rd, rs1, imm, .. } => write!(s, "jalr {}, {}({})", x(rd), imm, x(rs1)),
        Inst::Beq { rs1, rs2, target } => br!("beq", rs1, rs2, target),
        Inst::Bne { rs1, rs2, target } => br!("bne", rs1, rs2, target),
        Inst::Blt { rs1, rs2, target } => br!("blt", rs1, rs2, target),
        Inst::Bge { rs1, rs2, target } => br!("bge", rs1, rs2, target),
        Inst::Bltu { rs1, rs2, target } => br!("bltu", rs1, rs2, target),
        Inst::Bgeu { rs1, rs2, target } => br!("bgeu", rs1, rs2, target),
        Inst::Lb { rd, rs1, imm } => mem!("lb", x(rd), rs1, imm),
        Inst::Lh { rd, rs1, imm } => mem!("lh", x(rd), rs1, imm),
        Inst::Lw { rd, rs1, imm } => mem!("lw", x(rd), rs1, imm),
        Inst::Ld { rd, rs1, imm } => mem!("ld", x(rd), rs1, imm),
        Inst::Lbu { rd, rs1, imm } => mem!("lbu", x(rd), rs1, imm),
        Inst::Lhu { rd, rs1, imm } => mem!("lhu", x(rd), rs1, imm),
        Inst::Lwu { rd, rs1, imm } => mem!("lwu", x(rd), rs1, imm),
        Inst::Sb { rs1, rs2, imm } => mem!("sb", x(rs2), rs1, imm),
        Inst::Sh { rs1, rs2, imm } => mem!("sh", x(rs2), rs1, imm),
        Inst::Sw { rs1, rs2, imm } => mem!("sw", x(rs2), rs1, imm),
        Inst::Sd { rs1, rs2, imm } => mem!("sd", x(rs2), rs1, imm),
        Inst::Addi { rd, rs1, imm: 0 } => write!(s, "mv {}, {}", x(rd), x(rs1)),
        Inst::Addi { rd, rs1, imm } => imm!("addi", rd, rs1, imm),
        Inst::Slti { rd, rs1, imm } => imm!("slti", rd, rs1, imm),
        Inst::Sltiu { rd, rs1, imm } => imm!("sltiu", rd, rs1, imm),
        Inst::Xori { rd, rs1, imm } => imm!("xori", rd, rs1, imm),
        Inst::Ori { rd, rs1, imm } => imm!("ori", rd, rs1, imm),
        Inst::Andi { rd, rs1, imm } => imm!("andi", rd, rs1, imm),
        Inst::Slli { rd, rs1, shamt } => imm!("slli", rd, rs1, shamt),
        Inst::Srli { rd, rs1, shamt } => imm!("srli", rd, rs1, shamt),
        Inst::Srai { rd, rs1, shamt } => imm!("srai", rd, rs1, shamt),
        Inst::Addiw { rd, rs1, imm: 0 } => write!(s, "sext.w {}, {}", x(rd), x(rs1)),
        Inst::Addiw { rd, rs1, imm } => imm!("addiw", rd, rs1, imm),
        Inst::Slliw { rd, rs1, shamt } => imm!("slliw", rd, rs1, shamt),
        Inst::Srliw { rd, rs1, shamt } => imm!("srliw", rd, rs1, shamt),
        Inst::Sraiw { rd, rs1, shamt } => imm!("sraiw", rd, rs1, shamt),
        Inst::Add { rd, rs1, rs2 } => r3!("add", rd, rs1, rs2),
        Inst::Sub { rd, rs1, rs2 } => r3!("sub", rd, rs1, rs2),
        Inst::Sll { rd, rs1, rs2 } => r3!("sll", rd, rs1, rs2),
        Inst::Slt { rd, rs1, rs2 } => r3!("slt", rd, rs1, rs2),
        Inst::Sltu { rd, rs1, rs2 } => r3!("sltu", rd, rs1, rs2),
        Inst::Xor { rd, rs1, rs2 } => r3!("xor", rd, rs1, rs2),
        Inst::Srl { rd, rs1, rs2 } => r3!("srl", rd, rs1, rs2),
        Inst::Sra { rd, rs1, rs2 } => r3!("sra", rd, rs1, rs2),
        Inst::Or { rd, rs1, rs2 } => r3!("or", rd, rs1, rs2),
        Inst::And { rd, rs1, rs2 } => r3!("and", rd, rs1, rs2),
        Inst::Mul { rd, rs1, rs2 } => r3!("mul", rd, rs1, rs2),
        Inst::Mulh { rd, rs1, rs2 } => r3!("mulh", rd, rs1, rs2),
        Inst::Mulhsu { rd, rs1, rs2 } => r3!("mulhsu", rd, rs1, rs2),
        Inst::Mulhu { rd, rs1, rs2 } => r3!("mulhu", rd, rs1, rs2),
        Inst::Div { rd, rs1, rs2 } => r3!("div", rd, rs1, rs2),
        Inst::Divu { rd, rs1, rs2 } => r3!("divu", rd, rs1, rs2),
        Inst::Rem { rd, rs1, rs2 } => r3!("rem", rd, rs1, rs2),
        Inst::Remu { rd, rs1, rs2 } => r3!("remu", rd, rs1, rs2),
        Inst::Addw { rd, rs1, rs2 } => r3!("addw", rd, rs1, rs2),
        Inst::Subw { rd, rs1, rs2 } => r3!("subw", rd, rs1, rs2),
        Inst::Sllw { rd, rs1, rs2 } => r3!("sllw", rd, rs1, rs2),
        Inst::Srlw { rd, rs1, rs2 } => r3!("srlw", rd, rs1, rs2),
        Inst::Sraw { rd, rs1, rs2 } => r3!("sraw", rd, rs1, rs2),
        Inst::Mulw { rd, rs1, rs2 } => r3!("mulw", rd, rs1, rs2),
        Inst::Divw { rd, rs1, rs2 } => r3!("divw", rd, rs1, rs2),
        Inst::Divuw { rd, rs1, rs2 } => r3!("divuw", rd, rs1, rs2),
        Inst::Remw { rd, rs1, rs2 } => r3!("remw", rd, rs1, rs2),
        Inst::Remuw { rd, rs1, rs2 } => r3!("remuw", rd, rs1, rs2),
        Inst::Ecall => write!(s, "ecall"),
        Inst::Ebreak => write!(s, "ebreak"),
        Inst::Fence => write!(s, "fence"),
        Inst::FenceI => write!(s, "fence.i"),
        Inst::Csr { op, rd, src, csr } => {
            let name = match csr {
                CsrId::Fflags => "fflags",
                CsrId::Frm => "frm",
                CsrId::Fcsr => "fcsr",
                CsrId::Cycle => "cycle",
                CsrId::Time => "time",
                CsrId::Instret => "instret",
            };
            match op {
                CsrOp::Rw => write!(s, "csrrw {}, {name}, {}", x(rd), x(src)),
                CsrOp::Rs => write!(s, "csrrs {}, {name}, {}", x(rd), x(src)),
                CsrOp::Rc => write!(s, "csrrc {}, {name}, {}", x(rd), x(src)),
                CsrOp::Rwi => write!(s, "csrrwi {}, {name}, {src}", x(rd)),
                CsrOp::Rsi => write!(s, "csrrsi {}, {name}, {src}", x(rd)),
                CsrOp::Rci => write!(s, "csrrci {}, {name}, {src}", x(rd)),
            }
        }
        Inst::LrW { rd, rs1 } => write!(s, "lr.w {}, ({})", x(rd), x(rs1)),
        Inst::LrD { rd, rs1 } => write!(s, "lr.d {}, ({})", x(rd), x(rs1)),
        Inst::ScW { rd, rs1, rs2 } => write!(s, "sc.w {}, {}, ({})", x(rd), x(rs2), x(rs1)),
        Inst::ScD { rd, rs1, rs2 } => write!(s, "sc.d {}, {}, ({})", x(rd), x(rs2), x(rs1)),
        Inst::AmoW { op, rd, rs1, rs2 } | Inst::AmoD { op, rd, rs1, rs2 } => {
            let name = match op {
                AmoOp::Swap => "amoswap",
                AmoOp::Add => "amoadd",
                AmoOp::Xor => "amoxor",
                AmoOp::And => "amoand",
                AmoOp::Or => "amoor",
                AmoOp::Min => "amomin",
                AmoOp::Max => "amomax",
                AmoOp::Minu => "amominu",
                AmoOp::Maxu => "amomaxu",
            };
            let w = if matches!(inst, Inst::AmoD { .. }) {
                "d"
            } else {
                "w"
            };
            write!(s, "{name}.{w} {}, {}, ({})", x(rd), x(rs2), x(rs1))
        }
        Inst::Flw { rd, rs1, imm } => mem!("flw", f(rd), rs1, imm),
        Inst::Fld { rd, rs1, imm } => mem!("fld", f(rd), rs1, imm),
        Inst::Fsw { rs1, rs2, imm } => mem!("fsw", f(rs2), rs1, imm),
        Inst::Fsd { rs1, rs2, imm } => mem!("fsd", f(rs2), rs1, imm),
        Inst::FBin {
            op,
            dbl,
            rd,
            rs1,
            rs2,
            rm,
        } => {
            let name = match op {
                FBinOp::Add => "fadd",
                FBinOp::Sub => "fsub",
                FBinOp::Mul => "fmul",
                FBinOp::Div => "fdiv",
            };
            let (t, a, b, r) = (suffix(dbl), f(rd), f(rs1), f(rs2));
            write!(s, "{name}.{t} {a}, {b}, {r}{}", rm_suffix(rm))
        }
        Inst::FSign {
            op,
            dbl,
            rd,
            rs1,
            rs2,
        } => {
            let name = match op {
                FSignOp::Sgnj => "fsgnj",
                FSignOp::Sgnjn => "fsgnjn",
                FSignOp::Sgnjx => "fsgnjx",
                FSignOp::Min => "fmin",
                FSignOp::Max => "fmax",
            };
            write!(
                s,
                "{name}.{} {}, {}, {}",
                suffix(dbl),
                f(rd),
                f(rs1),
                f(rs2)
            )
        }
        Inst::FCmp {
            op,
            dbl,
            rd,
            rs1,
            rs2,
        } => {
            let name = match op {
                FCmpOp::Eq => "feq",
                FCmpOp::Lt => "flt",
                FCmpOp::Le => "fle",
            };
            write!(
                s,
                "{name}.{} {}, {}, {}",
                suffix(dbl),
                x(rd),
                f(rs1),
                f(rs2)
            )
        }
        Inst::FSqrt { dbl, rd, rs1, rm } => {
            write!(
                s,
                "fsqrt.{} {}, {}{}",
                suffix(dbl),
                f(rd),
                f(rs1),
                rm_suffix(rm)
            )
        }
        Inst::Fma {
            op,
            dbl,
            rd,
            rs1,
            rs2,
            rs3,
            rm,
        } => {
            let name = match op {
                FmaOp::Madd => "fmadd",
                FmaOp::Msub => "fmsub",
                FmaOp::Nmsub => "fnmsub",
                FmaOp::Nmadd => "fnmadd",
            };
            let (t, d, a, b, c) = (suffix(dbl), f(rd), f(rs1), f(rs2), f(rs3));
            write!(s, "{name}.{t} {d}, {a}, {b}, {c}{}", rm_suffix(rm))
        }
        Inst::FCvt { op, rd, rs1, rm } => {
            // (mnemonic, destination is integer, source is integer)
            let (name, xd, xs) = match op {
                CvtOp::WS => ("fcvt.w.s", true, false),
                CvtOp::WuS => ("fcvt.wu.s", true, false),
                CvtOp::LS => ("fcvt.l.s", true, false),
                CvtOp::LuS => ("fcvt.lu.s", true, false),
                CvtOp::WD => ("fcvt.w.d", true, false),
                CvtOp::WuD => ("fcvt.wu.d", true, false),
                CvtOp::LD => ("fcvt.l.d", true, false),
                CvtOp::LuD => ("fcvt.lu.d", true, false),
                CvtOp::SW => ("fcvt.s.w", false, true),
                CvtOp::SWu => ("fcvt.s.wu", false, true),
                CvtOp::SL => ("fcvt.s.l", false, true),
                CvtOp::SLu => ("fcvt.s.lu", false, true),
                CvtOp::DW => ("fcvt.d.w", false, true),
                CvtOp::DWu => ("fcvt.d.wu", false, true),
                CvtOp::DL => ("fcvt.d.l", false, true),
                CvtOp::DLu => ("fcvt.d.lu", false, true),
                CvtOp::SD => ("fcvt.s.d", false, false),
                CvtOp::DS => ("fcvt.d.s", false, false),
            };
            let d = if xd { x(rd) } else { f(rd) };
            let a = if xs { x(rs1) } else { f(rs1) };
            write!(s, "{name} {d}, {a}{}", rm_suffix(rm))
        }
        Inst::FClass { dbl, rd, rs1 } => {
            write!(s, "fclass.{} {}, {}", suffix(dbl), x(rd), f(rs1))
        }
        Inst::FMvXW { rd, rs1 } => write!(s, "fmv.x.w {}, {}", x(rd), f(rs1)),
        Inst::FMvWX { rd, rs1 } => write!(s, "fmv.w.x {}, {}", f(rd), x(rs1)),
        Inst::FMvXD { rd, rs1 } => write!(s, "fmv.x.d {}, {}", x(rd), f(rs1)),
        Inst::FMvDX { rd, rs1 } => write!(s, "fmv.d.x {}, {}", f(rd), x(rs1)),
    }
}
