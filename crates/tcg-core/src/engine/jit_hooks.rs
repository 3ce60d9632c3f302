//! What compiled code calls to run an instrumented block's plan: the
//! actions of one hook before an instruction, the memory actions of one
//! access, and an op the JIT did not lower executed through the
//! instruction's memory actions. Safe code over the same pieces the
//! interpreter's loops use (`steps.rs`, `access.rs`); `jit::runtime`
//! calls them from its helpers.

use super::Engine;
use super::access::{CpuRegisters, InstrumentedMem, MemActions, call};
use super::vcpu::take_asked_on_this_thread;
use crate::cache::{Generation, NONE};
use crate::frontend::{Flow, Frontend};
use crate::instrument::{CallbackContext, CallbackFn, MemAccessInfo, Requests};
use crate::memory::GuestMemory;

/// Runs the actions of hook `hook` of `generation` (a block's entry hook,
/// or the one before the instruction at `pc`) on `vcpu`, adding what its
/// callbacks request to `requests`. Returns whether the block must be left
/// once the instruction is complete: a callback ran and made a request,
/// through its context or a handle.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_hook<F: Frontend>(
    generation: &Generation<F::Op>,
    hook: u32,
    vcpu: u32,
    pc: u64,
    cpu: &mut F::Cpu,
    mem: &mut GuestMemory,
    requests: &mut Requests,
) -> bool {
    let Some(hook) = generation.hooks.get(hook as usize) else {
        return false;
    };
    let mut access = InstrumentedMem {
        mem,
        actions: MemActions::of(generation, &[]),
        vcpu,
        pc,
        requests: Requests::default(),
    };
    // One callback and nothing else: called without walking the list, as
    // the interpreter does.
    let called = if hook.sole_call != NONE {
        F::set_pc(cpu, pc);
        if let Some(cb) = generation.callbacks.get(hook.sole_call as usize) {
            call::<F>(&**cb, vcpu, pc, cpu, access.mem, &mut access.requests);
        }
        true
    } else {
        Engine::<F>::run_actions(generation, hook, vcpu, pc, cpu, &mut access)
    };
    requests.merge(access.requests);
    called && (requests.any() || take_asked_on_this_thread())
}

/// Runs the memory actions of hook `hook` that select access `info`, made
/// by the instruction at `pc` on `vcpu`. Returns whether the block must be
/// left once the instruction is complete (see [`run_hook`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_mem_hook<Op: Copy>(
    generation: &Generation<Op>,
    hook: u32,
    vcpu: u32,
    pc: u64,
    mem: &mut GuestMemory,
    info: &MemAccessInfo,
    requests: &mut Requests,
) -> bool {
    let Some(hook) = generation.hooks.get(hook as usize) else {
        return false;
    };
    let actions = MemActions::of(generation, generation.mem_actions_of(hook));
    let asked = actions.run(vcpu, pc, mem, info);
    requests.merge(asked);
    hook.mem_calls && (requests.any() || take_asked_on_this_thread())
}

/// Executes `op` (at `pc`) with its accesses running hook `hook`'s memory
/// actions. Returns the flow, and whether the block must be left once the
/// instruction is complete (see [`run_hook`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_watched<F: Frontend>(
    generation: &Generation<F::Op>,
    hook: u32,
    vcpu: u32,
    op: &F::Op,
    pc: u64,
    cpu: &mut F::Cpu,
    mem: &mut GuestMemory,
    requests: &mut Requests,
) -> (Flow, bool) {
    let hook = generation.hooks.get(hook as usize);
    let actions = hook.map_or(&[][..], |h| generation.mem_actions_of(h));
    let mut access = InstrumentedMem {
        mem,
        actions: MemActions::of(generation, actions),
        vcpu,
        pc,
        requests: Requests::default(),
    };
    let flow = F::execute(cpu, op, pc, &mut access);
    requests.merge(access.requests);
    let calls = hook.is_some_and(|h| h.mem_calls);
    (
        flow,
        calls && (requests.any() || take_asked_on_this_thread()),
    )
}

/// Calls an inlined instruction callback's closure `callback` before the
/// instruction at `pc`, as [`run_hook`] calls a hook's one callback.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn call_direct<F: Frontend, C>(
    callback: &C,
    vcpu: u32,
    pc: u64,
    cpu: &mut F::Cpu,
    mem: &mut GuestMemory,
    requests: &mut Requests,
) -> bool
where
    C: CallbackFn,
{
    F::set_pc(cpu, pc);
    let mut ctx = CallbackContext {
        vcpu,
        pc,
        mem,
        requests: Requests::default(),
        registers: CpuRegisters::<F>(cpu),
    };
    callback.call(&mut ctx);
    requests.merge(ctx.requests);
    requests.any() || take_asked_on_this_thread()
}

/// Calls an inlined memory callback's closure `callback` for access
/// `info` of the instruction at `pc`, as [`run_mem_hook`] calls a hook's
/// one memory callback.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn call_mem_direct<C>(
    callback: &C,
    vcpu: u32,
    pc: u64,
    mem: &mut GuestMemory,
    info: &MemAccessInfo,
    requests: &mut Requests,
) -> bool
where
    C: Fn(&mut CallbackContext<'_>, &MemAccessInfo),
{
    let mut ctx = CallbackContext {
        pc,
        ..CallbackContext::new(vcpu, mem)
    };
    callback(&mut ctx, info);
    requests.merge(ctx.requests);
    requests.any() || take_asked_on_this_thread()
}
