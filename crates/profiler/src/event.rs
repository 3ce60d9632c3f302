//! Event kinds and their payloads.
//!
//! Payloads are plain structs (numbers, string slices, borrows of a live
//! [`Image`]) so that producers in any crate can raise them without this
//! crate knowing about translation blocks, plugins or vCPUs.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use tcgkit_image_core::{Image, ImageError};

/// Identifies one load of an image, from `loading` to `unloaded`.
///
/// Image events fed by [`ImageEventBridge`](crate::ImageEventBridge) carry
/// the registry's id (`tcgkit_image_core::ImageId::get`), which is never
/// reused within a registry, so a trace can join the load and unload records
/// of one image by id even when the same file is loaded twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageId(pub u64);

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "image#{}", self.0)
    }
}

/// The kind of an event: what a profiler subscribes to.
///
/// Every kind has its own "is anyone interested" bit, so raising a kind that
/// nobody subscribed to costs one relaxed atomic load and a branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventKind {
    /// An image is about to be opened and parsed.
    ImageLoading,
    /// An image was parsed and registered.
    ImageLoaded,
    /// Opening or parsing an image failed.
    ImageFailed,
    /// An image's last reference was released; unloading starts.
    ImageUnloading,
    /// An image's unload completed (it is still readable in the callback).
    ImageUnloaded,
    /// The "v2" unload pair: [`Listener::image_unloading_v2`] returns state
    /// that is handed back to [`Listener::image_unloaded_v2`].
    ///
    /// [`Listener::image_unloading_v2`]: crate::Listener::image_unloading_v2
    /// [`Listener::image_unloaded_v2`]: crate::Listener::image_unloaded_v2
    ImageUnloadV2,
    /// A translation block was translated.
    TbTranslated,
    /// All translation blocks of a generation were flushed.
    TbFlushed,
    /// Translation blocks overlapping a guest address range were invalidated.
    TbRangeInvalidated,
    /// A plugin was installed.
    PluginInstalled,
    /// A plugin asked for a reset (its callbacks are being replaced).
    PluginReset,
    /// A plugin was uninstalled.
    PluginUninstalled,
    /// A vCPU started executing.
    VcpuStarted,
    /// A vCPU stopped executing.
    VcpuStopped,
    /// The guest made a system call (raised when it returns).
    Syscall,
    /// The guest process exited.
    ProcessExit,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 16] = [
        EventKind::ImageLoading,
        EventKind::ImageLoaded,
        EventKind::ImageFailed,
        EventKind::ImageUnloading,
        EventKind::ImageUnloaded,
        EventKind::ImageUnloadV2,
        EventKind::TbTranslated,
        EventKind::TbFlushed,
        EventKind::TbRangeInvalidated,
        EventKind::PluginInstalled,
        EventKind::PluginReset,
        EventKind::PluginUninstalled,
        EventKind::VcpuStarted,
        EventKind::VcpuStopped,
        EventKind::Syscall,
        EventKind::ProcessExit,
    ];

    /// The interest bit of this kind (at most 31 kinds; bit 31 is reserved).
    #[inline(always)]
    pub(crate) const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// A stable snake_case name, used in traces and messages.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::ImageLoading => "image_loading",
            EventKind::ImageLoaded => "image_loaded",
            EventKind::ImageFailed => "image_failed",
            EventKind::ImageUnloading => "image_unloading",
            EventKind::ImageUnloaded => "image_unloaded",
            EventKind::ImageUnloadV2 => "image_unload_v2",
            EventKind::TbTranslated => "tb_translated",
            EventKind::TbFlushed => "tb_flushed",
            EventKind::TbRangeInvalidated => "tb_range_invalidated",
            EventKind::PluginInstalled => "plugin_installed",
            EventKind::PluginReset => "plugin_reset",
            EventKind::PluginUninstalled => "plugin_uninstalled",
            EventKind::VcpuStarted => "vcpu_started",
            EventKind::VcpuStopped => "vcpu_stopped",
            EventKind::Syscall => "syscall",
            EventKind::ProcessExit => "process_exit",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An event as delivered to [`Listener::event`](crate::Listener::event).
