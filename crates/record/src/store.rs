//! Results in SQLite: one transaction per trial, WAL journal, schema versioned by
//! `PRAGMA user_version` with forward migrations.
//!
//! Durability: WAL with `synchronous = NORMAL` makes every committed trial survive a crash or
//! kill of virtperf (or of anything else); only a power loss may lose the last few commits.
//! `synchronous = FULL` would cost an fsync per trial on the hot path for that last case.

use std::path::Path;

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use virtperf_proto::Sample;

use crate::catalog::{Better, CaseRecord, MetricRecord, Metrics};

/// A case's record as stored.
fn record_json(r: &CaseRecord) -> Result<String> {
    serde_json::to_string(r).context("a case's record as JSON")
}

fn insert_metrics(tx: &Transaction, run: i64, metrics: &[MetricRecord]) -> Result<()> {
    let mut st =
        tx.prepare("INSERT OR IGNORE INTO metrics (run_id, name, unit, better) VALUES (?1, ?2, ?3, ?4)")?;
    for m in metrics {
        st.execute(params![run, m.name, m.unit, m.better.as_str()])?;
    }
    Ok(())
}

/// Records for the cases of runs stored before records were, from the installed describer (the
/// build's workloads, which described such a run before); a kind it does not know keeps
/// [`CaseRecord::unknown`]. Without a describer (a program that reads no old runs) the migration
/// is refused, not guessed.
fn fill_records(tx: &Transaction) -> Result<()> {
    let runs: Vec<i64> = {
        let mut st = tx.prepare("SELECT id FROM runs ORDER BY id")?;
        let ids = st.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        ids
    };
    if runs.is_empty() {
        return Ok(());
    }
    let Some(d) = crate::catalog::describer() else {
        bail!("this database holds runs stored before cases had records, and this program has no workloads installed to describe them (virtperf_record::catalog::install)");
    };
    let cases: Vec<(i64, i64, String, String)> = {
        let mut st = tx.prepare("SELECT run_id, idx, kind, params FROM cases WHERE record IS NULL")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (run, idx, kind, params_text) in cases {
        let p: serde_json::Value = serde_json::from_str(&params_text).unwrap_or_default();
        let record = d.case(&kind, &p).unwrap_or_else(CaseRecord::unknown);
        tx.execute(
            "UPDATE cases SET record = ?1 WHERE run_id = ?2 AND idx = ?3",
            params![record_json(&record)?, run, idx],
        )?;
    }
    let metrics = d.metrics();
    for run in runs {
        insert_metrics(tx, run, &metrics)?;
    }
    Ok(())
}

/// Whether an error is a full disk, anywhere in its chain: SQLite's SQLITE_FULL, or the OS's
/// ENOSPC or EDQUOT on a write — decided on the error's kind, never on its words.
pub fn is_disk_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        if let Some(rusqlite::Error::SqliteFailure(f, _)) = c.downcast_ref::<rusqlite::Error>() {
            return f.code == rusqlite::ErrorCode::DiskFull;
        }
        c.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
}

/// Forward migrations; entry `i` takes the schema from version `i` to `i + 1`.
/// Metrics the orchestrator itself adds to a trial's samples (a workload's own are named by its
/// `MetricSpec`s): host CPU per Gbit received, of stream workloads…
pub const CPU_PER_GBIT: &str = "cpu_per_gbit";
/// Host CPU time of the lab's switch during a network trial (OVS's daemon, the driver domain's
/// QEMU), ms: xenmon's dom0 line. The kernel's bridge has no process and no such row.
pub const SWITCH_CPU: &str = "switch_cpu_time";
/// …and, in an N-instance trial, how far apart the instances started (ms).
pub const START_SKEW: &str = "start_skew";

/// The name that means this machine in `host = …` (an environment's stored host is NULL there).
pub const LOCAL_HOST: &str = "local";

/// A parameter virtperf sized from the host because the experiment left it out (STREAM's arrays
/// from the last-level cache), as derived and as used once clamped to what every environment can
/// hold: recorded in the run's manifest and said by the report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sizing {
    /// The case's label.
    pub case: String,
    pub key: String,
    /// How the host decided it: `STREAM's rule: 4 × the host's 260 MiB last-level cache per array`.
    pub rule: String,
    pub derived: serde_json::Value,
    pub used: serde_json::Value,
    /// What the workload allocates with the derived value, and with the one used.
    pub bytes_derived: u64,
    pub bytes_used: u64,
    /// Why the derived value was clamped (None: it was used as derived).
    pub limit: Option<String>,
}

impl Sizing {
    /// One line: `stream: elements = 20971520 (480 MiB) instead of 136314880 (3120 MiB, STREAM's
    /// rule: …): environment `uml` has mem = 640 MiB, and a workload may take 3/4 of it (…)`.
    pub fn line(&self) -> String {
        use crate::units::mib;
        match &self.limit {
            Some(why) => format!(
                "{}: {} = {} ({}) instead of {} ({}, {}): {why}",
                self.case,
                self.key,
                self.used,
                mib(self.bytes_used),
                self.derived,
                mib(self.bytes_derived),
                self.rule
            ),
            None => format!(
                "{}: {} = {} ({}; {})",
                self.case,
                self.key,
                self.used,
                mib(self.bytes_used),
                self.rule
            ),
        }
    }
}

/// Runs stored before the kinds' flags were: what each kind was when the columns came (a unit
/// test of virtperf's environments keeps this equal to their registry).
macro_rules! legacy_env_flags {
    () => {
        "UPDATE environments SET baseline = (kind = 'native'), own_clock = (kind IN ('gvisor', 'uml', 'qemu', 'libvirt'));"
    };
}
/// The statement that sets them, for that test.
pub const LEGACY_ENV_FLAGS: &str = legacy_env_flags!();

const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE runs (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'failed')),
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    experiment  TEXT NOT NULL,      -- the experiment as TOML (re-read by --resume)
    manifest    TEXT NOT NULL       -- JSON: host, versions, git revision
);
CREATE TABLE environments (
    run_id  INTEGER NOT NULL REFERENCES runs(id),
    idx     INTEGER NOT NULL,
    name    TEXT NOT NULL,
    kind    TEXT NOT NULL,
    params  TEXT NOT NULL,          -- JSON, normalised
    runtime TEXT,                   -- version of the runtime underneath
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE cases (
    run_id   INTEGER NOT NULL REFERENCES runs(id),
    idx      INTEGER NOT NULL,
    workload TEXT NOT NULL,
    kind     TEXT NOT NULL,
    label    TEXT NOT NULL,
    params   TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE trials (
    id           INTEGER PRIMARY KEY,
    run_id       INTEGER NOT NULL REFERENCES runs(id),
    seq          INTEGER NOT NULL,  -- position in the planned order
    env_idx      INTEGER NOT NULL,
    case_idx     INTEGER NOT NULL,
    rep          INTEGER NOT NULL,
    warmup       INTEGER NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'failed', 'skipped')),
    reason       TEXT,
    finished_at  TEXT,
    host_ns      INTEGER,           -- host monotonic clock: request sent to result received, less the idle RTT
    guest_ns     INTEGER,           -- the agent's monotonic clock around the work
    host_cpu_ns  INTEGER,           -- CPU of the instance's host processes during the trial
    guest_cpu_ns INTEGER,           -- the agent's own CPU time (getrusage)
    UNIQUE (run_id, seq)
);
CREATE INDEX trials_by_status ON trials (run_id, status);
CREATE TABLE samples (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    metric   TEXT NOT NULL,
    value    REAL NOT NULL,
    unit     TEXT NOT NULL
);
CREATE INDEX samples_by_trial ON samples (trial_id);
CREATE TABLE instances (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs(id),
    env_idx     INTEGER NOT NULL,
    launched_at TEXT NOT NULL,
    start_ms    REAL,               -- launch to the agent's hello, host clock
    rtt_us      REAL,               -- median idle round trip to the agent (subtracted from host_ns)
    status      TEXT NOT NULL,      -- ready | failed
    detail      TEXT
);
"#,
    r#"
-- Network trials: the tester's host-side CPU, detail that is not a scalar (histograms, the
-- per-flow results, the background load), and host CPU time series sampled during the trial.
ALTER TABLE trials ADD COLUMN tester_cpu_ns INTEGER;  -- or the peer's, in an all-pairs trial
ALTER TABLE trials ADD COLUMN peer_idx INTEGER;       -- all-pairs: the receiving environment
ALTER TABLE trials ADD COLUMN extra TEXT;
CREATE TABLE cpu_series (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    role     TEXT NOT NULL,         -- dut | tester
    t_ms     REAL NOT NULL,         -- since the trial's request was sent, host clock
    cpu_ns   INTEGER NOT NULL       -- cumulative host CPU of the role's processes since then
);
CREATE INDEX cpu_series_by_trial ON cpu_series (trial_id);
"#,
    r#"
