//! Counts of a flow over time — bytes received, bytes the peer acknowledged, datagrams,
//! transactions — sampled every [`PERIOD`] on the agent's CLOCK_MONOTONIC (iperf3's `-i`), so that
//! the orchestrator can add N flows over one window where all of them run (seed 000's aggregate of
//! N VMs on one link), instead of adding rates each measured over a window of its own: staggered
//! windows can add up to more than a shared link carries.
//!
//! A series is `[[t_ns, count], …]`: the flow's first point (its first byte, count 0), a point every
//! period, its last point (the last byte, the total). Between points the count is taken as linear.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::workload::now_ns;

/// How often a flow's count is sampled.
pub const PERIOD: Duration = Duration::from_millis(100);

/// A sample whose counter read took longer than this (an atomic load: nanoseconds, unless the
/// thread lost its CPU in between) is left out.
const MAX_READ_NS: u64 = 200_000;

/// A thread that samples `read()` every [`PERIOD`] until [`Sampler::finish`].
pub struct Sampler {
    points: Arc<Mutex<Vec<[u64; 2]>>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `read` (a counter the flow's threads add to, or a socket's own count).
    pub fn start(read: impl Fn() -> u64 + Send + 'static) -> Sampler {
        let points = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (points.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut next = now_ns() + PERIOD.as_nanos() as u64;
            while !s.load(Ordering::Relaxed) {
                std::thread::park_timeout(Duration::from_nanos(next.saturating_sub(now_ns())));
                if s.load(Ordering::Relaxed) {
                    break;
                }
                if now_ns() >= next {
                    // The count and its time taken together: the clock read on both sides of the
                    // counter's, and a sample whose read was interrupted (the thread preempted in
                    // between, on a busy host) left out rather than stamped early — two flows'
                    // bytes added over a common window passed a 1 Gbit/s wire's ceiling by 0.86 %
                    // beside a nice-19 compile, with the time taken before the count.
                    let a = now_ns();
                    let c = read();
                    let b = now_ns();
                    if b - a <= MAX_READ_NS {
                        if let Ok(mut v) = p.lock() {
                            v.push([a + (b - a) / 2, c]);
                        }
                    }
                    next += PERIOD.as_nanos() as u64;
                }
            }
        });
        Sampler { points, stop, handle: Some(handle) }
    }

    /// Stops sampling; the series from `first` (count 0) to `last` (the total), with the samples
    /// between them.
    pub fn finish(mut self, first: [u64; 2], last: [u64; 2]) -> Vec<[u64; 2]> {
        self.halt();
        let mut out = vec![[first[0], 0]];
        if let Ok(v) = self.points.lock() {
            out.extend(
                v.iter().filter(|p| p[0] > first[0] && p[0] < last[0]).map(|p| [p[0], p[1].min(last[1])]),
            );
        }
        out.push(last);
        out
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A counter several threads of one flow add to, and a [`Sampler`] reads.
pub fn counter() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

/// The count at `t` by linear interpolation (before the first point: 0; after the last: the total).
pub fn count_at(series: &[[u64; 2]], t: u64) -> f64 {
    let (Some(first), Some(last)) = (series.first(), series.last()) else { return 0.0 };
    if t <= first[0] {
        return 0.0;
    }
    if t >= last[0] {
        return last[1] as f64;
    }
    let i = series.iter().position(|p| p[0] >= t).unwrap_or(series.len() - 1).max(1);
    let (a, b) = (series[i - 1], series[i]);
    let f = if b[0] > a[0] { (t - a[0]) as f64 / (b[0] - a[0]) as f64 } else { 1.0 };
    a[1] as f64 + f * (b[1] as f64 - a[1] as f64)
}

/// A series read back from a flow's detail (`extra["series"][name]`).
pub fn parse(v: &Value) -> Option<Vec<[u64; 2]>> {
    let pts: Vec<[u64; 2]> =
        v.as_array()?.iter().filter_map(|p| Some([p.get(0)?.as_u64()?, p.get(1)?.as_u64()?])).collect();
    (pts.len() >= 2 && pts.windows(2).all(|w| w[0][0] <= w[1][0])).then_some(pts)
}

/// N flows added over one window: the span where every flow runs (from the latest first point to
/// the earliest last point), the count each flow added in it, and the ramps outside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Each flow's count inside the window.
    pub counts: Vec<f64>,
    /// From the first flow's start to the last flow's, and from the first flow's end to the last's.
    pub ramp_up_ns: u64,
    pub ramp_down_ns: u64,
}

