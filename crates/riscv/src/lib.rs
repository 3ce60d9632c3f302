//! An RV64GC frontend for tcg-core.
//!
//! [`Rv64`] implements [`tcgkit_tcg_core::Frontend`] for 64-bit RISC-V user
//! code: RV64I with the M, A, F, D and C extensions, Zicsr (the `fflags`,
//! `frm`, `fcsr`, `cycle`, `time` and `instret` CSRs) and Zifencei.
//! Instructions decode once into compact pre-decoded [`Op`]s (16 bytes,
//! registers extracted, immediates sign-extended, static branch targets
//! absolute) that `execute` runs with a single `match`. The architectural
//! state of a hart is a [`Cpu`].
//!
//! Exits follow qemu-riscv64: `ecall` is [`CpuExit::Syscall`], `ebreak`
//! [`CpuExit::Breakpoint`], `fence.i` [`CpuExit::FlushCode`], a misaligned
//! LR or AMO a [`MemFaultKind::Misaligned`] fault (SIGBUS), a reserved
//! dynamic rounding mode [`CpuExit::IllegalInstruction`]. Encodings outside
//! RV64GC decode to [`DecodeError::Illegal`]; nothing panics on any input.
//!
//! IEEE 754 arithmetic is in [`fpu`].
//!
//! ```
//! use tcgkit_riscv::{Cpu, Rv64};
//! use tcgkit_tcg_core::{Flow, Frontend, GuestMemory, Perms};
//!
//! let mut mem = GuestMemory::new();
//! mem.map(0x1000, 0x1000, Perms::READ | Perms::EXEC).unwrap();
//! // addi a0, a0, 41 ; c.addi a0, 1
//! mem.write_initial(0x1000, &[0x13, 0x05, 0x95, 0x02, 0x05, 0x05]).unwrap();
//!
//! let rv = Rv64::new();
//! let mut cpu = Cpu::new();
//! let mut pc = 0x1000;
//! for _ in 0..2 {
//!     let d = rv.decode(&mut mem, pc).unwrap();
//!     println!("{pc:#x}: {}", rv.disassemble(&d.raw.to_le_bytes()[..usize::from(d.len)], pc));
//!     assert_eq!(Rv64::execute(&mut cpu, &d.op, pc, &mut mem), Flow::Next);
//!     pc += u64::from(d.len);
//! }
//! assert_eq!(Rv64::read_register(&cpu, "a0"), Some(42));
//! ```
#![forbid(unsafe_code)]

mod cpu;
mod decode;
mod disas_qemu;
mod disasm;
mod exec;
pub mod fpu;
mod lower;
mod op;

#[cfg(test)]
mod tests;

pub use cpu::Cpu;
pub use op::Op;

#[cfg(doc)]
use tcgkit_tcg_core::{CpuExit, MemFaultKind};
use tcgkit_tcg_core::{DecodeError, Decoded, Flow, Frontend, GuestMemory, MemAccess};

/// The RV64GC guest architecture. Stateless: decoding depends only on the
/// instruction bytes and their address.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rv64;

impl Rv64 {
    /// The frontend.
    pub fn new() -> Self {
        Rv64
    }
}

impl Frontend for Rv64 {
    type Cpu = Cpu;
    type Op = Op;

    #[inline(always)]
    fn pc(cpu: &Cpu) -> u64 {
        cpu.pc
    }

    #[inline(always)]
    fn set_pc(cpu: &mut Cpu, pc: u64) {
        cpu.pc = pc;
    }

    fn decode(&self, mem: &mut GuestMemory, pc: u64) -> Result<Decoded<Op>, DecodeError> {
        let mut half = [0u8; 2];
        mem.fetch(pc, &mut half).map_err(DecodeError::Fault)?;
        let mut raw = u32::from(u16::from_le_bytes(half));
        if raw & 3 == 3 {
            // The second half may lie on another (unmapped) page: fetch it
            // separately so the fault names the right address.
            mem.fetch(pc.wrapping_add(2), &mut half)
                .map_err(DecodeError::Fault)?;
            raw |= u32::from(u16::from_le_bytes(half)) << 16;
        }
        let (inst, len) = decode::decode_raw(raw, pc).ok_or(DecodeError::Illegal { pc, raw })?;
        Ok(Decoded {
            op: Op(inst),
            len,
            raw,
            ends_block: inst.ends_block(),
            accesses_memory: inst.accesses_memory(),
        })
    }

    #[inline(always)]
    fn execute<M: MemAccess>(cpu: &mut Cpu, op: &Op, pc: u64, mem: &mut M) -> Flow {
        exec::execute(cpu, &op.0, pc, mem)
    }

    // Blocks translate the same whatever the hart's state.
    const TB_FLAGS_FIXED: bool = true;

    fn lower(&self, op: &Op, b: &mut tcgkit_tcg_core::IrBuilder) -> bool {
        lower::lower(&op.0, b)
    }

    fn jit_registers(cpu: &mut Cpu) -> &mut [u64] {
        cpu.x.as_mut_slice()
    }

    fn disassemble(&self, raw: &[u8], pc: u64) -> String {
        let word = match *raw {
            [a, b, c, d, ..] if a & 3 == 3 => u32::from_le_bytes([a, b, c, d]),
            [a, b, ..] if a & 3 != 3 => u32::from(u16::from_le_bytes([a, b])),
            _ => return format!("<truncated {} bytes>", raw.len()),
        };
        match decode::decode_raw(word, pc) {
            Some((inst, _)) => disasm::format(&inst),
            None if word & 3 == 3 => format!("unknown {word:#010x}"),
            None => format!("unknown {word:#06x}"),
        }
    }

    /// QEMU 7.2's RISC-V syntax, as qemu-riscv64 gives it to plugins:
    /// the encoding in hex, then mnemonic and operands in columns
    /// (`00067197          auipc                   gp,421888               # 0x77676`).
    fn qemu_disassembler(&self) -> Option<fn(&[u8], u64) -> String> {
        Some(disas_qemu::disassemble)
    }

    fn read_register(cpu: &Cpu, name: &str) -> Option<u64> {
        cpu.register(name)
    }

    fn register_names(&self) -> &'static [&'static str] {
        &cpu::REGISTER_NAMES
    }
}
