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
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The most vCPU rows a board grows to: vCPU indices are reused as guest
/// threads exit (as QEMU numbers them), so this bounds the threads alive at
/// once, far past what a host runs. Operations on rows past it are ignored.
pub const MAX_SCOREBOARD_ROWS: usize = 1 << 20;

/// Grown segments: segment `k` holds `base << k` rows, so 21 of them cover
/// [`MAX_SCOREBOARD_ROWS`] rows from any first segment.
const SEGMENTS: usize = 21;

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
///
/// A board grows with the vCPUs, as QEMU's do: it is made with rows for the
/// vCPUs known then, and a vCPU past them gets a row when the vCPU starts
/// ([`Scoreboard::grow_for`]: plugin-api calls it for its plugins' boards
/// at every vcpu_init, where QEMU grows its boards), or at its first inline
/// operation the engine runs, or from [`Scoreboard::row`]. A callback's
/// [`Scoreboard::add`] or [`Scoreboard::set`] makes no row, so that a loop
/// the callback is compiled into holds no call: one for a vCPU with no row
/// is dropped, as one past a QEMU plugin's array. Rows never move once
/// made, so a row's address stays valid for the board's life: grown rows
/// live in segments of their own, each twice the size of the one before,
/// instead of a reallocated array (QEMU reallocates, and flushes every
/// block to forget the old address).
///
/// ```
/// use tcgkit_tcg_core::Scoreboard;
/// let board = Scoreboard::new(2, 1); // 2 counters for 1 vCPU
/// board.add(0, 1, 5);
/// board.grow_for(40); // a vCPU started later
/// board.add(40, 1, 2);
/// assert_eq!((board.get(40, 1), board.sum(1)), (2, 7));
/// assert!(board.vcpus() > 40);
/// ```
pub struct Scoreboard {
    slots: usize,
    /// Rows of the first segment, `cells`.
    first_rows: usize,
    /// Shared with the board's entries, which reach their cells directly.
    cells: Arc<[AtomicU64]>,
    /// Rows past the first segment, made on demand (empty for a board
    /// whose rows cannot hold an index, see [`Scoreboard::new`]).
    grown: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// Bit `k` set once grown segment `k` is made: a sum looks past the
    /// first segment only if a bit is set.
    grown_mask: AtomicU32,
}

impl fmt::Debug for Scoreboard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoreboard")
            .field("slots", &self.slots)
            .field("vcpus", &self.vcpus())
            .finish()
    }
}

/// Where a grown row is: its segment, and its first cell in it.
#[derive(Clone, Copy)]
struct GrownRow {
    segment: usize,
    start: usize,
}

