//! Network workloads (seeds 000, 001, 003): TCP and UDP streams, TCP and UDP request/response.
//!
//! Each flow has a server (listens on its lab address, receives or answers) and a client
//! (connects, sends or asks), in two agents paired by the orchestrator. A server says `started`
//! only once it listens. Receivers never trust packet contents: datagrams that are too short, carry
//! the wrong magic or flow, or come from another address are counted as foreign and ignored.

use std::io::{Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream as StdTcpStream, UdpSocket,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use virtperf_proto::{NetRole, Sample};

use crate::params::{ParamKind, ParamSpec, Params};
use crate::{sample, Better, MetricSpec, Output, RunCtx, Workload};

/// Ethernet header 14 + IPv4 20 + UDP 8 + FCS 4: what a frame size adds to a UDP payload (RFC 2544 sizes include the FCS).
pub const UDP_FRAME_OVERHEAD: u64 = 46;
/// Our datagram header: magic (4) + flow (4) + sequence (8).
const HDR: usize = 16;
const MAGIC: &[u8; 4] = b"VPUD";
const FIN_SEQ: u64 = u64::MAX;
/// How long a server waits for its client to connect or send, past the flow's duration.
const GRACE: Duration = Duration::from_secs(15);

const DURATION: ParamSpec = ParamSpec {
    name: "duration",
    kind: ParamKind::Duration { min_ms: 100, max_ms: 3_600_000 },
    default: Some("5s"),
    help: "how long the client sends (or asks)",
};
const DIRECTION: ParamSpec = ParamSpec {
    name: "direction",
    kind: ParamKind::Choice(&["out", "in", "both"]),
    default: Some("out"),
    help: "out: the environment sends to the tester; in: the tester sends; both: at once",
};

pub(crate) fn addr(ip: &str, port: u16) -> Result<SocketAddr, String> {
    let ip: IpAddr = ip.parse().map_err(|_| format!("`{ip}` is not an IP address"))?;
    Ok(SocketAddr::new(ip, port))
}

fn duration(p: &Params) -> Result<Duration, String> {
    Ok(Duration::from_millis(p.u64("duration")?))
}

/// Largest socket buffer an unprivileged setsockopt may ask for (min of rmem_max and wmem_max).
pub fn max_socket_buffer() -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(f).ok()?.trim().parse::<u64>().ok();
    Some(read("/proc/sys/net/core/rmem_max")?.min(read("/proc/sys/net/core/wmem_max")?))
}

fn check_window(p: &Params) -> Result<(), (String, String)> {
    if let (Some(w), Some(max)) = (p.opt_u64("window"), max_socket_buffer()) {
        if w > max {
            return Err((
                "window".into(),
                format!(
                    "{w} bytes is more than the kernel allows ({max}, net.core.rmem_max/wmem_max); raise them with sysctl or ask for less"
                ),
            ));
        }
    }
    Ok(())
}

/// Waits for one connection from the expected peer; others are refused and counted.
fn accept_from(
    l: &TcpListener,
    peer: IpAddr,
    until: Instant,
    ctx: &RunCtx,
    foreign: &mut u64,
) -> Result<StdTcpStream, String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        if ctx.stopped() {
            return Err("stopped before the client connected".into());
        }
        if Instant::now() > until {
            return Err("the client never connected".into());
        }
        match l.accept() {
            Ok((s, from)) if from.ip() == peer => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Ok(_) => *foreign += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
}

fn tcp_listener(role: &NetRole, rcvbuf: Option<u64>) -> Result<TcpListener, String> {
    let a = addr(&role.bind, role.port)?;
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
    s.set_reuse_address(true).map_err(|e| e.to_string())?;
    if let Some(b) = rcvbuf {
        // Before listen: the window scale is negotiated from it.
        s.set_recv_buffer_size(b as usize).map_err(|e| format!("SO_RCVBUF: {e}"))?;
    }
    s.bind(&SockAddr::from(a)).map_err(|e| format!("bind {a}: {e}"))?;
    s.listen(64).map_err(|e| e.to_string())?;
    Ok(s.into())
}

fn tcp_connect(role: &NetRole, sndbuf: Option<u64>, nodelay: bool) -> Result<StdTcpStream, String> {
    let to = addr(&role.peer, role.port)?;
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
    if let Some(b) = sndbuf {
        s.set_send_buffer_size(b as usize).map_err(|e| format!("SO_SNDBUF: {e}"))?;
    }
    s.bind(&SockAddr::from(addr(&role.bind, 0)?)).map_err(|e| format!("bind {}: {e}", role.bind))?;
    s.connect_timeout(&SockAddr::from(to), Duration::from_secs(5))
        .map_err(|e| format!("connect {to}: {e}"))?;
    s.set_nodelay(nodelay).map_err(|e| e.to_string())?;
    Ok(s.into())
}

