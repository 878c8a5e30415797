//! `timer`: how late does a periodic thread wake up? cyclictest's measurement (rt-tests): a thread
//! sleeps to absolute deadlines `interval` apart on CLOCK_MONOTONIC (`clock_nanosleep`,
//! TIMER_ABSTIME) for `duration`, and records each wake-up's lateness. Seed 002's question, asked
//! the way real-time engineers ask it: not the mean, the worst case. `bench/timer.sh` holds it
//! against cyclictest on the same host.

use serde_json::json;

use crate::params::{ParamKind, ParamSpec, Params};
use crate::workload::{sample, Better, MetricSpec, Output, RunCtx, Workload};

pub struct Timer;

const fn m(name: &'static str, help: &'static str) -> MetricSpec {
    MetricSpec { name, unit: "us", better: Better::Lower, help }
}

const METRICS: &[MetricSpec] = &[
    m("timer_min", "smallest wake-up lateness"),
    m("timer_mean", "mean wake-up lateness"),
    m("timer_p50", "median wake-up lateness"),
    m("timer_p99", "99th percentile of wake-up lateness"),
    m("timer_p999", "99.9th percentile of wake-up lateness"),
    m("timer_max", "largest wake-up lateness (the worst case)"),
    MetricSpec {
        name: "timer_overruns",
        unit: "periods",
        better: Better::Lower,
        help: "deadlines missed whole (a wake-up later than a period skips them, as cyclictest; counted, not hidden)",
    },
    MetricSpec {
        name: "timer_early",
        unit: "wake-ups",
        better: Better::Lower,
        help: "wake-ups before their deadline: impossible on a sound clock (the lateness figures count them as 0)",
    },
];

/// Percentiles reported only when the sample holds at least this many wake-ups beyond them (a
/// p99.9 of 2000 samples is the third-largest: not a percentile anyone can rely on).
pub const TAIL_SAMPLES: f64 = 10.0;

/// Whether `n` samples support the quantile `q`: at least [`TAIL_SAMPLES`] beyond it.
pub fn supports(n: usize, q: f64) -> bool {
    n as f64 * (1.0 - q) >= TAIL_SAMPLES
}

/// Histogram resolution: 1 µs buckets up to this (as cyclictest -h), log-spaced above (one per
/// doubling: 10 ms, 20 ms, 40 ms, …), so a 100 ms stall is not one overflow bucket with the rest.
pub const HIST_MAX_US: usize = 10_000;

/// The bucket (its start, µs) of a lateness.
pub fn bucket(l_us: f64) -> u64 {
    let l = l_us.max(0.0);
    if l < HIST_MAX_US as f64 {
        l as u64
    } else {
        HIST_MAX_US as u64 * (1u64 << ((l / HIST_MAX_US as f64).log2().floor() as u32).min(40))
    }
}

fn now_ns() -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

fn to_timespec(ns: i128) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// The statistics of lateness samples (µs, sorted): min, mean, p50, p99, p99.9, max.
pub fn stats(sorted: &[f64]) -> [f64; 6] {
    if sorted.is_empty() {
        return [0.0; 6];
    }
    let q = |p: f64| sorted[(((sorted.len() - 1) as f64) * p).round() as usize];
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    [sorted[0], mean, q(0.5), q(0.99), q(0.999), sorted[sorted.len() - 1]]
}

/// Sparse histogram: (µs, count) for every non-empty bucket ([`bucket`]).
pub fn histogram(lat_us: &[f64]) -> Vec<(u64, u64)> {
    let mut h = std::collections::BTreeMap::new();
    for l in lat_us {
        *h.entry(bucket(*l)).or_insert(0u64) += 1;
    }
    h.into_iter().collect()
}

