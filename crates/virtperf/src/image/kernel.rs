//! The guest kernel: Debian's `linux-image-*-amd64` package, fetched with `apt-get download`
//! (never installed on the host), its uncompressed ELF (`vmlinux`, for a fast PVH boot) and the
//! kernel modules the guest's devices need, with their declared dependencies.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::ImageError;

/// The package `linux-image-amd64` stands for, unless the user names one.
pub const META_PACKAGE: &str = "linux-image-amd64";

/// Directories (below `lib/modules/RELEASE/kernel/`) whose modules are kept from the package:
/// every NIC, disk and console model the qemu environment offers, and what they depend on.
/// Keeping the whole tree would cost ~400 MB of cache for nothing.
const KEEP: &[&str] = &[
    "drivers/virtio/",
    "drivers/net/virtio_net.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/mii.ko",
    "drivers/net/ethernet/intel/e1000/",
    "drivers/net/ethernet/realtek/",
    "drivers/block/",
    "drivers/char/virtio_console.ko",
    "drivers/ata/",
    "drivers/scsi/",
    "drivers/nvme/host/",
    "fs/ext4/",
    "fs/jbd2/",
    "fs/mbcache.ko",
    "net/core/",
    // A driver domain's bridge (bridge.ko needs stp.ko and llc.ko).
    "net/bridge/",
    "net/802/",
    "net/llc/",
    "block/",
    "lib/",
    "crypto/",
    "arch/x86/crypto/",
];

/// Bumped whenever [`KEEP`] changes: a kernel directory kept under another version is fetched
/// again (it lacks modules the guest now needs).
const KEEP_VERSION: u32 = 3;

/// A Debian kernel package at one version.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    pub name: String,
    pub version: String,
}

impl Package {
    pub fn id(&self) -> String {
        format!("{}_{}", self.name, self.version)
    }
}

/// A package manager's command: minutes at most ([`crate::host::command::LONG`]).
fn run(cmd: &mut Command, what: &str) -> Result<String, ImageError> {
    crate::host::run_within(cmd, what, crate::host::command::LONG).map_err(ImageError::Tool)
}

/// The concrete package a meta package depends on (`Depends: linux-image-6.1.0-56-amd64`).
pub fn parse_depends(apt_cache_depends: &str) -> Option<String> {
    apt_cache_depends.lines().find_map(|l| {
        let dep = l.trim().strip_prefix("Depends:")?.trim();
        dep.starts_with("linux-image-").then(|| dep.trim_matches(|c| c == '<' || c == '>').to_string())
    })
}

/// `Version:` of an `apt-cache show` paragraph.
pub fn parse_version(apt_cache_show: &str) -> Option<String> {
    apt_cache_show.lines().find_map(|l| l.strip_prefix("Version:").map(|v| v.trim().to_string()))
}

/// A stamp of apt's package lists: the candidate of a package can only change when they do.
fn lists_stamp() -> Option<String> {
    let mut parts = Vec::new();
    for p in
        ["/var/lib/apt/lists", "/etc/apt/sources.list", "/etc/apt/sources.list.d", "/etc/apt/preferences.d"]
    {
        let m = std::fs::metadata(p).and_then(|m| m.modified()).ok();
        parts.push(format!("{p}:{:?}", m.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())));
    }
    Some(parts.join(";"))
}

/// [`resolve_uncached`], remembered in `cache/apt.json` until apt's lists change (apt-cache
/// takes about a second per question here; an unchanged image must be found in well under one).
pub fn resolve(name: Option<&str>, cache: &Path) -> Result<Package, ImageError> {
    let key = format!("{}|{}", name.unwrap_or(META_PACKAGE), lists_stamp().unwrap_or_default());
    let memo = cache.join("apt.json");
    let mut known: BTreeMap<String, (String, String)> =
        std::fs::read_to_string(&memo).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default();
    if let Some((n, v)) = known.get(&key) {
        return Ok(Package { name: n.clone(), version: v.clone() });
    }
    let pkg = resolve_uncached(name)?;
    known.retain(|k, _| !k.starts_with(&format!("{}|", name.unwrap_or(META_PACKAGE))));
    known.insert(key, (pkg.name.clone(), pkg.version.clone()));
    if crate::host::ensure_private_dir(cache).is_ok() {
        let _ = std::fs::write(&memo, serde_json::to_string(&known).unwrap_or_default());
    }
    Ok(pkg)
}

