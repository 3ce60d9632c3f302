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

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use crate::cache::{CompiledAction, CompiledMem, CompiledMemKind};
use crate::memory::{GuestMemory, MemFault};

/// A callback run on block entry or before an instruction executes: any
/// `Fn(&mut CallbackContext)` closure, or an [`crate::InlinedCallback`].
pub type InsnCallback = Arc<dyn CallbackFn>;

/// What an [`InsnCallback`] is: something called with the context.
/// Every `Fn(&mut CallbackContext) + Send + Sync` is one.
pub trait CallbackFn: Send + Sync {
    /// Runs the callback.
    fn call(&self, ctx: &mut CallbackContext<'_>);
    /// The engine's loop with this callback compiled in, for blocks that
    /// call it before every instruction: an [`crate::InlinedCallback`]
    /// offers one, which the engine takes if it was built for its
    /// frontend. `None` (the default): the loop calls [`CallbackFn::call`].
    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        None
    }
}

impl<T> CallbackFn for T
where
    T: Fn(&mut CallbackContext<'_>) + Send + Sync,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>) {
        self(ctx)
    }
}

/// A callback run after each matching memory access of an instruction:
/// any `Fn(&mut CallbackContext, &MemAccessInfo)` closure, or an
/// [`crate::InlinedMemCallback`].
pub type MemCallback = Arc<dyn MemCallbackFn>;

/// What a [`MemCallback`] is: something called with the context and the
/// access. Every `Fn(&mut CallbackContext, &MemAccessInfo) + Send + Sync`
/// is one.
pub trait MemCallbackFn: Send + Sync {
    /// Runs the callback.
    fn call(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo);
    /// The engine's loop with this callback compiled in, for blocks whose
    /// every access runs it and nothing else: an
    /// [`crate::InlinedMemCallback`] offers one, which the engine takes if
    /// it was built for its frontend. `None` (the default): the loop calls
    /// [`MemCallbackFn::call`].
    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        None
    }
}

impl<T> MemCallbackFn for T
where
    T: Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        self(ctx, info)
    }
}

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

/// Per-vCPU `u64` counters owned by an instrumentation, updated by inline
/// operations without a call.
///
/// Each vCPU writes only its own row, so updates are plain relaxed
/// load/store pairs (no locked read-modify-write); readers on other threads
/// see each value whole. Everything on the vCPU itself (callbacks, the
/// instrumentation at translation, the embedder once [`crate::Engine::run`]
/// returns) sees every add made before it; inline adds of blocks without
/// callbacks may reach readers on other threads in batches, at most 4096
/// instructions late.
pub struct Scoreboard {
    slots: usize,
    vcpus: usize,
    /// Shared with the board's entries, which reach their cells directly.
    cells: Arc<[AtomicU64]>,
}

impl fmt::Debug for Scoreboard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoreboard")
            .field("slots", &self.slots)
            .field("vcpus", &self.vcpus)
            .finish()
    }
}

