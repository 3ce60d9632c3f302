//! `epoll_create1`, `epoll_ctl` and `epoll_pwait` on host epoll instances
//! (the Go runtime's timers and netpoller wait in them). The guest's
//! `struct epoll_event` (16 bytes on RV64: events, padding, data) is
//! converted to the host's; the data word passes through untouched, as the
//! kernel never looks at it.

use tcgkit_tcg_core::GuestMemory;

use super::{Kernel, host_errno};
use crate::abi::errno;

type SysResult = Result<u64, i32>;

/// Bytes of RV64's `struct epoll_event`.
const EVENT_SIZE: u64 = 16;
/// Linux's `EP_MAX_EVENTS`.
const MAX_EVENTS: u64 = i32::MAX as u64 / EVENT_SIZE;

impl Kernel {
    pub(super) fn epoll_create1(&mut self, flags: u64) -> SysResult {
        use rustix::event::epoll::CreateFlags;
        if flags & !CreateFlags::CLOEXEC.bits() as u64 != 0 {
            return Err(errno::EINVAL);
        }
        let cloexec = flags != 0;
        let epoll = rustix::event::epoll::create(CreateFlags::CLOEXEC).map_err(host_errno)?;
        self.fds.insert(epoll, cloexec, 0)
    }

    pub(super) fn epoll_ctl(
        &mut self,
        mem: &mut GuestMemory,
        epfd: u64,
        op: u64,
        fd: u64,
        event: u64,
    ) -> SysResult {
        use rustix::event::epoll::{self, EventData, EventFlags};
        const ADD: u64 = 1;
        const DEL: u64 = 2;
        const MOD: u64 = 3;
        let epoll_fd = self.fds.get(epfd)?;
        let target = self.fds.get(fd)?;
        if epfd == fd {
            return Err(errno::EINVAL);
        }
        let read_event = |mem: &mut GuestMemory| -> Result<(EventFlags, EventData), i32> {
            let flags = mem.load(event, 4).map_err(|_| errno::EFAULT)? as u32;
            let data = mem.load(event + 8, 8).map_err(|_| errno::EFAULT)?;
            Ok((
                EventFlags::from_bits_retain(flags),
                EventData::new_u64(data),
            ))
        };
        match op {
            ADD => {
                let (flags, data) = read_event(mem)?;
                epoll::add(epoll_fd, target, data, flags)
            }
            MOD => {
                let (flags, data) = read_event(mem)?;
                epoll::modify(epoll_fd, target, data, flags)
            }
            DEL => epoll::delete(epoll_fd, target),
            _ => return Err(errno::EINVAL),
        }
        .map(|()| 0)
        .map_err(host_errno)
    }

    /// `epoll_pwait` (the signal mask is not applied: signals reach the
    /// guest only at syscalls); `max_block_ms` caps the wait, so that
    /// other guest threads get their turn (the call then returns 0 early,
    /// which callers treat as a timeout).
    pub(crate) fn epoll_pwait(
        &mut self,
        mem: &mut GuestMemory,
        args: [u64; 6],
        max_block_ms: Option<i32>,
    ) -> SysResult {
        use rustix::event::Timespec;
        let [epfd, events, max, timeout, _, _] = args;
        if max == 0 || max > MAX_EVENTS {
            return Err(errno::EINVAL);
        }
        if !mem.is_range_mapped(events, max * EVENT_SIZE) {
            return Err(errno::EFAULT);
        }
        let mut ms = if self.never_wait { 0 } else { timeout as i32 };
        if let Some(cap) = max_block_ms
            && (ms < 0 || ms > cap)
        {
            ms = cap;
        }
        let span = (ms >= 0).then(|| Timespec {
            tv_sec: i64::from(ms / 1000),
            tv_nsec: i64::from(ms % 1000) * 1_000_000,
        });
        let epoll_fd = self.fds.get(epfd)?;
        let mut ready: Vec<rustix::event::epoll::Event> =
            Vec::with_capacity(max.min(1024) as usize);
        rustix::event::epoll::wait(
            epoll_fd,
            rustix::buffer::spare_capacity(&mut ready),
            span.as_ref(),
        )
        .map_err(host_errno)?;
        for (i, event) in ready.iter().enumerate() {
            let at = events + i as u64 * EVENT_SIZE;
            // Copied out: the host's struct is packed on x86-64.
            let (flags, data) = ({ event.flags }, { event.data });
            let (flags, data) = (flags.bits(), data.u64());
            mem.store(at, 4, u64::from(flags))
                .map_err(|_| errno::EFAULT)?;
            mem.store(at + 4, 4, 0).map_err(|_| errno::EFAULT)?;
            mem.store(at + 8, 8, data).map_err(|_| errno::EFAULT)?;
        }
        Ok(ready.len() as u64)
    }
}
