//! The loops of blocks that run the same memory actions on every access:
//! `MemEach` (a memory-watching plugin) and `CallEachWithMem` (that beside
//! an instruction counter's callback before every instruction).
//!
//! A MemEach block's actions (named by its entry hook) are armed once per
//! run in a [`WatchedMem`] accessor, which holds one callback context for
//! the whole run; the run goes on into MemEach blocks with the same actions
//! and into plain blocks (a memory-watching plugin leaves blocks without
//! accesses plain). [`Engine::exec_watched`] picks the accessor's [`Fire`]:
//! the one callback ([`CallWatch`], or an `InlinedMemCallback`'s own copy
//! of the loop), or several actions ([`SeveralActions`]: inline operations
//! only are applied without touching the callback context, and with at
//! most one per direction of access, as `mem,inline=on` attaches, the
//! load's and the store's are resolved once per run,
//! [`InlineByDirection`]). A callback's request ends the block after its
//! instruction: the loop tests one flag (`WatchedMem::requested`) that
//! only a firing callback sets.
//!
//! A CallEachWithMem block runs the plain loop calling the callback before
//! each instruction, executing through the general loop's
//! [`InstrumentedMem`] armed once per run with the shared actions
//! ([`Engine::exec_watched_calling`]; a second instance of the MemEach
//! accessor cost the MemEach loop a register). Its run goes on into blocks
//! of its kind with the same callback and actions, and into CallEach
//! blocks with the same callback (those without memory accesses).

use super::Engine;
use super::access::{
    CallWatch, Fire, InlineByDirection, InstrumentedMem, MemActions, SeveralActions, WatchedMem,
    call,
};
use super::inlined::MemRunArgs;
use super::plain::{BlockEnd, RunEnd, count};
use super::vcpu::Signals;
use crate::cache::{CompiledMem, CompiledMemKind, ExecMode, Generation, TbHeader};
use crate::frontend::{Flow, Frontend};
use crate::instrument::{CallbackContext, MemFilter, Requests};
use crate::memory::GuestMemory;

