//! What compiled code runs against: the context it is passed, the host
//! helpers it calls (memory accesses, the interpreter for ops not
//! lowered) and the call into it. The JIT's `unsafe` lives here and in
//! `code.rs` (freeing code memory) only.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::mem::offset_of;

use std::sync::atomic::Ordering;

use crate::cache::Generation;
use crate::engine::jit_hooks;
use crate::frontend::{CpuExit, Flow, Frontend, sign_extend};
use crate::instrument::{
    CallbackContext, CallbackFn, InlineKind, MemAccessInfo, Requests, Scoreboard,
};
use crate::memory::GuestMemory;

/// What a compiled block is passed (one pointer). The generated code reads
/// and writes the fields whose offsets are the `OFF_*` constants.
#[repr(C)]
pub(crate) struct JitCtx {
    /// The frontend's register file ([`Frontend::jit_registers`]);
    /// re-derived after every interpreter call, which borrows the whole
    /// register file anew.
    regs: *mut u64,
    /// Non-zero once a helper asked the block to leave (`exit` says why).
    status: u64,
    /// Instructions executed by the run, stored on the way back.
    executed: u64,
    /// With `exit`: the exiting instruction's length.
    exit_len: u64,
    /// The chaining budget left, stored on the way back: the run took
    /// `CHAIN_BUDGET - budget` chained jumps.
    budget: u64,
    /// Set on a return through an exit whose chain cell was empty: which
    /// block and exit (`JitBlocks::link` decodes it), plus one; else 0.
    unlinked: u64,
    /// The data TLBs' tables (`GuestMemory::jit_tlb`), for inline
    /// accesses.
    tlb_read: usize,
    tlb_write: usize,
    mem: *mut GuestMemory,
    cpu: *mut c_void,
    /// The `Generation<F::Op>` the blocks belong to, for the lookup helper.
    generation: *const c_void,
    /// The executing vCPU's index: the row of scoreboards it adds to.
    vcpu: u64,
    /// Non-zero once a callback of the current instruction asked for the
    /// block to be left when the instruction is complete (see
    /// `engine::jit_hooks::run_hook`); the code clears it then.
    leave: u64,
    /// A load stub's result (stubs return nothing, see `Helpers::load_stub`).
    result: u64,
    /// What callbacks requested.
    requests: Requests,
    exit: Option<CpuExit>,
}

pub(crate) const OFF_REGS: i32 = offset_of!(JitCtx, regs) as i32;
pub(crate) const OFF_STATUS: i32 = offset_of!(JitCtx, status) as i32;
pub(crate) const OFF_EXECUTED: i32 = offset_of!(JitCtx, executed) as i32;
pub(crate) const OFF_EXIT_LEN: i32 = offset_of!(JitCtx, exit_len) as i32;
pub(crate) const OFF_BUDGET: i32 = offset_of!(JitCtx, budget) as i32;
pub(crate) const OFF_UNLINKED: i32 = offset_of!(JitCtx, unlinked) as i32;
pub(crate) const OFF_TLB_READ: i32 = offset_of!(JitCtx, tlb_read) as i32;
pub(crate) const OFF_TLB_WRITE: i32 = offset_of!(JitCtx, tlb_write) as i32;
pub(crate) const OFF_VCPU: i32 = offset_of!(JitCtx, vcpu) as i32;
pub(crate) const OFF_LEAVE: i32 = offset_of!(JitCtx, leave) as i32;
pub(crate) const OFF_RESULT: i32 = offset_of!(JitCtx, result) as i32;

