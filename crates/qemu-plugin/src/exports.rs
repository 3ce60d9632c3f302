//! The host side of the ABI: every `qemu_plugin_*` function a plugin calls,
//! exported from the executable (see `build.rs`) with the C signature of
//! the API version that introduced it. Where a later version changed a
//! signature, the function takes the union of the arguments and answers as
//! the calling plugin's declared version says (extra integer arguments of
//! an older caller are unused registers; an older caller ignores what it
//! did not ask for).
//!
//! Every function checks its pointers for null and its plugin ids, and
//! answers as QEMU's user mode does where a request only makes sense in
//! system mode.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use tcgkit_plugin_api::{Access, ExecContext, MemFilter, PluginHandle};

use crate::abi::{self, MemCb, MemInfo, PluginId, SimpleCb, TbTransCb, UdataCb, VcpuUdataCb};
use crate::context;
use crate::glib::Glib;
use crate::plugin::CPlugin;
use crate::trans::{Insn, Tb, interned};

/// A pointer the plugin gave with a callback, handed back to it untouched.
#[derive(Clone, Copy)]
pub(crate) struct Udata(pub(crate) *mut c_void);
// SAFETY: the host never dereferences it; it is the plugin's to use from
// whichever vCPU thread calls back, exactly as under QEMU.
unsafe impl Send for Udata {}
// SAFETY: as above.
unsafe impl Sync for Udata {}

impl Udata {
    /// The pointer (a method, so closures capture the whole `Udata`).
    pub(crate) fn get(self) -> *mut c_void {
        self.0
    }
}

/// Makes sure the exported functions are linked into the executable: the
/// linker drops archive members nothing refers to, and only what is linked
/// can be exported. Called by the loader.
pub(crate) fn keep_linked() {
    std::hint::black_box(EXPORTED.len());
}

/// The plugin `id` and its plugin-api handle, when both exist.
fn plugin_and_handle(id: PluginId) -> Option<(Arc<CPlugin>, PluginHandle)> {
    let plugin = CPlugin::by_id(id)?;
    let handle = plugin.handle()?.clone();
    Some((plugin, handle))
}

/// `Access` for QEMU's `qemu_plugin_cb_flags`.
fn access(flags: c_int) -> Access {
    match flags {
        abi::CB_R_REGS | abi::CB_RW_REGS => Access::REGISTERS | Access::MEMORY,
        _ => Access::MEMORY,
    }
}

/// `MemFilter` for QEMU's `qemu_plugin_mem_rw`.
fn mem_filter(rw: c_int) -> MemFilter {
    match rw {
        abi::MEM_R => MemFilter::Reads,
        abi::MEM_W => MemFilter::Writes,
        _ => MemFilter::All,
    }
}

/// An execution callback calling the plugin's `cb(vcpu, udata)`.
fn exec_callback(
    plugin: &Arc<CPlugin>,
    cb: VcpuUdataCb,
    udata: Udata,
) -> impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static {
    let plugin = Arc::clone(plugin);
    move |ctx| {
        let vcpu = ctx.vcpu();
        context::within(ctx, || {
            // SAFETY: `cb` is the plugin's function of this type, called
            // with the vCPU index and the plugin's own pointer, as QEMU does.
            plugin.enter(|| unsafe { cb(vcpu, udata.get()) });
        });
    }
}

// ---------------------------------------------------------------------
// Lifecycle and registration (version 1).
// ---------------------------------------------------------------------

/// `void qemu_plugin_uninstall(qemu_plugin_id_t id, qemu_plugin_simple_cb_t cb)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_uninstall(id: PluginId, cb: Option<SimpleCb>) {
    let Some((plugin, handle)) = plugin_and_handle(id) else {
        return;
    };
    let _ = handle.uninstall(move || {
        if let Some(cb) = cb {
            // SAFETY: the plugin's completion, called once with its id.
            plugin.enter(|| unsafe { cb(plugin.id) });
        }
    });
}

