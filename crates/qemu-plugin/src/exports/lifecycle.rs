//! Uninstall, reset, and the per-plugin event callbacks: vCPU lifecycle,
//! translation, syscalls, flush, atexit. QEMU keeps one callback per plugin
//! and event (registering again replaces it, NULL removes it), so each
//! event has one dispatcher registered with plugin-api per registration,
//! calling whatever the plugin's slot holds. Version 7 removed the plugin id
//! from every callback and added user data to every registration; the
//! dispatchers call each plugin with the shape of its version.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, PoisonError};

use tcgkit_plugin_api::PluginHandle;

use super::{Udata, plugin_and_handle};
use crate::abi::PluginId;
use crate::plugin::{CPlugin, Event, RawCb};
use crate::trans::Tb;

/// v1-v6 `qemu_plugin_simple_cb_t`.
type IdCb = unsafe extern "C" fn(PluginId);
/// v7 `qemu_plugin_udata_cb_t`; v1-v6 atexit's is [`IdUdataCb`].
type UdataCb = unsafe extern "C" fn(*mut c_void);
/// v1-v6 `qemu_plugin_udata_cb_t`.
type IdUdataCb = unsafe extern "C" fn(PluginId, *mut c_void);
/// v1-v6 `qemu_plugin_vcpu_simple_cb_t`.
type IdVcpuCb = unsafe extern "C" fn(PluginId, c_uint);
/// `qemu_plugin_vcpu_udata_cb_t` (v7's vCPU lifecycle callbacks).
type VcpuUdataCb = unsafe extern "C" fn(c_uint, *mut c_void);
/// v1-v6 `qemu_plugin_vcpu_tb_trans_cb_t`.
type IdTbCb = unsafe extern "C" fn(PluginId, *mut c_void);
/// v7 `qemu_plugin_vcpu_tb_trans_cb_t`.
type TbUdataCb = unsafe extern "C" fn(*mut c_void, *mut c_void);
/// v1-v6 `qemu_plugin_vcpu_syscall_cb_t`.
type IdSyscallCb =
    unsafe extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
/// v7 `qemu_plugin_vcpu_syscall_cb_t`.
type SyscallUdataCb =
    unsafe extern "C" fn(c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64, *mut c_void);
/// v1-v6 `qemu_plugin_vcpu_syscall_ret_cb_t`.
type IdSyscallRetCb = unsafe extern "C" fn(PluginId, c_uint, i64, i64);
/// v7 `qemu_plugin_vcpu_syscall_ret_cb_t`.
type SyscallRetUdataCb = unsafe extern "C" fn(c_uint, i64, i64, *mut c_void);

/// Version 7 callbacks take user data instead of the plugin id.
fn v7(plugin: &CPlugin) -> bool {
    plugin.at_least(7)
}

/// Calls the plugin's completion of a reset or uninstall: `(id)` before
/// version 7, `(userdata)` from it.
fn complete(plugin: &Arc<CPlugin>, cb: Option<RawCb>, udata: Udata) {
    let Some(cb) = cb else { return };
    plugin.enter(|| {
        // SAFETY: `cb` is the plugin's completion, of the type its version
        // declares, called once, as QEMU calls it.
        unsafe {
            if v7(plugin) {
                std::mem::transmute::<RawCb, UdataCb>(cb)(udata.get());
            } else {
                std::mem::transmute::<RawCb, IdCb>(cb)(plugin.id);
            }
        }
    });
}

/// v1-v6: `void qemu_plugin_uninstall(qemu_plugin_id_t, qemu_plugin_simple_cb_t)`;
/// v7: `(qemu_plugin_id_t, qemu_plugin_udata_cb_t, void *userdata)`.
///
/// Takes effect at the next safe point; `cb` runs once, after which no
/// callback of the plugin runs. A request while one is pending is ignored.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_uninstall(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    let Some((plugin, handle)) = plugin_and_handle(id) else {
        return;
    };
    let udata = Udata::new(udata);
    let _ = handle.uninstall(move || complete(&plugin, cb, udata));
}

/// v1-v6: `void qemu_plugin_reset(qemu_plugin_id_t, qemu_plugin_simple_cb_t)`;
/// v7: `(qemu_plugin_id_t, qemu_plugin_udata_cb_t, void *userdata)`.
///
/// Unregisters every callback of the plugin at the next safe point, then
/// runs `cb` once; nothing registered before runs after it.
///
/// # Safety
/// As for [`qemu_plugin_uninstall`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_reset(id: PluginId, cb: Option<RawCb>, udata: *mut c_void) {
    let Some((plugin, handle)) = plugin_and_handle(id) else {
        return;
    };
    let udata = Udata::new(udata);
    let _ = handle.reset(move |_| {
        // Everything is unregistered: the next registrations start anew,
        // with callbacks of their own.
        plugin
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        *plugin.shared.lock().unwrap_or_else(PoisonError::into_inner) = Default::default();
        complete(&plugin, cb, udata);
    });
}

