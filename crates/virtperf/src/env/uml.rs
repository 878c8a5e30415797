//! `uml`: User-Mode Linux — a whole Linux kernel running as host processes (`linux.uml`).
//!
//! The guest's root is the host's `/` through hostfs, read-only; the guest mounts its own
//! `/proc`, `/sys` and tmpfs scratch. The agent is the host's virtperf binary run by the guest's
//! init on `/dev/tty1`, which UML connects to its own stdin/stdout (`con1=fd:0,fd:1`), while the
//! kernel console (`con0`) goes to stderr: kernel messages can never corrupt the control channel.
//! In a lab the guest's NIC is a vector-transport tap on the endpoint's bridge.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use virtperf_workload::{ParamKind, ParamSpec};

use super::{Availability, Environment, GuestNet, GuestTeardown, Instance, LaunchCtx, LaunchError, Teardown};

pub struct Uml;

const BINARY: &str = "linux.uml";

const PARAMS: &[ParamSpec] = &[ParamSpec {
    name: "mem",
    kind: ParamKind::Size { min: 64 << 20, max: 64 << 30 },
    default: Some("256MiB"),
    help: "guest memory (UML `mem=`)",
}];

/// The guest's init: mounts, the NIC, then the agent on tty1. `sh` and `ip` are the host's,
/// through hostfs.
pub fn init_script(agent: &Path, net: Option<&GuestNet>) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         # virtperf UML guest init (generated)\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n",
    );
    // Scratch space, unless that would hide the agent binary itself.
    if !agent.starts_with("/tmp") {
        s += "mount -t tmpfs -o size=64m tmp /tmp\n";
    }
    s += "ip link set lo up\n";
    if let Some(n) = net {
        let _ = write!(
            s,
            "ip link set vec0 mtu {mtu}\nip addr add {addr}/24 dev vec0\nip link set vec0 up\n",
            mtu = n.mtu,
            addr = n.addr
        );
    }
    let _ = writeln!(s, "exec {} agent --tty /dev/tty1", agent.display());
    s
}

/// The `linux.uml` command line.
pub fn kernel_args(mem: u64, init: &Path, net: Option<&GuestNet>) -> Vec<String> {
    let mut a = vec![
        format!("mem={}M", mem >> 20),
        "root=/dev/root".into(),
        "rootfstype=hostfs".into(),
        "hostfs=/".into(),
        "ro".into(),
        format!("init={}", init.display()),
        // Kernel console → stderr; the agent's line (tty1) → stdin/stdout; no other consoles.
        "con=null".into(),
        "con0=null,fd:2".into(),
        "con1=fd:0,fd:1".into(),
        "quiet".into(),
    ];
    if let Some(n) = net {
        a.push(format!("vec0:transport=tap,ifname={}", n.tap));
    }
    a
}

impl Environment for Uml {
    fn kind(&self) -> &'static str {
        "uml"
    }
    fn summary(&self) -> &'static str {
        "User-Mode Linux: a Linux kernel as host processes, host root read-only through hostfs"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn wants_tap(&self) -> bool {
        true
    }
    fn availability(&self, _params: &BTreeMap<String, Value>) -> Availability {
        if super::which(BINARY).is_none() {
            return Availability::no(
                "linux.uml is not installed",
                "apt-get install -y user-mode-linux   (or: make deps)",
            );
        }
        Availability::yes(format!("{BINARY} found ({})", runtime_version().unwrap_or_default()))
    }
    fn runtime_version(&self, _params: &BTreeMap<String, Value>) -> Option<String> {
        runtime_version()
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError> {
        self.availability(params).require()?;
        let mem = params.get("mem").and_then(Value::as_u64).unwrap_or(256 << 20);
        let dir = ctx.run_dir.join(format!("uml-{}", ctx.instance_id));
        ctx.ledger.create_dir(&dir).map_err(|e| LaunchError::Prepare(format!("{}: {e}", dir.display())))?;
        let mut teardown = GuestTeardown { cgroup: None, dir: dir.clone() };
        let init = dir.join("init.sh");
        let prepared = std::fs::write(&init, init_script(ctx.exe, ctx.guest_net.as_ref())).and_then(|_| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        });
        if let Err(e) = prepared {
            teardown.teardown(ctx.ledger);
            return Err(LaunchError::Prepare(format!("cannot write the guest init: {e}")));
        }
        let mut cmd = Command::new(BINARY);
        cmd.args(kernel_args(mem, &init, ctx.guest_net.as_ref()))
            // UML backs guest memory with a file in TMPDIR: keep it in the run's scratch.
            .env("TMPDIR", &dir);
        super::launch_guest(ctx, cmd, "linux.uml", None, teardown)
    }
}

fn runtime_version() -> Option<String> {
    // `linux.uml --version` prints the kernel release.
    let out = Command::new(BINARY).arg("--version").output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().next().map(|l| format!("linux.uml {}", l.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_and_agent_line_are_separate() {
        let net = GuestNet { tap: "tap0".into(), addr: "198.18.0.11".parse().unwrap(), mtu: 1500 };
        let a = kernel_args(256 << 20, Path::new("/run/x/init.sh"), Some(&net));
        assert!(a.contains(&"con0=null,fd:2".to_string()), "kernel messages go to stderr");
        assert!(a.contains(&"con1=fd:0,fd:1".to_string()), "the agent's line is stdin/stdout");
        assert!(a.contains(&"mem=256M".to_string()) && a.contains(&"ro".to_string()));
        assert!(a.contains(&"vec0:transport=tap,ifname=tap0".to_string()));
        let s = init_script(Path::new("/usr/bin/virtperf"), Some(&net));
        assert!(s.contains("ip addr add 198.18.0.11/24 dev vec0"));
        assert!(s.trim_end().ends_with("exec /usr/bin/virtperf agent --tty /dev/tty1"));
        assert!(!init_script(Path::new("/v"), None).contains("vec0"), "no NIC without a lab");
    }
}
