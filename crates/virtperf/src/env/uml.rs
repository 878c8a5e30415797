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
use virtperf_workload::{ParamError, ParamKind, ParamSpec};

use super::launch::{
    Availability, Environment, GuestNet, GuestTeardown, Instance, Knob, LaunchCtx, LaunchError, Teardown,
};

pub struct Uml;

const BINARY: &str = "linux.uml";

/// The packaged kernel: `$VIRTPERF_LINUX_UML` when set (a kernel installed elsewhere; the tests'
/// stand-in for a host whose CPU the packaged kernel cannot run on), else `linux.uml` on PATH.
fn packaged_binary() -> Option<std::path::PathBuf> {
    match std::env::var_os("VIRTPERF_LINUX_UML").filter(|v| !v.is_empty()) {
        Some(p) => crate::host::which(&p.to_string_lossy()),
        None => crate::host::which(BINARY),
    }
}

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "mem",
        kind: ParamKind::Size { min: 64 << 20, max: 64 << 30 },
        default: Some("256MiB"),
        help: "guest memory (UML `mem=`)",
    },
    ParamSpec {
        name: "kernel",
        kind: ParamKind::Text,
        default: Some("auto"),
        help: "the UML kernel: auto (the packaged linux.uml where a probe boot shows it works here, \
               else virtperf's patched build), packaged, virtperf (built from linux-source-6.12 with \
               the xstate patch: `virtperf image build --uml`), or the path of your own",
    },
    ParamSpec {
        name: "disk",
        kind: ParamKind::Choice(&["none", "ubd"]),
        default: Some("none"),
        help: "a scratch disk: ubd (UML's block device on an image file, ext4, mounted at /tmp/scratch; the host's page cache serves it)",
    },
    ParamSpec {
        name: "disk_size",
        kind: ParamKind::Size { min: 16 << 20, max: 1 << 42 },
        default: Some("256MiB"),
        help: "size of the scratch disk",
    },
    ParamSpec {
        name: "cpuset",
        kind: ParamKind::Text,
        default: None,
        help: "pin the guest's host processes (its kernel and every process it runs) to these CPUs \
               (`1`, `0-1`, or `last`: the host's last CPU): a guest system call is a ptrace hand-off between two of them, and \
               across CPUs it costs more and varies by launch",
    },    super::launch::MITIGATIONS,
];

/// The scratch disk's device node in the guest (`ubd0=` on the command line).
const UBD_DEV: &str = "/dev/ubda";

/// The guest's writable temporary directory: a tmpfs the init mounts on the first of these
/// host directories that does not hold the agent binary (the root is the host's, read-only, and a
/// tmpfs over the agent's directory would hide it — a checkout below /tmp, say). Its path is the
/// agent's `TMPDIR`, which the tools it runs (iperf3's stream buffers, …) create their files in.
pub fn guest_tmp_dir(agent: &Path) -> &'static str {
    ["/tmp", "/var/tmp", "/run", "/mnt"].into_iter().find(|d| !agent.starts_with(d)).unwrap_or("/dev/shm")
}

/// Where the guest mounts its scratch disk: below its temporary directory's tmpfs.
pub fn guest_scratch_dir(agent: &Path) -> String {
    format!("{}/scratch", guest_tmp_dir(agent))
}

/// Host memory a UML guest may use beyond its `mem` (the kernel image, page tables, the host
/// processes of its user processes), as its cgroup's limit.
const UML_MEMORY_OVERHEAD: u64 = 256 << 20;

/// Seconds a probe boot may take to reach its init.
const PROBE_DEADLINE_S: u64 = 20;
/// What the probe's init prints once it runs (proof that user processes work).
const PROBE_MARKER: &str = "virtperf-uml-probe-ok";

