//! Seed 001's view of the `disk` workload: for every phase, a matrix of file size × record size
//! per environment (iozone's surface, flattened), each cell's mean with its 95 % interval and,
//! beside the baseline, its ratio to native with Fieller's interval.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};
use serde::Serialize;

use super::rows::{Overhead, ResultRow};
use super::words::{arrow, better_str, mean_text, overhead_text};
use virtperf_record::store::CaseRow;

/// One phase's metric over one sweep of a disk workload.
#[derive(Debug, Serialize)]
pub struct DiskMatrix {
    /// The workload as the experiment names it.
    pub workload: String,
    /// Its other parameters (direct, fsync, modes...), the same in every cell.
    pub fixed: serde_json::Value,
    pub metric: String,
    pub unit: String,
    pub better: &'static str,
    /// Rows, ascending (bytes).
    pub file_sizes: Vec<u64>,
    /// Columns, ascending (bytes).
    pub record_sizes: Vec<u64>,
    pub environments: Vec<DiskMatrixEnv>,
}

#[derive(Debug, Serialize)]
pub struct DiskMatrixEnv {
    pub environment: String,
    /// `cells[i][j]`: file size i, record size j; null where the case was not run (a record
    /// larger than the file) or no trial of it succeeded.
    pub cells: Vec<Vec<Option<DiskCell>>>,
}

#[derive(Debug, Serialize)]
pub struct DiskCell {
    pub mean: f64,
    pub ci95: Option<[f64; 2]>,
    pub n: usize,
    /// Against the baseline's same cell.
    pub overhead: Option<Overhead>,
}

const SWEPT: [&str; 2] = ["file_size", "record_size"];

/// This section's name, as the workloads it shows give it (`Workload::report_section`).
pub const SECTION: &str = "disk";