/// Host addresses of the helpers one frontend's compiled code calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Helpers {
    /// `fn(ctx, addr) -> u64` per size index (1, 2, 4, 8 bytes) and
    /// signedness.
    pub load: [[usize; 2]; 4],
    /// `fn(ctx, addr, value)` per size index.
    pub store: [usize; 4],
    /// The same, through stubs of Cranelift's `preserve_all` convention
    /// (0 until made, see `JitCompiler::new`): a block whose only calls
    /// are these slow paths keeps its values in the registers calls
    /// clobber, with no callee-saved registers to save and restore on
    /// every entry. A load stub leaves its value in `JitCtx::result`.
    pub load_stub: [[usize; 2]; 4],
    pub store_stub: [usize; 4],
    /// `fn(ctx, op, pc, len) -> next pc`.
    pub interpret: usize,
    /// `fn(ctx, pc, flags) -> code of the compiled block at pc, or 0`.
    pub lookup: usize,
    /// `fn(ctx, hook, pc)`: runs a hook's actions (instrumented blocks).
    pub run_hook: usize,
    /// `fn(ctx, hook, pc, addr, value, kind)`: runs a hook's memory
    /// actions for one access; `kind` is the size, bit 8 sign-extended,
    /// bit 9 a store.
    pub mem_hook: usize,
    /// `fn(ctx, op, pc, len, hook) -> next pc`: `interpret` with the
    /// accesses running the hook's memory actions.
    pub interpret_watched: usize,
    /// `fn(board, vcpu, slot, op, imm)`: an inline operation on a
    /// scoreboard row past the board's first segment (`op` 0 adds, 1
    /// stores), which grows the board if the row is not there yet.
    pub far_cell: usize,
}

/// `op` of a `far_cell` call.
pub(crate) const CELL_ADD: u64 = 0;
pub(crate) const CELL_STORE: u64 = 1;

/// `kind` bits of a `mem_hook` call.
pub(crate) const MEM_SIGNED: u64 = 1 << 8;
pub(crate) const MEM_STORE: u64 = 1 << 9;

type LoadFn = extern "C" fn(*mut JitCtx, u64) -> u64;
type StoreFn = extern "C" fn(*mut JitCtx, u64, u64);
type InterpretFn<Op> = extern "C" fn(*mut JitCtx, *const Op, u64, u64) -> u64;
type LookupFn = extern "C" fn(*mut JitCtx, u64, u64) -> usize;
type RunHookFn = extern "C" fn(*mut JitCtx, u64, u64);
type MemHookFn = extern "C" fn(*mut JitCtx, u64, u64, u64, u64, u64);
type InterpretWatchedFn<Op> = extern "C" fn(*mut JitCtx, *const Op, u64, u64, u64) -> u64;
type FarCellFn = extern "C" fn(*const Scoreboard, u64, u64, u64, u64);

impl Helpers {
    pub(crate) fn for_frontend<F: Frontend>() -> Self {
        let l = |f: LoadFn| f as usize;
        let s = |f: StoreFn| f as usize;
        let interpret: InterpretFn<F::Op> = interpret::<F>;
        let lookup: LookupFn = lookup::<F::Op>;
        let run_hook: RunHookFn = run_hook::<F>;
        let mem_hook: MemHookFn = mem_hook::<F::Op>;
        let interpret_watched: InterpretWatchedFn<F::Op> = interpret_watched::<F>;
        Helpers {
            load: [
                [l(load::<1, false>), l(load::<1, true>)],
                [l(load::<2, false>), l(load::<2, true>)],
                [l(load::<4, false>), l(load::<4, true>)],
                [l(load::<8, false>), l(load::<8, true>)],
            ],
            store: [s(store::<1>), s(store::<2>), s(store::<4>), s(store::<8>)],
            load_stub: [[0; 2]; 4],
            store_stub: [0; 4],
            interpret: interpret as usize,
            lookup: lookup as usize,
            run_hook: run_hook as usize,
            mem_hook: mem_hook as usize,
            interpret_watched: interpret_watched as usize,
            far_cell: far_cell as FarCellFn as usize,
        }
    }
}

/// Index into [`Helpers`]' tables for an access of `size` bytes.
pub(crate) fn size_index(size: u8) -> usize {
    match size {
        1 => 0,
        2 => 1,
        4 => 2,
        _ => 3,
    }
}

// SAFETY (all three helpers): only compiled code calls them, with the
// `JitCtx` that `run` built from exclusive borrows of the register file and
// guest memory; nothing else touches either while the block runs, and
// `JitCtx::mem` is only dereferenced here, one helper at a time.
extern "C" fn load<const SIZE: u8, const SIGNED: bool>(ctx: *mut JitCtx, addr: u64) -> u64 {
    // SAFETY: see above.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: see above.
    let mem = unsafe { &mut *ctx.mem };
    match mem.load(addr, SIZE) {
        Ok(v) if SIGNED => sign_extend(v, SIZE),
        Ok(v) => v,
        Err(fault) => {
            ctx.exit = Some(CpuExit::Fault(fault));
            ctx.status = 1;
            0
        }
    }
}