/// Total retransmitted segments of a TCP socket (TCP_INFO `tcpi_total_retrans`).
fn tcp_retransmits(s: &StdTcpStream) -> Option<u64> {
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
    (rc == 0).then_some(u64::from(info.tcpi_total_retrans))
}

const PAGE: usize = 4096;

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

/// Runs `f` on every connection at once: the first on the calling thread, the others on threads
/// of their own (one stream, the default, needs no thread). Results come back in connection order.
fn on_each<C: Send, R: Send>(ctx: &RunCtx, conns: Vec<C>, f: impl Fn(C) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let mut conns = conns.into_iter();
        let first = conns.next();
        let f = &f;
        // Each extra thread's CPU time counts in the run's (the first stream's is the run thread's).
        let others: Vec<_> = conns
            .map(|c| {
                s.spawn(move || {
                    let _cpu = ctx.thread_cpu();
                    f(c)
                })
            })
            .collect();
        let mut out: Vec<R> = first.map(f).into_iter().collect();
        // A stream that panicked fails the run, whichever thread it ran on.
        out.extend(others.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))));
        out
    })
}

/// Reads one stream to its end; returns (first byte, last byte, bytes), or None if nothing came.
fn receive_stream(mut c: StdTcpStream, ctx: &RunCtx, until: Instant) -> Option<(Instant, Instant, u64)> {
    let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = PageBuf::new(128 * 1024, 0);
    let buf = buf.as_mut();
    let (mut first, mut last, mut bytes) = (None, Instant::now(), 0u64);
    loop {
        match c.read(buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                bytes += n as u64;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if ctx.stopped() || Instant::now() > until {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    first.map(|f| (f, last, bytes))
}

/// Writes `msg` over and over until `end`, then waits for the receiver to close so that every
/// byte is acknowledged; returns (bytes sent, retransmitted segments).
fn send_stream(mut c: StdTcpStream, msg: &[u8], end: Instant, ctx: &RunCtx) -> (u64, Option<u64>) {
    let mut sent = 0u64;
    while Instant::now() < end && !ctx.stopped() {
        match c.write(msg) {
            Ok(n) => sent += n as u64,
            Err(_) => break,
        }
    }
    let _ = c.shutdown(std::net::Shutdown::Write);
    let mut b = [0u8; 64];
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    while matches!(c.read(&mut b), Ok(n) if n > 0) {}
    (sent, tcp_retransmits(&c))
}

/// Bulk TCP transfer, like iperf3/netperf TCP_STREAM; the window (socket buffer) is a parameter (seed 000, experiment 2).
pub struct TcpStream;

impl Workload for TcpStream {
    fn kind(&self) -> &'static str {
        "tcp_stream"
    }
    fn summary(&self) -> &'static str {
        "bulk TCP transfer over N parallel connections; goodput measured at the receiver"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DURATION,
            DIRECTION,
            ParamSpec {
                name: "streams",
                kind: ParamKind::Int { min: 1, max: 128 },
                default: Some("1"),
                help: "parallel connections",
            },
            ParamSpec {
                name: "message",
                kind: ParamKind::Size { min: 1, max: 64 << 20 },
                default: Some("128KiB"),
                help: "bytes per write",
            },
            ParamSpec {
                name: "window",
                kind: ParamKind::Size { min: 2048, max: 1 << 31 },
                default: None,
                help: "socket buffer (SO_SNDBUF/SO_RCVBUF) on both sides; default: kernel autotuning",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec {
                name: "tcp_goodput",
                unit: "Gbit/s",
                better: Better::Higher,
                help: "payload bits received per second",
            },
            MetricSpec {
                name: "tcp_retransmits",
                unit: "segments",
                better: Better::Lower,
                help: "retransmitted segments (sender)",
            },
        ]
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn check(&self, p: &Params) -> Result<(), (String, String)> {
        check_window(p)
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, String> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let streams = p.u64("streams")? as usize;
        let window = p.opt_u64("window");
        match role.side {
            virtperf_proto::Side::Server => {
                let l = tcp_listener(role, window)?;
                ctx.ready();
                let until = Instant::now() + dur + GRACE;
                let peer: IpAddr = role.peer.parse().map_err(|_| "bad peer".to_string())?;
                let mut foreign = 0;
                let mut conns = Vec::new();
                for _ in 0..streams {
                    conns.push(accept_from(&l, peer, until, ctx, &mut foreign)?);
                }
                let v: Vec<(Instant, Instant, u64)> =
                    on_each(ctx, conns, |c| receive_stream(c, ctx, until)).into_iter().flatten().collect();
                let first = v.iter().map(|x| x.0).min().ok_or("no data received")?;
                let last = v.iter().map(|x| x.1).max().ok_or("no data received")?;
                let bytes: u64 = v.iter().map(|x| x.2).sum();
                let secs = last.duration_since(first).as_secs_f64().max(1e-6);
                Ok(Output {
                    samples: vec![sample("tcp_goodput", bytes as f64 * 8.0 / secs / 1e9, "Gbit/s")],
                    extra: serde_json::json!({"bytes": bytes, "seconds": secs, "foreign_connections": foreign}),
                })
            }
            virtperf_proto::Side::Client => {
                let msg = PageBuf::new(p.u64("message")? as usize, 0x5a);
                let mut conns = Vec::new();
                for _ in 0..streams {
                    conns.push(tcp_connect(role, window, false)?);
                }
                let t0 = Instant::now();
                let r = on_each(ctx, conns, |c| send_stream(c, msg.as_ref(), t0 + dur, ctx));
                let sent: u64 = r.iter().map(|x| x.0).sum();
                let retrans: u64 = r.iter().filter_map(|x| x.1).sum();
                Ok(Output {
                    samples: vec![sample("tcp_retransmits", retrans as f64, "segments")],
                    extra: serde_json::json!({"bytes_sent": sent}),
                })
            }
        }
    }
}

/// Payload bytes of one datagram: `payload`, else `frame_size` − 46.
pub fn udp_payload(p: &Params) -> Result<usize, String> {
    let payload = match p.opt_u64("payload") {
        Some(b) => b,
        None => p.u64("frame_size")?.saturating_sub(UDP_FRAME_OVERHEAD),
    };
    if (payload as usize) < HDR {
        return Err(format!("payload of {payload} bytes is below the {HDR}-byte sequence header"));
    }
    Ok(payload as usize)
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
    use std::os::fd::AsRawFd;
    if !role.instrument {
        return;
    }
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: setsockopt reads sizeof(c_int) bytes from `size`; failure (not root) is harmless.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &size as *const _ as *const libc::c_void,
                4,
            );
        }
    }
}

