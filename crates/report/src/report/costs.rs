//! What an environment costs, read from the report's ratios: each headline ratio as a cost (above
//! 1 is slower whichever way the metric points), per workload family as a geometric mean with its
//! interval, and in words. The answer (terminal) and the page (html) both read it.

use std::collections::BTreeMap;

use virtperf_record::Family;

use super::rows::ResultRow;

/// A value with its interval.
type Interval = (f64, Option<[f64; 2]>);

/// A ratio as a cost: times the baseline's time, or the baseline's rate over this one's — above 1
/// is slower whichever way the metric points. The interval follows (inverted for a rate).
pub fn cost(ratio: f64, ci: Option<[f64; 2]>, better: &str) -> (f64, Option<[f64; 2]>) {
    if better == "higher" {
        (1.0 / ratio, ci.filter(|[l, _]| *l > 0.0).map(|[l, h]| [1.0 / h, 1.0 / l]))
    } else {
        (ratio, ci)
    }
}

/// One headline ratio of an environment, as a cost.
#[derive(Debug, Clone)]
pub struct CostRow {
    pub environment: String,
    pub family: Family,
    /// `workload · metric` (the metric only when the workload has several headlines).
    pub what: String,
    /// The case it was measured in (its several headline metrics share its trials).
    pub workload: String,
    /// The metric's direction (a rate is said lower or higher).
    pub better: &'static str,
    pub cost: f64,
    pub ci: Option<[f64; 2]>,
    /// The equivalence test's 90 % interval, as a cost.
    pub eq: Option<[f64; 2]>,
}

/// Every environment-level headline ratio (no peers, instances, CPU times), in report order.
pub fn cost_rows(results: &[ResultRow]) -> Vec<CostRow> {
    let several = |x: &ResultRow| {
        results.iter().filter(|y| y.workload == x.workload && y.headline).count()
            > results.iter().filter(|y| y.workload == x.workload && y.metric == x.metric).count()
    };
    results
        .iter()
        .filter(|x| x.peer.is_none() && x.instance.is_none() && x.headline)
        .filter_map(|x| {
            let o = x.overhead.as_ref().filter(|o| o.ratio.is_finite() && o.ratio > 0.0)?;
            let (c, ci) = cost(o.ratio, o.ci, x.better);
            let (_, eq) = cost(o.ratio, o.ci90, x.better);
            let what = if several(x) {
                format!("{} · {}", case_short(&x.workload), x.metric)
            } else {
                case_short(&x.workload)
            };
            Some(CostRow {
                environment: x.environment.clone(),
                family: x.family,
                what,
                workload: x.workload.clone(),
                better: x.better,
                cost: c,
                ci,
                eq,
            })
        })
        .collect()
}

/// The geometric mean of costs and its interval: each cost's interval as a half-width in log
/// space, combined as independent (root of the sum of squares over k). None when any lacks one.
pub fn geomean(items: &[Interval]) -> Interval {
    log_mean(items, |h| h.iter().map(|x| x * x).sum::<f64>().sqrt())
}

/// The mean of the costs' logs, its interval's log half-width `combine` of theirs over k.
fn log_mean(items: &[Interval], combine: fn(&[f64]) -> f64) -> Interval {
    let k = items.len().max(1) as f64;
    let centre = items.iter().map(|(c, _)| c.ln()).sum::<f64>() / k;
    let halves: Option<Vec<f64>> = items
        .iter()
        .map(|(_, ci)| ci.filter(|[l, h]| *l > 0.0 && h > l).map(|[l, h]| (h.ln() - l.ln()) / 2.0))
        .collect();
    let ci = halves.map(|h| {
        let hw = combine(&h) / k;
        [(centre - hw).exp(), (centre + hw).exp()]
    });
    (centre.exp(), ci)
}

/// The geometric mean of costs measured in the same trials (a workload's several headline
/// metrics: tcp_rr's rate and latency are reciprocals, STREAM's four kernels one run): their
/// errors move together, so the half-widths (in log space) average instead of adding in
/// quadrature — counted as independent, two reciprocals narrowed the interval by √2.
pub fn geomean_correlated(items: &[Interval]) -> Interval {
    log_mean(items, |h| h.iter().sum::<f64>())
}

/// An environment's cost on one family: the geometric mean over its workloads, the extremes.
#[derive(Debug, Clone)]
pub struct FamilyCost {
    pub environment: String,
    pub family: Family,
    pub cost: f64,
    pub ci: Option<[f64; 2]>,
    /// The equivalence interval, combined the same way.
    pub eq: Option<[f64; 2]>,
    /// Its workloads (distinct measurements).
    pub n: usize,
}

/// Per environment (report order) and family (the enum's order): each workload's headline
/// metrics first made one (correlated, [`geomean_correlated`]), then the workloads combined as
/// independent measurements ([`geomean`]).
pub fn family_costs(rows: &[CostRow], envs: &[String]) -> Vec<FamilyCost> {
    /// Each item's stated interval and its equivalence one.
    type Both = (Vec<Interval>, Vec<Interval>);
    let mut out = Vec::new();
    for e in envs {
        let mut by: BTreeMap<(Family, &str), Both> = BTreeMap::new();
        for x in rows.iter().filter(|x| x.environment == *e) {
            let w = by.entry((x.family, x.workload.as_str())).or_default();
            w.0.push((x.cost, x.ci));
            w.1.push((x.cost, x.eq));
        }
        let mut fam: BTreeMap<Family, Both> = BTreeMap::new();
        for ((family, _), (ci, eq)) in by {
            let f = fam.entry(family).or_default();
            f.0.push(geomean_correlated(&ci));
            f.1.push(geomean_correlated(&eq));
        }
        for (family, (items, eqs)) in fam {
            let (cost, ci) = geomean(&items);
            let (_, eq) = geomean(&eqs);
            out.push(FamilyCost { environment: e.clone(), family, cost, ci, eq, n: items.len() });
        }
    }
    out
}

