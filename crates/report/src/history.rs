//! `virtperf history`: every stored run of one experiment as a series per metric — each
//! environment's overhead ratio (the baseline's own rows: their means) run after run — with the
//! change points in it and a verdict on the latest run that CI can act on.
//!
//! - **Series.** Rows are matched as `compare` matches them (environment, workload with its
//!   parameters, metric, peer, instance). An environment with a baseline is followed on its
//!   overhead, which cancels what moved the whole host between runs; `--raw` follows every mean.
//! - **Change points.** E-divisive means ([`virtperf_stats::changepoint`], Apache Otava's method)
//!   over each series: each change with its run, the segments' means, the ratio with Fieller's 95 %
//!   interval and its permutation p-value. At least `min_runs` runs a side (default 3), and at
//!   α = 0.05 at least 8 runs in all: a permutation test over 6 or 7 runs cannot reach 5 % however
//!   clean the step ([`shortest_series`]).
//! - **The latest run's verdict.** The newest run against the runs since the last change point (the
//!   current level): the ratio to their geometric mean, with the interval a new run from that level
//!   would fall in (Student's prediction interval on the logs, `t · s · √(1 + 1/k)`, never narrower
//!   than the run's own interval), classified by [`crate::compare::verdict`] — *regression* needs the
//!   interval to exclude 1 and the size to reach `--fail-on`; *no change* needs the interval inside
//!   ±`--fail-on`; otherwise *inconclusive*. With one earlier run, the two runs' own intervals
//!   combined (as `compare` does). A change that the latest run starts cannot be a change point
//!   yet (it needs `min_runs` after it): this verdict is what catches it on the day.

use std::collections::BTreeMap;

use serde::Serialize;
use virtperf_stats::changepoint::{e_divisive, shortest_series, Options as CpOptions};

use crate::compare::{self, key, ratio_text, Key, IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION};
use crate::report::{fmt_num, Report, ResultRow};

/// How the history is judged.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The smallest change that matters, in %.
    pub threshold_pct: f64,
    /// The change points' significance level.
    pub alpha: f64,
    /// The fewest runs either side of a change point.
    pub min_runs: usize,
    /// Every row on its means.
    pub raw: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { threshold_pct: 5.0, alpha: 0.05, min_runs: 3, raw: false }
    }
}

/// One run of the history, oldest first.
#[derive(Debug, Clone, Serialize)]
pub struct RunPoint {
    pub db: String,
    pub run: i64,
    pub name: String,
    pub started_at: String,
}

impl RunPoint {
    pub fn label(&self) -> String {
        format!("{}:{}", self.db, self.run)
    }
}

/// A metric's figure in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Index into [`History::runs`].
    pub run: usize,
    pub value: f64,
    pub ci95: Option<[f64; 2]>,
}

/// A change point of a series.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// The first run at the new level (index into [`History::runs`]).
    pub run: usize,
    pub before: f64,
    pub after: f64,
    /// after / before, with Fieller's 95 % interval.
    pub ratio: f64,
    pub ci95: Option<[f64; 2]>,
    pub p_value: f64,
    /// The change judged like any other: `regression`, `improvement`, `no change` (real but
    /// smaller than what matters), `inconclusive`, `changed` or `baseline moved`.
    pub verdict: &'static str,
}

/// The latest run against the level before it.
#[derive(Debug, Clone, Serialize)]
pub struct Latest {
    pub run: usize,
    /// The runs it is judged against (since the last change point).
    pub against: usize,
    pub ratio: f64,
    pub ci95: Option<[f64; 2]>,
    pub verdict: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub environment: String,
    pub workload: String,
    pub metric: String,
    pub unit: String,
    pub better: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    /// `overhead` (the ratio to the baseline) or `mean`.
    pub judged_on: &'static str,
    pub baseline: bool,
    pub points: Vec<Point>,
    pub changes: Vec<Change>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest: Option<Latest>,
}

impl Series {
    pub fn label(&self) -> String {
        compare::with_peer(
            format!("{} / {} / {}", self.environment, self.workload, self.metric),
            self.peer.as_deref(),
            self.instance,
        )
    }
    fn latest_verdict(&self) -> Option<&'static str> {
        self.latest.as_ref().map(|l| l.verdict)
    }
    /// Worth a line: a change point, or a latest run that is not plainly unchanged.
    pub fn notable(&self) -> bool {
        !self.changes.is_empty() || self.latest_verdict().is_some_and(|v| v != NO_CHANGE)
    }
}

