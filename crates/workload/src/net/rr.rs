//! `tcp_rr` and `udp_rr`: request/response round trips, latency histograms.

use std::io::{Read, Write};
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::params::{ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

use super::common::*;
use super::series;
use super::sock::*;
use super::udp::*;

/// Latency histogram of request/response transactions (ns, 3 significant digits).
pub(crate) fn rr_samples(
    prefix: &str,
    h: &hdrhistogram::Histogram<u64>,
    secs: f64,
    extra: serde_json::Value,
) -> Output {
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

/// How N instances' request/response figures add up: transactions over one window, latencies
/// from the pooled histograms (the client's side of each flow holds its histogram).
pub(crate) fn rr_aggregation(metric: &str) -> crate::workload::Aggregation {
    if metric.ends_with("_rate") {
        crate::workload::Aggregation::Window { series: "transactions", scale: 1.0 }
    } else if metric.ends_with("_timeouts") || metric.ends_with("_waits") {
        crate::workload::Aggregation::Sum
    } else {
        crate::workload::Aggregation::Pooled
    }
}

pub(crate) fn rr_pooled(metric: &str, details: &[&serde_json::Value]) -> Option<f64> {
    let h =
        crate::workload::merged_histogram(details, |d| d.get("client").and_then(|c| c.get("histogram_us")))?;
    let q = match metric.rsplit('_').next()? {
        "latency" => return Some(crate::workload::histogram_mean(&h)),
        "p50" => 0.5,
        "p90" => 0.9,
        "p99" => 0.99,
        "p999" => 0.999,
        _ => return None,
    };
    Some(crate::workload::histogram_quantile(&h, q))
}

pub(crate) fn rr_metrics(prefix: &'static str) -> &'static [MetricSpec] {
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
            MetricSpec {
                name: "tcp_rr_waits",
                unit: "trans",
                better: Better::Lower,
                help: "transactions that took 50 ms or more: a lost or unread segment waited for its retransmission",
            },
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

pub(crate) const RR_PARAMS: &[ParamSpec] = &[
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

/// A transaction this long waited for a retransmission: TCP retransmits after 200 ms at the
/// earliest (a tail-loss probe with one segment in flight, the same), where a scheduling delay on a
/// busy host is milliseconds. UML's `tap` transport made two such waits a 500 ms trial
/// (docs/environments/uml.md).
pub(crate) const WAIT: Duration = Duration::from_millis(50);

/// TCP request/response (netperf TCP_RR): one connection, one transaction in flight.
pub struct TcpRr;

impl Workload for TcpRr {
    fn warmup_scales(&self) -> Option<&'static str> {
        Some("duration")
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Network
    }
    fn kind(&self) -> &'static str {
        "tcp_rr"
    }
    fn summary(&self) -> &'static str {
        "TCP request/response on one connection (TCP_NODELAY): transactions/s and latency percentiles"
    }
    fn params(&self) -> &'static [ParamSpec] {
        RR_PARAMS
    }
    fn headline_metrics(&self) -> usize {
        // The rate and the mean round trip: percentiles are tails.
        2
    }
    fn aggregation(&self, metric: &str, _p: &Params) -> crate::workload::Aggregation {
        rr_aggregation(metric)
    }
    fn pooled(&self, metric: &str, details: &[&serde_json::Value]) -> Option<f64> {
        rr_pooled(metric, details)
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
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let (req, resp) = (p.u64("request")? as usize, p.u64("response")? as usize);
        match role.side {
            virtperf_proto::Side::Server => {
                let l = tcp_listener(role, None)?;
                ctx.ready();
                let peer: IpAddr = role.peer.parse().map_err(|_| NetError::BadAddress(role.peer.clone()))?;
                let mut foreign = 0;
                let mut c = accept_from(&l, peer, Instant::now() + dur + GRACE, ctx, &mut foreign)?;
                c.set_nodelay(true).map_err(sock_err("TCP_NODELAY"))?;
                c.set_read_timeout(Some(Duration::from_millis(200))).map_err(sock_err("SO_RCVTIMEO"))?;
                let (mut inb, out) = (vec![0u8; req], vec![0x33u8; resp]);
                let mut served = 0u64;
                let done = series::counter();
                let sampler = {
                    let d = done.clone();
                    series::Sampler::start(move || d.load(std::sync::atomic::Ordering::Relaxed))
                };
                let (mut first_ns, mut last_ns) = (0u64, 0u64);
                loop {
                    match c.read_exact(&mut inb) {
                        Ok(()) => {
                            if c.write_all(&out).is_err() {
                                break;
                            }
                            last_ns = crate::workload::now_ns();
                            if served == 0 {
                                first_ns = last_ns;
                            }
                            served += 1;
                            done.store(served, std::sync::atomic::Ordering::Relaxed);
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
                let mut extra = serde_json::json!({"served": served, "foreign_connections": foreign});
                if served > 0 {
                    extra["series"] =
                        serde_json::json!({"transactions": sampler.finish([first_ns, 0], [last_ns, served])});
                }
                Ok(Output { samples: Vec::new(), extra })
            }
            virtperf_proto::Side::Client => {
                let mut c = tcp_connect(role, None, true)?;
                c.set_read_timeout(Some(Duration::from_secs(5))).map_err(sock_err("SO_RCVTIMEO"))?;
                let (out, mut inb) = (vec![0x11u8; req], vec![0u8; resp]);
                let mut h = new_histogram()?;
                let done = series::counter();
                let sampler = {
                    let d = done.clone();
                    series::Sampler::start(move || d.load(std::sync::atomic::Ordering::Relaxed))
                };
                let start_ns = crate::workload::now_ns();
                let t0 = Instant::now();
                while t0.elapsed() < dur && !ctx.stopped() {
                    let t = Instant::now();
                    c.write_all(&out).map_err(sock_err("write"))?;
                    c.read_exact(&mut inb).map_err(sock_err("read"))?;
                    let _ = h.record((t.elapsed().as_nanos() as u64).max(1));
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let secs = t0.elapsed().as_secs_f64();
                let series = sampler.finish([start_ns, 0], [crate::workload::now_ns(), h.len()]);
                let _ = c.shutdown(std::net::Shutdown::Both);
                let waits = h.count_between(WAIT.as_nanos() as u64, u64::MAX);
                let mut o =
                    rr_samples("tcp_rr", &h, secs, serde_json::json!({"series": {"transactions": series}}));
                o.samples.push(sample("tcp_rr_waits", waits as f64, "trans"));
                Ok(o)
            }
        }
    }
}

/// UDP request/response: a lost request or response is a timeout, counted, not retried.
pub struct UdpRr;

pub(crate) const UDP_RR_TIMEOUT: Duration = Duration::from_millis(100);

impl Workload for UdpRr {
    fn warmup_scales(&self) -> Option<&'static str> {
        Some("duration")
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Network
    }
    fn kind(&self) -> &'static str {
        "udp_rr"
    }
    fn summary(&self) -> &'static str {
        "UDP request/response, one in flight; a lost transaction times out after 100 ms and is counted"
    }
    fn params(&self) -> &'static [ParamSpec] {
        RR_PARAMS
    }
    fn headline_metrics(&self) -> usize {
        // The rate and the mean round trip: percentiles are tails.
        2
    }
    fn aggregation(&self, metric: &str, _p: &Params) -> crate::workload::Aggregation {
        rr_aggregation(metric)
    }
    fn pooled(&self, metric: &str, details: &[&serde_json::Value]) -> Option<f64> {
        rr_pooled(metric, details)
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
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let (req, resp) = ((p.u64("request")? as usize).max(HDR), (p.u64("response")? as usize).max(HDR));
        match role.side {
            virtperf_proto::Side::Server => {
                let s = UdpSocket::bind(addr(&role.bind, role.port)?).map_err(sock_err("bind"))?;
                s.set_read_timeout(Some(Duration::from_millis(100))).map_err(sock_err("SO_RCVTIMEO"))?;
                let peer: IpAddr = role.peer.parse().map_err(|_| NetError::BadAddress(role.peer.clone()))?;
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
                let s = UdpSocket::bind(addr(&role.bind, 0)?).map_err(sock_err("bind"))?;
                s.connect(addr(&role.peer, role.port)?).map_err(sock_err("connect"))?;
                s.set_read_timeout(Some(UDP_RR_TIMEOUT)).map_err(sock_err("SO_RCVTIMEO"))?;
                let (mut out, mut inb) = (vec![0x11u8; req], vec![0u8; resp + 64]);
                let mut h = new_histogram()?;
                let (mut seq, mut timeouts) = (0u64, 0u64);
                let done = series::counter();
                let sampler = {
                    let d = done.clone();
                    series::Sampler::start(move || d.load(std::sync::atomic::Ordering::Relaxed))
                };
                let start_ns = crate::workload::now_ns();
                let t0 = Instant::now();
                while t0.elapsed() < dur && !ctx.stopped() {
                    seq += 1;
                    stamp(&mut out, role.flow, seq);
                    let t = Instant::now();
                    s.send(&out).map_err(sock_err("send"))?;
                    loop {
                        match s.recv(&mut inb) {
                            Ok(n) if parse(&inb[..n], role.flow) == Some(seq) => {
                                let _ = h.record((t.elapsed().as_nanos() as u64).max(1));
                                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
                let series = sampler.finish([start_ns, 0], [crate::workload::now_ns(), h.len()]);
                let mut fin = vec![0u8; HDR];
                stamp(&mut fin, role.flow, FIN_SEQ);
                let _ = s.send(&fin);
                let mut o =
                    rr_samples("udp_rr", &h, secs, serde_json::json!({"series": {"transactions": series}}));
                o.samples.push(sample("udp_rr_timeouts", timeouts as f64, "trans"));
                Ok(o)
            }
        }
    }
}
