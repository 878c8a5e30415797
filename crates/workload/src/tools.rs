//! Tools a user already trusts, run inside the environment through the agent like any workload:
//! `iperf3` (its client in one end of the lab and its server in the other, `--json` parsed),
//! `fio` (on the scratch disk, `--output-format=json`), `sysbench` (cpu, memory, threads),
//! `stress-ng` (`--metrics-brief`: bogo ops/s per stressor) and `command` (any command line:
//! a metric from its JSON output by pointer, from a regular expression, and its wall time on both
//! clocks).
//!
//! The tool is the host's binary: containers and gVisor see the host's /usr read-only, UML the
//! host's root, and QEMU/libvirt guests get it (and its shared libraries) in their initramfs
//! ([`Workload::programs`]). Its raw output is kept with each trial (`extra.tool`), its exit status
//! decides the trial: a tool that exits non-zero, or whose output holds no figure, fails that
//! trial with the tool's stderr tail.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use virtperf_proto::Sample;

use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

/// The tool workloads' kinds: their figures depend on programs the host may lack, so the
/// crate's run-every-workload test leaves them to their own tests and the e2e suite.
pub const KINDS: [&str; 5] = ["iperf3", "fio", "sysbench", "stress-ng", "command"];

/// Where tools are looked for inside an environment (an agent's PATH may be empty).
const PATH: [&str; 6] = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// Raw output kept per trial: the tail of stdout beyond this is cut (a JSON document is kept whole
/// up to it; fio's and iperf3's are a few KiB).
const KEEP_STDOUT: usize = 256 << 10;
const KEEP_STDERR: usize = 4 << 10;

/// The Debian package that provides each tool, for the refusal.
fn package_of(prog: &str) -> &str {
    match prog {
        "stress-ng" => "stress-ng",
        "iperf3" => "iperf3",
        "fio" => "fio",
        "sysbench" => "sysbench",
        "glusterd" | "gluster" | "glusterfsd" => "glusterfs-server",
        "glusterfs" => "glusterfs-client",
        other => other,
    }
}

/// The child gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG): no daemon,
/// client or helper outlives the run (or the agent) that started it.
pub fn die_with_parent(cmd: &mut Command) {
    signal_with_parent(cmd, libc::SIGKILL);
}

