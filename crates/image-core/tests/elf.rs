//! ELF reading: header fields refused with the field's name and offset, and
//! the dynamic section (`DT_SONAME`, `DT_NEEDED`) read from a hand-made file,
//! then made hostile.

use std::path::PathBuf;
use tcgkit_image_core::{ElfClass, Image, ImageError, Linkage};

fn read(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Both committed RV64 fixtures: a tiny one and a libc-sized one.
const ELF64_FIXTURES: &[&str] = &["elf/tiny", "guests/integer"];

/// Store `v` little-endian in `size` bytes at `at` (the fixtures are LE).
fn set(b: &mut [u8], at: usize, size: usize, v: u64) {
    b[at..at + size].copy_from_slice(&v.to_le_bytes()[..size]);
}

fn get(b: &[u8], at: usize, size: usize) -> u64 {
    let mut w = [0u8; 8];
    w[..size].copy_from_slice(&b[at..at + size]);
    u64::from_le_bytes(w)
}

/// The `InvalidField` a corrupt header must be refused with.
fn field_error(bytes: Vec<u8>) -> (&'static str, u64, u64) {
    match Image::from_bytes(bytes) {
        Err(ImageError::InvalidField {
            field,
            offset,
            value,
            ..
        }) => (field, offset, value),
        Err(e) => panic!("expected InvalidField, got {e}"),
        Ok(_) => panic!("a corrupt header loaded"),
    }
}

/// Corrupt `size` bytes at `at` of each ELF64 fixture to each of `values`;
/// each must be refused as `field` at `at`, reporting the value written.
fn refuses(field: &str, at: usize, size: usize, values: &[u64]) {
    for f in ELF64_FIXTURES {
        for &v in values {
            let mut b = read(f);
            set(&mut b, at, size, v);
            assert_eq!(
                field_error(b),
                (field, at as u64, v),
                "{f}: {field} = {v:#x}"
            );
        }
    }
}

/// Corrupt the same way; each file must still load.
fn accepts(at: usize, size: usize, values: &[u64]) -> Vec<Image> {
    let mut out = Vec::new();
    for f in ELF64_FIXTURES {
        for &v in values {
            let mut b = read(f);
            set(&mut b, at, size, v);
            let img = Image::from_bytes(b).unwrap_or_else(|e| panic!("{f}: {v:#x}: {e}"));
            out.push(img);
        }
    }
    out
}

#[test]
fn zero_header_after_the_magic_is_refused() {
    // Literally zeros after the magic: the class byte is the first bad field.
    let mut b = vec![0u8; 256];
    b[..4].copy_from_slice(b"\x7fELF");
    assert_eq!(field_error(b.clone()), ("EI_CLASS", 4, 0));
    // A valid identification followed by zeros used to load as an image.
    b[4..7].copy_from_slice(&[2, 1, 1]);
    let e = Image::from_bytes(b).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid ELF header field e_type at offset 0x10: 0 \
         (expected 1 (ET_REL), 2 (ET_EXEC), 3 (ET_DYN), 4 (ET_CORE) or 0xfe00..=0xffff)"
    );
    assert!(matches!(
        e,
        ImageError::InvalidField {
            field: "e_type",
            offset: 16,
            value: 0,
            ..
        }
    ));
}

#[test]
fn display_names_field_offset_value_and_expectation() {
    let mut b = read("elf/tiny");
    set(&mut b, 20, 4, 0);
    assert_eq!(
        Image::from_bytes(b).unwrap_err().to_string(),
        "invalid ELF header field e_version at offset 0x14: 0 (expected 1)"
    );
}

