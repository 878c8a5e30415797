//! Pure statistics for virtperf: no I/O, no clocks, no global state.
//!
//! - [`Summary`]: n, mean, median, stdev, min, max, coefficient of variation, Student-t CI of the mean.
//! - [`ratio_ci`]: the ratio of two independent means with Fieller's confidence interval.
//! - [`mad_outliers`]: median/MAD (modified z-score) outlier flags; data is never dropped.
//! - [`jain_index`]: Jain's fairness index for N instances.
//! - [`Nested`]: repetitions grouped by launch (Kalibera & Jones' two-level model): mean of launch
//!   means, its CI from the launches' spread, the variance components.
//! - [`Estimate`], [`ratio_ci_of`]: a mean with its variance and degrees of freedom, from either
//!   level, and Fieller's ratio of two of them.
//! - [`sequential`]: precision mode's stopping rules and where the next launch or repetition goes.
//! - [`paired`]: the overhead from ratios of trials that ran side by side (a case group): the
//!   geometric-mean ratio over launch blocks, with its interval.
//! - [`sim`]: a simulated precision run under the noise real runs have (bursts of the whole host,
//!   contaminated trials, a shared baseline, a budget), to check what the report states.

pub mod changepoint;
pub mod paired;
pub mod sequential;
pub mod sim;

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Modified z-score above which a sample is flagged as an outlier (Iglewicz & Hoaglin).
pub const OUTLIER_Z: f64 = 3.5;

/// Two-sided Student-t quantile: the `t` such that P(|T| <= t) = `level` with `df` degrees of freedom.
/// `df` may be fractional (Welch); `df = inf` gives the normal quantile.
pub fn t_quantile(level: f64, df: f64) -> f64 {
    let p = 0.5 + level / 2.0;
    if !df.is_finite() || df > 1e7 {
        return normal_quantile(p);
    }
    match StudentsT::new(0.0, 1.0, df.max(1e-3)) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::NAN,
    }
}

fn normal_quantile(p: f64) -> f64 {
    match statrs::distribution::Normal::new(0.0, 1.0) {
        Ok(n) => n.inverse_cdf(p),
        Err(_) => f64::NAN,
    }
}

/// Why a mean has no interval: it was measured once.
pub const NO_CI_ONE_SAMPLE: &str =
    "n = 1: a 95 % CI needs at least 2 repetitions (5 or more for a useful one)";
/// Why a mean has no interval: every sample is the same value (fixed by the parameters, say).
pub const NO_CI_NO_VARIATION: &str = "all samples are equal: no interval to estimate";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n − 1 denominator); 0 when n = 1.
    pub stdev: f64,
    pub min: f64,
    pub max: f64,
    /// stdev / |mean|; NaN when the mean is 0.
    pub cv: f64,
    /// 95 % confidence interval of the mean (Student t, n − 1 df). None when it would claim a
    /// precision nobody measured: one sample, or samples all identical (see [`Summary::no_ci_reason`]).
    pub ci95: Option<(f64, f64)>,
    /// Indices (into the input) of samples flagged by [`mad_outliers`].
    pub outliers: Vec<usize>,
}

impl Summary {
    /// Summarises `xs`; `None` when it is empty or holds a non-finite value.
    pub fn of(xs: &[f64]) -> Option<Summary> {
        if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let n = xs.len();
        let mean = kahan_sum(xs) / n as f64;
        let var =
            if n > 1 { xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
        let stdev = var.sqrt();
        let ci95 = (n > 1 && stdev > 0.0).then(|| {
            let half = t_quantile(0.95, (n - 1) as f64) * stdev / (n as f64).sqrt();
            (mean - half, mean + half)
        });
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Summary {
            n,
            mean,
            median: median(xs),
            stdev,
            min,
            max,
            cv: if mean != 0.0 { stdev / mean.abs() } else { f64::NAN },
            ci95,
            outliers: mad_outliers(xs, OUTLIER_Z),
        })
    }