-- A launch that failed: the console (or stderr) tail of the instance, whose most telling line
-- alone is in `detail` and in the failed trials' reason.
ALTER TABLE instances ADD COLUMN console TEXT;
ALTER TABLE instances ADD COLUMN rtt_jitter_us REAL;  -- spread of the idle round trips
-- Armed trials (the host timed exactly the workload's timed region): the instance's idle round
-- trip subtracted from host_ns and its spread, from which the clock check's tolerance follows.
ALTER TABLE trials ADD COLUMN rtt_ns INTEGER;
ALTER TABLE trials ADD COLUMN rtt_jitter_ns INTEGER;
-- Several instances of an environment measured together: how many, the environment they were
-- swept from, and each instance's own samples (instance k); the trial's samples with no instance
-- are its aggregates (sum of throughputs, mean of times, Jain's index).
ALTER TABLE environments ADD COLUMN instances INTEGER NOT NULL DEFAULT 1;
ALTER TABLE environments ADD COLUMN grp TEXT;
ALTER TABLE samples ADD COLUMN instance INTEGER;
"#,
    r#"
-- The [[host]] an environment ran on (NULL: the machine that ran virtperf); a campaign's report
-- compares each host's environments with that host's own baseline.
ALTER TABLE environments ADD COLUMN host TEXT;
"#,
    r#"
-- Launches as a level of repetition (`launches = L`): the planned block of a trial (each block
-- runs on a launch of its own), and the launch that ran it (instances.id of instance 0; NULL in
-- runs stored before: one launch per environment). The statistics group repetitions by launch.
ALTER TABLE trials ADD COLUMN block INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN launch_id INTEGER;
ALTER TABLE instances ADD COLUMN block INTEGER;
-- Per-operation workloads calibrated in each environment: the operations of this trial.
ALTER TABLE trials ADD COLUMN work INTEGER;
CREATE TABLE calibrations (
    run_id    INTEGER NOT NULL REFERENCES runs(id),
    env_idx   INTEGER NOT NULL,
    case_idx  INTEGER NOT NULL,
    param     TEXT NOT NULL,       -- the workload's operation count (`iterations`)
    count     INTEGER NOT NULL,    -- operations per trial, chosen for target_ns on the host's clock
    target_ns INTEGER NOT NULL,
    detail    TEXT NOT NULL,       -- JSON: every probe run (count, host ns), a cap and why
    PRIMARY KEY (run_id, env_idx, case_idx)
);
"#,
    r#"
-- The agent's clock against the host's over a whole launch: from a ping at its start to one
-- before its shutdown (each the shortest round trip of a few; the guest's stamp against the
-- midpoint), its rate error in ppm and what the two round trips leave uncertain.
ALTER TABLE instances ADD COLUMN clock_span_s REAL;
ALTER TABLE instances ADD COLUMN clock_rate_ppm REAL;
ALTER TABLE instances ADD COLUMN clock_uncertainty_ppm REAL;
"#,
    r#"
-- Trials run again with `run --resume RUN --retry-failed` (a host that was down, then back):
-- how each earlier attempt ended, kept when the trial goes back to pending.
CREATE TABLE retried (
    trial_id    INTEGER NOT NULL REFERENCES trials(id),
    status      TEXT NOT NULL,
    reason      TEXT,
    finished_at TEXT
);
"#,
    concat!(
        r#"
-- What the report needs to know of an environment's kind, recorded when its run starts, so that
-- the report reads only the store: whether it is the baseline every overhead is measured against,
-- and whether it keeps a clock of its own (a guest's, gVisor's sentry's) that the report checks
-- against the host's.
ALTER TABLE environments ADD COLUMN baseline INTEGER NOT NULL DEFAULT 0;
ALTER TABLE environments ADD COLUMN own_clock INTEGER NOT NULL DEFAULT 0;
"#,
        legacy_env_flags!()
    ),
    r#"
-- The process that runs (or resumes) a run, while it does: one owner per run. A second
-- `run --resume` of it is refused while this process lives (its pid, its start time in clock
-- ticks since boot, and the boot it belongs to tell it from a later process with its pid).
ALTER TABLE runs ADD COLUMN owner_pid INTEGER;
ALTER TABLE runs ADD COLUMN owner_start INTEGER;
ALTER TABLE runs ADD COLUMN owner_boot TEXT;
"#,
    r#"
-- What each case is, recorded when its run starts, so that the report reads only the store and
-- never asks today's workload code about a run of years ago: JSON of `catalog::CaseRecord` (its
-- family, section, metrics with unit and which way each is better, headlines, what a warm-up
-- does of a trial's work, its link bound). Runs stored before are filled once, as they are
-- migrated, by the workloads of the build that migrates them (`catalog::install`).
ALTER TABLE cases ADD COLUMN record TEXT;
-- Every metric the run's build declared, for figures not a case's own (a background load's).
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    name   TEXT NOT NULL,
    unit   TEXT NOT NULL,
    better TEXT NOT NULL CHECK (better IN ('higher', 'lower', 'neither')),
    PRIMARY KEY (run_id, name)
);
"#,
];

/// The schema version whose migration added the cases' records (filled by [`Store::migrate`]).
const RECORDS_SINCE: i64 = 10;

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub struct Store {
    conn: Connection,
    /// A file next to the database holding space for the write that ends a run on a full disk.
    reserve: std::sync::Mutex<Option<std::path::PathBuf>>,
    /// Where a migrated copy of an older database read with [`Store::open_read`] lives; removed
    /// with the store (after `conn`, which is dropped first).
    _copy: Option<tempfile::TempDir>,
}

/// What the reserve holds: enough for the write that marks a run interrupted (a few WAL pages).
const RESERVE_BYTES: usize = 32 * 1024;

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(p) = self.reserve.get_mut().ok().and_then(|r| r.take()) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The pilots a run's manifest records (`precision.pilots`), empty where none.
pub fn pilots_of(manifest: &serde_json::Value) -> std::collections::BTreeMap<String, u32> {
    manifest["precision"]["pilots"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), u32::try_from(v.as_u64()?).ok()?))).collect())
        .unwrap_or_default()
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Now, to the millisecond: when a trial ended (what places it in time against the others').
pub fn now_rfc3339_millis() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Milliseconds since the epoch of an RFC 3339 time (seconds or finer); None when it is not one.
pub fn epoch_ms(t: &str) -> Option<f64> {
    humantime::parse_rfc3339_weak(t)
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64() * 1e3)
}

#[derive(Debug, Clone)]
pub struct PlannedTrial {
    pub id: i64,
    pub seq: i64,
    pub env_idx: usize,
    pub case_idx: usize,
    pub rep: i64,
    pub warmup: bool,
    /// All-pairs trials: the environment at the other end (env_idx sends to it).
    pub peer_idx: Option<usize>,
    /// The planned launch (0 ≤ block < launches): each block of an environment runs on a launch
    /// of its own.
    pub block: u32,
}

/// Declares a status stored as lowercase text: its variants and their names, `as_str`, `Display`,
/// and the SQLite conversions (an unknown name read back is an error, not a silent default).
macro_rules! stored_status {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($(#[$vdoc])* $v),+ }
        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$v),)+ _ => None }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
        impl rusqlite::types::FromSql for $name {
            fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let s = v.as_str()?;
                $name::parse(s).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(format!("unknown {} `{s}`", stringify!($name)).into())
                })
            }
        }
    };
}

stored_status! {
    /// Where a trial is (`trials.status`).
    TrialStatus {
        /// Planned, not yet run (a resumed run runs these).
        #[default]
        Pending = "pending",
        Ok = "ok",
        Failed = "failed",
        /// Not run: its environment could not be launched.
        Skipped = "skipped",
    }
}

stored_status! {
    /// How a launch of an environment ended (`instances.status`).
    LaunchStatus {
        /// Its agent said hello.
        #[default]
        Ready = "ready",
        Failed = "failed",
    }
}

stored_status! {
    /// Where a run is (`runs.status`).
    RunStatus {
        #[default]
        Running = "running",
        Completed = "completed",
        /// Stopped by Ctrl-C or SIGTERM: `run --resume` finishes it.
        Interrupted = "interrupted",
        /// Stopped before its trials (the lab or a preparation failed).
        Failed = "failed",
    }
}

/// A value of a completed repetition: (environment, case, launch, metric, value).
/// A measured value: (environment, case, launch id, metric, value, block, rep).
pub type MeasuredValue = (usize, usize, Option<i64>, String, f64, u32, i64);

/// Host CPU samples of a trial: (role, ms since the trial started, cumulative CPU ns).
pub type CpuSeries = Vec<(String, f64, i64)>;

