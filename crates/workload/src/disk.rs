//! File I/O as seed 001 measured it with iozone: write, rewrite, read, reread, random read and
//! random write of one file of `file_size` bytes in records of `record_size`, on the scratch
//! filesystem the environment provides (or `dir`).
//!
//! Written by hand rather than running iozone or fio inside the environment because the same
//! binary must run in every environment (a busybox guest has neither), the phases must share
//! one file exactly as iozone's do, and each phase's bytes, time and latency are reported in the
//! protocol's own samples. `bench/disk.sh` holds it against fio on the same file.
//!
//! The page cache is kept from serving reads that should reach the device: with `direct = true`
//! every phase uses O_DIRECT; otherwise, before `read` and `randread`, the file is written back
//! (fsync) and its cached pages dropped with `posix_fadvise(DONTNEED)` — per file, unprivileged,
//! in every environment (a global `drop_caches` is root-only, refused in containers, and would
//! disturb the host). `reread` deliberately reads what `read` left in the cache, as iozone's does.
//! The access pattern is hinted as fio does (SEQUENTIAL for the sequential reads, RANDOM — no
//! readahead — for the random phases), so a random read costs one record from the device.
//! The method used is stored with each trial (`extra.cache`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::net::PageBuf;
use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

/// The phases, in the order they run (each needs the file the one before left).
pub const MODES: &[&str] = &["write", "rewrite", "read", "reread", "randread", "randwrite", "syncwrite"];

/// O_DIRECT needs records (and offsets) in multiples of the device's logical block; 4096 covers
/// every device virtperf attaches (and 512-byte ones).
pub const DIRECT_ALIGN: u64 = 4096;

pub struct Disk;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "file_size",
        kind: ParamKind::Size { min: 4096, max: 1 << 40 },
        default: Some("64MiB"),
        help: "size of the test file (iozone -s); seed 001 swept 10 MB to 5 GB",
    },
    ParamSpec {
        name: "record_size",
        kind: ParamKind::Size { min: 512, max: 64 << 20 },
        default: Some("1MiB"),
        help: "bytes per read or write call (iozone -r); seed 001 swept 16 KB to 8 MB",
    },
    ParamSpec {
        name: "modes",
        kind: ParamKind::Text,
        default: Some("write,rewrite,read,reread,randread,randwrite,syncwrite"),
        help: "which phases to report (a set; write always runs first to create the file, the others only when named)",
    },
    ParamSpec {
        name: "direct",
        kind: ParamKind::Bool,
        default: Some("false"),
        help: "O_DIRECT: bypass the page cache (records and file a multiple of 4 KiB)",
    },
    ParamSpec {
        name: "fsync",
        kind: ParamKind::Bool,
        default: Some("true"),
        help: "include fsync at the end of each writing phase in its time (iozone -e)",
    },
    ParamSpec {
        name: "dir",
        kind: ParamKind::Text,
        default: None,
        help: "directory for the file, inside the environment [default: the environment's scratch disk]",
    },
];

const fn m(name: &'static str, unit: &'static str, better: Better, help: &'static str) -> MetricSpec {
    MetricSpec { name, unit, better, help }
}

