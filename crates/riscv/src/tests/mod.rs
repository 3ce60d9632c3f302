//! Unit tests: a hand encoder, a tiny step loop over `GuestMemory`, and one
//! module per instruction class.

mod atomic;
mod compressed;
mod csr;
mod decoding;
mod disas_qemu;
mod enc;
mod engine;
mod float;
mod integer;
mod jit;
mod jit_instrumented;
mod threads;

use tcgkit_tcg_core::{CpuExit, Flow, Frontend, GuestMemory, Perms};

use crate::{Cpu, Rv64};

pub(crate) const CODE: u64 = 0x1_0000;
pub(crate) const DATA: u64 = 0x2_0000;

/// Counts the accesses an instruction makes through `MemAccess`, which is
/// what instrumentation (plugins' memory callbacks) sees.
pub(crate) struct CountingMemory<'a> {
    pub(crate) mem: &'a mut GuestMemory,
    pub(crate) loads: u32,
    pub(crate) stores: u32,
}

impl tcgkit_tcg_core::MemAccess for CountingMemory<'_> {
    fn load(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
    ) -> Result<u64, tcgkit_tcg_core::MemFault> {
        self.loads += 1;
        tcgkit_tcg_core::MemAccess::load(self.mem, addr, size, signed)
    }
    fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), tcgkit_tcg_core::MemFault> {
        self.stores += 1;
        tcgkit_tcg_core::MemAccess::store(self.mem, addr, size, value)
    }
    fn atomic_update(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        update: impl Fn(u64) -> u64,
    ) -> Result<(u64, u64), tcgkit_tcg_core::MemFault> {
        self.loads += 1;
        self.stores += 1;
        tcgkit_tcg_core::MemAccess::atomic_update(self.mem, addr, size, signed, update)
    }
    fn memory(&mut self) -> &mut GuestMemory {
        self.mem
    }
}

/// A hart with code at [`CODE`] (r-x) and one zeroed page at [`DATA`] (rw-).
pub(crate) struct Machine {
    pub cpu: Cpu,
    pub mem: GuestMemory,
    rv: Rv64,
}

impl Machine {
    pub fn new(code: &[u32]) -> Self {
        let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
        Self::with_bytes(&bytes)
    }

    pub fn with_bytes(code: &[u8]) -> Self {
        let mut mem = GuestMemory::new();
        mem.map(CODE, 0x1000, Perms::READ | Perms::EXEC).unwrap();
        mem.write_initial(CODE, code).unwrap();
        mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE).unwrap();
        let mut cpu = Cpu::new();
        cpu.set_pc(CODE);
        Machine {
            cpu,
            mem,
            rv: Rv64::new(),
        }
    }

    /// Decodes and executes one instruction, updating pc like the engine.
    pub fn step(&mut self) -> Flow {
        let pc = self.cpu.pc();
        let d = match self.rv.decode(&mut self.mem, pc) {
            Ok(d) => d,
            Err(e) => panic!("decode at {pc:#x}: {e}"),
        };
        let flow = Rv64::execute(&mut self.cpu, &d.op, pc, &mut self.mem);
        match flow {
            Flow::Next => self.cpu.set_pc(pc + u64::from(d.len)),
            Flow::Jump(t) => self.cpu.set_pc(t),
            Flow::Exit(_) => {}
        }
        flow
    }

    /// Steps until an exit (at most `limit` instructions).
    pub fn run(&mut self, limit: usize) -> CpuExit {
        for _ in 0..limit {
            if let Flow::Exit(e) = self.step() {
                return e;
            }
        }
        panic!("no exit within {limit} instructions");
    }

    /// Runs the program to its final `ecall`.
    pub fn run_to_ecall(&mut self) {
        assert_eq!(self.run(10_000), CpuExit::Syscall);
    }

    pub fn x(&self, r: u8) -> u64 {
        self.cpu.x(r)
    }
}

/// Executes `code` (ending with an implicit ecall) with the given integer
/// registers preset, and returns the final hart.
pub(crate) fn exec(code: &[u32], regs: &[(u8, u64)]) -> Machine {
    let mut words = code.to_vec();
    words.push(enc::ECALL);
    let mut m = Machine::new(&words);
    for &(r, v) in regs {
        m.cpu.set_x(r, v);
    }
    m.run_to_ecall();
    m
}

#[test]
fn op_is_compact() {
    assert!(
        std::mem::size_of::<crate::Op>() <= 16,
        "{}",
        std::mem::size_of::<crate::Op>()
    );
}
