//! virtperf's load generator for services: `connections` connections multiplexed on a few
//! event-loop threads (one per CPU the client may use, as wrk's threads), in a closed loop
//! (capacity: each connection asks again as soon as it is answered, wrk's way) or an open loop (a
//! fixed offered rate: each connection's requests have scheduled send times, and a request's
//! latency is taken from that time, not from when it could finally be sent — wrk2's and pgbench
//! `--rate`'s way, so a server that stalls is charged for every request the stall delayed, none
//! omitted).
//!
//! Written here rather than run as wrk: wrk is a closed loop (its latencies omit what a stall
//! delays), wrk2 is not packaged by Debian, and redis-benchmark is closed too; one generator for
//! every protocol also makes the phases alike (the same connections, pacing, timeouts). Sockets
//! are non-blocking under `mio`'s epoll, so the client's CPU per request stays near wrk's (one
//! thread per connection cost 20 µs a request in context switches). A protocol is a
//! [`Protocol`]: the bytes of a request and a [`Reader`] of its whole answer, checked.

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde_json::{json, Value};

use super::AppError;
use crate::workload::RunCtx;

/// How long a request may wait for its answer before it counts as failed (its connection is
/// then made again).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The share of the offered rate a phase must achieve to have carried its load: below it, the
/// phase's latencies are not a latency at that load (the requests queued in the client) and are
/// left out; its rate and backlog say what happened.
pub const CARRIED: f64 = 0.95;

/// The most distinct failure messages kept with a phase.
const KEEP_ERRORS: usize = 4;

/// How long a connection that failed waits before it is made again.
const BACKOFF: Duration = Duration::from_millis(10);

/// What the answer read so far amounts to.
#[derive(Debug, PartialEq)]
pub enum Feed {
    /// More bytes are needed.
    More,
    /// The answer is whole: it ended `used` bytes into the data just fed; `close`: the server
    /// closes the connection after it.
    Done { used: usize, close: bool },
}

/// Reads one answer, fed as its bytes arrive (never more than it needs kept: a 1 MiB body is
/// counted, not stored).
pub trait Reader: Send {
    fn feed(&mut self, data: &[u8]) -> Result<Feed, String>;
}

/// A service's client side: where to connect from and to, a request's bytes, its answer's reader.
pub trait Protocol: Sync {
    type Reader: Reader;
    /// (the client's own address, the server's).
    fn addrs(&self) -> (SocketAddr, SocketAddr);
    /// One request (a pipeline of several, for a protocol that pipelines).
    fn request(&self) -> &[u8];
    fn reader(&self) -> Self::Reader;
    /// Requests the [`Protocol::request`] holds (its pipeline's depth): what a latency sample
    /// and the rates count.
    fn per_request(&self) -> u64 {
        1
    }
    /// Whether a connection is kept for the next request.
    fn keepalive(&self) -> bool {
        true
    }
}

/// What a phase offers.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub connections: usize,
    pub duration: Duration,
    /// Requests per second offered over all connections; None: a closed loop.
    pub rate: Option<f64>,
}

/// What a phase achieved.
pub struct Tally {
    /// Requests answered (correctly).
    pub requests: u64,
    /// Requests that failed, connections that could not be made.
    pub errors: u64,
    /// Open loop: requests scheduled before the phase's end but never sent.
    pub backlog: u64,
    /// The phase's span: from its start to the last answer (at least the duration).
    pub secs: f64,
    /// Latency of each answered request, ns: from its scheduled send (open) or its send (closed).
    pub hist: Histogram<u64>,
    pub offered: Option<f64>,
    pub first_errors: Vec<String>,
    /// The event-loop threads the connections were spread over.
    pub threads: usize,
}

impl Tally {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.secs.max(1e-9)
    }
    /// True when an open loop achieved [`CARRIED`] of its offered rate (a closed loop always has).
    pub fn carried(&self) -> bool {
        self.offered.is_none_or(|r| self.rate() >= CARRIED * r)
    }
    /// The latency histogram as sparse `(µs, count)` buckets (the form reports merge).
    pub fn histogram_us(&self) -> Value {
        let b: Vec<(f64, u64)> = self
            .hist
            .iter_recorded()
            .map(|v| (v.value_iterated_to() as f64 / 1e3, v.count_at_value()))
            .collect();
        json!(b)
    }
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e3
    }
    /// The phase as stored with the trial.
    pub fn detail(&self) -> Value {
        json!({
            "requests": self.requests,
            "errors": self.errors,
            "backlog": self.backlog,
            "secs": self.secs,
            "rate": self.rate(),
            "offered": self.offered,
            "carried": self.carried(),
            "threads": self.threads,
            "first_errors": self.first_errors,
            "histogram_us": self.histogram_us(),
        })
    }
}

