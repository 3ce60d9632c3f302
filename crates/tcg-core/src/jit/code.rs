//! Executable memory: one Cranelift `JITModule` per cache generation,
//! freed with the generation (only ever at a quiescent point).
#![allow(unsafe_code)]

use cranelift_codegen::ir::Signature;
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Module};

use super::JitError;
use super::codegen::{Links, MachineCode};
use super::runtime::JitCtx;

/// The entry of one compiled block, a function of Cranelift's `tail`
/// convention taking the `*mut JitCtx` and returning the next pc. Only a
/// [`CodeStore`] makes one; it is only called through its store's
/// trampoline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CodePtr(usize);

impl CodePtr {
    /// The host address (what chain cells hold).
    pub(crate) fn addr(self) -> usize {
        self.0
    }
}

/// Code copied into a store, not yet executable (see [`CodeStore::place`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed(FuncId);

/// The code memory of one generation.
pub(crate) struct CodeStore {
    module: Option<JITModule>,
    /// `extern "C" fn(*mut JitCtx, block) -> u64`: calls a block (of the
    /// `tail` convention, which Rust cannot call) and returns its result.
    trampoline: usize,
    /// Host code bytes emitted into it.
    pub(crate) code_bytes: usize,
}

impl CodeStore {
    /// A store whose blocks are entered through `trampoline` (the code
    /// `codegen::build_trampoline` makes).
    pub(crate) fn new(isa: OwnedTargetIsa, trampoline: &MachineCode) -> Result<Self, JitError> {
        let builder = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        let mut store = CodeStore {
            module: Some(JITModule::new(builder)),
            trampoline: 0,
            code_bytes: 0,
        };
        store.trampoline = store.define(trampoline)?.0;
        Ok(store)
    }

    /// Copies `code`, which links nothing, in and makes it executable.
    pub(crate) fn define(&mut self, code: &MachineCode) -> Result<CodePtr, JitError> {
        let placed = self.place(code, &Links::default())?;
        self.finish()?;
        self.address(placed)
    }

    /// Copies `code` in with `links`' values at its link sites,
    /// executable only after the next [`CodeStore::finish`]: a batch of
    /// blocks then shares pages and one change of protection.
    pub(crate) fn place(&mut self, code: &MachineCode, links: &Links) -> Result<Placed, JitError> {
        let mut linked;
        let bytes = if code.links.is_empty() {
            &code.bytes
        } else {
            linked = code.bytes.clone();
            for site in &code.links {
                let at = site.offset as usize;
                let field = linked
                    .get_mut(at..at + 8)
                    .ok_or_else(|| JitError::Module(format!("link site {at} past the code")))?;
                field.copy_from_slice(&links.value(site).to_ne_bytes());
            }
            &linked
        };
        let module = self.module.as_mut().ok_or(JitError::Freed)?;
        // The declared signature is only used by calls between functions
        // of the module, which the code never makes.
        let id = module
            .declare_anonymous_function(&Signature::new(CallConv::Tail))
            .map_err(|e| JitError::Module(e.to_string()))?;
        module
            .define_function_bytes(id, code.align, bytes, &[])
            .map_err(|e| JitError::Module(format!("{e:?}")))?;
        self.code_bytes += code.bytes.len();
        Ok(Placed(id))
    }

    /// Makes everything placed so far executable.
    pub(crate) fn finish(&mut self) -> Result<(), JitError> {
        let module = self.module.as_mut().ok_or(JitError::Freed)?;
        module
            .finalize_definitions()
            .map_err(|e| JitError::Module(e.to_string()))
    }

    /// Where placed code is, once finished.
    pub(crate) fn address(&self, placed: Placed) -> Result<CodePtr, JitError> {
        let module = self.module.as_ref().ok_or(JitError::Freed)?;
        Ok(CodePtr(module.get_finalized_function(placed.0) as usize))
    }

    /// Runs the block `code` of this store.
    ///
    /// # Safety
    /// The block's generated code must be sound for `ctx`: the register
    /// file behind `ctx` at least as large as the store's blocks use (see
    /// `runtime::run`).
    pub(crate) unsafe fn enter(&self, code: &CodePtr, ctx: &mut JitCtx) -> u64 {
        // SAFETY: `trampoline` is the address `get_finalized_function`
        // returned for the function `build_trampoline` made, with this
        // signature, in memory this store keeps executable until it is
        // dropped (it is borrowed here); `code` is one of its blocks.
        let f = unsafe {
            std::mem::transmute::<usize, extern "C" fn(*mut JitCtx, usize) -> u64>(self.trampoline)
        };
        f(ctx, code.0)
    }
}

impl Drop for CodeStore {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: a store is dropped only with its generation's JIT
            // blocks (`JitBlocks::clear` or drop), which happens when the
            // generation is reclaimed: every vCPU has passed a quiescent
            // point since it was retired, so none is executing its code,
            // and the `CodePtr`s die with the store.
            unsafe { module.free_memory() };
        }
    }
}
