//! Guest threads on host threads ([`Options::host_threads`]): each guest
//! thread runs on a host thread of its own, with its own engine (vCPU
//! index as QEMU numbers them), register file and view of the one guest
//! address space, side by side with the others.
//!
//! The process's kernel state stays single-threaded: the host thread that
//! called [`Process::run`] becomes its *server*. A guest thread leaves its
//! engine for anything the kernel must see (a syscall, a fault, a signal
//! to take) and hands its state to the server, which swaps it into the
//! [`Process`], handles it with the same code as a single-threaded
//! process, swaps it out and hands it back. The server never waits: the
//! waits of `futex` and the sleeps the thread makes itself (on host
//! condition variables, [`Futexes`]), telling the server of their start
//! and end when strace or a syscall observer watches; a call that would
//! wait for a descriptor, a child or a signal (`read` of an empty pipe,
//! `ppoll`, `epoll_pwait`, `wait4`, `rt_sigsuspend`) comes back to its
//! thread with what it waits for (`blocking.rs`), and the thread waits on
//! its own and calls again. Because the fork of a host process keeps only
//! the forking thread, forks are made by the server, once every other
//! thread has stopped where it holds no lock ([`Pause`]): in the child it
//! keeps the forking guest thread's state and runs it as a
//! single-threaded process.
//!
//! Signals: a thread-directed one marks its target's pending set and
//! kicks it (its engine returns; a wait ends); a process-directed one
//! kicks every thread, and the first that does not block it takes it,
//! as Linux lets any such thread; one that finds a thread waiting ends
//! or restarts its call as Linux would (`SA_RESTART`).
//!
//! [`Options::host_threads`]: crate::Options::host_threads

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, ExitHandle, FlushHandle, GuestMemory};

use crate::abi::clone::{
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_PARENT_SETTID, CLONE_SETTLS, CLONE_SIGHAND,
    CLONE_THREAD, CLONE_VM,
};
use crate::abi::{errno, nr};
use crate::blocking::Wait;
use crate::futex::{BITSET_ALL, Futexes, Request, Waiter, Woke};
use crate::process::{GuestExit, Process};
use crate::syscall::WriteProgress;

/// What the embedder does to a new guest thread's engine, given its vCPU
/// index (attach plugins, a trace), after linux-user made it: numbered,
/// with the JIT configured as the creating thread's, sharing its compiled
/// code unless [`crate::Options::share_compiled_code`] is off.
pub type EngineSetup = dyn Fn(u32, &mut Engine<Rv64>) + Send + Sync;

/// A guest thread's own state: what the server swaps into the
/// [`Process`] while it acts for the thread.
pub(crate) struct Running {
    pub(crate) tid: u32,
    pub(crate) vcpu: u32,
    pub(crate) cpu: Cpu,
    pub(crate) mem: GuestMemory,
    pub(crate) engine: Engine<Rv64>,
    pub(crate) sigmask: u64,
    pub(crate) thread_pending: u64,
    pub(crate) altstack: [u64; 3],
    pub(crate) clear_child_tid: u64,
    pub(crate) write_progress: Option<WriteProgress>,
}

/// What the server knows of a live thread, to reach it.
struct Peer {
    tid: u32,
    vcpu: u32,
    exit: ExitHandle,
    flush: FlushHandle,
    waiter: Arc<Waiter>,
    /// Signals sent to this thread alone, not yet taken (bit `n - 1`).
    directed: Arc<AtomicU64>,
    /// The thread may hold a lock: it runs, rather than waiting for the
    /// server or in a wait of its own ([`Pause`]).
    busy: Arc<AtomicBool>,
}

impl Peer {
    fn kick(&self) {
        self.exit.request_exit();
        self.waiter.kick();
    }
}

