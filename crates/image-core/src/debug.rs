//! The PE debug directory (PE/COFF spec, "The .debug Section"): every entry,
//! with CodeView RSDS, Deterministic, EmbeddedPortablePdb and PdbChecksum decoded.

use crate::ImageError;
use crate::bytes::{Bytes, to_usize};
use crate::identity::Guid;
use crate::pe::Pe;

const ENTRY_SIZE: usize = 28;
const TYPE_CODEVIEW: u32 = 2;
const TYPE_DETERMINISTIC: u32 = 16;
const TYPE_EMBEDDED_PORTABLE_PDB: u32 = 17;
const TYPE_PDB_CHECKSUM: u32 = 19;
const RSDS: &[u8; 4] = b"RSDS";
const MPDB: &[u8; 4] = b"MPDB";
/// Longest PDB path or algorithm name we look for a NUL in.
const MAX_NAME: usize = 4096;

/// A CodeView "RSDS" record: which PDB matches this image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodeView<'a> {
    /// PDB signature GUID (EventPipe's `ManagedPdbSignature`).
    pub guid: Guid,
    /// PDB age (`ManagedPdbAge`).
    pub age: u32,
    /// PDB path as recorded at build time (`ManagedPdbBuildPath`).
    pub path: &'a str,
}

/// What a debug directory entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DebugData<'a> {
    /// Type 2 with an RSDS record.
    CodeView(CodeView<'a>),
    /// Type 16: the image was built deterministically; no data.
    Deterministic,
    /// Type 17: a deflate-compressed portable PDB embedded in the image.
    EmbeddedPortablePdb {
        /// Size of the PDB once decompressed, as the entry states it.
        uncompressed_size: u32,
        /// Size of the compressed data following the header.
        compressed_size: u32,
    },
    /// Type 19: a checksum of the matching PDB.
    PdbChecksum {
        /// Hash algorithm name, e.g. `SHA256`.
        algorithm: &'a str,
        /// The checksum bytes.
        checksum: &'a [u8],
    },
    /// Any other entry (or a CodeView entry in an older format): its raw data.
    Other(&'a [u8]),
}

/// One entry of the debug directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DebugEntry<'a> {
    /// `IMAGE_DEBUG_TYPE_*` value (2 CodeView, 16 Deterministic, 17 embedded PDB, 19 checksum ...).
    pub entry_type: u32,
    /// Time stamp (for deterministic builds, a hash fragment rather than a time).
    pub time_date_stamp: u32,
    /// Major version (0x0100 plus a portable PDB version for portable CodeView entries).
    pub major_version: u16,
    /// Minor version (0x504d marks a portable PDB).
    pub minor_version: u16,
    /// The decoded data.
    pub data: DebugData<'a>,
}

/// Walk the debug directory of a PE image.
pub(crate) fn entries<'a>(pe: &Pe, file: Bytes<'a>) -> Result<Vec<DebugEntry<'a>>, ImageError> {
    if !pe.debug.is_present() {
        return Ok(Vec::new());
    }
    let dir = pe.dir_bytes(file, pe.debug, "debug directory")?;
    // The count is bounded by the directory's size, which was checked to lie in the file.
    let count = dir.len() / ENTRY_SIZE;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let e = dir.sub(i * ENTRY_SIZE, ENTRY_SIZE, "debug directory entry")?;
        let entry_type = e.u32(12, "debug entry type")?;
        let size = e.u32(16, "debug entry size")?;
        let rva = e.u32(20, "debug entry data RVA")?;
        let pointer = e.u32(24, "debug entry data pointer")?;
        let raw = if size == 0 {
            file.sub(0, 0, "debug data")?
        } else if pointer != 0 {
            let start = to_usize(u64::from(pointer), e.file_offset(24), "debug data pointer")?;
            file.sub(start, size as usize, "debug entry data")?
        } else {
            pe.at_rva(file, rva, e.file_offset(20), "debug entry data")?
                .sub(0, size as usize, "debug entry data")?
        };
        out.push(DebugEntry {
            entry_type,
            time_date_stamp: e.u32(4, "debug entry time stamp")?,
            major_version: e.u16(8, "debug entry version")?,
            minor_version: e.u16(10, "debug entry version")?,
            data: decode(entry_type, raw)?,
        });
    }
    Ok(out)
}

