//! `futex` requests as the guest makes them, decoded once for both ways
//! guest threads run (`threads.rs`, taking turns; `host_threads.rs`, on
//! host threads): the operations glibc and Go use, their timeouts as
//! deadlines, and `FUTEX_WAKE_OP`'s encoded operation; and for host
//! threads, the wait queues ([`Futexes`]) and a thread's place to sleep
//! ([`Waiter`]).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tcgkit_tcg_core::GuestMemory;

use crate::abi::errno;

pub(crate) const FUTEX_WAIT: u64 = 0;
pub(crate) const FUTEX_WAKE: u64 = 1;
pub(crate) const FUTEX_REQUEUE: u64 = 3;
pub(crate) const FUTEX_CMP_REQUEUE: u64 = 4;
pub(crate) const FUTEX_WAKE_OP: u64 = 5;
pub(crate) const FUTEX_WAIT_BITSET: u64 = 9;
pub(crate) const FUTEX_WAKE_BITSET: u64 = 10;
pub(crate) const FUTEX_CLOCK_REALTIME: u64 = 256;
pub(crate) const FUTEX_CMD_MASK: u64 = 0x7f;
/// Every waiter's bits: what the forms without a bitset use.
pub(crate) const BITSET_ALL: u32 = u32::MAX;

/// One decoded `futex` call (the private flag changes nothing here: one
/// process's threads share one address space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// Sleep while the word at `addr` holds `val`, until woken through
    /// one of `bitset`'s bits or `deadline`.
    Wait {
        addr: u64,
        val: u32,
        bitset: u32,
        deadline: Option<Instant>,
    },
    /// Wake up to `n` waiters on `addr` with a bit in `bitset`.
    Wake { addr: u64, n: u32, bitset: u32 },
    /// Wake `n` on `addr`, move up to `moved` others to `to`; with
    /// `expect`, only if the word at `addr` still holds it.
    Requeue {
        addr: u64,
        n: u32,
        to: u64,
        moved: u32,
        expect: Option<u32>,
    },
    /// Apply `op` to the word at `addr2`, wake `n` on `addr`, and `n2` on
    /// `addr2` if the old word passed `op`'s comparison.
    WakeOp {
        addr: u64,
        n: u32,
        addr2: u64,
        n2: u32,
        op: WakeOp,
    },
}

impl Request {
    /// Decodes the six argument registers of `futex`; an errno for a call
    /// Linux refuses.
    pub(crate) fn parse(args: [u64; 6], mem: &mut GuestMemory) -> Result<Request, i32> {
        let [addr, op, val, timeout, addr2, val3] = args;
        if !addr.is_multiple_of(4) {
            return Err(errno::EINVAL);
        }
        let cmd = op & FUTEX_CMD_MASK;
        Ok(match cmd {
            FUTEX_WAIT | FUTEX_WAIT_BITSET => {
                let bitset = if cmd == FUTEX_WAIT {
                    BITSET_ALL
                } else {
                    val3 as u32
                };
                if bitset == 0 {
                    return Err(errno::EINVAL);
                }
                let deadline = match timeout {
                    0 => None,
                    t => Some(deadline_of(mem, t, cmd == FUTEX_WAIT, op)?),
                };
                Request::Wait {
                    addr,
                    val: val as u32,
                    bitset,
                    deadline,
                }
            }
            FUTEX_WAKE => Request::Wake {
                addr,
                n: val as u32,
                bitset: BITSET_ALL,
            },
            FUTEX_WAKE_BITSET => match val3 as u32 {
                0 => return Err(errno::EINVAL),
                bitset => Request::Wake {
                    addr,
                    n: val as u32,
                    bitset,
                },
            },
            // The fourth argument is a count here, not a timeout.
            FUTEX_REQUEUE | FUTEX_CMP_REQUEUE => Request::Requeue {
                addr,
                n: val as u32,
                to: addr2,
                moved: timeout as u32,
                expect: (cmd == FUTEX_CMP_REQUEUE).then_some(val3 as u32),
            },
            FUTEX_WAKE_OP => {
                if !addr2.is_multiple_of(4) {
                    return Err(errno::EINVAL);
                }
                Request::WakeOp {
                    addr,
                    n: val as u32,
                    addr2,
                    n2: timeout as u32,
                    op: WakeOp::decode(val3 as u32)?,
                }
            }
            _ => return Err(errno::ENOSYS),
        })
    }
}

