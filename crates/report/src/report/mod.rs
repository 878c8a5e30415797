//! Reports, always computed from the database (so `run` and `report` print the same thing):
//! summaries per environment × case × metric, overhead versus the native baseline with Fieller
//! 95 % intervals, the host-vs-guest clock check, start times, and failures.

use std::collections::BTreeMap;

pub mod answer;
pub mod costs;
pub mod disk;
pub mod disturbances;
pub mod explain;
pub mod figures;
mod fixtures;
pub mod hosts;
pub mod html;
pub mod kernels;
pub mod knobs;
pub mod lifecycle;
pub mod paired;
pub mod rfc2544;
pub mod rfc2544_answer;
pub mod rows;
pub mod summary;
mod svg;
pub mod timer;
pub mod together;
pub mod words;

pub use rows::*;
pub use words::{WIDTH as SUMMARY_WIDTH, *};

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};
use serde::Serialize;
use virtperf_record::catalog::{Better, LinkBound, Metrics};
use virtperf_stats::{ratio_ci, Summary};

use virtperf_record::store::{RunRows, RunStatus, TrialRow, TrialStatus};

const DERIVED: &[&str] = &[HOST_CPU, TESTER_CPU, GUEST_CPU, CPU_PER_GBIT];

/// A side of a comparison: the values of one environment × case × metric, grouped by the launch
/// that measured them, summarised at the run's level.
struct Side {
    all: Summary,
    est: virtperf_stats::Estimate,
    nested: Option<virtperf_stats::Nested>,
}

/// A figure none of whose values is below zero (a rate, a time) never gets an interval reaching
/// below it: where Student's t one does (gVisor's goodput 2.96 Gbit/s, [−0.41, 6.33] over flows
/// one of which stalled), the same half-width is taken on the log scale (the delta method:
/// mean ÷ e^(half/mean) … mean × e^(half/mean)), which is always above zero, as wide to first
/// order where the spread is small, and skewed upward as such figures are.
pub(crate) fn positive_ci(l: f64, h: f64, mean: f64, min: f64) -> (f64, f64) {
    if l >= 0.0 || min < 0.0 || mean.is_nan() || mean <= 0.0 {
        return (l, h);
    }
    let k = ((h - l) / 2.0 / mean).exp();
    (mean / k, mean * k)
}

impl Side {
    fn of(values: &[f64], launches: &[Option<i64>]) -> Option<Side> {
        let all = Summary::of(values)?;
        let groups = launch_groups(values, launches);
        let nested = virtperf_stats::Nested::of(&groups).filter(|n| n.launches >= 2);
        let est = nested.as_ref().map(|n| n.estimate()).unwrap_or_else(|| all.estimate());
        Some(Side { all, est, nested })
    }
    fn launches(&self) -> usize {
        self.nested.as_ref().map_or(1, |n| n.launches)
    }
    fn ci(&self, level: f64) -> Option<(f64, f64)> {
        let ci = if level == 0.95 && self.nested.is_none() { self.all.ci95 } else { self.est.ci_at(level) };
        ci.map(|(l, h)| positive_ci(l, h, self.est.mean, self.all.min))
    }
    fn no_ci(&self) -> Option<&'static str> {
        match &self.nested {
            None => self.all.no_ci_reason(),
            Some(_) => self.est.no_ci_reason(),
        }
    }
    fn variance(&self) -> Option<Variance> {
        let n = self.nested.as_ref()?;
        let share = n.launch_share()?;
        Some(Variance {
            launch_share: share,
            trial_share: 1.0 - share,
            launch_sd: n.var_launch.sqrt(),
            trial_sd: n.var_trial.sqrt(),
        })
    }
    /// This side's row (no peer, instance, ratio or second clock: the callers add those).
    fn row(
        &self,
        environment: &str,
        case: &virtperf_record::store::CaseRow,
        metrics: &Metrics,
        metric: &str,
        unit: &str,
        level: f64,
    ) -> ResultRow {
        let ci = self.ci(level);
        ResultRow {
            mean: self.est.mean,
            ci95: ci.map(|(l, h)| [l, h]),
            no_ci: if ci.is_some() { None } else { self.no_ci() },
            launches: self.launches(),
            ci_covers: if self.nested.is_some() { "launches" } else { "one launch" },
            ci_level: level,
            variance: self.variance(),
            ..ResultRow::of(&self.all, environment, case, metrics, metric, unit)
        }
    }
}

/// The ratio `a / b` with Fieller's interval at 95 % and at the stated `level`, each side at its
/// own level of repetition.
fn side_ratio(a: &Side, b: &Side, level: f64) -> Option<Overhead> {
    if b.est.mean == 0.0 {
        return None;
    }
    if let Some(why) = a.no_ci().or(b.no_ci()) {
        return Some(Overhead {
            ci_level: level,
            ..Overhead::unpaired(a.est.mean / b.est.mean, None, Some(why))
        });
    }
    let at = |l: f64| virtperf_stats::ratio_ci_at(&a.est, &b.est, l);
    let r95 = at(0.95)?;
    let stated = at(level)?;
    Some(Overhead {
        ci: stated.ci95.map(|(l, h)| [l, h]),
        ci_level: level,
        // TOST at the stated level's α: 90 % for a 95 % statement, 98 % for precision mode's 99 %.
        ci90: at(2.0 * level - 1.0).and_then(|r| r.ci95).map(|(l, h)| [l, h]),
        no_ci: stated.no_ci.or(r95.no_ci),
        ..Overhead::unpaired(r95.ratio, r95.ci95.map(|(l, h)| [l, h]), r95.no_ci)
    })
}

/// The paired ratio of `pairs` as the report states it (Stein's interval for a precision run).
/// Pairs with a stalled trial (`stalled`), and those far outside the others
/// ([`virtperf_stats::paired::set_apart`]), are set apart: the ratio is of the rest, with what was
/// set apart beside it ([`SetApart`]). Every pair stalled: the ratio of them all, with no interval.
fn paired_overhead(all: &[(virtperf_stats::paired::Pair, Apart)], pilot: Option<u32>) -> Option<Overhead> {
    let pairs: Vec<virtperf_stats::paired::Pair> =
        all.iter().filter(|(_, a)| *a == Apart::Kept).map(|(p, _)| *p).collect();
    let of =
        |why: Apart| all.iter().filter(|(_, a)| *a == why).map(|(p, _)| p.env / p.base).collect::<Vec<f64>>();
    let (stalled, burst) = (of(Apart::Stalled), of(Apart::Burst));
    let everything: Vec<virtperf_stats::paired::Pair> = all.iter().map(|(p, _)| *p).collect();
    if pairs.len() < 2 && stalled.is_empty() && !burst.is_empty() {
        // Every pair (but one) touched on one side: too few left to set them apart against.
        let kept: Vec<(virtperf_stats::paired::Pair, Apart)> =
            all.iter().map(|(p, _)| (*p, Apart::Kept)).collect();
        return paired_overhead(&kept, pilot);
    }
    if pairs.is_empty() {
        let r = virtperf_stats::paired::paired_ratio(&everything, 0.95)?;
        return Some(Overhead {
            estimate: "paired",
            pairs: Some(r.pairs),
            blocks: Some(r.blocks),
            set_apart: Some(SetApart {
                stalled: stalled.len(),
                burst: burst.len(),
                beyond: 0,
                of: all.len(),
                ratio_with: r.ratio,
                ratios: stalled.into_iter().chain(burst).collect(),
            }),
            ..Overhead::unpaired(r.ratio, None, Some(NO_CI_EVERY_TRIAL_STALLED))
        });
    }
    let far = virtperf_stats::paired::set_apart(&pairs);
    let r = paired::stated(&pairs, pilot)?;
    let ci = r.ci.map(|(l, h)| [l, h]);
    let set_apart = (!stalled.is_empty() || !burst.is_empty() || !far.is_empty()).then(|| SetApart {
        stalled: stalled.len(),
        burst: burst.len(),
        beyond: far.len(),
        of: all.len(),
        ratio_with: virtperf_stats::paired::paired_ratio(&everything, 0.95).map_or(f64::NAN, |r| r.ratio),
        ratios: stalled
            .iter()
            .chain(&burst)
            .copied()
            .chain(far.iter().map(|&i| pairs[i].env / pairs[i].base))
            .collect(),
    });
    Some(Overhead {
        ratio: r.ratio,
        ci95: ci,
        no_ci: r.no_ci,
        estimate: "paired",
        ci,
        ci_level: 0.95,
        ci90: paired::stated_at(&pairs, pilot, 0.90).and_then(|r| r.ci).map(|(l, h)| [l, h]),
        pairs: Some(r.pairs),
        blocks: Some(r.blocks),
        set_apart,
    })
}

/// Why a ratio has no interval: each of its pairs had a trial that stalled.
pub const NO_CI_EVERY_TRIAL_STALLED: &str = "every pair had a trial that stalled";

impl ResultRow {
    /// `s`'s statistics as the row of `environment` × `case` × `metric`: no peer, instance,
    /// ratio or second clock (the callers add those that apply).
    fn of(
        s: &Summary,
        environment: &str,
        case: &virtperf_record::store::CaseRow,
        metrics: &Metrics,
        metric: &str,
        unit: &str,
    ) -> ResultRow {
        ResultRow {
            environment: environment.to_string(),
            peer: None,
            instance: None,
            workload: case.label.clone(),
            kind: case.kind.clone(),
            params: case.params.clone(),
            metric: metric.to_string(),
            unit: unit.to_string(),
            better: better_str(better_of(case, metrics, metric)),
            n: s.n,
            mean: s.mean,
            median: s.median,
            stdev: s.stdev,
            min: s.min,
            max: s.max,
            cv: s.cv.is_finite().then_some(s.cv),
            ci95: s.ci95.map(|(l, h)| [l, h]),
            no_ci: s.no_ci_reason(),
            outliers: s.outliers.len(),
            non_finite: 0,
            overhead: None,
            clock: None,
            other_clock: None,
            clock_disagrees: false,
            launches: 1,
            ci_covers: "one launch",
            ci_level: 0.95,
            variance: None,
            work: None,
            verdict: None,
            headline: case.record.is_headline(metric),
            family: case.record.family,
        }
    }
}

/// The first line of every terminal report: the run, its status and its trial counts.
fn run_line(r: &Report) -> String {
    format!(
        "run {} \"{}\" — {} — {} ok, {} failed, {} skipped, {} pending ({} warm-up not counted)\n",
        r.run_id,
        r.name,
        r.status,
        r.trials.ok,
        r.trials.failed,
        r.trials.skipped,
        r.trials.pending,
        r.trials.warmup
    )
}

#[derive(Debug, Serialize)]
pub struct ClockCheck {
    pub environment: String,
    pub workload: String,
    /// The clock this environment's dual-clock figures are headlined on.
    pub headline: &'static str,
    pub host_ms_mean: f64,
    pub guest_ms_mean: f64,
    /// host / guest
    pub ratio: f64,
    /// Armed trials checked, and how many of them agreed within their tolerance.
    pub trials: usize,
    pub agreeing: usize,
    /// Median of host − guest over the trials, ms and % of the guest's span.
    pub median_offset_ms: f64,
    pub median_offset_pct: f64,
    /// Median tolerance of the trials, ms.
    pub tolerance_ms: f64,
    /// Most trials agree.
    pub agree: bool,
    /// Instances that ran at once (one point per instance and trial when more than one).
    pub instances: usize,
}

/// An environment's agent clock against the host's over whole launches (a ping when each came
/// up, one before it shut down): the clock's *rate*, which a trial's check (milliseconds, with a
/// constant latency on top) cannot resolve.
#[derive(Debug, Serialize)]
pub struct ClockRate {
    pub environment: String,
    pub launches: usize,
    /// Median over launches of (guest span − host span) / host span, ppm.
    pub median_ppm: f64,
    /// The launch furthest from the host's rate, ppm.
    pub worst_ppm: f64,
    /// Median of what the round trips at both ends leave uncertain, ppm.
    pub uncertainty_ppm: f64,
    /// Median span of a launch, s.
    pub span_s: f64,
}

#[derive(Debug, Serialize)]
pub struct EnvSummary {
    pub name: String,
    pub kind: String,
    pub params: serde_json::Value,
    pub launches: usize,
    pub start_ms_mean: Option<f64>,
    /// Launch to the agent's hello, host clock: one sample per successful launch.
    pub start_ms: Option<StartTimes>,
    /// What its ratios are to (None: it is a baseline itself, or there is none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Its launches in phases and its memory once ready (runs that stored them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup: Option<lifecycle::Startup>,
    /// It keeps time of its own (a guest, gVisor): its store row's flag.
    #[serde(skip)]
    pub own_clock: bool,
}

/// The start times of an environment's launches (a measurement like any other).
#[derive(Debug, Serialize)]
pub struct StartTimes {
    pub n: usize,
    pub mean: f64,
    pub ci95: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_ci: Option<&'static str>,
    pub min: f64,
    pub max: f64,
}

