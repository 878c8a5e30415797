//! `redis`: Debian's redis-server inside the environment, its key and value set by virtperf,
//! driven by virtperf's RESP client on the tester: GET or SET of one key (as redis-benchmark does
//! without `-r`), `pipeline` commands per request (docs/apps.md).
//!
//! Its configuration is written into its own directory (`apps::server::Home`): no persistence
//! (`save ""`, `appendonly no`: a layer's cost per request, not its disk's), its log and working
//! directory there, `protected-mode no` so the tester may connect without a password (the lab is
//! a private network of namespaces).

use std::net::SocketAddr;

use serde_json::json;
use virtperf_proto::Side;

use super::driver::{Feed, Protocol, Reader};
use super::server::Home;
use super::{AppError, CONNECTIONS, DURATION, LOADS_PARAM, PHASE, RATE, REFERENCE};
use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::tools::find_program;
use crate::workload::{MetricSpec, Output, RunCtx, Workload};

pub struct Redis;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "op",
        kind: ParamKind::Choice(&["get", "set"]),
        default: Some("get"),
        help: "the command: GET of the key (set once before the trial), or SET of it",
    },
    ParamSpec {
        name: "value_size",
        kind: ParamKind::Size { min: 1, max: 16 << 20 },
        default: Some("64B"),
        help: "the value's size (what a GET reads, a SET writes)",
    },
    ParamSpec {
        name: "pipeline",
        kind: ParamKind::Int { min: 1, max: 256 },
        default: Some("1"),
        help: "commands sent together on a connection before their replies are read (redis-benchmark's -P); each counts as a request",
    },
    ParamSpec {
        name: "client",
        kind: ParamKind::Choice(&["virtperf", "redis-benchmark"]),
        default: Some("virtperf"),
        help: "who measures the capacity: virtperf's own client, or redis-benchmark (the reference, as users run it; the offered loads are always virtperf's open loop)",
    },
    CONNECTIONS,
    DURATION,
    LOADS_PARAM,
    REFERENCE,
    PHASE,
    RATE,
];

static METRICS: &[MetricSpec] = service_metrics!("redis", "commands");

/// The key every command names.
const KEY: &str = "virtperf:key";

/// The most bytes of a reply's first line (`$65536`, `+OK`, an error's words).
const MAX_LINE: usize = 512;

impl Workload for Redis {
    fn kind(&self) -> &'static str {
        "redis"
    }
    fn summary(&self) -> &'static str {
        "redis-server inside the environment, GET or SET of one key from the tester: capacity (closed loop) and latency at fixed offered loads (open loop)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        METRICS
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Service
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        vec!["redis-server".into()]
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn service(&self) -> bool {
        true
    }
    fn planned_ms(&self, p: &Params) -> Option<f64> {
        super::planned_ms(p)
    }
    fn conditional_metrics(&self) -> &'static [&'static str] {
        static C: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        C.get_or_init(|| super::conditional(METRICS))
    }
    fn memory_needed(&self, p: &Params) -> Option<u64> {
        // The value, and redis-server's own (a few MiB).
        p.opt_u64("value_size").map(|v| v + (16 << 20))
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        find_program("redis-server").map_err(|m| ParamError::new("kind", m.to_string()))?;
        if p.str("client")? == "redis-benchmark" {
            find_program("redis-benchmark").map_err(|m| ParamError::new("client", m.to_string()))?;
        }
        super::loads(p)?;
        Ok(())
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?.clone();
        Ok(match (role.side, super::phase(p)) {
            (Side::Server, _) => serve(p, ctx, &role)?,
            (Side::Client, phase) => client(p, ctx, &role, phase)?,
        })
    }
}

/// redis-server's configuration: no persistence, every file in `home`.
pub fn config(home: &std::path::Path, bind: &str, port: u16) -> String {
    let h = home.display();
    format!(
        "bind {bind}\nport {port}\nprotected-mode no\ndaemonize no\nsave \"\"\nappendonly no\n\
         dir {h}\nlogfile {h}/redis.log\npidfile {h}/redis.pid\ndbfilename dump.rdb\n\
         databases 1\nmaxclients 1024\nio-threads 1\n"
    )
}

fn serve(p: &Params, ctx: &RunCtx, role: &virtperf_proto::NetRole) -> Result<Output, AppError> {
    let home = Home::new("redis", ctx.scratch())?;
    let conf = home.write("redis.conf", config(home.path(), &role.bind, role.port).as_bytes())?;
    let at = crate::net::addr(&role.bind, role.port)?;
    let from = crate::net::addr(&role.bind, 0)?;
    // Ready once the key holds its value and a GET reads it back whole.
    let size = p.u64("value_size")?;
    let set = Resp::new(from, at, "set", size, 1);
    let get = Resp::new(from, at, "get", size, 1);
    let args = vec![conf.display().to_string()];
    super::server::serve("redis-server", &args, &home, "redis.log", ctx, &at, || {
        super::driver::once(&set)?;
        super::driver::once(&get)
    })
}

