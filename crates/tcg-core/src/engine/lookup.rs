//! Finding the block to run next: the jump cache, the index, translation,
//! planning and re-planning, and the chain links a run of blocks follows.
//!
//! A block transition tries, in order: the previous block's chain slot
//! (`Generation::chained`: two successor slots per block, checked against
//! the target's liveness and flags), then the vCPU's jump cache
//! ([`Engine::find_block`]), then the generation's index, then
//! [`Engine::translate`]. Translation decodes up to a control-flow
//! instruction, [`MAX_BLOCK_INSNS`] instructions or the end of the page,
//! then asks the instrumentation for a plan ([`Engine::plan_block`]),
//! which the generation compiles, choosing how the block runs. After a
//! re-instrumentation a block keeps its decoded ops, id and links and is
//! planned again when next entered ([`Engine::replan`]). An engine
//! sharing translations (`cache/shared.rs`) first claims the block: it
//! takes the plan another engine published for the same bytes under the
//! same stamp, or plans it and publishes the plan.
//!
//! Out-of-line loops go on from one block into the next through
//! [`Engine::run_goes_on`] and [`Engine::link_after`], which make the
//! vCPU loop's checks (nothing pending, a usable link, a current plan) and
//! end a run after [`MAX_RUN_BLOCKS`] blocks.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Engine;
use super::plain::{BlockEnd, count};
use super::vcpu::{JumpEntry, Signals, Vcpu};
use crate::cache::{
    Claim, CountTally, Generation, PlanSource, SharedTranslation, SharedTranslations, TbHeader,
    TbOp,
};
use crate::frontend::{CpuExit, DecodeError, Frontend};
use crate::instrument::PlanData;
use crate::instrument::{InsnInfo, Instrumentation, Requests, TbPlan, TbView};
use crate::memory::{GuestMemory, PAGE_SIZE};

/// Most instructions in one block.
const MAX_BLOCK_INSNS: usize = 512;

/// The engine's fields [`Engine::plan_block`] uses, borrowed apart from
/// the rest so that the block's ops may be borrowed where they are.
struct PlanParts<'a, F: Frontend> {
    instrumentation: Option<&'a dyn Instrumentation>,
    frontend: &'a F,
    insns: &'a [InsnInfo],
    plan: &'a mut TbPlan,
}

/// At most this many blocks run in one out-of-line run before the vCPU
/// loop takes over again: it bounds the run's instruction count well
/// within a `u32`.
const MAX_RUN_BLOCKS: u32 = 128;

impl<F: Frontend> Engine<F> {
    /// Jump cache, then index, then translation: the path for block
    /// transitions direct chaining did not resolve (indirect jumps, first
    /// visits), kept out of line so the chained path stays small.
    #[inline(never)]
    pub(super) fn find_block(
        &mut self,
        vcpu: &mut Vcpu,
        pc: u64,
        flags: u32,
        mem: &mut GuestMemory,
    ) -> Result<u32, CpuExit> {
        let slot = Vcpu::jump_slot(pc);
        if let Some(e) = vcpu.jump_cache.get(slot)
            && e.pc == pc
            && e.generation == self.current.id
            && e.flags == flags
            && let Some(tb) = self.current.tbs.get(e.tb as usize)
            && !tb.dead
        {
            return Ok(e.tb);
        }
        self.find_block_slow(vcpu, slot, pc, flags, mem)
    }

    #[inline(never)]
    fn find_block_slow(
        &mut self,
        vcpu: &mut Vcpu,
        slot: usize,
        pc: u64,
        flags: u32,
        mem: &mut GuestMemory,
    ) -> Result<u32, CpuExit> {
        let id = match self.current.lookup(pc, flags) {
            Some(id) => {
                self.stats.index_hits += 1;
                id
            }
            None => {
                if self.current.tbs.len() >= self.max_tbs {
                    self.flush();
                    vcpu.announce(self.current.id);
                }
                self.translate(pc, flags, mem)?
            }
        };
        if let Some(e) = vcpu.jump_cache.get_mut(slot) {
            *e = JumpEntry {
                pc,
                generation: self.current.id,
                flags,
                tb: id,
            };
        }
        Ok(id)
    }

