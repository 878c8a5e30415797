//! A container's network, the `network` parameter (docs/knobs.md).
//!
//! - `veth` (the default): the container joins its lab endpoint's namespace, whose `eth0` is a veth
//!   on the lab's bridge, as a rootful `docker run --network host` inside that namespace would.
//! - `pasta` / `slirp4netns`: the container gets a namespace of its own, empty but for loopback
//!   and what the helper gives it, and a user-space helper joins it to the endpoint's namespace,
//!   as rootless Podman (pasta since Podman 5, slirp4netns before) and RootlessKit wire theirs:
//!
//! ```text
//!   netns vpPID-e0 (the lab endpoint)                 netns vpPID-0-1n (the container's own)
//!   eth0 198.18.0.10 ── sockets of ── pasta ──tap──   eth0 198.18.0.10 (a copy: pasta --config-net)
//!                                 or slirp4netns ──   tap0 198.19.10.100/24, via 198.19.10.2 (NAT)
//! ```
//!
//! The helper runs in the endpoint's namespace, where its own sockets reach the tester, and
//! forwards the trial's ports ([`crate::lab::FLOW_PORTS`], TCP and UDP) into the container; what
//! the container sends leaves through the helper's sockets, from the endpoint's address. Its
//! inner addresses come from 198.18.0.0/15 too (slirp4netns's `--cidr`, not its 10.0.2.0/24).
//! Nothing is created in, or changed about, the root namespace; the namespace is in the ledger
//! before it exists and the helper's pid as soon as it does.
//!
//! Why the real programs and not a forwarder of virtperf's own: their cost (a tap read and written
//! by a process, a TCP/IP stack in user space, the copies in between) is what is measured.

use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::launch::{join_netns_on_spawn, LaunchCtx, LaunchError};
use crate::ledger::{Entry, Ledger};

/// The `network` parameter's values.
pub const CHOICES: &[&str] = &["veth", "pasta", "slirp4netns"];

/// How long a helper may take to configure the container's namespace.
const READY: Duration = Duration::from_secs(10);
/// The container's link MTU when `network_mtu` is unset: Podman's and RootlessKit's (and the
/// largest both helpers take).
pub const DEFAULT_MTU: u32 = 65520;
/// At most this much of a helper's log is read back into an error.
const LOG_TAIL: u64 = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    Veth,
    Pasta,
    Slirp4netns,
}

impl Network {
    /// The parameter's value (validated against [`CHOICES`] with the experiment).
    pub fn of(params: &BTreeMap<String, Value>) -> Network {
        match params.get("network").and_then(Value::as_str) {
            Some("pasta") => Network::Pasta,
            Some("slirp4netns") => Network::Slirp4netns,
            _ => Network::Veth,
        }
    }

    /// The helper's program and the Debian package that has it.
    pub fn program(self) -> Option<(&'static str, &'static str)> {
        match self {
            Network::Veth => None,
            Network::Pasta => Some(("pasta", "passt")),
            Network::Slirp4netns => Some(("slirp4netns", "slirp4netns")),
        }
    }

    /// What the knob changes, in words (the manifest, doctor, the report's caveats).
    pub fn words(self) -> &'static str {
        match self {
            Network::Veth => "the lab endpoint's own namespace: a veth on the lab's bridge",
            Network::Pasta => "a namespace of its own, joined to the lab by pasta (passt) in user space — rootless Podman 5's network: the lab address copied inside, packets through a tap and pasta's sockets",
            Network::Slirp4netns => "a namespace of its own, joined to the lab by slirp4netns (libslirp's TCP/IP stack in user space) — RootlessKit's and Podman 4's rootless network: 198.19.N.100 inside, NATed to the lab address",
        }
    }
}

/// The MTU of the container's link to its helper (`network_mtu`, validated 576–65520).
pub fn mtu_of(params: &BTreeMap<String, Value>) -> u32 {
    params
        .get("network_mtu")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_MTU, |m| m.min(DEFAULT_MTU as u64) as u32)
}

