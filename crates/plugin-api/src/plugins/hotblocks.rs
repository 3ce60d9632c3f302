//! `hotblocks`: the most executed blocks, as QEMU's contrib `hotblocks`.
//! When the embedder reports modules, each block is also named as
//! `module+offset` (a fifth column), and blocks of different modules
//! mapped at the same address in turn are told apart.

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

/// A block's place in its module: the module's file name and the block's
/// offset from where the module was mapped.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleOffset {
    /// The module's file name, e.g. `libc.so.6`.
    pub module: String,
    /// Offset of the block from the module's start.
    pub offset: u64,
}

/// What identifies a block's record: (pc, instruction count, place in a
/// module).
type BlockKey = (u64, u64, Option<ModuleOffset>);

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
    /// Keyed by (pc, instruction count, place in a module): a
    /// re-translation of the same code shares its record.
    blocks: Mutex<HashMap<BlockKey, Record>>,
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
        self.blocks_in_modules()
            .into_iter()
            .map(|(b, _)| b)
            .collect()
    }

    /// Every block seen with its place in a module (when modules are
    /// reported), most executed first (ties by address, then module).
    pub fn blocks_in_modules(&self) -> Vec<(HotBlock, Option<ModuleOffset>)> {
        let blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v: Vec<(HotBlock, Option<ModuleOffset>)> = blocks
            .iter()
            .map(|((pc, insns, place), r)| {
                let block = HotBlock {
                    pc: *pc,
                    insns: *insns,
                    translations: r.translations,
                    executions: r.board.sum(0),
                };
                (block, place.clone())
            })
            .collect();
        v.sort_by(|(a, am), (b, bm)| {
            b.executions
                .cmp(&a.executions)
                .then(a.pc.cmp(&b.pc))
                .then(am.cmp(bm))
        });
        v
    }

    /// The text printed at exit: QEMU's columns, and `module` when modules
    /// are known.
    pub fn report(&self) -> String {
        let blocks = self.blocks_in_modules();
        let named = blocks.iter().any(|(_, place)| place.is_some());
        let mut s = String::new();
        let _ = writeln!(s, "collected {} blocks", blocks.len());
        let _ = writeln!(
            s,
            "pc, tcount, icount, ecount{}",
            if named { ", module" } else { "" }
        );
        for (b, place) in blocks.iter().take(self.limit) {
            let _ = write!(
                s,
                "{:#018x}, {}, {}, {}",
                b.pc, b.translations, b.insns, b.executions
            );
            match (named, place) {
                (false, _) => {}
                (true, Some(p)) => {
                    let _ = write!(s, ", {}+{:#x}", p.module, p.offset);
                }
                (true, None) => s.push_str(", ?"),
            }
            s.push('\n');
        }
        s
    }
}

impl Plugin for HotBlocks {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            let place = tb.module().map(|m| ModuleOffset {
                module: m.name(),
                offset: tb.pc() - m.start,
            });
            let key = (tb.pc(), tb.insn_count() as u64, place);
            let board = {
                let mut blocks = me.blocks.lock().unwrap_or_else(PoisonError::into_inner);
                let insns = key.1;
                let record = blocks.entry(key).or_insert_with(|| Record {
                    insns,
                    translations: 0,
                    board: super::board(1, me.vcpus),
                });
                record.translations += 1;
                debug_assert_eq!(record.insns, insns);
                Arc::clone(&record.board)
            };
            tb.on_exec_inline(&board, 0, InlineKind::Add(1));
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
        Ok(())
    }
}
