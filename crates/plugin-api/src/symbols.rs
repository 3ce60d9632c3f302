//! Function symbols of the guest program and its modules, for `tb_trans` views.

use object::{Object, ObjectSymbol, SymbolKind};

/// Guest function symbols, looked up by any address inside the function.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    /// Sorted by start address; `(start, end, name)`.
    entries: Vec<(u64, u64, String)>,
}

impl SymbolTable {
    /// A table from `(address, size, name)` triples. Zero-sized symbols
    /// cover up to the next symbol's start.
    pub fn new(symbols: impl IntoIterator<Item = (u64, u64, String)>) -> Self {
        let mut raw: Vec<(u64, u64, String)> = symbols.into_iter().collect();
        raw.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        raw.dedup_by_key(|s| s.0);
        let starts: Vec<u64> = raw.iter().map(|s| s.0).collect();
        let entries = raw
            .into_iter()
            .enumerate()
            .map(|(i, (start, size, name))| {
                let end = if size > 0 {
                    start.saturating_add(size)
                } else {
                    starts
                        .get(i + 1)
                        .copied()
                        .unwrap_or(start.saturating_add(1))
                };
                (start, end, name)
            })
            .collect();
        SymbolTable { entries }
    }

    /// The function symbols of an ELF executable (empty for a stripped one).
    /// A malformed file yields an empty table: symbols are a convenience,
    /// and the loader reports real format errors.
    pub fn from_elf(bytes: &[u8]) -> Self {
        SymbolTable::from_elf_at(bytes, 0)
    }

    /// The function symbols of an ELF file mapped with load bias `bias`
    /// (what was added to its addresses): its symbol table, or, for a
    /// stripped shared object, its dynamic symbols (what ld.so exports).
    pub fn from_elf_at(bytes: &[u8], bias: u64) -> Self {
        let Ok(file) = object::File::parse(bytes) else {
            return SymbolTable::default();
        };
        let text = |s: &object::Symbol<'_, '_>| {
            let name = s.name().ok().filter(|n| !n.is_empty())?;
            (s.kind() == SymbolKind::Text && s.address() != 0)
                .then(|| (s.address().wrapping_add(bias), s.size(), name.to_owned()))
        };
        let mut symbols: Vec<_> = file.symbols().filter_map(|s| text(&s)).collect();
        if symbols.is_empty() {
            symbols = file.dynamic_symbols().filter_map(|s| text(&s)).collect();
        }
        SymbolTable::new(symbols)
    }

    /// One table of the symbols of `tables` (modules do not overlap; where
    /// two tables name the same address, the first wins).
    pub fn merged<'a>(tables: impl IntoIterator<Item = &'a SymbolTable>) -> Self {
        let mut entries: Vec<(u64, u64, String)> = tables
            .into_iter()
            .flat_map(|t| t.entries.iter().cloned())
            .collect();
        // A stable sort keeps the first table's entry first among equals.
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        SymbolTable { entries }
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The symbol whose range contains `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self
            .entries
            .partition_point(|e| e.0 <= addr)
            .checked_sub(1)?;
        let (start, end, name) = self.entries.get(i)?;
        (addr >= *start && addr < *end).then_some(name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_containing_symbol() {
        let t = SymbolTable::new([
            (0x100, 0x10, "a".to_owned()),
            (0x200, 0, "b".to_owned()),
            (0x300, 4, "c".to_owned()),
        ]);
        assert_eq!(t.lookup(0x100), Some("a"));
        assert_eq!(t.lookup(0x10f), Some("a"));
        assert_eq!(t.lookup(0x110), None);
        assert_eq!(t.lookup(0x2ff), Some("b"));
        assert_eq!(t.lookup(0x303), Some("c"));
        assert_eq!(t.lookup(0x304), None);
        assert_eq!(t.lookup(0), None);
    }

    #[test]
    fn merged_tables_keep_each_ones_ranges() {
        let a = SymbolTable::new([(0x100, 0, "a".to_owned()), (0x180, 8, "a2".to_owned())]);
        let b = SymbolTable::new([(0x1000, 0x10, "b".to_owned()), (0x100, 4, "dup".to_owned())]);
        let t = SymbolTable::merged([&a, &b]);
        assert_eq!(t.len(), 3);
        // a's zero-sized symbol still ends where a's next one starts.
        assert_eq!(t.lookup(0x17f), Some("a"));
        assert_eq!(t.lookup(0x187), Some("a2"));
        assert_eq!(t.lookup(0x100f), Some("b"));
        assert_eq!(t.lookup(0x1010), None);
        assert_eq!(t.lookup(0x100), Some("a"), "the first table wins");
    }

    #[test]
    fn garbage_is_an_empty_table() {
        assert!(SymbolTable::from_elf(b"\x7fELF garbage").is_empty());
        assert!(SymbolTable::from_elf(&[]).is_empty());
    }
}
