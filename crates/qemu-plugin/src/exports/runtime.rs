//! What plugins ask at run time: memory-access information, scoreboards
//! (v2+), registers and guest memory (v2+, from inside a callback), the
//! vCPUs, output, the guest program, and the system-mode-only requests,
//! answered as QEMU's user mode answers them.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use tcgkit_plugin_api::{InlineKind, Scoreboard};

use super::current_handle;
use crate::abi::{self, MemInfo};
use crate::context;
use crate::glib::Glib;
use crate::plugin::CPlugin;
use crate::trans::interned;

/// `unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_mem_size_shift(info: MemInfo) -> c_uint {
    abi::memop(info) & abi::MO_SIZE
}

/// `bool qemu_plugin_mem_is_sign_extended(qemu_plugin_meminfo_t)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_mem_is_sign_extended(info: MemInfo) -> bool {
    abi::memop(info) & abi::MO_SIGN != 0
}

/// `bool qemu_plugin_mem_is_big_endian(qemu_plugin_meminfo_t)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_mem_is_big_endian(info: MemInfo) -> bool {
    // On a little-endian host, MO_BSWAP set is a big-endian access.
    abi::memop(info) & abi::MO_BSWAP != 0
}

/// `bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_mem_is_store(info: MemInfo) -> bool {
    abi::mem_rw(info) & abi::MEM_W as u32 != 0
}

/// `struct qemu_plugin_hwaddr *qemu_plugin_get_hwaddr(qemu_plugin_meminfo_t, uint64_t)`:
/// NULL in user mode, as QEMU answers.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_get_hwaddr(_info: MemInfo, _vaddr: u64) -> *mut c_void {
    std::ptr::null_mut()
}

/// `bool qemu_plugin_hwaddr_is_io(const struct qemu_plugin_hwaddr *)`: false in user mode.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_hwaddr_is_io(_haddr: *const c_void) -> bool {
    false
}

/// `uint64_t qemu_plugin_hwaddr_phys_addr(const struct qemu_plugin_hwaddr *)`: 0 in user mode.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_hwaddr_phys_addr(_haddr: *const c_void) -> u64 {
    0
}

/// `const char *qemu_plugin_hwaddr_device_name(const struct qemu_plugin_hwaddr *)`:
/// `"Invalid"` in user mode, as QEMU answers.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_hwaddr_device_name(_haddr: *const c_void) -> *const c_char {
    c"Invalid".as_ptr()
}

// ---------------------------------------------------------------------
// Scoreboards (version 2).
// ---------------------------------------------------------------------

/// What a plugin's `struct qemu_plugin_scoreboard *` points to: a
/// plugin-api scoreboard whose rows are the per-vCPU elements, rounded up to
/// whole 8-byte cells, so inline operations on an entry add to the same
/// cells the plugin reads through `qemu_plugin_scoreboard_find`.
pub(crate) struct CScoreboard {
    board: Arc<Scoreboard>,
    element_size: usize,
}

/// A `qemu_plugin_u64` resolved: its board and where in the element it is.
#[derive(Clone)]
pub(crate) struct ScoreboardEntry {
    board: Arc<Scoreboard>,
    offset: usize,
}

impl ScoreboardEntry {
    /// The entry at byte `offset` of each element of `board`.
    pub(crate) fn new(board: Arc<Scoreboard>, offset: usize) -> ScoreboardEntry {
        ScoreboardEntry { board, offset }
    }

    pub(crate) fn board(&self) -> &Arc<Scoreboard> {
        &self.board
    }

    /// The board slot of an entry at a multiple of 8 bytes (as a `uint64_t`
    /// member of a C struct is); `None` otherwise.
    pub(crate) fn slot(&self) -> Option<usize> {
        self.offset.is_multiple_of(8).then_some(self.offset / 8)
    }

    /// The entry's bytes in `vcpu`'s element.
    fn cell(&self, vcpu: u32) -> Option<*mut u64> {
        let row = self.board.row(vcpu)?;
        if self.offset.checked_add(8)? > row.len() * 8 {
            return None;
        }
        // SAFETY: `offset + 8` lies inside the row (checked above).
        Some(
            unsafe { row.as_ptr().cast::<u8>().add(self.offset) }
                .cast_mut()
                .cast(),
        )
    }

