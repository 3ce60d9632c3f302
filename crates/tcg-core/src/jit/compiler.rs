//! The compiler of one engine: lowers a hot block, takes code compiled
//! before from an equal source (`shared.rs`) or compiles it (in line or on
//! the background worker), and places it in the block's generation.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use cranelift_codegen::Context;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::FunctionBuilderContext;

use super::code::{CodePtr, CodeStore, Placed};
use super::codegen::{self, Links, MachineCode, PlanCode};
use super::runtime::Helpers;
use super::worker::{Done, Job, Worker};
use super::{ChainClass, Compiled, IrBuilder, JitBlocks, JitError, NOT_COMPILED, SharedCode};
use crate::cache::{NONE, TbHeader, TbOp};
use crate::frontend::Frontend;

/// Compiles blocks; one per engine, reused for every block.
pub(crate) struct JitCompiler {
    /// What it shares with the compilers of the engines it shares code
    /// with (see `shared.rs`).
    shared: Arc<SharedCode>,
    ctx: Context,
    fctx: FunctionBuilderContext,
    /// Started on the first background compile.
    worker: Option<Worker>,
    /// Blocks given code compiled before from an equal source (by another
    /// engine, or by this one before a flush) instead of compiling it.
    pub(crate) adopted: u64,
    /// What compilers this one replaced shared: code they placed calls
    /// their stubs and may still be in the engine's generations.
    _replaced: Vec<Arc<SharedCode>>,
}

