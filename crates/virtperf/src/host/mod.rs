//! The host layer: small facts and actions about the machine virtperf runs on, used by every
//! other module and using none of them.

pub mod command;
pub mod confine;
pub mod facts;
pub mod panics;

pub use facts::{facts, HostFacts, KvmFacts};

use std::path::{Path, PathBuf};
use std::process::Command;

/// Creates `dir` (and its parents) for virtperf's own files, readable by its owner only, or checks
/// that an existing one is safe: owned by this user and writable by nobody else. Everything
/// virtperf writes and later reads back or executes (ledgers, guest init scripts, kernels, UML's
/// memory file) lives below such a directory, so another user cannot plant or swap a file there
/// (`/tmp/virtperf-UID` made in advance by someone else is refused, not used).
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        }
        Err(e) => Err(e),
        Ok(m) => {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let me = unsafe { libc::geteuid() };
            let unsafe_dir = |why: String| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{} {why}: virtperf keeps files it executes there; remove it, or choose another \
                         directory (VIRTPERF_STATE_DIR, VIRTPERF_CACHE)",
                        dir.display()
                    ),
                ))
            };
            if !m.is_dir() {
                return unsafe_dir("is not a directory (or is a symbolic link)".into());
            }
            if m.uid() != me {
                return unsafe_dir(format!("belongs to uid {}, not to this user ({me})", m.uid()));
            }
            if m.mode() & 0o022 != 0 {
                return unsafe_dir(format!("is writable by others (mode {:o})", m.mode() & 0o7777));
            }
            Ok(())
        }
    }
}

/// The host's TSC frequency in kHz: CPUID leaf 0x15 where the CPU states it (TSC/crystal ratio
/// and crystal frequency), else measured against `CLOCK_MONOTONIC_RAW` over three 20 ms windows
/// (median; ≈ 0.01 %). None when the TSC is not invariant (`constant_tsc` and `nonstop_tsc` in
/// /proc/cpuinfo): its rate then follows the core's, and no single figure is right.
///
/// Not /proc/cpuinfo's `cpu MHz`: that is the core's current frequency, which differs from the
/// TSC's on any host that scales its clock.
pub fn tsc_khz() -> Option<u64> {
    let flags = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags = flags.lines().find(|l| l.starts_with("flags"))?;
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    if !(has("constant_tsc") && has("nonstop_tsc")) {
        return None;
    }
    cpuid_tsc_khz().or_else(measure_tsc_khz)
}

#[cfg(target_arch = "x86_64")]
fn cpuid_tsc_khz() -> Option<u64> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 0 says whether leaf 0x15 does.
    #[allow(unused_unsafe)]
    let (max, l15) = unsafe { (__cpuid(0).eax, __cpuid_count(0x15, 0)) };
    if max < 0x15 || l15.eax == 0 || l15.ebx == 0 || l15.ecx == 0 {
        return None;
    }
    Some(u64::from(l15.ecx) * u64::from(l15.ebx) / u64::from(l15.eax) / 1000)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_tsc_khz() -> Option<u64> {
    None
}

#[cfg(target_arch = "x86_64")]
fn measure_tsc_khz() -> Option<u64> {
    let raw_ns = || {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
        ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
    };
    // SAFETY: RDTSC has no preconditions on x86_64.
    let tsc = || unsafe { std::arch::x86_64::_rdtsc() } as i128;
    let mut khz: Vec<i128> = (0..3)
        .map(|_| {
            let (t0, c0) = (raw_ns(), tsc());
            std::thread::sleep(std::time::Duration::from_millis(20));
            let (c1, t1) = (tsc(), raw_ns());
            (c1 - c0) * 1_000_000 / (t1 - t0).max(1)
        })
        .collect();
    khz.sort();
    u64::try_from(khz[1]).ok().filter(|&k| k > 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn measure_tsc_khz() -> Option<u64> {
    None
}

/// Where the bytes of disk workloads land on the host: `$VIRTPERF_SCRATCH` (a directory on the
/// file system to measure), else `/var/tmp/virtperf` for root and `/var/tmp/virtperf-UID` for
/// others. Not the state directory: `/run` is a tmpfs on most hosts, and a guest's disk image
/// there would be memory, not a disk (and refuse O_DIRECT, which `cache=none` needs).
pub fn scratch_root() -> PathBuf {
    if let Some(d) = std::env::var_os("VIRTPERF_SCRATCH").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    match unsafe { libc::geteuid() } {
        0 => PathBuf::from("/var/tmp/virtperf"),
        uid => PathBuf::from(format!("/var/tmp/virtperf-{uid}")),
    }
}

/// Bytes free for this user on the file system holding `dir` (or its nearest existing parent).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let mut d = dir;
    while !d.exists() {
        d = d.parent()?;
    }
    let c = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes one struct we own; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// The file system type of the mount holding `path` (`ext4`, `tmpfs`...), from
/// /proc/self/mountinfo: the longest mount point that contains it.
pub fn fs_type(path: &Path) -> Option<String> {
    let mut p = path.to_path_buf();
    while !p.exists() {
        p = p.parent()?.to_path_buf();
    }
    let p = std::fs::canonicalize(&p).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, String)> = None;
    for l in info.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(mp), Some(dash)) = (f.get(4), f.iter().position(|x| *x == "-")) else { continue };
        if p.starts_with(mp) && best.as_ref().is_none_or(|b| mp.len() >= b.0) {
            best = Some((mp.len(), f.get(dash + 1)?.to_string()));
        }
    }
    best.map(|b| b.1)
}

