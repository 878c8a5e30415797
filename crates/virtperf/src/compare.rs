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
    /// `regression`, `improvement` (both beyond noise and the threshold), `~same`, `changed`
    /// (beyond noise, within the threshold, or a metric with no better direction), or
    /// `baseline moved` (the baseline's own row changed beyond noise and the threshold).
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

fn key(r: &ResultRow) -> (String, String, String, Option<String>, Option<u32>) {
    (r.environment.clone(), r.workload.clone(), r.metric.clone(), r.peer.clone(), r.instance)
}

fn label(r: &ResultRow) -> String {
    let mut s = format!("{} / {} / {}", r.environment, r.workload, r.metric);
    if let Some(p) = &r.peer {
        s += &format!(" → {p}");
    }
    if let Some(i) = r.instance {
        s += &format!(" #{i}");
    }
    s
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
        let beyond_noise = ci.is_some_and(|[l, h]| l > 1.0 || h < 1.0);
        let big = (r - 1.0).abs() * 100.0 >= threshold_pct;
        let worse = match ra.better {
            "higher" => r < 1.0,
            "lower" => r > 1.0,
            _ => false,
        };
        let verdict = match (beyond_noise, big, ra.better) {
            (false, _, _) => "~same",
            (true, true, _) if is_baseline && !raw => "baseline moved",
            (true, true, "higher" | "lower") if worse => "regression",
            (true, true, "higher" | "lower") => "improvement",
            _ => "changed",
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
    let moved: Vec<f64> = changes.iter().filter(|c| c.verdict == "baseline moved").map(|c| c.ratio).collect();
    Comparison {
        a: a_name.into(),
        b: b_name.into(),
        threshold_pct,
        regressions: changes.iter().filter(|c| c.verdict == "regression").count(),
        improvements: changes.iter().filter(|c| c.verdict == "improvement").count(),
        baseline_moved: moved.len(),
        baseline_median_change: (!moved.is_empty()).then(|| virtperf_stats::median(&moved)),
        raw,
        changes,
        only_in_a,
        only_in_b,
    }
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
        let mut what = format!("{} / {}\n  {} ({})", ch.environment, ch.workload, ch.metric, ch.unit);
        if let Some(p) = &ch.peer {
            what += &format!(" → {p}");
        }
        if let Some(i) = ch.instance {
            what += &format!(" #{i}");
        }
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
    out += &format!(
        "{} regression(s), {} improvement(s) beyond noise (the ratio's 95 % CI excludes 1) and beyond {} %; {} matched, {} only in A, {} only in B\n",
        c.regressions,
        c.improvements,
        fmt_num(c.threshold_pct),
        c.changes.len(),
        c.only_in_a.len(),
        c.only_in_b.len()
    );
    if let Some(m) = c.baseline_median_change {
        out += &format!(
            "the baseline itself moved ({} of its rows, median ×{m:.3}): the host changed between the runs; the other environments are judged on their overhead relative to it (--raw judges every mean)\n",
            c.baseline_moved
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
        assert_eq!(c.changes[1].verdict, "~same");
        assert_eq!((c.regressions, c.only_in_a.len(), c.only_in_b.len()), (1, 1, 1));
        // Faster on a lower-is-better metric: an improvement; a small real change: `changed`.
        let b2 = rep(vec![row("c", 5.0, 0.1, "lower"), row("n", 10.3, 0.01, "lower")]);
        let a2 = rep(vec![row("c", 10.0, 0.2, "lower"), row("n", 10.0, 0.01, "lower")]);
        let c2 = compare(&a2, "a", &b2, "b", 5.0, true);
        assert_eq!(c2.changes[0].verdict, "improvement");
        assert_eq!(c2.changes[1].verdict, "changed");
        assert!(render(&c2).contains("0 regression(s), 1 improvement(s)"));
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
    fn run_references() {
        let d = Path::new("virtperf.db");
        assert_eq!(parse_ref("3", d).unwrap(), RunRef { db: d.into(), run: Some(3) });
        assert_eq!(parse_ref("old.db:7", d).unwrap(), RunRef { db: "old.db".into(), run: Some(7) });
        assert!(parse_ref("no/such.db", d).unwrap_err().contains("neither"));
    }
}
