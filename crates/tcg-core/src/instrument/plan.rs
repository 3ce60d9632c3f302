//! The plan an [`Instrumentation`](super::Instrumentation) fills for one
//! block: a [`TbPlan`], attached to through [`TbPlan::on_entry`] and each
//! instruction's [`InsnPlan`], and the actions it records ([`Action`],
//! [`MemAction`]).
//!
//! Attaching takes `&self` and records `Copy` actions that name a small
//! per-plan table of the distinct callbacks and scoreboards attached
//! ([`PlanTables`]: almost always none to two of each), so attaching the
//! same callback to every instruction touches no reference count; the
//! cache compiles the recorded actions into the block's generation.
//!
//! The engine keeps one scratch plan from one translation to the next: it
//! keeps the few callbacks and scoreboards the last block named, and a memo
//! the instrumentation keeps between translations ([`TbPlan::memo`]:
//! plugin-api keeps its registration snapshot there); the engine drops both
//! on a flush, a re-instrumentation or a change of instrumentation.

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use super::{InlineKind, InsnCallback, MemCallback, Scoreboard};
use crate::cache::{CompiledAction, CompiledMem, CompiledMemKind};

/// An inline operation on one entry of the executing vCPU's scoreboard row.
#[derive(Clone, Copy, Debug)]
pub struct InlineOp<'a> {
    /// The scoreboard.
    pub board: &'a Arc<Scoreboard>,
    /// Entry index within the vCPU's row.
    pub slot: usize,
    /// The operation.
    pub kind: InlineKind,
}

/// Unsigned comparison of a scoreboard entry with a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Always true.
    Always,
    /// Never true.
    Never,
    /// `entry == value`
    Eq,
    /// `entry != value`
    Ne,
    /// `entry < value`
    Lt,
    /// `entry <= value`
    Le,
    /// `entry > value`
    Gt,
    /// `entry >= value`
    Ge,
}

impl Compare {
    /// Evaluates `entry <op> value`.
    #[inline(always)]
    pub fn holds(self, entry: u64, value: u64) -> bool {
        match self {
            Compare::Always => true,
            Compare::Never => false,
            Compare::Eq => entry == value,
            Compare::Ne => entry != value,
            Compare::Lt => entry < value,
            Compare::Le => entry <= value,
            Compare::Gt => entry > value,
            Compare::Ge => entry >= value,
        }
    }
}

/// The condition of a conditional callback.
#[derive(Clone, Copy, Debug)]
pub struct Condition<'a> {
    /// The scoreboard holding the entry.
    pub board: &'a Arc<Scoreboard>,
    /// Entry index within the executing vCPU's row.
    pub slot: usize,
    /// How to compare.
    pub compare: Compare,
    /// The value compared against.
    pub value: u64,
}

/// Something run on block entry or before an instruction. It borrows its
/// callback and scoreboard: the plan keeps one reference of its own to each
/// distinct one, so attaching the same callback or scoreboard to every
/// instruction of a block touches no reference count.
#[derive(Clone, Copy)]
pub enum Action<'a> {
    /// Call a callback.
    Callback(&'a InsnCallback),
    /// Update a scoreboard entry without a call.
    Inline(InlineOp<'a>),
    /// Call a callback only if the condition holds.
    Conditional(Condition<'a>, &'a InsnCallback),
}

impl fmt::Debug for Action<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Callback(_) => f.write_str("Callback"),
            Action::Inline(op) => f.debug_tuple("Inline").field(op).finish(),
            Action::Conditional(c, _) => f.debug_tuple("Conditional").field(c).finish(),
        }
    }
}

/// Which memory accesses a memory action sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemFilter {
    /// Loads only.
    Reads,
    /// Stores only.
    Writes,
    /// Loads and stores.
    All,
}

impl MemFilter {
    #[inline(always)]
    pub(crate) fn matches(self, is_store: bool) -> bool {
        match self {
            MemFilter::Reads => !is_store,
            MemFilter::Writes => is_store,
            MemFilter::All => true,
        }
    }
}

/// Something run after each matching memory access of an instruction; it
/// borrows its callback or scoreboard as [`Action`] does.
#[derive(Clone, Copy)]
pub enum MemAction<'a> {
    /// Call a memory callback.
    Callback(&'a MemCallback),
    /// Update a scoreboard entry without a call.
    Inline(InlineOp<'a>),
}

impl fmt::Debug for MemAction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemAction::Callback(_) => f.write_str("Callback"),
            MemAction::Inline(op) => f.debug_tuple("Inline").field(op).finish(),
        }
    }
}

