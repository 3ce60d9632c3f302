//! `tcgkit images`: load images and their reference closure, report, unload.
//!
//! Everything is loaded first, so bad input fails before anything is
//! printed; the report is built from the live registry, then every handle
//! is closed and the unload events are recorded too (`--json` and
//! `--events` show the whole lifecycle).

use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use tcgkit_image_core::{
    AssemblyName, DebugData, FailedEvent, Image, ImageFormat, ImageRegistry, LifecycleObserver,
    LoadedImage, LoadingEvent, Resolution, ResolvedReference, ResolvedVia,
};

/// Arguments of `tcgkit images`.
#[derive(clap::Args, Debug)]
pub struct ImagesArgs {
    /// Image files (.NET assemblies or modules, ELF executables).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print machine-readable JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also print the lifecycle events (loading, loaded, unloading, ...).
    #[arg(long)]
    events: bool,
    /// Directory searched for referenced assemblies (repeatable). Searched
    /// first, before the directories of the given files.
    #[arg(long = "search", value_name = "DIR")]
    search: Vec<PathBuf>,
    #[command(flatten)]
    trace: crate::trace::TraceArgs,
}

/// One lifecycle event, as printed.
struct Event {
    kind: &'static str,
    id: u64,
    what: String,
}

/// Records events for the report; shares its log with the command.
#[derive(Clone, Default)]
struct EventLog(Arc<Mutex<Vec<Event>>>);

impl EventLog {
    fn push(&self, kind: &'static str, id: u64, what: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Event { kind, id, what });
    }

    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl LifecycleObserver for EventLog {
    fn loading(&mut self, event: &LoadingEvent<'_>) {
        self.push("loading", event.id.get(), event.path.display().to_string());
    }
    fn loaded(&mut self, image: &LoadedImage<'_>) {
        self.push("loaded", image.id().get(), image.image().name().to_owned());
    }
    fn failed(&mut self, event: &FailedEvent<'_>) {
        self.push(
            "failed",
            event.id.get(),
            format!("{}: {}", event.path.display(), event.error),
        );
    }
    fn unloading(&mut self, image: &LoadedImage<'_>) {
        self.push(
            "unloading",
            image.id().get(),
            image.image().name().to_owned(),
        );
    }
    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        self.push(
            "unloaded",
            image.id().get(),
            image.image().name().to_owned(),
        );
    }
}

/// Runs the command.
pub fn run(args: &ImagesArgs) -> Result<ExitCode> {
    let mut registry = ImageRegistry::new();
    for dir in &args.search {
        registry.add_search_path(dir);
    }
    for path in &args.paths {
        if let Some(dir) = path.parent().map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        }) && !registry.search_paths().iter().any(|p| p == dir)
        {
            registry.add_search_path(dir);
        }
    }
    let log = EventLog::default();
    registry.add_observer(log.clone());
    let trace = args.trace.open()?;
    if let Some(session) = &trace {
        registry.add_observer(session.image_observer());
    }

    let mut handles = Vec::new();
    for path in &args.paths {
        // Dropping the registry on error unloads what was loaded so far.
        // The registry's message already names the path and the cause.
        let handle = registry.load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        handles.push(handle);
    }
    let roots: Vec<u64> = handles.iter().map(|h| h.id().get()).collect();
    let images: Vec<Value> = registry
        .loaded()
        .map(|l| image_json(&l, &roots))
        .collect::<Result<_>>()?;
    let table = if args.json {
        String::new()
    } else {
        tables(&registry, &roots)?
    };

    // Close in reverse order, so an image given later that references one
    // given earlier does not outlive it needlessly.
    for handle in handles.into_iter().rev() {
        registry.close(handle).context("closing an image")?;
    }
    let events = log.take();
    if let Some(session) = &trace {
        session.finish().context("finishing the trace")?;
    }

    let mut out = String::new();
    if args.json {
        let events: Vec<Value> = events
            .iter()
            .map(|e| json!({"event": e.kind, "id": e.id, "what": e.what}))
            .collect();
        let doc = json!({ "images": images, "events": events });
        out = serde_json::to_string_pretty(&doc).context("encoding JSON")?;
        out.push('\n');
    } else {
        out.push_str(&table);
        if args.events {
            out.push_str("\nEVENTS\n");
            for e in &events {
                let _ = writeln!(out, "{:<9} #{:<4} {}", e.kind, e.id, e.what);
            }
        }
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn format_name(format: ImageFormat) -> &'static str {
    match format {
        ImageFormat::Assembly => "assembly",
        ImageFormat::Module => "module",
        ImageFormat::Elf => "elf",
    }
}

/// The image's identity GUID or build-id, as text.
fn identity(image: &Image) -> String {
    match (image.mvid(), image.build_id()) {
        (Some(mvid), _) => mvid.to_string(),
        (None, Some(id)) => hex(id),
        (None, None) => "-".to_owned(),
    }
}

fn version_text(image: &Image) -> String {
    image
        .assembly_name()
        .map_or_else(|| "-".to_owned(), |a| a.version.to_string())
}

fn name_json(name: &AssemblyName) -> Value {
    json!({
        "name": name.name,
        "version": name.version.to_string(),
        "culture": name.culture,
        "public_key_token": name.public_key_token.map(|t| hex(&t)),
    })
}

