//! `container`: the agent in an OCI container run by a real runtime (runc by default, crun
//! where the host's cgroups allow it), from a bundle virtperf generates.
//!
//! The bundle's root is an empty directory, read-only; the host's `/usr` and `/etc` and the
//! virtperf binary are bind-mounted into it *by the runtime, inside the container's mount
//! namespace*, so nothing is mounted on the host. The container gets fresh pid, network, ipc,
//! uts and mount namespaces and its own cgroup (`virtperf/ID`), whose CPU accounting gives the
//! host-side CPU time of everything the container runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};
use virtperf_workload::{ParamError, ParamKind, ParamSpec};

use super::conn::Conn;
use super::container_net::{self, Network};
use super::launch::{
    spawn_piped, Availability, Environment, Instance, Knob, LaunchCtx, LaunchError, Teardown,
};
use super::{scratch, seccomp};
use crate::host::cgroup_mounts;
use crate::ledger::{Entry, Ledger};

pub struct Container;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "runtime",
        kind: ParamKind::Choice(&["runc", "crun"]),
        default: Some("runc"),
        help: "OCI runtime",
    },
    ParamSpec {
        name: "cpus",
        kind: ParamKind::Float { min: 0.01, max: 4096.0 },
        default: None,
        help: "CPU bandwidth limit in CPUs (CFS quota), e.g. 1 or 0.5",
    },
    ParamSpec {
        name: "memory",
        kind: ParamKind::Size { min: 8 << 20, max: 1 << 44 },
        default: None,
        help: "memory limit, e.g. 512MiB",
    },
    ParamSpec {
        name: "cpuset",
        kind: ParamKind::Text,
        default: None,
        help: "CPUs the container may use, e.g. 0, 0-1, or last (the host's last CPU)",
    },
    ParamSpec {
        name: "disk",
        kind: ParamKind::Choice(&["bind", "overlay"]),
        default: Some("bind"),
        help: "the scratch disk at /scratch: bind (a host directory, bind-mounted) or overlay (overlayfs, as a Docker container's root layer: its upper layer in a host directory)",
    },
    ParamSpec {
        name: "capabilities",
        kind: ParamKind::Text,
        default: None,
        help: "capabilities the container's processes keep, separated by commas (or `+` on the command line); `docker` stands for Docker's default set (pfs servers: \"docker,SYS_ADMIN\", as `docker run --cap-add SYS_ADMIN`); none by default",
    },
    ParamSpec {
        name: "seccomp",
        kind: ParamKind::Text,
        default: Some("none"),
        help: "the system-call filter: none (namespaces and cgroups alone), default (the profile Podman and Docker apply, /usr/share/containers/seccomp.json), or the absolute path of a profile in Docker's format; resolved for the container's capabilities as Docker does",
    },
    ParamSpec {
        name: "no_new_privileges",
        kind: ParamKind::Bool,
        default: Some("true"),
        help: "the agent's processes cannot gain privileges through execve (setuid, file capabilities): true as Podman and `docker run --security-opt no-new-privileges`, false as Docker's default",
    },
    ParamSpec {
        name: "readonly_rootfs",
        kind: ParamKind::Bool,
        default: Some("true"),
        help: "the container's root is read-only (`docker run --read-only`); false: writable, as Docker's default (the root here is an empty directory of the bundle: only /usr, /etc, /opt are the host's, read-only either way)",
    },
    ParamSpec {
        name: "network",
        kind: ParamKind::Choice(container_net::CHOICES),
        default: Some("veth"),
        help: "how the container reaches the lab: veth (the lab endpoint's namespace, a veth on the lab's bridge), pasta (a namespace of its own joined by passt's pasta, rootless Podman 5's network) or slirp4netns (joined by slirp4netns, RootlessKit's and Podman 4's); the helper runs in the lab endpoint's namespace (docs/knobs.md)",
    },
    ParamSpec {
        name: "network_mtu",
        kind: ParamKind::Int { min: 576, max: 65520 },
        default: None,
        help: "with network = pasta or slirp4netns: the MTU of the container's own link to its helper; 65520 when unset, as Podman and RootlessKit set it (a veth's MTU is the lab's: [lab] mtu)",
    },
];

