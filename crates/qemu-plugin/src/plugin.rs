//! One loaded C plugin: its library, the API version it declared, and its
//! plugin-api handle; the table the exported functions find plugins in,
//! and which plugin's code is running on this thread.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use libloading::Library;
use tcgkit_plugin_api::{GuestInfo, Plugin, PluginError, PluginHandle};

use crate::abi::{self, InstallFn, PluginId, QemuInfo};

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

thread_local! {
    /// The plugin whose code this thread is running (install, a callback),
    /// for the functions that take no id (`qemu_plugin_outs`, the
    /// translation-time queries) to know whose version and handle apply.
    static CURRENT: RefCell<Vec<Arc<CPlugin>>> = const { RefCell::new(Vec::new()) };
}

impl CPlugin {
    pub(crate) fn new(
        name: String,
        version: c_int,
        install: InstallFn,
        args: Vec<CString>,
        guest: &GuestInfo,
        library: Library,
    ) -> Arc<CPlugin> {
        let plugin = Arc::new(CPlugin {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name,
            version,
            handle: OnceLock::new(),
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
        CURRENT.with(|c| c.borrow().last().cloned())
    }

    /// Runs `f` (a call into the plugin's code) with the plugin current.
    pub(crate) fn enter<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Leave;
        impl Drop for Leave {
            fn drop(&mut self) {
                CURRENT.with(|c| c.borrow_mut().pop());
            }
        }
        CURRENT.with(|c| c.borrow_mut().push(Arc::clone(self)));
        let _leave = Leave;
        f()
    }

    /// The plugin-api handle (set once installed).
    pub(crate) fn handle(&self) -> Option<&PluginHandle> {
        self.handle.get()
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
                reason: format!("qemu_plugin_install returned {status}"),
            });
        }
        Ok(())
    }
}
