//! `PluginHost::on_lifecycle`: embedders (the profiler) hear of installs,
//! completed resets and uninstalls, each exactly once, in order.

use std::sync::{Arc, Mutex};
use tcgkit_plugin_api::{
    GuestInfo, Plugin, PluginError, PluginHandle, PluginHost, PluginLifecycle,
};

/// Asks for a reset at install; its completion asks for an uninstall.
struct ResetThenLeave;

impl Plugin for ResetThenLeave {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        handle.reset(|h| {
            let _ = h.uninstall(|| {});
        })
    }
}

/// Does nothing; stays installed.
struct Quiet;

impl Plugin for Quiet {
    fn install(self: Arc<Self>, _handle: &PluginHandle) -> Result<(), PluginError> {
        Ok(())
    }
}

#[test]
fn watchers_see_install_reset_and_uninstall_once_each() {
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()));
    let seen: Arc<Mutex<Vec<(PluginLifecycle, String)>>> = Arc::default();
    let log = Arc::clone(&seen);
    host.on_lifecycle(move |what, _id, name| log.lock().unwrap().push((what, name.to_owned())));

    host.install("leaver", Arc::new(ResetThenLeave)).unwrap();
    host.install("quiet", Arc::new(Quiet)).unwrap();
    // No engine is attached, so pending operations complete at finish.
    host.finish().unwrap();

    let seen = seen.lock().unwrap().clone();
    let expected = [
        (PluginLifecycle::Installed, "leaver"),
        (PluginLifecycle::Installed, "quiet"),
        (PluginLifecycle::Reset, "leaver"),
        (PluginLifecycle::Uninstalled, "leaver"),
    ];
    let got: Vec<(PluginLifecycle, &str)> = seen.iter().map(|(w, n)| (*w, n.as_str())).collect();
    assert_eq!(got, expected);
    let names: Vec<String> = host.installed().into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["quiet"]);
}
