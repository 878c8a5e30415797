//! Many at once: an environment whose instances start together (`start = "together"`), from
//! each start's record and each instance's. How long until all of them were ready (the
//! makespan, a mean over starts with its interval), how the instances' own ready times spread
//! (p50, p99, max over every instance that became ready), what the host's CPU spent per instance
//! started, and beside it the same environment started alone, where the run has it (its group's
//! `instances = 1`).

use serde::Serialize;
use virtperf_record::store::{LaunchLife, StartTogether};

use super::lifecycle::{figure_text, times};
use super::StartTimes;

/// One environment's starts of N at once.
#[derive(Debug, Serialize)]
pub struct Together {
    pub env: String,
    /// The group it was swept in (`instances = [1, 4, 16]`).
    pub group: String,
    /// Instances asked for per start.
    pub n: u32,
    /// Starts made, and of them those where every instance became ready.
    pub starts: usize,
    pub complete: usize,
    /// Asked for to the last of them ready, ms, over the complete starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub makespan_ms: Option<StartTimes>,
    /// Each instance's own ready time (asked for, with all the others, to its hello), ms, over
    /// every instance that became ready in a start of N.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_ms: Option<Spread>,
    /// The host's CPU over a start divided among its instances, ms, over the complete starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cpu_ms: Option<StartTimes>,
    /// The same group started alone (instances = 1): its mean ready time, ms, and its host CPU
    /// per start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone_ready_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone_host_cpu_ms: Option<f64>,
    /// Why instances did not become ready, one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

/// Quantiles of a set of times (linear between order statistics; with fewer than 100 values the
/// p99 lies between the two largest).
#[derive(Debug, Serialize, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// The q-quantile of sorted `xs` (type 7: linear between order statistics).
fn quantile(xs: &[f64], q: f64) -> f64 {
    let h = (xs.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    xs[lo] + (h - lo as f64) * (xs[hi] - xs[lo])
}

fn spread(mut xs: Vec<f64>) -> Option<Spread> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    Some(Spread { n: xs.len(), p50: quantile(&xs, 0.5), p99: quantile(&xs, 0.99), max: xs[xs.len() - 1] })
}

/// Each environment that started its instances together, in the order of `envs` (index, name,
/// group, instances).
pub fn build(
    envs: &[(usize, &str, &str, u32)],
    launches: &[LaunchLife],
    starts: &[StartTogether],
) -> Vec<Together> {
    let mut out = Vec::new();
    for &(idx, name, group, n) in envs {
        let mine: Vec<&StartTogether> = starts.iter().filter(|s| s.env_idx == idx).collect();
        // One instance "together" is one alone: the others' reference, not a start of many.
        if mine.is_empty() || n < 2 {
            continue;
        }
        let complete: Vec<&&StartTogether> = mine.iter().filter(|s| s.ready == s.asked).collect();
        let ready: Vec<f64> = launches
            .iter()
            .filter(|l| l.env_idx == idx && l.life.together.is_some_and(|t| t > 1))
            .filter_map(|l| l.life.prepare_ms.map(|p| p + l.start_ms))
            .collect();
        // Alone: the group's environment of one instance, each launch on its own.
        let alone: Vec<&LaunchLife> = envs
            .iter()
            .filter(|e| e.2 == group && e.3 == 1 && e.0 != idx)
            .flat_map(|e| launches.iter().filter(move |l| l.env_idx == e.0))
            .collect();
        let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
        out.push(Together {
            env: name.to_string(),
            group: group.to_string(),
            n,
            starts: mine.len(),
            complete: complete.len(),
            makespan_ms: times(&complete.iter().map(|s| s.makespan_ms).collect::<Vec<_>>()),
            ready_ms: spread(ready),
            host_cpu_ms: times(
                &complete
                    .iter()
                    .filter_map(|s| s.host_cpu_ms.map(|c| c / f64::from(s.asked.max(1))))
                    .collect::<Vec<_>>(),
            ),
            alone_ready_ms: mean(
                alone.iter().filter_map(|l| l.life.prepare_ms.map(|p| p + l.start_ms)).collect(),
            ),
            alone_host_cpu_ms: mean(alone.iter().filter_map(|l| l.life.host_cpu_ms).collect()),
            failed: mine
                .iter()
                .filter_map(|s| s.failed.clone())
                .flat_map(|f| f.lines().map(String::from).collect::<Vec<_>>())
                .collect(),
        });
    }
    out
}

/// A time in the unit it reads best in, three digits ("412 ms", "1.20 s").
pub fn ms_text(v: f64) -> String {
    let t = StartTimes { n: 1, mean: v, ci95: None, no_ci: None, min: v, max: v };
    figure_text(&t, "ms").trim_end_matches(" (n=1)").to_string()
}

/// A figure over a few starts: with fewer than 4, a 95 % interval (Student t with 1 or 2
/// degrees of freedom) spans orders of magnitude and says less than the starts themselves, so
/// their range is given instead, said as one ("range 284 ms–1.04 s"); from 4 on, the
/// mean with its interval.
pub fn over_starts(t: &StartTimes) -> String {
    if t.n >= 4 || t.n < 2 {
        return figure_text(t, "ms");
    }
    let (lo, hi) = (ms_text(t.min), ms_text(t.max));
    let range = match (lo.split_once(' '), hi.split_once(' ')) {
        (Some((l, lu)), Some((h, hu))) if lu == hu => format!("{l}–{h} {hu}"),
        _ => format!("{lo}–{hi}"),
    };
    format!("{} (range {range})", ms_text(t.mean))
}

/// The answer for one environment: "16 at once: all ready in 1.10 s (1.02–1.18) over 2 starts;
/// each p50 620 ms, p99 1.08 s, max 1.09 s (32 instances; one alone: 44.2 ms); host CPU 38.1 ms
/// per instance (alone 31.0 ms)".
pub fn text(t: &Together) -> String {
    let mut s = format!("{} at once: ", t.n);
    match &t.makespan_ms {
        Some(m) => {
            s += &format!(
                "all ready in {} over {}",
                over_starts(m),
                if t.complete == 1 { "1 start".to_string() } else { format!("{} starts", t.complete) }
            );
        }
        None => s += "no start had all of them ready",
    }
    if t.complete < t.starts {
        s += &format!(" ({} of {} starts had an instance fail)", t.starts - t.complete, t.starts);
    }
    if let Some(r) = &t.ready_ms {
        s += &format!(
            "; each ready p50 {}, p99 {}, max {} ({} instances",
            ms_text(r.p50),
            ms_text(r.p99),
            ms_text(r.max),
            r.n
        );
        if let Some(a) = t.alone_ready_ms {
            s += &format!("; one alone: {}, ×{:.1} at p50", ms_text(a), r.p50 / a);
        }
        s += ")";
    }
    if let Some(c) = &t.host_cpu_ms {
        s += &format!("; host CPU {} per instance", over_starts(c));
        if let Some(a) = t.alone_host_cpu_ms {
            s += &format!(" (alone {})", ms_text(a));
        }
    }
    s
}

/// The summary's and `--full`'s section.
pub fn render(ts: &[Together]) -> String {
    if ts.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nStarted together (every instance asked for at once; ready: asked for to its hello, host clock):\n",
    );
    let w = ts.iter().map(|t| t.env.chars().count()).max().unwrap_or(0);
    for t in ts {
        out += &format!("  {:<w$}  {}\n", t.env, text(t));
        if let Some(f) = t.failed.first() {
            // A failure may quote a guest's console: no control characters reach the terminal.
            let line: String = f.chars().take(160).map(|c| if c.is_control() { '?' } else { c }).collect();
            let more = match t.failed.len() {
                1 => String::new(),
                k => format!(" (and {} more: --json lists them)", k - 1),
            };
            out += &format!("  {:<w$}    failed: {line}{more}\n", "");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::lifecycle::launch;

    #[test]
    fn a_start_of_many_is_said_by_its_makespan_and_its_spread_beside_one_alone() {
        let mut l = Vec::new();
        // Alone (env 0): ready 50 ms each, 30 ms host CPU.
        for _ in 0..3 {
            let mut x = launch(0, 40.0, 10.0, None, 2048);
            x.life.together = Some(1);
            x.life.host_cpu_ms = Some(30.0);
            l.push(x);
        }
        // Four at once (env 1), twice: ready 100, 200, 300, 400 ms.
        for block in 0..2 {
            for k in 1..=4 {
                let mut x = launch(1, 100.0 * f64::from(k) - 10.0, 10.0, None, 2048);
                x.block = Some(block);
                x.life.together = Some(4);
                l.push(x);
            }
        }
        let start = |block, ready, ms| StartTogether {
            env_idx: 1,
            block: Some(block),
            asked: 4,
            ready,
            makespan_ms: ms,
            host_cpu_ms: Some(160.0),
            failed: (ready < 4)
                .then(|| "instance 3 of 4 started together: the agent did not become ready".into()),
        };
        let starts = [start(0, 4, 410.0), start(1, 4, 430.0), start(2, 3, 900.0)];
        let envs = [(0, "c [instances=1]", "c", 1), (1, "c [instances=4]", "c", 4)];
        let t = build(&envs, &l, &starts);
        assert_eq!(t.len(), 1, "only the environment started together");
        let t = &t[0];
        assert_eq!((t.n, t.starts, t.complete), (4, 3, 2));
        assert_eq!(t.ready_ms, Some(Spread { n: 8, p50: 250.0, p99: 400.0, max: 400.0 }));
        assert!((t.makespan_ms.as_ref().unwrap().mean - 420.0).abs() < 1e-9);
        assert!((t.host_cpu_ms.as_ref().unwrap().mean - 40.0).abs() < 1e-9, "160 ms over 4 instances");
        assert_eq!((t.alone_ready_ms, t.alone_host_cpu_ms), (Some(50.0), Some(30.0)));
        let s = text(t);
        assert!(
            s.starts_with(
                "4 at once: all ready in 420 ms (range 410–430 ms) over 2 starts (1 of 3 starts had an instance fail)"
            ),
            "{s}"
        );
        assert!(s.contains("each ready p50 250 ms, p99 400 ms, max 400 ms (8 instances; one alone: 50.0 ms, ×5.0 at p50)"), "{s}");
        assert!(s.contains("host CPU 40.0 ms (range 40.0–40.0 ms) per instance (alone 30.0 ms)"), "{s}");
        let r = render(std::slice::from_ref(t));
        assert!(r.contains("failed: instance 3 of 4 started together"), "{r}");
        assert!(quantile(&[1.0], 0.99) == 1.0);
    }
}