/// Seed 000's table for one environment (as written, before its `instances` sweep), workload
/// and metric: a row per instance count.
#[derive(Debug, Serialize)]
pub struct InstanceTable {
    pub group: String,
    pub workload: String,
    pub metric: String,
    pub unit: String,
    /// The clock of the figures: the main table's for this metric and environment (`host` for a
    /// guest with a clock of its own, where the host timed it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<&'static str>,
    pub rows: Vec<InstanceRow>,
}

#[derive(Debug, Serialize)]
pub struct InstanceRow {
    pub instances: u32,
    pub environment: String,
    /// Each instance's mean over the repetitions.
    pub per_instance: Vec<f64>,
    /// The aggregate (sum of throughputs, mean of times) and its 95 % CI.
    pub aggregate: f64,
    pub aggregate_ci95: Option<[f64; 2]>,
    /// The aggregate over the same with one instance, with Fieller's CI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_one: Option<Overhead>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_min_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_max_pct: Option<f64>,
    /// How far apart the instances started, mean over trials, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_skew_ms: Option<f64>,
}

/// The softloader's target against what it reached, per environment and workload.
#[derive(Debug, Serialize)]
pub struct LoadReached {
    pub environment: String,
    pub workload: String,
    pub target_percent: f64,
    pub achieved_mean: f64,
    /// Within [`LOAD_TOLERANCE`] points of the target.
    pub reached: bool,
}

/// How far below its target a background load may land and still count as reached (points).
pub const LOAD_TOLERANCE: f64 = 3.0;

#[derive(Debug, Serialize, Default)]
pub struct Counts {
    pub ok: usize,
    pub failed: usize,
    pub skipped: usize,
    pub pending: usize,
    pub warmup: usize,
}

/// Earlier attempts of trials run again (at once on a fresh instance after one died under them,
/// or by `--retry-failed`), by how they ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Retried {
    pub status: String,
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct Failure {
    pub environment: String,
    pub workload: String,
    pub count: usize,
    pub reason: String,
}

/// Timed trials of a workload with a planned `duration` that took far longer than planned (more
/// than twice it and a second): a stall of the environment (gVisor's `tcp_stream`: a 0.5 s flow
/// took 15.6 s), which the ratio's interval carries without saying why.
#[derive(Debug, Clone, Serialize)]
pub struct Stall {
    pub environment: String,
    pub workload: String,
    pub trials: usize,
    /// Timed trials of the cell.
    pub of: usize,
    pub planned_ms: f64,
    pub longest_ms: f64,
}

/// A trial that took more than this many times its planned duration, and a second more, stalled.
const STALL_FACTOR: f64 = 2.0;

/// How long a trial of `c` was planned to take, ms: as its run recorded it, else (a run recorded
/// before the record said) its `duration`.
fn planned_ms(c: &virtperf_record::store::CaseRow) -> Option<f64> {
    c.record
        .planned_ms
        .or_else(|| c.params.get("duration").and_then(serde_json::Value::as_f64))
        .filter(|d| *d > 0.0)
}

/// Whether a timed trial stalled: it took more than [`STALL_FACTOR`] times its case's planned
/// `duration` and a second more.
fn trial_stalled(rows: &RunRows, t: &TrialRow) -> bool {
    let planned = rows.cases.iter().find(|c| c.idx == t.case_idx).and_then(planned_ms);
    match (planned, t.host_ns) {
        (Some(p), Some(h)) => h as f64 / 1e6 > STALL_FACTOR * p + 1000.0,
        _ => false,
    }
}

/// The slots of the trials that stalled, by (case, environment): set apart from their ratios.
fn stalled_slots(rows: &RunRows) -> std::collections::BTreeSet<(usize, usize, paired::Slot)> {
    rows.trials
        .iter()
        .filter(|t| {
            t.status == TrialStatus::Ok && !t.warmup && t.peer_idx.is_none() && trial_stalled(rows, t)
        })
        .map(|t| (t.case_idx, t.env_idx, (t.block, t.rep)))
        .collect()
}

fn stalls(rows: &RunRows) -> Vec<Stall> {
    // (environment, case) → (stalled, timed, planned ms, longest ms)
    let mut by: BTreeMap<(usize, usize), (usize, usize, f64, f64)> = BTreeMap::new();
    for t in rows.trials.iter().filter(|t| t.status == TrialStatus::Ok && !t.warmup) {
        let Some(planned) = rows.cases.iter().find(|c| c.idx == t.case_idx).and_then(planned_ms) else {
            continue;
        };
        let Some(ms) = t.host_ns.map(|h| h as f64 / 1e6) else { continue };
        let e = by.entry((t.env_idx, t.case_idx)).or_insert((0, 0, planned, 0.0));
        e.1 += 1;
        if ms > STALL_FACTOR * planned + 1000.0 {
            e.0 += 1;
            e.3 = e.3.max(ms);
        }
    }
    let name = |i: usize| rows.envs.iter().find(|e| e.idx == i).map(|e| e.name.clone()).unwrap_or_default();
    let label =
        |i: usize| rows.cases.iter().find(|c| c.idx == i).map(|c| c.label.clone()).unwrap_or_default();
    by.into_iter()
        .filter(|(_, v)| v.0 > 0)
        .map(|((e, c), (n, of, planned, longest))| Stall {
            environment: name(e),
            workload: label(c),
            trials: n,
            of,
            planned_ms: planned,
            longest_ms: longest,
        })
        .collect()
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub run_id: i64,
    pub name: String,
    pub status: RunStatus,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// The baseline (this machine's, or the first host's in a campaign).
    pub baseline: Option<String>,
    /// Every machine's baseline: each environment's ratios are to its own machine's.
    pub baselines: Vec<String>,
    /// The run has no native environment: its ratios are to this one (the first), said so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub natural_baseline: Option<String>,
    /// A campaign across hosts: each workload's figures side by side by host.
    pub by_host: Vec<hosts::HostTable>,
    pub overhead_method: &'static str,
    /// The estimate its ratios state (`paired` where the trials ran in case groups).
    pub estimate: paired::Estimate,
    /// Moments the whole host slowed down (clearly slow trials of several environments at once).
    pub disturbances: Vec<disturbances::Disturbance>,
    pub results: Vec<ResultRow>,
    pub environments: Vec<EnvSummary>,
    pub clock_checks: Vec<ClockCheck>,
    /// Each environment's agent clock rate over its launches.
    pub clock_rates: Vec<ClockRate>,
    pub trials: Counts,
    pub failures: Vec<Failure>,
    /// Timed trials that took far longer than their planned duration.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<Stall>,
    /// Trials run again (an instance died under them; `--resume RUN --retry-failed`): how their
    /// earlier attempts ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retried: Vec<Retried>,
    /// Metrics with samples that were not finite, left out: (environment, workload, metric, count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub non_finite: Vec<(String, String, String, usize)>,
    /// The analytic ceilings of the lab's emulated link (empty when unshaped).
    pub ceilings: Vec<Ceiling>,
    /// RFC 2544 procedures, one row per measured trial.
    pub rfc2544: Vec<rfc2544::Row>,
    /// Background loads: the target and what was reached over the workloads' windows.
    pub loads: Vec<LoadReached>,
    /// Environments run as several instances at once (seed 000's table): per instance count, each
    /// instance's figure, the aggregate, its ratio to one instance, Jain's index.
    pub instances: Vec<InstanceTable>,
    /// Memory per added instance, per group swept over `instances` (from the launches' PSS).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub density: Vec<lifecycle::Density>,
    /// Environments whose instances started together: makespan, spread, host CPU per instance.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub together: Vec<together::Together>,
    /// The kernel each environment's agent said it runs on (a guest's own): its release and
    /// what it says of the CPU's vulnerabilities.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<kernels::EnvKernel>,
    /// Disk workloads swept over file and record sizes (seed 001's matrices): per phase metric,
    /// each environment's file size × record size cells with their ratio to native.
    pub disk: Vec<disk::DiskMatrix>,
    /// `timer` workloads: each environment's lateness histogram over its trials.
    pub timers: Vec<timer::TimerHistogram>,
    /// Precision mode: the target, and each watched ratio's interval against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<PrecisionReport>,
    /// `explain = true`: every overhead against the model of counted events × their measured
    /// costs (docs/explain.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<explain::Explain>,
    /// Each knob's variant against its default (`knobs = [...]`, docs/knobs.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub knob_costs: Vec<knobs::KnobCost>,
    pub manifest: serde_json::Value,
}

/// How a precision-mode run ended against its target.
#[derive(Debug, Serialize)]
pub struct PrecisionReport {
    /// Target half-width of each ratio's interval, % of the ratio.
    pub target_percent: f64,
    /// The level its intervals are stated at: 95 % for a paired run (Stein's two-stage), 99 % for
    /// an unpaired one (what keeps 95 % coverage under its stopping rule).
    pub level: f64,
    /// How further launches were decided: `two-stage` (paired: each ratio's blocks sized once
    /// from the plan's minimum, the pilot) or `stop when met` (unpaired).
    pub rule: &'static str,
    pub budget_ms: u64,
    pub met: usize,
    pub cells: Vec<PrecisionCell>,
}

/// One ratio precision mode watched.
#[derive(Debug, Serialize)]
pub struct PrecisionCell {
    pub environment: String,
    pub workload: String,
    pub metric: String,
    /// Half-width of the ratio's interval, % of the ratio (None: no interval).
    pub half_width_percent: Option<f64>,
    pub met: bool,
    pub launches: usize,
    pub n: usize,
    /// Short of its target: how many more launch blocks its pilot's spread says it needs, and
    /// about how long they would take (its launches, its baseline's, their trials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs: Option<Needs>,
    /// A side (the environment, or its baseline) whose launches' first trial differs clearly from
    /// their later ones: its launch means mix trials after other workloads with trials back to
    /// back (`virtperf_stats::sequential::first_vs_rest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_trial_differs: Option<FirstTrialDiffers>,
}

/// What a ratio short of its target would need.
#[derive(Debug, Clone, Serialize)]
pub struct Needs {
    pub more_blocks: usize,
    pub seconds: f64,
}

/// Where a launch's first trial of a case is unlike its later ones.
#[derive(Debug, Serialize)]
pub struct FirstTrialDiffers {
    /// The side it was seen on (an environment's name).
    pub environment: String,
    #[serde(flatten)]
    pub effect: virtperf_stats::sequential::FirstVsRest,
}

/// Values grouped by the launch that measured them (`launches[i]` is `values[i]`'s; missing ids
/// count as one launch), each group in the order the values came — the trials' order.
fn launch_groups(values: &[f64], launches: &[Option<i64>]) -> Vec<Vec<f64>> {
    let mut ids: Vec<Option<i64>> = Vec::new();
    let mut groups: Vec<Vec<f64>> = Vec::new();
    for (x, l) in values.iter().zip(launches.iter().chain(std::iter::repeat(&None))) {
        match ids.iter().position(|i| i == l) {
            Some(g) => groups[g].push(*x),
            None => {
                ids.push(*l);
                groups.push(vec![*x]);
            }
        }
    }
    groups
}

