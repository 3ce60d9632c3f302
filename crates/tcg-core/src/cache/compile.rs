//! Compiling a block's [`TbPlan`](crate::TbPlan) into the generation.
//!
//! The plan's actions name a small per-plan table of callbacks and
//! scoreboards; compiling resolves each table entry to the generation's
//! tables once per block (see `slots.rs`), then writes either tallies (a
//! plan of inline adds only: one [`Tally`] per scoreboard entry touched,
//! with per-instruction prefix sums) or hooks (the block-entry hook and one
//! per instruction, built in one pass over the ordered actions). Then it
//! recognises the shapes that have a loop of their own (one callback
//! before every instruction, the same memory actions on every access, ...)
//! and returns the block's [`ExecMode`].

use std::sync::Arc;

use crate::instrument::{InlineKind, MAX_PLAN_ACTIONS, MemFilter, PlanData};

use super::slots::PlanSlots;

use super::{
    CompiledAction, CompiledMem, CompiledMemKind, CountTally, EMPTY_HOOK, ExecMode, Generation,
    InsnHook, NONE, Tally, idx,
};

/// Lengths of (or offsets into) the five instrumentation arrays.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Extents {
    pub(super) hooks: usize,
    pub(super) actions: usize,
    pub(super) mem: usize,
    pub(super) tallies: usize,
    pub(super) sums: usize,
}

impl Extents {
    pub(super) fn minus(self, base: Extents) -> Extents {
        Extents {
            hooks: self.hooks - base.hooks,
            actions: self.actions - base.actions,
            mem: self.mem - base.mem,
            tallies: self.tallies - base.tallies,
            sums: self.sums - base.sums,
        }
    }
    pub(super) fn fits_in(self, room: Extents) -> bool {
        self.hooks <= room.hooks
            && self.actions <= room.actions
            && self.mem <= room.mem
            && self.tallies <= room.tallies
            && self.sums <= room.sums
    }
    pub(super) fn total(self) -> usize {
        self.hooks + self.actions + self.mem + self.tallies + self.sums
    }
}

/// The placeholder for room made in `Generation::actions` before a plan
/// is compiled into it.
const EMPTY_ACTION: CompiledAction = CompiledAction::Call { cb: NONE };

/// The same, in `Generation::mem_actions`.
const EMPTY_MEM: CompiledMem = CompiledMem {
    filter: MemFilter::All,
    kind: CompiledMemKind::Call { cb: NONE },
};

/// A hook's number of actions: hooks count them in 16 bits to stay 16
/// bytes, which a plan never exceeds (`MAX_PLAN_ACTIONS` per block).
#[inline]
fn len16(len: usize) -> u16 {
    u16::try_from(len.min(MAX_PLAN_ACTIONS)).unwrap_or(u16::MAX)
}

impl<Op: Copy> Generation<Op> {
    /// Compiles the instrumentation of the block of `insns` instructions
    /// whose ops start at `ops_start`; returns how it runs and its range in
    /// `hooks` or `tallies`.
    pub(super) fn compile_plan(
        &mut self,
        plan: Option<&PlanData>,
        ops_start: u32,
        insns: usize,
    ) -> (ExecMode, u32, u32) {
        if let Some(plan) = plan {
            self.resolve_tables(&plan.tables);
        }
        match plan {
            // Inline adds only (no callback, conditional, store or memory
            // action): a plain loop with tallies.
            Some(plan) if runs_as_tally(plan) => {
                let (start, len) = self.compile_tally(plan, insns);
                let mode = match self.uniform_tally(start, len, insns) {
                    Some(per_insn) => {
                        if let Some(t) = self.tallies.get_mut(start as usize) {
                            t.per_insn = per_insn;
                            let shared = CountTally::Shared {
                                board: t.board,
                                slot: t.slot,
                                per_insn,
                            };
                            self.count_tally = match self.count_tally {
                                CountTally::Unset => shared,
                                same if same == shared => same,
                                _ => CountTally::Mixed,
                            };
                        }
                        ExecMode::Count
                    }
                    None => ExecMode::Tally,
                };
                (mode, start, len)
            }
            Some(plan) => {
                let at = self.make_room(hooks_room(plan, insns));
                let mode = self.compile_hooks(plan, insns, at, ops_start);
                (mode, idx(at.hooks), idx(insns + 1))
            }
            None => (ExecMode::Plain, NONE, 0),
        }
    }