const BATCH: usize = 64;

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

fn stamp(buf: &mut [u8], flow: u32, seq: u64) {
    buf[..4].copy_from_slice(MAGIC);
    buf[4..8].copy_from_slice(&flow.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// Parses our header; `None` for anything else (foreign, short, wrong flow).
fn parse(buf: &[u8], flow: u32) -> Option<u64> {
    if buf.len() < HDR || &buf[..4] != MAGIC || buf[4..8] != flow.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(buf[8..16].try_into().ok()?))
}

/// UDP stream at a frame size, offered rate or unlimited (seed 003: nuttcp UDP; RFC 2544 frame sizes).
pub struct UdpStream;

impl Workload for UdpStream {
    fn kind(&self) -> &'static str {
        "udp_stream"
    }
    fn summary(&self) -> &'static str {
        "UDP datagrams at a frame size, unlimited or at an offered rate; sent/received rates and loss"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DURATION,
            DIRECTION,
            ParamSpec {
                name: "frame_size",
                kind: ParamKind::Int { min: 64, max: 9018 },
                default: Some("1518"),
                help: "Ethernet frame size incl. FCS (RFC 2544: 64…1518); payload = frame − 46",
            },
            ParamSpec {
                name: "payload",
                kind: ParamKind::Int { min: 16, max: 65507 },
                default: None,
                help: "UDP payload bytes (overrides frame_size)",
            },
            ParamSpec {
                name: "rate",
                kind: ParamKind::Int { min: 0, max: 100_000_000 },
                default: Some("0"),
                help: "offered datagrams per second; 0 = as fast as possible",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec {
                name: "udp_sent_rate",
                unit: "kpps",
                better: Better::Higher,
                help: "datagrams sent per second",
            },
            MetricSpec {
                name: "udp_recv_rate",
                unit: "kpps",
                better: Better::Higher,
                help: "datagrams received per second",
            },
            MetricSpec {
                name: "udp_loss",
                unit: "%",
                better: Better::Lower,
                help: "datagrams sent but not received",
            },
            MetricSpec {
                name: "udp_goodput",
                unit: "Gbit/s",
                better: Better::Higher,
                help: "payload bits received per second",
            },
            MetricSpec {
                name: "udp_rx_socket_drops",
                unit: "datagrams",
                better: Better::Lower,
                help: "dropped at the receiving socket, its buffer full: the receiver could not keep up",
            },
        ]
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, String> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let payload = udp_payload(p)?;
        match role.side {
            virtperf_proto::Side::Server => {
                let s = UdpSocket::bind(addr(&role.bind, role.port)?).map_err(|e| format!("bind: {e}"))?;
                size_buffers(&s, role);
                s.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
                let peer: Ipv4Addr = role.peer.parse().map_err(|_| "bad peer".to_string())?;
                ctx.ready();
                let until = Instant::now() + dur + GRACE;
                let mut bufs = vec![vec![0u8; payload.max(HDR) + 64]; BATCH];
                let (mut received, mut foreign, mut bytes, mut max_seq) = (0u64, 0u64, 0u64, 0u64);
                let (mut first, mut last) = (None::<Instant>, Instant::now());
                'outer: loop {
                    let got = recv_batch(&s, &mut bufs);
                    let now = Instant::now();
                    if got.is_empty() {
                        let idle = first.is_some() && now.duration_since(last) > Duration::from_secs(2);
                        if ctx.stopped() || now > until || idle {
                            break;
                        }
                        continue;
                    }
                    for (i, (len, from)) in got.into_iter().enumerate() {
                        match (from.map(|a| *a.ip()) == Some(peer), parse(&bufs[i][..len], role.flow)) {
                            (true, Some(FIN_SEQ)) => break 'outer,
                            (true, Some(seq)) => {
                                received += 1;
                                bytes += len as u64;
                                max_seq = max_seq.max(seq);
                                first.get_or_insert(now);
                                last = now;
                            }
                            _ => foreign += 1,
                        }
                    }
                }
                let secs = first.map(|f| last.duration_since(f).as_secs_f64()).unwrap_or(0.0).max(1e-6);
                let mut samples = vec![
                    sample("udp_recv_rate", received as f64 / secs / 1e3, "kpps"),
                    sample("udp_goodput", bytes as f64 * 8.0 / secs / 1e9, "Gbit/s"),
                ];
                if let Some(d) = socket_drops(role.port) {
                    samples.push(sample("udp_rx_socket_drops", d as f64, "datagrams"));
                }
                Ok(Output {
                    samples,
                    extra: serde_json::json!({"received": received, "bytes": bytes, "foreign": foreign, "max_seq": max_seq, "seconds": secs}),
                })
            }
            virtperf_proto::Side::Client => {
                let s = UdpSocket::bind(addr(&role.bind, 0)?).map_err(|e| format!("bind: {e}"))?;
                size_buffers(&s, role);
                s.connect(addr(&role.peer, role.port)?).map_err(|e| format!("connect: {e}"))?;
                let rate = p.u64("rate")?;
                let mut bufs = vec![vec![0u8; payload]; BATCH];
                let lens = [payload; BATCH];
                let t0 = Instant::now();
                let mut seq = 0u64;
                while !ctx.stopped() {
                    let elapsed = t0.elapsed();
                    if elapsed >= dur {
                        break;
                    }
                    let mut n = BATCH;
                    if rate > 0 {
                        // Pace: never ahead of rate × elapsed; small batches keep bursts short.
                        let due = (rate as f64 * elapsed.as_secs_f64()) as u64;
                        if seq >= due {
                            let wait = Duration::from_secs_f64((seq + 1 - due) as f64 / rate as f64);
                            std::thread::sleep(wait.min(Duration::from_millis(1)));
                            continue;
                        }
                        n = ((due - seq) as usize).min(BATCH);
                    }
                    for (i, b) in bufs.iter_mut().take(n).enumerate() {
                        stamp(b, role.flow, seq + i as u64 + 1);
                    }
                    seq += send_batch(&s, &mut bufs[..n], &lens[..n]) as u64;
                }
                let secs = t0.elapsed().as_secs_f64();
                let mut fin = vec![0u8; HDR];
                stamp(&mut fin, role.flow, FIN_SEQ);
                for _ in 0..5 {
                    let _ = s.send(&fin);
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(Output {
                    samples: vec![sample("udp_sent_rate", seq as f64 / secs / 1e3, "kpps")],
                    extra: serde_json::json!({"sent": seq, "seconds": secs}),
                })
            }
        }
    }
    fn merge(&self, server: &Output, client: &Output) -> Vec<Sample> {
        let mut out: Vec<Sample> = server.samples.iter().chain(&client.samples).cloned().collect();
        let sent = client.extra["sent"].as_u64();
        let received = server.extra["received"].as_u64();
        if let (Some(s), Some(r)) = (sent, received) {
            let loss = if s == 0 { 0.0 } else { s.saturating_sub(r) as f64 / s as f64 * 100.0 };
            out.push(sample("udp_loss", loss, "%"));
        }
        out
    }
}

