//! Loading a plugin shared object as QEMU does: `dlopen` with `RTLD_NOW`
//! and local binding, `qemu_plugin_version` checked against the versions
//! tcgkit speaks, the arguments as `argv`, then `qemu_plugin_install`.

use std::ffi::{CString, c_int};
use std::path::Path;
use std::sync::Arc;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use tcgkit_plugin_api::PluginHost;

use crate::QemuPluginError;
use crate::abi::{self, InstallFn};
use crate::plugin::CPlugin;

/// Loads the plugin at `path` into `host` with `args` (each `name=value`,
/// as QEMU passes them) and runs its `qemu_plugin_install`. On error nothing
/// of it stays installed.
pub fn install(
    host: &PluginHost,
    path: &Path,
    args: &[String],
) -> Result<tcgkit_plugin_api::PluginId, QemuPluginError> {
    install_with(host, path, args, crate::plugin::Callbacks::plain())
}

/// [`install`] for an engine with frontend `F`: a callback the plugin
/// attaches to every instruction of a block runs in the engine's loop
/// compiled around it (plugin-api's `inlined_exec_callback`), as the
/// bundled plugins built with `PluginRegistry::bundled_for` do.
pub fn install_for<F: tcgkit_tcg_core::Frontend>(
    host: &PluginHost,
    path: &Path,
    args: &[String],
) -> Result<tcgkit_plugin_api::PluginId, QemuPluginError> {
    install_with(
        host,
        path,
        args,
        crate::plugin::Callbacks::inlined_for::<F>(),
    )
}

fn install_with(
    host: &PluginHost,
    path: &Path,
    args: &[String],
    callbacks: crate::plugin::Callbacks,
) -> Result<tcgkit_plugin_api::PluginId, QemuPluginError> {
    crate::exports::keep_linked();
    let shown = path.display().to_string();
    let name = shown.clone();
    if !path.exists() {
        return Err(QemuPluginError::Open {
            plugin: shown,
            reason: "no such file".into(),
        });
    }
    // Plugins resolve glib's functions in the process, as in QEMU, which
    // links glib: open it (globally) first.
    crate::glib::Glib::get()?;
    // SAFETY: loading the plugin runs its initialisers: that is what
    // loading a plugin means, as in QEMU. RTLD_NOW makes a symbol the
    // plugin needs and tcgkit lacks an error now, not a crash later.
    let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
        QemuPluginError::Open {
            plugin: shown.clone(),
            reason: e.to_string(),
        }
    })?;
    // SAFETY: `qemu_plugin_version` is an `int` in every API version.
    let version: c_int = unsafe {
        let symbol = library.get::<*const c_int>(b"qemu_plugin_version\0");
        match symbol {
            Ok(p) if !p.is_null() => **p,
            _ => return Err(QemuPluginError::NoVersion { plugin: shown }),
        }
    };
    if !(abi::MIN_VERSION..=abi::MAX_VERSION).contains(&version) {
        return Err(QemuPluginError::Version {
            plugin: shown,
            version,
        });
    }
    // SAFETY: `qemu_plugin_install` has this signature in every version.
    let install: InstallFn = unsafe {
        match library.get::<InstallFn>(b"qemu_plugin_install\0") {
            Ok(f) => *f,
            Err(_) => return Err(QemuPluginError::NoInstall { plugin: shown }),
        }
    };
    let args = args
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| QemuPluginError::Open {
            plugin: shown.clone(),
            reason: "an argument contains a NUL byte".into(),
        })?;
    let plugin = CPlugin::new(
        name.clone(),
        version,
        install,
        args,
        host.guest(),
        library.into(),
        callbacks,
        crate::imports::ContextUse::of_file(path),
    );
    host.install(
        &name,
        Arc::clone(&plugin) as Arc<dyn tcgkit_plugin_api::Plugin>,
    )
    .map_err(|e| match e {
        tcgkit_plugin_api::PluginError::InstallFailed { reason, .. } => {
            QemuPluginError::InstallFailed {
                plugin: name.clone(),
                reason,
            }
        }
        other => QemuPluginError::Install(other),
    })
}

/// Whether a `--plugin` spec names a shared object rather than a bundled
/// plugin: its name (before the first `,`, after QEMU's optional `file=`)
/// contains a `/` or ends in `.so`.
pub fn is_shared_object(spec: &str) -> bool {
    let name = spec.split(',').next().unwrap_or_default();
    let name = name.strip_prefix("file=").unwrap_or(name);
    name.contains('/') || name.ends_with(".so")
}