    /// Whether the `len` hooks at `start` (block entry first) are no action
    /// on entry and the same sole callback before every instruction.
    fn calls_each(&self, start: u32, len: u32) -> bool {
        let Some([entry, first, rest @ ..]) =
            self.hooks.get(start as usize..(start + len) as usize)
        else {
            return false;
        };
        entry.actions_len == 0
            && first.sole_call != NONE
            && rest.iter().all(|h| h.sole_call == first.sole_call)
    }

    /// Whether the `len` hooks at `start` (block entry first) are no action
    /// on entry and the same list of two or more callbacks, and nothing
    /// else, before every instruction.
    fn calls_one_list(&self, start: u32, len: u32) -> bool {
        let Some([entry, first, rest @ ..]) =
            self.hooks.get(start as usize..(start + len) as usize)
        else {
            return false;
        };
        let actions = |h: &InsnHook| {
            let from = h.actions_start as usize;
            self.actions.get(from..from + usize::from(h.actions_len))
        };
        let Some(list) = actions(first) else {
            return false;
        };
        let same = |h: &InsnHook| {
            actions(h).is_some_and(|other| {
                other.len() == list.len()
                    && other.iter().zip(list).all(|pair| match pair {
                        (CompiledAction::Call { cb: x }, CompiledAction::Call { cb: y }) => x == y,
                        _ => false,
                    })
            })
        };
        entry.actions_len == 0
            && list.len() >= 2
            && list
                .iter()
                .all(|a| matches!(a, CompiledAction::Call { .. }))
            && rest.iter().all(same)
    }

    /// Whether the `len` hooks at `start` (block entry first) are actions on
    /// entry and none before any instruction.
    fn acts_on_entry_only(&self, start: u32, len: u32) -> bool {
        let Some([entry, insns @ ..]) = self.hooks.get(start as usize..(start + len) as usize)
        else {
            return false;
        };
        entry.actions_len != 0 && insns.iter().all(|h| h.actions_len == 0)
    }

    /// Whether the `len` hooks at `start` (block entry first) of the block
    /// whose ops start at `ops_start` have the same memory actions on each
    /// instruction that accesses memory (those that do not never have one:
    /// see `Engine::plan_block`), whatever else they run (callers check);
    /// if so, where the first such instruction's actions are (`mem_start`,
    /// `mem_len`), for the entry hook to name (see [`InsnHook`]).
    fn shared_mem(&self, start: u32, len: u32, ops_start: u32) -> Option<(u32, u16)> {
        let [_, insn_hooks @ ..] = self.hooks.get(start as usize..(start + len) as usize)? else {
            return None;
        };
        let ops = self
            .ops
            .get(ops_start as usize..ops_start as usize + insn_hooks.len())
            .unwrap_or_default();
        let mem_actions = |h: &InsnHook| {
            let from = h.mem_start as usize;
            self.mem_actions.get(from..from + usize::from(h.mem_len))
        };
        let first = insn_hooks.iter().find(|h| h.mem_len != 0)?;
        let one = mem_actions(first)?;
        let shared = ops.len() == insn_hooks.len()
            && insn_hooks.iter().zip(ops).all(|(h, op)| {
                if op.accesses_memory {
                    mem_actions(h).is_some_and(|actions| {
                        actions.len() == one.len()
                            && actions
                                .iter()
                                .zip(one)
                                .all(|(a, b)| self.same_mem_action(a, b))
                    })
                } else {
                    h.mem_len == 0
                }
            });
        shared.then_some((first.mem_start, first.mem_len))
    }

    /// Whether two compiled memory actions do the same thing: callbacks are
    /// compared by identity, since one callback attached to many
    /// instructions next to others may have several slots.
    fn same_mem_action(&self, a: &CompiledMem, b: &CompiledMem) -> bool {
        a.filter == b.filter
            && match (a.kind, b.kind) {
                (CompiledMemKind::Call { cb: x }, CompiledMemKind::Call { cb: y }) => {
                    match (
                        self.mem_callbacks.get(x as usize),
                        self.mem_callbacks.get(y as usize),
                    ) {
                        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
                        _ => false,
                    }
                }
                (x, y) => x == y,
            }
    }

