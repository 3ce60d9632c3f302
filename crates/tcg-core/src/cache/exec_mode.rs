//! How a block runs ([`ExecMode`]), and the compiled instrumentation its
//! loop reads: per-instruction hooks and their actions, memory actions,
//! tallies of inline adds.
//!
//! Everything here is `Copy` and names callbacks and scoreboards by index
//! into the generation's tables, so a generation's instrumentation is freed
//! wholesale with it. The mode is chosen once, when the plan is compiled
//! (`compile.rs`); the engine's loop for each mode tests only what such
//! blocks can hold.

use crate::instrument::{Compare, InlineKind, MemFilter};

use super::NONE;

/// How an instrumented (or plain) block is executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExecMode {
    /// No instrumentation: the plain loop.
    Plain,
    /// Only inline *adds* before instructions and on block entry, no
    /// callback and no memory action anywhere in the block: the plain loop,
    /// then each touched scoreboard entry gets the sum of the adds of the
    /// instructions that ran (one add per entry per block instead of one per
    /// instruction). Exact: adds commute, and nothing on this vCPU can look
    /// at the scoreboard between two instructions of such a block.
    Tally,
    /// A [`ExecMode::Tally`] block whose one tally adds the same amount
    /// ([`Tally::per_insn`]) per instruction and nothing on entry (an inline
    /// instruction counter): the loop batches these adds over consecutive
    /// blocks into one pending count per vCPU, applied before anything on
    /// the vCPU can look (see `engine::tally::PendingCount`).
    Count,
    /// Actions before instructions or on block entry, none on memory
    /// accesses: the instrumented loop, running each instruction's
    /// [`InsnHook`] before it, with instructions executing directly on guest
    /// memory as in the plain loop.
    Steps,
    /// A [`ExecMode::Steps`] plan that is one and the same callback before
    /// every instruction and nothing else (an instruction-counting plugin
    /// in callback mode): a loop that looks the callback up once per block
    /// instead of each instruction's hook, and goes on into the CallEach
    /// block the last one is chained to without returning to the vCPU loop.
    CallEach,
    /// A [`ExecMode::Steps`] plan that is one and the same list of two or
    /// more callbacks before every instruction and nothing else (several
    /// instruction-counting plugins in callback mode): as
    /// [`ExecMode::CallEach`], with the list looked up once per block.
    CallList,
    /// A [`ExecMode::Steps`] plan with actions on block entry only (a
    /// block-counting plugin): the entry actions, then the plain loop.
    OnEntry,
    /// A [`ExecMode::StepsWithMemory`] plan that is the same memory actions
    /// on every instruction that accesses memory and nothing else (a
    /// memory-watching plugin): a loop that arms those actions once per
    /// block instead of walking each instruction's hook, and goes on into
    /// the chained block if that is plain or a MemEach block with the same
    /// actions, without returning to the vCPU loop.
    MemEach,
    /// A [`ExecMode::StepsWithMemory`] plan that is a [`ExecMode::CallEach`]
    /// plan (one callback before every instruction) with the same memory
    /// actions on every instruction that accesses memory (an instruction
    /// counter and a memory watcher): the MemEach loop, calling the
    /// callback before each instruction, going on into the CallEach blocks
    /// (those without memory accesses) and the blocks of its kind with the
    /// same callback and actions.
    CallEachWithMem,
    /// The general case: as [`ExecMode::Steps`], with instructions executing
    /// through an accessor that runs their memory actions.
    StepsWithMemory,
}

impl ExecMode {
    /// Runs the instrumented loop (its plan is hooks): every mode but the
    /// plain one and those of tallies.
    pub(crate) fn runs_steps(self) -> bool {
        self != ExecMode::Plain && !self.tallies()
    }
    /// Has a plan its compiled code runs (all but plain blocks and inline
    /// counters the loop applies).
    pub(crate) fn instrumented(self) -> bool {
        !matches!(self, ExecMode::Plain | ExecMode::Count)
    }
    /// Worth compiling: every mode but those calling a callback before
    /// every instruction, whose interpreter loops (the callback called
    /// straight from the loop, or compiled into it) do as well as compiled
    /// code calling out per instruction, or better (release, integer
    /// 3000000: the bundled `insn` plugin's callback 0.36 s interpreted
    /// against 0.34 s compiled; QEMU's C `insn` plugin 0.44 s against
    /// 0.51 s: each call first stores the block's live registers).
    pub(crate) fn compiles(self) -> bool {
        !matches!(
            self,
            ExecMode::CallEach | ExecMode::CallList | ExecMode::CallEachWithMem
        )
    }
    /// Runs the plain loop with tallies (its plan is tallies).
    pub(super) fn tallies(self) -> bool {
        matches!(self, ExecMode::Tally | ExecMode::Count)
    }
}