/// The capabilities a container may be given (capabilities(7)), without the `CAP_` prefix.
const CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Docker's default set (`capabilities = "docker"`), as moby's oci/caps/defaults.go lists it.
const DOCKER_DEFAULT: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The `capabilities` parameter as OCI names (`CAP_SYS_ADMIN`), or what is wrong with it. The word
/// `docker` stands for Docker's default set (`docker,SYS_ADMIN`: `docker run --cap-add SYS_ADMIN`).
pub fn capabilities_of(params: &BTreeMap<String, Value>) -> Result<Vec<String>, String> {
    let Some(text) = params.get("capabilities").and_then(Value::as_str) else { return Ok(Vec::new()) };
    let words: Vec<String> = text
        .split([',', '+', ' '])
        .map(|c| c.trim().to_ascii_uppercase())
        .flat_map(|c| {
            if c == "DOCKER" {
                DOCKER_DEFAULT.iter().map(|d| d.to_string()).collect()
            } else {
                vec![c]
            }
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    for c in words.into_iter().filter(|c| !c.is_empty()).map(|c| {
            let bare = c.strip_prefix("CAP_").unwrap_or(&c).to_string();
            if CAPABILITIES.contains(&bare.as_str()) {
                Ok(format!("CAP_{bare}"))
            } else {
                Err(format!("`{c}` is not a Linux capability (capabilities(7)) nor `docker` (Docker's default set); e.g. capabilities = \"docker,SYS_ADMIN\""))
            }
        }) {
        let c = c?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

/// Host paths bind-mounted read-only into the container.
const BINDS: &[&str] = &["/usr", "/etc", "/opt"];
/// Where the agent binary appears inside the container.
const AGENT_PATH: &str = "/.virtperf/virtperf";

/// Extra global flags for runsc, from `VIRTPERF_RUNSC_FLAGS` (words split on white space), for
/// looking into gVisor: `--strace` logs every system call with its time in the Sentry (with
/// `VIRTPERF_RUNSC_DEBUG`), `--gso=false` and the like try its network stack's options. Each word
/// is a flag; the ones virtperf sets itself are refused. Recorded in the run's manifest.
pub const RUNSC_FLAGS_VAR: &str = "VIRTPERF_RUNSC_FLAGS";

/// The flags of [`RUNSC_FLAGS_VAR`], or what is wrong with them.
pub fn runsc_extra_flags() -> Result<Vec<String>, String> {
    runsc_flags_of(std::env::var(RUNSC_FLAGS_VAR).ok().as_deref().unwrap_or(""))
}

fn runsc_flags_of(value: &str) -> Result<Vec<String>, String> {
    const OWN: [&str; 5] = ["root", "network", "platform", "overlay2", "debug-log"];
    value
        .split_whitespace()
        .map(|w| {
            let name = w.trim_start_matches('-').split('=').next().unwrap_or_default();
            if !w.starts_with('-') || name.is_empty() {
                Err(format!("`{w}` is not a flag: give runsc's global flags, e.g. `--strace --gso=false`"))
            } else if name == "platform" {
                Err(format!("`{w}`: give the environment's `platform` parameter instead (gvisor:platform=…)"))
            } else if OWN.contains(&name) {
                Err(format!("`{w}`: virtperf sets --{name} itself"))
            } else {
                Ok(w.to_string())
            }
        })
        .collect()
}

fn runtime_of(params: &BTreeMap<String, Value>) -> &str {
    params.get("runtime").and_then(Value::as_str).unwrap_or("runc")
}

/// cgroup v1 and v2 mounted side by side with v1 controllers ("hybrid"): crun 1.8 refuses it.
fn hybrid_cgroups() -> bool {
    let m = cgroup_mounts();
    m.iter().any(|p| p.ends_with("unified"))
        && m.iter().any(|p| p.ends_with("cpuacct") || p.ends_with("cpu,cpuacct"))
}

/// runsc (Debian's 2022 build) decides "this is the root network namespace" when
/// `/proc/sys/net/core/rmem_default` exists, which newer kernels create in every namespace, and
/// then refuses to start with a network. Net sysctl directories are per namespace, so in a
/// private mount namespace of the runsc process only, the child enters the lab namespace, puts an
/// empty read-only tmpfs over *that namespace's* `/proc/sys/net/core`, and returns to its own
/// network namespace before exec. Nothing is mounted on the host; the mount dies with runsc.
/// Returns the descriptors that must stay open until the spawn.
fn hide_root_ns_marker(
    cmd: &mut Command,
    lab_ns: &Path,
) -> Result<(std::fs::File, std::fs::File), LaunchError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let open =
        |p: &Path| std::fs::File::open(p).map_err(|e| LaunchError::Prepare(format!("{}: {e}", p.display())));
    let (lab, own) = (open(lab_ns)?, open(Path::new("/proc/self/ns/net"))?);
    let (lab_fd, own_fd) = (lab.as_raw_fd(), own.as_raw_fd());
    let (root, target, fstype, opts) = (c"/", c"/proc/sys/net/core", c"tmpfs", c"size=4k");
    // SAFETY: unshare(2), mount(2) and setns(2) on the forked child with descriptors the parent
    // keeps open until the spawn and C strings in static storage; async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            let check = |r: libc::c_int| if r != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
            check(libc::unshare(libc::CLONE_NEWNS))?;
            let private = (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong;
            check(libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), private, std::ptr::null()))?;
            check(libc::setns(lab_fd, libc::CLONE_NEWNET))?;
            let ro = libc::MS_RDONLY as libc::c_ulong;
            check(libc::mount(fstype.as_ptr(), target.as_ptr(), fstype.as_ptr(), ro, opts.as_ptr().cast()))?;
            check(libc::setns(own_fd, libc::CLONE_NEWNET))
        });
    }
    Ok((lab, own))
}

