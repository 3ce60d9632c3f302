//! The block cache and the vCPU execution loop.
//!
//! # Generations and quiescent points
//!
//! Every translated block lives in the current cache *generation*. A flush
//! replaces the current generation by an empty one in O(1) and parks the old
//! one in a retirement queue. Each vCPU owns an epoch slot in which it
//! announces, at every quiescent point (between two blocks, where it holds no
//! reference into any generation), the generation it is now using. A parked
//! generation is dropped once every registered vCPU announced a newer one
//! (its callbacks are released then; one emptied generation keeps its
//! allocations to host the next one).
//! Jump-cache entries carry their generation id, so a flush needs no walk
//! over per-vCPU state either.
//!
//! Everything a vCPU needs privately (jump cache, epoch slot, index) is in
//! its [`Vcpu`] context, and epochs are atomics, so sharing one engine among
//! vCPU threads later means publishing the current generation behind a lock
//! for translation, not redesigning reclamation. Today the loop takes
//! `&mut Engine`, which also lets the borrow checker prove that no flush can
//! run while a block (and its callback lists) is in use: flushes requested
//! during a block are deferred to the next block boundary.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::cache::{
    CompiledAction, CompiledMem, CompiledMemKind, CountTally, EMPTY_HOOK, ExecMode, Generation,
    InsnHook, NONE, Tally, TbHeader, TbOp, idx,
};
use crate::frontend::{CpuExit, DecodeError, Flow, Frontend, MemAccess, sign_extend};
use crate::instrument::{
    CallbackContext, CallbackFn, InlineKind, InsnInfo, Instrumentation, MemAccessInfo, MemCallback,
    MemCallbackFn, MemFilter, NoRegisters, Registers, Requests, Scoreboard, TbPlan, TbView,
};
use crate::jit::{JitCompiler, JitConfig, JitError};
use crate::memory::{GuestMemory, MemFault, PAGE_SIZE};

/// Most instructions in one block.
const MAX_BLOCK_INSNS: usize = 512;
/// Entries in each vCPU's direct-mapped jump cache (a power of two).
const JUMP_CACHE_ENTRIES: usize = 4096;
/// Default cap on blocks per generation before an automatic flush.
const DEFAULT_MAX_TBS: usize = 1 << 22;
/// Largest retired generation kept (emptied) for reuse; a bigger one is
/// freed, so one burst of translation does not pin its memory forever.
const MAX_SPARE_BYTES: usize = 64 << 20;
/// Epoch of a vCPU that holds no reference into any generation.
const OFFLINE: u64 = u64::MAX;

const PENDING_EXIT: u32 = 1;
const PENDING_FLUSH: u32 = 2;
const PENDING_REINSTRUMENT: u32 = 4;

/// Most instructions whose inline counts may wait in a [`PendingCount`]:
/// bounds how late readers on other threads see them.
const MAX_PENDING_INSNS: u64 = 4096;

/// The inline adds of consecutive [`ExecMode::Count`] blocks (an inline
/// instruction counter) that go to the same scoreboard entry, summed here
/// instead of updating the scoreboard block by block. The sum reaches the
/// scoreboard before anything on the vCPU can look at it (before an
/// instrumented block, whose callbacks may read it; before a flush; when
/// the loop returns to the embedder), and at least every
/// [`MAX_PENDING_INSNS`] instructions for readers on other threads.
#[derive(Clone, Copy)]
struct PendingCount {
    /// Instructions of Count blocks counted while they all share the
    /// generation's [`CountTally::Shared`] tally, by vCPU `shared_vcpu`.
    shared: u64,
    shared_vcpu: u32,
    /// Index in the current generation's boards; [`NONE`] when empty.
    board: u32,
    slot: u32,
    vcpu: u32,
    per_insn: u64,
    insns: u64,
}

impl PendingCount {
    const EMPTY: PendingCount = PendingCount {
        shared: 0,
        shared_vcpu: 0,
        board: NONE,
        slot: 0,
        vcpu: 0,
        per_insn: 0,
        insns: 0,
    };

    /// Applies the pending sum to `generation`'s scoreboard and empties it.
    #[inline]
    fn settle<Op: Copy>(&mut self, generation: &Generation<Op>) {
        if self.shared != 0 {
            // The tally cannot have changed since: nothing is planned
            // before the pending count is settled.
            if let CountTally::Shared {
                board,
                slot,
                per_insn,
            } = generation.count_tally
                && let Some(board) = generation.boards.get(board as usize)
            {
                board.add_in_row(
                    self.shared_vcpu,
                    slot as usize,
                    per_insn.wrapping_mul(self.shared),
                );
            }
            self.shared = 0;
        }
        if self.board != NONE {
            if let Some(board) = generation.boards.get(self.board as usize) {
                board.add_in_row(
                    self.vcpu,
                    self.slot as usize,
                    self.per_insn.wrapping_mul(self.insns),
                );
            }
            *self = PendingCount::EMPTY;
        }
    }

    /// Counts `executed` instructions of a Count block on `vcpu` while all
    /// of them share the generation's tally.
    #[inline(always)]
    fn add_shared<Op: Copy>(&mut self, generation: &Generation<Op>, vcpu: u32, executed: u32) {
        self.shared += u64::from(executed);
        self.shared_vcpu = vcpu;
        if self.shared >= MAX_PENDING_INSNS {
            self.settle(generation);
        }
    }

    /// Counts `executed` instructions of Count block `tb` on `vcpu`.
    #[inline(always)]
    fn add<Op: Copy>(
        &mut self,
        generation: &Generation<Op>,
        tb: &TbHeader,
        vcpu: u32,
        executed: u32,
    ) {
        let Some(t) = generation.tallies.get(tb.instr_start as usize) else {
            return;
        };
        if self.board == t.board
            && self.slot == t.slot
            && self.per_insn == t.per_insn
            && self.vcpu == vcpu
        {
            self.insns += u64::from(executed);
            if self.insns >= MAX_PENDING_INSNS {
                self.settle(generation);
            }
        } else {
            self.settle(generation);
            *self = PendingCount {
                board: t.board,
                slot: t.slot,
                vcpu,
                per_insn: t.per_insn,
                insns: u64::from(executed),
                ..PendingCount::EMPTY
            };
        }
    }
}

/// Requests that may come from any thread, checked at block boundaries.
#[derive(Default)]
struct Signals {
    pending: AtomicU32,
}

/// Asks a running engine to leave [`Engine::run`] at the next block
/// boundary. Cloneable and usable from any thread.
#[derive(Clone)]
pub struct ExitHandle(Arc<Signals>);

impl ExitHandle {
    /// Requests the exit; [`Engine::run`] returns [`CpuExit::ExitRequested`].
    pub fn request_exit(&self) {
        self.0.pending.fetch_or(PENDING_EXIT, Ordering::Release);
    }
}

impl fmt::Debug for ExitHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExitHandle")
    }
}

/// Asks an engine to flush all translations, or to re-instrument them, at
/// its next safe point: the end of the executing block at the latest (or
/// sooner, after an instruction whose callbacks ran, when the block has
/// several kinds of instrumentation). Cloneable and usable from any thread
/// or callback; this is how a plugin layer implements `reset` and
/// `uninstall`. A callback that needs the flush right after its
/// instruction asks through its context
/// ([`CallbackContext::request_flush`]) instead.
#[derive(Clone)]
pub struct FlushHandle(Arc<Signals>);

impl FlushHandle {
    /// Requests a flush ([`Engine::flush`]).
    pub fn request_flush(&self) {
        self.0.pending.fetch_or(PENDING_FLUSH, Ordering::Release);
    }

    /// Requests a re-instrumentation ([`Engine::reinstrument`]); a flush
    /// requested too is enough for both.
    pub fn request_reinstrument(&self) {
        self.0
            .pending
            .fetch_or(PENDING_REINSTRUMENT, Ordering::Release);
    }
}

impl fmt::Debug for FlushHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FlushHandle")
    }
}

#[derive(Clone, Copy)]
struct JumpEntry {
    pc: u64,
    generation: u64,
    flags: u32,
    tb: u32,
}

const EMPTY_JUMP: JumpEntry = JumpEntry {
    pc: u64::MAX,
    generation: u64::MAX,
    flags: 0,
    tb: NONE,
};

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

/// Per-vCPU execution context: its index, jump cache and epoch slot.
///
/// [`Engine::run`] uses a built-in context (vCPU 0); embedders with several
/// vCPUs create one per vCPU with [`Engine::new_vcpu`] and call
/// [`Engine::run_vcpu`].
pub struct Vcpu {
    index: u32,
    engine: u64,
    epoch: Arc<AtomicU64>,
    announced: u64,
    jump_cache: Box<[JumpEntry]>,
}

impl fmt::Debug for Vcpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vcpu")
            .field("index", &self.index)
            .field("epoch", &self.announced)
            .finish()
    }
}

impl Vcpu {
    fn new(index: u32, engine: u64) -> Self {
        Vcpu {
            index,
            engine,
            epoch: Arc::new(AtomicU64::new(OFFLINE)),
            announced: OFFLINE,
            jump_cache: vec![EMPTY_JUMP; JUMP_CACHE_ENTRIES].into_boxed_slice(),
        }
    }

    /// The vCPU index callbacks see.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Declares that this vCPU holds no reference into any generation until
    /// it runs again (e.g. it is blocked in a long system call), so retired
    /// generations need not wait for it.
    pub fn go_offline(&mut self) {
        self.announced = OFFLINE;
        self.epoch.store(OFFLINE, Ordering::Release);
    }

    #[inline(always)]
    fn announce(&mut self, generation: u64) {
        if self.announced != generation {
            self.announced = generation;
            self.epoch.store(generation, Ordering::Release);
        }
    }

    #[inline(always)]
    fn jump_slot(pc: u64) -> usize {
        // Instructions are at least 2-byte aligned on most guests.
        ((pc >> 1) as usize) & (JUMP_CACHE_ENTRIES - 1)
    }
}

/// Observer of the engine's cache events, for profilers and tracers.
///
/// Called only on the slow paths (translation, flush, range invalidation),
/// never per executed block, so installing a sink leaves the execution loop
/// as it was. Every method defaults to doing nothing: implement only what
/// you record. Install one with [`Engine::set_event_sink`].
///
/// ```
/// use tcgkit_tcg_core::EngineEvents;
///
/// #[derive(Default)]
/// struct Translations { blocks: u64, guest_bytes: u64 }
///
/// impl EngineEvents for Translations {
///     fn block_translated(&mut self, _pc: u64, _insns: u32, bytes: u32) {
///         self.blocks += 1;
///         self.guest_bytes += u64::from(bytes);
///     }
/// }
/// ```
pub trait EngineEvents: Send {
    /// A block starting at guest address `pc` was translated: `insns`
    /// instructions covering `bytes` bytes of guest code.
    fn block_translated(&mut self, pc: u64, insns: u32, bytes: u32) {
        let _ = (pc, insns, bytes);
    }

    /// Every translation was flushed (explicitly, by a `fence.i`, by a
    /// callback's request, by reaching the block cap, or by installing new
    /// instrumentation); `blocks_retired` live blocks went with the
    /// retired generation.
    fn flushed(&mut self, blocks_retired: usize) {
        let _ = blocks_retired;
    }

    /// [`Engine::invalidate_range`] dropped `blocks_dropped` blocks
    /// overlapping `[start, start + len)`.
    fn range_invalidated(&mut self, start: u64, len: u64, blocks_dropped: usize) {
        let _ = (start, len, blocks_dropped);
    }
}

/// Counters describing the engine's work so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Blocks translated.
    pub tbs_translated: u64,
    /// Live blocks in the current generation.
    pub tbs_cached: u64,
    /// Blocks executed (block entries).
    pub blocks_executed: u64,
    /// Block lookups that missed the jump cache but hit the index.
    pub index_hits: u64,
    /// Instructions dispatched (including one that exits or faults).
    pub insns_executed: u64,
    /// Mass flushes performed.
    pub flushes: u64,
    /// Re-instrumentations performed ([`Engine::reinstrument`]).
    pub reinstrumentations: u64,
    /// Blocks whose instrumentation was planned again after a
    /// re-instrumentation (their decoded code was kept).
    pub tbs_replanned: u64,
    /// Blocks dropped by range invalidation.
    pub tbs_invalidated: u64,
    /// Generations alive: the current one plus retired ones not yet freed.
    pub live_generations: u64,
    /// Approximate heap bytes of the current generation.
    pub current_bytes: u64,
    /// Approximate heap bytes of retired generations still waiting for
    /// every vCPU to pass a quiescent point.
    pub retired_bytes: u64,
    /// Blocks compiled to host code by the JIT.
    pub blocks_compiled: u64,
    /// Blocks that ran as compiled code (entered from the loop or
    /// chained to).
    pub compiled_blocks_executed: u64,
    /// Host code bytes of the current generation's compiled blocks.
    pub compiled_bytes: u64,
    /// Times the vCPU loop entered compiled code (each entry runs blocks
    /// until one needs the loop: fewer entries than compiled block runs
    /// means blocks jumped straight into each other).
    pub compiled_entries: u64,
}