/// What the instrumentation attaches to one block; filled by
/// [`Instrumentation::translate`], on block entry ([`TbPlan::on_entry`]) and
/// per instruction ([`TbPlan::insn`], [`TbPlan::insns`]). Actions run in
/// the order they were attached; a block keeps at most 65535 execution
/// actions and 65535 memory actions (further ones are ignored).
///
/// Attaching takes `&self`, so any number of instruction handles can be
/// alive at once (as a plugin API hands them out while it walks a block).
/// Actions are stored as `Copy` records naming the plan's own table of the
/// distinct callbacks and scoreboards they use: re-planning every block
/// after a reset then costs no reference-count traffic per action, and
/// emptying the plan drops a handful of handles.
///
/// [`Instrumentation::translate`]: super::Instrumentation::translate
#[derive(Default)]
pub struct TbPlan {
    insns: u32,
    data: RefCell<PlanData>,
    memo: Option<Box<dyn Any + Send>>,
}

impl fmt::Debug for TbPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TbPlan")
            .field("insns", &self.insns)
            .field("data", &self.data)
            .field("memo", &self.memo.is_some())
            .finish()
    }
}

/// The attached actions of a [`TbPlan`].
#[derive(Clone, Debug)]
pub(crate) struct PlanData {
    /// Execution actions with where they run: 0 on block entry, `i + 1`
    /// before instruction `i`.
    pub(crate) exec: Vec<(u32, CompiledAction)>,
    /// Memory actions with the index of their instruction.
    pub(crate) mem: Vec<(u32, CompiledMem)>,
    pub(crate) tables: PlanTables,
    /// Every execution action is an inline add (the plan may run as a
    /// tally, see `cache::ExecMode::Tally`).
    pub(crate) adds_only: bool,
    /// `exec` and `mem` are in the order of their instructions (the usual
    /// case: one plugin attaching as it walks the block).
    in_order: bool,
}

impl Default for PlanData {
    fn default() -> Self {
        PlanData {
            exec: Vec::new(),
            mem: Vec::new(),
            tables: PlanTables::default(),
            adds_only: true,
            in_order: true,
        }
    }
}

/// Most execution actions, and separately memory actions, one block's plan
/// keeps: compiled hooks count them in 16 bits.
pub(crate) const MAX_PLAN_ACTIONS: usize = u16::MAX as usize;

/// The distinct callbacks and scoreboards a [`TbPlan`]'s actions name, by
/// index (almost always none to two of each), with how many actions name
/// each callback.
#[derive(Clone, Default)]
pub(crate) struct PlanTables {
    pub(crate) callbacks: SmallVec<[InsnCallback; 2]>,
    pub(crate) callback_uses: SmallVec<[u32; 2]>,
    pub(crate) mem_callbacks: SmallVec<[MemCallback; 2]>,
    pub(crate) mem_callback_uses: SmallVec<[u32; 2]>,
    pub(crate) boards: SmallVec<[Arc<Scoreboard>; 2]>,
}

impl fmt::Debug for PlanTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanTables")
            .field("callbacks", &self.callbacks.len())
            .field("mem_callbacks", &self.mem_callbacks.len())
            .field("boards", &self.boards)
            .finish()
    }
}

/// How many of the latest table entries are searched for the one being
/// attached before a new entry is made: plugins attach the same few
/// callbacks and scoreboards over and over, or a new closure each time.
const RECENT: usize = 4;

/// The index of `item` in `table`: the last entry's (by far the most
/// common), one of the few before it, or a new entry holding a clone.
#[inline(always)]
fn intern<T: ?Sized, const N: usize>(table: &mut SmallVec<[Arc<T>; N]>, item: &Arc<T>) -> u32 {
    match table.last() {
        Some(last) if Arc::ptr_eq(last, item) => index_u32(table.len() - 1),
        _ => intern_slow(table, item),
    }
}

/// [`intern`] for a callback, counting the action that names it.
#[inline(always)]
fn intern_use<T: ?Sized, const N: usize>(
    table: &mut SmallVec<[Arc<T>; N]>,
    uses: &mut SmallVec<[u32; N]>,
    item: &Arc<T>,
) -> u32 {
    let i = intern(table, item);
    if uses.len() < table.len() {
        uses.resize(table.len(), 0);
    }
    if let Some(n) = uses.get_mut(i as usize) {
        *n += 1;
    }
    i
}

#[inline(never)]
fn intern_slow<T: ?Sized, const N: usize>(table: &mut SmallVec<[Arc<T>; N]>, item: &Arc<T>) -> u32 {
    let recent = table.len().saturating_sub(RECENT);
    let tail = table.get(recent..).unwrap_or_default();
    if let Some(pos) = tail.iter().rposition(|t| Arc::ptr_eq(t, item)) {
        return index_u32(recent + pos);
    }
    table.push(Arc::clone(item));
    index_u32(table.len() - 1)
}

