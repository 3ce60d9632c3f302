//! The plugin host: installed plugins, their registrations, and the
//! reset/uninstall machinery on top of tcg-core's cache generations. What
//! a plugin does through its handle is in `host/handle.rs`.
//!
//! Locking: the host state is behind one mutex that is never held while
//! plugin code runs, so any callback may call back into the host (register,
//! reset, uninstall, print) without deadlock.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tcgkit_tcg_core::{
    Engine, FlushHandle, Frontend, Instrumentation, PlanStamp, Scoreboard, TbPlan, TbView,
};

use crate::PluginError;
use crate::args::PluginSpec;
use crate::modules::{GuestView, ModuleInfo};
use crate::registry::PluginRegistry;
use crate::rounds::{RetireRequest, Rounds};
use crate::symbols::SymbolTable;
use crate::trans::{Access, ExecContext, SharedExecCallback, SharedMemCallback, TbTrans};

mod handle;

pub use handle::PluginHandle;

/// What a plugin learns about the guest at install time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestInfo {
    /// Target architecture name, as QEMU spells it (`"riscv64"`).
    pub arch: String,
    /// True under full-system emulation, false for user mode (linux-user).
    pub system_emulation: bool,
    /// Number of vCPUs, or in user mode the rows a scoreboard is made
    /// with: boards grow a row for each guest thread's vCPU past them.
    pub vcpus: u32,
    /// The program a user-mode guest runs, where the embedder knows it
    /// (`tcgkit run` does); `None` under system emulation, as QEMU's
    /// program queries then answer nothing.
    pub program: Option<GuestProgram>,
}

impl GuestInfo {
    /// A user-mode guest of `arch` with `vcpus` vCPUs.
    pub fn user(arch: &str, vcpus: u32) -> Self {
        GuestInfo {
            arch: arch.to_owned(),
            system_emulation: false,
            vcpus: vcpus.max(1),
            program: None,
        }
    }

    /// The same guest, running `program`.
    pub fn with_program(self, program: GuestProgram) -> Self {
        GuestInfo {
            program: Some(program),
            ..self
        }
    }
}

/// The executable a user-mode guest runs and where it was loaded: what
/// QEMU's `qemu_plugin_path_to_binary`, `qemu_plugin_start_code`,
/// `qemu_plugin_end_code` and `qemu_plugin_entry_code` report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestProgram {
    /// The executable's path, as given to the emulator.
    pub path: std::path::PathBuf,
    /// Lowest guest address of an executable segment.
    pub start_code: u64,
    /// End of the highest executable segment's file bytes.
    pub end_code: u64,
    /// Entry point.
    pub entry: u64,
}

/// Identifies an installed plugin within its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PluginId(pub u64);

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A plugin: a Rust type that registers callbacks when installed.
///
/// Plugins are built from their arguments by a factory (see
/// [`PluginRegistry`]) and then installed; [`Plugin::install`] receives the
/// plugin as an `Arc`, so the callbacks it registers can share its state.
pub trait Plugin: Send + Sync + 'static {
    /// Registers the plugin's callbacks through `handle` (QEMU's
    /// `qemu_plugin_install`). An error refuses the installation.
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError>;
}

pub(crate) type TransCb = Arc<dyn Fn(&mut TbTrans<'_>) + Send + Sync>;
type VcpuCb = Arc<dyn Fn(u32) + Send + Sync>;
type SyscallCb = Arc<dyn Fn(u32, u64, &[u64; 6]) + Send + Sync>;
type SyscallRetCb = Arc<dyn Fn(u32, u64, u64) + Send + Sync>;
type SimpleCb = Arc<dyn Fn() + Send + Sync>;
type ModuleCb = Arc<dyn Fn(&ModuleInfo) + Send + Sync>;
type ResetDone = Box<dyn FnOnce(&PluginHandle) + Send>;
type UninstallDone = Box<dyn FnOnce() + Send>;

/// vCPU lifecycle events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VcpuEvent {
    Init = 0,
    Exit = 1,
    Idle = 2,
    Resume = 3,
}

impl VcpuEvent {
    fn name(self) -> &'static str {
        match self {
            VcpuEvent::Init => "vcpu_init",
            VcpuEvent::Exit => "vcpu_exit",
            VcpuEvent::Idle => "vcpu_idle",
            VcpuEvent::Resume => "vcpu_resume",
        }
    }
}

