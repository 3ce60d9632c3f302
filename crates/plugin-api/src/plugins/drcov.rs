//! `drcov`: block coverage of the guest program in DynamoRIO's drcov
//! format (version 2), which coverage viewers such as Lighthouse and
//! bncov read, as QEMU's contrib `drcov` plugin writes it: one module (the
//! program, from [`crate::GuestProgram`]) and every block inside its code
//! that executed at least once.
//!
//! The file is a text header (the module table: id, base = start of code,
//! end = end of code, entry, path) followed by `BB Table: N bbs` and N
//! binary entries of 8 bytes, little-endian: the block's offset from the
//! module base (u32), its size in bytes (u16) and its module id (u16).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{Access, GuestInfo, GuestProgram, Plugin, PluginArgs, PluginError, PluginHandle};

/// QEMU's default output file name.
const DEFAULT_FILE: &str = "file.drcov.trace";

/// A block translated inside the program's code, and whether it ran.
struct Block {
    pc: u64,
    size: u64,
    executed: Arc<AtomicBool>,
}

/// The `drcov` plugin.
pub struct DrCov {
    program: GuestProgram,
    file: PathBuf,
    /// Every block translated inside the code (a block translated again,
    /// after a flush, appears again: coverage folds the copies).
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
        Ok(DrCov {
            program,
            file: PathBuf::from(args.get("filename").unwrap_or(DEFAULT_FILE)),
            blocks: Mutex::new(Vec::new()),
        })
    }

    /// The blocks of the program's code that executed, as (offset from the
    /// start of the code, size in bytes), sorted, each once.
    pub fn covered(&self) -> Vec<(u32, u16)> {
        let blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let start = self.program.start_code;
        let covered: BTreeSet<(u32, u16)> = blocks
            .iter()
            .filter(|b| b.executed.load(Ordering::Relaxed))
            .filter_map(|b| {
                // Offsets past 4 GiB and blocks over 64 KiB do not fit
                // the format; no RV64 program's code comes near either.
                let offset = u32::try_from(b.pc.checked_sub(start)?).ok()?;
                Some((offset, u16::try_from(b.size).ok()?))
            })
            .collect();
        covered.into_iter().collect()
    }

    /// The drcov file's bytes.
    pub fn file_bytes(&self) -> Vec<u8> {
        self.file_bytes_of(&self.covered())
    }

    /// The drcov file's bytes for the `covered` blocks.
    fn file_bytes_of(&self, covered: &[(u32, u16)]) -> Vec<u8> {
        let p = &self.program;
        let mut header = String::new();
        header.push_str("DRCOV VERSION: 2\nDRCOV FLAVOR: drcov-64\n");
        header.push_str("Module Table: version 2, count 1\n");
        header.push_str("Columns: id, base, end, entry, path\n");
        let _ = writeln!(
            header,
            "0, {:#x}, {:#x}, {:#x}, {}",
            p.start_code,
            p.end_code,
            p.entry,
            p.path.display()
        );
        let _ = writeln!(header, "BB Table: {} bbs", covered.len());
        let mut bytes = header.into_bytes();
        for &(offset, size) in covered {
            bytes.extend_from_slice(&offset.to_le_bytes());
            bytes.extend_from_slice(&size.to_le_bytes());
            // The module id: the program is module 0.
            bytes.extend_from_slice(&0u16.to_le_bytes());
        }
        bytes
    }

    /// Writes the file; returns the line printed at exit.
    fn write_file(&self) -> String {
        let covered = self.covered();
        let bytes = self.file_bytes_of(&covered);
        let blocks = covered.len();
        let written = std::fs::File::create(&self.file).and_then(|mut f| f.write_all(&bytes));
        match written {
            Ok(()) => format!(
                "drcov: {blocks} blocks of {} covered, written to {}\n",
                self.program.path.display(),
                self.file.display()
            ),
            Err(e) => format!("drcov: cannot write {}: {e}\n", self.file.display()),
        }
    }
}

impl Plugin for DrCov {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        let me = Arc::clone(&self);
        handle.on_tb_trans(move |tb| {
            let (pc, size) = (tb.pc(), tb.size());
            let code = me.program.start_code..me.program.end_code;
            if !code.contains(&pc) {
                return;
            }
            let executed = Arc::new(AtomicBool::new(false));
            let mark = Arc::clone(&executed);
            // A store, not a swap: the flag only ever goes to true.
            tb.on_exec(Access::NONE, move |_| mark.store(true, Ordering::Relaxed));
            me.blocks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Block { pc, size, executed });
        });
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.write_file()));
        Ok(())
    }
}
