//! Guest images for the `qemu` environment: a kernel (Debian's, as an uncompressed ELF for PVH
//! boot) and an initramfs holding busybox, the virtperf binary itself as the agent (with its
//! shared libraries), the kernel modules of every device model, and optionally extra programs.
//!
//! An image is named by a content hash of its inputs and cached; it is rebuilt only when one
//! of them changes (`virtperf image build` shows what it used). Written by hand because it is
//! what makes a guest run the very same agent as the host; the archive format (`cpio`), the
//! package format (`dpkg-deb`, `tar`) and hashing (`sha2`) come from libraries and tools.

pub mod kernel;
pub mod uml;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sha2::{Digest, Sha256};

/// Bumped whenever the layout of the initramfs or the init script changes.
const BUILDER_VERSION: u32 = 3;

/// Modules of every device model the qemu environment offers (dependencies are added).
pub const DEVICE_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_mmio",
    "virtio_console",
    "virtio_net",
    "virtio_blk",
    "e1000",
    "8139too",
    "ata_piix",
    "ahci",
    "sd_mod",
    "nvme",
    // A driver domain bridges its NICs (`[lab] switch = "driver-domain"`).
    "bridge",
    // The scratch disk's file system (made on the host with mke2fs -t ext4); ext4 checksums its
    // metadata with crc32c, which the kernel would otherwise ask a modprobe the guest lacks for.
    "crc32c_generic",
    "ext4",
];

/// Busybox applets the init script and a debugging user need.
const APPLETS: &[&str] = &[
    "sh", "mount", "insmod", "ip", "cat", "echo", "mkdir", "ls", "sleep", "dmesg", "poweroff", "ln", "ps",
    "ifconfig", "rmdir", "df", "sync",
];

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// a tool or input is missing on the host: what to install
    #[error("{0}")]
    Missing(String),
    #[error("{0}")]
    Tool(String),
    #[error("{}: {1}", .0.display())]
    Io(PathBuf, std::io::Error),
}

/// Where the kernel comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelSource {
    /// A Debian package (None: what `linux-image-amd64` depends on).
    Debian(Option<String>),
    /// The user's own kernel (bzImage or ELF); modules are assumed built in.
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    pub kernel: KernelSource,
    /// Extra programs copied into the guest with their libraries (e.g. iperf3, fio).
    pub extra: Vec<String>,
    /// Drivers to include (their dependencies are added): only what the machine needs, so the
    /// initramfs the guest unpacks at every boot stays small.
    pub drivers: Vec<String>,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            kernel: KernelSource::Debian(None),
            extra: Vec::new(),
            drivers: DEVICE_MODULES.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A built image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Image {
    pub hash: String,
    pub dir: PathBuf,
    pub vmlinux: PathBuf,
    pub initramfs: PathBuf,
    /// `linux-image-6.1.0-56-amd64 6.1.192-2`, or the path of the user's kernel.
    pub kernel_source: String,
    pub kernel_release: String,
    /// Modules in the image, in a valid load order (dependencies first).
    pub modules: Vec<String>,
    #[serde(skip)]
    pub deps: std::collections::BTreeMap<String, Vec<String>>,
    /// Whether this call built it (false: found in the cache).
    pub built: bool,
    pub seconds: f64,
}

impl Image {
    /// The modules to load for `devices` (driver names), dependencies first, skipping those the
    /// image does not hold (a user's kernel has them built in).
    pub fn load_order(&self, devices: &[&str]) -> Result<Vec<String>, ImageError> {
        let wanted: Vec<&str> = devices.iter().copied().filter(|d| self.deps.contains_key(*d)).collect();
        kernel::load_order(&self.deps, &wanted)
    }
}

/// The cache: `$VIRTPERF_CACHE`, else `$XDG_CACHE_HOME/virtperf`, else `~/.cache/virtperf`,
/// else `/var/cache/virtperf`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VIRTPERF_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("virtperf");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache/virtperf");
    }
    PathBuf::from("/var/cache/virtperf")
}

/// Whether busybox at `path` is statically linked (no ELF interpreter).
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(data) = std::fs::read(path) else { return false };
    data.starts_with(b"\x7fELF") && !has_interp(&data)
}