/// A running helper and the namespace it serves.
pub struct Helper {
    what: String,
    child: Child,
    netns: String,
    /// The container's namespace (`/run/netns/NAME`), for its OCI config.
    pub netns_path: PathBuf,
    /// The address the container has inside (slirp4netns's), when it is not its lab address.
    pub inner_addr: Option<String>,
}

impl Helper {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the helper and deletes the namespace, forgetting both in the ledger.
    pub fn stop(mut self, ledger: &mut Ledger) {
        let pid = self.child.id();
        let _ = self.child.kill();
        let _ = crate::host::command::wait_within(&mut self.child, Duration::from_secs(5));
        ledger.forget_process(pid);
        crate::host::delete_netns(&self.netns);
        ledger.forget(&Entry::Netns { name: self.netns.clone() });
    }
}

/// The endpoint namespace's `eth0`'s IPv4 address.
fn endpoint_addr(ns: &str) -> Result<String, String> {
    let addr = crate::host::run(
        Command::new("ip").args(["-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"]),
        "`ip addr show` in the lab endpoint",
    )?;
    parse_inet(&addr).ok_or_else(|| format!("the lab endpoint {ns} has no eth0 with an IPv4 address"))
}

/// The first IPv4 address in `ip -o addr` output.
fn parse_inet(addr: &str) -> Option<String> {
    let mut it = addr.split_whitespace();
    it.find(|w| *w == "inet").and(it.next())?.split('/').next().map(str::to_string)
}

/// slirp4netns's inner network for an endpoint at `lab_addr`: 198.19.N.0/24, N the lab address's
/// last byte (one per endpoint, so a reader of two containers' addresses tells them apart).
fn slirp_cidr(lab_addr: &str) -> Option<(String, String)> {
    let last: u8 = lab_addr.rsplit('.').next()?.parse().ok()?;
    Some((format!("198.19.{last}.0/24"), format!("198.19.{last}.100")))
}

/// The helper's command line (run in the endpoint's namespace), and what tells that it is ready:
/// the address the container's namespace then has.
fn command_line(net: Network, inner_ns: &Path, mtu: u32, cidr: Option<&str>, api: &Path) -> Vec<String> {
    let ports = format!("{}-{}", crate::lab::FLOW_PORTS.start(), crate::lab::FLOW_PORTS.end());
    let mtu = mtu.min(DEFAULT_MTU).to_string();
    let ns = inner_ns.display().to_string();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match net {
        Network::Veth => Vec::new(),
        // --runas 0:0: as nobody, pasta cannot enter a namespace root made. -g: the endpoint has
        // no default route, without which pasta finds no usable interface. --no-map-gw: the
        // tester's address stays the tester's, not a way to the endpoint's loopback. -4: the lab
        // is IPv4.
        Network::Pasta => v(&[
            "pasta",
            "-f",
            "-q",
            "-4",
            "--runas",
            "0:0",
            "--config-net",
            "--no-map-gw",
            "-i",
            "eth0",
            "-g",
            &crate::lab::TESTER_ADDR.to_string(),
            "-m",
            &mtu,
            "-t",
            &ports,
            "-u",
            &ports,
            "--netns",
            &ns,
        ]),
        // As Podman starts it (--disable-host-loopback, --enable-seccomp), with an inner network
        // from the lab's range; ports are added through its API socket. Not --enable-sandbox:
        // run as root in the host's mount namespace, its pivot_root and unmount of the old root
        // propagate through /run/netns (a shared mount once `ip netns` made one) and unmount
        // every namespace there — the lab's and any other (tried on this host).
        Network::Slirp4netns => v(&[
            "slirp4netns",
            "--configure",
            "--mtu",
            &mtu,
            "--disable-host-loopback",
            "--enable-seccomp",
            "--cidr",
            cidr.unwrap_or_default(),
            "--api-socket",
            &api.display().to_string(),
            "--netns-type=path",
            &ns,
            "tap0",
        ]),
    }
}