/// What a plugin registered under one generation.
#[derive(Default)]
struct Registrations {
    generation: u64,
    tb_trans: Vec<TransCb>,
    vcpu: [Vec<VcpuCb>; 4],
    syscall: Vec<SyscallCb>,
    syscall_ret: Vec<SyscallRetCb>,
    flush: Vec<SimpleCb>,
    atexit: Vec<SimpleCb>,
    module_load: Vec<ModuleCb>,
    module_unload: Vec<ModuleCb>,
}

enum Pending {
    Reset(ResetDone),
    Uninstall(UninstallDone),
}

/// Per-plugin identity shared by its handles and the callbacks it registered.
pub(crate) struct Slot {
    id: PluginId,
    name: String,
    guest: Arc<GuestInfo>,
    /// Generation given to new registrations; a reset or uninstall request
    /// moves it on, so what was registered before can be retired as a whole.
    current: AtomicU64,
    /// Callbacks registered under an older generation are dead: it moves
    /// when a reset or uninstall completes, and to `u64::MAX` on failure.
    /// Checked before calling into the plugin by the callbacks the host
    /// calls itself (tb_trans, vCPU, syscall, flush, atexit), and when a
    /// shared execution or memory callback is attached; execution and
    /// memory callbacks are not checked per call: none of their plans
    /// outlives the registration (see `trans::exec_callback`).
    oldest_live: AtomicU64,
    host: Weak<Inner>,
}

/// A callback's ticket: which plugin, which registration generation.
#[derive(Clone)]
pub(crate) struct Guard {
    slot: Arc<Slot>,
    generation: u64,
}

impl Guard {
    #[inline(always)]
    pub(crate) fn live(&self) -> bool {
        let live = self.generation >= self.slot.oldest_live.load(Ordering::Acquire);
        if !live {
            retired();
        }
        live
    }

    /// The callback `what` panicked: the plugin is removed.
    #[cold]
    pub(crate) fn fail(&self, what: &str, payload: Box<dyn Any + Send>) {
        fail_slot(&self.slot, what, &*payload);
    }

    /// Runs `f` if the registration is live, turning a panic into removal.
    #[inline(always)]
    pub(crate) fn call(&self, what: &str, f: impl FnOnce()) {
        if self.live()
            && let Err(payload) = catch_unwind(AssertUnwindSafe(f))
        {
            self.fail(what, payload);
        }
    }
}

