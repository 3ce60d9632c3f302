//! The image registry: refcounted handles, reference resolution, cascading
//! unload and lifecycle notifications.

use crate::observer::{FailedEvent, LifecycleObserver, LoadingEvent, StatefulObserver};
use crate::{AssemblyName, Image, ImageError, UnloadStateProvider, Version};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Identifies one load of an image in one registry. Ids grow monotonically
/// and are never reused, so a stale id can never name a different image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageId(u64);

impl ImageId {
    /// The id as a number (e.g. for an event's module id).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The requested file could not be loaded. The message includes the
    /// cause, so it is not repeated as [`Error::source`](std::error::Error::source).
    #[error("cannot load {path}: {error}", path = path.display())]
    Load {
        /// The path as given (or found on a search path).
        path: PathBuf,
        /// Why it could not be read or parsed.
        error: ImageError,
    },
    /// No loaded image and no file on the search paths satisfies the name.
    #[error("no image satisfies {name} ({} candidate(s) rejected)", rejected.len())]
    NotFound {
        /// The requested assembly.
        name: AssemblyName,
        /// Files that were examined and rejected, with the reason.
        rejected: Vec<RejectedCandidate>,
    },
    /// The handle was issued by a different registry.
    #[error("the handle was issued by a different image registry")]
    ForeignHandle,
}

/// How one AssemblyRef of a loaded image was resolved.
#[derive(Debug)]
pub struct ResolvedReference {
    requested: AssemblyName,
    resolution: Resolution,
}

impl ResolvedReference {
    /// The reference as written in the referring image.
    pub fn requested(&self) -> &AssemblyName {
        &self.requested
    }

    /// What the reference resolved to.
    pub fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// The image it resolved to, if any.
    pub fn target(&self) -> Option<ImageId> {
        match self.resolution {
            Resolution::Resolved { target, .. } => Some(target),
            Resolution::Missing { .. } => None,
        }
    }

    /// Whether it resolved to a higher version than requested.
    pub fn version_mismatch_accepted(&self) -> bool {
        match self.resolution {
            Resolution::Resolved { version, .. } => version != self.requested.version,
            Resolution::Missing { .. } => false,
        }
    }
}

/// The outcome of resolving one reference.
#[derive(Debug)]
#[non_exhaustive]
pub enum Resolution {
    /// The reference resolved to an image.
    Resolved {
        /// The image it resolved to.
        target: ImageId,
        /// How it was found.
        via: ResolvedVia,
        /// The target's assembly version (may exceed the requested one).
        version: Version,
    },
    /// Nothing satisfies the reference (Mono's "missing reference").
    Missing {
        /// The candidate files that were examined and why each was rejected.
        rejected: Vec<RejectedCandidate>,
    },
}

/// How a resolved reference found its target.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResolvedVia {
    /// The target was already loaded; a counted reference was taken.
    AlreadyLoaded,
    /// The target was loaded from this file for the reference; counted.
    SearchPath(PathBuf),
    /// The target was still being loaded further up the chain (a reference
    /// cycle); the reference is **not** counted.
    Cycle,
}

/// A candidate file that did not satisfy a reference.
#[derive(Debug)]
#[non_exhaustive]
pub struct RejectedCandidate {
    /// The file examined.
    pub path: PathBuf,
    /// Why it was rejected.
    pub reason: Rejection,
}

/// Why a candidate file was rejected.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection {
    /// The file could not be read or parsed.
    Unreadable(ImageError),
    /// The file is not a .NET assembly (no Assembly row, or not .NET).
    NotAnAssembly,
    /// The assembly's version is lower than requested.
    VersionTooLow {
        /// The version found.
        found: Version,
    },
    /// Name, culture or public key token differ.
    IdentityMismatch {
        /// The identity found.
        found: AssemblyName,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Unreadable(e) => write!(f, "unreadable: {e}"),
            Rejection::NotAnAssembly => f.write_str("not a .NET assembly"),
            Rejection::VersionTooLow { found } => write!(f, "version {found} is too low"),
            Rejection::IdentityMismatch { found } => write!(f, "identity is {found}"),
        }
    }
}

/// A borrowed view of one loaded image, valid while the registry (or, in
/// an unload callback, the unload routine) owns it.
#[derive(Debug, Clone, Copy)]
pub struct LoadedImage<'a> {
    id: ImageId,
    entry: &'a Entry,
}

impl<'a> LoadedImage<'a> {
    /// The registry's id of this image.
    pub fn id(&self) -> ImageId {
        self.id
    }

    /// The parsed image: names, MVID or build-id, debug data.
    pub fn image(&self) -> &'a Image {
        &self.entry.image
    }

    /// The canonical path the image was loaded from.
    pub fn path(&self) -> &'a Path {
        &self.entry.path
    }

    /// How each AssemblyRef resolved, in AssemblyRef table order.
    pub fn references(&self) -> &'a [ResolvedReference] {
        &self.entry.references
    }
}

