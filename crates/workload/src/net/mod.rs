//! Network workloads (seeds 000, 001, 003): TCP and UDP streams, TCP and UDP request/response.
//!
//! Each flow has a server (listens on its lab address, receives or answers) and a client
//! (connects, sends or asks), in two agents paired by the orchestrator. A server says `started`
//! only once it listens. Receivers never trust packet contents: datagrams that are too short, carry
//! the wrong magic or flow, or come from another address are counted as foreign and ignored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use virtperf_proto::NetRole;

use crate::params::Params;
use crate::workload::{Output, RunCtx, Workload};

mod common;
mod rr;
pub mod series;
mod sock;
mod tcp;
mod udp;

pub(crate) use common::sock_err;
pub use common::{NetError, UDP_FRAME_OVERHEAD};

pub use rr::{TcpRr, UdpRr};
pub(crate) use sock::*;
pub use sock::{max_socket_buffer, rcvbuf_of, set_rcvbuf, socket_drops, socket_drops_in};
pub use tcp::TcpStream;
pub use udp::{udp_payload, UdpStream};

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
    let _cpu = crate::workload::cpu_heavy();
    let given: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_value(params.clone()).map_err(|e| e.to_string())?;
    let resolved = crate::params::revalidate(w.params(), &given).map_err(|e| e.to_string())?;
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
        Ok((server.map_err(|e| e.to_string())?, client.map_err(|e| e.to_string())?))
    })
}

#[cfg(test)]
mod tests {
    use super::common::*;
    use super::udp::*;
    use super::*;
    use serde_json::json;
    use std::net::UdpSocket;
    use virtperf_proto::Sample;

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
        use virtperf_proto::fuzzing::{fuzz, mutated, with_corpus};
        let mut seeds = Vec::new();
        for (flow, seq) in [(0u32, 0u64), (1, 7), (2, u64::MAX)] {
            let mut b = vec![0u8; HDR + flow as usize * 40];
            stamp(&mut b, flow, seq);
            seeds.push(b);
        }
        const TOKENS: &[&str] = &["VPUD", "\u{0}\u{0}\u{0}\u{1}"];
        fuzz(
            "udp datagram parser",
            (mutated(with_corpus("udp datagram parser", seeds), TOKENS), 0u32..3),
            |(d, flow)| {
                if let Some(seq) = parse(&d, flow) {
                    prop_assert!(d.len() >= HDR && &d[..4] == MAGIC && d[4..8] == flow.to_be_bytes());
                    prop_assert_eq!(&seq.to_be_bytes()[..], &d[8..16]);
                }
                Ok(())
            },
        );
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
        let size_of = |s: &UdpSocket, opt| sock::socket_int(s, opt).unwrap() as i64;
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
        assert_eq!(value(&c.samples, "tcp_rr_waits"), 0.0, "a loopback transaction waited 50 ms");
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
        assert_eq!(e.kind(), crate::error::FailureKind::Stopped, "{e}");
        assert!(e.to_string().contains("stopped"), "{e}");
    }
}
