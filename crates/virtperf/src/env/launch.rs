//! The interface of an environment kind ([`Environment`]): what a launch gets ([`LaunchCtx`]) and
//! gives ([`Instance`]: an agent over a byte stream, its host CPU probe, its teardown), and the
//! launching helpers the kinds share (piped spawns, joining a namespace, guests in a cgroup).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::Value;
use virtperf_proto::Reply;
use virtperf_workload::{ParamError, ParamKind, ParamSpec};

use super::cgroup::{instance_cgroup_on_spawn, kill_cgroup, CpuProbe, Limits};
use super::conn::{CallError, Conn, Tail};
use crate::ledger::Ledger;
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
    /// A driver domain (`[lab] switch = "driver-domain"`, QEMU only): NICs on these taps, bridged
    /// together inside the guest.
    pub bridge: Option<BridgeNet>,
}

/// The lab's wire as a driver domain holds it: one NIC per endpoint's tap (the tester's first),
/// bridged together in the guest, no address of its own; its host processes capped at `cpu_cap`
/// CPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeNet {
    pub taps: Vec<String>,
    pub mtu: u32,
    pub cpu_cap: Option<f64>,
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

/// A guest kernel's CPU-vulnerability mitigations (UML, QEMU: its `mitigations=` command line),
/// a knob: `auto` is the kernel's default, those its CPU needs; `off` none.
pub const MITIGATIONS: ParamSpec = ParamSpec {
    name: "mitigations",
    kind: ParamKind::Choice(&["auto", "off"]),
    default: Some("auto"),
    help: "the guest kernel's CPU-vulnerability mitigations: auto (the kernel's default: those the CPU it sees needs) or off (`mitigations=off` on its command line)",
};

/// The guest kernel's argument for [`MITIGATIONS`] (None: the kernel's default).
pub fn mitigations_arg(params: &BTreeMap<String, Value>) -> Option<&'static str> {
    (params.get("mitigations").and_then(Value::as_str) == Some("off")).then_some("mitigations=off")
}

/// A knob of an environment kind (docs/knobs.md): one of its parameters whose default is one of
/// the costs it is made of, and the values to measure against that default.
#[derive(Debug)]
pub struct Knob {
    pub name: &'static str,
    /// The values other than the default, as an experiment file writes them.
    pub values: &'static [&'static str],
}

/// A knob's key, its default, and what a value of it means in words.
pub type KnobWords<'a> = (&'a str, &'a str, fn(&str) -> String);

/// The knobs among `params` set away from their defaults, each said in words: `table` gives, per
/// knob, its default and what a value means (`key=value — words`). For knobs whose words need
/// no more than the value (a guest's kernel command line, a machine type).
pub fn knobs_set(params: &BTreeMap<String, Value>, table: &[KnobWords]) -> Vec<String> {
    table
        .iter()
        .filter_map(|(key, default, words)| {
            let v = params.get(*key).and_then(Value::as_str)?;
            (v != *default).then(|| format!("{key}={v} — {}", words(v)))
        })
        .collect()
}