#[test]
fn committed_elf_fixtures_still_load() {
    let mut names: Vec<String> = ELF64_FIXTURES.iter().map(|s| s.to_string()).collect();
    let guests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests");
    for e in std::fs::read_dir(guests).unwrap() {
        let path = e.unwrap().path();
        let name = format!("guests/{}", path.file_name().unwrap().to_string_lossy());
        if path.is_file()
            && !ELF64_FIXTURES.contains(&name.as_str())
            && read(&name).starts_with(b"\x7fELF")
        {
            names.push(name);
        }
    }
    assert!(names.len() > 3);
    for f in names {
        let img = Image::from_bytes(read(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let elf = img.elf().unwrap();
        // All static: no dynamic section, so no names.
        assert_eq!((elf.soname.as_deref(), elf.needed.len()), (None, 0), "{f}");
        assert!(img.build_id().is_some_and(|id| id.len() == 20), "{f}");
    }
}

#[test]
fn ei_class_must_be_32_or_64() {
    refuses("EI_CLASS", 4, 1, &[0, 3, 0xff]);
}

#[test]
fn ei_data_must_be_lsb_or_msb() {
    refuses("EI_DATA", 5, 1, &[0, 3, 0xff]);
}

#[test]
fn ei_version_must_be_current() {
    refuses("EI_VERSION", 6, 1, &[0, 2, 0xff]);
}

#[test]
fn e_type_must_be_known_or_os_or_processor_specific() {
    refuses("e_type", 16, 2, &[0, 5, 0x100, 0xfdff]);
    let loaded = accepts(16, 2, &[1, 3, 4, 0xfe00, 0xfeff, 0xff00, 0xffff]);
    let types: Vec<u16> = loaded.iter().map(|i| i.elf().unwrap().elf_type).collect();
    assert_eq!(&types[..7], [1, 3, 4, 0xfe00, 0xfeff, 0xff00, 0xffff]);
}

#[test]
fn e_machine_must_not_be_em_none() {
    refuses("e_machine", 18, 2, &[0]);
    // Another machine is the loader's business, not a malformed file.
    let loaded = accepts(18, 2, &[62]);
    assert!(loaded.iter().all(|i| i.elf().unwrap().machine == 62));
}

#[test]
fn e_version_must_be_current() {
    refuses("e_version", 20, 4, &[0, 2, 0xffff_ffff]);
}

#[test]
fn e_ehsize_must_match_the_class() {
    refuses("e_ehsize", 52, 2, &[0, 52, 63, 65, 0xffff]);
}

#[test]
fn e_phentsize_must_match_the_class_when_there_are_program_headers() {
    refuses("e_phentsize", 54, 2, &[0, 32, 55, 57, 0xffff]);
    // Without program headers the entry size is not used.
    for f in ELF64_FIXTURES {
        let mut b = read(f);
        set(&mut b, 56, 2, 0);
        set(&mut b, 54, 2, 0x1234);
        let img = Image::from_bytes(b).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(img.elf().unwrap().segments.is_empty());
    }
}

#[test]
fn e_phoff_must_point_into_the_file() {
    for f in ELF64_FIXTURES {
        let len = read(f).len() as u64;
        for v in [0, len, len + 1, 0x8000_0000_0000_0000, u64::MAX] {
            let mut b = read(f);
            set(&mut b, 32, 8, v);
            assert_eq!(field_error(b), ("e_phoff", 32, v), "{f}: {v:#x}");
        }
    }
}

#[test]
fn program_header_table_must_end_inside_the_file() {
    for f in ELF64_FIXTURES {
        let clean = read(f);
        let phnum = get(&clean, 56, 2);
        // Too many entries for the file.
        for v in [clean.len() as u64 / 56, 0xfffe] {
            let mut b = clean.clone();
            set(&mut b, 56, 2, v);
            assert_eq!(field_error(b), ("e_phnum", 56, v), "{f}");
        }
        // The table starts inside the file but runs past its end.
        let mut b = clean.clone();
        set(&mut b, 32, 8, clean.len() as u64 - 8);
        assert_eq!(field_error(b), ("e_phnum", 56, phnum), "{f}");
        // Ends exactly at the end of the file: accepted.
        let mut b = clean.clone();
        let table = clean[64..64 + phnum as usize * 56].to_vec();
        let at = clean.len();
        b.extend_from_slice(&table);
        set(&mut b, 32, 8, at as u64);
        let img = Image::from_bytes(b).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(img.elf().unwrap().phoff, at as u64);
    }
}

#[test]
fn short_files_are_truncated_errors() {
    let tiny = read("elf/tiny");
    for (len, what, needed) in [
        (4, "ELF identification", 16),
        (15, "ELF identification", 16),
        (16, "ELF header", 64),
        (63, "ELF header", 64),
    ] {
        match Image::from_bytes(tiny[..len].to_vec()).unwrap_err() {
            ImageError::Truncated {
                what: w,
                offset: 0,
                needed: n,
                available,
            } => assert_eq!((w, n, available), (what, needed, len as u64)),
            e => panic!("{len}: unexpected {e}"),
        }
    }
}

// --- A hand-made dynamic ELF -------------------------------------------------

const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;

/// Where the file loads, and its fixed layout: the header and up to three
/// program headers, then the interpreter path, string table and dynamic
/// section at fixed offsets (one `PT_LOAD` maps the whole file).
const BASE: u64 = 0x10000;
const INTERP_OFF: usize = 0x100;
const STR_OFF: usize = 0x140;
const DYN_OFF: usize = 0x240;
const STRTAB: u64 = BASE + STR_OFF as u64;
const INTERP: &[u8] = b"/lib/ld-linux-riscv64-lp64d.so.1\0";
/// `libfoo.so.1` at 1, `libc.so.6` at 13, `libm.so.6` at 23; 33 bytes.
const STRINGS: &[u8] = b"\0libfoo.so.1\0libc.so.6\0libm.so.6\0";

struct Spec {
    is64: bool,
    big_endian: bool,
    interp: bool,
    strings: Vec<u8>,
    dynamic: Vec<(u64, u64)>,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            is64: true,
            big_endian: false,
            interp: true,
            strings: STRINGS.to_vec(),
            dynamic: vec![
                (DT_SONAME, 1),
                (DT_NEEDED, 13),
                (DT_NEEDED, 23),
                (DT_STRTAB, STRTAB),
                (DT_STRSZ, STRINGS.len() as u64),
                (DT_NULL, 0),
            ],
        }
    }
}

