//! `virtperf report --html FILE`: one self-contained page (inline CSS and SVG, no fetch of any
//! kind: a Content-Security-Policy forbids it) that opens offline and prints. The data each
//! figure receives is prepared here by small functions with unit tests; `figures.rs` draws.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;

use super::figures::{self, Figure};
use super::{fmt_num, mean_text, overhead_text, trial_values, Report};
use crate::store::{Store, TrialStatus};

/// The page and its figures (for `--svg DIR`).
pub struct Page {
    pub html: String,
    pub figures: Vec<Figure>,
}

/// Samples of one workload case × metric, per environment: (value, flagged as outlier).
pub type SampleGroups = Vec<(String, Vec<(f64, bool)>)>;
/// A forest row: label, ratio, its 95 % CI.
pub type ForestRow = (String, f64, Option<[f64; 2]>);
/// A forest panel: its metric and rows.
pub type ForestPanel = (String, Vec<ForestRow>);
/// Named (x, y) series of a line figure.
pub type Series = Vec<(String, Vec<(f64, f64)>)>;
/// (workload case, metric, unit) of a group of samples.
pub type SampleKey = (String, String, String);

/// One forest panel per metric (unit): every environment × workload with a ratio to the
/// baseline, in report order.
pub fn forest_data(r: &Report) -> Vec<ForestPanel> {
    let mut panels: Vec<ForestPanel> = Vec::new();
    for x in r.results.iter().filter(|x| x.peer.is_none() && x.instance.is_none()) {
        let Some(o) = &x.overhead else { continue };
        if !o.ratio.is_finite() || o.ratio <= 0.0 {
            continue;
        }
        let key = format!("{} ({}, {} is better)", x.metric, x.unit, x.better);
        let label = format!("{} · {}", x.environment, short(&case_short(&x.workload), 30));
        match panels.iter_mut().find(|p| p.0 == key) {
            Some(p) => p.1.push((label, o.ratio, o.ci95)),
            None => panels.push((key, vec![(label, o.ratio, o.ci95)])),
        }
    }
    panels
}