/// The matrices of every disk workload run over more than one file or record size.
pub fn build(results: &[ResultRow], cases: &[CaseRow], envs: &[String]) -> Vec<DiskMatrix> {
    // Cases grouped by workload and their parameters other than the two sizes.
    let mut groups: Vec<(String, serde_json::Value, Vec<&CaseRow>)> = Vec::new();
    for c in cases.iter().filter(|c| c.record.in_section(SECTION)) {
        let mut fixed = c.params.clone();
        if let Some(o) = fixed.as_object_mut() {
            for k in SWEPT {
                o.remove(k);
            }
        }
        match groups.iter_mut().find(|g| g.0 == c.workload && g.1 == fixed) {
            Some(g) => g.2.push(c),
            None => groups.push((c.workload.clone(), fixed, vec![c])),
        }
    }
    let size = |c: &CaseRow, k: &str| c.params.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let mut out = Vec::new();
    for (workload, fixed, members) in groups.into_iter().filter(|g| g.2.len() > 1) {
        let axis = |k: &str| {
            let mut v: Vec<u64> = members.iter().map(|c| size(c, k)).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (files, records) = (axis("file_size"), axis("record_size"));
        let Some(first) = members.first() else { continue };
        for m in &first.record.metrics {
            let row = |c: &CaseRow, env: &str| {
                results.iter().find(|x| {
                    x.workload == c.label
                        && x.metric == m.name
                        && x.environment == env
                        && x.peer.is_none()
                        && x.instance.is_none()
                })
            };
            let mut environments = Vec::new();
            for env in envs {
                let cells: Vec<Vec<Option<DiskCell>>> = files
                    .iter()
                    .map(|&f| {
                        records
                            .iter()
                            .map(|&r| {
                                let c = members
                                    .iter()
                                    .find(|c| size(c, "file_size") == f && size(c, "record_size") == r)?;
                                let x = row(c, env)?;
                                Some(DiskCell {
                                    mean: x.mean,
                                    ci95: x.ci95,
                                    n: x.n,
                                    overhead: x.overhead.clone(),
                                })
                            })
                            .collect()
                    })
                    .collect();
                if cells.iter().flatten().any(Option::is_some) {
                    environments.push(DiskMatrixEnv { environment: env.clone(), cells });
                }
            }
            if environments.is_empty() {
                continue;
            }
            out.push(DiskMatrix {
                workload: workload.clone(),
                fixed: fixed.clone(),
                metric: m.name.to_string(),
                unit: m.unit.to_string(),
                better: better_str(m.better),
                file_sizes: files.clone(),
                record_sizes: records.clone(),
                environments,
            });
        }
    }
    out
}

/// `65536` → `64KiB`, `1048576` → `1MiB`, `1000` → `1000B`.
pub fn size_text(b: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    format!("{b}B")
}

/// The terminal's matrices: the throughput of each phase (IOPS and latencies are in the main
/// table and the JSON).
pub fn render(ms: &[DiskMatrix]) -> String {
    let mut out = String::new();
    for m in ms.iter().filter(|m| m.unit == "MB/s") {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
        let mut header =
            vec![Cell::new(format!("{} ({}) {}\nfile ↓ record →", m.metric, m.unit, arrow(m.better)))];
        header.extend(m.record_sizes.iter().map(|r| Cell::new(size_text(*r))));
        t.set_header(header);
        for e in &m.environments {
            for (i, f) in m.file_sizes.iter().enumerate() {
                let mut cells = vec![Cell::new(format!("{} · {}", e.environment, size_text(*f)))];
                for cell in &e.cells[i] {
                    cells.push(Cell::new(match cell {
                        None => "—".to_string(),
                        Some(c) => {
                            let mut s = mean_text(c.mean, c.ci95, c.n);
                            if let Some(o) = &c.overhead {
                                s += &format!("\n{}", overhead_text(o, m.better));
                            }
                            s
                        }
                    }));
                }
                t.add_row(cells);
            }
        }
        let fixed = m
            .fixed
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| ["direct", "fsync"].contains(&k.as_str()))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        out += &format!("\n{} — seed 001's matrix ({fixed}):\n", m.workload);
        out += &t.to_string();
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(idx: usize, f: u64, r: u64) -> CaseRow {
        CaseRow {
            idx,
            workload: "disk".into(),
            kind: "disk".into(),
            label: format!("disk [file_size={f},record_size={r}]"),
            params: serde_json::json!({"file_size": f, "record_size": r, "direct": false}),
            record: virtperf_workload::describe("disk", &serde_json::json!({})).unwrap(),
        }
    }

    fn result(env: &str, c: &CaseRow, mean: f64, ratio: Option<f64>) -> ResultRow {
        ResultRow {
            environment: env.into(),
            peer: None,
            instance: None,
            workload: c.label.clone(),
            kind: "disk".into(),
            params: c.params.clone(),
            metric: "disk_write".into(),
            unit: "MB/s".into(),
            better: "higher",
            n: 3,
            mean,
            median: mean,
            stdev: 1.0,
            min: mean,
            max: mean,
            cv: None,
            ci95: Some([mean - 1.0, mean + 1.0]),
            no_ci: None,
            outliers: 0,
            non_finite: 0,
            overhead: ratio.map(|r| Overhead::unpaired(r, Some([r - 0.1, r + 0.1]), None)),
            clock: None,
            other_clock: None,
            clock_disagrees: false,
            launches: 1,
            ci_covers: "one launch",
            ci_level: 0.95,
            variance: None,
            work: None,
            verdict: None,
            headline: false,
            family: virtperf_record::Family::Other,
        }
        .as_recorded()
    }

    #[test]
    fn cells_sit_at_their_file_and_record_size_and_carry_the_ratio() {
        let cases = vec![case(0, 1 << 20, 4096), case(1, 1 << 20, 65536), case(2, 16 << 20, 4096)];
        let results = vec![
            result("native", &cases[0], 100.0, None),
            result("native", &cases[1], 200.0, None),
            result("native", &cases[2], 300.0, None),
            result("qemu", &cases[1], 50.0, Some(0.25)),
        ];
        let ms = build(&results, &cases, &["native".into(), "qemu".into()]);
        let m = ms.iter().find(|m| m.metric == "disk_write").expect("a disk_write matrix");
        assert_eq!(m.file_sizes, [1 << 20, 16 << 20]);
        assert_eq!(m.record_sizes, [4096, 65536]);
        let native = &m.environments[0];
        assert_eq!(native.cells[0][1].as_ref().map(|c| c.mean), Some(200.0));
        assert_eq!(native.cells[1][0].as_ref().map(|c| c.mean), Some(300.0));
        assert!(native.cells[1][1].is_none(), "a case not run is an empty cell");
        let q = &m.environments[1];
        assert_eq!(q.cells[0][1].as_ref().and_then(|c| c.overhead.as_ref()).map(|o| o.ratio), Some(0.25));
        let text = render(&ms);
        assert!(text.contains("4KiB") && text.contains("16MiB") && text.contains("×0.250"), "{text}");
        // One size alone is no matrix.
        assert!(build(&results[..1], &cases[..1], &["native".into()]).is_empty());
    }
}
