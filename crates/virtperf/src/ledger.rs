//! The ledger: everything virtperf creates on the host is written here *before* it is created,
//! and removed from here after it is removed. One file per orchestrator process in the state
//! directory; each start sweeps the files of processes that are gone (a `kill -9`, a crash), so a
//! killed run costs at most one start's worth of cleanup, never a leak.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::host::process_start;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// A process we started; `start` is its start time in clock ticks (field 22 of
    /// /proc/PID/stat) so a reused pid is never killed by mistake.
    Process { pid: u32, start: u64, what: String },
    /// An OCI container, removed with `RUNTIME --root ROOT delete --force ID`.
    Container { runtime: String, root: PathBuf, id: String },
    /// A directory below the state directory.
    Dir { path: PathBuf },
    /// A directory on the scratch disk (the run's, an instance's: images, bind-mounted
    /// directories), removed whole only while it holds virtperf's marker file ([`SCRATCH_MARKER`]),
    /// or when empty: it lives outside the state directory, below `VIRTPERF_SCRATCH`.
    ScratchDir { path: PathBuf },
    /// Files a disk workload writes into a directory the user named (native `dir=`): those whose
    /// name starts with `prefix` (always `virtperf-disk-AGENTPID-`).
    ScratchFiles { dir: PathBuf, prefix: String },
    /// A cgroup (path relative to each controller's mount), removed with rmdir.
    Cgroup { rel: String },
    /// A network namespace of the lab (`/run/netns/NAME`), removed with `ip netns delete`, which
    /// also destroys the links and qdiscs inside it.
    Netns { name: String },
    /// A libvirt domain virtperf started (its own transient guest, or an existing domain it
    /// powered on), powered off with `virsh -c URI destroy NAME`.
    Domain { uri: String, name: String },
    /// A lab tap lent to a libvirt daemon's network namespace while a domain starts (named
    /// `vpl…`), deleted there if a run died before taking it back.
    DaemonTap { name: String },
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    owner: u32,
    owner_start: u64,
    entries: Vec<Entry>,
}

pub struct Ledger {
    path: PathBuf,
    state_dir: PathBuf,
    file: File,
    /// Its entries undone and its file removed.
    closed: bool,
}

/// Where virtperf keeps its ledger and per-run scratch: `$VIRTPERF_STATE_DIR`, else `/run/virtperf`
/// for root, else `$TMPDIR/virtperf-UID`.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VIRTPERF_STATE_DIR") {
        return PathBuf::from(d);
    }
    if crate::host::is_root() {
        PathBuf::from("/run/virtperf")
    } else {
        // SAFETY: getuid has no preconditions and cannot fail.
        std::env::temp_dir().join(format!("virtperf-{}", unsafe { libc::getuid() }))
    }
}

impl Ledger {
    /// Sweeps what dead orchestrators left, then opens this process's own ledger.
    pub fn open() -> std::io::Result<(Ledger, Vec<String>)> {
        let state_dir = state_dir();
        crate::host::ensure_private_dir(&state_dir)?;
        let swept = sweep(&state_dir);
        let me = std::process::id();
        let file = File { owner: me, owner_start: process_start(me).unwrap_or(0), entries: Vec::new() };
        let path = state_dir.join(format!("ledger-{me}.json"));
        let l = Ledger { path, state_dir, file, closed: false };
        l.save()?;
        Ok((l, swept))
    }

    /// Another ledger of this process, for a worker thread (`ledger-PID-wN.json`): it sweeps
    /// nothing (the process's first ledger did) and is swept like the first when the process dies.
    pub fn open_worker(n: usize) -> std::io::Result<Ledger> {
        let state_dir = state_dir();
        let me = std::process::id();
        let file = File { owner: me, owner_start: process_start(me).unwrap_or(0), entries: Vec::new() };
        let path = state_dir.join(format!("ledger-{me}-w{n}.json"));
        let l = Ledger { path, state_dir, file, closed: false };
        l.save()?;
        Ok(l)
    }