    pub(crate) fn get(&self, vcpu: u32) -> u64 {
        // SAFETY: the cell is inside the row, which the board keeps alive;
        // only this vCPU's thread writes its row (as with QEMU's).
        self.cell(vcpu).map_or(0, |c| unsafe { c.read_unaligned() })
    }

    fn set(&self, vcpu: u32, value: u64) {
        if let Some(c) = self.cell(vcpu) {
            // SAFETY: as in `get`.
            unsafe { c.write_unaligned(value) };
        }
    }

    /// Applies an inline operation to `vcpu`'s entry.
    pub(crate) fn apply(&self, vcpu: u32, kind: InlineKind) {
        match kind {
            InlineKind::Add(imm) => self.set(vcpu, self.get(vcpu).wrapping_add(imm)),
            InlineKind::Store(imm) => self.set(vcpu, imm),
        }
    }
}

/// The scoreboard entry a plugin's `qemu_plugin_u64` designates.
///
/// # Safety
/// `entry.score` is null or a scoreboard `qemu_plugin_scoreboard_new` made
/// and the plugin has not freed.
pub(crate) unsafe fn entry_ref(entry: abi::U64Entry) -> Option<ScoreboardEntry> {
    // SAFETY: the caller's guarantee.
    let score = unsafe { entry.score.cast::<CScoreboard>().as_ref() }?;
    (entry.offset.checked_add(8)? <= score.element_size.div_ceil(8) * 8).then(|| ScoreboardEntry {
        board: Arc::clone(&score.board),
        offset: entry.offset,
    })
}

/// `struct qemu_plugin_scoreboard *qemu_plugin_scoreboard_new(size_t element_size)`:
/// a zeroed element per vCPU.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_scoreboard_new(element_size: usize) -> *mut c_void {
    let vcpus = current_handle().map_or(1, |h| h.guest().vcpus.max(1)) as usize;
    let slots = element_size.max(1).div_ceil(8);
    let score = CScoreboard {
        board: Arc::new(Scoreboard::new(slots, vcpus)),
        element_size,
    };
    Box::into_raw(Box::new(score)).cast()
}

/// `void qemu_plugin_scoreboard_free(struct qemu_plugin_scoreboard *)`.
/// Blocks that still add to it keep its cells alive until they are retired.
///
/// # Safety
/// `score` is null or a scoreboard not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_scoreboard_free(score: *mut c_void) {
    if !score.is_null() {
        // SAFETY: made by `Box::into_raw` in `qemu_plugin_scoreboard_new`,
        // freed once (the caller's guarantee).
        drop(unsafe { Box::from_raw(score.cast::<CScoreboard>()) });
    }
}

/// `void *qemu_plugin_scoreboard_find(struct qemu_plugin_scoreboard *, unsigned int vcpu_index)`:
/// the vCPU's element (NULL past the vCPUs).
///
/// # Safety
/// As for [`qemu_plugin_scoreboard_free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_scoreboard_find(
    score: *mut c_void,
    vcpu: c_uint,
) -> *mut c_void {
    // SAFETY: the caller's guarantee.
    let Some(score) = (unsafe { score.cast::<CScoreboard>().as_ref() }) else {
        return std::ptr::null_mut();
    };
    score
        .board
        .row(vcpu)
        .map_or(std::ptr::null_mut(), |row| row.as_ptr().cast_mut().cast())
}

/// `void qemu_plugin_u64_add(qemu_plugin_u64, unsigned int vcpu_index, uint64_t added)`
///
/// # Safety
/// `entry` belongs to a live scoreboard.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_u64_add(entry: abi::U64Entry, vcpu: c_uint, added: u64) {
    // SAFETY: forwarded.
    if let Some(e) = unsafe { entry_ref(entry) } {
        e.apply(vcpu, InlineKind::Add(added));
    }
}

/// `uint64_t qemu_plugin_u64_get(qemu_plugin_u64, unsigned int vcpu_index)`
///
/// # Safety
/// As for [`qemu_plugin_u64_add`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_u64_get(entry: abi::U64Entry, vcpu: c_uint) -> u64 {
    // SAFETY: forwarded.
    unsafe { entry_ref(entry) }.map_or(0, |e| e.get(vcpu))
}