/// Stops every thread where it holds no lock, for a fork: the child keeps
/// only the forking thread, and a lock another thread held (the address
/// space's, a plugin's, stdout's) would stay taken in it for good. A
/// thread is busy but where it waits for the server or in a wait of its
/// own; before it goes busy again it looks whether a pause is on, and if
/// so waits for its end. (The server looks at the busy flags after it
/// raised the pause, the threads at the pause after they raised their
/// flags: sequentially consistent, one of the two sees the other.)
#[derive(Default)]
struct Pause {
    on: AtomicBool,
    lock: Mutex<()>,
    over: Condvar,
}

impl Pause {
    /// The thread runs from here on (unless a pause is on: it waits).
    fn go_busy(&self, busy: &AtomicBool) {
        loop {
            busy.store(true, Ordering::SeqCst);
            if !self.on.load(Ordering::SeqCst) {
                return;
            }
            busy.store(false, Ordering::SeqCst);
            let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            while self.on.load(Ordering::SeqCst) {
                guard = self
                    .over
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    fn end(&self) {
        self.on.store(false, Ordering::SeqCst);
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.over.notify_all();
    }
}

/// What the guest threads share with the server.
struct Shared {
    pause: Pause,
    futexes: Futexes,
    /// Readable when a host child changed state (the process's SIGCHLD
    /// pipe), for threads waiting for a child or a signal.
    child_wake: Option<OwnedFd>,
    ending: AtomicBool,
    /// Syscalls are watched (strace, a syscall observer): the server must
    /// hear of every one.
    reported: bool,
}

/// What a thread asks of the server.
enum Call {
    /// Handle this exit of the engine as a single-threaded process would.
    Exit(CpuExit),
    /// A `clone` of a thread.
    Clone,
    /// A syscall the thread makes itself starts (strace, the observer).
    Begin,
    /// It returned this value: finish it and take pending signals.
    End(u64),
    /// A wait was kicked: would a signal interrupt it?
    Check,
    /// `exit` of this thread with this status.
    ThreadExit(u64),
    /// Make the syscall at the pc, unless it would wait (then say for
    /// what); `expired`: the wait's timeout has passed, make it anyway.
    Syscall { expired: bool },
}

/// What reaches the server: a call, or a thread's state once it is gone.
enum ToServer {
    Call {
        call: Call,
        running: Box<Running>,
        reply: SyncSender<Reply>,
    },
    Gone(Box<Running>),
}

enum Verdict {
    /// Go on.
    Go,
    /// The process is over: stop.
    Stop,
    /// For `Check`: a signal would interrupt the wait.
    Interrupt(bool),
    /// For `Syscall`: it would wait for this; wait, then call again.
    Wait(Wait),
}

struct Reply {
    running: Box<Running>,
    verdict: Verdict,
}

/// A guest thread's end of the conversation with the server.
struct Thread {
    running: Option<Box<Running>>,
    shared: Arc<Shared>,
    busy: Arc<AtomicBool>,
    waiter: Arc<Waiter>,
    to_server: Sender<ToServer>,
    reply_tx: SyncSender<Reply>,
    reply_rx: Receiver<Reply>,
}

impl Thread {
    /// Asks the server; `None` when the process is over (the state is
    /// then back with the thread for its last message).
    fn ask(&mut self, call: Call) -> Option<Verdict> {
        let running = self.running.take()?;
        let message = ToServer::Call {
            call,
            running,
            reply: self.reply_tx.clone(),
        };
        // Busy until the message is in: a fork must not find it half sent.
        let sent = self.to_server.send(message);
        self.busy.store(false, Ordering::SeqCst);
        if sent.is_err() {
            self.shared.pause.go_busy(&self.busy);
            return None;
        }
        let reply = self.reply_rx.recv().ok();
        self.shared.pause.go_busy(&self.busy);
        let reply = reply?;
        self.running = Some(reply.running);
        match reply.verdict {
            Verdict::Stop => None,
            v => Some(v),
        }
    }

    /// A syscall the thread makes itself starts: the server hears of it
    /// only if someone watches syscalls (strace, an observer).
    fn begin(&mut self) -> bool {
        !self.shared.reported || self.ask(Call::Begin).is_some()
    }

    /// It returns `value`. Watched, the server finishes it (and delivers
    /// what signals came meanwhile); unwatched, the thread does, and a
    /// signal that came meanwhile has kicked its engine, which stops
    /// before its first block to let the server deliver it.
    fn end(&mut self, value: u64) -> bool {
        if self.shared.reported {
            return self.ask(Call::End(value)).is_some();
        }
        let Some(r) = self.running.as_deref_mut() else {
            return false;
        };
        r.cpu.set_x(10, value);
        // ecall has no compressed form: always 4 bytes.
        r.cpu.set_pc(r.cpu.pc().wrapping_add(4));
        true
    }

    fn running(&mut self) -> Option<&mut Running> {
        self.running.as_deref_mut()
    }

    /// The thread's life: run guest code, ask the server, until the
    /// thread exits or the process ends; then hand its state back.
    fn run(mut self) {
        self.shared.pause.go_busy(&self.busy);
        while !self.shared.ending.load(Ordering::Acquire) {
            let Some(r) = self.running() else { break };
            // Out of `run` the engine runs no block: a plugin reset need
            // not wait for it (it may be waiting for the resetting thread).
            r.engine.set_idle(false);
            let exit = r.engine.run(&mut r.cpu, &mut r.mem);
            r.engine.set_idle(true);
            let go = match exit {
                CpuExit::Syscall => self.syscall(),
                exit => self.ask(Call::Exit(exit)).is_some(),
            };
            if !go {
                break;
            }
        }
        if let Some(running) = self.running.take() {
            let _ = self.to_server.send(ToServer::Gone(running));
        }
        self.busy.store(false, Ordering::SeqCst);
    }

    /// A syscall: the ones that wait are made here, the rest by the server.
    fn syscall(&mut self) -> bool {
        let Some(r) = self.running() else {
            return false;
        };
        let number = r.cpu.x(17);
        let args = [10, 11, 12, 13, 14, 15].map(|i| r.cpu.x(i));
        match number {
            nr::CLONE if args[0] & CLONE_THREAD != 0 => self.ask(Call::Clone).is_some(),
            nr::FUTEX => self.futex(args),
            nr::NANOSLEEP => self.sleep(None, args[0], args[1]),
            nr::CLOCK_NANOSLEEP => self.sleep(Some((args[0], args[1])), args[2], args[3]),
            nr::EXIT => self.exit_thread(args[0]),
            _ => self.server_syscall(),
        }
    }

    /// A syscall the server makes. One that would wait comes back with
    /// what it waits for: the thread waits for it here (the server goes on
    /// with the others'), then calls again.
    fn server_syscall(&mut self) -> bool {
        // Fixed at the first wait: a timeout counts from the call.
        let mut deadline = None;
        let mut expired = false;
        loop {
            self.waiter.arm();
            match self.ask(Call::Syscall { expired }) {
                None => return false,
                Some(Verdict::Wait(wait)) => {
                    if !self.wait_out(wait, &mut deadline, &mut expired) {
                        return false;
                    }
                }
                Some(_) => return true,
            }
        }
    }

    /// Waits until `wait`'s descriptors are ready, its timeout passes
    /// (then `expired`), or a kick (a signal: the server looks at it when
    /// the call is made again); false when the process ends meanwhile.
    fn wait_out(
        &mut self,
        wait: Wait,
        deadline: &mut Option<Option<Instant>>,
        expired: &mut bool,
    ) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        // The server hears of a child's exit (SIGCHLD) only when it looks:
        // look again now and then, should it have taken the news first.
        const LOOK_AGAIN: Duration = Duration::from_millis(10);
        let now = Instant::now();
        // SIGCHLD's pipe turns readable on news of a child.
        let on_child_news = matches!(wait, Wait::Child | Wait::Signal);
        let (fds, until, timed) = match wait {
            Wait::Ready { fds, timeout } => {
                let until = *deadline.get_or_insert_with(|| timeout.map(|t| now + t));
                (fds, until, true)
            }
            Wait::Child | Wait::Signal => (Vec::new(), Some(now + LOOK_AGAIN), false),
        };
        let mut polled: Vec<PollFd<'_>> = fds
            .iter()
            .map(|(fd, events)| PollFd::new(fd, *events))
            .collect();
        if let (true, Some(child)) = (on_child_news, &self.shared.child_wake) {
            polled.push(PollFd::new(child, PollFlags::IN));
        }
        if let Some(ring) = self.waiter.ring() {
            polled.push(PollFd::from_borrowed_fd(ring, PollFlags::IN));
        }
        let span = until.map(|u| {
            let left = u.saturating_duration_since(now);
            Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos().into(),
            }
        });
        self.busy.store(false, Ordering::SeqCst);
        if polled.is_empty() && span.is_none() {
            // No ring to kick: look again now and then.
            std::thread::sleep(LOOK_AGAIN);
        } else {
            // EINTR (a host signal) is a spurious wake-up like any other.
            let _ = rustix::event::poll(&mut polled, span.as_ref());
        }
        self.shared.pause.go_busy(&self.busy);
        if self.shared.ending.load(Ordering::Acquire) {
            return false;
        }
        if timed && until.is_some_and(|u| Instant::now() >= u) {
            *expired = true;
        }
        true
    }

    /// Waits until woken, `deadline` or a signal the thread takes
    /// (`Kicked`); `None` when the process ends meanwhile.
    fn wait(&mut self, deadline: Option<Instant>) -> Option<Woke> {
        loop {
            self.busy.store(false, Ordering::SeqCst);
            let woke = self.waiter.sleep(deadline);
            self.shared.pause.go_busy(&self.busy);
            match woke {
                Woke::Kicked => {
                    if self.shared.ending.load(Ordering::Acquire) {
                        return None;
                    }
                    if let Verdict::Interrupt(true) = self.ask(Call::Check)? {
                        return Some(Woke::Kicked);
                    }
                }
                woke => return Some(woke),
            }
        }
    }

    fn futex(&mut self, args: [u64; 6]) -> bool {
        if !self.begin() {
            return false;
        }
        let Some(r) = self.running.as_deref_mut() else {
            return false;
        };
        let outcome = Request::parse(args, &mut r.mem).and_then(|request| {
            let started = self
                .shared
                .futexes
                .start(request, &self.waiter, &mut r.mem)?;
            Ok((request, started))
        });
        let value = match outcome {
            Err(e) => neg(e),
            Ok((_, Some(n))) => n,
            Ok((Request::Wait { deadline, .. }, None)) => match self.wait(deadline) {
                None => {
                    self.shared.futexes.cancel(&self.waiter);
                    return false;
                }
                Some(Woke::Woken) => 0,
                // Out of the queue first: a wake that got there first wins.
                Some(Woke::TimedOut) if self.shared.futexes.cancel(&self.waiter) => {
                    neg(errno::ETIMEDOUT)
                }
                Some(Woke::Kicked) if self.shared.futexes.cancel(&self.waiter) => neg(errno::EINTR),
                Some(_) => 0,
            },
            Ok((_, None)) => 0,
        };
        self.end(value)
    }

    /// `nanosleep` (`clock: None`) or `clock_nanosleep`: a sleep a signal
    /// the thread takes cuts short (a relative one then reports what was
    /// left).
    fn sleep(&mut self, clock: Option<(u64, u64)>, req: u64, rem: u64) -> bool {
        if !self.begin() {
            return false;
        }
        let Some(r) = self.running.as_deref_mut() else {
            return false;
        };
        let value = match crate::syscall::sleep_request(&mut r.mem, clock, req) {
            Err(e) => neg(e),
            Ok(request) => {
                self.waiter.arm();
                match self.wait(Some(request.until)) {
                    None => return false,
                    Some(Woke::Kicked) => {
                        let left = request.until.saturating_duration_since(Instant::now());
                        if request.relative
                            && rem != 0
                            && let Some(r) = self.running.as_deref_mut()
                        {
                            let _ = r.mem.store(rem, 8, left.as_secs());
                            let _ = r.mem.store(rem + 8, 8, u64::from(left.subsec_nanos()));
                        }
                        neg(errno::EINTR)
                    }
                    Some(_) => {
                        if request.relative
                            && rem != 0
                            && let Some(r) = self.running.as_deref_mut()
                        {
                            let _ = r.mem.store(rem, 8, 0);
                            let _ = r.mem.store(rem + 8, 8, 0);
                        }
                        0
                    }
                }
            }
        };
        self.end(value)
    }

    /// `exit` of one thread: its clear-tid word is zeroed and woken (how
    /// `pthread_join` learns of it), then the server forgets it.
    fn exit_thread(&mut self, status: u64) -> bool {
        if let Some(r) = self.running.as_deref_mut() {
            let addr = std::mem::take(&mut r.clear_child_tid);
            if addr != 0 && r.mem.store(addr, 4, 0).is_ok() {
                let wake = Request::Wake {
                    addr,
                    n: 1,
                    bitset: BITSET_ALL,
                };
                let _ = self.shared.futexes.start(wake, &self.waiter, &mut r.mem);
            }
        }
        let _ = self.ask(Call::ThreadExit(status));
        false
    }
}

/// `-errno` as a0 holds it.
fn neg(e: i32) -> u64 {
    (-i64::from(e)) as u64
}

/// The server's side: the live threads and how to reach them.
struct Server<'p> {
    process: &'p mut Process,
    shared: Arc<Shared>,
    peers: Vec<Peer>,
    to_server: Sender<ToServer>,
    inbox: Receiver<ToServer>,
    /// Threads started and not gone yet.
    live: usize,
    /// The main thread's state, once it is gone.
    main: Option<Box<Running>>,
    main_tid: u32,
    exit: Option<GuestExit>,
    /// The last `exit` status, for a process whose threads all exit.
    last_status: u8,
}