/// Wait queues a futex request acts on: the parked threads of
/// `threads.rs`, the host queues of [`Futexes`], or none at all (a
/// single-threaded process).
pub(crate) trait WaitQueues {
    /// Wakes up to `n` waiters on `addr` whose bitset meets `bits`, first
    /// come first woken; returns how many.
    fn wake(&mut self, addr: u64, n: u32, bits: u32) -> u64;
    /// Moves up to `n` waiters on `from` to wait on `to`; returns how many.
    fn requeue(&mut self, from: u64, to: u64, n: u32) -> u64;
}

/// A single-threaded process's queues: nobody ever waits in them.
pub(crate) struct NoWaiters;

impl WaitQueues for NoWaiters {
    fn wake(&mut self, _: u64, _: u32, _: u32) -> u64 {
        0
    }

    fn requeue(&mut self, _: u64, _: u64, _: u32) -> u64 {
        0
    }
}

/// Carries out `request` on `queues`, all but the wait itself: `Ok(None)`
/// for a `Wait` whose word holds its value (the caller queues the waiter,
/// still holding whatever keeps a waker out meanwhile), else what the call
/// returns.
pub(crate) fn answer(
    request: Request,
    mem: &mut GuestMemory,
    queues: &mut impl WaitQueues,
) -> Result<Option<u64>, i32> {
    let word =
        |mem: &mut GuestMemory, a: u64| mem.load(a, 4).map(|v| v as u32).map_err(|_| errno::EFAULT);
    match request {
        Request::Wait { addr, val, .. } => {
            if word(mem, addr)? != val {
                return Err(errno::EAGAIN);
            }
            Ok(None)
        }
        Request::Wake { addr, n, bitset } => Ok(Some(queues.wake(addr, n, bitset))),
        Request::Requeue {
            addr,
            n,
            to,
            moved,
            expect,
        } => {
            if let Some(expect) = expect
                && word(mem, addr)? != expect
            {
                return Err(errno::EAGAIN);
            }
            let woken = queues.wake(addr, n, BITSET_ALL);
            Ok(Some(woken + queues.requeue(addr, to, moved)))
        }
        Request::WakeOp {
            addr,
            n,
            addr2,
            n2,
            op,
        } => {
            let (old, _) = mem
                .atomic_update(addr2, 4, |old| u64::from(op.apply(old as u32)))
                .map_err(|_| errno::EFAULT)?;
            let mut woken = queues.wake(addr, n, BITSET_ALL);
            if op.passes(old as u32) {
                woken += queues.wake(addr2, n2, BITSET_ALL);
            }
            Ok(Some(woken))
        }
    }
}

/// `FUTEX_WAKE_OP`'s operation on the second word and its comparison
/// of the old value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WakeOp {
    op: u32,
    oparg: i32,
    cmp: u32,
    cmparg: i32,
}

impl WakeOp {
    fn decode(encoded: u32) -> Result<WakeOp, i32> {
        let op = (encoded >> 28) & 7;
        let shift = (encoded >> 28) & 8 != 0;
        let cmp = (encoded >> 24) & 15;
        let sext12 = |v: u32| (((v & 0xfff) << 20) as i32) >> 20;
        let mut oparg = sext12(encoded >> 12);
        if shift {
            oparg = 1i32.checked_shl(oparg as u32).unwrap_or(0);
        }
        if op > 4 || cmp > 5 {
            return Err(errno::ENOSYS);
        }
        Ok(WakeOp {
            op,
            oparg,
            cmp,
            cmparg: sext12(encoded),
        })
    }

    /// The new value of the word from its old one.
    pub(crate) fn apply(&self, old: u32) -> u32 {
        let (old, arg) = (old as i32, self.oparg);
        (match self.op {
            0 => arg,
            1 => old.wrapping_add(arg),
            2 => old | arg,
            3 => old & !arg,
            _ => old ^ arg,
        }) as u32
    }

    /// Whether waiters on the second word wake too, from its old value.
    pub(crate) fn passes(&self, old: u32) -> bool {
        let (old, arg) = (old as i32, self.cmparg);
        match self.cmp {
            0 => old == arg,
            1 => old != arg,
            2 => old < arg,
            3 => old <= arg,
            4 => old > arg,
            _ => old >= arg,
        }
    }
}

