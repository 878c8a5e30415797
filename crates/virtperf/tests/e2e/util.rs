//! Helpers of the end-to-end tests.

// The std items every test file uses, in one place (`use crate::util::*`).
pub use std::io::Write;
pub use std::path::{Path, PathBuf};
pub use std::process::{Child, Command, Output, Stdio};
pub use std::time::{Duration, Instant};

pub enum Outcome {
    Pass,
    Skip(String),
}

pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_virtperf")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(exe());
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// How long one virtperf invocation may take before the test fails with its command line
/// (`VIRTPERF_E2E_DEADLINE` seconds; the longest here, a UML kernel build, takes ~6 minutes).
pub fn deadline() -> std::time::Duration {
    let secs = std::env::var("VIRTPERF_E2E_DEADLINE").ok().and_then(|s| s.parse().ok()).unwrap_or(900);
    std::time::Duration::from_secs(secs)
}

/// Runs virtperf to its end; one that hangs past [`deadline`] is stopped (SIGTERM, then SIGKILL
/// 10 s later) and fails the test with its command line, instead of blocking the suite.
pub fn vp(args: &[&str], env: &[(&str, &str)]) -> Output {
    vp_within(args, env, deadline())
}

pub fn vp_within(args: &[&str], env: &[(&str, &str)], limit: std::time::Duration) -> Output {
    let child =
        command(args, env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("virtperf starts");
    Spawned::new(child, format!("virtperf {}", args.join(" "))).wait_within(limit)
}

/// A process a test started (virtperf in the background, sshd, a browser): waited for with the
/// suite's deadline, and ended when the test fails before it waited (a panic unwinds through
/// `Drop`: SIGTERM, then SIGKILL 10 s later), so a failing test leaves nothing running.
pub struct Spawned {
    child: Option<Child>,
    what: String,
}

impl Spawned {
    pub fn new(child: Child, what: impl Into<String>) -> Spawned {
        Spawned { child: Some(child), what: what.into() }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for its end (its output collected) within the suite's [`deadline`].
    pub fn wait(self) -> Output {
        self.wait_within(deadline())
    }

    /// Waits for its end within `limit`; past it, it is stopped (SIGTERM, then SIGKILL 10 s
    /// later) and the test fails with its command line and stderr.
    pub fn wait_within(mut self, limit: std::time::Duration) -> Output {
        use std::io::Read;
        let mut child = self.child.take().expect("a process not yet waited for");
        let so = child.stdout.take();
        let se = child.stderr.take();
        let drain = |p: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(mut p) = p {
                    let _ = p.read_to_end(&mut v);
                }
                v
            })
        };
        let out = drain(so.map(|p| Box::new(p) as Box<dyn Read + Send>));
        let err = drain(se.map(|p| Box::new(p) as Box<dyn Read + Send>));
        let t0 = std::time::Instant::now();
        let mut termed: Option<std::time::Instant> = None;
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            match termed {
                None if t0.elapsed() > limit => {
                    kill(child.id(), libc::SIGTERM);
                    termed = Some(std::time::Instant::now());
                }
                Some(at) if at.elapsed() > std::time::Duration::from_secs(10) => {
                    let _ = child.kill();
                }
                _ => {}
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let output =
            Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() };
        if termed.is_some() {
            panic!(
                "{} did not end within {} s: stopped. Its stderr:\n{}",
                self.what,
                limit.as_secs(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        output
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if matches!(child.try_wait(), Ok(None)) {
            eprintln!("    ending {} (pid {}): its test did not wait for it", self.what, child.id());
            kill(child.id(), libc::SIGTERM);
            let t0 = std::time::Instant::now();
            while matches!(child.try_wait(), Ok(None)) && t0.elapsed() < std::time::Duration::from_secs(10) {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

/// One test's world: a temporary directory holding the run's database and its state directory,
/// and the virtperf command lines that use both. Every e2e test that runs virtperf starts here.
pub struct Fixture {
    dir: tempfile::TempDir,
    pub db: PathBuf,
    pub state: PathBuf,
    vars: Vec<(String, String)>,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempdir();
        let (db, state) = (dir.path().join("run.db"), dir.path().join("state"));
        let vars = vec![("VIRTPERF_STATE_DIR".to_string(), state.to_string_lossy().into_owned())];
        Fixture { dir, db, state, vars }
    }

    /// Sets an environment variable of every invocation.
    pub fn with_var(mut self, key: &str, value: &str) -> Fixture {
        self.vars.push((key.into(), value.into()));
        self
    }

    /// The state directory elsewhere than in the temporary directory (which a guest may not see:
    /// UML's init mounts a tmpfs of its own on /tmp).
    pub fn with_state_dir(mut self, state: &Path) -> Fixture {
        self.state = state.to_path_buf();
        self.vars.retain(|(k, _)| k != "VIRTPERF_STATE_DIR");
        self.vars.push(("VIRTPERF_STATE_DIR".into(), state.to_string_lossy().into_owned()));
        self
    }

    /// A scratch directory of its own (`VIRTPERF_SCRATCH`): where disk files and images land.
    pub fn with_scratch(self) -> Fixture {
        let scratch = self.scratch();
        std::fs::create_dir(&scratch).expect("a scratch directory");
        let s = scratch.to_string_lossy().into_owned();
        self.with_var("VIRTPERF_SCRATCH", &s)
    }

    pub fn scratch(&self) -> PathBuf {
        self.path("scratch")
    }

    /// The temporary directory (removed with the fixture).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A file of the test's own in the temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `text` to a file of the temporary directory and returns its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write a test file");
        p
    }

    pub fn db_str(&self) -> &str {
        self.db.to_str().expect("a UTF-8 temporary path")
    }

    /// The environment every invocation gets: the fixture's state directory and its variables.
    pub fn env(&self) -> Vec<(&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    /// `args` followed by `--db DB`.
    fn with_db<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut v = args.to_vec();
        v.extend(["--db", self.db_str()]);
        v
    }

    /// Runs `virtperf LINE --db DB` (LINE's words split at white space) to its end.
    pub fn vp(&self, line: &str) -> Output {
        self.vp_args(&line.split_whitespace().collect::<Vec<_>>())
    }

    /// Runs `virtperf ARGS --db DB` (for arguments holding spaces or built at run time).
    pub fn vp_args(&self, args: &[&str]) -> Output {
        vp(&self.with_db(args), &self.env())
    }

    /// Runs `virtperf LINE --db DIR/NAME`: a second database in the same fixture.
    pub fn vp_on(&self, name: &str, line: &str) -> Output {
        let db = self.path(name);
        let mut args: Vec<&str> = line.split_whitespace().collect();
        args.extend(["--db", db.to_str().expect("a UTF-8 temporary path")]);
        vp(&args, &self.env())
    }

    /// As [`Fixture::vp_on`], which must succeed.
    pub fn ok_on(&self, name: &str, line: &str) -> Output {
        let out = self.vp_on(name, line);
        assert_ok(&out, line);
        out
    }

    /// Starts `virtperf LINE --db DIR/NAME` and returns at once.
    pub fn spawn_on(&self, name: &str, line: &str) -> Spawned {
        let db = self.path(name);
        let mut args: Vec<&str> = line.split_whitespace().collect();
        args.extend(["--db", db.to_str().expect("a UTF-8 temporary path")]);
        vp_spawn(&args, &self.env())
    }

    /// Runs `virtperf LINE` without a database (doctor, validate, image).
    pub fn bare(&self, line: &str) -> Output {
        vp(&line.split_whitespace().collect::<Vec<_>>(), &self.env())
    }

    /// Starts `virtperf LINE --db DB` and returns at once.
    pub fn spawn(&self, line: &str) -> Spawned {
        vp_spawn(&self.with_db(&line.split_whitespace().collect::<Vec<_>>()), &self.env())
    }

    /// Runs `virtperf LINE --db DB`, which must succeed; its stdout.
    pub fn ok(&self, line: &str) -> Output {
        let out = self.vp(line);
        assert_ok(&out, line);
        out
    }

    /// Runs `virtperf LINE --db DIR/NAME --json`, which must succeed; its JSON.
    pub fn json_on(&self, name: &str, line: &str) -> serde_json::Value {
        json_of(&self.ok_on(name, &format!("{line} --json")), line)
    }

    /// Runs `virtperf LINE --db DB --json`, which must succeed; its JSON.
    pub fn json(&self, line: &str) -> serde_json::Value {
        json_of(&self.ok(&format!("{line} --json")), line)
    }

    /// The stdout of `virtperf LINE --db DB`, as text.
    pub fn text(&self, line: &str) -> String {
        String::from_utf8_lossy(&self.vp(line).stdout).into_owned()
    }

    /// `report --json` of the fixture's database.
    pub fn report(&self) -> serde_json::Value {
        self.json("report")
    }

    /// `export --format json` of the fixture's database.
    pub fn export(&self) -> serde_json::Value {
        json_of(&self.ok("export --format json"), "export --format json")
    }

    /// The next start after a crash: a short native run must succeed (it sweeps what the crashed
    /// run left) and nothing of either may stay.
    pub fn sweep(&self) {
        self.ok("run --env native --workload noop --reps 1");
        assert_no_leftovers(&self.state);
    }

    pub fn assert_no_leftovers(&self) {
        assert_no_leftovers(&self.state);
    }
}

/// Fails the test with the command and its stderr unless `out` succeeded.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "virtperf {what} exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON on `out`'s stdout, or a failed test naming the command.
pub fn json_of(out: &Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("virtperf {what} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
    })
}

pub fn vp_spawn(args: &[&str], env: &[(&str, &str)]) -> Spawned {
    let child =
        command(args, env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("virtperf starts");
    Spawned::new(child, format!("virtperf {}", args.join(" ")))
}

pub fn vp_with_stdin(args: &[&str], input: &str) -> Output {
    let mut c = Command::new(exe());
    c.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("virtperf starts");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    Spawned::new(child, format!("virtperf {}", args.join(" "))).wait()
}

/// Runs `f` with a probe beside it that times a fixed piece of CPU work over and over, and returns
/// `f`'s result with how much the host's speed varied meanwhile: the slowest piece over the
/// fastest (p90 / p10, ≥ 1). A test whose figure depends on the host keeping its speed (a count
/// calibrated at one moment, timed at another) widens its margin by it: beside load that comes
/// and goes the same work took ×1.6 longer from one second to the next.
pub fn with_speed_spread<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut times = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let mut x = 1u64;
                for i in 0..200_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
                }
                std::hint::black_box(x);
                times.push(t.elapsed().as_secs_f64());
                // Mostly idle: a probe that spun would be load itself.
                std::thread::sleep(Duration::from_millis(20));
            }
            times.sort_by(f64::total_cmp);
            let at = |q: f64| times.get(((times.len() as f64 - 1.0) * q) as usize).copied();
            match (at(0.1), at(0.9)) {
                (Some(lo), Some(hi)) if lo > 0.0 => (hi / lo).max(1.0),
                _ => 1.0,
            }
        })
    };
    let out = f();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (out, probe.join().unwrap_or(1.0))
}