fn client(p: &Params, ctx: &RunCtx, role: &virtperf_proto::NetRole, phase: &str) -> Result<Output, AppError> {
    let (from, to) = (crate::net::addr(&role.bind, 0)?, crate::net::addr(&role.peer, role.port)?);
    let resp = Resp::new(from, to, p.str("op")?, p.u64("value_size")?, p.u64("pipeline")?);
    if phase == "capacity" {
        super::warm_up(p, ctx, &resp)?;
        if p.str("client")? == "redis-benchmark" {
            return benchmark(p, ctx, &resp, &to);
        }
    }
    super::phase_output("redis", p, ctx, &resp, phase)
}

/// The capacity as redis-benchmark measures it, on the tester as users run it: the same
/// connections, command, value size and pipeline; its request count sized to the phase's
/// duration from a short run of virtperf's client (redis-benchmark counts requests, not time).
fn benchmark(p: &Params, ctx: &RunCtx, resp: &Resp, to: &SocketAddr) -> Result<Output, AppError> {
    let connections = p.u64("connections")?;
    let secs = p.ms_or("duration", 3000) as f64 / 1e3;
    let probe = super::driver::Phase {
        connections: connections as usize,
        duration: std::time::Duration::from_millis(300),
        rate: None,
    };
    let rate = super::driver::drive(resp, probe, ctx)?.rate();
    let n = ((rate * secs) as u64).clamp(1000, 100_000_000);
    let threads = super::driver::threads_for(connections as usize);
    let mut argv: Vec<String> = vec![
        "redis-benchmark".into(),
        "-h".into(),
        to.ip().to_string(),
        "-p".into(),
        to.port().to_string(),
        "-c".into(),
        connections.to_string(),
        "-n".into(),
        n.to_string(),
        "-t".into(),
        p.str("op")?.to_string(),
        "-d".into(),
        p.u64("value_size")?.to_string(),
        "-P".into(),
        p.u64("pipeline")?.to_string(),
        "--csv".into(),
    ];
    // Its own threads only where the tester has CPUs for them: two on one CPU cost it 23 us a
    // request against 14 for virtperf's one loop, and it measured its own CPU, not the server.
    if threads > 1 {
        argv.extend(["--threads".into(), threads.to_string()]);
    }
    let ran = crate::tools::run_tool(&argv, ctx, false)?;
    ran.check()?;
    let rps = benchmark_rps(&ran.stdout, p.str("op")?).ok_or_else(|| crate::tools::ToolError::NoFigure {
        prog: "redis-benchmark".into(),
        stdout: ran.stdout.clone(),
    })?;
    Ok(Output {
        samples: vec![
            crate::workload::sample("redis_capacity", rps, "req/s"),
            crate::workload::sample("redis_errors", 0.0, "req"),
        ],
        extra: json!({ "phase": "capacity", "client": "redis-benchmark", "tally": { "requests": n }, "tool": ran.detail() }),
    })
}

/// redis-benchmark's requests per second for `op` from its `--csv` output
/// (`"GET","45045.05",…`).
fn benchmark_rps(out: &str, op: &str) -> Option<f64> {
    out.lines().find_map(|l| {
        let mut f = l.split(',').map(|x| x.trim().trim_matches('"'));
        let test = f.next()?;
        (test.eq_ignore_ascii_case(op)).then(|| f.next()?.parse().ok()).flatten()
    })
}

/// `pipeline` GETs or SETs of the key, in RESP.
pub struct Resp {
    from: SocketAddr,
    to: SocketAddr,
    request: Vec<u8>,
    get: bool,
    size: u64,
    pipeline: u64,
}

impl Resp {
    pub fn new(from: SocketAddr, to: SocketAddr, op: &str, size: u64, pipeline: u64) -> Resp {
        let get = op == "get";
        let one: Vec<u8> = if get {
            format!("*2\r\n$3\r\nGET\r\n${}\r\n{KEY}\r\n", KEY.len()).into_bytes()
        } else {
            // The value is a pattern, not zeros.
            let value: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
            let mut v = format!("*3\r\n$3\r\nSET\r\n${}\r\n{KEY}\r\n${size}\r\n", KEY.len()).into_bytes();
            v.extend_from_slice(&value);
            v.extend_from_slice(b"\r\n");
            v
        };
        let request = one.repeat(pipeline as usize);
        Resp { from, to, request, get, size, pipeline }
    }
}

impl Protocol for Resp {
    type Reader = RespReader;
    fn addrs(&self) -> (SocketAddr, SocketAddr) {
        (self.from, self.to)
    }
    fn request(&self) -> &[u8] {
        &self.request
    }
    fn reader(&self) -> RespReader {
        RespReader { get: self.get, size: self.size, left: self.pipeline, line: Vec::new(), body: None }
    }
    fn per_request(&self) -> u64 {
        self.pipeline
    }
}

