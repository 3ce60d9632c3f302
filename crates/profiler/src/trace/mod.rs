//! Trace sinks: Chrome Trace Event JSON (Perfetto UI, chrome://tracing) and
//! JSON Lines, written by a listener that a [`TraceSession`] registers.
//!
//! # Chrome trace layout
//!
//! * `"M"` records name the process (`tcgkit`) and each thread (its OS
//!   name, or `vCPU n` once it raises `vcpu_started`).
//! * `"X"` spans: `load NAME` from `image_loading` to `image_loaded` (or
//!   `image_failed`), with the `ModuleLoad` record in `args`; `unload NAME`
//!   from `image_unloading` to `image_unloaded`, with the `ModuleUnload`
//!   record and `unload_ns`; `vCPU n` from start to stop. Spans are written
//!   when they end, so a nested unload's record precedes its parent's;
//!   timestamps are strictly increasing, so nested spans are strictly inside
//!   their parents.
//! * `"i"` instants: TB flushes and range invalidations, plugin
//!   install/reset/uninstall, syscalls (thread scope), process exit (global).
//! * `"C"` counters: `images` (loaded images) and `translation blocks`
//!   (translated so far, every 1024 and at each flush).
//!
//! # Completeness on every exit path
//!
//! [`TraceSession::finish`] closes spans still open (marked
//! `"incomplete": true`), writes the closing `]}` (or the JSON Lines
//! `trace_end` line) and flushes. `Drop` calls it too. What a caller must do:
//!
//! * normal exit and guest fault (the guest dies by a signal, the host does
//!   not): call `finish()` before `std::process::exit`, which skips `Drop`;
//! * Ctrl-C: the default SIGINT action kills the process without unwinding,
//!   so install a handler (e.g. the `ctrlc` crate) that calls `finish()` on a
//!   shared session (`TraceSession` is `Send + Sync`, wrap it in an `Arc`)
//!   and then exits with status 130;
//! * a panicking plugin or profiler is caught by the [`Profiler`]; the trace
//!   goes on, and a panic unwinding through `main` still runs `Drop`.

mod sink;

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crate::bridge::ImageEventBridge;
use crate::dispatch::{Profiler, ProfilerHandle};
use crate::event::EventKind;
use sink::Sink;

/// How a trace is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Chrome Trace Event JSON (`{"traceEvents":[...]}`), for Perfetto UI
    /// and chrome://tracing. Extension `.json`; names `chrome`, `json`,
    /// `perfetto`.
    Chrome,
    /// One JSON object per line, for scripts. Extensions `.jsonl`,
    /// `.ndjson`; names `jsonl`, `json-lines`, `ndjson`.
    JsonLines,
}

impl TraceFormat {
    /// The format a file name asks for, by its extension.
    pub fn from_extension(path: &Path) -> Result<TraceFormat, TraceError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("json") => Ok(TraceFormat::Chrome),
            Some("jsonl" | "ndjson") => Ok(TraceFormat::JsonLines),
            _ => Err(TraceError::UnknownExtension {
                path: path.to_owned(),
            }),
        }
    }
}

impl FromStr for TraceFormat {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<TraceFormat, TraceError> {
        match s.to_ascii_lowercase().as_str() {
            "chrome" | "json" | "perfetto" => Ok(TraceFormat::Chrome),
            "jsonl" | "json-lines" | "ndjson" => Ok(TraceFormat::JsonLines),
            _ => Err(TraceError::UnknownFormat { name: s.to_owned() }),
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceFormat::Chrome => "chrome",
            TraceFormat::JsonLines => "jsonl",
        })
    }
}

/// When records reach the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TraceMode {
    /// Write as events arrive through a 64 KiB buffer: constant memory,
    /// and everything up to the last flush survives a hard kill.
    #[default]
    Streaming,
    /// Keep the newest `max_events` records in memory (a flight recorder)
    /// and write them at `finish`; older ones are dropped and counted in
    /// [`TraceSummary::dropped_records`] and in the trace itself.
    Buffered {
        /// How many records to keep (at least 1).
        max_events: usize,
    },
}

/// What went wrong with a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The trace file could not be created.
    #[error("cannot create trace file {path}: {source}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing the trace failed (the first error is kept; later records
    /// were discarded).
    #[error("writing the trace failed: {source}")]
    Write {
        /// The first write error.
        #[source]
        source: std::io::Error,
    },
    /// The file name's extension names no trace format.
    #[error(
        "cannot tell the trace format of {path}: use a .json (Chrome trace) or .jsonl (JSON Lines) file name, or give the format explicitly"
    )]
    UnknownExtension {
        /// The file name.
        path: PathBuf,
    },
    /// A format name that is not one of ours.
    #[error("unknown trace format {name:?}: expected chrome or jsonl")]
    UnknownFormat {
        /// The name given.
        name: String,
    },
}

