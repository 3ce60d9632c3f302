//! The loops of blocks that call the same callbacks before every
//! instruction: `CallEach` (one callback: an instruction-counting plugin)
//! and `CallList` (several such plugins).
//!
//! The callback, or the list, is looked up once per block instead of each
//! instruction's hook. One callback context serves the whole run: it holds
//! the vCPU's register file by its concrete type (`CpuRegisters`) and the
//! block's instructions execute through it, so no context is built per
//! call, and the pc stays out of the register file (a callback reading
//! `"pc"` gets the context's). Only a callback's own requests end a block
//! early; a handle's are seen at the block's end. A run goes on into the
//! blocks of its mode that call the same callbacks. [`Engine::exec_hooked`],
//! the entry point, hands a block whose callback is an `InlinedCallback`
//! built for this frontend to the copy of the loop that callback carries
//! (see `inlined.rs`).

use super::Engine;
use super::access::{CpuRegisters, InsnCallbackFn};
use super::inlined::RunArgs;
use super::plain::{BlockEnd, RunEnd, count};
use super::vcpu::Signals;
use crate::cache::{CompiledAction, ExecMode, Generation, TbHeader};
use crate::frontend::{Flow, Frontend};
use crate::instrument::{CallbackContext, Requests};
use crate::memory::GuestMemory;

