//! A plugin's handle on its host: what a plugin registers, the scoreboards
//! it owns, and its own reset and uninstall.

use std::fmt;
use std::sync::Arc;

use tcgkit_tcg_core::{Frontend, Scoreboard};

use super::{
    Access, ExecContext, Guard, GuestInfo, ModuleCb, ModuleInfo, Pending, PluginError, PluginId,
    Registrations, SharedExecCallback, SharedMemCallback, Slot, TbTrans, VcpuCb, VcpuEvent,
};

/// A plugin's handle on its host: registers callbacks, owns scoreboards,
/// prints, and resets or uninstalls the plugin. Cheap to clone; callbacks
/// may keep one. Holds the host weakly: once the host is gone, registering
/// does nothing and `reset`/`uninstall` fail with [`PluginError::NotInstalled`].
#[derive(Clone)]
pub struct PluginHandle {
    pub(super) slot: Arc<Slot>,
}

impl fmt::Debug for PluginHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginHandle")
            .field("id", &self.slot.id)
            .field("name", &self.slot.name)
            .finish()
    }
}

impl PluginHandle {
    /// The plugin's id.
    pub fn id(&self) -> PluginId {
        self.slot.id
    }

    /// The name it was installed under.
    pub fn name(&self) -> &str {
        &self.slot.name
    }

    /// The guest it runs on.
    pub fn guest(&self) -> &GuestInfo {
        &self.slot.guest
    }

    /// A new zeroed scoreboard with `slots` entries per vCPU, for inline
    /// operations and conditional callbacks.
    pub fn scoreboard(&self, slots: usize) -> Arc<Scoreboard> {
        let board = Arc::new(Scoreboard::new(
            slots,
            self.slot.guest.vcpus.max(1) as usize,
        ));
        self.track_scoreboard(&board);
        board
    }

    /// Has `board` (made elsewhere, e.g. before install) grow a row for
    /// every vCPU started so far and every one that starts later, before
    /// that vCPU's callbacks run: a callback's `add` makes no row itself
    /// (see [`Scoreboard::grow_for`]).
    pub fn track_scoreboard(&self, board: &Arc<Scoreboard>) {
        let Some(host) = self.slot.host.upgrade() else {
            return;
        };
        let mut state = host.state();
        for vcpu in 0..state.vcpus_started {
            board.grow_for(vcpu);
        }
        state.boards.retain(|b| b.strong_count() > 0);
        state.boards.push(Arc::downgrade(board));
    }

    /// Writes `text` to the host's plugin output (QEMU's `qemu_plugin_outs`).
    pub fn outs(&self, text: &str) {
        if let Some(host) = self.slot.host.upgrade() {
            host.write_out(text);
        }
    }