impl Scoreboard {
    /// A zeroed scoreboard of `slots` entries for each of `vcpus` vCPUs.
    /// Operations on vCPU indices `>= vcpus` are ignored. A board of 2^32
    /// entries per vCPU or more holds nothing (every operation on it is
    /// ignored): a cell's index then always fits in 64 bits.
    pub fn new(slots: usize, vcpus: usize) -> Self {
        let cells = if u32::try_from(slots).is_ok() {
            slots.saturating_mul(vcpus)
        } else {
            0
        };
        let cells = (0..cells).map(|_| AtomicU64::new(0)).collect();
        Scoreboard {
            slots,
            vcpus,
            cells,
        }
    }
    /// Entries per vCPU.
    pub fn slots(&self) -> usize {
        self.slots
    }
    /// Number of vCPU rows.
    pub fn vcpus(&self) -> usize {
        self.vcpus
    }
    #[inline(always)]
    fn cell(&self, vcpu: u32, slot: usize) -> Option<&AtomicU64> {
        if slot >= self.slots {
            return None;
        }
        self.cell_in_row(vcpu, slot)
    }
    /// The cell of `slot` in `vcpu`'s row, for a `slot` known to be inside
    /// the row: the index is then in range exactly when `vcpu` is, so one
    /// bounds check does for both (measured: the `insn` plugin's callback 2
    /// host instructions fewer). With fewer than 2^32 slots (see
    /// [`Scoreboard::new`]) the index cannot overflow 64 bits; where usize
    /// is narrower, one too large is no index.
    #[inline(always)]
    fn cell_in_row(&self, vcpu: u32, slot: usize) -> Option<&AtomicU64> {
        let index = u64::from(vcpu)
            .wrapping_mul(self.slots as u64)
            .wrapping_add(slot as u64);
        self.cells.get(usize::try_from(index).ok()?)
    }
    /// `vcpu`'s row of cells (`None` past the board): what a C plugin's
    /// `qemu_plugin_scoreboard_find` points into, its element laid over the
    /// row's `slots` 8-byte cells.
    pub fn row(&self, vcpu: u32) -> Option<&[AtomicU64]> {
        let start = usize::try_from(vcpu).ok()?.checked_mul(self.slots)?;
        self.cells.get(start..start.checked_add(self.slots)?)
    }
    /// Value of `slot` for `vcpu` (0 if out of range).
    // Inlined across crates: plugin callbacks call these per instruction.
    #[inline]
    pub fn get(&self, vcpu: u32, slot: usize) -> u64 {
        self.cell(vcpu, slot)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
    /// Sets `slot` of `vcpu` to `value`.
    #[inline]
    pub fn set(&self, vcpu: u32, slot: usize, value: u64) {
        if let Some(c) = self.cell(vcpu, slot) {
            c.store(value, Ordering::Relaxed);
        }
    }
    /// Adds `value` (wrapping) to `slot` of `vcpu` (nothing if out of
    /// range): QEMU's `qemu_plugin_u64_add`, for callbacks counting per vCPU.
    /// Only `vcpu`'s own thread should add to its row: the load and the
    /// store are two steps.
    #[inline]
    pub fn add(&self, vcpu: u32, slot: usize, value: u64) {
        // vCPU 0's cell sits at a fixed offset from the board's start.
        // Reached by reference rather than through an index computed from
        // the vCPU, a callback's add on every instruction took less time,
        // though more instructions (the `insn` plugin: docs/benchmarks.md,
        // eighth session). A reference, because LLVM merges two indexed
        // paths back into one.
        let cell = if vcpu == 0 {
            self.cells.get(slot).filter(|_| slot < self.slots)
        } else {
            self.cell(vcpu, slot)
        };
        if let Some(c) = cell {
            add_to(c, value);
        }
    }
    /// Sum of `slot` over all vCPUs (wrapping).
    #[inline]
    pub fn sum(&self, slot: usize) -> u64 {
        if slot >= self.slots {
            return 0;
        }
        // Read by plugins on hot paths (a block callback comparing a count):
        // one pass down the column, no per-row bounds check.
        let mut sum = 0u64;
        let mut index = slot;
        while let Some(cell) = self.cells.get(index) {
            sum = sum.wrapping_add(cell.load(Ordering::Relaxed));
            index += self.slots;
        }
        sum
    }
    /// Entry `slot` of every vCPU's row, checked once here (`None` past the
    /// row) so that each operation through it costs one bounds check: for
    /// callbacks counting per vCPU, as QEMU's `qemu_plugin_u64`.
    pub fn entry(self: &Arc<Self>, slot: usize) -> Option<ScoreboardEntry> {
        (slot < self.slots).then(|| ScoreboardEntry {
            board: Arc::clone(self),
            cells: Arc::clone(&self.cells),
            stride: self.slots as u64,
            slot,
        })
    }
    /// Adds `value` to `slot` of `vcpu`'s row, for a `slot` already known
    /// to be inside the row (a compiled tally's): the cell index is then in
    /// range exactly when `vcpu` is, so one bounds check does for both.
    #[inline(always)]
    pub(crate) fn add_in_row(&self, vcpu: u32, slot: usize, value: u64) {
        if let Some(c) = self.cell_in_row(vcpu, slot) {
            add_to(c, value);
        }
    }
    /// [`Scoreboard::apply`] for a `slot` already known to be inside the
    /// row (see [`Scoreboard::add_in_row`]).
    #[inline(always)]
    pub(crate) fn apply_in_row(&self, vcpu: u32, slot: usize, op: InlineKind) {
        if let Some(c) = self.cell_in_row(vcpu, slot) {
            match op {
                InlineKind::Add(imm) => add_to(c, imm),
                InlineKind::Store(imm) => c.store(imm, Ordering::Relaxed),
            }
        }
    }
    #[inline(always)]
    pub(crate) fn apply(&self, vcpu: u32, slot: usize, op: InlineKind) {
        if let Some(c) = self.cell(vcpu, slot) {
            match op {
                InlineKind::Add(imm) => add_to(c, imm),
                InlineKind::Store(imm) => c.store(imm, Ordering::Relaxed),
            }
        }
    }
}

/// Adds `value` (wrapping) to a scoreboard cell: a relaxed load and store,
/// not a locked read-modify-write, since only the row's vCPU writes it.
#[inline(always)]
fn add_to(cell: &AtomicU64, value: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(value),
        Ordering::Relaxed,
    );
}

