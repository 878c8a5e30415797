//! A run's events, counted over its timed region (docs/explain.md): what the report's model
//! multiplies by each environment's per-event costs to explain an overhead.
//!
//! Three sources, each where the kernel the agent runs on allows it:
//! - **perf_event_open** on the run's thread with `inherit`, so every thread and process the
//!   workload starts is counted too: the kernel's software events (minor and major page faults,
//!   context switches, CPU migrations, the task clock) and, when the host sent tracepoint ids for
//!   this very kernel (its boot id matches: natively, in a container), system calls
//!   (`raw_syscalls:sys_enter`), forks, execs and signals delivered. gVisor has no
//!   perf_event_open; a guest kernel numbers its tracepoints otherwise.
//! - **getrusage** (the agent and its reaped children): faults, voluntary and involuntary
//!   switches, block I/O and CPU time — every kernel here has it, gVisor and guests included.
//! - **/proc/self/io**: bytes and read/write calls (sockets and pipes as well as files) and the
//!   bytes that reached a block device.
//!
//! The counters cost time (an enabled syscall tracepoint sends every system call of the host
//! through the slow path), so the orchestrator asks for them only on unstored passes (warm-ups);
//! they are opened disabled before the run, enabled when its timed region begins, and closed
//! with the pass. Written with the `perf-event2` crate, the rest by hand: a handful of reads.

use std::collections::BTreeMap;

use perf_event::events::{Software, Tracepoint};
use perf_event::{Builder, Counter};
use serde_json::{json, Value};
use virtperf_proto::Counting;