/// The child gets `sig` when the thread that started it ends (PR_SET_PDEATHSIG). SIGTERM for a
/// program that must stop its own children in turn (GNU make kills its jobs and removes their
/// half-written targets on SIGTERM; on SIGKILL its compilers would run on, orphaned).
pub fn signal_with_parent(cmd: &mut Command, sig: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and affects only the child being created; the closure
    // captures one integer and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// How a workload that runs a program fails.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0} does not exist")]
    NoSuchFile(String),
    #[error("{prog} is not installed: apt-get install {package}")]
    NotInstalled { prog: String, package: String },
    #[error("{0} needs a writable temporary directory, and this environment has none ($TMPDIR, /tmp, /var/tmp, /dev/shm and the scratch disk are read-only or missing)")]
    NoTmp(String),
    #[error("{0} needs a scratch disk (none was given to this environment)")]
    NoScratch(&'static str),
    #[error("cannot start {prog}: {source}")]
    Start {
        prog: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{prog} exited with {how}: {stderr}")]
    Exited { prog: String, how: String, stderr: String },
    #[error("{prog} printed no figure virtperf could read: {stdout}")]
    NoFigure { prog: String, stdout: String },
    /// Reading a figure out of its output (a JSON pointer, a pattern).
    #[error("{0}")]
    Output(String),
    #[error("no command line")]
    NoCommand,
    #[error(transparent)]
    Os(#[from] crate::error::OsError),
    #[error("the {0}'s thread panicked")]
    Panicked(&'static str),
}

impl crate::error::Kinded for ToolError {
    fn kind(&self) -> crate::error::FailureKind {
        use crate::error::FailureKind as K;
        match self {
            ToolError::NoSuchFile(_)
            | ToolError::NotInstalled { .. }
            | ToolError::NoTmp(_)
            | ToolError::NoScratch(_) => K::Unsupported,
            ToolError::Start { source, .. } => crate::error::kind_of_io(source),
            ToolError::Os(e) => e.kind(),
            ToolError::Exited { .. }
            | ToolError::NoFigure { .. }
            | ToolError::Output(_)
            | ToolError::NoCommand
            | ToolError::Panicked(_) => K::Other,
        }
    }
}

/// The tool's path inside this environment, or how to get it.
pub fn find_program(prog: &str) -> Result<String, ToolError> {
    if prog.contains('/') {
        return if std::path::Path::new(prog).is_file() {
            Ok(prog.to_string())
        } else {
            Err(ToolError::NoSuchFile(prog.to_string()))
        };
    }
    PATH.iter().map(|d| format!("{d}/{prog}")).find(|p| std::path::Path::new(p).is_file()).ok_or_else(|| {
        ToolError::NotInstalled { prog: prog.to_string(), package: package_of(prog).to_string() }
    })
}

fn tail(b: &[u8], n: usize) -> String {
    let s = String::from_utf8_lossy(b);
    let cut = s.len().saturating_sub(n);
    let cut = (cut..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len());
    s[cut..].to_string()
}

/// What one run of a tool left.
#[derive(Debug)]
pub struct Ran {
    pub argv: Vec<String>,
    pub stdout: String,
    pub stderr: String,
    pub status: Option<i32>,
    pub seconds: f64,
}

impl Ran {
    /// The raw output as kept with the trial.
    pub fn detail(&self) -> Value {
        json!({
            "argv": self.argv,
            "exit": self.status,
            "seconds": self.seconds,
            "stdout": tail(self.stdout.as_bytes(), KEEP_STDOUT),
            "stderr": tail(self.stderr.as_bytes(), KEEP_STDERR),
        })
    }
    /// The failure of a tool that exited non-zero (or was killed), with its stderr tail.
    pub fn check(&self) -> Result<(), ToolError> {
        match self.status {
            Some(0) => Ok(()),
            s => Err(ToolError::Exited {
                prog: self.prog().to_string(),
                how: s.map_or("a signal".to_string(), |c| format!("status {c}")),
                stderr: tail(self.stderr.trim().as_bytes(), 600),
            }),
        }
    }
    fn prog(&self) -> &str {
        self.argv.first().map(String::as_str).unwrap_or("?")
    }
}

/// Whether a file can be made in `dir` (and is removed again).
fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".virtperf-tmp-probe-{}", std::process::id()));
    let made = std::fs::OpenOptions::new().write(true).create_new(true).open(&probe).is_ok();
    if made {
        let _ = std::fs::remove_file(&probe);
    }
    made
}

/// A writable temporary directory for the tools an environment runs: `$TMPDIR` (the guest inits
/// set it to a tmpfs of theirs), else /tmp, /var/tmp, /dev/shm, else the scratch disk. Tools make
/// their files there (iperf3 its stream buffers: "unable to create a new stream: Read-only file
/// system" where the root is read-only, as UML's hostfs root is); None where nothing is writable.
pub fn writable_tmp(scratch: Option<&str>) -> Option<PathBuf> {
    let from_env = std::env::var_os("TMPDIR").filter(|v| !v.is_empty()).map(PathBuf::from);
    from_env
        .into_iter()
        .chain(["/tmp", "/var/tmp", "/dev/shm"].into_iter().map(PathBuf::from))
        .chain(scratch.map(PathBuf::from))
        .find(|d| d.is_dir() && writable(d))
}

/// Runs `argv` to its end (or until the host asks the run to stop: the tool is killed), its
/// output collected; the timed region starts right before the spawn. The tool gets a writable
/// `TMPDIR` ([`writable_tmp`]).
pub fn run_tool(argv: &[String], ctx: &RunCtx, begin: bool) -> Result<Ran, ToolError> {
    run_tool_in(argv, ctx, begin, false)
}

/// [`run_tool`], with `fresh_dir` in a fresh empty working directory of its own made in that
/// `TMPDIR` and removed when the tool has ended, however it ended (else in the agent's own).
pub fn run_tool_in(argv: &[String], ctx: &RunCtx, begin: bool, fresh_dir: bool) -> Result<Ran, ToolError> {
    let prog = find_program(&argv[0])?;
    let tmp = writable_tmp(ctx.scratch()).ok_or_else(|| ToolError::NoTmp(prog.clone()))?;
    let mut cmd = Command::new(&prog);
    cmd.args(&argv[1..])
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Held to the end of this function, whose return drops it: the directory is removed then.
    let _cwd = if fresh_dir {
        let d = tempfile::Builder::new().prefix("virtperf-cmd-").tempdir_in(&tmp).map_err(|source| {
            ToolError::Start { prog: format!("{prog} (its working directory in {})", tmp.display()), source }
        })?;
        cmd.current_dir(d.path());
        Some(d)
    } else {
        None
    };
    if begin {
        ctx.begin();
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|source| ToolError::Start { prog: prog.clone(), source })?;
    // Both pipes drained on their own threads: a tool that fills one would block forever.
    let pipe = |what: &str| ToolError::Start {
        prog: prog.clone(),
        source: std::io::Error::other(format!("no {what} pipe")),
    };
    let mut out = child.stdout.take().ok_or_else(|| pipe("stdout"))?;
    let mut err = child.stderr.take().ok_or_else(|| pipe("stderr"))?;
    let (stdout, stderr, status) = std::thread::scope(|s| {
        let a = s.spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        });
        let b = s.spawn(move || {
            let mut v = Vec::new();
            let _ = err.read_to_end(&mut v);
            v
        });
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st.code(),
                Ok(None) if ctx.stopped() => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        (a.join().unwrap_or_default(), b.join().unwrap_or_default(), status)
    });
    let seconds = t0.elapsed().as_secs_f64();
    Ok(Ran {
        argv: std::iter::once(prog).chain(argv[1..].iter().cloned()).collect(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        status,
        seconds,
    })
}

/// The output of a tool that ran: its samples, its raw output kept as `extra.tool`.
fn output(ran: &Ran, samples: Vec<Sample>) -> Result<Output, crate::error::Error> {
    if samples.is_empty() {
        return Err(ToolError::NoFigure {
            prog: ran.prog().to_string(),
            stdout: tail(ran.stdout.trim().as_bytes(), 300),
        }
        .into());
    }
    Ok(Output { samples, extra: json!({ "tool": ran.detail() }) })
}

fn parse_json(ran: &Ran) -> Result<Value, ToolError> {
    // fio prints notes before its JSON on some versions: start at the first brace.
    let s = ran.stdout.find('{').map_or("", |i| &ran.stdout[i..]);
    serde_json::from_str(s).map_err(|e| {
        ToolError::Output(format!(
            "{}'s output is not JSON ({e}): {}",
            ran.prog(),
            tail(ran.stdout.trim().as_bytes(), 300)
        ))
    })
}

