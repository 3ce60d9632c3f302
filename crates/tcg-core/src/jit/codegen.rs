//! Lowers one block's IR ([`super::ir`]) into a Cranelift function
//! `extern "C" fn(*mut JitCtx) -> u64`.
//!
//! Guest registers live in Cranelift variables for the whole block: a slot
//! is loaded from the register file on its first read and stored back only
//! where the block can be left (its end, a fault) or the interpreter runs
//! (which reads and writes the register file itself). The code is one
//! straight line; every way out is a side exit.

use cranelift_codegen::Context;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{
    self, AbiParam, InstBuilder, MemFlagsData, Signature, condcodes::IntCC, types::I8, types::I32,
    types::I64,
};
use cranelift_codegen::isa::{CallConv, TargetIsa};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};

use super::JitError;
use super::ir::{BinOp, Cond, Inst, IrBuilder, UnOp, Value};
use super::runtime::{
    CHAIN_BUDGET, Helpers, OFF_BUDGET, OFF_EXECUTED, OFF_EXIT_LEN, OFF_REGS, OFF_RESULT,
    OFF_STATUS, OFF_UNLINKED, OFF_VCPU,
};

mod link;
mod memory;
mod plan;
use link::Link;
pub(crate) use link::{LinkSite, Links};
pub(crate) use plan::{Cell, CellOp, HookUse, MemDirect, PlanCode, TallyCode};

/// One function's machine code, not yet in executable memory (see
/// `code.rs`): made on whichever thread compiles, copied in by the
/// vCPU loop's thread.
pub(crate) struct MachineCode {
    pub bytes: Vec<u8>,
    /// The alignment the code needs.
    pub align: u64,
    /// Where the placing engine's values go (see `link.rs`).
    pub links: Vec<LinkSite>,
}

/// Compiles the function built in `ctx` (and clears `ctx`). Everything
/// the code calls or reads is an absolute address in an immediate, the
/// placing engine's values ([`Links`]) filled in when it is placed.
pub(crate) fn emit(ctx: &mut Context, isa: &dyn TargetIsa) -> Result<MachineCode, JitError> {
    let code = ctx
        .compile(isa, &mut ControlPlane::default())
        .map_err(|e| JitError::Module(e.inner.to_string()))?;
    let bytes = code.code_buffer().to_vec();
    let align = u64::from(code.buffer.alignment);
    let relocs = code.buffer.relocs().to_vec();
    let links = link::sites(&ctx.func, &relocs)?;
    ctx.clear();
    Ok(MachineCode {
        bytes,
        align,
        links,
    })
}

/// What the generated code is made from: the block's IR and the host
/// things it calls, all but the values of its engine ([`Links`]). Owned,
/// so that it can be sent to the background compiler; compared whole, so
/// that two engines compiling equal sources may share the code.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct BlockSource {
    pub ir: IrBuilder,
    /// The block's guest pc.
    pub pc: u64,
    /// The size of one op in the block's copy of its ops
    /// ([`Links::ops`]).
    pub op_size: usize,
    pub helpers: Helpers,
    /// The pc after the block's last instruction.
    pub fallthrough: u64,
    /// The block chains: it leaves for a static pc through its two chain
    /// cells ([`Links::cells`], `[AtomicUsize; 2]`: the fall-through or
    /// static jump, the taken branch), and an exit through an empty cell
    /// leaves [`Links::marker`] in `JitCtx::unlinked` for cell 0 (cell
    /// 1's is one more).
    pub chains: bool,
    /// Indirect jumps go through the jump table ([`Links::jumps`],
    /// `[JumpSlot; JUMP_SLOTS]`), with this key for the lookup helper:
    /// the flags the block was translated under (those of every block it
    /// may jump into) and, from bit 32, its chain class. `None`: indirect
    /// jumps return to the vCPU loop.
    pub jump_key: Option<u64>,
    /// The instrumentation compiled in, if any; its hook indices relative
    /// to [`Links::hooks`] (`PlanCode::hooks` is 0).
    pub plan: Option<PlanCode>,
}

