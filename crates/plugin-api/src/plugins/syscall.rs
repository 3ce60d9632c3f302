//! `syscall`: counts guest system calls and their errors, optionally
//! printing each, as QEMU's contrib `syscall` plugin.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use crate::{GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

/// Calls and errors of one system call number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallStats {
    /// Times it was called.
    pub calls: u64,
    /// Times it returned an error (`-4095..=-1`).
    pub errors: u64,
}

/// The `syscall` plugin.
#[derive(Debug)]
pub struct SyscallCount {
    print: bool,
    stats: Mutex<BTreeMap<u64, SyscallStats>>,
}

pub(crate) fn factory(
    args: &PluginArgs,
    _guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(SyscallCount::from_args(args)?))
}

/// Names of common Linux generic-ABI (RISC-V, AArch64) system calls.
fn name(number: u64) -> Option<&'static str> {
    Some(match number {
        17 => "getcwd",
        23 => "dup",
        24 => "dup3",
        25 => "fcntl",
        29 => "ioctl",
        35 => "unlinkat",
        46 => "ftruncate",
        48 => "faccessat",
        56 => "openat",
        57 => "close",
        59 => "pipe2",
        61 => "getdents64",
        62 => "lseek",
        63 => "read",
        64 => "write",
        65 => "readv",
        66 => "writev",
        67 => "pread64",
        68 => "pwrite64",
        78 => "readlinkat",
        79 => "newfstatat",
        80 => "fstat",
        93 => "exit",
        94 => "exit_group",
        96 => "set_tid_address",
        98 => "futex",
        99 => "set_robust_list",
        113 => "clock_gettime",
        124 => "sched_yield",
        129 => "kill",
        131 => "tgkill",
        134 => "rt_sigaction",
        135 => "rt_sigprocmask",
        160 => "uname",
        163 => "getrlimit",
        172 => "getpid",
        174 => "getuid",
        178 => "gettid",
        214 => "brk",
        215 => "munmap",
        216 => "mremap",
        222 => "mmap",
        226 => "mprotect",
        233 => "madvise",
        261 => "prlimit64",
        278 => "getrandom",
        291 => "statx",
        _ => return None,
    })
}

fn label(number: u64) -> String {
    match name(number) {
        Some(n) => format!("{n}({number})"),
        None => format!("syscall {number}"),
    }
}

impl SyscallCount {
    /// Builds it from `print=on|off` (default off: one line per call and return).
    pub fn from_args(args: &PluginArgs) -> Result<Self, PluginError> {
        args.check_known(&["print"])?;
        Ok(SyscallCount {
            print: args.bool("print", false)?,
            stats: Mutex::new(BTreeMap::new()),
        })
    }

    /// Calls and errors per system call number.
    pub fn stats(&self) -> BTreeMap<u64, SyscallStats> {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The text printed at exit: most called first.
    pub fn report(&self) -> String {
        let mut rows: Vec<(u64, SyscallStats)> = self.stats().into_iter().collect();
        rows.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(&b.0)));
        let mut s = String::new();
        let _ = writeln!(s, "{:<24} {:>10} {:>10}", "syscall", "calls", "errors");
        for (number, st) in rows {
            let _ = writeln!(
                s,
                "{:<24} {:>10} {:>10}",
                label(number),
                st.calls,
                st.errors
            );
        }
        s
    }
}

impl Plugin for SyscallCount {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let (me, out) = (Arc::clone(&self), handle.clone());
        handle.on_syscall(move |vcpu, number, args| {
            me.stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(number)
                .or_default()
                .calls += 1;
            if me.print {
                out.outs(&format!(
                    "vcpu {vcpu}: {}({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x})\n",
                    label(number),
                    args[0],
                    args[1],
                    args[2],
                    args[3],
                    args[4],
                    args[5]
                ));
            }
        });
        let (me, out) = (Arc::clone(&self), handle.clone());
        handle.on_syscall_return(move |vcpu, number, ret| {
            let signed = ret as i64;
            if (-4095..0).contains(&signed) {
                me.stats
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(number)
                    .or_default()
                    .errors += 1;
            }
            if me.print {
                out.outs(&format!(
                    "vcpu {vcpu}: {} returned {signed}\n",
                    label(number)
                ));
            }
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}
