//! The instrumentation an instrumented block's code runs ([`PlanCode`]):
//! hook helper calls before instructions and at accesses, the leave
//! checks after an instruction whose callbacks ran, and a tally block's
//! inline adds at each way out.

use cranelift_codegen::ir::{self, InstBuilder, condcodes::IntCC, types::I64};

use super::super::runtime::{CELL_ADD, CELL_STORE, MEM_STORE, OFF_LEAVE, OFF_REGS};
use super::{Link, Lowering, trusted};
use crate::instrument::InlineKind;

/// An instrumented block's plan as its code runs it: hooks (actions
/// before instructions, memory actions at accesses) through helper calls,
/// and the adds of a block of inline adds only (`ExecMode::Tally`) inline
/// at each way out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct PlanCode {
    /// Index in `Generation::hooks` of the block's entry hook; instruction
    /// `i`'s is one more than `i` past it. The code reads it from its
    /// links (`Links::hooks`); 0 in a `BlockSource`.
    pub hooks: u32,
    pub entry: HookUse,
    /// Per instruction.
    pub insns: Vec<HookUse>,
    /// The inline operations of hooks that hold nothing else, run inline:
    /// per hook, 0 for the entry hook and `i + 1` for instruction `i`'s
    /// (empty for a hook run through a helper).
    pub inline: Vec<Vec<CellOp>>,
    pub tallies: Vec<TallyCode>,
}

/// A scoreboard cell of the executing vCPU's row and what to do to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CellOp {
    pub cell: Cell,
    pub kind: InlineKind,
}

/// Where one entry of a scoreboard is, for compiled code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Cell {
    /// Address of the board's first cell, its row length and the rows of
    /// its first segment; the board's address, for a row past them.
    pub board: usize,
    pub cells: usize,
    pub slots: u64,
    pub rows: u64,
    pub slot: u64,
}

/// What one hook holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct HookUse {
    /// Actions before the instruction (or on entry); some may be
    /// callbacks, some of which may read the registers.
    pub exec: bool,
    pub exec_calls: bool,
    pub exec_regs: bool,
    /// Actions at the instruction's accesses; some may be callbacks.
    pub mem: bool,
    pub mem_calls: bool,
    /// The exec actions are one inlined callback: its direct call
    /// (`engine::inlined::DirectCall`'s entry and data).
    pub exec_direct: Option<(usize, usize)>,
    /// The memory actions are one inlined callback, for loads and/or
    /// stores: its direct call.
    pub mem_direct: Option<MemDirect>,
}

/// A memory hook that is one inlined callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MemDirect {
    pub entry: usize,
    pub data: usize,
    pub loads: bool,
    pub stores: bool,
}

/// The adds to one scoreboard entry of a tally block: in the executing
/// vCPU's row, `prefix[n - 1]` when the block is left after `n`
/// instructions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TallyCode {
    pub cell: Cell,
    pub prefix: Vec<u64>,
}

impl Lowering<'_, '_> {
    /// A tally block's adds for leaving it after `executed` instructions.
    pub(super) fn add_tallies(&mut self, executed: u32) {
        let (Some(plan), Some(vcpu)) = (&self.src.plan, self.vcpu) else {
            return;
        };
        let Some(last) = (executed as usize).checked_sub(1) else {
            return;
        };
        for t in &plan.tallies {
            let Some(&amount) = t.prefix.get(last).or(t.prefix.last()) else {
                continue;
            };
            if amount != 0 {
                self.cell_op(vcpu, t.cell, InlineKind::Add(amount));
            }
        }
    }

    /// Runs hook `pos`'s inline operations (0: the entry hook, `i + 1`:
    /// instruction `i`'s), if it is one run inline.
    pub(super) fn inline_ops(&mut self, pos: usize) {
        let (Some(plan), Some(vcpu)) = (&self.src.plan, self.vcpu) else {
            return;
        };
        let Some(ops) = plan.inline.get(pos) else {
            return;
        };
        for op in ops.clone() {
            self.cell_op(vcpu, op.cell, op.kind);
        }
    }

    /// `kind` on `cell` in `vcpu`'s row: inline in the board's first
    /// segment, through a helper for a vCPU past it (a row the board grows).
    fn cell_op(&mut self, vcpu: ir::Value, cell: Cell, kind: InlineKind) {
        let inside = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThan, vcpu, cell.rows as i64);
        let near = self.b.create_block();
        let far = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(inside, near, &[], far, &[]);
        self.b.seal_block(near);
        self.b.seal_block(far);

        self.b.switch_to_block(near);
        let row = self.b.ins().imul_imm_s(vcpu, (cell.slots * 8) as i64);
        let base = self
            .b
            .ins()
            .iconst(I64, (cell.cells as u64 + cell.slot * 8) as i64);
        let addr = self.b.ins().iadd(base, row);
        let new = match kind {
            InlineKind::Add(amount) => {
                let old = self.b.ins().load(I64, trusted(), addr, 0);
                self.b.ins().iadd_imm_s(old, amount as i64)
            }
            InlineKind::Store(value) => self.b.ins().iconst(I64, value as i64),
        };
        self.b.ins().store(trusted(), new, addr, 0);
        self.b.ins().jump(done, &[]);

