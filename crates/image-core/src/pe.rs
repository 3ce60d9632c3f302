//! The PE/COFF container: just enough to find data directories and map RVAs.
//!
//! Hand-written rather than `object`'s PE reader because every error here has
//! to name the file offset that was wrong, and the part we need (DOS stub,
//! COFF header, optional-header directories, section table) is small.

use crate::ImageError;
use crate::bytes::{Bytes, to_usize};

/// Data directory index of the debug directory.
const DIR_DEBUG: usize = 6;
/// Data directory index of the CLI (COM descriptor) header.
const DIR_CLI: usize = 14;
const SECTION_HEADER_SIZE: usize = 40;

/// One section header, reduced to what RVA mapping needs.
#[derive(Clone, Copy, Debug)]
struct Section {
    virtual_address: u32,
    virtual_size: u32,
    raw_offset: u32,
    raw_size: u32,
}

/// An RVA/size pair from the optional header or the CLI header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dir {
    pub(crate) rva: u32,
    pub(crate) size: u32,
    /// File offset the pair was read from, for errors.
    pub(crate) at: u64,
}

impl Dir {
    pub(crate) fn read(b: &Bytes<'_>, off: usize, what: &'static str) -> Result<Dir, ImageError> {
        Ok(Dir {
            rva: b.u32(off, what)?,
            size: b.u32(off + 4, what)?,
            at: b.file_offset(off),
        })
    }

    pub(crate) fn is_present(&self) -> bool {
        self.rva != 0 && self.size != 0
    }
}

/// The parsed PE headers of one file.
#[derive(Debug)]
pub(crate) struct Pe {
    sections: Vec<Section>,
    /// The CLI header directory (absent for native DLLs).
    pub(crate) cli: Dir,
    /// The debug directory.
    pub(crate) debug: Dir,
}

impl Pe {
    /// Parse the DOS stub, PE signature, COFF and optional headers and the section table.
    pub(crate) fn parse(file: Bytes<'_>) -> Result<Pe, ImageError> {
        if file.slice(0, 2, "DOS signature")? != b"MZ" {
            return Err(ImageError::UnknownFormat {
                offset: 0,
                what: "no MZ signature".into(),
            });
        }
        let pe_off = to_usize(u64::from(file.u32(0x3c, "e_lfanew")?), 0x3c, "e_lfanew")?;
        if file.slice(pe_off, 4, "PE signature")? != b"PE\0\0" {
            return Err(ImageError::Malformed {
                offset: file.file_offset(pe_off),
                what: "MZ file without a PE signature (DOS executable?)".into(),
            });
        }
        let coff = pe_off + 4;
        let n_sections = usize::from(file.u16(coff + 2, "COFF NumberOfSections")?);
        let opt_size = usize::from(file.u16(coff + 16, "COFF SizeOfOptionalHeader")?);
        let opt_off = coff + 20;
        let opt = file.sub(opt_off, opt_size, "optional header")?;
        let (n_dirs_at, dirs_at) = match opt.u16(0, "optional header magic")? {
            0x10b => (92, 96),
            0x20b => (108, 112),
            m => {
                return Err(ImageError::Malformed {
                    offset: opt.file_offset(0),
                    what: format!("unknown optional header magic {m:#x}"),
                });
            }
        };
        let n_dirs = opt.u32(n_dirs_at, "NumberOfRvaAndSizes")?;
        // Directories beyond the declared count, or beyond the optional header, are absent.
        let max_dirs = opt.len().saturating_sub(dirs_at) / 8;
        let n_dirs = (n_dirs as usize).min(max_dirs);
        let dir = |index: usize, what| -> Result<Dir, ImageError> {
            if index < n_dirs {
                Dir::read(&opt, dirs_at + 8 * index, what)
            } else {
                Ok(Dir::default())
            }
        };
        let cli = dir(DIR_CLI, "CLI header directory")?;
        let debug = dir(DIR_DEBUG, "debug directory")?;

        let table = file.sub(
            opt_off + opt_size,
            n_sections * SECTION_HEADER_SIZE,
            "section table",
        )?;
        let mut sections = Vec::with_capacity(n_sections);
        for i in 0..n_sections {
            let at = i * SECTION_HEADER_SIZE;
            let s = Section {
                virtual_size: table.u32(at + 8, "section VirtualSize")?,
                virtual_address: table.u32(at + 12, "section VirtualAddress")?,
                raw_size: table.u32(at + 16, "section SizeOfRawData")?,
                raw_offset: table.u32(at + 20, "section PointerToRawData")?,
            };
            // A section whose data runs past the end of the file means the
            // file was cut short; say so now rather than at some later read.
            let end = u64::from(s.raw_offset) + u64::from(s.raw_size);
            if end > file.len() as u64 {
                return Err(ImageError::Truncated {
                    what: "section data",
                    offset: u64::from(s.raw_offset),
                    needed: u64::from(s.raw_size),
                    available: (file.len() as u64).saturating_sub(u64::from(s.raw_offset)),
                });
            }
            sections.push(s);
        }
        Ok(Pe {
            sections,
            cli,
            debug,
        })
    }

    /// The file bytes at `rva`, up to the end of the section's raw data;
    /// `at` is the file offset the RVA was read from.
    pub(crate) fn at_rva<'a>(
        &self,
        file: Bytes<'a>,
        rva: u32,
        at: u64,
        what: &'static str,
    ) -> Result<Bytes<'a>, ImageError> {
        for s in &self.sections {
            let span = if s.virtual_size == 0 {
                s.raw_size
            } else {
                s.virtual_size
            };
            let Some(delta) = rva.checked_sub(s.virtual_address) else {
                continue;
            };
            if delta >= span {
                continue;
            }
            // Bytes past SizeOfRawData are zero-fill in memory and absent from the file.
            let avail = s.raw_size.min(span).saturating_sub(delta);
            let start = u64::from(s.raw_offset) + u64::from(delta);
            let start = to_usize(start, start, what)?;
            // Section data was checked to lie within the file at parse time.
            return file.sub(start, avail as usize, what);
        }
        Err(ImageError::Malformed {
            offset: at,
            what: format!("{what}: RVA {rva:#x} is in no section"),
        })
    }

    /// Exactly `dir.size` bytes at `dir.rva`.
    pub(crate) fn dir_bytes<'a>(
        &self,
        file: Bytes<'a>,
        dir: Dir,
        what: &'static str,
    ) -> Result<Bytes<'a>, ImageError> {
        self.at_rva(file, dir.rva, dir.at, what)?
            .sub(0, dir.size as usize, what)
    }
}
