//! One loaded C plugin: its library, the API version it declared, and its
//! plugin-api handle; the table the exported functions find plugins in,
//! and which plugin's code is running on this thread.

use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use libloading::Library;
use tcgkit_plugin_api::{GuestInfo, Plugin, PluginError, PluginHandle};

use crate::abi::{self, InstallFn, PluginId, QemuInfo};
use crate::context;
use crate::imports::ContextUse;

/// A plugin's function pointer, cast to its real type when called.
pub(crate) type RawCb = unsafe extern "C" fn();

/// The per-plugin events QEMU keeps one callback for (registering again
/// replaces it, NULL removes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    VcpuInit,
    VcpuExit,
    VcpuIdle,
    VcpuResume,
    TbTrans,
    Syscall,
    SyscallRet,
    Flush,
    Atexit,
}

const EVENTS: usize = 9;

/// The plugin's callback for each event in its current registration, and
/// whether plugin-api already calls the event's dispatcher.
#[derive(Default)]
pub(crate) struct Slots {
    callbacks: [Option<(RawCb, crate::exports::Udata)>; EVENTS],
    dispatching: [bool; EVENTS],
}

impl Slots {
    /// Sets `event`'s callback; true if its dispatcher must be registered
    /// with plugin-api (the first time in this registration).
    pub(crate) fn set(
        &mut self,
        event: Event,
        cb: Option<RawCb>,
        udata: crate::exports::Udata,
    ) -> bool {
        let at = event as usize;
        self.callbacks[at] = cb.map(|cb| (cb, udata));
        !std::mem::replace(&mut self.dispatching[at], true)
    }

    /// `event`'s callback now.
    pub(crate) fn get(&self, event: Event) -> Option<(RawCb, crate::exports::Udata)> {
        self.callbacks[event as usize]
    }

    /// A reset unregistered everything: no dispatcher is registered any more.
    pub(crate) fn clear(&mut self) {
        *self = Slots::default();
    }
}

/// Execution and memory callbacks made for the plugin in its current
/// registration, by (function, user data, flags): see
/// `exports::translation::shared_exec`.
#[derive(Default)]
pub(crate) struct SharedCallbacks {
    pub(crate) exec:
        std::collections::HashMap<(usize, usize, c_int), tcgkit_plugin_api::SharedExecCallback>,
    pub(crate) mem:
        std::collections::HashMap<(usize, usize, c_int), tcgkit_plugin_api::SharedMemCallback>,
}

/// How a C plugin's shared callbacks are made: plain, or with the engine's
/// loop compiled around them for its frontend (`install_for`), so that a
/// block whose every instruction calls one C function makes a direct call
/// per instruction rather than a call through `dyn`.
#[derive(Clone, Copy)]
pub(crate) struct Callbacks {
    pub(crate) exec: fn(
        &PluginHandle,
        tcgkit_plugin_api::Access,
        crate::exports::ExecCall,
    ) -> tcgkit_plugin_api::SharedExecCallback,
    pub(crate) mem: fn(
        &PluginHandle,
        tcgkit_plugin_api::Access,
        crate::exports::MemCall,
    ) -> tcgkit_plugin_api::SharedMemCallback,
}

impl Callbacks {
    /// Shared callbacks any engine runs.
    pub(crate) fn plain() -> Callbacks {
        Callbacks {
            exec: |h, access, call| {
                if call.needs_context() {
                    h.shared_exec_callback(access, move |ctx| call.call::<true>(ctx))
                } else {
                    h.shared_exec_callback(access, move |ctx| call.call::<false>(ctx))
                }
            },
            mem: |h, access, call| {
                if call.needs_context() {
                    h.shared_mem_callback(access, move |ctx, info| call.call::<true>(ctx, info))
                } else {
                    h.shared_mem_callback(access, move |ctx, info| call.call::<false>(ctx, info))
                }
            },
        }
    }

    /// Callbacks inlined into the loops of an engine with frontend `F`.
    pub(crate) fn inlined_for<F: tcgkit_tcg_core::Frontend>() -> Callbacks {
        Callbacks {
            exec: |h, access, call| {
                if call.needs_context() {
                    h.inlined_exec_callback::<F>(access, move |ctx| call.call::<true>(ctx))
                } else {
                    h.inlined_exec_callback::<F>(access, move |ctx| call.call::<false>(ctx))
                }
            },
            mem: |h, access, call| {
                if call.needs_context() {
                    h.inlined_mem_callback::<F>(access, move |ctx, info| {
                        call.call::<true>(ctx, info);
                    })
                } else {
                    h.inlined_mem_callback::<F>(access, move |ctx, info| {
                        call.call::<false>(ctx, info);
                    })
                }
            },
        }
    }
}