/// Counters for one run: open before it, [`Counters::start`] when its timed region begins,
/// [`Counters::finish`] after it.
pub struct Counters {
    perf: Vec<(&'static str, Counter)>,
    /// Events the agent asked for and could not count, with why (said with the counts).
    missing: Vec<String>,
    start: Option<Snapshot>,
    /// A network run: the packets of its network namespace's interfaces are counted too.
    network: bool,
    /// What switching them on and off counts by itself (`own_counts`), taken from every count.
    own: BTreeMap<&'static str, u64>,
    /// `Counting::rusage_only`: getrusage alone, on a timed trial.
    light: bool,
    /// [`Counters::count_from`]: the counters' values then, taken from the ones at the end.
    base: BTreeMap<&'static str, u64>,
    /// Counted from a [`Counters::count_from`] mark (with or without perf counters to base).
    marked: bool,
    /// [`Counters::count_until`]: the counters' values, the other sources and the span then.
    ended: Option<Ended>,
    /// When what is counted began, on the monotonic clock (ns).
    began_ns: u64,
}

/// What [`Counters::count_until`] read.
struct Ended {
    values: Vec<(&'static str, std::io::Result<u64>)>,
    snapshot: Snapshot,
    elapsed_ns: u64,
}

/// The kernel's software events the model uses, under the names the report gives them.
const SOFTWARE: [(&str, Software); 5] = [
    ("faults_minor", Software::PAGE_FAULTS_MIN),
    ("faults_major", Software::PAGE_FAULTS_MAJ),
    ("switches", Software::CONTEXT_SWITCHES),
    ("migrations", Software::CPU_MIGRATIONS),
    ("task_clock_ns", Software::TASK_CLOCK),
];

/// Tracepoint names the host may send ids for (`Counting::tracepoints`), as the report names
/// them: (name, tracefs path, filter). `tasks` counts every new task and `threads` those made
/// with CLONE_THREAD (a filter on the same tracepoint), so processes are their difference: a
/// thread costs a fraction of a fork.
///
/// System calls are counted in total and by class (x86-64 numbers), each class priced by its
/// own microbenchmark: a path looked up or a directory read costs more than getppid — or than a
/// descriptor's own fcntl — in a sandbox whose file system sits behind a gofer.
pub const TRACEPOINTS: [(&str, &str, Option<&str>); 13] = [
    ("syscalls", "raw_syscalls/sys_enter", None),
    // A descriptor's own calls: close, fstat, lseek, dup, dup2, fcntl, flock, fsync, fdatasync,
    // ftruncate, fchdir, fchmod, fchown, fstatfs, fadvise64, fallocate, dup3, close_range.
    ("syscalls_fd", "raw_syscalls/sys_enter", Some("id == 3 || id == 5 || id == 8 || id == 32 || id == 33 || id == 72 || id == 73 || id == 74 || id == 75 || id == 77 || id == 81 || id == 91 || id == 93 || id == 138 || id == 221 || id == 285 || id == 292 || id == 436")),
    // A path looked up: stat, lstat, access, truncate, chdir, rename, mkdir, rmdir, link,
    // unlink, symlink, readlink, chmod, chown, lchown, utime, mknod, statfs, utimes, mkdirat,
    // mknodat, fchownat, futimesat, newfstatat, unlinkat, renameat, linkat, symlinkat,
    // readlinkat, fchmodat, faccessat, utimensat, renameat2, statx, faccessat2.
    ("syscalls_path", "raw_syscalls/sys_enter", Some("id == 4 || id == 6 || id == 21 || id == 76 || id == 80 || id == 82 || id == 83 || id == 84 || id == 86 || id == 87 || id == 88 || id == 89 || id == 90 || id == 92 || id == 94 || id == 132 || id == 133 || id == 137 || id == 235 || id == 258 || id == 259 || id == 260 || id == 261 || id == 262 || id == 263 || id == 264 || id == 265 || id == 266 || id == 267 || id == 268 || id == 269 || id == 280 || id == 316 || id == 332 || id == 439")),
    // A file opened (its path looked up, and a descriptor made of it): open, creat, openat,
    // openat2. Apart from the lookups: gVisor's gofer opens the host's file for each, where a
    // stat may be answered from the attributes the Sentry holds.
    ("syscalls_open", "raw_syscalls/sys_enter", Some("id == 2 || id == 85 || id == 257 || id == 437")),
    // getdents, getdents64.
    ("syscalls_dir", "raw_syscalls/sys_enter", Some("id == 78 || id == 217")),
    // read, write, pread64, pwrite64, readv, writev, sendfile, splice, preadv, pwritev,
    // copy_file_range.
    ("syscalls_io", "raw_syscalls/sys_enter", Some("id == 0 || id == 1 || id == 17 || id == 18 || id == 19 || id == 20 || id == 40 || id == 275 || id == 295 || id == 296 || id == 326")),
    // mmap, mprotect, munmap, brk, mremap, madvise.
    ("syscalls_mem", "raw_syscalls/sys_enter", Some("id == 9 || id == 10 || id == 11 || id == 12 || id == 25 || id == 28")),
    // A descriptor's attributes asked through a path call: newfstatat and statx with
    // AT_EMPTY_PATH (4096) — how glibc since 2.33 makes `fstat`, and Rust's std `metadata` — look
    // nothing up and are descriptor calls, which the number alone files as path lookups (35 % of
    // find's newfstatat, 60 % of tar's). raw_syscalls' filter cannot read an argument; these
    // tracepoints (CONFIG_FTRACE_SYSCALLS) name theirs. Without them the class stays a lookup.
    ("fstats", "syscalls/sys_enter_newfstatat", Some("flag & 4096")),
    ("fstats_statx", "syscalls/sys_enter_statx", Some("flags & 4096")),
    ("tasks", "task/task_newtask", None),
    ("threads", "task/task_newtask", Some("clone_flags & 65536")),
    ("execs", "sched/sched_process_exec", None),
    ("signals", "signal/signal_deliver", None),
];

pub use virtperf_record::mechanisms::{model_events, Mechanism, MECHANISMS};

/// PERF_EVENT_IOC_SET_FILTER: `_IOW('$', 6, char *)` (linux/perf_event.h).
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

/// Sets an ftrace filter on a tracepoint counter.
fn set_filter(c: &Counter, filter: &str) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::ffi::CString::new(filter).map_err(std::io::Error::other)?;
    // SAFETY: the counter's open fd and a NUL-terminated string that outlives the call.
    if unsafe { libc::ioctl(c.as_raw_fd(), PERF_EVENT_IOC_SET_FILTER, f.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// This kernel's boot id (`/proc/sys/kernel/random/boot_id`): tracepoint ids hold for it only.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// The host kernel's ids of [`TRACEPOINTS`], read from tracefs: where it is mounted, or mounted
/// for the moment in a mount namespace of a thread of its own (made private first, so nothing
/// propagates to the host's; the namespace ends with the thread). Err says why there are none.
pub fn host_tracepoint_ids() -> Result<BTreeMap<String, u64>, String> {
    let read = |root: &std::path::Path| -> BTreeMap<String, u64> {
        TRACEPOINTS
            .iter()
            .filter_map(|(name, path, _)| {
                let s = std::fs::read_to_string(root.join("events").join(path).join("id")).ok()?;
                Some((name.to_string(), s.trim().parse().ok()?))
            })
            .collect()
    };
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let ids = read(std::path::Path::new(root));

        if !ids.is_empty() {
            return Ok(ids);
        }
    }
    std::thread::spawn(move || -> Result<BTreeMap<String, u64>, String> {
        let err =
            |what: &str| format!("tracefs is not mounted and {what}: {}", std::io::Error::last_os_error());
        // SAFETY: unshare on this thread only (CLONE_NEWNS implies CLONE_FS: its own root and
        // cwd); no pointers.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return Err(err("a mount namespace to mount it in cannot be made (root is needed)"));
        }
        let c = |s: &str| std::ffi::CString::new(s).map_err(|e| e.to_string());
        let (root, none, tracefs) = (c("/")?, c("none")?, c("tracefs")?);
        // SAFETY: C strings that outlive the call; MS_REC|MS_PRIVATE changes propagation only.
        if unsafe {
            libc::mount(
                none.as_ptr(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        } != 0
        {
            return Err(err("this thread's mounts cannot be made private"));
        }
        let dir = std::env::temp_dir().join(format!("virtperf-tracefs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let target = c(&dir.to_string_lossy())?;
        // SAFETY: as above; the mount lives in this thread's namespace only.
        let ids = if unsafe {
            libc::mount(tracefs.as_ptr(), target.as_ptr(), tracefs.as_ptr(), 0, std::ptr::null())
        } == 0
        {
            let ids = read(&dir);
            // SAFETY: unmounts what was mounted just above.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            Ok(ids)
        } else {
            Err(err("mounting it failed"))
        };
        let _ = std::fs::remove_dir(&dir);
        ids.and_then(|m| {
            if m.is_empty() {
                Err("tracefs has none of raw_syscalls, sched, signal's events".into())
            } else {
                Ok(m)
            }
        })
    })
    .join()
    .map_err(|_| "reading the tracepoint ids panicked".to_string())?
}

/// A counter with the kernel included: switches and tracepoints happen in the kernel, and
/// counted in user mode alone they read 0. Where that is not allowed (perf_event_paranoid 2
/// without CAP_PERFMON: a container's root), page faults — taken in user mode — are counted in
/// user mode; every other event is missing, with the reason.
fn counter(
    event: impl perf_event::events::Event + Clone,
    user_mode_will_do: bool,
) -> std::io::Result<Counter> {
    let kernel = Builder::new(event.clone()).observe_self().any_cpu().inherit(true).include_kernel().build();
    match kernel {
        Err(e) if user_mode_will_do => {
            Builder::new(event).observe_self().any_cpu().inherit(true).build().map_err(|_| e)
        }
        r => r,
    }
}

/// The perf counters `spec` asks for, disabled, on the calling thread; and what could not be
/// opened, with why.
fn open_perf(spec: &Counting) -> (Vec<(&'static str, Counter)>, Vec<String>) {
    let mut perf = Vec::new();
    let mut missing = Vec::new();
    for (name, ev) in SOFTWARE {
        match counter(ev, name.starts_with("faults_")) {
            Ok(c) => perf.push((name, c)),
            Err(e) => missing.push(format!("{name}: perf_event_open: {e}")),
        }
    }
    let same_kernel = !spec.boot_id.is_empty() && boot_id().as_deref() == Some(spec.boot_id.as_str());
    for (name, _, filter) in TRACEPOINTS {
        match spec.tracepoints.get(name) {
            Some(&id) if same_kernel => {
                match counter(Tracepoint::with_id(id), false)
                    .and_then(|c| filter.map_or(Ok(()), |f| set_filter(&c, f)).map(|()| c))
                {
                    Ok(c) => perf.push((name, c)),
                    Err(e) => missing.push(format!("{name}: perf_event_open: {e}")),
                }
            }
            Some(_) => {
                missing.push(format!("{name}: not the host's kernel (its tracepoint ids do not hold here)"))
            }
            None => missing.push(format!("{name}: the host has no tracepoint for it")),
        }
    }
    (perf, missing)
}

impl Counters {
    /// Opens the counters `spec` asks for, disabled, on the calling thread (the run's: threads
    /// and processes it creates inherit them). `network`: the run has a peer, so the packets its
    /// network namespace's interfaces send and receive are counted (elsewhere they would be the
    /// host's other traffic).
    pub fn open(spec: &Counting, network: bool) -> Counters {
        let light = spec.rusage_only;
        let (perf, missing) = if light { (Vec::new(), Vec::new()) } else { open_perf(spec) };
        let mut c = Counters {
            perf,
            missing,
            start: None,
            network,
            own: BTreeMap::new(),
            light,
            base: BTreeMap::new(),
            marked: false,
            ended: None,
            began_ns: 0,
        };
        if !light {
            c.own = c.own_counts();
        }
        c
    }

    /// The timed region begins: counters on, the other sources read.
    pub fn start(&mut self) {
        if self.start.is_some() {
            return;
        }
        self.start = Some(self.switch_on());
        self.began_ns = crate::clock::now_ns();
    }

    /// What is counted begins again here (a server ready, its set-up behind it): the counters'
    /// values now are taken from the ones at the end. Not a reset: a reset keeps what children
    /// that have exited (an initdb) left in the counter. Before [`Counters::start`], starts.
    pub fn count_from(&mut self) {
        if self.start.is_none() {
            self.start();
            return;
        }
        self.base = self.read_counters().into_iter().filter_map(|(name, v)| Some((name, v.ok()?))).collect();
        self.marked = true;
        self.start = Some(Snapshot::now(self.network, self.light));
        self.began_ns = crate::clock::now_ns();
    }

    /// What is counted ends here (a server told to stop, its shutdown ahead): every source read
    /// now, while the server's processes are alive (an inherited counter reads its live
    /// children's counts too), and the counters disabled. The first call counts.
    pub fn count_until(&mut self) {
        if self.start.is_none() || self.ended.is_some() {
            return;
        }
        let values = self.read_counters();
        let elapsed_ns = crate::clock::now_ns().saturating_sub(self.began_ns);
        self.ended = Some(Ended { values, snapshot: Snapshot::now(self.network, self.light), elapsed_ns });
        self.stop();
    }

    /// Resets and enables every counter, then reads the other sources: [`Counters::start`]'s
    /// work, and the dry cycle's that measures what it costs.
    fn switch_on(&mut self) -> Snapshot {
        for (_, c) in &mut self.perf {
            let _ = c.reset();
            let _ = c.enable();
        }
        Snapshot::now(self.network, self.light)
    }

    /// Disables every counter: the first call after [`Counters::start`] ends what is counted
    /// (the agent calls it as soon as the workload returns, before its own bookkeeping; a second
    /// call, as `finish` makes, changes nothing).
    pub fn stop(&mut self) {
        for (_, c) in &mut self.perf {
            let _ = c.disable();
        }
    }

    /// What switching the counters on and off counts by itself: each counter sees the resets,
    /// enables and reads of the sources after it is on, and the disables before it is off — a
    /// few dozen system calls, which a 4 ms run under a sandbox's 24 µs per call would book as
    /// 20 % of its cost. Measured once when the counters open, with nothing in between, and
    /// subtracted. (Not after the run: a reset leaves the counts of children that have exited.)
    fn own_counts(&mut self) -> BTreeMap<&'static str, u64> {
        let _ = self.switch_on();
        self.stop();
        self.read_counters().into_iter().filter_map(|(name, v)| Some((name, v.ok()?))).collect()
    }

    /// Every perf counter's value now, or why it could not be read.
    fn read_counters(&mut self) -> Vec<(&'static str, std::io::Result<u64>)> {
        self.perf.iter_mut().map(|(name, c)| (*name, c.read())).collect()
    }

    /// The timed region has ended: the counts over it (`{"name": count, …, "missing": [...]}`),
    /// or Null when it never began. `elapsed_ns` is the region's length on the agent's clock.
    pub fn finish(mut self, elapsed_ns: u64) -> Value {
        self.stop();
        let Some(start) = self.start.take() else { return Value::Null };
        let (values, end, elapsed_ns) = match self.ended.take() {
            Some(e) => (e.values, e.snapshot, e.elapsed_ns),
            None => {
                // A thread's counts join its parent's when the thread is torn down, a moment
                // after a join has returned (the join waits on the tid the kernel clears first):
                // wait for that. (getrusage sums its threads whenever asked: a timed trial does
                // not wait.)
                if !self.light {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                let values = self.read_counters();
                // Counted from a mark: the span is the mark's, not the run's.
                let elapsed_ns = if !self.marked {
                    elapsed_ns
                } else {
                    crate::clock::now_ns().saturating_sub(self.began_ns)
                };
                (values, Snapshot::now(self.network, self.light), elapsed_ns)
            }
        };
        let mut out = serde_json::Map::new();
        out.insert("elapsed_ns".into(), json!(elapsed_ns));
        for (name, v) in values {
            match v {
                Ok(v) => {
                    // Switching on counts itself once; a count from a later mark does not.
                    let from = match self.base.get(name) {
                        Some(b) => *b,
                        None => self.own.get(name).copied().unwrap_or(0),
                    };
                    out.insert(name.into(), json!(v.saturating_sub(from)));
                }
                Err(e) => self.missing.push(format!("{name}: read: {e}")),
            }
        }
        if self.marked {
            out.insert("counted_from_mark".into(), json!(true));
        }
        if self.own.values().any(|v| *v > 0) {
            out.insert("counters_own".into(), json!(self.own));
        }
        for (k, v) in end.minus(&start) {
            out.insert(k.into(), json!(v));
        }
        if !self.missing.is_empty() {
            out.insert("missing".into(), json!(self.missing));
        }
        Value::Object(out)
    }
}

/// Packets and bytes of this network namespace's interfaces from `/proc/net/dev` (the kernel the
/// agent runs on: the host's natively and in a container, gVisor's netstack, a guest's own):
/// received and sent, summed over the interfaces; loopback's once (each of its packets is both).
fn net_dev(text: &str) -> Vec<(&'static str, u64)> {
    let (mut rx_p, mut rx_b, mut tx_p, mut tx_b) = (0u64, 0u64, 0u64, 0u64);
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else { continue };
        let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() < 10 {
            continue;
        }
        // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets …
        if name.trim() != "lo" {
            rx_b += f[0];
            rx_p += f[1];
        }
        tx_b += f[8];
        tx_p += f[9];
    }
    vec![("net_rx_packets", rx_p), ("net_rx_bytes", rx_b), ("net_tx_packets", tx_p), ("net_tx_bytes", tx_b)]
}

/// What getrusage and /proc/self/io say at one moment.
struct Snapshot(BTreeMap<&'static str, u64>);

impl Snapshot {
    fn now(network: bool, light: bool) -> Snapshot {
        let mut m = BTreeMap::new();
        let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
        for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
            // SAFETY: getrusage fills the struct we own; both `who` values are valid on Linux.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::getrusage(who, &mut ru) } != 0 {
                continue;
            }
            for (k, v) in [
                ("ru_minflt", ru.ru_minflt as u64),
                ("ru_majflt", ru.ru_majflt as u64),
                ("ru_nvcsw", ru.ru_nvcsw as u64),
                ("ru_nivcsw", ru.ru_nivcsw as u64),
                ("ru_inblock", ru.ru_inblock as u64),
                ("ru_oublock", ru.ru_oublock as u64),
                ("ru_utime_ns", us(ru.ru_utime)),
                ("ru_stime_ns", us(ru.ru_stime)),
            ] {
                *m.entry(k).or_insert(0) += v;
            }
        }
        if light {
            return Snapshot(m);
        }
        if let Ok(io) = std::fs::read_to_string("/proc/self/io") {
            for line in io.lines() {
                let Some((k, v)) = line.split_once(':') else { continue };
                let name = match k.trim() {
                    "rchar" => "io_rchar",
                    "wchar" => "io_wchar",
                    "syscr" => "io_syscr",
                    "syscw" => "io_syscw",
                    "read_bytes" => "io_read_bytes",
                    "write_bytes" => "io_write_bytes",
                    _ => continue,
                };
                if let Ok(v) = v.trim().parse() {
                    m.insert(name, v);
                }
            }
        }
        if network {
            if let Ok(dev) = std::fs::read_to_string("/proc/net/dev") {
                m.extend(net_dev(&dev));
            }
        }
        Snapshot(m)
    }

    fn minus(&self, earlier: &Snapshot) -> Vec<(&'static str, u64)> {
        self.0.iter().filter_map(|(k, v)| earlier.0.get(k).map(|e| (*k, v.saturating_sub(*e)))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_ids() -> BTreeMap<String, u64> {
        host_tracepoint_ids().unwrap_or_else(|e| {
            eprintln!("skipped: tracepoints: {e}");
            BTreeMap::new()
        })
    }

    #[test]
    fn counts_what_the_run_did_and_says_what_it_could_not() {
        let spec =
            Counting { boot_id: boot_id().unwrap_or_default(), tracepoints: host_ids(), rusage_only: false };
        let mut c = Counters::open(&spec, false);
        c.start();
        // 64 fresh pages, touched: 64 minor faults at least (where the kernel counts them). Mapped
        // here: the allocator may hand back pages another test already touched.
        let len = 64 * 4096;
        let map = crate::micro::Map::new(len).unwrap();
        for i in (0..len).step_by(4096) {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_volatile(map.ptr.add(i), 1) };
        }
        drop(map);
        // 1 000 system calls, and a thread that exits before the counts are read.
        for _ in 0..1000 {
            // SAFETY: getppid has no preconditions.
            std::hint::black_box(unsafe { libc::getppid() });
        }
        std::thread::spawn(|| std::hint::black_box(1)).join().unwrap();
        // The file system's classes: 100 path lookups, 50 descriptor pairs (fcntl + close), and
        // 10 directory listings (2 getdents64 each at least, with an open and a close).
        let root = std::ffi::CString::new("/").unwrap();
        for _ in 0..100 {
            // SAFETY: a stat struct we own, a NUL-terminated path.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            assert_eq!(unsafe { libc::stat(root.as_ptr(), &mut st) }, 0);
        }
        // SAFETY: a directory descriptor closed below.
        let d = unsafe { libc::open(root.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(d >= 0);
        for _ in 0..50 {
            // SAFETY: duplicates the descriptor above, closed at once.
            unsafe { libc::close(libc::fcntl(d, libc::F_DUPFD_CLOEXEC, 0)) };
        }
        // 40 fstats of it: glibc since 2.33 makes each a newfstatat(d, "", AT_EMPTY_PATH), an
        // older one an fstat — a descriptor call either way, for the model.
        for _ in 0..40 {
            // SAFETY: a stat struct we own, the descriptor above.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            assert_eq!(unsafe { libc::fstat(d, &mut st) }, 0);
        }
        // SAFETY: closes the descriptor opened above.
        unsafe { libc::close(d) };
        for _ in 0..10 {
            assert!(std::fs::read_dir("/").unwrap().count() > 0);
        }
        // A process, reaped.
        // SAFETY: the child calls only _exit; the parent reaps it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: waits for the child just made.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let out = c.finish(1);
        let obj = out.as_object().unwrap();
        eprintln!("counted: {out}");
        assert_eq!(obj["elapsed_ns"], 1);
        // getrusage is everywhere: the faults show there at least.
        assert!(obj["ru_minflt"].as_u64().unwrap() >= 60, "{out}");
        match obj.get("faults_minor").and_then(Value::as_u64) {
            Some(f) => assert!((60..10_000).contains(&f), "{out}"),
            None => eprintln!("skipped: perf's faults: {:?}", obj.get("missing")),
        }
        match obj.get("syscalls").and_then(Value::as_u64) {
            // 1 000 getppid and the ~290 file system calls above; the thread's clone, mmap,
            // munmap, futex and the counters' own ioctls on top.
            Some(s) => {
                assert!((1270..1540).contains(&s), "syscalls {s}: {out}");
                // The classes: getppid is none of them; the thread's mmap is memory's.
                assert!(obj["syscalls_mem"].as_u64().unwrap() >= 1, "{out}");
                let class = |k: &str| obj[k].as_u64().unwrap();
                // 100 stats (+ 40 fstats: glibc's newfstatat); 11 opens (10 listings and the
                // descriptor's), a class of their own.
                assert!((100..190).contains(&class("syscalls_path")), "{out}");
                assert!((11..20).contains(&class("syscalls_open")), "{out}");
                // 50 fcntl + 50 close + 11 closes (+ 40 fstats, with an older glibc).
                assert!((111..220).contains(&class("syscalls_fd")), "{out}");
                assert!((20..40).contains(&class("syscalls_dir")), "{out}");
                let ev = model_events(&out, false);
                assert!(ev["syscalls"] >= 1000.0 && ev["syscalls"] < (s - 290) as f64, "{ev:?}");
                // The 40 fstats: counted apart where the host names newfstatat's flags, and
                // then an event of their own, not lookups.
                match obj.get("fstats").and_then(Value::as_u64) {
                    Some(f) => {
                        let statx = obj.get("fstats_statx").and_then(Value::as_u64).unwrap_or(0);
                        // An older glibc's fstat is fstat(2) itself: a descriptor call.
                        let old_glibc = f + statx == 0 && class("syscalls_fd") >= 151;
                        assert!(old_glibc || (40..60).contains(&(f + statx)), "{out}");
                        assert_eq!(ev["fstats"], (f + statx) as f64, "{ev:?}");
                        assert!((100..150).contains(&(ev["syscalls_path"] as u64)), "{ev:?}: {out}");
                    }
                    None => eprintln!("skipped: fstats apart: {:?}", obj.get("missing")),
                }
                assert_eq!((obj["tasks"].as_u64(), obj["threads"].as_u64()), (Some(2), Some(1)), "{out}");
            }
            None => {
                let why = obj.get("missing").map(|m| m.to_string()).unwrap_or_default();
                assert!(why.contains("syscalls"), "no syscall count and no reason: {out}");
                eprintln!("skipped: syscall count: {why}");
            }
        }
        // Nothing between start and finish: the counters' own resets, enables, reads of
        // getrusage and /proc/self/io, and disables (35 system calls here) are taken out.
        let mut c = Counters::open(&spec, false);
        c.start();
        let out = c.finish(1);
        if let Some(s) = out.get("syscalls").and_then(Value::as_u64) {
            assert!(s < 10, "an empty region counted {s} system calls: {out}");
            assert!(out["counters_own"]["syscalls"].as_u64().unwrap() >= 10, "{out}");
        }
        // A counter never started gives nothing.
        assert_eq!(Counters::open(&Counting::default(), false).finish(1), Value::Null);
    }

    #[test]
    fn a_server_counts_from_ready_to_stop_and_its_live_children_with_it() {
        let spec =
            Counting { boot_id: boot_id().unwrap_or_default(), tracepoints: host_ids(), rusage_only: false };
        let getppid = |n: usize| {
            for _ in 0..n {
                // SAFETY: getppid has no preconditions.
                std::hint::black_box(unsafe { libc::getppid() });
            }
        };
        let mut c = Counters::open(&spec, false);
        c.start();
        // The set-up: not counted.
        getppid(5000);
        c.count_from();
        getppid(1000);
        // A worker process the server started, alive when the count ends (nginx's, postgres's
        // backends): its 300 calls count, its exit after the mark does not.
        // Two pipes: the child says it is done on one and waits on the other (one pipe both
        // ways lets the child read back its own byte).
        let (mut done, mut go) = ([0; 2], [0; 2]);
        // SAFETY: each array has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(done.as_mut_ptr()) + libc::pipe(go.as_mut_ptr()) }, 0);
        // SAFETY: the child calls only getppid, write, read and _exit; the parent reaps it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            getppid(300);
            let mut b = [0u8; 1];
            // SAFETY: writes and reads one byte of a buffer we own on the pipes' ends.
            unsafe {
                libc::write(done[1], b.as_ptr().cast(), 1);
                libc::read(go[0], b.as_mut_ptr().cast(), 1);
                libc::_exit(0)
            };
        }
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into a buffer we own: the child has made its calls.
        assert_eq!(unsafe { libc::read(done[0], b.as_mut_ptr().cast(), 1) }, 1);
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.count_until();
        // The shutdown: not counted; a second mark changes nothing.
        getppid(7000);
        c.count_until();
        // SAFETY: one byte to the child, then it is reaped; every end closed.
        unsafe {
            libc::write(go[1], b.as_ptr().cast(), 1);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            for fd in done.into_iter().chain(go) {
                libc::close(fd);
            }
        }
        let out = c.finish(1);
        eprintln!("counted: {out}");
        // The span is the marks', on the monotonic clock: 20 ms at least, not the 1 ns given.
        let elapsed = out["elapsed_ns"].as_u64().unwrap();
        assert!((20_000_000..5_000_000_000).contains(&elapsed), "{out}");
        assert_eq!(out["counted_from_mark"], true, "{out}");
        match out.get("syscalls").and_then(Value::as_u64) {
            // 1 000 + the child's 300, its write and the fork, the pipe, the read, the sleep,
            // the marks' reads: within 1 300..1 400, never near the 12 000 around them.
            Some(s) => assert!((1300..1400).contains(&s), "syscalls {s}: {out}"),
            None => eprintln!("skipped: syscall count: {:?}", out.get("missing")),
        }
        if let Some(t) = out.get("tasks").and_then(Value::as_u64) {
            assert_eq!(t, 1, "the fork after the mark: {out}");
        }
    }

    #[test]
    fn packets_come_from_the_namespaces_interfaces() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:  1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
veth0: 6400     100    0    0    0     0          0         0      640      10    0    0    0     0       0          0\n";
        let m: BTreeMap<_, _> = net_dev(dev).into_iter().collect();
        assert_eq!((m["net_rx_packets"], m["net_rx_bytes"]), (100, 6400));
        assert_eq!((m["net_tx_packets"], m["net_tx_bytes"]), (20, 1640));
        // A network run counts them; any other run leaves them out (they would be the host's).
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut c = Counters::open(&Counting::default(), true);
        c.start();
        for _ in 0..50 {
            udp.send_to(b"x", udp.local_addr().unwrap()).unwrap();
        }
        let out = c.finish(1);
        assert!(out["net_tx_packets"].as_u64().unwrap() >= 50, "{out}");
        let mut c = Counters::open(&Counting::default(), false);
        c.start();
        assert!(c.finish(1).get("net_tx_packets").is_none());
    }

    /// A timed trial's counts: getrusage's alone, no counter opened, nothing waited for.
    #[test]
    fn rusage_only_counts_faults_without_counters() {
        let spec = Counting { rusage_only: true, ..Counting::default() };
        let mut c = Counters::open(&spec, true);
        assert!(c.perf.is_empty());
        c.start();
        let map = crate::micro::Map::new(64 * 4096).unwrap();
        for i in (0..64 * 4096).step_by(4096) {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_volatile(map.ptr.add(i), 1) };
        }
        drop(map);
        let out = c.finish(1);
        assert!(out["ru_minflt"].as_u64().unwrap() >= 60, "{out}");
        // Nothing waited for (the full counters wait 5 ms for exited threads' counts): the
        // fastest of three finishes, so a hog's preemption of one does not decide.
        let fastest = (0..3)
            .map(|_| {
                let mut c = Counters::open(&spec, false);
                c.start();
                let t0 = std::time::Instant::now();
                c.finish(1);
                t0.elapsed()
            })
            .min()
            .unwrap();
        assert!(fastest < std::time::Duration::from_millis(5), "finish waited {fastest:?}");
        for k in ["syscalls", "faults_minor", "io_rchar", "net_rx_packets", "missing"] {
            assert!(out.get(k).is_none(), "{k} in {out}");
        }
    }

    #[test]
    fn ids_of_another_kernel_are_not_used() {
        let spec = Counting {
            boot_id: "not-this-kernel".into(),
            tracepoints: [("syscalls".into(), 1)].into(),
            rusage_only: false,
        };
        let mut c = Counters::open(&spec, false);
        c.start();
        let out = c.finish(1);
        assert!(out.get("syscalls").is_none(), "{out}");
        assert!(out["missing"].to_string().contains("not the host's kernel"), "{out}");
    }
}
