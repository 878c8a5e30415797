//! `virtperf agent`: the process that runs workloads inside an environment.
//!
//! It speaks the protocol of `virtperf-proto` on stdin/stdout: a hello first, then one reply per
//! request, tag echoed. Anything it cannot understand gets an `error` reply and the agent goes on;
//! only `shutdown` or the end of its input stops it. It never prints anything else on stdout.

use std::io::{BufReader, Read, Write};
use std::time::Instant;

use virtperf_proto::{self as proto, CpuTime, ErrorCode, Frame, Reply, Request};

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn own_cpu() -> CpuTime {
    // SAFETY: getrusage fills the rusage struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    CpuTime { user_ns: ns(ru.ru_utime), system_ns: ns(ru.ru_stime) }
}

fn system_info() -> Reply {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count() as u32;
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0);
    Reply::Info { kernel, cpu_model, cpus, memory_kib }
}

/// Serves requests from `input`, writes replies to `output`. Returns when told to shut down or
/// when the input ends.
pub fn serve<R: Read, W: Write>(input: R, mut output: W) -> std::io::Result<()> {
    let mut input = BufReader::new(input);
    let mut send =
        |tag: u64, r: Reply| proto::write_frame(&mut output, proto::FRAME_PREFIX, &Frame::new(tag, r));
    send(
        0,
        Reply::Hello {
            agent_version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            clock_ns: monotonic_ns(),
        },
    )?;
    loop {
        let line = match proto::read_line(&mut input) {
            Ok(l) => l,
            Err(proto::FrameError::Eof) => return Ok(()),
            Err(proto::FrameError::TooLong) => {
                send(0, Reply::Error { code: ErrorCode::Malformed, message: "frame too long".into() })?;
                continue;
            }
            Err(proto::FrameError::Io(e)) => return Err(e),
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let frame = match proto::decode_request(&line) {
            Ok(f) => f,
            Err(e) => {
                send(e.tag, Reply::Error { code: e.code, message: e.message })?;
                continue;
            }
        };
        let tag = frame.tag;
        match frame.body {
            Request::Ping => send(tag, Reply::Pong { clock_ns: monotonic_ns() })?,
            Request::Info => send(tag, system_info())?,
            Request::Shutdown => {
                send(tag, Reply::Bye)?;
                return Ok(());
            }
            Request::Run { workload } => {
                // Validate before saying "started": a bad request never starts.
                let prepared = match virtperf_workload::prepare(&workload) {
                    Ok(p) => p,
                    Err((code, message)) => {
                        send(tag, Reply::Error { code, message })?;
                        continue;
                    }
                };
                send(tag, Reply::Started)?;
                let cpu0 = own_cpu();
                let t0 = Instant::now();
                let res = prepared.run();
                let elapsed = t0.elapsed().as_nanos() as u64;
                let cpu1 = own_cpu();
                let cpu = CpuTime {
                    user_ns: cpu1.user_ns.saturating_sub(cpu0.user_ns),
                    system_ns: cpu1.system_ns.saturating_sub(cpu0.system_ns),
                };
                match res {
                    Ok(samples) => {
                        send(tag, Reply::Result { samples, guest_elapsed_ns: elapsed, guest_cpu: cpu })?
                    }
                    Err((code, message)) => send(tag, Reply::Error { code, message })?,
                }
            }
        }
    }
}

/// Entry point of `virtperf agent`.
pub fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    serve(stdin, stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(input: &str) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        serve(input.as_bytes(), &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str(l.strip_prefix(proto::FRAME_PREFIX).expect("every line is a frame"))
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn hello_then_one_reply_per_request_with_tags() {
        let r = replies(
            "{\"v\":1,\"tag\":1,\"type\":\"ping\"}\n\
             not json\n\
             {\"v\":2,\"tag\":2,\"type\":\"ping\"}\n\
             {\"v\":1,\"tag\":3,\"type\":\"run\",\"workload\":{\"kind\":\"nope\"}}\n\
             {\"v\":1,\"tag\":4,\"type\":\"run\",\"workload\":{\"kind\":\"memcpy\",\"params\":{\"size\":-1}}}\n\
             {\"v\":1,\"tag\":5,\"type\":\"run\",\"workload\":{\"kind\":\"memcpy\",\"params\":{\"size\":4096,\"copies\":2}}}\n\
             {\"v\":1,\"tag\":6,\"type\":\"info\"}\n\
             {\"v\":1,\"tag\":7,\"type\":\"shutdown\"}\n\
             {\"v\":1,\"tag\":8,\"type\":\"ping\"}\n",
        );
        let kinds: Vec<(u64, &str)> =
            r.iter().map(|f| (f["tag"].as_u64().unwrap(), f["type"].as_str().unwrap())).collect();
        assert_eq!(
            kinds,
            vec![
                (0, "hello"),
                (1, "pong"),
                (0, "error"),
                (2, "error"),
                (3, "error"),
                (4, "error"),
                (5, "started"),
                (5, "result"),
                (6, "info"),
                (7, "bye"),
            ]
        );
        assert_eq!(r[3]["code"], "unsupported_version");
        assert_eq!(r[4]["code"], "unknown_workload");
        assert_eq!(r[5]["code"], "bad_params");
        assert_eq!(r[7]["samples"][0]["metric"], "memcpy_time");
    }

    #[test]
    fn survives_arbitrary_bytes() {
        let mut junk = Vec::new();
        let mut x: u32 = 12345;
        for _ in 0..20000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            junk.push((x >> 16) as u8);
        }
        let mut out = Vec::new();
        serve(&junk[..], &mut out).unwrap();
        assert!(!out.is_empty());
    }
}
