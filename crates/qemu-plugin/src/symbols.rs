//! `qemu_plugin_insn_symbol` as QEMU 7.2's user mode answers it, so that
//! plugins name the same function QEMU names where several symbols share an
//! address (`malloc` and `__malloc`, `write` and `__write`): the program's
//! `.symtab` (dynamic symbols are not read), its defined `STT_FUNC` entries
//! kept in the order QEMU's `load_symbols` leaves them (an entry it drops is
//! replaced by the last one, which is looked at next), sorted by address
//! with a stable sort (glibc's `qsort` is a merge sort), and an address
//! found by glibc's `bsearch` over `[value, value + size)`.

use object::LittleEndian;
use object::elf;
use object::read::elf::{ElfFile64, Sym};

/// The program's function symbols, in QEMU's order.
#[derive(Debug, Default)]
pub(crate) struct QemuSymbols {
    /// (value with the load bias, size, name).
    entries: Vec<(u64, u64, String)>,
}

impl QemuSymbols {
    /// The symbols of the ELF file `bytes` loaded with `bias` (empty for a
    /// stripped or unreadable one).
    pub(crate) fn from_elf(bytes: &[u8], bias: u64) -> QemuSymbols {
        let Ok(file) = ElfFile64::<LittleEndian>::parse(bytes) else {
            return QemuSymbols::default();
        };
        let endian = file.endian();
        let table = file.elf_symbol_table();
        let strings = table.strings();
        let mut syms: Vec<_> = table.symbols().iter().collect();
        let keep = |s: &&elf::Sym64<LittleEndian>| {
            let shndx = s.st_shndx(endian);
            shndx != elf::SHN_UNDEF && shndx < elf::SHN_LORESERVE && s.st_type() == elf::STT_FUNC
        };
        // QEMU's compaction, step by step: the order decides among aliases.
        let (mut i, mut n) = (0, syms.len());
        while i < n {
            if keep(&syms[i]) {
                i += 1;
            } else {
                n -= 1;
                if i < n {
                    syms[i] = syms[n];
                }
            }
        }
        syms.truncate(n);
        let mut entries: Vec<(u64, u64, String)> = syms
            .iter()
            .map(|s| {
                let name = s.name(endian, strings).unwrap_or_default();
                (
                    s.st_value(endian).wrapping_add(bias),
                    s.st_size(endian),
                    String::from_utf8_lossy(name).into_owned(),
                )
            })
            .collect();
        // Stable, as glibc's qsort (a merge sort) is.
        entries.sort_by_key(|e| e.0);
        QemuSymbols { entries }
    }

    /// The symbols of the program in `bytes` whose lowest executable
    /// segment starts at `start_code` (QEMU's `start_code`), which gives
    /// the load bias.
    pub(crate) fn for_program(bytes: &[u8], start_code: u64) -> QemuSymbols {
        let Ok(file) = ElfFile64::<LittleEndian>::parse(bytes) else {
            return QemuSymbols::default();
        };
        let endian = file.endian();
        let lowest_exec = file
            .elf_program_headers()
            .iter()
            .filter(|ph| {
                use object::read::elf::ProgramHeader;
                ph.p_type(endian) == elf::PT_LOAD && ph.p_flags(endian) & elf::PF_X != 0
            })
            .map(|ph| {
                use object::read::elf::ProgramHeader;
                ph.p_vaddr(endian)
            })
            .min();
        let bias = lowest_exec.map_or(0, |v| start_code.wrapping_sub(v));
        QemuSymbols::from_elf(bytes, bias)
    }

    /// The name glibc's `bsearch` finds for `addr`, as QEMU looks it up.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let (mut low, mut high) = (0usize, self.entries.len());
        while low < high {
            let mid = (low + high) / 2;
            let (value, size, name) = &self.entries[mid];
            if addr < *value {
                high = mid;
            } else if addr >= value.wrapping_add(*size) {
                low = mid + 1;
            } else {
                return Some(name).filter(|n| !n.is_empty()).map(String::as_str);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(u64, u64, &str)]) -> QemuSymbols {
        QemuSymbols {
            entries: entries
                .iter()
                .map(|&(v, s, n)| (v, s, n.to_owned()))
                .collect(),
        }
    }

    #[test]
    fn lookup_is_glibcs_bsearch_over_value_and_size() {
        let t = table(&[
            (0x100, 0x10, "a"),
            (0x200, 0x20, "b"),
            (0x200, 0x20, "b_alias"),
            (0x300, 0, "z"),
        ]);
        assert_eq!(t.lookup(0x10f), Some("a"));
        assert_eq!(t.lookup(0x110), None);
        // bsearch probes the middle first (index 2 of 4): the alias there.
        assert_eq!(t.lookup(0x210), Some("b_alias"));
        assert_eq!(t.lookup(0x300), None, "a zero-sized symbol covers nothing");
    }

    #[test]
    fn a_real_program_names_its_functions() {
        let guest =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests/integer");
        let bytes = std::fs::read(guest).expect("fixture");
        let t = QemuSymbols::from_elf(&bytes, 0);
        assert!(t.entries.len() > 100);
        assert!(t.entries.windows(2).all(|w| w[0].0 <= w[1].0), "sorted");
        let (value, _, name) = t.entries.iter().find(|e| e.2 == "main").expect("main");
        assert_eq!(t.lookup(*value), Some(name.as_str()));
    }
}
