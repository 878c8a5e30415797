//! `qemu`: a QEMU virtual machine booting virtperf's guest image (see `crate::image`): a Debian
//! kernel as an ELF (PVH boot, no firmware) and an initramfs whose init starts the very same
//! virtperf binary as the agent.
//!
//! - Accelerator: `kvm` when it can run a stock guest, else `tcg` (binary translation), with the
//!   reason recorded. On PVM hosts (`kvm_pvm`), /dev/kvm exists but stock kernels hang: TCG.
//! - Control channel: a virtio console (`/dev/hvc0`) on QEMU's stdin/stdout. The kernel console
//!   is the first serial port, on QEMU's stderr: kernel messages can never reach the agent's line.
//! - NIC: `virtio` (virtio-net), `e1000` or `rtl8139` on a tap bridged in the lab's endpoint
//!   namespace, so tester ↔ guest traffic crosses the emulated or paravirtual device.
//! - Disk (optional): a raw scratch image in the instance's scratch directory on the host's disk,
//!   preallocated and formatted ext4 on the host, as virtio-blk, IDE, SATA (AHCI) or NVMe, with
//!   the host cache mode given; the guest's init mounts it at /scratch.
//! - Host CPU: QEMU and all its threads run in the instance's cgroup.
//!
//! docs/environments/qemu.md says what was exercised on which host.

mod accel;
mod cmdline;

pub use accel::*;
pub use cmdline::*;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;
use virtperf_workload::{ParamError, ParamKind, ParamSpec};

use super::launch::{
    mitigations_arg, Availability, BridgeNet, Environment, GuestNet, GuestTeardown, Instance, Knob,
    LaunchCtx, LaunchError, Teardown,
};
use crate::image::{self, Image, ImageSpec, KernelSource};

pub struct Qemu;

pub const BINARY: &str = "qemu-system-x86_64";

/// Host memory a QEMU process may use beyond the guest's RAM (device models, the TCG translation
/// cache, the initramfs), as its cgroup's limit.
const QEMU_MEMORY_OVERHEAD: u64 = 768 << 20;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "accel",
        kind: ParamKind::Choice(&["auto", "kvm", "tcg"]),
        default: Some("auto"),
        help: "auto: KVM when it can run a stock guest (VT-x/AMD-V, not PVM), else TCG; the choice and why are recorded",
    },
    ParamSpec {
        name: "machine",
        kind: ParamKind::Choice(&["q35", "pc", "microvm"]),
        default: Some("q35"),
        help: "QEMU machine type; microvm has no PCI, so only virtio devices (virtio-mmio)",
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
        help: "NIC model on the lab tap: virtio (paravirtual virtio-net), e1000 or rtl8139 (emulated)",
    },
    ParamSpec {
        name: "disk",
        kind: ParamKind::Choice(&["none", "virtio-blk", "ide", "sata", "nvme"]),
        default: Some("none"),
        help: "a scratch disk (raw image, ext4, at /scratch): virtio-blk (paravirtual), ide (the machine's own ATA controller: PIIX IDE on pc, ICH9 AHCI on q35), sata (an AHCI controller) or nvme (emulated NVMe)",
    },
    ParamSpec {
        name: "cache",
        kind: ParamKind::Choice(&["writeback", "none", "writethrough", "directsync", "unsafe"]),
        default: Some("writeback"),
        help: "host cache mode of the disk image: writeback (the host's page cache), none (O_DIRECT on the host: not on tmpfs), writethrough, directsync, unsafe (flushes ignored)",
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
        help: "host CPUs for the vCPU threads, e.g. 1 or 0,1 (vCPU i on the i-th, round robin)",
    },
    ParamSpec {
        name: "binary",
        kind: ParamKind::Text,
        default: Some(BINARY),
        help: "the QEMU to run: a path or a name on PATH (two builds compared with `virtperf ab`)",
    },
    ParamSpec {
        name: "qemu_args",
        kind: ParamKind::Text,
        default: None,
        help: "extra QEMU arguments, shell-quoted, appended last (escape hatch)",
    },
    ParamSpec {
        name: "kernel",
        kind: ParamKind::Text,
        default: None,
        help: "your own kernel (bzImage or ELF) instead of Debian's; drivers built in",
    },
    ParamSpec {
        name: "initrd",
        kind: ParamKind::Text,
        default: None,
        help: "your own initramfs (needs kernel=); its init must run `virtperf agent --tty /dev/hvc0`",
    },
    ParamSpec {
        name: "kernel_package",
        kind: ParamKind::Text,
        default: None,
        help: "Debian kernel package [default: what linux-image-amd64 depends on]",
    },
    ParamSpec {
        name: "extra",
        kind: ParamKind::Text,
        default: None,
        help: "host programs to copy into the guest with their libraries, e.g. iperf3+fio",
    },    super::launch::MITIGATIONS,
];

