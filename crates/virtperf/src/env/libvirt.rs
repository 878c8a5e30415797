//! `libvirt`: a domain run by a libvirt daemon (`qemu:///system` by default: QEMU under TCG or
//! KVM; `xen:///system` for Xen), driven through `virsh`.
//!
//! Why `virsh` and not a binding of libvirt's C library: it ships with every libvirt, needs no C
//! library when virtperf is built and no particular libvirt version when it runs. A launch costs a
//! few `virsh` processes, all outside every measurement. A daemon on another machine is driven
//! from that machine (`host = "b"`, virsh run there by `remote-launch`): a `qemu+ssh://` URI is
//! refused, since the guest's agent socket would live out of reach.
//!
//! Two ways to get a guest:
//! - **virtperf's own guest** (the default): the qemu environment's image (same kernel, same
//!   initramfs), defined as a *transient* domain from generated XML ([`domain_xml`]): direct
//!   kernel boot; the agent's line on a virtio console bound to a unix socket in the instance's
//!   directory; the kernel console on the serial port, another socket, kept as a bounded log. QEMU
//!   runs as root (a static DAC label), as the qemu environment's QEMU does: the image lives in
//!   virtperf's private cache and state directories.
//! - **an existing domain** (`domain = "name"`): started for each launch (or reverted to
//!   `snapshot`, running) and powered off after; it stays defined. Its XML declares a unix-socket
//!   console or channel on which its agent (`virtperf agent --tty DEV`) answers;
//!   `virtperf image domain-xml` prints such a domain.
//!
//! The lab's tap: a system daemon's QEMU opens a tap *by name in the daemon's network namespace*.
//! For the moment the domain starts, the endpoint's tap is lent to that namespace under a unique
//! name (`vpl…`, recorded in the ledger first: [`crate::ledger::Entry::DaemonTap`]), without an
//! address or a route, then returned to the endpoint's bridge. QEMU keeps its descriptor.
//!
//! Host CPU: the domain's own cgroup, which libvirt makes (every task of the domain, vhost
//! workers included: `cgroup::own_cgroup_probe`); QEMU's process clock only where there is none.
//! Idle domains are paused with `virsh suspend`.
//!
//! docs/environments/libvirt.md says what was exercised on which host.

use crate::host::command::one_line;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use virtperf_workload::{ParamError, ParamKind, ParamSpec};

use super::cgroup::CpuProbe;
use super::conn::{Conn, Tail};
use super::launch::{Availability, Environment, GuestNet, Instance, LaunchCtx, LaunchError, Teardown};
use super::qemu::{self, Accel, KvmFacts};
use crate::ledger::{Entry, Ledger};

pub struct Libvirt;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "uri",
        kind: ParamKind::Text,
        default: Some("qemu:///system"),
        help: "the libvirt connection on the environment's machine: qemu:///system, xen:///system (another machine's daemon: host = \"b\", not qemu+ssh://)",
    },
    ParamSpec {
        name: "domain_type",
        kind: ParamKind::Choice(&["auto", "qemu", "kvm", "xen"]),
        default: Some("auto"),
        help: "qemu (TCG: binary translation), kvm (hardware virtualization), xen; auto: xen for a xen URI, else kvm where KVM runs a stock guest, else qemu",
    },
    ParamSpec { name: "vcpus", kind: ParamKind::Int { min: 1, max: 64 }, default: Some("1"), help: "virtual CPUs" },
    ParamSpec {
        name: "memory",
        kind: ParamKind::Size { min: 128 << 20, max: 1 << 40 },
        default: Some("512MiB"),
        help: "guest memory",
    },
    ParamSpec {
        name: "nic",
        kind: ParamKind::Choice(&["virtio", "e1000", "rtl8139"]),
        default: Some("virtio"),
        help: "NIC model on the lab tap (QEMU/KVM); a Xen guest always has a netfront NIC",
    },
    ParamSpec {
        name: "disk",
        kind: ParamKind::Choice(&["none", "virtio", "sata"]),
        default: Some("none"),
        help: "a scratch disk (raw image, ext4, at /scratch): virtio (virtio-blk) or sata (AHCI); a Xen guest's is a PV disk (blkfront)",
    },
    ParamSpec {
        name: "cache",
        kind: ParamKind::Choice(&["writeback", "none", "writethrough", "directsync", "unsafe"]),
        default: Some("writeback"),
        help: "host cache mode of the disk image (libvirt's <driver cache=…>)",
    },
    ParamSpec {
        name: "disk_size",
        kind: ParamKind::Size { min: 1 << 20, max: 1 << 42 },
        default: Some("256MiB"),
        help: "size of the scratch disk",
    },
    ParamSpec {
        name: "pin",
        kind: ParamKind::Text,
        default: None,
        help: "host CPUs for the vCPUs, e.g. 1 or 0,1 (vCPU i on the i-th, round robin): <cputune><vcpupin>",
    },
    ParamSpec {
        name: "domain",
        kind: ParamKind::Text,
        default: None,
        help: "an existing, shut-off domain to start for each launch and power off after, instead of virtperf's own guest",
    },
    ParamSpec {
        name: "snapshot",
        kind: ParamKind::Text,
        default: None,
        help: "with domain=: the snapshot to revert to (running) for each launch, instead of a plain start",
    },
];

/// A libvirt environment's parameters, read once from the resolved map.
#[derive(Debug, Clone)]
struct LvParams {
    uri: String,
    domain_type: String,
    vcpus: u32,
    memory: u64,
    nic: String,
    disk: Option<String>,
    /// Tools the workloads run inside the guest (set by the experiment, not the user).
    extra: Option<String>,
    cache: String,
    disk_size: u64,
    pin: Option<String>,
    domain: Option<String>,
    snapshot: Option<String>,
}