/// The path of a call reaching a retired registration: cold, so that the
/// wrappers lay out a live callback's path with no taken branch (LLVM put
/// the early return first). `black_box` keeps the call, and with it the
/// hint, from being optimised away. (`std::hint::cold_path` says the same,
/// but needs Rust 1.95.)
#[cold]
#[inline(never)]
fn retired() {
    std::hint::black_box(());
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn fail_slot(slot: &Arc<Slot>, what: &str, payload: &(dyn Any + Send)) {
    // Kill every callback of the plugin at once, before anything else runs.
    slot.oldest_live.store(u64::MAX, Ordering::Release);
    let message = format!(
        "plugin {} (id {}) panicked in a {what} callback: {}; it was uninstalled",
        slot.name,
        slot.id,
        panic_text(payload)
    );
    if let Some(host) = slot.host.upgrade() {
        host.remove_failed(slot, what, message);
    }
}

struct Entry {
    slot: Arc<Slot>,
    /// Keeps the plugin's state alive while installed.
    _plugin: Arc<dyn Plugin>,
    /// Current registrations.
    regs: Registrations,
    /// Registrations a pending reset or uninstall retires at the next
    /// flush; they stay live until then, so no event is missed.
    retiring: Vec<Registrations>,
    /// Operations waiting for the next flush.
    pending: Vec<Pending>,
    /// Operations requested while this plugin's completions run: they
    /// start once those return, so they retire what the completions register.
    deferred: Vec<Pending>,
    completing: bool,
    uninstalling: bool,
    /// The retire round (see `rounds.rs`) the pending operations wait for.
    round: u64,
}

impl Entry {
    fn all_regs(&self) -> impl Iterator<Item = &Registrations> {
        self.retiring.iter().chain(std::iter::once(&self.regs))
    }

    /// Starts `op`: what is registered now retires at the next flush.
    fn begin(&mut self, op: Pending) {
        let next = self.slot.current.fetch_add(1, Ordering::AcqRel) + 1;
        let old = std::mem::replace(
            &mut self.regs,
            Registrations {
                generation: next,
                ..Registrations::default()
            },
        );
        self.retiring.push(old);
        self.pending.push(op);
    }
}

struct TransEntry {
    guard: Guard,
    cb: TransCb,
}

/// The registrations a translation ran with, kept in the engine's plan
/// memo ([`TbPlan::memo`]) for the next one.
struct TransMemo {
    /// Which host's (the address of its version counter): an engine
    /// given another host drops its memo anyway, this makes sure.
    host: usize,
    version: u64,
    trans: Arc<TransSnapshot>,
}

/// Every live tb_trans callback, and the symbols and modules their views
/// report.
#[derive(Default)]
struct TransSnapshot {
    entries: Vec<TransEntry>,
    guest: Arc<GuestView>,
}

#[derive(Default)]
struct State {
    plugins: Vec<Entry>,
    /// What a translation needs, rebuilt on change so a translation takes
    /// the lock only to clone one `Arc` (and not even that while the
    /// engine's plan memo holds the current one: see `Inner::translate`).
    trans: Arc<TransSnapshot>,
    /// Bumped with every new `trans`; shared with `Inner`, which reads it
    /// without the lock.
    trans_version: Arc<AtomicU64>,
    online: BTreeSet<u32>,
    failures: Vec<String>,
    /// atexit callbacks of plugins removed after a panic: their output is
    /// still flushed at the end, if they can.
    orphan_atexit: Vec<(Arc<Slot>, SimpleCb)>,
    next_id: u64,
    finished: bool,
    /// The embedder's symbols ([`PluginHost::set_symbols`]).
    base_symbols: SymbolTable,
    /// The live modules with their symbols, in load order.
    modules: Vec<(Arc<ModuleInfo>, SymbolTable)>,
    /// The guest registers callbacks can read, by name (from the engine's
    /// frontend, once attached).
    register_names: &'static [&'static str],
    /// The engine's frontend's QEMU-syntax disassembler, once attached
    /// (views reach it through their `GuestView`).
    qemu_disassembler: Option<fn(&[u8], u64) -> String>,
    /// The highest vCPU index started plus one.
    vcpus_started: u32,
    /// The scoreboards plugins made or named ([`PluginHandle::scoreboard`],
    /// [`PluginHandle::track_scoreboard`]): each grows a row for every
    /// vCPU that starts, as QEMU grows its boards at vcpu_init.
    boards: Vec<Weak<Scoreboard>>,
}

impl State {
    fn entry_mut(&mut self, id: PluginId) -> Option<&mut Entry> {
        self.plugins.iter_mut().find(|e| e.slot.id == id)
    }

    fn rebuild_trans(&mut self) {
        let guest = Arc::clone(&self.trans.guest);
        self.set_trans(guest);
    }

    /// Rebuilds the symbols and modules views report, after a change.
    fn rebuild_guest(&mut self) {
        let mut guest = GuestView::new(&self.base_symbols, &self.modules);
        guest.qemu_disassembler = self.qemu_disassembler;
        self.set_trans(Arc::new(guest));
    }

    fn set_trans(&mut self, guest: Arc<GuestView>) {
        let entries = self
            .plugins
            .iter()
            .flat_map(|e| {
                e.all_regs().flat_map(move |r| {
                    r.tb_trans.iter().map(move |cb| TransEntry {
                        guard: Guard {
                            slot: Arc::clone(&e.slot),
                            generation: r.generation,
                        },
                        cb: Arc::clone(cb),
                    })
                })
            })
            .collect();
        self.trans = Arc::new(TransSnapshot { entries, guest });
        self.trans_version.fetch_add(1, Ordering::Release);
    }

    fn guarded<T: Clone>(&self, pick: impl Fn(&Registrations) -> &Vec<T>) -> Vec<(Guard, T)> {
        self.plugins
            .iter()
            .flat_map(|e| {
                e.all_regs().flat_map(|r| {
                    let guard = Guard {
                        slot: Arc::clone(&e.slot),
                        generation: r.generation,
                    };
                    pick(r).iter().map(move |cb| (guard.clone(), cb.clone()))
                })
            })
            .collect()
    }
}

