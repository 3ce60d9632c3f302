//! Guest instructions per second of the RV64GC interpreter and the JIT:
//! hand-assembled loops run through tcg-core's `Engine` (block cache, jump
//! cache, plain uninstrumented execution), and what compiling a block
//! costs.
//!
//! The target from issue 3 is ~250M guest instructions per second on
//! integer loops (1/8 of qemu-riscv64's JIT).
//! `cargo bench -p tcgkit-bench --bench riscv`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::BatchSize;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, JitConfig, Perms};

const CODE: u64 = 0x1_0000;
const DATA: u64 = 0x10_0000;
const ITERATIONS: i32 = 100_000;

fn i_type(opcode: u32, funct3: u32, rd: u32, rs1: u32, imm: i32) -> u32 {
    (((imm as u32) & 0xfff) << 20) | (rs1 << 15) | (funct3 << 12) | (rd << 7) | opcode
}

fn r_type(funct3: u32, funct7: u32, rd: u32, rs1: u32, rs2: u32) -> u32 {
    (funct7 << 25) | (rs2 << 20) | (rs1 << 15) | (funct3 << 12) | (rd << 7) | 0x33
}

fn s_type(funct3: u32, rs1: u32, rs2: u32, imm: i32) -> u32 {
    let imm = imm as u32;
    (((imm >> 5) & 0x7f) << 25)
        | (rs2 << 20)
        | (rs1 << 15)
        | (funct3 << 12)
        | ((imm & 0x1f) << 7)
        | 0x23
}

/// bne rs1, x0, back by `back` bytes.
fn bnez_back(rs1: u32, back: i32) -> u32 {
    let o = (-back) as u32;
    (((o >> 12) & 1) << 31)
        | (((o >> 5) & 0x3f) << 25)
        | (rs1 << 15)
        | (1 << 12)
        | (((o >> 1) & 0xf) << 8)
        | (((o >> 11) & 1) << 7)
        | 0x63
}

fn lui(rd: u32, value: u32) -> u32 {
    (value & 0xffff_f000) | (rd << 7) | 0x37
}

const ECALL: u32 = 0x73;
const A0: u32 = 10;
const A1: u32 = 11;
const A2: u32 = 12;
const A3: u32 = 13;
const A4: u32 = 14;

/// Integer work: add, xor, shift, mul, counter and branch per iteration.
fn alu_loop() -> Vec<u32> {
    vec![
        lui(A1, (ITERATIONS as u32) & !0xfff),
        i_type(0x13, 0, A1, A1, ITERATIONS & 0xfff),
        // loop:
        r_type(0, 0, A0, A0, A1),    // add a0, a0, a1
        r_type(4, 0, A2, A2, A0),    // xor a2, a2, a0
        i_type(0x13, 1, A3, A2, 3),  // slli a3, a2, 3
        r_type(0, 1, A4, A3, A1),    // mul a4, a3, a1
        r_type(0, 0, A0, A0, A4),    // add a0, a0, a4
        i_type(0x13, 0, A1, A1, -1), // addi a1, a1, -1
        bnez_back(A1, 24),           // bnez a1, loop
        ECALL,
    ]
}

/// Memory work: walk a 4 KiB buffer loading, adding and storing doublewords.
fn memory_loop() -> Vec<u32> {
    vec![
        lui(A1, (ITERATIONS as u32) & !0xfff),
        i_type(0x13, 0, A1, A1, ITERATIONS & 0xfff),
        lui(A2, DATA as u32),
        // loop:
        i_type(0x03, 3, A3, A2, 0),     // ld a3, 0(a2)
        r_type(0, 0, A3, A3, A1),       // add a3, a3, a1
        s_type(3, A2, A3, 0),           // sd a3, 0(a2)
        i_type(0x13, 0, A2, A2, 8),     // addi a2, a2, 8
        i_type(0x13, 7, A2, A2, 0x7f8), // andi a2, a2, 0x7f8 (stay in the page)
        r_type(6, 0, A2, A2, A4),       // or a2, a2, a4 (a4 = DATA)
        i_type(0x13, 0, A1, A1, -1),    // addi a1, a1, -1
        bnez_back(A1, 28),              // bnez a1, loop
        ECALL,
    ]
}

/// Blocks of the straight-line program, each run once.
const BLOCKS: usize = 200;

/// `BLOCKS` blocks of three ALU instructions and a `jal` to the next, then
/// `ecall`: every block is translated, (compiled,) and run once.
fn straight_blocks() -> Vec<u32> {
    let mut code = Vec::new();
    for _ in 0..BLOCKS {
        code.push(r_type(0, 0, A0, A0, A1)); // add a0, a0, a1
        code.push(i_type(0x13, 1, A3, A0, 3)); // slli a3, a0, 3
        code.push(r_type(4, 0, A2, A2, A3)); // xor a2, a2, a3
        code.push(0x0040_006f); // jal x0, +4
    }
    code.push(ECALL);
    code
}

fn machine(code: &[u32]) -> (Engine<Rv64>, GuestMemory) {
    let mut mem = GuestMemory::new();
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.map(CODE, 0x4000, Perms::READ | Perms::EXEC)
        .expect("map code");
    mem.write_initial(CODE, &bytes).expect("write code");
    mem.map(DATA, 0x1000, Perms::READ | Perms::WRITE)
        .expect("map data");
    (Engine::new(Rv64::new()), mem)
}

fn run_once(engine: &mut Engine<Rv64>, mem: &mut GuestMemory) -> u64 {
    let mut cpu = Cpu::new();
    cpu.set_pc(CODE);
    cpu.set_x(A4 as u8, DATA);
    let before = engine.stats().insns_executed;
    assert_eq!(engine.run(&mut cpu, mem), CpuExit::Syscall);
    engine.stats().insns_executed - before
}

fn bench_loops(c: &mut Criterion) {
    for (group_name, jit) in [
        ("riscv_interpreter", JitConfig::OFF),
        ("riscv_jit", JitConfig::on(0)),
    ] {
        let mut group = c.benchmark_group(group_name);
        group.measurement_time(Duration::from_secs(3));
        for (name, code) in [("alu_loop", alu_loop()), ("memory_loop", memory_loop())] {
            let (mut engine, mut mem) = machine(&code);
            engine.set_jit(jit).expect("cranelift supports this host");
            // Warm the block cache (and compile) and learn the count.
            let insns = run_once(&mut engine, &mut mem);
            group.throughput(Throughput::Elements(insns));
            group.bench_function(name, |b| b.iter(|| run_once(&mut engine, &mut mem)));
        }
        group.finish();
    }
}

/// Translating and running `BLOCKS` cold blocks once each, interpreted and
/// compiled before their run: the difference per block is what compiling
/// one costs (throughput in blocks).
fn bench_compile(c: &mut Criterion) {
    let code = straight_blocks();
    let mut group = c.benchmark_group("riscv_cold_blocks");
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(BLOCKS as u64));
    for (name, jit) in [("interpret", JitConfig::OFF), ("compile", JitConfig::on(0))] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let (mut engine, mem) = machine(&code);
                    engine.set_jit(jit).expect("cranelift supports this host");
                    (engine, mem)
                },
                |(mut engine, mut mem)| run_once(&mut engine, &mut mem),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_loops, bench_compile);
criterion_main!(benches);
