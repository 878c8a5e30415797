//! The lab: the private network every run that has network workloads builds for itself.
//!
//! ```text
//!   netns vpPID-t (tester)        netns vpPID-hub              netns vpPID-e0 (DUT 0)
//!   eth0 198.18.0.1/24 ──veth── h0 ─┐                      ┌─ h1 ──veth── eth0 198.18.0.10/24
//!                                   └──────── br0 ─────────┤
//!                                                          └─ h2 ──veth── eth0 198.18.0.11/24  (DUT 1) …
//! ```
//!
//! One namespace per endpoint, one hub namespace holding the bridge: nothing is created in, or
//! changed about, the root namespace. Each namespace is written to the ledger before it is
//! created; deleting a namespace destroys the veths and qdiscs inside it, so the namespaces are
//! all there is to undo. Link emulation (rate, delay, loss) is put on both ends of the tester's
//! veth — the wire every environment and instance shares — or, when workloads run between
//! environments (all-pairs), on both ends of each environment's veth instead.
//!
//! Why `ip`/`tc` (iproute2) rather than a netlink crate: `ip netns` owns the `/run/netns`
//! bind-mount convention that OCI runtimes (and a user debugging a run) understand, qdisc options
//! (netem, tbf with a size table) have no maintained Rust binding, and each command's error text
//! says precisely what the kernel refused.

pub mod switch;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::host::{delete_netns, netns_path};
use crate::ledger::{Entry, Ledger};
pub use switch::{Switch, SwitchLimits};

pub use virtperf_record::wire::{ETH_HEADER, MIN_WIRE_FRAME, WIRE_OVERHEAD};
/// The ports a trial's flows use (iperf3's first port on): instance k's outbound flow on
/// `5201 + 2k`, its inbound one on `5201 + 2k + 1`, for the at most 64 instances of a run
/// (`experiment::model::MAX_INSTANCES`). A helper that forwards into a container's own namespace
/// (pasta, slirp4netns) forwards these.
pub const FLOW_PORTS: std::ops::RangeInclusive<u16> = 5201..=5328;
/// Largest tbf burst: under a 64 KiB GSO packet, so tbf always segments super-packets.
const TBF_BURST_MAX: u64 = 32 * 1024;

/// The lab's settings (experiment `[lab]` table, `--lab key=value,...`).
#[derive(Debug, Clone, PartialEq)]
pub struct LabSpec {
    pub mtu: u32,
    /// Link rate in bit/s, counted on the wire (with [`WIRE_OVERHEAD`]); None = unshaped.
    pub rate_bps: Option<u64>,
    /// One-way delay added per direction, µs.
    pub delay_us: u64,
    /// Random loss per direction, percent.
    pub loss_pct: f64,
    /// CPUs the tester is pinned to.
    pub tester_cpuset: Option<String>,
    /// The `[[host]]` the tester runs on (the seeds' traffic generator on a second machine);
    /// None: this machine, in the lab.
    pub tester_host: Option<String>,
    /// What joins the endpoints in the hub: the kernel's bridge, Open vSwitch, a driver domain.
    pub switch: Switch,
    /// Where the switch runs and how much CPU it gets (OVS, driver domain).
    pub switch_limits: SwitchLimits,
}

impl Default for LabSpec {
    fn default() -> Self {
        LabSpec {
            mtu: 1500,
            rate_bps: None,
            delay_us: 0,
            loss_pct: 0.0,
            tester_cpuset: None,
            tester_host: None,
            switch: Switch::Bridge,
            switch_limits: SwitchLimits { cpus: None, cap: None, vcpus: 1 },
        }
    }
}

impl LabSpec {
    pub fn needs_netem(&self) -> bool {
        self.delay_us > 0 || self.loss_pct > 0.0
    }
}

/// How building or using the lab fails.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// What this host lacks for the lab (root, a program, a qdisc), and how to get it: the run
    /// cannot start here.
    #[error("{0}")]
    Unavailable(String),
    #[error("at most {MAX_ENDPOINTS} environments per run have a lab address")]
    TooMany,
    /// A command that built or mended part of the lab failed: its words and stderr.
    #[error("{0}")]
    Command(String),
    #[error(transparent)]
    Switch(#[from] switch::SwitchError),
    /// The driver domain (a guest that is the switch) did not come up.
    #[error("the driver domain: {0}")]
    DriverDomain(String),
}

