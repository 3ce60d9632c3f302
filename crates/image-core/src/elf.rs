//! ELF executables through `object`'s raw ELF reader: what a loader needs.

use crate::ImageError;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endian, Endianness};
use std::ops::Range;

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

/// Parse an ELF file (the caller checked the `\x7fELF` magic).
pub(crate) fn parse(data: &[u8]) -> Result<ElfInfo, ImageError> {
    match data.get(4) {
        Some(&elf::ELFCLASS32) => parse_as::<elf::FileHeader32<Endianness>>(data, ElfClass::Elf32),
        Some(&elf::ELFCLASS64) => parse_as::<elf::FileHeader64<Endianness>>(data, ElfClass::Elf64),
        Some(c) => Err(ImageError::Malformed {
            offset: 4,
            what: format!("unknown ELF class {c}"),
        }),
        None => Err(ImageError::Truncated {
            what: "ELF identification",
            offset: 0,
            needed: 5,
            available: data.len() as u64,
        }),
    }
}

fn parse_as<H: FileHeader<Endian = Endianness>>(
    data: &[u8],
    class: ElfClass,
) -> Result<ElfInfo, ImageError> {
    let h = H::parse(data).map_err(|e| err(e, "header", 0))?;
    let endian = h.endian().map_err(|e| err(e, "header", 5))?;
    let phoff: u64 = h.e_phoff(endian).into();
    let phdrs = h
        .program_headers(endian, data)
        .map_err(|e| err(e, "program headers", phoff))?;
    let mut segments = Vec::new();
    let (mut interpreter, mut has_dynamic, mut build_id) = (None, false, None);
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
            elf::PT_DYNAMIC => has_dynamic = true,
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
    let linkage = match (&interpreter, has_dynamic) {
        (Some(_), _) => Linkage::Dynamic,
        (None, true) => Linkage::StaticPie,
        (None, false) => Linkage::Static,
    };
    Ok(ElfInfo {
        class,
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
        build_id,
    })
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
