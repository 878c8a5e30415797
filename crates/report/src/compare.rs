//! `virtperf compare A B`: two runs — of one database or of two (a run from another machine) —
//! matched by environment, workload and metric; each metric's change A → B as the ratio of
//! means with its Fieller 95 % CI, and the changes beyond noise and beyond a threshold in the
//! worse direction flagged as regressions.
//!
//! A noisy or shared host drifts between runs: everything, the baseline included, gets slower
//! together. By default an environment with a baseline in both runs is therefore judged on its
//! **overhead** (its ratio to the baseline, which cancels what moved the whole host); the
//! baseline's own rows are judged on their means and reported as "the baseline moved", with the
//! median factor, instead of as regressions of every environment. `--raw` judges every row on its
//! means.
//!
//! Every verdict — here, in `history` and in `ab` — comes from [`verdict`]: a change is a
//! *regression* only when its 95 % interval excludes no change **and** its size reaches the smallest
//! change the user cares about (`--fail-on`/`--threshold`, Firecracker's rule after their A/B alarm
//! cried wolf on noise); *no change* when the interval rules out a change that large (an
//! equivalence test); *inconclusive* when the data allow one but do not show it.

use std::path::{Path, PathBuf};

use comfy_table::{presets::UTF8_HORIZONTAL_ONLY, Cell, ContentArrangement, Table};
use serde::Serialize;
use virtperf_stats::Summary;

use crate::report::{fmt_num, Report, ResultRow};

/// Where a run is: `RUN` (in the default database), `DB` (its latest run) or `DB:RUN`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRef {
    pub db: PathBuf,
    pub run: Option<i64>,
}

/// Parses a run reference; `default_db` is used for a bare run id.
pub fn parse_ref(s: &str, default_db: &Path) -> Result<RunRef, String> {
    if let Ok(id) = s.parse::<i64>() {
        return Ok(RunRef { db: default_db.to_path_buf(), run: Some(id) });
    }
    if let Some((db, run)) = s.rsplit_once(':') {
        if let Ok(id) = run.parse::<i64>() {
            return Ok(RunRef { db: PathBuf::from(db), run: Some(id) });
        }
    }
    if Path::new(s).exists() {
        return Ok(RunRef { db: PathBuf::from(s), run: None });
    }
    Err(format!("`{s}` is neither a run id, a database file, nor DB:RUN (e.g. 3, old.db, old.db:3)"))
}

#[derive(Debug, Serialize)]
pub struct Change {
    pub environment: String,
    pub workload: String,
    pub metric: String,
    pub unit: String,
    pub better: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    pub a_mean: f64,
    pub b_mean: f64,
    pub a_n: usize,
    pub b_n: usize,
    /// B / A.
    pub ratio: f64,
    pub ci95: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_ci: Option<&'static str>,
    /// B's overhead / A's (each environment / baseline), with a 95 % CI combined in log space
    /// from the two runs' Fieller intervals; absent for the baseline's own rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead_change: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead_change_ci95: Option<[f64; 2]>,
    /// `overhead` or `mean`: what the verdict rests on.
    pub judged_on: &'static str,
    /// [`verdict`]'s: `regression`, `improvement`, `no change`, `inconclusive`, `changed` (a
    /// metric with no better direction), or `baseline moved` (the baseline's own row changed beyond
    /// noise and the threshold while environments are judged on their overhead).
    pub verdict: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub threshold_pct: f64,
    pub changes: Vec<Change>,
    pub regressions: usize,
    pub improvements: usize,
    /// Rows whose interval neither shows a change of the threshold's size nor rules one out.
    pub inconclusive: usize,
    /// The baseline's rows that changed beyond noise and the threshold, and their median B/A.
    pub baseline_moved: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_median_change: Option<f64>,
    /// Every row judged on its means (`--raw`).
    pub raw: bool,
    /// Rows of one run without a partner in the other.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
}

fn summary_of(r: &ResultRow) -> Summary {
    Summary {
        n: r.n,
        mean: r.mean,
        median: r.median,
        stdev: r.stdev,
        min: r.min,
        max: r.max,
        cv: r.cv.unwrap_or(f64::NAN),
        ci95: r.ci95.map(|[l, h]| (l, h)),
        outliers: Vec::new(),
    }
}

