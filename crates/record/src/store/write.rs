//! Writes: a run created whole in one transaction (its environments, its cases with their
//! records, the build's metrics, the plan), then one transaction per trial, launch, calibration
//! and pilot as each ends.

use anyhow::{Context, Result};
use rusqlite::{params, Transaction};

use super::{
    now_rfc3339, now_rfc3339_millis, Calibration, InstanceRecord, NewRun, PlannedTrial, RunStatus, Store,
    TrialOutcome, TrialStatus,
};
use crate::catalog::{CaseRecord, MetricRecord};

/// A case's record as stored.
pub(super) fn record_json(r: &CaseRecord) -> Result<String> {
    serde_json::to_string(r).context("a case's record as JSON")
}

pub(super) fn insert_metrics(tx: &Transaction, run: i64, metrics: &[MetricRecord]) -> Result<()> {
    let mut st =
        tx.prepare("INSERT OR IGNORE INTO metrics (run_id, name, unit, better) VALUES (?1, ?2, ?3, ?4)")?;
    for m in metrics {
        st.execute(params![run, m.name, m.unit, m.better.as_str()])?;
    }
    Ok(())
}

impl Store {
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
            "INSERT INTO instances (run_id, env_idx, launched_at, start_ms, rtt_us, rtt_jitter_us, status, detail, console, block, prepare_ms, boot_ms, first_ms, pss_kib, uss_kib, rss_kib, processes, charged_kib, together, host_cpu_ms, kernel_view) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
            params![
                run,
                i.env_idx,
                now_rfc3339(),
                i.start_ms,
                i.rtt_us,
                i.rtt_jitter_us,
                i.status,
                i.detail,
                i.console,
                i.block,
                i.lifecycle.prepare_ms,
                i.lifecycle.boot_ms,
                i.lifecycle.first_ms,
                i.lifecycle.pss_kib.map(|v| v as i64),
                i.lifecycle.uss_kib.map(|v| v as i64),
                i.lifecycle.rss_kib.map(|v| v as i64),
                i.lifecycle.processes,
                i.lifecycle.charged_kib.map(|v| v as i64),
                i.lifecycle.together,
                i.lifecycle.host_cpu_ms,
                i.kernel_view.as_ref().map(serde_json::to_string).transpose()?
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Stores a start of many instances at once (its instances are stored each on its own).
    pub fn record_start_together(&self, run: i64, s: &super::StartTogether) -> Result<()> {
        self.conn.execute(
            "INSERT INTO starts_together (run_id, env_idx, block, asked, ready, makespan_ms, host_cpu_ms, failed) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![run, s.env_idx as i64, s.block, s.asked, s.ready, s.makespan_ms, s.host_cpu_ms, s.failed],
        )?;
        Ok(())
    }

    /// Stores a launch's memory read again (its PSS, USS, RSS, processes and charge; the other
    /// figures of `life` are not touched): several instances once all of them are up.
    pub fn record_memory(&self, instance: i64, life: &super::Lifecycle) -> Result<()> {
        self.conn.execute(
            "UPDATE instances SET pss_kib = ?2, uss_kib = ?3, rss_kib = ?4, processes = ?5, charged_kib = ?6 WHERE id = ?1",
            params![
                instance,
                life.pss_kib.map(|v| v as i64),
                life.uss_kib.map(|v| v as i64),
                life.rss_kib.map(|v| v as i64),
                life.processes,
                life.charged_kib.map(|v| v as i64)
            ],
        )?;
        Ok(())
    }

    /// Stores what a launch's processes held at the end of its life (PSS, USS and the charge of
    /// `end`, read just before its planned teardown; the other figures are not touched).
    pub fn record_memory_end(&self, instance: i64, end: &super::Lifecycle) -> Result<()> {
        self.conn.execute(
            "UPDATE instances SET pss_end_kib = ?2, uss_end_kib = ?3, charged_end_kib = ?4 WHERE id = ?1",
            params![
                instance,
                end.pss_kib.map(|v| v as i64),
                end.uss_kib.map(|v| v as i64),
                end.charged_kib.map(|v| v as i64)
            ],
        )?;
        Ok(())
    }

    /// Stores the host's CPU a launch's processes used idle at the end of its life (% of one CPU).
    pub fn record_idle_cpu(&self, instance: i64, pct: f64) -> Result<()> {
        self.conn.execute("UPDATE instances SET idle_cpu_pct = ?2 WHERE id = ?1", params![instance, pct])?;
        Ok(())
    }

    /// Stores how long a launch's teardown took (everything it ran stopped, what it made removed).
    pub fn record_teardown(&self, instance: i64, teardown_ms: f64) -> Result<()> {
        self.conn
            .execute("UPDATE instances SET teardown_ms = ?2 WHERE id = ?1", params![instance, teardown_ms])?;
        Ok(())
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

    /// An attempt of trial `trial` that ended so and is run again at once (its instance died
    /// under it): kept in `retried`, as `--retry-failed` keeps its attempts.
    pub fn record_attempt(&self, trial: i64, status: TrialStatus, reason: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO retried (trial_id, status, reason, finished_at) VALUES (?1, ?2, ?3, ?4)",
            params![trial, status, reason, now_rfc3339()],
        )?;
        Ok(())
    }

    pub fn set_run_status(&self, run: i64, status: RunStatus) -> Result<()> {
        let finished = if status == RunStatus::Running { None } else { Some(now_rfc3339()) };
        self.conn.execute(
            "UPDATE runs SET status = ?2, finished_at = ?3 WHERE id = ?1",
            params![run, status, finished],
        )?;
        Ok(())
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