/// Latency histogram of request/response transactions (ns, 3 significant digits).
fn rr_samples(prefix: &str, h: &hdrhistogram::Histogram<u64>, secs: f64, extra: serde_json::Value) -> Output {
    let us = |ns: u64| ns as f64 / 1e3;
    let buckets: Vec<(f64, u64)> =
        h.iter_recorded().map(|v| (us(v.value_iterated_to()), v.count_at_value())).collect();
    let mut e = extra;
    e["histogram_us"] = serde_json::json!(buckets);
    Output {
        samples: vec![
            sample(&format!("{prefix}_rate"), h.len() as f64 / secs.max(1e-9), "trans/s"),
            sample(&format!("{prefix}_latency"), h.mean() / 1e3, "us"),
            sample(&format!("{prefix}_p50"), us(h.value_at_quantile(0.50)), "us"),
            sample(&format!("{prefix}_p90"), us(h.value_at_quantile(0.90)), "us"),
            sample(&format!("{prefix}_p99"), us(h.value_at_quantile(0.99)), "us"),
            sample(&format!("{prefix}_p999"), us(h.value_at_quantile(0.999)), "us"),
        ],
        extra: e,
    }
}

fn rr_metrics(prefix: &'static str) -> &'static [MetricSpec] {
    // Static tables per prefix (metric names must be 'static).
    match prefix {
        "tcp_rr" => &[
            MetricSpec {
                name: "tcp_rr_rate",
                unit: "trans/s",
                better: Better::Higher,
                help: "transactions per second",
            },
            MetricSpec { name: "tcp_rr_latency", unit: "us", better: Better::Lower, help: "mean round trip" },
            MetricSpec { name: "tcp_rr_p50", unit: "us", better: Better::Lower, help: "median round trip" },
            MetricSpec { name: "tcp_rr_p90", unit: "us", better: Better::Lower, help: "90th percentile" },
            MetricSpec { name: "tcp_rr_p99", unit: "us", better: Better::Lower, help: "99th percentile" },
            MetricSpec { name: "tcp_rr_p999", unit: "us", better: Better::Lower, help: "99.9th percentile" },
        ],
        _ => &[
            MetricSpec {
                name: "udp_rr_rate",
                unit: "trans/s",
                better: Better::Higher,
                help: "transactions per second",
            },
            MetricSpec { name: "udp_rr_latency", unit: "us", better: Better::Lower, help: "mean round trip" },
            MetricSpec { name: "udp_rr_p50", unit: "us", better: Better::Lower, help: "median round trip" },
            MetricSpec { name: "udp_rr_p90", unit: "us", better: Better::Lower, help: "90th percentile" },
            MetricSpec { name: "udp_rr_p99", unit: "us", better: Better::Lower, help: "99th percentile" },
            MetricSpec { name: "udp_rr_p999", unit: "us", better: Better::Lower, help: "99.9th percentile" },
            MetricSpec {
                name: "udp_rr_timeouts",
                unit: "trans",
                better: Better::Lower,
                help: "requests never answered (lost)",
            },
        ],
    }
}

const RR_PARAMS: &[ParamSpec] = &[
    DURATION,
    DIRECTION,
    ParamSpec {
        name: "request",
        kind: ParamKind::Size { min: 1, max: 65000 },
        default: Some("1"),
        help: "request bytes",
    },
    ParamSpec {
        name: "response",
        kind: ParamKind::Size { min: 1, max: 65000 },
        default: Some("1"),
        help: "response bytes",
    },
];

pub(crate) fn new_histogram() -> Result<hdrhistogram::Histogram<u64>, String> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())
}