/// `disk [file_size=16MiB,record_size=64KiB]` → `disk 16MiB,64KiB`: a swept case by its values.
fn case_short(w: &str) -> String {
    match w.split_once(" [") {
        Some((name, rest)) => {
            let vals: Vec<&str> = rest
                .trim_end_matches(']')
                .split(',')
                .map(|kv| kv.split_once('=').map_or(kv, |(_, v)| v))
                .collect();
            format!("{name} {}", vals.join(","))
        }
        None => w.to_string(),
    }
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// The microbenchmarks' per-operation metrics (and the syscall one): the mechanisms section.
pub fn is_mechanism(metric: &str) -> bool {
    virtperf_workload::micro::METRIC_NAMES.contains(&metric) || metric == "syscall_time"
}

/// One forest row per environment × mechanism with a ratio to the baseline.
pub fn mechanism_rows(r: &Report) -> Vec<ForestRow> {
    r.results
        .iter()
        .filter(|x| x.peer.is_none() && x.instance.is_none() && is_mechanism(&x.metric))
        .filter_map(|x| {
            let o = x.overhead.as_ref()?;
            (o.ratio > 0.0 && o.ratio.is_finite()).then(|| {
                let case = case_short(&x.workload);
                let what = if case.contains(' ') {
                    format!("{} {}", x.metric, &case[case.find(' ').unwrap_or(0)..])
                } else {
                    x.metric.clone()
                };
                (format!("{} · {}", x.environment, short(&what, 30)), o.ratio, o.ci95)
            })
        })
        .collect()
}

/// Every measured (not warm-up, not failed) sample per workload case and metric, per
/// environment, with the median/MAD outliers the statistics flag.
pub fn sample_groups(store: &Store, run_id: i64) -> Result<Vec<(SampleKey, SampleGroups)>> {
    let envs = store.environments(run_id)?;
    let cases = store.cases(run_id)?;
    // (case, metric) → (unit, environment → values)
    type PerEnv = BTreeMap<usize, Vec<f64>>;
    let mut by: BTreeMap<(usize, String), (String, PerEnv)> = BTreeMap::new();
    for t in store.trials(run_id)? {
        if t.warmup || t.status != TrialStatus::Ok || t.peer_idx.is_some() {
            continue;
        }
        for (metric, unit, v) in trial_values(&t) {
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

/// RFC 2544: per environment and direction, (frame size, value) for the throughput (frames/s,
/// and % of the theoretical maximum) and the mean latency.
pub fn rfc2544_series(rows: &[super::rfc2544::Row]) -> [Series; 3] {
    let mut fps: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut pct: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut lat: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let key = format!("{} {}", r.environment, r.direction);
        let x = r.frame_size as f64;
        if let Some(t) = r.ndr_fps.or(r.pdr_fps) {
            fps.entry(key.clone()).or_default().push((x, t));
            if r.line_max_fps > 0.0 {
                pct.entry(key.clone()).or_default().push((x, t / r.line_max_fps * 100.0));
            }
        }
        if let Some(m) = r.latency.get("mean_us").and_then(|v| v.as_f64()) {
            lat.entry(key).or_default().push((x, m));
        }
    }
    // Several trials of one size: their mean, one point per size.
    let fold = |m: BTreeMap<String, Vec<(f64, f64)>>| -> Series {
        m.into_iter()
            .map(|(k, pts)| {
                let mut by: BTreeMap<u64, (f64, usize)> = BTreeMap::new();
                for (x, y) in pts {
                    let e = by.entry(x as u64).or_default();
                    e.0 += y;
                    e.1 += 1;
                }
                (k, by.into_iter().map(|(x, (s, n))| (x as f64, s / n as f64)).collect())
            })
            .collect()
    };
    [fold(fps), fold(pct), fold(lat)]
}

/// CPU use over one trial, per role, as % of one CPU between consecutive samples.
pub fn cpu_percent(series: &[(String, f64, i64)]) -> Series {
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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn slug(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').chars().take(80).collect()
}

/// Collects figures; a figure that cannot be drawn becomes a visible note, not a failed report.
struct Figs {
    all: Vec<Figure>,
    used: BTreeMap<String, usize>,
}

impl Figs {
    fn add(&mut self, made: Result<Figure, String>) -> String {
        match made {
            Ok(mut f) => {
                let base = slug(&f.id);
                let n = self.used.entry(base.clone()).or_insert(0);
                *n += 1;
                f.id = if *n > 1 { format!("{base}-{n}") } else { base };
                let html = format!(
                    "<figure id=\"fig-{}\" class=\"fig\">{}<figcaption>{}</figcaption></figure>\n",
                    f.id,
                    strip_xml_decl(&f.svg),
                    esc(&f.title)
                );
                self.all.push(f);
                html
            }
            Err(e) => format!("<p class=\"warn\">figure not drawn: {}</p>\n", esc(&e)),
        }
    }
}

fn strip_xml_decl(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}

const STYLE: &str = r#"
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;padding:1em 1.5em;color:#111}
h1{font-size:1.5em;margin:.2em 0}h2{border-bottom:2px solid #0072b2;padding-bottom:.15em;margin-top:1.8em}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em;display:block;overflow-x:auto;max-width:100%}code{word-break:break-all}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#eef4fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.better{color:#00734d}.worse{color:#b3261e}.same{color:#555}
figure.fig{margin:.8em 0;break-inside:avoid}figure.fig svg{max-width:100%;height:auto;display:block}
figcaption{font-size:.85em;color:#444}.warn{color:#b3261e}.muted{color:#555;font-size:.9em}
nav a{margin-right:1em}
@media print{body{max-width:none;font-size:11px}nav{display:none}h2{break-before:auto}}
"#;

/// Runs in the browser after load: marks every figure that rendered to a non-empty box, so a
/// headless browser test (and a reader's devtools) can tell a blank figure from a drawn one.
const CHECK_SCRIPT: &str = r#"addEventListener('load',function(){var f=document.querySelectorAll('figure.fig svg'),ok=0;for(var i=0;i<f.length;i++){var b=f[i].getBBox();if(b.width>0&&b.height>0&&f[i].childElementCount>0){ok++;f[i].parentNode.setAttribute('data-drawn','1')}}document.body.setAttribute('data-figures',f.length+'/'+ok)});"#;

/// Builds the page for run `run_id` whose report is `r`.
pub fn render(store: &Store, run_id: i64, r: &Report) -> Result<Page> {
    let mut figs = Figs { all: Vec::new(), used: BTreeMap::new() };
    let mut body = String::new();
    let m = &r.manifest;
    let _ = write!(
        body,
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
    body += "<nav><a href=\"#summary\">Summary</a><a href=\"#workloads\">Workloads</a>";
    let sections = [
        (!r.by_host.is_empty(), "hosts", "By host"),
        (!r.rfc2544.is_empty(), "rfc2544", "RFC 2544"),
        (r.results.iter().any(|x| x.peer.is_some()), "pairs", "All pairs"),
        (!r.instances.is_empty(), "instances", "Instances"),
        (!r.disk.is_empty(), "disk", "Disk"),
        (
            !r.timers.is_empty() || r.results.iter().any(|x| is_mechanism(&x.metric)),
            "mechanisms",
            "Mechanisms",
        ),
        (true, "failures", "Failures"),
        (true, "host", "Host"),
    ];
    for (on, id, name) in sections {
        if on {
            let _ = write!(body, "<a href=\"#{id}\">{name}</a>");
        }
    }
    body += "</nav>\n";

    // Host and environments.
    let mut host = String::from("<h2 id=\"host\">Host and environments</h2>\n<table>");
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
        let _ = write!(host, "<tr><th>lab</th><td>{}</td></tr>", esc(&lab.to_string()));
    }
    for line in super::sizing_lines(m) {
        let _ = write!(host, "<tr><th>sized from the host</th><td>{}</td></tr>", esc(&line));
    }
    host += "</table>\n<table><tr><th>environment</th><th>kind</th><th>parameters</th><th>runtime</th><th>launches</th><th>start to agent ready (ms)</th></tr>";
    for e in &r.environments {
        let rt = m["runtimes"][&e.name].as_str().unwrap_or("—");
        let start = e.start_ms.as_ref().map(|s| mean_text(s.mean, s.ci95, s.n)).unwrap_or_else(|| "—".into());
        let _ = write!(
            host,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&e.name),
            esc(&e.kind),
            esc(&e.params.to_string()),
            esc(rt),
            e.launches,
            esc(&start)
        );
    }
    host += "</table>\n";

    // Summary: forest plots of every ratio.
    body += "<h2 id=\"summary\">Summary: overhead versus the baseline</h2>\n";
    let panels = forest_data(r);
    if panels.is_empty() {
        body += "<p class=\"muted\">No ratios: the run has no baseline environment, or no metric was measured in it and another.</p>\n";
    }
    for (metric, rows) in &panels {
        body += &figs.add(figures::forest(&format!("forest-{metric}"), metric, rows));
    }

    // A campaign: the same environments side by side by host.
    if !r.by_host.is_empty() {
        body += "<h2 id=\"hosts\">By host</h2>\n<p class=\"muted\">Each host's environments against its own baseline (<code>local</code> ran virtperf); the hosts measured at once, one worker each.</p>\n";
        for t in &r.by_host {
            let _ = write!(
                body,
                "<h3>{} — {} ({}, {} is better)</h3>\n<table><tr><th>environment</th>",
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
                            let _ =
                                write!(body, "<td class=\"num\">{}</td>", esc(&text).replace('\n', "<br>"));
                        }
                    }
                }
                body += "</tr>";
            }
            body += "</table>\n";
        }
    }

    // Per workload: the samples and the table.
    body += "<h2 id=\"workloads\">Workloads</h2>\n";
    let groups = sample_groups(store, run_id)?;
    let mut last = String::new();
    for ((case, metric, unit), g) in &groups {
        if *case != last {
            let _ = writeln!(body, "<h3>{}</h3>", esc(case));
            body += &workload_table(r, case);
            last = case.clone();
        }
        if g.iter().all(|x| x.1.len() <= 1) && g.len() <= 1 {
            continue;
        }
        body += &figs.add(figures::strip(
            &format!("samples-{case}-{metric}"),
            &format!("{case} — {metric}: every sample (× = outlier, median/MAD)"),
            unit,
            g,
        ));
    }

    // Network: CPU per Gbit and the CPU time series of one trial per environment.
    let cpg: Vec<(String, usize, f64, Option<[f64; 2]>)> = r
        .results
        .iter()
        .filter(|x| x.metric == crate::store::CPU_PER_GBIT && x.peer.is_none() && x.instance.is_none())
        .enumerate()
        .map(|(i, x)| (format!("{} · {}", x.environment, short(&x.workload, 24)), i, x.mean, x.ci95))
        .collect();
    if !cpg.is_empty() {
        body += "<h2 id=\"network\">Network: CPU cost</h2>\n";
        body += &figs.add(figures::bars(
            "cpu-per-gbit",
            "CPU per Gbit moved (host CPU seconds per Gbit)",
            "CPU s / Gbit",
            &cpg,
        ));
        body += &cpu_series(store, run_id, &mut figs)?;
    }

    if !r.rfc2544.is_empty() {
        body += "<h2 id=\"rfc2544\">RFC 2544</h2>\n";
        let [fps, pct, lat] = rfc2544_series(&r.rfc2544);
        body += &figs.add(figures::lines(
            "rfc2544-throughput",
            "Throughput (NDR) versus frame size",
            "frame size (bytes)",
            "frames/s",
            &fps,
            true,
        ));
        body += &figs.add(figures::lines(
            "rfc2544-throughput-pct",
            "Throughput as % of the theoretical maximum",
            "frame size (bytes)",
            "% of line rate",
            &pct,
            true,
        ));
        if !lat.is_empty() {
            body += &figs.add(figures::lines(
                "rfc2544-latency",
                "Mean latency at the throughput rate",
                "frame size (bytes)",
                "µs",
                &lat,
                true,
            ));
        }
    }

    // All pairs: one heat map per metric.
    let mut pair_keys: Vec<(&str, &str, &str)> = Vec::new();
    for x in r.results.iter().filter(|x| x.peer.is_some()) {
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str());
        if !pair_keys.contains(&k) && ![super::HOST_CPU, super::TESTER_CPU, super::GUEST_CPU].contains(&k.1) {
            pair_keys.push(k);
        }
    }
    if !pair_keys.is_empty() {
        body += "<h2 id=\"pairs\">All pairs</h2>\n";
        let names: Vec<String> = r.environments.iter().map(|e| e.name.clone()).collect();
        for (w, metric, unit) in pair_keys {
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
            body += &figs.add(figures::heatmap(
                &format!("pairs-{w}-{metric}"),
                &format!("{w}: {metric} ({unit}), rows send to columns"),
                &names,
                &names,
                &cells,
            ));
        }
    }

    if !r.instances.is_empty() {
        body += "<h2 id=\"instances\">Instances sharing the host</h2>\n";
        for t in &r.instances {
            let bars: Vec<(String, usize, f64, Option<[f64; 2]>)> = t
                .rows
                .iter()
                .enumerate()
                .flat_map(|(g, row)| {
                    row.per_instance
                        .iter()
                        .enumerate()
                        .map(move |(i, v)| (format!("N={} #{}", row.instances, i + 1), g, *v, None))
                })
                .collect();
            let jain: Vec<String> = t
                .rows
                .iter()
                .map(|row| {
                    format!(
                        "N={}: aggregate {}{}",
                        row.instances,
                        fmt_num(row.aggregate),
                        row.jain.map(|j| format!(", Jain {j:.3}")).unwrap_or_default()
                    )
                })
                .collect();
            body += &figs.add(figures::bars(
                &format!("instances-{}-{}", t.group, t.metric),
                &format!("{} · {} — {} per instance ({})", t.group, t.workload, t.metric, jain.join("; ")),
                &t.unit,
                &bars,
            ));
        }
    }

    if !r.disk.is_empty() {
        body += "<h2 id=\"disk\">Disk: file size × record size</h2>\n";
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
                body += &figs.add(figures::heatmap(
                    &format!("disk-{}-{}-{}", d.workload, d.metric, env.environment),
                    &format!(
                        "{} — {} ({}) in {}: file size ↓ × record size →, ×ratio to the baseline",
                        d.workload, d.metric, d.unit, env.environment
                    ),
                    &rows,
                    &cols,
                    &cells,
                ));
            }
        }
    }

    let mech = mechanism_rows(r);
    if !mech.is_empty() || !r.timers.is_empty() {
        body += "<h2 id=\"mechanisms\">Mechanisms</h2>\n";
        if !mech.is_empty() {
            body += &figs.add(figures::forest(
                "mechanisms",
                "Cost per operation, ratio to the baseline (cpuid, clocks, faults, switches, processes, signals, IPC, memory latency)",
                &mech,
            ));
        }
        if !r.timers.is_empty() {
            let series: Series = r
                .timers
                .iter()
                .map(|h| {
                    let b = super::timer::log2_buckets(&h.histogram);
                    let total = b.iter().sum::<u64>().max(1) as f64;
                    let pts = b
                        .iter()
                        .enumerate()
                        .map(|(i, n)| {
                            (if i == 0 { 0.5 } else { (1u64 << (i - 1)) as f64 }, *n as f64 / total * 100.0)
                        })
                        .collect();
                    (format!("{} ({})", h.environment, h.policy), pts)
                })
                .collect();
            body += &figs.add(figures::lines(
                "timer-histogram",
                "Timer wake-up lateness: share of wake-ups per power-of-two bucket (cyclictest's histogram)",
                "lateness (µs, bucket start, log scale)",
                "% of wake-ups",
                &series,
                true,
            ));
        }
    }

    body += "<h2 id=\"failures\">Failed and skipped trials</h2>\n";
    if r.failures.is_empty() {
        body += "<p>None.</p>\n";
    } else {
        body += "<table><tr><th>environment</th><th>workload</th><th>trials</th><th>reason</th></tr>";
        for f in &r.failures {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&f.environment),
                esc(&f.workload),
                f.count,
                esc(&f.reason)
            );
        }
        body += "</table>\n";
    }
    body += &host;
    body += "<p class=\"muted\">mean ± 95 % CI half-width (Student t); ×ratio to the baseline [Fieller 95 % CI]; figures drawn with plotters (SVG). Raw samples: <code>virtperf export</code>.</p>\n";

    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>virtperf run {} — {}</title>\n<style>{STYLE}</style>\n<script>{CHECK_SCRIPT}</script>\n</head><body>\n{body}</body></html>\n",
        r.run_id,
        esc(&r.name)
    );
    Ok(Page { html, figures: figs.all })
}

