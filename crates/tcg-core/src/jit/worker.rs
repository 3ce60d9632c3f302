//! The background compiler: one thread that turns blocks' IR into machine
//! code while the vCPU goes on interpreting them.
//!
//! Compiling a block costs a few hundred interpreted runs of it (about
//! 0.2 ms against 0.4 µs), and a large program has thousands of hot
//! blocks: in line, sqlite3 spent 40% of its run in Cranelift. The vCPU
//! loop lowers a hot block (cheap) and sends the IR here; the machine code
//! comes back as bytes, which the loop copies into the block's generation
//! when it next meets the block (see `JitCompiler::poll`). A result for a
//! generation that has since been cleared is dropped unseen.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;

use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;

use super::JitError;
use super::SharedCode;
use super::codegen::{BlockSource, MachineCode};

/// A block to compile: its source and where the result goes.
pub(crate) struct Job {
    /// The `JitBlocks` instance that asked.
    pub instance: u64,
    /// Its entry in that instance's compiled blocks.
    pub index: u32,
    pub src: BlockSource,
}

/// A compiled block, or why it failed.
pub(crate) struct Done {
    pub instance: u64,
    pub index: u32,
    pub code: Result<Arc<MachineCode>, JitError>,
    /// Another engine compiled it (see `shared.rs`).
    pub adopted: bool,
}

/// The compiler thread and the two channels to it.
pub(crate) struct Worker {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
    /// Jobs sent and not yet received back.
    pub(crate) in_flight: usize,
    /// Jobs the thread has finished, and how many of them were received:
    /// one load tells whether a result waits, cheaper than asking the
    /// channel (a vCPU asks each time it enters a block still waiting).
    finished: Arc<AtomicUsize>,
    received: usize,
}

impl Worker {
    /// Starts the thread, compiling for `shared`'s ISA and publishing
    /// there.
    pub(crate) fn spawn(shared: Arc<SharedCode>) -> Result<Self, JitError> {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        let finished = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&finished);
        let thread = std::thread::Builder::new()
            .name("tcgkit-jit".to_owned())
            .spawn(move || compile_loop(&shared, &job_rx, &done_tx, &count))
            .map_err(|e| JitError::Module(format!("starting the compiler thread: {e}")))?;
        Ok(Worker {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            in_flight: 0,
            finished,
            received: 0,
        })
    }

    /// A worker without a thread (it could not be started): every job
    /// comes back at once, to be compiled in line.
    pub(crate) fn dead() -> Self {
        let (_, done) = channel();
        Worker {
            jobs: None,
            done,
            thread: None,
            in_flight: 0,
            finished: Arc::new(AtomicUsize::new(0)),
            received: 0,
        }
    }

    /// Queues `job`; gives it back if the thread is gone.
    pub(crate) fn send(&mut self, job: Job) -> Option<Job> {
        let Some(jobs) = &self.jobs else {
            return Some(job);
        };
        match jobs.send(job) {
            Ok(()) => {
                self.in_flight += 1;
                None
            }
            Err(e) => Some(e.0),
        }
    }

    /// A finished job, if one is waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Done> {
        if self.in_flight == 0 || self.finished.load(Ordering::Acquire) == self.received {
            return None;
        }
        match self.done.try_recv() {
            Ok(done) => {
                self.in_flight -= 1;
                self.received += 1;
                Some(done)
            }
            Err(TryRecvError::Empty) => None,
            // The thread died (a panic in the code generator): what it
            // held is never coming back.
            Err(TryRecvError::Disconnected) => {
                self.in_flight = 0;
                None
            }
        }
    }
}

impl Worker {
    /// Ends the thread once it has compiled every job it was sent, and
    /// returns what it finished that was not received yet.
    pub(crate) fn stop(mut self) -> Vec<Done> {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.done.try_iter().collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the queue ends the thread after its current job.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn compile_loop(
    shared: &SharedCode,
    jobs: &Receiver<Job>,
    done: &Sender<Done>,
    finished: &AtomicUsize,
) {
    let mut ctx = Context::new();
    let mut fctx = FunctionBuilderContext::new();
    while let Ok(job) = jobs.recv() {
        // Another engine may have compiled the same since it was asked.
        let (code, adopted) = match shared.find(&job.src) {
            Some(code) => (Ok(code), true),
            None => {
                ctx.clear();
                let code = super::compiler::compile_shared(shared, &mut ctx, &mut fctx, job.src);
                (code, false)
            }
        };
        let result = Done {
            instance: job.instance,
            index: job.index,
            code,
            adopted,
        };
        if done.send(result).is_err() {
            break;
        }
        // After the send: a vCPU that sees the count finds the result.
        finished.fetch_add(1, Ordering::Release);
    }
}
