//! Paired measurement: the overhead from ratios of trials that ran side by side.
//!
//! An environment's trial and its baseline's of the same case, the same launch block and the same
//! round run back to back (`order = "paired"`: a case group holds every environment's trial of
//! one case, in random order). Such a pair shares whatever the host did in those seconds: a
//! slowdown of the whole machine (another tenant, a hypervisor's housekeeping) lengthens both
//! trials, and their ratio cancels it. Unpaired, the same slowdown lands on one side only and is
//! booked as that side's variance — measured on a fresh Cascade Lake host: one native launch at
//! 142 ns per system call among 86–98 ns made gVisor's ×163 interval ±54 % instead of ±19 %.
//!
//! The estimate is the geometric mean of the pairs' ratios, at the level of launches (Kalibera and
//! Jones' two-level model on the log scale): each block's mean log-ratio is one value; their mean
//! gives the ratio, Student's t over the blocks its interval, so the interval covers what changes
//! from one launch of the environment (and of its baseline) to the next. With one block, the pairs
//! of that block give the interval, and it covers that launch only. The geometric mean is the
//! ratio of the two sides' typical (median) trial for multiplicative noise; the ratio of
//! arithmetic means (the unpaired estimate, Fieller's interval) differs from it by the sides'
//! spreads and stays available to compare.

use serde::Serialize;

use crate::t_quantile;

/// One pair: an environment's value and its baseline's from the same block and round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    /// The launch block both came from (pairs of one block are averaged first).
    pub block: i64,
    pub env: f64,
    pub base: f64,
}

/// A pair set apart from its ratio ([`set_apart`]) sits further from the others' median log
/// ratio than both this many robust standard deviations (1.4826 × their MAD)…
pub const APART_SDS: f64 = 5.0;
/// …and this factor: a pair 3× off the others is no noise of theirs (gVisor's `tcp_stream`:
/// pairs at 4.2×, 4.5×, 6.9× and one flow that stalled 17 s, 4887×).
pub const APART_FACTOR: f64 = 3.0;
/// The others it takes to judge one pair: a median and a MAD of fewer say too little.
pub const APART_MIN_OTHERS: usize = 3;

/// The pairs far outside the others of their cell, by index: each one whose log ratio lies
/// beyond [`APART_SDS`] robust standard deviations and [`APART_FACTOR`] from the median of the
/// others' (leave-one-out below 12 pairs, so a stall cannot widen its own bound; from 12 on, one
/// pair cannot move a median or a MAD far and they are taken over all). Where more than a third of the
/// pairs are that far, none is: the cell is not one figure with stalls in it but a spread (two
/// clusters), and is reported as one. With normal noise a pair is set apart with a
/// probability far below 10⁻⁶; the rule is for stalls, which are factors, not percent.
pub fn set_apart(pairs: &[Pair]) -> Vec<usize> {
    let d: Vec<Option<f64>> = pairs
        .iter()
        .map(|p| {
            (p.env > 0.0 && p.base > 0.0 && p.env.is_finite() && p.base.is_finite())
                .then(|| (p.env / p.base).ln())
        })
        .collect();
    let valid: Vec<(usize, f64)> = d.iter().enumerate().filter_map(|(i, x)| x.map(|x| (i, x))).collect();
    if valid.len() < APART_MIN_OTHERS + 1 {
        return Vec::new();
    }
    // From LEAVE_ONE_OUT_BELOW pairs on, one pair moves a median and a MAD by too little to
    // matter, and they are taken once over all (n log n, not n² log n: a cell of 25 repetitions
    // a launch has hundreds of pairs, judged at every step of precision mode).
    const LEAVE_ONE_OUT_BELOW: usize = 12;
    let centre = |xs: &[f64]| {
        let m = crate::median(xs);
        let dev: Vec<f64> = xs.iter().map(|y| (y - m).abs()).collect();
        (m, 1.4826 * crate::median(&dev))
    };
    let all: Vec<f64> = valid.iter().map(|(_, y)| *y).collect();
    let whole = (valid.len() >= LEAVE_ONE_OUT_BELOW).then(|| centre(&all));
    let mut far: Vec<(usize, f64)> = Vec::new();
    for &(i, x) in &valid {
        let (m, robust_sd) = whole.unwrap_or_else(|| {
            let others: Vec<f64> = valid.iter().filter(|(j, _)| *j != i).map(|(_, y)| *y).collect();
            centre(&others)
        });
        let off = (x - m).abs();
        if off > APART_FACTOR.ln() && off > APART_SDS * robust_sd {
            far.push((i, off));
        }
    }
    if far.len() > valid.len() / 3 {
        return Vec::new();
    }
    let mut out: Vec<usize> = far.into_iter().map(|(i, _)| i).collect();
    out.sort_unstable();
    out
}