/// Resolves `name` (default: the meta package) to a concrete kernel package and version with
/// apt's lists, updating them once if they are empty (as root).
pub fn resolve_uncached(name: Option<&str>) -> Result<Package, ImageError> {
    if crate::host::which("apt-cache").is_none() {
        return Err(ImageError::Missing(
            "apt-cache is not here: the guest kernel comes from Debian's packages; give kernel=PATH and initrd=PATH instead".into(),
        ));
    }
    let mut name = name.unwrap_or(META_PACKAGE).to_string();
    let mut updated = false;
    for _ in 0..8 {
        let show =
            run(Command::new("apt-cache").args(["show", "--no-all-versions", &name]), "apt-cache show");
        match show {
            Ok(s) if !s.trim().is_empty() => {
                // A meta package (linux-image-amd64, linux-image-6.12-amd64) depends on the real one.
                let real = run(
                    Command::new("apt-cache").args(["depends", "--important", &name]),
                    "apt-cache depends",
                )
                .ok()
                .and_then(|d| parse_depends(&d));
                if let Some(real) = real.filter(|r| *r != name) {
                    name = real;
                    continue;
                }
                let version = parse_version(&s)
                    .ok_or_else(|| ImageError::Tool(format!("apt-cache show {name}: no Version line")))?;
                return Ok(Package { name, version });
            }
            _ if !updated && crate::host::is_root() => {
                eprintln!("virtperf: apt has no entry for {name}; running apt-get update once");
                run(Command::new("apt-get").args(["update", "-qq"]), "apt-get update")?;
                updated = true;
            }
            _ => {
                return Err(ImageError::Missing(format!(
                    "apt knows no package {name}: run `apt-get update` (as root), or give kernel=PATH"
                )))
            }
        }
    }
    Err(ImageError::Tool(format!("{name}: too many meta packages in a row")))
}

/// What is kept of a kernel package: `vmlinux`, the kept modules (flat, by module name) and
/// their dependencies (`depends=` of each module's `.modinfo`).
#[derive(Debug, Clone)]
pub struct Kernel {
    pub dir: PathBuf,
    pub release: String,
    pub vmlinux: PathBuf,
    pub deps: BTreeMap<String, Vec<String>>,
}

impl Kernel {
    pub fn module_path(&self, name: &str) -> PathBuf {
        self.dir.join("modules").join(format!("{name}.ko"))
    }

    /// `wanted` and everything they depend on, dependencies first, each once.
    pub fn load_order(&self, wanted: &[&str]) -> Result<Vec<String>, ImageError> {
        load_order(&self.deps, wanted)
    }

    /// Reads a kernel directory made by [`fetch`] (None when incomplete).
    pub fn open(dir: &Path) -> Option<Kernel> {
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("kernel.json")).ok()?).ok()?;
        if meta.get("keep").and_then(serde_json::Value::as_u64) != Some(u64::from(KEEP_VERSION)) {
            return None;
        }
        let release = meta.get("release")?.as_str()?.to_string();
        let deps = serde_json::from_value(meta.get("deps")?.clone()).ok()?;
        let vmlinux = dir.join("vmlinux");
        vmlinux.is_file().then(|| Kernel { dir: dir.to_path_buf(), release, vmlinux, deps })
    }
}

/// Dependencies first (depth-first post-order), each module once; a module the map does not
/// know is an error naming who needs it.
pub fn load_order(deps: &BTreeMap<String, Vec<String>>, wanted: &[&str]) -> Result<Vec<String>, ImageError> {
    fn visit(
        deps: &BTreeMap<String, Vec<String>>,
        m: &str,
        from: &str,
        out: &mut Vec<String>,
        stack: &mut Vec<String>,
    ) -> Result<(), ImageError> {
        if out.iter().any(|o| o == m) || stack.iter().any(|s| s == m) {
            return Ok(());
        }
        let Some(ds) = deps.get(m) else {
            return Err(ImageError::Tool(format!(
                "kernel module {m} (needed by {from}) is not among the modules kept from the package (image/kernel.rs KEEP)"
            )));
        };
        stack.push(m.to_string());
        for d in ds {
            visit(deps, d, m, out, stack)?;
        }
        stack.pop();
        out.push(m.to_string());
        Ok(())
    }
    let mut out = Vec::new();
    for w in wanted {
        visit(deps, w, "the guest's devices", &mut out, &mut Vec::new())?;
    }
    Ok(out)
}

