//! Load code and metadata images the way runtimes and emulators do.
//!
//! `tcgkit-image-core` opens two kinds of real images:
//!
//! * **.NET assemblies and modules** (PE/COFF files with an ECMA-335 CLI
//!   header), read as Mono reads them: metadata root, streams, tables,
//!   the Module / Assembly / AssemblyRef rows, and the PE debug directory
//!   (CodeView PDB signature, age and path).
//! * **ELF executables and shared objects**, read as qemu-user and the
//!   dynamic loader read them: class, machine, entry point, `PT_LOAD`
//!   segments, the GNU build-id ([`Image::build_id`]) and, from
//!   `PT_DYNAMIC`, the `DT_SONAME` and `DT_NEEDED` names
//!   ([`ElfInfo::soname`], [`ElfInfo::needed`]). A header field no loader
//!   accepts (class, byte order, versions, type, machine, header and
//!   program header sizes, a program header table outside the file) is
//!   refused as [`ImageError::InvalidField`], naming the field and its offset.
//!
//! On top of images sits an [`ImageRegistry`]: refcounted handles,
//! reference resolution through search paths, cascading unload, and
//! [`LifecycleObserver`]s that are handed data that is alive for the whole
//! callback, by construction.
//!
//! Every read is bounds-checked and returns a typed [`ImageError`] naming
//! the offset and what was wrong; hostile input never panics.
//!
//! # Reading images
//!
//! [`Image::open`] maps a file (or [`Image::from_bytes`] takes a buffer),
//! detects the format and validates the headers; the accessors then read
//! lazily, borrowing from the image's bytes. [`Image::metadata`] is the
//! zero-copy view of the ECMA-335 tables and heaps, [`Image::debug_entries`]
//! walks the PE debug directory, [`Image::elf`] describes an executable for a
//! loader and [`Image::segment_data`] borrows a segment's bytes.
//!
//! ```
//! use std::path::Path;
//! use tcgkit_image_core::{Image, ImageError, ImageFormat, Table};
//!
//! let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
//!
//! let west = Image::open(&fixtures.join("assemblies/I18N.West.dll"))?;
//! assert_eq!(west.format(), ImageFormat::Assembly);
//! assert_eq!(
//!     west.assembly_name().unwrap().to_string(),
//!     "I18N.West, Version=4.0.0.0, Culture=neutral, PublicKeyToken=0738eb9f132ed756"
//! );
//! assert_eq!(west.mvid().unwrap().to_string(), "5a90ada0-7b4e-4d00-bc9e-b24d915758b6");
//! let refs: Vec<String> = west.assembly_refs()?.iter().map(|r| r.name.clone()).collect();
//! assert_eq!(refs, ["mscorlib", "I18N"]);
//! assert_eq!(west.metadata().unwrap().row_count(Table::TypeDef), 34);
//!
//! // The PDB a Roslyn build points at (EventPipe's ManagedPdb* fields).
//! let loader = Image::open(&fixtures.join("assemblies/ClrLoader.dll"))?;
//! let pdb = loader.codeview()?.unwrap();
//! assert_eq!((pdb.age, pdb.guid.to_string().as_str()), (1, "95f8f6b2-afbc-45e4-884c-b4a5bf5addd2"));
//!
//! // A static RV64 executable, as a loader needs it.
//! let tiny = Image::open(&fixtures.join("elf/tiny"))?;
//! let elf = tiny.elf().unwrap();
//! assert_eq!((elf.machine, elf.entry), (243, 0x1017c));
//! let text = tiny.segment_data(&elf.segments[0])?;
//! assert_eq!(&text[..4], b"\x7fELF");
//! assert!(elf.soname.is_none() && elf.needed.is_empty());
//!
//! // A header field no loader accepts is refused by name and offset.
//! let mut bytes = tiny.bytes().to_vec();
//! bytes[20] = 0; // e_version
//! let err = Image::from_bytes(bytes).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "invalid ELF header field e_version at offset 0x14: 0 (expected 1)"
//! );
//!
//! // Anything that is neither PE/CLI nor ELF is a typed error, not a panic.
//! let err = Image::from_bytes(b"not an image".to_vec()).unwrap_err();
//! assert!(matches!(err, ImageError::UnknownFormat { .. }));
//! # Ok::<(), ImageError>(())
//! ```
//!
//! # The registry and its lifecycle
//!
//! [`ImageRegistry::load`] loads an image and, depth-first, the assemblies
//! its AssemblyRefs name, found among loaded images or as `<name>.dll` /
//! `<name>.exe` on the search paths (a version at least the requested one
//! is accepted). Each reference records how it resolved
//! ([`ResolvedReference`]); a missing one is reported, not fatal. A
//! reference cycle resolves to the image already being loaded without a
//! counted reference, so it never keeps itself alive.
//!
//! [`ImageHandle`]s are counted references: clone for another, drop or
//! [`ImageRegistry::close`] to release. The last release unloads the image
//! and cascades to the images only it held. Observers see
//! `unloading(A)`, the complete unload of each image A released (last
//! reference first), then `unloaded(A)`; in every callback the image is
//! borrowed from the unload routine that owns it and is freed only after
//! the last observer returned. [`UnloadStateProvider`] is the "v2" form:
//! state returned from `unloading` comes back in `unloaded`.
//!
//! ```
//! use std::path::Path;
//! use std::sync::{Arc, Mutex};
//! use tcgkit_image_core::{ImageRegistry, LifecycleObserver, LoadedImage};
//!
//! /// Copies out what an EventPipe ModuleUnload event needs.
//! struct UnloadLog(Arc<Mutex<Vec<String>>>);
//!
//! impl LifecycleObserver for UnloadLog {
//!     fn unloaded(&mut self, image: &LoadedImage<'_>) {
//!         // Name, MVID and path are alive here, by construction.
//!         let mvid = image.image().mvid().map(|g| g.to_string()).unwrap_or_default();
//!         self.0.lock().unwrap().push(format!("{} {mvid}", image.image().name()));
//!     }
//! }
//!
//! let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies/lifecycle");
//! let log = Arc::new(Mutex::new(Vec::new()));
//! let mut registry = ImageRegistry::new();
//! registry.add_search_path(&fixtures);
//! registry.add_observer(UnloadLog(log.clone()));
//!
//! // Left references Shared: loading one loads both.
//! let left = registry.load(&fixtures.join("Left.dll"))?;
//! assert_eq!(registry.len(), 2);
//! registry.close(left)?;
//!
//! // Nested order: Shared's unload completes inside Left's.
//! let log = log.lock().unwrap();
//! assert!(log[0].starts_with("Shared ") && log[1].starts_with("Left "));
//! assert!(registry.is_empty());
//! # Ok::<(), tcgkit_image_core::RegistryError>(())
//! ```
// `unsafe` is denied everywhere except the one file-mapping call in
// storage.rs, which carries its own SAFETY argument.
#![deny(unsafe_code)]

mod bytes;
mod debug;
mod elf;
mod error;
mod identity;
mod image;
mod metadata;
mod observer;
mod pe;
mod registry;
mod sha1;
mod storage;
mod tables;

pub use debug::{CodeView, DebugData, DebugEntry};
pub use elf::{ElfClass, ElfInfo, Linkage, Segment, SegmentFlags};
pub use error::ImageError;
pub use identity::{AssemblyName, Guid, Version};
pub use image::{Image, ImageFormat};
pub use metadata::{AssemblyRefRow, AssemblyRow, CliHeader, Metadata, ModuleRow};
pub use observer::{FailedEvent, LifecycleObserver, LoadingEvent, UnloadStateProvider};
pub use registry::{
    ImageHandle, ImageId, ImageRegistry, LoadedImage, RegistryError, RejectedCandidate, Rejection,
    Resolution, ResolvedReference, ResolvedVia,
};
pub use tables::Table;
