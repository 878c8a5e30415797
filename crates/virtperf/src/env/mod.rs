//! Environments: where an agent runs.
//!
//! Every environment kind implements [`Environment`]: it declares its parameters, says whether it
//! can run on this host (and what to do when it cannot), and launches an [`Instance`]: an agent
//! reachable over a byte stream plus a way to read the host-side CPU time of everything the
//! instance runs. To add one, see `docs/environments/README.md`.

pub mod conn;
pub mod container;
pub mod gvisor;
pub mod native;
pub mod qemu;
pub mod uml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::Value;
use virtperf_proto::Reply;
use virtperf_workload::ParamSpec;

use crate::ledger::Ledger;
pub use conn::{CallError, Conn, Tail};

/// Whether a kind can run here; when it cannot, why and what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    pub usable: bool,
    pub detail: String,
    pub fix: Option<String>,
}

impl Availability {
    pub fn yes(detail: impl Into<String>) -> Self {
        Availability { usable: true, detail: detail.into(), fix: None }
    }
    pub fn no(detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Availability { usable: false, detail: detail.into(), fix: Some(fix.into()) }
    }
    /// The launch-time form: an unusable kind is a [`LaunchError::Unavailable`] naming the fix.
    pub fn require(self) -> Result<(), LaunchError> {
        if self.usable {
            return Ok(());
        }
        Err(LaunchError::Unavailable(format!("{}; fix: {}", self.detail, self.fix.unwrap_or_default())))
    }
}

/// What a launch needs from the run.
pub struct LaunchCtx<'a> {
    /// The `virtperf` binary to run as the agent.
    pub exe: &'a Path,
    /// A private directory of this run for bundles, sockets, logs.
    pub run_dir: &'a Path,
    /// Unique within the host, e.g. `vp12345-0-1` (pid of the orchestrator, env index, launch number).
    pub instance_id: String,
    pub ledger: &'a mut Ledger,
    /// How long the agent may take to say hello.
    pub boot_timeout: Duration,
    pub cancel: &'a AtomicBool,
    /// The lab namespace the instance's network lives in (`/run/netns/NAME`); None = its own
    /// unconnected namespace (container) or the host's (native) when the run has no lab.
    pub netns: Option<PathBuf>,
    /// For guests ([`Environment::wants_tap`]) in a lab: the tap to attach the NIC to, the
    /// address to give it (/24) and the MTU.
    pub guest_net: Option<GuestNet>,
}

#[derive(Debug, Clone)]
pub struct GuestNet {
    pub tap: String,
    pub addr: std::net::Ipv4Addr,
    pub mtu: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// the environment cannot run here
    #[error("{0}")]
    Unavailable(String),
    /// starting a process failed
    #[error("cannot start {what}: {source}")]
    Spawn { what: String, source: std::io::Error },
    /// the agent did not say hello
    #[error("the agent did not become ready: {0}")]
    NoHello(#[from] CallError),
    /// the agent stayed silent until the boot deadline
    #[error("the agent did not become ready: {0}")]
    Silent(String),
    /// preparing files for the instance failed
    #[error("cannot prepare the instance: {0}")]
    Prepare(String),
}

pub trait Environment: Sync {
    fn kind(&self) -> &'static str;
    fn summary(&self) -> &'static str;
    fn params(&self) -> &'static [ParamSpec];
    /// Checks that need the host (a CPU that exists) or several parameters together.
    fn check(&self, _params: &BTreeMap<String, Value>) -> Result<(), (String, String)> {
        Ok(())
    }
    /// Whether this kind, with these parameters, can run here (no side effects).
    fn availability(&self, params: &BTreeMap<String, Value>) -> Availability;
    /// True for guests with their own kernel: the lab gives them a tap (bridged to the lab)
    /// instead of an address, and the guest configures the address on its own NIC.
    fn wants_tap(&self) -> bool {
        false
    }
    /// Work done once before a run creates anything (e.g. building a guest image); an error
    /// stops the run before it starts, like an unavailable kind.
    fn prepare(&self, _params: &BTreeMap<String, Value>) -> Result<(), String> {
        Ok(())
    }
    /// Version of the runtime underneath (for the manifest).
    fn runtime_version(&self, _params: &BTreeMap<String, Value>) -> Option<String> {
        None
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError>;
}

/// Every environment kind this build knows.
pub static REGISTRY: &[&dyn Environment] =
    &[&native::Native, &container::Container, &gvisor::Gvisor, &uml::Uml, &qemu::Qemu];

pub fn find(kind: &str) -> Option<&'static dyn Environment> {
    REGISTRY.iter().copied().find(|e| e.kind() == kind)
}

pub fn kinds() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.kind()).collect()
}

