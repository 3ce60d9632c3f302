//! Translation time: what a plugin learns of the block and its
//! instructions (valid only inside its translation callback), and what it
//! attaches to them: execution and memory callbacks, inline operations on
//! its own memory (v1) or on scoreboards (v2+), conditional callbacks (v3+).

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, PoisonError};

use tcgkit_plugin_api::{
    Access, Compare, ExecContext, InlineKind, InsnTrans, MemAccessInfo, SharedExecCallback,
    SharedMemCallback, TbTrans,
};

use super::{Udata, access, mem_filter};
use crate::abi::{self, MemCb, MemInfo, VcpuUdataCb};
use crate::context;
use crate::glib::Glib;
use crate::plugin::CPlugin;
use crate::symbols::QemuSymbols;
use crate::trans::{Insn, Tb, interned};

use super::runtime::{ScoreboardEntry, entry_ref};

/// A call of the plugin's execution callback `cb(vcpu, udata)`: a named
/// type, so that a loop compiled for the engine's frontend can be built
/// around it (see [`crate::plugin::Callbacks`]).
///
/// Nothing in a call can unwind (the plugin's function is `extern "C"`,
/// and the rare v1 counter update is an `extern "C"` function too), so
/// plugin-api's panic boundary around it compiles to nothing.
pub(crate) struct ExecCall {
    plugin: Arc<CPlugin>,
    cb: VcpuUdataCb,
    udata: Udata,
    /// Whether the callback's context must be reachable from the plugin's
    /// code: see [`ExecCall::needs_context`].
    context: bool,
}

impl ExecCall {
    /// A call of `cb(vcpu, udata)` registered with `flags`.
    pub(crate) fn new(plugin: &Arc<CPlugin>, cb: VcpuUdataCb, udata: Udata, flags: c_int) -> Self {
        let uses = plugin.context_use;
        ExecCall {
            plugin: Arc::clone(plugin),
            cb,
            udata,
            // Registers read only where the flags allow it: elsewhere the
            // read fails whether or not the context is reachable.
            context: uses.memory || (uses.registers && flags >= abi::CB_R_REGS),
        }
    }

    /// Whether [`ExecCall::call`] must be made with `CONTEXT`: the plugin
    /// may read guest memory, or registers with this callback's flags.
    pub(crate) fn needs_context(&self) -> bool {
        self.context
    }

    /// Calls the plugin; `CONTEXT` says whether `ctx` is reachable from its
    /// code (a callback whose plugin cannot ask for it is called without,
    /// so that the engine's loop need not keep the context in memory).
    #[inline(always)]
    pub(crate) fn call<const CONTEXT: bool>(&self, ctx: &mut ExecContext<'_, '_>) {
        let vcpu = ctx.vcpu();
        let (cb, udata) = (self.cb, self.udata);
        self.plugin.update_raw_counters();
        let ctx = CONTEXT.then_some(ctx);
        context::within(Arc::as_ptr(&self.plugin), ctx, None, || {
            // SAFETY: `cb` is the plugin's function of this type, called
            // with the vCPU index and the plugin's own pointer, as QEMU does.
            unsafe { cb(vcpu, udata.get()) }
        });
    }
}

/// A call of the plugin's memory callback `cb(vcpu, meminfo, vaddr, udata)`
/// (named, as [`ExecCall`] is).
pub(crate) struct MemCall {
    plugin: Arc<CPlugin>,
    cb: MemCb,
    udata: Udata,
    /// Whether the callback's context must be reachable: see
    /// [`MemCall::needs_context`].
    context: bool,
}

impl MemCall {
    /// A call of `cb(vcpu, meminfo, vaddr, udata)`.
    pub(crate) fn new(plugin: &Arc<CPlugin>, cb: MemCb, udata: Udata) -> Self {
        MemCall {
            plugin: Arc::clone(plugin),
            cb,
            udata,
            // No registers in memory callbacks: only memory reads need it.
            context: plugin.context_use.memory,
        }
    }

    /// Whether [`MemCall::call`] must be made with `CONTEXT`: the plugin
    /// may read guest memory. (The access it reports is always reachable.)
    pub(crate) fn needs_context(&self) -> bool {
        self.context
    }