impl LvParams {
    fn of(params: &BTreeMap<String, Value>) -> LvParams {
        // Defaults from PARAMS (the one place they are written).
        let params = &crate::env::launch::with_defaults(PARAMS, params);
        let text =
            |k: &str| params.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
        let num = |k: &str| params.get(k).and_then(Value::as_u64).unwrap_or_default();
        LvParams {
            uri: text("uri").unwrap_or_default(),
            domain_type: text("domain_type").unwrap_or_default(),
            vcpus: num("vcpus") as u32,
            memory: num("memory"),
            nic: text("nic").unwrap_or_default(),
            disk: text("disk").filter(|d| d != "none"),
            extra: text("extra"),
            cache: text("cache").unwrap_or_default(),
            disk_size: num("disk_size"),
            pin: text("pin"),
            domain: text("domain"),
            snapshot: text("snapshot"),
        }
    }

    fn is_xen_uri(&self) -> bool {
        self.uri.starts_with("xen")
    }

    /// The domain type `auto` stands for here, or why the one asked for cannot run.
    fn domain_type(&self) -> Result<&'static str, (String, String)> {
        let xen_uri = self.is_xen_uri();
        match (self.domain_type.as_str(), xen_uri) {
            ("xen", true) | ("auto", true) => Ok("xen"),
            ("xen", false) => Err((
                format!("domain_type = \"xen\" needs a Xen daemon, and `{}` is not one", self.uri),
                "uri = \"xen:///system\" (on a Xen dom0), or domain_type = \"qemu\" or \"kvm\"".into(),
            )),
            (_, true) => Err((
                format!(
                    "domain_type = \"{}\" is QEMU's, and `{}` is a Xen daemon",
                    self.domain_type, self.uri
                ),
                "domain_type = \"xen\", or a qemu:// URI".into(),
            )),
            ("qemu", false) => Ok("qemu"),
            (t, false) => {
                let requested = if t == "kvm" { "kvm" } else { "auto" };
                match qemu::decide_accel(requested, &KvmFacts::probe(), false) {
                    Ok((Accel::Kvm, _)) => Ok("kvm"),
                    Ok((Accel::Tcg, _)) => Ok("qemu"),
                    Err((why, _)) => Err((why, "domain_type = \"qemu\" (TCG)".into())),
                }
            }
        }
    }

    /// The qemu environment's parameters that pick the same guest image.
    fn qemu_params(&self) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        m.insert("machine".to_string(), Value::from("q35"));
        m.insert("nic".to_string(), Value::from(self.nic.clone()));
        if let Some(d) = self.disk.as_deref() {
            m.insert("disk".to_string(), Value::from(qemu_disk(d)));
        }
        if let Some(x) = self.extra.as_deref() {
            m.insert("extra".to_string(), Value::from(x));
        }
        m
    }
}

/// The qemu environment's name for a libvirt disk bus.
fn qemu_disk(disk: &str) -> &'static str {
    if disk == "sata" {
        "sata"
    } else {
        "virtio-blk"
    }
}

/// Runs `virsh -c URI ARGS…`; its stdout, or its error as one line.
/// The machine a libvirt URI names (`qemu+ssh://root@b/system` → `root@b`); None for a daemon on
/// this machine (`qemu:///system`, `qemu+unix:///system`).
fn uri_host(uri: &str) -> Option<&str> {
    let (_, rest) = uri.split_once("://")?;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    (!authority.is_empty()).then_some(authority)
}

/// The same daemon reached on its own machine: `qemu+ssh://root@b/system` → `qemu:///system`.
fn local_uri(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else { return uri.to_string() };
    let driver = scheme.split('+').next().unwrap_or(scheme);
    let path = rest.find('/').map_or("/system", |i| &rest[i..]);
    format!("{driver}://{path}")
}

