//! A toy guest ISA for exercising the engine: fixed 4-byte words
//! `opcode:8 | rd:4 | rs:4 | imm:16 (signed)`, sixteen 64-bit registers.
#![allow(dead_code)]

use tcgkit_tcg_core::*;

pub const CODE: u64 = 0x10000;
pub const DATA: u64 = 0x20000;

#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// rd = rs + imm
    Addi {
        rd: u8,
        rs: u8,
        imm: i64,
    },
    /// rd = load(rs + imm, size, signed)
    Load {
        rd: u8,
        rs: u8,
        imm: i64,
        size: u8,
        signed: bool,
    },
    /// store(rs + imm, size) = rd
    Store {
        rd: u8,
        rs: u8,
        imm: i64,
        size: u8,
    },
    /// if rd != rs: pc += imm
    Bne {
        rd: u8,
        rs: u8,
        imm: i64,
    },
    /// pc += imm
    Jmp {
        imm: i64,
    },
    /// tmp = load8(rs); store8(rs, tmp + rd); rd = tmp
    AmoAdd {
        rd: u8,
        rs: u8,
    },
    Syscall,
    Break,
    FenceI,
}

pub const OP_ADDI: u32 = 1;
pub const OP_LD: u32 = 2;
pub const OP_LW_SIGNED: u32 = 3;
pub const OP_LB: u32 = 4;
pub const OP_SD: u32 = 5;
pub const OP_SB: u32 = 6;
pub const OP_BNE: u32 = 7;
pub const OP_JMP: u32 = 8;
pub const OP_SYSCALL: u32 = 9;
pub const OP_BREAK: u32 = 10;
pub const OP_FENCEI: u32 = 11;
pub const OP_AMOADD: u32 = 12;