    /// Calls the plugin, as [`ExecCall::call`] does.
    #[inline(always)]
    pub(crate) fn call<const CONTEXT: bool>(
        &self,
        ctx: &mut ExecContext<'_, '_>,
        info: &MemAccessInfo,
    ) {
        let vcpu = ctx.vcpu();
        let meminfo: MemInfo = abi::meminfo(info.size, info.sign_extended, info.is_store);
        let (addr, cb, udata) = (info.addr, self.cb, self.udata);
        self.plugin.update_raw_counters();
        let ctx = CONTEXT.then_some(ctx);
        context::within(Arc::as_ptr(&self.plugin), ctx, Some(info), || {
            // SAFETY: the plugin's memory callback, with QEMU's arguments.
            unsafe { cb(vcpu, meminfo, addr, udata.get()) }
        });
    }
}

/// The plugin's execution callback `cb(vcpu, udata)` with `flags`, made
/// once per registration and shared by every block and instruction it is
/// attached to, as a QEMU plugin passes one function: plugin-api then runs
/// such blocks in the loops it keeps for one shared callback (a lookup per
/// block, not per instruction). `None` once the plugin is gone.
fn shared_exec(
    plugin: &Arc<CPlugin>,
    cb: VcpuUdataCb,
    udata: *mut c_void,
    flags: c_int,
) -> Option<SharedExecCallback> {
    let handle = plugin.handle()?;
    let key = (cb as usize, udata as usize, flags);
    let mut shared = plugin.shared.lock().unwrap_or_else(PoisonError::into_inner);
    // Made only the first time: attaching it again is the common case.
    let made = shared.exec.entry(key).or_insert_with(|| {
        let call = ExecCall::new(plugin, cb, Udata::new(udata), flags);
        (plugin.callbacks.exec)(handle, access(flags), call)
    });
    Some(made.clone())
}

/// [`shared_exec`] for memory callbacks.
fn shared_mem(
    plugin: &Arc<CPlugin>,
    cb: MemCb,
    udata: *mut c_void,
    flags: c_int,
) -> Option<SharedMemCallback> {
    let handle = plugin.handle()?;
    let key = (cb as usize, udata as usize, flags);
    let mut shared = plugin.shared.lock().unwrap_or_else(PoisonError::into_inner);
    // Made only the first time: attaching it again is the common case.
    let made = shared.mem.entry(key).or_insert_with(|| {
        let call = MemCall::new(plugin, cb, Udata::new(udata));
        (plugin.callbacks.mem)(handle, access(flags), call)
    });
    Some(made.clone())
}

/// What attaches to a block or to one of its instructions.
enum Target<'t> {
    Tb(&'t mut TbTrans<'t>),
    Insn(InsnTrans<'t>),
}

impl Target<'_> {
    fn on_exec(
        &mut self,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) {
        match self {
            Target::Tb(tb) => tb.on_exec(access, cb),
            Target::Insn(insn) => insn.on_exec(access, cb),
        }
    }

    fn on_exec_inline(&mut self, entry: &ScoreboardEntry, kind: InlineKind) {
        match entry.slot() {
            Some(slot) => match self {
                Target::Tb(tb) => tb.on_exec_inline(entry.board(), slot, kind),
                Target::Insn(insn) => insn.on_exec_inline(entry.board(), slot, kind),
            },
            // An entry not at a multiple of 8 in its element: a call.
            None => {
                let entry = entry.clone();
                self.on_exec(Access::NONE, move |ctx| entry.apply(ctx.vcpu(), kind));
            }
        }
    }

    fn on_exec_cond(
        &mut self,
        entry: &ScoreboardEntry,
        compare: Compare,
        value: u64,
        access: Access,
        cb: impl Fn(&mut ExecContext<'_, '_>) + Send + Sync + 'static,
    ) {
        match entry.slot() {
            Some(slot) => match self {
                Target::Tb(tb) => tb.on_exec_cond(entry.board(), slot, compare, value, access, cb),
                Target::Insn(insn) => {
                    insn.on_exec_cond(entry.board(), slot, compare, value, access, cb)
                }
            },
            None => {
                let entry = entry.clone();
                self.on_exec(access, move |ctx| {
                    if compare_holds(compare, entry.get(ctx.vcpu()), value) {
                        cb(ctx);
                    }
                });
            }
        }
    }
}