pub fn new_histogram() -> Result<Histogram<u64>, AppError> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| AppError::Protocol(format!("histogram: {e}")))
}

/// Timer slack of 1 ns for the calling thread, so an open loop's waits end when asked (the
/// default 50 µs would bunch the sends).
fn tight_timer() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) on the calling thread; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// The event-loop threads for `connections`: one per CPU this process may run on (the reference
/// tools' `-t`/`--threads` follow the same rule).
pub fn threads_for(connections: usize) -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(connections).max(1)
}

/// Runs one phase: the connections spread over the threads from a common start; every wait
/// bounded by the phase's end and [`ANSWER_WITHIN`].
pub fn drive<P: Protocol>(proto: &P, phase: Phase, ctx: &RunCtx) -> Result<Tally, AppError> {
    let n = phase.connections.max(1);
    let threads = threads_for(n);
    // Each connection's share of the offered rate; its first send staggered by its index so the
    // connections do not send in bursts.
    // The rate counts requests, an exchange carries `per_request` of them (a pipeline).
    let per = proto.per_request().max(1) as f64;
    let interval = phase.rate.map(|r| Duration::from_secs_f64(n as f64 * per / r.max(1e-3)));
    let start = Instant::now() + Duration::from_millis(5);
    let end = start + phase.duration;
    let lanes: Vec<Result<Lane, AppError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Connection i goes to thread i % threads.
                let mine: Vec<usize> = (t..n).step_by(threads).collect();
                s.spawn(move || {
                    let _cpu = ctx.thread_cpu();
                    tight_timer();
                    let paced: Vec<Option<(Duration, Duration)>> = mine
                        .iter()
                        .map(|i| interval.map(|iv| (iv, iv.mul_f64(*i as f64 / n as f64))))
                        .collect();
                    event_loop(proto, start, end, &paced, ctx)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Err(AppError::Panicked("client")))).collect()
    });
    let mut t = Tally {
        requests: 0,
        errors: 0,
        backlog: 0,
        secs: 0.0,
        hist: new_histogram()?,
        offered: phase.rate,
        first_errors: Vec::new(),
        threads,
    };
    let mut last = end;
    for l in lanes {
        let l = l?;
        t.requests += l.requests;
        t.errors += l.errors;
        t.backlog += l.backlog;
        last = last.max(l.last);
        t.hist.add(&l.hist).map_err(|e| AppError::Protocol(format!("histogram: {e}")))?;
        for e in l.errs {
            if t.first_errors.len() < KEEP_ERRORS && !t.first_errors.contains(&e) {
                t.first_errors.push(e);
            }
        }
    }
    t.secs = last.duration_since(start).as_secs_f64();
    if t.requests == 0 && t.errors > 0 {
        return Err(AppError::NoConnection(t.first_errors.join("; ")));
    }
    if ctx.stopped() {
        return Err(AppError::Stopped);
    }
    Ok(t)
}

/// One thread's share of a phase.
struct Lane {
    requests: u64,
    errors: u64,
    backlog: u64,
    last: Instant,
    hist: Histogram<u64>,
    errs: Vec<String>,
}

impl Lane {
    fn fail(&mut self, e: String) {
        self.errors += 1;
        if self.errs.len() < KEEP_ERRORS && !self.errs.contains(&e) {
            self.errs.push(e);
        }
    }
}

enum State<R> {
    /// No socket: made again from `at` on (a failure's backoff, or a connection per request).
    Down { at: Instant },
    /// Connecting since `since`; the request goes once it is connected.
    Connecting { stream: TcpStream, since: Instant },
    /// Connected, nothing in flight.
    Idle { stream: TcpStream },
    /// A request in flight since `sent`: `wrote` of its bytes written, its answer read so far.
    Busy { stream: TcpStream, wrote: usize, reader: R, sent: Instant },
}