/// A counted reference to a loaded image, issued by an [`ImageRegistry`].
///
/// Cloning is another reference; dropping releases it. The release takes
/// effect at the next registry operation; [`ImageRegistry::close`] releases
/// immediately. Access the image through [`ImageRegistry::get`].
#[derive(Clone)]
pub struct ImageHandle {
    token: Arc<HandleToken>,
}

impl ImageHandle {
    /// The id of the image this handle keeps loaded.
    pub fn id(&self) -> ImageId {
        self.token.id
    }
}

impl fmt::Debug for ImageHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageHandle")
            .field("id", &self.token.id)
            .finish()
    }
}

/// Dropped handle tokens, reported back to the registry as `(image, serial)`.
type ReleaseQueue = Arc<Mutex<Vec<(ImageId, u64)>>>;

struct HandleToken {
    registry: u64,
    id: ImageId,
    serial: u64,
    releases: ReleaseQueue,
}

impl Drop for HandleToken {
    fn drop(&mut self) {
        // A poisoned queue still holds valid data: a panic elsewhere cannot
        // leave a half-pushed entry.
        self.releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.id, self.serial));
    }
}

/// The embedder's handles to one image: all clones of one token.
#[derive(Debug)]
struct External {
    serial: u64,
    token: Weak<HandleToken>,
}

/// One loaded image and its bookkeeping.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    image: Image,
    references: Vec<ResolvedReference>,
    /// Distinct images this one holds a counted reference on, in the order
    /// the references were resolved.
    holds: Vec<ImageId>,
    /// Counted references held by other loaded images.
    held_by: u32,
    external: Option<External>,
}

impl Entry {
    fn handles(&self) -> usize {
        self.external.as_ref().map_or(0, |e| e.token.strong_count())
    }

    fn is_dead(&self) -> bool {
        self.held_by == 0 && self.handles() == 0
    }
}

impl fmt::Debug for HandleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandleToken").field("id", &self.id).finish()
    }
}

/// A file read and parsed ahead of being loaded.
struct Parsed {
    image: Image,
    refs: Vec<AssemblyName>,
}

fn parse(path: &Path) -> Result<Parsed, ImageError> {
    let image = Image::open(path)?;
    let refs = image.assembly_refs()?;
    Ok(Parsed { image, refs })
}

type ParseCache = HashMap<PathBuf, Result<Parsed, ImageError>>;

/// A load in progress on the depth-first stack.
struct Frame {
    id: ImageId,
    path: PathBuf,
    image: Image,
    pending: std::vec::IntoIter<AssemblyName>,
    references: Vec<ResolvedReference>,
    holds: Vec<ImageId>,
    /// The reference whose target is being loaded by the frame above.
    awaiting: Option<AssemblyName>,
}

impl Frame {
    fn new(id: ImageId, path: PathBuf, parsed: Parsed) -> Frame {
        Frame {
            id,
            path,
            image: parsed.image,
            pending: parsed.refs.into_iter(),
            references: Vec::new(),
            holds: Vec::new(),
            awaiting: None,
        }
    }
}

/// What resolving one reference decided.
enum Step {
    Done(Resolution),
    Load { path: PathBuf, parsed: Parsed },
}

/// An image whose unload is in progress; owned by the unload routine.
struct Unloading {
    id: ImageId,
    entry: Entry,
    /// How many of `entry.holds` are still to be released (from the end).
    remaining: usize,
}

static NEXT_REGISTRY: AtomicU64 = AtomicU64::new(1);