/// The guest's init: mounts, the NIC, then the agent on tty1. `sh` and `ip` are the host's,
/// through hostfs.
pub fn init_script(agent: &Path, net: Option<&GuestNet>, disk: bool) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         # virtperf UML guest init (generated)\n\
         echo 'virtperf-init: start' >&2\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n",
    );
    // Scratch space where it does not hide the agent binary itself, and the agent's TMPDIR.
    let tmp = guest_tmp_dir(agent);
    let _ = writeln!(s, "mount -t tmpfs -o size=64m tmp {tmp}\nexport TMPDIR={tmp}");
    if disk {
        // No scratch directory at all when the mount fails: a disk workload then fails, rather
        // than measure the tmpfs underneath.
        let d = guest_scratch_dir(agent);
        let _ = writeln!(
            s,
            "mkdir -p {d}\nmount -t ext4 {UBD_DEV} {d} || {{ echo \"virtperf-init: mount {UBD_DEV} failed\" >&2; rmdir {d}; }}"
        );
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

/// What a UML guest's host processes see and may write: the guest's root (`hostfs=`) is a
/// read-only view of the host's tree (`root`); outside it, its memory file's tmpfs (`mem` and
/// room for UML's own mappings; also UML's `uml_dir`, where it keeps its pid and mconsole socket)
/// and its scratch disk's image, which the guest reaches only through the view, read-only.
pub fn confinement(
    root: &Path,
    mem_dir: &Path,
    mem: u64,
    ubd: Option<&Path>,
) -> crate::host::confine::Confinement {
    crate::host::confine::Confinement {
        root_view: Some(root.to_path_buf()),
        tmpfs: Some((mem_dir.to_path_buf(), mem + MEMORY_FILE_SLACK)),
        writable_files: ubd.map(Path::to_path_buf).into_iter().collect(),
    }
}

/// Room beyond `mem` in the tmpfs that holds UML's memory file.
const MEMORY_FILE_SLACK: u64 = 64 << 20;

/// The `linux.uml` command line.
/// `root` is the host's tree as the guest sees it (a read-only view: [`confinement`]), `run_dir`
/// where UML keeps its pid file and mconsole socket (its `uml_dir`, else `~/.uml` on the host).
pub fn kernel_args(
    mem: u64,
    root: &Path,
    run_dir: &Path,
    init: &Path,
    net: Option<&GuestNet>,
    ubd: Option<&Path>,
) -> Vec<String> {
    let mut a = vec![
        format!("mem={}M", mem >> 20),
        "root=/dev/root".into(),
        "rootfstype=hostfs".into(),
        format!("hostfs={}", root.display()),
        "ro".into(),
        format!("uml_dir={}", run_dir.display()),
        format!("init={}", init.display()),
        // Kernel console → stderr; the agent's line (tty1) → stdin/stdout; no other consoles.
        "con=null".into(),
        "con0=null,fd:2".into(),
        "con1=fd:0,fd:1".into(),
        "quiet".into(),
    ];
    if let Some(n) = net {
        a.push(format!("vec0:transport=hybrid,ifname={},gro=1", n.tap));
    }
    if let Some(img) = ubd {
        a.push(format!("ubd0={}", img.display()));
    }
    a
}

/// What a probe boot of a UML kernel showed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    pub ok: bool,
    /// One line: why it does not work here (empty when it does).
    pub reason: String,
    /// The failure is the XSAVE-size one (the fix is virtperf's patched kernel).
    pub xstate: bool,
}

/// Classifies the console of a failed probe boot: one line, the cause when it is known.
pub fn classify_failure(label: &str, console: &str, xsave: Option<u32>) -> Probe {
    let lines: Vec<&str> = console.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let Some(l) =
        lines.iter().find(|l| l.contains("fp regs failed") || l.contains("get_fp_registers failed"))
    {
        let size = xsave.map(|b| format!("{b} bytes")).unwrap_or_else(|| "its size".into());
        return Probe {
            ok: false,
            reason: format!(
                "{label} cannot save this CPU's XSAVE state ({size}, CPUID leaf 0xD) through ptrace: \
                 its first process dies (`{l}`)"
            ),
            xstate: true,
        };
    }
    let last = lines
        .iter()
        .rev()
        .find(|l| l.contains("panic") || l.contains("Kernel panic"))
        .or(lines.last())
        .map(|l| format!("last console line: `{l}`"))
        .unwrap_or_else(|| "no console output".into());
    Probe {
        ok: false,
        reason: format!("{label} did not run its first process within {PROBE_DEADLINE_S} s ({last})"),
        xstate: false,
    }
}

