//! Criterion benchmarks for tcgkit live in `benches/`; this library is empty.
#![forbid(unsafe_code)]
