//! Callbacks, and what they see and may do when they run: the
//! [`CallbackContext`], the registers it reads through, and the requests
//! (flush, re-instrument, exit) it records for the engine to honour at the
//! next safe point.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::memory::{GuestMemory, MemFault};

/// A callback run on block entry or before an instruction executes: any
/// `Fn(&mut CallbackContext)` closure, or an [`crate::InlinedCallback`].
pub type InsnCallback = Arc<dyn CallbackFn>;

/// What an [`InsnCallback`] is: something called with the context.
/// Every `Fn(&mut CallbackContext) + Send + Sync` is one.
pub trait CallbackFn: Send + Sync {
    /// Runs the callback.
    fn call(&self, ctx: &mut CallbackContext<'_>);
    /// The engine's loop with this callback compiled in, for blocks that
    /// call it before every instruction: an [`crate::InlinedCallback`]
    /// offers one, which the engine takes if it was built for its
    /// frontend. `None` (the default): the loop calls [`CallbackFn::call`].
    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        None
    }
    /// Whether the callback reads the guest registers
    /// ([`CallbackContext::read_register`]). True unless it says otherwise
    /// ([`RegisterFree`], alone or inside a [`crate::InlinedCallback`]):
    /// compiled code stores the registers it holds in host registers
    /// before calling one that does, and keeps them where they are
    /// around one that does not (QEMU's `QEMU_PLUGIN_CB_NO_REGS`).
    fn reads_registers(&self) -> bool {
        true
    }
}

impl<T> CallbackFn for T
where
    T: Fn(&mut CallbackContext<'_>) + Send + Sync,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>) {
        self(ctx)
    }
}

/// A callback that never reads the guest registers: its
/// [`CallbackContext::read_register`] reads `None`, and compiled code
/// calls it without first storing the registers it keeps in host
/// registers.
///
/// ```
/// use std::sync::Arc;
/// use tcgkit_tcg_core::{CallbackFn, InsnCallback, RegisterFree};
///
/// let cb: InsnCallback = Arc::new(RegisterFree(|ctx: &mut tcgkit_tcg_core::CallbackContext<'_>| {
///     assert_eq!(ctx.read_register("pc"), None);
/// }));
/// assert!(!cb.reads_registers());
/// ```
pub struct RegisterFree<C>(pub C);

impl<C> CallbackFn for RegisterFree<C>
where
    C: Fn(&mut CallbackContext<'_>) + Send + Sync,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>) {
        let mut without = ctx.without_registers();
        (self.0)(&mut without);
        let requests = without.requests;
        ctx.requests.merge(requests);
    }
    fn reads_registers(&self) -> bool {
        false
    }
}

/// A callback run after each matching memory access of an instruction:
/// any `Fn(&mut CallbackContext, &MemAccessInfo)` closure, or an
/// [`crate::InlinedMemCallback`].
pub type MemCallback = Arc<dyn MemCallbackFn>;

/// What a [`MemCallback`] is: something called with the context and the
/// access. Every `Fn(&mut CallbackContext, &MemAccessInfo) + Send + Sync`
/// is one.
pub trait MemCallbackFn: Send + Sync {
    /// Runs the callback.
    fn call(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo);
    /// The engine's loop with this callback compiled in, for blocks whose
    /// every access runs it and nothing else: an
    /// [`crate::InlinedMemCallback`] offers one, which the engine takes if
    /// it was built for its frontend. `None` (the default): the loop calls
    /// [`MemCallbackFn::call`].
    fn inlined_loop(&self) -> Option<&(dyn Any + Send + Sync)> {
        None
    }
}

impl<T> MemCallbackFn for T
where
    T: Fn(&mut CallbackContext<'_>, &MemAccessInfo) + Send + Sync,
{
    #[inline(always)]
    fn call(&self, ctx: &mut CallbackContext<'_>, info: &MemAccessInfo) {
        self(ctx, info)
    }
}

/// A memory access as memory callbacks see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAccessInfo {
    /// Guest address of the access.
    pub addr: u64,
    /// Size in bytes (1, 2, 4 or 8).
    pub size: u8,
    /// True if a load sign-extended its value.
    pub sign_extended: bool,
    /// True for a store.
    pub is_store: bool,
    /// The value loaded (after extension) or stored (low `size` bytes).
    pub value: u64,
}

/// The executing vCPU's registers, read by name: what
/// [`CallbackContext::read_register`] reads through. The engine implements
/// it over its frontend's register file; a callback only ever sees
/// `dyn Registers`.
pub trait Registers {
    /// The value of register `name`, or `None` for a name it does not know.
    fn read(&self, name: &str) -> Option<u64>;
}

/// No registers to read: memory callbacks run while the instruction is
/// updating the register file.
pub(crate) struct NoRegisters;

impl Registers for NoRegisters {
    #[inline]
    fn read(&self, _name: &str) -> Option<u64> {
        None
    }
}

