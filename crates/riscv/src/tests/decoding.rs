//! The decoder on hostile input, the Frontend glue, and disassembly.

use proptest::prelude::*;
use tcgkit_tcg_core::{AccessKind, DecodeError, Frontend, GuestMemory, MemFaultKind, Perms};

use super::{CountingMemory, enc};
use crate::decode::decode_raw;
use crate::exec::execute;
use crate::op::Inst;
use crate::{Cpu, Rv64};

fn dis(word: u32) -> String {
    let bytes = word.to_le_bytes();
    let len = if word & 3 == 3 { 4 } else { 2 };
    Rv64::new().disassemble(&bytes[..len], 0x1000)
}

#[test]
fn illegal_words() {
    for word in [
        0x0000_0000u32,                        // all-zero halfword
        0xffff_ffff,                           // reserved long encoding
        0xc000_1073,               // unimp = csrrw x0, cycle, x0 (writes a read-only CSR)
        0x3020_0073,               // mret
        0x1050_0073,               // wfi
        0x0000_401f,               // 48-bit encoding prefix
        enc::csr(2, 10, 0, 0x300), // csrr a0, mstatus
        enc::csr(2, 10, 0, 0xc03), // hpmcounter3: not provided
        enc::csr(2, 10, 1, 0xc00), // csrrs a0, cycle, ra: writes read-only
        enc::csr(4, 10, 0, 0x001), // funct3 4 is not a CSR op
        enc::load(7, 10, 11, 0),   // no 128-bit load
        enc::store(4, 10, 11, 0),  // no sq
        enc::fp(0x00, 5, 1, 2, 3), // fadd.s with reserved rm 5
        enc::fp(0x01, 6, 1, 2, 3), // fadd.d with reserved rm 6
        enc::fp(0x02, 0, 1, 2, 3), // fadd.h (Zfh) unsupported
        enc::fp(0x2c, 0, 1, 2, 3), // fsqrt.s needs rs2 = 0
        enc::fp(0x20, 0, 1, 2, 0), // fcvt.s.s does not exist
        enc::amo(0x02, 2, 0, 10, 11, 12), // lr.w with rs2 != 0
        enc::amo(0x00, 4, 0, 10, 11, 12), // amoadd.q
        enc::amo(0x05, 2, 0, 10, 11, 12), // unused funct5
        enc::i(0x0f, 2, 0, 0, 0),  // cbo.* (Zicbom)
        enc::op(0, 0x01 << 5 | 1, 10, 11, 12), // Zbb-style funct7
        enc::slli(10, 11, 0) | (1 << 30), // slli with funct6 != 0
        enc::i(0x1b, 1, 10, 11, 32), // slliw shamt[5] set
        0x0000_0007 | (4 << 12),   // vector load width
    ] {
        assert_eq!(
            decode_raw(word, 0x1000),
            None,
            "{word:#010x} = {}",
            dis(word)
        );
    }
}

#[test]
fn decode_reports_illegal_and_fetch_faults() {
    let rv = Rv64::new();
    let mut mem = GuestMemory::new();
    mem.map(0x1000, 0x1000, Perms::READ | Perms::EXEC).unwrap();
    mem.map(0x3000, 0x1000, Perms::READ).unwrap();
    // A compressed instruction at 0x1ffc, then the first half of a 32-bit
    // one at 0x1ffe whose second half would lie on the unmapped next page.
    mem.write_initial(0x1ffc, &[0x05, 0x05, 0x13, 0x05])
        .unwrap();
    assert_eq!(rv.decode(&mut mem, 0x1ffc).map(|d| d.len), Ok(2));
    match rv.decode(&mut mem, 0x1ffe) {
        Err(DecodeError::Fault(f)) => {
            assert_eq!(
                (f.addr, f.access, f.kind),
                (0x2000, AccessKind::Execute, MemFaultKind::Unmapped)
            );
        }
        other => panic!("{other:?}"),
    }
    // Non-executable page.
    match rv.decode(&mut mem, 0x3000) {
        Err(DecodeError::Fault(f)) => assert_eq!(f.kind, MemFaultKind::Protection),
        other => panic!("{other:?}"),
    }
    // Zero-filled memory is the illegal all-zero halfword.
    assert_eq!(
        rv.decode(&mut mem, 0x1000),
        Err(DecodeError::Illegal { pc: 0x1000, raw: 0 })
    );
    // Decoded metadata.
    mem.write_initial(0x1100, &enc::jal(1, 16).to_le_bytes())
        .unwrap();
    mem.write_initial(0x1104, &[0x82, 0x80]).unwrap(); // c.ret
    let d = rv.decode(&mut mem, 0x1100).unwrap();
    assert_eq!((d.len, d.raw, d.ends_block), (4, enc::jal(1, 16), true));
    let d = rv.decode(&mut mem, 0x1104).unwrap();
    assert_eq!((d.len, d.raw, d.ends_block), (2, 0x8082, true));
    let d = rv.decode(&mut mem, 0x1ffc).unwrap();
    assert!(!d.ends_block);
}

