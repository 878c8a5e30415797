//! What joins the lab's endpoints in the hub namespace — the data path every environment's traffic
//! shares, named as VSPERF names its deployments (`[lab] switch = …`):
//!
//! * `bridge` (the default): the kernel's bridge; frames are switched in softirq context on
//!   whichever CPU received them, ahead of any task, so no process of it can be measured or starved.
//! * `ovs`: Open vSwitch with its userspace datapath (`datapath_type = netdev`: ports read and
//!   written through packet sockets, no kernel module), its two daemons started inside the hub
//!   namespace with their own database and sockets in the run's directory, stopped with the lab.
//!   Its `ovs-vswitchd` is a process: its CPU is a row of every network trial, and it can be pinned
//!   and capped like a guest.
//! * `driver-domain`: a guest of its own (virtperf's QEMU image) holding one NIC per endpoint and a
//!   bridge between them — Xen's dom0 with netback. Every environment's traffic crosses it, on the
//!   vCPUs it gets; run.rs launches it (it is an environment) on the taps this lab makes for it.
//!
//! Why the daemons are run by hand and not through the distribution's service: the service holds
//! one database for the whole host in /var/run/openvswitch; a run needs its own, in its own
//! namespace, gone when the run ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How the lab's switch fails to start.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("cannot start {prog}: {source}")]
    Start {
        prog: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} did not come within {secs} s")]
    Timeout { what: String, secs: u64 },
    /// A command that set the switch up failed: its words and stderr.
    #[error("{0}")]
    Command(String),
}

fn sh(prog: &str, args: &[&str]) -> Result<(), SwitchError> {
    crate::host::sh(prog, args).map_err(SwitchError::Command)
}
use crate::ledger::Ledger;

/// The kinds `[lab] switch` takes.
pub const SWITCHES: &[&str] = &["bridge", "ovs", "driver-domain"];

/// The lab's switch.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Switch {
    #[default]
    Bridge,
    Ovs,
    DriverDomain,
}

impl Switch {
    pub fn parse(s: &str) -> Option<Switch> {
        Some(match s {
            "bridge" => Switch::Bridge,
            "ovs" => Switch::Ovs,
            "driver-domain" => Switch::DriverDomain,
            _ => return None,
        })
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Switch::Bridge => "bridge",
            Switch::Ovs => "ovs",
            Switch::DriverDomain => "driver-domain",
        }
    }
    /// One line for reports: what the traffic crosses.
    pub fn describe(&self) -> &'static str {
        match self {
            Switch::Bridge => "the host kernel's bridge (softirq: no process of its own)",
            Switch::Ovs => "Open vSwitch, userspace datapath (ovs-vswitchd, packet sockets)",
            Switch::DriverDomain => {
                "a driver domain: a QEMU guest bridging one NIC per endpoint (Xen's dom0)"
            }
        }
    }
}

/// Where the switch's processes run and how much CPU they get (`switch_cpus`, `switch_cap`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SwitchLimits {
    /// CPUs the switch is pinned to (a cpuset list, checked against the host).
    pub cpus: Option<String>,
    /// At most this many CPUs' worth of time (a CFS quota: 0.5 = half of one CPU).
    pub cap: Option<f64>,
    /// The driver domain's vCPUs.
    pub vcpus: u32,
}

/// The programs `switch = "ovs"` needs, with the Debian package.
pub const OVS_PROGRAMS: &[(&str, &str)] = &[
    ("ovsdb-tool", "openvswitch-common"),
    ("ovsdb-server", "openvswitch-switch"),
    ("ovs-vswitchd", "openvswitch-switch"),
    ("ovs-vsctl", "openvswitch-switch"),
    ("ethtool", "ethtool"),
];

/// The OVS schema Debian installs.
const OVS_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// What is missing for `switch = "ovs"` on this host, as the packages to install.
pub fn ovs_missing() -> Vec<&'static str> {
    let mut pkgs: Vec<&str> =
        OVS_PROGRAMS.iter().filter(|(p, _)| crate::host::which(p).is_none()).map(|(_, pkg)| *pkg).collect();
    if !Path::new(OVS_SCHEMA).exists() && !pkgs.contains(&"openvswitch-common") {
        pkgs.push("openvswitch-common");
    }
    pkgs.dedup();
    pkgs
}