/// The file, and the offsets of its `PT_LOAD` and `PT_DYNAMIC` headers.
struct Built {
    bytes: Vec<u8>,
    load_ph: usize,
    dynamic_ph: usize,
}

impl Spec {
    fn put(&self, b: &mut [u8], at: usize, size: usize, v: u64) {
        let bytes = if self.big_endian {
            v.to_be_bytes()[8 - size..].to_vec()
        } else {
            v.to_le_bytes()[..size].to_vec()
        };
        b[at..at + size].copy_from_slice(&bytes);
    }

    fn build(&self) -> Built {
        assert!(self.strings.len() <= DYN_OFF - STR_OFF);
        let (word, ehsize, phentsize, dynsize) = if self.is64 {
            (8, 64, 56, 16)
        } else {
            (4, 52, 32, 8)
        };
        let len = DYN_OFF + self.dynamic.len() * dynsize;
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = if self.is64 { 2 } else { 1 };
        b[5] = if self.big_endian { 2 } else { 1 };
        b[6] = 1;
        self.put(&mut b, 16, 2, 3); // ET_DYN
        self.put(&mut b, 18, 2, 243); // EM_RISCV
        self.put(&mut b, 20, 4, 1);
        self.put(&mut b, 24, word, BASE + 0x400);
        self.put(&mut b, 24 + word, word, ehsize as u64); // e_phoff
        let after_offsets = 24 + 3 * word + 4; // past e_shoff and e_flags
        self.put(&mut b, after_offsets, 2, ehsize as u64);
        self.put(&mut b, after_offsets + 2, 2, phentsize as u64);
        let mut phdrs = Vec::new();
        if self.interp {
            phdrs.push((3, 4, INTERP_OFF, INTERP.len())); // PT_INTERP, R
        }
        // PT_DYNAMIC before PT_LOAD: DT_STRTAB translation must not depend
        // on program header order.
        phdrs.push((2, 6, DYN_OFF, len - DYN_OFF)); // PT_DYNAMIC, RW
        phdrs.push((1, 5, 0, len)); // PT_LOAD, R+X
        self.put(&mut b, after_offsets + 4, 2, phdrs.len() as u64);
        let (mut load_ph, mut dynamic_ph) = (0, 0);
        for (i, &(p_type, flags, offset, size)) in phdrs.iter().enumerate() {
            let at = ehsize + i * phentsize;
            match p_type {
                1 => load_ph = at,
                2 => dynamic_ph = at,
                _ => {}
            }
            let (offset, vaddr, size) = (offset as u64, BASE + offset as u64, size as u64);
            self.put(&mut b, at, 4, p_type);
            if self.is64 {
                self.put(&mut b, at + 4, 4, flags);
                for (k, v) in [offset, vaddr, vaddr, size, size, 8]
                    .into_iter()
                    .enumerate()
                {
                    self.put(&mut b, at + 8 + 8 * k, 8, v);
                }
            } else {
                for (k, v) in [offset, vaddr, vaddr, size, size, flags, 8]
                    .into_iter()
                    .enumerate()
                {
                    self.put(&mut b, at + 4 + 4 * k, 4, v);
                }
            }
        }
        b[INTERP_OFF..INTERP_OFF + INTERP.len()].copy_from_slice(INTERP);
        b[STR_OFF..STR_OFF + self.strings.len()].copy_from_slice(&self.strings);
        for (i, &(tag, val)) in self.dynamic.iter().enumerate() {
            let at = DYN_OFF + i * dynsize;
            self.put(&mut b, at, word, tag);
            self.put(&mut b, at + word, word, val);
        }
        Built {
            bytes: b,
            load_ph,
            dynamic_ph,
        }
    }

