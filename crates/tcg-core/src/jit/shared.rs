//! Compiled code shared by the engines of one process's threads.
//!
//! Each guest thread has an engine, with a cache generation of its own
//! (its blocks, chain cells and jump table, reclaimed at its own quiescent
//! points), but a hot block is compiled once for all of them: the machine
//! code is published here, keyed by its whole [`BlockSource`], and an
//! engine about to compile an equal source places the published code
//! instead, with its own values at the link sites (`codegen/link.rs`).
//! Equal sources make equal code, so what an engine adopts is what it
//! would have compiled: code of a range another thread unmapped and
//! mapped again with other instructions has another source and is never
//! adopted, and nothing here needs invalidating.
//!
//! The table is best effort: a lookup or insertion that finds the lock
//! taken is skipped, and the engine compiles for itself. So no thread ever
//! waits for another here, and a child process forked while another
//! thread held the lock (it is not in the child) only stops sharing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, TryLockError};

use cranelift_codegen::isa::OwnedTargetIsa;

use super::code::CodeStore;
use super::codegen::{BlockSource, MachineCode};
use super::runtime::Helpers;

/// The most machine-code bytes the table keeps: past it, it starts over
/// (engines keep the code they placed; only later adoptions miss).
pub(crate) const MAX_SHARED_BYTES: usize = 64 << 20;

/// What the engines sharing code share: the ISA, the memory stubs every
/// block's slow paths call (so the helpers compiled code calls are the
/// same for all), and the published code.
pub(crate) struct SharedCode {
    pub(crate) isa: OwnedTargetIsa,
    pub(crate) helpers: Helpers,
    /// The code every store starts with (see `codegen::build_trampoline`).
    pub(crate) trampoline: MachineCode,
    table: Mutex<Table<BlockSource>>,
    /// Holds the stubs `helpers` point to, for as long as any engine
    /// sharing them lives: longer than any generation's code. Never
    /// locked: the mutex only makes the store, which is `Send`, `Sync`.
    _stubs: Mutex<CodeStore>,
}

/// Published code by source, and its size in bytes.
struct Table<K> {
    code: HashMap<K, Arc<MachineCode>>,
    bytes: usize,
}

impl<K: std::hash::Hash + Eq> Table<K> {
    fn new() -> Self {
        Table {
            code: HashMap::new(),
            bytes: 0,
        }
    }

    /// Adds `code` for `key`, emptied first if it would hold more than
    /// `max` bytes.
    fn insert(&mut self, key: K, code: &Arc<MachineCode>, max: usize) {
        if let Some(old) = self.code.remove(&key) {
            self.bytes -= old.bytes.len();
        }
        let size = code.bytes.len();
        if self.bytes + size > max {
            self.code.clear();
            self.bytes = 0;
        }
        self.code.insert(key, Arc::clone(code));
        self.bytes += size;
    }
}

impl SharedCode {
    pub(crate) fn new(
        isa: OwnedTargetIsa,
        helpers: Helpers,
        trampoline: MachineCode,
        stubs: CodeStore,
    ) -> Self {
        SharedCode {
            isa,
            helpers,
            trampoline,
            table: Mutex::new(Table::new()),
            _stubs: Mutex::new(stubs),
        }
    }

    /// The table, unless another thread holds it.
    fn table(&self) -> Option<std::sync::MutexGuard<'_, Table<BlockSource>>> {
        match self.table.try_lock() {
            Ok(table) => Some(table),
            // A thread panicked holding it: the table is whole (every
            // change is one insert or clear).
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The code published for `src`, if any (and the table was free).
    pub(crate) fn find(&self, src: &BlockSource) -> Option<Arc<MachineCode>> {
        self.table()?.code.get(src).cloned()
    }

    /// Publishes `code`, compiled from `src`, for the other engines.
    pub(crate) fn publish(&self, src: BlockSource, code: &Arc<MachineCode>) {
        if let Some(mut table) = self.table() {
            table.insert(src, code, MAX_SHARED_BYTES);
        }
    }
}

impl std::fmt::Debug for SharedCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCode").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(size: usize) -> Arc<MachineCode> {
        Arc::new(MachineCode {
            bytes: vec![0xc3; size],
            align: 16,
            links: Vec::new(),
        })
    }

    #[test]
    fn the_table_starts_over_when_full() {
        let mut table = Table::new();
        table.insert(1, &code(40), 100);
        table.insert(2, &code(40), 100);
        // Published again (two engines compiled it at once): counted once.
        table.insert(2, &code(50), 100);
        assert_eq!((table.code.len(), table.bytes), (2, 90));
        table.insert(3, &code(20), 100);
        assert_eq!((table.code.len(), table.bytes), (1, 20));
        assert!(table.code.contains_key(&3));
    }
}