/// Starts the helper `params` asks for, for the instance `ctx` launches; None for `veth`, or
/// without a lab (the container's own namespace then stays unconnected either way).
pub fn start(ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Option<Helper>, LaunchError> {
    let net = Network::of(params);
    let (Some((prog, _)), Some(lab)) = (net.program(), ctx.netns.clone()) else { return Ok(None) };
    let prep = |m: String| LaunchError::Prepare(format!("the container's network ({prog}): {m}"));
    let lab_ns = lab.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let lab_addr = endpoint_addr(&lab_ns).map_err(prep)?;
    let mtu = mtu_of(params);
    let (cidr, inner_addr) = match net {
        Network::Slirp4netns => {
            let (c, a) = slirp_cidr(&lab_addr).ok_or_else(|| prep(format!("a lab address {lab_addr}?")))?;
            (Some(c), Some(a))
        }
        _ => (None, None),
    };
    let name = format!("{}n", ctx.instance_id);
    ctx.ledger.record(Entry::Netns { name: name.clone() });
    let made = crate::host::sh("ip", &["netns", "add", &name])
        .and_then(|()| crate::host::sh("ip", &["-n", &name, "link", "set", "lo", "up"]));
    if let Err(e) = made {
        crate::host::delete_netns(&name);
        ctx.ledger.forget(&Entry::Netns { name });
        return Err(prep(e));
    }
    let netns_path = crate::host::netns_path(&name);
    let api = ctx.run_dir.join(format!("{}-slirp.sock", ctx.instance_id));
    let log_path = ctx.run_dir.join(format!("{}-{prog}.log", ctx.instance_id));
    let argv = command_line(net, &netns_path, mtu, cidr.as_deref(), &api);
    let spawned = spawn_in(&lab, &argv, &log_path, ctx.ledger);
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            crate::host::delete_netns(&name);
            ctx.ledger.forget(&Entry::Netns { name });
            return Err(e);
        }
    };
    let mut helper = Helper {
        what: format!("{prog} for {}", ctx.instance_id),
        child,
        netns: name.clone(),
        netns_path,
        inner_addr: inner_addr.clone(),
    };
    let want = inner_addr.unwrap_or(lab_addr);
    match ready(&mut helper, &name, &want, &log_path, net, &api) {
        Ok(()) => Ok(Some(helper)),
        Err(why) => {
            helper.stop(ctx.ledger);
            Err(prep(why))
        }
    }
}

/// Spawns `argv` in the namespace at `lab`, dying with virtperf, its output to `log`; its pid
/// in the ledger before anything else happens.
fn spawn_in(lab: &Path, argv: &[String], log: &Path, ledger: &mut Ledger) -> Result<Child, LaunchError> {
    let what = argv.first().cloned().unwrap_or_default();
    let spawn_err = |source| LaunchError::Spawn { what: what.clone(), source };
    let out = std::fs::File::create(log).map_err(spawn_err)?;
    let err = out.try_clone().map_err(spawn_err)?;
    let mut cmd = Command::new(&what);
    cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err);
    let keep = join_netns_on_spawn(&mut cmd, Some(lab))?;
    virtperf_workload::tools::die_with_parent(&mut cmd);
    let child = crate::host::spawn_lasting(&mut cmd).map_err(spawn_err)?;
    drop(keep);
    ledger.record_process(child.id(), &format!("{what} (a container's network)"));
    Ok(child)
}

