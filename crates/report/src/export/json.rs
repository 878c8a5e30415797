//! The report as JSON: every figure the text shows, with its statistics.

use anyhow::Result;

use super::exporter::{Exporter, Part, RunData};

pub struct ReportJson;

impl Exporter for ReportJson {
    fn what(&self) -> &'static str {
        "JSON report"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(Part::whole(format!("{}\n", serde_json::to_string_pretty(run.report)?)))
    }
}