    /// Decodes a block at `pc` into the current generation.
    fn translate(&mut self, pc: u64, flags: u32, mem: &mut GuestMemory) -> Result<u32, CpuExit> {
        // The instrumentation's translate may read its scoreboards.
        self.pending_count.settle(&self.current);
        self.scratch_ops.clear();
        self.scratch_raws.clear();
        self.scratch_insns.clear();
        let page = pc / PAGE_SIZE;
        let mut at = pc;
        loop {
            match self.frontend.decode(mem, at) {
                Ok(d) => {
                    let len = d.len.max(1);
                    // Blocks stay within a page plus one instruction, so
                    // the offset always fits.
                    let offset = u32::try_from(at.wrapping_sub(pc)).unwrap_or(u32::MAX);
                    self.scratch_ops.push(TbOp {
                        op: d.op,
                        offset,
                        len,
                        accesses_memory: d.accesses_memory,
                    });
                    self.scratch_raws.push(d.raw);
                    self.scratch_insns.push(InsnInfo {
                        pc: at,
                        len,
                        raw: d.raw,
                    });
                    at = at.wrapping_add(u64::from(len));
                    // Blocks stop at control flow, at a size cap, and at a
                    // page boundary (so page-granular invalidation stays exact).
                    if d.ends_block
                        || self.scratch_ops.len() >= MAX_BLOCK_INSNS
                        || at / PAGE_SIZE != page
                    {
                        break;
                    }
                }
                Err(e) if self.scratch_ops.is_empty() => {
                    return Err(match e {
                        DecodeError::Fault(fault) => CpuExit::Fault(fault),
                        DecodeError::Illegal { raw, .. } => CpuExit::IllegalInstruction { raw },
                    });
                }
                // A later instruction that cannot be decoded starts its own
                // block, so the exit is raised exactly when it is reached.
                Err(_) => break,
            }
        }
        let size = u32::try_from(at.wrapping_sub(pc)).unwrap_or(u32::MAX);
        let sharing = self.sharing(false);
        let mut claimed = false;
        if let Some((shared, source)) = &sharing {
            match shared.claim(pc, flags, size, &self.scratch_raws, *source) {
                Claim::Published(published) => {
                    let id = self.insert_block(pc, flags, size, published.plan.as_ref());
                    self.stats.plans_adopted += 1;
                    return Ok(id);
                }
                Claim::Claimed => claimed = true,
                Claim::Unclaimed => {}
            }
        }
        // (A bare translation does not call out to plan at all.)
        let planned = self.instrumentation.is_some()
            && Self::plan_block(
                PlanParts {
                    instrumentation: self.instrumentation.as_deref(),
                    frontend: &self.frontend,
                    insns: &self.scratch_insns,
                    plan: &mut self.scratch_plan,
                },
                &self.scratch_ops,
                pc,
                flags,
                size,
            );
        if let Some((shared, source)) = sharing {
            // Published only if the plan was made under the source read
            // before planning (a reset in between changed it).
            if self.plan_source() == Some(source) {
                shared.publish(pc, flags, self.scratch_translation(size, source, planned));
            } else if claimed {
                shared.release(pc, flags);
            }
        }
        // The plan is taken out while the block goes in, then kept for
        // the next translation (with its memo).
        let mut plan = std::mem::take(&mut self.scratch_plan);
        let id = self.insert_block(pc, flags, size, planned.then_some(&*plan.data()));
        // The plan's actions are compiled into the generation now. (With
        // no instrumentation nothing was attached: a bare translation
        // skips this.)
        if self.instrumentation.is_some() {
            plan.clear();
        }
        self.scratch_plan = plan;
        self.stats.tbs_translated += 1;
        if let Some(events) = &mut self.events {
            events.block_translated(pc, count(self.scratch_ops.len()), size);
        }
        Ok(id)
    }

