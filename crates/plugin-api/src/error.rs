//! The one error type of the crate.

use tcgkit_tcg_core::MemFault;

/// What can go wrong when installing plugins or using the API from a callback.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// A plugin spec (`name,key=value,...`) is malformed.
    #[error("bad plugin spec {spec:?}: {reason}")]
    BadSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No plugin of that name is registered.
    #[error("unknown plugin {name:?} (available: {available})")]
    UnknownPlugin {
        /// The name asked for.
        name: String,
        /// The registered names, comma-separated.
        available: String,
    },
    /// A plugin argument is unknown or has a bad value.
    #[error("plugin {plugin}: bad argument {key:?}: {reason}")]
    BadArgument {
        /// The plugin.
        plugin: String,
        /// The argument key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A plugin refused to install.
    #[error("plugin {plugin} failed to install: {reason}")]
    InstallFailed {
        /// The plugin.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// The plugin is no longer installed (uninstalled, failed, or its host is gone).
    #[error("plugin {plugin} is not installed")]
    NotInstalled {
        /// The plugin.
        plugin: String,
    },
    /// The plugin is already being uninstalled: no further reset or uninstall.
    #[error("plugin {plugin} is already being uninstalled")]
    Uninstalling {
        /// The plugin.
        plugin: String,
    },
    /// A callback read registers without declaring [`crate::Access::REGISTERS`].
    #[error("this callback did not declare register access")]
    RegistersNotDeclared,
    /// A callback read memory without declaring [`crate::Access::MEMORY`].
    #[error("this callback did not declare memory access")]
    MemoryNotDeclared,
    /// Registers cannot be read here (memory callbacks run while the
    /// instruction is updating the register file).
    #[error("registers are not readable in this kind of callback")]
    RegistersUnavailable,
    /// The guest has no register of that name.
    #[error("unknown register {0:?}")]
    UnknownRegister(String),
    /// A guest memory read failed.
    #[error("guest memory read failed: {0}")]
    Memory(MemFault),
    /// Writing plugin output failed.
    #[error("plugin output: {0}")]
    Output(#[from] std::io::Error),
}
