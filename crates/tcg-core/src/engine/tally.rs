//! Inline adds summed instead of applied one by one: tally blocks, runs
//! of them, and the pending instruction count.
//!
//! A block whose only instrumentation is inline adds (a *tally* block) runs
//! the plain loop, then adds to each scoreboard entry it touches the prefix
//! sum of the instructions that ran (exact: adds commute, and nothing on
//! the vCPU can look at the scoreboard in between). `Tally` blocks (a block
//! counter's adds on entry, say) run out of line, in runs
//! ([`Engine::exec_tally_run`]) that sum their adds in locals per entry
//! (each entry of the plan version has a small key,
//! `Generation::tally_keys`; the first [`RUN_TALLY_KEYS`] are summed,
//! others added at once) and apply them when the run ends; a run goes on
//! into tally and plain blocks. If the block adds the same amount per
//! instruction to one entry (an inline instruction counter: `Count`), it
//! stays in the vCPU loop, and consecutive such blocks sum their counts in
//! a [`PendingCount`], applied before anything on the vCPU can read the
//! scoreboard (an instrumented block, a translation, a reset or flush, the
//! return from `run`) and at least every [`MAX_PENDING_INSNS`]
//! instructions.

use super::Engine;
use super::plain::RunEnd;
use super::vcpu::Signals;
use crate::cache::{CountTally, ExecMode, Generation, NONE, Tally, TbHeader, idx};
use crate::frontend::Frontend;
use crate::memory::GuestMemory;

/// Most instructions whose inline counts may wait in a [`PendingCount`]:
/// bounds how late readers on other threads see them.
const MAX_PENDING_INSNS: u64 = 4096;

/// The inline adds of consecutive [`ExecMode::Count`] blocks (an inline
/// instruction counter) that go to the same scoreboard entry, summed here
/// instead of updating the scoreboard block by block. The sum reaches the
/// scoreboard before anything on the vCPU can look at it (before an
/// instrumented block, whose callbacks may read it; before a flush; when
/// the loop returns to the embedder), and at least every
/// [`MAX_PENDING_INSNS`] instructions for readers on other threads.
#[derive(Clone, Copy)]
pub(super) struct PendingCount {
    /// Instructions of Count blocks counted while they all share the
    /// generation's [`CountTally::Shared`] tally, by vCPU `shared_vcpu`.
    shared: u64,
    shared_vcpu: u32,
    /// Index in the current generation's boards; [`NONE`] when empty.
    board: u32,
    slot: u32,
    vcpu: u32,
    per_insn: u64,
    insns: u64,
}

impl PendingCount {
    pub(super) const EMPTY: PendingCount = PendingCount {
        shared: 0,
        shared_vcpu: 0,
        board: NONE,
        slot: 0,
        vcpu: 0,
        per_insn: 0,
        insns: 0,
    };

    /// Applies the pending sum to `generation`'s scoreboard and empties it.
    #[inline]
    pub(super) fn settle<Op: Copy>(&mut self, generation: &Generation<Op>) {
        if self.shared != 0 {
            // The tally cannot have changed since: nothing is planned
            // before the pending count is settled.
            if let CountTally::Shared {
                board,
                slot,
                per_insn,
            } = generation.count_tally
                && let Some(board) = generation.boards.get(board as usize)
            {
                board.add_in_row(
                    self.shared_vcpu,
                    slot as usize,
                    per_insn.wrapping_mul(self.shared),
                );
            }
            self.shared = 0;
        }
        if self.board != NONE {
            if let Some(board) = generation.boards.get(self.board as usize) {
                board.add_in_row(
                    self.vcpu,
                    self.slot as usize,
                    self.per_insn.wrapping_mul(self.insns),
                );
            }
            *self = PendingCount::EMPTY;
        }
    }

    /// Counts `executed` instructions of Count block `tb` on `vcpu`, by
    /// the shared tally while there is one.
    #[inline(always)]
    pub(super) fn add_count<Op: Copy>(
        &mut self,
        generation: &Generation<Op>,
        tb: &TbHeader,
        vcpu: u32,
        executed: u32,
    ) {
        if let CountTally::Shared { .. } = generation.count_tally {
            self.add_shared(generation, vcpu, executed)
        } else {
            self.add(generation, tb, vcpu, executed)
        }
    }

