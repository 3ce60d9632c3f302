//! Property test: random sequences of subscribe / unsubscribe / remove /
//! raise / panicking and self-unsubscribing callbacks deliver exactly what a
//! simple sequential model says, and the interest bits always match.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use tcgkit_profiler::{
    Event, EventKind, Listener, PluginEvent, Profiler, ProfilerHandle, TbFlushed, TbTranslated,
    VcpuEvent,
};

const LISTENERS: usize = 4;
const KINDS: [EventKind; 4] = [
    EventKind::TbFlushed,
    EventKind::TbTranslated,
    EventKind::VcpuStarted,
    EventKind::PluginReset,
];

type Log = Arc<Mutex<Vec<(usize, EventKind, u64)>>>;

struct Probe {
    index: usize,
    log: Log,
    panic_next: AtomicBool,
    unsubscribe_next: AtomicBool,
}

impl Listener for Probe {
    fn event(&self, me: &ProfilerHandle, event: &Event<'_>) {
        let n = match event {
            Event::TbFlushed(e) => e.count,
            Event::TbTranslated(e) => e.pc,
            Event::VcpuStarted(e) => u64::from(e.vcpu),
            Event::PluginReset(e) => e.id,
            _ => u64::MAX,
        };
        self.log.lock().unwrap().push((self.index, event.kind(), n));
        if self.panic_next.swap(false, Ordering::SeqCst) {
            panic!("probe {} told to panic", self.index);
        }
        if self.unsubscribe_next.swap(false, Ordering::SeqCst) {
            me.unsubscribe(event.kind());
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Subscribe(usize, usize),
    Unsubscribe(usize, usize),
    Remove(usize),
    Raise(usize, u32),
    ArmPanic(usize),
    ArmUnsubscribe(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let l = 0..LISTENERS;
    let k = 0..KINDS.len();
    prop_oneof![
        4 => (l.clone(), k.clone()).prop_map(|(l, k)| Op::Subscribe(l, k)),
        2 => (l.clone(), k.clone()).prop_map(|(l, k)| Op::Unsubscribe(l, k)),
        1 => l.clone().prop_map(Op::Remove),
        6 => (k, any::<u32>()).prop_map(|(k, n)| Op::Raise(k, n)),
        1 => l.clone().prop_map(Op::ArmPanic),
        1 => l.prop_map(Op::ArmUnsubscribe),
    ]
}

fn event(kind: usize, n: u32) -> Event<'static> {
    let n64 = u64::from(n);
    match kind {
        0 => Event::TbFlushed(TbFlushed {
            generation: 0,
            count: n64,
        }),
        1 => Event::TbTranslated(TbTranslated {
            vcpu: 0,
            pc: n64,
            guest_bytes: 4,
            insns: 1,
            generation: 0,
        }),
        2 => Event::VcpuStarted(VcpuEvent { vcpu: n }),
        _ => Event::PluginReset(PluginEvent { id: n64, name: "p" }),
    }
}

#[derive(Default, Clone)]
struct ModelListener {
    subscribed: [bool; KINDS.len()],
    removed: bool,
    panic_next: bool,
    unsubscribe_next: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn deliveries_match_the_sequential_model(ops in proptest::collection::vec(op(), 1..60)) {
        // Expected panics would otherwise flood the output.
        std::panic::set_hook(Box::new(|_| {}));
        let profiler = Profiler::new();
        let log: Log = Arc::default();
        let probes: Vec<Arc<Probe>> = (0..LISTENERS)
            .map(|index| Arc::new(Probe {
                index,
                log: log.clone(),
                panic_next: AtomicBool::new(false),
                unsubscribe_next: AtomicBool::new(false),
            }))
            .collect();
        let handles: Vec<ProfilerHandle> =
            probes.iter().enumerate().map(|(i, p)| profiler.register(format!("probe-{i}"), p.clone())).collect();
        let mut model = vec![ModelListener::default(); LISTENERS];
        let mut expected = Vec::new();
        let mut panics = 0;

        for op in ops {
            match op {
                Op::Subscribe(l, k) => {
                    prop_assert_eq!(handles[l].subscribe(KINDS[k]), !model[l].removed);
                    if !model[l].removed { model[l].subscribed[k] = true; }
                }
                Op::Unsubscribe(l, k) => {
                    prop_assert_eq!(handles[l].unsubscribe(KINDS[k]), !model[l].removed);
                    model[l].subscribed[k] = false;
                }
                Op::Remove(l) => {
                    handles[l].remove();
                    model[l] = ModelListener { removed: true, ..ModelListener::default() };
                }
                Op::ArmPanic(l) => {
                    probes[l].panic_next.store(true, Ordering::SeqCst);
                    model[l].panic_next = true;
                }
                Op::ArmUnsubscribe(l) => {
                    probes[l].unsubscribe_next.store(true, Ordering::SeqCst);
                    model[l].unsubscribe_next = true;
                }
                Op::Raise(k, n) => {
                    profiler.raise(event(k, n));
                    for (l, m) in model.iter_mut().enumerate() {
                        if m.removed || !m.subscribed[k] {
                            continue;
                        }
                        expected.push((l, KINDS[k], u64::from(n)));
                        if m.panic_next {
                            panics += 1;
                            *m = ModelListener { removed: true, ..ModelListener::default() };
                        } else if m.unsubscribe_next {
                            m.unsubscribe_next = false;
                            m.subscribed[k] = false;
                        }
                    }
                }
            }
            for (k, kind) in KINDS.iter().enumerate() {
                let any = model.iter().any(|m| !m.removed && m.subscribed[k]);
                prop_assert_eq!(profiler.is_interested(*kind), any, "{:?}", kind);
            }
            for (l, m) in model.iter().enumerate() {
                prop_assert_eq!(handles[l].is_active(), !m.removed);
            }
        }
        let _ = std::panic::take_hook();
        prop_assert_eq!(&*log.lock().unwrap(), &expected);
        prop_assert_eq!(profiler.faults().len(), panics);
        prop_assert_eq!(profiler.listener_count(), model.iter().filter(|m| !m.removed).count());
    }
}