fn virsh(uri: &str, args: &[&str]) -> Result<String, String> {
    // A domain's start may wait on the daemon's capability probe (68 s seen): minutes at most.
    let out = crate::host::command::output_within(
        Command::new("virsh").arg("-q").arg("-c").arg(uri).args(args),
        crate::host::command::LONG,
    )
    .map_err(|e| format!("virsh: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(format!("virsh {} failed: {}", args.join(" "), one_line(&String::from_utf8_lossy(&out.stderr))))
}

/// XML-escapes text for an attribute or element.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// What a generated domain contains.
#[derive(Debug, Clone)]
pub struct DomainSpec {
    pub name: String,
    /// qemu, kvm or xen.
    pub domain_type: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub pin: Vec<usize>,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
    /// The agent's line: a unix socket QEMU (or Xen's console daemon) listens on.
    pub agent_sock: PathBuf,
    /// The kernel console, another socket.
    pub console_sock: PathBuf,
    /// (tap name, MAC, model)
    pub nic: Option<(String, String, String)>,
    /// (image path, bus, cache)
    pub disk: Option<(PathBuf, String, String)>,
}

/// The domain XML of virtperf's own guest. Written by hand (a few elements, every value escaped):
/// libvirt's own schema is the check, with `virt-xml-validate` in the unit tests.
pub fn domain_xml(d: &DomainSpec) -> String {
    let xen = d.domain_type == "xen";
    let mut x = String::new();
    let _ = writeln!(x, "<domain type='{}'>", esc(&d.domain_type));
    let _ = writeln!(x, "  <name>{}</name>", esc(&d.name));
    let _ = writeln!(x, "  <memory unit='MiB'>{}</memory>", d.memory_mib);
    let _ = writeln!(x, "  <vcpu placement='static'>{}</vcpu>", d.vcpus);
    if !d.pin.is_empty() {
        x.push_str("  <cputune>\n");
        for v in 0..d.vcpus as usize {
            let _ = writeln!(x, "    <vcpupin vcpu='{v}' cpuset='{}'/>", d.pin[v % d.pin.len()]);
        }
        x.push_str("  </cputune>\n");
    }
    x.push_str("  <os>\n");
    if xen {
        x.push_str("    <type arch='x86_64' machine='xenpvh'>xenpvh</type>\n");
    } else {
        x.push_str("    <type arch='x86_64' machine='q35'>hvm</type>\n");
    }
    let _ = writeln!(x, "    <kernel>{}</kernel>", esc(&d.kernel.to_string_lossy()));
    let _ = writeln!(x, "    <initrd>{}</initrd>", esc(&d.initrd.to_string_lossy()));
    let _ = writeln!(x, "    <cmdline>{}</cmdline>", esc(&d.cmdline));
    x.push_str("  </os>\n");
    if !xen {
        x.push_str("  <features><acpi/></features>\n");
    }
    if d.domain_type == "kvm" {
        x.push_str("  <cpu mode='host-passthrough'/>\n");
    }
    x.push_str("  <clock offset='utc'/>\n");
    x.push_str("  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>destroy</on_reboot>\n  <on_crash>destroy</on_crash>\n");
    x.push_str("  <devices>\n");
    if let Some((path, bus, cache)) = &d.disk {
        let (dev, bus) = match (xen, bus.as_str()) {
            (true, _) => ("xvda", "xen"),
            (false, "sata") => ("sda", "sata"),
            _ => ("vda", "virtio"),
        };
        let _ = write!(
            x,
            "    <disk type='file' device='disk'>\n      <driver name='qemu' type='raw' cache='{}'/>\n      <source file='{}'/>\n      <target dev='{dev}' bus='{bus}'/>\n    </disk>\n",
            esc(cache),
            esc(&path.to_string_lossy()),
        );
    }
    if let Some((tap, mac, model)) = &d.nic {
        let model = if xen { "netfront" } else { model.as_str() };
        let _ = write!(
            x,
            "    <interface type='ethernet'>\n      <mac address='{}'/>\n      <target dev='{}' managed='no'/>\n      <model type='{}'/>\n    </interface>\n",
            esc(mac),
            esc(tap),
            esc(model)
        );
    }
    let sock = |p: &Path| format!("<source mode='bind' path='{}'/>", esc(&p.to_string_lossy()));
    if xen {
        // The PV console (hvc0) carries the kernel's messages; the agent's line is a PV channel.
        let _ = write!(
            x,
            "    <console type='unix'>\n      {}\n      <target type='xen' port='0'/>\n    </console>\n    <channel type='unix'>\n      {}\n      <target type='xen' name='org.virtperf.agent'/>\n    </channel>\n",
            sock(&d.console_sock),
            sock(&d.agent_sock)
        );
    } else {
        let _ = write!(
            x,
            "    <serial type='unix'>\n      {}\n      <target port='0'/>\n    </serial>\n    <console type='unix'>\n      {}\n      <target type='virtio' port='0'/>\n    </console>\n    <memballoon model='none'/>\n",
            sock(&d.console_sock),
            sock(&d.agent_sock)
        );
    }
    x.push_str("  </devices>\n");
    // QEMU as root, files not relabelled: the image lives in virtperf's private directories.
    x.push_str(
        "  <seclabel type='static' model='dac' relabel='no'>\n    <label>+0:+0</label>\n  </seclabel>\n",
    );
    x.push_str("</domain>\n");
    x
}

/// The device the agent's line is on inside the guest, and the kernel's console, per domain type.
fn guest_devices(domain_type: &str) -> (&'static str, &'static str) {
    if domain_type == "xen" {
        ("/dev/hvc1", "hvc0")
    } else {
        ("/dev/hvc0", "ttyS0")
    }
}

/// The kernel modules virtperf's guest loads for these devices.
fn guest_drivers(domain_type: &str, nic: Option<&str>, disk: Option<&str>) -> Vec<&'static str> {
    if domain_type == "xen" {
        let mut d = Vec::new();
        if nic.is_some() {
            d.push("xen_netfront");
        }
        if disk.is_some() {
            d.extend(["xen_blkfront", "crc32c_generic", "ext4"]);
        }
        return d;
    }
    qemu::drivers("q35", nic, disk.map(qemu_disk))
}

/// A unique, short (≤ 15 bytes) name for the tap while it is lent to the daemon's namespace.
fn lent_tap_name(instance_id: &str) -> String {
    // FNV-1a: stable, dependency-free; the instance id is already unique, this only shortens it.
    let mut h: u32 = 0x811c_9dc5;
    for b in instance_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("vpl{h:08x}")
}

use crate::host::{daemon_netns_pid, destroy_domain, sweep_lent_tap};

/// Lends the endpoint's tap to the daemon's namespace under `lent`.
fn lend_tap(ns: &str, net: &GuestNet, lent: &str) -> Result<(), String> {
    let pid = daemon_netns_pid().to_string();
    crate::host::sh("ip", &["-n", ns, "link", "set", "dev", &net.tap, "down", "nomaster"])?;
    crate::host::sh("ip", &["-n", ns, "link", "set", "dev", &net.tap, "name", lent])?;
    crate::host::sh("ip", &["-n", ns, "link", "set", "dev", lent, "netns", &pid])
}

/// Returns a lent tap to the endpoint's bridge (where it is not back already).
fn return_tap(ns: &str, net: &GuestNet, lent: &str) -> Result<(), String> {
    let pid = daemon_netns_pid().to_string();
    let mtu = net.mtu.to_string();
    // From the daemon's namespace, when it is there (nsenter: the daemon's may not be ours).
    let nsarg = format!("--net=/proc/{pid}/ns/net");
    if crate::host::sh("nsenter", &[&nsarg, "ip", "link", "show", lent]).is_ok() {
        crate::host::sh("nsenter", &[&nsarg, "ip", "link", "set", "dev", lent, "netns", ns])?;
    }
    if crate::host::sh("ip", &["-n", ns, "link", "show", lent]).is_ok() {
        crate::host::sh("ip", &["-n", ns, "link", "set", "dev", lent, "name", &net.tap])?;
    }
    crate::host::sh("ip", &["-n", ns, "link", "set", "dev", &net.tap, "mtu", &mtu, "master", "br0", "up"])?;
    crate::lab::steer_flows(ns, &net.tap).map_err(|e| e.to_string())
}

/// The state of domain `name` at `uri` (`shut off`, `running`, …), or why it cannot be read.
fn domstate(uri: &str, name: &str) -> Result<String, String> {
    virsh(uri, &["domstate", name]).map(|s| s.trim().to_string())
}

/// The agent's socket of an existing domain: the first unix console or channel in its XML whose
/// source is bound by the hypervisor (mode='bind').
pub fn agent_socket_of(xml: &str) -> Result<PathBuf, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("the domain's XML: {e}"))?;
    // A serial port carries the kernel's console in virtperf's layout, and libvirt lists it again
    // as the first <console> (target type 'serial'): the agent's line is a virtio or Xen console,
    // or a channel.
    for n in doc.descendants().filter(|n| matches!(n.tag_name().name(), "console" | "channel")) {
        if n.attribute("type") != Some("unix") {
            continue;
        }
        let child = |name: &str| n.children().find(|c| c.tag_name().name() == name);
        if child("target").and_then(|t| t.attribute("type")) == Some("serial") {
            continue;
        }
        if let Some(src) = child("source").filter(|s| s.attribute("mode") == Some("bind")) {
            if let Some(p) = src.attribute("path") {
                return Ok(PathBuf::from(p));
            }
        }
    }
    Err("the domain declares no unix-socket console or channel (<console type='unix'><source mode='bind' path='…'/><target type='virtio'/></console>) for the agent's line; `virtperf image domain-xml` prints one".into())
}

