//! Remote hosts over SSH, this machine's side (docs/remote.md).
//!
//! An environment with `host = "b"` runs on the `[[host]]` named b:
//! 1. **the binary**: virtperf copies itself to `$VIRTPERF_CACHE/bin` on the host (default
//!    `~/.cache/virtperf/bin`) as `virtperf-<sha256[..16]>`, written under a temporary name,
//!    checked against its full SHA-256 there and renamed; a later run finds it by its checksum.
//!    The copies of the last 3 builds are kept.
//! 2. **preflight** (`virtperf remote-check` on the host): each of its environments' availability
//!    and one-time work, and the host's facts (name, kernel, CPU), before anything is created.
//! 3. **each launch** is one SSH session running `virtperf remote-launch` ([`serve`]): it opens the
//!    host's own ledger (sweeping what a killed one left there), launches the environment with the
//!    same launcher code as a local run, says `ready` with the instance's start time on the host's
//!    clock, then relays the agent's line both ways. Killing the session (or the orchestrator)
//!    ends it: the host tears its instance down.
//!
//! ssh always runs with `BatchMode=yes`: keys come from the user's agent or configuration, there
//! is never a prompt, and virtperf stores no password.

pub mod serve;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::env::{Instance, LaunchCtx, LaunchError, Teardown};
use crate::experiment::HostDef;
use crate::ledger::Ledger;

/// What `remote-launch` reads first: which environment to launch, and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub kind: String,
    pub params: BTreeMap<String, Value>,
    pub instance_id: String,
    pub boot_timeout_ms: u64,
    /// The instance joins the host's network (network workloads between hosts), instead of the
    /// unconnected namespace a container has by default.
    #[serde(default)]
    pub host_network: bool,
    /// The instance gets a directory on the host's scratch disk (`VIRTPERF_SCRATCH` there): its
    /// disk workloads write into it, its guest's disk image lives in it.
    #[serde(default)]
    pub scratch: bool,
}

/// `remote-launch`'s first line (after `@vpctl ready `): the instance's start on the host's clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ready {
    pub start_ns: u64,
    pub agent_pid: u32,
    /// Where its disk workloads write, inside the environment, and what backs it on the host.
    #[serde(default)]
    pub scratch: Option<(String, String)>,
}

/// What `remote-check` reads: the environments to run on the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckRequest {
    pub envs: Vec<(String, String, BTreeMap<String, Value>)>,
}

/// What `remote-check` answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckReply {
    pub facts: Facts,
    /// Per environment, in order: usable, detail, fix, runtime version.
    pub envs: Vec<EnvCheck>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EnvCheck {
    pub usable: bool,
    pub detail: String,
    pub fix: Option<String>,
    pub runtime: Option<String>,
}

/// A host's facts, stored with each of its environments.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Facts {
    pub hostname: String,
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
}

impl Facts {
    pub fn here() -> Facts {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)).map(|s| s.trim().to_string())
            })
            .unwrap_or_default();
        Facts {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpu,
            cpus: crate::host::host_cpus(),
        }
    }
}

/// The prefix of `remote-launch`'s and `remote-check`'s own lines on the session.
pub const CTL: &str = "@vpctl ";

/// The ssh command for `host`: BatchMode (never a prompt), a connect timeout, server keepalives
/// (a host that vanishes ends the session within 15 s).
pub fn ssh(host: &HostDef) -> Command {
    let mut c = Command::new("ssh");
    if let Some(cfg) = &host.ssh_config {
        c.arg("-F").arg(cfg);
    }
    c.args([
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=3",
        "-T",
        "--",
        &host.ssh,
    ]);
    c
}

