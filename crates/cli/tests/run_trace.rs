//! `tcgkit run --trace`: the trace is complete and valid on a normal exit, on
//! a guest fault (the host dies by the guest's signal) and on Ctrl-C.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

mod common;
use common::guest;

fn scratch(name: &str) -> PathBuf {
    common::scratch("run-trace", name)
}

fn names(events: &[Value], ph: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["ph"] == ph)
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn chrome_trace_of_a_normal_run_has_image_vcpu_and_syscall_events() {
    let trace = scratch("integer.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "--trace"])
        .arg(&trace)
        .arg(guest("integer"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let spans = names(events, "X");
    assert!(spans.contains(&"load integer".to_owned()), "{spans:?}");
    assert!(spans.contains(&"unload integer".to_owned()), "{spans:?}");
    assert!(spans.contains(&"vCPU 0".to_owned()), "{spans:?}");
    let instants = names(events, "i");
    // The guest writes its output (write is syscall 64 on RV64), then
    // exits: the exit record comes last among instants.
    assert!(instants.iter().any(|n| n == "syscall 64"), "{instants:?}");
    assert!(instants.last().unwrap().contains("exit"), "{instants:?}");
    // The engine's translations reach the trace as a counter.
    let translated = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "translation blocks")
        .count();
    assert!(translated > 0, "{events:?}");
    // The ELF's build-id is the module's native PDB signature.
    let load = events.iter().find(|e| e["name"] == "load integer").unwrap();
    let sig = load["args"]["ModuleLoad"]["NativePdbSignature"]
        .as_str()
        .unwrap();
    assert_ne!(sig, "00000000-0000-0000-0000-000000000000");
}

#[test]
fn json_lines_trace_is_complete_when_the_guest_dies_by_a_signal() {
    let trace = scratch("faults.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "--trace"])
        .arg(&trace)
        .arg(guest("faults"))
        .arg("segv")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(11), "{out:?}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"trace_end"), "{kinds:?}");
    let exit = lines.iter().find(|l| l["event"] == "process_exit").unwrap();
    assert!(exit.to_string().contains("11"), "{exit}");
    // unloading is followed by unloaded, and the trace ends after both.
    let unloading = kinds.iter().position(|k| *k == "image_unloading").unwrap();
    let unloaded = kinds.iter().position(|k| *k == "image_unloaded").unwrap();
    assert!(unloading < unloaded);
}

#[test]
fn trace_is_completed_on_interrupt() {
    // fileio reads stdin to its end; an open, silent pipe keeps it waiting.
    let trace = scratch("interrupted.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "--trace"])
        .arg(&trace)
        .arg(guest("fileio"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the guest is running (the load span is written at load).
    for _ in 0..200 {
        if std::fs::metadata(&trace)
            .map(|m| m.len() > 0)
            .unwrap_or(false)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    assert!(!status.success());
    let doc: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(names(events, "X").contains(&"load fileio".to_owned()));
    // The vCPU was still running: its span is closed and marked incomplete.
    let vcpu = events.iter().find(|e| e["name"] == "vCPU 0").unwrap();
    assert_eq!(vcpu["args"]["incomplete"], true, "{vcpu}");
}

#[test]
fn plugins_installed_for_the_run_appear_in_the_trace() {
    let trace = scratch("plugins.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "--plugin", "insn", "--plugin", "mem", "--trace"])
        .arg(&trace)
        .arg(guest("float"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let installed: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"] == "plugin_installed")
        .map(|l| l["plugin"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(installed, ["insn", "mem"]);
}

/// The build-id `readelf -n` prints for `file`, as the GUID the trace
/// carries (its first 16 bytes, the first three fields little-endian).
fn readelf_build_id_guid(file: &std::path::Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .expect("readelf (binutils) runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let hex = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build-id in {}: {text}", file.display()));
    let b: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let h = |bytes: &[u8]| bytes.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let rev = |bytes: &[u8]| h(&bytes.iter().rev().copied().collect::<Vec<u8>>());
    format!(
        "{}-{}-{}-{}-{}",
        rev(&b[0..4]),
        rev(&b[4..6]),
        rev(&b[6..8]),
        h(&b[8..10]),
        h(&b[10..16])
    )
}

/// A dynamic guest's trace has a load and an unload of the program,
/// ld.so, libc and each dlopened object, each with the build-id readelf
/// prints, in the order the guest mapped and unmapped them.
#[test]
fn trace_of_a_dynamic_run_shows_every_module_load_and_unload() {
    if !common::sysroot_available() {
        return;
    }
    let sysroot = common::SYSROOT;
    let dir = guest("dynamic").canonicalize().unwrap();
    let trace = scratch("dlopen.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .args(["run", "-L", sysroot, "--trace"])
        .arg(&trace)
        .arg(dir.join("dlopen"))
        .arg(&dir)
        .arg("3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let mut spans: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.contains("load ")))
        .collect();
    spans.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
    let order: Vec<&str> = spans.iter().map(|e| e["name"].as_str().unwrap()).collect();
    let ld = "ld-linux-riscv64-lp64d.so.1";
    let mut expected = vec![
        "load dlopen".to_string(),
        format!("load {ld}"),
        "load libc.so.6".into(),
    ];
    for _ in 0..3 {
        for m in ["libmod_a.so", "libmod_b.so"] {
            expected.push(format!("load {m}"));
            expected.push(format!("unload {m}"));
        }
    }
    expected.extend([
        "unload libc.so.6".to_string(),
        format!("unload {ld}"),
        "unload dlopen".into(),
    ]);
    assert_eq!(order, expected);
    for span in spans
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("load "))
    {
        let record = &span["args"]["ModuleLoad"];
        let path = std::path::PathBuf::from(record["ModuleNativePath"].as_str().unwrap());
        assert_eq!(
            record["NativePdbSignature"].as_str().unwrap(),
            readelf_build_id_guid(&path),
            "{span}"
        );
    }
}
