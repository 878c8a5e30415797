//! Why an environment costs what it does (docs/explain.md): each overhead explained by the
//! events the workload causes natively and what each event costs in the environment, both
//! measured in the same run.
//!
//! The model, per environment E and workload w, on time (a rate's ratio is inverted first):
//!
//! ```text
//! T_E(w) / T_native(w) = 1 + Σ_e r_e(w) · Δc_e(E)
//! ```
//!
//! `r_e(w)`: events e per nanosecond of w's native run (its warm-up's counts over the warm-up's
//! timed region, scaled by how much faster the timed trials ran than the counted warm-up — the
//! counters slow every system call). `Δc_e(E)`: what one event costs in E beyond its native cost,
//! solved from the mechanism cases (`syscall`, `pagefault`, `ctxswitch`, `fork`, `exec`,
//! `signal`, `cpu`) the same way: each is a workload too, `R_m − 1 = Σ_e r_e(m) · Δc_e`, one
//! equation per mechanism and as many events — a fork's page faults and system calls are priced
//! as such, the fork's own cost is what remains. Intervals propagate from the measured ratios
//! (delta method); counts are taken as exact. Nothing is fitted to the workloads it predicts: a
//! cell the mechanisms do not explain says so, with the share they leave.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use virtperf_record::mechanisms::{model_events, Mechanism, MECHANISMS};

use super::costs;
use super::rows::ResultRow;

/// What explain reads of a report: its rows, the baseline's name and the run's manifest
/// ([`super::Report::basis`]).
pub struct Basis<'a> {
    pub results: &'a [ResultRow],
    pub baseline: Option<&'a str>,
    pub manifest: &'a Value,
}
use virtperf_record::store::RunRows;

/// The model's verdict on one run.
#[derive(Debug, Clone, Serialize)]
pub struct Explain {
    pub baseline: String,
    /// Each environment's price of each event, beyond native's.
    pub costs: Vec<EventCost>,
    pub cells: Vec<Cell>,
    /// Per environment: cells predicted within ±20 %, and within their interval, of how many
    /// (mechanism cases left out: the model is solved from them).
    pub hits: Vec<Hits>,
    /// What the model could not use, and why.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventCost {
    pub environment: String,
    pub event: &'static str,
    pub what: &'static str,
    /// The mechanism case it was solved from.
    pub from: String,
    /// Extra ns per event (per ns for `cpu_user_ns`), and its 95 % interval.
    pub delta_ns: f64,
    pub ci: [f64; 2],
    /// Its mechanism case's ratio holds 1 here: priced at 0, not solved; `ci` is that ratio's
    /// interval over the case's own rate of the event.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_difference: bool,
    /// Solved alone, it came out below zero — an event cannot cost less than nothing, so the
    /// mechanisms overlap (one's case does the other's events too) more than their counts say.
    /// Held at 0 and the others solved again without it; `solved_ns` is what it came to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solved_ns: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub environment: String,
    pub workload: String,
    pub metric: String,
    /// A mechanism case: the model is solved from it, so it fits by construction.
    pub mechanism: bool,
    /// The measured cost on time (× native) and its interval.
    pub measured: f64,
    pub measured_ci: Option<[f64; 2]>,
    /// The model's cost and its 95 % interval.
    pub predicted: f64,
    pub predicted_ci: [f64; 2],
    /// log(predicted / measured), as a percentage of the measured cost.
    pub error_percent: f64,
    /// Each event's share of the measured overhead (cost − 1), and what they leave.
    pub shares: Vec<Share>,
    pub unexplained: f64,
    pub within_20: bool,
    /// The measured cost lies within the prediction's interval widened by the measurement's.
    pub within_interval: bool,
    /// The workload's events per ms of its native run (the counts the prediction used).
    pub rates_per_ms: BTreeMap<&'static str, f64>,
    /// Counts the environment took of itself that are not native's for the same work (the
    /// first assumption, checked where both sides count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub own_counts: Vec<CountCheck>,
}

/// An event the environment counted itself at another rate than native for the same work: the
/// model's first assumption (counts do not depend on the environment) checked where both sides
/// can count — a network stack's packets (every environment counts its own interfaces), a guest
/// kernel's page faults. The model still prices native's counts: this says where that is wrong.
#[derive(Debug, Clone, Serialize)]
pub struct CountCheck {
    pub event: &'static str,
    pub what: &'static str,
    /// The environment's count per unit of work over native's.
    pub ratio: f64,
    /// Per counted pass (median): native's, and the environment's.
    pub native_per_pass: f64,
    pub env_per_pass: f64,
}

/// The counts every environment can take of itself: (event, its key in the counts, in words).
/// gVisor's getrusage says 0 faults and no environment's /proc/self/io holds its children's
/// calls, so a count of 0 where native's is not is "not counted", never "none".
const OWN_COUNTS: [(&str, &str, &str); 3] = [
    ("packets_rx", "net_rx_packets", "packets received"),
    ("packets_tx", "net_tx_packets", "packets sent"),
    ("faults_minor", "ru_minflt", "page faults"),
];

/// A count that differs from native's by more than this factor (either way) is said.
const OWN_COUNT_FACTOR: f64 = 1.5;
/// ... where native's pass held at least this many (fewer say nothing about a rate).
const OWN_COUNT_MIN: f64 = 20.0;

/// A case's stored trials in one environment, alone (no peer) and ok: its warm-ups (the counted
/// passes) or its timed trials.
fn case_trials(
    rows: &RunRows,
    env: usize,
    case: usize,
    warmup: bool,
) -> impl Iterator<Item = &virtperf_record::store::TrialRow> {
    rows.trials.iter().filter(move |t| {
        t.env_idx == env
            && t.case_idx == case
            && t.warmup == warmup
            && t.peer_idx.is_none()
            && t.status == virtperf_record::store::TrialStatus::Ok
    })
}

/// [`OWN_COUNTS`] of one environment's counted warm-ups of a case: (per unit of work, per pass),
/// medians over the passes. A unit of work is what the headline measures: a flow's transactions,
/// bytes or datagrams (its rate × the pass's span), a time per operation's operations, a fixed
/// work's pass — the same on both sides, so their ratio is per the same work. Page faults only
/// for a fixed work (a flow's are its setup's, whatever it carries).
fn own_counts(
    rows: &RunRows,
    env: usize,
    case: usize,
    row: &ResultRow,
) -> BTreeMap<&'static str, (f64, f64)> {
    let mut per: BTreeMap<&'static str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for t in case_trials(rows, env, case, true) {
        let Some(c) = rows.detail(t.id).and_then(pass_counts) else { continue };
        let elapsed = c.get("elapsed_ns").and_then(Value::as_f64).filter(|e| *e > 0.0);
        let value = t.samples.iter().find(|s| s.metric == row.metric).map(|s| s.value).filter(|v| *v > 0.0);
        let fixed = row.better != "higher" && !row.unit.contains("/op");
        let work = match (fixed, value, elapsed) {
            (true, _, _) => 1.0,
            (false, Some(v), Some(e)) if row.better == "higher" => v * e,
            (false, Some(v), Some(e)) => e / v,
            _ => continue,
        };
        for (event, key, _) in OWN_COUNTS {
            // A flow's or a per-operation case's faults are its setup's, not its work's: a UML
            // flow of a tenth of native's transactions booked the same faults at 16× per one.
            if event == "faults_minor" && !fixed {
                continue;
            }
            if let Some(n) = c.get(key).and_then(Value::as_f64) {
                let e = per.entry(event).or_default();
                e.0.push(n / work);
                e.1.push(n);
            }
        }
    }
    // Each list holds a pass at least: it was made by its first push.
    per.into_iter().map(|(e, (u, p))| (e, (virtperf_stats::median(&u), virtperf_stats::median(&p)))).collect()
}