// ---------------------------------------------------------------- iperf3

/// iperf3's client JSON: goodput at the receiver, the sender's retransmits, both ends' CPU.
pub fn iperf3_samples(v: &Value) -> Vec<Sample> {
    let e = &v["end"];
    let mut s = Vec::new();
    if let Some(bps) = e["sum_received"]["bits_per_second"].as_f64() {
        s.push(sample("iperf3_goodput", bps / 1e9, "Gbit/s"));
    }
    if let Some(r) = e["sum_sent"]["retransmits"].as_f64() {
        s.push(sample("iperf3_retransmits", r, "segments"));
    }
    if let Some(c) = e["cpu_utilization_percent"]["host_total"].as_f64() {
        s.push(sample("iperf3_cpu_sender", c, "%"));
    }
    if let Some(c) = e["cpu_utilization_percent"]["remote_total"].as_f64() {
        s.push(sample("iperf3_cpu_receiver", c, "%"));
    }
    s
}

/// Whether a TCP socket listens on `port` here (/proc/net/tcp and tcp6, state 0A).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3
                    && format!("{} ", &cols[1][cols[1].len().saturating_sub(5)..]) == want
                    && cols[3] == "0A"
            })
        })
    })
}

pub struct Iperf3;

impl Workload for Iperf3 {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Network
    }
    fn kind(&self) -> &'static str {
        "iperf3"
    }
    fn summary(&self) -> &'static str {
        "iperf3 itself: its client at one end of the lab and its server at the other, --json parsed"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "duration",
                kind: ParamKind::Duration { min_ms: 1000, max_ms: 3_600_000 },
                default: Some("5s"),
                help: "iperf3 -t (whole seconds)",
            },
            ParamSpec {
                name: "direction",
                kind: ParamKind::Choice(&["out", "in"]),
                default: Some("out"),
                help: "out: the environment runs the client and sends; in: the tester sends",
            },
            ParamSpec {
                name: "streams",
                kind: ParamKind::Int { min: 1, max: 128 },
                default: Some("1"),
                help: "iperf3 -P",
            },
            ParamSpec {
                name: "udp",
                kind: ParamKind::Bool,
                default: Some("false"),
                help: "iperf3 -u (with -b 0: as fast as it goes)",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec {
                name: "iperf3_goodput",
                unit: "Gbit/s",
                better: Better::Higher,
                help: "bits per second at the receiver (iperf3's sum_received)",
            },
            MetricSpec {
                name: "iperf3_retransmits",
                unit: "segments",
                better: Better::Lower,
                help: "the sender's retransmits",
            },
            MetricSpec {
                name: "iperf3_cpu_sender",
                unit: "%",
                better: Better::Lower,
                help: "iperf3's own CPU figure for the sending end",
            },
            MetricSpec {
                name: "iperf3_cpu_receiver",
                unit: "%",
                better: Better::Lower,
                help: "iperf3's own CPU figure for the receiving end",
            },
        ]
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        vec!["iperf3".into()]
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn check(&self, _p: &Params) -> Result<(), ParamError> {
        find_program("iperf3").map(|_| ()).map_err(|m| ParamError::new("kind", m.to_string()))
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?;
        let port = role.port.to_string();
        match role.side {
            virtperf_proto::Side::Server => {
                let argv: Vec<String> = ["iperf3", "-s", "-1", "-B", &role.bind, "-p", &port, "--json"]
                    .map(String::from)
                    .to_vec();
                // Ready once it listens (a probe connection would take its one test).
                let ready = std::thread::scope(|s| {
                    let h = s.spawn(|| run_tool(&argv, ctx, false));
                    let t0 = Instant::now();
                    while !listening(role.port) && t0.elapsed() < Duration::from_secs(5) && !h.is_finished() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    ctx.ready();
                    h.join().map_err(|_| ToolError::Panicked("iperf3 server"))?
                })?;
                ready.check()?;
                // The client's JSON carries the figures (both ends'); the server's is kept.
                Ok(Output { samples: Vec::new(), extra: json!({ "tool": ready.detail() }) })
            }
            virtperf_proto::Side::Client => {
                let secs = (p.u64("duration")? / 1000).max(1).to_string();
                let streams = p.u64("streams")?.to_string();
                let mut argv: Vec<String> = [
                    "iperf3", "-c", &role.peer, "-B", &role.bind, "-p", &port, "-t", &secs, "-P", &streams,
                    "--json",
                ]
                .map(String::from)
                .to_vec();
                if p.bool("udp") {
                    argv.extend(["-u", "-b", "0"].map(String::from));
                }
                // The server may need a moment past `ready` on a slow guest: iperf3 retries nothing.
                let mut ran = run_tool(&argv, ctx, true)?;
                for _ in 0..3 {
                    if ran.status == Some(0) || !ran.stdout.contains("unable to connect") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                    ran = run_tool(&argv, ctx, false)?;
                }
                ran.check()?;
                output(&ran, iperf3_samples(&parse_json(&ran)?))
            }
        }
    }
}

// ---------------------------------------------------------------- fio

