//! A guest process: its memory, its threads (a vCPU each, see
//! `threads.rs`), its kernel state, and the loop that runs it until it
//! exits or dies by a signal.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tcgkit_image_core::{Image, ImageRegistry};
use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, EngineStats, GuestMemory, MemFaultKind};

use crate::children::{self, ChildSignals, ForkRequest, Launcher};
use crate::error::LoadError;
use crate::fd::FdTable;
use crate::host::{self, ExecFailure, Forked};
use crate::host_threads::EngineSetup;
use crate::loader::{self, Credentials, Placement};
use crate::mm::AddressSpace;
use crate::modules::{Module, ModuleObserver, ModuleSet};
use crate::prefix::PathPrefix;
use crate::sigframe;
use crate::signal::Signal;
use crate::strace::{self, SignalCause};
use crate::syscall::{Disposition, Kernel, Outcome};
use crate::threads::{Step, Threads};

/// How a guest process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestExit {
    /// It called `exit`/`exit_group` with this status (0..=255).
    Exited(u8),
    /// It was killed by this signal (a fault, `abort()`, ...).
    Signaled(Signal),
}

impl GuestExit {
    /// The status a shell reports for it: the exit status, or 128 + signal.
    pub fn shell_status(self) -> i32 {
        match self {
            GuestExit::Exited(code) => i32::from(code),
            GuestExit::Signaled(sig) => 128 + i32::from(sig.number()),
        }
    }

    /// The line qemu-user prints on stderr when a signal kills the guest
    /// (`None` for a normal exit or a signal that dumps no core).
    pub fn uncaught_signal_message(self, tool: &str) -> Option<String> {
        match self {
            GuestExit::Signaled(sig) if sig.dumps_core() => Some(format!(
                "{tool}: uncaught target signal {} ({}) - core dumped",
                sig.number(),
                sig.description()
            )),
            _ => None,
        }
    }
}

/// Watches the guest's system calls (plugins implement it).
pub trait SyscallObserver: Send {
    /// Called before syscall `number` runs, with its six argument registers.
    fn on_syscall(&mut self, number: u64, args: &[u64; 6]);
    /// Called after it returned `ret` (a0 as the guest will see it; errors
    /// are `-errno`). Not called for `exit`/`exit_group` or a fatal signal.
    fn on_syscall_return(&mut self, number: u64, ret: u64);
    /// A new guest thread's vCPU `vcpu` exists (its `clone` returned in the
    /// parent), with its first registers; it has not run yet.
    fn on_vcpu_start(&mut self, vcpu: u32, cpu: &Cpu) {
        let _ = (vcpu, cpu);
    }
    /// The thread on vCPU `vcpu` exited (`exit` with others left).
    fn on_vcpu_exit(&mut self, vcpu: u32) {
        let _ = vcpu;
    }
    /// vCPU `vcpu` runs from now on: the syscalls that follow are its.
    fn on_vcpu_running(&mut self, vcpu: u32) {
        let _ = vcpu;
    }
    /// The host process is about to fork (a guest `fork` or `vfork`):
    /// write out buffered output, or parent and child would both write it,
    /// and stop host threads of your own (the child has only the forking
    /// thread).
    fn before_fork(&mut self) {}
    /// The fork happened: in the parent with the child's pid, in the child
    /// with `None` (where output meant for one process only, a trace say,
    /// must go elsewhere).
    fn after_fork(&mut self, child: Option<u32>) {
        let _ = child;
    }
    /// This process is about to become another program (a guest
    /// `execve`): complete what would be lost with it (a trace). Plugins'
    /// atexit callbacks do not run, as under QEMU: the process does not
    /// exit.
    fn before_exec(&mut self) {}
}

