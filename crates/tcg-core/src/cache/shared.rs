//! Translations shared by the engines of one process's threads.
//!
//! Each guest thread's engine keeps its own generations, but a block is
//! planned once per process, as QEMU's shared block cache translates it
//! once: an engine that translated a block publishes its guest bytes and
//! plan here, keyed by `(pc, flags)`, and another engine meeting the same
//! block decodes it (cheap, and how it knows the bytes are the same) and
//! takes the published plan instead of asking its instrumentation again.
//! So a plugin's `tb_trans` runs once per block, whichever thread runs it.
//!
//! A published plan is taken only if
//! - the bytes the taker decoded are the published ones (code changed
//!   since, by any thread, is planned anew: nothing here needs to be told
//!   of self-modifying code), and
//! - the taker's instrumentation gives the stamp the plan was made under
//!   ([`PlanStamp`]): a reset changes the stamp before it asks any engine
//!   to plan again, so an engine that already planned again after a reset
//!   can never take a plan made before it.
//!
//! A range an engine invalidates (a module unmapped) is dropped here too,
//! so code mapped there later is planned anew even when its bytes are
//! equal, as QEMU translates it anew. Entries under another stamp than the
//! newest are dropped when the newest is first seen: the callbacks of a
//! reset plugin are not kept alive here.
//!
//! An engine that finds nothing claims the block ([`Claim`]) while it
//! plans it; another engine meeting the same block meanwhile waits for
//! that plan rather than planning it too, so threads that reach new code
//! together still plan it once. It waits at most [`MAX_CLAIM_WAIT`]: a
//! claim whose thread is gone (a fork's child has only the forking
//! thread) or slow only costs a second plan.
//!
//! The table is best effort, like the compiled-code table: the lock is
//! only tried, a few times, and a lookup that does not get it misses (a
//! fork's child inherits the lock as it was, but not the thread that
//! held it).

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use hashbrown::HashMap;

use crate::instrument::{PlanData, PlanStamp};

/// The most bytes the table's entries take (about); past it, it starts
/// over (engines keep the blocks they have; only later adoptions miss).
const MAX_SHARED_BYTES: usize = 32 << 20;

/// Tries of the lock before a lookup or publication is given up.
const LOCK_TRIES: u32 = 64;

/// The longest an engine waits for another's plan of the same block
/// before planning it too (the other may be a thread a fork left behind).
const MAX_CLAIM_WAIT: Duration = Duration::from_millis(100);

/// How often a waiting engine looks again.
const CLAIM_POLL: Duration = Duration::from_micros(20);

/// What made a block's plan: no instrumentation at all, or one whose
/// plans are shared under a stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlanSource {
    Bare,
    Stamped(PlanStamp),
}

/// One published translation: the guest code it was made from and its
/// plan (`None`: nothing attached).
#[derive(Debug)]
pub(crate) struct SharedTranslation {
    pub(crate) size: u32,
    pub(crate) raws: Box<[u32]>,
    pub(crate) source: PlanSource,
    pub(crate) plan: Option<PlanData>,
}

impl SharedTranslation {
    /// About how many bytes this takes.
    fn bytes(&self) -> usize {
        let plan = self.plan.as_ref().map_or(0, |p| {
            let tables = &p.tables;
            std::mem::size_of_val(p.exec.as_slice())
                + std::mem::size_of_val(p.mem.as_slice())
                + 16 * (tables.callbacks.len() + tables.mem_callbacks.len() + tables.boards.len())
        });
        std::mem::size_of::<(u64, u32, Entry)>() + std::mem::size_of_val(&*self.raws) + plan
    }

    /// Whether a block of `size` bytes whose instructions are `raws`,
    /// planned under `source`, is this one.
    pub(crate) fn matches(&self, size: u32, raws: &[u32], source: PlanSource) -> bool {
        self.size == size && self.source == source && *self.raws == *raws
    }
}

/// A published translation, or one an engine is planning now.
struct Entry {
    translation: Arc<SharedTranslation>,
    planned: bool,
}

#[derive(Default)]
struct Table {
    /// The source of every entry.
    source: Option<PlanSource>,
    entries: HashMap<(u64, u32), Entry>,
    /// What the entries take, about.
    bytes: usize,
}