/// fio's JSON: per job, bandwidth (MB/s), IOPS, completion latency mean and p99 (µs) of the
/// reads and writes it did, summed (bandwidth, IOPS) or averaged (latency) over its jobs.
pub fn fio_samples(v: &Value) -> Vec<Sample> {
    let (mut bw, mut iops, mut lat, mut p99, mut n) = (0.0, 0.0, 0.0, 0.0f64, 0usize);
    for j in v["jobs"].as_array().into_iter().flatten() {
        for dir in ["read", "write"] {
            let d = &j[dir];
            let ios = d["total_ios"].as_f64().unwrap_or(0.0);
            if ios <= 0.0 {
                continue;
            }
            bw += d["bw"].as_f64().unwrap_or(0.0) * 1024.0 / 1e6;
            iops += d["iops"].as_f64().unwrap_or(0.0);
            lat += d["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1e3;
            p99 = p99.max(d["clat_ns"]["percentile"]["99.000000"].as_f64().unwrap_or(0.0) / 1e3);
            n += 1;
        }
    }
    if n == 0 {
        return Vec::new();
    }
    vec![
        sample("fio_bw", bw, "MB/s"),
        sample("fio_iops", iops, "IO/s"),
        sample("fio_lat_mean", lat / n as f64, "µs"),
        sample("fio_lat_p99", p99, "µs"),
    ]
}

pub struct Fio;

impl Workload for Fio {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Disk
    }
    fn kind(&self) -> &'static str {
        "fio"
    }
    fn summary(&self) -> &'static str {
        "fio itself on the environment's scratch disk, --output-format=json parsed"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "rw",
                kind: ParamKind::Choice(&["read", "write", "randread", "randwrite", "readwrite", "randrw"]),
                default: Some("write"),
                help: "fio --rw",
            },
            ParamSpec {
                name: "bs",
                kind: ParamKind::Size { min: 512, max: 64 << 20 },
                default: Some("64KiB"),
                help: "fio --bs",
            },
            ParamSpec {
                name: "size",
                kind: ParamKind::Size { min: 4096, max: 1 << 40 },
                default: Some("16MiB"),
                help: "fio --size (the file, on the scratch disk)",
            },
            ParamSpec {
                name: "direct",
                kind: ParamKind::Bool,
                default: Some("false"),
                help: "fio --direct=1 (O_DIRECT)",
            },
            ParamSpec {
                name: "ioengine",
                kind: ParamKind::Choice(&["psync", "sync", "libaio", "io_uring", "mmap"]),
                default: Some("psync"),
                help: "fio --ioengine",
            },
            ParamSpec {
                name: "end_fsync",
                kind: ParamKind::Bool,
                default: Some("true"),
                help: "fio --end_fsync (the write's fsync in its time, as the disk workload's fsync = true)",
            },
            ParamSpec {
                name: "job",
                kind: ParamKind::Text,
                default: Some(""),
                help: "a fio job file on the host, run instead of the parameters (its text travels to the environment; its directory is the scratch disk)",
            },
            ParamSpec {
                name: "job_text",
                kind: ParamKind::Text,
                default: Some(""),
                help: "the job file's text, filled in by virtperf from `job`",
            },
            ParamSpec {
                name: "iodepth",
                kind: ParamKind::Int { min: 1, max: 1024 },
                default: Some("1"),
                help: "fio --iodepth",
            },
            ParamSpec {
                name: "numjobs",
                kind: ParamKind::Int { min: 1, max: 64 },
                default: Some("1"),
                help: "fio --numjobs",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec {
                name: "fio_bw",
                unit: "MB/s",
                better: Better::Higher,
                help: "bandwidth, reads and writes",
            },
            MetricSpec {
                name: "fio_iops",
                unit: "IO/s",
                better: Better::Higher,
                help: "I/O operations per second",
            },
            MetricSpec {
                name: "fio_lat_mean",
                unit: "µs",
                better: Better::Lower,
                help: "mean completion latency",
            },
            MetricSpec {
                name: "fio_lat_p99",
                unit: "µs",
                better: Better::Lower,
                help: "99th percentile completion latency",
            },
        ]
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        vec!["fio".into()]
    }
    fn needs_scratch(&self) -> bool {
        true
    }
    fn check(&self, _p: &Params) -> Result<(), ParamError> {
        find_program("fio").map(|_| ()).map_err(|m| ParamError::new("kind", m.to_string()))
    }
    /// The job file named by `job`, read on the host where its path is: its text travels with
    /// the case (`job_text`), so it reaches a guest that cannot see the host's files.
    fn read_host_files(
        &self,
        params: &mut std::collections::BTreeMap<String, Value>,
    ) -> Result<(), ParamError> {
        let Some(path) =
            params.get("job").and_then(Value::as_str).filter(|p| !p.is_empty()).map(String::from)
        else {
            return Ok(());
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ParamError::new("job", format!("cannot read the fio job file {path}: {e}")))?;
        if !text.contains('[') {
            return Err(ParamError::new("job", format!("{path} is not a fio job file (no [job] section)")));
        }
        params.insert("job_text".into(), Value::from(text));
        Ok(())
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let dir = ctx.scratch().ok_or(ToolError::NoScratch("fio"))?;
        if let Some(text) = p.str("job_text").ok().filter(|t| !t.is_empty()) {
            // The user's job file, written beside its files; fio runs it in the scratch directory.
            let path = format!("{dir}/virtperf-job.fio");
            std::fs::write(&path, text)
                .map_err(|e| crate::error::OsError::new(format!("cannot write the job file to {path}"), e))
                .map_err(ToolError::from)?;
            let argv: Vec<String> =
                vec!["fio".into(), format!("--directory={dir}"), "--output-format=json".into(), path.clone()];
            let ran = run_tool(&argv, ctx, true);
            let _ = std::fs::remove_file(&path);
            let ran = ran?;
            ran.check()?;
            return output(&ran, fio_samples(&parse_json(&ran)?));
        }
        let argv: Vec<String> = vec![
            "fio".into(),
            "--name=virtperf".into(),
            format!("--directory={dir}"),
            format!("--rw={}", p.str("rw")?),
            format!("--bs={}", p.u64("bs")?),
            format!("--size={}", p.u64("size")?),
            format!("--direct={}", u8::from(p.bool("direct"))),
            format!("--end_fsync={}", u8::from(p.bool("end_fsync"))),
            format!("--ioengine={}", p.str("ioengine")?),
            format!("--iodepth={}", p.u64("iodepth")?),
            format!("--numjobs={}", p.u64("numjobs")?),
            "--group_reporting=0".into(),
            "--unlink=1".into(),
            "--output-format=json".into(),
        ];
        let ran = run_tool(&argv, ctx, true)?;
        ran.check()?;
        output(&ran, fio_samples(&parse_json(&ran)?))
    }
}