pub trait Environment: Sync {
    fn kind(&self) -> &'static str;
    fn summary(&self) -> &'static str;
    fn params(&self) -> &'static [ParamSpec];
    /// Checks that need the host (a CPU that exists) or several parameters together.
    fn check(&self, _params: &BTreeMap<String, Value>) -> Result<(), ParamError> {
        Ok(())
    }
    /// Whether this kind, with these parameters, can run here (no side effects).
    fn availability(&self, params: &BTreeMap<String, Value>) -> Availability;
    /// True for guests with their own kernel: the lab gives them a tap (bridged to the lab)
    /// instead of an address, and the guest configures the address on its own NIC.
    fn wants_tap(&self) -> bool {
        false
    }
    /// Whether an instance can put its agent into a lab namespace (network workloads run only
    /// on kinds that can). Every kind this build knows can; a new one says `false` until it can.
    fn joins_lab(&self) -> bool {
        true
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
    /// True for the kind every other environment's overhead is measured against (its first
    /// environment in a run is the report's baseline): the bare host.
    fn is_baseline(&self) -> bool {
        false
    }
    /// True when the environment sees only the files its image carries (a guest booted from
    /// virtperf's initramfs): the programs a workload runs (a tool's binary) must be put in it,
    /// through the `extra` parameter. Every other kind sees the host's binaries.
    fn carries_programs(&self) -> bool {
        false
    }
    /// Whether file-system servers (GlusterFS's glusterd and bricks: `pfs`) can run in it with
    /// these parameters; Err says why not and what to do. They need root's CAP_SYS_ADMIN and
    /// CAP_DAC_OVERRIDE, a mount namespace of their own, trusted.* extended attributes on the
    /// scratch disk, and the daemons with their translators.
    fn serves_files(&self, _params: &BTreeMap<String, Value>) -> Result<(), String> {
        Err(format!(
            "file-system servers are not tried in {} environments yet: run them natively, in containers or in qemu guests",
            self.kind()
        ))
    }
    /// The parameters `doctor` asks [`Environment::serves_files`] about (what servers would need
    /// in this kind: a scratch disk, capabilities) and how it says them: ` with a scratch disk …`.
    fn file_server_params(&self) -> (BTreeMap<String, Value>, &'static str) {
        (BTreeMap::new(), "")
    }
    /// The scratch disk (its `disk` parameter) an instance gets when a workload of the run writes
    /// files and the experiment did not say `disk` (None: the kind writes without one).
    fn default_scratch_disk(&self) -> Option<&'static str> {
        None
    }
    /// True when the agent's files are the host's own, so that a workload may write a directory
    /// of the host (`dir=`); every other kind writes on its own scratch disk.
    fn on_host_fs(&self) -> bool {
        false
    }
    /// Where a disk workload's bytes land with these parameters (checked before a run starts):
    /// a description, or the key and message saying how to give the environment a disk.
    fn scratch(&self, _params: &BTreeMap<String, Value>) -> Result<String, ParamError> {
        Err(ParamError::new("disk", format!("environment kind `{}` has no scratch disk", self.kind())))
    }
    /// The disk image a launch writes on the host's scratch disk, and the key that sizes it.
    fn disk_bytes(&self, _params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        None
    }
    /// True when an instance's network can be this machine's own (native, a container joining
    /// this process's namespace), so that it reaches a tester over the hosts' network without the
    /// lab. Guests and gVisor's netstack reach a tester only through the lab's links.
    fn uses_host_network(&self) -> bool {
        false
    }
    /// Whether it can be the lab's driver domain (`[lab] switch_guest`): a guest with NICs of its
    /// own and a bridge between them; Err says why not and what to use.
    fn bridges(&self) -> Result<(), String> {
        Err(format!(
            "`{}` cannot be a driver domain: it must be a guest with NICs of its own and a bridge between them; use switch_guest = \"qemu\"",
            self.kind()
        ))
    }
    /// Variants of the kind doctor checks on rows of their own, each as one parameter and its
    /// value (a container's other runtime, UML on virtperf's kernel, QEMU with KVM): the kind alone
    /// says what `auto` picks, the variant whether that choice itself works.
    fn doctor_variants(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Version of the runtime underneath (for the manifest).
    fn runtime_version(&self, _params: &BTreeMap<String, Value>) -> Option<String> {
        None
    }
    /// Extra flags the runtime underneath runs with, from the environment (for the manifest and
    /// the report's caveats): a different configuration of it than the default.
    fn runtime_flags(&self) -> Option<String> {
        None
    }
    /// What the host holds an instance of this kind to (docs/security.md), in a line for the
    /// manifest: its privileges, what of the host's file systems it may write, its filters.
    fn confinement(&self, _params: &BTreeMap<String, Value>) -> String {
        "none beyond the host's own: the agent runs on the host as virtperf does".into()
    }
    /// This kind's knobs (docs/knobs.md), the one list: each a parameter of [`Environment::params`]
    /// and its values other than its default, as an experiment file writes them; `knobs = [...]`
    /// measures each value against the default.
    fn knob_table(&self) -> &'static [Knob] {
        &[]
    }
    /// The values of knob `name` other than its default, typed as its parameter is (a flag's
    /// `false` a boolean); None: `name` is not a knob of this kind.
    fn knob_values(&self, name: &str) -> Option<Vec<virtperf_workload::params::Raw>> {
        use virtperf_workload::params::Raw;
        let knob = self.knob_table().iter().find(|k| k.name == name)?;
        let flag = self.params().iter().any(|p| p.name == name && matches!(p.kind, ParamKind::Bool));
        Some(
            knob.values
                .iter()
                .map(|v| match (flag, *v) {
                    (true, "true") => Raw::Bool(true),
                    (true, "false") => Raw::Bool(false),
                    (_, v) => Raw::Str(v.to_string()),
                })
                .collect(),
        )
    }
    /// The names of this kind's knobs (for the message that refuses another).
    fn knob_names(&self) -> Vec<&'static str> {
        self.knob_table().iter().map(|k| k.name).collect()
    }
    /// The knobs set away from this kind's defaults (docs/knobs.md), each in words: `seccomp=default
    /// (the default seccomp profile of Podman and Docker: …)`. Said before the numbers: the
    /// environment's figures include them.
    fn knobs(&self, _params: &BTreeMap<String, Value>) -> Vec<String> {
        Vec::new()
    }
    /// A program run as this kind's agent in place of virtperf itself, from the environment (for
    /// the manifest and the report's caveats): the figures are that program's.
    fn agent_replaced(&self) -> Option<String> {
        None
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError>;
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
    single_process: bool,
) -> Result<Instance, LaunchError> {
    // Without a cgroup, one process's CPU clock is all there is: right for a guest that is one
    // process (QEMU: its threads), wrong for one that is a host process per guest process (UML):
    // no figure rather than a wrong one.
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
        phases: Default::default(),
        rtt: Default::default(),
        rtt_jitter: Default::default(),
        go_floor: None,
        id: String::new(),
        own_clock: false,
        teardown: Box::new(teardown),
        conn: Conn::new(stdout, Box::new(super::conn::DeadlineWriter::new(stdin)), tail),
        pauser: None,
        inner_addr: None,
    };
    inst.await_hello(ctx, started)
}

