//! Building the project's test plugins with the host C compiler, and
//! running a guest fixture with QEMU plugins installed.

#![allow(dead_code)] // each test binary uses a subset

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use tcgkit_linux_user::{GuestExit, Process};
use tcgkit_plugin_api::{GuestInfo, GuestProgram, PluginHost};

/// The crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A guest fixture.
pub fn guest(name: &str) -> PathBuf {
    crate_dir().join("../../fixtures/guests").join(name)
}

/// Builds `tests/plugins/NAME.c` against the project's header for API
/// `version` into a scratch directory; returns the `.so`.
pub fn build_plugin(name: &str, version: u32) -> PathBuf {
    build_plugin_with(name, version, None)
}

/// [`build_plugin`] with `-D<define>`. Each plugin is built once per test
/// binary: tests run in parallel, and two compilers writing one file would
/// hand a test half a shared object.
pub fn build_plugin_with(name: &str, version: u32, define: Option<&str>) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let key = format!("{name}/{version}/{define:?}");
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, path)) = built.iter().find(|(k, _)| *k == key) {
        return path.clone();
    }
    let path = compile(name, version, define);
    built.push((key, path.clone()));
    path
}

fn compile(name: &str, version: u32, define: Option<&str>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcgkit-qemu-plugins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let tag = define
        .map(|d| format!("-{}", d.to_lowercase()))
        .unwrap_or_default();
    let out = dir.join(format!("lib{name}{tag}-v{version}.so"));
    let source = crate_dir().join("tests/plugins").join(format!("{name}.c"));
    let status = Command::new("cc")
        .args(["-O1", "-g", "-shared", "-fPIC", "-fvisibility=hidden"])
        .args(["-Wall", "-Wextra", "-Werror"])
        .arg(format!("-DQEMU_PLUGIN_VERSION={version}"))
        .args(define.map(|d| format!("-D{d}")))
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg("-o")
        .arg(&out)
        .arg(&source)
        // glib by its soname: the runtime library (which qemu-user needs
        // too) suffices, no development package.
        .arg("-l:libglib-2.0.so.0")
        .status()
        .expect("the host C compiler (cc) runs");
    assert!(status.success(), "building {}", source.display());
    out
}

/// What plugins print, shared with the host's output.
#[derive(Clone, Default)]
pub struct Output(Arc<Mutex<Vec<u8>>>);

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Output {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// A guest run with plugins: its exit, the plugins' output, the engine's
/// instruction count.
pub struct Run {
    pub exit: GuestExit,
    pub output: String,
    pub insns: u64,
    /// The stack pointer the guest started with.
    pub initial_sp: u64,
}

/// A fresh copy of `plugin` under a new name: a process loads a shared
/// object once (a second `dlopen` of the same file returns the same one,
/// with its globals as the last run left them), and each test run here
/// wants a plugin of its own, as each QEMU process has.
fn fresh_copy(plugin: &Path) -> PathBuf {
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let copy = plugin.with_extension(format!("{n}.so"));
    std::fs::copy(plugin, &copy).expect("copy plugin");
    copy
}

/// Runs fixture `program` with `args`, with each `(plugin, args)` installed
/// (a `.so` path and its `name=value` arguments; each run loads its own
/// copy).
pub fn run(program: &str, args: &[&str], plugins: &[(&Path, &[&str])]) -> Run {
    run_with(program, args, plugins, &[])
}

/// [`run`], with bundled plugins (`NAME[,k=v]` specs) installed after the
/// shared objects.
pub fn run_with(
    program: &str,
    args: &[&str],
    plugins: &[(&Path, &[&str])],
    bundled: &[&str],
) -> Run {
    let path = guest(program);
    let argv: Vec<OsString> = std::iter::once(path.clone().into_os_string())
        .chain(args.iter().map(OsString::from))
        .collect();
    let mut process = Process::load(&path, &argv, &[]).expect("load guest");
    let layout = process.layout();
    let info = GuestInfo::user("riscv64", 1).with_program(GuestProgram {
        path: path.clone(),
        start_code: layout.start_code,
        end_code: layout.end_code,
        entry: layout.entry,
    });
    let output = Output::default();
    let host = PluginHost::new(info, Box::new(output.clone()));
    for (plugin, plugin_args) in plugins {
        let plugin_args: Vec<String> = plugin_args.iter().map(|s| s.to_string()).collect();
        tcgkit_qemu_plugin::install(&host, &fresh_copy(plugin), &plugin_args)
            .expect("install plugin");
    }
    let registry = tcgkit_plugin_api::PluginRegistry::bundled();
    for spec in bundled {
        host.install_spec(&registry, spec)
            .expect("install bundled plugin");
    }
    host.attach(process.engine_mut());
    process.set_syscall_observer(Box::new(ForwardSyscalls(host.clone())));
    // As the CLI does: vcpu_init may read the registers.
    let cpu = process.cpu();
    let read =
        |name: &str| <tcgkit_riscv::Rv64 as tcgkit_tcg_core::Frontend>::read_register(cpu, name);
    tcgkit_qemu_plugin::with_registers(&read, || host.vcpu_init(0));
    let initial_sp = process.initial_stack_pointer();
    let exit = process.run();
    host.vcpu_exit(0);
    host.finish().expect("finish plugins");
    Run {
        exit,
        output: output.text(),
        insns: process.engine().stats().insns_executed,
        initial_sp,
    }
}

/// Hands the guest's syscalls to the plugins, as the CLI does.
struct ForwardSyscalls(PluginHost);

impl tcgkit_linux_user::SyscallObserver for ForwardSyscalls {
    fn on_syscall(&mut self, number: u64, args: &[u64; 6]) {
        self.0.on_syscall(0, number, args);
    }
    fn on_syscall_return(&mut self, number: u64, ret: u64) {
        self.0.on_syscall_return(0, number, ret);
    }
}

/// The number after `label` in `text`.
pub fn number_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {text:?}"));
    text[at + label.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {text:?}"))
}
