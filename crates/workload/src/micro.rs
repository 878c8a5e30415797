//! Microbenchmarks of the mechanisms an isolation layer adds cost to (seeds 000 and 001 explain
//! overheads by traps and page tables; HyperBench and lmbench measure them one by one): `cpuid`,
//! clock reads, page faults, `mmap`, context switches, process creation, signal delivery, pipe and
//! UNIX-socket round trips, and a memory-latency pointer chase.
//!
//! Each times a batch of operations with the guest clock (here) and the whole batch with the
//! host's (`on_host_clock`, as every fixed-work workload), reporting ns per operation. Each checks
//! that its operations happened (fault counts, round-trip counters, a chase that ends where it must),
//! so a loop the compiler removed or a kernel that short-circuited fails instead of reporting 0 ns.
//! Hand-written because they run inside every environment from the agent's one static binary
//! (lmbench and stress-ng are not in a busybox guest, and their output would need parsing).

use std::hint::black_box;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{json, Value};
use virtperf_proto::Sample;

use crate::error::OsError;
use crate::params::{ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

/// How a microbenchmark fails.
#[derive(Debug, thiserror::Error)]
pub enum MicroError {
    /// An instruction of another architecture (`cpuid`, `rdtsc` off x86_64).
    #[error("{0} exists only on x86_64")]
    NotOnThisCpu(&'static str),
    #[error(transparent)]
    Os(#[from] OsError),
    /// The operations did not happen as they must: a loop removed, a kernel that short-cut.
    #[error("{0}")]
    Check(String),
    #[error(transparent)]
    Param(#[from] crate::params::ParamError),
}

impl crate::error::Kinded for MicroError {
    fn kind(&self) -> crate::error::FailureKind {
        match self {
            MicroError::NotOnThisCpu(_) => crate::error::FailureKind::Unsupported,
            MicroError::Os(e) => e.kind(),
            MicroError::Check(_) => crate::error::FailureKind::Check,
            MicroError::Param(_) => crate::error::FailureKind::Other,
        }
    }
}

fn check(why: impl Into<String>) -> MicroError {
    MicroError::Check(why.into())
}

/// What one microbenchmark measured: operations, their time on this clock, detail.
pub struct Timed {
    pub ops: u64,
    pub ns: u64,
    pub extra: Value,
}

/// One microbenchmark: a name, what it exercises, its parameters, and the timed body.
pub struct Micro {
    kind: &'static str,
    summary: &'static str,
    params: &'static [ParamSpec],
    metric: &'static [MetricSpec],
    /// Operations a run with these parameters performs (for the host-clock figure).
    ops: fn(&Params) -> u64,
    /// The parameter counting a trial's operations: calibrated by the orchestrator to
    /// `target_time` when left out.
    count: &'static str,
    /// Runs the operations; calls `ctx.begin()` right before the timed loop.
    body: fn(&Params, &RunCtx) -> Result<Timed, MicroError>,
}

impl Workload for Micro {
    fn family(&self) -> crate::workload::Family {
        if self.kind == "memlat" {
            crate::workload::Family::Memory
        } else {
            crate::workload::Family::System
        }
    }
    fn kind(&self) -> &'static str {
        self.kind
    }
    fn summary(&self) -> &'static str {
        self.summary
    }
    fn params(&self) -> &'static [ParamSpec] {
        self.params
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        self.metric
    }
    fn marks_timed_region(&self) -> bool {
        true
    }
    fn on_host_clock(&self, p: &Params, host_ns: u64) -> Vec<Sample> {
        let n = (self.ops)(p).max(1) as f64;
        vec![sample(
            &format!("{}{}", self.metric[0].name, crate::workload::HOST_SUFFIX),
            host_ns as f64 / n,
            "ns/op",
        )]
    }
    fn memory_needed(&self, p: &Params) -> Option<u64> {
        match self.kind {
            "pagefault" => p.u64("pages").ok().map(|n| n * PAGE),
            "memlat" => p.u64("size").ok(),
            _ => None,
        }
    }
    fn calibrates(&self) -> Option<&'static str> {
        Some(self.count)
    }
    fn fit_memory(&self, key: &str, budget: u64) -> Option<Value> {
        (self.kind == "pagefault" && key == "pages").then(|| json!((budget / PAGE).max(16)))
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        crate::workload::counted(p, self.count)?;
        let t = (self.body)(p, ctx)?;
        if t.ops == 0 {
            return Err(check("no operation was performed").into());
        }
        Ok(Output {
            samples: vec![sample(self.metric[0].name, t.ns as f64 / t.ops as f64, "ns/op")],
            extra: t.extra,
        })
    }
}

pub(crate) const PAGE: u64 = 4096;

/// The per-operation metrics of every microbenchmark here (the report's mechanisms section).
pub const METRIC_NAMES: &[&str] = &[
    "cpuid_time",
    "clock_time",
    "rdtsc_time",
    "pagefault_time",
    "mmap_time",
    "memlat_time",
    "ctxswitch_time",
    "pipe_rr_time",
    "unix_rr_time",
    "fileop_time",
    "fdop_time",
    "stat_time",
    "open_time",
    "fstat_time",
    "readdir_time",
    "fork_time",
    "exec_time",
    "signal_time",
];

/// The operation count of most microbenchmarks; calibrated to `target_time` when left out.
const fn iterations(help: &'static str) -> ParamSpec {
    ParamSpec { name: "iterations", kind: ParamKind::Int { min: 1, max: 1 << 34 }, default: None, help }
}

const fn metric(name: &'static str, help: &'static str) -> MetricSpec {
    MetricSpec { name, unit: "ns/op", better: Better::Lower, help }
}

fn iters(p: &Params) -> u64 {
    p.u64("iterations").unwrap_or(1)
}

fn elapsed_ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

fn plain(ops: u64, ns: u64) -> Timed {
    Timed { ops, ns, extra: Value::Null }
}

// ---- cpuid ---------------------------------------------------------------------------------

fn cpuid_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    #[cfg(target_arch = "x86_64")]
    {
        ctx.begin();
        let t0 = Instant::now();
        let mut acc = 0u32;
        for i in 0..n {
            // Leaf 0 (vendor) and 1 (features) alternately: neither is cached by any CPU.
            let r = std::arch::x86_64::__cpuid((i & 1) as u32);
            acc = acc.wrapping_add(black_box(r.eax));
        }
        let ns = elapsed_ns(t0);
        black_box(acc);
        Ok(plain(n, ns))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, ctx);
        Err(MicroError::NotOnThisCpu("cpuid"))
    }
}

