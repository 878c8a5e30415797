//! A campaign across hosts (`host = ["local", "b"]` on an environment): each workload's figures
//! side by side by host, every ratio to that host's own baseline. The rows are the environments as
//! written (their names less ` [host=H]`), the columns the hosts in the order the experiment
//! declared them.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};
use serde::Serialize;

use super::rows::{Overhead, ResultRow};
use super::words::{arrow, mean_text, overhead_text, WIDTH};
use virtperf_record::store::EnvRow;
use virtperf_record::store::LOCAL_HOST;

#[derive(Debug, Serialize)]
pub struct HostTable {
    pub workload: String,
    pub metric: String,
    pub unit: String,
    pub better: &'static str,
    /// Column heads: `local` is the machine that ran virtperf.
    pub hosts: Vec<String>,
    pub rows: Vec<HostRow>,
}

#[derive(Debug, Serialize)]
pub struct HostRow {
    /// The environment as written, without its host.
    pub environment: String,
    /// One per host (None: not measured there).
    pub cells: Vec<Option<HostCell>>,
}

#[derive(Debug, Serialize)]
pub struct HostCell {
    /// The environment's full name (with ` [host=H]`), as in the other tables.
    pub name: String,
    pub mean: f64,
    pub ci95: Option<[f64; 2]>,
    pub n: usize,
    /// To the same host's baseline.
    pub overhead: Option<Overhead>,
}

/// The host an environment ran on, as the report names it.
fn host_name(e: &EnvRow) -> &str {
    e.host.as_deref().unwrap_or(LOCAL_HOST)
}

/// The environment's name without its ` [host=H]` (a campaign's suffix).
fn written(e: &EnvRow) -> String {
    e.name.replacen(&format!(" [host={}]", host_name(e)), "", 1)
}

/// Empty unless the run's environments ran on more than one machine.
pub fn build(results: &[ResultRow], envs: &[EnvRow]) -> Vec<HostTable> {
    let mut hosts: Vec<String> = Vec::new();
    for e in envs {
        let h = host_name(e).to_string();
        if !hosts.contains(&h) {
            hosts.push(h);
        }
    }
    if hosts.len() < 2 {
        return Vec::new();
    }
    let mut rows_of: Vec<String> = Vec::new();
    for e in envs {
        let w = written(e);
        if !rows_of.contains(&w) {
            rows_of.push(w);
        }
    }
    let mut out: Vec<HostTable> = Vec::new();
    for r in results.iter().filter(|r| r.peer.is_none() && r.instance.is_none()) {
        if out.iter().any(|t| t.workload == r.workload && t.metric == r.metric) {
            continue;
        }
        let rows: Vec<HostRow> = rows_of
            .iter()
            .map(|w| HostRow {
                environment: w.clone(),
                cells: hosts
                    .iter()
                    .map(|h| {
                        let e = envs.iter().find(|e| written(e) == *w && host_name(e) == h)?;
                        let x = results.iter().find(|x| {
                            x.workload == r.workload
                                && x.metric == r.metric
                                && x.environment == e.name
                                && x.peer.is_none()
                                && x.instance.is_none()
                        })?;
                        Some(HostCell {
                            name: e.name.clone(),
                            mean: x.mean,
                            ci95: x.ci95,
                            n: x.n,
                            overhead: x.overhead.clone(),
                        })
                    })
                    .collect(),
            })
            .filter(|row| row.cells.iter().any(Option::is_some))
            .collect();
        out.push(HostTable {
            workload: r.workload.clone(),
            metric: r.metric.clone(),
            unit: r.unit.clone(),
            better: r.better,
            hosts: hosts.clone(),
            rows,
        });
    }
    out
}

/// The cell's text: the figure, then its ratio to the host's baseline.
pub fn cell_text(c: &HostCell, better: &str) -> String {
    let mut s = mean_text(c.mean, c.ci95, c.n);
    if let Some(o) = &c.overhead {
        s += &format!("\n{}", overhead_text(o, better));
    }
    s
}

pub fn render(ts: &[HostTable]) -> String {
    if ts.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nBy host (each host's environments against its own baseline; `local` ran virtperf):\n",
    );
    for t in ts {
        let mut tab = Table::new();
        tab.load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(WIDTH);
        let mut head =
            vec![Cell::new(format!("{} / {} ({}) {}", t.workload, t.metric, t.unit, arrow(t.better)))];
        head.extend(t.hosts.iter().map(Cell::new));
        tab.set_header(head);
        for row in &t.rows {
            let mut cells = vec![Cell::new(&row.environment)];
            cells.extend(
                row.cells.iter().map(|c| {
                    Cell::new(c.as_ref().map_or_else(|| "—".to_string(), |c| cell_text(c, t.better)))
                }),
            );
            tab.add_row(cells);
        }
        out += &tab.to_string();
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(idx: usize, name: &str, kind: &str, host: Option<&str>) -> EnvRow {
        EnvRow {
            idx,
            name: name.into(),
            kind: kind.into(),
            params: serde_json::json!({}),
            instances: 1,
            group: name.into(),
            host: host.map(str::to_string),
            baseline: kind == "native",
            own_clock: false,
        }
    }

    fn row(env: &str, mean: f64, ratio: Option<f64>) -> ResultRow {
        let mut r = crate::report::test_row(env, mean, 0.1, "lower");
        r.overhead = ratio.map(|ratio| Overhead::unpaired(ratio, Some([ratio * 0.9, ratio * 1.1]), None));
        r
    }

    #[test]
    fn one_machine_has_no_host_table() {
        let envs = [env(0, "native", "native", None), env(1, "box", "container", None)];
        assert!(build(&[row("native", 1.0, None), row("box", 2.0, Some(2.0))], &envs).is_empty());
    }

    #[test]
    fn a_campaign_lines_up_each_environment_by_host() {
        let envs = [
            env(0, "native [host=local]", "native", None),
            env(1, "native [host=b]", "native", Some("b")),
            env(2, "box [host=local]", "container", None),
            env(3, "box [host=b]", "container", Some("b")),
            env(4, "only-b", "container", Some("b")),
        ];
        let results = [
            row("native [host=local]", 10.0, None),
            row("native [host=b]", 20.0, None),
            row("box [host=local]", 11.0, Some(1.1)),
            row("box [host=b]", 30.0, Some(1.5)),
            row("only-b", 40.0, Some(2.0)),
        ];
        let ts = build(&results, &envs);
        assert_eq!(ts.len(), 1);
        let t = &ts[0];
        assert_eq!(t.hosts, ["local", "b"]);
        let got: Vec<(&str, Vec<Option<f64>>)> = t
            .rows
            .iter()
            .map(|r| (r.environment.as_str(), r.cells.iter().map(|c| c.as_ref().map(|c| c.mean)).collect()))
            .collect();
        assert_eq!(
            got,
            [
                ("native", vec![Some(10.0), Some(20.0)]),
                ("box", vec![Some(11.0), Some(30.0)]),
                ("only-b", vec![None, Some(40.0)]),
            ]
        );
        let text = render(&ts);
        assert!(text.contains("By host") && text.contains("×1.500"), "{text}");
    }
}
