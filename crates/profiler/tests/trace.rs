//! Trace sinks end to end: a real registry loads and unloads a fixture
//! closure, the session writes a trace, serde_json parses it back, and the
//! tests check nesting, ordering and completeness.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tcgkit_image_core::{Image, ImageRegistry};
use tcgkit_profiler::{
    Event, GuestExitStatus, ImageEvent, ImageId, PluginEvent, ProcessExit, Profiler, Syscall,
    TbFlushed, TbTranslated, TraceError, TraceFormat, TraceMode, TraceSession, VcpuEvent,
};

fn lifecycle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies/lifecycle")
}

/// A writer whose bytes the test can read after the session is done.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Loads Root.dll's closure (Root -> Left, Right, Versioned; Left and Right
/// -> Shared) through the session's bridge, then closes Root.
fn load_and_close_root(session: &TraceSession) {
    let mut registry = ImageRegistry::new();
    registry.add_search_path(lifecycle_dir());
    registry.add_observer(session.image_observer());
    let root = registry.load(&lifecycle_dir().join("Root.dll")).unwrap();
    assert!(registry.len() >= 5, "closure loaded: {}", registry.len());
    registry.close(root).unwrap();
    assert!(registry.is_empty());
}

fn chrome_events(text: &str) -> Vec<Value> {
    let trace: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{text}"));
    trace["traceEvents"]
        .as_array()
        .expect("traceEvents array")
        .clone()
}

fn span<'a>(events: &'a [Value], name: &str) -> (usize, &'a Value) {
    events
        .iter()
        .enumerate()
        .find(|(_, e)| e["ph"] == "X" && e["name"] == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {events:#?}"))
}

fn interval(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap())
}

fn strictly_inside(child: &Value, parent: &Value) -> bool {
    let (cs, ce) = interval(child);
    let (ps, pe) = interval(parent);
    ps < cs && ce < pe && child["tid"] == parent["tid"]
}

#[test]
fn chrome_trace_of_a_closure_has_nested_unload_spans_with_module_records() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(out.clone()),
        TraceFormat::Chrome,
        TraceMode::Streaming,
    )
    .unwrap();
    load_and_close_root(&session);
    let summary = session.finish().unwrap();
    assert_eq!(summary.incomplete_spans, 0);
    assert_eq!(summary.dropped_records, 0);

    let events = chrome_events(&out.text());
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "M" && e["name"] == "process_name")
    );
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "M" && e["name"] == "thread_name")
    );

    let (root_at, root) = span(&events, "unload Root");
    let (left_at, left) = span(&events, "unload Left");
    let (shared_at, shared) = span(&events, "unload Shared");
    let (right_at, right) = span(&events, "unload Right");
    // Shared's last reference is Left's (Right is released first, in
    // reverse reference order), so the cascade nests Root > Left > Shared.
    assert!(strictly_inside(shared, left), "{shared} not inside {left}");
    assert!(strictly_inside(left, root));
    assert!(strictly_inside(right, root));
    assert!(!strictly_inside(shared, right));
    let (_, rs_end) = interval(right);
    let (ls_start, _) = interval(left);
    assert!(
        rs_end < ls_start,
        "Right (released first) ends before Left starts"
    );
    // Spans are written when they end: children before their parent.
    assert!(shared_at < left_at && left_at < root_at && right_at < root_at);

    // Every load span carries a ModuleLoad record and every unload span a
    // ModuleUnload record with the same ids and paths.
    for name in ["Root", "Left", "Right", "Shared", "Versioned"] {
        let (_, load) = span(&events, &format!("load {name}"));
        let (_, unload) = span(&events, &format!("unload {name}"));
        let ml = &load["args"]["ModuleLoad"];
        let mu = &unload["args"]["ModuleUnload"];
        assert_eq!(ml, mu, "{name}: ModuleLoad and ModuleUnload differ");
        assert!(
            ml["ModuleILPath"]
                .as_str()
                .unwrap()
                .ends_with(&format!("{name}.dll"))
        );
        assert_eq!(ml["ModuleFlags"], 8, "manifest module");
        assert_eq!(ml["ModuleID"], ml["AssemblyID"]);
        assert!(unload["args"]["unload_ns"].as_u64().is_some());
        // Loads nest too: a dependency's load is inside its loader's.
        if name != "Root" {
            let (_, root_load) = span(&events, "load Root");
            assert!(
                strictly_inside(load, root_load),
                "load {name} not inside load Root"
            );
        }
    }

    // The loaded-images counter goes back to zero.
    let last_count = events
        .iter()
        .rev()
        .find(|e| e["ph"] == "C" && e["name"] == "images")
        .unwrap();
    assert_eq!(last_count["args"]["loaded"], 0);
    // Timestamps of instants/counters never go backwards in record order.
    let mut last = -1.0;
    for e in events.iter().filter(|e| e["ph"] == "C" || e["ph"] == "i") {
        let ts = e["ts"].as_f64().unwrap();
        assert!(ts > last);
        last = ts;
    }
}