pub static CPUID: Micro = Micro {
    kind: "cpuid",
    summary: "the CPUID instruction: never leaves the CPU natively, exits to the hypervisor under KVM, emulated under TCG",
    params: &[iterations("CPUID instructions per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("cpuid_time", "time per CPUID instruction")],
    ops: iters,
    count: "iterations",
    body: cpuid_body,
};

// ---- clocks --------------------------------------------------------------------------------

/// The kernel's clocksource, where the environment shows it (not in gVisor or most containers'
/// sysfs): `tsc` reads in the vDSO, `kvm-clock` too, `hpet`/`acpi_pm` trap on every read.
pub fn clocksource() -> String {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn clock_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let mut last = (0i64, 0i64);
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: clock_gettime writes one timespec we own.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        if rc != 0 {
            return Err(OsError::last("clock_gettime").into());
        }
        let now = (ts.tv_sec, ts.tv_nsec);
        if now < last {
            return Err(check("CLOCK_MONOTONIC went backwards"));
        }
        last = black_box(now);
    }
    let ns = elapsed_ns(t0);
    Ok(Timed { ops: n, ns, extra: json!({"clocksource": clocksource()}) })
}

pub static CLOCK: Micro = Micro {
    kind: "clock",
    summary: "clock_gettime(CLOCK_MONOTONIC): a vDSO read where the clocksource allows (tsc, kvm-clock), a trap or a system call elsewhere; the clocksource is stored with the trial",
    params: &[iterations("clock reads per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("clock_time", "time per clock_gettime call")],
    ops: iters,
    count: "iterations",
    body: clock_body,
};

fn rdtsc_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    #[cfg(target_arch = "x86_64")]
    {
        ctx.begin();
        let t0 = Instant::now();
        let mut last = 0u64;
        let mut back = 0u64;
        for _ in 0..n {
            // SAFETY: RDTSC has no preconditions (user-mode TSC reads are allowed unless the
            // kernel set CR4.TSD, in which case the process gets SIGSEGV — not on Linux defaults).
            let t = unsafe { std::arch::x86_64::_rdtsc() };
            back += u64::from(t < last);
            last = black_box(t);
        }
        let ns = elapsed_ns(t0);
        Ok(Timed { ops: n, ns, extra: json!({"backwards": back}) })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, ctx);
        Err(MicroError::NotOnThisCpu("rdtsc"))
    }
}

pub static RDTSC: Micro = Micro {
    kind: "rdtsc",
    summary: "the RDTSC instruction: no exit under KVM by default, a helper call under TCG",
    params: &[iterations("TSC reads per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("rdtsc_time", "time per RDTSC instruction")],
    ops: iters,
    count: "iterations",
    body: rdtsc_body,
};

// ---- memory management ---------------------------------------------------------------------

fn minflt() -> u64 {
    // SAFETY: getrusage fills one rusage we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD counts this thread's faults only.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt as u64
}

/// An anonymous private mapping of `len` bytes, unmapped on drop.
/// A fresh private anonymous mapping, unmapped on drop: pages no one has touched yet.
pub(crate) struct Map {
    pub(crate) ptr: *mut u8,
    len: usize,
}

impl Map {
    pub(crate) fn new(len: usize) -> Result<Map, OsError> {
        // SAFETY: a fresh anonymous mapping; no address hint, no file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(OsError::last(format!("mmap of {len} bytes")));
        }
        Ok(Map { ptr: ptr.cast(), len })
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn pagefault_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let pages = p.u64("pages")?;
    let map = Map::new((pages * PAGE) as usize)?;
    // Small pages: one fault per page is what is measured (a huge page would serve 512).
    // SAFETY: advice on the mapping we own.
    unsafe { libc::madvise(map.ptr.cast(), map.len, libc::MADV_NOHUGEPAGE) };
    let f0 = minflt();
    ctx.begin();
    let t0 = Instant::now();
    for i in 0..pages as usize {
        // SAFETY: i * PAGE < len: inside the mapping; a volatile write so it is not elided.
        unsafe { std::ptr::write_volatile(map.ptr.add(i * PAGE as usize), 1u8) };
    }
    let ns = elapsed_ns(t0);
    let faults = minflt().saturating_sub(f0);
    // gVisor's Sentry keeps no per-thread fault count (0); any other kernel must show one per page.
    if faults == 0 {
        return Ok(Timed {
            ops: pages,
            ns,
            extra: json!({"minor_faults": null, "note": "this kernel does not count minor faults (getrusage): one fault per page assumed"}),
        });
    }
    if faults < pages * 9 / 10 {
        return Err(check(format!(
            "{pages} fresh pages touched but only {faults} minor faults counted: the memory was not faulted page by page (huge pages, or a kernel that pre-populates)"
        )));
    }
    Ok(Timed {
        ops: pages,
        ns,
        extra: json!({"minor_faults": faults, "faults_per_s": faults as f64 / (ns.max(1) as f64 / 1e9)}),
    })
}

pub static PAGEFAULT: Micro = Micro {
    kind: "pagefault",
    summary: "first touch of fresh anonymous 4 KiB pages: one minor fault each (nested paging or shadow page tables in a VM, the Sentry's memory manager in gVisor)",
    params: &[ParamSpec {
        name: "pages",
        kind: ParamKind::Int { min: 16, max: 1 << 24 },
        default: None,
        help: "pages touched per trial (16384 = 64 MiB) [default: calibrated to target_time, within 3/4 of the environment's memory]",
    }, crate::workload::TARGET_TIME],
    metric: &[metric("pagefault_time", "time per page fault (first write to a fresh page)")],
    ops: |p| p.u64("pages").unwrap_or(1),
    count: "pages",
    body: pagefault_body,
};

fn mmap_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..n {
        let m = Map::new(PAGE as usize)?;
        // SAFETY: the first byte of the page just mapped; touching it makes the kernel build the
        // page table entry, which munmap then tears down.
        unsafe { std::ptr::write_volatile(m.ptr, 1u8) };
        drop(m);
    }
    Ok(plain(n, elapsed_ns(t0)))
}

pub static MMAP: Micro = Micro {
    kind: "mmap",
    summary: "mmap of one anonymous page, a write to it, munmap: a system call, a fault and a TLB shootdown per operation",
    params: &[iterations("map-touch-unmap cycles per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("mmap_time", "time per mmap + first write + munmap")],
    ops: iters,
    count: "iterations",
    body: mmap_body,
};

fn memlat_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let size = p.u64("size")? as usize;
    let loads = p.u64("loads")?;
    const LINE: usize = 64;
    let n = (size / LINE).max(2);
    // One pointer per cache line, linked in a random cycle (Sattolo's algorithm): every load
    // depends on the one before and hits a line the prefetchers cannot guess.
    let mut next: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        next.swap(i, j);
    }
    let mut chain = vec![0usize; n * (LINE / 8)];
    for (i, nx) in next.iter().enumerate() {
        chain[i * (LINE / 8)] = nx * (LINE / 8);
    }
    let mut at = 0usize;
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..loads {
        at = chain[at];
    }
    let ns = elapsed_ns(t0);
    black_box(at);
    // A full cycle visits every line once and returns to the start: the chase really walked.
    let mut probe = 0usize;
    for _ in 0..n {
        probe = chain[probe];
    }
    if probe != 0 {
        return Err(check("the pointer chain is not one cycle"));
    }
    Ok(Timed { ops: loads, ns, extra: json!({"lines": n, "bytes": n * LINE}) })
}

pub static MEMLAT: Micro = Micro {
    kind: "memlat",
    summary: "dependent loads over a random cycle of cache lines in `size` bytes (sweep it from L1 to beyond the LLC): cache and TLB miss latency, nested paging's cost in a VM",
    params: &[
        ParamSpec {
            name: "size",
            kind: ParamKind::Size { min: 4096, max: 16 << 30 },
            default: Some("64MiB"),
            help: "working set; sweep e.g. [16KiB,256KiB,4MiB,64MiB,256MiB]",
        },
        ParamSpec {
            name: "loads",
            kind: ParamKind::Int { min: 1000, max: 1 << 36 },
            default: None,
            help: "dependent loads per trial",
        },
        crate::workload::TARGET_TIME,
    ],
    metric: &[metric("memlat_time", "time per dependent load")],
    ops: |p| p.u64("loads").unwrap_or(1),
    count: "loads",
    body: memlat_body,
};

// ---- scheduling and IPC --------------------------------------------------------------------

fn futex(word: &AtomicU32, op: libc::c_int, val: u32) {
    // SAFETY: FUTEX_WAIT/FUTEX_WAKE on an aligned u32 both threads hold a reference to; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            std::ptr::null::<u8>(),
        )
    };
}