#[test]
fn x0_destinations() {
    let d = |w| decode_raw(w, 0).map(|(i, _)| i);
    assert_eq!(d(enc::addi(0, 5, 3)), Some(Inst::Nop));
    assert_eq!(d(enc::op(1, 1, 0, 5, 6)), Some(Inst::Nop)); // mulh x0
    assert_eq!(d(enc::op32(4, 1, 0, 5, 6)), Some(Inst::Nop)); // divw x0
    assert_eq!(d(enc::lui(0, 0x1000)), Some(Inst::Nop));
    // Side effects stay: a load (may fault), a CSR write, a jump.
    assert!(matches!(
        d(enc::load(3, 0, 5, 0)),
        Some(Inst::Ld { rd: 32, .. })
    ));
    assert!(matches!(
        d(enc::csr(1, 0, 5, 3)),
        Some(Inst::Csr { rd: 32, .. })
    ));
    assert!(matches!(
        d(enc::jal(0, 8)),
        Some(Inst::Jal {
            rd: 32,
            target: 8,
            ..
        })
    ));
    // addi rd, x0, imm is a constant.
    assert_eq!(
        d(enc::addi(5, 0, -2)),
        Some(Inst::Const {
            rd: 5,
            value: (-2i64) as u64
        })
    );
}

#[test]
fn disassembly() {
    assert_eq!(dis(enc::addi(10, 10, 1)), "addi a0, a0, 1");
    assert_eq!(dis(0x0505), "addi a0, a0, 1"); // c.addi
    assert_eq!(dis(0x8082), "ret");
    assert_eq!(dis(enc::load(3, 1, 2, 8)), "ld ra, 8(sp)");
    assert_eq!(dis(enc::store(2, 2, 8, -4)), "sw s0, -4(sp)");
    assert_eq!(dis(enc::b(0, 10, 0, -4)), "beq a0, zero, 0xffc");
    assert_eq!(dis(enc::jal(1, 0x20)), "jal 0x1020");
    assert_eq!(dis(enc::jal(0, 0x20)), "j 0x1020");
    assert_eq!(
        dis(enc::amo(0x00, 3, 3, 10, 11, 12)),
        "amoadd.d a0, a2, (a1)"
    );
    assert_eq!(dis(enc::amo(0x03, 2, 0, 10, 11, 12)), "sc.w a0, a2, (a1)");
    assert_eq!(dis(enc::csr(2, 10, 0, 3)), "csrrs a0, fcsr, zero");
    assert_eq!(dis(enc::csr(5, 0, 2, 2)), "csrrwi zero, frm, 2");
    assert_eq!(dis(enc::fp(0x01, 7, 10, 11, 12)), "fadd.d fa0, fa1, fa2");
    assert_eq!(dis(enc::fp(0x61, 1, 10, 11, 0)), "fcvt.w.d a0, fa1, rtz");
    assert_eq!(
        dis(enc::fma(0x43, 0, 7, 1, 2, 3, 4)),
        "fmadd.s ft1, ft2, ft3, ft4"
    );
    assert_eq!(dis(enc::lui(10, 0x12345000)), "li a0, 0x12345000");
    assert_eq!(dis(enc::ECALL), "ecall");
    assert_eq!(dis(0), "unknown 0x0000");
    assert_eq!(dis(0xffff_ffff), "unknown 0xffffffff");
    assert_eq!(Rv64::new().disassemble(&[0x13], 0), "<truncated 1 bytes>");
    assert_eq!(
        Rv64::new().disassemble(&[0x13, 0x05, 0x15], 0),
        "<truncated 3 bytes>"
    );
}