#[test]
fn json_lines_trace_orders_unloads_like_a_stack() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(out.clone()),
        TraceFormat::JsonLines,
        TraceMode::Streaming,
    )
    .unwrap();
    load_and_close_root(&session);
    session.finish().unwrap();
    let lines: Vec<Value> = out
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seq: Vec<String> = lines
        .iter()
        .filter(|l| l["event"] == "image_unloading" || l["event"] == "image_unloaded")
        .map(|l| {
            format!(
                "{} {}",
                l["event"].as_str().unwrap(),
                l["name"].as_str().unwrap()
            )
        })
        .collect();
    let pos = |s: &str| {
        seq.iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s} missing from {seq:?}"))
    };
    assert_eq!(pos("image_unloading Root"), 0);
    assert_eq!(pos("image_unloaded Root"), seq.len() - 1);
    assert!(pos("image_unloading Left") < pos("image_unloading Shared"));
    assert!(pos("image_unloaded Shared") < pos("image_unloaded Left"));
    assert!(pos("image_unloaded Right") < pos("image_unloading Left"));
    // Timestamps increase strictly line by line.
    let ts: Vec<f64> = lines.iter().map(|l| l["ts_us"].as_f64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] < w[1]));
    let end = lines.last().unwrap();
    assert_eq!(end["event"], "trace_end");
    assert_eq!(end["incomplete_spans"], 0);
    // Each unload line carries its ModuleUnload record and the measured time.
    for l in lines.iter().filter(|l| l["event"] == "image_unloaded") {
        assert_eq!(l["ModuleUnload"]["ModuleID"], l["id"]);
        assert!(l["unload_ns"].as_u64().is_some());
    }
}

fn raise_everything(profiler: &Profiler) {
    profiler.raise(Event::PluginInstalled(PluginEvent {
        id: 1,
        name: "insn-count",
    }));
    profiler.raise(Event::VcpuStarted(VcpuEvent { vcpu: 0 }));
    for pc in 0..3000u64 {
        profiler.raise(Event::TbTranslated(TbTranslated {
            vcpu: 0,
            pc: 0x10000 + pc * 4,
            guest_bytes: 4,
            insns: 1,
            generation: 0,
        }));
    }
    profiler.raise(Event::TbFlushed(TbFlushed {
        generation: 0,
        count: 3000,
    }));
    profiler.raise(Event::PluginReset(PluginEvent {
        id: 1,
        name: "insn-count",
    }));
    profiler.raise(Event::Syscall(Syscall {
        vcpu: 0,
        number: 64,
        args: [1, 0x1000, 6, 0, 0, 0],
        ret: 6,
    }));
    profiler.raise(Event::VcpuStopped(VcpuEvent { vcpu: 0 }));
    profiler.raise(Event::ProcessExit(ProcessExit {
        status: GuestExitStatus::Exited(3),
    }));
}

#[test]
fn chrome_trace_has_instants_counters_and_vcpu_spans() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(out.clone()),
        TraceFormat::Chrome,
        TraceMode::Streaming,
    )
    .unwrap();
    raise_everything(&profiler);
    let summary = session.finish().unwrap();
    assert_eq!(summary.events, 3007);
    assert!(!session.handle().is_active(), "finish unregisters the sink");
    let events = chrome_events(&out.text());
    let flush = events.iter().find(|e| e["name"] == "tb flush").unwrap();
    assert_eq!(
        (flush["ph"].as_str(), flush["args"]["count"].as_u64()),
        (Some("i"), Some(3000))
    );
    let counters: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "translation blocks")
        .map(|e| e["args"]["translated"].as_u64().unwrap())
        .collect();
    assert_eq!(
        counters,
        vec![1024, 2048, 3000],
        "rate-limited, exact at the flush"
    );
    assert!(
        events
            .iter()
            .any(|e| e["name"] == "plugin reset: insn-count" && e["ph"] == "i")
    );
    let exit = events.iter().find(|e| e["name"] == "process exit").unwrap();
    assert_eq!(
        (exit["s"].as_str(), exit["args"]["exit_code"].as_i64()),
        (Some("g"), Some(3))
    );
    let (_, vcpu) = span(&events, "vCPU 0");
    assert!(instant_inside(flush, vcpu));
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "vCPU 0")
    );
}