extern "C" fn store<const SIZE: u8>(ctx: *mut JitCtx, addr: u64, value: u64) {
    // SAFETY: see above.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: see above.
    let mem = unsafe { &mut *ctx.mem };
    if let Err(fault) = mem.store(addr, SIZE, value) {
        ctx.exit = Some(CpuExit::Fault(fault));
        ctx.status = 1;
    }
}

/// An inline operation of compiled code on `vcpu`'s row past the first
/// segment of `board` (see `Scoreboard::layout`): rare, a vCPU started
/// after the board was made.
extern "C" fn far_cell(board: *const Scoreboard, vcpu: u64, slot: u64, op: u64, imm: u64) {
    // SAFETY: `board` is the address of a board in the `boards` of the
    // generation the calling code belongs to (`jit::plan_code`), which
    // holds an `Arc` of it and frees the code, at a quiescent point,
    // before the board; the board is only read through shared references.
    let board = unsafe { &*board };
    let kind = if op == CELL_STORE {
        InlineKind::Store(imm)
    } else {
        InlineKind::Add(imm)
    };
    if let (Ok(vcpu), Ok(slot)) = (u32::try_from(vcpu), usize::try_from(slot)) {
        board.apply(vcpu, slot, kind);
    }
}

extern "C" fn interpret<F: Frontend>(ctx: *mut JitCtx, op: *const F::Op, pc: u64, len: u64) -> u64 {
    // SAFETY: see above; `ctx.cpu` is the `F::Cpu` `run::<F>` was given
    // (the helper table is per frontend), and `op` points into the
    // compiled block's own copy of its ops, which lives as long as the code.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: as above.
    let cpu = unsafe { &mut *ctx.cpu.cast::<F::Cpu>() };
    // SAFETY: as above.
    let mem = unsafe { &mut *ctx.mem };
    // SAFETY: as above.
    let op = unsafe { &*op };
    let flow = F::execute(cpu, op, pc, mem);
    ctx.regs = F::jit_registers(cpu).as_mut_ptr();
    flow_to_pc(ctx, flow, pc, len)
}

/// Ends an interpreted op's flow for compiled code: the next pc, or the
/// exit recorded in the context.
fn flow_to_pc(ctx: &mut JitCtx, flow: Flow, pc: u64, len: u64) -> u64 {
    match flow {
        Flow::Next => pc.wrapping_add(len),
        Flow::Jump(target) => target,
        Flow::Exit(exit) => {
            ctx.exit = Some(exit);
            ctx.status = 1;
            pc
        }
    }
}

// SAFETY (the three hook helpers): as for the helpers above; compiled
// code calls them only from blocks compiled for the plan version the
// block is planned under now (`jit::usable`), so the hook indices name
// that plan's hooks, whose callbacks and scoreboards the generation holds.
extern "C" fn run_hook<F: Frontend>(ctx: *mut JitCtx, hook: u64, pc: u64) {
    // SAFETY: see above.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: see above.
    let generation = unsafe { &*ctx.generation.cast::<Generation<F::Op>>() };
    // SAFETY: see above.
    let cpu = unsafe { &mut *ctx.cpu.cast::<F::Cpu>() };
    // SAFETY: see above.
    let mem = unsafe { &mut *ctx.mem };
    let leave = jit_hooks::run_hook::<F>(
        generation,
        hook as u32,
        ctx.vcpu as u32,
        pc,
        cpu,
        mem,
        &mut ctx.requests,
    );
    ctx.leave |= u64::from(leave);
    ctx.regs = F::jit_registers(cpu).as_mut_ptr();
}

extern "C" fn mem_hook<Op: Copy>(
    ctx: *mut JitCtx,
    hook: u64,
    pc: u64,
    addr: u64,
    value: u64,
    kind: u64,
) {
    // SAFETY: see above.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: see above.
    let generation = unsafe { &*ctx.generation.cast::<Generation<Op>>() };
    // SAFETY: see above.
    let mem = unsafe { &mut *ctx.mem };
    let info = access_info(addr, value, kind);
    let leave = jit_hooks::run_mem_hook(
        generation,
        hook as u32,
        ctx.vcpu as u32,
        pc,
        mem,
        &info,
        &mut ctx.requests,
    );
    ctx.leave |= u64::from(leave);
}

