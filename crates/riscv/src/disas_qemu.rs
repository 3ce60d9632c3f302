//! The text QEMU 7.2's RISC-V disassembler prints for an instruction
//! (`disas/riscv.c`, as `plugin_disas` in `disas.c` collects it): what
//! `qemu_plugin_insn_disas` returns under qemu-riscv64, so QEMU plugins that
//! print or match it (execlog, cache, howvec, insn's `match=`) see under
//! tcgkit what they see under QEMU. tcgkit's own text is in `disasm.rs`.
//!
//! The layout, e.g. `00067197          auipc                   gp,421888               # 0x77676`:
//!
//! - the encoding as one little-endian number in hex, 4 digits for a
//!   compressed instruction and 8 otherwise, in an 18-column field;
//! - the mnemonic, padded with spaces to 24 columns (also when no operand
//!   follows: `ret` ends in spaces);
//! - the operands, separated by `,` alone; immediates and offsets in signed
//!   decimal (`lui` and `auipc` show the shifted value, `lui a5,-4096`),
//!   memory operands as `imm(base)`, AMOs as `rd,rs2,(rs1)`;
//! - for a pc-relative operand (branches, `jal`, `j`, `auipc`; not `jalr`)
//!   the offset, spaces to column 48 of the text after the hex, and
//!   `# 0x<pc + offset>`.
//!
//! Compressed instructions print as their 32-bit expansion (`c.mv` is
//! `mv`, `c.jalr a5` is `jalr ra,a5,0`), then QEMU's pseudo-instructions
//! replace their base forms: `nop`, `mv`, `not`, `neg(w)`, `sext.w`,
//! `seqz`, `snez`, `sltz`, `sgtz`, `j`, `jr`, `ret`, `beqz`, `bnez`,
//! `blez`, `bgez`, `bltz`, `bgtz`, the swapped `bgt`, `ble`, `bgtu`,
//! `bleu` (for *every* `blt`, `bge`, `bltu`, `bgeu` not caught earlier),
//! `rdcycle`-style counter reads, `frflags`, `fsflags`, `frrm`, `fsrm`,
//! `frcsr`, `fscsr` (these two keep `rd`, even `zero`), `fsrmi`,
//! `fsflagsi`, `fmv`, `fneg` and `fabs`. QEMU's quirks are kept: the
//! rounding mode comes first (`fadd.d dyn,fa5,fa5,fa4`, `rne` and the
//! others spelled out, `inv` for 5 and 6), `fmv.d`, `fneg.d`, `fabs.d`
//! (and `.s`) name their registers as integer ones (`fmv.d a0,s0` for
//! `fsgnj.d fa0,fs0,fs0`), `fmv.x.w` is `fmv.x.s`, `ret` stands for any
//! `jalr zero,ra,imm`, a compressed instruction whose immediate must not be
//! zero prints as `illegal` when it is (`c.addi a0,0`, a HINT), and fences
//! list their sets as `iorw` letters (`fence iorw,ow`).
//!
//! Covered: RV64GC with Zicsr and Zifencei, the privileged returns,
//! `wfi` and `sfence.vm(a)`, and the few RV128 and Q loads and stores QEMU
//! decodes at RV64 (`ldu`, `lq`, `sq`, `flq`, `fsq`). QEMU also names the
//! vector, bit-manipulation, crypto and other Q encodings; those print here
//! as `illegal` (tcgkit does not execute them, so no plugin sees one).

use std::fmt::Write as _;

const X_NAMES: [&str; 32] = [
    "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
    "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
    "t5", "t6",
];

const F_NAMES: [&str; 32] = [
    "ft0", "ft1", "ft2", "ft3", "ft4", "ft5", "ft6", "ft7", "fs0", "fs1", "fa0", "fa1", "fa2",
    "fa3", "fa4", "fa5", "fa6", "fa7", "fs2", "fs3", "fs4", "fs5", "fs6", "fs7", "fs8", "fs9",
    "fs10", "fs11", "ft8", "ft9", "ft10", "ft11",
];

/// Where the operands start, in the text after the hex field.
const OPERAND_COLUMN: usize = 24;
/// Where a pc-relative operand's `# 0x...` comment starts.
const COMMENT_COLUMN: usize = 48;

/// How an instruction's operands are printed after its mnemonic. `X` is an
/// integer register, `F` a floating-point one, `Rm` the rounding mode,
/// `Target` a pc-relative offset with its comment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Bare,
    Rs1,
    Target,
    Fence,
    Rs1Rs2,
    RdImm,
    RdTarget,
    Rd,
    RdZimm,
    RdRs1,
    RdRs2,
    RdRs1Rs2,
    RdRs1Imm,
    /// `rd,imm(rs1)`.
    Load,
    FLoad,
    /// `rs2,imm(rs1)`.
    Store,
    FStore,
    Rs1Rs2Target,
    Rs2Rs1Target,
    Rs1Target,
    Rs2Target,
    RdCsrRs1,
    RdCsrZimm,
    /// Mnemonic with `.aq`/`.rl`, then `rd,rs2,(rs1)`.
    Amo,
    /// Mnemonic with `.aq`/`.rl`, then `rd,(rs1)`.
    Lr,
    FrdRs1,
    RdFrs1,
    RdFrs1Frs2,
    FrdFrs1Frs2,
    RmFrdFrs1,
    RmFrdRs1,
    RmRdFrs1,
    RmFrdFrs1Frs2,
    RmFrdFrs1Frs2Frs3,
}

