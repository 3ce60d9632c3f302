//! Which of a running callback's state a plugin's code can ask for, read
//! from its shared object: the functions that read it
//! (`qemu_plugin_read_register`, `qemu_plugin_read_memory_vaddr`) are
//! reachable from plugin code only through their symbols, which the
//! dynamic loader binds from the object's undefined dynamic symbols: one
//! the plugin does not import, it cannot call (barring a lookup by name,
//! which counts as importing everything).
//!
//! What it buys: an execution callback whose plugin cannot read its
//! context is called without making the context reachable, so the engine's
//! loop keeps what the context holds in registers across the call
//! (measured: 0.5 ns per call of QEMU's instruction counter on the integer
//! guest, a third of the call's cost).

use object::read::elf::{Dyn, ElfFile64};
use object::{Endianness, Object, elf};

/// What of a running callback's state a plugin may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ContextUse {
    /// It may call `qemu_plugin_read_register`.
    pub(crate) registers: bool,
    /// It may call `qemu_plugin_read_memory_vaddr`.
    pub(crate) memory: bool,
}

/// Imports that can reach any symbol by name, or load code that imports
/// what it likes: a plugin importing one of them may call anything.
const LOOKUPS: &[&[u8]] = &[
    b"dlsym",
    b"dlvsym",
    b"dlopen",
    b"dlmopen",
    b"g_module_open",
    b"g_module_open_full",
    b"g_module_symbol",
];

/// Libraries a plugin may link without widening what it can call: none of
/// them calls a `qemu_plugin_*` function or looks a symbol up for its
/// caller (a plugin that wants that imports `dlsym`). Code in any other
/// library the plugin links could call what the plugin does not import.
const SYSTEM_LIBRARIES: &[&[u8]] = &[
    b"libc.so.6",
    b"libm.so.6",
    b"libpthread.so.0",
    b"libdl.so.2",
    b"librt.so.1",
    b"libgcc_s.so.1",
    b"libstdc++.so.6",
    b"libglib-2.0.so.0",
    b"ld-linux-x86-64.so.2",
    b"ld-linux-aarch64.so.1",
];

impl ContextUse {
    /// Everything: what a plugin whose object tells nothing gets.
    pub(crate) const ALL: ContextUse = ContextUse {
        registers: true,
        memory: true,
    };

    /// What the plugin whose shared object is at `path` may ask for
    /// ([`ContextUse::ALL`] if the file cannot be read).
    pub(crate) fn of_file(path: &std::path::Path) -> ContextUse {
        std::fs::read(path).map_or(ContextUse::ALL, |bytes| ContextUse::of_elf(&bytes))
    }

    /// What a plugin whose shared object is `bytes` may ask for:
    /// [`ContextUse::ALL`] unless it is a 64-bit ELF whose dynamic symbols
    /// and needed libraries can be read, it imports nothing of
    /// [`LOOKUPS`], and it links nothing but [`SYSTEM_LIBRARIES`].
    pub(crate) fn of_elf(bytes: &[u8]) -> ContextUse {
        Self::read(bytes).unwrap_or(ContextUse::ALL)
    }

    fn read(bytes: &[u8]) -> Option<ContextUse> {
        let file = ElfFile64::<Endianness>::parse(bytes).ok()?;
        let imports = file.imports().ok()?;
        // Every plugin imports the registration functions: an object that
        // shows no imports has its symbols where they were not looked for.
        if imports.is_empty() {
            return None;
        }
        let mut uses = ContextUse {
            registers: false,
            memory: false,
        };
        for import in &imports {
            match import.name() {
                b"qemu_plugin_read_register" => uses.registers = true,
                b"qemu_plugin_read_memory_vaddr" => uses.memory = true,
                name if LOOKUPS.contains(&name) => return None,
                _ => {}
            }
        }
        let endian = file.endian();
        let sections = file.elf_section_table();
        let (dynamic, strings) = sections.dynamic(endian, bytes).ok()??;
        let strings = sections.strings(endian, bytes, strings).ok()?;
        for entry in dynamic {
            if entry.d_tag(endian) == u64::from(elf::DT_NEEDED) {
                let name = entry.string(endian, strings).ok()?;
                if !SYSTEM_LIBRARIES.contains(&name) {
                    return None;
                }
            }
        }
        Some(uses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_an_elf_object_may_ask_for_everything() {
        assert_eq!(ContextUse::of_elf(b"not an ELF file"), ContextUse::ALL);
        assert_eq!(
            ContextUse::of_file(std::path::Path::new("/nonexistent/libx.so")),
            ContextUse::ALL
        );
    }
}
