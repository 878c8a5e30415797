//! Cgroups of instances: the accounting cgroup whose CPU time is an instance's host CPU, limits
//! (cpus, memory), freezing, and removal with everything inside.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::ledger::Ledger;
/// Reads the host-side CPU time of an instance, in nanoseconds.
#[derive(Debug, Clone)]
pub enum CpuProbe {
    /// The process's CPU clock (`clock_getcpuclockid`): every thread, exited ones included, in
    /// ns. One process only: not its children.
    Proc(u32),
    /// A cgroup v1 `cpuacct.usage` file (ns).
    CgroupV1(PathBuf),
    /// A cgroup v2 `cpu.stat` file (`usage_usec`).
    CgroupV2(PathBuf),
    /// An instance on another host: read there, over its SSH session (`remote/` implements the
    /// reader; env stays below it).
    Remote(std::sync::Arc<dyn CpuReader>),
}

/// A CPU clock read somewhere else (a remote instance's, over its session), in ns.
pub trait CpuReader: Send + Sync + std::fmt::Debug {
    fn read_ns(&self) -> Option<u64>;
}

impl CpuProbe {
    pub fn read_ns(&self) -> Option<u64> {
        match self {
            CpuProbe::Proc(pid) => {
                let mut clock: libc::clockid_t = 0;
                // SAFETY: clock_getcpuclockid writes one clockid_t we own; a gone pid is an error.
                if unsafe { libc::clock_getcpuclockid(*pid as libc::pid_t, &mut clock) } != 0 {
                    return None;
                }
                let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: clock_gettime writes into the timespec we own.
                if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
                    return None;
                }
                Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
            }
            CpuProbe::CgroupV1(p) => std::fs::read_to_string(p).ok()?.trim().parse().ok(),
            CpuProbe::CgroupV2(p) => {
                let s = std::fs::read_to_string(p).ok()?;
                let usec: u64 = s.lines().find_map(|l| l.strip_prefix("usage_usec "))?.trim().parse().ok()?;
                Some(usec * 1000)
            }
            CpuProbe::Remote(r) => r.read_ns(),
        }
    }
}

/// Where cgroup v2 is mounted (the unified hierarchy: `/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` beside v1 controllers).
fn cgroup2_mount() -> Option<PathBuf> {
    let s = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    s.lines().find(|l| l.contains(" - cgroup2 ")).and_then(|l| l.split_whitespace().nth(4)).map(PathBuf::from)
}

/// The CPU accounting of the cgroup that process `pid` lives in, at the level whose name holds
/// `own` — a libvirt domain's `machine/qemu-1-NAME.libvirt-qemu` (QEMU itself sits in its
/// `emulator` child, the vCPU threads in `vcpuN` beside it) or its systemd scope. Such a group
/// counts every task of the domain, vhost workers included (they join their owner's cgroups),
/// where QEMU's process clock counts only its threads. Either hierarchy: cgroup v1's `cpuacct`
/// or v2's `cpu.stat` (libvirt uses v2 where it is mounted, even beside v1 controllers). None when
/// no level names `own` (a shared cgroup: the root, a session) or nothing can be read.
pub fn own_cgroup_probe(pid: u32, own: &str) -> Option<CpuProbe> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        let (mount, v2) = if controllers.is_empty() {
            (cgroup2_mount(), true)
        } else if controllers.split(',').any(|c| c == "cpuacct") {
            (cpuacct_mount(), false)
        } else {
            continue;
        };
        let Some(mount) = mount else { continue };
        // The path down to the first level that names `own` (systemd escapes '-' as \x2d).
        let mut dir = mount;
        let mut named = false;
        for level in path.split('/').filter(|x| !x.is_empty()) {
            dir.push(level);
            if level.replace("\\x2d", "-").contains(own) {
                named = true;
                break;
            }
        }
        if !named {
            continue;
        }
        let probe = if v2 {
            CpuProbe::CgroupV2(dir.join("cpu.stat"))
        } else {
            CpuProbe::CgroupV1(dir.join("cpuacct.usage"))
        };
        if probe.read_ns().is_some() {
            return Some(probe);
        }
    }
    None
}

