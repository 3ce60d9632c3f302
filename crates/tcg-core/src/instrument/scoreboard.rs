//! Scoreboards: per-vCPU `u64` counters that inline operations update
//! without a call, and their entries.
//!
//! A [`ScoreboardEntry`] (QEMU's `qemu_plugin_u64`) is one entry of every
//! vCPU's row, checked once when made, so that a callback counting through
//! it pays one bounds check; it holds the board's cells and row length
//! itself, so a callback compiled into a loop
//! ([`InlinedCallback`](crate::InlinedCallback)) finds its cell once per
//! run, from what the loop's closure holds, instead of loading through the
//! board on every call.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// The address of the first cell, the cells per row and the rows that
    /// exist: what compiled code adds to a cell through (`jit::codegen`).
    pub(crate) fn layout(&self) -> (usize, usize, usize) {
        let rows = self.cells.len().checked_div(self.slots).unwrap_or(0);
        (self.cells.as_ptr() as usize, self.slots, rows)
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