/// Two threads hand a token back and forth `n` times through `pass` (which blocks until the
/// other side answers); returns the time for the `n` round trips.
fn ping_pong<A, B>(n: u64, ctx: &RunCtx, mut ping: A, mut pong: B) -> Result<u64, MicroError>
where
    A: FnMut() -> Result<(), MicroError>,
    B: FnMut() -> Result<(), MicroError> + Send,
{
    std::thread::scope(|s| {
        let other = s.spawn(move || -> Result<(), MicroError> {
            // The partner's CPU is the run's too (guest_cpu_time).
            let _cpu = ctx.thread_cpu();
            for _ in 0..n {
                pong()?;
            }
            Ok(())
        });
        ctx.begin();
        let t0 = Instant::now();
        let mut res = Ok(());
        for _ in 0..n {
            if let Err(e) = ping() {
                res = Err(e);
                break;
            }
        }
        let ns = elapsed_ns(t0);
        let theirs = other.join().map_err(|_| check("the other thread panicked"))?;
        res.and(theirs).map(|()| ns)
    })
}

fn ctxswitch_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let word = AtomicU32::new(0);
    let done = AtomicU64::new(0);
    let (w, d) = (&word, &done);
    // 0: the main thread's turn is over, the other runs; 1: back to the main thread.
    let ns = ping_pong(
        n,
        ctx,
        || {
            w.store(1, Ordering::Release);
            futex(w, libc::FUTEX_WAKE, 1);
            while w.load(Ordering::Acquire) == 1 {
                futex(w, libc::FUTEX_WAIT, 1);
            }
            Ok(())
        },
        move || {
            while w.load(Ordering::Acquire) == 0 {
                futex(w, libc::FUTEX_WAIT, 0);
            }
            d.fetch_add(1, Ordering::Relaxed);
            w.store(0, Ordering::Release);
            futex(w, libc::FUTEX_WAKE, 1);
            Ok(())
        },
    )?;
    if done.load(Ordering::Relaxed) != n {
        return Err(check(format!(
            "{} of {n} hand-offs seen by the other thread",
            done.load(Ordering::Relaxed)
        )));
    }
    // Two switches per round trip.
    Ok(Timed { ops: 2 * n, ns, extra: json!({"round_trips": n}) })
}

pub static CTXSWITCH: Micro = Micro {
    kind: "ctxswitch",
    summary: "two threads handing a token back and forth through a futex: the scheduler's switch between threads (two per round trip), with both on one CPU or two",
    params: &[iterations("round trips per trial (two switches each)"), crate::workload::TARGET_TIME],
    metric: &[metric("ctxswitch_time", "time per switch (half a futex round trip)")],
    ops: |p| 2 * iters(p),
    count: "iterations",
    body: ctxswitch_body,
};

fn fileop_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    use std::os::unix::ffi::OsStrExt;
    let n = iters(p);
    let dir = ctx.scratch().map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("virtperf-fileop-{}-{}", std::process::id(), crate::workload::now_ns()));
    std::fs::write(&path, b"virtperf").map_err(|e| OsError::new(format!("write {}", path.display()), e))?;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| check(e.to_string()))?;
    ctx.begin();
    let t0 = Instant::now();
    let mut res = Ok(());
    for _ in 0..n {
        // SAFETY: a NUL-terminated path that outlives the call.
        let fd = unsafe { libc::openat(libc::AT_FDCWD, c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            res = Err(OsError::last(format!("open {}", path.display())).into());
            break;
        }
        // SAFETY: fstat fills a stat struct we own, on the descriptor just opened.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size == 8;
        // SAFETY: closes the descriptor opened above, once.
        unsafe { libc::close(fd) };
        if !ok {
            res = Err(check(format!("fstat {}: not the 8-byte file written", path.display())));
            break;
        }
    }
    let ns = elapsed_ns(t0);
    let _ = std::fs::remove_file(&path);
    res.map(|()| Timed { ops: n, ns, extra: json!({"dir": dir.display().to_string()}) })
}

