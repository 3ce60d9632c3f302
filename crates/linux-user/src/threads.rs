//! Guest threads: `clone` with `CLONE_VM | CLONE_THREAD`, `futex` between
//! threads, thread exit with its clear-tid wake, `gettid`,
//! `set_tid_address`, `sched_yield`.
//!
//! Every guest thread has its own register file and its own vCPU
//! (indices counted up from 1 as QEMU numbers them), all on one engine,
//! one guest memory and one kernel state. In this first step they take
//! turns on the process's host thread: the running one keeps going until
//! it blocks (a futex wait, a sleep), yields, exits, or a 10 ms tick
//! asks the engine to return ([`Ticker`]); the next runnable thread in
//! turn then runs. Programs without data races cannot tell the
//! difference from threads running side by side, and atomics are atomic
//! by construction. Signal dispositions and pending signals are the
//! process's; each thread keeps its own signal mask.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcgkit_riscv::Cpu;
use tcgkit_tcg_core::{Engine, ExitHandle, GuestMemory, Vcpu};

use crate::abi::errno;
use crate::futex::{self, BITSET_ALL, Request, WaitQueues};

use crate::abi::clone::{
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_PARENT_SETTID, CLONE_SETTLS, CLONE_SIGHAND,
    CLONE_THREAD, CLONE_VM,
};

/// How often the running thread is asked to give way.
const TICK: Duration = Duration::from_millis(10);

/// What a thread waits for.
#[derive(Clone, Copy, Debug)]
struct Wait {
    /// The futex word (0: a sleep, woken only by its deadline).
    addr: u64,
    bitset: u32,
    deadline: Option<Instant>,
    /// a0 when the deadline passes (`-ETIMEDOUT`, or 0 for a sleep).
    on_timeout: u64,
}

/// A thread that is not running.
struct Parked {
    tid: u32,
    cpu: Cpu,
    vcpu: Option<Vcpu>,
    clear_child_tid: u64,
    sigmask: u64,
    /// Signals sent to this thread alone, not delivered yet.
    pending: u64,
    /// Its alternate signal stack (`stack_t`: sp, flags, size).
    altstack: [u64; 3],
    wait: Option<Wait>,
}

/// The running thread's signal state, swapped with a parked thread's on
/// a switch, and what the process's state lets through.
pub(crate) struct SignalState<'a> {
    pub mask: &'a mut u64,
    pub pending: &'a mut u64,
    pub altstack: &'a mut [u64; 3],
    /// Signals pending on the whole process.
    pub process_pending: u64,
    /// Signals that would interrupt a wait: those with a handler or a
    /// terminating default action (not the ignored ones).
    pub interrupting: u64,
}

/// What a thread syscall asks the process loop to do next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Return this value to the caller, which goes on.
    Return(u64),
    /// Return this value, then let the next runnable thread run.
    ReturnAndYield(u64),
    /// The caller waits (its a0 and pc are set for when it resumes).
    Blocked,
    /// The caller is gone; another thread must run.
    Exited,
}

