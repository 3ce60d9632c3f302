//! One generation of the block cache: every translated block, its
//! pre-decoded ops and its compiled instrumentation, in flat typed arenas.
//!
//! All storage of a generation is a handful of vectors and hash tables of
//! `Copy` data (plus one vector of callback handles), so a generation is
//! retired by moving it and freed by dropping a few allocations, however many
//! blocks it holds. Blocks are addressed by `u32` index, which the per-vCPU
//! jump caches store together with the generation id.

use std::sync::Arc;

use hashbrown::HashMap;

use crate::instrument::{
    Action, Compare, InlineKind, InsnCallback, MemAction, MemCallback, MemFilter, Scoreboard,
    TbPlan,
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
    /// The block's instrumented step stream in `Generation::steps`;
    /// `steps_start == NONE` for an uninstrumented block.
    pub(crate) steps_start: u32,
    pub(crate) steps_len: u32,
    /// Set by range invalidation; the block is unreachable afterwards.
    pub(crate) dead: bool,
}

impl TbHeader {
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        let tb_end = self.pc.saturating_add(u64::from(self.size));
        self.pc < end && start < tb_end
    }
}

/// One step of an instrumented block: the guest instructions interleaved
/// with what runs before each of them (the block-entry actions come first).
/// Callbacks and scoreboards are referenced by index into the generation's
/// tables, so steps are `Copy` and freed wholesale with the generation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step<Op> {
    /// Execute a guest instruction.
    Insn { op: Op, len: u8 },
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
    /// The next instruction's memory actions; `calls` if any is a callback.
    Mem { start: u32, len: u32, calls: bool },
}

/// Compiled memory action.
#[derive(Clone, Copy, Debug)]
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

#[derive(Clone, Copy, Debug)]
pub(crate) struct CompiledMem {
    pub(crate) filter: MemFilter,
    pub(crate) kind: CompiledMemKind,
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
    pub(crate) steps: Vec<Step<Op>>,
    pub(crate) mem_actions: Vec<CompiledMem>,
    // The only non-`Copy` contents: dropped with the generation, i.e. only
    // once no vCPU can be executing one of its blocks.
    pub(crate) callbacks: Vec<InsnCallback>,
    pub(crate) mem_callbacks: Vec<MemCallback>,
    pub(crate) boards: Vec<Arc<Scoreboard>>,
    /// Dedup tables: pointer identity -> index.
    callback_ids: HashMap<usize, u32>,
    mem_callback_ids: HashMap<usize, u32>,
    board_ids: HashMap<usize, u32>,
    pub(crate) dead_tbs: usize,
}

fn arc_key<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc).cast::<()>() as usize
}

fn idx(len: usize) -> u32 {
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
            steps: Vec::new(),
            mem_actions: Vec::new(),
            callbacks: Vec::new(),
            mem_callbacks: Vec::new(),
            boards: Vec::new(),
            callback_ids: HashMap::new(),
            mem_callback_ids: HashMap::new(),
            board_ids: HashMap::new(),
            dead_tbs: 0,
        }
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
            + self.steps.capacity() * size_of::<Step<Op>>()
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
        plan: Option<&TbPlan>,
    ) -> u32 {
        let id = idx(self.tbs.len());
        let ops_start = idx(self.ops.len());
        self.ops.extend_from_slice(ops);
        self.raws.extend_from_slice(raws);
        let (steps_start, steps_len) = match plan {
            Some(plan) => self.compile(plan, ops),
            None => (NONE, 0),
        };
        self.tbs.push(TbHeader {
            pc,
            flags,
            size,
            ops_start,
            ops_end: idx(self.ops.len()),
            steps_start,
            steps_len,
            dead: false,
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

    fn callback_index(&mut self, cb: &InsnCallback) -> u32 {
        let key = arc_key(cb);
        if let Some(&i) = self.callback_ids.get(&key) {
            return i;
        }
        let i = idx(self.callbacks.len());
        self.callbacks.push(Arc::clone(cb));
        self.callback_ids.insert(key, i);
        i
    }

    fn mem_callback_index(&mut self, cb: &MemCallback) -> u32 {
        let key = arc_key(cb);
        if let Some(&i) = self.mem_callback_ids.get(&key) {
            return i;
        }
        let i = idx(self.mem_callbacks.len());
        self.mem_callbacks.push(Arc::clone(cb));
        self.mem_callback_ids.insert(key, i);
        i
    }

    fn board_index(&mut self, board: &Arc<Scoreboard>) -> u32 {
        let key = arc_key(board);
        if let Some(&i) = self.board_ids.get(&key) {
            return i;
        }
        let i = idx(self.boards.len());
        self.boards.push(Arc::clone(board));
        self.board_ids.insert(key, i);
        i
    }

    fn compile_action(&mut self, action: &Action) -> Step<Op> {
        match action {
            Action::Callback(cb) => Step::Call {
                cb: self.callback_index(cb),
            },
            Action::Inline(op) => Step::Inline {
                board: self.board_index(&op.board),
                slot: idx(op.slot),
                kind: op.kind,
            },
            Action::Conditional(cond, cb) => Step::Conditional {
                cb: self.callback_index(cb),
                board: self.board_index(&cond.board),
                slot: idx(cond.slot),
                compare: cond.compare,
                value: cond.value,
            },
        }
    }

    /// Compiles a plan and the block's ops into a step stream; returns its
    /// (start, len) in `steps`.
    fn compile(&mut self, plan: &TbPlan, ops: &[TbOp<Op>]) -> (u32, u32) {
        let start = self.steps.len();
        for action in &plan.entry {
            let step = self.compile_action(action);
            self.steps.push(step);
        }
        for (insn, op) in plan.insns.iter().zip(ops) {
            for action in &insn.exec {
                let step = self.compile_action(action);
                self.steps.push(step);
            }
            if !insn.mem.is_empty() {
                let mem_start = idx(self.mem_actions.len());
                for (filter, action) in &insn.mem {
                    let kind = match action {
                        MemAction::Callback(cb) => CompiledMemKind::Call {
                            cb: self.mem_callback_index(cb),
                        },
                        MemAction::Inline(op) => CompiledMemKind::Inline {
                            board: self.board_index(&op.board),
                            slot: idx(op.slot),
                            kind: op.kind,
                        },
                    };
                    self.mem_actions.push(CompiledMem {
                        filter: *filter,
                        kind,
                    });
                }
                let calls = insn
                    .mem
                    .iter()
                    .any(|(_, a)| matches!(a, MemAction::Callback(_)));
                self.steps.push(Step::Mem {
                    start: mem_start,
                    len: idx(insn.mem.len()),
                    calls,
                });
            }
            self.steps.push(Step::Insn {
                op: op.op,
                len: op.len,
            });
        }
        (idx(start), idx(self.steps.len() - start))
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
