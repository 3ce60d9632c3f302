//! The ECMA-335 CLI header, metadata root, streams, heaps and tables (II.24, II.25.3.3).
//!
//! Parsing records offsets only; [`Metadata`] is a borrowed view that reads
//! rows and heap entries lazily from the file's bytes, checking every read.

use crate::bytes::{Bytes, to_usize};
use crate::identity::{AssemblyName, Guid, Version};
use crate::pe::{Dir, Pe};
use crate::sha1::public_key_token;
use crate::tables::{HeapWidths, TableLayout, layout};
use crate::{ImageError, Table};
use std::ops::Range;

const METADATA_SIGNATURE: u32 = 0x424A_5342;
/// Tokens hold a 24-bit row number, so no table can have more rows.
const MAX_ROWS: u32 = 0x00FF_FFFF;
/// `AssemblyFlags.PublicKey`: the blob holds the full key, not its token.
const AFL_PUBLIC_KEY: u32 = 0x0001;
/// `HeapSizes` bit that announces 4 extra bytes after the row counts.
const HEAP_EXTRA_DATA: u8 = 0x40;

/// The CLI header of a .NET image (II.25.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CliHeader {
    /// Major runtime version the image needs (2 for every modern image).
    pub major_runtime_version: u16,
    /// Minor runtime version (5 for every modern image).
    pub minor_runtime_version: u16,
    /// `COMIMAGE_FLAGS_*` (e.g. 0x1 IL only, 0x8 strong-name signed).
    pub flags: u32,
    /// Entry point: a MethodDef or File token, 0 for libraries.
    pub entry_point_token: u32,
    /// RVA of the metadata root.
    pub metadata_rva: u32,
    /// Size of the metadata in bytes.
    pub metadata_size: u32,
}

/// Offsets of everything parsed from the metadata root; owned, so `Image` can keep it.
#[derive(Debug)]
pub(crate) struct MetadataLayout {
    version: Range<usize>,
    strings: Range<usize>,
    user_strings: Range<usize>,
    guids: Range<usize>,
    blobs: Range<usize>,
    tables_stream: Range<usize>,
    uncompressed: bool,
    heap_sizes: u8,
    valid: u64,
    sorted: u64,
    tables: [TableLayout; Table::ALL.len()],
}

/// Parse the CLI header found through the PE's CLI directory; also returns
/// the metadata directory it points to.
pub(crate) fn parse_cli_header(pe: &Pe, file: Bytes<'_>) -> Result<(CliHeader, Dir), ImageError> {
    let h = pe.dir_bytes(file, pe.cli, "CLI header")?;
    let cb = h.u32(0, "CLI header cb")?;
    if cb < 72 {
        return Err(ImageError::Malformed {
            offset: h.file_offset(0),
            what: format!("CLI header size {cb} is below the 72 bytes ECMA-335 requires"),
        });
    }
    let md = Dir::read(&h, 8, "CLI header metadata directory")?;
    let header = CliHeader {
        major_runtime_version: h.u16(4, "CLI header runtime version")?,
        minor_runtime_version: h.u16(6, "CLI header runtime version")?,
        metadata_rva: md.rva,
        metadata_size: md.size,
        flags: h.u32(16, "CLI header flags")?,
        entry_point_token: h.u32(20, "CLI header entry point")?,
    };
    Ok((header, md))
}

fn range_of(file: &Bytes<'_>, part: &Bytes<'_>) -> Range<usize> {
    // Both windows come from the same file; `file` starts at offset 0.
    let start = part.file_offset(0) as usize;
    debug_assert_eq!(file.file_offset(0), 0);
    start..start + part.len()
}