/// `void qemu_plugin_reset(qemu_plugin_id_t id, qemu_plugin_simple_cb_t cb)`
///
/// # Safety
/// As for [`qemu_plugin_uninstall`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_reset(id: PluginId, cb: Option<SimpleCb>) {
    let Some((plugin, handle)) = plugin_and_handle(id) else {
        return;
    };
    let _ = handle.reset(move |_| {
        if let Some(cb) = cb {
            // SAFETY: the plugin's completion, called once with its id.
            plugin.enter(|| unsafe { cb(plugin.id) });
        }
    });
}

/// Registers a vCPU lifecycle callback `cb(id, vcpu)` with `register`.
fn vcpu_callback(
    id: PluginId,
    cb: Option<abi::VcpuSimpleCb>,
    register: impl FnOnce(&PluginHandle, Box<dyn Fn(u32) + Send + Sync>),
) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    register(
        &handle,
        Box::new(move |vcpu| {
            // SAFETY: the plugin's vCPU callback, with its id and the index.
            plugin.enter(|| unsafe { cb(plugin.id, vcpu) });
        }),
    );
}

/// `void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_init_cb(
    id: PluginId,
    cb: Option<abi::VcpuSimpleCb>,
) {
    vcpu_callback(id, cb, |h, f| h.on_vcpu_init(f));
}

/// `void qemu_plugin_register_vcpu_exit_cb(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_init_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_exit_cb(
    id: PluginId,
    cb: Option<abi::VcpuSimpleCb>,
) {
    vcpu_callback(id, cb, |h, f| h.on_vcpu_exit(f));
}

/// `void qemu_plugin_register_vcpu_idle_cb(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_init_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_idle_cb(
    id: PluginId,
    cb: Option<abi::VcpuSimpleCb>,
) {
    vcpu_callback(id, cb, |h, f| h.on_vcpu_idle(f));
}

/// `void qemu_plugin_register_vcpu_resume_cb(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_init_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_resume_cb(
    id: PluginId,
    cb: Option<abi::VcpuSimpleCb>,
) {
    vcpu_callback(id, cb, |h, f| h.on_vcpu_resume(f));
}

/// `void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, qemu_plugin_vcpu_tb_trans_cb_t)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_tb_trans_cb(
    id: PluginId,
    cb: Option<TbTransCb>,
) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    handle.on_tb_trans(move |trans| {
        Tb::with(trans, Arc::clone(&plugin), |tb| {
            // SAFETY: the plugin's translation callback, given a view valid
            // for the call, as QEMU's `struct qemu_plugin_tb *` is.
            plugin.enter(|| unsafe { cb(plugin.id, tb.cast()) });
        });
    });
}

/// `void qemu_plugin_register_flush_cb(qemu_plugin_id_t, qemu_plugin_simple_cb_t)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_flush_cb(id: PluginId, cb: Option<SimpleCb>) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    handle.on_flush(move || {
        // SAFETY: the plugin's flush callback, with its id.
        plugin.enter(|| unsafe { cb(plugin.id) });
    });
}

/// `void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, qemu_plugin_udata_cb_t, void *)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_atexit_cb(
    id: PluginId,
    cb: Option<UdataCb>,
    udata: *mut c_void,
) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    let udata = Udata(udata);
    handle.on_atexit(move || {
        // SAFETY: the plugin's atexit callback, with its id and pointer.
        plugin.enter(|| unsafe { cb(plugin.id, udata.get()) });
    });
}

/// `void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t, qemu_plugin_vcpu_syscall_cb_t)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_syscall_cb(
    id: PluginId,
    cb: Option<abi::SyscallCb>,
) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    handle.on_syscall(move |vcpu, number, args| {
        let [a1, a2, a3, a4, a5, a6] = *args;
        // SAFETY: the plugin's syscall callback with QEMU's arguments (RV64
        // passes six; the last two are 0, as QEMU's riscv64 user mode has).
        plugin
            .enter(|| unsafe { cb(plugin.id, vcpu, number as i64, a1, a2, a3, a4, a5, a6, 0, 0) });
    });
}

