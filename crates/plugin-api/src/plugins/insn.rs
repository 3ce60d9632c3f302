//! `insn`: counts executed instructions per vCPU, with an inline counter
//! (`inline=on`) or an instruction callback (the default), as QEMU's
//! contrib `insn` plugin.

use std::fmt::Write as _;
use std::sync::Arc;

use tcgkit_tcg_core::{Frontend, InlineKind, Scoreboard};

use crate::{Access, GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle, SharedExecCallback};

/// The `insn` plugin.
#[derive(Debug)]
pub struct InsnCount {
    inline: bool,
    board: Arc<Scoreboard>,
    /// Builds the counting callback: a shared one, or one compiled into
    /// the loop of an engine of a known frontend
    /// ([`InsnCount::inlined_for`]).
    counter: fn(&PluginHandle, Arc<Scoreboard>) -> SharedExecCallback,
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(InsnCount::from_args(args, guest)?))
}

/// [`factory`] for an engine of frontend `F`.
pub(crate) fn factory_for<F: Frontend>(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(
        InsnCount::from_args(args, guest)?.inlined_for::<F>(),
    ))
}

/// QEMU's plugin registers one function for all instructions; so does
/// this (the board, not a `ScoreboardEntry`: counting through an entry
/// took 4 host instructions fewer per call but measured slower, 4 `insn`
/// plugins: 23.3 -> 25.1 ns added per insn on integer, 26.4 -> 27.1 on
/// malloc).
fn shared_counter(handle: &PluginHandle, board: Arc<Scoreboard>) -> SharedExecCallback {
    handle.shared_exec_callback(Access::NONE, move |ctx| board.add(ctx.vcpu(), 0, 1))
}

/// [`shared_counter`] compiled into the loop of an engine of frontend `F`.
/// Through an entry here: it holds the cells itself, so the loop can
/// compute the vCPU's cell once per run instead of loading through the
/// board on every instruction.
fn inlined_counter<F: Frontend>(
    handle: &PluginHandle,
    board: Arc<Scoreboard>,
) -> SharedExecCallback {
    match board.entry(0) {
        Some(count) => {
            handle.inlined_exec_callback::<F>(Access::NONE, move |ctx| count.add(ctx.vcpu(), 1))
        }
        // Never: the board has one slot.
        None => shared_counter(handle, board),
    }
}

impl InsnCount {
    /// Builds it from `inline=on|off` (default off).
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&["inline"])?;
        Ok(InsnCount {
            inline: args.bool("inline", false)?,
            board: super::board(1, guest.vcpus),
            counter: shared_counter,
        })
    }

    /// Counts, when not inline, through a callback compiled into the
    /// loop of an engine of frontend `F`
    /// ([`PluginHandle::inlined_exec_callback`]): what
    /// [`crate::PluginRegistry::bundled_for`] builds. The counts are the
    /// same on any engine.
    pub fn inlined_for<F: Frontend>(mut self) -> Self {
        self.counter = inlined_counter::<F>;
        self
    }

    /// Instructions executed by `vcpu`.
    pub fn vcpu_count(&self, vcpu: u32) -> u64 {
        self.board.get(vcpu, 0)
    }

    /// Instructions executed by all vCPUs.
    pub fn total(&self) -> u64 {
        self.board.sum(0)
    }

    /// The text printed at exit.
    pub fn report(&self) -> String {
        let mut s = String::new();
        for vcpu in 0..super::rows_used(&self.board) {
            let _ = writeln!(s, "cpu {vcpu} insns: {}", self.vcpu_count(vcpu));
        }
        let _ = writeln!(s, "total insns: {}", self.total());
        s
    }
}

impl Plugin for InsnCount {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        // Its callbacks add to it: a row for every vCPU as it starts.
        handle.track_scoreboard(&self.board);
        let me = Arc::clone(&self);
        // One callback for every instruction, built once.
        let count = (self.counter)(handle, Arc::clone(&self.board));
        handle.on_tb_trans(move |tb| {
            for mut insn in tb.insns() {
                if me.inline {
                    insn.on_exec_inline(&me.board, 0, InlineKind::Add(1));
                } else {
                    insn.on_exec_shared(&count);
                }
            }
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}
