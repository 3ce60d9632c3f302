//! Shared helpers of the lifecycle tests: fixture paths and an observer
//! that records every event with a snapshot of the data it could read.
#![allow(dead_code)] // Each test crate uses a different subset.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tcgkit_image_core::{
    AssemblyName, FailedEvent, Guid, ImageId, LifecycleObserver, LoadedImage, LoadingEvent,
    Resolution, ResolvedVia,
};

/// The directory of the lifecycle fixture assemblies.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies/lifecycle")
}

/// One fixture file.
pub fn fixture(file: &str) -> PathBuf {
    fixtures().join(file)
}

/// A fresh, empty scratch directory, removed on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> ScratchDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("tcgkit-lifecycle-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        ScratchDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Which callback ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Loading,
    Loaded,
    Failed,
    Unloading,
    Unloaded,
}

/// Everything an event consumer (like an EventPipe ModuleUnload writer)
/// reads from an image, copied out during the callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub name: String,
    pub path: PathBuf,
    pub opened_from: Option<PathBuf>,
    pub assembly: Option<AssemblyName>,
    pub module_name: Option<String>,
    pub mvid: Option<Guid>,
    pub runtime_version: Option<String>,
    pub codeview: Option<(Guid, u32, String)>,
    pub debug_entries: usize,
    pub references: Vec<String>,
    /// Distinct images this one holds a counted reference on.
    pub counted_targets: Vec<ImageId>,
    pub byte_len: usize,
}

impl Snapshot {
    pub fn of(view: &LoadedImage<'_>) -> Snapshot {
        let image = view.image();
        Snapshot {
            name: image.name().to_owned(),
            path: view.path().to_owned(),
            opened_from: image.path().map(Path::to_owned),
            assembly: image.assembly_name().cloned(),
            module_name: image.module_name().map(str::to_owned),
            mvid: image.mvid(),
            runtime_version: image.runtime_version().map(str::to_owned),
            codeview: image
                .codeview()
                .expect("debug directory readable")
                .map(|cv| (cv.guid, cv.age, cv.path.to_owned())),
            debug_entries: image
                .debug_entries()
                .expect("debug directory readable")
                .len(),
            references: view
                .references()
                .iter()
                .map(|r| r.requested().name.clone())
                .collect(),
            counted_targets: counted_targets(view),
            byte_len: image.bytes().len(),
        }
    }
}

/// The distinct images `view` holds counted references on, in order.
pub fn counted_targets(view: &LoadedImage<'_>) -> Vec<ImageId> {
    let mut targets = Vec::new();
    for reference in view.references() {
        if let Resolution::Resolved { target, via, .. } = reference.resolution()
            && *via != ResolvedVia::Cycle
            && !targets.contains(target)
        {
            targets.push(*target);
        }
    }
    targets
}

/// One recorded callback.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub id: ImageId,
    /// The file name for `loading`/`failed`, the image name otherwise.
    pub label: String,
    pub snapshot: Option<Snapshot>,
}

impl Event {
    /// `"loading Root.dll"`, `"unloaded Shared"`, ...
    pub fn text(&self) -> String {
        let verb = match self.kind {
            Kind::Loading => "loading",
            Kind::Loaded => "loaded",
            Kind::Failed => "failed",
            Kind::Unloading => "unloading",
            Kind::Unloaded => "unloaded",
        };
        format!("{verb} {}", self.label)
    }
}

/// Records every event; clones share the log.
#[derive(Clone, Default)]
pub struct Recorder {
    log: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    pub fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        self.log.lock().expect("recorder lock")
    }

    /// Takes the events recorded so far as `"verb label"` strings.
    pub fn take_texts(&self) -> Vec<String> {
        self.events().drain(..).map(|e| e.text()).collect()
    }

    fn push(&self, kind: Kind, id: ImageId, label: String, snapshot: Option<Snapshot>) {
        self.events().push(Event {
            kind,
            id,
            label,
            snapshot,
        });
    }

    fn view(&self, kind: Kind, view: &LoadedImage<'_>) {
        self.push(
            kind,
            view.id(),
            view.image().name().to_owned(),
            Some(Snapshot::of(view)),
        );
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl LifecycleObserver for Recorder {
    fn loading(&mut self, event: &LoadingEvent<'_>) {
        self.push(Kind::Loading, event.id, file_name(event.path), None);
    }

    fn loaded(&mut self, image: &LoadedImage<'_>) {
        self.view(Kind::Loaded, image);
    }

    fn failed(&mut self, event: &FailedEvent<'_>) {
        // The error must be a real, printable error.
        assert!(!event.error.to_string().is_empty());
        self.push(Kind::Failed, event.id, file_name(event.path), None);
    }

    fn unloading(&mut self, image: &LoadedImage<'_>) {
        self.view(Kind::Unloading, image);
    }

    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        self.view(Kind::Unloaded, image);
    }
}