/// A futex timeout as a deadline: relative for `FUTEX_WAIT`, absolute on
/// the monotonic (or, with `FUTEX_CLOCK_REALTIME`, the real-time) clock
/// for `FUTEX_WAIT_BITSET`.
fn deadline_of(mem: &mut GuestMemory, addr: u64, relative: bool, op: u64) -> Result<Instant, i32> {
    let (sec, nsec) = crate::syscall::timespec_at(mem, addr)?;
    let wanted = Duration::new(sec as u64, nsec as u32);
    let now = Instant::now();
    if relative {
        return Ok(now + wanted);
    }
    let since = if op & FUTEX_CLOCK_REALTIME != 0 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    } else {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    Ok(now + wanted.saturating_sub(since))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its data consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a thread's wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woke {
    Woken,
    TimedOut,
    Kicked,
}

/// One thread's place to sleep: in a futex queue, a `nanosleep`, or for
/// the server's answer; and, with a ring, in a host `poll` (a kick rings
/// it, so that a poll of host descriptors ends for a signal too).
#[derive(Default)]
pub(crate) struct Waiter {
    state: Mutex<WaitState>,
    cv: Condvar,
    ring: Option<OwnedFd>,
}

#[derive(Default)]
struct WaitState {
    woken: bool,
    kicked: bool,
}