/// Puts `cb` in the plugin's slot for `event`, registering the event's
/// dispatcher with `register` the first time in this registration.
fn set_slot(
    id: PluginId,
    event: Event,
    cb: Option<RawCb>,
    udata: *mut c_void,
    register: impl FnOnce(&PluginHandle, Arc<CPlugin>),
) {
    let Some((plugin, handle)) = plugin_and_handle(id) else {
        return;
    };
    let first = plugin
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .set(event, cb, Udata::new(udata));
    if first {
        register(&handle, plugin);
    }
}

/// The plugin's callback for `event` now.
fn slot(plugin: &CPlugin, event: Event) -> Option<(RawCb, Udata)> {
    plugin
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(event)
}

/// Calls the plugin's vCPU lifecycle callback for `event`.
fn vcpu_event(plugin: &Arc<CPlugin>, event: Event, vcpu: u32) {
    let Some((cb, udata)) = slot(plugin, event) else {
        return;
    };
    plugin.enter(|| {
        // SAFETY: the plugin's callback, of its version's type.
        unsafe {
            if v7(plugin) {
                std::mem::transmute::<RawCb, VcpuUdataCb>(cb)(vcpu, udata.get());
            } else {
                std::mem::transmute::<RawCb, IdVcpuCb>(cb)(plugin.id, vcpu);
            }
        }
    });
}

/// Registers the vCPU lifecycle callback of `event`.
fn vcpu_registration(id: PluginId, event: Event, cb: Option<RawCb>, udata: *mut c_void) {
    set_slot(id, event, cb, udata, |handle, plugin| {
        let dispatch = move |vcpu: u32| vcpu_event(&plugin, event, vcpu);
        match event {
            Event::VcpuInit => handle.on_vcpu_init(dispatch),
            Event::VcpuExit => handle.on_vcpu_exit(dispatch),
            Event::VcpuIdle => handle.on_vcpu_idle(dispatch),
            _ => handle.on_vcpu_resume(dispatch),
        }
    });
}

/// v1-v6: `void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`;
/// v7: `(qemu_plugin_id_t, qemu_plugin_vcpu_udata_cb_t, void *userdata)`.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_init_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    vcpu_registration(id, Event::VcpuInit, cb, udata);
}

/// As [`qemu_plugin_register_vcpu_init_cb`], when a vCPU stops.
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_init_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_exit_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    vcpu_registration(id, Event::VcpuExit, cb, udata);
}

/// As [`qemu_plugin_register_vcpu_init_cb`], when a vCPU goes idle
/// (system mode only in QEMU; an embedder may report it).
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_init_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_idle_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    vcpu_registration(id, Event::VcpuIdle, cb, udata);
}

/// As [`qemu_plugin_register_vcpu_init_cb`], when an idle vCPU resumes.
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_init_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_resume_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    vcpu_registration(id, Event::VcpuResume, cb, udata);
}

/// v1-v6: `void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, qemu_plugin_vcpu_tb_trans_cb_t)`;
/// v7: `(qemu_plugin_id_t, qemu_plugin_vcpu_tb_trans_cb_t, void *userdata)`.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_tb_trans_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    set_slot(id, Event::TbTrans, cb, udata, |handle, plugin| {
        handle.on_tb_trans(move |trans| {
            let Some((cb, udata)) = slot(&plugin, Event::TbTrans) else {
                return;
            };
            Tb::with(trans, Arc::clone(&plugin), |tb| {
                plugin.enter(|| {
                    // SAFETY: the plugin's translation callback, of its
                    // version's type, given a view valid for the call, as
                    // QEMU's `struct qemu_plugin_tb *` is.
                    unsafe {
                        if v7(&plugin) {
                            std::mem::transmute::<RawCb, TbUdataCb>(cb)(tb.cast(), udata.get());
                        } else {
                            std::mem::transmute::<RawCb, IdTbCb>(cb)(plugin.id, tb.cast());
                        }
                    }
                });
            });
        });
    });
}

/// v1-v6: `void qemu_plugin_register_flush_cb(qemu_plugin_id_t, qemu_plugin_simple_cb_t)`;
/// v7: `(qemu_plugin_id_t, qemu_plugin_udata_cb_t, void *userdata)`.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_flush_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    set_slot(id, Event::Flush, cb, udata, |handle, plugin| {
        handle.on_flush(move || {
            if let Some((cb, udata)) = slot(&plugin, Event::Flush) {
                complete(&plugin, Some(cb), udata);
            }
        });
    });
}

/// v1-v6: `void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, qemu_plugin_udata_cb_t, void *)`
/// (the callback takes the id and the user data); v7: the callback takes
/// the user data only.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_atexit_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    set_slot(id, Event::Atexit, cb, udata, |handle, plugin| {
        handle.on_atexit(move || {
            let Some((cb, udata)) = slot(&plugin, Event::Atexit) else {
                return;
            };
            plugin.enter(|| {
                // SAFETY: the plugin's atexit callback, of its version's type.
                unsafe {
                    if v7(&plugin) {
                        std::mem::transmute::<RawCb, UdataCb>(cb)(udata.get());
                    } else {
                        std::mem::transmute::<RawCb, IdUdataCb>(cb)(plugin.id, udata.get());
                    }
                }
            });
        });
    });
}