/// The engine's fields [`Engine::plan_block`] uses, borrowed apart from
/// the rest so that the block's ops may be borrowed where they are.
struct PlanParts<'a, F: Frontend> {
    instrumentation: Option<&'a dyn Instrumentation>,
    frontend: &'a F,
    insns: &'a [InsnInfo],
    plan: &'a mut TbPlan,
}

/// How a block's execution ended.
struct BlockEnd {
    next_pc: u64,
    executed: u32,
    exit: Option<CpuExit>,
    requests: Requests,
}

/// How a run of instrumented blocks ended: an out-of-line loop goes on
/// into the block the last one is chained to while that one runs the same
/// way (see [`Engine::run_goes_on`]). `end` counts the instructions of the
/// whole run.
struct RunEnd {
    end: BlockEnd,
    /// The id of the run's last block.
    last: u32,
    /// How many blocks ran.
    blocks: u32,
}

/// At most this many blocks run in one out-of-line run before the vCPU
/// loop takes over again: it bounds the run's instruction count well
/// within a `u32`.
const MAX_RUN_BLOCKS: u32 = 128;

/// How many tally keys (scoreboard entries, see `Generation::tally_keys`)
/// a run of tally blocks sums in locals; adds to others go straight to the
/// scoreboard. A block counter uses two.
const RUN_TALLY_KEYS: usize = 4;

/// Adds what `tallies` add for a block left after `executed` instructions
/// (those dispatched, including one that exited) straight to the
/// scoreboards: a block left early mostly ends its run.
#[cold]
#[inline(never)]
fn add_partial_tallies<Op: Copy>(
    generation: &Generation<Op>,
    tallies: &[Tally],
    vcpu: u32,
    executed: u32,
) {
    let Some(last) = (executed as usize).checked_sub(1) else {
        return;
    };
    for t in tallies {
        if let Some(&sum) = generation.tally_sums.get(t.sums_start as usize + last) {
            add_tally(generation, t.key, vcpu, sum);
        }
    }
}

/// Adds `sum` to `vcpu`'s value of the scoreboard entry of tally `key`.
fn add_tally<Op: Copy>(generation: &Generation<Op>, key: u32, vcpu: u32, sum: u64) {
    let Some(&(board, slot)) = generation.tally_keys.get(key as usize) else {
        return;
    };
    if let Some(board) = generation.boards.get(board as usize) {
        board.add_in_row(vcpu, slot as usize, sum);
    }
}

/// The block cache and vCPU loop for frontend `F`.
///
/// ```
/// # use tcgkit_tcg_core::*;
/// # fn demo<F: Frontend>(frontend: F, cpu: &mut F::Cpu, mem: &mut GuestMemory) {
/// let mut engine = Engine::new(frontend);
/// loop {
///     match engine.run(cpu, mem) {
///         CpuExit::Syscall => { /* handle it, advance the pc, go on */ }
///         _ => break,
///     }
/// }
/// # }
/// ```
pub struct Engine<F: Frontend> {
    frontend: F,
    id: u64,
    current: Generation<F::Op>,
    retired: VecDeque<Generation<F::Op>>,
    /// A reclaimed generation, emptied but keeping its allocations: the
    /// next flush starts from it, so re-translating after a reset reuses
    /// warm memory instead of growing (and page-faulting) fresh vectors.
    spare: Option<Generation<F::Op>>,
    next_generation: u64,
    epochs: Vec<Arc<AtomicU64>>,
    next_vcpu: u32,
    main_vcpu: Option<Box<Vcpu>>,
    instrumentation: Option<Arc<dyn Instrumentation>>,
    events: Option<Box<dyn EngineEvents>>,
    signals: Arc<Signals>,
    stats: EngineStats,
    max_tbs: usize,
    scratch_ops: Vec<TbOp<F::Op>>,
    scratch_raws: Vec<u32>,
    scratch_insns: Vec<InsnInfo>,
    scratch_plan: TbPlan,
    pending_count: PendingCount,
    jit_config: JitConfig,
    /// Made when the JIT is first enabled.
    jit: Option<JitCompiler>,
}

impl<F: Frontend> fmt::Debug for Engine<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("generation", &self.current.id)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<F: Frontend> Engine<F> {
    /// An engine with an empty cache, no instrumentation, and one built-in
    /// vCPU context (index 0) used by [`Engine::run`].
    pub fn new(frontend: F) -> Self {
        let id = NEXT_ENGINE_ID.fetch_add(1, Ordering::Relaxed);
        let mut engine = Engine {
            frontend,
            id,
            current: Generation::new(0),
            // Room for a few parked generations, so a flush does not allocate.
            retired: VecDeque::with_capacity(4),
            spare: None,
            next_generation: 1,
            epochs: Vec::new(),
            next_vcpu: 0,
            main_vcpu: None,
            instrumentation: None,
            events: None,
            signals: Arc::new(Signals::default()),
            stats: EngineStats::default(),
            max_tbs: DEFAULT_MAX_TBS,
            scratch_ops: Vec::new(),
            scratch_raws: Vec::new(),
            scratch_insns: Vec::new(),
            scratch_plan: TbPlan::default(),
            pending_count: PendingCount::EMPTY,
            jit_config: JitConfig::OFF,
            jit: None,
        };
        let main = engine.new_vcpu();
        engine.main_vcpu = Some(Box::new(main));
        engine
    }

    /// Turns the JIT on or off (see [`JitConfig`]). Fails, leaving the
    /// engine interpreting, if Cranelift cannot generate code for this
    /// host.
    pub fn set_jit(&mut self, config: JitConfig) -> Result<(), JitError> {
        if config.enabled && self.jit.is_none() {
            self.jit = Some(JitCompiler::new::<F>()?);
        }
        self.jit_config = config;
        if let Some(last) = self.current.tbs.len().checked_sub(1) {
            self.current.jit.ensure(last as u32);
        }
        Ok(())
    }

    /// The JIT's configuration.
    pub fn jit(&self) -> JitConfig {
        self.jit_config
    }

    /// After planning a block: if the inline counters stopped being one
    /// shared count, counter blocks may no longer jump into each other.
    fn count_tally_changed(&mut self, before: CountTally) {
        if matches!(before, CountTally::Shared { .. }) && self.current.count_tally != before {
            self.current.jit.unlink_all();
        }
    }

    /// Compiles block `id` of the current generation (it became hot).
    #[cold]
    #[inline(never)]
    fn jit_compile(&mut self, id: u32) {
        let Some(compiler) = self.jit.as_mut() else {
            return;
        };
        let generation = &mut self.current;
        let Some(tb) = generation.tbs.get(id as usize).copied() else {
            return;
        };
        let Some(ops) = generation
            .ops
            .get(tb.ops_start as usize..tb.ops_end as usize)
        else {
            return;
        };
        // Nothing whose translation depends on CPU state the code may
        // change jumps straight into other blocks.
        let chain = crate::jit::chain_class(generation, &tb).filter(|_| F::TB_FLAGS_FIXED);
        match compiler.compile(&self.frontend, id, &tb, ops, chain, &mut generation.jit) {
            Ok(true) => self.stats.blocks_compiled += 1,
            Ok(false) => {}
            // The block stays interpreted; the JIT is not asked again.
            Err(_) => {}
        }
    }

    /// The frontend.
    pub fn frontend(&self) -> &F {
        &self.frontend
    }

    /// Creates the execution context of another vCPU (indices count up from 1).
    pub fn new_vcpu(&mut self) -> Vcpu {
        let vcpu = Vcpu::new(self.next_vcpu, self.id);
        self.next_vcpu = self.next_vcpu.saturating_add(1);
        self.epochs.push(Arc::clone(&vcpu.epoch));
        vcpu
    }

    /// Caps the number of blocks in one generation; reaching it flushes
    /// (as QEMU does when its code buffer is full). Minimum 1.
    pub fn set_max_tbs(&mut self, max: usize) {
        self.max_tbs = max.max(1);
    }

    /// Installs or removes the instrumentation. Blocks translated under the
    /// previous one are flushed (O(1)), so from the next block on every
    /// block carries exactly what the new instrumentation attaches.
    pub fn set_instrumentation(&mut self, instrumentation: Option<Arc<dyn Instrumentation>>) {
        self.instrumentation = instrumentation;
        self.retire_current();
    }

    /// Installs (or, with `None`, removes) the observer of translations,
    /// flushes and invalidations; returns the previous one.
    pub fn set_event_sink(
        &mut self,
        sink: Option<Box<dyn EngineEvents>>,
    ) -> Option<Box<dyn EngineEvents>> {
        std::mem::replace(&mut self.events, sink)
    }

    /// The installed instrumentation, if any.
    pub fn instrumentation(&self) -> Option<&Arc<dyn Instrumentation>> {
        self.instrumentation.as_ref()
    }

    /// Asks the running vCPU(s) to return [`CpuExit::ExitRequested`] at the
    /// next block boundary. A request made while nothing runs is honoured by
    /// the next [`Engine::run`] before it executes anything.
    pub fn request_exit(&self) {
        self.exit_handle().request_exit();
    }

    /// A handle to [`Engine::request_exit`] for other threads.
    pub fn exit_handle(&self) -> ExitHandle {
        ExitHandle(Arc::clone(&self.signals))
    }

    /// A handle that requests a flush at the next safe point.
    pub fn flush_handle(&self) -> FlushHandle {
        FlushHandle(Arc::clone(&self.signals))
    }

    /// Flushes every translation: retires the current generation in O(1)
    /// whatever its size. Once every vCPU passed a quiescent point its
    /// callbacks are dropped and its memory is freed (or, emptied, kept to
    /// host a later generation, so the re-translation after a flush does not
    /// start from empty vectors). The instrumentation is told through
    /// [`Instrumentation::flushed`].
    pub fn flush(&mut self) {
        self.retire_current();
        self.reclaim();
        if let Some(instr) = &self.instrumentation {
            instr.flushed();
        }
    }

    /// Starts planning every block's instrumentation afresh, keeping the
    /// decoded code: what a plugin reset needs, since the guest code did not
    /// change. O(1): each cached block is planned again (with
    /// [`Instrumentation::translate`]) when it is next entered, and keeps
    /// its place in the cache, the jump caches and the chains. The
    /// instrumentation is told through [`Instrumentation::flushed`], as for
    /// a flush: from its side, every block is translated again.
    ///
    /// A block's new plan takes the old one's place when it fits, and
    /// callbacks no plan names any more are dropped then. A plan that does
    /// not fit leaves the old one behind until the generation is retired;
    /// once such leftovers outweigh the live instrumentation several times
    /// over, this flushes instead.
    pub fn reinstrument(&mut self) {
        // The instrumentation hears of it and may read its scoreboards.
        self.pending_count.settle(&self.current);
        if self.current.plan_version == u32::MAX || self.current.mostly_stale() {
            self.flush();
            return;
        }
        self.current.bump_plan_version();
        // Compiled blocks jump into each other without looking at plans.
        self.current.jit.unlink_all();
        self.scratch_plan.forget();
        self.stats.reinstrumentations += 1;
        if let Some(instr) = &self.instrumentation {
            instr.flushed();
        }
    }

    /// Performs a flush or re-instrumentation requested through a
    /// [`FlushHandle`] (or a callback) now instead of at the next block
    /// boundary; returns whether there was one. For embedders at a safe
    /// point of their own, e.g. before the guest exits, so a plugin's reset
    /// completes. A pending exit request is left in place.
    pub fn flush_if_requested(&mut self) -> bool {
        let code = PENDING_FLUSH | PENDING_REINSTRUMENT;
        let before = self.signals.pending.fetch_and(!code, Ordering::Acquire);
        self.apply_code_requests(before)
    }

    /// Performs the flush or re-instrumentation named in `pending` bits;
    /// returns whether there was one.
    fn apply_code_requests(&mut self, pending: u32) -> bool {
        if pending & PENDING_FLUSH != 0 {
            self.flush();
        } else if pending & PENDING_REINSTRUMENT != 0 {
            self.reinstrument();
        } else {
            return false;
        }
        true
    }