/// What to do about an ssh failure, from its message.
fn ssh_fix(host: &HostDef, stderr: &str) -> String {
    let dest = &host.ssh;
    if stderr.contains("Permission denied") || stderr.contains("publickey") {
        format!("install your public key in the host's authorized_keys (ssh-copy-id {dest}) or load it into ssh-agent; check with: ssh {dest} true")
    } else if stderr.contains("Could not resolve") {
        format!("`{dest}`: the name does not resolve; give an address or a Host of your ssh config")
    } else {
        format!("check that host `{}` is up and its sshd answers: ssh {dest} true", host.name)
    }
}

/// Runs `cmd` on `host` (a shell command line), with `input` on its stdin; its stdout.
fn run_on(host: &HostDef, cmd: &str, input: &[u8]) -> Result<String, (String, String)> {
    let mut c = ssh(host);
    c.arg(cmd).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child =
        c.spawn().map_err(|e| (format!("ssh: {e}"), "apt-get install -y openssh-client".to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A host that refuses stops reading: the error is in ssh's status and stderr.
        let _ = stdin.write_all(input);
    }
    let out = child.wait_with_output().map_err(|e| (format!("ssh: {e}"), String::new()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(ssh_failure(host, cmd, &out))
}

/// Why an ssh command failed, and the fix: exit 255 is ssh's own (the host unreachable, the key
/// refused), anything else the remote command's.
fn ssh_failure(host: &HostDef, cmd: &str, out: &std::process::Output) -> (String, String) {
    let err = crate::host::command::one_line(&String::from_utf8_lossy(&out.stderr));
    let why = if out.status.code() == Some(255) {
        format!("cannot reach host `{}` over SSH ({}): {err}", host.name, host.ssh)
    } else {
        format!("on host `{}`: `{cmd}` failed: {err}", host.name)
    };
    let fix = ssh_fix(host, &err);
    (why, fix)
}

/// This binary's SHA-256 (hex), computed once.
fn exe_sha() -> Result<(&'static str, &'static [u8]), String> {
    static SHA: OnceLock<Result<(String, Vec<u8>), String>> = OnceLock::new();
    let r = SHA.get_or_init(|| {
        use sha2::Digest;
        let exe = std::env::current_exe().map_err(|e| format!("/proc/self/exe: {e}"))?;
        let bytes = std::fs::read(&exe).map_err(|e| format!("{}: {e}", exe.display()))?;
        let sum = sha2::Sha256::digest(&bytes);
        let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
        Ok((hex, bytes))
    });
    match r {
        Ok((h, b)) => Ok((h.as_str(), b.as_slice())),
        Err(e) => Err(e.clone()),
    }
}

/// Makes sure this build is on `host`; returns its path there (absolute).
pub fn ensure_binary(host: &HostDef) -> Result<String, (String, String)> {
    let (sha, bytes) = exe_sha().map_err(|e| (e, "report this".to_string()))?;
    let short = &sha[..16];
    // Present already (found by its checksum in the name)? The partial copies of shells that no
    // longer run (a session cut mid-copy: the host crashed, its sshd was killed) go first: nothing
    // else would ever remove them.
    let probe = format!(
        "d=\"${{VIRTPERF_CACHE:-$HOME/.cache/virtperf}}/bin\"; f=\"$d/virtperf-{short}\"; \
         for o in \"$d\"/virtperf-*.tmp.*; do [ -e \"$o\" ] || continue; kill -0 \"${{o##*.}}\" 2>/dev/null || rm -f \"$o\"; done; \
         if [ -x \"$f\" ]; then echo \"present $f\"; else echo \"missing $f\"; fi"
    );
    let out = run_on(host, &probe, b"")?;
    let line = out.lines().last().unwrap_or("").trim().to_string();
    if let Some(p) = line.strip_prefix("present ") {
        return Ok(p.to_string());
    }
    let Some(path) = line.strip_prefix("missing ") else {
        return Err((
            format!("host `{}` answered `{line}` to the binary check", host.name),
            "check the host's shell".into(),
        ));
    };
    // Copied under a temporary name, checked there, renamed; older builds beyond 3 removed.
    let copy = format!(
        "set -e; f='{path}'; d=$(dirname \"$f\"); mkdir -p \"$d\"; t=\"$f.tmp.$$\"; cat > \"$t\"; \
         s=$(sha256sum \"$t\" | cut -d' ' -f1); \
         if [ \"$s\" != '{sha}' ]; then rm -f \"$t\"; echo \"checksum mismatch: $s\" >&2; exit 1; fi; \
         chmod 755 \"$t\"; mv \"$t\" \"$f\"; \
         ls -1t \"$d\"/virtperf-* 2>/dev/null | grep -v '\\.tmp\\.' | tail -n +4 | while read -r old; do rm -f \"$old\"; done; \
         echo copied"
    );
    run_on(host, &copy, bytes)?;
    Ok(path.to_string())
}

/// What the preflight learnt about each host: where its binary is, its facts, each environment's
/// runtime. Kept for the run (launches, the manifest).
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub bin: String,
    pub facts: Facts,
    pub runtimes: BTreeMap<String, Option<String>>,
    /// The host's wall clock minus this machine's, and the uncertainty (± half the round trip of
    /// the best exchange), in ns. Reported, never applied to a duration.
    pub clock: Option<ClockOffset>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockOffset {
    pub offset_ns: i64,
    pub uncertainty_ns: u64,
}

/// CLOCK_REALTIME in ns (the clocks two machines can be compared on).
pub fn realtime_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The offset from exchanges (here before, host's, here after), NTP's way: the exchange with the
/// shortest round trip, its midpoint against the host's reading.
pub fn best_offset(samples: &[(i64, i64, i64)]) -> Option<ClockOffset> {
    let (t0, t1, t2) = samples.iter().copied().filter(|(a, _, c)| c >= a).min_by_key(|(a, _, c)| c - a)?;
    Some(ClockOffset { offset_ns: t1 - (t0 + (t2 - t0) / 2), uncertainty_ns: ((t2 - t0) / 2) as u64 })
}

/// How many clock exchanges the preflight makes.
const CLOCK_EXCHANGES: usize = 7;

/// `remote-check` on `host`: the request, the clock exchanges, then its answer.
fn check_session(
    host: &HostDef,
    bin: &str,
    req: &CheckRequest,
) -> Result<(String, Option<ClockOffset>), (String, String)> {
    let mut c = ssh(host);
    c.arg(format!("{} remote-check", quote(bin)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child =
        c.spawn().map_err(|e| (format!("ssh: {e}"), "apt-get install -y openssh-client".to_string()))?;
    let mut samples = Vec::new();
    if let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) {
        let mut r = BufReader::new(stdout);
        let mut ok = writeln!(stdin, "{}", serde_json::to_string(req).unwrap_or_default()).is_ok();
        let mut rest = String::new();
        for _ in 0..CLOCK_EXCHANGES {
            if !ok {
                break;
            }
            let t0 = realtime_ns();
            ok = writeln!(stdin, "{CTL}clock").and_then(|_| stdin.flush()).is_ok();
            // Lines bounded as frames are (1 MiB): the other host's output is not trusted.
            let l = match virtperf_proto::read_line(&mut r) {
                Ok(l) if ok => String::from_utf8_lossy(&l).into_owned() + "\n",
                _ => break,
            };
            let t2 = realtime_ns();
            match l
                .trim_end()
                .strip_prefix(CTL)
                .and_then(|x| x.strip_prefix("clock "))
                .and_then(|v| v.parse::<i64>().ok())
            {
                Some(t1) => samples.push((t0, t1, t2)),
                None => {
                    rest.push_str(&l);
                    break;
                }
            }
        }
        drop(stdin);
        let _ = (&mut r).take(crate::host::command::OUTPUT_CAP as u64).read_to_string(&mut rest);
        let out = child.wait_with_output().map_err(|e| (format!("ssh: {e}"), String::new()))?;
        if out.status.success() {
            return Ok((rest, best_offset(&samples)));
        }
        return Err(ssh_failure(host, "virtperf remote-check", &out));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(("the ssh pipes were not created".into(), String::new()))
}

static HOSTS: Mutex<Vec<(String, HostInfo)>> = Mutex::new(Vec::new());

pub fn info(host: &str) -> Option<HostInfo> {
    HOSTS.lock().ok()?.iter().find(|(n, _)| n == host).map(|(_, i)| i.clone())
}

/// `remote-check`'s answer: its control line, with one verdict per environment asked about (an
/// answer about fewer would leave an environment unchecked).
fn parse_check_reply(out: &str, asked: usize) -> Option<CheckReply> {
    let reply: CheckReply = serde_json::from_str(out.lines().find_map(|l| l.strip_prefix(CTL))?).ok()?;
    (reply.envs.len() == asked).then_some(reply)
}

/// Preflight of one host: the binary, then each of `envs` (name, kind, params) checked there.
/// Problems are returned as lines for the run's refusal (with the fix).
pub fn preflight(host: &HostDef, envs: &[(String, String, BTreeMap<String, Value>)]) -> Vec<String> {
    let bin = match ensure_binary(host) {
        Ok(b) => b,
        Err((why, fix)) => return vec![format!("{why}; fix: {fix}")],
    };
    let req = CheckRequest { envs: envs.to_vec() };
    let (out, clock) = match check_session(host, &bin, &req) {
        Ok(o) => o,
        Err((why, fix)) => return vec![format!("{why}; fix: {fix}")],
    };
    let reply = match parse_check_reply(&out, envs.len()) {
        Some(r) => r,
        None => {
            return vec![format!(
                "host `{}` answered the environment check with `{}`; fix: check that virtperf runs there (ssh {} {} doctor)",
                host.name,
                out.trim(),
                host.ssh,
                bin
            )]
        }
    };
    let mut problems = Vec::new();
    let mut runtimes = BTreeMap::new();
    for ((name, kind, _), c) in envs.iter().zip(reply.envs.iter()) {
        if !c.usable {
            problems.push(format!(
                "environment `{name}` ({kind}) on host `{}`: {}; fix: {}",
                host.name,
                c.detail,
                c.fix.clone().unwrap_or_default()
            ));
        }
        runtimes.insert(name.clone(), c.runtime.clone());
    }
    if let Ok(mut h) = HOSTS.lock() {
        h.retain(|(n, _)| *n != host.name);
        h.push((host.name.clone(), HostInfo { bin, facts: reply.facts, runtimes, clock }));
    }
    problems
}

/// A shell word.
fn quote(s: &str) -> String {
    shlex::try_quote(s).map(|c| c.into_owned()).unwrap_or_else(|_| format!("'{s}'"))
}

/// The runtime description of environment `env` on `host`, for the run's records: the host's
/// facts, then what the host said about the environment.
pub fn runtime_of(host: &str, env: &str) -> Option<String> {
    let i = info(host)?;
    let f = &i.facts;
    let rt = i.runtimes.get(env).cloned().flatten().unwrap_or_default();
    let clock = i
        .clock
        .map(|c| {
            format!(
                "; its clock {:+.3} ms ± {:.3} ms from this one's",
                c.offset_ns as f64 / 1e6,
                c.uncertainty_ns as f64 / 1e6
            )
        })
        .unwrap_or_default();
    Some(format!("on host {host} ({}, kernel {}, {} × {}{clock}): {rt}", f.hostname, f.kernel, f.cpus, f.cpu))
}

/// The session's stdin, shared by the agent's line and the CPU probe: every write of a whole
/// buffer (a frame, a control line) holds the lock, so lines never interleave; each with a
/// deadline (a session that stopped reading fails the call).
#[derive(Clone)]
struct Shared(Arc<Mutex<crate::env::conn::DeadlineWriter<std::process::ChildStdin>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.flush()
    }
}

/// A remote instance's host CPU, read on its host: `@vpctl cpu` on the session, answered with
/// `@vpctl cpu NS` (its cgroup's or process's CPU time there, or `-`). Its instant is uncertain by
/// half a round trip (about 0.1 ms on a LAN), small against the samples' 100 ms.
#[derive(Clone)]
pub struct RemoteCpu {
    writer: Shared,
    replies: Arc<Mutex<std::sync::mpsc::Receiver<Option<u64>>>>,
}

impl std::fmt::Debug for RemoteCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemoteCpu")
    }
}

impl crate::env::CpuReader for RemoteCpu {
    fn read_ns(&self) -> Option<u64> {
        // One question at a time: the lock is held from the question to its answer.
        let rx = self.replies.lock().ok()?;
        while rx.try_recv().is_ok() {}
        let mut w = self.writer.clone();
        w.write_all(format!("{CTL}cpu\n").as_bytes()).ok()?;
        w.flush().ok()?;
        rx.recv_timeout(Duration::from_secs(2)).ok().flatten()
    }
}

/// Nothing of a remote instance lives here but the ssh process, which [`Instance::kill`] stops;
/// its host tears the instance down when the session ends.
struct RemoteTeardown;

impl Teardown for RemoteTeardown {
    fn teardown(&mut self, _ledger: &mut Ledger) {}
}

/// Launches environment `kind` with `params` on `host` (one SSH session running
/// `remote-launch`) and returns an Instance whose agent line is relayed through that session.
pub fn launch(
    host: &HostDef,
    kind: &str,
    params: &BTreeMap<String, Value>,
    host_network: bool,
    scratch: bool,
    ctx: &mut LaunchCtx,
) -> Result<Instance, LaunchError> {
    let bin = info(&host.name).map(|i| i.bin).ok_or_else(|| {
        LaunchError::Unavailable(format!("host `{}` was not checked before the run", host.name))
    })?;
    let req = LaunchRequest {
        kind: kind.to_string(),
        params: params.clone(),
        instance_id: ctx.instance_id.clone(),
        boot_timeout_ms: ctx.boot_timeout.as_millis() as u64,
        host_network,
        scratch,
    };
    let mut cmd = ssh(host);
    cmd.arg(format!("{} remote-launch", quote(&bin)));
    let (child, mut stdin, stdout, tail) = spawn_session(&mut cmd, host, ctx.ledger)?;
    let mut inst_child = Some(child);
    let fail = |ctx: &mut LaunchCtx, child: &mut Option<std::process::Child>, e: LaunchError| {
        if let Some(mut c) = child.take() {
            let _ = c.kill();
            let _ = crate::host::command::wait_within(&mut c, Duration::from_secs(5));
            ctx.ledger.forget_process(c.id());
        }
        e
    };
    let line = serde_json::to_string(&req).unwrap_or_default();
    if let Err(e) = writeln!(stdin, "{line}").and_then(|_| stdin.flush()) {
        return Err(fail(
            ctx,
            &mut inst_child,
            LaunchError::Prepare(format!("the SSH session to host `{}`: {e}", host.name)),
        ));
    }
    let deadline = ctx.boot_timeout + Duration::from_secs(10);
    let (first, reader) = match first_line(stdout, deadline, &host.name, &tail) {
        Ok(x) => x,
        Err(e) => return Err(fail(ctx, &mut inst_child, e)),
    };
    let ready = match parse_ready(first.trim_end(), &host.name, &|| {
        // The session ended (ssh failed): its stderr says why.
        std::thread::sleep(Duration::from_millis(50));
        tail.render()
    }) {
        Ok(r) => r,
        Err(why) => return Err(fail(ctx, &mut inst_child, LaunchError::Prepare(why))),
    };
    // The session's lines: the CPU probe's answers apart, the agent's frames to the Conn.
    let (cpu_tx, cpu_rx) = std::sync::mpsc::channel();
    let (pipe_r, mut pipe_w) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return Err(fail(ctx, &mut inst_child, LaunchError::Prepare(format!("a pipe: {e}")))),
    };
    let spans = crate::env::conn::RelaySpans::default();
    let relayed = spans.clone();
    std::thread::spawn(move || {
        let mut reader = reader;
        demux(&mut reader, &cpu_tx, &relayed, &mut pipe_w);
    });
    let stdin = Shared(Arc::new(Mutex::new(crate::env::conn::DeadlineWriter::new(stdin))));
    let cpu = RemoteCpu { writer: stdin.clone(), replies: Arc::new(Mutex::new(cpu_rx)) };
    let mut conn = crate::env::conn::Conn::new(pipe_r, Box::new(stdin), tail);
    conn.set_relay(spans);
    let mut inst = Instance {
        scratch: ready
            .scratch
            .clone()
            .map(|(dir, what)| crate::env::Scratch { dir, what: format!("{what} (on host {})", host.name) }),
        cleanup: Vec::new(),
        // Its host CPU, read on its host (`remote-launch` answers from the instance's probe there).
        cpu: Some(crate::env::CpuProbe::Remote(Arc::new(cpu))),
        agent_pid: ready.agent_pid,
        child: inst_child,
        start_time: Default::default(),
        phases: Default::default(),
        rtt: Default::default(),
        rtt_jitter: Default::default(),
        go_floor: None,
        id: String::new(),
        own_clock: false,
        teardown: Box::new(RemoteTeardown),
        conn,
        // A remote instance shares no CPU with this machine's trials: nothing to pause here.
        pauser: Some(Arc::new(|_| Ok(()))),
        inner_addr: None,
    };
    inst = inst.await_hello(ctx, Instant::now())?;
    // The start as the host measured it, on its own clock (the SSH set-up is not the
    // environment's).
    inst.start_time = Duration::from_nanos(ready.start_ns);
    Ok(inst)
}

/// The session's first line — ready (with the start on the host's clock) or why not — and the
/// reader of the rest. Read on a thread so that the boot deadline holds whatever the session does.
fn first_line(
    stdout: std::process::ChildStdout,
    deadline: Duration,
    host: &str,
    tail: &crate::env::conn::Tail,
) -> Result<(String, BufReader<std::process::ChildStdout>), LaunchError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        // Bounded as a frame is; the session's end is an empty line (parse_ready says why).
        let res = match virtperf_proto::read_line(&mut r) {
            Ok(l) => Ok(String::from_utf8_lossy(&l).into_owned() + "\n"),
            Err(virtperf_proto::FrameError::Eof) => Ok(String::new()),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        };
        let _ = tx.send((res, r));
    });
    match rx.recv_timeout(deadline) {
        Ok((Ok(l), r)) => Ok((l, r)),
        Ok((Err(e), _)) => Err(LaunchError::Prepare(format!("the SSH session to host `{host}`: {e}"))),
        Err(_) => Err(LaunchError::Silent {
            why: format!(
                "host `{host}` said nothing within {:.0} s{}",
                deadline.as_secs_f64(),
                tail.render()
            ),
            console: tail.lines(),
        }),
    }
}

