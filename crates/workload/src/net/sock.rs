//! The socket toolkit of the network workloads: addresses, TCP listen/connect with buffers,
//! page-aligned buffers, UDP batches (sendmmsg/recvmmsg), socket buffer sizes (the instrument's
//! and everyone else's), drops at a socket, latency histograms.

use std::net::{
    IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream as StdTcpStream, UdpSocket,
};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use virtperf_proto::NetRole;

use crate::workload::RunCtx;

use super::common::{sock_err, NetError};

pub(crate) fn addr(ip: &str, port: u16) -> Result<SocketAddr, NetError> {
    let ip: IpAddr = ip.parse().map_err(|_| NetError::BadAddress(ip.to_string()))?;
    Ok(SocketAddr::new(ip, port))
}

/// Largest socket buffer an unprivileged setsockopt may ask for (min of rmem_max and wmem_max).
pub fn max_socket_buffer() -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(f).ok()?.trim().parse::<u64>().ok();
    Some(read("/proc/sys/net/core/rmem_max")?.min(read("/proc/sys/net/core/wmem_max")?))
}

/// Waits for one connection from the expected peer; others are refused and counted.
pub(crate) fn accept_from(
    l: &TcpListener,
    peer: IpAddr,
    until: Instant,
    ctx: &RunCtx,
    foreign: &mut u64,
) -> Result<StdTcpStream, NetError> {
    l.set_nonblocking(true).map_err(sock_err("O_NONBLOCK on the listener"))?;
    loop {
        if ctx.stopped() {
            return Err(NetError::Stopped);
        }
        if Instant::now() > until {
            return Err(NetError::NoClient);
        }
        match l.accept() {
            Ok((s, from)) if from.ip() == peer => {
                s.set_nonblocking(false).map_err(sock_err("blocking mode"))?;
                return Ok(s);
            }
            Ok(_) => *foreign += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(sock_err("accept")(e)),
        }
    }
}

pub(crate) fn tcp_listener(role: &NetRole, rcvbuf: Option<u64>) -> Result<TcpListener, NetError> {
    let a = addr(&role.bind, role.port)?;
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(sock_err("socket"))?;
    s.set_reuse_address(true).map_err(sock_err("SO_REUSEADDR"))?;
    if let Some(b) = rcvbuf {
        // Before listen: the window scale is negotiated from it.
        s.set_recv_buffer_size(b as usize).map_err(sock_err("SO_RCVBUF"))?;
    }
    s.bind(&SockAddr::from(a)).map_err(sock_err(format!("bind {a}")))?;
    s.listen(64).map_err(sock_err("listen"))?;
    Ok(s.into())
}

pub(crate) fn tcp_connect(
    role: &NetRole,
    sndbuf: Option<u64>,
    nodelay: bool,
) -> Result<StdTcpStream, NetError> {
    let to = addr(&role.peer, role.port)?;
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(sock_err("socket"))?;
    if let Some(b) = sndbuf {
        s.set_send_buffer_size(b as usize).map_err(sock_err("SO_SNDBUF"))?;
    }
    s.bind(&SockAddr::from(addr(&role.bind, 0)?)).map_err(sock_err(format!("bind {}", role.bind)))?;
    s.connect_timeout(&SockAddr::from(to), Duration::from_secs(5))
        .map_err(sock_err(format!("connect {to}")))?;
    s.set_nodelay(nodelay).map_err(sock_err("TCP_NODELAY"))?;
    Ok(s.into())
}

/// Total retransmitted segments of a TCP socket (TCP_INFO `tcpi_total_retrans`).
pub(crate) fn tcp_retransmits(s: &StdTcpStream) -> Option<u64> {
    tcp_info(s).map(|i| u64::from(i.tcpi_total_retrans))
}

/// Bytes of this connection the peer has acknowledged (`tcpi_bytes_acked`, Linux ≥ 4.1): what
/// reached the receiver's kernel, read on the sender's clock.
pub(crate) fn tcp_bytes_acked(s: &StdTcpStream) -> Option<u64> {
    tcp_info(s).map(|i| i.tcpi_bytes_acked)
}

/// The bytes a connection has received in order, read or still queued (TCP_INFO's
/// `tcpi_bytes_received`, RFC 4898's; 0 from a kernel or a user-space stack that does not count
/// them).
pub(crate) fn tcp_bytes_received(s: &StdTcpStream) -> Option<u64> {
    tcp_info(s).map(|i| i.tcpi_bytes_received)
}

fn tcp_info(s: &StdTcpStream) -> Option<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain data; zeroed is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which we own.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(info)
}

pub(crate) const PAGE: usize = 4096;

/// A byte buffer that starts on a page boundary, like iperf3's mmap'd buffers and netperf's
/// `-a`/`-A` alignment. The kernel's copy to and from user space (`rep movsb` on CPUs with fast
/// short moves) is sensitive to the destination's alignment: on this project's AMD EPYC hosts a
/// 128 KiB receive buffer at page + 16 (where a fresh `Vec` lands) cost ~30 % of single-stream
/// TCP goodput against the same buffer page-aligned (17.2 vs 12.2 Gbit/s, medians of 8 pairs).
pub(crate) struct PageBuf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl PageBuf {
    pub(crate) fn new(len: usize, fill: u8) -> PageBuf {
        let raw = vec![fill; len + PAGE];
        // align_offset may decline (usize::MAX); the buffer then works, merely unaligned.
        let off = raw.as_ptr().align_offset(PAGE);
        PageBuf { off: if off < PAGE { off } else { 0 }, raw, len }
    }
}

