//! `drcov`: block coverage of the guest in DynamoRIO's drcov format
//! (version 2), which coverage viewers such as Lighthouse and bncov read.
//! Module 0 is the program, as QEMU's contrib `drcov` plugin writes it
//! (from [`crate::GuestProgram`]: base = start of code, end = end of code);
//! when the embedder reports modules ([`crate::PluginHost::module_loaded`]),
//! every other module the guest mapped follows, as DynamoRIO's drcov lists
//! them (base = where it was mapped, in load order; a module mapped again
//! after an unload is a new entry), and each executed block is attributed
//! to the module it was translated from.
//!
//! The file is a text header (the module table: id, base, end, entry,
//! path) followed by `BB Table: N bbs` and N binary entries of 8 bytes,
//! little-endian: the block's offset from its module's base (u32), its
//! size in bytes (u16) and its module id (u16).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{
    Access, GuestInfo, GuestProgram, ModuleInfo, Plugin, PluginArgs, PluginError, PluginHandle,
};

/// QEMU's default output file name.
const DEFAULT_FILE: &str = "file.drcov.trace";

/// A block translated inside a module's code, and whether it ran.
struct Block {
    module: u16,
    /// Offset from the module's base.
    offset: u64,
    size: u64,
    executed: Arc<AtomicBool>,
}

/// One row of the module table.
#[derive(Clone, Debug)]
struct Row {
    base: u64,
    end: u64,
    entry: u64,
    path: PathBuf,
}

/// The module table: the program first, then every other module in load
/// order, and which rows are mapped now.
#[derive(Debug, Default)]
struct Table {
    rows: Vec<Row>,
    /// (start, row id) of the modules mapped now, other than the program.
    live: Vec<(u64, u16)>,
}

/// The `drcov` plugin.
pub struct DrCov {
    program: GuestProgram,
    file: PathBuf,
    modules: Mutex<Table>,
    /// Every block translated inside a module's code (a block translated
    /// again, after a flush, appears again: coverage folds the copies).
    blocks: Mutex<Vec<Block>>,
}

impl std::fmt::Debug for DrCov {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrCov")
            .field("program", &self.program)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(DrCov::from_args(args, guest)?))
}