const METRICS: &[MetricSpec] = &[
    m("disk_write", "MB/s", Better::Higher, "sequential write of a new file"),
    m("disk_rewrite", "MB/s", Better::Higher, "sequential write over the existing file"),
    m("disk_read", "MB/s", Better::Higher, "sequential read, the file's pages dropped from the cache first"),
    m("disk_reread", "MB/s", Better::Higher, "sequential read again (what the cache keeps)"),
    m("disk_randread", "MB/s", Better::Higher, "reads of records at random offsets, cache dropped first"),
    m("disk_randwrite", "MB/s", Better::Higher, "writes of records at random offsets"),
    m("disk_randread_iops", "IOPS", Better::Higher, "random reads per second"),
    m("disk_randwrite_iops", "IOPS", Better::Higher, "random writes per second"),
    m("disk_randread_p50", "us", Better::Lower, "median latency of one random read"),
    m("disk_randread_p99", "us", Better::Lower, "99th percentile latency of one random read"),
    m("disk_randwrite_p50", "us", Better::Lower, "median latency of one random write"),
    m("disk_randwrite_p99", "us", Better::Lower, "99th percentile latency of one random write"),
    m(
        "disk_syncwrite",
        "MB/s",
        Better::Higher,
        "sequential writes, each made durable (fdatasync) before the next",
    ),
    m("disk_syncwrite_iops", "IOPS", Better::Higher, "durable writes per second"),
    m("disk_syncwrite_p50", "us", Better::Lower, "median latency of one write + fdatasync"),
    m("disk_syncwrite_p99", "us", Better::Lower, "99th percentile latency of one write + fdatasync"),
];

/// The phases named in `modes`, in run order; an unknown name is an error naming it.
pub fn parse_modes(s: &str) -> Result<Vec<&'static str>, ParamError> {
    let want: Vec<&str> = s.split([',', '+', ' ']).map(str::trim).filter(|t| !t.is_empty()).collect();
    if let Some(bad) = want.iter().find(|w| !MODES.contains(w)) {
        return Err(ParamError::new("modes", format!("unknown mode `{bad}` (known: {})", MODES.join(", "))));
    }
    if want.is_empty() {
        return Err(ParamError::new("modes", format!("no mode named; give some of: {}", MODES.join(", "))));
    }
    Ok(MODES.iter().copied().filter(|m| want.contains(m)).collect())
}

/// The checks that need no environment: sizes that fit together, O_DIRECT alignment.
pub fn check_sizes(file: u64, record: u64, direct: bool) -> Result<(), ParamError> {
    if record > file {
        return Err(ParamError::new(
            "record_size",
            format!("a record of {record} bytes is larger than the file ({file} bytes): lower record_size or raise file_size"),
        ));
    }
    if direct && (!record.is_multiple_of(DIRECT_ALIGN) || !file.is_multiple_of(DIRECT_ALIGN)) {
        let key = if !record.is_multiple_of(DIRECT_ALIGN) { "record_size" } else { "file_size" };
        return Err(ParamError::new(
            key,
            format!("direct I/O needs records and a file in multiples of {DIRECT_ALIGN} bytes (the device's block): got record {record}, file {file}"),
        ));
    }
    Ok(())
}

/// The file of one run; removed when dropped, whatever happened.
struct TestFile {
    path: PathBuf,
}

impl Drop for TestFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An I/O error, said in the user's terms (a full disk, a filesystem without O_DIRECT).
/// How the disk workload fails.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{what} {}: no space left on the device (file_size too large for this scratch disk: a smaller file_size, or another dir)", path.display())]
    NoSpace { what: &'static str, path: PathBuf },
    #[error("{what} {}: invalid argument (with direct = true: this filesystem refuses O_DIRECT, e.g. tmpfs; use direct = false)", path.display())]
    DirectRefused { what: &'static str, path: PathBuf },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "this environment has no scratch disk: give it one (qemu: disk=virtio-blk, ide, sata or nvme; uml: disk=ubd)"
    )]
    NoScratch,
    #[error("stopped before the end of the phase")]
    Stopped,
}

impl crate::error::Kinded for DiskError {
    fn kind(&self) -> crate::error::FailureKind {
        match self {
            DiskError::NoSpace { .. } => crate::error::FailureKind::NoSpace,
            DiskError::DirectRefused { .. } | DiskError::NoScratch => crate::error::FailureKind::Unsupported,
            DiskError::Io { source, .. } => crate::error::kind_of_io(source),
            DiskError::Stopped => crate::error::FailureKind::Stopped,
        }
    }
}