/// `params` over the defaults its schema declares: the one place a default is written is the
/// parameter's [`ParamSpec`] (a parameter struct reading these needs no fallbacks of its own).
pub fn with_defaults(specs: &[ParamSpec], params: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut all = virtperf_workload::params::resolve(specs, &BTreeMap::new()).unwrap_or_default();
    all.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

/// How to stop an instance for good.
pub trait Teardown: Send {
    /// Stops everything the instance runs and removes what it created (ledger entries included).
    fn teardown(&mut self, ledger: &mut Ledger);
}

/// When a launch reached its phases, on the host's monotonic clock: the runtime's or VMM's
/// process started (everything the host prepared before it — a bundle, a disk image, an init —
/// lies before this), the guest's init ran (guests only: the kernel's boot ends there), and the
/// agent said hello. `run` adds what came before (the launch asked for) and after (the first
/// request answered, the teardown) and stores them per launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phases {
    pub spawned: Option<Instant>,
    pub init: Option<Instant>,
    pub ready: Option<Instant>,
}

/// A launched environment with a ready agent.
pub struct Instance {
    pub conn: Conn,
    pub cpu: Option<CpuProbe>,
    /// Launch to hello, on the host's monotonic clock.
    pub start_time: Duration,
    /// When the launch reached each of its phases ([`Phases`]).
    pub phases: Phases,
    pub agent_pid: u32,
    /// Median idle round trip to the agent, measured after launch ([`Instance::calibrate_rtt`]).
    pub rtt: Duration,
    /// Spread of those round trips (second-longest minus second-shortest of 9).
    pub rtt_jitter: Duration,
    /// The shortest `go` span of an armed no-op measured on this instance so far (what an armed
    /// trial's host span has subtracted; `trial::single`).
    pub go_floor: Option<Duration>,
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
    /// Pauses (true) or resumes (false) an instance whose processes are not in virtperf's cgroup
    /// (a libvirt domain: `virsh suspend`/`resume`); None: the cgroup freezer does it.
    pub pauser: Option<Pauser>,
    /// The address the agent has inside its own network when it differs from its lab address
    /// (a container behind slirp4netns: 198.19.E.100, NATed to the lab address): what its sockets
    /// bind to, while the tester still reaches it at the lab address.
    pub inner_addr: Option<String>,
}