fn decode(entry_type: u32, raw: Bytes<'_>) -> Result<DebugData<'_>, ImageError> {
    Ok(match entry_type {
        TYPE_CODEVIEW if raw.data().starts_with(RSDS) => DebugData::CodeView(CodeView {
            guid: Guid(raw.array(4, "CodeView GUID")?),
            age: raw.u32(20, "CodeView age")?,
            path: raw.cstr(24, MAX_NAME, "CodeView PDB path")?,
        }),
        TYPE_DETERMINISTIC => DebugData::Deterministic,
        TYPE_EMBEDDED_PORTABLE_PDB => {
            if raw.slice(0, 4, "embedded PDB signature")? != MPDB {
                return Err(ImageError::Malformed {
                    offset: raw.file_offset(0),
                    what: "embedded portable PDB entry without MPDB signature".into(),
                });
            }
            DebugData::EmbeddedPortablePdb {
                uncompressed_size: raw.u32(4, "embedded PDB size")?,
                compressed_size: raw.len().saturating_sub(8) as u32,
            }
        }
        TYPE_PDB_CHECKSUM => {
            let algorithm = raw.cstr(0, MAX_NAME, "PDB checksum algorithm")?;
            DebugData::PdbChecksum {
                algorithm,
                checksum: raw.tail(algorithm.len() + 1, "PDB checksum")?.data(),
            }
        }
        _ => DebugData::Other(raw.data()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_bytes(entry_type: u32, raw: &[u8]) -> Result<DebugData<'_>, ImageError> {
        decode(entry_type, Bytes::new(raw))
    }

    #[test]
    fn decodes_each_known_kind() {
        let mut rsds = b"RSDS".to_vec();
        rsds.extend(1..=16u8);
        rsds.extend(7u32.to_le_bytes());
        rsds.extend(b"a.pdb\0");
        match decode_bytes(TYPE_CODEVIEW, &rsds).unwrap() {
            DebugData::CodeView(cv) => {
                assert_eq!(
                    (cv.age, cv.path, cv.guid.0[0], cv.guid.0[15]),
                    (7, "a.pdb", 1, 16)
                );
            }
            other => panic!("{other:?}"),
        }
        let mut mpdb = b"MPDB".to_vec();
        mpdb.extend(1000u32.to_le_bytes());
        mpdb.extend([0u8; 300]);
        assert_eq!(
            decode_bytes(TYPE_EMBEDDED_PORTABLE_PDB, &mpdb).unwrap(),
            DebugData::EmbeddedPortablePdb {
                uncompressed_size: 1000,
                compressed_size: 300
            }
        );
        assert_eq!(
            decode_bytes(TYPE_PDB_CHECKSUM, b"SHA384\0\x01\x02").unwrap(),
            DebugData::PdbChecksum {
                algorithm: "SHA384",
                checksum: &[1, 2]
            }
        );
        assert_eq!(
            decode_bytes(TYPE_DETERMINISTIC, &[]).unwrap(),
            DebugData::Deterministic
        );
        // An old NB10 CodeView record and unknown types keep their raw data.
        assert_eq!(
            decode_bytes(TYPE_CODEVIEW, b"NB10").unwrap(),
            DebugData::Other(b"NB10")
        );
        assert_eq!(decode_bytes(20, b"xy").unwrap(), DebugData::Other(b"xy"));
    }

    #[test]
    fn malformed_entries_are_errors() {
        assert!(matches!(
            decode_bytes(TYPE_CODEVIEW, b"RSDS\x01\x02"),
            Err(ImageError::Truncated { .. })
        ));
        let mut no_nul = b"RSDS".to_vec();
        no_nul.extend([0u8; 20]);
        no_nul.extend(b"path-without-nul");
        assert!(matches!(
            decode_bytes(TYPE_CODEVIEW, &no_nul),
            Err(ImageError::Malformed { .. })
        ));
        assert!(matches!(
            decode_bytes(TYPE_EMBEDDED_PORTABLE_PDB, b"XXXX\0\0\0\0"),
            Err(ImageError::Malformed { .. })
        ));
        assert!(decode_bytes(TYPE_EMBEDDED_PORTABLE_PDB, b"MPDB\x01").is_err());
        assert!(decode_bytes(TYPE_PDB_CHECKSUM, b"SHA256").is_err());
    }
}