/// `void qemu_plugin_register_vcpu_syscall_ret_cb(qemu_plugin_id_t, qemu_plugin_vcpu_syscall_ret_cb_t)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_syscall_ret_cb(
    id: PluginId,
    cb: Option<abi::SyscallRetCb>,
) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    handle.on_syscall_return(move |vcpu, number, ret| {
        // SAFETY: the plugin's syscall-return callback.
        plugin.enter(|| unsafe { cb(plugin.id, vcpu, number as i64, ret as i64) });
    });
}

/// `void qemu_plugin_vcpu_for_each(qemu_plugin_id_t, qemu_plugin_vcpu_simple_cb_t)`
///
/// # Safety
/// Called by C plugins: `cb` is null or a function of that type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_vcpu_for_each(id: PluginId, cb: Option<abi::VcpuSimpleCb>) {
    let (Some((plugin, handle)), Some(cb)) = (plugin_and_handle(id), cb) else {
        return;
    };
    for vcpu in handle.online_vcpus() {
        // SAFETY: the plugin's callback, once per vCPU started.
        plugin.enter(|| unsafe { cb(plugin.id, vcpu) });
    }
}

// ---------------------------------------------------------------------
// Translation time (version 1).
// ---------------------------------------------------------------------

/// The block behind a plugin's `struct qemu_plugin_tb *`.
///
/// # Safety
/// `tb` is null or a pointer the running translation callback was given.
unsafe fn tb_ref<'t>(tb: *const c_void) -> Option<&'t Tb> {
    // SAFETY: the caller's guarantee.
    unsafe { tb.cast::<Tb>().as_ref() }
}

/// The instruction behind a plugin's `struct qemu_plugin_insn *`.
///
/// # Safety
/// `insn` is null or a pointer `qemu_plugin_tb_get_insn` returned in the
/// running translation callback.
unsafe fn insn_ref<'t>(insn: *const c_void) -> Option<&'t Insn> {
    // SAFETY: the caller's guarantee.
    unsafe { insn.cast::<Insn>().as_ref() }
}

/// `size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *)`
///
/// # Safety
/// Called by C plugins inside their translation callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_tb_n_insns(tb: *const c_void) -> usize {
    // SAFETY: forwarded.
    unsafe { tb_ref(tb) }.map_or(0, |tb| tb.insns.len())
}

/// `uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *)`
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_tb_vaddr(tb: *const c_void) -> u64 {
    // SAFETY: forwarded.
    unsafe { tb_ref(tb) }.map_or(0, |tb| tb.vaddr)
}

/// `struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t)`
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_tb_get_insn(tb: *const c_void, idx: usize) -> *mut c_void {
    // SAFETY: forwarded.
    let Some(tb) = (unsafe { tb_ref(tb) }) else {
        return std::ptr::null_mut();
    };
    tb.insns.get(idx).map_or(std::ptr::null_mut(), |insn| {
        std::ptr::from_ref(insn).cast_mut().cast()
    })
}

/// v1: `const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *)`;
/// v3 and later: `size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *, void *dest, size_t len)`.
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`]; a v3+ caller's `dest` holds `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_data(
    insn: *const c_void,
    dest: *mut c_void,
    len: usize,
) -> usize {
    // SAFETY: forwarded.
    let Some(insn) = (unsafe { insn_ref(insn) }) else {
        return 0;
    };
    // SAFETY: the instruction's view lives while the callback runs.
    let copies = unsafe { insn.tb() }.plugin.at_least(3);
    if !copies {
        // v1/v2 return the bytes themselves (valid during the callback).
        return insn.bytes.as_ptr() as usize;
    }
    let n = len.min(insn.size);
    if !dest.is_null() {
        // SAFETY: the caller's `dest` holds `len` >= `n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(insn.bytes.as_ptr(), dest.cast(), n) };
    }
    n
}

/// `size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *)`
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_size(insn: *const c_void) -> usize {
    // SAFETY: forwarded.
    unsafe { insn_ref(insn) }.map_or(0, |i| i.size)
}

/// `uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *)`
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_vaddr(insn: *const c_void) -> u64 {
    // SAFETY: forwarded.
    unsafe { insn_ref(insn) }.map_or(0, |i| i.vaddr)
}

