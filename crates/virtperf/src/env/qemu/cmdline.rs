//! QEMU's command line from a typed [`Config`]: machine, CPUs, memory, PVH kernel and initramfs,
//! the console on a virtio port, the NIC on the lab's tap, the scratch disk and its cache mode.

use super::*;

/// A disk of the guest.
#[derive(Debug, Clone, PartialEq)]
pub struct Disk {
    pub model: String,
    pub cache: String,
    pub path: PathBuf,
}

/// Everything the QEMU command line depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub name: String,
    pub accel: Accel,
    pub machine: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub append: String,
    /// Each NIC: its model and the tap it is attached to, with its MAC (a driver domain has one
    /// per endpoint).
    pub nics: Vec<(String, String, String)>,
    pub disk: Option<Disk>,
    pub sandbox: bool,
    pub extra: Vec<String>,
}

pub(crate) fn is_mmio(machine: &str) -> bool {
    machine == "microvm"
}

/// Kernel modules (driver names) the configuration's devices need, transport first.
pub fn drivers(machine: &str, nic: Option<&str>, disk: Option<&str>) -> Vec<&'static str> {
    let mut d = vec![if is_mmio(machine) { "virtio_mmio" } else { "virtio_pci" }, "virtio_console"];
    match nic {
        Some("virtio") => d.push("virtio_net"),
        Some("e1000") => d.push("e1000"),
        Some("rtl8139") => d.push("8139too"),
        _ => {}
    }
    match disk {
        Some("virtio-blk") => d.push("virtio_blk"),
        Some("ide") => d.extend([if machine == "pc" { "ata_piix" } else { "ahci" }, "sd_mod"]),
        Some("sata") => d.extend(["ahci", "sd_mod"]),
        Some("nvme") => d.push("nvme"),
        _ => {}
    }
    if disk.is_some() {
        d.extend(["crc32c_generic", "ext4"]);
    }
    d
}

/// The scratch disk's device node in the guest.
pub fn guest_disk_dev(model: &str) -> &'static str {
    match model {
        "virtio-blk" => "/dev/vda",
        "nvme" => "/dev/nvme0n1",
        _ => "/dev/sda",
    }
}

/// What the guest's scratch disk is, for the trials' records.
pub fn disk_what(machine: &str, model: &str, cache: &str, image: &str) -> String {
    let dev = match (model, machine) {
        ("virtio-blk", _) => "virtio-blk",
        ("ide", "pc") => "IDE (PIIX)",
        ("ide", _) => "SATA (the q35's ICH9 AHCI)",
        ("sata", _) => "SATA (AHCI)",
        ("nvme", _) => "NVMe",
        _ => model,
    };
    format!("ext4 on {dev} {}: raw image {image}, host cache={cache}", guest_disk_dev(model))
}

/// QEMU's seccomp filter as libvirt applies it by default (qemu.conf `seccomp_sandbox = 1`): no
/// obsolete system calls, no setuid/setgid or capability changes, no fork or exec, no changes of
/// scheduling or resource limits. A guest that takes QEMU over is held to what a device model
/// needs.
pub const SANDBOX: &str = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// The QEMU command line (without the program name).
pub fn command_line(c: &Config) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
    let mmio = is_mmio(&c.machine);
    let virtio = |dev: &str| format!("{dev}-{}", if mmio { "device" } else { "pci" });
    push(&["-name", &format!("{},debug-threads=on", c.name)]);
    push(&["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
    if c.sandbox {
        push(&["-sandbox", SANDBOX]);
    }
    push(&["-machine", &c.machine]);
    push(&["-accel", c.accel.as_str()]);
    if c.accel == Accel::Kvm {
        push(&["-cpu", "host"]);
    }
    push(&["-smp", &c.vcpus.to_string(), "-m", &format!("{}M", c.memory_mib)]);
    push(&["-kernel", &c.kernel.to_string_lossy(), "-initrd", &c.initrd.to_string_lossy()]);
    push(&["-append", &c.append]);
    // Kernel console: the first serial port, written to QEMU's stderr.
    push(&["-chardev", "file,id=con,path=/dev/stderr", "-serial", "chardev:con"]);
    // The agent's line: a virtio console on QEMU's stdin/stdout.
    push(&["-chardev", "stdio,id=ctl,signal=off"]);
    push(&[
        "-device",
        &format!("{},id=vser", virtio("virtio-serial")),
        "-device",
        "virtconsole,chardev=ctl,bus=vser.0",
    ]);
    for (i, (model, tap, mac)) in c.nics.iter().enumerate() {
        push(&["-netdev", &format!("tap,id=n{i},ifname={tap},script=no,downscript=no")]);
        let dev = match model.as_str() {
            "virtio" => virtio("virtio-net"),
            other => other.to_string(),
        };
        push(&["-device", &format!("{dev},netdev=n{i},mac={mac}")]);
    }
    if let Some(d) = &c.disk {
        push(&["-drive", &format!("if=none,id=d0,file={},format=raw,cache={}", d.path.display(), d.cache)]);
        match d.model.as_str() {
            "ide" => push(&["-device", "ide-hd,drive=d0"]),
            "sata" => push(&["-device", "ahci,id=sata0", "-device", "ide-hd,drive=d0,bus=sata0.0"]),
            "nvme" => push(&["-device", "nvme,drive=d0,serial=vpscratch"]),
            _ => push(&["-device", &format!("{},drive=d0", virtio("virtio-blk"))]),
        }
    }
    a.extend(c.extra.iter().cloned());
    a
}

/// Kernel arguments a machine/accelerator pair needs. microvm has neither HPET nor ACPI PM
/// timer, and under TCG the PIT calibration of the TSC fails on a busy host, after which this
/// kernel waits forever for a timer it cannot calibrate: tell it the TSC's frequency instead.
pub fn machine_append(machine: &str, accel: Accel, tsc_khz: Option<u64>) -> Option<String> {
    let khz = tsc_khz.filter(|_| is_mmio(machine) && accel == Accel::Tcg)?;
    Some(format!("tsc_early_khz={khz}"))
}

/// The guest kernel's command line: console, modules to load, the NIC's address.
pub fn kernel_append(
    mods: &[String],
    net: Option<&GuestNet>,
    extra: Option<&str>,
    disk: Option<&str>,
    bridge: Option<&BridgeNet>,
) -> String {
    let mut s = String::from("console=ttyS0 quiet panic=-1 vp.ctl=/dev/hvc0");
    if let Some(d) = disk {
        let _ = write!(s, " vp.disk={d}");
    }
    if let Some(e) = extra {
        let _ = write!(s, " {e}");
    }
    if !mods.is_empty() {
        let _ = write!(s, " vp.mods={}", mods.join(","));
    }
    if let Some(n) = net {
        let _ = write!(s, " vp.addr={}/24 vp.mtu={}", n.addr, n.mtu);
    }
    if let Some(b) = bridge {
        let _ = write!(s, " vp.bridge={} vp.mtu={}", b.taps.len(), b.mtu);
    }
    s
}

/// The MAC of a driver domain's NIC `i` (locally administered, apart from the guests' own).
pub fn bridge_mac(i: usize) -> String {
    format!("52:54:01:00:00:{:02x}", i & 0xff)
}

/// A locally administered MAC derived from the guest's address (unique within a lab).
pub fn mac_for(addr: std::net::Ipv4Addr) -> String {
    let o = addr.octets();
    format!("52:54:00:{:02x}:{:02x}:{:02x}", o[1], o[2], o[3])
}