/// `void qemu_plugin_u64_set(qemu_plugin_u64, unsigned int vcpu_index, uint64_t val)`
///
/// # Safety
/// As for [`qemu_plugin_u64_add`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_u64_set(entry: abi::U64Entry, vcpu: c_uint, val: u64) {
    // SAFETY: forwarded.
    if let Some(e) = unsafe { entry_ref(entry) } {
        e.set(vcpu, val);
    }
}

/// `uint64_t qemu_plugin_u64_sum(qemu_plugin_u64)`: over every vCPU.
///
/// # Safety
/// As for [`qemu_plugin_u64_add`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_u64_sum(entry: abi::U64Entry) -> u64 {
    // SAFETY: forwarded.
    let Some(e) = (unsafe { entry_ref(entry) }) else {
        return 0;
    };
    (0..e.board.vcpus() as u32).fold(0u64, |sum, vcpu| sum.wrapping_add(e.get(vcpu)))
}

// ---------------------------------------------------------------------
// Registers and guest memory (versions 2 to 7).
// ---------------------------------------------------------------------

/// `GArray *qemu_plugin_get_registers(void)`: every readable register as a
/// `qemu_plugin_reg_descriptor` (24 bytes up to version 6, 32 with v7's
/// `is_readonly`), handles being the register's index plus one.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_get_registers() -> *mut c_void {
    let (Some(handle), Ok(glib)) = (current_handle(), Glib::get()) else {
        return std::ptr::null_mut();
    };
    let names = handle.register_names();
    let handles = (1..=names.len()).map(|h| h as *mut c_void);
    if CPlugin::current_at_least(7) {
        let regs: Vec<abi::RegDescriptorV7> = names
            .iter()
            .zip(handles)
            .map(|(name, handle)| abi::RegDescriptorV7 {
                handle,
                name: interned(name),
                feature: std::ptr::null(),
                // tcgkit writes no registers for plugins.
                is_readonly: true,
            })
            .collect();
        glib.array_of(&regs)
    } else {
        let regs: Vec<abi::RegDescriptorV2> = names
            .iter()
            .zip(handles)
            .map(|(name, handle)| abi::RegDescriptorV2 {
                handle,
                name: interned(name),
                feature: std::ptr::null(),
            })
            .collect();
        glib.array_of(&regs)
    }
}

/// v2-v5: `int qemu_plugin_read_register(struct qemu_plugin_register *, GByteArray *buf)`
/// (the size appended, or -1); v6+: returns `bool`. Only from inside a
/// callback registered with register access; the value is appended in the
/// target's byte order (little-endian RV64).
///
/// # Safety
/// `buf` is null or a live `GByteArray`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_read_register(reg: *mut c_void, buf: *mut c_void) -> c_int {
    let as_bool = CPlugin::current_at_least(6);
    let failed = if as_bool { 0 } else { -1 };
    let (Some(handle), Ok(glib)) = (current_handle(), Glib::get()) else {
        return failed;
    };
    let index = (reg as usize).wrapping_sub(1);
    let Some(name) = handle.register_names().get(index) else {
        return failed;
    };
    let Some(value) = context::read_register(name) else {
        return failed;
    };
    let bytes = value.to_le_bytes();
    // SAFETY: the caller's guarantee for `buf`.
    unsafe { glib.byte_array_append(buf, &bytes) };
    if as_bool { 1 } else { bytes.len() as c_int }
}

/// v5: `int qemu_plugin_write_register(struct qemu_plugin_register *, GByteArray *)`;
/// v6+: `bool`. tcgkit does not let plugins change guest registers: it
/// refuses (-1, or false), as QEMU does for a callback without write access.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_write_register(_reg: *mut c_void, _buf: *mut c_void) -> c_int {
    if CPlugin::current_at_least(6) { 0 } else { -1 }
}

