//! Lowering of RV64 ops into tcg-core's JIT IR.
//!
//! Integer registers are the JIT's register slots (slot `i` is `x[i]`; x0
//! reads as the constant 0 and writes to it are dropped). RV64IM, the
//! jumps and branches are lowered; everything else (floating point, CSRs,
//! atomics, system instructions) returns false and runs in the interpreter
//! from the compiled code, which keeps it exact by construction.

use tcgkit_tcg_core::IrBuilder;
use tcgkit_tcg_core::jit::{BinOp, Cond, UnOp, Value};

use crate::op::{Inst, SINK};

/// Reads `x[r]`, with x0 as a constant.
fn r(b: &mut IrBuilder, reg: u8) -> Value {
    if reg == 0 {
        b.imm(0)
    } else {
        b.reg(u16::from(reg))
    }
}

/// Writes `x[rd]`; the sink slot (a destination of x0) is dropped.
fn w(b: &mut IrBuilder, rd: u8, v: Value) {
    if rd != SINK && rd != 0 {
        b.set_reg(u16::from(rd), v);
    }
}

fn imm(b: &mut IrBuilder, imm: i32) -> Value {
    b.imm(imm as i64 as u64)
}

/// `rs1 + imm`.
fn address(b: &mut IrBuilder, rs1: u8, offset: i32) -> Value {
    let base = r(b, rs1);
    if offset == 0 {
        return base;
    }
    let off = imm(b, offset);
    b.binary(BinOp::Add, base, off)
}

fn bin_rr(b: &mut IrBuilder, op: BinOp, rd: u8, rs1: u8, rs2: u8) {
    let (x, y) = (r(b, rs1), r(b, rs2));
    let v = b.binary(op, x, y);
    w(b, rd, v);
}

fn bin_ri(b: &mut IrBuilder, op: BinOp, rd: u8, rs1: u8, value: u64) {
    let x = r(b, rs1);
    let y = b.imm(value);
    let v = b.binary(op, x, y);
    w(b, rd, v);
}

/// A 32-bit op: `sext32(f(x, y))`.
fn word(b: &mut IrBuilder, rd: u8, v: Value) {
    let v = b.unary(UnOp::Sext32, v);
    w(b, rd, v);
}

fn set_if(b: &mut IrBuilder, cond: Cond, rd: u8, x: Value, y: Value) {
    let v = b.compare(cond, x, y);
    w(b, rd, v);
}

fn branch(b: &mut IrBuilder, cond: Cond, rs1: u8, rs2: u8, target: u64) {
    let (x, y) = (r(b, rs1), r(b, rs2));
    let c = b.compare(cond, x, y);
    b.branch(c, target);
}

/// `select(divisor == 0, on_zero, q)`: RISC-V's result for a zero divisor.
fn on_zero_divisor(b: &mut IrBuilder, divisor: Value, on_zero: u64, q: Value) -> Value {
    let zero = b.imm(0);
    let is_zero = b.compare(Cond::Eq, divisor, zero);
    let value = b.imm(on_zero);
    b.select(is_zero, value, q)
}