/// `disk [file_size=16MiB,record_size=64KiB]` → `disk 16MiB,64KiB`: a swept case by its values.
pub fn case_short(w: &str) -> String {
    match w.split_once(" [") {
        Some((name, rest)) => {
            let vals: Vec<String> = rest
                .trim_end_matches(']')
                .split(',')
                .map(|kv| match kv.split_once('=') {
                    // Sizes and directions read for themselves (16MiB, out); other keys keep their name.
                    Some((k, v)) if ["file_size", "record_size", "frame_size", "direction"].contains(&k) => {
                        v.to_string()
                    }
                    _ => kv.to_string(),
                })
                .collect();
            format!("{name} {}", vals.join(","))
        }
        None => w.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_reads_the_same_way_for_times_and_rates() {
        // A time twice as long, and a rate half as high: both cost ×2.
        assert_eq!(cost(2.0, Some([1.5, 2.5]), "lower"), (2.0, Some([1.5, 2.5])));
        let (c, ci) = cost(0.5, Some([0.4, 0.625]), "higher");
        assert!((c - 2.0).abs() < 1e-12);
        let [l, h] = ci.unwrap();
        assert!((l - 1.6).abs() < 1e-12 && (h - 2.5).abs() < 1e-12);
    }

    #[test]
    fn geomean_combines_log_half_widths() {
        let (g, ci) = geomean(&[(2.0, Some([1.0, 4.0])), (8.0, Some([4.0, 16.0]))]);
        assert!((g - 4.0).abs() < 1e-9);
        // Each half-width is ln 2 in log space: combined sqrt(2)·ln 2 / 2.
        let hw = 2f64.sqrt() * 2f64.ln() / 2.0;
        let [l, h] = ci.unwrap();
        assert!((l - 4.0 * (-hw).exp()).abs() < 1e-9 && (h - 4.0 * hw.exp()).abs() < 1e-9);
        assert_eq!(geomean(&[(2.0, None), (3.0, Some([2.0, 4.0]))]).1, None);
    }

    #[test]
    fn costs_group_by_family_per_environment() {
        let mut r = crate::report::summary_test_report();
        let row = |env: &str, kind: &str, metric: &str, ratio: f64| {
            ResultRow {
                workload: kind.into(),
                kind: kind.into(),
                metric: metric.into(),
                overhead: Some(crate::report::Overhead::unpaired(
                    ratio,
                    Some([ratio * 0.9, ratio * 1.1]),
                    None,
                )),
                ..crate::report::test_row(env, 1.0, 0.1, "lower")
            }
            .as_recorded()
        };
        r.results = vec![
            row("container", "pde", "pde_time", 1.0),
            row("container", "syscall", "syscall_time", 9.0),
            row("container", "memcpy", "memcpy_time", 2.0),
            row("container", "memcpy", "host_cpu_time", 9.0),
        ];
        let rows = cost_rows(&r.results);
        assert_eq!(rows.len(), 3, "the non-headline metric is left out: {rows:?}");
        let f = family_costs(&rows, &["container".into()]);
        assert_eq!(f.len(), 3, "{f:?}");
        let sys = f.iter().find(|x| x.family == Family::System).unwrap();
        assert!((sys.cost - 9.0).abs() < 1e-9 && sys.n == 1);
        assert_eq!(f.iter().find(|x| x.family == Family::Memory).unwrap().n, 1);
    }

    /// tcp_rr's rate and latency are reciprocals of the same trials: one measurement, its
    /// interval not narrowed by counting it twice; two workloads are two.
    #[test]
    fn a_workloads_several_metrics_count_once_in_its_family() {
        let mut r = crate::report::summary_test_report();
        let row = |workload: &str, metric: &str, better: &'static str, ratio: f64| {
            ResultRow {
                workload: workload.into(),
                kind: workload.split(':').next().unwrap().into(),
                metric: metric.into(),
                overhead: Some(crate::report::Overhead::unpaired(
                    ratio,
                    Some([ratio / 1.1, ratio * 1.1]),
                    None,
                )),
                ..crate::report::test_row("container", 1.0, 0.1, better)
            }
            .as_recorded()
        };
        r.results = vec![
            row("tcp_rr", "tcp_rr_rate", "higher", 1.0 / 1.018),
            row("tcp_rr", "tcp_rr_latency", "lower", 1.018),
        ];
        let rows = cost_rows(&r.results);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let f = family_costs(&rows, &["container".into()]);
        let net = f.iter().find(|x| x.family == Family::Network).expect("network");
        assert_eq!(net.n, 1, "one workload");
        let [l, h] = net.ci.unwrap();
        assert!((net.cost - 1.018).abs() < 1e-9, "{}", net.cost);
        assert!(
            ((h / l).ln() / 2.0 - 1.1f64.ln()).abs() < 1e-9,
            "the one workload's width, not √2 narrower: {l} {h}"
        );
        // A second workload narrows it as an independent measurement does.
        r.results.push(row("tcp_rr:size=1k", "tcp_rr_latency", "lower", 1.018));
        let f = family_costs(&cost_rows(&r.results), &["container".into()]);
        let net = f.iter().find(|x| x.family == Family::Network).expect("network");
        let [l, h] = net.ci.unwrap();
        assert_eq!(net.n, 2);
        assert!(((h / l).ln() / 2.0 - 1.1f64.ln() / 2f64.sqrt()).abs() < 1e-9, "{l} {h}");
    }
}
