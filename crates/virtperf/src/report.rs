//! Reports, always computed from the database (so `run` and `report` print the same thing):
//! summaries per environment × case × metric, overhead versus the native baseline with Fieller
//! 95 % intervals, the host-vs-guest clock check, start times, and failures.

use std::collections::BTreeMap;

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};
use serde::Serialize;
use virtperf_stats::{ratio_ci, Summary};
use virtperf_workload::Better;

use crate::store::{Store, TrialRow};

/// Derived per-trial metric: CPU time of the instance's host-side processes during the trial.
pub const HOST_CPU: &str = "host_cpu_time";
/// Derived for network workloads: the tester's host CPU, the agent's own CPU (what `sar` inside
/// the environment would attribute to the workload), and host CPU per Gbit moved (netperf's
/// service demand; seed 000's "CPU cost").
pub const TESTER_CPU: &str = "tester_cpu_time";
pub const GUEST_CPU: &str = "guest_cpu_time";
pub const CPU_PER_GBIT: &str = "cpu_per_gbit";
const DERIVED: &[&str] = &[HOST_CPU, TESTER_CPU, GUEST_CPU, CPU_PER_GBIT];

/// Host and guest clocks disagree when they differ by more than this fraction…
const CLOCK_REL_TOL: f64 = 0.05;
/// …and by more than this many milliseconds. The host's span also covers the workload's setup
/// (allocating and faulting in its buffers: ≈ 0.5 ms for memcpy's 2 × 10 MiB) and scheduling on a
/// shared host; 2 % / 0.5 ms flagged such noise on nearly every CPU workload of a default run,
/// which hid the findings that matter (a guest clock off by 5 % or more, gVisor's +17 % on memcpy).
const CLOCK_ABS_TOL_MS: f64 = 1.0;

#[derive(Debug, Serialize)]
pub struct Overhead {
    /// environment mean / native mean
    pub ratio: f64,
    /// Fieller 95 % interval; null when unbounded
    pub ci95: Option<[f64; 2]>,
}

#[derive(Debug, Serialize)]
pub struct ResultRow {
    pub environment: String,
    /// All-pairs results: the receiving environment (`environment` sends to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    pub workload: String,
    pub params: serde_json::Value,
    pub metric: String,
    pub unit: String,
    pub better: &'static str,
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    pub stdev: f64,
    pub min: f64,
    pub max: f64,
    pub cv: Option<f64>,
    pub ci95: [f64; 2],
    /// Samples flagged by median/MAD (kept in every statistic).
    pub outliers: usize,
    pub overhead: Option<Overhead>,
}

#[derive(Debug, Serialize)]
pub struct ClockCheck {
    pub environment: String,
    pub workload: String,
    pub host_ms_mean: f64,
    pub guest_ms_mean: f64,
    /// host / guest
    pub ratio: f64,
    pub agree: bool,
}

#[derive(Debug, Serialize)]
pub struct EnvSummary {
    pub name: String,
    pub kind: String,
    pub params: serde_json::Value,
    pub launches: usize,
    pub start_ms_mean: Option<f64>,
}

#[derive(Debug, Serialize, Default)]
pub struct Counts {
    pub ok: usize,
    pub failed: usize,
    pub skipped: usize,
    pub pending: usize,
    pub warmup: usize,
}

#[derive(Debug, Serialize)]
pub struct Failure {
    pub environment: String,
    pub workload: String,
    pub count: usize,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub run_id: i64,
    pub name: String,
    pub status: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub baseline: Option<String>,
    pub overhead_method: &'static str,
    pub results: Vec<ResultRow>,
    pub environments: Vec<EnvSummary>,
    pub clock_checks: Vec<ClockCheck>,
    pub trials: Counts,
    pub failures: Vec<Failure>,
    /// The analytic ceilings of the lab's emulated link (empty when unshaped).
    pub ceilings: Vec<Ceiling>,
    /// RFC 2544 procedures, one row per measured trial.
    pub rfc2544: Vec<crate::rfc2544::Row>,
    pub manifest: serde_json::Value,
}

