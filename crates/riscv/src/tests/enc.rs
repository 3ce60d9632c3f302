//! A minimal RV64GC encoder for tests (base formats plus named helpers).
#![allow(dead_code)]

pub const ECALL: u32 = 0x0000_0073;
pub const EBREAK: u32 = 0x0010_0073;
pub const FENCE_I: u32 = 0x0000_100f;

pub fn r(op: u32, f3: u32, f7: u32, rd: u8, rs1: u8, rs2: u8) -> u32 {
    (f7 << 25)
        | (u32::from(rs2) << 20)
        | (u32::from(rs1) << 15)
        | (f3 << 12)
        | (u32::from(rd) << 7)
        | op
}

pub fn i(op: u32, f3: u32, rd: u8, rs1: u8, imm: i32) -> u32 {
    (((imm as u32) & 0xfff) << 20) | (u32::from(rs1) << 15) | (f3 << 12) | (u32::from(rd) << 7) | op
}

pub fn s(op: u32, f3: u32, rs1: u8, rs2: u8, imm: i32) -> u32 {
    let imm = imm as u32;
    (((imm >> 5) & 0x7f) << 25)
        | (u32::from(rs2) << 20)
        | (u32::from(rs1) << 15)
        | (f3 << 12)
        | ((imm & 0x1f) << 7)
        | op
}

pub fn b(f3: u32, rs1: u8, rs2: u8, off: i32) -> u32 {
    let o = off as u32;
    (((o >> 12) & 1) << 31)
        | (((o >> 5) & 0x3f) << 25)
        | (u32::from(rs2) << 20)
        | (u32::from(rs1) << 15)
        | (f3 << 12)
        | (((o >> 1) & 0xf) << 8)
        | (((o >> 11) & 1) << 7)
        | 0x63
}

pub fn jal(rd: u8, off: i32) -> u32 {
    let o = off as u32;
    (((o >> 20) & 1) << 31)
        | (((o >> 1) & 0x3ff) << 21)
        | (((o >> 11) & 1) << 20)
        | (((o >> 12) & 0xff) << 12)
        | (u32::from(rd) << 7)
        | 0x6f
}

pub fn jalr(rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x67, 0, rd, rs1, imm)
}

/// `value` is the full 32-bit result (low 12 bits ignored).
pub fn lui(rd: u8, value: i32) -> u32 {
    ((value as u32) & 0xffff_f000) | (u32::from(rd) << 7) | 0x37
}

pub fn auipc(rd: u8, value: i32) -> u32 {
    ((value as u32) & 0xffff_f000) | (u32::from(rd) << 7) | 0x17
}

pub fn addi(rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x13, 0, rd, rs1, imm)
}

pub fn addiw(rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x1b, 0, rd, rs1, imm)
}

pub fn slli(rd: u8, rs1: u8, sh: u32) -> u32 {
    i(0x13, 1, rd, rs1, sh as i32)
}

pub fn srli(rd: u8, rs1: u8, sh: u32) -> u32 {
    i(0x13, 5, rd, rs1, sh as i32)
}

pub fn srai(rd: u8, rs1: u8, sh: u32) -> u32 {
    i(0x13, 5, rd, rs1, (0x400 | sh) as i32)
}

pub fn andi(rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x13, 7, rd, rs1, imm)
}

/// OP (0x33) with (funct3, funct7).
pub fn op(f3: u32, f7: u32, rd: u8, rs1: u8, rs2: u8) -> u32 {
    r(0x33, f3, f7, rd, rs1, rs2)
}

/// OP-32 (0x3b) with (funct3, funct7).
pub fn op32(f3: u32, f7: u32, rd: u8, rs1: u8, rs2: u8) -> u32 {
    r(0x3b, f3, f7, rd, rs1, rs2)
}

pub fn add(rd: u8, rs1: u8, rs2: u8) -> u32 {
    op(0, 0, rd, rs1, rs2)
}

pub fn sub(rd: u8, rs1: u8, rs2: u8) -> u32 {
    op(0, 0x20, rd, rs1, rs2)
}

pub fn load(f3: u32, rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x03, f3, rd, rs1, imm)
}

pub fn store(f3: u32, rs1: u8, rs2: u8, imm: i32) -> u32 {
    s(0x23, f3, rs1, rs2, imm)
}

pub fn fld(rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x07, 3, rd, rs1, imm)
}

pub fn flw(rd: u8, rs1: u8, imm: i32) -> u32 {
    i(0x07, 2, rd, rs1, imm)
}

pub fn fsd(rs1: u8, rs2: u8, imm: i32) -> u32 {
    s(0x27, 3, rs1, rs2, imm)
}

pub fn fsw(rs1: u8, rs2: u8, imm: i32) -> u32 {
    s(0x27, 2, rs1, rs2, imm)
}

/// An A-extension op: funct5, width funct3 (2 = .w, 3 = .d), aq/rl bits.
pub fn amo(funct5: u32, f3: u32, aqrl: u32, rd: u8, rs1: u8, rs2: u8) -> u32 {
    r(0x2f, f3, (funct5 << 2) | aqrl, rd, rs1, rs2)
}

pub fn csr(f3: u32, rd: u8, src: u8, csr: u32) -> u32 {
    (csr << 20) | (u32::from(src) << 15) | (f3 << 12) | (u32::from(rd) << 7) | 0x73
}

/// OP-FP with funct7 and rm/funct3.
pub fn fp(f7: u32, rm: u32, rd: u8, rs1: u8, rs2: u8) -> u32 {
    r(0x53, rm, f7, rd, rs1, rs2)
}

/// A fused multiply-add: opcode 0x43/0x47/0x4b/0x4f, fmt 0 (S) or 1 (D).
pub fn fma(opcode: u32, fmt: u32, rm: u32, rd: u8, rs1: u8, rs2: u8, rs3: u8) -> u32 {
    (u32::from(rs3) << 27) | (fmt << 25) | r(opcode, rm, 0, rd, rs1, rs2)
}
