//! Scratch disks: where the bytes of a disk workload land in each environment (docs/disk.md).
//!
//! The run keeps one directory per instance below the host's scratch root
//! ([`crate::host::scratch_root`], `/var/tmp/virtperf` by default: a disk, not the tmpfs of the
//! state directory). What an environment makes of it is its choice, stored with every trial:
//! native writes into it, a container bind-mounts it (or lays an overlay on it), gVisor serves it
//! through its gofer (or its own overlay), and a guest gets a disk image in it, formatted on the
//! host and attached as a block device.

use std::path::Path;
use std::process::Command;

/// Where a guest's init mounts its scratch disk, and where containers see theirs.
pub const GUEST_DIR: &str = "/scratch";

/// The file system the guests' images are made with: the host's `mke2fs -t ext4`.
pub const IMAGE_FS: &str = "ext4";

/// `mke2fs`, the host's (e2fsprogs, in every Debian): None when missing.
pub fn mke2fs() -> Option<std::path::PathBuf> {
    crate::host::which("mke2fs").or_else(|| {
        ["/sbin/mke2fs", "/usr/sbin/mke2fs"].iter().map(std::path::PathBuf::from).find(|p| p.is_file())
    })
}

/// The host file system under `dir`, for the descriptions ("ext4", or "?" when unknown).
pub fn host_fs(dir: &Path) -> String {
    crate::host::fs_type(dir).unwrap_or_else(|| "?".into())
}

/// What the scratch root of this host is, before any run made a directory there.
pub fn root_description() -> String {
    let root = crate::host::scratch_root();
    format!("the host's {} ({})", host_fs(&root), root.display())
}

/// Makes a disk image of `size` bytes at `path`: a file preallocated with `posix_fallocate` (as
/// `qemu-img create -o preallocation=falloc`: the guest's writes do not pay the host's block
/// allocation; where the host file system cannot, the file stays sparse and the description says
/// so), with an ext4 file system made by the host's `mke2fs`, its inode tables and journal
/// initialised now (`lazy_itable_init=0,lazy_journal_init=0`) so that no kernel thread of the
/// guest does it in the background during a trial. Returns how the file was allocated.
pub fn make_image(path: &Path, size: u64) -> Result<&'static str, String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    f.set_len(size).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = libc::off_t::try_from(size).map_err(|_| format!("{size} bytes is too large an image"))?;
    // SAFETY: posix_fallocate on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len) };
    let allocation = match rc {
        0 => "preallocated",
        libc::ENOSPC => {
            return Err(format!(
                "{}: no space for a {} MiB disk image on {}: a smaller disk_size, or VIRTPERF_SCRATCH on a larger file system",
                path.display(),
                size >> 20,
                root_description()
            ))
        }
        _ => "sparse",
    };
    drop(f);
    let tool = mke2fs().ok_or("mke2fs is not installed: apt-get install -y e2fsprogs   (or: make deps)")?;
    let out = crate::host::command::output_within(
        Command::new(tool)
            .args(["-q", "-F", "-t", IMAGE_FS, "-m", "0", "-L", "vpscratch"])
            .args(["-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(path),
        crate::host::command::LONG,
    )
    .map_err(|e| format!("cannot run mke2fs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mke2fs -t {IMAGE_FS} {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(allocation)
}

/// A guest's scratch image in the instance's scratch directory: `scratch.img` of `size` bytes,
/// made with [`make_image`]; its path and a description for the trials' records. The image lives
/// on the host's scratch disk, not in the state directory (a tmpfs on most hosts, where it would
/// be memory and refuse cache=none's O_DIRECT).
pub fn guest_image(
    ctx: &super::launch::LaunchCtx,
    size: u64,
) -> Result<(std::path::PathBuf, String), super::launch::LaunchError> {
    use super::launch::LaunchError;
    let Some(sdir) = ctx.scratch_dir.clone() else {
        return Err(LaunchError::Prepare(
            "disk= needs the run's scratch directory, which could not be made (see VIRTPERF_SCRATCH)".into(),
        ));
    };
    let path = sdir.join("scratch.img");
    let how = make_image(&path, size).map_err(LaunchError::Prepare)?;
    let image = format!("{} ({} MiB, {how}, on the host's {})", path.display(), size >> 20, host_fs(&sdir));
    Ok((path, image))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_preallocated_and_holds_an_ext4_file_system() {
        if mke2fs().is_none() {
            crate::host::unit_skip("no mke2fs on this host");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("scratch.img");
        let how = make_image(&img, 32 << 20).unwrap();
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 32 << 20);
        let bytes = std::fs::read(&img).unwrap();
        // The ext2/3/4 superblock at 1024: magic 0xEF53 at offset 56; "has_journal" compat bit.
        assert_eq!(&bytes[1024 + 56..1024 + 58], &[0x53, 0xef]);
        let compat = u32::from_le_bytes(bytes[1024 + 92..1024 + 96].try_into().unwrap());
        assert!(compat & 0x4 != 0, "a journal (ext4, not ext2)");
        assert!(["preallocated", "sparse"].contains(&how));
    }

    #[test]
    fn an_image_larger_than_the_disk_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let e = make_image(&d.path().join("huge.img"), 1 << 60).unwrap_err();
        assert!(e.contains("huge.img"), "{e}");
    }
}