/// One reference's resolution as a short line of text.
fn resolution_text(reference: &ResolvedReference) -> String {
    match reference.resolution() {
        Resolution::Resolved {
            target,
            via,
            version,
        } => {
            let how = match via {
                ResolvedVia::AlreadyLoaded => format!("already loaded {target}"),
                ResolvedVia::SearchPath(path) => format!("loaded {target} from {}", path.display()),
                ResolvedVia::Cycle => format!("cycle back to {target} (not counted)"),
                _ => format!("resolved to {target}"),
            };
            if reference.version_mismatch_accepted() {
                format!("{how}, version {version} accepted")
            } else {
                how
            }
        }
        Resolution::Missing { rejected } if rejected.is_empty() => "missing".to_owned(),
        Resolution::Missing { rejected } => {
            let reasons: Vec<String> = rejected
                .iter()
                .map(|r| format!("{}: {}", r.path.display(), r.reason))
                .collect();
            format!("missing (rejected {})", reasons.join("; "))
        }
        _ => "unknown".to_owned(),
    }
}

fn reference_json(reference: &ResolvedReference) -> Value {
    let mut value = name_json(reference.requested());
    let (kind, target, path, version, rejected) = match reference.resolution() {
        Resolution::Resolved {
            target,
            via,
            version,
        } => {
            let (kind, path) = match via {
                ResolvedVia::AlreadyLoaded => ("already_loaded", None),
                ResolvedVia::SearchPath(p) => ("loaded", Some(p.display().to_string())),
                ResolvedVia::Cycle => ("cycle", None),
                _ => ("resolved", None),
            };
            (
                kind,
                Some(target.get()),
                path,
                Some(version.to_string()),
                Vec::new(),
            )
        }
        Resolution::Missing { rejected } => {
            let rejected = rejected
                .iter()
                .map(|r| json!({"path": r.path.display().to_string(), "reason": r.reason.to_string()}))
                .collect();
            ("missing", None, None, None, rejected)
        }
        _ => ("unknown", None, None, None, Vec::new()),
    };
    if let Value::Object(map) = &mut value {
        map.insert("resolution".into(), json!(kind));
        map.insert("target".into(), json!(target));
        map.insert("path".into(), json!(path));
        map.insert("resolved_version".into(), json!(version));
        map.insert(
            "version_mismatch_accepted".into(),
            json!(reference.version_mismatch_accepted()),
        );
        map.insert("rejected".into(), Value::Array(rejected));
    }
    value
}

fn debug_json(image: &Image) -> Result<Vec<Value>> {
    let entries = image
        .debug_entries()
        .with_context(|| format!("reading the debug directory of {}", image.name()))?;
    Ok(entries
        .iter()
        .map(|entry| match entry.data {
            DebugData::CodeView(cv) => json!({
                "type": "codeview", "guid": cv.guid.to_string(), "age": cv.age, "path": cv.path,
            }),
            DebugData::Deterministic => json!({"type": "deterministic"}),
            DebugData::EmbeddedPortablePdb {
                uncompressed_size,
                compressed_size,
            } => json!({
                "type": "embedded_portable_pdb",
                "uncompressed_size": uncompressed_size,
                "compressed_size": compressed_size,
            }),
            DebugData::PdbChecksum {
                algorithm,
                checksum,
            } => json!({
                "type": "pdb_checksum", "algorithm": algorithm, "checksum": hex(checksum),
            }),
            _ => json!({"type": "other", "entry_type": entry.entry_type}),
        })
        .collect())
}

fn image_json(view: &LoadedImage<'_>, roots: &[u64]) -> Result<Value> {
    let image = view.image();
    let elf = image.elf().map(|e| {
        json!({
            "machine": e.machine,
            "entry": e.entry,
            "segments": e.segments.len(),
            "interpreter": e.interpreter,
            "soname": e.soname,
            "needed": e.needed,
        })
    });
    Ok(json!({
        "id": view.id().get(),
        "root": roots.contains(&view.id().get()),
        "name": image.name(),
        "path": view.path().display().to_string(),
        "format": format_name(image.format()),
        "assembly": image.assembly_name().map(name_json),
        "module": image.module_name(),
        "mvid": image.mvid().map(|g| g.to_string()),
        "build_id": image.build_id().map(hex),
        "runtime_version": image.runtime_version(),
        "elf": elf,
        "debug": debug_json(image)?,
        "references": view.references().iter().map(reference_json).collect::<Vec<_>>(),
    }))
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let width = widths.get(c).copied().unwrap_or(0);
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn pdb_text(image: &Image) -> Result<String> {
    let codeview = image
        .codeview()
        .with_context(|| format!("reading the debug directory of {}", image.name()))?;
    Ok(match codeview {
        Some(cv) => format!("{} age {} {}", cv.guid, cv.age, cv.path),
        None => "-".to_owned(),
    })
}

fn tables(registry: &ImageRegistry, roots: &[u64]) -> Result<String> {
    let mut images = vec![
        [
            "ID",
            "NAME",
            "VERSION",
            "FORMAT",
            "MVID/BUILD-ID",
            "PATH",
            "PDB",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    let mut references = vec![
        ["ID", "REFERENCE", "RESOLUTION"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for view in registry.loaded() {
        let image = view.image();
        let id = view.id();
        let marker = if roots.contains(&id.get()) { "*" } else { "" };
        images.push(vec![
            format!("{id}{marker}"),
            image.name().to_owned(),
            version_text(image),
            format_name(image.format()).to_owned(),
            identity(image),
            view.path().display().to_string(),
            pdb_text(image)?,
        ]);
        for reference in view.references() {
            let requested = reference.requested();
            references.push(vec![
                id.to_string(),
                format!("{} {}", requested.name, requested.version),
                resolution_text(reference),
            ]);
        }
    }
    let mut out = render(&images);
    out.push_str("(* = given on the command line)\n");
    if references.len() > 1 {
        out.push_str("\nREFERENCES\n");
        out.push_str(&render(&references));
    }
    Ok(out)
}
