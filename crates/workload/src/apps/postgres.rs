//! `postgres`: Debian's PostgreSQL inside the environment, its cluster made by `initdb` and its
//! pgbench tables loaded by virtperf in the instance's scratch space, driven by pgbench on the
//! tester — as users measure a database: its closed loop for the capacity, `--rate` for the open
//! loop (pgbench schedules each transaction and counts its latency from that schedule: no
//! coordinated omission), each transaction's latency read from its per-transaction log
//! (docs/apps.md).
//!
//! PostgreSQL refuses to run as root: `initdb` and the server run as `nobody` in a user namespace
//! of their own (`server::RunAs::Unprivileged`), which owns every file the agent made. The cluster
//! keeps nothing on disk synchronously (`fsync`, `synchronous_commit`, `full_page_writes` off:
//! a layer's cost per transaction, not its disk's, as `redis` keeps no persistence), autovacuum off
//! (a phase's figures are the workload's alone), shared memory from `mmap` (no /dev/shm in a
//! guest), the time zone GMT (a guest has no zoneinfo). Only the tester's address may connect.

use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use virtperf_proto::Side;

use super::driver::Tally;
use super::server::{Home, How, RunAs};
use super::{AppError, CONNECTIONS, DURATION, LOADS_PARAM, PHASE, RATE, REFERENCE};
use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::workload::{MetricSpec, Output, RunCtx, Workload};

pub struct Postgres;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "transaction",
        kind: ParamKind::Choice(&["select-only", "simple-update", "tpcb-like"]),
        default: Some("select-only"),
        help: "pgbench's built-in script (-b): select-only (-S, one indexed read), simple-update (-N), tpcb-like (five statements, three updates: pgbench's default)",
    },
    ParamSpec {
        name: "scale",
        kind: ParamKind::Int { min: 1, max: 1000 },
        default: Some("1"),
        help: "pgbench's scale factor (-s): 100 000 accounts per unit (~16 MiB)",
    },
    CONNECTIONS,
    DURATION,
    LOADS_PARAM,
    REFERENCE,
    PHASE,
    RATE,
];

static METRICS: &[MetricSpec] = service_metrics!("postgres", "transactions");

/// The superuser `initdb` makes, whom pgbench connects as.
const USER: &str = "virtperf";
/// The database pgbench's tables are in (`initdb` makes it).
const DATABASE: &str = "postgres";

/// How long `initdb` may take (~1 s natively, ~40 s in a TCG guest).
const INITDB_WITHIN: Duration = Duration::from_secs(300);

/// The most bytes of one backend message the probe reads.
const MAX_MESSAGE: usize = 1 << 20;

/// Where Debian put PostgreSQL's newest major version.
#[derive(Debug, Clone)]
pub struct Install {
    pub bin: PathBuf,
    pub share: PathBuf,
    pub lib: PathBuf,
}

impl Install {
    /// The highest version under /usr/lib/postgresql with a `postgres`, `initdb` and `pgbench`.
    pub fn find() -> Option<Install> {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
            .filter(|(_, p): &(u32, PathBuf)| {
                ["postgres", "initdb", "pgbench"].iter().all(|b| p.join("bin").join(b).is_file())
            })
            .collect();
        versions.sort();
        let (v, dir) = versions.pop()?;
        Some(Install {
            bin: dir.join("bin"),
            lib: dir.join("lib"),
            share: PathBuf::from(format!("/usr/share/postgresql/{v}")),
        })
    }
    fn program(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }
}

fn install() -> Result<Install, crate::tools::ToolError> {
    Install::find().ok_or_else(|| crate::tools::ToolError::NotInstalled {
        prog: "PostgreSQL (/usr/lib/postgresql/*/bin/postgres, initdb, pgbench)".into(),
        package: "postgresql".into(),
    })
}