pub fn wait_for<T>(mut f: impl FnMut() -> Option<T>, secs: f64) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < deadline {
        if let Some(x) = f() {
            return Some(x);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(s[s.rfind(')')? + 2..].split_whitespace().map(str::to_string).collect())
}

/// Every process below `pid` (its children, theirs, …).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut all = children_of(pid);
    let mut i = 0;
    while i < all.len() {
        let more = children_of(all[i]);
        all.extend(more);
        i += 1;
    }
    all
}

/// Direct children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() {
            if stat_fields(p).and_then(|f| f.get(1).and_then(|pp| pp.parse::<u32>().ok())) == Some(pid) {
                out.push(p);
            }
        }
    }
    out
}

/// Direct children of `pid` that are virtperf agents (`… agent` on their command line): a run
/// also starts short-lived helpers (`zcat /proc/config.gz` for the host's facts, `ip`, `tc`),
/// which a test that kills "the first child" could hit instead.
pub fn agents_of(pid: u32) -> Vec<u32> {
    children_of(pid).into_iter().filter(|c| is_agent(*c)).collect()
}

/// Whether process `pid` runs `… agent` (a virtperf agent, not a helper of the run).
pub fn is_agent(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|b| b.split(|x| *x == 0).nth(1).is_some_and(|a| a == b"agent"))
}

