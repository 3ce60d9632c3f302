//! Time, identity, randomness, limits and futex syscalls.

use std::time::{Duration, Instant};

use tcgkit_tcg_core::GuestMemory;

use super::host_errno;
use crate::abi::errno;
use crate::futex::{self, NoWaiters, Request};

type SysResult = Result<u64, i32>;

fn put(mem: &mut GuestMemory, addr: u64, data: &[u8]) -> Result<(), i32> {
    mem.write(addr, data).map_err(|_| errno::EFAULT)
}

fn put_timespec(mem: &mut GuestMemory, addr: u64, sec: i64, nsec: i64) -> Result<(), i32> {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&sec.to_le_bytes());
    raw[8..].copy_from_slice(&nsec.to_le_bytes());
    put(mem, addr, &raw)
}

/// A guest `struct timespec`, validated as Linux does.
pub(super) fn get_timespec(mem: &mut GuestMemory, addr: u64) -> Result<(i64, i64), i32> {
    let sec = mem.load(addr, 8).map_err(|_| errno::EFAULT)? as i64;
    let nsec = mem.load(addr + 8, 8).map_err(|_| errno::EFAULT)? as i64;
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return Err(errno::EINVAL);
    }
    Ok((sec, nsec))
}

fn clock(id: u64) -> Result<rustix::time::ClockId, i32> {
    use rustix::time::ClockId as C;
    Ok(match id {
        0 => C::Realtime,
        1 => C::Monotonic,
        2 => C::ProcessCPUTime,
        3 => C::ThreadCPUTime,
        4 => C::MonotonicRaw,
        5 => C::RealtimeCoarse,
        6 => C::MonotonicCoarse,
        7 => C::Boottime,
        _ => return Err(errno::EINVAL),
    })
}

fn now(id: u64) -> Result<(i64, i64), i32> {
    let t = rustix::time::clock_gettime(clock(id)?);
    Ok((t.tv_sec, t.tv_nsec as i64))
}

pub(super) fn clock_gettime(mem: &mut GuestMemory, id: u64, tp: u64) -> SysResult {
    let (sec, nsec) = now(id)?;
    put_timespec(mem, tp, sec, nsec)?;
    Ok(0)
}

pub(super) fn clock_getres(mem: &mut GuestMemory, id: u64, res: u64) -> SysResult {
    clock(id)?;
    // Coarse clocks tick with the scheduler (4 ms at HZ=250); the others
    // are high resolution, as on any modern Linux.
    let nsec = if matches!(id, 5 | 6) { 4_000_000 } else { 1 };
    if res != 0 {
        put_timespec(mem, res, 0, nsec)?;
    }
    Ok(0)
}

pub(super) fn gettimeofday(mem: &mut GuestMemory, tv: u64, tz: u64) -> SysResult {
    let (sec, nsec) = now(0)?;
    if tv != 0 {
        put_timespec(mem, tv, sec, nsec / 1000)?;
    }
    if tz != 0 {
        put(mem, tz, &[0; 8])?;
    }
    Ok(0)
}

/// A `nanosleep` or `clock_nanosleep`, checked: when it ends, and
/// whether it is relative (only those report the time left when a signal
/// cuts them short).
pub(crate) struct SleepRequest {
    pub(crate) until: Instant,
    pub(crate) relative: bool,
}

/// Decodes a sleep: `clock` is `clock_nanosleep`'s clock id and flags,
/// `None` for `nanosleep`.
pub(crate) fn sleep_request(
    mem: &mut GuestMemory,
    clock: Option<(u64, u64)>,
    req: u64,
) -> Result<SleepRequest, i32> {
    const TIMER_ABSTIME: u64 = 1;
    if let Some((3, _)) = clock {
        return Err(errno::EINVAL);
    }
    let (sec, nsec) = get_timespec(mem, req)?;
    let start = Instant::now();
    Ok(match clock {
        Some((id, flags)) if flags & TIMER_ABSTIME != 0 => {
            let (now_sec, now_nsec) = now(id)?;
            let target = i128::from(sec) * 1_000_000_000 + i128::from(nsec);
            let current = i128::from(now_sec) * 1_000_000_000 + i128::from(now_nsec);
            let wait = (target - current).clamp(0, i128::from(u64::MAX)) as u64;
            SleepRequest {
                until: start + Duration::from_nanos(wait),
                relative: false,
            }
        }
        _ => SleepRequest {
            until: start + Duration::new(sec as u64, nsec as u32),
            relative: true,
        },
    })
}