fn sh(prog: &str, args: &[&str]) -> Result<(), LabError> {
    crate::host::sh(prog, args).map_err(LabError::Command)
}

/// Checks that qdisc `kind` (e.g. `netem`) exists in this kernel (the host's facts), without
/// creating anything.
pub fn qdisc_available(kind: &str) -> Result<(), LabError> {
    let f = crate::host::facts();
    if f.has_qdisc(kind) {
        return Ok(());
    }
    Err(LabError::Unavailable(format!(
        "the kernel has no `{kind}` qdisc (it has: {}); use a kernel with CONFIG_NET_SCH_{}=y or =m, or leave the option out",
        if f.qdiscs.is_empty() { "none that virtperf knows".to_string() } else { f.qdiscs.join(", ") },
        kind.to_uppercase()
    )))
}

/// Whether the lab can be built here; the reason and fix when not.
pub fn availability(spec: &LabSpec) -> Result<(), LabError> {
    let lacks = LabError::Unavailable;
    if !crate::host::is_root() {
        return Err(lacks(
            "network workloads build a private lab of network namespaces, which needs root; run as root (sudo)"
                .into(),
        ));
    }
    for prog in ["ip", "tc"] {
        if crate::host::which(prog).is_none() {
            return Err(lacks(format!("`{prog}` is not installed; install iproute2 (`make deps` does)")));
        }
    }
    if spec.needs_netem() {
        qdisc_available("netem").map_err(|e| lacks(format!("delay/loss emulation: {e}")))?;
    }
    if spec.rate_bps.is_some() && !spec.needs_netem() {
        qdisc_available("tbf").map_err(|e| lacks(format!("rate emulation: {e}")))?;
    }
    Ok(())
}

/// One end of the lab: a namespace with an `eth0` on the bridge.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub netns: String,
    pub addr: Ipv4Addr,
    /// For a guest with its own kernel (UML, QEMU): a tap device in the endpoint namespace,
    /// bridged with `eth0`; the address then belongs to the guest's NIC, not to the namespace.
    pub tap: Option<String>,
}

/// The tap device of a guest endpoint.
pub const TAP: &str = "tap0";

impl Endpoint {
    pub fn netns_path(&self) -> PathBuf {
        netns_path(&self.netns)
    }
}

/// The `tc` arguments that put `spec`'s link emulation on the egress of `dev` in `ns`; None when
/// the link is not emulated.
pub fn shape_args(s: &LabSpec, ns: &str, dev: &str) -> Option<Vec<String>> {
    let mut args: Vec<String> = ["-n", ns, "qdisc", "add", "dev", dev, "root"].map(String::from).to_vec();
    if s.needs_netem() {
        args.extend(["netem", "limit", "100000"].map(String::from));
        if s.delay_us > 0 {
            args.extend(["delay".into(), format!("{}us", s.delay_us)]);
        }
        if s.loss_pct > 0.0 {
            args.extend(["loss".into(), "random".into(), format!("{}%", s.loss_pct)]);
        }
        if let Some(r) = s.rate_bps {
            // netem's rate takes the per-packet overhead as its second argument.
            args.extend(["rate".into(), format!("{r}bit"), WIRE_OVERHEAD.to_string()]);
        }
    } else if let Some(r) = s.rate_bps {
        // Gigabit Ethernet frame by frame, with segmentation offload left on (one frame per skb
        // costs this host ~40 µs per segment of TCP: 0.35 Gbit/s at most). tbf splits any packet
        // larger than its burst into wire-sized segments itself (`tbf_segment`), and charges each
        // dequeued packet its length + `overhead` (FCS, preamble, gap), at least `mpu` (the
        // 64-byte minimum frame on the wire: 84). A size table (`stab`) would be charged once per
        // 64 KiB super-packet instead: 0.999 Gbit/s through a 0.9415 Gbit/s ceiling.
        // Burst: 1 ms at the link rate (a late timer loses no tokens), at least 4 full frames, at
        // most half a GSO packet (64 KiB) so that super-packets are always split.
        let frame = s.mtu as u64 + ETH_HEADER + WIRE_OVERHEAD;
        let burst = (r / 8 / 1000).clamp(4 * frame, TBF_BURST_MAX.max(4 * frame));
        args.extend([
            "tbf".into(),
            "rate".into(),
            format!("{r}bit"),
            "burst".into(),
            burst.to_string(),
            "latency".into(),
            "50ms".into(),
            "overhead".into(),
            WIRE_OVERHEAD.to_string(),
            "mpu".into(),
            MIN_WIRE_FRAME.to_string(),
        ]);
    } else {
        return None;
    }
    Some(args)
}