impl Window {
    /// The common window of `flows` (all on one clock); None when they never all run at once.
    pub fn of(flows: &[Vec<[u64; 2]>]) -> Option<Window> {
        let firsts: Vec<u64> = flows.iter().map(|s| s.first().map_or(0, |p| p[0])).collect();
        let lasts: Vec<u64> = flows.iter().map(|s| s.last().map_or(0, |p| p[0])).collect();
        let (start, end) = (*firsts.iter().max()?, *lasts.iter().min()?);
        if end <= start {
            return None;
        }
        // A flow's rate changes when another starts or stops; a count interpolated across such a
        // change puts bytes of the faster part inside the window (a flow alone at the full rate
        // until `start` looks as if it kept part of that rate after it). So the window's edges move
        // inward to instants where every flow's bracketing samples lie inside [start, end]: the
        // latest of each flow's first sample at or after `start`, the earliest of each flow's last
        // sample at or before `end` (when the flows are too short for that, the plain span).
        let inner_start = flows.iter().filter_map(|s| s.iter().map(|p| p[0]).find(|&t| t >= start)).max();
        let inner_end = flows.iter().filter_map(|s| s.iter().rev().map(|p| p[0]).find(|&t| t <= end)).min();
        let (start, end) = match (inner_start, inner_end) {
            (Some(a), Some(b)) if b > a => (a, b),
            _ => (start, end),
        };
        Some(Window {
            start_ns: start,
            end_ns: end,
            counts: flows.iter().map(|s| count_at(s, end) - count_at(s, start)).collect(),
            ramp_up_ns: start - firsts.iter().min().copied().unwrap_or(start),
            ramp_down_ns: lasts.iter().max().copied().unwrap_or(end) - end,
        })
    }
    pub fn seconds(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }
    /// Each flow's rate over the window, counts per second.
    pub fn rates(&self) -> Vec<f64> {
        self.counts.iter().map(|c| c / self.seconds()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staggered_flows_add_over_the_window_they_share() {
        // Two flows of 100 units/s on one clock: one from 0 to 10 s, one from 5 to 15 s, each
        // sampled every second. Each flow's own rate is 100; over the common window 5–10 s both run.
        let s = |from: u64| -> Vec<[u64; 2]> {
            (0..=10).map(|i| [(from + i) * 1_000_000_000, i * 100]).collect()
        };
        let w = Window::of(&[s(0), s(5)]).unwrap();
        assert_eq!((w.start_ns, w.end_ns), (5_000_000_000, 10_000_000_000));
        assert_eq!((w.ramp_up_ns, w.ramp_down_ns), (5_000_000_000, 5_000_000_000));
        for r in w.rates() {
            assert!((r - 100.0).abs() < 1e-9, "{r}");
        }
        // Flows that never run together have no common window.
        assert!(Window::of(&[s(0), s(11)]).is_none());
    }

    #[test]
    fn a_link_shared_in_turn_does_not_add_up_past_its_rate() {
        // A 100-unit/s link: flow A alone for 2 s (100/s), then A and B share it (50/s each) for
        // 4 s, then B alone for 2 s. Each flow's own rate over its own 6 s is 66.7/s: their sum,
        // 133/s, exceeds the link; over the shared 4 s they add to 100/s exactly.
        let a = vec![[0, 0], [2_000_000_000, 200], [6_000_000_000, 400]];
        let b = vec![[2_000_000_000, 0], [6_000_000_000, 200], [8_000_000_000, 400]];
        let own =
            |s: &[[u64; 2]]| s.last().unwrap()[1] as f64 / ((s.last().unwrap()[0] - s[0][0]) as f64 / 1e9);
        assert!(own(&a) + own(&b) > 130.0);
        let w = Window::of(&[a, b]).unwrap();
        let sum: f64 = w.rates().iter().sum();
        assert!((sum - 100.0).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn a_rate_change_between_samples_stays_outside_the_window() {
        // A 100-unit/s link. A alone from 0 s, sampled every second; B joins at 5.05 s (sampled at
        // 6.05, 7.05, …), then each gets 50/s until 10.05 s. Interpolating A at 5.05 s between its
        // samples at 5 s (500) and 6 s (552.5) gives 502.6 where A had 505: A would seem to carry
        // 2.4 units more inside the window — the sum would pass the link.
        let a: Vec<[u64; 2]> = (0..=10)
            .map(|i: u64| {
                let t = i as f64;
                let c = if t <= 5.05 { 100.0 * t } else { 505.0 + 50.0 * (t - 5.05) };
                [i * 1_000_000_000, (c * 1000.0).round() as u64]
            })
            .chain(std::iter::once([10_050_000_000, 755_000]))
            .collect();
        let b: Vec<[u64; 2]> =
            (0..=5).map(|i: u64| [5_050_000_000 + i * 1_000_000_000, i * 50_000]).collect();
        let w = Window::of(&[a, b]).unwrap();
        let sum: f64 = w.rates().iter().sum::<f64>() / 1000.0;
        assert!((sum - 100.0).abs() < 1e-6, "the link's 100/s exactly: {sum} over {w:?}");
        assert_eq!((w.start_ns, w.end_ns), (6_000_000_000, 10_050_000_000), "{w:?}");
    }

    #[test]
    fn interpolation_and_parsing() {
        let s = vec![[10, 0], [20, 100], [30, 300]];
        assert_eq!(count_at(&s, 5), 0.0);
        assert_eq!(count_at(&s, 15), 50.0);
        assert_eq!(count_at(&s, 25), 200.0);
        assert_eq!(count_at(&s, 99), 300.0);
        assert_eq!(parse(&serde_json::json!([[10, 0], [20, 100]])), Some(vec![[10, 0], [20, 100]]));
        assert_eq!(parse(&serde_json::json!([[20, 0], [10, 100]])), None, "time runs forward");
        assert_eq!(parse(&serde_json::json!([[10, 0]])), None, "a series has two points at least");
    }

    #[test]
    fn the_sampler_samples_every_period_between_first_and_last() {
        let c = counter();
        let c2 = c.clone();
        let t0 = now_ns();
        let s = Sampler::start(move || c2.load(Ordering::Relaxed));
        for _ in 0..5 {
            c.fetch_add(10, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(60));
        }
        let t1 = now_ns();
        let series = s.finish([t0, 0], [t1, 50]);
        assert_eq!(series.first(), Some(&[t0, 0]));
        assert_eq!(series.last(), Some(&[t1, 50]));
        // One sample per elapsed period between the ends (give or take the one at the edge: the
        // sampler wakes up to a scheduler's delay late on a loaded host).
        let periods = (t1 - t0) / PERIOD.as_nanos() as u64;
        let between = series.len() as u64 - 2;
        assert!(
            between + 1 >= periods && between <= periods,
            "{periods} periods, {between} samples: {series:?}"
        );
        assert!(series.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]), "{series:?}");
    }

    #[test]
    fn a_sample_whose_read_was_interrupted_is_left_out_not_stamped_early() {
        // A read that takes a millisecond stands for a sampler preempted between its clock and
        // its counter: its count belongs to no single time, so no point is kept.
        let t0 = now_ns();
        let s = Sampler::start(|| {
            std::thread::sleep(Duration::from_millis(1));
            7
        });
        std::thread::sleep(Duration::from_millis(350));
        let t1 = now_ns();
        let series = s.finish([t0, 0], [t1, 7]);
        assert_eq!(series, vec![[t0, 0], [t1, 7]], "only the flow's own first and last points");
    }
}
