//! Execution of pre-decoded ops: one `match`, no allocation, no dynamic
//! calls beyond what the `MemAccess` implementation does.

use tcgkit_tcg_core::{AccessKind, CpuExit, FetchOp, Flow, MemAccess, MemFault, MemFaultKind};

use crate::cpu::{Cpu, Reservation};
use crate::fpu::{self, Flags, RoundingMode};
use crate::op::{AmoOp, CsrId, CsrOp, CvtOp, FBinOp, FCmpOp, FSignOp, FmaOp, Inst, RM_DYNAMIC};

const BOX: u64 = 0xffff_ffff_0000_0000;
const F32_SIGN: u32 = 0x8000_0000;
const F64_SIGN: u64 = 0x8000_0000_0000_0000;

#[inline(always)]
fn sext32(v: u64) -> u64 {
    v as u32 as i32 as i64 as u64
}

#[inline(always)]
fn addr(cpu: &Cpu, rs1: u8, imm: i32) -> u64 {
    cpu.r(rs1).wrapping_add(imm as i64 as u64)
}

#[cold]
fn fault(f: MemFault) -> Flow {
    Flow::Exit(CpuExit::Fault(f))
}

/// Executes `inst` (at `pc`) on `cpu`.
#[inline(always)]
pub(crate) fn execute<M: MemAccess>(cpu: &mut Cpu, inst: &Inst, pc: u64, mem: &mut M) -> Flow {
    macro_rules! load {
        ($rd:expr, $rs1:expr, $imm:expr, $size:expr, $signed:expr) => {
            match mem.load(addr(cpu, $rs1, $imm), $size, $signed) {
                Ok(v) => cpu.w($rd, v),
                Err(f) => return fault(f),
            }
        };
    }
    macro_rules! store {
        ($rs1:expr, $rs2:expr, $imm:expr, $size:expr) => {
            if let Err(f) = mem.store(addr(cpu, $rs1, $imm), $size, cpu.r($rs2)) {
                return fault(f);
            }
        };
    }
    macro_rules! alu {
        ($rd:expr, $v:expr) => {
            cpu.w($rd, $v)
        };
    }
    macro_rules! branch {
        ($cond:expr, $target:expr) => {
            return if $cond {
                Flow::Jump($target)
            } else {
                Flow::Next
            }
        };
    }
    match *inst {
        Inst::Nop => {}
        Inst::Const { rd, value } => alu!(rd, value),
        Inst::Jal { rd, len, target } => {
            cpu.w(rd, pc.wrapping_add(u64::from(len)));
            return Flow::Jump(target);
        }
        Inst::Jalr { rd, rs1, len, imm } => {
            let target = addr(cpu, rs1, imm) & !1;
            cpu.w(rd, pc.wrapping_add(u64::from(len)));
            return Flow::Jump(target);
        }
        Inst::Beq { rs1, rs2, target } => branch!(cpu.r(rs1) == cpu.r(rs2), target),
        Inst::Bne { rs1, rs2, target } => branch!(cpu.r(rs1) != cpu.r(rs2), target),
        Inst::Blt { rs1, rs2, target } => {
            branch!((cpu.r(rs1) as i64) < (cpu.r(rs2) as i64), target)
        }
        Inst::Bge { rs1, rs2, target } => {
            branch!((cpu.r(rs1) as i64) >= (cpu.r(rs2) as i64), target)
        }
        Inst::Bltu { rs1, rs2, target } => branch!(cpu.r(rs1) < cpu.r(rs2), target),
        Inst::Bgeu { rs1, rs2, target } => branch!(cpu.r(rs1) >= cpu.r(rs2), target),
        Inst::Lb { rd, rs1, imm } => load!(rd, rs1, imm, 1, true),
        Inst::Lh { rd, rs1, imm } => load!(rd, rs1, imm, 2, true),
        Inst::Lw { rd, rs1, imm } => load!(rd, rs1, imm, 4, true),
        Inst::Ld { rd, rs1, imm } => load!(rd, rs1, imm, 8, false),
        Inst::Lbu { rd, rs1, imm } => load!(rd, rs1, imm, 1, false),
        Inst::Lhu { rd, rs1, imm } => load!(rd, rs1, imm, 2, false),
        Inst::Lwu { rd, rs1, imm } => load!(rd, rs1, imm, 4, false),
        Inst::Sb { rs1, rs2, imm } => store!(rs1, rs2, imm, 1),
        Inst::Sh { rs1, rs2, imm } => store!(rs1, rs2, imm, 2),
        Inst::Sw { rs1, rs2, imm } => store!(rs1, rs2, imm, 4),
        Inst::Sd { rs1, rs2, imm } => store!(rs1, rs2, imm, 8),
        Inst::Addi { rd, rs1, imm } => alu!(rd, addr(cpu, rs1, imm)),
        Inst::Slti { rd, rs1, imm } => alu!(rd, u64::from((cpu.r(rs1) as i64) < i64::from(imm))),
        Inst::Sltiu { rd, rs1, imm } => alu!(rd, u64::from(cpu.r(rs1) < imm as i64 as u64)),
        Inst::Xori { rd, rs1, imm } => alu!(rd, cpu.r(rs1) ^ imm as i64 as u64),
        Inst::Ori { rd, rs1, imm } => alu!(rd, cpu.r(rs1) | imm as i64 as u64),
        Inst::Andi { rd, rs1, imm } => alu!(rd, cpu.r(rs1) & imm as i64 as u64),
        Inst::Slli { rd, rs1, shamt } => alu!(rd, cpu.r(rs1) << (shamt & 63)),
        Inst::Srli { rd, rs1, shamt } => alu!(rd, cpu.r(rs1) >> (shamt & 63)),
        Inst::Srai { rd, rs1, shamt } => alu!(rd, ((cpu.r(rs1) as i64) >> (shamt & 63)) as u64),
        Inst::Addiw { rd, rs1, imm } => alu!(rd, sext32(addr(cpu, rs1, imm))),
        Inst::Slliw { rd, rs1, shamt } => {
            alu!(rd, sext32(u64::from((cpu.r(rs1) as u32) << (shamt & 31))))
        }
        Inst::Srliw { rd, rs1, shamt } => {
            alu!(rd, sext32(u64::from((cpu.r(rs1) as u32) >> (shamt & 31))))
        }
        Inst::Sraiw { rd, rs1, shamt } => {
            alu!(rd, ((cpu.r(rs1) as i32) >> (shamt & 31)) as i64 as u64)
        }
        Inst::Add { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1).wrapping_add(cpu.r(rs2))),
        Inst::Sub { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1).wrapping_sub(cpu.r(rs2))),
        Inst::Sll { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1) << (cpu.r(rs2) & 63)),
        Inst::Slt { rd, rs1, rs2 } => {
            alu!(rd, u64::from((cpu.r(rs1) as i64) < (cpu.r(rs2) as i64)))
        }
        Inst::Sltu { rd, rs1, rs2 } => alu!(rd, u64::from(cpu.r(rs1) < cpu.r(rs2))),
        Inst::Xor { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1) ^ cpu.r(rs2)),
        Inst::Srl { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1) >> (cpu.r(rs2) & 63)),
        Inst::Sra { rd, rs1, rs2 } => {
            alu!(rd, ((cpu.r(rs1) as i64) >> (cpu.r(rs2) & 63)) as u64)
        }
        Inst::Or { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1) | cpu.r(rs2)),
        Inst::And { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1) & cpu.r(rs2)),
        Inst::Mul { rd, rs1, rs2 } => alu!(rd, cpu.r(rs1).wrapping_mul(cpu.r(rs2))),
        Inst::Mulh { rd, rs1, rs2 } => {
            let p = i128::from(cpu.r(rs1) as i64) * i128::from(cpu.r(rs2) as i64);
            alu!(rd, (p >> 64) as u64)
        }
        Inst::Mulhsu { rd, rs1, rs2 } => {
            let p = i128::from(cpu.r(rs1) as i64).wrapping_mul(i128::from(cpu.r(rs2)));
            alu!(rd, (p >> 64) as u64)
        }
        Inst::Mulhu { rd, rs1, rs2 } => {
            let p = u128::from(cpu.r(rs1)) * u128::from(cpu.r(rs2));
            alu!(rd, (p >> 64) as u64)
        }
        Inst::Div { rd, rs1, rs2 } => alu!(rd, div(cpu.r(rs1), cpu.r(rs2))),
        Inst::Divu { rd, rs1, rs2 } => {
            let (a, b) = (cpu.r(rs1), cpu.r(rs2));
            alu!(rd, a.checked_div(b).unwrap_or(u64::MAX))
        }
        Inst::Rem { rd, rs1, rs2 } => alu!(rd, rem(cpu.r(rs1), cpu.r(rs2))),
        Inst::Remu { rd, rs1, rs2 } => {
            let (a, b) = (cpu.r(rs1), cpu.r(rs2));
            alu!(rd, a.checked_rem(b).unwrap_or(a))
        }
        Inst::Addw { rd, rs1, rs2 } => alu!(rd, sext32(cpu.r(rs1).wrapping_add(cpu.r(rs2)))),
        Inst::Subw { rd, rs1, rs2 } => alu!(rd, sext32(cpu.r(rs1).wrapping_sub(cpu.r(rs2)))),
        Inst::Sllw { rd, rs1, rs2 } => {
            alu!(
                rd,
                sext32(u64::from((cpu.r(rs1) as u32) << (cpu.r(rs2) & 31)))
            )
        }
        Inst::Srlw { rd, rs1, rs2 } => {
            alu!(
                rd,
                sext32(u64::from((cpu.r(rs1) as u32) >> (cpu.r(rs2) & 31)))
            )
        }
        Inst::Sraw { rd, rs1, rs2 } => {
            alu!(rd, ((cpu.r(rs1) as i32) >> (cpu.r(rs2) & 31)) as i64 as u64)
        }
        Inst::Mulw { rd, rs1, rs2 } => alu!(rd, sext32(cpu.r(rs1).wrapping_mul(cpu.r(rs2)))),
        Inst::Divw { rd, rs1, rs2 } => {
            let (a, b) = (cpu.r(rs1) as i32, cpu.r(rs2) as i32);
            let q = if b == 0 { -1 } else { a.wrapping_div(b) };
            alu!(rd, q as i64 as u64)
        }
        Inst::Divuw { rd, rs1, rs2 } => {
            let (a, b) = (cpu.r(rs1) as u32, cpu.r(rs2) as u32);
            alu!(rd, sext32(u64::from(a.checked_div(b).unwrap_or(u32::MAX))))
        }
        Inst::Remw { rd, rs1, rs2 } => {
            let (a, b) = (cpu.r(rs1) as i32, cpu.r(rs2) as i32);
            let r = if b == 0 { a } else { a.wrapping_rem(b) };
            alu!(rd, r as i64 as u64)
        }
        Inst::Remuw { rd, rs1, rs2 } => {
            let (a, b) = (cpu.r(rs1) as u32, cpu.r(rs2) as u32);
            alu!(rd, sext32(u64::from(a.checked_rem(b).unwrap_or(a))))
        }
        Inst::Ecall => return Flow::Exit(CpuExit::Syscall),
        Inst::Ebreak => return Flow::Exit(CpuExit::Breakpoint),
        Inst::Fence => mem.memory().fence(),
        Inst::FenceI => return Flow::Exit(CpuExit::FlushCode),
        Inst::Csr { op, rd, src, csr } => csr_op(cpu, op, rd, src, csr),
        Inst::LrW { rd, rs1 } => return load_reserved(cpu, mem, rd, rs1, 4),
        Inst::LrD { rd, rs1 } => return load_reserved(cpu, mem, rd, rs1, 8),
        Inst::ScW { rd, rs1, rs2 } => return store_conditional(cpu, mem, rd, rs1, rs2, 4),
        Inst::ScD { rd, rs1, rs2 } => return store_conditional(cpu, mem, rd, rs1, rs2, 8),
        Inst::AmoW { op, rd, rs1, rs2 } => return amo(cpu, mem, op, rd, rs1, rs2, 4),
        Inst::AmoD { op, rd, rs1, rs2 } => return amo(cpu, mem, op, rd, rs1, rs2, 8),
        Inst::Flw { rd, rs1, imm } => match mem.load(addr(cpu, rs1, imm), 4, false) {
            Ok(v) => cpu.f[usize::from(rd & 31)] = BOX | v,
            Err(f) => return fault(f),
        },
        Inst::Fld { rd, rs1, imm } => match mem.load(addr(cpu, rs1, imm), 8, false) {
            Ok(v) => cpu.f[usize::from(rd & 31)] = v,
            Err(f) => return fault(f),
        },
        // fsw stores the low 32 bits whether or not they are NaN-boxed.
        Inst::Fsw { rs1, rs2, imm } => {
            let v = cpu.f[usize::from(rs2 & 31)] & 0xffff_ffff;
            if let Err(f) = mem.store(addr(cpu, rs1, imm), 4, v) {
                return fault(f);
            }
        }
        Inst::Fsd { rs1, rs2, imm } => {
            let v = cpu.f[usize::from(rs2 & 31)];
            if let Err(f) = mem.store(addr(cpu, rs1, imm), 8, v) {
                return fault(f);
            }
        }
        // Listed rather than `_`: with every variant an arm, the dispatch
        // jump table covers the whole discriminant range and needs no range
        // check before the indirect jump.
        Inst::FBin { .. }
        | Inst::FClass { .. }
        | Inst::FCmp { .. }
        | Inst::FCvt { .. }
        | Inst::FMvDX { .. }
        | Inst::FMvWX { .. }
        | Inst::FMvXD { .. }
        | Inst::FMvXW { .. }
        | Inst::FSign { .. }
        | Inst::FSqrt { .. }
        | Inst::Fma { .. } => return execute_fp(cpu, inst, pc, mem),
    }
    Flow::Next
}