/// A run read back is whole: every trial names an environment and a case of its run, a peer
/// that exists, and environments and cases are numbered 0.. without gaps. A database whose rows
/// disagree (written by hand, half restored) is refused here, naming the table and the row,
/// instead of failing later where the report indexes by them.
fn check_consistent(r: &RunRows) -> Result<()> {
    for (what, idx) in [
        ("environments", r.envs.iter().map(|e| e.idx).collect::<Vec<_>>()),
        ("cases", r.cases.iter().map(|c| c.idx).collect()),
    ] {
        if let Some((k, i)) = idx.iter().enumerate().find(|(k, i)| *k != **i) {
            bail!(
                "the database is inconsistent: table {what} of run {}: row {k} has idx {i} (they must be numbered 0, 1, …); it was not written by virtperf as it stands",
                r.run_id
            );
        }
    }
    let (ne, nc) = (r.envs.len(), r.cases.len());
    for t in &r.trials {
        let bad = if t.env_idx >= ne {
            Some(format!("env_idx {} names no environment (the run has {ne})", t.env_idx))
        } else if t.case_idx >= nc {
            Some(format!("case_idx {} names no case (the run has {nc})", t.case_idx))
        } else if t.peer_idx.is_some_and(|p| p >= ne) {
            Some(format!("peer_idx {:?} names no environment (the run has {ne})", t.peer_idx))
        } else {
            None
        };
        if let Some(why) = bad {
            bail!("the database is inconsistent: table trials, row id {} of run {}: {why}", t.id, r.run_id);
        }
    }
    Ok(())
}

/// Everything stored of one run, read once ([`Store::load`]): the report and every output are
/// built from it, none reads the database again.
#[derive(Debug, Clone, Default)]
pub struct RunRows {
    pub run_id: i64,
    pub info: RunInfo,
    pub envs: Vec<EnvRow>,
    pub cases: Vec<CaseRow>,
    /// Every metric the run's build declared (figures not a case's own).
    pub metrics: Metrics,
    pub trials: Vec<TrialRow>,
    /// Per-operation counts by (environment, case).
    pub calibrations: BTreeMap<(usize, usize), Calibration>,
    /// Each ready launch's start time: (environment, ms).
    pub starts: Vec<(usize, f64)>,
    /// Each launch's clock rate against the host's: (environment, span s, ppm, uncertainty ppm).
    pub clock_rates: Vec<(usize, f64, f64, f64)>,
    /// Each trial's non-scalar detail (JSON) and host CPU series, by trial id.
    pub details: BTreeMap<i64, (Option<serde_json::Value>, CpuSeries)>,
    /// How attempts before `--retry-failed` ended: (status, reason, how many).
    pub retried: Vec<(String, String, u64)>,
}

impl RunRows {
    /// A trial's detail, where it has one.
    pub fn detail(&self, trial_id: i64) -> Option<&serde_json::Value> {
        self.details.get(&trial_id).and_then(|d| d.0.as_ref())
    }
    /// A trial's host CPU series (empty where none was kept).
    pub fn series(&self, trial_id: i64) -> &[(String, f64, i64)] {
        self.details.get(&trial_id).map_or(&[], |d| d.1.as_slice())
    }
}

