//! The event hub: registration, per-kind interest, dispatch, panic isolation.
//!
//! Design (in the manner of tracing-core): the hub keeps one `AtomicU32`
//! whose bit `k` is set while at least one listener is subscribed to kind
//! `k`. Raising an event loads it with `Relaxed` ordering and branches; only
//! when the bit is set does the out-of-line dispatch run. Dispatch takes a
//! snapshot of the listener list (an `Arc` clone under a read lock) and
//! releases the lock before calling anyone, so a callback may subscribe,
//! unsubscribe, register or remove listeners, or raise events itself,
//! without deadlock.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Instant;

use crate::event::{Event, EventKind, ImageEvent, ImageUnloaded};

/// State a listener keeps from `image_unloading_v2` to `image_unloaded_v2`.
pub type UnloadState = Box<dyn Any + Send>;

/// Set in an entry's mask once it has been removed; never an event bit.
const REMOVED: u32 = 1 << 31;

/// A profiler: receives the events it subscribed to.
///
/// Callbacks may run on any thread that raises events (vCPU threads
/// included), possibly concurrently, hence `Send + Sync`. Each callback gets
/// `me`, its own handle, so it can unsubscribe or remove itself.
///
/// A callback that panics is caught; its listener is removed (a message
/// naming it goes to stderr and to [`Profiler::faults`]) and the other
/// listeners still get the event.
pub trait Listener: Send + Sync + 'static {
    /// Called for every subscribed kind except [`EventKind::ImageUnloadV2`].
    fn event(&self, me: &ProfilerHandle, event: &Event<'_>);

    /// The first half of the "v2" unload pair (kind
    /// [`EventKind::ImageUnloadV2`]): return whatever you want back in
    /// [`image_unloaded_v2`](Listener::image_unloaded_v2) for this image.
    fn image_unloading_v2(&self, me: &ProfilerHandle, image: &ImageEvent<'_>) -> UnloadState {
        let _ = (me, image);
        Box::new(())
    }

    /// The second half of the "v2" unload pair: gets back the state returned
    /// by [`image_unloading_v2`](Listener::image_unloading_v2) for the same
    /// image. It is delivered even if the listener unsubscribed in between
    /// (so it can release what it kept); it is dropped unheard only if the
    /// listener was removed.
    fn image_unloaded_v2(
        &self,
        me: &ProfilerHandle,
        image: &ImageUnloaded<'_>,
        state: UnloadState,
    ) {
        let _ = (me, image, state);
    }
}

impl<L: Listener> Listener for Arc<L> {
    fn event(&self, me: &ProfilerHandle, event: &Event<'_>) {
        (**self).event(me, event)
    }
    fn image_unloading_v2(&self, me: &ProfilerHandle, image: &ImageEvent<'_>) -> UnloadState {
        (**self).image_unloading_v2(me, image)
    }
    fn image_unloaded_v2(
        &self,
        me: &ProfilerHandle,
        image: &ImageUnloaded<'_>,
        state: UnloadState,
    ) {
        (**self).image_unloaded_v2(me, image, state)
    }
}

/// A listener that removed itself because one of its callbacks panicked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerFault {
    /// The name the listener was registered with.
    pub name: String,
    /// The event whose callback panicked.
    pub kind: EventKind,
    /// The panic message.
    pub message: String,
}

struct Entry {
    id: u64,
    name: Box<str>,
    /// Subscribed kind bits, plus [`REMOVED`]. Changed only under the hub's
    /// write lock so the hub's interest word can be recomputed consistently.
    mask: AtomicU32,
    /// Weak so that a listener holding its own handle cannot keep the hub
    /// alive through a cycle.
    hub: Weak<Hub>,
    listener: Box<dyn Listener>,
}

struct Hub {
    /// Bit `k` set iff some registered listener subscribes to kind `k`.
    interest: AtomicU32,
    /// Registration order; replaced (copy on write) on every change.
    entries: RwLock<Arc<[ProfilerHandle]>>,
    next_id: AtomicU64,
    faults: Mutex<Vec<ListenerFault>>,
}

/// The event hub that producers raise into and profilers register with.
///
/// Cloning is cheap and gives another reference to the same hub. Raising an
/// event that nobody subscribed to costs one relaxed atomic load and a branch.
#[derive(Clone)]
pub struct Profiler {
    hub: Arc<Hub>,
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field(
                "interest",
                &format_args!("{:#x}", self.hub.interest.load(Ordering::Relaxed)),
            )
            .field("listeners", &self.hub.snapshot().len())
            .finish()
    }
}