fn div(a: u64, b: u64) -> u64 {
    if b == 0 {
        u64::MAX
    } else {
        // wrapping_div gives MIN for MIN / -1, as RISC-V specifies.
        (a as i64).wrapping_div(b as i64) as u64
    }
}

fn rem(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        (a as i64).wrapping_rem(b as i64) as u64
    }
}

fn csr_op(cpu: &mut Cpu, op: CsrOp, rd: u8, src: u8, csr: CsrId) {
    let old = match csr {
        CsrId::Fflags => u64::from(cpu.fcsr & 0x1f),
        CsrId::Frm => u64::from(cpu.frm()),
        CsrId::Fcsr => u64::from(cpu.fcsr),
        CsrId::Cycle | CsrId::Time | CsrId::Instret => cpu.counter(),
    };
    let operand = match op {
        CsrOp::Rw | CsrOp::Rs | CsrOp::Rc => cpu.r(src),
        CsrOp::Rwi | CsrOp::Rsi | CsrOp::Rci => u64::from(src),
    };
    // csrrs/csrrc with x0 or a zero immediate read without writing; the
    // decoder already rejected writes to the read-only counters.
    let new = match op {
        CsrOp::Rw | CsrOp::Rwi => Some(operand),
        CsrOp::Rs | CsrOp::Rsi => (src != 0).then_some(old | operand),
        CsrOp::Rc | CsrOp::Rci => (src != 0).then_some(old & !operand),
    };
    if let Some(v) = new {
        let v = v as u8;
        cpu.fcsr = match csr {
            CsrId::Fflags => (cpu.fcsr & !0x1f) | (v & 0x1f),
            CsrId::Frm => (cpu.fcsr & 0x1f) | ((v & 7) << 5),
            CsrId::Fcsr => v,
            CsrId::Cycle | CsrId::Time | CsrId::Instret => cpu.fcsr,
        };
    }
    cpu.w(rd, old);
}

