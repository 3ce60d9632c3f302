//! `futex` requests as the guest makes them, decoded once for both ways
//! guest threads run (`threads.rs`, taking turns; `host_threads.rs`, on
//! host threads): the operations glibc and Go use, their timeouts as
//! deadlines, and `FUTEX_WAKE_OP`'s encoded operation.

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