///
/// Borrowed data (images, names, errors) is alive for the whole callback and
/// cannot be kept past it: copy what you need.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// See [`EventKind::ImageLoading`].
    ImageLoading(ImageLoading<'a>),
    /// See [`EventKind::ImageLoaded`].
    ImageLoaded(ImageEvent<'a>),
    /// See [`EventKind::ImageFailed`].
    ImageFailed(ImageFailed<'a>),
    /// See [`EventKind::ImageUnloading`].
    ImageUnloading(ImageEvent<'a>),
    /// See [`EventKind::ImageUnloaded`].
    ImageUnloaded(ImageUnloaded<'a>),
    /// See [`EventKind::TbTranslated`].
    TbTranslated(TbTranslated),
    /// See [`EventKind::TbFlushed`].
    TbFlushed(TbFlushed),
    /// See [`EventKind::TbRangeInvalidated`].
    TbRangeInvalidated(TbRangeInvalidated),
    /// See [`EventKind::PluginInstalled`].
    PluginInstalled(PluginEvent<'a>),
    /// See [`EventKind::PluginReset`].
    PluginReset(PluginEvent<'a>),
    /// See [`EventKind::PluginUninstalled`].
    PluginUninstalled(PluginEvent<'a>),
    /// See [`EventKind::VcpuStarted`].
    VcpuStarted(VcpuEvent),
    /// See [`EventKind::VcpuStopped`].
    VcpuStopped(VcpuEvent),
    /// See [`EventKind::Syscall`].
    Syscall(Syscall),
    /// See [`EventKind::ProcessExit`].
    ProcessExit(ProcessExit),
}

impl Event<'_> {
    /// The kind of this event.
    #[inline(always)]
    pub const fn kind(&self) -> EventKind {
        match self {
            Event::ImageLoading(_) => EventKind::ImageLoading,
            Event::ImageLoaded(_) => EventKind::ImageLoaded,
            Event::ImageFailed(_) => EventKind::ImageFailed,
            Event::ImageUnloading(_) => EventKind::ImageUnloading,
            Event::ImageUnloaded(_) => EventKind::ImageUnloaded,
            Event::TbTranslated(_) => EventKind::TbTranslated,
            Event::TbFlushed(_) => EventKind::TbFlushed,
            Event::TbRangeInvalidated(_) => EventKind::TbRangeInvalidated,
            Event::PluginInstalled(_) => EventKind::PluginInstalled,
            Event::PluginReset(_) => EventKind::PluginReset,
            Event::PluginUninstalled(_) => EventKind::PluginUninstalled,
            Event::VcpuStarted(_) => EventKind::VcpuStarted,
            Event::VcpuStopped(_) => EventKind::VcpuStopped,
            Event::Syscall(_) => EventKind::Syscall,
            Event::ProcessExit(_) => EventKind::ProcessExit,
        }
    }
}

/// An image is about to be opened: only what is known before parsing.
#[derive(Debug, Clone, Copy)]
pub struct ImageLoading<'a> {
    /// The id this load will carry in every later event.
    pub id: ImageId,
    /// The file being opened, when loading from a path.
    pub path: Option<&'a Path>,
    /// The assembly name being resolved, when loading by name.
    pub name: Option<&'a str>,
}

/// A live image: `loaded` and `unloading`.
#[derive(Debug, Clone, Copy)]
pub struct ImageEvent<'a> {
    /// The id of this load.
    pub id: ImageId,
    /// The image, fully readable for the whole callback.
    pub image: &'a Image,
}

/// Opening or parsing an image failed.
#[derive(Debug, Clone, Copy)]
pub struct ImageFailed<'a> {
    /// The id the matching `loading` event carried.
    pub id: ImageId,
    /// The file that was being opened, if known.
    pub path: Option<&'a Path>,
    /// Why it failed.
    pub error: &'a ImageError,
}

/// An image's unload completed; it is still fully readable in the callback.
///
/// This is the "snapshot" style of the unload pair: everything a provider
/// needs (path, MVID, PDB data) is reachable through `image`, alive by
/// construction, so no provider has to read freed data or keep its own copy.
#[derive(Debug, Clone, Copy)]
pub struct ImageUnloaded<'a> {
    /// The id of this load.
    pub id: ImageId,
    /// The image, still fully readable.
    pub image: &'a Image,
    /// Time from the `unloading` event to this one, including the nested
    /// unloads the image's release caused; `None` if nobody listened to the
    /// unload events when `unloading` was raised.
    pub unload_time: Option<Duration>,
}

/// A translation block was translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbTranslated {
    /// The vCPU that translated it.
    pub vcpu: u32,
    /// Guest virtual address of the block's first instruction.
    pub pc: u64,
    /// Guest bytes the block covers.
    pub guest_bytes: u32,
    /// Guest instructions in the block.
    pub insns: u32,
    /// The block-cache generation the block belongs to.
    pub generation: u64,
}

/// All translation blocks of a generation were flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbFlushed {
    /// The generation that was retired.
    pub generation: u64,
    /// How many translation blocks it held.
    pub count: u64,
}

/// Translation blocks overlapping a guest address range were invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbRangeInvalidated {
    /// First guest address of the range.
    pub start: u64,
    /// One past the last guest address of the range.
    pub end: u64,
    /// How many translation blocks were invalidated.
    pub count: u64,
}

/// A plugin lifecycle event: installed, reset or uninstalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginEvent<'a> {
    /// The plugin's id, unique per process.
    pub id: u64,
    /// The plugin's name.
    pub name: &'a str,
}

/// A vCPU started or stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuEvent {
    /// The vCPU index.
    pub vcpu: u32,
}

/// A guest system call, raised when it returns to the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    /// The vCPU that made the call.
    pub vcpu: u32,
    /// The guest's syscall number.
    pub number: u64,
    /// The six argument registers.
    pub args: [u64; 6],
    /// The value returned to the guest (negative errno on failure).
    pub ret: i64,
}

/// The guest process exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessExit {
    /// How it ended.
    pub status: GuestExitStatus,
}

/// How a guest process ended, as a shell would see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestExitStatus {
    /// It called `exit`/`exit_group` with this status.
    Exited(i32),
    /// It was killed by this signal (e.g. 11 for SIGSEGV on a guest fault).
    Signaled(i32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_bit_below_the_reserved_one() {
        let mut seen = 0u32;
        for kind in EventKind::ALL {
            let bit = kind.bit();
            assert_eq!(bit.count_ones(), 1, "{kind}");
            assert_eq!(seen & bit, 0, "{kind} shares a bit");
            assert!(bit < 1 << 31, "{kind} uses the reserved bit");
            seen |= bit;
        }
        assert_eq!(seen.count_ones() as usize, EventKind::ALL.len());
    }

    #[test]
    fn event_reports_its_kind() {
        let ev = Event::TbFlushed(TbFlushed {
            generation: 3,
            count: 9,
        });
        assert_eq!(ev.kind(), EventKind::TbFlushed);
        let ev = Event::ProcessExit(ProcessExit {
            status: GuestExitStatus::Signaled(11),
        });
        assert_eq!(ev.kind().name(), "process_exit");
    }
}