/// The adds a [`ExecMode::Tally`] block makes to one scoreboard entry:
/// `prefix[i]` in `Generation::tally_sums` is the sum of the block-entry adds
/// and the adds of instructions `0..=i`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tally {
    pub(crate) board: u32,
    pub(crate) slot: u32,
    /// The entry's index in `Generation::tally_keys`: a run of tally blocks
    /// sums the adds of the first few keys in locals (see
    /// `Engine::exec_tally_run`).
    pub(crate) key: u32,
    /// Start of the block's per-instruction prefix sums in `tally_sums`.
    pub(crate) sums_start: u32,
    /// The last prefix sum: what the block adds when it runs to its end
    /// (the usual case), read without a second lookup.
    pub(crate) full: u64,
    /// For an [`ExecMode::Count`] block: the add per instruction.
    pub(crate) per_insn: u64,
}

/// What runs before one instruction of an instrumented block (or, for the
/// first hook of a block, on block entry): a range of `Generation::actions`
/// and a range of `Generation::mem_actions`. The instrumented loop walks
/// the block's ops as the plain loop does, with these hooks alongside, so an
/// instruction with nothing attached costs two tests of zero. The entry
/// hook has no memory actions of its own: its memory range is where the
/// first instruction's start, and in a [`ExecMode::MemEach`] or
/// [`ExecMode::CallEachWithMem`] block the actions every memory-accessing
/// instruction shares (the loop arms them
/// from there, with no search for the first such instruction).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InsnHook {
    pub(crate) actions_start: u32,
    pub(crate) mem_start: u32,
    pub(crate) actions_len: u16,
    pub(crate) mem_len: u16,
    /// Some memory action is a callback (which may request a flush or exit).
    pub(crate) mem_calls: bool,
    /// If the actions are exactly one [`CompiledAction::Call`], its callback
    /// (the common case of one instruction-callback plugin): the loop calls
    /// it without walking the action list. [`NONE`] otherwise.
    pub(crate) sole_call: u32,
}

/// A compiled [`crate::Action`]. Callbacks and scoreboards are referenced
/// by index into the generation's tables (in a [`crate::TbPlan`], into the
/// plan's own), so actions are `Copy` and freed wholesale with the
/// generation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CompiledAction {
    /// Call an instruction (or block-entry) callback.
    Call { cb: u32 },
    /// Update a scoreboard entry.
    Inline {
        board: u32,
        slot: u32,
        kind: InlineKind,
    },
    /// Call a callback if a scoreboard entry satisfies a comparison.
    Conditional {
        cb: u32,
        board: u32,
        slot: u32,
        compare: Compare,
        value: u64,
    },
}

/// Compiled memory action.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum CompiledMemKind {
    Call {
        cb: u32,
    },
    Inline {
        board: u32,
        slot: u32,
        kind: InlineKind,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CompiledMem {
    pub(crate) filter: MemFilter,
    pub(crate) kind: CompiledMemKind,
}

/// The tally every [`ExecMode::Count`] block planned under the current plan
/// version adds, if they all add the same one (one inline instruction
/// counter: the usual case). The loop then counts those blocks'
/// instructions with one add, with no per-block comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CountTally {
    /// No Count block planned yet.
    Unset,
    /// All of them add `per_insn` per instruction to `slot` of `board`.
    Shared {
        board: u32,
        slot: u32,
        per_insn: u64,
    },
    /// They differ.
    Mixed,
}

/// A hook with no action: the placeholder for room made in the arrays
/// before a plan is compiled into it, and the loop's stand-in for a block
/// without hooks.
pub(crate) const EMPTY_HOOK: InsnHook = InsnHook {
    actions_start: 0,
    mem_start: 0,
    actions_len: 0,
    mem_len: 0,
    mem_calls: false,
    sole_call: NONE,
};