/// A QEMU environment's parameters, read once from the resolved map. `resolve` fills PARAMS'
/// defaults; the fallbacks here are the same values, for maps built by hand (tests, doctor).
#[derive(Debug, Clone)]
struct QemuParams {
    accel: String,
    machine: String,
    vcpus: u32,
    memory: u64,
    nic: String,
    /// The disk model; None for `none`.
    disk: Option<String>,
    cache: String,
    disk_size: u64,
    pin: Option<String>,
    binary: String,
    qemu_args: Option<String>,
    kernel: Option<String>,
    initrd: Option<String>,
    kernel_package: Option<String>,
    extra: Option<String>,
}

impl QemuParams {
    fn of(params: &BTreeMap<String, Value>) -> QemuParams {
        // Defaults from PARAMS (the one place they are written).
        let params = &crate::env::launch::with_defaults(PARAMS, params);
        let text =
            |k: &str| params.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
        let num = |k: &str| params.get(k).and_then(Value::as_u64).unwrap_or_default();
        QemuParams {
            accel: text("accel").unwrap_or_default(),
            machine: text("machine").unwrap_or_default(),
            vcpus: num("vcpus") as u32,
            memory: num("memory"),
            nic: text("nic").unwrap_or_default(),
            disk: text("disk").filter(|d| d != "none"),
            cache: text("cache").unwrap_or_default(),
            disk_size: num("disk_size"),
            pin: text("pin"),
            binary: text("binary").unwrap_or_else(|| BINARY.to_string()),
            qemu_args: text("qemu_args"),
            kernel: text("kernel"),
            initrd: text("initrd"),
            kernel_package: text("kernel_package"),
            extra: text("extra"),
        }
    }
}

fn image_spec(params: &BTreeMap<String, Value>) -> ImageSpec {
    let p = QemuParams::of(params);
    // The NIC's driver always: whether there is a lab is known only at launch; the bridge too
    // (a driver domain is this image with `vp.bridge`; ~300 KiB of modules, loaded only there).
    let mut drivers = drivers(&p.machine, Some(&p.nic), p.disk.as_deref());
    drivers.push("bridge");
    ImageSpec {
        kernel: match &p.kernel {
            Some(k) => KernelSource::File(PathBuf::from(k)),
            None => KernelSource::Debian(p.kernel_package.clone()),
        },
        extra: p
            .extra
            .as_deref()
            .map(|e| e.split(['+', ' ', ',']).filter(|s| !s.is_empty()).map(String::from).collect())
            .unwrap_or_default(),
        drivers: drivers.into_iter().map(String::from).collect(),
    }
}

/// Images built by this process, by spec (building means hashing the agent: once per run).
static IMAGES: Mutex<Vec<(ImageSpec, Image)>> = Mutex::new(Vec::new());

pub(crate) fn image_for(params: &BTreeMap<String, Value>) -> Result<Image, image::ImageError> {
    let spec = image_spec(params);
    if let Ok(cache) = IMAGES.lock() {
        if let Some((_, i)) = cache.iter().find(|(s, _)| *s == spec) {
            return Ok(i.clone());
        }
    }
    let exe =
        std::env::current_exe().map_err(|e| image::ImageError::Io(PathBuf::from("/proc/self/exe"), e))?;
    let img = image::ensure(&spec, &exe, &image::cache_dir())?;
    if let Ok(mut cache) = IMAGES.lock() {
        cache.push((spec, img.clone()));
    }
    Ok(img)
}

