//! The text report: the 100-column summary and the full table.

use anyhow::Result;

use super::exporter::{Exporter, Part, RunData};

pub struct Summary;

impl Exporter for Summary {
    fn what(&self) -> &'static str {
        "summary"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(Part::whole(crate::report::summary::render_summary(run.report)))
    }
}

pub struct Table;

impl Exporter for Table {
    fn what(&self) -> &'static str {
        "full table"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(Part::whole(crate::report::summary::render_full(
            run.report,
            crate::report::summary::terminal_width(),
        )))
    }
}