pub fn kill(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid this test started; no memory is involved.
    unsafe { libc::kill(pid as i32, sig) };
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub fn has(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// What this machine kind must run and have (`VIRTPERF_E2E_REQUIRE`, a comma-separated list;
/// .ci/run sets it): doctor's rows (`container`, `uml:kernel=virtperf`), the tools the tests use
/// beside virtperf ([`TOOLS`]: `iperf3`, `browser`, …) and `root`. doctor is code under test, and
/// so is every check a test makes of the host: a regression that called gVisor unusable, or a
/// package list that lost fio, would otherwise turn tests into skips and leave the suite green.
pub fn required_envs() -> Vec<String> {
    std::env::var("VIRTPERF_E2E_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The requirements that are not doctor's rows: each as (its name in `VIRTPERF_E2E_REQUIRE`, the
/// program looked for, the Debian package that installs it).
pub const TOOLS: &[(&str, &str, &str)] = &[
    ("root", "", ""),
    ("runc", "runc", "runc"),
    ("ip", "ip", "iproute2"),
    ("tc", "tc", "iproute2"),
    ("mount", "mount", "mount"),
    ("unshare", "unshare", "util-linux"),
    ("python3", "python3", "python3"),
    ("iperf3", "iperf3", "iperf3"),
    ("fio", "fio", "fio"),
    ("strace", "strace", "strace"),
    ("mke2fs", "mke2fs", "e2fsprogs"),
    ("busybox", "busybox", "busybox-static"),
    ("virsh", "virsh", "libvirt-clients"),
    ("qemu-img", "qemu-img", "qemu-utils"),
    ("browser", "chromium-headless-shell", "chromium-headless-shell"),
    ("glusterfs", "glusterd", "glusterfs-server"),
    ("ovs", "ovs-vswitchd", "openvswitch-switch"),
    ("ethtool", "ethtool", "ethtool"),
    ("nginx", "nginx", "nginx"),
    ("wrk", "wrk", "wrk"),
    ("redis", "redis-server", "redis-server"),
    ("postgres", "pg_ctlcluster", "postgresql"),
    ("sshd", "/usr/sbin/sshd", "openssh-server"),
    ("ssh", "ssh", "openssh-client"),
    ("apt", "apt-get", "apt"),
    ("pasta", "pasta", "passt"),
    ("slirp4netns", "slirp4netns", "slirp4netns"),
];

/// What a required environment brings with it: the host's root, and the programs its tests use.
const IMPLIED: &[(&str, &[&str])] = &[
    ("native", &["root", "ip", "tc", "mount"]),
    ("container", &["root", "runc", "unshare"]),
    ("gvisor", &["root"]),
    ("uml", &["root", "strace", "mke2fs"]),
    ("qemu", &["root", "busybox", "mke2fs"]),
    ("libvirt", &["root", "virsh", "qemu-img"]),
];

/// Whether `name` (an environment as doctor names it, or one of [`TOOLS`]) is required by the
/// list `required`: named itself, named with parameters (`uml:kernel=virtperf` requires `uml`),
/// or implied by a required environment ([`IMPLIED`]).
pub fn is_required_in(required: &[String], name: &str) -> bool {
    required.iter().any(|r| {
        let kind = r.split(':').next().unwrap_or(r);
        r == name
            || kind == name
            || IMPLIED.iter().any(|(env, implied)| *env == kind && implied.contains(&name))
    })
}

/// `why` as a skip reason, unless `name` is required on this machine kind: then the test fails
/// with it.
fn unless_required(name: &str, why: Option<String>) -> Option<String> {
    unless_required_in(&required_envs(), name, why)
}

/// [`unless_required`] against the list `required`.
pub fn unless_required_in(required: &[String], name: &str, why: Option<String>) -> Option<String> {
    let why = why?;
    assert!(
        !is_required_in(required, name),
        "{name} is required on this machine kind (VIRTPERF_E2E_REQUIRE) but the test would skip: {why}"
    );
    Some(why)
}

/// Why the tests cannot use requirement `name` of [`TOOLS`] here (root, or its program missing),
/// or None; a required one fails the test instead.
pub fn need_tool(name: &str) -> Option<String> {
    let why = match TOOLS.iter().find(|t| t.0 == name) {
        Some(("root", _, _)) => (!is_root()).then(|| "needs root (namespaces, cgroups, mounts)".to_string()),
        Some((_, prog, pkg)) => {
            (!has(prog)).then(|| format!("needs {prog} (apt-get install {pkg}, or make deps)"))
        }
        None => panic!("{name} is not a requirement the tests know (util::TOOLS)"),
    };
    unless_required(name, why)
}

/// The first of `names` ([`TOOLS`]) the tests cannot use here, with its reason.
pub fn need_tools(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| need_tool(n))
}

/// Why `env` (e.g. `uml`, `qemu:accel=kvm`) cannot run on this host, in doctor's words (its
/// quick checks, which include the UML probe boot); None when it can. A test of an environment
/// the host cannot run is skipped with this reason, never failed, never passed — unless the
/// environment is required here ([`required_envs`]): then the test fails.
pub fn doctor_unusable(env: &str) -> Option<String> {
    unless_required(env, doctor_verdict(env))
}

/// doctor's rows, one per environment it knows (`virtperf doctor --quick --json`).
pub fn doctor_rows() -> Result<Vec<serde_json::Value>, String> {
    let out = vp(&["doctor", "--quick", "--json"], &[]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("`virtperf doctor --json` printed no JSON ({e}): cannot tell"))?;
    Ok(doc["environments"].as_array().cloned().unwrap_or_default())
}

fn doctor_verdict(env: &str) -> Option<String> {
    let rows = match doctor_rows() {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    let Some(row) = rows.iter().find(|r| r["environment"] == env) else {
        return Some(format!("doctor has no row for {env}"));
    };
    if row["usable"] == true {
        return None;
    }
    Some(format!(
        "{env} cannot run here (doctor): {}; fix: {}",
        row["detail"].as_str().unwrap_or("?"),
        row["fix"].as_str().unwrap_or("?")
    ))
}

/// Root first (containers, namespaces), then doctor's verdict on `env`.
pub fn need_root_and_env(env: &str) -> Option<String> {
    if !is_root() {
        return unless_required(env, need_tool("root"));
    }
    doctor_unusable(env)
}

/// The row of a `run --json` report for `env` × `metric`, or a failure message that says why it
/// is missing (the run's failed trials and their reasons) instead of a bare unwrap panic.
pub fn result_row<'a>(
    doc: &'a serde_json::Value,
    env: &str,
    metric: &str,
) -> Result<&'a serde_json::Value, String> {
    doc["results"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["environment"] == env && r["metric"] == metric))
        .ok_or_else(|| {
            format!(
                "no {metric} result for {env}; the run's failures: {}",
                serde_json::to_string(&doc["failures"]).unwrap_or_default()
            )
        })
}

/// [`result_row`], failing the test with the run's failures when the row is missing.
pub fn row_or_fail(doc: &serde_json::Value, env: &str, metric: &str) -> serde_json::Value {
    match result_row(doc, env, metric) {
        Ok(r) => r.clone(),
        Err(why) => panic!("{why}"),
    }
}

/// Root, then requirement `name` of [`TOOLS`]; each checked against this machine kind's list.
pub fn need_root_and(name: &str) -> Option<String> {
    need_tools(&["root", name])
}

/// Every ok trial's id and when it finished: a resume must leave each one as it was.
pub fn ok_trials(db: &Path) -> Vec<(i64, String)> {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut st = c.prepare("SELECT id, finished_at FROM trials WHERE status = 'ok' ORDER BY id").unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default())))
        .unwrap()
        .flatten()
        .collect()
}