fn compare_holds(compare: Compare, a: u64, b: u64) -> bool {
    match compare {
        Compare::Always => true,
        Compare::Never => false,
        Compare::Eq => a == b,
        Compare::Ne => a != b,
        Compare::Lt => a < b,
        Compare::Le => a <= b,
        Compare::Gt => a > b,
        Compare::Ge => a >= b,
    }
}

/// The block a `struct qemu_plugin_tb *` designates, as a target.
///
/// # Safety
/// `tb` is null or a pointer the running translation callback was given.
unsafe fn tb_target<'t>(tb: *const c_void) -> Option<(Target<'t>, Arc<CPlugin>)> {
    // SAFETY: the caller's guarantee; inside the callback no other view of
    // the translation is in use.
    let tb = unsafe { tb_ref(tb) }?;
    Some((Target::Tb(unsafe { tb.trans() }), Arc::clone(&tb.plugin)))
}

/// The instruction a `struct qemu_plugin_insn *` designates, as a target.
///
/// # Safety
/// `insn` is null or a pointer `qemu_plugin_tb_get_insn` returned in the
/// running translation callback.
unsafe fn insn_target<'t>(insn: *const c_void) -> Option<(Target<'t>, Arc<CPlugin>)> {
    // SAFETY: the caller's guarantee, as for `tb_target`.
    let insn = unsafe { insn_ref(insn) }?;
    let plugin = Arc::clone(&unsafe { insn.tb() }.plugin);
    Some((Target::Insn(unsafe { insn.trans() }?), plugin))
}

/// QEMU's `enum qemu_plugin_op` as plugin-api's inline operation.
fn inline_kind(op: c_int, imm: u64) -> Option<InlineKind> {
    match op {
        abi::INLINE_ADD_U64 => Some(InlineKind::Add(imm)),
        abi::INLINE_STORE_U64 => Some(InlineKind::Store(imm)),
        _ => None,
    }
}

/// QEMU's `enum qemu_plugin_cond` as plugin-api's comparison.
fn compare(cond: c_int) -> Option<Compare> {
    Some(match cond {
        abi::COND_NEVER => Compare::Never,
        abi::COND_ALWAYS => Compare::Always,
        abi::COND_EQ => Compare::Eq,
        abi::COND_NE => Compare::Ne,
        abi::COND_LT => Compare::Lt,
        abi::COND_LE => Compare::Le,
        abi::COND_GT => Compare::Gt,
        abi::COND_GE => Compare::Ge,
        _ => return None,
    })
}

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
/// string the plugin frees with `g_free`, in QEMU's syntax when the
/// frontend has it ([`InsnTrans::qemu_disassembly`]; for RISC-V QEMU 7.2's
/// text, hex encoding and columns included).
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
        .map(|t| t.qemu_disassembly())
        .unwrap_or_default();
    let Ok(glib) = Glib::get() else {
        return std::ptr::null_mut();
    };
    let text = std::ffi::CString::new(text).unwrap_or_default();
    glib.strdup(&text)
}

/// `const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *)`:
/// the function symbol of the program holding the instruction, chosen
/// among aliases as QEMU chooses (see `symbols.rs`), or NULL.
///
/// # Safety
/// As for [`qemu_plugin_tb_n_insns`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_insn_symbol(insn: *const c_void) -> *const c_char {
    // SAFETY: forwarded.
    let Some(insn) = (unsafe { insn_ref(insn) }) else {
        return std::ptr::null();
    };
    // SAFETY: the instruction's view lives while the callback runs.
    let plugin = &unsafe { insn.tb() }.plugin;
    program_symbols(plugin)
        .lookup(insn.vaddr)
        .map_or(std::ptr::null(), interned)
}