extern "C" fn interpret_watched<F: Frontend>(
    ctx: *mut JitCtx,
    op: *const F::Op,
    pc: u64,
    len: u64,
    hook: u64,
) -> u64 {
    // SAFETY: as for `interpret`.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: as for `interpret`.
    let generation = unsafe { &*ctx.generation.cast::<Generation<F::Op>>() };
    // SAFETY: as for `interpret`.
    let cpu = unsafe { &mut *ctx.cpu.cast::<F::Cpu>() };
    // SAFETY: as for `interpret`.
    let mem = unsafe { &mut *ctx.mem };
    // SAFETY: as for `interpret`.
    let op = unsafe { &*op };
    let (flow, leave) = jit_hooks::execute_watched::<F>(
        generation,
        hook as u32,
        ctx.vcpu as u32,
        op,
        pc,
        cpu,
        mem,
        &mut ctx.requests,
    );
    ctx.leave |= u64::from(leave);
    ctx.regs = F::jit_registers(cpu).as_mut_ptr();
    flow_to_pc(ctx, flow, pc, len)
}

/// Compiled code's call of an inlined instruction callback: `data` is
/// the closure (see `engine::inlined::DirectCall`).
pub(crate) extern "C" fn direct_insn<F: Frontend, C>(ctx: *mut JitCtx, data: usize, pc: u64)
where
    C: CallbackFn,
{
    // SAFETY: as for the hook helpers; `data` is the address of the `C`
    // an `InlinedCallback<F, C>` holds, named by the plan the code was
    // compiled for, hence alive while the code may run.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: see above.
    let callback = unsafe { &*(data as *const C) };
    // SAFETY: see above.
    let cpu = unsafe { &mut *ctx.cpu.cast::<F::Cpu>() };
    // SAFETY: see above.
    let mem = unsafe { &mut *ctx.mem };
    let vcpu = ctx.vcpu as u32;
    let leave = jit_hooks::call_direct::<F, C>(callback, vcpu, pc, cpu, mem, &mut ctx.requests);
    ctx.leave |= u64::from(leave);
    ctx.regs = F::jit_registers(cpu).as_mut_ptr();
}

/// Compiled code's call of an inlined memory callback (as
/// `direct_insn`), with the access as `mem_hook` passes it.
pub(crate) extern "C" fn direct_mem<C>(
    ctx: *mut JitCtx,
    data: usize,
    pc: u64,
    addr: u64,
    value: u64,
    kind: u64,
) where
    C: Fn(&mut CallbackContext<'_>, &MemAccessInfo),
{
    // SAFETY: as in `direct_insn`.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: as in `direct_insn`.
    let callback = unsafe { &*(data as *const C) };
    // SAFETY: as in `direct_insn`.
    let mem = unsafe { &mut *ctx.mem };
    let info = access_info(addr, value, kind);
    let vcpu = ctx.vcpu as u32;
    let leave = jit_hooks::call_mem_direct(callback, vcpu, pc, mem, &info, &mut ctx.requests);
    ctx.leave |= u64::from(leave);
}

/// The access a `mem_hook` call describes.
fn access_info(addr: u64, value: u64, kind: u64) -> MemAccessInfo {
    let size = kind as u8;
    let is_store = kind & MEM_STORE != 0;
    MemAccessInfo {
        addr,
        size,
        sign_extended: kind & MEM_SIGNED != 0,
        is_store,
        value: if is_store && size < 8 {
            value & ((1u64 << (u32::from(size) * 8)) - 1)
        } else {
            value
        },
    }
}

/// An indirect jump's target: the compiled block at `pc` (translated
/// under the low 32 bits of `key`) if it may be jumped into straight from
/// compiled code (alive, planned under the current version, of the chain
/// class in `key`'s bits 32 and up, see `ChainClass`), recorded in the
/// jump table; 0 sends the jump back to the vCPU loop.
extern "C" fn lookup<Op: Copy>(ctx: *mut JitCtx, pc: u64, key: u64) -> usize {
    // SAFETY: as for the other helpers; `ctx.generation` is the
    // `Generation<Op>` `run` was given (the helper table is per frontend,
    // hence per `Op`), borrowed for the whole run.
    let ctx = unsafe { &*ctx };
    // SAFETY: as above.
    let generation = unsafe { &*ctx.generation.cast::<Generation<Op>>() };
    let Some(id) = generation.lookup(pc, key as u32) else {
        return 0;
    };
    let Some(tb) = generation.tbs.get(id as usize) else {
        return 0;
    };
    if tb.dead
        || !super::may_link_bits(generation, key >> 32, tb)
        || tb.plan_version != generation.plan_version
    {
        return 0;
    }
    let Some(code) = super::code_of(generation, id) else {
        return 0;
    };
    if let Some(slot) = generation.jit.jump_slot(pc) {
        // Code first: a reader that sees the pc sees its code.
        slot.code.store(code, Ordering::Release);
        slot.pc.store(pc, Ordering::Release);
    }
    code
}

/// Chained jumps compiled code may take per call before it returns to
/// the vCPU loop (which then looks at exit and flush requests).
pub(crate) const CHAIN_BUDGET: u64 = 4096;

/// How a run of compiled blocks ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompiledEnd {
    /// Where execution continues; for an exit, the exiting instruction.
    pub pc: u64,
    /// Instructions executed by all blocks of the run.
    pub executed: u64,
    /// Blocks run.
    pub blocks: u64,
    /// With `exit`: the exiting instruction's length.
    pub len: u8,
    pub exit: Option<CpuExit>,
    /// The empty chain cell the run left through (see `JitCtx::unlinked`).
    pub unlinked: u64,
    /// What callbacks of instrumented blocks requested.
    pub requests: Requests,
}

