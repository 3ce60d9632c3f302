//! The JIT tier: blocks that run often are compiled to host code with
//! Cranelift.
//!
//! A frontend lowers each op into tcg-core's small IR ([`IrBuilder`],
//! through [`crate::Frontend::lower`]); an op it does not lower runs in the
//! interpreter, called from the compiled code, so any block compiles and
//! lowering grows one instruction at a time. Compiled code belongs to the
//! cache generation its block was translated in: a flush retires it with
//! the generation and its memory is freed only when the generation is
//! reclaimed, once every vCPU has passed a quiescent point.
//!
//! A block becomes hot after [`JitConfig::threshold`] interpreted runs and
//! is compiled on a background thread (`worker.rs`) while it goes on
//! running in the interpreter, or in line with `background` off.
//!
//! An instrumented block's code runs its plan: inline adds of a tally
//! block inline at each way out, other actions through helper calls before
//! the instruction and at its accesses. Such code belongs to the plan
//! version it was compiled under: after a re-instrumentation the block
//! runs interpreted until it is hot again, then compiles anew (at most
//! [`MAX_COMPILES`] times).

mod code;
mod codegen;
mod compiler;
mod ir;
mod runtime;
mod shared;
mod worker;

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

pub use ir::{BinOp, Cond, IrBuilder, UnOp, Value};

use crate::cache::{
    CompiledAction, CompiledMem, CompiledMemKind, CountTally, ExecMode, Generation, NONE, TbHeader,
};
use crate::engine::Engine;
use crate::frontend::Frontend;
use crate::memory::GuestMemory;
use code::{CodePtr, CodeStore};
use codegen::{Cell, CellOp, HookUse, Links, MemDirect, PlanCode, TallyCode};
pub(crate) use compiler::JitCompiler;
pub(crate) use runtime::CompiledEnd;
pub(crate) use shared::SharedCode;

/// Whether and when the engine compiles blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JitConfig {
    /// Compile hot blocks at all.
    pub enabled: bool,
    /// A block is compiled when it starts running for the
    /// `threshold + 1`-th time; 0 compiles every block on its first run.
    pub threshold: u32,
    /// Compile on a background thread while the block goes on running in
    /// the interpreter; off, the vCPU compiles a hot block itself before
    /// running it again (deterministic: what tests of the code use).
    pub background: bool,
}

impl JitConfig {
    /// The interpreter only.
    pub const OFF: JitConfig = JitConfig {
        enabled: false,
        threshold: 0,
        background: false,
    };
    /// Executions before a block is compiled, by default.
    pub const DEFAULT_THRESHOLD: u32 = 1000;

    /// Compiling blocks after `threshold` interpreted runs, in the
    /// background; a threshold of 0 compiles every block in line, before
    /// its first run.
    pub fn on(threshold: u32) -> Self {
        JitConfig {
            enabled: true,
            threshold,
            background: threshold > 0,
        }
    }
}

impl Default for JitConfig {
    fn default() -> Self {
        JitConfig::OFF
    }
}

/// Why the JIT could not be set up or could not compile a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JitError {
    /// The host is not one Cranelift generates code for.
    #[error("cranelift does not support this host: {0}")]
    UnsupportedHost(String),
    /// Code generation or making the code executable failed.
    #[error("compiling a block failed: {0}")]
    Module(String),
    /// The code store was already freed.
    #[error("the code store was freed")]
    Freed,
}

/// One compiled block: its code, the copy of its ops the code's
/// interpreter calls point into, and its chain cells.
struct Compiled<Op> {
    /// `None` while the background compiler has it (or if it failed).
    code: Option<CodePtr>,
    /// With the background compiler.
    pending: bool,
    /// Referenced by address from the code; boxed so it never moves.
    _ops: Box<[Op]>,
    /// The blocks this one jumps straight into (see `codegen::BlockSource::chains`),
    /// by code address, 0 for none; read by the code, by address.
    cells: Box<[AtomicUsize; 2]>,
    /// What the code takes from this generation: the addresses of the two
    /// fields above, of the jump table, and so on.
    links: Links,
    /// The block id it was compiled from.
    tb: u32,
    /// The blocks it jumps into straight; `None`: it always returns to
    /// the loop.
    class: Option<ChainClass>,
    /// Register slots its code uses.
    regs_used: u32,
    /// The mode and plan version it was compiled for: code with a plan
    /// compiled in runs only while its block is planned so.
    mode: ExecMode,
    plan_version: u32,
    /// What of the plan the code bakes in (see [`JitBlocks::renew`]).
    plan: Option<PlanCode>,
}