    /// The add per instruction if the `len` tallies at `start` are one that
    /// adds the same nonzero amount for each of the `insns` instructions and
    /// nothing on block entry: its prefix sums are `k, 2k, 3k, ...`.
    fn uniform_tally(&self, start: u32, len: u32, insns: usize) -> Option<u64> {
        let [t] = self.tallies.get(start as usize..(start + len) as usize)? else {
            return None;
        };
        let from = t.sums_start as usize;
        let sums = self.tally_sums.get(from..from + insns)?;
        let k = *sums.first()?;
        let uniform = sums
            .iter()
            .zip(1u64..)
            .all(|(&s, n)| s == k.wrapping_mul(n));
        (k != 0 && uniform).then_some(k)
    }

    /// Makes room for `need` more entries at the end of the arrays; returns
    /// where it starts.
    pub(super) fn make_room(&mut self, need: Extents) -> Extents {
        let at = self.extents();
        self.hooks.resize(at.hooks + need.hooks, EMPTY_HOOK);
        self.actions.resize(at.actions + need.actions, EMPTY_ACTION);
        self.mem_actions.resize(at.mem + need.mem, EMPTY_MEM);
        at
    }

    /// Current lengths of the instrumentation arrays.
    pub(super) fn extents(&self) -> Extents {
        Extents {
            hooks: self.hooks.len(),
            actions: self.actions.len(),
            mem: self.mem_actions.len(),
            tallies: self.tallies.len(),
            sums: self.tally_sums.len(),
        }
    }

    /// Compiles a plan of inline adds only into one [`Tally`] per
    /// scoreboard entry it touches; returns their (start, len) in `tallies`.
    fn compile_tally(&mut self, plan: &PlanData, insns: usize) -> (u32, u32) {
        let start = self.tallies.len();
        for &(at, action) in &plan.exec {
            let CompiledAction::Inline {
                board,
                slot,
                kind: InlineKind::Add(imm),
            } = action
            else {
                continue;
            };
            // An entry past the row does nothing (as `Scoreboard` ignores
            // it); tallies only name entries inside it.
            let inside = plan
                .tables
                .boards
                .get(board as usize)
                .is_some_and(|b| (slot as usize) < b.slots());
            let board = PlanSlots::get(&self.plan_slots.boards, board);
            if !inside || board == NONE {
                continue;
            }
            // Plans hardly ever touch more than a couple of entries: a
            // linear search over this block's tallies beats hashing.
            let existing = self
                .tallies
                .get(start..)
                .unwrap_or_default()
                .iter()
                .find(|t| t.board == board && t.slot == slot)
                .map(|t| t.sums_start as usize);
            let sums_start = match existing {
                Some(s) => s,
                None => {
                    let s = self.tally_sums.len();
                    self.tally_sums.resize(s + insns, 0);
                    let key = self.tally_key(board, slot);
                    self.tallies.push(Tally {
                        board,
                        slot,
                        key,
                        sums_start: idx(s),
                        full: 0,
                        per_insn: 0,
                    });
                    s
                }
            };
            // Not yet prefix sums: per-instruction adds, summed up below.
            // Entry adds (at 0) count as made before instruction 0.
            let insn = (at as usize).saturating_sub(1);
            if let Some(cell) = self.tally_sums.get_mut(sums_start + insn) {
                *cell = cell.wrapping_add(imm);
            }
        }
        for t in self.tallies.get_mut(start..).unwrap_or_default() {
            let from = t.sums_start as usize;
            if let Some(sums) = self.tally_sums.get_mut(from..from + insns) {
                let mut acc = 0u64;
                for s in sums {
                    acc = acc.wrapping_add(*s);
                    *s = acc;
                }
                t.full = acc;
            }
        }
        (idx(start), idx(self.tallies.len() - start))
    }

    /// The index of scoreboard entry (`board`, `slot`) in `tally_keys`,
    /// added on first use.
    fn tally_key(&mut self, board: u32, slot: u32) -> u32 {
        let next = idx(self.tally_keys.len());
        let key = *self.tally_key_ids.entry((board, slot)).or_insert(next);
        if key == next {
            self.tally_keys.push((board, slot));
        }
        key
    }

