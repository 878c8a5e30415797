//! Change points in a series of runs: E-divisive means (Matteson and James, "A nonparametric
//! approach for multiple change point analysis of multivariate data", JASA 2014), the method
//! Apache Otava (hunter) runs over performance histories.
//!
//! Why this method: it assumes no distribution (performance figures are skewed and bimodal), finds
//! any number of changes hierarchically, and its significance comes from permutations of the data
//! itself, so a noisy series needs a larger change to be believed — noise alone gives none at the
//! stated level. Each split is scored by the energy statistic
//! `Q = (l·r / m) · (2/(l·r) Σ|xᵢ − yⱼ| − 1/C(l,2) Σ|xᵢ − xₖ| − 1/C(r,2) Σ|yⱼ − yₖ|)`
//! over a segment of `m` points cut into `l` and `r`; the best cut of every segment is a candidate,
//! the best candidate is tested against the same maximum over permutations within the segments
//! (seeded: the same answer on every machine), and kept when its p-value is at most `alpha`; then
//! the next, until one is not significant.
//!
//! Sums are updated as the cut moves (O(m²) a segment, not O(m³)): 199 permutations of a series
//! of 100 runs take milliseconds.

use serde::Serialize;

use crate::sim::Rng;
use crate::{ratio_ci, Summary};

/// How the search is run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// The significance level a change must reach (its permutation p-value at most this).
    pub alpha: f64,
    /// Permutations per test: p-values are multiples of 1 / (permutations + 1).
    pub permutations: usize,
    /// The fewest runs on either side of a change.
    pub min_size: usize,
    /// The permutations' seed.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { alpha: 0.05, permutations: 199, min_size: 3, seed: 1 }
    }
}

/// One change found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangePoint {
    /// The first index of the series after the change (the run that changed).
    pub index: usize,
    /// The means of the segments either side (from the previous change to this one, and from this
    /// one to the next).
    pub before: f64,
    pub after: f64,
    /// `after / before`, with Fieller's 95 % interval (None: a side without spread, or a mean of 0).
    pub ratio: f64,
    pub ci95: Option<(f64, f64)>,
    /// The permutation p-value when it was accepted.
    pub p_value: f64,
}

/// The change points of `xs`, in order of index.
pub fn e_divisive(xs: &[f64], o: &Options) -> Vec<ChangePoint> {
    let min = o.min_size.max(2);
    let mut cuts: Vec<usize> = Vec::new();
    let mut p_of: Vec<(usize, f64)> = Vec::new();
    let mut rng = Rng(o.seed);
    let mut work = xs.to_vec();
    while let Some((cut, q)) = best_cut(xs, &bounds(&cuts, xs.len()), min) {
        // The same statistic on the data permuted within today's segments.
        let b = bounds(&cuts, xs.len());
        let mut exceed = 0;
        for _ in 0..o.permutations {
            work.copy_from_slice(xs);
            for w in b.windows(2) {
                shuffle(&mut rng, &mut work[w[0]..w[1]]);
            }
            if best_cut(&work, &b, min).is_some_and(|(_, qp)| qp >= q) {
                exceed += 1;
            }
        }
        let p = (exceed + 1) as f64 / (o.permutations + 1) as f64;
        if p > o.alpha {
            break;
        }
        cuts.push(cut);
        cuts.sort_unstable();
        p_of.push((cut, p));
    }
    let b = bounds(&cuts, xs.len());
    cuts.iter()
        .enumerate()
        .filter_map(|(i, &c)| {
            let before = Summary::of(&xs[b[i]..c])?;
            let after = Summary::of(&xs[c..b[i + 2]])?;
            let r = ratio_ci(&after, &before);
            Some(ChangePoint {
                index: c,
                before: before.mean,
                after: after.mean,
                ratio: r.as_ref().map_or(f64::NAN, |r| r.ratio),
                ci95: r.and_then(|r| r.ci95),
                p_value: p_of.iter().find(|x| x.0 == c).map_or(1.0, |x| x.1),
            })
        })
        .collect()
}