    /// The names of the guest registers callbacks can read
    /// ([`crate::ExecContext::read_register`]); empty until the host is
    /// attached to an engine.
    pub fn register_names(&self) -> &'static [&'static str] {
        self.slot
            .host
            .upgrade()
            .map_or(&[], |h| h.state().register_names)
    }

    /// How many vCPUs have started so far: the highest index plus one
    /// (QEMU's `qemu_plugin_num_vcpus`; exited ones still count).
    pub fn vcpus_started(&self) -> u32 {
        self.slot
            .host
            .upgrade()
            .map_or(0, |h| h.state().vcpus_started)
    }

    /// The vCPUs started and not yet exited, in index order.
    pub fn online_vcpus(&self) -> Vec<u32> {
        self.slot
            .host
            .upgrade()
            .map(|h| h.state().online.iter().copied().collect())
            .unwrap_or_default()
    }

    /// True while installed (not uninstalled, not failed).
    pub fn is_installed(&self) -> bool {
        self.slot.host.upgrade().is_some_and(|h| {
            h.state()
                .plugins
                .iter()
                .any(|e| Arc::ptr_eq(&e.slot, &self.slot))
        })
    }

    /// Adds a registration; its generation, or `None` if the plugin is
    /// gone or being uninstalled.
    fn register(&self, add: impl FnOnce(&mut Registrations)) -> Option<u64> {
        let host = self.slot.host.upgrade()?;
        let mut state = host.state();
        let entry = state.entry_mut(self.slot.id)?;
        if entry.uninstalling {
            return None;
        }
        add(&mut entry.regs);
        Some(entry.regs.generation)
    }

    /// A guard of the current registration (`None` if the plugin is gone
    /// or leaving), for a shared callback made now.
    fn current_guard(&self) -> Option<Guard> {
        self.register(|_| {}).map(|generation| Guard {
            slot: Arc::clone(&self.slot),
            generation,
        })
    }

    /// Builds an execution callback to attach to many blocks or
    /// instructions without a new closure each time (see
    /// [`SharedExecCallback`]). It belongs to the current registration: make
    /// it at install or in a reset's completion, next to `on_tb_trans`.
    pub fn shared_exec_callback(
        &self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) -> SharedExecCallback {
        let guard = self.current_guard();
        SharedExecCallback::new(guard.as_ref(), access, cb)
    }

    /// [`PluginHandle::shared_exec_callback`] with the engine's loop
    /// compiled around it for frontend `F` (a
    /// [`tcgkit_tcg_core::InlinedCallback`]): blocks whose every
    /// instruction carries this callback and nothing else run in a loop
    /// that calls it directly, where a shared callback costs an indirect
    /// call per instruction. For plugins that know the engine's frontend
    /// (or are built for it, as the `tcgkit` CLI builds the bundled ones):
    /// on an engine of another frontend, or on blocks carrying more, it is
    /// an ordinary shared callback.
    pub fn inlined_exec_callback<F: Frontend>(
        &self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) -> SharedExecCallback {
        let guard = self.current_guard();
        SharedExecCallback::inlined::<F, _>(guard.as_ref(), access, cb)
    }

    /// [`PluginHandle::shared_mem_callback`] with the engine's loop
    /// compiled around it for frontend `F` (a
    /// [`tcgkit_tcg_core::InlinedMemCallback`]): blocks whose every access
    /// runs this callback and nothing else run in a loop that calls it
    /// directly. As [`PluginHandle::inlined_exec_callback`], for plugins
    /// that know the engine's frontend; elsewhere an ordinary shared
    /// callback.
    pub fn inlined_mem_callback<F: Frontend>(
        &self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>, &tcgkit_tcg_core::MemAccessInfo) + Send + Sync + 'static,
    ) -> SharedMemCallback {
        SharedMemCallback::inlined::<F, _>(self.current_guard().as_ref(), access, cb)
    }

    /// Builds a memory callback to attach to many instructions without a
    /// new closure each time (see [`SharedMemCallback`]); like
    /// [`PluginHandle::shared_exec_callback`], it belongs to the current
    /// registration.
    pub fn shared_mem_callback(
        &self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>, &tcgkit_tcg_core::MemAccessInfo) + Send + Sync + 'static,
    ) -> SharedMemCallback {
        let guard = self.current_guard();
        SharedMemCallback::new(guard.as_ref(), access, cb)
    }

    /// Calls `cb` for every translated block (QEMU's `tb_trans`): it sees
    /// the block read-only and attaches execution, inline and memory
    /// callbacks. Blocks translated before the registration are not seen:
    /// register at install or in a reset completion.
    pub fn on_tb_trans(&self, cb: impl Fn(&mut TbTrans<'_>) + Send + Sync + 'static) {
        let Some(host) = self.slot.host.upgrade() else {
            return;
        };
        let mut state = host.state();
        let Some(entry) = state.entry_mut(self.slot.id) else {
            return;
        };
        if !entry.uninstalling {
            entry.regs.tb_trans.push(Arc::new(cb));
            state.rebuild_trans();
        }
    }

    /// Calls `cb(vcpu)` when a vCPU starts; also, right away, for each vCPU
    /// already started (as QEMU does).
    pub fn on_vcpu_init(&self, cb: impl Fn(u32) + Send + Sync + 'static) {
        let cb: VcpuCb = Arc::new(cb);
        if let Some(generation) =
            self.register(|r| r.vcpu[VcpuEvent::Init as usize].push(Arc::clone(&cb)))
        {
            let online: Vec<u32> = self
                .slot
                .host
                .upgrade()
                .map(|h| h.state().online.iter().copied().collect())
                .unwrap_or_default();
            let guard = Guard {
                slot: Arc::clone(&self.slot),
                generation,
            };
            for vcpu in online {
                guard.call("vcpu_init", || cb(vcpu));
            }
        }
    }

    /// Calls `cb(vcpu)` when a vCPU stops for good.
    pub fn on_vcpu_exit(&self, cb: impl Fn(u32) + Send + Sync + 'static) {
        self.register(|r| r.vcpu[VcpuEvent::Exit as usize].push(Arc::new(cb)));
    }

    /// Calls `cb(vcpu)` when a vCPU goes idle (e.g. blocks in the host).
    pub fn on_vcpu_idle(&self, cb: impl Fn(u32) + Send + Sync + 'static) {
        self.register(|r| r.vcpu[VcpuEvent::Idle as usize].push(Arc::new(cb)));
    }

    /// Calls `cb(vcpu)` when an idle vCPU resumes.
    pub fn on_vcpu_resume(&self, cb: impl Fn(u32) + Send + Sync + 'static) {
        self.register(|r| r.vcpu[VcpuEvent::Resume as usize].push(Arc::new(cb)));
    }

    /// Calls `cb(vcpu, number, args)` before each guest system call.
    pub fn on_syscall(&self, cb: impl Fn(u32, u64, &[u64; 6]) + Send + Sync + 'static) {
        self.register(|r| r.syscall.push(Arc::new(cb)));
    }

    /// Calls `cb(vcpu, number, ret)` after each guest system call returned
    /// (`ret` is what the guest sees: `-errno` on error).
    pub fn on_syscall_return(&self, cb: impl Fn(u32, u64, u64) + Send + Sync + 'static) {
        self.register(|r| r.syscall_ret.push(Arc::new(cb)));
    }

    /// Calls `cb` when the guest maps a module (an ELF file: the program,
    /// its interpreter, a shared object); also, right away, for each module
    /// mapped already (as `on_vcpu_init` does for vCPUs). QEMU's API has no
    /// such event; Pin's and DynamoRIO's do.
    pub fn on_module_load(&self, cb: impl Fn(&ModuleInfo) + Send + Sync + 'static) {
        let cb: ModuleCb = Arc::new(cb);
        let Some(generation) = self.register(|r| r.module_load.push(Arc::clone(&cb))) else {
            return;
        };
        let loaded: Vec<Arc<ModuleInfo>> = self
            .slot
            .host
            .upgrade()
            .map(|h| {
                h.state()
                    .modules
                    .iter()
                    .map(|(m, _)| Arc::clone(m))
                    .collect()
            })
            .unwrap_or_default();
        let guard = Guard {
            slot: Arc::clone(&self.slot),
            generation,
        };
        for module in loaded {
            guard.call("module_load", || cb(&module));
        }
    }

    /// Calls `cb` when the guest unmaps a module (its last executable
    /// mapping: dlclose), after its translated blocks were retired, and for
    /// every module still mapped when the process ends.
    pub fn on_module_unload(&self, cb: impl Fn(&ModuleInfo) + Send + Sync + 'static) {
        self.register(|r| r.module_unload.push(Arc::new(cb)));
    }

    /// Calls `cb` after every flush of the translated blocks.
    pub fn on_flush(&self, cb: impl Fn() + Send + Sync + 'static) {
        self.register(|r| r.flush.push(Arc::new(cb)));
    }

    /// Calls `cb` once when the run ends ([`PluginHost::finish`](crate::PluginHost::finish)).
    pub fn on_atexit(&self, cb: impl Fn() + Send + Sync + 'static) {
        self.register(|r| r.atexit.push(Arc::new(cb)));
    }

    /// Unregisters every callback of the plugin and retires the
    /// instrumentation of all translated blocks, then runs `completion`
    /// (QEMU's `qemu_plugin_reset`), where the plugin usually registers
    /// again. Callable from any callback on
    /// any vCPU, or from any thread.
    ///
    /// Exactly when things happen:
    /// - Until the completion, the registrations made before this call keep
    ///   delivering callbacks: the executing instruction's remaining ones,
    ///   including its memory callbacks, and those of the instructions run
    ///   before the engine reaches its next safe point. No event is missed
    ///   in between.
    /// - That safe point is the end of the executing block at the latest
    ///   (the engine tests for requests through a handle once per block).
    ///   Called from a callback, the calling vCPU's block stops sooner if it
    ///   has callbacks on entry, right after its first instruction, or if
    ///   its mix of instrumentation takes the engine's general loop
    ///   (callbacks beside inline operations or conditional callbacks, for
    ///   instance), right after the instruction whose callback called;
    ///   other vCPUs' blocks run to their end, as in QEMU. There every
    ///   translated block's instrumentation is
    ///   retired ([`Engine::reinstrument`](tcgkit_tcg_core::Engine::reinstrument): O(1); each block keeps its
    ///   decoded code and is planned again, with every plugin's `tb_trans`,
    ///   before it next runs).
    /// - `completion` runs exactly once, right after that (or in
    ///   [`PluginHost::finish`](crate::PluginHost::finish) if no block runs
    ///   any more). From then on,
    ///   no callback registered before the call runs. Registrations made
    ///   after the call, usually in `completion`, stay.
    /// - Other plugins are untouched (their `tb_trans` sees each block
    ///   again, as after a flush; their flush callbacks run).
    pub fn reset(
        &self,
        completion: impl FnOnce(&PluginHandle) + Send + 'static,
    ) -> Result<(), PluginError> {
        self.schedule(Pending::Reset(Box::new(completion)), false)
    }

    /// Uninstalls the plugin at the next safe point with the same timing as
    /// [`PluginHandle::reset`], then runs `completion` exactly once; its
    /// atexit callbacks do not run, and registering after this call does
    /// nothing. At that safe point every translated block is flushed, so
    /// the plugin's state is dropped once the last vCPU left the retired
    /// blocks and no handle refers to it.
    pub fn uninstall(&self, completion: impl FnOnce() + Send + 'static) -> Result<(), PluginError> {
        self.schedule(Pending::Uninstall(Box::new(completion)), true)
    }

    fn schedule(&self, pending: Pending, uninstall: bool) -> Result<(), PluginError> {
        let not_installed = || PluginError::NotInstalled {
            plugin: self.slot.name.clone(),
        };
        let host = self.slot.host.upgrade().ok_or_else(not_installed)?;
        let mut state = host.state();
        let entry = state.entry_mut(self.slot.id).ok_or_else(not_installed)?;
        if entry.uninstalling {
            return Err(PluginError::Uninstalling {
                plugin: self.slot.name.clone(),
            });
        }
        entry.uninstalling = uninstall;
        if entry.completing {
            entry.deferred.push(pending);
            return Ok(());
        }
        entry.begin(pending);
        state.rebuild_trans();
        let round = host.request_retire(uninstall);
        if let Some(entry) = state.entry_mut(self.slot.id) {
            entry.round = round;
        }
        Ok(())
    }
}
