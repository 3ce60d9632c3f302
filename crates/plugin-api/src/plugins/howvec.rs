//! `howvec`: a histogram of executed RISC-V instruction classes, decoded
//! from the raw encoding (compressed forms count in the class of their
//! expansion), in the spirit of QEMU's contrib `howvec`.

use std::fmt::Write as _;
use std::sync::Arc;

use tcgkit_tcg_core::{InlineKind, Scoreboard};

use crate::{GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

/// An instruction class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InsnClass {
    /// Integer loads.
    Load,
    /// Integer stores.
    Store,
    /// Floating-point loads.
    FpLoad,
    /// Floating-point stores.
    FpStore,
    /// Integer arithmetic/logic with an immediate.
    AluImm,
    /// Integer arithmetic/logic on registers.
    AluReg,
    /// Multiplication and division (M).
    MulDiv,
    /// `lui` and `auipc`.
    UpperImm,
    /// Conditional branches.
    Branch,
    /// `jal`, `jalr` and their compressed forms.
    Jump,
    /// Atomics (A): LR/SC and AMOs.
    Atomic,
    /// Floating-point arithmetic, conversions, moves, fused multiply-add.
    FpArith,
    /// CSR accesses.
    Csr,
    /// `ecall`, `ebreak` and other system instructions.
    System,
    /// `fence` and `fence.i`.
    Fence,
    /// Anything else (reserved encodings).
    Other,
}

impl InsnClass {
    /// Every class, in report order.
    pub const ALL: [InsnClass; 16] = [
        InsnClass::Load,
        InsnClass::Store,
        InsnClass::FpLoad,
        InsnClass::FpStore,
        InsnClass::AluImm,
        InsnClass::AluReg,
        InsnClass::MulDiv,
        InsnClass::UpperImm,
        InsnClass::Branch,
        InsnClass::Jump,
        InsnClass::Atomic,
        InsnClass::FpArith,
        InsnClass::Csr,
        InsnClass::System,
        InsnClass::Fence,
        InsnClass::Other,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            InsnClass::Load => "load",
            InsnClass::Store => "store",
            InsnClass::FpLoad => "fp load",
            InsnClass::FpStore => "fp store",
            InsnClass::AluImm => "alu imm",
            InsnClass::AluReg => "alu reg",
            InsnClass::MulDiv => "mul/div",
            InsnClass::UpperImm => "lui/auipc",
            InsnClass::Branch => "branch",
            InsnClass::Jump => "jump",
            InsnClass::Atomic => "atomic",
            InsnClass::FpArith => "fp arith",
            InsnClass::Csr => "csr",
            InsnClass::System => "system",
            InsnClass::Fence => "fence",
            InsnClass::Other => "other",
        }
    }

    /// Classifies a raw RV64GC encoding (16-bit forms in the low half).
    pub fn of_riscv(raw: u32) -> InsnClass {
        use InsnClass::*;
        if raw & 3 == 3 {
            let funct3 = (raw >> 12) & 7;
            return match raw & 0x7f {
                0x03 => Load,
                0x07 => FpLoad,
                0x23 => Store,
                0x27 => FpStore,
                0x13 | 0x1b => AluImm,
                0x33 | 0x3b if raw >> 25 == 1 => MulDiv,
                0x33 | 0x3b => AluReg,
                0x37 | 0x17 => UpperImm,
                0x63 => Branch,
                0x6f | 0x67 => Jump,
                0x2f => Atomic,
                0x53 | 0x43 | 0x47 | 0x4b | 0x4f => FpArith,
                0x73 if funct3 == 0 => System,
                0x73 => Csr,
                0x0f => Fence,
                _ => Other,
            };
        }
        let funct3 = (raw >> 13) & 7;
        let rd = (raw >> 7) & 0x1f;
        let rs2 = (raw >> 2) & 0x1f;
        let bit12 = (raw >> 12) & 1;
        match (raw & 3, funct3) {
            (0, 0) if raw & 0xffff == 0 => Other,
            (0, 0) => AluImm,
            (0, 1) | (2, 1) => FpLoad,
            (0, 2) | (0, 3) | (2, 2) | (2, 3) => Load,
            (0, 5) | (2, 5) => FpStore,
            (0, 6) | (0, 7) | (2, 6) | (2, 7) => Store,
            (1, 0..=2) => AluImm,
            (1, 3) if rd == 2 => AluImm,
            (1, 3) => UpperImm,
            (1, 4) if (raw >> 10) & 3 == 3 => AluReg,
            (1, 4) => AluImm,
            (1, 5) => Jump,
            (1, 6) | (1, 7) => Branch,
            (2, 0) => AluImm,
            (2, 4) if rs2 != 0 => AluReg,
            (2, 4) if bit12 == 1 && rd == 0 => System,
            (2, 4) if rd != 0 => Jump,
            _ => Other,
        }
    }
}