/// TCP request/response (netperf TCP_RR): one connection, one transaction in flight.
pub struct TcpRr;

impl Workload for TcpRr {
    fn kind(&self) -> &'static str {
        "tcp_rr"
    }
    fn summary(&self) -> &'static str {
        "TCP request/response on one connection (TCP_NODELAY): transactions/s and latency percentiles"
    }
    fn params(&self) -> &'static [ParamSpec] {
        RR_PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        rr_metrics("tcp_rr")
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, String> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let (req, resp) = (p.u64("request")? as usize, p.u64("response")? as usize);
        match role.side {
            virtperf_proto::Side::Server => {
                let l = tcp_listener(role, None)?;
                ctx.ready();
                let peer: IpAddr = role.peer.parse().map_err(|_| "bad peer".to_string())?;
                let mut foreign = 0;
                let mut c = accept_from(&l, peer, Instant::now() + dur + GRACE, ctx, &mut foreign)?;
                c.set_nodelay(true).map_err(|e| e.to_string())?;
                c.set_read_timeout(Some(Duration::from_millis(200))).map_err(|e| e.to_string())?;
                let (mut inb, out) = (vec![0u8; req], vec![0x33u8; resp]);
                let mut served = 0u64;
                loop {
                    match c.read_exact(&mut inb) {
                        Ok(()) => {
                            if c.write_all(&out).is_err() {
                                break;
                            }
                            served += 1;
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            if ctx.stopped() {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                }
                Ok(Output {
                    samples: Vec::new(),
                    extra: serde_json::json!({"served": served, "foreign_connections": foreign}),
                })
            }
            virtperf_proto::Side::Client => {
                let mut c = tcp_connect(role, None, true)?;
                c.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                let (out, mut inb) = (vec![0x11u8; req], vec![0u8; resp]);
                let mut h = new_histogram()?;
                let t0 = Instant::now();
                while t0.elapsed() < dur && !ctx.stopped() {
                    let t = Instant::now();
                    c.write_all(&out).map_err(|e| format!("write: {e}"))?;
                    c.read_exact(&mut inb).map_err(|e| format!("read: {e}"))?;
                    let _ = h.record((t.elapsed().as_nanos() as u64).max(1));
                }
                let secs = t0.elapsed().as_secs_f64();
                let _ = c.shutdown(std::net::Shutdown::Both);
                Ok(rr_samples("tcp_rr", &h, secs, serde_json::json!({})))
            }
        }
    }
}

/// UDP request/response: a lost request or response is a timeout, counted, not retried.
pub struct UdpRr;

const UDP_RR_TIMEOUT: Duration = Duration::from_millis(100);

impl Workload for UdpRr {
    fn kind(&self) -> &'static str {
        "udp_rr"
    }
    fn summary(&self) -> &'static str {
        "UDP request/response, one in flight; a lost transaction times out after 100 ms and is counted"
    }
    fn params(&self) -> &'static [ParamSpec] {
        RR_PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        rr_metrics("udp_rr")
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, String> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let (req, resp) = ((p.u64("request")? as usize).max(HDR), (p.u64("response")? as usize).max(HDR));
        match role.side {
            virtperf_proto::Side::Server => {
                let s = UdpSocket::bind(addr(&role.bind, role.port)?).map_err(|e| format!("bind: {e}"))?;
                s.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
                let peer: IpAddr = role.peer.parse().map_err(|_| "bad peer".to_string())?;
                ctx.ready();
                let until = Instant::now() + dur + GRACE;
                let (mut inb, mut out) = (vec![0u8; req + 64], vec![0x33u8; resp]);
                let (mut served, mut foreign, mut last) = (0u64, 0u64, None::<Instant>);
                loop {
                    match s.recv_from(&mut inb) {
                        Ok((n, from)) => match (from.ip() == peer, parse(&inb[..n], role.flow)) {
                            (true, Some(FIN_SEQ)) => break,
                            (true, Some(seq)) => {
                                stamp(&mut out, role.flow, seq);
                                let _ = s.send_to(&out, from);
                                served += 1;
                                last = Some(Instant::now());
                            }
                            _ => foreign += 1,
                        },
                        Err(_) => {
                            let idle = last.is_some_and(|l| l.elapsed() > Duration::from_secs(2));
                            if ctx.stopped() || Instant::now() > until || idle {
                                break;
                            }
                        }
                    }
                }
                Ok(Output {
                    samples: Vec::new(),
                    extra: serde_json::json!({"served": served, "foreign": foreign}),
                })
            }
            virtperf_proto::Side::Client => {
                let s = UdpSocket::bind(addr(&role.bind, 0)?).map_err(|e| format!("bind: {e}"))?;
                s.connect(addr(&role.peer, role.port)?).map_err(|e| format!("connect: {e}"))?;
                s.set_read_timeout(Some(UDP_RR_TIMEOUT)).map_err(|e| e.to_string())?;
                let (mut out, mut inb) = (vec![0x11u8; req], vec![0u8; resp + 64]);
                let mut h = new_histogram()?;
                let (mut seq, mut timeouts) = (0u64, 0u64);
                let t0 = Instant::now();
                while t0.elapsed() < dur && !ctx.stopped() {
                    seq += 1;
                    stamp(&mut out, role.flow, seq);
                    let t = Instant::now();
                    s.send(&out).map_err(|e| format!("send: {e}"))?;
                    loop {
                        match s.recv(&mut inb) {
                            Ok(n) if parse(&inb[..n], role.flow) == Some(seq) => {
                                let _ = h.record((t.elapsed().as_nanos() as u64).max(1));
                                break;
                            }
                            Ok(_) => continue, // a late answer to an earlier request, or foreign
                            Err(_) => {
                                timeouts += 1;
                                break;
                            }
                        }
                    }
                }
                let secs = t0.elapsed().as_secs_f64();
                let mut fin = vec![0u8; HDR];
                stamp(&mut fin, role.flow, FIN_SEQ);
                let _ = s.send(&fin);
                let mut o = rr_samples("udp_rr", &h, secs, serde_json::json!({}));
                o.samples.push(sample("udp_rr_timeouts", timeouts as f64, "trans"));
                Ok(o)
            }
        }
    }
}

