//! The plain loop, how a block's or a run's execution ends, and runs of
//! blocks around the plain loop.
//!
//! [`Engine::exec_plain`] executes a block with no instrumentation: no
//! callback, no dynamic dispatch, nothing carried from op to op but the
//! position in the block. It is inlined into the vCPU loop (for plain and
//! Count blocks) and into the loops that wrap something around it.
//! [`Engine::plain_run`] is the run of blocks (see the parent module) for
//! those loops: OnEntry, Tally and CallEachWithMem.

use super::Engine;
use super::vcpu::Signals;
use crate::cache::{Generation, TbHeader};
use crate::frontend::{CpuExit, Flow, Frontend};
use crate::instrument::Requests;
use crate::memory::GuestMemory;

/// How a block's execution ended.
pub(super) struct BlockEnd {
    pub(super) next_pc: u64,
    pub(super) executed: u32,
    pub(super) exit: Option<CpuExit>,
    pub(super) requests: Requests,
}

/// How a run of instrumented blocks ended: an out-of-line loop goes on
/// into the block the last one is chained to while that one runs the same
/// way (see [`Engine::run_goes_on`]). `end` counts the instructions of the
/// whole run.
pub(super) struct RunEnd {
    pub(super) end: BlockEnd,
    /// The id of the run's last block.
    pub(super) last: u32,
    /// How many blocks ran.
    pub(super) blocks: u32,
}

impl<F: Frontend> Engine<F> {
    /// The uninstrumented loop: no callbacks, no dynamic dispatch. Nothing
    /// is carried from op to op but the position in the block: each op's pc
    /// is the block pc plus its stored offset (computed only by the ops that
    /// use it), and the instruction count comes from the position when a
    /// block ends early.
    #[inline(always)]
    pub(super) fn exec_plain(
        generation: &Generation<F::Op>,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> BlockEnd {
        let ops = generation.ops_of(tb).unwrap_or_default();
        let base = tb.pc;
        let mut iter = ops.iter();
        while let Some(op) = iter.next() {
            let pc = base.wrapping_add(u64::from(op.offset));
            match F::execute(cpu, &op.op, pc, mem) {
                Flow::Next => {}
                Flow::Jump(target) => {
                    // Only a block's last instruction may transfer control,
                    // but a frontend breaking that rule still gets an exact count.
                    let executed = if iter.as_slice().is_empty() {
                        count(ops.len())
                    } else {
                        count(ops.len() - iter.len())
                    };
                    return BlockEnd {
                        next_pc: target,
                        executed,
                        exit: None,
                        requests: Requests::default(),
                    };
                }
                Flow::Exit(exit) => {
                    let executed = count(ops.len() - iter.len());
                    return Self::exit_at(exit, pc, op.len, executed, Requests::default());
                }
            }
        }
        BlockEnd {
            next_pc: base.wrapping_add(u64::from(tb.size)),
            executed: count(ops.len()),
            exit: None,
            requests: Requests::default(),
        }
    }

    /// Where the loop continues after an exiting instruction at `pc`.
    pub(super) fn exit_at(
        exit: CpuExit,
        pc: u64,
        len: u8,
        executed: u32,
        requests: Requests,
    ) -> BlockEnd {
        let next_pc = match exit {
            CpuExit::FlushCode => pc.wrapping_add(u64::from(len)),
            _ => pc,
        };
        BlockEnd {
            next_pc,
            executed,
            exit: Some(exit),
            requests,
        }
    }

    /// A run of blocks, each executed by `block` (the plain loop with
    /// something around it), from the `first` block on: when a block ends
    /// normally, the run goes on into the block it is chained to if that
    /// one's plan is current and `goes_into` takes it (see
    /// [`Engine::run_link`]). `block` returning `Err` ends the run after
    /// that block.
    #[inline(always)]
    pub(super) fn plain_run<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        (first, first_tb): (u32, &'g TbHeader),
        cpu: &mut F::Cpu,
        mut block: impl FnMut(&'g TbHeader, &mut F::Cpu) -> Result<BlockEnd, BlockEnd>,
        goes_into: impl Fn(&TbHeader) -> bool,
    ) -> RunEnd {
        let (mut id, mut tb) = (first, first_tb);
        let mut blocks = 0u32;
        // Instructions of the run's earlier blocks.
        let mut before = 0u32;
        loop {
            blocks += 1;
            let end = match block(tb, cpu) {
                Ok(end) => end,
                Err(end) => {
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
            };
            let executed = before + end.executed;
            let next = Self::link_after(generation, signals, id, &end, cpu, blocks).filter(
                |&(_, next_tb)| {
                    next_tb.plan_version == generation.plan_version && goes_into(next_tb)
                },
            );
            match next {
                Some((next, next_tb)) => (id, tb, before) = (next, next_tb, executed),
                None => {
                    return RunEnd {
                        end: BlockEnd { executed, ..end },
                        last: id,
                        blocks,
                    };
                }
            }
        }
    }

    /// Executes the first instruction of `tb` alone, ending the block after
    /// it with `requests`.
    #[cold]
    pub(super) fn exec_first(
        generation: &Generation<F::Op>,
        tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
        requests: Requests,
    ) -> BlockEnd {
        let Some(op) = generation.ops_of(tb).unwrap_or_default().first() else {
            return BlockEnd {
                next_pc: tb.pc.wrapping_add(u64::from(tb.size)),
                executed: 0,
                exit: None,
                requests,
            };
        };
        let pc = tb.pc.wrapping_add(u64::from(op.offset));
        let next_pc = match F::execute(cpu, &op.op, pc, mem) {
            Flow::Next => pc.wrapping_add(u64::from(op.len)),
            Flow::Jump(target) => target,
            Flow::Exit(exit) => return Self::exit_at(exit, pc, op.len, 1, requests),
        };
        BlockEnd {
            next_pc,
            executed: 1,
            exit: None,
            requests,
        }
    }
}

/// An instruction count within one block (at most `MAX_BLOCK_INSNS`).
#[inline(always)]
pub(super) fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
