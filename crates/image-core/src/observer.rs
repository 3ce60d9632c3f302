//! Lifecycle observers: who hears about images being loaded and unloaded.
//!
//! The registry calls observers with *borrows* of images it owns. Every
//! callback gets a [`LoadedImage`] view whose image, path and references are
//! alive for the whole call: during unload the registry has moved the image
//! out of its tables into the unload routine, calls `unloading`, releases the
//! images it held, calls `unloaded`, and only then drops it. Observers are
//! `'static` boxes, so they cannot keep a borrow past the call; an observer
//! that needs data after `unloaded` copies it out (the "snapshot" style) or
//! uses an [`UnloadStateProvider`] (the "v2" style).

use crate::registry::{ImageId, LoadedImage};
use crate::{AssemblyName, ImageError};
use std::path::Path;

/// An image is about to be loaded: the file was found and read.
///
/// Exactly one [`LifecycleObserver::loaded`] or [`LifecycleObserver::failed`]
/// with the same [`id`](Self::id) follows, after the events of every image
/// this one's references pulled in.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct LoadingEvent<'a> {
    /// The id the image will have once loaded (ids are never reused).
    pub id: ImageId,
    /// The canonical path of the file.
    pub path: &'a Path,
    /// The assembly reference this load resolves, `None` for a load by path.
    pub requested: Option<&'a AssemblyName>,
    /// The image whose reference caused this load, `None` for a root load.
    pub requested_by: Option<ImageId>,
}

/// A load announced by [`LoadingEvent`] failed.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct FailedEvent<'a> {
    /// The id announced by the matching `loading` event.
    pub id: ImageId,
    /// The canonical path of the file.
    pub path: &'a Path,
    /// Why the image could not be loaded.
    pub error: &'a ImageError,
}

/// Receives the lifecycle events of an [`ImageRegistry`](crate::ImageRegistry).
///
/// All methods default to doing nothing, so an observer implements only
/// what it needs. Events arrive in a deterministic order:
///
/// * Loads nest depth-first in AssemblyRef table order: `loading(A)`,
///   then the complete `loading`/`loaded` of every image A's references
///   load, then `loaded(A)` (or `failed(A)`).
/// * Unloads nest like a stack: `unloading(A)`, then the complete
///   `unloading`/`unloaded` of every image whose last reference A held
///   (in reverse reference order), then `unloaded(A)`.
///
/// Observers run while the registry is exclusively borrowed, so they
/// cannot call back into it. Dropping an [`ImageHandle`](crate::ImageHandle)
/// inside a callback is allowed: the release is deferred to the end of the
/// registry operation that is running.
///
/// An observer cannot keep the image past the callback; this does not
/// compile, because the borrow would escape:
///
/// ```compile_fail
/// use tcgkit_image_core::{Image, LifecycleObserver, LoadedImage};
///
/// struct Keeper<'a>(Option<&'a Image>);
///
/// impl<'a> LifecycleObserver for Keeper<'a> {
///     fn unloaded(&mut self, image: &LoadedImage<'_>) {
///         self.0 = Some(image.image());
///     }
/// }
/// ```
///
/// Copying what it needs out (a snapshot) is the way:
///
/// ```
/// use tcgkit_image_core::{LifecycleObserver, LoadedImage};
///
/// struct Keeper(Option<String>);
///
/// impl LifecycleObserver for Keeper {
///     fn unloaded(&mut self, image: &LoadedImage<'_>) {
///         self.0 = Some(image.image().name().to_owned());
///     }
/// }
/// ```
pub trait LifecycleObserver: Send {
    /// An image file was read and is about to be loaded.
    fn loading(&mut self, event: &LoadingEvent<'_>) {
        let _ = event;
    }

    /// The image is loaded and its references are resolved.
    fn loaded(&mut self, image: &LoadedImage<'_>) {
        let _ = image;
    }

    /// The load announced by `loading` failed; the image was never loaded.
    fn failed(&mut self, event: &FailedEvent<'_>) {
        let _ = event;
    }

    /// The image's last reference is gone; it still holds its references.
    fn unloading(&mut self, image: &LoadedImage<'_>) {
        let _ = image;
    }

    /// The image has released its references (and every image that only it
    /// kept alive is unloaded). Its own data is still alive during this call
    /// and is freed right after the last observer returns.
    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        let _ = image;
    }
}

/// The "v2" unload protocol: state computed at `unloading` is handed back
/// at `unloaded`.
///
/// This serves providers that want to measure or pair the two events
/// without keeping a side table. `unloaded` still receives the live image
/// as well. `State` cannot borrow from the image (it has no lifetime
/// parameter), so it cannot keep the image alive either.
pub trait UnloadStateProvider: Send {
    /// What `unloading` hands to the matching `unloaded`.
    type State: Send;

    /// The image's last reference is gone; return the state to carry.
    fn unloading(&mut self, image: &LoadedImage<'_>) -> Self::State;

    /// The matching end of `unloading`, with the state it returned.
    fn unloaded(&mut self, image: &LoadedImage<'_>, state: Self::State);
}

/// Adapts an [`UnloadStateProvider`] to the observer list.
///
/// Unloads nest like a stack, so pending states form a stack too; the
/// lookup by id is a defensive fallback that costs nothing in the nested
/// case (the match is always the last element).
pub(crate) struct StatefulObserver<P: UnloadStateProvider> {
    provider: P,
    pending: Vec<(ImageId, P::State)>,
}

impl<P: UnloadStateProvider> StatefulObserver<P> {
    pub(crate) fn new(provider: P) -> Self {
        StatefulObserver {
            provider,
            pending: Vec::new(),
        }
    }
}

impl<P: UnloadStateProvider> LifecycleObserver for StatefulObserver<P> {
    fn unloading(&mut self, image: &LoadedImage<'_>) {
        let state = self.provider.unloading(image);
        self.pending.push((image.id(), state));
    }

    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        let id = image.id();
        if let Some(index) = self.pending.iter().rposition(|(pending, _)| *pending == id) {
            let (_, state) = self.pending.remove(index);
            self.provider.unloaded(image, state);
        }
    }
}