#[derive(Debug, Serialize)]
pub struct History {
    pub name: String,
    pub runs: Vec<RunPoint>,
    pub threshold_pct: f64,
    pub alpha: f64,
    pub min_runs: usize,
    /// The fewest runs in which a change point can be significant ([`shortest_series`]).
    pub shortest: usize,
    pub raw: bool,
    pub series: Vec<Series>,
    /// The latest run's verdicts.
    pub regressions: usize,
    pub improvements: usize,
    pub inconclusive: usize,
    pub no_change: usize,
    /// Change points over all series.
    pub change_points: usize,
    /// Runs left out, and why.
    pub skipped: Vec<String>,
}

/// The overhead's figure of a row, when it has a usable one.
fn overhead_of(r: &ResultRow) -> Option<(f64, Option<[f64; 2]>)> {
    r.overhead.as_ref().filter(|o| o.ratio.is_finite() && o.ratio > 0.0).map(|o| (o.ratio, o.ci95))
}

/// The history of `runs` (oldest first, each with its report).
pub fn build(name: &str, runs: Vec<(RunPoint, Report)>, skipped: Vec<String>, o: &Options) -> History {
    let mut rows: BTreeMap<Key, Vec<(usize, &ResultRow, bool)>> = BTreeMap::new();
    let mut order: Vec<Key> = Vec::new();
    for (i, (_, rep)) in runs.iter().enumerate() {
        for r in &rep.results {
            let k = key(r);
            if !rows.contains_key(&k) {
                order.push(k.clone());
            }
            rows.entry(k).or_default().push((i, r, rep.is_baseline(&r.environment)));
        }
    }
    let mut series = Vec::new();
    for k in order {
        let Some(per_run) = rows.get(&k) else { continue };
        let Some(&(_, first, baseline)) = per_run.first() else { continue };
        let on_overhead = !o.raw && !baseline && per_run.iter().all(|(_, r, _)| overhead_of(r).is_some());
        let points: Vec<Point> = per_run
            .iter()
            .filter_map(|&(run, r, _)| {
                let (value, ci95) = if on_overhead { overhead_of(r)? } else { (r.mean, r.ci95) };
                value.is_finite().then_some(Point { run, value, ci95 })
            })
            .collect();
        let mut s = Series {
            environment: first.environment.clone(),
            workload: first.workload.clone(),
            metric: first.metric.clone(),
            unit: if on_overhead { "×".into() } else { first.unit.clone() },
            better: first.better,
            peer: first.peer.clone(),
            instance: first.instance,
            judged_on: if on_overhead { "overhead" } else { "mean" },
            baseline,
            points,
            changes: Vec::new(),
            latest: None,
        };
        let moved = |v: &'static str| match v {
            REGRESSION | IMPROVEMENT | compare::CHANGED if baseline && !o.raw => "baseline moved",
            v => v,
        };
        let values: Vec<f64> = s.points.iter().map(|p| p.value).collect();
        for c in e_divisive(&values, &cp_options(o)) {
            let ci95 = c.ci95.map(|(l, h)| [l, h]);
            s.changes.push(Change {
                run: s.points[c.index].run,
                before: c.before,
                after: c.after,
                ratio: c.ratio,
                ci95,
                p_value: c.p_value,
                verdict: moved(compare::verdict(c.ratio, ci95, s.better, o.threshold_pct)),
            });
        }
        let level_from =
            s.changes.last().and_then(|c| s.points.iter().position(|p| p.run == c.run)).unwrap_or(0);
        s.latest = latest(&s.points, level_from).map(|(against, ratio, ci95)| Latest {
            run: s.points[s.points.len() - 1].run,
            against,
            ratio,
            ci95,
            verdict: moved(compare::verdict(ratio, ci95, s.better, o.threshold_pct)),
        });
        series.push(s);
    }
    let latest_count = |v: &str| series.iter().filter(|s| s.latest_verdict() == Some(v)).count();
    History {
        name: name.into(),
        regressions: latest_count(REGRESSION),
        improvements: latest_count(IMPROVEMENT),
        inconclusive: latest_count(INCONCLUSIVE),
        no_change: latest_count(NO_CHANGE),
        change_points: series.iter().map(|s| s.changes.len()).sum(),
        runs: runs.into_iter().map(|(p, _)| p).collect(),
        threshold_pct: o.threshold_pct,
        alpha: o.alpha,
        min_runs: o.min_runs,
        shortest: shortest_series(&cp_options(o)),
        raw: o.raw,
        series,
        skipped,
    }
}