    /// A ledger of one launch among several started at once (`ledger-PID-TAG.json`, TAG the
    /// instance's id): each start's thread records into its own, which is then
    /// [absorbed](Ledger::absorb) by the worker's. Swept like any other when this process dies.
    pub fn open_part(tag: &str) -> std::io::Result<Ledger> {
        let state_dir = state_dir();
        let me = std::process::id();
        let file = File { owner: me, owner_start: process_start(me).unwrap_or(0), entries: Vec::new() };
        let tag: String =
            tag.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let path = state_dir.join(format!("ledger-{me}-{tag}.json"));
        let l = Ledger { path, state_dir, file, closed: false };
        l.save()?;
        Ok(l)
    }

    /// Takes over what `part` holds (saved here first, then `part`'s file removed: a crash in
    /// between leaves the entries in both, and undoing one twice is harmless).
    pub fn absorb(&mut self, mut part: Ledger) {
        let entries = std::mem::take(&mut part.file.entries);
        for e in entries {
            if !self.file.entries.contains(&e) {
                self.file.entries.push(e);
            }
        }
        part.closed = true;
        match self.save() {
            Ok(()) => {
                let _ = std::fs::remove_file(&part.path);
            }
            // The part's file still holds them on disk, for the sweep after this process.
            Err(err) => eprintln!("warning: cannot write the ledger {}: {err}", self.path.display()),
        }
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    fn save(&self) -> std::io::Result<()> {
        crate::host::write_atomic(&self.path, &serde_json::to_vec_pretty(&self.file)?)
    }

    fn push(&mut self, e: Entry) {
        self.file.entries.push(e);
        if let Err(err) = self.save() {
            eprintln!("warning: cannot write the ledger {}: {err}", self.path.display());
        }
    }

    fn remove(&mut self, f: impl Fn(&Entry) -> bool) {
        self.file.entries.retain(|e| !f(e));
        if let Err(err) = self.save() {
            eprintln!("warning: cannot write the ledger {}: {err}", self.path.display());
        }
    }

    /// Records a directory, then creates it, readable by this user only.
    pub fn create_dir(&mut self, path: &Path) -> std::io::Result<()> {
        self.push(Entry::Dir { path: path.to_path_buf() });
        crate::host::ensure_private_dir(path)
    }

    /// Records a scratch directory, creates it (readable by this user only) and marks it as
    /// virtperf's, so that only it is ever removed by [`Entry::ScratchDir`].
    pub fn create_scratch_dir(&mut self, path: &Path) -> std::io::Result<()> {
        self.push(Entry::ScratchDir { path: path.to_path_buf() });
        crate::host::ensure_private_dir(path)?;
        std::fs::write(path.join(SCRATCH_MARKER), b"created by virtperf; removed with this directory\n")
    }

    pub fn remove_scratch_dir(&mut self, path: &Path) {
        let e = Entry::ScratchDir { path: path.to_path_buf() };
        undo(&e, &self.state_dir);
        self.remove(|x| *x == e);
    }

    pub fn remove_dir(&mut self, path: &Path) {
        let _ = std::fs::remove_dir_all(path);
        self.remove(|e| matches!(e, Entry::Dir { path: p } if p == path));
    }

    /// Records a process that was just spawned (its pid exists only after the spawn; the window is
    /// covered by PR_SET_PDEATHSIG or by the container entry recorded before it).
    pub fn record_process(&mut self, pid: u32, what: &str) {
        let start = process_start(pid).unwrap_or(0);
        self.push(Entry::Process { pid, start, what: what.to_string() });
    }

    pub fn forget_process(&mut self, pid: u32) {
        self.remove(|e| matches!(e, Entry::Process { pid: p, .. } if *p == pid));
    }

    pub fn record(&mut self, e: Entry) {
        self.push(e);
    }

    /// Records `e` unless it is already recorded (shared parents such as the `virtperf` cgroup).
    pub fn record_once(&mut self, e: Entry) {
        if !self.file.entries.contains(&e) {
            self.push(e);
        }
    }

    pub fn forget(&mut self, e: &Entry) {
        self.remove(|x| x == e);
    }

    /// Removes everything still recorded and the ledger file itself.
    pub fn close(mut self) {
        self.undo_all();
    }

    fn undo_all(&mut self) {
        let entries = std::mem::take(&mut self.file.entries);
        for e in entries.iter().rev() {
            undo(e, &self.state_dir);
        }
        if !self.closed {
            let _ = std::fs::remove_file(&self.path);
            self.closed = true;
        }
    }
}

/// A ledger left without [`Ledger::close`] — an early return, a panic unwinding through the run
/// — undoes what it still holds there and then, rather than at the next start.
impl Drop for Ledger {
    fn drop(&mut self) {
        if !self.closed {
            self.undo_all();
        }
    }
}

/// The OCI runtimes a container entry may name.
const RUNTIMES: [&str; 3] = ["runc", "crun", "runsc"];

/// The file that marks a scratch directory as virtperf's own.
pub const SCRATCH_MARKER: &str = ".virtperf-scratch";

/// Prefix of every file the disk workload writes (`virtperf-disk-PID-TID.dat`).
pub const DISK_FILE_PREFIX: &str = "virtperf-disk-";

/// Undoes one entry. Each step is idempotent: a thing already gone is fine.
pub fn undo(e: &Entry, state_dir: &Path) {
    match e {
        Entry::Process { pid, start, .. } => {
            if *start != 0 && process_start(*pid) == Some(*start) {
                // SAFETY: kill(2) with a pid we verified by its start time; no memory involved.
                unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
            }
        }
        Entry::Container { runtime, root, id } => {
            // Only an OCI runtime virtperf runs is ever run from a ledger, whatever it says.
            let name = Path::new(runtime).file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !RUNTIMES.contains(&name) {
                return;
            }
            for args in [&["kill", id.as_str(), "KILL"][..], &["delete", "--force", id.as_str()][..]] {
                let _ = crate::host::command::status_within(
                    Command::new(runtime).arg("--root").arg(root).args(args),
                    crate::host::command::SHORT,
                );
            }
        }
        Entry::Dir { path } => {
            // Only ever below our own state directory.
            if path.starts_with(state_dir) && path != state_dir {
                let _ = std::fs::remove_dir_all(path);
            }
        }
        Entry::ScratchDir { path } => {
            // Nothing below it decides anything: an environment writes there (a container's
            // /scratch is this directory), so no file of it is read, only removed. What its
            // workloads left running (a pfs server's glusterd and bricks) goes with the
            // instance's cgroup or its container, which the host made and recorded itself.
            if path.join(SCRATCH_MARKER).is_file() {
                let _ = std::fs::remove_dir_all(path);
            } else {
                // Recorded, but the marker was never written: only an empty directory goes.
                let _ = std::fs::remove_dir(path);
            }
        }
        Entry::ScratchFiles { dir, prefix } => {
            if prefix.starts_with(DISK_FILE_PREFIX) && prefix.len() > DISK_FILE_PREFIX.len() {
                for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    if name.starts_with(prefix.as_str()) && name.ends_with(".dat") {
                        let _ = std::fs::remove_file(f.path());
                    }
                }
            }
        }
        Entry::Netns { name } => crate::host::delete_netns(name),
        Entry::Cgroup { rel } => crate::host::remove_cgroup(rel, 50),
        Entry::Domain { uri, name } => crate::host::destroy_domain(uri, name),
        Entry::DaemonTap { name } => crate::host::sweep_lent_tap(name),
    }
}

