//! EventPipe-style module records (the fields of .NET's `ModuleLoad_V2` and
//! `ModuleUnload_V2` events), built from a live [`Image`].
//!
//! # Field mapping
//!
//! | field | .NET assembly or module | ELF executable |
//! |---|---|---|
//! | `ModuleID` | the registry's [`ImageId`] of this load | same |
//! | `AssemblyID` | the same id when the image has an Assembly row, else 0 | 0 |
//! | `ModuleFlags` | `MANIFEST` (0x8) when it has an Assembly row | `NATIVE` (0x2) |
//! | `ModuleILPath` | the file path | empty |
//! | `ModuleNativePath` | empty (no precompiled native image) | the file path |
//! | `ClrInstanceID` | 9, the id Mono's EventPipe provider reports | 9 |
//! | `ManagedPdb*` | the first CodeView RSDS entry of the debug directory: GUID, age, build path | zero GUID, 0, empty |
//! | `NativePdbSignature` | zero GUID | the first 16 bytes of the GNU build-id (zero-padded when shorter; a 20-byte SHA-1 build-id loses its last 4 bytes) |
//! | `NativePdbAge` | 0 | 0 (ELF has no age) |
//! | `NativePdbBuildPath` | empty | the file path (an ELF carries its own debug info) |
//!
//! Paths that are not valid UTF-8 are converted lossily. An image without a
//! path (opened from bytes) has empty path fields.

use std::fmt;

use serde::{Serialize, Serializer};
use tcgkit_image_core::{Guid, Image};

use crate::event::ImageId;

/// The `ClrInstanceID` Mono's EventPipe provider reports for the Mono runtime.
pub const MONO_CLR_INSTANCE_ID: u16 = 9;

/// `ModuleFlags` bits of the EventPipe module events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(transparent)]
pub struct ModuleFlags(pub u32);

impl ModuleFlags {
    /// 0x1: a domain-neutral module.
    pub const DOMAIN_NEUTRAL: ModuleFlags = ModuleFlags(0x1);
    /// 0x2: the module has a native image.
    pub const NATIVE: ModuleFlags = ModuleFlags(0x2);
    /// 0x4: a dynamic (emitted at run time) module.
    pub const DYNAMIC: ModuleFlags = ModuleFlags(0x4);
    /// 0x8: the manifest module of its assembly.
    pub const MANIFEST: ModuleFlags = ModuleFlags(0x8);

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: ModuleFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One `ModuleLoad_V2` or `ModuleUnload_V2` record (both have these fields).
///
/// Serializes with the EventPipe field names (`ModuleID`, `ManagedPdbAge`,
/// ...); GUIDs in the lowercase 8-4-4-4-12 form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleRecord {
    /// `ModuleID`.
    #[serde(rename = "ModuleID")]
    pub module_id: u64,
    /// `AssemblyID`.
    #[serde(rename = "AssemblyID")]
    pub assembly_id: u64,
    /// `ModuleFlags`.
    #[serde(rename = "ModuleFlags")]
    pub module_flags: ModuleFlags,
    /// `ModuleILPath`.
    #[serde(rename = "ModuleILPath")]
    pub module_il_path: String,
    /// `ModuleNativePath`.
    #[serde(rename = "ModuleNativePath")]
    pub module_native_path: String,
    /// `ClrInstanceID`.
    #[serde(rename = "ClrInstanceID")]
    pub clr_instance_id: u16,
    /// `ManagedPdbSignature`.
    #[serde(rename = "ManagedPdbSignature", serialize_with = "guid_text")]
    pub managed_pdb_signature: Guid,
    /// `ManagedPdbAge`.
    #[serde(rename = "ManagedPdbAge")]
    pub managed_pdb_age: u32,
    /// `ManagedPdbBuildPath`.
    #[serde(rename = "ManagedPdbBuildPath")]
    pub managed_pdb_build_path: String,
    /// `NativePdbSignature`.
    #[serde(rename = "NativePdbSignature", serialize_with = "guid_text")]
    pub native_pdb_signature: Guid,
    /// `NativePdbAge`.
    #[serde(rename = "NativePdbAge")]
    pub native_pdb_age: u32,
    /// `NativePdbBuildPath`.
    #[serde(rename = "NativePdbBuildPath")]
    pub native_pdb_build_path: String,
}

