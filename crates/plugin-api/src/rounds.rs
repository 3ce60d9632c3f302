//! Retire rounds: when a reset or uninstall may complete, with one host
//! instrumenting several engines (one per vCPU thread).
//!
//! Every reset, uninstall or removal asks each attached engine to retire
//! its blocks' instrumentation; that request is a *round*. An engine
//! *passes* a round at its next safe point, right after it retired
//! everything it had translated (`Instrumentation::flushed`), and from
//! then on it translates nothing until the round completes: it waits there,
//! as a QEMU vCPU waits outside an exclusive section. The last engine to
//! pass runs the completions, on its own thread, and wakes the others.
//!
//! Why the wait: until the completions ran, the old registrations are
//! still live (no event is missed while the slower engines catch up), so a
//! block an engine translated after passing would carry them into the time
//! after the completion. Waiting keeps every event counted exactly once,
//! by the old registration or the new one.
//!
//! An engine attached while a round is open is asked to retire too, since
//! what it translates carries the old registrations as well; a detached
//! engine (dropped, or given other instrumentation) no longer counts.
//!
//! An *idle* engine (its vCPU thread in a syscall, a futex wait, a sleep)
//! counts as having passed every round: it runs no block while idle, and
//! the request a round sent it makes it retire at its first safe point
//! once back, before any block runs. Back from idle it counts again from
//! the rounds completed so far, like an engine just attached. Without
//! this a reset would wait for a thread that waits for the resetting one.
//!
//! Lock order: a caller may hold the host's state lock while it calls
//! [`Rounds::request`] or [`Rounds::attach`]; completions run with no lock
//! of ours held, so they may take the state lock and request again.
//!
//! Built on `loom`'s primitives under `--cfg loom`, where the unit tests
//! at the end check the protocol in every interleaving.

#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

use std::sync::PoisonError;

/// What the rounds ask of an engine: tcg-core's `FlushHandle` (a test
/// double in the model).
pub(crate) trait RetireRequest {
    /// Asks the engine to retire its instrumentation at its next safe
    /// point: a flush when `flush`, else a re-instrumentation.
    fn request(&self, flush: bool);
}

struct Attached<R> {
    id: u64,
    request: R,
    /// The last round this engine passed.
    passed: u64,
    /// Runs no block for now: counts as passed.
    idle: bool,
}

struct State<R> {
    engines: Vec<Attached<R>>,
    next_id: u64,
    /// Rounds requested so far.
    requested: u64,
    /// Every round up to this one passed all engines and completed.
    completed: u64,
    /// An engine is running completions (for rounds up to `completing`).
    completing: Option<u64>,
}

impl<R> State<R> {
    /// The highest round every attached engine passed.
    fn passed_by_all(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| if e.idle { self.requested } else { e.passed })
            .min()
            .unwrap_or(self.requested)
    }
}

/// The rounds of one host; see the module docs.
pub(crate) struct Rounds<R> {
    state: Mutex<State<R>>,
    completed: Condvar,
}