/// Under replaced host facts (`VIRTPERF_HOST_FACTS`, validation only) no kernel is booted for a
/// machine that is not this one: what a probe would show there, from its XSAVE size. The packaged
/// kernel (`legacy`) runs only where the host's user XSAVE area fits the buffer it was compiled
/// with (`UML_PACKAGED_XSAVE`); virtperf's patched kernel sizes its buffer from the host.
pub fn predicted(f: &crate::host::HostFacts, label: &str, legacy: bool) -> Probe {
    let src = f.profile.clone().unwrap_or_else(|| f.source.clone());
    match (legacy, f.legacy_uml_fits()) {
        (true, Some(false)) => Probe {
            ok: false,
            reason: format!(
                "{label} cannot save this CPU's XSAVE state ({} bytes, CPUID leaf 0xD; its buffer is {}) through ptrace \
                 (predicted from the host facts of {src})",
                f.xsave_max.unwrap_or_default(),
                crate::host::facts::UML_PACKAGED_XSAVE
            ),
            xstate: true,
        },
        _ => Probe { ok: true, reason: String::new(), xstate: false },
    }
}

/// [`predicted`] under replaced host facts, else a real probe boot.
fn probe_or_predict(kernel: &Path, label: &str, legacy: bool) -> Probe {
    let f = crate::host::facts();
    if f.measured() {
        probe(kernel, label)
    } else {
        predicted(f, label, legacy)
    }
}

/// Boots `kernel` to a one-line init (which forks a child, as the agent's init does) and kills it;
/// remembered in the cache per kernel file, host kernel and XSAVE size (a boot costs ~2 s).
pub fn probe(kernel: &Path, label: &str) -> Probe {
    let cache = crate::image::cache_dir();
    let meta = std::fs::metadata(kernel).ok();
    let key = format!(
        "{}|{}|{:?}|{}|{:?}",
        kernel.display(),
        meta.as_ref().map(|m| m.len()).unwrap_or(0),
        meta.and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        crate::host::facts().xsave_enabled
    );
    let memo = cache.join("uml-probe.json");
    let mut known: BTreeMap<String, Probe> =
        std::fs::read_to_string(&memo).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
    if let Some(p) = known.get(&key) {
        return p.clone();
    }
    let p = probe_uncached(kernel, label, &cache);
    known.retain(|k, _| !k.starts_with(&format!("{}|", kernel.display())));
    known.insert(key, p.clone());
    if crate::host::ensure_private_dir(&cache).is_ok() {
        let _ = std::fs::write(&memo, serde_json::to_string_pretty(&known).unwrap_or_default());
    }
    p
}

