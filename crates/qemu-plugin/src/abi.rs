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
/// Reads and writes registers.
pub const CB_RW_REGS: c_int = 2;

/// `enum qemu_plugin_mem_rw`.
pub const MEM_R: c_int = 1;
/// Stores (`QEMU_PLUGIN_MEM_RW`, both, is 3).
pub const MEM_W: c_int = 2;

/// `enum qemu_plugin_op` (v1: only this one; v2 added the rest).
pub const INLINE_ADD_U64: c_int = 0;
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

/// `qemu_plugin_install`.
pub type InstallFn =
    unsafe extern "C" fn(PluginId, *const QemuInfo, c_int, *mut *mut c_char) -> c_int;
/// `qemu_plugin_simple_cb_t`.
pub type SimpleCb = unsafe extern "C" fn(PluginId);
/// `qemu_plugin_udata_cb_t` (atexit).
pub type UdataCb = unsafe extern "C" fn(PluginId, *mut c_void);
/// `qemu_plugin_vcpu_simple_cb_t`.
pub type VcpuSimpleCb = unsafe extern "C" fn(PluginId, c_uint);
/// `qemu_plugin_vcpu_udata_cb_t` (execution callbacks).
pub type VcpuUdataCb = unsafe extern "C" fn(c_uint, *mut c_void);
/// `qemu_plugin_vcpu_tb_trans_cb_t`.
pub type TbTransCb = unsafe extern "C" fn(PluginId, *mut c_void);
/// `qemu_plugin_vcpu_mem_cb_t`.
pub type MemCb = unsafe extern "C" fn(c_uint, MemInfo, u64, *mut c_void);
/// `qemu_plugin_vcpu_syscall_cb_t`: id, vCPU, number, then 8 arguments.
pub type SyscallCb =
    unsafe extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
/// `qemu_plugin_vcpu_syscall_ret_cb_t`.
pub type SyscallRetCb = unsafe extern "C" fn(PluginId, c_uint, i64, i64);

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