fn better_of(metric: &str) -> Better {
    if DERIVED.contains(&metric) {
        return Better::Lower;
    }
    virtperf_workload::metric(metric).map(|m| m.better).unwrap_or(Better::Lower)
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
        // Gbit moved = Σ goodput (all flows) × the trial's host-clock duration.
        let gbps: f64 = t
            .samples
            .iter()
            .filter(|s| s.metric.contains("goodput") && s.unit == "Gbit/s")
            .map(|s| s.value)
            .sum();
        if let (Some(cpu), Some(h)) = (t.host_cpu_ns, t.host_ns) {
            let gbit = gbps * h as f64 / 1e9;
            if gbit > 0.0 {
                v.push((CPU_PER_GBIT.to_string(), "CPU-s/Gbit".to_string(), cpu as f64 / 1e9 / gbit));
            }
        }
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

fn ceilings(manifest: &serde_json::Value, cases: &[crate::store::CaseRow]) -> Vec<Ceiling> {
    let lab = &manifest["lab"];
    let Some(rate) = lab["rate_bps"].as_u64() else { return Vec::new() };
    let mtu = lab["mtu"].as_u64().unwrap_or(1500) as u32;
    let spec = crate::lab::LabSpec { mtu, rate_bps: Some(rate), ..Default::default() };
    let basis =
        format!("{} Mbit/s on the wire (preamble, FCS, gap counted), MTU {mtu}", fmt_num(rate as f64 / 1e6));
    let mut out = Vec::new();
    for c in cases {
        let params: BTreeMap<String, serde_json::Value> =
            serde_json::from_value(c.params.clone()).unwrap_or_default();
        let p = virtperf_workload::Params(&params);
        match c.kind.as_str() {
            "tcp_stream" => {
                if let Some(bps) = spec.tcp_ceiling_bps() {
                    out.push(Ceiling {
                        workload: c.label.clone(),
                        metric: "tcp_goodput".into(),
                        unit: "Gbit/s".into(),
                        value: bps / 1e9,
                        basis: format!("{basis}, MSS {} with TCP timestamps", mtu.saturating_sub(52)),
                    });
                }
            }
            "udp_stream" => {
                if let Ok(payload) = virtperf_workload::net::udp_payload(&p) {
                    if let Some(pps) = spec.udp_ceiling_pps(payload as u64) {
                        out.push(Ceiling {
                            workload: c.label.clone(),
                            metric: "udp_recv_rate".into(),
                            unit: "kpps".into(),
                            value: pps / 1e3,
                            basis: format!("{basis}, {payload}-byte payloads"),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

pub fn build(store: &Store, run_id: i64) -> Result<Report> {
    let info = store.run(run_id)?;
    let envs = store.environments(run_id)?;
    let cases = store.cases(run_id)?;
    let trials = store.trials(run_id)?;
    let baseline = envs.iter().find(|e| e.kind == "native").map(|e| e.idx);

    let mut counts = Counts::default();
    // (case, metric) → unit, and per env the values
    let mut metrics: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
    // (case, metric, (environment, peer)) → values; the peer is set in all-pairs trials only.
    type Column = (usize, Option<usize>);
    let mut values: BTreeMap<(usize, String, Column), Vec<f64>> = BTreeMap::new();
    let mut clocks: BTreeMap<(usize, usize), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut fails: BTreeMap<(usize, usize, String), usize> = BTreeMap::new();
    for t in &trials {
        match t.status.as_str() {
            "ok" if t.warmup => counts.warmup += 1,
            "ok" => counts.ok += 1,
            "failed" => counts.failed += 1,
            "skipped" => counts.skipped += 1,
            _ => counts.pending += 1,
        }
        if t.status != "ok" && t.status != "pending" {
            *fails.entry((t.env_idx, t.case_idx, t.reason.clone().unwrap_or_default())).or_default() += 1;
        }
        if t.status != "ok" || t.warmup {
            continue;
        }
        for (m, unit, x) in trial_values(t) {
            let ms = metrics.entry(t.case_idx).or_default();
            if !ms.iter().any(|(n, _)| *n == m) {
                ms.push((m.clone(), unit));
            }
            values.entry((t.case_idx, m, (t.env_idx, t.peer_idx))).or_default().push(x);
        }
        if let (Some(h), Some(g)) = (t.host_ns, t.guest_ns) {
            let c = clocks.entry((t.case_idx, t.env_idx)).or_default();
            c.0.push(h as f64 / 1e6);
            c.1.push(g as f64 / 1e6);
        }
    }

    let mut results = Vec::new();
    for case in &cases {
        let Some(ms) = metrics.get(&case.idx) else { continue };
        // Declared metrics first (in the workload's order), then derived ones.
        let mut ms = ms.clone();
        let order = |m: &str| {
            virtperf_workload::find(&case.kind)
                .and_then(|w| w.metrics().iter().position(|d| d.name == m))
                .unwrap_or(usize::MAX)
        };
        ms.sort_by_key(|(m, _)| order(m));
        for (m, unit) in &ms {
            let base = baseline
                .and_then(|b| values.get(&(case.idx, m.clone(), (b, None))))
                .and_then(|v| Summary::of(v));
            let columns: Vec<(usize, Option<usize>)> = envs
                .iter()
                .flat_map(|a| {
                    std::iter::once((a.idx, None))
                        .chain(envs.iter().filter(|b| b.idx != a.idx).map(|b| (a.idx, Some(b.idx))))
                })
                .collect();
            for (ei, peer) in columns {
                let env = &envs[ei];
                let Some(v) = values.get(&(case.idx, m.clone(), (ei, peer))) else { continue };
                let Some(s) = Summary::of(v) else { continue };
                // An all-pairs cell has no native counterpart to divide by.
                let overhead = match (&base, Some(env.idx) != baseline && peer.is_none()) {
                    (Some(b), true) => ratio_ci(&s, b)
                        .map(|r| Overhead { ratio: r.ratio, ci95: r.ci95.map(|(l, h)| [l, h]) }),
                    _ => None,
                };
                results.push(ResultRow {
                    environment: env.name.clone(),
                    peer: peer.map(|p| envs[p].name.clone()),
                    workload: case.label.clone(),
                    params: case.params.clone(),
                    metric: m.clone(),
                    unit: unit.clone(),
                    better: if better_of(m) == Better::Higher { "higher" } else { "lower" },
                    n: s.n,
                    mean: s.mean,
                    median: s.median,
                    stdev: s.stdev,
                    min: s.min,
                    max: s.max,
                    cv: s.cv.is_finite().then_some(s.cv),
                    ci95: [s.ci95.0, s.ci95.1],
                    outliers: s.outliers.len(),
                    overhead,
                });
            }
        }
    }

    let mut clock_checks = Vec::new();
    for ((c, e), (h, g)) in &clocks {
        let (hm, gm) = (h.iter().sum::<f64>() / h.len() as f64, g.iter().sum::<f64>() / g.len() as f64);
        let diff = (hm - gm).abs();
        clock_checks.push(ClockCheck {
            environment: envs[*e].name.clone(),
            workload: cases[*c].label.clone(),
            host_ms_mean: hm,
            guest_ms_mean: gm,
            ratio: if gm > 0.0 { hm / gm } else { f64::NAN },
            agree: diff <= CLOCK_ABS_TOL_MS || diff <= CLOCK_REL_TOL * gm,
        });
    }

    let starts = store.start_times(run_id)?;
    let environments = envs
        .iter()
        .map(|e| {
            let s: Vec<f64> = starts.iter().filter(|(i, _)| *i == e.idx).map(|(_, ms)| *ms).collect();
            EnvSummary {
                name: e.name.clone(),
                kind: e.kind.clone(),
                params: e.params.clone(),
                launches: s.len(),
                start_ms_mean: (!s.is_empty()).then(|| s.iter().sum::<f64>() / s.len() as f64),
            }
        })
        .collect();

    let failures = fails
        .into_iter()
        .map(|((e, c, reason), count)| Failure {
            environment: envs[e].name.clone(),
            workload: cases[c].label.clone(),
            count,
            reason,
        })
        .collect();

    Ok(Report {
        run_id,
        name: info.name,
        status: info.status,
        started_at: info.started_at,
        finished_at: info.finished_at,
        baseline: baseline.map(|b| envs[b].name.clone()),
        overhead_method:
            "ratio of means (environment / native), Fieller 95% interval, Welch-Satterthwaite df",
        results,
        environments,
        clock_checks,
        trials: counts,
        failures,
        ceilings: ceilings(&info.manifest, &cases),
        rfc2544: {
            let mut rows: Vec<(usize, crate::rfc2544::Row)> = trials
                .iter()
                .filter(|t| t.status == "ok" && !t.warmup && cases[t.case_idx].kind == "rfc2544")
                .filter_map(|t| {
                    let (extra, _) = store.trial_detail(t.id).ok()?;
                    Some((
                        t.env_idx,
                        crate::rfc2544::Row::from_detail(&envs[t.env_idx].name, extra.as_ref()?)?,
                    ))
                })
                .collect();
            rows.sort_by(|a, b| {
                (a.0, &a.1.direction, a.1.frame_size).cmp(&(b.0, &b.1.direction, b.1.frame_size))
            });
            rows.into_iter().map(|r| r.1).collect()
        },
        manifest: info.manifest,
    })
}

fn keys_empty(t: &Table) -> bool {
    t.row_iter().next().is_none()
}

/// All-pairs results as matrices (the practicum's table): rows send, columns receive; one matrix
/// per workload case and metric.
fn render_matrices(r: &Report, envs: &[&str]) -> String {
    let mut out = String::new();
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    // Raw CPU times are in the JSON; the matrices show the workload's metrics and CPU per Gbit.
    let shown = |m: &str| ![HOST_CPU, TESTER_CPU, GUEST_CPU].contains(&m);
    for x in r.results.iter().filter(|x| x.peer.is_some() && shown(&x.metric)) {
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (w, m, unit) in keys {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
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
                    .map(|x| format!("{} ± {}", fmt_num(x.mean), fmt_num((x.ci95[1] - x.ci95[0]) / 2.0)))
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

/// 4 significant digits, no exponent for ordinary magnitudes.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e9).contains(&a) {
        return format!("{x:.3e}");
    }
    let digits = (3 - a.log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

fn overhead_text(o: &Overhead, better: &str) -> String {
    let verdict = match o.ci95 {
        Some([l, h]) if l > 1.0 || h < 1.0 => {
            let bigger = l > 1.0;
            let worse = (bigger && better == "lower") || (!bigger && better == "higher");
            if worse {
                " worse"
            } else {
                " better"
            }
        }
        Some(_) => " ~same",
        None => "",
    };
    match o.ci95 {
        Some([l, h]) => format!("×{:.3} [{:.3}, {:.3}]{verdict}", o.ratio, l, h),
        None => format!("×{:.3} [unbounded]", o.ratio),
    }
}

/// The terminal table: rows = workload / metric, columns = environments.
pub fn render_table(r: &Report) -> String {
    let mut envs: Vec<&str> = Vec::new();
    for e in &r.environments {
        envs.push(&e.name);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
    let mut header = vec![Cell::new("workload / metric")];
    header.extend(envs.iter().map(|e| {
        Cell::new(if Some(*e) == r.baseline.as_deref() { format!("{e} (baseline)") } else { e.to_string() })
    }));
    t.set_header(header);
    let mut keys: Vec<(&str, &str, &str, &str)> = Vec::new();
    for row in r.results.iter().filter(|x| x.peer.is_none()) {
        let k = (row.workload.as_str(), row.metric.as_str(), row.unit.as_str(), row.better);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut last_w = "";
    for (w, m, unit, better) in keys {
        let arrow = if better == "higher" { "↑" } else { "↓" };
        if w != last_w {
            let mut head = vec![Cell::new(w)];
            head.extend(envs.iter().map(|_| Cell::new("")));
            t.add_row(head);
        }
        last_w = w;
        let mut cells = vec![Cell::new(format!("  {m} ({unit}) {arrow}"))];
        for e in &envs {
            let text = match r
                .results
                .iter()
                .find(|x| x.workload == w && x.metric == m && x.environment == *e && x.peer.is_none())
            {
                None => "—".to_string(),
                Some(x) => {
                    let mut s = format!("{} ± {}", fmt_num(x.mean), fmt_num((x.ci95[1] - x.ci95[0]) / 2.0));
                    if x.outliers > 0 {
                        s += &format!("  ({} outl.)", x.outliers);
                    }
                    if let Some(o) = &x.overhead {
                        s += &format!("\n{}", overhead_text(o, better));
                    }
                    s
                }
            };
            cells.push(Cell::new(text));
        }
        t.add_row(cells);
    }
    let mut out = format!(
        "run {} \"{}\" — {} — {} ok, {} failed, {} skipped, {} pending ({} warm-up not counted)\n",
        r.run_id,
        r.name,
        r.status,
        r.trials.ok,
        r.trials.failed,
        r.trials.skipped,
        r.trials.pending,
        r.trials.warmup
    );
    if !keys_empty(&t) {
        out += &t.to_string();
    }
    out += &render_matrices(r, &envs);
    out += &crate::rfc2544::render(&r.rfc2544);
    out += "\nmean ± 95% CI half-width (Student t); ×ratio vs baseline [Fieller 95% CI]; ↑/↓ = higher/lower is better\n";
    for c in &r.ceilings {
        let measured: Vec<String> = r
            .results
            .iter()
            .filter(|x| x.workload == c.workload && x.metric == c.metric)
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
    let starts: Vec<String> = r
        .environments
        .iter()
        .filter_map(|e| e.start_ms_mean.map(|ms| format!("{} {} ms", e.name, fmt_num(ms))))
        .collect();
    if !starts.is_empty() {
        out += &format!("start to agent ready (host clock): {}\n", starts.join(", "));
    }
    for c in r.clock_checks.iter().filter(|c| !c.agree) {
        out += &format!(
            "warning: clocks disagree for {} / {}: host {} ms vs guest {} ms (×{:.3}); trust the host's\n",
            c.environment,
            c.workload,
            fmt_num(c.host_ms_mean),
            fmt_num(c.guest_ms_mean),
            c.ratio
        );
    }
    for f in &r.failures {
        out += &format!(
            "{} trial(s) of {} / {} did not complete: {}\n",
            f.count, f.environment, f.workload, f.reason
        );
    }
    if r.status == "interrupted" {
        out += &format!(
            "this run was interrupted: `virtperf run --resume {}` finishes the missing trials\n",
            r.run_id
        );
    }
    out
}

/// Every raw sample of a run (and every failed trial) as CSV.
pub fn export_csv(store: &Store, run_id: i64, w: &mut dyn std::io::Write) -> Result<()> {
    let envs = store.environments(run_id)?;
    let cases = store.cases(run_id)?;
    writeln!(w, "run_id,trial_id,seq,environment,workload,params,rep,warmup,status,reason,metric,value,unit,host_ns,guest_ns,host_cpu_ns,guest_cpu_ns,peer,tester_cpu_ns")?;
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let o = |x: Option<i64>| x.map(|v| v.to_string()).unwrap_or_default();
    for t in store.trials(run_id)? {
        let prefix = format!(
            "{},{},{},{},{},{},{},{},{},{}",
            run_id,
            t.id,
            t.seq,
            q(&envs[t.env_idx].name),
            q(&cases[t.case_idx].label),
            q(&cases[t.case_idx].params.to_string()),
            t.rep,
            t.warmup as u8,
            t.status,
            q(t.reason.as_deref().unwrap_or(""))
        );
        let peer = t.peer_idx.map(|p| q(&envs[p].name)).unwrap_or_default();
        let suffix = format!(
            "{},{},{},{},{peer},{}",
            o(t.host_ns),
            o(t.guest_ns),
            o(t.host_cpu_ns),
            o(t.guest_cpu_ns),
            o(t.tester_cpu_ns)
        );
        if t.samples.is_empty() {
            writeln!(w, "{prefix},,,,{suffix}")?;
        }
        for s in &t.samples {
            writeln!(w, "{prefix},{},{},{},{suffix}", q(&s.metric), s.value, q(&s.unit))?;
        }
    }
    Ok(())
}

/// Every trial of a run with its raw samples as one JSON document.
pub fn export_json(store: &Store, run_id: i64) -> Result<serde_json::Value> {
    let info = store.run(run_id)?;
    let envs = store.environments(run_id)?;
    let cases = store.cases(run_id)?;
    let trials: Vec<serde_json::Value> = store
        .trials(run_id)?
        .into_iter()
        .map(|t| {
            let (extra, series) = store.trial_detail(t.id).unwrap_or_default();
            let series: Vec<serde_json::Value> =
                series.into_iter().map(|(role, ms, ns)| serde_json::json!([role, ms, ns])).collect();
            serde_json::json!({
                "peer": t.peer_idx.map(|p| envs[p].name.clone()), "tester_cpu_ns": t.tester_cpu_ns,
                "extra": extra, "cpu_series": series,
                "trial_id": t.id, "seq": t.seq, "environment": envs[t.env_idx].name, "workload": cases[t.case_idx].label,
                "workload_name": cases[t.case_idx].workload, "workload_kind": cases[t.case_idx].kind,
                "params": cases[t.case_idx].params, "rep": t.rep, "warmup": t.warmup, "status": t.status, "reason": t.reason,
                "host_ns": t.host_ns, "guest_ns": t.guest_ns, "host_cpu_ns": t.host_cpu_ns, "guest_cpu_ns": t.guest_cpu_ns,
                "samples": t.samples,
            })
        })
        .collect();
    Ok(serde_json::json!({
        "run_id": run_id, "name": info.name, "status": info.status, "started_at": info.started_at,
        "finished_at": info.finished_at, "manifest": info.manifest, "experiment": info.experiment, "trials": trials,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let o = |r, l, h| Overhead { ratio: r, ci95: Some([l, h]) };
        assert!(overhead_text(&o(1.2, 1.1, 1.3), "lower").ends_with("worse"));
        assert!(overhead_text(&o(1.2, 1.1, 1.3), "higher").ends_with("better"));
        assert!(overhead_text(&o(0.8, 0.7, 0.9), "higher").ends_with("worse"));
        assert!(overhead_text(&o(1.0, 0.9, 1.1), "lower").ends_with("~same"));
        assert!(overhead_text(&Overhead { ratio: 2.0, ci95: None }, "lower").contains("unbounded"));
    }
}
