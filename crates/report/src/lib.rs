//! virtperf's output side: everything that reads a stored run and says what it means.
//!
//! It knows runs only through the record (`virtperf-record`): the store's rows say all the report
//! needs — an environment's kind, whether it is the baseline, whether it keeps its own clock; what
//! each case is (its family, its metrics with their units and which way each is better, its
//! headlines, its section, its link bound); the lab's rate and MTU; the parameters sized from the
//! host — recorded by the orchestrator when a run starts, never asked of the environments, the
//! lab, the workloads or the experiment that produced them. So a report, an export, a comparison
//! or a history reads the same from a database made on another machine, years earlier, as from
//! the run that just ended.
//!
//! Rooms, lowest first: `files`, `exit` (what a command's exit status means); `report/` (the
//! figures, their intervals and the words: summary, tables, the page, plots, RFC 2544's table,
//! costs, explain), `export/` (one file per format), `compare` (run against run) and `history`
//! (every run of an experiment).

pub mod compare;
pub mod exit;
pub mod export;
pub mod files;
pub mod history;
pub mod report;
