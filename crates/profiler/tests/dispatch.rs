//! Dispatch semantics: per-kind subscription, ordering, unsubscribe from
//! callbacks, panic isolation, multi-threaded raisers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tcgkit_profiler::{
    Event, EventKind, Listener, PluginEvent, Profiler, ProfilerHandle, TbFlushed, TbTranslated,
    VcpuEvent,
};

/// `(listener tag, event kind, payload number)` in delivery order.
type Log = Arc<Mutex<Vec<(&'static str, EventKind, u64)>>>;

/// Records into a shared log.
struct Recorder {
    tag: &'static str,
    log: Log,
}

fn number(event: &Event<'_>) -> u64 {
    match event {
        Event::TbFlushed(f) => f.count,
        Event::TbTranslated(t) => t.pc,
        Event::VcpuStarted(v) | Event::VcpuStopped(v) => u64::from(v.vcpu),
        Event::PluginReset(p) => p.id,
        _ => u64::MAX,
    }
}

impl Listener for Recorder {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        self.log
            .lock()
            .unwrap()
            .push((self.tag, event.kind(), number(event)));
    }
}

fn flushed(count: u64) -> Event<'static> {
    Event::TbFlushed(TbFlushed {
        generation: 1,
        count,
    })
}

#[test]
fn nobody_listening_means_not_interested_and_no_delivery() {
    let profiler = Profiler::new();
    for kind in EventKind::ALL {
        assert!(!profiler.is_interested(kind));
    }
    profiler.raise(flushed(1));
    let log = Arc::new(Mutex::new(Vec::new()));
    let h = profiler.register(
        "rec",
        Recorder {
            tag: "a",
            log: log.clone(),
        },
    );
    // Registered but subscribed to nothing: still not interested.
    assert!(!profiler.is_interested(EventKind::TbFlushed));
    profiler.raise(flushed(2));
    assert!(log.lock().unwrap().is_empty());
    assert!(h.subscribe(EventKind::TbFlushed));
    assert!(profiler.is_interested(EventKind::TbFlushed));
    assert!(!profiler.is_interested(EventKind::TbTranslated));
    profiler.raise(flushed(3));
    profiler.raise(Event::VcpuStarted(VcpuEvent { vcpu: 0 }));
    assert_eq!(*log.lock().unwrap(), vec![("a", EventKind::TbFlushed, 3)]);
}

#[test]
fn several_profilers_get_their_own_kinds_in_registration_order() {
    let profiler = Profiler::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = profiler.register(
        "a",
        Recorder {
            tag: "a",
            log: log.clone(),
        },
    );
    let b = profiler.register(
        "b",
        Recorder {
            tag: "b",
            log: log.clone(),
        },
    );
    let c = profiler.register(
        "c",
        Recorder {
            tag: "c",
            log: log.clone(),
        },
    );
    a.subscribe(EventKind::TbFlushed);
    b.subscribe(EventKind::VcpuStarted);
    c.subscribe(EventKind::TbFlushed);
    c.subscribe(EventKind::VcpuStarted);
    profiler.raise(flushed(7));
    profiler.raise(Event::VcpuStarted(VcpuEvent { vcpu: 3 }));
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            ("a", EventKind::TbFlushed, 7),
            ("c", EventKind::TbFlushed, 7),
            ("b", EventKind::VcpuStarted, 3),
            ("c", EventKind::VcpuStarted, 3),
        ]
    );
    // Unsubscribing the last listener of a kind clears the interest bit.
    a.unsubscribe(EventKind::TbFlushed);
    assert!(profiler.is_interested(EventKind::TbFlushed));
    c.unsubscribe(EventKind::TbFlushed);
    assert!(!profiler.is_interested(EventKind::TbFlushed));
    assert!(profiler.is_interested(EventKind::VcpuStarted));
    b.remove();
    c.remove();
    assert!(!profiler.is_interested(EventKind::VcpuStarted));
    assert!(!b.is_active());
    assert!(
        !b.subscribe(EventKind::VcpuStarted),
        "a removed handle cannot resubscribe"
    );
    assert_eq!(profiler.listener_count(), 1);
}

