//! `bb`: counts executed blocks and the instructions they hold, per vCPU,
//! as QEMU's contrib `bb` plugin.

use std::fmt::Write as _;
use std::sync::Arc;

use tcgkit_tcg_core::{InlineKind, Scoreboard};

use crate::{Access, GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

const BLOCKS: usize = 0;
const INSNS: usize = 1;

/// The `bb` plugin. A block counts all its instructions when entered (as
/// in QEMU), so a block left early by a fault counts in full.
#[derive(Debug)]
pub struct BlockCount {
    inline: bool,
    board: Arc<Scoreboard>,
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(BlockCount::from_args(args, guest)?))
}

impl BlockCount {
    /// Builds it from `inline=on|off` (default off).
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&["inline"])?;
        Ok(BlockCount {
            inline: args.bool("inline", false)?,
            board: super::board(2, guest.vcpus),
        })
    }

    /// Blocks executed (all vCPUs).
    pub fn blocks(&self) -> u64 {
        self.board.sum(BLOCKS)
    }

    /// Instructions in the executed blocks (all vCPUs).
    pub fn insns(&self) -> u64 {
        self.board.sum(INSNS)
    }

    /// The text printed at exit.
    pub fn report(&self) -> String {
        let mut s = String::new();
        for vcpu in 0..super::rows_used(&self.board) {
            let _ = writeln!(
                s,
                "cpu {vcpu}: bbs: {}, insns: {}",
                self.board.get(vcpu, BLOCKS),
                self.board.get(vcpu, INSNS)
            );
        }
        let _ = writeln!(s, "total: bbs: {}, insns: {}", self.blocks(), self.insns());
        s
    }
}

impl Plugin for BlockCount {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        // Its callbacks add to it: a row for every vCPU as it starts.
        handle.track_scoreboard(&self.board);
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            let n = tb.insn_count() as u64;
            if me.inline {
                tb.on_exec_inline(&me.board, BLOCKS, InlineKind::Add(1));
                tb.on_exec_inline(&me.board, INSNS, InlineKind::Add(n));
            } else {
                let board = Arc::clone(&me.board);
                tb.on_exec(Access::NONE, move |ctx| {
                    board.add(ctx.vcpu(), BLOCKS, 1);
                    board.add(ctx.vcpu(), INSNS, n);
                });
            }
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}