impl Process {
    /// Moves thread `r`'s state into the process (or back out: the swap
    /// is its own inverse).
    fn swap_running(&mut self, r: &mut Running) {
        std::mem::swap(&mut self.cpu, &mut r.cpu);
        std::mem::swap(&mut self.mem, &mut r.mem);
        std::mem::swap(&mut self.engine, &mut r.engine);
        std::mem::swap(&mut self.kernel.sigmask, &mut r.sigmask);
        std::mem::swap(&mut self.kernel.thread_pending, &mut r.thread_pending);
        std::mem::swap(&mut self.kernel.altstack, &mut r.altstack);
        std::mem::swap(&mut self.kernel.write_progress, &mut r.write_progress);
        self.threads
            .swap_identity(&mut r.tid, &mut r.clear_child_tid);
        self.kernel.current_tid = self.threads.tid;
    }
}

/// Runs the process on host threads from here on: the running thread
/// (which is in a `clone` of a thread, its pc at the `ecall`) moves to a
/// host thread of its own and the caller serves them all.
pub(crate) fn serve(process: &mut Process) -> GuestExit {
    let (to_server, inbox) = channel();
    let main_tid = process.threads.tid;
    // Placeholders that the swap leaves in the process while it serves.
    let mut main = Box::new(Running {
        tid: main_tid,
        vcpu: 0,
        cpu: Cpu::new(),
        mem: process.mem.share(),
        engine: Engine::new(Rv64::new()),
        sigmask: 0,
        thread_pending: 0,
        altstack: [0, 2, 0],
        clear_child_tid: 0,
        write_progress: None,
    });
    process.swap_running(&mut main);
    let reported = process.options.strace || process.observer.is_some();
    let child_wake = process
        .child_signals
        .as_ref()
        .and_then(|c| crate::fd::dup_host(c.wake_fd()));
    // The server makes a call that can wait only once it need not.
    process.kernel.never_wait = true;
    let mut server = Server {
        process,
        shared: Arc::new(Shared {
            pause: Pause::default(),
            futexes: Futexes::default(),
            child_wake,
            ending: AtomicBool::new(false),
            reported,
        }),
        peers: Vec::new(),
        to_server,
        inbox,
        live: 0,
        main: None,
        main_tid,
        exit: None,
        last_status: 0,
    };
    server.start(main);
    server.run()
}

