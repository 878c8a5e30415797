//! Host-wide disturbances: moments when the whole host slowed down, seen as clearly slow trials of
//! several environments in the same seconds.
//!
//! A trial is clearly slow when its headline figure lies beyond its cell's own spread: its
//! log-distance from the cell's median (in the direction that is worse) at least 4 robust
//! standard deviations (1.4826 × the median absolute deviation of the cell's log values, at least
//! 1 % of the value) and at least 15 % worse. Such trials within 2 s of each other form one
//! moment; a moment that touched two environments or more is the host's (another tenant, the
//! hypervisor's housekeeping), not one environment's. The report says when, for how long, and
//! which trials — unpaired ratios book these as a side's variance; paired ratios cancel them when
//! both trials of a pair were inside.

use serde::Serialize;

use virtperf_record::store::{RunRows, TrialStatus};

/// A moment the whole host slowed down.
#[derive(Debug, Clone, Serialize)]
pub struct Disturbance {
    /// When its first slow trial began (RFC 3339, UTC, ms).
    pub at: String,
    /// From the first slow trial's start to the last one's end.
    pub seconds: f64,
    pub environments: usize,
    pub trials: Vec<Touched>,
    /// Pairs (an environment's trial and its baseline's of the same slot) it touched on both
    /// sides: a paired ratio cancels those.
    pub both_sides: usize,
    /// Pairs it touched on one side alone: set apart from their paired ratios.
    pub one_side: usize,
}

/// Each disturbance's pairs touched on both sides and on one, given each environment's baseline
/// (`base_of[env]`, None for a baseline itself).
pub fn count_pairs(ds: &mut [Disturbance], base_of: &[Option<usize>]) {
    for d in ds.iter_mut() {
        let touched: std::collections::BTreeSet<_> = d.trials.iter().map(|t| t.key).collect();
        let mut pairs: std::collections::BTreeSet<(usize, usize, crate::report::paired::Slot)> =
            Default::default();
        for &(case, env, slot) in &touched {
            match base_of.get(env).copied().flatten() {
                Some(b) if b != env => {
                    pairs.insert((case, env, slot));
                }
                _ => {
                    // A baseline's trial: one pair with each environment measured against it.
                    for (x, bx) in base_of.iter().enumerate() {
                        if *bx == Some(env) && x != env {
                            pairs.insert((case, x, slot));
                        }
                    }
                }
            }
        }
        let (mut both, mut one) = (0, 0);
        for &(case, x, slot) in &pairs {
            let b = base_of.get(x).copied().flatten().unwrap_or(x);
            if touched.contains(&(case, x, slot)) && touched.contains(&(case, b, slot)) {
                both += 1;
            } else {
                one += 1;
            }
        }
        (d.both_sides, d.one_side) = (both, one);
    }
}

/// A trial a disturbance slowed.
#[derive(Debug, Clone, Serialize)]
pub struct Touched {
    pub environment: String,
    pub workload: String,
    pub metric: String,
    /// How much worse than its cell's median, %.
    pub worse_percent: f64,
    /// Its case, environment and slot (block, repetition): what pairs it with its baseline's trial.
    #[serde(skip)]
    pub key: (usize, usize, crate::report::paired::Slot),
}

/// Cells need this many measured trials for their spread to be known.
const MIN_TRIALS: usize = 5;
/// Robust standard deviations beyond the median that make a trial clearly slow.
const Z: f64 = 4.0;
/// And at least this much worse (a quiet cell's 4 sd may be a fraction of a percent).
const MIN_WORSE: f64 = 0.15;
/// Slow trials this close (s) are one moment.
const GAP_S: f64 = 2.0;

/// The disturbances of a run: moments that slowed trials of two environments or more.
pub fn find(rows: &RunRows) -> Vec<Disturbance> {
    // (env, case) → (trial index, headline value, worse direction sign).
    let mut cells: std::collections::BTreeMap<(usize, usize), Vec<(usize, f64)>> = Default::default();
    let mut sign: std::collections::BTreeMap<(usize, usize), (f64, String)> = Default::default();
    for (i, t) in rows.trials.iter().enumerate() {
        if t.status != TrialStatus::Ok || t.warmup || t.peer_idx.is_some() || t.finished_ms.is_none() {
            continue;
        }
        let Some(case) = rows.cases.get(t.case_idx) else { continue };
        let Some(head) = case.record.headline() else { continue };
        // The figure the report headlines: the host clock's twin where it exists.
        let host = format!("{}{}", head.name, virtperf_record::HOST_SUFFIX);
        let value = t
            .samples
            .iter()
            .find(|s| s.metric == host)
            .or_else(|| t.samples.iter().find(|s| s.metric == head.name))
            .map(|s| s.value);
        let Some(x) = value.filter(|x| *x > 0.0 && x.is_finite()) else { continue };
        let dir = match head.better {
            virtperf_record::Better::Lower => 1.0,
            virtperf_record::Better::Higher => -1.0,
            virtperf_record::Better::Neither => continue,
        };
        cells.entry((t.env_idx, t.case_idx)).or_default().push((i, x));
        sign.insert((t.env_idx, t.case_idx), (dir, head.name.to_string()));
    }
    // Every clearly slow trial: (start ms, end ms, touched).
    let mut slow: Vec<(f64, f64, usize, Touched)> = Vec::new();
    for (key, v) in &cells {
        if v.len() < MIN_TRIALS {
            continue;
        }
        let logs: Vec<f64> = v.iter().map(|(_, x)| x.ln()).collect();
        let med = virtperf_stats::median(&logs);
        let dev: Vec<f64> = logs.iter().map(|l| (l - med).abs()).collect();
        let sd = (1.4826 * virtperf_stats::median(&dev)).max(0.01);
        let (dir, metric) = &sign[key];
        for ((i, _), l) in v.iter().zip(&logs) {
            let worse = dir * (l - med);
            if worse / sd >= Z && worse >= (1.0 + MIN_WORSE).ln() {
                let t = &rows.trials[*i];
                let end = t.finished_ms.unwrap_or_default();
                let start = end - (t.host_ns.unwrap_or(0) + t.rtt_ns.unwrap_or(0)) as f64 / 1e6;
                slow.push((
                    start,
                    end,
                    key.0,
                    Touched {
                        environment: rows.envs[key.0].name.clone(),
                        workload: rows.cases[key.1].label.clone(),
                        metric: metric.clone(),
                        worse_percent: (worse.exp() - 1.0) * 100.0,
                        key: (key.1, key.0, (t.block, t.rep)),
                    },
                ));
            }
        }
    }
    slow.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = Vec::new();
    let mut i = 0;
    while i < slow.len() {
        let (start, mut end) = (slow[i].0, slow[i].1);
        let mut j = i + 1;
        while j < slow.len() && slow[j].0 <= end + GAP_S * 1e3 {
            end = end.max(slow[j].1);
            j += 1;
        }
        let group = &slow[i..j];
        let mut envs: Vec<usize> = group.iter().map(|g| g.2).collect();
        envs.sort_unstable();
        envs.dedup();
        if envs.len() >= 2 {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(start.max(0.0) / 1e3);
            out.push(Disturbance {
                at: humantime::format_rfc3339_millis(at).to_string(),
                seconds: (end - start) / 1e3,
                environments: envs.len(),
                trials: group.iter().map(|g| g.3.clone()).collect(),
                both_sides: 0,
                one_side: 0,
            });
        }
        i = j;
    }
    out
}

