//! What an instance costs the host in memory: the proportional and unique set sizes (PSS, USS) of
//! every host process it runs, from each one's `smaps_rollup`, and the charge of its cgroup where
//! it has one (`memory.current`: its page cache and kernel memory too). Read by the host, never
//! reported by the instance: a guest cannot make itself look small.

use std::path::{Path, PathBuf};

use super::cgroup::CpuProbe;

/// The most processes one instance's footprint reads (a UML guest is a host process per guest
/// process; a container's workload may fork): beyond it the figure says it is partial.
const MAX_PROCESSES: usize = 4096;
/// The most bytes read of one `smaps_rollup` (it is ~1 KiB).
const ROLLUP_MAX: u64 = 16 << 10;

/// An instance's memory on the host, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Proportional set size: each shared page divided among the processes mapping it. The sum
    /// over instances is what they cost together.
    pub pss_kib: u64,
    /// Unique set size (private clean + private dirty): what stopping the instance gives back.
    pub uss_kib: u64,
    /// Resident set size (shared pages counted in full).
    pub rss_kib: u64,
    /// Host processes read.
    pub processes: u32,
    /// The cgroup's charge (`memory.current`), when the instance has a cgroup v2 of its own.
    pub charged_kib: Option<u64>,
    /// True when there were more processes than [`MAX_PROCESSES`] (the sums are a floor).
    pub partial: bool,
}

/// The footprint of the instance behind `probe` now: its cgroup's processes (v2) or its one
/// process. None for instances read elsewhere (remote) or through cgroup v1, and when no process
/// could be read.
pub fn footprint(probe: &CpuProbe) -> Option<Footprint> {
    let (pids, charged_kib, partial) = match probe {
        CpuProbe::Proc(pid) => (vec![*pid], None, false),
        CpuProbe::CgroupV2(stat) => {
            let dir = stat.parent()?;
            let (pids, partial) = cgroup_pids(dir);
            let charged = read_small(&dir.join("memory.current")).and_then(|s| s.trim().parse::<u64>().ok());
            (pids, charged.map(|b| b / 1024), partial)
        }
        CpuProbe::CgroupV1(usage) => {
            // cpuacct's directory holds the processes; the memory controller's of the same name,
            // where the instance has one (a memory limit), its charge.
            let dir = usage.parent()?;
            let (pids, partial) = cgroup_pids(dir);
            let charged = dir
                .strip_prefix(dir.ancestors().nth(v1_depth(dir)?)?)
                .ok()
                .map(|rel| Path::new(V1_MEMORY).join(rel).join("memory.usage_in_bytes"))
                .and_then(|p| read_small(&p))
                .and_then(|s| s.trim().parse::<u64>().ok());
            (pids, charged.map(|b| b / 1024), partial)
        }
        CpuProbe::Remote(_) => return None,
    };
    let mut f = Footprint { charged_kib, partial, ..Footprint::default() };
    for pid in pids {
        if let Some(r) = read_small(Path::new(&format!("/proc/{pid}/smaps_rollup"))).map(|t| rollup(&t)) {
            f.pss_kib += r.pss_kib;
            f.uss_kib += r.uss_kib;
            f.rss_kib += r.rss_kib;
            f.processes += 1;
        }
    }
    (f.processes > 0).then_some(f)
}

/// Where cgroup v1's memory controller is mounted (a host of several v1 hierarchies).
const V1_MEMORY: &str = "/sys/fs/cgroup/memory";

/// How many levels below its hierarchy's mount a v1 cgroup directory is: the mount is the
/// ancestor that holds `cgroup.clone_children` but whose parent does not.
fn v1_depth(dir: &Path) -> Option<usize> {
    let levels: Vec<&Path> = dir.ancestors().collect();
    (0..levels.len()).find(|&i| {
        levels[i].join("cgroup.clone_children").exists()
            && levels.get(i + 1).is_none_or(|p| !p.join("cgroup.clone_children").exists())
    })
}

/// The pids of a cgroup and of the cgroups below it (a runtime's sandbox may make its own), at
/// most [`MAX_PROCESSES`]; true when there were more.
fn cgroup_pids(dir: &Path) -> (Vec<u32>, bool) {
    let mut pids = Vec::new();
    let mut todo: Vec<PathBuf> = vec![dir.to_path_buf()];
    let mut dirs = 0;
    while let Some(d) = todo.pop() {
        dirs += 1;
        if dirs > MAX_PROCESSES {
            return (pids, true);
        }
        if let Some(t) = read_small(&d.join("cgroup.procs")) {
            for p in t.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                if pids.len() == MAX_PROCESSES {
                    return (pids, true);
                }
                pids.push(p);
            }
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            todo.extend(rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    (pids, false)
}

/// A file of the kernel's, read up to [`ROLLUP_MAX`] bytes (cgroup.procs of a big cgroup is
/// bounded by [`MAX_PROCESSES`] lines in practice: 4096 pids of 8 bytes fit in 32 KiB).
fn read_small(p: &Path) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(p).ok()?;
    let mut s = String::new();
    f.take(ROLLUP_MAX.max(MAX_PROCESSES as u64 * 8)).read_to_string(&mut s).ok()?;
    Some(s)
}

/// One process's PSS, USS and RSS from its `smaps_rollup` text.
fn rollup(text: &str) -> Footprint {
    let mut f = Footprint::default();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let (Some(key), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match key {
            "Pss:" => f.pss_kib = v,
            "Rss:" => f.rss_kib = v,
            "Private_Clean:" | "Private_Dirty:" => f.uss_kib += v,
            _ => {}
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollup_gives_pss_uss_and_rss() {
        let t = "55d0c000-7ffd0000 ---p 00000000 00:00 0                          [rollup]\n\
                 Rss:                4096 kB\nPss:                2500 kB\nPss_Anon:           1000 kB\n\
                 Shared_Clean:       2000 kB\nPrivate_Clean:       300 kB\nPrivate_Dirty:      1200 kB\n";
        let f = rollup(t);
        assert_eq!((f.pss_kib, f.uss_kib, f.rss_kib), (2500, 1500, 4096));
    }

    /// This test's own process, read as a native instance's would be: a PSS no larger than its
    /// RSS, a USS no larger than its PSS, and more than a MiB (a Rust test binary with threads).
    #[test]
    fn a_process_is_read_from_its_own_rollup() {
        let f = footprint(&CpuProbe::Proc(std::process::id())).expect("our own smaps_rollup");
        assert_eq!(f.processes, 1);
        assert!(f.uss_kib <= f.pss_kib && f.pss_kib <= f.rss_kib, "{f:?}");
        assert!(f.rss_kib > 1024, "{f:?}");
        assert_eq!(f.charged_kib, None);
    }

    #[test]
    fn a_gone_process_has_no_footprint() {
        assert_eq!(footprint(&CpuProbe::Proc(u32::MAX - 7)), None);
    }
}
