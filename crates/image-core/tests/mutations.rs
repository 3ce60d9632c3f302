//! Hostile input never panics: real fixtures are mutated (byte flips,
//! truncations, header and stream-table fields replaced by out-of-range
//! values) and every accessor is called on whatever still opens.

use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;
use tcgkit_image_core::{Image, Table};

const FIXTURES: &[&str] = &[
    "assemblies/cert-sync.exe",
    "assemblies/I18N.West.dll",
    "assemblies/ClrLoader.dll",
    "assemblies/Hello.netmodule",
    "assemblies/Mono.Security.dll",
    "elf/tiny",
];

struct Fixture {
    bytes: Vec<u8>,
    /// 4-byte-aligned offsets of header fields worth corrupting.
    fields: Vec<usize>,
}

fn fixtures() -> &'static [Fixture] {
    static ALL: OnceLock<Vec<Fixture>> = OnceLock::new();
    ALL.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|f| {
                let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../fixtures")
                    .join(f);
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
                let fields = header_fields(&bytes);
                assert!(!fields.is_empty(), "{f}: no header fields found");
                Fixture { bytes, fields }
            })
            .collect()
    })
}

fn u32_at(b: &[u8], o: usize) -> usize {
    b.get(o..o + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// Offsets of the structures a reader trusts most: PE/COFF and section
/// headers, the CLI header, the debug directory, the metadata root with its
/// stream headers, and the tables stream header with its row counts; for ELF,
/// the file header and program headers.
fn header_fields(b: &[u8]) -> Vec<usize> {
    let mut regions: Vec<(usize, usize)> = Vec::new();
    if b.starts_with(b"\x7fELF") {
        regions.push((0, 64 + 5 * 56));
    } else {
        let pe = u32_at(b, 0x3c);
        let opt = pe + 24;
        let opt_size = u16::from_le_bytes([b[pe + 20], b[pe + 21]]) as usize;
        let n_sections = u16::from_le_bytes([b[pe + 6], b[pe + 7]]) as usize;
        regions.push((0, opt + opt_size + 40 * n_sections));
        let dirs = opt + if b[opt + 1] == 2 { 112 } else { 96 };
        let map = |rva: usize| -> Option<usize> {
            (0..n_sections).find_map(|i| {
                let s = opt + opt_size + 40 * i;
                let (va, vs, raw) = (u32_at(b, s + 12), u32_at(b, s + 8), u32_at(b, s + 20));
                (rva >= va && rva < va + vs).then(|| raw + rva - va)
            })
        };
        for dir in [6usize, 14] {
            if let Some(at) = map(u32_at(b, dirs + 8 * dir)) {
                regions.push((at, at + 72));
            }
        }
        if let Some(root) = b.windows(4).position(|w| w == b"BSJB") {
            regions.push((root, root + 0x80));
            let mut at = root + 16 + u32_at(b, root + 12) + 4;
            for _ in 0..u16::from_le_bytes([b[at - 2], b[at - 1]]) {
                let name_len = b[at + 8..].iter().position(|&c| c == 0).unwrap_or(0);
                if b[at + 8..].starts_with(b"#~") {
                    let ts = root + u32_at(b, at);
                    regions.push((ts, ts + 24 + 4 * 45));
                }
                at += 8 + (name_len + 4) / 4 * 4;
            }
        }
    }
    let mut out: Vec<usize> = regions
        .into_iter()
        .flat_map(|(s, e)| (s & !3..e.min(b.len().saturating_sub(4))).step_by(4))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[derive(Debug, Clone)]
enum Mutation {
    Flips(Vec<(usize, u8)>),
    Truncate(usize),
    Field {
        slot: usize,
        value: u32,
        flips: Vec<(usize, u8)>,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let flips = || prop::collection::vec((any::<usize>(), 1u8..=255), 1..12);
    let value = prop_oneof![
        Just(0u32),
        Just(u32::MAX),
        Just(0x7fff_ffff),
        Just(0x8000_0000),
        Just(0x0001_0000),
        0u32..0x200,
        0x1000u32..0x10_0000,
        any::<u32>(),
    ];
    prop_oneof![
        1 => flips().prop_map(Mutation::Flips),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        3 => (any::<usize>(), value, prop::collection::vec((any::<usize>(), 1u8..=255), 0..3))
            .prop_map(|(slot, value, flips)| Mutation::Field { slot, value, flips }),
    ]
}

fn apply(f: &Fixture, m: &Mutation) -> Vec<u8> {
    let mut b = f.bytes.clone();
    let flip = |b: &mut Vec<u8>, flips: &[(usize, u8)]| {
        let len = b.len();
        for &(at, x) in flips {
            b[at % len] ^= x;
        }
    };
    match m {
        Mutation::Flips(flips) => flip(&mut b, flips),
        Mutation::Truncate(n) => b.truncate(n % b.len()),
        Mutation::Field { slot, value, flips } => {
            let at = f.fields[slot % f.fields.len()];
            b[at..at + 4].copy_from_slice(&value.to_le_bytes());
            flip(&mut b, flips);
        }
    }
    b
}

/// Call every accessor; any of them may fail, none may panic.
fn exercise(img: &Image) -> usize {
    let mut n = img.name().len() + img.bytes().len();
    let _ = (
        img.format(),
        img.path(),
        img.assembly_name(),
        img.module_name(),
        img.mvid(),
    );
    let _ = (img.runtime_version(), img.cli_header(), img.build_id());
    n += img.assembly_refs().map_or(0, |r| r.len());
    if let Ok(entries) = img.debug_entries() {
        n += entries.len();
    }
    let _ = img.codeview();
    if let Some(md) = img.metadata() {
        for t in Table::ALL {
            n += md.row_count(*t) as usize + md.row_size(*t);
        }
        let _ = (
            md.version(),
            md.valid_mask(),
            md.sorted_mask(),
            md.heap_sizes(),
            md.is_uncompressed(),
        );
        let _ = (md.module(), md.assembly());
        n += md.assembly_refs().filter(Result::is_ok).count();
        n += md.module_refs().filter(Result::is_ok).count();
        for i in [0u32, 1, 2, 7, 100, 0xffff, u32::MAX] {
            let _ = (md.string(i), md.blob(i), md.guid(i), md.user_string(i));
        }
        if let Ok(Some(a)) = md.assembly() {
            let _ = (a.to_name(), a.public_key_token());
        }
    }
    if let Some(elf) = img.elf() {
        for s in &elf.segments {
            n += img.segment_data(s).map_or(0, <[u8]>::len);
        }
    }
    n
}

#[test]
fn clean_fixtures_open_and_exercise() {
    for (f, name) in fixtures().iter().zip(FIXTURES) {
        let img = Image::from_bytes(f.bytes.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(exercise(&img) > 0);
        assert!(
            img.assembly_refs().is_ok() && img.debug_entries().is_ok(),
            "{name}"
        );
    }
}

#[test]
fn every_header_field_out_of_range_is_survived_and_mostly_caught() {
    for (f, name) in fixtures().iter().zip(FIXTURES) {
        let mut rejected = 0;
        for &at in &f.fields {
            for value in [0u32, 0xffff_ffff, 0x8000_0000, f.bytes.len() as u32 + 1] {
                let mut b = f.bytes.clone();
                b[at..at + 4].copy_from_slice(&value.to_le_bytes());
                match Image::from_bytes(b) {
                    Ok(img) => {
                        exercise(&img);
                    }
                    Err(_) => rejected += 1,
                }
            }
        }
        // The sweep reaches the parser: many corrupt headers are refused at open.
        assert!(
            rejected * 10 >= f.fields.len(),
            "{name}: only {rejected} of {} rejected",
            f.fields.len() * 4
        );
    }
}

#[test]
fn every_truncation_of_small_fixtures_is_caught() {
    for name in ["assemblies/Hello.netmodule", "elf/tiny"] {
        let i = FIXTURES.iter().position(|f| *f == name).unwrap_or_default();
        let f = &fixtures()[i];
        for len in 0..f.bytes.len() {
            match Image::from_bytes(f.bytes[..len].to_vec()) {
                // ELF segments are checked lazily: a cut inside one fails in
                // segment_data; a cut past all of them (only section headers
                // and symbols lost) still loads, as it does for qemu-user.
                Ok(img) => {
                    let elf = img
                        .elf()
                        .unwrap_or_else(|| panic!("{name} cut at {len} opened"));
                    let end = elf
                        .segments
                        .iter()
                        .map(|s| s.offset + s.filesz)
                        .max()
                        .unwrap_or(0);
                    let broken = elf.segments.iter().any(|s| img.segment_data(s).is_err());
                    assert_eq!(broken, (len as u64) < end, "cut at {len}");
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_fixtures_never_panic(which in 0..FIXTURES.len(), m in mutation()) {
        let f = &fixtures()[which];
        let bytes = apply(f, &m);
        match Image::from_bytes(bytes) {
            Ok(img) => { exercise(&img); }
            // Every error renders a message (and names an offset where it has one).
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
