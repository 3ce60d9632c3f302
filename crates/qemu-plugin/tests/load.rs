//! Loading QEMU plugins: every bad plugin gets a clear error naming it, and
//! the ABI the executable exports covers every function of the project's
//! header, versions 1 to 7.

mod common;

use common::build_plugin_with;
use std::path::Path;
use tcgkit_plugin_api::{GuestInfo, PluginHost};
use tcgkit_qemu_plugin::{QemuPluginError, install};

fn host() -> PluginHost {
    PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()))
}

#[test]
fn bad_plugins_get_clear_errors() {
    let err = install(&host(), Path::new("/nonexistent/libx.so"), &[]).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "cannot load plugin /nonexistent/libx.so: no such file"
    );

    /// A `-D` switch, the error kind it must give, and a phrase of its text.
    type Case = (&'static str, fn(&QemuPluginError) -> bool, &'static str);
    let cases: [Case; 5] = [
        (
            "BAD_VERSION",
            |e| matches!(e, QemuPluginError::Version { version: 99, .. }),
            "needs plugin API version 99, tcgkit speaks 1 to 7",
        ),
        (
            "NO_VERSION",
            |e| matches!(e, QemuPluginError::NoVersion { .. }),
            "does not declare qemu_plugin_version",
        ),
        (
            "NO_INSTALL",
            |e| matches!(e, QemuPluginError::NoInstall { .. }),
            "has no qemu_plugin_install",
        ),
        (
            "MISSING_SYMBOL",
            |e| matches!(e, QemuPluginError::Open { .. }),
            "qemu_plugin_no_such_function",
        ),
        (
            "FAIL_INSTALL",
            |e| matches!(e, QemuPluginError::InstallFailed { .. }),
            "qemu_plugin_install returned error code 3",
        ),
    ];
    for (define, kind, text) in cases {
        let plugin = build_plugin_with("bad", 1, Some(define));
        let host = host();
        let err = install(&host, &plugin, &[]).expect_err(define);
        let message = err.to_string();
        assert!(kind(&err), "{define}: {err:?}");
        assert!(message.contains(text), "{define}: {message}");
        assert!(
            message.contains(&*plugin.to_string_lossy()),
            "names the plugin: {message}"
        );
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(
            host.installed().is_empty(),
            "{define}: nothing stays installed"
        );
    }
    // Without a switch the same source installs.
    let good = build_plugin_with("bad", 1, None);
    let host = host();
    install(&host, &good, &[]).expect("a good plugin installs");
    assert_eq!(host.installed().len(), 1);
}

#[test]
fn every_function_of_the_header_is_exported_from_the_executable() {
    let header = std::fs::read_to_string(common::crate_dir().join("include/qemu-plugin.h"))
        .expect("the project's header");
    let mut declared: Vec<&str> = header
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("qemu_plugin_") && !w.ends_with("_t"))
        .filter(|w| {
            // Functions, not types, macros or the plugin's own symbols.
            header.contains(&format!("{w}("))
                && !matches!(
                    *w,
                    "qemu_plugin_install"
                        | "qemu_plugin_version"
                        | "qemu_plugin_scoreboard_u64_in_struct"
                )
        })
        .collect();
    declared.sort_unstable();
    declared.dedup();
    let exported: Vec<&str> = tcgkit_qemu_plugin::exported_names().collect();
    for name in &declared {
        assert!(
            exported.contains(name),
            "{name} is declared but not implemented"
        );
    }
    // Each is in the executable's dynamic symbol table, where a plugin's
    // undefined references resolve.
    let this = libloading::os::unix::Library::this();
    for name in &exported {
        // SAFETY: only the symbol's presence is checked; nothing is called.
        let found = unsafe { this.get::<*const ()>(name.as_bytes()) };
        assert!(found.is_ok(), "{name} is not exported dynamically");
    }
    assert!(
        declared.len() >= 60,
        "{} functions declared",
        declared.len()
    );
}