fn io_err(what: &'static str, path: &Path, e: std::io::Error) -> DiskError {
    let path = path.to_path_buf();
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => DiskError::NoSpace { what, path },
        Some(libc::EINVAL) => DiskError::DirectRefused { what, path },
        _ => DiskError::Io { what, path, source: e },
    }
}

fn open(path: &Path, direct: bool, write: bool, create: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(!write).write(write).create(create).truncate(create);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// Writes the file back and drops its pages from the page cache.
/// The access pattern told to the kernel, as fio does by default (`fadvise_hint=1`): SEQUENTIAL
/// (a larger readahead) for the sequential reads, RANDOM (no readahead) for the random phases, so
/// that a random read is one record from the device, not a neighbour that an earlier miss's
/// readahead brought into the page cache (measured: 1.9× fio's IOPS on 4 KiB buffered random
/// reads without it).
fn hint(f: &File, advice: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise on a descriptor we own; advice only, no memory involved.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice) };
}

fn drop_cached(f: &File) {
    use std::os::fd::AsRawFd;
    let _ = f.sync_all();
    // SAFETY: posix_fadvise on a descriptor we own; advice only, no memory involved.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// Every record index of `0..n` exactly once, in a scrambled order (as fio's random map: a record
/// read twice would come from the page cache the second time). A full-period LCG modulo the next
/// power of two (Hull–Dobell: c odd, a ≡ 1 mod 4) with cycle walking past the values ≥ n: no
/// table, whatever the file size, fewer than two steps per index on average.
fn random_records(n: u64, seed: u64) -> impl Iterator<Item = u64> {
    let m = n.max(1).next_power_of_two();
    let (mask, half) = (m - 1, m.trailing_zeros().div_ceil(2));
    let (a, c) =
        (6364136223846793005u64 & !3 | 1, (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1) & mask.max(1));
    // A bijection of 0..m on top (xorshift, odd multiply, xorshift): the LCG's low bits alone
    // would alternate.
    let mix = move |mut y: u64| {
        y ^= y >> half;
        y = y.wrapping_mul(0xbf58_476d_1ce4_e5b9) & mask;
        y ^ (y >> half)
    };
    let mut x = seed & mask;
    (0..n).map(move |_| loop {
        x = a.wrapping_mul(x).wrapping_add(c) & mask;
        let y = mix(x);
        if y < n {
            break y;
        }
    })
}

struct Phase {
    bytes: u64,
    secs: f64,
    lat_us: Vec<f64>,
}

impl Phase {
    fn mbps(&self) -> f64 {
        self.bytes as f64 / self.secs.max(1e-9) / 1e6
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Workload for Disk {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Disk
    }
    fn kind(&self) -> &'static str {
        "disk"
    }
    fn report_section(&self) -> Option<&'static str> {
        Some("disk")
    }
    fn summary(&self) -> &'static str {
        "iozone's file I/O phases (write, rewrite, read, reread, random read, random write) on the environment's scratch disk"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        METRICS
    }
    fn set_params(&self) -> &'static [&'static str] {
        &["modes"]
    }
    fn marks_timed_region(&self) -> bool {
        true
    }
    /// Each asked-for phase's bandwidth (and IOPS where requests were timed) over its span on the
    /// host's clock, from lap to lap: what the phase moved, over time the guest's clock did not
    /// measure.
    fn on_host_laps(
        &self,
        p: &Params,
        extra: &serde_json::Value,
        spans: &[(String, u64)],
    ) -> Vec<virtperf_proto::Sample> {
        let Ok(modes) = p.str("modes").and_then(parse_modes) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, ns) in spans.iter().filter(|(n, ns)| modes.contains(&n.as_str()) && *ns > 0) {
            let ph = &extra["phases"][name];
            let secs = *ns as f64 / 1e9;
            if let Some(bytes) = ph["bytes"].as_u64() {
                out.push(sample(&format!("disk_{name}_host"), bytes as f64 / secs / 1e6, "MB/s"));
            }
            if let Some(n) = ph["requests"].as_u64().filter(|n| *n > 0) {
                out.push(sample(&format!("disk_{name}_iops_host"), n as f64 / secs, "IOPS"));
            }
        }
        out
    }
    fn needs_scratch(&self) -> bool {
        true
    }
    fn memory_needed(&self, p: &Params) -> Option<u64> {
        Some(p.u64("record_size").ok()? + 4096)
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        parse_modes(p.str("modes")?)?;
        let (file, record) = (p.u64("file_size").unwrap_or(0), p.u64("record_size").unwrap_or(0));
        check_sizes(file, record, p.bool("direct"))?;
        if let Some(d) = p.0.get("dir").and_then(|v| v.as_str()) {
            if !Path::new(d).is_dir() {
                return Err(ParamError::new(
                    "dir",
                    format!("`{d}` is not a directory here: give an existing directory (on the filesystem to measure), or leave dir out for the environment's scratch disk"),
                ));
            }
        }
        Ok(())
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let modes = parse_modes(p.str("modes")?)?;
        let (file_size, record) = (p.u64("file_size")?, p.u64("record_size")? as usize);
        let (direct, fsync) = (p.bool("direct"), p.bool("fsync"));
        check_sizes(file_size, record as u64, direct)?;
        let dir = match p.0.get("dir").and_then(|v| v.as_str()) {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(ctx.scratch().ok_or(DiskError::NoScratch)?),
        };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let file = TestFile { path: dir.join(format!("virtperf-disk-{}-{tid}.dat", std::process::id())) };
        let path = file.path.clone();
        let records = (file_size / record as u64).max(1);
        let mut buf = PageBuf::new(record, 0xa5);
        let mut phases: Vec<(&str, Phase)> = Vec::new();
        ctx.begin();

        let io = FileIo { path: &path, direct, fsync, records, record, ctx };
        phases.push(("write", io.seq_write(true, &mut buf)?));
        // Only the phases asked for run (each needs nothing but the file `write` made).
        for mode in modes.iter().filter(|m| **m != "write") {
            let ph = match *mode {
                "rewrite" => io.seq_write(false, &mut buf)?,
                "read" => io.seq_read(true, &mut buf)?,
                "reread" => io.seq_read(false, &mut buf)?,
                "randread" => io.random(false, &mut buf)?,
                "randwrite" => io.random(true, &mut buf)?,
                _ => io.sync_write(&mut buf)?,
            };
            phases.push((mode, ph));
        }
        let (samples, detail) = phase_samples(&phases, &modes);
        let fs = statfs_type(&dir);
        Ok(Output {
            samples,
            extra: serde_json::json!({
                "phases": detail, "dir": dir, "filesystem": fs, "records": records, "direct": direct, "fsync": fsync,
                "cache": if direct { "O_DIRECT: the page cache is bypassed" }
                         else { "fsync + posix_fadvise(DONTNEED) on the file before read and randread; RANDOM (no readahead) in the random phases; reread reads from the cache" },
            }),
        })
    }
}