/// Sweeps the ledgers of orchestrators that no longer run; returns a line per thing swept.
pub fn sweep(state_dir: &Path) -> Vec<String> {
    let mut swept = sweep_ledgers(state_dir);
    swept.extend(sweep_orphans());
    swept
}

/// What the ledgers (and their cut-short temporaries) in `state_dir` record of owners gone: the
/// part of [`sweep`] that looks nowhere else, so a test of it does not count what another
/// process left on the host.
fn sweep_ledgers(state_dir: &Path) -> Vec<String> {
    let mut swept = Vec::new();
    let Ok(rd) = std::fs::read_dir(state_dir) else { return swept };
    for ent in rd.flatten() {
        let path = ent.path();
        let name = ent.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("ledger-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let Ok(file) = serde_json::from_slice::<File>(&bytes) else {
            eprintln!("warning: unreadable ledger {} left in place; remove it by hand", path.display());
            continue;
        };
        let alive = process_start(file.owner).is_some_and(|s| s == file.owner_start);
        if alive {
            continue;
        }
        for e in file.entries.iter().rev() {
            undo(e, state_dir);
            swept.push(format!("{e:?}"));
        }
        let _ = std::fs::remove_file(&path);
    }
    swept.extend(sweep_temporaries(state_dir, &swept));
    swept
}