/// Where cgroup v1's `cpuacct` controller is mounted (alone or with others, e.g. `cpu,cpuacct`).
fn cpuacct_mount() -> Option<PathBuf> {
    crate::host::cgroup_mounts()
        .into_iter()
        .find(|m| m.file_name().is_some_and(|n| n.to_string_lossy().split(',').any(|c| c == "cpuacct")))
}

/// The cgroup v1 `cpuacct` mount, or the v2 unified root (`/sys/fs/cgroup` with `cgroup.controllers`).
pub fn cpu_cgroup_root() -> Option<(PathBuf, bool)> {
    if let Some(m) = cpuacct_mount() {
        return Some((m, false));
    }
    let root = Path::new("/sys/fs/cgroup");
    root.join("cgroup.controllers").exists().then(|| (root.to_path_buf(), true))
}

/// The probe of cgroup `virtperf/ID` (which may not exist yet: a runtime creates it).
pub fn cgroup_probe(id: &str) -> Option<CpuProbe> {
    let (root, v2) = cpu_cgroup_root()?;
    let dir = root.join("virtperf").join(id);
    Some(if v2 {
        CpuProbe::CgroupV2(dir.join("cpu.stat"))
    } else {
        CpuProbe::CgroupV1(dir.join("cpuacct.usage"))
    })
}

/// Creates cgroup `virtperf/ID` for CPU accounting (ledger first) and moves `pid` into it.
/// Covers every thread and child of the process, exited ones included, in ns. `None` when
/// cgroups are not writable here (not root): the caller falls back to [`CpuProbe::Proc`].
pub fn join_accounting_cgroup(ledger: &mut Ledger, id: &str, pid: u32) -> Option<CpuProbe> {
    let (root, _) = cpu_cgroup_root()?;
    ledger.record_once(crate::ledger::Entry::Cgroup { rel: "virtperf".into() });
    ledger.record(crate::ledger::Entry::Cgroup { rel: format!("virtperf/{id}") });
    let dir = root.join("virtperf").join(id);
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).ok()?;
    // The freezer hierarchy too (v1: a mount of its own), so the run can pause it.
    if let Some((froot, false)) = controller_dir("freezer") {
        let fdir = froot.join("virtperf").join(id);
        if fdir != dir && std::fs::create_dir_all(&fdir).is_ok() {
            let _ = std::fs::write(fdir.join("cgroup.procs"), pid.to_string());
        }
    }
    cgroup_probe(id)
}

/// Moves `pid` (a helper of instance `id` that the run started outside it: a container's pasta)
/// into the instance's CPU-accounting and freezer cgroups, which its runtime made: its CPU is
/// then the instance's, and a pause pauses it too. Where `cpu` and `cpuacct` share a hierarchy
/// (v1 comounted, v2) the instance's CPU quota then holds it as well.
pub fn join_instance_cgroup(id: &str, pid: u32) -> Result<(), String> {
    let (root, _) = cpu_cgroup_root().ok_or("no CPU-accounting cgroup here")?;
    let mut dirs = vec![root.join("virtperf").join(id)];
    if let Some((froot, false)) = controller_dir("freezer") {
        dirs.push(froot.join("virtperf").join(id));
    }
    dirs.dedup();
    for d in dirs {
        let procs = d.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| format!("{}: {e}", procs.display()))?;
    }
    Ok(())
}