/// One line a person reads: "14:03:12 for 2.1 s: native syscall +48 %, container syscall +42 %".
pub fn line(d: &Disturbance) -> String {
    let time = d.at.get(11..19).unwrap_or(&d.at);
    let touched: Vec<String> = d
        .trials
        .iter()
        .map(|t| format!("{} {} {:+.0} %", t.environment, t.workload, t.worse_percent))
        .collect();
    format!("{time} UTC for {:.1} s: {}", d.seconds, touched.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtperf_proto::Sample;
    use virtperf_record::store::{CaseRow, EnvRow, RunInfo, TrialRow};

    fn described(kind: &str) -> virtperf_record::CaseRecord {
        virtperf_workload::describe(kind, &serde_json::json!({})).unwrap()
    }

    fn env(idx: usize, name: &str) -> EnvRow {
        EnvRow { idx, name: name.into(), kind: "native".into(), ..Default::default() }
    }

    fn trial(id: i64, e: usize, c: usize, value: f64, end_s: f64) -> TrialRow {
        let metric = if c == 0 { "syscall_time" } else { "pde_time" };
        TrialRow {
            id,
            seq: id,
            env_idx: e,
            case_idx: c,
            status: TrialStatus::Ok,
            host_ns: Some(200_000_000),
            finished_ms: Some(1.7e12 + end_s * 1e3),
            samples: vec![Sample { metric: metric.into(), value, unit: "ns/op".into() }],
            ..Default::default()
        }
    }

    fn rows(trials: Vec<TrialRow>) -> RunRows {
        RunRows {
            run_id: 1,
            info: RunInfo::default(),
            envs: vec![env(0, "native"), env(1, "container"), env(2, "gvisor")],
            cases: vec![
                CaseRow {
                    idx: 0,
                    kind: "syscall".into(),
                    label: "syscall".into(),
                    record: described("syscall"),
                    ..Default::default()
                },
                CaseRow {
                    idx: 1,
                    kind: "pde".into(),
                    label: "pde".into(),
                    record: described("pde"),
                    ..Default::default()
                },
            ],
            trials,
            ..Default::default()
        }
    }

    #[test]
    fn a_slowdown_of_several_environments_at_once_is_found_and_one_alone_is_not() {
        let mut t = Vec::new();
        let mut id = 0;
        // Ten rounds, one trial of each environment × case a second apart; the host slowed by
        // 1.5× around second 30 (native and container syscall, container pde), and gVisor's pde
        // alone slowed at second 70 (its own, not the host's).
        for round in 0..10 {
            for e in 0..3 {
                for c in 0..2 {
                    let s = (round * 6 + e * 2 + c) as f64 + 1.0;
                    let base = [[100.0, 15.0], [102.0, 15.3], [16000.0, 30.0]][e][c];
                    let jitter = 1.0 + ((id * 7) % 5) as f64 * 0.002;
                    let host = if (30.0..=34.0).contains(&s) { 1.5 } else { 1.0 };
                    let own = if e == 2 && c == 1 && round == 7 { 1.6 } else { 1.0 };
                    t.push(trial(id, e, c, base * jitter * host * own, s));
                    id += 1;
                }
            }
        }
        let d = find(&rows(t));
        assert_eq!(d.len(), 1, "{d:#?}");
        assert!(d[0].environments >= 2 && d[0].trials.iter().all(|x| x.worse_percent > 40.0), "{d:#?}");
        assert!(d[0].seconds < 6.0, "{d:#?}");
        let l = line(&d[0]);
        assert!(l.contains("UTC for") && l.contains("+5"), "{l}");
    }

    #[test]
    fn a_quiet_run_has_none() {
        let t: Vec<TrialRow> =
            (0..40).map(|i| trial(i, (i % 3) as usize, 0, 100.0 + (i % 4) as f64, i as f64)).collect();
        assert!(find(&rows(t)).is_empty());
    }
}