/// Precision mode's cells, read from the rows: each environment's headline metrics' ratios.
fn precision_report(
    manifest: &serde_json::Value,
    results: &[ResultRow],
    rows: &RunRows,
    tally: &Tally,
    baseline_of: &[Option<usize>],
    how: &Stating,
) -> Option<PrecisionReport> {
    let cases = &rows.cases;
    let p = &manifest["precision"];
    let target = p["percent"].as_f64()?;
    let paired_rule = how.design.paired_order;
    // What a launch of an environment costs (its start), and a trial of a case there (s).
    let start_s = |e: usize| {
        let s: Vec<f64> = rows.starts.iter().filter(|x| x.0 == e).map(|x| x.1 / 1e3).collect();
        if s.is_empty() {
            0.0
        } else {
            s.iter().sum::<f64>() / s.len() as f64
        }
    };
    let trial_s = |e: usize, c: usize| {
        let t: Vec<f64> = rows
            .trials
            .iter()
            .filter(|t| t.env_idx == e && t.case_idx == c && t.peer_idx.is_none() && !t.warmup)
            .filter_map(|t| t.host_ns)
            .map(|n| n as f64 / 1e9)
            .collect();
        if t.is_empty() {
            0.0
        } else {
            t.iter().sum::<f64>() / t.len() as f64
        }
    };
    let warmup = manifest["warmup"].as_u64().unwrap_or(1) as f64;
    let mut cells = Vec::new();
    for x in results.iter().filter(|x| x.peer.is_none() && x.instance.is_none()) {
        let Some(o) = &x.overhead else { continue };
        let Some(case) = cases.iter().find(|c| c.label == x.workload) else { continue };
        let r = &case.record;
        if r.procedure || !r.metrics.iter().take(r.headlines).any(|m| m.name == x.metric) {
            continue;
        }
        let hw = o.relative_half_width().map(|h| h * 100.0);
        let c = cases.iter().position(|k| k.label == x.workload);
        let e = rows.envs.iter().position(|v| v.name == x.environment);
        let base = e.and_then(|e| baseline_of.get(e).copied().flatten());
        let sides = e.into_iter().chain(base);
        let first_trial_differs = c.and_then(|c| {
            sides.into_iter().find_map(|side| {
                let key = (c, x.metric.clone(), (side, None));
                let values = tally.values.get(&key)?;
                let launches = tally.launch_of.get(&key).map_or(&[][..], Vec::as_slice);
                virtperf_stats::sequential::first_vs_rest(&launch_groups(values, launches))
                    .map(|effect| FirstTrialDiffers { environment: rows.envs[side].name.clone(), effect })
            })
        });
        let met = hw.is_some_and(|h| h <= target);
        // Short of the target: what its pilot's spread says it needs (Stein's second stage).
        let needs = match (met, paired_rule, e, base, c, o.blocks) {
            (false, true, Some(e), Some(b), Some(c), Some(blocks)) => {
                let metric = if x.clock == Some("host") {
                    format!("{}{}", x.metric, virtperf_record::HOST_SUFFIX)
                } else {
                    x.metric.clone()
                };
                let pairs = tally.pairs(c, &metric, e, b);
                // From the spread its interval rests on now (the pilot's or the run's, the larger).
                paired::stated(&pairs, how.design.pilot(e, c, &metric))
                    .filter(|r| r.blocks >= 2)
                    .map(|r| (r.sd_log, r.df))
                    .map(|(sd, df)| {
                        let needed = virtperf_stats::paired::units_needed_stein(
                            sd,
                            df,
                            target / 100.0,
                            0.95,
                            virtperf_stats::sequential::MIN_UNITS as usize,
                            virtperf_stats::sequential::MAX_BLOCKS,
                        );
                        let more = needed.saturating_sub(blocks).max(1);
                        let per_block =
                            start_s(e) + start_s(b) + (warmup + 1.0) * (trial_s(e, c) + trial_s(b, c));
                        Needs { more_blocks: more, seconds: more as f64 * per_block }
                    })
            }
            _ => None,
        };
        cells.push(PrecisionCell {
            environment: x.environment.clone(),
            workload: x.workload.clone(),
            metric: x.metric.clone(),
            half_width_percent: hw,
            met,
            launches: x.launches,
            n: x.n,
            needs,
            first_trial_differs,
        });
    }
    Some(PrecisionReport {
        target_percent: target,
        level: if paired_rule { 0.95 } else { virtperf_stats::sequential::LEVEL },
        rule: if paired_rule { "two-stage" } else { "stop when met" },
        budget_ms: p["budget_ms"].as_u64().unwrap_or_default(),
        met: cells.iter().filter(|c| c.met).count(),
        cells,
    })
}

/// Which way `metric` of `case` is better: the report's own figures (host CPU time) lower,
/// descriptions of N instances together never compared, the rest as the run recorded them (the
/// case's own metrics for its parameters, else as the run's build declared them).
fn better_of(case: &virtperf_record::store::CaseRow, metrics: &Metrics, metric: &str) -> Better {
    if DERIVED.contains(&metric) {
        return Better::Lower;
    }
    // Descriptions of N instances together (fairness, shares, skew): reported, never a ratio.
    if metric == virtperf_record::store::START_SKEW
        || ["_jain", "_share_min", "_share_max"].iter().any(|s| metric.ends_with(s))
    {
        return Better::Neither;
    }
    case.record.metric(metric).or_else(|| metrics.find(metric)).map_or(Better::Lower, |m| m.better)
}

/// Metrics of one trial, including the derived host CPU time.
fn trial_values(t: &TrialRow) -> Vec<(String, String, f64)> {
    let mut v: Vec<(String, String, f64)> =
        t.samples.iter().map(|s| (s.metric.clone(), s.unit.clone(), s.value)).collect();
    if let Some(ns) = t.host_cpu_ns {
        v.push((HOST_CPU.to_string(), "ms".to_string(), ns as f64 / 1e6));
    }
    // Network trials (the tester took part).
    if let Some(ns) = t.tester_cpu_ns {
        v.push((TESTER_CPU.to_string(), "ms".to_string(), ns as f64 / 1e6));
        if let Some(g) = t.guest_cpu_ns {
            v.push((GUEST_CPU.to_string(), "ms".to_string(), g as f64 / 1e6));
        }
        // cpu_per_gbit is a sample of the trial itself (trial.rs: CPU and bytes over the transfer
        // window); runs stored before that derived it from the whole trial's CPU over goodput ×
        // the host span, mixing windows, and are not recomputed.
    }
    v
}

/// What an ideal transport could reach over the lab's emulated link.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    pub workload: String,
    pub metric: String,
    pub unit: String,
    pub value: f64,
    pub basis: String,
}

fn ceilings(manifest: &serde_json::Value, cases: &[virtperf_record::store::CaseRow]) -> Vec<Ceiling> {
    let lab = &manifest["lab"];
    let Some(rate) = lab["rate_bps"].as_u64() else { return Vec::new() };
    let mtu = lab["mtu"].as_u64().unwrap_or(1500) as u32;
    let basis =
        format!("{} Mbit/s on the wire (preamble, FCS, gap counted), MTU {mtu}", fmt_num(rate as f64 / 1e6));
    let mut out = Vec::new();
    for c in cases {
        let Some((metric, bound)) = c.record.link_bound.clone() else { continue };
        let (value, unit, basis) = match bound {
            LinkBound::TcpGoodput => match bound.ceiling(rate, mtu) {
                Some(gbps) => {
                    (gbps, "Gbit/s", format!("{basis}, MSS {} with TCP timestamps", mtu.saturating_sub(52)))
                }
                None => continue,
            },
            LinkBound::UdpDatagrams { payload } => match bound.ceiling(rate, mtu) {
                Some(kpps) => (kpps, "kpps", format!("{basis}, {payload}-byte payloads")),
                None => continue,
            },
        };
        out.push(Ceiling { workload: c.label.clone(), metric, unit: unit.into(), value, basis });
    }
    out
}

impl Report {
    /// What explain reads of it.
    pub fn basis(&self) -> explain::Basis<'_> {
        explain::Basis {
            results: &self.results,
            baseline: self.baseline.as_deref(),
            manifest: &self.manifest,
        }
    }
    /// Whether the environment is a baseline (of its machine).
    pub fn is_baseline(&self, env: &str) -> bool {
        self.baselines.iter().any(|b| b == env)
    }
}

/// The report of a run, from its rows read once ([`Store::load`]), with the estimate its design
/// calls for (paired where the trials ran in case groups).
pub fn build(rows: &RunRows) -> Result<Report> {
    build_with(rows, None)
}

/// [`build`] stating `estimate` (None: the run's design's).
pub fn build_with(rows: &RunRows, estimate: Option<paired::Estimate>) -> Result<Report> {
    let RunRows { run_id, info, envs, cases, trials, .. } = rows;
    let bases = Baselines::of(envs);
    let design = paired::Design::of(&info.experiment, &info.manifest);
    let estimate = estimate.unwrap_or(design.default_estimate());
    // An unpaired precision run states its intervals at the level that keeps 95 % coverage under
    // its stopping rule (99 %); a paired one sizes its blocks once (Stein) and states 95 %.
    let level = if info.manifest["precision"].is_object() && !design.paired_order {
        virtperf_stats::sequential::LEVEL
    } else {
        0.95
    };
    // How late the host woke after an idle spell, measured at the run's start (older runs: 0).
    let wake_ns = info.manifest["host_wake"]["max_us"].as_f64().unwrap_or(0.0) * 1e3;
    let mut tally = Tally::of(trials, wake_ns);
    tally.stalled = stalled_slots(rows);
    let mut disturbances = disturbances::find(rows);
    disturbances::count_pairs(&mut disturbances, &bases.of);
    tally.touched = disturbances.iter().flat_map(|d| d.trials.iter().map(|t| t.key)).collect();
    let (clock_checks, disagrees) = clock_checks(&tally, envs, cases);
    let how = Stating { level, estimate, design };
    let mut results = result_rows(rows, &tally, &bases, &disagrees, &how);
    let knob_costs = knobs::costs(rows, &tally, &results, &how);
    // Each instance's rows, after the environments' own.
    for ((c, m, e, k), v) in &tally.inst_values {
        let Some(s) = Summary::of(v) else { continue };
        let unit = trials
            .iter()
            .flat_map(|t| t.instance_samples.iter())
            .find(|(_, x)| x.metric == *m)
            .map(|(_, x)| x.unit.clone())
            .unwrap_or_default();
        results.push(ResultRow {
            instance: Some(*k),
            ..ResultRow::of(&s, &envs[*e].name, &cases[*c], &rows.metrics, m, &unit)
        });
    }
    let failures = tally
        .fails
        .iter()
        .map(|((e, c, reason), count)| Failure {
            environment: envs[*e].name.clone(),
            workload: cases[*c].label.clone(),
            count: *count,
            reason: reason.clone(),
        })
        .collect();
    let env_names: Vec<String> = envs.iter().map(|e| e.name.clone()).collect();
    let mut report = Report {
        loads: load_rows(rows, &results),
        disk: disk::build(&results, cases, &env_names),
        instances: instance_tables(envs, cases, &tally.values, &tally.inst_values),
        density: lifecycle::densities(
            &envs.iter().map(|e| (e.idx, e.instances, e.group.as_str())).collect::<Vec<_>>(),
            &rows.lifecycles,
        ),
        together: together::build(
            &envs.iter().map(|e| (e.idx, e.name.as_str(), e.group.as_str(), e.instances)).collect::<Vec<_>>(),
            &rows.lifecycles,
            &rows.together,
        ),
        kernels: kernels::build(
            &envs.iter().map(|e| (e.idx, e.name.as_str())).collect::<Vec<_>>(),
            &rows.kernel_views,
        ),
        run_id: *run_id,
        name: info.name.clone(),
        status: info.status,
        started_at: info.started_at.clone(),
        finished_at: info.finished_at.clone(),
        baseline: bases.first.map(|b| envs[b].name.clone()),
        by_host: hosts::build(&results, envs),
        baselines: bases.names,
        natural_baseline: bases.natural,
        overhead_method: estimate.method(),
        estimate,
        disturbances,
        precision: precision_report(&info.manifest, &results, rows, &tally, &bases.of, &how),
        results,
        environments: env_summaries(rows, &bases.of),
        clock_checks,
        clock_rates: clock_rates(rows),
        trials: tally.counts,
        failures,
        stalls: stalls(rows),
        retried: rows
            .retried
            .iter()
            .map(|(status, reason, count)| Retried {
                status: status.clone(),
                reason: reason.clone(),
                count: *count,
            })
            .collect(),
        non_finite: tally
            .non_finite
            .iter()
            .map(|((c, m, e), n)| (envs[*e].name.clone(), cases[*c].label.clone(), m.clone(), *n))
            .collect(),
        ceilings: ceilings(&info.manifest, cases),
        timers: timer::build(rows),
        rfc2544: rfc2544_rows(rows, &info.manifest),
        explain: None,
        knob_costs,
        manifest: info.manifest.clone(),
    };
    report.explain = explain::build(rows, &report.basis());
    let t = answer::target(&report);
    for k in report.knob_costs.iter_mut() {
        k.verdict =
            k.overhead.as_ref().and_then(|o| answer::overhead_verdict(o, k.better, k.launches, t)).map(|v| {
                RowVerdict {
                    set_apart: o_set_apart(k.overhead.as_ref()),
                    ..answer::json_verdict(&v, answer::Reading::of(k.better))
                }
            });
    }
    for x in report.results.iter_mut() {
        x.verdict = answer::row_verdict(x, t).map(|v| RowVerdict {
            set_apart: x.overhead.as_ref().and_then(|o| o.set_apart.as_ref()).map(answer::set_apart_words),
            ..answer::json_verdict(&v, answer::Reading::of(x.better))
        });
    }
    Ok(report)
}

/// What a ratio set apart, in words, where it set any apart.
fn o_set_apart(o: Option<&Overhead>) -> Option<String> {
    o.and_then(|o| o.set_apart.as_ref()).map(answer::set_apart_words)
}

/// Each environment's agent clock rate over its launches, from the launches' stored rates.
fn clock_rates(rows: &RunRows) -> Vec<ClockRate> {
    rows.envs
        .iter()
        .filter_map(|e| {
            let of: Vec<&(usize, f64, f64, f64)> = rows.clock_rates.iter().filter(|r| r.0 == e.idx).collect();
            if of.is_empty() {
                return None;
            }
            let col = |f: fn(&(usize, f64, f64, f64)) -> f64| of.iter().map(|r| f(r)).collect::<Vec<f64>>();
            let ppm = col(|r| r.2);
            Some(ClockRate {
                environment: e.name.clone(),
                launches: of.len(),
                median_ppm: virtperf_stats::median(&ppm),
                worst_ppm: ppm.iter().copied().fold(0.0, |w, p| if p.abs() > w.abs() { p } else { w }),
                uncertainty_ppm: virtperf_stats::median(&col(|r| r.3)),
                span_s: virtperf_stats::median(&col(|r| r.1)),
            })
        })
        .collect()
}