/// The change points' search: 999 permutations (a history is short, so they are cheap, and a
/// p-value near α — 0.029 for the cleanest step of 8 runs — needs them to be decided reliably).
fn cp_options(o: &Options) -> CpOptions {
    CpOptions { alpha: o.alpha, min_size: o.min_runs, permutations: 999, ..CpOptions::default() }
}

/// Log half-width of an interval around a positive value.
fn log_half(ci: Option<[f64; 2]>) -> Option<f64> {
    ci.filter(|[l, h]| *l > 0.0 && *h > 0.0 && h >= l).map(|[l, h]| (h.ln() - l.ln()) / 2.0)
}

/// The last point against the points from `from` up to it: (how many, ratio, 95 % interval).
fn latest(points: &[Point], from: usize) -> Option<(usize, f64, Option<[f64; 2]>)> {
    let (last, before) = points.split_last()?;
    let prior = before.get(from..).filter(|p| !p.is_empty()).unwrap_or(before);
    let k = prior.len();
    if k == 0 {
        return None;
    }
    if last.value <= 0.0 || prior.iter().any(|p| p.value <= 0.0) {
        return Some((k, f64::NAN, None));
    }
    let logs: Vec<f64> = prior.iter().map(|p| p.value.ln()).collect();
    let m = logs.iter().sum::<f64>() / k as f64;
    let ratio = (last.value.ln() - m).exp();
    let own = log_half(last.ci95);
    let half = if k == 1 {
        match (log_half(prior[0].ci95), own) {
            (Some(a), Some(b)) => Some((a * a + b * b).sqrt()),
            _ => None,
        }
    } else {
        let s = (logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (k - 1) as f64).sqrt();
        let pred = virtperf_stats::t_quantile(0.95, (k - 1) as f64) * s * (1.0 + 1.0 / k as f64).sqrt();
        Some(own.map_or(pred, |o| o.max(pred)))
    };
    Some((k, ratio, half.filter(|h| h.is_finite()).map(|h| [ratio * (-h).exp(), ratio * h.exp()])))
}

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// One character per run (oldest first), the height the series' value on a log scale between its
/// own lowest and highest; `·` where the run has no figure; `|` before a change point's run.
pub fn sparkline(s: &Series, runs: usize) -> String {
    let vals: Vec<f64> = s.points.iter().map(|p| p.value).filter(|v| *v > 0.0).collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut out = String::new();
    for run in 0..runs {
        if s.changes.iter().any(|c| c.run == run) {
            out.push('|');
        }
        let c = match s.points.iter().find(|p| p.run == run) {
            Some(p) if p.value > 0.0 && hi > lo => {
                let f = (p.value.ln() - lo.ln()) / (hi.ln() - lo.ln());
                SPARKS[((f * 7.0).round() as usize).min(7)]
            }
            Some(_) => SPARKS[3],
            None => '·',
        };
        out.push(c);
    }
    out
}

fn value_text(s: &Series, v: f64) -> String {
    if s.judged_on == "overhead" {
        format!("×{}", fmt_num(v))
    } else {
        format!("{} {}", fmt_num(v), s.unit)
    }
}

fn verdict_text(v: &str) -> String {
    match v {
        REGRESSION => "REGRESSION".into(),
        v => v.into(),
    }
}