    /// The spec with the dynamic entry `tag` given value `val`.
    fn with(mut self, tag: u64, val: u64) -> Self {
        for e in &mut self.dynamic {
            if e.0 == tag {
                e.1 = val;
            }
        }
        self
    }

    fn without(mut self, tag: u64) -> Self {
        self.dynamic.retain(|e| e.0 != tag);
        self
    }
}

fn open(bytes: Vec<u8>) -> Result<(Option<String>, Vec<String>), ImageError> {
    let img = Image::from_bytes(bytes)?;
    let elf = img.elf().unwrap();
    Ok((elf.soname.clone(), elf.needed.clone()))
}

fn malformed_at(r: Result<(Option<String>, Vec<String>), ImageError>) -> (u64, String) {
    match r {
        Err(ImageError::Malformed { offset, what }) => (offset, what),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

/// File offset of dynamic entry `i` of a 64-bit spec.
fn dyn_entry(i: usize) -> u64 {
    (DYN_OFF + i * 16) as u64
}

#[test]
fn dynamic_rv64_elf_has_soname_and_needed_in_order() {
    let img = Image::from_bytes(Spec::default().build().bytes).unwrap();
    let elf = img.elf().unwrap();
    assert_eq!((elf.class, elf.little_endian), (ElfClass::Elf64, true));
    assert_eq!((elf.machine, elf.elf_type, elf.phnum), (243, 3, 3));
    assert_eq!(elf.linkage, Linkage::Dynamic);
    assert_eq!(
        elf.interpreter.as_deref(),
        Some("/lib/ld-linux-riscv64-lp64d.so.1")
    );
    assert_eq!(elf.soname.as_deref(), Some("libfoo.so.1"));
    assert_eq!(elf.needed, ["libc.so.6", "libm.so.6"]);
    assert_eq!(img.build_id(), None);
    assert_eq!(img.segment_data(&elf.segments[0]).unwrap(), img.bytes());

    // Without PT_INTERP it is a static-pie with the same names.
    let img = Image::from_bytes(
        Spec {
            interp: false,
            ..Spec::default()
        }
        .build()
        .bytes,
    )
    .unwrap();
    let elf = img.elf().unwrap();
    assert_eq!((elf.linkage, elf.phnum), (Linkage::StaticPie, 2));
    assert_eq!(elf.needed, ["libc.so.6", "libm.so.6"]);
}

#[test]
fn elf32_in_both_byte_orders_reads_the_same_names() {
    for big_endian in [false, true] {
        let spec = Spec {
            is64: false,
            big_endian,
            ..Spec::default()
        };
        let img = Image::from_bytes(spec.build().bytes).unwrap();
        let elf = img.elf().unwrap();
        assert_eq!(
            (elf.class, elf.little_endian),
            (ElfClass::Elf32, !big_endian)
        );
        assert_eq!((elf.phoff, elf.phentsize), (52, 32));
        assert_eq!(elf.soname.as_deref(), Some("libfoo.so.1"));
        assert_eq!(elf.needed, ["libc.so.6", "libm.so.6"]);
    }
}

#[test]
fn elf32_header_fields_are_checked_at_their_elf32_offsets() {
    let spec = Spec {
        is64: false,
        big_endian: true,
        ..Spec::default()
    };
    let clean = spec.build().bytes;
    let len = clean.len() as u64;
    for (at, size, v, field) in [
        (20, 4, 0, "e_version"),
        (28, 4, 0, "e_phoff"),
        (28, 4, len, "e_phoff"),
        (40, 2, 64, "e_ehsize"),
        (42, 2, 56, "e_phentsize"),
        (44, 2, 1000, "e_phnum"),
    ] {
        let mut b = clean.clone();
        spec.put(&mut b, at, size, v);
        assert_eq!(field_error(b), (field, at as u64, v), "{field} = {v:#x}");
    }
}

#[test]
fn entries_after_dt_null_are_ignored_and_later_duplicates_win() {
    let mut spec = Spec::default();
    spec.dynamic.insert(0, (DT_SONAME, 13));
    spec.dynamic.push((DT_NEEDED, 1));
    let (soname, needed) = open(spec.build().bytes).unwrap();
    assert_eq!(soname.as_deref(), Some("libfoo.so.1"));
    assert_eq!(needed, ["libc.so.6", "libm.so.6"]);
    // No DT_NULL at all: the segment's end ends the list.
    let spec = Spec::default().without(DT_NULL);
    assert_eq!(open(spec.build().bytes).unwrap().1.len(), 2);
}

#[test]
fn an_unlocatable_string_table_gives_empty_results() {
    for spec in [
        Spec::default().with(DT_STRTAB, 0xdead_0000),
        Spec::default().with(DT_STRTAB, BASE - 1),
        Spec::default().with(DT_STRTAB, u64::MAX),
        Spec::default().without(DT_STRTAB),
        Spec::default().without(DT_STRSZ),
    ] {
        let img = Image::from_bytes(spec.build().bytes).unwrap();
        let elf = img.elf().unwrap();
        assert_eq!((elf.soname.as_deref(), elf.needed.len()), (None, 0));
        // Still a dynamic executable: only the names are unknown.
        assert_eq!(elf.linkage, Linkage::Dynamic);
    }
    // No names asked for: nothing to locate, nothing to refuse.
    let spec = Spec::default()
        .without(DT_SONAME)
        .without(DT_NEEDED)
        .with(DT_STRSZ, u64::MAX);
    assert_eq!(open(spec.build().bytes).unwrap(), (None, Vec::new()));
}

#[test]
fn a_huge_dt_strsz_is_an_error_at_its_entry() {
    for strsz in [0x1_0000, 0x8000_0000_0000_0000, u64::MAX] {
        let spec = Spec::default().with(DT_STRSZ, strsz);
        let (offset, what) = malformed_at(open(spec.build().bytes));
        assert_eq!(offset, dyn_entry(4), "{what}");
        assert!(what.contains("DT_STRSZ"), "{what}");
    }
}

#[test]
fn a_string_table_past_the_end_of_the_file_is_truncated() {
    // The segment claims more file bytes than there are; the table runs past
    // the end of the file though it fits the segment.
    let spec = Spec::default().with(DT_STRSZ, 0x10_0000);
    let mut built = spec.build();
    set(&mut built.bytes, built.load_ph + 32, 8, 0x20_0000);
    match Image::from_bytes(built.bytes).unwrap_err() {
        ImageError::Truncated { what, offset, .. } => {
            assert_eq!((what, offset), ("DT_STRTAB string table", STR_OFF as u64));
        }
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn names_outside_the_table_or_unterminated_are_errors() {
    // A name offset at or past DT_STRSZ, reported at its dynamic entry.
    for (tag, entry) in [(DT_SONAME, 0), (DT_NEEDED, 1)] {
        for off in [STRINGS.len() as u64, 0xffff_ffff, u64::MAX] {
            let mut spec = Spec::default();
            spec.dynamic[entry] = (tag, off);
            let (offset, what) = malformed_at(open(spec.build().bytes));
            assert_eq!(offset, dyn_entry(entry), "{what}");
            assert!(what.contains("outside"), "{what}");
        }
    }
    // The last name's NUL cut off by DT_STRSZ: no terminator within the table.
    let spec = Spec::default().with(DT_STRSZ, STRINGS.len() as u64 - 1);
    let (offset, what) = malformed_at(open(spec.build().bytes));
    assert_eq!(offset, (STR_OFF + 23) as u64);
    assert!(what.contains("DT_NEEDED name: no NUL"), "{what}");
    // Invalid UTF-8 in a name.
    let mut spec = Spec::default();
    spec.strings[14] = 0xff;
    let (offset, what) = malformed_at(open(spec.build().bytes));
    assert_eq!(offset, (STR_OFF + 14) as u64);
    assert!(what.contains("UTF-8"), "{what}");
}

#[test]
fn a_dynamic_segment_outside_the_file_is_an_error() {
    let mut built = Spec::default().build();
    set(&mut built.bytes, built.dynamic_ph + 8, 8, 0x10_0000);
    let (offset, what) = malformed_at(open(built.bytes));
    assert_eq!(offset, 0x10_0000);
    assert!(what.contains("PT_DYNAMIC"), "{what}");
}

#[test]
fn dt_needed_count_is_capped() {
    let mut spec = Spec::default().without(DT_NULL);
    spec.dynamic.retain(|e| e.0 != DT_NEEDED);
    spec.dynamic
        .extend(std::iter::repeat_n((DT_NEEDED, 13), 4096));
    let (_, needed) = open(spec.build().bytes).unwrap();
    assert_eq!(needed.len(), 4096);
    assert!(needed.iter().all(|n| n == "libc.so.6"));
    spec.dynamic.push((DT_NEEDED, 13));
    // The 4097th entry: DT_SONAME, DT_STRTAB and DT_STRSZ come first.
    let (offset, what) = malformed_at(open(spec.build().bytes));
    assert_eq!(offset, dyn_entry(3 + 4096));
    assert!(what.contains("more than 4096 DT_NEEDED"), "{what}");
}

#[test]
fn every_corruption_of_the_dynamic_elf_is_survived() {
    for spec in [
        Spec::default(),
        Spec {
            is64: false,
            big_endian: true,
            ..Spec::default()
        },
    ] {
        let clean = spec.build().bytes;
        let survive = |b: Vec<u8>| {
            if let Ok(img) = Image::from_bytes(b) {
                let elf = img.elf().unwrap();
                assert!(elf.needed.len() <= 4096);
                for s in &elf.segments {
                    let _ = img.segment_data(s);
                }
                let _ = img.build_id();
            }
        };
        for len in 0..clean.len() {
            survive(clean[..len].to_vec());
        }
        for at in 0..clean.len() {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut b = clean.clone();
                b[at] = v;
                survive(b);
            }
        }
        // Several bytes at once, xorshift-chosen.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..4000 {
            let mut b = clean.clone();
            for _ in 0..1 + round % 6 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % b.len() as u64) as usize;
                b[at] = (seed >> 40) as u8;
            }
            survive(b);
        }
    }
}
