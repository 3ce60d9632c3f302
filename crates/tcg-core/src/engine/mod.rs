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
//! its [`Vcpu`] context, and epochs are atomics. The loop takes
//! `&mut Engine`, which lets the borrow checker prove that no flush can
//! run while a block (and its callback lists) is in use: flushes requested
//! during a block are deferred to the next block boundary. Guest threads
//! each run an engine of their own, which share what is costly or
//! visible to make once: plans ([`Engine::share_translations`]) and
//! compiled code ([`Engine::share_compiled_code`]).
//!
//! # How a block runs
//!
//! A block's instrumentation plan is compiled when the block is translated
//! (or planned again after [`Engine::reinstrument`]), and that picks once
//! how the block runs (its `ExecMode`, in `cache`): each mode has a loop
//! of its own, so a loop tests only what its blocks can hold. Plugins get
//! the specialised shapes by attaching one shared callback (plugin-api's
//! `on_exec_shared`, `on_mem_shared`). Memory actions on instructions the
//! frontend marks as never accessing memory (`Decoded::accesses_memory`)
//! are dropped at translation, so such instructions run without a hook.
//!
//! | mode | what the plan is | loop | file |
//! |---|---|---|---|
//! | `Plain` | nothing | `exec_plain`, inlined in the vCPU loop (or compiled code, with the JIT on) | `plain.rs` |
//! | `Count` | one inline instruction counter | the plain loop, counts batched across blocks (`PendingCount`) | `tally.rs` |
//! | `Tally` | other inline adds only | `exec_tally_run` | `tally.rs` |
//! | `OnEntry` | actions on block entry only | `exec_on_entry` | `steps.rs` |
//! | `CallEach` | one callback before every instruction | `exec_hooked`, `exec_call_each` | `call_each.rs` |
//! | `CallList` | the same callbacks before every instruction | `exec_call_list` | `call_each.rs` |
//! | `MemEach` | the same memory actions on every access | `exec_watched`, `exec_mem_each` | `mem_each.rs` |
//! | `CallEachWithMem` | `CallEach` and `MemEach` together | `exec_watched_calling` | `mem_each.rs` |
//! | `Steps`, `StepsWithMemory` | anything else | `exec_steps_run` | `steps.rs` |
//!
//! Every loop but the plain one runs out of the vCPU loop (in a function of
//! its own, `#[inline(never)]`: each inlines a copy of the frontend's
//! `execute`, and with all of them in the vCPU loop the plain loop ran
//! slower), and each such call runs a *run* of blocks: when a block ends
//! normally, the loop goes on into the block it is chained to if that one
//! runs the same way, its plan is current and no request or signal is
//! pending (`Engine::run_goes_on`), at most 128 blocks per run. What a run
//! skips is the vCPU loop's other per-block work (quiescent point, signals,
//! counters), which nothing in a run can need: any flush or exit request
//! ends the run first.
//!
//! # Requests
//!
//! A callback asks for a flush, a re-instrumentation or an exit through
//! its context ([`CallbackContext::request_flush`], ...; the context holds
//! them by value, so a loop tests a byte of its own frame): the block ends
//! right after that instruction. A request through a handle ([`FlushHandle`],
//! [`ExitHandle`]: another thread's, or a plugin's `reset` and `uninstall`)
//! is tested once per block by the specialised loops (by the OnEntry loop
//! also right after the entry callbacks), and after each instruction whose
//! callbacks ran by the general loop, where testing it only per block
//! measured slower. Either way the vCPU loop honours it, between blocks.
//!
//! # Files
//!
//! - `mod.rs`: the [`Engine`] and its public API (creation, vCPUs, flush,
//!   re-instrumentation, reclaim, range invalidation, stats, handles, the
//!   JIT switch), the retirement of generations; [`EngineEvents`],
//!   [`EngineStats`].
//! - `vcpu.rs`: [`Vcpu`] (jump cache, epoch slot), [`ExitHandle`],
//!   [`FlushHandle`] and the signals they set.
//! - `run_loop.rs`: [`Engine::run`], [`Engine::run_vcpu`]: the vCPU loop and
//!   its dispatch on the block's mode.
//! - `lookup.rs`: finding the next block (jump cache, index, translation,
//!   planning and re-planning) and the chain links a run follows.
//! - `plain.rs`: the plain loop, a block's and a run's end, runs of
//!   plain-loop blocks.
//! - `tally.rs`: inline adds summed per block and per run (`Tally`,
//!   `Count`), the pending instruction count.
//! - `steps.rs`: the general instrumented loop (a hook per instruction) and
//!   the block-entry loop.
//! - `call_each.rs`: the loops calling the same callbacks before every
//!   instruction.
//! - `mem_each.rs`: the loops running the same memory actions on every
//!   access.
//! - `inlined.rs`: [`InlinedCallback`], [`InlinedMemCallback`]: callbacks
//!   carrying a copy of those loops compiled around them.
//! - `access.rs`: the memory accessors the instrumented loops execute
//!   through, and the call into an instruction callback.
//!
//! [`CallbackContext::request_flush`]: crate::CallbackContext::request_flush