impl AsRef<[u8]> for PageBuf {
    fn as_ref(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
}

impl AsMut<[u8]> for PageBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

/// Datagrams the kernel dropped at the UDP socket bound to local `port` because its receive
/// buffer was full (the `drops` column of /proc/net/udp, in this network namespace): a receiver
/// that could not keep up, not the path, lost them.
pub fn socket_drops(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    socket_drops_in(&table, port)
}

/// [`socket_drops`] of a /proc/net/udp text.
pub fn socket_drops_in(table: &str, port: u16) -> Option<u64> {
    let want = format!("{port:04X}");
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = f.get(1)?.rsplit(':').next()?;
        (local_port == want).then(|| f.last()?.parse().ok()).flatten()
    })
}

/// Socket buffers of a UDP socket: the instrument's are 8 MiB each way (forced: the tester runs
/// as root), so that a tester descheduled for a few milliseconds drops nothing and never sets the
/// figure. A side under test keeps the kernel's defaults (`net.core.[rw]mem_default`), as
/// iperf3 and netperf do: forcing is a privilege a container or gVisor sandbox lacks, so a forced
/// buffer there would silently stay at the default while native got 8 MiB — an overhead that
/// belongs to the workload, not to the isolation layer. (It showed: a native sender with 16 MiB
/// in flight overran the emulated wire's backlog, 97–98 % of a GbE ceiling, while the container's
/// sender, clocked by its default buffer, got 99.9 %.)
pub(crate) fn size_buffers(s: &UdpSocket, role: &NetRole) {
    if !role.instrument {
        return;
    }
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // Failure (not root) is harmless: the instrument then keeps what the limits give it.
        set_socket_int(s, opt, 8 << 20);
    }
}

/// Gives a socket under test a receiving buffer of `bytes` (RFC 2544's `dut_rcvbuf`, asked by
/// the user): forced past `net.core.rmem_max` where the process may (CAP_NET_ADMIN), else as far as
/// the limit lets it. What it got is read back ([`rcvbuf_of`]) and reported per environment, so a
/// DUT that could not have it is seen, never silently compared with one that did.
pub fn set_rcvbuf(s: &UdpSocket, bytes: u64) {
    let size = bytes.min(i32::MAX as u64 / 2) as libc::c_int;
    let _ = set_socket_int(s, libc::SO_RCVBUFFORCE, size) || set_socket_int(s, libc::SO_RCVBUF, size);
}

/// A socket's receiving buffer as the kernel keeps it (SO_RCVBUF read back: twice what was set,
/// for its bookkeeping), bytes.
pub fn rcvbuf_of(s: &UdpSocket) -> Option<u64> {
    socket_int(s, libc::SO_RCVBUF).filter(|v| *v > 0).map(|v| v as u64)
}

/// Sets an integer SOL_SOCKET option; whether the kernel took it.
fn set_socket_int(s: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt reads sizeof(c_int) bytes from `v`, a live stack value.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &v as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Reads an integer SOL_SOCKET option.
pub(crate) fn socket_int(s: &UdpSocket, opt: libc::c_int) -> Option<libc::c_int> {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, a live stack value, and its length.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

pub(crate) const BATCH: usize = 64;

/// Sends each of `bufs` with one sendmmsg on a connected socket, `lens[i]` bytes of buffer `i`
/// (bufs and lens pair up; the shorter decides). Returns how many left (0 on an error such as
/// ENOBUFS).
pub(crate) fn send_batch(s: &UdpSocket, bufs: &mut [Vec<u8>], lens: &[usize]) -> usize {
    use std::os::fd::AsRawFd;
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .zip(lens)
        .map(|(b, &l)| libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: l.min(b.len()) })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: mmsghdr is plain data; all-zero is valid (no name, no control).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: every msghdr points at an iovec that points into a live buffer of at least iov_len
    // bytes; the socket is connected, so no name is needed.
    let n = unsafe { libc::sendmmsg(s.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0) };
    n.max(0) as usize
}

/// Receives up to BATCH datagrams; returns their lengths and sources.
pub(crate) fn recv_batch(s: &UdpSocket, bufs: &mut [Vec<u8>]) -> Vec<(usize, Option<SocketAddrV4>)> {
    use std::os::fd::AsRawFd;
    let mut names: Vec<libc::sockaddr_in> = (0..bufs.len())
        // SAFETY: sockaddr_in is plain data.
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: b.len() })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .zip(names.iter_mut())
        .map(|(v, n)| {
            // SAFETY: mmsghdr is plain data.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = n as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            m
        })
        .collect();
    // SAFETY: as in send_batch; the kernel writes at most iov_len bytes per buffer and namelen per name.
    let n = unsafe {
        libc::recvmmsg(
            s.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    (0..n.max(0) as usize)
        .map(|i| {
            let from = (names[i].sin_family == libc::AF_INET as u16).then(|| {
                SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(names[i].sin_addr.s_addr)),
                    u16::from_be(names[i].sin_port),
                )
            });
            (msgs[i].msg_len as usize, from)
        })
        .collect()
}

pub(crate) fn new_histogram() -> Result<hdrhistogram::Histogram<u64>, NetError> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| NetError::Histogram(e.to_string()))
}