struct Conn<R> {
    state: State<R>,
    /// Open loop: (interval, offset); `k` is the next request's index.
    paced: Option<(Duration, Duration)>,
    k: u64,
    /// The latency's origin of the request in flight: when it was due (open) or sent (closed).
    origin: Instant,
}

impl<R> Conn<R> {
    /// When the next request is due: its schedule (open), now (closed).
    fn due(&self, start: Instant, now: Instant) -> Instant {
        self.paced.map_or(now, |(iv, off)| start + off + iv.mul_f64(self.k as f64))
    }
}

/// Opens a non-blocking connection from `from` to `to` (the connect completes later).
fn open(from: SocketAddr, to: SocketAddr) -> Result<TcpStream, String> {
    use socket2::{Domain, Protocol as P, SockAddr, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(P::TCP)).map_err(|e| format!("socket: {e}"))?;
    s.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
    s.bind(&SockAddr::from(SocketAddr::new(from.ip(), 0))).map_err(|e| format!("bind {}: {e}", from.ip()))?;
    s.set_nonblocking(true).map_err(|e| format!("O_NONBLOCK: {e}"))?;
    match s.connect(&SockAddr::from(to)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(format!("connect {to}: {e}")),
    }
    Ok(TcpStream::from_std(s.into()))
}

/// Writes what is left of `req`; Ok(true) once all of it is written.
fn write_some(stream: &mut TcpStream, req: &[u8], wrote: &mut usize) -> Result<bool, String> {
    while *wrote < req.len() {
        match stream.write(&req[*wrote..]) {
            Ok(0) => return Err("the connection closed while sending".into()),
            Ok(n) => *wrote += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("sending the request: {e}")),
        }
    }
    Ok(true)
}