/// Loads images with their reference closure, counts references, unloads
/// in cascade and notifies [`LifecycleObserver`]s.
///
/// # Reference counting
///
/// An image is kept loaded by two kinds of references:
///
/// * **Handles** ([`ImageHandle`]) held by the embedder. A handle is an
///   `Arc`-backed token: cloning it is another reference, dropping it (or
///   passing it to [`ImageRegistry::close`]) releases one. Because the count
///   is the `Arc`'s own, it cannot go negative and a handle cannot be
///   released twice.
/// * **Counted references** from other loaded images: an image holds one
///   reference on every distinct image its AssemblyRefs resolved to (except
///   across a cycle, see below). These are changed only by the registry.
///
/// When both reach zero the image unloads, which releases its counted
/// references and so may cascade. A handle dropped outside the registry is
/// queued and released at the start or end of the next registry operation
/// (or by [`ImageRegistry::release_dropped`]), so observers only ever run
/// inside a registry call, never from an arbitrary `drop`.
///
/// # Resolution policy
///
/// An AssemblyRef is resolved, in order, to:
///
/// 1. an already loaded image that satisfies it (earliest loaded first);
/// 2. an image currently being loaded further up the same load chain: a
///    reference cycle. The reference is resolved ([`ResolvedVia::Cycle`])
///    but **not counted**, so counted references always form an acyclic
///    graph and a cycle can neither keep itself alive nor make unloading
///    loop. If the target later unloads while the referrer stays, the
///    resolution keeps the stale id; [`ImageRegistry::image`] returns `None`
///    for it;
/// 3. the first file `<dir>/<name>.dll`, then `<dir>/<name>.exe`, over the
///    search paths in order, whose assembly satisfies it. The file name is
///    the reference's name as written (file systems may be case-sensitive
///    even though assembly names are not). A name that could
///    escape the directory (path separators, `.`/`..`, NUL) is never looked
///    up.
///
/// An image *satisfies* a reference when the simple names are equal ignoring
/// ASCII case, the cultures are equal (neutral matches only neutral), the
/// public key tokens are equal if the reference carries one, and the image's
/// version is **greater than or equal to** the requested one (like Mono's
/// default, non-strict binding). A higher version is recorded as an accepted
/// mismatch. A reference nothing satisfies is recorded as
/// [`Resolution::Missing`], with every candidate that was rejected and why;
/// it does not fail the load of the image that holds it.
///
/// # Order of events
///
/// Loads nest depth-first in AssemblyRef table order; unloads nest like a
/// stack and release an image's references in reverse reference order. The
/// files of a closure are read and parsed in parallel ahead of time (one
/// level of the reference graph at a time, with `rayon`), but events are
/// raised afterwards, sequentially, in that deterministic order.
///
/// # Observers and lifetimes
///
/// Images are never shared out: they are reached through borrows of the
/// registry ([`get`](Self::get), [`image`](Self::image),
/// [`loaded`](Self::loaded)) or, in callbacks, of the unload routine that
/// owns them, so no reference can outlive the storage. Observers run while
/// the registry is exclusively borrowed, so they cannot call back into it
/// (if the registry sits behind a lock, an observer must not take that lock:
/// it would deadlock); a handle dropped inside a callback is released after
/// the running operation's own events. Dropping the registry unloads every
/// image still loaded, with events; handles that outlive it keep nothing
/// alive.
pub struct ImageRegistry {
    serial: u64,
    search_paths: Vec<PathBuf>,
    /// The search paths that exist, canonical; refreshed by each load.
    resolved_dirs: Vec<PathBuf>,
    entries: BTreeMap<ImageId, Entry>,
    by_path: HashMap<PathBuf, ImageId>,
    /// Loaded images by ASCII-lowercased simple name, in load order.
    by_name: HashMap<String, Vec<ImageId>>,
    next_id: u64,
    next_token: u64,
    releases: ReleaseQueue,
    observers: Vec<Box<dyn LifecycleObserver>>,
}