/// The orchestrator's pid in a name virtperf gives what it makes on the host (`vp{PID}` and
/// `vp{PID}-…`: the lab's namespaces, the instances' cgroups).
fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("vp")?;
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    (end > 0 && (end == rest.len() || rest[end..].starts_with('-'))).then(|| rest[..end].parse().ok())?
}

/// Namespaces and cgroups whose ledger is gone — a test's state directory removed with it, a
/// removal that gave up while a killed process was still inside — and whose owner, the pid in
/// their name, no longer runs. An empty `virtperf/vp12280-0-0` (freezer, cpuacct) outlived every run
/// of a day that way. A live owner's, and any name not virtperf's, stay.
fn sweep_orphans() -> Vec<String> {
    let dead = |name: &str| owner_of(name).is_some_and(|pid| process_start(pid).is_none());
    let mut cgroups = std::collections::BTreeSet::new();
    for m in crate::host::cgroup_mounts() {
        for ent in std::fs::read_dir(m.join("virtperf")).into_iter().flatten().flatten() {
            let name = ent.file_name().to_string_lossy().into_owned();
            if ent.path().is_dir() && dead(&name) {
                cgroups.insert(format!("virtperf/{name}"));
            }
        }
    }
    let mut swept = Vec::new();
    for rel in cgroups {
        crate::host::remove_cgroup(&rel, 50);
        if !crate::host::cgroup_mounts().iter().any(|m| m.join(&rel).exists()) {
            swept.push(format!("cgroup {rel} (its owner gone, no ledger)"));
        }
    }
    for ent in std::fs::read_dir(crate::host::NETNS_DIR).into_iter().flatten().flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        if crate::host::netns_is_ours(&name) && dead(&name) {
            crate::host::delete_netns(&name);
            if !crate::host::netns_path(&name).exists() {
                swept.push(format!("network namespace {name} (its owner gone, no ledger)"));
            }
        }
    }
    swept
}

/// The temporaries of writes cut short (`write_atomic`'s `.NAME.tmp-PID`, a kill -9 between its
/// write and its rename) whose writer no longer runs. A ledger's temporary may hold entries its
/// ledger never got (the first save of a run killed mid-way): those still readable are undone
/// unless the ledger's sweep (`done`) already undid them.
fn sweep_temporaries(state_dir: &Path, done: &[String]) -> Vec<String> {
    let mut swept = Vec::new();
    let Ok(rd) = std::fs::read_dir(state_dir) else { return swept };
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(writer) = temporary_writer(&name) else { continue };
        if process_start(writer).is_some() {
            continue;
        }
        let path = ent.path();
        if name.starts_with(".ledger-") {
            if let Some(file) =
                std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<File>(&b).ok())
            {
                for e in file.entries.iter().rev() {
                    let what = format!("{e:?}");
                    if !done.contains(&what) {
                        undo(e, state_dir);
                        swept.push(what);
                    }
                }
            }
        }
        if std::fs::remove_file(&path).is_ok() {
            swept.push(format!("temporary {}", path.display()));
        }
    }
    swept
}

