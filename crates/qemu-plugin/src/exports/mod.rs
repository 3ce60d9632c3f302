//! The host side of the ABI: every `qemu_plugin_*` function a plugin calls,
//! exported from the executable (see `build.rs`). Each has the C signature
//! of the API version that introduced it; where a later version changed a
//! signature, the function takes the union of the arguments and answers as
//! the calling plugin's declared version says: functions that take an id
//! know the plugin from it, the others from the plugin whose code is
//! running on this thread (every call into a plugin is made through
//! `CPlugin::enter`), so plugins of different versions share one process.
//! An older caller leaves the extra trailing arguments as unused registers
//! and ignores what it did not ask for (the SysV x86-64 and AArch64 calling
//! conventions allow both).
//!
//! Every function checks its pointers for null and its plugin ids, and
//! answers as QEMU's user mode does where a request only makes sense in
//! system mode.
//!
//! - `lifecycle.rs`: uninstall, reset, vCPU, flush, atexit, syscall and
//!   translation registration (the v7 user-data shapes included).
//! - `translation.rs`: block and instruction queries, and what attaches to
//!   them: execution, memory, inline and conditional callbacks.
//! - `runtime.rs`: memory-access information, scoreboards, registers,
//!   guest memory, vCPUs, output, the guest program, time.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tcgkit_plugin_api::{Access, MemFilter, PluginHandle};

use crate::abi::{self, PluginId};
use crate::plugin::CPlugin;

mod lifecycle;
mod runtime;
mod translation;

pub use lifecycle::*;
pub use runtime::*;
pub use translation::*;
pub(crate) use translation::{ExecCall, MemCall};

/// A pointer the plugin gave with a callback, handed back to it untouched.
#[derive(Clone, Copy)]
pub(crate) struct Udata(*mut c_void);
// SAFETY: the host never dereferences it; it is the plugin's to use from
// whichever vCPU thread calls back, exactly as under QEMU.
unsafe impl Send for Udata {}
// SAFETY: as above.
unsafe impl Sync for Udata {}

impl Udata {
    pub(crate) fn new(ptr: *mut c_void) -> Udata {
        Udata(ptr)
    }

    /// The pointer (a method, so closures capture the whole `Udata`).
    pub(crate) fn get(self) -> *mut c_void {
        self.0
    }
}

/// Makes sure the exported functions are linked into the executable: the
/// linker drops archive members nothing refers to, and only what is linked
/// can be exported. Called by the loader.
pub(crate) fn keep_linked() {
    for export in EXPORTED {
        std::hint::black_box(export.1);
    }
}

/// The plugin `id` and its plugin-api handle, when both exist.
pub(crate) fn plugin_and_handle(id: PluginId) -> Option<(Arc<CPlugin>, PluginHandle)> {
    let plugin = CPlugin::by_id(id)?;
    let handle = plugin.handle()?.clone();
    Some((plugin, handle))
}

/// The plugin-api handle of the plugin whose code is running.
pub(crate) fn current_handle() -> Option<PluginHandle> {
    CPlugin::current().and_then(|p| p.handle().cloned())
}

/// `Access` for QEMU's `qemu_plugin_cb_flags`.
pub(crate) fn access(flags: c_int) -> Access {
    if flags >= abi::CB_R_REGS {
        Access::REGISTERS | Access::MEMORY
    } else {
        Access::MEMORY
    }
}

/// `MemFilter` for QEMU's `qemu_plugin_mem_rw`.
pub(crate) fn mem_filter(rw: c_int) -> MemFilter {
    match rw {
        abi::MEM_R => MemFilter::Reads,
        abi::MEM_W => MemFilter::Writes,
        _ => MemFilter::All,
    }
}