/// The lab of one run.
pub struct Lab {
    pub spec: LabSpec,
    pub tester: Endpoint,
    /// One per environment of the experiment, in the experiment's order.
    pub endpoints: Vec<Endpoint>,
    created: Vec<String>,
    /// `switch = "ovs"`: the running switch (checked by every worker between trials).
    ovs: Option<std::sync::Mutex<switch::Ovs>>,
}

pub const TESTER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Endpoint `i` gets 198.18.0.(10 + i); a /24 holds 245 of them.
pub const MAX_ENDPOINTS: usize = 245;

pub fn endpoint_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 10 + i as u8)
}

/// The `rps_cpus` mask of every online CPU (comma-separated 32-bit groups, as sysfs writes it).
pub fn all_cpus_mask(n: usize) -> String {
    cpus_mask(&(0..n.max(1)).collect::<Vec<_>>())
}

/// The `rps_cpus` mask of these CPUs (comma-separated 32-bit groups, most significant first).
pub fn cpus_mask(cpus: &[usize]) -> String {
    let groups_n = cpus.iter().max().map_or(1, |m| m / 32 + 1);
    let mut groups = vec![0u32; groups_n];
    for &c in cpus {
        groups[c / 32] |= 1 << (c % 32);
    }
    groups.iter().rev().map(|g| format!("{g:x}")).collect::<Vec<_>>().join(",")
}

/// Turns on receive packet steering over every CPU for `dev`'s receive queue in `ns`.
pub(crate) fn steer_flows(ns: &str, dev: &str) -> Result<(), LabError> {
    steer_flows_to(ns, dev, &all_cpus_mask(crate::host::host_cpus()))
}

/// Receive packet steering of `dev`'s receive queue in `ns` to the CPUs of `mask`.
fn steer_flows_to(ns: &str, dev: &str, mask: &str) -> Result<(), LabError> {
    let script = format!("echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus");
    sh("ip", &["netns", "exec", ns, "sh", "-c", &script])
}

impl Lab {
    /// Builds the hub, the tester's endpoint and `n` DUT endpoints. On any error, removes what
    /// it made and says which step failed.
    /// `taps[i]`: environment i is a guest that needs a tap instead of an address.
    /// `pairs`: some workload runs between environments (all-pairs), so each environment's own
    /// link is the one to shape; else the tester's link is, shared by every environment and
    /// instance (see [`Lab::build_inner`]).
    /// `dir`: where the switch keeps its files (the run's directory).
    pub fn build(
        ledger: &mut Ledger,
        taps: &[bool],
        spec: &LabSpec,
        pairs: bool,
        dir: &Path,
    ) -> Result<Lab, LabError> {
        let n = taps.len();
        if n > MAX_ENDPOINTS {
            return Err(LabError::TooMany);
        }
        let prefix = format!("vp{}", std::process::id());
        let mut lab = Lab {
            spec: spec.clone(),
            tester: Endpoint { netns: format!("{prefix}-t"), addr: TESTER_ADDR, tap: None },
            endpoints: (0..n)
                .map(|i| Endpoint {
                    netns: format!("{prefix}-e{i}"),
                    addr: endpoint_addr(i),
                    tap: taps[i].then(|| TAP.to_string()),
                })
                .collect(),
            created: Vec::new(),
            ovs: None,
        };
        match lab.build_inner(ledger, &prefix, pairs, dir) {
            Ok(()) => Ok(lab),
            Err(e) => {
                lab.teardown(ledger);
                Err(e)
            }
        }
    }

    fn add_netns(&mut self, ledger: &mut Ledger, name: &str) -> Result<(), LabError> {
        ledger.record(Entry::Netns { name: name.to_string() });
        self.created.push(name.to_string());
        sh("ip", &["netns", "add", name])?;
        sh("ip", &["-n", name, "link", "set", "lo", "up"])
    }