/// One entry of the indirect-jump table: a guest pc and the code of the
/// compiled block at it. `repr(C)`: compiled code reads both words.
#[repr(C)]
pub(crate) struct JumpSlot {
    pub(crate) pc: AtomicU64,
    pub(crate) code: AtomicUsize,
}

/// Entries of the indirect-jump table (a power of two).
pub(crate) const JUMP_SLOTS: usize = 1024;
/// No guest pc: RISC-V and most guests never run at an odd address, and
/// a miss only costs a lookup.
const EMPTY_PC: u64 = u64::MAX;

/// The compiled code of one cache generation and, per block id, how often
/// the block started in the interpreter.
pub(crate) struct JitBlocks<Op> {
    /// Unique among all `JitBlocks` ever made or cleared: a background
    /// result names the instance that asked for it.
    instance: u64,
    store: Option<CodeStore>,
    /// Indirect jumps (returns, calls through pointers): guest pc ->
    /// compiled block, direct mapped by pc, probed inline by compiled code
    /// and filled by the lookup helper; emptied with the chain cells.
    jumps: Box<[JumpSlot]>,
    /// The most register slots any block of the store uses.
    regs_used: u32,
    /// Block id -> interpreted starts (saturating at the threshold).
    hits: Vec<AtomicU32>,
    /// Block id -> index in `compiled`, or [`NONE`].
    code: Vec<u32>,
    /// Block id -> times compiled (see [`MAX_COMPILES`]).
    compiles: Vec<AtomicU8>,
    compiled: Vec<Compiled<Op>>,
}

impl<Op> Default for JitBlocks<Op> {
    fn default() -> Self {
        JitBlocks {
            instance: next_instance(),
            store: None,
            jumps: (0..JUMP_SLOTS)
                .map(|_| JumpSlot {
                    pc: AtomicU64::new(EMPTY_PC),
                    code: AtomicUsize::new(0),
                })
                .collect(),
            regs_used: 0,
            hits: Vec::new(),
            code: Vec::new(),
            compiles: Vec::new(),
            compiled: Vec::new(),
        }
    }
}

/// Most times one block is compiled in a generation: each plan change
/// (a plugin reset, say) makes an instrumented block's code stale, and
/// stale code is only freed with its generation.
pub const MAX_COMPILES: u8 = 8;

/// Marks a block that is not worth compiling (nothing lowered) or failed.
const NOT_COMPILED: u32 = NONE - 1;

fn next_instance() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What the vCPU loop does about a block it is about to interpret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Run it (compiled if it has code).
    Run,
    /// It just became hot: compile it.
    Compile,
    /// Hot and with the background compiler: see whether code came back.
    Waiting,
    /// Its code was compiled for another plan: forget it.
    Stale,
}

impl<Op: Copy> JitBlocks<Op> {
    /// Frees the code (the generation is being reclaimed or recycled).
    pub(crate) fn clear(&mut self) {
        self.instance = next_instance();
        self.forget_jumps();
        self.compiled.clear();
        self.store = None;
        self.regs_used = 0;
        self.hits.clear();
        self.code.clear();
        self.compiles.clear();
    }

    /// The compiled code of block `id`, if any.
    #[inline(always)]
    fn compiled(&self, id: u32) -> Option<&Compiled<Op>> {
        let i = *self.code.get(id as usize)?;
        self.compiled.get(i as usize).filter(|c| c.code.is_some())
    }

    /// Lets block `id`'s code, compiled under an older plan version, run
    /// under `plan_version` if the block's plan is now `plan` (of `mode`
    /// and chain class `class`) and the code was compiled from the same:
    /// it reads everything else of the plan (which callback a hook calls,
    /// say) when it runs. A plugin that re-registers alike after a reset
    /// then keeps its compiled code. Returns whether it did.
    pub(crate) fn renew(
        &mut self,
        id: u32,
        mode: ExecMode,
        class: Option<ChainClass>,
        plan: &Option<PlanCode>,
        plan_version: u32,
    ) -> bool {
        let Some(&i) = self.code.get(id as usize) else {
            return false;
        };
        match self.compiled.get_mut(i as usize) {
            Some(c)
                if c.code.is_some() && c.mode == mode && c.class == class && c.plan == *plan =>
            {
                c.plan_version = plan_version;
                true
            }
            _ => false,
        }
    }

