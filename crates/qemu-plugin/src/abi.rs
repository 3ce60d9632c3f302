//! The C types of QEMU's plugin API (`qemu-plugin.h`) as the host side
//! sees them. Layouts follow the documented header; where a version changed
//! one, both are here and the caller picks by the plugin's version.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// The oldest and newest `qemu_plugin_version` tcgkit loads.
pub const MIN_VERSION: c_int = 1;
/// See [`MIN_VERSION`].
pub const MAX_VERSION: c_int = 7;

/// `qemu_plugin_id_t`.
pub type PluginId = u64;

/// `qemu_info_t` (the same layout in every version): what
/// `qemu_plugin_install` is told about the emulator.
#[repr(C)]
pub struct QemuInfo {
    /// `target_name`: `"riscv64"`.
    pub target_name: *const c_char,
    /// `version.min`: the oldest API version the host speaks.
    pub version_min: c_int,
    /// `version.cur`: the version the host speaks (the plugin's own here).
    pub version_cur: c_int,
    /// `system_emulation`: false in user mode.
    pub system_emulation: bool,
    /// `system.smp_vcpus` (meaningful in system mode only; 0 here).
    pub smp_vcpus: c_int,
    /// `system.max_vcpus` (likewise).
    pub max_vcpus: c_int,
}

/// `enum qemu_plugin_cb_flags` (`QEMU_PLUGIN_CB_NO_REGS` is 0): reads registers.
pub const CB_R_REGS: c_int = 1;

/// `enum qemu_plugin_mem_rw`.
pub const MEM_R: c_int = 1;
/// Stores (`QEMU_PLUGIN_MEM_RW`, both, is 3).
pub const MEM_W: c_int = 2;

/// `enum qemu_plugin_op` (v1: only this one; v2 added the rest).
pub const INLINE_ADD_U64: c_int = 0;
/// v3+: store the immediate.
pub const INLINE_STORE_U64: c_int = 1;

/// `enum qemu_plugin_cond` (v3+; unsigned comparisons).
pub const COND_NEVER: c_int = 0;
/// Always.
pub const COND_ALWAYS: c_int = 1;
/// Equal.
pub const COND_EQ: c_int = 2;
/// Not equal.
pub const COND_NE: c_int = 3;
/// Less than.
pub const COND_LT: c_int = 4;
/// Less or equal.
pub const COND_LE: c_int = 5;
/// Greater than.
pub const COND_GT: c_int = 6;
/// Greater or equal.
pub const COND_GE: c_int = 7;

/// `qemu_plugin_meminfo_t`: QEMU packs a `MemOpIdx` (the memory operation
/// shifted left by 4, the MMU index in the low 4 bits) and the direction
/// (`qemu_plugin_mem_rw`) shifted left by 16.
pub type MemInfo = u32;

/// `MemOp` bits inside a [`MemInfo`] (after the shift by 4).
pub const MO_SIZE: u32 = 0x07;
/// Sign-extended load.
pub const MO_SIGN: u32 = 0x08;
/// Host-reversed byte order; on a little-endian host, a big-endian access.
pub const MO_BSWAP: u32 = 0x10;

/// Encodes one access the way QEMU does for a little-endian guest on a
/// little-endian host, MMU index 0 (user mode).
#[inline]
pub fn meminfo(size: u8, sign_extended: bool, is_store: bool) -> MemInfo {
    let shift = u32::from(size.max(1).trailing_zeros() as u8) & MO_SIZE;
    let memop = shift | if sign_extended { MO_SIGN } else { 0 };
    let rw = if is_store { MEM_W } else { MEM_R } as u32;
    (memop << 4) | (rw << 16)
}

/// The `MemOp` of a [`MemInfo`].
pub fn memop(info: MemInfo) -> u32 {
    (info & 0xffff) >> 4
}

/// The direction of a [`MemInfo`].
pub fn mem_rw(info: MemInfo) -> u32 {
    info >> 16
}

/// `qemu_plugin_u64` (v2+): an entry of a scoreboard's per-vCPU element,
/// passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct U64Entry {
    /// `struct qemu_plugin_scoreboard *`.
    pub score: *mut c_void,
    /// Byte offset of the `uint64_t` inside the element.
    pub offset: usize,
}

/// `qemu_plugin_reg_descriptor` of versions 2 to 6.
#[repr(C)]
pub struct RegDescriptorV2 {
    /// `struct qemu_plugin_register *handle`.
    pub handle: *mut c_void,
    /// `const char *name`.
    pub name: *const c_char,
    /// `const char *feature` (may be NULL).
    pub feature: *const c_char,
}

/// `qemu_plugin_reg_descriptor` of version 7: one field more.
#[repr(C)]
pub struct RegDescriptorV7 {
    /// As in [`RegDescriptorV2`].
    pub handle: *mut c_void,
    /// As in [`RegDescriptorV2`].
    pub name: *const c_char,
    /// As in [`RegDescriptorV2`].
    pub feature: *const c_char,
    /// True when `qemu_plugin_write_register` cannot change it.
    pub is_readonly: bool,
}

/// `qemu_plugin_mem_value` (v4+), returned by value.
#[repr(C)]
pub struct MemValue {
    /// `enum qemu_plugin_mem_value_type`: 0 U8, 1 U16, 2 U32, 3 U64, 4 U128.
    pub kind: c_int,
    /// The union's low 64 bits (`u8`..`u64`, `u128.low`).
    pub low: u64,
    /// `u128.high`.
    pub high: u64,
}

/// `enum qemu_plugin_hwaddr_operation_result`: `ERROR`.
pub const HWADDR_ERROR: c_int = 1;

/// `qemu_plugin_install`.
pub type InstallFn =
    unsafe extern "C" fn(PluginId, *const QemuInfo, c_int, *mut *mut c_char) -> c_int;
/// `qemu_plugin_vcpu_udata_cb_t` (execution callbacks; the lifecycle
/// callbacks' types, which version 7 changed, are in `exports/lifecycle.rs`).
pub type VcpuUdataCb = unsafe extern "C" fn(c_uint, *mut c_void);
/// `qemu_plugin_vcpu_mem_cb_t`.
pub type MemCb = unsafe extern "C" fn(c_uint, MemInfo, u64, *mut c_void);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_packs_like_qemu() {
        // A sign-extended 4-byte load: MO_32 | MO_SIGN, read.
        let info = meminfo(4, true, false);
        assert_eq!(memop(info) & MO_SIZE, 2);
        assert_ne!(memop(info) & MO_SIGN, 0);
        assert_eq!(memop(info) & MO_BSWAP, 0, "little-endian");
        assert_eq!(mem_rw(info), MEM_R as u32);
        assert_eq!(info & 0xf, 0, "MMU index 0");
        let store = meminfo(8, false, true);
        assert_eq!((memop(store) & MO_SIZE, mem_rw(store)), (3, MEM_W as u32));
        assert_eq!(meminfo(1, false, false), 0x1_0000);
    }

    #[test]
    fn qemu_info_has_the_c_layout() {
        // const char *, two ints, a bool, then the union of two ints.
        assert_eq!(std::mem::offset_of!(QemuInfo, version_min), 8);
        assert_eq!(std::mem::offset_of!(QemuInfo, version_cur), 12);
        assert_eq!(std::mem::offset_of!(QemuInfo, system_emulation), 16);
        assert_eq!(std::mem::offset_of!(QemuInfo, smp_vcpus), 20);
        assert_eq!(std::mem::size_of::<QemuInfo>(), 32);
    }
}