/// Reads the host-side CPU time of an instance, in nanoseconds.
#[derive(Debug, Clone)]
pub enum CpuProbe {
    /// Sum of `/proc/PID/task/*/schedstat` run times (ns resolution; threads included).
    Proc(u32),
    /// A cgroup v1 `cpuacct.usage` file (ns).
    CgroupV1(PathBuf),
    /// A cgroup v2 `cpu.stat` file (`usage_usec`).
    CgroupV2(PathBuf),
}

impl CpuProbe {
    pub fn read_ns(&self) -> Option<u64> {
        match self {
            CpuProbe::Proc(pid) => {
                let mut total = 0u64;
                for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
                    let p = t.ok()?.path().join("schedstat");
                    if let Ok(s) = std::fs::read_to_string(p) {
                        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
                    }
                }
                Some(total)
            }
            CpuProbe::CgroupV1(p) => std::fs::read_to_string(p).ok()?.trim().parse().ok(),
            CpuProbe::CgroupV2(p) => {
                let s = std::fs::read_to_string(p).ok()?;
                let usec: u64 = s.lines().find_map(|l| l.strip_prefix("usage_usec "))?.trim().parse().ok()?;
                Some(usec * 1000)
            }
        }
    }
}

/// The cgroup v1 `cpuacct` mount, or the v2 unified root (`/sys/fs/cgroup` with `cgroup.controllers`).
pub fn cpu_cgroup_root() -> Option<(PathBuf, bool)> {
    for m in crate::ledger::cgroup_mounts() {
        let name = m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.split(',').any(|c| c == "cpuacct") {
            return Some((m, false));
        }
    }
    let root = Path::new("/sys/fs/cgroup");
    root.join("cgroup.controllers").exists().then(|| (root.to_path_buf(), true))
}

/// The probe of cgroup `virtperf/ID` (which may not exist yet: a runtime creates it).
pub fn cgroup_probe(id: &str) -> Option<CpuProbe> {
    let (root, v2) = cpu_cgroup_root()?;
    let dir = root.join("virtperf").join(id);
    Some(if v2 {
        CpuProbe::CgroupV2(dir.join("cpu.stat"))
    } else {
        CpuProbe::CgroupV1(dir.join("cpuacct.usage"))
    })
}

/// Creates cgroup `virtperf/ID` for CPU accounting (ledger first) and moves `pid` into it.
/// Covers every thread and child of the process, exited ones included, in ns. `None` when
/// cgroups are not writable here (not root): the caller falls back to [`CpuProbe::Proc`].
pub fn join_accounting_cgroup(ledger: &mut Ledger, id: &str, pid: u32) -> Option<CpuProbe> {
    let (root, _) = cpu_cgroup_root()?;
    ledger.record_once(crate::ledger::Entry::Cgroup { rel: "virtperf".into() });
    ledger.record(crate::ledger::Entry::Cgroup { rel: format!("virtperf/{id}") });
    let dir = root.join("virtperf").join(id);
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).ok()?;
    cgroup_probe(id)
}

/// Creates cgroup `virtperf/ID` (ledger first) and makes `cmd`'s child enter it before exec, so
/// that every process it ever forks is accounted (UML forks host helpers as it boots). Returns
/// the probe and the cgroup's `cgroup.procs` (kept open until the spawn), or None when cgroups
/// are not writable here.
pub fn accounting_cgroup_on_spawn(
    cmd: &mut Command,
    ledger: &mut Ledger,
    id: &str,
) -> Option<(CpuProbe, std::fs::File, String)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (root, _) = cpu_cgroup_root()?;
    ledger.record_once(crate::ledger::Entry::Cgroup { rel: "virtperf".into() });
    let rel = format!("virtperf/{id}");
    ledger.record(crate::ledger::Entry::Cgroup { rel: rel.clone() });
    let dir = root.join(&rel);
    std::fs::create_dir_all(&dir).ok()?;
    let procs = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")).ok()?;
    let fd = procs.as_raw_fd();
    // SAFETY: write(2) of a static buffer to a descriptor the parent keeps open until the spawn;
    // "0" moves the calling (child) process. Async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Some((cgroup_probe(id)?, procs, rel))
}