    /// Compiles a plan into hooks (the block-entry hook, then one per
    /// instruction) and their actions, written at `at` in the arrays, which
    /// has room for them; returns how the block runs. The plan's actions
    /// are in instruction order (see `TbPlan::finish`).
    pub(super) fn compile_hooks(
        &mut self,
        plan: &PlanData,
        insns: usize,
        at: Extents,
        ops_start: u32,
    ) -> ExecMode {
        let Generation {
            hooks,
            actions,
            mem_actions,
            plan_slots,
            ..
        } = self;
        let (Some(hooks), Some(acts), Some(mems)) = (
            hooks.get_mut(at.hooks..at.hooks + insns + 1),
            actions.get_mut(at.actions..at.actions + plan.exec.len()),
            mem_actions.get_mut(at.mem..at.mem + plan.mem.len()),
        ) else {
            // Not reached: the callers made the room.
            return ExecMode::Plain;
        };
        // The actions, with their tables' indices made the generation's.
        for (dst, &(_, action)) in acts.iter_mut().zip(&plan.exec) {
            *dst = plan_slots.action(action);
        }
        for (dst, &(_, action)) in mems.iter_mut().zip(&plan.mem) {
            *dst = plan_slots.mem_action(action);
        }
        // One pass down the (ordered) actions, closing a hook whenever the
        // instruction they name moves on.
        let (exec, mem) = (plan.exec.as_slice(), plan.mem.as_slice());
        let (mut e, mut m) = (0usize, 0usize);
        // Where this block's actions start in the generation's arrays, in
        // the hooks' 32 bits once (a plan holds at most
        // `MAX_PLAN_ACTIONS`, so the sums below stay in range).
        let (actions_at, mem_at) = (idx(at.actions), idx(at.mem));
        for (here, hook) in (0u32..).zip(hooks.iter_mut()) {
            let (e0, m0) = (e, m);
            let mut sole_call = NONE;
            while let Some(&(insn, action)) = exec.get(e) {
                if insn != here {
                    break;
                }
                sole_call = match (e == e0, action) {
                    (true, CompiledAction::Call { cb }) => plan_slots.callback(cb),
                    _ => NONE,
                };
                e += 1;
            }
            // Memory actions name their instruction: hook `here` is
            // instruction `here - 1`'s (the entry hook has none).
            let mut mem_calls = false;
            while let Some(&(insn, action)) = mem.get(m) {
                if insn + 1 != here {
                    break;
                }
                mem_calls |= matches!(action.kind, CompiledMemKind::Call { .. });
                m += 1;
            }
            *hook = InsnHook {
                actions_start: actions_at.wrapping_add(e0 as u32),
                actions_len: len16(e - e0),
                // (The entry hook, which has none, gets where the first
                // instruction's start.)
                mem_start: mem_at.wrapping_add(m0 as u32),
                mem_len: len16(m - m0),
                mem_calls,
                // Mostly one callback (one instruction-counting plugin):
                // the loop then calls it without walking the list.
                sole_call,
            };
        }
        let (start, len) = (idx(at.hooks), idx(insns + 1));
        if !plan.mem.is_empty() {
            let Some((mem_start, mem_len)) = self.shared_mem(start, len, ops_start) else {
                return ExecMode::StepsWithMemory;
            };
            let mode = if plan.exec.is_empty() {
                ExecMode::MemEach
            } else if self.calls_each(start, len) {
                ExecMode::CallEachWithMem
            } else {
                return ExecMode::StepsWithMemory;
            };
            if let Some(entry) = self.hooks.get_mut(start as usize) {
                entry.mem_start = mem_start;
                entry.mem_len = mem_len;
            }
            mode
        } else if self.calls_each(start, len) {
            ExecMode::CallEach
        } else if self.calls_one_list(start, len) {
            ExecMode::CallList
        } else if self.acts_on_entry_only(start, len) {
            ExecMode::OnEntry
        } else {
            ExecMode::Steps
        }
    }
}

/// The room a plan of hooks takes in the arrays for a block of `insns`
/// instructions: the entry hook and one per instruction, and its actions.
pub(super) fn hooks_room(plan: &PlanData, insns: usize) -> Extents {
    Extents {
        hooks: insns + 1,
        actions: plan.exec.len(),
        mem: plan.mem.len(),
        ..Extents::default()
    }
}

/// True if `plan` holds only inline adds before instructions or on block
/// entry: no callback, no conditional, no store, no memory action. Such a
/// block runs as [`ExecMode::Tally`] (or [`ExecMode::Count`]).
pub(super) fn runs_as_tally(plan: &PlanData) -> bool {
    plan.adds_only && plan.mem.is_empty()
}
