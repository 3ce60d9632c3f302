//! plugin-api costs on real RV64 code (the riscv frontend), per guest
//! instruction: no plugin, the `insn` plugin's inline counter and
//! instruction callback, the `mem` plugin's memory callback, one vs four
//! callback plugins; and the cost of one `reset` requested from inside an
//! instruction callback with 10k blocks cached, two ways:
//! - `10k_tbs/with_reset` against `10k_tbs/cached`: the reset, then all
//!   10k blocks run again, so each is planned again (every plugin's
//!   `tb_trans` included): the worst case. `10k_tbs/bare_flush` is a flush
//!   and re-translation of the 10k blocks with no plugin at all.
//! - `hot_loop/one_reset` against `hot_loop/no_reset`: with the 10k blocks
//!   cached, a 100-iteration loop resets once from the callback of its
//!   first instruction: the reset, its completion, and planning again the
//!   blocks the loop runs afterwards.

// criterion_group! generates an undocumented function; this is a bench binary, not API.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tcgkit_plugin_api::{
    Access, GuestInfo, Plugin, PluginError, PluginHandle, PluginHost, PluginRegistry,
};
use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, Perms};

const CODE: u64 = 0x10000;
const DATA: u64 = 0x100000;
const ITERATIONS: u32 = 24 << 12; // lui a2, 24

/// `loop: ld t0,0(a0); ld t1,8(a0); sd t0,16(a0); addi a1,a1,1; blt a1,a2,loop`,
/// 98304 times: 2 loads and a store per 5 instructions.
fn loop_program() -> Vec<u32> {
    vec![
        0x0010_0537, // lui a0, 0x100
        0x0001_8637, // lui a2, 24
        0x0005_3283, // ld t0, 0(a0)
        0x0085_3303, // ld t1, 8(a0)
        0x0055_3823, // sd t0, 16(a0)
        0x0015_8593, // addi a1, a1, 1
        0xfec5_c8e3, // blt a1, a2, -16
        0x0000_0073, // ecall
    ]
}
const LOOP_INSNS: u64 = 2 + 5 * ITERATIONS as u64 + 1;

/// 10_000 blocks of `addi a1, a1, 1; j .+4`, then `ecall`; then, at
/// [`HOT_LOOP`], `li a2, 100; li a1, 0; loop: addi a1, a1, 1;
/// blt a1, a2, loop; ecall`.
fn many_blocks() -> Vec<u32> {
    let mut code: Vec<u32> = (0..10_000)
        .flat_map(|_| [0x0015_8593, 0x0040_006f])
        .collect();
    code.push(0x0000_0073);
    code.resize(((HOT_LOOP - CODE) / 4) as usize, 0);
    code.extend([
        0x0640_0613,
        0x0000_0593,
        0x0015_8593,
        0xfec5_cee3,
        0x0000_0073,
    ]);
    code
}
const HOT_LOOP: u64 = CODE + 0x14000;
const HOT_LOOP_INSNS: u64 = 2 + 2 * 100 + 1;

struct Machine {
    engine: Engine<Rv64>,
    mem: GuestMemory,
}

impl Machine {
    fn new(code: &[u32], host: Option<&PluginHost>) -> Self {
        let mut mem = GuestMemory::new();
        let code_len = (code.len() as u64 * 4).div_ceil(0x1000) * 0x1000;
        mem.map(CODE, code_len, Perms::READ | Perms::EXEC)
            .expect("map code");
        mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE)
            .expect("map data");
        let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
        mem.write_initial(CODE, &bytes).expect("load code");
        let mut engine = Engine::new(Rv64::new());
        if let Some(host) = host {
            host.attach(&mut engine);
        }
        Machine { engine, mem }
    }

    fn run(&mut self) {
        self.run_at(CODE);
    }

    fn run_at(&mut self, pc: u64) {
        let mut cpu = Cpu::new();
        cpu.set_pc(pc);
        assert_eq!(self.engine.run(&mut cpu, &mut self.mem), CpuExit::Syscall);
        black_box(cpu);
    }
}

fn host(specs: &[&str]) -> PluginHost {
    host_from(&PluginRegistry::bundled(), specs)
}

fn host_from(registry: &PluginRegistry, specs: &[&str]) -> PluginHost {
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()));
    for spec in specs {
        host.install_spec(registry, spec).expect("install");
    }
    host
}