impl Default for Profiler {
    fn default() -> Self {
        Self::new()
    }
}

/// One registered profiler: subscribe and unsubscribe per kind, or remove it.
///
/// Cloning gives another handle to the same registration. Dropping handles
/// does not unregister (as with Mono's profiler handles): call
/// [`remove`](ProfilerHandle::remove), or drop the [`Profiler`].
///
/// # When changes take effect
///
/// A change made by `subscribe`, `unsubscribe` or `remove` is seen by every
/// raise that starts after the call returned on the same thread, or on a
/// thread synchronized with it. A dispatch already in progress (on this
/// thread, when called from inside a callback, or on another thread) checks
/// each listener's subscription just before calling it, so after
/// `unsubscribe(kind)` returns the listener receives no further `kind`
/// callback that has not already started.
#[derive(Clone)]
pub struct ProfilerHandle {
    entry: Arc<Entry>,
}

impl std::fmt::Debug for ProfilerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfilerHandle")
            .field("name", &self.entry.name)
            .field(
                "mask",
                &format_args!("{:#x}", self.entry.mask.load(Ordering::Relaxed)),
            )
            .finish()
    }
}

/// Carries the "v2" unload states and the start time from
/// [`Profiler::raise_image_unloading`] to [`Profiler::raise_image_unloaded`].
///
/// Dropping it without raising `unloaded` drops the states.
#[must_use = "pass the token to raise_image_unloaded"]
pub struct UnloadToken {
    started: Option<Instant>,
    /// In registration order.
    states: Vec<(ProfilerHandle, UnloadState)>,
}

impl std::fmt::Debug for UnloadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnloadToken")
            .field("started", &self.started)
            .field("states", &self.states.len())
            .finish()
    }
}

impl UnloadToken {
    /// A token for an unload whose `unloading` was not raised (e.g. an
    /// observer attached in between): no state, no start time.
    pub fn unobserved() -> UnloadToken {
        UnloadToken {
            started: None,
            states: Vec::new(),
        }
    }
}