#[cold]
fn misaligned(addr: u64, access: AccessKind) -> Flow {
    fault(MemFault {
        addr,
        access,
        kind: MemFaultKind::Misaligned,
    })
}

/// Zero-extends the low `size` bytes of `value`.
fn truncate(value: u64, size: u8) -> u64 {
    if size == 8 {
        value
    } else {
        value & 0xffff_ffff
    }
}

fn load_reserved<M: MemAccess>(cpu: &mut Cpu, mem: &mut M, rd: u8, rs1: u8, size: u8) -> Flow {
    let addr = cpu.r(rs1);
    // Like qemu-user (and Linux), a misaligned LR raises SIGBUS.
    if addr & (u64::from(size) - 1) != 0 {
        return misaligned(addr, AccessKind::Read);
    }
    match mem.load(addr, size, size == 4) {
        Ok(v) => {
            // An acquire (whatever the aq bit says): later accesses of
            // this thread stay after it. Free on x86-64.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            cpu.reservation = Some(Reservation {
                addr,
                size,
                value: truncate(v, size),
            });
            cpu.w(rd, v);
            Flow::Next
        }
        Err(f) => fault(f),
    }
}

fn store_conditional<M: MemAccess>(
    cpu: &mut Cpu,
    mem: &mut M,
    rd: u8,
    rs1: u8,
    rs2: u8,
    size: u8,
) -> Flow {
    let addr = cpu.r(rs1);
    // Any SC ends the reservation. Without a matching one it fails without
    // touching memory (so a misaligned SC just fails, as under qemu-user).
    let Some(res) = cpu
        .reservation
        .take()
        .filter(|r| r.addr == addr && r.size == size)
    else {
        cpu.w(rd, 1);
        return Flow::Next;
    };
    // qemu-user implements a matching SC as a compare-and-swap against the
    // value LR saw, so does this, atomically across threads: another
    // thread's store of a different value in between makes it fail, one
    // of the same value does not (the ABA case QEMU accepts too).
    // Instrumentation sees a load, then a store of the new value on
    // success or of the unchanged old one on failure, as QEMU's plugins do.
    let new = cpu.r(rs2);
    let swap = |current: u64| if current == res.value { new } else { current };
    match mem.atomic_update(addr, size, false, swap) {
        Ok((old, _)) => {
            cpu.w(rd, u64::from(old != res.value));
            Flow::Next
        }
        Err(f) => fault(f),
    }
}