/// What matches a row across runs: environment, workload (with its parameters), metric, peer,
/// instance.
pub fn key(r: &ResultRow) -> Key {
    (r.environment.clone(), r.workload.clone(), r.metric.clone(), r.peer.clone(), r.instance)
}

fn label(r: &ResultRow) -> String {
    with_peer(format!("{} / {} / {}", r.environment, r.workload, r.metric), r.peer.as_deref(), r.instance)
}

/// A metric's name with the peer it sends to (all pairs) and its instance, as every output names
/// them: `tcp_goodput → b #2`.
pub fn with_peer(mut name: String, peer: Option<&str>, instance: Option<u32>) -> String {
    if let Some(p) = peer {
        name += &format!(" → {p}");
    }
    if let Some(i) = instance {
        name += &format!(" #{i}");
    }
    name
}

/// Matches the rows of `a` and `b`; `threshold_pct`: how large a change beyond noise must be to
/// count as a regression or an improvement.
pub fn compare(
    a: &Report,
    a_name: &str,
    b: &Report,
    b_name: &str,
    threshold_pct: f64,
    raw: bool,
) -> Comparison {
    let mut changes = Vec::new();
    let mut only_in_a = Vec::new();
    for ra in &a.results {
        let Some(rb) = b.results.iter().find(|rb| key(rb) == key(ra)) else {
            only_in_a.push(label(ra));
            continue;
        };
        let (sa, sb) = (summary_of(ra), summary_of(rb));
        let rc = virtperf_stats::ratio_ci(&sb, &sa);
        let ratio = if ra.mean != 0.0 { rb.mean / ra.mean } else { f64::NAN };
        let ci95 = rc.as_ref().and_then(|c| c.ci95).map(|(l, h)| [l, h]);
        let (overhead_change, overhead_change_ci95) = overhead_change(ra, rb);
        let is_baseline = a.is_baseline(&ra.environment);
        let on_overhead = !raw && overhead_change.is_some();
        let (r, ci, judged_on) = if on_overhead {
            (overhead_change.unwrap_or(f64::NAN), overhead_change_ci95, "overhead")
        } else {
            (ratio, ci95, "mean")
        };
        let verdict = match verdict(r, ci, ra.better, threshold_pct) {
            REGRESSION | IMPROVEMENT | CHANGED if is_baseline && !raw => "baseline moved",
            v => v,
        };
        changes.push(Change {
            environment: ra.environment.clone(),
            workload: ra.workload.clone(),
            metric: ra.metric.clone(),
            unit: ra.unit.clone(),
            better: ra.better,
            peer: ra.peer.clone(),
            instance: ra.instance,
            a_mean: ra.mean,
            b_mean: rb.mean,
            a_n: ra.n,
            b_n: rb.n,
            ratio,
            ci95,
            no_ci: rc.and_then(|c| c.no_ci),
            overhead_change,
            overhead_change_ci95,
            judged_on,
            verdict,
        });
    }
    let only_in_b =
        b.results.iter().filter(|rb| !a.results.iter().any(|ra| key(ra) == key(rb))).map(label).collect();
    comparison((a_name, b_name), threshold_pct, raw, changes, (only_in_a, only_in_b))
}

/// The comparison of matched rows, with its counts.
fn comparison(
    (a_name, b_name): (&str, &str),
    threshold_pct: f64,
    raw: bool,
    changes: Vec<Change>,
    (only_in_a, only_in_b): (Vec<String>, Vec<String>),
) -> Comparison {
    let moved: Vec<f64> = changes.iter().filter(|c| c.verdict == "baseline moved").map(|c| c.ratio).collect();
    let count = |v: &str| changes.iter().filter(|c| c.verdict == v).count();
    Comparison {
        a: a_name.into(),
        b: b_name.into(),
        threshold_pct,
        regressions: count(REGRESSION),
        improvements: count(IMPROVEMENT),
        inconclusive: count(INCONCLUSIVE),
        baseline_moved: moved.len(),
        baseline_median_change: (!moved.is_empty()).then(|| virtperf_stats::median(&moved)),
        raw,
        changes,
        only_in_a,
        only_in_b,
    }
}

pub const REGRESSION: &str = "regression";
pub const IMPROVEMENT: &str = "improvement";
pub const NO_CHANGE: &str = "no change";
pub const INCONCLUSIVE: &str = "inconclusive";
/// Beyond noise and the threshold on a metric with no better direction.
pub const CHANGED: &str = "changed";