/// The answer, sentence by sentence: the runs, the latest run's verdict (its regressions listed),
/// the counts, the change points found (or why none can be). The terminal wraps them, the page
/// lists them.
fn lead(h: &History) -> Vec<String> {
    let n = h.runs.len();
    let mut out: Vec<String> = Vec::new();
    let span = match (h.runs.first(), h.runs.last()) {
        (Some(a), Some(b)) => format!(
            "{} … {}",
            a.started_at.get(..16).unwrap_or(&a.started_at),
            b.started_at.get(..16).unwrap_or(&b.started_at)
        ),
        _ => String::new(),
    };
    out.push(format!("History of \"{}\": {n} run(s), {span}", h.name));
    let latest_label = h.runs.last().map(RunPoint::label).unwrap_or_default();
    let regressions: Vec<&Series> =
        h.series.iter().filter(|s| s.latest_verdict() == Some(REGRESSION)).collect();
    if n < 2 {
        out.push("Only one run: a history needs two or more runs of the experiment.".into());
    } else if !regressions.is_empty() {
        out.push(format!(
            "The latest run ({latest_label}) REGRESSED on {} metric(s) by {} % or more beyond noise:",
            regressions.len(),
            h.threshold_pct
        ));
        for s in regressions.iter().take(8) {
            if let Some(l) = &s.latest {
                out.push(format!("  {}: {}", s.label(), ratio_text(l.ratio, l.ci95)));
            }
        }
    } else {
        out.push(format!(
            "The latest run ({latest_label}): no regression of {} % or more beyond noise.",
            h.threshold_pct
        ));
    }
    if n >= 2 {
        out.push(format!(
            "Latest against the runs since each series' last change: {} regression(s), {} improvement(s), {} no change, {} inconclusive (a {} % change neither shown nor ruled out).",
            h.regressions,
            h.improvements,
            h.no_change,
            h.inconclusive,
            h.threshold_pct
        ));
        if n < h.shortest {
            out.push(format!(
                "Change points need {} runs or more (at p ≤ {} with {} a side): {n} run(s) are too few to find one.",
                h.shortest, h.alpha, h.min_runs
            ));
        } else {
            let regressed: Vec<String> = h
                .series
                .iter()
                .flat_map(|s| {
                    s.changes.iter().filter(|c| c.verdict == REGRESSION).map(move |c| {
                        format!("{} at run {} {}", s.label(), c.run + 1, ratio_text(c.ratio, c.ci95))
                    })
                })
                .collect();
            let which = match regressed.len() {
                0 => String::new(),
                k => format!(
                    "; {k} of them regression(s): {}{}",
                    regressed.iter().take(3).cloned().collect::<Vec<_>>().join("; "),
                    if k > 3 { "; …" } else { "" }
                ),
            };
            out.push(format!(
                "{} change point(s) in {} series (E-divisive means, p ≤ {}){which}.",
                h.change_points,
                h.series.len(),
                h.alpha
            ));
        }
    }
    out
}

