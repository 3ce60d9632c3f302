//! ELF executables through `object`'s raw ELF reader: what a loader needs.
//!
//! `object` checks only the identification bytes and the header's size, so
//! `check_header` first refuses the header fields no loader accepts, each
//! as an [`ImageError::InvalidField`] naming the field and its offset.

use crate::ImageError;
use crate::bytes::{Bytes, to_usize};
use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{Endian, Endianness};
use std::ops::Range;

/// Most `DT_NEEDED` entries read from one file: real programs have tens,
/// and the cap bounds what a hostile dynamic section can make us allocate.
const MAX_NEEDED: usize = 4096;

// File offsets of the header fields both classes have at the same place.
const EI_CLASS: u64 = 4;
const EI_DATA: u64 = 5;
const EI_VERSION: u64 = 6;
const E_TYPE: u64 = 16;
const E_MACHINE: u64 = 18;
const E_VERSION: u64 = 20;

/// Where a class puts the fields that move with the word size, and the
/// structure sizes it implies.
struct Layout {
    class: ElfClass,
    ehsize: u16,
    ehsize_expected: &'static str,
    phentsize: u16,
    phentsize_expected: &'static str,
    e_phoff: u64,
    e_ehsize: u64,
    e_phentsize: u64,
    e_phnum: u64,
}

const ELF32: Layout = Layout {
    class: ElfClass::Elf32,
    ehsize: 52,
    ehsize_expected: "52 for ELFCLASS32",
    phentsize: 32,
    phentsize_expected: "32 for ELFCLASS32",
    e_phoff: 28,
    e_ehsize: 40,
    e_phentsize: 42,
    e_phnum: 44,
};

const ELF64: Layout = Layout {
    class: ElfClass::Elf64,
    ehsize: 64,
    ehsize_expected: "64 for ELFCLASS64",
    phentsize: 56,
    phentsize_expected: "56 for ELFCLASS64",
    e_phoff: 32,
    e_ehsize: 52,
    e_phentsize: 54,
    e_phnum: 56,
};

/// ELF class: 32- or 64-bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfClass {
    /// `ELFCLASS32`.
    Elf32,
    /// `ELFCLASS64`.
    Elf64,
}

/// How the executable is linked, as a loader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// No `PT_INTERP` and no `PT_DYNAMIC`: load and jump to the entry point.
    Static,
    /// No `PT_INTERP` but a `PT_DYNAMIC`: a static-pie that relocates itself.
    StaticPie,
    /// Has a `PT_INTERP`: the named dynamic loader must run first.
    Dynamic,
}

/// Access permissions of a segment (`p_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SegmentFlags {
    /// `PF_R`.
    pub read: bool,
    /// `PF_W`.
    pub write: bool,
    /// `PF_X`.
    pub execute: bool,
}

/// One `PT_LOAD` program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Segment {
    /// Virtual address the segment is loaded at.
    pub vaddr: u64,
    /// Size in memory; bytes past `filesz` are zero.
    pub memsz: u64,
    /// File offset of the segment's data.
    pub offset: u64,
    /// Bytes of data in the file.
    pub filesz: u64,
    /// Permissions.
    pub flags: SegmentFlags,
    /// Required alignment.
    pub align: u64,
}

/// What image-core knows of an ELF executable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElfInfo {
    /// 32- or 64-bit.
    pub class: ElfClass,
    /// Whether the file is little-endian.
    pub little_endian: bool,
    /// `e_machine` (243 is RISC-V).
    pub machine: u16,
    /// `e_type` (2 `ET_EXEC`, 3 `ET_DYN`).
    pub elf_type: u16,
    /// Entry point address.
    pub entry: u64,
    /// File offset of the program header table (a loader derives `AT_PHDR` from it).
    pub phoff: u64,
    /// Number of program headers (`AT_PHNUM`).
    pub phnum: u32,
    /// Size of one program header (`AT_PHENT`).
    pub phentsize: u16,
    /// The `PT_LOAD` segments, in file order.
    pub segments: Vec<Segment>,
    /// Static, static-pie or dynamic.
    pub linkage: Linkage,
    /// The `PT_INTERP` path, if any.
    pub interpreter: Option<String>,
    /// `DT_SONAME` from the `PT_DYNAMIC` segment: the name a shared object
    /// is known by (e.g. `libc.so.6`). `None` without one, or when the
    /// dynamic string table cannot be located (no `DT_STRTAB`/`DT_STRSZ`,
    /// or `DT_STRTAB` outside every `PT_LOAD` segment's file bytes).
    pub soname: Option<String>,
    /// The `DT_NEEDED` names from the `PT_DYNAMIC` segment, in entry order
    /// (the order the dynamic loader searches them in); at most 4096. Empty
    /// without any, or when the string table cannot be located (see
    /// [`soname`](Self::soname)).
    pub needed: Vec<String>,
    /// File range of the GNU build-id note's descriptor.
    pub(crate) build_id: Option<Range<usize>>,
}

