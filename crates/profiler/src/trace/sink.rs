//! The listener behind a [`TraceSession`](super::TraceSession): turns events
//! into Chrome Trace Event records or JSON Lines and writes them.
//!
//! Memory stays bounded on long runs: streaming output goes through a
//! fixed-size `BufWriter`; buffered output keeps at most `max_events`
//! records (the oldest are dropped and counted); the only other state is
//! one entry per open span (images being loaded or unloaded, running vCPUs)
//! and one per thread seen.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufWriter, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::{TraceFormat, TraceMode, TraceSummary};
use crate::dispatch::{Listener, ProfilerHandle};
use crate::event::{Event, GuestExitStatus, ImageId};
use crate::module::ModuleRecord;

/// Capacity of the streaming write buffer.
const STREAM_BUFFER: usize = 64 * 1024;
/// Emit the translated-blocks counter every this many translations.
const TB_COUNTER_EVERY: u64 = 1024;

pub(crate) struct Sink {
    state: Mutex<SinkState>,
}

struct Open {
    ts_ns: u64,
    tid: u64,
    name: String,
    args: Map<String, Value>,
}

struct Ring {
    /// Metadata records are never dropped: they name processes and threads.
    meta: Vec<String>,
    records: VecDeque<String>,
    max: usize,
}

struct SinkState {
    format: TraceFormat,
    writer: BufWriter<Box<dyn Write + Send>>,
    ring: Option<Ring>,
    /// No record written yet (Chrome needs commas between records).
    first: bool,
    error: Option<io::Error>,
    finished: bool,
    started: Instant,
    pid: u32,
    /// Timestamps are forced strictly increasing so that nested spans are
    /// strictly nested and record order equals time order.
    last_ns: u64,
    threads: HashMap<ThreadId, u64>,
    open_loads: HashMap<ImageId, Open>,
    open_unloads: HashMap<ImageId, Open>,
    open_vcpus: HashMap<u32, Open>,
    live_images: u64,
    tbs_translated: u64,
    tbs_reported: u64,
    summary: TraceSummary,
}

fn lock(m: &Mutex<SinkState>) -> MutexGuard<'_, SinkState> {
    // A panic while holding the lock (a serializer bug) leaves at worst a
    // half-written record; finishing the trace is still the best we can do.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sink {
    pub(crate) fn new(
        writer: Box<dyn Write + Send>,
        format: TraceFormat,
        mode: TraceMode,
    ) -> Result<Sink, io::Error> {
        let ring = match mode {
            TraceMode::Streaming => None,
            TraceMode::Buffered { max_events } => Some(Ring {
                meta: Vec::new(),
                records: VecDeque::new(),
                max: max_events.max(1),
            }),
        };
        let mut state = SinkState {
            format,
            writer: BufWriter::with_capacity(STREAM_BUFFER, writer),
            ring,
            first: true,
            error: None,
            finished: false,
            started: Instant::now(),
            pid: std::process::id(),
            last_ns: 0,
            threads: HashMap::new(),
            open_loads: HashMap::new(),
            open_unloads: HashMap::new(),
            open_vcpus: HashMap::new(),
            live_images: 0,
            tbs_translated: 0,
            tbs_reported: 0,
            summary: TraceSummary::default(),
        };
        if state.ring.is_none() {
            state.write_header()?;
        }
        if format == TraceFormat::Chrome {
            let pid = state.pid;
            state.meta(json!({
                "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                "args": {"name": "tcgkit"}
            }));
        }
        match state.error.take() {
            Some(e) => Err(e),
            None => Ok(Sink {
                state: Mutex::new(state),
            }),
        }
    }

    pub(crate) fn finish(&self) -> Result<TraceSummary, io::Error> {
        lock(&self.state).finish()
    }

    /// Writes out what is buffered for the writer (streaming only).
    pub(crate) fn flush(&self) -> Result<(), io::Error> {
        let mut state = lock(&self.state);
        match state.error.take() {
            Some(e) => Err(e),
            None => state.writer.flush(),
        }
    }

    /// Starts an empty trace of the same format and mode in `writer`,
    /// dropping what the old one still buffered (it is not this
    /// process's to write: see `TraceSession::continue_in`).
    pub(crate) fn restart(&self, writer: Box<dyn Write + Send>) -> Result<(), io::Error> {
        let mut state = lock(&self.state);
        let mode = match &state.ring {
            None => TraceMode::Streaming,
            Some(ring) => TraceMode::Buffered {
                max_events: ring.max,
            },
        };
        let fresh = Sink::new(writer, state.format, mode)?;
        let fresh = fresh
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *state, fresh);
        // into_parts gives the buffer back instead of flushing it.
        drop(old.writer.into_parts());
        Ok(())
    }
}