fn has_interp(elf: &[u8]) -> bool {
    // 64-bit little-endian ELF: program headers at e_phoff (0x20), e_phentsize (0x36), e_phnum (0x38).
    if elf.len() < 0x40 || elf[4] != 2 {
        return false;
    }
    let u16at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let mut b = [0u8; 8];
    b.copy_from_slice(&elf[0x20..0x28]);
    let phoff = u64::from_le_bytes(b) as usize;
    let (size, n) = (u16at(0x36), u16at(0x38));
    (0..n).any(|i| {
        let o = phoff + i * size;
        elf.get(o..o + 4).is_some_and(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) == 3)
    })
}

/// The busybox to put in the guest: static (Debian's busybox-static installs /bin/busybox).
pub fn find_busybox() -> Result<PathBuf, ImageError> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = Path::new(p);
        if p.is_file() {
            if is_static_elf(p) {
                return Ok(p.to_path_buf());
            }
            return Err(ImageError::Missing(format!(
                "{} is linked dynamically; the guest needs a static one: apt-get install -y busybox-static",
                p.display()
            )));
        }
    }
    Err(ImageError::Missing("no busybox: apt-get install -y busybox-static   (or: make deps)".into()))
}

/// Shared libraries of `prog` (and the dynamic loader), as `ldd` resolves them.
pub fn shared_libraries(prog: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let data = std::fs::read(prog).map_err(|e| ImageError::Io(prog.to_path_buf(), e))?;
    if !has_interp(&data) {
        return Ok(Vec::new());
    }
    libraries_of(prog)
}