/// Parse the metadata root, stream headers and the tables stream header.
pub(crate) fn parse_metadata(
    pe: &Pe,
    file: Bytes<'_>,
    dir: Dir,
) -> Result<MetadataLayout, ImageError> {
    let root = pe.dir_bytes(file, dir, "metadata root")?;
    let sig = root.u32(0, "metadata signature")?;
    if sig != METADATA_SIGNATURE {
        return Err(ImageError::Malformed {
            offset: root.file_offset(0),
            what: format!("metadata signature is {sig:#010x}, expected 0x424a5342 (BSJB)"),
        });
    }
    let version_len = root.u32(12, "metadata version length")? as usize;
    let version_bytes = root.sub(16, version_len, "metadata version string")?;
    // The string is NUL-padded to a multiple of 4; its length includes the padding.
    let version = version_bytes.cstr(0, version_len, "metadata version string")?;
    let version = version_bytes.file_offset(0) as usize
        ..version_bytes.file_offset(0) as usize + version.len();
    let mut at = 16usize
        .checked_add(version_len)
        .ok_or_else(|| ImageError::Malformed {
            offset: root.file_offset(12),
            what: "metadata version length overflows".into(),
        })?;
    let n_streams = root.u16(at + 2, "metadata stream count")?;
    at += 4;

    let empty = 0..0;
    let (mut strings, mut user_strings, mut guids, mut blobs) =
        (empty.clone(), empty.clone(), empty.clone(), empty);
    let mut tables: Option<(Bytes<'_>, bool)> = None;
    for _ in 0..n_streams {
        let offset = root.u32(at, "stream header offset")? as usize;
        let size = root.u32(at + 4, "stream header size")? as usize;
        let name = root.cstr(at + 8, 32, "stream name")?;
        let stream = root.sub(offset, size, "metadata stream").map_err(|_| ImageError::Malformed {
            offset: root.file_offset(at),
            what: format!(
                "stream {name:?} at offset {offset:#x} size {size:#x} exceeds the metadata ({:#x} bytes)",
                root.len()
            ),
        })?;
        // Name plus NUL, padded to 4 bytes.
        at += 8 + (name.len() + 4) / 4 * 4;
        // Later streams of the same name win, as in Mono.
        match name {
            "#Strings" => strings = range_of(&file, &stream),
            "#US" => user_strings = range_of(&file, &stream),
            "#GUID" => guids = range_of(&file, &stream),
            "#Blob" => blobs = range_of(&file, &stream),
            "#~" => tables = Some((stream, false)),
            "#-" => tables = Some((stream, true)),
            _ => {}
        }
    }
    let Some((ts, uncompressed)) = tables else {
        return Err(ImageError::Malformed {
            offset: root.file_offset(0),
            what: "metadata has no #~ or #- tables stream".into(),
        });
    };

    let heap_sizes = ts.u8(6, "tables heap sizes")?;
    let valid = ts.u64(8, "tables valid mask")?;
    let sorted = ts.u64(16, "tables sorted mask")?;
    let mut rows = [0u32; 64];
    let mut at = 24usize;
    for (id, slot) in rows.iter_mut().enumerate() {
        if valid & (1u64 << id) == 0 {
            continue;
        }
        if Table::from_id(id as u8).is_none() {
            return Err(ImageError::Malformed {
                offset: ts.file_offset(8),
                what: format!("table 0x{id:02x} is present but not defined by ECMA-335"),
            });
        }
        let n = ts.u32(at, "table row count")?;
        if n > MAX_ROWS {
            return Err(ImageError::Malformed {
                offset: ts.file_offset(at),
                what: format!("table 0x{id:02x} claims {n} rows, more than a token can address"),
            });
        }
        *slot = n;
        at += 4;
    }
    if heap_sizes & HEAP_EXTRA_DATA != 0 {
        at += 4;
    }
    let widths = HeapWidths::from_flags(heap_sizes);
    let mut layouts = [TableLayout::default(); Table::ALL.len()];
    let mut pos = at as u64;
    for (t, slot) in Table::ALL.iter().zip(layouts.iter_mut()) {
        let mut l = layout(*t, &rows, widths);
        l.offset = to_usize(pos, ts.file_offset(0), "table offset")?;
        pos += u64::from(l.rows) * l.row_size as u64;
        *slot = l;
    }
    if pos > ts.len() as u64 {
        return Err(ImageError::Truncated {
            what: "metadata tables",
            offset: ts.file_offset(0),
            needed: pos,
            available: ts.len() as u64,
        });
    }
    Ok(MetadataLayout {
        version,
        strings,
        user_strings,
        guids,
        blobs,
        tables_stream: range_of(&file, &ts),
        uncompressed,
        heap_sizes,
        valid,
        sorted,
        tables: layouts,
    })
}

/// A borrowed, lazily read view of an image's ECMA-335 metadata.
///
/// Obtained from [`Image::metadata`](crate::Image::metadata). Everything it
/// returns borrows from the image's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Metadata<'a> {
    file: &'a [u8],
    layout: &'a MetadataLayout,
}