struct ContainerTeardown {
    runtime: String,
    state_root: PathBuf,
    id: String,
    bundle: PathBuf,
    /// The user-space helper of `network = "pasta"` or `"slirp4netns"`, stopped after the
    /// container and before its namespace goes.
    net: Option<container_net::Helper>,
}

impl Teardown for ContainerTeardown {
    fn teardown(&mut self, ledger: &mut Ledger) {
        let entry = Entry::Container {
            runtime: self.runtime.clone(),
            root: self.state_root.clone(),
            id: self.id.clone(),
        };
        crate::ledger::undo(&entry, ledger.state_dir());
        ledger.forget(&entry);
        let cg = Entry::Cgroup { rel: format!("virtperf/{}", self.id) };
        crate::ledger::undo(&cg, ledger.state_dir());
        ledger.forget(&cg);
        ledger.remove_dir(&self.bundle);
        if let Some(h) = self.net.take() {
            h.stop(ledger);
        }
    }
}

/// What backs /scratch in a container (`runc`, `crun`) or a gVisor sandbox (`runsc`), with the
/// host directory `dir` underneath (None: before a run made it).
pub fn scratch_what(runtime: &str, params: &BTreeMap<String, Value>, dir: &Path) -> String {
    let overlay = params.get("disk").and_then(Value::as_str) == Some("overlay");
    let host = format!("the host's {} ({})", scratch::host_fs(dir), dir.display());
    match (runtime, overlay) {
        ("runsc", false) => format!("a bind mount served by gVisor's gofer: a directory of {host}"),
        ("runsc", true) => format!("gVisor's overlay (--overlay2=all:DIR): files in the Sentry's memory-backed upper layer, its filestore in {host}"),
        (_, false) => format!("a bind mount of a directory of {host}"),
        (_, true) => format!("overlayfs (upper and work layers in {host})"),
    }
}

/// Generates the OCI config for the agent.
pub fn oci_config(
    id: &str,
    exe: &Path,
    params: &BTreeMap<String, Value>,
    netns: Option<&Path>,
    scratch: Option<&Path>,
    runtime: &str,
) -> Value {
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}),
        json!({"destination": AGENT_PATH, "type": "bind", "source": exe, "options": ["bind", "ro"]}),
    ];
    for b in BINDS {
        if Path::new(b).is_dir() && !Path::new(b).is_symlink() {
            mounts.push(json!({"destination": b, "type": "bind", "source": b, "options": ["rbind", "ro", "nosuid", "nodev"]}));
        }
    }
    // The scratch disk (runc, crun: mounted by the runtime in the container's mount namespace; runsc:
    // served by its gofer, or an overlay of its own, see gvisor.rs).
    if let Some(d) = scratch {
        let overlay = params.get("disk").and_then(Value::as_str) == Some("overlay") && runtime != "runsc";
        mounts.push(if overlay {
            let o = format!(
                "lowerdir={},upperdir={},workdir={}",
                d.join("lower").display(),
                d.join("upper").display(),
                d.join("work").display()
            );
            json!({"destination": scratch::GUEST_DIR, "type": "overlay", "source": "overlay", "options": [o, "nosuid", "nodev"]})
        } else {
            json!({"destination": scratch::GUEST_DIR, "type": "bind", "source": d, "options": ["rbind", "rw", "nosuid", "nodev"]})
        });
    }
    let mut resources = serde_json::Map::new();
    if let Some(c) = params.get("cpus").and_then(Value::as_f64) {
        let period = 100_000u64;
        resources
            .insert("cpu".into(), json!({"quota": (c * period as f64).round() as i64, "period": period}));
    }
    if let Some(set) = params.get("cpuset").and_then(Value::as_str) {
        // `last` and the like resolved to the CPU numbers the runtime reads (checked before).
        let list =
            crate::host::check_cpuset(set).map_or_else(|_| set.to_string(), |c| crate::host::cpuset_list(&c));
        let cpu = resources.entry("cpu").or_insert_with(|| json!({}));
        cpu["cpus"] = json!(list);
    }
    if let Some(m) = params.get("memory").and_then(Value::as_u64) {
        resources.insert("memory".into(), json!({"limit": m}));
    }
    // In a lab the container joins its endpoint's namespace; otherwise it gets a new, empty one.
    let net = match netns {
        Some(p) => Some(json!({"type": "network", "path": p})),
        None => Some(json!({"type": "network"})),
    };
    let caps = capabilities_of(params).unwrap_or_default();
    let flag = |k: &str| switch_on(params, k);
    let namespaces: Vec<Value> = [
        Some(json!({"type": "pid"})),
        net,
        Some(json!({"type": "ipc"})),
        Some(json!({"type": "uts"})),
        Some(json!({"type": "mount"})),
    ]
    .into_iter()
    .flatten()
    .collect();
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": [AGENT_PATH, "agent"],
            "env": ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "VIRTPERF_ENV=container"],
            "cwd": "/tmp",
            "noNewPrivileges": flag("no_new_privileges"),
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps}
        },
        "root": {"path": "rootfs", "readonly": flag("readonly_rootfs")},
        "hostname": "virtperf",
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": format!("/virtperf/{id}"),
            "resources": resources,
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"]
        }
    })
}