pub static FILEOP: Micro = Micro {
    kind: "fileop",
    summary: "open, fstat and close of a small file: the file system's system calls (gVisor serves them through its gofer, UML through its host file system)",
    params: &[iterations("open + fstat + close cycles per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("fileop_time", "time per open + fstat + close")],
    ops: iters,
    count: "iterations",
    body: fileop_body,
};

// ---- the file system's calls, one class each: descriptor, path lookup, open, directory read ---
//
// `fileop` times a whole open + fstat + close of a file of its own (in /tmp: a sandbox's tmpfs);
// these four time each class alone, on the tree programs read (the image's /usr: behind gVisor's
// gofer, UML's hostfs), so the explain model can price find's getdents and stats apart from its
// fcntls and closes (docs/explain.md).

/// Where the file system's microbenchmarks look when not told: the first of these that is a
/// directory with entries in this environment (a busybox guest has no /usr/lib).
const TREE_DIRS: [&str; 5] = ["/usr/lib", "/usr/bin", "/usr", "/bin", "/"];

/// `dir` for `stat` and `open`, whose default is no one directory but files met once.
const SPREAD_DIR_PARAM: ParamSpec = ParamSpec {
    name: "dir",
    kind: ParamKind::Text,
    default: None,
    help: "one directory whose entries to work on in turn [default: none: 2 048 regular files under /usr/share (else /usr/lib, /usr, /), breadth first, each by its path from there — files met once, as a program meets them, more than gVisor keeps at hand]",
};

/// The `dir` a file system microbenchmark was given, if any.
fn given_dir<'a>(p: &'a Params) -> Option<&'a str> {
    p.0.get("dir").and_then(Value::as_str)
}

const fn tree_dir_param() -> ParamSpec {
    ParamSpec {
        name: "dir",
        kind: ParamKind::Text,
        default: None,
        help: "the directory to work on [default: the first of /usr/lib, /usr/bin, /usr, /bin, / that has entries: the image's tree, which gVisor serves through its gofer and UML through hostfs]",
    }
}

/// A directory's entries' names (not . and ..), sorted.
fn names(d: &std::path::Path) -> std::io::Result<Vec<std::ffi::CString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = Vec::new();
    for e in std::fs::read_dir(d)? {
        let n = e?.file_name();
        if let Ok(c) = std::ffi::CString::new(n.as_bytes()) {
            v.push(c);
        }
    }
    v.sort();
    Ok(v)
}

/// The directory to work on and its entries' names (not . and ..), read before the timed region.
fn tree_dir(p: &Params) -> Result<(std::path::PathBuf, Vec<std::ffi::CString>), MicroError> {
    if let Some(d) = given_dir(p) {
        let d = std::path::PathBuf::from(d);
        let v = names(&d).map_err(|e| OsError::new(format!("cannot list {}", d.display()), e))?;
        if v.is_empty() {
            return Err(check(format!("{} is empty: give a directory with entries", d.display())));
        }
        return Ok((d, v));
    }
    for d in TREE_DIRS {
        let d = std::path::PathBuf::from(d);
        if let Ok(v) = names(&d) {
            if !v.is_empty() {
                return Ok((d, v));
            }
        }
    }
    Err(check(format!("none of {} can be listed here: give dir", TREE_DIRS.join(", "))))
}

/// Opens `dir` (open's O_RDONLY | O_CLOEXEC, as std's File does: a directory opens so too),
/// closed on drop.
fn open_dir(dir: &std::path::Path) -> Result<std::fs::File, MicroError> {
    std::fs::File::open(dir).map_err(|e| OsError::new(format!("open {}", dir.display()), e).into())
}

fn fdop_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let (dir, _) = tree_dir(p)?;
    let d = open_dir(&dir)?;
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: duplicates a descriptor this function holds open.
        let fd = unsafe { libc::fcntl(d.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(OsError::last(format!("fcntl F_DUPFD of {}", dir.display())).into());
        }
        // SAFETY: closes the descriptor made above, once.
        if unsafe { libc::close(fd) } != 0 {
            return Err(OsError::last(format!("close of a duplicate of {}", dir.display())).into());
        }
    }
    let ns = elapsed_ns(t0);
    Ok(Timed { ops: n, ns, extra: json!({"dir": dir.display().to_string()}) })
}

/// Descriptor calls alone. An fstat among them (as this microbenchmark had before fstats were
/// priced apart) is priced by `fstat` back to back, and in gVisor an fstat between other calls
/// costs ~20 µs more than one after another (its gofer answers a call that follows its last one
/// sooner): the solve booked that on the fcntl and the close, +40 µs each where a plain call
/// costs +23, and find's 657 descriptor calls per ms were over-priced by a fifth.
pub static FDOP: Micro = Micro {
    kind: "fdop",
    summary: "a descriptor's own calls, no path: fcntl(F_DUPFD) + close of a directory of the image's tree (find's fcntls and closes)",
    params: &[iterations("fcntl + close cycles per trial"), crate::workload::TARGET_TIME, tree_dir_param()],
    metric: &[metric("fdop_time", "time per fcntl + close")],
    ops: iters,
    count: "iterations",
    body: fdop_body,
};

/// Regular files a lookup or an open goes through in turn when no `dir` is given: a program meets
/// most of its files once (tar ~1 800, find ~16 000 entries), and a sandbox keeps only so many at
/// hand — gVisor's gofer file system 1 000 unused dentries a mount; in one run under runsc's
/// strace tar's lookups took 66 µs in the Sentry and its opens 148 where `stat` cycling through
/// /usr/lib's 71 entries took 44 and `open` through 16 files 67. More than that cache holds.
const SPREAD_FILES: usize = 2048;

/// Where the spread begins: the first of these that is a directory.
const SPREAD_ROOTS: [&str; 4] = ["/usr/share", "/usr/lib", "/usr", "/"];