/// A guest register slot's state at the current point of the straight
/// line.
#[derive(Clone, Copy)]
struct Slot {
    var: Variable,
    /// The variable holds the slot's value.
    loaded: bool,
    /// The variable differs from the register file.
    dirty: bool,
}

struct Lowering<'f, 'c> {
    b: FunctionBuilder<'f>,
    ctx: ir::Value,
    /// Chained jumps the run may still take, and instructions it executed
    /// before this block (the block's parameters).
    budget: Variable,
    executed: Variable,
    regs: Variable,
    slots: Vec<Option<Slot>>,
    values: Vec<Option<ir::Value>>,
    /// The current guest instruction: its index, pc and length.
    index: u32,
    pc: u64,
    len: u8,
    src: &'c BlockSource,
    /// Signatures of the helpers, imported once.
    sig_load: ir::SigRef,
    sig_store: ir::SigRef,
    sig_load_stub: ir::SigRef,
    sig_store_stub: ir::SigRef,
    sig_interpret: ir::SigRef,
    sig_block: ir::SigRef,
    sig_lookup: ir::SigRef,
    /// The pc the interpreter returned for the last instruction, if that
    /// is how the block ends.
    interpreted_next: Option<ir::Value>,
    sig_hook: ir::SigRef,
    sig_mem_hook: ir::SigRef,
    sig_interpret_watched: ir::SigRef,
    sig_far_cell: ir::SigRef,
    /// The executing vCPU's index, if the plan needs it.
    vcpu: Option<ir::Value>,
    /// A callback ran for the current instruction: the block may have to
    /// be left once it is complete.
    insn_calls: bool,
    /// The data TLBs' tables (read, write), once loaded.
    tlb_tables: [Option<ir::Value>; 2],
    /// The head of the loop a block jumping to its own start is (see
    /// `Lowering::enter_loop`).
    loop_head: Option<ir::Block>,
}

/// Flags for the context and register-file accesses: aligned, never
/// trapping, private to the block.
fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// A block's signature: the context in, the next pc out, in Cranelift's
/// `tail` convention so that a block can jump into the next without
/// growing the stack.
///
/// Besides the context a block takes the chaining budget left and the
/// instructions executed so far in the run: passed in registers from block
/// to block, stored to the context only on the way back to the host.
fn block_signature() -> Signature {
    let mut sig = Signature::new(CallConv::Tail);
    sig.params.push(AbiParam::new(I64));
    sig.params.push(AbiParam::new(I64));
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    sig
}

/// Builds the trampoline the host calls blocks through:
/// `extern "C" fn(ctx, block) -> u64`.
pub(crate) fn build_trampoline(
    func: &mut ir::Function,
    fctx: &mut FunctionBuilderContext,
    isa: &dyn TargetIsa,
) {
    let mut sig = Signature::new(CallConv::triple_default(isa.triple()));
    sig.params.push(AbiParam::new(I64));
    sig.params.push(AbiParam::new(I64));
    sig.returns.push(AbiParam::new(I64));
    func.signature = sig;
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let (ctx, block) = (b.block_params(entry)[0], b.block_params(entry)[1]);
    let sig_block = b.import_signature(block_signature());
    let budget = b.ins().iconst(I64, CHAIN_BUDGET as i64);
    let executed = b.ins().iconst(I64, 0);
    let call = b
        .ins()
        .call_indirect(sig_block, block, &[ctx, budget, executed]);
    let pc = b.inst_results(call)[0];
    b.ins().return_(&[pc]);
    b.finalize(isa.frontend_config());
}

