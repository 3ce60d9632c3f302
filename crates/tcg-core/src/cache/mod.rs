//! One generation of the block cache: every translated block, its
//! pre-decoded ops and its compiled instrumentation, in flat typed arenas.
//!
//! All storage of a generation is a handful of vectors and hash tables of
//! `Copy` data (plus one vector of callback handles), so a generation is
//! retired by moving it and freed by dropping a few allocations, however many
//! blocks it holds. Blocks are addressed by `u32` index, which the per-vCPU
//! jump caches store together with the generation id. (Flat vectors rather
//! than an arena such as `bumpalo`: holding references into an arena next
//! to the arena needs a self-referential struct or `unsafe`, and flat
//! vectors free just as wholesale.)
//!
//! - `mod.rs`: the [`Generation`] and its block storage: block headers and
//!   ops, the `(pc, flags)` index, chain links, per-page lists for range
//!   invalidation (and the JIT's compiled blocks, which live and die with
//!   the generation).
//! - `exec_mode.rs`: [`ExecMode`] (how a block runs) and the compiled
//!   instrumentation records the loops read: hooks, actions, tallies.
//! - `compile.rs`: compiling a block's plan into the generation, which
//!   chooses its `ExecMode`.
//! - `replan.rs`: planning a cached block again in place after a
//!   re-instrumentation, and bounding the garbage that leaves.
//! - `shared.rs`: translations the engines of a process's threads share,
//!   so that a block is planned once for all of them.
//! - `slots.rs`: the generation's tables of callbacks and scoreboards: a
//!   plan's own tables resolved into them, and the use counts that free a
//!   callback no plan names any more.

mod compile;
mod exec_mode;
mod replan;
mod shared;
mod slots;

use std::sync::Arc;

use hashbrown::HashMap;

use crate::instrument::{InsnCallback, MemCallback, PlanData, Scoreboard};

pub(crate) use exec_mode::{
    CompiledAction, CompiledMem, CompiledMemKind, CountTally, EMPTY_HOOK, ExecMode, InsnHook, Tally,
};
pub(crate) use shared::{Claim, PlanSource, SharedTranslation, SharedTranslations};

use slots::{PlanSlots, SlotUses};

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

/// Link in a per-page list of blocks overlapping that page.
#[derive(Clone, Copy)]
struct PageLink {
    tb: u32,
    next: u32,
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

#[inline]
pub(crate) fn idx(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(NONE)
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

    /// The execution actions of `hook` (none for a hook past the arrays).
    #[inline(always)]
    pub(crate) fn actions_of(&self, hook: &InsnHook) -> &[CompiledAction] {
        let from = hook.actions_start as usize;
        self.actions
            .get(from..from + usize::from(hook.actions_len))
            .unwrap_or_default()
    }

    /// The memory actions of `hook` (none for a hook past the arrays).
    #[inline(always)]
    pub(crate) fn mem_actions_of(&self, hook: &InsnHook) -> &[CompiledMem] {
        let from = hook.mem_start as usize;
        self.mem_actions
            .get(from..from + usize::from(hook.mem_len))
            .unwrap_or_default()
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

// The loop reads one header per block: it must stay one cache line.
const _: () = assert!(std::mem::size_of::<TbHeader>() == 64);