/// The first line of a `remote-launch` session: `@vpctl ready {…}` (with the start on the
/// host's clock), `@vpctl error WHY`, or anything else — the session ended (`ended()` says why,
/// from its stderr) or printed something it should not have.
fn parse_ready(first: &str, host: &str, ended: &dyn Fn() -> String) -> Result<Ready, String> {
    match first.strip_prefix(CTL) {
        Some(rest) if rest.starts_with("ready ") => serde_json::from_str(&rest["ready ".len()..])
            .map_err(|e| format!("host `{host}`: a bad ready line ({e})")),
        Some(rest) if rest.starts_with("error ") => {
            Err(format!("on host `{host}`: {}", &rest["error ".len()..]))
        }
        _ => {
            let why = if first.is_empty() { ended() } else { format!("; it printed `{first}`") };
            Err(format!("the SSH session to host `{host}` ended before the environment was ready{why}"))
        }
    }
}

/// Splits a session's lines: the CPU probe's answers (`@vpctl cpu N`, or None for what does not
/// parse) to `cpu`; armed runs' spans timed on the host (`@vpctl span TAG NS`, before the result
/// they belong to) into `spans`; every other line, the agent's frames, to `agent`. Ends with the
/// session, or when the agent's side is gone.
fn demux(
    reader: &mut impl BufRead,
    cpu: &std::sync::mpsc::Sender<Option<u64>>,
    spans: &crate::env::conn::RelaySpans,
    agent: &mut impl Write,
) {
    let answer = format!("{CTL}cpu ");
    let span = format!("{CTL}span ");
    loop {
        let line = match virtperf_proto::read_line(reader) {
            Ok(l) => l,
            // An overlong line is skipped whole; the session stays in sync.
            Err(virtperf_proto::FrameError::TooLong) => continue,
            Err(_) => break,
        };
        if let Some(v) = line.strip_prefix(answer.as_bytes()) {
            let _ = cpu.send(std::str::from_utf8(v).ok().and_then(|v| v.trim().parse::<u64>().ok()));
            continue;
        }
        if let Some(v) = line.strip_prefix(span.as_bytes()) {
            let parsed = std::str::from_utf8(v).ok().and_then(|v| {
                let (tag, ns) = v.trim().split_once(' ')?;
                Some((tag.parse::<u64>().ok()?, ns.parse::<u64>().ok()?))
            });
            if let (Some((tag, ns)), Ok(mut m)) = (parsed, spans.lock()) {
                m.insert(tag, ns);
            }
            continue;
        }
        let mut l = line;
        l.push(b'\n');
        if agent.write_all(&l).is_err() {
            break;
        }
    }
}

