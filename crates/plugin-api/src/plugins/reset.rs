//! `reset`: counts instructions and blocks, and resets itself from inside
//! a block execution callback every `every=N` guest instructions,
//! registering everything again in the reset's completion. It measures
//! what a reset costs (flush and re-translation included) and is the
//! counterpart of `bench/qemu-plugins/reset.c`, which does the same with
//! QEMU's `qemu_plugin_reset`.
//!
//! The trigger counts instructions, not blocks: where a block ends is each
//! translator's choice, but the instruction count is not, so both
//! emulators reset the same number of times on the same program (as long
//! as no block holds `N` instructions or more). The check runs on block
//! entry: a reset is requested at the first block entered once the count
//! reached the next multiple of `N`, and no new request is made until its
//! completion has run.
//!
//! ```
//! use std::sync::Arc;
//! use tcgkit_plugin_api::plugins::reset::PeriodicReset;
//! use tcgkit_plugin_api::{GuestInfo, PluginArgs, PluginHost};
//! use tcgkit_riscv::{Cpu, Rv64};
//! use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, Perms};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // li a0, 0; li a1, 10; loop: addi a0, a0, 1; blt a0, a1, loop; ecall
//! let code: [u32; 5] = [0x0000_0513, 0x00a0_0593, 0x0015_0513, 0xfeb5_4ee3, 0x0000_0073];
//! let mut mem = GuestMemory::new();
//! mem.map(0x1000, 0x1000, Perms::READ | Perms::EXEC)?;
//! mem.write_initial(0x1000, &code.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>())?;
//!
//! let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()));
//! let args = PluginArgs::new("reset", [("every", "5")]);
//! let plugin = Arc::new(PeriodicReset::from_args(&args, host.guest())?);
//! host.install("reset", plugin.clone())?;
//! let mut engine = Engine::new(Rv64::new());
//! host.attach(&mut engine);
//! host.vcpu_init(0);
//! let mut cpu = Cpu::new();
//! cpu.set_pc(0x1000);
//! assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
//! host.vcpu_exit(0);
//! host.finish()?;
//!
//! // 23 instructions: thresholds 5, 10, 15 and 20 are each seen on a
//! // later block entry, and every reset completed.
//! assert_eq!(plugin.insns(), 2 + 2 * 10 + 1);
//! assert_eq!((plugin.requests(), plugin.resets()), (4, 4));
//! assert!(plugin.report().starts_with("resets: 4\ntotal insns: 23\n"));
//! # Ok(()) }
//! ```

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tcgkit_tcg_core::{InlineKind, Scoreboard};

use crate::{Access, GuestInfo, Plugin, PluginArgs, PluginError, PluginHandle};

const INSNS: usize = 0;
const BLOCKS: usize = 1;

/// The `reset` plugin.
#[derive(Debug)]
pub struct PeriodicReset {
    every: u64,
    inline: bool,
    /// Instructions and blocks executed, per vCPU; kept across resets.
    board: Arc<Scoreboard>,
    /// The instruction count at which the next reset is requested.
    next: AtomicU64,
    /// A reset was requested and its completion has not run yet.
    pending: AtomicBool,
    requests: AtomicU64,
    completions: AtomicU64,
    /// Blocks translated under the current registration (since the last
    /// completion): what the flush of the next reset throws away.
    translated_since: AtomicU64,
    translated: AtomicU64,
    cached_at_resets: AtomicU64,
    max_cached_at_reset: AtomicU64,
}

pub(crate) fn factory(
    args: &PluginArgs,
    guest: &GuestInfo,
) -> Result<Arc<dyn Plugin>, PluginError> {
    Ok(Arc::new(PeriodicReset::from_args(args, guest)?))
}

impl PeriodicReset {
    /// Builds it from `every=N` (required: guest instructions between
    /// resets, 0 never resets) and `inline=on|off` (default on: count
    /// instructions with an inline add rather than a call).
    pub fn from_args(args: &PluginArgs, guest: &GuestInfo) -> Result<Self, PluginError> {
        args.check_known(&["every", "inline"])?;
        if args.get("every").is_none() {
            return Err(PluginError::BadArgument {
                plugin: "reset".to_owned(),
                key: "every".to_owned(),
                reason: "missing: give every=N, the guest instructions between resets \
                         (0 never resets)"
                    .to_owned(),
            });
        }
        let every = args.u64_in("every", 0, 0..=u64::MAX)?;
        Ok(PeriodicReset {
            every,
            inline: args.bool("inline", true)?,
            board: super::board(2, guest.vcpus),
            // `every=0` never resets but makes the same check on every block
            // entry, so that it is the baseline a reset's cost is measured
            // against (the difference is then the resets alone).
            next: AtomicU64::new(if every == 0 { u64::MAX } else { every }),
            pending: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            translated_since: AtomicU64::new(0),
            translated: AtomicU64::new(0),
            cached_at_resets: AtomicU64::new(0),
            max_cached_at_reset: AtomicU64::new(0),
        })
    }