    fn retire_current(&mut self) {
        // Its scoreboard indices die with it.
        self.pending_count.settle(&self.current);
        // The instrumentation may be changing: an uninstalled plugin's
        // callbacks must not stay alive in the scratch plan.
        self.scratch_plan.forget();
        let fresh = match self.spare.take() {
            Some(mut g) => {
                g.id = self.next_generation;
                g
            }
            None => Generation::new(self.next_generation),
        };
        self.next_generation += 1;
        let old = std::mem::replace(&mut self.current, fresh);
        self.stats.flushes += 1;
        if let Some(events) = &mut self.events {
            events.flushed(old.live_tbs());
        }
        if old.tbs.is_empty() {
            // Nothing can point into an empty generation.
            return;
        }
        self.retired.push_back(old);
    }

    /// Frees the retired generations no vCPU can still be using (those
    /// older than every registered vCPU's last quiescent point). The loop
    /// does this itself at block boundaries; an embedder whose vCPUs are all
    /// idle may call it to return memory without running.
    pub fn reclaim(&mut self) {
        if self.retired.is_empty() {
            return;
        }
        // A dropped `Vcpu` leaves its slot with a single owner: forget it.
        self.epochs.retain(|slot| Arc::strong_count(slot) > 1);
        let oldest_in_use = self
            .epochs
            .iter()
            .map(|slot| slot.load(Ordering::Acquire))
            .min()
            .unwrap_or(OFFLINE);
        while self.retired.front().is_some_and(|g| g.id < oldest_in_use) {
            if let Some(mut g) = self.retired.pop_front() {
                // No vCPU can be inside it any more: its callbacks are
                // dropped here; the first one keeps its capacity as the spare.
                if self.spare.is_none() && g.bytes() <= MAX_SPARE_BYTES {
                    g.recycle();
                    self.spare = Some(g);
                }
            }
        }
    }

    /// Drops the translations overlapping `[start, start + len)` (code
    /// unmapped, re-protected or modified). Costs in proportion to the blocks
    /// on the pages of the range, not to the cache size.
    pub fn invalidate_range(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let killed = self.current.invalidate(start, end);
        if killed > 0 {
            // No compiled block may jump into a dead one.
            self.current.jit.unlink_all();
        }
        self.stats.tbs_invalidated += killed as u64;
        if let Some(events) = &mut self.events {
            events.range_invalidated(start, len, killed);
        }
    }