/// Reads what has arrived into `reader`: Ok(Some(close)) once the answer is whole.
fn read_some<R: Reader>(
    stream: &mut TcpStream,
    reader: &mut R,
    buf: &mut [u8],
) -> Result<Option<bool>, String> {
    loop {
        match stream.read(buf) {
            Ok(0) => return Err("the connection closed before the whole answer".into()),
            Ok(n) => match reader.feed(&buf[..n])? {
                Feed::More => {}
                Feed::Done { used, close } => {
                    if used < n {
                        return Err(format!("{} bytes came after the answer, unasked", n - used));
                    }
                    return Ok(Some(close));
                }
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the answer: {e}")),
        }
    }
}

/// A CLOCK_MONOTONIC timer as a file descriptor: the event loop's wake-up at a nanosecond's
/// precision (epoll's own timeout is in milliseconds, which would make an open loop's sends up to
/// a millisecond late, and that lateness would be charged to the server).
struct Timer {
    fd: std::os::fd::OwnedFd,
    /// CLOCK_MONOTONIC at `base`: Instants become the timer's absolute times.
    base: (Instant, u64),
}

impl Timer {
    fn new() -> Result<Timer, AppError> {
        // SAFETY: timerfd_create takes no pointers; its result is checked before use.
        let fd =
            unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(crate::error::OsError::last("timerfd_create").into());
        }
        // SAFETY: `fd` was just returned by timerfd_create and is owned by nothing else.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(Timer { fd, base: (Instant::now(), crate::workload::now_ns()) })
    }
    fn raw(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }
    /// Fires at `t` (at once if `t` has passed).
    fn set(&self, t: Instant) {
        let ns = self.base.1 + t.saturating_duration_since(self.base.0).as_nanos() as u64;
        let ns = ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: a valid timerfd and an itimerspec on this stack frame; the old value not asked.
        unsafe { libc::timerfd_settime(self.raw(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    }
    /// Consumes the expirations so far (the fd is edge-triggered under mio).
    fn drain(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into `n`, which is 8 bytes long; a non-blocking fd.
        unsafe { libc::read(self.raw(), (&mut n as *mut u64).cast(), 8) };
    }
}

const TIMER: Token = Token(usize::MAX);

/// One thread's connections until the phase's end, and their answers in flight then (each
/// within [`ANSWER_WITHIN`]).
fn event_loop<P: Protocol>(
    proto: &P,
    start: Instant,
    end: Instant,
    paced: &[Option<(Duration, Duration)>],
    ctx: &RunCtx,
) -> Result<Lane, AppError> {
    let os = |what: &'static str| move |e: std::io::Error| AppError::Os(crate::error::OsError::new(what, e));
    let mut l =
        Lane { requests: 0, errors: 0, backlog: 0, last: start, hist: new_histogram()?, errs: Vec::new() };
    let mut poll = Poll::new().map_err(os("epoll_create"))?;
    let timer = Timer::new()?;
    poll.registry()
        .register(&mut mio::unix::SourceFd(&timer.raw()), TIMER, Interest::READABLE)
        .map_err(os("epoll_ctl"))?;
    let mut events = Events::with_capacity(256);
    let mut buf = vec![0u8; 64 << 10];
    let (from, to) = proto.addrs();
    let req = proto.request();
    let per = proto.per_request();
    // Connections kept alive are made before the start (`Down` until `start - 5 ms` otherwise),
    // so the phase measures requests, not connects.
    let first = if proto.keepalive() { Instant::now() } else { start };
    let mut conns: Vec<Conn<P::Reader>> = paced
        .iter()
        .map(|p| Conn { state: State::Down { at: first }, paced: *p, k: 0, origin: start })
        .collect();
    let mut ending = false;
    loop {
        let now = Instant::now();
        if !ending && (now >= end || ctx.stopped()) {
            ending = true;
            // What each connection had due before the end and never sent.
            for c in &conns {
                if let Some((iv, off)) = c.paced {
                    let span = end.saturating_duration_since(start + off).as_secs_f64();
                    let due_total = (span / iv.as_secs_f64()).ceil() as u64;
                    l.backlog += due_total.saturating_sub(c.k) * per;
                }
            }
        }
        if ending && !conns.iter().any(|c| matches!(c.state, State::Busy { .. })) {
            break;
        }
        let mut wake = if ending { end + ANSWER_WITHIN } else { end };
        for (i, c) in conns.iter_mut().enumerate() {
            let due = c.due(start, now);
            let state = std::mem::replace(&mut c.state, State::Down { at: now });
            c.state = match state {
                State::Idle { stream } if ending => State::Idle { stream },
                State::Idle { mut stream } if now >= start && due <= now => {
                    c.origin = if c.paced.is_some() { due } else { now };
                    c.k += 1;
                    let mut wrote = 0;
                    match write_some(&mut stream, req, &mut wrote) {
                        Ok(_) => State::Busy { stream, wrote, reader: proto.reader(), sent: now },
                        Err(e) => {
                            l.fail(e);
                            let _ = poll.registry().deregister(&mut stream);
                            State::Down { at: now + BACKOFF }
                        }
                    }
                }
                State::Idle { stream } => {
                    wake = wake.min(due.max(start));
                    State::Idle { stream }
                }
                // A connection is made when its next request is about due (keep-alive ones at once).
                State::Down { at } if !ending && at <= now && (proto.keepalive() || due <= now) => {
                    match open(from, to).and_then(|mut s| {
                        poll.registry()
                            .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
                            .map(|_| s)
                            .map_err(|e| format!("epoll_ctl: {e}"))
                    }) {
                        Ok(stream) => State::Connecting { stream, since: now },
                        Err(e) => {
                            l.fail(e);
                            State::Down { at: now + BACKOFF }
                        }
                    }
                }
                State::Down { at } => {
                    if !ending {
                        wake = wake.min(if proto.keepalive() { at } else { at.max(due) });
                    }
                    State::Down { at }
                }
                State::Connecting { mut stream, since }
                    if now.saturating_duration_since(since) > ANSWER_WITHIN =>
                {
                    l.fail(format!("connect {to}: no answer within {} s", ANSWER_WITHIN.as_secs()));
                    let _ = poll.registry().deregister(&mut stream);
                    State::Down { at: now + BACKOFF }
                }
                State::Busy { mut stream, sent, .. }
                    if now.saturating_duration_since(sent) > ANSWER_WITHIN =>
                {
                    l.fail(format!("no answer within {} s", ANSWER_WITHIN.as_secs()));
                    let _ = poll.registry().deregister(&mut stream);
                    State::Down { at: now + BACKOFF }
                }
                s @ State::Connecting { .. } => {
                    wake = wake.min(now + ANSWER_WITHIN);
                    s
                }
                s @ State::Busy { sent, .. } => {
                    wake = wake.min(sent + ANSWER_WITHIN + Duration::from_millis(1));
                    s
                }
            };
        }
        timer.set(wake);
        if let Err(e) = poll.poll(&mut events, Some(ANSWER_WITHIN)) {
            if e.kind() != ErrorKind::Interrupted {
                return Err(os("epoll_wait")(e));
            }
        }
        for ev in events.iter() {
            if ev.token() == TIMER {
                timer.drain();
                continue;
            }
            let Some(c) = conns.get_mut(ev.token().0) else { continue };
            let state = std::mem::replace(&mut c.state, State::Down { at: now });
            let next = match state {
                State::Connecting { stream, since } => match stream.take_error() {
                    Ok(Some(e)) | Err(e) => Err((stream, format!("connect {to}: {e}"))),
                    Ok(None) => match stream.peer_addr() {
                        Ok(_) => Ok(State::Idle { stream }),
                        Err(e) if e.kind() == ErrorKind::NotConnected => {
                            Ok(State::Connecting { stream, since })
                        }
                        Err(e) => Err((stream, format!("connect {to}: {e}"))),
                    },
                },
                State::Busy { mut stream, mut wrote, mut reader, sent } => {
                    let r = write_some(&mut stream, req, &mut wrote).and_then(|all| {
                        if all {
                            read_some(&mut stream, &mut reader, &mut buf)
                        } else {
                            Ok(None)
                        }
                    });
                    match r {
                        Ok(Some(close)) => {
                            let done = Instant::now();
                            l.requests += per;
                            l.last = done;
                            let ns = done.saturating_duration_since(c.origin).as_nanos().max(1) as u64;
                            l.hist.saturating_record(ns);
                            if close || !proto.keepalive() {
                                let _ = poll.registry().deregister(&mut stream);
                                Ok(State::Down { at: done })
                            } else if c.paced.is_none() && !ending && done < end {
                                // A closed loop asks again at once, as wrk does (not after the
                                // other connections' answers of this wake-up: that would batch
                                // the server's work and flatter it).
                                c.origin = done;
                                c.k += 1;
                                let mut wrote = 0;
                                match write_some(&mut stream, req, &mut wrote) {
                                    Ok(_) => {
                                        Ok(State::Busy { stream, wrote, reader: proto.reader(), sent: done })
                                    }
                                    Err(e) => Err((stream, e)),
                                }
                            } else {
                                Ok(State::Idle { stream })
                            }
                        }
                        Ok(None) => Ok(State::Busy { stream, wrote, reader, sent }),
                        Err(e) => Err((stream, e)),
                    }
                }
                s => Ok(s),
            };
            c.state = match next {
                Ok(s) => s,
                Err((mut stream, e)) => {
                    l.fail(e);
                    let _ = poll.registry().deregister(&mut stream);
                    State::Down { at: Instant::now() + BACKOFF }
                }
            };
        }
    }
    Ok(l)
}

/// One request on a connection of its own, blocking, each step within [`ANSWER_WITHIN`]: a
/// server's readiness probe (its port answers a real request).
pub fn once<P: Protocol>(proto: &P) -> Result<(), String> {
    use socket2::{Domain, Protocol as SP, SockAddr, Socket, Type};
    let (from, to) = proto.addrs();
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(SP::TCP)).map_err(|e| format!("socket: {e}"))?;
    s.bind(&SockAddr::from(SocketAddr::new(from.ip(), 0))).map_err(|e| format!("bind {}: {e}", from.ip()))?;
    s.connect_timeout(&SockAddr::from(to), ANSWER_WITHIN).map_err(|e| format!("connect {to}: {e}"))?;
    let mut s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
    s.set_write_timeout(Some(ANSWER_WITHIN)).map_err(|e| format!("SO_SNDTIMEO: {e}"))?;
    s.write_all(proto.request()).map_err(|e| format!("sending the request: {e}"))?;
    let mut reader = proto.reader();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = s.read(&mut buf).map_err(|e| format!("reading the answer: {e}"))?;
        if n == 0 {
            return Err("the connection closed before the whole answer".into());
        }
        if let Feed::Done { .. } = reader.feed(&buf[..n])? {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A server answering each 4-byte request with 4 bytes after `ns` of work, one request at a
    /// time over all its connections (a single-threaded server).
    struct Toy {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
    }

    impl Drop for Toy {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    fn toy(ns: u64) -> Toy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(std::sync::Mutex::new(()));
        let st = stop.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut s) = s else { return };
                let busy = busy.clone();
                std::thread::spawn(move || {
                    let mut b = [0u8; 4];
                    while s.read_exact(&mut b).is_ok() {
                        {
                            let _g = busy.lock().unwrap();
                            let t = Instant::now() + Duration::from_nanos(ns);
                            while Instant::now() < t {
                                std::hint::spin_loop();
                            }
                        }
                        if s.write_all(b"pong").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Toy { addr, stop }
    }

    struct Ping(SocketAddr);
    struct Four(usize);
    impl Reader for Four {
        fn feed(&mut self, d: &[u8]) -> Result<Feed, String> {
            let used = d.len().min(4 - self.0);
            self.0 += used;
            Ok(if self.0 == 4 { Feed::Done { used, close: false } } else { Feed::More })
        }
    }
    impl Protocol for Ping {
        type Reader = Four;
        fn addrs(&self) -> (SocketAddr, SocketAddr) {
            ("127.0.0.1:0".parse().unwrap(), self.0)
        }
        fn request(&self) -> &[u8] {
            b"ping"
        }
        fn reader(&self) -> Four {
            Four(0)
        }
    }

    #[test]
    fn an_open_loop_offers_its_rate_and_carries_what_the_server_can() {
        let _g = crate::workload::cpu_heavy();
        // 50 µs a request: 20 000/s at most; 2 000/s offered is carried.
        let s = toy(50_000);
        let ph = Phase { connections: 4, duration: Duration::from_millis(500), rate: Some(2000.0) };
        let t = drive(&Ping(s.addr), ph, &RunCtx::detached()).unwrap();
        let r = t.rate();
        assert!((r - 2000.0).abs() < 200.0, "achieved {r}/s of 2000 offered");
        assert!(t.carried());
        assert_eq!(t.backlog, 0);
        assert_eq!(t.errors, 0);
        // A latency of the order of the service time, not of the interval (2 ms per connection).
        assert!(t.quantile_us(0.5) < 1000.0, "p50 {} us", t.quantile_us(0.5));
    }

    #[test]
    fn an_open_loop_beyond_capacity_says_it_was_not_carried_and_counts_the_backlog() {
        let _g = crate::workload::cpu_heavy();
        // 2 ms a request: 500/s at most; 2 000/s offered cannot be carried.
        let s = toy(2_000_000);
        let ph = Phase { connections: 2, duration: Duration::from_millis(400), rate: Some(2000.0) };
        let t = drive(&Ping(s.addr), ph, &RunCtx::detached()).unwrap();
        assert!(!t.carried(), "rate {}", t.rate());
        // ~800 due, ~200 served: the rest is backlog.
        assert!(t.backlog > 400, "backlog {}", t.backlog);
        // Latency from the schedule: the last requests waited most of the phase.
        assert!(t.quantile_us(0.99) > 100_000.0, "p99 {} us", t.quantile_us(0.99));
    }

    #[test]
    fn a_closed_loop_runs_as_fast_as_the_server_answers() {
        let _g = crate::workload::cpu_heavy();
        let s = toy(200_000);
        let ph = Phase { connections: 3, duration: Duration::from_millis(300), rate: None };
        let t = drive(&Ping(s.addr), ph, &RunCtx::detached()).unwrap();
        // One request at a time at 200 µs: ~5 000/s whatever the connections.
        let r = t.rate();
        assert!(r > 2500.0 && r < 5500.0, "capacity {r}/s against 5000 possible");
        assert!(t.carried());
        assert!(once(&Ping(s.addr)).is_ok());
    }

    #[test]
    fn a_server_that_refuses_every_connection_is_an_error_not_a_zero() {
        // A port nothing listens on: bound, then closed.
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let ph = Phase { connections: 2, duration: Duration::from_millis(100), rate: None };
        let e = drive(&Ping(addr), ph, &RunCtx::detached()).err().unwrap();
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(once(&Ping(addr)).is_err());
    }
}
