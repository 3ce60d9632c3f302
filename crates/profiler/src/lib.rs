//! Mono-style profiler events for tcgkit: zero cost when nobody listens,
//! EventPipe-style module records, and Chrome-trace / JSON Lines sinks.
//!
//! # The pieces
//!
//! * [`Profiler`]: the hub producers raise [`Event`]s into. Each kind has an
//!   "is anyone interested" bit; raising a kind nobody subscribed to costs
//!   one relaxed atomic load and a branch ([`Profiler::raise_with`] builds
//!   the payload only when someone listens; `bench/benches/profiler.rs`
//!   measures both forms against a loop with no profiler call).
//! * [`Listener`] + [`ProfilerHandle`]: several profilers at once, each
//!   registered under a name, subscribing and unsubscribing per
//!   [`EventKind`] at any time, also from inside their own callbacks. A
//!   panicking callback is caught, its listener removed with a message
//!   naming it ([`Profiler::faults`]), and the others go on.
//! * Payloads are plain structs ([`TbFlushed`], [`Syscall`], [`PluginEvent`],
//!   ...) so that tcg-core, plugin-api and linux-user can raise them without
//!   this crate depending on them. Image events borrow a live
//!   [`Image`](tcgkit_image_core::Image).
//! * The unload pair comes in two styles, because of the Mono bug this
//!   project exists to prevent (an `image_unloaded` provider reading freed
//!   image data): the **snapshot** style, where `image_unloaded` gets the
//!   still-alive image plus the measured unload time ([`ImageUnloaded`]), and
//!   the **v2** style ([`EventKind::ImageUnloadV2`]), where what a listener
//!   returns from [`Listener::image_unloading_v2`] is handed back to
//!   [`Listener::image_unloaded_v2`].
//! * [`ImageEventBridge`]: an image-core
//!   [`LifecycleObserver`](tcgkit_image_core::LifecycleObserver) that raises
//!   the image events; [`ModuleRecord`]: the `ModuleLoad_V2` /
//!   `ModuleUnload_V2` fields of an image (mapping documented there).
//! * [`TraceSession`]: writes every event to a Chrome trace (Perfetto UI,
//!   chrome://tracing) or JSON Lines, streaming or buffered, and is complete
//!   on every exit path that calls [`TraceSession::finish`] or drops it.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use tcgkit_profiler::{Event, EventKind, Listener, Profiler, ProfilerHandle, TbFlushed};
//!
//! /// Counts flushed blocks; stops listening after the first big flush.
//! struct FlushCounter(AtomicU64);
//!
//! impl Listener for FlushCounter {
//!     fn event(&self, me: &ProfilerHandle, event: &Event<'_>) {
//!         if let Event::TbFlushed(flush) = event {
//!             self.0.fetch_add(flush.count, Ordering::Relaxed);
//!             if flush.count > 100 {
//!                 me.unsubscribe(EventKind::TbFlushed);
//!             }
//!         }
//!     }
//! }
//!
//! let profiler = Profiler::new();
//! // Nobody listens yet: this raise is a load and a branch.
//! profiler.raise(Event::TbFlushed(TbFlushed { generation: 0, count: 1 }));
//!
//! let counter = Arc::new(FlushCounter(AtomicU64::new(0)));
//! let handle = profiler.register("flush-counter", counter.clone());
//! handle.subscribe(EventKind::TbFlushed);
//! for count in [10, 500, 20] {
//!     profiler.raise(Event::TbFlushed(TbFlushed { generation: 1, count }));
//! }
//! // 10 and 500 were seen; the unsubscribe inside the callback hid 20.
//! assert_eq!(counter.0.load(Ordering::Relaxed), 510);
//! assert!(!profiler.is_interested(EventKind::TbFlushed));
//! ```
//!
//! Tracing an image registry to a file (what `tcgkit images --trace FILE`
//! does):
//!
//! ```
//! use std::path::Path;
//! use tcgkit_image_core::ImageRegistry;
//! use tcgkit_profiler::{TraceFormat, TraceSession};
//!
//! let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies");
//! let out = std::env::temp_dir().join(format!("tcgkit-lib-doc-{}.jsonl", std::process::id()));
//! let session = TraceSession::create(&out, TraceFormat::from_extension(&out)?)?;
//! let mut registry = ImageRegistry::new();
//! registry.add_search_path(&fixtures);
//! registry.add_observer(session.image_observer());
//! let west = registry.load(&fixtures.join("I18N.West.dll"))?;
//! registry.close(west)?; // unloading I18N.West, then I18N, unloaded I18N, unloaded I18N.West
//! session.finish()?;
//! let trace = std::fs::read_to_string(&out)?;
//! assert_eq!(trace.lines().filter(|l| l.contains("\"image_unloaded\"")).count(), 2);
//! # std::fs::remove_file(&out)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod bridge;
mod dispatch;
mod event;
mod module;
mod trace;

pub use bridge::ImageEventBridge;
pub use dispatch::{Listener, ListenerFault, Profiler, ProfilerHandle, UnloadState, UnloadToken};
pub use event::{
    Event, EventKind, GuestExitStatus, ImageEvent, ImageFailed, ImageId, ImageLoading,
    ImageUnloaded, PluginEvent, ProcessExit, Syscall, TbFlushed, TbRangeInvalidated, TbTranslated,
    VcpuEvent,
};
pub use module::{MONO_CLR_INSTANCE_ID, ModuleFlags, ModuleRecord};
pub use trace::{TraceError, TraceFormat, TraceMode, TraceSession, TraceSummary};
