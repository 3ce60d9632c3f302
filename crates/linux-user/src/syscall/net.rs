//! Sockets, forwarded to the host: Unix, IPv4 and IPv6 addresses (their
//! `sockaddr` layouts are the same for RV64 guests and x86-64 hosts).
//! Socket options and message-based calls (sendmsg/recvmsg) are not
//! supported yet and get `ENOSYS` like any unknown syscall.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use rustix::net::{
    AddressFamily, Protocol, RecvFlags, SendFlags, SocketAddrAny, SocketAddrUnix, SocketFlags,
    SocketType,
};
use tcgkit_tcg_core::GuestMemory;

use super::{Kernel, host_errno};
use crate::abi::errno;

type SysResult = Result<u64, i32>;

const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const SOCK_NONBLOCK: u64 = 0x800;
const SOCK_CLOEXEC: u64 = 0x80000;
const EAFNOSUPPORT: i32 = 97;

/// A guest socket address, parsed.
enum GuestAddr {
    Unix(SocketAddrUnix),
    V4(SocketAddrV4),
    V6(SocketAddrV6),
}

fn read_addr(mem: &mut GuestMemory, addr: u64, len: u64) -> Result<GuestAddr, i32> {
    if !(2..=128).contains(&len) {
        return Err(errno::EINVAL);
    }
    let mut raw = vec![0u8; len as usize];
    mem.read(addr, &mut raw).map_err(|_| errno::EFAULT)?;
    let family = u16::from_le_bytes([raw[0], raw[1]]);
    let body = &raw[2..];
    match family {
        AF_UNIX => {
            let path = &body[..body.len().min(108)];
            let unix = if path.first() == Some(&0) {
                SocketAddrUnix::new_abstract_name(&path[1..])
            } else {
                let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                SocketAddrUnix::new(&path[..end])
            };
            unix.map(GuestAddr::Unix).map_err(host_errno)
        }
        AF_INET if body.len() >= 6 => {
            let port = u16::from_be_bytes([body[0], body[1]]);
            let ip = Ipv4Addr::new(body[2], body[3], body[4], body[5]);
            Ok(GuestAddr::V4(SocketAddrV4::new(ip, port)))
        }
        AF_INET6 if body.len() >= 26 => {
            let port = u16::from_be_bytes([body[0], body[1]]);
            let flow = u32::from_be_bytes([body[2], body[3], body[4], body[5]]);
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&body[6..22]);
            let scope = u32::from_le_bytes([body[22], body[23], body[24], body[25]]);
            Ok(GuestAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(octets),
                port,
                flow,
                scope,
            )))
        }
        AF_INET | AF_INET6 => Err(errno::EINVAL),
        _ => Err(EAFNOSUPPORT),
    }
}