/// Kills every process in cgroup `rel` (below a cgroup mount), waits until it is empty, removes
/// it and forgets its ledger entry.
pub fn kill_cgroup(ledger: &mut Ledger, rel: &str) {
    let e = crate::ledger::Entry::Cgroup { rel: rel.to_string() };
    for _ in 0..100 {
        let mut any = false;
        for m in crate::ledger::cgroup_mounts() {
            if let Ok(s) = std::fs::read_to_string(m.join(rel).join("cgroup.procs")) {
                for pid in s.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    any = true;
                    // SAFETY: kill(2) of a process inside the cgroup this instance created.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        crate::ledger::undo(&e, ledger.state_dir());
        if !any && !crate::ledger::cgroup_mounts().iter().any(|m| m.join(rel).exists()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ledger.forget(&e);
}

/// Teardown of a guest whose host processes all run in one accounting cgroup (UML, QEMU): kill
/// everything in it, then remove the instance's directory.
pub struct GuestTeardown {
    pub cgroup: Option<String>,
    pub dir: PathBuf,
}

impl Teardown for GuestTeardown {
    fn teardown(&mut self, ledger: &mut Ledger) {
        // Helpers may outlive the main process (UML's do): the cgroup holds them all.
        if let Some(rel) = self.cgroup.take() {
            kill_cgroup(ledger, &rel);
        }
        ledger.remove_dir(&self.dir);
    }
}

/// Starts a guest's host process: inside the lab namespace (`ctx.netns`) and, from its first
/// instruction, inside the cgroup `virtperf/ID`, with the agent's line on its stdin/stdout and its
/// stderr (console, runtime messages) as the tail and, with `log`, a bounded file; then waits for
/// the hello. Every failure tears down what `teardown` covers.
pub fn launch_guest(
    ctx: &mut LaunchCtx,
    mut cmd: Command,
    what: &str,
    log: Option<PathBuf>,
    mut teardown: GuestTeardown,
) -> Result<Instance, LaunchError> {
    let netns = match join_netns_on_spawn(&mut cmd, ctx.netns.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            teardown.teardown(ctx.ledger);
            return Err(e);
        }
    };
    let cg = accounting_cgroup_on_spawn(&mut cmd, ctx.ledger, &ctx.instance_id);
    let probe = cg.as_ref().map(|c| c.0.clone());
    teardown.cgroup = cg.as_ref().map(|c| c.2.clone());
    let started = Instant::now();
    let spawned = spawn_piped_logged(&mut cmd, what, ctx.ledger, true, log);
    drop(netns);
    drop(cg);
    let (child, stdin, stdout, tail) = match spawned {
        Ok(x) => x,
        Err(e) => {
            teardown.teardown(ctx.ledger);
            return Err(e);
        }
    };
    let inst = Instance {
        cpu: Some(probe.unwrap_or(CpuProbe::Proc(child.id()))),
        agent_pid: 0,
        child: Some(child),
        start_time: Default::default(),
        rtt: Default::default(),
        teardown: Box::new(teardown),
        conn: Conn::new(stdout, Box::new(stdin), tail),
    };
    inst.await_hello(ctx, started)
}

/// How to stop an instance for good.
pub trait Teardown: Send {
    /// Stops everything the instance runs and removes what it created (ledger entries included).
    fn teardown(&mut self, ledger: &mut Ledger);
}

/// A launched environment with a ready agent.
pub struct Instance {
    pub conn: Conn,
    pub cpu: Option<CpuProbe>,
    /// Launch to hello, on the host's monotonic clock.
    pub start_time: Duration,
    pub agent_pid: u32,
    /// Median idle round trip to the agent, measured after launch ([`Instance::calibrate_rtt`]).
    pub rtt: Duration,
    pub teardown: Box<dyn Teardown>,
    /// The process we spawned (agent or runtime), reaped at teardown.
    pub child: Option<Child>,
}

impl Instance {
    /// The end of every launch: waits for the agent's hello (its pid, when the launcher could not
    /// know it — `agent_pid` 0 — and the host-clock time since `started`); an instance that never
    /// says hello is killed and its resources released.
    pub fn await_hello(mut self, ctx: &mut LaunchCtx, started: Instant) -> Result<Instance, LaunchError> {
        match await_hello(&mut self.conn, ctx, started) {
            Ok((pid, t)) => {
                if self.agent_pid == 0 {
                    self.agent_pid = pid;
                }
                self.start_time = t;
                Ok(self)
            }
            Err(e) => {
                self.kill(ctx.ledger);
                Err(e)
            }
        }
    }

    /// Measures the idle round trip (median of 9 pings) that host-clock durations subtract.
    pub fn calibrate_rtt(&mut self, cancel: &AtomicBool) {
        let mut rtts = Vec::new();
        for _ in 0..9 {
            let t0 = Instant::now();
            if self.conn.call(virtperf_proto::Request::Ping, Duration::from_secs(5), cancel).is_err() {
                return;
            }
            rtts.push(t0.elapsed());
        }
        rtts.sort();
        self.rtt = rtts[rtts.len() / 2];
    }

    /// Asks the agent to exit, waits briefly, then tears everything down.
    pub fn shutdown(mut self, ledger: &mut Ledger) {
        let never = AtomicBool::new(false);
        let _ = self.conn.call(virtperf_proto::Request::Shutdown, Duration::from_secs(2), &never);
        if let Some(child) = self.child.as_mut() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill(ledger);
    }

    /// Tears down without asking (the agent is hung or dead).
    pub fn kill(mut self, ledger: &mut Ledger) {
        // The process first (its cgroup can only be removed once it is empty), then the rest.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            ledger.forget_process(child.id());
        }
        self.teardown.teardown(ledger);
    }
}

/// Spawns a process with piped stdin/stdout/stderr, in its own process group (so a terminal's
/// Ctrl-C reaches only the orchestrator, which then stops it in order), dying with its parent
/// where `die_with_parent` is set. The pid is written to the ledger before anything else happens.
pub fn spawn_piped(
    cmd: &mut Command,
    what: &str,
    ledger: &mut Ledger,
    die_with_parent: bool,
) -> Result<(Child, ChildStdin, ChildStdout, Tail), LaunchError> {
    spawn_piped_logged(cmd, what, ledger, die_with_parent, None)
}

/// [`spawn_piped`], with stderr (a guest's console) also kept in a bounded log file.
pub fn spawn_piped_logged(
    cmd: &mut Command,
    what: &str,
    ledger: &mut Ledger,
    die_with_parent: bool,
    log: Option<PathBuf>,
) -> Result<(Child, ChildStdin, ChildStdout, Tail), LaunchError> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    if die_with_parent {
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and only affects the child being
        // created; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn { what: what.to_string(), source })?;
    ledger.record_process(child.id(), what);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(LaunchError::Prepare("the child's pipes were not created".into()));
    };
    let tail = Tail::default();
    tail.follow_logged(stderr, log);
    Ok((child, stdin, stdout, tail))
}

/// Makes `cmd`'s child join the network namespace at `path` (between fork and exec). The
/// returned descriptor must stay open until the spawn.
pub fn join_netns_on_spawn(
    cmd: &mut Command,
    path: Option<&Path>,
) -> Result<Option<std::fs::File>, LaunchError> {
    let Some(p) = path else { return Ok(None) };
    let f = std::fs::File::open(p).map_err(|e| LaunchError::Prepare(format!("{}: {e}", p.display())))?;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = f.as_raw_fd();
    // SAFETY: setns(2) on the forked child with a descriptor the parent keeps open until spawn
    // returns; async-signal-safe, allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(Some(f))
}

/// Waits for the agent's hello; returns its pid and the host-clock time it arrived.
fn await_hello(conn: &mut Conn, ctx: &LaunchCtx, started: Instant) -> Result<(u32, Duration), LaunchError> {
    let (reply, at) = match conn.hello(started + ctx.boot_timeout, ctx.cancel) {
        Ok(x) => x,
        // A silent guest: what its console said last is the best clue.
        Err(CallError::Timeout(d)) => {
            return Err(LaunchError::Silent(format!(
                "no hello within {:.1} s{}",
                d.as_secs_f64(),
                conn.tail().render()
            )))
        }
        Err(e) => return Err(e.into()),
    };
    match reply {
        Reply::Hello { pid, .. } => Ok((pid, at.duration_since(started))),
        other => Err(LaunchError::NoHello(CallError::Protocol(format!("expected hello, got {other:?}")))),
    }
}

/// Looks a program up in PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Path::new(prog).is_file().then(|| PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|p| p.is_file())
}