/// The operand fields as QEMU's decoder fills them for the instruction's
/// format (unused ones zero), which the pseudo-instruction rules test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fields {
    rd: u8,
    rs1: u8,
    rs2: u8,
    rs3: u8,
    imm: i32,
    rm: u8,
    pred: u8,
    succ: u8,
    aq: bool,
    rl: bool,
}

/// One decoded instruction: mnemonic, operand layout and fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    name: &'static str,
    form: Form,
    f: Fields,
}

impl Insn {
    fn new(name: &'static str, form: Form, f: Fields) -> Option<Insn> {
        Some(Insn { name, form, f })
    }
}

/// QEMU's text for the instruction whose bytes (in memory order) start
/// with `raw`, at `pc`. Bytes beyond the instruction are ignored; missing
/// ones read as zero, as QEMU reads past the end of a buffer; fewer than
/// two bytes give an empty string.
pub(crate) fn disassemble(raw: &[u8], pc: u64) -> String {
    let byte = |i: usize| u32::from(raw.get(i).copied().unwrap_or(0));
    if raw.len() < 2 {
        return String::new();
    }
    let low = byte(0) | (byte(1) << 8);
    let mut out = String::with_capacity(80);
    let insn = if low & 3 != 3 {
        let _ = write!(out, "{low:04x}{:14}", "");
        decode16(low)
    } else if low & 0x1c != 0x1c {
        let word = low | (byte(2) << 16) | (byte(3) << 24);
        let _ = write!(out, "{word:08x}{:10}", "");
        decode32(word)
    } else {
        // Longer encodings are never decoded. QEMU reads 6 bytes of a
        // 48-bit one, 8 of a 64-bit one, and only the first 2 of the
        // reserved lengths (which it prints in the 64-bit field).
        let (len, digits, spaces) = match low & 0x7f {
            v if v & 0x3f == 0x1f => (6, 12, 6),
            0x3f => (8, 16, 2),
            _ => (2, 16, 2),
        };
        let long = (0..len)
            .rev()
            .fold(0u64, |v, i| (v << 8) | u64::from(byte(i)));
        let _ = write!(out, "{long:0digits$x}{:spaces$}", "");
        None
    };
    let insn = insn.map_or(ILLEGAL, lift);
    render(&mut out, &insn, pc);
    out
}

const ILLEGAL: Insn = Insn {
    name: "illegal",
    form: Form::Bare,
    f: Fields {
        rd: 0,
        rs1: 0,
        rs2: 0,
        rs3: 0,
        imm: 0,
        rm: 0,
        pred: 0,
        succ: 0,
        aq: false,
        rl: false,
    },
};

// ---- rendering ----------------------------------------------------------

fn pad(out: &mut String, start: usize, column: usize) {
    while out.len() < start + column {
        out.push(' ');
    }
}

fn x(r: u8) -> &'static str {
    X_NAMES[usize::from(r & 31)]
}

fn f(r: u8) -> &'static str {
    F_NAMES[usize::from(r & 31)]
}

fn rounding(rm: u8) -> &'static str {
    match rm {
        0 => "rne",
        1 => "rtz",
        2 => "rdn",
        3 => "rup",
        4 => "rmm",
        7 => "dyn",
        _ => "inv",
    }
}

fn fence_set(out: &mut String, set: u8) {
    for (bit, c) in [(8, 'i'), (4, 'o'), (2, 'r'), (1, 'w')] {
        if set & bit != 0 {
            out.push(c);
        }
    }
}