/// The `depends=` list of a module's `.modinfo` (NUL-separated `key=value` strings).
pub fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    // The .modinfo strings are NUL-terminated; `depends=` occurs once, at the start of one.
    let needle = b"\0depends=";
    let Some(i) = ko.windows(needle.len()).position(|w| w == needle) else { return Vec::new() };
    let rest = &ko[i + needle.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace('-', "_"))
        .collect()
}

/// Module name as the kernel knows it (`8139too`, `crc_t10dif`): file stem with `-` → `_`.
fn module_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    Some(file.strip_suffix(".ko")?.replace('-', "_"))
}

/// The uncompressed ELF inside a bzImage: the payload at `setup_sects` + `payload_offset`
/// (boot protocol ≥ 2.08), decompressed with the matching tool (xz for Debian's kernels).
pub fn extract_vmlinux(bzimage: &[u8]) -> Result<Vec<u8>, ImageError> {
    if bzimage.starts_with(b"\x7fELF") {
        return Ok(bzimage.to_vec());
    }
    let bad = |why: &str| ImageError::Tool(format!("not a bzImage kernel: {why}"));
    if bzimage.len() < 0x250 || &bzimage[0x202..0x206] != b"HdrS" {
        return Err(bad("no HdrS header"));
    }
    let version = u16::from_le_bytes([bzimage[0x206], bzimage[0x207]]);
    if version < 0x208 {
        return Err(bad("boot protocol older than 2.08 has no payload offset"));
    }
    let setup_sects = match bzimage[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let rd =
        |o: usize| u32::from_le_bytes([bzimage[o], bzimage[o + 1], bzimage[o + 2], bzimage[o + 3]]) as usize;
    let start = (setup_sects + 1) * 512 + rd(0x248);
    let len = rd(0x24c);
    let payload = bzimage.get(start..start + len).ok_or_else(|| bad("payload outside the file"))?;
    let (tool, args): (&str, &[&str]) = if payload.starts_with(b"\xfd7zXZ\0") {
        ("xz", &["-dc", "--single-stream"])
    } else if payload.starts_with(b"\x1f\x8b") {
        ("gzip", &["-dc"])
    } else if payload.starts_with(b"\x28\xb5\x2f\xfd") {
        ("zstd", &["-dc"])
    } else {
        return Err(bad("payload compression is not xz, gzip or zstd"));
    };
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            ImageError::Missing(format!(
                "{tool} is needed to unpack the kernel ({e}): apt-get install {tool}"
            ))
        })?;
    let mut stdin = child.stdin.take().ok_or_else(|| bad("no pipe"))?;
    let data = payload.to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        // Trailing bytes after the stream (the appended size) make some tools stop early: fine.
        let _ = stdin.write_all(&data);
    });
    let mut out = Vec::new();
    if let Some(mut so) = child.stdout.take() {
        so.read_to_end(&mut out).map_err(|e| ImageError::Tool(format!("{tool}: {e}")))?;
    }
    let _ = child.wait();
    let _ = writer.join();
    if !out.starts_with(b"\x7fELF") {
        return Err(ImageError::Tool(format!(
            "{tool} did not produce an ELF kernel from the bzImage payload"
        )));
    }
    Ok(out)
}