    /// Half-width of the 95 % CI (None without one).
    pub fn ci_half_width(&self) -> Option<f64> {
        self.ci95.map(|(l, h)| (h - l) / 2.0)
    }

    /// Why there is no interval: one sample, or no variation among the samples.
    pub fn no_ci_reason(&self) -> Option<&'static str> {
        match self.ci95 {
            Some(_) => None,
            None if self.n < 2 => Some(NO_CI_ONE_SAMPLE),
            None => Some(NO_CI_NO_VARIATION),
        }
    }

    /// Variance of the mean (s² / n).
    fn var_of_mean(&self) -> f64 {
        self.stdev.powi(2) / self.n as f64
    }

    /// The mean as an [`Estimate`]: s² / n with n − 1 degrees of freedom (repetitions taken as
    /// independent: what the interval of one launch's repetitions covers).
    pub fn estimate(&self) -> Estimate {
        Estimate { mean: self.mean, var_of_mean: self.var_of_mean(), df: (self.n as f64 - 1.0).max(0.0) }
    }
}

/// A mean, the variance of that mean, and the degrees of freedom its variance has: what a
/// confidence interval and Fieller's ratio need, whichever level of repetition it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub var_of_mean: f64,
    pub df: f64,
}

impl Estimate {
    /// The 95 % Student-t interval; None without degrees of freedom or spread.
    pub fn ci95(&self) -> Option<(f64, f64)> {
        self.ci_at(0.95)
    }
    /// The Student-t interval at `level`; None without degrees of freedom or spread.
    pub fn ci_at(&self, level: f64) -> Option<(f64, f64)> {
        (self.df >= 1.0 && self.var_of_mean > 0.0 && self.var_of_mean.is_finite()).then(|| {
            let half = t_quantile(level, self.df) * self.var_of_mean.sqrt();
            (self.mean - half, self.mean + half)
        })
    }
    /// Why there is no interval: one value (or one launch), or no spread.
    pub fn no_ci_reason(&self) -> Option<&'static str> {
        if self.df < 1.0 {
            Some(NO_CI_ONE_SAMPLE)
        } else if self.var_of_mean <= 0.0 {
            Some(NO_CI_NO_VARIATION)
        } else {
            None
        }
    }
}

/// Repetitions grouped by the launch that ran them: Kalibera & Jones' two-level model
/// ("Rigorous benchmarking in reasonable time", ISMM 2013). The mean is the mean of the launch
/// means; its interval comes from the spread of those means (t with L − 1 degrees of freedom), so it
/// covers what changes from one launch of the environment to the next (memory placement, page
/// backing, vCPU placement, device set-up), not only the noise within one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Nested {
    /// Launches (groups) with at least one repetition.
    pub launches: usize,
    /// Repetitions in all.
    pub trials: usize,
    /// Mean of the launch means.
    pub mean: f64,
    /// S²₂: the sample variance of the launch means.
    pub var_of_launch_means: f64,
    /// Variance component between launches, T²₂ = S²₂ − S²₁ / n̄ (≥ 0; n̄ the harmonic mean of
    /// the launches' sizes).
    pub var_launch: f64,
    /// Variance component within a launch, T²₁ = S²₁ (pooled over the launches).
    pub var_trial: f64,
}

impl Nested {
    /// The model of `groups` (one list of values per launch; empty lists are ignored). None
    /// without a value or with a non-finite one.
    pub fn of(groups: &[Vec<f64>]) -> Option<Nested> {
        let groups: Vec<&Vec<f64>> = groups.iter().filter(|g| !g.is_empty()).collect();
        if groups.is_empty() || groups.iter().any(|g| g.iter().any(|x| !x.is_finite())) {
            return None;
        }
        let means: Vec<f64> = groups.iter().map(|g| kahan_sum(g) / g.len() as f64).collect();
        let l = means.len();
        let mean = kahan_sum(&means) / l as f64;
        let var_of_launch_means =
            if l > 1 { means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (l - 1) as f64 } else { 0.0 };
        let (ss, df): (f64, usize) = groups.iter().zip(&means).fold((0.0, 0), |(ss, df), (g, m)| {
            (ss + g.iter().map(|x| (x - m).powi(2)).sum::<f64>(), df + g.len() - 1)
        });
        let var_trial = if df > 0 { ss / df as f64 } else { 0.0 };
        let n_bar = l as f64 / groups.iter().map(|g| 1.0 / g.len() as f64).sum::<f64>();
        let var_launch = (var_of_launch_means - var_trial / n_bar).max(0.0);
        Some(Nested {
            launches: l,
            trials: groups.iter().map(|g| g.len()).sum(),
            mean,
            var_of_launch_means,
            var_launch,
            var_trial,
        })
    }