// ---------------------------------------------------------------- sysbench

/// sysbench's text report: events per second (cpu, threads: events over total time), latency
/// average and 95th percentile (ms), MiB/s (memory).
pub fn sysbench_samples(text: &str) -> Vec<Sample> {
    let num = |key: &str| -> Option<f64> {
        text.lines().find_map(|l| {
            l.trim().strip_prefix(key).and_then(|r| r.trim().trim_end_matches('s').trim().parse().ok())
        })
    };
    let mut s = Vec::new();
    let eps =
        num("events per second:").or_else(|| Some(num("total number of events:")? / num("total time:")?));
    if let Some(e) = eps {
        s.push(sample("sysbench_events", e, "events/s"));
    }
    if let Some(a) = num("avg:") {
        s.push(sample("sysbench_lat_avg", a, "ms"));
    }
    if let Some(p) = num("95th percentile:") {
        s.push(sample("sysbench_lat_p95", p, "ms"));
    }
    if let Some(m) = text
        .lines()
        .find(|l| l.contains("MiB/sec"))
        .and_then(|l| l.split('(').nth(1)?.split_whitespace().next()?.parse::<f64>().ok())
    {
        s.push(sample("sysbench_mib", m, "MiB/s"));
    }
    s
}

pub struct Sysbench;

impl Workload for Sysbench {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Compute
    }
    fn kind(&self) -> &'static str {
        "sysbench"
    }
    fn summary(&self) -> &'static str {
        "sysbench itself: cpu, memory or threads, its report parsed"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "test",
                kind: ParamKind::Choice(&["cpu", "memory", "threads"]),
                default: Some("cpu"),
                help: "sysbench's test",
            },
            ParamSpec {
                name: "time",
                kind: ParamKind::Duration { min_ms: 1000, max_ms: 3_600_000 },
                default: Some("2s"),
                help: "sysbench --time (whole seconds)",
            },
            ParamSpec {
                name: "threads",
                kind: ParamKind::Int { min: 1, max: 256 },
                default: Some("1"),
                help: "sysbench --threads",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec {
                name: "sysbench_events",
                unit: "events/s",
                better: Better::Higher,
                help: "events per second",
            },
            MetricSpec {
                name: "sysbench_lat_avg",
                unit: "ms",
                better: Better::Lower,
                help: "mean event latency",
            },
            MetricSpec {
                name: "sysbench_lat_p95",
                unit: "ms",
                better: Better::Lower,
                help: "95th percentile event latency",
            },
            MetricSpec {
                name: "sysbench_mib",
                unit: "MiB/s",
                better: Better::Higher,
                help: "memory test: MiB transferred per second",
            },
        ]
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        vec!["sysbench".into()]
    }
    fn check(&self, _p: &Params) -> Result<(), ParamError> {
        find_program("sysbench").map(|_| ()).map_err(|m| ParamError::new("kind", m.to_string()))
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let argv = vec![
            "sysbench".to_string(),
            p.str("test")?.to_string(),
            format!("--time={}", (p.u64("time")? / 1000).max(1)),
            format!("--threads={}", p.u64("threads")?),
            "run".into(),
        ];
        let ran = run_tool(&argv, ctx, true)?;
        ran.check()?;
        output(&ran, sysbench_samples(&ran.stdout))
    }
}

// ---------------------------------------------------------------- stress-ng

/// stress-ng's `--metrics-brief` lines: bogo ops per second (real time) of each stressor, summed.
pub fn stressng_samples(text: &str) -> Vec<Sample> {
    let mut total = None;
    for l in text.lines().filter(|l| l.contains("metrc:")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        // stress-ng: metrc: [pid] NAME OPS REAL USR SYS OPS/S(real) OPS/S(usr+sys)
        if f.len() >= 10 && f[4].parse::<f64>().is_ok() {
            if let Ok(v) = f[8].parse::<f64>() {
                *total.get_or_insert(0.0) += v;
            }
        }
    }
    total.map(|t| vec![sample("stressng_bogo_ops", t, "bogo ops/s")]).unwrap_or_default()
}

pub struct StressNg;