/// Which environment each is compared with. Each environment is compared with the baseline of
/// its own machine (a campaign has one per host): a ratio across two machines would measure the
/// machines, not the layer. Without a native environment, the natural baseline: N = 1 of the same
/// instance group (each count against one instance, as seed 000's table reads), and for the first
/// of each group the machine's first environment; named as such in the notes.
struct Baselines {
    /// Each environment's baseline (itself where it is one).
    of: Vec<Option<usize>>,
    /// The natural baseline's name, where no environment is a baseline by kind.
    natural: Option<String>,
    /// Every environment that is its own baseline.
    names: Vec<String>,
    /// The run's first baseline.
    first: Option<usize>,
}

impl Baselines {
    fn of(envs: &[virtperf_record::store::EnvRow]) -> Baselines {
        let is_base = |e: &virtperf_record::store::EnvRow| e.baseline;
        let of: Vec<Option<usize>> = envs
            .iter()
            .map(|e| {
                envs.iter()
                    .find(|b| b.host == e.host && is_base(b))
                    .or_else(|| {
                        envs.iter().find(|b| {
                            b.host == e.host && b.group == e.group && b.idx != e.idx && b.idx < e.idx
                        })
                    })
                    .or_else(|| envs.iter().find(|b| b.host == e.host))
                    .map(|b| b.idx)
            })
            .collect();
        let natural = of
            .iter()
            .flatten()
            .next()
            .filter(|b| !is_base(&envs[**b]) && envs.len() > 1)
            .map(|b| envs[*b].name.clone());
        let names = envs.iter().filter(|e| of[e.idx] == Some(e.idx)).map(|e| e.name.clone()).collect();
        let first = of.iter().flatten().next().copied();
        Baselines { of, natural, names, first }
    }
}

/// (case, env) → per armed trial (host ns, guest ns, tolerance ns).
type Spans = Vec<(f64, f64, f64)>;

/// What one pass over a run's trials counts and collects.
#[derive(Default)]
struct Tally {
    counts: Counts,
    /// Each case's metrics with their units, in the order first seen.
    metrics: BTreeMap<usize, Vec<(String, String)>>,
    values: Values,
    /// The launch of each of those values, in the same order.
    launch_of: LaunchIds,
    /// The block and repetition of each of those values, in the same order (what pairs them).
    slots: Slots,
    clocks: BTreeMap<(usize, usize), Spans>,
    /// (case, environment) → the most instances whose clocks one trial checked.
    clock_instances: BTreeMap<(usize, usize), usize>,
    /// (environment, case, reason) → trials that failed or were skipped so.
    fails: BTreeMap<(usize, usize, String), usize>,
    inst_values: InstValues,
    /// (case, metric, environment) → samples that were not finite.
    non_finite: BTreeMap<(usize, String, usize), usize>,
    /// The trials that stalled (case, environment, slot): their pairs are set apart.
    stalled: std::collections::BTreeSet<(usize, usize, paired::Slot)>,
    /// The trials a host-wide slowdown touched (case, environment, slot): a pair with one side
    /// among them and not the other is a one-sided burst, set apart.
    touched: std::collections::BTreeSet<(usize, usize, paired::Slot)>,
}

/// Why a pair is set apart from its ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Apart {
    Kept,
    /// A trial of it took far beyond its planned time.
    Stalled,
    /// A host-wide slowdown touched one side of it alone.
    Burst,
}

impl Tally {
    fn of(trials: &[TrialRow], wake_ns: f64) -> Tally {
        let mut y = Tally::default();
        for t in trials {
            match t.status {
                TrialStatus::Ok if t.warmup => y.counts.warmup += 1,
                TrialStatus::Ok => y.counts.ok += 1,
                TrialStatus::Failed => y.counts.failed += 1,
                TrialStatus::Skipped => y.counts.skipped += 1,
                TrialStatus::Pending => y.counts.pending += 1,
            }
            if t.status != TrialStatus::Ok && t.status != TrialStatus::Pending {
                *y.fails.entry((t.env_idx, t.case_idx, t.reason.clone().unwrap_or_default())).or_default() +=
                    1;
            }
            if t.status != TrialStatus::Ok || t.warmup {
                continue;
            }
            for (k, smp) in &t.instance_samples {
                y.inst_values
                    .entry((t.case_idx, smp.metric.clone(), t.env_idx, *k))
                    .or_default()
                    .push(smp.value);
            }
            for (m, unit, x) in trial_values(t) {
                let ms = y.metrics.entry(t.case_idx).or_default();
                if !ms.iter().any(|(n, _)| *n == m) {
                    ms.push((m.clone(), unit));
                }
                // A NaN or an infinity would take the whole metric's statistics with it: left out,
                // counted, and said (the row's `non_finite`, and a note).
                if !x.is_finite() {
                    *y.non_finite.entry((t.case_idx, m.clone(), t.env_idx)).or_default() += 1;
                    continue;
                }
                y.launch_of
                    .entry((t.case_idx, m.clone(), (t.env_idx, t.peer_idx)))
                    .or_default()
                    .push(t.launch_id);
                y.slots
                    .entry((t.case_idx, m.clone(), (t.env_idx, t.peer_idx)))
                    .or_default()
                    .push((t.block, t.rep));
                y.values.entry((t.case_idx, m, (t.env_idx, t.peer_idx))).or_default().push(x);
            }
            // Only armed trials: their host span covers exactly the guest's timed region. Several
            // instances: one point per instance, each on its own calibration.
            let own = match (t.host_ns, t.guest_ns, t.rtt_ns, t.rtt_jitter_ns) {
                (Some(h), Some(g), Some(rtt), Some(jit)) => Some([h, g, rtt, jit]),
                _ => None,
            };
            for [h, g, rtt, jit] in own.into_iter().chain(t.clock_instances.iter().copied()) {
                let tol = clock_tolerance_ns(rtt as f64, jit as f64, wake_ns, g as f64);
                y.clocks.entry((t.case_idx, t.env_idx)).or_default().push((h as f64, g as f64, tol));
            }
            if !t.clock_instances.is_empty() {
                let n = y.clock_instances.entry((t.case_idx, t.env_idx)).or_insert(1);
                *n = (*n).max(t.clock_instances.len());
            }
        }
        y
    }
}

/// How a report states its ratios: the estimate, the run's design, the level of unpaired intervals.
pub struct Stating {
    pub level: f64,
    pub estimate: paired::Estimate,
    pub design: paired::Design,
}

impl Tally {
    /// The values of `metric` in `case` of one column (an environment, or an environment with a
    /// peer), summarised with their launches.
    fn side(&self, case: usize, metric: &str, col: (usize, Option<usize>)) -> Option<Side> {
        let key = (case, metric.to_string(), col);
        self.values
            .get(&key)
            .and_then(|v| Side::of(v, self.launch_of.get(&key).map_or(&[], |l| l.as_slice())))
    }

    /// The pairs of environment `e`'s values of `metric` in `case` with its baseline `b`'s.
    /// Pairs with a stalled trial, or one a host-wide slowdown touched on one side alone, are left
    /// out: see [`Tally::pairs_apart`].
    fn pairs(&self, case: usize, metric: &str, e: usize, b: usize) -> Vec<virtperf_stats::paired::Pair> {
        self.pairs_apart(case, metric, e, b)
            .into_iter()
            .filter(|(_, a)| *a == Apart::Kept)
            .map(|(p, _)| p)
            .collect()
    }

    /// Every pair, each with whether and why it is set apart.
    fn pairs_apart(
        &self,
        case: usize,
        metric: &str,
        e: usize,
        b: usize,
    ) -> Vec<(virtperf_stats::paired::Pair, Apart)> {
        let side = |x: usize| -> Vec<(paired::Slot, f64)> {
            let key = (case, metric.to_string(), (x, None));
            match (self.slots.get(&key), self.values.get(&key)) {
                (Some(k), Some(v)) => k.iter().copied().zip(v.iter().copied()).collect(),
                _ => Vec::new(),
            }
        };
        let (env, base) = (side(e), side(b));
        env.iter()
            .filter_map(|(k, x)| {
                base.iter().find(|(s, _)| s == k).map(|(_, y)| {
                    let stalled =
                        self.stalled.contains(&(case, e, *k)) || self.stalled.contains(&(case, b, *k));
                    let one_sided =
                        self.touched.contains(&(case, e, *k)) != self.touched.contains(&(case, b, *k));
                    let why = if stalled {
                        Apart::Stalled
                    } else if one_sided {
                        Apart::Burst
                    } else {
                        Apart::Kept
                    };
                    (virtperf_stats::paired::Pair { block: i64::from(k.0), env: *x, base: *y }, why)
                })
            })
            .collect()
    }
}

/// Whether an environment's kind keeps time of its own (a guest kernel).
fn own_clock(envs: &[virtperf_record::store::EnvRow], e: usize) -> bool {
    envs[e].own_clock
}

/// The clock check of each (case, environment) with armed trials, and the cells where most of
/// them disagree.
fn clock_checks(
    tally: &Tally,
    envs: &[virtperf_record::store::EnvRow],
    cases: &[virtperf_record::store::CaseRow],
) -> (Vec<ClockCheck>, std::collections::BTreeSet<(usize, usize)>) {
    let mut checks = Vec::new();
    let mut disagrees: std::collections::BTreeSet<(usize, usize)> = Default::default();
    for ((c, e), ts) in &tally.clocks {
        let n = ts.len() as f64;
        let (hm, gm) =
            (ts.iter().map(|x| x.0).sum::<f64>() / n / 1e6, ts.iter().map(|x| x.1).sum::<f64>() / n / 1e6);
        let agreeing = ts.iter().filter(|(h, g, tol)| (h - g).abs() <= *tol).count();
        let offsets: Vec<f64> = ts.iter().map(|(h, g, _)| (h - g) / 1e6).collect();
        let rel: Vec<f64> = ts.iter().map(|(h, g, _)| (h - g) / g.max(1.0) * 100.0).collect();
        let tols: Vec<f64> = ts.iter().map(|x| x.2 / 1e6).collect();
        // Disagreeing means most trials disagree: one noisy trial in two is not a finding.
        let agree = agreeing * 2 >= ts.len();
        if !agree {
            disagrees.insert((*c, *e));
        }
        checks.push(ClockCheck {
            environment: envs[*e].name.clone(),
            workload: cases[*c].label.clone(),
            headline: if own_clock(envs, *e) { "host" } else { "guest" },
            host_ms_mean: hm,
            guest_ms_mean: gm,
            ratio: if gm > 0.0 { hm / gm } else { f64::NAN },
            trials: ts.len(),
            agreeing,
            median_offset_ms: virtperf_stats::median(&offsets),
            median_offset_pct: virtperf_stats::median(&rel),
            tolerance_ms: virtperf_stats::median(&tols),
            agree,
            instances: tally.clock_instances.get(&(*c, *e)).copied().unwrap_or(1),
        });
    }
    (checks, disagrees)
}