fn write_bundle(
    bundle: &Path,
    id: &str,
    exe: &Path,
    params: &BTreeMap<String, Value>,
    netns: Option<&Path>,
    scratch: Option<&Path>,
    runtime: &str,
) -> std::io::Result<()> {
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(rootfs.join(".virtperf"))?;
    std::fs::write(rootfs.join(AGENT_PATH.trim_start_matches('/')), b"")?;
    // Merged-/usr hosts: /bin, /lib... are symlinks into /usr; recreate them.
    for ent in std::fs::read_dir("/")?.flatten() {
        let p = ent.path();
        if let Ok(target) = std::fs::read_link(&p) {
            let t = target.to_string_lossy();
            if t.starts_with("usr/") || t.starts_with("/usr/") {
                std::os::unix::fs::symlink(&target, rootfs.join(ent.file_name()))?;
            }
        }
    }
    for b in BINDS {
        std::fs::create_dir_all(rootfs.join(b.trim_start_matches('/')))?;
    }
    // /run, /var/log and /var/lib as on any Linux root: mount points for a process that makes a mount
    // namespace of its own (pfs servers put tmpfs and logs there); empty and read-only otherwise.
    for d in ["proc", "dev", "tmp", "run", "var/log", "var/lib"] {
        std::fs::create_dir_all(rootfs.join(d))?;
    }
    std::os::unix::fs::symlink("/run", rootfs.join("var/run"))?;
    if let Some(d) = scratch {
        std::fs::create_dir_all(rootfs.join(scratch::GUEST_DIR.trim_start_matches('/')))?;
        if params.get("disk").and_then(Value::as_str) == Some("overlay") && runtime != "runsc" {
            for layer in ["lower", "upper", "work"] {
                std::fs::create_dir_all(d.join(layer))?;
            }
        }
    }
    let mut cfg = oci_config(id, exe, params, netns, scratch, runtime);
    if let Some(section) =
        seccomp_section(params).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?
    {
        cfg["linux"]["seccomp"] = section;
    }
    std::fs::write(bundle.join("config.json"), serde_json::to_vec_pretty(&cfg)?)
}

/// A security switch a user flips on `docker run` (`no_new_privileges`, `readonly_rootfs`): on
/// unless turned off.
fn switch_on(params: &BTreeMap<String, Value>, key: &str) -> bool {
    params.get(key).and_then(Value::as_bool).unwrap_or(true)
}

/// The `linux.seccomp` section the `seccomp` parameter asks for (None: no filter), resolved for
/// the container's capabilities on this host (env/seccomp.rs).
pub fn seccomp_section(params: &BTreeMap<String, Value>) -> Result<Option<Value>, String> {
    match seccomp::choice_of(params)? {
        seccomp::Choice::None => Ok(None),
        seccomp::Choice::Profile { path, .. } => {
            let target = seccomp::Target::host(capabilities_of(params)?);
            seccomp::load(&path, &target).map(|r| Some(r.section))
        }
    }
}