        self.b.switch_to_block(far);
        self.b.set_cold_block(far);
        let (op, imm) = match kind {
            InlineKind::Add(amount) => (CELL_ADD, amount),
            InlineKind::Store(value) => (CELL_STORE, value),
        };
        let args =
            [cell.board as u64, cell.slot, op, imm].map(|v| self.b.ins().iconst(I64, v as i64));
        let helper = self.src.helpers.far_cell;
        self.helper(
            helper,
            self.sig_far_cell,
            &[args[0], vcpu, args[1], args[2], args[3]],
        );
        self.b.ins().jump(done, &[]);

        self.b.seal_block(done);
        self.b.switch_to_block(done);
    }

    /// The hook of instruction `index`, relative to the block's entry
    /// hook (`None`: no plan).
    pub(super) fn hook_use(&self, index: u32) -> Option<(u32, HookUse)> {
        let plan = self.src.plan.as_ref()?;
        let used = plan.insns.get(index as usize).copied()?;
        Some((1 + index, used))
    }

    /// Calls the hook helper for hook `hook` (relative to the block's
    /// entry hook) before the instruction at `pc`; with callbacks that
    /// read registers, the register file is brought up to date first.
    pub(super) fn call_hook(&mut self, hook: u32, used: HookUse) {
        if used.exec_regs {
            self.write_back(false);
        }
        self.insn_calls |= used.exec_calls;
        let pc = self.b.ins().iconst(I64, self.pc as i64);
        let (helper, first) = match used.exec_direct {
            Some((entry, data)) => (entry, self.b.ins().iconst(I64, data as i64)),
            None => (
                self.src.helpers.run_hook,
                self.linked(Link::Hooks, i64::from(hook)),
            ),
        };
        self.helper(helper, self.sig_hook, &[self.ctx, first, pc]);
        // The helper borrowed the register file anew.
        let base = self.b.ins().load(I64, trusted(), self.ctx, OFF_REGS);
        self.b.def_var(self.regs, base);
    }

    /// Runs the current instruction's memory actions for an access.
    pub(super) fn call_mem_hook(&mut self, addr: ir::Value, value: ir::Value, kind: u64) {
        let Some((hook, used)) = self.hook_use(self.index) else {
            return;
        };
        if !used.mem {
            return;
        }
        let store = kind & MEM_STORE != 0;
        let (helper, first) = match used.mem_direct {
            // Its filter does not select this access.
            Some(d) if !(if store { d.stores } else { d.loads }) => return,
            Some(d) => (d.entry, self.b.ins().iconst(I64, d.data as i64)),
            None => (
                self.src.helpers.mem_hook,
                self.linked(Link::Hooks, i64::from(hook)),
            ),
        };
        self.insn_calls |= used.mem_calls;
        let pc = self.b.ins().iconst(I64, self.pc as i64);
        let kind = self.b.ins().iconst(I64, kind as i64);
        self.helper(
            helper,
            self.sig_mem_hook,
            &[self.ctx, first, pc, addr, value, kind],
        );
    }

    /// Once an instruction whose callbacks ran is complete: if they asked
    /// for it, leave the block at `next` after `executed` instructions.
    pub(super) fn leave_if_asked(&mut self, executed: u32, next: u64) {
        if !std::mem::take(&mut self.insn_calls) {
            return;
        }
        let asked = self.b.ins().load(I64, trusted(), self.ctx, OFF_LEAVE);
        let out = self.b.create_block();
        let go_on = self.b.create_block();
        self.b.ins().brif(asked, out, &[], go_on, &[]);
        self.b.seal_block(out);
        self.b.seal_block(go_on);
        self.b.switch_to_block(out);
        self.b.set_cold_block(out);
        let pc = self.b.ins().iconst(I64, next as i64);
        self.leave(executed, pc);
        self.b.switch_to_block(go_on);
    }

    /// Goes on (in a new block) only if the block may be left straight
    /// into another, else branches to `back`: the chaining budget is not
    /// spent and no callback of the last instruction asked to return to
    /// the loop. One branch per condition: Cranelift fuses a compare into
    /// its branch, not an `and` of two compares.
    pub(super) fn guard_chain(&mut self, back: ir::Block) {
        let budget = self.b.use_var(self.budget);
        self.unless_zero(budget, back);
        if self.insn_calls {
            let asked = self.b.ins().load(I64, trusted(), self.ctx, OFF_LEAVE);
            let go_on = self.b.create_block();
            self.b.ins().brif(asked, back, &[], go_on, &[]);
            self.b.seal_block(go_on);
            self.b.switch_to_block(go_on);
        }
    }

    /// Goes on (in a new block) if `v` is not zero, else branches to
    /// `back`.
    pub(super) fn unless_zero(&mut self, v: ir::Value, back: ir::Block) {
        let go_on = self.b.create_block();
        self.b.ins().brif(v, go_on, &[], back, &[]);
        self.b.seal_block(go_on);
        self.b.switch_to_block(go_on);
    }
}