/// One entry of every vCPU's row of a [`Scoreboard`], made by
/// [`Scoreboard::entry`]: QEMU's `qemu_plugin_u64`. Operations on vCPU
/// indices past the board are ignored, as the board's own are.
#[derive(Clone, Debug)]
pub struct ScoreboardEntry {
    board: Arc<Scoreboard>,
    /// The board's cells and row length, held here too: a callback that
    /// captures the entry finds its cell from what it holds, without a
    /// load through the board (in a loop compiled around the callback,
    /// [`crate::InlinedCallback`], the cell's address is then computed
    /// once per run rather than once per call).
    cells: Arc<[AtomicU64]>,
    stride: u64,
    /// Inside the row: checked by [`Scoreboard::entry`].
    slot: usize,
}

impl ScoreboardEntry {
    /// `vcpu`'s cell. The slot is inside the row, so the index is in range
    /// exactly when `vcpu` is (see [`Scoreboard::new`] for why it cannot
    /// overflow).
    #[inline(always)]
    fn cell(&self, vcpu: u32) -> Option<&AtomicU64> {
        let index = u64::from(vcpu)
            .wrapping_mul(self.stride)
            .wrapping_add(self.slot as u64);
        self.cells.get(usize::try_from(index).ok()?)
    }
    /// Adds `value` (wrapping) to `vcpu`'s value; only `vcpu`'s own thread
    /// should, as for [`Scoreboard::add`].
    #[inline]
    pub fn add(&self, vcpu: u32, value: u64) {
        if let Some(c) = self.cell(vcpu) {
            add_to(c, value);
        }
    }
    /// `vcpu`'s value (0 past the board).
    #[inline]
    pub fn get(&self, vcpu: u32) -> u64 {
        self.cell(vcpu).map_or(0, |c| c.load(Ordering::Relaxed))
    }
    /// Sets `vcpu`'s value.
    #[inline]
    pub fn set(&self, vcpu: u32, value: u64) {
        if let Some(c) = self.cell(vcpu) {
            c.store(value, Ordering::Relaxed);
        }
    }
    /// Sum over all vCPUs (wrapping).
    #[inline]
    pub fn sum(&self) -> u64 {
        self.board.sum(self.slot)
    }
    /// The board it belongs to.
    pub fn board(&self) -> &Arc<Scoreboard> {
        &self.board
    }
    /// Its index in each vCPU's row.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

/// What an inline operation does to its scoreboard entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InlineKind {
    /// Adds the immediate (wrapping).
    Add(u64),
    /// Stores the immediate.
    Store(u64),
}

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
#[derive(Debug)]
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
#[derive(Default)]
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

/// A memory access as memory callbacks see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAccessInfo {
    /// Guest address of the access.
    pub addr: u64,
    /// Size in bytes (1, 2, 4 or 8).
    pub size: u8,
    /// True if a load sign-extended its value.
    pub sign_extended: bool,
    /// True for a store.
    pub is_store: bool,
    /// The value loaded (after extension) or stored (low `size` bytes).
    pub value: u64,
}