/// Builds a stub of Cranelift's `preserve_all` convention that calls the
/// C-convention memory helper at `target` (a load, or with `store` a
/// store, see `Helpers::load_stub`), leaving a load's value in
/// `JitCtx::result`.
pub(crate) fn build_stub(
    func: &mut ir::Function,
    fctx: &mut FunctionBuilderContext,
    isa: &dyn TargetIsa,
    target: usize,
    store: bool,
) {
    let params: &[ir::Type] = if store { &[I64; 3] } else { &[I64; 2] };
    func.signature = stub_signature(store);
    let mut inner = Signature::new(CallConv::triple_default(isa.triple()));
    inner
        .params
        .extend(params.iter().map(|&t| AbiParam::new(t)));
    if !store {
        inner.returns.push(AbiParam::new(I64));
    }
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let args = b.block_params(entry).to_vec();
    let sig = b.import_signature(inner);
    let callee = b.ins().iconst(I64, target as i64);
    let call = b.ins().call_indirect(sig, callee, &args);
    if let (Some(&value), Some(&ctx)) = (b.inst_results(call).first(), args.first()) {
        b.ins().store(trusted(), value, ctx, OFF_RESULT);
    }
    b.ins().return_(&[]);
    b.finalize(isa.frontend_config());
}

/// The signature compiled code calls a memory stub with.
fn stub_signature(store: bool) -> Signature {
    let mut sig = Signature::new(CallConv::PreserveAll);
    let n = if store { 3 } else { 2 };
    sig.params.extend((0..n).map(|_| AbiParam::new(I64)));
    sig
}

/// Builds the function for `src` into `func`.
pub(crate) fn build(
    func: &mut ir::Function,
    fctx: &mut FunctionBuilderContext,
    isa: &dyn TargetIsa,
    src: &BlockSource,
) {
    let call_conv = CallConv::triple_default(isa.triple());
    func.signature = block_signature();

    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let (ctx, budget, executed) = (
        b.block_params(entry)[0],
        b.block_params(entry)[1],
        b.block_params(entry)[2],
    );

    let helper_sig = |params: &[ir::Type], ret: Option<ir::Type>| {
        let mut s = Signature::new(call_conv);
        s.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        s.returns.extend(ret.map(AbiParam::new));
        s
    };
    let sig_load = b.import_signature(helper_sig(&[I64, I64], Some(I64)));
    let sig_store = b.import_signature(helper_sig(&[I64, I64, I64], None));
    let sig_load_stub = b.import_signature(stub_signature(false));
    let sig_store_stub = b.import_signature(stub_signature(true));
    let sig_interpret = b.import_signature(helper_sig(&[I64, I64, I64, I64], Some(I64)));
    let sig_lookup = b.import_signature(helper_sig(&[I64, I64, I64], Some(I64)));
    let sig_block = b.import_signature(block_signature());
    let sig_hook = b.import_signature(helper_sig(&[I64, I64, I64], None));
    let sig_mem_hook = b.import_signature(helper_sig(&[I64; 6], None));
    let sig_interpret_watched = b.import_signature(helper_sig(&[I64; 5], Some(I64)));
    let sig_far_cell = b.import_signature(helper_sig(&[I64; 5], None));
    let vcpu = src
        .plan
        .as_ref()
        .filter(|p| !p.tallies.is_empty() || p.inline.iter().any(|ops| !ops.is_empty()))
        .map(|_| b.ins().load(I64, trusted(), ctx, OFF_VCPU));

    let regs = b.declare_var(I64);
    let base = b.ins().load(I64, trusted(), ctx, OFF_REGS);
    b.def_var(regs, base);
    let budget_var = b.declare_var(I64);
    b.def_var(budget_var, budget);
    let executed_var = b.declare_var(I64);
    b.def_var(executed_var, executed);

    let mut l = Lowering {
        b,
        ctx,
        budget: budget_var,
        executed: executed_var,
        regs,
        slots: vec![None; src.ir.regs_used as usize],
        values: vec![None; src.ir.insts.len()],
        index: 0,
        pc: 0,
        len: 0,
        src,
        sig_load,
        sig_store,
        sig_load_stub,
        sig_store_stub,
        sig_interpret,
        sig_block,
        sig_lookup,
        interpreted_next: None,
        sig_hook,
        sig_mem_hook,
        sig_interpret_watched,
        sig_far_cell,
        vcpu,
        insn_calls: false,
        tlb_tables: [None; 2],
        loop_head: None,
    };
    l.enter_loop();
    let mut ended = false;
    for (i, inst) in src.ir.insts.iter().enumerate() {
        if let Some(v) = l.lower(*inst) {
            l.values[i] = Some(v);
        }
        if matches!(inst, Inst::Jump(_) | Inst::Branch { .. }) {
            ended = true;
            break;
        }
    }
    if !ended {
        let executed = l.index + 1;
        match l.interpreted_next {
            Some(next) => l.leave(executed, next),
            None => l.leave_chained(executed, src.fallthrough, 0),
        }
    }
    if let Some(head) = l.loop_head {
        l.b.seal_block(head);
    }
    l.b.finalize(isa.frontend_config());
}