    /// Instructions executed by all vCPUs.
    pub fn insns(&self) -> u64 {
        self.board.sum(INSNS)
    }

    /// Blocks entered by all vCPUs.
    pub fn blocks(&self) -> u64 {
        self.board.sum(BLOCKS)
    }

    /// Resets requested with [`PluginHandle::reset`].
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Acquire)
    }

    /// Resets completed (their completion ran).
    pub fn resets(&self) -> u64 {
        self.completions.load(Ordering::Acquire)
    }

    /// Blocks translated while the plugin was registered.
    pub fn translated(&self) -> u64 {
        self.translated.load(Ordering::Acquire)
    }

    /// Blocks translated since the previous reset, summed over every reset:
    /// divided by [`PeriodicReset::resets`], the mean number of blocks each
    /// reset flushed (and the run then translated again, where executed).
    pub fn cached_at_resets(&self) -> u64 {
        self.cached_at_resets.load(Ordering::Acquire)
    }

    /// The most blocks one reset flushed.
    pub fn max_cached_at_reset(&self) -> u64 {
        self.max_cached_at_reset.load(Ordering::Acquire)
    }

    /// The text printed at exit; `bench/qemu-plugins/reset.c` prints the
    /// same lines.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let resets = self.resets();
        let mean = match resets {
            0 => 0.0,
            n => self.cached_at_resets() as f64 / n as f64,
        };
        let _ = writeln!(s, "resets: {resets}");
        let _ = writeln!(s, "total insns: {}", self.insns());
        let _ = writeln!(s, "blocks executed: {}", self.blocks());
        let _ = writeln!(s, "blocks translated: {}", self.translated());
        let _ = writeln!(
            s,
            "blocks cached at reset: mean {mean:.1}, max {}",
            self.max_cached_at_reset()
        );
        s
    }

    /// Called on every block entry: requests a reset once the instruction
    /// count reached the next threshold.
    fn check(self: &Arc<Self>, vcpu: u32, handle: &PluginHandle) {
        self.board.add(vcpu, BLOCKS, 1);
        let seen = self.insns();
        if seen < self.next.load(Ordering::Relaxed)
            || self.every == 0
            || self.pending.swap(true, Ordering::AcqRel)
        {
            return;
        }
        // The next multiple of `every` after `seen`: a block longer than
        // `every` skips thresholds rather than queueing resets.
        let next = (seen / self.every)
            .saturating_add(1)
            .saturating_mul(self.every);
        self.next.store(next, Ordering::Relaxed);
        let me = Arc::clone(self);
        match handle.reset(move |h| me.completed(h)) {
            Ok(()) => {
                self.requests.fetch_add(1, Ordering::AcqRel);
            }
            // Uninstalled or being uninstalled: nothing to reset any more.
            Err(_) => self.pending.store(false, Ordering::Release),
        }
    }

    /// The reset's completion: books what the flush dropped and registers
    /// everything again.
    fn completed(self: Arc<Self>, handle: &PluginHandle) {
        let cached = self.translated_since.swap(0, Ordering::AcqRel);
        self.cached_at_resets.fetch_add(cached, Ordering::AcqRel);
        self.max_cached_at_reset.fetch_max(cached, Ordering::AcqRel);
        self.completions.fetch_add(1, Ordering::AcqRel);
        self.pending.store(false, Ordering::Release);
        self.register(handle);
    }

    fn register(self: Arc<Self>, handle: &PluginHandle) {
        let me = Arc::clone(&self);
        // One callback for every block entry, one for every instruction:
        // built once per registration, as QEMU plugins pass one function.
        let (check, h) = (Arc::clone(&self), handle.clone());
        let on_block =
            handle.shared_exec_callback(Access::NONE, move |ctx| check.check(ctx.vcpu(), &h));
        let board = Arc::clone(&self.board);
        let on_insn =
            handle.shared_exec_callback(Access::NONE, move |ctx| board.add(ctx.vcpu(), INSNS, 1));
        handle.on_tb_trans(move |tb| {
            me.translated.fetch_add(1, Ordering::Relaxed);
            me.translated_since.fetch_add(1, Ordering::Relaxed);
            tb.on_exec_shared(&on_block);
            for mut insn in tb.insns() {
                if me.inline {
                    insn.on_exec_inline(&me.board, INSNS, InlineKind::Add(1));
                } else {
                    insn.on_exec_shared(&on_insn);
                }
            }
        });
        // A reset drops atexit callbacks too (as in QEMU): register it again.
        let out = handle.clone();
        handle.on_atexit(move || out.outs(&self.report()));
    }
}

impl Plugin for PeriodicReset {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        // Its callbacks add to it: a row for every vCPU as it starts.
        handle.track_scoreboard(&self.board);
        self.register(handle);
        Ok(())
    }
}
