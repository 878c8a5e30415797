//! `virtperf predict`: a workload's overhead in every environment a stored `explain = true` run
//! priced, before it runs there (docs/explain.md, "Predict before running").
//!
//! The workload runs natively only — a run of its own into a temporary database, its warm-ups
//! counted as any explain run's are (the mechanism cases left out: the prices come from the stored
//! run) — and its events per ns times each environment's prices give its predicted cost there.
//! Running it in those environments with `--explain` then shows the check (`report --explain`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::experiment::{self, Origin, RawExperiment, RawSetting};
use virtperf_record::store::{RunStatus, Store};
use virtperf_report::exit::{bad_input, ExitStatus};
use virtperf_report::report::explain::{self, EventCost, Share};
use virtperf_workload::Raw;

/// Where the prices come from, and the workloads to predict.
pub struct Opts {
    pub workloads: Vec<String>,
    /// The database of the stored explain run, and its id (None: the latest run that has prices).
    pub costs_db: PathBuf,
    pub costs_run: Option<i64>,
    pub json: bool,
    pub boot_timeout: std::time::Duration,
}

#[derive(Debug, Serialize)]
pub struct Prediction {
    pub environment: String,
    pub predicted: f64,
    pub ci: [f64; 2],
    pub shares: Vec<Share>,
}

#[derive(Debug, Serialize)]
pub struct Predicted {
    pub workload: String,
    /// Its native figure: metric, mean, unit.
    pub metric: String,
    pub native: f64,
    pub unit: String,
    pub rates_per_ms: BTreeMap<&'static str, f64>,
    pub predictions: Vec<Prediction>,
}

#[derive(Debug, Serialize)]
pub struct Answer {
    pub costs_db: String,
    pub costs_run: i64,
    pub costs_started: String,
    pub workloads: Vec<Predicted>,
}

/// The stored prices: the run asked for, or the latest completed one that has them.
fn prices(db: &Path, run: Option<i64>) -> Result<(i64, String, Vec<EventCost>)> {
    let store = Store::open_read(db).map_err(|e| bad_input(format!("--db {}: {e}", db.display())))?;
    let runs = store.runs()?;
    let candidates: Vec<_> = match run {
        Some(id) => runs.into_iter().filter(|r| r.id == id).collect(),
        None => runs.into_iter().rev().filter(|r| r.status == RunStatus::Completed).collect(),
    };
    if run.is_some() && candidates.is_empty() {
        return Err(bad_input(format!("--db {}: no run {}", db.display(), run.unwrap_or_default())));
    }
    for r in candidates {
        if r.manifest.get("explain").is_none() {
            continue;
        }
        let rows = store.load(r.id)?;
        let rep = virtperf_report::report::build(&rows)?;
        if let Some(x) = rep.explain.filter(|x| !x.costs.is_empty()) {
            return Ok((r.id, r.started_at, x.costs));
        }
    }
    Err(bad_input(format!(
        "{}: no run that priced events{}: run `virtperf run examples/explain.toml --db {}` first (it prices each event in every environment this host has)",
        db.display(),
        run.map(|i| format!(" (run {i} has no explain = true)")).unwrap_or_default(),
        db.display()
    )))
}

/// The workloads as a native explain run (without the mechanism cases).
fn native_experiment(workloads: &[String]) -> Result<experiment::Experiment, experiment::InputError> {
    let mut raw = RawExperiment::default();
    raw.envs.push(experiment::read_flag("virtperf predict", crate::env::baseline().kind())?);
    for w in workloads {
        raw.workloads.push(experiment::read_flag("--workload", w)?);
    }
    let origin = Origin::Flag { flag: "virtperf predict", value: "(flags)".into() };
    for (k, v) in [("name", Raw::Str("predict".into())), ("explain", Raw::Bool(true)), ("reps", Raw::Int(3))]
    {
        raw.settings.insert(k.into(), RawSetting { value: v, origin: origin.clone() });
    }
    let mut exp = experiment::validate(&raw, &origin)?;
    // The prices are the stored run's: only the workloads given run here.
    let given = raw.workloads.len();
    let names: Vec<String> = exp.workloads.iter().take(given).map(|w| w.name.clone()).collect();
    exp.workloads.truncate(given);
    exp.cases.retain(|c| names.contains(&c.workload));
    Ok(exp)
}