/// The Module row (II.22.30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleRow<'a> {
    /// Reserved, zero.
    pub generation: u16,
    /// The module's file name, e.g. `System.dll`.
    pub name: &'a str,
    /// The module version id, unique per build.
    pub mvid: Option<Guid>,
}

/// The Assembly row (II.22.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AssemblyRow<'a> {
    /// Hash algorithm id (0x8004 is SHA-1).
    pub hash_algorithm: u32,
    /// Version.
    pub version: Version,
    /// `AssemblyFlags`.
    pub flags: u32,
    /// The full public key, empty when not strong-named.
    pub public_key: &'a [u8],
    /// Simple name.
    pub name: &'a str,
    /// Culture, empty for neutral.
    pub culture: &'a str,
}

/// One AssemblyRef row (II.22.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AssemblyRefRow<'a> {
    /// Version asked for.
    pub version: Version,
    /// `AssemblyFlags`; bit 0x1 means `public_key_or_token` is a full key.
    pub flags: u32,
    /// The full public key or its 8-byte token, empty if none.
    pub public_key_or_token: &'a [u8],
    /// Simple name.
    pub name: &'a str,
    /// Culture, empty for neutral.
    pub culture: &'a str,
    /// Hash of the referenced assembly, usually empty.
    pub hash_value: &'a [u8],
}

/// An entry preceded by its compressed length (II.23.2), as in `#Blob` and `#US`.
fn sized_entry<'a>(
    heap: Bytes<'a>,
    index: u32,
    what: &'static str,
) -> Result<&'a [u8], ImageError> {
    let i = index as usize;
    let b0 = heap.u8(i, what)?;
    let (len, hdr) = if b0 & 0x80 == 0 {
        (u32::from(b0), 1)
    } else if b0 & 0xC0 == 0x80 {
        (
            (u32::from(b0 & 0x3F) << 8) | u32::from(heap.u8(i + 1, what)?),
            2,
        )
    } else if b0 & 0xE0 == 0xC0 {
        let b = heap.array::<4>(i, what)?;
        (u32::from_be_bytes([b[0] & 0x1F, b[1], b[2], b[3]]), 4)
    } else {
        return Err(ImageError::Malformed {
            offset: heap.file_offset(i),
            what: format!("{what}: length prefix byte {b0:#04x} is invalid"),
        });
    };
    heap.slice(i + hdr, len as usize, what)
}

fn culture(c: &str) -> Option<String> {
    (!c.is_empty() && c != "neutral").then(|| c.to_owned())
}

impl AssemblyRow<'_> {
    /// The public key token derived from the public key, if there is one.
    pub fn public_key_token(&self) -> Option<[u8; 8]> {
        (!self.public_key.is_empty()).then(|| public_key_token(self.public_key))
    }

    /// The owned identity of this assembly.
    pub fn to_name(&self) -> AssemblyName {
        AssemblyName {
            name: self.name.to_owned(),
            version: self.version,
            culture: culture(self.culture),
            public_key_token: self.public_key_token(),
        }
    }
}

