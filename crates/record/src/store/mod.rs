//! Results in SQLite: one transaction per trial, WAL journal, schema versioned by
//! `PRAGMA user_version` with forward migrations.
//!
//! Durability: WAL with `synchronous = NORMAL` makes every committed trial survive a crash or
//! kill of virtperf (or of anything else); only a power loss may lose the last few commits.
//! `synchronous = FULL` would cost an fsync per trial on the hot path for that last case.
//!
//! Rooms: `schema` (the migrations), `rows` (what a run is made of), `write` and `read`; here,
//! opening a database (to write, or to read only through a migrated copy) and owning a run.

use std::path::Path;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

mod read;
mod rows;
mod schema;
mod write;

pub use rows::*;
use schema::{fill_records, MIGRATIONS, RECORDS_SINCE};
pub use schema::{LEGACY_ENV_FLAGS, SCHEMA_VERSION};

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
}

#[cfg(test)]
mod tests {
    use super::write::record_json;
    use super::*;
    use crate::catalog::{Better, CaseRecord, MetricRecord};
    use virtperf_proto::Sample;

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

    /// A run of one native environment and one memcpy case, with `plan`.
    fn native_memcpy_run(s: &mut Store, plan: &[PlannedTrial]) -> i64 {
        s.create_run(&NewRun {
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
            plan,
        })
        .unwrap()
    }

    /// A launch's memory once ready, read again once all are up, and at its end: each reading
    /// lands in its own columns, the end's without touching the others, and reads back whole.
    #[test]
    fn a_launch_memory_at_its_end_and_its_kernel_are_stored_beside_its_memory_once_ready() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("t.db")).unwrap();
        let run = native_memcpy_run(&mut s, &[]);
        let ready = Lifecycle {
            prepare_ms: Some(1.5),
            pss_kib: Some(4096),
            uss_kib: Some(2048),
            rss_kib: Some(8192),
            processes: Some(2),
            charged_kib: Some(6000),
            together: Some(1),
            ..Lifecycle::default()
        };
        let view = KernelView {
            release: "6.1.0-40-amd64".into(),
            cmdline: "console=ttyS0 mitigations=off".into(),
            vulnerabilities: vec![("spectre_v2".into(), "Vulnerable".into())],
        };
        let rec = InstanceRecord {
            env_idx: 0,
            status: LaunchStatus::Ready,
            start_ms: Some(9.0),
            lifecycle: ready,
            kernel_view: Some(view.clone()),
            ..Default::default()
        };
        let id = s.record_instance(run, &rec).unwrap();
        let end = Lifecycle {
            pss_kib: Some(5120),
            uss_kib: Some(3072),
            charged_kib: Some(7000),
            ..Lifecycle::default()
        };
        s.record_memory_end(id, &end).unwrap();
        s.record_idle_cpu(id, 2.5).unwrap();
        s.record_teardown(id, 3.25).unwrap();
        let lives = s.lifecycles(run).unwrap();
        assert_eq!(lives.len(), 1);
        let got = lives[0].life;
        let want = Lifecycle {
            teardown_ms: Some(3.25),
            pss_end_kib: Some(5120),
            uss_end_kib: Some(3072),
            charged_end_kib: Some(7000),
            idle_cpu_pct: Some(2.5),
            ..ready
        };
        assert_eq!(got, want);
        assert_eq!(s.kernel_views(run).unwrap(), vec![(0, view)], "the kernel its agent said, read back");
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
        let run = native_memcpy_run(&mut s, &plan);
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
        // An attempt run again at once (its instance died under it) is kept the same way.
        s.record_attempt(left[0].id, TrialStatus::Failed, "the agent exited").unwrap();
        let hist = s.retried(run).unwrap();
        assert!(hist.contains(&("failed".into(), "the agent exited".into(), 1)), "{hist:?}");
        assert_eq!(hist.len(), 4, "{hist:?}");
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
