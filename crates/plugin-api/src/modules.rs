//! Guest modules as plugins see them: each ELF file the guest has mapped
//! (program, interpreter, shared objects), with its address range, and the
//! symbols of all of them. QEMU's plugin API has no module events; Pin's
//! image instrumentation and DynamoRIO's module events do, and drcov's
//! module table needs them.

use std::path::PathBuf;
use std::sync::Arc;

use crate::symbols::SymbolTable;

/// One module mapped into the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleInfo {
    /// The file it was mapped from.
    pub path: PathBuf,
    /// Its GNU build-id, if it has one.
    pub build_id: Option<Vec<u8>>,
    /// Lowest guest address of its mappings.
    pub start: u64,
    /// One past its highest guest address.
    pub end: u64,
    /// Its entry point in guest memory (`e_entry` plus the load bias; for a
    /// shared object often just its base).
    pub entry: u64,
}

impl ModuleInfo {
    /// A module mapped from `path` at `[start, end)`, without a build-id,
    /// its entry at `start`.
    pub fn new(path: impl Into<PathBuf>, start: u64, end: u64) -> ModuleInfo {
        ModuleInfo {
            path: path.into(),
            build_id: None,
            start,
            end,
            entry: start,
        }
    }

    /// The same with a build-id.
    pub fn with_build_id(mut self, build_id: Option<Vec<u8>>) -> ModuleInfo {
        self.build_id = build_id;
        self
    }

    /// The same with an entry point.
    pub fn with_entry(mut self, entry: u64) -> ModuleInfo {
        self.entry = entry;
        self
    }

    /// Whether `addr` lies in the module.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// The file name, e.g. `libc.so.6`.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }
}

/// What translation-time views know of the guest's code: the symbols of
/// the embedder's table and of every module, the live modules, and how
/// QEMU disassembles its instructions.
#[derive(Default)]
pub(crate) struct GuestView {
    pub(crate) symbols: SymbolTable,
    /// Sorted by start address; they do not overlap.
    modules: Vec<Arc<ModuleInfo>>,
    /// The engine's frontend's QEMU-syntax disassembler
    /// ([`tcgkit_tcg_core::Frontend::qemu_disassembler`]), once the host is
    /// attached to an engine whose frontend has one.
    pub(crate) qemu_disassembler: Option<fn(&[u8], u64) -> String>,
}

impl GuestView {
    /// The view of `base` symbols and the `modules` with their symbols.
    pub(crate) fn new(base: &SymbolTable, modules: &[(Arc<ModuleInfo>, SymbolTable)]) -> Self {
        let symbols = SymbolTable::merged(
            std::iter::once(base).chain(modules.iter().map(|(_, symbols)| symbols)),
        );
        let mut sorted: Vec<Arc<ModuleInfo>> = modules.iter().map(|(m, _)| Arc::clone(m)).collect();
        sorted.sort_by_key(|m| m.start);
        GuestView {
            symbols,
            modules: sorted,
            qemu_disassembler: None,
        }
    }

    /// The live module holding `addr`.
    pub(crate) fn module_at(&self, addr: u64) -> Option<&ModuleInfo> {
        let i = self
            .modules
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let module = self.modules.get(i)?;
        module.contains(addr).then_some(&**module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_and_their_symbols_are_found_by_address() {
        let program = SymbolTable::new([(0x1000, 0x10, "main".to_string())]);
        let libc = (
            Arc::new(ModuleInfo::new("/lib/libc.so.6", 0x4000_0000, 0x4010_0000)),
            SymbolTable::new([(0x4000_2000, 0x40, "printf".to_string())]),
        );
        let libm = (
            Arc::new(ModuleInfo::new("/lib/libm.so.6", 0x3000_0000, 0x3000_8000)),
            SymbolTable::default(),
        );
        let view = GuestView::new(&program, &[libc, libm]);
        assert_eq!(view.symbols.lookup(0x1004), Some("main"));
        assert_eq!(view.symbols.lookup(0x4000_2010), Some("printf"));
        assert_eq!(
            view.module_at(0x4000_2010).map(ModuleInfo::name).as_deref(),
            Some("libc.so.6")
        );
        assert_eq!(
            view.module_at(0x3000_0000).map(ModuleInfo::name).as_deref(),
            Some("libm.so.6")
        );
        assert!(view.module_at(0x3000_8000).is_none(), "end is exclusive");
        assert!(
            view.module_at(0x1000).is_none(),
            "no module holds the base table"
        );
    }
}