/// Version 1's inline adds target the plugin's own `uint64_t`s, which
/// tcg-core cannot add to inline. Each such counter gets a one-slot
/// scoreboard that the engine adds to inline, and the sum is moved into the
/// plugin's counter before any of the plugin's code runs (every call into
/// it goes through `CPlugin::enter`), so the plugin never sees a count it
/// would not have seen under QEMU.
#[derive(Default)]
pub(crate) struct RawCounters {
    /// (the plugin's counter, the board the engine adds to), by counter.
    counters: Vec<(usize, std::sync::Arc<tcgkit_plugin_api::Scoreboard>)>,
}

impl RawCounters {
    /// The board standing for the plugin's counter at `ptr`.
    pub(crate) fn board_for(
        &mut self,
        ptr: usize,
        vcpus: usize,
    ) -> std::sync::Arc<tcgkit_plugin_api::Scoreboard> {
        if let Some((_, board)) = self.counters.iter().find(|(p, _)| *p == ptr) {
            return std::sync::Arc::clone(board);
        }
        let board = std::sync::Arc::new(tcgkit_plugin_api::Scoreboard::new(1, vcpus));
        self.counters.push((ptr, std::sync::Arc::clone(&board)));
        board
    }

    /// Moves what the engine added into the plugin's counters.
    fn flush(&self) {
        for (ptr, board) in &self.counters {
            let added = (0..board.vcpus() as u32)
                .filter_map(|vcpu| board.row(vcpu).and_then(|row| row.first()))
                .fold(0u64, |sum, cell| {
                    sum.wrapping_add(cell.swap(0, std::sync::atomic::Ordering::Relaxed))
                });
            if added != 0 {
                let cell = *ptr as *mut u64;
                // SAFETY: the plugin gave this pointer to a u64 it keeps for
                // the run, to be added to (QEMU adds to it the same way).
                unsafe { cell.write_unaligned(cell.read_unaligned().wrapping_add(added)) };
            }
        }
    }
}

/// Moves what the engine added into `plugin`'s v1 counters. Out of line,
/// and an `extern "C"` function, which cannot unwind: the callback that
/// tests for it then has no unwinding path at all (plugin-api's panic
/// boundary around it costs nothing), and no code for the rare case.
#[cold]
#[inline(never)]
extern "C" fn flush_raw_counters(plugin: &CPlugin) {
    plugin
        .raw_counters
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .flush();
}

/// A QEMU plugin shared object installed into a plugin host.
pub(crate) struct CPlugin {
    /// The id its callbacks are given (`qemu_plugin_id_t`).
    pub(crate) id: PluginId,
    /// What messages call it: the spec's path.
    pub(crate) name: String,
    /// Its `qemu_plugin_version`: signatures that changed between versions
    /// dispatch on it.
    pub(crate) version: c_int,
    /// Set when plugin-api installs it, before `qemu_plugin_install` runs.
    pub(crate) handle: OnceLock<PluginHandle>,
    /// Its callbacks, one per event (see [`Slots`]).
    pub(crate) slots: Mutex<Slots>,
    /// Its shared execution and memory callbacks (see [`SharedCallbacks`]).
    pub(crate) shared: Mutex<SharedCallbacks>,
    /// How they are made.
    pub(crate) callbacks: Callbacks,
    /// What of a running callback's state its code may ask for: its
    /// callbacks make only that reachable.
    pub(crate) context_use: ContextUse,
    /// Its v1 inline counters (see [`RawCounters`]).
    pub(crate) raw_counters: Mutex<RawCounters>,
    /// `raw_counters` has some: read without the lock on every call into C.
    has_raw_counters: std::sync::atomic::AtomicBool,
    /// What it was told once already.
    warned: Mutex<Vec<String>>,
    install: InstallFn,
    /// `name=value` strings, handed to `qemu_plugin_install` as argv;
    /// they live as long as the plugin, as QEMU keeps them.
    args: Vec<CString>,
    target: CString,
    /// Never closed: code of a plugin may be on the stack of any callback
    /// until the process ends, and an uninstalled plugin's atexit output
    /// is gone with QEMU too (QEMU closes it after uninstall).
    _library: Library,
}