/// What happened to a plugin, for [`PluginHost::on_lifecycle`] watchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginLifecycle {
    /// It was installed.
    Installed,
    /// A reset completed (its completion has just run).
    Reset,
    /// It was uninstalled: its uninstall completed, or it was removed
    /// after a panic.
    Uninstalled,
}

/// A lifecycle watcher: gets the plugin's id and name.
type LifecycleWatcher = Arc<dyn Fn(PluginLifecycle, PluginId, &str) + Send + Sync>;

/// Numbers hosts for their plan stamps.
static NEXT_HOST: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Inner {
    guest: Arc<GuestInfo>,
    /// This host among all (see `EngineLink::plan_stamp`).
    serial: u64,
    state: Mutex<State>,
    /// `State::trans_version`, readable without the lock.
    trans_version: Arc<AtomicU64>,
    out: Mutex<Box<dyn Write + Send>>,
    /// Embedder-side watchers (e.g. a profiler); never plugin code.
    watchers: std::sync::RwLock<Vec<LifecycleWatcher>>,
    /// The attached engines, and when a retire request has passed them all.
    rounds: Rounds<FlushHandle>,
}

impl RetireRequest for FlushHandle {
    fn request(&self, flush: bool) {
        if flush {
            self.request_flush();
        } else {
            self.request_reinstrument();
        }
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // Plugin code never runs under this lock, so poisoning can only come
        // from a bug here; the state stays consistent between statements.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the lifecycle watchers; called with no lock of ours held.
    fn notify(&self, what: PluginLifecycle, slot: &Slot) {
        let watchers = self
            .watchers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for watcher in watchers {
            watcher(what, slot.id, &slot.name);
        }
    }

    fn write_out(&self, text: &str) {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        // Plugin output is best effort, like QEMU's qemu_plugin_outs.
        let _ = out.write_all(text.as_bytes());
    }

    /// Asks every engine to retire every block's instrumentation at its
    /// next safe point; returns the round that completes once they all did.
    /// A reset only needs the blocks planned again (their decoded code
    /// stays valid); an uninstall flushes them, so the plugin's callbacks,
    /// and the state they hold, are dropped promptly.
    fn request_retire(&self, uninstall: bool) -> u64 {
        self.rounds.request(uninstall)
    }

    fn remove_failed(&self, slot: &Arc<Slot>, what: &str, message: String) {
        {
            let mut state = self.state();
            if let Some(pos) = state
                .plugins
                .iter()
                .position(|e| Arc::ptr_eq(&e.slot, slot))
            {
                let entry = state.plugins.remove(pos);
                if what != "atexit" {
                    let atexit = entry.all_regs().flat_map(|r| r.atexit.iter());
                    state
                        .orphan_atexit
                        .extend(atexit.map(|cb| (Arc::clone(slot), Arc::clone(cb))));
                }
                state.rebuild_trans();
                // Its inline operations go away with the blocks that carry them.
                self.request_retire(true);
            }
            state.failures.push(message.clone());
        }
        self.write_out(&format!("{message}\n"));
        self.notify(PluginLifecycle::Uninstalled, slot);
    }

    /// An engine retired its blocks' instrumentation: the flush callbacks
    /// run, and the engine passes the open retire round (waiting, if other
    /// engines have not passed it yet, until its completions ran).
    fn engine_flushed(&self, engine: u64) {
        let flush_cbs = self.state().guarded(|r| &r.flush);
        for (guard, cb) in flush_cbs {
            guard.call("flush", || cb());
        }
        self.rounds
            .pass(engine, &mut |round| self.complete_through(round));
    }

    /// Completes the resets and uninstalls of retire rounds up to `round`:
    /// every block translated before they were requested is retired, on
    /// every engine, so the old registrations can never run again.
    fn complete_through(&self, round: u64) {
        let mut done: Vec<(Arc<Slot>, Pending)> = Vec::new();
        {
            let mut state = self.state();
            let mut changed = false;
            state.plugins.retain_mut(|e| {
                if e.pending.is_empty() || e.round > round {
                    return true;
                }
                changed = true;
                // Everything registered before the requests dies now;
                // registrations made since (generation `regs.generation`) live on.
                let floor = if e.uninstalling {
                    u64::MAX
                } else {
                    e.regs.generation
                };
                e.slot.oldest_live.store(floor, Ordering::Release);
                e.retiring.clear();
                e.completing = true;
                done.extend(e.pending.drain(..).map(|p| (Arc::clone(&e.slot), p)));
                !e.uninstalling
            });
            if changed {
                state.rebuild_trans();
            }
        }
        if done.is_empty() {
            return;
        }
        let done_slots: Vec<Arc<Slot>> = done.iter().map(|(s, _)| Arc::clone(s)).collect();
        for (slot, pending) in done {
            let (what, event) = match &pending {
                Pending::Reset(_) => ("reset completion", PluginLifecycle::Reset),
                Pending::Uninstall(_) => ("uninstall completion", PluginLifecycle::Uninstalled),
            };
            let result = catch_unwind(AssertUnwindSafe(|| match pending {
                Pending::Reset(f) => f(&PluginHandle {
                    slot: Arc::clone(&slot),
                }),
                Pending::Uninstall(f) => f(),
            }));
            match result {
                // A failing completion is reported as the removal it causes.
                Err(payload) => fail_slot(&slot, what, &*payload),
                Ok(()) => self.notify(event, &slot),
            }
        }
        let mut state = self.state();
        let mut started = Vec::new();
        let mut uninstall = false;
        for slot in &done_slots {
            if let Some(entry) = state.entry_mut(slot.id) {
                entry.completing = false;
                for op in std::mem::take(&mut entry.deferred) {
                    entry.begin(op);
                    started.push(slot.id);
                    uninstall |= entry.uninstalling;
                }
            }
        }
        if !started.is_empty() {
            state.rebuild_trans();
            let round = self.request_retire(uninstall);
            for id in started {
                if let Some(entry) = state.entry_mut(id) {
                    entry.round = round;
                }
            }
        }
    }

    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
        // The registrations are kept in the engine's plan memo while they
        // do not change: a block then costs no lock and no reference
        // count (re-planning after a reset translates every block run
        // again). Plugin code runs with no lock held (it may register more
        // callbacks).
        let host = Arc::as_ptr(&self.trans_version) as usize;
        let version = self.trans_version.load(Ordering::Acquire);
        let current = |plan: &TbPlan| {
            plan.memo_ref()
                .and_then(|memo| memo.downcast_ref::<TransMemo>())
                .filter(|memo| memo.host == host && memo.version == version)
                .is_some()
        };
        if !current(plan) {
            let state = self.state();
            let memo = TransMemo {
                host,
                version: state.trans_version.load(Ordering::Acquire),
                trans: Arc::clone(&state.trans),
            };
            drop(state);
            *plan.memo() = Some(Box::new(memo));
        }
        let plan = &*plan;
        let Some(memo) = plan
            .memo_ref()
            .and_then(|memo| memo.downcast_ref::<TransMemo>())
        else {
            return;
        };
        for entry in &memo.trans.entries {
            let mut view = TbTrans::new(tb, plan, &entry.guard, &memo.trans.guest);
            entry.guard.call("tb_trans", || (entry.cb)(&mut view));
        }
    }
}

