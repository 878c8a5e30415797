//! The schema: forward migrations, each taking `PRAGMA user_version` one step (entry `i` from
//! version `i` to `i + 1`), and what a migration fills that SQL alone cannot (the cases' records
//! of runs stored before them).

use anyhow::{bail, Result};
use rusqlite::{params, Transaction};

use super::write::{insert_metrics, record_json};
use crate::catalog::CaseRecord;

/// Runs stored before the kinds' flags were: what each kind was when the columns came (a unit
/// test of virtperf's environments keeps this equal to their registry).
macro_rules! legacy_env_flags {
    () => {
        "UPDATE environments SET baseline = (kind = 'native'), own_clock = (kind IN ('gvisor', 'uml', 'qemu', 'libvirt'));"
    };
}
/// The statement that sets them, for that test.
pub const LEGACY_ENV_FLAGS: &str = legacy_env_flags!();

/// Forward migrations; entry `i` takes the schema from version `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
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
    r#"
-- A launch in phases, each on the host's monotonic clock, in ms: what the host prepared before
-- the runtime's or VMM's process started (a bundle, a disk image, an init), from there to the
-- guest init's first line (a guest's kernel boot; NULL where there is no guest kernel), to the
-- agent's hello (start_ms is spawn to hello, as before), the first request answered after it,
-- and the teardown. What the instance's host processes held in memory once ready and idle, in
-- KiB: PSS and USS summed over them (smaps_rollup), RSS, how many, and the cgroup's charge.
ALTER TABLE instances ADD COLUMN prepare_ms REAL;
ALTER TABLE instances ADD COLUMN boot_ms REAL;
ALTER TABLE instances ADD COLUMN first_ms REAL;
ALTER TABLE instances ADD COLUMN teardown_ms REAL;
ALTER TABLE instances ADD COLUMN pss_kib INTEGER;
ALTER TABLE instances ADD COLUMN uss_kib INTEGER;
ALTER TABLE instances ADD COLUMN rss_kib INTEGER;
ALTER TABLE instances ADD COLUMN processes INTEGER;
ALTER TABLE instances ADD COLUMN charged_kib INTEGER;
"#,
    r#"
-- Starts many at once: how many instances of the block were asked for together with this one
-- (1: it started alone, after the one before it was ready), and the host's CPU over the start
-- (asked for to the last of them ready: every process the host ran, in ms, from the root cgroup's
-- counter) divided among the instances started in it.
ALTER TABLE instances ADD COLUMN together INTEGER;
ALTER TABLE instances ADD COLUMN host_cpu_ms REAL;
-- One row per start of many at once (`start = "together"`): how many were asked for and how
-- many became ready, the makespan (asked for to the last of them ready, ms) and the host's CPU
-- over it (ms, all of it), why the others failed.
CREATE TABLE starts_together (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs(id),
    env_idx     INTEGER NOT NULL,
    block       INTEGER,
    asked       INTEGER NOT NULL,
    ready       INTEGER NOT NULL,
    makespan_ms REAL NOT NULL,
    host_cpu_ms REAL,
    failed      TEXT
);
"#,
    r#"
-- What the instance's host processes held at the end of its life, read just before its planned
-- teardown (KiB, as once ready: PSS and USS summed, the cgroup's charge): what its trials left.
ALTER TABLE instances ADD COLUMN pss_end_kib INTEGER;
ALTER TABLE instances ADD COLUMN uss_end_kib INTEGER;
ALTER TABLE instances ADD COLUMN charged_end_kib INTEGER;
-- The host's CPU the instance used while idle at the end of its life, % of one CPU: every one of
-- its host processes (its cgroup's counter) over a quiet window after its last trial, with no
-- request in flight.
ALTER TABLE instances ADD COLUMN idle_cpu_pct REAL;
-- The kernel the instance's agent runs on, as the agent said it (JSON: release, cmdline,
-- vulnerabilities as [name, line] pairs; bounded by the protocol): a guest's own kernel.
ALTER TABLE instances ADD COLUMN kernel_view TEXT;
"#,
];

/// The schema version whose migration added the cases' records (filled by [`Store::migrate`]).
pub(super) const RECORDS_SINCE: i64 = 10;

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Records for the cases of runs stored before records were, from the installed describer (the
/// build's workloads, which described such a run before); a kind it does not know keeps
/// [`CaseRecord::unknown`]. Without a describer (a program that reads no old runs) the migration
/// is refused, not guessed.
pub(super) fn fill_records(tx: &Transaction) -> Result<()> {
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
