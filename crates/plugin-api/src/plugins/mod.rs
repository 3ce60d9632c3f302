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

/// The rows a report shows: up to the last vCPU that counted anything
/// (at least vCPU 0), not every row the board has room for.
fn rows_used(board: &Scoreboard) -> u32 {
    let rows = board.vcpus() as u32;
    (0..rows)
        .rev()
        .find(|&vcpu| (0..board.slots()).any(|slot| board.get(vcpu, slot) != 0))
        .map_or(1, |last| last + 1)
}