    /// Counters and memory figures.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            tbs_cached: self.current.live_tbs() as u64,
            live_generations: 1 + self.retired.len() as u64,
            current_bytes: self.current.bytes() as u64,
            retired_bytes: self.retired.iter().map(|g| g.bytes() as u64).sum(),
            compiled_bytes: self.current.jit.compiled_stats().1 as u64,
            ..self.stats
        }
    }

    /// Guest address and raw encodings of the cached block at `(pc, flags)`.
    pub fn cached_block(&self, pc: u64, flags: u32) -> Option<Vec<InsnInfo>> {
        let id = self.current.lookup(pc, flags)?;
        let tb = self.current.tbs.get(id as usize)?;
        let (start, end) = (tb.ops_start as usize, tb.ops_end as usize);
        let ops = self.current.ops.get(start..end)?;
        let raws = self.current.raws.get(start..end)?;
        let mut at = tb.pc;
        Some(
            ops.iter()
                .zip(raws)
                .map(|(op, &raw)| {
                    let info = InsnInfo {
                        pc: at,
                        len: op.len,
                        raw,
                    };
                    at = at.wrapping_add(u64::from(op.len));
                    info
                })
                .collect(),
        )
    }

    /// Runs the built-in vCPU (index 0) until something needs the embedder:
    /// a system call, breakpoint, fault, illegal instruction or exit
    /// request. The vCPU's pc is left at the instruction that caused it.
    pub fn run(&mut self, cpu: &mut F::Cpu, mem: &mut GuestMemory) -> CpuExit {
        let mut vcpu = match self.main_vcpu.take() {
            Some(v) => v,
            None => Box::new(self.new_vcpu()),
        };
        let exit = self.run_vcpu(&mut vcpu, cpu, mem);
        // Nothing can execute on the built-in context until the next `run`,
        // so retired generations need not wait for it.
        vcpu.go_offline();
        self.reclaim();
        self.main_vcpu = Some(vcpu);
        exit
    }

    /// Runs `vcpu` (a context from [`Engine::new_vcpu`]) on `cpu`; see
    /// [`Engine::run`].
    // Kept out of `run`: inlined there, the hot loop was measurably slower.
    #[inline(never)]
    pub fn run_vcpu(
        &mut self,
        vcpu: &mut Vcpu,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> CpuExit {
        if vcpu.engine != self.id {
            // A context from another engine: adopt it (its cache is invalid here).
            vcpu.engine = self.id;
            vcpu.jump_cache.fill(EMPTY_JUMP);
            self.epochs.push(Arc::clone(&vcpu.epoch));
        }
        // The pc lives in a local between blocks and is written back to the
        // register file only where something outside the loop can see it
        // (callbacks, exits), saving a store and a load per block.
        let mut pc = F::pc(cpu);
        // Counters also stay local and are added to the stats on the way out.
        let mut blocks = 0u64;
        let mut insns = 0u64;
        // The block that just ran: its chain slots map the next pc straight
        // to a block id. After a flush it may name an unrelated block of the
        // new generation; that is harmless, because a chain slot only ever
        // says "pc P is translated as block Y of this generation", and
        // `chained` re-checks that Y is alive and matches the flags.
        let mut prev = NONE;
        // The empty chain cell the last compiled run left through (see
        // `JitBlocks::link`), linked to the next block if that is compiled.
        let mut unlinked = 0u64;
        let mut unlinked_in = (0u64, 0u32);
        let mut unlinked_class = None;
        let mut jit_blocks = 0u64;
        let mut jit_entries = 0u64;
        let exit = loop {
            // Quiescent point: this vCPU holds no reference into any block.
            vcpu.announce(self.current.id);
            if !self.retired.is_empty() {
                self.reclaim();
            }
            if self.signals.pending.load(Ordering::Relaxed) != 0 {
                let pending = self.signals.pending.swap(0, Ordering::Acquire);
                if self.apply_code_requests(pending) {
                    vcpu.announce(self.current.id);
                }
                if pending & PENDING_EXIT != 0 {
                    break CpuExit::ExitRequested;
                }
            }

            let flags = F::tb_flags(cpu);
            let (tb_id, tb) = match self.current.chained(prev, pc, flags) {
                Some(hit) => hit,
                None => {
                    let id = match self.find_block(vcpu, pc, flags, mem) {
                        Ok(id) => id,
                        Err(exit) => break exit,
                    };
                    self.current.link(prev, pc, id);
                    match self.current.tbs.get(id as usize) {
                        Some(tb) => (id, tb),
                        None => {
                            // Unreachable by construction (ids come from this
                            // generation); recover by starting from an empty cache.
                            self.flush();
                            continue;
                        }
                    }
                }
            };
            if tb.plan_version != self.current.plan_version {
                // Cached before a re-instrumentation: plan it again, then
                // look it up anew (through the same chain slot).
                self.replan(tb_id);
                continue;
            }
            if self.jit_config.enabled
                && matches!(tb.mode, ExecMode::Plain | ExecMode::Count)
                && self
                    .current
                    .jit
                    .count_start(tb_id, self.jit_config.threshold)
            {
                // Hot: compile it, then enter it anew (the same lookup
                // finds it), compiled.
                self.jit_compile(tb_id);
                continue;
            }
            let current = &self.current;
            prev = tb_id;
            blocks += 1;
            // Two copies of the block epilogue: the plain one (also used by
            // blocks whose only instrumentation is an inline instruction
            // counter, batched across blocks) has no callback requests to
            // look at. Other blocks of inline adds only run out of line,
            // in runs (`exec_tally_run`).
            if matches!(tb.mode, ExecMode::Plain | ExecMode::Count) {
                let compiled = if self.jit_config.enabled {
                    if unlinked != 0 {
                        // The compiled block before this one left through
                        // an empty chain cell towards this one, in this
                        // generation and plan version.
                        if crate::jit::chain_class(current, tb) == unlinked_class
                            && unlinked_in == (current.id, current.plan_version)
                        {
                            current.jit.link(unlinked, tb_id);
                        }
                        unlinked = 0;
                    }
                    crate::jit::run::<F>(current, tb_id, cpu, mem)
                } else {
                    None
                };
                let end = match compiled {
                    Some(c) => {
                        jit_blocks += c.blocks;
                        jit_entries += 1;
                        blocks += c.blocks.saturating_sub(1);
                        if c.exit.is_none() {
                            unlinked = c.unlinked;
                            unlinked_in = (current.id, current.plan_version);
                            unlinked_class = crate::jit::chain_class(current, tb);
                        }
                        if c.blocks > 1 {
                            prev = current.jit.unlinked_from(c.unlinked).unwrap_or(NONE);
                        }
                        let executed = u32::try_from(c.executed).unwrap_or(u32::MAX);
                        match c.exit {
                            Some(exit) => {
                                Self::exit_at(exit, c.pc, c.len, executed, Requests::default())
                            }
                            None => BlockEnd {
                                next_pc: c.pc,
                                executed,
                                exit: None,
                                requests: Requests::default(),
                            },
                        }
                    }
                    None => Self::exec_plain(current, tb, cpu, mem),
                };
                if tb.mode == ExecMode::Count {
                    if let CountTally::Shared { .. } = current.count_tally {
                        self.pending_count
                            .add_shared(current, vcpu.index, end.executed)
                    } else {
                        self.pending_count
                            .add(current, tb, vcpu.index, end.executed)
                    }
                }
                insns += u64::from(end.executed);
                pc = end.next_pc;
                match end.exit {
                    None => {}
                    Some(CpuExit::FlushCode) => {
                        unlinked = 0;
                        self.flush()
                    }
                    Some(exit) => break exit,
                }
            } else {
                unlinked = 0;
                // Callbacks may read the scoreboards.
                self.pending_count.settle(current);
                F::set_pc(cpu, pc);
                // Instrumented blocks run out of line (see `exec_hooked`),
                // possibly several in a row.
                let run = match tb.mode {
                    ExecMode::MemEach => {
                        Self::exec_watched(current, &self.signals, vcpu.index, tb_id, tb, cpu, mem)
                    }
                    ExecMode::Steps | ExecMode::StepsWithMemory => {
                        self.exec_steps_run(vcpu.index, tb_id, cpu, mem)
                    }
                    ExecMode::OnEntry => {
                        Self::exec_on_entry(current, &self.signals, vcpu.index, tb_id, tb, cpu, mem)
                    }
                    ExecMode::Tally => Self::exec_tally_run(
                        current,
                        &self.signals,
                        vcpu.index,
                        tb_id,
                        tb,
                        cpu,
                        mem,
                    ),
                    ExecMode::CallEachWithMem => Self::exec_watched_calling(
                        current,
                        &self.signals,
                        vcpu.index,
                        tb_id,
                        tb,
                        cpu,
                        mem,
                    ),
                    ExecMode::CallList => Self::exec_call_list(
                        current,
                        &self.signals,
                        vcpu.index,
                        tb_id,
                        tb,
                        cpu,
                        mem,
                    ),
                    _ => Self::exec_hooked(current, &self.signals, vcpu.index, tb_id, tb, cpu, mem),
                };
                prev = run.last;
                blocks += u64::from(run.blocks) - 1;
                let end = run.end;
                insns += u64::from(end.executed);
                pc = end.next_pc;
                if end.requests.any() {
                    self.block_requests(vcpu, end.requests);
                }
                match end.exit {
                    None => {}
                    // fence.i: drop every translation here, at a safe point,
                    // and resume after the instruction.
                    Some(CpuExit::FlushCode) => self.flush(),
                    Some(exit) => break exit,
                }
            }
        };
        F::set_pc(cpu, pc);
        self.pending_count.settle(&self.current);
        self.stats.blocks_executed += blocks;
        self.stats.insns_executed += insns;
        self.stats.compiled_blocks_executed += jit_blocks;
        self.stats.compiled_entries += jit_entries;
        exit
    }

    /// Honours a flush or exit requested by a callback of the block that
    /// just ended (a safe point).
    #[cold]
    #[inline(never)]
    fn block_requests(&mut self, vcpu: &mut Vcpu, requests: Requests) {
        if requests.flush() {
            self.flush();
            vcpu.announce(self.current.id);
        } else if requests.reinstrument() {
            self.reinstrument();
            vcpu.announce(self.current.id);
        }
        if requests.exit() {
            self.signals
                .pending
                .fetch_or(PENDING_EXIT, Ordering::Relaxed);
        }
    }

    /// Jump cache, then index, then translation: the path for block
    /// transitions direct chaining did not resolve (indirect jumps, first
    /// visits), kept out of line so the chained path stays small.
    #[inline(never)]
    fn find_block(
        &mut self,
        vcpu: &mut Vcpu,
        pc: u64,
        flags: u32,
        mem: &mut GuestMemory,
    ) -> Result<u32, CpuExit> {
        let slot = Vcpu::jump_slot(pc);
        if let Some(e) = vcpu.jump_cache.get(slot)
            && e.pc == pc
            && e.generation == self.current.id
            && e.flags == flags
            && let Some(tb) = self.current.tbs.get(e.tb as usize)
            && !tb.dead
        {
            return Ok(e.tb);
        }
        self.find_block_slow(vcpu, slot, pc, flags, mem)
    }

    #[inline(never)]
    fn find_block_slow(
        &mut self,
        vcpu: &mut Vcpu,
        slot: usize,
        pc: u64,
        flags: u32,
        mem: &mut GuestMemory,
    ) -> Result<u32, CpuExit> {
        let id = match self.current.lookup(pc, flags) {
            Some(id) => {
                self.stats.index_hits += 1;
                id
            }
            None => {
                if self.current.tbs.len() >= self.max_tbs {
                    self.flush();
                    vcpu.announce(self.current.id);
                }
                self.translate(pc, flags, mem)?
            }
        };
        if let Some(e) = vcpu.jump_cache.get_mut(slot) {
            *e = JumpEntry {
                pc,
                generation: self.current.id,
                flags,
                tb: id,
            };
        }
        Ok(id)
    }

    /// Decodes a block at `pc` into the current generation.
    fn translate(&mut self, pc: u64, flags: u32, mem: &mut GuestMemory) -> Result<u32, CpuExit> {
        // The instrumentation's translate may read its scoreboards.
        self.pending_count.settle(&self.current);
        self.scratch_ops.clear();
        self.scratch_raws.clear();
        self.scratch_insns.clear();
        let page = pc / PAGE_SIZE;
        let mut at = pc;
        loop {
            match self.frontend.decode(mem, at) {
                Ok(d) => {
                    let len = d.len.max(1);
                    // Blocks stay within a page plus one instruction, so
                    // the offset always fits.
                    let offset = u32::try_from(at.wrapping_sub(pc)).unwrap_or(u32::MAX);
                    self.scratch_ops.push(TbOp {
                        op: d.op,
                        offset,
                        len,
                        accesses_memory: d.accesses_memory,
                    });
                    self.scratch_raws.push(d.raw);
                    self.scratch_insns.push(InsnInfo {
                        pc: at,
                        len,
                        raw: d.raw,
                    });
                    at = at.wrapping_add(u64::from(len));
                    // Blocks stop at control flow, at a size cap, and at a
                    // page boundary (so page-granular invalidation stays exact).
                    if d.ends_block
                        || self.scratch_ops.len() >= MAX_BLOCK_INSNS
                        || at / PAGE_SIZE != page
                    {
                        break;
                    }
                }
                Err(e) if self.scratch_ops.is_empty() => {
                    return Err(match e {
                        DecodeError::Fault(fault) => CpuExit::Fault(fault),
                        DecodeError::Illegal { raw, .. } => CpuExit::IllegalInstruction { raw },
                    });
                }
                // A later instruction that cannot be decoded starts its own
                // block, so the exit is raised exactly when it is reached.
                Err(_) => break,
            }
        }
        let size = u32::try_from(at.wrapping_sub(pc)).unwrap_or(u32::MAX);
        // (A bare translation does not call out to plan at all.)
        let planned = self.instrumentation.is_some()
            && Self::plan_block(
                PlanParts {
                    instrumentation: self.instrumentation.as_deref(),
                    frontend: &self.frontend,
                    insns: &self.scratch_insns,
                    plan: &mut self.scratch_plan,
                },
                &self.scratch_ops,
                pc,
                flags,
                size,
            );
        let plan = planned.then_some(&*self.scratch_plan.data());
        let shared = self.current.count_tally;
        let id = self
            .current
            .insert(pc, flags, size, &self.scratch_ops, &self.scratch_raws, plan);
        self.count_tally_changed(shared);
        if self.jit_config.enabled {
            self.current.jit.ensure(id);
        }
        // The plan's actions are compiled into the generation now. (With
        // no instrumentation nothing was attached: a bare translation
        // skips this.)
        if self.instrumentation.is_some() {
            self.scratch_plan.clear();
        }
        self.stats.tbs_translated += 1;
        if let Some(events) = &mut self.events {
            events.block_translated(pc, count(self.scratch_ops.len()), size);
        }
        Ok(id)
    }

    /// Asks the instrumentation for the plan of the block whose
    /// instructions are `parts.insns` into `parts.plan`; returns whether
    /// anything was attached. The block's `ops` are read where they are
    /// (re-planning takes them from the generation, not from a copy),
    /// hence the engine's fields passed apart.
    fn plan_block(
        parts: PlanParts<'_, F>,
        ops: &[TbOp<F::Op>],
        pc: u64,
        flags: u32,
        size: u32,
    ) -> bool {
        let PlanParts {
            instrumentation,
            frontend,
            insns,
            plan,
        } = parts;
        let Some(instr) = instrumentation else {
            return false;
        };
        plan.reset(insns.len());
        let disassembler = |raw: &[u8], pc: u64| frontend.disassemble(raw, pc);
        let view = TbView {
            pc,
            flags,
            size: u64::from(size),
            insns,
            disassembler: &disassembler,
            register_names: frontend.register_names(),
        };
        instr.translate(&view, plan);
        // Memory actions on an instruction that never accesses memory
        // could never run: dropping them lets such instructions (most
        // of them, for a plugin that watches every instruction's
        // accesses) run without a hook.
        plan.finish(|i| ops.get(i).is_some_and(|op| op.accesses_memory));
        !plan.is_empty()
    }

    /// Plans block `id` again after a re-instrumentation, from its cached
    /// ops: no fetch, no decode, and it keeps its id.
    #[cold]
    #[inline(never)]
    fn replan(&mut self, id: u32) {
        self.pending_count.settle(&self.current);
        let Some(&tb) = self.current.tbs.get(id as usize) else {
            return;
        };
        self.scratch_insns.clear();
        let range = tb.ops_start as usize..tb.ops_end as usize;
        let (Some(ops), Some(raws)) = (
            self.current.ops.get(range.clone()),
            self.current.raws.get(range),
        ) else {
            return;
        };
        self.scratch_insns
            .extend(ops.iter().zip(raws).map(|(op, &raw)| InsnInfo {
                pc: tb.pc.wrapping_add(u64::from(op.offset)),
                len: op.len,
                raw,
            }));
        let parts = PlanParts {
            instrumentation: self.instrumentation.as_deref(),
            frontend: &self.frontend,
            insns: &self.scratch_insns,
            plan: &mut self.scratch_plan,
        };
        let planned = Self::plan_block(parts, ops, tb.pc, tb.flags, tb.size);
        let shared = self.current.count_tally;
        self.current
            .replan(id, planned.then_some(&*self.scratch_plan.data()));
        self.count_tally_changed(shared);
        self.scratch_plan.clear();
        self.stats.tbs_replanned += 1;
    }

    /// The uninstrumented loop: no callbacks, no dynamic dispatch. Nothing
    /// is carried from op to op but the position in the block: each op's pc
    /// is the block pc plus its stored offset (computed only by the ops that
    /// use it), and the instruction count comes from the position when a
    /// block ends early.
    #[inline(always)]
    fn exec_plain(
        generation: &Generation<F::Op>,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> BlockEnd {
        let ops = generation.ops_of(tb).unwrap_or_default();
        let base = tb.pc;
        let mut iter = ops.iter();
        while let Some(op) = iter.next() {
            let pc = base.wrapping_add(u64::from(op.offset));
            match F::execute(cpu, &op.op, pc, mem) {
                Flow::Next => {}
                Flow::Jump(target) => {
                    // Only a block's last instruction may transfer control,
                    // but a frontend breaking that rule still gets an exact count.
                    let executed = if iter.as_slice().is_empty() {
                        count(ops.len())
                    } else {
                        count(ops.len() - iter.len())
                    };
                    return BlockEnd {
                        next_pc: target,
                        executed,
                        exit: None,
                        requests: Requests::default(),
                    };
                }
                Flow::Exit(exit) => {
                    let executed = count(ops.len() - iter.len());
                    return Self::exit_at(exit, pc, op.len, executed, Requests::default());
                }
            }
        }
        BlockEnd {
            next_pc: base.wrapping_add(u64::from(tb.size)),
            executed: count(ops.len()),
            exit: None,
            requests: Requests::default(),
        }
    }

    /// Where the loop continues after an exiting instruction at `pc`.
    fn exit_at(exit: CpuExit, pc: u64, len: u8, executed: u32, requests: Requests) -> BlockEnd {
        let next_pc = match exit {
            CpuExit::FlushCode => pc.wrapping_add(u64::from(len)),
            _ => pc,
        };
        BlockEnd {
            next_pc,
            executed,
            exit: Some(exit),
            requests,
        }
    }

    /// The instrumented loop: the plain loop's walk over the block's ops,
    /// with each instruction's hook alongside: its actions run before it and
    /// its memory actions during it. Stops after an instruction whose
    /// callbacks requested a flush or exit. Inlined into `exec_steps_run`.
    /// `MEMORY` says whether the block has memory actions; without them,
    /// instructions execute directly on guest memory, as in the plain loop.
    #[inline(always)]
    fn exec_instrumented<const MEMORY: bool>(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> BlockEnd {
        let ops = generation.ops_of(tb).unwrap_or_default();
        let start = tb.instr_start as usize;
        let hooks = generation
            .hooks
            .get(start..start + tb.instr_len as usize)
            .unwrap_or_default();
        let (entry, hooks) = hooks.split_first().unwrap_or((&EMPTY_HOOK, &[]));
        // One accessor for the block. Before each instruction it is pointed at
        // that instruction's memory actions and emptied after it: a borrow of
        // this generation that cannot outlive the generation.
        let mut access = InstrumentedMem {
            mem,
            actions: MemActions {
                actions: &[],
                callbacks: &generation.mem_callbacks,
                boards: &generation.boards,
            },
            vcpu,
            pc: tb.pc,
            requests: Requests::default(),
        };
        let base = tb.pc;
        // Whether a callback ran for the current instruction (only then can
        // a flush or exit have been requested by it).
        let mut called = false;
        if entry.actions_len != 0 {
            called = Self::run_actions(generation, entry, vcpu, base, cpu, &mut access);
        }
        let mut executed = 0u32;
        for (op, hook) in ops.iter().zip(hooks) {
            let pc = base.wrapping_add(u64::from(op.offset));
            // One callback and nothing else (a callback per instruction,
            // shared or each its own, as the `cache` plugin attaches):
            // called without walking the list. In the memory loop too:
            // callgrind, `cache` on integer 200, 5,983.0 M host
            // instructions against 6,516.8 M walking it.
            if hook.sole_call != NONE {
                called = true;
                F::set_pc(cpu, pc);
                if let Some(cb) = generation.callbacks.get(hook.sole_call as usize) {
                    call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                }
            } else if hook.actions_len != 0 {
                called |= Self::run_actions(generation, hook, vcpu, pc, cpu, &mut access);
            }
            executed += 1;
            let flow = if MEMORY {
                if hook.mem_len != 0 {
                    called |= hook.mem_calls;
                    let from = hook.mem_start as usize;
                    access.actions.actions = generation
                        .mem_actions
                        .get(from..from + usize::from(hook.mem_len))
                        .unwrap_or_default();
                }
                access.pc = pc;
                let flow = F::execute(cpu, &op.op, pc, &mut access);
                access.actions.actions = &[];
                flow
            } else {
                F::execute(cpu, &op.op, pc, &mut *access.mem)
            };
            match flow {
                Flow::Next => {}
                Flow::Jump(target) => {
                    return BlockEnd {
                        next_pc: target,
                        executed,
                        exit: None,
                        requests: access.requests,
                    };
                }
                Flow::Exit(exit) => {
                    return Self::exit_at(exit, pc, op.len, executed, access.requests);
                }
            }
            // A flush or exit requested by a callback (through its context
            // or a handle) takes effect now that the instruction is complete.
            if called && (access.requests.any() || signals.pending.load(Ordering::Relaxed) != 0) {
                let next_pc = pc.wrapping_add(u64::from(op.len));
                return BlockEnd {
                    next_pc,
                    executed,
                    exit: None,
                    requests: access.requests,
                };
            }
            called = false;
        }
        BlockEnd {
            next_pc: base.wrapping_add(u64::from(tb.size)),
            executed,
            exit: None,
            requests: access.requests,
        }
    }

    /// Runs a [`ExecMode::Steps`] or [`ExecMode::StepsWithMemory`] block
    /// through the general loop, and the blocks of its kind it leads to (see
    /// [`Engine::run_goes_on`]), also a block cached before a
    /// re-instrumentation: it plans that block again and goes on if it is
    /// still of the run's kind. After a plugin reset every block of a loop
    /// is such a block once; returning to the vCPU loop for each made a
    /// reset cost more than before there were runs (integer, callgrind:
    /// 91.7 k host instructions per reset against 86.8 k; 86.0 k now).
    #[inline(never)]
    fn exec_steps_run(
        &mut self,
        vcpu: u32,
        first: u32,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mode = self
            .current
            .tbs
            .get(first as usize)
            .map_or(ExecMode::Steps, |tb| tb.mode);
        let mut id = first;
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks, and where they ended.
        let mut before = 0u32;
        let mut next_pc = F::pc(cpu);
        loop {
            let generation = &self.current;
            let signals = &self.signals;
            let Some(tb) = generation.tbs.get(id as usize) else {
                // Unreachable: `id` was looked up just before.
                return RunEnd {
                    end: BlockEnd {
                        next_pc,
                        executed: before,
                        exit: None,
                        requests: Requests::default(),
                    },
                    last: id,
                    blocks,
                };
            };
            blocks += 1;
            // Both loops in one function (with the mode tested per block)
            // measured faster than a copy of this loop for each.
            let end = if mode == ExecMode::Steps {
                Self::exec_instrumented::<false>(generation, signals, vcpu, tb, cpu, mem)
            } else {
                Self::exec_instrumented::<true>(generation, signals, vcpu, tb, cpu, mem)
            };
            let executed = before + end.executed;
            let next = Self::link_after(generation, signals, id, &end, cpu, blocks)
                .map(|(next, tb)| (next, tb.plan_version != generation.plan_version, tb.mode));
            let Some((next, stale, next_mode)) = next else {
                return RunEnd {
                    end: BlockEnd { executed, ..end },
                    last: id,
                    blocks,
                };
            };
            let goes_on = if stale {
                // Planned again, it may run another way, and planning may
                // have asked for a flush or exit.
                self.replan(next);
                let replanned = self.current.tbs.get(next as usize).map(|tb| tb.mode);
                replanned == Some(mode) && self.signals.pending.load(Ordering::Relaxed) == 0
            } else {
                next_mode == mode
            };
            if !goes_on {
                return RunEnd {
                    end: BlockEnd { executed, ..end },
                    last: id,
                    blocks,
                };
            }
            (id, before, next_pc) = (next, executed, end.next_pc);
        }
    }

    /// Runs an [`ExecMode::OnEntry`] block: its entry actions, then the
    /// plain loop, where the general loop would test each instruction's
    /// (empty) hook; and the OnEntry blocks it leads to (see
    /// [`Engine::run_goes_on`]). Out of line, like the other instrumented
    /// blocks. A request made by an entry callback, or through a handle and
    /// seen right after the entry callbacks, takes effect after the block's
    /// first instruction, as in the general loop.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn exec_on_entry(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mut access = InstrumentedMem {
            mem,
            actions: MemActions {
                actions: &[],
                callbacks: &generation.mem_callbacks,
                boards: &generation.boards,
            },
            vcpu,
            pc: first_tb.pc,
            requests: Requests::default(),
        };
        Self::plain_run(
            generation,
            signals,
            (first, first_tb),
            cpu,
            |tb, cpu| {
                let entry = generation
                    .hooks
                    .get(tb.instr_start as usize)
                    .unwrap_or(&EMPTY_HOOK);
                let called = Self::run_actions(generation, entry, vcpu, tb.pc, cpu, &mut access);
                if called && (access.requests.any() || signals.pending.load(Ordering::Relaxed) != 0)
                {
                    let requests = access.requests;
                    return Err(Self::exec_first(generation, tb, cpu, access.mem, requests));
                }
                Ok(Self::exec_plain(generation, tb, cpu, access.mem))
            },
            |next_tb| next_tb.mode == ExecMode::OnEntry,
        )
    }

    /// Runs an [`ExecMode::Tally`] block and the tally or plain blocks it
    /// leads into: the plain loop, with each block's adds summed in locals
    /// (per tally key, the first [`RUN_TALLY_KEYS`] of them) and applied to
    /// the scoreboards when the run ends, before anything on the vCPU can
    /// look at them. Out of line: it keeps the uninstrumented loop's
    /// registers, and one call serves the whole run.
    #[inline(never)]
    fn exec_tally_run(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mut sums = [0u64; RUN_TALLY_KEYS];
        let run = Self::plain_run(
            generation,
            signals,
            (first, first_tb),
            cpu,
            |tb, cpu| {
                let end = Self::exec_plain(generation, tb, cpu, mem);
                let start = tb.instr_start as usize;
                let tallies = generation
                    .tallies
                    .get(start..start + tb.instr_len as usize)
                    .unwrap_or_default();
                if end.executed == tb.ops_end.wrapping_sub(tb.ops_start) {
                    for t in tallies {
                        match sums.get_mut(t.key as usize) {
                            Some(pending) => *pending = pending.wrapping_add(t.full),
                            None => add_tally(generation, t.key, vcpu, t.full),
                        }
                    }
                } else {
                    add_partial_tallies(generation, tallies, vcpu, end.executed);
                }
                Ok(end)
            },
            |next_tb| matches!(next_tb.mode, ExecMode::Tally | ExecMode::Plain),
        );
        for (key, &sum) in sums.iter().enumerate() {
            if sum != 0 {
                add_tally(generation, idx(key), vcpu, sum);
            }
        }
        run
    }

    /// A run of blocks, each executed by `block` (the plain loop with
    /// something around it), from the `first` block on: when a block ends
    /// normally, the run goes on into the block it is chained to if that
    /// one's plan is current and `goes_into` takes it (see
    /// [`Engine::run_link`]). `block` returning `Err` ends the run after
    /// that block.
    #[inline(always)]
    fn plain_run<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        (first, first_tb): (u32, &'g TbHeader),
        cpu: &mut F::Cpu,
        mut block: impl FnMut(&'g TbHeader, &mut F::Cpu) -> Result<BlockEnd, BlockEnd>,
        goes_into: impl Fn(&TbHeader) -> bool,
    ) -> RunEnd {
        let (mut id, mut tb) = (first, first_tb);
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks.
        let mut before = 0u32;
        loop {
            blocks += 1;
            let end = match block(tb, cpu) {
                Ok(end) => end,
                Err(end) => {
                    let end = BlockEnd {
                        executed: before + end.executed,
                        ..end
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
            };
            let executed = before + end.executed;
            let next = Self::link_after(generation, signals, id, &end, cpu, blocks).filter(
                |&(_, next_tb)| {
                    next_tb.plan_version == generation.plan_version && goes_into(next_tb)
                },
            );
            match next {
                Some((next, next_tb)) => (id, tb, before) = (next, next_tb, executed),
                None => {
                    return RunEnd {
                        end: BlockEnd { executed, ..end },
                        last: id,
                        blocks,
                    };
                }
            }
        }
    }

    /// Executes the first instruction of `tb` alone, ending the block after
    /// it with `requests`.
    #[cold]
    fn exec_first(
        generation: &Generation<F::Op>,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
        requests: Requests,
    ) -> BlockEnd {
        let Some(op) = generation.ops_of(tb).unwrap_or_default().first() else {
            return BlockEnd {
                next_pc: tb.pc.wrapping_add(u64::from(tb.size)),
                executed: 0,
                exit: None,
                requests,
            };
        };
        let pc = tb.pc.wrapping_add(u64::from(op.offset));
        let next_pc = match F::execute(cpu, &op.op, pc, mem) {
            Flow::Next => pc.wrapping_add(u64::from(op.len)),
            Flow::Jump(target) => target,
            Flow::Exit(exit) => return Self::exit_at(exit, pc, op.len, 1, requests),
        };
        BlockEnd {
            next_pc,
            executed: 1,
            exit: None,
            requests,
        }
    }

    /// Runs a [`ExecMode::CallEach`] block and the CallEach blocks it leads
    /// to (and, should a block's plan not resolve, that block alone through
    /// the general loop). Out of line, like each kind of instrumented block
    /// and unlike the plain loop: each loop inlines a copy of the frontend's
    /// `execute`, and with all of them in the vCPU loop the plain loop ran
    /// 3-6% slower (criterion `plugins/per_insn/none`); a block with
    /// callbacks costs far more than the call.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn exec_hooked<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &'g TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        // One call site per loop. A CallEach or MemEach block whose action
        // cannot be resolved (never, by construction) takes the general
        // loop.
        if let Some(first_cb) = Self::call_each_callback(generation, tb) {
            // A callback built with the loop compiled in for this frontend
            // runs its blocks there.
            if let Some(inlined) = Self::inlined(first_cb.1) {
                let args = RunArgs {
                    generation,
                    signals,
                    vcpu,
                    id,
                    slot: first_cb.0,
                    tb,
                    cpu,
                    mem,
                };
                return (inlined.run)(args);
            }
            let call =
                |(_, cb): (u32, &InsnCallbackFn), ctx: &mut CallbackContext<'_>| cb.call(ctx);
            // Blocks of a run mostly share the callback: it is looked up
            // again only when it changes (and the run ends before a block
            // whose callback has a loop of its own).
            let calls_of = |next_tb: &TbHeader, (slot, cb): (u32, &'g InsnCallbackFn)| {
                let next_slot = Self::call_each_slot(generation, next_tb)?;
                if next_slot == slot {
                    return Some((slot, cb));
                }
                let next_cb = Self::callback_in_slot(generation, next_slot)?;
                match Self::inlined(next_cb) {
                    Some(_) => None,
                    None => Some((next_slot, next_cb)),
                }
            };
            let calls = (first_cb, call, calls_of);
            Self::exec_call_each(generation, signals, vcpu, id, tb, calls, cpu, mem)
        } else {
            // Never, by construction: one block, through the general loop.
            let end = if tb.mode == ExecMode::CallEach {
                Self::exec_instrumented::<false>(generation, signals, vcpu, tb, cpu, mem)
            } else {
                Self::exec_instrumented::<true>(generation, signals, vcpu, tb, cpu, mem)
            };
            RunEnd {
                end,
                last: id,
                blocks: 1,
            }
        }
    }

    /// Runs a [`ExecMode::MemEach`] block, and the MemEach blocks with the
    /// same memory action it leads to. Out of line for the same reason as
    /// `exec_hooked`, and apart from it: with every loop in one function
    /// LLVM stopped inlining guest memory's accessors.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn exec_watched(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let Some(actions) = Self::mem_each_actions(generation, tb) else {
            return Self::exec_hooked(generation, signals, vcpu, id, tb, cpu, mem);
        };
        let Some((action, watch)) = Self::sole_callback(generation, actions) else {
            return Self::exec_watched_several(generation, signals, vcpu, id, tb, cpu, mem);
        };
        // A callback built with the loop compiled in for this frontend
        // runs its blocks there.
        if let Some(inlined) = Self::inlined_mem(watch.0) {
            let args = MemRunArgs {
                generation,
                signals,
                vcpu,
                id,
                action,
                tb,
                cpu,
                mem,
            };
            return (inlined.run)(args);
        }
        // Compared by value: a loop over the slices cost 6 host
        // instructions per access more on the integer guest.
        let same_actions = |next: &[CompiledMem]| matches!(next, [a] if *a == action);
        let watched = (action.filter, watch, same_actions);
        Self::exec_mem_each(generation, signals, vcpu, id, tb, watched, cpu, mem)
    }

    /// Runs a [`ExecMode::CallEachWithMem`] block, and the blocks it leads
    /// into that call the same callback before every instruction and run
    /// the same memory actions on every access (or have no access: CallEach
    /// blocks): the plain loop with the callback before each instruction,
    /// through the general loop's accessor armed once with the actions.
    /// Apart from the MemEach loop: a second copy of that loop (its own
    /// accessor type) took it one register (`mem` on integer: 4% more host
    /// instructions).
    #[inline(never)]
    fn exec_watched_calling<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &'g TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let actions = Self::shared_mem_actions(generation, tb);
        let slot = Self::sole_call_slot(generation, tb);
        let cb = slot.and_then(|slot| Self::callback_in_slot(generation, slot));
        let (Some(actions), Some(slot), Some(cb)) = (actions, slot, cb) else {
            // The general loop, for this block.
            return Self::exec_hooked(generation, signals, vcpu, id, tb, cpu, mem);
        };
        let mut access = InstrumentedMem {
            mem,
            actions: MemActions {
                actions,
                callbacks: &generation.mem_callbacks,
                boards: &generation.boards,
            },
            vcpu,
            pc: tb.pc,
            requests: Requests::default(),
        };
        let block = |tb: &TbHeader, cpu: &mut F::Cpu| {
            let ops = generation.ops_of(tb).unwrap_or_default();
            let base = tb.pc;
            let mut iter = ops.iter();
            while let Some(op) = iter.next() {
                let pc = base.wrapping_add(u64::from(op.offset));
                call::<F>(cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                access.pc = pc;
                let flow = F::execute(cpu, &op.op, pc, &mut access);
                let executed = || count(ops.len() - iter.len());
                match flow {
                    Flow::Next => {}
                    Flow::Jump(target) => {
                        return Ok(BlockEnd {
                            next_pc: target,
                            executed: executed(),
                            exit: None,
                            requests: access.requests,
                        });
                    }
                    Flow::Exit(exit) => {
                        let requests = access.requests;
                        return Err(Self::exit_at(exit, pc, op.len, executed(), requests));
                    }
                }
                // As in the CallEach and MemEach loops: the callbacks' own
                // requests end the block here, a handle's at its end.
                if access.requests.any() {
                    return Err(BlockEnd {
                        next_pc: pc.wrapping_add(u64::from(op.len)),
                        executed: executed(),
                        exit: None,
                        requests: access.requests,
                    });
                }
            }
            Ok(BlockEnd {
                next_pc: base.wrapping_add(u64::from(tb.size)),
                executed: count(ops.len()),
                exit: None,
                requests: access.requests,
            })
        };
        let goes_into = |next_tb: &TbHeader| {
            Self::sole_call_slot(generation, next_tb) == Some(slot)
                && (next_tb.mode == ExecMode::CallEach
                    || next_tb.mode == ExecMode::CallEachWithMem
                        && Self::shared_mem_actions(generation, next_tb) == Some(actions))
        };
        Self::plain_run(generation, signals, (id, tb), cpu, block, goes_into)
    }

    /// [`Engine::exec_watched`] for a block whose accesses each run several
    /// memory actions, or one inline operation. Apart from it: a second
    /// copy of the frontend's `execute` there stopped LLVM inlining guest
    /// memory's accessors.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn exec_watched_several(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let Some(actions) = Self::mem_each_actions(generation, tb) else {
            return Self::exec_hooked(generation, signals, vcpu, id, tb, cpu, mem);
        };
        let by_direction = InlineByDirection::resolve(actions, &generation.boards);
        let watch = SeveralActions {
            actions: MemActions {
                actions,
                callbacks: &generation.mem_callbacks,
                boards: &generation.boards,
            },
            // Resolved by direction, they are inline only.
            inline_only: by_direction.is_some()
                || actions
                    .iter()
                    .all(|a| matches!(a.kind, CompiledMemKind::Inline { .. })),
            by_direction,
        };
        let same_actions = |next: &[CompiledMem]| next == actions;
        // Each action checks its own filter.
        let watched = (MemFilter::All, watch, same_actions);
        Self::exec_mem_each(generation, signals, vcpu, id, tb, watched, cpu, mem)
    }

    /// Whether a run of out-of-line blocks goes on after block `id` ended
    /// at `next_pc` (with no exit) as the `blocks`-th of its run: into the
    /// block `id` is chained to, if nothing asked the loop to stop, the link
    /// is usable, and that block's plan is current. The vCPU loop does the
    /// same checks before any block; what a run skips is the rest of that
    /// loop (quiescent point, pending signals' handling, counters), which
    /// nothing in a run can need: a flush or exit request, a callback's or
    /// another thread's, ends the run first.
    #[inline(always)]
    fn run_goes_on<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        requests: &Requests,
        id: u32,
        next_pc: u64,
        flags: u32,
        blocks: u32,
    ) -> Option<(u32, &'g TbHeader)> {
        Self::run_link(generation, signals, requests, id, next_pc, flags, blocks)
            .filter(|&(_, tb)| tb.plan_version == generation.plan_version)
    }

    /// [`Engine::run_link`] after a block of a run ended with `end`:
    /// `None` after an exit.
    #[inline(always)]
    fn link_after<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        id: u32,
        end: &BlockEnd,
        cpu: &F::Cpu,
        blocks: u32,
    ) -> Option<(u32, &'g TbHeader)> {
        if end.exit.is_some() {
            return None;
        }
        let flags = F::tb_flags(cpu);
        Self::run_link(
            generation,
            signals,
            &end.requests,
            id,
            end.next_pc,
            flags,
            blocks,
        )
    }

    /// [`Engine::run_goes_on`] whatever plan the next block has.
    #[inline(always)]
    fn run_link<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        requests: &Requests,
        id: u32,
        next_pc: u64,
        flags: u32,
        blocks: u32,
    ) -> Option<(u32, &'g TbHeader)> {
        if blocks >= MAX_RUN_BLOCKS
            || requests.any()
            || signals.pending.load(Ordering::Relaxed) != 0
        {
            return None;
        }
        generation.chained(id, next_pc, flags)
    }

    /// The loop of [`ExecMode::CallEach`] blocks: a block's one callback
    /// before each of its instructions, looked up once for the block;
    /// otherwise the plain loop, stopping after an instruction whose
    /// callback requested a flush or exit (or when another thread did). A
    /// block that ends normally leads into the next CallEach block (see
    /// [`Engine::run_goes_on`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn exec_call_each<'g, C: Copy>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &'g TbHeader,
        (first_calls, call, calls_of): (
            C,
            impl Fn(C, &mut CallbackContext<'_>),
            impl Fn(&'g TbHeader, C) -> Option<C>,
        ),
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        // One context for the run: each instruction moves its pc, and
        // executes through the register file and memory it holds.
        let mut ctx = CallbackContext {
            vcpu,
            pc: first_tb.pc,
            mem,
            requests: Requests::default(),
            registers: CpuRegisters::<F>(cpu),
        };
        let (mut id, mut tb, mut calls) = (first, first_tb, first_calls);
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks.
        let mut before = 0u32;
        loop {
            blocks += 1;
            let ops = generation.ops_of(tb).unwrap_or_default();
            let base = tb.pc;
            let mut next_pc = base.wrapping_add(u64::from(tb.size));
            let mut executed = count(ops.len());
            let mut iter = ops.iter();
            while let Some(op) = iter.next() {
                let pc = base.wrapping_add(u64::from(op.offset));
                // The callback reads the pc from here, not from the
                // register file (`CallbackContext::read_register`).
                ctx.pc = pc;
                call(calls, &mut ctx);
                match F::execute(ctx.registers.0, &op.op, pc, ctx.mem) {
                    Flow::Next => {}
                    Flow::Jump(target) => {
                        // Only a block's last instruction may transfer
                        // control; a frontend breaking that rule still gets
                        // an exact count.
                        next_pc = target;
                        executed = count(ops.len() - iter.len());
                        break;
                    }
                    Flow::Exit(exit) => {
                        let executed = before + count(ops.len() - iter.len());
                        let end = Self::exit_at(exit, pc, op.len, executed, ctx.requests);
                        return RunEnd {
                            end,
                            last: id,
                            blocks,
                        };
                    }
                }
                // Only the callback's own requests end the block here;
                // requests through a handle (another thread's, or this
                // callback's) wait for its end (`run_goes_on`): one test of
                // a byte in this frame per instruction.
                if ctx.requests.any() {
                    let end = BlockEnd {
                        next_pc: pc.wrapping_add(u64::from(op.len)),
                        executed: before + count(ops.len() - iter.len()),
                        exit: None,
                        requests: ctx.requests,
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
            }
            before += executed;
            let flags = F::tb_flags(ctx.registers.0);
            let next = Self::run_goes_on(
                generation,
                signals,
                &ctx.requests,
                id,
                next_pc,
                flags,
                blocks,
            )
            .and_then(|(next, next_tb)| Some((next, next_tb, calls_of(next_tb, calls)?)));
            match next {
                Some((next, next_tb, next_calls)) => {
                    (id, tb, calls) = (next, next_tb, next_calls);
                }
                None => {
                    let end = BlockEnd {
                        next_pc,
                        executed: before,
                        exit: None,
                        requests: ctx.requests,
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
            }
        }
    }

    /// The loop of [`ExecMode::CallList`] blocks: [`Engine::exec_call_each`]
    /// with a list of callbacks before each instruction, all of them
    /// called before it executes (as in the general loop), looked up once
    /// per block. Out of line, apart from the CallEach loop, whose code it
    /// leaves alone.
    #[inline(never)]
    fn exec_call_list<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &'g TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let call = |list: &[CompiledAction], ctx: &mut CallbackContext<'_>| {
            for action in list {
                if let CompiledAction::Call { cb } = *action
                    && let Some(cb) = generation.callbacks.get(cb as usize)
                {
                    cb.call(ctx);
                }
            }
        };
        let calls_of = |next_tb: &TbHeader, _| {
            (next_tb.mode == ExecMode::CallList).then(|| Self::call_list(generation, next_tb))
        };
        let calls = (Self::call_list(generation, tb), call, calls_of);
        Self::exec_call_each(generation, signals, vcpu, id, tb, calls, cpu, mem)
    }

    /// The callbacks every instruction of a [`ExecMode::CallList`] block
    /// calls (its first instruction's actions: all are the same calls).
    #[inline(always)]
    fn call_list<'g>(generation: &'g Generation<F::Op>, tb: &TbHeader) -> &'g [CompiledAction] {
        let Some(hook) = generation.hooks.get(tb.instr_start as usize + 1) else {
            return &[];
        };
        let from = hook.actions_start as usize;
        generation
            .actions
            .get(from..from + usize::from(hook.actions_len))
            .unwrap_or_default()
    }

    /// The loop of [`ExecMode::MemEach`] blocks: every instruction runs
    /// through an accessor armed with the block's memory actions (only
    /// instructions that access memory have them, and those all have the
    /// same); stops after an instruction whose callback requested a flush
    /// or exit (or when another thread did). A block that ends normally
    /// leads into the next plain block or MemEach block with the same
    /// actions (see [`Engine::run_goes_on`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn exec_mem_each<W: Fire>(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &TbHeader,
        (filter, watch, same_actions): (MemFilter, W, impl Fn(&[CompiledMem]) -> bool),
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mut access = WatchedMem {
            ctx: CallbackContext::new(vcpu, mem),
            filter,
            watch,
            requested: false,
        };
        let (mut id, mut tb) = (first, first_tb);
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks.
        let mut before = 0u32;
        loop {
            blocks += 1;
            let (next_pc, executed) = if tb.mode == ExecMode::Plain {
                let end = Self::exec_plain(generation, tb, cpu, access.ctx.mem);
                if end.exit.is_some() {
                    let end = BlockEnd {
                        executed: before + end.executed,
                        ..end
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
                (end.next_pc, end.executed)
            } else {
                let ops = generation.ops_of(tb).unwrap_or_default();
                let base = tb.pc;
                let mut next_pc = base.wrapping_add(u64::from(tb.size));
                let mut executed = count(ops.len());
                let mut iter = ops.iter();
                while let Some(op) = iter.next() {
                    let pc = base.wrapping_add(u64::from(op.offset));
                    access.ctx.pc = pc;
                    match F::execute(cpu, &op.op, pc, &mut access) {
                        Flow::Next => {}
                        Flow::Jump(target) => {
                            next_pc = target;
                            executed = count(ops.len() - iter.len());
                            break;
                        }
                        Flow::Exit(exit) => {
                            let executed = before + count(ops.len() - iter.len());
                            let requests = access.ctx.requests;
                            return RunEnd {
                                end: Self::exit_at(exit, pc, op.len, executed, requests),
                                last: id,
                                blocks,
                            };
                        }
                    }
                    // Only a memory callback makes requests through its
                    // context: see `WatchedMem::fire`. Requests through a
                    // handle wait for the block's end (`run_goes_on`).
                    if access.requested {
                        let end = BlockEnd {
                            next_pc: pc.wrapping_add(u64::from(op.len)),
                            executed: before + count(ops.len() - iter.len()),
                            exit: None,
                            requests: access.ctx.requests,
                        };
                        return RunEnd {
                            end,
                            last: id,
                            blocks,
                        };
                    }
                }
                (next_pc, executed)
            };
            before += executed;
            let flags = F::tb_flags(cpu);
            // Blocks with no memory access are plain: the run takes them in
            // too, or it would rarely get past a loop's first block.
            let next = Self::run_goes_on(
                generation,
                signals,
                &access.ctx.requests,
                id,
                next_pc,
                flags,
                blocks,
            )
            .filter(|&(_, next_tb)| {
                next_tb.mode == ExecMode::Plain
                    || Self::mem_each_actions(generation, next_tb).is_some_and(&same_actions)
            });
            match next {
                Some((next, next_tb)) => (id, tb) = (next, next_tb),
                None => {
                    let end = BlockEnd {
                        next_pc,
                        executed: before,
                        exit: None,
                        requests: access.ctx.requests,
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
            }
        }
    }

    /// The slot of the one callback of a [`ExecMode::CallEach`] block in
    /// the generation's callback table (`None` for other blocks).
    #[inline(always)]
    fn call_each_slot(generation: &Generation<F::Op>, tb: &TbHeader) -> Option<u32> {
        if tb.mode != ExecMode::CallEach {
            return None;
        }
        Self::sole_call_slot(generation, tb)
    }

    /// The slot of the one callback every instruction of a
    /// [`ExecMode::CallEach`] or [`ExecMode::CallEachWithMem`] block calls
    /// (meaningless for other blocks).
    #[inline(always)]
    fn sole_call_slot(generation: &Generation<F::Op>, tb: &TbHeader) -> Option<u32> {
        // Hook 0 is the (empty) entry hook; every instruction's hook names
        // the same callback.
        Some(generation.hooks.get(tb.instr_start as usize + 1)?.sole_call)
    }

    /// The one callback of a [`ExecMode::CallEach`] block (`None` for other
    /// blocks), with its slot.
    #[inline(always)]
    fn call_each_callback<'g>(
        generation: &'g Generation<F::Op>,
        tb: &TbHeader,
    ) -> Option<(u32, &'g InsnCallbackFn)> {
        let slot = Self::call_each_slot(generation, tb)?;
        Some((slot, Self::callback_in_slot(generation, slot)?))
    }

    /// The instruction callback in `slot` of the generation's table.
    #[inline(always)]
    fn callback_in_slot(generation: &Generation<F::Op>, slot: u32) -> Option<&InsnCallbackFn> {
        Some(&**generation.callbacks.get(slot as usize)?)
    }

    /// The loop `cb` was compiled into for this frontend, if it was (an
    /// [`InlinedCallback`] of this `F`).
    #[inline(always)]
    fn inlined(cb: &InsnCallbackFn) -> Option<&InlinedLoop<F>> {
        cb.inlined_loop()?.downcast_ref::<InlinedLoop<F>>()
    }

    /// The loop `cb` was compiled into for this frontend, if it was (an
    /// [`InlinedMemCallback`] of this `F`).
    #[inline(always)]
    fn inlined_mem(cb: &MemCallbackDyn) -> Option<&InlinedMemLoop<F>> {
        cb.inlined_loop()?.downcast_ref::<InlinedMemLoop<F>>()
    }

    /// The MemEach loop with `callback` compiled in: an
    /// [`InlinedMemCallback`]'s, run for a block whose one memory action
    /// is calling that one, and on into the blocks with the same action
    /// (or none, as `exec_watched`'s).
    #[inline(never)]
    fn exec_mem_inlined<C>(args: MemRunArgs<'_, '_, F>, callback: &C) -> RunEnd
    where
        C: Fn(&mut CallbackContext<'_>, &MemAccessInfo),
    {
        let MemRunArgs {
            generation,
            signals,
            vcpu,
            id,
            action,
            tb,
            cpu,
            mem,
        } = args;
        let same_actions = |next: &[CompiledMem]| matches!(next, [a] if *a == action);
        let watched = (action.filter, FireWith(callback), same_actions);
        Self::exec_mem_each(generation, signals, vcpu, id, tb, watched, cpu, mem)
    }

    /// The CallEach loop with `callback` compiled in: an
    /// [`InlinedCallback`]'s, run for a block whose one callback is that
    /// one (in `slot`), and on into the blocks calling the same one.
    #[inline(never)]
    fn exec_inlined<C>(args: RunArgs<'_, '_, F>, callback: &C) -> RunEnd
    where
        C: Fn(&mut CallbackContext<'_>),
    {
        let RunArgs {
            generation,
            signals,
            vcpu,
            id,
            slot,
            tb,
            cpu,
            mem,
        } = args;
        let call = |_: u32, ctx: &mut CallbackContext<'_>| callback(ctx);
        let calls_of = |next_tb: &TbHeader, slot: u32| {
            (Self::call_each_slot(generation, next_tb)? == slot).then_some(slot)
        };
        Self::exec_call_each(
            generation,
            signals,
            vcpu,
            id,
            tb,
            (slot, call, calls_of),
            cpu,
            mem,
        )
    }

    /// The memory actions every memory-accessing instruction of a
    /// [`ExecMode::MemEach`] block runs (`None` for other blocks).
    #[inline(always)]
    fn mem_each_actions<'g>(
        generation: &'g Generation<F::Op>,
        tb: &TbHeader,
    ) -> Option<&'g [CompiledMem]> {
        if tb.mode != ExecMode::MemEach {
            return None;
        }
        Self::shared_mem_actions(generation, tb)
    }

    /// The memory actions every memory-accessing instruction of a
    /// [`ExecMode::MemEach`] or [`ExecMode::CallEachWithMem`] block runs
    /// (meaningless for other blocks).
    #[inline(always)]
    fn shared_mem_actions<'g>(
        generation: &'g Generation<F::Op>,
        tb: &TbHeader,
    ) -> Option<&'g [CompiledMem]> {
        // The entry hook names the actions the block's memory-accessing
        // instructions share.
        let entry = generation.hooks.get(tb.instr_start as usize)?;
        let from = entry.mem_start as usize;
        generation
            .mem_actions
            .get(from..from + usize::from(entry.mem_len))
    }

    /// The callback of `actions`, if they are one memory callback (the
    /// usual case: one memory-watching plugin).
    #[inline(always)]
    fn sole_callback<'g>(
        generation: &'g Generation<F::Op>,
        actions: &[CompiledMem],
    ) -> Option<(CompiledMem, CallWatch<'g>)> {
        let [action] = *actions else {
            return None;
        };
        let CompiledMemKind::Call { cb } = action.kind else {
            return None;
        };
        let cb = &**generation.mem_callbacks.get(cb as usize)?;
        Some((action, CallWatch(cb)))
    }

    /// Runs the actions of `hook` (before the instruction at `pc`, or on
    /// block entry); returns whether a callback ran.
    #[inline(always)]
    fn run_actions(
        generation: &Generation<F::Op>,
        hook: &InsnHook,
        vcpu: u32,
        pc: u64,
        cpu: &mut F::Cpu,
        access: &mut InstrumentedMem<'_>,
    ) -> bool {
        let from = hook.actions_start as usize;
        let actions = generation
            .actions
            .get(from..from + usize::from(hook.actions_len))
            .unwrap_or_default();
        let mut called = false;
        for action in actions {
            match *action {
                CompiledAction::Inline { board, slot, kind } => {
                    apply_inline(&generation.boards, vcpu, board, slot, kind);
                }
                CompiledAction::Call { cb } => {
                    called = true;
                    F::set_pc(cpu, pc);
                    if let Some(cb) = generation.callbacks.get(cb as usize) {
                        call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                    }
                }
                CompiledAction::Conditional {
                    cb,
                    board,
                    slot,
                    compare,
                    value,
                } => {
                    let entry = generation
                        .boards
                        .get(board as usize)
                        .map_or(0, |b| b.get(vcpu, slot as usize));
                    if compare.holds(entry, value) {
                        called = true;
                        F::set_pc(cpu, pc);
                        if let Some(cb) = generation.callbacks.get(cb as usize) {
                            call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                        }
                    }
                }
            }
        }
        called
    }
}