/// Options of a guest process.
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// Print each syscall on stderr like `qemu-riscv64 -strace`.
    pub strace: bool,
    /// qemu-user's `-L` (`QEMU_LD_PREFIX`): absolute paths the guest opens,
    /// its program interpreter first, are looked up under this directory
    /// before the host's own.
    pub prefix: Option<PathBuf>,
    /// Starts the RV64 programs the guest `execve`s; without one such an
    /// `execve` fails with `ENOEXEC`, as under qemu-user without
    /// binfmt_misc. Host programs are executed directly either way.
    pub launcher: Option<Arc<dyn Launcher>>,
    /// Run each guest thread on a host thread of its own (`host_threads.rs`,
    /// the default) rather than taking turns on one (`threads.rs`).
    pub host_threads: bool,
    /// Sets up the engine of each guest thread after the first, given its
    /// vCPU index (with host threads): linux-user makes it with the
    /// creating thread's JIT configuration, then calls this.
    pub engine_setup: Option<Arc<EngineSetup>>,
    /// With host threads, each thread's engine shares compiled code with
    /// the engine of the thread that started it (the default; see
    /// `Engine::share_compiled_code`): a block hot in several threads is
    /// compiled once.
    pub share_compiled_code: bool,
    /// With host threads, the threads' engines share translations (the
    /// default; see `Engine::share_translations`): a block is planned
    /// once per process, so a plugin's `tb_trans` runs once per block, as
    /// under QEMU, whichever threads run it.
    pub share_translations: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            strace: false,
            prefix: None,
            launcher: None,
            host_threads: true,
            engine_setup: None,
            share_compiled_code: true,
            share_translations: true,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("strace", &self.strace)
            .field("prefix", &self.prefix)
            .field("launcher", &self.launcher.is_some())
            .field("host_threads", &self.host_threads)
            .field("engine_setup", &self.engine_setup.is_some())
            .field("share_compiled_code", &self.share_compiled_code)
            .field("share_translations", &self.share_translations)
            .finish()
    }
}

impl Options {
    /// Options with the launcher of exec'd RV64 programs set as given.
    pub fn with_launcher(mut self, launcher: Option<Arc<dyn Launcher>>) -> Options {
        self.launcher = launcher;
        self
    }

    /// Options with `strace` set as given.
    pub fn with_strace(mut self, strace: bool) -> Options {
        self.strace = strace;
        self
    }

    /// Options with guest threads on host threads or not.
    pub fn with_host_threads(mut self, host_threads: bool) -> Options {
        self.host_threads = host_threads;
        self
    }

    /// Options with the threads' engines sharing compiled code or not.
    pub fn with_shared_code(mut self, share: bool) -> Options {
        self.share_compiled_code = share;
        self
    }

    /// Options with the threads' engines sharing translations or not.
    pub fn with_shared_translations(mut self, share: bool) -> Options {
        self.share_translations = share;
        self
    }

    /// Options with the set-up of guest threads' engines as given.
    pub fn with_engine_setup(mut self, setup: Option<Arc<EngineSetup>>) -> Options {
        self.engine_setup = setup;
        self
    }

    /// Options with the guest path prefix set as given.
    pub fn with_prefix(mut self, prefix: Option<PathBuf>) -> Options {
        self.prefix = prefix;
        self
    }
}

/// Where the program was loaded: what QEMU reports to plugins as
/// `start_code`, `end_code` and `entry_code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramLayout {
    /// Lowest guest address of an executable `PT_LOAD` segment.
    pub start_code: u64,
    /// End of the highest executable segment's file bytes.
    pub end_code: u64,
    /// Where execution starts (load bias applied): the interpreter's entry
    /// for a dynamically linked program, as QEMU's `entry_code` reports.
    pub entry: u64,
}

/// A loaded guest program, ready to run.
pub struct Process {
    pub(crate) engine: Engine<Rv64>,
    /// The running thread's registers (the others' are in `threads`, or
    /// with their host threads).
    pub(crate) cpu: Cpu,
    pub(crate) mem: GuestMemory,
    pub(crate) kernel: Kernel,
    pub(crate) threads: Threads,
    modules: ModuleSet,
    pub(crate) options: Options,
    pub(crate) observer: Option<Box<dyn SyscallObserver>>,
    /// Counts the syscalls that changed code (a module unmapped, code
    /// remapped): other threads' engines must drop their blocks.
    pub(crate) code_generation: u64,
    /// A `clone` of a thread asks to go on host threads.
    start_host_threads: bool,
    /// Guest threads run on host threads.
    pub(crate) host_threads_started: bool,
    /// Set in the child of a fork made while on host threads.
    pub(crate) forked_child: bool,
    /// The counters of the engines of threads that ran on host threads of
    /// their own and are gone.
    pub(crate) threads_stats: EngineStats,
    /// The host's SIGCHLD, watched from the first fork on.
    pub(crate) child_signals: Option<ChildSignals>,
    initial_sp: u64,
    layout: ProgramLayout,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("exe", &self.kernel.exe_path)
            .field("pc", &self.cpu.pc())
            .finish_non_exhaustive()
    }
}

impl Process {
    /// Loads the RV64 executable at `path`. `args` is the complete
    /// argv (`argv[0]` included, as the guest will see it) and `env` the
    /// environment as `NAME=value` strings. Guest descriptors 0-2 are the
    /// host's stdin, stdout and stderr.
    pub fn load(path: &Path, args: &[OsString], env: &[OsString]) -> Result<Process, LoadError> {
        let image = Image::open(path)?;
        Process::from_image(&image, path, args, env)
    }