/// One exported function: its name and address.
pub(crate) struct Export(pub(crate) &'static str, pub(crate) *const ());
// SAFETY: a function's address, never written or called through here.
unsafe impl Sync for Export {}

/// Every exported function, named: what keeps them all linked, and what
/// the export test checks the executable's dynamic symbols against.
pub(crate) static EXPORTED: &[Export] = &[
    Export("qemu_plugin_uninstall", qemu_plugin_uninstall as *const ()),
    Export("qemu_plugin_reset", qemu_plugin_reset as *const ()),
    Export(
        "qemu_plugin_register_vcpu_init_cb",
        qemu_plugin_register_vcpu_init_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_exit_cb",
        qemu_plugin_register_vcpu_exit_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_idle_cb",
        qemu_plugin_register_vcpu_idle_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_resume_cb",
        qemu_plugin_register_vcpu_resume_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_tb_trans_cb",
        qemu_plugin_register_vcpu_tb_trans_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_flush_cb",
        qemu_plugin_register_flush_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_atexit_cb",
        qemu_plugin_register_atexit_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_syscall_cb",
        qemu_plugin_register_vcpu_syscall_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_syscall_ret_cb",
        qemu_plugin_register_vcpu_syscall_ret_cb as *const (),
    ),
    Export(
        "qemu_plugin_vcpu_for_each",
        qemu_plugin_vcpu_for_each as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_syscall_filter_cb",
        qemu_plugin_register_vcpu_syscall_filter_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_discon_cb",
        qemu_plugin_register_vcpu_discon_cb as *const (),
    ),
    Export(
        "qemu_plugin_tb_n_insns",
        qemu_plugin_tb_n_insns as *const (),
    ),
    Export("qemu_plugin_tb_vaddr", qemu_plugin_tb_vaddr as *const ()),
    Export(
        "qemu_plugin_tb_get_insn",
        qemu_plugin_tb_get_insn as *const (),
    ),
    Export("qemu_plugin_insn_data", qemu_plugin_insn_data as *const ()),
    Export("qemu_plugin_insn_size", qemu_plugin_insn_size as *const ()),
    Export(
        "qemu_plugin_insn_vaddr",
        qemu_plugin_insn_vaddr as *const (),
    ),
    Export(
        "qemu_plugin_insn_haddr",
        qemu_plugin_insn_haddr as *const (),
    ),
    Export(
        "qemu_plugin_insn_disas",
        qemu_plugin_insn_disas as *const (),
    ),
    Export(
        "qemu_plugin_insn_symbol",
        qemu_plugin_insn_symbol as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_tb_exec_cb",
        qemu_plugin_register_vcpu_tb_exec_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_insn_exec_cb",
        qemu_plugin_register_vcpu_insn_exec_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_mem_cb",
        qemu_plugin_register_vcpu_mem_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_tb_exec_inline",
        qemu_plugin_register_vcpu_tb_exec_inline as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_insn_exec_inline",
        qemu_plugin_register_vcpu_insn_exec_inline as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_mem_inline",
        qemu_plugin_register_vcpu_mem_inline as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu",
        qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu",
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_mem_inline_per_vcpu",
        qemu_plugin_register_vcpu_mem_inline_per_vcpu as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_tb_exec_cond_cb",
        qemu_plugin_register_vcpu_tb_exec_cond_cb as *const (),
    ),
    Export(
        "qemu_plugin_register_vcpu_insn_exec_cond_cb",
        qemu_plugin_register_vcpu_insn_exec_cond_cb as *const (),
    ),
    Export(
        "qemu_plugin_mem_size_shift",
        qemu_plugin_mem_size_shift as *const (),
    ),
    Export(
        "qemu_plugin_mem_is_sign_extended",
        qemu_plugin_mem_is_sign_extended as *const (),
    ),
    Export(
        "qemu_plugin_mem_is_big_endian",
        qemu_plugin_mem_is_big_endian as *const (),
    ),
    Export(
        "qemu_plugin_mem_is_store",
        qemu_plugin_mem_is_store as *const (),
    ),
    Export(
        "qemu_plugin_get_hwaddr",
        qemu_plugin_get_hwaddr as *const (),
    ),
    Export(
        "qemu_plugin_hwaddr_is_io",
        qemu_plugin_hwaddr_is_io as *const (),
    ),
    Export(
        "qemu_plugin_hwaddr_phys_addr",
        qemu_plugin_hwaddr_phys_addr as *const (),
    ),
    Export(
        "qemu_plugin_hwaddr_device_name",
        qemu_plugin_hwaddr_device_name as *const (),
    ),
    Export(
        "qemu_plugin_scoreboard_new",
        qemu_plugin_scoreboard_new as *const (),
    ),
    Export(
        "qemu_plugin_scoreboard_free",
        qemu_plugin_scoreboard_free as *const (),
    ),
    Export(
        "qemu_plugin_scoreboard_find",
        qemu_plugin_scoreboard_find as *const (),
    ),
    Export("qemu_plugin_u64_add", qemu_plugin_u64_add as *const ()),
    Export("qemu_plugin_u64_get", qemu_plugin_u64_get as *const ()),
    Export("qemu_plugin_u64_set", qemu_plugin_u64_set as *const ()),
    Export("qemu_plugin_u64_sum", qemu_plugin_u64_sum as *const ()),
    Export(
        "qemu_plugin_get_registers",
        qemu_plugin_get_registers as *const (),
    ),
    Export(
        "qemu_plugin_read_register",
        qemu_plugin_read_register as *const (),
    ),
    Export(
        "qemu_plugin_write_register",
        qemu_plugin_write_register as *const (),
    ),
    Export(
        "qemu_plugin_read_memory_vaddr",
        qemu_plugin_read_memory_vaddr as *const (),
    ),
    Export(
        "qemu_plugin_write_memory_vaddr",
        qemu_plugin_write_memory_vaddr as *const (),
    ),
    Export(
        "qemu_plugin_read_memory_hwaddr",
        qemu_plugin_read_memory_hwaddr as *const (),
    ),
    Export(
        "qemu_plugin_write_memory_hwaddr",
        qemu_plugin_write_memory_hwaddr as *const (),
    ),
    Export(
        "qemu_plugin_translate_vaddr",
        qemu_plugin_translate_vaddr as *const (),
    ),
    Export(
        "qemu_plugin_mem_get_value",
        qemu_plugin_mem_get_value as *const (),
    ),
    Export("qemu_plugin_set_pc", qemu_plugin_set_pc as *const ()),
    Export(
        "qemu_plugin_request_time_control",
        qemu_plugin_request_time_control as *const (),
    ),
    Export("qemu_plugin_update_ns", qemu_plugin_update_ns as *const ()),
    Export("qemu_plugin_num_vcpus", qemu_plugin_num_vcpus as *const ()),
    Export("qemu_plugin_n_vcpus", qemu_plugin_n_vcpus as *const ()),
    Export(
        "qemu_plugin_n_max_vcpus",
        qemu_plugin_n_max_vcpus as *const (),
    ),
    Export("qemu_plugin_outs", qemu_plugin_outs as *const ()),
    Export(
        "qemu_plugin_bool_parse",
        qemu_plugin_bool_parse as *const (),
    ),
    Export(
        "qemu_plugin_path_to_binary",
        qemu_plugin_path_to_binary as *const (),
    ),
    Export(
        "qemu_plugin_start_code",
        qemu_plugin_start_code as *const (),
    ),
    Export("qemu_plugin_end_code", qemu_plugin_end_code as *const ()),
    Export(
        "qemu_plugin_entry_code",
        qemu_plugin_entry_code as *const (),
    ),
];

/// The names of every exported function.
pub fn exported_names() -> impl Iterator<Item = &'static str> {
    EXPORTED.iter().map(|e| e.0)
}