impl Workload for Timer {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Timer
    }
    fn kind(&self) -> &'static str {
        "timer"
    }
    fn report_section(&self) -> Option<&'static str> {
        Some("timer")
    }
    fn summary(&self) -> &'static str {
        "a thread wakes at absolute deadlines `interval` apart (clock_nanosleep) for `duration`; the lateness of every wake-up (cyclictest's measurement)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "interval",
                kind: ParamKind::Duration { min_ms: 1, max_ms: 1000 },
                default: Some("1ms"),
                help: "period between wake-ups (cyclictest -i)",
            },
            ParamSpec {
                name: "duration",
                kind: ParamKind::Duration { min_ms: 10, max_ms: 3_600_000 },
                default: Some("2s"),
                help: "how long to keep waking up (duration / interval wake-ups)",
            },
            ParamSpec {
                name: "priority",
                kind: ParamKind::Int { min: 0, max: 99 },
                default: Some("0"),
                help: "SCHED_FIFO priority of the timer thread (cyclictest -p); 0 = the default policy. Where the environment refuses it, the trial says so (extra.policy) and runs unprivileged",
            },
        ]
    }
    fn aggregation(&self, metric: &str, _p: &Params) -> crate::workload::Aggregation {
        match metric {
            "timer_max" => crate::workload::Aggregation::Max,
            "timer_min" => crate::workload::Aggregation::Min,
            _ => crate::workload::Aggregation::Pooled,
        }
    }
    fn pooled(&self, metric: &str, details: &[&serde_json::Value]) -> Option<f64> {
        let h = crate::workload::merged_histogram(details, |d| d.get("histogram_us"))?;
        Some(match metric {
            "timer_mean" => crate::workload::histogram_mean(&h),
            "timer_p50" => crate::workload::histogram_quantile(&h, 0.5),
            "timer_p99" => crate::workload::histogram_quantile(&h, 0.99),
            "timer_p999" => crate::workload::histogram_quantile(&h, 0.999),
            _ => return None,
        })
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        METRICS
    }
    fn conditional_metrics(&self) -> &'static [&'static str] {
        &["timer_p99", "timer_p999"]
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let interval = p.u64("interval")? as i128 * 1_000_000;
        let wakeups = (p.u64("duration")? as i128 * 1_000_000 / interval).max(1) as usize;
        let priority = p.u64("priority")? as i32;
        // Its own thread: the scheduling policy applies to it alone, never to the agent.
        type Ran = (Vec<f64>, String, u64, u64, i128);
        let (lat, policy, overruns, early, earliest) = std::thread::scope(|s| {
            s.spawn(|| -> Result<Ran, crate::error::Error> {
                // Its CPU counts in the run's (guest_cpu_time).
                let _cpu = ctx.thread_cpu();
                let policy = if priority > 0 {
                    let sp = libc::sched_param { sched_priority: priority };
                    // SAFETY: sets this thread's policy (pid 0 = the calling thread).
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &sp) } == 0 {
                        format!("SCHED_FIFO {priority}")
                    } else {
                        format!(
                            "SCHED_OTHER (SCHED_FIFO {priority} refused: {})",
                            std::io::Error::last_os_error()
                        )
                    }
                } else {
                    "SCHED_OTHER".to_string()
                };
                let mut lat = Vec::with_capacity(wakeups);
                let (mut overruns, mut early, mut earliest) = (0u64, 0u64, 0i128);
                let mut next = now_ns() + interval;
                for _ in 0..wakeups {
                    if ctx.stopped() {
                        return Err(crate::error::Failure::Stopped("of the wake-ups").into());
                    }
                    let ts = to_timespec(next);
                    loop {
                        // SAFETY: sleeps to an absolute time given in a timespec we own.
                        let rc = unsafe {
                            libc::clock_nanosleep(
                                libc::CLOCK_MONOTONIC,
                                libc::TIMER_ABSTIME,
                                &ts,
                                std::ptr::null_mut(),
                            )
                        };
                        match rc {
                            0 => break,
                            libc::EINTR => continue,
                            e => {
                                return Err(crate::error::OsError::new(
                                    "clock_nanosleep",
                                    std::io::Error::from_raw_os_error(e),
                                )
                                .into())
                            }
                        }
                    }
                    let late = now_ns() - next;
                    if late < 0 {
                        early += 1;
                        earliest = earliest.min(late);
                    }
                    lat.push(late.max(0) as f64 / 1e3);
                    next += interval;
                    // A wake-up later than a whole period: skip the missed deadlines (as
                    // cyclictest), each one counted.
                    let now = now_ns();
                    while next <= now {
                        next += interval;
                        overruns += 1;
                    }
                }
                Ok((lat, policy, overruns, early, earliest))
            })
            .join()
            .map_err(|_| crate::error::Failure::Panicked("the timer"))?
        })?;
        let mut sorted = lat.clone();
        sorted.sort_by(f64::total_cmp);
        let st = stats(&sorted);
        let n = sorted.len();
        let mut samples: Vec<_> = METRICS
            .iter()
            .zip(st)
            .filter(|(m, _)| match m.name {
                "timer_p99" => supports(n, 0.99),
                "timer_p999" => supports(n, 0.999),
                _ => true,
            })
            .map(|(m, v)| sample(m.name, v, "us"))
            .collect();
        let left_out: Vec<&str> = [("timer_p99", 0.99), ("timer_p999", 0.999)]
            .iter()
            .filter(|(_, q)| !supports(n, *q))
            .map(|(m, _)| *m)
            .collect();
        samples.push(sample("timer_overruns", overruns as f64, "periods"));
        samples.push(sample("timer_early", early as f64, "wake-ups"));
        Ok(Output {
            samples,
            extra: json!({
                "wakeups": lat.len(),
                "overruns": overruns,
                "early": early,
                "earliest_us": earliest as f64 / 1e3,
                "percentiles_left_out": left_out,
                "interval_us": interval / 1000,
                "policy": policy,
                "histogram_us": histogram(&lat),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn statistics_of_a_known_distribution() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let [min, mean, p50, p99, p999, max] = stats(&v);
        assert_eq!((min, p50, p99, p999, max), (1.0, 501.0, 990.0, 999.0, 1000.0));
        assert!((mean - 500.5).abs() < 1e-9);
        let h = histogram(&[0.2, 0.7, 3.5, 15_000.0, 20_000.0, 100_000.0]);
        assert_eq!(h, vec![(0, 2), (3, 1), (10_000, 1), (20_000, 1), (80_000, 1)], "log-spaced above 10 ms");
        // p99.9 of 2000 wake-ups is the third-largest: not reported; of 10 000, it is.
        assert!(!supports(2000, 0.999) && supports(10_000, 0.999) && supports(1000, 0.99));
    }

    #[test]
    fn wakes_up_every_interval_and_late_not_early() {
        let raw: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_value(json!({"interval": 1, "duration": 200})).unwrap();
        let p = crate::params::revalidate(Timer.params(), &raw).unwrap();
        let t0 = Instant::now();
        let o = Timer.run(&Params(&p), &RunCtx::detached()).unwrap();
        let took = t0.elapsed().as_secs_f64();
        assert_eq!(o.extra["wakeups"], 200);
        assert_eq!(o.extra["early"], 0, "a sound clock never wakes a TIMER_ABSTIME sleep early");
        let names: Vec<&str> = o.samples.iter().map(|s| s.metric.as_str()).collect();
        assert!(
            !names.contains(&"timer_p99") && !names.contains(&"timer_p999"),
            "200 samples support neither: {names:?}"
        );
        assert!(names.contains(&"timer_overruns") && names.contains(&"timer_early"));
        // 200 deadlines 1 ms apart: about 200 ms, never much less (it sleeps to each one).
        assert!((0.19..2.0).contains(&took), "{took} s");
        let get = |n: &str| o.samples.iter().find(|s| s.metric == n).unwrap().value;
        assert!(get("timer_min") >= 0.0 && get("timer_min") <= get("timer_p50"));
        assert!(get("timer_p50") <= get("timer_max"));
        let counted: u64 =
            o.extra["histogram_us"].as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).sum();
        assert_eq!(counted, 200);
    }
}
