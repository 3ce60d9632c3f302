//! Translation blocks, the block cache and the vCPU execution loop.
//!
//! tcg-core knows nothing of any guest architecture or plugin system. A guest
//! architecture implements [`Frontend`] (decode into pre-decoded ops, execute
//! one op); an embedder (e.g. a Linux process model) owns a [`GuestMemory`]
//! and a register file and drives an [`Engine`], handling the [`CpuExit`]s it
//! returns; a plugin layer implements [`Instrumentation`] to attach
//! callbacks, inline counters and memory callbacks at translation time.
//!
//! Design points:
//! - Blocks and everything attached to them live in a cache *generation*:
//!   flat typed arenas of `Copy` data (headers, pre-decoded ops, compiled
//!   instrumentation) plus the callback handles they reference, all
//!   addressed by index. [`Engine::flush`] retires the generation in O(1),
//!   and its callbacks and memory are released once every vCPU passed a
//!   quiescent point (between two blocks).
//! - The memory callbacks of an executing instruction are a borrow scoped to
//!   that instruction, so no flush can free them while they may run: a flush
//!   requested from any callback happens at the next safe point.
//! - A block translated while nothing instruments it runs in a loop with no
//!   instrumentation branch and no dynamic dispatch. So does a block whose
//!   only instrumentation is inline adds (e.g. an instruction counter): their
//!   sums are applied once per block, for the instructions that ran.
//!   Otherwise the instrumented loop walks the same ops with a small hook
//!   per instruction (its actions and memory actions).
//! - A reclaimed generation's allocations host the next one, so the
//!   re-translation after a flush (a plugin `reset`) reuses warm memory. Blocks chain directly
//!   to their usual successors (links checked against the target's liveness
//!   and flags), so most block transitions skip even the jump cache.
//! - An [`EngineEvents`] sink hears of translations, flushes and
//!   invalidations, only on those slow paths.
//! - With [`Engine::set_jit`], hot blocks are compiled to host code with
//!   Cranelift (module [`jit`]): a frontend lowers its ops into a small IR
//!   ([`Frontend::lower`]) and anything it does not lower runs in the
//!   interpreter from the compiled code. Compiled code belongs to its
//!   generation and is freed with it.
//!
//! ```
//! use tcgkit_tcg_core::*;
//!
//! /// A toy guest: each 4-byte word is `imm:u16, opcode:u16`.
//! /// Opcode 1 adds `imm` to the accumulator, 2 jumps back `imm` bytes if
//! /// the accumulator is below 100, 3 stops with a system call.
//! struct Toy;
//! #[derive(Clone, Copy)]
//! enum Op { Add(u64), LoopBack(u64), Stop }
//! struct Cpu { pc: u64, acc: u64 }
//!
//! impl Frontend for Toy {
//!     type Cpu = Cpu;
//!     type Op = Op;
//!     fn pc(cpu: &Cpu) -> u64 { cpu.pc }
//!     fn set_pc(cpu: &mut Cpu, pc: u64) { cpu.pc = pc }
//!     fn decode(&self, mem: &mut GuestMemory, pc: u64) -> Result<Decoded<Op>, DecodeError> {
//!         let mut word = [0u8; 4];
//!         mem.fetch(pc, &mut word).map_err(DecodeError::Fault)?;
//!         let raw = u32::from_le_bytes(word);
//!         let imm = u64::from(raw & 0xffff);
//!         let (op, ends_block) = match raw >> 16 {
//!             1 => (Op::Add(imm), false),
//!             2 => (Op::LoopBack(imm), true),
//!             3 => (Op::Stop, true),
//!             _ => return Err(DecodeError::Illegal { pc, raw }),
//!         };
//!         Ok(Decoded { op, len: 4, raw, ends_block, accesses_memory: false })
//!     }
//!     fn execute<M: MemAccess>(cpu: &mut Cpu, op: &Op, pc: u64, _mem: &mut M) -> Flow {
//!         match *op {
//!             Op::Add(imm) => { cpu.acc += imm; Flow::Next }
//!             Op::LoopBack(back) if cpu.acc < 100 => Flow::Jump(pc - back),
//!             Op::LoopBack(_) => Flow::Next,
//!             Op::Stop => Flow::Exit(CpuExit::Syscall),
//!         }
//!     }
//!     fn disassemble(&self, raw: &[u8], _pc: u64) -> String { format!("{raw:02x?}") }
//!     fn read_register(cpu: &Cpu, name: &str) -> Option<u64> {
//!         match name { "pc" => Some(cpu.pc), "acc" => Some(cpu.acc), _ => None }
//!     }
//!     fn register_names(&self) -> &'static [&'static str] { &["pc", "acc"] }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut mem = GuestMemory::new();
//! mem.map(0x1000, PAGE_SIZE, Perms::READ | Perms::EXEC)?;
//! let program: [u32; 4] = [0x1_0003, 0x1_0007, 0x2_0004, 0x3_0000];
//! let bytes: Vec<u8> = program.iter().flat_map(|w| w.to_le_bytes()).collect();
//! mem.write_initial(0x1000, &bytes)?;
//!
//! /// A profiler's view of the cache: told of each translation (slow path
//! /// only; executing cached blocks reports nothing).
//! struct Translations(std::sync::Arc<std::sync::Mutex<Vec<(u64, u32)>>>);
//! impl EngineEvents for Translations {
//!     fn block_translated(&mut self, pc: u64, insns: u32, _bytes: u32) {
//!         if let Ok(mut log) = self.0.lock() { log.push((pc, insns)); }
//!     }
//! }
//!
//! let mut engine = Engine::new(Toy);
//! let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
//! engine.set_event_sink(Some(Box::new(Translations(log.clone()))));
//! let mut cpu = Cpu { pc: 0x1000, acc: 0 };
//! assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
//! assert_eq!(cpu.acc, 3 + 7 * 14); // the loop ran until acc >= 100
//! assert_eq!(cpu.pc, 0x100c);      // left at the stopping instruction
//! assert_eq!(engine.stats().tbs_translated, 3);
//! // Entry block (3 insns), loop body (2 insns), the stop (1 insn).
//! assert_eq!(*log.lock().unwrap(), [(0x1000, 3), (0x1004, 2), (0x100c, 1)]);
//! # Ok(()) }
//! ```
// `unsafe` only in the JIT's runtime and code memory (jit/runtime.rs,
// jit/code.rs), each block with its SAFETY comment.
#![deny(unsafe_code)]

mod cache;
pub mod engine;
pub mod frontend;
pub mod instrument;
pub mod jit;
pub mod memory;

pub use engine::{
    Engine, EngineEvents, EngineStats, ExitHandle, FlushHandle, InlinedCallback,
    InlinedMemCallback, Vcpu,
};
pub use frontend::{CpuExit, DecodeError, Decoded, Flow, Frontend, MemAccess, sign_extend};
pub use instrument::{
    Action, CallbackContext, CallbackFn, Compare, Condition, InlineKind, InlineOp, InsnCallback,
    InsnInfo, InsnPlan, Instrumentation, MAX_SCOREBOARD_ROWS, MemAccessInfo, MemAction,
    MemCallback, MemCallbackFn, MemFilter, PlanStamp, RegisterFree, Registers, Scoreboard,
    ScoreboardEntry, TbPlan, TbView,
};
pub use jit::{IrBuilder, JitConfig, JitError};
pub use memory::{
    AccessKind, FetchOp, GuestMemory, MemError, MemFault, MemFaultKind, PAGE_SIZE, Perms,
};
