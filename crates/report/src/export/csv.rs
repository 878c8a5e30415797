//! Every raw sample of a run as CSV: one row per sample, failed trials as a row without one.

use std::io::Write;

use anyhow::Result;

use super::exporter::{Exporter, Part, RunData};
use virtperf_record::store::RunRows;

pub struct SamplesCsv;

impl Exporter for SamplesCsv {
    fn what(&self) -> &'static str {
        "samples (CSV)"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        let mut buf = Vec::new();
        write_csv(run.rows, &mut buf)?;
        Ok(Part::whole(buf))
    }
}

/// Every raw sample of a run (and every failed trial) as CSV.
fn write_csv(rows: &RunRows, w: &mut dyn Write) -> Result<()> {
    let (run_id, envs, cases) = (rows.run_id, &rows.envs, &rows.cases);
    writeln!(w, "run_id,trial_id,seq,environment,workload,params,rep,warmup,status,reason,metric,value,unit,host_ns,guest_ns,host_cpu_ns,guest_cpu_ns,peer,tester_cpu_ns,block,launch_id,work")?;
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let o = |x: Option<i64>| x.map(|v| v.to_string()).unwrap_or_default();
    for t in &rows.trials {
        let prefix = format!(
            "{},{},{},{},{},{},{},{},{},{}",
            run_id,
            t.id,
            t.seq,
            q(&envs[t.env_idx].name),
            q(&cases[t.case_idx].label),
            q(&cases[t.case_idx].params.to_string()),
            t.rep,
            t.warmup as u8,
            t.status,
            q(t.reason.as_deref().unwrap_or(""))
        );
        let peer = t.peer_idx.map(|p| q(&envs[p].name)).unwrap_or_default();
        let suffix = format!(
            "{},{},{},{},{peer},{},{},{},{}",
            o(t.host_ns),
            o(t.guest_ns),
            o(t.host_cpu_ns),
            o(t.guest_cpu_ns),
            o(t.tester_cpu_ns),
            t.block,
            o(t.launch_id),
            o(t.work)
        );
        if t.samples.is_empty() {
            writeln!(w, "{prefix},,,,{suffix}")?;
        }
        for s in &t.samples {
            writeln!(w, "{prefix},{},{},{},{suffix}", q(&s.metric), s.value, q(&s.unit))?;
        }
    }
    Ok(())
}