/// The guest program's symbols as QEMU orders them, read once per program
/// (QEMU knows the program's and the interpreter's symbols only; tcgkit
/// reads the program's).
fn program_symbols(plugin: &CPlugin) -> Arc<QemuSymbols> {
    type Known = Vec<((std::path::PathBuf, u64), Arc<QemuSymbols>)>;
    static KNOWN: std::sync::Mutex<Known> = std::sync::Mutex::new(Vec::new());
    let Some(program) = plugin.handle().and_then(|h| h.guest().program.clone()) else {
        return Arc::default();
    };
    let key = (program.path.clone(), program.start_code);
    let mut known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, symbols)) = known.iter().find(|(k, _)| *k == key) {
        return Arc::clone(symbols);
    }
    let symbols = std::fs::read(&program.path).map_or_else(
        |_| Arc::default(),
        |bytes| Arc::new(QemuSymbols::for_program(&bytes, program.start_code)),
    );
    known.push((key, Arc::clone(&symbols)));
    symbols
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
    let Some(shared) = shared_exec(&tb.plugin, cb, udata, flags) else {
        return;
    };
    // SAFETY: inside the translation callback, no other view is in use.
    unsafe { tb.trans() }.on_exec_shared(&shared);
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
    // SAFETY: the instruction's view lives while the callback runs.
    let Some(shared) = shared_exec(&unsafe { insn.tb() }.plugin, cb, udata, flags) else {
        return;
    };
    // SAFETY: inside the translation callback, no other view is in use.
    if let Some(mut view) = unsafe { insn.trans() } {
        view.on_exec_shared(&shared);
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
    let Some(shared) = shared_mem(&unsafe { insn.tb() }.plugin, cb, udata, flags) else {
        return;
    };
    // SAFETY: inside the translation callback, no other view is in use.
    if let Some(mut view) = unsafe { insn.trans() } {
        view.on_mem_shared(mem_filter(rw), &shared);
    }
}

/// The scoreboard entry the engine adds to inline for the plugin's v1
/// counter at `ptr` (moved into the counter before the plugin's code runs:
/// see `plugin::RawCounters`).
fn raw_entry(plugin: &CPlugin, ptr: *mut c_void) -> ScoreboardEntry {
    let vcpus = plugin
        .handle()
        .map_or(1, |h| h.guest().vcpus.max(1) as usize);
    ScoreboardEntry::new(plugin.raw_counter(ptr as usize, vcpus), 0)
}

/// Attaches QEMU's v1 inline add on the plugin's `u64` at `ptr` to `target`.
fn raw_inline(target: Option<(Target<'_>, Arc<CPlugin>)>, op: c_int, ptr: *mut c_void, imm: u64) {
    let Some((mut target, plugin)) = target else {
        return;
    };
    if op == abi::INLINE_ADD_U64 && !ptr.is_null() {
        target.on_exec_inline(&raw_entry(&plugin, ptr), InlineKind::Add(imm));
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
    raw_inline(unsafe { tb_target(tb) }, op, ptr, imm);
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
    raw_inline(unsafe { insn_target(insn) }, op, ptr, imm);
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
    let Some((target, plugin)) = (unsafe { insn_target(insn) }) else {
        return;
    };
    if op != abi::INLINE_ADD_U64 || ptr.is_null() {
        return;
    }
    if let Target::Insn(mut insn) = target {
        let entry = raw_entry(&plugin, ptr);
        insn.on_mem_inline(mem_filter(rw), entry.board(), 0, InlineKind::Add(imm));
    }
}

/// Attaches a v2+ inline operation on a scoreboard entry to `target`.
fn inline_per_vcpu(
    target: Option<(Target<'_>, Arc<CPlugin>)>,
    op: c_int,
    entry: Option<ScoreboardEntry>,
    imm: u64,
) {
    if let (Some((mut target, _)), Some(entry), Some(kind)) = (target, entry, inline_kind(op, imm))
    {
        target.on_exec_inline(&entry, kind);
    }
}

/// v2+: `void qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(struct qemu_plugin_tb *, enum qemu_plugin_op, qemu_plugin_u64 entry, uint64_t imm)`:
/// applies the operation to the executing vCPU's entry, without a call.
///
/// # Safety
/// Called by C plugins inside their translation callback, with an entry
/// of a live scoreboard.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(
    tb: *mut c_void,
    op: c_int,
    entry: abi::U64Entry,
    imm: u64,
) {
    // SAFETY: forwarded.
    let (target, entry) = unsafe { (tb_target(tb), entry_ref(entry)) };
    inline_per_vcpu(target, op, entry, imm);
}

/// v2+: `void qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(struct qemu_plugin_insn *, enum qemu_plugin_op, qemu_plugin_u64 entry, uint64_t imm)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
    insn: *mut c_void,
    op: c_int,
    entry: abi::U64Entry,
    imm: u64,
) {
    // SAFETY: forwarded.
    let (target, entry) = unsafe { (insn_target(insn), entry_ref(entry)) };
    inline_per_vcpu(target, op, entry, imm);
}

/// v2+: `void qemu_plugin_register_vcpu_mem_inline_per_vcpu(struct qemu_plugin_insn *, enum qemu_plugin_mem_rw, enum qemu_plugin_op, qemu_plugin_u64 entry, uint64_t imm)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_mem_inline_per_vcpu(
    insn: *mut c_void,
    rw: c_int,
    op: c_int,
    entry: abi::U64Entry,
    imm: u64,
) {
    // SAFETY: forwarded.
    let (Some((target, _)), Some(entry), Some(kind)) = (
        unsafe { insn_target(insn) },
        unsafe { entry_ref(entry) },
        inline_kind(op, imm),
    ) else {
        return;
    };
    let Target::Insn(mut insn) = target else {
        return;
    };
    match entry.slot() {
        Some(slot) => insn.on_mem_inline(mem_filter(rw), entry.board(), slot, kind),
        None => insn.on_mem(mem_filter(rw), Access::NONE, move |ctx, _| {
            entry.apply(ctx.vcpu(), kind);
        }),
    }
}