/// A running Open vSwitch of one lab: its database server and switch daemon in the hub namespace.
pub struct Ovs {
    dir: PathBuf,
    db: String,
    ovsdb: Child,
    vswitchd: Child,
}

/// Spawns `ip netns exec NS PROG ARGS…` (the program keeps the pid: `ip` execs it), dying with
/// this process (PDEATHSIG), pinned to `cpus` when given; recorded in the ledger at once.
fn spawn_in(
    ledger: &mut Ledger,
    ns: &str,
    prog: &str,
    args: &[String],
    dir: &Path,
    cpus: Option<&[usize]>,
) -> Result<Child, SwitchError> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, prog])
        .args(args)
        .envs([("OVS_RUNDIR", dir), ("OVS_LOGDIR", dir), ("OVS_DBDIR", dir), ("OVS_SYSCONFDIR", dir)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mask: Option<Vec<usize>> = cpus.map(<[usize]>::to_vec);
    // SAFETY: in the forked child only: prctl and sched_setaffinity are async-signal-safe system
    // calls on memory this closure owns (the mask is built before fork).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(m) = &mask {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &c in m {
                    libc::CPU_SET(c, &mut set);
                }
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|source| SwitchError::Start { prog: prog.to_string(), source })?;
    ledger.record_process(child.id(), &format!("{prog} of the lab's switch"));
    Ok(child)
}

fn wait_for(what: &str, deadline: Duration, mut ok: impl FnMut() -> bool) -> Result<(), SwitchError> {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(SwitchError::Timeout { what: what.to_string(), secs: deadline.as_secs() })
}

fn vsctl(db: &str, args: &[&str]) -> Result<(), SwitchError> {
    let mut cmd = Command::new("ovs-vsctl");
    cmd.arg(format!("--db={db}")).args(args);
    // It dies with this process: a run killed while it waits on the switch's database would
    // otherwise leave it waiting out its own timeout (seen by the e2e leftover check).
    virtperf_workload::tools::die_with_parent(&mut cmd);
    crate::host::run(&mut cmd, &format!("`ovs-vsctl {}`", args.join(" ")))
        .map(drop)
        .map_err(SwitchError::Command)
}

/// Kills a child this lab started and forgets it in the ledger.
fn end(c: &mut Child, ledger: &mut Ledger) {
    let pid = c.id();
    let _ = c.kill();
    let _ = crate::host::command::wait_within(c, std::time::Duration::from_secs(5));
    ledger.forget_process(pid);
}