/// The table of one workload case: metric rows, environment columns, mean ± CI and ratio.
fn workload_table(r: &Report, case: &str) -> String {
    let envs: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    let rows: Vec<&super::ResultRow> =
        r.results.iter().filter(|x| x.workload == case && x.peer.is_none() && x.instance.is_none()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut metrics: Vec<(&str, &str, &str)> = Vec::new();
    for x in &rows {
        let k = (x.metric.as_str(), x.unit.as_str(), x.better);
        if !metrics.contains(&k) {
            metrics.push(k);
        }
    }
    let mut t = String::from("<table><tr><th>metric</th>");
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
                    if let Some(o) = &x.overhead {
                        let text = overhead_text(o, better);
                        let class = match super::verdict(o, better) {
                            Some("worse") => "worse",
                            Some("better") => "better",
                            _ => "same",
                        };
                        let _ = write!(cell, "<br><span class=\"{class}\">{}</span>", esc(&text));
                    }
                    let _ = write!(t, "<td class=\"num\">{cell}</td>");
                }
            }
        }
        t += "</tr>";
    }
    t + "</table>\n"
}

/// One network trial per environment: its host CPU over time, per role.
fn cpu_series(store: &Store, run_id: i64, figs: &mut Figs) -> Result<String> {
    let envs = store.environments(run_id)?;
    let cases = store.cases(run_id)?;
    let mut out = String::new();
    let mut seen: Vec<usize> = Vec::new();
    for t in store.trials(run_id)? {
        if t.warmup || t.status != TrialStatus::Ok || seen.contains(&t.env_idx) || t.tester_cpu_ns.is_none() {
            continue;
        }
        let (_, series) = store.trial_detail(t.id)?;
        if series.len() < 3 {
            continue;
        }
        seen.push(t.env_idx);
        let lines = cpu_percent(&series);
        out += &figs.add(figures::lines(
            &format!("cpu-series-{}", envs[t.env_idx].name),
            &format!(
                "{} · {} (trial {}): host CPU over the trial",
                envs[t.env_idx].name, cases[t.case_idx].label, t.id
            ),
            "ms since the trial started",
            "% of one CPU",
            &lines,
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

    #[test]
    fn rfc2544_series_average_repeated_sizes_and_give_percent_of_line() {
        let row = |env: &str, size, ndr: f64| crate::report::rfc2544::Row {
            environment: env.into(),
            direction: "out".into(),
            frame_size: size,
            quick: true,
            line_max_fps: 1000.0,
            ndr_fps: Some(ndr),
            pdr_fps: None,
            ndr_confirmed: true,
            gen_limited: false,
            dut_cpu_pct: None,
            guest_cpu_pct: None,
            latency: serde_json::json!({"mean_us": 10.0}),
            loss_curve: Vec::new(),
            b2b_mean: None,
            b2b_capped: false,
            steps: 1,
        };
        let rows = [row("a", 64, 400.0), row("a", 64, 600.0), row("a", 128, 900.0)];
        let [fps, pct, lat] = rfc2544_series(&rows);
        assert_eq!(fps[0].1, vec![(64.0, 500.0), (128.0, 900.0)]);
        assert_eq!(pct[0].1, vec![(64.0, 50.0), (128.0, 90.0)]);
        assert_eq!(lat[0].0, "a out");
    }

    #[test]
    fn escaping_and_slugs() {
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(slug("forest-tcp_goodput (Gbit/s)"), "forest-tcp-goodput-gbit-s");
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(case_short("disk [file_size=16MiB,record_size=64KiB]"), "disk 16MiB,64KiB");
        assert_eq!(case_short("memcpy"), "memcpy");
    }
}