fn instant_inside(instant: &Value, span: &Value) -> bool {
    let ts = instant["ts"].as_f64().unwrap();
    let (start, end) = interval(span);
    start < ts && ts < end && instant["tid"] == span["tid"]
}

#[test]
fn dropping_the_session_mid_unload_still_closes_the_json() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let image = Image::open(&lifecycle_dir().join("Shared.dll")).unwrap();
    {
        let session = TraceSession::with_writer(
            &profiler,
            Box::new(out.clone()),
            TraceFormat::Chrome,
            TraceMode::Streaming,
        )
        .unwrap();
        let event = ImageEvent {
            id: ImageId(7),
            image: &image,
        };
        profiler.raise(Event::ImageLoaded(event));
        // A guest fault between unloading and unloaded: the token is lost
        // and the session is dropped without finish().
        let _token = profiler.raise_image_unloading(&event);
        drop(session);
    }
    let events = chrome_events(&out.text());
    let (_, open) = span(&events, "unload Shared");
    assert_eq!(open["args"]["incomplete"], true);
    // After the session is gone nothing else is written.
    profiler.raise(Event::TbFlushed(TbFlushed {
        generation: 1,
        count: 1,
    }));
    chrome_events(&out.text());
}

#[test]
fn buffered_mode_keeps_the_newest_records_within_its_bound() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(out.clone()),
        TraceFormat::Chrome,
        TraceMode::Buffered { max_events: 4 },
    )
    .unwrap();
    for count in 0..10 {
        profiler.raise(Event::TbFlushed(TbFlushed {
            generation: count,
            count,
        }));
    }
    assert!(
        out.text().is_empty(),
        "nothing is written before finish in buffered mode"
    );
    let summary = session.finish().unwrap();
    let events = chrome_events(&out.text());
    let flushes: Vec<u64> = events
        .iter()
        .filter(|e| e["name"] == "tb flush")
        .map(|e| e["args"]["count"].as_u64().unwrap())
        .collect();
    assert_eq!(flushes, vec![6, 7, 8, 9]);
    assert_eq!(summary.dropped_records, 6);
    assert!(
        events.iter().any(|e| e["name"] == "process_name"),
        "metadata is never dropped"
    );
    let trace: Value = serde_json::from_str(&out.text()).unwrap();
    assert_eq!(trace["otherData"]["dropped_records"], 6);
}

/// Accepts `budget` bytes, then fails every write.
struct FailingWriter {
    budget: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.budget == 0 {
            return Err(io::Error::other("disk full"));
        }
        let n = buf.len().min(self.budget);
        self.budget -= n;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_session_can_leave_kinds_out() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(out.clone()),
        TraceFormat::JsonLines,
        TraceMode::Streaming,
    )
    .unwrap();
    session
        .handle()
        .unsubscribe(tcgkit_profiler::EventKind::TbTranslated);
    raise_everything(&profiler);
    let summary = session.finish().unwrap();
    assert_eq!(summary.events, 7);
    let text = out.text();
    assert!(!text.contains("tb_translated"));
    assert_eq!(text.lines().count(), 8, "7 events and trace_end");
}

#[test]
fn a_write_error_is_reported_by_finish_not_by_a_panic() {
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(FailingWriter { budget: 100_000 }),
        TraceFormat::JsonLines,
        TraceMode::Streaming,
    )
    .unwrap();
    raise_everything(&profiler);
    let err = session.finish().unwrap_err();
    assert!(matches!(err, TraceError::Write { .. }), "{err:?}");
    assert!(err.to_string().contains("disk full"));
    // finish is idempotent, also on error.
    assert!(session.finish().is_err());
    assert!(profiler.faults().is_empty(), "the sink never panicked");
}

