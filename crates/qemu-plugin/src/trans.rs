//! What a C plugin's `struct qemu_plugin_tb *` and `struct qemu_plugin_insn *`
//! point to: views of the block being translated, valid during the
//! plugin's translation callback, through which its registrations reach
//! plugin-api's `TbTrans`.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use tcgkit_plugin_api::{InsnTrans, TbTrans};

use crate::plugin::CPlugin;

/// `struct qemu_plugin_tb`.
pub(crate) struct Tb {
    /// The `TbTrans<'_>` of the running translation callback.
    trans: *mut c_void,
    pub(crate) plugin: Arc<CPlugin>,
    pub(crate) vaddr: u64,
    pub(crate) insns: Vec<Insn>,
}

/// `struct qemu_plugin_insn`.
pub(crate) struct Insn {
    tb: *mut Tb,
    pub(crate) index: usize,
    pub(crate) vaddr: u64,
    /// The instruction's length in bytes.
    pub(crate) size: usize,
    /// Its bytes, zero-padded to at least 4: v1 plugins (execlog, howvec)
    /// read 4 bytes behind `qemu_plugin_insn_data` whatever the length, as
    /// QEMU's buffer always holds 4.
    pub(crate) bytes: Vec<u8>,
}

impl Tb {
    /// Calls `f` with the block view a C translation callback gets for
    /// `trans`; the pointers handed to C are valid only inside `f`.
    pub(crate) fn with<R>(
        trans: &mut TbTrans<'_>,
        plugin: Arc<CPlugin>,
        f: impl FnOnce(*mut Tb) -> R,
    ) -> R {
        let insns = trans
            .insns()
            .map(|insn| {
                let mut bytes = insn.bytes();
                let size = bytes.len();
                bytes.resize(size.max(4), 0);
                Insn {
                    tb: std::ptr::null_mut(),
                    index: insn.index(),
                    vaddr: insn.pc(),
                    size,
                    bytes,
                }
            })
            .collect();
        let mut tb = Tb {
            trans: std::ptr::from_mut(trans).cast(),
            plugin,
            vaddr: trans.pc(),
            insns,
        };
        let at: *mut Tb = &mut tb;
        for insn in &mut tb.insns {
            insn.tb = at;
        }
        f(at)
    }

    /// The translation the view belongs to.
    ///
    /// # Safety
    /// Only while the translation callback that made the view runs, and
    /// with no other reference to the `TbTrans` alive.
    pub(crate) unsafe fn trans<'t>(&self) -> &'t mut TbTrans<'t> {
        // SAFETY: `trans` was made from the `&mut TbTrans` that `with`
        // borrows for as long as the C callback runs; the caller is inside
        // it and holds no other reference.
        unsafe { &mut *self.trans.cast::<TbTrans<'t>>() }
    }
}

impl Insn {
    /// The block the instruction belongs to.
    ///
    /// # Safety
    /// As for [`Tb::trans`].
    pub(crate) unsafe fn tb<'t>(&self) -> &'t Tb {
        // SAFETY: the back pointer was set by `Tb::with` to the view that
        // owns this instruction, alive while the callback runs.
        unsafe { &*self.tb }
    }

    /// plugin-api's view of this instruction, to attach to it.
    ///
    /// # Safety
    /// As for [`Tb::trans`].
    pub(crate) unsafe fn trans<'t>(&self) -> Option<InsnTrans<'t>> {
        // SAFETY: forwarded to the caller.
        unsafe { self.tb().trans().insn(self.index) }
    }
}

/// Symbol names handed to plugins: `qemu_plugin_insn_symbol` returns a
/// pointer the plugin may keep for the whole run (QEMU's point into its
/// symbol table), so each distinct name is kept once, for good.
static SYMBOLS: Mutex<Option<HashMap<String, Box<CStr>>>> = Mutex::new(None);

/// A pointer to `name` as a C string that stays valid until the process ends.
pub(crate) fn interned(name: &str) -> *const c_char {
    let mut table = SYMBOLS.lock().unwrap_or_else(PoisonError::into_inner);
    let table = table.get_or_insert_with(HashMap::new);
    if let Some(kept) = table.get(name) {
        return kept.as_ptr();
    }
    let Ok(owned) = CString::new(name) else {
        return std::ptr::null();
    };
    let boxed = owned.into_boxed_c_str();
    let ptr = boxed.as_ptr();
    table.insert(name.to_owned(), boxed);
    ptr
}
