//! Callbacks that carry a copy of the engine's loop compiled around them:
//! [`InlinedCallback`] and [`InlinedMemCallback`].
//!
//! An `InlinedCallback<F, C>` is an ordinary instruction callback that also
//! holds the CallEach loop monomorphized for frontend `F` and its closure
//! type `C` ([`Engine::exec_inlined`]), behind
//! [`CallbackFn::inlined_loop`]. [`Engine::exec_hooked`] finds that loop by
//! downcasting to `F`'s [`InlinedLoop`] and runs the block there, and the
//! blocks after it that call the same callback: the callback inlined, no
//! indirect call per instruction. On another shape of block, or in an
//! engine of another frontend, it is called like any callback.
//! `InlinedMemCallback` is the same for memory callbacks and the MemEach
//! loop ([`Engine::exec_mem_inlined`], found by [`Engine::exec_watched`]).
//! plugin-api builds them with `PluginHandle::inlined_exec_callback::<F>`
//! and `inlined_mem_callback::<F>`, which the `insn` and `mem` plugins use
//! when `PluginRegistry::bundled_for::<F>` built them (the CLI does, for
//! `Rv64`).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::Engine;
use super::access::{Fire, InsnCallbackFn, MemCallbackDyn};
use super::plain::RunEnd;
use super::vcpu::Signals;
use crate::cache::{CompiledMem, Generation, TbHeader};
use crate::frontend::Frontend;
use crate::instrument::{CallbackContext, CallbackFn, MemAccessInfo, MemCallbackFn};
use crate::memory::GuestMemory;

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
    C: CallbackFn + 'static,
{
    /// `callback`, with the loop compiled for it.
    pub fn new(callback: C) -> Self {
        let callback = Arc::new(callback);
        let inner = Arc::clone(&callback);
        let run =
            Box::new(move |args: RunArgs<'_, '_, F>| Engine::<F>::exec_inlined(args, &*inner));
        let direct = DirectCall {
            entry: crate::jit::direct_insn_entry::<F, C>(),
            data: Arc::as_ptr(&callback) as usize,
        };
        InlinedCallback {
            callback,
            inlined: InlinedLoop { run, direct },
        }
    }
}

impl<F: Frontend, C> CallbackFn for InlinedCallback<F, C>
where
    C: CallbackFn + 'static,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>) {
        self.callback.call(ctx)
    }

    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        Some(&self.inlined)
    }

    fn reads_registers(&self) -> bool {
        self.callback.reads_registers()
    }
}

impl<F: Frontend, C> fmt::Debug for InlinedCallback<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InlinedCallback")
    }
}

/// An [`InlinedCallback`]'s loop without the callback's type, so that
/// the engine can find it behind [`CallbackFn::inlined_loop`].
pub(crate) struct InlinedLoop<F: Frontend> {
    #[allow(clippy::type_complexity)]
    pub(super) run: Box<dyn for<'g, 'r> Fn(RunArgs<'g, 'r, F>) -> RunEnd + Send + Sync>,
    /// What compiled code calls instead of the loop.
    pub(crate) direct: DirectCall,
}

/// An inlined callback as compiled code calls it: a host function made
/// for its closure type (see `jit::direct_insn_entry`), passed the
/// closure's address, which lives as long as the callback.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectCall {
    pub(crate) entry: usize,
    pub(crate) data: usize,
}

/// What [`Engine::exec_hooked`] hands an [`InlinedLoop`].
pub(super) struct RunArgs<'g, 'r, F: Frontend> {
    pub(super) generation: &'g Generation<F::Op>,
    pub(super) signals: &'r Signals,
    pub(super) vcpu: u32,
    pub(super) id: u32,
    /// The callback's slot in the generation's table.
    pub(super) slot: u32,
    pub(super) tb: &'g TbHeader,
    pub(super) cpu: &'r mut F::Cpu,
    pub(super) mem: &'r mut GuestMemory,
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
        let direct = DirectCall {
            entry: crate::jit::direct_mem_entry::<C>(),
            data: Arc::as_ptr(&callback) as usize,
        };
        InlinedMemCallback {
            callback,
            inlined: InlinedMemLoop { run, direct },
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
pub(crate) struct InlinedMemLoop<F: Frontend> {
    #[allow(clippy::type_complexity)]
    pub(super) run: Box<dyn for<'g, 'r> Fn(MemRunArgs<'g, 'r, F>) -> RunEnd + Send + Sync>,
    /// What compiled code calls instead of the loop.
    pub(crate) direct: DirectCall,
}

/// What [`Engine::exec_watched`] hands an [`InlinedMemLoop`].
pub(super) struct MemRunArgs<'g, 'r, F: Frontend> {
    pub(super) generation: &'g Generation<F::Op>,
    pub(super) signals: &'r Signals,
    pub(super) vcpu: u32,
    pub(super) id: u32,
    /// The block's one memory action (calling the callback).
    pub(super) action: CompiledMem,
    pub(super) tb: &'g TbHeader,
    pub(super) cpu: &'r mut F::Cpu,
    pub(super) mem: &'r mut GuestMemory,
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

impl<F: Frontend> Engine<F> {
    /// The loop `cb` was compiled into for this frontend, if it was (an
    /// [`InlinedCallback`] of this `F`).
    #[inline(always)]
    pub(crate) fn inlined(cb: &InsnCallbackFn) -> Option<&InlinedLoop<F>> {
        cb.inlined_loop()?.downcast_ref::<InlinedLoop<F>>()
    }

    /// The loop `cb` was compiled into for this frontend, if it was (an
    /// [`InlinedMemCallback`] of this `F`).
    #[inline(always)]
    pub(crate) fn inlined_mem(cb: &MemCallbackDyn) -> Option<&InlinedMemLoop<F>> {
        cb.inlined_loop()?.downcast_ref::<InlinedMemLoop<F>>()
    }

    /// The CallEach loop with `callback` compiled in: an
    /// [`InlinedCallback`]'s, run for a block whose one callback is that
    /// one (in `slot`), and on into the blocks calling the same one.
    #[inline(never)]
    fn exec_inlined<C>(args: RunArgs<'_, '_, F>, callback: &C) -> RunEnd
    where
        C: CallbackFn,
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
        let call = |_: u32, ctx: &mut CallbackContext<'_>| callback.call(ctx);
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
}
