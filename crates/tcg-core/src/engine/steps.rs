//! The general instrumented loop, and the loop of blocks with actions on
//! entry only.
//!
//! `Steps` and `StepsWithMemory` blocks (plans no specialised loop takes)
//! run [`Engine::exec_instrumented`]: the plain loop's walk over the
//! block's ops with each instruction's hook alongside, its actions run
//! before it ([`Engine::run_actions`]; an instruction whose only action is
//! one callback calls it without walking the list) and its memory actions
//! during it, through an [`InstrumentedMem`]. Blocks without memory actions
//! execute on plain guest memory. [`Engine::exec_steps_run`] runs such
//! blocks in runs (into blocks of the same mode), and also plans again a
//! block cached before a re-instrumentation and goes on into it, so that a
//! plugin reset does not cost every block of a loop a return to the vCPU
//! loop.
//!
//! `OnEntry` blocks (a block-counting plugin) run their entry actions, then
//! the plain loop ([`Engine::exec_on_entry`]).

use std::sync::atomic::Ordering;

use super::Engine;
use super::access::{InstrumentedMem, MemActions, apply_inline, call};
use super::plain::{BlockEnd, RunEnd};
use super::vcpu::{Signals, take_asked_on_this_thread};
use crate::cache::{CompiledAction, EMPTY_HOOK, ExecMode, Generation, InsnHook, NONE, TbHeader};
use crate::frontend::{Flow, Frontend};
use crate::instrument::Requests;
use crate::memory::GuestMemory;