/// Whether this QEMU has `-sandbox` (built with seccomp): its `-help` lists the option then.
/// Asked once per binary.
fn sandbox_supported(binary: &str) -> bool {
    static S: Mutex<BTreeMap<String, bool>> = Mutex::new(BTreeMap::new());
    if let Some(known) = S.lock().ok().and_then(|m| m.get(binary).copied()) {
        return known;
    }
    let has =
        crate::host::command::output_within(Command::new(binary).arg("-help"), crate::host::command::SHORT)
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("-sandbox"))
            .unwrap_or(false);
    if let Ok(mut m) = S.lock() {
        m.insert(binary.to_string(), has);
    }
    has
}

/// Pins each vCPU thread (`CPU n/TCG`, `CPU n/KVM`, named with debug-threads) of QEMU `pid`
/// to `cpus[n % len]`; returns how many were pinned.
pub fn pin_vcpus(pid: u32, cpus: &[usize]) -> Result<usize, String> {
    let mut pinned = 0;
    for t in
        std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| format!("QEMU's threads: {e}"))?.flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let Some(n) = vcpu_index(&comm) else { continue };
        let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cpu = cpus[n % cpus.len()];
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it (cpu was
        // checked against the host's CPUs); sched_setaffinity reads it for a thread of our child.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if rc != 0 {
            return Err(format!("pinning vCPU {n} to CPU {cpu}: {}", std::io::Error::last_os_error()));
        }
        pinned += 1;
    }
    Ok(pinned)
}

/// `CPU 3/TCG` → 3.
pub fn vcpu_index(comm: &str) -> Option<usize> {
    comm.trim().strip_prefix("CPU ")?.split('/').next()?.parse().ok()
}

