//! Differential check against qemu-riscv64: `fixtures/isa_check.c` runs
//! ~86k integer, atomic, F and D operations on edge-case operands (every
//! rounding mode, NaN-boxing, fflags after each FP op) plus compiled C full
//! of compressed instructions, and prints digests of the results. The
//! expected output was produced by qemu-riscv64 (`fixtures/build.sh`).

use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, Perms};

const IMAGE: &[u8] = include_bytes!("fixtures/isa_check.bin");
const EXPECTED: &[u8] = include_bytes!("fixtures/isa_check.expected");
const BASE: u64 = 0x1_0000;
const STACK_TOP: u64 = 0x7fff_0000;
const GROUP: usize = 16;

#[test]
fn isa_check_matches_qemu_riscv64() {
    let mut mem = GuestMemory::new();
    // Image followed by its .bss (zero-filled), all in one RWX mapping as
    // the linker script lays it out.
    mem.map(BASE, 0x10_0000, Perms::READ | Perms::WRITE | Perms::EXEC)
        .unwrap();
    mem.write_initial(BASE, IMAGE).unwrap();
    mem.map(STACK_TOP - 0x1_0000, 0x1_0000, Perms::READ | Perms::WRITE)
        .unwrap();
    let mut cpu = Cpu::new();
    cpu.set_pc(BASE);
    cpu.set_x(2, STACK_TOP);
    let mut engine = Engine::new(Rv64::new());

    let mut stdout = Vec::new();
    let status = loop {
        match engine.run(&mut cpu, &mut mem) {
            CpuExit::Syscall => {
                let (a0, a1, a2) = (cpu.x(10), cpu.x(11), cpu.x(12));
                match cpu.x(17) {
                    64 => {
                        assert_eq!(a0, 1, "write to stdout only");
                        let len = usize::try_from(a2).unwrap();
                        let mut buf = vec![0; len];
                        mem.read(a1, &mut buf).unwrap();
                        stdout.extend_from_slice(&buf);
                        cpu.set_x(10, a2);
                    }
                    93 => break a0,
                    n => panic!("unexpected syscall {n}"),
                }
                cpu.set_pc(cpu.pc() + 4);
            }
            other => panic!("unexpected {other:?} at {:#x}", cpu.pc()),
        }
    };
    assert_eq!(status, 0);
    assert_eq!(stdout.len(), EXPECTED.len(), "output length");
    let words = |b: &[u8]| -> Vec<u64> {
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (got, want) = (words(&stdout), words(EXPECTED));
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "digest {i} differs (results {}..{} of isa_check.c): got {:#x}, qemu {:#x}",
            i * GROUP,
            (i + 1) * GROUP,
            got[i],
            want[i]
        );
    }
    assert!(engine.stats().insns_executed > 500_000);
}