/// The ids and plan positions (seq) of the trials with `status` (`pending`, `failed`…), in order.
pub fn trials_with(db: &Path, status: &str) -> Vec<(i64, i64)> {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut st = c.prepare("SELECT id, seq FROM trials WHERE status = ?1 ORDER BY id").unwrap();
    st.query_map([status], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().flatten().collect()
}

/// Asserts a resume ran exactly the trials `to_run` (their ids and seqs, read before it): every
/// trial that was ok before is untouched (same id, same finish), and the trials that are ok now
/// and were not are exactly those — by identity, not by count.
pub fn assert_resume_ran_exactly(before: &[(i64, String)], to_run: &[(i64, i64)], db: &Path) {
    let after = ok_trials(db);
    for t in before {
        assert!(after.contains(t), "trial {} (finished {}) was run again or changed by the resume", t.0, t.1);
    }
    let seqs: std::collections::BTreeMap<i64, i64> = {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let mut st = c.prepare("SELECT id, seq FROM trials").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().flatten().collect()
    };
    let mut new: Vec<(i64, i64)> =
        after.iter().filter(|t| !before.contains(t)).map(|t| (t.0, seqs[&t.0])).collect();
    new.sort_unstable();
    let mut want = to_run.to_vec();
    want.sort_unstable();
    assert_eq!(new, want, "the resume ran these trials (id, seq); these were to run");
}

pub fn count_trials(db: &Path, status: &str) -> i64 {
    let Ok(c) = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return 0;
    };
    c.query_row("SELECT count(*) FROM trials WHERE status = ?1", [status], |r| r.get(0)).unwrap_or(0)
}

