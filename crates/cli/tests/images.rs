//! `tcgkit images` run as a process on the committed fixtures.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lifecycle() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies/lifecycle")
}

fn tcgkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcgkit"))
        .arg("images")
        .args(args)
        .output()
        .expect("run tcgkit")
}

fn fixture(name: &str) -> String {
    lifecycle().join(name).to_string_lossy().into_owned()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "tcgkit failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

fn json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&stdout(&tcgkit(&all))).expect("valid JSON")
}

/// A scratch directory unique to this test process and tag.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcgkit-cli-images-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn is_guid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && groups.iter().all(|g| {
            g.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        })
}

fn image<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["images"]
        .as_array()
        .and_then(|images| images.iter().find(|i| i["name"] == name))
        .unwrap_or_else(|| panic!("{name} not in the report"))
}

fn reference<'a>(image: &'a Value, name: &str) -> &'a Value {
    image["references"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no reference to {name}"))
}

#[test]
fn table_lists_the_closure_and_how_references_resolved() {
    let out = stdout(&tcgkit(&[&fixture("Root.dll"), &fixture("Alpha.dll")]));
    let rows: Vec<&str> = out.lines().collect();
    assert!(
        rows[0].starts_with("ID") && rows[0].contains("MVID/BUILD-ID") && rows[0].contains("PDB")
    );
    let root = rows
        .iter()
        .find(|r| r.starts_with("#1*"))
        .expect("Root row");
    assert!(root.contains("Root") && root.contains("1.0.0.0") && root.contains("assembly"));
    assert!(out.contains("Versioned 1.0.0.0"), "{out}");
    assert!(out.contains("version 2.0.0.0 accepted"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("Ghost 1.0.0.0") && l.ends_with("missing")),
        "{out}"
    );
    assert!(out.contains("cycle back to #"), "{out}");
    assert!(out.contains("already loaded #"), "{out}");
}