    /// Like [`Process::load`], for an image the embedder already opened,
    /// e.g. through an `ImageRegistry` so its observers see the executable
    /// load and unload. `path` is what `AT_EXECFN` and `/proc/self/exe`
    /// report. The process copies what it needs: the image may be closed
    /// once this returns.
    pub fn from_image(
        image: &Image,
        path: &Path,
        args: &[OsString],
        env: &[OsString],
    ) -> Result<Process, LoadError> {
        Process::from_image_with_options(image, path, args, env, Options::default())
    }

    /// Like [`Process::from_image`], with options that take effect from the
    /// start: a dynamically linked executable's interpreter (`PT_INTERP`) is
    /// looked up through [`Options::prefix`], loaded at a free spot of the
    /// mmap area, and run first, with `AT_BASE` naming it.
    pub fn from_image_with_options(
        image: &Image,
        path: &Path,
        args: &[OsString],
        env: &[OsString],
        options: Options,
    ) -> Result<Process, LoadError> {
        let mut mem = GuestMemory::new();
        let prefix = PathPrefix::new(options.prefix.as_deref());
        let mut loaded = loader::load_image(image, &mut mem, Placement::Program)?;
        let mut start = loaded.entry;
        let mut interpreter = None;
        if let Some(interpreter_path) = image.elf().and_then(|elf| elf.interpreter.as_deref()) {
            let failed = |source: LoadError| LoadError::Interpreter {
                path: interpreter_path.to_string(),
                source: Box::new(source),
            };
            let host = PathBuf::from(OsString::from_vec(
                prefix.resolve(interpreter_path.as_bytes()),
            ));
            let interp_image = Image::open(&host).map_err(|e| failed(e.into()))?;
            let interp = loader::load_image(&interp_image, &mut mem, Placement::Interpreter)
                .map_err(failed)?;
            loaded.interpreter_base = interp.bias;
            start = interp.entry;
            interpreter = Some((host, interp));
        }
        let mut random = [0u8; 16];
        // AT_RANDOM seeds the guest's stack protector and pointer guard; a
        // failing host RNG is not worth refusing to start over.
        let _ = rustix::rand::getrandom(&mut random[..], rustix::rand::GetRandomFlags::empty());
        let creds = Credentials {
            uid: rustix::process::getuid().as_raw(),
            euid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            egid: rustix::process::getegid().as_raw(),
        };
        let execfn = path.as_os_str().as_bytes();
        let sp = loader::build_stack(&mut mem, &loaded, execfn, args, env, random, creds)?;
        let mut cpu = Cpu::new();
        cpu.set_pc(start);
        cpu.set_x(2, sp);
        let exe_path = std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
        let space = AddressSpace::new(loader::heap_start(&loaded));
        let mut kernel = Kernel::new(FdTable::with_stdio(), space, exe_path.clone(), prefix);
        // The program and its interpreter are the first modules; they are
        // loaded into the module registry when the process first runs.
        let mut loaded_modules = vec![(exe_path, loaded.clone())];
        loaded_modules.extend(interpreter);
        for (path, image) in loaded_modules {
            let key = rustix::fs::stat(&path)
                .ok()
                .map(|st| crate::modules::file_key(&st));
            kernel
                .modules
                .add_loaded(&path, key, image.mapped, image.exec_ranges);
        }
        Ok(Process {
            engine: Engine::new(Rv64::new()),
            cpu,
            mem,
            kernel,
            threads: Threads::new(),
            modules: ModuleSet::default(),
            options,
            observer: None,
            code_generation: 0,
            start_host_threads: false,
            host_threads_started: false,
            forked_child: false,
            threads_stats: EngineStats::default(),
            child_signals: None,
            initial_sp: sp,
            layout: ProgramLayout {
                start_code: loaded.start_code,
                end_code: loaded.end_code,
                entry: start,
            },
        })
    }

    /// Where the program was loaded.
    pub fn layout(&self) -> ProgramLayout {
        self.layout
    }