/// Spawns the ssh session (recorded in the ledger); its stderr feeds a tail that ends with the
/// line saying the session closed, so that a trial cut by a lost connection says so.
fn spawn_session(
    cmd: &mut Command,
    host: &HostDef,
    ledger: &mut Ledger,
) -> Result<
    (std::process::Child, std::process::ChildStdin, std::process::ChildStdout, crate::env::conn::Tail),
    LaunchError,
> {
    let (child, stdin, stdout, stderr) = crate::env::spawn_with_pipes(cmd, "ssh", ledger, true)?;
    let tail = crate::env::conn::Tail::default();
    let closed = format!("the SSH connection to host `{}` closed\n", host.name);
    tail.follow_logged(stderr.chain(std::io::Cursor::new(closed.into_bytes())), None);
    Ok((child, stdin, stdout, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `bytes` as the session's lines: (CPU answers, well-formed spans, what the agent gets).
    fn expected_demux(bytes: &[u8]) -> (usize, Vec<(u64, u64)>, Vec<u8>) {
        let (mut cpu, mut spans, mut agent) = (0, Vec::new(), Vec::new());
        let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        if lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        for l in lines {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            if l.starts_with(b"@vpctl cpu ") {
                cpu += 1;
            } else if let Some(v) = l.strip_prefix(b"@vpctl span ") {
                let parsed = std::str::from_utf8(v).ok().and_then(|v| {
                    let (t, n) = v.trim().split_once(' ')?;
                    Some((t.parse().ok()?, n.parse().ok()?))
                });
                spans.extend(parsed);
            } else {
                agent.extend_from_slice(l);
                agent.push(b'\n');
            }
        }
        (cpu, spans, agent)
    }

    /// The SSH session's lines come from another machine (its shell's banner, a broken binary):
    /// the demultiplexer never panics, gives the agent every line that is not a control line, in
    /// order and whole, answers the CPU probe once per answer line, and keeps only well-formed
    /// spans.
    #[test]
    fn fuzz_session_demux() {
        use virtperf_proto::fuzzing::{fuzz, mutated, with_corpus};
        let seeds = vec![
            b"@vpctl cpu 123\n@vpctl span 7 5000\n{\"v\":1,\"tag\":7,\"type\":\"result\"}\n".to_vec(),
            b"{\"v\":1,\"tag\":0,\"type\":\"hello\"}\r\n@vpctl cpu x\n".to_vec(),
        ];
        let tokens = &["@vpctl ", "cpu ", "span ", "\n", "\r", " ", "-1", "18446744073709551616", "7 9"];
        fuzz("remote session demux", mutated(with_corpus("remote session demux", seeds), tokens), |bytes| {
            let (tx, rx) = std::sync::mpsc::channel();
            let spans = crate::env::conn::RelaySpans::default();
            let mut agent = Vec::new();
            demux(&mut std::io::Cursor::new(&bytes), &tx, &spans, &mut agent);
            let (cpu, want_spans, want_agent) = expected_demux(&bytes);
            proptest::prop_assert_eq!(rx.try_iter().count(), cpu);
            proptest::prop_assert_eq!(agent, want_agent);
            let got = spans.lock().unwrap().clone();
            for (t, n) in want_spans.iter().rev() {
                // The last span of a tag wins.
                proptest::prop_assert!(got.contains_key(t), "span {} {} lost", t, n);
            }
            proptest::prop_assert_eq!(
                got.len(),
                want_spans.iter().map(|x| x.0).collect::<std::collections::BTreeSet<_>>().len()
            );
            Ok(())
        });
    }

    /// A remote host's first line and its environment check are read without panicking whatever
    /// they hold; a check that answers for fewer environments than asked is refused, not taken
    /// as "usable" for the missing ones.
    #[test]
    fn fuzz_ready_line_and_check_reply() {
        use virtperf_proto::fuzzing::{fuzz, mutated, with_corpus, JSON_TOKENS};
        let reply = CheckReply {
            facts: Facts::default(),
            envs: vec![EnvCheck { usable: true, detail: "ok".into(), ..Default::default() }],
        };
        let one = format!("{CTL}{}", serde_json::to_string(&reply).unwrap());
        let seeds = vec![
            br#"@vpctl ready {"agent_pid":12,"start_ns":5000,"scratch":null}"#.to_vec(),
            one.clone().into_bytes(),
            b"@vpctl error no such kind".to_vec(),
        ];
        fuzz(
            "remote ready and check lines",
            mutated(with_corpus("remote ready and check lines", seeds), JSON_TOKENS),
            |bytes| {
                let text = String::from_utf8_lossy(&bytes);
                let _ = parse_ready(text.trim_end(), "b", &|| "; it ended".into());
                for asked in 0..3 {
                    if let Some(r) = parse_check_reply(&text, asked) {
                        proptest::prop_assert_eq!(r.envs.len(), asked);
                    }
                }
                Ok(())
            },
        );
        assert!(parse_check_reply(&one, 1).is_some());
        assert!(parse_check_reply(&one, 2).is_none(), "an environment without a verdict is not usable");
        assert!(parse_ready("@vpctl error no kvm", "b", &|| String::new()).unwrap_err().contains("no kvm"));
        assert!(parse_ready("", "b", &|| "; ssh: connection refused".into())
            .unwrap_err()
            .contains("refused"));
    }

    #[test]
    fn clock_offset_from_the_shortest_exchange() {
        // Host 5 ms ahead; round trips of 4, 1 and 3 ms: the 1 ms one decides, ± 0.5 ms.
        let ms = 1_000_000;
        let s =
            [(0, 5 * ms + 2 * ms, 4 * ms), (10 * ms, 15 * ms + ms / 2, 11 * ms), (20 * ms, 26 * ms, 23 * ms)];
        assert_eq!(best_offset(&s), Some(ClockOffset { offset_ns: 5 * ms, uncertainty_ns: (ms / 2) as u64 }));
        assert_eq!(best_offset(&[]), None);
        assert_eq!(best_offset(&[(5, 1, 4)]), None, "a clock that went back is no sample");
    }
}
