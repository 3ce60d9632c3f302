//! An RV64GC frontend for tcg-core.
//!
//! Being written (issue 3): decoding of RV64IMAFDC with Zicsr and
//! Zifencei into pre-decoded operations, and their execution.
#![forbid(unsafe_code)]
