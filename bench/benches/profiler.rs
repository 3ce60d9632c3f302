//! Cost of raising a profiler event with 0, 1 and 4 listeners, against a
//! baseline that makes no profiler call at all.
//!
//! The claim under test: raising an event nobody listens to costs one
//! relaxed atomic load and a branch, within 1 ns of the baseline.
//! `cargo bench -p tcgkit-bench --bench profiler`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tcgkit_profiler::{Event, EventKind, Listener, Profiler, ProfilerHandle, TbTranslated};

/// A listener doing the least useful work: count the blocks.
struct Count(AtomicU64);

impl Listener for Count {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        if let Event::TbTranslated(tb) = event {
            self.0.fetch_add(u64::from(tb.insns), Ordering::Relaxed);
        }
    }
}

fn tb(pc: u64) -> TbTranslated {
    TbTranslated {
        vcpu: 0,
        pc,
        guest_bytes: 16,
        insns: 4,
        generation: 0,
    }
}

fn with_listeners(n: usize) -> Profiler {
    let profiler = Profiler::new();
    for i in 0..n {
        let h = profiler.register(format!("count-{i}"), Arc::new(Count(AtomicU64::new(0))));
        h.subscribe(EventKind::TbTranslated);
    }
    profiler
}

fn raise_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("profiler_raise");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(1));

    // The same producer work (building the payload from a varying pc)
    // without any profiler call.
    group.bench_function("baseline_no_profiler_call", |b| {
        let mut pc = 0x1_0000u64;
        b.iter(|| {
            pc = pc.wrapping_add(4);
            black_box(tb(black_box(pc)));
        })
    });

    let cases = [
        ("0_listeners", 0usize),
        ("1_listener", 1),
        ("4_listeners", 4),
    ];
    for (name, n) in cases {
        let profiler = with_listeners(n);
        group.bench_function(name, |b| {
            let mut pc = 0x1_0000u64;
            let profiler = black_box(&profiler);
            b.iter(|| {
                pc = pc.wrapping_add(4);
                let event = tb(black_box(pc));
                profiler.raise(Event::TbTranslated(event));
                black_box(event);
            })
        });
    }

    // The hot-path form: the payload is built only if someone listens.
    for (name, n) in [
        ("raise_with_0_listeners", 0usize),
        ("raise_with_1_listener", 1),
    ] {
        let profiler = with_listeners(n);
        group.bench_function(name, |b| {
            let mut pc = 0x1_0000u64;
            let profiler = black_box(&profiler);
            b.iter(|| {
                pc = pc.wrapping_add(4);
                let event = tb(black_box(pc));
                profiler.raise_with(EventKind::TbTranslated, || Event::TbTranslated(event));
                black_box(event);
            })
        });
    }

    // Someone listens, but to another kind: still the fast path.
    let profiler = Profiler::new();
    profiler
        .register("flushes-only", Count(AtomicU64::new(0)))
        .subscribe(EventKind::TbFlushed);
    group.bench_function("0_listeners_of_this_kind_others_listening", |b| {
        let mut pc = 0x1_0000u64;
        let profiler = black_box(&profiler);
        b.iter(|| {
            pc = pc.wrapping_add(4);
            let event = tb(black_box(pc));
            profiler.raise(Event::TbTranslated(event));
            black_box(event);
        })
    });
    group.finish();
}

criterion_group!(benches, raise_cost);
criterion_main!(benches);
