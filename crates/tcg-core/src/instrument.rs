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
//! A flush requested from any callback ([`CallbackContext::request_flush`] or
//! a [`crate::FlushHandle`]) happens at the next safe point, after the
//! current instruction and all its memory callbacks completed; the retired
//! generation (and its callback lists) is freed only once every vCPU passed a
//! quiescent point.
//!
//! Callbacks are plain `Fn`s: a layer above that must survive a panicking
//! callback wraps it in `std::panic::catch_unwind` itself.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use crate::memory::{GuestMemory, MemFault};

/// A callback run on block entry or before an instruction executes.
pub type InsnCallback = Arc<dyn Fn(&mut CallbackContext<'_>) + Send + Sync>;

/// A callback run after each matching memory access of an instruction.
pub type MemCallback = Arc<dyn Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync>;

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
    cells: Box<[AtomicU64]>,
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
    /// Operations on vCPU indices `>= vcpus` are ignored.
    pub fn new(slots: usize, vcpus: usize) -> Self {
        let cells = (0..slots.saturating_mul(vcpus))
            .map(|_| AtomicU64::new(0))
            .collect();
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
        let vcpu = vcpu as usize;
        if slot >= self.slots || vcpu >= self.vcpus {
            return None;
        }
        // In range by the checks above: vcpu * slots + slot < cells.len().
        self.cells.get(vcpu * self.slots + slot)
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
        if let Some(c) = self.cell(vcpu, slot) {
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
    /// Adds `value` to `slot` of `vcpu`'s row, for a `slot` already known
    /// to be inside the row (a compiled tally's): the cell index is then in
    /// range exactly when `vcpu` is, so one bounds check does for both.
    #[inline(always)]
    pub(crate) fn add_in_row(&self, vcpu: u32, slot: usize, value: u64) {
        // Wraps only for rows of 2^32 entries or more, which could not be
        // allocated.
        let index = (vcpu as usize).wrapping_mul(self.slots).wrapping_add(slot);
        if let Some(c) = self.cells.get(index) {
            add_to(c, value);
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

/// What an inline operation does to its scoreboard entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InlineKind {
    /// Adds the immediate (wrapping).
    Add(u64),
    /// Stores the immediate.
    Store(u64),
}

/// An inline operation on one entry of the executing vCPU's scoreboard row.
#[derive(Clone, Debug)]
pub struct InlineOp {
    /// The scoreboard.
    pub board: Arc<Scoreboard>,
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
#[derive(Clone, Debug)]
pub struct Condition {
    /// The scoreboard holding the entry.
    pub board: Arc<Scoreboard>,
    /// Entry index within the executing vCPU's row.
    pub slot: usize,
    /// How to compare.
    pub compare: Compare,
    /// The value compared against.
    pub value: u64,
}

/// Something run on block entry or before an instruction.
#[derive(Clone)]
pub enum Action {
    /// Call a callback.
    Callback(InsnCallback),
    /// Update a scoreboard entry without a call.
    Inline(InlineOp),
    /// Call a callback only if the condition holds.
    Conditional(Condition, InsnCallback),
}

impl fmt::Debug for Action {
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

/// Something run after each matching memory access of an instruction.
#[derive(Clone)]
pub enum MemAction {
    /// Call a memory callback.
    Callback(MemCallback),
    /// Update a scoreboard entry without a call.
    Inline(InlineOp),
}

impl fmt::Debug for MemAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemAction::Callback(_) => f.write_str("Callback"),
            MemAction::Inline(op) => f.debug_tuple("Inline").field(op).finish(),
        }
    }
}

/// What the instrumentation attaches to one instruction (at most 65535
/// execute actions and 65535 memory actions; further ones are ignored).
#[derive(Clone, Debug, Default)]
pub struct InsnPlan {
    pub(crate) exec: SmallVec<[Action; 2]>,
    pub(crate) mem: SmallVec<[(MemFilter, MemAction); 1]>,
}

impl InsnPlan {
    /// Runs `action` before the instruction executes, in attachment order.
    pub fn on_execute(&mut self, action: Action) {
        self.exec.push(action);
    }
    /// Runs `action` after each of the instruction's memory accesses that
    /// `filter` selects (a faulting access runs none).
    pub fn on_memory(&mut self, filter: MemFilter, action: MemAction) {
        self.mem.push((filter, action));
    }
    /// True if nothing is attached.
    pub fn is_empty(&self) -> bool {
        self.exec.is_empty() && self.mem.is_empty()
    }
}

/// What the instrumentation attaches to one block; filled by
/// [`Instrumentation::translate`].
#[derive(Clone, Debug, Default)]
pub struct TbPlan {
    pub(crate) entry: SmallVec<[Action; 2]>,
    pub(crate) insns: Vec<InsnPlan>,
}

impl TbPlan {
    /// Runs `action` each time the block is entered.
    pub fn on_entry(&mut self, action: Action) {
        self.entry.push(action);
    }
    /// The plan of instruction `index` (`None` if out of range).
    pub fn insn(&mut self, index: usize) -> Option<&mut InsnPlan> {
        self.insns.get_mut(index)
    }
    /// Plans of all instructions, in order.
    pub fn insns_mut(&mut self) -> &mut [InsnPlan] {
        &mut self.insns
    }
    /// True if nothing is attached anywhere.
    pub fn is_empty(&self) -> bool {
        self.entry.is_empty() && self.insns.iter().all(InsnPlan::is_empty)
    }
    /// Empties the plan for a block of `insns` instructions. The
    /// instruction plans already there are emptied in place rather than
    /// dropped and made again: planning blocks one after another (after a
    /// reset, every block entered) reuses them.
    pub(crate) fn reset(&mut self, insns: usize) {
        self.entry.clear();
        self.insns.truncate(insns);
        for insn in &mut self.insns {
            insn.exec.clear();
            insn.mem.clear();
        }
        self.insns.resize_with(insns, InsnPlan::default);
    }

    /// Drops every attached action (and the callbacks and scoreboards they
    /// hold) but keeps the instruction plans for the next block.
    pub(crate) fn clear(&mut self) {
        let insns = self.insns.len();
        self.reset(insns);
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

/// Reads a register of the executing vCPU by name.
pub(crate) type RegisterReader<'a> = dyn Fn(&str) -> Option<u64> + 'a;

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
pub struct CallbackContext<'a> {
    pub(crate) vcpu: u32,
    pub(crate) pc: u64,
    pub(crate) registers: Option<&'a RegisterReader<'a>>,
    pub(crate) mem: &'a mut GuestMemory,
    pub(crate) requests: &'a mut Requests,
}

impl fmt::Debug for CallbackContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackContext")
            .field("vcpu", &self.vcpu)
            .field("pc", &self.pc)
            .finish()
    }
}

impl CallbackContext<'_> {
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
        self.registers.and_then(|read| read(name))
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

    #[test]
    fn adds_wrap_and_ignore_entries_past_the_board() {
        let board = Scoreboard::new(2, 3);
        board.add(2, 1, u64::MAX);
        board.add(2, 1, 2);
        board.add(0, 1, 4);
        // Past the row or the board: nothing changes.
        board.add(0, 2, 100);
        board.add(3, 0, 100);
        assert_eq!(board.get(2, 1), 1, "wrapped");
        assert_eq!(board.sum(1), 5);
        assert_eq!(board.sum(0), 0);
        assert_eq!(board.sum(2), 0, "no such entry");
    }
}
