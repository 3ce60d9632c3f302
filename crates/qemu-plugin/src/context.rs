//! Which plugin's code is running on this thread and, inside an execution
//! or memory callback, the callback's context, for the functions a plugin
//! calls without passing anything that names them (`qemu_plugin_outs`,
//! `qemu_plugin_read_register`, `qemu_plugin_read_memory_vaddr`, ...).

use std::cell::Cell;
use std::ffi::c_void;

use tcgkit_plugin_api::{ExecContext, MemAccessInfo};

use crate::plugin::CPlugin;

/// Reads a register by name, outside execution callbacks.
pub type RegisterReader<'a> = &'a dyn Fn(&str) -> Option<u64>;

/// What the plugin code running on this thread belongs to: the plugin and,
/// inside an execution or memory callback, the callback's context and
/// access. One record on the stack of the call into the plugin, which one
/// thread-local pointer names: a call into C sets that one pointer,
/// however much the plugin may ask about.
pub(crate) struct Frame {
    /// The plugin whose code runs (see [`crate::plugin::CPlugin::current`]).
    pub(crate) plugin: *const CPlugin,
    /// The `ExecContext<'_, '_>` of the running callback, or null.
    ctx: *mut c_void,
    /// The access a running memory callback reports, or null.
    access: *const MemAccessInfo,
}

thread_local! {
    /// What reads the vCPU's registers outside execution callbacks (during
    /// vCPU init, say), or null: a `*const RegisterReader`.
    static READER: Cell<*const c_void> = const { Cell::new(std::ptr::null()) };
    /// The [`Frame`] of the plugin code running on this thread, or null.
    static FRAME: Cell<*const Frame> = const { Cell::new(std::ptr::null()) };
}

/// Sets `frame` for the duration of `f`, then restores the frame it
/// replaced (also if `f` unwinds).
#[inline(always)]
fn with_frame<R>(frame: &Frame, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Frame);
    impl Drop for Restore {
        #[inline(always)]
        fn drop(&mut self) {
            FRAME.set(self.0);
        }
    }
    let _restore = Restore(FRAME.replace(frame));
    f()
}

/// Runs `f`, a call into `plugin`'s code other than an execution or memory
/// callback (install, a lifecycle or translation callback, a completion),
/// with `plugin` current. The context and access of a callback it is
/// nested in stay reachable, as they were.
pub(crate) fn enter<R>(plugin: *const CPlugin, f: impl FnOnce() -> R) -> R {
    // SAFETY: a non-null frame is alive while it is set (`with_frame`).
    let (ctx, access) = unsafe { FRAME.get().as_ref() }
        .map_or((std::ptr::null_mut(), std::ptr::null()), |outer| {
            (outer.ctx, outer.access)
        });
    with_frame(
        &Frame {
            plugin,
            ctx,
            access,
        },
        f,
    )
}

/// Runs `f`, `plugin`'s execution or memory callback, with `plugin`
/// current, the callback's context reachable if `ctx` is given (see
/// `imports.rs` for when it is not), and the access a memory callback
/// reports. Its frame is set, then cleared: such a callback is called by
/// the engine's block loops, and no call into a plugin runs guest code,
/// so no other frame is current when it starts (loading the one it would
/// restore cost 0.2 ns per call of QEMU's instruction counter). A call
/// into the plugin nested inside it restores this frame when it returns
/// (`enter`).
#[inline(always)]
pub(crate) fn within<R>(
    plugin: *const CPlugin,
    ctx: Option<&mut ExecContext<'_, '_>>,
    access: Option<&MemAccessInfo>,
    f: impl FnOnce() -> R,
) -> R {
    let frame = Frame {
        plugin,
        ctx: ctx.map_or(std::ptr::null_mut(), |ctx| std::ptr::from_mut(ctx).cast()),
        access: access.map_or(std::ptr::null(), std::ptr::from_ref),
    };
    debug_assert!(
        FRAME.get().is_null(),
        "an execution callback inside a call into a plugin"
    );
    struct Clear;
    impl Drop for Clear {
        #[inline(always)]
        fn drop(&mut self) {
            FRAME.set(std::ptr::null());
        }
    }
    FRAME.set(&frame);
    let _clear = Clear;
    f()
}

/// The frame of the plugin code running on this thread, if any.
pub(crate) fn frame<'a>() -> Option<&'a Frame> {
    // SAFETY: a non-null frame is alive while it is set, and it is set
    // only while the call that made it runs, which the caller is inside.
    unsafe { FRAME.get().as_ref() }
}

/// Calls `f` with the running callback's context, if one is running.
pub(crate) fn with_context<R>(f: impl FnOnce(&mut ExecContext<'_, '_>) -> R) -> Option<R> {
    let ctx = frame()?.ctx;
    if ctx.is_null() {
        return None;
    }
    // SAFETY: `within` set the pointer from a `&mut ExecContext` that it
    // borrows for as long as the callback runs, and its frame is current
    // only until it returns; the plugin calls this from inside that
    // callback, on the same thread, while nothing else uses the context.
    Some(f(unsafe { &mut *ctx.cast::<ExecContext<'_, '_>>() }))
}

/// Runs `f` with `read` answering register reads made outside execution
/// callbacks: QEMU lets every non-execution callback (vCPU init, syscalls,
/// translation) read the vCPU's registers, and an embedder that can see
/// them then says so, e.g. around `PluginHost::vcpu_init`.
pub fn with_registers<R>(read: RegisterReader<'_>, f: impl FnOnce() -> R) -> R {
    let saved = READER.replace(std::ptr::from_ref(&read).cast());
    struct Restore(*const c_void);
    impl Drop for Restore {
        fn drop(&mut self) {
            READER.set(self.0);
        }
    }
    let _restore = Restore(saved);
    f()
}

/// Reads register `name` of the running callback's vCPU: through its
/// execution context if it has one, else through the embedder's reader.
pub(crate) fn read_register(name: &str) -> Option<u64> {
    if let Some(result) = with_context(|ctx| ctx.read_register(name)) {
        return result.ok();
    }
    let reader = READER.get();
    if reader.is_null() {
        return None;
    }
    // SAFETY: `with_registers` set it to a reference that lives until it
    // restores the previous value, on this thread.
    let read = unsafe { *reader.cast::<RegisterReader<'_>>() };
    read(name)
}

/// The access the running memory callback reports, if one is running.
pub(crate) fn access() -> Option<MemAccessInfo> {
    let info = frame()?.access;
    // SAFETY: set by `within` from a reference alive during the callback.
    unsafe { info.as_ref() }.copied()
}
