//! Plain owned identity types shared by readers, the registry and observers.

use std::fmt;

/// A four-part assembly version (`major.minor.build.revision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Build number.
    pub build: u16,
    /// Revision number.
    pub revision: u16,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.major, self.minor, self.build, self.revision
        )
    }
}

/// A 16-byte GUID as stored on disk (Microsoft mixed-endian layout).
///
/// `Display` gives the standard lowercase `8-4-4-4-12` form, in which the
/// first three fields are read little-endian, as .NET and monodis print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub [u8; 16]);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u16::from_le_bytes([b[4], b[5]]),
            u16::from_le_bytes([b[6], b[7]]),
            b[8],
            b[9],
            b[10],
            b[11],
            b[12],
            b[13],
            b[14],
            b[15]
        )
    }
}

/// The identity of an assembly or of a reference to one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AssemblyName {
    /// Simple name, e.g. `System.Xml`.
    pub name: String,
    /// Four-part version.
    pub version: Version,
    /// Culture, `None` for the neutral culture.
    pub culture: Option<String>,
    /// The 8-byte public key token, if the assembly is strong-named.
    pub public_key_token: Option<[u8; 8]>,
}

impl fmt::Display for AssemblyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, Version={}, Culture={}, PublicKeyToken=",
            self.name,
            self.version,
            self.culture.as_deref().unwrap_or("neutral")
        )?;
        match self.public_key_token {
            Some(t) => t.iter().try_for_each(|b| write!(f, "{b:02x}")),
            None => f.write_str("null"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_uses_mixed_endian_text_form() {
        let g = Guid([
            0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ]);
        assert_eq!(g.to_string(), "00112233-4455-6677-8899-aabbccddeeff");
    }

    #[test]
    fn assembly_name_displays_like_dotnet() {
        let n = AssemblyName {
            name: "mscorlib".into(),
            version: Version {
                major: 4,
                minor: 0,
                build: 0,
                revision: 0,
            },
            culture: None,
            public_key_token: Some([0xb7, 0x7a, 0x5c, 0x56, 0x19, 0x34, 0xe0, 0x89]),
        };
        assert_eq!(
            n.to_string(),
            "mscorlib, Version=4.0.0.0, Culture=neutral, PublicKeyToken=b77a5c561934e089"
        );
    }
}
