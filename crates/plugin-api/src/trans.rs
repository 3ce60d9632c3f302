//! What plugins see and attach at translation time, and what their
//! execution-time callbacks may do.

use std::fmt;
use std::ops::BitOr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tcgkit_tcg_core::{
    Action, CallbackContext, Compare, Condition, Frontend, InlineKind, InlineOp, InlinedCallback,
    InlinedMemCallback, InsnCallback, InsnInfo, InsnPlan, MemAccessInfo, MemAction, MemCallback,
    MemFilter, RegisterFree, Scoreboard, TbPlan, TbView,
};

use crate::PluginError;
use crate::host::Guard;
use crate::modules::{GuestView, ModuleInfo};

/// What an execution-time callback declares it will read (QEMU's
/// `QEMU_PLUGIN_CB_R_REGS` and memory-read permission). Combine with `|`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(u8);

impl Access {
    /// Reads nothing of the guest state (the cheapest).
    pub const NONE: Access = Access(0);
    /// Reads guest registers ([`ExecContext::read_register`]).
    pub const REGISTERS: Access = Access(1);
    /// Reads guest memory ([`ExecContext::read_memory`]).
    pub const MEMORY: Access = Access(2);

    /// True if every flag of `other` is set.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// What an execution-time callback may see and do; valid for the call only.
pub struct ExecContext<'c, 'a> {
    ctx: &'c mut CallbackContext<'a>,
    access: Access,
}

impl fmt::Debug for ExecContext<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecContext")
            .field("vcpu", &self.vcpu())
            .field("pc", &self.pc())
            .finish()
    }
}

impl ExecContext<'_, '_> {
    /// Index of the executing vCPU.
    pub fn vcpu(&self) -> u32 {
        self.ctx.vcpu()
    }

    /// Address of the instruction (of the block, for block callbacks).
    pub fn pc(&self) -> u64 {
        self.ctx.pc()
    }

    /// Reads guest register `name` (`"a0"`, `"x10"`, `"pc"`, ...). Needs
    /// [`Access::REGISTERS`]; not available in memory callbacks.
    pub fn read_register(&self, name: &str) -> Result<u64, PluginError> {
        if !self.access.contains(Access::REGISTERS) {
            return Err(PluginError::RegistersNotDeclared);
        }
        match self.ctx.read_register(name) {
            Some(v) => Ok(v),
            // The pc is always readable where registers are at all.
            None if self.ctx.read_register("pc").is_none() => {
                Err(PluginError::RegistersUnavailable)
            }
            None => Err(PluginError::UnknownRegister(name.to_owned())),
        }
    }

    /// Reads guest memory at `addr` into `buf` (checked like a guest load).
    /// Needs [`Access::MEMORY`].
    pub fn read_memory(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), PluginError> {
        if !self.access.contains(Access::MEMORY) {
            return Err(PluginError::MemoryNotDeclared);
        }
        self.ctx.read_memory(addr, buf).map_err(PluginError::Memory)
    }
}

/// Wraps a plugin's execution callback: one indirect call and a panic
/// boundary that uninstalls the plugin.
///
/// No liveness check per call: a callback is only ever attached while its
/// registration is live (tb_trans runs under a live guard, shared callbacks
/// are checked when attached), and the registration dies only when the
/// engine has retired every block plan carrying it, before any block runs
/// again. The check cost 0.3-0.6 ns per instruction callback (user time,
/// integer, malloc and lua).
fn exec_callback<F>(guard: &Guard, access: Access, what: &'static str, f: F) -> InsnCallback
where
    F: Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
{
    let f = guarded(guard, access, what, f);
    // One that reads no registers says so: compiled code then calls it
    // without storing the registers it holds first.
    if access.contains(Access::REGISTERS) {
        Arc::new(f)
    } else {
        Arc::new(RegisterFree(f))
    }
}

/// The plugin's callback `f` inside its panic boundary.
fn guarded<F>(
    guard: &Guard,
    access: Access,
    what: &'static str,
    f: F,
) -> impl Fn(&mut CallbackContext<'_>) + Send + Sync + 'static
where
    F: Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
{
    let guard = guard.clone();
    move |ctx: &mut CallbackContext<'_>| {
        let mut ec = ExecContext { ctx, access };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(&mut ec))) {
            panicked(&guard, what, payload, ec.ctx);
        }
    }
}

/// A callback of `guard`'s plugin panicked: the plugin is removed, and the
/// block stops after the executing instruction, so that its callbacks stop
/// there (the flush retires every block carrying them). A panic of a
/// callback still due for that instruction, once the plugin is removed, is
/// not reported again.
#[cold]
#[inline(never)]
fn panicked(
    guard: &Guard,
    what: &'static str,
    payload: Box<dyn std::any::Any + Send>,
    ctx: &mut CallbackContext<'_>,
) {
    if guard.live() {
        guard.fail(what, payload);
    }
    ctx.request_flush();
}

