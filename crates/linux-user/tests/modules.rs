//! Every ELF file the guest maps executable is a module: an image in the
//! process's registry, loaded when mapped and unloaded (in reverse load
//! order at exit) with the module observer hearing of it between the
//! registry's `unloading` and `unloaded`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tcgkit_image_core::{Image, ImageRegistry, LifecycleObserver, LoadedImage, LoadingEvent};
use tcgkit_linux_user::{GuestExit, Module, ModuleObserver, Options, Process};

const SYSROOT: &str = "/usr/riscv64-linux-gnu";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/guests")
        .join(name)
}

/// One log for both observers, so their interleaving is visible.
type Log = Arc<Mutex<Vec<String>>>;

struct Registry(Log);

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl LifecycleObserver for Registry {
    fn loading(&mut self, event: &LoadingEvent<'_>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("loading {}", file_name(event.path)));
    }
    fn loaded(&mut self, image: &LoadedImage<'_>) {
        let name = file_name(image.path());
        self.0.lock().unwrap().push(format!("loaded {name}"));
    }
    fn unloading(&mut self, image: &LoadedImage<'_>) {
        let name = file_name(image.path());
        self.0.lock().unwrap().push(format!("unloading {name}"));
    }
    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        let name = file_name(image.path());
        self.0.lock().unwrap().push(format!("unloaded {name}"));
    }
}

struct Modules(Log, Arc<Mutex<Vec<Module>>>);

impl ModuleObserver for Modules {
    fn module_loaded(&mut self, module: &Module) {
        let name = file_name(&module.path);
        self.0.lock().unwrap().push(format!("module {name}"));
        self.1.lock().unwrap().push(module.clone());
    }
    fn module_unloaded(&mut self, module: &Module) {
        let name = file_name(&module.path);
        self.0.lock().unwrap().push(format!("module gone {name}"));
    }
}

/// Runs `guest` with a module registry and observer; returns the exit, the
/// shared log and the modules reported.
fn run_watched(
    guest: &Path,
    args: &[&str],
    prefix: Option<&str>,
) -> (GuestExit, Vec<String>, Vec<Module>) {
    let image = Image::open(guest).expect("open guest");
    let argv: Vec<OsString> = std::iter::once(guest.as_os_str().to_owned())
        .chain(args.iter().map(OsString::from))
        .collect();
    let options = Options::default().with_prefix(prefix.map(PathBuf::from));
    let mut process =
        Process::from_image_with_options(&image, guest, &argv, &[], options).expect("load");
    let log = Log::default();
    let modules = Arc::new(Mutex::new(Vec::new()));
    let mut registry = ImageRegistry::new();
    registry.add_observer(Registry(log.clone()));
    process.set_module_registry(registry);
    process.set_module_observer(Box::new(Modules(log.clone(), modules.clone())));
    let exit = process.run();
    assert_eq!(process.modules().count(), 0, "all unloaded at exit");
    assert!(process.module_registry().is_empty());
    let log = log.lock().unwrap().clone();
    let modules = modules.lock().unwrap().clone();
    (exit, log, modules)
}

#[test]
fn a_static_program_is_one_module_from_start_to_exit() {
    let guest = fixture("faults");
    let (exit, log, modules) = run_watched(&guest, &["exit=3"], None);
    assert_eq!(exit, GuestExit::Exited(3));
    assert_eq!(
        log,
        [
            "loading faults",
            "loaded faults",
            "module faults",
            "unloading faults",
            "module gone faults",
            "unloaded faults"
        ]
    );
    let [program] = &modules[..] else {
        panic!("{modules:?}")
    };
    let image = Image::open(&guest).expect("open");
    assert_eq!(program.build_id.as_deref(), image.build_id());
    assert!(program.build_id.is_some(), "Debian's gcc links a build-id");
    let exec = image
        .elf()
        .expect("elf")
        .segments
        .iter()
        .find(|s| s.flags.execute);
    let text = exec.expect("a text segment").vaddr;
    assert!(program.contains(text), "{program:?} holds {text:#x}");
}

#[test]
fn a_dynamic_program_loads_ld_so_and_libc_and_unloads_them_in_reverse() {
    if !Path::new(SYSROOT).join("lib/libc.so.6").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI installs the sysroot"
        );
        eprintln!("no riscv64 sysroot: skipped");
        return;
    }
    let guest = fixture("dynamic/faults");
    let (exit, log, modules) = run_watched(&guest, &["exit=0"], Some(SYSROOT));
    assert_eq!(exit, GuestExit::Exited(0));
    let ld = "ld-linux-riscv64-lp64d.so.1";
    let expected: Vec<String> = [
        "loading faults".to_string(),
        "loaded faults".into(),
        "module faults".into(),
        format!("loading {ld}"),
        format!("loaded {ld}"),
        format!("module {ld}"),
        "loading libc.so.6".into(),
        "loaded libc.so.6".into(),
        "module libc.so.6".into(),
        "unloading libc.so.6".into(),
        "module gone libc.so.6".into(),
        "unloaded libc.so.6".into(),
        format!("unloading {ld}"),
        format!("module gone {ld}"),
        format!("unloaded {ld}"),
        "unloading faults".into(),
        "module gone faults".into(),
        "unloaded faults".into(),
    ]
    .into();
    assert_eq!(log, expected);
    // Each module's span holds its own text and no other module's.
    for (i, module) in modules.iter().enumerate() {
        assert!(
            module.start < module.end && module.start % 4096 == 0,
            "{module:?}"
        );
        for other in &modules[i + 1..] {
            assert!(
                module.end <= other.start || other.end <= module.start,
                "{module:?} {other:?}"
            );
        }
        let image = Image::open(&module.path).expect("module file");
        assert_eq!(module.build_id.as_deref(), image.build_id(), "{module:?}");
    }
    assert!(
        modules[2].path.starts_with(SYSROOT),
        "libc from the sysroot"
    );
}