/// The instrumentation one attached engine holds: the host, and which of
/// its engines this is. Dropped with the engine (or when the engine is
/// given other instrumentation), it detaches: retire rounds stop waiting
/// for that engine.
struct EngineLink {
    inner: Arc<Inner>,
    id: u64,
}

impl Instrumentation for EngineLink {
    fn translate(&self, tb: &TbView<'_>, plan: &mut TbPlan) {
        self.inner.translate(tb, plan);
    }

    fn flushed(&self) {
        self.inner.engine_flushed(self.id);
    }

    /// A plan depends on the block and on the registrations and modules a
    /// translation sees, which `trans_version` numbers: it is bumped
    /// before a reset or uninstall asks any engine to plan again or
    /// flush, so engines sharing translations plan a block once per
    /// version, and one that planned again never takes an older plan.
    fn plan_stamp(&self) -> Option<PlanStamp> {
        let version = self.inner.trans_version.load(Ordering::Acquire);
        Some(PlanStamp::new(self.inner.serial, version))
    }

    fn idle(&self, idle: bool) {
        let inner = &self.inner;
        inner
            .rounds
            .set_idle(self.id, idle, &mut |round| inner.complete_through(round));
    }
}

impl Drop for EngineLink {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner
            .rounds
            .detach(self.id, &mut |round| inner.complete_through(round));
    }
}