impl Ovs {
    /// Starts Open vSwitch in namespace `hub` with its files in `dir`, a userspace bridge `br0`
    /// holding `ports` (the hub's ends of the endpoints' veths), its switch daemon pinned to
    /// `cpus`. On any error, stops what it started.
    pub fn start(
        ledger: &mut Ledger,
        hub: &str,
        dir: &Path,
        ports: &[String],
        cpus: Option<&[usize]>,
    ) -> Result<Ovs, SwitchError> {
        ledger.create_dir(dir).map_err(|source| SwitchError::Dir { dir: dir.to_path_buf(), source })?;
        let conf = dir.join("conf.db");
        crate::host::run(
            Command::new("ovsdb-tool").args(["create", &conf.to_string_lossy(), OVS_SCHEMA]),
            "`ovsdb-tool create`",
        )
        .map_err(SwitchError::Command)?;
        let sock = dir.join("db.sock");
        let db = format!("unix:{}", sock.display());
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let mut ovsdb = spawn_in(
            ledger,
            hub,
            "ovsdb-server",
            &[
                conf.to_string_lossy().into_owned(),
                format!("--remote=punix:{}", sock.display()),
                format!("--unixctl={}", p("ovsdb.ctl")),
                "--no-chdir".into(),
                format!("--log-file={}", p("ovsdb.log")),
            ],
            dir,
            None,
        )?;
        let daemon = wait_for("ovsdb-server's socket", Duration::from_secs(10), || sock.exists())
            .and_then(|()| vsctl(&db, &["--no-wait", "init"]))
            .and_then(|()| {
                spawn_in(
                    ledger,
                    hub,
                    "ovs-vswitchd",
                    &[
                        db.clone(),
                        format!("--unixctl={}", p("vswitchd.ctl")),
                        "--no-chdir".into(),
                        format!("--log-file={}", p("vswitchd.log")),
                    ],
                    dir,
                    cpus,
                )
            });
        let vswitchd = match daemon {
            Ok(v) => v,
            Err(e) => {
                end(&mut ovsdb, ledger);
                return Err(e);
            }
        };
        let ovs = Ovs { dir: dir.to_path_buf(), db, ovsdb, vswitchd };
        let bridge = vsctl(
            &ovs.db,
            &["--timeout=20", "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"],
        )
        .and_then(|()| {
            ports.iter().try_for_each(|port| vsctl(&ovs.db, &["--timeout=20", "add-port", "br0", port]))
        })
        .and_then(|()| sh("ip", &["-n", hub, "link", "set", "br0", "up"]));
        match bridge {
            Ok(()) => Ok(ovs),
            Err(e) => {
                ovs.stop(ledger);
                Err(e)
            }
        }
    }

    /// The switch daemon's pid (its CPU is the switch's).
    pub fn vswitchd_pid(&self) -> u32 {
        self.vswitchd.id()
    }

    /// Why the switch is no longer running, when it is not (a switch that dies fails the trial
    /// in flight).
    pub fn gone(&mut self) -> Option<String> {
        let dir = self.dir.clone();
        for (name, log, c) in [
            ("ovs-vswitchd", "vswitchd.log", &mut self.vswitchd),
            ("ovsdb-server", "ovsdb.log", &mut self.ovsdb),
        ] {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(format!("{name} exited ({st}); its log: {}", dir.join(log).display()));
            }
        }
        None
    }

    /// Stops both daemons (the switch first) and forgets them.
    pub fn stop(mut self, ledger: &mut Ledger) {
        end(&mut self.vswitchd, ledger);
        end(&mut self.ovsdb, ledger);
    }
}

/// Names of the hub's per-endpoint bridge and tap for a driver domain (endpoint `i`: 0 the tester).
pub fn domain_tap(i: usize) -> String {
    format!("dd{i}")
}
pub fn domain_bridge(i: usize) -> String {
    format!("db{i}")
}

/// The driver domain's side of the lab: endpoint `i`'s veth end `h{i}` joined to tap `dd{i}` by
/// bridge `db{i}` in the hub, the tap for the guest's NIC `i`.
pub fn plumb_domain_port(hub: &str, i: usize, mtu: &str) -> Result<(), SwitchError> {
    let (h, b, t) = (format!("h{i}"), domain_bridge(i), domain_tap(i));
    sh("ip", &["-n", hub, "link", "add", &b, "type", "bridge"])?;
    sh("ip", &["-n", hub, "tuntap", "add", "dev", &t, "mode", "tap"])?;
    sh("ip", &["-n", hub, "link", "set", &t, "mtu", mtu, "master", &b, "up"])?;
    sh("ip", &["-n", hub, "link", "set", &h, "master", &b])?;
    sh("ip", &["-n", hub, "link", "set", &b, "up"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_parse_and_say_what_they_are() {
        for s in SWITCHES {
            let k = Switch::parse(s).unwrap();
            assert_eq!(k.as_str(), *s);
            assert!(!k.describe().is_empty());
        }
        assert_eq!(Switch::parse("vde"), None);
        assert_eq!(Switch::default(), Switch::Bridge);
        assert_eq!((domain_tap(3), domain_bridge(3)), ("dd3".to_string(), "db3".to_string()));
    }
}