fn render(out: &mut String, insn: &Insn, pc: u64) {
    // Writing into a String cannot fail.
    let start = out.len();
    let d = insn.f;
    out.push_str(insn.name);
    if matches!(insn.form, Form::Amo | Form::Lr) {
        if d.aq {
            out.push_str(".aq");
        }
        if d.rl {
            out.push_str(".rl");
        }
    }
    pad(out, start, OPERAND_COLUMN);
    let target = |out: &mut String| {
        let _ = write!(out, "{}", d.imm);
        pad(out, start, COMMENT_COLUMN);
        let _ = write!(out, "# 0x{:x}", pc.wrapping_add(i64::from(d.imm) as u64));
    };
    let _ = match insn.form {
        Form::Bare => Ok(()),
        Form::Rs1 => write!(out, "{}", x(d.rs1)),
        Form::Target => {
            target(out);
            Ok(())
        }
        Form::Fence => {
            fence_set(out, d.pred);
            out.push(',');
            fence_set(out, d.succ);
            Ok(())
        }
        Form::Rs1Rs2 => write!(out, "{},{}", x(d.rs1), x(d.rs2)),
        Form::RdImm => write!(out, "{},{}", x(d.rd), d.imm),
        Form::RdTarget => {
            let _ = write!(out, "{},", x(d.rd));
            target(out);
            Ok(())
        }
        Form::Rd => write!(out, "{}", x(d.rd)),
        Form::RdZimm => write!(out, "{},{}", x(d.rd), d.rs1),
        Form::RdRs1 => write!(out, "{},{}", x(d.rd), x(d.rs1)),
        Form::RdRs2 => write!(out, "{},{}", x(d.rd), x(d.rs2)),
        Form::RdRs1Rs2 => write!(out, "{},{},{}", x(d.rd), x(d.rs1), x(d.rs2)),
        Form::RdRs1Imm => write!(out, "{},{},{}", x(d.rd), x(d.rs1), d.imm),
        Form::Load => write!(out, "{},{}({})", x(d.rd), d.imm, x(d.rs1)),
        Form::FLoad => write!(out, "{},{}({})", f(d.rd), d.imm, x(d.rs1)),
        Form::Store => write!(out, "{},{}({})", x(d.rs2), d.imm, x(d.rs1)),
        Form::FStore => write!(out, "{},{}({})", f(d.rs2), d.imm, x(d.rs1)),
        Form::Rs1Rs2Target | Form::Rs2Rs1Target => {
            let (a, b) = if insn.form == Form::Rs1Rs2Target {
                (d.rs1, d.rs2)
            } else {
                (d.rs2, d.rs1)
            };
            let _ = write!(out, "{},{},", x(a), x(b));
            target(out);
            Ok(())
        }
        Form::Rs1Target | Form::Rs2Target => {
            let r = if insn.form == Form::Rs1Target {
                d.rs1
            } else {
                d.rs2
            };
            let _ = write!(out, "{},", x(r));
            target(out);
            Ok(())
        }
        Form::RdCsrRs1 | Form::RdCsrZimm => {
            let _ = write!(out, "{},", x(d.rd));
            csr_name(out, (d.imm & 0xfff) as u16);
            if insn.form == Form::RdCsrRs1 {
                write!(out, ",{}", x(d.rs1))
            } else {
                write!(out, ",{}", d.rs1)
            }
        }
        Form::Amo => write!(out, "{},{},({})", x(d.rd), x(d.rs2), x(d.rs1)),
        Form::Lr => write!(out, "{},({})", x(d.rd), x(d.rs1)),
        Form::FrdRs1 => write!(out, "{},{}", f(d.rd), x(d.rs1)),
        Form::RdFrs1 => write!(out, "{},{}", x(d.rd), f(d.rs1)),
        Form::RdFrs1Frs2 => write!(out, "{},{},{}", x(d.rd), f(d.rs1), f(d.rs2)),
        Form::FrdFrs1Frs2 => write!(out, "{},{},{}", f(d.rd), f(d.rs1), f(d.rs2)),
        Form::RmFrdFrs1 => write!(out, "{},{},{}", rounding(d.rm), f(d.rd), f(d.rs1)),
        Form::RmFrdRs1 => write!(out, "{},{},{}", rounding(d.rm), f(d.rd), x(d.rs1)),
        Form::RmRdFrs1 => write!(out, "{},{},{}", rounding(d.rm), x(d.rd), f(d.rs1)),
        Form::RmFrdFrs1Frs2 => {
            let (rm, a, b, c) = (rounding(d.rm), f(d.rd), f(d.rs1), f(d.rs2));
            write!(out, "{rm},{a},{b},{c}")
        }
        Form::RmFrdFrs1Frs2Frs3 => {
            let (rm, a, b, c, e) = (rounding(d.rm), f(d.rd), f(d.rs1), f(d.rs2), f(d.rs3));
            write!(out, "{rm},{a},{b},{c},{e}")
        }
    };
}

/// QEMU's names for CSRs; others print as `0x%03x`.
#[rustfmt::skip]
const CSR_NAMES: &[(u16, &str)] = &[
    (0x000, "ustatus"), (0x001, "fflags"), (0x002, "frm"), (0x003, "fcsr"), (0x004, "uie"),
    (0x005, "utvec"), (0x008, "vstart"), (0x009, "vxsat"), (0x00a, "vxrm"), (0x00f, "vcsr"),
    (0x015, "seed"), (0x040, "uscratch"), (0x041, "uepc"), (0x042, "ucause"), (0x043, "utval"),
    (0x044, "uip"), (0x100, "sstatus"), (0x104, "sie"), (0x105, "stvec"), (0x106, "scounteren"),
    (0x140, "sscratch"), (0x141, "sepc"), (0x142, "scause"), (0x143, "stval"), (0x144, "sip"),
    (0x180, "satp"), (0x200, "hstatus"), (0x202, "hedeleg"), (0x203, "hideleg"), (0x204, "hie"),
    (0x205, "htvec"), (0x240, "hscratch"), (0x241, "hepc"), (0x242, "hcause"), (0x243, "hbadaddr"),
    (0x244, "hip"), (0x300, "mstatus"), (0x301, "misa"), (0x302, "medeleg"), (0x303, "mideleg"),
    (0x304, "mie"), (0x305, "mtvec"), (0x306, "mcounteren"), (0x320, "mucounteren"),
    (0x321, "mscounteren"), (0x322, "mhcounteren"), (0x340, "mscratch"), (0x341, "mepc"),
    (0x342, "mcause"), (0x343, "mtval"), (0x344, "mip"), (0x380, "mbase"), (0x381, "mbound"),
    (0x382, "mibase"), (0x383, "mibound"), (0x384, "mdbase"), (0x385, "mdbound"),
    (0x780, "mtohost"), (0x781, "mfromhost"), (0x782, "mreset"), (0x783, "mipi"),
    (0x784, "miobase"), (0x7a0, "tselect"), (0x7a1, "tdata1"), (0x7a2, "tdata2"),
    (0x7a3, "tdata3"), (0x7b0, "dcsr"), (0x7b1, "dpc"), (0x7b2, "dscratch"), (0xb00, "mcycle"),
    (0xb01, "mtime"), (0xb02, "minstret"), (0xb80, "mcycleh"), (0xb81, "mtimeh"),
    (0xb82, "minstreth"), (0xc00, "cycle"), (0xc01, "time"), (0xc02, "instret"), (0xc20, "vl"),
    (0xc21, "vtype"), (0xc22, "vlenb"), (0xc80, "cycleh"), (0xc81, "timeh"), (0xc82, "instreth"),
    (0xd00, "scycle"), (0xd01, "stime"), (0xd02, "sinstret"), (0xd80, "scycleh"),
    (0xd81, "stimeh"), (0xd82, "sinstreth"), (0xe00, "hcycle"), (0xe01, "htime"),
    (0xe02, "hinstret"), (0xe80, "hcycleh"), (0xe81, "htimeh"), (0xe82, "hinstreth"),
    (0xf11, "mvendorid"), (0xf12, "marchid"), (0xf13, "mimpid"), (0xf14, "mhartid"),
];