impl<F: Frontend> Engine<F> {
    /// Runs a [`ExecMode::MemEach`] block, and the MemEach blocks with the
    /// same memory action it leads to. Out of line for the same reason as
    /// `exec_hooked`, and apart from it: with every loop in one function
    /// LLVM stopped inlining guest memory's accessors.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_watched(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let Some(actions) = Self::mem_each_actions(generation, tb) else {
            return Self::exec_hooked(generation, signals, vcpu, id, tb, cpu, mem);
        };
        let Some((action, watch)) = Self::sole_callback(generation, actions) else {
            return Self::exec_watched_several(generation, signals, vcpu, id, tb, cpu, mem);
        };
        // A callback built with the loop compiled in for this frontend
        // runs its blocks there.
        if let Some(inlined) = Self::inlined_mem(watch.0) {
            let args = MemRunArgs {
                generation,
                signals,
                vcpu,
                id,
                action,
                tb,
                cpu,
                mem,
            };
            return (inlined.run)(args);
        }
        // Compared by value: a loop over the slices cost 6 host
        // instructions per access more on the integer guest.
        let same_actions = |next: &[CompiledMem]| matches!(next, [a] if *a == action);
        let watched = (action.filter, watch, same_actions);
        Self::exec_mem_each(generation, signals, vcpu, id, tb, watched, cpu, mem)
    }

    /// Runs a [`ExecMode::CallEachWithMem`] block, and the blocks it leads
    /// into that call the same callback before every instruction and run
    /// the same memory actions on every access (or have no access: CallEach
    /// blocks): the plain loop with the callback before each instruction,
    /// through the general loop's accessor armed once with the actions.
    /// Apart from the MemEach loop: a second copy of that loop (its own
    /// accessor type) took it one register (`mem` on integer: 4% more host
    /// instructions).
    #[inline(never)]
    pub(super) fn exec_watched_calling<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &'g TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let actions = Self::shared_mem_actions(generation, tb);
        let slot = Self::sole_call_slot(generation, tb);
        let cb = slot.and_then(|slot| Self::callback_in_slot(generation, slot));
        let (Some(actions), Some(slot), Some(cb)) = (actions, slot, cb) else {
            // The general loop, for this block.
            return Self::exec_hooked(generation, signals, vcpu, id, tb, cpu, mem);
        };
        let mut access = InstrumentedMem {
            mem,
            actions: MemActions::of(generation, actions),
            vcpu,
            pc: tb.pc,
            requests: Requests::default(),
        };
        let block = |tb: &TbHeader, cpu: &mut F::Cpu| {
            let ops = generation.ops_of(tb).unwrap_or_default();
            let base = tb.pc;
            let mut iter = ops.iter();
            while let Some(op) = iter.next() {
                let pc = base.wrapping_add(u64::from(op.offset));
                call::<F>(cb, vcpu, pc, cpu, access.mem, &mut access.requests);
                access.pc = pc;
                let flow = F::execute(cpu, &op.op, pc, &mut access);
                let executed = || count(ops.len() - iter.len());
                match flow {
                    Flow::Next => {}
                    Flow::Jump(target) => {
                        return Ok(BlockEnd {
                            next_pc: target,
                            executed: executed(),
                            exit: None,
                            requests: access.requests,
                        });
                    }
                    Flow::Exit(exit) => {
                        let requests = access.requests;
                        return Err(Self::exit_at(exit, pc, op.len, executed(), requests));
                    }
                }
                // As in the CallEach and MemEach loops: the callbacks' own
                // requests end the block here, a handle's at its end.
                if access.requests.any() {
                    return Err(BlockEnd {
                        next_pc: pc.wrapping_add(u64::from(op.len)),
                        executed: executed(),
                        exit: None,
                        requests: access.requests,
                    });
                }
            }
            Ok(BlockEnd {
                next_pc: base.wrapping_add(u64::from(tb.size)),
                executed: count(ops.len()),
                exit: None,
                requests: access.requests,
            })
        };
        let goes_into = |next_tb: &TbHeader| {
            Self::sole_call_slot(generation, next_tb) == Some(slot)
                && (next_tb.mode == ExecMode::CallEach
                    || next_tb.mode == ExecMode::CallEachWithMem
                        && Self::shared_mem_actions(generation, next_tb) == Some(actions))
        };
        Self::plain_run(generation, signals, (id, tb), cpu, block, goes_into)
    }

    /// [`Engine::exec_watched`] for a block whose accesses each run several
    /// memory actions, or one inline operation. Apart from it: a second
    /// copy of the frontend's `execute` there stopped LLVM inlining guest
    /// memory's accessors.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn exec_watched_several(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        id: u32,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let Some(actions) = Self::mem_each_actions(generation, tb) else {
            return Self::exec_hooked(generation, signals, vcpu, id, tb, cpu, mem);
        };
        let by_direction = InlineByDirection::resolve(actions, &generation.boards);
        let watch = SeveralActions {
            actions: MemActions::of(generation, actions),
            // Resolved by direction, they are inline only.
            inline_only: by_direction.is_some()
                || actions
                    .iter()
                    .all(|a| matches!(a.kind, CompiledMemKind::Inline { .. })),
            by_direction,
        };
        let same_actions = |next: &[CompiledMem]| next == actions;
        // Each action checks its own filter.
        let watched = (MemFilter::All, watch, same_actions);
        Self::exec_mem_each(generation, signals, vcpu, id, tb, watched, cpu, mem)
    }

    /// The loop of [`ExecMode::MemEach`] blocks: every instruction runs
    /// through an accessor armed with the block's memory actions (only
    /// instructions that access memory have them, and those all have the
    /// same); stops after an instruction whose callback requested a flush
    /// or exit (or when another thread did). A block that ends normally
    /// leads into the next plain block or MemEach block with the same
    /// actions (see [`Engine::run_goes_on`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_mem_each<W: Fire>(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &TbHeader,
        (filter, watch, same_actions): (MemFilter, W, impl Fn(&[CompiledMem]) -> bool),
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mut access = WatchedMem {
            ctx: CallbackContext::new(vcpu, mem),
            filter,
            watch,
            requested: false,
        };
        let (mut id, mut tb) = (first, first_tb);
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks.
        let mut before = 0u32;
        loop {
            blocks += 1;
            let (next_pc, executed) = if tb.mode == ExecMode::Plain {
                let end = Self::exec_plain(generation, tb, cpu, access.ctx.mem);
                if end.exit.is_some() {
                    let end = BlockEnd {
                        executed: before + end.executed,
                        ..end
                    };
                    return RunEnd {
                        end,
                        last: id,
                        blocks,
                    };
                }
                (end.next_pc, end.executed)
            } else {
                let ops = generation.ops_of(tb).unwrap_or_default();
                let base = tb.pc;
                let mut next_pc = base.wrapping_add(u64::from(tb.size));
                let mut executed = count(ops.len());
                let mut iter = ops.iter();
                while let Some(op) = iter.next() {
                    let pc = base.wrapping_add(u64::from(op.offset));
                    access.ctx.pc = pc;
                    match F::execute(cpu, &op.op, pc, &mut access) {
                        Flow::Next => {}
                        Flow::Jump(target) => {
                            next_pc = target;
                            executed = count(ops.len() - iter.len());
                            break;
                        }
                        Flow::Exit(exit) => {
                            let executed = before + count(ops.len() - iter.len());
                            let requests = access.ctx.requests;
                            return RunEnd {
                                end: Self::exit_at(exit, pc, op.len, executed, requests),
                                last: id,
                                blocks,
                            };
                        }
                    }
                    // Only a memory callback makes requests through its
                    // context: see `WatchedMem::fire`. Requests through a
                    // handle wait for the block's end (`run_goes_on`).
                    if access.requested {
                        let end = BlockEnd {
                            next_pc: pc.wrapping_add(u64::from(op.len)),
                            executed: before + count(ops.len() - iter.len()),
                            exit: None,
                            requests: access.ctx.requests,
                        };
                        return RunEnd {
                            end,
                            last: id,
                            blocks,
                        };
                    }
                }
                (next_pc, executed)
            };
            before += executed;
            let flags = F::tb_flags(cpu);
            // Blocks with no memory access are plain: the run takes them in
            // too, or it would rarely get past a loop's first block.
            let next = Self::run_goes_on(
                generation,
                signals,
                &access.ctx.requests,
                id,
                next_pc,
                flags,
                blocks,
            )
            .filter(|&(_, next_tb)| {
                next_tb.mode == ExecMode::Plain
                    || Self::mem_each_actions(generation, next_tb).is_some_and(&same_actions)
            });
            match next {
                Some((next, next_tb)) => (id, tb) = (next, next_tb),
                None => {
                    let end = BlockEnd {
                        next_pc,
                        executed: before,
                        exit: None,
                        requests: access.ctx.requests,
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

    /// The memory actions every memory-accessing instruction of a
    /// [`ExecMode::MemEach`] block runs (`None` for other blocks).
    #[inline(always)]
    fn mem_each_actions<'g>(
        generation: &'g Generation<F::Op>,
        tb: &TbHeader,
    ) -> Option<&'g [CompiledMem]> {
        if tb.mode != ExecMode::MemEach {
            return None;
        }
        Self::shared_mem_actions(generation, tb)
    }

    /// The memory actions every memory-accessing instruction of a
    /// [`ExecMode::MemEach`] or [`ExecMode::CallEachWithMem`] block runs
    /// (meaningless for other blocks).
    #[inline(always)]
    fn shared_mem_actions<'g>(
        generation: &'g Generation<F::Op>,
        tb: &TbHeader,
    ) -> Option<&'g [CompiledMem]> {
        // The entry hook names the actions the block's memory-accessing
        // instructions share.
        let entry = generation.hooks.get(tb.instr_start as usize)?;
        let from = entry.mem_start as usize;
        generation
            .mem_actions
            .get(from..from + usize::from(entry.mem_len))
    }

    /// The callback of `actions`, if they are one memory callback (the
    /// usual case: one memory-watching plugin).
    #[inline(always)]
    fn sole_callback<'g>(
        generation: &'g Generation<F::Op>,
        actions: &[CompiledMem],
    ) -> Option<(CompiledMem, CallWatch<'g>)> {
        let [action] = *actions else {
            return None;
        };
        let CompiledMemKind::Call { cb } = action.kind else {
            return None;
        };
        let cb = &**generation.mem_callbacks.get(cb as usize)?;
        Some((action, CallWatch(cb)))
    }
}
