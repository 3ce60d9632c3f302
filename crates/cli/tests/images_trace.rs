//! `tcgkit images --trace`: the trace is valid Chrome trace JSON whose unload
//! spans nest like the registry's cascade.

use serde_json::Value;
use std::process::Command;

mod common;

fn fixture(name: &str) -> std::path::PathBuf {
    common::fixture("assemblies/lifecycle", name)
}

/// (name, start, end) of every complete span whose name starts with `prefix`.
fn spans(events: &[Value], prefix: &str) -> Vec<(String, f64, f64)> {
    events
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| {
            let name = e["name"].as_str()?.strip_prefix(prefix)?.to_owned();
            let ts = e["ts"].as_f64()?;
            Some((name, ts, ts + e["dur"].as_f64()?))
        })
        .collect()
}

fn within(inner: &(String, f64, f64), outer: &(String, f64, f64)) -> bool {
    outer.1 <= inner.1 && inner.2 <= outer.2
}

#[test]
fn images_trace_has_nested_unload_spans() {
    let trace = common::scratch("images-trace", "images.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["images", "--trace"])
        .arg(&trace)
        .arg(fixture("Root.dll"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let doc: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let unloads = spans(events, "unload ");
    let get = |n: &str| unloads.iter().find(|s| s.0 == n).cloned().unwrap();
    let mut names: Vec<&str> = unloads.iter().map(|s| s.0.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["Left", "Right", "Root", "Shared", "Versioned"]);
    // Root's unload contains every cascade it caused; Shared is released by
    // Left (Right let go of its reference first), so it nests inside Left.
    for child in ["Left", "Right", "Shared", "Versioned"] {
        assert!(within(&get(child), &get("Root")), "{child} not inside Root");
    }
    assert!(within(&get("Shared"), &get("Left")));
    assert!(!within(&get("Shared"), &get("Right")));
    // Every unload span carries its ModuleUnload record.
    for e in events.iter().filter(|e| e["ph"] == "X") {
        if e["name"].as_str().unwrap().starts_with("unload ") {
            assert!(e["args"].is_object(), "{e}");
        }
    }
    std::fs::remove_dir_all(trace.parent().unwrap()).unwrap();
}