/// Numbered CSR families: (first, last, prefix, number of the first,
/// suffix).
const CSR_RANGES: &[(u16, u16, &str, u16, &str)] = &[
    (0x323, 0x33f, "mhpmevent", 3, ""),
    (0x3a0, 0x3af, "pmpcfg", 0, ""),
    (0x3b0, 0x3ef, "pmpaddr", 0, ""),
    (0xb03, 0xb1f, "mhpmcounter", 3, ""),
    (0xb83, 0xb9f, "mhpmcounter", 3, "h"),
];

fn csr_name(out: &mut String, csr: u16) {
    if let Some(&(_, name)) = CSR_NAMES.iter().find(|&&(n, _)| n == csr) {
        out.push_str(name);
    } else if let Some(&(first, _, prefix, base, suffix)) = CSR_RANGES
        .iter()
        .find(|&&(first, last, ..)| (first..=last).contains(&csr))
    {
        let _ = write!(out, "{prefix}{}{suffix}", csr - first + base);
    } else {
        let _ = write!(out, "0x{csr:03x}");
    }
}

// ---- pseudo-instructions --------------------------------------------------

/// QEMU's pseudo-instruction for `insn`, tried in its order (the first
/// whose constraints hold), or `insn` itself.
fn lift(insn: Insn) -> Insn {
    use Form::*;
    let d = insn.f;
    let (name, form) = match insn.name {
        "jal" if d.rd == 0 => ("j", Target),
        "jalr" if d.rd == 0 && d.rs1 == 1 => ("ret", Bare),
        "jalr" if d.rd == 0 && d.imm == 0 => ("jr", Rs1),
        "beq" if d.rs2 == 0 => ("beqz", Rs1Target),
        "bne" if d.rs2 == 0 => ("bnez", Rs1Target),
        "blt" if d.rs2 == 0 => ("bltz", Rs1Target),
        "blt" if d.rs1 == 0 => ("bgtz", Rs2Target),
        "blt" => ("bgt", Rs2Rs1Target),
        "bge" if d.rs1 == 0 => ("blez", Rs2Target),
        "bge" if d.rs2 == 0 => ("bgez", Rs1Target),
        "bge" => ("ble", Rs2Rs1Target),
        "bltu" => ("bgtu", Rs2Rs1Target),
        "bgeu" => ("bleu", Rs2Rs1Target),
        "addi" if d.rd == 0 && d.rs1 == 0 && d.imm == 0 => ("nop", Bare),
        "addi" if d.imm == 0 => ("mv", RdRs1),
        "sltiu" if d.imm == 1 => ("seqz", RdRs1),
        "xori" if d.imm == -1 => ("not", RdRs1),
        "sub" if d.rs1 == 0 => ("neg", RdRs2),
        "slt" if d.rs2 == 0 => ("sltz", RdRs1),
        "slt" if d.rs1 == 0 => ("sgtz", RdRs2),
        "sltu" if d.rs1 == 0 => ("snez", RdRs2),
        "addiw" if d.imm == 0 => ("sext.w", RdRs1),
        "subw" if d.rs1 == 0 => ("negw", RdRs2),
        "csrrw" => match d.imm {
            3 => ("fscsr", RdRs1),
            2 => ("fsrm", RdRs1),
            1 => ("fsflags", RdRs1),
            _ => return insn,
        },
        "csrrs" if d.rs1 == 0 => match d.imm {
            0xc00 => ("rdcycle", Rd),
            0xc01 => ("rdtime", Rd),
            0xc02 => ("rdinstret", Rd),
            0xc80 => ("rdcycleh", Rd),
            0xc81 => ("rdtimeh", Rd),
            0xc82 => ("rdinstreth", Rd),
            3 => ("frcsr", Rd),
            2 => ("frrm", Rd),
            1 => ("frflags", Rd),
            _ => return insn,
        },
        "csrrwi" => match d.imm {
            2 => ("fsrmi", RdZimm),
            1 => ("fsflagsi", RdZimm),
            _ => return insn,
        },
        // QEMU prints these three with integer register names.
        "fsgnj.s" if d.rs2 == d.rs1 => ("fmv.s", RdRs1),
        "fsgnjn.s" if d.rs2 == d.rs1 => ("fneg.s", RdRs1),
        "fsgnjx.s" if d.rs2 == d.rs1 => ("fabs.s", RdRs1),
        "fsgnj.d" if d.rs2 == d.rs1 => ("fmv.d", RdRs1),
        "fsgnjn.d" if d.rs2 == d.rs1 => ("fneg.d", RdRs1),
        "fsgnjx.d" if d.rs2 == d.rs1 => ("fabs.d", RdRs1),
        _ => return insn,
    };
    Insn { name, form, f: d }
}

// ---- 32-bit encodings -----------------------------------------------------

fn bits(v: u32, lo: u32, width: u32) -> u32 {
    (v >> lo) & ((1 << width) - 1)
}

fn bit(v: u32, n: u32) -> u32 {
    (v >> n) & 1
}

fn rd(i: u32) -> u8 {
    bits(i, 7, 5) as u8
}

fn rs1(i: u32) -> u8 {
    bits(i, 15, 5) as u8
}

fn rs2(i: u32) -> u8 {
    bits(i, 20, 5) as u8
}