/// The kernel console's socket of an existing domain, when its serial port is a unix socket.
fn console_socket_of(xml: &str) -> Option<PathBuf> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let serial =
        doc.descendants().find(|n| n.tag_name().name() == "serial" && n.attribute("type") == Some("unix"))?;
    let src =
        serial.children().find(|c| c.tag_name().name() == "source" && c.attribute("mode") == Some("bind"))?;
    src.attribute("path").map(PathBuf::from)
}

struct LvTeardown {
    uri: String,
    name: String,
    dir: Option<PathBuf>,
    entry: Entry,
}

impl Teardown for LvTeardown {
    fn teardown(&mut self, ledger: &mut Ledger) {
        destroy_domain(&self.uri, &self.name);
        ledger.forget(&self.entry);
        if let Some(d) = self.dir.take() {
            ledger.remove_dir(&d);
        }
    }
}

/// Connects to a socket the hypervisor listens on, retrying while it appears.
fn connect(path: &Path, deadline: Instant) -> Result<UnixStream, String> {
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(format!("{}: {e}", path.display())),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The pid of the domain's QEMU (libvirt writes it beside its state), for its CPU clock.
fn qemu_pid(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/run/libvirt/qemu/{name}.pid")).ok()?.trim().parse().ok()
}

impl Environment for Libvirt {
    fn confinement(&self, _params: &BTreeMap<String, Value>) -> String {
        "libvirt's own: its QEMU's seccomp sandbox (qemu.conf seccomp_sandbox) and security driver, as the daemon is configured".into()
    }
    fn carries_programs(&self) -> bool {
        true
    }
    fn kind(&self) -> &'static str {
        "libvirt"
    }
    fn summary(&self) -> &'static str {
        "a libvirt domain (QEMU/TCG, KVM or Xen) through virsh: virtperf's own guest as a transient domain, or an existing domain started and powered off"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn wants_tap(&self) -> bool {
        true
    }
    fn own_clock(&self) -> bool {
        true
    }
    fn default_scratch_disk(&self) -> Option<&'static str> {
        Some("virtio")
    }
    fn memory_bytes(&self, params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        let p = LvParams::of(params);
        p.domain.is_none().then_some(("memory", p.memory))
    }
    fn scratch(&self, params: &BTreeMap<String, Value>) -> Result<String, ParamError> {
        let p = LvParams::of(params);
        match (&p.disk, &p.domain) {
            (_, Some(_)) => Err(ParamError::new("domain", "an existing domain's disks are its own: disk workloads need virtperf's own guest (leave domain= out, give disk=)")),
            (None, None) => Err(ParamError::new("disk", "this guest has no scratch disk (disk = none): give it one, disk = virtio or sata")),
            (Some(d), None) => Ok(qemu::disk_what("q35", qemu_disk(d), &p.cache, &format!("on {}", super::scratch::root_description()))),
        }
    }
    fn disk_bytes(&self, params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        let p = LvParams::of(params);
        (p.disk.is_some() && p.domain.is_none()).then_some(("disk_size", p.disk_size))
    }
    fn check(&self, params: &BTreeMap<String, Value>) -> Result<(), ParamError> {
        let p = LvParams::of(params);
        if p.snapshot.is_some() && p.domain.is_none() {
            return Err(ParamError::new(
                "snapshot",
                "snapshot= reverts an existing domain: give domain= too",
            ));
        }
        if let Some(pin) = &p.pin {
            crate::host::check_cpuset(pin).map_err(|e| ParamError::new("pin", e))?;
        }
        if let Some(d) = &p.domain {
            if d.starts_with('-') || d.contains(char::is_whitespace) {
                return Err(ParamError::new("domain", format!("`{d}` is not a domain name")));
            }
        }
        if p.uri.starts_with('-') || !p.uri.contains(':') {
            return Err(ParamError::new(
                "uri",
                format!("`{}` is not a libvirt URI (e.g. qemu:///system)", p.uri),
            ));
        }
        if let Some(host) = uri_host(&p.uri) {
            return Err(ParamError::new(
                "uri",
                format!(
                    "`{}` is a daemon on {host}: its guest's agent socket (and virtperf's own guest's image) would be there, out of reach; declare that machine as a [[host]] and put host = \"NAME\" on this environment with uri = \"{}\": virtperf runs virsh there (docs/remote.md)",
                    p.uri,
                    local_uri(&p.uri)
                ),
            ));
        }
        Ok(())
    }
    fn availability(&self, params: &BTreeMap<String, Value>) -> Availability {
        if crate::host::which("virsh").is_none() {
            return Availability::no(
                "virsh (libvirt's client) is not installed",
                "apt-get install -y libvirt-clients libvirt-daemon-system libvirt-daemon-driver-qemu   (or: make deps)",
            );
        }
        let p = LvParams::of(params);
        let version = match virsh(&p.uri, &["version", "--daemon"]) {
            Ok(v) => v,
            Err(e) => {
                return Availability::no(
                    format!("the libvirt daemon at {} does not answer: {e}", p.uri),
                    "start it (systemctl start libvirtd, or libvirtd -d where no init system runs; make deps does), or set uri=",
                )
            }
        };
        let dtype = match p.domain_type() {
            Ok(t) => t,
            Err((why, fix)) => return Availability::no(why, fix),
        };
        let local_qemu = p.uri.starts_with("qemu:///");
        // libvirt probes /dev/kvm as its unprivileged user: with a root-only node its cached
        // capabilities look stale at every start, and each domain takes a minute to create.
        if local_qemu {
            if let Ok(m) = std::fs::metadata("/dev/kvm") {
                use std::os::unix::fs::PermissionsExt;
                if m.permissions().mode() & 0o060 == 0 {
                    return Availability::no(
                        "/dev/kvm is root-only (0600: no udev set its permissions), so libvirt re-probes QEMU on every domain start (about a minute each)",
                        "chgrp kvm /dev/kvm && chmod 0660 /dev/kvm   (make deps does)",
                    );
                }
            }
        }
        if let Some(d) = &p.domain {
            match domstate(&p.uri, d) {
                Err(e) => return Availability::no(
                    format!("no domain `{d}` at {}: {e}", p.uri),
                    "give the name `virsh list --all` shows, or leave domain= out for virtperf's own guest",
                ),
                Ok(s) if s != "shut off" => {
                    return Availability::no(
                        format!(
                            "domain `{d}` is {s}; virtperf starts it for each launch and powers it off after"
                        ),
                        format!("shut it down first: virsh -c {} shutdown {d}", p.uri),
                    )
                }
                Ok(_) => {}
            }
        } else if local_qemu {
            // virtperf's own guest: the qemu environment's image and its prerequisites.
            let q = super::qemu::Qemu.availability(&p.qemu_params());
            if !q.usable {
                return q;
            }
        }
        let v = version.lines().find(|l| l.contains("daemon")).unwrap_or("").trim().to_string();
        Availability::yes(format!("{v}; domain type {dtype}"))
    }
    fn prepare(&self, params: &BTreeMap<String, Value>) -> Result<(), String> {
        let p = LvParams::of(params);
        if p.domain.is_some() {
            return Ok(());
        }
        super::qemu::image_for(&p.qemu_params()).map(|_| ()).map_err(|e| format!("the guest image: {e}"))
    }
    fn runtime_version(&self, params: &BTreeMap<String, Value>) -> Option<String> {
        let p = LvParams::of(params);
        let v = virsh(&p.uri, &["version", "--daemon"]).ok()?;
        let mut s = one_line(&v);
        if let Ok(t) = p.domain_type() {
            let _ = write!(s, "; domain type {t}");
        }
        match &p.domain {
            Some(d) => {
                let _ = write!(s, "; existing domain {d}");
                if let Some(snap) = &p.snapshot {
                    let _ = write!(s, " at snapshot {snap}");
                }
            }
            None => {
                if let Ok(img) = super::qemu::image_for(&p.qemu_params()) {
                    let _ = write!(
                        s,
                        "; kernel {} (release {}); image {}",
                        img.kernel_source, img.kernel_release, img.hash
                    );
                }
            }
        }
        Some(s)
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError> {
        self.availability(params).require()?;
        let p = LvParams::of(params);
        match p.domain.clone() {
            Some(d) => launch_existing(ctx, &p, &d),
            None => launch_own(ctx, &p),
        }
    }
}