/// Every trial that did not end ok, as "seq status: reason" (for an assertion's message).
pub fn trials_not_ok(db: &Path) -> Vec<String> {
    let Ok(c) = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return vec!["(no record to read)".into()];
    };
    let Ok(mut q) =
        c.prepare("SELECT seq, status, coalesce(reason, '') FROM trials WHERE status != 'ok' ORDER BY seq")
    else {
        return vec!["(no trials table)".into()];
    };
    q.query_map([], |r| {
        Ok(format!("{} {}: {}", r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
    })
    .map(|rows| rows.flatten().collect())
    .unwrap_or_default()
}

pub fn run_status(db: &Path) -> String {
    let c = rusqlite::Connection::open(db).expect("db");
    c.query_row("SELECT status FROM runs WHERE id = 1", [], |r| r.get(0)).expect("run 1")
}

/// The names of the entries of `dir` that `keep` accepts (none when `dir` does not exist).
pub fn names_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect()
}

pub fn ledger_files(state: &Path) -> Vec<PathBuf> {
    names_in(state, |n| n.starts_with("ledger-")).into_iter().map(|n| state.join(n)).collect()
}

/// Every live process whose command line (its arguments) `keep` accepts, as `pid N [args]`.
pub fn processes_where(keep: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<String> =
            cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if keep(&args) {
            out.push(format!("pid {} {:?}", e.file_name().to_string_lossy(), args));
        }
    }
    out
}