impl Environment for Qemu {
    fn confinement(&self, params: &BTreeMap<String, Value>) -> String {
        if sandbox_supported(&QemuParams::of(params).binary) {
            "QEMU's seccomp filter, -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny (libvirt's default); the guest sees its image and its scratch disk only".into()
        } else {
            "none: this QEMU was built without seccomp (no -sandbox); the guest sees its image and its scratch disk only".into()
        }
    }
    /// virtperf's QEMU image: virtio NICs and the kernel's bridge module.
    fn bridges(&self) -> Result<(), String> {
        Ok(())
    }
    /// The machine type is a knob without words of its own: it is the environment's identity
    /// (its label says it), not a cost hidden in its figures.
    fn knob_table(&self) -> &'static [Knob] {
        &[
            Knob { name: "mitigations", values: &["off"] },
            Knob { name: "machine", values: &["pc", "microvm"] },
        ]
    }
    fn knobs(&self, params: &BTreeMap<String, Value>) -> Vec<String> {
        super::launch::knobs_set(
            params,
            &[("mitigations", "auto", |_| {
                "the guest kernel's CPU-vulnerability mitigations are off (its command line): it mitigates nothing for the CPU it sees (under TCG QEMU's emulated one, under KVM the host's); the host's own mitigations are untouched".into()
            })],
        )
    }
    /// `qemu` alone says which accelerator `auto` picks; this row says whether KVM itself works.
    fn doctor_variants(&self) -> &'static [(&'static str, &'static str)] {
        &[("accel", "kvm")]
    }
    fn serves_files(&self, params: &BTreeMap<String, Value>) -> Result<(), String> {
        // The image carries glusterd, its translators and their libraries (the workload's
        // programs); the bricks need the scratch disk.
        self.scratch(params)
            .map(|_| ())
            .map_err(|e| format!("its servers keep their bricks on a scratch disk: {}", e.message))
    }
    fn file_server_params(&self) -> (BTreeMap<String, Value>, &'static str) {
        (
            [("disk".to_string(), Value::from("virtio-blk"))].into(),
            " with a scratch disk (disk = \"virtio-blk\"…)",
        )
    }
    fn default_scratch_disk(&self) -> Option<&'static str> {
        Some("virtio-blk")
    }
    fn carries_programs(&self) -> bool {
        true
    }
    fn kind(&self) -> &'static str {
        "qemu"
    }
    fn summary(&self) -> &'static str {
        "QEMU virtual machine (KVM or TCG) booting a Debian kernel and virtperf's initramfs; virtio, e1000 or rtl8139 NIC"
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
        Some(("memory", QemuParams::of(params).memory))
    }
    fn scratch(&self, params: &BTreeMap<String, Value>) -> Result<String, ParamError> {
        let p = QemuParams::of(params);
        match &p.disk {
            None => Err(ParamError::new(
                "disk",
                "this QEMU guest has no scratch disk (disk = none): give it one, disk = virtio-blk, ide, sata or nvme",
            )),
            Some(model) => Ok(disk_what(
                &p.machine,
                model,
                &p.cache,
                &format!("on {}", super::scratch::root_description()),
            )),
        }
    }
    fn disk_bytes(&self, params: &BTreeMap<String, Value>) -> Option<(&'static str, u64)> {
        let p = QemuParams::of(params);
        p.disk.is_some().then_some(("disk_size", p.disk_size))
    }
    fn check(&self, params: &BTreeMap<String, Value>) -> Result<(), ParamError> {
        let p = QemuParams::of(params);
        let (machine, nic, disk) = (p.machine.as_str(), p.nic.as_str(), p.disk.as_deref().unwrap_or("none"));
        if is_mmio(machine) && nic != "virtio" {
            return Err(ParamError::new(
                "nic",
                format!("machine=microvm has no PCI bus, so no {nic}: use nic=virtio, or machine=q35"),
            ));
        }
        if is_mmio(machine) && !["none", "virtio-blk"].contains(&disk) {
            return Err(ParamError::new(
                "disk",
                format!("machine=microvm has no PCI bus, so no {disk} controller: use disk=virtio-blk, or machine=q35"),
            ));
        }
        if p.initrd.is_some() && p.kernel.is_none() {
            return Err(ParamError::new(
                "initrd",
                "initrd= needs kernel= too (your kernel and your initramfs)",
            ));
        }
        if p.kernel.is_some() && p.kernel_package.is_some() {
            return Err(ParamError::new("kernel_package", "give kernel= or kernel_package=, not both"));
        }
        if p.binary.contains('/') && !Path::new(&p.binary).is_file() {
            return Err(ParamError::new("binary", format!("{} does not exist or is not a file", p.binary)));
        }
        for (k, path) in [("kernel", &p.kernel), ("initrd", &p.initrd)] {
            if let Some(path) = path {
                if !Path::new(path).is_file() {
                    return Err(ParamError::new(k, format!("{path} does not exist or is not a file")));
                }
            }
        }
        if let Some(pin) = &p.pin {
            crate::host::check_cpuset(pin).map_err(|e| ParamError::new("pin", e))?;
        }
        if let Some(q) = &p.qemu_args {
            if shlex::split(q).is_none() {
                return Err(ParamError::new("qemu_args", format!("`{q}` has an unbalanced quote")));
            }
        }
        Ok(())
    }
    fn availability(&self, params: &BTreeMap<String, Value>) -> Availability {
        let p = QemuParams::of(params);
        if p.binary != BINARY && crate::host::which(&p.binary).is_none() {
            return Availability::no(
                format!("binary={} is not an executable file (nor a program on PATH)", p.binary),
                "give the path of a qemu-system-x86_64 you built, or leave binary= out for Debian's",
            );
        }
        if crate::host::which(&p.binary).is_none() {
            return Availability::no(
                format!("{BINARY} is not installed"),
                "apt-get install -y qemu-system-x86   (or: make deps)",
            );
        }
        if p.initrd.is_none() {
            if let Err(e) = image::find_busybox() {
                return Availability::no(
                    format!("the guest image needs a static busybox: {e}"),
                    "apt-get install -y busybox-static   (or: make deps)",
                );
            }
            if p.kernel.is_none() && crate::host::which("apt-get").is_none() {
                return Availability::no(
                    "the guest kernel comes from Debian's linux-image package, and apt-get is not here",
                    "give kernel=PATH (and initrd=PATH)",
                );
            }
        }
        if p.disk.is_some() && super::scratch::mke2fs().is_none() {
            return Availability::no(
                "a scratch disk is formatted on the host with mke2fs, which is not installed",
                "apt-get install -y e2fsprogs   (or: make deps)",
            );
        }
        match decide_accel(&p.accel, &KvmFacts::probe(), p.kernel.is_some()) {
            Ok((accel, _)) if accel == Accel::Tcg && is_mmio(&p.machine) && host_tsc_khz().is_none() => {
                Availability::no(
                    "machine=microvm under TCG needs the host's TSC frequency (microvm has no HPET or PM timer to calibrate against), and this host's TSC is not invariant (no constant_tsc/nonstop_tsc): the guest's clock would be wrong",
                    "use machine=q35 (or pc)",
                )
            }
            Ok((_, why)) => {
                Availability::yes(format!("{} found; {why}", runtime_version(&p.binary).unwrap_or_default()))
            }
            Err((why, fix)) => Availability::no(why, fix),
        }
    }
    fn prepare(&self, params: &BTreeMap<String, Value>) -> Result<(), String> {
        if QemuParams::of(params).initrd.is_some() {
            return Ok(());
        }
        image_for(params).map(|_| ()).map_err(|e| format!("the guest image: {e}"))
    }
    fn runtime_version(&self, params: &BTreeMap<String, Value>) -> Option<String> {
        let p = QemuParams::of(params);
        let mut v = runtime_version(&p.binary)?;
        if p.binary != BINARY {
            let _ = write!(v, " ({})", p.binary);
        }
        if let Ok((accel, why)) = decide_accel(&p.accel, &KvmFacts::probe(), p.kernel.is_some()) {
            let _ = write!(v, "; accel {} ({why})", accel.as_str());
        }
        if p.initrd.is_none() {
            if let Ok(img) = image_for(params) {
                let _ = write!(
                    v,
                    "; kernel {} (release {}); image {}",
                    img.kernel_source, img.kernel_release, img.hash
                );
            }
        }
        Some(v)
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError> {
        self.availability(params).require()?;
        // Parsed before anything is created, so that an error here leaves nothing behind.
        let p = QemuParams::of(params);
        let pin =
            p.pin.as_deref().map(crate::host::check_cpuset).transpose().map_err(LaunchError::Prepare)?;
        let (accel, _) = decide_accel(&p.accel, &KvmFacts::probe(), p.kernel.is_some())
            .map_err(|(w, f)| LaunchError::Unavailable(format!("{w}; fix: {f}")))?;
        let machine = p.machine.clone();
        let nic_model = p.nic.clone();
        let disk_model = p.disk.clone().unwrap_or_else(|| "none".into());
        let (kernel, initrd, mods) = match &p.initrd {
            Some(i) => (PathBuf::from(p.kernel.clone().unwrap_or_default()), PathBuf::from(i), Vec::new()),
            None => {
                let img =
                    image_for(params).map_err(|e| LaunchError::Prepare(format!("the guest image: {e}")))?;
                let mut wanted = drivers(
                    &machine,
                    (ctx.guest_net.is_some() || ctx.bridge.is_some()).then_some(nic_model.as_str()),
                    (disk_model != "none").then_some(disk_model.as_str()),
                );
                if ctx.bridge.is_some() {
                    wanted.push("bridge");
                }
                let mods = img.load_order(&wanted).map_err(|e| LaunchError::Prepare(e.to_string()))?;
                (img.vmlinux.clone(), img.initramfs.clone(), mods)
            }
        };
        let dir = ctx.run_dir.join(format!("qemu-{}", ctx.instance_id));
        ctx.ledger.create_dir(&dir).map_err(|e| LaunchError::Prepare(format!("{}: {e}", dir.display())))?;
        let mut teardown = GuestTeardown { cgroup: None, dir: dir.clone() };
        let cache = p.cache.clone();
        let (disk, scratch) = if disk_model == "none" {
            (None, None)
        } else {
            let (path, image) = match super::scratch::guest_image(ctx, p.disk_size) {
                Ok(x) => x,
                Err(e) => {
                    teardown.teardown(ctx.ledger);
                    return Err(e);
                }
            };
            let what = disk_what(&machine, &disk_model, &cache, &image);
            (
                Some(Disk { model: disk_model.clone(), cache: cache.clone(), path }),
                Some(super::launch::Scratch { dir: super::scratch::GUEST_DIR.into(), what }),
            )
        };
        let cfg = Config {
            name: ctx.instance_id.clone(),
            accel,
            machine: machine.clone(),
            vcpus: p.vcpus,
            memory_mib: p.memory >> 20,
            kernel,
            initrd,
            append: kernel_append(
                &mods,
                ctx.guest_net.as_ref(),
                Some(
                    [
                        machine_append(&machine, accel, host_tsc_khz()),
                        mitigations_arg(params).map(String::from),
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" "),
                )
                .filter(|e| !e.is_empty())
                .as_deref(),
                disk.as_ref().map(|d| guest_disk_dev(&d.model)),
                ctx.bridge.as_ref(),
            ),
            nics: match &ctx.bridge {
                Some(b) => b
                    .taps
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (nic_model.clone(), t.clone(), bridge_mac(i)))
                    .collect(),
                None => ctx
                    .guest_net
                    .iter()
                    .map(|n| (nic_model.clone(), n.tap.clone(), mac_for(n.addr)))
                    .collect(),
            },
            disk,
            sandbox: sandbox_supported(&p.binary),
            extra: p.qemu_args.as_deref().and_then(shlex::split).unwrap_or_default(),
        };
        let mut cmd = Command::new(&p.binary);
        cmd.args(command_line(&cfg)).current_dir(&dir);
        // The console log lives in the instance's directory while it runs (bounded: rotated).
        let log = Some(dir.join("console.log"));
        let limits = super::cgroup::Limits {
            memory_bytes: Some((cfg.memory_mib << 20) + QEMU_MEMORY_OVERHEAD),
            cpu_cap: ctx.bridge.as_ref().and_then(|b| b.cpu_cap),
        };
        let mut inst = super::launch::launch_guest(ctx, cmd, "qemu", log, limits, teardown, true)?;
        inst.scratch = scratch;
        if let Some(cpus) = pin {
            let qemu_pid = inst.child.as_ref().map_or(0, |c| c.id());
            if let Err(e) = pin_vcpus(qemu_pid, &cpus) {
                inst.kill(ctx.ledger);
                return Err(LaunchError::Prepare(e));
            }
        }
        Ok(inst)
    }
}