/// Builds the Instance once the domain runs: the agent's socket, the console's, the hello.
#[allow(clippy::too_many_arguments)]
fn attach(
    ctx: &mut LaunchCtx,
    uri: &str,
    name: &str,
    agent_sock: &Path,
    console_sock: Option<&Path>,
    log: Option<PathBuf>,
    mut teardown: LvTeardown,
    started: Instant,
    restored: bool,
) -> Result<Instance, LaunchError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let tail = Tail::default();
    if let Some(c) = console_sock {
        if let Ok(s) = connect(c, deadline) {
            tail.follow_logged(s, log);
        }
    }
    let stream = match connect(agent_sock, deadline) {
        Ok(s) => s,
        Err(e) => {
            teardown.teardown(ctx.ledger);
            return Err(LaunchError::Prepare(format!("the agent's socket: {e}")));
        }
    };
    let _ = stream.set_write_timeout(Some(super::conn::WRITE_DEADLINE));
    let reader: Box<dyn Read + Send> = match stream.try_clone() {
        Ok(r) => Box::new(r),
        Err(e) => {
            teardown.teardown(ctx.ledger);
            return Err(LaunchError::Prepare(format!("the agent's socket: {e}")));
        }
    };
    let pauser_uri = uri.to_string();
    let pauser_name = name.to_string();
    let inst = Instance {
        scratch: None,
        cleanup: Vec::new(),
        // The domain's cgroup where libvirt made one (every task of the domain, vhost workers
        // included); QEMU's own process clock otherwise.
        cpu: qemu_pid(name)
            .map(|pid| crate::env::cgroup::own_cgroup_probe(pid, name).unwrap_or(CpuProbe::Proc(pid))),
        agent_pid: 0,
        child: None,
        start_time: Default::default(),
        phases: Default::default(),
        rtt: Default::default(),
        rtt_jitter: Default::default(),
        go_floor: None,
        id: String::new(),
        own_clock: false,
        teardown: Box::new(teardown),
        inner_addr: None,
        // One socket reads and writes (a non-blocking descriptor would be both): its send
        // timeout is the writes' deadline.
        conn: Conn::new(reader, Box::new(stream), tail),
        pauser: Some(Arc::new(move |pause: bool| {
            virsh(&pauser_uri, &[if pause { "suspend" } else { "resume" }, &pauser_name]).map(|_| ())
        })),
    };
    // A domain restored from a running snapshot: its agent said hello before the snapshot.
    if restored {
        inst.await_pong(ctx, started)
    } else {
        inst.await_hello(ctx, started)
    }
}