impl AssemblyRefRow<'_> {
    /// The public key token asked for: hashed from a full key, or as stored.
    ///
    /// Returns `None` when the reference is not strong-named or when the stored
    /// token does not have the 8 bytes a token has.
    pub fn public_key_token(&self) -> Option<[u8; 8]> {
        if self.public_key_or_token.is_empty() {
            None
        } else if self.flags & AFL_PUBLIC_KEY != 0 {
            Some(public_key_token(self.public_key_or_token))
        } else {
            self.public_key_or_token.try_into().ok()
        }
    }

    /// The owned identity this reference asks for.
    pub fn to_name(&self) -> AssemblyName {
        AssemblyName {
            name: self.name.to_owned(),
            version: self.version,
            culture: culture(self.culture),
            public_key_token: self.public_key_token(),
        }
    }
}

impl<'a> Metadata<'a> {
    pub(crate) fn new(file: &'a [u8], layout: &'a MetadataLayout) -> Self {
        Metadata { file, layout }
    }

    fn heap(&self, r: &Range<usize>, what: &'static str) -> Result<Bytes<'a>, ImageError> {
        Bytes::new(self.file).sub(r.start, r.len(), what)
    }

    /// The metadata version string, e.g. `v4.0.30319`.
    pub fn version(&self) -> &'a str {
        let r = &self.layout.version;
        self.file
            .get(r.clone())
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }

    /// Whether the tables are in an uncompressed `#-` stream rather than `#~`.
    pub fn is_uncompressed(&self) -> bool {
        self.layout.uncompressed
    }

    /// The `HeapSizes` byte of the tables stream.
    pub fn heap_sizes(&self) -> u8 {
        self.layout.heap_sizes
    }

    /// Bit mask of the tables present.
    pub fn valid_mask(&self) -> u64 {
        self.layout.valid
    }

    /// Bit mask of the tables flagged as sorted.
    pub fn sorted_mask(&self) -> u64 {
        self.layout.sorted
    }

    /// Number of rows in `table` (0 when absent).
    pub fn row_count(&self, table: Table) -> u32 {
        self.layout.tables[table as usize].rows
    }

    /// Size in bytes of one row of `table`, given this image's index widths.
    pub fn row_size(&self, table: Table) -> usize {
        self.layout.tables[table as usize].row_size
    }

    /// The raw value of column `col` of row `row` (1-based) of `table`.
    fn cell(&self, table: Table, row: u32, col: usize) -> Result<u32, ImageError> {
        let l = &self.layout.tables[table as usize];
        let ts = self.heap(&self.layout.tables_stream, "metadata tables")?;
        if row == 0 || row > l.rows {
            return Err(ImageError::Malformed {
                offset: ts.file_offset(l.offset),
                what: format!("row {row} of table {table} is out of range 1..={}", l.rows),
            });
        }
        let (off, width) = l.cols.get(col).copied().unwrap_or((0, 0));
        if width == 0 {
            return Err(ImageError::Malformed {
                offset: ts.file_offset(l.offset),
                what: format!("table {table} has no column {col}"),
            });
        }
        let at = (row as usize - 1)
            .checked_mul(l.row_size)
            .and_then(|r| r.checked_add(l.offset))
            .and_then(|r| r.checked_add(usize::from(off)))
            .unwrap_or(usize::MAX);
        ts.index(at, width, "metadata table cell")
    }