/// `object` reports no offsets, so the caller passes where the structure
/// being read starts.
fn err(e: object::Error, what: &str, offset: u64) -> ImageError {
    ImageError::Malformed {
        offset,
        what: format!("ELF {what}: {e}"),
    }
}

fn invalid(
    field: &'static str,
    offset: u64,
    value: impl Into<u64>,
    expected: &'static str,
) -> ImageError {
    ImageError::InvalidField {
        field,
        offset,
        value: value.into(),
        expected,
    }
}

/// Parse an ELF file (the caller checked the `\x7fELF` magic).
pub(crate) fn parse(data: &[u8]) -> Result<ElfInfo, ImageError> {
    let file = Bytes::new(data);
    let ident: [u8; 16] = file.array(0, "ELF identification")?;
    let layout = match ident[4] {
        elf::ELFCLASS32 => &ELF32,
        elf::ELFCLASS64 => &ELF64,
        c => {
            let expected = "1 (ELFCLASS32) or 2 (ELFCLASS64)";
            return Err(invalid("EI_CLASS", EI_CLASS, c, expected));
        }
    };
    if !matches!(ident[5], elf::ELFDATA2LSB | elf::ELFDATA2MSB) {
        let expected = "1 (ELFDATA2LSB) or 2 (ELFDATA2MSB)";
        return Err(invalid("EI_DATA", EI_DATA, ident[5], expected));
    }
    if ident[6] != elf::EV_CURRENT {
        let expected = "1 (EV_CURRENT)";
        return Err(invalid("EI_VERSION", EI_VERSION, ident[6], expected));
    }
    // Checked here so a short file says how short, which `object` does not.
    file.slice(0, usize::from(layout.ehsize), "ELF header")?;
    match layout.class {
        ElfClass::Elf32 => parse_as::<elf::FileHeader32<Endianness>>(data, layout),
        ElfClass::Elf64 => parse_as::<elf::FileHeader64<Endianness>>(data, layout),
    }
}

/// Refuse the header values `object` lets through but no loader accepts,
/// in file-offset order so the first bad field is the one reported.
fn check_header<H: FileHeader<Endian = Endianness>>(
    h: &H,
    endian: Endianness,
    data: &[u8],
    l: &Layout,
) -> Result<(), ImageError> {
    let e_type = h.e_type(endian);
    // ET_LOOS..=ET_HIPROC are OS- and processor-specific, not unknown.
    if e_type == elf::ET_NONE || (elf::ET_CORE < e_type && e_type < elf::ET_LOOS) {
        let expected = "1 (ET_REL), 2 (ET_EXEC), 3 (ET_DYN), 4 (ET_CORE) or 0xfe00..=0xffff";
        return Err(invalid("e_type", E_TYPE, e_type, expected));
    }
    let machine = h.e_machine(endian);
    if machine == elf::EM_NONE {
        let expected = "a machine other than 0 (EM_NONE)";
        return Err(invalid("e_machine", E_MACHINE, machine, expected));
    }
    let version = h.e_version(endian);
    if version != u32::from(elf::EV_CURRENT) {
        return Err(invalid("e_version", E_VERSION, version, "1"));
    }
    let ehsize = h.e_ehsize(endian);
    if ehsize != l.ehsize {
        return Err(invalid("e_ehsize", l.e_ehsize, ehsize, l.ehsize_expected));
    }
    // PN_XNUM moves the count into section 0; `object` resolves it.
    let phnum = h
        .phnum(endian, data)
        .map_err(|e| err(e, "e_phnum", l.e_phnum))? as u64;
    if phnum == 0 {
        return Ok(());
    }
    let phentsize = h.e_phentsize(endian);
    if phentsize != l.phentsize {
        let expected = l.phentsize_expected;
        return Err(invalid("e_phentsize", l.e_phentsize, phentsize, expected));
    }
    let phoff: u64 = h.e_phoff(endian).into();
    let len = data.len() as u64;
    // `object` reads e_phoff 0 as "no program headers" and would drop them.
    if phoff == 0 || phoff >= len {
        let expected = "a nonzero offset inside the file when e_phnum > 0";
        return Err(invalid("e_phoff", l.e_phoff, phoff, expected));
    }
    // phnum < 2^32 and phentsize < 2^16: the product cannot overflow.
    let size = phnum * u64::from(phentsize);
    if phoff.checked_add(size).is_none_or(|end| end > len) {
        let expected = "a program header table that ends within the file";
        return Err(invalid("e_phnum", l.e_phnum, phnum, expected));
    }
    Ok(())
}