/// Counts reported by [`TraceSession::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceSummary {
    /// Events received.
    pub events: u64,
    /// Records produced (before any were dropped).
    pub records: u64,
    /// Records dropped by [`TraceMode::Buffered`] to bound memory.
    pub dropped_records: u64,
    /// Spans still open at `finish` (closed and marked incomplete).
    pub incomplete_spans: u64,
}

/// A trace being recorded: a sink listening to a [`Profiler`] for every
/// event kind.
///
/// ```
/// use tcgkit_profiler::{Event, Profiler, TbFlushed, TraceFormat, TraceMode, TraceSession};
///
/// let dir = std::env::temp_dir().join(format!("tcgkit-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("run.json");
/// let session = TraceSession::create(&path, TraceFormat::from_extension(&path)?)?;
/// // Producers raise into the session's profiler; an image registry gets
/// // `session.image_observer()` through `add_observer`.
/// session.profiler().raise(Event::TbFlushed(TbFlushed { generation: 0, count: 12 }));
/// let summary = session.finish()?;
/// assert_eq!(summary.events, 1);
/// let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
/// assert!(trace["traceEvents"].as_array().is_some_and(|a| a.iter().any(|r| r["name"] == "tb flush")));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TraceSession {
    profiler: Profiler,
    handle: ProfilerHandle,
    sink: Arc<Sink>,
}

impl fmt::Debug for TraceSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceSession")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl TraceSession {
    /// Stream a trace to a new file at `path` from a new [`Profiler`]
    /// (reach it with [`profiler`](TraceSession::profiler)).
    pub fn create(path: &Path, format: TraceFormat) -> Result<TraceSession, TraceError> {
        let file = File::create(path).map_err(|source| TraceError::Create {
            path: path.to_owned(),
            source,
        })?;
        TraceSession::with_writer(
            &Profiler::new(),
            Box::new(file),
            format,
            TraceMode::Streaming,
        )
    }

    /// Record a trace of `profiler`'s events into any writer.
    pub fn with_writer(
        profiler: &Profiler,
        writer: Box<dyn Write + Send>,
        format: TraceFormat,
        mode: TraceMode,
    ) -> Result<TraceSession, TraceError> {
        let sink = Arc::new(
            Sink::new(writer, format, mode).map_err(|source| TraceError::Write { source })?,
        );
        let handle = profiler.register(format!("trace ({format})"), sink.clone());
        for kind in EventKind::ALL {
            if kind != EventKind::ImageUnloadV2 {
                handle.subscribe(kind);
            }
        }
        Ok(TraceSession {
            profiler: profiler.clone(),
            handle,
            sink,
        })
    }

    /// The profiler this session listens to: raise events into it.
    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// The session's registration with the profiler: it starts subscribed
    /// to every kind; unsubscribe what a trace should leave out (e.g.
    /// [`EventKind::TbTranslated`] in JSON Lines, one line per block).
    pub fn handle(&self) -> &ProfilerHandle {
        &self.handle
    }

    /// A lifecycle observer that raises this session's profiler's image
    /// events; give it to `ImageRegistry::add_observer`.
    pub fn image_observer(&self) -> ImageEventBridge {
        ImageEventBridge::new(self.profiler.clone())
    }

    /// Writes out what the streaming trace has buffered, e.g. before the
    /// process forks, so that the child does not write it a second time.
    pub fn flush(&self) -> Result<(), TraceError> {
        self.sink
            .flush()
            .map_err(|source| TraceError::Write { source })
    }

    /// Goes on in a new file at `path`, as an empty trace of the same
    /// format: what a forked child does with the session it inherited (the
    /// records so far are the parent's, in the parent's file). Flush
    /// before the fork: bytes still buffered are dropped here.
    pub fn continue_in(&self, path: &Path) -> Result<(), TraceError> {
        let file = File::create(path).map_err(|source| TraceError::Create {
            path: path.to_owned(),
            source,
        })?;
        self.sink
            .restart(Box::new(file))
            .map_err(|source| TraceError::Write { source })
    }

    /// Stop listening, close open spans, write the end of the trace and
    /// flush. Idempotent: later calls (and `Drop`) return the same summary
    /// or error without writing anything.
    pub fn finish(&self) -> Result<TraceSummary, TraceError> {
        self.handle.remove();
        self.sink
            .finish()
            .map_err(|source| TraceError::Write { source })
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        // Errors cannot be reported from Drop; callers who care call finish().
        let _ = self.finish();
    }
}