/// An instruction count within one block (at most `MAX_BLOCK_INSNS`).
#[inline(always)]
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// An instruction callback behind its `Arc`.
type InsnCallbackFn = dyn CallbackFn;

/// An instruction callback with the engine's loop for blocks that call it
/// before every instruction compiled around it, for frontend `F`: the
/// loop calls it directly, as it executes the frontend's ops, where a
/// plain [`InsnCallback`](crate::InsnCallback) costs an indirect call per instruction. Anywhere
/// else (other shapes of block, an engine of another frontend) it is an
/// ordinary callback.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// # use tcgkit_tcg_core::{CpuExit, DecodeError, Decoded, Flow, Frontend, GuestMemory, MemAccess};
/// use tcgkit_tcg_core::{CallbackContext, InlinedCallback, InsnCallback};
/// # struct Toy;
/// # impl Frontend for Toy {
/// #     type Cpu = u64;
/// #     type Op = ();
/// #     fn pc(cpu: &u64) -> u64 { *cpu }
/// #     fn set_pc(cpu: &mut u64, pc: u64) { *cpu = pc }
/// #     fn decode(&self, _: &mut GuestMemory, pc: u64) -> Result<Decoded<()>, DecodeError> {
/// #         Err(DecodeError::Illegal { pc, raw: 0 })
/// #     }
/// #     fn execute<M: MemAccess>(_: &mut u64, _: &(), _: u64, _: &mut M) -> Flow { Flow::Next }
/// #     fn disassemble(&self, _: &[u8], _: u64) -> String { String::new() }
/// #     fn read_register(_: &u64, _: &str) -> Option<u64> { None }
/// #     fn register_names(&self) -> &'static [&'static str] { &[] }
/// # }
///
/// let count = Arc::new(AtomicU64::new(0));
/// let counter = Arc::clone(&count);
/// // For an engine of the `Toy` frontend.
/// let cb: InsnCallback = Arc::new(InlinedCallback::<Toy, _>::new(
///     move |_: &mut CallbackContext<'_>| {
///         counter.fetch_add(1, Ordering::Relaxed);
///     },
/// ));
/// # let _ = cb;
/// ```
pub struct InlinedCallback<F: Frontend, C> {
    callback: Arc<C>,
    inlined: InlinedLoop<F>,
}