#[test]
fn json_reports_identity_debug_data_references_and_events() {
    let doc = json(&[&fixture("Root.dll"), &fixture("ClrLoader.dll")]);
    let images = doc["images"].as_array().expect("images");
    assert_eq!(images.len(), 6);
    for image in images {
        let mvid = image["mvid"].as_str().expect("every fixture has an MVID");
        assert!(is_guid(mvid), "{mvid}");
    }

    let clr = image(&doc, "ClrLoader");
    assert_eq!(clr["root"], true);
    let codeview = clr["debug"]
        .as_array()
        .and_then(|d| d.iter().find(|e| e["type"] == "codeview"))
        .expect("CodeView entry");
    assert!(is_guid(codeview["guid"].as_str().expect("guid")));
    assert!(
        codeview["path"]
            .as_str()
            .expect("path")
            .ends_with("ClrLoader.pdb")
    );

    let root = image(&doc, "Root");
    let versioned = reference(root, "Versioned");
    assert_eq!(versioned["resolution"], "loaded");
    assert_eq!(versioned["version"], "1.0.0.0");
    assert_eq!(versioned["resolved_version"], "2.0.0.0");
    assert_eq!(versioned["version_mismatch_accepted"], true);
    assert_eq!(reference(root, "Ghost")["resolution"], "missing");
    assert_eq!(
        reference(image(&doc, "Right"), "Shared")["resolution"],
        "already_loaded"
    );

    // Everything loaded was unloaded again, innermost first.
    let events: Vec<(String, u64)> = doc["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("").to_owned(),
                e["id"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let count = |kind: &str| events.iter().filter(|(k, _)| k == kind).count();
    assert_eq!(count("loaded"), 6);
    assert_eq!(count("unloading"), 6);
    assert_eq!(count("unloaded"), 6);
    let root_id = root["id"].as_u64().expect("id");
    let last = events.last().expect("events");
    assert_eq!(
        last,
        &("unloaded".to_owned(), root_id),
        "Root closes the last bracket"
    );
}

#[test]
fn search_directories_come_before_the_inputs_directories() {
    let dir = scratch("search");
    let copy = dir.join("Root.dll");
    std::fs::copy(lifecycle().join("Root.dll"), &copy).expect("copy");
    let copy = copy.to_string_lossy().into_owned();

    let alone = json(&[&copy]);
    assert_eq!(
        reference(image(&alone, "Root"), "Left")["resolution"],
        "missing"
    );

    let found = json(&["--search", &lifecycle().to_string_lossy(), &copy]);
    let left = reference(image(&found, "Root"), "Left");
    assert_eq!(left["resolution"], "loaded");
    assert!(
        left["path"]
            .as_str()
            .expect("path")
            .ends_with("lifecycle/Left.dll")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn elf_images_report_their_build_id() {
    let guests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests");
    let elf = std::fs::read_dir(&guests)
        .expect("guest fixtures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")))
        .expect("an ELF guest fixture");
    let doc = json(&[&elf.to_string_lossy()]);
    let report = &doc["images"][0];
    assert_eq!(report["format"], "elf");
    assert_eq!(report["mvid"], Value::Null);
    let build_id = report["build_id"].as_str().expect("GNU build-id");
    assert!(build_id.len() >= 16 && build_id.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn bad_input_exits_1_with_a_one_line_reason() {
    let dir = scratch("bad");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not an image at all").expect("write");
    let bytes = std::fs::read(lifecycle().join("Shared.dll")).expect("fixture");
    let truncated = dir.join("Truncated.dll");
    // Cut inside .text, through the metadata.
    std::fs::write(&truncated, &bytes[..0x300]).expect("write");
    let mut pe_without_cli = bytes.clone();
    // Zero the CLI header data directory (PE32: optional header + 208).
    let pe = u32::from_le_bytes([bytes[0x3c], bytes[0x3d], bytes[0x3e], bytes[0x3f]]) as usize;
    let cli_dir = pe + 24 + 208;
    pe_without_cli[cli_dir..cli_dir + 8].fill(0);
    let native = dir.join("Native.dll");
    std::fs::write(&native, &pe_without_cli).expect("write");

    for (path, needle) in [
        (text.clone(), "unknown image format"),
        (truncated.clone(), "Truncated.dll"),
        (native.clone(), "Native.dll"),
        (dir.join("absent.dll"), "absent.dll"),
    ] {
        let output = tcgkit(&[&fixture("Shared.dll"), &path.to_string_lossy()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}: {stderr}",
            path.display()
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("tcgkit: error: cannot load "),
            "{stderr}"
        );
        assert!(stderr.contains(needle), "{stderr}");
        assert!(output.stdout.is_empty(), "nothing is printed for bad input");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(tcgkit(&[]).status.code(), Some(2));
    assert_eq!(
        tcgkit(&["--no-such-flag", &fixture("Shared.dll")])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn dynamic_elf_images_report_interpreter_and_needed_libraries() {
    let dynamic = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/guests/dynamic");
    let program = dynamic.join("cxx");
    let module = dynamic.join("libmod_a.so");
    let doc = json(&[&program.to_string_lossy(), &module.to_string_lossy()]);
    let elf = |i: usize| doc["images"][i]["elf"].clone();
    assert_eq!(elf(0)["interpreter"], "/lib/ld-linux-riscv64-lp64d.so.1");
    // In DT_NEEDED order, as readelf -d lists them.
    let needed = serde_json::json!(["libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]);
    assert_eq!(elf(0)["needed"], needed);
    assert_eq!(elf(1)["interpreter"], Value::Null, "a shared object");
    assert_eq!(
        elf(1)["needed"],
        serde_json::json!([]),
        "it calls no library"
    );
    assert_eq!(elf(1)["soname"], Value::Null, "linked without -soname");
}

#[test]
fn an_elf_header_of_zeros_is_refused_naming_the_field() {
    let dir = scratch("zero-elf");
    let path = dir.join("zeros.elf");
    // A valid identification (64-bit, little-endian, version 1), then zeros.
    let mut bytes = vec![0u8; 256];
    bytes[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    std::fs::write(&path, &bytes).expect("write");
    let output = tcgkit(&[&path.to_string_lossy()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("invalid ELF header field e_type at offset 0x10: 0"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