/// Every (case, metric, environment or ordered pair) row with its overhead against its baseline.
fn result_rows(
    rows: &RunRows,
    tally: &Tally,
    bases: &Baselines,
    disagrees: &std::collections::BTreeSet<(usize, usize)>,
    how: &Stating,
) -> Vec<ResultRow> {
    let (envs, cases) = (&rows.envs, &rows.cases);
    let level = how.level;
    let mut results = Vec::new();
    for case in cases {
        let Some(ms) = tally.metrics.get(&case.idx) else { continue };
        // Declared metrics first (in the workload's order), then derived ones.
        let mut ms = ms.clone();
        let order = |m: &str| case.record.position(m).unwrap_or(usize::MAX);
        ms.sort_by_key(|(m, _)| order(m));
        let host_suffix = virtperf_record::HOST_SUFFIX;
        for (m, unit) in ms.iter().filter(|(m, _)| !m.ends_with(host_suffix)) {
            // A metric also timed by the host (`METRIC_host`): each environment's figure is
            // headlined on its trustworthy clock, and its ratio compares like with like (the
            // baseline on the same clock).
            let hm = format!("{m}{host_suffix}");
            let dual = ms.iter().any(|(x, _)| *x == hm);
            let side = |metric: &str, col: (usize, Option<usize>)| tally.side(case.idx, metric, col);
            let summary = |metric: &str, col| side(metric, col).map(|s| s.all);
            let columns: Vec<(usize, Option<usize>)> = envs
                .iter()
                .flat_map(|a| {
                    std::iter::once((a.idx, None))
                        .chain(envs.iter().filter(|b| b.idx != a.idx).map(|b| (a.idx, Some(b.idx))))
                })
                .collect();
            for (ei, peer) in columns {
                let env = &envs[ei];
                let on_host =
                    dual && peer.is_none() && own_clock(envs, ei) && summary(&hm, (ei, None)).is_some();
                let (shown, other) =
                    if on_host { (hm.as_str(), m.as_str()) } else { (m.as_str(), hm.as_str()) };
                let Some(s) = side(shown, (ei, peer)) else { continue };
                let base_idx = bases.of[ei];
                let base = base_idx.and_then(|b| side(shown, (b, None)));
                let other_clock = dual.then(|| summary(other, (ei, peer))).flatten().map(|o| OtherClock {
                    clock: if on_host { "guest" } else { "host" },
                    mean: o.mean,
                    ci95: o.ci95.map(|(l, h)| [l, h]),
                    n: o.n,
                });
                // An all-pairs cell has no native counterpart to divide by, and a figure that is
                // not a performance (the load reached) is never compared.
                let comparable = better_of(case, &rows.metrics, m) != Better::Neither;
                let overhead = match (&base, Some(env.idx) != base_idx && peer.is_none() && comparable) {
                    (Some(b), true) => {
                        let paired = (how.estimate == paired::Estimate::Paired)
                            .then(|| {
                                let b = base_idx?;
                                paired_overhead(
                                    &tally.pairs_apart(case.idx, shown, ei, b),
                                    how.design.pilot(ei, case.idx, shown),
                                )
                            })
                            .flatten();
                        paired.or_else(|| side_ratio(&s, b, level))
                    }
                    _ => None,
                };
                let work = rows.calibrations.get(&(ei, case.idx)).filter(|_| peer.is_none()).map(|c| Work {
                    param: c.param.clone(),
                    count: c.count,
                    target_ms: c.target_ns as f64 / 1e6,
                    own: c.own,
                });
                results.push(ResultRow {
                    peer: peer.map(|p| envs[p].name.clone()),
                    overhead,
                    clock: dual.then_some(if on_host { "host" } else { "guest" }),
                    other_clock,
                    clock_disagrees: peer.is_none() && disagrees.contains(&(case.idx, ei)),
                    work,
                    verdict: None,
                    non_finite: if peer.is_none() {
                        tally.non_finite.get(&(case.idx, shown.to_string(), ei)).copied().unwrap_or(0)
                    } else {
                        0
                    },
                    ..s.row(&env.name, case, &rows.metrics, m, unit, level)
                });
            }
        }
    }
    results
}

/// Each environment's launches and start times, and its baseline where another.
fn env_summaries(rows: &RunRows, base_of: &[Option<usize>]) -> Vec<EnvSummary> {
    let envs = &rows.envs;
    envs.iter()
        .map(|e| {
            let s: Vec<f64> = rows.starts.iter().filter(|(i, _)| *i == e.idx).map(|(_, ms)| *ms).collect();
            let sum = Summary::of(&s);
            EnvSummary {
                name: e.name.clone(),
                kind: e.kind.clone(),
                own_clock: e.own_clock,
                params: e.params.clone(),
                launches: s.len(),
                start_ms_mean: sum.as_ref().map(|x| x.mean),
                start_ms: sum.map(|x| StartTimes {
                    n: x.n,
                    mean: x.mean,
                    ci95: x.ci95.map(|(l, h)| [l, h]),
                    no_ci: x.no_ci_reason(),
                    min: x.min,
                    max: x.max,
                }),
                baseline: base_of[e.idx].filter(|b| *b != e.idx).map(|b| envs[b].name.clone()),
                startup: lifecycle::startup(&rows.lifecycles, e.idx),
            }
        })
        .collect()
}

/// Background load: the target each loaded case asked for against what it reached.
fn load_rows(rows: &RunRows, results: &[ResultRow]) -> Vec<LoadReached> {
    let (envs, cases) = (&rows.envs, &rows.cases);
    let mut loads = Vec::new();
    for x in results.iter().filter(|x| x.metric == "load_achieved" && x.peer.is_none()) {
        let (Some(e), Some(c)) =
            (envs.iter().find(|e| e.name == x.environment), cases.iter().find(|c| c.label == x.workload))
        else {
            continue;
        };
        let target = rows
            .trials
            .iter()
            .filter(|t| t.status == TrialStatus::Ok && t.env_idx == e.idx && t.case_idx == c.idx)
            .find_map(|t| {
                // One loader's result, or one per instance.
                let r = &rows.detail(t.id)?["load"]["result"];
                r["target_percent"].as_f64().or_else(|| r[0]["target_percent"].as_f64())
            });
        if let Some(target) = target {
            loads.push(LoadReached {
                environment: x.environment.clone(),
                workload: x.workload.clone(),
                target_percent: target,
                achieved_mean: x.mean,
                reached: x.mean >= target - LOAD_TOLERANCE,
            });
        }
    }
    loads
}

/// One RFC 2544 row per measured trial, by environment, direction and frame size; each says its
/// environment's kind and whether the manifest recorded its CPU as emulated.
fn rfc2544_rows(rows: &RunRows, manifest: &serde_json::Value) -> Vec<rfc2544::Row> {
    let mut out: Vec<(usize, rfc2544::Row)> = rows
        .trials
        .iter()
        .filter(|t| {
            t.status == TrialStatus::Ok
                && !t.warmup
                && rows.cases[t.case_idx].record.in_section(rfc2544::SECTION)
        })
        .filter_map(|t| {
            let env = &rows.envs[t.env_idx];
            let mut row = rfc2544::Row::from_detail(&env.name, rows.detail(t.id)?)?;
            row.kind = env.kind.clone();
            row.emulated_cpu = manifest["runtimes"][&env.name].as_str().is_some_and(words::runtime_emulated);
            Some((t.env_idx, row))
        })
        .collect();
    out.sort_by(|a, b| (a.0, &a.1.direction, a.1.frame_size).cmp(&(b.0, &b.1.direction, b.1.frame_size)));
    out.into_iter().map(|r| r.1).collect()
}

/// (case, metric, (environment, peer)) → the launch of each of the trials' values.
type LaunchIds = BTreeMap<(usize, String, (usize, Option<usize>)), Vec<Option<i64>>>;
/// (case, metric, (environment, peer)) → the trials' values.
type Values = BTreeMap<(usize, String, (usize, Option<usize>)), Vec<f64>>;
/// (case, metric, (environment, peer)) → each value's block and repetition.
type Slots = BTreeMap<(usize, String, (usize, Option<usize>)), Vec<paired::Slot>>;
/// (case, metric, environment, instance) → each instance's values.
type InstValues = BTreeMap<(usize, String, usize, u32), Vec<f64>>;

/// Seed 000's tables: for every environment swept over `instances` (or run as several), each
/// workload's headline metric (its first declared one) row by instance count.
fn instance_tables(
    envs: &[virtperf_record::store::EnvRow],
    cases: &[virtperf_record::store::CaseRow],
    values: &Values,
    inst_values: &InstValues,
) -> Vec<InstanceTable> {
    let mut groups: Vec<&str> = Vec::new();
    for e in envs.iter().filter(|e| e.instances > 1) {
        if !groups.contains(&e.group.as_str()) {
            groups.push(&e.group);
        }
    }
    let mut out = Vec::new();
    for g in groups {
        let mut members: Vec<&virtperf_record::store::EnvRow> =
            envs.iter().filter(|e| e.group == g).collect();
        members.sort_by_key(|e| e.instances);
        for case in cases {
            let Some(headline) = case.record.headline() else { continue };
            // The main table's figure: on the host's clock for a guest with a clock of its own,
            // where the host timed it.
            let own_clock = members.iter().all(|e| e.own_clock);
            let host_twin = format!("{}{}", headline.name, virtperf_record::HOST_SUFFIX);
            let on_host = own_clock
                && members.iter().any(|e| values.contains_key(&(case.idx, host_twin.clone(), (e.idx, None))));
            let metric = if on_host { host_twin } else { headline.name.to_string() };
            let agg = |e: &virtperf_record::store::EnvRow, m: &str| {
                values.get(&(case.idx, m.to_string(), (e.idx, None))).and_then(|v| Summary::of(v))
            };
            let one = members.iter().find(|e| e.instances == 1).and_then(|e| agg(e, &metric));
            let mut rows = Vec::new();
            for e in &members {
                let Some(a) = agg(e, &metric) else { continue };
                let per_instance: Vec<f64> = (0..e.instances)
                    .filter_map(|k| {
                        inst_values
                            .get(&(case.idx, metric.clone(), e.idx, k))
                            .map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64)
                    })
                    .collect();
                let mean_of = |m: String| agg(e, &m).map(|s| s.mean);
                rows.push(InstanceRow {
                    instances: e.instances,
                    environment: e.name.clone(),
                    per_instance: if e.instances == 1 { vec![a.mean] } else { per_instance },
                    aggregate: a.mean,
                    aggregate_ci95: a.ci95.map(|(l, h)| [l, h]),
                    vs_one: one
                        .as_ref()
                        .filter(|_| e.instances > 1)
                        .and_then(|o| ratio_ci(&a, o))
                        .map(|r| Overhead::unpaired(r.ratio, r.ci95.map(|(l, h)| [l, h]), r.no_ci)),
                    // Fairness of the flows (the same on either clock: computed once, on the base figure).
                    jain: mean_of(format!("{}_jain", headline.name)),
                    share_min_pct: mean_of(format!("{}_share_min", headline.name)),
                    share_max_pct: mean_of(format!("{}_share_max", headline.name)),
                    start_skew_ms: mean_of(virtperf_record::store::START_SKEW.to_string()),
                });
            }
            if rows.iter().any(|r| r.instances > 1) {
                let dual = values.keys().any(|k| {
                    k.0 == case.idx && k.1 == format!("{}{}", headline.name, virtperf_record::HOST_SUFFIX)
                });
                out.push(InstanceTable {
                    group: g.to_string(),
                    workload: case.label.clone(),
                    metric: headline.name.to_string(),
                    unit: headline.unit.to_string(),
                    clock: dual.then_some(if on_host { "host" } else { "guest" }),
                    rows,
                });
            }
        }
    }
    out
}

/// A reference tool beside virtperf's own workload for the same quantity: (tool metric, own
/// metric). The report says how far they agree in each environment that ran both.
const CROSS_CHECKS: [(&str, &str); 2] = [("iperf3_goodput", "tcp_goodput"), ("fio_bw", "disk_write")];

/// "iperf3 against tcp_stream in container: 9.41 against 9.62 Gbit/s, ×0.978 [0.95, 1.01]".
pub fn tool_agreement(r: &Report) -> String {
    let mut out = String::new();
    for e in &r.environments {
        for (tool, own) in CROSS_CHECKS {
            let row = |m: &str| {
                r.results.iter().find(|x| {
                    x.environment == e.name && x.peer.is_none() && x.instance.is_none() && x.metric == m
                })
            };
            let (Some(t), Some(o)) = (row(tool), row(own)) else { continue };
            if o.mean == 0.0 {
                continue;
            }
            let ratio = t.mean / o.mean;
            let side = |x: &ResultRow| Summary {
                n: x.n,
                mean: x.mean,
                median: x.median,
                stdev: x.stdev,
                min: x.min,
                max: x.max,
                cv: x.cv.unwrap_or(f64::NAN),
                ci95: x.ci95.map(|[l, h]| (l, h)),
                outliers: Vec::new(),
            };
            let ci = ratio_ci(&side(t), &side(o)).and_then(|c| c.ci95).map(|(l, h)| [l, h]);
            out += &format!(
                "{} against {} in {}: {} against {} {}, ×{ratio:.3}{}\n",
                t.workload,
                o.workload,
                e.name,
                fmt_num(t.mean),
                fmt_num(o.mean),
                t.unit,
                ci.map(|[l, h]| format!(" [{l:.3}, {h:.3}]")).unwrap_or_default()
            );
        }
    }
    out
}

/// Seed 000's table in the terminal: a line per instance count.
fn render_instances(r: &Report) -> String {
    let mut out = String::new();
    for t in &r.instances {
        out += &format!(
            "\n{} · {} · {} ({}), instances sharing the host and the tester's link:\n",
            t.group,
            t.workload,
            t.metric,
            match t.clock {
                Some(c) => format!("{}, {c} clock", t.unit),
                None => t.unit.clone(),
            }
        );
        for row in &t.rows {
            let each: Vec<String> = row.per_instance.iter().map(|x| fmt_num(*x)).collect();
            let mut line = format!(
                "  N={:<2} {} = {}",
                row.instances,
                each.join(" + "),
                mean_text(row.aggregate, row.aggregate_ci95, 2)
            );
            if let Some(o) = &row.vs_one {
                line += &format!("  ×{:.3} vs N=1", o.ratio);
                if let Some([l, h]) = o.ci95 {
                    line += &format!(" [{l:.3}, {h:.3}]");
                }
            }
            if let Some(j) = row.jain {
                line += &format!("  Jain {j:.3}");
            }
            if let (Some(lo), Some(hi)) = (row.share_min_pct, row.share_max_pct) {
                line += &format!("  shares {lo:.1}–{hi:.1} %");
            }
            if let Some(sk) = row.start_skew_ms {
                line += &format!("  start skew {sk:.2} ms");
            }
            out += &line;
            out += "\n";
        }
    }
    out
}

