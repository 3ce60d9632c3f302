//! The backend-neutral IR a frontend lowers its ops into (QEMU's TCG
//! design: tcg-core compiles it and knows no guest architecture).
//!
//! Every value is a 64-bit integer. Guest registers are slots of the
//! register file a frontend exposes through [`crate::Frontend::jit_registers`];
//! the compiler keeps them in host registers within a block. An op the
//! frontend does not lower runs in the interpreter, called from the
//! compiled code, so lowering can grow one instruction at a time.

/// A 64-bit value produced by an earlier IR instruction of the same block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Value(pub(crate) u32);

/// Two-operand integer operations. Shift amounts are taken modulo 64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// Wrapping addition.
    Add,
    /// Wrapping subtraction.
    Sub,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise exclusive or.
    Xor,
    /// Shift left.
    Shl,
    /// Logical shift right.
    ShrU,
    /// Arithmetic shift right.
    ShrS,
    /// Low 64 bits of the product.
    Mul,
    /// High 64 bits of the signed product.
    MulHighS,
    /// High 64 bits of the unsigned product.
    MulHighU,
    /// High 64 bits of signed × unsigned.
    MulHighSU,
    /// Signed division. Total: a zero divisor divides by one instead and
    /// `i64::MIN / -1` gives `i64::MIN`; a frontend selects its
    /// architecture's result for those cases itself.
    DivS,
    /// Unsigned division; a zero divisor divides by one.
    DivU,
    /// Signed remainder; a zero divisor gives the dividend, and
    /// `i64::MIN % -1` gives 0.
    RemS,
    /// Unsigned remainder; a zero divisor gives the dividend.
    RemU,
}

/// One-operand operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// Sign-extends the low 32 bits.
    Sext32,
    /// Zero-extends the low 32 bits.
    Zext32,
}

/// Comparisons; the result is 1 or 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Signed less than.
    LtS,
    /// Signed greater or equal.
    GeS,
    /// Unsigned less than.
    LtU,
    /// Unsigned greater or equal.
    GeU,
}

/// One IR instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Inst {
    /// A guest instruction starts: index in the block, its pc and length.
    Begin {
        index: u32,
        pc: u64,
        len: u8,
    },
    Const(u64),
    ReadReg(u16),
    WriteReg(u16, Value),
    Binary(BinOp, Value, Value),
    Unary(UnOp, Value),
    Compare(Cond, Value, Value),
    /// `cond != 0 ? a : b`.
    Select(Value, Value, Value),
    Load {
        addr: Value,
        size: u8,
        signed: bool,
    },
    Store {
        addr: Value,
        size: u8,
        value: Value,
    },
    /// Runs the instruction's op in the interpreter (it was not lowered).
    Interpret {
        index: u32,
    },
    /// Ends the block: continue at `target`.
    Jump(Value),
    /// Ends the block: continue at `taken` if `cond != 0`, else after the
    /// instruction.
    Branch {
        cond: Value,
        taken: u64,
    },
}

/// Builds the IR of one block, one guest instruction at a time; handed to
/// [`crate::Frontend::lower`].
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct IrBuilder {
    pub(crate) insts: Vec<Inst>,
    /// Where the current guest instruction's IR starts, to drop it when
    /// the frontend declines to lower it.
    insn_start: usize,
    pc: u64,
    len: u8,
    index: u32,
    /// Set once a jump or branch ended the block.
    pub(crate) ended: bool,
    /// One past the highest register slot used.
    pub(crate) regs_used: u32,
}

impl IrBuilder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The pc of the instruction being lowered.
    pub fn pc(&self) -> u64 {
        self.pc
    }

    /// The length in bytes of the instruction being lowered.
    pub fn insn_len(&self) -> u8 {
        self.len
    }

    fn push(&mut self, inst: Inst) -> Value {
        let v = Value(u32::try_from(self.insts.len()).unwrap_or(u32::MAX));
        self.insts.push(inst);
        v
    }

    pub(crate) fn begin(&mut self, index: u32, pc: u64, len: u8) {
        self.insn_start = self.insts.len();
        self.pc = pc;
        self.len = len;
        self.index = index;
        self.push(Inst::Begin { index, pc, len });
    }

    /// Forgets what the frontend emitted for the current instruction and
    /// interprets it instead.
    pub(crate) fn interpret_current(&mut self, ends_block: bool) {
        self.insts.truncate(self.insn_start + 1);
        self.ended = false;
        self.push(Inst::Interpret { index: self.index });
        if ends_block {
            self.ended = true;
        }
    }

    /// A constant.
    pub fn imm(&mut self, value: u64) -> Value {
        self.push(Inst::Const(value))
    }

    /// Reads register slot `slot`.
    pub fn reg(&mut self, slot: u16) -> Value {
        self.regs_used = self.regs_used.max(u32::from(slot) + 1);
        self.push(Inst::ReadReg(slot))
    }

    /// Writes register slot `slot`.
    pub fn set_reg(&mut self, slot: u16, value: Value) {
        self.regs_used = self.regs_used.max(u32::from(slot) + 1);
        self.push(Inst::WriteReg(slot, value));
    }

    /// `a op b`.
    pub fn binary(&mut self, op: BinOp, a: Value, b: Value) -> Value {
        self.push(Inst::Binary(op, a, b))
    }

    /// `op a`.
    pub fn unary(&mut self, op: UnOp, a: Value) -> Value {
        self.push(Inst::Unary(op, a))
    }

    /// `a cond b` as 1 or 0.
    pub fn compare(&mut self, cond: Cond, a: Value, b: Value) -> Value {
        self.push(Inst::Compare(cond, a, b))
    }

    /// `cond != 0 ? a : b`.
    pub fn select(&mut self, cond: Value, a: Value, b: Value) -> Value {
        self.push(Inst::Select(cond, a, b))
    }

    /// Loads `size` (1, 2, 4 or 8) bytes at `addr`, sign- or zero-extended.
    /// A fault leaves the block at this instruction with
    /// [`crate::CpuExit::Fault`], as the interpreter does.
    pub fn load(&mut self, addr: Value, size: u8, signed: bool) -> Value {
        self.push(Inst::Load { addr, size, signed })
    }

    /// Stores the low `size` bytes of `value` at `addr`.
    pub fn store(&mut self, addr: Value, size: u8, value: Value) {
        self.push(Inst::Store { addr, size, value });
    }

    /// Ends the block, continuing at `target`.
    pub fn jump(&mut self, target: Value) {
        self.push(Inst::Jump(target));
        self.ended = true;
    }

    /// Ends the block, continuing at `taken` if `cond` is non-zero and
    /// after this instruction otherwise.
    pub fn branch(&mut self, cond: Value, taken: u64) {
        self.push(Inst::Branch { cond, taken });
        self.ended = true;
    }
}