impl<F: Frontend> Engine<F> {
    /// The instrumented loop: the plain loop's walk over the block's ops,
    /// with each instruction's hook alongside: its actions run before it and
    /// its memory actions during it. Stops after an instruction whose
    /// callbacks requested a flush or exit. Inlined into `exec_steps_run`.
    /// `MEMORY` says whether the block has memory actions; without them,
    /// instructions execute directly on guest memory, as in the plain loop.
    #[inline(always)]
    pub(super) fn exec_instrumented<const MEMORY: bool>(
        generation: &Generation<F::Op>,
        vcpu: u32,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> BlockEnd {
        let ops = generation.ops_of(tb).unwrap_or_default();
        let start = tb.instr_start as usize;
        let hooks = generation
            .hooks
            .get(start..start + tb.instr_len as usize)
            .unwrap_or_default();
        let (entry, hooks) = hooks.split_first().unwrap_or((&EMPTY_HOOK, &[]));
        // One accessor for the block. Before each instruction it is pointed at
        // that instruction's memory actions and emptied after it: a borrow of
        // this generation that cannot outlive the generation.
        let mut access = InstrumentedMem {
            mem,
            actions: MemActions::of(generation, &[]),
            vcpu,
            pc: tb.pc,
            requests: Requests::default(),
        };
        let base = tb.pc;
        // Whether a callback ran for the current instruction (only then can
        // a flush or exit have been requested by it).
        let mut called = false;
        if entry.actions_len != 0 {
            called = Self::run_actions(generation, entry, vcpu, base, cpu, &mut access);
        }
        let mut executed = 0u32;
        for (op, hook) in ops.iter().zip(hooks) {
            let pc = base.wrapping_add(u64::from(op.offset));
            // One callback and nothing else (a callback per instruction,
            // shared or each its own, as the `cache` plugin attaches):
            // called without walking the list. In the memory loop too:
            // callgrind, `cache` on integer 200, 5,983.0 M host
            // instructions against 6,516.8 M walking it.
            if hook.sole_call != NONE {
                called = true;
                F::set_pc(cpu, pc);
                if let Some(cb) = generation.callbacks.get(hook.sole_call as usize) {
                    call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                }
            } else if hook.actions_len != 0 {
                called |= Self::run_actions(generation, hook, vcpu, pc, cpu, &mut access);
            }
            executed += 1;
            let flow = if MEMORY {
                if hook.mem_len != 0 {
                    called |= hook.mem_calls;
                    access.actions.actions = generation.mem_actions_of(hook);
                }
                access.pc = pc;
                let flow = F::execute(cpu, &op.op, pc, &mut access);
                access.actions.actions = &[];
                flow
            } else {
                F::execute(cpu, &op.op, pc, &mut *access.mem)
            };
            match flow {
                Flow::Next => {}
                Flow::Jump(target) => {
                    return BlockEnd {
                        next_pc: target,
                        executed,
                        exit: None,
                        requests: access.requests,
                    };
                }
                Flow::Exit(exit) => {
                    return Self::exit_at(exit, pc, op.len, executed, access.requests);
                }
            }
            // A flush or exit requested by a callback (through its context
            // or a handle) takes effect now that the instruction is complete;
            // one from another thread at the block's end.
            if called && (access.requests.any() || take_asked_on_this_thread()) {
                let next_pc = pc.wrapping_add(u64::from(op.len));
                return BlockEnd {
                    next_pc,
                    executed,
                    exit: None,
                    requests: access.requests,
                };
            }
            called = false;
        }
        BlockEnd {
            next_pc: base.wrapping_add(u64::from(tb.size)),
            executed,
            exit: None,
            requests: access.requests,
        }
    }

    /// Runs a [`ExecMode::Steps`] or [`ExecMode::StepsWithMemory`] block
    /// through the general loop, and the blocks of its kind it leads to (see
    /// [`Engine::run_goes_on`]), also a block cached before a
    /// re-instrumentation: it plans that block again and goes on if it is
    /// still of the run's kind. After a plugin reset every block of a loop
    /// is such a block once; returning to the vCPU loop for each made a
    /// reset cost more than before there were runs (integer, callgrind:
    /// 91.7 k host instructions per reset against 86.8 k; 86.0 k now).
    #[inline(never)]
    pub(super) fn exec_steps_run(
        &mut self,
        vcpu: u32,
        first: u32,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mode = self
            .current
            .tbs
            .get(first as usize)
            .map_or(ExecMode::Steps, |tb| tb.mode);
        let mut id = first;
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks, and where they ended.
        let mut before = 0u32;
        let mut next_pc = F::pc(cpu);
        loop {
            let generation = &self.current;
            let signals = &self.signals;
            let Some(tb) = generation.tbs.get(id as usize) else {
                // Unreachable: `id` was looked up just before.
                return RunEnd {
                    end: BlockEnd {
                        next_pc,
                        executed: before,
                        exit: None,
                        requests: Requests::default(),
                    },
                    last: id,
                    blocks,
                };
            };
            blocks += 1;
            // Both loops in one function (with the mode tested per block)
            // measured faster than a copy of this loop for each.
            let end = if mode == ExecMode::Steps {
                Self::exec_instrumented::<false>(generation, vcpu, tb, cpu, mem)
            } else {
                Self::exec_instrumented::<true>(generation, vcpu, tb, cpu, mem)
            };
            let executed = before + end.executed;
            let next = Self::link_after(generation, signals, id, &end, cpu, blocks)
                .map(|(next, tb)| (next, tb.plan_version != generation.plan_version, tb.mode));
            let Some((next, stale, next_mode)) = next else {
                return RunEnd {
                    end: BlockEnd { executed, ..end },
                    last: id,
                    blocks,
                };
            };
            let goes_on = if stale {
                // Planned again, it may run another way, and planning may
                // have asked for a flush or exit.
                self.replan(next);
                let replanned = self.current.tbs.get(next as usize).map(|tb| tb.mode);
                replanned == Some(mode) && self.signals.pending.load(Ordering::Relaxed) == 0
            } else {
                next_mode == mode
            };
            if !goes_on {
                return RunEnd {
                    end: BlockEnd { executed, ..end },
                    last: id,
                    blocks,
                };
            }
            (id, before, next_pc) = (next, executed, end.next_pc);
        }
    }

    /// Runs an [`ExecMode::OnEntry`] block: its entry actions, then the
    /// plain loop, where the general loop would test each instruction's
    /// (empty) hook; and the OnEntry blocks it leads to (see
    /// [`Engine::run_goes_on`]). Out of line, like the other instrumented
    /// blocks. A request made by an entry callback, or through a handle and
    /// seen right after the entry callbacks, takes effect after the block's
    /// first instruction, as in the general loop.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_on_entry(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mut access = InstrumentedMem {
            mem,
            actions: MemActions::of(generation, &[]),
            vcpu,
            pc: first_tb.pc,
            requests: Requests::default(),
        };
        Self::plain_run(
            generation,
            signals,
            (first, first_tb),
            cpu,
            |tb, cpu| {
                let entry = generation
                    .hooks
                    .get(tb.instr_start as usize)
                    .unwrap_or(&EMPTY_HOOK);
                let called = Self::run_actions(generation, entry, vcpu, tb.pc, cpu, &mut access);
                if called && (access.requests.any() || take_asked_on_this_thread()) {
                    let requests = access.requests;
                    return Err(Self::exec_first(generation, tb, cpu, access.mem, requests));
                }
                Ok(Self::exec_plain(generation, tb, cpu, access.mem))
            },
            |next_tb| next_tb.mode == ExecMode::OnEntry,
        )
    }

    /// Runs the actions of `hook` (before the instruction at `pc`, or on
    /// block entry); returns whether a callback ran.
    #[inline(always)]
    pub(super) fn run_actions(
        generation: &Generation<F::Op>,
        hook: &InsnHook,
        vcpu: u32,
        pc: u64,
        cpu: &mut F::Cpu,
        access: &mut InstrumentedMem<'_>,
    ) -> bool {
        let actions = generation.actions_of(hook);
        let mut called = false;
        for action in actions {
            match *action {
                CompiledAction::Inline { board, slot, kind } => {
                    apply_inline(&generation.boards, vcpu, board, slot, kind);
                }
                CompiledAction::Call { cb } => {
                    called = true;
                    F::set_pc(cpu, pc);
                    if let Some(cb) = generation.callbacks.get(cb as usize) {
                        call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                    }
                }
                CompiledAction::Conditional {
                    cb,
                    board,
                    slot,
                    compare,
                    value,
                } => {
                    let entry = generation
                        .boards
                        .get(board as usize)
                        .map_or(0, |b| b.get(vcpu, slot as usize));
                    if compare.holds(entry, value) {
                        called = true;
                        F::set_pc(cpu, pc);
                        if let Some(cb) = generation.callbacks.get(cb as usize) {
                            call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                        }
                    }
                }
            }
        }
        called
    }
}