    /// Makes block `id` run interpreted until it is hot again, then
    /// compile anew, unless it was compiled [`MAX_COMPILES`] times.
    pub(crate) fn forget(&mut self, id: u32) {
        let slot = id as usize;
        let compiles = self.compiles.get(slot).map_or(u8::MAX, |c| {
            let n = c.load(Ordering::Relaxed);
            c.store(n.saturating_add(1), Ordering::Relaxed);
            n
        });
        if let (Some(code), Some(hits)) = (self.code.get_mut(slot), self.hits.get(slot)) {
            if compiles + 1 >= MAX_COMPILES {
                *code = NOT_COMPILED;
            } else {
                *code = NONE;
                hits.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Makes the per-block slots cover block `id`.
    pub(crate) fn ensure(&mut self, id: u32) {
        let n = id as usize + 1;
        if self.hits.len() < n {
            self.hits.resize_with(n, || AtomicU32::new(0));
            self.code.resize(n, NONE);
            self.compiles.resize_with(n, || AtomicU8::new(0));
        }
    }

    /// The jump table's address, for compiled code.
    fn jumps_addr(&self) -> usize {
        self.jumps.as_ptr() as usize
    }

    /// The block id whose empty chain cell `unlinked` (from a
    /// [`CompiledEnd`]) names.
    pub(crate) fn unlinked_from(&self, unlinked: u64) -> Option<u32> {
        let i = unlinked.checked_sub(1)? >> 1;
        self.compiled.get(usize::try_from(i).ok()?).map(|c| c.tb)
    }

    /// Fills the empty chain cell `unlinked` names with `to`, a block's
    /// code (see [`code_of`]): the source block then jumps straight into
    /// it. The caller checks that the source may jump into it (alive, of
    /// a class it may link to, same flags).
    pub(crate) fn link(&self, unlinked: u64, to: usize) {
        let Some(n) = unlinked.checked_sub(1) else {
            return;
        };
        let (i, cell) = ((n >> 1) as usize, (n & 1) as usize);
        if let Some(cell) = self.compiled.get(i).and_then(|c| c.cells.get(cell)) {
            cell.store(to, Ordering::Release);
        }
    }

    /// Empties every chain cell (blocks were invalidated or must be
    /// planned again): every block returns to the vCPU loop once more.
    pub(crate) fn unlink_all(&self) {
        for c in &self.compiled {
            for cell in c.cells.iter() {
                cell.store(0, Ordering::Release);
            }
        }
        self.forget_jumps();
    }

    fn forget_jumps(&self) {
        for slot in self.jumps.iter() {
            slot.pc.store(EMPTY_PC, Ordering::Relaxed);
            slot.code.store(0, Ordering::Relaxed);
        }
    }

    /// The indirect-jump table's slot for `pc`.
    pub(crate) fn jump_slot(&self, pc: u64) -> Option<&JumpSlot> {
        self.jumps.get(((pc >> 1) as usize) & (JUMP_SLOTS - 1))
    }

    /// Size in bytes of the code.
    pub(crate) fn code_bytes(&self) -> usize {
        self.store.as_ref().map_or(0, |s| s.code_bytes)
    }
}

/// Which blocks compiled code may jump between without the vCPU loop:
/// plain and planned ones among themselves, and inline-counter blocks
/// among themselves while every such block of the plan adds the same
/// count (the loop then adds a whole run's instructions at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ChainClass {
    Plain = 1,
    SharedCount = 2,
    /// Blocks with their plan compiled in: they and plain blocks go on
    /// into each other (neither needs anything of the loop).
    Planned = 3,
}

impl ChainClass {
    /// Whether code of this class may jump straight into code of `to`:
    /// shared-count blocks only among themselves (the loop counts their
    /// instructions per run), all others among themselves.
    pub(crate) fn may_link(self, to: ChainClass) -> bool {
        (self == ChainClass::SharedCount) == (to == ChainClass::SharedCount)
    }

    fn from_bits(bits: u64) -> Option<ChainClass> {
        [
            ChainClass::Plain,
            ChainClass::SharedCount,
            ChainClass::Planned,
        ]
        .into_iter()
        .find(|c| *c as u64 == bits)
    }
}

/// The chain class of `tb` under its generation's current plan, if any.
pub(crate) fn chain_class<Op>(generation: &Generation<Op>, tb: &TbHeader) -> Option<ChainClass> {
    match tb.mode {
        ExecMode::Plain => Some(ChainClass::Plain),
        ExecMode::Count if matches!(generation.count_tally, CountTally::Shared { .. }) => {
            Some(ChainClass::SharedCount)
        }
        ExecMode::Count => None,
        _ => Some(ChainClass::Planned),
    }
}

/// Whether code of chain class `from` (as `ChainClass as u64`, 0 for
/// none) may jump straight into block `tb` of `generation`.
pub(crate) fn may_link_bits<Op>(generation: &Generation<Op>, from: u64, tb: &TbHeader) -> bool {
    match (ChainClass::from_bits(from), chain_class(generation, tb)) {
        (Some(from), Some(to)) => from.may_link(to),
        _ => false,
    }
}

/// Block `id`'s compiled code, if it has some it may run now: compiled for
/// the chain class, mode and (with a plan compiled in) plan version it has
/// now.
#[inline(always)]
fn usable<Op: Copy>(generation: &Generation<Op>, id: u32) -> Option<(&Compiled<Op>, CodePtr)> {
    let c = generation.jit.compiled(id)?;
    let code = c.code?;
    let tb = generation.tbs.get(id as usize)?;
    if tb.mode != c.mode
        || (c.mode.instrumented() && tb.plan_version != c.plan_version)
        || c.class
            .is_some_and(|class| chain_class(generation, tb) != Some(class))
    {
        return None;
    }
    Some((c, code))
}

/// Block `id`'s code, if it may run now (see `usable`).
pub(crate) fn code_of<Op: Copy>(generation: &Generation<Op>, id: u32) -> Option<usize> {
    usable(generation, id).map(|(_, code)| code.addr())
}

/// Counts a start of block `id` in the interpreter, and says whether it
/// should now be compiled.
#[inline(always)]
pub(crate) fn start<Op: Copy>(generation: &Generation<Op>, id: u32, threshold: u32) -> Start {
    let blocks = &generation.jit;
    let Some(h) = blocks.hits.get(id as usize) else {
        // Translated while the JIT was off.
        return Start::Run;
    };
    if generation
        .tbs
        .get(id as usize)
        .is_none_or(|tb| !tb.mode.compiles())
    {
        return Start::Run;
    }
    let n = h.load(Ordering::Relaxed);
    if n < threshold {
        h.store(n + 1, Ordering::Relaxed);
        return Start::Run;
    }
    match blocks.code.get(id as usize) {
        Some(&NONE) => Start::Compile,
        Some(&i) => match blocks.compiled.get(i as usize) {
            Some(c) if c.code.is_none() => {
                if c.pending {
                    Start::Waiting
                } else {
                    Start::Run
                }
            }
            Some(_) if usable(generation, id).is_none() => Start::Stale,
            _ => Start::Run,
        },
        None => Start::Run,
    }
}

/// What block `tb` of `generation` runs of its plan, for its code; `None`
/// for a plain block or one whose inline counter the loop applies.
pub(crate) fn plan_code<F: Frontend>(
    generation: &Generation<F::Op>,
    tb: &TbHeader,
) -> Option<PlanCode> {
    let start = tb.instr_start as usize;
    let len = tb.instr_len as usize;
    let insns = tb.ops_end.saturating_sub(tb.ops_start) as usize;
    match tb.mode {
        ExecMode::Plain | ExecMode::Count => None,
        ExecMode::Tally => {
            let mut plan = PlanCode::default();
            for t in generation.tallies.get(start..start + len)? {
                let board = generation.boards.get(t.board as usize)?;
                let (cells, slots, rows) = board.layout();
                if t.slot as usize >= slots {
                    continue;
                }
                let from = t.sums_start as usize;
                plan.tallies.push(TallyCode {
                    cell: Cell {
                        board: std::sync::Arc::as_ptr(board) as usize,
                        cells,
                        slots: slots as u64,
                        rows: rows as u64,
                        slot: u64::from(t.slot),
                    },
                    prefix: generation.tally_sums.get(from..from + insns)?.to_vec(),
                });
            }
            Some(plan)
        }
        _ => {
            let hooks = generation.hooks.get(start..start + len)?;
            let actions_of = |h: &crate::cache::InsnHook| generation.actions_of(h);
            // A hook of inline operations only runs them inline.
            let inline_of = |h: &crate::cache::InsnHook| -> Option<Vec<CellOp>> {
                if h.sole_call != NONE {
                    return None;
                }
                let mut ops = Vec::new();
                for action in actions_of(h) {
                    let CompiledAction::Inline { board, slot, kind } = *action else {
                        return None;
                    };
                    // An operation past the board's row does nothing.
                    let Some(board) = generation.boards.get(board as usize) else {
                        continue;
                    };
                    let (cells, slots, rows) = board.layout();
                    if slot as usize >= slots {
                        continue;
                    }
                    let cell = Cell {
                        board: std::sync::Arc::as_ptr(board) as usize,
                        cells,
                        slots: slots as u64,
                        rows: rows as u64,
                        slot: u64::from(slot),
                    };
                    ops.push(CellOp { cell, kind });
                }
                Some(ops)
            };
            let use_of = |h: &crate::cache::InsnHook| {
                let actions = actions_of(h);
                let exec_direct = match actions {
                    [CompiledAction::Call { cb }] => generation
                        .callbacks
                        .get(*cb as usize)
                        .and_then(|cb| Engine::<F>::inlined(&**cb))
                        .map(|l| (l.direct.entry, l.direct.data)),
                    _ => None,
                };
                let mem_direct = match generation.mem_actions_of(h) {
                    [
                        CompiledMem {
                            filter,
                            kind: CompiledMemKind::Call { cb },
                        },
                    ] => generation
                        .mem_callbacks
                        .get(*cb as usize)
                        .and_then(|cb| Engine::<F>::inlined_mem(&**cb))
                        .map(|l| MemDirect {
                            entry: l.direct.entry,
                            data: l.direct.data,
                            loads: filter.matches(false),
                            stores: filter.matches(true),
                        }),
                    _ => None,
                };
                HookUse {
                    exec: (h.actions_len != 0 || h.sole_call != NONE) && inline_of(h).is_none(),
                    exec_calls: h.sole_call != NONE
                        || actions
                            .iter()
                            .any(|a| !matches!(a, CompiledAction::Inline { .. })),
                    exec_regs: actions.iter().any(|a| match *a {
                        CompiledAction::Call { cb } | CompiledAction::Conditional { cb, .. } => {
                            generation
                                .callbacks
                                .get(cb as usize)
                                .is_none_or(|cb| cb.reads_registers())
                        }
                        CompiledAction::Inline { .. } => false,
                    }),
                    mem: h.mem_len != 0,
                    mem_calls: h.mem_calls,
                    exec_direct,
                    mem_direct,
                }
            };
            let (entry, insn_hooks) = hooks.split_first()?;
            Some(PlanCode {
                hooks: tb.instr_start,
                entry: HookUse {
                    mem: false,
                    mem_calls: false,
                    mem_direct: None,
                    ..use_of(entry)
                },
                insns: insn_hooks.iter().map(use_of).collect(),
                inline: hooks
                    .iter()
                    .map(|h| inline_of(h).unwrap_or_default())
                    .collect(),
                tallies: Vec::new(),
            })
        }
    }
}

/// Runs block `id` of `generation` as compiled code (with the blocks it
/// jumps into) on vCPU `vcpu`, or returns `None` if it has no code it may
/// run now (or cannot run it on this register file).
#[inline(always)]
pub(crate) fn run<F: Frontend>(
    generation: &Generation<F::Op>,
    id: u32,
    vcpu: u32,
    cpu: &mut F::Cpu,
    mem: &mut GuestMemory,
) -> Option<CompiledEnd> {
    let (_, code) = usable(generation, id)?;
    let blocks = &generation.jit;
    let store = blocks.store.as_ref()?;
    runtime::run::<F>(generation, store, &code, blocks.regs_used, vcpu, cpu, mem)
}

/// The host function compiled code calls an inlined instruction callback
/// of type `C` through (see `engine::inlined::DirectCall`).
pub(crate) fn direct_insn_entry<F: Frontend, C>() -> usize
where
    C: crate::instrument::CallbackFn,
{
    let f: extern "C" fn(*mut runtime::JitCtx, usize, u64) = runtime::direct_insn::<F, C>;
    f as usize
}

/// As [`direct_insn_entry`], for an inlined memory callback.
pub(crate) fn direct_mem_entry<C>() -> usize
where
    C: Fn(&mut crate::instrument::CallbackContext<'_>, &crate::instrument::MemAccessInfo),
{
    let f: extern "C" fn(*mut runtime::JitCtx, usize, u64, u64, u64, u64) =
        runtime::direct_mem::<C>;
    f as usize
}
