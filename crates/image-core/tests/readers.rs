//! Reader facts checked against the committed fixtures. The expected values
//! come from `monodis` (Debian mono-utils 6.8) and `riscv64-linux-gnu-readelf`.

use std::path::PathBuf;
use tcgkit_image_core::{
    DebugData, ElfClass, Image, ImageError, ImageFormat, Linkage, Table, Version,
};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel)
}

fn open(rel: &str) -> Image {
    Image::open(&fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const V4: Version = Version {
    major: 4,
    minor: 0,
    build: 0,
    revision: 0,
};

#[test]
fn strong_named_library_identity_matches_monodis() {
    let img = open("assemblies/I18N.West.dll");
    assert_eq!(img.format(), ImageFormat::Assembly);
    assert_eq!(img.name(), "I18N.West");
    assert_eq!(img.module_name(), Some("I18N.West.dll"));
    assert_eq!(
        img.mvid().unwrap().to_string(),
        "5a90ada0-7b4e-4d00-bc9e-b24d915758b6"
    );
    assert_eq!(img.runtime_version(), Some("v4.0.30319"));
    assert_eq!(
        img.path(),
        Some(fixture("assemblies/I18N.West.dll").as_path())
    );
    let a = img.assembly_name().unwrap();
    assert_eq!(
        a.to_string(),
        "I18N.West, Version=4.0.0.0, Culture=neutral, PublicKeyToken=0738eb9f132ed756"
    );

    let md = img.metadata().unwrap();
    let row = md.assembly().unwrap().unwrap();
    assert_eq!(row.hash_algorithm, 0x8004);
    assert_eq!(row.flags, 0x1);
    assert_eq!(row.public_key.len(), 160);
    assert_eq!(row.version, V4);
}

#[test]
fn assembly_refs_match_monodis_in_table_order() {
    let refs = open("assemblies/I18N.West.dll").assembly_refs().unwrap();
    let shown: Vec<String> = refs.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        shown,
        [
            "mscorlib, Version=4.0.0.0, Culture=neutral, PublicKeyToken=b77a5c561934e089",
            "I18N, Version=4.0.0.0, Culture=neutral, PublicKeyToken=0738eb9f132ed756",
        ]
    );
    let img = open("assemblies/cert-sync.exe");
    let md = img.metadata().unwrap();
    let rows: Vec<_> = md.assembly_refs().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].name, "Mono.Security");
    assert_eq!(rows[1].flags, 0);
    assert_eq!(hex(rows[1].public_key_or_token), "0738eb9f132ed756");
    assert!(rows[1].hash_value.is_empty());
    // The ref's token and the referenced assembly's computed token agree.
    let sec = open("assemblies/Mono.Security.dll");
    assert_eq!(
        sec.assembly_name().unwrap().public_key_token,
        rows[1].public_key_token()
    );
    assert!(md.assembly_ref(3).is_err());
    assert!(md.assembly_ref(0).is_err());
}

#[test]
fn executable_has_entry_point_and_unsigned_identity() {
    let img = open("assemblies/cert-sync.exe");
    let a = img.assembly_name().unwrap();
    assert_eq!(
        a.version,
        Version {
            major: 6,
            minor: 8,
            build: 0,
            revision: 105
        }
    );
    assert_eq!(a.public_key_token, None);
    assert_eq!(a.culture, None);
    assert_eq!(
        img.mvid().unwrap().to_string(),
        "10eac2e8-7bfe-4eed-9dc4-ac224a8098ad"
    );
    let h = img.cli_header().unwrap();
    assert_eq!((h.major_runtime_version, h.minor_runtime_version), (2, 5));
    assert_eq!(
        h.entry_point_token >> 24,
        0x06,
        "entry point is a MethodDef token"
    );
    assert!(h.flags & 1 != 0, "IL only");
}

