//! File and descriptor syscalls, forwarded to the host through `rustix`.

use std::io::IoSliceMut;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use rustix::fd::BorrowedFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use tcgkit_tcg_core::{GuestMemory, PAGE_SIZE, Perms};

use super::{Kernel, ReadAhead, ReadNow, host_errno};
use crate::abi::{self, errno, nr};
use crate::fd::dup_host;

type SysResult = Result<u64, i32>;

/// Most bytes one read/write call moves (Linux itself caps a call at
/// 0x7ffff000 bytes; a smaller cap bounds the host buffer a guest can ask for,
/// and short transfers are part of the contract).
const IO_CHUNK: u64 = 16 << 20;
/// Longest path accepted (`PATH_MAX`).
const PATH_MAX: usize = 4096;
/// `IOV_MAX`.
const IOV_MAX: u64 = 1024;
const O_CLOEXEC: u64 = 0x80000;
const O_NONBLOCK: u64 = 0x800;
const O_DIRECT: u64 = 0x4000;

/// The guest path at `addr` (`EFAULT` if unreadable, `ENAMETOOLONG` if unterminated).
fn guest_path(mem: &mut GuestMemory, addr: u64) -> Result<Vec<u8>, i32> {
    let bytes = mem.read_cstr(addr, PATH_MAX).map_err(|_| errno::EFAULT)?;
    if bytes.len() >= PATH_MAX {
        return Err(errno::ENAMETOOLONG);
    }
    Ok(bytes)
}

/// `EFAULT` unless every page of `[addr, addr + len)` is mapped writable.
pub(super) fn check_writable(mem: &GuestMemory, addr: u64, len: u64) -> Result<(), i32> {
    if len == 0 {
        return Ok(());
    }
    let last = addr.checked_add(len - 1).ok_or(errno::EFAULT)?;
    let mut page = addr & !(PAGE_SIZE - 1);
    while page <= last {
        if !mem.perms(page).is_some_and(|p| p.contains(Perms::WRITE)) {
            return Err(errno::EFAULT);
        }
        page = match page.checked_add(PAGE_SIZE) {
            Some(next) => next,
            None => break,
        };
    }
    Ok(())
}

pub(super) fn read_guest(mem: &mut GuestMemory, addr: u64, len: u64) -> Result<Vec<u8>, i32> {
    let mut data = vec![0u8; usize::try_from(len).map_err(|_| errno::EFAULT)?];
    mem.read(addr, &mut data).map_err(|_| errno::EFAULT)?;
    Ok(data)
}

pub(super) fn put(mem: &mut GuestMemory, addr: u64, data: &[u8]) -> Result<(), i32> {
    mem.write(addr, data).map_err(|_| errno::EFAULT)
}

/// The guest bytes a `write` or `writev` (`number`) of `buf` (an iovec
/// array for `writev`) and `count` writes, as (base, len) pieces, at most
/// `IO_CHUNK` in all, as the calls themselves take them.
pub(crate) fn write_segments(
    mem: &mut GuestMemory,
    number: u64,
    buf: u64,
    count: u64,
) -> Result<Vec<(u64, u64)>, i32> {
    let mut pieces = if number == nr::WRITEV {
        iovecs(mem, buf, count)?
    } else {
        vec![(buf, count)]
    };
    let mut room = IO_CHUNK;
    for piece in &mut pieces {
        piece.1 = piece.1.min(room);
        room -= piece.1;
    }
    pieces.retain(|p| p.1 > 0);
    Ok(pieces)
}

/// Checks that the first `total` bytes of the guest iovec array at `iov`
/// can be written, as `readv` fills them.
fn readv_targets(mem: &mut GuestMemory, iov: u64, count: u64, total: u64) -> Result<(), i32> {
    let mut left = total;
    for (base, len) in iovecs(mem, iov, count)? {
        let n = len.min(left);
        check_writable(mem, base, n)?;
        left -= n;
    }
    Ok(())
}

/// The (base, len) pairs of a guest iovec array.
fn iovecs(mem: &mut GuestMemory, iov: u64, count: u64) -> Result<Vec<(u64, u64)>, i32> {
    if count > IOV_MAX {
        return Err(errno::EINVAL);
    }
    let raw = read_guest(mem, iov, count * 16)?;
    let mut out = Vec::with_capacity(count as usize);
    let mut total = 0u64;
    for pair in raw.chunks_exact(16) {
        let (base, len) = pair.split_at(8);
        let base = u64::from_le_bytes(base.try_into().map_err(|_| errno::EFAULT)?);
        let len = u64::from_le_bytes(len.try_into().map_err(|_| errno::EFAULT)?);
        if len > i64::MAX as u64 {
            return Err(errno::EINVAL);
        }
        total = total.checked_add(len).ok_or(errno::EINVAL)?;
        out.push((base, len));
    }
    Ok(out)
}