/// All-pairs results as matrices (the practicum's table): rows send, columns receive; one matrix
/// per workload case and metric.
fn render_matrices(r: &Report, envs: &[&str]) -> String {
    let mut out = String::new();
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    // Raw CPU times are in the JSON; the matrices show the workload's metrics and CPU per Gbit.
    let shown = |m: &str| !CPU_TIMES.contains(&m);
    for x in r.results.iter().filter(|x| x.peer.is_some() && shown(&x.metric)) {
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (w, m, unit) in keys {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(SUMMARY_WIDTH);
        let mut header = vec![Cell::new(format!("{w}\n{m} ({unit})\nfrom ↓ to →"))];
        header.extend(envs.iter().map(|e| Cell::new(*e)));
        t.set_header(header);
        for from in envs {
            let mut cells = vec![Cell::new(*from)];
            for to in envs {
                let cell = r
                    .results
                    .iter()
                    .find(|x| {
                        x.workload == w
                            && x.metric == m
                            && x.environment == *from
                            && x.peer.as_deref() == Some(*to)
                    })
                    .map(|x| mean_text(x.mean, x.ci95, x.n))
                    .unwrap_or_else(|| if from == to { "·".into() } else { "—".into() });
                cells.push(Cell::new(cell));
            }
            t.add_row(cells);
        }
        out += "\n";
        out += &t.to_string();
    }
    out
}

/// Which clock headlines which environment, and how well host and guest clocks agreed.
fn render_clocks(r: &Report, any_dual: bool) -> String {
    let mut out = String::new();
    if any_dual {
        let (mut host, mut guest): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        for e in &r.environments {
            let own = e.own_clock;
            if own {
                host.push(&e.name)
            } else {
                guest.push(&e.name)
            }
        }
        out += "timed on two clocks; the headline is the host's (go → result, less an empty run's)";
        if !host.is_empty() {
            out += &format!(" for {} (a clock of their own)", host.join(", "));
        }
        if !guest.is_empty() {
            out += &format!(", the workload's own timer for {} (the host kernel's clock)", guest.join(", "));
        }
        out += "; ratios compare like with like; --json has both\n";
    }
    // environment → (trials, agreeing, median offsets, tolerances) over its workloads
    type Tally = (usize, usize, Vec<f64>, Vec<f64>);
    let mut by_env: BTreeMap<&str, Tally> = BTreeMap::new();
    for c in &r.clock_checks {
        let e = by_env.entry(c.environment.as_str()).or_default();
        e.0 += c.trials;
        e.1 += c.agreeing;
        e.2.push(c.median_offset_ms);
        e.3.push(c.tolerance_ms);
    }
    if !by_env.is_empty() {
        let parts: Vec<String> = by_env
            .iter()
            .map(|(e, (n, a, off, tol))| {
                format!(
                    "{e} {:+.2} ms, {a}/{n} within ±{:.2} ms",
                    virtperf_stats::median(off),
                    virtperf_stats::median(tol)
                )
            })
            .collect();
        let w = &r.manifest["host_wake"];
        let wake = match (w["max_us"].as_f64(), w["median_us"].as_f64(), w["idle_ms"].as_u64()) {
            (Some(max), Some(med), Some(idle)) => format!(
                " (allowed for: this host ran a thread woken after {idle} ms idle up to {:.2} ms late, median {:.2})",
                max / 1e3,
                med / 1e3
            ),
            _ => String::new(),
        };
        out += &format!("clock check (host − guest per armed trial, median): {}{wake}\n", parts.join("; "));
    }
    if !r.clock_rates.is_empty() {
        let parts: Vec<String> = r
            .clock_rates
            .iter()
            .map(|c| {
                format!(
                    "{} {:+.0} ppm ± {:.0} over {:.0} s ({} launch{})",
                    c.environment,
                    c.median_ppm,
                    c.uncertainty_ppm,
                    c.span_s,
                    c.launches,
                    if c.launches == 1 { "" } else { "es" }
                )
            })
            .collect();
        out += &format!(
            "agent clock rate against the host's, over each launch (median): {}\n",
            parts.join("; ")
        );
    }
    for c in r.clock_checks.iter().filter(|c| !c.agree) {
        out += &format!(
            "warning: clocks disagree for {} / {}: only {}/{} trials within tolerance; host − guest {:+.3} ms ({:+.2} %); its figures are headlined on the {} clock{}\n",
            c.environment,
            c.workload,
            c.agreeing,
            c.trials,
            c.median_offset_ms,
            c.median_offset_pct,
            c.headline,
            if c.instances > 1 {
                format!(
                    " ({} instances at once, one point each: where they keep every CPU busy, a result waits for one before it is stamped here, which lengthens host spans)",
                    c.instances
                )
            } else {
                String::new()
            },
        );
    }
    out
}

/// What every rendering of a report ends with: ceilings, start times, clocks, receivers that
/// limited a figure, loads not reached, failures, how to resume.
/// The parameters the run sized from the host (stored in its manifest), one line each.
pub fn sizing_lines(manifest: &serde_json::Value) -> Vec<String> {
    let sizings: Vec<virtperf_record::store::Sizing> =
        serde_json::from_value(manifest["sizing"].clone()).unwrap_or_default();
    sizings.iter().map(virtperf_record::store::Sizing::line).collect()
}

fn render_notes(r: &Report, any_dual: bool) -> String {
    let mut out = String::new();
    for (e, w, m, n) in &r.non_finite {
        out += &format!("{e} / {w} / {m}: {n} sample(s) not finite (NaN or ∞), left out of its figures\n");
    }
    out += &tool_agreement(r);
    out += &disturbance_note(r);
    if let Some(b) = &r.natural_baseline {
        out += &format!(
            "no native environment: each instance count is compared with N = 1 of its group, and each group's first with `{b}`, the run's first environment\n"
        );
    }
    for l in sizing_lines(&r.manifest) {
        out += &format!("sized from the host: {l}\n");
    }
    out += &switch_note(&r.manifest["lab"]);
    for s in r.manifest["skipped_environments"].as_array().into_iter().flatten() {
        out += &format!(
            "skipped environment `{}`: this host cannot run it ({})\n",
            s["environment"].as_str().unwrap_or("?"),
            s["why"].as_str().unwrap_or("?")
        );
    }
    out += &render_levels(r);
    out += &ceiling_notes(r);
    out += &start_note(r);
    out += &hosts_note(&r.manifest);
    if r.results.iter().any(|x| x.ci95.is_none() && x.n < 2) {
        out += &format!("(n=1): measured once, no interval: {}\n", virtperf_stats::NO_CI_ONE_SAMPLE);
    }
    out += &render_clocks(r, any_dual);
    out += &shortfall_notes(r);
    if r.status == RunStatus::Interrupted {
        out += &format!(
            "this run was interrupted: `virtperf run --resume {}` finishes the missing trials\n",
            r.run_id
        );
    }
    out
}

/// The host's own slowdowns, and what became of them in the ratios.
pub fn disturbance_note(r: &Report) -> String {
    if r.disturbances.is_empty() {
        return String::new();
    }
    let fate = match r.estimate {
        paired::Estimate::Paired => "paired ratios cancel them where both trials of a pair were inside",
        paired::Estimate::Unpaired => "unpaired ratios book them as a side's variance",
    };
    let mut out = format!("the host slowed down as a whole {} time(s) ({fate}):\n", r.disturbances.len());
    for d in r.disturbances.iter().take(5) {
        out += &format!("  {}\n", disturbances::line(d));
    }
    if r.disturbances.len() > 5 {
        out += &format!("  and {} more (--json: `disturbances`)\n", r.disturbances.len() - 5);
    }
    out
}

/// The lab's switch where it is not the kernel's bridge: what it is, how it is held, its CPU row.
fn switch_note(lab: &serde_json::Value) -> String {
    let Some(sw) = lab["switch"].as_str().filter(|s| *s != "bridge") else { return String::new() };
    let mut how = Vec::new();
    if let Some(c) = lab["switch_cpus"].as_str() {
        how.push(format!("pinned to CPU {c}"));
    }
    if let Some(c) = lab["switch_cap"].as_f64() {
        how.push(format!("capped at {:.0} % of a CPU", c * 100.0));
    }
    if let Some(v) = lab["switch_vcpus"].as_u64() {
        how.push(format!("{v} vCPU{}", if v == 1 { "" } else { "s" }));
    }
    format!(
        "the lab's switch ({sw}): {}{}; its host CPU per network trial is the row {}\n",
        lab["switch_is"].as_str().unwrap_or(sw),
        if how.is_empty() { String::new() } else { format!(", {}", how.join(", ")) },
        virtperf_record::store::SWITCH_CPU
    )
}

/// Each shaped link's ceiling beside what every environment measured.
pub(crate) fn ceiling_notes(r: &Report) -> String {
    let mut out = String::new();
    for c in &r.ceilings {
        let measured: Vec<String> = r
            .results
            .iter()
            .filter(|x| x.workload == c.workload && x.metric == c.metric && x.instance.is_none())
            .map(|x| format!("{} {} ({:.1} %)", x.environment, fmt_num(x.mean), x.mean / c.value * 100.0))
            .collect();
        out += &format!(
            "link ceiling of {} {}: {} {} ({}); measured: {}\n",
            c.workload,
            c.metric,
            fmt_num(c.value),
            c.unit,
            c.basis,
            if measured.is_empty() { "—".to_string() } else { measured.join(", ") }
        );
    }
    out
}

/// Each environment that stored its launches' phases, with them (for [`lifecycle::render`]).
pub fn startups(r: &Report) -> Vec<(&str, &lifecycle::Startup)> {
    r.environments.iter().filter_map(|e| e.startup.as_ref().map(|s| (e.name.as_str(), s))).collect()
}

/// Each environment's time from start to its agent's hello, per launch.
fn start_note(r: &Report) -> String {
    let starts: Vec<String> = r
        .environments
        .iter()
        .filter_map(|e| {
            e.start_ms.as_ref().map(|s| {
                let range = if s.n > 1 {
                    format!(" [min {}, max {}]", fmt_num(s.min), fmt_num(s.max))
                } else {
                    String::new()
                };
                format!("{} {} ms{range}", e.name, mean_text(s.mean, s.ci95, s.n))
            })
        })
        .collect();
    if starts.is_empty() {
        return String::new();
    }
    format!("start to agent ready (host clock, per launch): {}\n", starts.join("; "))
}

/// Other hosts: their clocks against this one's, measured at the preflight (never applied to a
/// duration: each is measured on the clock of the machine that runs it).
pub(crate) fn hosts_note(manifest: &serde_json::Value) -> String {
    let Some(hosts) = manifest["hosts"].as_object().filter(|h| !h.is_empty()) else { return String::new() };
    {
        let lines: Vec<String> = hosts
            .iter()
            .map(|(name, h)| {
                let f = &h["facts"];
                let clock = match (h["clock"]["offset_ns"].as_f64(), h["clock"]["uncertainty_ns"].as_f64()) {
                    (Some(o), Some(u)) => {
                        format!("clock {:+.3} ms ± {:.3} ms from this one's", o / 1e6, u / 1e6)
                    }
                    _ => "clock offset not measured".into(),
                };
                format!(
                    "{name} ({}, kernel {}): {clock}",
                    f["hostname"].as_str().unwrap_or("?"),
                    f["kernel"].as_str().unwrap_or("?")
                )
            })
            .collect();
        format!(
            "hosts (over SSH): {}; each figure is timed on the clock of the host that ran it\n",
            lines.join("; ")
        )
    }
}

/// What fell short: receivers that dropped, background load not reached, trials that did not
/// complete.
fn shortfall_notes(r: &Report) -> String {
    let mut out = String::new();
    for x in r
        .results
        .iter()
        .filter(|x| x.instance.is_none() && x.metric.ends_with("rx_socket_drops") && x.mean > 0.0)
    {
        out += &format!(
            "receiver-limited: in {} / {} the receiving socket dropped {} datagrams per trial (its buffer was full): the receiver (the tester, for direction out), not the path, set the figure\n",
            x.environment,
            x.workload,
            fmt_num(x.mean)
        );
    }
    for x in answer::lost_exchanges(r) {
        out += &format!(
            "lost: in {} / {} {} requests or responses a trial waited for a timeout or a retransmission (`{}`): the rate holds those waits, not only the path's cost\n",
            x.environment,
            x.workload,
            answer::fmt_lost(x.mean),
            x.metric
        );
    }
    for l in r.loads.iter().filter(|l| !l.reached) {
        out += &format!(
            "background load not reached for {} / {}: {:.1} % of the {:.0} % target over the workload's window (the loader's CPU was oversubscribed: the workload, or other loaders, took its share)\n",
            l.environment, l.workload, l.achieved_mean, l.target_percent
        );
    }
    for f in &r.failures {
        out += &format!(
            "{} trial(s) of {} / {} did not complete: {}\n",
            f.count, f.environment, f.workload, f.reason
        );
    }
    if !r.failures.is_empty() {
        out += &format!(
            "once their cause is fixed (a host back up), `virtperf run --resume {} --retry-failed` runs them again\n",
            r.run_id
        );
    }
    for x in &r.retried {
        out += &format!(
            "{} trial(s) run again (on a fresh instance after one died under them, or by --retry-failed); before, they had {}: {}\n",
            x.count, x.status, x.reason
        );
    }
    out
}

/// What the intervals cover (one launch, or launches and how the variance splits), the counts
/// calibrated per environment, and precision mode's outcome.
fn render_levels(r: &Report) -> String {
    let mut out = String::new();
    let rows: Vec<&ResultRow> =
        r.results.iter().filter(|x| x.peer.is_none() && x.instance.is_none() && x.n > 1).collect();
    let planned = r.manifest["launches"].as_u64().unwrap_or(1);
    if planned < 2 && !rows.is_empty() {
        out += "intervals cover one launch of each environment (its repetitions): what changes from one launch to the next (memory placement, page backing, vCPU placement, device set-up) is not in them; `launches = 3` measures it\n";
    } else if planned >= 2 {
        let one: Vec<String> = rows
            .iter()
            .filter(|x| x.launches < 2 && !DERIVED.contains(&x.metric.as_str()))
            .map(|x| format!("{} / {}", x.environment, x.workload))
            .fold(Vec::new(), |mut v, s| {
                if !v.contains(&s) {
                    v.push(s);
                }
                v
            });
        if !one.is_empty() {
            out += &format!(
                "measured on one launch only (the others' trials failed), so their intervals cover that launch: {}\n",
                one.join(", ")
            );
        }
    }
    let mut shares: Vec<(f64, String)> = rows
        .iter()
        .filter(|x| !DERIVED.contains(&x.metric.as_str()))
        .filter_map(|x| {
            x.variance
                .as_ref()
                .map(|v| (v.launch_share, format!("{} / {} {}", x.environment, x.workload, x.metric)))
        })
        .collect();
    if !shares.is_empty() {
        let l = rows.iter().map(|x| x.launches).max().unwrap_or(0);
        shares.sort_by(|a, b| b.0.total_cmp(&a.0));
        let top: Vec<String> =
            shares.iter().take(4).map(|(sh, what)| format!("{what} {:.0} %", sh * 100.0)).collect();
        out += &format!(
            "intervals cover up to {l} launches of each environment (mean of launch means, Kalibera & Jones); variance between launches, largest shares: {}\n",
            top.join(", ")
        );
    }
    // Calibrated counts, one line per workload: equal work where every environment ran one count.
    type Counted = Vec<(String, u64, Option<u64>)>;
    let mut cal: BTreeMap<(&str, &str), Counted> = BTreeMap::new();
    for x in rows.iter().chain(r.results.iter().filter(|x| x.n == 1).collect::<Vec<_>>().iter()) {
        if let Some(w) = &x.work {
            let v = cal.entry((x.workload.as_str(), w.param.as_str())).or_default();
            if !v.iter().any(|i| i.0 == x.environment) {
                v.push((x.environment.clone(), w.count, w.own));
            }
        }
    }
    for ((w, param), v) in &cal {
        let counts: std::collections::BTreeSet<u64> = v.iter().map(|i| i.1).collect();
        if counts.len() == 1 && v.len() > 1 {
            let n = v[0].1;
            let slowest = v.iter().find(|i| i.2.is_none()).map(|i| i.0.as_str()).unwrap_or("?");
            let own: Vec<String> =
                v.iter().filter_map(|i| i.2.map(|o| format!("{} {}", i.0, fmt_count(o)))).collect();
            out += &format!(
                "equal work: {w} ran {param} = {} everywhere ({slowest}'s count at its target time; each one's own: {})\n",
                fmt_count(n),
                own.join(", ")
            );
        } else {
            let each: Vec<String> = v.iter().map(|i| format!("{} {}", i.0, fmt_count(i.1))).collect();
            out += &format!(
                "calibrated per environment to its target_time: {w} {param} = {}\n",
                each.join(", ")
            );
        }
    }
    if let Some(p) = &r.precision {
        let short: Vec<String> = p
            .cells
            .iter()
            .filter(|c| !c.met)
            .map(|c| {
                let hw = c
                    .half_width_percent
                    .map(|h| format!("±{h:.1} %"))
                    .unwrap_or_else(|| "no interval".into());
                let needs = c.needs.as_ref().map_or(String::new(), |n| {
                    format!(" (~{} more launches, ~{})", n.more_blocks, human_secs(n.seconds))
                });
                format!("{} / {} {} {hw}{needs}", c.environment, c.workload, c.metric)
            })
            .collect();
        let how = if p.rule == "two-stage" {
            "paired launch blocks sized from each ratio's pilot (Stein's, in two or three stages), 95 % intervals".to_string()
        } else {
            format!(
                "intervals at the {} % level, which keeps their coverage at 95 % under the stopping rule",
                p.level * 100.0
            )
        };
        out += &format!(
            "precision target ±{} % ({how}): {} of {} ratios met it{}\n",
            p.target_percent,
            p.met,
            p.cells.len(),
            if short.is_empty() {
                String::new()
            } else {
                format!("; not met within the budget: {}", short.join(", "))
            }
        );
        for n in order_notes(p) {
            out += &format!("  {n}\n");
        }
    }
    out
}

/// Ratios whose launch means mix a launch's first trial with later ones unlike it, in words (the
/// text report and the HTML page say the same).
pub fn order_notes(p: &PrecisionReport) -> Vec<String> {
    p.cells
        .iter()
        .filter_map(|c| {
            let d = c.first_trial_differs.as_ref()?;
            Some(format!(
                "{} / {} {}: in {}, a launch's first trial differs from its later ones by {:+.0} % (t = {:.1}, {} launches of several): trials of one case back to back run unlike trials after other workloads, and its launch means mix both",
                c.environment, c.workload, c.metric, d.environment, d.effect.percent, d.effect.t, d.effect.launches
            ))
        })
        .collect()
}

/// A row of five samples of workload `w`, metric `m` (ms), for unit tests of what reads reports.
#[cfg(test)]
pub fn test_row(env: &str, mean: f64, stdev: f64, better: &'static str) -> ResultRow {
    let half = 2.776 * stdev / 5f64.sqrt();
    ResultRow {
        environment: env.into(),
        peer: None,
        instance: None,
        workload: "w".into(),
        kind: "w".into(),
        params: serde_json::json!({}),
        metric: "m".into(),
        unit: "ms".into(),
        better,
        n: 5,
        mean,
        median: mean,
        stdev,
        min: mean,
        max: mean,
        cv: Some(stdev / mean),
        ci95: Some([mean - half, mean + half]),
        no_ci: None,
        outliers: 0,
        non_finite: 0,
        overhead: None,
        clock: None,
        other_clock: None,
        clock_disagrees: false,
        launches: 1,
        ci_covers: "one launch",
        ci_level: 0.95,
        variance: None,
        work: None,
        verdict: None,
        headline: false,
        family: virtperf_record::Family::Other,
    }
}

/// A case of a test's run, described as a run of today's workloads records it.
#[cfg(test)]
pub fn described(
    workload: &str,
    kind: &str,
    label: &str,
    params: serde_json::Value,
) -> virtperf_record::store::NewCase {
    let record =
        virtperf_workload::describe(kind, &params).unwrap_or_else(virtperf_record::CaseRecord::unknown);
    virtperf_record::store::NewCase {
        workload: workload.into(),
        kind: kind.into(),
        label: label.into(),
        params,
        record,
    }
}

#[cfg(test)]
impl ResultRow {
    /// This row with its headline and family as a run of today's workloads records them.
    pub fn as_recorded(mut self) -> ResultRow {
        let r = virtperf_workload::describe(&self.kind, &self.params)
            .unwrap_or_else(virtperf_record::CaseRecord::unknown);
        self.headline = r.is_headline(&self.metric);
        self.family = r.family;
        self
    }
}

/// A report with three environments and no rows, for unit tests of what renders reports.
#[cfg(test)]
pub fn summary_test_report() -> Report {
    let env = |n: &str| EnvSummary {
        name: n.into(),
        kind: n.into(),
        params: serde_json::json!({}),
        launches: 1,
        start_ms_mean: None,
        start_ms: None,
        startup: None,
        baseline: None,
        own_clock: ["gvisor", "uml", "qemu", "libvirt"].contains(&n),
    };
    Report {
        run_id: 1,
        name: "t".into(),
        status: RunStatus::Completed,
        started_at: String::new(),
        finished_at: None,
        baseline: Some("native".into()),
        baselines: vec!["native".into()],
        natural_baseline: None,
        by_host: Vec::new(),
        overhead_method: "fieller",
        estimate: paired::Estimate::Unpaired,
        disturbances: Vec::new(),
        results: Vec::new(),
        environments: vec![env("native"), env("container"), env("qemu-virtio-with-a-long-name")],
        clock_checks: Vec::new(),
        clock_rates: Vec::new(),
        trials: Counts::default(),
        failures: Vec::new(),
        stalls: Vec::new(),
        retried: Vec::new(),
        non_finite: Vec::new(),
        ceilings: Vec::new(),
        rfc2544: Vec::new(),
        loads: Vec::new(),
        instances: Vec::new(),
        density: Vec::new(),
        together: Vec::new(),
        kernels: Vec::new(),
        disk: Vec::new(),
        timers: Vec::new(),
        precision: None,
        explain: None,
        knob_costs: Vec::new(),
        manifest: serde_json::json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A figure that cannot be negative gets an interval above zero: the issue's gVisor goodput,
    /// mean 2.96 with t's [−0.41, 6.33], keeps its half-width on the log scale; a narrow one is
    /// as it was; a figure with values below zero keeps t's.
    #[test]
    fn a_figure_that_cannot_be_negative_gets_no_interval_below_zero() {
        let (l, h) = positive_ci(-0.41, 6.33, 2.96, 0.001);
        assert!(l > 0.0 && l < 1.0 && h > 6.33, "{l} {h}");
        assert!((((h / 2.96).ln() - (2.96 / l).ln()).abs()) < 1e-12, "symmetric on the log scale");
        assert_eq!(positive_ci(9.0, 11.0, 10.0, 8.5), (9.0, 11.0));
        assert_eq!(positive_ci(-3.0, 1.0, -1.0, -4.0), (-3.0, 1.0));
    }

    /// A flow that took far longer than planned is a stall, counted over the cell's timed trials;
    /// a warm-up's, a slightly slow one's, and a workload without a planned duration are not.
    #[test]
    fn a_flow_far_longer_than_planned_is_a_stall() {
        use virtperf_record::store::{CaseRow, EnvRow, TrialRow};
        let env = |idx: usize, name: &str| EnvRow { idx, name: name.into(), ..Default::default() };
        let t = |env_idx: usize, case_idx: usize, ms: f64, warmup: bool| TrialRow {
            env_idx,
            case_idx,
            warmup,
            status: TrialStatus::Ok,
            host_ns: Some((ms * 1e6) as i64),
            ..Default::default()
        };
        let rows = RunRows {
            envs: vec![env(0, "native"), env(1, "gvisor")],
            cases: vec![
                CaseRow {
                    idx: 0,
                    label: "tcp_stream".into(),
                    params: serde_json::json!({"duration": 500}),
                    ..Default::default()
                },
                CaseRow {
                    idx: 1,
                    label: "pde".into(),
                    params: serde_json::json!({"n": 256}),
                    ..Default::default()
                },
            ],
            trials: vec![
                t(0, 0, 520.0, false),
                t(0, 0, 1900.0, false), // slow, under 2 × 0.5 s + 1 s
                t(1, 0, 15_600.0, false),
                t(1, 0, 530.0, false),
                t(1, 0, 9_000.0, true), // a warm-up
                t(1, 1, 60_000.0, false),
            ],
            ..Default::default()
        };
        let s = stalls(&rows);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].environment.as_str(), s[0].workload.as_str()), ("gvisor", "tcp_stream"));
        assert_eq!((s[0].trials, s[0].of, s[0].planned_ms, s[0].longest_ms), (1, 2, 500.0, 15_600.0));
    }

    /// The host's wake latency after an idle spell widens a trial's clock check where it exceeds
    /// the calibration's allowance, and only there.
    #[test]
    fn the_hosts_wake_latency_widens_the_clock_check() {
        // native intmix: 29 ms on its timer, a 39 us calibration with a 20 us spread.
        let (rtt, jit, g) = (39e3, 20e3, 29e6);
        let without = clock_tolerance_ns(rtt, jit, 0.0, g);
        assert!((without - 390e3).abs() < 1.0, "{without}");
        // Woken up to 0.33 ms late: that, not 0.1 ms, is the absolute part.
        let with = clock_tolerance_ns(rtt, jit, 330e3, g);
        assert!((with - 620e3).abs() < 1.0, "{with}");
        // Below what the calibration allows, it changes nothing.
        assert_eq!(clock_tolerance_ns(rtt, jit, 50e3, g), without);
    }

    /// A precision cell whose launches' first trial is unlike the rest is said, on the side it
    /// was seen, in the text report's words; cells without it say nothing.
    #[test]
    fn a_first_trial_unlike_the_rest_is_said_in_the_report() {
        let cell = |env: &str, d: Option<FirstTrialDiffers>| PrecisionCell {
            environment: env.into(),
            workload: "pde".into(),
            metric: "pde_time".into(),
            half_width_percent: Some(23.1),
            met: false,
            launches: 16,
            n: 252,
            needs: None,
            first_trial_differs: d,
        };
        let effect = virtperf_stats::sequential::FirstVsRest { percent: 126.0, t: 10.2, launches: 12 };
        let p = PrecisionReport {
            target_percent: 5.0,
            level: 0.99,
            rule: "stop when met",
            budget_ms: 270_000,
            met: 0,
            cells: vec![
                cell("uml", Some(FirstTrialDiffers { environment: "uml".into(), effect })),
                cell("gvisor", None),
            ],
        };
        let notes = order_notes(&p);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("uml / pde pde_time: in uml, a launch's first trial differs from its later ones by +126 % (t = 10.2, 12 launches"), "{}", notes[0]);
        let j = serde_json::to_value(&p.cells[0]).unwrap();
        assert_eq!(j["first_trial_differs"]["environment"], "uml");
        assert_eq!(j["first_trial_differs"]["launches"], 12);
        assert!(serde_json::to_value(&p.cells[1]).unwrap().get("first_trial_differs").is_none());
    }

    /// A run of `label` (kind `kind`, params) in native and gvisor, a block per pair, paired;
    /// `values[k]` = (native's, gvisor's, gvisor's host ms).
    fn paired_run(
        kind: &str,
        metric: &str,
        unit: &str,
        params: serde_json::Value,
        values: &[(f64, f64, f64)],
    ) -> Report {
        use virtperf_record::store::{NewEnv, PlannedTrial, TrialOutcome};
        let dir = tempfile::tempdir().unwrap();
        let mut s = virtperf_record::store::Store::open(&dir.path().join("r.db")).unwrap();
        let env = NewEnv::of_kind;
        let plan: Vec<PlannedTrial> = (0..2 * values.len() as i64)
            .map(|i| PlannedTrial { block: (i / 2) as u32, ..PlannedTrial::alternating(i, 0, i / 2) })
            .collect();
        let run = s
            .create_run(&virtperf_record::store::NewRun {
                name: "x",
                experiment_toml: "toml",
                manifest: &serde_json::json!({"order": "paired"}),
                envs: &[env("native"), env("gvisor")],
                cases: &[described(kind, kind, kind, params)],
                metrics: &virtperf_workload::metric_records(),
                plan: &plan,
            })
            .unwrap();
        for t in s.pending_trials(run).unwrap() {
            let (nat, gv, ms) = values[t.rep as usize];
            let (v, ms) = if t.env_idx == 0 { (nat, 510.0) } else { (gv, ms) };
            let ok = TrialOutcome {
                status: virtperf_record::store::TrialStatus::Ok,
                host_ns: Some((ms * 1e6) as u64),
                samples: vec![virtperf_proto::Sample { metric: metric.into(), value: v, unit: unit.into() }],
                ..Default::default()
            };
            s.record_trial(t.id, &ok).unwrap();
        }
        build(&s.load(run).unwrap()).unwrap()
    }

    /// The issue's gVisor `tcp_stream`: pairs 4.2–6.9× slower and one flow that stalled 17 s.
    /// The stall is set apart (its trial took far beyond its planned 0.5 s): the ratio is of the
    /// rest, its interval all on the slow side, the stall said beside it; every pair stalled:
    /// no interval, said so.
    #[test]
    fn a_stalled_trial_is_set_apart_from_its_ratio_and_said() {
        let vals = [
            (14.0, 14.0 / 4.2, 520.0),
            (14.2, 14.2 / 4.5, 515.0),
            (13.8, 13.8 / 6.9, 530.0),
            (14.1, 14.1 / 4887.0, 17_000.0),
            (14.0, 14.0 / 5.0, 520.0),
        ];
        let r =
            paired_run("tcp_stream", "tcp_goodput", "Gbit/s", serde_json::json!({"duration": 500}), &vals);
        let x = r.results.iter().find(|x| x.environment == "gvisor" && x.metric == "tcp_goodput").unwrap();
        let o = x.overhead.as_ref().unwrap();
        let sa = o.set_apart.as_ref().expect("the stall set apart");
        assert_eq!((sa.stalled, sa.beyond, sa.of, o.pairs), (1, 0, 5, Some(4)), "{sa:?}");
        let [l, h] = o.ci.unwrap();
        assert!(h < 1.0 && l > 0.1, "the rest's interval, all slower: [{l}, {h}]");
        assert!(sa.ratio_with < o.ratio, "with the stall it is lower still: {} {}", sa.ratio_with, o.ratio);
        let v = x.verdict.as_ref().unwrap();
        assert_eq!(v.word, "lower");
        assert!(
            v.set_apart.as_ref().is_some_and(|w| w.starts_with("1 of 5 pairs set apart (stalled: ×0.00020)")),
            "{v:?}"
        );
        let c = crate::report::answer::caveats(&r);
        assert!(c.iter().any(|c| c.starts_with("stalled: gvisor / tcp_stream: 1 of 5 trials took up to 17 s where 0.5 s was planned (its ratio is of the rest: 1 of 5 pairs set apart")), "{c:#?}");
        // Every pair stalled: said, no interval.
        let all: Vec<(f64, f64, f64)> = vals.iter().map(|(a, b, _)| (*a, *b, 17_000.0)).collect();
        let r = paired_run("tcp_stream", "tcp_goodput", "Gbit/s", serde_json::json!({"duration": 500}), &all);
        let x = r.results.iter().find(|x| x.environment == "gvisor" && x.metric == "tcp_goodput").unwrap();
        assert!(x.overhead.as_ref().unwrap().ci.is_none());
        assert_eq!(x.verdict.as_ref().unwrap().word, "stalled");
    }

    /// With no planned time to say it stalled, a pair far outside the others (a burst on one
    /// side, 50×) is set apart by the robust rule and said; the same cell without it is not.
    #[test]
    fn a_pair_far_outside_its_cell_is_set_apart_and_said() {
        let mut vals: Vec<(f64, f64, f64)> =
            [1.00, 1.03, 0.98, 1.01, 1.02, 0.99].iter().map(|k| (10.0, 10.0 * k, 10.0)).collect();
        let clean = paired_run("memcpy", "memcpy_time", "ms", serde_json::json!({}), &vals);
        let x =
            clean.results.iter().find(|x| x.environment == "gvisor" && x.metric == "memcpy_time").unwrap();
        assert!(x.overhead.as_ref().unwrap().set_apart.is_none());
        vals[2].1 = 500.0;
        let r = paired_run("memcpy", "memcpy_time", "ms", serde_json::json!({}), &vals);
        let x = r.results.iter().find(|x| x.environment == "gvisor" && x.metric == "memcpy_time").unwrap();
        let o = x.overhead.as_ref().unwrap();
        let sa = o.set_apart.as_ref().expect("set apart");
        assert_eq!((sa.stalled, sa.beyond, o.pairs), (0, 1, Some(5)));
        assert!((o.ratio - 1.01).abs() < 0.02, "{}", o.ratio);
        let c = crate::report::answer::caveats(&r);
        assert!(
            c.iter().any(|c| c.starts_with(
                "set apart: gvisor / memcpy: 1 of 6 pairs set apart (far outside the others: ×50)"
            )),
            "{c:#?}"
        );
    }

    /// A host-wide slowdown that fell on native's trial of one pair and gvisor's of another: two
    /// one-sided bursts (×2 each), which pairing cannot cancel, set apart; the ratio of the rest is
    /// the truth, and the caveat counts what pairing cancelled and what it did not.
    #[test]
    fn a_slowdown_on_one_side_of_a_pair_is_set_apart_and_counted() {
        let vals = [(10.0, 10.1), (10.05, 10.0), (20.0, 10.02), (9.98, 10.03), (10.0, 20.1), (10.02, 9.97)];
        let vals: Vec<(f64, f64, f64)> = vals.iter().map(|(a, b)| (*a, *b, 10.0)).collect();
        let r = paired_run("memcpy", "memcpy_time", "ms", serde_json::json!({}), &vals);
        assert_eq!(r.disturbances.len(), 1, "{:?}", r.disturbances);
        let d = &r.disturbances[0];
        assert_eq!((d.both_sides, d.one_side), (0, 2), "{d:?}");
        let x = r.results.iter().find(|x| x.environment == "gvisor" && x.metric == "memcpy_time").unwrap();
        let o = x.overhead.as_ref().unwrap();
        let sa = o.set_apart.as_ref().expect("set apart");
        assert_eq!((sa.burst, sa.stalled, sa.beyond, o.pairs), (2, 0, 0, Some(4)), "{sa:?}");
        assert!((o.ratio - 1.0).abs() < 0.01, "{}", o.ratio);
        let c = crate::report::answer::caveats(&r);
        assert!(
            c.iter()
                .any(|c| c
                    .contains("2 pairs had one trial inside and not the other, set apart from their ratios")),
            "{c:#?}"
        );
        assert!(x
            .verdict
            .as_ref()
            .unwrap()
            .set_apart
            .as_ref()
            .is_some_and(|w| w.starts_with("2 of 6 pairs set apart (a slowdown on one side")));
    }

    #[test]
    fn a_sample_that_is_not_finite_is_left_out_and_said() {
        use virtperf_record::store::{NewEnv, PlannedTrial, TrialOutcome};
        let dir = tempfile::tempdir().unwrap();
        let mut s = virtperf_record::store::Store::open(&dir.path().join("r.db")).unwrap();
        let env = NewEnv::of_kind;
        let plan: Vec<PlannedTrial> = (0..6).map(|i| PlannedTrial::alternating(i, 0, i / 2)).collect();
        let run = s
            .create_run(&virtperf_record::store::NewRun {
                name: "x",
                experiment_toml: "toml",
                manifest: &serde_json::json!({}),
                envs: &[env("native"), env("container")],
                cases: &[described("memcpy", "memcpy", "memcpy", serde_json::json!({}))],
                metrics: &virtperf_workload::metric_records(),
                plan: &plan,
            })
            .unwrap();
        for (k, t) in s.pending_trials(run).unwrap().iter().enumerate() {
            let v = if k == 3 { f64::INFINITY } else { 10.0 + k as f64 };
            let ok = TrialOutcome {
                status: virtperf_record::store::TrialStatus::Ok,
                samples: vec![virtperf_proto::Sample {
                    metric: "memcpy_time".into(),
                    value: v,
                    unit: "ms".into(),
                }],
                ..Default::default()
            };
            s.record_trial(t.id, &ok).unwrap();
        }
        let r = build(&s.load(run).unwrap()).unwrap();
        let row =
            r.results.iter().find(|x| x.environment == "container" && x.metric == "memcpy_time").unwrap();
        assert_eq!((row.n, row.non_finite), (2, 1), "the row keeps its finite samples and counts the other");
        assert!(row.mean.is_finite() && row.overhead.is_some());
        assert_eq!(r.non_finite, vec![("container".into(), "memcpy".into(), "memcpy_time".into(), 1)]);
        assert!(render_notes(&r, false).contains("container / memcpy / memcpy_time: 1 sample(s) not finite"));
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(fmt_num(12.3456), "12.35");
        assert_eq!(fmt_num(0.012345), "0.01235");
        assert_eq!(fmt_num(1234.6), "1235");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(1.5e12), "1.500e12");
    }

    #[test]
    fn overhead_verdicts_respect_direction() {
        let o = |r, l, h| Overhead::unpaired(r, Some([l, h]), None);
        assert!(overhead_text(&o(1.2, 1.1, 1.3), "lower").ends_with("worse"));
        assert!(overhead_text(&o(1.2, 1.1, 1.3), "higher").ends_with("better"));
        assert!(overhead_text(&o(0.8, 0.7, 0.9), "higher").ends_with("worse"));
        assert!(overhead_text(&o(1.0, 0.9, 1.1), "lower").ends_with("~same"));
        let none = |why| Overhead::unpaired(2.0, None, Some(why));
        assert!(overhead_text(&none(virtperf_stats::NO_CI_UNBOUNDED), "lower").contains("unbounded"));
        assert_eq!(overhead_text(&none(virtperf_stats::NO_CI_ONE_SAMPLE), "lower"), "×2.000 (n=1, no CI)");
        assert_eq!(mean_text(427896.0, None, 1), "427896 (n=1)");
        assert_eq!(mean_text(0.0, None, 5), "0 (n=5, all equal)");
        assert_eq!(mean_text(10.0, Some([9.0, 11.0]), 5), "10.00 ± 1.000");
    }
}