/// [0, the cuts…, n].
/// The shortest series in which a change can be significant at `o.alpha`: a permutation test's
/// smallest p-value is the share of orderings as extreme as the most extreme one — a perfect step
/// cut in halves, `2 / C(n, n/2)` (0.1 for 6 runs, 0.057 for 7, 0.029 for 8) — and each side needs
/// `o.min_size` runs.
pub fn shortest_series(o: &Options) -> usize {
    let choose_half = |n: usize| (0..n / 2).fold(1.0f64, |c, i| c * (n - i) as f64 / (i + 1) as f64);
    let mut n = 2 * o.min_size.max(2);
    while 2.0 / choose_half(n) > o.alpha && n < 1000 {
        n += 1;
    }
    n
}

fn bounds(cuts: &[usize], n: usize) -> Vec<usize> {
    let mut b = Vec::with_capacity(cuts.len() + 2);
    b.push(0);
    b.extend_from_slice(cuts);
    b.push(n);
    b
}

/// The best cut over every segment: (index, Q).
fn best_cut(xs: &[f64], bounds: &[usize], min: usize) -> Option<(usize, f64)> {
    bounds
        .windows(2)
        .filter_map(|w| best_in(&xs[w[0]..w[1]], min).map(|(c, q)| (w[0] + c, q)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The best cut of one segment (index within it, Q), both sides at least `min` long.
fn best_in(seg: &[f64], min: usize) -> Option<(usize, f64)> {
    let m = seg.len();
    if m < 2 * min {
        return None;
    }
    let d = |i: usize, j: usize| (seg[i] - seg[j]).abs();
    // Cut at `min`: left = [0, min), right = [min, m).
    let mut left = 0.0;
    for i in 0..min {
        for k in i + 1..min {
            left += d(i, k);
        }
    }
    let mut right = 0.0;
    for j in min..m {
        for k in j + 1..m {
            right += d(j, k);
        }
    }
    let mut between = 0.0;
    for i in 0..min {
        for j in min..m {
            between += d(i, j);
        }
    }
    let pairs = |k: usize| (k * (k - 1) / 2) as f64;
    let mut best: Option<(usize, f64)> = None;
    let mut t = min;
    loop {
        let (l, r) = (t as f64, (m - t) as f64);
        let q = l * r / m as f64 * (2.0 * between / (l * r) - left / pairs(t) - right / pairs(m - t));
        if best.is_none_or(|(_, b)| q > b) {
            best = Some((t, q));
        }
        if t + 1 > m - min {
            break;
        }
        // Move point t from the right side to the left.
        let to_left: f64 = (0..t).map(|i| d(i, t)).sum();
        let to_right: f64 = (t + 1..m).map(|j| d(t, j)).sum();
        left += to_left;
        right -= to_right;
        between += to_right - to_left;
        t += 1;
    }
    best
}

/// Fisher–Yates, from the crate's seeded generator.
fn shuffle(rng: &mut Rng, v: &mut [f64]) {
    for i in (1..v.len()).rev() {
        let j = ((rng.uniform() * (i + 1) as f64) as usize).min(i);
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A series of `n` runs of an overhead ratio around 1 with a CV of `cv`, shaped by `f(i)`.
    fn series(n: usize, cv: f64, seed: u64, f: impl Fn(usize) -> f64) -> Vec<f64> {
        let mut r = Rng(seed);
        (0..n).map(|i| f(i) * (1.0 + cv * r.normal(0.0, 1.0))).collect()
    }

    #[test]
    fn the_best_cut_moves_its_sums_like_a_fresh_count() {
        let seg = [1.0, 1.2, 0.9, 5.0, 5.1, 4.8, 5.3];
        let (c, q) = best_in(&seg, 2).unwrap();
        assert_eq!(c, 3);
        // Q computed afresh at the cut.
        let (x, y) = seg.split_at(3);
        let s =
            |a: &[f64], b: &[f64]| a.iter().flat_map(|p| b.iter().map(move |q| (p - q).abs())).sum::<f64>();
        let within = |a: &[f64]| s(a, a) / 2.0 / (a.len() * (a.len() - 1) / 2) as f64;
        let fresh = 3.0 * 4.0 / 7.0 * (2.0 * s(x, y) / 12.0 - within(x) - within(y));
        assert!((q - fresh).abs() < 1e-9, "{q} against {fresh}");
        assert_eq!(best_in(&seg[..3], 2), None, "too short to cut");
    }

    /// Validation on synthetic series of 30 runs, CV 2 % a run, 200 of each: a 5 % step is found
    /// (at its run, give or take one) in ≥ 90 %; pure noise gives a change in at most about the
    /// level (≤ 8 % of series at α = 5 %); a slow drift is cut somewhere, and said as a change
    /// in the drift's direction; two steps give two changes.
    #[test]
    fn steps_are_found_and_noise_gives_none() {
        let o = Options::default();
        let n = 200;
        let (mut found, mut at_run, mut noise, mut drift, mut two) = (0, 0, 0, 0, 0);
        for seed in 0..n as u64 {
            let cps = e_divisive(&series(30, 0.02, seed, |i| if i < 15 { 1.0 } else { 1.05 }), &o);
            if !cps.is_empty() {
                found += 1;
                if cps.iter().any(|c| c.index.abs_diff(15) <= 1 && c.ratio > 1.0) {
                    at_run += 1;
                }
            }
            if !e_divisive(&series(30, 0.02, seed + 1000, |_| 1.0), &o).is_empty() {
                noise += 1;
            }
            let d = e_divisive(&series(30, 0.02, seed + 2000, |i| 1.0 + 0.004 * i as f64), &o);
            if d.first().is_some_and(|c| c.ratio > 1.0) {
                drift += 1;
            }
            let s2 = e_divisive(&series(40, 0.02, seed + 3000, |i| [1.0, 1.08, 0.97][(i / 14).min(2)]), &o);
            if s2.len() >= 2 {
                two += 1;
            }
        }
        let pct = |k: usize| k as f64 / n as f64 * 100.0;
        println!(
            "5 % step: found in {:.1} %, at its run ±1 in {:.1} %; noise: a change in {:.1} %; drift of 12 %: cut in {:.1} %; two steps: both in {:.1} %",
            pct(found),
            pct(at_run),
            pct(noise),
            pct(drift),
            pct(two)
        );
        assert!(pct(at_run) >= 90.0, "a 5 % step at its run in {:.1} %", pct(at_run));
        assert!(pct(noise) <= 8.0, "noise gave a change in {:.1} % of series", pct(noise));
        assert!(
            pct(drift) >= 80.0 && pct(two) >= 80.0,
            "drift {:.1} %, two steps {:.1} %",
            pct(drift),
            pct(two)
        );
    }

    #[test]
    fn a_perfect_step_needs_eight_runs_at_five_percent() {
        let o = Options::default();
        assert_eq!(shortest_series(&o), 8);
        assert_eq!(shortest_series(&Options { alpha: 0.1, ..o }), 6);
        assert_eq!(shortest_series(&Options { alpha: 0.01, ..o }), 10);
        // What it says holds (with enough permutations that p's own error is small near α): the
        // cleanest step of 6 runs is not significant (p = 0.1), of 8 it is (p = 0.029).
        let o = Options { permutations: 999, ..o };
        let step = |n: usize| {
            (0..n).map(|i| if i < n / 2 { 1.0 } else { 2.0 } + i as f64 * 1e-3).collect::<Vec<_>>()
        };
        assert!(e_divisive(&step(6), &o).is_empty());
        let found = e_divisive(&step(8), &o);
        assert_eq!(found.len(), 1);
        assert!((found[0].p_value - 2.0 / 70.0).abs() < 0.015, "{}", found[0].p_value);
    }

    #[test]
    fn a_change_says_its_size_interval_and_significance() {
        let xs = series(24, 0.01, 7, |i| if i < 12 { 2.0 } else { 2.2 });
        let cps = e_divisive(&xs, &Options::default());
        assert_eq!(cps.len(), 1, "{cps:?}");
        let c = &cps[0];
        assert_eq!(c.index, 12);
        assert!((c.ratio - 1.1).abs() < 0.02, "{c:?}");
        let (l, h) = c.ci95.unwrap();
        assert!(l > 1.05 && h < 1.15 && l < c.ratio && c.ratio < h, "{c:?}");
        assert!(c.p_value <= 0.01, "{c:?}");
        // Too short a series, a constant one: nothing.
        assert!(e_divisive(&[1.0, 2.0, 3.0], &Options::default()).is_empty());
        assert!(e_divisive(&[1.0; 20], &Options::default()).is_empty());
    }
}