fn dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("plugins/per_insn");
    group.throughput(Throughput::Elements(LOOP_INSNS));
    let cases: &[(&str, &[&str])] = &[
        ("none", &[]),
        ("inline_counter", &["insn,inline=on"]),
        ("insn_callback", &["insn"]),
        ("mem_callback", &["mem"]),
        ("mem_inline", &["mem,inline=on"]),
        ("1_plugin", &["insn"]),
        ("4_plugins", &["insn", "insn", "insn", "insn"]),
        // The README's main job: an instruction and a memory callback.
        ("insn_and_mem", &["insn", "mem"]),
        // Inline adds on block entry (QEMU's `bb` plugin, inline).
        ("block_counter_inline", &["bb,inline=on"]),
        // A callback of its own on every instruction and a memory
        // callback on every access (QEMU's contrib `cache` plugin).
        ("cache_sim", &["cache"]),
    ];
    for &(name, specs) in cases {
        let host = (!specs.is_empty()).then(|| host(specs));
        let mut machine = Machine::new(&loop_program(), host.as_ref());
        machine.run(); // translate once
        group.bench_function(name, |b| b.iter(|| machine.run()));
    }
    // `insn` as `tcgkit run` builds it: its callback compiled into the
    // engine's loop (`PluginRegistry::bundled_for`).
    let inlined = host_from(&PluginRegistry::bundled_for::<Rv64>(), &["insn"]);
    let mut machine = Machine::new(&loop_program(), Some(&inlined));
    machine.run();
    group.bench_function("insn_callback_inlined", |b| b.iter(|| machine.run()));
    group.finish();
}

/// Resets itself from inside the instruction callback of the instruction
/// at `at` when armed, re-registering in the completion.
struct Resetter {
    armed: AtomicBool,
    at: u64,
    resets: AtomicU64,
}

impl Resetter {
    fn register(self: &Arc<Self>, handle: &PluginHandle) {
        let (me, h) = (Arc::clone(self), handle.clone());
        handle.on_tb_trans(move |tb| {
            if tb.pc() != me.at {
                return;
            }
            let (me, h) = (Arc::clone(&me), h.clone());
            if let Some(mut insn) = tb.insn(0) {
                insn.on_exec(Access::NONE, move |_| {
                    if me.armed.swap(false, Ordering::Relaxed) {
                        let me = Arc::clone(&me);
                        h.reset(move |h| {
                            me.resets.fetch_add(1, Ordering::Relaxed);
                            me.register(h)
                        })
                        .expect("reset");
                    }
                });
            }
        });
    }
}

impl Plugin for Resetter {
    fn install(self: Arc<Self>, handle: &PluginHandle) -> Result<(), PluginError> {
        self.register(handle);
        Ok(())
    }
}

fn resetter(at: u64) -> Arc<Resetter> {
    Arc::new(Resetter {
        armed: AtomicBool::new(false),
        at,
        resets: AtomicU64::new(0),
    })
}

fn reset(c: &mut Criterion) {
    let mut group = c.benchmark_group("plugins/10k_tbs");
    let host = host(&["insn,inline=on"]);
    let resetter = resetter(CODE);
    host.install("resetter", resetter.clone()).expect("install");
    let mut machine = Machine::new(&many_blocks(), Some(&host));
    machine.run();
    assert!(machine.engine.stats().tbs_cached >= 10_000);
    // The setup works: an armed run resets once.
    resetter.armed.store(true, Ordering::Relaxed);
    machine.run();
    assert_eq!(resetter.resets.load(Ordering::Relaxed), 1, "no reset ran");
    group.bench_function("cached", |b| b.iter(|| machine.run()));
    group.bench_function("with_reset", |b| {
        b.iter(|| {
            resetter.armed.store(true, Ordering::Relaxed);
            machine.run();
        })
    });
    // Reference: the same flush and re-translation with no plugin at all.
    let mut bare = Machine::new(&many_blocks(), None);
    bare.run();
    group.bench_function("bare_flush", |b| {
        b.iter(|| {
            bare.engine.flush();
            bare.run();
        })
    });
    group.finish();

    let mut group = c.benchmark_group("plugins/hot_loop");
    group.throughput(Throughput::Elements(HOT_LOOP_INSNS));
    let host = self::host(&["insn,inline=on"]);
    let resetter = self::resetter(HOT_LOOP);
    host.install("resetter", resetter.clone()).expect("install");
    let mut machine = Machine::new(&many_blocks(), Some(&host));
    machine.run();
    machine.run_at(HOT_LOOP);
    resetter.armed.store(true, Ordering::Relaxed);
    machine.run_at(HOT_LOOP);
    assert_eq!(resetter.resets.load(Ordering::Relaxed), 1, "no reset ran");
    let stats = machine.engine.stats();
    // The 10k blocks stay cached through a reset.
    assert!(stats.tbs_cached >= 10_000, "{stats:?}");
    assert_eq!(stats.reinstrumentations, 1, "{stats:?}");
    group.bench_function("no_reset", |b| b.iter(|| machine.run_at(HOT_LOOP)));
    group.bench_function("one_reset", |b| {
        b.iter(|| {
            resetter.armed.store(true, Ordering::Relaxed);
            machine.run_at(HOT_LOOP);
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = dispatch, reset
}
criterion_main!(benches);