    /// Puts the block just decoded (the scratch ops) into the current
    /// generation with `plan`.
    fn insert_block(&mut self, pc: u64, flags: u32, size: u32, plan: Option<&PlanData>) -> u32 {
        let shared = self.current.count_tally;
        let id = self
            .current
            .insert(pc, flags, size, &self.scratch_ops, &self.scratch_raws, plan);
        self.count_tally_changed(shared);
        if self.jit_config.enabled {
            self.current.jit.ensure(id);
        }
        id
    }

    /// The shared translations and what this engine plans under, if it
    /// shares translations and its plans may be shared; for re-planning
    /// (`replan`), only while another engine shares them too.
    fn sharing(&self, replan: bool) -> Option<(Arc<SharedTranslations>, PlanSource)> {
        let shared = self.translations.as_ref()?;
        if replan && Arc::strong_count(shared) < 2 {
            return None;
        }
        Some((Arc::clone(shared), self.plan_source()?))
    }

    /// The block just decoded and planned (the scratch raws and plan), to
    /// publish.
    fn scratch_translation(
        &mut self,
        size: u32,
        source: PlanSource,
        planned: bool,
    ) -> SharedTranslation {
        SharedTranslation {
            size,
            raws: self.scratch_raws.as_slice().into(),
            source,
            plan: planned.then(|| self.scratch_plan.data().clone()),
        }
    }

    /// Asks the instrumentation for the plan of the block whose
    /// instructions are `parts.insns` into `parts.plan`; returns whether
    /// anything was attached. The block's `ops` are read where they are
    /// (re-planning takes them from the generation, not from a copy),
    /// hence the engine's fields passed apart.
    fn plan_block(
        parts: PlanParts<'_, F>,
        ops: &[TbOp<F::Op>],
        pc: u64,
        flags: u32,
        size: u32,
    ) -> bool {
        let PlanParts {
            instrumentation,
            frontend,
            insns,
            plan,
        } = parts;
        let Some(instr) = instrumentation else {
            return false;
        };
        plan.reset(insns.len());
        let disassembler = |raw: &[u8], pc: u64| frontend.disassemble(raw, pc);
        let view = TbView {
            pc,
            flags,
            size: u64::from(size),
            insns,
            disassembler: &disassembler,
            register_names: frontend.register_names(),
        };
        instr.translate(&view, plan);
        // Memory actions on an instruction that never accesses memory
        // could never run: dropping them lets such instructions (most
        // of them, for a plugin that watches every instruction's
        // accesses) run without a hook.
        plan.finish(|i| ops.get(i).is_some_and(|op| op.accesses_memory));
        !plan.is_empty()
    }

    /// Plans block `id` again after a re-instrumentation, from its cached
    /// ops: no fetch, no decode, and it keeps its id.
    #[cold]
    #[inline(never)]
    pub(super) fn replan(&mut self, id: u32) {
        self.pending_count.settle(&self.current);
        let Some(&tb) = self.current.tbs.get(id as usize) else {
            return;
        };
        self.scratch_insns.clear();
        let range = tb.ops_start as usize..tb.ops_end as usize;
        let (Some(ops), Some(raws)) = (
            self.current.ops.get(range.clone()),
            self.current.raws.get(range),
        ) else {
            return;
        };
        let sharing = self.sharing(true);
        let mut claimed = false;
        if let Some((shared, source)) = &sharing {
            match shared.claim(tb.pc, tb.flags, tb.size, raws, *source) {
                Claim::Published(published) => {
                    let before = self.current.count_tally;
                    self.current.replan(id, published.plan.as_ref());
                    self.count_tally_changed(before);
                    self.stats.plans_adopted += 1;
                    return;
                }
                Claim::Claimed => claimed = true,
                Claim::Unclaimed => {}
            }
        }
        self.scratch_insns
            .extend(ops.iter().zip(raws).map(|(op, &raw)| InsnInfo {
                pc: tb.pc.wrapping_add(u64::from(op.offset)),
                len: op.len,
                raw,
            }));
        let parts = PlanParts {
            instrumentation: self.instrumentation.as_deref(),
            frontend: &self.frontend,
            insns: &self.scratch_insns,
            plan: &mut self.scratch_plan,
        };
        let planned = Self::plan_block(parts, ops, tb.pc, tb.flags, tb.size);
        if let Some((shared, source)) = sharing {
            if self.plan_source() == Some(source) {
                let translation = SharedTranslation {
                    size: tb.size,
                    raws: raws.into(),
                    source,
                    plan: planned.then(|| self.scratch_plan.data().clone()),
                };
                shared.publish(tb.pc, tb.flags, translation);
            } else if claimed {
                shared.release(tb.pc, tb.flags);
            }
        }
        let shared = self.current.count_tally;
        self.current
            .replan(id, planned.then_some(&*self.scratch_plan.data()));
        self.count_tally_changed(shared);
        self.scratch_plan.clear();
        self.stats.tbs_replanned += 1;
    }