#[test]
fn row_counts_match_monodis() {
    // (file, TypeDef, TypeRef, MethodDef, Field, MemberRef, ModuleRef)
    let facts = [
        ("assemblies/I18N.West.dll", 34, 19, 105, 71, 13, 0),
        ("assemblies/cert-sync.exe", 4, 39, 21, 49, 58, 0),
        ("assemblies/ClrLoader.dll", 6, 47, 23, 9, 79, 0),
        ("assemblies/Hello.netmodule", 3, 4, 1, 1, 3, 0),
    ];
    for (f, td, tr, m, fi, mr, modr) in facts {
        let img = open(f);
        let md = img.metadata().unwrap();
        let got = [
            md.row_count(Table::TypeDef),
            md.row_count(Table::TypeRef),
            md.row_count(Table::MethodDef),
            md.row_count(Table::Field),
            md.row_count(Table::MemberRef),
            md.row_count(Table::ModuleRef),
        ];
        assert_eq!(got, [td, tr, m, fi, mr, modr], "{f}");
        assert_eq!(md.module_refs().count(), 0);
        assert_eq!(md.row_count(Table::Module), 1);
        assert!(md.valid_mask() & (1 << Table::Module as u8) != 0);
        assert!(!md.is_uncompressed());
    }
}

#[test]
fn heaps_read_strings_blobs_guids_and_user_strings() {
    let img = open("assemblies/Hello.netmodule");
    let md = img.metadata().unwrap();
    assert_eq!(md.string(0).unwrap(), "");
    assert_eq!(md.guid(0).unwrap(), None);
    assert_eq!(md.guid(1).unwrap(), img.mvid());
    assert!(md.guid(1000).is_err());
    assert!(md.string(u32::MAX).is_err());
    assert!(md.blob(u32::MAX).is_err());
    // Hello.Greet's literal "Hello, " is the first user string (offset 1).
    assert_eq!(md.user_string(1).unwrap(), "Hello, ");
    assert_eq!(md.module().unwrap().generation, 0);
}

#[test]
fn netmodule_is_a_module_without_assembly() {
    let img = open("assemblies/Hello.netmodule");
    assert_eq!(img.format(), ImageFormat::Module);
    assert_eq!(img.assembly_name(), None);
    assert_eq!(img.name(), "Hello.netmodule");
    assert_eq!(
        img.mvid().unwrap().to_string(),
        "e5f25710-9b0b-4d6f-8752-d8b27a82de25"
    );
    assert_eq!(img.assembly_refs().unwrap().len(), 1);
    assert!(img.debug_entries().unwrap().is_empty());
    assert_eq!(img.codeview().unwrap(), None);
}

#[test]
fn debug_directory_of_a_roslyn_build() {
    let img = open("assemblies/ClrLoader.dll");
    let entries = img.debug_entries().unwrap();
    let types: Vec<u32> = entries.iter().map(|e| e.entry_type).collect();
    assert_eq!(types, [2, 19, 16]);
    let cv = img.codeview().unwrap().unwrap();
    assert_eq!(cv.guid.to_string(), "95f8f6b2-afbc-45e4-884c-b4a5bf5addd2");
    assert_eq!(cv.age, 1);
    assert!(
        cv.path.ends_with("/net461/win-x64/ClrLoader.pdb"),
        "{}",
        cv.path
    );
    // Portable PDB CodeView entries are version 0x0100.0x504d.
    assert_eq!(
        (entries[0].major_version, entries[0].minor_version),
        (0x0100, 0x504d)
    );
    match entries[1].data {
        DebugData::PdbChecksum {
            algorithm,
            checksum,
        } => {
            assert_eq!(algorithm, "SHA256");
            assert_eq!(checksum.len(), 32);
            // A deterministic PDB id is the checksum's first 16 bytes with the
            // GUID version and variant bits (bytes 7 and 8) forced.
            assert_eq!(&checksum[..7], &cv.guid.0[..7]);
            assert_eq!(&checksum[9..16], &cv.guid.0[9..16]);
            assert_eq!(cv.guid.0[7] >> 4, 4);
        }
        other => panic!("expected a PdbChecksum, got {other:?}"),
    }
    assert_eq!(entries[2].data, DebugData::Deterministic);
}