/// Agent processes of this binary still alive (native or inside a container).
fn live_agents() -> Vec<String> {
    processes_where(|args| {
        args.get(1).is_some_and(|a| a == "agent")
            && args.first().is_some_and(|a| a == exe() || a == "/.virtperf/virtperf")
    })
}

fn virtperf_cgroups() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for m in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
        let d = m.path().join("virtperf");
        for c in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if c.path().is_dir() {
                out.push(c.path());
            }
        }
    }
    let v2 = Path::new("/sys/fs/cgroup/virtperf");
    for c in std::fs::read_dir(v2).into_iter().flatten().flatten() {
        if c.path().is_dir() {
            out.push(c.path());
        }
    }
    out
}

/// Host-wide things (cgroups, namespaces, agents) that existed before the tests began: another
/// virtperf run on the same host, or leftovers of one killed earlier, are not this suite's to judge.
static BASELINE: std::sync::OnceLock<std::collections::HashSet<String>> = std::sync::OnceLock::new();

/// Records what already exists; call once before the first test.
pub fn take_baseline() {
    let now: std::collections::HashSet<String> = host_things_unfiltered().into_iter().collect();
    if !now.is_empty() {
        eprintln!("note: {} virtperf things already on this host are not counted as leftovers", now.len());
    }
    let _ = BASELINE.set(now);
}

/// The pid in a `vpPID-...` name.
fn owner_pid(s: &str) -> Option<u32> {
    let last = s.rsplit(['/', ' ']).next()?;
    let rest = last.strip_prefix("vp")?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok().filter(|_| rest[end..].starts_with('-'))
}

/// Named after a live process: another virtperf run going on at the same time. Every run a test
/// starts has ended (or been killed) by the time leftovers are counted.
fn owned_by_live_other(s: &str) -> bool {
    owner_pid(s).is_some_and(|p| Path::new(&format!("/proc/{p}")).exists())
}

fn ours(s: &str) -> bool {
    !BASELINE.get().is_some_and(|b| b.contains(s)) && !owned_by_live_other(s)
}

/// Open vSwitch daemons a lab started (their files are in a run's directory: `…/run-PID/ovs/`).
fn live_switches() -> Vec<String> {
    processes_where(|args| {
        args.first().is_some_and(|a| a.ends_with("ovs-vswitchd") || a.ends_with("ovsdb-server"))
            && args.iter().any(|a| a.contains("/ovs/") && a.contains("run-"))
    })
    .into_iter()
    .map(|p| format!("switch {p}"))
    .collect()
}

fn host_things_unfiltered() -> Vec<String> {
    let mut out = live_agents();
    out.extend(live_switches());
    out.extend(virtperf_cgroups().into_iter().map(|p| format!("cgroup {}", p.display())));
    out.extend(all_lab_namespaces().into_iter().map(|n| format!("netns {n}")));
    out.extend(libvirt_things());
    out.extend(mounts_and_daemons());
    out
}

/// Live GlusterFS processes (glusterd, glusterfsd, glusterfs are one binary), each as its pid
/// and command line.
pub fn gluster_processes() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(exe) = std::fs::read_link(e.path().join("exe")) else { continue };
        if exe.to_string_lossy().ends_with("/glusterfsd") {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd: String = String::from_utf8_lossy(&cmd).replace('\0', " ");
            out.push(format!("{} {}", e.file_name().to_string_lossy(), cmd.trim()));
        }
    }
    out
}

/// `virtperf image build --uml` in the background at nice 19 with one compiler (no more than the
/// one CPU hog every test is made to pass beside), its output in a file of its own:
/// the first test that needs the kernel waits for it on the cache's lock and finds it built (a
/// cached kernel makes it return at once). Stopped if still running when the guard drops; the
/// path is its log's.
pub fn build_uml_kernel_in_background() -> Option<(Spawned, PathBuf)> {
    if !is_root() || !has("nice") {
        return None;
    }
    let log = std::env::temp_dir().join(format!("virtperf-e2e-uml-kernel-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).ok()?;
    let err = file.try_clone().ok()?;
    let child = Command::new("nice")
        .args(["-n", "19", exe(), "image", "build", "--uml", "--jobs", "1"])
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .ok()?;
    println!("background: virtperf image build --uml --jobs 1 at nice 19 (log: {})", log.display());
    Some((Spawned::new(child, "virtperf image build --uml (background)"), log))
}

/// Running QEMU processes and their `-name` (a virtperf guest's is `vpPID-…`, after its run).
pub fn qemu_guests() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<String> =
            cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.first().is_some_and(|a| a.contains("qemu-system")) {
            if let Some(name) = args.iter().skip_while(|a| *a != "-name").nth(1) {
                out.push((pid, name.clone()));
            }
        }
    }
    out
}