impl<'p> Server<'p> {
    /// Starts a host thread for `running`.
    fn start(&mut self, running: Box<Running>) {
        let waiter = Arc::new(Waiter::with_ring());
        let directed = Arc::new(AtomicU64::new(0));
        let busy = Arc::new(AtomicBool::new(true));
        self.peers.push(Peer {
            tid: running.tid,
            vcpu: running.vcpu,
            exit: running.engine.exit_handle(),
            flush: running.engine.flush_handle(),
            waiter: Arc::clone(&waiter),
            directed,
            busy: Arc::clone(&busy),
        });
        let (reply_tx, reply_rx) = sync_channel(1);
        let thread = Thread {
            running: Some(running),
            shared: Arc::clone(&self.shared),
            busy,
            waiter,
            to_server: self.to_server.clone(),
            reply_tx,
            reply_rx,
        };
        self.live += 1;
        let spawned = std::thread::Builder::new()
            .name("tcgkit-vcpu".to_owned())
            .spawn(move || thread.run());
        if spawned.is_err() {
            // Out of host threads: the guest thread never runs, as if it
            // had been killed at once.
            self.live -= 1;
            self.peers.pop();
        }
    }

    fn run(mut self) -> GuestExit {
        while self.live > 0 {
            let (call, mut running, reply) = match self.inbox.recv() {
                Err(_) => break,
                Ok(ToServer::Gone(running)) => {
                    self.gone(running);
                    continue;
                }
                Ok(ToServer::Call {
                    call,
                    running,
                    reply,
                }) => (call, running, reply),
            };
            if self.shared.ending.load(Ordering::Acquire) {
                let _ = reply.send(Reply {
                    running,
                    verdict: Verdict::Stop,
                });
                continue;
            }
            self.take_directed(&mut running);
            self.process.swap_running(&mut running);
            // The threads a tgkill may name: the live ones but this one.
            let me = self.process.threads.tid;
            let others = &mut self.process.kernel.other_tids;
            others.clear();
            others.extend(self.peers.iter().map(|p| p.tid).filter(|&t| t != me));
            let vcpu = running.vcpu;
            if let Some(observer) = self.process.observer.as_mut() {
                observer.on_vcpu_running(vcpu);
            }
            let code_before = self.process.code_generation;
            let pending_before = self.process.kernel.process_pending();
            let forks = matches!(call, Call::Syscall { .. } | Call::Exit(CpuExit::Syscall))
                && self.process.cpu.x(17) == nr::CLONE
                && self.process.cpu.x(10) & CLONE_THREAD == 0;
            if forks {
                self.pause_others();
            }
            let (verdict, forked_child) = self.handle(call, &mut running);
            if forks && !forked_child {
                self.shared.pause.end();
            }
            if forked_child {
                // The fork's child: only this thread exists in it, and
                // its state is in the process. Run it alone.
                let process = self.abandon();
                process.kernel.never_wait = false;
                return process.run_until_exit();
            }
            self.route_directed();
            if self.process.code_generation != code_before {
                let me = self.process.threads.tid;
                for peer in self.peers.iter().filter(|p| p.tid != me) {
                    peer.flush.request_flush();
                }
            }
            let pending = self.process.kernel.process_pending();
            if pending != 0 && pending != pending_before {
                let me = self.process.threads.tid;
                for peer in self.peers.iter().filter(|p| p.tid != me) {
                    peer.kick();
                }
            }
            self.process.swap_running(&mut running);
            let verdict = match verdict {
                Verdict::Stop => {
                    if self.exit.is_some() {
                        self.end();
                    }
                    Verdict::Stop
                }
                v => v,
            };
            let _ = reply.send(Reply { running, verdict });
        }
        self.process.kernel.never_wait = false;
        // Back to the main thread's state, for what follows the run.
        if let Some(mut main) = self.main.take() {
            self.process.swap_running(&mut main);
        }
        self.exit
            .take()
            .unwrap_or(GuestExit::Exited(self.last_status))
    }