/// What a change `ratio` (new / old) with its 95 % interval `ci` is, for a metric whose `better`
/// direction is `higher`, `lower` or neither, when changes under `threshold_pct` % do not matter:
/// - `regression` / `improvement` (`changed` without a direction): the interval excludes 1 and the
///   ratio is at least `threshold_pct` % from it;
/// - `no change`: otherwise, when the whole interval lies within ±`threshold_pct` % (any change is
///   smaller than what matters — a real but small one included);
/// - `inconclusive`: otherwise (a change that matters is neither shown nor ruled out), and
///   whenever there is no interval.
pub fn verdict(ratio: f64, ci: Option<[f64; 2]>, better: &str, threshold_pct: f64) -> &'static str {
    let Some([l, h]) = ci.filter(|[l, h]| l.is_finite() && h.is_finite() && ratio.is_finite()) else {
        return INCONCLUSIVE;
    };
    let t = threshold_pct / 100.0;
    let beyond_noise = l > 1.0 || h < 1.0;
    let big = (ratio - 1.0).abs() >= t;
    if beyond_noise && big {
        return match (better, ratio > 1.0) {
            ("lower", true) | ("higher", false) => REGRESSION,
            ("lower", false) | ("higher", true) => IMPROVEMENT,
            _ => CHANGED,
        };
    }
    if l >= 1.0 - t && h <= 1.0 + t {
        NO_CHANGE
    } else {
        INCONCLUSIVE
    }
}

/// The exit status a verdict-giving command ends with when asked to fail (`--fail-on`):
/// 4 with a regression, else 5 with an inconclusive metric, else 0.
pub fn exit_status(regressions: usize, inconclusive: usize, fail: bool) -> crate::exit::ExitStatus {
    use crate::exit::ExitStatus;
    match (fail, regressions, inconclusive) {
        (false, _, _) => ExitStatus::Success,
        (true, r, _) if r > 0 => ExitStatus::Regression,
        (true, _, i) if i > 0 => ExitStatus::Inconclusive,
        _ => ExitStatus::Success,
    }
}

/// B / A of two sets of per-run figures: the ratio of their geometric means with Welch's 95 %
/// interval on the logs (each run one observation: the run-to-run variation is in the interval).
/// None without a positive figure on each side; no interval with fewer than 2 runs a side.
pub fn welch_log_ratio(a: &[f64], b: &[f64]) -> Option<(f64, Option<[f64; 2]>)> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|v| !(v.is_finite() && *v > 0.0)) {
        return None;
    }
    let moments = |xs: &[f64]| {
        let n = xs.len() as f64;
        let m = xs.iter().map(|x| x.ln()).sum::<f64>() / n;
        let v = if xs.len() > 1 {
            xs.iter().map(|x| (x.ln() - m).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            f64::NAN
        };
        (m, v / n)
    };
    let ((ma, va), (mb, vb)) = (moments(a), moments(b));
    let ratio = (mb - ma).exp();
    if a.len() < 2 || b.len() < 2 {
        return Some((ratio, None));
    }
    let df = virtperf_stats::welch_df(va, a.len(), vb, b.len());
    let half = virtperf_stats::t_quantile(0.95, df) * (va + vb).sqrt();
    let ci = half.is_finite().then(|| [ratio * (-half).exp(), ratio * half.exp()]);
    Some((ratio, ci))
}

pub type Key = (String, String, String, Option<String>, Option<u32>);

/// Every run's row of each key, in the order keys first appear, with whether it is a baseline's.
fn rows_by_key(reps: &[Report]) -> Vec<(Key, Vec<&ResultRow>, bool)> {
    let mut m: Vec<(Key, Vec<&ResultRow>, bool)> = Vec::new();
    for rep in reps {
        for r in &rep.results {
            let k = key(r);
            match m.iter_mut().find(|(mk, _, _)| *mk == k) {
                Some((_, rows, _)) => rows.push(r),
                None => m.push((k, vec![r], rep.is_baseline(&r.environment))),
            }
        }
    }
    m
}