/// The knobs of [`PARAMS`] set away from their defaults, in words (`seccomp=default (…)`).
pub fn knobs_of(params: &BTreeMap<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    match seccomp::choice_of(params) {
        Ok(seccomp::Choice::None) | Err(_) => {}
        Ok(c) => {
            let value = params.get("seccomp").and_then(Value::as_str).unwrap_or_default();
            let words = seccomp::describe_loaded(&c, &capabilities_of(params).unwrap_or_default())
                .unwrap_or_else(|e| format!("does not load: {e}"));
            out.push(format!("seccomp={value} — {words}"));
        }
    }
    for (key, words) in [
        (
            "no_new_privileges",
            "setuid programs and file capabilities may raise privileges, as Docker's default",
        ),
        ("readonly_rootfs", "a writable root, as Docker's default"),
    ] {
        if !switch_on(params, key) {
            out.push(format!("{key}=false — {words}"));
        }
    }
    let net = Network::of(params);
    if net != Network::Veth {
        let value = params.get("network").and_then(Value::as_str).unwrap_or_default();
        out.push(format!("network={value} — {} (MTU {} inside)", net.words(), container_net::mtu_of(params)));
    }
    out
}

/// What the container is held to, in a line for the manifest and the report (docs/security.md).
pub fn confinement_of(params: &BTreeMap<String, Value>) -> String {
    let flag = |k: &str| switch_on(params, k);
    let caps = match capabilities_of(params).unwrap_or_default() {
        c if c.is_empty() => "no capabilities".to_string(),
        c => format!(
            "capabilities {}",
            c.iter().map(|x| x.trim_start_matches("CAP_")).collect::<Vec<_>>().join(",")
        ),
    };
    let filter = match seccomp::choice_of(params) {
        Ok(seccomp::Choice::None) | Err(_) => {
            "no seccomp filter (it measures namespaces and cgroups alone: docs/security.md)".to_string()
        }
        Ok(c) => match seccomp::describe_loaded(&c, &capabilities_of(params).unwrap_or_default()) {
            Ok(words) => words,
            Err(e) => format!("a seccomp profile that does not load: {e}"),
        },
    };
    format!(
        "runc's namespaces and cgroup; {caps}; {}; a {} root with /usr, /etc, /opt bound read-only, /scratch a host directory bound read-write; {filter}",
        if flag("no_new_privileges") { "no_new_privileges" } else { "new privileges allowed (setuid, file capabilities)" },
        if flag("readonly_rootfs") { "read-only" } else { "writable" },
    )
}

/// Whether a container with these parameters can run file-system servers (see
/// [`Environment::serves_files`]): the capabilities they need.
pub fn serves_files(params: &BTreeMap<String, Value>) -> Result<(), String> {
    if let Some((prog, _)) = Network::of(params).program() {
        return Err(format!(
            "a GlusterFS server listens on ports {prog} does not forward (24007 and a brick's own): use network = \"veth\""
        ));
    }
    let caps = capabilities_of(params)?;
    let missing: Vec<&str> =
        ["CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE"].into_iter().filter(|c| !caps.iter().any(|x| x == c)).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a GlusterFS server needs {} (a mount namespace of its own, trusted.* extended attributes on its brick, directories only root's DAC_OVERRIDE enters), which this container drops: give it capabilities = \"docker,SYS_ADMIN\" (Docker's default set and SYS_ADMIN, as `docker run --cap-add SYS_ADMIN`)",
            missing.join(" and ")
        ))
    }
}