/// The terminal's history: the answer first (the latest run's verdicts, the change points), then
/// a row per notable series (`all`: every series) with a sparkline of its runs.
pub fn render(h: &History, all: bool) -> String {
    use crate::report::wrap;
    use comfy_table::{presets::UTF8_HORIZONTAL_ONLY, Cell, ContentArrangement, Table};
    // Indented lines (a list under a sentence) keep their indent when wrapped.
    let w = |s: String| -> String {
        match s.strip_prefix("  ") {
            Some(item) => wrap(item, 98).lines().map(|l| format!("  {l}\n")).collect(),
            None => wrap(s.trim_end_matches('\n'), 100),
        }
    };
    let n = h.runs.len();
    let notable: Vec<&Series> = h.series.iter().filter(|s| s.notable()).collect();
    let mut out: String = lead(h).into_iter().map(w).collect();
    let shown: Vec<&Series> = if all { h.series.iter().collect() } else { notable.clone() };
    if !shown.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_HORIZONTAL_ONLY)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(100);
        t.set_header(vec![
            "environment / workload / metric",
            "runs, oldest → latest",
            "latest",
            "latest vs before [95%]",
            "verdict",
        ]);
        for s in &shown {
            let last = s.points.last().map(|p| value_text(s, p.value)).unwrap_or_default();
            let (vs, verdict) = match &s.latest {
                Some(l) => (ratio_text(l.ratio, l.ci95), verdict_text(l.verdict)),
                None => ("—".into(), "—".into()),
            };
            let what = format!("{} / {}\n  {} ({})", s.environment, s.workload, s.metric, s.judged_on);
            t.add_row(vec![
                Cell::new(what),
                Cell::new(sparkline(s, n)),
                Cell::new(last),
                Cell::new(vs),
                Cell::new(verdict),
            ]);
        }
        out += &format!("{t}\n");
    }
    let with_changes: Vec<&Series> = shown.iter().copied().filter(|s| !s.changes.is_empty()).collect();
    if !with_changes.is_empty() {
        out += "Change points (| in the runs):\n";
        for s in with_changes {
            for c in &s.changes {
                let at = h.runs.get(c.run).map(RunPoint::label).unwrap_or_default();
                out += &w(format!(
                    "  {} at run {} ({at}): {} → {}, {} p = {:.3} — {}\n",
                    s.label(),
                    c.run + 1,
                    value_text(s, c.before),
                    value_text(s, c.after),
                    ratio_text(c.ratio, c.ci95),
                    c.p_value,
                    verdict_text(c.verdict)
                ));
            }
        }
    }
    let quiet = h.series.len() - notable.len();
    if !all && quiet > 0 {
        out += &w(format!("{quiet} more series without a change point and unchanged in the latest run (--all lists them).\n"));
    }
    if !h.skipped.is_empty() {
        out += &w(format!("Left out: {}\n", h.skipped.join("; ")));
    }
    out += &w(format!(
        "Runs: {}\n",
        h.runs
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{} = {}", i + 1, r.label()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out
}

/// Most figures a history page draws (notable metrics first).
const PAGE_FIGURES: usize = 24;

/// `history --html FILE`: the answer, the notable series as a table, and a figure per workload ×
/// metric (one line per environment, every run with its interval, each change point marked).
pub fn page(h: &History) -> String {
    use crate::report::figures::{over_runs, RunLine};
    use crate::report::html::{grid, page, Figs};
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let mut body = format!("<h1>History of “{}”</h1>\n", esc(&h.name));
    body += &format!(
        "<ul class=\"lead\">{}</ul>\n",
        lead(h).iter().map(|l| format!("<li>{}</li>", esc(l.trim()))).collect::<String>()
    );
    let notable: Vec<&Series> = h.series.iter().filter(|s| s.notable()).collect();
    if !notable.is_empty() {
        body += "<div class=\"tw\"><table><tr><th>environment / workload / metric</th><th>judged on</th><th>latest</th><th>latest vs before [95 %]</th><th>verdict</th><th>change points</th></tr>\n";
        for s in &notable {
            let (vs, verdict) = match &s.latest {
                Some(l) => (ratio_text(l.ratio, l.ci95), l.verdict),
                None => ("—".into(), "—"),
            };
            let class = match verdict {
                REGRESSION => "worse",
                IMPROVEMENT => "better",
                _ => "same",
            };
            let changes: Vec<String> = s
                .changes
                .iter()
                .map(|c| format!("run {}: {} ({})", c.run + 1, ratio_text(c.ratio, c.ci95), c.verdict))
                .collect();
            body += &format!(
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{class}\">{}</td><td>{}</td></tr>\n",
                esc(&s.label()),
                s.judged_on,
                esc(&s.points.last().map(|p| value_text(s, p.value)).unwrap_or_default()),
                esc(&vs),
                verdict_text(verdict),
                esc(&changes.join("; "))
            );
        }
        body += "</table></div>\n";
    }
    // One figure per workload × metric, the groups with something to see first.
    let mut groups: Vec<((String, String), Vec<&Series>)> = Vec::new();
    for s in &h.series {
        let k = (s.workload.clone(), s.metric.clone());
        match groups.iter_mut().find(|(gk, _)| *gk == k) {
            Some((_, v)) => v.push(s),
            None => groups.push((k, vec![s])),
        }
    }
    groups.sort_by_key(|(_, v)| !v.iter().any(|s| s.notable()));
    let envs: Vec<&str> = {
        let mut e: Vec<&str> = Vec::new();
        for s in &h.series {
            if !e.contains(&s.environment.as_str()) {
                e.push(&s.environment);
            }
        }
        e
    };
    let mut figs = Figs::new();
    let mut html = String::new();
    for ((workload, metric), ss) in groups.iter().take(PAGE_FIGURES) {
        // Overheads and the baseline's means are different quantities: the figure draws the
        // overheads when the group has any.
        let on: Vec<&&Series> = match ss.iter().any(|s| s.judged_on == "overhead") {
            true => ss.iter().filter(|s| s.judged_on == "overhead").collect(),
            false => ss.iter().collect(),
        };
        let lines: Vec<RunLine> = on
            .iter()
            .map(|s| RunLine {
                name: s.environment.clone(),
                color: envs.iter().position(|e| *e == s.environment).unwrap_or(0),
                points: s.points.iter().map(|p| (p.run + 1, p.value, p.ci95)).collect(),
            })
            .collect();
        let marks: Vec<(usize, String)> = on
            .iter()
            .flat_map(|s| {
                s.changes.iter().map(move |c| (c.run + 1, format!("{} ×{:.2}", s.environment, c.ratio)))
            })
            .collect();
        let y = match on.first() {
            Some(s) if s.judged_on == "overhead" => format!("{metric}, × baseline"),
            Some(s) => format!("{metric} ({})", s.unit),
            None => metric.clone(),
        };
        html += &figs.add(over_runs(
            &format!("history-{workload}-{metric}"),
            &format!("{workload}: {metric} run after run"),
            &y,
            h.runs.len(),
            &lines,
            &marks,
        ));
    }
    body += &grid(&html);
    if groups.len() > PAGE_FIGURES {
        body += &format!(
            "<p class=\"muted\">{} more workload × metric figures left out (`--json` has every series).</p>\n",
            groups.len() - PAGE_FIGURES
        );
    }
    body += &format!(
        "<p class=\"muted\">Runs: {}</p>\n",
        esc(&h
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{} = {} ({})", i + 1, r.label(), r.started_at))
            .collect::<Vec<_>>()
            .join(", "))
    );
    page(&format!("virtperf history — {}", h.name), &body)
}

/// Each series' latest verdict for JUnit.
pub fn junit_cases(h: &History) -> Vec<crate::export::junit::Case> {
    h.series
        .iter()
        .filter_map(|s| {
            let l = s.latest.as_ref()?;
            let name = compare::with_peer(s.metric.clone(), s.peer.as_deref(), s.instance);
            Some(crate::export::junit::Case {
                group: format!("{} / {}", s.environment, s.workload),
                name,
                verdict: l.verdict,
                kind: compare::junit_kind(l.verdict),
                detail: format!(
                    "{} of the latest run against the {} run(s) before it since the last change: {}; a change matters from {} %",
                    s.judged_on,
                    l.against,
                    ratio_text(l.ratio, l.ci95),
                    h.threshold_pct
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{test_row, Overhead};
    use virtperf_stats::sim::Rng;

    /// Runs of a native and a container, the container's overhead drawn around `level(i)` with a
    /// CV of 2 % (and native's mean around 10 with its own noise).
    fn runs(n: usize, level: impl Fn(usize) -> f64, seed: u64) -> Vec<(RunPoint, Report)> {
        let mut rng = Rng(seed);
        (0..n)
            .map(|i| {
                let mut rep = crate::report::summary_test_report();
                rep.baselines = vec!["native".into()];
                let base = rng.normal(10.0, 0.5);
                let ratio = level(i) * rng.normal(1.0, 0.02);
                let mut c = test_row("container", base * ratio, 0.1, "lower");
                c.overhead = Some(Overhead::unpaired(ratio, Some([ratio * 0.98, ratio * 1.02]), None));
                rep.results = vec![test_row("native", base, 0.2, "lower"), c];
                let p = RunPoint {
                    db: "h.db".into(),
                    run: i as i64 + 1,
                    name: "t".into(),
                    started_at: format!("2026-11-{:02}T10:00:00Z", i + 1),
                };
                (p, rep)
            })
            .collect()
    }

    fn container(h: &History) -> &Series {
        h.series.iter().find(|s| s.environment == "container").unwrap()
    }

    #[test]
    fn a_step_is_found_at_its_run_and_a_regression_in_the_latest_run_is_judged_on_the_day() {
        // 10 % slower from run 7 of 12: one change point at run index 6, a regression.
        let h = build("t", runs(12, |i| if i < 6 { 2.0 } else { 2.2 }, 3), vec![], &Options::default());
        let c = container(&h);
        assert_eq!(c.judged_on, "overhead");
        assert_eq!(c.changes.len(), 1, "{:#?}", c.changes);
        assert_eq!(c.changes[0].run, 6);
        assert!((c.changes[0].ratio - 1.1).abs() < 0.03, "{}", c.changes[0].ratio);
        assert_eq!(c.changes[0].verdict, REGRESSION);
        // The latest run is at the new level, judged against the 5 runs since the change: one
        // new run at a 2 % CV cannot rule out 5 % (t₄ · 2 % · √1.2 ≈ 6 %), but it can rule out 10 %.
        assert_eq!(c.latest.as_ref().unwrap().against, 5);
        assert_eq!(c.latest.as_ref().unwrap().verdict, INCONCLUSIVE, "{:?}", c.latest);
        let ten = Options { threshold_pct: 10.0, ..Options::default() };
        let h10 = build("t", runs(12, |i| if i < 6 { 2.0 } else { 2.2 }, 3), vec![], &ten);
        assert_eq!(
            container(&h10).latest.as_ref().unwrap().verdict,
            NO_CHANGE,
            "{:?}",
            container(&h10).latest
        );
        // Native's mean wandered 5 % run to run: it is the baseline, never a regression.
        let native = h.series.iter().find(|s| s.environment == "native").unwrap();
        assert!(native.baseline && native.judged_on == "mean");
        assert_eq!(h.regressions, 0);
        // A 30 % jump in the last run only: too late for a change point, caught by the verdict.
        let h = build("t", runs(10, |i| if i == 9 { 2.6 } else { 2.0 }, 5), vec![], &Options::default());
        let c = container(&h);
        assert!(c.changes.is_empty());
        let l = c.latest.as_ref().unwrap();
        assert_eq!((l.against, l.verdict), (9, REGRESSION), "{l:?}");
        assert!((l.ratio - 1.3).abs() < 0.05 && l.ci95.unwrap()[0] > 1.05, "{l:?}");
        assert_eq!(h.regressions, 1);
        let text = render(&h, false);
        assert!(text.contains("REGRESSED on 1 metric(s)"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    }

    #[test]
    fn noise_alone_gives_no_change_point_and_no_regression() {
        let mut false_changes = 0;
        let mut regressions = 0;
        for seed in 0..40 {
            let h = build("t", runs(15, |_| 2.0, 100 + seed), vec![], &Options::default());
            false_changes += container(&h).changes.len();
            regressions += h.regressions;
        }
        // α 5 % per series; the latest's prediction interval is at 95 % but a regression also
        // needs 5 % of size at a 2 % CV: neither may fire more than a few times in 40.
        assert!(false_changes <= 4, "{false_changes} change points in 40 noise-only series");
        assert!(regressions <= 1, "{regressions} regressions in 40 noise-only series");
    }

    #[test]
    fn too_few_runs_say_so_and_one_earlier_run_uses_both_intervals() {
        let h = build("t", runs(2, |i| if i == 0 { 2.0 } else { 2.4 }, 9), vec![], &Options::default());
        let l = container(&h).latest.clone().unwrap();
        assert_eq!(l.against, 1);
        // ±2 % each side combined: ±2.8 %, around a 20 % change.
        let [lo, hi] = l.ci95.unwrap();
        assert!(lo > 1.1 && hi < 1.35, "{l:?}");
        assert_eq!(l.verdict, REGRESSION);
        let text = render(&h, false);
        assert!(text.contains("too few to find one"), "{text}");
        let one = build("t", runs(1, |_| 2.0, 9), vec![], &Options::default());
        assert!(container(&one).latest.is_none());
        assert!(render(&one, false).contains("Only one run"));
    }

    #[test]
    fn sparkline_marks_runs_levels_and_changes() {
        let h = build("t", runs(8, |i| if i < 4 { 1.0 } else { 4.0 }, 1), vec![], &Options::default());
        let c = container(&h);
        let line = sparkline(c, 8);
        assert_eq!(line.chars().count(), 8 + c.changes.len());
        assert!(line.starts_with('▁') || line.starts_with('▂'), "{line}");
        assert!(line.contains("|▇") || line.contains("|█"), "{line}");
        // A run without the metric is a dot.
        let mut s = c.clone();
        s.points.remove(2);
        assert_eq!(sparkline(&s, 8).chars().nth(2), Some('·'));
    }
}