/// Hosts installed plugins for one engine, or one engine per vCPU thread:
/// gives each attached engine its tcg-core [`Instrumentation`], and takes
/// the events the embedder sees (vCPU lifecycle, system calls, end of
/// run). Clones share the same host.
///
/// Embedding, in order: build it ([`PluginHost::new`] or
/// [`PluginHost::from_specs`]), [`PluginHost::attach`] it to each engine,
/// call [`PluginHost::vcpu_init`] for each vCPU, run the guest (forwarding
/// system calls to [`PluginHost::on_syscall`] and
/// [`PluginHost::on_syscall_return`]), then [`PluginHost::vcpu_exit`] and
/// [`PluginHost::finish`].
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<Inner>,
}

impl fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginHost")
            .field("guest", &self.inner.guest)
            .field("plugins", &self.installed())
            .finish()
    }
}

impl PluginHost {
    /// An empty host for `guest`; plugin output goes to `out`.
    pub fn new(guest: GuestInfo, out: Box<dyn Write + Send>) -> Self {
        let state = State::default();
        PluginHost {
            inner: Arc::new(Inner {
                guest: Arc::new(guest),
                serial: NEXT_HOST.fetch_add(1, Ordering::Relaxed),
                trans_version: Arc::clone(&state.trans_version),
                state: Mutex::new(state),
                out: Mutex::new(out),
                watchers: std::sync::RwLock::new(Vec::new()),
                rounds: Rounds::new(),
            }),
        }
    }

    /// A host for a user-mode riscv64 guest with one vCPU (what `tcgkit
    /// run` emulates), with the bundled plugins named by `specs`
    /// (`name,key=value,...`) installed in order.
    pub fn from_specs(specs: &[&str], out: Box<dyn Write + Send>) -> Result<Self, PluginError> {
        let registry = PluginRegistry::bundled();
        PluginHost::from_specs_for(GuestInfo::user("riscv64", 1), &registry, specs, out)
    }

    /// [`PluginHost::from_specs`] for `guest` (e.g. with the program it
    /// runs, see [`GuestInfo::with_program`]), with the plugins of
    /// `registry` (e.g. [`PluginRegistry::bundled_for`] the engine's
    /// frontend).
    pub fn from_specs_for(
        guest: GuestInfo,
        registry: &PluginRegistry,
        specs: &[&str],
        out: Box<dyn Write + Send>,
    ) -> Result<Self, PluginError> {
        let host = PluginHost::new(guest, out);
        for spec in specs {
            host.install_spec(registry, spec)?;
        }
        Ok(host)
    }

    /// The guest description plugins see.
    pub fn guest(&self) -> &GuestInfo {
        &self.inner.guest
    }

    /// Sets the symbols `tb_trans` views report for instruction addresses
    /// (beside those of the modules reported with
    /// [`PluginHost::module_loaded`]).
    pub fn set_symbols(&self, symbols: SymbolTable) {
        let mut state = self.inner.state();
        state.base_symbols = symbols;
        state.rebuild_guest();
    }

    /// The guest mapped `module`, whose function symbols (at their guest
    /// addresses) are `symbols`: blocks translated from now on see it
    /// ([`TbTrans::module`]) and its symbols, and every plugin's
    /// module-load callbacks run.
    pub fn module_loaded(&self, module: ModuleInfo, symbols: SymbolTable) {
        let module = Arc::new(module);
        let cbs = {
            let mut state = self.inner.state();
            state.modules.push((Arc::clone(&module), symbols));
            state.rebuild_guest();
            state.guarded(|r| &r.module_load)
        };
        for (guard, cb) in cbs {
            guard.call("module_load", || cb(&module));
        }
    }

    /// The guest unmapped the module that starts at `start` (its translated
    /// blocks are already retired): every plugin's module-unload callbacks
    /// run, then it is forgotten.
    pub fn module_unloaded(&self, start: u64) {
        let (module, cbs) = {
            let state = self.inner.state();
            let Some((module, _)) = state.modules.iter().find(|(m, _)| m.start == start) else {
                return;
            };
            (Arc::clone(module), state.guarded(|r| &r.module_unload))
        };
        for (guard, cb) in cbs {
            guard.call("module_unload", || cb(&module));
        }
        let mut state = self.inner.state();
        state.modules.retain(|(m, _)| !Arc::ptr_eq(m, &module));
        state.rebuild_guest();
    }

