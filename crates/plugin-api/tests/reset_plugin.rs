//! The bundled `reset` plugin on hand-assembled RV64 programs with many
//! distinct blocks: it resets itself from a block callback exactly as often
//! as its threshold says, every reset completes once, and its instruction
//! count equals an uninstrumented run's.

mod common;
use common::{ECALL, Shared, addi, blt};

use std::sync::Arc;

use tcgkit_plugin_api::plugins::insn::InsnCount;
use tcgkit_plugin_api::plugins::reset::PeriodicReset;
use tcgkit_plugin_api::*;
use tcgkit_riscv::{Cpu, Rv64};
use tcgkit_tcg_core::{CpuExit, Engine, GuestMemory, Perms};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const CODE: u64 = 0x10000;
const A0: u32 = 10;
const A1: u32 = 11;
const A2: u32 = 12;

/// `jal x0, +4`: jumps to the next instruction, so it ends a block.
const JUMP_NEXT: u32 = (2 << 21) | 0x6f;

/// `iterations` passes over `blocks` distinct two-instruction blocks
/// (`addi; jal +4`), then an ecall. Executes
/// `2 + iterations * (2 * blocks + 2) + 1` instructions.
fn program(blocks: usize, iterations: i32) -> Vec<u32> {
    let mut code = vec![addi(A2, 0, iterations), addi(A1, 0, 0)];
    for _ in 0..blocks {
        code.push(addi(A0, A0, 1));
        code.push(JUMP_NEXT);
    }
    code.push(addi(A1, A1, 1));
    let back = -4 * (2 * blocks as i32 + 1);
    code.push(blt(A1, A2, back));
    code.push(ECALL);
    code
}

fn expected_insns(blocks: usize, iterations: u64) -> u64 {
    2 + iterations * (2 * blocks as u64 + 2) + 1
}

/// Runs `code` to its ecall, instrumented by `host` if any; the engine's
/// count of executed instructions.
fn run(code: &[u32], host: Option<&PluginHost>) -> Result<u64, Box<dyn std::error::Error>> {
    let mut mem = GuestMemory::new();
    let len = (code.len() as u64 * 4).next_multiple_of(0x1000);
    mem.map(CODE, len, Perms::READ | Perms::EXEC)?;
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write_initial(CODE, &bytes)?;
    let mut cpu = Cpu::new();
    cpu.set_pc(CODE);
    let mut engine = Engine::new(Rv64::new());
    if let Some(host) = host {
        host.attach(&mut engine);
        host.vcpu_init(0);
    }
    assert_eq!(engine.run(&mut cpu, &mut mem), CpuExit::Syscall);
    if let Some(host) = host {
        host.vcpu_exit(0);
        host.finish()?;
    }
    Ok(engine.stats().insns_executed)
}

struct Outcome {
    plugin: Arc<PeriodicReset>,
    reference: Arc<InsnCount>,
    output: String,
}

/// Runs `code` with `reset,<args>` and, alongside, an `insn` counter that
/// never resets.
fn run_reset(code: &[u32], args: &[(&str, &str)]) -> Result<Outcome, Box<dyn std::error::Error>> {
    let out = Shared::default();
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(out.clone()));
    let plugin = Arc::new(PeriodicReset::from_args(
        &PluginArgs::new("reset", args.iter().copied()),
        host.guest(),
    )?);
    host.install("reset", plugin.clone())?;
    let reference = Arc::new(InsnCount::from_args(
        &PluginArgs::new("insn", [("inline", "on")]),
        host.guest(),
    )?);
    host.install("insn", reference.clone())?;
    run(code, Some(&host))?;
    assert!(host.failures().is_empty(), "{:?}", host.failures());
    Ok(Outcome {
        plugin,
        reference,
        output: out.text(),
    })
}