impl Listener for Sink {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        lock(&self.state).record(event);
    }
}

impl SinkState {
    fn now(&mut self) -> u64 {
        let elapsed = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_ns = elapsed.max(self.last_ns.saturating_add(1));
        self.last_ns
    }

    /// The trace's small thread id for the calling thread; announces new
    /// threads with a `thread_name` metadata record.
    fn tid(&mut self) -> u64 {
        let current = std::thread::current();
        let next = self.threads.len() as u64 + 1;
        let tid = *self.threads.entry(current.id()).or_insert(next);
        if tid == next && self.format == TraceFormat::Chrome {
            let name = current
                .name()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("thread {tid}"));
            self.thread_name(tid, &name);
        }
        tid
    }

    fn thread_name(&mut self, tid: u64, name: &str) {
        let pid = self.pid;
        self.meta(json!({
            "name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}
        }));
    }

    fn write_header(&mut self) -> io::Result<()> {
        if self.format == TraceFormat::Chrome {
            self.writer.write_all(b"{\"traceEvents\":[\n")?;
        }
        Ok(())
    }

    fn write_raw(&mut self, record: &str) {
        if self.error.is_some() {
            return;
        }
        let result = (|| {
            if self.format == TraceFormat::Chrome && !self.first {
                self.writer.write_all(b",\n")?;
            }
            self.writer.write_all(record.as_bytes())?;
            if self.format == TraceFormat::JsonLines {
                self.writer.write_all(b"\n")?;
            }
            Ok(())
        })();
        self.first = false;
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    fn emit_value(&mut self, value: Value, is_meta: bool) {
        self.summary.records += 1;
        let text = value.to_string();
        match &mut self.ring {
            None => self.write_raw(&text),
            Some(ring) if is_meta => ring.meta.push(text),
            Some(ring) => {
                if ring.records.len() == ring.max {
                    ring.records.pop_front();
                    self.summary.dropped_records += 1;
                }
                ring.records.push_back(text);
            }
        }
    }

    fn meta(&mut self, value: Value) {
        self.emit_value(value, true);
    }

    fn emit(&mut self, value: Value) {
        self.emit_value(value, false);
    }

    /// A Chrome record of phase `ph`.
    fn chrome(&self, ph: &str, name: &str, cat: &str, ts_ns: u64, tid: u64) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("name".into(), name.into());
        m.insert("cat".into(), cat.into());
        m.insert("ph".into(), ph.into());
        m.insert("ts".into(), micros(ts_ns));
        m.insert("pid".into(), self.pid.into());
        m.insert("tid".into(), tid.into());
        m
    }

    fn instant(&mut self, name: &str, cat: &str, scope: &str, args: Value) {
        let ts = self.now();
        let tid = self.tid();
        let mut m = self.chrome("i", name, cat, ts, tid);
        m.insert("s".into(), scope.into());
        m.insert("args".into(), args);
        self.emit(Value::Object(m));
    }

    fn counter(&mut self, name: &str, ts: u64, args: Value) {
        let m = {
            let mut m = self.chrome("C", name, "counter", ts, 0);
            m.insert("args".into(), args);
            m
        };
        self.emit(Value::Object(m));
    }

    fn span(&mut self, open: Open, end_ns: u64, cat: &str, extra: Map<String, Value>) {
        let mut m = self.chrome("X", &open.name, cat, open.ts_ns, open.tid);
        m.insert("dur".into(), micros(end_ns.saturating_sub(open.ts_ns)));
        let mut args = open.args;
        args.extend(extra);
        m.insert("args".into(), Value::Object(args));
        self.emit(Value::Object(m));
    }

    /// A JSON Lines record: `ts_us`, `tid`, `event`, then the fields.
    fn line(&mut self, event: &str, fields: Value) {
        let ts = self.now();
        let tid = self.tid();
        let mut m = Map::new();
        m.insert("ts_us".into(), micros(ts));
        m.insert("pid".into(), self.pid.into());
        m.insert("tid".into(), tid.into());
        m.insert("event".into(), event.into());
        if let Value::Object(fields) = fields {
            m.extend(fields);
        }
        self.emit(Value::Object(m));
    }

    fn record(&mut self, event: &Event<'_>) {
        if self.finished {
            return;
        }
        self.summary.events += 1;
        match self.format {
            TraceFormat::JsonLines => self.record_line(event),
            TraceFormat::Chrome => self.record_chrome(event),
        }
    }

    fn record_line(&mut self, event: &Event<'_>) {
        let name = event.kind().name();
        let fields = match event {
            Event::ImageLoading(e) => json!({
                "id": e.id.0,
                "path": e.path.map(|p| p.to_string_lossy()),
                "requested": e.name,
            }),
            Event::ImageLoaded(e) => json!({
                "id": e.id.0,
                "name": e.image.name(),
                "ModuleLoad": ModuleRecord::from_image(e.id, e.image),
            }),
            Event::ImageFailed(e) => json!({
                "id": e.id.0,
                "path": e.path.map(|p| p.to_string_lossy()),
                "error": e.error.to_string(),
            }),
            Event::ImageUnloading(e) => json!({"id": e.id.0, "name": e.image.name()}),
            Event::ImageUnloaded(e) => json!({
                "id": e.id.0,
                "name": e.image.name(),
                "unload_ns": e.unload_time.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
                "ModuleUnload": ModuleRecord::from_image(e.id, e.image),
            }),
            Event::TbTranslated(t) => json!({
                "vcpu": t.vcpu, "pc": t.pc, "guest_bytes": t.guest_bytes,
                "insns": t.insns, "generation": t.generation,
            }),
            Event::TbFlushed(f) => json!({"generation": f.generation, "count": f.count}),
            Event::TbRangeInvalidated(r) => {
                json!({"start": r.start, "end": r.end, "count": r.count})
            }
            Event::PluginInstalled(p) | Event::PluginReset(p) | Event::PluginUninstalled(p) => {
                json!({"plugin_id": p.id, "plugin": p.name})
            }
            Event::VcpuStarted(v) | Event::VcpuStopped(v) => json!({"vcpu": v.vcpu}),
            Event::Syscall(s) => {
                json!({"vcpu": s.vcpu, "number": s.number, "args": s.args, "ret": s.ret})
            }
            Event::ProcessExit(p) => exit_fields(p.status),
        };
        self.line(name, fields);
    }

    fn record_chrome(&mut self, event: &Event<'_>) {
        match event {
            Event::ImageLoading(e) => {
                let ts = self.now();
                let tid = self.tid();
                let what = match (e.name, e.path) {
                    (Some(name), _) => name.to_owned(),
                    (None, Some(path)) => path.to_string_lossy().into_owned(),
                    (None, None) => e.id.to_string(),
                };
                let mut args = Map::new();
                args.insert("id".into(), e.id.0.into());
                if let Some(path) = e.path {
                    args.insert("path".into(), path.to_string_lossy().into());
                }
                self.open_loads.insert(
                    e.id,
                    Open {
                        ts_ns: ts,
                        tid,
                        name: format!("load {what}"),
                        args,
                    },
                );
            }
            Event::ImageLoaded(e) => {
                let ts = self.now();
                let tid = self.tid();
                let record = ModuleRecord::from_image(e.id, e.image);
                let mut open = self.open_loads.remove(&e.id).unwrap_or_else(|| Open {
                    ts_ns: ts,
                    tid,
                    name: String::new(),
                    args: Map::new(),
                });
                // Named by what was loaded, now that it is known.
                open.name = format!("load {}", e.image.name());
                let mut extra = Map::new();
                extra.insert("id".into(), e.id.0.into());
                extra.insert("image".into(), e.image.name().into());
                extra.insert(
                    "ModuleLoad".into(),
                    serde_json::to_value(record).unwrap_or(Value::Null),
                );
                self.span(open, ts, "image", extra);
                self.live_images += 1;
                let live = self.live_images;
                self.counter("images", ts, json!({"loaded": live}));
            }
            Event::ImageFailed(e) => {
                let ts = self.now();
                let tid = self.tid();
                let open = self.open_loads.remove(&e.id).unwrap_or_else(|| Open {
                    ts_ns: ts,
                    tid,
                    name: format!("load {}", e.id),
                    args: Map::new(),
                });
                let mut extra = Map::new();
                extra.insert("error".into(), e.error.to_string().into());
                self.span(open, ts, "image", extra);
            }
            Event::ImageUnloading(e) => {
                let ts = self.now();
                let tid = self.tid();
                let mut args = Map::new();
                args.insert("id".into(), e.id.0.into());
                let name = format!("unload {}", e.image.name());
                self.open_unloads.insert(
                    e.id,
                    Open {
                        ts_ns: ts,
                        tid,
                        name,
                        args,
                    },
                );
            }
            Event::ImageUnloaded(e) => {
                let ts = self.now();
                let tid = self.tid();
                let record = ModuleRecord::from_image(e.id, e.image);
                let open = self.open_unloads.remove(&e.id).unwrap_or_else(|| Open {
                    ts_ns: ts,
                    tid,
                    name: format!("unload {}", e.image.name()),
                    args: Map::new(),
                });
                let mut extra = Map::new();
                extra.insert("image".into(), e.image.name().into());
                extra.insert(
                    "unload_ns".into(),
                    e.unload_time
                        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                        .into(),
                );
                extra.insert(
                    "ModuleUnload".into(),
                    serde_json::to_value(record).unwrap_or(Value::Null),
                );
                self.span(open, ts, "image", extra);
                self.live_images = self.live_images.saturating_sub(1);
                let live = self.live_images;
                self.counter("images", ts, json!({"loaded": live}));
            }
            Event::TbTranslated(_) => {
                self.tbs_translated += 1;
                if self.tbs_translated - self.tbs_reported >= TB_COUNTER_EVERY {
                    self.report_tbs();
                }
            }
            Event::TbFlushed(f) => {
                self.report_tbs();
                let args = json!({"generation": f.generation, "count": f.count});
                self.instant("tb flush", "tb", "p", args);
            }
            Event::TbRangeInvalidated(r) => {
                let args = json!({
                    "start": format!("{:#x}", r.start), "end": format!("{:#x}", r.end), "count": r.count
                });
                self.instant("tb range invalidated", "tb", "p", args);
            }
            Event::PluginInstalled(p) => self.instant(
                &format!("plugin installed: {}", p.name),
                "plugin",
                "p",
                plugin_args(p),
            ),
            Event::PluginReset(p) => self.instant(
                &format!("plugin reset: {}", p.name),
                "plugin",
                "p",
                plugin_args(p),
            ),
            Event::PluginUninstalled(p) => self.instant(
                &format!("plugin uninstalled: {}", p.name),
                "plugin",
                "p",
                plugin_args(p),
            ),
            Event::VcpuStarted(v) => {
                let ts = self.now();
                let tid = self.tid();
                self.thread_name(tid, &format!("vCPU {}", v.vcpu));
                let mut args = Map::new();
                args.insert("vcpu".into(), v.vcpu.into());
                self.open_vcpus.insert(
                    v.vcpu,
                    Open {
                        ts_ns: ts,
                        tid,
                        name: format!("vCPU {}", v.vcpu),
                        args,
                    },
                );
            }
            Event::VcpuStopped(v) => {
                let ts = self.now();
                let tid = self.tid();
                let open = self.open_vcpus.remove(&v.vcpu).unwrap_or_else(|| Open {
                    ts_ns: ts,
                    tid,
                    name: format!("vCPU {}", v.vcpu),
                    args: Map::new(),
                });
                self.span(open, ts, "vcpu", Map::new());
            }
            Event::Syscall(s) => {
                let args =
                    json!({"vcpu": s.vcpu, "number": s.number, "args": s.args, "ret": s.ret});
                self.instant(&format!("syscall {}", s.number), "syscall", "t", args);
            }
            Event::ProcessExit(p) => {
                self.report_tbs();
                self.instant("process exit", "process", "g", exit_fields(p.status));
            }
        }
    }

    fn report_tbs(&mut self) {
        if self.tbs_translated == self.tbs_reported {
            return;
        }
        self.tbs_reported = self.tbs_translated;
        let ts = self.now();
        let n = self.tbs_translated;
        self.counter("translation blocks", ts, json!({"translated": n}));
    }

    /// Close open spans, write the trailer, flush. Idempotent.
    fn finish(&mut self) -> Result<TraceSummary, io::Error> {
        if !self.finished {
            self.finished = true;
            let end = self.now();
            match self.format {
                TraceFormat::Chrome => {
                    self.report_tbs();
                    // Spans still open (a guest fault or Ctrl-C mid-load)
                    // are closed at the end and marked, so the JSON stays
                    // complete and the viewer shows what was in progress.
                    let mut open: Vec<(Open, &str)> = Vec::new();
                    open.extend(self.open_loads.drain().map(|(_, o)| (o, "image")));
                    open.extend(self.open_unloads.drain().map(|(_, o)| (o, "image")));
                    open.extend(self.open_vcpus.drain().map(|(_, o)| (o, "vcpu")));
                    open.sort_by_key(|(o, _)| o.ts_ns);
                    for (o, cat) in open {
                        self.summary.incomplete_spans += 1;
                        let mut extra = Map::new();
                        extra.insert("incomplete".into(), true.into());
                        self.span(o, end, cat, extra);
                    }
                }
                TraceFormat::JsonLines => {
                    self.summary.incomplete_spans =
                        (self.open_loads.len() + self.open_unloads.len() + self.open_vcpus.len())
                            as u64;
                }
            }
            if let Some(ring) = self.ring.take() {
                let result = self.write_header();
                if let Err(e) = result {
                    self.error.get_or_insert(e);
                }
                for record in ring.meta.iter().chain(ring.records.iter()) {
                    self.write_raw(record);
                }
            }
            let trailer = match self.format {
                TraceFormat::Chrome => format!(
                    "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"producer\":\"tcgkit-profiler\",\
                     \"events\":{},\"dropped_records\":{}}}}}\n",
                    self.summary.events, self.summary.dropped_records
                ),
                TraceFormat::JsonLines => {
                    let ts = self.now();
                    let end = json!({
                        "ts_us": micros(ts), "pid": self.pid, "event": "trace_end",
                        "events": self.summary.events,
                        "dropped_records": self.summary.dropped_records,
                        "incomplete_spans": self.summary.incomplete_spans,
                    });
                    format!("{end}\n")
                }
            };
            if self.error.is_none()
                && let Err(e) = self
                    .writer
                    .write_all(trailer.as_bytes())
                    .and_then(|()| self.writer.flush())
            {
                self.error = Some(e);
            }
        }
        match &self.error {
            Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
            None => Ok(self.summary),
        }
    }
}

fn micros(ns: u64) -> Value {
    // Fractional microseconds keep nanosecond resolution in both formats.
    Value::from(ns as f64 / 1000.0)
}

fn plugin_args(p: &crate::event::PluginEvent<'_>) -> Value {
    json!({"plugin_id": p.id, "plugin": p.name})
}

fn exit_fields(status: GuestExitStatus) -> Value {
    match status {
        GuestExitStatus::Exited(code) => json!({"exit_code": code}),
        GuestExitStatus::Signaled(signal) => json!({"signal": signal}),
    }
}