impl Workload for Postgres {
    fn kind(&self) -> &'static str {
        "postgres"
    }
    fn summary(&self) -> &'static str {
        "PostgreSQL inside the environment, pgbench on the tester: capacity (closed loop) and latency at fixed offered loads (--rate, from each transaction's schedule)"
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
        // A guest's image carries the server, initdb (which runs `postgres --boot`), pgbench
        // (it loads the tables) and what initdb reads: the share directory, and the two modules
        // its scripts load (PL/pgSQL, the snowball dictionaries); the password database initdb
        // looks its user (`nobody`) up in.
        let Some(i) = Install::find() else { return Vec::new() };
        let mut v: Vec<String> = ["postgres", "initdb", "pgbench"].iter().map(|b| i.program(b)).collect();
        v.push(i.share.display().to_string());
        for m in ["plpgsql.so", "dict_snowball.so"] {
            v.push(i.lib.join(m).display().to_string());
        }
        v.extend(["/etc/passwd".to_string(), "/etc/group".to_string()]);
        v
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn needs_scratch(&self) -> bool {
        true
    }
    fn service(&self) -> bool {
        true
    }
    fn planned_ms(&self, p: &Params) -> Option<f64> {
        // Every phase is one pgbench run of the warm-up and the phase (`client`).
        let phases = 1 + super::loads(p).map_or(0, |l| l.len());
        p.opt_f64("duration").map(|d| (super::WARM_UP.as_secs_f64() * 1e3 + d) * phases as f64)
    }
    fn conditional_metrics(&self) -> &'static [&'static str] {
        static C: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        C.get_or_init(|| super::conditional(METRICS))
    }
    fn memory_needed(&self, p: &Params) -> Option<u64> {
        // Its shared buffers, the tables' pages in the page cache, each backend's few MiB.
        let scale = p.opt_u64("scale")?;
        let connections = p.opt_u64("connections").unwrap_or(8);
        Some(
            shared_buffers_mib(scale) * (1 << 20) + scale * (24 << 20) + connections * (8 << 20) + (64 << 20),
        )
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        install().map_err(|m| ParamError::new("kind", m.to_string()))?;
        if !p.ms_or("duration", 3000).is_multiple_of(1000) {
            return Err(ParamError::new("duration", "pgbench runs whole seconds (-T): give e.g. 2s or 3s"));
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

/// Shared buffers, MiB: the tables and their indexes fit (~16 MiB a unit of scale), at least 32.
fn shared_buffers_mib(scale: u64) -> u64 {
    (scale * 20 + 16).clamp(32, 4096)
}

/// What virtperf sets in the cluster's postgresql.conf (after initdb's own lines: the last wins).
pub fn config(bind: &str, port: u16, scale: u64, connections: u64) -> String {
    format!(
        "\n# virtperf\nlisten_addresses = '{bind}'\nport = {port}\nunix_socket_directories = ''\n\
         max_connections = {}\nshared_buffers = {}MB\nshared_memory_type = mmap\n\
         dynamic_shared_memory_type = mmap\nhuge_pages = off\nfsync = off\nsynchronous_commit = off\n\
         full_page_writes = off\nautovacuum = off\ntimezone = 'GMT'\nlog_timezone = 'GMT'\n\
         logging_collector = off\nlog_destination = 'stderr'\n",
        connections + 8,
        shared_buffers_mib(scale),
    )
}

/// Who may connect: the tester (pgbench), and the server's own address (the tables' load),
/// without a password (the lab is a private network of namespaces).
pub fn hba(bind: &str, peer: &str) -> String {
    let host = |a: &str| {
        let bits = if a.contains(':') { 128 } else { 32 };
        format!("host all all {a}/{bits} trust\n")
    };
    format!("# virtperf: the tester and the server itself\n{}{}", host(peer), host(bind))
}

const HOW: How = How {
    run_as: RunAs::Unprivileged,
    // SIGINT: the fast shutdown (SIGTERM waits for every client to leave).
    stop: libc::SIGINT,
    // SIGQUIT: the immediate shutdown, which still removes its shared memory.
    on_death: libc::SIGQUIT,
    env: &[("TZ", "GMT"), ("LC_ALL", "C")],
};

fn serve(p: &Params, ctx: &RunCtx, role: &virtperf_proto::NetRole) -> Result<Output, AppError> {
    let pg = install()?;
    let scale = p.u64("scale")?;
    let home = Home::new("postgres", ctx.scratch())?;
    let data = home.path().join("data");
    let init: Vec<String> = vec![
        "-D".into(),
        data.display().to_string(),
        "-U".into(),
        USER.into(),
        "--auth=trust".into(),
        "--no-sync".into(),
        "--no-locale".into(),
        "-E".into(),
        "UTF8".into(),
    ];
    let initdb = super::server::run_once(&pg.program("initdb"), &init, &home, &HOW, INITDB_WITHIN, ctx)?;
    append(&data.join("postgresql.conf"), &config(&role.bind, role.port, scale, p.u64("connections")?))?;
    home.write("data/pg_hba.conf", hba(&role.bind, &role.peer).as_bytes())?;
    let at = crate::net::addr(&role.bind, role.port)?;
    let from = crate::net::addr(&role.bind, 0)?;
    let args = vec!["-D".to_string(), data.display().to_string()];
    let load = || {
        // pgbench's own tables, generated by the server (-I G): drop, create, generate, vacuum,
        // primary keys — then ready once a query of them answers what was loaded.
        let argv: Vec<String> = vec![
            pg.program("pgbench"),
            "-i".into(),
            "-I".into(),
            "dtGvp".into(),
            "-s".into(),
            scale.to_string(),
            "-h".into(),
            role.bind.clone(),
            "-p".into(),
            role.port.to_string(),
            "-U".into(),
            USER.into(),
            DATABASE.into(),
        ];
        // Its wait ends with the trial's deadline: the host stops the run, and the load with it.
        let ran = crate::tools::run_tool(&argv, ctx, false)?;
        ran.check()?;
        let branches =
            query(from, at, "SELECT count(*) FROM pgbench_branches").map_err(AppError::Protocol)?;
        if branches.trim() != scale.to_string() {
            return Err(AppError::Protocol(format!(
                "pgbench_branches holds {branches} rows after the load, not the scale's {scale}"
            )));
        }
        Ok(())
    };
    let mut out = super::server::serve_then(
        &pg.program("postgres"),
        &args,
        &HOW,
        &home,
        "postgres.log",
        ctx,
        &at,
        || query(from, at, "SELECT 1").map(|_| ()),
        load,
    )?;
    if let Some(o) = out.extra.get_mut("server").and_then(|v| v.as_object_mut()) {
        o.insert("initdb_ms".into(), json!(initdb.as_secs_f64() * 1e3));
    }
    Ok(out)
}

fn append(path: &Path, text: &str) -> Result<(), AppError> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| crate::error::OsError::new(format!("open {}", path.display()), e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| crate::error::OsError::new(format!("write {}", path.display()), e))?;
    Ok(())
}

/// One simple query over PostgreSQL's wire protocol (v3, trust authentication) from `from` to
/// `at`: the first column of its first row (empty where it returns none). Every read bounded
/// ([`MAX_MESSAGE`]) and the whole exchange within [`super::driver::ANSWER_WITHIN`].
pub fn query(from: SocketAddr, at: SocketAddr, sql: &str) -> Result<String, String> {
    let deadline = Instant::now() + super::driver::ANSWER_WITHIN;
    let sock = socket2::Socket::new(socket2::Domain::for_address(at), socket2::Type::STREAM, None)
        .map_err(|e| format!("socket: {e}"))?;
    sock.bind(&from.into()).map_err(|e| format!("bind {from}: {e}"))?;
    sock.connect_timeout(&at.into(), super::driver::ANSWER_WITHIN)
        .map_err(|e| format!("connect {at}: {e}"))?;
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(super::driver::ANSWER_WITHIN)).map_err(|e| e.to_string())?;
    let mut startup = Vec::new();
    startup.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
    for kv in ["user", USER, "database", DATABASE] {
        startup.extend_from_slice(kv.as_bytes());
        startup.push(0);
    }
    startup.push(0);
    let mut msg = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
    msg.extend_from_slice(&startup);
    s.write_all(&msg).map_err(|e| format!("send the startup: {e}"))?;
    let mut answer = String::new();
    let mut queried = false;
    loop {
        if Instant::now() > deadline {
            return Err(format!("no answer within {} s", super::driver::ANSWER_WITHIN.as_secs()));
        }
        let (tag, body) = message(&mut s)?;
        match tag {
            b'R' if body.get(..4) != Some(&[0, 0, 0, 0]) => {
                return Err("the server asks for a password (virtperf's pg_hba.conf says trust)".into())
            }
            b'E' => return Err(format!("the server answered an error: {}", error_text(&body))),
            b'D' if answer.is_empty() => answer = first_column(&body)?,
            b'Z' if !queried => {
                let mut q = vec![b'Q'];
                q.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
                q.extend_from_slice(sql.as_bytes());
                q.push(0);
                s.write_all(&q).map_err(|e| format!("send the query: {e}"))?;
                queried = true;
            }
            b'Z' => {
                let _ = s.write_all(&[b'X', 0, 0, 0, 4]);
                return Ok(answer);
            }
            _ => {}
        }
    }
}

