//! Per-vCPU state, and the requests any thread can make of a running
//! engine.
//!
//! A [`Vcpu`] holds everything one vCPU needs privately: its index, its
//! direct-mapped jump cache (entries tagged with their generation, so a
//! flush needs no walk over them) and its epoch slot, where the vCPU
//! announces at every quiescent point the generation it is using (see the
//! parent module). [`ExitHandle`] and [`FlushHandle`] set bits in the
//! engine's shared [`Signals`], which the vCPU loop tests once per block.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::cache::NONE;

/// Entries in each vCPU's direct-mapped jump cache (a power of two).
const JUMP_CACHE_ENTRIES: usize = 4096;

/// Epoch of a vCPU that holds no reference into any generation.
pub(super) const OFFLINE: u64 = u64::MAX;

pub(super) const PENDING_EXIT: u32 = 1;

pub(super) const PENDING_FLUSH: u32 = 2;

pub(super) const PENDING_REINSTRUMENT: u32 = 4;

thread_local! {
    /// Set by a request made through a handle on this thread. A callback's
    /// request ends its block after the instruction (its plan may be gone
    /// by the next), but a request from another thread (a kick, another
    /// vCPU's reset) waits for the block's end, as QEMU's `cpu_exit` waits
    /// for the TB's: a block left midway would be entered again at the
    /// instruction after, and a per-block count would count its tail twice.
    static ASKED_ON_THIS_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether a handle was asked something on this thread since the last
/// call (or [`forget_asked_on_this_thread`]); clears it. Called after a
/// callback ran: what it asked through a handle then takes effect after
/// its instruction, as what it asks through its context does.
#[inline]
pub(crate) fn take_asked_on_this_thread() -> bool {
    // Read first: a store on every callback's way out, for a note that is
    // almost never there, would cost more.
    ASKED_ON_THIS_THREAD.with(|asked| asked.get() && asked.replace(false))
}

/// Forgets requests this thread made outside callbacks (of other
/// engines, say), so that they do not end one of its blocks early.
pub(super) fn forget_asked_on_this_thread() {
    ASKED_ON_THIS_THREAD.with(|asked| asked.set(false));
}

fn note_asked_on_this_thread() {
    ASKED_ON_THIS_THREAD.with(|asked| asked.set(true));
}

/// Requests that may come from any thread, checked at block boundaries.
#[derive(Default)]
pub(super) struct Signals {
    pub(super) pending: AtomicU32,
    /// With the JIT on, its threshold plus one (0: off): the interpreter's
    /// runs count the starts of the blocks they go on into and end where
    /// the vCPU loop should compile or run compiled code.
    pub(super) jit_threshold: AtomicU32,
}

/// Asks a running engine to leave [`Engine::run`] at the next block
/// boundary (asked from a callback on the engine's own thread: once the
/// callback's instruction is complete). Cloneable and usable from any
/// thread.
///
/// [`Engine::run`]: crate::Engine::run
#[derive(Clone)]
pub struct ExitHandle(pub(super) Arc<Signals>);

impl ExitHandle {
    /// Requests the exit; [`Engine::run`] returns [`CpuExit::ExitRequested`].
    ///
    /// [`Engine::run`]: crate::Engine::run
    /// [`CpuExit::ExitRequested`]: crate::CpuExit::ExitRequested
    pub fn request_exit(&self) {
        self.0.pending.fetch_or(PENDING_EXIT, Ordering::Release);
        note_asked_on_this_thread();
    }
}

impl fmt::Debug for ExitHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExitHandle")
    }
}

/// Asks an engine to flush all translations, or to re-instrument them, at
/// its next safe point: the end of the executing block (or sooner, when
/// asked from a callback on the engine's own thread: once the callback's
/// instruction is complete). Cloneable and usable from any thread
/// or callback; this is how a plugin layer implements `reset` and
/// `uninstall`. A callback that needs the flush right after its
/// instruction asks through its context
/// ([`CallbackContext::request_flush`]) instead.
///
/// [`CallbackContext::request_flush`]: crate::CallbackContext::request_flush
#[derive(Clone)]
pub struct FlushHandle(pub(super) Arc<Signals>);

impl FlushHandle {
    /// Requests a flush ([`Engine::flush`]).
    ///
    /// [`Engine::flush`]: crate::Engine::flush
    pub fn request_flush(&self) {
        self.0.pending.fetch_or(PENDING_FLUSH, Ordering::Release);
        note_asked_on_this_thread();
    }

    /// Requests a re-instrumentation ([`Engine::reinstrument`]); a flush
    /// requested too is enough for both.
    ///
    /// [`Engine::reinstrument`]: crate::Engine::reinstrument
    pub fn request_reinstrument(&self) {
        self.0
            .pending
            .fetch_or(PENDING_REINSTRUMENT, Ordering::Release);
        note_asked_on_this_thread();
    }
}

impl fmt::Debug for FlushHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FlushHandle")
    }
}

#[derive(Clone, Copy)]
pub(super) struct JumpEntry {
    pub(super) pc: u64,
    pub(super) generation: u64,
    pub(super) flags: u32,
    pub(super) tb: u32,
}

pub(super) const EMPTY_JUMP: JumpEntry = JumpEntry {
    pc: u64::MAX,
    generation: u64::MAX,
    flags: 0,
    tb: NONE,
};

/// Per-vCPU execution context: its index, jump cache and epoch slot.
///
/// [`Engine::run`] uses a built-in context (vCPU 0); embedders with several
/// vCPUs create one per vCPU with [`Engine::new_vcpu`] and call
/// [`Engine::run_vcpu`].
///
/// [`Engine::run`]: crate::Engine::run
/// [`Engine::new_vcpu`]: crate::Engine::new_vcpu
/// [`Engine::run_vcpu`]: crate::Engine::run_vcpu
pub struct Vcpu {
    pub(super) index: u32,
    pub(super) engine: u64,
    pub(super) epoch: Arc<AtomicU64>,
    announced: u64,
    pub(super) jump_cache: Box<[JumpEntry]>,
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
    pub(super) fn new(index: u32, engine: u64) -> Self {
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
    pub(super) fn announce(&mut self, generation: u64) {
        if self.announced != generation {
            self.announced = generation;
            self.epoch.store(generation, Ordering::Release);
        }
    }

    #[inline(always)]
    pub(super) fn jump_slot(pc: u64) -> usize {
        // Instructions are at least 2-byte aligned on most guests.
        ((pc >> 1) as usize) & (JUMP_CACHE_ENTRIES - 1)
    }
}