impl Table {
    /// Makes `source` the table's, dropping the entries of another.
    fn adopt_source(&mut self, source: PlanSource) {
        if self.source != Some(source) {
            self.clear();
            self.source = Some(source);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn insert(&mut self, key: (u64, u32), entry: Entry) {
        self.remove(key);
        let bytes = entry.translation.bytes();
        if self.bytes + bytes > MAX_SHARED_BYTES {
            self.clear();
        }
        self.bytes += bytes;
        self.entries.insert(key, entry);
    }

    fn remove(&mut self, key: (u64, u32)) {
        if let Some(old) = self.entries.remove(&key) {
            self.bytes -= old.translation.bytes();
        }
    }
}

/// What [`SharedTranslations::claim`] found.
pub(crate) enum Claim {
    /// The block's plan, published by another engine (or this one).
    Published(Arc<SharedTranslation>),
    /// Nobody else plans it: the caller does, and publishes it or
    /// releases the claim.
    Claimed,
    /// The table was not free, or another engine took too long: the
    /// caller plans it, without a claim.
    Unclaimed,
}

/// The translations the engines of a process share (see the module docs).
#[derive(Default)]
pub(crate) struct SharedTranslations {
    table: Mutex<Table>,
}

impl std::fmt::Debug for SharedTranslations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTranslations").finish_non_exhaustive()
    }
}