impl<F: Frontend, C> InlinedCallback<F, C>
where
    C: Fn(&mut CallbackContext<'_>) + Send + Sync + 'static,
{
    /// `callback`, with the loop compiled for it.
    pub fn new(callback: C) -> Self {
        let callback = Arc::new(callback);
        let inner = Arc::clone(&callback);
        let run =
            Box::new(move |args: RunArgs<'_, '_, F>| Engine::<F>::exec_inlined(args, &*inner));
        InlinedCallback {
            callback,
            inlined: InlinedLoop { run },
        }
    }
}

impl<F: Frontend, C> CallbackFn for InlinedCallback<F, C>
where
    C: Fn(&mut CallbackContext<'_>) + Send + Sync + 'static,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>) {
        (self.callback)(ctx)
    }

    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        Some(&self.inlined)
    }
}

impl<F: Frontend, C> fmt::Debug for InlinedCallback<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InlinedCallback")
    }
}

/// An [`InlinedCallback`]'s loop without the callback's type, so that
/// the engine can find it behind [`CallbackFn::inlined_loop`].
struct InlinedLoop<F: Frontend> {
    #[allow(clippy::type_complexity)]
    run: Box<dyn for<'g, 'r> Fn(RunArgs<'g, 'r, F>) -> RunEnd + Send + Sync>,
}