/// Asks the engine to return every [`TICK`] while more than one thread
/// exists, so that a thread that never makes a syscall still gives way.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(exit: ExitHandle) -> Option<Ticker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tcgkit-tick".to_owned())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(TICK);
                    exit.request_exit();
                }
            })
            .ok()?;
        Some(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The process's threads: the running one's identity and the parked
/// ones, in turn order.
pub(crate) struct Threads {
    /// The running thread's id (the main thread's is the process id).
    pub(crate) tid: u32,
    /// Its vCPU; `None` for the engine's built-in vCPU 0 (the main
    /// thread's).
    pub(crate) vcpu: Option<Vcpu>,
    clear_child_tid: u64,
    /// Set by a blocking syscall of the running thread.
    wait: Option<Wait>,
    parked: VecDeque<Parked>,
    next_tid: u32,
    ticker: Option<Ticker>,
}

impl Threads {
    pub(crate) fn new() -> Threads {
        let pid = std::process::id();
        Threads {
            tid: pid,
            vcpu: None,
            clear_child_tid: 0,
            wait: None,
            parked: VecDeque::new(),
            next_tid: pid.wrapping_add(1),
            ticker: None,
        }
    }

    /// More than one thread exists.
    pub(crate) fn several(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Every live thread id.
    pub(crate) fn tids(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.parked.iter().map(|p| p.tid).collect();
        all.push(self.tid);
        all
    }

    /// The running thread's vCPU index.
    pub(crate) fn vcpu_index(&self) -> u32 {
        self.vcpu.as_ref().map_or(0, Vcpu::index)
    }

    /// Thread `tid`'s vCPU index and registers, if it is the one made
    /// last and has not run yet.
    pub(crate) fn newest(&self, tid: u64) -> Option<(u32, &Cpu)> {
        let p = self.parked.back().filter(|p| u64::from(p.tid) == tid)?;
        Some((p.vcpu.as_ref().map_or(0, Vcpu::index), &p.cpu))
    }

    /// A fresh thread id.
    pub(crate) fn allocate_tid(&mut self) -> u32 {
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1);
        tid
    }

    /// Swaps the running thread's id and clear-tid word with those given
    /// (a thread on a host thread of its own comes or goes).
    pub(crate) fn swap_identity(&mut self, tid: &mut u32, clear_child_tid: &mut u64) {
        std::mem::swap(&mut self.tid, tid);
        std::mem::swap(&mut self.clear_child_tid, clear_child_tid);
    }

    /// `set_tid_address`.
    pub(crate) fn set_tid_address(&mut self, addr: u64) -> u64 {
        self.clear_child_tid = addr;
        u64::from(self.tid)
    }

    /// `clone`; `None` for flags this step does not run (a new process:
    /// the caller answers as before).
    pub(crate) fn clone_thread(
        &mut self,
        args: [u64; 6],
        cpu: &Cpu,
        sigmask: u64,
        mem: &mut GuestMemory,
        engine: &mut Engine<tcgkit_riscv::Rv64>,
    ) -> Option<Step> {
        // RV64's argument order: flags, stack, parent tid, tls, child tid.
        let [flags, stack, parent_tid, tls, child_tid, _] = args;
        if flags & CLONE_THREAD == 0 {
            return None;
        }
        // Linux: a thread shares the signal handlers, which need a shared
        // address space.
        if flags & CLONE_SIGHAND == 0 || flags & CLONE_VM == 0 {
            return Some(Step::Return(neg(errno::EINVAL)));
        }
        let tid = self.next_tid;
        let put_tid = |mem: &mut GuestMemory, addr: u64| mem.store(addr, 4, u64::from(tid));
        if flags & CLONE_PARENT_SETTID != 0 && put_tid(mem, parent_tid).is_err() {
            return Some(Step::Return(neg(errno::EFAULT)));
        }
        if flags & CLONE_CHILD_SETTID != 0 && put_tid(mem, child_tid).is_err() {
            return Some(Step::Return(neg(errno::EFAULT)));
        }
        self.next_tid = self.next_tid.wrapping_add(1);
        let mut child = cpu.clone();
        child.set_x(10, 0);
        if stack != 0 {
            child.set_x(2, stack);
        }
        if flags & CLONE_SETTLS != 0 {
            child.set_x(4, tls);
        }
        // Past the ecall, as the parent will be.
        child.set_pc(cpu.pc().wrapping_add(4));
        self.parked.push_back(Parked {
            tid,
            cpu: child,
            vcpu: Some(engine.new_vcpu()),
            clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 {
                child_tid
            } else {
                0
            },
            sigmask,
            pending: 0,
            // Linux gives a new thread of the same memory no alternate
            // stack (SS_DISABLE).
            altstack: [0, 2, 0],
            wait: None,
        });
        if self.ticker.is_none() {
            self.ticker = Ticker::start(engine.exit_handle());
        }
        Some(Step::Return(u64::from(tid)))
    }

    /// Makes `sig` pending on parked thread `tid`; false if there is none.
    pub(crate) fn signal_thread(&mut self, tid: u32, sig: crate::signal::Signal) -> bool {
        match self.parked.iter_mut().find(|p| p.tid == tid) {
            Some(p) => {
                p.pending |= 1u64 << (sig.number() - 1);
                true
            }
            None => false,
        }
    }

    /// Stops the ticker thread before the host process forks (a child has
    /// only the forking thread); [`Threads::after_fork`] starts it again
    /// where more than one guest thread remains.
    pub(crate) fn before_fork(&mut self) {
        self.ticker = None;
    }

    /// After a fork: the parent's threads go on as before; in the child
    /// (`child`: its pid) only the forking thread exists, as under Linux,
    /// with the child's pid as its id, `clear_tid` (`CLONE_CHILD_CLEARTID`)
    /// as its clear-tid word if given.
    pub(crate) fn after_fork(
        &mut self,
        child: Option<u32>,
        clear_tid: Option<u64>,
        engine: &mut Engine<tcgkit_riscv::Rv64>,
    ) {
        match child {
            None => {
                if self.several() {
                    self.ticker = Ticker::start(engine.exit_handle());
                }
            }
            Some(pid) => {
                self.parked.clear();
                self.tid = pid;
                self.next_tid = pid.wrapping_add(1);
                self.wait = None;
                if let Some(addr) = clear_tid {
                    self.clear_child_tid = addr;
                }
            }
        }
    }

    /// `exit` of the running thread while others live: its clear-tid word
    /// is zeroed and woken (how `pthread_join` learns of it).
    pub(crate) fn exit_thread(&mut self, mem: &mut GuestMemory) -> Step {
        let addr = std::mem::take(&mut self.clear_child_tid);
        if addr != 0 && mem.store(addr, 4, 0).is_ok() {
            self.wake(addr, 1, BITSET_ALL);
        }
        if let Some(vcpu) = self.vcpu.as_mut() {
            vcpu.go_offline();
        }
        Step::Exited
    }

    /// `futex` between threads (see the module docs); `cpu` is the
    /// caller's.
    pub(crate) fn futex(&mut self, args: [u64; 6], cpu: &mut Cpu, mem: &mut GuestMemory) -> Step {
        let request = match Request::parse(args, mem) {
            Ok(request) => request,
            Err(e) => return Step::Return(neg(e)),
        };
        match (futex::answer(request, mem, self), request) {
            (Err(e), _) => Step::Return(neg(e)),
            (Ok(Some(value)), _) => Step::Return(value),
            (
                Ok(None),
                Request::Wait {
                    addr,
                    bitset,
                    deadline,
                    ..
                },
            ) => self.block(
                cpu,
                Wait {
                    addr,
                    bitset,
                    deadline,
                    on_timeout: neg(errno::ETIMEDOUT),
                },
            ),
            // `answer` asks to wait for a `Wait` only.
            (Ok(None), _) => Step::Return(0),
        }
    }

    /// `nanosleep` of one thread among several: the others run meanwhile.
    pub(crate) fn sleep(&mut self, cpu: &mut Cpu, duration: Duration) -> Step {
        self.block(
            cpu,
            Wait {
                addr: 0,
                bitset: 0,
                deadline: Some(Instant::now() + duration),
                on_timeout: 0,
            },
        )
    }

    /// The running thread waits: it resumes past its ecall, with a0 = 0
    /// if woken (a timeout sets it again).
    fn block(&mut self, cpu: &mut Cpu, wait: Wait) -> Step {
        cpu.set_x(10, 0);
        cpu.set_pc(cpu.pc().wrapping_add(4));
        self.wait = Some(wait);
        Step::Blocked
    }

    /// Makes the next runnable thread the running one, round-robin; the
    /// running thread is parked unless `gone`. Waits (the process
    /// sleeping) while every thread waits for a deadline; returns false if
    /// no thread can ever run again.
    pub(crate) fn switch(&mut self, gone: bool, cpu: &mut Cpu, signals: SignalState<'_>) -> bool {
        let SignalState {
            mask: sigmask,
            pending,
            altstack,
            process_pending,
            interrupting,
        } = signals;
        // A signal a waiting thread does not block ends its wait with
        // EINTR, so that its handler runs (as Linux does).
        let eintr = neg(errno::EINTR);
        for p in &mut self.parked {
            if p.wait.is_some() && (p.pending | process_pending) & !p.sigmask & interrupting != 0 {
                p.cpu.set_x(10, eintr);
                p.wait = None;
            }
        }
        if !gone
            && self.wait.is_some()
            && (*pending | process_pending) & !*sigmask & interrupting != 0
        {
            cpu.set_x(10, eintr);
            self.wait = None;
        }
        loop {
            let now = Instant::now();
            for p in &mut self.parked {
                if let Some(w) = p.wait.filter(|w| w.deadline.is_some_and(|d| d <= now)) {
                    p.cpu.set_x(10, w.on_timeout);
                    p.wait = None;
                }
            }
            if !gone && let Some(w) = self.wait.filter(|w| w.deadline.is_some_and(|d| d <= now)) {
                cpu.set_x(10, w.on_timeout);
                self.wait = None;
            }
            if let Some(i) = self.parked.iter().position(|p| p.wait.is_none()) {
                let Some(next) = self.parked.remove(i) else {
                    return false;
                };
                let previous = Parked {
                    tid: self.tid,
                    cpu: std::mem::replace(cpu, next.cpu),
                    vcpu: std::mem::replace(&mut self.vcpu, next.vcpu),
                    clear_child_tid: std::mem::replace(
                        &mut self.clear_child_tid,
                        next.clear_child_tid,
                    ),
                    sigmask: std::mem::replace(sigmask, next.sigmask),
                    pending: std::mem::replace(pending, next.pending),
                    altstack: std::mem::replace(altstack, next.altstack),
                    wait: std::mem::replace(&mut self.wait, next.wait),
                };
                self.tid = next.tid;
                if !gone {
                    self.parked.push_back(previous);
                }
                if self.parked.is_empty() {
                    self.ticker = None;
                }
                return true;
            }
            if !gone && self.wait.is_none() {
                // Nobody else can run: the running thread goes on.
                return true;
            }
            let soonest = self
                .parked
                .iter()
                .filter_map(|p| p.wait.and_then(|w| w.deadline))
                .chain(self.wait.filter(|_| !gone).and_then(|w| w.deadline))
                .min();
            match soonest {
                Some(deadline) => std::thread::sleep(deadline.saturating_duration_since(now)),
                // Every thread waits for a wake nobody can send.
                None => return false,
            }
        }
    }
}

/// The parked threads are the futex queues: a thread waits on the
/// address in its `wait`.
impl WaitQueues for Threads {
    fn wake(&mut self, addr: u64, n: u32, bits: u32) -> u64 {
        let mut woken = 0u64;
        for p in &mut self.parked {
            if woken >= u64::from(n) {
                break;
            }
            if p.wait
                .is_some_and(|w| w.addr == addr && w.bitset & bits != 0)
            {
                p.wait = None;
                woken += 1;
            }
        }
        woken
    }

    fn requeue(&mut self, from: u64, to: u64, n: u32) -> u64 {
        let mut moved = 0u64;
        for p in &mut self.parked {
            if moved >= u64::from(n) {
                break;
            }
            if let Some(w) = p.wait.as_mut().filter(|w| w.addr == from) {
                w.addr = to;
                moved += 1;
            }
        }
        moved
    }
}

/// `-errno` as a0 holds it.
fn neg(e: i32) -> u64 {
    (-i64::from(e)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::futex::*;
    use tcgkit_riscv::Rv64;
    use tcgkit_tcg_core::Perms;

    const DATA: u64 = 0x10_0000;
    /// glibc's `pthread_create` flags.
    const GLIBC: u64 = 0x3d_0f00;

    struct World {
        threads: Threads,
        cpu: Cpu,
        mem: GuestMemory,
        engine: Engine<Rv64>,
        mask: u64,
    }

    fn world() -> World {
        let mut mem = GuestMemory::new();
        mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE).unwrap();
        let mut cpu = Cpu::new();
        cpu.set_pc(0x1000);
        World {
            threads: Threads::new(),
            cpu,
            mem,
            engine: Engine::new(Rv64::new()),
            mask: 0,
        }
    }

    impl World {
        fn clone(&mut self) -> u32 {
            let args = [GLIBC, 0x8000, DATA + 0x100, 0x7000, DATA + 0x100, 0];
            let step = self.threads.clone_thread(
                args,
                &self.cpu,
                self.mask,
                &mut self.mem,
                &mut self.engine,
            );
            match step {
                Some(Step::Return(tid)) => tid as u32,
                other => panic!("clone: {other:?}"),
            }
        }
        fn futex(&mut self, args: [u64; 6]) -> Step {
            self.threads.futex(args, &mut self.cpu, &mut self.mem)
        }
        fn switch(&mut self) -> bool {
            self.switch_with(false, 0, 0)
        }

        /// A switch with `process_pending` signals pending, of which
        /// `interrupting` end waits.
        fn switch_with(&mut self, gone: bool, process_pending: u64, interrupting: u64) -> bool {
            let mut pending = 0;
            let mut altstack = [0; 3];
            let signals = SignalState {
                mask: &mut self.mask,
                pending: &mut pending,
                altstack: &mut altstack,
                process_pending,
                interrupting,
            };
            self.threads.switch(gone, &mut self.cpu, signals)
        }
    }

    fn ret(e: i32) -> Step {
        Step::Return(neg(e))
    }

    #[test]
    fn clone_makes_a_thread_as_glibc_asks() {
        let mut w = world();
        let no_thread = [0x11, 0, 0, 0, 0, 0];
        assert!(
            w.threads
                .clone_thread(no_thread, &w.cpu, 0, &mut w.mem, &mut w.engine)
                .is_none(),
            "fork is not a thread"
        );
        let no_sighand = [CLONE_VM | CLONE_THREAD, 0, 0, 0, 0, 0];
        assert_eq!(
            w.threads
                .clone_thread(no_sighand, &w.cpu, 0, &mut w.mem, &mut w.engine),
            Some(ret(errno::EINVAL))
        );
        w.mask = 0b1010;
        let tid = w.clone();
        assert_eq!(tid, std::process::id() + 1);
        assert_eq!(w.mem.load(DATA + 0x100, 4), Ok(u64::from(tid)));
        assert!(w.threads.several());
        let parent = w.threads.tid;
        assert!(w.switch());
        assert_eq!(w.threads.tid, tid);
        assert_eq!(
            (w.cpu.x(10), w.cpu.x(2), w.cpu.x(4), w.cpu.pc()),
            (0, 0x8000, 0x7000, 0x1004)
        );
        assert_eq!(w.mask, 0b1010, "the child starts with the parent's mask");
        assert!(w.threads.vcpu.as_ref().is_some_and(|v| v.index() >= 1));
        assert_eq!(w.threads.tids().len(), 2);
        assert!(w.switch());
        assert_eq!(w.threads.tid, parent);
    }

    #[test]
    fn wait_and_wake_between_threads() {
        let mut w = world();
        let word = DATA + 0x40;
        w.mem.store(word, 4, 5).unwrap();
        let child = w.clone();
        // The word changed: no wait.
        assert_eq!(w.futex([word, FUTEX_WAIT, 4, 0, 0, 0]), ret(errno::EAGAIN));
        assert_eq!(
            w.futex([word + 2, FUTEX_WAIT, 5, 0, 0, 0]),
            ret(errno::EINVAL)
        );
        assert_eq!(
            w.futex([word, FUTEX_WAIT_BITSET, 5, 0, 0, 0]),
            ret(errno::EINVAL)
        );
        // The parent waits (private flag set); the child runs and wakes it.
        w.cpu.set_x(10, 99);
        assert_eq!(w.futex([word, FUTEX_WAIT | 128, 5, 0, 0, 0]), Step::Blocked);
        assert!(w.switch());
        assert_eq!(w.threads.tid, child);
        assert!(w.switch(), "the parent still waits: the child goes on");
        assert_eq!(w.threads.tid, child);
        // FUTEX_WAIT waits for every bit: a wake for any bit wakes it.
        assert_eq!(
            w.futex([word, FUTEX_WAKE_BITSET, 1, 0, 0, 0b10]),
            Step::Return(1)
        );
        assert!(w.switch());
        assert_ne!(w.threads.tid, child);
        assert_eq!(w.cpu.x(10), 0, "woken: the wait returns 0");
        assert_eq!(w.cpu.pc(), 0x1004);
    }

    #[test]
    fn bitsets_requeue_and_wake_op() {
        let mut w = world();
        let (a, b) = (DATA + 0x80, DATA + 0x84);
        let child = w.clone();
        let _second = w.clone();
        // Both children wait on `a`, with different bitsets.
        assert!(w.switch());
        assert_eq!(w.threads.tid, child);
        assert_eq!(
            w.futex([a, FUTEX_WAIT_BITSET, 0, 0, 0, 0b01]),
            Step::Blocked
        );
        assert!(w.switch());
        assert_eq!(
            w.futex([a, FUTEX_WAIT_BITSET, 0, 0, 0, 0b10]),
            Step::Blocked
        );
        assert!(w.switch());
        assert_eq!(w.threads.tid, std::process::id());
        assert_eq!(
            w.futex([a, FUTEX_WAKE_BITSET, 9, 0, 0, 0b10]),
            Step::Return(1)
        );
        // The other moves to `b` (the word must hold val3 first).
        assert_eq!(
            w.futex([a, FUTEX_CMP_REQUEUE, 0, 5, b, 1]),
            ret(errno::EAGAIN)
        );
        assert_eq!(w.futex([a, FUTEX_CMP_REQUEUE, 0, 5, b, 0]), Step::Return(1));
        assert_eq!(w.futex([a, FUTEX_WAKE, 9, 0, 0, 0]), Step::Return(0));
        // WAKE_OP: b += 3, wake on `a` (nobody), and on `b` if old b == 0.
        let add3_if_zero = (1 << 28) | (3 << 12);
        assert_eq!(
            w.futex([a, FUTEX_WAKE_OP, 1, 1, b, add3_if_zero]),
            Step::Return(1)
        );
        assert_eq!(w.mem.load(b, 4), Ok(3));
        // Old value 3 is not 0: nobody else is woken, the add still happens.
        assert_eq!(
            w.futex([a, FUTEX_WAKE_OP, 1, 1, b, add3_if_zero]),
            Step::Return(0)
        );
        assert_eq!(w.mem.load(b, 4), Ok(6));
    }

    /// A signal a waiting thread does not block ends its futex wait with
    /// EINTR (so its handler can run); one it blocks, or one that would be
    /// ignored, leaves it waiting. A signal sent to one thread stays its own.
    #[test]
    fn signals_end_the_waits_of_threads_that_take_them() {
        let mut w = world();
        let child = w.clone();
        w.mem.store(DATA + 0x400, 4, 0).unwrap();
        assert_eq!(
            w.futex([DATA + 0x400, FUTEX_WAIT, 0, 0, 0, 0]),
            Step::Blocked
        );
        // The main thread waits; the child runs.
        assert!(w.switch());
        assert_eq!(w.threads.tid, child);
        let usr1 = 1u64 << 9;
        // Ignored (not interrupting): the main thread still waits.
        assert!(w.switch_with(false, usr1, 0));
        assert_eq!(w.threads.tid, child);
        // Interrupting: the main thread's wait ends with EINTR.
        assert!(w.switch_with(false, usr1, usr1));
        assert_eq!(w.threads.tid, std::process::id());
        assert_eq!(w.cpu.x(10), neg(errno::EINTR));
        // A signal for the parked child alone is kept for it.
        assert!(w.threads.signal_thread(child, crate::signal::Signal::USR1));
        assert!(
            !w.threads
                .signal_thread(child + 100, crate::signal::Signal::USR1)
        );
        let mut pending = 0;
        let mut altstack = [0; 3];
        let signals = SignalState {
            mask: &mut w.mask,
            pending: &mut pending,
            altstack: &mut altstack,
            process_pending: 0,
            interrupting: 0,
        };
        assert!(w.threads.switch(false, &mut w.cpu, signals));
        assert_eq!(w.threads.tid, child);
        assert_eq!(pending, usr1, "the child's own pending signal came with it");
        // A new thread's alternate stack starts disabled (SS_DISABLE).
        let mut w = world();
        w.clone();
        let mut altstack = [0x5000, 0, 0x4000];
        let signals = SignalState {
            mask: &mut w.mask,
            pending: &mut 0,
            altstack: &mut altstack,
            process_pending: 0,
            interrupting: 0,
        };
        assert!(w.threads.switch(false, &mut w.cpu, signals));
        assert_eq!(altstack, [0, 2, 0]);
    }

    #[test]
    fn timeouts_and_exits() {
        let mut w = world();
        let joiner_word = DATA + 0x100;
        let child = w.clone();
        // The parent joins: waits on the child's tid word.
        assert_eq!(
            w.futex([joiner_word, FUTEX_WAIT, u64::from(child), 0, 0, 0]),
            Step::Blocked
        );
        assert!(w.switch());
        assert_eq!(w.threads.tid, child);
        // The child sleeps on a futex with a 1 ms timeout: every thread
        // waits, so the process sleeps until the deadline.
        let ts = DATA + 0x200;
        w.mem.store(ts, 8, 0).unwrap();
        w.mem.store(ts + 8, 8, 1_000_000).unwrap();
        assert_eq!(
            w.futex([DATA + 0x300, FUTEX_WAIT, 0, ts, 0, 0]),
            Step::Blocked
        );
        let start = Instant::now();
        assert!(w.switch());
        assert!(start.elapsed() >= Duration::from_millis(1));
        assert_eq!(w.threads.tid, child);
        assert_eq!(w.cpu.x(10), neg(errno::ETIMEDOUT));
        // Its exit clears the tid word and wakes the joiner.
        assert_eq!(w.threads.exit_thread(&mut w.mem), Step::Exited);
        assert!(w.switch_with(true, 0, 0));
        assert_eq!(w.threads.tid, std::process::id());
        assert_eq!(w.mem.load(joiner_word, 4), Ok(0));
        assert!(!w.threads.several());
        // Alone and waiting with no deadline: nothing can ever wake it.
        assert_eq!(
            w.futex([DATA + 0x300, FUTEX_WAIT, 0, 0, 0, 0]),
            Step::Blocked
        );
        assert!(!w.switch());
    }
}
