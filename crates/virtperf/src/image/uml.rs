//! virtperf's own User-Mode Linux kernel, for hosts where the packaged `linux.uml` cannot run.
//!
//! UML ≤ 6.12 hands the host's `PTRACE_SETREGSET(NT_X86_XSTATE)` a buffer of its compile-time size
//! (2696 bytes); the host kernel refuses (EFAULT) anything but its own XSAVE size, which is larger on
//! CPUs with AMX (11008 bytes), so the guest's first process dies ("ptrace set fp regs failed,
//! errno = 14"). The fix is `uml/xstate.patch` (two files, documented in docs/environments/uml.md):
//! room for the whole XSAVE area, and exactly the host's size on every call.
//!
//! The kernel is Debian's `linux-source-6.12` (apt-get download, never installed), patched,
//! configured from `make tinyconfig` plus `uml/virtperf.config` (what the uml environment uses:
//! hostfs, tmpfs, devtmpfs, the vector NIC, ubd), built with `make -jN`, stripped, and cached by
//! the hash of its recipe and the source version. Written by hand because it is glue around
//! Debian's tools (apt, dpkg-deb, tar, patch, make); a build takes about 3 minutes on 2 cores.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::kernel::{self, Package};
use super::ImageError;

/// The kernel source package.
pub const SOURCE_PACKAGE: &str = "linux-source-6.12";
/// The patch that makes the FP register buffer the host's XSAVE size.
pub const PATCH: &str = include_str!("uml/xstate.patch");
/// Options merged onto `tinyconfig`; every one is checked in the final configuration.
pub const CONFIG: &str = include_str!("uml/virtperf.config");
/// Bumped whenever the build steps change.
const RECIPE_VERSION: u32 = 1;

/// Host programs a build needs, with the Debian package of each.
pub const BUILD_TOOLS: &[(&str, &str)] = &[
    ("apt-get", "apt"),
    ("dpkg-deb", "dpkg"),
    ("tar", "tar"),
    ("xz", "xz-utils"),
    ("patch", "patch"),
    ("make", "make"),
    ("gcc", "gcc"),
    ("flex", "flex"),
    ("bison", "bison"),
    ("bc", "bc"),
    ("strip", "binutils"),
];

/// A built kernel in the cache.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UmlKernel {
    /// The executable (`linux`, run like `linux.uml`).
    pub path: PathBuf,
    /// `linux-source-6.12 6.12.117-1~deb12u1`
    pub source: String,
    /// Whether this call built it (false: found in the cache).
    pub built: bool,
    pub seconds: f64,
}

/// The hash of what makes a build (patch, configuration, steps), without the source version.
pub fn recipe() -> String {
    recipe_of(&RECIPE_VERSION.to_string(), PATCH, CONFIG)
}

/// The recipe hash of these inputs (the function [`recipe`] applies to the shipped ones).
fn recipe_of(version: &str, patch: &str, config: &str) -> String {
    let mut h = Sha256::new();
    h.update(format!("uml recipe {version}\n{patch}\n{config}").as_bytes());
    h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The tools a build needs that this host lacks, as Debian packages.
pub fn missing_tools() -> Vec<&'static str> {
    let mut out: Vec<&str> =
        BUILD_TOOLS.iter().filter(|(cmd, _)| crate::host::which(cmd).is_none()).map(|(_, p)| *p).collect();
    out.dedup();
    out
}

fn uml_dir(cache: &Path) -> PathBuf {
    cache.join("uml")
}

/// A kernel built with today's recipe (any source version), newest first; no apt, no I/O beyond
/// the cache directory: cheap enough for `availability()`.
pub fn find_built(cache: &Path) -> Option<UmlKernel> {
    let want = recipe();
    let mut found: Vec<(std::time::SystemTime, UmlKernel)> = std::fs::read_dir(uml_dir(cache))
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{want}-")))
        .filter_map(|e| {
            let dir = e.path();
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("build.json")).ok()?).ok()?;
            let path = dir.join("linux");
            let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
            Some((
                modified,
                UmlKernel {
                    path,
                    source: meta.get("source")?.as_str()?.to_string(),
                    built: false,
                    seconds: 0.0,
                },
            ))
        })
        .collect();
    found.sort_by_key(|x| std::cmp::Reverse(x.0));
    found.into_iter().next().map(|x| x.1)
}

/// The longest wait for another process's build of the same kernel.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// An exclusive lock on the cache's UML directory while a build runs (two runs starting at
/// once build once).
struct Lock {
    _held: std::fs::File,
}