/// Size of the host's last-level cache in bytes (sysfs: the highest-level cache of CPU 0).
pub fn llc_bytes() -> Option<u64> {
    let mut best: Option<(u32, u64)> = None;
    for e in std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?.flatten() {
        let d = e.path();
        let read = |f: &str| std::fs::read_to_string(d.join(f)).ok().map(|s| s.trim().to_string());
        let (Some(level), Some(size), Some(kind)) = (read("level"), read("size"), read("type")) else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        let Ok(level) = level.parse::<u32>() else { continue };
        let bytes = match size.strip_suffix('K') {
            Some(k) => k.parse::<u64>().ok().map(|k| k << 10),
            None => match size.strip_suffix('M') {
                Some(m) => m.parse::<u64>().ok().map(|m| m << 20),
                None => size.parse().ok(),
            },
        };
        if let Some(b) = bytes {
            if best.is_none_or(|(l, _)| level > l) {
                best = Some((level, b));
            }
        }
    }
    best.map(|b| b.1)
}

/// Looks a program up in PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Path::new(prog).is_file().then(|| PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|p| p.is_file())
}

/// First line of `prog --version`.
pub fn version_of(prog: &str) -> Option<String> {
    let out = command::output_within(Command::new(prog).arg("--version"), command::SHORT).ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().next().map(|l| l.trim().to_string())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Number of CPUs the host has online.
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// CPUs as a list the kernel and OCI runtimes read (`0,1`).
pub fn cpuset_list(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// Makes `cmd`'s process start on `cpus` only (its threads and children inherit the mask): the
/// `cpuset` of native's agent and of UML's kernel.
pub fn pin_on_spawn(cmd: &mut std::process::Command, cpus: Vec<usize>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: sched_setaffinity on the calling (child) thread with a stack cpu_set_t; nothing is
    // allocated between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Parses a cpuset list like `0`, `0-1`, `0,2-3` and checks every CPU exists here (in the host's
/// [`facts`]); `last` is the host's last CPU (one CPU on any host, away from CPU 0: what an
/// experiment meant for every machine writes).
pub fn check_cpuset(s: &str) -> Result<Vec<usize>, String> {
    let online = facts().cpus;
    if s.trim() == "last" {
        return Ok(vec![online.saturating_sub(1)]);
    }
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let (a, b): (usize, usize) = match (a.parse(), b.parse()) {
            (Ok(a), Ok(b)) if a <= b => (a, b),
            _ => return Err(format!("`{s}` is not a CPU list like 0, 0-1 or 0,2 (or last)")),
        };
        if b >= online {
            return Err(format!("CPU {b} does not exist: this host has CPUs 0-{}", online - 1));
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

/// Start time (clock ticks since boot) of a live process, or None when it does not exist.
pub fn process_start(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: fields start after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Spawns `cmd` from a thread that lasts as long as this process. PR_SET_PDEATHSIG fires when
/// the *thread* that forked a child ends, not the process: a child that must die with virtperf,
/// and only then, is forked here, so that an instance started by a thread of its own (a start of
/// many at once: a thread each, ended once they are up) outlives that thread. The caller waits
/// for the spawn: whatever its `pre_exec` steps refer to stays open meanwhile.
pub fn spawn_lasting(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    type Job = (std::process::Command, std::sync::mpsc::Sender<std::io::Result<std::process::Child>>);
    static SPAWNER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let started = std::thread::Builder::new().name("virtperf-spawn".into()).spawn(move || {
            for (mut cmd, back) in rx {
                let _ = back.send(cmd.spawn());
            }
        });
        started.ok().map(|_| tx)
    });
    let Some(tx) = spawner else { return cmd.spawn() };
    let (back, result) = std::sync::mpsc::channel();
    let job = std::mem::replace(cmd, std::process::Command::new("/nonexistent"));
    if let Err(std::sync::mpsc::SendError((mut job, _))) = tx.send((job, back)) {
        return job.spawn();
    }
    result.recv().unwrap_or_else(|_| Err(std::io::Error::other("the spawning thread ended")))
}

/// Mount points of cgroup hierarchies (v1 controllers and the v2 unified tree).
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let Ok(s) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    s.lines()
        .filter(|l| l.contains(" - cgroup ") || l.contains(" - cgroup2 "))
        .filter_map(|l| l.split_whitespace().nth(4).map(PathBuf::from))
        .collect()
}

/// The CPU time every process of the host has run so far, in ns: the root cgroup's counter —
/// the v1 `cpuacct.usage` (ns) where the controller is mounted, else the v2 root's `cpu.stat`
/// `usage_usec`. None when neither can be read. `/proc/stat`'s ticks (10 ms) would be too coarse
/// for a start of a few ms.
pub fn cpu_busy_ns() -> Option<u64> {
    let mounts = cgroup_mounts();
    let read = |p: PathBuf| std::fs::read_to_string(p).ok();
    mounts.iter().find_map(|m| read(m.join("cpuacct.usage")).and_then(|s| s.trim().parse().ok())).or_else(
        || {
            mounts.iter().find_map(|m| {
                let s = read(m.join("cpu.stat"))?;
                let us: u64 = s.lines().find_map(|l| l.strip_prefix("usage_usec "))?.trim().parse().ok()?;
                Some(us.saturating_mul(1000))
            })
        },
    )
}

/// Resumes a cgroup that a run paused (v1 freezer, v2 `cgroup.freeze`): a frozen process does not
/// die of SIGKILL until it is thawed, so every teardown thaws first.
pub fn thaw(dir: &Path) {
    if dir.join("freezer.state").exists() {
        let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    }
    if dir.join("cgroup.freeze").exists() {
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    }
}

pub fn netns_path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Where `ip netns` keeps its named namespaces' files.
pub const NETNS_DIR: &str = "/run/netns";

/// Whether `name` is a namespace name this tool makes: `vp` and a digit, no path.
pub fn netns_is_ours(name: &str) -> bool {
    name.strip_prefix("vp").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        && !name.contains('/')
}

/// Deletes a namespace this tool made (names start with `vp` and a digit). Idempotent.
pub fn delete_netns(name: &str) {
    if netns_is_ours(name) && netns_path(name).exists() {
        let _ = sh("ip", &["netns", "delete", name]);
    }
}

/// Runs `cmd` to completion with no input and returns its stdout; the error names `what` and
/// carries the command's stderr. The tool's one runner of external commands.
pub fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    run_within(cmd, what, command::SHORT)
}

/// [`run`] with a deadline of its own (a package manager's download: [`command::LONG`]).
pub fn run_within(cmd: &mut Command, what: &str, limit: std::time::Duration) -> Result<String, String> {
    let out = command::output_within(cmd, limit).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => format!("{what}: {e}"),
        _ => format!("{what}: cannot start: {e}"),
    })?;
    if !out.status.success() {
        return Err(format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`run`] of `prog args…` when only success matters.
pub fn sh(prog: &str, args: &[&str]) -> Result<(), String> {
    run(Command::new(prog).args(args), &format!("`{prog} {}`", args.join(" "))).map(drop)
}

/// Stops every process in cgroup `rel` (relative to each cgroup mount), thawing it first (a frozen
/// process does not die of SIGKILL), and removes the cgroup; tries up to `attempts` times, 20 ms
/// apart, while processes remain. Only cgroups this tool makes are touched: `virtperf` itself
/// (removed when empty; its own processes are never killed) and those below it. Everything inside
/// an instance's cgroup was started by that instance (a guest's host helpers outlive their parent).
pub fn remove_cgroup(rel: &str, attempts: u32) {
    if !(rel == "virtperf" || rel.starts_with("virtperf/")) || rel.contains("..") {
        return;
    }
    let mut killed = std::collections::BTreeSet::new();
    for attempt in 1..=attempts.max(1) {
        let mut busy = false;
        for m in cgroup_mounts() {
            let dir = m.join(rel);
            thaw(&dir);
            if rel != "virtperf" {
                if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        busy = true;
                        killed.insert(pid);
                        // SAFETY: kill(2) of a process in a cgroup this tool created; no memory involved.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
            let _ = std::fs::remove_dir(&dir);
        }
        let gone = rel == "virtperf" || !cgroup_mounts().iter().any(|m| m.join(rel).exists());
        if (!busy && gone) || attempt == attempts {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if !killed.is_empty() {
        remove_shm_of(&killed);
    }
}

/// Removes the System V shared memory segments that the processes `killed` created and that no
/// process holds any more. A process killed with SIGKILL leaves its segments behind (PostgreSQL's
/// interlock segment: its shutdown removes it, a kill does not); the ones in the host's IPC
/// namespace would outlive the run. Only a segment whose creator (its `cpid`) is a process this
/// tool killed is touched, and only once it is attached nowhere (`nattch` 0).
pub fn remove_shm_of(killed: &std::collections::BTreeSet<i32>) -> Vec<i32> {
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap_or_default();
    let mut removed = Vec::new();
    for id in orphaned_segments(&table, killed) {
        // SAFETY: shmctl(2) IPC_RMID of a segment id read from /proc; no buffer is passed (null
        // is allowed for IPC_RMID) and no memory of this process is involved.
        if unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) } == 0 {
            removed.push(id);
        }
    }
    removed
}

/// The ids in `/proc/sysvipc/shm`'s `table` of segments created by one of `killed` and attached
/// nowhere. The columns are found by the header's names (`shmid`, `cpid`, `nattch`).
fn orphaned_segments(table: &str, killed: &std::collections::BTreeSet<i32>) -> Vec<i32> {
    let mut lines = table.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    let col = |name: &str| header.split_whitespace().position(|c| c == name);
    let (Some(id), Some(cpid), Some(nattch)) = (col("shmid"), col("cpid"), col("nattch")) else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
            let (id, cpid, nattch) = (num(id)?, num(cpid)?, num(nattch)?);
            (nattch == 0 && i32::try_from(cpid).is_ok_and(|c| killed.contains(&c)))
                .then(|| i32::try_from(id).ok())
                .flatten()
        })
        .collect()
}

pub use virtperf_report::files::{write_atomic, write_stdout};

// ---- libvirt's leftovers: what the ledger's sweep and env/libvirt.rs both undo (here, below
// both, so the ledger does not reach up into env/).

/// Prefix of every tap lent to a daemon (the sweep deletes only links with it).
pub const LENT_TAP_PREFIX: &str = "vpl";

/// The network namespace a local libvirt daemon runs in: its pid's, else ours.
pub fn daemon_netns_pid() -> u32 {
    for f in ["/run/libvirtd.pid", "/run/libvirt/virtqemud.pid", "/var/run/libvirtd.pid"] {
        if let Some(pid) = std::fs::read_to_string(f).ok().and_then(|s| s.trim().parse::<u32>().ok()) {
            if Path::new(&format!("/proc/{pid}/ns/net")).exists() {
                return pid;
            }
        }
    }
    std::process::id()
}

/// Deletes a tap a killed run left lent (the sweep's half of [`Entry::DaemonTap`]).
pub fn sweep_lent_tap(name: &str) {
    if name.starts_with(LENT_TAP_PREFIX) && name.len() <= 15 {
        let pid = daemon_netns_pid();
        let _ = command::status_within(
            Command::new("nsenter")
                .arg(format!("--net=/proc/{pid}/ns/net"))
                .args(["ip", "link", "del", name]),
            command::SHORT,
        );
    }
}

/// Powers a domain off (the sweep's and the teardown's half of [`Entry::Domain`]): a transient
/// one disappears with it, a defined one stays defined.
pub fn destroy_domain(uri: &str, name: &str) {
    let _ = command::status_within(
        Command::new("virsh").args(["-q", "-c", uri, "destroy", name]),
        command::SHORT,
    );
}

/// A unit test's part that this host cannot run: said and left out — unless the suite runs where
/// everything it needs was installed (`make test` sets `VIRTPERF_UNIT_REQUIRE=1` after installing
/// the packages): then a missing requirement fails the test instead of passing it quietly.
#[cfg(test)]
pub fn unit_skip(why: &str) {
    assert!(
        std::env::var_os("VIRTPERF_UNIT_REQUIRE").is_none(),
        "required here (VIRTPERF_UNIT_REQUIRE: make test installed what this needs), yet: {why}"
    );
    eprintln!("skipped: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's CPU counter holds at least what this thread spent between two readings (it
    /// counts every process; ns where the root cgroup has one).
    #[test]
    fn host_cpu_counts_at_least_this_threads_work() {
        let thread_ns = || {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes one timespec we own.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let Some(before) = cpu_busy_ns() else {
            return unit_skip("no root cgroup CPU counter (cpuacct.usage, cpu.stat) here");
        };
        let t0 = thread_ns();
        let mut x = 0u64;
        while thread_ns() - t0 < 30_000_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let mine = thread_ns() - t0;
        let host = cpu_busy_ns().unwrap() - before;
        // The counter catches up with a running thread at its next tick (≤ 10 ms at HZ = 100).
        assert!(host + 10_000_000 >= mine, "the host counted {host} ns, this thread alone ran {mine} ns");
    }

    #[test]
    fn wake_latency_counts_every_round_in_order() {
        let w = wake_latency_with(std::time::Duration::from_millis(2), 5);
        assert_eq!((w.idle_ms, w.rounds), (2, 5));
        // A thread cannot run before it was woken, nor (on any host this suite runs on) a
        // second after it.
        assert!(w.median_us > 0.0 && w.median_us <= w.max_us && w.max_us < 1e6, "{w:?}");
    }

    #[test]
    fn only_segments_of_killed_creators_attached_nowhere_are_orphans() {
        let table = "       key      shmid perms                  size  cpid  lpid nattch   uid\n\
                              0         10   600                 56   100   100      0     0\n\
                              0         11   600                 56   100   100      2     0\n\
                              0         12   600                 56   200   200      0     0\n\
                              0         13   600                 56   300   100      0     0\n";
        let killed = [100, 300].into_iter().collect();
        // 11 is still attached; 12's creator was not killed by us; 13's creator was (its last
        // user need not be).
        assert_eq!(orphaned_segments(table, &killed), vec![10, 13]);
        assert!(orphaned_segments("", &killed).is_empty());
        assert!(
            orphaned_segments("key shmid perms size\n0 10 600 56\n", &killed).is_empty(),
            "no cpid column"
        );
    }

    #[test]
    fn a_segment_its_creator_left_is_removed_and_no_other() {
        // A segment made here and attached nowhere: what a killed creator leaves. This process
        // stands for the creator (its pid is the segment's cpid).
        // SAFETY: shmget(2) with no memory passed; the segment is removed below.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) };
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        let present = || {
            let t = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
            t.lines().skip(1).any(|l| l.split_whitespace().nth(1) == Some(id.to_string().as_str()))
        };
        assert!(present());
        // Another creator's: untouched (pid 1 never made this one).
        assert!(!remove_shm_of(&[1].into_iter().collect()).contains(&id));
        assert!(present());
        assert!(remove_shm_of(&[std::process::id() as i32].into_iter().collect()).contains(&id));
        assert!(!present(), "removed");
    }

    #[test]
    fn cpusets() {
        assert_eq!(check_cpuset("0").unwrap(), vec![0]);
        assert_eq!(check_cpuset("last").unwrap(), vec![facts().cpus - 1]);
        assert_eq!(cpuset_list(&check_cpuset("0,0-1").unwrap()), "0,0,1");
        assert!(check_cpuset("9999").unwrap_err().contains("does not exist"));
        assert!(check_cpuset("1-0").is_err());
        assert!(check_cpuset("x").is_err());
    }
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn tsc_frequency_counts_the_tsc_against_the_clock() {
        let Some(khz) = tsc_khz() else { return };
        // An independent count: TSC ticks over a 200 ms sleep, timed by CLOCK_MONOTONIC.
        let t0 = std::time::Instant::now();
        // SAFETY: RDTSC has no preconditions on x86_64.
        let c0 = unsafe { std::arch::x86_64::_rdtsc() };
        std::thread::sleep(std::time::Duration::from_millis(200));
        // SAFETY: as above.
        let c1 = unsafe { std::arch::x86_64::_rdtsc() };
        let expect = (c1 - c0) as f64 / t0.elapsed().as_secs_f64() / 1000.0;
        assert!((khz as f64 / expect - 1.0).abs() < 0.002, "{khz} kHz vs {expect:.0} kHz counted");
    }

    #[test]
    fn scratch_facts_of_the_host() {
        assert!(free_bytes(Path::new("/")).is_some_and(|b| b > 0));
        assert!(free_bytes(Path::new("/nonexistent/deeper")).is_some(), "the nearest parent's");
        assert_eq!(fs_type(Path::new("/proc/self")).as_deref(), Some("proc"));
        assert!(scratch_root().is_absolute());
    }

    #[test]
    fn private_dirs_are_made_0700_and_unsafe_ones_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        ensure_private_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_private_dir(&d).unwrap_err().to_string();
        assert!(e.contains("writable by others") && e.contains("VIRTPERF_STATE_DIR"), "{e}");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(t.path(), &link).unwrap();
        assert!(ensure_private_dir(&link).unwrap_err().to_string().contains("symbolic link"));
    }
}

/// How late this host wakes a thread that waited on another's message after an idle spell: what
/// the host clock of an armed trial reads on top of its work when the result comes after tens of
/// milliseconds (the `go` calibration's no-ops answer within microseconds and do not see it).
/// Measured at a run's start: a 20 ms idle before the result's arrival put 100–280 µs on native's
/// host span over its own timer (1 ms idle: 14–28 µs), 6–1130 µs in a bare two-thread loop on a
/// virtual machine whose idle vCPUs halt into the hypervisor.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct WakeLatency {
    pub idle_ms: u64,
    pub rounds: usize,
    pub median_us: f64,
    pub max_us: f64,
}

/// Idle spell and rounds of [`wake_latency`] (0.2 s at a run's start).
const WAKE_IDLE: std::time::Duration = std::time::Duration::from_millis(20);
const WAKE_ROUNDS: usize = 10;

/// [`WakeLatency`] over [`WAKE_ROUNDS`] spells of [`WAKE_IDLE`]: a thread sleeps, then sends the
/// instant it sends at to one blocked on a channel, which notes how much later it ran.
pub fn wake_latency() -> WakeLatency {
    wake_latency_with(WAKE_IDLE, WAKE_ROUNDS)
}

fn wake_latency_with(idle: std::time::Duration, rounds: usize) -> WakeLatency {
    use std::time::Instant;
    // On two CPUs where there are two (the sender on the last, the woken thread on the first):
    // an armed trial's result crosses from the environment's CPU to one that idled meanwhile, and
    // a wake on the sender's own, awake CPU costs nothing (one process's two threads, unpinned:
    // median 19 µs, max 132 µs, against 100-280 µs of native's spans).
    let last = host_cpus().saturating_sub(1);
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    let sender = std::thread::spawn(move || {
        pin_this_thread(last);
        for _ in 0..rounds {
            std::thread::sleep(idle);
            if tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
    let receiver = std::thread::spawn(move || {
        pin_this_thread(0);
        rx.iter().map(|sent| sent.elapsed().as_secs_f64() * 1e6).collect::<Vec<f64>>()
    });
    let _ = sender.join();
    let mut late = receiver.join().unwrap_or_default();
    late.sort_by(f64::total_cmp);
    WakeLatency {
        idle_ms: idle.as_millis() as u64,
        rounds: late.len(),
        median_us: late.get(late.len() / 2).copied().unwrap_or(0.0),
        max_us: late.last().copied().unwrap_or(0.0),
    }
}

/// Keeps the calling thread on `cpu` (best effort: a cpuset that excludes it leaves it where
/// it is).
fn pin_this_thread(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it (cpu is below the
    // host's CPU count); sched_setaffinity(0) reads it for the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Where runs say they are measuring on this host: one file for the whole machine, whatever
/// state directory each run uses (`/run/lock` for root, else the user's runtime directory).
fn measuring_lock_path() -> PathBuf {
    if is_root() {
        PathBuf::from("/run/lock/virtperf-measuring.lock")
    } else {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("virtperf-measuring-{uid}.lock"))
    }
}

/// Says that this process measures on this host (an exclusive `flock` held until it exits), or
/// which process already does: another run's load lands in this one's figures, and this one's in
/// its. None when this process holds it now, or when the lock cannot be made (said nowhere: a
/// warning's means, not a requirement).
pub fn claim_measuring() -> Option<u32> {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    static HELD: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    if HELD.get().is_some() {
        return None;
    }
    let path = measuring_lock_path();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut text = String::new();
        let _ = f.read_to_string(&mut text);
        return text.trim().parse().ok().filter(|&p: &u32| process_start(p).is_some()).or(Some(0));
    }
    let _ = f.set_len(0).and_then(|_| f.rewind()).and_then(|_| write!(f, "{}", std::process::id()));
    let _ = HELD.set(f);
    None
}
