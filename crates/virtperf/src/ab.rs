//! `virtperf ab A.toml B.toml`: two configurations (or two builds — a hypervisor's binary, a
//! kernel, a runtime — named in each file) run **interleaved, run by run, in ABBA order** on one
//! host (A B B A A B …), each run a whole `virtperf run` into its side's database, then compared
//! runs against runs: every metric's figure per run, B/A with Welch's interval over the runs
//! ([`virtperf_report::compare::compare_runs`]), the verdicts of `compare`.
//!
//! Why ABBA: a host drifts (thermal state, other tenants, page cache) over minutes; running all of
//! A then all of B books that drift as the difference. Alternating with each pair reversed cancels
//! a linear drift in the means and spreads what is left into the interval, which is then over
//! *runs*, so the verdict includes run-to-run variation (Firecracker's A/B tests interleave for the
//! same reason). Interrupted, it resumes: `ab` with the same `--dir` counts the completed runs of
//! each side and runs only the rest of the sequence.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};

use virtperf_record::store::{RunStatus, Store};
use virtperf_report::report::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::A => "A",
            Side::B => "B",
        }
    }
    fn db(self) -> &'static str {
        match self {
            Side::A => "a.db",
            Side::B => "b.db",
        }
    }
}

/// The sequence of `runs` runs a side: pairs A B, B A, A B, … — each side's k-th run with its
/// ordinal k.
pub fn order(runs: usize) -> Vec<(Side, usize)> {
    (0..runs)
        .flat_map(|k| if k % 2 == 0 { [(Side::A, k), (Side::B, k)] } else { [(Side::B, k), (Side::A, k)] })
        .collect()
}

pub struct Opts {
    pub a: PathBuf,
    pub b: PathBuf,
    pub runs: usize,
    pub dir: PathBuf,
    /// Flags given to every `virtperf run` (e.g. `--reps 5`).
    pub run_args: Vec<String>,
}

impl Opts {
    pub fn file(&self, s: Side) -> &Path {
        match s {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }
    pub fn db(&self, s: Side) -> PathBuf {
        self.dir.join(s.db())
    }
}

/// How a child `virtperf` ended when it did not succeed: its exit code and the tail of its output.
#[derive(Debug)]
pub struct ChildFailed {
    pub code: Option<i32>,
    pub what: String,
}

impl std::fmt::Display for ChildFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for ChildFailed {}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Checks both experiment files with `virtperf run FILE --dry-run` (and the run flags), before
/// anything is created: a bad file is the child's exit 2 with its message, a host that cannot run
/// it exit 3.
pub fn validate(o: &Opts) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find this virtperf's own binary")?;
    for s in [Side::A, Side::B] {
        let out = Command::new(&exe)
            .arg("run")
            .arg(o.file(s))
            .args(&o.run_args)
            .arg("--dry-run")
            .stdin(Stdio::null())
            .output()
            .context("cannot start virtperf run --dry-run")?;
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // Decided on the exit status (3: an environment cannot run here), not on the words.
        if !out.status.success() {
            return Err(ChildFailed {
                code: out.status.code(),
                what: format!("{} ({}): {}", s.name(), o.file(s).display(), tail(text.trim(), 6)),
            }
            .into());
        }
    }
    Ok(())
}

/// The completed runs of a side's database, oldest first (none when it does not exist yet).
pub fn completed(db: &Path) -> Result<Vec<i64>> {
    if !db.exists() {
        return Ok(Vec::new());
    }
    let store = Store::open_read(db)?;
    Ok(store.runs()?.into_iter().filter(|r| r.status == RunStatus::Completed).map(|r| r.id).collect())
}

/// Waits for a child run, passing an interrupt of this process on to it once (SIGTERM) and then
/// waiting for it to end as it does (its own cleanup, bounded by its deadlines).
fn wait_forwarding(mut child: std::process::Child) -> std::process::ExitStatus {
    let mut forwarded = false;
    loop {
        if let Some(st) = crate::host::command::wait_within(&mut child, std::time::Duration::from_millis(50))
        {
            return st;
        }
        if !forwarded && crate::run::CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            // SAFETY: kill(2) of our own child, which we have not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            forwarded = true;
        }
    }
}

/// Runs what the sequence still lacks, one `virtperf run` at a time, each one's output in
/// `DIR/NN-SIDE.log`; a line per run on stderr.
pub fn run_all(o: &Opts) -> Result<()> {
    std::fs::create_dir_all(&o.dir).with_context(|| format!("cannot create {}", o.dir.display()))?;
    let exe = std::env::current_exe().context("cannot find this virtperf's own binary")?;
    let done_a = completed(&o.db(Side::A))?.len();
    let done_b = completed(&o.db(Side::B))?.len();
    let seq = order(o.runs);
    let total = seq.len();
    if done_a + done_b > 0 {
        eprintln!("ab: {} holds {done_a} run(s) of A and {done_b} of B: running the rest", o.dir.display());
    }
    for (i, (side, k)) in seq.into_iter().enumerate() {
        let done = match side {
            Side::A => done_a,
            Side::B => done_b,
        };
        if k < done {
            continue;
        }
        let log = o.dir.join(format!("{:02}-{}.log", i + 1, side.name()));
        let file = std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = file.try_clone()?;
        eprint!("ab: run {}/{total}: {} ({}) … ", i + 1, side.name(), o.file(side).display());
        let t = Instant::now();
        let mut cmd = Command::new(&exe);
        cmd.arg("run")
            .arg(o.file(side))
            .args(&o.run_args)
            .arg("--db")
            .arg(o.db(side))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        // A SIGTERM or Ctrl-C of `ab` reaches the run it waits for (forwarded below), and so does
        // its death: the run then ends interrupted, resumable, its environments torn down.
        virtperf_workload::tools::signal_with_parent(&mut cmd, libc::SIGTERM);
        let status = wait_forwarding(cmd.spawn().context("cannot start virtperf run")?);
        if !status.success() {
            eprintln!("failed");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(ChildFailed {
                code: status.code(),
                what: format!(
                    "run {} of {} ({}) ended with {status}; {}:\n{}",
                    i + 1,
                    side.name(),
                    o.file(side).display(),
                    log.display(),
                    tail(text.trim(), 8)
                ),
            }
            .into());
        }
        eprintln!("{:.0} s", t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Every completed run of a side, as reports.
pub fn reports(db: &Path) -> Result<Vec<Report>> {
    let store = Store::open_read(db)?;
    completed(db)?.into_iter().map(|id| virtperf_report::report::build(&store.load(id)?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abba_alternates_and_each_side_runs_as_often() {
        let seq: String = order(3).iter().map(|(s, _)| s.name()).collect();
        assert_eq!(seq, "ABBAAB");
        // Every side's ordinals in order: a resumed sequence skips exactly the runs done.
        for side in [Side::A, Side::B] {
            let ks: Vec<usize> = order(4).iter().filter(|(s, _)| *s == side).map(|(_, k)| *k).collect();
            assert_eq!(ks, [0, 1, 2, 3]);
        }
        // A linear drift d·t cancels over each ABBA block: positions 0,3 vs 1,2.
        let pos = |side| {
            order(4).iter().enumerate().filter(|(_, (s, _))| *s == side).map(|(i, _)| i).sum::<usize>()
        };
        assert_eq!(pos(Side::A), pos(Side::B));
    }
}