/// One disk trial's file and how it is driven: each phase a method.
struct FileIo<'a> {
    path: &'a Path,
    direct: bool,
    fsync: bool,
    records: u64,
    record: usize,
    ctx: &'a RunCtx<'a>,
}

impl FileIo<'_> {
    /// Starts phase `name`'s clock, with a lap of that name: an armed run's host starts its own
    /// clock for the phase there ([`Workload::on_host_laps`]), after the phase's setup.
    fn start(&self, name: &str) -> Instant {
        self.ctx.lap(name);
        Instant::now()
    }

    /// The phase's seconds on this clock; an `end` lap stops the host's.
    fn stop(&self, t0: Instant) -> f64 {
        let secs = t0.elapsed().as_secs_f64();
        self.ctx.lap("end");
        secs
    }

    /// Sequential write (create) and rewrite.
    fn seq_write(&self, create: bool, buf: &mut PageBuf) -> Result<Phase, DiskError> {
        let path = self.path;
        let t0 = self.start(if create { "write" } else { "rewrite" });
        let mut f = open(path, self.direct, true, create).map_err(|e| io_err("cannot open", path, e))?;
        let mut bytes = 0u64;
        for i in 0..self.records {
            if self.ctx.stopped() {
                return Err(DiskError::Stopped);
            }
            buf.as_mut()[0] = i as u8;
            f.write_all(buf.as_ref()).map_err(|e| io_err("cannot write", path, e))?;
            bytes += self.record as u64;
        }
        if self.fsync {
            f.sync_all().map_err(|e| io_err("cannot fsync", path, e))?;
        }
        Ok(Phase { bytes, secs: self.stop(t0), lat_us: Vec::new() })
    }

    /// Sequential read, from the disk (`evict`: the file's cached pages dropped first) or the cache.
    fn seq_read(&self, evict: bool, buf: &mut PageBuf) -> Result<Phase, DiskError> {
        let path = self.path;
        let mut f = open(path, self.direct, false, false).map_err(|e| io_err("cannot open", path, e))?;
        if evict && !self.direct {
            drop_cached(&f);
        }
        hint(&f, libc::POSIX_FADV_SEQUENTIAL);
        let t0 = self.start(if evict { "read" } else { "reread" });
        let mut bytes = 0u64;
        f.seek(SeekFrom::Start(0)).map_err(|e| io_err("cannot seek", path, e))?;
        loop {
            let n = f.read(buf.as_mut()).map_err(|e| io_err("cannot read", path, e))?;
            if n == 0 || self.ctx.stopped() {
                break;
            }
            bytes += n as u64;
        }
        Ok(Phase { bytes, secs: self.stop(t0), lat_us: Vec::new() })
    }

    /// Every record once in a random order, read or written, each one's latency kept.
    fn random(&self, write: bool, buf: &mut PageBuf) -> Result<Phase, DiskError> {
        let path = self.path;
        let f = open(path, self.direct, write, false).map_err(|e| io_err("cannot open", path, e))?;
        if !write && !self.direct {
            drop_cached(&f);
        }
        hint(&f, libc::POSIX_FADV_RANDOM);
        let mut lat = Vec::with_capacity(self.records as usize);
        let t0 = self.start(if write { "randwrite" } else { "randread" });
        for r in random_records(self.records, if write { 0x5eed } else { 0xfeed }) {
            if self.ctx.stopped() {
                return Err(DiskError::Stopped);
            }
            let off = r * self.record as u64;
            let t = Instant::now();
            if write {
                f.write_all_at(buf.as_ref(), off).map_err(|e| io_err("cannot write", path, e))?;
            } else {
                f.read_exact_at(buf.as_mut(), off).map_err(|e| io_err("cannot read", path, e))?;
            }
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        if write && self.fsync {
            f.sync_all().map_err(|e| io_err("cannot fsync", path, e))?;
        }
        let secs = self.stop(t0);
        lat.sort_by(f64::total_cmp);
        Ok(Phase { bytes: self.records * self.record as u64, secs, lat_us: lat })
    }

    /// Sequential writes, each durable before the next (a journal's, a database's commit).
    fn sync_write(&self, buf: &mut PageBuf) -> Result<Phase, DiskError> {
        let path = self.path;
        let f = open(path, self.direct, true, false).map_err(|e| io_err("cannot open", path, e))?;
        let mut lat = Vec::with_capacity(self.records as usize);
        let t0 = self.start("syncwrite");
        for i in 0..self.records {
            if self.ctx.stopped() {
                return Err(DiskError::Stopped);
            }
            let t = Instant::now();
            f.write_all_at(buf.as_ref(), i * self.record as u64)
                .map_err(|e| io_err("cannot write", path, e))?;
            f.sync_data().map_err(|e| io_err("cannot fdatasync", path, e))?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let secs = self.stop(t0);
        lat.sort_by(f64::total_cmp);
        Ok(Phase { bytes: self.records * self.record as u64, secs, lat_us: lat })
    }
}

/// The asked-for phases' figures (bandwidth, and IOPS and latency percentiles where each request
/// was timed) and their bytes and seconds for the detail.
fn phase_samples(
    phases: &[(&str, Phase)],
    modes: &[&str],
) -> (Vec<virtperf_proto::Sample>, serde_json::Map<String, serde_json::Value>) {
    let mut samples = Vec::new();
    let mut detail = serde_json::Map::new();
    for (mode, ph) in phases {
        if !modes.contains(mode) {
            continue;
        }
        samples.push(sample(&format!("disk_{mode}"), ph.mbps(), "MB/s"));
        if !ph.lat_us.is_empty() {
            samples.push(sample(
                &format!("disk_{mode}_iops"),
                ph.lat_us.len() as f64 / ph.secs.max(1e-9),
                "IOPS",
            ));
            samples.push(sample(&format!("disk_{mode}_p50"), percentile(&ph.lat_us, 0.50), "us"));
            samples.push(sample(&format!("disk_{mode}_p99"), percentile(&ph.lat_us, 0.99), "us"));
        }
        detail.insert(
            mode.to_string(),
            serde_json::json!({"bytes": ph.bytes, "seconds": ph.secs, "requests": ph.lat_us.len()}),
        );
    }
    (samples, detail)
}

/// The filesystem type under `dir` (from /proc/self/mountinfo: the longest mount point that
/// contains it).
fn statfs_type(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    // The calling thread's mounts (a thread may have a mount namespace of its own: pfs's client).
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo")
        .or_else(|_| std::fs::read_to_string("/proc/self/mountinfo"))
        .unwrap_or_default();
    let mut best = (0usize, String::from("unknown"));
    for l in info.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(mp), Some(dash)) = (f.get(4), f.iter().position(|x| *x == "-")) else { continue };
        if dir.starts_with(mp) && mp.len() >= best.0 {
            best = (mp.len(), f.get(dash + 1).map(|s| s.to_string()).unwrap_or_default());
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kinded;
    use std::collections::BTreeMap;

    fn params(kv: &[(&str, serde_json::Value)]) -> BTreeMap<String, serde_json::Value> {
        let given = kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        crate::params::revalidate(Disk.params(), &given).unwrap()
    }

    #[test]
    fn every_phase_moves_the_whole_file_and_leaves_nothing() {
        let d = tempfile_dir();
        let p = params(&[
            ("file_size", 4_194_304u64.into()),
            ("record_size", 65536u64.into()),
            ("dir", d.to_string_lossy().into_owned().into()),
        ]);
        let out = Disk.run(&Params(&p), &RunCtx::detached()).unwrap();
        let names: Vec<&str> = out.samples.iter().map(|s| s.metric.as_str()).collect();
        for m in METRICS {
            assert!(names.contains(&m.name), "{} missing from {names:?}", m.name);
        }
        for mode in MODES {
            assert_eq!(out.extra["phases"][mode]["bytes"], 4_194_304, "{mode}");
        }
        assert!(out.samples.iter().all(|s| s.value.is_finite() && s.value > 0.0), "{:?}", out.samples);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "the test file is removed");
        let _ = std::fs::remove_dir(&d);
    }

    /// Each phase's clock is bracketed by laps — its name where its clock starts (after its
    /// setup: the eviction of read), `end` where it stops — so that the host's span from lap to
    /// lap is the phase's own; on one clock the host twin agrees with the phase's figure.
    #[test]
    fn laps_bracket_each_phase_and_give_its_figure_on_the_hosts_clock() {
        let d = tempfile_dir();
        let p = params(&[
            ("file_size", 16_777_216u64.into()),
            ("record_size", 65536u64.into()),
            ("modes", "write,read,randread,syncwrite".into()),
            ("dir", d.to_string_lossy().into_owned().into()),
        ]);
        let laps = std::sync::Mutex::new(Vec::<(String, Instant)>::new());
        let lap = |n: &str| laps.lock().unwrap().push((n.to_string(), Instant::now()));
        let never = std::sync::atomic::AtomicBool::new(false);
        let cpu = crate::workload::ThreadCpuTotal::default();
        let ctx = RunCtx::with_hooks(&never, &|| {}, &|| {}, None, &cpu).with_lap(&lap);
        let out = Disk.run(&Params(&p), &ctx).unwrap();
        let laps = laps.into_inner().unwrap();
        let names: Vec<&str> = laps.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["write", "end", "read", "end", "randread", "end", "syncwrite", "end"]);
        let spans: Vec<(String, u64)> =
            laps.windows(2).map(|w| (w[0].0.clone(), (w[1].1 - w[0].1).as_nanos() as u64)).collect();
        let twins = Disk.on_host_laps(&Params(&p), &out.extra, &spans);
        let get = |m: &str| out.samples.iter().chain(&twins).find(|s| s.metric == m).map(|s| s.value);
        for m in ["disk_write", "disk_read", "disk_randread", "disk_randread_iops", "disk_syncwrite_iops"] {
            let (own, host) = (get(m).unwrap(), get(&format!("{m}_host")).unwrap());
            // The lap's own cost (a mutex push here) is all that differs.
            assert!((host / own - 1.0).abs() < 0.02, "{m}: host {host} against {own}");
        }
        // Only the phases asked for, and nothing from the `end` spans between them.
        assert!(twins.iter().all(|s| s.metric.ends_with("_host") && !s.metric.contains("end")), "{twins:?}");
        assert_eq!(twins.len(), 4 + 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_full_disk_is_a_clear_error_and_leaves_nothing() {
        // A small tmpfs would need root; /dev/full fails every write with ENOSPC.
        let e = io_err("cannot write", Path::new("/x/f"), std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(
            e.kind(),
            crate::error::FailureKind::NoSpace,
            "the orchestrator decides on this, not on the words"
        );
        let e = e.to_string();
        assert!(e.contains("no space left") && e.contains("file_size"), "{e}");
        let mut f = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let err = f.write_all(&[0u8; 4096]).and_then(|_| f.sync_all()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn sizes_and_modes_are_checked() {
        assert!(check_sizes(1 << 20, 4096, true).is_ok());
        assert_eq!(check_sizes(4096, 8192, false).unwrap_err().key, "record_size");
        assert_eq!(check_sizes(1 << 20, 1000, true).unwrap_err().key, "record_size");
        assert_eq!(check_sizes(1_000_000, 4096, true).unwrap_err().key, "file_size");
        assert_eq!(parse_modes("reread,write").unwrap(), ["write", "reread"]);
        assert_eq!(parse_modes("scribble").unwrap_err().key, "modes");
        let p = params(&[("dir", "/nonexistent/x".into())]);
        assert_eq!(Disk.check(&Params(&p)).unwrap_err().key, "dir");
    }

    #[test]
    fn random_offsets_visit_every_record_once_out_of_order() {
        for n in [1u64, 2, 3, 1000, 4096, 65537] {
            let v: Vec<u64> = random_records(n, 0xfeed).collect();
            let distinct: std::collections::BTreeSet<u64> = v.iter().copied().collect();
            assert_eq!(distinct.len() as u64, n, "each of {n} records once");
            assert!(v.iter().all(|&r| r < n));
            if n >= 1000 {
                let in_order = v.windows(2).filter(|w| w[1] == w[0] + 1).count();
                assert!(in_order * 10 < n as usize, "scrambled: {in_order} of {n} steps sequential");
            }
        }
        assert_ne!(random_records(1000, 1).collect::<Vec<_>>(), random_records(1000, 2).collect::<Vec<_>>());
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "vp-disk-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::create_dir_all(&d);
        d
    }
}