/// Why a paired ratio has no interval.
pub const NO_CI_ONE_PAIR: &str = "one pair: an interval needs two pairs (two launches, or two rounds of one)";
/// Why a paired ratio has no interval: every pair's ratio is the same.
pub const NO_CI_NO_SPREAD: &str = "every pair's ratio is the same: no interval to estimate";

/// The geometric-mean ratio of paired trials with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairedRatio {
    pub ratio: f64,
    /// The interval at `level`; None when there is none (`no_ci` says why).
    pub ci: Option<(f64, f64)>,
    pub level: f64,
    /// Blocks (launches of both sides) the estimate rests on.
    pub blocks: usize,
    pub pairs: usize,
    /// Standard deviation of the values the interval rests on (block mean log-ratios, or the
    /// pairs' log-ratios with one block).
    pub sd_log: f64,
    pub df: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_ci: Option<&'static str>,
}

impl PairedRatio {
    /// Half the interval's width relative to the ratio (what precision mode's target is about);
    /// infinite without an interval.
    pub fn relative_half_width(&self) -> f64 {
        match self.ci {
            Some((lo, hi)) => (hi - lo) / 2.0 / self.ratio,
            None => f64::INFINITY,
        }
    }
}

/// The values the estimate rests on: each block's mean log-ratio when there are two blocks or
/// more, else the log-ratios of the one block's pairs. None without a pair, or when a value is
/// not positive and finite (a log-ratio needs both sides above zero).
pub fn log_ratios(pairs: &[Pair]) -> Option<(Vec<f64>, usize)> {
    if pairs.is_empty()
        || pairs.iter().any(|p| !(p.env > 0.0 && p.base > 0.0 && p.env.is_finite() && p.base.is_finite()))
    {
        return None;
    }
    let mut blocks: Vec<(i64, Vec<f64>)> = Vec::new();
    for p in pairs {
        let d = (p.env / p.base).ln();
        match blocks.iter_mut().find(|b| b.0 == p.block) {
            Some(b) => b.1.push(d),
            None => blocks.push((p.block, vec![d])),
        }
    }
    let values = if blocks.len() >= 2 {
        blocks.iter().map(|(_, d)| d.iter().sum::<f64>() / d.len() as f64).collect()
    } else {
        blocks.remove(0).1
    };
    Some((values, pairs.len()))
}

/// The pairs of the first `n` blocks `pairs` hold (in block order): a ratio's pilot, which may
/// hold more blocks than the plan's minimum and skips a block it was not measured in.
pub fn first_blocks(pairs: &[Pair], n: usize) -> Vec<Pair> {
    let mut blocks: Vec<i64> = pairs.iter().map(|p| p.block).collect();
    blocks.sort_unstable();
    blocks.dedup();
    blocks.truncate(n);
    pairs.iter().copied().filter(|p| blocks.binary_search(&p.block).is_ok()).collect()
}

/// The paired ratio of `pairs` with its interval at `level` (0.95 for 95 %).
pub fn paired_ratio(pairs: &[Pair], level: f64) -> Option<PairedRatio> {
    paired_ratio_stein(pairs, level, None)
}

/// [`paired_ratio`] after Stein's two-stage procedure (Stein 1945): the number of blocks was sized
/// from the pilot's spread (`pilot`: its sd of block log-ratios and its degrees of freedom), so
/// where that spread is the larger, the interval takes it and its degrees of freedom — Stein's
/// own interval, whose coverage the sizing cannot lower; where the whole run's spread is larger,
/// that one (wider still). Simulated (`sim`): 94.0–98.2 % coverage of 95 % intervals in every
/// cell, where the run's own spread alone gave 91.4 % in one (its pilot's low spread had stopped
/// it early, and the same blocks then made its interval).
pub fn paired_ratio_stein(pairs: &[Pair], level: f64, pilot: Option<(f64, f64)>) -> Option<PairedRatio> {
    let (d, n_pairs) = log_ratios(pairs)?;
    let blocks = {
        let mut b: Vec<i64> = pairs.iter().map(|p| p.block).collect();
        b.sort_unstable();
        b.dedup();
        b.len()
    };
    let n = d.len() as f64;
    let mean = d.iter().sum::<f64>() / n;
    let ratio = mean.exp();
    let none = |why, sd| PairedRatio {
        ratio,
        ci: None,
        level,
        blocks,
        pairs: n_pairs,
        sd_log: sd,
        df: n - 1.0,
        no_ci: Some(why),
    };
    if d.len() < 2 {
        return Some(none(NO_CI_ONE_PAIR, 0.0));
    }
    let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    if sd == 0.0 || !sd.is_finite() {
        return Some(none(NO_CI_NO_SPREAD, sd));
    }
    let (sd, df) = match pilot {
        Some((s0, df0)) if s0 > sd && df0 >= 1.0 => (s0, df0),
        _ => (sd, n - 1.0),
    };
    let half = t_quantile(level, df) * sd / n.sqrt();
    Some(PairedRatio {
        ratio,
        ci: Some(((mean - half).exp(), (mean + half).exp())),
        level,
        blocks,
        pairs: n_pairs,
        sd_log: sd,
        df,
        no_ci: None,
    })
}