/// What [`Engine::exec_hooked`] hands an [`InlinedLoop`].
struct RunArgs<'g, 'r, F: Frontend> {
    generation: &'g Generation<F::Op>,
    signals: &'r Signals,
    vcpu: u32,
    id: u32,
    /// The callback's slot in the generation's table.
    slot: u32,
    tb: &'g TbHeader,
    cpu: &'r mut F::Cpu,
    mem: &'r mut GuestMemory,
}

/// A memory callback with the engine's loop for blocks whose every access
/// runs it (and nothing else) compiled around it, for frontend `F`: the
/// [`InlinedCallback`] of memory callbacks. Anywhere else (other shapes
/// of block, an engine of another frontend) it is an ordinary callback.
pub struct InlinedMemCallback<F: Frontend, C> {
    callback: Arc<C>,
    inlined: InlinedMemLoop<F>,
}

impl<F: Frontend, C> InlinedMemCallback<F, C>
where
    C: Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync + 'static,
{
    /// `callback`, with the loop compiled for it.
    pub fn new(callback: C) -> Self {
        let callback = Arc::new(callback);
        let inner = Arc::clone(&callback);
        let run = Box::new(move |args: MemRunArgs<'_, '_, F>| {
            Engine::<F>::exec_mem_inlined(args, &*inner)
        });
        InlinedMemCallback {
            callback,
            inlined: InlinedMemLoop { run },
        }
    }
}

