//! The pre-decoded operation: a compact `Copy` value executed by one `match`.
//!
//! Register fields are already extracted, immediates sign-extended and static
//! branch targets turned into absolute addresses. A destination of x0 is
//! encoded as [`SINK`], a scratch slot in the register file, so executing an
//! op never has to test for x0; ops whose only effect is that write are
//! decoded as [`Inst::Nop`] instead.

/// Register-file slot that absorbs writes to x0 (never read as x0).
pub(crate) const SINK: u8 = 32;

/// Marker for "dynamic rounding mode" (the `frm` CSR) in an op's `rm` field.
pub(crate) const RM_DYNAMIC: u8 = 7;

/// One pre-decoded RV64GC instruction, as stored in a translation block.
///
/// The representation is private; obtain values from
/// [`crate::Rv64`]'s `Frontend::decode` and run them with `Frontend::execute`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Op(pub(crate) Inst);

/// The CSRs user-mode code may access.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CsrId {
    Fflags,
    Frm,
    Fcsr,
    Cycle,
    Time,
    Instret,
}

/// The Zicsr operation; the `*i` forms take a 5-bit immediate.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CsrOp {
    Rw,
    Rs,
    Rc,
    Rwi,
    Rsi,
    Rci,
}

/// The read-modify-write of an AMO.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum AmoOp {
    Swap,
    Add,
    Xor,
    And,
    Or,
    Min,
    Max,
    Minu,
    Maxu,
}

/// Floating-point arithmetic that rounds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FBinOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Floating-point two-operand operations with no rounding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FSignOp {
    Sgnj,
    Sgnjn,
    Sgnjx,
    Min,
    Max,
}

/// Floating-point comparisons writing 0/1 to an integer register.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FCmpOp {
    Eq,
    Lt,
    Le,
}

/// The four fused multiply-add forms.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FmaOp {
    Madd,
    Msub,
    Nmsub,
    Nmadd,
}

/// Conversions; the name reads `destination_source` like the mnemonic
/// (`WS` is fcvt.w.s).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CvtOp {
    WS,
    WuS,
    LS,
    LuS,
    SW,
    SWu,
    SL,
    SLu,
    WD,
    WuD,
    LD,
    LuD,
    DW,
    DWu,
    DL,
    DLu,
    SD,
    DS,
}