/// Matches the rows of several runs of A against several of B (`ab`'s interleaved runs): each
/// metric's figure per run, B/A of their geometric means with Welch's interval over runs
/// ([`welch_log_ratio`]), judged as [`compare`] judges one run against one.
pub fn compare_runs(
    a: &[Report],
    a_name: &str,
    b: &[Report],
    b_name: &str,
    threshold_pct: f64,
    raw: bool,
) -> Comparison {
    let (ma, mb) = (rows_by_key(a), rows_by_key(b));
    let geo = |xs: &[f64]| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp();
    let mut changes = Vec::new();
    let mut only_in_a = Vec::new();
    for (k, ra, is_baseline) in &ma {
        let Some((_, rb, _)) = mb.iter().find(|(kb, _, _)| kb == k) else {
            if let Some(r) = ra.first() {
                only_in_a.push(label(r));
            }
            continue;
        };
        let Some(first) = ra.first() else { continue };
        let means = |rows: &[&ResultRow]| rows.iter().map(|r| r.mean).collect::<Vec<f64>>();
        let (am, bm) = (means(ra), means(rb));
        let on_means = welch_log_ratio(&am, &bm);
        let overheads = |rows: &[&ResultRow]| -> Option<Vec<f64>> {
            rows.iter().map(|r| r.overhead.as_ref().map(|o| o.ratio)).collect()
        };
        let on_overheads = match (overheads(ra), overheads(rb)) {
            (Some(x), Some(y)) if !is_baseline => welch_log_ratio(&x, &y),
            _ => None,
        };
        let (ratio, ci95) = on_means.unwrap_or((f64::NAN, None));
        let on_overhead = !raw && on_overheads.is_some();
        let (r, ci, judged_on) = match on_overheads {
            Some((o, oci)) if on_overhead => (o, oci, "overhead"),
            _ => (ratio, ci95, "mean"),
        };
        let verdict = match verdict(r, ci, first.better, threshold_pct) {
            REGRESSION | IMPROVEMENT | CHANGED if *is_baseline && !raw => "baseline moved",
            v => v,
        };
        let positive = |xs: &[f64]| xs.iter().all(|x| *x > 0.0);
        changes.push(Change {
            environment: first.environment.clone(),
            workload: first.workload.clone(),
            metric: first.metric.clone(),
            unit: first.unit.clone(),
            better: first.better,
            peer: first.peer.clone(),
            instance: first.instance,
            a_mean: if positive(&am) { geo(&am) } else { am.iter().sum::<f64>() / am.len() as f64 },
            b_mean: if positive(&bm) { geo(&bm) } else { bm.iter().sum::<f64>() / bm.len() as f64 },
            a_n: ra.len(),
            b_n: rb.len(),
            ratio,
            ci95,
            no_ci: ci95.is_none().then_some(if ra.len() < 2 || rb.len() < 2 {
                "fewer than 2 runs on a side"
            } else {
                "a figure of 0 or below"
            }),
            overhead_change: on_overheads.map(|(o, _)| o),
            overhead_change_ci95: on_overheads.and_then(|(_, c)| c),
            judged_on,
            verdict,
        });
    }
    let only_in_b = mb
        .iter()
        .filter(|(k, _, _)| !ma.iter().any(|(ka, _, _)| ka == k))
        .filter_map(|(_, rows, _)| rows.first().map(|r| label(r)))
        .collect();
    comparison((a_name, b_name), threshold_pct, raw, changes, (only_in_a, only_in_b))
}

/// B's overhead over A's, and its 95 % CI from the two Fieller intervals combined in log space
/// (independent runs: the log-widths add in quadrature).
fn overhead_change(ra: &ResultRow, rb: &ResultRow) -> (Option<f64>, Option<[f64; 2]>) {
    let (Some(oa), Some(ob)) = (&ra.overhead, &rb.overhead) else { return (None, None) };
    if !(oa.ratio > 0.0 && ob.ratio > 0.0) {
        return (None, None);
    }
    let change = ob.ratio / oa.ratio;
    let half = |o: &crate::report::Overhead| {
        o.ci95.filter(|[l, h]| *l > 0.0 && *h > 0.0).map(|[l, h]| (h.ln() - l.ln()) / 2.0)
    };
    let ci = match (half(oa), half(ob)) {
        (Some(x), Some(y)) => {
            let w = (x * x + y * y).sqrt();
            Some([change * (-w).exp(), change * w.exp()])
        }
        _ => None,
    };
    (Some(change), ci)
}