/// The executing vCPU's registers, read by name: what
/// [`CallbackContext::read_register`] reads through. The engine implements
/// it over its frontend's register file; a callback only ever sees
/// `dyn Registers`.
pub trait Registers {
    /// The value of register `name`, or `None` for a name it does not know.
    fn read(&self, name: &str) -> Option<u64>;
}

/// No registers to read: memory callbacks run while the instruction is
/// updating the register file.
pub(crate) struct NoRegisters;

impl Registers for NoRegisters {
    #[inline]
    fn read(&self, _name: &str) -> Option<u64> {
        None
    }
}

/// Requests made by callbacks, honoured at the next safe point.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Requests {
    /// One bit per request: the loop tests them all with one compare after
    /// each instruction whose callbacks could have made one.
    bits: u8,
}

impl Requests {
    const FLUSH: u8 = 1;
    const REINSTRUMENT: u8 = 2;
    const EXIT: u8 = 4;

    /// Adds `other`'s requests to these. Only when there are any: an
    /// unconditional OR into an accumulator the loop keeps in memory
    /// chained every callback to the previous one through a load and a
    /// store (LLVM turns a plain `if` around it into that OR, hence the
    /// cold function).
    #[inline(always)]
    pub(crate) fn merge(&mut self, other: Requests) {
        if other.any() {
            self.add(other);
        }
    }

    #[cold]
    #[inline(never)]
    fn add(&mut self, other: Requests) {
        self.bits |= other.bits;
    }

    #[inline(always)]
    pub(crate) fn any(self) -> bool {
        self.bits != 0
    }
    pub(crate) fn flush(self) -> bool {
        self.bits & Self::FLUSH != 0
    }
    pub(crate) fn reinstrument(self) -> bool {
        self.bits & Self::REINSTRUMENT != 0
    }
    pub(crate) fn exit(self) -> bool {
        self.bits & Self::EXIT != 0
    }
}

/// What a callback may see and do. Valid only for the duration of the call.
///
/// Callbacks receive it with its default `R`, `dyn Registers`. For a
/// block whose every instruction runs the same one callback, the engine
/// keeps one context for the whole block, holding the vCPU's register file
/// by its concrete type (the block's instructions execute through it), and
/// hands the callback that context unsized: no context is built per call.
pub struct CallbackContext<'a, R: ?Sized = dyn Registers + 'a> {
    pub(crate) vcpu: u32,
    pub(crate) pc: u64,
    pub(crate) mem: &'a mut GuestMemory,
    /// Held by value: the loop reads it straight from its own frame after
    /// each call, with no pointer to load first.
    pub(crate) requests: Requests,
    /// Last: the field the context is unsized over.
    pub(crate) registers: R,
}

impl<R: ?Sized> fmt::Debug for CallbackContext<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackContext")
            .field("vcpu", &self.vcpu)
            .field("pc", &self.pc)
            .finish()
    }
}

impl<'a> CallbackContext<'a, NoRegisters> {
    /// A memory callback's context on `vcpu` (no registers), its pc set
    /// as the instructions go.
    #[inline(always)]
    pub(crate) fn new(vcpu: u32, mem: &'a mut GuestMemory) -> Self {
        CallbackContext {
            vcpu,
            pc: 0,
            mem,
            requests: Requests::default(),
            registers: NoRegisters,
        }
    }
}