impl fmt::Debug for ImageRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageRegistry")
            .field("search_paths", &self.search_paths)
            .field("loaded", &self.entries.len())
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl Default for ImageRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ImageRegistry {
    /// An empty registry with no search paths and no observers.
    pub fn new() -> Self {
        ImageRegistry {
            serial: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
            search_paths: Vec::new(),
            resolved_dirs: Vec::new(),
            entries: BTreeMap::new(),
            by_path: HashMap::new(),
            by_name: HashMap::new(),
            next_id: 1,
            next_token: 1,
            releases: Arc::default(),
            observers: Vec::new(),
        }
    }

    /// Appends a directory searched for referenced assemblies.
    pub fn add_search_path(&mut self, dir: impl Into<PathBuf>) {
        self.search_paths.push(dir.into());
    }

    /// The search directories, in search order.
    pub fn search_paths(&self) -> &[PathBuf] {
        &self.search_paths
    }

    /// Adds an observer; observers are called in the order they were added.
    pub fn add_observer(&mut self, observer: impl LifecycleObserver + 'static) {
        self.observers.push(Box::new(observer));
    }

    /// Adds a "v2" unload provider: what it returns from `unloading` is
    /// handed back to its `unloaded` for the same image.
    pub fn add_unload_provider(&mut self, provider: impl UnloadStateProvider + 'static) {
        self.observers
            .push(Box::new(StatefulObserver::new(provider)));
    }

    /// Loads the image at `path` and its reference closure and returns a
    /// handle to it. If the file is already loaded, returns another
    /// reference to it and raises no event.
    pub fn load(&mut self, path: &Path) -> Result<ImageHandle, RegistryError> {
        self.release_dropped();
        self.resolve_search_dirs();
        let canonical = std::fs::canonicalize(path).map_err(|source| RegistryError::Load {
            path: path.to_owned(),
            error: ImageError::Io {
                path: path.to_owned(),
                source,
            },
        })?;
        if let Some(&id) = self.by_path.get(&canonical)
            && self.entries.contains_key(&id)
        {
            return Ok(self.handle_for(id));
        }
        let mut cache = self.prefetch(&canonical, None);
        let parsed = cache
            .remove(&canonical)
            .unwrap_or_else(|| parse(&canonical));
        let result = self.load_closure(canonical, parsed, None, &mut cache);
        let handle = result.map(|id| self.handle_for(id));
        self.release_dropped();
        handle
    }

    /// Returns a handle to an image satisfying `name`: an already loaded
    /// one, else the first satisfying file on the search paths, loaded with
    /// its reference closure.
    pub fn load_by_name(&mut self, name: &AssemblyName) -> Result<ImageHandle, RegistryError> {
        self.release_dropped();
        self.resolve_search_dirs();
        if let Some(id) = self.find_loaded(name) {
            return Ok(self.handle_for(id));
        }
        let mut cache = ParseCache::new();
        let mut rejected = Vec::new();
        let found = self.probe_search_paths(name, None, &[], &mut cache, &mut rejected);
        let result = match found {
            Some((path, parsed)) => {
                let mut cache = self.prefetch(&path, Some(&parsed));
                self.load_closure(path, Ok(parsed), Some(name), &mut cache)
                    .map(|id| self.handle_for(id))
            }
            None => Err(RegistryError::NotFound {
                name: name.clone(),
                rejected,
            }),
        };
        self.release_dropped();
        result
    }

    /// Releases `handle` now. If it was the image's last reference the image
    /// unloads (with its cascade) before this returns.
    pub fn close(&mut self, handle: ImageHandle) -> Result<(), RegistryError> {
        self.close_retiring(handle, |_| {})
    }

    /// Like [`close`](Self::close), and `retire` runs for every image this
    /// call unloads, after its `unloading` (and its cascade's complete
    /// unloads) and before its `unloaded`: where an embedder drops what
    /// points into the image (an emulator's translated code, say) while the
    /// image is still alive and before any observer hears it is gone.
    pub fn close_retiring(
        &mut self,
        handle: ImageHandle,
        mut retire: impl FnMut(&LoadedImage<'_>),
    ) -> Result<(), RegistryError> {
        if handle.token.registry != self.serial {
            return Err(RegistryError::ForeignHandle);
        }
        drop(handle);
        self.release_dropped_retiring(&mut retire);
        Ok(())
    }

    /// Processes handles dropped since the last registry operation,
    /// unloading images that lost their last reference.
    pub fn release_dropped(&mut self) {
        self.release_dropped_retiring(&mut |_| {});
    }

    fn release_dropped_retiring(&mut self, retire: &mut dyn FnMut(&LoadedImage<'_>)) {
        loop {
            let batch =
                std::mem::take(&mut *self.releases.lock().unwrap_or_else(PoisonError::into_inner));
            if batch.is_empty() {
                return;
            }
            for (id, serial) in batch {
                let Some(entry) = self.entries.get_mut(&id) else {
                    continue;
                };
                // A newer token replaced this one: the message is stale.
                let current = entry.external.as_ref().is_some_and(|e| e.serial == serial);
                if !current || entry.handles() > 0 {
                    continue;
                }
                entry.external = None;
                if entry.held_by == 0 {
                    self.unload(id, retire);
                }
            }
        }
    }

    /// The image `handle` keeps loaded.
    pub fn get(&self, handle: &ImageHandle) -> Result<LoadedImage<'_>, RegistryError> {
        if handle.token.registry != self.serial {
            return Err(RegistryError::ForeignHandle);
        }
        self.image(handle.id()).ok_or(RegistryError::ForeignHandle)
    }

    /// The loaded image with this id, `None` if it is not (or no longer)
    /// loaded.
    pub fn image(&self, id: ImageId) -> Option<LoadedImage<'_>> {
        self.entries.get(&id).map(|entry| LoadedImage { id, entry })
    }

    /// Every loaded image, in the order their loads began.
    pub fn loaded(&self) -> impl Iterator<Item = LoadedImage<'_>> + '_ {
        self.entries
            .iter()
            .map(|(&id, entry)| LoadedImage { id, entry })
    }

    /// How many images are loaded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no image is loaded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The image's reference count: live handles plus counted references
    /// from other images. `None` if it is not loaded.
    pub fn ref_count(&self, id: ImageId) -> Option<usize> {
        self.entries
            .get(&id)
            .map(|e| e.handles() + e.held_by as usize)
    }

    fn handle_for(&mut self, id: ImageId) -> ImageHandle {
        let next_token = &mut self.next_token;
        let releases = &self.releases;
        let registry = self.serial;
        let mut mint = |slot: &mut Option<External>| {
            let serial = *next_token;
            *next_token += 1;
            let token = Arc::new(HandleToken {
                registry,
                id,
                serial,
                releases: releases.clone(),
            });
            *slot = Some(External {
                serial,
                token: Arc::downgrade(&token),
            });
            ImageHandle { token }
        };
        match self.entries.get_mut(&id) {
            Some(entry) => match entry.external.as_ref().and_then(|e| e.token.upgrade()) {
                Some(token) => ImageHandle { token },
                // Either no handle yet, or the last one is being dropped
                // concurrently: its queued release is now stale.
                None => mint(&mut entry.external),
            },
            // Callers pass ids of loaded images; a handle to nothing would
            // only ever be reported stale, never unload anything.
            None => mint(&mut None),
        }
    }

    fn allocate_id(&mut self) -> ImageId {
        let id = ImageId(self.next_id);
        self.next_id += 1;
        id
    }

    fn notify_loading(
        &mut self,
        path: &Path,
        requested: Option<&AssemblyName>,
        requested_by: Option<ImageId>,
    ) -> ImageId {
        let id = self.allocate_id();
        let event = LoadingEvent {
            id,
            path,
            requested,
            requested_by,
        };
        for observer in &mut self.observers {
            observer.loading(&event);
        }
        id
    }

    fn notify_failed(&mut self, id: ImageId, path: &Path, error: &ImageError) {
        let event = FailedEvent { id, path, error };
        for observer in &mut self.observers {
            observer.failed(&event);
        }
    }

    /// Loads `path` (already parsed into `parsed`) and, depth-first, every
    /// image its references pull in. Returns the root's id.
    fn load_closure(
        &mut self,
        path: PathBuf,
        parsed: Result<Parsed, ImageError>,
        requested: Option<&AssemblyName>,
        cache: &mut ParseCache,
    ) -> Result<ImageId, RegistryError> {
        let id = self.notify_loading(&path, requested, None);
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(error) => {
                self.notify_failed(id, &path, &error);
                return Err(RegistryError::Load { path, error });
            }
        };
        // An explicit stack: a hostile chain of references must not be able
        // to overflow the native stack.
        let mut stack = vec![Frame::new(id, path, parsed)];
        loop {
            let Some(top) = stack.last_mut() else {
                // The root's frame is popped only by the return below.
                return Ok(id);
            };
            if let Some(reference) = top.pending.next() {
                let referrer = top.id;
                match self.resolve(&reference, referrer, &stack, cache) {
                    Step::Done(resolution) => {
                        if let Some(top) = stack.last_mut() {
                            if let Resolution::Resolved { target, via, .. } = &resolution
                                && *via == ResolvedVia::AlreadyLoaded
                            {
                                self.take_reference(&mut top.holds, *target);
                            }
                            top.references.push(ResolvedReference {
                                requested: reference,
                                resolution,
                            });
                        }
                    }
                    Step::Load { path, parsed } => {
                        let child = self.notify_loading(&path, Some(&reference), Some(referrer));
                        if let Some(top) = stack.last_mut() {
                            top.awaiting = Some(reference);
                        }
                        stack.push(Frame::new(child, path, parsed));
                    }
                }
                continue;
            }
            let Some(done) = stack.pop() else { continue };
            let done_id = done.id;
            let done_path = done.path.clone();
            let version = done
                .image
                .assembly_name()
                .map(|n| n.version)
                .unwrap_or_default();
            self.finish_load(done);
            match stack.last_mut() {
                None => return Ok(done_id),
                Some(parent) => {
                    self.take_reference(&mut parent.holds, done_id);
                    if let Some(requested) = parent.awaiting.take() {
                        parent.references.push(ResolvedReference {
                            requested,
                            resolution: Resolution::Resolved {
                                target: done_id,
                                via: ResolvedVia::SearchPath(done_path),
                                version,
                            },
                        });
                    }
                }
            }
        }
    }

    /// Records a counted reference from the image being loaded to `target`,
    /// once per distinct target.
    fn take_reference(&mut self, holds: &mut Vec<ImageId>, target: ImageId) {
        if holds.contains(&target) {
            return;
        }
        if let Some(entry) = self.entries.get_mut(&target) {
            // Saturating: a count that cannot be represented keeps the image
            // loaded until the registry is dropped rather than wrapping.
            entry.held_by = entry.held_by.saturating_add(1);
            holds.push(target);
        }
    }

    fn finish_load(&mut self, frame: Frame) {
        let id = frame.id;
        if let Some(name) = frame.image.assembly_name() {
            self.by_name
                .entry(name.name.to_ascii_lowercase())
                .or_default()
                .push(id);
        }
        self.by_path.insert(frame.path.clone(), id);
        let entry = Entry {
            path: frame.path,
            image: frame.image,
            references: frame.references,
            holds: frame.holds,
            held_by: 0,
            external: None,
        };
        // Registered before `loaded` runs, so the tables stay consistent
        // even if an observer panics.
        self.entries.insert(id, entry);
        if let Some(entry) = self.entries.get(&id) {
            let view = LoadedImage { id, entry };
            for observer in &mut self.observers {
                observer.loaded(&view);
            }
        }
    }

    fn resolve(
        &mut self,
        reference: &AssemblyName,
        referrer: ImageId,
        stack: &[Frame],
        cache: &mut ParseCache,
    ) -> Step {
        if let Some(target) = self.find_loaded(reference) {
            let version = self.version_of(target);
            return Step::Done(Resolution::Resolved {
                target,
                via: ResolvedVia::AlreadyLoaded,
                version,
            });
        }
        for frame in stack {
            if let Some(name) = frame.image.assembly_name()
                && check(reference, name).is_ok()
            {
                return Step::Done(Resolution::Resolved {
                    target: frame.id,
                    via: ResolvedVia::Cycle,
                    version: name.version,
                });
            }
        }
        let mut rejected = Vec::new();
        match self.probe_search_paths(reference, Some(referrer), stack, cache, &mut rejected) {
            Some((path, parsed)) => Step::Load { path, parsed },
            None => Step::Done(Resolution::Missing { rejected }),
        }
    }

    /// Walks the search-path candidates for `reference` and returns the
    /// first file that satisfies it, parsed; records the others.
    fn probe_search_paths(
        &mut self,
        reference: &AssemblyName,
        referrer: Option<ImageId>,
        stack: &[Frame],
        cache: &mut ParseCache,
        rejected: &mut Vec<RejectedCandidate>,
    ) -> Option<(PathBuf, Parsed)> {
        for path in self.candidates(&reference.name) {
            // Loaded or loading under this path, but it did not match above.
            let known = self
                .by_path
                .get(&path)
                .and_then(|id| self.entries.get(id))
                .map(|e| &e.image)
                .or_else(|| stack.iter().find(|f| f.path == path).map(|f| &f.image));
            if let Some(image) = known {
                let reason = match image.assembly_name() {
                    Some(found) => check(reference, found).err(),
                    None => Some(Rejection::NotAnAssembly),
                };
                rejected.push(RejectedCandidate {
                    path,
                    reason: reason.unwrap_or(Rejection::NotAnAssembly),
                });
                continue;
            }
            if !cache.contains_key(&path) {
                let parsed = parse(&path);
                cache.insert(path.clone(), parsed);
            }
            let verdict = match cache.get(&path) {
                Some(Ok(parsed)) => match parsed.image.assembly_name() {
                    Some(found) => check(reference, found),
                    None => Err(Rejection::NotAnAssembly),
                },
                _ => Ok(()),
            };
            if let Err(reason) = verdict {
                // Stays cached: it may satisfy a different reference.
                rejected.push(RejectedCandidate { path, reason });
                continue;
            }
            match cache.remove(&path) {
                Some(Ok(parsed)) => return Some((path, parsed)),
                Some(Err(error)) => {
                    // The file was meant to be loaded and could not be.
                    let id = self.notify_loading(&path, Some(reference), referrer);
                    self.notify_failed(id, &path, &error);
                    rejected.push(RejectedCandidate {
                        path,
                        reason: Rejection::Unreadable(error),
                    });
                }
                None => {}
            }
        }
        None
    }

    /// The existing files that could hold assembly `name`, in search order.
    fn candidates(&self, name: &str) -> Vec<PathBuf> {
        let safe = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\', '\0'])
            && !Path::new(name).is_absolute();
        if !safe {
            return Vec::new();
        }
        let mut found = Vec::new();
        for dir in &self.resolved_dirs {
            for ext in ["dll", "exe"] {
                let candidate = dir.join(format!("{name}.{ext}"));
                // One `lstat` settles the common cases: absent, or a regular
                // file in an already canonical directory (hence canonical).
                let canonical = match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.is_file() => candidate,
                    Ok(meta) if meta.is_symlink() => match std::fs::canonicalize(&candidate) {
                        Ok(target) if target.is_file() => target,
                        _ => continue,
                    },
                    _ => continue,
                };
                if !found.contains(&canonical) {
                    found.push(canonical);
                }
            }
        }
        found
    }

    /// Canonicalizes the search paths for one operation, so candidate paths
    /// compare equal to the canonical paths images are registered under.
    fn resolve_search_dirs(&mut self) {
        self.resolved_dirs = self
            .search_paths
            .iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .collect();
    }

    fn find_loaded(&self, reference: &AssemblyName) -> Option<ImageId> {
        let ids = self.by_name.get(&reference.name.to_ascii_lowercase())?;
        ids.iter().copied().find(|id| {
            self.entries
                .get(id)
                .and_then(|e| e.image.assembly_name())
                .is_some_and(|found| check(reference, found).is_ok())
        })
    }

    fn version_of(&self, id: ImageId) -> Version {
        self.entries
            .get(&id)
            .and_then(|e| e.image.assembly_name())
            .map(|n| n.version)
            .unwrap_or_default()
    }

    /// Reads and parses, in parallel and one level at a time, the files the
    /// closure of `root` is expected to load. Only a prediction: anything it
    /// misses is parsed on demand, and nothing here raises an event.
    fn prefetch(&self, root: &Path, root_parsed: Option<&Parsed>) -> ParseCache {
        let mut cache = ParseCache::new();
        let mut level: Vec<PathBuf> = Vec::new();
        match root_parsed {
            Some(parsed) => {
                self.predict(&parsed.refs, &cache, &mut level);
                level.retain(|p| p != root);
            }
            None => level.push(root.to_owned()),
        }
        while !level.is_empty() {
            let current = std::mem::take(&mut level);
            let parse_one = |p: PathBuf| {
                let r = parse(&p);
                (p, r)
            };
            // A single file is not worth waking the thread pool for.
            let parsed: Vec<(PathBuf, Result<Parsed, ImageError>)> = if current.len() < 2 {
                current.into_iter().map(parse_one).collect()
            } else {
                current.into_par_iter().map(parse_one).collect()
            };
            let mut next = Vec::new();
            for (_, result) in &parsed {
                if let Ok(p) = result {
                    self.predict(&p.refs, &cache, &mut next);
                }
            }
            cache.extend(parsed);
            next.retain(|p| !cache.contains_key(p) && p != root);
            level = next;
        }
        cache
    }

    /// Adds to `out` the first not-yet-parsed candidate of each reference
    /// that neither a loaded image nor an already parsed file satisfies.
    fn predict(&self, refs: &[AssemblyName], cache: &ParseCache, out: &mut Vec<PathBuf>) {
        for reference in refs {
            if self.find_loaded(reference).is_some() {
                continue;
            }
            for path in self.candidates(&reference.name) {
                if self.by_path.contains_key(&path) {
                    continue;
                }
                match cache.get(&path) {
                    Some(Ok(p))
                        if p.image
                            .assembly_name()
                            .is_some_and(|n| check(reference, n).is_ok()) =>
                    {
                        break;
                    }
                    Some(_) => continue,
                    None => {
                        if !out.contains(&path) {
                            out.push(path);
                        }
                        break;
                    }
                }
            }
        }
    }

    /// Unloads `id` and everything whose last reference it held, raising
    /// nested `unloading`/`unloaded` events.
    ///
    /// Each entry is moved out of the tables into this routine; observers
    /// get borrows of it, and it is dropped only after its `unloaded`
    /// callbacks returned. No other order can be written: nothing else owns
    /// the entry any more.
    fn unload(&mut self, id: ImageId, retire: &mut dyn FnMut(&LoadedImage<'_>)) {
        let Some(first) = self.detach(id) else { return };
        let mut stack = vec![first];
        while let Some(top) = stack.last_mut() {
            if top.remaining > 0 {
                top.remaining -= 1;
                let Some(&child) = top.entry.holds.get(top.remaining) else {
                    continue;
                };
                let dead = match self.entries.get_mut(&child) {
                    Some(entry) => {
                        entry.held_by = entry.held_by.saturating_sub(1);
                        entry.is_dead()
                    }
                    None => false,
                };
                if dead && let Some(next) = self.detach(child) {
                    stack.push(next);
                }
                continue;
            }
            if let Some(done) = stack.pop() {
                let view = LoadedImage {
                    id: done.id,
                    entry: &done.entry,
                };
                retire(&view);
                for observer in &mut self.observers {
                    observer.unloaded(&view);
                }
                // `done` (and the image's storage) is dropped here, after
                // the last observer returned.
            }
        }
    }

    /// Removes an image from the tables and raises `unloading` for it.
    fn detach(&mut self, id: ImageId) -> Option<Unloading> {
        let entry = self.entries.remove(&id)?;
        self.by_path.remove(&entry.path);
        if let Some(name) = entry.image.assembly_name() {
            let key = name.name.to_ascii_lowercase();
            if let Some(ids) = self.by_name.get_mut(&key) {
                ids.retain(|&other| other != id);
                if ids.is_empty() {
                    self.by_name.remove(&key);
                }
            }
        }
        let view = LoadedImage { id, entry: &entry };
        for observer in &mut self.observers {
            observer.unloading(&view);
        }
        let remaining = entry.holds.len();
        Some(Unloading {
            id,
            entry,
            remaining,
        })
    }
}

