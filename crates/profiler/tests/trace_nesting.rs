//! Property test: for random unload trees raised in stack order, the Chrome
//! trace's unload spans nest exactly like the tree, and siblings are
//! disjoint and in order.

use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use serde_json::Value;
use tcgkit_image_core::Image;
use tcgkit_profiler::{ImageEvent, ImageId, Profiler, TraceFormat, TraceMode, TraceSession};

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

/// Unload `node` and, nested inside, its children in index order.
fn unload(profiler: &Profiler, image: &Image, children: &[Vec<usize>], node: usize) {
    let event = ImageEvent {
        id: ImageId(node as u64),
        image,
    };
    let token = profiler.raise_image_unloading(&event);
    for &child in &children[node] {
        unload(profiler, image, children, child);
    }
    profiler.raise_image_unloaded(token, &event);
}

fn interval(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn unload_spans_nest_like_the_unload_tree(
        parents in proptest::collection::vec(any::<prop::sample::Index>(), 0..24),
        buffered in any::<bool>(),
    ) {
        let image = Image::open(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/assemblies/lifecycle/Shared.dll"),
        )
        .unwrap();
        // Node i + 1 hangs under a node created before it.
        let n = parents.len() + 1;
        let mut parent = vec![None; n];
        let mut children = vec![Vec::new(); n];
        for (i, p) in parents.iter().enumerate() {
            let p = p.index(i + 1);
            parent[i + 1] = Some(p);
            children[p].push(i + 1);
        }
        let out = Shared::default();
        let profiler = Profiler::new();
        let mode = if buffered { TraceMode::Buffered { max_events: 10_000 } } else { TraceMode::Streaming };
        let session = TraceSession::with_writer(&profiler, Box::new(out.clone()), TraceFormat::Chrome, mode).unwrap();
        unload(&profiler, &image, &children, 0);
        session.finish().unwrap();

        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let trace: Value = serde_json::from_str(&text).unwrap();
        let records = trace["traceEvents"].as_array().unwrap();
        let mut spans: Vec<Option<(usize, &Value)>> = vec![None; n];
        for (at, r) in records.iter().enumerate().filter(|(_, r)| r["ph"] == "X") {
            let id = r["args"]["id"].as_u64().unwrap() as usize;
            prop_assert!(spans[id].is_none(), "one span per unload");
            prop_assert_eq!(&r["args"]["ModuleUnload"]["ModuleID"], &r["args"]["id"]);
            spans[id] = Some((at, r));
        }
        let spans: Vec<(usize, &Value)> = spans.into_iter().map(Option::unwrap).collect();
        for node in 0..n {
            let (at, span) = spans[node];
            let (s, e) = interval(span);
            if let Some(p) = parent[node] {
                let (p_at, p_span) = spans[p];
                let (ps, pe) = interval(p_span);
                prop_assert!(ps < s && e < pe, "{} not inside its parent {}", node, p);
                prop_assert!(at < p_at, "a child's record precedes its parent's");
            }
            for pair in children[node].windows(2) {
                let (_, a_end) = interval(spans[pair[0]].1);
                let (b_start, _) = interval(spans[pair[1]].1);
                prop_assert!(a_end < b_start, "siblings {} and {} overlap", pair[0], pair[1]);
            }
        }
    }
}
