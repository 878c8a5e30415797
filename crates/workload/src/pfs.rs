//! `pfs`: seed 001's parallel file system — servers in the N instances of an environment, each
//! with a brick on its scratch disk, one volume across them, and a client on the lab's tester that
//! writes and reads one file through it sequentially (as `disk` does, file and record sizes alike).
//! Seed 001 ran PVFS2; Debian does not package it (nor OrangeFS), so this is GlusterFS (Debian's
//! glusterfs-server): a distributed volume whose files are cut into shards spread over the bricks
//! (`shard`, PVFS2's striping), a replicated one, or a dispersed (erasure-coded) one.
//!
//! The agent runs both sides. A **server** (`NetRole::side = Server`, one per instance) starts
//! `glusterd` bound to its lab address, with its state, logs and brick under `SCRATCH/pfs`, in a
//! mount namespace of its own (a tmpfs on /run for the sockets glusterd puts there whatever its
//! options say, its logs bound on /var/log): nothing of it is seen outside, and every process in
//! that namespace — glusterd, the brick daemons it forks — is stopped with it. The server of
//! instance 0 is given the bricks (`bricks`, set by the orchestrator) and makes the volume: peer
//! probes, `volume create … force`, the shard options, `volume start`. A server whose glusterd or
//! brick dies ends its run with the log's tail, which fails the trial. The **client** (the tester)
//! mounts the volume with the FUSE client in a mount namespace of its own thread (a tmpfs on /tmp
//! holds the mount point), runs `disk`'s write and read phases on it — fsync in the write's time,
//! the client's cached pages dropped before the read — and unmounts. The FUSE client is killed with
//! the thread that started it (`PR_SET_PDEATHSIG`); a server left by a killed run is found by the
//! namespace recorded in its directory ([`sweep`]).
//!
//! Written by hand around the stock daemons, not with a cluster manager: what is measured is the
//! file system's data path through each isolation layer, and the set-up must fit inside a trial.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::tools::{die_with_parent, find_program, ToolError};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};
use virtperf_proto::Side;

pub struct Pfs;

/// The volume's name (one volume per trial; the servers start afresh each trial).
pub const VOLUME: &str = "virtperf";
/// glusterd's management port.
pub const PORT: u16 = 24007;
/// How long a server or the client may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The FUSE file system's magic (statfs f_type).
const FUSE_MAGIC: i64 = 0x6573_5546;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "volume",
        kind: ParamKind::Choice(&["distribute", "replicate", "disperse"]),
        default: Some("distribute"),
        help: "the volume across the N servers: distribute (files, or their shards, spread over the bricks), replicate (every brick holds everything), disperse (erasure-coded over N ≥ 3, one brick's worth of redundancy)",
    },
    ParamSpec {
        name: "shard",
        kind: ParamKind::Size { min: 0, max: 1 << 30 },
        default: Some("4MiB"),
        help: "cut each file into shards of this size spread over the bricks (PVFS2's striping; GlusterFS's features.shard, 4 MiB at least); 0: whole files",
    },
    ParamSpec {
        name: "file_size",
        kind: ParamKind::Size { min: 1 << 20, max: 1 << 40 },
        default: Some("256MiB"),
        help: "size of the file written and read through the client (iozone -s)",
    },
    ParamSpec {
        name: "record_size",
        kind: ParamKind::Size { min: 4096, max: 64 << 20 },
        default: Some("1MiB"),
        help: "bytes per write or read call (iozone -r)",
    },
    ParamSpec {
        name: "bricks",
        kind: ParamKind::Text,
        default: None,
        help: "set by virtperf, not by hand: the bricks ADDRESS:PATH,… given to instance 0's server, which makes the volume",
    },
];

const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: "pfs_write",
        unit: "MB/s",
        better: Better::Higher,
        help: "sequential write through the client, fsync included",
    },
    MetricSpec {
        name: "pfs_read",
        unit: "MB/s",
        better: Better::Higher,
        help: "sequential read through the client, its cached pages dropped first",
    },
];