#[inline]
fn index_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

// Inlined into each attaching call: the action's variant is then known and
// the match folds away (re-planning after a reset attaches to every block
// run again).
impl PlanTables {
    #[inline(always)]
    fn action(&mut self, action: Action<'_>) -> CompiledAction {
        match action {
            Action::Callback(cb) => CompiledAction::Call {
                cb: intern_use(&mut self.callbacks, &mut self.callback_uses, cb),
            },
            Action::Inline(op) => CompiledAction::Inline {
                board: intern(&mut self.boards, op.board),
                slot: index_u32(op.slot),
                kind: op.kind,
            },
            Action::Conditional(cond, cb) => CompiledAction::Conditional {
                cb: intern_use(&mut self.callbacks, &mut self.callback_uses, cb),
                board: intern(&mut self.boards, cond.board),
                slot: index_u32(cond.slot),
                compare: cond.compare,
                value: cond.value,
            },
        }
    }

    #[inline(always)]
    fn mem_action(&mut self, filter: MemFilter, action: MemAction<'_>) -> CompiledMem {
        let kind = match action {
            MemAction::Callback(cb) => CompiledMemKind::Call {
                cb: intern_use(&mut self.mem_callbacks, &mut self.mem_callback_uses, cb),
            },
            MemAction::Inline(op) => CompiledMemKind::Inline {
                board: intern(&mut self.boards, op.board),
                slot: index_u32(op.slot),
                kind: op.kind,
            },
        };
        CompiledMem { filter, kind }
    }
}

impl PlanData {
    #[inline(always)]
    fn push_exec(&mut self, at: u32, action: Action<'_>) {
        if self.exec.len() >= MAX_PLAN_ACTIONS {
            return;
        }
        self.adds_only &= matches!(
            action,
            Action::Inline(InlineOp {
                kind: InlineKind::Add(_),
                ..
            })
        );
        self.in_order &= self.exec.last().is_none_or(|&(last, _)| last <= at);
        let compiled = self.tables.action(action);
        self.exec.push((at, compiled));
    }

    #[inline(always)]
    fn push_mem(&mut self, insn: u32, filter: MemFilter, action: MemAction<'_>) {
        if self.mem.len() >= MAX_PLAN_ACTIONS {
            return;
        }
        self.in_order &= self.mem.last().is_none_or(|&(last, _)| last <= insn);
        let compiled = self.tables.mem_action(filter, action);
        self.mem.push((insn, compiled));
    }

    /// Empties the plan for the next block. The callbacks and scoreboards
    /// this block's actions named stay in the tables when they are few
    /// (the next block mostly names the same ones: keeping them saves a
    /// reference count up and down per block); the generation holds them
    /// anyway while this block's plan names them.
    fn clear(&mut self) {
        self.clear_actions();
        let t = &mut self.tables;
        if t.callbacks.len() > RECENT || t.mem_callbacks.len() > RECENT || t.boards.len() > RECENT {
            self.forget();
            return;
        }
        unused_out(&mut t.callbacks, &mut t.callback_uses);
        unused_out(&mut t.mem_callbacks, &mut t.mem_callback_uses);
    }

    /// Drops the attached actions, not the tables.
    fn clear_actions(&mut self) {
        self.exec.clear();
        self.mem.clear();
        self.adds_only = true;
        self.in_order = true;
    }

    /// Drops every callback and scoreboard handle.
    fn forget(&mut self) {
        self.clear_actions();
        self.tables.callbacks.clear();
        self.tables.callback_uses.clear();
        self.tables.mem_callbacks.clear();
        self.tables.mem_callback_uses.clear();
        self.tables.boards.clear();
    }
}

/// Drops the callbacks no action named, and zeroes the others' use counts.
fn unused_out<T: ?Sized, const N: usize>(
    table: &mut SmallVec<[Arc<T>; N]>,
    uses: &mut SmallVec<[u32; N]>,
) {
    if uses.len() == table.len() && uses.iter().all(|&n| n != 0) {
        // The usual case after a block: every kept entry was named again.
        uses.iter_mut().for_each(|n| *n = 0);
        return;
    }
    uses.resize(table.len(), 0);
    for i in (0..table.len()).rev() {
        if uses.get(i) == Some(&0) {
            table.remove(i);
            uses.remove(i);
        }
    }
    uses.iter_mut().for_each(|n| *n = 0);
}

