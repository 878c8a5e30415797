//! A child process's view of the host's file systems: every mount read-only, in a mount
//! namespace of the child's own, with only the files and the sized tmpfs it is given writable.
//!
//! What it is for: User-Mode Linux runs as host root and serves its guest the host's `/` through
//! hostfs. `hostfs=/ ro` is only the guest's mount flag: a guest that remounts its root `rw` had its
//! writes carried out by `linux.uml` on the host, as root. In the namespace made here the guest's
//! hostfs root is a *view* of the host's tree (`root_view`: a recursive bind of `/`, every mount
//! of it read-only), so its writes fail with EROFS whatever the guest does; the rest of the tree is
//! read-only too but for what the process itself must write — its block device's image, bound
//! read-write onto itself outside the view (the guest reaches the same file only through the
//! view, read-only), and its memory file, in a tmpfs of the namespace's own, sized and charged to
//! the instance's cgroup. Nothing is mounted on the host: the namespace is a slave of the host's
//! (no mount made in it propagates out; the host's unmounts, a lab namespace deleted, still reach
//! it) and dies with its last process.
//!
//! Written by hand (no crate offers it) because it runs between fork and exec, where only
//! async-signal-safe system calls on memory prepared beforehand may be used.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `struct mount_attr` of mount_setattr(2) (linux/mount.h, MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// What the confined process sees and may write.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// An existing, empty directory that becomes a read-only view of the host's whole tree (a
    /// recursive bind of `/`): what a guest is given as its root (UML's `hostfs=`). The files
    /// below stay writable outside it, never through it.
    pub root_view: Option<PathBuf>,
    /// A tmpfs of the namespace's own mounted on this (existing, empty) directory, of at most
    /// this many bytes: the process's temporary files (UML's memory file).
    pub tmpfs: Option<(PathBuf, u64)>,
    /// Existing regular files left writable (each bound onto itself, then made read-write).
    pub writable_files: Vec<PathBuf>,
}

/// Why a process cannot be confined on this host.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// the host kernel lacks mount_setattr(2) (Linux 5.12 and later)
    #[error("the host kernel has no mount_setattr(2) (Linux 5.12 or later), with which virtperf keeps the host's file systems read-only to the guest")]
    Unsupported,
    /// a path holds a byte that cannot be passed to the kernel
    #[error("{0}: a path with a NUL byte")]
    BadPath(PathBuf),
    /// a path to keep writable does not exist
    #[error("{0}: {1}")]
    Missing(PathBuf, std::io::Error),
}

/// Whether this kernel has mount_setattr(2): called with a descriptor that cannot be valid, it
/// answers EBADF where it exists and ENOSYS where it does not. No side effect.
pub fn supported() -> bool {
    // SAFETY: mount_setattr with fd -1, an empty path and a null attribute: the kernel checks
    // its arguments and returns an error without touching memory.
    let r = unsafe {
        libc::syscall(libc::SYS_mount_setattr, -1, c"".as_ptr(), 0u32, std::ptr::null::<MountAttr>(), 0usize)
    };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

fn c_path(p: &Path) -> Result<CString, ConfineError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| ConfineError::BadPath(p.to_path_buf()))
}