impl DrCov {
    /// Builds it from `filename=PATH` (default `file.drcov.trace`, as
    /// QEMU's). The guest must name its program ([`GuestInfo::program`]):
    /// the coverage is of that program's code.
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&["filename"])?;
        let Some(program) = guest.program.clone() else {
            return Err(PluginError::InstallFailed {
                plugin: "drcov".into(),
                reason: "the guest program is not known (drcov covers a user-mode program)".into(),
            });
        };
        let row = Row {
            base: program.start_code,
            end: program.end_code,
            entry: program.entry,
            path: program.path.clone(),
        };
        Ok(DrCov {
            program,
            file: PathBuf::from(args.get("filename").unwrap_or(DEFAULT_FILE)),
            modules: Mutex::new(Table {
                rows: vec![row],
                live: Vec::new(),
            }),
            blocks: Mutex::new(Vec::new()),
        })
    }

    /// The blocks of the program's code that executed, as (offset from the
    /// start of the code, size in bytes), sorted, each once.
    pub fn covered(&self) -> Vec<(u32, u16)> {
        self.covered_blocks()
            .into_iter()
            .filter(|b| b.2 == 0)
            .map(|(offset, size, _)| (offset, size))
            .collect()
    }

    /// Every module's executed blocks as (offset from its base, size in
    /// bytes, module id), sorted by module and offset, each once.
    pub fn covered_blocks(&self) -> Vec<(u32, u16, u16)> {
        let blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let covered: BTreeSet<(u16, u32, u16)> = blocks
            .iter()
            .filter(|b| b.executed.load(Ordering::Relaxed))
            .filter_map(|b| {
                // Offsets past 4 GiB and blocks over 64 KiB do not fit
                // the format; no RV64 module's code comes near either.
                let offset = u32::try_from(b.offset).ok()?;
                Some((b.module, offset, u16::try_from(b.size).ok()?))
            })
            .collect();
        covered
            .into_iter()
            .map(|(module, offset, size)| (offset, size, module))
            .collect()
    }

    /// The drcov file's bytes.
    pub fn file_bytes(&self) -> Vec<u8> {
        self.file_bytes_of(&self.covered_blocks())
    }

    /// The drcov file's bytes for the `covered` blocks.
    fn file_bytes_of(&self, covered: &[(u32, u16, u16)]) -> Vec<u8> {
        let rows = self
            .modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .rows
            .clone();
        let mut header = String::new();
        header.push_str("DRCOV VERSION: 2\nDRCOV FLAVOR: drcov-64\n");
        let _ = writeln!(header, "Module Table: version 2, count {}", rows.len());
        header.push_str("Columns: id, base, end, entry, path\n");
        for (id, row) in rows.iter().enumerate() {
            let _ = writeln!(
                header,
                "{id}, {:#x}, {:#x}, {:#x}, {}",
                row.base,
                row.end,
                row.entry,
                row.path.display()
            );
        }
        let _ = writeln!(header, "BB Table: {} bbs", covered.len());
        let mut bytes = header.into_bytes();
        for &(offset, size, module) in covered {
            bytes.extend_from_slice(&offset.to_le_bytes());
            bytes.extend_from_slice(&size.to_le_bytes());
            bytes.extend_from_slice(&module.to_le_bytes());
        }
        bytes
    }

    /// Writes the file; returns the line printed at exit.
    fn write_file(&self) -> String {
        let covered = self.covered_blocks();
        let bytes = self.file_bytes_of(&covered);
        let in_program = covered.iter().filter(|b| b.2 == 0).count();
        let others = covered.len() - in_program;
        let written = std::fs::File::create(&self.file).and_then(|mut f| f.write_all(&bytes));
        let elsewhere = if others > 0 {
            format!(" (and {others} in other modules)")
        } else {
            String::new()
        };
        match written {
            Ok(()) => format!(
                "drcov: {in_program} blocks of {} covered{elsewhere}, written to {}\n",
                self.program.path.display(),
                self.file.display()
            ),
            Err(e) => format!("drcov: cannot write {}: {e}\n", self.file.display()),
        }
    }

    /// A module was mapped: the program's own module keeps row 0; any
    /// other gets the next row.
    fn module_loaded(&self, module: &ModuleInfo) {
        if module.contains(self.program.start_code) {
            return;
        }
        let mut table = self.modules.lock().unwrap_or_else(PoisonError::into_inner);
        let Ok(id) = u16::try_from(table.rows.len()) else {
            return; // More modules than the format numbers: not covered.
        };
        table.rows.push(Row {
            base: module.start,
            end: module.end,
            entry: module.entry,
            path: module.path.clone(),
        });
        table.live.push((module.start, id));
    }

    fn module_unloaded(&self, module: &ModuleInfo) {
        let mut table = self.modules.lock().unwrap_or_else(PoisonError::into_inner);
        table.live.retain(|&(start, _)| start != module.start);
    }

    /// Where a block at `pc` belongs: (module id, offset from its base).
    fn attribute(&self, pc: u64, module: Option<&ModuleInfo>) -> Option<(u16, u64)> {
        let p = &self.program;
        if (p.start_code..p.end_code).contains(&pc) {
            return Some((0, pc - p.start_code));
        }
        let module = module?;
        let table = self.modules.lock().unwrap_or_else(PoisonError::into_inner);
        let &(_, id) = table
            .live
            .iter()
            .find(|(start, _)| *start == module.start)?;
        Some((id, pc - module.start))
    }
}

impl Plugin for DrCov {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_module_load(move |module| me.module_loaded(module));
        let me = Arc::clone(&self);
        handle.on_module_unload(move |module| me.module_unloaded(module));
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            let (pc, size) = (tb.pc(), tb.size());
            let Some((module, offset)) = me.attribute(pc, tb.module()) else {
                return;
            };
            let executed = Arc::new(AtomicBool::new(false));
            let mark = Arc::clone(&executed);
            // A store, not a swap: the flag only ever goes to true.
            tb.on_exec(Access::NONE, move |_| mark.store(true, Ordering::Relaxed));
            me.blocks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Block {
                    module,
                    offset,
                    size,
                    executed,
                });
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.write_file()));
        Ok(())
    }
}
