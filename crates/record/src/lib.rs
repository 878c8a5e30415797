//! The stored run: what virtperf writes while it runs, and the only way anything reads a run.
//!
//! A run is a SQLite database ([`store`]) whose rows say all a report needs: the environments
//! (each one's kind, whether it is the baseline, whether it keeps its own clock), the cases and
//! what each one is ([`catalog`]: its family, its metrics with their units and which way each is
//! better, its headlines, its section, its link bound), the plan, every trial's samples and
//! detail, the launches, the calibrations; the lab's rate and MTU ([`wire`]'s arithmetic states
//! their ceilings) and the parameters sized from the host are in the run's manifest. The
//! orchestrator and the workloads write through this crate; the report reads through it alone,
//! so a database made on another machine, years earlier, reads as the run that just ended.

pub mod catalog;
pub mod mechanisms;
pub mod rfc2544;
pub mod store;
pub mod units;
pub mod wire;

pub use catalog::{Better, CaseRecord, Family, LinkBound, MetricRecord, HOST_SUFFIX};
/// A stored figure is the agent's sample as it came (name, value, unit); stored text from a
/// guest is printed through [`printable`].
pub use virtperf_proto::{printable, Sample};