impl<F: Frontend, C> MemCallbackFn for InlinedMemCallback<F, C>
where
    C: Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync + 'static,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        (self.callback)(ctx, info)
    }

    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        Some(&self.inlined)
    }
}

impl<F: Frontend, C> fmt::Debug for InlinedMemCallback<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InlinedMemCallback")
    }
}

/// An [`InlinedMemCallback`]'s loop without the callback's type.
struct InlinedMemLoop<F: Frontend> {
    #[allow(clippy::type_complexity)]
    run: Box<dyn for<'g, 'r> Fn(MemRunArgs<'g, 'r, F>) -> RunEnd + Send + Sync>,
}

/// What [`Engine::exec_watched`] hands an [`InlinedMemLoop`].
struct MemRunArgs<'g, 'r, F: Frontend> {
    generation: &'g Generation<F::Op>,
    signals: &'r Signals,
    vcpu: u32,
    id: u32,
    /// The block's one memory action (calling the callback).
    action: CompiledMem,
    tb: &'g TbHeader,
    cpu: &'r mut F::Cpu,
    mem: &'r mut GuestMemory,
}

/// An inlined memory callback as a MemEach loop's [`Fire`].
struct FireWith<'a, C>(&'a C);

impl<C> Fire for FireWith<'_, C>
where
    C: Fn(&mut CallbackContext<'_>, &MemAccessInfo),
{
    #[inline(always)]
    fn fire(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        (self.0)(ctx, info);
    }
}

/// Runs an instruction or block-entry callback. Inlined into the
/// instrumented loop: out of line, LLVM passed the callback's fat pointer
/// through the stack, and reloading it stalled on store forwarding.
#[inline(always)]
fn call<F: Frontend>(
    cb: &InsnCallbackFn,
    vcpu: u32,
    pc: u64,
    cpu: &mut F::Cpu,
    mem: &mut GuestMemory,
    requests: &mut Requests,
) {
    let mut ctx = CallbackContext {
        vcpu,
        pc,
        mem,
        requests: Requests::default(),
        registers: CpuRegisters::<F>(cpu),
    };
    cb.call(&mut ctx);
    requests.merge(ctx.requests);
}

/// The executing vCPU's register file, as callbacks read it. A CallEach
/// block's one context holds it, and the block's instructions execute
/// through it; elsewhere a context made for one call borrows it.
struct CpuRegisters<'a, F: Frontend>(&'a mut F::Cpu);

impl<F: Frontend> Registers for CpuRegisters<'_, F> {
    #[inline]
    fn read(&self, name: &str) -> Option<u64> {
        F::read_register(self.0, name)
    }
}

/// A memory callback behind its `Arc`.
type MemCallbackDyn = dyn MemCallbackFn;

/// The one memory callback of a [`ExecMode::MemEach`] block (the usual
/// case), resolved once for the block.
struct CallWatch<'a>(&'a MemCallbackDyn);

/// What a [`ExecMode::MemEach`] block runs on each access: its one callback
/// ([`CallWatch`]) or its actions ([`MemActions`]).
trait Fire {
    /// Runs the actions for access `info`, made by the instruction `ctx`
    /// describes.
    fn fire(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo);
}

impl Fire for CallWatch<'_> {
    #[inline(always)]
    fn fire(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        self.0.call(ctx, info);
    }
}

impl Fire for MemActions<'_> {
    #[inline]
    fn fire(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        let requests = self.run(ctx.vcpu, ctx.pc, ctx.mem, info);
        ctx.requests.merge(requests);
    }
}

/// The memory actions of an [`Engine::exec_watched_several`] run.
struct SeveralActions<'a> {
    actions: MemActions<'a>,
    /// No callback among them: an access then leaves the callback context
    /// alone (measured: `mem,inline=on` 1,800.1 -> 1,713.7 M host
    /// instructions on the integer guest).
    inline_only: bool,
    /// Set when they are inline operations only, at most one for each
    /// direction of access: see [`InlineByDirection`].
    by_direction: Option<InlineByDirection<'a>>,
}

/// An inline operation with its board looked up and its slot known to be
/// inside the board's row.
#[derive(Clone, Copy)]
struct RowOp<'a> {
    board: &'a Scoreboard,
    slot: usize,
    kind: InlineKind,
}

/// The inline operation a load applies and the one a store applies,
/// resolved once per run: an access then makes no filter test and no
/// board lookup, and checks one bound (measured: `mem,inline=on` on the
/// integer guest 1,709.1 -> 1,472.3 M host instructions, user time
/// +5.2-5.6 -> +3.6-4.3 ns per access on integer, malloc and lua).
#[derive(Clone, Copy)]
struct InlineByDirection<'a> {
    /// For loads, then for stores.
    ops: [Option<RowOp<'a>>; 2],
}

impl<'a> InlineByDirection<'a> {
    /// `None` if `actions` hold a callback, or two operations for one
    /// direction (their order would matter). An operation on a missing
    /// board or past the row does nothing, as [`apply_inline`]'s does, and
    /// is left out.
    fn resolve(actions: &[CompiledMem], boards: &'a [Arc<Scoreboard>]) -> Option<Self> {
        let mut ops = [None; 2];
        for action in actions {
            let CompiledMemKind::Inline { board, slot, kind } = action.kind else {
                return None;
            };
            let slot = slot as usize;
            let Some(board) = boards.get(board as usize).filter(|b| slot < b.slots()) else {
                continue;
            };
            for is_store in [false, true] {
                if action.filter.matches(is_store) {
                    let op = &mut ops[usize::from(is_store)];
                    if op.is_some() {
                        return None;
                    }
                    *op = Some(RowOp { board, slot, kind });
                }
            }
        }
        Some(InlineByDirection { ops })
    }

    #[inline(always)]
    fn apply(&self, vcpu: u32, is_store: bool) {
        if let Some(op) = &self.ops[usize::from(is_store)] {
            op.board.apply_in_row(vcpu, op.slot, op.kind);
        }
    }
}

impl Fire for SeveralActions<'_> {
    #[inline(always)]
    fn fire(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        if let Some(by_direction) = &self.by_direction {
            by_direction.apply(ctx.vcpu, info.is_store);
        } else if self.inline_only {
            for action in self.actions.actions {
                if let CompiledMemKind::Inline { board, slot, kind } = action.kind
                    && action.filter.matches(info.is_store)
                {
                    apply_inline(self.actions.boards, ctx.vcpu, board, slot, kind);
                }
            }
        } else {
            self.actions.fire(ctx, info);
        }
    }
}

/// Applies inline operation `kind` to `slot` of `vcpu`'s row of board
/// `board`.
#[inline(always)]
fn apply_inline(boards: &[Arc<Scoreboard>], vcpu: u32, board: u32, slot: u32, kind: InlineKind) {
    if let Some(b) = boards.get(board as usize) {
        b.apply(vcpu, slot as usize, kind);
    }
}

/// Guest memory as a [`ExecMode::MemEach`] block sees it: each access
/// `filter` selects runs the block's actions. The callback context is made
/// once per block (the loop moves its pc along), not once per access.
struct WatchedMem<'a, W> {
    ctx: CallbackContext<'a, NoRegisters>,
    filter: MemFilter,
    watch: W,
    /// Whether a callback made a request through its context: one flag,
    /// apart from the context the callbacks get, that the loop tests after
    /// each instruction (measured: 4.9 host instructions fewer per access
    /// on the integer guest than testing the context's requests).
    requested: bool,
}

impl<W: Fire> WatchedMem<'_, W> {
    #[inline]
    fn fire(&mut self, info: MemAccessInfo) {
        self.watch.fire(&mut self.ctx, &info);
        if self.ctx.requests.any() {
            self.requested = true;
        }
    }
}

impl<W: Fire> MemAccess for WatchedMem<'_, W> {
    #[inline(always)]
    fn load(&mut self, addr: u64, size: u8, signed: bool) -> Result<u64, MemFault> {
        let raw = self.ctx.mem.load(addr, size)?;
        let value = if signed { sign_extend(raw, size) } else { raw };
        if self.filter.matches(false) {
            self.fire(MemAccessInfo {
                addr,
                size,
                sign_extended: signed,
                is_store: false,
                value,
            });
        }
        Ok(value)
    }

    #[inline(always)]
    fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.ctx.mem.store(addr, size, value)?;
        if self.filter.matches(true) {
            self.fire(MemAccessInfo {
                addr,
                size,
                sign_extended: false,
                is_store: true,
                value: stored_bits(value, size),
            });
        }
        Ok(())
    }

    fn memory(&mut self) -> &mut GuestMemory {
        self.ctx.mem
    }
}

/// The low `size` bytes of a stored `value`, as memory actions see it.
#[inline(always)]
fn stored_bits(value: u64, size: u8) -> u64 {
    match size {
        1 => value & 0xff,
        2 => value & 0xffff,
        4 => value & 0xffff_ffff,
        _ => value,
    }
}

/// Guest memory as an instrumented instruction sees it: each access runs the
/// instruction's memory actions, borrowed for this instruction only.
/// [`WatchedMem`] is its twin for MemEach blocks; one generic accessor for
/// both measured slower (criterion: `none` +2%, the memory callback +13%).
struct InstrumentedMem<'a> {
    mem: &'a mut GuestMemory,
    /// The executing instruction's memory actions (none between
    /// instructions).
    actions: MemActions<'a>,
    vcpu: u32,
    pc: u64,
    requests: Requests,
}

impl InstrumentedMem<'_> {
    #[inline]
    fn notify(&mut self, info: MemAccessInfo) {
        let requests = self.actions.run(self.vcpu, self.pc, self.mem, &info);
        self.requests.merge(requests);
    }
}

/// Memory actions with the tables their indices point into.
#[derive(Clone, Copy)]
struct MemActions<'a> {
    actions: &'a [crate::cache::CompiledMem],
    callbacks: &'a [MemCallback],
    boards: &'a [Arc<Scoreboard>],
}

impl MemActions<'_> {
    /// Runs the actions whose filter selects the access `info` made by the
    /// instruction at `pc` on `vcpu`; returns what their callbacks requested.
    #[inline]
    fn run(&self, vcpu: u32, pc: u64, mem: &mut GuestMemory, info: &MemAccessInfo) -> Requests {
        let mut requests = Requests::default();
        for action in self.actions {
            if !action.filter.matches(info.is_store) {
                continue;
            }
            match action.kind {
                CompiledMemKind::Inline { board, slot, kind } => {
                    apply_inline(self.boards, vcpu, board, slot, kind);
                }
                CompiledMemKind::Call { cb } => {
                    if let Some(cb) = self.callbacks.get(cb as usize) {
                        let mut ctx = CallbackContext {
                            pc,
                            ..CallbackContext::new(vcpu, &mut *mem)
                        };
                        cb.call(&mut ctx, info);
                        requests.merge(ctx.requests);
                    }
                }
            }
        }
        requests
    }
}

impl MemAccess for InstrumentedMem<'_> {
    // Forced inline like `GuestMemory`'s own impl: a frontend's `execute`
    // is large, and left to itself LLVM calls these out of line.
    #[inline(always)]
    fn load(&mut self, addr: u64, size: u8, signed: bool) -> Result<u64, MemFault> {
        let raw = self.mem.load(addr, size)?;
        let value = if signed { sign_extend(raw, size) } else { raw };
        if !self.actions.actions.is_empty() {
            self.notify(MemAccessInfo {
                addr,
                size,
                sign_extended: signed,
                is_store: false,
                value,
            });
        }
        Ok(value)
    }

    #[inline(always)]
    fn store(&mut self, addr: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.mem.store(addr, size, value)?;
        if !self.actions.actions.is_empty() {
            self.notify(MemAccessInfo {
                addr,
                size,
                sign_extended: false,
                is_store: true,
                value: stored_bits(value, size),
            });
        }
        Ok(())
    }

    fn memory(&mut self) -> &mut GuestMemory {
        self.mem
    }
}