/// v4+: `bool qemu_plugin_read_memory_vaddr(uint64_t addr, GByteArray *data, size_t len)`:
/// `len` guest bytes into `data` (resized to `len`), from inside a callback.
///
/// # Safety
/// `data` is null or a live `GByteArray`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_read_memory_vaddr(
    addr: u64,
    data: *mut c_void,
    len: usize,
) -> bool {
    if len == 0 || data.is_null() || len > (1 << 30) {
        return false;
    }
    let Ok(glib) = Glib::get() else {
        return false;
    };
    let mut bytes = vec![0u8; len];
    let read = context::with_context(|ctx| ctx.read_memory(addr, &mut bytes).is_ok());
    if read != Some(true) {
        return false;
    }
    // SAFETY: the caller's guarantee for `data`.
    unsafe {
        glib.byte_array_truncate(data, 0);
        glib.byte_array_append(data, &bytes);
    }
    true
}

/// v5+: `bool qemu_plugin_write_memory_vaddr(uint64_t addr, GByteArray *data)`:
/// refused (false): tcgkit does not let plugins change guest memory.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_write_memory_vaddr(_addr: u64, _data: *mut c_void) -> bool {
    false
}

/// v5+: `enum qemu_plugin_hwaddr_operation_result qemu_plugin_read_memory_hwaddr(uint64_t, GByteArray *, size_t)`:
/// `QEMU_PLUGIN_HWADDR_OPERATION_ERROR` in user mode.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_read_memory_hwaddr(
    _addr: u64,
    _data: *mut c_void,
    _len: usize,
) -> c_int {
    abi::HWADDR_ERROR
}

/// v5+: `qemu_plugin_write_memory_hwaddr`: an error in user mode.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_write_memory_hwaddr(_addr: u64, _data: *mut c_void) -> c_int {
    abi::HWADDR_ERROR
}

/// v5+: `bool qemu_plugin_translate_vaddr(uint64_t vaddr, uint64_t *hwaddr)`:
/// false in user mode.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_translate_vaddr(_vaddr: u64, _hwaddr: *mut u64) -> bool {
    false
}

/// v4+: `qemu_plugin_mem_value qemu_plugin_mem_get_value(qemu_plugin_meminfo_t)`:
/// the value the access of the running memory callback loaded or stored.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_mem_get_value(info: MemInfo) -> abi::MemValue {
    let shift = abi::memop(info) & abi::MO_SIZE;
    let value = context::access().map_or(0, |a| a.value);
    let low = match shift {
        0 => value & 0xff,
        1 => value & 0xffff,
        2 => value & 0xffff_ffff,
        _ => value,
    };
    abi::MemValue {
        kind: shift as c_int,
        low,
        high: 0,
    }
}

/// v6+: `void qemu_plugin_set_pc(uint64_t vaddr)`, which never returns.
/// tcgkit cannot leave a callback that way: the plugin is named and the
/// process aborts, rather than running on with a PC the plugin did not get.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_set_pc(vaddr: u64) -> ! {
    let name = CPlugin::current()
        .map(|p| p.name.clone())
        .unwrap_or_default();
    eprintln!("tcgkit: plugin {name}: qemu_plugin_set_pc({vaddr:#x}) is not supported; aborting");
    std::process::abort()
}

/// v3+: `const void *qemu_plugin_request_time_control(void)`: NULL in user
/// mode, as QEMU answers.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_request_time_control() -> *const c_void {
    std::ptr::null()
}

/// v3+: `void qemu_plugin_update_ns(const void *handle, int64_t time)`:
/// nothing in user mode (QEMU logs "user-mode can't control time").
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_update_ns(_handle: *const c_void, _time: i64) {}

/// v2+: `int qemu_plugin_num_vcpus(void)`: the vCPUs started so far (the
/// highest index plus one; a vCPU that exited still counts, as in QEMU).
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_num_vcpus() -> c_int {
    current_handle().map_or(0, |h| {
        c_int::try_from(h.vcpus_started()).unwrap_or(c_int::MAX)
    })
}

/// `int qemu_plugin_n_vcpus(void)`: -1 in user mode, as QEMU answers.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_n_vcpus() -> c_int {
    -1
}

/// `int qemu_plugin_n_max_vcpus(void)`: -1 in user mode, as QEMU answers.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_n_max_vcpus() -> c_int {
    -1
}