impl Lowering<'_, '_> {
    /// A block that jumps back to its own start (a loop of one block)
    /// jumps within its function, its guest registers staying in host
    /// registers from one iteration to the next: every slot it reads or
    /// writes is loaded before the loop's head and counts as written from
    /// there on. Not for blocks that call the interpreter (which reads and
    /// writes the register file itself) or may not chain.
    fn enter_loop(&mut self) {
        let ir = &self.src.ir;
        let loops = self.src.chains
            && !ir.insts.iter().any(|i| matches!(i, Inst::Interpret { .. }))
            && ir.insts.iter().any(|i| match *i {
                Inst::Jump(target) => self.const_of(target) == Some(self.src.pc),
                Inst::Branch { taken, .. } => taken == self.src.pc,
                _ => false,
            });
        if !loops {
            return;
        }
        let mut used: Vec<u16> = ir
            .insts
            .iter()
            .filter_map(|i| match *i {
                Inst::ReadReg(slot) | Inst::WriteReg(slot, _) => Some(slot),
                _ => None,
            })
            .collect();
        used.sort_unstable();
        used.dedup();
        for &slot in &used {
            self.read_reg(slot);
        }
        let head = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        for &slot in &used {
            let mut s = self.slot(slot);
            s.dirty = true;
            self.set_slot(slot, s);
        }
        self.loop_head = Some(head);
    }

    /// The jump back to the loop's head after `executed` instructions of
    /// an iteration (see `enter_loop`): counted and added as on any way
    /// out, and taken while the chaining budget lasts and no callback
    /// asked to leave; else back to the vCPU loop at the block's start.
    fn loop_back(&mut self, executed: u32, head: ir::Block) {
        self.add_tallies(executed);
        let before = self.b.use_var(self.executed);
        let total = self.b.ins().iadd_imm_s(before, i64::from(executed));
        self.b.def_var(self.executed, total);
        let back = self.b.create_block();
        self.guard_chain(back);
        let budget = self.b.use_var(self.budget);
        let left = self.b.ins().iadd_imm_s(budget, -1);
        self.b.def_var(self.budget, left);
        self.b.ins().jump(head, &[]);

        self.b.seal_block(back);
        self.b.switch_to_block(back);
        self.b.set_cold_block(back);
        self.write_back(false);
        let pc = self.b.ins().iconst(I64, self.src.pc as i64);
        self.return_to_host(total, pc);
    }

    fn value(&mut self, v: Value) -> ir::Value {
        match self.values.get(v.0 as usize).copied().flatten() {
            Some(v) => v,
            // The builder only hands out values of earlier instructions;
            // zero keeps a malformed IR well-defined.
            None => self.b.ins().iconst(I64, 0),
        }
    }

    fn const_of(&self, v: Value) -> Option<u64> {
        match self.src.ir.insts.get(v.0 as usize) {
            Some(Inst::Const(c)) => Some(*c),
            _ => None,
        }
    }

    fn slot(&mut self, slot: u16) -> Slot {
        let i = slot as usize;
        if let Some(Some(s)) = self.slots.get(i) {
            return *s;
        }
        let s = Slot {
            var: self.b.declare_var(I64),
            loaded: false,
            dirty: false,
        };
        if let Some(entry) = self.slots.get_mut(i) {
            *entry = Some(s);
        }
        s
    }