/// The agent's clock read against the host's: the guest's stamp in a pong, the host's monotonic
/// clock at the midpoint of that round trip, and half the round trip (what the stamp may be off).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockPoint {
    pub host_ns: u64,
    pub guest_ns: u64,
    pub half_rtt_ns: u64,
}

impl ClockPoint {
    /// The rate error of the agent's clock from `self` to a later point, in ppm ((guest span −
    /// host span) / host span), with its uncertainty (both points' half round trips over the
    /// span) and the span in seconds. None when the host's span is empty.
    pub fn rate_against(&self, later: &ClockPoint) -> Option<(f64, f64, f64)> {
        let host = later.host_ns.checked_sub(self.host_ns).filter(|h| *h > 0)? as f64;
        let guest = later.guest_ns as f64 - self.guest_ns as f64;
        let ppm = (guest - host) / host * 1e6;
        let uncertainty = (self.half_rtt_ns + later.half_rtt_ns) as f64 / host * 1e6;
        Some((ppm, uncertainty, host / 1e9))
    }
}

/// The point of the shortest round trip: the least uncertain.
fn shortest(points: &[ClockPoint]) -> Option<ClockPoint> {
    points.iter().copied().min_by_key(|p| p.half_rtt_ns)
}

/// How an instance outside virtperf's cgroups is paused and resumed.
pub type Pauser = std::sync::Arc<dyn Fn(bool) -> Result<(), String> + Send + Sync>;

/// How an instance was paused: the way it must be resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausedBy {
    /// Its own pauser (virsh suspend).
    Own,
    /// Its cgroup's freezer.
    Freezer,
    /// SIGSTOP to the process tree virtperf started for it.
    Signals,
}

impl PausedBy {
    pub fn words(self) -> &'static str {
        match self {
            PausedBy::Own => "its own pauser (virsh suspend)",
            PausedBy::Freezer => "the cgroup freezer",
            PausedBy::Signals => "SIGSTOP/SIGCONT",
        }
    }
}

/// Pauses instance `id`: through its own pauser, else its cgroup's freezer, else (no writable
/// freezer here, or one that did not freeze it within a second — cgroup v1's freezer waits on
/// UML's ptrace-stopped processes) by SIGSTOP of the process tree virtperf started for it (`pid`).
/// Says how, for [`resume`].
pub fn pause(id: &str, pauser: Option<&Pauser>, pid: Option<u32>) -> Result<PausedBy, String> {
    match pauser {
        Some(p) => p(true).map(|()| PausedBy::Own),
        None => match super::cgroup::freeze(id, true) {
            Ok(()) => Ok(PausedBy::Freezer),
            Err(why) => match pid {
                Some(pid) => signal_tree(pid, true)
                    .map(|()| PausedBy::Signals)
                    .map_err(|e| format!("{why}; and by signals: {e}")),
                None => Err(why),
            },
        },
    }
}

/// Resumes instance `id` the way [`pause`] paused it: a tree stopped by signals is continued by
/// signals, though its freezer (which had failed) would accept a thaw and leave it stopped.
pub fn resume(by: PausedBy, id: &str, pauser: Option<&Pauser>, pid: Option<u32>) -> Result<(), String> {
    match (by, pauser, pid) {
        (PausedBy::Own, Some(p), _) => p(false),
        (PausedBy::Freezer, _, _) => super::cgroup::freeze(id, false),
        (PausedBy::Signals, _, Some(pid)) => signal_tree(pid, false),
        _ => Err(format!("{id} was paused by {} and cannot be resumed that way", by.words())),
    }
}