fn runtime_version(binary: &str) -> Option<String> {
    crate::host::version_of(binary).map(|v| v.replace(" emulator", ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_left_out_take_the_schema_defaults() {
        let p = QemuParams::of(&BTreeMap::new());
        assert_eq!((p.accel.as_str(), p.machine.as_str(), p.nic.as_str()), ("auto", "q35", "virtio"));
        assert_eq!((p.vcpus, p.memory, p.disk_size), (1, 512 << 20, 256 << 20));
        assert_eq!((p.cache.as_str(), p.disk.as_deref()), ("writeback", None));
        let given: BTreeMap<String, Value> = [("vcpus".to_string(), Value::from(2))].into();
        assert_eq!(QemuParams::of(&given).vcpus, 2, "a given value wins");
    }

    fn facts(dev: bool, pvm: bool, hw: bool) -> KvmFacts {
        KvmFacts { dev: if dev { Ok(()) } else { Err("/dev/kvm: No such file".into()) }, pvm, hw }
    }

    #[test]
    fn accel_auto_takes_kvm_only_when_it_runs_a_stock_guest() {
        assert_eq!(decide_accel("auto", &facts(true, false, true), false).unwrap().0, Accel::Kvm);
        let (a, why) = decide_accel("auto", &facts(true, true, false), false).unwrap();
        assert_eq!(a, Accel::Tcg);
        assert!(why.contains("PVM"), "{why}");
        let (a, why) = decide_accel("auto", &facts(false, false, true), false).unwrap();
        assert_eq!((a, why.contains("no usable KVM")), (Accel::Tcg, true));
        assert_eq!(decide_accel("auto", &facts(true, false, false), false).unwrap().0, Accel::Tcg);
        assert_eq!(decide_accel("tcg", &facts(true, false, true), false).unwrap().0, Accel::Tcg);
    }

    #[test]
    fn accel_kvm_on_pvm_is_refused_unless_the_kernel_is_the_users() {
        let (why, fix) = decide_accel("kvm", &facts(true, true, false), false).unwrap_err();
        assert!(why.contains("PVM") && fix.contains("accel=tcg"), "{why} / {fix}");
        assert_eq!(decide_accel("kvm", &facts(true, true, false), true).unwrap().0, Accel::Kvm);
        assert!(decide_accel("kvm", &facts(false, false, false), false)
            .unwrap_err()
            .0
            .contains("No such file"));
        assert_eq!(decide_accel("kvm", &facts(true, false, true), false).unwrap().0, Accel::Kvm);
    }

    fn cfg(accel: Accel, machine: &str, nic: &str, disk: Option<&str>) -> Config {
        Config {
            name: "vp1-0-0".into(),
            accel,
            machine: machine.into(),
            vcpus: 2,
            memory_mib: 512,
            kernel: "/c/vmlinux".into(),
            initrd: "/c/initramfs.cpio".into(),
            append: "console=ttyS0".into(),
            nics: vec![(nic.into(), "tap0".into(), "52:54:00:12:00:0b".into())],
            disk: disk.map(|m| Disk { model: m.into(), cache: "none".into(), path: "/r/d.img".into() }),
            sandbox: true,
            extra: vec!["-S".into()],
        }
    }

    fn has_pair(a: &[String], k: &str, v: &str) -> bool {
        a.windows(2).any(|w| w[0] == k && w[1] == v)
    }

    #[test]
    fn kvm_command_line() {
        let a = command_line(&cfg(Accel::Kvm, "q35", "virtio", Some("virtio-blk")));
        assert!(has_pair(&a, "-accel", "kvm") && has_pair(&a, "-cpu", "host"));
        assert!(has_pair(&a, "-machine", "q35") && has_pair(&a, "-smp", "2") && has_pair(&a, "-m", "512M"));
        assert!(a.contains(&"-nodefaults".to_string()) && has_pair(&a, "-sandbox", cmdline::SANDBOX));
        assert!(has_pair(&a, "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:00:0b"));
        assert!(has_pair(&a, "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no"));
        assert!(has_pair(&a, "-device", "virtio-blk-pci,drive=d0"));
        assert!(has_pair(&a, "-drive", "if=none,id=d0,file=/r/d.img,format=raw,cache=none"));
        assert!(!a.iter().any(|x| x.contains("user") && x.starts_with("user")), "no user-mode network");
        assert_eq!(a.last().map(String::as_str), Some("-S"), "extra arguments come last");
    }

    #[test]
    fn tcg_command_lines_per_device_model() {
        let a = command_line(&cfg(Accel::Tcg, "pc", "e1000", Some("ide")));
        assert!(has_pair(&a, "-accel", "tcg") && !a.contains(&"-cpu".to_string()));
        assert!(has_pair(&a, "-device", "e1000,netdev=n0,mac=52:54:00:12:00:0b"));
        assert!(has_pair(&a, "-device", "ide-hd,drive=d0"));
        let m = command_line(&cfg(Accel::Tcg, "microvm", "virtio", None));
        assert!(has_pair(&m, "-device", "virtio-net-device,netdev=n0,mac=52:54:00:12:00:0b"));
        assert!(has_pair(&m, "-device", "virtio-serial-device,id=vser"));
        let r = command_line(&cfg(Accel::Tcg, "q35", "rtl8139", None));
        assert!(has_pair(&r, "-device", "rtl8139,netdev=n0,mac=52:54:00:12:00:0b"));
        // Control channel and kernel console are separate chardevs.
        assert!(has_pair(&r, "-chardev", "stdio,id=ctl,signal=off"));
        assert!(has_pair(&r, "-serial", "chardev:con"));
        assert!(has_pair(&r, "-device", "virtconsole,chardev=ctl,bus=vser.0"));
    }

    #[test]
    fn drivers_and_append() {
        assert_eq!(drivers("q35", Some("virtio"), None), vec!["virtio_pci", "virtio_console", "virtio_net"]);
        assert_eq!(
            drivers("microvm", None, Some("virtio-blk")),
            vec!["virtio_mmio", "virtio_console", "virtio_blk", "crc32c_generic", "ext4"]
        );
        assert_eq!(
            drivers("pc", Some("rtl8139"), Some("ide")),
            vec!["virtio_pci", "virtio_console", "8139too", "ata_piix", "sd_mod", "crc32c_generic", "ext4"]
        );
        assert_eq!(drivers("q35", Some("e1000"), Some("ide"))[2..5], ["e1000", "ahci", "sd_mod"]);
        assert_eq!(drivers("q35", None, Some("nvme"))[2..], ["nvme", "crc32c_generic", "ext4"]);
        assert_eq!(drivers("pc", None, Some("sata"))[2..4], ["ahci", "sd_mod"]);
        let net = GuestNet { tap: "tap0".into(), addr: "198.18.0.11".parse().unwrap(), mtu: 9000 };
        let s = kernel_append(&["virtio".into(), "virtio_net".into()], Some(&net), None, None, None);
        assert!(s.contains("vp.mods=virtio,virtio_net") && s.contains("vp.addr=198.18.0.11/24 vp.mtu=9000"));
        // A driver domain: one NIC per tap, bridged in the guest, no address.
        let b = BridgeNet { taps: vec!["dd0".into(), "dd1".into(), "dd2".into()], mtu: 1500, cpu_cap: None };
        let s = kernel_append(&[], None, None, None, Some(&b));
        assert!(s.contains("vp.bridge=3 vp.mtu=1500") && !s.contains("vp.addr"), "{s}");
        let mut c = cfg(Accel::Tcg, "q35", "virtio", None);
        c.nics =
            b.taps.iter().enumerate().map(|(i, t)| ("virtio".into(), t.clone(), bridge_mac(i))).collect();
        let a = command_line(&c);
        for i in 0..3 {
            assert!(
                has_pair(&a, "-netdev", &format!("tap,id=n{i},ifname=dd{i},script=no,downscript=no")),
                "{a:?}"
            );
            assert!(
                has_pair(&a, "-device", &format!("virtio-net-pci,netdev=n{i},mac=52:54:01:00:00:0{i}")),
                "{a:?}"
            );
        }
        assert!(s.contains("console=ttyS0") && s.contains("vp.ctl=/dev/hvc0"));
        assert_eq!(mac_for("198.18.0.11".parse().unwrap()), "52:54:00:12:00:0b");
        assert_eq!(
            machine_append("microvm", Accel::Tcg, Some(2_994_374)).as_deref(),
            Some("tsc_early_khz=2994374")
        );
        assert_eq!(machine_append("microvm", Accel::Kvm, Some(1)), None, "KVM has kvmclock");
        assert_eq!(machine_append("q35", Accel::Tcg, Some(1)), None, "q35 has HPET and the PM timer");
        assert!(kernel_append(&[], None, Some("tsc_early_khz=1"), Some("/dev/vda"), None)
            .contains(" tsc_early_khz=1"));
        assert!(host_tsc_khz().is_none_or(|k| k > 100_000), "this host's TSC");
    }

    #[test]
    fn vcpu_thread_names() {
        assert_eq!(vcpu_index("CPU 0/TCG\n"), Some(0));
        assert_eq!(vcpu_index("CPU 12/KVM"), Some(12));
        assert_eq!(vcpu_index("qemu-system-x86"), None);
    }

    #[test]
    fn parameter_combinations_are_checked() {
        let p = |kv: &[(&str, &str)]| -> BTreeMap<String, Value> {
            kv.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect()
        };
        assert_eq!(Qemu.check(&p(&[("machine", "microvm"), ("nic", "e1000")])).unwrap_err().key, "nic");
        assert_eq!(Qemu.check(&p(&[("machine", "microvm"), ("disk", "ide")])).unwrap_err().key, "disk");
        assert_eq!(Qemu.check(&p(&[("initrd", "/x")])).unwrap_err().key, "initrd");
        assert_eq!(Qemu.check(&p(&[("kernel", "/nonexistent/k")])).unwrap_err().key, "kernel");
        assert_eq!(Qemu.check(&p(&[("pin", "99999")])).unwrap_err().key, "pin");
        assert_eq!(Qemu.check(&p(&[("qemu_args", "-append 'x")])).unwrap_err().key, "qemu_args");
        assert!(Qemu.check(&p(&[("machine", "q35"), ("nic", "e1000"), ("disk", "ide")])).is_ok());
        assert_eq!(Qemu.check(&p(&[("binary", "/no/such/qemu")])).unwrap_err().key, "binary");
    }

    #[test]
    fn another_binary_is_used_and_said_or_refused_with_the_fix() {
        let p =
            |b: &str| -> BTreeMap<String, Value> { [("binary".to_string(), Value::String(b.into()))].into() };
        assert_eq!(QemuParams::of(&BTreeMap::new()).binary, BINARY);
        assert_eq!(
            QemuParams::of(&p("/opt/qemu/bin/qemu-system-x86_64")).binary,
            "/opt/qemu/bin/qemu-system-x86_64"
        );
        let a = Qemu.availability(&p("qemu-of-nobody"));
        assert!(!a.usable && a.detail.contains("binary=qemu-of-nobody"), "{}", a.detail);
    }
}