/// R-type: rd, rs1, rs2.
fn r(i: u32) -> Fields {
    Fields {
        rd: rd(i),
        rs1: rs1(i),
        rs2: rs2(i),
        ..Fields::default()
    }
}

/// R-type with the rounding mode.
fn r_rm(i: u32) -> Fields {
    Fields {
        rm: bits(i, 12, 3) as u8,
        ..r(i)
    }
}

/// I-type: rd, rs1 and a sign-extended 12-bit immediate.
fn i_imm(i: u32) -> Fields {
    Fields {
        rd: rd(i),
        rs1: rs1(i),
        imm: (i as i32) >> 20,
        ..Fields::default()
    }
}

/// I-type whose immediate is the `width` bits at 20 (shift amounts, CSR
/// numbers), unsigned.
fn i_field(i: u32, width: u32) -> Fields {
    Fields {
        imm: bits(i, 20, width) as i32,
        ..i_imm(i)
    }
}

fn s_imm(i: u32) -> Fields {
    Fields {
        rs1: rs1(i),
        rs2: rs2(i),
        imm: (((i as i32) >> 25) << 5) | bits(i, 7, 5) as i32,
        ..Fields::default()
    }
}

fn b_imm(i: u32) -> Fields {
    let imm = (((i as i32) >> 31) << 12)
        | (bits(i, 25, 6) << 5) as i32
        | (bits(i, 8, 4) << 1) as i32
        | (bit(i, 7) << 11) as i32;
    Fields {
        rs1: rs1(i),
        rs2: rs2(i),
        imm,
        ..Fields::default()
    }
}

fn u_imm(i: u32) -> Fields {
    Fields {
        rd: rd(i),
        imm: (i & 0xffff_f000) as i32,
        ..Fields::default()
    }
}

fn j_imm(i: u32) -> Fields {
    let imm = (((i as i32) >> 31) << 20)
        | (bits(i, 21, 10) << 1) as i32
        | (bit(i, 20) << 11) as i32
        | (bits(i, 12, 8) << 12) as i32;
    Fields {
        rd: rd(i),
        imm,
        ..Fields::default()
    }
}

fn decode32(i: u32) -> Option<Insn> {
    use Form::*;
    let funct3 = bits(i, 12, 3);
    let funct7 = bits(i, 25, 7);
    match bits(i, 2, 5) {
        0x00 => {
            let name = ["lb", "lh", "lw", "ld", "lbu", "lhu", "lwu", "ldu"][funct3 as usize];
            Insn::new(name, Load, i_imm(i))
        }
        0x01 => {
            let name = match funct3 {
                2 => "flw",
                3 => "fld",
                4 => "flq",
                _ => return None,
            };
            Insn::new(name, FLoad, i_imm(i))
        }
        0x03 => match funct3 {
            0 => {
                let f = Fields {
                    pred: bits(i, 24, 4) as u8,
                    succ: bits(i, 20, 4) as u8,
                    ..Fields::default()
                };
                Insn::new("fence", Fence, f)
            }
            1 => Insn::new("fence.i", Bare, Fields::default()),
            2 => Insn::new("lq", Load, i_imm(i)),
            _ => None,
        },
        0x04 => op_imm(i, funct3),
        0x05 => Insn::new("auipc", RdTarget, u_imm(i)),
        0x06 => match (funct3, funct7) {
            (0, _) => Insn::new("addiw", RdRs1Imm, i_imm(i)),
            (1, 0) => Insn::new("slliw", RdRs1Imm, i_field(i, 5)),
            (5, 0) => Insn::new("srliw", RdRs1Imm, i_field(i, 5)),
            (5, 32) => Insn::new("sraiw", RdRs1Imm, i_field(i, 5)),
            _ => None,
        },
        0x08 => {
            let name = *["sb", "sh", "sw", "sd", "sq"].get(funct3 as usize)?;
            Insn::new(name, Store, s_imm(i))
        }
        0x09 => {
            let name = match funct3 {
                2 => "fsw",
                3 => "fsd",
                4 => "fsq",
                _ => return None,
            };
            Insn::new(name, FStore, s_imm(i))
        }
        0x0b => amo(i, funct3),
        0x0c => op(i, funct3, funct7),
        0x0d => Insn::new("lui", RdImm, u_imm(i)),
        0x0e => op32(i, funct3, funct7),
        0x10..=0x13 => {
            let op = bits(i, 2, 5) - 0x10;
            let name = match bits(i, 25, 2) {
                0 => ["fmadd.s", "fmsub.s", "fnmsub.s", "fnmadd.s"][op as usize],
                1 => ["fmadd.d", "fmsub.d", "fnmsub.d", "fnmadd.d"][op as usize],
                _ => return None,
            };
            let f = Fields {
                rs3: bits(i, 27, 5) as u8,
                ..r_rm(i)
            };
            Insn::new(name, RmFrdFrs1Frs2Frs3, f)
        }
        0x14 => op_fp(i, funct3, funct7),
        0x18 => {
            let name = match funct3 {
                0 => "beq",
                1 => "bne",
                4 => "blt",
                5 => "bge",
                6 => "bltu",
                7 => "bgeu",
                _ => return None,
            };
            Insn::new(name, Rs1Rs2Target, b_imm(i))
        }
        0x19 if funct3 == 0 => Insn::new("jalr", RdRs1Imm, i_imm(i)),
        0x1b => Insn::new("jal", RdTarget, j_imm(i)),
        0x1c => system(i, funct3),
        _ => None,
    }
}

