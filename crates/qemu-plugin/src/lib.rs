//! Unmodified QEMU TCG plugins (`.so` files built against `qemu-plugin.h`,
//! plugin API versions 1 to 7) running on tcgkit's plugin host, with the
//! guarantees of [`tcgkit_plugin_api`]: `qemu_plugin_reset` and
//! `qemu_plugin_uninstall` from any callback take effect at the next safe
//! point, their completion runs exactly once, no callback of the old
//! registration runs after it, and nothing is read after it is freed.
//!
//! [`install`] loads a plugin as QEMU does (`dlopen` with `RTLD_NOW` and
//! local binding, `qemu_plugin_version` checked, `qemu_plugin_install` called
//! with the `qemu_info_t` of that version and the `name=value` arguments as
//! argv). The host side of the ABI, every `qemu_plugin_*` function, is
//! exported from the executable that links this crate: its build script
//! passes the export list to binaries and tests of this package, and to
//! dependents that ask (`DEP_TCGKIT_QEMU_PLUGIN_EXPORTS`, see the `tcgkit`
//! CLI's build script). Where a function's signature changed between API
//! versions, it answers as the calling plugin's declared version says. glib
//! objects that cross the ABI come from the system's libglib-2.0, opened
//! when first needed.
//!
//! A plugin's own code is not Rust: a crash in it cannot be caught like a
//! panic. With [`report_crashes`], the crash names the plugin, the
//! embedder's last words run (a trace is completed), and the process dies
//! by the signal.
//!
//! ```no_run
//! use std::path::Path;
//! use tcgkit_plugin_api::{GuestInfo, PluginHost};
//!
//! let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::stderr()));
//! let id = tcgkit_qemu_plugin::install(&host, Path::new("./libinsn.so"), &["inline=on".into()])?;
//! # let _ = id;
//! # Ok::<(), tcgkit_qemu_plugin::QemuPluginError>(())
//! ```
//!

mod abi;
mod context;
mod crash;
mod exports;
mod glib;
mod imports;
mod loader;
mod plugin;
mod symbols;
mod trans;

pub use abi::{MAX_VERSION, MIN_VERSION};
pub use context::{RegisterReader, with_registers};
pub use crash::report_crashes;
pub use exports::exported_names;
pub use loader::{SharedObjectSpec, install, install_for, is_shared_object};

/// Why a QEMU plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QemuPluginError {
    /// The file is missing or is not a shared object this process can load
    /// (including a `qemu_plugin_*` function it needs that tcgkit lacks).
    #[error("cannot load plugin {plugin}: {reason}")]
    Open {
        /// The plugin as named on the command line.
        plugin: String,
        /// What `dlopen` or the file system said.
        reason: String,
    },
    /// No `qemu_plugin_version` symbol: not a QEMU plugin.
    #[error(
        "cannot load plugin {plugin}: it does not declare qemu_plugin_version (not a QEMU plugin)"
    )]
    NoVersion {
        /// The plugin.
        plugin: String,
    },
    /// A version outside [`MIN_VERSION`]..=[`MAX_VERSION`].
    #[error(
        "cannot load plugin {plugin}: it needs plugin API version {version}, tcgkit speaks {MIN_VERSION} to {MAX_VERSION}"
    )]
    Version {
        /// The plugin.
        plugin: String,
        /// Its `qemu_plugin_version`.
        version: i32,
    },
    /// No `qemu_plugin_install` symbol.
    #[error("cannot load plugin {plugin}: it has no qemu_plugin_install")]
    NoInstall {
        /// The plugin.
        plugin: String,
    },
    /// libglib-2.0 could not be opened.
    #[error("cannot open glib for QEMU plugins: {reason}")]
    Glib {
        /// What failed.
        reason: String,
    },
    /// `qemu_plugin_install` returned an error (or panicked a Rust
    /// callback it called).
    #[error("cannot load plugin {plugin}: {reason}")]
    InstallFailed {
        /// The plugin.
        plugin: String,
        /// What went wrong, e.g. `qemu_plugin_install returned error code 3`.
        reason: String,
    },
    /// The host refused the plugin for another reason.
    #[error(transparent)]
    Install(#[from] tcgkit_plugin_api::PluginError),
}
