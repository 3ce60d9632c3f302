//! The Linux user-mode process model: run static RV64 Linux executables.
//!
//! Being written (issue 3): ELF loading through image-core, the initial
//! stack and auxv, brk/mmap, Linux syscalls and qemu-user compatible exit
//! status and signals.
#![forbid(unsafe_code)]