impl TbPlan {
    /// Number of instructions of the block.
    #[inline]
    pub fn insn_count(&self) -> usize {
        self.insns as usize
    }

    /// Runs `action` each time the block is entered.
    #[inline(always)]
    pub fn on_entry(&self, action: Action<'_>) {
        if let Ok(mut data) = self.data.try_borrow_mut() {
            data.push_exec(0, action);
        }
    }

    /// Instruction `index`, to attach actions to (`None` if out of range).
    #[inline]
    pub fn insn(&self, index: usize) -> Option<InsnPlan<'_>> {
        let index = u32::try_from(index).ok().filter(|&i| i < self.insns)?;
        Some(InsnPlan { plan: self, index })
    }

    /// Every instruction in order, to attach actions to.
    pub fn insns(&self) -> impl ExactSizeIterator<Item = InsnPlan<'_>> {
        (0..self.insns).map(move |index| InsnPlan { plan: self, index })
    }

    /// True if nothing is attached anywhere.
    pub fn is_empty(&self) -> bool {
        self.data
            .try_borrow()
            .is_ok_and(|d| d.exec.is_empty() && d.mem.is_empty())
    }

    /// What the instrumentation keeps from one translation to the next on
    /// this engine (say, a snapshot of its registrations, so that it need
    /// not fetch it for every block). The engine drops it whenever the
    /// instrumentation may have changed: on a flush, a re-instrumentation
    /// or a change of instrumentation.
    pub fn memo(&mut self) -> &mut Option<Box<dyn Any + Send>> {
        &mut self.memo
    }

    /// [`TbPlan::memo`], read-only: alongside attaching, which borrows the
    /// plan shared.
    pub fn memo_ref(&self) -> Option<&(dyn Any + Send)> {
        self.memo.as_deref()
    }

    /// The attached actions, for compiling.
    pub(crate) fn data(&mut self) -> &mut PlanData {
        self.data.get_mut()
    }

    /// Drops every handle the plan keeps between blocks (callbacks,
    /// scoreboards, the memo): the instrumentation may be changing.
    pub(crate) fn forget(&mut self) {
        self.data.get_mut().forget();
        self.memo = None;
    }

    /// Empties the plan for a block of `insns` instructions.
    pub(crate) fn reset(&mut self, insns: usize) {
        self.data.get_mut().clear_actions();
        self.insns = index_u32(insns);
    }

    /// Drops every attached action, keeping the storage (and the few
    /// callbacks and scoreboards they named) for the next block.
    pub(crate) fn clear(&mut self) {
        self.data.get_mut().clear();
    }

    /// Drops the memory actions of instructions for which `keep` is false,
    /// and puts the actions in instruction order (keeping the attachment
    /// order among those of one instruction) unless they already are.
    pub(crate) fn finish(&mut self, mut keep: impl FnMut(usize) -> bool) {
        let data = self.data.get_mut();
        // A dropped callback action gives back its use: a callback no
        // action names any more is not given a slot when the plan is
        // compiled.
        if !data.mem.is_empty() {
            let uses = &mut data.tables.mem_callback_uses;
            data.mem.retain(|&(insn, action)| {
                let kept = keep(insn as usize);
                if let (false, CompiledMemKind::Call { cb }) = (kept, action.kind)
                    && let Some(n) = uses.get_mut(cb as usize)
                {
                    *n = n.saturating_sub(1);
                }
                kept
            });
        }
        if !data.in_order {
            data.exec.sort_by_key(|&(at, _)| at);
            data.mem.sort_by_key(|&(insn, _)| insn);
            data.in_order = true;
        }
    }
}

/// One instruction of a [`TbPlan`], to attach actions to.
#[derive(Clone, Copy, Debug)]
pub struct InsnPlan<'p> {
    plan: &'p TbPlan,
    index: u32,
}

impl InsnPlan<'_> {
    /// Position of the instruction in its block.
    #[inline]
    pub fn index(&self) -> usize {
        self.index as usize
    }
    /// Runs `action` before the instruction executes, in attachment order.
    #[inline(always)]
    pub fn on_execute(&self, action: Action<'_>) {
        // Nothing else borrows the actions: attaching never calls out of
        // this module.
        if let Ok(mut data) = self.plan.data.try_borrow_mut() {
            data.push_exec(self.index + 1, action);
        }
    }
    /// Runs `action` after each of the instruction's memory accesses that
    /// `filter` selects (a faulting access runs none).
    #[inline(always)]
    pub fn on_memory(&self, filter: MemFilter, action: MemAction<'_>) {
        if let Ok(mut data) = self.plan.data.try_borrow_mut() {
            data.push_mem(self.index, filter, action);
        }
    }
}
