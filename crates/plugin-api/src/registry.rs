//! Plugins by name, so a command line can find them.

use std::sync::Arc;

use tcgkit_tcg_core::Frontend;

use crate::args::{PluginArgs, PluginSpec};
use crate::host::{GuestInfo, Plugin};
use crate::{PluginError, plugins};

/// Builds a plugin from its arguments.
pub type PluginFactory = fn(&PluginArgs, &GuestInfo) -> Result<Arc<dyn Plugin>, PluginError>;

/// Named plugin factories.
#[derive(Clone, Debug, Default)]
pub struct PluginRegistry {
    entries: Vec<(&'static str, &'static str, PluginFactory)>,
}

impl PluginRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        PluginRegistry::default()
    }

    /// The plugins bundled with tcgkit: `insn`, `mem`, `bb`, `hotblocks`,
    /// `howvec`, `syscall`, `cache`, `drcov` and `reset`.
    pub fn bundled() -> Self {
        PluginRegistry::bundled_with(plugins::insn::factory, plugins::mem::factory)
    }

    /// [`PluginRegistry::bundled`] for an engine of frontend `F`: `insn`
    /// and `mem` count through callbacks compiled into the engine's loops
    /// ([`crate::PluginHandle::inlined_exec_callback`],
    /// [`crate::PluginHandle::inlined_mem_callback`]), the cheapest
    /// callbacks; the counts are the same.
    pub fn bundled_for<F: Frontend>() -> Self {
        PluginRegistry::bundled_with(
            plugins::insn::factory_for::<F>,
            plugins::mem::factory_for::<F>,
        )
    }

    fn bundled_with(insn: PluginFactory, mem: PluginFactory) -> Self {
        let mut r = PluginRegistry::new();
        r.register(
            "insn",
            "count executed instructions per vCPU (inline=on|off)",
            insn,
        );
        r.register(
            "mem",
            "count loads and stores (inline=on|off, rw=r|w|rw, trace=on|off)",
            mem,
        );
        r.register(
            "bb",
            "count executed blocks and their instructions (inline=on|off)",
            plugins::bb::factory,
        );
        r.register(
            "hotblocks",
            "the most executed blocks (limit=N)",
            plugins::hotblocks::factory,
        );
        r.register(
            "howvec",
            "histogram of executed instruction classes",
            plugins::howvec::factory,
        );
        r.register(
            "syscall",
            "system call counts and errors (print=on|off)",
            plugins::syscall::factory,
        );
        r.register(
            "cache",
            "L1 instruction/data cache simulator (dcachesize, dassoc, dblksize, icachesize, iassoc, iblksize, limit)",
            plugins::cache::factory,
        );
        r.register(
            "drcov",
            "block coverage of the guest program in drcov format (filename=PATH)",
            plugins::drcov::factory,
        );
        r.register(
            "reset",
            "count instructions and blocks, resetting itself every N instructions from a block callback (every=N, inline=on|off)",
            plugins::reset::factory,
        );
        r
    }

    /// Adds (or replaces) the plugin `name`.
    pub fn register(&mut self, name: &'static str, summary: &'static str, factory: PluginFactory) {
        self.entries.retain(|e| e.0 != name);
        self.entries.push((name, summary, factory));
    }

    /// Registered names with their one-line summaries.
    pub fn list(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.entries.iter().map(|e| (e.0, e.1))
    }

    /// Builds the plugin `spec` names with its arguments.
    pub fn create(
        &self,
        spec: &PluginSpec,
        guest: &GuestInfo,
    ) -> Result<Arc<dyn Plugin>, PluginError> {
        let Some(entry) = self.entries.iter().find(|e| e.0 == spec.name) else {
            return Err(PluginError::UnknownPlugin {
                name: spec.name.clone(),
                available: self
                    .entries
                    .iter()
                    .map(|e| e.0)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        (entry.2)(&spec.args, guest)
    }
}