/// `void *qemu_plugin_insn_haddr(const struct qemu_plugin_insn *)`: in
/// user mode QEMU answers the host address of the guest's bytes; tcgkit's
/// guest memory is not one host mapping, so it answers the address of the
/// instruction's bytes as translated (valid during the callback).
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_haddr(insn: *const c_void) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { insn_ref(insn) }.map_or(std::ptr::null_mut(), |i| i.bytes.as_ptr().cast_mut().cast())
}

/// `char *qemu_plugin_insn_disas(const struct qemu_plugin_insn *)`: a
/// string the plugin frees with `g_free`.
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_disas(insn: *const c_void) -> *mut c_char {
    // SAFETY: forwarded.
    let Some(insn) = (unsafe { insn_ref(insn) }) else {
        return std::ptr::null_mut();
    };
    // SAFETY: inside the translation callback, no other view is in use.
    let text = unsafe { insn.trans() }
        .map(|t| t.disassembly())
        .unwrap_or_default();
    let Ok(glib) = Glib::get() else {
        return std::ptr::null_mut();
    };
    let text = std::ffi::CString::new(text).unwrap_or_default();
    glib.strdup(&text)
}

/// `const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *)`:
/// the function symbol holding the instruction, or NULL.
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_symbol(insn: *const c_void) -> *const c_char {
    // SAFETY: forwarded.
    let Some(insn) = (unsafe { insn_ref(insn) }) else {
        return std::ptr::null();
    };
    // SAFETY: inside the translation callback, no other view is in use.
    let Some(view) = (unsafe { insn.trans() }) else {
        return std::ptr::null();
    };
    view.symbol().map_or(std::ptr::null(), interned)
}

/// `void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *, qemu_plugin_vcpu_udata_cb_t, enum qemu_plugin_cb_flags, void *)`
///
/// # Safety
/// Called by C plugins inside their translation callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_tb_exec_cb(
    tb: *mut c_void,
    cb: Option<VcpuUdataCb>,
    flags: c_int,
    udata: *mut c_void,
) {
    // SAFETY: forwarded.
    let (Some(tb), Some(cb)) = (unsafe { tb_ref(tb) }, cb) else {
        return;
    };
    let callback = exec_callback(&tb.plugin, cb, Udata(udata));
    // SAFETY: inside the translation callback, no other view is in use.
    unsafe { tb.trans() }.on_exec(access(flags), callback);
}

/// `void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *, qemu_plugin_vcpu_udata_cb_t, enum qemu_plugin_cb_flags, void *)`
///
/// # Safety
/// Called by C plugins inside their translation callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_insn_exec_cb(
    insn: *mut c_void,
    cb: Option<VcpuUdataCb>,
    flags: c_int,
    udata: *mut c_void,
) {
    // SAFETY: forwarded.
    let (Some(insn), Some(cb)) = (unsafe { insn_ref(insn) }, cb) else {
        return;
    };
    // SAFETY: the instruction's view lives while the callback runs.
    let callback = exec_callback(&unsafe { insn.tb() }.plugin, cb, Udata(udata));
    // SAFETY: inside the translation callback, no other view is in use.
    if let Some(mut view) = unsafe { insn.trans() } {
        view.on_exec(access(flags), callback);
    }
}

/// `void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *, qemu_plugin_vcpu_mem_cb_t, enum qemu_plugin_cb_flags, enum qemu_plugin_mem_rw, void *)`
///
/// # Safety
/// Called by C plugins inside their translation callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_mem_cb(
    insn: *mut c_void,
    cb: Option<MemCb>,
    flags: c_int,
    rw: c_int,
    udata: *mut c_void,
) {
    // SAFETY: forwarded.
    let (Some(insn), Some(cb)) = (unsafe { insn_ref(insn) }, cb) else {
        return;
    };
    // SAFETY: the instruction's view lives while the callback runs.
    let plugin = Arc::clone(&unsafe { insn.tb() }.plugin);
    let udata = Udata(udata);
    let callback = move |ctx: &mut ExecContext<'_, '_>, info: &tcgkit_plugin_api::MemAccessInfo| {
        let vcpu = ctx.vcpu();
        let meminfo: MemInfo = abi::meminfo(info.size, info.sign_extended, info.is_store);
        let addr = info.addr;
        context::within_mem(ctx, info, || {
            // SAFETY: the plugin's memory callback, with QEMU's arguments.
            plugin.enter(|| unsafe { cb(vcpu, meminfo, addr, udata.get()) });
        });
    };
    // SAFETY: inside the translation callback, no other view is in use.
    if let Some(mut view) = unsafe { insn.trans() } {
        view.on_mem(mem_filter(rw), access(flags), callback);
    }
}