    fn set_slot(&mut self, slot: u16, s: Slot) {
        if let Some(entry) = self.slots.get_mut(slot as usize) {
            *entry = Some(s);
        }
    }

    fn read_reg(&mut self, slot: u16) -> ir::Value {
        let mut s = self.slot(slot);
        if !s.loaded {
            let base = self.b.use_var(self.regs);
            let v = self.b.ins().load(I64, trusted(), base, i32::from(slot) * 8);
            self.b.def_var(s.var, v);
            s.loaded = true;
            self.set_slot(slot, s);
        }
        self.b.use_var(s.var)
    }

    /// Stores every dirty slot (in the current block of the function) and,
    /// with `forget`, marks them as no longer cached.
    fn write_back(&mut self, forget: bool) {
        let base = self.b.use_var(self.regs);
        for i in 0..self.slots.len() {
            let Some(mut s) = self.slots[i] else { continue };
            if s.dirty {
                let v = self.b.use_var(s.var);
                self.b.ins().store(trusted(), v, base, (i as i32) * 8);
            }
            if forget {
                s.loaded = false;
                s.dirty = false;
                self.slots[i] = Some(s);
            }
        }
    }

    /// The way out of a block: register file up to date, and the run's
    /// instruction count with this block's `executed` ones.
    fn finish_block(&mut self, executed: u32) -> ir::Value {
        self.write_back(false);
        self.add_tallies(executed);
        let before = self.b.use_var(self.executed);
        self.b.ins().iadd_imm_s(before, i64::from(executed))
    }

    /// Back to the host: the run's counters into the context.
    fn return_to_host(&mut self, executed: ir::Value, pc: ir::Value) {
        self.b
            .ins()
            .store(trusted(), executed, self.ctx, OFF_EXECUTED);
        let budget = self.b.use_var(self.budget);
        self.b.ins().store(trusted(), budget, self.ctx, OFF_BUDGET);
        self.b.ins().return_(&[pc]);
    }

    /// Leaves the function for the vCPU loop, returning `pc`.
    fn leave(&mut self, executed: u32, pc: ir::Value) {
        let total = self.finish_block(executed);
        self.return_to_host(total, pc);
    }

    /// Jumps into the block at `code` (its counters passed along).
    fn chain_to(&mut self, code: ir::Value, executed: ir::Value) {
        let budget = self.b.use_var(self.budget);
        let left = self.b.ins().iadd_imm_s(budget, -1);
        self.b
            .ins()
            .return_call_indirect(self.sig_block, code, &[self.ctx, left, executed]);
    }

    /// Leaves the block for the static pc `next` through chain cell
    /// `cell`: straight into the block the cell names, if any and the
    /// budget allows, else back to the vCPU loop, saying which cell was
    /// empty so that it can be linked.
    fn leave_chained(&mut self, executed: u32, next: u64, cell: u64) {
        if let Some(head) = self.loop_head.filter(|_| next == self.src.pc) {
            return self.loop_back(executed, head);
        }
        if !self.src.chains {
            let pc = self.b.ins().iconst(I64, next as i64);
            return self.leave(executed, pc);
        }
        let total = self.finish_block(executed);
        let cell_addr = self.linked(Link::Cells, cell as i64 * 8);
        let target = self.b.ins().atomic_load(I64, trusted(), cell_addr);
        let back = self.b.create_block();
        self.unless_zero(target, back);
        self.guard_chain(back);
        self.chain_to(target, total);

        self.b.seal_block(back);
        self.b.switch_to_block(back);
        self.b.set_cold_block(back);
        let marker = self.linked(Link::Marker, cell as i64);
        self.b
            .ins()
            .store(trusted(), marker, self.ctx, OFF_UNLINKED);
        let pc = self.b.ins().iconst(I64, next as i64);
        self.return_to_host(total, pc);
    }

