//! `virtperf report --html FILE`: one self-contained page (inline CSS and SVG, no fetch of any
//! kind: a Content-Security-Policy forbids it) that opens offline, follows the reader's light or
//! dark setting and prints.
//!
//! The page is built around the questions a reader asks, answer first: what each environment
//! costs, per workload family, in sentences and in one overview figure; then one figure per
//! question (a family's workloads, a workload's samples, RFC 2544 against frame size, N instances
//! per count, a disk matrix), never one per metric: the same quantity in other units is drawn
//! once. The data each figure receives is prepared here by small functions with unit tests;
//! `figures.rs` draws.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use virtperf_record::Family;

use super::costs::{case_short, cost_rows, family_costs, CostRow, FamilyCost};
use super::figures::{self, Bar, Dot, DotRow, Figure, Line, Stack, Strip};
use super::{fmt_num, mean_text, trial_values, Report, ResultRow};
use virtperf_record::store::{RunRows, TrialStatus};

/// The page and its figures (for `--svg DIR` and `--png DIR`).
pub struct Page {
    pub html: String,
    pub figures: Vec<Figure>,
}

/// Samples of one workload case × metric, per environment: (value, flagged as outlier).
pub type SampleGroups = Vec<(String, Vec<(f64, bool)>)>;
/// (workload case, metric, unit) of a group of samples.
pub type SampleKey = (String, String, String);
/// Points of one (environment, direction) against frame size.
pub type DirSeries = Vec<((String, String), Vec<(f64, f64)>)>;

/// Every measured (not warm-up, not failed) sample per workload case and metric, per
/// environment, with the median/MAD outliers the statistics flag.
pub fn sample_groups(rows: &RunRows) -> Result<Vec<(SampleKey, SampleGroups)>> {
    let (envs, cases) = (&rows.envs, &rows.cases);
    // (case, metric) → (unit, environment → values)
    type PerEnv = BTreeMap<usize, Vec<f64>>;
    let mut by: BTreeMap<(usize, String), (String, PerEnv)> = BTreeMap::new();
    for t in &rows.trials {
        if t.warmup || t.status != TrialStatus::Ok || t.peer_idx.is_some() {
            continue;
        }
        for (metric, unit, v) in trial_values(t) {
            by.entry((t.case_idx, metric))
                .or_insert_with(|| (unit, BTreeMap::new()))
                .1
                .entry(t.env_idx)
                .or_default()
                .push(v);
        }
    }
    let mut out = Vec::new();
    for ((case, metric), (unit, per_env)) in by {
        if !cases[case].record.is_headline(&metric) {
            continue;
        }
        let groups: SampleGroups = per_env
            .into_iter()
            .map(|(e, vals)| {
                let flagged = virtperf_stats::mad_outliers(&vals, virtperf_stats::OUTLIER_Z);
                let marked = vals.iter().enumerate().map(|(i, v)| (*v, flagged.contains(&i))).collect();
                (envs[e].name.clone(), marked)
            })
            .collect();
        out.push(((cases[case].label.clone(), metric, unit), groups));
    }
    Ok(out)
}

/// RFC 2544 against frame size: per environment and direction, the throughput (frames/s, its
/// NDR; the mean of repeated sizes) and the mean latency; and the theoretical maximum per size.
pub struct Rfc2544Lines {
    /// ((environment, direction), points)
    pub throughput: DirSeries,
    pub latency: DirSeries,
    pub line_max: Vec<(f64, f64)>,
    /// RFC 9971 MLRsearch's NDR conditional throughput (the mean of repeated sizes).
    pub mlr: DirSeries,
}

pub fn rfc2544_lines(rows: &[super::rfc2544::Row]) -> Rfc2544Lines {
    type Acc = BTreeMap<(String, String), BTreeMap<u64, (f64, usize)>>;
    let (mut fps, mut lat, mut mlr): (Acc, Acc, Acc) = Default::default();
    let mut max: BTreeMap<u64, f64> = BTreeMap::new();
    for r in rows {
        let key = (r.environment.clone(), r.direction.clone());
        if let Some(t) = r.mlr_ndr_fps {
            let e = mlr.entry(key.clone()).or_default().entry(r.frame_size).or_default();
            e.0 += t;
            e.1 += 1;
        }
        if let Some(t) = r.ndr_fps.or(r.pdr_fps) {
            let e = fps.entry(key.clone()).or_default().entry(r.frame_size).or_default();
            e.0 += t;
            e.1 += 1;
        }
        if let Some(m) = r.latency.get("mean_us").and_then(|v| v.as_f64()) {
            let e = lat.entry(key).or_default().entry(r.frame_size).or_default();
            e.0 += m;
            e.1 += 1;
        }
        if r.line_max_fps > 0.0 {
            max.insert(r.frame_size, r.line_max_fps);
        }
    }
    let fold = |m: Acc| {
        m.into_iter()
            .map(|(k, pts)| (k, pts.into_iter().map(|(x, (s, n))| (x as f64, s / n as f64)).collect()))
            .collect()
    };
    Rfc2544Lines {
        throughput: fold(fps),
        latency: fold(lat),
        mlr: fold(mlr),
        line_max: max.into_iter().map(|(x, y)| (x as f64, y)).collect(),
    }
}

/// CPU use over one trial, per role, as % of one CPU between consecutive samples.
pub fn cpu_percent(series: &[(String, f64, i64)]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut by: BTreeMap<&str, Vec<(f64, i64)>> = BTreeMap::new();
    for (role, ms, ns) in series {
        by.entry(role.as_str()).or_default().push((*ms, *ns));
    }
    by.into_iter()
        .map(|(role, pts)| {
            let line = pts
                .windows(2)
                .filter(|w| w[1].0 > w[0].0)
                .map(|w| (w[1].0, (w[1].1 - w[0].1) as f64 / ((w[1].0 - w[0].0) * 1e6) * 100.0))
                .collect();
            (role.to_string(), line)
        })
        .collect()
}

use super::svg::esc;

fn slug(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').chars().take(80).collect()
}

/// Collects figures; a figure that cannot be drawn becomes a visible note, not a failed report.
/// Figures of one section go into one grid (two columns where they fit).
#[derive(Default)]
pub struct Figs {
    all: Vec<Figure>,
    used: BTreeMap<String, usize>,
}

impl Figs {
    pub fn new() -> Figs {
        Figs::default()
    }
    pub fn add(&mut self, made: Result<Figure, String>) -> String {
        match made {
            Ok(mut f) => {
                let base = slug(&f.id);
                let n = self.used.entry(base.clone()).or_insert(0);
                *n += 1;
                f.id = if *n > 1 { format!("{base}-{n}") } else { base };
                let html = format!(
                    "<figure id=\"fig-{}\" class=\"fig\" data-key=\"{}\">{}<figcaption>{}</figcaption></figure>\n",
                    f.id,
                    f.data_key,
                    f.svg,
                    esc(&f.title)
                );
                self.all.push(f);
                html
            }
            Err(e) => format!("<p class=\"warn\">figure not drawn: {}</p>\n", esc(&e)),
        }
    }
}

pub fn grid(figs: &str) -> String {
    if figs.is_empty() {
        String::new()
    } else {
        format!("<div class=\"figs\">\n{figs}</div>\n")
    }
}