/// Registers the conditional callback `cb` on `target`.
fn register_cond(
    target: Option<(Target<'_>, Arc<CPlugin>)>,
    cb: Option<VcpuUdataCb>,
    flags: c_int,
    cond: c_int,
    entry: Option<ScoreboardEntry>,
    imm: u64,
    udata: *mut c_void,
) {
    let (Some((mut target, plugin)), Some(cb), Some(entry), Some(compare)) =
        (target, cb, entry, compare(cond))
    else {
        return;
    };
    if compare == Compare::Never {
        return; // QEMU registers nothing.
    }
    let call = ExecCall::new(&plugin, cb, Udata::new(udata), flags);
    let access = access(flags);
    if call.needs_context() {
        target.on_exec_cond(&entry, compare, imm, access, move |ctx| {
            call.call::<true>(ctx);
        });
    } else {
        target.on_exec_cond(&entry, compare, imm, access, move |ctx| {
            call.call::<false>(ctx);
        });
    }
}

/// v3+: `void qemu_plugin_register_vcpu_tb_exec_cond_cb(struct qemu_plugin_tb *, qemu_plugin_vcpu_udata_cb_t, enum qemu_plugin_cb_flags, enum qemu_plugin_cond, qemu_plugin_u64 entry, uint64_t imm, void *userdata)`:
/// calls `cb` on entry only if `entry[vcpu] <cond> imm` (unsigned).
///
/// # Safety
/// Called by C plugins inside their translation callback, with an entry
/// of a live scoreboard.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_tb_exec_cond_cb(
    tb: *mut c_void,
    cb: Option<VcpuUdataCb>,
    flags: c_int,
    cond: c_int,
    entry: abi::U64Entry,
    imm: u64,
    udata: *mut c_void,
) {
    // SAFETY: forwarded.
    let (target, entry) = unsafe { (tb_target(tb), entry_ref(entry)) };
    register_cond(target, cb, flags, cond, entry, imm, udata);
}

/// v3+: `void qemu_plugin_register_vcpu_insn_exec_cond_cb(struct qemu_plugin_insn *, qemu_plugin_vcpu_udata_cb_t, enum qemu_plugin_cb_flags, enum qemu_plugin_cond, qemu_plugin_u64 entry, uint64_t imm, void *userdata)`
///
/// # Safety
/// As for [`qemu_plugin_register_vcpu_tb_exec_cond_cb`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_register_vcpu_insn_exec_cond_cb(
    insn: *mut c_void,
    cb: Option<VcpuUdataCb>,
    flags: c_int,
    cond: c_int,
    entry: abi::U64Entry,
    imm: u64,
    udata: *mut c_void,
) {
    // SAFETY: forwarded.
    let (target, entry) = unsafe { (insn_target(insn), entry_ref(entry)) };
    register_cond(target, cb, flags, cond, entry, imm, udata);
}
