//! Every trial of a run — samples, detail, CPU series — as one JSON document.

use anyhow::Result;

use super::exporter::{Exporter, Part, RunData};
use virtperf_record::store::RunRows;

pub struct SamplesJson;

impl Exporter for SamplesJson {
    fn what(&self) -> &'static str {
        "trials (JSON)"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(Part::whole(format!("{}\n", serde_json::to_string_pretty(&trials_json(run.rows))?)))
    }
}

/// Every trial of a run with its raw samples as one JSON document.
fn trials_json(rows: &RunRows) -> serde_json::Value {
    let RunRows { run_id, info, envs, cases, .. } = rows;
    let trials: Vec<serde_json::Value> = rows
        .trials
        .iter()
        .map(|t| {
            let extra = rows.detail(t.id);
            let series: Vec<serde_json::Value> =
                rows.series(t.id).iter().map(|(role, ms, ns)| serde_json::json!([role, ms, ns])).collect();
            serde_json::json!({
                "peer": t.peer_idx.map(|p| envs[p].name.clone()), "tester_cpu_ns": t.tester_cpu_ns,
                "extra": extra, "cpu_series": series,
                "trial_id": t.id, "seq": t.seq, "environment": envs[t.env_idx].name, "workload": cases[t.case_idx].label,
                "workload_name": cases[t.case_idx].workload, "workload_kind": cases[t.case_idx].kind,
                "params": cases[t.case_idx].params, "rep": t.rep, "warmup": t.warmup, "status": t.status, "reason": t.reason,
                "host_ns": t.host_ns, "guest_ns": t.guest_ns, "host_cpu_ns": t.host_cpu_ns, "guest_cpu_ns": t.guest_cpu_ns,
                "block": t.block, "launch_id": t.launch_id, "work": t.work,
                "samples": t.samples,
            })
        })
        .collect();
    serde_json::json!({
        "run_id": run_id, "name": info.name, "status": info.status, "started_at": info.started_at,
        "finished_at": info.finished_at, "manifest": info.manifest, "experiment": info.experiment, "trials": trials,
    })
}
