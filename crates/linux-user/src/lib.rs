//! The Linux user-mode process model: run RV64 Linux executables, static or
//! dynamically linked, the way `qemu-riscv64` does.
//!
//! [`Process::load`] reads the ELF executable through image-core, maps its
//! `PT_LOAD` segments with their permissions (a position-independent one at
//! a load bias) and builds the initial stack as Linux does for RV64 (argc,
//! argv, envp, then the auxiliary vector with `AT_PHDR`, `AT_ENTRY`,
//! `AT_BASE`, `AT_RANDOM`, `AT_HWCAP`, `AT_EXECFN`, ...). A dynamically
//! linked executable's interpreter (`PT_INTERP`, ld.so) is mapped in the
//! mmap area and runs first; [`Options::prefix`] is qemu-user's `-L`: the
//! interpreter and every absolute path the guest opens are looked up under
//! it first (a cross sysroot such as `/usr/riscv64-linux-gnu`).
//! [`Process::run`] executes it on tcg-core's engine with the riscv frontend
//! and serves its Linux syscalls from the host (files, memory, time, ...).
//! Sockets (Unix, IPv4, IPv6) are forwarded to the host. Unknown syscalls
//! return `-ENOSYS` with a one-time warning on stderr. Threads (`clone`
//! with `CLONE_THREAD`, as `pthread_create` and `std::thread` make them)
//! have a vCPU each and, for now, take turns on the process's host
//! thread (switching at futex waits, sleeps, yields, exits and a 10 ms
//! tick). A new process (`fork`, `vfork`, `posix_spawn`) is a fork of the
//! host process, as qemu-user makes it; `execve` runs a host program
//! directly and an RV64 one through the [`Launcher`] in [`Options`] (the
//! CLI's starts tcgkit again with the same options, which is what
//! qemu-user gets from binfmt_misc).
//! The guest ends with a [`GuestExit`]: its exit status, or the signal that
//! killed it (SIGSEGV for a bad access, SIGBUS for a misaligned atomic,
//! SIGILL, SIGTRAP, SIGABRT from `abort()`), exactly as under qemu-riscv64.
//!
//! ```
//! use std::ffi::OsString;
//! use std::path::Path;
//! use tcgkit_linux_user::{GuestExit, Process};
//!
//! let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests/faults");
//! let args = [OsString::from("faults"), OsString::from("exit=3")];
//! let mut process = Process::load(&guest, &args, &[])?;
//! assert_eq!(process.run(), GuestExit::Exited(3));
//!
//! let args = [OsString::from("faults"), OsString::from("segv")];
//! let mut process = Process::load(&guest, &args, &[])?;
//! let end = process.run();
//! assert_eq!(end.shell_status(), 139);
//! # Ok::<(), tcgkit_linux_user::LoadError>(())
//! ```
//!
//! Signals the guest raises at itself (`raise`, `abort`, a fault, SIGPIPE)
//! run its handlers on a Linux-layout signal frame, honour the mask,
//! `SA_RESETHAND`, `SA_NODEFER` and the alternate stack, and otherwise take
//! their default action.
//!
//! Limits (documented, not silent): guest threads take turns on one host
//! thread, and a blocking `wait4` or `rt_sigsuspend` holds all of them; the
//! only signal from outside the process that reaches the guest is SIGCHLD
//! (the host's SIGINT ends tcgkit itself); `MAP_SHARED` anonymous memory
//! is not shared with a forked child; fcntl record locks are checked
//! against other processes but not taken on the host.
//!
//! Writable shared file mappings (`MAP_SHARED` with `PROT_WRITE`, as
//! sqlite's WAL mode uses for its `-shm` file) live in guest memory like any
//! other page and are synced with the file at syscall boundaries: the
//! guest's stores are written back before any syscall that can observe them
//! (read and write families, fsync, msync, ftruncate, fcntl, close, munmap,
//! mremap, mprotect) and at exit, and the mapping is reloaded after a write
//! to its file. The guest itself therefore sees what Linux would show it;
//! other host processes see its stores only at those sync points. Bytes
//! past the end of the file read as zero (no SIGBUS) and never reach it.
// Only `host.rs` (fork, wait, exec: no safe wrapper does them) allows it.
#![deny(unsafe_code)]

pub mod abi;
mod blocking;
mod children;
mod error;
mod fd;
mod futex;
mod host;
mod host_threads;
mod loader;
mod mm;
mod modules;
mod prefix;
mod process;
mod shared;
mod sigframe;
mod signal;
mod strace;
mod syscall;
mod threads;

pub use children::Launcher;
pub use error::LoadError;
pub use host_threads::EngineSetup;
pub use modules::{Module, ModuleObserver};
pub use process::{GuestExit, Options, Process, ProgramLayout, SyscallObserver};
pub use signal::Signal;
