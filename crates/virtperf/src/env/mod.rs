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
pub mod scratch;
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
    /// Usable once [`Environment::prepare`] has done its one-time work (a kernel build), which
    /// `doctor` does not start.
    pub needs_prepare: bool,
}

impl Availability {
    pub fn yes(detail: impl Into<String>) -> Self {
        Availability { usable: true, detail: detail.into(), fix: None, needs_prepare: false }
    }
    pub fn no(detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Availability { usable: false, detail: detail.into(), fix: Some(fix.into()), needs_prepare: false }
    }
    /// Usable after `prepare()`, which is what `detail` describes.
    pub fn after_prepare(detail: impl Into<String>) -> Self {
        Availability { needs_prepare: true, ..Availability::yes(detail) }
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
    /// This instance's directory on the host's scratch disk (created and recorded by the run,
    /// removed with the instance), when the run has workloads that write files or guests with
    /// a disk: where a bind mount's, an overlay's or a disk image's bytes land.
    pub scratch_dir: Option<PathBuf>,
}

/// Where a disk workload's files land in an instance: the directory it sees, and what is
/// underneath (stored with every trial that writes there).
#[derive(Debug, Clone, PartialEq)]
pub struct Scratch {
    /// The directory inside the environment.
    pub dir: String,
    /// What backs it, e.g. "ext4 on virtio-blk /dev/vda: raw image on the host's ext4 (cache=none)".
    pub what: String,
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
    #[error("the agent did not become ready: {source}")]
    NoHello { source: CallError, console: Vec<String> },
    /// the agent stayed silent until the boot deadline
    #[error("the agent did not become ready: {why}")]
    Silent { why: String, console: Vec<String> },
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
    /// The memory a workload inside may use, and the parameter that sets it (`mem`, `memory`).
    fn memory_bytes(&self, _params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        None
    }
    /// True when the environment keeps time with a clock of its own (a guest kernel's, gVisor's
    /// Sentry): its figures are headlined on the host's clock, which the guest cannot skew (seed
    /// 002's lesson). False when it reads the host kernel's clock itself (native, containers).
    fn own_clock(&self) -> bool {
        false
    }
    /// Where a disk workload's bytes land with these parameters (checked before a run starts):
    /// a description, or the key and message saying how to give the environment a disk.
    fn scratch(&self, _params: &BTreeMap<String, Value>) -> Result<String, (String, String)> {
        Err(("disk".into(), format!("environment kind `{}` has no scratch disk", self.kind())))
    }
    /// The disk image a launch writes on the host's scratch disk, and the key that sizes it.
    fn disk_bytes(&self, _params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        None
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
    /// The process's CPU clock (`clock_getcpuclockid`): every thread, exited ones included, in
    /// ns. One process only: not its children.
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
                let mut clock: libc::clockid_t = 0;
                // SAFETY: clock_getcpuclockid writes one clockid_t we own; a gone pid is an error.
                if unsafe { libc::clock_getcpuclockid(*pid as libc::pid_t, &mut clock) } != 0 {
                    return None;
                }
                let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: clock_gettime writes into the timespec we own.
                if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
                    return None;
                }
                Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
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
    // The freezer hierarchy too (v1: a mount of its own), so the run can pause it.
    if let Some((froot, false)) = controller_dir("freezer") {
        let fdir = froot.join("virtperf").join(id);
        if fdir != dir && std::fs::create_dir_all(&fdir).is_ok() {
            let _ = std::fs::write(fdir.join("cgroup.procs"), pid.to_string());
        }
    }
    cgroup_probe(id)
}

/// Pauses (`frozen`) or resumes every process of instance `id` through its cgroup's freezer
/// (v1 `freezer.state`, v2 `cgroup.freeze`), waiting up to a second for the state to settle.
/// An environment not under test must not run beside one that is: an idle TCG guest still burns
/// host CPU on its timers, UML's and gVisor's host processes wake.
pub fn freeze(id: &str, frozen: bool) -> Result<(), String> {
    let (root, v2) = controller_dir("freezer")
        .or_else(|| {
            let r = Path::new("/sys/fs/cgroup");
            r.join("cgroup.controllers").exists().then(|| (r.to_path_buf(), true))
        })
        .ok_or("no cgroup freezer on this host")?;
    let dir = root.join("virtperf").join(id);
    let (file, value, done_file, done) = if v2 {
        (
            "cgroup.freeze",
            if frozen { "1" } else { "0" },
            "cgroup.events",
            if frozen { "frozen 1" } else { "frozen 0" },
        )
    } else {
        (
            "freezer.state",
            if frozen { "FROZEN" } else { "THAWED" },
            "freezer.state",
            if frozen { "FROZEN" } else { "THAWED" },
        )
    };
    std::fs::write(dir.join(file), value).map_err(|e| format!("{}: {e}", dir.join(file).display()))?;
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut pause = Duration::from_micros(20);
    loop {
        let state = std::fs::read_to_string(dir.join(done_file)).unwrap_or_default();
        if state.lines().any(|l| l.trim() == done) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            if frozen {
                // Half-frozen helps nobody: resume, and say so.
                let _ = std::fs::write(dir.join(file), if v2 { "0" } else { "THAWED" });
            }
            return Err(format!("{} did not reach {done} within 1 s", dir.display()));
        }
        // Idle processes freeze within microseconds: poll fast first, then back off.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// The v1 mount of `controller`, or the v2 unified root when it offers that controller.
fn controller_dir(controller: &str) -> Option<(PathBuf, bool)> {
    for m in crate::ledger::cgroup_mounts() {
        let name = m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.split(',').any(|c| c == controller) {
            return Some((m, false));
        }
    }
    let root = Path::new("/sys/fs/cgroup");
    let offered = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
    offered.split_whitespace().any(|c| c == controller).then(|| (root.to_path_buf(), true))
}

/// Limits put on a guest's host processes through its cgroup.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Memory of all its host processes together (`memory.limit_in_bytes` / `memory.max`):
    /// a guest that runs away is killed by the kernel's OOM killer, not the host.
    pub memory_bytes: Option<u64>,
}

/// Creates cgroup `virtperf/ID` (ledger first) in the CPU-accounting hierarchy and, with a memory
/// limit, in the memory one, and makes `cmd`'s child enter them before exec, so that every process
/// it ever forks is accounted and limited (UML forks host helpers as it boots). Returns the CPU
/// probe, the open `cgroup.procs` files (kept until the spawn), the relative path and whether the
/// memory limit is in force; None when cgroups are not writable here (not root).
pub fn instance_cgroup_on_spawn(
    cmd: &mut Command,
    ledger: &mut Ledger,
    id: &str,
    limits: Limits,
) -> Option<(CpuProbe, Vec<std::fs::File>, String, bool)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (root, _) = cpu_cgroup_root()?;
    ledger.record_once(crate::ledger::Entry::Cgroup { rel: "virtperf".into() });
    let rel = format!("virtperf/{id}");
    ledger.record(crate::ledger::Entry::Cgroup { rel: rel.clone() });
    let mut dirs = vec![root.join(&rel)];
    let mut limited = false;
    if let (Some(bytes), Some((mroot, mv2))) = (limits.memory_bytes, controller_dir("memory")) {
        if mv2 {
            // v2: the controller must be enabled for the children of each ancestor.
            let _ = std::fs::write(mroot.join("cgroup.subtree_control"), "+memory");
            let _ = std::fs::create_dir_all(mroot.join("virtperf"));
            let _ = std::fs::write(mroot.join("virtperf/cgroup.subtree_control"), "+memory");
        }
        let dir = mroot.join(&rel);
        if std::fs::create_dir_all(&dir).is_ok() {
            let file = if mv2 { "memory.max" } else { "memory.limit_in_bytes" };
            limited = std::fs::write(dir.join(file), bytes.to_string()).is_ok();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    if let Some((froot, false)) = controller_dir("freezer") {
        let fdir = froot.join(&rel);
        if !dirs.contains(&fdir) {
            dirs.push(fdir);
        }
    }
    let mut files = Vec::new();
    for d in &dirs {
        std::fs::create_dir_all(d).ok()?;
        files.push(std::fs::OpenOptions::new().write(true).open(d.join("cgroup.procs")).ok()?);
    }
    let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: write(2) of a static buffer to descriptors the parent keeps open until the spawn;
    // "0" moves the calling (child) process. Async-signal-safe; `fds` was allocated before the
    // fork and is only read.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Some((cgroup_probe(id)?, files, rel, limited))
}

/// Kills every process in cgroup `rel` (below a cgroup mount), waits until it is empty, removes
/// it and forgets its ledger entry.
pub fn kill_cgroup(ledger: &mut Ledger, rel: &str) {
    let e = crate::ledger::Entry::Cgroup { rel: rel.to_string() };
    for _ in 0..100 {
        let mut any = false;
        for m in crate::ledger::cgroup_mounts() {
            crate::ledger::thaw(&m.join(rel));
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
    limits: Limits,
    mut teardown: GuestTeardown,
) -> Result<Instance, LaunchError> {
    // Without a cgroup, one process's CPU clock is all there is: right for QEMU (one process, its
    // threads), wrong for UML (a host process per guest process): no figure rather than a wrong one.
    let single_process = what == "qemu";
    let netns = match join_netns_on_spawn(&mut cmd, ctx.netns.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            teardown.teardown(ctx.ledger);
            return Err(e);
        }
    };
    let cg = instance_cgroup_on_spawn(&mut cmd, ctx.ledger, &ctx.instance_id, limits);
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
        scratch: None,
        cleanup: Vec::new(),
        cpu: probe.or_else(|| single_process.then(|| CpuProbe::Proc(child.id()))),
        agent_pid: 0,
        child: Some(child),
        start_time: Default::default(),
        rtt: Default::default(),
        rtt_jitter: Default::default(),
        id: String::new(),
        own_clock: false,
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
    /// Spread of those round trips (second-longest minus second-shortest of 9).
    pub rtt_jitter: Duration,
    /// The instance's id (`vpPID-ENV-LAUNCH`), also its cgroup's name below `virtperf/`.
    pub id: String,
    /// Its environment keeps time with a clock of its own ([`Environment::own_clock`]).
    pub own_clock: bool,
    pub teardown: Box<dyn Teardown>,
    /// The process we spawned (agent or runtime), reaped at teardown.
    pub child: Option<Child>,
    /// Its scratch disk, as the agent sees it (None: it has none).
    pub scratch: Option<Scratch>,
    /// More of what the instance leaves on the host (its scratch directory, files a workload
    /// writes into a directory the user named), undone after its teardown; each is in the ledger.
    pub cleanup: Vec<crate::ledger::Entry>,
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
                self.id = ctx.instance_id.clone();
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
        self.rtt_jitter = rtts[rtts.len() - 2].saturating_sub(rtts[1]);
    }

    /// Resumes the instance if a run paused it (a frozen process neither answers nor dies).
    fn thaw(&self) {
        if self.id.is_empty() {
            return;
        }
        for m in crate::ledger::cgroup_mounts() {
            crate::ledger::thaw(&m.join("virtperf").join(&self.id));
        }
    }

    /// Asks the agent to exit, waits briefly, then tears everything down.
    pub fn shutdown(mut self, ledger: &mut Ledger) {
        self.thaw();
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
        self.thaw();
        // The process first (its cgroup can only be removed once it is empty), then the rest.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            ledger.forget_process(child.id());
        }
        self.teardown.teardown(ledger);
        for e in self.cleanup.drain(..).rev() {
            crate::ledger::undo(&e, ledger.state_dir());
            ledger.forget(&e);
        }
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

impl LaunchError {
    /// The console (or stderr) lines of an instance that never became ready, for the database;
    /// the message itself quotes only the most telling one.
    pub fn console(&self) -> Option<String> {
        match self {
            LaunchError::NoHello { console, .. } | LaunchError::Silent { console, .. }
                if !console.is_empty() =>
            {
                Some(console.join("\n"))
            }
            _ => None,
        }
    }
}

/// Waits for the agent's hello; returns its pid and the host-clock time it arrived.
fn await_hello(conn: &mut Conn, ctx: &LaunchCtx, started: Instant) -> Result<(u32, Duration), LaunchError> {
    let (reply, at) = match conn.hello(started + ctx.boot_timeout, ctx.cancel) {
        Ok(x) => x,
        // A silent guest: what its console said last is the best clue.
        Err(CallError::Timeout(d)) => {
            return Err(LaunchError::Silent {
                why: format!("no hello within {:.1} s{}", d.as_secs_f64(), conn.tail().render()),
                console: conn.tail().lines(),
            })
        }
        Err(source) => return Err(LaunchError::NoHello { source, console: conn.tail().lines() }),
    };
    match reply {
        Reply::Hello { pid, .. } => Ok((pid, at.duration_since(started))),
        other => Err(LaunchError::NoHello {
            source: CallError::Protocol(format!("expected hello, got {other:?}")),
            console: conn.tail().lines(),
        }),
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
    fn proc_probe_counts_threads_that_exited() {
        // A thread burns ~100 ms and exits: the process's clock keeps it (schedstat of the live
        // tasks did not).
        let me = CpuProbe::Proc(std::process::id());
        let before = me.read_ns().unwrap();
        std::thread::spawn(|| {
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed() < Duration::from_millis(100) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .join()
        .unwrap();
        let after = me.read_ns().unwrap();
        assert!(after - before >= 80_000_000, "an exited thread's CPU is kept: {} ns", after - before);
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
