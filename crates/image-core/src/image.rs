//! `Image`: one opened image file (PLACEHOLDER: being written; see issue 2).

use crate::{AssemblyName, ImageError};
use std::path::Path;

/// One opened image: a .NET assembly/module or an ELF executable.
#[derive(Debug)]
pub struct Image {
    _bytes: Vec<u8>,
}

impl Image {
    /// Open and memory-map a file, detect its format and parse its headers.
    pub fn open(path: &Path) -> Result<Image, ImageError> {
        let bytes = std::fs::read(path).map_err(|source| ImageError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(bytes)
    }

    /// Parse an image held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Image, ImageError> {
        let _ = bytes;
        Err(ImageError::UnknownFormat { offset: 0, what: "unimplemented".into() })
    }

    /// The path the image was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        None
    }

    /// The image's display name: the assembly name, else the module name, else the file name.
    pub fn name(&self) -> &str {
        ""
    }

    /// The assembly identity, if this is a .NET image with an Assembly row.
    pub fn assembly_name(&self) -> Option<&AssemblyName> {
        None
    }

    /// The references to other assemblies, in AssemblyRef table order.
    pub fn assembly_refs(&self) -> Result<Vec<AssemblyName>, ImageError> {
        Ok(Vec::new())
    }
}