/// Up to SPREAD_FILES regular files under the first of SPREAD_ROOTS, directory by directory
/// (breadth first, names sorted; symlinks not followed), as paths relative to it — with it open.
fn spread_files() -> Result<(std::path::PathBuf, std::fs::File, Vec<std::ffi::CString>), MicroError> {
    use std::os::unix::ffi::OsStrExt;
    let root =
        SPREAD_ROOTS.iter().map(std::path::PathBuf::from).find(|r| r.is_dir()).ok_or_else(|| {
            check(format!("none of {} is a directory here: give dir", SPREAD_ROOTS.join(", ")))
        })?;
    let mut files = Vec::new();
    let mut queue = std::collections::VecDeque::from([std::path::PathBuf::new()]);
    while let Some(rel) = queue.pop_front() {
        if files.len() >= SPREAD_FILES {
            break;
        }
        let Ok(mut entries) = std::fs::read_dir(root.join(&rel)).map(|r| r.flatten().collect::<Vec<_>>())
        else {
            continue;
        };
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Ok(t) = e.file_type() else { continue };
            let path = rel.join(e.file_name());
            if t.is_dir() {
                queue.push_back(path);
            } else if t.is_file() && files.len() < SPREAD_FILES {
                if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) {
                    files.push(c);
                }
            }
        }
    }
    if files.is_empty() {
        return Err(check(format!("{} holds no regular file: give dir", root.display())));
    }
    let d = open_dir(&root)?;
    Ok((root, d, files))
}

fn stat_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let (dir, d, names) = if given_dir(p).is_some() {
        let (dir, names) = tree_dir(p)?;
        let d = open_dir(&dir)?;
        (dir, d, names)
    } else {
        spread_files()?
    };
    ctx.begin();
    let t0 = Instant::now();
    for i in 0..n {
        let name = &names[(i % names.len() as u64) as usize];
        // SAFETY: fstatat fills a stat struct we own; a NUL-terminated name relative to an open
        // directory.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstatat(d.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
            return Err(OsError::last(format!("stat {}/{}", dir.display(), name.to_string_lossy())).into());
        }
    }
    let ns = elapsed_ns(t0);
    Ok(Timed { ops: n, ns, extra: json!({"dir": dir.display().to_string(), "entries": names.len()}) })
}

pub static STAT: Micro = Micro {
    kind: "stat",
    summary: "a path looked up: fstatat of each of 2 048 files of the image's tree in turn (or of each entry of `dir`), as find, du and tar do (gVisor asks its gofer, UML its host)",
    params: &[iterations("lookups per trial"), crate::workload::TARGET_TIME, SPREAD_DIR_PARAM],
    metric: &[metric("stat_time", "time per fstatat of an entry")],
    ops: iters,
    count: "iterations",
    body: stat_body,
};