/// The units (blocks, or pairs of one block) a paired estimate with spread `sd_log` needs for
/// its interval at `level` to be within ±`target` (relative half-width, 0.05 = 5 %): the smallest
/// n ≥ 2 with t(level, n − 1) · sd / √n ≤ target (on the log scale, where ±5 % is ±0.0488 above
/// and below); `max` when even that many do not get there.
pub fn units_needed(sd_log: f64, target: f64, level: f64, max: usize) -> usize {
    if !(sd_log.is_finite() && sd_log >= 0.0) {
        return max;
    }
    let goal = (1.0 + target).ln();
    let fits = |n: usize| t_quantile(level, (n - 1) as f64) * sd_log / (n as f64).sqrt() <= goal;
    // Start from the normal quantile's answer (t's is larger) and step up: a handful of steps.
    let z = (t_quantile(level, f64::INFINITY) * sd_log / goal).powi(2).ceil();
    let mut n = if z.is_finite() { (z as usize).clamp(2, max) } else { max };
    while n > 2 && fits(n - 1) {
        n -= 1;
    }
    while n < max && !fits(n) {
        n += 1 + n / 64;
    }
    n.min(max)
}

/// Stein's second stage: the blocks a paired estimate needs in all when its interval will rest on
/// the pilot's spread `sd_log` with `df` degrees of freedom: ⌈(t(level, df) · sd / ln(1 + target))²⌉,
/// at least `min`, at most `max`.
pub fn units_needed_stein(sd_log: f64, df: f64, target: f64, level: f64, min: usize, max: usize) -> usize {
    if !(sd_log.is_finite() && sd_log >= 0.0 && df >= 1.0) {
        return max;
    }
    let n = (t_quantile(level, df) * sd_log / (1.0 + target).ln()).powi(2).ceil();
    if n.is_finite() {
        (n as usize).clamp(min, max)
    } else {
        max
    }
}