/// An execution callback built once and attached to any number of blocks
/// or instructions ([`TbTrans::on_exec_shared`],
/// [`InsnTrans::on_exec_shared`]): QEMU's callback-plus-userdata, where
/// [`TbTrans::on_exec`] makes a new closure for each attachment. Attaching
/// it costs no allocation, and blocks it is attached to share one entry in
/// the engine's callback table.
///
/// Made by [`crate::PluginHandle::shared_exec_callback`], it belongs to the
/// registration current when it was made: after a reset completes it no
/// longer runs, so make a new one where the plugin registers again (in the
/// reset's completion).
#[derive(Clone)]
pub struct SharedExecCallback {
    /// `None` when made for a plugin already gone or leaving.
    cb: Option<(Guard, InsnCallback)>,
}

impl fmt::Debug for SharedExecCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedExecCallback")
    }
}

impl SharedExecCallback {
    pub(crate) fn new<F>(guard: Option<&Guard>, access: Access, f: F) -> Self
    where
        F: Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    {
        let cb = guard.map(|guard| {
            let cb = exec_callback(guard, access, "shared execution", f);
            (guard.clone(), cb)
        });
        SharedExecCallback { cb }
    }

    /// [`SharedExecCallback::new`] with the engine's CallEach loop compiled
    /// around it for frontend `Fe` ([`InlinedCallback`]).
    pub(crate) fn inlined<Fe, F>(guard: Option<&Guard>, access: Access, f: F) -> Self
    where
        Fe: Frontend,
        F: Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    {
        let cb = guard.map(|guard| {
            let inner = guarded(guard, access, "shared execution", f);
            let cb: InsnCallback = if access.contains(Access::REGISTERS) {
                Arc::new(InlinedCallback::<Fe, _>::new(inner))
            } else {
                Arc::new(InlinedCallback::<Fe, _>::new(RegisterFree(inner)))
            };
            (guard.clone(), cb)
        });
        SharedExecCallback { cb }
    }

    /// The callback, if its registration is live: one made before a reset
    /// completed must not be attached after it (the callbacks do not check
    /// liveness when called).
    fn attachable(&self) -> Option<&InsnCallback> {
        let (guard, cb) = self.cb.as_ref()?;
        guard.live().then_some(cb)
    }
}

/// A memory callback built once and attached to any number of instructions
/// ([`InsnTrans::on_mem_shared`]): QEMU's one function for every
/// instrumented access, where [`InsnTrans::on_mem`] makes a new closure for
/// each instruction. Blocks whose memory-accessing instructions all carry
/// the same one run through a leaner loop.
///
/// Made by [`crate::PluginHandle::shared_mem_callback`], it belongs to the
/// registration current when it was made, as [`SharedExecCallback`] does.
#[derive(Clone)]
pub struct SharedMemCallback {
    /// `None` when made for a plugin already gone or leaving.
    cb: Option<(Guard, MemCallback)>,
}

impl fmt::Debug for SharedMemCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedMemCallback")
    }
}

impl SharedMemCallback {
    pub(crate) fn new<F>(guard: Option<&Guard>, access: Access, f: F) -> Self
    where
        F: Fn(&mut ExecContext<'_, '_>, &MemAccessInfo) + Send + Sync + 'static,
    {
        let cb = guard.map(|guard| (guard.clone(), mem_callback(guard, access, f)));
        SharedMemCallback { cb }
    }

    /// [`SharedMemCallback::new`] with the engine's MemEach loop compiled
    /// around it for frontend `Fe` ([`InlinedMemCallback`]).
    pub(crate) fn inlined<Fe, F>(guard: Option<&Guard>, access: Access, f: F) -> Self
    where
        Fe: Frontend,
        F: Fn(&mut ExecContext<'_, '_>, &MemAccessInfo) + Send + Sync + 'static,
    {
        let cb = guard.map(|guard| {
            let inner = guarded_mem(guard, access, f);
            let cb: MemCallback = Arc::new(InlinedMemCallback::<Fe, _>::new(inner));
            (guard.clone(), cb)
        });
        SharedMemCallback { cb }
    }

    /// The callback, if its registration is live (see
    /// [`SharedExecCallback`]).
    fn attachable(&self) -> Option<&MemCallback> {
        let (guard, cb) = self.cb.as_ref()?;
        guard.live().then_some(cb)
    }
}

fn mem_callback<F>(guard: &Guard, access: Access, f: F) -> MemCallback
where
    F: Fn(&mut ExecContext<'_, '_>, &MemAccessInfo) + Send + Sync + 'static,
{
    Arc::new(guarded_mem(guard, access, f))
}