#[test]
fn same_image_from_bytes_and_from_path() {
    for f in [
        "assemblies/I18N.dll",
        "assemblies/Mono.Security.dll",
        "elf/tiny",
    ] {
        let a = open(f);
        let b = Image::from_bytes(read(f)).unwrap();
        assert_eq!(a.bytes(), b.bytes());
        assert_eq!(
            a.name(),
            if f.ends_with("tiny") {
                "tiny"
            } else {
                b.name()
            }
        );
        assert_eq!(b.path(), None);
        assert_eq!(a.assembly_name(), b.assembly_name());
        assert_eq!(a.mvid(), b.mvid());
        assert_eq!(a.build_id(), b.build_id());
    }
}

#[test]
fn rv64_static_elf_matches_readelf() {
    let img = open("elf/tiny");
    assert_eq!(img.format(), ImageFormat::Elf);
    assert_eq!(img.name(), "tiny");
    assert!(img.metadata().is_none() && img.mvid().is_none() && img.assembly_name().is_none());
    assert!(img.assembly_refs().unwrap().is_empty() && img.debug_entries().unwrap().is_empty());
    let e = img.elf().unwrap();
    assert_eq!(e.class, ElfClass::Elf64);
    assert!(e.little_endian);
    assert_eq!((e.machine, e.elf_type, e.entry), (243, 2, 0x1017c));
    assert_eq!((e.phoff, e.phnum, e.phentsize), (64, 5, 56));
    assert_eq!(e.linkage, Linkage::Static);
    assert_eq!(e.interpreter, None);
    assert_eq!(e.segments.len(), 2);
    let (text, data) = (&e.segments[0], &e.segments[1]);
    assert_eq!(
        (text.vaddr, text.offset, text.filesz, text.memsz, text.align),
        (0x10000, 0, 0x1d6, 0x1d6, 0x1000)
    );
    assert!(text.flags.read && text.flags.execute && !text.flags.write);
    assert_eq!(
        (data.vaddr, data.offset, data.filesz, data.memsz),
        (0x111d8, 0x1d8, 8, 0x208)
    );
    assert!(data.flags.read && data.flags.write && !data.flags.execute);
    assert_eq!(
        hex(img.build_id().unwrap()),
        "bdd06f957c736776b0bfcfbcfd19cdeb6f4f5f41"
    );
    let bytes = img.segment_data(text).unwrap();
    assert_eq!(bytes.len(), 0x1d6);
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert!(img.segment_data(data).unwrap().len() == 8);
}

#[test]
fn bad_segment_is_an_error() {
    let img = open("elf/tiny");
    let mut seg = img.elf().unwrap().segments[0];
    seg.offset = u64::MAX - 1;
    assert!(matches!(
        img.segment_data(&seg),
        Err(ImageError::Truncated { .. })
    ));
    let mut seg = img.elf().unwrap().segments[1];
    seg.filesz = seg.memsz + 1;
    assert!(matches!(
        img.segment_data(&seg),
        Err(ImageError::Malformed { .. })
    ));
}

#[test]
fn native_pe_is_not_a_dotnet_image() {
    // Clear the CLI header directory (data directory 14) of a real assembly.
    let mut b = read("assemblies/I18N.dll");
    let pe = u32::from_le_bytes(b[0x3c..0x40].try_into().unwrap()) as usize;
    let opt = pe + 24;
    let dirs = opt
        + if b[opt] == 0x0b && b[opt + 1] == 0x02 {
            112
        } else {
            96
        };
    b[dirs + 14 * 8..dirs + 15 * 8].fill(0);
    let e = Image::from_bytes(b).unwrap_err();
    assert!(matches!(e, ImageError::NotDotNet), "{e}");
    assert!(e.to_string().contains("not a .NET image"));
}

#[test]
fn unknown_and_undefined_inputs_are_typed_errors() {
    let e = Image::from_bytes(b"\x00asm\x01\x00\x00\x00".to_vec()).unwrap_err();
    assert!(
        matches!(e, ImageError::UnknownFormat { offset: 0, .. }),
        "{e}"
    );
    let e = Image::open(&fixture("assemblies/does-not-exist.dll")).unwrap_err();
    assert!(matches!(e, ImageError::Io { .. }), "{e}");
    let e = Image::open(&fixture("assemblies")).unwrap_err();
    assert!(matches!(e, ImageError::Io { .. }), "{e}");
    // Truncated right after the DOS header.
    let e = Image::from_bytes(read("assemblies/I18N.dll")[..0x40].to_vec()).unwrap_err();
    assert!(matches!(e, ImageError::Truncated { .. }), "{e}");
}