/// A directory removed on every way out.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn predict(o: &Opts) -> Result<Answer> {
    if o.workloads.is_empty() {
        return Err(bad_input("give the workload to predict: --workload KIND[:key=value,...] (e.g. --workload 'command:cmd=tar -cf /tmp/x.tar /usr/share/doc')"));
    }
    let exp = native_experiment(&o.workloads).map_err(bad_input)?;
    let (costs_run, costs_started, costs) = prices(&o.costs_db, o.costs_run)?;
    let dir = TempDir(std::env::temp_dir().join(format!("virtperf-predict-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).with_context(|| format!("cannot make {}", dir.0.display()))?;
    let db = dir.0.join("native.db");
    let opts = crate::run::RunOpts {
        db: db.clone(),
        progress: !o.json,
        outputs: Vec::new(),
        boot_timeout: o.boot_timeout,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let status = crate::run::run_new(exp, &opts)?;
    if status != ExitStatus::Success {
        anyhow::bail!("the native run of the workloads did not complete ({status:?})");
    }
    let store = Store::open_read(&db)?;
    let id = store.runs()?.last().map(|r| r.id).context("the native run left no run")?;
    let rows = store.load(id)?;
    let rep = virtperf_report::report::build(&rows)?;
    let rates = explain::native_rates(&rows, &rep.basis());
    let mut envs: Vec<&str> = Vec::new();
    for c in &costs {
        if !envs.contains(&c.environment.as_str()) {
            envs.push(&c.environment);
        }
    }
    let mut out = Vec::new();
    for c in &rows.cases {
        let Some(rt) = rates.get(&c.idx) else {
            anyhow::bail!("{}: its native pass counted nothing (see the run's notes)", c.label);
        };
        let row = rep.results.iter().find(|x| x.workload == c.label && x.headline);
        let predictions = envs
            .iter()
            .map(|e| {
                let p: Vec<&EventCost> = costs.iter().filter(|c| c.environment == *e).collect();
                let (predicted, ci, shares) = explain::predict(rt, &p);
                Prediction { environment: e.to_string(), predicted, ci, shares }
            })
            .collect();
        out.push(Predicted {
            workload: c.label.clone(),
            metric: row.map(|r| r.metric.clone()).unwrap_or_default(),
            native: row.map_or(f64::NAN, |r| r.mean),
            unit: row.map(|r| r.unit.clone()).unwrap_or_default(),
            rates_per_ms: rt.iter().map(|(e, v)| (*e, v.0 * 1e6)).collect(),
            predictions,
        });
    }
    let answer =
        Answer { costs_db: o.costs_db.display().to_string(), costs_run, costs_started, workloads: out };
    Ok(answer)
}

/// The terminal's answer: per workload, its native figure and events, then its predicted cost
/// in each environment with what makes it.
pub fn render(a: &Answer, width: usize) -> String {
    let what = explain::event_words;
    let mut out = explain::hang(
        "",
        &format!(
            "Predicted from native counts × the prices of run {} in {} ({}); not yet measured there. Check it: virtperf run --explain with these environments and the workload, then virtperf report --explain.",
            a.costs_run, a.costs_db, a.costs_started
        ),
        width,
    );
    for w in &a.workloads {
        let mut ev: Vec<(&&str, &f64)> =
            w.rates_per_ms.iter().filter(|(e, v)| **v > 0.0 && **e != "cpu_user_ns").collect();
        ev.sort_by(|a, b| b.1.total_cmp(a.1));
        let events: Vec<String> = ev.iter().take(4).map(|(e, v)| format!("{} {v:.1}/ms", what(e))).collect();
        out += &format!(
            "\n{} — native {}\n",
            w.workload,
            virtperf_report::report::words::fmt_value(w.native, &w.unit)
        );
        out += &explain::hang("  events: ", &events.join(", "), width);
        for p in &w.predictions {
            let mut sh: Vec<&Share> = p.shares.iter().filter(|s| s.share > 0.0).collect();
            sh.sort_by(|a, b| b.share.total_cmp(&a.share));
            let from: Vec<String> = sh
                .iter()
                .take(3)
                .map(|s| format!("{} {:.0}\u{a0}%", what(s.event), s.share * 100.0))
                .collect();
            // The interval padded: every environment's shares start in one column.
            let ci = format!("[{}, {}]", explain::times(p.ci[0]), explain::times(p.ci[1]));
            let head = format!("  {:<14} {:>7} {ci:<16}  ", p.environment, explain::times(p.predicted));
            out += &explain::hang(&head, &from.join(", "), width);
        }
    }
    out
}