impl Environment for Container {
    fn confinement(&self, params: &BTreeMap<String, Value>) -> String {
        confinement_of(params)
    }
    fn knobs(&self, params: &BTreeMap<String, Value>) -> Vec<String> {
        knobs_of(params)
    }
    fn knob_table(&self) -> &'static [Knob] {
        &[
            Knob { name: "seccomp", values: &["default"] },
            Knob { name: "no_new_privileges", values: &["false"] },
            Knob { name: "readonly_rootfs", values: &["false"] },
            Knob { name: "network", values: &["pasta", "slirp4netns"] },
        ]
    }
    fn uses_host_network(&self) -> bool {
        true
    }
    fn doctor_variants(&self) -> &'static [(&'static str, &'static str)] {
        &[("runtime", "crun"), ("seccomp", "default"), ("network", "pasta"), ("network", "slirp4netns")]
    }
    fn serves_files(&self, params: &BTreeMap<String, Value>) -> Result<(), String> {
        serves_files(params)
    }
    fn file_server_params(&self) -> (BTreeMap<String, Value>, &'static str) {
        (
            [("capabilities".to_string(), Value::from("docker,SYS_ADMIN"))].into(),
            " with capabilities = \"docker,SYS_ADMIN\"",
        )
    }
    fn kind(&self) -> &'static str {
        "container"
    }
    fn summary(&self) -> &'static str {
        "Linux namespaces + cgroups through a real OCI runtime (runc, or crun), bundle generated by virtperf"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn check(&self, params: &BTreeMap<String, Value>) -> Result<(), ParamError> {
        capabilities_of(params).map_err(|m| ParamError::new("capabilities", m))?;
        // A profile of the user's own must be there and read; the packaged default is the
        // host's to provide (availability: doctor says which package).
        if let seccomp::Choice::Profile { default: false, .. } =
            seccomp::choice_of(params).map_err(|m| ParamError::new("seccomp", m))?
        {
            seccomp_section(params).map_err(|m| ParamError::new("seccomp", m))?;
        }
        if params.contains_key("network_mtu") && Network::of(params) == Network::Veth {
            return Err(ParamError::new(
                "network_mtu",
                "applies to network = \"pasta\" or \"slirp4netns\" only: a veth's MTU is the lab's ([lab] mtu = …)",
            ));
        }
        if let Some(s) = params.get("cpuset").and_then(Value::as_str) {
            crate::host::check_cpuset(s).map_err(|e| ParamError::new("cpuset", e))?;
        }
        if let Some(c) = params.get("cpus").and_then(Value::as_f64) {
            let n = crate::host::host_cpus();
            if c > n as f64 {
                return Err(ParamError::new("cpus", format!("{c} CPUs asked but this host has {n}")));
            }
        }
        Ok(())
    }
    fn availability(&self, params: &BTreeMap<String, Value>) -> Availability {
        let rt = runtime_of(params);
        if crate::host::which(rt).is_none() {
            return Availability::no(
                format!("{rt} is not installed"),
                format!("apt-get install -y {rt}   (or: make deps)"),
            );
        }
        if !crate::host::is_root() {
            return Availability::no(
                "containers need root here (cgroups, namespaces)",
                "run virtperf as root",
            );
        }
        if let Ok(seccomp::Choice::Profile { path, default: true }) = seccomp::choice_of(params) {
            if !path.is_file() {
                return Availability::no(
                    format!("seccomp = \"default\" reads {}, which is not installed", path.display()),
                    format!("apt-get install -y {}   (or: make deps)", seccomp::DEFAULT_PACKAGE),
                );
            }
        }
        if let Some((prog, package)) = Network::of(params).program() {
            if crate::host::which(prog).is_none() {
                return Availability::no(
                    format!("network = \"{prog}\" needs {prog}, which is not installed"),
                    format!("apt-get install -y {package}   (or: make deps)"),
                );
            }
        }
        if rt == "crun" && hybrid_cgroups() {
            return Availability::no(
                "crun refuses this host's hybrid cgroups (v1 controllers + a v2 'unified' mount)",
                "use runtime=runc (the default), or boot the host with cgroup v2 only (systemd.unified_cgroup_hierarchy=1)",
            );
        }
        let knobs: String = knobs_of(params).iter().map(|k| format!("; {k}")).collect();
        Availability::yes(format!(
            "{} found{knobs}",
            crate::host::version_of(rt).unwrap_or_else(|| rt.to_string())
        ))
    }
    fn runtime_version(&self, params: &BTreeMap<String, Value>) -> Option<String> {
        crate::host::version_of(runtime_of(params))
    }
    fn scratch(&self, params: &BTreeMap<String, Value>) -> Result<String, ParamError> {
        Ok(scratch_what(runtime_of(params), params, &crate::host::scratch_root()))
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError> {
        self.availability(params).require()?;
        launch_oci(ctx, params, runtime_of(params))
    }
}