/// `nanosleep` (`clock: None`) or `clock_nanosleep`, sleeping this host
/// thread; never interrupted, so nothing remains.
pub(super) fn sleep(
    mem: &mut GuestMemory,
    clock: Option<(u64, u64)>,
    req: u64,
    rem: u64,
) -> SysResult {
    let request = sleep_request(mem, clock, req)?;
    std::thread::sleep(request.until.saturating_duration_since(Instant::now()));
    if request.relative && rem != 0 {
        put_timespec(mem, rem, 0, 0)?;
    }
    Ok(0)
}

pub(super) fn uname(mem: &mut GuestMemory, buf: u64) -> SysResult {
    let host = rustix::system::uname();
    let fields = [
        b"Linux".as_slice(),
        host.nodename().to_bytes(),
        host.release().to_bytes(),
        host.version().to_bytes(),
        b"riscv64".as_slice(),
        host.domainname().to_bytes(),
    ];
    let mut raw = [0u8; 6 * 65];
    for (i, field) in fields.iter().enumerate() {
        let n = field.len().min(64);
        raw[i * 65..i * 65 + n].copy_from_slice(&field[..n]);
    }
    put(mem, buf, &raw)?;
    Ok(0)
}

pub(super) fn getrandom(mem: &mut GuestMemory, buf: u64, len: u64, flags: u64) -> SysResult {
    if flags & !7 != 0 {
        return Err(errno::EINVAL);
    }
    // Linux hands out at most 32 MiB - 1 per call.
    let n = len.min((32 << 20) - 1) as usize;
    let mut data = vec![0u8; n];
    let got = rustix::rand::getrandom(
        &mut data[..],
        rustix::rand::GetRandomFlags::from_bits_retain(flags as u32),
    )
    .map_err(host_errno)?;
    put(mem, buf, data.get(..got).unwrap_or_default())?;
    Ok(got as u64)
}

