//! Bounds-checked little-endian reads that name file offsets in their errors.
//!
//! Every reader in this crate goes through [`Bytes`], so a hostile length or
//! offset becomes an [`ImageError`] instead of a panic or an out-of-range read.

use crate::ImageError;

/// A window onto the file's bytes that remembers where it starts in the file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
    /// File offset of `data[0]`, used only to make errors point at the file.
    base: u64,
}

impl<'a> Bytes<'a> {
    /// The whole file.
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Bytes { data, base: 0 }
    }

    /// The underlying bytes.
    pub(crate) fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Number of bytes in this window.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// File offset of position `off` of this window.
    pub(crate) fn file_offset(&self, off: usize) -> u64 {
        self.base.saturating_add(off as u64)
    }

    fn truncated(&self, what: &'static str, off: usize, needed: u64) -> ImageError {
        ImageError::Truncated {
            what,
            offset: self.file_offset(off),
            needed,
            available: (self.data.len() as u64).saturating_sub(off as u64),
        }
    }

    /// `len` bytes at `off`.
    pub(crate) fn slice(
        &self,
        off: usize,
        len: usize,
        what: &'static str,
    ) -> Result<&'a [u8], ImageError> {
        off.checked_add(len)
            .and_then(|end| self.data.get(off..end))
            .ok_or_else(|| self.truncated(what, off, len as u64))
    }

    /// A sub-window of `len` bytes at `off`.
    pub(crate) fn sub(
        &self,
        off: usize,
        len: usize,
        what: &'static str,
    ) -> Result<Bytes<'a>, ImageError> {
        let data = self.slice(off, len, what)?;
        Ok(Bytes {
            data,
            base: self.file_offset(off),
        })
    }

    /// Everything from `off` to the end.
    pub(crate) fn tail(&self, off: usize, what: &'static str) -> Result<Bytes<'a>, ImageError> {
        let len = self
            .data
            .len()
            .checked_sub(off)
            .ok_or_else(|| self.truncated(what, off, 0))?;
        self.sub(off, len, what)
    }

    /// A fixed-size array at `off`.
    pub(crate) fn array<const N: usize>(
        &self,
        off: usize,
        what: &'static str,
    ) -> Result<[u8; N], ImageError> {
        let s = self.slice(off, N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub(crate) fn u8(&self, off: usize, what: &'static str) -> Result<u8, ImageError> {
        self.data
            .get(off)
            .copied()
            .ok_or_else(|| self.truncated(what, off, 1))
    }

    pub(crate) fn u16(&self, off: usize, what: &'static str) -> Result<u16, ImageError> {
        self.array(off, what).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&self, off: usize, what: &'static str) -> Result<u32, ImageError> {
        self.array(off, what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&self, off: usize, what: &'static str) -> Result<u64, ImageError> {
        self.array(off, what).map(u64::from_le_bytes)
    }

    /// An unsigned little-endian index of `width` (2 or 4) bytes.
    pub(crate) fn index(
        &self,
        off: usize,
        width: u8,
        what: &'static str,
    ) -> Result<u32, ImageError> {
        if width == 2 {
            self.u16(off, what).map(u32::from)
        } else {
            self.u32(off, what)
        }
    }

    /// A NUL-terminated string starting at `off`, searched within at most
    /// `max` bytes, returned without its NUL and checked to be UTF-8.
    pub(crate) fn cstr(
        &self,
        off: usize,
        max: usize,
        what: &'static str,
    ) -> Result<&'a str, ImageError> {
        let rest = self
            .data
            .get(off..)
            .ok_or_else(|| self.truncated(what, off, 1))?;
        let window = rest.get(..max.min(rest.len())).unwrap_or(rest);
        let nul = window
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| ImageError::Malformed {
                offset: self.file_offset(off),
                what: format!("{what}: no NUL terminator within {} bytes", window.len()),
            })?;
        let raw = window.get(..nul).unwrap_or_default();
        std::str::from_utf8(raw).map_err(|e| ImageError::Malformed {
            offset: self.file_offset(off + e.valid_up_to()),
            what: format!("{what}: invalid UTF-8"),
        })
    }
}

/// The error for an offset/length pair read from the file that does not fit
/// in a `usize` (only possible on 32-bit hosts or with absurd values).
pub(crate) fn to_usize(v: u64, offset: u64, what: &'static str) -> Result<usize, ImageError> {
    usize::try_from(v).map_err(|_| ImageError::Malformed {
        offset,
        what: format!("{what}: value {v:#x} out of range"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounds_checked_and_name_file_offsets() {
        let data = [1u8, 2, 3, 4, 5, 6];
        let b = Bytes::new(&data).sub(2, 4, "w").unwrap();
        assert_eq!(b.u16(0, "x").unwrap(), 0x0403);
        match b.u32(2, "field").unwrap_err() {
            ImageError::Truncated {
                what,
                offset,
                needed,
                available,
            } => {
                assert_eq!((what, offset, needed, available), ("field", 4, 4, 2));
            }
            e => panic!("unexpected {e}"),
        }
        assert!(b.slice(usize::MAX, 2, "huge").is_err());
        assert!(b.tail(5, "past end").is_err());
    }

    #[test]
    fn cstr_needs_nul_and_utf8() {
        let b = Bytes::new(b"ab\0\xff\0cd");
        assert_eq!(b.cstr(0, 10, "s").unwrap(), "ab");
        assert!(matches!(
            b.cstr(3, 10, "s"),
            Err(ImageError::Malformed { offset: 3, .. })
        ));
        assert!(matches!(
            b.cstr(5, 10, "s"),
            Err(ImageError::Malformed { offset: 5, .. })
        ));
        assert!(matches!(
            b.cstr(0, 1, "s"),
            Err(ImageError::Malformed { .. })
        ));
    }
}