    /// Parses `spec`, builds the plugin from `registry` and installs it.
    pub fn install_spec(
        &self,
        registry: &PluginRegistry,
        spec: &str,
    ) -> Result<PluginId, PluginError> {
        let spec = PluginSpec::parse(spec)?;
        let plugin = registry.create(&spec, &self.inner.guest)?;
        self.install(&spec.name, plugin)
    }

    /// Installs `plugin` under `name` (used in messages). Its
    /// [`Plugin::install`] runs now; an error or a panic there refuses it.
    pub fn install(&self, name: &str, plugin: Arc<dyn Plugin>) -> Result<PluginId, PluginError> {
        let slot = {
            let mut state = self.inner.state();
            state.next_id += 1;
            let slot = Arc::new(Slot {
                id: PluginId(state.next_id),
                name: name.to_owned(),
                guest: Arc::clone(&self.inner.guest),
                current: AtomicU64::new(0),
                oldest_live: AtomicU64::new(0),
                host: Arc::downgrade(&self.inner),
            });
            state.plugins.push(Entry {
                slot: Arc::clone(&slot),
                _plugin: Arc::clone(&plugin),
                regs: Registrations::default(),
                retiring: Vec::new(),
                pending: Vec::new(),
                deferred: Vec::new(),
                completing: false,
                uninstalling: false,
                round: 0,
            });
            slot
        };
        let handle = PluginHandle {
            slot: Arc::clone(&slot),
        };
        let result = match catch_unwind(AssertUnwindSafe(|| plugin.install(&handle))) {
            Ok(Ok(())) => {
                self.inner.notify(PluginLifecycle::Installed, &slot);
                return Ok(slot.id);
            }
            Ok(Err(e)) => e,
            Err(payload) => PluginError::InstallFailed {
                plugin: name.to_owned(),
                reason: format!("panicked: {}", panic_text(&*payload)),
            },
        };
        slot.oldest_live.store(u64::MAX, Ordering::Release);
        let mut state = self.inner.state();
        state.plugins.retain(|e| !Arc::ptr_eq(&e.slot, &slot));
        state.rebuild_trans();
        Err(result)
    }