/// Mounts a run could leave (below virtperf's state or scratch directories, a GlusterFS client's
/// FUSE mount, an overlay), file-system daemons (GlusterFS: glusterd, glusterfsd and the client
/// are one binary), and loop devices backed by virtperf's files.
fn mounts_and_daemons() -> Vec<String> {
    let mut out = Vec::new();
    for l in std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(mp), Some(dash)) = (f.get(4), f.iter().position(|x| *x == "-")) else { continue };
        let fstype = f.get(dash + 1).copied().unwrap_or("");
        if mp.contains("virtperf")
            || fstype == "fuse.glusterfs"
            || (fstype == "overlay" && mp.contains("/scratch"))
        {
            out.push(format!("mount {mp} ({fstype})"));
        }
    }
    out.extend(gluster_processes().into_iter().map(|p| format!("glusterfs process {p}")));
    // QEMU guests, named after their run (`-name vpPID-…`).
    out.extend(
        qemu_guests().into_iter().filter(|(_, n)| n.starts_with("vp")).map(|(_, n)| format!("qemu {n}")),
    );
    for e in std::fs::read_dir("/sys/block").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let back = std::fs::read_to_string(e.path().join("loop/backing_file")).unwrap_or_default();
        if back.contains("virtperf") {
            out.push(format!("loop device {name} on {}", back.trim()));
        }
    }
    out
}

/// Running libvirt domains of virtperf's own guests (`virtperf-vpPID-…`) and lab taps lent to the
/// root namespace (`vpl…`).
fn libvirt_things() -> Vec<String> {
    let mut out = Vec::new();
    if has("virsh") {
        if let Ok(o) = Command::new("virsh").args(["-q", "list", "--name"]).stderr(Stdio::null()).output() {
            for n in String::from_utf8_lossy(&o.stdout).lines().map(str::trim) {
                if let Some(id) = n.strip_prefix("virtperf-") {
                    out.push(format!("domain {id}"));
                }
            }
        }
    }
    if let Ok(o) = Command::new("ip").args(["-o", "link", "show"]).output() {
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            if let Some(name) = l.split(": ").nth(1).map(|n| n.split('@').next().unwrap_or(n)) {
                if name.starts_with("vpl") {
                    out.push(format!("lent tap {name}"));
                }
            }
        }
    }
    out
}

/// Everything a run could leave behind: ledger files and scratch in the state directory, agents,
/// container cgroups, lab namespaces.
pub fn leftover_things(state: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(state)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| format!("state entry {}", e.path().display()))
        .collect();
    out.extend(host_things_unfiltered().into_iter().filter(|s| ours(s)));
    out.extend(processes_naming(state));
    out
}

/// Processes whose command line names `dir` (a guest's QEMU or UML kernel, a daemon a run
/// started with its files there).
pub fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() || name == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !needle.is_empty() && cmd.contains(&needle) {
            out.push(format!("process {name} {}", cmd.trim()));
        }
    }
    out
}

fn all_lab_namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.strip_prefix("vp").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit())))
        .collect()
}

/// Network namespaces of virtperf labs (`vpPID-...`) that were not on the host before the tests.
pub fn lab_namespaces() -> Vec<String> {
    all_lab_namespaces()
        .into_iter()
        .filter(|n| !BASELINE.get().is_some_and(|b| b.contains(&format!("netns {n}"))))
        .collect()
}

/// The root namespace's links, addresses and routes, as `ip` prints them.
pub fn root_netns_snapshot() -> String {
    let mut s = String::new();
    for args in [
        &["-o", "link", "show"][..],
        &["-o", "addr", "show"],
        &["route", "show", "table", "all"],
        &["netns", "list"],
    ] {
        let out = Command::new("ip").args(args).output().unwrap();
        s += &String::from_utf8_lossy(&out.stdout);
    }
    s
}

pub fn assert_no_leftovers(state: &Path) {
    // Teardown is synchronous; allow a moment for the kernel to reap a SIGKILLed process.
    let left = wait_for(|| leftover_things(state).is_empty().then_some(()), 3.0);
    assert!(left.is_some(), "left behind: {:#?}", leftover_things(state));
}

