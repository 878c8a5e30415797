//! `tcp_stream`: bulk TCP over parallel connections, goodput at the receiver.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream as StdTcpStream};
use std::time::{Duration, Instant};

use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

use super::common::*;
use super::series;
use super::sock::*;

pub(crate) fn check_window(p: &Params) -> Result<(), ParamError> {
    if let (Some(w), Some(max)) = (p.opt_u64("window"), max_socket_buffer()) {
        if w > max {
            return Err(ParamError::new(
                "window",
                format!(
                    "{w} bytes is more than the kernel allows ({max}, net.core.rmem_max/wmem_max); raise them with sysctl or ask for less"
                ),
            ));
        }
    }
    Ok(())
}

/// Runs `f` on every connection at once: the first on the calling thread, the others on threads
/// of their own (one stream, the default, needs no thread). Results come back in connection order.
pub(crate) fn on_each<C: Send, R: Send>(ctx: &RunCtx, conns: Vec<C>, f: impl Fn(C) -> R + Sync) -> Vec<R> {
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

/// Reads one stream to its end, adding what it reads to `count` (the flow's, sampled over time);
/// returns (first byte, last byte) on CLOCK_MONOTONIC, and its bytes, or None if nothing came.
pub(crate) fn receive_stream(
    mut c: StdTcpStream,
    ctx: &RunCtx,
    until: Instant,
    count: &std::sync::atomic::AtomicU64,
) -> Option<(u64, u64, u64)> {
    let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = PageBuf::new(128 * 1024, 0);
    let buf = buf.as_mut();
    let (mut first, mut last, mut bytes) = (None, 0u64, 0u64);
    loop {
        match c.read(buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = crate::workload::now_ns();
                first.get_or_insert(now);
                last = now;
                bytes += n as u64;
                count.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
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

/// The bytes the peers of `conns` have acknowledged, sampled over time on the sender's clock (the
/// receiver's count as the sender sees it: for the tester's side of a flow, the host's clock).
/// Duplicated descriptors: the sampler reads its own, whatever happens to the streams. None where
/// the kernel does not count acknowledged bytes.
pub(crate) fn acked_sampler(conns: &[StdTcpStream]) -> Option<(series::Sampler, Vec<StdTcpStream>, u64)> {
    let dups: Vec<StdTcpStream> = conns.iter().map(|c| c.try_clone()).collect::<Result<_, _>>().ok()?;
    let acked = |d: &[StdTcpStream]| d.iter().map(|c| tcp_bytes_acked(c).unwrap_or(0)).sum::<u64>();
    let base = acked(&dups);
    let mine: Vec<StdTcpStream> = dups.iter().map(|c| c.try_clone()).collect::<Result<_, _>>().ok()?;
    let sampler = series::Sampler::start(move || acked(&mine).saturating_sub(base));
    Some((sampler, dups, base))
}

/// Writes `msg` over and over until `end`, then waits for the receiver to close so that every
/// byte is acknowledged; returns (bytes sent, retransmitted segments).
pub(crate) fn send_stream(mut c: StdTcpStream, msg: &[u8], end: Instant, ctx: &RunCtx) -> (u64, Option<u64>) {
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
    fn warmup_scales(&self) -> Option<&'static str> {
        Some("duration")
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Network
    }
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
    fn streams(&self) -> bool {
        true
    }
    fn link_bound(&self, _p: &Params) -> Option<(&'static str, crate::workload::LinkBound)> {
        Some(("tcp_goodput", crate::workload::LinkBound::TcpGoodput))
    }
    fn aggregation(&self, metric: &str, _p: &Params) -> crate::workload::Aggregation {
        match metric {
            // Bytes received (or acknowledged, on the tester's side) added over one window.
            "tcp_goodput" => crate::workload::Aggregation::Window { series: "bytes", scale: 8.0 / 1e9 },
            _ => crate::workload::Aggregation::Sum,
        }
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        check_window(p)
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let streams = p.u64("streams")? as usize;
        let window = p.opt_u64("window");
        match role.side {
            virtperf_proto::Side::Server => {
                let l = tcp_listener(role, window)?;
                ctx.ready();
                let until = Instant::now() + dur + GRACE;
                let peer: IpAddr = role.peer.parse().map_err(|_| NetError::BadAddress(role.peer.clone()))?;
                let mut foreign = 0;
                let mut conns = Vec::new();
                for _ in 0..streams {
                    conns.push(accept_from(&l, peer, until, ctx, &mut foreign)?);
                }
                let count = series::counter();
                let sampler = {
                    let c = count.clone();
                    // What crossed the wire by now: the kernel's count of the bytes each
                    // connection received, read or still queued, never less than what the threads
                    // have read. The threads' own count lags the wire by what waits in the socket
                    // while a receiver is descheduled: beside a CPU hog two flows' bytes over
                    // their common window came to 1.6 % above a 1 Gbit/s wire's ceiling.
                    let dups: Vec<StdTcpStream> = conns.iter().filter_map(|s| s.try_clone().ok()).collect();
                    series::Sampler::start(move || {
                        let read = c.load(std::sync::atomic::Ordering::Relaxed);
                        let arrived: u64 = dups.iter().map(|s| tcp_bytes_received(s).unwrap_or(0)).sum();
                        read.max(arrived)
                    })
                };
                let v: Vec<(u64, u64, u64)> = on_each(ctx, conns, |c| receive_stream(c, ctx, until, &count))
                    .into_iter()
                    .flatten()
                    .collect();
                let first = v.iter().map(|x| x.0).min().ok_or(NetError::NoData)?;
                let last = v.iter().map(|x| x.1).max().ok_or(NetError::NoData)?;
                let bytes: u64 = v.iter().map(|x| x.2).sum();
                let secs = ((last - first) as f64 / 1e9).max(1e-6);
                let bytes_series = sampler.finish([first, 0], [last, bytes]);
                Ok(Output {
                    samples: vec![sample("tcp_goodput", bytes as f64 * 8.0 / secs / 1e9, "Gbit/s")],
                    extra: serde_json::json!({
                        "bytes": bytes, "seconds": secs, "foreign_connections": foreign,
                        "series": {"bytes": bytes_series},
                    }),
                })
            }
            virtperf_proto::Side::Client => {
                let msg = PageBuf::new(p.u64("message")? as usize, 0x5a);
                let mut conns = Vec::new();
                for _ in 0..streams {
                    conns.push(tcp_connect(role, window, false)?);
                }
                let acked = acked_sampler(&conns);
                let start_ns = crate::workload::now_ns();
                let t0 = Instant::now();
                let r = on_each(ctx, conns, |c| send_stream(c, msg.as_ref(), t0 + dur, ctx));
                let end_ns = crate::workload::now_ns();
                let sent: u64 = r.iter().map(|x| x.0).sum();
                let retrans: u64 = r.iter().filter_map(|x| x.1).sum();
                let mut extra = serde_json::json!({"bytes_sent": sent});
                // What the receiver got, on this side's clock: the acknowledged bytes over time.
                if let Some((sampler, dups, base)) = acked {
                    let total = dups
                        .iter()
                        .map(|c| tcp_bytes_acked(c).unwrap_or(0))
                        .sum::<u64>()
                        .saturating_sub(base);
                    if total > 0 {
                        extra["series"] =
                            serde_json::json!({"bytes": sampler.finish([start_ns, 0], [end_ns, total])});
                    }
                }
                Ok(Output { samples: vec![sample("tcp_retransmits", retrans as f64, "segments")], extra })
            }
        }
    }
}