/// Lowers `inst` (at `b.pc()`); false leaves it to the interpreter.
pub(crate) fn lower(inst: &Inst, b: &mut IrBuilder) -> bool {
    let link = |b: &mut IrBuilder, len: u8| b.pc().wrapping_add(u64::from(len));
    match *inst {
        Inst::Nop => {}
        Inst::Const { rd, value } => {
            let v = b.imm(value);
            w(b, rd, v);
        }
        Inst::Jal { rd, len, target } => {
            let ret = link(b, len);
            let ret = b.imm(ret);
            w(b, rd, ret);
            let t = b.imm(target);
            b.jump(t);
        }
        Inst::Jalr { rd, rs1, len, imm } => {
            // The target is read before the link is written (rd may be rs1).
            let t = address(b, rs1, imm);
            let mask = b.imm(!1);
            let t = b.binary(BinOp::And, t, mask);
            let ret = link(b, len);
            let ret = b.imm(ret);
            w(b, rd, ret);
            b.jump(t);
        }
        Inst::Beq { rs1, rs2, target } => branch(b, Cond::Eq, rs1, rs2, target),
        Inst::Bne { rs1, rs2, target } => branch(b, Cond::Ne, rs1, rs2, target),
        Inst::Blt { rs1, rs2, target } => branch(b, Cond::LtS, rs1, rs2, target),
        Inst::Bge { rs1, rs2, target } => branch(b, Cond::GeS, rs1, rs2, target),
        Inst::Bltu { rs1, rs2, target } => branch(b, Cond::LtU, rs1, rs2, target),
        Inst::Bgeu { rs1, rs2, target } => branch(b, Cond::GeU, rs1, rs2, target),
        Inst::Lb { rd, rs1, imm } => load(b, rd, rs1, imm, 1, true),
        Inst::Lh { rd, rs1, imm } => load(b, rd, rs1, imm, 2, true),
        Inst::Lw { rd, rs1, imm } => load(b, rd, rs1, imm, 4, true),
        Inst::Ld { rd, rs1, imm } => load(b, rd, rs1, imm, 8, false),
        Inst::Lbu { rd, rs1, imm } => load(b, rd, rs1, imm, 1, false),
        Inst::Lhu { rd, rs1, imm } => load(b, rd, rs1, imm, 2, false),
        Inst::Lwu { rd, rs1, imm } => load(b, rd, rs1, imm, 4, false),
        Inst::Sb { rs1, rs2, imm } => store(b, rs1, rs2, imm, 1),
        Inst::Sh { rs1, rs2, imm } => store(b, rs1, rs2, imm, 2),
        Inst::Sw { rs1, rs2, imm } => store(b, rs1, rs2, imm, 4),
        Inst::Sd { rs1, rs2, imm } => store(b, rs1, rs2, imm, 8),
        Inst::Addi { rd, rs1, imm } => {
            let v = address(b, rs1, imm);
            w(b, rd, v);
        }
        Inst::Slti { rd, rs1, imm: i } => {
            let (x, y) = (r(b, rs1), imm(b, i));
            set_if(b, Cond::LtS, rd, x, y);
        }
        Inst::Sltiu { rd, rs1, imm: i } => {
            let (x, y) = (r(b, rs1), imm(b, i));
            set_if(b, Cond::LtU, rd, x, y);
        }
        Inst::Xori { rd, rs1, imm } => bin_ri(b, BinOp::Xor, rd, rs1, imm as i64 as u64),
        Inst::Ori { rd, rs1, imm } => bin_ri(b, BinOp::Or, rd, rs1, imm as i64 as u64),
        Inst::Andi { rd, rs1, imm } => bin_ri(b, BinOp::And, rd, rs1, imm as i64 as u64),
        Inst::Slli { rd, rs1, shamt } => bin_ri(b, BinOp::Shl, rd, rs1, u64::from(shamt & 63)),
        Inst::Srli { rd, rs1, shamt } => bin_ri(b, BinOp::ShrU, rd, rs1, u64::from(shamt & 63)),
        Inst::Srai { rd, rs1, shamt } => bin_ri(b, BinOp::ShrS, rd, rs1, u64::from(shamt & 63)),
        Inst::Addiw { rd, rs1, imm } => {
            let v = address(b, rs1, imm);
            word(b, rd, v);
        }
        Inst::Slliw { rd, rs1, shamt } => {
            let x = r(b, rs1);
            let s = b.imm(u64::from(shamt & 31));
            let v = b.binary(BinOp::Shl, x, s);
            word(b, rd, v);
        }
        Inst::Srliw { rd, rs1, shamt } => {
            let x = r(b, rs1);
            let x = b.unary(UnOp::Zext32, x);
            let s = b.imm(u64::from(shamt & 31));
            let v = b.binary(BinOp::ShrU, x, s);
            word(b, rd, v);
        }
        Inst::Sraiw { rd, rs1, shamt } => {
            let x = r(b, rs1);
            let x = b.unary(UnOp::Sext32, x);
            let s = b.imm(u64::from(shamt & 31));
            let v = b.binary(BinOp::ShrS, x, s);
            w(b, rd, v);
        }
        Inst::Add { rd, rs1, rs2 } => bin_rr(b, BinOp::Add, rd, rs1, rs2),
        Inst::Sub { rd, rs1, rs2 } => bin_rr(b, BinOp::Sub, rd, rs1, rs2),
        Inst::Sll { rd, rs1, rs2 } => bin_rr(b, BinOp::Shl, rd, rs1, rs2),
        Inst::Slt { rd, rs1, rs2 } => {
            let (x, y) = (r(b, rs1), r(b, rs2));
            set_if(b, Cond::LtS, rd, x, y);
        }
        Inst::Sltu { rd, rs1, rs2 } => {
            let (x, y) = (r(b, rs1), r(b, rs2));
            set_if(b, Cond::LtU, rd, x, y);
        }
        Inst::Xor { rd, rs1, rs2 } => bin_rr(b, BinOp::Xor, rd, rs1, rs2),
        Inst::Srl { rd, rs1, rs2 } => bin_rr(b, BinOp::ShrU, rd, rs1, rs2),
        Inst::Sra { rd, rs1, rs2 } => bin_rr(b, BinOp::ShrS, rd, rs1, rs2),
        Inst::Or { rd, rs1, rs2 } => bin_rr(b, BinOp::Or, rd, rs1, rs2),
        Inst::And { rd, rs1, rs2 } => bin_rr(b, BinOp::And, rd, rs1, rs2),
        Inst::Mul { rd, rs1, rs2 } => bin_rr(b, BinOp::Mul, rd, rs1, rs2),
        Inst::Mulh { rd, rs1, rs2 } => bin_rr(b, BinOp::MulHighS, rd, rs1, rs2),
        Inst::Mulhsu { rd, rs1, rs2 } => bin_rr(b, BinOp::MulHighSU, rd, rs1, rs2),
        Inst::Mulhu { rd, rs1, rs2 } => bin_rr(b, BinOp::MulHighU, rd, rs1, rs2),
        Inst::Div { rd, rs1, rs2 } => {
            let (x, y) = (r(b, rs1), r(b, rs2));
            let q = b.binary(BinOp::DivS, x, y);
            let v = on_zero_divisor(b, y, u64::MAX, q);
            w(b, rd, v);
        }
        Inst::Divu { rd, rs1, rs2 } => {
            let (x, y) = (r(b, rs1), r(b, rs2));
            let q = b.binary(BinOp::DivU, x, y);
            let v = on_zero_divisor(b, y, u64::MAX, q);
            w(b, rd, v);
        }
        // The IR's remainders already give the dividend for a zero
        // divisor and 0 for MIN % -1, as RISC-V does.
        Inst::Rem { rd, rs1, rs2 } => bin_rr(b, BinOp::RemS, rd, rs1, rs2),
        Inst::Remu { rd, rs1, rs2 } => bin_rr(b, BinOp::RemU, rd, rs1, rs2),
        Inst::Addw { rd, rs1, rs2 } => word_rr(b, BinOp::Add, rd, rs1, rs2),
        Inst::Subw { rd, rs1, rs2 } => word_rr(b, BinOp::Sub, rd, rs1, rs2),
        Inst::Mulw { rd, rs1, rs2 } => word_rr(b, BinOp::Mul, rd, rs1, rs2),
        Inst::Sllw { rd, rs1, rs2 } => {
            let x = r(b, rs1);
            let s = shamt32(b, rs2);
            let v = b.binary(BinOp::Shl, x, s);
            word(b, rd, v);
        }
        Inst::Srlw { rd, rs1, rs2 } => {
            let x = r(b, rs1);
            let x = b.unary(UnOp::Zext32, x);
            let s = shamt32(b, rs2);
            let v = b.binary(BinOp::ShrU, x, s);
            word(b, rd, v);
        }
        Inst::Sraw { rd, rs1, rs2 } => {
            let x = r(b, rs1);
            let x = b.unary(UnOp::Sext32, x);
            let s = shamt32(b, rs2);
            let v = b.binary(BinOp::ShrS, x, s);
            w(b, rd, v);
        }
        Inst::Divw { rd, rs1, rs2 } => {
            // On sign-extended operands the 64-bit quotient is exact; its
            // low word is RISC-V's (MIN / -1 wraps to MIN).
            let (x, y) = (sext_reg(b, rs1), sext_reg(b, rs2));
            let q = b.binary(BinOp::DivS, x, y);
            let v = on_zero_divisor(b, y, u64::MAX, q);
            word(b, rd, v);
        }
        Inst::Divuw { rd, rs1, rs2 } => {
            let (x, y) = (zext_reg(b, rs1), zext_reg(b, rs2));
            let q = b.binary(BinOp::DivU, x, y);
            let v = on_zero_divisor(b, y, u64::MAX, q);
            word(b, rd, v);
        }
        Inst::Remw { rd, rs1, rs2 } => {
            let (x, y) = (sext_reg(b, rs1), sext_reg(b, rs2));
            let v = b.binary(BinOp::RemS, x, y);
            word(b, rd, v);
        }
        Inst::Remuw { rd, rs1, rs2 } => {
            let (x, y) = (zext_reg(b, rs1), zext_reg(b, rs2));
            let v = b.binary(BinOp::RemU, x, y);
            word(b, rd, v);
        }
        _ => return false,
    }
    true
}

fn load(b: &mut IrBuilder, rd: u8, rs1: u8, offset: i32, size: u8, signed: bool) {
    let a = address(b, rs1, offset);
    let v = b.load(a, size, signed);
    w(b, rd, v);
}

fn store(b: &mut IrBuilder, rs1: u8, rs2: u8, offset: i32, size: u8) {
    let a = address(b, rs1, offset);
    let v = r(b, rs2);
    b.store(a, size, v);
}

fn word_rr(b: &mut IrBuilder, op: BinOp, rd: u8, rs1: u8, rs2: u8) {
    let (x, y) = (r(b, rs1), r(b, rs2));
    let v = b.binary(op, x, y);
    word(b, rd, v);
}

fn shamt32(b: &mut IrBuilder, rs2: u8) -> Value {
    let s = r(b, rs2);
    let mask = b.imm(31);
    b.binary(BinOp::And, s, mask)
}

fn sext_reg(b: &mut IrBuilder, reg: u8) -> Value {
    let v = r(b, reg);
    b.unary(UnOp::Sext32, v)
}

fn zext_reg(b: &mut IrBuilder, reg: u8) -> Value {
    let v = r(b, reg);
    b.unary(UnOp::Zext32, v)
}