impl Drop for ImageRegistry {
    /// Unloads everything still loaded, with events: handles still alive
    /// are ignored. Roots (images no other image holds) unload in id order.
    fn drop(&mut self) {
        for entry in self.entries.values_mut() {
            entry.external = None;
        }
        while let Some(root) = self
            .entries
            .iter()
            .find(|(_, e)| e.held_by == 0)
            .map(|(&id, _)| id)
        {
            self.unload(root, &mut |_| {});
        }
        // Counted references are acyclic, so the loop above empties the
        // table; anything left would be a bookkeeping bug, released silently.
        self.entries.clear();
    }
}

/// Whether `found` satisfies `reference` under the documented policy.
fn check(reference: &AssemblyName, found: &AssemblyName) -> Result<(), Rejection> {
    let culture = |c: &Option<String>| {
        c.as_deref()
            .filter(|c| !c.is_empty())
            .map(str::to_ascii_lowercase)
    };
    let same_identity = reference.name.eq_ignore_ascii_case(&found.name)
        && culture(&reference.culture) == culture(&found.culture)
        && (reference.public_key_token.is_none()
            || reference.public_key_token == found.public_key_token);
    if !same_identity {
        return Err(Rejection::IdentityMismatch {
            found: found.clone(),
        });
    }
    if found.version < reference.version {
        return Err(Rejection::VersionTooLow {
            found: found.version,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(name: &str, major: u16, culture: Option<&str>, token: Option<[u8; 8]>) -> AssemblyName {
        AssemblyName {
            name: name.to_owned(),
            version: Version {
                major,
                minor: 0,
                build: 0,
                revision: 0,
            },
            culture: culture.map(str::to_owned),
            public_key_token: token,
        }
    }

    #[test]
    fn policy_accepts_equal_or_newer_versions_of_the_same_identity() {
        let token = Some([1, 2, 3, 4, 5, 6, 7, 8]);
        let wanted = name("System.Xml", 4, None, token);
        assert!(check(&wanted, &name("system.xml", 4, None, token)).is_ok());
        assert!(check(&wanted, &name("System.Xml", 5, Some(""), token)).is_ok());
        assert!(matches!(
            check(&wanted, &name("System.Xml", 2, None, token)),
            Err(Rejection::VersionTooLow { found }) if found.major == 2
        ));
        for other in [
            name("System.Data", 4, None, token),
            name("System.Xml", 4, Some("de"), token),
            name("System.Xml", 4, None, Some([0; 8])),
            name("System.Xml", 4, None, None),
        ] {
            assert!(
                matches!(
                    check(&wanted, &other),
                    Err(Rejection::IdentityMismatch { .. })
                ),
                "{other}"
            );
        }
        // A reference without a token accepts any token.
        assert!(check(&name("Lib", 1, None, None), &name("Lib", 1, None, token)).is_ok());
    }

    #[test]
    fn prefetch_parses_exactly_the_closure_that_will_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies/lifecycle");
        let Ok(dir) = std::fs::canonicalize(dir) else {
            panic!("lifecycle fixtures missing");
        };
        let mut registry = ImageRegistry::new();
        registry.add_search_path(&dir);
        registry.resolve_search_dirs();
        let cache = registry.prefetch(&dir.join("Root.dll"), None);
        let mut parsed: Vec<_> = cache
            .keys()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        parsed.sort();
        assert_eq!(
            parsed,
            [
                "Left.dll",
                "Right.dll",
                "Root.dll",
                "Shared.dll",
                "Versioned.dll"
            ]
        );
        assert!(cache.values().all(Result::is_ok));

        // Already loaded images are not read again.
        let shared = registry.load(&dir.join("Shared.dll"));
        assert!(shared.is_ok());
        let cache = registry.prefetch(&dir.join("Left.dll"), None);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn registry_and_handles_can_move_between_threads() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<ImageRegistry>();
        send_sync::<ImageHandle>();
    }

    #[test]
    fn names_that_could_leave_a_search_directory_are_not_looked_up() {
        let base =
            std::env::temp_dir().join(format!("tcgkit-registry-names-{}", std::process::id()));
        let search = base.join("search");
        let created = std::fs::create_dir_all(&search)
            .and_then(|()| std::fs::write(base.join("Secret.dll"), b"MZ"))
            .and_then(|()| std::fs::write(search.join("Inside.dll"), b"MZ"));
        assert!(created.is_ok(), "scratch files: {created:?}");
        let mut registry = ImageRegistry::new();
        registry.add_search_path(&search);
        registry.resolve_search_dirs();
        assert_eq!(
            registry.candidates("Inside").len(),
            1,
            "the probe itself works"
        );
        let absolute = base.join("Secret");
        let absolute = absolute.to_string_lossy();
        for hostile in [
            "",
            ".",
            "..",
            "../Secret",
            &absolute,
            "..\\Secret",
            "Inside\0",
        ] {
            assert!(registry.candidates(hostile).is_empty(), "{hostile:?}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