/// Pauses (`frozen`) or resumes every process of instance `id` through its cgroup's freezer
/// (v1 `freezer.state`, v2 `cgroup.freeze`), waiting up to a second for the state to settle.
/// An environment not under test must not run beside one that is: an idle TCG guest still burns
/// host CPU on its timers, UML's and gVisor's host processes wake.
pub fn freeze(id: &str, frozen: bool) -> Result<(), String> {
    let (root, v2) = controller_dir("freezer")
        .or_else(|| {
            let r = Path::new("/sys/fs/cgroup");
            r.join("cgroup.controllers").exists().then(|| (r.to_path_buf(), true))
        })
        .ok_or("no cgroup freezer on this host")?;
    let dir = root.join("virtperf").join(id);
    let (file, value, done_file, done) = if v2 {
        (
            "cgroup.freeze",
            if frozen { "1" } else { "0" },
            "cgroup.events",
            if frozen { "frozen 1" } else { "frozen 0" },
        )
    } else {
        (
            "freezer.state",
            if frozen { "FROZEN" } else { "THAWED" },
            "freezer.state",
            if frozen { "FROZEN" } else { "THAWED" },
        )
    };
    std::fs::write(dir.join(file), value).map_err(|e| format!("{}: {e}", dir.join(file).display()))?;
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut pause = Duration::from_micros(20);
    loop {
        let state = std::fs::read_to_string(dir.join(done_file)).unwrap_or_default();
        if state.lines().any(|l| l.trim() == done) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            if frozen {
                // Half-frozen helps nobody: resume, and say so.
                let _ = std::fs::write(dir.join(file), if v2 { "0" } else { "THAWED" });
            }
            return Err(format!("{} did not reach {done} within 1 s", dir.display()));
        }
        // Idle processes freeze within microseconds: poll fast first, then back off.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// The v1 mount of `controller`, or the v2 unified root when it offers that controller.
fn controller_dir(controller: &str) -> Option<(PathBuf, bool)> {
    for m in crate::host::cgroup_mounts() {
        let name = m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.split(',').any(|c| c == controller) {
            return Some((m, false));
        }
    }
    let root = Path::new("/sys/fs/cgroup");
    let offered = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
    offered.split_whitespace().any(|c| c == controller).then(|| (root.to_path_buf(), true))
}

/// Fills cgroup v1's `cpuset/virtperf` (the parent of every container's group) with its own
/// parent's CPUs and memory nodes. A new v1 cpuset group starts with none, and a child cannot be
/// given CPUs its parent lacks: runc fills the intermediate group itself, runsc does not (gVisor
/// with a `cpuset` failed to start: "write /sys/fs/cgroup/cpuset/virtperf/ID/cpuset.cpus:
/// permission denied" whenever no runc container had made the parent first). The caller records
/// the group in the ledger before. Nothing to do on cgroup v2 or without the controller.
pub fn prepare_v1_cpuset_parent() -> Result<(), String> {
    let Some((root, false)) = controller_dir("cpuset") else { return Ok(()) };
    let dir = root.join("virtperf");
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    for f in ["cpuset.cpus", "cpuset.mems"] {
        let mine = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        if mine.trim().is_empty() {
            let theirs = std::fs::read_to_string(root.join(f))
                .map_err(|e| format!("{}: {e}", root.join(f).display()))?;
            std::fs::write(dir.join(f), theirs.trim())
                .map_err(|e| format!("{}: {e}", dir.join(f).display()))?;
        }
    }
    Ok(())
}

/// Limits put on a guest's host processes through its cgroup.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Memory of all its host processes together (`memory.limit_in_bytes` / `memory.max`):
    /// a guest that runs away is killed by the kernel's OOM killer, not the host.
    pub memory_bytes: Option<u64>,
    /// CPU time of all its host processes together, in CPUs (a CFS quota: 0.5 = half of one CPU
    /// every period; `cpu.cfs_quota_us` / `cpu.max`): a driver domain capped as Xen's credit
    /// scheduler capped dom0.
    pub cpu_cap: Option<f64>,
}

/// CFS period of [`Limits::cpu_cap`], µs (the kernel's default).
const CFS_PERIOD_US: u64 = 100_000;