/// Waits until the container's namespace has `addr` and, for slirp4netns, adds the trial's port
/// forwards; the reason when it exits or runs out of time.
fn ready(h: &mut Helper, ns: &str, addr: &str, log: &Path, net: Network, api: &Path) -> Result<(), String> {
    let end = Instant::now() + READY;
    let has_addr = || {
        crate::host::run(Command::new("ip").args(["-n", ns, "-4", "-o", "addr", "show"]), "`ip addr show`")
            .is_ok_and(|o| o.split_whitespace().any(|w| w.split('/').next() == Some(addr)))
    };
    loop {
        if let Ok(Some(status)) = h.child.try_wait() {
            let why =
                format!("{} exited ({status}) before the container's network was up: {}", h.what, tail(log));
            return Err(why);
        }
        if has_addr() && (net != Network::Slirp4netns || api.exists()) {
            break;
        }
        if Instant::now() >= end {
            let why = format!(
                "{} did not configure the container's network within {READY:?}: {}",
                h.what,
                tail(log)
            );
            return Err(why);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if net == Network::Slirp4netns {
        for proto in ["tcp", "udp"] {
            for port in crate::lab::FLOW_PORTS {
                if let Err(e) = add_hostfwd(api, proto, port) {
                    return Err(format!("slirp4netns would not forward {proto} port {port}: {e}"));
                }
            }
        }
    }
    Ok(())
}

/// Asks slirp4netns (its API socket) to forward `proto` `port` on the endpoint's addresses to the
/// same port inside; its answer read with a deadline and a bound.
fn add_hostfwd(api: &Path, proto: &str, port: u16) -> Result<(), String> {
    use std::os::unix::net::UnixStream;
    let mut s = UnixStream::connect(api).map_err(|e| format!("{}: {e}", api.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
    let req = serde_json::json!({
        "execute": "add_hostfwd",
        "arguments": {"proto": proto, "host_addr": "0.0.0.0", "host_port": port, "guest_port": port},
    });
    s.write_all(req.to_string().as_bytes()).map_err(|e| e.to_string())?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = Vec::new();
    s.take(4096).read_to_end(&mut buf).map_err(|e| e.to_string())?;
    let answer: Value = serde_json::from_slice(&buf)
        .map_err(|_| format!("an answer that is not JSON: {:?}", String::from_utf8_lossy(&buf)))?;
    match answer.get("return") {
        Some(_) => Ok(()),
        None => Err(answer.get("error").map_or_else(|| answer.to_string(), Value::to_string)),
    }
}

/// The last bytes of a helper's log, on one line.
fn tail(log: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(log) else { return "(no output)".into() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(LOG_TAIL)));
    let mut buf = Vec::new();
    let _ = f.take(LOG_TAIL).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        "(no output)".into()
    } else {
        lines.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoints_address_is_read_from_ip_output() {
        let addr = "7: eth0    inet 198.18.0.10/24 scope global eth0\\       valid_lft forever";
        assert_eq!(parse_inet(addr).as_deref(), Some("198.18.0.10"));
        assert_eq!(parse_inet("7: eth0    inet6 fe80::1/64 scope link"), None);
        assert_eq!(slirp_cidr("198.18.0.10"), Some(("198.19.10.0/24".into(), "198.19.10.100".into())));
    }

    #[test]
    fn helpers_forward_the_trials_ports_from_the_lab_range() {
        let api = Path::new("/run/virtperf/x.sock");
        let p = command_line(Network::Pasta, Path::new("/run/netns/vp1-0-0n"), 70000, None, api);
        let s = p.join(" ");
        assert!(s.contains("-t 5201-5328 -u 5201-5328") && s.contains("-m 65520"), "{s}");
        assert!(s.contains("--netns /run/netns/vp1-0-0n") && s.contains("-g 198.18.0.1"), "{s}");
        let s = command_line(
            Network::Slirp4netns,
            Path::new("/run/netns/vp1-0-0n"),
            1500,
            Some("198.19.10.0/24"),
            api,
        )
        .join(" ");
        assert!(
            s.contains("--cidr 198.19.10.0/24") && s.contains("--mtu 1500") && s.ends_with("tap0"),
            "{s}"
        );
        assert!(command_line(Network::Veth, api, 1500, None, api).is_empty());
        // Every address a helper gives is in 198.18.0.0/15.
        let (c, a) = slirp_cidr("198.18.0.73").unwrap();
        assert!(c.starts_with("198.19.") && a.starts_with("198.19."));
    }

    #[test]
    fn the_knob_reads_its_value() {
        let p = |v: &str| [("network".to_string(), Value::from(v))].into();
        assert_eq!(Network::of(&p("pasta")), Network::Pasta);
        assert_eq!(Network::of(&p("slirp4netns")), Network::Slirp4netns);
        assert_eq!(Network::of(&BTreeMap::new()), Network::Veth);
        assert_eq!(Network::Pasta.program(), Some(("pasta", "passt")));
    }
}