/// Unsubscribes itself (and optionally another handle) on its first event.
struct OneShot {
    other: Mutex<Option<ProfilerHandle>>,
    seen: AtomicU64,
}

impl Listener for OneShot {
    fn event(&self, me: &ProfilerHandle, event: &Event<'_>) {
        self.seen.fetch_add(1, Ordering::SeqCst);
        assert!(me.unsubscribe(event.kind()));
        if let Some(other) = self.other.lock().unwrap().take() {
            other.unsubscribe(event.kind());
        }
    }
}

#[test]
fn unsubscribe_from_inside_a_callback_takes_effect_for_callbacks_not_yet_started() {
    let profiler = Profiler::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let before = profiler.register(
        "before",
        Recorder {
            tag: "before",
            log: log.clone(),
        },
    );
    let one_shot = Arc::new(OneShot {
        other: Mutex::new(None),
        seen: AtomicU64::new(0),
    });
    let me = profiler.register("one-shot", one_shot.clone());
    let after = profiler.register(
        "after",
        Recorder {
            tag: "after",
            log: log.clone(),
        },
    );
    let last = profiler.register(
        "last",
        Recorder {
            tag: "last",
            log: log.clone(),
        },
    );
    for h in [&before, &me, &after, &last] {
        h.subscribe(EventKind::TbFlushed);
    }
    *one_shot.other.lock().unwrap() = Some(after.clone());

    profiler.raise(flushed(1));
    // The current dispatch completed for the others, but "after" was
    // unsubscribed before its turn came, so it did not get event 1.
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            ("before", EventKind::TbFlushed, 1),
            ("last", EventKind::TbFlushed, 1)
        ]
    );
    profiler.raise(flushed(2));
    assert_eq!(
        one_shot.seen.load(Ordering::SeqCst),
        1,
        "the next raise does not see it"
    );
    assert!(!me.is_subscribed(EventKind::TbFlushed));
    assert!(me.is_active(), "unsubscribing is not removal");
    assert_eq!(log.lock().unwrap().len(), 4);
}

struct Panicker {
    calls: AtomicU64,
}

impl Listener for Panicker {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Event::TbFlushed(f) = event
            && f.count == 13
        {
            panic!("unlucky flush of {} blocks", f.count);
        }
    }
}

#[test]
fn a_panicking_profiler_is_removed_by_name_and_the_others_go_on() {
    let profiler = Profiler::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = profiler.register(
        "first",
        Recorder {
            tag: "first",
            log: log.clone(),
        },
    );
    let panicker = Arc::new(Panicker {
        calls: AtomicU64::new(0),
    });
    let bad = profiler.register("flaky-profiler", panicker.clone());
    let last = profiler.register(
        "last",
        Recorder {
            tag: "last",
            log: log.clone(),
        },
    );
    for h in [&first, &bad, &last] {
        h.subscribe(EventKind::TbFlushed);
    }
    bad.subscribe(EventKind::PluginReset);

    profiler.raise(flushed(12));
    profiler.raise(flushed(13));
    profiler.raise(flushed(14));
    profiler.raise(Event::PluginReset(PluginEvent { id: 5, name: "p" }));

    assert_eq!(
        panicker.calls.load(Ordering::SeqCst),
        2,
        "no call after the panic"
    );
    assert!(!bad.is_active());
    assert!(
        !profiler.is_interested(EventKind::PluginReset),
        "its subscriptions are gone"
    );
    let tags: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _, n)| (*t, *n))
        .collect();
    assert_eq!(
        tags,
        vec![
            ("first", 12),
            ("last", 12),
            ("first", 13),
            ("last", 13),
            ("first", 14),
            ("last", 14)
        ]
    );
    let faults = profiler.faults();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].name, "flaky-profiler");
    assert_eq!(faults[0].kind, EventKind::TbFlushed);
    assert_eq!(faults[0].message, "unlucky flush of 13 blocks");
}

/// Raises a nested event and registers a new listener from inside a callback.
struct Reentrant {
    profiler: Profiler,
    log: Log,
}