    /// Shaping puts exactly one emulated wire on each environment↔tester path, each direction:
    /// two token buckets in series at the same rate lose throughput (the second has no backlog,
    /// so each late timer loses tokens for good: 0.76–0.93 Gbit/s through a 0.94 Gbit/s wire,
    /// measured). With only tester flows, the wire is the tester's link (both ends), which N
    /// environments or instances then share, as seed 000's VMs shared their host's NIC. With
    /// all-pairs flows, each environment's link is shaped instead (both ends), so that a pair of
    /// environments is joined by emulated wires; a path between two environments then crosses two.
    fn build_inner(
        &mut self,
        ledger: &mut Ledger,
        prefix: &str,
        pairs: bool,
        dir: &Path,
    ) -> Result<(), LabError> {
        let hub = format!("{prefix}-hub");
        self.add_netns(ledger, &hub)?;
        let kernel_bridge = self.spec.switch == Switch::Bridge;
        if kernel_bridge {
            sh("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
            sh("ip", &["-n", &hub, "link", "set", "br0", "up"])?;
        }
        let mtu = self.spec.mtu.to_string();
        // Where the lab's packets are received (RPS): with the tester pinned, on the tester's
        // CPUs — the wire, the switch and the other machine's side all on one side of the host,
        // every environment's packets taking the same way on every launch. Hashed over every
        // CPU instead, each flow's receive work landed on the environment's CPU or on another
        // by its port numbers: a TCP stream's goodput was 9-10 or 15 Gbit/s from one trial to
        // the next, a 1-byte exchange 6, 35 or 70 µs (docs/lab.md, "Placement").
        let rps = match &self.spec.tester_cpuset {
            Some(set) => cpus_mask(&crate::host::check_cpuset(set).map_err(LabError::Unavailable)?),
            None => all_cpus_mask(crate::host::host_cpus()),
        };
        let ends: Vec<(Endpoint, bool)> = std::iter::once((self.tester.clone(), !pairs))
            .chain(self.endpoints.iter().cloned().map(|e| (e, pairs)))
            .collect();
        for (i, (ep, shaped)) in ends.iter().enumerate() {
            let ns = ep.netns.as_str();
            self.add_netns(ledger, ns)?;
            let h = format!("h{i}");
            // OVS sends on its ports through packet sockets that bypass their qdiscs: a shaped
            // link then runs through a wire namespace of its own, whose kernel bridge forwards
            // (and shapes) each direction.
            let wire = (*shaped && self.spec.switch == Switch::Ovs).then(|| format!("{prefix}-w{i}"));
            let (peer_ns, peer) = match &wire {
                Some(w) => (w.as_str(), "wh"),
                None => (ns, "eth0"),
            };
            if let Some(w) = &wire {
                self.add_netns(ledger, w)?;
            }
            sh(
                "ip",
                &[
                    "-n", &hub, "link", "add", &h, "mtu", &mtu, "type", "veth", "peer", "name", peer,
                    "netns", peer_ns,
                ],
            )?;
            if let Some(w) = &wire {
                sh(
                    "ip",
                    &[
                        "-n", w, "link", "add", "wt", "mtu", &mtu, "type", "veth", "peer", "name", "eth0",
                        "netns", ns,
                    ],
                )?;
                sh("ip", &["-n", w, "link", "add", "br0", "type", "bridge"])?;
                for d in ["wh", "wt"] {
                    sh("ip", &["-n", w, "link", "set", d, "master", "br0", "up"])?;
                    steer_flows_to(w, d, &rps)?;
                }
                sh("ip", &["-n", w, "link", "set", "br0", "up"])?;
            }
            match self.spec.switch {
                Switch::Bridge => sh("ip", &["-n", &hub, "link", "set", &h, "master", "br0", "up"])?,
                Switch::Ovs => sh("ip", &["-n", &hub, "link", "set", &h, "up"])?,
                Switch::DriverDomain => {
                    sh("ip", &["-n", &hub, "link", "set", &h, "up"])?;
                    switch::plumb_domain_port(&hub, i, &mtu)?;
                }
            }
            sh("ip", &["-n", ns, "link", "set", "eth0", "mtu", &mtu])?;
            // A userspace switch reads frames through packet sockets, where a checksum left to the
            // NIC (veths leave it to nobody) is never filled in: TCP would drop every such segment.
            if self.spec.switch == Switch::Ovs {
                sh("ip", &["netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off"])?;
            }
            match &ep.tap {
                None => sh("ip", &["-n", ns, "addr", "add", &format!("{}/24", ep.addr), "dev", "eth0"])?,
                Some(tap) => {
                    // eth0 and the guest's tap on a bridge of the endpoint namespace: frames
                    // from the guest's NIC reach the hub unchanged (and shaped on eth0).
                    sh("ip", &["-n", ns, "link", "add", "br0", "type", "bridge"])?;
                    sh("ip", &["-n", ns, "tuntap", "add", "dev", tap, "mode", "tap"])?;
                    sh("ip", &["-n", ns, "link", "set", tap, "mtu", &mtu, "master", "br0", "up"])?;
                    sh("ip", &["-n", ns, "link", "set", "eth0", "master", "br0"])?;
                    sh("ip", &["-n", ns, "link", "set", "br0", "up"])?;
                }
            }
            sh("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            // In-order delivery, as on a wire: a veth queues received packets on the backlog of
            // whichever CPU sent them, so a sender that moves between CPUs (or a qdisc dequeued
            // from a timer) reorders a TCP flow (iperf3: ~24 000 retransmits in 3 s unshaped).
            // RPS steers each flow to one CPU by its hash: 0 retransmits, the same goodput.
            steer_flows_to(ns, "eth0", &rps)?;
            steer_flows_to(&hub, &h, &rps)?;
            if let Some(tap) = &ep.tap {
                steer_flows_to(ns, tap, &rps)?;
            }
            if *shaped {
                match &wire {
                    // Towards the endpoint on the wire's side: the hub's end is OVS's own.
                    Some(w) => self.shape(w, "wt")?,
                    None => self.shape(&hub, &h)?,
                }
                self.shape(ns, "eth0")?;
            }
        }
        if self.spec.switch == Switch::Ovs {
            let ports: Vec<String> = (0..ends.len()).map(|i| format!("h{i}")).collect();
            let cpus = match &self.spec.switch_limits.cpus {
                Some(c) => Some(crate::host::check_cpuset(c).map_err(LabError::Unavailable)?),
                None => None,
            };
            let ovs = switch::Ovs::start(ledger, &hub, &dir.join("ovs"), &ports, cpus.as_deref())?;
            self.ovs = Some(std::sync::Mutex::new(ovs));
        }
        Ok(())
    }

    /// The hub namespace (where the switch runs).
    pub fn hub_netns_path(&self) -> PathBuf {
        netns_path(&self.tester.netns.replace("-t", "-hub"))
    }

    /// The taps a driver domain's NICs attach to, one per endpoint (the tester's first).
    pub fn domain_taps(&self) -> Vec<String> {
        (0..=self.endpoints.len()).map(switch::domain_tap).collect()
    }

    /// The pid of the switch's process, where it has one (`ovs-vswitchd`).
    pub fn switch_pid(&self) -> Option<u32> {
        let o = self.ovs.as_ref()?.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(o.vswitchd_pid())
    }

    /// Why the switch stopped, when it has (a trial then fails with this reason).
    pub fn switch_gone(&self) -> Option<String> {
        let mut o = self.ovs.as_ref()?.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        o.gone()
    }

    /// Puts the link emulation on the egress of `dev` in `ns`.
    fn shape(&self, ns: &str, dev: &str) -> Result<(), LabError> {
        match shape_args(&self.spec, ns, dev) {
            Some(args) => sh("tc", &args.iter().map(String::as_str).collect::<Vec<_>>()),
            None => Ok(()),
        }
    }

    /// Gives endpoint `i`'s `eth0` back its address (and with it the lab's route) before another
    /// launch joins it: gVisor's netstack takes them over from the namespace when it starts (runsc
    /// with `network = sandbox`) and does not give them back when it stops, so a relaunched gVisor
    /// found no address to take (measured: every network trial of its second launch failed with
    /// "Cannot assign requested address"). Idempotent; a guest's endpoint (tap) has none.
    pub fn restore_endpoint(&self, i: usize) -> Result<(), LabError> {
        let Some(ep) = self.endpoints.get(i).filter(|e| e.tap.is_none()) else { return Ok(()) };
        let ns = ep.netns.as_str();
        sh("ip", &["-n", ns, "addr", "replace", &format!("{}/24", ep.addr), "dev", "eth0"])?;
        sh("ip", &["-n", ns, "link", "set", "eth0", "up"])
    }

    /// Stops the switch, then removes every namespace of the lab (the processes inside must be
    /// gone first).
    pub fn teardown(&mut self, ledger: &mut Ledger) {
        if let Some(o) = self.ovs.take() {
            o.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).stop(ledger);
        }
        for name in std::mem::take(&mut self.created).iter().rev() {
            delete_netns(name);
            ledger.forget(&Entry::Netns { name: name.clone() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_namespaces_are_ever_deleted() {
        for n in ["default", "vpx", "../vp1", "vp", "vp1/../x", "xvp1"] {
            assert!(!crate::host::netns_is_ours(n), "{n}");
        }
        for n in ["vp1", "vp42-e0", "vp7-hub"] {
            assert!(crate::host::netns_is_ours(n), "{n}");
        }
        // With namespaces for real (root): one not ours survives delete_netns, one ours goes.
        let pid = std::process::id();
        let (theirs, ours) = (format!("vptest{pid}"), format!("vp9{pid}test"));
        if crate::host::sh("ip", &["netns", "add", &theirs]).is_ok() {
            let _ = crate::host::sh("ip", &["netns", "add", &ours]);
            delete_netns(&theirs);
            delete_netns(&ours);
            let (kept, gone) = (netns_path(&theirs).exists(), !netns_path(&ours).exists());
            let _ = crate::host::sh("ip", &["netns", "delete", &theirs]);
            assert!(kept, "a namespace not ours was deleted");
            assert!(gone, "ours was not deleted");
        } else {
            crate::host::unit_skip("the real-namespace half: `ip netns add` needs root");
        }
        assert_eq!(endpoint_addr(0), Ipv4Addr::new(198, 18, 0, 10));
        assert_eq!(endpoint_addr(MAX_ENDPOINTS - 1), Ipv4Addr::new(198, 18, 0, 254));
    }

    #[test]
    fn shaper_command_lines() {
        assert_eq!(shape_args(&LabSpec::default(), "n", "eth0"), None, "unshaped: no qdisc");
        let rate = LabSpec { rate_bps: Some(1_000_000_000), ..Default::default() };
        assert_eq!(
            shape_args(&rate, "vp1-e0", "eth0").unwrap().join(" "),
            "-n vp1-e0 qdisc add dev eth0 root tbf rate 1000000000bit burst 32768 latency 50ms overhead 24 mpu 84"
        );
        let fast = LabSpec { rate_bps: Some(10_000_000_000), ..Default::default() };
        let a = shape_args(&fast, "n", "d").unwrap();
        assert_eq!(a[a.iter().position(|x| x == "burst").unwrap() + 1], "32768", "below a 64 KiB GSO packet");
        assert_eq!(all_cpus_mask(2), "3");
        assert_eq!(all_cpus_mask(32), "ffffffff");
        assert_eq!(all_cpus_mask(40), "ff,ffffffff");
        assert_eq!(cpus_mask(&[0]), "1");
        assert_eq!(cpus_mask(&[1]), "2");
        assert_eq!(cpus_mask(&[0, 2, 3]), "d");
        assert_eq!(cpus_mask(&[33]), "2,0");
        assert_eq!(cpus_mask(&[]), "0");
        // Delay or loss need netem (not exercised on kernels without CONFIG_NET_SCH_NETEM).
        let netem =
            LabSpec { rate_bps: Some(1_000_000_000), delay_us: 500, loss_pct: 0.1, ..Default::default() };
        assert_eq!(
            shape_args(&netem, "vp1-hub", "h1").unwrap().join(" "),
            "-n vp1-hub qdisc add dev h1 root netem limit 100000 delay 500us loss random 0.1% rate 1000000000bit 24"
        );
        let slow = LabSpec { rate_bps: Some(1_000_000), ..Default::default() };
        let a = shape_args(&slow, "n", "d").unwrap();
        assert_eq!(a[a.iter().position(|x| x == "burst").unwrap() + 1], "6152", "at least four full frames");
    }

    #[test]
    fn qdisc_probe_names_the_kernel_option() {
        let e = qdisc_available("nosuchqdisc").unwrap_err();
        assert!(matches!(e, LabError::Unavailable(_)), "a host's lack: {e:?}");
        let e = e.to_string();
        assert!(e.contains("CONFIG_NET_SCH_NOSUCHQDISC") && e.contains("it has:"), "{e}");
    }
}