    /// Calls `watcher` whenever a plugin is installed, completes a reset,
    /// or is uninstalled (by its own request or after a panic). For
    /// embedders such as profilers; it runs on the thread where the change
    /// completes, with no lock of the host held. Plugins installed before
    /// this call are not reported.
    pub fn on_lifecycle(
        &self,
        watcher: impl Fn(PluginLifecycle, PluginId, &str) + Send + Sync + 'static,
    ) {
        self.inner
            .watchers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::new(watcher));
    }

    /// Installed plugins (ids and names), in install order.
    pub fn installed(&self) -> Vec<(PluginId, String)> {
        self.inner
            .state()
            .plugins
            .iter()
            .map(|e| (e.slot.id, e.slot.name.clone()))
            .collect()
    }

    /// Messages about plugins removed because they panicked.
    pub fn failures(&self) -> Vec<String> {
        self.inner.state().failures.clone()
    }

    /// Makes this host the engine's instrumentation (flushing what was
    /// translated before) and lets resets retire its blocks.
    ///
    /// A host may instrument several engines at once, one per vCPU thread
    /// (give each its vCPU's index with [`Engine::set_vcpu_index`]). A
    /// reset or uninstall then completes once every attached engine has
    /// retired its blocks: each waits at its safe point until the last one
    /// got there, and the completion runs on that last one's thread, so
    /// that every event is counted exactly once, by the old registration
    /// or the new. An engine stays attached until it is dropped or given
    /// other instrumentation; while attached it must keep running (or be
    /// dropped) for resets to complete.
    pub fn attach<F: Frontend>(&self, engine: &mut Engine<F>) {
        {
            let mut state = self.inner.state();
            let names = engine.frontend().register_names();
            let disassembler = engine.frontend().qemu_disassembler();
            // Only a change makes new views: rebuilding bumps the plan
            // stamp, and the engines of a process's threads (attached
            // as each starts) share plans while it stays.
            let address = |d: Option<fn(&[u8], u64) -> String>| d.map(|f| f as usize);
            if state.register_names != names
                || address(state.qemu_disassembler) != address(disassembler)
            {
                state.register_names = names;
                state.qemu_disassembler = disassembler;
                state.rebuild_guest();
            }
        }
        let id = self.inner.rounds.attach(engine.flush_handle());
        let link = EngineLink {
            inner: Arc::clone(&self.inner),
            id,
        };
        engine.set_instrumentation(Some(Arc::new(link) as Arc<dyn Instrumentation>));
    }

    fn vcpu_event(&self, event: VcpuEvent, vcpu: u32) {
        let cbs = {
            let mut state = self.inner.state();
            match event {
                VcpuEvent::Init => {
                    state.online.insert(vcpu);
                    state.vcpus_started = state.vcpus_started.max(vcpu.saturating_add(1));
                    for board in state.boards.iter().filter_map(Weak::upgrade) {
                        board.grow_for(vcpu);
                    }
                }
                VcpuEvent::Exit => {
                    state.online.remove(&vcpu);
                }
                VcpuEvent::Idle | VcpuEvent::Resume => {}
            }
            state.guarded(|r| &r.vcpu[event as usize])
        };
        for (guard, cb) in cbs {
            guard.call(event.name(), || cb(vcpu));
        }
    }

    /// vCPU `vcpu` starts.
    pub fn vcpu_init(&self, vcpu: u32) {
        self.vcpu_event(VcpuEvent::Init, vcpu);
    }

    /// vCPU `vcpu` stops for good.
    pub fn vcpu_exit(&self, vcpu: u32) {
        self.vcpu_event(VcpuEvent::Exit, vcpu);
    }

    /// vCPU `vcpu` goes idle.
    pub fn vcpu_idle(&self, vcpu: u32) {
        self.vcpu_event(VcpuEvent::Idle, vcpu);
    }

    /// vCPU `vcpu` resumes.
    pub fn vcpu_resume(&self, vcpu: u32) {
        self.vcpu_event(VcpuEvent::Resume, vcpu);
    }

    /// The guest on `vcpu` is about to make system call `number`.
    pub fn on_syscall(&self, vcpu: u32, number: u64, args: &[u64; 6]) {
        let cbs = self.inner.state().guarded(|r| &r.syscall);
        for (guard, cb) in cbs {
            guard.call("syscall", || cb(vcpu, number, args));
        }
    }

    /// System call `number` on `vcpu` returned `ret`.
    pub fn on_syscall_return(&self, vcpu: u32, number: u64, ret: u64) {
        let cbs = self.inner.state().guarded(|r| &r.syscall_ret);
        for (guard, cb) in cbs {
            guard.call("syscall_return", || cb(vcpu, number, ret));
        }
    }

    /// Writes out what the plugins' output has buffered (before the
    /// process forks: parent and child share the output file, as QEMU's
    /// `-D` log, and each must write only its own lines).
    pub fn flush_output(&self) -> Result<(), PluginError> {
        let mut out = self
            .inner
            .out
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        out.flush()?;
        Ok(())
    }

    /// Ends the run: completes pending resets and uninstalls (nothing
    /// executes any more, so no old callback can run), runs every atexit
    /// callback (also those of plugins removed after a panic), and flushes
    /// the output. Later calls do nothing.
    pub fn finish(&self) -> Result<(), PluginError> {
        // Completions may ask for more resets or uninstalls (they start once
        // the completion returns); nothing executes any more, so complete
        // those too. Bounded, so a plugin that asks again in every
        // completion cannot hang the exit.
        const FINISH_ROUNDS: usize = 64;
        for _ in 0..FINISH_ROUNDS {
            self.inner.complete_through(u64::MAX);
            let more = self
                .inner
                .state()
                .plugins
                .iter()
                .any(|e| !e.pending.is_empty());
            if !more {
                break;
            }
        }
        let cbs = {
            let mut state = self.inner.state();
            if std::mem::replace(&mut state.finished, true) {
                return Ok(());
            }
            (
                state.guarded(|r| &r.atexit),
                std::mem::take(&mut state.orphan_atexit),
            )
        };
        for (guard, cb) in cbs.0 {
            guard.call("atexit", || cb());
        }
        // A plugin removed after a panic gets one chance to print its results.
        for (slot, cb) in cbs.1 {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| cb())) {
                fail_slot(&slot, "atexit", &*payload);
            }
        }
        self.flush_output()
    }
}
