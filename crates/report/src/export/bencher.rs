//! The run in Bencher Metric Format (BMF, <https://bencher.dev/docs/reference/bencher-metric-format>):
//! the JSON that Bencher's `json` adapter reads and that other dashboards can take as is —
//! `{benchmark: {measure: {value, lower_value, upper_value}}}`. A benchmark is one environment ×
//! workload (with its peer or instance), a measure one metric (its mean with the 95 % interval),
//! and, for environments with a baseline, `METRIC overhead` (the ratio to the baseline with the
//! interval the report states). Measures are at most 64 characters (Bencher's limit): a longer
//! metric name is cut, keeping its end.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::exporter::{Exporter, Part, RunData};
use crate::report::Report;

pub struct BencherJson;

#[derive(Debug, Serialize, PartialEq)]
pub struct Metric {
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upper_value: Option<f64>,
}

impl Metric {
    fn of(value: f64, ci: Option<[f64; 2]>) -> Metric {
        let ci = ci.filter(|[l, h]| l.is_finite() && h.is_finite());
        Metric { value, lower_value: ci.map(|c| c[0]), upper_value: ci.map(|c| c[1]) }
    }
}

/// Bencher's longest measure name.
const MEASURE_MAX: usize = 64;

fn measure(name: &str) -> String {
    let n = name.chars().count();
    if n <= MEASURE_MAX {
        name.to_string()
    } else {
        format!("…{}", name.chars().skip(n - (MEASURE_MAX - 1)).collect::<String>())
    }
}

/// The BMF document of a report: benchmark → measure → metric. Non-finite values are left out
/// (BMF's values are JSON numbers).
pub fn bmf(r: &Report) -> BTreeMap<String, BTreeMap<String, Metric>> {
    let mut out: BTreeMap<String, BTreeMap<String, Metric>> = BTreeMap::new();
    for row in &r.results {
        let mut bench = format!("{} / {}", row.environment, row.workload);
        if let Some(p) = &row.peer {
            bench += &format!(" → {p}");
        }
        if let Some(i) = row.instance {
            bench += &format!(" #{i}");
        }
        let measures = out.entry(bench).or_default();
        if row.mean.is_finite() {
            measures.insert(measure(&row.metric), Metric::of(row.mean, row.ci95));
        }
        if let Some(o) = row.overhead.as_ref().filter(|o| o.ratio.is_finite()) {
            measures.insert(measure(&format!("{} overhead", row.metric)), Metric::of(o.ratio, o.ci));
        }
    }
    out.retain(|_, m| !m.is_empty());
    out
}

impl Exporter for BencherJson {
    fn what(&self) -> &'static str {
        "Bencher metrics (BMF JSON)"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(Part::whole(format!("{}\n", serde_json::to_string_pretty(&bmf(run.report))?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_a_measure_of_its_benchmark_with_the_interval() {
        let mut r = crate::report::summary_test_report();
        let base = crate::report::test_row("native", 10.0, 0.2, "lower");
        let mut c = crate::report::test_row("container", 12.0, 0.2, "lower");
        c.overhead = Some(crate::report::Overhead::unpaired(1.2, Some([1.15, 1.25]), None));
        let mut long = crate::report::test_row("container", 1.0, 0.0, "lower");
        long.metric = "m".repeat(80);
        long.ci95 = None;
        r.results = vec![base, c, long];
        let doc = serde_json::to_value(bmf(&r)).unwrap();
        let n = &doc["native / w"]["m"];
        assert_eq!(n["value"], 10.0);
        assert!(n["lower_value"].as_f64().unwrap() < 10.0 && n["upper_value"].as_f64().unwrap() > 10.0);
        assert_eq!(doc["container / w"]["m overhead"]["value"], 1.2);
        assert_eq!(doc["container / w"]["m overhead"]["upper_value"], 1.25);
        // A name past 64 characters keeps its end; no interval: no bounds (value is required).
        let cut: Vec<&String> =
            doc["container / w"].as_object().unwrap().keys().filter(|k| k.starts_with('…')).collect();
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].chars().count(), MEASURE_MAX);
        assert!(doc["container / w"][cut[0].as_str()].get("lower_value").is_none());
        // The shape Bencher's schema requires: objects of objects of {value: number}.
        for (_, measures) in doc.as_object().unwrap() {
            for (_, m) in measures.as_object().unwrap() {
                assert!(m["value"].is_number());
            }
        }
    }
}