impl std::fmt::Debug for CPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CPlugin")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Every C plugin loaded in this process, by id.
static PLUGINS: Mutex<Vec<Arc<CPlugin>>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl CPlugin {
    // One argument per thing the loader read; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: String,
        version: c_int,
        install: InstallFn,
        args: Vec<CString>,
        guest: &GuestInfo,
        library: Library,
        callbacks: Callbacks,
        context_use: ContextUse,
    ) -> Arc<CPlugin> {
        let plugin = Arc::new(CPlugin {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name,
            version,
            handle: OnceLock::new(),
            slots: Mutex::new(Slots::default()),
            shared: Mutex::new(SharedCallbacks::default()),
            callbacks,
            context_use,
            raw_counters: Mutex::new(RawCounters::default()),
            has_raw_counters: std::sync::atomic::AtomicBool::new(false),
            warned: Mutex::new(Vec::new()),
            install,
            args,
            target: CString::new(guest.arch.as_str()).unwrap_or_default(),
            _library: library,
        });
        PLUGINS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&plugin));
        plugin
    }

    /// The plugin with id `id`.
    pub(crate) fn by_id(id: PluginId) -> Option<Arc<CPlugin>> {
        PLUGINS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|p| p.id == id)
            .cloned()
    }

    /// The plugin whose code is running on this thread.
    pub(crate) fn current() -> Option<Arc<CPlugin>> {
        let current = context::frame()?.plugin;
        // SAFETY: the frame was made from an `Arc` that the call into the
        // plugin holds while the frame is current (`enter`, or the
        // callback's `ExecCall`/`MemCall`), and this thread is inside it.
        unsafe {
            Arc::increment_strong_count(current);
            Some(Arc::from_raw(current))
        }
    }

    /// The name of the plugin whose code is running on this thread, for the
    /// crash handler: no allocation, no reference count, no lock.
    pub(crate) fn current_name() -> Option<&'static str> {
        let current = context::frame()?.plugin;
        // SAFETY: as in `current`: the plugin outlives the `enter` that set
        // the pointer, and the process is dying when this is called.
        Some(unsafe { &*std::ptr::from_ref((*current).name.as_str()) })
    }

    /// Whether the plugin whose code is running speaks version `v` or later
    /// (false outside any plugin's code).
    pub(crate) fn current_at_least(v: c_int) -> bool {
        // SAFETY: as in `current`.
        context::frame().is_some_and(|frame| unsafe { (*frame.plugin).version >= v })
    }

    /// The board the engine adds to for the plugin's v1 counter at `ptr`.
    pub(crate) fn raw_counter(
        &self,
        ptr: usize,
        vcpus: usize,
    ) -> Arc<tcgkit_plugin_api::Scoreboard> {
        let board = self
            .raw_counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .board_for(ptr, vcpus);
        self.has_raw_counters
            .store(true, std::sync::atomic::Ordering::Relaxed);
        board
    }

    /// Runs `f` (a call into the plugin's code other than an execution or
    /// memory callback, which `ExecCall` and `MemCall` make) with the
    /// plugin current, its v1 inline counters up to date.
    pub(crate) fn enter<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        self.update_raw_counters();
        context::enter(Arc::as_ptr(self), f)
    }

    /// Brings the plugin's v1 inline counters up to date, before its code
    /// runs: one test of a flag for a plugin that has none.
    #[inline(always)]
    pub(crate) fn update_raw_counters(&self) {
        if self
            .has_raw_counters
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            flush_raw_counters(self);
        }
    }

    /// The plugin-api handle (set once installed).
    pub(crate) fn handle(&self) -> Option<&PluginHandle> {
        self.handle.get()
    }

    /// True the first time it is asked about `what`.
    pub(crate) fn warn_once(&self, what: &str) -> bool {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.iter().any(|w| w == what) {
            return false;
        }
        warned.push(what.to_owned());
        true
    }

    /// Whether the plugin speaks version `v` or later.
    pub(crate) fn at_least(&self, v: c_int) -> bool {
        self.version >= v
    }
}

impl Plugin for CPlugin {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let _ = self.handle.set(handle.clone());
        let info = QemuInfo {
            target_name: self.target.as_ptr(),
            version_min: abi::MIN_VERSION,
            // The plugin gets the version it asked for: it is the one
            // whose signatures it will be answered with.
            version_cur: self.version,
            system_emulation: false,
            smp_vcpus: 0,
            max_vcpus: 0,
        };
        let mut argv: Vec<*mut c_char> = self.args.iter().map(|a| a.as_ptr().cast_mut()).collect();
        let argc = c_int::try_from(argv.len()).unwrap_or(c_int::MAX);
        let install = self.install;
        let id = self.id;
        // SAFETY: `install` is the plugin's `qemu_plugin_install`, called as
        // QEMU calls it: `info` is valid during the call (QEMU's is a local
        // too), `argv` and its strings for the whole run (the strings live in
        // `args`; the array is leaked below), as a plugin may keep them.
        let status = self.enter(|| unsafe { install(id, &info, argc, argv.as_mut_ptr()) });
        // QEMU keeps `argv` until the plugin goes; one small array per plugin.
        std::mem::forget(argv);
        if status != 0 {
            return Err(PluginError::InstallFailed {
                plugin: self.name.clone(),
                reason: format!("qemu_plugin_install returned error code {status}"),
            });
        }
        Ok(())
    }
}