/// The environment's own counts that are not native's for the same work ([`CountCheck`]).
fn count_checks(
    env: &BTreeMap<&'static str, (f64, f64)>,
    native: &BTreeMap<&'static str, (f64, f64)>,
) -> Vec<CountCheck> {
    OWN_COUNTS
        .iter()
        .filter_map(|&(event, _, what)| {
            let (eu, ep) = *env.get(event)?;
            let (nu, np) = *native.get(event)?;
            if np < OWN_COUNT_MIN || ep <= 0.0 || nu <= 0.0 {
                return None;
            }
            let ratio = eu / nu;
            (!(1.0 / OWN_COUNT_FACTOR..=OWN_COUNT_FACTOR).contains(&ratio)).then_some(CountCheck {
                event,
                what,
                ratio,
                native_per_pass: np,
                env_per_pass: ep,
            })
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct Share {
    pub event: &'static str,
    pub share: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hits {
    pub environment: String,
    pub cells: usize,
    pub within_20: usize,
    pub within_interval: usize,
}

/// z of a two-sided interval at `level`.
fn z_of(level: f64) -> f64 {
    virtperf_stats::t_quantile(level, 1e6)
}

/// The events a counted pass saw: its detail's `counts`, or for a network flow the side in the
/// environment (`flows[i][dut].counts`), summed over flows.
pub fn pass_counts(detail: &Value) -> Option<Value> {
    if let Some(c) = detail.get("counts").filter(|c| c.is_object()) {
        return Some(c.clone());
    }
    let flows = detail.get("flows")?.as_array()?;
    let mut sum = serde_json::Map::new();
    for f in flows {
        let side = f.get("dut").and_then(Value::as_str)?;
        let c = f.get(side)?.get("counts")?.as_object()?;
        for (k, v) in c {
            let Some(x) = v.as_f64() else { continue };
            let e = sum.entry(k.clone()).or_insert(Value::from(0.0));
            let acc = e.as_f64().unwrap_or(0.0);
            // The flows ran at once: their region is the longest, their events add — but for the
            // packets of the namespace's interfaces, which each flow's side counted whole.
            *e = Value::from(if k == "elapsed_ns" || k.starts_with("net_") { acc.max(x) } else { acc + x });
        }
    }
    (!sum.is_empty()).then_some(Value::Object(sum))
}

/// A case's timed trials in one environment whose sender stalled — a send that waited its
/// whole time for room in the socket's buffer and moved nothing (`send_stalls` of the side in
/// the environment) — and how many timed trials there are. A stalled sender's rate is its
/// waits', not its packets' cost: gVisor's netstack took 1 518-byte datagrams at 1.4 kpps, in
/// bursts between 100 ms waits, against native's 442–690 kpps.
fn stalled_trials(rows: &RunRows, env: usize, case: usize) -> (usize, usize) {
    let stalled = |d: &Value| {
        d.get("flows").and_then(Value::as_array).is_some_and(|flows| {
            flows.iter().any(|f| {
                let side = f.get("dut").and_then(Value::as_str).unwrap_or("client");
                f[side]["send_stalls"].as_u64().is_some_and(|n| n > 0)
            })
        })
    };
    case_trials(rows, env, case, false)
        .fold((0, 0), |(s, n), t| (s + usize::from(rows.detail(t.id).is_some_and(stalled)), n + 1))
}

/// A case's timed trials in one environment where a request or response was lost — `udp_rr`'s
/// unanswered requests (each a 100 ms timeout), `tcp_rr`'s transactions that waited for a
/// retransmission (50 ms or more) — and the lost ones' count. Their time is the timeouts', not
/// the packets' cost: UML's `tap` transport lost 3 requests a 500 ms `udp_rr` trial, 300 ms of its
/// 500, and priced a packet at +261 µs where its round trip took 55 µs more than native's.
fn lossy_trials(rows: &RunRows, env: usize, case: usize) -> (usize, f64) {
    case_trials(rows, env, case, false).fold((0, 0.0), |(n, lost), t| {
        let here: f64 = t
            .samples
            .iter()
            .filter(|s| s.metric.ends_with("_rr_timeouts") || s.metric.ends_with("_rr_waits"))
            .map(|s| s.value)
            .sum();
        (n + usize::from(here > 0.0), lost + here)
    })
}

/// One cell's measured cost on time, with its log-scale standard error.
struct Measured {
    row: usize,
    cost: f64,
    ci: Option<[f64; 2]>,
    se_log: f64,
}

fn measured(r: &Basis, i: usize) -> Option<Measured> {
    let x = &r.results[i];
    let o = x.overhead.as_ref().filter(|o| o.ratio.is_finite() && o.ratio > 0.0)?;
    let (cost, ci) = costs::cost(o.ratio, o.ci, x.better);
    let se_log = ci
        .filter(|[l, h]| *l > 0.0 && h > l)
        .map(|[l, h]| (h.ln() - l.ln()) / (2.0 * z_of(o.ci_level)))
        .unwrap_or(f64::INFINITY);
    Some(Measured { row: i, cost, ci, se_log })
}

/// The headline row of (environment, case): the first one with a ratio (the baseline's: the
/// first, its metric the one the others' ratios are of).
fn headline(r: &Basis, env: &str, case: &str) -> Option<usize> {
    let base = r.baseline == Some(env);
    r.results.iter().position(|x| {
        x.environment == env
            && x.workload == case
            && x.peer.is_none()
            && x.instance.is_none()
            && x.headline
            && (base || x.overhead.is_some())
    })
}

/// The share of a trial's work its warm-up did, where the headline is the time of the whole
/// work (`pde`'s iterations, `memcpy`'s copies scaled down): 1 for a time per operation, a rate,
/// or a flow's duration (its figures are per transaction or per byte either way).
fn warmup_share(case: &virtperf_record::store::CaseRow, row: &ResultRow) -> f64 {
    if row.unit.contains("/op") || row.better == "higher" {
        return 1.0;
    }
    case.record.warmup_share.unwrap_or(1.0)
}

/// Events per ns of a case's native run, from its counted warm-ups: (mean, standard error) per
/// event. None when no warm-up of the baseline was counted.
fn rates(
    rows: &RunRows,
    base: usize,
    case: usize,
    row: &ResultRow,
) -> Option<BTreeMap<&'static str, (f64, f64)>> {
    let mut per: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let work_share = warmup_share(&rows.cases[case], row);
    let streams = rows.cases[case].record.streams;
    for t in case_trials(rows, base, case, true) {
        let Some(c) = rows.detail(t.id).and_then(pass_counts) else { continue };
        // A pass without its span (an agent that could not time it) is left out, not the case.
        let Some(elapsed) = c.get("elapsed_ns").and_then(Value::as_f64).filter(|e| *e > 0.0) else {
            continue;
        };
        // The counters slowed the pass (every system call through the tracepoint): its events
        // are per unit of the workload's work, and the timed trials did that work faster.
        let pass = t.samples.iter().find(|s| s.metric == row.metric).map(|s| s.value);
        let speed = match pass {
            Some(p) if p > 0.0 && row.mean > 0.0 => {
                if row.better == "higher" {
                    row.mean / p
                } else {
                    p / work_share / row.mean
                }
            }
            _ => 1.0,
        };
        for (e, n) in model_events(&c, streams) {
            per.entry(e).or_default().push(n / elapsed * speed);
        }
    }
    // Page faults from the timed trials themselves where they said them (getrusage, on the
    // baseline's): a warm-up's allocator state is not theirs — memcpy's counted pass reused the
    // buffers of the pass before it, its timed trials faulted theirs in afresh (none against
    // 2 561 here).
    let timed: Vec<f64> = case_trials(rows, base, case, false)
        .filter_map(|t| {
            let c = rows.detail(t.id).and_then(pass_counts)?;
            let elapsed = c.get("elapsed_ns").and_then(Value::as_f64).filter(|e| *e > 0.0)?;
            Some(c.get("ru_minflt")?.as_f64()? / elapsed)
        })
        .collect();
    if !per.is_empty() && !timed.is_empty() {
        per.insert("faults_minor", timed);
    }
    (!per.is_empty()).then(|| {
        per.into_iter()
            .map(|(e, v)| {
                let n = v.len() as f64;
                let m = v.iter().sum::<f64>() / n;
                let se = if v.len() > 1 {
                    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0) / n).sqrt()
                } else {
                    0.0
                };
                (e, (m, se))
            })
            .collect()
    })
}

/// Solves A x = b (square) by Gaussian elimination with partial pivoting; also returns A⁻¹.
fn solve(a: &[Vec<f64>], b: &[f64]) -> Option<(Vec<f64>, Vec<Vec<f64>>)> {
    let n = b.len();
    // [A | I] reduced to [I | A⁻¹].
    let mut m: Vec<Vec<f64>> = a
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut r = row.clone();
            r.extend((0..n).map(|j| if i == j { 1.0 } else { 0.0 }));
            r
        })
        .collect();
    for col in 0..n {
        let p = (col..n).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[p][col].abs() < 1e-15 {
            return None;
        }
        m.swap(col, p);
        let d = m[col][col];
        for v in m[col].iter_mut() {
            *v /= d;
        }
        for i in 0..n {
            if i != col {
                let f = m[i][col];
                if f != 0.0 {
                    let pivot = m[col].clone();
                    for (v, pv) in m[i].iter_mut().zip(pivot) {
                        *v -= f * pv;
                    }
                }
            }
        }
    }
    let inv: Vec<Vec<f64>> = m.iter().map(|r| r[n..].to_vec()).collect();
    let x = inv.iter().map(|r| r.iter().zip(b).map(|(a, b)| a * b).sum()).collect();
    Some((x, inv))
}

