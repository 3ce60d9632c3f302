//! `--trace FILE [--trace-format chrome|jsonl]`, shared by every command.

use anyhow::{Context, Result};
use std::path::PathBuf;
use tcgkit_profiler::{TraceFormat, TraceSession};

/// Trace options of a command.
#[derive(clap::Args, Debug, Default)]
pub struct TraceArgs {
    /// Write a trace of lifecycle events to FILE (Chrome trace JSON for
    /// `.json`, which Perfetto UI opens; JSON Lines for `.jsonl`).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Trace format, overriding the extension: `chrome` or `jsonl`.
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    trace_format: Option<TraceFormat>,
}

impl TraceArgs {
    /// Open the trace file, if one was asked for.
    pub fn open(&self) -> Result<Option<TraceSession>> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        let format = match self.trace_format {
            Some(f) => f,
            None => TraceFormat::from_extension(path)?,
        };
        let session = TraceSession::create(path, format)
            .with_context(|| format!("opening trace file {}", path.display()))?;
        Ok(Some(session))
    }
}