    /// Leaves the block for the computed pc `target`: straight into the
    /// block the jump table (or the lookup helper, which fills it) names,
    /// if the budget allows, else back to the vCPU loop.
    fn leave_indirect(&mut self, executed: u32, target: ir::Value) {
        let Some(flags) = self.src.jump_key else {
            return self.leave(executed, target);
        };
        let total = self.finish_block(executed);
        let back = self.b.create_block();
        self.guard_chain(back);

        // The table: slot (target >> 1) mod JUMP_SLOTS, 16 bytes each.
        let index = self.b.ins().ushr_imm_u(target, 1);
        let index = self
            .b
            .ins()
            .band_imm_u(index, (super::JUMP_SLOTS - 1) as i64);
        let offset = self.b.ins().ishl_imm_u(index, 4);
        let table = self.linked(Link::Jumps, 0);
        let slot = self.b.ins().iadd(table, offset);
        let pc = self.b.ins().atomic_load(I64, trusted(), slot);
        let hit = self.b.ins().icmp(IntCC::Equal, pc, target);
        let found = self.b.create_block();
        let code_param = self.b.append_block_param(found, I64);
        let miss = self.b.create_block();
        let code_at = self.b.create_block();
        self.b.ins().brif(hit, code_at, &[], miss, &[]);
        self.b.seal_block(code_at);
        self.b.seal_block(miss);

        self.b.switch_to_block(code_at);
        let slot_code = self.b.ins().iadd_imm_s(slot, 8);
        let code = self.b.ins().atomic_load(I64, trusted(), slot_code);
        self.b.ins().jump(found, &[code.into()]);

        self.b.switch_to_block(miss);
        self.b.set_cold_block(miss);
        let flags = self.b.ins().iconst(I64, flags as i64);
        let code = self
            .helper(
                self.src.helpers.lookup,
                self.sig_lookup,
                &[self.ctx, target, flags],
            )
            .unwrap_or_else(|| self.b.ins().iconst(I64, 0));
        let known = self.b.ins().icmp_imm_s(IntCC::NotEqual, code, 0);
        self.b.ins().brif(known, found, &[code.into()], back, &[]);
        self.b.seal_block(found);
        self.b.seal_block(back);

        self.b.switch_to_block(found);
        self.chain_to(code_param, total);

        self.b.switch_to_block(back);
        self.return_to_host(total, target);
    }

    /// After a helper call: if it asked to leave, leave at the current
    /// instruction (counting it, as the interpreter counts an exiting
    /// instruction).
    fn exit_if_status(&mut self) {
        let status = self.b.ins().load(I64, trusted(), self.ctx, OFF_STATUS);
        let exit = self.b.create_block();
        let go_on = self.b.create_block();
        self.b.ins().brif(status, exit, &[], go_on, &[]);
        self.b.seal_block(exit);
        self.b.seal_block(go_on);
        self.b.switch_to_block(exit);
        self.b.set_cold_block(exit);
        let len = self.b.ins().iconst(I64, i64::from(self.len));
        self.b.ins().store(trusted(), len, self.ctx, OFF_EXIT_LEN);
        let pc = self.b.ins().iconst(I64, self.pc as i64);
        self.leave(self.index + 1, pc);
        self.b.switch_to_block(go_on);
    }

    fn helper(&mut self, addr: usize, sig: ir::SigRef, args: &[ir::Value]) -> Option<ir::Value> {
        let callee = self.b.ins().iconst(I64, addr as i64);
        let call = self.b.ins().call_indirect(sig, callee, args);
        self.b.inst_results(call).first().copied()
    }