    /// What the process's engines did: the first engine's counters, plus
    /// those of the engines of threads that ran on host threads of their
    /// own ([`Options::host_threads`]).
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.engine.stats();
        stats += self.threads_stats;
        stats
    }

    /// Sets how the engine of each guest thread after the first is set up
    /// (with [`Options::host_threads`]).
    pub fn set_engine_setup(&mut self, setup: Arc<EngineSetup>) {
        self.options.engine_setup = Some(setup);
    }

    /// Sets the options. The program interpreter was found at load time:
    /// give a prefix to [`Process::from_image_with_options`] for it to
    /// apply there too; here it applies to the paths the guest opens.
    pub fn with_options(mut self, options: Options) -> Process {
        self.kernel
            .set_prefix(PathPrefix::new(options.prefix.as_deref()));
        self.options = options;
        self
    }

    /// Installs a syscall observer (replacing any previous one).
    pub fn set_syscall_observer(&mut self, observer: Box<dyn SyscallObserver>) {
        self.observer = Some(observer);
    }

    /// The guest's memory (e.g. to inspect what the loader built).
    pub fn memory(&mut self) -> &mut GuestMemory {
        &mut self.mem
    }

    /// The guest's registers.
    pub fn cpu(&self) -> &Cpu {
        &self.cpu
    }

    /// The stack pointer the guest starts with (it points at argc).
    pub fn initial_stack_pointer(&self) -> u64 {
        self.initial_sp
    }

    /// The execution engine (statistics, instrumentation).
    pub fn engine(&self) -> &Engine<Rv64> {
        &self.engine
    }

    /// The execution engine, mutably (to attach instrumentation).
    pub fn engine_mut(&mut self) -> &mut Engine<Rv64> {
        &mut self.engine
    }

    /// Puts the guest's modules (every ELF file it maps executable: the
    /// program, its interpreter, the shared objects ld.so maps) into
    /// `registry`, whose observers then see each one load when it is
    /// mapped and unload when its last executable mapping goes (and all of
    /// them, the last loaded first, when the process ends). Set it before
    /// [`Process::run`]: modules held already move over (unloaded from the
    /// previous registry, loaded into this one).
    pub fn set_module_registry(&mut self, registry: ImageRegistry) {
        let again = self.modules.replace_registry(registry, &mut self.engine);
        self.kernel.modules.changes.splice(0..0, again);
    }

    /// The registry holding the guest's modules.
    pub fn module_registry(&self) -> &ImageRegistry {
        self.modules.registry()
    }

    /// The modules loaded now, in load order (the program and its
    /// interpreter appear once the process has started running).
    pub fn modules(&self) -> impl Iterator<Item = &Module> + '_ {
        self.modules.modules()
    }

    /// Installs the module observer (replacing any previous one); modules
    /// loaded already are reported to it at once.
    pub fn set_module_observer(&mut self, observer: Box<dyn ModuleObserver>) {
        self.modules.set_observer(observer);
    }

    /// Runs the guest until it exits or a signal kills it. Guest faults,
    /// illegal instructions and breakpoints end it with the signal Linux
    /// would send (SIGSEGV, SIGBUS, SIGILL, SIGTRAP); nothing the guest does
    /// makes the host panic.
    pub fn run(&mut self) -> GuestExit {
        if self.options.host_threads && self.options.share_translations {
            // From the first block on: threads started later find what
            // this one translated.
            self.engine.publish_translations();
        }
        self.update_modules();
        let exit = self.run_until_exit();
        // However the guest ended, its shared file mappings reach the file.
        self.kernel.finish(&mut self.mem);
        self.modules.unload_all(&mut self.engine);
        exit
    }

    /// Loads and unloads modules as the last syscalls mapped them.
    fn update_modules(&mut self) {
        if !self.kernel.modules.changes.is_empty() {
            self.code_generation += 1;
            let changes = std::mem::take(&mut self.kernel.modules.changes);
            self.modules.apply(changes.into_iter(), &mut self.engine);
        }
    }

    pub(crate) fn run_until_exit(&mut self) -> GuestExit {
        loop {
            let exit = match self.threads.vcpu.as_mut() {
                Some(vcpu) => {
                    let exit = self.engine.run_vcpu(vcpu, &mut self.cpu, &mut self.mem);
                    // Parked, it must not hold back reclaiming generations.
                    vcpu.go_offline();
                    self.engine.reclaim();
                    exit
                }
                None => self.engine.run(&mut self.cpu, &mut self.mem),
            };
            if let Some(exit) = self.handle_exit(exit) {
                return exit;
            }
            if std::mem::take(&mut self.start_host_threads) {
                self.host_threads_started = true;
                return crate::host_threads::serve(self);
            }
        }
    }

    /// What follows the engine's return with `exit`; `Some` when the
    /// process is over.
    pub(crate) fn handle_exit(&mut self, exit: CpuExit) -> Option<GuestExit> {
        match exit {
            CpuExit::Syscall => self.syscall(),
            // si_code 1: TRAP_BRKPT, ILL_ILLOPC, SEGV_MAPERR, BUS_ADRALN.
            CpuExit::Breakpoint => {
                let addr = self.cpu.pc();
                self.fault(Signal::TRAP, SignalCause::Fault { code: 1, addr })
            }
            CpuExit::IllegalInstruction { .. } => {
                let addr = self.cpu.pc();
                self.fault(Signal::ILL, SignalCause::Fault { code: 1, addr })
            }
            CpuExit::Fault(fault) => {
                let (sig, code) = match fault.kind {
                    MemFaultKind::Misaligned => (Signal::BUS, 1),
                    MemFaultKind::Protection => (Signal::SEGV, 2),
                    MemFaultKind::Unmapped => (Signal::SEGV, 1),
                };
                let cause = SignalCause::Fault {
                    code,
                    addr: fault.addr,
                };
                self.fault(sig, cause)
            }
            // The engine handles these itself; resume if one comes back.
            CpuExit::FlushCode => {
                self.engine.flush();
                None
            }
            // The threads' tick (or an embedder's request).
            CpuExit::ExitRequested if self.threads.several() => self.switch_thread(false),
            CpuExit::ExitRequested => None,
        }
    }

    /// A synchronous signal from the instruction at pc: its handler runs if
    /// it has one and it is not blocked; otherwise the guest dies (Linux
    /// does not let a blocked or ignored fault signal pass).
    fn fault(&mut self, sig: Signal, cause: SignalCause) -> Option<GuestExit> {
        let handled =
            self.kernel.disposition(sig) == Disposition::Handler && !self.kernel.is_blocked(sig);
        if !handled {
            return Some(self.fatal(sig, cause));
        }
        self.enter_handler(sig, cause)
    }

    /// Runs the guest's handler for `sig` (after the strace line).
    fn enter_handler(&mut self, sig: Signal, cause: SignalCause) -> Option<GuestExit> {
        if self.options.strace {
            let line = strace::format_signal(sig.number(), cause);
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        match sigframe::enter_handler(&mut self.cpu, &mut self.mem, &mut self.kernel, sig, cause) {
            Ok(()) => None,
            // No room for the frame: Linux kills with SIGSEGV.
            Err(()) => Some(GuestExit::Signaled(Signal::SEGV)),
        }
    }

    /// Delivers the first pending, unblocked signal, if any.
    pub(crate) fn deliver_pending(&mut self) -> Option<GuestExit> {
        while let Some((sig, by_thread)) = self.kernel.take_deliverable() {
            match self.deliver(sig, by_thread) {
                Delivery::Ignored => {}
                Delivery::Ended(exit) => return Some(exit),
                // One handler at a time: the rest wait for its sigreturn.
                Delivery::Handler => return None,
            }
        }
        None
    }

    /// Delivers `sig` taken from the pending set.
    fn deliver(&mut self, sig: Signal, by_thread: bool) -> Delivery {
        let cause = SignalCause::Sent {
            by_thread,
            pid: std::process::id(),
            uid: rustix::process::getuid().as_raw(),
        };
        match self.kernel.disposition(sig) {
            Disposition::Ignore => Delivery::Ignored,
            Disposition::Default if !sig.default_terminates() => Delivery::Ignored,
            Disposition::Default => Delivery::Ended(self.fatal(sig, cause)),
            Disposition::Handler => match self.enter_handler(sig, cause) {
                Some(exit) => Delivery::Ended(exit),
                None => Delivery::Handler,
            },
        }
    }

    /// `rt_sigsuspend(mask)`: waits under `mask` until a signal is
    /// delivered, and returns `-EINTR` to the handler's caller; the
    /// handler's frame restores the mask from before the call.
    fn sigsuspend(&mut self, args: [u64; 6]) -> Option<GuestExit> {
        let number = crate::abi::nr::RT_SIGSUSPEND;
        let mask = match (args[1], self.mem.load(args[0], 8)) {
            (8, Ok(mask)) => mask,
            (8, Err(_)) => {
                let e = crate::abi::errno::EFAULT;
                self.finish_syscall(number, &args, (-i64::from(e)) as u64);
                return None;
            }
            _ => {
                let e = crate::abi::errno::EINVAL;
                self.finish_syscall(number, &args, (-i64::from(e)) as u64);
                return None;
            }
        };
        let before = self.kernel.sigmask;
        let mask = mask & !sigframe::UNBLOCKABLE;
        loop {
            if self.child_signals.as_ref().is_some_and(ChildSignals::take) {
                self.kernel.raise(Signal::CHLD, false);
            }
            self.kernel.sigmask = mask;
            let next = self.kernel.take_deliverable();
            self.kernel.sigmask = before;
            if let Some((sig, by_thread)) = next {
                let ignored = match self.kernel.disposition(sig) {
                    Disposition::Ignore => true,
                    Disposition::Default => !sig.default_terminates(),
                    Disposition::Handler => false,
                };
                if ignored {
                    // Not a wake-up: the call goes on waiting.
                    continue;
                }
                let eintr = (-i64::from(crate::abi::errno::EINTR)) as u64;
                self.finish_syscall(number, &args, eintr);
                return match self.deliver(sig, by_thread) {
                    Delivery::Ended(exit) => Some(exit),
                    Delivery::Ignored | Delivery::Handler => None,
                };
            }
            match &self.child_signals {
                Some(signals) => signals.wait(),
                // Nothing can ever arrive: Linux would sleep for good.
                None => loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                },
            }
        }
    }

    /// Handles the `ecall` at pc; `Some` when the process is over.
    fn syscall(&mut self) -> Option<GuestExit> {
        let number = self.cpu.x(17);
        let args = [10, 11, 12, 13, 14, 15].map(|r| self.cpu.x(r));
        if number == crate::abi::nr::RT_SIGRETURN {
            if let Some(observer) = self.observer.as_mut() {
                observer.on_syscall(number, &args);
            }
            if self.options.strace {
                // qemu shows the generic form and its internal "errno".
                let line = strace::format_call(std::process::id(), number, &args, &mut self.mem);
                let _ = writeln!(
                    std::io::stderr(),
                    "{line} = -1 errno=513 (Successful exit from sigreturn)"
                );
            }
            if sigframe::restore(&mut self.cpu, &mut self.mem, &mut self.kernel).is_err() {
                let addr = self.cpu.x(2);
                return Some(self.fatal(Signal::SEGV, SignalCause::Fault { code: 1, addr }));
            }
            return self.deliver_pending();
        }
        if self.options.host_threads
            && !self.host_threads_started
            && number == crate::abi::nr::CLONE
            && args[0] & crate::abi::clone::CLONE_THREAD != 0
        {
            // The first thread: from here on on host threads, where the
            // `ecall` runs again (`host_threads::serve`).
            self.start_host_threads = true;
            return None;
        }
        self.begin_syscall(number, &args);
        let pid = std::process::id();
        if self.child_signals.as_ref().is_some_and(ChildSignals::take) {
            self.kernel.raise(Signal::CHLD, false);
        }
        if number == crate::abi::nr::RT_SIGSUSPEND {
            return self.sigsuspend(args);
        }
        if number == crate::abi::nr::EXECVE {
            // Only a failed exec returns.
            match self.execve(args) {
                Ok(e) => {
                    self.finish_syscall(number, &args, (-i64::from(e)) as u64);
                    return self.deliver_pending();
                }
                Err(exit) => return Some(exit),
            }
        }
        let outcome = match self.thread_syscall(number, args) {
            Some(Step::Return(value)) => Outcome::Return(value),
            Some(Step::ReturnAndYield(value)) => {
                self.finish_syscall(number, &args, value);
                return self.switch_thread(false);
            }
            Some(Step::Blocked) => {
                if self.options.strace {
                    let _ = writeln!(std::io::stderr(), " = <blocked>");
                }
                return self.switch_thread(false);
            }
            Some(Step::Exited) => {
                if let Some(observer) = self.observer.as_mut() {
                    observer.on_vcpu_exit(self.threads.vcpu_index());
                }
                return self.switch_thread(true);
            }
            None => self.kernel.syscall(&mut self.mem, number, args),
        };
        for (tid, sig) in std::mem::take(&mut self.kernel.directed) {
            // The target was checked to be one of ours: it is parked, or
            // on a host thread of its own (`host_threads.rs` sends it).
            if !self.threads.signal_thread(tid, sig) {
                self.kernel.directed.push((tid, sig));
            }
        }
        // Modules first: an unloaded module's blocks are retired between
        // its unloading and unloaded.
        self.update_modules();
        if !self.kernel.code_changes.is_empty() {
            self.code_generation += 1;
        }
        for (start, len) in self.kernel.code_changes.drain(..) {
            self.engine.invalidate_range(start, len);
        }
        match outcome {
            Outcome::Return(value) => {
                self.finish_syscall(number, &args, value);
                self.deliver_pending()
            }
            Outcome::Exit(code) => Some(GuestExit::Exited(code as u8)),
            Outcome::Killed(sig) => {
                // The signal is raised by the syscall, which itself succeeded.
                if self.options.strace {
                    let line = strace::format_return(number, &args, 0, &mut self.mem);
                    let _ = std::io::stderr().lock().write_all(line.as_bytes());
                }
                let cause = SignalCause::Sent {
                    by_thread: number != crate::abi::nr::KILL,
                    pid,
                    uid: rustix::process::getuid().as_raw(),
                };
                Some(self.fatal(sig, cause))
            }
        }
    }

    /// Syscall `number` starts: the observer hears it, strace prints it.
    pub(crate) fn begin_syscall(&mut self, number: u64, args: &[u64; 6]) {
        if let Some(observer) = self.observer.as_mut() {
            observer.on_syscall(number, args);
        }
        if self.options.strace {
            let line = strace::format_call(std::process::id(), number, args, &mut self.mem);
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(line.as_bytes());
            let _ = err.flush();
        }
    }

    /// A syscall returns `value` to the running thread.
    pub(crate) fn finish_syscall(&mut self, number: u64, args: &[u64; 6], value: u64) {
        if self.options.strace {
            let line = strace::format_return(number, args, value as i64, &mut self.mem);
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        if let Some(observer) = self.observer.as_mut() {
            observer.on_syscall_return(number, value);
        }
        self.cpu.set_x(10, value);
        // ecall has no compressed form: always 4 bytes.
        self.cpu.set_pc(self.cpu.pc().wrapping_add(4));
    }

    /// The syscalls that concern threads (`threads.rs`) and child
    /// processes (`children.rs`); `None` for the kernel's.
    fn thread_syscall(&mut self, number: u64, args: [u64; 6]) -> Option<Step> {
        use crate::abi::nr;
        let several = self.threads.several();
        let step = match number {
            nr::CLONE if args[0] & crate::abi::clone::CLONE_THREAD == 0 => self.fork(args),
            nr::CLONE => {
                let step = self.threads.clone_thread(
                    args,
                    &self.cpu,
                    self.kernel.sigmask,
                    &mut self.mem,
                    &mut self.engine,
                );
                self.kernel.other_tids = self.threads.tids();
                let step = step?;
                if let (Some(observer), Step::Return(tid)) = (self.observer.as_mut(), &step)
                    && let Some((vcpu, cpu)) = self.threads.newest(*tid)
                {
                    observer.on_vcpu_start(vcpu, cpu);
                }
                step
            }
            nr::WAIT4 => errno_step(children::wait4(
                &mut self.mem,
                args[0],
                args[1],
                args[2],
                args[3],
            )),
            nr::WAITID => errno_step(children::waitid(&mut self.mem, args)),
            nr::GETTID => Step::Return(u64::from(self.threads.tid)),
            nr::SET_TID_ADDRESS => Step::Return(self.threads.set_tid_address(args[0])),
            nr::EXIT if several => self.threads.exit_thread(&mut self.mem),
            nr::FUTEX if several => self.threads.futex(args, &mut self.cpu, &mut self.mem),
            nr::SCHED_YIELD if several => Step::ReturnAndYield(0),
            // A wait of its own would hold every thread: a short one,
            // then the others' turn (an early 0 is a timeout to callers).
            nr::EPOLL_PWAIT if several => {
                match self.kernel.epoll_pwait(&mut self.mem, args, Some(1)) {
                    Ok(0) if args[3] != 0 => Step::ReturnAndYield(0),
                    result => errno_step(result),
                }
            }
            nr::NANOSLEEP if several => match crate::syscall::timespec_at(&mut self.mem, args[0]) {
                Ok((sec, nsec)) => {
                    if args[1] != 0 {
                        // Never interrupted: nothing remains.
                        let _ = self.mem.store(args[1], 8, 0);
                        let _ = self.mem.store(args[1] + 8, 8, 0);
                    }
                    let wanted = std::time::Duration::new(sec as u64, nsec as u32);
                    self.threads.sleep(&mut self.cpu, wanted)
                }
                Err(e) => Step::Return((-i64::from(e)) as u64),
            },
            _ => return None,
        };
        Some(step)
    }

    /// `clone` of a new process: the host process forks (`children.rs`).
    fn fork(&mut self, args: [u64; 6]) -> Step {
        let request = match ForkRequest::from_clone(args) {
            Ok(request) => request,
            Err(e) => return Step::Return((-i64::from(e)) as u64),
        };
        if self.child_signals.is_none() {
            self.child_signals = ChildSignals::install();
        }
        if let Some(observer) = self.observer.as_mut() {
            observer.before_fork();
        }
        self.engine.stop_host_threads();
        self.threads.before_fork();
        let _ = std::io::stderr().flush();
        let forked = host::fork();
        let child = match forked {
            Ok(Forked::Child) => Some(std::process::id()),
            _ => None,
        };
        self.threads
            .after_fork(child, request.clear_tid, &mut self.engine);
        if let Some(observer) = self.observer.as_mut() {
            match forked {
                Ok(Forked::Parent(pid)) => observer.after_fork(Some(pid)),
                Ok(Forked::Child) => observer.after_fork(None),
                Err(_) => {}
            }
        }
        match forked {
            Err(e) => Step::Return((-i64::from(e)) as u64),
            Ok(Forked::Parent(pid)) => {
                if let Some(addr) = request.parent_tid {
                    let _ = self.mem.store(addr, 4, u64::from(pid));
                }
                Step::Return(u64::from(pid))
            }
            Ok(Forked::Child) => {
                let pid = u64::from(std::process::id());
                // Only the forking thread goes on in the child: off host
                // threads, until it starts one of its own.
                self.forked_child = self.host_threads_started;
                self.host_threads_started = false;
                self.kernel.other_tids.clear();
                self.kernel.current_tid = pid as u32;
                if let Some(addr) = request.child_tid {
                    let _ = self.mem.store(addr, 4, pid);
                }
                if let Some(tls) = request.tls {
                    self.cpu.set_x(4, tls);
                }
                if request.stack != 0 {
                    self.cpu.set_x(2, request.stack);
                }
                Step::Return(0)
            }
        }
    }

    /// `execve`: the errno for the guest when it failed with nothing
    /// changed, or the process's end when it failed past the point of no
    /// return (Linux kills such a process). On success it does not return.
    fn execve(&mut self, args: [u64; 6]) -> Result<i32, GuestExit> {
        let children::ExecArgs {
            mut path,
            argv,
            envp,
        } = match children::exec_args(&mut self.mem, args[0], args[1], args[2]) {
            Ok(parts) => parts,
            Err(e) => return Ok(e),
        };
        if path == b"/proc/self/exe" {
            // As qemu-user: the program itself, not the emulator.
            path = self.kernel.exe_path.as_os_str().as_bytes().to_vec();
        }
        let kernel = &self.kernel;
        let resolve = |p: &[u8]| kernel.resolve_path(p);
        let launcher = self.options.launcher.as_deref();
        let plan = match children::plan_exec(&path, &argv, &resolve, launcher) {
            Ok(plan) => plan,
            Err(e) => return Ok(e),
        };
        let strings = (
            children::c_strings(std::iter::once(plan.program.as_os_str().as_bytes())),
            children::c_strings(plan.argv.iter().map(|a| a.as_bytes())),
            children::c_strings(envp.iter().map(Vec::as_slice)),
        );
        let (Ok(mut program), Ok(host_argv), Ok(env)) = strings else {
            return Ok(crate::abi::errno::EINVAL);
        };
        let Some(program) = program.pop() else {
            return Ok(crate::abi::errno::EINVAL);
        };
        // What would be lost with this image: shared mappings' last
        // stores, and whatever the observers must complete.
        self.kernel.finish(&mut self.mem);
        if let Some(observer) = self.observer.as_mut() {
            observer.before_exec();
        }
        let _ = std::io::stderr().flush();
        let fds = self.kernel.fds.inherited();
        match host::exec(&program, &host_argv, &env, &fds) {
            ExecFailure::Before(e) => Ok(e),
            ExecFailure::After(e) => {
                eprintln!(
                    "tcgkit: execve of {} failed after the point of no return: errno {e}",
                    plan.program.display()
                );
                Err(GuestExit::Signaled(Signal::KILL))
            }
        }
    }

    /// Runs the next thread in turn (`gone`: the running one exited).
    fn switch_thread(&mut self, gone: bool) -> Option<GuestExit> {
        let signals = crate::threads::SignalState {
            process_pending: self.kernel.process_pending(),
            interrupting: self.kernel.interrupting(),
            mask: &mut self.kernel.sigmask,
            pending: &mut self.kernel.thread_pending,
            altstack: &mut self.kernel.altstack,
        };
        let switched = self.threads.switch(gone, &mut self.cpu, signals);
        self.kernel.current_tid = self.threads.tid;
        if !switched {
            // Every thread waits for a wake no thread can send: Linux
            // leaves such a process asleep for good.
            eprintln!("tcgkit: every guest thread is blocked for good");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        if gone {
            self.kernel.other_tids = self.threads.tids();
        }
        if let Some(observer) = self.observer.as_mut() {
            observer.on_vcpu_running(self.threads.vcpu_index());
        }
        self.deliver_pending()
    }

    /// The guest dies by `sig`; with `--strace`, say why like qemu.
    fn fatal(&mut self, sig: Signal, cause: SignalCause) -> GuestExit {
        if self.options.strace {
            let line = strace::format_signal(sig.number(), cause);
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        GuestExit::Signaled(sig)
    }
}

/// What delivering a signal did.
enum Delivery {
    /// Nothing (ignored, or a default action that does nothing).
    Ignored,
    /// The process is over.
    Ended(GuestExit),
    /// The guest's handler runs next.
    Handler,
}

/// A handler's result as what the guest's a0 gets.
fn errno_step(result: Result<u64, i32>) -> Step {
    Step::Return(match result {
        Ok(value) => value,
        Err(e) => (-i64::from(e)) as u64,
    })
}