/// SIGSTOP (or SIGCONT) to `pid` and every process below it.
pub fn signal_tree(pid: u32, stop: bool) -> Result<(), String> {
    let mut tree = vec![pid];
    let mut i = 0;
    // Parents before children; a child found through its parent's pid.
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid = stat[stat.rfind(')')? + 2..].split_whitespace().nth(1)?.parse().ok()?;
            Some((p, ppid))
        })
        .collect();
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
    // SAFETY: kill(2) on processes of the instance virtperf started (its tree, read just now).
    if unsafe { libc::kill(pid as i32, sig) } != 0 {
        return Err(format!("kill {pid}: {}", std::io::Error::last_os_error()));
    }
    for p in &tree[1..] {
        // SAFETY: as above; a child that ended meanwhile is no error.
        unsafe { libc::kill(*p as i32, sig) };
    }
    Ok(())
}

impl Instance {
    /// The end of every launch: waits for the agent's hello (its pid, when the launcher could not
    /// know it — `agent_pid` 0 — and the host-clock time since `started`); an instance that never
    /// says hello is killed and its resources released.
    pub fn await_hello(mut self, ctx: &mut LaunchCtx, started: Instant) -> Result<Instance, LaunchError> {
        let said = await_hello(&mut self.conn, ctx, started);
        self.up(ctx, started, said)
    }

    /// An agent already running when its instance comes up (a guest restored from a running
    /// snapshot said its hello long before, to nobody): up when it answers a ping. A ping
    /// unanswered within 2 s is sent again until the boot deadline.
    pub fn await_pong(mut self, ctx: &mut LaunchCtx, started: Instant) -> Result<Instance, LaunchError> {
        let answered = await_pong(&mut self.conn, ctx, started).map(|t| (0, t));
        self.up(ctx, started, answered)
    }

    /// The instance up (its agent's pid when the launcher could not know it, its start time), or
    /// killed with its resources released.
    fn up(
        mut self,
        ctx: &mut LaunchCtx,
        started: Instant,
        answer: Result<(u32, Duration), LaunchError>,
    ) -> Result<Instance, LaunchError> {
        match answer {
            Ok((pid, t)) => {
                if self.agent_pid == 0 {
                    self.agent_pid = pid;
                }
                self.id = ctx.instance_id.clone();
                self.start_time = t;
                let ready = started + t;
                // The guest's word for when its init ran, kept between the spawn and the hello.
                let init = self.conn.tail().init_started().filter(|i| *i >= started && *i <= ready);
                self.phases = Phases { spawned: Some(started), init, ready: Some(ready) };
                Ok(self)
            }
            Err(e) => {
                self.kill(ctx.ledger);
                Err(e)
            }
        }
    }

    /// Measures the idle round trip (median of 9 pings) that host-clock durations subtract; the
    /// same pings give the agent's clock against the host's as the instance comes up (the
    /// shortest of them).
    pub fn calibrate_rtt(&mut self, cancel: &AtomicBool) -> Option<ClockPoint> {
        let points = self.pings(9, cancel);
        if points.len() == 9 {
            let mut rtts: Vec<Duration> =
                points.iter().map(|p| Duration::from_nanos(2 * p.half_rtt_ns)).collect();
            rtts.sort();
            self.rtt = rtts[rtts.len() / 2];
            self.rtt_jitter = rtts[rtts.len() - 2].saturating_sub(rtts[1]);
        }
        shortest(&points)
    }