fn op_imm(i: u32, funct3: u32) -> Option<Insn> {
    use Form::RdRs1Imm;
    let top5 = bits(i, 27, 5);
    match funct3 {
        0 => Insn::new("addi", RdRs1Imm, i_imm(i)),
        1 if top5 == 0 => Insn::new("slli", RdRs1Imm, i_field(i, 7)),
        2 => Insn::new("slti", RdRs1Imm, i_imm(i)),
        3 => Insn::new("sltiu", RdRs1Imm, i_imm(i)),
        4 => Insn::new("xori", RdRs1Imm, i_imm(i)),
        5 if top5 == 0 => Insn::new("srli", RdRs1Imm, i_field(i, 7)),
        5 if top5 == 0b01000 => Insn::new("srai", RdRs1Imm, i_field(i, 7)),
        6 => Insn::new("ori", RdRs1Imm, i_imm(i)),
        7 => Insn::new("andi", RdRs1Imm, i_imm(i)),
        _ => None,
    }
}

fn op(i: u32, funct3: u32, funct7: u32) -> Option<Insn> {
    const BASE: [&str; 8] = ["add", "sll", "slt", "sltu", "xor", "srl", "or", "and"];
    const MUL: [&str; 8] = [
        "mul", "mulh", "mulhsu", "mulhu", "div", "divu", "rem", "remu",
    ];
    let name = match (funct7, funct3) {
        (0, _) => BASE[funct3 as usize],
        (1, _) => MUL[funct3 as usize],
        (32, 0) => "sub",
        (32, 5) => "sra",
        _ => return None,
    };
    Insn::new(name, Form::RdRs1Rs2, r(i))
}

fn op32(i: u32, funct3: u32, funct7: u32) -> Option<Insn> {
    let name = match (funct7, funct3) {
        (0, 0) => "addw",
        (0, 1) => "sllw",
        (0, 5) => "srlw",
        (1, 0) => "mulw",
        (1, 4) => "divw",
        (1, 5) => "divuw",
        (1, 6) => "remw",
        (1, 7) => "remuw",
        (32, 0) => "subw",
        (32, 5) => "sraw",
        _ => return None,
    };
    Insn::new(name, Form::RdRs1Rs2, r(i))
}

fn amo(i: u32, funct3: u32) -> Option<Insn> {
    let width = match funct3 {
        2 => 0,
        3 => 1,
        4 => 2,
        _ => return None,
    };
    let names: [&'static str; 3] = match bits(i, 27, 5) {
        0 => ["amoadd.w", "amoadd.d", "amoadd.q"],
        1 => ["amoswap.w", "amoswap.d", "amoswap.q"],
        2 if rs2(i) == 0 => ["lr.w", "lr.d", "lr.q"],
        3 => ["sc.w", "sc.d", "sc.q"],
        4 => ["amoxor.w", "amoxor.d", "amoxor.q"],
        8 => ["amoor.w", "amoor.d", "amoor.q"],
        12 => ["amoand.w", "amoand.d", "amoand.q"],
        16 => ["amomin.w", "amomin.d", "amomin.q"],
        20 => ["amomax.w", "amomax.d", "amomax.q"],
        24 => ["amominu.w", "amominu.d", "amominu.q"],
        28 => ["amomaxu.w", "amomaxu.d", "amomaxu.q"],
        _ => return None,
    };
    let lr = bits(i, 27, 5) == 2;
    let f = Fields {
        rs2: if lr { 0 } else { rs2(i) },
        aq: bit(i, 26) != 0,
        rl: bit(i, 25) != 0,
        ..r(i)
    };
    Insn::new(names[width], if lr { Form::Lr } else { Form::Amo }, f)
}

fn op_fp(i: u32, funct3: u32, funct7: u32) -> Option<Insn> {
    use Form::*;
    let sub = rs2(i);
    // (mnemonic, form, fields)
    let (name, form, f) = match funct7 {
        0 => ("fadd.s", RmFrdFrs1Frs2, r_rm(i)),
        1 => ("fadd.d", RmFrdFrs1Frs2, r_rm(i)),
        4 => ("fsub.s", RmFrdFrs1Frs2, r_rm(i)),
        5 => ("fsub.d", RmFrdFrs1Frs2, r_rm(i)),
        8 => ("fmul.s", RmFrdFrs1Frs2, r_rm(i)),
        9 => ("fmul.d", RmFrdFrs1Frs2, r_rm(i)),
        12 => ("fdiv.s", RmFrdFrs1Frs2, r_rm(i)),
        13 => ("fdiv.d", RmFrdFrs1Frs2, r_rm(i)),
        16 | 17 => {
            let s = ["fsgnj.s", "fsgnjn.s", "fsgnjx.s"];
            let d = ["fsgnj.d", "fsgnjn.d", "fsgnjx.d"];
            let names = if funct7 == 16 { s } else { d };
            (*names.get(funct3 as usize)?, FrdFrs1Frs2, r(i))
        }
        20 | 21 => {
            let names = if funct7 == 20 {
                ["fmin.s", "fmax.s"]
            } else {
                ["fmin.d", "fmax.d"]
            };
            (*names.get(funct3 as usize)?, FrdFrs1Frs2, r(i))
        }
        32 if sub == 1 => ("fcvt.s.d", RmFrdFrs1, r_rm(i)),
        33 if sub == 0 => ("fcvt.d.s", RmFrdFrs1, r_rm(i)),
        44 if sub == 0 => ("fsqrt.s", RmFrdFrs1, r_rm(i)),
        45 if sub == 0 => ("fsqrt.d", RmFrdFrs1, r_rm(i)),
        80 | 81 => {
            let names = if funct7 == 80 {
                ["fle.s", "flt.s", "feq.s"]
            } else {
                ["fle.d", "flt.d", "feq.d"]
            };
            (*names.get(funct3 as usize)?, RdFrs1Frs2, r(i))
        }
        96 | 97 => {
            let s = ["fcvt.w.s", "fcvt.wu.s", "fcvt.l.s", "fcvt.lu.s"];
            let d = ["fcvt.w.d", "fcvt.wu.d", "fcvt.l.d", "fcvt.lu.d"];
            let names = if funct7 == 96 { s } else { d };
            (*names.get(usize::from(sub))?, RmRdFrs1, r_rm(i))
        }
        104 | 105 => {
            let s = ["fcvt.s.w", "fcvt.s.wu", "fcvt.s.l", "fcvt.s.lu"];
            let d = ["fcvt.d.w", "fcvt.d.wu", "fcvt.d.l", "fcvt.d.lu"];
            let names = if funct7 == 104 { s } else { d };
            (*names.get(usize::from(sub))?, RmFrdRs1, r_rm(i))
        }
        112 | 113 if sub == 0 => {
            let names = if funct7 == 112 {
                ["fmv.x.s", "fclass.s"]
            } else {
                ["fmv.x.d", "fclass.d"]
            };
            (*names.get(funct3 as usize)?, RdFrs1, r(i))
        }
        120 if sub == 0 && funct3 == 0 => ("fmv.s.x", FrdRs1, r(i)),
        121 if sub == 0 && funct3 == 0 => ("fmv.d.x", FrdRs1, r(i)),
        _ => return None,
    };
    Insn::new(name, form, f)
}

