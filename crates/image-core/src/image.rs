//! `Image`: one opened image file, its format detected and its headers parsed.

use crate::bytes::Bytes;
use crate::debug::{self, CodeView, DebugData, DebugEntry};
use crate::elf::{self, ElfInfo, Segment};
use crate::metadata::{self, CliHeader, Metadata, MetadataLayout};
use crate::pe::Pe;
use crate::storage::Storage;
use crate::{AssemblyName, Guid, ImageError};
use std::path::{Path, PathBuf};

/// What kind of image a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    /// An ECMA-335 image with an Assembly row (a manifest module).
    Assembly,
    /// An ECMA-335 module without an Assembly row (e.g. a `.netmodule`).
    Module,
    /// An ELF executable or shared object.
    Elf,
}

/// The parsed parts of a .NET image; offsets only, the bytes stay in `Storage`.
#[derive(Debug)]
struct Cli {
    pe: Pe,
    header: CliHeader,
    layout: MetadataLayout,
    module_name: String,
    mvid: Option<Guid>,
    assembly: Option<AssemblyName>,
}

/// Both boxed so an `Image`, which the registry moves by value, stays small.
#[derive(Debug)]
enum Kind {
    Cli(Box<Cli>),
    Elf(Box<ElfInfo>),
}

/// One opened image: a .NET assembly/module or an ELF executable.
///
/// Opening parses and validates the headers (PE, CLI header, metadata root,
/// streams, table layout, the Module and Assembly rows; or the ELF header,
/// program headers and the dynamic section's names). Everything else (references, debug directory,
/// other rows) is read lazily and borrows from the image's bytes.
///
/// `Image` is `Send + Sync` and immutable once opened.
#[derive(Debug)]
pub struct Image {
    storage: Storage,
    path: Option<PathBuf>,
    name: String,
    kind: Kind,
}

impl Image {
    /// Open and memory-map a file, detect its format and parse its headers.
    pub fn open(path: &Path) -> Result<Image, ImageError> {
        let storage = Storage::map(path)?;
        Self::parse(storage, Some(path.to_owned()))
    }

