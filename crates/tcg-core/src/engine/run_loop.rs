//! The vCPU loop: [`Engine::run`] and [`Engine::run_vcpu`].
//!
//! Each turn of the loop starts at a quiescent point (the vCPU announces
//! the current generation, retired ones are reclaimed, pending signals are
//! honoured), finds the next block (the previous block's chain slot, then
//! [`Engine::find_block`]) and runs it as its `ExecMode` says: a plain or
//! Count block in the loop itself (with the JIT on, once it is hot, as
//! compiled code, which may chain into further compiled blocks), every
//! other block out of line, in the loop of its mode (see the parent
//! module's table), which may run several blocks before it returns.
//! Requests made by the block's callbacks are honoured here, between
//! blocks.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Engine;
use super::vcpu::{EMPTY_JUMP, PENDING_EXIT, Vcpu};
use crate::cache::{ExecMode, NONE};
use crate::frontend::{CpuExit, Frontend};
use crate::instrument::Requests;
use crate::jit::Start;
use crate::memory::GuestMemory;

impl<F: Frontend> Engine<F> {
    /// Runs the built-in vCPU (index 0) until something needs the embedder:
    /// a system call, breakpoint, fault, illegal instruction or exit
    /// request. The vCPU's pc is left at the instruction that caused it.
    pub fn run(&mut self, cpu: &mut F::Cpu, mem: &mut GuestMemory) -> CpuExit {
        let mut vcpu = match self.main_vcpu.take() {
            Some(v) => v,
            None => Box::new(self.new_vcpu()),
        };
        let exit = self.run_vcpu(&mut vcpu, cpu, mem);
        // Nothing can execute on the built-in context until the next `run`,
        // so retired generations need not wait for it.
        vcpu.go_offline();
        self.reclaim();
        self.main_vcpu = Some(vcpu);
        exit
    }