/// Makes `cmd`'s process start in a mount namespace of its own where every mount of the host is
/// read-only (and a slave of the host's, so that the host's unmounts still reach it: a lab
/// namespace deleted on the host is not kept alive by it), with `c`'s exceptions.
pub fn on_spawn(cmd: &mut std::process::Command, c: &Confinement) -> Result<(), ConfineError> {
    use std::os::unix::process::CommandExt;
    if !supported() {
        return Err(ConfineError::Unsupported);
    }
    for f in &c.writable_files {
        std::fs::metadata(f).map_err(|e| ConfineError::Missing(f.clone(), e))?;
    }
    let root = c_path(Path::new("/"))?;
    let view = c.root_view.as_deref().map(|v| {
        std::fs::metadata(v).map_err(|e| ConfineError::Missing(v.to_path_buf(), e))?;
        c_path(v)
    });
    let view = view.transpose()?;
    let files: Vec<CString> = c.writable_files.iter().map(|f| c_path(f)).collect::<Result<_, _>>()?;
    let tmpfs = match &c.tmpfs {
        Some((dir, bytes)) => {
            std::fs::metadata(dir).map_err(|e| ConfineError::Missing(dir.clone(), e))?;
            let opts = CString::new(format!("size={bytes},mode=0700"))
                .map_err(|_| ConfineError::BadPath(dir.clone()))?;
            Some((c_path(dir)?, opts))
        }
        None => None,
    };
    // SAFETY: only system calls (unshare, mount, mount_setattr) on the forked child, with C
    // strings and structs built before the fork; nothing is allocated, no lock is taken.
    unsafe {
        cmd.pre_exec(move || {
            let check = |r: libc::c_long| if r != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
            let setattr = |path: &CString, flags: libc::c_uint, attr: &MountAttr| {
                check(libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    flags,
                    attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                ))
            };
            let bind = |from: &CString, to: &CString, flags: libc::c_ulong| {
                check(libc::mount(
                    from.as_ptr(),
                    to.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | flags,
                    std::ptr::null(),
                ) as libc::c_long)
            };
            check(libc::unshare(libc::CLONE_NEWNS) as libc::c_long)?;
            // First a slave of the host's: nothing mounted below propagates to the host.
            let slave = MountAttr { attr_set: 0, attr_clr: 0, propagation: libc::MS_SLAVE, userns_fd: 0 };
            setattr(&root, AT_RECURSIVE, &slave)?;
            if let Some(v) = &view {
                bind(&root, v, libc::MS_REC)?;
            }
            let ro = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
            setattr(&root, AT_RECURSIVE, &ro)?;
            let rw = MountAttr { attr_set: 0, attr_clr: MOUNT_ATTR_RDONLY, propagation: 0, userns_fd: 0 };
            for f in &files {
                bind(f, f, 0)?;
                setattr(f, 0, &rw)?;
            }
            if let Some((dir, opts)) = &tmpfs {
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ) as libc::c_long)?;
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A confined shell cannot write the host's file systems (a file beside this test's, /run
    /// where the state directory lives), writes its tmpfs and its one writable file, and reaches
    /// that file read-only through its root view; the host sees none of its mounts.
    #[test]
    fn a_confined_process_writes_only_what_it_was_given() {
        if !crate::host::is_root() {
            crate::host::unit_skip("mount namespaces need root");
            return;
        }
        assert!(supported(), "this host's kernel (6.x) has mount_setattr");
        let d = tempfile::tempdir().unwrap();
        let (mem, view) = (d.path().join("mem"), d.path().join("view"));
        std::fs::create_dir(&mem).unwrap();
        std::fs::create_dir(&view).unwrap();
        let img = d.path().join("disk.img");
        std::fs::write(&img, vec![0u8; 4096]).unwrap();
        let c = Confinement {
            root_view: Some(view.clone()),
            tmpfs: Some((mem.clone(), 1 << 20)),
            writable_files: vec![img.clone()],
        };
        let script = format!(
            "touch {host} 2>/dev/null && echo host-written; \
             touch /run/vp-confine-test-$$ 2>/dev/null && echo run-written; \
             touch {view}{host} 2>/dev/null && echo view-written; \
             printf y | dd of={view}{img} bs=1 seek=200 conv=notrunc 2>/dev/null && echo view-img-written; \
             test -x {view}/bin/sh && echo view-sees-host; \
             echo x > {mem}/f && echo tmpfs-ok; \
             printf y | dd of={img} bs=1 seek=100 conv=notrunc 2>/dev/null && echo img-ok; \
             dd if=/dev/zero of={mem}/big bs=1M count=4 2>/dev/null || echo tmpfs-bounded",
            host = d.path().join("planted").display(),
            view = view.display(),
            mem = mem.display(),
            img = img.display()
        );
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(&script);
        on_spawn(&mut cmd, &c).unwrap();
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        for w in ["host-written", "run-written", "view-written", "view-img-written"] {
            assert!(!said.contains(w), "{w}: {said}");
        }
        assert!(!d.path().join("planted").exists(), "{said}");
        for w in ["view-sees-host", "tmpfs-ok", "img-ok", "tmpfs-bounded"] {
            assert!(said.contains(w), "{w} missing: {said}");
        }
        let bytes = std::fs::read(&img).unwrap();
        assert_eq!((bytes[100], bytes[200]), (b'y', 0), "written outside the view only");
        assert!(std::fs::read_dir(&mem).unwrap().next().is_none(), "the tmpfs was the child's own");
        assert!(std::fs::read_dir(&view).unwrap().next().is_none(), "the view was the child's own");
    }
}