fn guid_text<S: Serializer>(guid: &Guid, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(guid)
}

impl ModuleRecord {
    /// Build the record for one load of `image` (see the module docs for
    /// the mapping).
    pub fn from_image(id: ImageId, image: &Image) -> ModuleRecord {
        let path = image
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut record = ModuleRecord {
            module_id: id.0,
            assembly_id: 0,
            module_flags: ModuleFlags::default(),
            module_il_path: String::new(),
            module_native_path: String::new(),
            clr_instance_id: MONO_CLR_INSTANCE_ID,
            managed_pdb_signature: Guid::default(),
            managed_pdb_age: 0,
            managed_pdb_build_path: String::new(),
            native_pdb_signature: Guid::default(),
            native_pdb_age: 0,
            native_pdb_build_path: String::new(),
        };
        if image.elf().is_some() {
            record.module_flags = ModuleFlags::NATIVE;
            record.native_pdb_signature = build_id_signature(image.build_id().unwrap_or_default());
            record.module_native_path = path.clone();
            record.native_pdb_build_path = path;
            return record;
        }
        if image.assembly_name().is_some() {
            record.assembly_id = id.0;
            record.module_flags = ModuleFlags::MANIFEST;
        }
        record.module_il_path = path;
        // A corrupt debug directory leaves the PDB fields empty, as an image
        // without one would; the image itself loaded fine.
        if let Ok(Some(cv)) = image.codeview() {
            record.managed_pdb_signature = cv.guid;
            record.managed_pdb_age = cv.age;
            record.managed_pdb_build_path = cv.path.to_owned();
        }
        record
    }
}

/// The first 16 bytes of a build-id, zero-padded.
fn build_id_signature(build_id: &[u8]) -> Guid {
    let mut bytes = [0u8; 16];
    for (dst, src) in bytes.iter_mut().zip(build_id) {
        *dst = *src;
    }
    Guid(bytes)
}

impl fmt::Display for ModuleRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module {} (assembly {}, flags {:#x}) {}{} pdb {} age {} {}",
            self.module_id,
            self.assembly_id,
            self.module_flags.0,
            self.module_il_path,
            self.module_native_path,
            self.managed_pdb_signature,
            self.managed_pdb_age,
            self.managed_pdb_build_path
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_signature_truncates_and_pads() {
        let sha1: Vec<u8> = (1..=20).collect();
        assert_eq!(
            build_id_signature(&sha1).0,
            <[u8; 16]>::try_from(&sha1[..16]).unwrap_or_default()
        );
        let short = [0xaa, 0xbb];
        let mut expected = [0u8; 16];
        expected[0] = 0xaa;
        expected[1] = 0xbb;
        assert_eq!(build_id_signature(&short).0, expected);
        assert_eq!(build_id_signature(&[]), Guid::default());
    }

    #[test]
    fn flags_and_guids_serialize_as_eventpipe_names() {
        let record = ModuleRecord {
            module_id: 4,
            assembly_id: 4,
            module_flags: ModuleFlags::MANIFEST,
            module_il_path: "/x/a.dll".into(),
            module_native_path: String::new(),
            clr_instance_id: MONO_CLR_INSTANCE_ID,
            managed_pdb_signature: Guid([
                0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
                0xee, 0xff,
            ]),
            managed_pdb_age: 1,
            managed_pdb_build_path: "a.pdb".into(),
            native_pdb_signature: Guid::default(),
            native_pdb_age: 0,
            native_pdb_build_path: String::new(),
        };
        let v = serde_json::to_value(&record).unwrap_or_default();
        assert_eq!(v["ModuleID"], 4);
        assert_eq!(v["ModuleFlags"], 8);
        assert_eq!(v["ClrInstanceID"], 9);
        assert_eq!(v["ModuleILPath"], "/x/a.dll");
        assert_eq!(
            v["ManagedPdbSignature"],
            "00112233-4455-6677-8899-aabbccddeeff"
        );
        assert_eq!(
            v["NativePdbSignature"],
            "00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(v["ManagedPdbBuildPath"], "a.pdb");
        assert!(ModuleFlags(0xa).contains(ModuleFlags::MANIFEST));
        assert!(!ModuleFlags(0xa).contains(ModuleFlags::DYNAMIC));
    }
}