    /// The string at `index` in the `#Strings` heap.
    pub fn string(&self, index: u32) -> Result<&'a str, ImageError> {
        let heap = self.heap(&self.layout.strings, "#Strings heap")?;
        if index as usize >= heap.len() {
            // Index 0 of an empty or missing heap is the empty string.
            if index == 0 {
                return Ok("");
            }
            return Err(ImageError::Malformed {
                offset: heap.file_offset(0),
                what: format!(
                    "#Strings index {index:#x} is past the heap ({:#x} bytes)",
                    heap.len()
                ),
            });
        }
        heap.cstr(index as usize, usize::MAX, "#Strings entry")
    }

    /// The blob at `index` in the `#Blob` heap (II.24.2.4), without its length prefix.
    pub fn blob(&self, index: u32) -> Result<&'a [u8], ImageError> {
        let heap = self.heap(&self.layout.blobs, "#Blob heap")?;
        if index == 0 && heap.len() == 0 {
            return Ok(&[]);
        }
        sized_entry(heap, index, "#Blob entry")
    }

    /// The GUID at 1-based `index` in the `#GUID` heap; `None` for index 0.
    pub fn guid(&self, index: u32) -> Result<Option<Guid>, ImageError> {
        if index == 0 {
            return Ok(None);
        }
        let heap = self.heap(&self.layout.guids, "#GUID heap")?;
        let at = (index as usize - 1).saturating_mul(16);
        heap.array::<16>(at, "#GUID entry").map(|g| Some(Guid(g)))
    }

    /// The user string at `index` in the `#US` heap, decoded from UTF-16.
    ///
    /// Unpaired surrogates become U+FFFD.
    pub fn user_string(&self, index: u32) -> Result<String, ImageError> {
        let heap = self.heap(&self.layout.user_strings, "#US heap")?;
        let raw = sized_entry(heap, index, "#US entry")?;
        // An odd trailing byte is a flag, not part of the string.
        let chars = raw.get(..raw.len() & !1).unwrap_or_default();
        let units = chars
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]));
        Ok(char::decode_utf16(units)
            .map(|c| c.unwrap_or('\u{FFFD}'))
            .collect())
    }

    /// The Module row.
    pub fn module(&self) -> Result<ModuleRow<'a>, ImageError> {
        let t = Table::Module;
        Ok(ModuleRow {
            generation: self.cell(t, 1, 0)? as u16,
            name: self.string(self.cell(t, 1, 1)?)?,
            mvid: self.guid(self.cell(t, 1, 2)?)?,
        })
    }

    /// The Assembly row, `None` for a module that is not an assembly manifest.
    pub fn assembly(&self) -> Result<Option<AssemblyRow<'a>>, ImageError> {
        let t = Table::Assembly;
        match self.row_count(t) {
            0 => return Ok(None),
            1 => {}
            n => {
                let l = &self.layout.tables[t as usize];
                return Err(ImageError::Malformed {
                    offset: (self.layout.tables_stream.start + l.offset) as u64,
                    what: format!("Assembly table has {n} rows, at most 1 is allowed"),
                });
            }
        }
        let c = |col| self.cell(t, 1, col);
        Ok(Some(AssemblyRow {
            hash_algorithm: c(0)?,
            version: Version {
                major: c(1)? as u16,
                minor: c(2)? as u16,
                build: c(3)? as u16,
                revision: c(4)? as u16,
            },
            flags: c(5)?,
            public_key: self.blob(c(6)?)?,
            name: self.string(c(7)?)?,
            culture: self.string(c(8)?)?,
        }))
    }

    /// The AssemblyRef row `row` (1-based).
    pub fn assembly_ref(&self, row: u32) -> Result<AssemblyRefRow<'a>, ImageError> {
        let t = Table::AssemblyRef;
        let c = |col| self.cell(t, row, col);
        Ok(AssemblyRefRow {
            version: Version {
                major: c(0)? as u16,
                minor: c(1)? as u16,
                build: c(2)? as u16,
                revision: c(3)? as u16,
            },
            flags: c(4)?,
            public_key_or_token: self.blob(c(5)?)?,
            name: self.string(c(6)?)?,
            culture: self.string(c(7)?)?,
            hash_value: self.blob(c(8)?)?,
        })
    }

    /// Every AssemblyRef row, in table order.
    pub fn assembly_refs(
        &self,
    ) -> impl Iterator<Item = Result<AssemblyRefRow<'a>, ImageError>> + 'a {
        let md = *self;
        (1..=self.row_count(Table::AssemblyRef)).map(move |r| md.assembly_ref(r))
    }

    /// The names of every ModuleRef row (other modules and native libraries), in table order.
    pub fn module_refs(&self) -> impl Iterator<Item = Result<&'a str, ImageError>> + 'a {
        let md = *self;
        (1..=self.row_count(Table::ModuleRef))
            .map(move |r| md.cell(Table::ModuleRef, r, 0).and_then(|i| md.string(i)))
    }
}