/// The regular files among a directory's entries (a symlink may dangle, a device may block).
fn regular_files(d: &std::fs::File, names: Vec<std::ffi::CString>) -> Vec<std::ffi::CString> {
    names
        .into_iter()
        .filter(|name| {
            // SAFETY: fstatat fills a stat struct we own; a NUL-terminated name relative to an
            // open directory.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let r =
                unsafe { libc::fstatat(d.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
            r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
        })
        .collect()
}

/// Files `fstat` goes through in turn, each held open.
const OPEN_FILES: usize = 16;

/// A directory's regular files, with the directory open: the directory given, else the first of
/// the tree's with OPEN_FILES regular files (/usr/lib holds 1 here, /usr/bin 786), else the one
/// with the most.
fn tree_files(p: &Params) -> Result<(std::path::PathBuf, std::fs::File, Vec<std::ffi::CString>), MicroError> {
    let mut best: Option<(std::path::PathBuf, std::fs::File, Vec<std::ffi::CString>)> = None;
    // Listed one at a time, as tree_dir takes them: unlistable and empty ones passed over.
    let listed = |d: &&str| {
        let v = names(std::path::Path::new(d)).ok().filter(|v| !v.is_empty())?;
        Some((std::path::PathBuf::from(d), v))
    };
    let candidates: Box<dyn Iterator<Item = (std::path::PathBuf, Vec<std::ffi::CString>)>> =
        if given_dir(p).is_some() {
            Box::new(std::iter::once(tree_dir(p)?))
        } else {
            Box::new(TREE_DIRS.iter().filter_map(listed))
        };
    for (dir, entries) in candidates {
        let d = open_dir(&dir)?;
        let files = regular_files(&d, entries);
        if best.as_ref().is_none_or(|b| files.len() > b.2.len()) {
            best = Some((dir, d, files));
        }
        if best.as_ref().is_some_and(|b| b.2.len() >= OPEN_FILES) {
            break;
        }
    }
    match best {
        Some(b) if !b.2.is_empty() => Ok(b),
        Some(b) => Err(check(format!("{} has no regular file to open: give a dir that has", b.0.display()))),
        None => Err(check(format!("none of {} can be listed here: give dir", TREE_DIRS.join(", ")))),
    }
}

fn open_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let (dir, d, files) = if given_dir(p).is_some() { tree_files(p)? } else { spread_files()? };
    ctx.begin();
    let t0 = Instant::now();
    for i in 0..n {
        let name = &files[(i % files.len() as u64) as usize];
        // SAFETY: a NUL-terminated name relative to an open directory; the descriptor it gives
        // is closed just below, once.
        let fd = unsafe { libc::openat(d.as_raw_fd(), name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(OsError::last(format!("open {}/{}", dir.display(), name.to_string_lossy())).into());
        }
        // SAFETY: closes the descriptor opened above.
        unsafe { libc::close(fd) };
    }
    let ns = elapsed_ns(t0);
    Ok(Timed { ops: n, ns, extra: json!({"dir": dir.display().to_string(), "entries": files.len()}) })
}

pub static OPEN: Micro = Micro {
    kind: "open",
    summary: "a file opened: openat (read-only) + close of each of 2 048 regular files of the image's tree in turn (or of `dir`'s), as tar and sqlite3 open theirs (gVisor's gofer opens the host's file, where a stat may be served from what it holds)",
    params: &[iterations("opens per trial"), crate::workload::TARGET_TIME, SPREAD_DIR_PARAM],
    metric: &[metric("open_time", "time per openat + close of a file")],
    ops: iters,
    count: "iterations",
    body: open_body,
};

fn fstat_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let (dir, d, mut files) = tree_files(p)?;
    files.truncate(OPEN_FILES);
    let mut fds = Vec::with_capacity(files.len());
    for name in &files {
        // SAFETY: a NUL-terminated name relative to an open directory.
        let fd = unsafe { libc::openat(d.as_raw_fd(), name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(OsError::last(format!("open {}/{}", dir.display(), name.to_string_lossy())).into());
        }
        // SAFETY: a descriptor just opened, owned by the File from here on (closed on drop).
        fds.push(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    }
    let empty = c"";
    ctx.begin();
    let t0 = Instant::now();
    for i in 0..n {
        let f = &fds[(i % fds.len() as u64) as usize];
        // glibc's fstat since 2.33, called as the system call itself: newfstatat(fd, "",
        // AT_EMPTY_PATH) whichever libc this binary meets, so the count names it as programs make it.
        // SAFETY: fills a stat struct we own; an empty NUL-terminated path and an open descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe {
            libc::syscall(libc::SYS_newfstatat, f.as_raw_fd(), empty.as_ptr(), &mut st, libc::AT_EMPTY_PATH)
        };
        let name =
            || format!("{}/{}", dir.display(), files[(i % fds.len() as u64) as usize].to_string_lossy());
        if r != 0 {
            return Err(OsError::last(format!("fstat of {}", name())).into());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(check(format!("fstat of {}: not the regular file opened", name())));
        }
    }
    let ns = elapsed_ns(t0);
    Ok(Timed { ops: n, ns, extra: json!({"dir": dir.display().to_string(), "entries": fds.len()}) })
}

pub static FSTAT: Micro = Micro {
    kind: "fstat",
    summary: "a descriptor's attributes: fstat — newfstatat(fd, \"\", AT_EMPTY_PATH), as glibc makes it — of each of up to 16 regular files of a directory of the image's tree, open, in turn, as tar does after each open (UML answers from its inode; gVisor asks its gofer)",
    params: &[iterations("fstats per trial"), crate::workload::TARGET_TIME, tree_dir_param()],
    metric: &[metric("fstat_time", "time per fstat of an open file")],
    ops: iters,
    count: "iterations",
    body: fstat_body,
};

fn readdir_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let (dir, names) = tree_dir(p)?;
    // Each listing: open, getdents64 into a 32 KiB buffer (glibc's readdir's) until it returns 0,
    // close — what find, du and ls do per directory.
    let mut buf = vec![0u8; 32 << 10];
    let list = |buf: &mut [u8]| -> Result<(u64, u64), MicroError> {
        let d = open_dir(&dir)?;
        let (mut calls, mut bytes) = (0u64, 0u64);
        loop {
            // SAFETY: getdents64 writes at most buf.len() bytes into the buffer we own.
            let r =
                unsafe { libc::syscall(libc::SYS_getdents64, d.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
            calls += 1;
            if r < 0 {
                return Err(OsError::last(format!("getdents64 {}", dir.display())).into());
            }
            if r == 0 {
                return Ok((calls, bytes));
            }
            bytes += r as u64;
        }
    };
    ctx.begin();
    let t0 = Instant::now();
    let mut calls = 0;
    for _ in 0..n {
        let (c, bytes) = list(&mut buf)?;
        // Each entry is at least 24 bytes (a record header and a name).
        if bytes < 24 * names.len() as u64 {
            return Err(check(format!(
                "a listing of {} returned {bytes} bytes for {} entries",
                dir.display(),
                names.len()
            )));
        }
        calls += c;
    }
    let ns = elapsed_ns(t0);
    Ok(Timed {
        ops: n,
        ns,
        extra: json!({"dir": dir.display().to_string(), "entries": names.len(), "getdents_per_listing": calls as f64 / n as f64}),
    })
}

pub static READDIR: Micro = Micro {
    kind: "readdir",
    summary: "a directory listed: open, getdents64 until the end, close, of a directory of the image's tree, as find, du and ls do per directory",
    params: &[iterations("listings per trial"), crate::workload::TARGET_TIME, tree_dir_param()],
    metric: &[metric("readdir_time", "time per listing (open + getdents64 to the end + close)")],
    ops: iters,
    count: "iterations",
    body: readdir_body,
};

/// A pair of connected descriptors (a pipe each way, or a socketpair), closed on drop.
struct Fds(Vec<libc::c_int>);

impl Drop for Fds {
    fn drop(&mut self) {
        for fd in &self.0 {
            // SAFETY: descriptors this struct owns, closed once.
            unsafe { libc::close(*fd) };
        }
    }
}

fn xfer(fd: libc::c_int, write: bool) -> Result<(), MicroError> {
    let mut b = [0x5au8; 1];
    // SAFETY: one byte to or from a stack buffer on a descriptor we own.
    let r = unsafe {
        if write {
            libc::write(fd, b.as_ptr().cast(), 1)
        } else {
            libc::read(fd, b.as_mut_ptr().cast(), 1)
        }
    };
    if r == 1 {
        Ok(())
    } else {
        Err(OsError::last(format!("{} of one byte", if write { "write" } else { "read" })).into())
    }
}

fn rr_body(n: u64, ctx: &RunCtx, unix: bool) -> Result<Timed, MicroError> {
    // (main writes, other reads) and (other writes, main reads).
    let (a_w, b_r, b_w, a_r, fds) = if unix {
        let mut sv = [0; 2];
        // SAFETY: socketpair fills two descriptors we then own.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) } != 0 {
            return Err(OsError::last("socketpair").into());
        }
        (sv[0], sv[1], sv[1], sv[0], Fds(sv.to_vec()))
    } else {
        let (mut p1, mut p2) = ([0; 2], [0; 2]);
        // SAFETY: pipe fills two descriptors we then own (closed by Fds even on the error path).
        if unsafe { libc::pipe(p1.as_mut_ptr()) } != 0 {
            return Err(OsError::last("pipe").into());
        }
        // SAFETY: as above.
        if unsafe { libc::pipe(p2.as_mut_ptr()) } != 0 {
            let _f = Fds(p1.to_vec());
            return Err(OsError::last("pipe").into());
        }
        (p1[1], p1[0], p2[1], p2[0], Fds(vec![p1[0], p1[1], p2[0], p2[1]]))
    };
    let ns = ping_pong(
        n,
        ctx,
        || {
            xfer(a_w, true)?;
            xfer(a_r, false)
        },
        move || {
            xfer(b_r, false)?;
            xfer(b_w, true)
        },
    )?;
    drop(fds);
    Ok(plain(n, ns))
}

pub static PIPE_RR: Micro = Micro {
    kind: "pipe_rr",
    summary: "one byte there and back between two threads over two pipes: write, wake-up, read, and back",
    params: &[iterations("round trips per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("pipe_rr_time", "time per round trip")],
    ops: iters,
    count: "iterations",
    body: |p, ctx| rr_body(iters(p), ctx, false),
};

pub static UNIX_RR: Micro = Micro {
    kind: "unix_rr",
    summary: "one byte there and back between two threads over a UNIX stream socketpair",
    params: &[iterations("round trips per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("unix_rr_time", "time per round trip")],
    ops: iters,
    count: "iterations",
    body: |p, ctx| rr_body(iters(p), ctx, true),
};

// ---- processes and signals -----------------------------------------------------------------

fn fork_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: the child calls only _exit (async-signal-safe), so forking a threaded process
        // is sound; the parent reaps it at once.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child immediately, without running any of the parent's handlers.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            return Err(OsError::last("fork").into());
        }
        let mut status = 0;
        // SAFETY: waits for the child just created.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || status != 0 {
            return Err(check(format!("the forked child {pid} did not exit cleanly (status {status})")));
        }
    }
    Ok(plain(n, elapsed_ns(t0)))
}

pub static FORK: Micro = Micro {
    kind: "fork",
    summary: "fork, the child's _exit, waitpid: copying the address space's page tables (this agent's), the cost seeds 000/001 saw under shadow paging",
    params: &[iterations("processes per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("fork_time", "time per fork + exit + wait")],
    ops: iters,
    count: "iterations",
    body: fork_body,
};

fn exec_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    let (exe, args): (std::path::PathBuf, &[&str]) = match p.0.get("program").and_then(Value::as_str) {
        Some(prog) => (prog.into(), &[]),
        None => (
            std::fs::read_link("/proc/self/exe").map_err(|e| OsError::new("/proc/self/exe", e))?,
            &["--version"],
        ),
    };
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..n {
        let st = std::process::Command::new(&exe)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(|e| OsError::new(format!("cannot start {}", exe.display()), e))?;
        if !st.success() {
            return Err(check(format!("{} {} failed: {st}", exe.display(), args.join(" "))));
        }
    }
    Ok(plain(n, elapsed_ns(t0)))
}

pub static EXEC: Micro = Micro {
    kind: "exec",
    summary: "start a program and wait for it to exit (fork/vfork + execve + the program + exit): process creation end to end; by default this agent's own binary with --version",
    params: &[
        iterations("programs started per trial"),
        crate::workload::TARGET_TIME,
        ParamSpec {
            name: "program",
            kind: ParamKind::Text,
            default: None,
            help: "the program to start, with no arguments (a static binary, e.g. /bin/busybox) [default: the agent's binary with --version]",
        },
    ],
    metric: &[metric("exec_time", "time per program start to exit")],
    ops: iters,
    count: "iterations",
    body: exec_body,
};

static SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

fn signal_body(p: &Params, ctx: &RunCtx) -> Result<Timed, MicroError> {
    let n = iters(p);
    // SAFETY: a handler that only bumps an atomic (async-signal-safe); the previous action is
    // restored below on every path.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
    // SAFETY: installs the handler for SIGUSR2, which nothing else in the agent uses.
    if unsafe { libc::sigaction(libc::SIGUSR2, &act, &mut old) } != 0 {
        return Err(OsError::last("sigaction").into());
    }
    // SAFETY: getpid/gettid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::syscall(libc::SYS_gettid) as libc::pid_t) };
    let before = SIGNALS.load(Ordering::Relaxed);
    ctx.begin();
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: a signal to this very thread; it is handled before tgkill returns.
        unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR2) };
    }
    let ns = elapsed_ns(t0);
    // SAFETY: restores the previous action.
    unsafe { libc::sigaction(libc::SIGUSR2, &old, std::ptr::null_mut()) };
    let got = SIGNALS.load(Ordering::Relaxed) - before;
    if got != n {
        return Err(check(format!("{got} of {n} signals were handled")));
    }
    Ok(plain(n, ns))
}