    /// After planning a block: if the inline counters stopped being one
    /// shared count, counter blocks may no longer jump into each other.
    fn count_tally_changed(&mut self, before: CountTally) {
        if matches!(before, CountTally::Shared { .. }) && self.current.count_tally != before {
            self.current.jit.unlink_all();
        }
    }

    /// Whether a run of out-of-line blocks goes on after block `id` ended
    /// at `next_pc` (with no exit) as the `blocks`-th of its run: into the
    /// block `id` is chained to, if nothing asked the loop to stop, the link
    /// is usable, and that block's plan is current. The vCPU loop does the
    /// same checks before any block; what a run skips is the rest of that
    /// loop (quiescent point, pending signals' handling, counters), which
    /// nothing in a run can need: a flush or exit request, a callback's or
    /// another thread's, ends the run first.
    #[inline(always)]
    pub(super) fn run_goes_on<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        requests: &Requests,
        id: u32,
        next_pc: u64,
        flags: u32,
        blocks: u32,
    ) -> Option<(u32, &'g TbHeader)> {
        Self::run_link(generation, signals, requests, id, next_pc, flags, blocks)
            .filter(|&(_, tb)| tb.plan_version == generation.plan_version)
    }

    /// [`Engine::run_link`] after a block of a run ended with `end`:
    /// `None` after an exit.
    #[inline(always)]
    pub(super) fn link_after<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        id: u32,
        end: &BlockEnd,
        cpu: &F::Cpu,
        blocks: u32,
    ) -> Option<(u32, &'g TbHeader)> {
        if end.exit.is_some() {
            return None;
        }
        let flags = F::tb_flags(cpu);
        Self::run_link(
            generation,
            signals,
            &end.requests,
            id,
            end.next_pc,
            flags,
            blocks,
        )
    }

    /// [`Engine::run_goes_on`] whatever plan the next block has.
    #[inline(always)]
    fn run_link<'g>(
        generation: &'g Generation<F::Op>,
        signals: &Signals,
        requests: &Requests,
        id: u32,
        next_pc: u64,
        flags: u32,
        blocks: u32,
    ) -> Option<(u32, &'g TbHeader)> {
        if blocks >= MAX_RUN_BLOCKS
            || requests.any()
            || signals.pending.load(Ordering::Relaxed) != 0
        {
            return None;
        }
        let (next, tb) = generation.chained(id, next_pc, flags)?;
        let jit = signals.jit_threshold.load(Ordering::Relaxed);
        if jit != 0 {
            // With the JIT, a run goes on only into blocks that stay
            // interpreted for now: the vCPU loop compiles a block that
            // became hot and runs one that has code.
            let start = crate::jit::start(generation, next, jit - 1);
            if start != crate::jit::Start::Run || crate::jit::code_of(generation, next).is_some() {
                return None;
            }
        }
        Some((next, tb))
    }
}
