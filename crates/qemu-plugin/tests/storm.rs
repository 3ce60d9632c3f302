//! QEMU's reset bug, made impossible for C plugins: a plugin resets itself
//! from the execution callback of a load while that load's memory callback
//! is still due, every N-th load, and frees the old registration's state in
//! the completion. No callback of the old registration may run after it
//! (it would read freed memory: run this binary under valgrind to see none
//! does), and the counts equal those of a run that never resets.
//!
//! `valgrind --error-exitcode=1 target/debug/deps/storm-<hash>`.

mod common;

use common::{build_plugin, number_after, run};
use tcgkit_linux_user::GuestExit;

/// (fixture, its arguments): a guest with many loads, and one with few.
const GUESTS: &[(&str, &[&str])] = &[("malloc", &["1000"]), ("faults", &["exit=0"])];

#[test]
fn reset_from_a_loads_callback_every_n_loads_is_exact_and_never_stale() {
    let plugin = build_plugin("storm", 1);
    for &(guest, args) in GUESTS {
        let baseline = run(guest, args, &[(&plugin, &["every=0"])]);
        assert_eq!(baseline.exit, GuestExit::Exited(0));
        let insns = number_after(&baseline.output, "insns ");
        let loads = number_after(&baseline.output, "loads ");
        assert_eq!(
            insns, baseline.insns,
            "{guest}: every instruction counted once"
        );
        assert!(loads > 100, "{guest}: {}", baseline.output);
        assert_eq!(number_after(&baseline.output, "resets "), 0);
        for every in [1u64, 7, 1000] {
            let spec = format!("every={every}");
            let stormed = run(guest, args, &[(&plugin, &[spec.as_str()])]);
            let out = &stormed.output;
            assert_eq!(stormed.exit, GuestExit::Exited(0), "{guest} {spec}");
            assert_eq!(number_after(out, "stale "), 0, "{guest} {spec}: {out}");
            assert_eq!(number_after(out, "insns "), insns, "{guest} {spec}: {out}");
            assert_eq!(number_after(out, "loads "), loads, "{guest} {spec}: {out}");
            let resets = number_after(out, "resets ");
            // One request per N loads at most (none while one is pending),
            // and with N = 1 one per load that found none pending.
            assert!(
                resets > 0 && resets <= loads / every,
                "{guest} {spec}: {out}"
            );
        }
    }
}

#[test]
fn uninstall_from_a_loads_callback_completes_once_and_nothing_runs_after() {
    let plugin = build_plugin("storm", 1);
    for every in [1u64, 7, 1000] {
        let spec = format!("every={every}");
        let out = run(
            "malloc",
            &["1000"],
            &[(&plugin, &[spec.as_str(), "uninstall=on"])],
        );
        assert_eq!(out.exit, GuestExit::Exited(0));
        let text = &out.output;
        assert_eq!(
            text.matches("storm: uninstalled after").count(),
            1,
            "{spec}: {text}"
        );
        // Loads counted until the completion: at least the N that asked,
        // at most those of the block that asked (it ends at a safe point).
        let loads = number_after(text, "uninstalled after ");
        assert!(loads >= every && loads < every + 64, "{spec}: {text}");
        assert!(
            !text.contains("STALE"),
            "{spec}: a callback ran after the completion: {text}"
        );
        assert!(
            !text.contains("storm: insns"),
            "{spec}: atexit is dropped with the plugin"
        );
    }
}