impl Waiter {
    /// A waiter whose kicks also ring an eventfd ([`Waiter::ring`]); a plain
    /// one if the host has no eventfd to give.
    pub(crate) fn with_ring() -> Waiter {
        use rustix::event::{EventfdFlags, eventfd};
        Waiter {
            ring: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).ok(),
            ..Waiter::default()
        }
    }

    /// The descriptor a kick makes readable, to poll beside others.
    pub(crate) fn ring(&self) -> Option<BorrowedFd<'_>> {
        self.ring.as_ref().map(AsFd::as_fd)
    }

    /// Before a wait: no wake is pending.
    pub(crate) fn arm(&self) {
        let mut s = lock(&self.state);
        s.woken = false;
        s.kicked = false;
        if let Some(ring) = &self.ring {
            let mut count = [0u8; 8];
            let _ = rustix::io::read(ring, &mut count);
        }
    }

    pub(crate) fn wake(&self) {
        lock(&self.state).woken = true;
        self.cv.notify_one();
    }

    /// Something for the thread to look at (a signal, the process ending).
    pub(crate) fn kick(&self) {
        lock(&self.state).kicked = true;
        self.cv.notify_one();
        if let Some(ring) = &self.ring {
            let _ = rustix::io::write(ring, &1u64.to_ne_bytes());
        }
    }

    pub(crate) fn sleep(&self, deadline: Option<Instant>) -> Woke {
        let mut s = lock(&self.state);
        loop {
            if s.woken {
                s.woken = false;
                return Woke::Woken;
            }
            if s.kicked {
                s.kicked = false;
                return Woke::Kicked;
            }
            match deadline {
                None => s = self.cv.wait(s).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Woke::TimedOut;
                    }
                    s = self
                        .cv
                        .wait_timeout(s, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }
}

struct Queued {
    waiter: Arc<Waiter>,
    bitset: u32,
}

/// The host wait queues of one process, by guest address.
#[derive(Default)]
struct HostQueues(HashMap<u64, VecDeque<Queued>>);

impl WaitQueues for HostQueues {
    fn wake(&mut self, addr: u64, n: u32, bits: u32) -> u64 {
        let Some(queue) = self.0.get_mut(&addr) else {
            return 0;
        };
        let mut woken = 0u64;
        let mut i = 0;
        while i < queue.len() && woken < u64::from(n) {
            if queue.get(i).is_some_and(|q| q.bitset & bits != 0) {
                if let Some(q) = queue.remove(i) {
                    q.waiter.wake();
                    woken += 1;
                }
            } else {
                i += 1;
            }
        }
        if queue.is_empty() {
            self.0.remove(&addr);
        }
        woken
    }

    fn requeue(&mut self, from: u64, to: u64, n: u32) -> u64 {
        let Some(queue) = self.0.get_mut(&from) else {
            return 0;
        };
        let take = (n as usize).min(queue.len());
        let shifted: Vec<Queued> = queue.drain(..take).collect();
        if queue.is_empty() {
            self.0.remove(&from);
        }
        let count = shifted.len() as u64;
        if !shifted.is_empty() {
            self.0.entry(to).or_default().extend(shifted);
        }
        count
    }
}

/// The futex wait queues of one process on host threads. A waiter checks
/// the word and queues itself under the table's lock, and a waker changes
/// the word before it takes the lock, so no wake is lost.
#[derive(Default)]
pub(crate) struct Futexes {
    queues: Mutex<HostQueues>,
}

impl Futexes {
    /// Takes `me` out of whatever queue holds it; false if none did (a
    /// wake got there first).
    pub(crate) fn cancel(&self, me: &Arc<Waiter>) -> bool {
        let queues = &mut lock(&self.queues).0;
        let mut found = None;
        for (addr, queue) in queues.iter_mut() {
            if let Some(i) = queue.iter().position(|q| Arc::ptr_eq(&q.waiter, me)) {
                queue.remove(i);
                found = Some(*addr);
                break;
            }
        }
        if let Some(addr) = found
            && queues.get(&addr).is_some_and(VecDeque::is_empty)
        {
            queues.remove(&addr);
        }
        found.is_some()
    }

    /// Everything but the wait itself ([`answer`]); a `Wait` whose word
    /// holds its value queues `me` (`Ok(None)`), under the same lock.
    pub(crate) fn start(
        &self,
        request: Request,
        me: &Arc<Waiter>,
        mem: &mut GuestMemory,
    ) -> Result<Option<u64>, i32> {
        let mut queues = lock(&self.queues);
        let answered = answer(request, mem, &mut *queues)?;
        if let (None, Request::Wait { addr, bitset, .. }) = (answered, request) {
            me.arm();
            queues.0.entry(addr).or_default().push_back(Queued {
                waiter: Arc::clone(me),
                bitset,
            });
        }
        Ok(answered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_op_decodes_as_linux_does() {
        // FUTEX_OP(FUTEX_OP_ADD, 1, FUTEX_OP_CMP_GT, 0): glibc's old
        // condition-variable signal.
        let op = WakeOp::decode((1 << 28) | (1 << 12) | (4 << 24)).unwrap();
        assert_eq!(op.apply(5), 6);
        assert!(op.passes(1) && !op.passes(0));
        // OPARG_SHIFT: oparg 3 means 1 << 3; OR; CMP_NE -1.
        let op = WakeOp::decode((0xa << 28) | (3 << 12) | (1 << 24) | 0xfff).unwrap();
        assert_eq!(op.apply(1), 9);
        assert!(op.passes(0) && !op.passes(u32::MAX));
        assert_eq!(WakeOp::decode(6 << 24), Err(errno::ENOSYS));
    }

    fn memory_with_word(value: u32) -> GuestMemory {
        let mut mem = GuestMemory::new();
        mem.map(
            0x1000,
            0x1000,
            tcgkit_tcg_core::Perms::READ | tcgkit_tcg_core::Perms::WRITE,
        )
        .unwrap();
        mem.store(0x1000, 4, u64::from(value)).unwrap();
        mem
    }

    fn wait_on(addr: u64, val: u32, bitset: u32) -> Request {
        Request::Wait {
            addr,
            val,
            bitset,
            deadline: None,
        }
    }

    #[test]
    fn host_futexes_wake_requeue_and_wake_op_between_threads() {
        let futexes = Arc::new(Futexes::default());
        let mut mem = memory_with_word(7);
        let waiters: Vec<Arc<Waiter>> = (0..3).map(|_| Arc::new(Waiter::default())).collect();
        // A changed word: no wait.
        assert_eq!(
            futexes.start(wait_on(0x1000, 8, BITSET_ALL), &waiters[0], &mut mem),
            Err(errno::EAGAIN)
        );
        // Three sleepers on threads: bitsets 1, 2 and every bit.
        let bits = [1, 2, BITSET_ALL];
        for (w, b) in waiters.iter().zip(bits) {
            assert_eq!(futexes.start(wait_on(0x1000, 7, b), w, &mut mem), Ok(None));
        }
        let sleepers: Vec<_> = waiters
            .iter()
            .map(|w| {
                let w = Arc::clone(w);
                std::thread::spawn(move || w.sleep(None))
            })
            .collect();
        // Bit 2 wakes the second and the third, first come first woken.
        let wake = |n, bitset| Request::Wake {
            addr: 0x1000,
            n,
            bitset,
        };
        assert_eq!(
            futexes.start(wake(1, 2), &waiters[0], &mut mem),
            Ok(Some(1))
        );
        // The rest move to 0x1008 (CMP_REQUEUE checks the word first).
        let requeue = |expect| Request::Requeue {
            addr: 0x1000,
            n: 0,
            to: 0x1008,
            moved: 5,
            expect: Some(expect),
        };
        assert_eq!(
            futexes.start(requeue(6), &waiters[0], &mut mem),
            Err(errno::EAGAIN)
        );
        assert_eq!(
            futexes.start(requeue(7), &waiters[0], &mut mem),
            Ok(Some(2))
        );
        assert_eq!(
            futexes.start(wake(9, BITSET_ALL), &waiters[0], &mut mem),
            Ok(Some(0))
        );
        // WAKE_OP: add 1 to 0x1008 (0 before: "> 0" fails, so only the
        // first queue's waiters would wake, and it has none).
        let op = WakeOp::decode((1 << 28) | (1 << 12) | (4 << 24)).unwrap();
        let wake_op = Request::WakeOp {
            addr: 0x1000,
            n: 1,
            addr2: 0x1008,
            n2: 9,
            op,
        };
        assert_eq!(futexes.start(wake_op, &waiters[0], &mut mem), Ok(Some(0)));
        assert_eq!(mem.load(0x1008, 4), Ok(1));
        // Now the old value 1 passes: both requeued sleepers wake.
        assert_eq!(futexes.start(wake_op, &waiters[0], &mut mem), Ok(Some(2)));
        assert_eq!(mem.load(0x1008, 4), Ok(2));
        for sleeper in sleepers {
            assert_eq!(sleeper.join().unwrap(), Woke::Woken);
        }
        assert!(!futexes.cancel(&waiters[0]), "nobody is queued");
    }

    #[test]
    fn a_timed_out_or_kicked_waiter_leaves_its_queue() {
        let futexes = Futexes::default();
        let mut mem = memory_with_word(0);
        let me = Arc::new(Waiter::default());
        assert_eq!(
            futexes.start(wait_on(0x1000, 0, BITSET_ALL), &me, &mut mem),
            Ok(None)
        );
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(me.sleep(Some(soon)), Woke::TimedOut);
        assert!(futexes.cancel(&me), "still queued: ETIMEDOUT");
        assert!(!futexes.cancel(&me));
        assert_eq!(
            futexes.start(wait_on(0x1000, 0, BITSET_ALL), &me, &mut mem),
            Ok(None)
        );
        me.kick();
        assert_eq!(me.sleep(None), Woke::Kicked);
        assert!(futexes.cancel(&me));
        // A wake that comes first wins over a later timeout.
        assert_eq!(
            futexes.start(wait_on(0x1000, 0, BITSET_ALL), &me, &mut mem),
            Ok(None)
        );
        let wake = Request::Wake {
            addr: 0x1000,
            n: 1,
            bitset: BITSET_ALL,
        };
        assert_eq!(futexes.start(wake, &me, &mut mem), Ok(Some(1)));
        assert!(!futexes.cancel(&me));
        assert_eq!(me.sleep(Some(Instant::now())), Woke::Woken);
    }

    #[test]
    fn requests_are_checked_before_anything_waits() {
        let mut mem = GuestMemory::new();
        let parse = |args, mem: &mut GuestMemory| Request::parse(args, mem);
        assert_eq!(parse([2, 0, 0, 0, 0, 0], &mut mem), Err(errno::EINVAL));
        assert_eq!(
            parse([8, FUTEX_WAIT_BITSET, 0, 0, 0, 0], &mut mem),
            Err(errno::EINVAL),
            "an empty bitset"
        );
        assert_eq!(parse([8, 0, 0, 0x40, 0, 0], &mut mem), Err(errno::EFAULT));
        assert_eq!(parse([8, 99, 0, 0, 0, 0], &mut mem), Err(errno::ENOSYS));
        assert_eq!(
            parse([8, 128 | FUTEX_CMP_REQUEUE, 1, 7, 16, 3], &mut mem),
            Ok(Request::Requeue {
                addr: 8,
                n: 1,
                to: 16,
                moved: 7,
                expect: Some(3)
            })
        );
    }
}