pub fn need_qemu() -> Option<String> {
    need_root_and_env("qemu").or_else(|| need_tool("busybox"))
}

/// Parts of the running test left out because this host lacks what they need: the harness counts
/// the test apart ("with parts left out") and lists them, instead of a silent pass.
static DROPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Leaves out a part of the running test, saying what and why (printed now, listed at the end).
pub fn dropped(part: &str, why: &str) {
    println!("    left out: {part}: {why}");
    if let Ok(mut d) = DROPPED.lock() {
        d.push(format!("{part}: {why}"));
    }
}

/// The parts left out since the last call (the harness: before and after each test).
pub fn take_dropped() -> Vec<String> {
    DROPPED.lock().map(|mut d| std::mem::take(&mut *d)).unwrap_or_default()
}

/// Whether apt offers package `pkg` (a candidate version in `apt-cache policy`): a fact of the
/// host, asked without virtperf.
pub fn apt_candidate(pkg: &str) -> bool {
    Command::new("apt-cache").args(["policy", pkg]).output().is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.trim().strip_prefix("Candidate:").is_some_and(|v| v.trim() != "(none)"))
    })
}

/// Whether the host's qemu-system-x86_64 lists machine type `name` (`-machine help`).
pub fn qemu_has_machine(name: &str) -> bool {
    Command::new("qemu-system-x86_64").args(["-machine", "help"]).output().is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).lines().any(|l| l.split_whitespace().next() == Some(name))
    })
}

/// The words of a command line, split at white space.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// A small tmpfs a test mounts (a disk to fill), unmounted when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs with `opts` (`size=…`, `mode=…`) on the existing directory `at`; None when
    /// this host cannot.
    pub fn mount(at: &Path, opts: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", opts, "vp-e2e-tmpfs"]).arg(at).status();
        ok.is_ok_and(|s| s.success()).then(|| Tmpfs(at.to_path_buf()))
    }

    /// Gives it a new size (space made on a full disk).
    pub fn resize(&self, size: &str) {
        let ok = Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(&self.0).status();
        assert!(ok.is_ok_and(|s| s.success()), "remount {} with size {size}", self.0.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A skip of the running test because requirement `name` (an environment or one of [`TOOLS`])
/// is not met here, with `why` — a failure instead where `name` is required on this machine kind.
pub fn skip(name: &str, why: impl Into<String>) -> Outcome {
    let why = why.into();
    unless_required(name, Some(why.clone()));
    Outcome::Skip(why)
}

/// What a killed run left for the next start to sweep (`leftover_things` of the state directory),
/// which must not be empty: a kill test whose kill left nothing would pass whatever the sweep did.
pub fn left_for_the_sweep(state: &Path, what: &str) -> Vec<String> {
    let left = leftover_things(state);
    assert!(!left.is_empty(), "{what}: the kill left nothing for the next start to sweep");
    left
}

/// The UML kernels a test of UML runs on here, each as (environment name, extra parameters as
/// `key=value` pairs): what `uml` picks (`kernel=auto`), and — where that is the packaged
/// `linux.uml` (AMD, Intel Cascade Lake: its XSAVE buffer fits) — virtperf's own kernel beside it,
/// so that both are tested wherever both boot. Where `auto` picks virtperf's kernel (the packaged
/// one cannot run: AMX's XSAVE area), the packaged one is left out with doctor's reason. Empty
/// when `uml` cannot run here (the caller skips with [`need_root_and_env`]).
pub fn uml_kernels() -> Vec<(&'static str, &'static str)> {
    if need_root_and_env("uml").is_some() {
        return Vec::new();
    }
    let rows = doctor_rows().unwrap_or_default();
    let detail = rows
        .iter()
        .find(|r| r["environment"] == "uml")
        .and_then(|r| r["detail"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut out = vec![("uml", "")];
    // doctor's `uml` row names the kernel `auto` picked: the packaged one where it boots ("the
    // packaged linux.uml 6.1.176 boots here"), else virtperf's ("the packaged linux.uml cannot
    // save this CPU's XSAVE state …; using virtperf's UML kernel …"): both name the packaged one.
    if !detail.contains("using virtperf's UML kernel") {
        match doctor_unusable("uml:kernel=virtperf") {
            None => out.push(("uml-virtperf", "kernel=virtperf")),
            Some(why) => dropped("virtperf's UML kernel beside the packaged one", &why),
        }
    } else {
        dropped("the packaged UML kernel (uml picks virtperf's here)", &detail);
    }
    out
}