/// How a verdict shows in JUnit: a regression fails, inconclusive is skipped, the rest pass.
pub fn junit_kind(verdict: &str) -> crate::export::junit::Kind {
    use crate::export::junit::Kind;
    match verdict {
        REGRESSION => Kind::Fail,
        INCONCLUSIVE => Kind::Skip,
        _ => Kind::Pass,
    }
}

/// Each matched row's verdict for JUnit.
pub fn junit_cases(c: &Comparison) -> Vec<crate::export::junit::Case> {
    c.changes
        .iter()
        .map(|ch| {
            let name = with_peer(ch.metric.clone(), ch.peer.as_deref(), ch.instance);
            let (r, ci) = match (ch.judged_on, ch.overhead_change) {
                ("overhead", Some(r)) => (r, ch.overhead_change_ci95),
                _ => (ch.ratio, ch.ci95),
            };
            crate::export::junit::Case {
                group: format!("{} / {}", ch.environment, ch.workload),
                name,
                verdict: ch.verdict,
                kind: junit_kind(ch.verdict),
                detail: format!(
                    "{} B/A {} (95 % CI), {} → {} {}; a change matters from {} %",
                    ch.judged_on,
                    ratio_text(r, ci),
                    fmt_num(ch.a_mean),
                    fmt_num(ch.b_mean),
                    ch.unit,
                    fmt_num(c.threshold_pct)
                ),
            }
        })
        .collect()
}

/// "×1.120 [1.050, 1.190]", or "×1.120 (no interval)".
pub fn ratio_text(r: f64, ci: Option<[f64; 2]>) -> String {
    match ci {
        Some([l, h]) => format!("×{r:.3} [{l:.3}, {h:.3}]"),
        None => format!("×{r:.3} (no interval)"),
    }
}