/// One backend message: its type byte and its body.
fn message(s: &mut impl Read) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).map_err(|e| format!("read a message: {e}"))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if !(4..=MAX_MESSAGE).contains(&len) {
        return Err(format!("a message of {len} bytes (at most {MAX_MESSAGE})"));
    }
    let mut body = vec![0u8; len - 4];
    s.read_exact(&mut body).map_err(|e| format!("read a message's body: {e}"))?;
    Ok((head[0], body))
}

/// A DataRow's first column as text (NULL as empty).
fn first_column(body: &[u8]) -> Result<String, String> {
    let bad = || "a malformed data row".to_string();
    let n = i16::from_be_bytes(body.get(..2).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    if n < 1 {
        return Ok(String::new());
    }
    let len = i32::from_be_bytes(body.get(2..6).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    if len < 0 {
        return Ok(String::new());
    }
    let v = body.get(6..6 + len as usize).ok_or_else(bad)?;
    Ok(virtperf_proto::printable(&String::from_utf8_lossy(v), 200))
}

/// An ErrorResponse's severity, code and message.
fn error_text(body: &[u8]) -> String {
    let fields: Vec<String> = body
        .split(|b| *b == 0)
        .filter(|f| matches!(f.first(), Some(b'S' | b'C' | b'M')))
        .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
        .collect();
    virtperf_proto::printable(&fields.join(" "), 300)
}

fn client(p: &Params, ctx: &RunCtx, role: &virtperf_proto::NetRole, phase: &str) -> Result<Output, AppError> {
    let pg = install()?;
    let offered = super::offered(p, phase)?;
    let connections = p.u64("connections")?;
    let secs = (p.ms_or("duration", 3000) / 1000).max(1);
    let warm = super::WARM_UP.as_secs().max(1);
    let threads = super::driver::threads_for(connections as usize);
    let tmp = crate::tools::writable_tmp(ctx.scratch())
        .ok_or_else(|| crate::tools::ToolError::NoTmp("pgbench".into()))?;
    // pgbench's per-transaction log, in a directory of this phase's own (removed on drop).
    let logs = tempfile::Builder::new()
        .prefix("virtperf-pgbench-")
        .tempdir_in(&tmp)
        .map_err(|e| crate::error::OsError::new(format!("a directory in {}", tmp.display()), e))?;
    // One run of the warm-up and the phase on the same connections: each of PostgreSQL's backends
    // fills its own caches on its first transactions (a TCG guest's took over a second), which a
    // warm-up on connections of its own would leave cold. Only what follows the warm-up counts:
    // the per-second progress reports (`-P 1`) for the capacity, the transactions that ended
    // after it for an offered load.
    let mut argv: Vec<String> = vec![
        pg.program("pgbench"),
        "-h".into(),
        role.peer.clone(),
        "-p".into(),
        role.port.to_string(),
        "-U".into(),
        USER.into(),
        "-n".into(),
        "-b".into(),
        p.str("transaction")?.to_string(),
        "-c".into(),
        connections.to_string(),
        "-j".into(),
        threads.to_string(),
        "-T".into(),
        (warm + secs).to_string(),
        "-P".into(),
        "1".into(),
    ];
    if let Some((rate, _)) = offered {
        argv.extend([
            "-R".into(),
            format!("{rate:.3}"),
            "-l".into(),
            format!("--log-prefix={}", logs.path().join("log").display()),
        ]);
    }
    argv.push(DATABASE.into());
    let ran = crate::tools::run_tool(&argv, ctx, false)?;
    if ctx.stopped() {
        return Err(AppError::Stopped);
    }
    ran.check()?;
    let figures = Figures::read(&ran.stdout).ok_or_else(|| crate::tools::ToolError::NoFigure {
        prog: "pgbench".into(),
        stdout: virtperf_proto::printable(&ran.stdout, 600),
    })?;
    let mut hist = super::driver::new_histogram()?;
    let (rate, failed, backlog) = match offered {
        None => {
            let rate = after_warm_up(&ran.stderr, warm).unwrap_or(figures.tps);
            (rate, figures.failed, 0)
        }
        Some((offered, _)) => {
            let l = read_logs(logs.path(), warm, &mut hist)?;
            let rate = l.done as f64 / secs as f64;
            // Scheduled by --rate within the phase but never answered in it.
            let backlog = (offered * secs as f64 - (l.done + l.failed) as f64).max(0.0) as u64;
            (rate, l.failed.max(figures.failed), backlog)
        }
    };
    let t = Tally {
        // Every transaction of the run (its warm-up's too): the host divides the CPU of the whole
        // phase by it.
        requests: figures.processed,
        errors: failed,
        backlog,
        secs: figures.processed as f64 / rate.max(1e-9),
        hist,
        offered: offered.map(|o| o.0),
        first_errors: Vec::new(),
        threads,
    };
    let mut out =
        super::tally_output("postgres", phase, offered.map(|o| o.1), &t, json!({ "tool": ran.detail() }));
    if let Some(tally) = out.extra.get_mut("tally").and_then(|v| v.as_object_mut()) {
        // What the figures are of: the phase after the warm-up.
        tally.insert("rate".into(), json!(rate));
        tally.insert("secs".into(), json!(secs));
        tally.insert("warm_up_secs".into(), json!(warm));
    }
    Ok(out)
}

/// The mean of pgbench's per-second progress reports (`progress: 3.0 s, 15234.9 tps, lat …`, on
/// its stderr) after the first `warm` seconds; None where it printed none of them.
pub fn after_warm_up(stderr: &str, warm: u64) -> Option<f64> {
    let tps: Vec<f64> = stderr
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("progress:")?;
            let mut f = rest.split(',').map(str::trim);
            let at: f64 = f.next()?.strip_suffix(" s")?.trim().parse().ok()?;
            let tps: f64 = f.next()?.strip_suffix(" tps")?.trim().parse().ok()?;
            (at > warm as f64 + 0.5).then_some(tps)
        })
        .collect();
    (!tps.is_empty()).then(|| tps.iter().sum::<f64>() / tps.len() as f64)
}