/// Requests made by callbacks, honoured at the next safe point.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Requests {
    /// One bit per request: the loop tests them all with one compare after
    /// each instruction whose callbacks could have made one.
    bits: u8,
}

impl Requests {
    const FLUSH: u8 = 1;
    const REINSTRUMENT: u8 = 2;
    const EXIT: u8 = 4;

    /// Adds `other`'s requests to these. Only when there are any: an
    /// unconditional OR into an accumulator the loop keeps in memory
    /// chained every callback to the previous one through a load and a
    /// store (LLVM turns a plain `if` around it into that OR, hence the
    /// cold function).
    #[inline(always)]
    pub(crate) fn merge(&mut self, other: Requests) {
        if other.any() {
            self.add(other);
        }
    }

    #[cold]
    #[inline(never)]
    fn add(&mut self, other: Requests) {
        self.bits |= other.bits;
    }

    #[inline(always)]
    pub(crate) fn any(self) -> bool {
        self.bits != 0
    }
    pub(crate) fn flush(self) -> bool {
        self.bits & Self::FLUSH != 0
    }
    pub(crate) fn reinstrument(self) -> bool {
        self.bits & Self::REINSTRUMENT != 0
    }
    pub(crate) fn exit(self) -> bool {
        self.bits & Self::EXIT != 0
    }
}

/// What a callback may see and do. Valid only for the duration of the call.
///
/// Callbacks receive it with its default `R`, `dyn Registers`. For a
/// block whose every instruction runs the same one callback, the engine
/// keeps one context for the whole block, holding the vCPU's register file
/// by its concrete type (the block's instructions execute through it), and
/// hands the callback that context unsized: no context is built per call.
pub struct CallbackContext<'a, R: ?Sized = dyn Registers + 'a> {
    pub(crate) vcpu: u32,
    pub(crate) pc: u64,
    pub(crate) mem: &'a mut GuestMemory,
    /// Held by value: the loop reads it straight from its own frame after
    /// each call, with no pointer to load first.
    pub(crate) requests: Requests,
    /// Last: the field the context is unsized over.
    pub(crate) registers: R,
}

impl<R: ?Sized> fmt::Debug for CallbackContext<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackContext")
            .field("vcpu", &self.vcpu)
            .field("pc", &self.pc)
            .finish()
    }
}

impl<'a> CallbackContext<'a, NoRegisters> {
    /// A memory callback's context on `vcpu` (no registers), its pc set
    /// as the instructions go.
    #[inline(always)]
    pub(crate) fn new(vcpu: u32, mem: &'a mut GuestMemory) -> Self {
        CallbackContext {
            vcpu,
            pc: 0,
            mem,
            requests: Requests::default(),
            registers: NoRegisters,
        }
    }
}

impl<R: ?Sized> CallbackContext<'_, R> {
    /// The same context with no registers to read, for a callback that
    /// said it reads none; its requests are merged back by the caller.
    #[inline(always)]
    pub(crate) fn without_registers(&mut self) -> CallbackContext<'_, NoRegisters> {
        CallbackContext {
            vcpu: self.vcpu,
            pc: self.pc,
            mem: &mut *self.mem,
            requests: Requests::default(),
            registers: NoRegisters,
        }
    }
}

impl<R: Registers + ?Sized> CallbackContext<'_, R> {
    /// Index of the executing vCPU.
    pub fn vcpu(&self) -> u32 {
        self.vcpu
    }
    /// Address of the instruction (for block-entry callbacks: of the block).
    pub fn pc(&self) -> u64 {
        self.pc
    }
    /// Reads a guest register by name. Available in block-entry and
    /// instruction callbacks (where the pc reads as the instruction's
    /// address); `None` in memory callbacks, which run while the instruction
    /// is updating the register file, and for unknown names.
    pub fn read_register(&self, name: &str) -> Option<u64> {
        let value = self.registers.read(name)?;
        // The loop keeps the pc outside the register file while it runs a
        // block: the context's is the executing instruction's.
        Some(if name == "pc" { self.pc } else { value })
    }
    /// Reads guest memory (permissions are checked as for a guest load).
    pub fn read_memory(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.mem.read(addr, buf)
    }
    /// Asks for a flush of all translated blocks. It happens at the next
    /// safe point: after the current instruction and its memory callbacks.
    pub fn request_flush(&mut self) {
        self.requests.bits |= Requests::FLUSH;
    }
    /// Asks for a re-instrumentation of all translated blocks
    /// ([`crate::Engine::reinstrument`]), at the same safe point as
    /// [`CallbackContext::request_flush`].
    pub fn request_reinstrument(&mut self) {
        self.requests.bits |= Requests::REINSTRUMENT;
    }
    /// Asks the vCPU to leave [`crate::Engine::run`] with
    /// [`crate::CpuExit::ExitRequested`] after the current instruction.
    pub fn request_exit(&mut self) {
        self.requests.bits |= Requests::EXIT;
    }
}