fn amo<M: MemAccess>(
    cpu: &mut Cpu,
    mem: &mut M,
    op: AmoOp,
    rd: u8,
    rs1: u8,
    rs2: u8,
    size: u8,
) -> Flow {
    let addr = cpu.r(rs1);
    if addr & (u64::from(size) - 1) != 0 {
        return misaligned(addr, AccessKind::Write);
    }
    let src = cpu.r(rs2);
    let apply = |old: u64| {
        if size == 4 {
            u64::from(amo_apply32(op, old as u32, src as u32))
        } else {
            amo_apply64(op, old, src)
        }
    };
    // One host atomic read-modify-write (an instruction of its own where
    // the host has one); a fault, even of the read half, is a store fault.
    let native = match op {
        AmoOp::Swap => Some(FetchOp::Swap),
        AmoOp::Add => Some(FetchOp::Add),
        AmoOp::Xor => Some(FetchOp::Xor),
        AmoOp::And => Some(FetchOp::And),
        AmoOp::Or => Some(FetchOp::Or),
        AmoOp::Min | AmoOp::Max | AmoOp::Minu | AmoOp::Maxu => None,
    };
    let result = match native {
        Some(fetch) => mem.atomic_fetch(addr, size, size == 4, fetch, src),
        None => mem.atomic_update(addr, size, size == 4, apply),
    };
    match result {
        Ok((old, _)) => {
            cpu.w(rd, old);
            Flow::Next
        }
        Err(f) => fault(f),
    }
}

