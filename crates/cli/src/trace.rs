//! `--trace FILE [--trace-format chrome|jsonl]`, shared by every command.

use anyhow::{Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use tcgkit_profiler::{TraceFormat, TraceSession};

/// Trace options of a command.
#[derive(clap::Args, Clone, Debug, Default)]
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
    /// The trace file asked for.
    pub fn path(&self) -> Option<&Path> {
        self.trace.as_deref()
    }

    /// The options that give process `pid` (a guest's exec'd program) the
    /// same trace, in a file of its own ([`per_process_path`]).
    pub fn child_args(&self, pid: u32) -> Vec<OsString> {
        let mut args = Vec::new();
        if let Some(path) = &self.trace {
            args.push("--trace".into());
            args.push(per_process_path(path, pid).into());
            // The name changed; the format must not.
            let format = match self.trace_format {
                Some(f) => f,
                None => TraceFormat::from_extension(path).unwrap_or(TraceFormat::Chrome),
            };
            args.push("--trace-format".into());
            args.push(format.to_string().into());
        }
        args
    }

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

/// Where process `pid`, a child of the traced process (forked, or an
/// exec'd program), writes its trace: `run.json` becomes `run.PID.json`
/// beside it, so that every process's trace is complete on its own.
pub fn per_process_path(path: &Path, pid: u32) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default();
    let mut name = stem.to_os_string();
    name.push(format!(".{pid}"));
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_traces_sit_beside_the_parents() {
        assert_eq!(
            per_process_path(Path::new("out/run.json"), 42),
            Path::new("out/run.42.json")
        );
        assert_eq!(
            per_process_path(Path::new("trace"), 7),
            Path::new("trace.7")
        );
        let args = TraceArgs {
            trace: Some("t.jsonl".into()),
            trace_format: None,
        };
        assert_eq!(
            args.child_args(9),
            ["--trace", "t.9.jsonl", "--trace-format", "jsonl"]
        );
        assert!(TraceArgs::default().child_args(9).is_empty());
    }
}