impl Workload for Pfs {
    fn kind(&self) -> &'static str {
        "pfs"
    }
    fn summary(&self) -> &'static str {
        "seed 001's parallel file system: GlusterFS servers in the N instances (bricks on their scratch disks), a client on the tester writing and reading one file"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        METRICS
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Disk
    }
    fn headline_metrics(&self) -> usize {
        2
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        // glusterd forks the brick daemons from the same binary (glusterfsd); gluster is its CLI;
        // the translators and transports it loads with dlopen are a directory of their own.
        let mut v: Vec<String> = vec!["glusterd".into(), "glusterfsd".into(), "gluster".into()];
        v.extend(plugin_dir());
        v
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn marks_timed_region(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn needs_scratch(&self) -> bool {
        true
    }
    fn cluster(&self) -> bool {
        true
    }
    fn aggregation(&self, _metric: &str, _p: &Params) -> crate::workload::Aggregation {
        // One client measures the whole volume: its figure is the trial's.
        crate::workload::Aggregation::Max
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        for prog in ["glusterd", "gluster", "glusterfs"] {
            find_program(prog).map_err(|m| ParamError::new("kind", m.to_string()))?;
        }
        let shard = p.u64("shard")?;
        if shard != 0 && shard < 4 << 20 {
            return Err(ParamError::new(
                "shard",
                format!("GlusterFS shards are 4 MiB at least (got {shard} bytes): give 4MiB or more, or 0 for whole files"),
            ));
        }
        Ok(())
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?.clone();
        match role.side {
            Side::Server => serve(p, ctx, &role.bind),
            Side::Client => client(p, ctx, &role.peer),
        }
    }
}

/// How the parallel file system fails.
#[derive(Debug, thiserror::Error)]
pub enum PfsError {
    #[error(
        "a pfs server keeps its brick on the environment's scratch disk, and this one has none (qemu: disk = virtio-blk; uml: disk = ubd)"
    )]
    NoScratch,
    /// What this environment's processes lack (capabilities, a mount point), and how to get it.
    #[error("{0}")]
    Lacks(String),
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error(transparent)]
    Os(#[from] crate::error::OsError),
    /// A daemon (glusterd, a brick, the FUSE client) that exited or did not come up; its log's end.
    #[error("{0}")]
    Daemon(String),
    /// The servers did not form the pool, or the client did not reach every brick.
    #[error("{0}")]
    Peers(String),
    #[error(transparent)]
    Param(#[from] ParamError),
    /// The disk workload the client runs on the mounted volume.
    #[error("{source}; the GlusterFS client's log ends: {log}")]
    OnVolume {
        #[source]
        source: Box<crate::error::Error>,
        log: String,
    },
    #[error("the pfs {0}'s thread panicked")]
    Panicked(&'static str),
    /// The client did not finish within its deadline (or the trial was stopped), and virtperf
    /// stopped its FUSE daemon; what the client then met.
    #[error("the GlusterFS client had not finished after {after_s} s and was stopped: {source}")]
    Stopped {
        after_s: u64,
        #[source]
        source: Box<PfsError>,
    },
}

impl crate::error::Kinded for PfsError {
    fn kind(&self) -> crate::error::FailureKind {
        use crate::error::FailureKind as K;
        match self {
            PfsError::NoScratch | PfsError::Lacks(_) => K::Unsupported,
            PfsError::Tool(e) => e.kind(),
            PfsError::Os(e) => e.kind(),
            PfsError::Peers(_) => K::Peer,
            PfsError::OnVolume { source, .. } => source.kind(),
            PfsError::Daemon(_) | PfsError::Param(_) | PfsError::Panicked(_) | PfsError::Stopped { .. } => {
                K::Other
            }
        }
    }
}

/// The directory of GlusterFS's plug-ins on this host (`…/glusterfs/VERSION`, holding `xlator`,
/// `rpc-transport`, `auth`), from `glusterfsd --print-xlatordir`. Not its parent: that holds
/// geo-replication's gsyncd, which glusterd runs at start when present (a python program).
pub fn plugin_dir() -> Option<String> {
    let prog = find_program("glusterfsd").ok()?;
    let out = Command::new(prog).arg("--print-xlatordir").stdin(Stdio::null()).output().ok()?;
    let xlators = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = Path::new(&xlators).parent()?;
    (dir.is_absolute() && dir.is_dir()).then(|| dir.to_string_lossy().into_owned())
}

/// The volume's shape for `gluster volume create`, given its N bricks.
pub fn shape(volume: &str, n: usize) -> Result<Vec<String>, ParamError> {
    let bad = |why: String| ParamError::new("volume", why);
    match (volume, n) {
        ("distribute", _) => Ok(Vec::new()),
        ("replicate", 2..) => Ok(vec!["replica".into(), n.to_string()]),
        ("disperse", 3..) => Ok(vec!["disperse".into(), n.to_string(), "redundancy".into(), "1".into()]),
        ("replicate", _) => {
            Err(bad("a replicated volume needs 2 servers at least: instances = 2 or more".into()))
        }
        ("disperse", _) => {
            Err(bad("a dispersed volume needs 3 servers at least: instances = 3 or more".into()))
        }
        (other, _) => Err(bad(format!("unknown volume type `{other}`"))),
    }
}

// ---- the server ------------------------------------------------------------------------------

/// A server's directory below the scratch disk.
pub fn home(scratch: &Path) -> PathBuf {
    scratch.join("pfs")
}

fn serve(p: &Params, ctx: &RunCtx, bind: &str) -> Result<Output, crate::error::Error> {
    let scratch = ctx.scratch().ok_or(PfsError::NoScratch)?;
    let home = home(Path::new(scratch));
    let glusterd = find_program("glusterd")?;
    let gluster = find_program("gluster")?;
    // Its own thread: the mount namespace made for glusterd is this thread's.
    std::thread::scope(|s| {
        s.spawn(|| -> Result<Output, PfsError> {
            let mut server = Server::start(&home, &glusterd, bind)?;
            let made = match p.0.get("bricks").and_then(Value::as_str).filter(|b| !b.is_empty()) {
                Some(bricks) => Some(server.make_volume(&gluster, p, bricks)?),
                None => None,
            };
            ctx.ready();
            // The most this server's brick held while the client ran (the client removes its
            // file at the end): shards spread over the volume show on every brick.
            let mut brick_bytes = 0;
            while !ctx.stopped() {
                server.alive()?;
                brick_bytes = brick_bytes.max(bytes_below(&home.join("brick")));
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(Output {
                samples: Vec::new(),
                extra: json!({"bind": bind, "home": home, "volume": made, "version": version(&glusterd), "brick_bytes": brick_bytes, "setup_ms": server.timings()}),
            })
        })
        .join()
        .unwrap_or(Err(PfsError::Panicked("server")))
    })
    .map_err(crate::error::Error::from)
}

struct Server {
    home: PathBuf,
    glusterd: Child,
    /// The mount namespace glusterd and its bricks live in (its inode).
    mntns: Option<u64>,
    /// How long each step of the set-up took (ms): glusterd's start, each CLI call.
    steps: Vec<(String, f64)>,
}

impl Server {
    fn start(home: &Path, glusterd: &str, bind: &str) -> Result<Server, PfsError> {
        sweep(home);
        let _ = std::fs::remove_dir_all(home);
        for d in ["lib", "run", "log", "brick"] {
            std::fs::create_dir_all(home.join(d))
                .map_err(|e| crate::error::OsError::new(format!("cannot create {}", home.display()), e))?;
        }
        if let Some(missing) = missing_capabilities() {
            return Err(PfsError::Lacks(format!(
                "a pfs server needs {missing}, which this environment's processes lack (GlusterFS keeps trusted.* extended attributes on its brick, in directories only root's DAC_OVERRIDE enters, and the server gets a mount namespace of its own); a container gets them with capabilities = \"docker,SYS_ADMIN\" (Docker's default set and SYS_ADMIN)"
            )));
        }
        let vol = home.join("glusterd.vol");
        std::fs::write(&vol, volfile(home, bind))
            .map_err(|e| crate::error::OsError::new(format!("cannot write {}", vol.display()), e))?;
        // The brick daemons glusterd forks and detaches become this process's children (not
        // init's), so that they are reaped when stopped.
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
        private_mounts(&home.join("log"))?;
        let mntns = own_mntns();
        if let Some(ino) = mntns {
            std::fs::write(home.join("mntns"), ino.to_string())
                .map_err(|e| crate::error::OsError::new("cannot record the namespace", e))?;
        }
        let log = home.join("log").join("glusterd.log");
        let mut cmd = Command::new(glusterd);
        cmd.arg("-N")
            .arg("-f")
            .arg(&vol)
            .arg("-l")
            .arg(&log)
            .arg("-p")
            .arg(home.join("run").join("glusterd.pid"));
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let child =
            cmd.spawn().map_err(|e| crate::error::OsError::new(format!("cannot start {glusterd}"), e))?;
        let mut server = Server { home: home.to_path_buf(), glusterd: child, mntns, steps: Vec::new() };
        let t0 = Instant::now();
        loop {
            server.alive()?;
            let addr = format!("{bind}:{PORT}");
            if let Ok(a) = addr.parse::<std::net::SocketAddr>() {
                if std::net::TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok() {
                    server.steps.push(("glusterd listening".into(), t0.elapsed().as_secs_f64() * 1e3));
                    return Ok(server);
                }
            }
            if t0.elapsed() > START_TIMEOUT {
                return Err(PfsError::Daemon(format!(
                    "glusterd did not listen on {addr} within {} s; its log ends: {}",
                    START_TIMEOUT.as_secs(),
                    tail(&log)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Err when glusterd, or a brick daemon it started, is gone.
    fn alive(&mut self) -> Result<(), PfsError> {
        if let Ok(Some(st)) = self.glusterd.try_wait() {
            return Err(PfsError::Daemon(format!(
                "glusterd exited ({st}); its log ends: {}",
                tail(&self.home.join("log").join("glusterd.log"))
            )));
        }
        for (pidfile, pid) in brick_pids(&self.home) {
            if !running(pid) {
                return Err(PfsError::Daemon(format!(
                    "a brick daemon (pid {pid}, {}) died; its log ends: {}",
                    pidfile.display(),
                    tail(&brick_log(&self.home))
                )));
            }
        }
        Ok(())
    }

    fn cli(&mut self, gluster: &str, args: &[&str]) -> Result<String, PfsError> {
        let t0 = Instant::now();
        let r = self.cli_once(gluster, args);
        let step = args.iter().take(2).copied().collect::<Vec<_>>().join(" ");
        self.steps.push((step, t0.elapsed().as_secs_f64() * 1e3));
        r
    }

    fn cli_once(&self, gluster: &str, args: &[&str]) -> Result<String, PfsError> {
        let sock = "/run/gluster/glusterd.socket";
        let out = Command::new(gluster)
            .arg(format!("--glusterd-sock={sock}"))
            .arg("--mode=script")
            .arg("--timeout=30")
            .arg(format!("--log-file={}", self.home.join("log").join("cli.log").display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| crate::error::OsError::new(format!("cannot run {gluster}"), e))?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string()
            + String::from_utf8_lossy(&out.stderr).trim();
        if out.status.success() {
            Ok(text)
        } else {
            Err(PfsError::Daemon(format!(
                "gluster {}: {text}; glusterd's log ends: {}; a brick's: {}",
                args.join(" "),
                tail(&self.home.join("log").join("glusterd.log")),
                tail(&brick_log(&self.home))
            )))
        }
    }

    /// Instance 0 makes the volume over `bricks` (ADDRESS:PATH,…, its own first).
    fn make_volume(&mut self, gluster: &str, p: &Params, bricks: &str) -> Result<Value, PfsError> {
        let list: Vec<&str> = bricks.split(',').filter(|b| !b.is_empty()).collect();
        let me = list.first().and_then(|b| b.split(':').next()).unwrap_or_default();
        let peers: Vec<&str> = list.iter().filter_map(|b| b.split(':').next()).filter(|a| *a != me).collect();
        for peer in &peers {
            self.cli(gluster, &["peer", "probe", peer])?;
        }
        // Probed peers turn "Peer in Cluster (Connected)" a moment after the probe returns.
        let t0 = Instant::now();
        loop {
            self.alive()?;
            let status = self.cli(gluster, &["peer", "status"])?;
            if status.matches("Peer in Cluster (Connected)").count() >= peers.len() {
                break;
            }
            if t0.elapsed() > START_TIMEOUT {
                return Err(PfsError::Peers(format!("the servers did not all join the pool: {status}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let volume = p.str("volume")?;
        let mut create: Vec<String> = vec!["volume".into(), "create".into(), VOLUME.into()];
        create.extend(shape(volume, list.len())?);
        create.extend(["transport".into(), "tcp".into()]);
        create.extend(list.iter().map(|b| b.to_string()));
        create.push("force".into());
        let args: Vec<&str> = create.iter().map(String::as_str).collect();
        self.cli(gluster, &args)?;
        let shard = p.u64("shard")?;
        let mut options = vec![("network.ping-timeout", "5".to_string())];
        if shard > 0 {
            options.push(("features.shard", "on".into()));
            options.push(("features.shard-block-size", format!("{}MB", shard >> 20)));
        }
        // One call for every option (each CLI start costs seconds in an emulated guest).
        let mut set: Vec<&str> = vec!["volume", "set", VOLUME];
        for (k, v) in &options {
            set.extend([*k, v.as_str()]);
        }
        self.cli(gluster, &set)?;
        self.cli(gluster, &["volume", "start", VOLUME])?;
        // Every brick online before the client mounts.
        let t0 = Instant::now();
        loop {
            self.alive()?;
            let st = self.cli(gluster, &["volume", "status", VOLUME, "detail"])?;
            let online =
                st.lines().filter(|l| l.starts_with("Online") && l.trim_end().ends_with('Y')).count();
            if online >= list.len() {
                break;
            }
            if t0.elapsed() > START_TIMEOUT {
                return Err(PfsError::Peers(format!("the volume's bricks did not all come online: {st}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(json!({
            "name": VOLUME, "type": volume, "bricks": list, "shard_bytes": shard,
            "options": options.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }))
    }

    /// The set-up's steps and their times (ms), for the trial's detail.
    fn timings(&self) -> Value {
        json!(self
            .steps
            .iter()
            .map(|(k, ms)| json!({"step": k, "ms": (ms * 10.0).round() / 10.0}))
            .collect::<Vec<_>>())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.glusterd.kill();
        let _ = self.glusterd.wait();
        if let Some(ino) = self.mntns {
            kill_namespace(ino);
        }
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn volfile(home: &Path, bind: &str) -> String {
    // The keepalive options are not optional: without them glusterd 10 cannot connect to a peer
    // ("connect returned -2" in its log). The CLI socket is in the namespace's own /run.
    format!(
        "volume management\n    type mgmt/glusterd\n    option working-directory {lib}\n    option run-directory {run}\n    option glusterd-sockfile /run/gluster/glusterd.socket\n    option transport-type socket\n    option transport.socket.keepalive-time 10\n    option transport.socket.keepalive-interval 2\n    option transport.socket.read-fail-log off\n    option transport.socket.bind-address {bind}\n    option transport.socket.listen-port {PORT}\n    option ping-timeout 0\n    option event-threads 1\n    option max-port 60999\nend-volume\n",
        lib = home.join("lib").display(),
        run = home.join("run").display(),
    )
}

/// Bytes of the regular files below `dir`, leaving out `.glusterfs` (hard links to the same
/// files, and GlusterFS's own small state).
fn bytes_below(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut total = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            if m.is_dir() {
                if e.file_name() != ".glusterfs" {
                    stack.push(e.path());
                }
            } else if m.is_file() && seen.insert((m.dev(), m.ino())) {
                total += m.len();
            }
        }
    }
    total
}

fn brick_pids(home: &Path) -> Vec<(PathBuf, u32)> {
    let dir = home.join("run").join("vols").join(VOLUME);
    let Ok(rd) = std::fs::read_dir(&dir) else { return Vec::new() };
    rd.flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pid"))
        .filter_map(|p| {
            let pid = std::fs::read_to_string(&p).ok()?.trim().parse().ok()?;
            Some((p, pid))
        })
        .collect()
}

/// Whether `pid` runs: not gone, not a zombie (a brick daemon is this process's child through the
/// subreaper, so a dead one stays a zombie until reaped — which this does).
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    match state {
        None | Some("Z") | Some("X") => {
            let mut st = 0;
            // SAFETY: waitpid on a dead process's pid; ECHILD when it is not our child.
            unsafe { libc::waitpid(pid as i32, &mut st, libc::WNOHANG) };
            false
        }
        Some(_) => true,
    }
}

fn brick_log(home: &Path) -> PathBuf {
    let dir = home.join("log").join("glusterfs").join("bricks");
    std::fs::read_dir(&dir).ok().and_then(|rd| rd.flatten().map(|e| e.path()).next()).unwrap_or(dir)
}

fn version(glusterd: &str) -> String {
    Command::new(glusterd)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_default()
}

/// The last lines of a log, for a refusal.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" E ") || l.contains(" C ")).collect();
    let pick: Vec<&str> = if lines.is_empty() { text.lines().collect() } else { lines };
    pick[pick.len().saturating_sub(6)..].join(" | ")
}

// ---- namespaces ------------------------------------------------------------------------------

/// A server's mounts: a mount namespace of the calling thread's own ([`own_mount_namespace`]), a
/// tmpfs on /run (glusterd's sockets) and on /var/lib, and `log` bound on /var/log (the daemons'
/// logs, kept on the scratch disk).
fn private_mounts(log: &Path) -> Result<(), PfsError> {
    let err = |what: &str, e: std::io::Error| {
        if e.raw_os_error() == Some(libc::EPERM) {
            PfsError::Lacks(format!("{what}: {e} — a pfs server needs CAP_SYS_ADMIN (a mount namespace of its own, and the trusted.* extended attributes GlusterFS keeps on its brick); a container gets it with capabilities = \"docker,SYS_ADMIN\" (Docker's default set and SYS_ADMIN)"))
        } else {
            crate::error::OsError::new(what, e).into()
        }
    };
    // The mount points, where a guest's initramfs lacks them (a host and a container have them).
    for d in ["/run", "/var/lib", "/var/log"] {
        if !Path::new(d).exists() {
            let _ = std::fs::create_dir_all(d);
        }
    }
    own_mount_namespace().map_err(|(what, e)| err(what, e))?;
    mount_tmpfs("/run").map_err(|e| err("a tmpfs on /run", e))?;
    std::fs::create_dir_all("/run/gluster")
        .map_err(|e| crate::error::OsError::new("cannot create /run/gluster", e))?;
    if std::fs::symlink_metadata("/var/run").is_err() {
        // A guest's initramfs has no /var/run (glusterd's brick sockets are named below it).
        let _ = std::os::unix::fs::symlink("/run", "/var/run");
    }
    // glusterd writes below /var/lib/glusterd whatever its working directory (the shared-storage
    // brick's path): a tmpfs on /var/lib, in this namespace only.
    mount_tmpfs("/var/lib").map_err(|e| err("a tmpfs on /var/lib", e))?;
    if !Path::new("/var/log").is_dir() {
        return Err(PfsError::Lacks("there is no /var/log here to hold the daemons' logs".into()));
    }
    let c = |s: &str| CString::new(s).map_err(|e| PfsError::Lacks(format!("a path with a NUL byte: {e}")));
    let (log_c, varlog) = (c(&log.to_string_lossy())?, c("/var/log")?);
    // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
    if unsafe {
        libc::mount(log_c.as_ptr(), varlog.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
    } != 0
    {
        return Err(err("binding the log directory on /var/log", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Gives the calling thread a mount namespace of its own (CLONE_NEWNS implies CLONE_FS, which a
/// thread may unshare alone) from which no mount propagates back. On failure, the step and its
/// error.
fn own_mount_namespace() -> Result<(), (&'static str, std::io::Error)> {
    // SAFETY: unshare(2) on the calling thread; no memory is passed.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(("unshare(CLONE_NEWNS)", std::io::Error::last_os_error()));
    }
    // SAFETY: mount(2) with a valid NUL-terminated path and null optional arguments.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        let e = std::io::Error::last_os_error();
        // (gVisor refuses propagation flags with EINVAL; its mounts never reach the host.)
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(("making / private", e));
        }
    }
    Ok(())
}

/// A fresh tmpfs on `dir`, in the calling thread's mount namespace.
fn mount_tmpfs(dir: &str) -> std::io::Result<()> {
    let dir = CString::new(dir)?;
    // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dir.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The capabilities a server needs and this process lacks (CapEff of /proc/self/status), named;
/// None when it has them all (or the file cannot be read: the server's own errors say more).
fn missing_capabilities() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let bits = u64::from_str_radix(eff, 16).ok()?;
    let missing: Vec<&str> = [(21u32, "CAP_SYS_ADMIN"), (1u32, "CAP_DAC_OVERRIDE")]
        .into_iter()
        .filter(|(bit, _)| bits & (1u64 << *bit) == 0)
        .map(|(_, name)| name)
        .collect();
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// The calling thread's mount namespace (inode of /proc/thread-self/ns/mnt).
fn own_mntns() -> Option<u64> {
    ns_inode(Path::new("/proc/thread-self/ns/mnt"))
}

fn ns_inode(link: &Path) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let t = target.to_string_lossy();
    t.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

/// SIGKILLs every process in mount namespace `ino` (glusterd and the brick daemons it forked),
/// and reaps those that were this process's children (see PR_SET_CHILD_SUBREAPER above).
fn kill_namespace(ino: u64) {
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else { return };
    let mut killed = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid as u32 == me {
            continue;
        }
        if ns_inode(&e.path().join("ns").join("mnt")) == Some(ino) {
            // SAFETY: kill(2) on a pid read from /proc; a process in our namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed.push(pid);
        }
    }
    let t0 = Instant::now();
    while !killed.is_empty() && t0.elapsed() < Duration::from_secs(2) {
        killed.retain(|&pid| {
            let mut st = 0;
            // SAFETY: waitpid on a pid we just killed; ECHILD (not ours) ends the wait for it.
            let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
            r == 0
        });
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops what an earlier server of this environment left in `home` (its agent killed with it):
/// the processes of the mount namespace it recorded. Only ever in the agent, on the environment's
/// own side of its boundary, where the file was written: the host never reads it (a container
/// writes its /scratch, and a namespace named there could be anyone's), and stops a killed run's
/// servers with the instance's cgroup or container instead.
fn sweep(home: &Path) {
    if let Some(ino) = std::fs::read_to_string(home.join("mntns")).ok().and_then(|s| s.trim().parse().ok()) {
        // Never our own namespace (a server's file copied elsewhere must not kill the agent's).
        if own_mntns() != Some(ino) && ns_inode(Path::new("/proc/self/ns/mnt")) != Some(ino) {
            kill_namespace(ino);
        }
    }
}

// ---- the client ------------------------------------------------------------------------------

/// How long the client may take, mount to unmount, before virtperf stops it: its two 30 s waits,
/// and the file written and read back at 4 MB/s (a fifth of the least a volume on one host gave).
/// A FUSE call blocks until its daemon answers, so a client that stops answering would otherwise
/// hold the trial to its own deadline (a CI run here waited 300 s for one native trial).
fn client_deadline(file_size: u64) -> Duration {
    Duration::from_secs(90) + Duration::from_secs_f64(2.0 * file_size as f64 / 4e6)
}

fn client(p: &Params, ctx: &RunCtx, server: &str) -> Result<Output, crate::error::Error> {
    let glusterfs = find_program("glusterfs")?;
    let deadline = client_deadline(p.u64("file_size")?);
    // The FUSE daemon, shared with the watchdog below: killing it fails every call still waiting
    // on the mount (ENOTCONN), so the thread ends with the error and the client's log. The lock
    // keeps the pid ours: the thread takes the child out of it before it reaps it.
    let daemon: Mutex<Option<Child>> = Mutex::new(None);
    std::thread::scope(|s| {
        let worker = s.spawn(|| -> Result<Output, PfsError> {
            let _cpu = ctx.thread_cpu();
            // A mount namespace of this thread's: the mount point on a tmpfs of its own.
            own_mount_namespace().map_err(|(what, e)| crate::error::OsError::new(what, e))?;
            mount_tmpfs("/tmp").map_err(|e| crate::error::OsError::new("a private tmpfs on /tmp", e))?;
            let mnt = Path::new("/tmp/pfs");
            std::fs::create_dir_all(mnt)
                .map_err(|e| crate::error::OsError::new(format!("cannot create {}", mnt.display()), e))?;
            let log = Path::new("/tmp/client.log");
            let mut cmd = Command::new(&glusterfs);
            cmd.arg("-N")
                .arg(format!("--volfile-server={server}"))
                .arg(format!("--volfile-id={VOLUME}"))
                .arg("-l")
                .arg(log)
                .arg(mnt)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            die_with_parent(&mut cmd);
            let child = cmd.spawn().map_err(|e| crate::error::OsError::new(format!("cannot start {glusterfs}"), e))?;
            *lock(&daemon) = Some(child);
            let mount = Mount { daemon: &daemon, mnt: mnt.to_path_buf() };
            let t0 = Instant::now();
            while fs_type(mnt) != Some(FUSE_MAGIC) {
                let exited = lock(&daemon).as_mut().map(Child::try_wait);
                if let Some(Ok(Some(st))) = exited {
                    return Err(PfsError::Daemon(format!(
                        "the GlusterFS client exited ({st}); its log ends: {}",
                        tail(log)
                    )));
                }
                if t0.elapsed() > START_TIMEOUT {
                    return Err(PfsError::Daemon(format!(
                        "the volume was not mounted within {} s; the client's log ends: {}",
                        START_TIMEOUT.as_secs(),
                        tail(log)
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Mounted is not connected: the client connects to each brick on its own, and a file
            // written before a brick's connection is up is laid out over the others (a CI run
            // here found a 32 MiB file wholly on one of two bricks, in TCG guests).
            let mounted = t0.elapsed();
            let bricks_seen = loop {
                let Some((bricks, down)) = unconnected_bricks(mnt) else { break None };
                if down.is_empty() {
                    break Some(bricks);
                }
                if t0.elapsed() > START_TIMEOUT {
                    return Err(PfsError::Peers(format!(
                        "the client did not connect to every brick within {} s (not connected: {}); its log ends: {}",
                        START_TIMEOUT.as_secs(),
                        down.join(", "),
                        tail(log)
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let waited = t0.elapsed().saturating_sub(mounted);
            let mut q: BTreeMap<String, Value> = BTreeMap::new();
            q.insert("file_size".into(), json!(p.u64("file_size")?));
            q.insert("record_size".into(), json!(p.u64("record_size")?));
            q.insert("modes".into(), json!("write,read"));
            q.insert("direct".into(), json!(false));
            q.insert("fsync".into(), json!(true));
            q.insert("dir".into(), json!(mnt));
            let out = crate::disk::Disk
                .run(&Params(&q), ctx)
                .map_err(|e| PfsError::OnVolume { source: Box::new(e), log: tail(log) })?;
            let pick = |m: &str| out.samples.iter().find(|s| s.metric == m).map(|s| s.value);
            let (w, r) = (pick("disk_write"), pick("disk_read"));
            let samples = [("pfs_write", w), ("pfs_read", r)]
                .into_iter()
                .filter_map(|(m, v)| v.map(|v| sample(m, v, "MB/s")))
                .collect();
            let mut extra = out.extra;
            extra["server"] = json!(server);
            // How many bricks the client saw connected before it wrote, and how long after the
            // mount it waited for them (null: a client without `.meta`).
            extra["bricks_connected"] = json!(bricks_seen.map(|n| json!({"bricks": n, "waited_ms": waited.as_millis() as u64})));
            drop(mount);
            Ok(Output { samples, extra })
        });
        let t0 = Instant::now();
        let mut stopped = None;
        while !worker.is_finished() {
            if stopped.is_none() && (t0.elapsed() > deadline || ctx.stopped()) {
                if let Some(c) = lock(&daemon).as_mut() {
                    let _ = c.kill();
                }
                stopped = Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let done = worker.join().unwrap_or(Err(PfsError::Panicked("client")));
        match (done, stopped) {
            (Err(e), Some(after)) => Err(PfsError::Stopped { after_s: after.as_secs(), source: Box::new(e) }),
            (done, _) => done,
        }
    })
    .map_err(crate::error::Error::from)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The mounted volume's client translators (one per brick), and those not connected to their
/// brick, from the meta translator the FUSE client loads
/// (`.meta/graphs/active/VOLUME-client-N/private` says `connected = 1` once its brick answers).
/// None: no such translator to read (a client without `.meta`), so nothing to wait for.
fn unconnected_bricks(mnt: &Path) -> Option<(usize, Vec<String>)> {
    let prefix = format!("{VOLUME}-client-");
    let mut clients = 0;
    let mut down = Vec::new();
    for e in std::fs::read_dir(mnt.join(".meta/graphs/active")).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) {
            continue;
        }
        clients += 1;
        let private = std::fs::read_to_string(e.path().join("private")).unwrap_or_default();
        if !connected(&private) {
            down.push(name);
        }
    }
    (clients > 0).then_some((clients, down))
}

/// A client translator's private dump says it is connected to its brick.
fn connected(private: &str) -> bool {
    private.lines().any(|l| {
        let mut kv = l.splitn(2, '=').map(str::trim);
        kv.next() == Some("connected") && kv.next() == Some("1")
    })
}

struct Mount<'a> {
    daemon: &'a Mutex<Option<Child>>,
    mnt: PathBuf,
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        if let Ok(c) = CString::new(self.mnt.to_string_lossy().as_bytes()) {
            // SAFETY: umount2 on a NUL-terminated path of our own mount namespace.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        if let Some(mut child) = lock(self.daemon).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn fs_type(p: &Path) -> Option<i64> {
    let c = CString::new(p.to_string_lossy().as_bytes()).ok()?;
    // SAFETY: statfs fills the struct we own from a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0).then_some(st.f_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client waits for every brick's translator to say `connected = 1` (GlusterFS's own
    /// tests read the same file), and for nothing where the mount has no `.meta`.
    #[test]
    fn a_client_writes_only_once_every_brick_is_connected() {
        let dump = |c: u8| {
            format!("[xlator.protocol.client.{VOLUME}-client-0.priv]\nconnecting = 0\nconnected = {c}\ntotal_bytes_read = 4\n")
        };
        assert!(connected(&dump(1)) && !connected(&dump(0)) && !connected("connected_clients = 1"));
        let mnt = std::env::temp_dir().join(format!("vp-pfs-meta-{}", std::process::id()));
        assert_eq!(unconnected_bricks(&mnt), None, "no .meta: nothing to wait for");
        let active = mnt.join(".meta/graphs/active");
        for (n, c) in [(0, 1), (1, 0)] {
            let d = active.join(format!("{VOLUME}-client-{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("private"), dump(c)).unwrap();
        }
        std::fs::create_dir_all(active.join(format!("{VOLUME}-dht"))).unwrap();
        assert_eq!(unconnected_bricks(&mnt), Some((2, vec![format!("{VOLUME}-client-1")])));
        std::fs::write(active.join(format!("{VOLUME}-client-1/private")), dump(1)).unwrap();
        assert_eq!(unconnected_bricks(&mnt), Some((2, vec![])));
        std::fs::remove_dir_all(&mnt).unwrap();
    }

    #[test]
    fn volume_shapes_follow_the_servers() {
        assert_eq!(shape("distribute", 1).unwrap(), Vec::<String>::new());
        assert_eq!(shape("replicate", 2).unwrap(), ["replica", "2"]);
        assert_eq!(shape("disperse", 3).unwrap(), ["disperse", "3", "redundancy", "1"]);
        assert!(shape("replicate", 1).unwrap_err().message.contains("2 servers"));
        assert!(shape("disperse", 2).unwrap_err().message.contains("3 servers"));
    }

    #[test]
    fn the_volfile_binds_the_lab_address_and_keeps_state_in_home() {
        let v = volfile(Path::new("/scratch/pfs"), "198.18.0.3");
        assert!(v.contains("option transport.socket.bind-address 198.18.0.3"), "{v}");
        assert!(v.contains("option working-directory /scratch/pfs/lib"), "{v}");
        assert!(v.contains("option run-directory /scratch/pfs/run"), "{v}");
        assert!(v.contains("keepalive-time"), "glusterd 10 cannot probe a peer without it: {v}");
    }

    #[test]
    fn namespace_links_parse() {
        let ino = own_mntns().expect("/proc/thread-self/ns/mnt");
        assert!(ino > 0);
        assert_eq!(ns_inode(Path::new("/nonexistent")), None);
    }
}