/// Reads `left` replies: `+OK` to a SET, a bulk string of the value's size to a GET; an error
/// reply (`-ERR …`) or anything else fails the request.
pub struct RespReader {
    get: bool,
    size: u64,
    left: u64,
    line: Vec<u8>,
    /// A bulk reply's bytes still to come (its CRLF included).
    body: Option<u64>,
}

impl Reader for RespReader {
    fn feed(&mut self, data: &[u8]) -> Result<Feed, String> {
        let mut i = 0;
        while i < data.len() {
            if let Some(left) = self.body {
                let take = (left as usize).min(data.len() - i);
                i += take;
                let left = left - take as u64;
                if left > 0 {
                    self.body = Some(left);
                    continue;
                }
                self.body = None;
                self.left -= 1;
                if self.left == 0 {
                    return Ok(Feed::Done { used: i, close: false });
                }
                continue;
            }
            let b = data[i];
            i += 1;
            self.line.push(b);
            if self.line.len() > MAX_LINE {
                return Err(format!("a reply line longer than {MAX_LINE} bytes"));
            }
            if !self.line.ends_with(b"\r\n") {
                continue;
            }
            let line = String::from_utf8_lossy(&self.line[..self.line.len() - 2]).into_owned();
            self.line.clear();
            if let Some(err) = line.strip_prefix('-') {
                return Err(format!("redis answered an error: {}", virtperf_proto::printable(err, 120)));
            }
            if self.get {
                let n: i64 = line.strip_prefix('$').and_then(|n| n.parse().ok()).ok_or_else(|| {
                    format!("`{}` is not a bulk reply to GET", virtperf_proto::printable(&line, 60))
                })?;
                if n != self.size as i64 {
                    return Err(format!("GET read {n} bytes, not the {} virtperf set", self.size));
                }
                self.body = Some(self.size + 2);
            } else {
                if line != "+OK" {
                    return Err(format!("`{}` is not SET's +OK", virtperf_proto::printable(&line, 60)));
                }
                self.left -= 1;
                if self.left == 0 {
                    return Ok(Feed::Done { used: i, close: false });
                }
            }
        }
        // A bulk reply of 0 bytes still needs its CRLF: handled above as body Some(2).
        Ok(Feed::More)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(op: &str, size: u64, pipeline: u64) -> Resp {
        let a: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        Resp::new(a, a, op, size, pipeline)
    }

    #[test]
    fn requests_are_resp_arrays_pipelined() {
        assert_eq!(resp("get", 3, 1).request(), b"*2\r\n$3\r\nGET\r\n$12\r\nvirtperf:key\r\n");
        let set = resp("set", 3, 2);
        let one = b"*3\r\n$3\r\nSET\r\n$12\r\nvirtperf:key\r\n$3\r\nabc\r\n";
        assert_eq!(set.request(), [&one[..], &one[..]].concat());
        assert_eq!(set.per_request(), 2);
    }

    #[test]
    fn replies_are_counted_and_checked_in_any_pieces() {
        let wire = b"$3\r\nabc\r\n$3\r\nabc\r\n";
        for cut in 1..wire.len() {
            let mut r = resp("get", 3, 2).reader();
            assert_eq!(r.feed(&wire[..cut]).unwrap(), Feed::More, "cut {cut}");
            assert_eq!(r.feed(&wire[cut..]).unwrap(), Feed::Done { used: wire.len() - cut, close: false });
        }
        let mut r = resp("set", 3, 2).reader();
        assert_eq!(r.feed(b"+OK\r\n+OK\r\n").unwrap(), Feed::Done { used: 10, close: false });
        assert!(resp("get", 4, 1).reader().feed(b"$3\r\nabc\r\n").unwrap_err().contains("not the 4"));
        assert!(resp("get", 3, 1).reader().feed(b"$-1\r\n").is_err(), "a missing key is a failure");
        assert!(resp("set", 3, 1)
            .reader()
            .feed(b"-OOM command not allowed\r\n")
            .unwrap_err()
            .contains("OOM"));
        assert!(resp("set", 3, 1).reader().feed(&[b'x'; 600]).unwrap_err().contains("longer"));
    }

    #[test]
    fn the_configuration_keeps_nothing_on_disk_and_everything_in_its_home() {
        let c = config(std::path::Path::new("/s/virtperf-redis-x"), "198.18.0.2", 5201);
        for want in [
            "bind 198.18.0.2",
            "port 5201",
            "save \"\"",
            "appendonly no",
            "dir /s/virtperf-redis-x",
            "logfile /s/virtperf-redis-x/redis.log",
        ] {
            assert!(c.contains(want), "{want} in {c}");
        }
    }

    #[test]
    fn redis_benchmark_csv_is_read() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\"\n\"GET\",\"45045.05\",\"0.143\"\n";
        assert_eq!(benchmark_rps(out, "get"), Some(45045.05));
        assert_eq!(benchmark_rps(out, "set"), None);
    }
}
