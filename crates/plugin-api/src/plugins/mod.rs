//! The bundled plugins, counterparts of QEMU's contrib plugins. Each is
//! usable from the command line through [`crate::PluginRegistry::bundled`]
//! and as a Rust type whose results tests and embedders can read.

pub mod bb;
pub mod cache;
pub mod drcov;
pub mod hotblocks;
pub mod howvec;
pub mod insn;
pub mod mem;
pub mod reset;
pub mod syscall;

use std::sync::Arc;

use tcgkit_tcg_core::Scoreboard;

/// A scoreboard with one row per vCPU of `vcpus`.
fn board(slots: usize, vcpus: u32) -> Arc<Scoreboard> {
    Arc::new(Scoreboard::new(slots, vcpus.max(1) as usize))
}