impl SharedTranslations {
    fn table(&self) -> Option<MutexGuard<'_, Table>> {
        for _ in 0..LOCK_TRIES {
            match self.table.try_lock() {
                Ok(table) => return Some(table),
                // A thread panicked holding it: every change is whole.
                Err(TryLockError::Poisoned(e)) => return Some(e.into_inner()),
                Err(TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
        None
    }

    /// The published plan of the block at `(pc, flags)` of `size` bytes
    /// whose instructions are `raws`, planned under `source`; or the claim
    /// to plan it. While another engine plans that same block, waits for
    /// its plan, at most [`MAX_CLAIM_WAIT`]: threads meeting new code
    /// together then still plan it once.
    pub(crate) fn claim(
        &self,
        pc: u64,
        flags: u32,
        size: u32,
        raws: &[u32],
        source: PlanSource,
    ) -> Claim {
        let mut waited = None;
        loop {
            let Some(mut table) = self.table() else {
                return Claim::Unclaimed;
            };
            table.adopt_source(source);
            match table.entries.get(&(pc, flags)) {
                Some(e) if e.translation.matches(size, raws, source) => {
                    if e.planned {
                        return Claim::Published(Arc::clone(&e.translation));
                    }
                }
                _ => {
                    let translation = SharedTranslation {
                        size,
                        raws: raws.into(),
                        source,
                        plan: None,
                    };
                    let entry = Entry {
                        translation: Arc::new(translation),
                        planned: false,
                    };
                    table.insert((pc, flags), entry);
                    return Claim::Claimed;
                }
            }
            drop(table);
            // Another engine is planning it.
            let since = *waited.get_or_insert_with(Instant::now);
            if since.elapsed() > MAX_CLAIM_WAIT {
                return Claim::Unclaimed;
            }
            std::thread::sleep(CLAIM_POLL);
        }
    }

    /// Publishes `translation` for `(pc, flags)`, in place of any before
    /// (a claim included).
    pub(crate) fn publish(&self, pc: u64, flags: u32, translation: SharedTranslation) {
        let Some(mut table) = self.table() else {
            return;
        };
        table.adopt_source(translation.source);
        let entry = Entry {
            translation: Arc::new(translation),
            planned: true,
        };
        table.insert((pc, flags), entry);
    }

    /// Gives up a claim on `(pc, flags)` that will not be published.
    pub(crate) fn release(&self, pc: u64, flags: u32) {
        if let Some(mut table) = self.table()
            && table.entries.get(&(pc, flags)).is_some_and(|e| !e.planned)
        {
            table.remove((pc, flags));
        }
    }

    /// Drops every translation of a block overlapping `[start, start + len)`.
    pub(crate) fn invalidate_range(&self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        if let Some(mut table) = self.table() {
            let mut freed = 0;
            table.entries.retain(|&(pc, _), e| {
                let keep = pc >= end || pc.saturating_add(u64::from(e.translation.size)) <= start;
                if !keep {
                    freed += e.translation.bytes();
                }
                keep
            });
            table.bytes -= freed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAWS: [u32; 2] = [0x13, 0x13];

    fn translation(size: u32, source: PlanSource) -> SharedTranslation {
        SharedTranslation {
            size,
            raws: vec![0x13; size as usize / 4].into(),
            source,
            plan: None,
        }
    }

    fn published(claim: Claim) -> bool {
        matches!(claim, Claim::Published(_))
    }

    #[test]
    fn a_new_source_drops_the_entries_of_the_old() {
        let shared = SharedTranslations::default();
        let old = PlanSource::Stamped(PlanStamp::new(1, 1));
        let new = PlanSource::Stamped(PlanStamp::new(1, 2));
        shared.publish(0x1000, 0, translation(8, old));
        assert!(published(shared.claim(0x1000, 0, 8, &RAWS, old)));
        assert!(matches!(
            shared.claim(0x1000, 0, 8, &RAWS, new),
            Claim::Claimed
        ));
        // Gone for good: the old source's callbacks are not kept.
        assert!(!published(shared.claim(0x1000, 0, 8, &RAWS, old)));
    }

    #[test]
    fn the_table_starts_over_when_full() {
        let mut table = Table::default();
        let entry = || Entry {
            translation: Arc::new(translation(8, PlanSource::Bare)),
            planned: true,
        };
        let each = entry().translation.bytes();
        let fit = (MAX_SHARED_BYTES / each) as u64;
        for pc in 0..fit {
            table.insert((pc * 8, 0), entry());
        }
        // Published again: counted once.
        table.insert((0, 0), entry());
        assert_eq!(
            (table.entries.len() as u64, table.bytes),
            (fit, fit as usize * each)
        );
        table.remove((8, 0));
        assert_eq!(table.bytes, (fit as usize - 1) * each);
        table.insert((8, 0), entry());
        table.insert((fit * 8, 0), entry());
        assert_eq!((table.entries.len(), table.bytes), (1, each));
    }

    #[test]
    fn invalidating_a_range_drops_the_blocks_overlapping_it() {
        let shared = SharedTranslations::default();
        let pcs = [0x1000, 0x1ffc, 0x2000, 0x2ff8, 0x3000];
        for pc in pcs {
            shared.publish(pc, 0, translation(8, PlanSource::Bare));
        }
        shared.invalidate_range(0x2000, 0x1000);
        let kept: Vec<u64> = pcs
            .into_iter()
            .filter(|&pc| published(shared.claim(pc, 0, 8, &RAWS, PlanSource::Bare)))
            .collect();
        // 0x1ffc's 8 bytes reach into the range.
        assert_eq!(kept, [0x1000, 0x3000]);
    }

    #[test]
    fn a_plan_is_taken_only_for_the_same_bytes_and_flags() {
        let shared = SharedTranslations::default();
        shared.publish(0x1000, 0, translation(8, PlanSource::Bare));
        let claim =
            |flags, size, raws: &[u32]| shared.claim(0x1000, flags, size, raws, PlanSource::Bare);
        assert!(matches!(claim(1, 8, &RAWS), Claim::Claimed));
        assert!(matches!(claim(0, 4, &RAWS[..1]), Claim::Claimed));
        // The claim for other bytes replaced the entry: planned anew.
        assert!(matches!(claim(0, 8, &[0x13, 0x93]), Claim::Claimed));
        assert!(matches!(claim(0, 8, &RAWS), Claim::Claimed));
    }

    #[test]
    fn an_engine_waits_for_the_plan_another_is_making() {
        let shared = Arc::new(SharedTranslations::default());
        assert!(matches!(
            shared.claim(0x1000, 0, 8, &RAWS, PlanSource::Bare),
            Claim::Claimed
        ));
        let waiter = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || shared.claim(0x1000, 0, 8, &RAWS, PlanSource::Bare))
        };
        std::thread::sleep(Duration::from_millis(5));
        shared.publish(0x1000, 0, translation(8, PlanSource::Bare));
        assert!(published(waiter.join().unwrap()));
    }

    #[test]
    fn a_claim_given_up_or_never_published_lets_others_plan() {
        let shared = SharedTranslations::default();
        let claim = || shared.claim(0x1000, 0, 8, &RAWS, PlanSource::Bare);
        assert!(matches!(claim(), Claim::Claimed));
        shared.release(0x1000, 0);
        assert!(matches!(claim(), Claim::Claimed));
        // Claimed and never published (its thread gone): waited for, then
        // planned without a claim.
        let started = Instant::now();
        assert!(matches!(claim(), Claim::Unclaimed));
        assert!(started.elapsed() >= MAX_CLAIM_WAIT);
    }
}