fn launch_own(ctx: &mut LaunchCtx, p: &LvParams) -> Result<Instance, LaunchError> {
    let dtype = p.domain_type().map_err(|(w, f)| LaunchError::Unavailable(format!("{w}; fix: {f}")))?;
    let pin = p.pin.as_deref().map(crate::host::check_cpuset).transpose().map_err(LaunchError::Prepare)?;
    let img = super::qemu::image_for(&p.qemu_params())
        .map_err(|e| LaunchError::Prepare(format!("the guest image: {e}")))?;
    let wanted = guest_drivers(dtype, ctx.guest_net.as_ref().map(|_| p.nic.as_str()), p.disk.as_deref());
    let mods = img.load_order(&wanted).map_err(|e| LaunchError::Prepare(e.to_string()))?;
    let name = format!("virtperf-{}", ctx.instance_id);
    let dir = ctx.run_dir.join(format!("libvirt-{}", ctx.instance_id));
    ctx.ledger.create_dir(&dir).map_err(|e| LaunchError::Prepare(format!("{}: {e}", dir.display())))?;
    let entry = Entry::Domain { uri: p.uri.clone(), name: name.clone() };
    let mut teardown =
        LvTeardown { uri: p.uri.clone(), name: name.clone(), dir: Some(dir.clone()), entry: entry.clone() };
    let (disk, scratch) = match &p.disk {
        None => (None, None),
        Some(bus) => match super::scratch::guest_image(ctx, p.disk_size) {
            Ok((path, image)) => {
                let what = qemu::disk_what("q35", qemu_disk(bus), &p.cache, &image);
                (
                    Some((path, bus.clone(), p.cache.clone())),
                    Some(super::launch::Scratch { dir: super::scratch::GUEST_DIR.into(), what }),
                )
            }
            Err(e) => {
                teardown.teardown(ctx.ledger);
                return Err(e);
            }
        },
    };
    let (ctl, console) = guest_devices(dtype);
    let disk_dev = disk.as_ref().map(|_| {
        if dtype == "xen" {
            "/dev/xvda"
        } else {
            qemu::guest_disk_dev(qemu_disk(p.disk.as_deref().unwrap_or("virtio")))
        }
    });
    let cmdline = qemu::kernel_append(&mods, ctx.guest_net.as_ref(), None, disk_dev, None)
        .replace("console=ttyS0", &format!("console={console}"))
        .replace("vp.ctl=/dev/hvc0", &format!("vp.ctl={ctl}"));
    let lent = ctx.guest_net.as_ref().map(|_| lent_tap_name(&ctx.instance_id));
    let spec = DomainSpec {
        name: name.clone(),
        domain_type: dtype.into(),
        vcpus: p.vcpus,
        memory_mib: p.memory >> 20,
        pin: pin.unwrap_or_default(),
        kernel: img.vmlinux.clone(),
        initrd: img.initramfs.clone(),
        cmdline,
        agent_sock: dir.join("agent.sock"),
        console_sock: dir.join("console.sock"),
        nic: ctx
            .guest_net
            .as_ref()
            .zip(lent.as_ref())
            .map(|(n, l)| (l.clone(), qemu::mac_for(n.addr), p.nic.clone())),
        disk,
    };
    let xml_path = dir.join("domain.xml");
    if let Err(e) = std::fs::write(&xml_path, domain_xml(&spec)) {
        teardown.teardown(ctx.ledger);
        return Err(LaunchError::Prepare(format!("{}: {e}", xml_path.display())));
    }
    let started = Instant::now();
    // The tap goes to the daemon's namespace for the create, and back on every path.
    let lend = match (&ctx.guest_net, &ctx.netns, &lent) {
        (Some(n), Some(ns), Some(l)) => {
            let ns = ns.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let tap_entry = Entry::DaemonTap { name: l.clone() };
            ctx.ledger.record(tap_entry.clone());
            if let Err(e) = lend_tap(&ns, n, l) {
                let _ = return_tap(&ns, n, l);
                ctx.ledger.forget(&tap_entry);
                teardown.teardown(ctx.ledger);
                return Err(LaunchError::Prepare(format!(
                    "lending the lab's tap to libvirt's namespace: {e}"
                )));
            }
            Some((ns, n.clone(), l.clone(), tap_entry))
        }
        _ => None,
    };
    ctx.ledger.record(entry);
    let created = virsh(&p.uri, &["create", &xml_path.to_string_lossy()]);
    if let Some((ns, n, l, tap_entry)) = &lend {
        let back = return_tap(ns, n, l);
        ctx.ledger.forget(tap_entry);
        if let Err(e) = back {
            teardown.teardown(ctx.ledger);
            sweep_lent_tap(l);
            return Err(LaunchError::Prepare(format!(
                "returning the lab's tap from libvirt's namespace: {e}"
            )));
        }
    }
    if let Err(e) = created {
        teardown.teardown(ctx.ledger);
        return Err(LaunchError::Prepare(e));
    }
    let mut inst = attach(
        ctx,
        &p.uri,
        &name,
        &spec.agent_sock,
        Some(&spec.console_sock),
        Some(dir.join("console.log")),
        teardown,
        started,
        false,
    )?;
    inst.scratch = scratch;
    Ok(inst)
}