#[test]
fn register_names_resolve() {
    let rv = Rv64::new();
    let mut cpu = Cpu::new();
    for r in 1..32u8 {
        cpu.set_x(r, u64::from(r) * 3);
        cpu.set_f(r, u64::from(r) * 5);
    }
    cpu.set_pc(0x1234);
    cpu.set_fcsr(0xa5);
    for name in rv.register_names() {
        assert!(Rv64::read_register(&cpu, name).is_some(), "{name}");
    }
    assert_eq!(rv.register_names().len(), 68);
    let read = |n| Rv64::read_register(&cpu, n);
    assert_eq!(read("a0"), Some(30));
    assert_eq!(read("x10"), Some(30));
    assert_eq!(read("fp"), Some(24));
    assert_eq!(read("s0"), Some(24));
    assert_eq!(read("zero"), Some(0));
    assert_eq!(read("x0"), Some(0));
    assert_eq!(read("t6"), Some(93));
    assert_eq!(read("fa1"), Some(55));
    assert_eq!(read("f11"), Some(55));
    assert_eq!(read("ft11"), Some(155));
    assert_eq!(read("pc"), Some(0x1234));
    assert_eq!(read("fcsr"), Some(0xa5));
    assert_eq!(read("frm"), Some(5));
    assert_eq!(read("fflags"), Some(5));
    for bad in ["x32", "x01", "f32", "x", "", "a8", "X1", "x-1", "pc "] {
        assert_eq!(read(bad), None, "{bad:?}");
    }
}

proptest! {
    /// No word panics the decoder, the disassembler or the executor
    /// (executing over an empty address space, so every access faults).
    #[test]
    fn arbitrary_words_never_panic(word in any::<u32>(), pc in any::<u64>(), regs in any::<[u64; 4]>()) {
        let pc = pc & !1;
        let _ = dis(word);
        if let Some((inst, len)) = decode_raw(word, pc) {
            prop_assert!(len == 2 || len == 4);
            let mut cpu = Cpu::new();
            for (i, v) in regs.iter().enumerate() {
                cpu.set_x(10 + i as u8, *v);
                cpu.set_f(10 + i as u8, *v);
            }
            let mut mem = GuestMemory::new();
            let _ = execute(&mut cpu, &inst, pc, &mut mem);
            prop_assert_eq!(cpu.x(0), 0);
        }
    }

    /// The same over words biased toward valid major opcodes.
    #[test]
    fn arbitrary_valid_opcodes_never_panic(high in any::<u32>(), opcode in prop::sample::select(vec![
        0x03u32, 0x07, 0x0f, 0x13, 0x17, 0x1b, 0x23, 0x27, 0x2f, 0x33, 0x37, 0x3b, 0x43, 0x47,
        0x4b, 0x4f, 0x53, 0x63, 0x67, 0x6f, 0x73,
    ])) {
        let word = (high & !0x7f) | opcode;
        let _ = dis(word);
        if let Some((inst, _)) = decode_raw(word, 0x1000) {
            let mut cpu = Cpu::new();
            cpu.set_fcsr(0xe0); // frm = 7: dynamic rounding is illegal
            let _ = execute(&mut cpu, &inst, 0x1000, &mut GuestMemory::new());
            prop_assert_eq!(cpu.x(0), 0);
        }
    }
}

proptest! {
    /// `accesses_memory` is what lets the engine drop memory callbacks from
    /// an instruction: it must be true for every instruction that loads or
    /// stores (a false negative would lose accesses plugins count), and it
    /// is true exactly for the load, store and atomic major opcodes.
    #[test]
    fn accesses_memory_covers_every_load_and_store(high in any::<u32>(), opcode in prop::sample::select(vec![
        0x03u32, 0x07, 0x0f, 0x13, 0x17, 0x1b, 0x23, 0x27, 0x2f, 0x33, 0x37, 0x3b, 0x43, 0x47,
        0x4b, 0x4f, 0x53, 0x63, 0x67, 0x6f, 0x73,
    ]), compressed in any::<u16>(), regs in any::<[u64; 4]>()) {
        for word in [(high & !0x7f) | opcode, u32::from(compressed)] {
            if let Some((inst, _)) = decode_raw(word, 0x1000) {
                let mut cpu = Cpu::new();
                for (i, v) in regs.iter().enumerate() {
                    cpu.set_x(10 + i as u8, *v);
                }
                // Over an empty address space: every attempt is counted,
                // then faults.
                let mut mem = GuestMemory::new();
                let mut counting = CountingMemory { mem: &mut mem, loads: 0, stores: 0 };
                let _ = execute(&mut cpu, &inst, 0x1000, &mut counting);
                if counting.loads + counting.stores > 0 {
                    prop_assert!(inst.accesses_memory(), "{word:#x} ({inst:?}) accessed memory");
                }
                if word & 3 == 3 {
                    let memory_opcode = matches!(word & 0x7f, 0x03 | 0x07 | 0x23 | 0x27 | 0x2f);
                    prop_assert_eq!(inst.accesses_memory(), memory_opcode, "{:#x} ({:?})", word, inst);
                }
            }
        }
    }
}