impl<F: Frontend> Engine<F> {
    /// Runs a [`ExecMode::CallEach`] block and the CallEach blocks it leads
    /// to (and, should a block's plan not resolve, that block alone through
    /// the general loop). Out of line, like each kind of instrumented block
    /// and unlike the plain loop: each loop inlines a copy of the frontend's
    /// `execute`, and with all of them in the vCPU loop the plain loop ran
    /// 3-6% slower (criterion `plugins/per_insn/none`); a block with
    /// callbacks costs far more than the call.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_hooked<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &'g TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        // One call site per loop. A CallEach or MemEach block whose action
        // cannot be resolved (never, by construction) takes the general
        // loop.
        if let Some(first_cb) = Self::call_each_callback(generation, tb) {
            // A callback built with the loop compiled in for this frontend
            // runs its blocks there.
            if let Some(inlined) = Self::inlined(first_cb.1) {
                let args = RunArgs {
                    generation,
                    signals,
                    vcpu,
                    id,
                    slot: first_cb.0,
                    tb,
                    cpu,
                    mem,
                };
                return (inlined.run)(args);
            }
            let call =
                |(_, cb): (u32, &InsnCallbackFn), ctx: &mut CallbackContext<'_>| cb.call(ctx);
            // Blocks of a run mostly share the callback: it is looked up
            // again only when it changes (and the run ends before a block
            // whose callback has a loop of its own).
            let calls_of = |next_tb: &TbHeader, (slot, cb): (u32, &'g InsnCallbackFn)| {
                let next_slot = Self::call_each_slot(generation, next_tb)?;
                if next_slot == slot {
                    return Some((slot, cb));
                }
                let next_cb = Self::callback_in_slot(generation, next_slot)?;
                match Self::inlined(next_cb) {
                    Some(_) => None,
                    None => Some((next_slot, next_cb)),
                }
            };
            let calls = (first_cb, call, calls_of);
            Self::exec_call_each(generation, signals, vcpu, id, tb, calls, cpu, mem)
        } else {
            // Never, by construction: one block, through the general loop.
            let end = if tb.mode == ExecMode::CallEach {
                Self::exec_instrumented::<false>(generation, vcpu, tb, cpu, mem)
            } else {
                Self::exec_instrumented::<true>(generation, vcpu, tb, cpu, mem)
            };
            RunEnd {
                end,
                last: id,
                blocks: 1,
            }
        }
    }

    /// The loop of [`ExecMode::CallEach`] blocks: a block's one callback
    /// before each of its instructions, looked up once for the block;
    /// otherwise the plain loop, stopping after an instruction whose
    /// callback requested a flush or exit (or when another thread did). A
    /// block that ends normally leads into the next CallEach block (see
    /// [`Engine::run_goes_on`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_call_each<'g, C: Copy>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &'g TbHeader,
        (first_calls, call, calls_of): (
            C,
            impl Fn(C, &mut CallbackContext<'_>),
            impl Fn(&'g TbHeader, C) -> Option<C>,
        ),
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        // One context for the run: each instruction moves its pc, and
        // executes through the register file and memory it holds.
        let mut ctx = CallbackContext {
            vcpu,
            pc: first_tb.pc,
            mem,
            requests: Requests::default(),
            registers: CpuRegisters::<F>(cpu),
        };
        let (mut id, mut tb, mut calls) = (first, first_tb, first_calls);
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks.
        let mut before = 0u32;
        loop {
            blocks += 1;
            let ops = generation.ops_of(tb).unwrap_or_default();
            let base = tb.pc;
            let mut next_pc = base.wrapping_add(u64::from(tb.size));
            let mut executed = count(ops.len());
            let mut iter = ops.iter();
            while let Some(op) = iter.next() {
                let pc = base.wrapping_add(u64::from(op.offset));
                // The callback reads the pc from here, not from the
                // register file (`CallbackContext::read_register`).
                ctx.pc = pc;
                call(calls, &mut ctx);
                match F::execute(ctx.registers.0, &op.op, pc, ctx.mem) {
                    Flow::Next => {}
                    Flow::Jump(target) => {
                        // Only a block's last instruction may transfer
                        // control; a frontend breaking that rule still gets
                        // an exact count.
                        next_pc = target;
                        executed = count(ops.len() - iter.len());
                        break;
                    }
                    Flow::Exit(exit) => {
                        let executed = before + count(ops.len() - iter.len());
                        let end = Self::exit_at(exit, pc, op.len, executed, ctx.requests);
                        return RunEnd {
                            end,
                            last: id,
                            blocks,
                        };
                    }
                }
                // Only the callback's own requests end the block here;
                // requests through a handle (another thread's, or this
                // callback's) wait for its end (`run_goes_on`): one test of
                // a byte in this frame per instruction.
                if ctx.requests.any() {
                    let end = BlockEnd {
                        next_pc: pc.wrapping_add(u64::from(op.len)),
                        executed: before + count(ops.len() - iter.len()),
                        exit: None,
                        requests: ctx.requests,
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
            }
            before += executed;
            let flags = F::tb_flags(ctx.registers.0);
            let next = Self::run_goes_on(
                generation,
                signals,
                &ctx.requests,
                id,
                next_pc,
                flags,
                blocks,
            )
            .and_then(|(next, next_tb)| Some((next, next_tb, calls_of(next_tb, calls)?)));
            match next {
                Some((next, next_tb, next_calls)) => {
                    (id, tb, calls) = (next, next_tb, next_calls);
                }
                None => {
                    let end = BlockEnd {
                        next_pc,
                        executed: before,
                        exit: None,
                        requests: ctx.requests,
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
            }
        }
    }

    /// The loop of [`ExecMode::CallList`] blocks: [`Engine::exec_call_each`]
    /// with a list of callbacks before each instruction, all of them
    /// called before it executes (as in the general loop), looked up once
    /// per block. Out of line, apart from the CallEach loop, whose code it
    /// leaves alone.
    #[inline(never)]
    pub(super) fn exec_call_list<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &'g TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let call = |list: &[CompiledAction], ctx: &mut CallbackContext<'_>| {
            for action in list {
                if let CompiledAction::Call { cb } = *action
                    && let Some(cb) = generation.callbacks.get(cb as usize)
                {
                    cb.call(ctx);
                }
            }
        };
        let calls_of = |next_tb: &TbHeader, _| {
            (next_tb.mode == ExecMode::CallList).then(|| Self::call_list(generation, next_tb))
        };
        let calls = (Self::call_list(generation, tb), call, calls_of);
        Self::exec_call_each(generation, signals, vcpu, id, tb, calls, cpu, mem)
    }

    /// The callbacks every instruction of a [`ExecMode::CallList`] block
    /// calls (its first instruction's actions: all are the same calls).
    #[inline(always)]
    fn call_list<'g>(generation: &'g Generation<F::Op>, tb: &TbHeader) -> &'g [CompiledAction] {
        let Some(hook) = generation.hooks.get(tb.instr_start as usize + 1) else {
            return &[];
        };
        generation.actions_of(hook)
    }

    /// The slot of the one callback of a [`ExecMode::CallEach`] block in
    /// the generation's callback table (`None` for other blocks).
    #[inline(always)]
    pub(super) fn call_each_slot(generation: &Generation<F::Op>, tb: &TbHeader) -> Option<u32> {
        if tb.mode != ExecMode::CallEach {
            return None;
        }
        Self::sole_call_slot(generation, tb)
    }

    /// The slot of the one callback every instruction of a
    /// [`ExecMode::CallEach`] or [`ExecMode::CallEachWithMem`] block calls
    /// (meaningless for other blocks).
    #[inline(always)]
    pub(super) fn sole_call_slot(generation: &Generation<F::Op>, tb: &TbHeader) -> Option<u32> {
        // Hook 0 is the (empty) entry hook; every instruction's hook names
        // the same callback.
        Some(generation.hooks.get(tb.instr_start as usize + 1)?.sole_call)
    }

    /// The one callback of a [`ExecMode::CallEach`] block (`None` for other
    /// blocks), with its slot.
    #[inline(always)]
    fn call_each_callback<'g>(
        generation: &'g Generation<F::Op>,
        tb: &TbHeader,
    ) -> Option<(u32, &'g InsnCallbackFn)> {
        let slot = Self::call_each_slot(generation, tb)?;
        Some((slot, Self::callback_in_slot(generation, slot)?))
    }

    /// The instruction callback in `slot` of the generation's table.
    #[inline(always)]
    pub(super) fn callback_in_slot(
        generation: &Generation<F::Op>,
        slot: u32,
    ) -> Option<&InsnCallbackFn> {
        Some(&**generation.callbacks.get(slot as usize)?)
    }
}