    fn lower(&mut self, inst: Inst) -> Option<ir::Value> {
        let v = match inst {
            Inst::Begin { index, pc, len } => {
                // The previous instruction is complete.
                self.leave_if_asked(index, pc);
                self.index = index;
                self.pc = pc;
                self.len = len;
                self.interpreted_next = None;
                if let Some(plan) = &self.src.plan {
                    let entry = plan.entry;
                    if index == 0 {
                        self.inline_ops(0);
                        if entry.exec {
                            self.call_hook(0, entry);
                        }
                    }
                    self.inline_ops(index as usize + 1);
                    if let Some((hook, used)) = self.hook_use(index).filter(|(_, u)| u.exec) {
                        self.call_hook(hook, used);
                    }
                }
                return None;
            }
            Inst::Const(c) => self.b.ins().iconst(I64, c as i64),
            Inst::ReadReg(slot) => self.read_reg(slot),
            Inst::WriteReg(slot, v) => {
                let v = self.value(v);
                let mut s = self.slot(slot);
                self.b.def_var(s.var, v);
                s.loaded = true;
                s.dirty = true;
                self.set_slot(slot, s);
                return None;
            }
            Inst::Binary(op, a, b) => {
                let (a, b) = (self.value(a), self.value(b));
                self.binary(op, a, b)
            }
            Inst::Unary(op, a) => {
                let a = self.value(a);
                match op {
                    UnOp::Sext32 => {
                        let low = self.b.ins().ireduce(I32, a);
                        self.b.ins().sextend(I64, low)
                    }
                    UnOp::Zext32 => {
                        let low = self.b.ins().ireduce(I32, a);
                        self.b.ins().uextend(I64, low)
                    }
                }
            }
            Inst::Compare(cond, a, b) => {
                let (a, b) = (self.value(a), self.value(b));
                let cc = match cond {
                    Cond::Eq => IntCC::Equal,
                    Cond::Ne => IntCC::NotEqual,
                    Cond::LtS => IntCC::SignedLessThan,
                    Cond::GeS => IntCC::SignedGreaterThanOrEqual,
                    Cond::LtU => IntCC::UnsignedLessThan,
                    Cond::GeU => IntCC::UnsignedGreaterThanOrEqual,
                };
                let c = self.b.ins().icmp(cc, a, b);
                self.b.ins().uextend(I64, c)
            }
            Inst::Select(c, a, b) => {
                let (c, a, b) = (self.value(c), self.value(a), self.value(b));
                self.b.ins().select(c, a, b)
            }
            Inst::Load { addr, size, signed } => {
                let addr = self.value(addr);
                self.load(addr, size, signed)
            }
            Inst::Store { addr, size, value } => {
                let (addr, value) = (self.value(addr), self.value(value));
                self.store(addr, size, value);
                return None;
            }
            Inst::Interpret { index } => return self.interpret(index),
            Inst::Jump(target) => {
                let executed = self.index + 1;
                match self.const_of(target) {
                    Some(pc) => self.leave_chained(executed, pc, 0),
                    None => {
                        let target = self.value(target);
                        self.leave_indirect(executed, target);
                    }
                }
                return None;
            }
            Inst::Branch { cond, taken } => {
                let executed = self.index + 1;
                let next = self.pc.wrapping_add(u64::from(self.len));
                match self.const_of(cond) {
                    Some(0) => self.leave_chained(executed, next, 0),
                    Some(_) => self.leave_chained(executed, taken, 1),
                    None => {
                        let c = self.value(cond);
                        let yes = self.b.create_block();
                        let no = self.b.create_block();
                        self.b.ins().brif(c, yes, &[], no, &[]);
                        self.b.seal_block(yes);
                        self.b.seal_block(no);
                        self.b.switch_to_block(yes);
                        self.leave_chained(executed, taken, 1);
                        self.b.switch_to_block(no);
                        self.leave_chained(executed, next, 0);
                    }
                }
                return None;
            }
        };
        Some(v)
    }