/// Shared libraries an ELF file needs, as `ldd` resolves them — a shared object too (a plug-in
/// has no loader of its own, so [`shared_libraries`] would take it for a static program).
fn libraries_of(so: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let out = Command::new("ldd").arg(so).stdin(Stdio::null()).output().map_err(|e| {
        ImageError::Missing(format!("ldd (libc-bin) is needed to find {}'s libraries: {e}", so.display()))
    })?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// Paths in `ldd` output: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and the
/// loader line `/lib64/ld-linux-x86-64.so.2 (0x...)`.
pub fn parse_ldd(s: &str) -> Vec<PathBuf> {
    s.lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = l.split_once("=>").map_or(l, |x| x.1).trim();
            let p = p.split_whitespace().next()?;
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

/// The init script of the guest (busybox sh). Its settings come on the kernel command line:
/// `vp.mods=a,b` modules to load in order, `vp.addr=A/24 vp.mtu=N` the NIC, `vp.bridge=N` a
/// driver domain's N NICs bridged together (no address), `vp.ctl=DEV` the
/// agent's line (a virtio console, kept free of kernel messages), `vp.disk=DEV` the scratch disk
/// (an ext4 file system made on the host), mounted at /scratch — or no /scratch at all when the
/// mount fails, so that a disk workload fails rather than measure the initramfs's tmpfs.
pub const INIT: &str = r#"#!/bin/sh
# virtperf guest init (generated by virtperf image build)
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o size=50% tmp /tmp
say() { echo "virtperf-init: $*" > /dev/console; }
say start
mods= addr= mtu=1500 ctl=/dev/hvc0 mmio= disk= bridge=0
for a in $(cat /proc/cmdline); do
  case "$a" in
    vp.mods=*) mods=${a#vp.mods=} ;;
    vp.bridge=*) bridge=${a#vp.bridge=} ;;
    vp.addr=*) addr=${a#vp.addr=} ;;
    vp.mtu=*) mtu=${a#vp.mtu=} ;;
    vp.ctl=*) ctl=${a#vp.ctl=} ;;
    vp.disk=*) disk=${a#vp.disk=} ;;
    virtio_mmio.device=*) mmio="$mmio device=${a#virtio_mmio.device=}" ;;
  esac
done
for m in $(echo "$mods" | tr , ' '); do
  if [ "$m" = virtio_mmio ]; then insmod /lib/modules/$m.ko $mmio || say "insmod $m failed"
  else insmod /lib/modules/$m.ko || say "insmod $m failed"; fi
done
ip link set lo up
if [ -n "$addr" ]; then
  i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
  ip link set eth0 mtu "$mtu" && ip addr add "$addr" dev eth0 && ip link set eth0 up || say "eth0 setup failed"
fi
if [ "$bridge" -gt 0 ]; then
  # A driver domain: every NIC a port of one bridge, no address of its own.
  brctl addbr br0 || say "brctl addbr failed"
  n=0; while [ $n -lt "$bridge" ]; do
    i=0; while [ ! -e /sys/class/net/eth$n ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
    ip link set eth$n mtu "$mtu" && ip link set eth$n up && brctl addif br0 eth$n || say "eth$n not bridged"
    n=$((n+1))
  done
  brctl setfd br0 0; brctl stp br0 off
  ip link set br0 mtu "$mtu"; ip link set br0 up || say "br0 setup failed"
fi
if [ -n "$disk" ]; then
  i=0; while [ ! -e "$disk" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
  mkdir -p /scratch
  mount -t ext4 "$disk" /scratch || { say "mount $disk failed"; rmdir /scratch; }
fi
i=0; while [ ! -e "$ctl" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
say "agent on $ctl"
exec /usr/bin/virtperf agent --tty "$ctl"
"#;

/// Hash of a file's bytes.
fn hash_file(h: &mut Sha256, p: &Path) -> Result<(), ImageError> {
    let mut f = std::fs::File::open(p).map_err(|e| ImageError::Io(p.to_path_buf(), e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| ImageError::Io(p.to_path_buf(), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(())
}

/// Builds the image for `spec` with `agent` as the guest's virtperf, or returns the cached one.
pub fn ensure(spec: &ImageSpec, agent: &Path, cache: &Path) -> Result<Image, ImageError> {
    let t0 = Instant::now();
    for d in [cache.to_path_buf(), cache.join("images")] {
        crate::host::ensure_private_dir(&d).map_err(|e| ImageError::Io(d.clone(), e))?;
    }
    let busybox = find_busybox()?;
    let (kernel_source, kern, vmlinux_src) = match &spec.kernel {
        KernelSource::Debian(name) => {
            let pkg = kernel::resolve(name.as_deref(), cache)?;
            let k = kernel::fetch(&pkg, cache)?;
            let v = k.vmlinux.clone();
            (format!("{} {}", pkg.name, pkg.version), Some(k), v)
        }
        KernelSource::File(p) => {
            if !p.is_file() {
                return Err(ImageError::Missing(format!("kernel {} does not exist", p.display())));
            }
            (p.display().to_string(), None, p.clone())
        }
    };
    let (extra, trees) = extra_inputs(&spec.extra)?;
    let modules = match &kern {
        Some(k) => k.load_order(&spec.drivers.iter().map(String::as_str).collect::<Vec<_>>())?,
        None => Vec::new(),
    };
    // The key: every input's content (the agent and the kernel by their bytes).
    let mut h = Sha256::new();
    h.update(format!("builder {BUILDER_VERSION}\n{INIT}\n{kernel_source}\n{modules:?}\n").as_bytes());
    hash_file(&mut h, agent)?;
    hash_file(&mut h, &busybox)?;
    for e in &extra {
        hash_file(&mut h, e)?;
    }
    for (name, f) in &trees {
        h.update(name.as_bytes());
        hash_file(&mut h, f)?;
    }
    if let KernelSource::File(p) = &spec.kernel {
        hash_file(&mut h, p)?;
    }
    let hash: String = h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let dir = cache.join("images").join(&hash);
    let release = kern.as_ref().map(|k| k.release.clone()).unwrap_or_else(|| "unknown (user kernel)".into());
    let deps = kern.as_ref().map(|k| k.deps.clone()).unwrap_or_default();
    let mut image = Image {
        hash,
        vmlinux: dir.join("vmlinux"),
        initramfs: dir.join("initramfs.cpio"),
        dir: dir.clone(),
        kernel_source,
        kernel_release: release,
        modules: modules.clone(),
        deps,
        built: false,
        seconds: 0.0,
    };
    if image.vmlinux.is_file() && image.initramfs.is_file() {
        // Its last use, for the pruning of the cache.
        let _ = std::fs::File::open(&dir).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        image.seconds = t0.elapsed().as_secs_f64();
        return Ok(image);
    }
    sweep_unfinished(&cache.join("images"));
    let tmp = cache.join("images").join(format!(".{}.{}", image.hash, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    crate::host::ensure_private_dir(&tmp).map_err(|e| ImageError::Io(tmp.clone(), e))?;
    let built = (|| {
        // The fetched kernel is already an ELF: share it (a hard link); a user's may be a bzImage.
        if kern.is_none() || std::fs::hard_link(&vmlinux_src, tmp.join("vmlinux")).is_err() {
            let bz = std::fs::read(&vmlinux_src).map_err(|e| ImageError::Io(vmlinux_src.clone(), e))?;
            let elf = kernel::extract_vmlinux(&bz)?;
            std::fs::write(tmp.join("vmlinux"), elf).map_err(|e| ImageError::Io(tmp.join("vmlinux"), e))?;
        }
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        files.push(("bin/busybox".into(), busybox.clone()));
        files.push(("usr/bin/virtperf".into(), strip_debug(agent, &tmp)?));
        for lib in shared_libraries(agent)? {
            files.push((rel(&lib), lib));
        }
        files.extend(extra_files(&extra, &trees)?);
        if let Some(k) = &kern {
            for m in &modules {
                files.push((format!("lib/modules/{m}.ko"), k.module_path(m)));
            }
        }
        files.sort();
        files.dedup_by(|a, b| a.0 == b.0);
        let out = tmp.join("initramfs.cpio");
        write_cpio(&out, &files)?;
        let meta = serde_json::json!({
            "hash": image.hash, "kernel": image.kernel_source, "release": image.kernel_release,
            "modules": modules, "agent": agent, "busybox": busybox, "extra": spec.extra,
        });
        std::fs::write(tmp.join("image.json"), serde_json::to_string_pretty(&meta).unwrap_or_default())
            .map_err(|e| ImageError::Io(tmp.join("image.json"), e))?;
        let _ = std::fs::remove_file(tmp.join("virtperf.stripped"));
        match std::fs::rename(&tmp, &dir) {
            Ok(()) => Ok(()),
            Err(_) if image.vmlinux.is_file() && image.initramfs.is_file() => Ok(()),
            Err(e) => Err(ImageError::Io(dir.clone(), e)),
        }
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    built?;
    prune(&cache.join("images"), KEEP_IMAGES, &image.hash);
    image.built = true;
    image.seconds = t0.elapsed().as_secs_f64();
    Ok(image)
}

/// Files kept where they are on the host: (path in the image, the file).
type Trees = Vec<(String, PathBuf)>;

/// The image's `extra` inputs: programs by name (found on the host's PATH), and absolute paths of
/// files or directories kept where they are on the host (a program's plug-ins, loaded with
/// dlopen: GlusterFS's translators) as (path in the image, file).
fn extra_inputs(extra: &[String]) -> Result<(Vec<PathBuf>, Trees), ImageError> {
    let (mut programs, mut trees) = (Vec::new(), Vec::new());
    for e in extra {
        if e.starts_with('/') {
            let p = Path::new(e);
            if !p.exists() {
                return Err(ImageError::Missing(format!(
                    "{e}, to be copied into the guest, does not exist on the host"
                )));
            }
            for f in files_below(p) {
                trees.push((rel(&f), f));
            }
        } else {
            programs.push(crate::host::which(e).ok_or_else(|| {
                ImageError::Missing(format!(
                    "extra program {e} is not installed on the host (apt-get install {e})"
                ))
            })?);
        }
    }
    Ok((programs, trees))
}

/// The image's files for its `extra` inputs: each program in /usr/bin and where it is on the
/// host (a daemon may exec another by its full path: glusterd starts /usr/sbin/glusterfsd), each
/// tree's files, and every ELF among them with its libraries.
fn extra_files(
    programs: &[PathBuf],
    trees: &[(String, PathBuf)],
) -> Result<Vec<(String, PathBuf)>, ImageError> {
    let mut files = Vec::new();
    for e in programs {
        let name = format!("usr/bin/{}", e.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
        if rel(e) != name {
            files.push((rel(e), e.clone()));
        }
        files.push((name, e.clone()));
        for lib in shared_libraries(e)? {
            files.push((rel(&lib), lib));
        }
    }
    for (name, f) in trees {
        files.push((name.clone(), f.clone()));
        if is_elf(f) {
            for lib in libraries_of(f)? {
                files.push((rel(&lib), lib));
            }
        }
    }
    Ok(files)
}

/// Removes what builds killed before they finished left in `dir`: the hidden working directories
/// (`.NAME.PID`, `.build-PID`, `.NAME.stale.PID`) of processes that no longer run. A build still
/// running (another virtperf) keeps its own.
pub(crate) fn sweep_unfinished(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            continue;
        }
        let pid = name.rsplit(['.', '-']).next().and_then(|p| p.parse::<i32>().ok());
        let gone = pid.filter(|p| *p > 0).is_some_and(|p| {
            // SAFETY: kill with signal 0 sends nothing; it only asks whether process p exists.
            let r = unsafe { libc::kill(p, 0) };
            r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        });
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Images kept in the cache whatever their age (each new virtperf build makes new ones: the
/// agent is an input; so does each machine/device combination).
const KEEP_IMAGES: usize = 6;
/// Older images than the newest [`KEEP_IMAGES`] are removed once unused for this long (a run
/// with many configurations must not lose the images it is using).
const PRUNE_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Removes images beyond the `keep` most recently used that have not been used for a day
/// (never `current`).
fn prune(images: &Path, keep: usize, current: &str) {
    let mut all: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(images)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    all.sort_by_key(|x| std::cmp::Reverse(x.0));
    for (t, p) in all.into_iter().skip(keep) {
        let stale = t.elapsed().is_ok_and(|age| age > PRUNE_AFTER);
        if stale && p.file_name().is_some_and(|n| n != current) {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// The files below `p` (itself when it is a file), symbolic links followed, in a stable order.
fn files_below(p: &Path) -> Vec<PathBuf> {
    if p.is_file() {
        return vec![p.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| e.path()).collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            out.extend(files_below(&e));
        } else if e.is_file() {
            out.push(e);
        }
    }
    out
}

fn is_elf(p: &Path) -> bool {
    let mut head = [0u8; 4];
    std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == b"\x7fELF"
}

fn rel(p: &Path) -> String {
    p.to_string_lossy().trim_start_matches('/').to_string()
}

/// A copy of the agent without debug sections and symbols (an eighth of the size: less for the
/// guest to unpack under emulation), or the agent itself when `objcopy` is not here.
fn strip_debug(agent: &Path, tmp: &Path) -> Result<PathBuf, ImageError> {
    let out = tmp.join("virtperf.stripped");
    let ok = crate::host::command::status_within(
        Command::new("objcopy").arg("--strip-all").arg(agent).arg(&out),
        crate::host::command::SHORT,
    )
    .is_ok_and(|s| s.success());
    Ok(if ok { out } else { agent.to_path_buf() })
}

/// Writes a newc archive: directories, device nodes, busybox applet links, `/init`, `files`.
fn write_cpio(out: &Path, files: &[(String, PathBuf)]) -> Result<(), ImageError> {
    let io = |e: std::io::Error| ImageError::Io(out.to_path_buf(), e);
    let f = std::fs::File::create(out).map_err(io)?;
    let mut w = std::io::BufWriter::new(f);
    let mut ino = 1u32;
    let mut entry = |w: &mut std::io::BufWriter<std::fs::File>,
                     name: &str,
                     mode: u32,
                     data: &[u8],
                     rdev: (u32, u32)|
     -> std::io::Result<()> {
        ino += 1;
        let size =
            u32::try_from(data.len()).map_err(|_| std::io::Error::other(format!("{name} is over 4 GiB")))?;
        let mut e = cpio::newc::Builder::new(name)
            .ino(ino)
            .mode(mode)
            .nlink(1)
            .rdev_major(rdev.0)
            .rdev_minor(rdev.1)
            .write(&mut *w, size);
        e.write_all(data)?;
        e.finish()?;
        Ok(())
    };
    let mut dirs: Vec<String> = [
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "etc",
        "root",
        "bin",
        "usr",
        "usr/bin",
        "lib",
        "lib/modules",
        "var",
        "var/tmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (name, _) in files {
        let mut p = Path::new(name).parent();
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            dirs.push(d.to_string_lossy().into_owned());
            p = d.parent();
        }
    }
    dirs.sort();
    dirs.dedup();
    for d in &dirs {
        entry(&mut w, d, 0o040755, &[], (0, 0)).map_err(io)?;
    }
    entry(&mut w, "dev/console", 0o020600, &[], (5, 1)).map_err(io)?;
    entry(&mut w, "dev/null", 0o020666, &[], (1, 3)).map_err(io)?;
    entry(&mut w, "init", 0o100755, INIT.as_bytes(), (0, 0)).map_err(io)?;
    for a in APPLETS {
        entry(&mut w, &format!("bin/{a}"), 0o120777, b"busybox", (0, 0)).map_err(io)?;
    }
    entry(&mut w, "bin/tr", 0o120777, b"busybox", (0, 0)).map_err(io)?;
    for (name, src) in files {
        let data = std::fs::read(src).map_err(|e| ImageError::Io(src.clone(), e))?;
        entry(&mut w, name, 0o100755, &data, (0, 0)).map_err(io)?;
    }
    cpio::newc::trailer(&mut w).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {

    /// A build killed with -9 leaves its hidden working directory; the next build removes it,
    /// and leaves one whose process still runs (another virtperf building the same image).
    #[test]
    fn unfinished_builds_of_dead_processes_are_swept() {
        let d = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let dead = {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            c.wait().unwrap();
            c.id()
        };
        let names = [
            format!(".abc123.{dead}"),
            format!(".build-{dead}"),
            format!(".k_1.stale.{dead}"),
            format!(".abc123.{}", child.id()),
            "abc123".to_string(),
            ".hidden-no-pid".to_string(),
        ];
        for n in &names {
            std::fs::create_dir(d.path().join(n)).unwrap();
            std::fs::write(d.path().join(n).join("part"), b"x").unwrap();
        }
        sweep_unfinished(d.path());
        let left: std::collections::BTreeSet<String> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        let want: std::collections::BTreeSet<String> =
            [names[3].clone(), names[4].clone(), names[5].clone()].into_iter().collect();
        assert_eq!(left, want);
    }
    use super::*;

    #[test]
    fn ldd_lines() {
        let s = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x7f)\n\
                 \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        assert_eq!(
            parse_ldd(s),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn static_and_dynamic_elves() {
        // /bin/sh on Debian is dynamic; the test binary itself is too.
        let me = std::env::current_exe().unwrap();
        assert!(!is_static_elf(&me));
        assert!(!shared_libraries(&me).unwrap().is_empty());
        assert!(!is_static_elf(Path::new("/nonexistent")));
    }

    #[test]
    fn init_reads_its_settings_from_the_command_line() {
        for k in ["vp.mods=", "vp.addr=", "vp.mtu=", "vp.ctl=", "vp.disk=", "virtio_mmio.device="] {
            assert!(INIT.contains(k), "{k}");
        }
        assert!(INIT.contains("exec /usr/bin/virtperf agent --tty"));
    }

    #[test]
    fn cpio_archive_is_newc_with_init_and_nodes() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("x");
        std::fs::write(&src, b"hello").unwrap();
        let out = d.path().join("a.cpio");
        write_cpio(&out, &[("usr/lib/deep/x".into(), src)]).unwrap();
        let data = std::fs::read(&out).unwrap();
        assert!(data.starts_with(b"070701"));
        let mut names = Vec::new();
        let mut r = std::io::Cursor::new(data);
        loop {
            let e = cpio::newc::Reader::new(&mut r).unwrap();
            if e.entry().is_trailer() {
                break;
            }
            names.push(e.entry().name().to_string());
            e.finish().unwrap();
        }
        for n in ["init", "dev/console", "bin/sh", "usr/lib/deep", "usr/lib/deep/x"] {
            assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
        }
        let lib = names.iter().position(|n| n == "usr/lib/deep").unwrap();
        assert!(lib < names.iter().position(|n| n == "usr/lib/deep/x").unwrap(), "directories come first");
    }
}