/// A plugin spec as QEMU's `-plugin` reads it: `[file=]PATH[,name=value...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedObjectSpec {
    /// The shared object.
    pub path: std::path::PathBuf,
    /// The arguments handed to `qemu_plugin_install`, as `name=value`.
    pub args: Vec<String>,
    /// Warnings QEMU prints for deprecated spellings (`arg=`, a bare flag).
    pub warnings: Vec<String>,
}

impl SharedObjectSpec {
    /// Parses one spec that names one plugin (see [`SharedObjectSpec::parse_all`]).
    pub fn parse(spec: &str) -> Result<SharedObjectSpec, QemuPluginError> {
        let mut all = SharedObjectSpec::parse_all(spec)?;
        match all.len() {
            1 => Ok(all.remove(0)),
            _ => Err(QemuPluginError::Open {
                plugin: spec.to_owned(),
                reason: "a spec naming several plugins (file= twice)".into(),
            }),
        }
    }

    /// Parses `spec` as QEMU's option parser does: the first item is the
    /// path (`file=` optional), each `file=PATH` after it starts another
    /// plugin, and every other item is an argument of the current one, as
    /// `name=value`. QEMU's deprecated spellings are taken with QEMU's
    /// warning: a bare `NAME` is `NAME=on` and `noNAME` is `NAME=off`;
    /// `arg=NAME` is `NAME=on` and `arg=NAME=VALUE` is `NAME=VALUE`, while
    /// `arg=on` (a boolean) stays `arg=on`.
    pub fn parse_all(spec: &str) -> Result<Vec<SharedObjectSpec>, QemuPluginError> {
        let mut specs: Vec<SharedObjectSpec> = Vec::new();
        for (i, part) in spec.split(',').enumerate() {
            let path = part.strip_prefix("file=").or((i == 0).then_some(part));
            if let Some(path) = path {
                if path.is_empty() {
                    return Err(QemuPluginError::Open {
                        plugin: spec.to_owned(),
                        reason: "file= requires a non-empty argument".into(),
                    });
                }
                if specs
                    .last()
                    .is_none_or(|s| s.path != std::path::Path::new(path))
                {
                    specs.push(SharedObjectSpec {
                        path: path.into(),
                        args: Vec::new(),
                        warnings: Vec::new(),
                    });
                }
                continue;
            }
            let current = specs.last_mut().ok_or_else(|| QemuPluginError::Open {
                plugin: spec.to_owned(),
                reason: "missing earlier file= option".into(),
            })?;
            let (arg, warning) = argument(part);
            current.args.push(arg);
            current.warnings.extend(warning);
        }
        Ok(specs)
    }

    /// Adds `other`'s arguments (the same path named again: QEMU loads one
    /// plugin with every argument given for it).
    pub fn merge(&mut self, other: SharedObjectSpec) {
        self.args.extend(other.args);
        self.warnings.extend(other.warnings);
    }
}

/// One `name[=value]` item as QEMU hands it to the plugin, and QEMU's
/// warning if the spelling is deprecated.
fn argument(part: &str) -> (String, Option<String>) {
    const BOOLEANS: [&str; 8] = ["on", "yes", "true", "y", "off", "no", "false", "n"];
    match part.split_once('=') {
        Some(("arg", value)) if !BOOLEANS.contains(&value) => {
            let full = if value.contains('=') {
                value.to_owned()
            } else {
                format!("{value}=on")
            };
            let warning =
                format!("using 'arg={value}' is deprecated; please use '{full}' directly");
            (full, Some(warning))
        }
        Some((name, value)) => (format!("{name}={value}"), None),
        None => {
            let full = match part.strip_prefix("no") {
                Some(name) if !name.is_empty() => format!("{name}=off"),
                _ => format!("{part}=on"),
            };
            let warning =
                format!("short-form boolean option '{part}' deprecated; please use {full} instead");
            (full, Some(warning))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_objects_are_told_from_bundled_plugins() {
        for spec in [
            "./libinsn.so",
            "libinsn.so,inline=on",
            "file=/x/libmem.so",
            "a/b,k=v",
        ] {
            assert!(is_shared_object(spec), "{spec}");
        }
        for spec in [
            "insn",
            "insn,inline=on",
            "hotblocks,limit=3",
            "mem,path=a/b",
        ] {
            assert!(!is_shared_object(spec), "{spec}");
        }
    }

    #[test]
    fn specs_split_as_qemu_splits_them() {
        let spec =
            SharedObjectSpec::parse("file=./libinsn.so,inline=on,arg=verbose,arg=k=v,arg=on")
                .expect("parses");
        assert_eq!(spec.path, std::path::Path::new("./libinsn.so"));
        assert_eq!(spec.args, ["inline=on", "verbose=on", "k=v", "arg=on"]);
        assert_eq!(spec.warnings.len(), 2);
        assert!(SharedObjectSpec::parse("file=,x=1").is_err());
    }
}
