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
    crate::exports::keep_linked();
    let shown = path.display().to_string();
    let name = shown.clone();
    if !path.exists() {
        return Err(QemuPluginError::Open {
            plugin: shown,
            reason: "no such file".into(),
        });
    }
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
    /// Warnings QEMU prints for deprecated spellings (`arg=`).
    pub warnings: Vec<String>,
}

impl SharedObjectSpec {
    /// Parses `spec`. QEMU's deprecated `arg=NAME` becomes `NAME=on` and
    /// `arg=NAME=VALUE` becomes `NAME=VALUE`, with QEMU's warning; `arg=on`
    /// (a boolean) stays `arg=on`, as QEMU keeps it.
    pub fn parse(spec: &str) -> Result<SharedObjectSpec, QemuPluginError> {
        let mut parts = spec.split(',');
        let first = parts.next().unwrap_or_default();
        let path = first.strip_prefix("file=").unwrap_or(first);
        if path.is_empty() {
            return Err(QemuPluginError::Open {
                plugin: spec.to_owned(),
                reason: "file= requires a non-empty argument".into(),
            });
        }
        let (mut args, mut warnings) = (Vec::new(), Vec::new());
        for part in parts {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let boolean = matches!(
                value,
                "on" | "yes" | "true" | "y" | "off" | "no" | "false" | "n"
            );
            if name == "arg" && !boolean {
                let full = if value.contains('=') {
                    value.to_owned()
                } else {
                    format!("{value}=on")
                };
                warnings.push(format!(
                    "using 'arg={value}' is deprecated; please use '{full}' directly"
                ));
                args.push(full);
            } else {
                args.push(format!("{name}={value}"));
            }
        }
        Ok(SharedObjectSpec {
            path: path.into(),
            args,
            warnings,
        })
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