pub fn render(c: &Comparison) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_HORIZONTAL_ONLY).set_content_arrangement(ContentArrangement::Dynamic).set_width(100);
    t.set_header(vec![
        "environment / workload / metric",
        "A",
        "B",
        "B/A [95% CI]",
        "overhead B/A [95% CI]",
        "verdict",
    ]);
    for ch in &c.changes {
        let what = with_peer(
            format!("{} / {}\n  {} ({})", ch.environment, ch.workload, ch.metric, ch.unit),
            ch.peer.as_deref(),
            ch.instance,
        );
        let ci = match ch.ci95 {
            Some([l, h]) => format!("×{:.3} [{:.3}, {:.3}]", ch.ratio, l, h),
            None => format!("×{:.3} ({})", ch.ratio, ch.no_ci.unwrap_or("no CI")),
        };
        let verdict = match ch.verdict {
            "regression" => "REGRESSION",
            v => v,
        };
        let oc = match (ch.overhead_change, ch.overhead_change_ci95) {
            (Some(r), Some([l, h])) => format!("×{r:.3} [{l:.3}, {h:.3}]"),
            (Some(r), None) => format!("×{r:.3} (no CI)"),
            (None, _) => "— (baseline)".to_string(),
        };
        let mark = |s: String, on: bool| if on { format!("{s} ◀") } else { s };
        t.add_row(vec![
            Cell::new(what),
            Cell::new(fmt_num(ch.a_mean)),
            Cell::new(fmt_num(ch.b_mean)),
            Cell::new(mark(ci, ch.judged_on == "mean")),
            Cell::new(mark(oc, ch.judged_on == "overhead")),
            Cell::new(verdict),
        ]);
    }
    let mut out = format!("A = {}\nB = {}\n{t}\n◀ = what the verdict rests on\n", c.a, c.b);
    out += &crate::report::wrap(
        &format!(
            "{} regression(s), {} improvement(s) beyond noise (the ratio's 95 % CI excludes 1) and beyond {} %; {} inconclusive (a change of {} % neither shown nor ruled out); {} matched, {} only in A, {} only in B",
            c.regressions,
            c.improvements,
            c.threshold_pct,
            c.inconclusive,
            c.threshold_pct,
            c.changes.len(),
            c.only_in_a.len(),
            c.only_in_b.len()
        ),
        100,
    );
    if let Some(m) = c.baseline_median_change {
        out += &crate::report::wrap(
            &format!(
                "the baseline itself moved ({} of its rows, median ×{m:.3}): the host changed between the runs; the other environments are judged on their overhead relative to it (--raw judges every mean)",
                c.baseline_moved
            ),
            100,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(env: &str, mean: f64, stdev: f64, better: &'static str) -> ResultRow {
        crate::report::test_row(env, mean, stdev, better)
    }

    fn rep(rows: Vec<ResultRow>) -> Report {
        let mut r = crate::report::summary_test_report();
        r.results = rows;
        r
    }

    #[test]
    fn slower_beyond_noise_and_threshold_is_a_regression() {
        let a = rep(vec![
            row("c", 10.0, 0.2, "lower"),
            row("n", 10.0, 0.2, "lower"),
            row("x", 5.0, 0.1, "higher"),
        ]);
        let b = rep(vec![
            row("c", 20.0, 0.2, "lower"),
            row("n", 10.1, 0.2, "lower"),
            row("y", 1.0, 0.1, "higher"),
        ]);
        let c = compare(&a, "a", &b, "b", 5.0, true);
        assert_eq!(c.changes.len(), 2);
        assert_eq!(c.changes[0].verdict, "regression");
        assert!((c.changes[0].ratio - 2.0).abs() < 1e-9);
        assert_eq!(c.changes[1].verdict, "no change", "{:?}", c.changes[1].ci95);
        assert_eq!((c.regressions, c.only_in_a.len(), c.only_in_b.len()), (1, 1, 1));
        // Faster on a lower-is-better metric: an improvement; a small real change: `changed`.
        let b2 = rep(vec![row("c", 5.0, 0.1, "lower"), row("n", 10.3, 0.01, "lower")]);
        let a2 = rep(vec![row("c", 10.0, 0.2, "lower"), row("n", 10.0, 0.01, "lower")]);
        let c2 = compare(&a2, "a", &b2, "b", 5.0, true);
        assert_eq!(c2.changes[0].verdict, "improvement");
        // 3 % slower, surely (×1.03 [1.029, 1.031]), but under the 5 % that matters: no change.
        assert_eq!(c2.changes[1].verdict, "no change");
        assert!(render(&c2).contains("0 regression(s), 1 improvement(s)"));
        assert!(render(&c2).lines().all(|l| l.chars().count() <= 100), "{}", render(&c2));
    }

    #[test]
    fn a_host_that_slowed_down_as_a_whole_is_not_a_regression_of_every_environment() {
        let with = |mut r: ResultRow, ratio: f64| {
            r.overhead =
                Some(crate::report::Overhead::unpaired(ratio, Some([ratio * 0.97, ratio * 1.03]), None));
            r
        };
        let mut a = rep(vec![row("native", 10.0, 0.2, "lower"), with(row("c", 12.0, 0.2, "lower"), 1.2)]);
        let mut b = rep(vec![row("native", 13.0, 0.2, "lower"), with(row("c", 15.6, 0.2, "lower"), 1.2)]);
        a.baselines = vec!["native".into()];
        b.baselines = vec!["native".into()];
        let c = compare(&a, "a", &b, "b", 5.0, false);
        assert_eq!((c.regressions, c.baseline_moved), (0, 1), "{:#?}", c.changes);
        assert_eq!(c.changes[1].judged_on, "overhead");
        assert!((c.baseline_median_change.unwrap() - 1.3).abs() < 1e-9);
        assert!(render(&c).contains("the baseline itself moved"));
        // The container's own overhead doubling is still a regression.
        let b2 = rep(vec![row("native", 13.0, 0.2, "lower"), with(row("c", 31.2, 0.2, "lower"), 2.4)]);
        let c2 = compare(&a, "a", &b2, "b", 5.0, false);
        assert_eq!(c2.changes[1].verdict, "regression");
        // --raw: both rows are regressions of their means.
        assert_eq!(compare(&a, "a", &b, "b", 5.0, true).regressions, 2);
    }

    #[test]
    fn verdicts_need_significance_and_size_and_say_when_the_data_cannot_tell() {
        // Beyond noise and beyond 5 %: the direction decides.
        assert_eq!(verdict(1.10, Some([1.06, 1.14]), "lower", 5.0), REGRESSION);
        assert_eq!(verdict(1.10, Some([1.06, 1.14]), "higher", 5.0), IMPROVEMENT);
        assert_eq!(verdict(0.90, Some([0.86, 0.94]), "higher", 5.0), REGRESSION);
        assert_eq!(verdict(1.10, Some([1.06, 1.14]), "none", 5.0), CHANGED);
        // Large but not beyond noise: a 10 % change is not ruled out either.
        assert_eq!(verdict(1.10, Some([0.95, 1.27]), "lower", 5.0), INCONCLUSIVE);
        // Beyond noise but small, and the interval rules out 5 %: no change.
        assert_eq!(verdict(1.02, Some([1.01, 1.03]), "lower", 5.0), NO_CHANGE);
        // Beyond noise, small, yet 7 % not ruled out: inconclusive.
        assert_eq!(verdict(1.04, Some([1.01, 1.07]), "lower", 5.0), INCONCLUSIVE);
        // A tight interval around 1: no change; the same interval against a 1 % threshold: unclear.
        assert_eq!(verdict(1.0, Some([0.98, 1.02]), "lower", 5.0), NO_CHANGE);
        assert_eq!(verdict(1.0, Some([0.98, 1.02]), "lower", 1.0), INCONCLUSIVE);
        // The point estimate at the threshold counts; no interval is never a verdict.
        assert_eq!(verdict(1.05, Some([1.01, 1.09]), "lower", 5.0), REGRESSION);
        assert_eq!(verdict(3.0, None, "lower", 5.0), INCONCLUSIVE);
        assert_eq!(verdict(f64::NAN, Some([0.9, 1.1]), "lower", 5.0), INCONCLUSIVE);
        use crate::exit::ExitStatus;
        assert_eq!(exit_status(1, 3, true), ExitStatus::Regression);
        assert_eq!(exit_status(0, 3, true), ExitStatus::Inconclusive);
        assert_eq!(exit_status(0, 0, true), ExitStatus::Success);
        assert_eq!(exit_status(2, 3, false), ExitStatus::Success);
    }

    #[test]
    fn runs_against_runs_carry_the_run_to_run_spread() {
        let with = |mut r: ResultRow, ratio: f64| {
            r.overhead =
                Some(crate::report::Overhead::unpaired(ratio, Some([ratio * 0.99, ratio * 1.01]), None));
            r
        };
        let run = |base: f64, ratio: f64| {
            let mut r = rep(vec![
                row("native", base, 0.2, "lower"),
                with(row("c", base * ratio, 0.2, "lower"), ratio),
            ]);
            r.baselines = vec!["native".into()];
            r
        };
        // The host drifts ±10 % run to run; the container's overhead is 2.0 ± 1 % in A, 2.4 in B.
        let a = vec![run(10.0, 2.0), run(11.0, 2.02), run(9.5, 1.98), run(10.4, 2.0)];
        let b = vec![run(10.6, 2.4), run(9.2, 2.41), run(11.1, 2.39), run(10.0, 2.4)];
        let c = compare_runs(&a, "A", &b, "B", 5.0, false);
        let ch = c.changes.iter().find(|c| c.environment == "c").unwrap();
        assert_eq!((ch.judged_on, ch.verdict, ch.a_n, ch.b_n), ("overhead", REGRESSION, 4, 4));
        let [l, h] = ch.overhead_change_ci95.unwrap();
        assert!(l > 1.17 && h < 1.23 && (ch.overhead_change.unwrap() - 1.2).abs() < 0.01, "{ch:?}");
        // Native's means moved within its run-to-run spread: no regression of the baseline.
        let n = c.changes.iter().find(|c| c.environment == "native").unwrap();
        assert_ne!(n.verdict, REGRESSION);
        assert_eq!(c.regressions, 1);
        // The same runs on both sides: no change; one run a side: no interval, inconclusive.
        let same = compare_runs(&a, "A", &a, "A", 5.0, false);
        assert_eq!(same.changes.iter().find(|c| c.environment == "c").unwrap().verdict, NO_CHANGE);
        let one = compare_runs(&a[..1], "A", &b[..1], "B", 5.0, false);
        assert_eq!(one.inconclusive, 2, "{:#?}", one.changes);
        assert_eq!(welch_log_ratio(&[1.0, 2.0], &[0.0]), None);
    }

    #[test]
    fn run_references() {
        let d = Path::new("virtperf.db");
        assert_eq!(parse_ref("3", d).unwrap(), RunRef { db: d.into(), run: Some(3) });
        assert_eq!(parse_ref("old.db:7", d).unwrap(), RunRef { db: "old.db".into(), run: Some(7) });
        assert!(parse_ref("no/such.db", d).unwrap_err().contains("neither"));
    }
}