/// futex for a single-threaded process: nobody else can change the word or
/// wake a waiter, so WAIT returns `EAGAIN` on a changed word, `ETIMEDOUT`
/// after its timeout, and otherwise sleeps forever as Linux would; WAKE wakes
/// nobody.
pub(super) fn futex(mem: &mut GuestMemory, args: [u64; 6]) -> SysResult {
    let request = Request::parse(args, mem)?;
    if let Some(value) = futex::answer(request, mem, &mut NoWaiters)? {
        return Ok(value);
    }
    match request {
        Request::Wait {
            deadline: Some(deadline),
            ..
        } => {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            Err(errno::ETIMEDOUT)
        }
        // No deadline, and nobody to wake it.
        _ => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

/// The host's limit for `resource`, as (soft, hard); infinity is `u64::MAX`.
pub(super) fn host_rlimit(resource: u32) -> (u64, u64) {
    use rustix::process::Resource as R;
    let r = match resource {
        0 => R::Cpu,
        1 => R::Fsize,
        2 => R::Data,
        3 => R::Stack,
        4 => R::Core,
        5 => R::Rss,
        6 => R::Nproc,
        7 => R::Nofile,
        8 => R::Memlock,
        9 => R::As,
        10 => R::Locks,
        11 => R::Sigpending,
        12 => R::Msgqueue,
        13 => R::Nice,
        14 => R::Rtprio,
        _ => R::Rttime,
    };
    let limit = rustix::process::getrlimit(r);
    let cur = limit.current.unwrap_or(u64::MAX);
    let max = limit.maximum.unwrap_or(u64::MAX);
    if resource == 7 {
        // The guest descriptor table holds at most MAX_FDS entries.
        let cap = crate::fd::MAX_FDS as u64;
        return (cur.min(cap), max.min(cap));
    }
    (cur, max)
}

#[allow(clippy::unnecessary_cast)] // field types differ between host architectures
pub(super) fn sysinfo(mem: &mut GuestMemory, info: u64) -> SysResult {
    let s = rustix::system::sysinfo();
    let mut raw = [0u8; 112];
    let words: [(usize, u64); 11] = [
        (0, s.uptime as u64),
        (8, s.loads[0] as u64),
        (16, s.loads[1] as u64),
        (24, s.loads[2] as u64),
        (32, s.totalram as u64),
        (40, s.freeram as u64),
        (48, s.sharedram as u64),
        (56, s.bufferram as u64),
        (64, s.totalswap as u64),
        (72, s.freeswap as u64),
        (88, s.totalhigh as u64),
    ];
    for (offset, value) in words {
        raw[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    }
    raw[80..82].copy_from_slice(&(s.procs as u16).to_le_bytes());
    raw[96..104].copy_from_slice(&(s.freehigh as u64).to_le_bytes());
    raw[104..108].copy_from_slice(&(s.mem_unit as u32).to_le_bytes());
    put(mem, info, &raw)?;
    Ok(0)
}

pub(super) fn sched_getaffinity(mem: &mut GuestMemory, pid: u64, len: u64, mask: u64) -> SysResult {
    if pid != 0 && pid != u64::from(std::process::id()) {
        return Err(errno::ESRCH);
    }
    if len < 8 || !len.is_multiple_of(8) {
        return Err(errno::EINVAL);
    }
    let set = rustix::thread::sched_getaffinity(None).map_err(host_errno)?;
    let mut bits = 0u64;
    for cpu in 0..64 {
        if set.is_set(cpu) {
            bits |= 1 << cpu;
        }
    }
    put(mem, mask, &bits.to_le_bytes())?;
    Ok(8)
}

fn pid_arg(pid: u64) -> Result<Option<rustix::process::Pid>, i32> {
    if pid == 0 {
        return Ok(None);
    }
    rustix::process::Pid::from_raw(pid as i32)
        .filter(|p| p.as_raw_nonzero().get() > 0)
        .map(Some)
        .ok_or(errno::ESRCH)
}

pub(super) fn getpgid(pid: u64) -> SysResult {
    rustix::process::getpgid(pid_arg(pid)?)
        .map(|p| p.as_raw_nonzero().get() as u64)
        .map_err(host_errno)
}

pub(super) fn setpgid(pid: u64, pgid: u64) -> SysResult {
    rustix::process::setpgid(pid_arg(pid)?, pid_arg(pgid)?)
        .map(|()| 0)
        .map_err(host_errno)
}

pub(super) fn getsid(pid: u64) -> SysResult {
    rustix::process::getsid(pid_arg(pid)?)
        .map(|p| p.as_raw_nonzero().get() as u64)
        .map_err(host_errno)
}

pub(super) fn getgroups(mem: &mut GuestMemory, size: u64, list: u64) -> SysResult {
    let groups = rustix::process::getgroups().map_err(host_errno)?;
    let count = groups.len() as u64;
    if size == 0 {
        return Ok(count);
    }
    if (size as i32) < 0 || size < count {
        return Err(errno::EINVAL);
    }
    let raw: Vec<u8> = groups
        .iter()
        .flat_map(|g| g.as_raw().to_le_bytes())
        .collect();
    put(mem, list, &raw)?;
    Ok(count)
}

pub(super) fn getcpu(mem: &mut GuestMemory, cpu: u64, node: u64) -> SysResult {
    // The guest has one vCPU: it always runs on CPU 0 of node 0.
    if cpu != 0 {
        put(mem, cpu, &0u32.to_le_bytes())?;
    }
    if node != 0 {
        put(mem, node, &0u32.to_le_bytes())?;
    }
    Ok(0)
}

/// CPU time used so far, in nanoseconds (the guest's time is the emulator's).
fn cpu_nanos() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    u128::from(t.tv_sec.max(0) as u64) * 1_000_000_000 + u128::from(t.tv_nsec.max(0) as u64)
}

/// getrusage: the CPU time is reported as user time; rustix offers no
/// getrusage, and the counters programs print (times) need only this.
pub(super) fn getrusage(mem: &mut GuestMemory, who: u64, usage: u64) -> SysResult {
    const RUSAGE_SELF: i32 = 0;
    const RUSAGE_CHILDREN: i32 = -1;
    const RUSAGE_THREAD: i32 = 1;
    let who = who as i32;
    if !matches!(who, RUSAGE_SELF | RUSAGE_CHILDREN | RUSAGE_THREAD) {
        return Err(errno::EINVAL);
    }
    // struct rusage: two timevals, then 14 longs.
    let mut raw = [0u8; 144];
    if who != RUSAGE_CHILDREN {
        let nanos = cpu_nanos();
        let sec = (nanos / 1_000_000_000) as u64;
        let usec = ((nanos % 1_000_000_000) / 1000) as u64;
        raw[..8].copy_from_slice(&sec.to_le_bytes());
        raw[8..16].copy_from_slice(&usec.to_le_bytes());
    }
    put(mem, usage, &raw)?;
    Ok(0)
}

/// times: CPU time in clock ticks, and the tick count since boot as result.
pub(super) fn times(mem: &mut GuestMemory, buf: u64) -> SysResult {
    let ticks_per_second = u128::from(crate::abi::CLOCK_TICKS);
    let cpu_ticks = (cpu_nanos() * ticks_per_second / 1_000_000_000) as u64;
    if buf != 0 {
        let mut raw = [0u8; 32];
        raw[..8].copy_from_slice(&cpu_ticks.to_le_bytes());
        put(mem, buf, &raw)?;
    }
    let (sec, nsec) = now(7)?;
    let uptime = i128::from(sec) * 1_000_000_000 + i128::from(nsec);
    Ok((uptime.max(0) as u128 * ticks_per_second / 1_000_000_000) as u64)
}
