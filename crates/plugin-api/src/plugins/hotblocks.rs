//! `hotblocks`: the most executed blocks, as QEMU's contrib `hotblocks`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use tcgkit_tcg_core::{InlineKind, Scoreboard};

use crate::{GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

/// One block's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotBlock {
    /// Guest address of its first instruction.
    pub pc: u64,
    /// Instructions in it.
    pub insns: u64,
    /// Times it was translated (more than 1 after flushes).
    pub translations: u64,
    /// Times it was executed.
    pub executions: u64,
}

struct Record {
    insns: u64,
    translations: u64,
    /// One entry: executions, per vCPU.
    board: Arc<Scoreboard>,
}

/// The `hotblocks` plugin.
pub struct HotBlocks {
    limit: usize,
    vcpus: u32,
    /// Keyed by (pc, instruction count): a re-translation of the same code
    /// shares its record.
    blocks: Mutex<HashMap<(u64, u64), Record>>,
}

impl std::fmt::Debug for HotBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotBlocks")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(HotBlocks::from_args(args, guest)?))
}

impl HotBlocks {
    /// Builds it from `limit=N` (default 20): how many blocks the report lists.
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&["limit"])?;
        let limit = args.u64_in("limit", 20, 1..=1 << 20)? as usize;
        Ok(HotBlocks {
            limit,
            vcpus: guest.vcpus,
            blocks: Mutex::new(HashMap::new()),
        })
    }

    /// Every block seen, most executed first (ties by address).
    pub fn blocks(&self) -> Vec<HotBlock> {
        let blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v: Vec<HotBlock> = blocks
            .iter()
            .map(|(&(pc, insns), r)| HotBlock {
                pc,
                insns,
                translations: r.translations,
                executions: r.board.sum(0),
            })
            .collect();
        v.sort_by(|a, b| b.executions.cmp(&a.executions).then(a.pc.cmp(&b.pc)));
        v
    }

    /// The text printed at exit.
    pub fn report(&self) -> String {
        let blocks = self.blocks();
        let mut s = String::new();
        let _ = writeln!(s, "collected {} blocks", blocks.len());
        let _ = writeln!(s, "pc, tcount, icount, ecount");
        for b in blocks.iter().take(self.limit) {
            let _ = writeln!(
                s,
                "{:#018x}, {}, {}, {}",
                b.pc, b.translations, b.insns, b.executions
            );
        }
        s
    }
}

impl Plugin for HotBlocks {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            let key = (tb.pc(), tb.insn_count() as u64);
            let board = {
                let mut blocks = me.blocks.lock().unwrap_or_else(PoisonError::into_inner);
                let record = blocks.entry(key).or_insert_with(|| Record {
                    insns: key.1,
                    translations: 0,
                    board: super::board(1, me.vcpus),
                });
                record.translations += 1;
                debug_assert_eq!(record.insns, key.1);
                Arc::clone(&record.board)
            };
            tb.on_exec_inline(&board, 0, InlineKind::Add(1));
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}