/// v1-v6: `void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t, qemu_plugin_vcpu_syscall_cb_t)`;
/// v7: `+ void *userdata`. RV64 passes six arguments; the last two are 0.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_syscall_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    set_slot(id, Event::Syscall, cb, udata, |handle, plugin| {
        handle.on_syscall(move |vcpu, number, args| {
            let Some((cb, udata)) = slot(&plugin, Event::Syscall) else {
                return;
            };
            let [a1, a2, a3, a4, a5, a6] = *args;
            let number = number as i64;
            plugin.enter(|| {
                // SAFETY: the plugin's syscall callback, of its version's type.
                unsafe {
                    if v7(&plugin) {
                        std::mem::transmute::<RawCb, SyscallUdataCb>(cb)(
                            vcpu,
                            number,
                            a1,
                            a2,
                            a3,
                            a4,
                            a5,
                            a6,
                            0,
                            0,
                            udata.get(),
                        );
                    } else {
                        std::mem::transmute::<RawCb, IdSyscallCb>(cb)(
                            plugin.id, vcpu, number, a1, a2, a3, a4, a5, a6, 0, 0,
                        );
                    }
                }
            });
        });
    });
}

/// v1-v6: `void qemu_plugin_register_vcpu_syscall_ret_cb(qemu_plugin_id_t, qemu_plugin_vcpu_syscall_ret_cb_t)`;
/// v7: `+ void *userdata`.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_syscall_ret_cb(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    set_slot(id, Event::SyscallRet, cb, udata, |handle, plugin| {
        handle.on_syscall_return(move |vcpu, number, ret| {
            let Some((cb, udata)) = slot(&plugin, Event::SyscallRet) else {
                return;
            };
            plugin.enter(|| {
                // SAFETY: the plugin's syscall-return callback, of its
                // version's type.
                unsafe {
                    if v7(&plugin) {
                        std::mem::transmute::<RawCb, SyscallRetUdataCb>(cb)(
                            vcpu,
                            number as i64,
                            ret as i64,
                            udata.get(),
                        );
                    } else {
                        std::mem::transmute::<RawCb, IdSyscallRetCb>(cb)(
                            plugin.id,
                            vcpu,
                            number as i64,
                            ret as i64,
                        );
                    }
                }
            });
        });
    });
}

/// v1-v6: `void qemu_plugin_vcpu_for_each(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`;
/// v7: `(qemu_plugin_id_t, qemu_plugin_vcpu_udata_cb_t, void *userdata)`.
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of their version's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_vcpu_for_each(
    id: PluginId,
    cb: Option<RawCb>,
    udata: *mut c_void,
) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    for vcpu in handle.online_vcpus() {
        plugin.enter(|| {
            // SAFETY: the plugin's callback, of its version's type, once per
            // vCPU started.
            unsafe {
                if v7(&plugin) {
                    std::mem::transmute::<RawCb, VcpuUdataCb>(cb)(vcpu, udata);
                } else {
                    std::mem::transmute::<RawCb, IdVcpuCb>(cb)(plugin.id, vcpu);
                }
            }
        });
    }
}

/// Says once per plugin and function that a registration is accepted but
/// will deliver nothing.
fn unsupported_once(id: PluginId, what: &str) {
    let Some((plugin, handle)) = plugin_and_handle(id) else {
        return;
    };
    if plugin.warn_once(what) {
        handle.outs(&format!(
            "tcgkit: {}: {what} is not supported; its callback will not be called\n",
            plugin.name
        ));
    }
}

/// v6: `void qemu_plugin_register_vcpu_syscall_filter_cb(qemu_plugin_id_t, qemu_plugin_vcpu_syscall_filter_cb_t)`;
/// v7: `+ void *userdata`. tcgkit runs every syscall: the filter is never
/// asked (said once on the plugin output).
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_register_vcpu_syscall_filter_cb(
    id: PluginId,
    _cb: Option<RawCb>,
    _udata: *mut c_void,
) {
    unsupported_once(id, "qemu_plugin_register_vcpu_syscall_filter_cb");
}

/// v5 (QEMU 10.2): `void qemu_plugin_register_vcpu_discon_cb(qemu_plugin_id_t, enum qemu_plugin_discon_type, qemu_plugin_vcpu_discon_cb_t)`;
/// v7: `+ void *userdata`. tcgkit reports no discontinuities (said once).
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_register_vcpu_discon_cb(
    id: PluginId,
    _kind: c_int,
    _cb: Option<RawCb>,
    _udata: *mut c_void,
) {
    unsupported_once(id, "qemu_plugin_register_vcpu_discon_cb");
}