fn amo_apply32(op: AmoOp, a: u32, b: u32) -> u32 {
    match op {
        AmoOp::Swap => b,
        AmoOp::Add => a.wrapping_add(b),
        AmoOp::Xor => a ^ b,
        AmoOp::And => a & b,
        AmoOp::Or => a | b,
        AmoOp::Min => (a as i32).min(b as i32) as u32,
        AmoOp::Max => (a as i32).max(b as i32) as u32,
        AmoOp::Minu => a.min(b),
        AmoOp::Maxu => a.max(b),
    }
}

fn amo_apply64(op: AmoOp, a: u64, b: u64) -> u64 {
    match op {
        AmoOp::Swap => b,
        AmoOp::Add => a.wrapping_add(b),
        AmoOp::Xor => a ^ b,
        AmoOp::And => a & b,
        AmoOp::Or => a | b,
        AmoOp::Min => (a as i64).min(b as i64) as u64,
        AmoOp::Max => (a as i64).max(b as i64) as u64,
        AmoOp::Minu => a.min(b),
        AmoOp::Maxu => a.max(b),
    }
}

// ---- F and D ------------------------------------------------------------

/// A single read from a 64-bit register: anything not NaN-boxed reads as
/// the canonical NaN.
#[inline]
fn f32_of(cpu: &Cpu, r: u8) -> u32 {
    let v = cpu.f[usize::from(r & 31)];
    if v & BOX == BOX {
        v as u32
    } else {
        fpu::F32_CANONICAL_NAN
    }
}