    /// The kernel the agent runs on, as it says (`info`): a guest's own kernel, its command line
    /// and what it says of each CPU vulnerability. Bounded here again as the protocol bounds it
    /// (an agent is untrusted); None when it does not answer within 5 s or says nothing of it.
    pub fn kernel_view(&mut self, cancel: &AtomicBool) -> Option<virtperf_record::store::KernelView> {
        use virtperf_proto::{MAX_CMDLINE, MAX_VULNERABILITIES, MAX_VULNERABILITY_LINE};
        let Ok(Reply::Info { kernel, cmdline, vulnerabilities, .. }) =
            self.conn.call(virtperf_proto::Request::Info, Duration::from_secs(5), cancel)
        else {
            return None;
        };
        let cut = |s: String, max: usize| s.chars().take(max).collect::<String>();
        Some(virtperf_record::store::KernelView {
            release: cut(kernel, MAX_VULNERABILITY_LINE),
            cmdline: cut(cmdline, MAX_CMDLINE),
            vulnerabilities: vulnerabilities
                .into_iter()
                .take(MAX_VULNERABILITIES)
                .map(|(n, l)| (cut(n, MAX_VULNERABILITY_LINE), cut(l, MAX_VULNERABILITY_LINE)))
                .collect(),
        })
    }

    /// One ping's round trip on the host's clock: the first request an instance answers after
    /// its hello (the cold start's end). None when it did not answer.
    pub fn first_answer(&mut self, cancel: &AtomicBool) -> Option<Duration> {
        let t0 = Instant::now();
        let p = self.pings(1, cancel);
        (!p.is_empty()).then(|| t0.elapsed())
    }

    /// The agent's clock against the host's now: the shortest of a few ping round trips.
    pub fn clock_point(&mut self, cancel: &AtomicBool) -> Option<ClockPoint> {
        shortest(&self.pings(5, cancel))
    }

    /// Up to `n` pings, each the agent's stamp against the midpoint of its round trip on the
    /// host's monotonic clock; fewer when the agent stops answering.
    fn pings(&mut self, n: usize, cancel: &AtomicBool) -> Vec<ClockPoint> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let h0 = virtperf_workload::rfc2544::frames::now_ns();
            let Ok(Reply::Pong { clock_ns }) =
                self.conn.call(virtperf_proto::Request::Ping, Duration::from_secs(5), cancel)
            else {
                break;
            };
            let h1 = virtperf_workload::rfc2544::frames::now_ns();
            out.push(ClockPoint {
                host_ns: h0 + (h1 - h0) / 2,
                guest_ns: clock_ns,
                half_rtt_ns: (h1 - h0) / 2,
            });
        }
        out
    }

    /// Resumes the instance if a run paused it (a frozen process neither answers nor dies).
    fn thaw(&self) {
        if self.id.is_empty() {
            return;
        }
        if let Some(p) = &self.pauser {
            let _ = p(false);
            return;
        }
        for m in crate::host::cgroup_mounts() {
            crate::host::thaw(&m.join("virtperf").join(&self.id));
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
            // Bounded: a process stuck in the kernel (a hung FUSE mount) does not hang the run;
            // its pid stays in the ledger's hands and the cgroup's removal tries again.
            let _ = crate::host::command::wait_within(&mut child, Duration::from_secs(5));
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
    let (child, stdin, stdout, stderr) = spawn_with_pipes(cmd, what, ledger, die_with_parent)?;
    let tail = Tail::default();
    tail.follow_logged(stderr, log);
    Ok((child, stdin, stdout, tail))
}

/// The spawn of [`spawn_piped`] with stderr left to the caller (an SSH session appends a line of
/// its own to it: `crate::remote`).
pub fn spawn_with_pipes(
    cmd: &mut Command,
    what: &str,
    ledger: &mut Ledger,
    die_with_parent: bool,
) -> Result<(Child, ChildStdin, ChildStdout, std::process::ChildStderr), LaunchError> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    // Dying with its parent: with this process, not with the thread that launched it.
    let spawned = if die_with_parent {
        virtperf_workload::tools::die_with_parent(cmd);
        crate::host::spawn_lasting(cmd)
    } else {
        cmd.spawn()
    };
    let mut child = spawned.map_err(|source| LaunchError::Spawn { what: what.to_string(), source })?;
    ledger.record_process(child.id(), what);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(LaunchError::Prepare("the child's pipes were not created".into()));
    };
    Ok((child, stdin, stdout, stderr))
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
/// Pings until the agent answers (see [`Instance::await_pong`]); the time since `started`.
fn await_pong(conn: &mut Conn, ctx: &LaunchCtx, started: Instant) -> Result<Duration, LaunchError> {
    let deadline = started + ctx.boot_timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LaunchError::Silent {
                why: format!(
                    "no answer to a ping within {:.1} s{}",
                    ctx.boot_timeout.as_secs_f64(),
                    conn.tail().render()
                ),
                console: conn.tail().lines(),
            });
        }
        match conn.call(virtperf_proto::Request::Ping, left.min(Duration::from_secs(2)), ctx.cancel) {
            Ok(Reply::Pong { .. }) => return Ok(started.elapsed()),
            Err(CallError::Timeout(_)) => continue,
            Ok(other) => {
                return Err(LaunchError::NoHello {
                    source: CallError::Protocol(format!("expected pong, got {other:?}")),
                    console: conn.tail().lines(),
                })
            }
            Err(source) => return Err(LaunchError::NoHello { source, console: conn.tail().lines() }),
        }
    }
}