const STYLE: &str = r#"
:root{--fg:#161616;--bg:#ffffff;--muted:#555;--line:#cfd4da;--head:#eef3f8;--accent:#0072b2;--good:#00734d;--bad:#b3261e;--grid:#e2e5e9;--band:#f3f5f8;--ax:#555}
@media (prefers-color-scheme:dark){:root{--fg:#e6e6e6;--bg:#15171a;--muted:#a9afb6;--line:#3a3f45;--head:#22272d;--accent:#56b4e9;--good:#4cc38a;--bad:#ff8a80;--grid:#2c3137;--band:#1c2024;--ax:#aab}}
html{background:var(--bg);color:var(--fg)}
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1180px;padding:1em 24px;background:var(--bg);color:var(--fg)}
h1{font-size:1.5em;margin:.2em 0}h2{border-bottom:2px solid var(--accent);padding-bottom:.15em;margin-top:1.8em}h3{margin:1.3em 0 .4em}h1,h2,h3,p,li,figcaption{overflow-wrap:break-word}
a{color:var(--accent)}
.lead{font-size:1.05em;max-width:72em}.lead li{margin:.35em 0}
.figs{display:grid;grid-template-columns:1fr;gap:18px 24px;align-items:start}
figure.fig{margin:0;break-inside:avoid;min-width:0}
figure.fig svg{width:100%;height:auto;display:block}
figcaption{font-size:.9em;color:var(--muted);margin-top:.2em}
.tw{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
td,th{border:1px solid var(--line);padding:.25em .5em;text-align:left;vertical-align:top}td{overflow-wrap:break-word}
th{background:var(--head)}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{overflow-wrap:anywhere}
.better{color:var(--good)}.worse{color:var(--bad)}.same{color:var(--muted)}
.caveats{border-left:4px solid var(--bad);background:var(--band);padding:.4em 1em;margin:.8em 0}.caveats ul{margin:.3em 0;padding-left:1.2em}
table.matrix td.v{white-space:nowrap;text-align:center;overflow-wrap:normal}table.matrix th{white-space:nowrap}
table.matrix td.worse{background:color-mix(in srgb,var(--bad) 16%,var(--bg));color:var(--fg)}table.matrix td.better{background:color-mix(in srgb,var(--good) 16%,var(--bg));color:var(--fg)}table.matrix td.same{background:var(--band);color:var(--fg)}table.matrix td.unclear{color:var(--muted)}table.matrix td.base{font-variant-numeric:tabular-nums}
.warn{color:var(--bad)}.muted{color:var(--muted);font-size:.9em}
nav a{margin-right:1em;display:inline-block}
svg .bg{fill:var(--bg)}svg .band{fill:var(--band)}svg text.t{fill:var(--fg)}svg .grid{stroke:var(--grid)}svg .ax{stroke:var(--ax)}svg .ref{stroke:var(--fg)}svg .hollow{fill:var(--bg)}svg .mark{stroke:var(--fg)}
@media print{:root{--fg:#000;--bg:#fff;--muted:#444;--line:#bbb;--head:#eee;--grid:#e5e5e5;--band:#f5f5f5;--ax:#555}body{max-width:none;font-size:11px;padding:0}nav{display:none}.figs{grid-template-columns:1fr 1fr}figure.fig,table{break-inside:avoid}}
"#;

/// Runs in the browser after load and writes what a reader (or the headless test) would check
/// into attributes of `<body>`: figures drawn to a non-empty box, the smallest figure text as
/// rendered (px), the widest figure and whether anything runs past the page's right edge, two
/// figures drawing the same data (their data keys), and texts of one figure printed over each
/// other.
const CHECK_SCRIPT: &str = r#"addEventListener('load',function(){var d=document,b=d.body,W=d.documentElement.clientWidth,f=d.querySelectorAll('figure.fig svg'),ok=0,minT=1e9,maxR=0,keys={},dup=0,ov=0,ex='';for(var i=0;i<f.length;i++){var s=f[i],bb=s.getBBox(),r=s.getBoundingClientRect();if(bb.width>0&&bb.height>0&&s.childElementCount>0){ok++;s.parentNode.setAttribute('data-drawn','1')}maxR=Math.max(maxR,r.right);var k=s.parentNode.getAttribute('data-key');if(keys[k]){dup++;ex=ex||('same data: '+keys[k]+' and '+s.parentNode.id)}keys[k]=s.parentNode.id;var t=s.querySelectorAll('text'),rs=[];for(var j=0;j<t.length;j++){var q=t[j].getBoundingClientRect();if(q.height>0){minT=Math.min(minT,q.height);rs.push([q,t[j].textContent])}}for(var a=0;a<rs.length;a++)for(var c=a+1;c<rs.length;c++){var p=rs[a][0],o=rs[c][0],w=Math.min(p.right,o.right)-Math.max(p.left,o.left),h=Math.min(p.bottom,o.bottom)-Math.max(p.top,o.top);if(w>2&&h>2){ov++;ex=ex||('overlap in '+s.parentNode.id+': '+rs[a][1]+' / '+rs[c][1])}}}var wide=0,all=d.querySelectorAll('body *');for(var n=0;n<all.length;n++){var e=all[n];if(e.closest('.tw'))continue;if(e.getBoundingClientRect().right>W+1){wide++;ex=ex||('past the right edge: '+e.tagName+' '+(e.id||e.className||''))}}b.setAttribute('data-figures',f.length+'/'+ok);b.setAttribute('data-min-text-px',f.length?minT.toFixed(1):'none');b.setAttribute('data-max-right',Math.round(maxR)+'/'+W);b.setAttribute('data-duplicates',dup);b.setAttribute('data-overlaps',ov);b.setAttribute('data-overflow',wide+(d.documentElement.scrollWidth>W+1?1:0));b.setAttribute('data-example',ex)});"#;

/// Builds the page of the run read into `rows`, whose report is `r`.
pub fn render(rows: &RunRows, r: &Report) -> Result<Page> {
    let mut figs = Figs::new();
    let colors: BTreeMap<String, usize> =
        r.environments.iter().enumerate().map(|(i, e)| (e.name.clone(), i)).collect();
    let color = |env: &str| colors.get(env).copied().unwrap_or(0);
    let mut body = header(r);
    body += &super::answer::render_html(r);
    let costs = cost_rows(&r.results);
    body += &answer(r, &costs, &mut figs, &color);
    body += &family_sections(&costs, super::answer::target(r), &mut figs, &color);
    body += &by_host(r);
    body += &workloads(rows, r, &mut figs, &color)?;
    body += &network(rows, r, &mut figs, &color)?;
    body += &services(r, &mut figs, &color);
    body += &rfc2544(r, &mut figs, &color);
    body += &pairs(r, &mut figs);
    body += &instances(r, &mut figs, &color);
    body += &disk(r, &mut figs);
    body += &timers(r, &mut figs, &color);
    body += &explain(r, &mut figs);
    body += &failures(r);
    body += &host(r);
    body += "<p class=\"muted\">mean ± 95 % CI half-width; ×ratio to the baseline [Fieller CI at the level the notes state]; cost = times the baseline's time (or its rate over this one's), so above 1 is slower whichever way the metric points. Raw samples: <code>virtperf export</code>.</p>\n";
    let html = page(&format!("virtperf run {} — {}", r.run_id, r.name), &body);
    Ok(Page { html, figures: figs.all })
}

/// A whole page around `body` with the report's style and the script the headless checks read
/// (`history --html` uses it too); `title` is escaped here.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"color-scheme\" content=\"light dark\">\n<title>{}</title>\n<style>{STYLE}</style>\n<script>{CHECK_SCRIPT}</script>\n</head><body>\n{body}</body></html>\n",
        esc(title)
    )
}

fn header(r: &Report) -> String {
    let mut h = format!(
        "<h1>virtperf run {} — {}</h1>\n<p class=\"muted\">{} · started {} · finished {} · {} ok, {} failed, {} skipped, {} pending ({} warm-up not counted) · baseline {}</p>\n",
        r.run_id,
        esc(&r.name),
        esc(r.status.as_str()),
        esc(&r.started_at),
        esc(r.finished_at.as_deref().unwrap_or("—")),
        r.trials.ok,
        r.trials.failed,
        r.trials.skipped,
        r.trials.pending,
        r.trials.warmup,
        esc(&if r.baselines.is_empty() { "none".to_string() } else { r.baselines.join(", ") })
    );
    h += "<nav><a href=\"#answer\">Answer</a><a href=\"#workloads\">Workloads</a>";
    let sections = [
        (!r.by_host.is_empty(), "hosts", "By host"),
        (r.results.iter().any(|x| x.metric == virtperf_record::store::CPU_PER_GBIT), "network", "CPU cost"),
        (!r.rfc2544.is_empty(), "rfc2544", "RFC 2544"),
        (r.results.iter().any(|x| x.peer.is_some()), "pairs", "All pairs"),
        (!r.instances.is_empty(), "instances", "Instances"),
        (!r.disk.is_empty(), "disk", "Disk"),
        (!r.timers.is_empty(), "timers", "Timers"),
        (true, "failures", "Failures"),
        (true, "host", "Host"),
    ];
    for (on, id, name) in sections {
        if on {
            let _ = write!(h, "<a href=\"#{id}\">{name}</a>");
        }
    }
    h + "</nav>\n"
}

/// The answer first: per environment, in sentences, what it costs per family (with the
/// interval), its worst and best case, what failed or was limited by something other than it;
/// then the overview figure of the same numbers.
fn answer(r: &Report, rows: &[CostRow], figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> String {
    let mut out = String::from("<h2 id=\"answer\">The answer: what each environment costs</h2>\n");
    let others: Vec<String> =
        r.environments.iter().map(|e| e.name.clone()).filter(|e| !r.is_baseline(e)).collect();
    let fam = family_costs(rows, &others);
    let t = super::answer::target(r);
    if let Some(b) = &r.natural_baseline {
        let _ = writeln!(
            out,
            "<p>No native environment in this run: each instance count is compared with N = 1 of its group, and each group's first environment with <b>{}</b>, the run's first.</p>",
            esc(b)
        );
    }
    if rows.is_empty() {
        out += "<p class=\"muted\">No ratios: the run has a single environment, or no headline metric was measured in two of them. The workloads' figures follow.</p>\n";
    }
    out += "<ul class=\"lead\">\n";
    for e in &others {
        let mine: Vec<&FamilyCost> = fam.iter().filter(|f| f.environment == *e).collect();
        let failed: usize = r.failures.iter().filter(|f| f.environment == *e).map(|f| f.count).sum();
        if mine.is_empty() && failed == 0 {
            continue;
        }
        let base = base_name(r, e);
        let mut s = format!("<li><b>{}</b> against {}: ", esc(e), esc(base));
        let parts: Vec<String> = mine
            .iter()
            .map(|f| {
                let n = if f.n > 1 { format!(" ({} workloads, geometric mean)", f.n) } else { String::new() };
                match super::answer::family_verdict(rows, f, t) {
                    (_, Some(why)) => format!("{} inconclusive: {why}{n}", f.family.name()),
                    (v, None) => format!("{} {}{n}", f.family.name(), v.line()),
                }
            })
            .collect();
        s += &esc(&parts.join("; "));
        s += ".";
        // Worst and best among the cells that say something: an inconclusive one is neither.
        let said = |x: &CostRow| super::answer::verdict(x.cost, x.ci, x.eq, t);
        let env_rows: Vec<&CostRow> =
            rows.iter().filter(|x| x.environment == *e && said(x).decided()).collect();
        if env_rows.len() > 1 {
            let worst = env_rows.iter().max_by(|a, b| a.cost.total_cmp(&b.cost));
            let best = env_rows.iter().min_by(|a, b| a.cost.total_cmp(&b.cost));
            if let (Some(w), Some(b)) = (worst, best) {
                let phrase = |x: &CostRow| said(x).phrase(super::answer::Reading::of(x.better));
                let _ = write!(
                    s,
                    " Worst: {} {}. Best: {} {}.",
                    esc(&w.what),
                    esc(&phrase(w)),
                    esc(&b.what),
                    esc(&phrase(b))
                );
            }
        }
        s += &limits(r, e, failed);
        s += "</li>\n";
        out += &s;
    }
    out += "</ul>\n";
    if let Some(p) = &r.precision {
        let within = super::answer::within_target(r);
        let _ = writeln!(
            out,
            "<p class=\"muted\">Precision mode: {} of {} measurements are measured to ±{} % within the budget (a workload's several metrics counted once; its own cells at the {:.1} % level: {} of {} ratios); the tables give each interval.</p>",
            within.0,
            within.1,
            super::svg::tick_text(p.target_percent),
            p.level * 100.0,
            p.met,
            p.cells.len()
        );
        for n in super::order_notes(p) {
            let _ = writeln!(out, "<p class=\"muted\">{}</p>", esc(&n));
        }
    }
    let families: Vec<Family> = {
        let mut v: Vec<Family> = fam.iter().map(|f| f.family).collect();
        v.sort();
        v.dedup();
        v
    };
    if fam.len() > 1 {
        let dot_rows: Vec<DotRow> = families
            .iter()
            .map(|fy| DotRow {
                label: fy.name().to_string(),
                dots: others
                    .iter()
                    .filter_map(|e| fam.iter().find(|f| f.family == *fy && f.environment == *e))
                    .map(|f| Dot {
                        color: color(&f.environment),
                        value: f.cost,
                        ci: f.ci,
                        hollow: false,
                        tip: format!(
                            "{}: {}",
                            f.environment,
                            super::answer::verdict(f.cost, f.ci, f.eq, t).line()
                        ),
                        label: Some(if f.cost >= 9.95 {
                            format!("×{:.0}", f.cost)
                        } else {
                            format!("×{:.2}", f.cost)
                        }),
                    })
                    .collect(),
            })
            .collect();
        let legend: Vec<(String, usize, bool)> =
            others.iter().map(|e| (e.clone(), color(e), false)).collect();
        out += &grid(&figs.add(figures::dots(
            "overview",
            "Cost per workload family: geometric mean of each environment's headline ratios with its interval (log scale; 1 = as the baseline, above 1 slower)",
            "cost (× the baseline)",
            &dot_rows,
            &legend,
            1.0,
        )));
    }
    out
}

/// The environment `env` is compared with: the one its rows' ratios were computed against.
fn base_name<'a>(r: &'a Report, env: &str) -> &'a str {
    r.environments
        .iter()
        .find(|e| e.name == *env)
        .and_then(|e| e.baseline.as_deref())
        .or(r.baselines.first().map(String::as_str))
        .unwrap_or("the baseline")
}

/// What failed, or was limited by something other than the environment, for the lead.
fn limits(r: &Report, env: &str, failed: usize) -> String {
    let mut s = String::new();
    if failed > 0 {
        let first = r.failures.iter().find(|f| f.environment == env);
        let _ = write!(
            s,
            " <span class=\"warn\">{failed} trial{} failed or skipped</span>{}.",
            if failed == 1 { "" } else { "s" },
            first
                .map(|f| format!(" ({}: {})", esc(&f.workload), esc(&short(&f.reason, 140))))
                .unwrap_or_default()
        );
    }
    let all = r.rfc2544.iter().filter(|x| x.environment == env).count();
    let gen = r.rfc2544.iter().filter(|x| x.environment == env && x.tester_limited()).count();
    if gen > 0 {
        let _ = write!(s, " RFC 2544: {gen} of {all} results reached the tester's traffic generator's limit, not the environment's.");
    }
    let tx = r.rfc2544.iter().filter(|x| x.environment == env && x.sender_limited()).count();
    if tx > 0 {
        let _ = write!(
            s,
            " RFC 2544: {tx} of {all} results (direction out) are the environment's own sending limit: the generator runs inside it."
        );
    }
    let clock: Vec<&str> = r
        .results
        .iter()
        .filter(|x| x.environment == env && x.clock_disagrees)
        .map(|x| x.workload.as_str())
        .collect();
    if !clock.is_empty() {
        let _ = write!(s, " Its clock disagreed with the host's on {}.", esc(&clock.join(", ")));
    }
    for l in r.loads.iter().filter(|l| l.environment == env && !l.reached) {
        let _ = write!(
            s,
            " The background load reached {} % of its {} % target.",
            fmt_num(l.achieved_mean),
            fmt_num(l.target_percent)
        );
    }
    s
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// One figure per family with more than one workload row: each workload's headline cost per
/// environment (a family of one row is the overview's row already).
fn family_sections(rows: &[CostRow], t: f64, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> String {
    let mut by: BTreeMap<Family, Vec<&CostRow>> = BTreeMap::new();
    for x in rows {
        by.entry(x.family).or_default().push(x);
    }
    let mut inner = String::new();
    for (fy, xs) in by {
        let mut whats: Vec<&str> = Vec::new();
        for x in &xs {
            if !whats.contains(&x.what.as_str()) {
                whats.push(&x.what);
            }
        }
        if whats.len() < 2 {
            continue;
        }
        let mut envs: Vec<&str> = Vec::new();
        for x in &xs {
            if !envs.contains(&x.environment.as_str()) {
                envs.push(&x.environment);
            }
        }
        let dot_rows: Vec<DotRow> = whats
            .iter()
            .map(|w| DotRow {
                label: w.to_string(),
                dots: xs
                    .iter()
                    .filter(|x| x.what == *w)
                    .map(|x| Dot {
                        color: color(&x.environment),
                        value: x.cost,
                        ci: x.ci,
                        hollow: false,
                        tip: format!(
                            "{} · {}: {}",
                            x.environment,
                            x.what,
                            super::answer::verdict(x.cost, x.ci, x.eq, t).line()
                        ),
                        label: None,
                    })
                    .collect(),
            })
            .collect();
        let legend: Vec<(String, usize, bool)> =
            envs.iter().map(|e| (e.to_string(), color(e), false)).collect();
        inner += &figs.add(figures::dots(
            &format!("cost-{}", fy.name()),
            &format!("{}: each workload's cost (its headline metric), per environment", fy.name()),
            "cost (× the baseline; log scale)",
            &dot_rows,
            &legend,
            1.0,
        ));
    }
    if inner.is_empty() {
        return String::new();
    }
    format!("<h2 id=\"families\">Cost per workload, by family</h2>\n{}", grid(&inner))
}

/// Per workload: its table (every metric, every environment) and its headline samples.
fn workloads(rows: &RunRows, r: &Report, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> Result<String> {
    let mut out = String::from("<h2 id=\"workloads\">Workloads</h2>\n");
    let groups = sample_groups(rows)?;
    let mut cases: Vec<&str> = Vec::new();
    for x in r.results.iter().filter(|x| x.peer.is_none() && x.instance.is_none()) {
        if !cases.contains(&x.workload.as_str())
            && !r.disk.iter().any(|d| x.workload.starts_with(&format!("{} [", d.workload)))
        {
            cases.push(&x.workload);
        }
    }
    for case in cases {
        let _ = writeln!(out, "<h3>{}</h3>", esc(case));
        out += &workload_table(r, case);
        let mut inner = String::new();
        let mine: Vec<&(SampleKey, SampleGroups)> =
            groups.iter().filter(|((c, _, _), _)| c == case).collect();
        for ((_, metric, unit), g) in mine.iter().map(|x| (&x.0, &x.1)) {
            // A metric timed on both clocks is one question: each environment's samples on the
            // clock its table row headlines (the host's for a guest with a clock of its own).
            let twin = format!("{metric}_host");
            if metric.ends_with("_host") && mine.iter().any(|x| format!("{}_host", x.0 .1) == *metric) {
                continue;
            }
            let twin_groups = mine.iter().find(|x| x.0 .1 == twin).map(|x| &x.1);
            let on_host = |env: &str| {
                r.results.iter().any(|x| {
                    x.workload == case
                        && x.metric == *metric
                        && x.environment == env
                        && x.clock == Some("host")
                })
            };
            let strips: Vec<Strip> = g
                .iter()
                .map(|(env, s)| {
                    let samples = match twin_groups.and_then(|t| t.iter().find(|(e, _)| e == env)) {
                        Some((_, h)) if on_host(env) => h.clone(),
                        _ => s.clone(),
                    };
                    Strip { label: env.clone(), color: color(env), samples }
                })
                .collect();
            if strips.iter().all(|x| x.samples.len() <= 1) {
                continue;
            }
            inner += &figs.add(figures::strips(
                &format!("samples-{case}-{metric}"),
                &format!("{case} — {metric}: every sample per environment (× = outlier by median/MAD; box = quartiles)"),
                unit,
                &strips,
            ));
        }
        out += &grid(&inner);
    }
    Ok(out)
}

/// Network: CPU per Gbit moved, and one trial's host CPU over time per environment.
fn network(rows: &RunRows, r: &Report, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> Result<String> {
    let bars: Vec<Bar> = r
        .results
        .iter()
        .filter(|x| {
            x.metric == virtperf_record::store::CPU_PER_GBIT && x.peer.is_none() && x.instance.is_none()
        })
        .map(|x| Bar {
            label: format!("{} · {}", x.environment, case_short(&x.workload)),
            color: color(&x.environment),
            value: x.mean,
            ci: x.ci95,
        })
        .collect();
    if bars.is_empty() {
        return Ok(String::new());
    }
    let inner = figs.add(figures::hbars(
        "cpu-per-gbit",
        "CPU per Gbit moved: host CPU seconds per Gbit, with the 95 % interval",
        "CPU s / Gbit",
        &bars,
    ));
    let series = cpu_series(rows, figs)?;
    let mut out = format!("<h2 id=\"network\">Network: CPU cost</h2>\n{}", grid(&inner));
    if !series.is_empty() {
        out += "<h3>Where the CPU went during one trial</h3>\n<p class=\"muted\">An example, not a statistic: for each environment its first measured network trial, the host's CPU over that trial per role (the environment's processes, the tester, the lab), as % of one CPU. The figures above are over every trial.</p>\n";
        out += &grid(&series);
    }
    Ok(out)
}

/// Services (`apps`): per case, the capacity of each environment as bars with their intervals,
/// and the p99 (solid) and p50 (dashed) latency against the offered load, on a log axis — only
/// the loads each environment carried (a load it did not carry has no latency to draw).
fn services(r: &Report, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> String {
    let top = |x: &&ResultRow| x.peer.is_none() && x.instance.is_none();
    let mut cases: Vec<&str> = Vec::new();
    for x in r
        .results
        .iter()
        .filter(top)
        .filter(|x| x.family == Family::Service && x.metric.ends_with("_capacity"))
    {
        if !cases.contains(&x.workload.as_str()) {
            cases.push(&x.workload);
        }
    }
    if cases.is_empty() {
        return String::new();
    }
    let mut inner = String::new();
    for (i, w) in cases.iter().enumerate() {
        let of = |suffix: &str| {
            r.results
                .iter()
                .filter(top)
                .filter(move |x| x.workload == *w && x.metric.ends_with(suffix))
                .collect::<Vec<_>>()
        };
        let bars: Vec<Bar> = of("_capacity")
            .into_iter()
            .map(|x| Bar {
                label: x.environment.clone(),
                color: color(&x.environment),
                value: x.mean,
                ci: x.ci95,
            })
            .collect();
        inner += &figs.add(figures::hbars(
            &format!("service-{i}-capacity"),
            &format!("{}: capacity per environment (closed loop), with the 95 % interval", case_short(w)),
            "requests/s",
            &bars,
        ));
        let mut lines = Vec::new();
        for env in r.environments.iter().map(|e| e.name.as_str()) {
            for (q, dashed) in [("p99", false), ("p50", true)] {
                let mut points: Vec<(f64, f64)> = of("")
                    .into_iter()
                    .filter(|x| x.environment == env)
                    .filter_map(|x| {
                        let l: f64 = x.metric.rsplit_once(&format!("_{q}_at"))?.1.parse().ok()?;
                        Some((l, x.mean))
                    })
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !points.is_empty() {
                    lines.push(Line {
                        name: format!("{env} {q}"),
                        color: color(env),
                        dashed,
                        hollow: false,
                        points,
                    });
                }
            }
        }
        if !lines.is_empty() {
            inner += &figs.add(figures::lines(
                &format!("service-{i}-latency"),
                &format!("{}: latency against the offered load (p99 solid, p50 dashed), from each request's scheduled send; loads an environment did not carry are left out", case_short(w)),
                "offered load (% of the baseline's capacity)",
                "µs (log scale)",
                &lines,
                false,
                true,
            ));
        }
    }
    format!("<h2 id=\"services\">Services</h2>\n{}", grid(&inner))
}

/// RFC 2544 (seed 003): throughput against frame size per environment and direction with the
/// theoretical maximum; latency at that rate.
fn rfc2544(r: &Report, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> String {
    if r.rfc2544.is_empty() {
        return String::new();
    }
    let l = rfc2544_lines(&r.rfc2544);
    let series = |v: &DirSeries| -> Vec<Line> {
        v.iter()
            .map(|((env, dir), pts)| Line {
                name: format!("{env} {dir}"),
                color: color(env),
                dashed: false,
                hollow: dir == "in",
                points: pts.clone(),
            })
            .collect()
    };
    let mut tp = series(&l.throughput);
    if !tp.is_empty() && !l.line_max.is_empty() {
        tp.push(Line {
            name: "theoretical maximum (line rate)".into(),
            color: 6,
            dashed: true,
            hollow: false,
            points: l.line_max.clone(),
        });
    }
    // §26.1's NDR where its throughput test ran (a run of MLRsearch alone has none).
    let mut inner = String::new();
    if !tp.is_empty() {
        inner += &figs.add(figures::lines(
        "rfc2544-throughput",
        "RFC 2544 throughput (NDR) against frame size, per environment and direction (hollow: in), and the theoretical maximum",
        "frame size (bytes, log scale)",
        "frames/s",
        &tp,
        true,
        false,
    ));
    }
    let mut mlr = series(&l.mlr);
    if !mlr.is_empty() {
        if !l.line_max.is_empty() {
            mlr.push(Line {
                name: "theoretical maximum (line rate)".into(),
                color: 6,
                dashed: true,
                hollow: false,
                points: l.line_max.clone(),
            });
        }
        inner += &figs.add(figures::lines(
            "rfc2544-mlrsearch",
            "RFC 9971 MLRsearch: the NDR goal's conditional throughput (repeats where the strict NDR does not), per environment and direction (hollow: in)",
            "frame size (bytes, log scale)",
            "frames/s",
            &mlr,
            true,
            false,
        ));
    }
    let lat = series(&l.latency);
    if !lat.is_empty() {
        let log = super::svg::Axis::wants_log(lat.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        inner += &figs.add(figures::lines(
            "rfc2544-latency",
            "RFC 2544 mean latency at the throughput rate, against frame size",
            "frame size (bytes, log scale)",
            if log { "µs (log scale)" } else { "µs" },
            &lat,
            true,
            log,
        ));
    }
    // MLRsearch's figures as the terminal tables them: per environment · direction · goal, the
    // conditional throughput by frame size (the mean, its interval and CV over repetitions).
    let (sizes, keys) = super::rfc2544::sizes_and_keys(&r.rfc2544);
    let mut table = String::new();
    if let Some(m) = super::rfc2544::mlr_table(&r.rfc2544, &sizes, &keys) {
        table += "<div class=\"tw\"><table><tr>";
        for h in &m.head {
            let _ = write!(table, "<th>{}</th>", esc(h));
        }
        table += "</tr>";
        for row in &m.rows {
            table += "<tr>";
            for (i, c) in row.iter().enumerate() {
                let _ =
                    write!(table, "{}{}</td>", if i == 0 { "<td>" } else { "<td class=\"num\">" }, esc(c));
            }
            table += "</tr>";
        }
        let _ = write!(table, "</table></div>\n<p class=\"muted\">{}</p>\n", esc(&m.legend));
    }
    // What the text report says below its tables: results that disagree, the tester's drops,
    // what each back-to-back figure rests on.
    let mut notes = super::rfc2544::compare(&r.rfc2544);
    notes.extend(super::rfc2544::notes(&r.rfc2544));
    let mut list = String::new();
    if !notes.is_empty() {
        list += "<ul class=\"notes\">";
        for n in &notes {
            let _ = write!(list, "<li>{}</li>", esc(n));
        }
        list += "</ul>\n";
    }
    format!("<h2 id=\"rfc2544\">RFC 2544</h2>\n{}{table}{list}", grid(&inner))
}

/// All pairs: one heat map per workload and metric, rows send to columns.
fn pairs(r: &Report, figs: &mut Figs) -> String {
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for x in r.results.iter().filter(|x| x.peer.is_some()) {
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str());
        if !keys.contains(&k) && !super::CPU_TIMES.contains(&k.1) {
            keys.push(k);
        }
    }
    if keys.is_empty() {
        return String::new();
    }
    let names: Vec<String> = r.environments.iter().map(|e| e.name.clone()).collect();
    let mut inner = String::new();
    for (w, metric, unit) in keys {
        let cells: Vec<Vec<Option<(f64, String)>>> = names
            .iter()
            .map(|from| {
                names
                    .iter()
                    .map(|to| {
                        r.results
                            .iter()
                            .find(|x| {
                                x.workload == w
                                    && x.metric == metric
                                    && x.environment == *from
                                    && x.peer.as_deref() == Some(to)
                            })
                            .map(|x| (x.mean, fmt_num(x.mean)))
                    })
                    .collect()
            })
            .collect();
        inner += &figs.add(figures::heatmap(
            &format!("pairs-{w}-{metric}"),
            &format!("{w}: {metric} ({unit}), rows send to columns"),
            "from ↓ to →",
            &names,
            &names,
            &cells,
        ));
    }
    format!("<h2 id=\"pairs\">All pairs</h2>\n{}", grid(&inner))
}

/// Seed 000's figure: per instance count, each instance's share stacked into the aggregate, with
/// Jain's index under it and the link's ceiling when the lab is shaped.
fn instances(r: &Report, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> String {
    if r.instances.is_empty() {
        return String::new();
    }
    let mut inner = String::new();
    for t in &r.instances {
        let c = t.rows.first().map_or(0, |row| color(&row.environment));
        let stacks: Vec<Stack> = t
            .rows
            .iter()
            .map(|row| Stack {
                label: format!("N = {}", row.instances),
                sub: row.jain.map(|j| format!("Jain {j:.3}")).unwrap_or_default(),
                color: c,
                parts: row.per_instance.clone(),
            })
            .collect();
        let ceiling = r
            .ceilings
            .iter()
            .find(|x| x.workload == t.workload && (x.metric == t.metric || t.metric.starts_with(&x.metric)))
            .map(|x| (x.value, format!("ceiling {}", fmt_num(x.value))));
        inner += &figs.add(figures::stacked(
            &format!("instances-{}-{}", t.group, t.metric),
            &format!(
                "{} · {}: {} of each instance stacked into the aggregate, per instance count (Jain's fairness index under each bar)",
                t.group, t.workload, t.metric
            ),
            &t.unit,
            &stacks,
            ceiling,
        ));
    }
    format!("<h2 id=\"instances\">Instances sharing the host</h2>\n{}", grid(&inner))
}

/// Seed 001's matrices: per phase and environment, file size × record size, each cell's ratio.
fn disk(r: &Report, figs: &mut Figs) -> String {
    if r.disk.is_empty() {
        return String::new();
    }
    let mut inner = String::new();
    for d in &r.disk {
        let rows: Vec<String> = d.file_sizes.iter().map(|s| super::disk::size_text(*s)).collect();
        let cols: Vec<String> = d.record_sizes.iter().map(|s| super::disk::size_text(*s)).collect();
        for env in &d.environments {
            let cells: Vec<Vec<Option<(f64, String)>>> = env
                .cells
                .iter()
                .map(|row| {
                    row.iter()
                        .map(|c| {
                            c.as_ref().map(|c| {
                                let ratio = c
                                    .overhead
                                    .as_ref()
                                    .map(|o| format!(" ×{:.2}", o.ratio))
                                    .unwrap_or_default();
                                (c.mean, format!("{}{ratio}", fmt_num(c.mean)))
                            })
                        })
                        .collect()
                })
                .collect();
            inner += &figs.add(figures::heatmap(
                &format!("disk-{}-{}-{}", d.workload, d.metric, env.environment),
                &format!(
                    "{} — {} ({}) in {}: file size ↓ × record size →, ×ratio to the baseline",
                    d.workload, d.metric, d.unit, env.environment
                ),
                "file ↓ record →",
                &rows,
                &cols,
                &cells,
            ));
        }
    }
    format!("<h2 id=\"disk\">Disk: file size × record size</h2>\n{}", grid(&inner))
}

/// Seed 002's determinism: the wake-up lateness distribution, counts on a log axis.
fn timers(r: &Report, figs: &mut Figs, color: &dyn Fn(&str) -> usize) -> String {
    if r.timers.is_empty() {
        return String::new();
    }
    let series: Vec<Line> = r
        .timers
        .iter()
        .map(|h| {
            let b = super::timer::log2_buckets(&h.histogram);
            let pts = b
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (if i == 0 { 0.5 } else { (1u64 << (i - 1)) as f64 }, *n as f64))
                .collect();
            Line {
                name: format!("{} ({})", h.environment, h.policy),
                color: color(&h.environment),
                dashed: false,
                hollow: false,
                points: pts,
            }
        })
        .collect();
    let f = figs.add(figures::lines(
        "timer-histogram",
        "Timer wake-up lateness: wake-ups per power-of-two bucket (cyclictest's histogram), counts on a log axis",
        "lateness (µs, bucket start, log scale)",
        "wake-ups (log scale)",
        &series,
        true,
        true,
    ));
    format!("<h2 id=\"timers\">Timers</h2>\n{}", grid(&f))
}

/// A campaign: the same environments side by side by host.
fn by_host(r: &Report) -> String {
    if r.by_host.is_empty() {
        return String::new();
    }
    let mut body = String::from("<h2 id=\"hosts\">By host</h2>\n<p class=\"muted\">Each host's environments against its own baseline (<code>local</code> ran virtperf); the hosts measured at once, one worker each.</p>\n");
    for t in &r.by_host {
        let _ = write!(
            body,
            "<h3>{} — {} ({}, {} is better)</h3>\n<div class=\"tw\"><table><tr><th>environment</th>",
            esc(&t.workload),
            esc(&t.metric),
            esc(&t.unit),
            esc(t.better)
        );
        for h in &t.hosts {
            let _ = write!(body, "<th>{}</th>", esc(h));
        }
        body += "</tr>";
        for row in &t.rows {
            let _ = write!(body, "<tr><td>{}</td>", esc(&row.environment));
            for c in &row.cells {
                match c {
                    None => body += "<td>—</td>",
                    Some(c) => {
                        let text = super::hosts::cell_text(c, t.better);
                        let _ = write!(body, "<td class=\"num\">{}</td>", esc(&text).replace('\n', "<br>"));
                    }
                }
            }
            body += "</tr>";
        }
        body += "</table></div>\n";
    }
    body
}

/// `explain = true`: per environment, each workload's overhead split by the mechanisms that
/// explain it, with the hit rates (report/explain.rs).
fn explain(r: &Report, figs: &mut Figs) -> String {
    let Some(x) = &r.explain else { return String::new() };
    let mut inner = String::new();
    let mut lines = String::new();
    for h in &x.hits {
        inner += &figs.add(super::explain::figure(x, &h.environment));
        lines += &format!(
            "<li>{}: {} of {} workloads predicted within ±20 %, {} within the interval</li>",
            esc(&h.environment),
            h.within_20,
            h.cells,
            h.within_interval
        );
        let own: Vec<String> = x
            .cells
            .iter()
            .filter(|c| c.environment == h.environment)
            .filter_map(|c| {
                let parts = super::explain::own_counts_words(c, "");
                (!parts.is_empty()).then(|| format!("{} — {}", esc(&c.workload), esc(&parts.join(", "))))
            })
            .collect();
        if !own.is_empty() {
            lines += &format!(
                "<li>counted in {} itself, for the same work, against {}'s (the model prices {}'s counts): {}</li>",
                esc(&h.environment),
                esc(&x.baseline),
                esc(&x.baseline),
                own.join("; ")
            );
        }
    }
    format!(
        "<h2 id=\"explain\">Why: the overhead explained</h2>\n<p>The model: {}'s time + Σ events × their extra cost in the environment — the events counted in {}'s warm-ups, their costs solved from this run's mechanism cases (<code>virtperf report --explain</code>, docs/explain.md).</p><ul>{lines}</ul>\n{}",
        esc(&x.baseline),
        esc(&x.baseline),
        grid(&inner)
    )
}

fn failures(r: &Report) -> String {
    let mut out = String::from("<h2 id=\"failures\">Failed and skipped trials</h2>\n");
    for x in &r.retried {
        let _ = writeln!(
            out,
            "<p>{} trial(s) run again (on a fresh instance after one died under them, or by <code>--retry-failed</code>); before, they had {}: {}</p>",
            x.count,
            esc(&x.status),
            esc(&x.reason)
        );
    }
    if r.failures.is_empty() {
        return out + "<p>None.</p>\n";
    }
    out += "<div class=\"tw\"><table><tr><th>environment</th><th>workload</th><th>trials</th><th>reason</th></tr>";
    for f in &r.failures {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&f.environment),
            esc(&f.workload),
            f.count,
            esc(&f.reason)
        );
    }
    out += "</table></div>\n";
    let _ = writeln!(
        out,
        "<p>Once their cause is fixed (a host back up), <code>virtperf run --resume {} --retry-failed</code> runs them again.</p>",
        r.run_id
    );
    out
}

/// A JSON object as a person reads it: `memory = 512 MiB, nic = virtio, …` (nested objects in
/// braces, sizes in bytes left as numbers); anything else as its JSON text.
fn key_values(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) if m.is_empty() => "—".into(),
        serde_json::Value::Object(m) => m
            .iter()
            .filter(|(_, x)| !x.is_null())
            .map(|(k, x)| match x {
                serde_json::Value::String(s) => format!("{k} = {s}"),
                serde_json::Value::Object(_) => format!("{k}: {{{}}}", key_values(x)),
                other => format!("{k} = {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn host(r: &Report) -> String {
    let m = &r.manifest;
    let mut host = String::from("<h2 id=\"host\">Host and environments</h2>\n<div class=\"tw\"><table>");
    for k in [
        "host_name",
        "host_cpu_model",
        "host_cpus",
        "host_memory_kib",
        "host_kernel",
        "kvm",
        "kvm_pvm",
        "virtperf_version",
        "git_revision",
        "command_line",
        "date",
    ] {
        if let Some(v) = m.get(k).filter(|v| !v.is_null()) {
            let v = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
            let _ = write!(host, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
        }
    }
    if let Some(lab) = m.get("lab").filter(|l| !l.is_null()) {
        let _ = write!(host, "<tr><th>lab</th><td>{}</td></tr>", esc(&key_values(lab)));
    }
    for line in super::sizing_lines(m) {
        let _ = write!(host, "<tr><th>sized from the host</th><td>{}</td></tr>", esc(&line));
    }
    for line in super::render_notes(r, r.results.iter().any(|x| x.clock.is_some())).lines() {
        let _ = write!(host, "<tr><th>note</th><td>{}</td></tr>", esc(line));
    }
    // Runs that stored their launches' phases: the whole start-up and the memory beside it.
    let phased = r.environments.iter().any(|e| e.startup.is_some());
    host += "</table></div>\n<div class=\"tw\"><table><tr><th>environment</th><th>kind</th><th>parameters</th><th>runtime</th><th>launches</th><th>start to agent ready (ms)</th>";
    if phased {
        host += "<th>ready: asked for to hello</th><th>phases</th><th>PSS once ready</th>";
    }
    host += "</tr>";
    for e in &r.environments {
        let rt = m["runtimes"][&e.name].as_str().unwrap_or("—");
        let start = e.start_ms.as_ref().map(|s| mean_text(s.mean, s.ci95, s.n)).unwrap_or_else(|| "—".into());
        let _ = write!(
            host,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
            esc(&e.name),
            esc(&e.kind),
            esc(&key_values(&e.params)),
            esc(rt),
            e.launches,
            esc(&start)
        );
        if phased {
            let (ready, phases, pss) = match &e.startup {
                Some(s) => (
                    super::lifecycle::figure_text(&s.ready_ms, "ms"),
                    s.phases
                        .iter()
                        .map(|f| format!("{} {}", f.name, super::lifecycle::figure_text(&f.of, f.unit)))
                        .collect::<Vec<_>>()
                        .join(" · "),
                    s.memory
                        .iter()
                        .find(|f| f.name == "PSS")
                        .map(|f| super::lifecycle::figure_text(&f.of, f.unit))
                        .unwrap_or_else(|| "—".into()),
                ),
                None => ("—".into(), "—".into(), "—".into()),
            };
            let _ = write!(
                host,
                "<td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>",
                esc(&ready),
                esc(&phases),
                esc(&pss)
            );
        }
        host += "</tr>";
    }
    host += "</table></div>\n";
    // Started together: a row per environment, its answer in the summary's words.
    if !r.together.is_empty() {
        host += "<div class=\"tw\"><table><tr><th>started together</th><th>all ready (makespan)</th><th>each ready: p50 · p99 · max</th><th>one alone</th><th>host CPU per instance</th><th>starts</th></tr>";
        for t in &r.together {
            let ms = super::together::ms_text;
            let fig = |x: Option<&super::StartTimes>| {
                x.map(super::together::over_starts).unwrap_or_else(|| "—".into())
            };
            let spread = t
                .ready_ms
                .as_ref()
                .map(|s| format!("{} · {} · {} ({} instances)", ms(s.p50), ms(s.p99), ms(s.max), s.n))
                .unwrap_or_else(|| "—".into());
            let alone = t.alone_ready_ms.map(ms).unwrap_or_else(|| "—".into());
            let _ = write!(
                host,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} of {} with all {} ready</td></tr>",
                esc(&t.env),
                esc(&fig(t.makespan_ms.as_ref())),
                esc(&spread),
                esc(&alone),
                esc(&fig(t.host_cpu_ms.as_ref())),
                t.complete,
                t.starts,
                t.n
            );
        }
        host += "</table></div>\n";
    }
    // The kernel each environment's agent ran on, in --full's words.
    if !r.kernels.is_empty() {
        host += "<div class=\"tw\"><table><tr><th>kernel, as its agent saw it</th><th>release</th><th>CPU vulnerabilities (/sys/devices/system/cpu/vulnerabilities)</th></tr>";
        for k in &r.kernels {
            let mut release = if k.release.is_empty() { "not said".to_string() } else { k.release.clone() };
            if k.mitigations_off {
                release += ", mitigations=off";
            }
            let said = super::kernels::vulnerability_words(k).unwrap_or_else(|| "nothing said".into());
            let _ = write!(
                host,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&k.environment),
                esc(&release),
                esc(&said)
            );
        }
        host += "</table></div>\n";
    }
    host
}

/// The table of one workload case: metric rows, environment columns, mean ± CI and ratio.
fn workload_table(r: &Report, case: &str) -> String {
    let envs: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    let rows: Vec<&ResultRow> =
        r.results.iter().filter(|x| x.workload == case && x.peer.is_none() && x.instance.is_none()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let envs: Vec<&str> = envs.into_iter().filter(|e| rows.iter().any(|x| x.environment == *e)).collect();
    let mut metrics: Vec<(&str, &str, &str)> = Vec::new();
    for x in &rows {
        let k = (x.metric.as_str(), x.unit.as_str(), x.better);
        if !metrics.contains(&k) {
            metrics.push(k);
        }
    }
    let mut t = String::from("<div class=\"tw\"><table><tr><th>metric</th>");
    for e in &envs {
        let _ = write!(t, "<th>{}</th>", esc(e));
    }
    t += "</tr>";
    for (metric, unit, better) in metrics {
        let _ = write!(t, "<tr><td>{} ({}, {} is better)</td>", esc(metric), esc(unit), esc(better));
        for e in &envs {
            match rows.iter().find(|x| x.metric == metric && x.environment == *e) {
                None => t += "<td>—</td>",
                Some(x) => {
                    let mut cell = esc(&mean_text(x.mean, x.ci95, x.n));
                    if x.outliers > 0 {
                        let _ = write!(cell, " <span class=\"muted\">({} outl.)</span>", x.outliers);
                    }
                    if super::summary::is_count(unit) {
                        let _ = write!(
                            cell,
                            "<br><span class=\"muted\">{} in all</span>",
                            (x.mean * x.n as f64).round() as i64
                        );
                    } else if let Some(o) = &x.overhead {
                        // CPU time spent beside the workload (the tester's, the guest's, the
                        // host's) measures work done, not a cost to rank: less may be less work.
                        let neutral = metric.ends_with("cpu_time") || metric.ends_with("cpu_util");
                        let t = super::answer::target(r);
                        let (text, class) = match super::answer::row_verdict(x, t) {
                            Some(v) if !neutral => {
                                (v.phrase(super::answer::Reading::of(x.better)), v.class())
                            }
                            _ => (super::answer::ratio_numbers(o), "same"),
                        };
                        let _ = write!(cell, "<br><span class=\"{class}\">{}</span>", esc(&text));
                    }
                    let _ = write!(t, "<td class=\"num\">{cell}</td>");
                }
            }
        }
        t += "</tr>";
    }
    t + "</table></div>\n"
}

/// One network trial per environment: its host CPU over time, per role.
fn cpu_series(rows: &RunRows, figs: &mut Figs) -> Result<String> {
    let (envs, cases) = (&rows.envs, &rows.cases);
    let mut out = String::new();
    let mut seen: Vec<usize> = Vec::new();
    for t in &rows.trials {
        if t.warmup || t.status != TrialStatus::Ok || seen.contains(&t.env_idx) || t.tester_cpu_ns.is_none() {
            continue;
        }
        let series = rows.series(t.id);
        if series.len() < 3 {
            continue;
        }
        seen.push(t.env_idx);
        let lines: Vec<Line> = cpu_percent(series)
            .into_iter()
            .enumerate()
            .map(|(i, (role, pts))| Line { name: role, color: i, dashed: false, hollow: false, points: pts })
            .collect();
        out += &figs.add(figures::lines(
            &format!("cpu-series-{}", envs[t.env_idx].name),
            &format!(
                "{} · {} (trial {}): host CPU over the trial, per role",
                envs[t.env_idx].name, cases[t.case_idx].label, t.id
            ),
            "ms since the trial started",
            "% of one CPU",
            &lines,
            false,
            false,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_percent_is_the_slope_of_cumulative_cpu() {
        let s = vec![
            ("env".to_string(), 0.0, 0),
            ("env".to_string(), 100.0, 50_000_000),
            ("env".to_string(), 200.0, 150_000_000),
        ];
        let l = cpu_percent(&s);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].1, vec![(100.0, 50.0), (200.0, 100.0)]);
    }

    fn rfc_row(env: &str, size: u64, ndr: f64) -> crate::report::rfc2544::Row {
        crate::report::rfc2544::Row {
            environment: env.into(),
            direction: "out".into(),
            frame_size: size,
            quick: true,
            line_max_fps: 1000.0 + size as f64,
            ndr_fps: Some(ndr),
            pdr_fps: None,
            latency_note: None,
            b2b_of: None,
            b2b_notes: Vec::new(),
            tester_drops: 0,
            lost: 0,
            dut_drops: 0,
            ran_throughput: true,
            tester_bound: false,
            ndr_confirmed: true,
            ndr_undetermined: false,
            gen_limited: false,
            dut_cpu_pct: None,
            guest_cpu_pct: None,
            latency: serde_json::json!({"mean_us": 10.0}),
            loss_curve: Vec::new(),
            b2b_mean: None,
            b2b_capped: false,
            steps: 1,
            ..Default::default()
        }
    }

    /// The page says what the text report says below its RFC 2544 tables (escaped), and how to
    /// run failed trials again, with how retried ones ended before.
    #[test]
    fn rfc2544_notes_and_retries_reach_the_page() {
        let mut r = crate::report::summary_test_report();
        let mut row = rfc_row("a", 64, 400.0);
        row.b2b_notes =
            vec!["shortest burst that lost frames: 257 frames, lost 1 of 257: #257 <tail>".into()];
        row.tester_drops = 12;
        r.rfc2544 = vec![row];
        let mut figs = Figs { all: Vec::new(), used: BTreeMap::new() };
        let html = rfc2544(&r, &mut figs, &|_| 0);
        assert!(
            html.contains("back-to-back a · out · 64 B: shortest burst")
                && html.contains("#257 &lt;tail&gt;"),
            "{html}"
        );
        assert!(html.contains("the tester's receiver dropped 12 frames"), "{html}");
        assert!(!html.contains("MLRsearch (RFC 9971) conditional"), "no MLRsearch ran: no table");
        // MLRsearch's figures: the terminal's table, on the page.
        let mut m = rfc_row("a", 64, 400.0);
        m.mlr_ndr_fps = Some(512.0);
        m.mlr_pdr_fps = Some(640.0);
        m.mlr_converged = true;
        m.mlr_goals = vec!["NDR — loss ratio 0 %".into(), "PDR — loss ratio 0.5 %".into()];
        r.rfc2544 = vec![m];
        let html = rfc2544(&r, &mut figs, &|_| 0);
        assert!(
            html.contains("<th>MLRsearch (RFC 9971) conditional throughput, frames/s</th><th>64 B</th>")
                && html.contains("<td>a · out · NDR</td><td class=\"num\">512.0</td>")
                && html.contains("<td>a · out · PDR</td><td class=\"num\">640.0</td>")
                && html.contains("goals: NDR — loss ratio 0 %; PDR — loss ratio 0.5 %"),
            "{html}"
        );
        r.failures = vec![crate::report::Failure {
            environment: "a".into(),
            workload: "w".into(),
            count: 2,
            reason: "ssh closed".into(),
        }];
        r.retried =
            vec![crate::report::Retried { status: "failed".into(), reason: "refused".into(), count: 3 }];
        let f = failures(&r);
        assert!(
            f.contains("3 trial(s) run again") && f.contains("--retry-failed</code> runs them again"),
            "{f}"
        );
        assert!(f.find("</table>") < f.find("Once their cause"), "{f}");
    }

    #[test]
    fn rfc2544_lines_average_repeated_sizes_and_carry_the_theoretical_maximum() {
        let rows = [rfc_row("a", 64, 400.0), rfc_row("a", 64, 600.0), rfc_row("a", 128, 900.0)];
        let l = rfc2544_lines(&rows);
        assert_eq!(l.throughput[0].1, vec![(64.0, 500.0), (128.0, 900.0)]);
        assert_eq!(l.throughput[0].0, ("a".to_string(), "out".to_string()));
        assert_eq!(l.line_max, vec![(64.0, 1064.0), (128.0, 1128.0)]);
        assert_eq!(l.latency[0].1.len(), 2);
    }

    #[test]
    fn escaping_and_slugs() {
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(slug("forest-tcp_goodput (Gbit/s)"), "forest-tcp-goodput-gbit-s");
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(case_short("disk [file_size=16MiB,record_size=64KiB]"), "disk 16MiB,64KiB");
        assert_eq!(case_short("memcpy"), "memcpy");
        assert_eq!(case_short("tcp [load=90]"), "tcp load=90");
    }
}