/// What pgbench's summary says.
#[derive(Debug, PartialEq)]
pub struct Figures {
    pub tps: f64,
    pub processed: u64,
    pub failed: u64,
}

impl Figures {
    /// From `number of transactions actually processed: N`, `number of failed transactions: N
    /// (…)` and `tps = X (without initial connection time)` (absent where nothing was processed).
    pub fn read(out: &str) -> Option<Figures> {
        let after = |key: &str| {
            out.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .map(|r| r.trim().split([' ', '/']).next().unwrap_or(""))
        };
        let processed: u64 = after("number of transactions actually processed:")?.parse().ok()?;
        let tps = match after("tps =") {
            Some(t) => t.parse().ok()?,
            None if processed == 0 => 0.0,
            None => return None,
        };
        Some(Figures {
            tps,
            processed,
            failed: after("number of failed transactions:").and_then(|v| v.parse().ok()).unwrap_or(0),
        })
    }
}

/// What an open loop's per-transaction logs hold after the warm-up.
#[derive(Debug, PartialEq)]
pub struct Logged {
    pub done: u64,
    pub failed: u64,
}

/// Every transaction's latency from pgbench's per-transaction logs (`log.PID` and `log.PID.N`,
/// one line per transaction: `client transaction time_us script epoch epoch_us [lag_us]`, its
/// time from the transaction's schedule under --rate, the epoch when it ended) into `hist` (ns),
/// of those that ended `warm` seconds or more after the first one did; the failed ones counted.
fn read_logs(dir: &Path, warm: u64, hist: &mut hdrhistogram::Histogram<u64>) -> Result<Logged, AppError> {
    let mut entries: Vec<(u64, Option<u64>)> = Vec::new();
    let files = std::fs::read_dir(dir)
        .map_err(|e| crate::error::OsError::new(format!("read {}", dir.display()), e))?;
    let bad = |line: &str| {
        AppError::Protocol(format!("pgbench's log line `{}`", virtperf_proto::printable(line, 80)))
    };
    for f in files.flatten() {
        let file = std::fs::File::open(f.path())
            .map_err(|e| crate::error::OsError::new(format!("open {}", f.path().display()), e))?;
        // Read line by line, each kept as two integers: the logs' text never becomes memory.
        for line in std::io::BufReader::new(file).lines() {
            let line = line.map_err(|e| crate::error::OsError::new("read pgbench's log", e))?;
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() < 6 {
                return Err(bad(&line));
            }
            let (s, us): (u64, u64) =
                (w[4].parse().map_err(|_| bad(&line))?, w[5].parse().map_err(|_| bad(&line))?);
            let end = s * 1_000_000 + us;
            match w[2] {
                "failed" => entries.push((end, None)),
                "skipped" => {}
                t => entries.push((end, Some(t.parse().map_err(|_| bad(&line))?))),
            }
        }
    }
    let first = entries.iter().map(|e| e.0).min().unwrap_or(0);
    let cut = first + warm * 1_000_000;
    let mut l = Logged { done: 0, failed: 0 };
    for (_, us) in entries.into_iter().filter(|e| e.0 >= cut) {
        match us {
            Some(us) => {
                l.done += 1;
                hist.saturating_record((us * 1000).max(1));
            }
            None => l.failed += 1,
        }
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_summary_is_read() {
        let out = "transaction type: <builtin: select only>\nscaling factor: 1\nnumber of clients: 4\n\
                   number of transactions actually processed: 69766\nnumber of failed transactions: 2 (0.003%)\n\
                   latency average = 0.172 ms\ninitial connection time = 10.820 ms\n\
                   tps = 23255.347198 (without initial connection time)\n";
        assert_eq!(Figures::read(out), Some(Figures { tps: 23255.347198, processed: 69766, failed: 2 }));
        assert_eq!(Figures::read("pgbench: error: connection refused\n"), None);
    }

    #[test]
    fn logs_give_every_latency_after_the_warm_up_and_count_failures() {
        let d = tempfile::tempdir().unwrap();
        // Ends at 10.0001 s (the first), 10.9 s (in the warm-up), 11.2 s, 11.5 s (failed), 12 s.
        std::fs::write(
            d.path().join("log.12"),
            "0 0 150 0 10 100 20\n1 0 failed 0 11 500000 5\n0 1 900 0 10 900000 0\n",
        )
        .unwrap();
        std::fs::write(d.path().join("log.12.1"), "2 0 250 0 11 200000 0\n2 1 400 0 12 0 0\n").unwrap();
        let mut h = crate::apps::driver::new_histogram().unwrap();
        assert_eq!(read_logs(d.path(), 1, &mut h).unwrap(), Logged { done: 2, failed: 1 });
        assert_eq!(h.len(), 2);
        assert!((h.value_at_quantile(1.0) as f64 - 400_000.0).abs() < 400.0);
        let mut all = crate::apps::driver::new_histogram().unwrap();
        assert_eq!(read_logs(d.path(), 0, &mut all).unwrap(), Logged { done: 4, failed: 1 });
        std::fs::write(d.path().join("log.13"), "0 0 x1 0 1 1\n").unwrap();
        assert!(read_logs(d.path(), 1, &mut h).is_err());
    }

    #[test]
    fn the_capacity_is_the_progress_after_the_warm_up() {
        let err = "pgbench: starting\nprogress: 1.0 s, 900.0 tps, lat 8.8 ms stddev 1.0, 0 failed\n\
                   progress: 2.0 s, 15000.0 tps, lat 0.5 ms stddev 0.1, 0 failed\n\
                   progress: 3.0 s, 16000.0 tps, lat 0.5 ms stddev 0.1, 0 failed\n";
        assert_eq!(after_warm_up(err, 1), Some(15500.0));
        assert_eq!(after_warm_up("progress: 1.0 s, 900.0 tps, lat 8.8 ms\n", 1), None);
        let none = "number of transactions actually processed: 0\nnumber of failed transactions: 0 (NaN%)\n";
        assert_eq!(Figures::read(none), Some(Figures { tps: 0.0, processed: 0, failed: 0 }));
    }

    #[test]
    fn only_the_tester_and_the_server_may_connect_and_nothing_is_synced() {
        let h = hba("198.18.0.2", "198.18.0.1");
        assert_eq!(h.lines().filter(|l| l.starts_with("host")).count(), 2);
        assert!(h.contains("198.18.0.1/32 trust") && h.contains("198.18.0.2/32 trust"));
        assert!(!h.contains("0.0.0.0"));
        let c = config("198.18.0.2", 5201, 1, 8);
        for want in [
            "listen_addresses = '198.18.0.2'",
            "port = 5201",
            "fsync = off",
            "max_connections = 16",
            "shared_buffers = 36MB",
        ] {
            assert!(c.contains(want), "{want} in {c}");
        }
    }

    #[test]
    fn the_probe_reads_a_row_and_refuses_what_is_not_trust() {
        let row = [0u8, 1, 0, 0, 0, 1, b'7'];
        assert_eq!(first_column(&row).unwrap(), "7");
        assert!(first_column(&[0u8, 1, 0, 0, 0, 9, b'7']).is_err());
        let err = b"SERROR\0C42P01\0Mrelation does not exist\0\0";
        assert_eq!(error_text(err), "ERROR 42P01 relation does not exist");
        let mut big: &[u8] = &[b'D', 0x7f, 0, 0, 0];
        assert!(message(&mut big).unwrap_err().contains("at most"));
    }
}
