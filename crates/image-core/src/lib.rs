//! Load code and metadata images the way runtimes and emulators do.
//!
//! `tcgkit-image-core` opens two kinds of real images:
//!
//! * **.NET assemblies and modules** (PE/COFF files with an ECMA-335 CLI
//!   header), read as Mono reads them: metadata root, streams, tables,
//!   the Module / Assembly / AssemblyRef rows, and the PE debug directory
//!   (CodeView PDB signature, age and path).
//! * **ELF executables**, read as qemu-user reads them: class, machine,
//!   entry point, `PT_LOAD` segments and the GNU build-id.
//!
//! On top of images sits an [`ImageRegistry`]: refcounted handles,
//! reference resolution through search paths, cascading unload, and
//! [`LifecycleObserver`]s that are handed data that is alive for the whole
//! callback, by construction.
//!
//! Every read is bounds-checked and returns a typed [`ImageError`] naming
//! the offset and what was wrong; hostile input never panics.
//!
//! ```
//! use tcgkit_image_core::{Image, ImageError};
//!
//! // Anything that is neither PE/CLI nor ELF is a typed error, not a panic.
//! let err = Image::from_bytes(b"not an image".to_vec()).unwrap_err();
//! assert!(matches!(err, ImageError::UnknownFormat { .. }));
//! ```
#![forbid(unsafe_code)]

mod error;
mod identity;
mod image;

pub use error::ImageError;
pub use identity::{AssemblyName, Guid, Version};
pub use image::Image;
