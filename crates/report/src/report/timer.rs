//! The `timer` workload's lateness histograms, merged over an environment's trials: a sparkline
//! per environment in the terminal, a figure in the HTML report (cyclictest's histogram view).

use std::collections::BTreeMap;

use serde::Serialize;

use virtperf_record::store::{RunRows, TrialStatus};

/// This section's name, as the workloads it shows give it (`Workload::report_section`).
pub const SECTION: &str = "timer";

#[derive(Debug, Serialize)]
pub struct TimerHistogram {
    pub environment: String,
    pub workload: String,
    pub wakeups: u64,
    /// The scheduling policy the trials obtained (e.g. `SCHED_FIFO 80`, or why not).
    pub policy: String,
    /// (µs, count) for every non-empty 1 µs bucket; the last bucket holds everything above it.
    pub histogram: Vec<(u64, u64)>,
}

/// Every measured trial's histogram, merged per environment and timer case.
pub fn build(rows: &RunRows) -> Vec<TimerHistogram> {
    let (envs, cases, trials) = (&rows.envs, &rows.cases, &rows.trials);
    let mut by: BTreeMap<(usize, usize), (BTreeMap<u64, u64>, String)> = BTreeMap::new();
    for t in trials
        .iter()
        .filter(|t| t.status == TrialStatus::Ok && !t.warmup && cases[t.case_idx].record.in_section(SECTION))
    {
        let Some(extra) = rows.detail(t.id) else { continue };
        // One instance: the workload's own detail; several: one per instance.
        let parts: Vec<&serde_json::Value> = match extra["instances"].as_array() {
            Some(a) => a.iter().collect(),
            None => vec![&extra],
        };
        let e = by.entry((t.env_idx, t.case_idx)).or_default();
        for part in parts {
            for b in part["histogram_us"].as_array().into_iter().flatten() {
                if let (Some(us), Some(n)) = (b[0].as_u64(), b[1].as_u64()) {
                    *e.0.entry(us).or_default() += n;
                }
            }
            if let Some(p) = part["policy"].as_str() {
                e.1 = p.to_string();
            }
        }
    }
    by.into_iter()
        .map(|((e, c), (h, policy))| TimerHistogram {
            environment: envs[e].name.clone(),
            workload: cases[c].label.clone(),
            wakeups: h.values().sum(),
            policy,
            histogram: h.into_iter().collect(),
        })
        .collect()
}

/// Counts per power-of-two bucket of lateness: bucket 0 is [0, 1) µs, bucket b [2^(b-1), 2^b).
pub fn log2_buckets(h: &[(u64, u64)]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for (us, n) in h {
        let b = (64 - us.leading_zeros()) as usize;
        if out.len() <= b {
            out.resize(b + 1, 0);
        }
        out[b] += n;
    }
    out
}

/// `▁▃█▂ ` over the log2 buckets, scaled to the largest; an empty bucket is a space.
pub fn sparkline(buckets: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = buckets.iter().copied().max().unwrap_or(0).max(1) as f64;
    buckets
        .iter()
        .map(|&n| if n == 0 { ' ' } else { BARS[(((n as f64 / max) * 7.0).floor() as usize).min(7)] })
        .collect()
}

/// The terminal lines: one per environment and timer case.
pub fn render(hs: &[TimerHistogram]) -> String {
    let mut out = String::new();
    for h in hs {
        let b = log2_buckets(&h.histogram);
        let top = if b.len() > 1 { 1u64 << (b.len() - 2) } else { 0 };
        out += &format!(
            "timer lateness {} · {}: |{}| 0 µs … ≥{top} µs (log2 buckets, {} wake-ups, {})\n",
            h.workload,
            h.environment,
            sparkline(&b),
            h.wakeups,
            if h.policy.is_empty() { "policy unknown" } else { &h.policy }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_and_the_sparkline_scales_to_the_largest() {
        let b = log2_buckets(&[(0, 5), (1, 10), (3, 2), (9, 1)]);
        // 0 → b0; 1 → b1 [1,2); 3 → b2 [2,4); 9 → b4 [8,16)
        assert_eq!(b, vec![5, 10, 2, 0, 1]);
        assert_eq!(sparkline(&b), "▄█▂ ▁");
        assert_eq!(sparkline(&[]), "");
    }
}