mod access;
mod call_each;
mod inlined;
pub(crate) mod jit_hooks;
mod lookup;
mod mem_each;
mod plain;
mod run_loop;
mod steps;
mod tally;
mod vcpu;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cache::{Generation, PlanSource, SharedTranslations, TbOp};
use crate::frontend::Frontend;
use crate::instrument::{InsnInfo, Instrumentation, TbPlan};
use crate::jit::{JitCompiler, JitConfig, JitError, Start};

pub use inlined::{InlinedCallback, InlinedMemCallback};
pub use vcpu::{ExitHandle, FlushHandle, Vcpu};

use tally::PendingCount;
use vcpu::{OFFLINE, PENDING_FLUSH, PENDING_REINSTRUMENT, Signals};

/// Default cap on blocks per generation before an automatic flush.
const DEFAULT_MAX_TBS: usize = 1 << 22;

/// Largest retired generation kept (emptied) for reuse; a bigger one is
/// freed, so one burst of translation does not pin its memory forever.
const MAX_SPARE_BYTES: usize = 64 << 20;

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

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
    /// Blocks translated or planned again with the plan another engine
    /// sharing translations made for the same bytes
    /// ([`Engine::share_translations`]): decoded here, but the
    /// instrumentation was not asked. Not counted in `tbs_translated` or
    /// `tbs_replanned`, which count what this engine planned itself.
    pub plans_adopted: u64,
    /// Generations alive: the current one plus retired ones not yet freed.
    pub live_generations: u64,
    /// Approximate heap bytes of the current generation.
    pub current_bytes: u64,
    /// Approximate heap bytes of retired generations still waiting for
    /// every vCPU to pass a quiescent point.
    pub retired_bytes: u64,
    /// Blocks compiled to host code by the JIT.
    pub blocks_compiled: u64,
    /// Of those, blocks given code compiled before from the same source
    /// and placed again: by another engine sharing code with this one
    /// (see [`Engine::share_compiled_code`]), or by this one before a
    /// flush. The rest were compiled by Cranelift.
    pub blocks_adopted: u64,
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