impl Lock {
    fn take(dir: &Path) -> Result<Lock, ImageError> {
        let p = dir.join(".lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| ImageError::Io(p.clone(), e))?;
        use std::os::fd::AsRawFd;
        // Another build holds it for the ~3-6 minutes a build takes; one that holds it for half an
        // hour is stuck (stopped, hung), and this build says so rather than wait for ever.
        let t0 = std::time::Instant::now();
        loop {
            // SAFETY: flock(2) on a descriptor this function owns; released when the File is closed.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Lock { _held: f });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(ImageError::Io(p, e));
            }
            if t0.elapsed() > LOCK_WAIT {
                return Err(ImageError::Tool(format!(
                    "another virtperf has held {} for {} min, longer than a build takes: it is stuck (stop it), or remove the cache's uml directory",
                    p.display(),
                    LOCK_WAIT.as_secs() / 60
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

/// Runs a build step with its output in `log`; a failure quotes the log's last lines.
fn step(cmd: &mut Command, what: &str, log: &Path) -> Result<(), ImageError> {
    // A build killed with -9 takes its tools with it (make stops its compilers on SIGTERM); what
    // they left in the build directory goes at the next start (super::sweep_unfinished).
    virtperf_workload::tools::signal_with_parent(cmd, libc::SIGTERM);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| ImageError::Io(log.to_path_buf(), e))?;
    let err = out.try_clone().map_err(|e| ImageError::Io(log.to_path_buf(), e))?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| ImageError::Missing(format!("{what}: cannot start: {e}")))?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
    Err(ImageError::Tool(format!(
        "{what} failed ({status}); the whole log is kept as last-build.log beside the cache's kernels; its last lines:\n{}",
        tail.join("\n")
    )))
}

/// The options of `fragment` that the final `.config` does not have as asked (a renamed or
/// unsatisfiable option would otherwise be dropped silently by `olddefconfig`).
pub fn unmet_options(fragment: &str, config: &str) -> Vec<String> {
    let have: std::collections::HashSet<&str> = config.lines().map(str::trim).collect();
    fragment
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("CONFIG_") || (l.starts_with("# CONFIG_") && l.ends_with(" is not set")))
        .filter(|l| {
            // `=n` and "is not set" are the same request; a missing line also means "not set".
            if let Some(name) = l.strip_suffix("=n") {
                !have.contains(format!("# {name} is not set").as_str())
                    && have.contains(format!("{name}=y").as_str())
            } else if l.starts_with('#') {
                let name = l.trim_start_matches("# ").trim_end_matches(" is not set");
                have.iter().any(|h| h.starts_with(&format!("{name}=")))
            } else {
                !have.contains(l)
            }
        })
        .map(str::to_string)
        .collect()
}

/// Builds the kernel (or returns the cached one). `jobs` parallel compilers.
pub fn ensure(cache: &Path, jobs: usize) -> Result<UmlKernel, ImageError> {
    let t0 = Instant::now();
    let dir = uml_dir(cache);
    create_private_dir(cache)?;
    create_private_dir(&dir)?;
    let _lock = Lock::take(&dir)?;
    if let Some(k) = find_built(cache) {
        return Ok(k);
    }
    let missing = missing_tools();
    if !missing.is_empty() {
        return Err(ImageError::Missing(format!(
            "building virtperf's UML kernel needs: apt-get install -y {} (or: make deps)",
            missing.join(" ")
        )));
    }
    let pkg = kernel::resolve(Some(SOURCE_PACKAGE), cache)?;
    let source = format!("{} {}", pkg.name, pkg.version);
    let out_dir = dir.join(format!("{}-{}", recipe(), sanitize(&pkg.version)));
    super::sweep_unfinished(&dir);
    let tmp = dir.join(format!(".build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    create_private_dir(&tmp)?;
    eprintln!(
        "virtperf: building a User-Mode Linux kernel from {source} with virtperf's xstate patch \
         (about 3 minutes on 2 cores; cached in {})",
        dir.display()
    );
    let result = build(&pkg, cache, &tmp, jobs).and_then(|linux| {
        let meta = serde_json::json!({
            "source": source, "recipe": recipe(), "seconds": t0.elapsed().as_secs_f64(),
            "host_xsave_bytes": crate::host::facts().xsave_enabled,
        });
        let fin = tmp.join("final");
        create_private_dir(&fin)?;
        std::fs::rename(&linux, fin.join("linux")).map_err(|e| ImageError::Io(fin.join("linux"), e))?;
        std::fs::write(fin.join("build.json"), serde_json::to_string_pretty(&meta).unwrap_or_default())
            .map_err(|e| ImageError::Io(fin.join("build.json"), e))?;
        let _ = std::fs::remove_dir_all(&out_dir);
        std::fs::rename(&fin, &out_dir).map_err(|e| ImageError::Io(out_dir.clone(), e))
    });
    if result.is_err() {
        // The build tree goes; its log stays for the error message's reader.
        let _ = std::fs::copy(tmp.join("build.log"), dir.join("last-build.log"));
    }
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    eprintln!(
        "virtperf: UML kernel built in {:.0} s: {}",
        t0.elapsed().as_secs_f64(),
        out_dir.join("linux").display()
    );
    Ok(UmlKernel { path: out_dir.join("linux"), source, built: true, seconds: t0.elapsed().as_secs_f64() })
}

fn sanitize(version: &str) -> String {
    version.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// Build trees and kernels that virtperf later executes must not be writable by anyone else.
fn create_private_dir(dir: &Path) -> Result<(), ImageError> {
    crate::host::ensure_private_dir(dir).map_err(|e| ImageError::Io(dir.to_path_buf(), e))
}

/// The build proper, inside `tmp`; returns the stripped kernel.
fn build(pkg: &Package, cache: &Path, tmp: &Path, jobs: usize) -> Result<PathBuf, ImageError> {
    let log = tmp.join("build.log");
    let debs = cache.join("debs");
    create_private_dir(&debs)?;
    let deb = kernel::download(pkg, &debs, "UML kernel source, not installed on the host")?;
    eprintln!("virtperf: [1/4] unpacking {}", deb.display());
    unpack_source(&deb, tmp)?;
    // The source package is 150 MB: nothing else needs it.
    let _ = std::fs::remove_file(&deb);
    let src = std::fs::read_dir(tmp)
        .map_err(|e| ImageError::Io(tmp.to_path_buf(), e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("linux-source-"))
        })
        .ok_or_else(|| ImageError::Tool(format!("{} holds no linux-source-* tree", deb.display())))?;
    eprintln!(
        "virtperf: [2/4] applying the xstate patch and configuring (tinyconfig + image/uml/virtperf.config)"
    );
    let mut patch = Command::new("patch")
        .args(["-p1", "--forward", "--batch", "-d"])
        .arg(&src)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ImageError::Missing(format!("patch: cannot start: {e}")))?;
    if let Some(mut stdin) = patch.stdin.take() {
        stdin.write_all(PATCH.as_bytes()).map_err(|e| ImageError::Tool(format!("patch: {e}")))?;
    }
    let out = patch.wait_with_output().map_err(|e| ImageError::Tool(format!("patch: {e}")))?;
    if !out.status.success() {
        return Err(ImageError::Tool(format!(
            "the xstate patch does not apply to {}: {}{}",
            pkg.version,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let obj = tmp.join("out");
    let make = |args: &[&str]| {
        let mut c = Command::new("make");
        c.arg("-C").arg(&src).arg("ARCH=um").arg(format!("O={}", obj.display())).args(args);
        c
    };
    step(&mut make(&["tinyconfig"]), "make tinyconfig", &log)?;
    let fragment = tmp.join("virtperf.config");
    std::fs::write(&fragment, CONFIG).map_err(|e| ImageError::Io(fragment.clone(), e))?;
    step(
        Command::new(src.join("scripts/kconfig/merge_config.sh"))
            .arg("-m")
            .arg("-O")
            .arg(&obj)
            .arg(obj.join(".config"))
            .arg(&fragment)
            .current_dir(&src),
        "merge_config.sh",
        &log,
    )?;
    step(&mut make(&["olddefconfig"]), "make olddefconfig", &log)?;
    let config =
        std::fs::read_to_string(obj.join(".config")).map_err(|e| ImageError::Io(obj.join(".config"), e))?;
    let unmet = unmet_options(CONFIG, &config);
    if !unmet.is_empty() {
        return Err(ImageError::Tool(format!(
            "{} cannot have these options of image/uml/virtperf.config: {}",
            pkg.version,
            unmet.join(", ")
        )));
    }
    eprintln!("virtperf: [3/4] compiling with {jobs} job(s) (log: {})", log.display());
    step(&mut make(&[&format!("-j{jobs}"), "linux"]), "make linux", &log)?;
    eprintln!("virtperf: [4/4] stripping");
    let linux = tmp.join("linux");
    step(Command::new("strip").arg("-o").arg(&linux).arg(obj.join("linux")), "strip", &log)?;
    Ok(linux)
}

/// Streams `usr/src/linux-source-*.tar.xz` out of the package into `tar -xJ -C dir`.
fn unpack_source(deb: &Path, dir: &Path) -> Result<(), ImageError> {
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ImageError::Missing(format!("dpkg-deb is needed to unpack the kernel source: {e}")))?;
    let stdout = dpkg.stdout.take().ok_or_else(|| ImageError::Tool("dpkg-deb: no pipe".into()))?;
    let mut ar = tar::Archive::new(stdout);
    let entries = ar.entries().map_err(|e| ImageError::Tool(format!("reading {}: {e}", deb.display())))?;
    let mut found = false;
    for entry in entries {
        let mut entry = entry.map_err(|e| ImageError::Tool(format!("reading {}: {e}", deb.display())))?;
        let path = entry.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let name = path.trim_start_matches("./");
        if !(name.starts_with("usr/src/linux-source-") && name.ends_with(".tar.xz")) {
            continue;
        }
        let mut tar = Command::new("tar")
            .args(["-xJ", "--no-same-owner", "-C"])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ImageError::Missing(format!("tar: cannot start: {e}")))?;
        let mut stdin = tar.stdin.take().ok_or_else(|| ImageError::Tool("tar: no pipe".into()))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = entry.read(&mut buf).map_err(|e| ImageError::Tool(format!("{name}: {e}")))?;
            if n == 0 {
                break;
            }
            stdin.write_all(&buf[..n]).map_err(|e| ImageError::Tool(format!("tar -xJ: {e}")))?;
        }
        drop(stdin);
        let out = tar.wait_with_output().map_err(|e| ImageError::Tool(format!("tar: {e}")))?;
        if !out.status.success() {
            return Err(ImageError::Tool(format!(
                "tar -xJ {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        found = true;
        break;
    }
    let _ = dpkg.kill();
    let _ = dpkg.wait();
    if found {
        Ok(())
    } else {
        Err(ImageError::Tool(format!("{} holds no usr/src/linux-source-*.tar.xz", deb.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_touches_only_the_fp_register_size() {
        let files: Vec<&str> = PATCH.lines().filter_map(|l| l.strip_prefix("+++ b/")).collect();
        assert_eq!(files, ["arch/x86/um/os-Linux/registers.c", "arch/x86/um/user-offsets.c"]);
        assert!(
            PATCH.contains("+\t\tiov.iov_len = host_fp_size;"),
            "GETREGSET/SETREGSET use the host's size"
        );
        assert_eq!(PATCH.matches("+\t\tiov.iov_len = host_fp_size;").count(), 2, "both directions");
        assert!(PATCH.contains("__get_cpuid_count(0xd, 0"), "cross-checked with CPUID leaf 0xD");
        let added = PATCH.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")).count();
        assert!(added < 30, "the patch stays small: {added} lines added");
    }

    #[test]
    fn config_options_are_checked_after_olddefconfig() {
        let frag = "# comment\nCONFIG_A=y\nCONFIG_B=4\nCONFIG_C=n\n# CONFIG_D is not set\n";
        let good = "CONFIG_A=y\nCONFIG_B=4\n# CONFIG_C is not set\n# CONFIG_D is not set\n";
        assert!(unmet_options(frag, good).is_empty());
        let bad = "CONFIG_A=m\nCONFIG_B=2\nCONFIG_C=y\nCONFIG_D=y\n";
        assert_eq!(
            unmet_options(frag, bad),
            ["CONFIG_A=y", "CONFIG_B=4", "CONFIG_C=n", "# CONFIG_D is not set"]
        );
        // The shipped fragment asks for what the environment needs.
        for opt in ["CONFIG_HOSTFS=y", "CONFIG_UML_NET_VECTOR=y", "CONFIG_TMPFS=y", "CONFIG_DEVTMPFS=y"] {
            assert!(CONFIG.lines().any(|l| l == opt), "{opt}");
        }
    }

    #[test]
    fn recipe_changes_with_its_inputs_only() {
        let v = RECIPE_VERSION.to_string();
        assert_eq!(recipe(), recipe_of(&v, PATCH, CONFIG), "the shipped inputs");
        assert_eq!(recipe().len(), 12);
        // Each input changes it (one byte is enough); nothing else does.
        let base = recipe_of(&v, PATCH, CONFIG);
        assert_ne!(base, recipe_of(&format!("{v}1"), PATCH, CONFIG), "the recipe version");
        assert_ne!(base, recipe_of(&v, &format!("{PATCH} "), CONFIG), "the patch");
        assert_ne!(base, recipe_of(&v, PATCH, &format!("{CONFIG}\nCONFIG_X=y")), "the configuration");
    }
}
