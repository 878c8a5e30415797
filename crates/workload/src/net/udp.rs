//! `udp_stream`: UDP datagrams at a frame size, unlimited or paced; loss by sequence number.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use virtperf_proto::Sample;

use crate::params::{ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

use super::common::*;
use super::series;
use super::sock::*;

/// The longest one send of a stream's client waits for room in its socket's buffer.
const SEND_WAIT: Duration = Duration::from_millis(100);

/// Payload bytes of one datagram: `payload`, else `frame_size` − 46.
pub fn udp_payload(p: &Params) -> Result<usize, crate::params::ParamError> {
    let payload = match p.opt_u64("payload") {
        Some(b) => b,
        None => p.u64("frame_size")?.saturating_sub(UDP_FRAME_OVERHEAD),
    };
    if (payload as usize) < HDR {
        return Err(crate::params::ParamError::new(
            "payload",
            format!("{payload} bytes is below the {HDR}-byte sequence header"),
        ));
    }
    Ok(payload as usize)
}

pub(crate) fn stamp(buf: &mut [u8], flow: u32, seq: u64) {
    buf[..4].copy_from_slice(MAGIC);
    buf[4..8].copy_from_slice(&flow.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// Parses our header; `None` for anything else (foreign, short, wrong flow).
pub(crate) fn parse(buf: &[u8], flow: u32) -> Option<u64> {
    if buf.len() < HDR || &buf[..4] != MAGIC || buf[4..8] != flow.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(buf[8..16].try_into().ok()?))
}

/// UDP stream at a frame size, offered rate or unlimited (seed 003: nuttcp UDP; RFC 2544 frame sizes).
pub struct UdpStream;

impl Workload for UdpStream {
    fn warmup_scales(&self) -> Option<&'static str> {
        Some("duration")
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Network
    }
    fn kind(&self) -> &'static str {
        "udp_stream"
    }
    fn largest_frame(&self, p: &Params) -> Option<u64> {
        // `payload` (which overrides it) may exceed the MTU on purpose: IP fragments it.
        p.opt_u64("frame_size")
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
            ParamSpec {
                name: "batch",
                kind: ParamKind::Int { min: 1, max: 64 },
                default: Some("64"),
                help: "datagrams per sendmmsg call (1: a call of its own for each, as iperf3 sends)",
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
    fn streams(&self) -> bool {
        true
    }
    fn link_bound(&self, p: &Params) -> Option<(&'static str, crate::workload::LinkBound)> {
        let payload = udp_payload(p).ok()? as u64;
        Some(("udp_recv_rate", crate::workload::LinkBound::UdpDatagrams { payload }))
    }
    fn aggregation(&self, metric: &str, p: &Params) -> crate::workload::Aggregation {
        let payload = udp_payload(p).unwrap_or(0) as f64;
        match metric {
            "udp_recv_rate" => crate::workload::Aggregation::Window { series: "datagrams", scale: 1e-3 },
            "udp_goodput" => {
                crate::workload::Aggregation::Window { series: "datagrams", scale: payload * 8.0 / 1e9 }
            }
            // Lost over sent, of all flows together.
            "udp_loss" => crate::workload::Aggregation::Pooled,
            _ => crate::workload::Aggregation::Sum,
        }
    }
    fn pooled(&self, metric: &str, details: &[&serde_json::Value]) -> Option<f64> {
        (metric == "udp_loss").then_some(())?;
        let (mut sent, mut received) = (0u64, 0u64);
        for d in details {
            sent += d["client"]["sent"].as_u64()?;
            received += d["server"]["received"].as_u64()?;
        }
        Some(if sent == 0 { 0.0 } else { sent.saturating_sub(received) as f64 / sent as f64 * 100.0 })
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?;
        let dur = duration(p)?;
        let payload = udp_payload(p)?;
        match role.side {
            virtperf_proto::Side::Server => {
                let s = UdpSocket::bind(addr(&role.bind, role.port)?).map_err(sock_err("bind"))?;
                size_buffers(&s, role);
                s.set_read_timeout(Some(Duration::from_millis(100))).map_err(sock_err("SO_RCVTIMEO"))?;
                let peer: Ipv4Addr =
                    role.peer.parse().map_err(|_| NetError::BadAddress(role.peer.clone()))?;
                ctx.ready();
                let until = Instant::now() + dur + GRACE;
                let mut bufs = vec![vec![0u8; payload.max(HDR) + 64]; BATCH];
                let (mut received, mut foreign, mut bytes, mut max_seq) = (0u64, 0u64, 0u64, 0u64);
                let (mut first, mut last) = (None::<Instant>, Instant::now());
                let (mut first_ns, mut last_ns) = (0u64, 0u64);
                let count = series::counter();
                let sampler = {
                    let c = count.clone();
                    series::Sampler::start(move || c.load(std::sync::atomic::Ordering::Relaxed))
                };
                'outer: loop {
                    let got = recv_batch(&s, &mut bufs);
                    let now = Instant::now();
                    let now_ns = crate::workload::now_ns();
                    // Stopped ends it even while datagrams keep coming (a sender that cannot be
                    // stopped would otherwise hold this port for good).
                    if ctx.stopped() {
                        break;
                    }
                    if got.is_empty() {
                        let idle = first.is_some() && now.duration_since(last) > Duration::from_secs(2);
                        if now > until || idle {
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
                                if first.is_none() {
                                    first_ns = now_ns;
                                }
                                first.get_or_insert(now);
                                last = now;
                                last_ns = now_ns;
                            }
                            _ => foreign += 1,
                        }
                    }
                    count.store(received, std::sync::atomic::Ordering::Relaxed);
                }
                let secs = first.map(|f| last.duration_since(f).as_secs_f64()).unwrap_or(0.0).max(1e-6);
                let mut samples = vec![
                    sample("udp_recv_rate", received as f64 / secs / 1e3, "kpps"),
                    sample("udp_goodput", bytes as f64 * 8.0 / secs / 1e9, "Gbit/s"),
                ];
                if let Some(d) = socket_drops(role.port) {
                    samples.push(sample("udp_rx_socket_drops", d as f64, "datagrams"));
                }
                let mut extra = serde_json::json!({"received": received, "bytes": bytes, "foreign": foreign, "max_seq": max_seq, "seconds": secs});
                if received > 0 {
                    extra["series"] =
                        serde_json::json!({"datagrams": sampler.finish([first_ns, 0], [last_ns, received])});
                }
                Ok(Output { samples, extra })
            }
            virtperf_proto::Side::Client => {
                let s = UdpSocket::bind(addr(&role.bind, 0)?).map_err(sock_err("bind"))?;
                size_buffers(&s, role);
                s.connect(addr(&role.peer, role.port)?).map_err(sock_err("connect"))?;
                // A send that finds the buffer full waits at most this long, so the duration and
                // a stop are checked: in gVisor a sender of 512-byte and larger datagrams blocked
                // for good (every trial past its 10 s and 30 s deadlines; 64-byte ones finish).
                s.set_write_timeout(Some(SEND_WAIT)).map_err(sock_err("SO_SNDTIMEO"))?;
                let rate = p.u64("rate")?;
                let batch = (p.opt_u64("batch").unwrap_or(BATCH as u64) as usize).clamp(1, BATCH);
                let mut bufs = vec![vec![0u8; payload]; BATCH];
                let lens = [payload; BATCH];
                let t0 = Instant::now();
                let (mut seq, mut stalls) = (0u64, 0u64);
                // When the last send began: one that took its whole SEND_WAIT waited for room,
                // whatever it moved (gVisor's sendmmsg of 1 518-byte datagrams returned a few
                // after each wait, never none). Timed by the loop's own clock read.
                let mut sending: Option<Duration> = None;
                while !ctx.stopped() {
                    let elapsed = t0.elapsed();
                    if let Some(began) = sending.take() {
                        stalls += u64::from(elapsed.saturating_sub(began) >= SEND_WAIT);
                    }
                    if elapsed >= dur {
                        break;
                    }
                    let mut n = batch;
                    if rate > 0 {
                        // Pace: never ahead of rate × elapsed; small batches keep bursts short.
                        let due = (rate as f64 * elapsed.as_secs_f64()) as u64;
                        if seq >= due {
                            let wait = Duration::from_secs_f64((seq + 1 - due) as f64 / rate as f64);
                            std::thread::sleep(wait.min(Duration::from_millis(1)));
                            continue;
                        }
                        n = ((due - seq) as usize).min(batch);
                    }
                    for (i, b) in bufs.iter_mut().take(n).enumerate() {
                        stamp(b, role.flow, seq + i as u64 + 1);
                    }
                    sending = Some(elapsed);
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
                    extra: serde_json::json!({"sent": seq, "seconds": secs, "send_stalls": stalls}),
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
