//! A plugin holding callbacks on a shared object's instructions while the
//! guest dlopens and dlcloses it in a loop, with a different object mapped
//! at the same address in between (fixtures/guests/dynamic/dlopen): no
//! callback attached to one load of a module runs after that load is
//! unloaded, and every load's callbacks do run while it is mapped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tcgkit_image_core::{Image, ImageRegistry};
use tcgkit_linux_user::{GuestExit, Module, ModuleObserver, Options, Process};
use tcgkit_plugin_api::{
    Access, GuestInfo, ModuleInfo, Plugin, PluginError, PluginHandle, PluginHost, SymbolTable,
};

const SYSROOT: &str = "/usr/riscv64-linux-gnu";
const ITERATIONS: u64 = 6;

fn dynamic_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests/dynamic")
}

/// Which load of each module is mapped now, and what the callbacks saw.
#[derive(Default)]
struct Watch {
    /// (module start, load number) of the modules mapped now.
    live: Mutex<Vec<(u64, u64)>>,
    loads: AtomicU64,
    unloads: AtomicU64,
    /// Calls of callbacks attached to libmod_a.so, per load number.
    calls: Mutex<Vec<u64>>,
    /// Calls whose load was no longer the one mapped at their address.
    stale: AtomicU64,
}

impl Plugin for Watch {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_module_load(move |m| {
            let load = me.loads.fetch_add(1, Ordering::SeqCst);
            me.live.lock().unwrap().push((m.start, load));
        });
        let me = Arc::clone(&self);
        handle.on_module_unload(move |m| {
            me.unloads.fetch_add(1, Ordering::SeqCst);
            me.live
                .lock()
                .unwrap()
                .retain(|&(start, _)| start != m.start);
        });
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            let Some(module) = tb.module() else { return };
            if module.name() != "libmod_a.so" {
                return;
            }
            let start = module.start;
            let load = me
                .live
                .lock()
                .unwrap()
                .iter()
                .find(|&&(s, _)| s == start)
                .map(|&(_, load)| load)
                .expect("a translated module is live");
            for mut insn in tb.insns() {
                let me = Arc::clone(&me);
                insn.on_exec(Access::NONE, move |_| {
                    let mapped = me.live.lock().unwrap().contains(&(start, load));
                    if !mapped {
                        me.stale.fetch_add(1, Ordering::SeqCst);
                    }
                    let mut calls = me.calls.lock().unwrap();
                    let at = load as usize;
                    if calls.len() <= at {
                        calls.resize(at + 1, 0);
                    }
                    calls[at] += 1;
                });
            }
        });
        Ok(())
    }
}

/// The CLI's bridge, in small: modules reach the plugins with their symbols.
struct Forward(PluginHost, Arc<Mutex<Vec<(String, u64)>>>);

impl ModuleObserver for Forward {
    fn module_loaded(&mut self, module: &Module) {
        let name = module
            .path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        self.1.lock().unwrap().push((name, module.start));
        let info = ModuleInfo::new(module.path.clone(), module.start, module.end)
            .with_build_id(module.build_id.clone())
            .with_entry(module.entry);
        let bytes = Image::open(&module.path).expect("module file");
        self.0
            .module_loaded(info, SymbolTable::from_elf_at(bytes.bytes(), module.bias));
    }

    fn module_unloaded(&mut self, module: &Module) {
        self.0.module_unloaded(module.start);
    }
}

#[test]
fn callbacks_on_an_unloaded_module_never_run_even_with_new_code_at_its_address() {
    if !Path::new(SYSROOT).join("lib/libc.so.6").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI installs the sysroot"
        );
        eprintln!("no riscv64 sysroot: skipped");
        return;
    }
    let dir = dynamic_fixtures().canonicalize().expect("fixtures");
    let guest = dir.join("dlopen");
    let image = Image::open(&guest).expect("open guest");
    let argv: Vec<OsString> = vec![
        guest.clone().into_os_string(),
        dir.clone().into_os_string(),
        ITERATIONS.to_string().into(),
    ];
    let options = Options::default().with_prefix(Some(SYSROOT.into()));
    let mut process =
        Process::from_image_with_options(&image, &guest, &argv, &[], options).expect("load");
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()));
    let watch = Arc::new(Watch::default());
    host.install("watch", watch.clone()).expect("install");
    let mapped = Arc::new(Mutex::new(Vec::new()));
    process.set_module_registry(ImageRegistry::new());
    process.set_module_observer(Box::new(Forward(host.clone(), mapped.clone())));
    host.attach(process.engine_mut());
    host.vcpu_init(0);
    assert_eq!(process.run(), GuestExit::Exited(0));
    host.vcpu_exit(0);
    host.finish().expect("finish");

    let mapped = mapped.lock().unwrap().clone();
    let a: Vec<u64> = mapped
        .iter()
        .filter(|m| m.0 == "libmod_a.so")
        .map(|m| m.1)
        .collect();
    let b: Vec<u64> = mapped
        .iter()
        .filter(|m| m.0 == "libmod_b.so")
        .map(|m| m.1)
        .collect();
    assert_eq!(a.len() as u64, ITERATIONS, "{mapped:?}");
    assert_eq!(b.len() as u64, ITERATIONS);
    // The point of the fixture: B is mapped exactly where A was.
    assert!(a.iter().chain(&b).all(|&s| s == a[0]), "{mapped:?}");
    // Program, ld.so, libc, then A and B each iteration; all unloaded.
    let loads = watch.loads.load(Ordering::SeqCst);
    assert_eq!(loads, 3 + 2 * ITERATIONS);
    assert_eq!(watch.unloads.load(Ordering::SeqCst), loads);
    assert_eq!(
        watch.stale.load(Ordering::SeqCst),
        0,
        "a callback of an unloaded module ran"
    );
    // Every load of A ran its callbacks: load numbers 3, 5, 7, ...
    let calls = watch.calls.lock().unwrap().clone();
    let per_load: Vec<u64> = (0..ITERATIONS)
        .map(|i| calls.get(3 + 2 * i as usize).copied().unwrap_or(0))
        .collect();
    assert!(per_load.iter().all(|&n| n > 100), "{per_load:?}");
    // Nothing counted under a load number that was not A.
    let elsewhere: u64 = calls
        .iter()
        .enumerate()
        .filter(|(load, _)| *load < 3 || (load - 3) % 2 != 0)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(elsewhere, 0);
}