impl Scoreboard {
    /// A zeroed scoreboard of `slots` entries for each of `vcpus` vCPUs; it
    /// grows a row for each vCPU past them that writes (up to
    /// [`MAX_SCOREBOARD_ROWS`]). A board of 2^32 entries per vCPU or more
    /// holds nothing (every operation on it is ignored): a cell's index then
    /// always fits in 64 bits.
    pub fn new(slots: usize, vcpus: usize) -> Self {
        let holds = u32::try_from(slots).is_ok();
        let cells = if holds {
            slots.saturating_mul(vcpus)
        } else {
            0
        };
        let cells = (0..cells).map(|_| AtomicU64::new(0)).collect();
        let grown = if holds && slots > 0 {
            (0..SEGMENTS).map(|_| OnceLock::new()).collect()
        } else {
            Box::default()
        };
        Scoreboard {
            slots,
            first_rows: vcpus,
            cells,
            grown,
            grown_mask: AtomicU32::new(0),
        }
    }
    /// Entries per vCPU.
    pub fn slots(&self) -> usize {
        self.slots
    }
    /// Number of vCPU rows it has now: those it was made with, and those
    /// grown since (a grown segment counts whole).
    pub fn vcpus(&self) -> usize {
        let base = self.first_rows.max(1);
        match self.grown_mask.load(Ordering::Acquire) {
            0 => self.first_rows,
            mask => self.first_rows + base * ((1 << (32 - mask.leading_zeros())) - 1),
        }
    }
    #[inline(always)]
    fn cell(&self, vcpu: u32, slot: usize) -> Option<&AtomicU64> {
        if slot >= self.slots {
            return None;
        }
        self.cell_in_row(vcpu, slot)
    }
    /// The cell of `slot` in `vcpu`'s row of the first segment, for a
    /// `slot` known to be inside the row: the index is then in the first
    /// segment exactly when `vcpu` is, so one bounds check does for both
    /// (measured: the `insn` plugin's callback 2 host instructions fewer).
    /// With fewer than 2^32 slots (see [`Scoreboard::new`]) the index
    /// cannot overflow 64 bits; where usize is narrower, one too large is
    /// no index. An engine write that finds no cell here calls
    /// [`Scoreboard::grown_apply`] as its last step: a tail call, which
    /// keeps the hot path free of a stack frame (a callback's write looks
    /// at rows already made, [`Scoreboard::grown_cell`], and calls nothing).
    #[inline(always)]
    fn cell_in_row(&self, vcpu: u32, slot: usize) -> Option<&AtomicU64> {
        let index = u64::from(vcpu)
            .wrapping_mul(self.slots as u64)
            .wrapping_add(slot as u64);
        self.cells.get(usize::try_from(index).ok()?)
    }
    /// Where `vcpu`'s row is past the first segment (`None` inside it or
    /// past [`MAX_SCOREBOARD_ROWS`]).
    #[inline(always)]
    fn grown_row(&self, vcpu: u32) -> Option<GrownRow> {
        let row = usize::try_from(vcpu).ok()?;
        if row >= MAX_SCOREBOARD_ROWS || self.grown.is_empty() {
            return None;
        }
        let base = self.first_rows.max(1);
        let past = row.checked_sub(self.first_rows)?;
        // Segment k starts `base * (2^k - 1)` rows past the first segment.
        let segment = (past / base + 1).ilog2() as usize;
        let first_of_segment = base * ((1 << segment) - 1);
        Some(GrownRow {
            segment,
            start: (past - first_of_segment) * self.slots,
        })
    }
    /// The cells of a grown row, made if `make` and not there yet.
    #[inline(always)]
    fn grown_cells(&self, at: GrownRow, make: bool) -> Option<&[AtomicU64]> {
        let segment = self.grown.get(at.segment)?;
        let cells = match segment.get() {
            Some(cells) => cells,
            None if make => segment.get_or_init(|| {
                let rows = self.first_rows.max(1) << at.segment;
                let cells = (0..rows * self.slots).map(|_| AtomicU64::new(0)).collect();
                self.grown_mask.fetch_or(1 << at.segment, Ordering::Release);
                cells
            }),
            None => return None,
        };
        cells.get(at.start..at.start + self.slots)
    }
    /// Makes `vcpu`'s row if the board has none yet (nothing past
    /// [`MAX_SCOREBOARD_ROWS`]): for a vCPU that starts after the board
    /// was made, before its callbacks write to the board.
    pub fn grow_for(&self, vcpu: u32) {
        self.grown_cell(vcpu, 0, true);
    }
    /// `slot` of `vcpu`'s row past the first segment (`None` past the
    /// row), the row made if `make` and missing. Without `make`: no call
    /// and no allocation, for the hot paths of callbacks.
    #[inline(always)]
    fn grown_cell(&self, vcpu: u32, slot: usize, make: bool) -> Option<&AtomicU64> {
        self.grown_cells(self.grown_row(vcpu)?, make)?.get(slot)
    }
    /// `op` on `slot` of `vcpu`'s row past the first segment, the row
    /// made if missing (nothing for a slot past the row): the cold path of
    /// every write.
    #[cold]
    #[inline(never)]
    fn grown_apply(&self, vcpu: u32, slot: usize, op: InlineKind) {
        if let Some(c) = self.grown_cell(vcpu, slot, true) {
            apply_to(c, op);
        }
    }
    /// Value of `slot` of a grown row, without making it (0 if missing).
    #[inline(always)]
    fn grown_value(&self, vcpu: u32, slot: usize) -> u64 {
        self.grown_cell(vcpu, slot, false)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
    /// `vcpu`'s row of cells, made if the board had none for it yet
    /// (`None` past [`MAX_SCOREBOARD_ROWS`]): what a C plugin's
    /// `qemu_plugin_scoreboard_find` points into, its element laid over the
    /// row's `slots` 8-byte cells. The row never moves.
    pub fn row(&self, vcpu: u32) -> Option<&[AtomicU64]> {
        let start = usize::try_from(vcpu).ok()?.checked_mul(self.slots)?;
        match self.cells.get(start..start.checked_add(self.slots)?) {
            Some(row) => Some(row),
            None => self.grown_cells(self.grown_row(vcpu)?, true),
        }
    }
    /// Value of `slot` for `vcpu` (0 if out of range).
    // Inlined across crates: plugin callbacks call these per instruction.
    #[inline]
    pub fn get(&self, vcpu: u32, slot: usize) -> u64 {
        if slot >= self.slots {
            return 0;
        }
        let index = u64::from(vcpu)
            .wrapping_mul(self.slots as u64)
            .wrapping_add(slot as u64);
        match usize::try_from(index).ok().and_then(|i| self.cells.get(i)) {
            Some(cell) => cell.load(Ordering::Relaxed),
            None => self.grown_value(vcpu, slot),
        }
    }
    /// Sets `slot` of `vcpu` to `value` (nothing for a vCPU with no row).
    #[inline]
    pub fn set(&self, vcpu: u32, slot: usize, value: u64) {
        if let Some(c) = self
            .cell(vcpu, slot)
            .or_else(|| self.grown_cell(vcpu, slot, false))
        {
            c.store(value, Ordering::Relaxed);
        }
    }
    /// Adds `value` (wrapping) to `slot` of `vcpu` (nothing if out of
    /// range, or for a vCPU with no row: see [`Scoreboard::grow_for`]):
    /// QEMU's `qemu_plugin_u64_add`, for callbacks counting per vCPU.
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
        if let Some(c) = cell.or_else(|| self.grown_cell(vcpu, slot, false)) {
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
        if self.grown_mask.load(Ordering::Relaxed) != 0 {
            sum = sum.wrapping_add(self.grown_sum(slot));
        }
        sum
    }
    /// Sum of `slot` over the grown rows.
    #[cold]
    #[inline(never)]
    fn grown_sum(&self, slot: usize) -> u64 {
        let column = |cells: &[AtomicU64]| {
            cells
                .iter()
                .skip(slot)
                .step_by(self.slots)
                .fold(0u64, |sum, c| sum.wrapping_add(c.load(Ordering::Relaxed)))
        };
        self.grown
            .iter()
            .filter_map(OnceLock::get)
            .fold(0u64, |sum, cells| sum.wrapping_add(column(cells)))
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
        match self.cell_in_row(vcpu, slot) {
            Some(c) => add_to(c, value),
            None => self.grown_apply(vcpu, slot, InlineKind::Add(value)),
        }
    }
    /// [`Scoreboard::apply`] for a `slot` already known to be inside the
    /// row (see [`Scoreboard::add_in_row`]).
    #[inline(always)]
    pub(crate) fn apply_in_row(&self, vcpu: u32, slot: usize, op: InlineKind) {
        match self.cell_in_row(vcpu, slot) {
            Some(c) => apply_to(c, op),
            None => self.grown_apply(vcpu, slot, op),
        }
    }
    /// The address of the first cell, the cells per row and the rows of the
    /// first segment: what compiled code adds to a cell through
    /// (`jit::codegen`); it calls [`Scoreboard::apply`] for a vCPU past them.
    pub(crate) fn layout(&self) -> (usize, usize, usize) {
        let rows = self.cells.len().checked_div(self.slots).unwrap_or(0);
        (self.cells.as_ptr() as usize, self.slots, rows)
    }
    #[inline(always)]
    pub(crate) fn apply(&self, vcpu: u32, slot: usize, op: InlineKind) {
        match self.cell(vcpu, slot) {
            Some(c) => apply_to(c, op),
            None => self.grown_apply(vcpu, slot, op),
        }
    }
}

/// `op` on a scoreboard cell.
#[inline(always)]
fn apply_to(cell: &AtomicU64, op: InlineKind) {
    match op {
        InlineKind::Add(imm) => add_to(cell, imm),
        InlineKind::Store(imm) => cell.store(imm, Ordering::Relaxed),
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
/// [`Scoreboard::entry`]: QEMU's `qemu_plugin_u64`. A write for a vCPU
/// with no row is dropped, as the board's own are (see
/// [`Scoreboard::grow_for`]).
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
        if let Some(c) = self
            .cell(vcpu)
            .or_else(|| self.board.grown_cell(vcpu, self.slot, false))
        {
            add_to(c, value);
        }
    }
    /// `vcpu`'s value (0 for a vCPU with no row yet).
    #[inline]
    pub fn get(&self, vcpu: u32) -> u64 {
        let index = u64::from(vcpu)
            .wrapping_mul(self.stride)
            .wrapping_add(self.slot as u64);
        match usize::try_from(index).ok().and_then(|i| self.cells.get(i)) {
            Some(cell) => cell.load(Ordering::Relaxed),
            None => self.board.grown_value(vcpu, self.slot),
        }
    }
    /// Sets `vcpu`'s value.
    #[inline]
    pub fn set(&self, vcpu: u32, value: u64) {
        if let Some(c) = self
            .cell(vcpu)
            .or_else(|| self.board.grown_cell(vcpu, self.slot, false))
        {
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
        assert_eq!(board.vcpus(), 2, "no row grown by reads");
    }

    #[test]
    fn boards_grow_a_row_for_each_vcpu_that_writes() {
        let board = Scoreboard::new(3, 2);
        assert_eq!(board.get(2, 0), 0, "a read makes no row");
        assert_eq!(board.vcpus(), 2);
        // Segments of 2, 4, 8, ... rows follow the first two.
        board.add(2, 1, 5); // no row yet: dropped
        assert_eq!((board.get(2, 1), board.vcpus()), (0, 2));
        board.grow_for(2); // segment 0: rows 2 and 3
        board.add(2, 1, 5);
        assert_eq!(board.vcpus(), 4);
        board.grow_for(9); // segment 2: rows 8 to 15 (segment 1 absent)
        board.set(9, 2, 7);
        assert_eq!(board.vcpus(), 16);
        board.apply(5, 0, InlineKind::Add(3)); // segment 1: rows 4 to 7
        board.add_in_row(15, 0, 1);
        board.apply_in_row(16, 0, InlineKind::Store(4)); // segment 3
        assert_eq!(board.vcpus(), 32);
        let values = [(2, 1, 5), (9, 2, 7), (5, 0, 3), (15, 0, 1), (16, 0, 4)];
        for (vcpu, slot, value) in values {
            assert_eq!(board.get(vcpu, slot), value, "vcpu {vcpu} slot {slot}");
        }
        // No row shares a cell with another's.
        let written: usize = (0..32)
            .map(|v| (0..3).filter(|&s| board.get(v, s) != 0).count())
            .sum();
        assert_eq!(written, values.len());
        assert_eq!((board.sum(0), board.sum(1), board.sum(2)), (8, 5, 7));
        // A grown row never moves: a C plugin's pointer into it stays good.
        let before = board.row(9).expect("grown").as_ptr();
        for vcpu in 16..200 {
            board.grow_for(vcpu);
            board.add(vcpu, 0, 1);
        }
        assert_eq!(board.row(9).expect("grown").as_ptr(), before);
        assert_eq!(board.sum(0), 3 + 1 + 4 + 184);
    }

    #[test]
    fn a_board_made_for_no_vcpus_grows_from_vcpu_0() {
        let board = Scoreboard::new(2, 0);
        assert_eq!((board.get(0, 0), board.sum(0), board.vcpus()), (0, 0, 0));
        board.apply(0, 1, InlineKind::Add(4));
        board.apply(0, 2, InlineKind::Add(100)); // past the row: nothing
        board.apply_in_row(3, 0, InlineKind::Add(2));
        assert_eq!((board.get(0, 1), board.get(3, 0)), (4, 2));
        assert_eq!((board.sum(0), board.sum(1), board.sum(2)), (2, 4, 0));
        assert_eq!(board.vcpus(), 7, "segments of 1, 2 and 4 rows");
    }

    #[test]
    fn rows_stop_at_the_limit() {
        let board = Scoreboard::new(1, 1);
        let last = (MAX_SCOREBOARD_ROWS - 1) as u32;
        board.grow_for(last + 1);
        board.apply(u32::MAX, 0, InlineKind::Add(1));
        assert!(board.row(last + 1).is_none());
        assert_eq!(board.vcpus(), 1, "nothing grown past the limit");
        board.apply(last, 0, InlineKind::Add(9));
        assert_eq!((board.get(last, 0), board.sum(0)), (9, 9));
        assert_eq!(board.vcpus(), MAX_SCOREBOARD_ROWS);
    }

    #[test]
    fn entries_are_checked_once_and_grow_the_board() {
        let board = Arc::new(Scoreboard::new(2, 3));
        assert!(board.entry(2).is_none(), "past the row");
        let entry = board.entry(1).expect("inside the row");
        entry.add(0, 5);
        entry.add(2, 7);
        entry.add(3, 100); // no row yet: dropped
        assert_eq!(entry.get(3), 0);
        board.grow_for(3);
        entry.add(3, 100); // a row grown, not row 0 of a next board
        entry.set(1, 1);
        assert_eq!((entry.get(0), entry.get(1), entry.get(2)), (5, 1, 7));
        assert_eq!((entry.get(3), entry.get(4)), (100, 0));
        assert_eq!(entry.sum(), 113);
        assert_eq!(board.sum(0), 0, "slot 0 untouched");
        assert_eq!(entry.slot(), 1);
        assert!(Arc::ptr_eq(entry.board(), &board));
    }

    #[test]
    fn grown_rows_are_made_once_when_threads_race_for_them() {
        let board = Arc::new(Scoreboard::new(1, 1));
        std::thread::scope(|s| {
            for vcpu in 1..9u32 {
                let board = &board;
                s.spawn(move || {
                    board.grow_for(vcpu);
                    for _ in 0..1000 {
                        board.add(vcpu, 0, 1);
                    }
                });
            }
        });
        assert_eq!(board.sum(0), 8000);
        assert!((1..9).all(|v| board.get(v, 0) == 1000));
    }

    #[test]
    fn row_adds_ignore_slots_past_the_row() {
        let board = Scoreboard::new(3, 2);
        board.add_in_row(1, 2, 5);
        board.add_in_row(1, 2, 2);
        board.add_in_row(0, 0, 1);
        board.add_in_row(u32::MAX, 2, 100); // past the limit
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
        board.add(7, 5, 1);
        board.apply_in_row(u32::MAX, 1, InlineKind::Store(3));
        assert_eq!(
            (board.slots(), board.get(0, 5), board.sum(5), board.vcpus()),
            (1 << 32, 0, 0, 2)
        );
    }

    #[test]
    fn adds_wrap_and_ignore_slots_past_the_row() {
        let board = Scoreboard::new(2, 3);
        board.add(2, 1, u64::MAX);
        board.add(2, 1, 2);
        board.add(0, 1, 4);
        // Past the row: nothing changes.
        board.add(0, 2, 100);
        board.add(1, 2, 100);
        assert_eq!(board.get(2, 1), 1, "wrapped");
        assert_eq!(board.sum(1), 5);
        assert_eq!(board.sum(0), 0);
        assert_eq!(board.sum(2), 0, "no such entry");
    }
}