impl<R: Registers + ?Sized> CallbackContext<'_, R> {
    /// Index of the executing vCPU.
    pub fn vcpu(&self) -> u32 {
        self.vcpu
    }
    /// Address of the instruction (for block-entry callbacks: of the block).
    pub fn pc(&self) -> u64 {
        self.pc
    }
    /// Reads a guest register by name. Available in block-entry and
    /// instruction callbacks (where the pc reads as the instruction's
    /// address); `None` in memory callbacks, which run while the instruction
    /// is updating the register file, and for unknown names.
    pub fn read_register(&self, name: &str) -> Option<u64> {
        let value = self.registers.read(name)?;
        // The loop keeps the pc outside the register file while it runs a
        // block: the context's is the executing instruction's.
        Some(if name == "pc" { self.pc } else { value })
    }
    /// Reads guest memory (permissions are checked as for a guest load).
    pub fn read_memory(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.mem.read(addr, buf)
    }
    /// Asks for a flush of all translated blocks. It happens at the next
    /// safe point: after the current instruction and its memory callbacks.
    pub fn request_flush(&mut self) {
        self.requests.bits |= Requests::FLUSH;
    }
    /// Asks for a re-instrumentation of all translated blocks
    /// ([`crate::Engine::reinstrument`]), at the same safe point as
    /// [`CallbackContext::request_flush`].
    pub fn request_reinstrument(&mut self) {
        self.requests.bits |= Requests::REINSTRUMENT;
    }
    /// Asks the vCPU to leave [`crate::Engine::run`] with
    /// [`crate::CpuExit::ExitRequested`] after the current instruction.
    pub fn request_exit(&mut self) {
        self.requests.bits |= Requests::EXIT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_each_vcpus_slots() {
        let board = Scoreboard::new(3, 2);
        board.set(1, 2, 9);
        let row = board.row(1).expect("row 1");
        assert_eq!(row.len(), 3);
        assert_eq!(row[2].load(Ordering::Relaxed), 9);
        assert_eq!(board.row(0).map(<[AtomicU64]>::len), Some(3));
        assert!(board.row(2).is_none(), "past the board");
    }

    #[test]
    fn entries_are_checked_once_and_ignore_vcpus_past_the_board() {
        let board = Arc::new(Scoreboard::new(2, 3));
        assert!(board.entry(2).is_none(), "past the row");
        let entry = board.entry(1).expect("inside the row");
        entry.add(0, 5);
        entry.add(2, 7);
        entry.add(3, 100); // no row 3: not even row 0 of a next board
        entry.set(1, 1);
        assert_eq!((entry.get(0), entry.get(1), entry.get(2)), (5, 1, 7));
        assert_eq!(entry.get(3), 0);
        assert_eq!(entry.sum(), 13);
        assert_eq!(board.sum(0), 0, "slot 0 untouched");
        assert_eq!(entry.slot(), 1);
        assert!(Arc::ptr_eq(entry.board(), &board));
    }

    #[test]
    fn row_adds_ignore_vcpus_past_the_board() {
        let board = Scoreboard::new(3, 2);
        board.add_in_row(1, 2, 5);
        board.add_in_row(1, 2, 2);
        board.add_in_row(0, 0, 1);
        // vCPU 2 has no row: nothing changes (not even vCPU 0's next row).
        board.add_in_row(2, 0, 100);
        board.add_in_row(u32::MAX, 2, 100);
        assert_eq!(board.get(1, 2), 7);
        assert_eq!(board.get(0, 0), 1);
        assert_eq!((0..3).map(|s| board.sum(s)).sum::<u64>(), 8);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_board_of_2_pow_32_slots_per_vcpu_holds_nothing() {
        let board = Scoreboard::new(1 << 32, 2);
        board.add(0, 5, 1);
        board.add(1, (1 << 32) - 1, 1);
        board.apply_in_row(u32::MAX, 1, InlineKind::Store(3));
        assert_eq!(
            (board.slots(), board.get(0, 5), board.sum(5)),
            (1 << 32, 0, 0)
        );
    }

    #[test]
    fn adds_wrap_and_ignore_entries_past_the_board() {
        let board = Scoreboard::new(2, 3);
        board.add(2, 1, u64::MAX);
        board.add(2, 1, 2);
        board.add(0, 1, 4);
        // Past the row or the board: nothing changes.
        board.add(0, 2, 100);
        board.add(3, 0, 100);
        board.add(u32::MAX, 1, 100);
        assert_eq!(board.get(2, 1), 1, "wrapped");
        assert_eq!(board.sum(1), 5);
        assert_eq!(board.sum(0), 0);
        assert_eq!(board.sum(2), 0, "no such entry");
        // vCPU 0 (which takes a path of its own) on a board with no rows.
        let empty = Scoreboard::new(2, 0);
        empty.add(0, 0, 1);
        assert_eq!((empty.get(0, 0), empty.sum(0)), (0, 0));
    }
}