#[derive(Debug, Clone, Default)]
pub struct TrialOutcome {
    pub status: TrialStatus,
    pub reason: Option<String>,
    pub host_ns: Option<u64>,
    pub guest_ns: Option<u64>,
    pub host_cpu_ns: Option<u64>,
    pub guest_cpu_ns: Option<u64>,
    pub samples: Vec<Sample>,
    /// Host CPU of the tester (network workloads).
    pub tester_cpu_ns: Option<u64>,
    /// Non-scalar detail (JSON), e.g. latency histograms.
    pub extra: Option<serde_json::Value>,
    /// Several instances: each one's own samples (instance index, sample); `samples` then holds
    /// the aggregates.
    pub instance_samples: Vec<(u32, Sample)>,
    /// (role, t_ms, cumulative cpu_ns) samples taken during the trial.
    pub cpu_series: Vec<(&'static str, f64, u64)>,
    /// Armed trials: the idle round trip subtracted from `host_ns`, and its spread.
    pub rtt_ns: Option<u64>,
    pub rtt_jitter_ns: Option<u64>,
    /// The launch (`instances.id`) that ran it.
    pub launch_id: Option<i64>,
    /// A calibrated workload: the operations this trial did.
    pub work: Option<u64>,
}

/// One launch of an environment (or of the tester: `env_idx` -1).
#[derive(Debug, Clone, Default)]
pub struct InstanceRecord {
    pub env_idx: i64,
    /// The planned block it was launched for.
    pub block: Option<u32>,
    /// Launch to the agent's hello, host clock.
    pub start_ms: Option<f64>,
    pub rtt_us: Option<f64>,
    pub rtt_jitter_us: Option<f64>,
    pub status: LaunchStatus,
    /// Why a launch failed, one line.
    pub detail: Option<String>,
    /// The console tail of a failed launch.
    pub console: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub id: i64,
    pub name: String,
    pub status: RunStatus,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub experiment: String,
    pub manifest: serde_json::Value,
}

#[derive(Debug, Clone, Default)]
pub struct EnvRow {
    pub idx: usize,
    pub name: String,
    pub kind: String,
    pub params: serde_json::Value,
    pub instances: u32,
    /// The environment an `instances` sweep split (its own name when not swept).
    pub group: String,
    /// The `[[host]]` it ran on; None: the machine that ran virtperf.
    pub host: Option<String>,
    /// Its kind is the baseline (the bare host): the report's reference.
    pub baseline: bool,
    /// It keeps a clock of its own (a guest, gVisor), which the report checks against the host's.
    pub own_clock: bool,
}

/// An environment of a new run.
#[derive(Debug, Clone)]
pub struct NewEnv {
    pub name: String,
    pub kind: String,
    pub params: serde_json::Value,
    pub runtime: Option<String>,
    pub instances: u32,
    pub group: String,
    pub host: Option<String>,
    /// What the report needs of its kind ([`EnvRow::baseline`], [`EnvRow::own_clock`]).
    pub baseline: bool,
    pub own_clock: bool,
}

impl NewEnv {
    /// An environment of kind `name`, one instance here (tests' runs made by hand).
    pub fn of_kind(name: &str) -> NewEnv {
        NewEnv {
            name: name.into(),
            kind: name.into(),
            params: serde_json::json!({}),
            runtime: None,
            instances: 1,
            group: name.into(),
            host: None,
            baseline: name == "native",
            own_clock: ["gvisor", "uml", "qemu", "libvirt"].contains(&name),
        }
    }
}

impl PlannedTrial {
    /// Trial `i` of a plan alternating between two environments (tests' runs made by hand).
    pub fn alternating(i: i64, case_idx: usize, rep: i64) -> PlannedTrial {
        PlannedTrial {
            id: 0,
            seq: i,
            env_idx: (i % 2) as usize,
            case_idx,
            rep,
            warmup: false,
            peer_idx: None,
            block: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct CaseRow {
    pub idx: usize,
    pub workload: String,
    pub kind: String,
    pub label: String,
    pub params: serde_json::Value,
    /// What it is, as its run recorded it.
    pub record: CaseRecord,
}

impl Default for CaseRecord {
    fn default() -> Self {
        CaseRecord::unknown()
    }
}

/// A new run, as [`Store::create_run`] writes it in its first transaction.
#[derive(Debug, Clone, Copy)]
pub struct NewRun<'a> {
    pub name: &'a str,
    /// The experiment as TOML (re-read by `--resume`).
    pub experiment_toml: &'a str,
    pub manifest: &'a serde_json::Value,
    pub envs: &'a [NewEnv],
    pub cases: &'a [NewCase],
    /// Every metric the build declares.
    pub metrics: &'a [MetricRecord],
    pub plan: &'a [PlannedTrial],
}

/// A case of a new run ([`Store::create_run`]).
#[derive(Debug, Clone)]
pub struct NewCase {
    pub workload: String,
    pub kind: String,
    pub label: String,
    pub params: serde_json::Value,
    pub record: CaseRecord,
}

impl NewCase {
    /// A case named by its kind, with no record of what it is (tests of the store's plumbing).
    pub fn plain(kind: &str, params: serde_json::Value) -> NewCase {
        NewCase {
            workload: kind.into(),
            kind: kind.into(),
            label: kind.into(),
            params,
            record: CaseRecord::unknown(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct TrialRow {
    pub id: i64,
    pub seq: i64,
    pub env_idx: usize,
    pub case_idx: usize,
    pub rep: i64,
    pub warmup: bool,
    pub status: TrialStatus,
    pub reason: Option<String>,
    pub host_ns: Option<i64>,
    pub guest_ns: Option<i64>,
    pub host_cpu_ns: Option<i64>,
    pub guest_cpu_ns: Option<i64>,
    pub tester_cpu_ns: Option<i64>,
    pub peer_idx: Option<usize>,
    pub rtt_ns: Option<i64>,
    pub rtt_jitter_ns: Option<i64>,
    pub block: u32,
    /// The launch that ran it (None: stored before launches were recorded).
    pub launch_id: Option<i64>,
    /// A calibrated workload: the operations of this trial.
    pub work: Option<i64>,
    /// When it ended, ms since the epoch (to the millisecond since trials were stamped so).
    pub finished_ms: Option<f64>,
    /// The trial's own samples (aggregates, when several instances ran).
    pub samples: Vec<Sample>,
    /// Each instance's samples (several instances only).
    pub instance_samples: Vec<(u32, Sample)>,
    /// Several instances of an armed run: each one's (host span, guest span, calibration
    /// median, its spread) in ns, for the clock check (one instance: the trial's own columns).
    pub clock_instances: Vec<[i64; 4]>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the results database {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let mut s = Store { conn, reserve: Default::default(), _copy: None };
        s.migrate()?;
        Ok(s)
    }

    /// Keeps space on the database's disk for the write that ends a run (`DB-reserve`, removed
    /// when this store closes): when the disk fills up mid-run, the run can still be marked
    /// interrupted ([`Store::mark_interrupted`]) — without it, that last write failed as well and a
    /// run stopped by a full disk read as still running (seen in CI, 1 run in ~3).
    pub fn keep_reserve(&self, db: &Path) {
        let mut p = db.as_os_str().to_owned();
        p.push("-reserve");
        let p = std::path::PathBuf::from(p);
        if std::fs::write(&p, vec![0u8; RESERVE_BYTES]).is_ok() {
            if let Ok(mut r) = self.reserve.lock() {
                *r = Some(p);
            }
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }

    /// Marks the run interrupted; on a full disk, with the reserve's space given back first.
    pub fn mark_interrupted(&self, run: i64) -> Result<()> {
        match self.set_run_status(run, RunStatus::Interrupted) {
            Ok(()) => Ok(()),
            Err(e) => match self.reserve.lock().ok().and_then(|mut r| r.take()) {
                Some(p) => {
                    let _ = std::fs::remove_file(p);
                    self.set_run_status(run, RunStatus::Interrupted)
                }
                None => Err(e),
            },
        }
    }

    /// Opens an existing database without creating it (report, export).
    pub fn open_existing(path: &Path) -> Result<Store> {
        if !path.exists() {
            bail!("no results database at {} (run `virtperf run` first, or pass --db PATH)", path.display());
        }
        Self::check_is_ours_on_disk(path)?;
        Self::open(path)
    }

    /// Opens a results database to read it only (report, export, compare, history, predict): the
    /// file is never written — no WAL conversion, no migration, no table added — and a file that
    /// is not virtperf's is refused. One made by an older virtperf is read through a migrated
    /// copy in a temporary file (removed when this store closes).
    pub fn open_read(path: &Path) -> Result<Store> {
        use rusqlite::OpenFlags;
        if !path.exists() {
            bail!("no results database at {} (run `virtperf run` first, or pass --db PATH)", path.display());
        }
        Self::check_is_ours_on_disk(path)?;
        let flags =
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)
            .with_context(|| format!("cannot open the results database {} to read it", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let v = Self::schema_of(&conn, path)?;
        if v == SCHEMA_VERSION {
            return Ok(Store { conn, reserve: Default::default(), _copy: None });
        }
        // An older schema: a copy, migrated, so that the reader sees what a current one would.
        let dir = tempfile::tempdir().context("a temporary directory for a copy of an older database")?;
        let copy = dir.path().join("copy.db");
        conn.execute("VACUUM INTO ?1", [copy.to_string_lossy()])
            .with_context(|| format!("cannot copy {} (an older schema, {v}) to read it", path.display()))?;
        drop(conn);
        let mut s = Self::open(&copy)?;
        s._copy = Some(dir);
        Ok(s)
    }

    /// Refuses a file that is not an SQLite database at all (a text file, /dev/zero), before
    /// SQLite is asked to open it: its first 16 bytes are SQLite's header, or it is empty.
    fn check_is_ours_on_disk(path: &Path) -> Result<()> {
        use std::io::Read;
        let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file, so not a virtperf results database", path.display());
        }
        if meta.len() == 0 {
            return Ok(());
        }
        let mut head = [0u8; 16];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n < 16 || &head != b"SQLite format 3\0" {
            bail!(
                "{} is not an SQLite database, so not virtperf's results (pass --db PATH of one)",
                path.display()
            );
        }
        Ok(())
    }

    /// The schema version of a database opened to read, or why it is not virtperf's.
    fn schema_of(conn: &Connection, path: &Path) -> Result<i64> {
        let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let has_runs: bool = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'runs'", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n > 0)?;
        if v == 0 || !has_runs {
            bail!(
                "{} is an SQLite database, but not virtperf's (no schema version, or no `runs` table): pass --db PATH of virtperf's results",
                path.display()
            );
        }
        if v > SCHEMA_VERSION {
            bail!("the database has schema version {v}, newer than this virtperf understands ({SCHEMA_VERSION}); upgrade virtperf");
        }
        Ok(v)
    }

    /// Makes `pid` (started at `start` clock ticks after boot `boot`) the owner of run `run`,
    /// unless another process that `alive` says still runs owns it: then its pid. In one
    /// immediate transaction, so that two claims at once cannot both succeed.
    pub fn claim_run(
        &self,
        run: i64,
        (pid, start, boot): (u32, u64, &str),
        alive: impl Fn(u32, u64, &str) -> bool,
    ) -> Result<std::result::Result<(), u32>> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, rusqlite::TransactionBehavior::Immediate)?;
        let owner: Option<(i64, i64, String)> = tx
            .query_row("SELECT owner_pid, owner_start, owner_boot FROM runs WHERE id = ?1", [run], |r| {
                Ok(
                    match (
                        r.get::<_, Option<i64>>(0)?,
                        r.get::<_, Option<i64>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ) {
                        (Some(p), Some(s), Some(b)) => Some((p, s, b)),
                        _ => None,
                    },
                )
            })
            .optional()?
            .flatten();
        if let Some((p, s, b)) = owner {
            let (p, s) = (p as u32, s as u64);
            if (p, s, b.as_str()) != (pid, start, boot) && alive(p, s, &b) {
                return Ok(Err(p));
            }
        }
        tx.execute(
            "UPDATE runs SET owner_pid = ?2, owner_start = ?3, owner_boot = ?4 WHERE id = ?1",
            params![run, pid, start as i64, boot],
        )?;
        tx.commit()?;
        Ok(Ok(()))
    }

    /// Gives run `run` up (its owner's work on it is done).
    pub fn release_run(&self, run: i64, pid: u32) -> Result<()> {
        self.conn.execute(
            "UPDATE runs SET owner_pid = NULL, owner_start = NULL, owner_boot = NULL WHERE id = ?1 AND owner_pid = ?2",
            params![run, pid],
        )?;
        Ok(())
    }

    fn migrate(&mut self) -> Result<()> {
        let v: i64 = self.conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if v > SCHEMA_VERSION {
            bail!("the database has schema version {v}, newer than this virtperf understands ({SCHEMA_VERSION}); upgrade virtperf");
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(v as usize) {
            let tx = self.conn.transaction()?;
            tx.execute_batch(sql).with_context(|| format!("migration to schema version {}", i + 1))?;
            if i as i64 + 1 == RECORDS_SINCE {
                fill_records(&tx)?;
            }
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// Creates a run with its environments, its cases and their records, the build's metrics and
    /// the whole plan, in one transaction.
    pub fn create_run(&mut self, r: &NewRun) -> Result<i64> {
        let NewRun { name, experiment_toml, manifest, envs, cases, metrics, plan } = *r;
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO runs (name, status, started_at, experiment, manifest) VALUES (?1, 'running', ?2, ?3, ?4)",
            params![name, now_rfc3339(), experiment_toml, manifest.to_string()],
        )?;
        let run = tx.last_insert_rowid();
        for (i, e) in envs.iter().enumerate() {
            tx.execute(
                "INSERT INTO environments (run_id, idx, name, kind, params, runtime, instances, grp, host, baseline, own_clock) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![run, i as i64, e.name, e.kind, e.params.to_string(), e.runtime, e.instances, e.group, e.host, e.baseline, e.own_clock],
            )?;
        }
        for (i, c) in cases.iter().enumerate() {
            tx.execute(
                "INSERT INTO cases (run_id, idx, workload, kind, label, params, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![run, i as i64, c.workload, c.kind, c.label, c.params.to_string(), record_json(&c.record)?],
            )?;
        }
        insert_metrics(&tx, run, metrics)?;
        {
            insert_planned(&tx, run, plan)?;
        }
        tx.commit()?;
        Ok(run)
    }

    /// Adds trials to a run's plan (precision mode decides them as it goes), pending, in one
    /// transaction; `seq` continues after the last planned trial. Returns them with their ids.
    pub fn extend_plan(&self, run: i64, more: &[PlannedTrial]) -> Result<Vec<PlannedTrial>> {
        let tx = self.conn.unchecked_transaction()?;
        let last: Option<i64> =
            tx.query_row("SELECT max(seq) FROM trials WHERE run_id = ?1", [run], |r| r.get(0))?;
        let first = last.map_or(0, |l| l + 1);
        let mut planned: Vec<PlannedTrial> = more.to_vec();
        for (i, t) in planned.iter_mut().enumerate() {
            t.seq = first + i as i64;
        }
        insert_planned(&tx, run, &planned)?;
        for t in planned.iter_mut() {
            t.id = tx.query_row(
                "SELECT id FROM trials WHERE run_id = ?1 AND seq = ?2",
                params![run, t.seq],
                |r| r.get(0),
            )?;
        }
        tx.commit()?;
        Ok(planned)
    }

    pub fn pending_trials(&self, run: i64) -> Result<Vec<PlannedTrial>> {
        let mut st = self.conn.prepare(
            "SELECT id, seq, env_idx, case_idx, rep, warmup, peer_idx, block FROM trials WHERE run_id = ?1 AND status = 'pending' ORDER BY seq",
        )?;
        let rows = st.query_map([run], |r| {
            Ok(PlannedTrial {
                id: r.get(0)?,
                seq: r.get(1)?,
                env_idx: r.get::<_, i64>(2)? as usize,
                case_idx: r.get::<_, i64>(3)? as usize,
                rep: r.get(4)?,
                warmup: r.get(5)?,
                peer_idx: r.get::<_, Option<i64>>(6)?.map(|p| p as usize),
                block: r.get::<_, i64>(7)?.max(0) as u32,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The measured values of a run's completed repetitions (not warm-ups; the aggregate of
    /// several instances): (environment, case, launch, metric, value), for precision mode.
    pub fn measured_values(&self, run: i64) -> Result<Vec<MeasuredValue>> {
        let mut st = self.conn.prepare_cached(
            "SELECT t.env_idx, t.case_idx, t.launch_id, s.metric, s.value, t.block, t.rep FROM samples s JOIN trials t ON t.id = s.trial_id
             WHERE t.run_id = ?1 AND t.status = 'ok' AND t.warmup = 0 AND t.peer_idx IS NULL AND s.instance IS NULL
             ORDER BY t.seq",
        )?;
        let rows = st.query_map([run], |r| {
            Ok((
                r.get::<_, i64>(0)? as usize,
                r.get::<_, i64>(1)? as usize,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get::<_, i64>(5)?.max(0) as u32,
                r.get(6)?,
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// How each environment × case's trials went so far (not all-pairs): (failed or skipped,
    /// whether the latest one that ended failed).
    pub fn case_health(&self, run: i64) -> Result<std::collections::BTreeMap<(usize, usize), (usize, bool)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT env_idx, case_idx, status FROM trials WHERE run_id = ?1 AND peer_idx IS NULL AND status != 'pending' ORDER BY seq",
        )?;
        let rows = st.query_map([run], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get::<_, i64>(1)? as usize, r.get::<_, TrialStatus>(2)?))
        })?;
        let mut out: std::collections::BTreeMap<(usize, usize), (usize, bool)> = Default::default();
        for row in rows {
            let (e, c, status) = row?;
            let h = out.entry((e, c)).or_default();
            let bad = status != TrialStatus::Ok;
            h.0 += usize::from(bad);
            h.1 = bad;
        }
        Ok(out)
    }

    /// What a trial of each environment × case costs so far, in seconds: the median of its ended
    /// trials' host spans with the agent's round trip (precision mode's c₁; a few milliseconds of
    /// the orchestrator's own work are added by the caller).
    pub fn trial_costs(
        &self,
        run: i64,
        warmup: bool,
    ) -> Result<std::collections::BTreeMap<(usize, usize), f64>> {
        let mut st = self.conn.prepare_cached(
            "SELECT env_idx, case_idx, host_ns + coalesce(rtt_ns, 0) FROM trials
             WHERE run_id = ?1 AND peer_idx IS NULL AND status = 'ok' AND host_ns IS NOT NULL AND warmup = ?2",
        )?;
        let rows = st.query_map(rusqlite::params![run, warmup], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get::<_, i64>(1)? as usize, r.get::<_, i64>(2)?))
        })?;
        let mut spans: std::collections::BTreeMap<(usize, usize), Vec<i64>> = Default::default();
        for row in rows {
            let (e, c, ns) = row?;
            spans.entry((e, c)).or_default().push(ns);
        }
        Ok(spans
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                (k, v[v.len() / 2] as f64 / 1e9)
            })
            .collect())
    }

    /// Where an environment's plan ends: its last block, and the last repetition of each case.
    pub fn plan_tail(
        &self,
        run: i64,
        env_idx: usize,
    ) -> Result<(u32, std::collections::BTreeMap<usize, i64>)> {
        let block: Option<i64> = self.conn.query_row(
            "SELECT max(block) FROM trials WHERE run_id = ?1 AND env_idx = ?2",
            params![run, env_idx as i64],
            |r| r.get(0),
        )?;
        let mut st = self.conn.prepare_cached(
            "SELECT case_idx, max(rep) FROM trials WHERE run_id = ?1 AND env_idx = ?2 GROUP BY case_idx",
        )?;
        let reps = st
            .query_map(params![run, env_idx as i64], |r| {
                Ok((r.get::<_, i64>(0)? as usize, r.get::<_, i64>(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok((block.unwrap_or(0).max(0) as u32, reps))
    }

    /// The last block of the run's plan (every environment's), and per case the last repetition
    /// number any environment has (precision mode's paired blocks continue both).
    pub fn plan_end(&self, run: i64) -> Result<(u32, std::collections::BTreeMap<usize, i64>)> {
        let block: Option<i64> =
            self.conn.query_row("SELECT max(block) FROM trials WHERE run_id = ?1", [run], |r| r.get(0))?;
        let mut st = self
            .conn
            .prepare_cached("SELECT case_idx, max(rep) FROM trials WHERE run_id = ?1 GROUP BY case_idx")?;
        let reps = st
            .query_map([run], |r| Ok((r.get::<_, i64>(0)? as usize, r.get::<_, i64>(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok((block.unwrap_or(0).max(0) as u32, reps))
    }

    /// Removes planned trials that never ran (precision mode's proposal when its budget ends).
    pub fn drop_pending(&self, ids: &[i64]) -> Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        for id in ids {
            tx.execute("DELETE FROM trials WHERE id = ?1 AND status = 'pending'", [id])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Stores the calibration of a case in an environment (once per run: a resumed run reuses it).
    pub fn record_calibration(
        &self,
        run: i64,
        env_idx: usize,
        case_idx: usize,
        c: &Calibration,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO calibrations (run_id, env_idx, case_idx, param, count, target_ns, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                run,
                env_idx as i64,
                case_idx as i64,
                c.param,
                c.count as i64,
                c.target_ns as i64,
                serde_json::to_string(c)?
            ],
        )?;
        Ok(())
    }

    /// Every calibration of a run: ((environment, case), what it found).
    pub fn calibrations(&self, run: i64) -> Result<Vec<((usize, usize), Calibration)>> {
        let mut st = self.conn.prepare(
            "SELECT env_idx, case_idx, detail FROM calibrations WHERE run_id = ?1 ORDER BY env_idx, case_idx",
        )?;
        let rows = st.query_map([run], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get::<_, i64>(1)? as usize, r.get::<_, String>(2)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (e, c, detail) = row?;
            out.push(((e, c), serde_json::from_str(&detail).context("a stored calibration")?));
        }
        Ok(out)
    }

    /// Everything stored of run `run`, read once: what its report and every output are built from.
    pub fn load(&self, run: i64) -> Result<RunRows> {
        let mut details: BTreeMap<i64, (Option<serde_json::Value>, CpuSeries)> = BTreeMap::new();
        let mut st = self.conn.prepare("SELECT id, extra FROM trials WHERE run_id = ?1")?;
        for row in st.query_map([run], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?)))? {
            let (id, extra) = row?;
            details.entry(id).or_default().0 = extra.and_then(|e| serde_json::from_str(&e).ok());
        }
        let mut st = self.conn.prepare(
            "SELECT c.trial_id, c.role, c.t_ms, c.cpu_ns FROM cpu_series c JOIN trials t ON t.id = c.trial_id \
             WHERE t.run_id = ?1 ORDER BY c.rowid",
        )?;
        for row in st.query_map([run], |r| Ok((r.get::<_, i64>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?))))? {
            let (id, point) = row?;
            details.entry(id).or_default().1.push(point);
        }
        let rows = RunRows {
            run_id: run,
            info: self.run(run)?,
            envs: self.environments(run)?,
            cases: self.cases(run)?,
            metrics: self.metrics(run)?,
            trials: self.trials(run)?,
            calibrations: self.calibrations(run)?.into_iter().collect(),
            starts: self.start_times(run)?,
            clock_rates: self.clock_rates(run)?,
            details,
            retried: self.retried(run)?,
        };
        check_consistent(&rows)?;
        Ok(rows)
    }

    /// Stores one finished trial and its samples atomically.
    pub fn record_trial(&self, trial_id: i64, o: &TrialOutcome) -> Result<()> {
        // `unchecked`: the store is used from one thread and never nests transactions.
        let tx = self.conn.unchecked_transaction()?;
        write_trial(&tx, trial_id, o)?;
        tx.commit()?;
        Ok(())
    }

    /// Stores one launch; returns its id (a trial names the launch that ran it).
    pub fn record_instance(&self, run: i64, i: &InstanceRecord) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO instances (run_id, env_idx, launched_at, start_ms, rtt_us, rtt_jitter_us, status, detail, console, block) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![run, i.env_idx, now_rfc3339(), i.start_ms, i.rtt_us, i.rtt_jitter_us, i.status, i.detail, i.console, i.block],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Stores what a launch's clock did over its life (virtperf's `env::ClockPoint::rate_against`).
    pub fn record_clock_rate(
        &self,
        instance: i64,
        span_s: f64,
        ppm: f64,
        uncertainty_ppm: f64,
    ) -> Result<()> {
        self.conn.execute(
            "UPDATE instances SET clock_span_s = ?2, clock_rate_ppm = ?3, clock_uncertainty_ppm = ?4 WHERE id = ?1",
            params![instance, span_s, ppm, uncertainty_ppm],
        )?;
        Ok(())
    }

    /// Every launch's clock rate: (environment, span s, rate error ppm, uncertainty ppm).
    pub fn clock_rates(&self, run: i64) -> Result<Vec<(usize, f64, f64, f64)>> {
        let mut st = self.conn.prepare(
            "SELECT env_idx, clock_span_s, clock_rate_ppm, clock_uncertainty_ppm FROM instances \
             WHERE run_id = ?1 AND env_idx >= 0 AND clock_rate_ppm IS NOT NULL ORDER BY id",
        )?;
        let rows =
            st.query_map([run], |r| Ok((r.get::<_, i64>(0)? as usize, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The trials of `run` that failed or were skipped go back to pending, each attempt's end
    /// kept in `retried` (and whatever the failed attempt stored removed): `--retry-failed`. One
    /// transaction: either every such trial is pending again with its history, or none is.
    pub fn retry_failed(&mut self, run: i64) -> Result<usize> {
        let tx = self.conn.transaction()?;
        let which = "SELECT id FROM trials WHERE run_id = ?1 AND status IN ('failed', 'skipped')";
        tx.execute(
            "INSERT INTO retried (trial_id, status, reason, finished_at)
             SELECT id, status, reason, finished_at FROM trials WHERE run_id = ?1 AND status IN ('failed', 'skipped')",
            [run],
        )?;
        tx.execute(&format!("DELETE FROM samples WHERE trial_id IN ({which})"), [run])?;
        tx.execute(&format!("DELETE FROM cpu_series WHERE trial_id IN ({which})"), [run])?;
        let n = tx.execute(
            "UPDATE trials SET status = 'pending', reason = NULL, finished_at = NULL, host_ns = NULL,
             guest_ns = NULL, host_cpu_ns = NULL, guest_cpu_ns = NULL, tester_cpu_ns = NULL, extra = NULL,
             rtt_ns = NULL, rtt_jitter_ns = NULL, launch_id = NULL, work = NULL
             WHERE run_id = ?1 AND status IN ('failed', 'skipped')",
            [run],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// How many of `run`'s trials failed or were skipped.
    pub fn failed_or_skipped(&self, run: i64) -> Result<usize> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM trials WHERE run_id = ?1 AND status IN ('failed', 'skipped')",
            [run],
            |r| r.get::<_, i64>(0),
        )? as usize)
    }

    /// How earlier attempts of `run`'s trials ended before `--retry-failed` ran them again:
    /// (status, reason) → how many.
    pub fn retried(&self, run: i64) -> Result<Vec<(String, String, u64)>> {
        let mut st = self.conn.prepare(
            "SELECT r.status, coalesce(r.reason, ''), count(*) FROM retried r JOIN trials t ON t.id = r.trial_id
             WHERE t.run_id = ?1 GROUP BY r.status, r.reason ORDER BY count(*) DESC",
        )?;
        let rows = st.query_map([run], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64)))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    pub fn set_run_status(&self, run: i64, status: RunStatus) -> Result<()> {
        let finished = if status == RunStatus::Running { None } else { Some(now_rfc3339()) };
        self.conn.execute(
            "UPDATE runs SET status = ?2, finished_at = ?3 WHERE id = ?1",
            params![run, status, finished],
        )?;
        Ok(())
    }

    /// Precision mode's pilots decided so far (`manifest.precision.pilots`: a paired ratio's key
    /// → the blocks its pilot holds; see `report::paired::Design`).
    pub fn pilots(&self, run: i64) -> Result<std::collections::BTreeMap<String, u32>> {
        let m = self.run(run)?.manifest;
        Ok(pilots_of(&m))
    }

    /// Records pilots precision mode decided (merged with those recorded before, never changing
    /// one): decided once, when a ratio's first blocks are in, they are what its report's
    /// interval rests on, in this process and after a `--resume`.
    pub fn record_pilots(&self, run: i64, pilots: &[(String, u32)]) -> Result<()> {
        if pilots.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction()?;
        let text: String = tx.query_row("SELECT manifest FROM runs WHERE id = ?1", [run], |r| r.get(0))?;
        let mut m: serde_json::Value =
            serde_json::from_str(&text).context("the run's manifest is not JSON")?;
        let Some(top) = m.as_object_mut() else { anyhow::bail!("run {run}'s manifest is not a JSON object") };
        let precision = top.entry("precision").or_insert_with(|| serde_json::json!({}));
        if !precision.is_object() {
            *precision = serde_json::json!({});
        }
        let map =
            precision.as_object_mut().map(|p| p.entry("pilots").or_insert_with(|| serde_json::json!({})));
        let Some(map) = map else { anyhow::bail!("run {run}'s manifest has no room for pilots") };
        if let Some(map) = map.as_object_mut() {
            for (k, n) in pilots {
                map.entry(k.clone()).or_insert_with(|| serde_json::json!(n));
            }
        }
        tx.execute("UPDATE runs SET manifest = ?2 WHERE id = ?1", params![run, m.to_string()])?;
        tx.commit()?;
        Ok(())
    }

    pub fn latest_run(&self) -> Result<Option<i64>> {
        Ok(self.conn.query_row("SELECT max(id) FROM runs", [], |r| r.get(0))?)
    }

    pub fn run(&self, id: i64) -> Result<RunInfo> {
        self.conn
            .query_row(
                "SELECT id, name, status, started_at, finished_at, experiment, manifest FROM runs WHERE id = ?1",
                [id],
                |r| {
                    Ok(RunInfo {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        status: r.get(2)?,
                        started_at: r.get(3)?,
                        finished_at: r.get(4)?,
                        experiment: r.get(5)?,
                        manifest: serde_json::from_str(&r.get::<_, String>(6)?).unwrap_or(serde_json::Value::Null),
                    })
                },
            )
            .optional()?
            .with_context(|| format!("no run {id} in this database (`virtperf report --list` shows the runs)"))
    }

    pub fn runs(&self) -> Result<Vec<RunInfo>> {
        let ids: Vec<i64> = self
            .conn
            .prepare("SELECT id FROM runs ORDER BY id")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        ids.into_iter().map(|i| self.run(i)).collect()
    }

    pub fn environments(&self, run: i64) -> Result<Vec<EnvRow>> {
        let mut st = self.conn.prepare(
            "SELECT idx, name, kind, params, instances, grp, host, baseline, own_clock FROM environments WHERE run_id = ?1 ORDER BY idx",
        )?;
        let rows = st.query_map([run], |r| {
            let name: String = r.get(1)?;
            Ok(EnvRow {
                idx: r.get::<_, i64>(0)? as usize,
                kind: r.get(2)?,
                params: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
                instances: r.get::<_, i64>(4)?.max(1) as u32,
                group: r.get::<_, Option<String>>(5)?.unwrap_or_else(|| name.clone()),
                host: r.get(6)?,
                baseline: r.get(7)?,
                own_clock: r.get(8)?,
                name,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn cases(&self, run: i64) -> Result<Vec<CaseRow>> {
        let mut st = self.conn.prepare(
            "SELECT idx, workload, kind, label, params, record FROM cases WHERE run_id = ?1 ORDER BY idx",
        )?;
        let rows = st.query_map([run], |r| {
            Ok((
                CaseRow {
                    idx: r.get::<_, i64>(0)? as usize,
                    workload: r.get(1)?,
                    kind: r.get(2)?,
                    label: r.get(3)?,
                    params: serde_json::from_str(&r.get::<_, String>(4)?).unwrap_or_default(),
                    record: CaseRecord::unknown(),
                },
                r.get::<_, Option<String>>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut c, record) = row?;
            // A record that does not read is refused, never guessed: every later figure's
            // direction rests on it.
            c.record = match record {
                Some(text) => serde_json::from_str(&text).with_context(|| {
                    format!("run {run}, case {} ({}): its stored record does not read", c.idx, c.label)
                })?,
                None => CaseRecord::unknown(),
            };
            out.push(c);
        }
        Ok(out)
    }

    /// Every metric run `run`'s build declared.
    pub fn metrics(&self, run: i64) -> Result<Metrics> {
        let mut st =
            self.conn.prepare("SELECT name, unit, better FROM metrics WHERE run_id = ?1 ORDER BY rowid")?;
        let rows = st.query_map([run], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, unit, better) = row?;
            let better = Better::parse(&better).with_context(|| {
                format!("run {run}, metric {name}: `{better}` is not higher, lower or neither")
            })?;
            out.push(MetricRecord { name, unit, better });
        }
        Ok(Metrics(out))
    }

    /// Every trial of a run with its samples, in planned order.
    pub fn trials(&self, run: i64) -> Result<Vec<TrialRow>> {
        let mut st = self.conn.prepare(
            "SELECT id, seq, env_idx, case_idx, rep, warmup, status, reason, host_ns, guest_ns, host_cpu_ns, guest_cpu_ns,
                    tester_cpu_ns, peer_idx, rtt_ns, rtt_jitter_ns, block, launch_id, work,
                    CASE WHEN json_valid(extra) THEN json_extract(extra, '$.clock_instances') END, finished_at
             FROM trials WHERE run_id = ?1 ORDER BY seq",
        )?;
        let mut trials: Vec<TrialRow> = st
            .query_map([run], |r| {
                Ok(TrialRow {
                    id: r.get(0)?,
                    seq: r.get(1)?,
                    env_idx: r.get::<_, i64>(2)? as usize,
                    case_idx: r.get::<_, i64>(3)? as usize,
                    rep: r.get(4)?,
                    warmup: r.get(5)?,
                    status: r.get(6)?,
                    // Printable whatever wrote it (an older virtperf stored agents' words raw).
                    reason: r.get::<_, Option<String>>(7)?.map(|t| virtperf_proto::printable(&t, 4000)),
                    host_ns: r.get(8)?,
                    guest_ns: r.get(9)?,
                    host_cpu_ns: r.get(10)?,
                    guest_cpu_ns: r.get(11)?,
                    tester_cpu_ns: r.get(12)?,
                    peer_idx: r.get::<_, Option<i64>>(13)?.map(|p| p as usize),
                    rtt_ns: r.get(14)?,
                    rtt_jitter_ns: r.get(15)?,
                    block: r.get::<_, i64>(16)?.max(0) as u32,
                    launch_id: r.get(17)?,
                    work: r.get(18)?,
                    finished_ms: r.get::<_, Option<String>>(20)?.as_deref().and_then(epoch_ms),
                    samples: Vec::new(),
                    instance_samples: Vec::new(),
                    // Written by virtperf itself; anything else there reads as none.
                    clock_instances: r
                        .get::<_, Option<String>>(19)
                        .ok()
                        .flatten()
                        .and_then(|t| serde_json::from_str(&t).ok())
                        .unwrap_or_default(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let index: std::collections::HashMap<i64, usize> =
            trials.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let mut st = self.conn.prepare(
            "SELECT s.trial_id, s.metric, s.value, s.unit, s.instance FROM samples s JOIN trials t ON t.id = s.trial_id WHERE t.run_id = ?1",
        )?;
        let rows = st.query_map([run], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                Sample { metric: r.get(1)?, value: r.get(2)?, unit: r.get(3)? },
                r.get::<_, Option<i64>>(4)?,
            ))
        })?;
        for row in rows {
            let (tid, s, inst) = row?;
            if let Some(&i) = index.get(&tid) {
                match inst {
                    Some(k) => trials[i].instance_samples.push((k as u32, s)),
                    None => trials[i].samples.push(s),
                }
            }
        }
        Ok(trials)
    }

    /// (env_idx, start_ms) of every successful launch.
    pub fn start_times(&self, run: i64) -> Result<Vec<(usize, f64)>> {
        let mut st = self.conn.prepare(
            "SELECT env_idx, start_ms FROM instances WHERE run_id = ?1 AND status = 'ready' AND start_ms IS NOT NULL ORDER BY id",
        )?;
        let rows = st.query_map([run], |r| Ok((r.get::<_, i64>(0)? as usize, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

fn insert_planned(tx: &Transaction, run: i64, plan: &[PlannedTrial]) -> Result<()> {
    let mut st = tx.prepare_cached(
        "INSERT INTO trials (run_id, seq, env_idx, case_idx, rep, warmup, status, peer_idx, block) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?8)",
    )?;
    for t in plan {
        st.execute(params![
            run,
            t.seq,
            t.env_idx as i64,
            t.case_idx as i64,
            t.rep,
            t.warmup,
            t.peer_idx.map(|p| p as i64),
            t.block
        ])?;
    }
    Ok(())
}

/// What calibrating a per-operation workload in an environment found: the operation count that
/// makes a trial last `target_ns` on the host's clock, from armed probe runs of growing counts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// The workload's count parameter (`iterations`, `pages`, `loads`).
    pub param: String,
    pub count: u64,
    pub target_ns: u64,
    /// Each probe run: (count, host ns of its timed region).
    pub probes: Vec<(u64, u64)>,
    /// Why the count stopped short of the target (a memory cap, the parameter's maximum).
    #[serde(default)]
    pub capped: Option<String>,
    /// With equal counts (`counts = "equal"`): this environment's own 0.2 s count, where the
    /// count it runs (`count`, the slowest environment's) is another.
    #[serde(default)]
    pub own: Option<u64>,
}

fn write_trial(tx: &Transaction, trial_id: i64, o: &TrialOutcome) -> Result<()> {
    let n = |x: Option<u64>| x.map(|v| v as i64);
    tx.execute(
        "UPDATE trials SET status = ?2, reason = ?3, finished_at = ?4, host_ns = ?5, guest_ns = ?6, host_cpu_ns = ?7, guest_cpu_ns = ?8,
         tester_cpu_ns = ?9, extra = ?10, rtt_ns = ?11, rtt_jitter_ns = ?12, launch_id = ?13, work = ?14
         WHERE id = ?1",
        params![
            trial_id,
            o.status,
            o.reason,
            now_rfc3339_millis(),
            n(o.host_ns),
            n(o.guest_ns),
            n(o.host_cpu_ns),
            n(o.guest_cpu_ns),
            n(o.tester_cpu_ns),
            o.extra.as_ref().map(|v| v.to_string()),
            n(o.rtt_ns),
            n(o.rtt_jitter_ns),
            o.launch_id,
            n(o.work)
        ],
    )?;
    let mut st =
        tx.prepare_cached("INSERT INTO cpu_series (trial_id, role, t_ms, cpu_ns) VALUES (?1, ?2, ?3, ?4)")?;
    for (role, t, c) in &o.cpu_series {
        st.execute(params![trial_id, role, t, *c as i64])?;
    }
    let mut st =
        tx.prepare_cached("INSERT INTO samples (trial_id, metric, value, unit) VALUES (?1, ?2, ?3, ?4)")?;
    for s in &o.samples {
        st.execute(params![trial_id, s.metric, s.value, s.unit])?;
    }
    let mut st = tx.prepare_cached(
        "INSERT INTO samples (trial_id, metric, value, unit, instance) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (k, s) in &o.instance_samples {
        st.execute(params![trial_id, s.metric, s.value, s.unit, k])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_stored_by_name_and_read_back_strictly() {
        for t in [TrialStatus::Pending, TrialStatus::Ok, TrialStatus::Failed, TrialStatus::Skipped] {
            assert_eq!(TrialStatus::parse(t.as_str()), Some(t));
        }
        for r in [RunStatus::Running, RunStatus::Completed, RunStatus::Interrupted, RunStatus::Failed] {
            assert_eq!(RunStatus::parse(r.as_str()), Some(r));
        }
        assert_eq!(TrialStatus::parse("OK"), None);
        assert_eq!(format!("{:<12}|", RunStatus::Completed), "completed   |", "tables pad it");
        assert_eq!(serde_json::to_value(RunStatus::Interrupted).unwrap(), "interrupted");
        let c = Connection::open_in_memory().unwrap();
        let read = |v: &str| c.query_row("SELECT ?1", [v], |r| r.get::<_, TrialStatus>(0));
        assert_eq!(read("skipped").unwrap(), TrialStatus::Skipped);
        assert!(read("done").unwrap_err().to_string().contains("unknown TrialStatus `done`"));
    }

    /// A describer of one kind, `k`, whose figure is better lower unless its parameters say.
    struct OneKind;
    impl crate::catalog::Describe for OneKind {
        fn case(&self, kind: &str, params: &serde_json::Value) -> Option<CaseRecord> {
            let better = if params["better"] == "higher" { Better::Higher } else { Better::Lower };
            (kind == "k").then(|| CaseRecord {
                family: crate::Family::Compute,
                metrics: vec![MetricRecord { name: "k_time".into(), unit: "ms".into(), better }],
                headlines: 1,
                ..CaseRecord::unknown()
            })
        }
        fn metrics(&self) -> Vec<MetricRecord> {
            vec![MetricRecord { name: "k_time".into(), unit: "ms".into(), better: Better::Lower }]
        }
    }
    static ONE_KIND: OneKind = OneKind;

    #[test]
    fn a_database_from_before_records_is_filled_once_as_it_is_migrated() {
        crate::catalog::install(&ONE_KIND);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            // Schema 9, as virtperf made it before cases had records: one run of three cases.
            let c = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..(RECORDS_SINCE - 1) as usize] {
                c.execute_batch(sql).unwrap();
            }
            c.pragma_update(None, "user_version", RECORDS_SINCE - 1).unwrap();
            c.execute_batch(
                "INSERT INTO runs (id, name, status, started_at, experiment, manifest) VALUES (1, 'old', 'completed', '2026-01-01T00:00:00Z', '', '{}');
                 INSERT INTO cases VALUES (1, 0, 'k', 'k', 'k', '{}');
                 INSERT INTO cases VALUES (1, 1, 'k', 'k', 'k higher', '{\"better\": \"higher\"}');
                 INSERT INTO cases VALUES (1, 2, 'gone', 'gone', 'gone', '{}');",
            )
            .unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        // Read only: the file is not touched; its copy is migrated and filled.
        let r = Store::open_read(&path).unwrap();
        let cases = r.cases(1).unwrap();
        assert_eq!(cases[0].record.family, crate::Family::Compute);
        assert_eq!(cases[0].record.metric("k_time").map(|m| m.better), Some(Better::Lower));
        assert_eq!(
            cases[1].record.metric("k_time").map(|m| m.better),
            Some(Better::Higher),
            "its parameters say"
        );
        assert_eq!(cases[2].record, CaseRecord::unknown(), "a kind the build does not know");
        assert_eq!(r.metrics(1).unwrap().find("k_time_host").map(|m| m.unit.as_str()), Some("ms"));
        drop(r);
        assert_eq!(std::fs::read(&path).unwrap(), before, "read only");
        // Opened to write: migrated in place, once; a record written then is kept as it is.
        let s = Store::open(&path).unwrap();
        s.conn
            .execute(
                "UPDATE cases SET record = ?1 WHERE idx = 2",
                [record_json(&CaseRecord { headlines: 7, ..CaseRecord::unknown() }).unwrap()],
            )
            .unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.cases(1).unwrap()[2].record.headlines, 7, "filled once, not again");
        let v: i64 = s.conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[test]
    fn a_record_that_does_not_read_is_refused_with_its_case() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("r.db")).unwrap();
        let run = s
            .create_run(&NewRun {
                name: "x",
                experiment_toml: "",
                manifest: &serde_json::json!({}),
                envs: &[NewEnv::of_kind("native")],
                cases: &[NewCase::plain("k", serde_json::json!({}))],
                metrics: &[],
                plan: &[],
            })
            .unwrap();
        s.conn.execute("UPDATE cases SET record = '{\"family\": \"weather\"}'", []).unwrap();
        let e = format!("{:#}", s.cases(run).unwrap_err());
        assert!(e.contains("case 0 (k): its stored record does not read"), "{e}");
    }

    #[test]
    fn plan_trials_and_resume_view() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut s = Store::open(&path).unwrap();
        let plan: Vec<PlannedTrial> = (0..4)
            .map(|i| PlannedTrial {
                id: 0,
                seq: i,
                env_idx: (i % 2) as usize,
                case_idx: 0,
                rep: i / 2,
                warmup: false,
                peer_idx: None,
                block: 0,
            })
            .collect();
        let run = s
            .create_run(&NewRun {
                name: "x",
                experiment_toml: "toml",
                manifest: &serde_json::json!({}),
                envs: &[NewEnv {
                    name: "native".into(),
                    kind: "native".into(),
                    params: serde_json::json!({}),
                    runtime: None,
                    instances: 1,
                    group: "native".into(),
                    host: None,
                    baseline: true,
                    own_clock: false,
                }],
                cases: &[NewCase::plain("memcpy", serde_json::json!({}))],
                metrics: &[],
                plan: &plan,
            })
            .unwrap();
        let pending = s.pending_trials(run).unwrap();
        assert_eq!(pending.len(), 4);
        let ok = TrialOutcome {
            status: TrialStatus::Ok,
            host_ns: Some(5),
            samples: vec![Sample { metric: "m".into(), value: 1.5, unit: "ms".into() }],
            ..Default::default()
        };
        s.record_trial(pending[0].id, &ok).unwrap();
        s.record_trial(
            pending[1].id,
            &TrialOutcome { status: TrialStatus::Failed, reason: Some("boom".into()), ..Default::default() },
        )
        .unwrap();
        drop(s);
        // Reopen: migrations are idempotent, state persisted.
        let s = Store::open(&path).unwrap();
        let left = s.pending_trials(run).unwrap();
        assert_eq!(left.iter().map(|t| t.seq).collect::<Vec<_>>(), vec![2, 3]);
        let all = s.trials(run).unwrap();
        assert_eq!(all[0].samples.len(), 1);
        assert_eq!(all[1].reason.as_deref(), Some("boom"));
        assert_eq!(s.latest_run().unwrap(), Some(run));

        // --retry-failed: the failed and skipped trials (and only they) are pending again, what a
        // failed attempt stored is gone, and how each ended is kept.
        let mut s = s;
        let failed_with_samples =
            TrialOutcome { status: TrialStatus::Failed, reason: Some("ssh closed".into()), ..ok.clone() };
        s.record_trial(left[0].id, &failed_with_samples).unwrap();
        s.record_trial(
            left[1].id,
            &TrialOutcome {
                status: TrialStatus::Skipped,
                reason: Some("gave up".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.failed_or_skipped(run).unwrap(), 3);
        assert_eq!(s.retry_failed(run).unwrap(), 3);
        let again: Vec<i64> = s.pending_trials(run).unwrap().iter().map(|t| t.seq).collect();
        assert_eq!(again, vec![1, 2, 3]);
        let all = s.trials(run).unwrap();
        assert_eq!((all[0].status, all[0].samples.len()), (TrialStatus::Ok, 1), "the ok trial is untouched");
        assert!(all[1..].iter().all(|t| t.samples.is_empty() && t.reason.is_none()), "{:?}", &all[1..]);
        let mut hist = s.retried(run).unwrap();
        hist.sort();
        assert_eq!(
            hist,
            vec![
                ("failed".into(), "boom".into(), 1),
                ("failed".into(), "ssh closed".into(), 1),
                ("skipped".into(), "gave up".into(), 1)
            ]
        );
        assert_eq!(s.retry_failed(run).unwrap(), 0, "nothing failed any more");
    }

    #[test]
    fn a_full_disk_is_known_by_its_kind() {
        let enospc = anyhow::Error::from(std::io::Error::from_raw_os_error(libc::ENOSPC)).context("writing");
        assert!(is_disk_full(&enospc));
        let sqlite = anyhow::Error::from(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".into()),
        ))
        .context("cannot store trial 7");
        assert!(is_disk_full(&sqlite));
        // Words are not enough: a message that says "full" is not a full disk.
        assert!(!is_disk_full(&anyhow::anyhow!("the queue is full: No space left")));
        assert!(!is_disk_full(&anyhow::Error::from(std::io::Error::from_raw_os_error(libc::EACCES))));
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        {
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
        }
        let e = Store::open(&path).err().unwrap().to_string();
        assert!(e.contains("newer"), "{e}");
    }
}