/// First line of `prog --version`.
pub fn version_of(prog: &str) -> Option<String> {
    let out = Command::new(prog).arg("--version").stdin(Stdio::null()).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().next().map(|l| l.trim().to_string())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Number of CPUs the host has online.
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Parses a cpuset list like `0`, `0-1`, `0,2-3` and checks every CPU exists here.
pub fn check_cpuset(s: &str) -> Result<Vec<usize>, String> {
    let online = host_cpus();
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let (a, b): (usize, usize) = match (a.parse(), b.parse()) {
            (Ok(a), Ok(b)) if a <= b => (a, b),
            _ => return Err(format!("`{s}` is not a CPU list like 0, 0-1 or 0,2")),
        };
        if b >= online {
            return Err(format!("CPU {b} does not exist: this host has CPUs 0-{}", online - 1));
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpusets() {
        assert_eq!(check_cpuset("0").unwrap(), vec![0]);
        assert!(check_cpuset("9999").unwrap_err().contains("does not exist"));
        assert!(check_cpuset("1-0").is_err());
        assert!(check_cpuset("x").is_err());
    }

    #[test]
    fn proc_probe_reads_a_busy_process() {
        let mut child = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        let p = CpuProbe::Proc(child.id());
        std::thread::sleep(Duration::from_millis(50));
        let a = p.read_ns().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let b = p.read_ns().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(b - a > 50_000_000, "a busy loop used {} ns of CPU in 200 ms", b - a);
    }
}