/// Creates cgroup `virtperf/ID` (ledger first) in the CPU-accounting hierarchy and, with a memory
/// limit, in the memory one, and makes `cmd`'s child enter them before exec, so that every process
/// it ever forks is accounted and limited (UML forks host helpers as it boots). Returns the CPU
/// probe, the open `cgroup.procs` files (kept until the spawn), the relative path and whether the
/// memory limit is in force; None when cgroups are not writable here (not root).
pub fn instance_cgroup_on_spawn(
    cmd: &mut Command,
    ledger: &mut Ledger,
    id: &str,
    limits: Limits,
) -> Option<(CpuProbe, Vec<std::fs::File>, String, bool)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (root, _) = cpu_cgroup_root()?;
    ledger.record_once(crate::ledger::Entry::Cgroup { rel: "virtperf".into() });
    let rel = format!("virtperf/{id}");
    ledger.record(crate::ledger::Entry::Cgroup { rel: rel.clone() });
    let mut dirs = vec![root.join(&rel)];
    let mut limited = false;
    if let (Some(bytes), Some((mroot, mv2))) = (limits.memory_bytes, controller_dir("memory")) {
        if mv2 {
            // v2: the controller must be enabled for the children of each ancestor.
            let _ = std::fs::write(mroot.join("cgroup.subtree_control"), "+memory");
            let _ = std::fs::create_dir_all(mroot.join("virtperf"));
            let _ = std::fs::write(mroot.join("virtperf/cgroup.subtree_control"), "+memory");
        }
        let dir = mroot.join(&rel);
        if std::fs::create_dir_all(&dir).is_ok() {
            let file = if mv2 { "memory.max" } else { "memory.limit_in_bytes" };
            limited = std::fs::write(dir.join(file), bytes.to_string()).is_ok();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    if let (Some(cap), Some((croot, cv2))) = (limits.cpu_cap, controller_dir("cpu")) {
        if cv2 {
            let _ = std::fs::write(croot.join("cgroup.subtree_control"), "+cpu");
            let _ = std::fs::create_dir_all(croot.join("virtperf"));
            let _ = std::fs::write(croot.join("virtperf/cgroup.subtree_control"), "+cpu");
        }
        let dir = croot.join(&rel);
        let quota = ((cap * CFS_PERIOD_US as f64).round() as u64).max(1000);
        let capped = std::fs::create_dir_all(&dir).is_ok()
            && if cv2 {
                std::fs::write(dir.join("cpu.max"), format!("{quota} {CFS_PERIOD_US}")).is_ok()
            } else {
                std::fs::write(dir.join("cpu.cfs_period_us"), CFS_PERIOD_US.to_string()).is_ok()
                    && std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).is_ok()
            };
        if !capped {
            return None;
        }
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    if let Some((froot, false)) = controller_dir("freezer") {
        let fdir = froot.join(&rel);
        if !dirs.contains(&fdir) {
            dirs.push(fdir);
        }
    }
    let mut files = Vec::new();
    for d in &dirs {
        std::fs::create_dir_all(d).ok()?;
        files.push(std::fs::OpenOptions::new().write(true).open(d.join("cgroup.procs")).ok()?);
    }
    let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: write(2) of a static buffer to descriptors the parent keeps open until the spawn;
    // "0" moves the calling (child) process. Async-signal-safe; `fds` was allocated before the
    // fork and is only read.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Some((cgroup_probe(id)?, files, rel, limited))
}

/// Kills every process in cgroup `rel` (below a cgroup mount), waits until it is empty, removes
/// it and forgets its ledger entry.
pub fn kill_cgroup(ledger: &mut Ledger, rel: &str) {
    crate::host::remove_cgroup(rel, 100);
    ledger.forget(&crate::ledger::Entry::Cgroup { rel: rel.to_string() });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_probe_counts_threads_that_exited() {
        // A thread burns ~100 ms and exits: the process's clock keeps it (schedstat of the live
        // tasks did not).
        // A CPU-time target, not a wall-time one: on a busy host the thread gets its 100 ms later.
        let me = CpuProbe::Proc(std::process::id());
        let before = me.read_ns().unwrap();
        let spent = std::thread::spawn(|| {
            let mut x = 0u64;
            while thread_cpu_ns() < 100_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            thread_cpu_ns()
        })
        .join()
        .unwrap();
        let after = me.read_ns().unwrap();
        assert!(
            after - before >= spent,
            "an exited thread's {spent} ns of CPU are kept: {} ns",
            after - before
        );
    }

    /// This thread's CPU time (ns).
    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// The time process `pid`'s (single) thread has run on a CPU, from the scheduler's own
    /// statistics (`/proc/PID/schedstat`, ns): a second clock to hold the probes against.
    fn sched_ns(pid: u32) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .expect("/proc/PID/schedstat")
    }

    /// How far two CPU clocks of one task may be apart when read: the scheduler's statistics of a
    /// task running on another CPU are brought up to date at its next tick (≤ 10 ms at HZ = 100).
    const SLACK: u64 = 10_000_000;

    /// Reads `probe` around a window in which the busy child `pid` runs 100 ms of CPU by the
    /// scheduler's count (however long that takes on a busy host): (probe's reading, the
    /// scheduler's inside it, the scheduler's around it). The probe's must lie between the two.
    fn bracket(probe: &CpuProbe, pid: u32) -> (u64, u64, u64) {
        let outer0 = sched_ns(pid);
        let a = probe.read_ns().unwrap();
        let inner0 = sched_ns(pid);
        let t0 = Instant::now();
        while sched_ns(pid) < inner0 + 100_000_000 && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let inner1 = sched_ns(pid);
        let b = probe.read_ns().unwrap();
        let outer1 = sched_ns(pid);
        (b - a, inner1 - inner0, outer1 - outer0)
    }

    /// A process in a cgroup named after it is read through that cgroup, at the named level
    /// (libvirt puts QEMU in an `emulator` child of the domain's group), in each hierarchy this
    /// host mounts; one in a shared cgroup is not.
    #[test]
    fn a_process_in_its_own_cgroup_is_read_through_it() {
        let mut tried = 0;
        for (mount, v2) in [(cpuacct_mount(), false), (cgroup2_mount(), true)] {
            let Some(mount) = mount else { continue };
            let name = format!("vptest-own-{}-{}", std::process::id(), u8::from(v2));
            let (group, leaf) = (mount.join(&name), mount.join(&name).join("emulator"));
            if std::fs::create_dir_all(&leaf).is_err() {
                crate::host::unit_skip(&format!(
                    "{}: cannot make a cgroup there (needs root)",
                    mount.display()
                ));
                continue;
            }
            let mut child = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
            let joined = std::fs::write(leaf.join("cgroup.procs"), child.id().to_string());
            let shared = own_cgroup_probe(std::process::id(), &name);
            let probe = own_cgroup_probe(child.id(), &name);
            let other = own_cgroup_probe(child.id(), "some-other-domain");
            let window = match (&probe, &joined) {
                (Some(p), Ok(())) => Some(bracket(p, child.id())),
                _ => None,
            };
            child.kill().unwrap();
            child.wait().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let _ = std::fs::remove_dir(&leaf);
            let _ = std::fs::remove_dir(&group);
            if joined.is_err() {
                crate::host::unit_skip(&format!(
                    "{}: cannot move a process into a cgroup there",
                    mount.display()
                ));
                continue;
            }
            assert!(shared.is_none() && other.is_none(), "{shared:?} {other:?}");
            let want = if v2 { group.join("cpu.stat") } else { group.join("cpuacct.usage") };
            match &probe {
                Some(CpuProbe::CgroupV1(p)) if !v2 && *p == want => {}
                Some(CpuProbe::CgroupV2(p)) if v2 && *p == want => {}
                p => panic!("{p:?}, wanted {}", want.display()),
            }
            // The cgroup's count against the scheduler's around it (cgroup v2 counts in µs).
            let (used, inner, outer) = window.unwrap();
            assert!(
                used + SLACK >= inner && used <= outer + SLACK,
                "the cgroup counted {used} ns while the loop ran {inner}–{outer} ns by the scheduler's count"
            );
            tried += 1;
        }
        if tried == 0 {
            crate::host::unit_skip("no cgroup hierarchy with CPU accounting could be used here");
        }
    }

    #[test]
    fn proc_probe_reads_a_busy_process() {
        let mut child = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        let p = CpuProbe::Proc(child.id());
        let (used, inner, outer) = bracket(&p, child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(inner >= 100_000_000, "the loop ran {inner} ns");
        assert!(
            used + SLACK >= inner && used <= outer + SLACK,
            "the probe counted {used} ns while the loop ran {inner}–{outer} ns by the scheduler's count"
        );
    }
}
