//! Load images and their reference closure, unload them, and write a trace.
//!
//! `cargo run -p tcgkit-profiler --example trace_images -- OUT.json IMAGE...`
//! (`.json` gives a Chrome trace for Perfetto UI, `.jsonl` JSON Lines.) The
//! images' directories are the search paths.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tcgkit_image_core::ImageRegistry;
use tcgkit_profiler::{TraceFormat, TraceSession};

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let Some((out, images)) = args.split_first().filter(|(_, images)| !images.is_empty()) else {
        eprintln!("usage: trace_images OUT.json|OUT.jsonl IMAGE...");
        return ExitCode::from(2);
    };
    match run(out, images) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trace_images: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(out: &Path, images: &[PathBuf]) -> Result<(), Box<dyn std::error::Error>> {
    let session = TraceSession::create(out, TraceFormat::from_extension(out)?)?;
    let mut registry = ImageRegistry::new();
    registry.add_observer(session.image_observer());
    let mut handles = Vec::new();
    for image in images {
        if let Some(dir) = image.parent() {
            registry.add_search_path(dir);
        }
        handles.push(registry.load(image)?);
    }
    for handle in handles {
        registry.close(handle)?;
    }
    let summary = session.finish()?;
    eprintln!(
        "{}: {} events, {} records",
        out.display(),
        summary.events,
        summary.records
    );
    Ok(())
}
