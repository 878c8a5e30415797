//! Reads: what a resume, precision mode and the report ask of a stored run, and the whole run
//! read once ([`Store::load`]) that every output is built from.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use rusqlite::OptionalExtension;

use super::*;
use crate::catalog::{Better, CaseRecord, MetricRecord, Metrics};
use virtperf_proto::Sample;

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

impl Store {
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

    /// Every value of `metric` that environment `env`'s completed trials of case `case` stored in
    /// run `run` so far, warm-ups included (the aggregate of several instances), in trial order:
    /// a service's reference rate is the baseline's capacity measured so far.
    pub fn values_of(&self, run: i64, env: usize, case: usize, metric: &str) -> Result<Vec<f64>> {
        let mut st = self.conn.prepare_cached(
            "SELECT s.value FROM samples s JOIN trials t ON t.id = s.trial_id
             WHERE t.run_id = ?1 AND t.env_idx = ?2 AND t.case_idx = ?3 AND s.metric = ?4
               AND t.status = 'ok' AND t.peer_idx IS NULL AND s.instance IS NULL
             ORDER BY t.seq",
        )?;
        let rows = st.query_map(rusqlite::params![run, env as i64, case as i64, metric], |r| r.get(0))?;
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
            lifecycles: self.lifecycles(run)?,
            together: self.starts_together(run)?,
            kernel_views: self.kernel_views(run)?,
            clock_rates: self.clock_rates(run)?,
            details,
            retried: self.retried(run)?,
        };
        check_consistent(&rows)?;
        Ok(rows)
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

    /// Precision mode's pilots decided so far (`manifest.precision.pilots`: a paired ratio's key
    /// → the blocks its pilot holds; see `report::paired::Design`).
    pub fn pilots(&self, run: i64) -> Result<std::collections::BTreeMap<String, u32>> {
        let m = self.run(run)?.manifest;
        Ok(pilots_of(&m))
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

    /// Every successful launch that stored its phases (`prepare_ms`): its start-up and memory.
    pub fn lifecycles(&self, run: i64) -> Result<Vec<LaunchLife>> {
        let mut st = self.conn.prepare(
            "SELECT env_idx, start_ms, prepare_ms, boot_ms, first_ms, teardown_ms, pss_kib, uss_kib, rss_kib, processes, charged_kib, block, together, host_cpu_ms, pss_end_kib, uss_end_kib, charged_end_kib, idle_cpu_pct FROM instances WHERE run_id = ?1 AND status = 'ready' AND start_ms IS NOT NULL AND prepare_ms IS NOT NULL ORDER BY id",
        )?;
        let kib = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
        let rows = st.query_map([run], |r| {
            Ok(LaunchLife {
                env_idx: r.get::<_, i64>(0)? as usize,
                block: r.get(11)?,
                start_ms: r.get(1)?,
                life: Lifecycle {
                    prepare_ms: r.get(2)?,
                    boot_ms: r.get(3)?,
                    first_ms: r.get(4)?,
                    teardown_ms: r.get(5)?,
                    pss_kib: kib(r.get(6)?),
                    uss_kib: kib(r.get(7)?),
                    rss_kib: kib(r.get(8)?),
                    processes: r.get(9)?,
                    charged_kib: kib(r.get(10)?),
                    together: r.get(12)?,
                    host_cpu_ms: r.get(13)?,
                    pss_end_kib: kib(r.get(14)?),
                    uss_end_kib: kib(r.get(15)?),
                    charged_end_kib: kib(r.get(16)?),
                    idle_cpu_pct: r.get(17)?,
                },
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The kernel each ready launch's agent said it runs on, in launch order; a view that does
    /// not read (a store written by hand) is left out.
    pub fn kernel_views(&self, run: i64) -> Result<Vec<(usize, KernelView)>> {
        let mut st = self.conn.prepare(
            "SELECT env_idx, kernel_view FROM instances WHERE run_id = ?1 AND status = 'ready' AND kernel_view IS NOT NULL ORDER BY id",
        )?;
        let rows = st.query_map([run], |r| Ok((r.get::<_, i64>(0)? as usize, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (e, text) = row?;
            if let Ok(v) = serde_json::from_str(&text) {
                out.push((e, v));
            }
        }
        Ok(out)
    }

    /// Every start of many at once, in the order they happened.
    pub fn starts_together(&self, run: i64) -> Result<Vec<StartTogether>> {
        let mut st = self.conn.prepare(
            "SELECT env_idx, block, asked, ready, makespan_ms, host_cpu_ms, failed FROM starts_together WHERE run_id = ?1 ORDER BY id",
        )?;
        let rows = st.query_map([run], |r| {
            Ok(StartTogether {
                env_idx: r.get::<_, i64>(0)? as usize,
                block: r.get(1)?,
                asked: r.get(2)?,
                ready: r.get(3)?,
                makespan_ms: r.get(4)?,
                host_cpu_ms: r.get(5)?,
                failed: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
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