/// Runs the compiled block at `code` (and those it chains to) on `cpu`
/// and `mem`, or returns `None` without running it if the frontend's
/// register file is smaller than the JIT's blocks use (`regs_used`
/// slots, the most any block of the store uses).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<F: Frontend>(
    generation: &Generation<F::Op>,
    store: &super::code::CodeStore,
    code: &super::code::CodePtr,
    regs_used: u32,
    vcpu: u32,
    cpu: &mut F::Cpu,
    mem: &mut GuestMemory,
) -> Option<CompiledEnd> {
    let cpu_ptr: *mut F::Cpu = cpu;
    // SAFETY: `cpu_ptr` comes from the exclusive borrow `cpu`, unused
    // while the block runs.
    let regs = F::jit_registers(unsafe { &mut *cpu_ptr });
    if regs.len() < regs_used as usize {
        return None;
    }
    let tlb = mem.jit_tlb();
    let mut ctx = JitCtx {
        regs: regs.as_mut_ptr(),
        status: 0,
        executed: 0,
        exit_len: 0,
        budget: CHAIN_BUDGET,
        unlinked: 0,
        tlb_read: tlb.read,
        tlb_write: tlb.write,
        mem,
        cpu: cpu_ptr.cast(),
        generation: std::ptr::from_ref(generation).cast(),
        vcpu: u64::from(vcpu),
        leave: 0,
        result: 0,
        requests: Requests::default(),
        exit: None,
    };
    // SAFETY: `code` is a finished block of `store` (code.rs), alive
    // while the store is (the caller holds a borrow of it). The generated
    // code, and the blocks it chains to (all of the same store, all using
    // at most `regs_used` slots), access register slots below `regs_used`,
    // checked above, and the context's fields at their offsets. Its
    // inline accesses follow TLB entries to page bytes that live while the
    // entries do; only the helpers, through `ctx.mem`, change entries, and
    // the generated code re-reads an entry at every access. Code with a
    // plan compiled in runs only under that plan (`jit::usable`, and chain
    // links made only between usable blocks, emptied when plans change):
    // the scoreboard cells it adds to belong to boards the plan, hence
    // the generation, holds, and it adds only to rows that exist.
    let pc = unsafe { store.enter(code, &mut ctx) };
    Some(CompiledEnd {
        pc,
        executed: ctx.executed,
        blocks: CHAIN_BUDGET.saturating_sub(ctx.budget) + 1,
        len: ctx.exit_len as u8,
        exit: ctx.exit,
        unlinked: ctx.unlinked,
        requests: ctx.requests,
    })
}