/// Prices, the matrix that makes them of the cases' costs, and each held price's solved value.
type Solved = (Vec<f64>, Vec<Vec<f64>>, Vec<Option<f64>>);

/// [`solve`] with every price at least 0: while one comes out below zero, the most negative is
/// held at 0 and the rest solved again by least squares over all the mechanism cases (the normal
/// equations; `inv` is then the pseudo-inverse, so the covariance formula stays). Returns the
/// prices, that matrix, and for each held price what it came to before it was held. (Lawson and
/// Hanson's active set, one step at a time: the few events here never need more.)
fn solve_nonnegative(a: &[Vec<f64>], b: &[f64]) -> Option<Solved> {
    let n = b.len();
    let (mut x, mut inv) = solve(a, b)?;
    let mut held: Vec<Option<f64>> = vec![None; n];
    while let Some(k) =
        (0..n).filter(|&k| held[k].is_none() && x[k] < 0.0).min_by(|&i, &j| x[i].total_cmp(&x[j]))
    {
        held[k] = Some(x[k]);
        let free: Vec<usize> = (0..n).filter(|&j| held[j].is_none()).collect();
        if free.is_empty() {
            x = vec![0.0; n];
            inv = vec![vec![0.0; n]; n];
            break;
        }
        // Normal equations over the free columns: (AᵀA) y = Aᵀb, P = (AᵀA)⁻¹Aᵀ.
        let ata: Vec<Vec<f64>> = free
            .iter()
            .map(|&i| free.iter().map(|&j| (0..n).map(|r| a[r][i] * a[r][j]).sum()).collect())
            .collect();
        let atb: Vec<f64> = free.iter().map(|&i| (0..n).map(|r| a[r][i] * b[r]).sum()).collect();
        let (y, ata_inv) = solve(&ata, &atb)?;
        let mut nx = vec![0.0; n];
        let mut ninv = vec![vec![0.0; n]; n];
        for (fi, &i) in free.iter().enumerate() {
            nx[i] = y[fi];
            for r in 0..n {
                ninv[i][r] = free.iter().enumerate().map(|(fj, &j)| ata_inv[fi][fj] * a[r][j]).sum();
            }
        }
        x = nx;
        inv = ninv;
    }
    Some((x, inv, held))
}

/// The model over a built report and its run's rows; None when the run counted nothing.
/// Events per ns (mean, standard error) of each case's native run, by case index, where its
/// warm-up was counted.
pub type CaseRates = BTreeMap<usize, BTreeMap<&'static str, (f64, f64)>>;

/// [`CaseRates`] of a run whose baseline was counted.
pub fn native_rates(rows: &RunRows, r: &Basis) -> CaseRates {
    let Some(base_name) = r.baseline else { return CaseRates::new() };
    let Some(base) = rows.envs.iter().find(|e| e.name == base_name).map(|e| e.idx) else {
        return CaseRates::new();
    };
    rows.cases
        .iter()
        .filter_map(|c| {
            let row = headline(r, base_name, &c.label)?;
            Some((c.idx, rates(rows, base, c.idx, &r.results[row])?))
        })
        .collect()
}

/// A workload's cost in an environment from its native rates and the environment's prices (as
/// `build` states them), the prices taken as independent (`build` uses their covariance where it
/// solved them itself): (cost, 95 % interval, each event's share of the overhead).
pub fn predict(
    rates: &BTreeMap<&'static str, (f64, f64)>,
    prices: &[&EventCost],
) -> (f64, [f64; 2], Vec<Share>) {
    let mut sum = 0.0;
    let mut var = 0.0;
    let mut parts = Vec::new();
    for p in prices {
        let (r, r_se) = rates.get(p.event).copied().unwrap_or((0.0, 0.0));
        let se = (p.ci[1] - p.ci[0]) / (2.0 * 1.96);
        let v = r * p.delta_ns;
        sum += v;
        var += (r * se).powi(2) + (p.delta_ns * r_se).powi(2);
        parts.push((p.event, v));
    }
    let half = 1.96 * var.sqrt();
    let predicted = 1.0 + sum;
    let shares = parts
        .into_iter()
        .filter(|(_, v)| sum.abs() > 0.0 && (v / sum).abs() >= 0.005)
        .map(|(event, v)| Share { event, share: v / sum })
        .collect();
    (predicted, log_interval(predicted, half), shares)
}

/// A prediction's 95 % interval from its half-width on the linear scale (the delta method's):
/// on the log scale, as every measured ratio's is — `p·e^(±half/p)` — so it never reaches zero
/// or below, which a cost cannot (a half-width wider than the prediction read "[0.00×, 43×]").
/// Its log half-width is the `se_pred` that `within_interval` uses.
pub fn log_interval(predicted: f64, half: f64) -> [f64; 2] {
    if predicted.is_nan() || predicted <= 0.0 || !half.is_finite() {
        return [f64::NAN, f64::NAN];
    }
    let k = (half / predicted).exp();
    [predicted / k, predicted * k]
}