#[inline]
fn f64_of(cpu: &Cpu, r: u8) -> u64 {
    cpu.f[usize::from(r & 31)]
}

#[inline]
fn set_f32(cpu: &mut Cpu, r: u8, bits: u32) {
    cpu.f[usize::from(r & 31)] = BOX | u64::from(bits);
}

#[inline]
fn set_f64(cpu: &mut Cpu, r: u8, bits: u64) {
    cpu.f[usize::from(r & 31)] = bits;
}

#[inline]
fn accrue(cpu: &mut Cpu, flags: Flags) {
    cpu.fcsr |= flags.0 & 0x1f;
}

/// The rounding mode an op with field `rm` uses, `None` if reserved (a
/// static 5/6 never decodes; a dynamic one depends on frm at run time).
#[inline]
fn rounding(cpu: &Cpu, rm: u8) -> Option<RoundingMode> {
    RoundingMode::from_bits(if rm == RM_DYNAMIC { cpu.frm() } else { rm })
}

/// The illegal-instruction exit for an op whose encoding is re-read from
/// memory: ops do not carry their raw bits, and this path is cold.
#[cold]
fn illegal<M: MemAccess>(mem: &mut M, pc: u64) -> Flow {
    let mut buf = [0u8; 4];
    let raw = match mem.memory().fetch(pc, &mut buf) {
        Ok(()) => u32::from_le_bytes(buf),
        Err(_) => {
            let mut half = [0u8; 2];
            mem.memory()
                .fetch(pc, &mut half)
                .map_or(0, |()| u32::from(u16::from_le_bytes(half)))
        }
    };
    let raw = if raw & 3 == 3 { raw } else { raw & 0xffff };
    Flow::Exit(CpuExit::IllegalInstruction { raw })
}

