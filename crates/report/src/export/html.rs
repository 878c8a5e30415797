//! The self-contained HTML page and its figures as SVG files (rendered by crate::report::html).

use anyhow::Result;

use super::exporter::{Exporter, Part, RunData};

pub struct HtmlPage;

impl Exporter for HtmlPage {
    fn what(&self) -> &'static str {
        "HTML report"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(Part::whole(run.page()?.html.clone()))
    }
}

pub struct SvgFigures;

impl Exporter for SvgFigures {
    fn what(&self) -> &'static str {
        "figures (SVG)"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        Ok(run
            .page()?
            .figures
            .iter()
            .map(|f| Part { name: Some(format!("{}.svg", f.id)), bytes: f.svg.clone().into_bytes() })
            .collect())
    }
}