/// Runs a server and a client of `w` on loopback, for tests. Both ends get the instrument's
/// socket buffers: these tests check a workload's mechanics (counts, pacing, echoes), which a
/// loaded host's scheduling must not turn into drops at a default-sized socket.
#[doc(hidden)]
pub fn loopback_pair(
    w: &dyn Workload,
    params: &serde_json::Value,
    port: u16,
) -> Result<(Output, Output), String> {
    #[cfg(test)]
    let _cpu = crate::cpu_heavy();
    let given: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_value(params.clone()).map_err(|e| e.to_string())?;
    let resolved = crate::params::revalidate(w.params(), &given).map_err(|e| format!("{}: {}", e.0, e.1))?;
    let role = |side| NetRole {
        side,
        bind: "127.0.0.1".into(),
        peer: "127.0.0.1".into(),
        port,
        flow: 7,
        instrument: true,
    };
    let (srole, crole) = (role(virtperf_proto::Side::Server), role(virtperf_proto::Side::Client));
    let stop = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    let mark = || ready.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        let server = s.spawn(|| w.run(&Params(&resolved), &RunCtx::new(&stop, &mark, Some(&srole))));
        while !ready.load(Ordering::SeqCst) && !server.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let client = w.run(&Params(&resolved), &RunCtx::new(&stop, &|| {}, Some(&crole)));
        if client.is_err() {
            stop.store(true, Ordering::SeqCst);
        }
        let server = server.join().map_err(|_| "server panicked".to_string())?;
        Ok((server?, client?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The UDP stream receiver's parser sees whatever reaches its port: never a panic, and only
    /// its own flow's sequence numbers.
    #[test]
    fn socket_drops_come_from_the_receivers_own_socket() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
          1: 0A001264:1451 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0 17\n\
          2: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0 0\n";
        assert_eq!(socket_drops_in(table, 5201), Some(17));
        assert_eq!(socket_drops_in(table, 53), Some(0));
        assert_eq!(socket_drops_in(table, 9), None);
        // A real socket of ours: no drops on an idle one.
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert_eq!(socket_drops(port), Some(0));
    }

    #[test]
    fn fuzz_udp_datagram_parser() {
        use proptest::prelude::*;
        use virtperf_proto::fuzzing::{fuzz, mutated};
        let mut seeds = Vec::new();
        for (flow, seq) in [(0u32, 0u64), (1, 7), (2, u64::MAX)] {
            let mut b = vec![0u8; HDR + flow as usize * 40];
            stamp(&mut b, flow, seq);
            seeds.push(b);
        }
        const TOKENS: &[&str] = &["VPUD", "\u{0}\u{0}\u{0}\u{1}"];
        fuzz("udp datagram parser", (mutated(seeds, TOKENS), 0u32..3), |(d, flow)| {
            if let Some(seq) = parse(&d, flow) {
                prop_assert!(d.len() >= HDR && &d[..4] == MAGIC && d[4..8] == flow.to_be_bytes());
                prop_assert_eq!(&seq.to_be_bytes()[..], &d[8..16]);
            }
            Ok(())
        });
    }

    #[test]
    fn page_buffers_start_on_a_page_and_hold_what_was_asked() {
        for (len, fill) in [(1, 7u8), (4095, 0), (128 * 1024, 0x5a), (3 << 20, 1)] {
            let mut b = PageBuf::new(len, fill);
            assert_eq!(b.as_ref().as_ptr() as usize % PAGE, 0, "{len} bytes");
            assert_eq!(b.as_ref().len(), len);
            assert!(b.as_ref().iter().all(|&x| x == fill));
            b.as_mut()[len - 1] = fill.wrapping_add(1);
            assert_eq!(b.as_ref()[len - 1], fill.wrapping_add(1));
        }
    }

    fn value(o: &[Sample], m: &str) -> f64 {
        o.iter().find(|s| s.metric == m).unwrap_or_else(|| panic!("no {m} in {o:?}")).value
    }

    #[test]
    fn tcp_stream_on_loopback() {
        let (s, c) = loopback_pair(&TcpStream, &json!({"duration": 300, "streams": 2}), 47101).unwrap();
        let merged = TcpStream.merge(&s, &c);
        assert!(value(&merged, "tcp_goodput") > 0.1, "{merged:?}");
        assert!(value(&merged, "tcp_retransmits") >= 0.0);
        assert_eq!(s.extra["bytes"], c.extra["bytes_sent"], "every byte sent was received");
    }

    #[test]
    fn udp_stream_counts_loss_at_an_offered_rate() {
        let (s, c) =
            loopback_pair(&UdpStream, &json!({"duration": 300, "frame_size": 64, "rate": 20000}), 47102)
                .unwrap();
        let merged = UdpStream.merge(&s, &c);
        let sent = value(&merged, "udp_sent_rate");
        assert!((sent - 20.0).abs() < 4.0, "paced at 20 kpps, got {sent}");
        assert!(value(&merged, "udp_loss") < 5.0, "{merged:?}");
        assert_eq!(s.extra["foreign"], 0);
    }

    #[test]
    fn only_the_instrument_gets_buffers_beyond_the_kernels_defaults() {
        use std::os::fd::AsRawFd;
        let size_of = |s: &UdpSocket, opt| {
            let (mut v, mut len): (libc::c_int, libc::socklen_t) = (0, 4);
            // SAFETY: getsockopt writes at most `len` (4) bytes into `v`, which we own.
            unsafe {
                libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, opt, &mut v as *mut _ as *mut _, &mut len)
            };
            v as i64
        };
        let role = |instrument| NetRole {
            side: virtperf_proto::Side::Server,
            bind: "127.0.0.1".into(),
            peer: "127.0.0.1".into(),
            port: 0,
            flow: 0,
            instrument,
        };
        let fresh = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dut = UdpSocket::bind("127.0.0.1:0").unwrap();
        size_buffers(&dut, &role(false));
        // Under test: exactly what any application gets, privileged or not.
        for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
            assert_eq!(size_of(&dut, opt), size_of(&fresh, opt), "option {opt}");
        }
        let tester = UdpSocket::bind("127.0.0.1:0").unwrap();
        size_buffers(&tester, &role(true));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // 8 MiB asked, doubled by the kernel for its bookkeeping.
            for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
                assert_eq!(size_of(&tester, opt), 16 << 20, "option {opt}");
            }
        } else {
            eprintln!("not root: the instrument's forced buffers are not checked (SO_RCVBUFFORCE needs CAP_NET_ADMIN)");
        }
    }

    #[test]
    fn udp_receiver_ignores_foreign_and_malformed_datagrams() {
        let stop = AtomicBool::new(false);
        let role = NetRole {
            side: virtperf_proto::Side::Server,
            bind: "127.0.0.1".into(),
            peer: "127.0.0.1".into(),
            port: 47103,
            flow: 3,
            instrument: false,
        };
        let resolved = crate::params::revalidate(
            UdpStream.params(),
            &[("duration".to_string(), json!(200))].into_iter().collect(),
        )
        .unwrap();
        let ready = AtomicBool::new(false);
        let mark = || ready.store(true, Ordering::SeqCst);
        std::thread::scope(|sc| {
            let h = sc.spawn(|| UdpStream.run(&Params(&resolved), &RunCtx::new(&stop, &mark, Some(&role))));
            while !ready.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let to = "127.0.0.1:47103";
            tx.send_to(b"short", to).unwrap();
            tx.send_to(&[0xffu8; 100], to).unwrap();
            let mut wrong_flow = vec![0u8; 32];
            stamp(&mut wrong_flow, 99, 1);
            tx.send_to(&wrong_flow, to).unwrap();
            let mut good = vec![0u8; 32];
            stamp(&mut good, 3, 1);
            tx.send_to(&good, to).unwrap();
            stamp(&mut good, 3, FIN_SEQ);
            tx.send_to(&good, to).unwrap();
            let out = h.join().unwrap().unwrap();
            assert_eq!(out.extra["received"], 1);
            assert_eq!(out.extra["foreign"], 3);
        });
    }

    #[test]
    fn tcp_rr_and_udp_rr_on_loopback() {
        let (_, c) = loopback_pair(&TcpRr, &json!({"duration": 200}), 47104).unwrap();
        assert!(value(&c.samples, "tcp_rr_rate") > 100.0);
        assert!(value(&c.samples, "tcp_rr_p50") <= value(&c.samples, "tcp_rr_p99"));
        assert!(c.extra["histogram_us"].as_array().is_some_and(|h| !h.is_empty()));
        let (_, c) =
            loopback_pair(&UdpRr, &json!({"duration": 200, "request": 32, "response": 64}), 47105).unwrap();
        assert!(value(&c.samples, "udp_rr_rate") > 100.0);
        assert_eq!(value(&c.samples, "udp_rr_timeouts"), 0.0);
    }

    #[test]
    fn payload_from_frame_size() {
        let r = crate::params::revalidate(
            UdpStream.params(),
            &[("frame_size".to_string(), json!(64))].into_iter().collect(),
        )
        .unwrap();
        assert_eq!(udp_payload(&Params(&r)).unwrap(), 18);
    }

    #[test]
    fn a_server_gives_up_when_stopped() {
        let stop = AtomicBool::new(true);
        let role = NetRole {
            side: virtperf_proto::Side::Server,
            bind: "127.0.0.1".into(),
            peer: "127.0.0.1".into(),
            port: 47106,
            flow: 0,
            instrument: false,
        };
        let r = crate::params::revalidate(TcpStream.params(), &Default::default()).unwrap();
        let e = TcpStream.run(&Params(&r), &RunCtx::new(&stop, &|| {}, Some(&role))).unwrap_err();
        assert!(e.contains("stopped"), "{e}");
    }
}