fn system(i: u32, funct3: u32) -> Option<Insn> {
    use Form::*;
    let none = Fields::default();
    let csr = |name| Insn::new(name, RdCsrRs1, i_field(i, 12));
    let csri = |name| Insn::new(name, RdCsrZimm, i_field(i, 12));
    match funct3 {
        0 => {
            // funct7 and rd, then rs1 with the low bits of the immediate.
            let rest = bits(i, 15, 10);
            match (bits(i, 25, 7), rd(i), rs2(i)) {
                (0, 0, _) => match rest {
                    0 => Insn::new("ecall", Bare, none),
                    32 => Insn::new("ebreak", Bare, none),
                    64 => Insn::new("uret", Bare, none),
                    _ => None,
                },
                (8, 0, 2) if rs1(i) == 0 => Insn::new("sret", Bare, none),
                (8, 0, 4) => Insn::new("sfence.vm", Rs1, r(i)),
                (8, 0, 5) if rs1(i) == 0 => Insn::new("wfi", Bare, none),
                (9, 0, _) => Insn::new("sfence.vma", Rs1Rs2, r(i)),
                (0x10, 0, _) if rest == 64 => Insn::new("hret", Bare, none),
                (0x18, 0, _) if rest == 64 => Insn::new("mret", Bare, none),
                (0x3d, 0, _) if rest == 576 => Insn::new("dret", Bare, none),
                _ => None,
            }
        }
        1 => csr("csrrw"),
        2 => csr("csrrs"),
        3 => csr("csrrc"),
        5 => csri("csrrwi"),
        6 => csri("csrrsi"),
        7 => csri("csrrci"),
        _ => None,
    }
}

// ---- compressed encodings -------------------------------------------------

/// A register of the compressed 3-bit fields (x8..x15) at bit `lo`.
fn creg(h: u32, lo: u32) -> u8 {
    bits(h, lo, 3) as u8 + 8
}

/// The 6-bit immediate of CI forms, sign-extended.
fn c_imm6(h: u32) -> i32 {
    ((((bit(h, 12) << 5) | bits(h, 2, 5)) as i32) << 26) >> 26
}

/// The unsigned 6-bit shift amount of CI/CB forms.
fn c_shamt(h: u32) -> i32 {
    ((bit(h, 12) << 5) | bits(h, 2, 5)) as i32
}

/// The scaled offset of C.LD/C.SD/C.FLD/C.FSD.
fn c_off_d(h: u32) -> i32 {
    ((bits(h, 10, 3) << 3) | (bits(h, 5, 2) << 6)) as i32
}

/// The scaled offset of C.LW/C.SW.
fn c_off_w(h: u32) -> i32 {
    ((bits(h, 10, 3) << 3) | (bit(h, 6) << 2) | (bit(h, 5) << 6)) as i32
}

fn c_jump(h: u32) -> i32 {
    let v = (bit(h, 12) << 11)
        | (bit(h, 11) << 4)
        | (bits(h, 9, 2) << 8)
        | (bit(h, 8) << 10)
        | (bit(h, 7) << 6)
        | (bit(h, 6) << 7)
        | (bits(h, 3, 3) << 1)
        | (bit(h, 2) << 5);
    ((v as i32) << 20) >> 20
}

fn c_branch(h: u32) -> i32 {
    let v = (bit(h, 12) << 8)
        | (bits(h, 10, 2) << 3)
        | (bits(h, 5, 2) << 6)
        | (bits(h, 3, 2) << 1)
        | (bit(h, 2) << 5);
    ((v as i32) << 23) >> 23
}

fn fields(rd: u8, rs1: u8, rs2: u8, imm: i32) -> Fields {
    Fields {
        rd,
        rs1,
        rs2,
        imm,
        ..Fields::default()
    }
}

/// The expansion of a compressed instruction whose immediate must not be
/// zero: QEMU calls it illegal when it is.
fn nonzero(name: &'static str, form: Form, f: Fields) -> Option<Insn> {
    if f.imm == 0 {
        None
    } else {
        Insn::new(name, form, f)
    }
}

