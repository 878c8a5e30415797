//! Pure statistics for virtperf: no I/O, no clocks, no global state.
//!
//! - [`Summary`]: n, mean, median, stdev, min, max, coefficient of variation, Student-t CI of the mean.
//! - [`ratio_ci`]: the ratio of two independent means with Fieller's confidence interval.
//! - [`mad_outliers`]: median/MAD (modified z-score) outlier flags; data is never dropped.
//! - [`jain_index`]: Jain's fairness index for N instances.

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
    /// 95 % confidence interval of the mean (Student t, n − 1 df); equal to the mean when n = 1.
    pub ci95: (f64, f64),
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
        let half = if n > 1 { t_quantile(0.95, (n - 1) as f64) * stdev / (n as f64).sqrt() } else { 0.0 };
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
            ci95: (mean - half, mean + half),
            outliers: mad_outliers(xs, OUTLIER_Z),
        })
    }

    /// Half-width of the 95 % CI.
    pub fn ci_half_width(&self) -> f64 {
        (self.ci95.1 - self.ci95.0) / 2.0
    }

    /// Variance of the mean (s² / n).
    fn var_of_mean(&self) -> f64 {
        self.stdev.powi(2) / self.n as f64
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

/// A ratio of means with its confidence interval. `ci95` is `None` when Fieller's interval is
/// unbounded (the denominator's mean is not significantly different from zero).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioCi {
    pub ratio: f64,
    pub ci95: Option<(f64, f64)>,
}

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
    let ratio = a.mean / b.mean;
    let (va, vb) = (a.var_of_mean(), b.var_of_mean());
    if va == 0.0 && vb == 0.0 {
        return Some(RatioCi { ratio, ci95: Some((ratio, ratio)) });
    }
    let df = welch_df(va, a.n, ratio * ratio * vb, b.n);
    let t = t_quantile(0.95, df);
    let t2 = t * t;
    // Quadratic in θ: θ²(b̄² − t² v_b) − 2θ ā b̄ + (ā² − t² v_a) ≤ 0
    let qa = b.mean * b.mean - t2 * vb;
    let qb = a.mean * b.mean;
    let qc = a.mean * a.mean - t2 * va;
    if qa <= 0.0 {
        return Some(RatioCi { ratio, ci95: None });
    }
    let disc = qb * qb - qa * qc;
    if disc < 0.0 {
        return Some(RatioCi { ratio, ci95: None });
    }
    let s = disc.sqrt();
    let (lo, hi) = ((qb - s) / qa, (qb + s) / qa);
    Some(RatioCi { ratio, ci95: Some((lo.min(hi), lo.max(hi))) })
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
        assert!(close(s.ci_half_width(), half, 1e-3), "{}", s.ci_half_width());
        assert!(close(s.cv, s.stdev / 5.0, 1e-12));
    }

    #[test]
    fn summary_edge_cases() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
        let one = Summary::of(&[3.0]).unwrap();
        assert_eq!((one.stdev, one.ci95), (0.0, (3.0, 3.0)));
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

    #[test]
    fn fieller_reference_example() {
        // Worked example: means 10 (va = 0.25) over 5 (vb = 0.04), both n = 10.
        // θ²(25 − t²·0.04) − 2θ·50 + (100 − t²·0.25) = 0 with t at Welch df.
        let a = Summary { n: 10, mean: 10.0, stdev: (2.5f64).sqrt(), ..Summary::of(&[10.0]).unwrap() };
        let b = Summary { n: 10, mean: 5.0, stdev: (0.4f64).sqrt(), ..Summary::of(&[5.0]).unwrap() };
        let r = ratio_ci(&a, &b).unwrap();
        let df = welch_df(0.25, 10, 4.0 * 0.04, 10);
        let t = t_quantile(0.95, df);
        let (qa, qb, qc) = (25.0 - t * t * 0.04, 50.0, 100.0 - t * t * 0.25);
        let d = (qb * qb - qa * qc).sqrt();
        let (lo, hi) = r.ci95.unwrap();
        assert!(close(lo, (qb - d) / qa, 1e-12) && close(hi, (qb + d) / qa, 1e-12));
        assert!(lo < 2.0 && hi > 2.0 && hi - 2.0 > 2.0 - lo, "Fieller's interval is skewed right");
    }

    #[test]
    fn fieller_unbounded_when_denominator_is_noise() {
        let a = Summary::of(&[1.0, 1.1, 0.9]).unwrap();
        let b = Summary::of(&[-1.0, 1.0, 0.1]).unwrap();
        assert_eq!(ratio_ci(&a, &b).unwrap().ci95, None);
        assert!(ratio_ci(&a, &Summary::of(&[0.0]).unwrap()).is_none());
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
