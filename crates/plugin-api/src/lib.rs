//! The QEMU TCG plugin model in safe Rust.
//!
//! Being written (issue 4): plugins as Rust types, translation-time and
//! execution-time callbacks, inline scoreboards, and `reset`/`uninstall`
//! that are safe from inside any callback.
#![forbid(unsafe_code)]
