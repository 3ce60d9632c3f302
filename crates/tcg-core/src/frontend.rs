//! The interface a guest architecture implements, and what executing
//! instructions see of memory.

use crate::memory::{FetchOp, GuestMemory, MemFault};

/// A guest architecture: decodes instructions into pre-decoded operations
/// and executes them on its register file.
///
/// The engine decodes a block once (at translation) and then only calls
/// [`Frontend::execute`] on the stored ops, so `decode` may be slow and
/// `execute` must be fast.
pub trait Frontend: Send + Sync + 'static {
    /// Register file of one vCPU.
    type Cpu: Send + 'static;
    /// One pre-decoded instruction. `Copy` and without `Drop`: ops are stored
    /// in bulk per cache generation and freed wholesale.
    type Op: Copy + Send + Sync + 'static;

    /// The vCPU's program counter.
    fn pc(cpu: &Self::Cpu) -> u64;
    /// Sets the vCPU's program counter.
    fn set_pc(cpu: &mut Self::Cpu, pc: u64);
    /// Decodes the instruction at `pc`, fetching through [`GuestMemory::fetch`]
    /// (so execute permission is checked). Never panics.
    fn decode(&self, mem: &mut GuestMemory, pc: u64) -> Result<Decoded<Self::Op>, DecodeError>;
    /// Executes one op whose first byte is at `pc`. Data accesses go through
    /// `mem`, which may be instrumented. Use the `pc` argument: the loop
    /// keeps the current pc outside the register file while it runs blocks
    /// and stores it with [`Frontend::set_pc`] only when something outside
    /// the loop may look (a callback, an exit).
    fn execute<M: MemAccess>(cpu: &mut Self::Cpu, op: &Self::Op, pc: u64, mem: &mut M) -> Flow;
    /// Human-readable disassembly of the raw instruction bytes at `pc`.
    fn disassemble(&self, raw: &[u8], pc: u64) -> String;
    /// The text QEMU's disassembler for this architecture prints for the
    /// raw instruction bytes at `pc` (what `qemu_plugin_insn_disas` gives a
    /// QEMU plugin), as a function the embedder keeps, for those that
    /// present QEMU's plugin API. `None` (the default) if the frontend has
    /// no such disassembler: [`Frontend::disassemble`]'s text stands in.
    fn qemu_disassembler(&self) -> Option<fn(&[u8], u64) -> String> {
        None
    }
    /// Reads a register by architectural name (`"a0"`, `"x10"`, `"pc"`, ...);
    /// `None` if the name is unknown. `"pc"` must name the program counter:
    /// callbacks read it as the executing instruction's address, which the
    /// engine supplies.
    fn read_register(cpu: &Self::Cpu, name: &str) -> Option<u64>;
    /// Every name [`Frontend::read_register`] accepts, in a stable order.
    fn register_names(&self) -> &'static [&'static str];
    /// Translation flags: CPU state that changes how code at the same pc
    /// translates (e.g. a mode bit). Blocks are cached per `(pc, flags)`.
    /// Defaults to 0 for architectures without such state.
    fn tb_flags(_cpu: &Self::Cpu) -> u32 {
        0
    }
    /// True if [`Frontend::tb_flags`] cannot change while ops execute
    /// (e.g. it is constant): compiled blocks may then jump straight into
    /// each other without the loop checking flags. False by default.
    const TB_FLAGS_FIXED: bool = false;
    /// JIT support: lowers `op` (the instruction at `b.pc()`) into `b`,
    /// reading and writing registers as slots of
    /// [`Frontend::jit_registers`]. Returns false, having emitted nothing
    /// that matters, to leave the op to [`Frontend::execute`] (called from
    /// the compiled code). The default lowers nothing.
    fn lower(&self, _op: &Self::Op, _b: &mut crate::jit::IrBuilder) -> bool {
        false
    }
    /// The registers compiled code keeps in host registers, as the slots
    /// [`Frontend::lower`] names. Must always return the same storage for
    /// the same `cpu`. The default has none.
    fn jit_registers(_cpu: &mut Self::Cpu) -> &mut [u64] {
        &mut []
    }
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded<Op> {
    /// The pre-decoded operation.
    pub op: Op,
    /// Length of the instruction in bytes (1..=4 for the encodings `raw` holds).
    pub len: u8,
    /// The raw encoding (16 or 32 bits), for plugins and error reports.
    pub raw: u32,
    /// True if the instruction may transfer control (branch, jump, exit):
    /// the block ends after it.
    pub ends_block: bool,
    /// False promises that executing the op never calls [`MemAccess::load`]
    /// or [`MemAccess::store`]: memory instrumentation attached to it is
    /// dropped at translation, so the instruction runs without it. When in
    /// doubt, `true`.
    pub accesses_memory: bool,
}