/// Reads what a file-backed mmap needs: `len` bytes from `offset`, shorter at
/// the end of the file (the rest of the mapping is zero).
pub(super) fn read_for_mmap(host: BorrowedFd<'_>, offset: u64, len: u64) -> Result<Vec<u8>, i32> {
    let stat = rustix::fs::fstat(host).map_err(host_errno)?;
    let size = stat.st_size as u64;
    let want = len.min(size.saturating_sub(offset));
    if want > crate::mm::MAX_MAPPED_BYTES {
        return Err(errno::ENOMEM);
    }
    let mut data = vec![0u8; want as usize];
    let mut done = 0usize;
    while done < data.len() {
        let n =
            rustix::io::pread(host, &mut data[done..], offset + done as u64).map_err(host_errno)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    data.truncate(done);
    Ok(data)
}

/// A mapped file's identity (device, inode) and host path, for the module
/// map; `None` if the host cannot say (the mapping then starts no module).
pub(super) fn identity(
    host: BorrowedFd<'_>,
) -> Option<(crate::modules::FileKey, std::path::PathBuf)> {
    use rustix::fd::AsRawFd as _;
    let stat = rustix::fs::fstat(host).ok()?;
    let link = format!("/proc/self/fd/{}", host.as_raw_fd());
    let path = rustix::fs::readlink(link.as_str(), Vec::new()).ok()?;
    let path = std::path::PathBuf::from(std::ffi::OsString::from_vec(path.into_bytes()));
    Some((crate::modules::file_key(&stat), path))
}

/// The guest's asm-generic `struct stat` (128 bytes) for a host stat.
#[allow(clippy::unnecessary_cast)] // field types differ between host architectures
fn guest_stat(st: &rustix::fs::Stat) -> [u8; 128] {
    let mut out = [0u8; 128];
    let mut put = |offset: usize, bytes: &[u8]| {
        if let Some(dst) = out.get_mut(offset..offset + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    };
    put(0, &(st.st_dev as u64).to_le_bytes());
    put(8, &(st.st_ino as u64).to_le_bytes());
    put(16, &(st.st_mode as u32).to_le_bytes());
    put(20, &(st.st_nlink as u32).to_le_bytes());
    put(24, &(st.st_uid as u32).to_le_bytes());
    put(28, &(st.st_gid as u32).to_le_bytes());
    put(32, &(st.st_rdev as u64).to_le_bytes());
    put(48, &(st.st_size as i64).to_le_bytes());
    put(56, &(st.st_blksize as i32).to_le_bytes());
    put(64, &(st.st_blocks as i64).to_le_bytes());
    put(72, &(st.st_atime as i64).to_le_bytes());
    put(80, &(st.st_atime_nsec as u64).to_le_bytes());
    put(88, &(st.st_mtime as i64).to_le_bytes());
    put(96, &(st.st_mtime_nsec as u64).to_le_bytes());
    put(104, &(st.st_ctime as i64).to_le_bytes());
    put(112, &(st.st_ctime_nsec as u64).to_le_bytes());
    out
}

impl Kernel {
    /// A directory descriptor argument: `AT_FDCWD` or a guest descriptor.
    fn dirfd(&self, fd: u64) -> Result<BorrowedFd<'_>, i32> {
        if fd as i32 == abi::AT_FDCWD {
            Ok(rustix::fs::CWD)
        } else {
            self.fds.get(fd)
        }
    }

    /// A guest path as the host names it: `/proc/self/exe` is the guest
    /// executable (as qemu does) rather than the emulator, and an absolute
    /// path is looked up under the `-L` prefix first.
    fn host_path(&self, mem: &mut GuestMemory, addr: u64) -> Result<Vec<u8>, i32> {
        let path = guest_path(mem, addr)?;
        if path == b"/proc/self/exe" {
            return Ok(self.exe_path.as_os_str().as_bytes().to_vec());
        }
        Ok(self.prefix.resolve(&path))
    }

    pub(super) fn read(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        buf: u64,
        count: u64,
    ) -> SysResult {
        let ahead = self.take_read_ahead(nr::READ, [fd, buf, count]);
        let host = self.fds.get(fd)?;
        let n = count.min(IO_CHUNK);
        check_writable(mem, buf, n)?;
        let data = match ahead {
            Some(data) => data,
            None => {
                let mut data = vec![0u8; n as usize];
                let got = rustix::io::read(host, &mut data[..]).map_err(host_errno)?;
                data.truncate(got);
                data
            }
        };
        put(mem, buf, &data)?;
        Ok(data.len() as u64)
    }

    /// The bytes read ahead for this very call, if any.
    fn take_read_ahead(&mut self, number: u64, args: [u64; 3]) -> Option<Vec<u8>> {
        let ahead = self.read_ahead.take()?;
        (ahead.call == (number, args)).then_some(ahead.data)
    }

    /// Makes the `read` or `readv` `number` with `args` (its first three
    /// arguments) as far as it can without waiting, keeping the bytes for
    /// the call, which the host-threads server makes next: it never waits
    /// in a read, even if another process empties the pipe between the
    /// moment it looked and the read.
    pub(crate) fn read_without_waiting(
        &mut self,
        mem: &mut GuestMemory,
        number: u64,
        args: [u64; 3],
    ) -> ReadNow {
        let [fd, buf, count] = args;
        let Ok(host) = self.fds.get(fd) else {
            return ReadNow::Unknown;
        };
        let waits = |host| {
            let kind = rustix::fs::fstat(host).map(|st| FileType::from_raw_mode(st.st_mode));
            let flags = rustix::fs::fcntl_getfl(host);
            matches!(kind, Ok(FileType::Fifo | FileType::Socket))
                && flags.is_ok_and(|f| !f.contains(OFlags::NONBLOCK))
        };
        if !waits(host) {
            return ReadNow::Unknown;
        }
        // The guest buffers are checked first, as the call checks them:
        // bytes taken from the pipe are never lost to an EFAULT.
        let len = match number {
            nr::READ => count.min(IO_CHUNK),
            _ => match iovecs(mem, buf, count) {
                Ok(parts) => parts.iter().map(|p| p.1).sum::<u64>().min(IO_CHUNK),
                Err(_) => return ReadNow::Unknown,
            },
        };
        let writable = match number {
            nr::READ => check_writable(mem, buf, len).is_ok(),
            _ => readv_targets(mem, buf, count, len).is_ok(),
        };
        if !writable {
            return ReadNow::Unknown;
        }
        let mut data = vec![0u8; len as usize];
        let nowait = rustix::io::ReadWriteFlags::NOWAIT;
        let read = rustix::io::preadv2(host, &mut [IoSliceMut::new(&mut data)], u64::MAX, nowait);
        match read {
            Ok(got) => {
                data.truncate(got);
                self.read_ahead = Some(ReadAhead {
                    call: (number, args),
                    data,
                });
                ReadNow::Read
            }
            Err(rustix::io::Errno::AGAIN) => ReadNow::Empty,
            Err(_) => ReadNow::Unknown,
        }
    }

    pub(super) fn write(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        buf: u64,
        count: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let data = read_guest(mem, buf, count.min(IO_CHUNK))?;
        rustix::io::write(host, &data)
            .map(|n| n as u64)
            .map_err(host_errno)
    }

    pub(super) fn pread(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        buf: u64,
        count: u64,
        offset: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        if (offset as i64) < 0 {
            return Err(errno::EINVAL);
        }
        let n = count.min(IO_CHUNK);
        check_writable(mem, buf, n)?;
        let mut data = vec![0u8; n as usize];
        let got = rustix::io::pread(host, &mut data[..], offset).map_err(host_errno)?;
        put(mem, buf, data.get(..got).unwrap_or_default())?;
        Ok(got as u64)
    }

    pub(super) fn pwrite(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        buf: u64,
        count: u64,
        offset: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        if (offset as i64) < 0 {
            return Err(errno::EINVAL);
        }
        let data = read_guest(mem, buf, count.min(IO_CHUNK))?;
        rustix::io::pwrite(host, &data, offset)
            .map(|n| n as u64)
            .map_err(host_errno)
    }

    /// readv/preadv: one host read into a staging buffer, scattered after.
    pub(super) fn readv(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        iov: u64,
        count: u64,
        offset: Option<u64>,
    ) -> SysResult {
        let ahead = match offset {
            None => self.take_read_ahead(nr::READV, [fd, iov, count]),
            Some(_) => None,
        };
        let host = self.fds.get(fd)?;
        let parts = iovecs(mem, iov, count)?;
        let total = parts.iter().map(|p| p.1).sum::<u64>().min(IO_CHUNK);
        readv_targets(mem, iov, count, total)?;
        let mut data = vec![0u8; total as usize];
        let got = match (offset, ahead) {
            (_, Some(ahead)) => {
                data = ahead;
                Ok(data.len())
            }
            (Some(off), None) if (off as i64) < 0 => return Err(errno::EINVAL),
            (Some(off), None) => rustix::io::pread(host, &mut data[..], off),
            (None, None) => rustix::io::read(host, &mut data[..]),
        }
        .map_err(host_errno)?;
        let mut done = 0usize;
        for (base, len) in parts {
            if done >= got {
                break;
            }
            let n = (len as usize).min(got - done);
            put(mem, base, data.get(done..done + n).unwrap_or_default())?;
            done += n;
        }
        Ok(got as u64)
    }

    /// writev/pwritev: gathered into one buffer so a pipe sees one write.
    pub(super) fn writev(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        iov: u64,
        count: u64,
        offset: Option<u64>,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let parts = iovecs(mem, iov, count)?;
        let mut data = Vec::new();
        for (base, len) in parts {
            let room = IO_CHUNK - data.len() as u64;
            if room == 0 {
                break;
            }
            data.extend_from_slice(&read_guest(mem, base, len.min(room))?);
        }
        match offset {
            Some(off) if (off as i64) < 0 => return Err(errno::EINVAL),
            Some(off) => rustix::io::pwrite(host, &data, off),
            None => rustix::io::write(host, &data),
        }
        .map(|n| n as u64)
        .map_err(host_errno)
    }

    pub(super) fn openat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        flags: u64,
        mode: u64,
    ) -> SysResult {
        let path = self.host_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        // Guest and host share the asm-generic O_* values; the host side is
        // always close-on-exec, the guest's flag is kept in the table.
        let oflags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
        let host = rustix::fs::openat(
            dir,
            path.as_slice(),
            oflags,
            Mode::from_bits_retain(mode as u32 & 0o7777),
        )
        .map_err(host_errno)?;
        self.fds.insert(host, flags & O_CLOEXEC != 0, 0)
    }

    pub(super) fn lseek(&mut self, fd: u64, offset: u64, whence: u64) -> SysResult {
        use rustix::fs::SeekFrom;
        let host = self.fds.get(fd)?;
        let offset = offset as i64;
        let pos = match whence {
            0 if offset < 0 => return Err(errno::EINVAL),
            0 => SeekFrom::Start(offset as u64),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            3 if offset < 0 => return Err(errno::ENXIO),
            3 => SeekFrom::Data(offset as u64),
            4 if offset < 0 => return Err(errno::ENXIO),
            4 => SeekFrom::Hole(offset as u64),
            _ => return Err(errno::EINVAL),
        };
        rustix::fs::seek(host, pos).map_err(host_errno)
    }

    pub(super) fn dup(&mut self, fd: u64) -> SysResult {
        let host = dup_host(self.fds.get(fd)?).ok_or(errno::EMFILE)?;
        self.fds.insert(host, false, 0)
    }

    pub(super) fn dup3(&mut self, old: u64, new: u64, flags: u64) -> SysResult {
        if flags & !O_CLOEXEC != 0 || old as i32 == new as i32 {
            return Err(errno::EINVAL);
        }
        let host = dup_host(self.fds.get(old)?).ok_or(errno::EMFILE)?;
        self.fds.insert_at(new, host, flags & O_CLOEXEC != 0)
    }

    pub(super) fn fcntl(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        cmd: u64,
        arg: u64,
    ) -> SysResult {
        const F_DUPFD: u64 = 0;
        const F_GETFD: u64 = 1;
        const F_SETFD: u64 = 2;
        const F_GETFL: u64 = 3;
        const F_SETFL: u64 = 4;
        const F_GETLK: u64 = 5;
        const F_SETLK: u64 = 6;
        const F_SETLKW: u64 = 7;
        const F_DUPFD_CLOEXEC: u64 = 1030;
        let host = self.fds.get(fd)?;
        match cmd {
            F_DUPFD | F_DUPFD_CLOEXEC => {
                let min = usize::try_from(arg as i32).map_err(|_| errno::EINVAL)?;
                if min >= crate::fd::MAX_FDS {
                    return Err(errno::EINVAL);
                }
                let copy = dup_host(host).ok_or(errno::EMFILE)?;
                self.fds.insert(copy, cmd == F_DUPFD_CLOEXEC, min)
            }
            F_GETFD => self.fds.cloexec(fd).map(u64::from),
            F_SETFD => self.fds.set_cloexec(fd, arg & 1 != 0).map(|()| 0),
            // The host kernel adds O_LARGEFILE (0x8000) for 64-bit
            // processes; qemu-riscv64 cannot translate it and drops it, and
            // so do we, to print what it prints.
            F_GETFL => rustix::fs::fcntl_getfl(host)
                .map(|f| u64::from((f - OFlags::CLOEXEC).bits() & !0x8000))
                .map_err(host_errno),
            F_SETFL => rustix::fs::fcntl_setfl(host, OFlags::from_bits_retain(arg as u32))
                .map(|()| 0)
                .map_err(host_errno),
            F_GETLK | F_SETLK | F_SETLKW => record_lock(mem, host, cmd, arg),
            _ => Err(errno::EINVAL),
        }
    }

    pub(super) fn flock(&mut self, fd: u64, operation: u64) -> SysResult {
        use rustix::fs::FlockOperation as Op;
        let host = self.fds.get(fd)?;
        let op = match operation {
            1 => Op::LockShared,
            2 => Op::LockExclusive,
            8 => Op::Unlock,
            5 => Op::NonBlockingLockShared,
            6 => Op::NonBlockingLockExclusive,
            12 => Op::NonBlockingUnlock,
            _ => return Err(errno::EINVAL),
        };
        rustix::fs::flock(host, op).map(|()| 0).map_err(host_errno)
    }

    pub(super) fn ioctl(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        request: u64,
        arg: u64,
    ) -> SysResult {
        use rustix::termios;
        const TCGETS: u64 = 0x5401;
        const TCSETS: u64 = 0x5402;
        const TCSETSW: u64 = 0x5403;
        const TCSETSF: u64 = 0x5404;
        const TIOCGPGRP: u64 = 0x540f;
        const TIOCGWINSZ: u64 = 0x5413;
        const TIOCSWINSZ: u64 = 0x5414;
        const FIONREAD: u64 = 0x541b;
        const FIONBIO: u64 = 0x5421;
        let host = self.fds.get(fd)?;
        match request & 0xffff_ffff {
            TCGETS => {
                let t = termios::tcgetattr(host).map_err(host_errno)?;
                put(mem, arg, &guest_termios(&t))?;
                Ok(0)
            }
            req @ (TCSETS | TCSETSW | TCSETSF) => {
                let raw = read_guest(mem, arg, 36)?;
                let mut t = termios::tcgetattr(host).map_err(host_errno)?;
                apply_guest_termios(&mut t, &raw);
                let when = match req {
                    TCSETS => termios::OptionalActions::Now,
                    TCSETSW => termios::OptionalActions::Drain,
                    _ => termios::OptionalActions::Flush,
                };
                termios::tcsetattr(host, when, &t)
                    .map(|()| 0)
                    .map_err(host_errno)
            }
            TIOCGWINSZ => {
                let w = termios::tcgetwinsize(host).map_err(host_errno)?;
                let mut raw = [0u8; 8];
                for (i, v) in [w.ws_row, w.ws_col, w.ws_xpixel, w.ws_ypixel]
                    .iter()
                    .enumerate()
                {
                    raw[i * 2..i * 2 + 2].copy_from_slice(&v.to_le_bytes());
                }
                put(mem, arg, &raw)?;
                Ok(0)
            }
            TIOCSWINSZ => {
                let raw = read_guest(mem, arg, 8)?;
                let half = |i: usize| u16::from_le_bytes([raw[i], raw[i + 1]]);
                let w = termios::Winsize {
                    ws_row: half(0),
                    ws_col: half(2),
                    ws_xpixel: half(4),
                    ws_ypixel: half(6),
                };
                termios::tcsetwinsize(host, w)
                    .map(|()| 0)
                    .map_err(host_errno)
            }
            TIOCGPGRP => {
                let pgrp = termios::tcgetpgrp(host).map_err(host_errno)?;
                put(mem, arg, &pgrp.as_raw_nonzero().get().to_le_bytes())?;
                Ok(0)
            }
            FIONREAD => {
                let n = rustix::io::ioctl_fionread(host).map_err(host_errno)?;
                put(mem, arg, &(n.min(i32::MAX as u64) as i32).to_le_bytes())?;
                Ok(0)
            }
            FIONBIO => {
                let on = mem.load(arg, 4).map_err(|_| errno::EFAULT)? != 0;
                rustix::io::ioctl_fionbio(host, on)
                    .map(|()| 0)
                    .map_err(host_errno)
            }
            // Requests we do not translate: what Linux says for a device
            // that does not understand them.
            _ => Err(errno::ENOTTY),
        }
    }

    pub(super) fn pipe2(&mut self, mem: &mut GuestMemory, fds: u64, flags: u64) -> SysResult {
        use rustix::pipe::PipeFlags;
        if flags & !(O_CLOEXEC | O_NONBLOCK | O_DIRECT) != 0 {
            return Err(errno::EINVAL);
        }
        check_writable(mem, fds, 8)?;
        let mut host_flags = PipeFlags::CLOEXEC;
        if flags & O_NONBLOCK != 0 {
            host_flags |= PipeFlags::NONBLOCK;
        }
        if flags & O_DIRECT != 0 {
            host_flags |= PipeFlags::DIRECT;
        }
        let (r, w) = rustix::pipe::pipe_with(host_flags).map_err(host_errno)?;
        let cloexec = flags & O_CLOEXEC != 0;
        let rfd = self.fds.insert(r, cloexec, 0)?;
        let wfd = match self.fds.insert(w, cloexec, 0) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = self.fds.close(rfd);
                return Err(e);
            }
        };
        let mut raw = [0u8; 8];
        raw[..4].copy_from_slice(&(rfd as u32).to_le_bytes());
        raw[4..].copy_from_slice(&(wfd as u32).to_le_bytes());
        put(mem, fds, &raw)?;
        Ok(0)
    }

    pub(super) fn newfstatat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        buf: u64,
        flags: u64,
    ) -> SysResult {
        const ALLOWED: u64 = 0x100 | 0x800 | 0x1000;
        if flags & !ALLOWED != 0 {
            return Err(errno::EINVAL);
        }
        let path = self.host_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        let st = rustix::fs::statat(
            dir,
            path.as_slice(),
            AtFlags::from_bits_retain(flags as u32),
        )
        .map_err(host_errno)?;
        put(mem, buf, &guest_stat(&st))?;
        Ok(0)
    }

    pub(super) fn fstat(&mut self, mem: &mut GuestMemory, fd: u64, buf: u64) -> SysResult {
        let st = rustix::fs::fstat(self.fds.get(fd)?).map_err(host_errno)?;
        put(mem, buf, &guest_stat(&st))?;
        Ok(0)
    }

    pub(super) fn readlinkat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        buf: u64,
        size: u64,
    ) -> SysResult {
        if size as i64 <= 0 {
            return Err(errno::EINVAL);
        }
        let path = guest_path(mem, path)?;
        let target = if path == b"/proc/self/exe" {
            self.exe_path.as_os_str().as_bytes().to_vec()
        } else {
            let path = self.prefix.resolve(&path);
            let dir = self.dirfd(dirfd)?;
            rustix::fs::readlinkat(dir, path.as_slice(), Vec::new())
                .map_err(host_errno)?
                .into_bytes()
        };
        let n = target.len().min(size.min(IO_CHUNK) as usize);
        put(mem, buf, target.get(..n).unwrap_or_default())?;
        Ok(n as u64)
    }

    pub(super) fn getcwd(&mut self, mem: &mut GuestMemory, buf: u64, size: u64) -> SysResult {
        let cwd = std::env::current_dir().map_err(|e| e.raw_os_error().unwrap_or(errno::ENOENT))?;
        let mut bytes = cwd.as_os_str().as_bytes().to_vec();
        bytes.push(0);
        if (bytes.len() as u64) > size {
            return Err(errno::ERANGE);
        }
        put(mem, buf, &bytes)?;
        Ok(bytes.len() as u64)
    }

    pub(super) fn chdir(&mut self, mem: &mut GuestMemory, path: u64) -> SysResult {
        let path = guest_path(mem, path)?;
        rustix::process::chdir(path.as_slice())
            .map(|()| 0)
            .map_err(host_errno)
    }

    pub(super) fn fchdir(&mut self, fd: u64) -> SysResult {
        rustix::process::fchdir(self.fds.get(fd)?)
            .map(|()| 0)
            .map_err(host_errno)
    }

    pub(super) fn getdents64(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        dirp: u64,
        count: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let count = count.min(IO_CHUNK) as usize;
        check_writable(mem, dirp, count as u64)?;
        // The host's linux_dirent64 records have the guest's layout, so one
        // host getdents of `count` bytes yields records that fit `count`.
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); count];
        let mut dir = rustix::fs::RawDir::new(host, &mut buf);
        let mut out = Vec::with_capacity(count);
        loop {
            match dir.next() {
                None => break,
                Some(Err(e)) if out.is_empty() => return Err(host_errno(e)),
                Some(Err(_)) => break,
                Some(Ok(entry)) => {
                    let name = entry.file_name().to_bytes();
                    let reclen = (19 + name.len() + 1).next_multiple_of(8);
                    if out.len() + reclen > count {
                        if out.is_empty() {
                            return Err(errno::EINVAL);
                        }
                        break;
                    }
                    let start = out.len();
                    out.extend_from_slice(&entry.ino().to_le_bytes());
                    out.extend_from_slice(&entry.next_entry_cookie().to_le_bytes());
                    out.extend_from_slice(&(reclen as u16).to_le_bytes());
                    out.push(dirent_type(entry.file_type()));
                    out.extend_from_slice(name);
                    out.resize(start + reclen, 0);
                }
            }
            if dir.is_buffer_empty() {
                break;
            }
        }
        put(mem, dirp, &out)?;
        Ok(out.len() as u64)
    }

    pub(super) fn faccessat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        mode: u64,
        flags: u64,
    ) -> SysResult {
        if mode & !7 != 0 {
            return Err(errno::EINVAL);
        }
        let path = self.host_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        rustix::fs::accessat(
            dir,
            path.as_slice(),
            rustix::fs::Access::from_bits_retain(mode as u32),
            AtFlags::from_bits_retain(flags as u32),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn unlinkat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        flags: u64,
    ) -> SysResult {
        if flags & !u64::from(abi::AT_REMOVEDIR) != 0 {
            return Err(errno::EINVAL);
        }
        let path = guest_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        rustix::fs::unlinkat(
            dir,
            path.as_slice(),
            AtFlags::from_bits_retain(flags as u32),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn mkdirat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        mode: u64,
    ) -> SysResult {
        let path = guest_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        rustix::fs::mkdirat(
            dir,
            path.as_slice(),
            Mode::from_bits_retain(mode as u32 & 0o7777),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn renameat(
        &mut self,
        mem: &mut GuestMemory,
        olddir: u64,
        old: u64,
        newdir: u64,
        new: u64,
        flags: u64,
    ) -> SysResult {
        let old = guest_path(mem, old)?;
        let new = guest_path(mem, new)?;
        let od = self.dirfd(olddir)?;
        let nd = self.dirfd(newdir)?;
        rustix::fs::renameat_with(
            od,
            old.as_slice(),
            nd,
            new.as_slice(),
            rustix::fs::RenameFlags::from_bits_retain(flags as u32),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn symlinkat(
        &mut self,
        mem: &mut GuestMemory,
        target: u64,
        dirfd: u64,
        path: u64,
    ) -> SysResult {
        let target = guest_path(mem, target)?;
        let path = guest_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        rustix::fs::symlinkat(target.as_slice(), dir, path.as_slice())
            .map(|()| 0)
            .map_err(host_errno)
    }

    pub(super) fn linkat(
        &mut self,
        mem: &mut GuestMemory,
        olddir: u64,
        old: u64,
        newdir: u64,
        new: u64,
        flags: u64,
    ) -> SysResult {
        let old = guest_path(mem, old)?;
        let new = guest_path(mem, new)?;
        let od = self.dirfd(olddir)?;
        let nd = self.dirfd(newdir)?;
        rustix::fs::linkat(
            od,
            old.as_slice(),
            nd,
            new.as_slice(),
            AtFlags::from_bits_retain(flags as u32),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn fchmod(&mut self, fd: u64, mode: u64) -> SysResult {
        rustix::fs::fchmod(
            self.fds.get(fd)?,
            Mode::from_bits_retain(mode as u32 & 0o7777),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn fchmodat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        mode: u64,
    ) -> SysResult {
        let path = guest_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        rustix::fs::chmodat(
            dir,
            path.as_slice(),
            Mode::from_bits_retain(mode as u32 & 0o7777),
            AtFlags::empty(),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn fchown(&mut self, fd: u64, uid: u64, gid: u64) -> SysResult {
        let (owner, group) = ids(uid, gid);
        rustix::fs::fchown(self.fds.get(fd)?, owner, group)
            .map(|()| 0)
            .map_err(host_errno)
    }

    pub(super) fn fchownat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        uid: u64,
        gid: u64,
        flags: u64,
    ) -> SysResult {
        let path = guest_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        let (owner, group) = ids(uid, gid);
        rustix::fs::chownat(
            dir,
            path.as_slice(),
            owner,
            group,
            AtFlags::from_bits_retain(flags as u32),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }

    pub(super) fn ftruncate(&mut self, fd: u64, len: u64) -> SysResult {
        let host = self.fds.get(fd)?;
        if (len as i64) < 0 {
            return Err(errno::EINVAL);
        }
        rustix::fs::ftruncate(host, len)
            .map(|()| 0)
            .map_err(host_errno)
    }

    pub(super) fn fallocate(&mut self, fd: u64, mode: u64, offset: u64, len: u64) -> SysResult {
        let host = self.fds.get(fd)?;
        if (offset as i64) < 0 || len as i64 <= 0 {
            return Err(errno::EINVAL);
        }
        let flags = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
        rustix::fs::fallocate(host, flags, offset, len)
            .map(|()| 0)
            .map_err(host_errno)
    }

    /// `statx`: the structure is the same on every architecture.
    pub(super) fn statx(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        flags: u64,
        mask: u64,
        buf: u64,
    ) -> SysResult {
        let path = self.host_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        let st = rustix::fs::statx(
            dir,
            path.as_slice(),
            AtFlags::from_bits_retain(flags as u32),
            rustix::fs::StatxFlags::from_bits_retain(mask as u32),
        )
        .map_err(host_errno)?;
        let mut raw = [0u8; 256];
        let mut put_at = |offset: usize, bytes: &[u8]| {
            if let Some(dst) = raw.get_mut(offset..offset + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        };
        put_at(0, &st.stx_mask.to_le_bytes());
        put_at(4, &st.stx_blksize.to_le_bytes());
        put_at(8, &st.stx_attributes.bits().to_le_bytes());
        put_at(16, &st.stx_nlink.to_le_bytes());
        put_at(20, &st.stx_uid.to_le_bytes());
        put_at(24, &st.stx_gid.to_le_bytes());
        put_at(28, &st.stx_mode.to_le_bytes());
        put_at(32, &st.stx_ino.to_le_bytes());
        put_at(40, &st.stx_size.to_le_bytes());
        put_at(48, &st.stx_blocks.to_le_bytes());
        put_at(56, &st.stx_attributes_mask.bits().to_le_bytes());
        for (offset, t) in [
            (64, st.stx_atime),
            (80, st.stx_btime),
            (96, st.stx_ctime),
            (112, st.stx_mtime),
        ] {
            put_at(offset, &t.tv_sec.to_le_bytes());
            put_at(offset + 8, &t.tv_nsec.to_le_bytes());
        }
        put_at(128, &st.stx_rdev_major.to_le_bytes());
        put_at(132, &st.stx_rdev_minor.to_le_bytes());
        put_at(136, &st.stx_dev_major.to_le_bytes());
        put_at(140, &st.stx_dev_minor.to_le_bytes());
        put_at(144, &st.stx_mnt_id.to_le_bytes());
        put_at(152, &st.stx_dio_mem_align.to_le_bytes());
        put_at(156, &st.stx_dio_offset_align.to_le_bytes());
        put(mem, buf, &raw)?;
        Ok(0)
    }

    /// statfs (`path` given) or fstatfs (`fd`): the 64-bit generic layout.
    #[allow(clippy::unnecessary_cast)] // field types differ between host architectures
    pub(super) fn statfs(
        &mut self,
        mem: &mut GuestMemory,
        path: Option<u64>,
        fd: u64,
        buf: u64,
    ) -> SysResult {
        // statfs's f_fsid is opaque in rustix; statvfs exposes the same id.
        let (st, vfs) = match path {
            Some(addr) => {
                let path = self.host_path(mem, addr)?;
                (
                    rustix::fs::statfs(path.as_slice()),
                    rustix::fs::statvfs(path.as_slice()),
                )
            }
            None => {
                let host = self.fds.get(fd)?;
                (rustix::fs::fstatfs(host), rustix::fs::fstatvfs(host))
            }
        };
        let st = st.map_err(host_errno)?;
        let fsid = vfs.map_or(0, |v| v.f_fsid);
        let words: [u64; 8] = [
            st.f_type as u64,
            st.f_bsize as u64,
            st.f_blocks as u64,
            st.f_bfree as u64,
            st.f_bavail as u64,
            st.f_files as u64,
            st.f_ffree as u64,
            fsid,
        ];
        let mut raw: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for w in [st.f_namelen as u64, st.f_frsize as u64, st.f_flags as u64] {
            raw.extend_from_slice(&w.to_le_bytes());
        }
        raw.resize(120, 0);
        put(mem, buf, &raw)?;
        Ok(0)
    }

    pub(super) fn fsync(&mut self, number: u64, fd: u64) -> SysResult {
        let host = self.fds.get(fd)?;
        let result = if number == crate::abi::nr::FSYNC {
            rustix::fs::fsync(host)
        } else {
            // fdatasync, and sync_file_range done as a (stronger) fdatasync.
            rustix::fs::fdatasync(host)
        };
        match result {
            Ok(()) => Ok(0),
            // Pipes and terminals cannot be synced; Linux says EINVAL too.
            Err(e) => Err(host_errno(e)),
        }
    }

    pub(super) fn utimensat(
        &mut self,
        mem: &mut GuestMemory,
        dirfd: u64,
        path: u64,
        times: u64,
        flags: u64,
    ) -> SysResult {
        use rustix::fs::{Timespec, Timestamps};
        const UTIME_NOW: i64 = (1 << 30) - 1;
        let stamp = |mem: &mut GuestMemory, at: u64| -> Result<Timespec, i32> {
            let sec = mem.load(at, 8).map_err(|_| errno::EFAULT)? as i64;
            let nsec = mem.load(at + 8, 8).map_err(|_| errno::EFAULT)? as i64;
            Ok(Timespec {
                tv_sec: sec,
                tv_nsec: nsec as _,
            })
        };
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW as _,
        };
        let stamps = if times == 0 {
            Timestamps {
                last_access: now,
                last_modification: now,
            }
        } else {
            Timestamps {
                last_access: stamp(mem, times)?,
                last_modification: stamp(mem, times + 16)?,
            }
        };
        if path == 0 {
            return rustix::fs::futimens(self.fds.get(dirfd)?, &stamps)
                .map(|()| 0)
                .map_err(host_errno);
        }
        let path = guest_path(mem, path)?;
        let dir = self.dirfd(dirfd)?;
        rustix::fs::utimensat(
            dir,
            path.as_slice(),
            &stamps,
            AtFlags::from_bits_retain(flags as u32),
        )
        .map(|()| 0)
        .map_err(host_errno)
    }
}

fn ids(uid: u64, gid: u64) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
    let owner = (uid as u32 != u32::MAX).then(|| rustix::fs::Uid::from_raw(uid as u32));
    let group = (gid as u32 != u32::MAX).then(|| rustix::fs::Gid::from_raw(gid as u32));
    (owner, group)
}

fn dirent_type(t: rustix::fs::FileType) -> u8 {
    use rustix::fs::FileType as T;
    match t {
        T::Fifo => 1,
        T::CharacterDevice => 2,
        T::Directory => 4,
        T::BlockDevice => 6,
        T::RegularFile => 8,
        T::Symlink => 10,
        T::Socket => 12,
        _ => 0,
    }
}

/// The guest's `struct termios` (asm-generic: four flag words, the line
/// discipline, 19 control characters).
fn guest_termios(t: &rustix::termios::Termios) -> [u8; 36] {
    let mut raw = [0u8; 36];
    let words = [
        t.input_modes.bits(),
        t.output_modes.bits(),
        t.control_modes.bits(),
        t.local_modes.bits(),
    ];
    for (i, w) in words.iter().enumerate() {
        raw[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    raw[16] = t.line_discipline;
    for (i, index) in CC_INDICES.iter().enumerate() {
        raw[17 + i] = t.special_codes[*index];
    }
    raw
}

fn apply_guest_termios(t: &mut rustix::termios::Termios, raw: &[u8]) {
    use rustix::termios::{ControlModes, InputModes, LocalModes, OutputModes};
    let word = |i: usize| {
        raw.get(i * 4..i * 4 + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    t.input_modes = InputModes::from_bits_retain(word(0));
    t.output_modes = OutputModes::from_bits_retain(word(1));
    t.control_modes = ControlModes::from_bits_retain(word(2));
    t.local_modes = LocalModes::from_bits_retain(word(3));
    t.line_discipline = raw.get(16).copied().unwrap_or(0);
    for (i, index) in CC_INDICES.iter().enumerate() {
        if let Some(&c) = raw.get(17 + i) {
            t.special_codes[*index] = c;
        }
    }
}

/// Control character slots in asm-generic order (`VINTR` = 0 ... `VEOL2` = 16).
const CC_INDICES: [rustix::termios::SpecialCodeIndex; 17] = {
    use rustix::termios::SpecialCodeIndex as I;
    [
        I::VINTR,
        I::VQUIT,
        I::VERASE,
        I::VKILL,
        I::VEOF,
        I::VTIME,
        I::VMIN,
        I::VSWTC,
        I::VSTART,
        I::VSTOP,
        I::VSUSP,
        I::VEOL,
        I::VREPRINT,
        I::VDISCARD,
        I::VWERASE,
        I::VLNEXT,
        I::VEOL2,
    ]
};

/// fcntl record locks (`struct flock`: type, whence, start, len, pid).
///
/// One guest process never conflicts with itself, so setting a lock succeeds
/// unless another host process holds a conflicting one (checked with
/// `F_GETLK`); the lock is not taken on the host, so other processes do not
/// see it (documented limitation).
fn record_lock(mem: &mut GuestMemory, host: BorrowedFd<'_>, cmd: u64, arg: u64) -> SysResult {
    use rustix::process::{Flock, FlockOffsetType, FlockType};
    let raw = read_guest(mem, arg, 32)?;
    let typ = u16::from_le_bytes([raw[0], raw[1]]);
    let whence = u16::from_le_bytes([raw[2], raw[3]]);
    let start = i64::from_le_bytes(raw[8..16].try_into().map_err(|_| errno::EFAULT)?);
    let len = i64::from_le_bytes(raw[16..24].try_into().map_err(|_| errno::EFAULT)?);
    let typ = match typ {
        0 => FlockType::ReadLock,
        1 => FlockType::WriteLock,
        2 => FlockType::Unlocked,
        _ => return Err(errno::EINVAL),
    };
    let offset_type = match whence {
        0 => FlockOffsetType::Set,
        1 => FlockOffsetType::Current,
        2 => FlockOffsetType::End,
        _ => return Err(errno::EINVAL),
    };
    if typ == FlockType::Unlocked && cmd != 5 {
        return Ok(0);
    }
    let wanted = Flock {
        start: start as u64,
        length: len as u64,
        pid: None,
        typ,
        offset_type,
    };
    loop {
        let conflict = if typ == FlockType::Unlocked {
            None
        } else {
            rustix::process::fcntl_getlk(host, &wanted).map_err(host_errno)?
        };
        match (cmd, conflict) {
            (5, None) => {
                let mut out = raw.clone();
                out[0..2].copy_from_slice(&2u16.to_le_bytes());
                put(mem, arg, &out)?;
                return Ok(0);
            }
            (5, Some(c)) => {
                let mut out = [0u8; 32];
                let t: u16 = if c.typ == FlockType::ReadLock { 0 } else { 1 };
                out[0..2].copy_from_slice(&t.to_le_bytes());
                out[8..16].copy_from_slice(&c.start.to_le_bytes());
                out[16..24].copy_from_slice(&c.length.to_le_bytes());
                let pid = c.pid.map_or(0, |p| p.as_raw_nonzero().get());
                out[24..28].copy_from_slice(&pid.to_le_bytes());
                put(mem, arg, &out)?;
                return Ok(0);
            }
            (_, None) => return Ok(0),
            (6, Some(_)) => return Err(errno::EAGAIN),
            // F_SETLKW: wait for the other process to let go.
            (_, Some(_)) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}
