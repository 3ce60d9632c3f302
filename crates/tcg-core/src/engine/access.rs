//! What an instrumented instruction executes through and its callbacks
//! see: the memory accessors that run memory actions, and the call into an
//! instruction callback.
//!
//! [`InstrumentedMem`] serves the general loop (and CallEachWithMem
//! blocks): each access runs the executing instruction's memory actions,
//! borrowed for that instruction only, so no flush can free them while
//! they may run. [`WatchedMem`] serves MemEach runs: each access its filter
//! selects fires the run's [`Fire`] (one callback, several actions, or an
//! inlined callback) with a context made once per run. [`call`] runs an
//! instruction or block-entry callback with a context borrowing the
//! register file ([`CpuRegisters`]).

use std::sync::Arc;

use crate::cache::{CompiledMem, CompiledMemKind, Generation};
use crate::frontend::{Frontend, MemAccess, sign_extend};
use crate::instrument::{
    CallbackContext, CallbackFn, InlineKind, MemAccessInfo, MemCallback, MemCallbackFn, MemFilter,
    NoRegisters, Registers, Requests, Scoreboard,
};
use crate::memory::{GuestMemory, MemFault};

/// An instruction callback behind its `Arc`.
pub(super) type InsnCallbackFn = dyn CallbackFn;

/// Runs an instruction or block-entry callback. Inlined into the
/// instrumented loop: out of line, LLVM passed the callback's fat pointer
/// through the stack, and reloading it stalled on store forwarding.
#[inline(always)]
pub(super) fn call<F: Frontend>(
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
pub(super) struct CpuRegisters<'a, F: Frontend>(pub(super) &'a mut F::Cpu);

impl<F: Frontend> Registers for CpuRegisters<'_, F> {
    #[inline]
    fn read(&self, name: &str) -> Option<u64> {
        F::read_register(self.0, name)
    }
}

/// A memory callback behind its `Arc`.
pub(super) type MemCallbackDyn = dyn MemCallbackFn;

/// The one memory callback of a [`ExecMode::MemEach`] block (the usual
/// case), resolved once for the block.
///
/// [`ExecMode::MemEach`]: crate::cache::ExecMode::MemEach
pub(super) struct CallWatch<'a>(pub(super) &'a MemCallbackDyn);

/// What a [`ExecMode::MemEach`] block runs on each access: its one callback
/// ([`CallWatch`]) or its actions ([`MemActions`]).
///
/// [`ExecMode::MemEach`]: crate::cache::ExecMode::MemEach
pub(super) trait Fire {
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
///
/// [`Engine::exec_watched_several`]: super::Engine::exec_watched_several
pub(super) struct SeveralActions<'a> {
    pub(super) actions: MemActions<'a>,
    /// No callback among them: an access then leaves the callback context
    /// alone (measured: `mem,inline=on` 1,800.1 -> 1,713.7 M host
    /// instructions on the integer guest).
    pub(super) inline_only: bool,
    /// Set when they are inline operations only, at most one for each
    /// direction of access: see [`InlineByDirection`].
    pub(super) by_direction: Option<InlineByDirection<'a>>,
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
pub(super) struct InlineByDirection<'a> {
    /// For loads, then for stores.
    ops: [Option<RowOp<'a>>; 2],
}

impl<'a> InlineByDirection<'a> {
    /// `None` if `actions` hold a callback, or two operations for one
    /// direction (their order would matter). An operation on a missing
    /// board or past the row does nothing, as [`apply_inline`]'s does, and
    /// is left out.
    pub(super) fn resolve(actions: &[CompiledMem], boards: &'a [Arc<Scoreboard>]) -> Option<Self> {
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
pub(super) fn apply_inline(
    boards: &[Arc<Scoreboard>],
    vcpu: u32,
    board: u32,
    slot: u32,
    kind: InlineKind,
) {
    if let Some(b) = boards.get(board as usize) {
        b.apply(vcpu, slot as usize, kind);
    }
}

/// Guest memory as a [`ExecMode::MemEach`] block sees it: each access
/// `filter` selects runs the block's actions. The callback context is made
/// once per block (the loop moves its pc along), not once per access.
///
/// [`ExecMode::MemEach`]: crate::cache::ExecMode::MemEach
pub(super) struct WatchedMem<'a, W> {
    pub(super) ctx: CallbackContext<'a, NoRegisters>,
    pub(super) filter: MemFilter,
    pub(super) watch: W,
    /// Whether a callback made a request through its context: one flag,
    /// apart from the context the callbacks get, that the loop tests after
    /// each instruction (measured: 4.9 host instructions fewer per access
    /// on the integer guest than testing the context's requests).
    pub(super) requested: bool,
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

    fn atomic_update(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        update: impl Fn(u64) -> u64,
    ) -> Result<(u64, u64), MemFault> {
        let (old, new) = MemAccess::atomic_update(&mut *self.ctx.mem, addr, size, signed, update)?;
        for info in atomic_accesses(addr, size, signed, old, new) {
            if self.filter.matches(info.is_store) {
                self.fire(info);
            }
        }
        Ok((old, new))
    }

    fn memory(&mut self) -> &mut GuestMemory {
        self.ctx.mem
    }
}

/// An atomic update as memory actions see it: a load of `old`, then a
/// store of `new` (as QEMU's plugins see an atomic).
fn atomic_accesses(addr: u64, size: u8, signed: bool, old: u64, new: u64) -> [MemAccessInfo; 2] {
    [(false, old), (true, new)].map(|(is_store, value)| MemAccessInfo {
        addr,
        size,
        sign_extended: signed && !is_store,
        is_store,
        value,
    })
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
pub(super) struct InstrumentedMem<'a> {
    pub(super) mem: &'a mut GuestMemory,
    /// The executing instruction's memory actions (none between
    /// instructions).
    pub(super) actions: MemActions<'a>,
    pub(super) vcpu: u32,
    pub(super) pc: u64,
    pub(super) requests: Requests,
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
pub(super) struct MemActions<'a> {
    pub(super) actions: &'a [CompiledMem],
    pub(super) callbacks: &'a [MemCallback],
    pub(super) boards: &'a [Arc<Scoreboard>],
}

impl<'a> MemActions<'a> {
    /// `actions`, naming `generation`'s callbacks and scoreboards.
    #[inline(always)]
    pub(super) fn of<Op>(generation: &'a Generation<Op>, actions: &'a [CompiledMem]) -> Self {
        MemActions {
            actions,
            callbacks: &generation.mem_callbacks,
            boards: &generation.boards,
        }
    }

    /// Runs the actions whose filter selects the access `info` made by the
    /// instruction at `pc` on `vcpu`; returns what their callbacks requested.
    #[inline]
    pub(super) fn run(
        &self,
        vcpu: u32,
        pc: u64,
        mem: &mut GuestMemory,
        info: &MemAccessInfo,
    ) -> Requests {
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

    fn atomic_update(
        &mut self,
        addr: u64,
        size: u8,
        signed: bool,
        update: impl Fn(u64) -> u64,
    ) -> Result<(u64, u64), MemFault> {
        let (old, new) = MemAccess::atomic_update(&mut *self.mem, addr, size, signed, update)?;
        if !self.actions.actions.is_empty() {
            for info in atomic_accesses(addr, size, signed, old, new) {
                self.notify(info);
            }
        }
        Ok((old, new))
    }

    fn memory(&mut self) -> &mut GuestMemory {
        self.mem
    }
}
