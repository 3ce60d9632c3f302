//! QEMU's syntax (`disas_qemu.rs`): every string in the tables is what
//! qemu-riscv64 7.2 gave a plugin through `qemu_plugin_insn_disas` for that
//! encoding at that address (in the fixture guests, the real-world
//! programs, and a hand-written guest for the forms they do not use). The
//! edge cases at the end follow from how disas/riscv.c reads the bytes and
//! adds offsets.

use tcgkit_tcg_core::Frontend;

use crate::Rv64;
use crate::disas_qemu::disassemble;

/// Checks each line of `table`: the address, a space, and qemu's text up
/// to a `|` (which shows where trailing spaces end). The instruction's
/// bytes are the hex at the start of the text.
fn check(table: &str) {
    let mut wrong = Vec::new();
    for line in table.lines().filter(|l| !l.is_empty()) {
        let (pc, want) = line.split_once(' ').expect("address and text");
        let want = want.strip_suffix('|').expect("text ends with |");
        let pc = u64::from_str_radix(pc.trim_start_matches("0x"), 16).expect("hex address");
        let hex = want.split(' ').next().unwrap_or_default();
        let raw = u32::from_str_radix(hex, 16).expect("hex encoding");
        let bytes = &raw.to_le_bytes()[..hex.len() / 2];
        let got = disassemble(bytes, pc);
        if got != want {
            wrong.push(format!("{pc:#x}\n  qemu {want:?}\n  ours {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn integer() {
    check(INTEGER);
}

#[test]
fn control_flow() {
    check(CONTROL);
}

#[test]
fn multiply_divide() {
    check(M);
}

#[test]
fn atomics() {
    check(A);
}

#[test]
fn floating_point() {
    check(FP);
}

#[test]
fn csrs_fences_and_system() {
    check(SYSTEM);
}

#[test]
fn compressed() {
    check(C);
}

#[test]
fn the_frontend_gives_plugins_this_syntax() {
    let qemu = Rv64::new()
        .qemu_disassembler()
        .expect("riscv has QEMU's syntax");
    let raw = 0x0006_7197u32.to_le_bytes();
    assert_eq!(
        qemu(&raw, 0x10676),
        "00067197          auipc                   gp,421888               # 0x77676"
    );
    // tcgkit's own syntax is unchanged.
    assert_eq!(Rv64::new().disassemble(&raw, 0x10676), "li gp, 0x77676");
}

#[test]
fn bytes_past_the_instruction_are_ignored_and_missing_ones_are_zero() {
    // `ret` followed by two bytes of the next instruction.
    assert_eq!(
        disassemble(&[0x82, 0x80, 0x13, 0x05], 0x1000),
        "8082              ret                     "
    );
    // The first half of `addi a0,a0,1` alone: QEMU reads on with zeros.
    assert_eq!(
        disassemble(&[0x13, 0x05], 0x1000),
        "00000513          mv                      a0,zero"
    );
    assert_eq!(disassemble(&[0x13], 0x1000), "");
    assert_eq!(disassemble(&[], 0x1000), "");
}

#[test]
fn targets_wrap_around_the_address_space() {
    // `j -4` at 0: QEMU adds the sign-extended offset modulo 2^64.
    assert_eq!(
        disassemble(&[0xf5, 0xbf], 0),
        "bff5              j                       -4                      # 0xfffffffffffffffc"
    );
}

/// RV64I arithmetic, loads and stores, with the pseudo-instructions QEMU
/// picks (`mv`, `not`, `seqz`, `sltz`, `neg`, ...).
const INTEGER: &str = "
0x105a0 00b907b3          add                     a5,s2,a1|
0x100b0 e0010413          addi                    s0,sp,-512|
0x100bc 00100593          addi                    a1,zero,1|
0x101b8 00550013          addi                    zero,a0,5|
0x101e0 010e0e13          addi                    t3,t3,16|
0x1029e 05d00893          addi                    a7,zero,93|
0x101bc 8005829b          addiw                   t0,a1,-2048|
0x105aa 0147073b          addw                    a4,a4,s4|
0x100bb8 00e7f533          and                     a0,a5,a4|
0x100b4 fc047413          andi                    s0,s0,-64|
0x101ac fffff397          auipc                   t2,-4096                # 0xf1ac|
0x101b0 00000397          auipc                   t2,0                    # 0x101b0|
0x101dc 00000e17          auipc                   t3,0                    # 0x101dc|
0x10258 00000517          auipc                   a0,0                    # 0x10258|
0x100b98 00059717          auipc                   a4,364544               # 0x159b98|
0x11cfe 04078783          lb                      a5,64(a5)|
0x105a4 0007c783          lbu                     a5,0(a5)|
0x100b94 47053683          ld                      a3,1136(a0)|
0x12652 03c71483          lh                      s1,60(a4)|
0x106ca 0187d703          lhu                     a4,24(a5)|
0x101a4 fffff337          lui                     t1,-4096|
0x101a8 80000337          lui                     t1,-2147483648|
0x105c8 8401a583          lw                      a1,-1984(gp)|
0x10636 00856783          lwu                     a5,8(a0)|
0x100b8 00000513          mv                      a0,zero|
0x100baa 40e00733          neg                     a4,a4|
0x10194 40b002bb          negw                    t0,a1|
0x101b4 00000013          nop                     |
0x10190 fff5c293          not                     t0,a1|
0x108f6 00e8e8b3          or                      a7,a7,a4|
0x105ba 01170023          sb                      a7,0(a4)|
0x10138 00043023          sd                      zero,0(s0)|
0x10198 0015b293          seqz                    t0,a1|
0x105c0 000c849b          sext.w                  s1,s9|
0x10cd2 00a025b3          sgtz                    a1,a0|
0x1069c 0ad41f23          sh                      a3,190(s0)|
0x101c0 03f59293          slli                    t0,a1,63|
0x119f2 0029979b          slliw                   a5,s3,2|
0x101d0 00b592bb          sllw                    t0,a1,a1|
0x10b4e 00f92933          slt                     s2,s2,a5|
0x1018c ffb5a293          slti                    t0,a1,-5|
0x1019c fff5b293          sltiu                   t0,a1,-1|
0x109ac 00f73533          sltu                    a0,a4,a5|
0x10188 0005a2b3          sltz                    t0,a1|
0x10684 00b035b3          snez                    a1,a1|
0x16658 4065d5b3          sra                     a1,a1,t1|
0x101c4 4005d293          srai                    t0,a1,0|
0x101cc 4015d29b          sraiw                   t0,a1,1|
0x12910 40b5553b          sraw                    a0,a0,a1|
0x109c8 00f55733          srl                     a4,a0,a5|
0x1058c 02085813          srli                    a6,a6,32|
0x101c8 01f5d29b          srliw                   t0,a1,31|
0x400280ab8e 00fa57bb          srlw                    a5,s4,a5|
0x101a0 400582b3          sub                     t0,a1,zero|
0x109e4 40a6853b          subw                    a0,a3,a0|
0x105a2 1b412023          sw                      s4,416(sp)|
0x105fa 00d545b3          xor                     a1,a0,a3|
";

/// Jumps and branches: the target comment, negative offsets, the swapped
/// `bgt`/`ble`/`bgtu`/`bleu`, `ret` and `jr`.
const CONTROL: &str = "
0x101f4 00b50463          beq                     a0,a1,8                 # 0x101fc|
0x1058c 2e050c63          beqz                    a0,760                  # 0x10884|
0x10200 0005d263          bgez                    a1,4                    # 0x10204|
0x100bd0 fe0558e3          bgez                    a0,-16                  # 0x100bc0|
0x10562 18a9cf63          bgt                     a0,s3,414               # 0x10700|
0x10204 00a06463          bgtu                    a0,zero,8               # 0x1020c|
0x101fc 00b04263          bgtz                    a1,4                    # 0x10200|
0x1055c 04a4de63          ble                     a0,s1,92                # 0x105b8|
0x10208 00a07263          bleu                    a0,zero,4               # 0x1020c|
0x10210 00a05263          blez                    a0,4                    # 0x10214|
0x1020c 00054463          bltz                    a0,8                    # 0x10214|
0x101f8 00b01263          bne                     zero,a1,4               # 0x101fc|
0x100bbc 00b51663          bne                     a0,a1,12                # 0x100bc8|
0x10642 fc0c94e3          bnez                    s9,-56                  # 0x1060a|
0x10474 70c0306f          j                       14092                   # 0x13b80|
0x101d8 004002ef          jal                     t0,4                    # 0x101dc|
0x100bcc 8fcd00ef          jal                     ra,-196356              # 0xd0cc8|
0x101e4 000e0ee7          jalr                    t4,t3,0|
0x101ec 004e0067          jalr                    zero,t3,4|
0x400000083c 000e0067          jr                      t3|
";

/// M.
const M: &str = "
0x10678 02f94933          div                     s2,s2,a5|
0x107aa 02e5d5b3          divu                    a1,a1,a4|
0x10586 0329d93b          divuw                   s2,s3,s2|
0x107ce 02e5c5bb          divw                    a1,a1,a4|
0x105aa 02b587b3          mul                     a5,a1,a1|
0x107f2 02f615b3          mulh                    a1,a2,a5|
0x101d4 02b5a2b3          mulhsu                  t0,a1,a1|
0x107fe 02e6b6b3          mulhu                   a3,a3,a4|
0x105a6 03ac073b          mulw                    a4,s8,s10|
0x1078a 02e8e733          rem                     a4,a7,a4|
0x107b6 02f67633          remu                    a2,a2,a5|
0x105b2 032cfcbb          remuw                   s9,s9,s2|
0x107da 02f6663b          remw                    a2,a2,a5|
";

/// A: `.aq`/`.rl` suffixes, `lr` without rs2.
const A: &str = "
0x20168 04e7b02f          amoadd.d.aq             zero,a4,(a5)|
0x1013c 02b428af          amoadd.w.rl             a7,a1,(s0)|
0x10148 64b438af          amoand.d.aq             a7,a1,(s0)|
0x10150 a2b438af          amomax.d.rl             a7,a1,(s0)|
0x211b2 e4e7b72f          amomaxu.d.aq            a4,a4,(a5)|
0x10158 e0b428af          amomaxu.w               a7,a1,(s0)|
0x1014c 80b428af          amomin.w                a7,a1,(s0)|
0x10154 c6b438af          amominu.d.aq.rl         a7,a1,(s0)|
0x10144 40b438af          amoor.d                 a7,a1,(s0)|
0x20906 0c8cb42f          amoswap.d.aq            s0,s0,(s9)|
0x1015c 0ab438af          amoswap.d.rl            a7,a1,(s0)|
0x10925a 08fa27af          amoswap.w               a5,a5,(s4)|
0x10140 26b428af          amoxor.w.aq.rl          a7,a1,(s0)|
0x10168 140438af          lr.d.aq                 a7,(s0)|
0x1091fe 100a27af          lr.w                    a5,(s4)|
0x10160 160428af          lr.w.aq.rl              a7,(s0)|
0x1016c 1eb438af          sc.d.aq.rl              a7,a1,(s0)|
0x1febe 18e7a62f          sc.w                    a2,a4,(a5)|
0x109204 1cea26af          sc.w.aq                 a3,a4,(s4)|
0x10164 1ab428af          sc.w.rl                 a7,a1,(s0)|
";

/// F and D: the rounding mode first, `fmv`/`fneg`/`fabs` with integer
/// register names, `fmv.x.s`/`fmv.s.x`.
const FP: &str = "
0x10afe 22a527d3          fabs.d                  a5,a0|
0x100d0 200021d3          fabs.s                  gp,zero|
0x105b6 02f47453          fadd.d                  dyn,fs0,fs0,fa5|
0x1011c 00d678d3          fadd.s                  dyn,fa7,fa2,fa3|
0x100e4 e20096d3          fclass.d                a3,ft1|
0x100e8 e00016d3          fclass.s                a3,ft0|
0x10b16 d227b7d3          fcvt.d.l                rup,fa5,a5|
0x40028f3f7e d237f553          fcvt.d.lu               dyn,fa0,a5|
0x106d2 420787d3          fcvt.d.s                rne,fa5,fa5|
0x1090c d20787d3          fcvt.d.w                rne,fa5,a5|
0x10732 c2261653          fcvt.l.d                rtz,a2,fa2|
0x40028f3f8e c23517d3          fcvt.lu.d               rtz,a5,fa0|
0x100f8 c0367753          fcvt.lu.s               dyn,a4,fa2|
0x10810 4017f7d3          fcvt.s.d                dyn,fa5,fa5|
0x100f0 d035a6d3          fcvt.s.lu               rdn,fa3,a1|
0x100ec d005c653          fcvt.s.w                rmm,fa2,a1|
0x10736 c2069753          fcvt.w.d                rtz,a4,fa3|
0x100f4 c0063753          fcvt.w.s                rup,a4,fa2|
0x100fc c21097d3          fcvt.wu.d               rtz,a5,ft1|
0x10610 1ab575d3          fdiv.d                  dyn,fa1,fa0,fa1|
0x10afa a2a527d3          feq.d                   a5,fa0,fa0|
0x1010c a0d62853          feq.s                   a6,fa2,fa3|
0x10130 00843387          fld                     ft7,8(s0)|
0x13284 a2f507d3          fle.d                   a5,fa0,fa5|
0x10114 a0d60853          fle.s                   a6,fa2,fa3|
0x10642 a2f517d3          flt.d                   a5,fa0,fa5|
0x10110 a0d61853          flt.s                   a6,fa2,fa3|
0x10128 ffc42307          flw                     ft6,-4(s0)|
0x1093e 6287f7c3          fmadd.d                 dyn,fa5,fa5,fs0,fa2|
0x100e0 2a0095d3          fmax.d                  fa1,ft1,ft0|
0x100dc 28100553          fmin.s                  fa0,ft0,ft1|
0x106f6 72d7f7c7          fmsub.d                 dyn,fa5,fa5,fa3,fa4|
0x10108 60d62847          fmsub.s                 rdn,fa6,fa2,fa3,fa2|
0x10912 12f7f7d3          fmul.d                  dyn,fa5,fa5,fa5|
0x10124 10d678d3          fmul.s                  dyn,fa7,fa2,fa3|
0x1075e 22a50453          fmv.d                   s0,a0|
0x100c8 f20580d3          fmv.d.x                 ft1,a1|
0x100cc 20000153          fmv.s                   sp,zero|
0x100c0 f0058053          fmv.s.x                 ft0,a1|
0x105e2 e2078653          fmv.x.d                 a2,fa5|
0x100c4 e0000653          fmv.x.s                 a2,ft0|
0x10608 22f797d3          fneg.d                  a5,a5|
0x10104 0a1087cf          fnmadd.d                rne,fa5,ft1,ft1,ft1|
0x10100 60d6774f          fnmadd.s                dyn,fa4,fa2,fa3,fa2|
0x3055a 12a7f64b          fnmsub.d                dyn,fa2,fa5,fa0,ft2|
0x10134 fe743827          fsd                     ft7,-16(s0)|
0x10b1a 22a78553          fsgnj.d                 fa0,fa5,fa0|
0x100d4 20101253          fsgnjn.s                ft4,ft0,ft1|
0x100d8 2200a2d3          fsgnjx.d                ft5,ft1,ft0|
0x1064e 5a057453          fsqrt.d                 dyn,fs0,fa0|
0x10118 580678d3          fsqrt.s                 dyn,fa7,fa2|
0x1094a 0af47453          fsub.d                  dyn,fs0,fs0,fa5|
0x10120 08d618d3          fsub.s                  rtz,fa7,fa2,fa3|
0x1012c fe642c27          fsw                     ft6,-8(s0)|
";

/// Zicsr (names, pseudo-instructions, unknown CSRs in hex), fences, system
/// instructions.
const SYSTEM: &str = "
0x10286 0035b773          csrrc                   a4,fcsr,a1|
0x10272 0023f073          csrrci                  zero,frm,7|
0x100b4 c0302573          csrrs                   a0,0xc03,zero|
0x100b4 3b502573          csrrs                   a0,pmpaddr5,zero|
0x100b4 b8402573          csrrs                   a0,mhpmcounter4h,zero|
0x100b4 7ff02573          csrrs                   a0,0x7ff,zero|
0x1028a 0015a773          csrrs                   a4,fflags,a1|
0x1026e 0011e573          csrrsi                  a0,fflags,3|
0x100b4 30059573          csrrw                   a0,mstatus,a1|
0x100b4 00100073          ebreak                  |
0x102a2 00000073          ecall                   |
0x10170 0ff0000f          fence                   iorw,iorw|
0x10174 0220000f          fence                   r,r|
0x10178 0130000f          fence                   w,rw|
0x1017c 8330000f          fence                   rw,rw|
0x10180 0c80000f          fence                   io,i|
0x10184 0100000f          fence                   w,|
0x1027e 00302773          frcsr                   a4|
0x1063e 00102773          frflags                 a4|
0x10282 00202773          frrm                    a4|
0x1027a 00359073          fscsr                   zero,a1|
0x10646 00171073          fsflags                 zero,a4|
0x1026a 00105073          fsflagsi                zero,0|
0x10276 00259773          fsrm                    a4,a1|
0x10266 0020d573          fsrmi                   a0,1|
0x100b4 30200073          mret                    |
0x10292 c0002773          rdcycle                 a4|
0x10296 c0202773          rdinstret               a4|
0x1028e c0102773          rdtime                  a4|
0x100b4 12b50073          sfence.vma              a0,a1|
0x100b4 10200073          sret                    |
0x100b4 10500073          wfi                     |
";

/// Compressed: printed as their expansion; a zero immediate where it must
/// not be is `illegal` (`c.addi a0,0`).
const C: &str = "
0x1022c 9736              add                     a4,a4,a3|
0x100ba6 97b6              add                     a5,a5,a3|
0x10214 0808              addi                    a0,sp,16|
0x10216 7139              addi                    sp,sp,-64|
0x10218 6121              addi                    sp,sp,64|
0x1021e 46fd              addi                    a3,zero,31|
0x10220 5681              addi                    a3,zero,-32|
0x10252 4015              addi                    zero,zero,5|
0x1025c 0529              addi                    a0,a0,10|
0x10706 557d              addi                    a0,zero,-1|
0x100ba8 1141              addi                    sp,sp,-16|
0x10234 377d              addiw                   a4,a4,-1|
0x1022e 9f35              addw                    a4,a4,a3|
0x100bb6 8df9              and                     a1,a1,a4|
0x10222 9afd              andi                    a3,a3,-1|
0x10262 c191              beqz                    a1,4                    # 0x10266|
0x10264 e189              bnez                    a1,2                    # 0x10266|
0x100b4 9002              ebreak                  |
0x1023e 2808              fld                     fa0,16(s0)|
0x1024a 25c2              fld                     fa1,16(sp)|
0x10240 a008              fsd                     fa0,0(s0)|
0x1024c ac2e              fsd                     fa1,24(sp)|
0x100b4 6001              illegal                 |
0x10250 0501              illegal                 |
0x10256 a009              j                       2                       # 0x10258|
0x10592 a021              j                       8                       # 0x1059a|
0x1025e 9502              jalr                    ra,a0,0|
0x10ace 8782              jr                      a5|
0x1023a 7c7c              ld                      a5,248(s0)|
0x10246 77fe              ld                      a5,504(sp)|
0x100b92 611c              ld                      a5,0(a0)|
0x1021a 767d              lui                     a2,-4096|
0x1021c 6605              lui                     a2,4096|
0x10236 405c              lw                      a5,4(s0)|
0x10242 57fe              lw                      a5,252(sp)|
0x1022a 8736              mv                      a4,a3|
0x10254 802a              mv                      zero,a0|
0x100bb4 842a              mv                      s0,a0|
0x1024e 0001              nop                     |
0x10232 8f55              or                      a4,a4,a3|
0x100bc6 8082              ret                     |
0x1023c e41c              sd                      a5,8(s0)|
0x10248 e43e              sd                      a5,8(sp)|
0x21604 f9d2              sd                      s4,240(sp)|
0x100bb0 e022              sd                      s0,0(sp)|
0x1062e 2501              sext.w                  a0,a0|
0x10228 0686              slli                    a3,a3,1|
0x10224 8689              srai                    a3,a3,2|
0x10226 92fd              srli                    a3,a3,63|
0x100bca 8d89              sub                     a1,a1,a0|
0x10230 9f15              subw                    a4,a4,a3|
0x10238 dc7c              sw                      a5,124(s0)|
0x10244 c03e              sw                      a5,0(sp)|
0x1063c 8c3d              xor                     s0,s0,a5|
";