fn execute_fp<M: MemAccess>(cpu: &mut Cpu, inst: &Inst, pc: u64, mem: &mut M) -> Flow {
    macro_rules! rm {
        ($rm:expr) => {
            match rounding(cpu, $rm) {
                Some(rm) => rm,
                None => return illegal(mem, pc),
            }
        };
    }
    match *inst {
        Inst::FBin {
            op,
            dbl,
            rd,
            rs1,
            rs2,
            rm,
        } => {
            let rm = rm!(rm);
            if dbl {
                let (a, b) = (f64_of(cpu, rs1), f64_of(cpu, rs2));
                let (v, fl) = match op {
                    FBinOp::Add => fpu::f64_add(a, b, rm),
                    FBinOp::Sub => fpu::f64_sub(a, b, rm),
                    FBinOp::Mul => fpu::f64_mul(a, b, rm),
                    FBinOp::Div => fpu::f64_div(a, b, rm),
                };
                set_f64(cpu, rd, v);
                accrue(cpu, fl);
            } else {
                let (a, b) = (f32_of(cpu, rs1), f32_of(cpu, rs2));
                let (v, fl) = match op {
                    FBinOp::Add => fpu::f32_add(a, b, rm),
                    FBinOp::Sub => fpu::f32_sub(a, b, rm),
                    FBinOp::Mul => fpu::f32_mul(a, b, rm),
                    FBinOp::Div => fpu::f32_div(a, b, rm),
                };
                set_f32(cpu, rd, v);
                accrue(cpu, fl);
            }
        }
        Inst::FSign {
            op,
            dbl,
            rd,
            rs1,
            rs2,
        } => {
            if dbl {
                let (a, b) = (f64_of(cpu, rs1), f64_of(cpu, rs2));
                let (v, fl) = match op {
                    FSignOp::Sgnj => ((a & !F64_SIGN) | (b & F64_SIGN), Flags::default()),
                    FSignOp::Sgnjn => ((a & !F64_SIGN) | (!b & F64_SIGN), Flags::default()),
                    FSignOp::Sgnjx => (a ^ (b & F64_SIGN), Flags::default()),
                    FSignOp::Min => fpu::f64_min(a, b),
                    FSignOp::Max => fpu::f64_max(a, b),
                };
                set_f64(cpu, rd, v);
                accrue(cpu, fl);
            } else {
                let (a, b) = (f32_of(cpu, rs1), f32_of(cpu, rs2));
                let (v, fl) = match op {
                    FSignOp::Sgnj => ((a & !F32_SIGN) | (b & F32_SIGN), Flags::default()),
                    FSignOp::Sgnjn => ((a & !F32_SIGN) | (!b & F32_SIGN), Flags::default()),
                    FSignOp::Sgnjx => (a ^ (b & F32_SIGN), Flags::default()),
                    FSignOp::Min => fpu::f32_min(a, b),
                    FSignOp::Max => fpu::f32_max(a, b),
                };
                set_f32(cpu, rd, v);
                accrue(cpu, fl);
            }
        }
        Inst::FCmp {
            op,
            dbl,
            rd,
            rs1,
            rs2,
        } => {
            let (v, fl) = if dbl {
                let (a, b) = (f64_of(cpu, rs1), f64_of(cpu, rs2));
                match op {
                    FCmpOp::Eq => fpu::f64_eq(a, b),
                    FCmpOp::Lt => fpu::f64_lt(a, b),
                    FCmpOp::Le => fpu::f64_le(a, b),
                }
            } else {
                let (a, b) = (f32_of(cpu, rs1), f32_of(cpu, rs2));
                match op {
                    FCmpOp::Eq => fpu::f32_eq(a, b),
                    FCmpOp::Lt => fpu::f32_lt(a, b),
                    FCmpOp::Le => fpu::f32_le(a, b),
                }
            };
            cpu.w(rd, u64::from(v));
            accrue(cpu, fl);
        }
        Inst::FSqrt { dbl, rd, rs1, rm } => {
            let rm = rm!(rm);
            if dbl {
                let (v, fl) = fpu::f64_sqrt(f64_of(cpu, rs1), rm);
                set_f64(cpu, rd, v);
                accrue(cpu, fl);
            } else {
                let (v, fl) = fpu::f32_sqrt(f32_of(cpu, rs1), rm);
                set_f32(cpu, rd, v);
                accrue(cpu, fl);
            }
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
            let rm = rm!(rm);
            let (neg_product, neg_addend) = match op {
                FmaOp::Madd => (false, false),
                FmaOp::Msub => (false, true),
                FmaOp::Nmsub => (true, false),
                FmaOp::Nmadd => (true, true),
            };
            if dbl {
                let (a, b, c) = (f64_of(cpu, rs1), f64_of(cpu, rs2), f64_of(cpu, rs3));
                let (v, fl) = fpu::f64_fma(a, b, c, rm, neg_product, neg_addend);
                set_f64(cpu, rd, v);
                accrue(cpu, fl);
            } else {
                let (a, b, c) = (f32_of(cpu, rs1), f32_of(cpu, rs2), f32_of(cpu, rs3));
                let (v, fl) = fpu::f32_fma(a, b, c, rm, neg_product, neg_addend);
                set_f32(cpu, rd, v);
                accrue(cpu, fl);
            }
        }
        Inst::FCvt { op, rd, rs1, rm } => {
            let rm = rm!(rm);
            let fl = convert(cpu, op, rd, rs1, rm);
            accrue(cpu, fl);
        }
        Inst::FClass { dbl, rd, rs1 } => {
            let v = if dbl {
                fpu::f64_classify(f64_of(cpu, rs1))
            } else {
                fpu::f32_classify(f32_of(cpu, rs1))
            };
            cpu.w(rd, v);
        }
        // The moves transfer raw bits: no NaN-boxing check.
        Inst::FMvXW { rd, rs1 } => cpu.w(rd, sext32(f64_of(cpu, rs1))),
        Inst::FMvWX { rd, rs1 } => set_f32(cpu, rd, cpu.r(rs1) as u32),
        Inst::FMvXD { rd, rs1 } => cpu.w(rd, f64_of(cpu, rs1)),
        Inst::FMvDX { rd, rs1 } => set_f64(cpu, rd, cpu.r(rs1)),
        // Every integer op is handled by `execute`; this arm is unreachable
        // in practice but must not panic.
        _ => return illegal(mem, pc),
    }
    Flow::Next
}

