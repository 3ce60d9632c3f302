//! The one error type of this crate.

/// Why an image could not be opened, parsed or loaded.
///
/// Parse errors name the file offset at which the problem was found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The file could not be read or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path that was being opened.
        path: std::path::PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are neither a PE/COFF image nor an ELF file.
    #[error("unknown image format at offset {offset:#x}: {what}")]
    UnknownFormat {
        /// Offset where detection failed (usually 0).
        offset: u64,
        /// What was found instead.
        what: String,
    },
    /// A PE/COFF image without a CLI header: a native DLL or EXE, not a .NET image.
    #[error("not a .NET image: PE file has no CLI header (data directory 14 is empty)")]
    NotDotNet,
    /// A structure extends past the end of the data.
    #[error(
        "truncated image: {what} at offset {offset:#x} needs {needed} bytes, {available} available"
    )]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Offset of the read.
        offset: u64,
        /// Bytes the read needs.
        needed: u64,
        /// Bytes actually available from `offset`.
        available: u64,
    },
    /// A field of the ELF file header (`e_ident` or the `e_*` fields) has a
    /// value no ELF loader accepts.
    ///
    /// A program header table that starts outside the file is reported as
    /// `e_phoff`; one that starts inside but runs past the end, as `e_phnum`.
    #[error(
        "invalid ELF header field {field} at offset {offset:#x}: {value} (expected {expected})"
    )]
    InvalidField {
        /// The field's name as the ELF specification spells it, e.g. `e_version`.
        field: &'static str,
        /// File offset of the field.
        offset: u64,
        /// The value found.
        value: u64,
        /// What a valid file has there.
        expected: &'static str,
    },
    /// A structure has an invalid value.
    #[error("malformed image at offset {offset:#x}: {what}")]
    Malformed {
        /// Offset of the bad value.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}