#[test]
fn vcpu_threads_raise_concurrently_into_one_valid_trace() {
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = TraceSession::with_writer(
        &profiler,
        Box::new(out.clone()),
        TraceFormat::Chrome,
        TraceMode::Streaming,
    )
    .unwrap();
    std::thread::scope(|s| {
        for vcpu in 0..4u32 {
            let profiler = profiler.clone();
            s.spawn(move || {
                profiler.raise(Event::VcpuStarted(VcpuEvent { vcpu }));
                for n in 0..200u64 {
                    profiler.raise(Event::Syscall(Syscall {
                        vcpu,
                        number: n,
                        args: [0; 6],
                        ret: 0,
                    }));
                }
                profiler.raise(Event::VcpuStopped(VcpuEvent { vcpu }));
            });
        }
    });
    let summary = session.finish().unwrap();
    assert_eq!(summary.events, 4 * 202);
    let events = chrome_events(&out.text());
    for vcpu in 0..4u32 {
        let (_, span) = span(&events, &format!("vCPU {vcpu}"));
        let inside = events
            .iter()
            .filter(|e| e["ph"] == "i" && e["args"]["vcpu"] == vcpu)
            .filter(|e| instant_inside(e, span))
            .count();
        assert_eq!(
            inside, 200,
            "vCPU {vcpu}'s syscalls lie on its thread inside its span"
        );
    }
}

#[test]
fn formats_come_from_extensions_and_names() {
    assert_eq!(
        TraceFormat::from_extension(Path::new("t.json")).unwrap(),
        TraceFormat::Chrome
    );
    assert_eq!(
        TraceFormat::from_extension(Path::new("t.JSONL")).unwrap(),
        TraceFormat::JsonLines
    );
    assert_eq!(
        TraceFormat::from_extension(Path::new("t.ndjson")).unwrap(),
        TraceFormat::JsonLines
    );
    let err = TraceFormat::from_extension(Path::new("trace.txt")).unwrap_err();
    assert!(err.to_string().contains("trace.txt"));
    assert!(TraceFormat::from_extension(Path::new("noext")).is_err());
    assert_eq!(
        "perfetto".parse::<TraceFormat>().unwrap(),
        TraceFormat::Chrome
    );
    assert_eq!(
        "jsonl".parse::<TraceFormat>().unwrap(),
        TraceFormat::JsonLines
    );
    assert!("xml".parse::<TraceFormat>().is_err());
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("no/such/dir/t.json");
    let err = TraceSession::create(&missing, TraceFormat::Chrome).unwrap_err();
    assert!(matches!(err, TraceError::Create { .. }));
}

#[test]
fn sessions_can_be_shared_with_a_signal_handler_thread() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<TraceSession>();
    send_sync::<Profiler>();
    send::<tcgkit_profiler::ImageEventBridge>();

    // What the cli's Ctrl-C handler does: finish from another thread while
    // the main thread keeps raising; the trace stays valid JSON.
    let out = Shared::default();
    let profiler = Profiler::new();
    let session = Arc::new(
        TraceSession::with_writer(
            &profiler,
            Box::new(out.clone()),
            TraceFormat::Chrome,
            TraceMode::Streaming,
        )
        .unwrap(),
    );
    let handler = {
        let session = session.clone();
        std::thread::spawn(move || session.finish().map(|s| s.events))
    };
    for count in 0..2000 {
        profiler.raise(Event::TbFlushed(TbFlushed {
            generation: count,
            count,
        }));
    }
    let finished_at = handler.join().unwrap().unwrap();
    let events = chrome_events(&out.text());
    let flushes = events.iter().filter(|e| e["name"] == "tb flush").count() as u64;
    assert_eq!(
        flushes, finished_at,
        "exactly the events before finish were written"
    );
}

/// A forked child's session: the parent's records were flushed to the
/// parent's file before the fork, and the child's trace is a complete
/// trace of its own, with none of them.
#[test]
fn a_session_continued_in_a_new_file_is_a_trace_of_its_own() {
    let dir = std::env::temp_dir().join(format!("tcgkit-continue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let parent = dir.join("run.json");
    let child = dir.join("run.child.json");
    let session = TraceSession::create(&parent, TraceFormat::Chrome).unwrap();
    let flush = |generation, count| Event::TbFlushed(TbFlushed { generation, count });
    session.profiler().raise(flush(0, 11));
    session.flush().unwrap();
    let flushed = std::fs::read_to_string(&parent).unwrap();
    assert!(flushed.contains("\"count\":11"), "{flushed}");
    session.continue_in(&child).unwrap();
    session.profiler().raise(flush(1, 22));
    let summary = session.finish().unwrap();
    assert_eq!(summary.events, 1, "only the child's own event");
    let events = chrome_events(&std::fs::read_to_string(&child).unwrap());
    let counts: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "tb flush")
        .map(|e| &e["args"]["count"])
        .collect();
    assert_eq!(counts, [&Value::from(22)]);
    // The parent's file holds what was flushed, untouched by the child.
    assert_eq!(std::fs::read_to_string(&parent).unwrap(), flushed);
    std::fs::remove_dir_all(&dir).unwrap();
}
