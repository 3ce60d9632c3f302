//! Where an image's bytes live: a read-only file mapping or an owned buffer.

use crate::ImageError;
use memmap2::Mmap;
use std::fmt;
use std::fs::File;
use std::path::Path;

/// The bytes of one image, alive exactly as long as the `Image` that owns them.
pub(crate) enum Storage {
    /// A read-only shared mapping of the file.
    Mapped(Mmap),
    /// Bytes read into memory or handed over by the caller.
    Owned(Vec<u8>),
}

impl fmt::Debug for Storage {
    // Never dump the bytes: an image can be megabytes long.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Storage::Mapped(_) => "Mapped",
            Storage::Owned(_) => "Owned",
        };
        write!(f, "{kind}({} bytes)", self.bytes().len())
    }
}

impl Storage {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }

    /// Map `path` read-only.
    ///
    /// Mapping beats reading for large assemblies because opening one
    /// touches only a few pages (headers, tables, heaps); see the
    /// `image_storage` bench for the figures.
    #[allow(unsafe_code)]
    pub(crate) fn map(path: &Path) -> Result<Storage, ImageError> {
        let io = |source| ImageError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        if meta.len() == 0 {
            // Nothing to map (and some systems refuse empty mappings).
            return Ok(Storage::Owned(Vec::new()));
        }
        // SAFETY: `Mmap::map` is unsafe because the mapped memory can change
        // or vanish underneath us if another process writes or truncates the
        // file while it is mapped. What that means here:
        // * Writes by others: the mapping is shared, so our `&[u8]` could see
        //   new bytes. Every read in this crate is bounds-checked against the
        //   mapping's fixed length and re-validated where it is used, so
        //   changed bytes yield wrong values or a typed error, never an
        //   out-of-range access by us. (Strictly it breaks Rust's aliasing
        //   assumption for `&[u8]`; we accept that, as every loader does.)
        // * Truncation: touching a page past the new end of file raises
        //   SIGBUS and kills the process. A private (copy-on-write) mapping
        //   would not prevent this either. We accept it, like ld.so and Mono
        //   (which map images the same way): images are opened from install
        //   directories that are not rewritten in place, and callers that
        //   cannot promise that use `Image::from_bytes(std::fs::read(..))`.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(Storage::Mapped(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_regular_files_and_refuses_others() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/elf/tiny");
        let mapped = Storage::map(&path).unwrap();
        assert!(matches!(mapped, Storage::Mapped(_)));
        assert_eq!(mapped.bytes(), std::fs::read(&path).unwrap().as_slice());
        assert_eq!(
            format!("{mapped:?}"),
            format!("Mapped({} bytes)", mapped.bytes().len())
        );
        let dir = Storage::map(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap_err();
        assert!(matches!(dir, ImageError::Io { .. }));
        let empty = Storage::map(Path::new("/dev/null")).unwrap_err();
        assert!(matches!(empty, ImageError::Io { .. }), "not a regular file");
    }
}
