//! The QEMU TCG plugin model in safe Rust.
//!
//! A [`Plugin`] is a Rust type built from `name,key=value,...` arguments
//! (as QEMU's `-plugin`) and installed into a [`PluginHost`], which
//! implements tcg-core's [`Instrumentation`](tcgkit_tcg_core::Instrumentation).
//! On install, the plugin registers callbacks through its [`PluginHandle`]:
//! vCPU init/exit/idle/resume, block translation ([`TbTrans`]: a read-only
//! view of the block, its instructions' addresses, bytes, disassembly and
//! symbols), system calls, flush and atexit, and the guest's modules as the
//! embedder reports them ([`PluginHandle::on_module_load`],
//! [`TbTrans::module`]). At translation it attaches to
//! blocks and instructions execution callbacks, memory callbacks filtered
//! by direction, inline scoreboard operations that cost no call, and
//! conditional callbacks ([`TbTrans::on_exec_cond`]). Callbacks read guest
//! registers and memory only if they declared it ([`Access`]). One callback
//! meant for many blocks or instructions can be built once
//! ([`PluginHandle::shared_exec_callback`],
//! [`PluginHandle::shared_mem_callback`]) and attached without a new
//! closure each time, as a QEMU plugin passes one function.
//!
//! # Reset and uninstall from inside any callback
//!
//! [`PluginHandle::reset`] and [`PluginHandle::uninstall`] may be called
//! from any callback, on any vCPU, or from another thread. They take effect
//! at the next safe point, the end of the executing block at the latest:
//! until then the block's remaining callbacks, including the executing
//! instruction's memory callbacks, still run; then the instrumentation of
//! every translated block is retired, and
//! the completion runs exactly once. For a reset that is tcg-core's
//! re-instrumentation: O(1), each block keeps its decoded code and is
//! planned again before it next runs. For an uninstall it is a flush:
//! tcg-core retires the cache generation in O(1) and frees it only once no
//! vCPU can be inside it. After the completion, no callback of the old
//! registration runs: no block carries it any more (every block's plan is
//! retired before the completion runs, and planned again before the block
//! next runs), and a shared callback made before the reset is no longer
//! attached. Other plugins are untouched. This makes a known QEMU bug impossible (a reset
//! from the instruction callback of a load freed the callback arrays while
//! the vCPU still pointed at the load's memory callbacks): here the memory
//! callbacks are a borrow of a generation that outlives the instruction.
//!
//! One host may instrument several engines at once, one per vCPU thread
//! ([`PluginHost::attach`] each). A reset or uninstall then completes once
//! every attached engine has retired its blocks: each waits at its safe
//! point until the last one gets there, as QEMU's vCPUs wait outside an
//! exclusive section, and the completion runs on that last thread. Every
//! event is counted exactly once, by the old registration or the new one,
//! on every thread.
//!
//! A callback that panics is caught: its plugin is uninstalled with a
//! message naming it on the plugin output and in [`PluginHost::failures`].
//! Its callbacks stop after the instruction that was executing (the block
//! ends there; callbacks still due for that instruction run, and a panic
//! among them is not reported again). Its atexit callbacks still run at
//! [`PluginHost::finish`]; the guest and the other plugins go on.
//!
//! # Bundled plugins
//!
//! [`PluginRegistry::bundled`] holds `insn`, `mem`, `bb`, `hotblocks`,
//! `howvec`, `syscall`, `cache` and `drcov` (see [`plugins`]), and
//! `reset`, which resets itself every N instructions to measure what a
//! reset costs. Plugins learn about the guest from [`GuestInfo`],
//! including, in user mode, the program it runs ([`GuestProgram`]: QEMU's
//! path to the binary, start and end of code, and entry).
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use tcgkit_plugin_api::plugins::insn::InsnCount;
//! use tcgkit_plugin_api::*;
//! use tcgkit_riscv::{Cpu, Rv64};
//! use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, Perms};
//!
//! /// Counts executed `addi` instructions and resets itself after the first.
//! #[derive(Default)]
//! struct Addi { seen: AtomicU64, resets: AtomicU64 }
//!
//! fn register(me: Arc<Addi>, handle: &PluginHandle) {
//!     let h = handle.clone();
//!     handle.on_tb_trans(move |tb| {
//!         for mut insn in tb.insns() {
//!             if insn.disassembly().starts_with("addi") {
//!                 let (me, h) = (me.clone(), h.clone());
//!                 insn.on_exec(Access::REGISTERS, move |ctx| {
//!                     assert!(ctx.read_register("a0").is_ok());
//!                     if me.seen.fetch_add(1, Ordering::Relaxed) == 0 {
//!                         // Safe from inside a callback: takes effect after this instruction.
//!                         let me = me.clone();
//!                         h.reset(move |h| {
//!                             me.resets.fetch_add(1, Ordering::Relaxed);
//!                             register(me, h);
//!                         }).unwrap();
//!                     }
//!                 });
//!             }
//!         }
//!     });
//! }
//!
//! impl Plugin for Addi {
//!     fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
//!         register(self, handle);
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // li a0, 0; li a1, 10; loop: addi a0, a0, 1; blt a0, a1, loop; ecall
//! let code: [u32; 5] = [0x0000_0513, 0x00a0_0593, 0x0015_0513, 0xfeb5_4ee3, 0x0000_0073];
//! let mut mem = GuestMemory::new();
//! mem.map(0x1000, 0x1000, Perms::READ | Perms::EXEC)?;
//! mem.write_initial(0x1000, &code.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>())?;
//!
//! let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()));
//! let counter = Arc::new(InsnCount::from_args(&PluginArgs::new("insn", [("inline", "on")]), host.guest())?);
//! host.install("insn", counter.clone())?;
//! let addi = Arc::new(Addi::default());
//! host.install("addi", addi.clone())?;
//!
//! let mut engine = Engine::new(Rv64::new());
//! host.attach(&mut engine);
//! host.vcpu_init(0);
//! let mut cpu = Cpu::new();
//! cpu.set_pc(0x1000);
//! assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
//! host.vcpu_exit(0);
//! host.finish()?;
//!
//! assert_eq!(counter.total(), 2 + 2 * 10 + 1);
//! assert_eq!(addi.seen.load(Ordering::Relaxed), 10); // `li` disassembles as `li`
//! assert_eq!(addi.resets.load(Ordering::Relaxed), 1);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod args;
mod error;
mod host;
mod modules;
pub mod plugins;
mod registry;
mod rounds;
mod symbols;
mod trans;

pub use args::{PluginArgs, PluginSpec};
pub use error::PluginError;
pub use host::{
    GuestInfo, GuestProgram, Plugin, PluginHandle, PluginHost, PluginId, PluginLifecycle,
};
pub use modules::ModuleInfo;
pub use registry::{PluginFactory, PluginRegistry};
pub use symbols::SymbolTable;
pub use trans::{Access, ExecContext, InsnTrans, SharedExecCallback, SharedMemCallback, TbTrans};

pub use tcgkit_tcg_core::{
    Compare, InlineKind, MemAccessInfo, MemFilter, Scoreboard, ScoreboardEntry,
};