fn await_hello(conn: &mut Conn, ctx: &LaunchCtx, started: Instant) -> Result<(u32, Duration), LaunchError> {
    let (reply, at) = match conn.hello(started + ctx.boot_timeout, ctx.cancel) {
        Ok(x) => x,
        // A silent guest: what its console said last is the best clue.
        Err(CallError::Timeout(d)) => {
            // The phase it stopped in, where the guest's init said it started.
            let phase = conn
                .tail()
                .init_started()
                .map(|i| {
                    format!(
                        " (phase: init and agent — its init started {:.1} s after the spawn)",
                        i.saturating_duration_since(started).as_secs_f64()
                    )
                })
                .unwrap_or_default();
            return Err(LaunchError::Silent {
                why: format!("no hello within {:.1} s{phase}{}", d.as_secs_f64(), conn.tail().render()),
                console: conn.tail().lines(),
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance paused by signals (no freezer group of its own: the freezer's failure is
    /// what sends virtperf to signals) is resumed by signals, whatever its freezer would say.
    #[test]
    fn a_tree_stopped_by_signals_is_continued_by_signals() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let id = format!("vp-test-nogroup-{pid}");
        let by = pause(&id, None, Some(pid)).unwrap();
        assert_eq!(by, PausedBy::Signals);
        let stopped = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            state(pid) == "T"
        });
        assert!(stopped, "not stopped: {}", state(pid));
        resume(by, &id, None, Some(pid)).unwrap();
        let running = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            state(pid) != "T"
        });
        assert!(running, "still stopped: {}", state(pid));
        assert!(resume(PausedBy::Own, &id, None, Some(pid)).is_err(), "no pauser to resume with");
        let _ = child.kill();
        let _ = child.wait();
    }

    fn state(pid: u32) -> String {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        s.rfind(')').and_then(|i| s[i + 2..].split_whitespace().next()).unwrap_or("?").to_string()
    }

    #[test]
    fn signals_pause_and_resume_a_whole_process_tree() {
        // The fallback when no cgroup freezer can be written: a shell and the sleep it started.
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30; true"]).spawn().unwrap();
        let pid = child.id();
        let grandchild = (0..200)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(5));
                std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
                    let p: u32 = e.file_name().to_str()?.parse().ok()?;
                    let st = std::fs::read_to_string(e.path().join("stat")).ok()?;
                    let ppid: u32 = st[st.rfind(')')? + 2..].split_whitespace().nth(1)?.parse().ok()?;
                    (ppid == pid).then_some(p)
                })
            })
            .expect("sh started sleep");
        signal_tree(pid, true).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!((state(pid), state(grandchild)), ("T".to_string(), "T".to_string()), "both stopped");
        signal_tree(pid, false).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(state(pid), "T");
        assert_ne!(state(grandchild), "T");
        // SAFETY: kill(2) on the sleep this test started.
        unsafe { libc::kill(grandchild as i32, libc::SIGKILL) };
        let _ = child.kill();
        let _ = child.wait();
        assert!(signal_tree(4_000_000, true).is_err(), "no such process");
    }
}
