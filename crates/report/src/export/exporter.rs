//! What every exporter is and reads: the [`Exporter`] trait, the stored run with its report
//! ([`RunData`]), the parts an output is made of ([`Part`]). Apart from `mod.rs` (the formats and
//! where they go), so each exporter imports this file and this file imports none of them.

use std::cell::OnceCell;

use anyhow::Result;

use crate::report::html::Page;
use crate::report::Report;
use virtperf_record::store::RunRows;

/// What exporters read: the stored run read once ([`virtperf_record::store::Store::load`]) and its report
/// built from it; the HTML page (with its
/// figures) is rendered at most once for every format that needs it.
pub struct RunData<'a> {
    pub rows: &'a RunRows,
    pub report: &'a Report,
    page: OnceCell<Page>,
}

impl<'a> RunData<'a> {
    pub fn new(rows: &'a RunRows, report: &'a Report) -> Self {
        RunData { rows, report, page: OnceCell::new() }
    }
    /// The HTML page and its figures.
    pub fn page(&self) -> Result<&Page> {
        if let Some(p) = self.page.get() {
            return Ok(p);
        }
        let p = crate::report::html::render(self.rows, self.report)?;
        Ok(self.page.get_or_init(|| p))
    }
}

/// One piece of an output: a file of a directory output (`name`), or the whole of a single one.
pub struct Part {
    pub name: Option<String>,
    pub bytes: Vec<u8>,
}

impl Part {
    pub(super) fn whole(bytes: impl Into<Vec<u8>>) -> Vec<Part> {
        vec![Part { name: None, bytes: bytes.into() }]
    }
}

pub trait Exporter {
    /// What this output is, for "… → PATH" lines.
    fn what(&self) -> &'static str;
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>>;
}