pub static SIGNAL: Micro = Micro {
    kind: "signal",
    summary: "a signal sent to the thread itself (tgkill) and handled: kernel entry, frame set-up, the handler, sigreturn",
    params: &[iterations("signals per trial"), crate::workload::TARGET_TIME],
    metric: &[metric("signal_time", "time per signal sent and handled")],
    ops: iters,
    count: "iterations",
    body: signal_body,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partner_threads_cpu_counts_in_the_runs() {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let total = crate::workload::ThreadCpuTotal::default();
        let ctx = RunCtx::with_hooks(&stop, &|| {}, &|| {}, None, &total);
        let raw: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({"iterations": 20000})).unwrap();
        let p = crate::params::revalidate(CTXSWITCH.params(), &raw).unwrap();
        CTXSWITCH.run(&Params(&p), &ctx).unwrap();
        let ns = total.user_ns.load(std::sync::atomic::Ordering::Relaxed)
            + total.system_ns.load(std::sync::atomic::Ordering::Relaxed);
        assert!(ns > 0, "the partner thread's CPU was not counted");
    }
    use std::collections::BTreeMap;

    fn run(w: &Micro, params: serde_json::Value) -> Result<(f64, Value), String> {
        let raw: BTreeMap<String, Value> = serde_json::from_value(params).unwrap();
        let p = crate::params::revalidate(w.params, &raw).map_err(|e| e.message)?;
        let o = w.run(&Params(&p), &RunCtx::detached()).map_err(|e| e.to_string())?;
        Ok((o.samples[0].value, o.extra))
    }

    /// A loop the compiler removed costs the same however long it is (×1 for 8× the operations);
    /// a real one scales (×8). The bar is ×2: between the two, clear of both — at ×3 it failed
    /// once in a local run of the whole workload suite (a 2-CPU host whose ping-pongs run at two
    /// speeds, on one CPU or across two).
    fn scales(w: &Micro, key: &str, small: u64) {
        // The fastest of five: a run preempted by a neighbour only ever gets slower.
        let t = |n: u64| {
            (0..5)
                .map(|_| {
                    let (per_op, _) = run(w, json!({ key: n })).unwrap();
                    per_op * n as f64
                })
                .fold(f64::INFINITY, f64::min)
        };
        let (a, b) = (t(small), t(small * 8));
        assert!(b > 2.0 * a, "{}: {small} ops took {a} ns, 8× as many {b} ns", w.kind);
    }

    #[test]
    fn each_microbenchmark_does_its_work() {
        let _alone = crate::workload::cpu_heavy();
        for (w, key, n) in [
            (&CPUID, "iterations", 20_000),
            (&CLOCK, "iterations", 200_000),
            (&RDTSC, "iterations", 200_000),
            (&PAGEFAULT, "pages", 2000),
            (&MMAP, "iterations", 2000),
            (&CTXSWITCH, "iterations", 2000),
            (&PIPE_RR, "iterations", 2000),
            (&UNIX_RR, "iterations", 2000),
            (&FILEOP, "iterations", 2000),
            (&FDOP, "iterations", 2000),
            (&STAT, "iterations", 2000),
            (&OPEN, "iterations", 2000),
            (&FSTAT, "iterations", 2000),
            (&READDIR, "iterations", 200),
            (&FORK, "iterations", 50),
            (&SIGNAL, "iterations", 20_000),
        ] {
            let (per_op, _) = run(w, json!({ key: n })).unwrap_or_else(|e| panic!("{}: {e}", w.kind));
            assert!(per_op > 0.5 && per_op < 1e8, "{}: {per_op} ns/op", w.kind);
            scales(w, key, n);
        }
    }

    /// Without `dir`, lookups and opens go through files met once: up to 2 048 regular files
    /// spread over the tree's directories, each a path from the root that names a regular file.
    #[test]
    fn lookups_and_opens_go_through_files_spread_over_the_tree() {
        use std::os::unix::ffi::OsStrExt;
        let (root, d, files) = spread_files().unwrap();
        assert!(!files.is_empty() && files.len() <= SPREAD_FILES, "{}", files.len());
        let dirs: std::collections::BTreeSet<&std::path::Path> = files
            .iter()
            .filter_map(|f| std::path::Path::new(std::ffi::OsStr::from_bytes(f.as_bytes())).parent())
            .collect();
        // Debian's /usr/share alone holds thousands, in hundreds of directories.
        if files.len() == SPREAD_FILES {
            assert!(dirs.len() >= 10, "{} files in {} directories", files.len(), dirs.len());
        }
        for f in files.iter().step_by(37) {
            // SAFETY: a stat struct we own; a NUL-terminated path relative to an open directory.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let r = unsafe { libc::fstatat(d.as_raw_fd(), f.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
            assert!(r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG, "{}/{f:?}", root.display());
        }
        for w in [&STAT, &OPEN] {
            let (_, extra) = run(w, json!({"iterations": 100})).unwrap();
            assert_eq!(
                (extra["dir"].as_str(), extra["entries"].as_u64()),
                (root.to_str(), Some(files.len() as u64)),
                "{}",
                w.kind
            );
        }
    }

    /// The file system's classes work on the directory asked for, and say what is wrong with one
    /// that is not there or empty.
    #[test]
    fn the_file_system_microbenchmarks_use_the_directory_given() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(d.path().join(format!("f{i}")), b"x").unwrap();
        }
        let dir = d.path().display().to_string();
        for w in [&FDOP, &STAT, &OPEN, &FSTAT, &READDIR] {
            let raw: std::collections::BTreeMap<String, Value> =
                serde_json::from_value(json!({"iterations": 20, "dir": dir})).unwrap();
            let p = crate::params::revalidate(w.params(), &raw).unwrap();
            let stop = std::sync::atomic::AtomicBool::new(false);
            let t = (w.body)(&Params(&p), &RunCtx::new(&stop, &|| {}, None)).unwrap();
            assert_eq!((t.ops, t.extra["dir"].as_str()), (20, Some(dir.as_str())), "{}", w.kind);
            if w.kind != "fdop" {
                assert_eq!(t.extra["entries"], 5, "{}", w.kind);
            }
        }
        // A listing of five entries is one getdents64 with them and one that says the end.
        let raw = serde_json::from_value(json!({"iterations": 3, "dir": dir})).unwrap();
        let p = crate::params::revalidate(READDIR.params(), &raw).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let t = (READDIR.body)(&Params(&p), &RunCtx::new(&stop, &|| {}, None)).unwrap();
        assert_eq!(t.extra["getdents_per_listing"], 2.0);
        let empty = tempfile::tempdir().unwrap();
        for (d, needle) in
            [(empty.path().display().to_string(), "is empty"), ("/nonexistent-vp".into(), "cannot list")]
        {
            let raw = serde_json::from_value(json!({"iterations": 3, "dir": d})).unwrap();
            let p = crate::params::revalidate(STAT.params(), &raw).unwrap();
            let e = (STAT.body)(&Params(&p), &RunCtx::new(&stop, &|| {}, None)).err().unwrap();
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn metric_names_list_every_microbenchmark() {
        let all = [
            &CPUID, &CLOCK, &RDTSC, &PAGEFAULT, &MMAP, &MEMLAT, &CTXSWITCH, &PIPE_RR, &UNIX_RR, &FILEOP,
            &FDOP, &STAT, &OPEN, &FSTAT, &READDIR, &FORK, &EXEC, &SIGNAL,
        ];
        let names: Vec<&str> = all.iter().map(|w| w.metric[0].name).collect();
        assert_eq!(names, METRIC_NAMES);
    }

    #[test]
    fn memory_latency_grows_with_the_working_set() {
        let _alone = crate::workload::cpu_heavy();
        let (l1, _) = run(&MEMLAT, json!({"size": 16384, "loads": 2_000_000})).unwrap();
        let (big, extra) = run(&MEMLAT, json!({"size": 256 << 20, "loads": 2_000_000})).unwrap();
        assert_eq!(extra["lines"], (256 << 20) / 64);
        // An L1 hit is a few cycles; a random line of 256 MiB misses every cache and the TLB.
        assert!(l1 < 5.0 && big > 4.0 * l1, "16 KiB {l1} ns, 256 MiB {big} ns per load");
    }

    #[test]
    fn page_faults_are_counted_one_per_page() {
        let (_, extra) = run(&PAGEFAULT, json!({"pages": 4096})).unwrap();
        let f = extra["minor_faults"].as_u64().unwrap();
        assert!((3686..=4096 + 64).contains(&f), "{f} faults for 4096 pages");
    }

    #[test]
    fn exec_starts_a_program_and_says_when_it_fails() {
        let (per_op, _) = run(&EXEC, json!({"iterations": 3, "program": "/bin/true"})).unwrap();
        assert!(per_op > 10_000.0, "a process start in {per_op} ns");
        let e = run(&EXEC, json!({"iterations": 1, "program": "/bin/false"})).unwrap_err();
        assert!(e.contains("/bin/false") && e.contains("failed"), "{e}");
    }
}
