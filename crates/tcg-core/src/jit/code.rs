//! Executable memory: one Cranelift `JITModule` per cache generation,
//! freed with the generation (only ever at a quiescent point).
#![allow(unsafe_code)]

use cranelift_codegen::Context;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::Module;

use super::JitError;
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
    pub(crate) fn new(
        isa: OwnedTargetIsa,
        ctx: &mut Context,
        fctx: &mut FunctionBuilderContext,
    ) -> Result<Self, JitError> {
        let builder = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
        let mut store = CodeStore {
            module: Some(JITModule::new(builder)),
            trampoline: 0,
            code_bytes: 0,
        };
        ctx.clear();
        super::codegen::build_trampoline(&mut ctx.func, fctx, &*isa);
        store.trampoline = store.define(ctx)?.0;
        ctx.clear();
        Ok(store)
    }

    /// Defines the function in `ctx` and makes it executable.
    pub(crate) fn define(&mut self, ctx: &mut Context) -> Result<CodePtr, JitError> {
        let module = self.module.as_mut().ok_or(JitError::Freed)?;
        let id = module
            .declare_anonymous_function(&ctx.func.signature)
            .map_err(|e| JitError::Module(e.to_string()))?;
        module
            .define_function(id, ctx)
            .map_err(|e| JitError::Module(format!("{e:?}")))?;
        if let Some(code) = ctx.compiled_code() {
            self.code_bytes += code.code_buffer().len();
        }
        module
            .finalize_definitions()
            .map_err(|e| JitError::Module(e.to_string()))?;
        Ok(CodePtr(module.get_finalized_function(id) as usize))
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