    /// Parse an image held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Image, ImageError> {
        Self::parse(Storage::Owned(bytes), None)
    }

    fn parse(storage: Storage, path: Option<PathBuf>) -> Result<Image, ImageError> {
        let data = storage.bytes();
        let file_name = path
            .as_deref()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (kind, name) = if data.starts_with(b"\x7fELF") {
            (Kind::Elf(Box::new(elf::parse(data)?)), file_name)
        } else if data.starts_with(b"MZ") {
            let cli = parse_cli(data)?;
            let name = match &cli.assembly {
                Some(a) => a.name.clone(),
                None if !cli.module_name.is_empty() => cli.module_name.clone(),
                None => file_name,
            };
            (Kind::Cli(Box::new(cli)), name)
        } else {
            let head: String = data.iter().take(4).map(|b| format!("{b:02x}")).collect();
            return Err(ImageError::UnknownFormat {
                offset: 0,
                what: format!("neither PE (MZ) nor ELF magic; file starts with [{head}]"),
            });
        };
        Ok(Image {
            storage,
            path,
            name,
            kind,
        })
    }

    /// The path the image was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The image's display name: the assembly name, else the module name,
    /// else the file name (empty for an ELF image made from bytes).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The detected format.
    pub fn format(&self) -> ImageFormat {
        match &self.kind {
            Kind::Cli(c) if c.assembly.is_some() => ImageFormat::Assembly,
            Kind::Cli(_) => ImageFormat::Module,
            Kind::Elf(_) => ImageFormat::Elf,
        }
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    fn cli(&self) -> Option<&Cli> {
        match &self.kind {
            Kind::Cli(c) => Some(c),
            Kind::Elf(_) => None,
        }
    }

    /// The assembly identity, if this is a .NET image with an Assembly row.
    pub fn assembly_name(&self) -> Option<&AssemblyName> {
        self.cli().and_then(|c| c.assembly.as_ref())
    }

    /// The references to other assemblies, in AssemblyRef table order
    /// (empty for ELF images).
    pub fn assembly_refs(&self) -> Result<Vec<AssemblyName>, ImageError> {
        match self.metadata() {
            Some(md) => md.assembly_refs().map(|r| r.map(|r| r.to_name())).collect(),
            None => Ok(Vec::new()),
        }
    }

    /// The module name from the Module row (e.g. `System.dll`), for .NET images.
    pub fn module_name(&self) -> Option<&str> {
        self.cli().map(|c| c.module_name.as_str())
    }

    /// The module version id (MVID) of a .NET image.
    pub fn mvid(&self) -> Option<Guid> {
        self.cli().and_then(|c| c.mvid)
    }

    /// The metadata version string of a .NET image, e.g. `v4.0.30319`.
    pub fn runtime_version(&self) -> Option<&str> {
        self.metadata().map(|m| m.version())
    }

    /// The CLI header of a .NET image.
    pub fn cli_header(&self) -> Option<&CliHeader> {
        self.cli().map(|c| &c.header)
    }

    /// A lazily read view of the ECMA-335 metadata of a .NET image.
    pub fn metadata(&self) -> Option<Metadata<'_>> {
        self.cli().map(|c| Metadata::new(self.bytes(), &c.layout))
    }

    /// Every entry of the PE debug directory, in directory order (empty for
    /// ELF images and for PE images without one).
    pub fn debug_entries(&self) -> Result<Vec<DebugEntry<'_>>, ImageError> {
        match self.cli() {
            Some(c) => debug::entries(&c.pe, Bytes::new(self.bytes())),
            None => Ok(Vec::new()),
        }
    }

    /// The first CodeView (RSDS) debug entry: the matching PDB's GUID, age and path.
    pub fn codeview(&self) -> Result<Option<CodeView<'_>>, ImageError> {
        Ok(self
            .debug_entries()?
            .into_iter()
            .find_map(|e| match e.data {
                DebugData::CodeView(cv) => Some(cv),
                _ => None,
            }))
    }

    /// What a loader needs from an ELF image.
    pub fn elf(&self) -> Option<&ElfInfo> {
        match &self.kind {
            Kind::Elf(e) => Some(e),
            Kind::Cli(_) => None,
        }
    }

    /// The GNU build-id of an ELF image (it plays the role of an MVID).
    pub fn build_id(&self) -> Option<&[u8]> {
        let range = self.elf()?.build_id.clone()?;
        self.bytes().get(range)
    }

    /// The file bytes of a segment (`filesz` bytes at `offset`); the loader
    /// zero-fills the rest up to `memsz`.
    pub fn segment_data(&self, segment: &Segment) -> Result<&[u8], ImageError> {
        let file = Bytes::new(self.bytes());
        let start = crate::bytes::to_usize(segment.offset, segment.offset, "segment offset")?;
        let len = crate::bytes::to_usize(segment.filesz, segment.offset, "segment size")?;
        if segment.filesz > segment.memsz {
            return Err(ImageError::Malformed {
                offset: segment.offset,
                what: format!(
                    "segment filesz {:#x} exceeds memsz {:#x}",
                    segment.filesz, segment.memsz
                ),
            });
        }
        file.slice(start, len, "segment data")
    }
}

fn parse_cli(data: &[u8]) -> Result<Cli, ImageError> {
    let file = Bytes::new(data);
    let pe = Pe::parse(file)?;
    if !pe.cli.is_present() {
        return Err(ImageError::NotDotNet);
    }
    let (header, metadata_dir) = metadata::parse_cli_header(&pe, file)?;
    let layout = metadata::parse_metadata(&pe, file, metadata_dir)?;
    let md = Metadata::new(data, &layout);
    if md.row_count(crate::Table::Module) == 0 {
        return Err(ImageError::Malformed {
            offset: 0,
            what: "metadata has no Module row".into(),
        });
    }
    let module = md.module()?;
    let module_name = module.name.to_owned();
    let mvid = module.mvid;
    let assembly = md.assembly()?.map(|a| a.to_name());
    Ok(Cli {
        pe,
        header,
        layout,
        module_name,
        mvid,
        assembly,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Image>();
    }

    #[test]
    fn unknown_magic_is_a_typed_error() {
        let e = Image::from_bytes(vec![1, 2, 3]).unwrap_err();
        assert!(
            matches!(e, ImageError::UnknownFormat { offset: 0, .. }),
            "{e}"
        );
        let e = Image::from_bytes(Vec::new()).unwrap_err();
        assert!(matches!(e, ImageError::UnknownFormat { .. }), "{e}");
    }
}