/// The instruction set as executed. `len` fields (2 or 4) give the link
/// value of jumps; `rm` is 0..=4 or [`RM_DYNAMIC`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Inst {
    Nop,
    /// lui, auipc (pc already added), li.
    Const {
        rd: u8,
        value: u64,
    },
    Jal {
        rd: u8,
        len: u8,
        target: u64,
    },
    Jalr {
        rd: u8,
        rs1: u8,
        len: u8,
        imm: i32,
    },
    Beq {
        rs1: u8,
        rs2: u8,
        target: u64,
    },
    Bne {
        rs1: u8,
        rs2: u8,
        target: u64,
    },
    Blt {
        rs1: u8,
        rs2: u8,
        target: u64,
    },
    Bge {
        rs1: u8,
        rs2: u8,
        target: u64,
    },
    Bltu {
        rs1: u8,
        rs2: u8,
        target: u64,
    },
    Bgeu {
        rs1: u8,
        rs2: u8,
        target: u64,
    },
    Lb {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Lh {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Lw {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Ld {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Lbu {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Lhu {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Lwu {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Sb {
        rs1: u8,
        rs2: u8,
        imm: i32,
    },
    Sh {
        rs1: u8,
        rs2: u8,
        imm: i32,
    },
    Sw {
        rs1: u8,
        rs2: u8,
        imm: i32,
    },
    Sd {
        rs1: u8,
        rs2: u8,
        imm: i32,
    },
    Addi {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Slti {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Sltiu {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Xori {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Ori {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Andi {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Slli {
        rd: u8,
        rs1: u8,
        shamt: u8,
    },
    Srli {
        rd: u8,
        rs1: u8,
        shamt: u8,
    },
    Srai {
        rd: u8,
        rs1: u8,
        shamt: u8,
    },
    Addiw {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Slliw {
        rd: u8,
        rs1: u8,
        shamt: u8,
    },
    Srliw {
        rd: u8,
        rs1: u8,
        shamt: u8,
    },
    Sraiw {
        rd: u8,
        rs1: u8,
        shamt: u8,
    },
    Add {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Sub {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Sll {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Slt {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Sltu {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Xor {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Srl {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Sra {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Or {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    And {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Mul {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Mulh {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Mulhsu {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Mulhu {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Div {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Divu {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Rem {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Remu {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Addw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Subw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Sllw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Srlw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Sraw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Mulw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Divw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Divuw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Remw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Remuw {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Ecall,
    Ebreak,
    /// `fence`: orders this thread's accesses for the others (the pred
    /// and succ sets are not told apart: the host fence is full).
    Fence,
    FenceI,
    /// `src` is rs1 for the register forms and the 5-bit immediate for `*i`.
    Csr {
        op: CsrOp,
        rd: u8,
        src: u8,
        csr: CsrId,
    },
    LrW {
        rd: u8,
        rs1: u8,
    },
    LrD {
        rd: u8,
        rs1: u8,
    },
    ScW {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    ScD {
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    AmoW {
        op: AmoOp,
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    AmoD {
        op: AmoOp,
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    Flw {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Fld {
        rd: u8,
        rs1: u8,
        imm: i32,
    },
    Fsw {
        rs1: u8,
        rs2: u8,
        imm: i32,
    },
    Fsd {
        rs1: u8,
        rs2: u8,
        imm: i32,
    },
    FBin {
        op: FBinOp,
        dbl: bool,
        rd: u8,
        rs1: u8,
        rs2: u8,
        rm: u8,
    },
    FSign {
        op: FSignOp,
        dbl: bool,
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    FCmp {
        op: FCmpOp,
        dbl: bool,
        rd: u8,
        rs1: u8,
        rs2: u8,
    },
    FSqrt {
        dbl: bool,
        rd: u8,
        rs1: u8,
        rm: u8,
    },
    Fma {
        op: FmaOp,
        dbl: bool,
        rd: u8,
        rs1: u8,
        rs2: u8,
        rs3: u8,
        rm: u8,
    },
    FCvt {
        op: CvtOp,
        rd: u8,
        rs1: u8,
        rm: u8,
    },
    FClass {
        dbl: bool,
        rd: u8,
        rs1: u8,
    },
    FMvXW {
        rd: u8,
        rs1: u8,
    },
    FMvWX {
        rd: u8,
        rs1: u8,
    },
    FMvXD {
        rd: u8,
        rs1: u8,
    },
    FMvDX {
        rd: u8,
        rs1: u8,
    },
}

impl Inst {
    /// True for ops after which the translation block must end: control
    /// transfers and exits to the embedder.
    pub(crate) fn ends_block(&self) -> bool {
        matches!(
            self,
            Inst::Jal { .. }
                | Inst::Jalr { .. }
                | Inst::Beq { .. }
                | Inst::Bne { .. }
                | Inst::Blt { .. }
                | Inst::Bge { .. }
                | Inst::Bltu { .. }
                | Inst::Bgeu { .. }
                | Inst::Ecall
                | Inst::Ebreak
                | Inst::FenceI
        )
    }

    /// True if executing the instruction goes through `MemAccess` load or
    /// store: loads, stores, LR/SC and AMOs, integer or floating-point.
    pub(crate) fn accesses_memory(&self) -> bool {
        matches!(
            self,
            Inst::Lb { .. }
                | Inst::Lh { .. }
                | Inst::Lw { .. }
                | Inst::Ld { .. }
                | Inst::Lbu { .. }
                | Inst::Lhu { .. }
                | Inst::Lwu { .. }
                | Inst::Sb { .. }
                | Inst::Sh { .. }
                | Inst::Sw { .. }
                | Inst::Sd { .. }
                | Inst::LrW { .. }
                | Inst::LrD { .. }
                | Inst::ScW { .. }
                | Inst::ScD { .. }
                | Inst::AmoW { .. }
                | Inst::AmoD { .. }
                | Inst::Flw { .. }
                | Inst::Fld { .. }
                | Inst::Fsw { .. }
                | Inst::Fsd { .. }
        )
    }
}