pub fn enc(op: u32, rd: u32, rs: u32, imm: i32) -> u32 {
    (op << 24) | ((rd & 15) << 20) | ((rs & 15) << 16) | (imm as u32 & 0xffff)
}
pub fn addi(rd: u32, rs: u32, imm: i32) -> u32 {
    enc(OP_ADDI, rd, rs, imm)
}
pub fn ld(rd: u32, rs: u32, imm: i32) -> u32 {
    enc(OP_LD, rd, rs, imm)
}
pub fn lw_signed(rd: u32, rs: u32, imm: i32) -> u32 {
    enc(OP_LW_SIGNED, rd, rs, imm)
}
pub fn lb(rd: u32, rs: u32, imm: i32) -> u32 {
    enc(OP_LB, rd, rs, imm)
}
pub fn sd(src: u32, rs: u32, imm: i32) -> u32 {
    enc(OP_SD, src, rs, imm)
}
pub fn sb(src: u32, rs: u32, imm: i32) -> u32 {
    enc(OP_SB, src, rs, imm)
}
/// Branch to `offset` bytes from this instruction if rd != rs.
pub fn bne(rd: u32, rs: u32, offset: i32) -> u32 {
    enc(OP_BNE, rd, rs, offset)
}
pub fn jmp(offset: i32) -> u32 {
    enc(OP_JMP, 0, 0, offset)
}
pub fn amoadd(rd: u32, rs: u32) -> u32 {
    enc(OP_AMOADD, rd, rs, 0)
}
pub fn syscall() -> u32 {
    enc(OP_SYSCALL, 0, 0, 0)
}
pub fn brk() -> u32 {
    enc(OP_BREAK, 0, 0, 0)
}
pub fn fencei() -> u32 {
    enc(OP_FENCEI, 0, 0, 0)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cpu {
    pub pc: u64,
    pub x: [u64; 16],
}

pub struct Toy;

const NAMES: [&str; 17] = [
    "pc", "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

fn reg(cpu: &Cpu, r: u8) -> u64 {
    cpu.x[usize::from(r & 15)]
}

impl Frontend for Toy {
    type Cpu = Cpu;
    type Op = Op;

    fn pc(cpu: &Cpu) -> u64 {
        cpu.pc
    }
    fn set_pc(cpu: &mut Cpu, pc: u64) {
        cpu.pc = pc;
    }
    fn decode(&self, mem: &mut GuestMemory, pc: u64) -> Result<Decoded<Op>, DecodeError> {
        let mut word = [0u8; 4];
        mem.fetch(pc, &mut word).map_err(DecodeError::Fault)?;
        let raw = u32::from_le_bytes(word);
        let rd = ((raw >> 20) & 15) as u8;
        let rs = ((raw >> 16) & 15) as u8;
        let imm = i64::from(raw as u16 as i16);
        let (op, ends_block) = match raw >> 24 {
            OP_ADDI => (Op::Addi { rd, rs, imm }, false),
            OP_LD => (
                Op::Load {
                    rd,
                    rs,
                    imm,
                    size: 8,
                    signed: false,
                },
                false,
            ),
            OP_LW_SIGNED => (
                Op::Load {
                    rd,
                    rs,
                    imm,
                    size: 4,
                    signed: true,
                },
                false,
            ),
            OP_LB => (
                Op::Load {
                    rd,
                    rs,
                    imm,
                    size: 1,
                    signed: false,
                },
                false,
            ),
            OP_SD => (
                Op::Store {
                    rd,
                    rs,
                    imm,
                    size: 8,
                },
                false,
            ),
            OP_SB => (
                Op::Store {
                    rd,
                    rs,
                    imm,
                    size: 1,
                },
                false,
            ),
            OP_BNE => (Op::Bne { rd, rs, imm }, true),
            OP_JMP => (Op::Jmp { imm }, true),
            OP_AMOADD => (Op::AmoAdd { rd, rs }, false),
            OP_SYSCALL => (Op::Syscall, true),
            OP_BREAK => (Op::Break, true),
            OP_FENCEI => (Op::FenceI, true),
            _ => return Err(DecodeError::Illegal { pc, raw }),
        };
        Ok(Decoded {
            op,
            len: 4,
            raw,
            ends_block,
            accesses_memory: matches!(op, Op::Load { .. } | Op::Store { .. } | Op::AmoAdd { .. }),
        })
    }
    fn execute<M: MemAccess>(cpu: &mut Cpu, op: &Op, pc: u64, mem: &mut M) -> Flow {
        match *op {
            Op::Addi { rd, rs, imm } => {
                cpu.x[usize::from(rd)] = reg(cpu, rs).wrapping_add(imm as u64);
                Flow::Next
            }
            Op::Load {
                rd,
                rs,
                imm,
                size,
                signed,
            } => match mem.load(reg(cpu, rs).wrapping_add(imm as u64), size, signed) {
                Ok(v) => {
                    cpu.x[usize::from(rd)] = v;
                    Flow::Next
                }
                Err(f) => Flow::Exit(CpuExit::Fault(f)),
            },
            Op::Store { rd, rs, imm, size } => {
                match mem.store(reg(cpu, rs).wrapping_add(imm as u64), size, reg(cpu, rd)) {
                    Ok(()) => Flow::Next,
                    Err(f) => Flow::Exit(CpuExit::Fault(f)),
                }
            }
            Op::Bne { rd, rs, imm } => {
                if reg(cpu, rd) != reg(cpu, rs) {
                    Flow::Jump(pc.wrapping_add(imm as u64))
                } else {
                    Flow::Next
                }
            }
            Op::Jmp { imm } => Flow::Jump(pc.wrapping_add(imm as u64)),
            Op::AmoAdd { rd, rs } => {
                let addr = reg(cpu, rs);
                let old = match mem.load(addr, 8, false) {
                    Ok(v) => v,
                    Err(f) => return Flow::Exit(CpuExit::Fault(f)),
                };
                if let Err(f) = mem.store(addr, 8, old.wrapping_add(reg(cpu, rd))) {
                    return Flow::Exit(CpuExit::Fault(f));
                }
                cpu.x[usize::from(rd)] = old;
                Flow::Next
            }
            Op::Syscall => Flow::Exit(CpuExit::Syscall),
            Op::Break => Flow::Exit(CpuExit::Breakpoint),
            Op::FenceI => Flow::Exit(CpuExit::FlushCode),
        }
    }
    fn disassemble(&self, raw: &[u8], _pc: u64) -> String {
        let word = raw
            .iter()
            .rev()
            .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
        format!("op{} {:#x}", word >> 24, word & 0xff_ffff)
    }
    fn read_register(cpu: &Cpu, name: &str) -> Option<u64> {
        if name == "pc" {
            return Some(cpu.pc);
        }
        let n: usize = name.strip_prefix('r')?.parse().ok()?;
        cpu.x.get(n).copied()
    }
    fn register_names(&self) -> &'static [&'static str] {
        &NAMES
    }
}

/// Memory with `code` at CODE (r-x) and a zeroed read-write page at DATA.
pub fn machine(code: &[u32]) -> GuestMemory {
    let mut mem = GuestMemory::new();
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let len = (bytes.len() as u64).max(1);
    mem.map(CODE, len, Perms::READ | Perms::EXEC)
        .expect("map code");
    mem.write_initial(CODE, &bytes).expect("load code");
    mem.map(DATA, PAGE_SIZE, Perms::READ | Perms::WRITE)
        .expect("map data");
    mem
}

pub fn cpu_at(pc: u64) -> Cpu {
    Cpu { pc, x: [0; 16] }
}

/// A counting loop: r1 counts up to `n` (r2 holds n), each iteration loads
/// DATA[0] into r3, stores r1 to DATA[8]; then a syscall.
/// 5 instructions per iteration: addi, ld, sd, addi(pad), bne.
pub fn loop_program(n: i32) -> Vec<u32> {
    vec![
        addi(2, 0, n),      // 0x00: r2 = n
        addi(4, 0, 0x2000), // 0x04: r4 = 0x2000
        addi(4, 4, 0x2000), // 0x08: r4 = 0x4000 ... built up below
        addi(5, 0, 0),      // 0x0c
        // r4 = DATA via repeated adds is awkward; DATA = 0x20000 = 8 * 0x4000
        addi(4, 4, 0x4000),     // 0x10: r4 = 0x8000
        addi(4, 4, 0x4000 - 1), // 0x14: r4 = 0xbfff
        addi(4, 4, 0x4001),     // 0x18: r4 = 0x10000
        addi(4, 4, 0x4000),     // 0x1c: 0x14000
        addi(4, 4, 0x4000),     // 0x20: 0x18000
        addi(4, 4, 0x4000),     // 0x24: 0x1c000
        addi(4, 4, 0x4000),     // 0x28: 0x20000 = DATA
        // loop body at 0x2c
        addi(1, 1, 1),  // 0x2c
        ld(3, 4, 0),    // 0x30
        sd(1, 4, 8),    // 0x34
        addi(6, 6, 2),  // 0x38
        bne(1, 2, -16), // 0x3c -> 0x2c
        syscall(),      // 0x40
    ]
}

/// Instructions `loop_program(n)` dispatches up to and including the syscall.
pub fn loop_insns(n: u64) -> u64 {
    11 + 5 * n + 1
}

/// An inline add of `imm` to `slot` of `board`.
pub fn inline_add(board: &std::sync::Arc<Scoreboard>, slot: usize, imm: u64) -> Action<'_> {
    Action::Inline(InlineOp {
        board,
        slot,
        kind: InlineKind::Add(imm),
    })
}