fn probe_uncached(kernel: &Path, label: &str, cache: &Path) -> Probe {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let fail = |why: String| Probe { ok: false, reason: format!("{label}: {why}"), xstate: false };
    let dir = cache.join(format!("uml-probe-{}", std::process::id()));
    if let Err(e) = crate::host::ensure_private_dir(cache).and_then(|_| crate::host::ensure_private_dir(&dir))
    {
        return fail(format!("cannot create {}: {e}", dir.display()));
    }
    let init = dir.join("init.sh");
    let script = format!(
        "#!/bin/sh\nmount -t proc proc /proc 2>/dev/null\necho \"{PROBE_MARKER} $(cat /proc/sys/kernel/osrelease)\"\nexec sleep 60\n"
    );
    let written = std::fs::write(&init, script)
        .and_then(|_| std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&dir);
        return fail(format!("cannot write {}: {e}", init.display()));
    }
    // Confined as a guest is (host/confine.rs): a probe's kernel writes nothing on the host either.
    let (root, mem_dir) = (dir.join("root"), dir.join("mem"));
    let mut cmd = Command::new(kernel);
    let confined =
        [&root, &mem_dir].iter().try_for_each(std::fs::create_dir).map_err(|e| e.to_string()).and_then(
            |_| {
                crate::host::confine::on_spawn(&mut cmd, &confinement(&root, &mem_dir, 64 << 20, None))
                    .map_err(|e| e.to_string())
            },
        );
    if let Err(e) = confined {
        let _ = std::fs::remove_dir_all(&dir);
        return fail(format!("cannot confine it: {e}"));
    }
    cmd.args([
        "mem=64M",
        "root=/dev/root",
        "rootfstype=hostfs",
        &format!("hostfs={}", root.display()),
        "ro",
        &format!("uml_dir={}", mem_dir.display()),
        &format!("init={}", init.display()),
        "con=null",
        "con0=null,fd:2",
    ])
    .env("TMPDIR", &mem_dir)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .process_group(0);
    virtperf_workload::tools::die_with_parent(&mut cmd);
    // With this process, not with the thread that launched it.
    let mut child = match crate::host::spawn_lasting(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return fail(format!("cannot start: {e}"));
        }
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    if let Some(err) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(err);
            while let Ok(l) = virtperf_proto::read_line(&mut r) {
                if tx.send(String::from_utf8_lossy(&l).into_owned()).is_err() {
                    break;
                }
            }
        });
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(PROBE_DEADLINE_S);
    let mut console = String::new();
    let mut ok = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left.min(std::time::Duration::from_millis(100))) {
            Ok(l) => {
                ok = l.contains(PROBE_MARKER);
                console.push_str(&l);
                console.push('\n');
                if ok {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if left.is_zero() => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // A kernel that panicked may sit there: the console already says why.
                if console.contains("Kernel panic") && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // The whole guest: UML's helpers and user processes share its process group.
    // SAFETY: kill(2) of the process group of a child this function started (pgid = its pid).
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if ok {
        return Probe { ok: true, reason: String::new(), xstate: false };
    }
    classify_failure(label, &console, crate::host::facts().xsave_enabled)
}

/// Which kernel a `kernel` parameter stands for, and what to tell about it.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Run this file.
    Run { path: std::path::PathBuf, detail: String },
    /// virtperf's kernel is needed and not built yet: `prepare()` builds it.
    Build { detail: String },
    /// Cannot run here.
    No(Availability),
}

fn packaged_label() -> String {
    format!("the packaged {}", runtime_version().unwrap_or_else(|| BINARY.to_string()))
}

fn virtperf_kernel(why_not_packaged: Option<&str>) -> Choice {
    let prefix = why_not_packaged.map(|w| format!("{w}; ")).unwrap_or_default();
    if let Some(k) = crate::image::uml::find_built(&crate::image::cache_dir()) {
        let p = probe_or_predict(&k.path, "virtperf's UML kernel", false);
        if !p.ok {
            return Choice::No(Availability::no(
                format!("{prefix}{}", p.reason),
                "report this with `virtperf doctor --json`; meanwhile leave uml out of the experiment",
            ));
        }
        return Choice::Run {
            detail: format!(
                "{prefix}using virtperf's UML kernel ({}, xstate patch): {}",
                k.source,
                k.path.display()
            ),
            path: k.path,
        };
    }
    let missing = crate::image::uml::missing_tools();
    if !missing.is_empty() {
        return Choice::No(Availability::no(
            format!("{prefix}virtperf's UML kernel is not built and this host lacks its build tools"),
            format!(
                "apt-get install -y {} (or: make deps), then virtperf image build --uml",
                missing.join(" ")
            ),
        ));
    }
    Choice::Build {
        detail: format!(
            "{prefix}virtperf builds its patched UML kernel on first use (~3 min on 2 cores), or now: \
             virtperf image build --uml"
        ),
    }
}

/// Resolves the `kernel` parameter (probing the packaged kernel when it matters).
pub fn choose(params: &BTreeMap<String, Value>) -> Choice {
    let want = params.get("kernel").and_then(Value::as_str).unwrap_or("auto");
    match want {
        "virtperf" => virtperf_kernel(None),
        "auto" | "packaged" => {
            let Some(path) = packaged_binary() else {
                return match want {
                    "packaged" => Choice::No(Availability::no(
                        "linux.uml is not installed",
                        "apt-get install -y user-mode-linux   (or: make deps)",
                    )),
                    _ => match virtperf_kernel(Some("linux.uml is not installed")) {
                        Choice::Run { path, detail } => Choice::Run { path, detail },
                        _ => Choice::No(Availability::no(
                            "linux.uml is not installed",
                            "apt-get install -y user-mode-linux   (or: make deps)",
                        )),
                    },
                };
            };
            let label = packaged_label();
            let p = probe_or_predict(&path, &label, true);
            if p.ok {
                return Choice::Run { detail: format!("{label} boots here ({})", path.display()), path };
            }
            if want == "packaged" {
                let fix = if p.xstate {
                    "use uml:kernel=virtperf (or kernel=auto): virtperf image build --uml".to_string()
                } else {
                    "use uml:kernel=virtperf, or kernel=PATH to a UML kernel that boots here".to_string()
                };
                return Choice::No(Availability::no(p.reason, fix));
            }
            virtperf_kernel(Some(&p.reason))
        }
        path => {
            let p = std::path::PathBuf::from(path);
            if !p.is_file() {
                return Choice::No(Availability::no(
                    format!("kernel {path} does not exist"),
                    "give kernel=auto, packaged, virtperf or the path of a UML kernel",
                ));
            }
            let pr = probe_or_predict(&p, &format!("the UML kernel {path}"), false);
            if !pr.ok {
                return Choice::No(Availability::no(pr.reason, "use uml:kernel=auto"));
            }
            Choice::Run { detail: format!("your UML kernel {path} boots here"), path: p }
        }
    }
}

impl Environment for Uml {
    fn confinement(&self, _params: &BTreeMap<String, Value>) -> String {
        "a mount namespace of its own: every host file system read-only, the guest's hostfs root a read-only view of /; writable: its memory tmpfs (sized) and its scratch image only".into()
    }
    fn bridges(&self) -> Result<(), String> {
        Err("a UML driver domain cannot bridge here: the UML kernels virtperf runs have no bridge built in (the packaged one's is a module its hostfs root cannot load); use switch_guest = \"qemu\"".into())
    }
    /// `uml` alone says which kernel `auto` picks; this row says whether virtperf's own works.
    fn doctor_variants(&self) -> &'static [(&'static str, &'static str)] {
        &[("kernel", "virtperf")]
    }
    fn kind(&self) -> &'static str {
        "uml"
    }
    fn knob_table(&self) -> &'static [Knob] {
        &[Knob { name: "mitigations", values: &["off"] }]
    }
    fn knobs(&self, params: &BTreeMap<String, Value>) -> Vec<String> {
        super::launch::knobs_set(
            params,
            &[("mitigations", "auto", |_| {
                "the UML kernel's command line says mitigations=off; a UML kernel has no CPU-vulnerability mitigations of its own to turn off (its processes are the host kernel's, mitigated as the host is), so no change is expected".into()
            })],
        )
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
    fn own_clock(&self) -> bool {
        true
    }
    fn memory_bytes(&self, params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        Some(("mem", params.get("mem").and_then(Value::as_u64).unwrap_or(256 << 20)))
    }
    fn serves_files(&self, _params: &BTreeMap<String, Value>) -> Result<(), String> {
        // Measured (the AMD development host's UML guest, disk = ubd, GlusterFS 10.3): glusterd
        // starts, the volume is made and mounted, and the client's first LOOKUP on a brick times
        // out (with a 5 s ping timeout and with GlusterFS's 42 s default alike).
        Err("GlusterFS does not run in UML here: the volume is made and mounted, but its bricks never answer the client's first request (ENOTCONN after the ping timeout, 5 s or 42 s)".into())
    }
    fn file_server_params(&self) -> (BTreeMap<String, Value>, &'static str) {
        ([("disk".to_string(), Value::from("ubd"))].into(), "")
    }
    fn default_scratch_disk(&self) -> Option<&'static str> {
        Some("ubd")
    }
    fn scratch(&self, params: &BTreeMap<String, Value>) -> Result<String, ParamError> {
        match params.get("disk").and_then(Value::as_str).unwrap_or("none") {
            "none" => Err(ParamError::new(
                "disk",
                "this UML guest has no scratch disk (disk = none): give it one, disk = ubd",
            )),
            _ => Ok(format!(
                "ext4 on ubd {UBD_DEV}: an image file on {} (through the host's page cache)",
                super::scratch::root_description()
            )),
        }
    }
    fn disk_bytes(&self, params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        (params.get("disk").and_then(Value::as_str).unwrap_or("none") != "none")
            .then(|| ("disk_size", params.get("disk_size").and_then(Value::as_u64).unwrap_or(256 << 20)))
    }
    fn check(&self, params: &BTreeMap<String, Value>) -> Result<(), ParamError> {
        if let Some(s) = params.get("cpuset").and_then(Value::as_str) {
            crate::host::check_cpuset(s).map_err(|e| ParamError::new("cpuset", e))?;
        }
        match params.get("kernel").and_then(Value::as_str).unwrap_or("auto") {
            "auto" | "packaged" | "virtperf" => Ok(()),
            p if std::path::Path::new(p).is_file() => Ok(()),
            p => Err(ParamError::new(
                "kernel",
                format!("`{p}` is neither auto, packaged, virtperf nor an existing file"),
            )),
        }
    }
    fn availability(&self, params: &BTreeMap<String, Value>) -> Availability {
        if params.get("disk").and_then(Value::as_str).unwrap_or("none") != "none"
            && super::scratch::mke2fs().is_none()
        {
            return Availability::no(
                "a scratch disk is formatted on the host with mke2fs, which is not installed",
                "apt-get install -y e2fsprogs   (or: make deps)",
            );
        }
        match choose(params) {
            Choice::Run { detail, .. } => Availability::yes(detail),
            Choice::Build { detail } => Availability::after_prepare(detail),
            Choice::No(a) => a,
        }
    }
    fn prepare(&self, params: &BTreeMap<String, Value>) -> Result<(), String> {
        match choose(params) {
            Choice::Build { .. } => {
                crate::image::uml::ensure(&crate::image::cache_dir(), crate::host::host_cpus())
                    .map(|_| ())
                    .map_err(|e| format!("cannot build virtperf's UML kernel: {e}"))
            }
            _ => Ok(()),
        }
    }
    fn runtime_version(&self, params: &BTreeMap<String, Value>) -> Option<String> {
        match choose(params) {
            Choice::Run { path, .. } if packaged_binary().as_deref() == Some(path.as_path()) => {
                runtime_version()
            }
            Choice::Run { path, .. } => Some(format!("uml kernel {}", path.display())),
            _ => runtime_version(),
        }
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError> {
        let kernel = match choose(params) {
            Choice::Run { path, .. } => path,
            Choice::Build { detail } => return Err(LaunchError::Unavailable(detail)),
            Choice::No(a) => {
                a.require()?;
                return Err(LaunchError::Unavailable("no UML kernel".into()));
            }
        };
        let mem = params.get("mem").and_then(Value::as_u64).unwrap_or(256 << 20);
        let dir = ctx.run_dir.join(format!("uml-{}", ctx.instance_id));
        ctx.ledger.create_dir(&dir).map_err(|e| LaunchError::Prepare(format!("{}: {e}", dir.display())))?;
        let mut teardown = GuestTeardown { cgroup: None, dir: dir.clone() };
        let (ubd, scratch) = match params.get("disk").and_then(Value::as_str).unwrap_or("none") {
            "none" => (None, None),
            _ => {
                let Some(sdir) = ctx.scratch_dir.clone() else {
                    teardown.teardown(ctx.ledger);
                    return Err(LaunchError::Prepare(
                        "disk=ubd needs the run's scratch directory, which could not be made (see VIRTPERF_SCRATCH)".into(),
                    ));
                };
                let img = sdir.join("scratch.img");
                let size = params.get("disk_size").and_then(Value::as_u64).unwrap_or(256 << 20);
                match super::scratch::make_image(&img, size) {
                    Ok(how) => {
                        let what = format!(
                            "ext4 on ubd {UBD_DEV}: image file {} ({} MiB, {how}, on the host's {}; UML's ubd reads and writes it through the host's page cache)",
                            img.display(),
                            size >> 20,
                            super::scratch::host_fs(&sdir)
                        );
                        let dir = guest_scratch_dir(ctx.exe);
                        (Some(img), Some(super::launch::Scratch { dir, what }))
                    }
                    Err(e) => {
                        teardown.teardown(ctx.ledger);
                        return Err(LaunchError::Prepare(e));
                    }
                }
            }
        };
        let init = dir.join("init.sh");
        let prepared = std::fs::write(&init, init_script(ctx.exe, ctx.guest_net.as_ref(), ubd.is_some()))
            .and_then(|_| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
            });
        if let Err(e) = prepared {
            teardown.teardown(ctx.ledger);
            return Err(LaunchError::Prepare(format!("cannot write the guest init: {e}")));
        }
        // UML backs guest memory with a file in TMPDIR: a tmpfs of its own mount namespace,
        // where the host's file systems are read-only to it and its guest (host/confine.rs).
        let (root, mem_dir) = (dir.join("root"), dir.join("mem"));
        let confined = [&root, &mem_dir]
            .iter()
            .try_for_each(|d| {
                std::fs::create_dir(d).map_err(|e| format!("cannot create {}: {e}", d.display()))
            })
            .and_then(|_| {
                let c = confinement(&root, &mem_dir, mem, ubd.as_deref());
                let mut cmd = Command::new(&kernel);
                cmd.args(kernel_args(mem, &root, &mem_dir, &init, ctx.guest_net.as_ref(), ubd.as_deref()))
                    .args(super::launch::mitigations_arg(params))
                    .env("TMPDIR", &mem_dir);
                crate::host::confine::on_spawn(&mut cmd, &c).map_err(|e| e.to_string()).map(|_| cmd)
            });
        let mut cmd = match confined {
            Ok(cmd) => cmd,
            Err(e) => {
                teardown.teardown(ctx.ledger);
                return Err(LaunchError::Prepare(e));
            }
        };
        if let Some(set) = params.get("cpuset").and_then(Value::as_str) {
            match crate::host::check_cpuset(set) {
                Ok(cpus) => crate::host::pin_on_spawn(&mut cmd, cpus),
                Err(e) => {
                    teardown.teardown(ctx.ledger);
                    return Err(LaunchError::Prepare(e));
                }
            }
        }
        let limits = super::cgroup::Limits { memory_bytes: Some(mem + UML_MEMORY_OVERHEAD), cpu_cap: None };
        let mut inst = super::launch::launch_guest(ctx, cmd, "linux.uml", None, limits, teardown, false)?;
        inst.scratch = scratch;
        Ok(inst)
    }
}