impl Workload for StressNg {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Compute
    }
    fn kind(&self) -> &'static str {
        "stress-ng"
    }
    fn summary(&self) -> &'static str {
        "stress-ng itself: one stressor, --metrics-brief parsed (bogo ops/s)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "stressor",
                kind: ParamKind::Text,
                default: Some("cpu"),
                help: "a stress-ng stressor (cpu, vm, switch, fork, matrix, …)",
            },
            ParamSpec {
                name: "workers",
                kind: ParamKind::Int { min: 1, max: 256 },
                default: Some("1"),
                help: "instances of the stressor",
            },
            ParamSpec {
                name: "time",
                kind: ParamKind::Duration { min_ms: 1000, max_ms: 3_600_000 },
                default: Some("2s"),
                help: "stress-ng --timeout",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[MetricSpec {
            name: "stressng_bogo_ops",
            unit: "bogo ops/s",
            better: Better::Higher,
            help: "bogo operations per second, real time",
        }]
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        vec!["stress-ng".into()]
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        let s = p.str("stressor").unwrap_or("");
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ParamError::new("stressor", format!("`{s}` is not a stressor name")));
        }
        find_program("stress-ng").map(|_| ()).map_err(|m| ParamError::new("kind", m.to_string()))
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        // stress-ng makes its files in `--temp-path` (the working directory by default: the
        // host's read-only root in UML, "temp-path '.' must be readable and writeable").
        let tmp = writable_tmp(ctx.scratch()).ok_or_else(|| ToolError::NoTmp("stress-ng".into()))?;
        let argv = vec![
            "stress-ng".to_string(),
            format!("--{}", p.str("stressor")?),
            p.u64("workers")?.to_string(),
            "--timeout".into(),
            format!("{}s", (p.u64("time")? / 1000).max(1)),
            "--metrics-brief".into(),
            "--temp-path".into(),
            tmp.to_string_lossy().into_owned(),
        ];
        let mut ran = run_tool(&argv, ctx, true)?;
        // Before any stressor starts, stress-ng maps a shared buffer the size of the CPU's
        // last-level cache, read with CPUID where the kernel has no cache sysfs (UML): 480 MiB on
        // one host of this kind, more than a 256 MiB UML guest can map ("cache allocate: failed
        // to mmap shared cache buffer, errno=12"), whatever the stressor. Asked again at the next
        // cache level down (2 MiB there), and the command line kept with the trial says so.
        for level in ["2", "1"] {
            if ran.status == Some(0) || !stressng_cache_buffer_refused(&ran) {
                break;
            }
            let lower: Vec<String> =
                argv.iter().cloned().chain(["--cache-level".to_string(), level.to_string()]).collect();
            ran = run_tool(&lower, ctx, false)?;
        }
        ran.check()?;
        // stress-ng reports on stderr or stdout depending on its version: read both.
        let text = format!("{}\n{}", ran.stdout, ran.stderr);
        let s = stressng_samples(&text);
        ran.stdout = text;
        output(&ran, s)
    }
}

/// stress-ng refused to start because its shared cache buffer (sized from the CPU's last-level
/// cache) could not be mapped in this environment's memory.
fn stressng_cache_buffer_refused(ran: &Ran) -> bool {
    let needle = "failed to mmap shared cache buffer";
    ran.stderr.contains(needle) || ran.stdout.contains(needle)
}

// ---------------------------------------------------------------- command

/// The value at a JSON pointer (`/end/sum/bits_per_second`): a number, or text that is one.
pub fn json_metric(doc: &str, pointer: &str) -> Result<f64, ToolError> {
    let out = ToolError::Output;
    let s = doc.find(['{', '[']).map_or("", |i| &doc[i..]);
    // The first JSON document of the output: a tool may print more after it.
    let v: Value = serde_json::Deserializer::from_str(s)
        .into_iter::<Value>()
        .next()
        .ok_or_else(|| out("the output holds no JSON".into()))?
        .map_err(|e| out(format!("the output is not JSON ({e})")))?;
    let at = v.pointer(pointer).ok_or_else(|| out(format!("the JSON pointer {pointer} matches nothing")))?;
    at.as_f64()
        .or_else(|| at.as_str().and_then(|t| t.trim().parse().ok()))
        .ok_or_else(|| out(format!("{pointer} is {at}, not a number")))
}

/// The first capture group (or the whole match) of `pattern` in `text`, as a number.
pub fn regex_metric(text: &str, pattern: &str) -> Result<f64, ToolError> {
    let out = ToolError::Output;
    let re = regex::Regex::new(pattern).map_err(|e| out(format!("bad regular expression: {e}")))?;
    let c = re
        .captures(text)
        .ok_or_else(|| out(format!("the pattern {pattern} matches nothing in the output")))?;
    let m = c.get(1).or_else(|| c.get(0)).map(|m| m.as_str()).unwrap_or("");
    m.trim().parse().map_err(|_| out(format!("the pattern matched `{m}`, not a number")))
}

pub struct CommandLine;