impl Profiler {
    /// A hub with no listeners.
    pub fn new() -> Profiler {
        Profiler {
            hub: Arc::new(Hub {
                interest: AtomicU32::new(0),
                entries: RwLock::new(Arc::from(Vec::new())),
                next_id: AtomicU64::new(0),
                faults: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Register a listener under `name` (used in fault messages). It starts
    /// subscribed to nothing.
    pub fn register(&self, name: impl Into<String>, listener: impl Listener) -> ProfilerHandle {
        let name = name.into().into_boxed_str();
        let listener: Box<dyn Listener> = Box::new(listener);
        // The id is taken under the write lock so that id order is
        // registration order (dispatch_unloaded relies on it). A new listener
        // subscribes to nothing, so the interest word does not change.
        let mut entries = self
            .hub
            .entries
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let handle = ProfilerHandle {
            entry: Arc::new(Entry {
                id: self.hub.next_id.fetch_add(1, Ordering::Relaxed),
                name,
                mask: AtomicU32::new(0),
                hub: Arc::downgrade(&self.hub),
                listener,
            }),
        };
        let mut next = entries.to_vec();
        next.push(handle.clone());
        *entries = Arc::from(next);
        handle
    }

    /// Whether some listener subscribes to `kind`: one relaxed load.
    ///
    /// Use it to skip building an expensive payload nobody will see.
    #[inline(always)]
    pub fn is_interested(&self, kind: EventKind) -> bool {
        self.hub.interest.load(Ordering::Relaxed) & kind.bit() != 0
    }

    /// Raise an event: one relaxed load and a branch when nobody listens,
    /// plus building the payload, which the compiler does not move past the
    /// atomic load. On hot paths prefer [`raise_with`](Profiler::raise_with).
    #[inline(always)]
    pub fn raise(&self, event: Event<'_>) {
        if self.is_interested(event.kind()) {
            self.hub.dispatch(&event);
        }
    }

    /// Raise the event `make` builds, calling it only if someone listens to
    /// `kind`: the form for hot paths, where even building the payload on
    /// the stack is worth skipping.
    ///
    /// `make` should build an event of kind `kind`; if it does not, the
    /// event is still delivered only to listeners of its own kind.
    #[inline(always)]
    pub fn raise_with<'a>(&self, kind: EventKind, make: impl FnOnce() -> Event<'a>) {
        if self.is_interested(kind) {
            self.hub.dispatch(&make());
        }
    }

    /// Raise `image_unloading` (snapshot style) and the first half of the
    /// "v2" pair. Keep the token and hand it to
    /// [`raise_image_unloaded`](Profiler::raise_image_unloaded) for the same
    /// image, after the unloads this one causes.
    #[inline]
    pub fn raise_image_unloading(&self, image: &ImageEvent<'_>) -> UnloadToken {
        let watched = EventKind::ImageUnloading.bit()
            | EventKind::ImageUnloaded.bit()
            | EventKind::ImageUnloadV2.bit();
        if self.hub.interest.load(Ordering::Relaxed) & watched == 0 {
            return UnloadToken::unobserved();
        }
        self.hub.dispatch_unloading(image)
    }

    /// Raise `image_unloaded` (snapshot style, with the measured unload time)
    /// and hand each "v2" listener back its state.
    #[inline]
    pub fn raise_image_unloaded(&self, token: UnloadToken, image: &ImageEvent<'_>) {
        if token.started.is_none()
            && token.states.is_empty()
            && !self.is_interested(EventKind::ImageUnloaded)
        {
            return;
        }
        self.hub.dispatch_unloaded(token, image);
    }

    /// The listeners removed so far because a callback panicked.
    pub fn faults(&self) -> Vec<ListenerFault> {
        self.hub
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many listeners are registered (removed ones excluded).
    pub fn listener_count(&self) -> usize {
        self.hub.snapshot().len()
    }
}

impl Hub {
    fn snapshot(&self) -> Arc<[ProfilerHandle]> {
        // The lock is never held while user code runs, so poisoning can only
        // come from an allocation failure; the data is still consistent.
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Apply a change under the write lock and recompute the interest word.
    /// `change` may return a new list to install.
    fn update(&self, change: impl FnOnce(&[ProfilerHandle]) -> Option<Vec<ProfilerHandle>>) {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(next) = change(&entries) {
            *entries = Arc::from(next);
        }
        let interest = entries
            .iter()
            .map(|h| h.entry.mask.load(Ordering::Relaxed) & !REMOVED)
            .fold(0, |acc, m| acc | m);
        self.interest.store(interest, Ordering::Release);
    }

    /// Call `f` for every listener subscribed to `kind`, in registration
    /// order, isolating panics.
    #[inline(never)]
    fn for_each_subscribed(&self, kind: EventKind, mut f: impl FnMut(&ProfilerHandle)) {
        let bit = kind.bit();
        for handle in self.snapshot().iter() {
            if handle.entry.mask.load(Ordering::Acquire) & bit == 0 {
                continue;
            }
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(handle))) {
                self.remove_after_panic(handle, kind, payload.as_ref());
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn dispatch(&self, event: &Event<'_>) {
        self.for_each_subscribed(event.kind(), |h| h.entry.listener.event(h, event));
    }

    #[cold]
    #[inline(never)]
    fn dispatch_unloading(&self, image: &ImageEvent<'_>) -> UnloadToken {
        let started = Some(Instant::now());
        let snapshot = self.snapshot();
        let mut states = Vec::new();
        let unloading = Event::ImageUnloading(*image);
        for handle in snapshot.iter() {
            let mask = handle.entry.mask.load(Ordering::Acquire);
            if mask & EventKind::ImageUnloading.bit() != 0 {
                let call = AssertUnwindSafe(|| handle.entry.listener.event(handle, &unloading));
                if let Err(payload) = catch_unwind(call) {
                    self.remove_after_panic(handle, EventKind::ImageUnloading, payload.as_ref());
                    continue;
                }
            }
            // Re-read: the snapshot-style callback may have changed it.
            let mask = handle.entry.mask.load(Ordering::Acquire);
            if mask & EventKind::ImageUnloadV2.bit() != 0 {
                let call =
                    AssertUnwindSafe(|| handle.entry.listener.image_unloading_v2(handle, image));
                match catch_unwind(call) {
                    Ok(state) => states.push((handle.clone(), state)),
                    Err(payload) => {
                        self.remove_after_panic(handle, EventKind::ImageUnloadV2, payload.as_ref())
                    }
                }
            }
        }
        UnloadToken { started, states }
    }

    #[cold]
    #[inline(never)]
    fn dispatch_unloaded(&self, token: UnloadToken, image: &ImageEvent<'_>) {
        let unloaded = ImageUnloaded {
            id: image.id,
            image: image.image,
            unload_time: token.started.map(|t| t.elapsed()),
        };
        let event = Event::ImageUnloaded(unloaded);
        let mut states = token.states.into_iter().peekable();
        for handle in self.snapshot().iter() {
            let mask = handle.entry.mask.load(Ordering::Acquire);
            if mask & EventKind::ImageUnloaded.bit() != 0 {
                let call = AssertUnwindSafe(|| handle.entry.listener.event(handle, &event));
                if let Err(payload) = catch_unwind(call) {
                    self.remove_after_panic(handle, EventKind::ImageUnloaded, payload.as_ref());
                }
            }
            // States are in registration order, as is the snapshot; states of
            // listeners removed in between are skipped (and dropped) here.
            while states
                .peek()
                .is_some_and(|(h, _)| h.entry.id < handle.entry.id)
            {
                states.next();
            }
            if states
                .peek()
                .is_some_and(|(h, _)| h.entry.id == handle.entry.id)
                && let Some((_, state)) = states.next()
                && handle.entry.mask.load(Ordering::Acquire) & REMOVED == 0
            {
                let call = AssertUnwindSafe(|| {
                    handle
                        .entry
                        .listener
                        .image_unloaded_v2(handle, &unloaded, state)
                });
                if let Err(payload) = catch_unwind(call) {
                    self.remove_after_panic(handle, EventKind::ImageUnloadV2, payload.as_ref());
                }
            }
        }
    }

    #[cold]
    fn remove_after_panic(
        &self,
        handle: &ProfilerHandle,
        kind: EventKind,
        payload: &(dyn Any + Send),
    ) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_owned());
        if !self.remove(handle) {
            // Another thread's panic already removed and reported it.
            return;
        }
        eprintln!(
            "tcgkit-profiler: profiler \"{}\" panicked in its {} callback ({message}); \
             it has been removed, the other profilers go on",
            handle.entry.name, kind
        );
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ListenerFault {
                name: handle.entry.name.to_string(),
                kind,
                message,
            });
    }

    /// Returns whether the listener was still registered.
    fn remove(&self, handle: &ProfilerHandle) -> bool {
        let mut was_active = false;
        self.update(|entries| {
            was_active = handle.entry.mask.swap(REMOVED, Ordering::AcqRel) & REMOVED == 0;
            let next = entries
                .iter()
                .filter(|h| !Arc::ptr_eq(&h.entry, &handle.entry))
                .cloned()
                .collect();
            Some(next)
        });
        was_active
    }
}

impl ProfilerHandle {
    /// The name this listener was registered with.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// Start receiving `kind`. Returns `false` if this listener was removed
    /// or its [`Profiler`] dropped.
    pub fn subscribe(&self, kind: EventKind) -> bool {
        self.change_mask(|m| m | kind.bit())
    }

    /// Stop receiving `kind` (see the type docs for when it takes effect).
    /// Returns `false` if this listener was removed or its hub dropped.
    pub fn unsubscribe(&self, kind: EventKind) -> bool {
        self.change_mask(|m| m & !kind.bit())
    }

    /// Whether this listener currently receives `kind`.
    pub fn is_subscribed(&self, kind: EventKind) -> bool {
        self.entry.mask.load(Ordering::Acquire) & kind.bit() != 0
    }

    /// Whether this listener is still registered.
    pub fn is_active(&self) -> bool {
        self.entry.mask.load(Ordering::Acquire) & REMOVED == 0 && self.entry.hub.strong_count() > 0
    }

    /// Unregister this listener for good: no callback starts after this
    /// returns, pending "v2" unload states are dropped unheard.
    pub fn remove(&self) {
        if let Some(hub) = self.entry.hub.upgrade() {
            hub.remove(self);
        } else {
            self.entry.mask.store(REMOVED, Ordering::Release);
        }
    }

    fn change_mask(&self, f: impl Fn(u32) -> u32) -> bool {
        let Some(hub) = self.entry.hub.upgrade() else {
            return false;
        };
        let mut ok = false;
        hub.update(|_| {
            let mask = self.entry.mask.load(Ordering::Relaxed);
            if mask & REMOVED == 0 {
                self.entry.mask.store(f(mask), Ordering::Release);
                ok = true;
            }
            None
        });
        ok
    }
}
