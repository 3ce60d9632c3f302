//! Errors of loading a guest program.

use tcgkit_image_core::ImageError;

/// Why a guest executable could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read or is not a well-formed image.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The file is an image but not an ELF executable.
    #[error("not an ELF executable")]
    NotElf,
    /// Not a 64-bit little-endian RISC-V ELF file.
    #[error("not a 64-bit little-endian RISC-V executable (e_machine {machine})")]
    WrongArchitecture {
        /// The file's `e_machine`.
        machine: u16,
    },
    /// Neither `ET_EXEC` nor a static-pie `ET_DYN`.
    #[error("ELF type {elf_type} is not an executable")]
    NotExecutable {
        /// The file's `e_type`.
        elf_type: u16,
    },
    /// The program interpreter (`PT_INTERP`) could not be loaded.
    #[error("cannot load the program interpreter {path}: {source}")]
    Interpreter {
        /// The interpreter as the executable names it.
        path: String,
        /// Why it could not be loaded.
        source: Box<LoadError>,
    },
    /// The program interpreter itself asks for an interpreter.
    #[error("the program interpreter is itself dynamically linked")]
    InterpreterIsDynamic,
    /// A `PT_LOAD` segment that cannot be mapped.
    #[error("bad segment at {vaddr:#x}: {what}")]
    BadSegment {
        /// The segment's virtual address.
        vaddr: u64,
        /// What is wrong with it.
        what: String,
    },
    /// No loadable segment at all.
    #[error("the executable has no loadable segments")]
    NoSegments,
    /// The entry point is not in an executable segment.
    #[error("entry point {entry:#x} is not in an executable segment")]
    BadEntry {
        /// The entry point address.
        entry: u64,
    },
    /// Arguments and environment do not fit the stack (Linux: E2BIG).
    #[error("argument list too long ({bytes} bytes)")]
    ArgumentsTooLarge {
        /// Bytes the strings and pointer tables need.
        bytes: u64,
    },
    /// The stack could not be set up.
    #[error("cannot set up the stack: {0}")]
    Stack(String),
}
