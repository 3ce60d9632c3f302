//! One generation of the block cache: every translated block, its
//! pre-decoded ops and its compiled instrumentation, in flat typed arenas.
//!
//! All storage of a generation is a handful of vectors and hash tables of
//! `Copy` data (plus one vector of callback handles), so a generation is
//! retired by moving it and freed by dropping a few allocations, however many
//! blocks it holds. Blocks are addressed by `u32` index, which the per-vCPU
//! jump caches store together with the generation id.

use std::sync::{Arc, LazyLock};

use hashbrown::HashMap;

use crate::instrument::{
    CallbackContext, Compare, InlineKind, InsnCallback, MAX_PLAN_ACTIONS, MemAccessInfo,
    MemCallback, MemFilter, PlanData, PlanTables, Scoreboard,
};

/// Marks "no entry" in `u32` links.
pub(crate) const NONE: u32 = u32::MAX;

/// A pre-decoded op, the offset of its instruction from the block start and
/// its length. The offset lets the plain loop compute an instruction's pc
/// only where an op uses it, instead of carrying it from op to op.
#[derive(Clone, Copy)]
pub(crate) struct TbOp<Op> {
    pub(crate) op: Op,
    pub(crate) offset: u32,
    pub(crate) len: u8,
    /// The frontend's [`crate::Decoded::accesses_memory`].
    pub(crate) accesses_memory: bool,
}

/// Header of one translation block. One cache line each: the loop reads the
/// header of every block it enters and the chain slots of every block it
/// leaves.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
pub(crate) struct TbHeader {
    pub(crate) pc: u64,
    /// Direct chaining: the guest pcs this block was last seen to continue
    /// at (slot 0 for the fall-through, 1 for anything else) and the blocks
    /// found there. Valid only within this generation and while the target
    /// is alive, which [`Generation::chained`] checks.
    chain_pc: [u64; 2],
    chain_tb: [u32; 2],
    pub(crate) flags: u32,
    /// Guest code size in bytes.
    pub(crate) size: u32,
    /// First op in `Generation::ops` (and raw encoding in `raws`).
    pub(crate) ops_start: u32,
    /// One past the last op: `ops_start..ops_end` is the block's op range.
    pub(crate) ops_end: u32,
    /// How the loop runs the block; says what `instr_start..+instr_len`
    /// indexes.
    pub(crate) mode: ExecMode,
    /// For [`ExecMode::Steps`] and [`ExecMode::StepsWithMemory`]: the
    /// block's hooks in `Generation::hooks` (the block-entry hook, then one
    /// per instruction); for [`ExecMode::Tally`] and [`ExecMode::Count`]:
    /// the block's tallies in `Generation::tallies`.
    pub(crate) instr_start: u32,
    pub(crate) instr_len: u32,
    /// The generation's `plan_version` the block's instrumentation was
    /// planned under; an older one means it must be planned again before
    /// the block next runs.
    pub(crate) plan_version: u32,
    /// Set by range invalidation; the block is unreachable afterwards.
    pub(crate) dead: bool,
}