    /// The mean of launch means as an [`Estimate`]: S²₂ / L with L − 1 degrees of freedom.
    pub fn estimate(&self) -> Estimate {
        Estimate {
            mean: self.mean,
            var_of_mean: self.var_of_launch_means / self.launches as f64,
            df: (self.launches as f64 - 1.0).max(0.0),
        }
    }

    /// The share of the variance that lies between launches (0 to 1); None when there is none.
    pub fn launch_share(&self) -> Option<f64> {
        let total = self.var_launch + self.var_trial;
        (total > 0.0 && self.launches > 1).then(|| self.var_launch / total)
    }
}

fn kahan_sum(xs: &[f64]) -> f64 {
    let (mut sum, mut c) = (0.0f64, 0.0f64);
    for &x in xs {
        let y = x - c;
        let t = sum + y;
        c = (t - sum) - y;
        sum = t;
    }
    sum
}

/// Median (mean of the two middle values for even n). Panics never; NaN for an empty slice.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Indices of samples whose modified z-score `0.6745 |x − median| / MAD` exceeds `threshold`.
/// When MAD is 0 (more than half the samples identical) nothing is flagged: the score is undefined.
pub fn mad_outliers(xs: &[f64], threshold: f64) -> Vec<usize> {
    if xs.len() < 3 {
        return Vec::new();
    }
    let med = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    let mad = median(&dev);
    if mad == 0.0 || !mad.is_finite() {
        return Vec::new();
    }
    dev.iter().enumerate().filter(|(_, d)| 0.6745 * **d / mad > threshold).map(|(i, _)| i).collect()
}

/// A ratio of means with its confidence interval. `ci95` is `None` when there is none to give,
/// and `no_ci` says why: Fieller's interval is unbounded (the denominator's mean is not
/// significantly different from zero), or a side has no interval of its own (one sample).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioCi {
    pub ratio: f64,
    pub ci95: Option<(f64, f64)>,
    pub no_ci: Option<&'static str>,
}

/// Why a ratio has no interval: Fieller's is unbounded.
pub const NO_CI_UNBOUNDED: &str = "unbounded: the baseline's mean cannot be told apart from zero";

/// Welch–Satterthwaite degrees of freedom for `va + vb` where `va = s_a²/n_a`, `vb = s_b²/n_b`.
pub fn welch_df(va: f64, na: usize, vb: f64, nb: usize) -> f64 {
    let num = (va + vb).powi(2);
    let den = if na > 1 { va * va / (na - 1) as f64 } else { 0.0 }
        + if nb > 1 { vb * vb / (nb - 1) as f64 } else { 0.0 };
    if den == 0.0 {
        f64::INFINITY
    } else {
        num / den
    }
}

/// [`welch_df`] from each variance's own degrees of freedom (a launch-level variance has L − 1).
pub fn welch_df_of(va: f64, dfa: f64, vb: f64, dfb: f64) -> f64 {
    let num = (va + vb).powi(2);
    let den = if dfa > 0.0 { va * va / dfa } else { 0.0 } + if dfb > 0.0 { vb * vb / dfb } else { 0.0 };
    if den == 0.0 {
        f64::INFINITY
    } else {
        num / den
    }
}