pub fn build(rows: &RunRows, r: &Basis) -> Option<Explain> {
    let base_name = r.baseline?.to_string();
    let mut notes = Vec::new();
    let case_rates = native_rates(rows, r);
    if case_rates.is_empty() {
        return None;
    }
    if let Some(why) = r.manifest["explain"]["why"].as_str() {
        notes.push(format!("no system call, process or signal counts natively: {why}"));
    }
    // The mechanism case of each event: the first case of its kind (and parameters) with counts.
    let mechs: Vec<(usize, &Mechanism)> = MECHANISMS
        .iter()
        .filter_map(|m| {
            let counted = |kind: &str| {
                rows.cases.iter().find(|c| {
                    let param = |k: &str| {
                        c.params.get(k).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    };
                    c.kind == kind
                        && (m.priced_by(kind, param) || m.older == Some(kind))
                        && case_rates.contains_key(&c.idx)
                })
            };
            let c = counted(m.kind).or_else(|| m.older.and_then(counted));
            // Unpriced matters only where some case has such events (packets: network runs).
            let seen = case_rates.values().any(|r| r.get(m.event).is_some_and(|v| v.0 > 0.0));
            if c.is_none() && seen {
                notes.push(format!(
                    "{}: no counted `{}` case, so their cost is not priced",
                    m.what,
                    m.spec()
                ));
            }
            c.map(|c| (c.idx, m))
        })
        .collect();
    // The baseline's own counts of each case, once for every environment compared with them.
    let base_counts: BTreeMap<usize, BTreeMap<&'static str, (f64, f64)>> =
        match rows.envs.iter().find(|e| e.name == base_name) {
            Some(b) => rows
                .cases
                .iter()
                .filter_map(|c| {
                    let row = headline(r, &base_name, &c.label)?;
                    Some((c.idx, own_counts(rows, b.idx, c.idx, &r.results[row])))
                })
                .collect(),
            None => BTreeMap::new(),
        };
    let mut costs_out = Vec::new();
    let mut cells = Vec::new();
    let mut hits = Vec::new();
    for env in rows.envs.iter().filter(|e| e.name != base_name) {
        // The mechanisms this environment measured, and their events' rates in them.
        let mut used: Vec<(usize, &Mechanism, Measured)> = Vec::new();
        for (c, m) in &mechs {
            let label = &rows.cases[*c].label;
            let Some(i) = headline(r, &env.name, label) else {
                notes.push(format!("{}: no ratio for `{label}`, {} not priced", env.name, m.what));
                continue;
            };
            // A case that spent its time waiting — a stalled sender, a lost request or response —
            // prices its waits, not its event.
            let (stalled, trials) = stalled_trials(rows, env.idx, *c);
            let waited = if stalled > 0 {
                Some(format!("`{label}`'s sender stalled in {stalled} of {trials} trials (a send waited its whole 100 ms for room in the socket's buffer)"))
            } else {
                let (lossy, lost) = lossy_trials(rows, env.idx, *c);
                (lossy > 0).then(|| format!("`{label}` lost {lost:.0} requests or responses in {lossy} of {trials} trials (each waited for a timeout or a retransmission)"))
            };
            if let Some(why) = waited {
                notes.push(format!(
                    "{}: {why}: its rate is the waits', not its packets' cost, so {} are not priced",
                    env.name, m.what
                ));
                continue;
            }
            match measured(r, i).filter(|x| x.se_log.is_finite()) {
                Some(x) => used.push((*c, m, x)),
                None => notes.push(format!("{}: `{label}` has no interval, {} not priced", env.name, m.what)),
            }
        }
        // A mechanism whose ratio's interval holds 1 shows no difference here: its event is
        // priced at 0, not solved. Solved, such prices are noise around zero, and over a program's
        // many events their sum strayed far from it (the container's tar modelled at -0.23x and
        // -0.87x, its mechanisms all within their intervals of 1). The interval stays: the
        // ratio's bounds over the case's own rate of the event, in the cells' intervals.
        let (zeroed, used): (Vec<_>, Vec<_>) = used.into_iter().partition(|u| no_difference(u.2.ci));
        let mut zero_se: Vec<(&'static str, f64)> = Vec::new();
        for u in &zeroed {
            let own = case_rates.get(&u.0).and_then(|m| m.get(u.1.event)).map_or(0.0, |v| v.0);
            let ci = zero_price_interval(u.2.ci, own);
            zero_se.push((u.1.event, (ci[1] - ci[0]) / (2.0 * 1.96)));
            costs_out.push(EventCost {
                environment: env.name.clone(),
                event: u.1.event,
                what: u.1.what,
                from: rows.cases[u.0].label.clone(),
                delta_ns: 0.0,
                ci,
                no_difference: true,
                solved_ns: None,
            });
        }
        if !zeroed.is_empty() {
            let list: Vec<&str> = zeroed.iter().map(|u| u.1.what).collect();
            notes.push(format!(
                "{}: no difference from {base_name} measured for {} (each mechanism's ratio holds 1): priced at 0, their intervals kept",
                env.name,
                list.join(", ")
            ));
        }
        let events: Vec<&'static str> = used.iter().map(|u| u.1.event).collect();
        let rate = |c: usize, e: &str| case_rates.get(&c).and_then(|m| m.get(e)).map_or(0.0, |v| v.0);
        let a: Vec<Vec<f64>> = used.iter().map(|u| events.iter().map(|e| rate(u.0, e)).collect()).collect();
        let b: Vec<f64> = used.iter().map(|u| u.2.cost - 1.0).collect();
        let Some((x, inv, held)) = solve_nonnegative(&a, &b) else {
            notes.push(format!("{}: the mechanism cases' counts do not separate the events", env.name));
            continue;
        };
        for (k, solved) in held.iter().enumerate().filter_map(|(k, h)| h.map(|v| (k, v))) {
            notes.push(format!(
                "{}: {} came out below zero solved with the others ({}): an event cannot cost less than nothing, so the mechanism cases overlap more than their counts say; held at 0, the others solved again without it",
                env.name,
                used[k].1.what,
                super::words::fmt_value(solved, "ns")
            ));
        }
        // Var(b_m) from the measured interval: cost · se_log.
        let var_b: Vec<f64> = used.iter().map(|u| (u.2.cost * u.2.se_log).powi(2)).collect();
        let cov = |i: usize, j: usize| (0..b.len()).map(|k| inv[i][k] * inv[j][k] * var_b[k]).sum::<f64>();
        for (i, u) in used.iter().enumerate() {
            let half = 1.96 * cov(i, i).sqrt();
            costs_out.push(EventCost {
                environment: env.name.clone(),
                event: u.1.event,
                what: u.1.what,
                from: rows.cases[u.0].label.clone(),
                delta_ns: x[i],
                // A held price's interval: what it came to alone, from 0 up.
                ci: match held[i] {
                    Some(v) => [0.0, (v + half).max(0.0)],
                    None => [x[i] - half, x[i] + half],
                },
                no_difference: false,
                solved_ns: held[i],
            });
        }
        let mut h = Hits { environment: env.name.clone(), cells: 0, within_20: 0, within_interval: 0 };
        for c in &rows.cases {
            let (Some(rt), Some(i)) = (case_rates.get(&c.idx), headline(r, &env.name, &c.label)) else {
                continue;
            };
            let Some(m) = measured(r, i) else { continue };
            let contrib: Vec<(&'static str, f64)> =
                events.iter().enumerate().map(|(k, e)| (*e, rt.get(e).map_or(0.0, |v| v.0) * x[k])).collect();
            let predicted = 1.0 + contrib.iter().map(|c| c.1).sum::<f64>();
            let var = (0..events.len())
                .flat_map(|i| (0..events.len()).map(move |j| (i, j)))
                .map(|(i, j)| {
                    let ri = rt.get(events[i]).map_or(0.0, |v| v.0);
                    let rj = rt.get(events[j]).map_or(0.0, |v| v.0);
                    ri * rj * cov(i, j)
                })
                .sum::<f64>()
                + events
                    .iter()
                    .enumerate()
                    .map(|(k, e)| (x[k] * rt.get(e).map_or(0.0, |v| v.1)).powi(2))
                    .sum::<f64>()
                + zero_se.iter().map(|(e, se)| (rt.get(e).map_or(0.0, |v| v.0) * se).powi(2)).sum::<f64>();
            let half = 1.96 * var.sqrt();
            // A mechanism case is one wherever it ran, priced here or not (a stalled sender's).
            let mechanism = mechs.iter().any(|(m, _)| *m == c.idx);
            let overhead = m.cost - 1.0;
            let shares: Vec<Share> = contrib
                .iter()
                // A cell faster than native has no overhead to share out.
                .filter(|(_, v)| overhead > 0.0 && (v / overhead).abs() >= 0.005)
                .map(|(e, v)| Share { event: e, share: v / overhead })
                .collect();
            let explained: f64 = shares.iter().map(|s| s.share).sum();
            let ok_pred = predicted > 0.0;
            let err = if ok_pred { (predicted / m.cost).ln() } else { f64::NEG_INFINITY };
            let se_pred = if ok_pred { half / 1.96 / predicted } else { f64::INFINITY };
            let within_20 = ok_pred && (predicted / m.cost - 1.0).abs() <= 0.20;
            let within_interval = ok_pred && err.abs() <= 1.96 * (se_pred.powi(2) + m.se_log.powi(2)).sqrt();
            if !mechanism {
                h.cells += 1;
                h.within_20 += usize::from(within_20);
                h.within_interval += usize::from(within_interval);
            }
            // The same work's counts on both sides: each side's pass per its own headline.
            let own_counts = base_counts.get(&c.idx).map_or_else(Vec::new, |base| {
                count_checks(&own_counts(rows, env.idx, c.idx, &r.results[m.row]), base)
            });
            cells.push(Cell {
                environment: env.name.clone(),
                workload: c.label.clone(),
                metric: r.results[m.row].metric.clone(),
                mechanism,
                measured: m.cost,
                measured_ci: m.ci,
                predicted,
                predicted_ci: log_interval(predicted, half),
                error_percent: (predicted / m.cost - 1.0) * 100.0,
                shares,
                unexplained: 1.0 - explained,
                within_20,
                within_interval,
                rates_per_ms: rt.iter().map(|(e, v)| (*e, v.0 * 1e6)).collect(),
                own_counts,
            });
        }
        hits.push(h);
    }
    Some(Explain { baseline: base_name, costs: costs_out, cells, hits, notes })
}

/// A cost on time in words: "6.2×", "1.03×".
pub fn times(x: f64) -> String {
    if x >= 9.95 {
        format!("{x:.0}×")
    } else if x >= 1.995 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

/// One event's price: "+56 µs" per event, "×1.02" for user-mode CPU (ns per ns).
fn price(c: &EventCost) -> String {
    if c.no_difference {
        return format!("{} 0", c.what);
    }
    if let Some(v) = c.solved_ns {
        return format!(
            "{} 0 (solved {}{}: overlapping mechanisms, held at 0)",
            c.what,
            if v < 0.0 { "−" } else { "" },
            super::words::fmt_value(v.abs(), "ns")
        );
    }
    if c.event == "cpu_user_ns" {
        return format!("{} ×{:.2}", c.what, 1.0 + c.delta_ns);
    }
    let sign = if c.delta_ns < 0.0 { "−" } else { "+" };
    format!("{} {sign}{}", c.what, super::words::fmt_value(c.delta_ns.abs(), "ns"))
}

/// An event in words ("system calls"), as [`MECHANISMS`] names it; the event's own name else.
pub fn event_words(event: &str) -> &str {
    MECHANISMS.iter().find(|m| m.event == event).map_or(event, |m| m.what)
}

/// The measured interval holds 1: no overhead shown.
fn flat(c: &Cell) -> bool {
    holds_one(c.measured_ci)
}

/// An interval of a ratio that holds 1.
fn holds_one(ci: Option<[f64; 2]>) -> bool {
    ci.is_some_and(|[l, h]| l <= 1.0 && h >= 1.0)
}

/// A mechanism's ratio that shows no difference: its interval holds 1 and lies within
/// 0.8–1.25× ([`flat_words`]' "no measurable overhead"). A wide one that holds 1 is inconclusive,
/// not evidence of none: gVisor's `pipe_rr` at 6.5× over a test's few trials, priced at 0, put
/// the model at 1.15×.
fn no_difference(ci: Option<[f64; 2]>) -> bool {
    holds_one(ci) && ci.is_some_and(|[l, h]| l >= 0.8 && h <= 1.25)
}

/// The interval of an event's price where its mechanism case showed no difference: the case's
/// ratio interval less 1, over the case's own rate of the event (events per ns) — what the event
/// alone could cost and leave that ratio as measured.
fn zero_price_interval(ratio_ci: Option<[f64; 2]>, own_rate: f64) -> [f64; 2] {
    match ratio_ci {
        Some([l, h]) if own_rate > 0.0 => [(l - 1.0) / own_rate, (h - 1.0) / own_rate],
        _ => [0.0, 0.0],
    }
}

/// A cell the mechanisms do not explain: more than half of a measured overhead left over, and the
/// model off by more than 20 %. Not one whose interval holds no overhead (a container's `tar` at
/// 0.80× [0.50×, 1.28×] is no overhead to explain, whatever share of it is left).
fn not_explained(c: &Cell) -> bool {
    !c.mechanism && !flat(c) && c.unexplained > 0.5 && !c.within_20
}

/// A measured interval that holds 1 in words: "no measurable overhead" where the measurement
/// itself lies near 1, "inconclusive (0.6–320×)" where only the interval's width holds it there
/// (a 14× measured with an interval from 0.6× is no evidence of "no overhead").
fn flat_words(c: &Cell) -> String {
    match c.measured_ci {
        Some([l, h]) if !(0.8..=1.25).contains(&c.measured) => {
            format!("inconclusive ({}–{})", times(l.max(0.0)), times(h))
        }
        _ => "no measurable overhead".into(),
    }
}

/// What explains a cell, largest share first: "system calls 71 %, context switches 6 %, not
/// explained 23 %".
fn shares_line(c: &Cell) -> String {
    let flat = flat(c);
    // No overhead measured: what the model expected instead, where it expected one.
    let base = if flat { c.predicted - 1.0 } else { c.measured - 1.0 };
    if flat && c.predicted_ci[0] <= 1.0 {
        return format!("{}, none expected", flat_words(c));
    }
    let lead = if flat {
        format!("{}; the model expected +{:.0}\u{a0}% from", flat_words(c), base * 100.0)
    } else {
        String::new()
    };
    let mut s: Vec<(String, f64)> = c
        .shares
        .iter()
        .map(|x| {
            let what = event_words(x.event);
            // Shares are of the measured overhead; of the model's where none was measured.
            (what.to_string(), if flat { x.share * (c.measured - 1.0) / base } else { x.share })
        })
        .collect();
    s.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    let mut parts: Vec<String> =
        s.iter().take(3).map(|(w, v)| format!("{w} {:.0}\u{a0}%", v * 100.0)).collect();
    if !flat && c.unexplained.abs() >= 0.05 {
        parts.push(format!("not explained by these mechanisms {:.0}\u{a0}%", c.unexplained * 100.0));
    }
    if flat {
        format!("{lead} {}", parts.join(", "))
    } else {
        parts.join(", ")
    }
}

/// Each of a cell's own counts that are not the baseline's, in words: "packets sent 2.0×", then
/// `suffix`.
pub fn own_counts_words(c: &Cell, suffix: &str) -> Vec<String> {
    c.own_counts.iter().map(|k| format!("{} {}{suffix}", k.what, times(k.ratio))).collect()
}

/// A cell's own counts that are not the baseline's, in words: "counted in gvisor itself, for the
/// same work: packets sent 2.0× native's — the model prices native's counts".
pub fn own_counts_line(c: &Cell, baseline: &str) -> Option<String> {
    if c.own_counts.is_empty() {
        return None;
    }
    let parts = own_counts_words(c, &format!(" {baseline}'s"));
    Some(format!(
        "counted in {} itself, for the same work: {} — the model prices {baseline}'s counts",
        c.environment,
        parts.join(", ")
    ))
}

/// One environment's cells as stacked bars (the page): each bar is the measured overhead (the
/// cost less one) as 100 %, split into each mechanism's share and what they leave unexplained
/// (grey); a model above the measurement runs past the 100 % line, which is drawn.
pub fn figure(x: &Explain, env: &str) -> Result<super::figures::Figure, String> {
    use super::svg::{fit, legend, Anchor, Canvas, SMALL, TEXT, W};
    // One colour per mechanism, none twice (the page's 8-colour palette would repeat after 8 of
    // the 15), none grey (that is "not explained"); the same mechanism the same colour in every
    // environment's figure.
    const MECH_COLOURS: [&str; 16] = [
        "#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#332288", "#882255",
        "#44AA99", "#117733", "#AA4499", "#661100", "#999933", "#FB9A99", "#6699CC",
    ];
    const _: () = assert!(MECH_COLOURS.len() >= MECHANISMS.len());
    let color = |i: usize| MECH_COLOURS[i % MECH_COLOURS.len()];
    let cells: Vec<&Cell> = x.cells.iter().filter(|c| c.environment == env && !c.mechanism).collect();
    if cells.is_empty() {
        return Err(format!("{env}: no workload to explain besides the mechanism cases"));
    }
    let (left, right) = (200.0, 250.0);
    let span = W - left - right;
    let row_h = 26.0;
    // The legend names the mechanisms that colour some bar here.
    let drawn = |m: &Mechanism| {
        cells.iter().any(|c| !flat(c) && c.shares.iter().any(|s| s.event == m.event && s.share > 0.0))
    };
    let entries: Vec<(String, String, bool)> = MECHANISMS
        .iter()
        .enumerate()
        .filter(|(_, m)| drawn(m))
        .map(|(i, m)| (m.what.to_string(), color(i).to_string(), false))
        .chain(std::iter::once(("not explained".to_string(), "#d5d8dc".to_string(), false)))
        .collect();
    let mut probe = Canvas::new(100.0);
    let legend_h = legend(&mut probe, 0.0, left, &entries);
    let top = 30.0 + legend_h + 6.0;
    let mut c = Canvas::new(top + row_h * cells.len() as f64 + 30.0);
    c.text(
        8.0,
        18.0,
        &format!("{env}: the measured overhead, split by what the model says causes it"),
        Anchor::Start,
        TEXT,
        None,
    );
    legend(&mut c, 26.0, left, &entries);
    // The scale: 100 % of the measured overhead, room up to 150 % for a model above it.
    let px = |share: f64| left + span / 1.5 * share.clamp(0.0, 1.5);
    c.line(px(1.0), top - 6.0, px(1.0), top + row_h * cells.len() as f64, "ref");
    c.text(
        px(1.0),
        top + row_h * cells.len() as f64 + 16.0,
        "100 % of the measured overhead",
        Anchor::Middle,
        SMALL,
        None,
    );
    for (k, cell) in cells.iter().enumerate() {
        let y = top + row_h * k as f64;
        let name = fit(&cell.workload, left - 14.0, SMALL);
        c.text(left - 8.0, y + row_h / 2.0, &name, Anchor::End, SMALL, Some(&cell.workload));
        let label = format!("measured {}, model {}", times(cell.measured), times(cell.predicted));
        if flat(cell) {
            c.text(
                left + 4.0,
                y + row_h / 2.0,
                &format!("{} ({label})", flat_words(cell)),
                Anchor::Start,
                SMALL,
                None,
            );
            continue;
        }
        let mut at = 0.0;
        for (i, m) in MECHANISMS.iter().enumerate() {
            let Some(sh) =
                cell.shares.iter().find(|s| s.event == m.event).map(|s| s.share).filter(|s| *s > 0.0)
            else {
                continue;
            };
            let (x0, x1) = (px(at), px(at + sh));
            c.rect(
                x0,
                y + 4.0,
                (x1 - x0).max(1.0),
                row_h - 8.0,
                color(i),
                Some(&format!("{}: {:.0} %", m.what, sh * 100.0)),
            );
            at += sh;
        }
        if cell.unexplained > 0.0 {
            let (x0, x1) = (px(at), px(at + cell.unexplained));
            c.rect(
                x0,
                y + 4.0,
                (x1 - x0).max(1.0),
                row_h - 8.0,
                "#d5d8dc",
                Some(&format!("not explained: {:.0} %", cell.unexplained * 100.0)),
            );
        }
        c.text(W - right + 8.0, y + row_h / 2.0, &label, Anchor::Start, SMALL, None);
    }
    let svg = c.finish(&format!("{env}: overhead explained"));
    Ok(super::figures::Figure {
        id: format!("explain-{env}"),
        title: format!(
            "{env}: each bar is the workload's measured overhead; its colours the share each mechanism explains (counted events × their measured extra cost), grey what they leave"
        ),
        data_key: super::figures::key_of(&(env, cells.iter().map(|c| (&c.workload, c.measured.to_bits())).collect::<Vec<_>>())),
        svg,
    })
}

/// `head` then `text`, wrapped at spaces to `width`, continuation lines indented under the text.
pub fn hang(head: &str, text: &str, width: usize) -> String {
    let indent = head.chars().count();
    let room = width.saturating_sub(indent).max(24);
    let mut out = head.to_string();
    let mut len = 0;
    for word in text.split(' ') {
        let w = word.chars().count();
        if len > 0 && len + 1 + w > room {
            out += "\n";
            out += &" ".repeat(indent);
            len = 0;
        } else if len > 0 {
            out.push(' ');
            len += 1;
        }
        out += word;
        len += w;
    }
    out + "\n"
}

/// `report --explain`: per environment, what each event costs there, then each workload's
/// measured cost against the model's with what explains it; the hit rates last.
pub fn render(x: &Explain, width: usize) -> String {
    let mut out = hang(
        "",
        &format!(
            "Why each environment costs what it does. The model: {b}'s time + Σ events × their extra cost in the environment — the events counted in {b}'s warm-ups, each event's cost solved from this run's mechanism cases (docs/explain.md).",
            b = x.baseline
        ),
        width,
    );
    let envs: Vec<&String> = {
        let mut v: Vec<&String> = Vec::new();
        for c in &x.cells {
            if !v.contains(&&c.environment) {
                v.push(&c.environment);
            }
        }
        v
    };
    for env in envs {
        out += &format!("\n{env}\n");
        let prices: Vec<String> = x.costs.iter().filter(|c| &c.environment == env).map(price).collect();
        out += &hang("  per event: ", &prices.join(" · "), width);
        let (mechs, cells): (Vec<&Cell>, Vec<&Cell>) =
            x.cells.iter().filter(|c| &c.environment == env).partition(|c| c.mechanism);
        if !mechs.is_empty() {
            let list: Vec<String> =
                mechs.iter().map(|c| format!("{} {}", c.workload, times(c.measured))).collect();
            out += &hang("  solved from: ", &list.join(", "), width);
        }
        let name_w = cells.iter().map(|c| c.workload.chars().count().min(28)).max().unwrap_or(8).max(8);
        out += &format!(
            "  {:<name_w$}  {:>8}  {:>8}  {:>6}  explained by\n",
            "workload", "measured", "model", "error"
        );
        for c in cells {
            let name: String = c.workload.chars().take(28).collect();
            let head = format!(
                "  {name:<name_w$}  {:>8}  {:>8}  {:>5.0}%  ",
                times(c.measured),
                times(c.predicted),
                c.error_percent
            );
            out += &hang(&head, &shares_line(c), width);
            if let Some(line) = own_counts_line(c, &x.baseline) {
                out += &hang(&" ".repeat(name_w + 2), &line, width);
            }
        }
        if let Some(h) = x.hits.iter().find(|h| &h.environment == env) {
            out += &format!(
                "  predicted within ±20 %: {} of {} · within the interval: {} of {}\n",
                h.within_20, h.cells, h.within_interval, h.cells
            );
            let missed: Vec<&str> = x
                .cells
                .iter()
                .filter(|c| &c.environment == env && not_explained(c))
                .map(|c| c.workload.as_str())
                .collect();
            if !missed.is_empty() {
                out += &hang(
                    "  ",
                    &format!(
                        "not explained by these mechanisms: {} (more than half of the overhead: a cost no microbenchmark here prices, e.g. a stream through a network stack in user space, or a guest's memory)",
                        missed.join(", ")
                    ),
                    width,
                );
            }
        }
    }
    if !x.notes.is_empty() {
        out += "\n";
    }
    for n in &x.notes {
        out += &hang("note: ", n, width);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_solved_below_zero_is_held_at_zero_and_the_rest_solved_again() {
        // Case 1 does one of each event and costs +1; case 2 does two of the second and costs
        // +4: alone, the second costs 2 and the first −1, which no event can.
        let a = vec![vec![1.0, 1.0], vec![0.0, 2.0]];
        let b = vec![1.0, 4.0];
        let (x, inv, held) = solve_nonnegative(&a, &b).expect("solvable");
        assert_eq!(held[0], Some(-1.0));
        assert!(held[1].is_none());
        assert_eq!(x[0], 0.0);
        // Least squares of the second alone: (1·1 + 2·4) / (1 + 4).
        assert!((x[1] - 1.8).abs() < 1e-12, "{x:?}");
        // inv is the pseudo-inverse: inv · b = x.
        let y: Vec<f64> = inv.iter().map(|r| r.iter().zip(&b).map(|(p, q)| p * q).sum()).collect();
        assert!((y[0]).abs() < 1e-12 && (y[1] - 1.8).abs() < 1e-12, "{y:?}");
        // Nothing below zero: the exact solve, nothing held.
        let (x, _, held) = solve_nonnegative(&a, &[3.0, 4.0]).unwrap();
        assert!(held.iter().all(Option::is_none) && (x[0] - 1.0).abs() < 1e-12 && (x[1] - 2.0).abs() < 1e-12);
        let c = EventCost {
            environment: "gvisor".into(),
            event: "context_switches",
            what: "context switches",
            from: "pipe_rr".into(),
            delta_ns: 0.0,
            ci: [0.0, 0.0],
            no_difference: false,
            solved_ns: Some(-65_700.0),
        };
        assert_eq!(price(&c), "context switches 0 (solved −65.7 µs: overlapping mechanisms, held at 0)");
    }

    #[test]
    fn solves_a_triangular_system_and_inverts() {
        // A fork costs its page faults and system calls too: the solve leaves the fork's own.
        let a = vec![vec![1.0, 0.0, 0.0], vec![0.1, 1.0, 0.0], vec![2.0, 30.0, 1.0]];
        let truth = [5.0, 7.0, 100.0];
        let b: Vec<f64> = a.iter().map(|r| r.iter().zip(&truth).map(|(x, y)| x * y).sum()).collect();
        let (x, inv) = solve(&a, &b).unwrap();
        for (got, want) in x.iter().zip(truth) {
            assert!((got - want).abs() < 1e-9, "{x:?}");
        }
        // A · A⁻¹ = I.
        for (i, row) in a.iter().enumerate() {
            for j in 0..3 {
                let v: f64 = row.iter().zip(&inv).map(|(x, r)| x * r[j]).sum();
                assert!((v - if i == j { 1.0 } else { 0.0 }).abs() < 1e-9);
            }
        }
        assert!(solve(&[vec![1.0, 2.0], vec![2.0, 4.0]], &[1.0, 2.0]).is_none(), "singular");
    }

    #[test]
    fn an_event_whose_mechanism_shows_no_difference_costs_nothing_within_its_interval() {
        // A container's fork: 1.00x [0.97, 1.04] over 0.002 forks per us.
        assert!(
            no_difference(Some([0.97, 1.04])) && !no_difference(Some([1.01, 1.3])) && !no_difference(None)
        );
        // Holding 1 by its width alone is no evidence of none.
        assert!(holds_one(Some([0.5, 80.0])) && !no_difference(Some([0.5, 80.0])));
        let rate = 2e-6;
        let [lo, hi] = zero_price_interval(Some([0.97, 1.04]), rate);
        assert!((lo + 15_000.0).abs() < 1e-6 && (hi - 20_000.0).abs() < 1e-6, "{lo} {hi}");
        assert_eq!(zero_price_interval(Some([0.97, 1.04]), 0.0), [0.0, 0.0]);
        // In a prediction: no share of the cost, all of its uncertainty.
        let c = EventCost {
            environment: "container".into(),
            event: "processes",
            what: "process creations",
            from: "fork".into(),
            delta_ns: 0.0,
            ci: [lo, hi],
            no_difference: true,
            solved_ns: None,
        };
        let rates: BTreeMap<&'static str, (f64, f64)> = [("processes", (1e-6, 0.0))].into();
        let (cost, [l, h], shares) = predict(&rates, &[&c]);
        assert_eq!(cost, 1.0);
        assert!(shares.is_empty());
        let half: f64 = 1.96 * 1e-6 * (35_000.0 / (2.0 * 1.96));
        // On the log scale: 1 ×/÷ e^half.
        assert!((h - half.exp()).abs() < 1e-9 && (l - (-half).exp()).abs() < 1e-9, "{l} {h}");
        assert_eq!(price(&c), "process creations 0");
    }

    #[test]
    fn a_prediction_is_one_plus_rates_times_prices() {
        let cost = |event: &'static str, d: f64, half: f64| EventCost {
            environment: "e".into(),
            event,
            what: event,
            from: String::new(),
            delta_ns: d,
            ci: [d - half, d + half],
            no_difference: false,
            solved_ns: None,
        };
        let (a, b) = (cost("syscalls", 1000.0, 196.0), cost("faults_minor", 500.0, 0.0));
        // 1 call per µs at +1 µs each, 0.2 faults per µs at +0.5 µs: 1 + 1 + 0.1.
        let rates: BTreeMap<&'static str, (f64, f64)> =
            [("syscalls", (1e-3, 0.0)), ("faults_minor", (2e-4, 0.0))].into();
        let (p, ci, shares) = predict(&rates, &[&a, &b]);
        assert!((p - 2.1).abs() < 1e-9, "{p}");
        // The call's price ±196 ns at 1.96 σ: σ 100 ns × 1e-3 per ns → ±0.196, on the log
        // scale ±0.196/2.1: ×/÷ e^0.0933.
        let k = (0.196f64 / 2.1).exp();
        assert!((ci[1] - 2.1 * k).abs() < 1e-9 && (ci[0] - 2.1 / k).abs() < 1e-9, "{ci:?}");
        // A half-width wider than the prediction keeps the interval above zero.
        let [lo, hi] = log_interval(14.0, 29.0);
        assert!(lo > 1.0 && lo < 14.0 && hi > 14.0 * 7.0, "{lo} {hi}");
        let s: f64 = shares.iter().map(|s| s.share).sum();
        assert!((s - 1.0).abs() < 1e-9 && (shares[0].share - 1.0 / 1.1).abs() < 1e-9, "{shares:?}");
    }

    /// A counted pass without its span is left out; the case keeps the passes that have one.
    #[test]
    fn a_pass_without_its_span_leaves_the_others() {
        let trial = |id: i64| virtperf_record::store::TrialRow {
            id,
            warmup: true,
            status: virtperf_record::store::TrialStatus::Ok,
            ..Default::default()
        };
        let mut rows =
            RunRows { cases: vec![virtperf_record::store::CaseRow::default()], ..Default::default() };
        rows.trials = vec![trial(1), trial(2)];
        let counts = |c: Value| (Some(serde_json::json!({ "counts": c })), Vec::new());
        rows.details.insert(1, counts(serde_json::json!({"syscalls": 100, "elapsed_ns": 1000})));
        rows.details.insert(2, counts(serde_json::json!({"syscalls": 50})));
        let row = crate::report::test_row("native", 1.0, 0.0, "lower");
        let r = rates(&rows, 0, 0, &row).expect("the pass with a span counts");
        assert_eq!(r["syscalls"], (0.1, 0.0));
        // Faults: the warm-up's, until timed trials say theirs (getrusage); then theirs.
        rows.details
            .insert(1, counts(serde_json::json!({"syscalls": 100, "faults_minor": 5, "elapsed_ns": 1000})));
        assert_eq!(rates(&rows, 0, 0, &row).unwrap()["faults_minor"], (0.005, 0.0));
        rows.trials.extend([3, 4].map(|id| virtperf_record::store::TrialRow { warmup: false, ..trial(id) }));
        rows.details.insert(3, counts(serde_json::json!({"ru_minflt": 200, "elapsed_ns": 1000})));
        rows.details.insert(4, counts(serde_json::json!({"ru_minflt": 400, "elapsed_ns": 1000})));
        let r = rates(&rows, 0, 0, &row).unwrap();
        assert!((r["faults_minor"].0 - 0.3).abs() < 1e-12 && r["faults_minor"].1 > 0.0, "{r:?}");
        assert_eq!(r["syscalls"], (0.1, 0.0));
    }

    /// A stream's packets, sent and received, are one bulk event; a mechanism case whose sender
    /// stalled is found (its rate is its waits').
    #[test]
    fn a_streams_packets_count_in_bulk_and_a_stalled_sender_is_found() {
        let trial = |id: i64, warmup: bool| virtperf_record::store::TrialRow {
            id,
            warmup,
            status: virtperf_record::store::TrialStatus::Ok,
            ..Default::default()
        };
        let case = |kind: &str| virtperf_record::store::CaseRow {
            kind: kind.into(),
            record: virtperf_workload::describe(kind, &serde_json::json!({})).unwrap(),
            ..Default::default()
        };
        let flow = |stalls: u64| {
            serde_json::json!({"flows": [{"dut": "client", "server": {}, "client": {
                "send_stalls": stalls,
                "counts": {"net_rx_packets": 10, "net_tx_packets": 90, "elapsed_ns": 1000}}}]})
        };
        let mut rows = RunRows { cases: vec![case("udp_stream")], ..Default::default() };
        rows.trials = vec![trial(1, true), trial(2, false), trial(3, false)];
        for (id, stalls) in [(1, 0), (2, 0), (3, 0)] {
            rows.details.insert(id, (Some(flow(stalls)), Vec::new()));
        }
        let row = crate::report::test_row("native", 1.0, 0.0, "higher");
        let r = rates(&rows, 0, 0, &row).unwrap();
        assert_eq!((r.get("stream_packets"), r.get("packets_rx")), (Some(&(0.1, 0.0)), None));
        assert_eq!(stalled_trials(&rows, 0, 0), (0, 2));
        rows.details.insert(3, (Some(flow(7)), Vec::new()));
        assert_eq!(stalled_trials(&rows, 0, 0), (1, 2), "timed trials only, a stalled one counted");
        // A request/response: its received packets, each answered.
        rows.cases[0] = case("udp_rr");
        let r = rates(&rows, 0, 0, &row).unwrap();
        assert_eq!((r.get("stream_packets"), r.get("packets_rx")), (None, Some(&(0.01, 0.0))));
        // One whose requests went unanswered: timed trials only, each lost one counted.
        let lost = |metric: &str, v: f64| {
            vec![virtperf_proto::Sample { metric: metric.into(), value: v, unit: "trans".into() }]
        };
        assert_eq!(lossy_trials(&rows, 0, 0), (0, 0.0));
        rows.trials[0].samples = lost("udp_rr_timeouts", 9.0);
        rows.trials[1].samples = lost("udp_rr_timeouts", 3.0);
        rows.trials[2].samples = lost("tcp_rr_waits", 0.0);
        assert_eq!(lossy_trials(&rows, 0, 0), (1, 3.0), "the warm-up's 9 are not the price's");
    }

    #[test]
    fn flows_count_the_environments_side() {
        let d = serde_json::json!({"flows": [
            {"dut": "client", "client": {"counts": {"syscalls": 10, "elapsed_ns": 5}}, "server": {"counts": {"syscalls": 99}}},
            {"dut": "server", "server": {"counts": {"syscalls": 3, "elapsed_ns": 7}}, "client": {}},
        ]});
        let c = pass_counts(&d).unwrap();
        assert_eq!(c["syscalls"], 13.0);
        assert_eq!(c["elapsed_ns"], 7.0);
        assert_eq!(pass_counts(&serde_json::json!({"counts": {"syscalls": 1}})).unwrap()["syscalls"], 1);
        assert!(pass_counts(&serde_json::json!({"other": 1})).is_none());
    }

    #[test]
    fn own_counts_that_are_not_natives_are_said_and_uncounted_ones_are_not() {
        // Per unit of work and per pass, as own_counts gives them: gVisor's tcp_rr as measured
        // here (980 packets sent for 491 received: its netstack acknowledges each request
        // apart; native 2 359 and 2 357 for 4.8× the transactions).
        let native: BTreeMap<&'static str, (f64, f64)> =
            [("packets_rx", (1.0, 2357.0)), ("packets_tx", (1.0, 2359.0)), ("faults_minor", (0.002, 4.0))]
                .into();
        let gvisor: BTreeMap<&'static str, (f64, f64)> =
            [("packets_rx", (1.02, 491.0)), ("packets_tx", (2.0, 980.0)), ("faults_minor", (0.0, 0.0))]
                .into();
        let k = count_checks(&gvisor, &native);
        assert_eq!(k.len(), 1, "{k:?}");
        assert_eq!((k[0].event, k[0].ratio), ("packets_tx", 2.0));
        assert_eq!((k[0].native_per_pass, k[0].env_per_pass), (2359.0, 980.0));
        // Fewer counted the other way round is said too; a count of 0 is "not counted"; a
        // native pass of fewer than 20 says nothing; within 1.5× either way is the same count.
        let uml: BTreeMap<&'static str, (f64, f64)> =
            [("packets_rx", (0.5, 100.0)), ("packets_tx", (1.4, 90.0))].into();
        let k = count_checks(&uml, &native);
        assert_eq!(k.iter().map(|c| c.event).collect::<Vec<_>>(), ["packets_rx"]);
        let few: BTreeMap<&'static str, (f64, f64)> = [("faults_minor", (1.0, 19.0))].into();
        let many: BTreeMap<&'static str, (f64, f64)> = [("faults_minor", (3.0, 57.0))].into();
        assert!(count_checks(&many, &few).is_empty());
        assert_eq!(count_checks(&few, &many).len(), 1, "native 57 a pass, the environment a third");
        let cell = |own_counts| Cell {
            environment: "gvisor".into(),
            workload: "tcp_rr".into(),
            metric: "rate".into(),
            mechanism: false,
            measured: 6.7,
            measured_ci: None,
            predicted: 4.6,
            predicted_ci: [4.0, 5.2],
            error_percent: -31.0,
            shares: Vec::new(),
            unexplained: 0.36,
            within_20: false,
            within_interval: false,
            rates_per_ms: BTreeMap::new(),
            own_counts,
        };
        let line = own_counts_line(&cell(count_checks(&gvisor, &native)), "native").unwrap();
        assert!(
            line.contains("counted in gvisor itself") && line.contains("packets sent 2.0× native's"),
            "{line}"
        );
        assert!(own_counts_line(&cell(Vec::new()), "native").is_none());
        // "Not explained" is said of a measured overhead the model misses, not of an
        // inconclusive one (run 5: the container's tar 0.80× [0.50×, 1.28×], model 1.01×).
        let stream =
            Cell { measured: 19.0, measured_ci: Some([15.0, 24.0]), unexplained: 0.86, ..cell(Vec::new()) };
        assert!(not_explained(&stream));
        let tar = Cell {
            measured: 0.80,
            measured_ci: Some([0.50, 1.28]),
            predicted: 1.01,
            unexplained: 2.0,
            ..cell(Vec::new())
        };
        assert!(!not_explained(&tar));
        assert!(!not_explained(&Cell { within_20: true, ..stream.clone() }));
    }
}