#[test]
fn metadata_errors_name_offsets() {
    let clean = read("assemblies/I18N.dll");
    let bsjb = clean.windows(4).position(|w| w == b"BSJB").unwrap();
    // A bad signature is reported at the metadata root.
    let mut b = clean.clone();
    b[bsjb] = b'X';
    match Image::from_bytes(b).unwrap_err() {
        ImageError::Malformed { offset, what } => {
            assert_eq!(offset, bsjb as u64);
            assert!(what.contains("BSJB"), "{what}");
        }
        e => panic!("unexpected {e}"),
    }
    // Mark table 0x2D (not defined by ECMA-335) as present.
    let tables = tables_stream_offset(&clean, bsjb);
    let mut b = clean.clone();
    b[tables + 8 + 5] |= 0x20;
    match Image::from_bytes(b).unwrap_err() {
        ImageError::Malformed { offset, what } => {
            assert_eq!(offset, (tables + 8) as u64);
            assert!(what.contains("table 0x2d"), "{what}");
        }
        e => panic!("unexpected {e}"),
    }
    // A row count that overflows the stream.
    let mut b = clean;
    b[tables + 24..tables + 28].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
    assert!(matches!(
        Image::from_bytes(b).unwrap_err(),
        ImageError::Truncated {
            what: "metadata tables",
            ..
        }
    ));
}

/// File offset of the `#~` stream, found by walking the stream headers by hand.
fn tables_stream_offset(b: &[u8], root: usize) -> usize {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let mut at = root + 16 + u32_at(root + 12);
    let n = u16::from_le_bytes([b[at + 2], b[at + 3]]);
    at += 4;
    for _ in 0..n {
        let (off, name_at) = (u32_at(at), at + 8);
        let len = b[name_at..].iter().position(|&c| c == 0).unwrap();
        if &b[name_at..name_at + len] == b"#~" {
            return root + off;
        }
        at = name_at + (len + 4) / 4 * 4;
    }
    panic!("no #~ stream");
}

#[test]
fn uncompressed_tables_stream_reads_the_same() {
    // Renaming "#~" to "#-" (same length) gives the uncompressed-stream form.
    let clean = read("assemblies/I18N.West.dll");
    let bsjb = clean.windows(4).position(|w| w == b"BSJB").unwrap();
    let name = clean[bsjb..].windows(3).position(|w| w == b"#~\0").unwrap() + bsjb;
    let mut b = clean.clone();
    b[name + 1] = b'-';
    let img = Image::from_bytes(b).unwrap();
    let md = img.metadata().unwrap();
    assert!(md.is_uncompressed());
    let orig = Image::from_bytes(clean).unwrap();
    assert_eq!(img.assembly_name(), orig.assembly_name());
    assert_eq!(img.assembly_refs().unwrap(), orig.assembly_refs().unwrap());
    for t in Table::ALL {
        assert_eq!(md.row_count(*t), orig.metadata().unwrap().row_count(*t));
    }
}

#[test]
fn invalid_utf8_in_the_strings_heap_names_its_offset() {
    let clean = read("assemblies/Hello.netmodule");
    let img = Image::from_bytes(clean.clone()).unwrap();
    // Corrupt the first byte of the module name.
    let at = clean
        .windows(16)
        .position(|w| w == b"Hello.netmodule\0")
        .unwrap();
    let mut b = clean.clone();
    b[at] = 0xff;
    match Image::from_bytes(b).unwrap_err() {
        ImageError::Malformed { offset, what } => {
            assert_eq!(offset, at as u64);
            assert!(what.contains("UTF-8"), "{what}");
        }
        e => panic!("unexpected {e}"),
    }
    assert_eq!(img.module_name(), Some("Hello.netmodule"));
}
