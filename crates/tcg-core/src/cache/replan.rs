//! Planning a cached block again after a re-instrumentation, in place.
//!
//! [`Engine::reinstrument`](crate::Engine::reinstrument) bumps the
//! generation's plan version in O(1); each block keeps its decoded ops, id,
//! chains and jump-cache entries and is planned again when next entered.
//! [`Generation::replan`] compiles the new plan over the old one when it
//! fits (the usual case: a plugin re-registering the same kinds of
//! callbacks), else at the end of the arrays, leaving the old one behind as
//! garbage until a flush, forced once it outweighs the live
//! instrumentation ([`Generation::mostly_stale`]). The callbacks only the
//! old plan named are dropped at once (see `slots.rs`).

use crate::instrument::PlanData;

use super::compile::{Extents, hooks_room, runs_as_tally};
use super::{Generation, TbHeader, idx};

/// One block's share of the instrumentation arrays.
#[derive(Clone, Copy, Debug)]
pub(super) struct PlanSlot {
    pub(super) start: Extents,
    pub(super) len: Extents,
}

impl<Op: Copy> Generation<Op> {
    /// Replaces the instrumentation of block `id` (planned under an older
    /// `plan_version`) with `plan`, keeping its decoded ops, its index entry
    /// and its chain links. A plan of hooks that fits where the old hooks
    /// were (the same block planned alike: the usual case after a reset) is
    /// compiled over them, so re-planning neither grows the arrays nor
    /// moves anything; otherwise it is compiled at the end of the arrays
    /// (a tally plan is then moved over the old one when it fits), and the
    /// old plan stays behind as garbage, counted in `stale_entries`.
    pub(crate) fn replan(&mut self, id: u32, plan: Option<&PlanData>) {
        let Some(&old) = self.tbs.get(id as usize) else {
            return;
        };
        let insns = old.ops_end.saturating_sub(old.ops_start) as usize;
        let old_slot = self.extents_of(&old);
        if let Some(slot) = &old_slot {
            self.release_callbacks(slot);
        }
        let (mode, instr_start, instr_len) = match plan {
            Some(plan) if !runs_as_tally(plan) => {
                self.resolve_tables(&plan.tables);
                let need = hooks_room(plan, insns);
                let at = match old_slot {
                    Some(slot) if old.mode.runs_steps() && need.fits_in(slot.len) => {
                        self.stale_entries += slot.len.total() - need.total();
                        slot.start
                    }
                    _ => {
                        self.stale_entries += old_slot.map_or(0, |slot| slot.len.total());
                        self.make_room(need)
                    }
                };
                let mode = self.compile_hooks(plan, insns, at, old.ops_start);
                (mode, idx(at.hooks), idx(insns + 1))
            }
            _ => {
                let before = self.extents();
                let (mode, mut instr_start, instr_len) =
                    self.compile_plan(plan, old.ops_start, insns);
                let added = self.extents().minus(before);
                if let Some(slot) = old_slot {
                    if mode.tallies() && old.mode.tallies() && added.fits_in(slot.len) {
                        self.move_tallies(before, &slot);
                        instr_start = idx(slot.start.tallies);
                        self.stale_entries += slot.len.total() - added.total();
                    } else {
                        self.stale_entries += slot.len.total();
                    }
                }
                (mode, instr_start, instr_len)
            }
        };
        let version = self.plan_version;
        if let Some(tb) = self.tbs.get_mut(id as usize) {
            tb.mode = mode;
            tb.instr_start = instr_start;
            tb.instr_len = instr_len;
            tb.plan_version = version;
        }
    }

    /// Where block `tb`'s instrumentation lives (`None` for a plain block).
    /// A block's entries are contiguous in each array: compiling pushes
    /// them in order.
    fn extents_of(&self, tb: &TbHeader) -> Option<PlanSlot> {
        let start = tb.instr_start as usize;
        let len = tb.instr_len as usize;
        match tb.mode {
            mode if mode.tallies() => {
                let tallies = self.tallies.get(start..start + len)?;
                let insns = tb.ops_end.saturating_sub(tb.ops_start) as usize;
                let sums = tallies.first().map_or(0, |t| t.sums_start as usize);
                Some(PlanSlot {
                    start: Extents {
                        tallies: start,
                        sums,
                        ..Extents::default()
                    },
                    len: Extents {
                        tallies: len,
                        sums: len * insns,
                        ..Extents::default()
                    },
                })
            }
            mode if mode.runs_steps() => {
                let hooks = self.hooks.get(start..start + len)?;
                let (first, last) = (hooks.first()?, hooks.last()?);
                let actions = first.actions_start as usize;
                let actions_end = last.actions_start as usize + usize::from(last.actions_len);
                // The entry hook has no memory actions; the others' ranges
                // follow one another.
                let insn_hooks = hooks.get(1..).unwrap_or_default();
                let mem = insn_hooks.first().map_or(0, |h| h.mem_start as usize);
                let mem_end = insn_hooks
                    .last()
                    .map_or(0, |h| h.mem_start as usize + usize::from(h.mem_len));
                Some(PlanSlot {
                    start: Extents {
                        hooks: start,
                        actions,
                        mem,
                        ..Extents::default()
                    },
                    len: Extents {
                        hooks: len,
                        actions: actions_end.saturating_sub(actions),
                        mem: mem_end.saturating_sub(mem),
                        ..Extents::default()
                    },
                })
            }
            // Plain: no instrumentation.
            _ => None,
        }
    }

    /// Moves the tally plan compiled past `before` into `slot` (which it
    /// fits), rebasing its internal indices, and truncates the arrays to
    /// `before`.
    fn move_tallies(&mut self, before: Extents, slot: &PlanSlot) {
        let to = slot.start;
        for t in self.tallies.get_mut(before.tallies..).unwrap_or_default() {
            t.sums_start = idx(to.sums + (t.sums_start as usize - before.sums));
        }
        self.tallies.copy_within(before.tallies.., to.tallies);
        self.tally_sums.copy_within(before.sums.., to.sums);
        self.tallies.truncate(before.tallies);
        self.tally_sums.truncate(before.sums);
    }

    /// True once re-planning left more garbage than a flush is worth
    /// keeping: several times the live instrumentation, and not tiny.
    pub(crate) fn mostly_stale(&self) -> bool {
        let total = self.hooks.len()
            + self.actions.len()
            + self.mem_actions.len()
            + self.tallies.len()
            + self.tally_sums.len();
        let live = total.saturating_sub(self.stale_entries);
        let limit = 8 * live + (1 << 16);
        // Callbacks of superseded plans are not tracked one by one: their
        // count is bounded against the live instrumentation instead.
        self.stale_entries > limit || self.callbacks.len() + self.mem_callbacks.len() > limit
    }
}