    /// Counts `executed` instructions of a Count block on `vcpu` while all
    /// of them share the generation's tally.
    #[inline(always)]
    pub(super) fn add_shared<Op: Copy>(
        &mut self,
        generation: &Generation<Op>,
        vcpu: u32,
        executed: u32,
    ) {
        self.shared += u64::from(executed);
        self.shared_vcpu = vcpu;
        if self.shared >= MAX_PENDING_INSNS {
            self.settle(generation);
        }
    }

    /// Counts `executed` instructions of Count block `tb` on `vcpu`.
    #[inline(always)]
    pub(super) fn add<Op: Copy>(
        &mut self,
        generation: &Generation<Op>,
        tb: &TbHeader,
        vcpu: u32,
        executed: u32,
    ) {
        let Some(t) = generation.tallies.get(tb.instr_start as usize) else {
            return;
        };
        if self.board == t.board
            && self.slot == t.slot
            && self.per_insn == t.per_insn
            && self.vcpu == vcpu
        {
            self.insns += u64::from(executed);
            if self.insns >= MAX_PENDING_INSNS {
                self.settle(generation);
            }
        } else {
            self.settle(generation);
            *self = PendingCount {
                board: t.board,
                slot: t.slot,
                vcpu,
                per_insn: t.per_insn,
                insns: u64::from(executed),
                ..PendingCount::EMPTY
            };
        }
    }
}

/// How many tally keys (scoreboard entries, see `Generation::tally_keys`)
/// a run of tally blocks sums in locals; adds to others go straight to the
/// scoreboard. A block counter uses two.
const RUN_TALLY_KEYS: usize = 4;

impl<F: Frontend> Engine<F> {
    /// Runs an [`ExecMode::Tally`] block and the tally or plain blocks it
    /// leads into: the plain loop, with each block's adds summed in locals
    /// (per tally key, the first [`RUN_TALLY_KEYS`] of them) and applied to
    /// the scoreboards when the run ends, before anything on the vCPU can
    /// look at them. Out of line: it keeps the uninstrumented loop's
    /// registers, and one call serves the whole run.
    #[inline(never)]
    pub(super) fn exec_tally_run(
        generation: &Generation<F::Op>,
        signals: &Signals,
        vcpu: u32,
        first: u32,
        first_tb: &TbHeader,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> RunEnd {
        let mut sums = [0u64; RUN_TALLY_KEYS];
        let run = Self::plain_run(
            generation,
            signals,
            (first, first_tb),
            cpu,
            |tb, cpu| {
                let end = Self::exec_plain(generation, tb, cpu, mem);
                let start = tb.instr_start as usize;
                let tallies = generation
                    .tallies
                    .get(start..start + tb.instr_len as usize)
                    .unwrap_or_default();
                if end.executed == tb.ops_end.wrapping_sub(tb.ops_start) {
                    for t in tallies {
                        match sums.get_mut(t.key as usize) {
                            Some(pending) => *pending = pending.wrapping_add(t.full),
                            None => add_tally(generation, t.key, vcpu, t.full),
                        }
                    }
                } else {
                    add_partial_tallies(generation, tallies, vcpu, end.executed);
                }
                Ok(end)
            },
            |next_tb| matches!(next_tb.mode, ExecMode::Tally | ExecMode::Plain),
        );
        for (key, &sum) in sums.iter().enumerate() {
            if sum != 0 {
                add_tally(generation, idx(key), vcpu, sum);
            }
        }
        run
    }
}

/// Adds what `tallies` add for a block left after `executed` instructions
/// (those dispatched, including one that exited) straight to the
/// scoreboards: a block left early mostly ends its run.
#[cold]
#[inline(never)]
fn add_partial_tallies<Op: Copy>(
    generation: &Generation<Op>,
    tallies: &[Tally],
    vcpu: u32,
    executed: u32,
) {
    let Some(last) = (executed as usize).checked_sub(1) else {
        return;
    };
    for t in tallies {
        if let Some(&sum) = generation.tally_sums.get(t.sums_start as usize + last) {
            add_tally(generation, t.key, vcpu, sum);
        }
    }
}

/// Adds `sum` to `vcpu`'s value of the scoreboard entry of tally `key`.
fn add_tally<Op: Copy>(generation: &Generation<Op>, key: u32, vcpu: u32, sum: u64) {
    let Some(&(board, slot)) = generation.tally_keys.get(key as usize) else {
        return;
    };
    if let Some(board) = generation.boards.get(board as usize) {
        board.add_in_row(vcpu, slot as usize, sum);
    }
}