fn parse_as<H: FileHeader<Endian = Endianness>>(
    data: &[u8],
    layout: &Layout,
) -> Result<ElfInfo, ImageError> {
    let h = H::parse(data).map_err(|e| err(e, "header", 0))?;
    let endian = h.endian().map_err(|e| err(e, "header", EI_DATA))?;
    check_header(h, endian, data, layout)?;
    let phoff: u64 = h.e_phoff(endian).into();
    let phdrs = h
        .program_headers(endian, data)
        .map_err(|e| err(e, "program headers", phoff))?;
    let mut segments = Vec::new();
    let (mut interpreter, mut dynamic, mut build_id) = (None, None, None);
    for ph in phdrs {
        match ph.p_type(endian) {
            elf::PT_LOAD => {
                let f = ph.p_flags(endian);
                segments.push(Segment {
                    vaddr: ph.p_vaddr(endian).into(),
                    memsz: ph.p_memsz(endian).into(),
                    offset: ph.p_offset(endian).into(),
                    filesz: ph.p_filesz(endian).into(),
                    flags: SegmentFlags {
                        read: f & elf::PF_R != 0,
                        write: f & elf::PF_W != 0,
                        execute: f & elf::PF_X != 0,
                    },
                    align: ph.p_align(endian).into(),
                });
            }
            elf::PT_INTERP => {
                let raw = ph
                    .data(endian, data)
                    .map_err(|_| bad_range(ph, endian, "PT_INTERP"))?;
                let path = raw.split(|&b| b == 0).next().unwrap_or_default();
                interpreter = Some(String::from_utf8_lossy(path).into_owned());
            }
            // Read after the loop: DT_STRTAB needs every PT_LOAD to translate.
            elf::PT_DYNAMIC if dynamic.is_none() => dynamic = Some(ph),
            elf::PT_NOTE if build_id.is_none() => {
                let Some(mut notes) = ph
                    .notes(endian, data)
                    .map_err(|e| err(e, "PT_NOTE", ph.p_offset(endian).into()))?
                else {
                    continue;
                };
                while let Some(note) = notes
                    .next()
                    .map_err(|e| err(e, "note", ph.p_offset(endian).into()))?
                {
                    if note.name() == b"GNU" && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                        let desc = note.desc();
                        // `desc` borrows from `data`, so its address gives its offset.
                        let start = desc.as_ptr() as usize - data.as_ptr() as usize;
                        build_id = Some(start..start + desc.len());
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    let (soname, needed) = match dynamic {
        Some(ph) => read_dynamic::<H>(ph, endian, data, &segments)?,
        None => (None, Vec::new()),
    };
    let linkage = match (&interpreter, dynamic.is_some()) {
        (Some(_), _) => Linkage::Dynamic,
        (None, true) => Linkage::StaticPie,
        (None, false) => Linkage::Static,
    };
    Ok(ElfInfo {
        class: layout.class,
        little_endian: endian.is_little_endian(),
        machine: h.e_machine(endian),
        elf_type: h.e_type(endian),
        entry: h.e_entry(endian).into(),
        phoff,
        phnum: phdrs.len() as u32,
        phentsize: h.e_phentsize(endian),
        segments,
        linkage,
        interpreter,
        soname,
        needed,
        build_id,
    })
}

/// `DT_SONAME` and the `DT_NEEDED` names of a `PT_DYNAMIC` segment.
///
/// A string table that cannot be located gives empty results (a loader
/// would find no names either); one that is located but does not fit, or a
/// name outside it or without its NUL, is an error naming the offset.
fn read_dynamic<H: FileHeader<Endian = Endianness>>(
    ph: &H::ProgramHeader,
    endian: Endianness,
    data: &[u8],
    segments: &[Segment],
) -> Result<(Option<String>, Vec<String>), ImageError> {
    let raw = ph
        .data(endian, data)
        .map_err(|_| bad_range(ph, endian, "PT_DYNAMIC"))?;
    let start: u64 = ph.p_offset(endian).into();
    let entsize = std::mem::size_of::<H::Dyn>();
    // A trailing partial entry is ignored, as the dynamic loader never reads it.
    let (entries, _) =
        object::pod::slice_from_bytes::<H::Dyn>(raw, raw.len() / entsize).map_err(|()| {
            ImageError::Malformed {
                offset: start,
                what: "PT_DYNAMIC entries are misaligned".into(),
            }
        })?;
    // (file offset of the entry, d_val) for each string to read.
    let (mut soname_at, mut needed_at) = (None, Vec::new());
    let (mut strtab, mut strsz) = (None, None);
    for (i, d) in entries.iter().enumerate() {
        let at = start.saturating_add((i * entsize) as u64);
        let val: u64 = d.d_val(endian).into();
        // Later duplicates win, as in glibc's ld.so.
        match d.tag32(endian) {
            Some(elf::DT_NULL) => break,
            Some(elf::DT_NEEDED) => {
                if needed_at.len() == MAX_NEEDED {
                    return Err(ImageError::Malformed {
                        offset: at,
                        what: format!("more than {MAX_NEEDED} DT_NEEDED entries"),
                    });
                }
                needed_at.push((at, val));
            }
            Some(elf::DT_SONAME) => soname_at = Some((at, val)),
            Some(elf::DT_STRTAB) => strtab = Some(val),
            Some(elf::DT_STRSZ) => strsz = Some((at, val)),
            _ => {}
        }
    }
    if soname_at.is_none() && needed_at.is_empty() {
        return Ok((None, Vec::new()));
    }
    let (Some(strtab), Some((strsz_at, strsz))) = (strtab, strsz) else {
        return Ok((None, Vec::new()));
    };
    // DT_STRTAB is an address: find the file bytes loaded there.
    let Some((seg, delta)) = segments.iter().find_map(|s| {
        let delta = strtab.checked_sub(s.vaddr)?;
        (delta < s.filesz).then_some((s, delta))
    }) else {
        return Ok((None, Vec::new()));
    };
    let left = seg.filesz - delta;
    if strsz > left {
        return Err(ImageError::Malformed {
            offset: strsz_at,
            what: format!(
                "DT_STRSZ {strsz:#x} runs past the PT_LOAD segment holding DT_STRTAB \
                 ({left:#x} bytes left)"
            ),
        });
    }
    let off = seg.offset.saturating_add(delta);
    let table = Bytes::new(data).sub(
        to_usize(off, off, "DT_STRTAB offset")?,
        to_usize(strsz, strsz_at, "DT_STRSZ")?,
        "DT_STRTAB string table",
    )?;
    let name = |(at, val): (u64, u64), what: &'static str| -> Result<String, ImageError> {
        // val < strsz, which fits a usize: the cast is exact.
        if val >= strsz {
            return Err(ImageError::Malformed {
                offset: at,
                what: format!("{what} offset {val:#x} outside the {strsz:#x}-byte string table"),
            });
        }
        Ok(table.cstr(val as usize, table.len(), what)?.to_owned())
    };
    let soname = soname_at.map(|s| name(s, "DT_SONAME name")).transpose()?;
    let needed = needed_at
        .into_iter()
        .map(|n| name(n, "DT_NEEDED name"))
        .collect::<Result<_, _>>()?;
    Ok((soname, needed))
}

fn bad_range<P: ProgramHeader<Endian = Endianness>>(
    ph: &P,
    endian: Endianness,
    what: &str,
) -> ImageError {
    let offset: u64 = ph.p_offset(endian).into();
    let size: u64 = ph.p_filesz(endian).into();
    ImageError::Malformed {
        offset,
        what: format!("{what} data ({size:#x} bytes) lies outside the file"),
    }
}