fn launch_existing(ctx: &mut LaunchCtx, p: &LvParams, name: &str) -> Result<Instance, LaunchError> {
    if ctx.guest_net.is_some() {
        return Err(LaunchError::Unavailable(format!(
            "domain `{name}` keeps its own network, outside the lab; fix: network workloads need virtperf's own guest (leave domain= out)"
        )));
    }
    let xml = virsh(&p.uri, &["dumpxml", name]).map_err(LaunchError::Prepare)?;
    let sock = agent_socket_of(&xml).map_err(LaunchError::Unavailable)?;
    let entry = Entry::Domain { uri: p.uri.clone(), name: name.to_string() };
    let teardown = LvTeardown { uri: p.uri.clone(), name: name.to_string(), dir: None, entry: entry.clone() };
    let started = Instant::now();
    ctx.ledger.record(entry);
    let res = match &p.snapshot {
        Some(s) => virsh(&p.uri, &["snapshot-revert", name, s, "--running", "--force"]),
        None => virsh(&p.uri, &["start", name]),
    };
    if let Err(e) = res {
        let mut t = teardown;
        t.teardown(ctx.ledger);
        return Err(LaunchError::Prepare(e));
    }
    let console = console_socket_of(&xml);
    attach(ctx, &p.uri, name, &sock, console.as_deref(), None, teardown, started, p.snapshot.is_some())
}