/// Why an instruction could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fetching the instruction bytes failed.
    #[error("instruction fetch failed: {0}")]
    Fault(MemFault),
    /// The encoding is illegal or unsupported.
    #[error("illegal instruction {raw:#010x} at {pc:#x}")]
    Illegal {
        /// Address of the instruction.
        pc: u64,
        /// Its raw encoding.
        raw: u32,
    },
}

/// Memory as an executing instruction sees it. The engine passes either a
/// plain implementation or one that runs memory callbacks.
pub trait MemAccess {
    /// Loads `size` (1, 2, 4, 8) bytes at `addr`, sign- or zero-extended to 64 bits.
    fn load(&mut self, addr: u64, size: u8, signed: bool) -> Result<u64, MemFault>;
    /// Stores the low `size` bytes of `value` at `addr`.
    fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault>;
    /// Atomically replaces the naturally aligned `size` (4 or 8) bytes at
    /// `addr` with `update(old)` ([`GuestMemory::atomic_update`]: an AMO,
    /// or a store-conditional's compare-and-swap) and returns `(old,
    /// new)`, `old` sign-extended if `signed`. Instrumentation sees a load
    /// of `old`, then a store of `new`, as QEMU's plugins see an atomic.
    fn atomic_update(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        update: impl Fn(u64) -> u64,
    ) -> Result<(u64, u64), MemFault>;
    /// [`MemAccess::atomic_update`] with `op(old, operand)`: plain
    /// memory does it in one host atomic instruction where it can.
    fn atomic_fetch(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        op: FetchOp,
        operand: u64,
    ) -> Result<(u64, u64), MemFault> {
        self.atomic_update(addr, size, signed, |old| op.apply(old, operand))
    }
    /// The raw guest memory, bypassing instrumentation (e.g. LR/SC
    /// bookkeeping). Guest-visible accesses should use `load`/`store`.
    fn memory(&mut self) -> &mut GuestMemory;
}

/// What [`Frontend::execute`] tells the loop.
// A one-byte tag at a fixed offset lets the loop test `Next` with one byte
// compare; without it rustc packs the tag into `CpuExit`'s niche and every
// instruction pays to store and re-read it (callgrind: 21% fewer host
// instructions on the riscv integer loop with the explicit tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Flow {
    /// Fall through to `pc + len`.
    Next,
    /// Control transfers to this pc; the block ends.
    Jump(u64),
    /// Leave the loop; the vCPU's pc is set to this instruction.
    Exit(CpuExit),
}

/// Why the execution loop stopped (or, for [`CpuExit::FlushCode`], paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuExit {
    /// A system call (`ecall`): the embedder handles it, advances the pc past
    /// the instruction and resumes.
    Syscall,
    /// A breakpoint instruction (`ebreak`).
    Breakpoint,
    /// A load, store or fetch fault.
    Fault(MemFault),
    /// An illegal or unsupported instruction.
    IllegalInstruction {
        /// Its raw encoding.
        raw: u32,
    },
    /// Code was modified (`fence.i`): the loop flushes its translations at
    /// this safe point and resumes after the instruction. Never returned by
    /// [`crate::Engine::run`].
    FlushCode,
    /// [`crate::Engine::request_exit`] (or an [`crate::ExitHandle`]) asked the
    /// vCPU to stop.
    ExitRequested,
}

/// Sign-extends the low `size` bytes of `value`.
#[inline(always)]
pub fn sign_extend(value: u64, size: u8) -> u64 {
    match size {
        1 => value as u8 as i8 as i64 as u64,
        2 => value as u16 as i16 as i64 as u64,
        4 => value as u32 as i32 as i64 as u64,
        _ => value,
    }
}

/// Uninstrumented access: the engine executes plain blocks directly on
/// [`GuestMemory`], and frontends can unit-test `execute` the same way.
impl MemAccess for GuestMemory {
    #[inline(always)]
    fn load(&mut self, addr: u64, size: u8, signed: bool) -> Result<u64, MemFault> {
        let v = GuestMemory::load(self, addr, size)?;
        Ok(if signed { sign_extend(v, size) } else { v })
    }

    #[inline(always)]
    fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        GuestMemory::store(self, addr, size, value)
    }

    fn atomic_update(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        update: impl Fn(u64) -> u64,
    ) -> Result<(u64, u64), MemFault> {
        let (old, new) = GuestMemory::atomic_update(self, addr, size, update)?;
        Ok((if signed { sign_extend(old, size) } else { old }, new))
    }

    fn atomic_fetch(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        op: FetchOp,
        operand: u64,
    ) -> Result<(u64, u64), MemFault> {
        let (old, new) = GuestMemory::atomic_fetch(self, addr, size, op, operand)?;
        Ok((if signed { sign_extend(old, size) } else { old }, new))
    }

    fn memory(&mut self) -> &mut GuestMemory {
        self
    }
}