/// Checks that `events` is a well-formed, properly nested sequence:
/// every `loading` closed by exactly one `loaded` or `failed` of the same id,
/// every `unloading` by exactly one `unloaded`, brackets never crossing, and
/// nothing unloaded that was not loaded. Returns the ids left loaded.
pub fn check_nesting(events: &[Event], mut loaded: Vec<ImageId>) -> Result<Vec<ImageId>, String> {
    let mut open: Vec<(Kind, ImageId)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let here = || format!("event {i} ({})", e.text());
        match e.kind {
            Kind::Loading | Kind::Unloading => {
                if open.iter().any(|(_, id)| *id == e.id) {
                    return Err(format!("{}: id already open", here()));
                }
                if e.kind == Kind::Unloading && !loaded.contains(&e.id) {
                    return Err(format!("{}: not loaded", here()));
                }
                if e.kind == Kind::Loading && loaded.contains(&e.id) {
                    return Err(format!("{}: id reused", here()));
                }
                open.push((e.kind, e.id));
            }
            Kind::Loaded | Kind::Failed => match open.pop() {
                Some((Kind::Loading, id)) if id == e.id => {
                    if e.kind == Kind::Loaded {
                        loaded.push(e.id);
                    }
                }
                other => return Err(format!("{}: closes {other:?}", here())),
            },
            Kind::Unloaded => match open.pop() {
                Some((Kind::Unloading, id)) if id == e.id => loaded.retain(|&l| l != e.id),
                other => return Err(format!("{}: closes {other:?}", here())),
            },
        }
    }
    if !open.is_empty() {
        return Err(format!("unclosed events: {open:?}"));
    }
    Ok(loaded)
}

/// Checks that unloads cascade as documented: an unload nested directly in
/// `unloading(P)` is of an image P held a counted reference on, and a
/// top-level unload is of an image no loaded image holds. Nested unloads
/// inside P come in reverse order of P's references.
pub fn check_cascade(events: &[Event]) -> Result<(), String> {
    let mut holds: std::collections::BTreeMap<ImageId, Vec<ImageId>> = Default::default();
    // Open unload brackets: (image, its counted targets not yet passed).
    let mut open: Vec<(ImageId, Vec<ImageId>)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            Kind::Loaded => {
                let snapshot = e.snapshot.as_ref().ok_or("loaded without snapshot")?;
                holds.insert(e.id, snapshot.counted_targets.clone());
            }
            Kind::Unloading => {
                match open.last_mut() {
                    Some((parent, remaining)) => {
                        // Released last-first: the child must be the latest
                        // still-unpassed target; skip the ones that survived.
                        let position =
                            remaining.iter().rposition(|t| *t == e.id).ok_or_else(|| {
                                format!(
                                    "event {i}: {} unloads inside {parent}, which did not hold it (or not in reverse reference order)",
                                    e.text()
                                )
                            })?;
                        remaining.truncate(position);
                    }
                    None => {
                        if let Some((holder, _)) =
                            holds.iter().find(|(h, t)| **h != e.id && t.contains(&e.id))
                        {
                            return Err(format!(
                                "event {i}: {} while {holder} still holds it",
                                e.text()
                            ));
                        }
                    }
                }
                let targets = holds.get(&e.id).cloned().unwrap_or_default();
                open.push((e.id, targets));
            }
            Kind::Unloaded => {
                open.pop();
                holds.remove(&e.id);
            }
            Kind::Loading | Kind::Failed => {}
        }
    }
    Ok(())
}