fn runtime_version() -> Option<String> {
    // `linux.uml --version` prints the kernel release.
    let out = crate::host::command::output_within(
        Command::new(packaged_binary()?).arg("--version"),
        crate::host::command::SHORT,
    )
    .ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().next().map(|l| format!("linux.uml {}", l.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_and_agent_line_are_separate() {
        let net = GuestNet { tap: "tap0".into(), addr: "198.18.0.11".parse().unwrap(), mtu: 1500 };
        let a = kernel_args(
            256 << 20,
            Path::new("/run/x/root"),
            Path::new("/run/x/mem"),
            Path::new("/run/x/init.sh"),
            Some(&net),
            Some(Path::new("/s/i.img")),
        );
        assert!(a.contains(&"ubd0=/s/i.img".to_string()));
        // The guest's root is the read-only view, never the host's `/` itself; UML's own files
        // go to its namespace's tmpfs, not to ~/.uml on the host.
        assert!(a.contains(&"hostfs=/run/x/root".to_string()) && !a.contains(&"hostfs=/".to_string()));
        assert!(a.contains(&"uml_dir=/run/x/mem".to_string()));
        assert!(a.contains(&"con0=null,fd:2".to_string()), "kernel messages go to stderr");
        assert!(a.contains(&"con1=fd:0,fd:1".to_string()), "the agent's line is stdin/stdout");
        assert!(a.contains(&"mem=256M".to_string()) && a.contains(&"ro".to_string()));
        assert!(a.contains(&"vec0:transport=hybrid,ifname=tap0,gro=1".to_string()));
        let s = init_script(Path::new("/usr/bin/virtperf"), Some(&net), true);
        assert!(s.contains("mount -t ext4 /dev/ubda /tmp/scratch"), "{s}");
        assert!(s.contains("ip addr add 198.18.0.11/24 dev vec0"));
        assert!(s.trim_end().ends_with("exec /usr/bin/virtperf agent --tty /dev/tty1"));
        assert!(!init_script(Path::new("/v"), None, false).contains("vec0"), "no NIC without a lab");
        assert!(!init_script(Path::new("/v"), None, false).contains("ubda"), "no disk unless asked");
        // A writable TMPDIR whatever the agent's path: a checkout below /tmp keeps its binary seen.
        assert!(s.contains("mount -t tmpfs -o size=64m tmp /tmp\nexport TMPDIR=/tmp"), "{s}");
        let under_tmp = init_script(Path::new("/tmp/ci/target/release/virtperf"), None, true);
        assert!(under_tmp.contains("tmp /var/tmp\nexport TMPDIR=/var/tmp"), "{under_tmp}");
        assert!(under_tmp.contains("mount -t ext4 /dev/ubda /var/tmp/scratch"), "{under_tmp}");
        assert!(!under_tmp.contains(" /tmp\n"), "the agent's directory is not hidden: {under_tmp}");
    }

    #[test]
    fn probe_failures_are_one_line_with_the_cause() {
        // The console of UML 6.1 on an AMX host (shared/MACHINE-NOTES.md).
        let console = "Run /tmp/x/init.sh as init process\n\
            userspace - ptrace set fp regs failed, errno = 14\n\
            Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n\
            CPU: 0 PID: 1 Comm: init.sh Not tainted 6.1.176\n\
            Stack:\n 6022ef6b 00000000 00000000 00000000\n";
        let p = classify_failure("the packaged linux.uml 6.1.176", console, Some(11008));
        assert!(!p.ok && p.xstate);
        assert!(p.reason.contains("11008 bytes") && p.reason.contains("errno = 14"), "{}", p.reason);
        assert!(!p.reason.contains('\n'));
        let p = classify_failure(
            "k",
            "booting\nKernel panic - not syncing: VFS: Unable to mount root fs\nStack:\n 1 2\n",
            None,
        );
        assert!(!p.xstate && p.reason.contains("Unable to mount root fs"), "{}", p.reason);
        assert!(classify_failure("k", "", None).reason.contains("no console output"));
    }

    #[test]
    fn each_profile_predicts_which_uml_kernel_runs_there() {
        for (name, f) in crate::host::facts::profiles() {
            let packaged = predicted(&f, "the packaged linux.uml", true);
            let own = predicted(&f, "virtperf's UML kernel", false);
            assert!(own.ok, "{name}: the patched kernel sizes its buffer from the host");
            match name {
                "intel-xeon" | "intel-xeon-amx" => {
                    assert!(!packaged.ok && packaged.xstate, "{name}");
                    assert!(
                        packaged.reason.contains("11008 bytes") && packaged.reason.contains("intel-xeon"),
                        "{}",
                        packaged.reason
                    );
                }
                "amd-epyc" | "intel-xeon-cascadelake" => assert!(packaged.ok, "{name}: {}", packaged.reason),
                other => panic!("a profile without an expectation: {other}"),
            }
        }
        // This machine: the probe boot (the ground truth) agrees with the prediction from its own
        // XSAVE size wherever the packaged kernel is installed (and is not replaced for a test).
        let here = crate::host::facts();
        if let (Some(fits), Some(path)) = (here.legacy_uml_fits(), packaged_binary()) {
            let p = probe(&path, "the packaged linux.uml");
            assert_eq!(p.ok, fits, "XSAVE {:?}: the probe says {:?}", here.xsave_enabled, p.reason);
        }
    }

    #[test]
    fn host_xsave_size_is_at_least_the_legacy_area() {
        // Every x86_64 CPU of this project's machines has XSAVE.
        let b = crate::host::facts().xsave_enabled.expect("CPUID leaf 0xD gives the XSAVE area");
        // x87/SSE legacy area (512) + XSAVE header (64).
        assert!(b >= 576 && b.is_multiple_of(8), "{b}");
    }
}
