//! The generation's tables of callbacks and scoreboards, and how a plan's
//! own tables map onto them.
//!
//! A plan's actions name callbacks and scoreboards by index into the plan's
//! small tables; compiling a block resolves each entry once to a slot of the
//! generation's tables ([`Generation::resolve_tables`], [`PlanSlots`]), so
//! compiled actions are `Copy` indices. Each callback slot counts the
//! compiled actions naming it ([`SlotUses`]): when re-planning leaves a
//! callback named by no plan, it is dropped at once
//! ([`Generation::release_callbacks`]) and its slot reused, so re-planning
//! after every reset does not pile up closures.

use std::sync::{Arc, LazyLock};

use hashbrown::HashMap;

use crate::instrument::{
    CallbackContext, InsnCallback, MemAccessInfo, MemCallback, PlanTables, Scoreboard,
};

use super::replan::PlanSlot;
use super::{CompiledAction, CompiledMem, CompiledMemKind, Generation, NONE, idx};

/// Stands in for a callback no plan names any more, until its slot is
/// reused: never called (no action names the slot).
static NOOP_CALLBACK: LazyLock<InsnCallback> =
    LazyLock::new(|| Arc::new(|_: &mut CallbackContext<'_>| {}));

static NOOP_MEM_CALLBACK: LazyLock<MemCallback> =
    LazyLock::new(|| Arc::new(|_: &mut CallbackContext<'_>, _: &MemAccessInfo| {}));

/// Use counts of a generation's callback slots, with the free ones.
#[derive(Default)]
pub(super) struct SlotUses {
    uses: Vec<u32>,
    free: Vec<u32>,
    /// The slot filled last: callbacks are mostly distinct closures (one per
    /// instruction), so only a run of the same one shares a slot, found
    /// without hashing.
    last: Option<u32>,
}

impl SlotUses {
    pub(super) fn clear(&mut self) {
        self.uses.clear();
        self.free.clear();
        self.last = None;
    }

    /// The slot of `cb` in `slots` (reusing the last one if it holds `cb`),
    /// counting `uses` more uses.
    fn slot_for<T: ?Sized>(&mut self, slots: &mut Vec<Arc<T>>, cb: &Arc<T>, uses: u32) -> u32 {
        if let Some(last) = self.last
            && slots.get(last as usize).is_some_and(|s| Arc::ptr_eq(s, cb))
        {
            if let Some(n) = self.uses.get_mut(last as usize) {
                *n += uses;
            }
            return last;
        }
        let slot = match self.free.pop() {
            Some(free) if (free as usize) < slots.len() => {
                if let Some(s) = slots.get_mut(free as usize) {
                    *s = Arc::clone(cb);
                }
                if let Some(n) = self.uses.get_mut(free as usize) {
                    *n = uses;
                }
                free
            }
            _ => {
                slots.push(Arc::clone(cb));
                self.uses.push(uses);
                idx(slots.len() - 1)
            }
        };
        self.last = Some(slot);
        slot
    }

    /// One use of `slot` fewer; at none, its callback is dropped for
    /// `placeholder` and the slot is free.
    fn release<T: ?Sized>(&mut self, slots: &mut [Arc<T>], slot: u32, placeholder: &Arc<T>) {
        let Some(n) = self.uses.get_mut(slot as usize) else {
            return;
        };
        // A free slot has no use to release (and must not be freed twice).
        let Some(left) = n.checked_sub(1) else {
            return;
        };
        *n = left;
        if left == 0 {
            if let Some(s) = slots.get_mut(slot as usize) {
                *s = Arc::clone(placeholder);
            }
            self.free.push(slot);
            if self.last == Some(slot) {
                self.last = None;
            }
        }
    }
}

/// Where the callbacks and scoreboards of the plan being compiled sit in
/// the generation's tables.
#[derive(Default)]
pub(super) struct PlanSlots {
    callbacks: Vec<u32>,
    mem_callbacks: Vec<u32>,
    pub(super) boards: Vec<u32>,
}

impl PlanSlots {
    pub(super) fn get(table: &[u32], i: u32) -> u32 {
        table.get(i as usize).copied().unwrap_or(NONE)
    }

    /// The generation's slot of the plan's callback `cb`.
    #[inline]
    pub(super) fn callback(&self, cb: u32) -> u32 {
        Self::get(&self.callbacks, cb)
    }

    /// A plan's action, naming the generation's tables instead.
    #[inline]
    pub(super) fn action(&self, action: CompiledAction) -> CompiledAction {
        match action {
            CompiledAction::Call { cb } => CompiledAction::Call {
                cb: Self::get(&self.callbacks, cb),
            },
            CompiledAction::Inline { board, slot, kind } => CompiledAction::Inline {
                board: Self::get(&self.boards, board),
                slot,
                kind,
            },
            CompiledAction::Conditional {
                cb,
                board,
                slot,
                compare,
                value,
            } => CompiledAction::Conditional {
                cb: Self::get(&self.callbacks, cb),
                board: Self::get(&self.boards, board),
                slot,
                compare,
                value,
            },
        }
    }

    /// A plan's memory action, naming the generation's tables instead.
    #[inline]
    pub(super) fn mem_action(&self, action: CompiledMem) -> CompiledMem {
        let kind = match action.kind {
            CompiledMemKind::Call { cb } => CompiledMemKind::Call {
                cb: Self::get(&self.mem_callbacks, cb),
            },
            CompiledMemKind::Inline { board, slot, kind } => CompiledMemKind::Inline {
                board: Self::get(&self.boards, board),
                slot,
                kind,
            },
        };
        CompiledMem {
            filter: action.filter,
            kind,
        }
    }
}

impl<Op: Copy> Generation<Op> {
    /// Resolves the plan's callbacks and scoreboards to this generation's,
    /// counting the uses of each callback.
    pub(super) fn resolve_tables(&mut self, tables: &PlanTables) {
        // The fields apart, not the slots moved out and back: that copy of
        // the slots' headers cost more than the rest of this function.
        let Generation {
            plan_slots: slots,
            callbacks,
            callback_uses,
            mem_callbacks,
            mem_callback_uses,
            boards,
            board_ids,
            ..
        } = self;
        slots.boards.clear();
        for board in &tables.boards {
            slots.boards.push(board_index(boards, board_ids, board));
        }
        slots.callbacks.clear();
        for (cb, &uses) in tables.callbacks.iter().zip(&tables.callback_uses) {
            slots.callbacks.push(match uses {
                // Named by no action: given no slot, so nothing keeps it.
                0 => NONE,
                n => callback_uses.slot_for(callbacks, cb, n),
            });
        }
        slots.mem_callbacks.clear();
        for (cb, &uses) in tables.mem_callbacks.iter().zip(&tables.mem_callback_uses) {
            slots.mem_callbacks.push(match uses {
                0 => NONE,
                n => mem_callback_uses.slot_for(mem_callbacks, cb, n),
            });
        }
    }

    /// Forgets the callbacks the actions of `slot` name (a plan about to be
    /// replaced): those no other plan names are dropped now.
    pub(super) fn release_callbacks(&mut self, slot: &PlanSlot) {
        let actions = slot.start.actions..slot.start.actions + slot.len.actions;
        for action in self.actions.get(actions).unwrap_or_default() {
            if let CompiledAction::Call { cb } | CompiledAction::Conditional { cb, .. } = *action {
                self.callback_uses
                    .release(&mut self.callbacks, cb, &NOOP_CALLBACK);
            }
        }
        let mem = slot.start.mem..slot.start.mem + slot.len.mem;
        for action in self.mem_actions.get(mem).unwrap_or_default() {
            if let CompiledMemKind::Call { cb } = action.kind {
                self.mem_callback_uses
                    .release(&mut self.mem_callbacks, cb, &NOOP_MEM_CALLBACK);
            }
        }
    }
}

fn arc_key<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc).cast::<()>() as usize
}

/// The index of `board` in a generation's `boards` (indexed by
/// `board_ids`), added if new.
#[inline]
fn board_index(
    boards: &mut Vec<Arc<Scoreboard>>,
    board_ids: &mut HashMap<usize, u32>,
    board: &Arc<Scoreboard>,
) -> u32 {
    if let Some(last) = boards.last()
        && Arc::ptr_eq(last, board)
    {
        return idx(boards.len() - 1);
    }
    let key = arc_key(board);
    if let Some(&i) = board_ids.get(&key) {
        return i;
    }
    let i = idx(boards.len());
    boards.push(Arc::clone(board));
    board_ids.insert(key, i);
    i
}