impl JitCompiler {
    /// A compiler for the host, calling `F`'s helpers.
    pub(crate) fn new<F: Frontend>() -> Result<Self, JitError> {
        let mut flags = settings::builder();
        let set = |flags: &mut settings::Builder, k: &str, v: &str| {
            flags
                .set(k, v)
                .map_err(|e| JitError::UnsupportedHost(e.to_string()))
        };
        // The IR comes in already simple: Cranelift's egraph passes cost
        // more compile time than they win (release, /usr/bin/time best of
        // 5: malloc 0.44 s at "none" against 0.49 s at "speed", integer
        // 0.12 against 0.13); its single-pass register allocator compiles
        // faster but doubles run time (0.91 s, 0.19 s).
        set(&mut flags, "opt_level", "none")?;
        set(&mut flags, "is_pic", "false")?;
        set(&mut flags, "use_colocated_libcalls", "false")?;
        // Cranelift's tail calls (blocks jumping into blocks) need them.
        set(&mut flags, "preserve_frame_pointers", "true")?;
        let verify = if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        };
        set(&mut flags, "enable_verifier", verify)?;
        let isa = cranelift_native::builder()
            .map_err(|e| JitError::UnsupportedHost(e.to_string()))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| JitError::UnsupportedHost(e.to_string()))?;
        let mut ctx = Context::new();
        let mut fctx = FunctionBuilderContext::new();
        codegen::build_trampoline(&mut ctx.func, &mut fctx, &*isa);
        let trampoline = codegen::emit(&mut ctx, &*isa)?;
        let mut helpers = Helpers::for_frontend::<F>();
        let mut stubs = CodeStore::new(isa.clone(), &trampoline)?;
        let mut stub = |target: usize, store: bool| -> Result<usize, JitError> {
            codegen::build_stub(&mut ctx.func, &mut fctx, &*isa, target, store);
            let code = codegen::emit(&mut ctx, &*isa)?;
            Ok(stubs.define(&code)?.addr())
        };
        for size in 0..4 {
            for signed in 0..2 {
                helpers.load_stub[size][signed] = stub(helpers.load[size][signed], false)?;
            }
            helpers.store_stub[size] = stub(helpers.store[size], true)?;
        }
        let shared = SharedCode::new(isa, helpers, trampoline, stubs);
        Ok(Self::sharing(Arc::new(shared)))
    }

    /// A compiler sharing `shared` (that of the engine it shares code
    /// with; always made by [`JitCompiler::new`] for the same frontend).
    pub(crate) fn sharing(shared: Arc<SharedCode>) -> Self {
        JitCompiler {
            shared,
            ctx: Context::new(),
            fctx: FunctionBuilderContext::new(),
            worker: None,
            adopted: 0,
            _replaced: Vec::new(),
        }
    }

    /// A compiler sharing `shared` in place of this one, whose worker
    /// has been stopped: it counts on from this one's adoptions, and
    /// keeps what this one shared alive (its code may still run).
    pub(crate) fn replaced_by(self, shared: Arc<SharedCode>) -> Self {
        let mut next = Self::sharing(shared);
        next.adopted = self.adopted;
        next._replaced = self._replaced;
        next._replaced.push(self.shared);
        next
    }

    /// What this compiler shares (for [`JitCompiler::sharing`]).
    pub(crate) fn shared(&self) -> &Arc<SharedCode> {
        &self.shared
    }

    /// Compiles block `id` (`tb`, its `ops`) into `blocks`, with chain
    /// exits into blocks of class `chain` if given: at once, or with
    /// `background` on the compiler thread (see [`JitCompiler::poll`]).
    /// Returns whether the block has code now; a block of which little
    /// lowers is left to the interpreter.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn compile<F: Frontend>(
        &mut self,
        frontend: &F,
        id: u32,
        tb: &TbHeader,
        ops: &[TbOp<F::Op>],
        chain: Option<ChainClass>,
        plan: Option<PlanCode>,
        background: bool,
        blocks: &mut JitBlocks<F::Op>,
    ) -> Result<bool, JitError> {
        blocks.ensure(id);
        let slot = id as usize;
        if blocks.code.get(slot) != Some(&NONE) {
            return Ok(blocks.compiled(id).is_some());
        }
        // Until it succeeds, the block is not compiled again.
        if let Some(c) = blocks.code.get_mut(slot) {
            *c = NOT_COMPILED;
        }
        let mut ir = IrBuilder::new();
        let mut lowered = 0usize;
        let last = ops.len().saturating_sub(1);
        for (i, op) in ops.iter().enumerate() {
            let pc = tb.pc.wrapping_add(u64::from(op.offset));
            ir.begin(i as u32, pc, op.len);
            if frontend.lower(&op.op, &mut ir) {
                lowered += 1;
            } else {
                ir.interpret_current(i == last);
            }
            if ir.ended {
                break;
            }
        }
        // A block mostly left to the interpreter (floating point, say)
        // gains little from compiling and costs its compile time.
        if lowered * 2 < ops.len() {
            return Ok(false);
        }
        let Ok(index) = u32::try_from(blocks.compiled.len()) else {
            return Ok(false);
        };
        let boxed: Box<[F::Op]> = ops.iter().map(|o| o.op).collect();
        let cells: Box<[AtomicUsize; 2]> = Box::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let links = Links {
            ops: boxed.as_ptr() as u64,
            cells: cells.as_ptr() as u64,
            marker: u64::from(index) * 2 + 1,
            jumps: blocks.jumps_addr() as u64,
            hooks: plan.as_ref().map_or(0, |p| u64::from(p.hooks)),
        };
        let baked = plan.clone();
        let src = codegen::BlockSource {
            ir,
            pc: tb.pc,
            op_size: std::mem::size_of::<F::Op>(),
            helpers: self.shared.helpers,
            fallthrough: tb.pc.wrapping_add(u64::from(tb.size)),
            chains: chain.is_some(),
            jump_key: chain.map(|class| u64::from(tb.flags) | (class as u64) << 32),
            plan: plan.map(|p| PlanCode { hooks: 0, ..p }),
        };
        let regs_used = src.ir.regs_used;
        blocks.compiled.push(Compiled {
            code: None,
            pending: true,
            _ops: boxed,
            cells,
            links,
            tb: id,
            class: chain,
            regs_used,
            mode: tb.mode,
            plan_version: tb.plan_version,
            plan: baked,
        });
        if let Some(c) = blocks.code.get_mut(slot) {
            *c = index;
        }
        if let Some(code) = self.shared.find(&src) {
            let placed = self.publish(blocks, index, Ok(code));
            if placed == Ok(true) {
                self.adopted += 1;
            }
            return placed;
        }
        let src = if background {
            let job = Job {
                instance: blocks.instance,
                index,
                src,
            };
            match self.background().send(job) {
                None => return Ok(false),
                // No compiler thread: compile it here.
                Some(job) => job.src,
            }
        } else {
            src
        };
        self.ctx.clear();
        let code = compile_shared(&self.shared, &mut self.ctx, &mut self.fctx, src);
        self.publish(blocks, index, code)
    }

    /// The compiler thread, started if it was not.
    fn background(&mut self) -> &mut Worker {
        let shared = &self.shared;
        self.worker.get_or_insert_with(|| {
            Worker::spawn(Arc::clone(shared)).unwrap_or_else(|_| Worker::dead())
        })
    }

    /// Publishes what the compiler thread finished for `blocks` (results
    /// for other instances are dropped: their generation was cleared).
    /// Returns how many blocks got code.
    pub(crate) fn poll<Op: Copy>(&mut self, blocks: &mut JitBlocks<Op>) -> usize {
        let mut done = Vec::new();
        while let Some(finished) = self.worker.as_mut().and_then(Worker::try_recv) {
            done.push(finished);
        }
        self.publish_finished(blocks, done)
    }

    /// Stops the compiler thread once it has finished every block it was
    /// sent, and publishes them; a later hot block starts it again. Returns
    /// how many blocks got code.
    pub(crate) fn stop_worker<Op: Copy>(&mut self, blocks: &mut JitBlocks<Op>) -> usize {
        match self.worker.take() {
            Some(worker) => {
                let done = worker.stop();
                self.publish_finished(blocks, done)
            }
            None => 0,
        }
    }

    /// Publishes `done` (results for other instances are dropped: their
    /// generation was cleared). Returns how many blocks got code.
    fn publish_finished<Op: Copy>(&mut self, blocks: &mut JitBlocks<Op>, done: Vec<Done>) -> usize {
        let mut placed = Vec::new();
        for Done {
            instance,
            index,
            code,
            adopted,
        } in done
        {
            if instance == blocks.instance
                && let Some(p) = self.place(blocks, index, code)
            {
                placed.push((index, p, adopted));
            }
        }
        if placed.is_empty() {
            return 0;
        }
        // One change of protection for the batch.
        let finished = blocks.store.as_mut().map(CodeStore::finish);
        let mut published = 0;
        for (index, p, adopted) in placed {
            let ptr = match (&finished, &blocks.store) {
                (Some(Ok(())), Some(store)) => store.address(p).ok(),
                _ => None,
            };
            if Self::set_code(blocks, index, ptr) {
                published += 1;
                self.adopted += u64::from(adopted);
            }
        }
        published
    }

    /// Copies compiled block `index`'s code into `blocks`' store, making
    /// it the block's code; a failure leaves the block interpreted.
    fn publish<Op: Copy>(
        &mut self,
        blocks: &mut JitBlocks<Op>,
        index: u32,
        code: Result<Arc<MachineCode>, JitError>,
    ) -> Result<bool, JitError> {
        let ptr = self.place(blocks, index, code).and_then(|p| {
            let store = blocks.store.as_mut()?;
            store.finish().ok()?;
            store.address(p).ok()
        });
        Ok(Self::set_code(blocks, index, ptr))
    }

    /// Copies compiled block `index`'s code into `blocks`' store (made
    /// on first use), not yet executable; `None` if it failed.
    fn place<Op: Copy>(
        &mut self,
        blocks: &mut JitBlocks<Op>,
        index: u32,
        code: Result<Arc<MachineCode>, JitError>,
    ) -> Option<Placed> {
        let entry = blocks.compiled.get_mut(index as usize)?;
        entry.pending = false;
        let links = entry.links;
        let placed = code.and_then(|code| {
            if blocks.store.is_none() {
                let shared = &self.shared;
                blocks.store = Some(CodeStore::new(shared.isa.clone(), &shared.trampoline)?);
            }
            blocks
                .store
                .as_mut()
                .ok_or(JitError::Freed)?
                .place(&code, &links)
        });
        placed.ok()
    }

    /// Makes `ptr` block `index`'s code, or with `None` leaves the block
    /// to the interpreter for good. Returns whether it has code now.
    fn set_code<Op: Copy>(blocks: &mut JitBlocks<Op>, index: u32, ptr: Option<CodePtr>) -> bool {
        let Some(entry) = blocks.compiled.get_mut(index as usize) else {
            return false;
        };
        match ptr {
            Some(ptr) => {
                // Before the code is reachable: `run` checks the register
                // file against it.
                blocks.regs_used = blocks.regs_used.max(entry.regs_used);
                entry.code = Some(ptr);
                true
            }
            None => {
                let tb = entry.tb as usize;
                if let Some(c) = blocks.code.get_mut(tb) {
                    *c = NOT_COMPILED;
                }
                false
            }
        }
    }
}

/// Compiles `src` with `ctx` (cleared) and publishes the code in `shared`
/// for the other engines.
pub(crate) fn compile_shared(
    shared: &SharedCode,
    ctx: &mut Context,
    fctx: &mut FunctionBuilderContext,
    src: codegen::BlockSource,
) -> Result<Arc<MachineCode>, JitError> {
    codegen::build(&mut ctx.func, fctx, &*shared.isa, &src);
    let code = Arc::new(codegen::emit(ctx, &*shared.isa)?);
    shared.publish(src, &code);
    Ok(code)
}
