//! The execution context of the callback running on this thread, for the
//! functions a plugin calls from inside one (`qemu_plugin_read_register`,
//! `qemu_plugin_read_memory_vaddr`) without passing anything that names it.

use std::cell::Cell;
use std::ffi::c_void;

use tcgkit_plugin_api::{ExecContext, MemAccessInfo};

/// Reads a register by name, outside execution callbacks.
pub type RegisterReader<'a> = &'a dyn Fn(&str) -> Option<u64>;

thread_local! {
    /// What reads the vCPU's registers outside execution callbacks (during
    /// vCPU init, say), or null: a `*const RegisterReader`.
    static READER: Cell<*const c_void> = const { Cell::new(std::ptr::null()) };
    /// The `ExecContext<'_, '_>` of the running callback, or null.
    static CONTEXT: Cell<*mut c_void> = const { Cell::new(std::ptr::null_mut()) };
    /// The access a running memory callback reports, or null.
    static ACCESS: Cell<*const MemAccessInfo> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` (a plugin's execution callback) with `ctx` reachable.
#[inline(always)]
pub(crate) fn within<R>(ctx: &mut ExecContext<'_, '_>, f: impl FnOnce() -> R) -> R {
    let saved = CONTEXT.replace(std::ptr::from_mut(ctx).cast());
    struct Restore(*mut c_void);
    impl Drop for Restore {
        #[inline(always)]
        fn drop(&mut self) {
            CONTEXT.set(self.0);
        }
    }
    let _restore = Restore(saved);
    f()
}

/// Runs `f` (a plugin's memory callback) with `ctx` and `info` reachable.
#[inline(always)]
pub(crate) fn within_mem<R>(
    ctx: &mut ExecContext<'_, '_>,
    info: &MemAccessInfo,
    f: impl FnOnce() -> R,
) -> R {
    let saved = ACCESS.replace(info);
    struct Restore(*const MemAccessInfo);
    impl Drop for Restore {
        #[inline(always)]
        fn drop(&mut self) {
            ACCESS.set(self.0);
        }
    }
    let _restore = Restore(saved);
    within(ctx, f)
}

/// Calls `f` with the running callback's context, if one is running.
pub(crate) fn with_context<R>(f: impl FnOnce(&mut ExecContext<'_, '_>) -> R) -> Option<R> {
    let ctx = CONTEXT.get();
    if ctx.is_null() {
        return None;
    }
    // SAFETY: `within` set the pointer from a `&mut ExecContext` that it
    // borrows for as long as the callback runs, and restores the previous
    // value when it returns; the plugin calls this from inside that
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
    let info = ACCESS.get();
    // SAFETY: set by `within_mem` from a reference alive during the callback.
    unsafe { info.as_ref() }.copied()
}