/// Ratio `a.mean / b.mean` of two independent samples with Fieller's 95 % interval.
///
/// Fieller: the set of θ for which `a − θ b` is not significantly different from 0, i.e.
/// `(ā − θ b̄)² ≤ t² (v_a + θ² v_b)`, with `v` the variances of the means and `t` the Student
/// quantile at the Welch–Satterthwaite degrees of freedom of `v_a + r² v_b` (r the point ratio).
/// Unlike the delta method it stays correct when the denominator is noisy, and it says so
/// (unbounded) when the denominator cannot be told apart from zero.
pub fn ratio_ci(a: &Summary, b: &Summary) -> Option<RatioCi> {
    if b.mean == 0.0 {
        return None;
    }
    // A side without an interval of its own (one sample, or samples all equal) would lend the
    // ratio a precision nobody measured.
    if let Some(why) = a.no_ci_reason().or(b.no_ci_reason()) {
        return Some(RatioCi { ratio: a.mean / b.mean, ci95: None, no_ci: Some(why) });
    }
    ratio_ci_of(&a.estimate(), &b.estimate())
}

/// [`ratio_ci`] of two [`Estimate`]s (from either level of repetition): Fieller's interval with the
/// Welch–Satterthwaite degrees of freedom of `v_a + r² v_b` from each side's own.
pub fn ratio_ci_of(a: &Estimate, b: &Estimate) -> Option<RatioCi> {
    ratio_ci_at(a, b, 0.95)
}

/// [`ratio_ci_of`] at another confidence level (`0.95` for 95 %).
pub fn ratio_ci_at(a: &Estimate, b: &Estimate, level: f64) -> Option<RatioCi> {
    if b.mean == 0.0 {
        return None;
    }
    let ratio = a.mean / b.mean;
    let none = |why| Some(RatioCi { ratio, ci95: None, no_ci: Some(why) });
    if a.df < 1.0 || b.df < 1.0 {
        return none(NO_CI_ONE_SAMPLE);
    }
    if a.var_of_mean <= 0.0 || b.var_of_mean <= 0.0 {
        return none(NO_CI_NO_VARIATION);
    }
    let (va, vb) = (a.var_of_mean, b.var_of_mean);
    let df = welch_df_of(va, a.df, ratio * ratio * vb, b.df);
    let t = t_quantile(level, df);
    let t2 = t * t;
    // Quadratic in θ: θ²(b̄² − t² v_b) − 2θ ā b̄ + (ā² − t² v_a) ≤ 0
    let qa = b.mean * b.mean - t2 * vb;
    let qb = a.mean * b.mean;
    let qc = a.mean * a.mean - t2 * va;
    if qa <= 0.0 {
        return none(NO_CI_UNBOUNDED);
    }
    let disc = qb * qb - qa * qc;
    if disc < 0.0 {
        return none(NO_CI_UNBOUNDED);
    }
    let s = disc.sqrt();
    let (lo, hi) = ((qb - s) / qa, (qb + s) / qa);
    Some(RatioCi { ratio, ci95: Some((lo.min(hi), lo.max(hi))), no_ci: None })
}