/// Generates the bundle and runs `runtime` on it with the agent as its process; shared by the
/// `container` (runc, crun) and `gvisor` (runsc) environments.
pub(super) fn launch_oci(
    ctx: &mut LaunchCtx,
    params: &BTreeMap<String, Value>,
    runtime: &str,
) -> Result<Instance, LaunchError> {
    {
        let runtime = runtime.to_string();
        let id = ctx.instance_id.clone();
        let state_root = ctx.run_dir.join(format!("{runtime}-state"));
        let bundle = ctx.run_dir.join(format!("bundle-{id}"));
        ctx.ledger
            .create_dir(&bundle)
            .map_err(|e| LaunchError::Prepare(format!("{}: {e}", bundle.display())))?;
        let mut teardown = ContainerTeardown {
            runtime: runtime.clone(),
            state_root: state_root.clone(),
            id: id.clone(),
            bundle: bundle.clone(),
            net: None,
        };
        // gVisor's own `network` knob is its Sentry's (gvisor.rs); a container's is a helper.
        if runtime != "runsc" {
            match container_net::start(ctx, params) {
                Ok(h) => teardown.net = h,
                Err(e) => {
                    teardown.teardown(ctx.ledger);
                    return Err(e);
                }
            }
        }
        let inner_addr = teardown.net.as_ref().and_then(|h| h.inner_addr.clone());
        let helper_pid = teardown.net.as_ref().map(container_net::Helper::pid);
        let netns = match &teardown.net {
            Some(h) => Some(h.netns_path.clone()),
            None => ctx.netns.clone(),
        };
        if let Err(e) = write_bundle(
            &bundle,
            &id,
            ctx.exe,
            params,
            netns.as_deref(),
            ctx.scratch_dir.as_deref(),
            &runtime,
        ) {
            teardown.teardown(ctx.ledger);
            return Err(LaunchError::Prepare(format!("cannot write the OCI bundle: {e}")));
        }
        // The shared parent first, so that it is removed last (rmdir fails while another run uses it).
        ctx.ledger.record_once(Entry::Cgroup { rel: "virtperf".into() });
        if params.get("cpuset").is_some() {
            if let Err(e) = super::cgroup::prepare_v1_cpuset_parent() {
                teardown.teardown(ctx.ledger);
                return Err(LaunchError::Prepare(format!("cannot prepare the cpuset cgroup: {e}")));
            }
        }
        ctx.ledger.record(Entry::Cgroup { rel: format!("virtperf/{id}") });
        ctx.ledger.record(Entry::Container {
            runtime: runtime.clone(),
            root: state_root.clone(),
            id: id.clone(),
        });
        let mut cmd = Command::new(&runtime);
        cmd.arg("--root").arg(&state_root);
        let mut netns_fd = None;
        if runtime == "runsc" {
            // gVisor moves the addresses of the lab namespace's interfaces into its own network
            // stack; without a lab it gets loopback only.
            match ctx.netns.as_deref() {
                Some(p) => match hide_root_ns_marker(&mut cmd, p) {
                    Ok(fds) => netns_fd = Some(fds),
                    Err(e) => {
                        teardown.teardown(ctx.ledger);
                        return Err(e);
                    }
                },
                None => {
                    cmd.arg("--network=none");
                }
            }
            // Host networking (the `network` knob): the sandbox still joins the lab namespace the
            // spec names, and its sockets are the host kernel's there.
            if ctx.netns.is_some() && params.get("network").and_then(Value::as_str) == Some("host") {
                cmd.arg("--network=host");
            }
            if let Some(d) = std::env::var_os("VIRTPERF_RUNSC_DEBUG") {
                cmd.arg("--debug").arg(format!("--debug-log={}/", d.to_string_lossy()));
            }
            if let Some(pl) = params.get("platform").and_then(Value::as_str) {
                cmd.arg(format!("--platform={pl}"));
            }
            // Checked with the experiment (gVisor's `check`): nothing wrong is left here.
            cmd.args(runsc_extra_flags().unwrap_or_default());
            if let (Some(d), Some("overlay")) = (&ctx.scratch_dir, params.get("disk").and_then(Value::as_str))
            {
                cmd.arg(format!("--overlay2=all:{}", d.display()));
            }
        }
        cmd.arg("run").arg("--bundle").arg(&bundle).arg(&id);
        let started = Instant::now();
        let spawned = spawn_piped(&mut cmd, &format!("{runtime} run {id}"), ctx.ledger, false);
        drop(netns_fd);
        let (child, stdin, stdout, tail) = match spawned {
            Ok(x) => x,
            Err(e) => {
                teardown.teardown(ctx.ledger);
                return Err(e);
            }
        };
        let scratch = ctx.scratch_dir.as_deref().map(|d| super::launch::Scratch {
            dir: scratch::GUEST_DIR.into(),
            what: scratch_what(&runtime, params, d),
        });
        let inst = Instance {
            scratch,
            cleanup: Vec::new(),
            conn: Conn::new(stdout, Box::new(super::conn::DeadlineWriter::new(stdin)), tail),
            cpu: super::cgroup::cgroup_probe(&id),
            start_time: Default::default(),
            phases: Default::default(),
            rtt: Default::default(),
            rtt_jitter: Default::default(),
            go_floor: None,
            id: String::new(),
            own_clock: false,
            agent_pid: 0,
            teardown: Box::new(teardown),
            child: Some(child),
            pauser: None,
            inner_addr,
        };
        let inst = inst.await_hello(ctx, started)?;
        // The helper's CPU is the container's network's cost: counted with the instance (runc
        // made its cgroup by now), paused with it.
        if let Some(pid) = helper_pid {
            if let Err(e) = super::cgroup::join_instance_cgroup(&id, pid) {
                inst.kill(ctx.ledger);
                return Err(LaunchError::Prepare(format!(
                    "the network helper into the container's cgroup: {e}"
                )));
            }
        }
        Ok(inst)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn runsc_flags_are_words_that_are_flags_and_not_virtperfs_own() {
        assert_eq!(runsc_flags_of("").unwrap(), Vec::<String>::new());
        assert_eq!(
            runsc_flags_of("  --strace  --gso=false\t-software-gso=false ").unwrap(),
            ["--strace", "--gso=false", "-software-gso=false"]
        );
        let e = runsc_flags_of("--strace true").unwrap_err();
        assert!(e.contains("`true` is not a flag"), "{e}");
        for own in ["--network=host", "--root=/x", "--overlay2=none", "--debug-log=/tmp/"] {
            let e = runsc_flags_of(own).unwrap_err();
            assert!(e.contains("virtperf sets"), "{own}: {e}");
        }
        assert!(runsc_flags_of("-platform=kvm").unwrap_err().contains("`platform` parameter"));
        assert!(runsc_flags_of("--").is_err());
    }

    use super::*;

    #[test]
    fn config_carries_limits_and_no_host_mounts_outside_the_bundle() {
        let params: BTreeMap<String, Value> = [
            ("cpus".to_string(), json!(1.5)),
            ("memory".to_string(), json!(512u64 << 20)),
            ("cpuset".to_string(), json!("0")),
        ]
        .into_iter()
        .collect();
        let c = oci_config("vp1-0-0", Path::new("/x/virtperf"), &params, None, None, "runc");
        assert_eq!(c["linux"]["resources"]["cpu"]["quota"], json!(150_000));
        assert_eq!(c["linux"]["resources"]["cpu"]["cpus"], json!("0"));
        assert_eq!(c["linux"]["resources"]["memory"]["limit"], json!(512u64 << 20));
        assert_eq!(c["linux"]["cgroupsPath"], json!("/virtperf/vp1-0-0"));
        assert_eq!(c["root"]["readonly"], json!(true));
        assert_eq!(c["process"]["args"], json!([AGENT_PATH, "agent"]));
        let ns: Vec<&str> = c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert!(ns.contains(&"network") && ns.contains(&"pid") && ns.contains(&"mount"));
    }

    #[test]
    fn knobs_reach_the_config_and_are_said_only_when_set() {
        let plain = oci_config("vp1-0-0", Path::new("/x/virtperf"), &BTreeMap::new(), None, None, "runc");
        assert_eq!(plain["process"]["noNewPrivileges"], json!(true));
        assert_eq!(plain["root"]["readonly"], json!(true));
        assert!(knobs_of(&BTreeMap::new()).is_empty());
        assert!(confinement_of(&BTreeMap::new()).contains("no seccomp filter"));
        assert_eq!(seccomp_section(&BTreeMap::new()), Ok(None));

        let loose: BTreeMap<String, Value> =
            [("no_new_privileges".to_string(), json!(false)), ("readonly_rootfs".to_string(), json!(false))]
                .into();
        let c = oci_config("vp1-0-0", Path::new("/x/virtperf"), &loose, None, None, "runc");
        assert_eq!(c["process"]["noNewPrivileges"], json!(false));
        assert_eq!(c["root"]["readonly"], json!(false));
        let k = knobs_of(&loose);
        assert!(
            k.len() == 2
                && k[0].starts_with("no_new_privileges=false")
                && k[1].starts_with("readonly_rootfs=false"),
            "{k:?}"
        );

        // A profile of the user's own, resolved for the container's capabilities.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(
            &path,
            r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
                {"names": ["getppid"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]}"#,
        )
        .unwrap();
        let mut own: BTreeMap<String, Value> =
            [("seccomp".to_string(), json!(path.to_str().unwrap()))].into();
        let s = seccomp_section(&own).unwrap().unwrap();
        assert_eq!(s["syscalls"].as_array().unwrap().len(), 1, "{s}");
        own.insert("capabilities".into(), json!("SYS_ADMIN"));
        assert_eq!(seccomp_section(&own).unwrap().unwrap()["syscalls"].as_array().unwrap().len(), 2);
        assert!(Container.check(&own).is_ok());
        let words = knobs_of(&own);
        assert!(words[0].contains("2 of its 2 rules kept"), "{words:?}");
        own.insert("seccomp".into(), json!("/nonexistent/p.json"));
        let e = Container.check(&own).unwrap_err();
        assert!(e.to_string().contains("seccomp") && e.to_string().contains("/nonexistent/p.json"), "{e}");
    }
}