/// The guest bytes of a host address (IP only; others are reported unnamed).
fn encode_addr(addr: Option<SocketAddrAny>) -> Vec<u8> {
    let Some(addr) = addr else {
        return Vec::new();
    };
    if let Ok(v4) = SocketAddrV4::try_from(addr.clone()) {
        let mut raw = vec![0u8; 16];
        raw[..2].copy_from_slice(&AF_INET.to_le_bytes());
        raw[2..4].copy_from_slice(&v4.port().to_be_bytes());
        raw[4..8].copy_from_slice(&v4.ip().octets());
        return raw;
    }
    if let Ok(v6) = SocketAddrV6::try_from(addr) {
        let mut raw = vec![0u8; 28];
        raw[..2].copy_from_slice(&AF_INET6.to_le_bytes());
        raw[2..4].copy_from_slice(&v6.port().to_be_bytes());
        raw[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
        raw[8..24].copy_from_slice(&v6.ip().octets());
        raw[24..28].copy_from_slice(&v6.scope_id().to_le_bytes());
        return raw;
    }
    AF_UNIX.to_le_bytes().to_vec()
}

/// Writes an address to a guest `(addr, *addrlen)` pair, truncating as the
/// kernel does and storing the full length.
fn put_addr(mem: &mut GuestMemory, addr: u64, len_ptr: u64, bytes: &[u8]) -> Result<(), i32> {
    if addr == 0 || len_ptr == 0 {
        return Ok(());
    }
    let room = mem.load(len_ptr, 4).map_err(|_| errno::EFAULT)? as usize;
    let n = room.min(bytes.len());
    mem.write(addr, bytes.get(..n).unwrap_or_default())
        .map_err(|_| errno::EFAULT)?;
    mem.store(len_ptr, 4, bytes.len() as u64)
        .map_err(|_| errno::EFAULT)
}

impl Kernel {
    pub(super) fn socket(&mut self, domain: u64, kind: u64, protocol: u64) -> SysResult {
        if kind & !(0xf | SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(errno::EINVAL);
        }
        let mut flags = SocketFlags::CLOEXEC;
        if kind & SOCK_NONBLOCK != 0 {
            flags |= SocketFlags::NONBLOCK;
        }
        let protocol = std::num::NonZeroU32::new(protocol as u32).map(Protocol::from_raw);
        let host = rustix::net::socket_with(
            AddressFamily::from_raw(domain as u16),
            SocketType::from_raw(kind as u32 & 0xf),
            flags,
            protocol,
        )
        .map_err(host_errno)?;
        self.fds.insert(host, kind & SOCK_CLOEXEC != 0, 0)
    }

    pub(super) fn connect(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        addr: u64,
        len: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let result = match read_addr(mem, addr, len)? {
            GuestAddr::Unix(a) => rustix::net::connect(host, &a),
            GuestAddr::V4(a) => rustix::net::connect(host, &a),
            GuestAddr::V6(a) => rustix::net::connect(host, &a),
        };
        result.map(|()| 0).map_err(host_errno)
    }

    pub(super) fn bind(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        addr: u64,
        len: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let result = match read_addr(mem, addr, len)? {
            GuestAddr::Unix(a) => rustix::net::bind(host, &a),
            GuestAddr::V4(a) => rustix::net::bind(host, &a),
            GuestAddr::V6(a) => rustix::net::bind(host, &a),
        };
        result.map(|()| 0).map_err(host_errno)
    }

    pub(super) fn listen(&mut self, fd: u64, backlog: u64) -> SysResult {
        rustix::net::listen(self.fds.get(fd)?, backlog as i32)
            .map(|()| 0)
            .map_err(host_errno)
    }

    pub(super) fn accept4(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        addr: u64,
        len_ptr: u64,
        flags: u64,
    ) -> SysResult {
        if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(errno::EINVAL);
        }
        let mut host_flags = SocketFlags::CLOEXEC;
        if flags & SOCK_NONBLOCK != 0 {
            host_flags |= SocketFlags::NONBLOCK;
        }
        let (conn, peer) =
            rustix::net::acceptfrom_with(self.fds.get(fd)?, host_flags).map_err(host_errno)?;
        put_addr(mem, addr, len_ptr, &encode_addr(peer))?;
        self.fds.insert(conn, flags & SOCK_CLOEXEC != 0, 0)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn sendto(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        buf: u64,
        len: u64,
        flags: u64,
        addr: u64,
        addr_len: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let mut data = vec![0u8; len.min(16 << 20) as usize];
        mem.read(buf, &mut data).map_err(|_| errno::EFAULT)?;
        // MSG_NOSIGNAL or not, EPIPE is returned; SIGPIPE is raised by the
        // dispatcher for plain writes only.
        let flags = SendFlags::from_bits_retain(flags as u32);
        let sent = if addr == 0 {
            rustix::net::send(host, &data, flags)
        } else {
            match read_addr(mem, addr, addr_len)? {
                GuestAddr::Unix(a) => rustix::net::sendto(host, &data, flags, &a),
                GuestAddr::V4(a) => rustix::net::sendto(host, &data, flags, &a),
                GuestAddr::V6(a) => rustix::net::sendto(host, &data, flags, &a),
            }
        };
        sent.map(|n| n as u64).map_err(host_errno)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn recvfrom(
        &mut self,
        mem: &mut GuestMemory,
        fd: u64,
        buf: u64,
        len: u64,
        flags: u64,
        addr: u64,
        len_ptr: u64,
    ) -> SysResult {
        let host = self.fds.get(fd)?;
        let mut data = vec![0u8; len.min(16 << 20) as usize];
        let (_, got, from) = rustix::net::recvfrom(
            host,
            &mut data[..],
            RecvFlags::from_bits_retain(flags as u32),
        )
        .map_err(host_errno)?;
        let got = got.min(data.len());
        mem.write(buf, data.get(..got).unwrap_or_default())
            .map_err(|_| errno::EFAULT)?;
        put_addr(mem, addr, len_ptr, &encode_addr(from))?;
        Ok(got as u64)
    }

    pub(super) fn shutdown(&mut self, fd: u64, how: u64) -> SysResult {
        use rustix::net::Shutdown;
        let how = match how {
            0 => Shutdown::Read,
            1 => Shutdown::Write,
            2 => Shutdown::Both,
            _ => return Err(errno::EINVAL),
        };
        rustix::net::shutdown(self.fds.get(fd)?, how)
            .map(|()| 0)
            .map_err(host_errno)
    }
}