/// Decodes a compressed instruction to its 32-bit expansion, with the
/// fields QEMU gives it.
fn decode16(h: u32) -> Option<Insn> {
    use Form::*;
    const SP: u8 = 2;
    let funct3 = bits(h, 13, 3);
    let full = bits(h, 7, 5) as u8; // rd / rs1 of CI, CR, CSS forms
    let full2 = bits(h, 2, 5) as u8; // rs2 of CR, CSS forms
    match (h & 3, funct3) {
        (0, 0) => {
            let imm =
                (bits(h, 11, 2) << 4) | (bits(h, 7, 4) << 6) | (bit(h, 6) << 2) | (bit(h, 5) << 3);
            nonzero("addi", RdRs1Imm, fields(creg(h, 2), SP, 0, imm as i32))
        }
        (0, 1) => Insn::new("fld", FLoad, fields(creg(h, 2), creg(h, 7), 0, c_off_d(h))),
        (0, 2) => Insn::new("lw", Load, fields(creg(h, 2), creg(h, 7), 0, c_off_w(h))),
        (0, 3) => Insn::new("ld", Load, fields(creg(h, 2), creg(h, 7), 0, c_off_d(h))),
        (0, 5) => Insn::new("fsd", FStore, fields(0, creg(h, 7), creg(h, 2), c_off_d(h))),
        (0, 6) => Insn::new("sw", Store, fields(0, creg(h, 7), creg(h, 2), c_off_w(h))),
        (0, 7) => Insn::new("sd", Store, fields(0, creg(h, 7), creg(h, 2), c_off_d(h))),
        (1, 0) if bits(h, 2, 11) == 0 => Insn::new("addi", RdRs1Imm, Fields::default()),
        (1, 0) => nonzero("addi", RdRs1Imm, fields(full, full, 0, c_imm6(h))),
        (1, 1) => Insn::new("addiw", RdRs1Imm, fields(full, full, 0, c_imm6(h))),
        (1, 2) => Insn::new("addi", RdRs1Imm, fields(full, 0, 0, c_imm6(h))),
        (1, 3) if full == 2 => {
            let v = (bit(h, 12) << 9)
                | (bit(h, 6) << 4)
                | (bit(h, 5) << 6)
                | (bits(h, 3, 2) << 7)
                | (bit(h, 2) << 5);
            let imm = ((v as i32) << 22) >> 22;
            nonzero("addi", RdRs1Imm, fields(SP, SP, 0, imm))
        }
        (1, 3) => nonzero("lui", RdImm, fields(full, 0, 0, c_imm6(h) << 12)),
        (1, 4) => {
            let rd = creg(h, 7);
            match bits(h, 10, 2) {
                0 => nonzero("srli", RdRs1Imm, fields(rd, rd, 0, c_shamt(h))),
                1 => nonzero("srai", RdRs1Imm, fields(rd, rd, 0, c_shamt(h))),
                2 => Insn::new("andi", RdRs1Imm, fields(rd, rd, 0, c_imm6(h))),
                _ => {
                    let names = ["sub", "xor", "or", "and", "subw", "addw"];
                    let name = *names.get(((bit(h, 12) << 2) | bits(h, 5, 2)) as usize)?;
                    Insn::new(name, RdRs1Rs2, fields(rd, rd, creg(h, 2), 0))
                }
            }
        }
        (1, 5) => Insn::new("jal", RdTarget, fields(0, 0, 0, c_jump(h))),
        (1, 6) => Insn::new("beq", Rs1Rs2Target, fields(0, creg(h, 7), 0, c_branch(h))),
        (1, 7) => Insn::new("bne", Rs1Rs2Target, fields(0, creg(h, 7), 0, c_branch(h))),
        (2, 0) => nonzero("slli", RdRs1Imm, fields(full, full, 0, c_shamt(h))),
        (2, 1) | (2, 3) => {
            let imm = (bit(h, 12) << 5) | (bits(h, 5, 2) << 3) | (bits(h, 2, 3) << 6);
            let f = fields(full, SP, 0, imm as i32);
            if funct3 == 1 {
                Insn::new("fld", FLoad, f)
            } else {
                Insn::new("ld", Load, f)
            }
        }
        (2, 2) => {
            let imm = (bit(h, 12) << 5) | (bits(h, 4, 3) << 2) | (bits(h, 2, 2) << 6);
            Insn::new("lw", Load, fields(full, SP, 0, imm as i32))
        }
        (2, 4) => match (bit(h, 12), full2, full) {
            (0, 0, _) => Insn::new("jalr", RdRs1Imm, fields(0, full, 0, 0)),
            (0, _, _) => Insn::new("addi", RdRs1Imm, fields(full, full2, 0, 0)),
            (_, 0, 0) => Insn::new("ebreak", Bare, Fields::default()),
            (_, 0, _) => Insn::new("jalr", RdRs1Imm, fields(1, full, 0, 0)),
            _ => Insn::new("add", RdRs1Rs2, fields(full, full, full2, 0)),
        },
        (2, 5) | (2, 7) => {
            let imm = (bits(h, 10, 3) << 3) | (bits(h, 7, 3) << 6);
            let f = fields(0, SP, full2, imm as i32);
            if funct3 == 5 {
                Insn::new("fsd", FStore, f)
            } else {
                Insn::new("sd", Store, f)
            }
        }
        (2, 6) => {
            let imm = (bits(h, 9, 4) << 2) | (bits(h, 7, 2) << 6);
            Insn::new("sw", Store, fields(0, SP, full2, imm as i32))
        }
        _ => None,
    }
}
