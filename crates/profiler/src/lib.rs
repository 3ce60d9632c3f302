//! Mono-style profiler events for tcgkit.
//!
//! Being written (issue 5): event slots that cost a relaxed load when
//! nobody listens, EventPipe-style module events, and trace sinks.
#![forbid(unsafe_code)]