    /// Runs the current instruction's op in the interpreter, which reads
    /// and writes the register file itself.
    fn interpret(&mut self, index: u32) -> Option<ir::Value> {
        self.write_back(true);
        let op = self.linked(Link::Ops, i64::from(index) * self.src.op_size as i64);
        let pc = self.b.ins().iconst(I64, self.pc as i64);
        let len = self.b.ins().iconst(I64, i64::from(self.len));
        let next = match self.hook_use(self.index).filter(|(_, u)| u.mem) {
            Some((hook, used)) => {
                self.insn_calls |= used.mem_calls;
                let hook = self.linked(Link::Hooks, i64::from(hook));
                self.helper(
                    self.src.helpers.interpret_watched,
                    self.sig_interpret_watched,
                    &[self.ctx, op, pc, len, hook],
                )?
            }
            None => self.helper(
                self.src.helpers.interpret,
                self.sig_interpret,
                &[self.ctx, op, pc, len],
            )?,
        };
        // The interpreter borrowed the register file anew.
        let base = self.b.ins().load(I64, trusted(), self.ctx, OFF_REGS);
        self.b.def_var(self.regs, base);
        self.exit_if_status();
        // An op that transferred control ends the block even if it is not
        // the last (the interpreter counts it the same way).
        let fall = self.pc.wrapping_add(u64::from(self.len));
        let is_last = !self
            .src
            .ir
            .insts
            .iter()
            .any(|i| matches!(i, Inst::Begin { index: later, .. } if *later > self.index));
        if !is_last {
            let jumped = self.b.ins().icmp_imm_s(IntCC::NotEqual, next, fall as i64);
            let out = self.b.create_block();
            let go_on = self.b.create_block();
            self.b.ins().brif(jumped, out, &[], go_on, &[]);
            self.b.seal_block(out);
            self.b.seal_block(go_on);
            self.b.switch_to_block(out);
            self.b.set_cold_block(out);
            self.leave(self.index + 1, next);
            self.b.switch_to_block(go_on);
        }
        self.interpreted_next = Some(next);
        None
    }

    fn binary(&mut self, op: BinOp, a: ir::Value, b: ir::Value) -> ir::Value {
        match op {
            BinOp::Add => self.b.ins().iadd(a, b),
            BinOp::Sub => self.b.ins().isub(a, b),
            BinOp::And => self.b.ins().band(a, b),
            BinOp::Or => self.b.ins().bor(a, b),
            BinOp::Xor => self.b.ins().bxor(a, b),
            BinOp::Shl => self.b.ins().ishl(a, b),
            BinOp::ShrU => self.b.ins().ushr(a, b),
            BinOp::ShrS => self.b.ins().sshr(a, b),
            BinOp::Mul => self.b.ins().imul(a, b),
            BinOp::MulHighS => self.b.ins().smulhi(a, b),
            BinOp::MulHighU => self.b.ins().umulhi(a, b),
            BinOp::MulHighSU => {
                // a signed, b unsigned: the unsigned high part, less b
                // where a is negative.
                let high = self.b.ins().umulhi(a, b);
                let sign = self.b.ins().sshr_imm_s(a, 63);
                let fix = self.b.ins().band(sign, b);
                self.b.ins().isub(high, fix)
            }
            BinOp::DivS | BinOp::RemS => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                let min = self.b.ins().icmp_imm_s(IntCC::Equal, a, i64::MIN);
                let minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
                let overflow = self.b.ins().band(min, minus_one);
                let bad = self.b.ins().bor(zero, overflow);
                let divisor = self.safe_divisor(bad, b);
                if op == BinOp::DivS {
                    self.b.ins().sdiv(a, divisor)
                } else {
                    let r = self.b.ins().srem(a, divisor);
                    self.b.ins().select(zero, a, r)
                }
            }
            BinOp::DivU | BinOp::RemU => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                let divisor = self.safe_divisor(zero, b);
                if op == BinOp::DivU {
                    self.b.ins().udiv(a, divisor)
                } else {
                    let r = self.b.ins().urem(a, divisor);
                    self.b.ins().select(zero, a, r)
                }
            }
        }
    }

    /// `b`, or 1 where `bad` (an `I8` truth value) holds.
    fn safe_divisor(&mut self, bad: ir::Value, b: ir::Value) -> ir::Value {
        debug_assert_eq!(self.b.func.dfg.value_type(bad), I8);
        let one = self.b.ins().iconst(I64, 1);
        self.b.ins().select(bad, one, b)
    }
}