/// Jain's fairness index `(Σx)² / (n Σx²)`: 1 when all equal, 1/n when one takes everything.
pub fn jain_index(xs: &[f64]) -> Option<f64> {
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || sq == 0.0 {
        return None;
    }
    let s: f64 = xs.iter().sum();
    Some(s * s / (xs.len() as f64 * sq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_published_tables() {
        // Two-sided 95 % critical values (NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
        let table = [
            (1.0, 12.706),
            (2.0, 4.303),
            (3.0, 3.182),
            (4.0, 2.776),
            (5.0, 2.571),
            (10.0, 2.228),
            (20.0, 2.086),
            (30.0, 2.042),
            (60.0, 2.000),
            (100.0, 1.984),
            (999.0, 1.962),
            (f64::INFINITY, 1.960),
        ];
        for (df, t) in table {
            let got = t_quantile(0.95, df);
            assert!(close(got, t, 0.0005), "df={df}: got {got}, table {t}");
        }
        // 99 % two-sided at df = 10: 3.169
        assert!(close(t_quantile(0.99, 10.0), 3.169, 0.0005));
    }

    #[test]
    fn summary_of_known_data() {
        // 2,4,4,4,5,5,7,9: mean 5, sample stdev sqrt(32/7)
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0, 1e-12));
        assert!(close(s.median, 4.5, 1e-12));
        assert!(close(s.stdev, (32.0f64 / 7.0).sqrt(), 1e-12));
        assert_eq!((s.min, s.max), (2.0, 9.0));
        let half = 2.365 * s.stdev / 8f64.sqrt();
        assert!(close(s.ci_half_width().unwrap(), half, 1e-3), "{:?}", s.ci_half_width());
        assert!(close(s.cv, s.stdev / 5.0, 1e-12));
    }

    #[test]
    fn summary_edge_cases() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
        let one = Summary::of(&[3.0]).unwrap();
        assert_eq!((one.stdev, one.ci95), (0.0, None), "n = 1 has no interval");
        assert_eq!(one.no_ci_reason(), Some(NO_CI_ONE_SAMPLE));
        let same = Summary::of(&[4.0, 4.0, 4.0]).unwrap();
        assert_eq!((same.ci95, same.no_ci_reason()), (None, Some(NO_CI_NO_VARIATION)));
        let two = Summary::of(&[1.0, 3.0]).unwrap();
        // t(0.975, 1) = 12.706, s = √2, n = 2: half-width 12.706.
        assert!(close(two.ci_half_width().unwrap(), 12.706, 1e-3));
        assert_eq!(two.no_ci_reason(), None);
        assert!(Summary::of(&[0.0, 0.0]).unwrap().cv.is_nan());
    }

    #[test]
    fn outliers_are_flagged_not_dropped() {
        let xs = [10.0, 10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 50.0];
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.outliers, vec![7]);
        assert_eq!(s.n, 8);
        assert!(mad_outliers(&[1.0, 1.0, 1.0, 9.0], 3.5).is_empty(), "MAD = 0 flags nothing");
        assert!(mad_outliers(&[1.0, 100.0], 3.5).is_empty());
    }

    #[test]
    fn fieller_agrees_with_delta_method_when_precise() {
        // Large n, small CV: Fieller → r ± z r sqrt(cv_a²/n + cv_b²/n).
        let a: Vec<f64> = (0..1000).map(|i| 110.0 + ((i * 37) % 11) as f64 * 0.1 - 0.5).collect();
        let b: Vec<f64> = (0..1000).map(|i| 100.0 + ((i * 53) % 13) as f64 * 0.1 - 0.6).collect();
        let (sa, sb) = (Summary::of(&a).unwrap(), Summary::of(&b).unwrap());
        let r = ratio_ci(&sa, &sb).unwrap();
        let rel = ((sa.stdev / sa.mean).powi(2) / 1000.0 + (sb.stdev / sb.mean).powi(2) / 1000.0).sqrt();
        let half = 1.96 * r.ratio * rel;
        let (lo, hi) = r.ci95.unwrap();
        assert!(close(r.ratio, sa.mean / sb.mean, 1e-12));
        assert!(close(lo, r.ratio - half, 1e-4), "{lo} vs {}", r.ratio - half);
        assert!(close(hi, r.ratio + half, 1e-4), "{hi} vs {}", r.ratio + half);
    }

    use crate::sim::Rng;

    /// What a ratio CI promises, checked by simulation rather than by re-deriving its formula:
    /// over many experiments with a known true ratio, the 95 % interval covers it about 95 % of
    /// the time — also when the denominator is noisy (where the delta method under-covers), and
    /// it is skewed away from zero as Fieller's must be.
    #[test]
    fn fieller_covers_the_true_ratio_95_percent_of_the_time() {
        let mut rng = Rng(2544);
        for (ma, sa, mb, sb, n) in
            [(10.0, 1.0, 5.0, 0.5, 10), (10.0, 2.0, 4.0, 1.5, 6), (3.0, 0.1, 2.0, 0.4, 30)]
        {
            let truth = ma / mb;
            let (mut covered, mut total, mut right_skewed) = (0, 0, 0);
            for _ in 0..4000 {
                let a: Vec<f64> = (0..n).map(|_| rng.normal(ma, sa)).collect();
                let b: Vec<f64> = (0..n).map(|_| rng.normal(mb, sb)).collect();
                let r = ratio_ci(&Summary::of(&a).unwrap(), &Summary::of(&b).unwrap()).unwrap();
                let Some((lo, hi)) = r.ci95 else { continue };
                total += 1;
                covered += usize::from(lo <= truth && truth <= hi);
                right_skewed += usize::from(hi - r.ratio > r.ratio - lo);
            }
            let cov = covered as f64 / total as f64;
            // Binomial standard error at 4000 draws is 0.0034: ±0.015 is over 4 of them.
            assert!((cov - 0.95).abs() < 0.015, "coverage {cov:.4} for {ma}/{mb} (sd {sa}, {sb}, n {n})");
            assert!(right_skewed * 10 > total * 9, "Fieller's interval leans away from zero");
        }
    }

    #[test]
    fn fieller_matches_a_hand_computed_case() {
        // a = 9, 10, 11 (mean 10, s² 1), b = 4, 5, 6 (mean 5, s² 1), n = 3: v_a = v_b = 1/3.
        // Welch df for v_a + 4 v_b (r = 2): (5/3)² / ((1/9 + 16/9) / 2) = 2.941176…
        // t(0.975, 2.941176) = 3.218759 (SciPy's stats.t.ppf, outside this crate); Fieller's
        // quadratic θ²(25 − t²/3) − 2·50 θ + (100 − t²/3) = 0 has the roots 1.369688 and 3.271430.
        let r = ratio_ci(&Summary::of(&[9.0, 10.0, 11.0]).unwrap(), &Summary::of(&[4.0, 5.0, 6.0]).unwrap())
            .unwrap();
        let (lo, hi) = r.ci95.unwrap();
        assert!(close(r.ratio, 2.0, 1e-12));
        assert!(close(lo, 1.369688, 1e-5) && close(hi, 3.271430, 1e-5), "[{lo}, {hi}]");
    }

    #[test]
    fn fieller_unbounded_when_denominator_is_noise() {
        let a = Summary::of(&[1.0, 1.1, 0.9]).unwrap();
        let b = Summary::of(&[-1.0, 1.0, 0.1]).unwrap();
        let r = ratio_ci(&a, &b).unwrap();
        assert_eq!((r.ci95, r.no_ci), (None, Some(NO_CI_UNBOUNDED)));
        assert!(ratio_ci(&a, &Summary::of(&[0.0]).unwrap()).is_none());
    }

    #[test]
    fn a_ratio_of_single_samples_has_no_interval() {
        // A quick RFC 2544 cell: measured once on each side.
        let (a, b) = (Summary::of(&[104_532.0]).unwrap(), Summary::of(&[427_896.0]).unwrap());
        let r = ratio_ci(&a, &b).unwrap();
        assert!(close(r.ratio, 0.244, 1e-3));
        assert_eq!((r.ci95, r.no_ci), (None, Some(NO_CI_ONE_SAMPLE)));
        let many = Summary::of(&[1.0, 1.2, 0.9, 1.1]).unwrap();
        assert_eq!(ratio_ci(&many, &b).unwrap().no_ci, Some(NO_CI_ONE_SAMPLE), "either side");
        let flat = Summary::of(&[2.0, 2.0, 2.0]).unwrap();
        let r = ratio_ci(&flat, &Summary::of(&[1.0, 1.0]).unwrap()).unwrap();
        assert_eq!((r.ratio, r.ci95, r.no_ci), (2.0, None, Some(NO_CI_NO_VARIATION)));
    }

    #[test]
    fn nested_model_matches_a_hand_computed_case() {
        // Three launches of two repetitions: means 2, 4, 9 → grand mean 5, S²₂ = 13; within:
        // (1, 3), (4, 4), (8, 10) → S²₁ = (2 + 0 + 2) / 3 = 4/3; T²₂ = 13 − (4/3)/2 = 12.333….
        let n = Nested::of(&[vec![1.0, 3.0], vec![4.0, 4.0], vec![8.0, 10.0], vec![]]).unwrap();
        assert_eq!((n.launches, n.trials), (3, 6));
        assert!(close(n.mean, 5.0, 1e-12) && close(n.var_of_launch_means, 13.0, 1e-12));
        assert!(close(n.var_trial, 4.0 / 3.0, 1e-12) && close(n.var_launch, 13.0 - 2.0 / 3.0, 1e-12));
        let e = n.estimate();
        assert!(close(e.var_of_mean, 13.0 / 3.0, 1e-12) && e.df == 2.0);
        // t(0.975, 2) = 4.303: half-width 4.303 × √(13/3) = 8.957.
        let (lo, hi) = e.ci95().unwrap();
        assert!(close((hi - lo) / 2.0, 4.3027 * (13.0f64 / 3.0).sqrt(), 1e-3), "[{lo}, {hi}]");
        assert!(close(n.launch_share().unwrap(), 12.333_333 / (12.333_333 + 1.333_333), 1e-5));
        // One launch: no launch-level interval; the trial-level one is Summary's.
        let one = Nested::of(&[vec![1.0, 2.0, 3.0]]).unwrap();
        assert_eq!((one.launches, one.estimate().ci95(), one.launch_share()), (1, None, None));
        assert!(Nested::of(&[vec![], vec![]]).is_none() && Nested::of(&[vec![f64::NAN]]).is_none());
    }

    #[test]
    fn a_summarys_estimate_gives_the_same_ratio_interval() {
        let (a, b) = (Summary::of(&[9.0, 10.0, 11.0]).unwrap(), Summary::of(&[4.0, 5.0, 6.0]).unwrap());
        assert_eq!(ratio_ci(&a, &b), ratio_ci_of(&a.estimate(), &b.estimate()));
        let (x, y) = (a.estimate().ci95().unwrap(), a.ci95.unwrap());
        assert!(close(x.0, y.0, 1e-12) && close(x.1, y.1, 1e-12), "{x:?} vs {y:?}");
    }

    /// What the two-level model is for: with a real launch-to-launch effect, the interval of
    /// repetitions taken as independent covers the environment's true mean far less than 95 % of
    /// the time, the launch-level one about 95 %.
    #[test]
    fn launch_level_intervals_cover_where_repetition_level_ones_do_not() {
        let mut rng = Rng(23);
        let (mut naive, mut nested, runs) = (0, 0, 4000);
        for _ in 0..runs {
            let groups: Vec<Vec<f64>> = (0..5)
                .map(|_| {
                    let launch = rng.normal(100.0, 2.0);
                    (0..10).map(|_| rng.normal(launch, 1.0)).collect()
                })
                .collect();
            let all: Vec<f64> = groups.iter().flatten().copied().collect();
            let (lo, hi) = Summary::of(&all).unwrap().ci95.unwrap();
            naive += usize::from(lo <= 100.0 && 100.0 <= hi);
            let (lo, hi) = Nested::of(&groups).unwrap().estimate().ci95().unwrap();
            nested += usize::from(lo <= 100.0 && 100.0 <= hi);
        }
        let (naive, nested) = (naive as f64 / runs as f64, nested as f64 / runs as f64);
        assert!((nested - 0.95).abs() < 0.015, "launch-level coverage {nested}");
        assert!(naive < 0.6, "repetitions taken as independent cover only {naive}");
    }

    #[test]
    fn jain() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        assert!(close(jain_index(&[1.0, 0.0, 0.0, 0.0]).unwrap(), 0.25, 1e-12));
        // Seed 000: 4 VMs loaded 60+50+60+60 Mb/s
        assert!(close(jain_index(&[60.0, 50.0, 60.0, 60.0]).unwrap(), 0.99436, 1e-5));
        assert_eq!(jain_index(&[]), None);
    }
}