/// The plugin's memory callback `f` inside its panic boundary.
fn guarded_mem<F>(
    guard: &Guard,
    access: Access,
    f: F,
) -> impl Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync + 'static
where
    F: Fn(&mut ExecContext<'_, '_>, &MemAccessInfo) + Send + Sync + 'static,
{
    // No liveness check per call, as for execution callbacks.
    let guard = guard.clone();
    move |ctx: &mut CallbackContext<'_>, info: &MemAccessInfo| {
        let mut ec = ExecContext { ctx, access };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(&mut ec, info))) {
            panicked(&guard, "memory", payload, ec.ctx);
        }
    }
}

fn inline(board: &Arc<Scoreboard>, slot: usize, kind: InlineKind) -> InlineOp<'_> {
    InlineOp { board, slot, kind }
}

fn condition(board: &Arc<Scoreboard>, slot: usize, compare: Compare, value: u64) -> Condition<'_> {
    Condition {
        board,
        slot,
        compare,
        value,
    }
}

/// A block being translated, as one plugin sees it (QEMU's
/// `qemu_plugin_tb`): read-only facts, and registration of what runs when
/// the block and its instructions execute. Valid only during the
/// `tb_trans` callback.
pub struct TbTrans<'a> {
    view: &'a TbView<'a>,
    plan: &'a TbPlan,
    guard: &'a Guard,
    guest: &'a GuestView,
}

impl fmt::Debug for TbTrans<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TbTrans")
            .field("pc", &self.pc())
            .field("insns", &self.insn_count())
            .finish()
    }
}

impl<'a> TbTrans<'a> {
    pub(crate) fn new(
        view: &'a TbView<'a>,
        plan: &'a TbPlan,
        guard: &'a Guard,
        guest: &'a GuestView,
    ) -> Self {
        TbTrans {
            view,
            plan,
            guard,
            guest,
        }
    }

    /// The module the block's code belongs to, when the embedder reports
    /// modules ([`PluginHost::module_loaded`](crate::PluginHost::module_loaded)).
    pub fn module(&self) -> Option<&ModuleInfo> {
        self.guest.module_at(self.pc())
    }

    /// Guest address of the block's first instruction.
    pub fn pc(&self) -> u64 {
        self.view.pc()
    }

    /// Size of the block's code in bytes.
    pub fn size(&self) -> u64 {
        self.view.size()
    }

    /// Number of instructions.
    pub fn insn_count(&self) -> usize {
        self.view.insn_count()
    }

    /// The guest register names callbacks may read.
    pub fn register_names(&self) -> &'static [&'static str] {
        self.view.register_names()
    }

    /// Instruction `index`, to inspect and instrument.
    pub fn insn(&mut self, index: usize) -> Option<InsnTrans<'_>> {
        let info = *self.view.insns().get(index)?;
        Some(InsnTrans {
            info,
            index,
            view: self.view,
            plan: self.plan.insn(index)?,
            guard: self.guard,
            guest: self.guest,
        })
    }

    /// Every instruction in order, to inspect and instrument.
    pub fn insns(&mut self) -> impl Iterator<Item = InsnTrans<'_>> {
        let (view, guard, guest) = (self.view, self.guard, self.guest);
        view.insns()
            .iter()
            .zip(self.plan.insns())
            .enumerate()
            .map(move |(index, (&info, plan))| InsnTrans {
                info,
                index,
                view,
                plan,
                guard,
                guest,
            })
    }

    /// Calls `cb` each time the block is entered.
    pub fn on_exec(
        &mut self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) {
        let cb = exec_callback(self.guard, access, "block execution", cb);
        self.plan.on_entry(Action::Callback(&cb));
    }

    /// Calls the shared callback `cb` each time the block is entered.
    #[inline]
    pub fn on_exec_shared(&mut self, cb: &SharedExecCallback) {
        if let Some(cb) = cb.attachable() {
            self.plan.on_entry(Action::Callback(cb));
        }
    }

    /// Applies `kind` to `slot` of the executing vCPU's row of `board`
    /// each time the block is entered, without a call.
    #[inline]
    pub fn on_exec_inline(&mut self, board: &Arc<Scoreboard>, slot: usize, kind: InlineKind) {
        self.plan
            .on_entry(Action::Inline(inline(board, slot, kind)));
    }

    /// Calls `cb` on block entry only if `slot` of the vCPU's row of
    /// `board` compares to `value` as `compare` says (QEMU's `_cond_cb`).
    pub fn on_exec_cond(
        &mut self,
        board: &Arc<Scoreboard>,
        slot: usize,
        compare: Compare,
        value: u64,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) {
        let cb = exec_callback(self.guard, access, "block execution", cb);
        self.plan.on_entry(Action::Conditional(
            condition(board, slot, compare, value),
            &cb,
        ));
    }
}