/// The `howvec` plugin.
#[derive(Debug)]
pub struct HowVec {
    board: Arc<Scoreboard>,
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(HowVec::from_args(args, guest)?))
}

impl HowVec {
    /// Builds it (no arguments; only riscv guests are classified).
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&[])?;
        if !guest.arch.starts_with("riscv") {
            return Err(PluginError::InstallFailed {
                plugin: "howvec".into(),
                reason: format!("no instruction classes for architecture {:?}", guest.arch),
            });
        }
        Ok(HowVec {
            board: super::board(InsnClass::ALL.len(), guest.vcpus),
        })
    }

    /// Executions of `class` (all vCPUs).
    pub fn count(&self, class: InsnClass) -> u64 {
        self.board.sum(class as usize)
    }

    /// Every class with its count, most executed first.
    pub fn histogram(&self) -> Vec<(InsnClass, u64)> {
        let mut v: Vec<(InsnClass, u64)> =
            InsnClass::ALL.iter().map(|&c| (c, self.count(c))).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// The text printed at exit.
    pub fn report(&self) -> String {
        let hist = self.histogram();
        let total: u64 = hist.iter().map(|h| h.1).sum();
        let mut s = String::new();
        let _ = writeln!(s, "instruction classes ({total} instructions):");
        for (class, n) in hist.into_iter().filter(|h| h.1 > 0) {
            let pct = if total == 0 {
                0.0
            } else {
                n as f64 * 100.0 / total as f64
            };
            let _ = writeln!(s, "{:<10} {n:>14} {pct:6.2}%", class.name());
        }
        s
    }
}

impl Plugin for HowVec {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                let class = InsnClass::of_riscv(insn.raw());
                insn.on_exec_inline(&me.board, class as usize, InlineKind::Add(1));
            }
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::InsnClass::{self, *};

    #[test]
    fn classifies_known_encodings() {
        let cases: &[(u32, InsnClass)] = &[
            (0x0005_3503, Load),     // ld a0, 0(a0)
            (0x00a5_3023, Store),    // sd a0, 0(a0)
            (0x0295_0513, AluImm),   // addi a0, a0, 41
            (0x00b5_0533, AluReg),   // add a0, a0, a1
            (0x02b5_0533, MulDiv),   // mul a0, a0, a1
            (0x0000_0537, UpperImm), // lui a0, 0
            (0x00b5_0463, Branch),   // beq a0, a1, 8
            (0x0080_006f, Jump),     // j 8
            (0x0000_8067, Jump),     // ret
            (0x0000_0073, System),   // ecall
            (0x0010_0073, System),   // ebreak
            (0x0010_2573, Csr),      // csrr a0, fflags
            (0x1005_352f, Atomic),   // lr.d a0, (a0)
            (0x0000_100f, Fence),    // fence.i
            (0x02b5_7553, FpArith),  // fadd.d fa0, fa0, fa1
            (0x0005_3507, FpLoad),   // fld fa0, 0(a0)
            (0x0505, AluImm),        // c.addi a0, 1
            (0x4501, AluImm),        // c.li a0, 0
            (0x8082, Jump),          // c.ret
            (0x852e, AluReg),        // c.mv a0, a1
            (0x9002, System),        // c.ebreak
            (0x6108, Load),          // c.ld a0, 0(a0)
            (0xe108, Store),         // c.sd a0, 0(a0)
            (0xc119, Branch),        // c.beqz a0, +6
            (0xa001, Jump),          // c.j 0
            (0x8d0d, AluReg),        // c.sub a0, a1
            (0x0000, Other),         // the all-zero illegal encoding
        ];
        for &(raw, class) in cases {
            assert_eq!(InsnClass::of_riscv(raw), class, "{raw:#x}");
        }
    }
}