/// `void qemu_plugin_outs(const char *string)`: to the plugin output
/// (`-d plugin`, `-D FILE`, `--plugin-out`).
///
/// # Safety
/// `string` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_outs(string: *const c_char) {
    if string.is_null() {
        return;
    }
    // SAFETY: the caller's guarantee.
    let text = unsafe { CStr::from_ptr(string) }.to_string_lossy();
    match current_handle() {
        Some(handle) => handle.outs(&text),
        None => eprint!("{text}"),
    }
}

/// `bool qemu_plugin_bool_parse(const char *name, const char *val, bool *ret)`:
/// QEMU's spellings of a boolean (`on`/`yes`/`true`/`y`, `off`/`no`/`false`/`n`).
///
/// # Safety
/// `name` and `val` are null or NUL-terminated; `ret` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_bool_parse(
    name: *const c_char,
    val: *const c_char,
    ret: *mut bool,
) -> bool {
    if name.is_null() || val.is_null() || ret.is_null() {
        return false;
    }
    // SAFETY: the caller's guarantee.
    let value = unsafe { CStr::from_ptr(val) }.to_bytes();
    let parsed = match value {
        b"on" | b"yes" | b"true" | b"y" => true,
        b"off" | b"no" | b"false" | b"n" => false,
        _ => return false,
    };
    // SAFETY: the caller's guarantee.
    unsafe { ret.write(parsed) };
    true
}

/// `const char *qemu_plugin_path_to_binary(void)`: a copy the plugin frees
/// with `g_free`, or NULL when the program is not known.
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_path_to_binary() -> *const c_char {
    let program = current_handle().and_then(|h| h.guest().program.clone());
    let (Some(program), Ok(glib)) = (program, Glib::get()) else {
        return std::ptr::null();
    };
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(program.path.as_os_str().as_bytes()).unwrap_or_default();
    glib.strdup(&path)
}

/// `uint64_t qemu_plugin_start_code(void)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_start_code() -> u64 {
    current_handle()
        .and_then(|h| h.guest().program.as_ref().map(|p| p.start_code))
        .unwrap_or(0)
}

/// `uint64_t qemu_plugin_end_code(void)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_end_code() -> u64 {
    current_handle()
        .and_then(|h| h.guest().program.as_ref().map(|p| p.end_code))
        .unwrap_or(0)
}

/// `uint64_t qemu_plugin_entry_code(void)`
#[unsafe(no_mangle)]
pub extern "C" fn qemu_plugin_entry_code() -> u64 {
    current_handle()
        .and_then(|h| h.guest().program.as_ref().map(|p| p.entry))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A C plugin keeps the pointers `qemu_plugin_scoreboard_find` gave it
    /// (QEMU's own plugins do, in their vcpu_init callbacks): a board that
    /// grows rows for vCPUs started later must not move the earlier ones.
    #[test]
    fn elements_found_stay_put_while_later_vcpus_grow_the_board() {
        // No plugin is installing: a board of one row, as for one vCPU.
        let score = qemu_plugin_scoreboard_new(16);
        // SAFETY: `score` is live until freed at the end; each element
        // found is 16 bytes, two u64s, written as a plugin writes them.
        unsafe {
            let first = qemu_plugin_scoreboard_find(score, 0).cast::<u64>();
            *first = 5;
            let later = qemu_plugin_scoreboard_find(score, 40).cast::<u64>();
            assert!(!later.is_null());
            *later.add(1) = 7;
            for vcpu in 1..300 {
                assert!(!qemu_plugin_scoreboard_find(score, vcpu).is_null());
            }
            assert_eq!(qemu_plugin_scoreboard_find(score, 0).cast(), first);
            assert_eq!(qemu_plugin_scoreboard_find(score, 40).cast(), later);
            let second = abi::U64Entry { score, offset: 8 };
            qemu_plugin_u64_add(second, 299, 3);
            qemu_plugin_u64_set(second, 1000, 4);
            assert_eq!((*first, *later.add(1)), (5, 7));
            assert_eq!(qemu_plugin_u64_get(second, 299), 3);
            assert_eq!(qemu_plugin_u64_sum(second), 7 + 3 + 4);
            let head = abi::U64Entry { score, offset: 0 };
            assert_eq!(qemu_plugin_u64_sum(head), 5);
            qemu_plugin_scoreboard_free(score);
        }
    }
}