#[test]
fn resets_exactly_every_n_instructions_and_counts_stay_exact() -> TestResult {
    let (blocks, iterations) = (300, 200);
    let code = program(blocks, iterations);
    let total = run(&code, None)?;
    assert_eq!(total, expected_insns(blocks, iterations as u64));
    for inline in ["on", "off"] {
        for every in [1_000u64, 7_919, 50_000] {
            // The check runs on block entry, before or after the entered
            // block's first instruction counts: keep the last block (the
            // ecall) clear of a threshold so either order gives one answer.
            assert!(total % every > 1, "choose another threshold than {every}");
            let n = every.to_string();
            let run = run_reset(&code, &[("every", n.as_str()), ("inline", inline)])?;
            let p = &run.plugin;
            let expected_resets = total / every;
            assert_eq!(p.insns(), total, "every={every} inline={inline}");
            assert_eq!(run.reference.total(), total);
            assert_eq!(p.resets(), expected_resets, "every={every} inline={inline}");
            assert_eq!(p.requests(), p.resets());
            // Each reset flushed what was translated since the previous one:
            // at least the 300 distinct blocks once a full pass ran between
            // two resets (every >= 2 * 302 instructions).
            assert!(p.max_cached_at_reset() >= blocks as u64, "{}", run.output);
            assert!(p.translated() > p.cached_at_resets());
            // Blocks are re-entered after every reset, so more blocks ran
            // than an unreset run enters, never fewer.
            assert!(p.blocks() >= (blocks as u64 + 1) * iterations as u64);
            assert!(
                run.output.contains(&format!(
                    "resets: {expected_resets}\ntotal insns: {total}\n"
                )),
                "{}",
                run.output
            );
        }
    }
    Ok(())
}

#[test]
fn every_zero_never_resets_but_counts_the_same() -> TestResult {
    let code = program(50, 40);
    let total = run(&code, None)?;
    let run = run_reset(&code, &[("every", "0")])?;
    let p = &run.plugin;
    assert_eq!((p.resets(), p.requests()), (0, 0));
    assert_eq!(p.insns(), total);
    // Without resets each distinct block is translated once: the head (its
    // two instructions run into the first `addi; jal`), the 49 other
    // blocks, the loop tail, the first block again as the loop's target,
    // and the ecall. The head and the ecall run once, the first pass
    // enters 50 blocks, each later pass 51.
    assert_eq!(p.translated(), 53);
    assert_eq!(p.blocks(), 1 + 50 + 39 * 51 + 1);
    assert!(
        run.output.contains("resets: 0\n")
            && run.output.contains(&format!("total insns: {total}\n"))
            && run.output.contains("blocks executed: 2041\n")
            && run.output.contains("blocks translated: 53\n")
            && run
                .output
                .contains("blocks cached at reset: mean 0.0, max 0\n"),
        "{}",
        run.output
    );
    Ok(())
}

#[test]
fn the_registry_builds_it_and_bad_arguments_are_clear() -> TestResult {
    let registry = PluginRegistry::bundled();
    assert!(registry.list().any(|(name, _)| name == "reset"));
    let host = PluginHost::new(GuestInfo::user("riscv64", 1), Box::new(std::io::sink()));
    host.install_spec(&registry, "reset,every=100,inline=off")?;
    let error = |spec: &str| {
        host.install_spec(&registry, spec)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let missing = error("reset");
    assert!(
        missing.contains("reset") && missing.contains("every") && missing.contains("missing"),
        "{missing}"
    );
    let bad = error("reset,every=often");
    assert!(bad.contains("every") && bad.contains("often"), "{bad}");
    let negative = error("reset,every=-5");
    assert!(
        negative.contains("every") && negative.contains("-5"),
        "{negative}"
    );
    let bad = error("reset,every=10,inline=maybe");
    assert!(bad.contains("inline") && bad.contains("maybe"), "{bad}");
    let unknown = error("reset,every=10,evry=3");
    assert!(
        unknown.contains("evry") && unknown.contains("unknown"),
        "{unknown}"
    );
    Ok(())
}