impl<R: RetireRequest> Rounds<R> {
    pub(crate) fn new() -> Self {
        Rounds {
            state: Mutex::new(State {
                engines: Vec::new(),
                next_id: 0,
                requested: 0,
                completed: 0,
                completing: None,
            }),
            completed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<R>> {
        // No code of ours panics under this lock; completions run outside it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attaches an engine; returns its id. The engine must have nothing
    /// translated under this host yet (tcg-core retires its blocks when its
    /// instrumentation is set).
    pub(crate) fn attach(&self, request: R) -> u64 {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        // An open round must wait for it too (see the module docs).
        if state.requested > state.completed {
            request.request(false);
        }
        let passed = state.completed;
        state.engines.push(Attached {
            id,
            request,
            passed,
            idle: false,
        });
        id
    }

    /// Opens a round: asks every attached engine to retire. Returns the
    /// round, which completes once they all passed it.
    pub(crate) fn request(&self, flush: bool) -> u64 {
        let mut state = self.lock();
        state.requested += 1;
        for engine in &state.engines {
            engine.request.request(flush);
        }
        state.requested
    }

    /// Engine `id` is at a safe point with everything retired. Returns once
    /// every round it passed now has completed; `complete(round)` runs the
    /// completions of every round up to `round`, on the last engine to pass.
    pub(crate) fn pass(&self, id: u64, complete: &mut dyn FnMut(u64)) {
        let mut state = self.lock();
        let round = state.requested;
        let Some(engine) = state.engines.iter_mut().find(|e| e.id == id) else {
            return;
        };
        engine.passed = round;
        state = self.complete_passed(state, complete);
        while state.completed < round && state.engines.iter().any(|e| e.id == id) {
            state = self
                .completed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Engine `id` stops running blocks for a while (`idle`), or runs them
    /// again; see the module docs. Going idle may run completions the
    /// others were waiting for.
    pub(crate) fn set_idle(&self, id: u64, idle: bool, complete: &mut dyn FnMut(u64)) {
        let mut state = self.lock();
        let completed = state.completed;
        let Some(engine) = state.engines.iter_mut().find(|e| e.id == id) else {
            return;
        };
        if engine.idle == idle {
            return;
        }
        engine.idle = idle;
        if idle {
            drop(self.complete_passed(state, complete));
        } else {
            // An open round's request reached it while idle: it passes at
            // its next safe point, which comes before any block.
            engine.passed = engine.passed.max(completed);
        }
    }

    /// Engine `id` leaves: the rounds no longer wait for it. May run
    /// completions the others were waiting for.
    pub(crate) fn detach(&self, id: u64, complete: &mut dyn FnMut(u64)) {
        let mut state = self.lock();
        state.engines.retain(|e| e.id != id);
        drop(self.complete_passed(state, complete));
    }

    /// Rounds every engine passed and no completion has run for. Run
    /// without this lock held, by one thread at a time.
    fn complete_passed<'a>(
        &'a self,
        mut state: MutexGuard<'a, State<R>>,
        complete: &mut dyn FnMut(u64),
    ) -> MutexGuard<'a, State<R>> {
        if state.completing.is_some() {
            // The engine completing will look again when it is done.
            return state;
        }
        loop {
            let target = state.passed_by_all();
            if target <= state.completed {
                return state;
            }
            state.completing = Some(target);
            drop(state);
            complete(target);
            state = self.lock();
            state.completing = None;
            state.completed = target;
            self.completed.notify_all();
        }
    }

    /// Number of attached engines.
    #[cfg(test)]
    pub(crate) fn engines(&self) -> usize {
        self.lock().engines.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Clone, Default)]
    struct Requests(Arc<AtomicU32>);

    impl RetireRequest for Requests {
        fn request(&self, _flush: bool) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_round_completes_when_the_last_engine_passes_or_leaves() {
        let rounds = Rounds::new();
        let (a, b) = (Requests::default(), Requests::default());
        let ia = rounds.attach(a.clone());
        let ib = rounds.attach(b.clone());
        let round = rounds.request(false);
        assert_eq!(round, 1);
        assert_eq!(
            (a.0.load(Ordering::Relaxed), b.0.load(Ordering::Relaxed)),
            (1, 1)
        );
        let done = Cell::new(0);
        // b leaves before passing: a alone decides, and completes.
        rounds.detach(ib, &mut |r| done.set(r));
        assert_eq!(done.get(), 0, "a has not passed yet");
        rounds.pass(ia, &mut |r| done.set(r));
        assert_eq!(done.get(), 1);
        assert_eq!(rounds.engines(), 1);
    }

    #[test]
    fn an_engine_attached_during_a_round_is_asked_to_retire_too() {
        let rounds = Rounds::new();
        let a = Requests::default();
        let ia = rounds.attach(a);
        rounds.request(true);
        let late = Requests::default();
        let il = rounds.attach(late.clone());
        assert_eq!(late.0.load(Ordering::Relaxed), 1);
        let done = Cell::new(0);
        rounds.detach(ia, &mut |r| done.set(r));
        assert_eq!(done.get(), 0, "the late engine must pass first");
        rounds.pass(il, &mut |r| done.set(r));
        assert_eq!(done.get(), 1);
        // Attached after it completed: nothing to retire.
        let later = Requests::default();
        rounds.attach(later.clone());
        assert_eq!(later.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_idle_engine_counts_as_passed_until_it_runs_again() {
        let rounds = Rounds::new();
        let (a, b) = (Requests::default(), Requests::default());
        let ia = rounds.attach(a);
        let ib = rounds.attach(b.clone());
        rounds.request(false);
        let done = Cell::new(0);
        // b waits in a futex: going idle completes nothing yet (a has not
        // passed), a's pass then completes without b.
        rounds.set_idle(ib, true, &mut |r| done.set(r));
        assert_eq!(done.get(), 0);
        rounds.pass(ia, &mut |r| done.set(r));
        assert_eq!(done.get(), 1);
        // A round opened while b is idle reaches b too, and completes when
        // a passes; b, back, passes its request at once.
        rounds.request(false);
        assert_eq!(b.0.load(Ordering::Relaxed), 2);
        rounds.pass(ia, &mut |r| done.set(r));
        assert_eq!(done.get(), 2);
        rounds.set_idle(ib, false, &mut |_| panic!("nothing to complete"));
        rounds.pass(ib, &mut |_| panic!("already complete"));
        // Back from idle, b counts again: a round waits for it (a goes
        // idle here rather than passing, which would wait for b).
        rounds.request(false);
        rounds.set_idle(ia, true, &mut |r| done.set(r));
        assert_eq!(done.get(), 2, "b has not passed round 3");
        rounds.set_idle(ib, true, &mut |r| done.set(r));
        assert_eq!(done.get(), 3, "b going idle completes it");
    }

    #[test]
    fn with_no_engine_a_round_completes_at_the_next_pass_or_detach() {
        let rounds: Rounds<Requests> = Rounds::new();
        rounds.request(false);
        let done = Cell::new(0);
        rounds.detach(7, &mut |r| done.set(r));
        assert_eq!(done.get(), 1);
        rounds.pass(7, &mut |_| panic!("nothing left to complete"));
    }

    #[test]
    fn engines_waiting_at_their_safe_point_resume_after_the_completion() {
        let rounds = Arc::new(Rounds::new());
        let ids: Vec<u64> = (0..4).map(|_| rounds.attach(Requests::default())).collect();
        rounds.request(false);
        let completions = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = ids
            .into_iter()
            .map(|id| {
                let rounds = Arc::clone(&rounds);
                let completions = Arc::clone(&completions);
                std::thread::spawn(move || {
                    rounds.pass(id, &mut |_| {
                        completions.fetch_add(1, Ordering::SeqCst);
                    });
                    // Nobody returns before the completion ran.
                    completions.load(Ordering::SeqCst)
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().ok(), Some(1));
        }
        assert_eq!(completions.load(Ordering::SeqCst), 1);
    }
}

/// The protocol under loom: `RUSTFLAGS="--cfg loom" cargo test -p
/// tcgkit-plugin-api --lib --release rounds::model`.
///
/// Two engines run blocks; a block runs the plan the engine translated,
/// and a plan carries every registration generation the host's snapshot
/// held at translation: the old ones stay in it, live, until the
/// completion (so no event is missed meanwhile).
/// Between blocks an engine tests its pending bit (with the orderings
/// tcg-core's loop uses) and, when set, retires its plan and passes the
/// round. A third thread, or engine 0 from inside a block, resets the
/// plugin: a new generation is registered, a round is requested, and the
/// completion kills the old generation. Checked in every interleaving: the
/// completion runs exactly once, and no block runs a plan of a killed
/// generation.
#[cfg(all(test, loom))]
mod model {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    #[derive(Clone)]
    struct Pending(Arc<AtomicU32>);

    impl RetireRequest for Pending {
        fn request(&self, _flush: bool) {
            self.0.fetch_or(1, Ordering::Release);
        }
    }

    /// The generations the host's translation snapshot holds (under the
    /// host's state lock in the real code): `(oldest, newest)`.
    struct Snapshot(u64, u64);

    /// The host side: the snapshot translations pick up and the oldest
    /// live generation (`Slot::oldest_live`).
    struct Host {
        rounds: Rounds<Pending>,
        snapshot: Mutex<Snapshot>,
        oldest_live: AtomicU64,
        completions: AtomicU64,
        /// What a waiting engine waits for (see [`Between::WaitsIdle`]).
        released: AtomicU64,
    }

    impl Host {
        fn reset(&self) {
            // `PluginHandle::reset`: under the state lock, the next
            // registrations get a new generation and the round opens.
            let mut snapshot = self.snapshot.lock().unwrap();
            snapshot.1 += 1;
            self.rounds.request(false);
        }

        fn complete(&self) {
            let mut snapshot = self.snapshot.lock().unwrap();
            snapshot.0 = snapshot.1;
            self.oldest_live.store(snapshot.1, Ordering::Release);
            self.completions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How an engine's thread behaves between its blocks.
    #[derive(Clone, Copy, PartialEq)]
    enum Between {
        /// It goes straight on.
        Runs,
        /// It waits (a futex, say) idle until the resetting engine has
        /// passed its safe point: without idle engines counting as
        /// passed, that engine would wait for this one forever.
        WaitsIdle,
    }

    fn engine(host: &Host, id: u64, pending: &AtomicU32, reset_in_block: bool, between: Between) {
        let mut plan: Option<u64> = None;
        for block in 0..2 {
            if between == Between::WaitsIdle && block > 0 {
                host.rounds.set_idle(id, true, &mut |_| host.complete());
                while host.released.load(Ordering::Acquire) == 0 {
                    loom::thread::yield_now();
                }
                host.rounds.set_idle(id, false, &mut |_| host.complete());
            }
            // The quiescent point of tcg-core's loop.
            if pending.load(Ordering::Relaxed) != 0 {
                pending.swap(0, Ordering::Acquire);
                plan = None;
                host.rounds.pass(id, &mut |_| host.complete());
                if reset_in_block {
                    // The resetting thread goes on and wakes the waiter.
                    host.released.store(1, Ordering::Release);
                }
            }
            let oldest = *plan.get_or_insert_with(|| host.snapshot.lock().unwrap().0);
            // Running the block: all its callbacks must be live.
            assert!(oldest >= host.oldest_live.load(Ordering::Acquire));
            if reset_in_block && block == 0 {
                host.reset();
            }
        }
        host.rounds.detach(id, &mut |_| host.complete());
    }

    fn check(reset_from_engine: bool, between: Between) {
        loom::model(move || {
            let host = Arc::new(Host {
                rounds: Rounds::new(),
                snapshot: Mutex::new(Snapshot(0, 0)),
                oldest_live: AtomicU64::new(0),
                completions: AtomicU64::new(0),
                released: AtomicU64::new(0),
            });
            let pendings: Vec<Pending> = (0..2)
                .map(|_| Pending(Arc::new(AtomicU32::new(0))))
                .collect();
            let ids: Vec<u64> = pendings
                .iter()
                .map(|p| host.rounds.attach(p.clone()))
                .collect();
            let threads: Vec<_> = ids
                .iter()
                .zip(&pendings)
                .map(|(&id, p)| {
                    let host = Arc::clone(&host);
                    let pending = Arc::clone(&p.0);
                    loom::thread::spawn(move || {
                        let reset = reset_from_engine && id == 0;
                        let between = if id == 1 { between } else { Between::Runs };
                        engine(&host, id, &pending, reset, between)
                    })
                })
                .collect();
            if !reset_from_engine {
                host.reset();
            }
            for t in threads {
                t.join().unwrap();
            }
            // `PluginHost::finish`: a round requested after every engine
            // left completes here.
            host.rounds.detach(u64::MAX, &mut |_| host.complete());
            // Everything left has passed or detached: the round completed.
            assert_eq!(host.completions.load(Ordering::Relaxed), 1);
            assert_eq!(host.oldest_live.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn a_reset_from_another_thread() {
        check(false, Between::Runs);
    }

    #[test]
    fn a_reset_from_inside_a_block() {
        check(true, Between::Runs);
    }

    /// The other engine waits, idle, between its blocks for the resetting
    /// one to go on: the reset completes while it is idle (else loom finds
    /// the deadlock), and it still never runs a block with a dead
    /// registration.
    #[test]
    fn a_reset_while_the_other_engine_waits_idle_for_the_resetting_one() {
        check(true, Between::WaitsIdle);
    }
}