    /// Signals sent to the thread while it was away join its own.
    fn take_directed(&mut self, running: &mut Running) {
        if let Some(peer) = self.peers.iter().find(|p| p.tid == running.tid) {
            running.thread_pending |= peer.directed.swap(0, Ordering::AcqRel);
        }
    }

    /// `tgkill`s of other threads, from the syscall just handled.
    fn route_directed(&mut self) {
        for (tid, sig) in std::mem::take(&mut self.process.kernel.directed) {
            if let Some(peer) = self.peers.iter().find(|p| p.tid == tid) {
                peer.directed
                    .fetch_or(1u64 << (sig.number() - 1), Ordering::AcqRel);
                peer.kick();
            }
        }
    }

    /// In a fork's child, where the other threads do not exist: what they
    /// shared with the server is left as the fork found it, never dropped
    /// (a drop could wait on a lock or message no thread will finish).
    fn abandon(self) -> &'p mut Process {
        let Server {
            process,
            shared,
            peers,
            to_server,
            inbox,
            main,
            ..
        } = self;
        std::mem::forget((shared, peers, to_server, inbox, main));
        process
    }

    /// Before a fork: every other thread stops where it holds no lock
    /// ([`Pause`]). One that does not stop within a second (its engine
    /// deaf to the request, which should not be) is not waited for.
    fn pause_others(&self) {
        const AT_MOST: Duration = Duration::from_secs(1);
        let me = self.process.threads.tid;
        self.shared.pause.on.store(true, Ordering::SeqCst);
        let others = || self.peers.iter().filter(move |p| p.tid != me);
        for peer in others() {
            peer.exit.request_exit();
        }
        let since = Instant::now();
        while others().any(|p| p.busy.load(Ordering::SeqCst)) && since.elapsed() < AT_MOST {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The process is over: every thread stops.
    fn end(&mut self) {
        self.shared.ending.store(true, Ordering::Release);
        for peer in &self.peers {
            peer.kick();
        }
    }

    fn gone(&mut self, running: Box<Running>) {
        self.live = self.live.saturating_sub(1);
        self.peers.retain(|p| p.tid != running.tid);
        if running.tid == self.main_tid {
            self.main = Some(running);
        } else {
            self.process.threads_stats += running.engine.stats();
        }
    }

    /// Acts for the thread whose state is in the process; true as the
    /// second value in a fork's child.
    fn handle(&mut self, call: Call, running: &mut Running) -> (Verdict, bool) {
        let p = &mut *self.process;
        let args = [10, 11, 12, 13, 14, 15].map(|r| p.cpu.x(r));
        let number = p.cpu.x(17);
        let call = match call {
            Call::Syscall { expired } => {
                let wait = if expired {
                    None
                } else {
                    p.would_wait(number, args)
                };
                let Some(wait) = wait else {
                    return self.handle(Call::Exit(CpuExit::Syscall), running);
                };
                // A signal pending now, or one that kicked the thread
                // out of its wait, ends the wait (rt_sigsuspend's mask
                // was looked at already).
                let ended = match wait {
                    Wait::Signal => None,
                    _ => p.interrupt(number, args),
                };
                return match ended {
                    None => (Verdict::Wait(wait), false),
                    Some(None) => (Verdict::Go, false),
                    Some(Some(exit)) => {
                        self.exit = Some(exit);
                        (Verdict::Stop, false)
                    }
                };
            }
            call => call,
        };
        let ended = match call {
            Call::Exit(CpuExit::ExitRequested) => p.deliver_pending(),
            Call::Exit(exit) => {
                let exit = p.handle_exit(exit);
                if p.forked_child {
                    p.forked_child = false;
                    return (Verdict::Go, true);
                }
                exit
            }
            Call::Begin => {
                p.begin_syscall(number, &args);
                None
            }
            Call::End(value) => {
                p.finish_syscall(number, &args, value);
                p.deliver_pending()
            }
            Call::Check => {
                let k = &p.kernel;
                let open = (k.process_pending() | k.thread_pending) & !k.sigmask;
                return (Verdict::Interrupt(open & k.interrupting() != 0), false);
            }
            Call::Clone => {
                p.begin_syscall(number, &args);
                let value = match self.clone_thread(args) {
                    Ok(tid) => u64::from(tid),
                    Err(e) => neg(e),
                };
                let p = &mut *self.process;
                p.finish_syscall(number, &args, value);
                p.deliver_pending()
            }
            // Answered above.
            Call::Syscall { .. } => None,
            Call::ThreadExit(status) => {
                let vcpu = running.vcpu;
                if let Some(observer) = p.observer.as_mut() {
                    observer.on_vcpu_exit(vcpu);
                }
                self.last_status = status as u8;
                // Gone for the others now (its host thread ends soon): its
                // vCPU index is free, a tgkill of it finds no thread.
                let me = p.threads.tid;
                self.peers.retain(|peer| peer.tid != me);
                if self.live == 1 {
                    // The last thread: the process exits with its status.
                    self.exit = Some(GuestExit::Exited(status as u8));
                }
                return (Verdict::Stop, false);
            }
        };
        match ended {
            Some(exit) => {
                self.exit = Some(exit);
                (Verdict::Stop, false)
            }
            None => (Verdict::Go, false),
        }
    }

    /// `clone` of a thread for the one in the process; its new id.
    fn clone_thread(&mut self, args: [u64; 6]) -> Result<u32, i32> {
        // RV64's argument order: flags, stack, parent tid, tls, child tid.
        let [flags, stack, parent_tid, tls, child_tid, _] = args;
        if flags & CLONE_SIGHAND == 0 || flags & CLONE_VM == 0 {
            return Err(errno::EINVAL);
        }
        let p = &mut *self.process;
        let tid = p.threads.allocate_tid();
        let put_tid = |mem: &mut GuestMemory, addr: u64| mem.store(addr, 4, u64::from(tid));
        if flags & CLONE_PARENT_SETTID != 0 && put_tid(&mut p.mem, parent_tid).is_err() {
            return Err(errno::EFAULT);
        }
        if flags & CLONE_CHILD_SETTID != 0 && put_tid(&mut p.mem, child_tid).is_err() {
            return Err(errno::EFAULT);
        }
        let mut cpu = p.cpu.clone();
        cpu.set_x(10, 0);
        if stack != 0 {
            cpu.set_x(2, stack);
        }
        if flags & CLONE_SETTLS != 0 {
            cpu.set_x(4, tls);
        }
        // Past the ecall, as the parent will be.
        cpu.set_pc(p.cpu.pc().wrapping_add(4));
        // As QEMU numbers them: one past the highest of the live threads,
        // so an exited thread's index is taken again.
        let vcpu = self.peers.iter().map(|p| p.vcpu + 1).max().unwrap_or(0);
        let mut engine = Engine::new(Rv64::new());
        engine.set_vcpu_index(vcpu);
        // Sharing first: the JIT then takes the creating thread's compiler
        // set-up (its memory stubs) instead of making its own.
        if p.options.share_compiled_code {
            engine.share_compiled_code(&p.engine);
        }
        if p.options.share_translations {
            engine.share_translations(&mut p.engine);
        }
        // Cannot fail: the creating thread's engine has the same JIT on.
        let _ = engine.set_jit(p.engine.jit());
        if let Some(setup) = &p.options.engine_setup {
            setup(vcpu, &mut engine);
        }
        if let Some(observer) = p.observer.as_mut() {
            observer.on_vcpu_start(vcpu, &cpu);
        }
        let running = Running {
            tid,
            vcpu,
            cpu,
            mem: p.mem.share(),
            engine,
            sigmask: p.kernel.sigmask,
            thread_pending: 0,
            // Linux gives a new thread no alternate stack (SS_DISABLE).
            altstack: [0, 2, 0],
            clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 {
                child_tid
            } else {
                0
            },
            write_progress: None,
        };
        self.start(Box::new(running));
        self.process.kernel.other_tids.push(tid);
        Ok(tid)
    }
}