    /// Runs `vcpu` (a context from [`Engine::new_vcpu`]) on `cpu`; see
    /// [`Engine::run`].
    // Kept out of `run`: inlined there, the hot loop was measurably slower.
    #[inline(never)]
    pub fn run_vcpu(
        &mut self,
        vcpu: &mut Vcpu,
        cpu: &mut F::Cpu,
        mem: &mut GuestMemory,
    ) -> CpuExit {
        if vcpu.engine != self.id {
            // A context from another engine: adopt it (its cache is invalid here).
            vcpu.engine = self.id;
            vcpu.jump_cache.fill(EMPTY_JUMP);
            self.epochs.push(Arc::clone(&vcpu.epoch));
        }
        // The pc lives in a local between blocks and is written back to the
        // register file only where something outside the loop can see it
        // (callbacks, exits), saving a store and a load per block.
        let mut pc = F::pc(cpu);
        // What this thread asked of engines before the run was not asked
        // by a callback of this run's blocks.
        super::vcpu::forget_asked_on_this_thread();
        // Counters also stay local and are added to the stats on the way out.
        let mut blocks = 0u64;
        let mut insns = 0u64;
        // The block that just ran: its chain slots map the next pc straight
        // to a block id. After a flush it may name an unrelated block of the
        // new generation; that is harmless, because a chain slot only ever
        // says "pc P is translated as block Y of this generation", and
        // `chained` re-checks that Y is alive and matches the flags.
        let mut prev = NONE;
        // The empty chain cell the last compiled run left through (see
        // `JitBlocks::link`), linked to the next block if that is compiled.
        let mut unlinked = 0u64;
        let mut unlinked_in = (0u64, 0u32);
        let mut unlinked_class = 0u64;
        let mut jit_blocks = 0u64;
        let mut jit_entries = 0u64;
        let exit = loop {
            // Quiescent point: this vCPU holds no reference into any block.
            vcpu.announce(self.current.id);
            // Mappings other threads changed take effect here.
            mem.sync();
            if !self.retired.is_empty() {
                self.reclaim();
            }
            if self.signals.pending.load(Ordering::Relaxed) != 0 {
                let pending = self.signals.pending.swap(0, Ordering::Acquire);
                // Taken now: a note of it left by a callback whose loop
                // does not look at notes must not end a later block early.
                super::vcpu::forget_asked_on_this_thread();
                if self.apply_code_requests(pending) {
                    vcpu.announce(self.current.id);
                }
                if pending & PENDING_EXIT != 0 {
                    break CpuExit::ExitRequested;
                }
            }

            let flags = F::tb_flags(cpu);
            let (tb_id, tb) = match self.current.chained(prev, pc, flags) {
                Some(hit) => hit,
                None => {
                    let id = match self.find_block(vcpu, pc, flags, mem) {
                        Ok(id) => id,
                        Err(exit) => break exit,
                    };
                    self.current.link(prev, pc, id);
                    match self.current.tbs.get(id as usize) {
                        Some(tb) => (id, tb),
                        None => {
                            // Unreachable by construction (ids come from this
                            // generation); recover by starting from an empty cache.
                            self.flush();
                            continue;
                        }
                    }
                }
            };
            if tb.plan_version != self.current.plan_version {
                // Cached before a re-instrumentation: plan it again, then
                // look it up anew (through the same chain slot).
                self.replan(tb_id);
                continue;
            }
            let tb = if self.jit_config.enabled {
                match crate::jit::start(&self.current, tb_id, self.jit_config.threshold) {
                    Start::Run => tb,
                    start => {
                        // Hot, and compiled now or by the background
                        // compiler: enter it anew (the same lookup finds
                        // it), compiled.
                        if self.jit_start(tb_id, start) {
                            continue;
                        }
                        match self.current.tbs.get(tb_id as usize) {
                            Some(tb) => tb,
                            None => continue,
                        }
                    }
                }
            } else {
                tb
            };
            let current = &self.current;
            prev = tb_id;
            blocks += 1;
            if self.jit_config.enabled {
                if unlinked != 0 {
                    // The compiled block before this one left through an
                    // empty chain cell towards this one, in this generation
                    // and plan version.
                    if unlinked_in == (current.id, current.plan_version)
                        && crate::jit::may_link_bits(current, unlinked_class, tb)
                        && let Some(code) = crate::jit::code_of(current, tb_id)
                    {
                        current.jit.link(unlinked, code);
                    }
                    unlinked = 0;
                }
                if tb.mode != ExecMode::Count {
                    // Callbacks (of this block or one it jumps into) may
                    // read the scoreboards.
                    self.pending_count.settle(current);
                }
                if let Some(c) = crate::jit::run::<F>(current, tb_id, vcpu.index, cpu, mem) {
                    jit_blocks += c.blocks;
                    jit_entries += 1;
                    blocks += c.blocks.saturating_sub(1);
                    if c.exit.is_none() {
                        unlinked = c.unlinked;
                        unlinked_in = (current.id, current.plan_version);
                        unlinked_class =
                            crate::jit::chain_class(current, tb).map_or(0, |c| c as u64);
                    }
                    if c.blocks > 1 {
                        prev = current.jit.unlinked_from(c.unlinked).unwrap_or(NONE);
                    }
                    let executed = u32::try_from(c.executed).unwrap_or(u32::MAX);
                    if tb.mode == ExecMode::Count {
                        self.pending_count
                            .add_count(current, tb, vcpu.index, executed);
                    }
                    insns += c.executed;
                    pc = c.pc;
                    let exit = match c.exit {
                        Some(exit) => {
                            let end = Self::exit_at(exit, c.pc, c.len, executed, c.requests);
                            pc = end.next_pc;
                            end.exit
                        }
                        None => None,
                    };
                    if c.requests.any() {
                        unlinked = 0;
                        self.block_requests(vcpu, c.requests);
                    }
                    match exit {
                        None => {}
                        Some(CpuExit::FlushCode) => {
                            unlinked = 0;
                            self.flush()
                        }
                        Some(exit) => break exit,
                    }
                    continue;
                }
            }
            // Interpreted. Two copies of the block epilogue: the plain one
            // (also used by blocks whose only instrumentation is an inline
            // instruction counter, batched across blocks) has no callback
            // requests to look at. Other blocks of inline adds only run out
            // of line, in runs (`exec_tally_run`).
            if matches!(tb.mode, ExecMode::Plain | ExecMode::Count) {
                let end = Self::exec_plain(current, tb, cpu, mem);
                if tb.mode == ExecMode::Count {
                    self.pending_count
                        .add_count(current, tb, vcpu.index, end.executed);
                }
                insns += u64::from(end.executed);
                pc = end.next_pc;
                match end.exit {
                    None => {}
                    Some(CpuExit::FlushCode) => {
                        unlinked = 0;
                        self.flush()
                    }
                    Some(exit) => break exit,
                }
            } else {
                unlinked = 0;
                // Callbacks may read the scoreboards.
                self.pending_count.settle(current);
                F::set_pc(cpu, pc);
                // Instrumented blocks run out of line (see `exec_hooked`),
                // possibly several in a row.
                let run = match tb.mode {
                    ExecMode::MemEach => {
                        Self::exec_watched(current, &self.signals, vcpu.index, tb_id, tb, cpu, mem)
                    }
                    ExecMode::Steps | ExecMode::StepsWithMemory => {
                        self.exec_steps_run(vcpu.index, tb_id, cpu, mem)
                    }
                    ExecMode::OnEntry => {
                        Self::exec_on_entry(current, &self.signals, vcpu.index, tb_id, tb, cpu, mem)
                    }
                    ExecMode::Tally => Self::exec_tally_run(
                        current,
                        &self.signals,
                        vcpu.index,
                        tb_id,
                        tb,
                        cpu,
                        mem,
                    ),
                    ExecMode::CallEachWithMem => Self::exec_watched_calling(
                        current,
                        &self.signals,
                        vcpu.index,
                        tb_id,
                        tb,
                        cpu,
                        mem,
                    ),
                    ExecMode::CallList => Self::exec_call_list(
                        current,
                        &self.signals,
                        vcpu.index,
                        tb_id,
                        tb,
                        cpu,
                        mem,
                    ),
                    _ => Self::exec_hooked(current, &self.signals, vcpu.index, tb_id, tb, cpu, mem),
                };
                prev = run.last;
                blocks += u64::from(run.blocks) - 1;
                let end = run.end;
                insns += u64::from(end.executed);
                pc = end.next_pc;
                if end.requests.any() {
                    self.block_requests(vcpu, end.requests);
                }
                match end.exit {
                    None => {}
                    // fence.i: drop every translation here, at a safe point,
                    // and resume after the instruction.
                    Some(CpuExit::FlushCode) => self.flush(),
                    Some(exit) => break exit,
                }
            }
        };
        F::set_pc(cpu, pc);
        self.pending_count.settle(&self.current);
        self.stats.blocks_executed += blocks;
        self.stats.insns_executed += insns;
        self.stats.compiled_blocks_executed += jit_blocks;
        self.stats.compiled_entries += jit_entries;
        exit
    }

    /// Honours a flush or exit requested by a callback of the block that
    /// just ended (a safe point).
    #[cold]
    #[inline(never)]
    fn block_requests(&mut self, vcpu: &mut Vcpu, requests: Requests) {
        if requests.flush() {
            self.flush();
            vcpu.announce(self.current.id);
        } else if requests.reinstrument() {
            self.reinstrument();
            vcpu.announce(self.current.id);
        }
        if requests.exit() {
            self.signals
                .pending
                .fetch_or(PENDING_EXIT, Ordering::Relaxed);
        }
    }
}