/// Two engines' counters together (the engines of one process's threads,
/// say): every counter summed, the gauges (blocks cached, live
/// generations, bytes) as totals over both.
impl std::ops::AddAssign for EngineStats {
    fn add_assign(&mut self, other: EngineStats) {
        let EngineStats {
            tbs_translated,
            tbs_cached,
            blocks_executed,
            index_hits,
            insns_executed,
            flushes,
            reinstrumentations,
            tbs_replanned,
            tbs_invalidated,
            plans_adopted,
            live_generations,
            current_bytes,
            retired_bytes,
            blocks_compiled,
            blocks_adopted,
            compiled_blocks_executed,
            compiled_bytes,
            compiled_entries,
        } = other;
        self.tbs_translated += tbs_translated;
        self.tbs_cached += tbs_cached;
        self.blocks_executed += blocks_executed;
        self.index_hits += index_hits;
        self.insns_executed += insns_executed;
        self.flushes += flushes;
        self.reinstrumentations += reinstrumentations;
        self.tbs_replanned += tbs_replanned;
        self.tbs_invalidated += tbs_invalidated;
        self.plans_adopted += plans_adopted;
        self.live_generations += live_generations;
        self.current_bytes += current_bytes;
        self.retired_bytes += retired_bytes;
        self.blocks_compiled += blocks_compiled;
        self.blocks_adopted += blocks_adopted;
        self.compiled_blocks_executed += compiled_blocks_executed;
        self.compiled_bytes += compiled_bytes;
        self.compiled_entries += compiled_entries;
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
    /// The translations this engine publishes and takes, once it shares
    /// them ([`Engine::share_translations`]).
    translations: Option<Arc<SharedTranslations>>,
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
            translations: None,
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
        let threshold = if config.enabled {
            config.threshold.saturating_add(1)
        } else {
            0
        };
        self.signals
            .jit_threshold
            .store(threshold, Ordering::Relaxed);
        if let Some(last) = self.current.tbs.len().checked_sub(1) {
            self.current.jit.ensure(last as u32);
        }
        Ok(())
    }

    /// Shares compiled code with `other`, the engine of another thread of
    /// the same guest process: a block hot in both is compiled once, and
    /// the engine that meets it second places the first one's code
    /// (`blocks_adopted` in [`EngineStats`]). Only code is shared: each
    /// engine keeps its own blocks, plans and generations. Nothing is
    /// shared while `other` has never had the JIT on; this engine compiles
    /// only while its own JIT is on ([`Engine::set_jit`]).
    pub fn share_compiled_code(&mut self, other: &Engine<F>) {
        let Some(shared) = other.jit.as_ref().map(|j| Arc::clone(j.shared())) else {
            return;
        };
        self.jit = Some(match self.jit.take() {
            Some(mut old) => {
                let published = old.stop_worker(&mut self.current.jit);
                self.stats.blocks_compiled += published as u64;
                old.replaced_by(shared)
            }
            None => JitCompiler::sharing(shared),
        });
    }

    /// Shares translations with `other`, the engine of another thread of
    /// the same guest process (and with every engine sharing them with
    /// `other`): a block is planned once for all of them, as QEMU's
    /// shared block cache translates it once, so an instrumentation's
    /// [`Instrumentation::translate`] (a plugin's `tb_trans`) runs once
    /// per block, whichever thread runs it. Each engine still decodes the
    /// block into its own generation, and takes a published plan only for
    /// the same bytes, under the same [`Instrumentation::plan_stamp`]
    /// (`plans_adopted` in [`EngineStats`]); an instrumentation with no
    /// stamp plans on every engine as before.
    ///
    /// `other` publishes from now on; what it translated before is not
    /// shared: call [`Engine::publish_translations`] on the first engine
    /// of a process before it runs. Between themselves, engines that
    /// share translations publish only while they are more than one, so
    /// that a lone engine's re-planning after a reset costs nothing more.
    pub fn share_translations(&mut self, other: &mut Engine<F>) {
        let shared = Arc::clone(
            other
                .translations
                .get_or_insert_with(|| Arc::new(SharedTranslations::default())),
        );
        self.translations = Some(shared);
    }

    /// Publishes this engine's translations from now on, for engines that
    /// will share them ([`Engine::share_translations`]).
    pub fn publish_translations(&mut self) {
        self.translations
            .get_or_insert_with(|| Arc::new(SharedTranslations::default()));
    }

    /// What this engine's plans are made under, if they may be shared.
    fn plan_source(&self) -> Option<PlanSource> {
        match &self.instrumentation {
            None => Some(PlanSource::Bare),
            Some(instrumentation) => instrumentation.plan_stamp().map(PlanSource::Stamped),
        }
    }