impl Listener for Reentrant {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        if let Event::TbFlushed(f) = event
            && f.count == 1
        {
            let late = self.profiler.register(
                "late",
                Recorder {
                    tag: "late",
                    log: self.log.clone(),
                },
            );
            late.subscribe(EventKind::TbFlushed);
            late.subscribe(EventKind::VcpuStopped);
            self.profiler
                .raise(Event::VcpuStopped(VcpuEvent { vcpu: 9 }));
        }
    }
}

#[test]
fn callbacks_may_raise_and_register_without_deadlock() {
    let profiler = Profiler::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let r = profiler.register(
        "reentrant",
        Reentrant {
            profiler: profiler.clone(),
            log: log.clone(),
        },
    );
    r.subscribe(EventKind::TbFlushed);
    profiler.raise(flushed(1));
    // The nested raise reached the new listener; the outer dispatch's
    // snapshot predates it, so it did not get flush 1.
    assert_eq!(
        *log.lock().unwrap(),
        vec![("late", EventKind::VcpuStopped, 9)]
    );
    profiler.raise(flushed(2));
    assert_eq!(
        log.lock().unwrap().last(),
        Some(&("late", EventKind::TbFlushed, 2))
    );
}

struct Counter(AtomicU64);

impl Listener for Counter {
    fn event(&self, _me: &ProfilerHandle, event: &Event<'_>) {
        if let Event::TbTranslated(t) = event {
            self.0.fetch_add(t.pc, Ordering::Relaxed);
        }
    }
}

#[test]
fn many_raising_threads_deliver_exact_counts_while_others_churn_subscriptions() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 5_000;
    let profiler = Profiler::new();
    let steady: Vec<_> = (0..2)
        .map(|_| Arc::new(Counter(AtomicU64::new(0))))
        .collect();
    for (i, c) in steady.iter().enumerate() {
        profiler
            .register(format!("steady-{i}"), c.clone())
            .subscribe(EventKind::TbTranslated);
    }
    let churn = Arc::new(Counter(AtomicU64::new(0)));
    let churn_handle = profiler.register("churn", churn.clone());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let profiler = profiler.clone();
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let _ = (t, i);
                    profiler.raise(Event::TbTranslated(TbTranslated {
                        vcpu: t as u32,
                        pc: 1,
                        guest_bytes: 4,
                        insns: 1,
                        generation: 0,
                    }));
                }
            });
        }
        s.spawn(|| {
            for i in 0..500 {
                if i % 2 == 0 {
                    churn_handle.subscribe(EventKind::TbTranslated);
                } else {
                    churn_handle.unsubscribe(EventKind::TbTranslated);
                }
                std::thread::yield_now();
            }
        });
    });
    for c in &steady {
        assert_eq!(c.0.load(Ordering::Relaxed), THREADS * PER_THREAD);
    }
    assert!(churn.0.load(Ordering::Relaxed) <= THREADS * PER_THREAD);
    assert!(!churn_handle.is_subscribed(EventKind::TbTranslated));
}

#[test]
fn raise_with_builds_the_payload_only_for_listeners() {
    let profiler = Profiler::new();
    let built = std::cell::Cell::new(0);
    let make = || {
        built.set(built.get() + 1);
        flushed(5)
    };
    profiler.raise_with(EventKind::TbFlushed, make);
    assert_eq!(built.get(), 0, "nobody listens: not built");
    let log = Log::default();
    profiler
        .register(
            "rec",
            Recorder {
                tag: "r",
                log: log.clone(),
            },
        )
        .subscribe(EventKind::TbFlushed);
    profiler.raise_with(EventKind::TbFlushed, make);
    assert_eq!(built.get(), 1);
    // A mismatched kind still reaches only listeners of the event's own kind.
    profiler.raise_with(EventKind::TbFlushed, || {
        Event::VcpuStarted(VcpuEvent { vcpu: 1 })
    });
    assert_eq!(*log.lock().unwrap(), vec![("r", EventKind::TbFlushed, 5)]);
}