/// The blocks a ratio needs in all, in up to three stages: Stein's second stage sized from its
/// pilot (its first `pilot` blocks; at least the pilot itself), and, once those are in, a third
/// sized the same way from all of them — where the run's spread came out larger than the pilot's
/// (Stein's interval then takes the run's, and would miss the target), its blocks so far size the
/// rest once more (Hall's three-stage procedure; each stage's count is fixed by the blocks before
/// it, so it is recomputed the same from the stored data). `min` and `max` bound every count.
/// None while the pilot has no spread (below two blocks).
pub fn blocks_needed(
    pairs: &[Pair],
    pilot: usize,
    target: f64,
    level: f64,
    min: usize,
    max: usize,
) -> Option<usize> {
    let spread = |n: usize| {
        paired_ratio(&first_blocks(pairs, n), level)
            .filter(|r| r.blocks >= 2)
            .map(|r| (r.sd_log, r.df, r.blocks))
    };
    let (sd, df, _) = spread(pilot)?;
    let second = units_needed_stein(sd, df, target, level, min, max).max(pilot);
    match spread(second) {
        Some((sd, df, blocks)) if blocks >= second => {
            Some(units_needed_stein(sd, df, target, level, min, max).max(second))
        }
        _ => Some(second),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gVisor `tcp_stream`: three pairs 4.2–6.9× and one stalled flow at 4887× — the
    /// stall is set apart, the others are not; noise of 30 % never is; a cell of two clusters
    /// (more than a third far) is a spread, not stalls.
    #[test]
    fn a_pair_far_outside_the_others_is_set_apart_and_noise_is_not() {
        let p = |block: i64, r: f64| Pair { block, env: r, base: 1.0 };
        let cell = [p(0, 4.2), p(1, 4.5), p(2, 6.9), p(3, 4887.0)];
        assert_eq!(set_apart(&cell), vec![3]);
        let cell = [p(0, 4.2), p(1, 4.5), p(2, 6.9), p(3, 4887.0), p(4, 5.1), p(5, 4.4)];
        assert_eq!(set_apart(&cell), vec![3]);
        // Too few others to judge.
        assert!(set_apart(&[p(0, 4.2), p(1, 4.5), p(2, 4887.0)]).is_empty());
        // A spread of 30 % (lognormal, deterministic quantiles): nothing.
        let z: [f64; 10] = [-1.5, -0.8, -0.3, 0.0, 0.3, 0.8, 1.5, -1.1, 1.1, 0.5];
        let noisy: Vec<Pair> = z.iter().enumerate().map(|(i, z)| p(i as i64, (0.3 * z).exp())).collect();
        assert!(set_apart(&noisy).is_empty());
        // Half at 1×, half at 10×: a spread, nothing set apart.
        let two: Vec<Pair> = (0..6).map(|i| p(i, if i % 2 == 0 { 1.0 } else { 10.0 })).collect();
        assert!(set_apart(&two).is_empty());
        // A stall on the baseline's side is one too (0.001×).
        let cell = [p(0, 1.0), p(1, 1.05), p(2, 0.97), p(3, 0.001), p(4, 1.02)];
        assert_eq!(set_apart(&cell), vec![3]);
    }

    fn pairs(values: &[(i64, f64, f64)]) -> Vec<Pair> {
        values.iter().map(|&(block, env, base)| Pair { block, env, base }).collect()
    }

    #[test]
    fn a_slowdown_of_both_sides_cancels() {
        // Five blocks of one pair: the fourth ran while the host was 1.6× slower for everyone.
        let p = pairs(&[
            (0, 200.0, 100.0),
            (1, 202.0, 101.0),
            (2, 198.0, 99.5),
            (3, 320.0, 160.0),
            (4, 201.0, 100.2),
        ]);
        let r = paired_ratio(&p, 0.95).unwrap();
        assert!((r.ratio - 2.0).abs() < 0.01, "{r:?}");
        assert!(r.relative_half_width() < 0.01, "the slowdown cancelled: {r:?}");
        assert_eq!((r.blocks, r.pairs, r.df), (5, 5, 4.0));
        // Unpaired, the same values give the baseline a 26 % spread and the ratio a wide interval.
        let env: Vec<f64> = p.iter().map(|x| x.env).collect();
        let base: Vec<f64> = p.iter().map(|x| x.base).collect();
        let u =
            crate::ratio_ci(&crate::Summary::of(&env).unwrap(), &crate::Summary::of(&base).unwrap()).unwrap();
        let (lo, hi) = u.ci95.unwrap();
        assert!((hi - lo) / 2.0 / u.ratio > 0.2, "unpaired: {u:?}");
    }

    #[test]
    fn blocks_are_the_unit_and_one_block_uses_its_pairs() {
        // Two blocks of three pairs: the interval rests on two block means (df = 1).
        let p = pairs(&[
            (0, 2.0, 1.0),
            (0, 2.2, 1.0),
            (0, 1.8, 1.0),
            (1, 3.0, 1.0),
            (1, 3.1, 1.0),
            (1, 2.9, 1.0),
        ]);
        let r = paired_ratio(&p, 0.95).unwrap();
        assert_eq!((r.blocks, r.pairs, r.df), (2, 6, 1.0));
        let (lo, hi) = r.ci.unwrap();
        assert!(lo < 2.0 && hi > 3.0, "two blocks far apart: a wide interval {r:?}");
        // One block: its pairs give the interval.
        let one = paired_ratio(&p[..3], 0.95).unwrap();
        assert_eq!((one.blocks, one.df), (1, 2.0));
        assert!((one.ratio - (2.0f64 * 2.2 * 1.8).powf(1.0 / 3.0)).abs() < 1e-12, "geometric mean");
    }

    #[test]
    fn what_has_no_ratio_or_no_interval_says_so() {
        assert!(paired_ratio(&[], 0.95).is_none());
        assert!(paired_ratio(&pairs(&[(0, 1.0, 0.0)]), 0.95).is_none(), "a zero baseline");
        assert!(paired_ratio(&pairs(&[(0, -1.0, 1.0)]), 0.95).is_none());
        let one = paired_ratio(&pairs(&[(0, 3.0, 1.5)]), 0.95).unwrap();
        assert_eq!((one.ratio, one.ci, one.no_ci), (2.0, None, Some(NO_CI_ONE_PAIR)));
        let flat = paired_ratio(&pairs(&[(0, 2.0, 1.0), (1, 4.0, 2.0)]), 0.95).unwrap();
        assert_eq!(flat.no_ci, Some(NO_CI_NO_SPREAD));
    }

    #[test]
    fn units_needed_follow_the_spread() {
        // sd 0.05 on the log scale, ±5 %: t(0.975, n−1)·0.05/√n ≤ 0.0488 from n = 7.
        assert_eq!(units_needed(0.05, 0.05, 0.95, 100), 7);
        assert_eq!(units_needed(0.0, 0.05, 0.95, 100), 2);
        assert_eq!(units_needed(1.0, 0.05, 0.95, 50), 50, "out of reach: the cap");
        assert!(units_needed(0.05, 0.05, 0.99, 100) > 7, "a higher level needs more");
    }
}