/// `.ledger-12.json.tmp-12` → 12: the pid of the process whose atomic write left it.
fn temporary_writer(name: &str) -> Option<u32> {
    let (_, pid) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_self_and_of_nothing() {
        assert!(process_start(std::process::id()).is_some());
        assert_eq!(process_start(u32::MAX - 1), None);
    }

    #[test]
    fn sweep_removes_leftovers_of_dead_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let leftover = state.join("run-dead");
        std::fs::create_dir_all(&leftover).unwrap();
        // A child that outlives its (fake, dead) owner.
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let start = process_start(child.id()).unwrap();
        let dead = File {
            owner: u32::MAX - 2,
            owner_start: 1,
            entries: vec![
                Entry::Dir { path: leftover.clone() },
                Entry::Process { pid: child.id(), start, what: "sleep".into() },
                Entry::Dir { path: PathBuf::from("/etc") },
            ],
        };
        std::fs::write(state.join("ledger-1.json"), serde_json::to_vec(&dead).unwrap()).unwrap();
        let me = std::process::id();
        let alive = File {
            owner: me,
            owner_start: process_start(me).unwrap(),
            entries: vec![Entry::Dir { path: state.join("keep") }],
        };
        std::fs::create_dir_all(state.join("keep")).unwrap();
        std::fs::write(state.join("ledger-2.json"), serde_json::to_vec(&alive).unwrap()).unwrap();

        // Only the ledgers' part: the host-wide orphan sweep finds whatever another process
        // left (CI ran this beside the e2e tests and counted a fourth).
        let swept = sweep_ledgers(state);
        assert_eq!(swept.len(), 3, "{swept:?}");
        assert!(!leftover.exists());
        assert!(Path::new("/etc").exists(), "never removes outside the state dir");
        assert!(state.join("keep").exists(), "a live owner's things stay");
        assert!(!state.join("ledger-1.json").exists());
        let status = child.wait().unwrap();
        assert!(!status.success(), "the leftover process was killed");
    }

    /// A kill -9 between write_atomic's write and its rename leaves `.ledger-PID.json.tmp-PID`:
    /// the next start removes it (undoing what only it recorded) once its writer is gone, and
    /// leaves a live writer's alone.
    #[test]
    fn temporaries_of_a_dead_writer_are_swept() {
        assert_eq!(temporary_writer(".ledger-12.json.tmp-12"), Some(12));
        assert_eq!(temporary_writer("ledger-12.json"), None);
        assert_eq!(temporary_writer(".key.tmp-x"), None);
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let only_there = state.join("run-only-in-the-temporary");
        std::fs::create_dir_all(&only_there).unwrap();
        let dead = u32::MAX - 3;
        let file =
            File { owner: dead, owner_start: 1, entries: vec![Entry::Dir { path: only_there.clone() }] };
        let tmp = state.join(format!(".ledger-{dead}.json.tmp-{dead}"));
        std::fs::write(&tmp, serde_json::to_vec(&file).unwrap()).unwrap();
        // Cut short mid-write: not JSON, removed all the same.
        let torn = state.join(format!(".key.tmp-{dead}"));
        std::fs::write(&torn, b"{\"own").unwrap();
        let mine = state.join(format!(".ledger-1.json.tmp-{}", std::process::id()));
        std::fs::write(&mine, b"{}").unwrap();
        let swept = sweep_ledgers(state);
        assert!(!tmp.exists() && !torn.exists() && !only_there.exists(), "{swept:?}");
        assert!(mine.exists(), "a live writer's temporary stays");
        assert_eq!(swept.len(), 3, "{swept:?}");
    }

    /// A start of many at once: each launch's part of the ledger, taken over by the worker's —
    /// on disk before the part's file goes, each entry once — and undone with it, not before.
    #[test]
    fn a_part_is_absorbed_whole_and_undone_with_its_absorber() {
        let d = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let open = |name: &str| {
            let file = File { owner: me, owner_start: process_start(me).unwrap(), entries: Vec::new() };
            let l =
                Ledger { path: d.path().join(name), state_dir: d.path().to_path_buf(), file, closed: false };
            l.save().unwrap();
            l
        };
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        let mut main = open("ledger-main.json");
        main.create_dir(&a).unwrap();
        let mut part = open("ledger-part.json");
        part.create_dir(&b).unwrap();
        part.record_once(Entry::Dir { path: a.clone() });
        main.absorb(part);
        assert!(!d.path().join("ledger-part.json").exists(), "the part's file is gone");
        assert!(a.exists() && b.exists(), "absorbing undoes nothing");
        let on_disk: File =
            serde_json::from_slice(&std::fs::read(d.path().join("ledger-main.json")).unwrap()).unwrap();
        assert_eq!(on_disk.entries, [Entry::Dir { path: a.clone() }, Entry::Dir { path: b.clone() }]);
        main.close();
        assert!(!a.exists() && !b.exists(), "undone with the ledger that took them");
    }

    #[test]
    fn scratch_entries_remove_only_what_virtperf_marked_or_named() {
        let d = tempfile::tempdir().unwrap();
        let marked = d.path().join("run-1");
        std::fs::create_dir_all(marked.join("vp1-0-0")).unwrap();
        std::fs::write(marked.join(SCRATCH_MARKER), b"").unwrap();
        std::fs::write(marked.join("vp1-0-0/scratch.img"), b"x").unwrap();
        let foreign = d.path().join("users");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("data"), b"x").unwrap();
        std::fs::write(foreign.join("virtperf-disk-77-78.dat"), b"x").unwrap();
        std::fs::write(foreign.join("virtperf-disk-99-1.dat"), b"x").unwrap();
        undo(&Entry::ScratchDir { path: marked.clone() }, Path::new("/nonexistent"));
        undo(&Entry::ScratchDir { path: foreign.clone() }, Path::new("/nonexistent"));
        undo(
            &Entry::ScratchFiles { dir: foreign.clone(), prefix: "virtperf-disk-77-".into() },
            Path::new("/nonexistent"),
        );
        // A prefix that is not the disk workload's is never acted on.
        undo(&Entry::ScratchFiles { dir: foreign.clone(), prefix: "d".into() }, Path::new("/nonexistent"));
        assert!(!marked.exists(), "a marked scratch directory goes whole");
        assert!(foreign.join("data").exists(), "an unmarked, non-empty directory stays");
        assert!(!foreign.join("virtperf-disk-77-78.dat").exists());
        assert!(foreign.join("virtperf-disk-99-1.dat").exists(), "another agent's file stays");
    }

    #[test]
    fn orphans_of_a_dead_owner_go_without_a_ledger() {
        assert_eq!(owner_of("vp12280-0-0"), Some(12280));
        assert_eq!(owner_of("vp7"), Some(7));
        assert_eq!(owner_of("vp7-hub"), Some(7));
        for not in ["vp", "vp-1", "vp9123test", "vptest-netem-5", "vpdoctor5-0", "xvp1-0", "vpl0a1b"] {
            assert_eq!(owner_of(not), None, "{not}");
        }
        if !crate::host::is_root() {
            crate::host::unit_skip("the real half: namespaces and cgroups need root");
            return;
        }
        // No process has this pid (pids end at 2^22).
        let (dead, me) = (u32::MAX - 5, std::process::id());
        let names = [format!("vp{dead}-t"), format!("vp{me}-t")];
        for n in &names {
            crate::host::sh("ip", &["netns", "add", n]).unwrap();
        }
        // The `virtperf` parent exists while a run does: made here where it does not (and removed
        // after, where this test made it), so the cgroup half never passes for want of one.
        let mut made = Vec::new();
        for m in crate::host::cgroup_mounts() {
            if !m.join("virtperf").is_dir() && std::fs::create_dir(m.join("virtperf")).is_ok() {
                made.push(m.join("virtperf"));
            }
        }
        let mounts: Vec<PathBuf> =
            crate::host::cgroup_mounts().into_iter().filter(|m| m.join("virtperf").is_dir()).collect();
        assert!(!mounts.is_empty(), "no cgroup hierarchy takes a `virtperf` directory");
        let cg = |n: &str| mounts.iter().map(|m| m.join("virtperf").join(n)).collect::<Vec<_>>();
        for d in cg(&format!("vp{dead}-0-0")).iter().chain(&cg(&format!("vp{me}-0-0"))) {
            let _ = std::fs::create_dir(d);
        }
        let swept = sweep_orphans();
        let (dead_ns, live_ns) =
            (crate::host::netns_path(&names[0]).exists(), crate::host::netns_path(&names[1]).exists());
        let live_cg = cg(&format!("vp{me}-0-0")).iter().all(|d| d.exists());
        let dead_cg = cg(&format!("vp{dead}-0-0")).iter().any(|d| d.exists());
        crate::host::delete_netns(&names[1]);
        crate::host::remove_cgroup(&format!("virtperf/vp{me}-0-0"), 5);
        for d in made {
            let _ = std::fs::remove_dir(d);
        }
        assert!(!dead_ns && !dead_cg, "a dead owner's namespace and cgroups go: {swept:?}");
        assert!(live_ns && live_cg, "a live owner's stay: {swept:?}");
        assert!(swept.iter().any(|l| l.contains(&names[0])), "{swept:?}");
    }

    #[test]
    fn a_reused_pid_is_not_killed() {
        let mut child = Command::new("sleep").arg("2").spawn().unwrap();
        let e = Entry::Process { pid: child.id(), start: 1, what: "x".into() };
        undo(&e, Path::new("/nonexistent"));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(child.try_wait().unwrap().is_none(), "start time mismatch: left alone");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