impl TbHeader {
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        let tb_end = self.pc.saturating_add(u64::from(self.size));
        self.pc < end && start < tb_end
    }
}

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
    fn runs_steps(self) -> bool {
        self != ExecMode::Plain && !self.tallies()
    }
    /// Runs the plain loop with tallies (its plan is tallies).
    fn tallies(self) -> bool {
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

/// Stands in for a callback no plan names any more, until its slot is
/// reused: never called (no action names the slot).
static NOOP_CALLBACK: LazyLock<InsnCallback> =
    LazyLock::new(|| Arc::new(|_: &mut CallbackContext<'_>| {}));
static NOOP_MEM_CALLBACK: LazyLock<MemCallback> =
    LazyLock::new(|| Arc::new(|_: &mut CallbackContext<'_>, _: &MemAccessInfo| {}));

/// Use counts of a generation's callback slots, with the free ones.
#[derive(Default)]
struct SlotUses {
    uses: Vec<u32>,
    free: Vec<u32>,
    /// The slot filled last: callbacks are mostly distinct closures (one per
    /// instruction), so only a run of the same one shares a slot, found
    /// without hashing.
    last: Option<u32>,
}

impl SlotUses {
    fn clear(&mut self) {
        self.uses.clear();
        self.free.clear();
        self.last = None;
    }

    /// The slot of `cb` in `slots` (reusing the last one if it holds `cb`),
    /// counting `uses` more uses.
    fn slot_for<T: ?Sized>(&mut self, slots: &mut Vec<Arc<T>>, cb: &Arc<T>, uses: u32) -> u32 {
        if let Some(last) = self.last
            && slots.get(last as usize).is_some_and(|s| Arc::ptr_eq(s, cb))
        {
            if let Some(n) = self.uses.get_mut(last as usize) {
                *n += uses;
            }
            return last;
        }
        let slot = match self.free.pop() {
            Some(free) if (free as usize) < slots.len() => {
                if let Some(s) = slots.get_mut(free as usize) {
                    *s = Arc::clone(cb);
                }
                if let Some(n) = self.uses.get_mut(free as usize) {
                    *n = uses;
                }
                free
            }
            _ => {
                slots.push(Arc::clone(cb));
                self.uses.push(uses);
                idx(slots.len() - 1)
            }
        };
        self.last = Some(slot);
        slot
    }

    /// One use of `slot` fewer; at none, its callback is dropped for
    /// `placeholder` and the slot is free.
    fn release<T: ?Sized>(&mut self, slots: &mut [Arc<T>], slot: u32, placeholder: &Arc<T>) {
        let Some(n) = self.uses.get_mut(slot as usize) else {
            return;
        };
        // A free slot has no use to release (and must not be freed twice).
        let Some(left) = n.checked_sub(1) else {
            return;
        };
        *n = left;
        if left == 0 {
            if let Some(s) = slots.get_mut(slot as usize) {
                *s = Arc::clone(placeholder);
            }
            self.free.push(slot);
            if self.last == Some(slot) {
                self.last = None;
            }
        }
    }
}

/// Lengths of (or offsets into) the five instrumentation arrays.
#[derive(Clone, Copy, Debug, Default)]
struct Extents {
    hooks: usize,
    actions: usize,
    mem: usize,
    tallies: usize,
    sums: usize,
}

impl Extents {
    fn minus(self, base: Extents) -> Extents {
        Extents {
            hooks: self.hooks - base.hooks,
            actions: self.actions - base.actions,
            mem: self.mem - base.mem,
            tallies: self.tallies - base.tallies,
            sums: self.sums - base.sums,
        }
    }
    fn fits_in(self, room: Extents) -> bool {
        self.hooks <= room.hooks
            && self.actions <= room.actions
            && self.mem <= room.mem
            && self.tallies <= room.tallies
            && self.sums <= room.sums
    }
    fn total(self) -> usize {
        self.hooks + self.actions + self.mem + self.tallies + self.sums
    }
}

/// One block's share of the instrumentation arrays.
#[derive(Clone, Copy, Debug)]
struct PlanSlot {
    start: Extents,
    len: Extents,
}

/// Link in a per-page list of blocks overlapping that page.
#[derive(Clone, Copy)]
struct PageLink {
    tb: u32,
    next: u32,
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

/// One cache generation.
pub(crate) struct Generation<Op> {
    pub(crate) id: u64,
    pub(crate) tbs: Vec<TbHeader>,
    pub(crate) ops: Vec<TbOp<Op>>,
    pub(crate) raws: Vec<u32>,
    index: HashMap<(u64, u32), u32>,
    /// Guest page number -> head of its `PageLink` list.
    page_heads: HashMap<u64, u32>,
    page_links: Vec<PageLink>,
    pub(crate) hooks: Vec<InsnHook>,
    pub(crate) actions: Vec<CompiledAction>,
    pub(crate) tallies: Vec<Tally>,
    pub(crate) tally_sums: Vec<u64>,
    /// The (board, slot) entries the tallies of the current plan version
    /// add to, each once: a tally's `key` indexes this.
    pub(crate) tally_keys: Vec<(u32, u32)>,
    tally_key_ids: HashMap<(u32, u32), u32>,
    pub(crate) mem_actions: Vec<CompiledMem>,
    // The only non-`Copy` contents: dropped with the generation, i.e. only
    // once no vCPU can be executing one of its blocks.
    pub(crate) callbacks: Vec<InsnCallback>,
    pub(crate) mem_callbacks: Vec<MemCallback>,
    /// How many compiled actions name each callback; a callback no plan
    /// names any more (its block was planned again) is dropped at once and
    /// its slot reused, so re-planning does not pile up closures.
    callback_uses: SlotUses,
    mem_callback_uses: SlotUses,
    pub(crate) boards: Vec<Arc<Scoreboard>>,
    /// Scoreboards by pointer identity -> index (a plan names few boards,
    /// many times).
    board_ids: HashMap<usize, u32>,
    /// The plan being compiled: its table indices -> this generation's.
    plan_slots: PlanSlots,
    pub(crate) dead_tbs: usize,
    /// Bumped by a re-instrumentation: every block planned under an older
    /// version is planned again when it is next entered.
    pub(crate) plan_version: u32,
    /// What the Count blocks of this plan version add.
    pub(crate) count_tally: CountTally,
    /// Instrumentation entries (hooks, actions, memory actions, tallies and
    /// their sums) superseded by re-planning: garbage until the generation
    /// is dropped, bounded by flushing once it outweighs the live ones.
    stale_entries: usize,
    /// The blocks compiled to host code, freed with the generation.
    pub(crate) jit: crate::jit::JitBlocks<Op>,
}

/// Where the callbacks and scoreboards of the plan being compiled sit in
/// the generation's tables.
#[derive(Default)]
struct PlanSlots {
    callbacks: Vec<u32>,
    mem_callbacks: Vec<u32>,
    boards: Vec<u32>,
}

impl PlanSlots {
    fn get(table: &[u32], i: u32) -> u32 {
        table.get(i as usize).copied().unwrap_or(NONE)
    }

    /// The generation's slot of the plan's callback `cb`.
    #[inline]
    fn callback(&self, cb: u32) -> u32 {
        Self::get(&self.callbacks, cb)
    }

    /// A plan's action, naming the generation's tables instead.
    #[inline]
    fn action(&self, action: CompiledAction) -> CompiledAction {
        match action {
            CompiledAction::Call { cb } => CompiledAction::Call {
                cb: Self::get(&self.callbacks, cb),
            },
            CompiledAction::Inline { board, slot, kind } => CompiledAction::Inline {
                board: Self::get(&self.boards, board),
                slot,
                kind,
            },
            CompiledAction::Conditional {
                cb,
                board,
                slot,
                compare,
                value,
            } => CompiledAction::Conditional {
                cb: Self::get(&self.callbacks, cb),
                board: Self::get(&self.boards, board),
                slot,
                compare,
                value,
            },
        }
    }

    /// A plan's memory action, naming the generation's tables instead.
    #[inline]
    fn mem_action(&self, action: CompiledMem) -> CompiledMem {
        let kind = match action.kind {
            CompiledMemKind::Call { cb } => CompiledMemKind::Call {
                cb: Self::get(&self.mem_callbacks, cb),
            },
            CompiledMemKind::Inline { board, slot, kind } => CompiledMemKind::Inline {
                board: Self::get(&self.boards, board),
                slot,
                kind,
            },
        };
        CompiledMem {
            filter: action.filter,
            kind,
        }
    }
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
/// The placeholder for room made in `Generation::actions` before a plan
/// is compiled into it.
const EMPTY_ACTION: CompiledAction = CompiledAction::Call { cb: NONE };
/// The same, in `Generation::mem_actions`.
const EMPTY_MEM: CompiledMem = CompiledMem {
    filter: MemFilter::All,
    kind: CompiledMemKind::Call { cb: NONE },
};

fn arc_key<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc).cast::<()>() as usize
}

/// The index of `board` in a generation's `boards` (indexed by
/// `board_ids`), added if new.
#[inline]
fn board_index(
    boards: &mut Vec<Arc<Scoreboard>>,
    board_ids: &mut HashMap<usize, u32>,
    board: &Arc<Scoreboard>,
) -> u32 {
    if let Some(last) = boards.last()
        && Arc::ptr_eq(last, board)
    {
        return idx(boards.len() - 1);
    }
    let key = arc_key(board);
    if let Some(&i) = board_ids.get(&key) {
        return i;
    }
    let i = idx(boards.len());
    boards.push(Arc::clone(board));
    board_ids.insert(key, i);
    i
}

#[inline]
pub(crate) fn idx(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(NONE)
}

/// A hook's number of actions: hooks count them in 16 bits to stay 16
/// bytes, which a plan never exceeds (`MAX_PLAN_ACTIONS` per block).
#[inline]
fn len16(len: usize) -> u16 {
    u16::try_from(len.min(MAX_PLAN_ACTIONS)).unwrap_or(u16::MAX)
}

impl<Op: Copy> Generation<Op> {
    /// An empty generation; allocates nothing, so retiring and replacing the
    /// current generation is O(1).
    pub(crate) fn new(id: u64) -> Self {
        Generation {
            id,
            tbs: Vec::new(),
            ops: Vec::new(),
            raws: Vec::new(),
            index: HashMap::new(),
            page_heads: HashMap::new(),
            page_links: Vec::new(),
            hooks: Vec::new(),
            actions: Vec::new(),
            tallies: Vec::new(),
            tally_sums: Vec::new(),
            tally_keys: Vec::new(),
            tally_key_ids: HashMap::new(),
            mem_actions: Vec::new(),
            callbacks: Vec::new(),
            mem_callbacks: Vec::new(),
            callback_uses: SlotUses::default(),
            mem_callback_uses: SlotUses::default(),
            boards: Vec::new(),
            board_ids: HashMap::new(),
            plan_slots: PlanSlots::default(),
            dead_tbs: 0,
            plan_version: 0,
            count_tally: CountTally::Unset,
            stale_entries: 0,
            jit: crate::jit::JitBlocks::default(),
        }
    }

    /// Empties the generation but keeps its allocations, for reuse as a
    /// later generation. Drops its callbacks and scoreboards: call only once
    /// no vCPU can be executing one of its blocks.
    pub(crate) fn recycle(&mut self) {
        self.jit.clear();
        self.tbs.clear();
        self.ops.clear();
        self.raws.clear();
        self.index.clear();
        self.page_heads.clear();
        self.page_links.clear();
        self.hooks.clear();
        self.actions.clear();
        self.tallies.clear();
        self.tally_sums.clear();
        self.tally_keys.clear();
        self.tally_key_ids.clear();
        self.mem_actions.clear();
        self.callbacks.clear();
        self.mem_callbacks.clear();
        self.callback_uses.clear();
        self.mem_callback_uses.clear();
        self.boards.clear();
        self.board_ids.clear();
        self.dead_tbs = 0;
        self.plan_version = 0;
        self.count_tally = CountTally::Unset;
        self.stale_entries = 0;
    }

    /// Starts a new plan version: every block is planned again before it
    /// next runs (see `Engine::reinstrument`).
    pub(crate) fn bump_plan_version(&mut self) {
        self.plan_version += 1;
        // Blocks of the old version run only once planned again, with
        // keys of the new version: the entries in use keep the small keys
        // a tally run sums in locals however many boards came and went.
        self.count_tally = CountTally::Unset;
        self.tally_keys.clear();
        self.tally_key_ids.clear();
    }

    #[inline]
    pub(crate) fn lookup(&self, pc: u64, flags: u32) -> Option<u32> {
        self.index.get(&(pc, flags)).copied()
    }

    /// The block `prev` chained to `pc` (its id and header), if that link
    /// is still usable: the target is alive and was translated under the
    /// same `flags`.
    #[inline(always)]
    pub(crate) fn chained(&self, prev: u32, pc: u64, flags: u32) -> Option<(u32, &TbHeader)> {
        let from = self.tbs.get(prev as usize)?;
        let slot = usize::from(from.chain_pc[0] != pc);
        if from.chain_pc.get(slot) != Some(&pc) {
            return None;
        }
        let id = *from.chain_tb.get(slot)?;
        let to = self.tbs.get(id as usize)?;
        (!to.dead && to.flags == flags).then_some((id, to))
    }

    /// The ops of block `tb`.
    #[inline(always)]
    pub(crate) fn ops_of(&self, tb: &TbHeader) -> Option<&[TbOp<Op>]> {
        self.ops.get(tb.ops_start as usize..tb.ops_end as usize)
    }

    /// Records that block `prev` continued at `pc` in block `id`.
    pub(crate) fn link(&mut self, prev: u32, pc: u64, id: u32) {
        if let Some(from) = self.tbs.get_mut(prev as usize) {
            let fall_through = from.pc.wrapping_add(u64::from(from.size)) == pc;
            let slot = usize::from(!fall_through);
            if let (Some(p), Some(t)) = (from.chain_pc.get_mut(slot), from.chain_tb.get_mut(slot)) {
                *p = pc;
                *t = id;
            }
        }
    }

    pub(crate) fn live_tbs(&self) -> usize {
        self.tbs.len() - self.dead_tbs
    }

    /// Approximate heap bytes held by this generation.
    pub(crate) fn bytes(&self) -> usize {
        use std::mem::size_of;
        let table = |cap: usize, entry: usize| cap * (entry + 1);
        self.tbs.capacity() * size_of::<TbHeader>()
            + self.ops.capacity() * size_of::<TbOp<Op>>()
            + self.raws.capacity() * 4
            + table(self.index.capacity(), size_of::<((u64, u32), u32)>())
            + table(self.page_heads.capacity(), size_of::<(u64, u32)>())
            + self.page_links.capacity() * size_of::<PageLink>()
            + self.hooks.capacity() * size_of::<InsnHook>()
            + self.actions.capacity() * size_of::<CompiledAction>()
            + self.tallies.capacity() * size_of::<Tally>()
            + self.tally_sums.capacity() * 8
            + self.tally_keys.capacity() * size_of::<(u32, u32)>()
            + table(
                self.tally_key_ids.capacity(),
                size_of::<((u32, u32), u32)>(),
            )
            + self.mem_actions.capacity() * size_of::<CompiledMem>()
            + (self.callbacks.capacity() + self.mem_callbacks.capacity() + self.boards.capacity())
                * 16
    }

    /// Adds a block; returns its index. `ops` and `raws` are parallel.
    pub(crate) fn insert(
        &mut self,
        pc: u64,
        flags: u32,
        size: u32,
        ops: &[TbOp<Op>],
        raws: &[u32],
        plan: Option<&PlanData>,
    ) -> u32 {
        let id = idx(self.tbs.len());
        let ops_start = idx(self.ops.len());
        self.ops.extend_from_slice(ops);
        self.raws.extend_from_slice(raws);
        let (mode, instr_start, instr_len) = self.compile_plan(plan, ops_start, ops.len());
        self.tbs.push(TbHeader {
            pc,
            flags,
            size,
            ops_start,
            ops_end: idx(self.ops.len()),
            mode,
            instr_start,
            instr_len,
            dead: false,
            plan_version: self.plan_version,
            chain_pc: [u64::MAX; 2],
            chain_tb: [NONE; 2],
        });
        if let Some(old) = self.index.insert((pc, flags), id) {
            // Only reachable if a caller translated a block already cached;
            // the older copy becomes unreachable.
            self.kill(old);
        }
        if size > 0 {
            let first = pc >> 12;
            let last = pc.saturating_add(u64::from(size) - 1) >> 12;
            for page in first..=last {
                let head = self.page_heads.entry(page).or_insert(NONE);
                self.page_links.push(PageLink {
                    tb: id,
                    next: *head,
                });
                *head = idx(self.page_links.len() - 1);
            }
        }
        id
    }

    /// Compiles the instrumentation of the block of `insns` instructions
    /// whose ops start at `ops_start`; returns how it runs and its range in
    /// `hooks` or `tallies`.
    fn compile_plan(
        &mut self,
        plan: Option<&PlanData>,
        ops_start: u32,
        insns: usize,
    ) -> (ExecMode, u32, u32) {
        if let Some(plan) = plan {
            self.resolve_tables(&plan.tables);
        }
        match plan {
            // Inline adds only (no callback, conditional, store or memory
            // action): a plain loop with tallies.
            Some(plan) if runs_as_tally(plan) => {
                let (start, len) = self.compile_tally(plan, insns);
                let mode = match self.uniform_tally(start, len, insns) {
                    Some(per_insn) => {
                        if let Some(t) = self.tallies.get_mut(start as usize) {
                            t.per_insn = per_insn;
                            let shared = CountTally::Shared {
                                board: t.board,
                                slot: t.slot,
                                per_insn,
                            };
                            self.count_tally = match self.count_tally {
                                CountTally::Unset => shared,
                                same if same == shared => same,
                                _ => CountTally::Mixed,
                            };
                        }
                        ExecMode::Count
                    }
                    None => ExecMode::Tally,
                };
                (mode, start, len)
            }
            Some(plan) => {
                let at = self.make_room(hooks_room(plan, insns));
                let mode = self.compile_hooks(plan, insns, at, ops_start);
                (mode, idx(at.hooks), idx(insns + 1))
            }
            None => (ExecMode::Plain, NONE, 0),
        }
    }

    /// Whether the `len` hooks at `start` (block entry first) are no action
    /// on entry and the same sole callback before every instruction.
    fn calls_each(&self, start: u32, len: u32) -> bool {
        let Some([entry, first, rest @ ..]) =
            self.hooks.get(start as usize..(start + len) as usize)
        else {
            return false;
        };
        entry.actions_len == 0
            && first.sole_call != NONE
            && rest.iter().all(|h| h.sole_call == first.sole_call)
    }

    /// Whether the `len` hooks at `start` (block entry first) are no action
    /// on entry and the same list of two or more callbacks, and nothing
    /// else, before every instruction.
    fn calls_one_list(&self, start: u32, len: u32) -> bool {
        let Some([entry, first, rest @ ..]) =
            self.hooks.get(start as usize..(start + len) as usize)
        else {
            return false;
        };
        let actions = |h: &InsnHook| {
            let from = h.actions_start as usize;
            self.actions.get(from..from + usize::from(h.actions_len))
        };
        let Some(list) = actions(first) else {
            return false;
        };
        let same = |h: &InsnHook| {
            actions(h).is_some_and(|other| {
                other.len() == list.len()
                    && other.iter().zip(list).all(|pair| match pair {
                        (CompiledAction::Call { cb: x }, CompiledAction::Call { cb: y }) => x == y,
                        _ => false,
                    })
            })
        };
        entry.actions_len == 0
            && list.len() >= 2
            && list
                .iter()
                .all(|a| matches!(a, CompiledAction::Call { .. }))
            && rest.iter().all(same)
    }

    /// Whether the `len` hooks at `start` (block entry first) are actions on
    /// entry and none before any instruction.
    fn acts_on_entry_only(&self, start: u32, len: u32) -> bool {
        let Some([entry, insns @ ..]) = self.hooks.get(start as usize..(start + len) as usize)
        else {
            return false;
        };
        entry.actions_len != 0 && insns.iter().all(|h| h.actions_len == 0)
    }

    /// Whether the `len` hooks at `start` (block entry first) of the block
    /// whose ops start at `ops_start` have the same memory actions on each
    /// instruction that accesses memory (those that do not never have one:
    /// see `Engine::plan_block`), whatever else they run (callers check);
    /// if so, where the first such instruction's actions are (`mem_start`,
    /// `mem_len`), for the entry hook to name (see [`InsnHook`]).
    fn shared_mem(&self, start: u32, len: u32, ops_start: u32) -> Option<(u32, u16)> {
        let [_, insn_hooks @ ..] = self.hooks.get(start as usize..(start + len) as usize)? else {
            return None;
        };
        let ops = self
            .ops
            .get(ops_start as usize..ops_start as usize + insn_hooks.len())
            .unwrap_or_default();
        let mem_actions = |h: &InsnHook| {
            let from = h.mem_start as usize;
            self.mem_actions.get(from..from + usize::from(h.mem_len))
        };
        let first = insn_hooks.iter().find(|h| h.mem_len != 0)?;
        let one = mem_actions(first)?;
        let shared = ops.len() == insn_hooks.len()
            && insn_hooks.iter().zip(ops).all(|(h, op)| {
                if op.accesses_memory {
                    mem_actions(h).is_some_and(|actions| {
                        actions.len() == one.len()
                            && actions
                                .iter()
                                .zip(one)
                                .all(|(a, b)| self.same_mem_action(a, b))
                    })
                } else {
                    h.mem_len == 0
                }
            });
        shared.then_some((first.mem_start, first.mem_len))
    }

    /// Whether two compiled memory actions do the same thing: callbacks are
    /// compared by identity, since one callback attached to many
    /// instructions next to others may have several slots.
    fn same_mem_action(&self, a: &CompiledMem, b: &CompiledMem) -> bool {
        a.filter == b.filter
            && match (a.kind, b.kind) {
                (CompiledMemKind::Call { cb: x }, CompiledMemKind::Call { cb: y }) => {
                    match (
                        self.mem_callbacks.get(x as usize),
                        self.mem_callbacks.get(y as usize),
                    ) {
                        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
                        _ => false,
                    }
                }
                (x, y) => x == y,
            }
    }

    /// The add per instruction if the `len` tallies at `start` are one that
    /// adds the same nonzero amount for each of the `insns` instructions and
    /// nothing on block entry: its prefix sums are `k, 2k, 3k, ...`.
    fn uniform_tally(&self, start: u32, len: u32, insns: usize) -> Option<u64> {
        let [t] = self.tallies.get(start as usize..(start + len) as usize)? else {
            return None;
        };
        let from = t.sums_start as usize;
        let sums = self.tally_sums.get(from..from + insns)?;
        let k = *sums.first()?;
        let uniform = sums
            .iter()
            .zip(1u64..)
            .all(|(&s, n)| s == k.wrapping_mul(n));
        (k != 0 && uniform).then_some(k)
    }

    /// Replaces the instrumentation of block `id` (planned under an older
    /// `plan_version`) with `plan`, keeping its decoded ops, its index entry
    /// and its chain links. A plan of hooks that fits where the old hooks
    /// were (the same block planned alike: the usual case after a reset) is
    /// compiled over them, so re-planning neither grows the arrays nor
    /// moves anything; otherwise it is compiled at the end of the arrays
    /// (a tally plan is then moved over the old one when it fits), and the
    /// old plan stays behind as garbage, counted in `stale_entries`.
    pub(crate) fn replan(&mut self, id: u32, plan: Option<&PlanData>) {
        let Some(&old) = self.tbs.get(id as usize) else {
            return;
        };
        let insns = old.ops_end.saturating_sub(old.ops_start) as usize;
        let old_slot = self.extents_of(&old);
        if let Some(slot) = &old_slot {
            self.release_callbacks(slot);
        }
        let (mode, instr_start, instr_len) = match plan {
            Some(plan) if !runs_as_tally(plan) => {
                self.resolve_tables(&plan.tables);
                let need = hooks_room(plan, insns);
                let at = match old_slot {
                    Some(slot) if old.mode.runs_steps() && need.fits_in(slot.len) => {
                        self.stale_entries += slot.len.total() - need.total();
                        slot.start
                    }
                    _ => {
                        self.stale_entries += old_slot.map_or(0, |slot| slot.len.total());
                        self.make_room(need)
                    }
                };
                let mode = self.compile_hooks(plan, insns, at, old.ops_start);
                (mode, idx(at.hooks), idx(insns + 1))
            }
            _ => {
                let before = self.extents();
                let (mode, mut instr_start, instr_len) =
                    self.compile_plan(plan, old.ops_start, insns);
                let added = self.extents().minus(before);
                if let Some(slot) = old_slot {
                    if mode.tallies() && old.mode.tallies() && added.fits_in(slot.len) {
                        self.move_tallies(before, &slot);
                        instr_start = idx(slot.start.tallies);
                        self.stale_entries += slot.len.total() - added.total();
                    } else {
                        self.stale_entries += slot.len.total();
                    }
                }
                (mode, instr_start, instr_len)
            }
        };
        let version = self.plan_version;
        if let Some(tb) = self.tbs.get_mut(id as usize) {
            tb.mode = mode;
            tb.instr_start = instr_start;
            tb.instr_len = instr_len;
            tb.plan_version = version;
        }
    }

    /// Makes room for `need` more entries at the end of the arrays; returns
    /// where it starts.
    fn make_room(&mut self, need: Extents) -> Extents {
        let at = self.extents();
        self.hooks.resize(at.hooks + need.hooks, EMPTY_HOOK);
        self.actions.resize(at.actions + need.actions, EMPTY_ACTION);
        self.mem_actions.resize(at.mem + need.mem, EMPTY_MEM);
        at
    }

    /// Current lengths of the instrumentation arrays.
    fn extents(&self) -> Extents {
        Extents {
            hooks: self.hooks.len(),
            actions: self.actions.len(),
            mem: self.mem_actions.len(),
            tallies: self.tallies.len(),
            sums: self.tally_sums.len(),
        }
    }

    /// Where block `tb`'s instrumentation lives (`None` for a plain block).
    /// A block's entries are contiguous in each array: compiling pushes
    /// them in order.
    fn extents_of(&self, tb: &TbHeader) -> Option<PlanSlot> {
        let start = tb.instr_start as usize;
        let len = tb.instr_len as usize;
        match tb.mode {
            mode if mode.tallies() => {
                let tallies = self.tallies.get(start..start + len)?;
                let insns = tb.ops_end.saturating_sub(tb.ops_start) as usize;
                let sums = tallies.first().map_or(0, |t| t.sums_start as usize);
                Some(PlanSlot {
                    start: Extents {
                        tallies: start,
                        sums,
                        ..Extents::default()
                    },
                    len: Extents {
                        tallies: len,
                        sums: len * insns,
                        ..Extents::default()
                    },
                })
            }
            mode if mode.runs_steps() => {
                let hooks = self.hooks.get(start..start + len)?;
                let (first, last) = (hooks.first()?, hooks.last()?);
                let actions = first.actions_start as usize;
                let actions_end = last.actions_start as usize + usize::from(last.actions_len);
                // The entry hook has no memory actions; the others' ranges
                // follow one another.
                let insn_hooks = hooks.get(1..).unwrap_or_default();
                let mem = insn_hooks.first().map_or(0, |h| h.mem_start as usize);
                let mem_end = insn_hooks
                    .last()
                    .map_or(0, |h| h.mem_start as usize + usize::from(h.mem_len));
                Some(PlanSlot {
                    start: Extents {
                        hooks: start,
                        actions,
                        mem,
                        ..Extents::default()
                    },
                    len: Extents {
                        hooks: len,
                        actions: actions_end.saturating_sub(actions),
                        mem: mem_end.saturating_sub(mem),
                        ..Extents::default()
                    },
                })
            }
            // Plain: no instrumentation.
            _ => None,
        }
    }

    /// Moves the tally plan compiled past `before` into `slot` (which it
    /// fits), rebasing its internal indices, and truncates the arrays to
    /// `before`.
    fn move_tallies(&mut self, before: Extents, slot: &PlanSlot) {
        let to = slot.start;
        for t in self.tallies.get_mut(before.tallies..).unwrap_or_default() {
            t.sums_start = idx(to.sums + (t.sums_start as usize - before.sums));
        }
        self.tallies.copy_within(before.tallies.., to.tallies);
        self.tally_sums.copy_within(before.sums.., to.sums);
        self.tallies.truncate(before.tallies);
        self.tally_sums.truncate(before.sums);
    }

    /// True once re-planning left more garbage than a flush is worth
    /// keeping: several times the live instrumentation, and not tiny.
    pub(crate) fn mostly_stale(&self) -> bool {
        let total = self.hooks.len()
            + self.actions.len()
            + self.mem_actions.len()
            + self.tallies.len()
            + self.tally_sums.len();
        let live = total.saturating_sub(self.stale_entries);
        let limit = 8 * live + (1 << 16);
        // Callbacks of superseded plans are not tracked one by one: their
        // count is bounded against the live instrumentation instead.
        self.stale_entries > limit || self.callbacks.len() + self.mem_callbacks.len() > limit
    }

    /// Resolves the plan's callbacks and scoreboards to this generation's,
    /// counting the uses of each callback.
    fn resolve_tables(&mut self, tables: &PlanTables) {
        // The fields apart, not the slots moved out and back: that copy of
        // the slots' headers cost more than the rest of this function.
        let Generation {
            plan_slots: slots,
            callbacks,
            callback_uses,
            mem_callbacks,
            mem_callback_uses,
            boards,
            board_ids,
            ..
        } = self;
        slots.boards.clear();
        for board in &tables.boards {
            slots.boards.push(board_index(boards, board_ids, board));
        }
        slots.callbacks.clear();
        for (cb, &uses) in tables.callbacks.iter().zip(&tables.callback_uses) {
            slots.callbacks.push(match uses {
                // Named by no action: given no slot, so nothing keeps it.
                0 => NONE,
                n => callback_uses.slot_for(callbacks, cb, n),
            });
        }
        slots.mem_callbacks.clear();
        for (cb, &uses) in tables.mem_callbacks.iter().zip(&tables.mem_callback_uses) {
            slots.mem_callbacks.push(match uses {
                0 => NONE,
                n => mem_callback_uses.slot_for(mem_callbacks, cb, n),
            });
        }
    }

    /// Forgets the callbacks the actions of `slot` name (a plan about to be
    /// replaced): those no other plan names are dropped now.
    fn release_callbacks(&mut self, slot: &PlanSlot) {
        let actions = slot.start.actions..slot.start.actions + slot.len.actions;
        for action in self.actions.get(actions).unwrap_or_default() {
            if let CompiledAction::Call { cb } | CompiledAction::Conditional { cb, .. } = *action {
                self.callback_uses
                    .release(&mut self.callbacks, cb, &NOOP_CALLBACK);
            }
        }
        let mem = slot.start.mem..slot.start.mem + slot.len.mem;
        for action in self.mem_actions.get(mem).unwrap_or_default() {
            if let CompiledMemKind::Call { cb } = action.kind {
                self.mem_callback_uses
                    .release(&mut self.mem_callbacks, cb, &NOOP_MEM_CALLBACK);
            }
        }
    }

    /// Compiles a plan of inline adds only into one [`Tally`] per
    /// scoreboard entry it touches; returns their (start, len) in `tallies`.
    fn compile_tally(&mut self, plan: &PlanData, insns: usize) -> (u32, u32) {
        let start = self.tallies.len();
        for &(at, action) in &plan.exec {
            let CompiledAction::Inline {
                board,
                slot,
                kind: InlineKind::Add(imm),
            } = action
            else {
                continue;
            };
            // An entry past the row does nothing (as `Scoreboard` ignores
            // it); tallies only name entries inside it.
            let inside = plan
                .tables
                .boards
                .get(board as usize)
                .is_some_and(|b| (slot as usize) < b.slots());
            let board = PlanSlots::get(&self.plan_slots.boards, board);
            if !inside || board == NONE {
                continue;
            }
            // Plans hardly ever touch more than a couple of entries: a
            // linear search over this block's tallies beats hashing.
            let existing = self
                .tallies
                .get(start..)
                .unwrap_or_default()
                .iter()
                .find(|t| t.board == board && t.slot == slot)
                .map(|t| t.sums_start as usize);
            let sums_start = match existing {
                Some(s) => s,
                None => {
                    let s = self.tally_sums.len();
                    self.tally_sums.resize(s + insns, 0);
                    let key = self.tally_key(board, slot);
                    self.tallies.push(Tally {
                        board,
                        slot,
                        key,
                        sums_start: idx(s),
                        full: 0,
                        per_insn: 0,
                    });
                    s
                }
            };
            // Not yet prefix sums: per-instruction adds, summed up below.
            // Entry adds (at 0) count as made before instruction 0.
            let insn = (at as usize).saturating_sub(1);
            if let Some(cell) = self.tally_sums.get_mut(sums_start + insn) {
                *cell = cell.wrapping_add(imm);
            }
        }
        for t in self.tallies.get_mut(start..).unwrap_or_default() {
            let from = t.sums_start as usize;
            if let Some(sums) = self.tally_sums.get_mut(from..from + insns) {
                let mut acc = 0u64;
                for s in sums {
                    acc = acc.wrapping_add(*s);
                    *s = acc;
                }
                t.full = acc;
            }
        }
        (idx(start), idx(self.tallies.len() - start))
    }

    /// The index of scoreboard entry (`board`, `slot`) in `tally_keys`,
    /// added on first use.
    fn tally_key(&mut self, board: u32, slot: u32) -> u32 {
        let next = idx(self.tally_keys.len());
        let key = *self.tally_key_ids.entry((board, slot)).or_insert(next);
        if key == next {
            self.tally_keys.push((board, slot));
        }
        key
    }

    /// Compiles a plan into hooks (the block-entry hook, then one per
    /// instruction) and their actions, written at `at` in the arrays, which
    /// has room for them; returns how the block runs. The plan's actions
    /// are in instruction order (see `TbPlan::finish`).
    fn compile_hooks(
        &mut self,
        plan: &PlanData,
        insns: usize,
        at: Extents,
        ops_start: u32,
    ) -> ExecMode {
        let Generation {
            hooks,
            actions,
            mem_actions,
            plan_slots,
            ..
        } = self;
        let (Some(hooks), Some(acts), Some(mems)) = (
            hooks.get_mut(at.hooks..at.hooks + insns + 1),
            actions.get_mut(at.actions..at.actions + plan.exec.len()),
            mem_actions.get_mut(at.mem..at.mem + plan.mem.len()),
        ) else {
            // Not reached: the callers made the room.
            return ExecMode::Plain;
        };
        // The actions, with their tables' indices made the generation's.
        for (dst, &(_, action)) in acts.iter_mut().zip(&plan.exec) {
            *dst = plan_slots.action(action);
        }
        for (dst, &(_, action)) in mems.iter_mut().zip(&plan.mem) {
            *dst = plan_slots.mem_action(action);
        }
        // One pass down the (ordered) actions, closing a hook whenever the
        // instruction they name moves on.
        let (exec, mem) = (plan.exec.as_slice(), plan.mem.as_slice());
        let (mut e, mut m) = (0usize, 0usize);
        // Where this block's actions start in the generation's arrays, in
        // the hooks' 32 bits once (a plan holds at most
        // `MAX_PLAN_ACTIONS`, so the sums below stay in range).
        let (actions_at, mem_at) = (idx(at.actions), idx(at.mem));
        for (here, hook) in (0u32..).zip(hooks.iter_mut()) {
            let (e0, m0) = (e, m);
            let mut sole_call = NONE;
            while let Some(&(insn, action)) = exec.get(e) {
                if insn != here {
                    break;
                }
                sole_call = match (e == e0, action) {
                    (true, CompiledAction::Call { cb }) => plan_slots.callback(cb),
                    _ => NONE,
                };
                e += 1;
            }
            // Memory actions name their instruction: hook `here` is
            // instruction `here - 1`'s (the entry hook has none).
            let mut mem_calls = false;
            while let Some(&(insn, action)) = mem.get(m) {
                if insn + 1 != here {
                    break;
                }
                mem_calls |= matches!(action.kind, CompiledMemKind::Call { .. });
                m += 1;
            }
            *hook = InsnHook {
                actions_start: actions_at.wrapping_add(e0 as u32),
                actions_len: len16(e - e0),
                // (The entry hook, which has none, gets where the first
                // instruction's start.)
                mem_start: mem_at.wrapping_add(m0 as u32),
                mem_len: len16(m - m0),
                mem_calls,
                // Mostly one callback (one instruction-counting plugin):
                // the loop then calls it without walking the list.
                sole_call,
            };
        }
        let (start, len) = (idx(at.hooks), idx(insns + 1));
        if !plan.mem.is_empty() {
            let Some((mem_start, mem_len)) = self.shared_mem(start, len, ops_start) else {
                return ExecMode::StepsWithMemory;
            };
            let mode = if plan.exec.is_empty() {
                ExecMode::MemEach
            } else if self.calls_each(start, len) {
                ExecMode::CallEachWithMem
            } else {
                return ExecMode::StepsWithMemory;
            };
            if let Some(entry) = self.hooks.get_mut(start as usize) {
                entry.mem_start = mem_start;
                entry.mem_len = mem_len;
            }
            mode
        } else if self.calls_each(start, len) {
            ExecMode::CallEach
        } else if self.calls_one_list(start, len) {
            ExecMode::CallList
        } else if self.acts_on_entry_only(start, len) {
            ExecMode::OnEntry
        } else {
            ExecMode::Steps
        }
    }

    /// Makes block `id` unreachable (its storage stays until the generation
    /// is dropped).
    fn kill(&mut self, id: u32) {
        let Some(tb) = self.tbs.get_mut(id as usize) else {
            return;
        };
        if tb.dead {
            return;
        }
        tb.dead = true;
        let key = (tb.pc, tb.flags);
        self.dead_tbs += 1;
        if self.index.get(&key) == Some(&id) {
            self.index.remove(&key);
        }
    }

    /// Kills every live block overlapping `[start, end)`; returns how many.
    pub(crate) fn invalidate(&mut self, start: u64, end: u64) -> usize {
        if start >= end || self.tbs.len() == self.dead_tbs {
            return 0;
        }
        let first = start >> 12;
        let last = (end - 1) >> 12;
        // Walk whichever is smaller: the pages of the range, or the pages
        // that hold blocks at all.
        let pages: Vec<u64> = if last - first < self.page_heads.len() as u64 {
            (first..=last).collect()
        } else {
            self.page_heads
                .keys()
                .copied()
                .filter(|p| (first..=last).contains(p))
                .collect()
        };
        let before = self.dead_tbs;
        for page in pages {
            // Walk the page's list, killing overlapping blocks and unlinking
            // dead ones so repeated invalidations stay cheap.
            let mut head = self.page_heads.get(&page).copied().unwrap_or(NONE);
            let mut prev = NONE;
            let mut link = head;
            while let Some(&PageLink { tb, next }) = self.page_links.get(link as usize) {
                let (live, hit) = match self.tbs.get(tb as usize) {
                    Some(h) => (!h.dead, !h.dead && h.overlaps(start, end)),
                    None => (false, false),
                };
                if hit {
                    self.kill(tb);
                }
                if live && !hit {
                    prev = link;
                } else if prev == NONE {
                    head = next;
                } else if let Some(p) = self.page_links.get_mut(prev as usize) {
                    p.next = next;
                }
                link = next;
            }
            if head == NONE {
                self.page_heads.remove(&page);
            } else {
                self.page_heads.insert(page, head);
            }
        }
        self.dead_tbs - before
    }
}

/// The room a plan of hooks takes in the arrays for a block of `insns`
/// instructions: the entry hook and one per instruction, and its actions.
fn hooks_room(plan: &PlanData, insns: usize) -> Extents {
    Extents {
        hooks: insns + 1,
        actions: plan.exec.len(),
        mem: plan.mem.len(),
        ..Extents::default()
    }
}

/// True if `plan` holds only inline adds before instructions or on block
/// entry: no callback, no conditional, no store, no memory action. Such a
/// block runs as [`ExecMode::Tally`] (or [`ExecMode::Count`]).
fn runs_as_tally(plan: &PlanData) -> bool {
    plan.adds_only && plan.mem.is_empty()
}

// The loop reads one header per block: it must stay one cache line.
const _: () = assert!(std::mem::size_of::<TbHeader>() == 64);