    /// Stops the engine's own host threads (the JIT's background
    /// compiler) after they finish what they hold, so that the host
    /// process can fork: a child has only the forking thread, and a
    /// compiler thread that was not there would leave its blocks waiting
    /// for good. They start again on demand, in parent and child alike.
    pub fn stop_host_threads(&mut self) {
        if let Some(compiler) = self.jit.as_mut() {
            let published = compiler.stop_worker(&mut self.current.jit);
            self.stats.blocks_compiled += published as u64;
        }
    }

    /// The JIT's configuration.
    pub fn jit(&self) -> JitConfig {
        self.jit_config
    }

    /// Compiles block `id` of the current generation (it became hot), or
    /// publishes what the background compiler finished (`start` says
    /// which). Returns whether block `id` now has code.
    #[cold]
    #[inline(never)]
    pub(super) fn jit_start(&mut self, id: u32, start: Start) -> bool {
        let Some(compiler) = self.jit.as_mut() else {
            return false;
        };
        let generation = &mut self.current;
        if start == Start::Waiting {
            let published = compiler.poll(&mut generation.jit);
            self.stats.blocks_compiled += published as u64;
            return published != 0 && crate::jit::code_of(generation, id).is_some();
        }
        let Some(tb) = generation.tbs.get(id as usize).copied() else {
            return false;
        };
        // Nothing whose translation depends on CPU state the code may
        // change jumps straight into other blocks.
        let chain = crate::jit::chain_class(generation, &tb).filter(|_| F::TB_FLAGS_FIXED);
        let plan = crate::jit::plan_code::<F>(generation, &tb);
        if start == Start::Stale {
            let renewed = generation
                .jit
                .renew(id, tb.mode, chain, &plan, tb.plan_version);
            if !renewed {
                generation.jit.forget(id);
            }
            return renewed;
        }
        if tb.mode.instrumented() && plan.is_none() {
            // Unreachable: an instrumented block's plan is in the arrays.
            return false;
        }
        // The ops field alone (not `ops_of`): the JIT blocks are borrowed
        // mutably beside it.
        let Some(ops) = generation
            .ops
            .get(tb.ops_start as usize..tb.ops_end as usize)
        else {
            return false;
        };
        let background = self.jit_config.background;
        let blocks = &mut generation.jit;
        match compiler.compile(
            &self.frontend,
            id,
            &tb,
            ops,
            chain,
            plan,
            background,
            blocks,
        ) {
            Ok(true) => {
                self.stats.blocks_compiled += 1;
                true
            }
            Ok(false) => false,
            // The block stays interpreted; the JIT is not asked again.
            Err(_) => false,
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

    /// Renumbers the built-in vCPU context ([`Engine::run`]'s) as `index`,
    /// for an embedder that runs one engine per vCPU thread: callbacks then
    /// see the vCPU index QEMU would give that thread. Contexts made later
    /// by [`Engine::new_vcpu`] count up from `index + 1`.
    pub fn set_vcpu_index(&mut self, index: u32) {
        if let Some(main) = &mut self.main_vcpu {
            main.index = index;
        }
        self.next_vcpu = self.next_vcpu.max(index.saturating_add(1));
    }

    /// Tells the instrumentation the engine runs no block until the next
    /// `set_idle(false)` (`idle`: its thread is in a syscall, a futex
    /// wait, a sleep), or that it runs them again. Requests that reach it
    /// meanwhile are honoured at its next quiescent point, before any
    /// block runs.
    pub fn set_idle(&self, idle: bool) {
        if let Some(instrumentation) = &self.instrumentation {
            instrumentation.idle(idle);
        }
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
    ///
    /// [`CpuExit::ExitRequested`]: crate::CpuExit::ExitRequested
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
    pub(super) fn apply_code_requests(&mut self, pending: u32) -> bool {
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
        if let Some(shared) = &self.translations {
            shared.invalidate_range(start, len);
        }
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
            compiled_bytes: self.current.jit.code_bytes() as u64,
            blocks_adopted: self.stats.blocks_adopted + self.jit.as_ref().map_or(0, |j| j.adopted),
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
}