/// Adds `imm` to the plugin's `u64` at `ptr` (QEMU's v1 inline add: a plain,
/// non-atomic add on memory the plugin owns).
fn raw_add(
    ptr: *mut c_void,
    imm: u64,
) -> impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static {
    let target = Udata(ptr);
    move |_| {
        let cell = target.get().cast::<u64>();
        // SAFETY: the plugin gave this pointer to a u64 it keeps for the
        // run, to be added to on every execution (QEMU emits the same add).
        unsafe { cell.write_unaligned(cell.read_unaligned().wrapping_add(imm)) };
    }
}

/// v1: `void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, enum qemu_plugin_op, void *ptr, uint64_t imm)`
///
/// # Safety
/// Called by C plugins inside their translation callback; `ptr` points to
/// a `uint64_t` that lives for the run.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_tb_exec_inline(
    tb: *mut c_void,
    op: c_int,
    ptr: *mut c_void,
    imm: u64,
) {
    // SAFETY: forwarded.
    let Some(tb) = (unsafe { tb_ref(tb) }) else {
        return;
    };
    if op != abi::INLINE_ADD_U64 || ptr.is_null() {
        return;
    }
    // SAFETY: inside the translation callback, no other view is in use.
    unsafe { tb.trans() }.on_exec(Access::NONE, raw_add(ptr, imm));
}

/// v1: `void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *, enum qemu_plugin_op, void *ptr, uint64_t imm)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_tb_exec_inline`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_insn_exec_inline(
    insn: *mut c_void,
    op: c_int,
    ptr: *mut c_void,
    imm: u64,
) {
    // SAFETY: forwarded.
    let Some(insn) = (unsafe { insn_ref(insn) }) else {
        return;
    };
    if op != abi::INLINE_ADD_U64 || ptr.is_null() {
        return;
    }
    // SAFETY: inside the translation callback, no other view is in use.
    if let Some(mut view) = unsafe { insn.trans() } {
        view.on_exec(Access::NONE, raw_add(ptr, imm));
    }
}

/// v1: `void qemu_plugin_register_vcpu_mem_inline(struct qemu_plugin_insn *, enum qemu_plugin_mem_rw, enum qemu_plugin_op, void *ptr, uint64_t imm)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_tb_exec_inline`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_mem_inline(
    insn: *mut c_void,
    rw: c_int,
    op: c_int,
    ptr: *mut c_void,
    imm: u64,
) {
    // SAFETY: forwarded.
    let Some(insn) = (unsafe { insn_ref(insn) }) else {
        return;
    };
    if op != abi::INLINE_ADD_U64 || ptr.is_null() {
        return;
    }
    let add = raw_add(ptr, imm);
    // SAFETY: inside the translation callback, no other view is in use.
    if let Some(mut view) = unsafe { insn.trans() } {
        view.on_mem(mem_filter(rw), Access::NONE, move |ctx, _| add(ctx));
    }
}

// ---------------------------------------------------------------------
// Memory access information (version 1).
// ---------------------------------------------------------------------

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
// The emulator and the guest (version 1).
// ---------------------------------------------------------------------

/// The plugin-api handle of the plugin whose code is running.
fn current_handle() -> Option<PluginHandle> {
    CPlugin::current().and_then(|p| p.handle().cloned())
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

/// Every exported function, named: what `build.rs`'s export list must
/// match, and what keeps them all linked.
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

/// One exported function: its name and address.
#[allow(dead_code)] // read by the export test (next) and through `keep_linked`
pub(crate) struct Export(pub(crate) &'static str, pub(crate) *const ());
// SAFETY: a function's address, never written or called through here.
unsafe impl Sync for Export {}
