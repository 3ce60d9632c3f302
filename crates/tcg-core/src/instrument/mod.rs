//! Instrumentation attached to translation blocks at translation time.
//!
//! An [`Instrumentation`] is consulted once per translated block. It sees a
//! read-only [`TbView`] of the block and fills a [`TbPlan`]: actions to run
//! on block entry and before each instruction ([`Action`]), and actions to
//! run on each memory access of an instruction ([`MemAction`]). The engine
//! compiles the plan into the block's cache generation; a block whose plan is
//! empty is executed by the plain loop, with no instrumentation branch at all.
//!
//! Memory callbacks of the executing instruction are handed to the memory
//! accessor as a borrow of the generation's list, scoped to that one
//! instruction: no per-vCPU pointer to the list exists that could outlive it.
//! A flush requested from any callback happens at a safe point: through
//! [`CallbackContext::request_flush`], right after the current instruction
//! and all its memory callbacks; through a [`crate::FlushHandle`], at the
//! end of the executing block at the latest. The retired
//! generation (and its callback lists) is freed only once every vCPU passed a
//! quiescent point.
//!
//! Callbacks are plain `Fn`s: a layer above that must survive a panicking
//! callback wraps it in `std::panic::catch_unwind` itself.
//!
//! This module holds the [`Instrumentation`] trait and what it sees of a
//! block ([`TbView`], [`InsnInfo`]); its submodules hold the plan it fills
//! ([`TbPlan`], [`Action`], [`MemAction`]: `plan.rs`), the callbacks and
//! the context they run with ([`CallbackFn`], [`CallbackContext`]:
//! `callback.rs`), and the per-vCPU counters inline operations update
//! ([`Scoreboard`]: `scoreboard.rs`).

mod callback;
mod plan;
mod scoreboard;

use std::fmt;

pub use callback::{
    CallbackContext, CallbackFn, InsnCallback, MemAccessInfo, MemCallback, MemCallbackFn,
    RegisterFree, Registers,
};
pub(crate) use callback::{NoRegisters, Requests};
pub use plan::{Action, Compare, Condition, InlineOp, InsnPlan, MemAction, MemFilter, TbPlan};
pub(crate) use plan::{MAX_PLAN_ACTIONS, PlanData, PlanTables};
pub use scoreboard::{InlineKind, MAX_SCOREBOARD_ROWS, Scoreboard, ScoreboardEntry};

/// Decides what each translated block carries. Implemented by the plugin layer.
pub trait Instrumentation: Send + Sync {
    /// Called once per translated block, before it first executes. `plan`
    /// starts empty with one entry per instruction; leaving it empty means the
    /// block runs uninstrumented.
    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan);

    /// Called right after a flush retired every translated block (at a safe
    /// point: no instruction of this vCPU is executing). Blocks translated
    /// from now on consult [`Instrumentation::translate`] afresh.
    fn flushed(&self) {}

    /// The embedder says the engine runs no block for a while (`true`:
    /// its vCPU thread is in a syscall or a wait) or runs them again
    /// ([`crate::Engine::set_idle`]). An instrumentation that waits for
    /// every engine to reach a safe point need not wait for an idle one.
    fn idle(&self, idle: bool) {
        let _ = idle;
    }

    /// What the plans this instrumentation makes now depend on, besides
    /// their block; `None` (the default) if they may depend on anything
    /// else, the engine asking, say.
    ///
    /// Engines sharing translations ([`crate::Engine::share_translations`])
    /// then plan a block once: an engine whose instrumentation gives the
    /// stamp another engine planned the same block under takes that plan
    /// instead of calling [`Instrumentation::translate`]. A stamp must
    /// change before any engine is asked to plan again or flush because
    /// the plans changed (a reset): an engine that has planned again since
    /// must never see the old stamp.
    fn plan_stamp(&self) -> Option<PlanStamp> {
        None
    }
}

/// Names what an [`Instrumentation`]'s plans depend on: which
/// instrumentation (`source`, unique among those whose plans may meet)
/// and which of its states (`version`). See
/// [`Instrumentation::plan_stamp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanStamp {
    source: u64,
    version: u64,
}

impl PlanStamp {
    /// The stamp of `source` in state `version`.
    pub const fn new(source: u64, version: u64) -> PlanStamp {
        PlanStamp { source, version }
    }
}

/// One instruction of a block being translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsnInfo {
    /// Guest address of the instruction.
    pub pc: u64,
    /// Its length in bytes.
    pub len: u8,
    /// Its raw encoding (the low `len` bytes are the instruction).
    pub raw: u32,
}

impl InsnInfo {
    /// The instruction's bytes, in memory order.
    pub fn bytes(&self) -> Vec<u8> {
        let all = self.raw.to_le_bytes();
        all.get(..usize::from(self.len).min(4))
            .unwrap_or(&all)
            .to_vec()
    }
}

/// Read-only view of a block at translation time.
pub struct TbView<'a> {
    pub(crate) pc: u64,
    pub(crate) flags: u32,
    pub(crate) size: u64,
    pub(crate) insns: &'a [InsnInfo],
    pub(crate) disassembler: &'a dyn Fn(&[u8], u64) -> String,
    pub(crate) register_names: &'static [&'static str],
}

impl fmt::Debug for TbView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TbView")
            .field("pc", &self.pc)
            .field("flags", &self.flags)
            .field("size", &self.size)
            .field("insns", &self.insns)
            .finish()
    }
}

impl TbView<'_> {
    /// Guest address of the first instruction.
    pub fn pc(&self) -> u64 {
        self.pc
    }
    /// Translation flags the block was translated under.
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// Size of the block's guest code in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Number of instructions.
    pub fn insn_count(&self) -> usize {
        self.insns.len()
    }
    /// The instructions, in execution order.
    pub fn insns(&self) -> &[InsnInfo] {
        self.insns
    }
    /// Disassembly of instruction `index` (`None` if out of range).
    pub fn disassemble(&self, index: usize) -> Option<String> {
        let insn = self.insns.get(index)?;
        Some((self.disassembler)(&insn.bytes(), insn.pc))
    }
    /// Register names callbacks may read with [`CallbackContext::read_register`].
    pub fn register_names(&self) -> &'static [&'static str] {
        self.register_names
    }
}