/// fcvt.*: integer results are written sign-extended to 64 bits (also the
/// unsigned 32-bit ones, as the spec requires).
fn convert(cpu: &mut Cpu, op: CvtOp, rd: u8, rs1: u8, rm: RoundingMode) -> Flags {
    let x = cpu.r(rs1);
    match op {
        CvtOp::WS => to_x(cpu, rd, fpu::f32_to_i32(f32_of(cpu, rs1), rm), |v| {
            v as i64 as u64
        }),
        CvtOp::WuS => to_x(cpu, rd, fpu::f32_to_u32(f32_of(cpu, rs1), rm), |v| {
            v as i32 as i64 as u64
        }),
        CvtOp::LS => to_x(cpu, rd, fpu::f32_to_i64(f32_of(cpu, rs1), rm), |v| v as u64),
        CvtOp::LuS => to_x(cpu, rd, fpu::f32_to_u64(f32_of(cpu, rs1), rm), |v| v),
        CvtOp::WD => to_x(cpu, rd, fpu::f64_to_i32(f64_of(cpu, rs1), rm), |v| {
            v as i64 as u64
        }),
        CvtOp::WuD => to_x(cpu, rd, fpu::f64_to_u32(f64_of(cpu, rs1), rm), |v| {
            v as i32 as i64 as u64
        }),
        CvtOp::LD => to_x(cpu, rd, fpu::f64_to_i64(f64_of(cpu, rs1), rm), |v| v as u64),
        CvtOp::LuD => to_x(cpu, rd, fpu::f64_to_u64(f64_of(cpu, rs1), rm), |v| v),
        CvtOp::SW => to_s(cpu, rd, fpu::i32_to_f32(x as i32, rm)),
        CvtOp::SWu => to_s(cpu, rd, fpu::u32_to_f32(x as u32, rm)),
        CvtOp::SL => to_s(cpu, rd, fpu::i64_to_f32(x as i64, rm)),
        CvtOp::SLu => to_s(cpu, rd, fpu::u64_to_f32(x, rm)),
        CvtOp::DW => to_d(cpu, rd, fpu::i32_to_f64(x as i32, rm)),
        CvtOp::DWu => to_d(cpu, rd, fpu::u32_to_f64(x as u32, rm)),
        CvtOp::DL => to_d(cpu, rd, fpu::i64_to_f64(x as i64, rm)),
        CvtOp::DLu => to_d(cpu, rd, fpu::u64_to_f64(x, rm)),
        CvtOp::SD => to_s(cpu, rd, fpu::f64_to_f32(f64_of(cpu, rs1), rm)),
        CvtOp::DS => to_d(cpu, rd, fpu::f32_to_f64(f32_of(cpu, rs1))),
    }
}

fn to_x<T>(cpu: &mut Cpu, rd: u8, (v, fl): (T, Flags), widen: impl FnOnce(T) -> u64) -> Flags {
    cpu.w(rd, widen(v));
    fl
}

fn to_s(cpu: &mut Cpu, rd: u8, (v, fl): (u32, Flags)) -> Flags {
    set_f32(cpu, rd, v);
    fl
}

fn to_d(cpu: &mut Cpu, rd: u8, (v, fl): (u64, Flags)) -> Flags {
    set_f64(cpu, rd, v);
    fl
}
