//! Translation blocks, the block cache and the vCPU execution loop.
//!
//! Being written (issue 3): translation blocks in per-generation arenas,
//! an O(1) mass flush reclaimed at quiescent points, range invalidation,
//! sparse paged guest memory, and the `Frontend` and `Instrumentation`
//! traits through which guest architectures and plugins attach.
#![forbid(unsafe_code)]