/// One instruction of a block being translated (QEMU's `qemu_plugin_insn`).
pub struct InsnTrans<'a> {
    info: InsnInfo,
    index: usize,
    view: &'a TbView<'a>,
    /// This instruction's part of the plan, its index checked once.
    plan: InsnPlan<'a>,
    guard: &'a Guard,
    guest: &'a GuestView,
}

impl fmt::Debug for InsnTrans<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InsnTrans")
            .field("index", &self.index)
            .field("info", &self.info)
            .finish()
    }
}

impl InsnTrans<'_> {
    /// Attaches an execution action to this instruction (inlined: each
    /// caller's action variant is then known, and the attaching code folds).
    #[inline(always)]
    fn on_execute(&self, action: Action<'_>) {
        self.plan.on_execute(action);
    }

    /// Attaches a memory action to this instruction (inlined as
    /// `on_execute` is).
    #[inline(always)]
    fn on_memory(&self, filter: MemFilter, action: MemAction<'_>) {
        self.plan.on_memory(filter, action);
    }

    /// Position in the block.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Guest address.
    pub fn pc(&self) -> u64 {
        self.info.pc
    }

    /// Length in bytes.
    pub fn size(&self) -> u8 {
        self.info.len
    }

    /// The raw encoding (its low [`InsnTrans::size`] bytes).
    pub fn raw(&self) -> u32 {
        self.info.raw
    }

    /// The instruction's bytes in memory order.
    pub fn bytes(&self) -> Vec<u8> {
        self.info.bytes()
    }

    /// Disassembly text, as the frontend prints it.
    pub fn disassembly(&self) -> String {
        self.view.disassemble(self.index).unwrap_or_default()
    }

    /// Disassembly text as QEMU prints it (what `qemu_plugin_insn_disas`
    /// returns under QEMU), when the engine's frontend has QEMU's syntax
    /// ([`Frontend::qemu_disassembler`]) and the host is attached to the
    /// engine; otherwise [`InsnTrans::disassembly`].
    pub fn qemu_disassembly(&self) -> String {
        match self.guest.qemu_disassembler {
            Some(disassemble) => disassemble(&self.info.bytes(), self.info.pc),
            None => self.disassembly(),
        }
    }

    /// The guest function containing the instruction, if symbols are known
    /// (the embedder's table, and every reported module's).
    pub fn symbol(&self) -> Option<&str> {
        self.guest.symbols.lookup(self.info.pc)
    }

    /// Calls `cb` before the instruction executes.
    pub fn on_exec(
        &mut self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) {
        let cb = exec_callback(self.guard, access, "instruction", cb);
        self.on_execute(Action::Callback(&cb));
    }

    /// Calls the shared callback `cb` before the instruction executes.
    #[inline]
    pub fn on_exec_shared(&mut self, cb: &SharedExecCallback) {
        if let Some(cb) = cb.attachable() {
            self.on_execute(Action::Callback(cb));
        }
    }

    /// Applies `kind` to `slot` of the executing vCPU's row of `board`
    /// before the instruction executes, without a call.
    #[inline]
    pub fn on_exec_inline(&mut self, board: &Arc<Scoreboard>, slot: usize, kind: InlineKind) {
        self.on_execute(Action::Inline(inline(board, slot, kind)));
    }

    /// Calls `cb` before the instruction executes, only if the scoreboard
    /// entry compares to `value` as `compare` says.
    pub fn on_exec_cond(
        &mut self,
        board: &Arc<Scoreboard>,
        slot: usize,
        compare: Compare,
        value: u64,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) {
        let cb = exec_callback(self.guard, access, "instruction", cb);
        self.on_execute(Action::Conditional(
            condition(board, slot, compare, value),
            &cb,
        ));
    }

    /// Calls `cb` after each of the instruction's memory accesses that
    /// `filter` selects, with the access's address, size, sign extension,
    /// direction and value. Registers are not readable here.
    pub fn on_mem(
        &mut self,
        filter: MemFilter,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>, &MemAccessInfo) + Send + Sync + 'static,
    ) {
        let cb = mem_callback(self.guard, access, cb);
        self.on_memory(filter, MemAction::Callback(&cb));
    }

    /// Calls the shared callback `cb` after each of the instruction's memory
    /// accesses that `filter` selects (see [`InsnTrans::on_mem`]).
    #[inline]
    pub fn on_mem_shared(&mut self, filter: MemFilter, cb: &SharedMemCallback) {
        if let Some(cb) = cb.attachable() {
            self.on_memory(filter, MemAction::Callback(cb));
        }
    }

    /// Applies `kind` to the scoreboard entry on each selected access,
    /// without a call.
    #[inline]
    pub fn on_mem_inline(
        &mut self,
        filter: MemFilter,
        board: &Arc<Scoreboard>,
        slot: usize,
        kind: InlineKind,
    ) {
        self.on_memory(filter, MemAction::Inline(inline(board, slot, kind)));
    }
}