/// Downloads `pkg` (cached in `cache/debs`) and keeps its vmlinux and modules in
/// `cache/kernels/NAME_VERSION`. Returns the existing directory when it is complete.
pub fn fetch(pkg: &Package, cache: &Path) -> Result<Kernel, ImageError> {
    let dir = cache.join("kernels").join(pkg.id());
    if let Some(k) = Kernel::open(&dir) {
        return Ok(k);
    }
    let debs = cache.join("debs");
    crate::host::ensure_private_dir(&debs).map_err(|e| ImageError::Io(debs.clone(), e))?;
    let deb = download(pkg, &debs, "guest kernel, not installed on the host")?;
    super::sweep_unfinished(&cache.join("kernels"));
    let tmp = cache.join("kernels").join(format!(".{}.{}", pkg.id(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    crate::host::ensure_private_dir(&tmp.join("modules")).map_err(|e| ImageError::Io(tmp.clone(), e))?;
    let result = unpack(&deb, &tmp).and_then(|(release, deps)| {
        let meta = serde_json::json!({ "package": pkg.name, "version": pkg.version, "release": release, "deps": deps, "keep": KEEP_VERSION });
        std::fs::write(tmp.join("kernel.json"), meta.to_string()).map_err(|e| ImageError::Io(tmp.clone(), e))?;
        // A directory kept by an older virtperf (other modules) or left incomplete goes aside.
        if dir.exists() && Kernel::open(&dir).is_none() {
            let stale = cache.join("kernels").join(format!(".{}.stale.{}", pkg.id(), std::process::id()));
            if std::fs::rename(&dir, &stale).is_ok() {
                let _ = std::fs::remove_dir_all(&stale);
            }
        }
        match std::fs::rename(&tmp, &dir) {
            Ok(()) => Ok(()),
            // Another virtperf finished the same kernel first.
            Err(_) if Kernel::open(&dir).is_some() => Ok(()),
            Err(e) => Err(ImageError::Io(dir.clone(), e)),
        }
    });
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    // Everything needed is kept: the package itself would only take space.
    let _ = std::fs::remove_file(&deb);
    Kernel::open(&dir).ok_or_else(|| ImageError::Tool(format!("{} is incomplete", dir.display())))
}

/// The package's `.deb` in `debs`, downloaded with `apt-get download` unless already there.
///
/// apt-get writes the file under its final name as it downloads: one killed mid-way leaves a
/// truncated `.deb` that looks whole (measured: 63 of ~150 MB of linux-source), and every later
/// build would trust it and fail. So the download goes to a working directory of its own
/// (`debs/.dl-PID`, swept with the dead builds' directories by the next start), and the file is
/// moved into `debs` only once apt-get succeeded; apt-get ends with virtperf (SIGTERM).
pub fn download(pkg: &Package, debs: &Path, why: &str) -> Result<PathBuf, ImageError> {
    if let Some(d) = find_deb(debs, pkg) {
        return Ok(d);
    }
    super::sweep_unfinished(debs);
    let tmp = debs.join(format!(".dl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    crate::host::ensure_private_dir(&tmp).map_err(|e| ImageError::Io(tmp.clone(), e))?;
    eprintln!("virtperf: downloading {} {} ({why})", pkg.name, pkg.version);
    let mut apt = Command::new("apt-get");
    apt.args(["download", "-qq", &format!("{}={}", pkg.name, pkg.version)]).current_dir(&tmp);
    virtperf_workload::tools::signal_with_parent(&mut apt, libc::SIGTERM);
    let got = run(&mut apt, "apt-get download").and_then(|_| {
        let deb =
            find_deb(&tmp, pkg).ok_or_else(|| ImageError::Tool("apt-get download left no .deb".into()))?;
        let to = debs.join(deb.file_name().unwrap_or_default());
        std::fs::rename(&deb, &to).map_err(|e| ImageError::Io(to.clone(), e))?;
        Ok(to)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    got
}

fn find_deb(debs: &Path, pkg: &Package) -> Option<PathBuf> {
    // apt names the file NAME_VERSION_ARCH.deb with `:` in the version escaped as %3a.
    let prefix = format!("{}_{}_", pkg.name, pkg.version.replace(':', "%3a"));
    std::fs::read_dir(debs)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
}

type Unpacked = (String, BTreeMap<String, Vec<String>>);

/// Streams the package's data archive (`dpkg-deb --fsys-tarfile`) and keeps what is needed.
fn unpack(deb: &Path, dir: &Path) -> Result<Unpacked, ImageError> {
    let mut child = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ImageError::Missing(format!("dpkg-deb is needed to unpack the kernel package: {e}")))?;
    let stdout = child.stdout.take().ok_or_else(|| ImageError::Tool("dpkg-deb: no pipe".into()))?;
    let mut ar = tar::Archive::new(stdout);
    let mut release = None;
    let mut deps = BTreeMap::new();
    let entries = ar.entries().map_err(|e| ImageError::Tool(format!("reading {}: {e}", deb.display())))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| ImageError::Tool(format!("reading {}: {e}", deb.display())))?;
        let path = entry.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let path = path.trim_start_matches("./").to_string();
        if let Some(rel) = path.strip_prefix("boot/vmlinuz-") {
            let mut bz = Vec::new();
            entry.read_to_end(&mut bz).map_err(|e| ImageError::Tool(format!("{path}: {e}")))?;
            let elf = extract_vmlinux(&bz)?;
            std::fs::write(dir.join("vmlinux"), elf).map_err(|e| ImageError::Io(dir.join("vmlinux"), e))?;
            release = Some(rel.to_string());
            continue;
        }
        let Some(kpath) =
            path.strip_prefix("lib/modules/").and_then(|p| p.split_once("/kernel/")).map(|x| x.1)
        else {
            continue;
        };
        if !kpath.ends_with(".ko") || !KEEP.iter().any(|k| kpath.starts_with(k)) {
            continue;
        }
        let Some(name) = module_name(kpath) else { continue };
        let mut ko = Vec::new();
        entry.read_to_end(&mut ko).map_err(|e| ImageError::Tool(format!("{path}: {e}")))?;
        deps.insert(name.clone(), modinfo_depends(&ko));
        let out = dir.join("modules").join(format!("{name}.ko"));
        std::fs::write(&out, ko).map_err(|e| ImageError::Io(out, e))?;
    }
    let status = child.wait().map_err(|e| ImageError::Tool(format!("dpkg-deb: {e}")))?;
    if !status.success() {
        return Err(ImageError::Tool(format!("dpkg-deb --fsys-tarfile {} failed", deb.display())));
    }
    let release =
        release.ok_or_else(|| ImageError::Tool(format!("{} holds no boot/vmlinuz-*", deb.display())))?;
    Ok((release, deps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_output_parsing() {
        let d = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(parse_depends(d).as_deref(), Some("linux-image-6.1.0-56-amd64"));
        assert_eq!(parse_depends("x\n  Depends: libc6\n"), None);
        assert_eq!(
            parse_version("Package: a\nVersion: 6.1.192-2\nArch: amd64\n").as_deref(),
            Some("6.1.192-2")
        );
    }

    #[test]
    fn modinfo_and_load_order() {
        let ko = b"\x7fELF...\0license=GPL\0depends=virtio_ring,virtio,net_failover\0retpoline=Y\0";
        assert_eq!(modinfo_depends(ko), vec!["virtio_ring", "virtio", "net_failover"]);
        assert!(modinfo_depends(b"\0depends=\0").is_empty());
        assert_eq!(modinfo_depends(b"\0depends=t10-pi\0"), vec!["t10_pi"]);
        let mut deps = BTreeMap::new();
        for (m, d) in [
            ("virtio_net", &["virtio_ring", "virtio", "net_failover"][..]),
            ("virtio_ring", &[]),
            ("virtio", &[]),
            ("net_failover", &["failover"]),
            ("failover", &[]),
            ("virtio_pci", &["virtio_ring", "virtio"]),
        ] {
            deps.insert(m.to_string(), d.iter().map(|s| s.to_string()).collect());
        }
        let order = load_order(&deps, &["virtio_pci", "virtio_net"]).unwrap();
        assert_eq!(
            order,
            vec!["virtio_ring", "virtio", "virtio_pci", "failover", "net_failover", "virtio_net"]
        );
        let e = load_order(&deps, &["e1000"]).unwrap_err().to_string();
        assert!(e.contains("e1000") && e.contains("KEEP"), "{e}");
        assert_eq!(module_name("drivers/block/t10-pi.ko").as_deref(), Some("t10_pi"));
    }

    #[test]
    fn bzimage_header_is_checked() {
        assert!(extract_vmlinux(b"not a kernel").is_err());
        assert_eq!(extract_vmlinux(b"\x7fELFxyz").unwrap(), b"\x7fELFxyz");
        let mut bz = vec![0u8; 0x1000];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        bz[0x206] = 0x0f;
        bz[0x207] = 0x02;
        bz[0x1f1] = 1;
        bz[0x248] = 0; // payload right after the setup sector
        bz[0x24c] = 8;
        bz[1024..1032].copy_from_slice(b"garbage!");
        let e = extract_vmlinux(&bz).unwrap_err().to_string();
        assert!(e.contains("not xz, gzip or zstd"), "{e}");
    }
}