/// `virtperf image domain-xml`: a domain definition of virtperf's own guest whose agent answers
/// on `sock_dir/agent.sock`, for users who want an existing domain (`domain = "…"`) to start from.
pub fn example_domain_xml(
    params: &BTreeMap<String, Value>,
    name: &str,
    sock_dir: &Path,
) -> Result<String, String> {
    let p = LvParams::of(params);
    let dtype = p.domain_type().map_err(|(w, f)| format!("{w}; fix: {f}"))?;
    let img = super::qemu::image_for(&p.qemu_params()).map_err(|e| format!("the guest image: {e}"))?;
    let (ctl, console) = guest_devices(dtype);
    let mods = img.load_order(&guest_drivers(dtype, None, None)).map_err(|e| e.to_string())?;
    let cmdline = qemu::kernel_append(&mods, None, None, None, None)
        .replace("console=ttyS0", &format!("console={console}"))
        .replace("vp.ctl=/dev/hvc0", &format!("vp.ctl={ctl}"));
    Ok(domain_xml(&DomainSpec {
        name: name.into(),
        domain_type: dtype.into(),
        vcpus: p.vcpus,
        memory_mib: p.memory >> 20,
        pin: Vec::new(),
        kernel: img.vmlinux,
        initrd: img.initramfs,
        cmdline,
        agent_sock: sock_dir.join("agent.sock"),
        console_sock: sock_dir.join("console.sock"),
        nic: None,
        disk: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_left_out_take_the_schema_defaults() {
        let p = LvParams::of(&BTreeMap::new());
        assert_eq!(
            (p.uri.as_str(), p.domain_type.as_str(), p.nic.as_str()),
            ("qemu:///system", "auto", "virtio")
        );
        assert_eq!((p.vcpus, p.memory, p.disk_size), (1, 512 << 20, 256 << 20));
        assert_eq!((p.cache.as_str(), p.disk.as_deref()), ("writeback", None));
    }

    fn spec(dtype: &str, nic: bool, disk: Option<&str>) -> DomainSpec {
        DomainSpec {
            name: "virtperf-vp1-0-0".into(),
            domain_type: dtype.into(),
            vcpus: 2,
            memory_mib: 512,
            pin: vec![1],
            kernel: "/c/vmlinux".into(),
            initrd: "/c/initramfs.cpio".into(),
            cmdline: "console=ttyS0 vp.ctl=/dev/hvc0 vp.addr=198.18.0.11/24".into(),
            agent_sock: "/r/agent.sock".into(),
            console_sock: "/r/console.sock".into(),
            nic: nic.then(|| ("vpl0000abcd".into(), "52:54:00:12:00:0b".into(), "e1000".into())),
            disk: disk.map(|b| (PathBuf::from("/s/scratch.img"), b.to_string(), "none".into())),
        }
    }

    /// Every generated domain validates against libvirt's own schema (virt-xml-validate, from
    /// libvirt-clients), for each domain type, with and without NIC and disk.
    #[test]
    fn a_uri_naming_another_machine_is_refused_with_the_host_way() {
        assert_eq!(uri_host("qemu:///system"), None);
        assert_eq!(uri_host("qemu+unix:///system?socket=/x"), None);
        assert_eq!(uri_host("xen:///system"), None);
        assert_eq!(uri_host("qemu+ssh://root@b/system"), Some("root@b"));
        assert_eq!(uri_host("qemu+tcp://b:16509/system"), Some("b:16509"));
        assert_eq!(local_uri("qemu+ssh://root@b/system"), "qemu:///system");
        assert_eq!(local_uri("xen+ssh://b/"), "xen:///");
        let params: BTreeMap<String, Value> =
            [("uri".to_string(), Value::from("qemu+ssh://root@b/system"))].into_iter().collect();
        let e = Libvirt.check(&params).unwrap_err();
        assert_eq!(e.key, "uri");
        assert!(e.message.contains("host = ") && e.message.contains("qemu:///system"), "{}", e.message);
    }

    #[test]
    fn domain_xml_validates_against_libvirts_schema() {
        let Some(validate) = crate::host::which("virt-xml-validate") else {
            crate::host::unit_skip(
                "virt-xml-validate is not installed (apt-get install libvirt-clients, or make deps)",
            );
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut n = 0;
        for dtype in ["qemu", "kvm", "xen"] {
            for (nic, disk) in [(false, None), (true, Some("virtio")), (true, Some("sata"))] {
                let xml = domain_xml(&spec(dtype, nic, disk));
                let f = dir.path().join(format!("d{n}.xml"));
                n += 1;
                std::fs::write(&f, &xml).unwrap();
                let out = Command::new(&validate).arg(&f).arg("domain").output().unwrap();
                assert!(
                    out.status.success(),
                    "{dtype} nic={nic} disk={disk:?}: {}{}\n{xml}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    #[test]
    fn domain_xml_carries_what_was_asked() {
        let x = domain_xml(&spec("kvm", true, Some("virtio")));
        assert!(x.contains("<domain type='kvm'>") && x.contains("<cpu mode='host-passthrough'/>"));
        assert!(x.contains("<vcpupin vcpu='0' cpuset='1'/>") && x.contains("<vcpupin vcpu='1' cpuset='1'/>"));
        assert!(
            x.contains("<target dev='vpl0000abcd' managed='no'/>") && x.contains("<model type='e1000'/>")
        );
        assert!(x.contains("<target dev='vda' bus='virtio'/>") && x.contains("cache='none'"));
        assert!(x.contains("<target type='virtio' port='0'/>") && x.contains("path='/r/agent.sock'"));
        let t = domain_xml(&spec("qemu", false, None));
        assert!(!t.contains("host-passthrough") && !t.contains("<interface") && !t.contains("<disk"));
        let x = domain_xml(&spec("xen", true, Some("sata")));
        assert!(x.contains("xenpvh") && x.contains("<model type='netfront'/>") && x.contains("bus='xen'"));
        assert!(x.contains("name='org.virtperf.agent'"));
        let mut s = spec("qemu", false, None);
        s.cmdline = "a<b & 'c'".into();
        assert!(domain_xml(&s).contains("<cmdline>a&lt;b &amp; &apos;c&apos;</cmdline>"));
    }

    #[test]
    fn the_agent_socket_is_found_in_an_existing_domain() {
        let x = domain_xml(&spec("qemu", false, None));
        assert_eq!(agent_socket_of(&x).unwrap(), PathBuf::from("/r/agent.sock"));
        // As `virsh dumpxml` lists it: the serial port again as the first console.
        let dumped = x.replace(
            "<console type='unix'>",
            "<console type='unix'><source mode='bind' path='/r/console.sock'/><target type='serial' port='0'/></console>\n    <console type='unix'>",
        );
        assert_eq!(agent_socket_of(&dumped).unwrap(), PathBuf::from("/r/agent.sock"));
        assert_eq!(console_socket_of(&dumped), Some(PathBuf::from("/r/console.sock")));
        let none = "<domain type='qemu'><devices><console type='pty'><target type='serial'/></console></devices></domain>";
        assert!(agent_socket_of(none).unwrap_err().contains("domain-xml"));
        assert!(agent_socket_of("<domain").is_err());
    }

    #[test]
    fn parameters_and_domain_types() {
        let p = |kv: &[(&str, &str)]| -> BTreeMap<String, Value> {
            kv.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect()
        };
        assert_eq!(Libvirt.check(&p(&[("snapshot", "s1")])).unwrap_err().key, "snapshot");
        assert_eq!(Libvirt.check(&p(&[("pin", "99999")])).unwrap_err().key, "pin");
        assert_eq!(Libvirt.check(&p(&[("domain", "-x")])).unwrap_err().key, "domain");
        assert_eq!(Libvirt.check(&p(&[("uri", "nope")])).unwrap_err().key, "uri");
        assert!(Libvirt.check(&p(&[("domain", "d"), ("snapshot", "s")])).is_ok());
        let lv = |kv: &[(&str, &str)]| LvParams::of(&p(kv));
        assert_eq!(lv(&[("uri", "xen:///system")]).domain_type().unwrap(), "xen");
        assert!(lv(&[("domain_type", "xen")]).domain_type().unwrap_err().1.contains("xen:///system"));
        assert!(lv(&[("uri", "xen:///system"), ("domain_type", "kvm")]).domain_type().is_err());
        assert_eq!(lv(&[("domain_type", "qemu")]).domain_type().unwrap(), "qemu");
        assert_eq!(guest_devices("xen"), ("/dev/hvc1", "hvc0"));
        assert_eq!(
            guest_drivers("xen", Some("virtio"), Some("virtio")),
            ["xen_netfront", "xen_blkfront", "crc32c_generic", "ext4"]
        );
        assert_eq!(guest_drivers("qemu", None, Some("sata"))[2..4], ["ahci", "sd_mod"]);
        let a = lent_tap_name("vp4194304-12i3-999");
        assert!(a.len() <= 15 && a.starts_with(crate::host::LENT_TAP_PREFIX), "{a}");
        assert_ne!(a, lent_tap_name("vp4194304-12i3-998"));
        assert_eq!(one_line("error: a\nerror: b\n"), "error: a; error: b");
    }
}