impl Workload for CommandLine {
    fn kind(&self) -> &'static str {
        "command"
    }
    fn summary(&self) -> &'static str {
        "any command line: its wall time on both clocks, a metric from its JSON output by pointer and one by regular expression"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "cmd",
                kind: ParamKind::Text,
                default: None,
                help: "the command line (shell words; no shell is run), run in a fresh empty working directory removed after each trial (read inputs by absolute path)",
            },
            ParamSpec {
                name: "json",
                kind: ParamKind::Text,
                default: Some(""),
                help: "a JSON pointer into its stdout: command_json",
            },
            ParamSpec {
                name: "regex",
                kind: ParamKind::Text,
                default: Some(""),
                help: "a regular expression on its stdout, first group a number: command_regex",
            },
            ParamSpec {
                name: "unit",
                kind: ParamKind::Text,
                default: Some(""),
                help: "the unit of command_json and command_regex",
            },
            ParamSpec {
                name: "better",
                kind: ParamKind::Choice(&["lower", "higher"]),
                default: Some("lower"),
                help: "which way command_json and command_regex are better",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec {
                name: "command_time",
                unit: "s",
                better: Better::Lower,
                help: "wall time of the command",
            },
            MetricSpec {
                name: "command_json",
                unit: "",
                better: Better::Lower,
                help: "the value at the JSON pointer",
            },
            MetricSpec {
                name: "command_regex",
                unit: "",
                better: Better::Lower,
                help: "the regular expression's number",
            },
        ]
    }
    fn better_for(&self, metric: &str, p: &Value) -> Option<Better> {
        (metric == "command_json" || metric == "command_regex").then(|| {
            if p["better"].as_str() == Some("higher") {
                Better::Higher
            } else {
                Better::Lower
            }
        })
    }
    fn programs(&self, p: &Params) -> Vec<String> {
        p.str("cmd").ok().and_then(shlex::split).and_then(|w| w.into_iter().next()).into_iter().collect()
    }
    fn marks_timed_region(&self) -> bool {
        true
    }
    fn on_host_clock(&self, _p: &Params, host_ns: u64) -> Vec<Sample> {
        vec![sample("command_time_host", host_ns as f64 / 1e9, "s")]
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        let words = p
            .str("cmd")
            .ok()
            .and_then(shlex::split)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| ParamError::new("cmd", "give the command line: cmd = \"prog args…\""))?;
        if let Ok(r) = p.str("regex") {
            if !r.is_empty() {
                regex::Regex::new(r)
                    .map_err(|e| ParamError::new("regex", format!("bad regular expression: {e}")))?;
            }
        }
        if let Ok(j) = p.str("json") {
            if !j.is_empty() && !j.starts_with('/') {
                return Err(ParamError::new(
                    "json",
                    format!("`{j}` is not a JSON pointer (it starts with /)"),
                ));
            }
        }
        find_program(&words[0]).map(|_| ()).map_err(|m| ParamError::new("cmd", m.to_string()))
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let argv = shlex::split(p.str("cmd")?).filter(|w| !w.is_empty()).ok_or(ToolError::NoCommand)?;
        // A fresh, empty working directory per trial, in the environment's temporary directory
        // (natively the agent's, which virtperf records and removes with the instance), removed
        // when the trial ends however it ends: what the command writes by a relative path is
        // the same kind of place in every environment and is not left behind.
        let ran = run_tool_in(&argv, ctx, true, true)?;
        ran.check()?;
        let unit = p.str("unit").unwrap_or("");
        let mut s = vec![sample("command_time", ran.seconds, "s")];
        if let Some(ptr) = p.str("json").ok().filter(|j| !j.is_empty()) {
            s.push(sample("command_json", json_metric(&ran.stdout, ptr)?, unit));
        }
        if let Some(re) = p.str("regex").ok().filter(|r| !r.is_empty()) {
            s.push(sample("command_regex", regex_metric(&ran.stdout, re)?, unit));
        }
        output(&ran, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kinded;

    #[test]
    fn iperf3_json_gives_goodput_retransmits_and_both_cpus() {
        let v = json!({"end": {
            "sum_sent": {"bits_per_second": 2.1e10, "retransmits": 7},
            "sum_received": {"bits_per_second": 2.0988747225e10},
            "cpu_utilization_percent": {"host_total": 44.1, "remote_total": 41.1}
        }});
        let s = iperf3_samples(&v);
        assert_eq!(s[0], sample("iperf3_goodput", 20.988747225, "Gbit/s"));
        assert_eq!(s[1].value, 7.0);
        assert_eq!((s[2].value, s[3].value), (44.1, 41.1));
        assert!(iperf3_samples(&json!({"error": "unable to connect"})).is_empty());
    }

    #[test]
    fn fio_json_sums_bandwidth_and_keeps_the_worst_p99() {
        let v = json!({"jobs": [
            {"write": {"total_ios": 64, "bw": 64000, "iops": 1000.0, "clat_ns": {"mean": 2000.0, "percentile": {"99.000000": 9000}}},
             "read": {"total_ios": 0}},
            {"read": {"total_ios": 10, "bw": 1000, "iops": 10.0, "clat_ns": {"mean": 4000.0, "percentile": {"99.000000": 5000}}},
             "write": {"total_ios": 0}}
        ]});
        let s = fio_samples(&v);
        assert!((s[0].value - 65000.0 * 1024.0 / 1e6).abs() < 1e-9, "{s:?}");
        assert_eq!(s[1].value, 1010.0);
        assert_eq!(s[2].value, 3.0);
        assert_eq!(s[3].value, 9.0);
        assert!(fio_samples(&json!({"jobs": []})).is_empty());
    }

    #[test]
    fn sysbench_reports_are_read_for_each_test() {
        let cpu = "CPU speed:\n    events per second:  4058.54\n\nGeneral statistics:\n    total time:                          1.0003s\n    total number of events:              4071\n\nLatency (ms):\n         min:                                    0.18\n         avg:                                    0.25\n         max:                                    8.31\n         95th percentile:                        0.56\n";
        let s = sysbench_samples(cpu);
        assert_eq!(s[0], sample("sysbench_events", 4058.54, "events/s"));
        assert_eq!((s[1].value, s[2].value), (0.25, 0.56));
        let threads = "    total time:                          1.0007s\n    total number of events:              2374\n";
        assert!((sysbench_samples(threads)[0].value - 2374.0 / 1.0007).abs() < 1e-6);
        let mem =
            "Total operations: 65536 (3293820.65 per second)\n\n64.00 MiB transferred (3216.62 MiB/sec)\n";
        assert!(sysbench_samples(mem).iter().any(|s| s.metric == "sysbench_mib" && s.value == 3216.62));
    }

    #[test]
    fn stress_ng_refusing_its_cache_buffer_is_recognised_on_either_stream() {
        let ran = |stdout: &str, stderr: &str| Ran {
            argv: vec!["stress-ng".into()],
            stdout: stdout.into(),
            stderr: stderr.into(),
            status: Some(1),
            seconds: 0.0,
        };
        let msg = "stress-ng: error: [45] cache allocate: failed to mmap shared cache buffer, errno=12 (Cannot allocate memory)";
        assert!(stressng_cache_buffer_refused(&ran("", msg)));
        assert!(stressng_cache_buffer_refused(&ran(msg, "")));
        assert!(!stressng_cache_buffer_refused(&ran("", "stress-ng: error: [45] fork: cannot fork")));
    }

    #[test]
    fn stress_ng_metric_lines_are_summed_over_stressors() {
        let t = "stress-ng: metrc: [10493] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s\nstress-ng: metrc: [10493]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)\nstress-ng: metrc: [10493] cpu                1567      1.00      0.70      0.29      1566.92        1578.94\n";
        assert_eq!(stressng_samples(t), vec![sample("stressng_bogo_ops", 1566.92, "bogo ops/s")]);
        assert!(stressng_samples("stress-ng: info: nothing").is_empty());
    }

    #[test]
    fn command_metrics_by_pointer_and_by_pattern_or_a_clear_error() {
        assert_eq!(json_metric("note\n{\"a\": {\"b\": [1, 2.5]}}", "/a/b/1").unwrap(), 2.5);
        assert_eq!(json_metric("{\"a\": \" 7 \"}", "/a").unwrap(), 7.0);
        assert_eq!(json_metric("{\"a\": 1}\nrate: 2\n", "/a").unwrap(), 1.0, "text after the document");
        assert!(json_metric("{\"a\": 1}", "/x").unwrap_err().to_string().contains("matches nothing"));
        assert!(json_metric("not json", "/a").unwrap_err().to_string().contains("JSON"));
        assert_eq!(regex_metric("rate: 12.5 MB/s", r"rate: ([0-9.]+)").unwrap(), 12.5);
        assert!(regex_metric("rate: n/a", r"rate: ([0-9.]+)")
            .unwrap_err()
            .to_string()
            .contains("matches nothing"));
        assert!(regex_metric("x", "(").unwrap_err().to_string().contains("bad regular expression"));
    }

    #[test]
    fn a_command_runs_in_a_fresh_directory_of_its_own_removed_after_the_trial() {
        let p: std::collections::BTreeMap<String, serde_json::Value> =
            [("cmd".to_string(), json!("sh -c 'pwd; ls -A; touch made-here'"))].into();
        let run = || {
            let out = CommandLine.run(&Params(&p), &RunCtx::detached()).unwrap();
            let text = out.extra["tool"]["stdout"].as_str().unwrap().to_string();
            let mut lines = text.lines();
            let dir = PathBuf::from(lines.next().unwrap());
            (dir, lines.map(str::to_string).collect::<Vec<_>>())
        };
        let (a, listed) = run();
        assert!(listed.is_empty(), "the directory was empty when the command began: {listed:?}");
        assert!(a.file_name().unwrap().to_string_lossy().starts_with("virtperf-cmd-"), "{}", a.display());
        assert!(a.starts_with(writable_tmp(None).unwrap()), "{} in the temporary directory", a.display());
        assert!(!a.exists(), "{} removed with what the command made in it", a.display());
        let (b, listed) = run();
        assert!(listed.is_empty() && b != a, "each trial its own: {} then {}", a.display(), b.display());
        // A command that fails leaves nothing either.
        let p: std::collections::BTreeMap<String, serde_json::Value> =
            [("cmd".to_string(), json!("sh -c 'touch x; pwd >&2; exit 3'"))].into();
        let e = CommandLine.run(&Params(&p), &RunCtx::detached()).unwrap_err().to_string();
        let dir = e.lines().find_map(|l| l.split_whitespace().find(|w| w.contains("virtperf-cmd-"))).unwrap();
        assert!(!std::path::Path::new(dir).exists(), "{dir} left behind by a failed command: {e}");
    }

    #[test]
    fn a_tool_runs_its_output_is_kept_and_a_failure_names_its_stderr() {
        let ctx = RunCtx::detached();
        let ok =
            run_tool(&["sh".into(), "-c".into(), "echo '{\"v\": 3}'; echo warn >&2".into()], &ctx, false)
                .unwrap();
        assert_eq!(ok.status, Some(0));
        assert_eq!(json_metric(&ok.stdout, "/v").unwrap(), 3.0);
        assert_eq!(ok.detail()["stderr"], "warn\n");
        let bad = run_tool(&["sh".into(), "-c".into(), "echo boom >&2; exit 3".into()], &ctx, false).unwrap();
        let e = bad.check().unwrap_err();
        assert_eq!(e.kind(), crate::error::FailureKind::Other);
        let e = e.to_string();
        assert!(e.contains("status 3") && e.contains("boom"), "{e}");
        let missing = find_program("no-such-tool-here").unwrap_err();
        assert_eq!(
            missing.kind(),
            crate::error::FailureKind::Unsupported,
            "a missing program is this environment's lack"
        );
        assert!(missing.to_string().contains("apt-get install no-such-tool-here"));
        assert!(find_program("fio").is_err() || find_program("fio").unwrap().ends_with("/fio"));
    }
}
