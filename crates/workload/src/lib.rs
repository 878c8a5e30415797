//! virtperf workloads.
//!
//! A workload runs inside `virtperf agent`, never in the orchestrator, so that it runs the same way
//! natively, in a container, or in a guest. Each kind declares its parameters ([`params::ParamSpec`])
//! and metrics ([`MetricSpec`]); [`run`] validates a [`WorkloadSpec`] and executes it.
//!
//! The crate's rooms: `workload.rs` (the trait every kind implements, and what they share),
//! `registry.rs` (the kinds, and validating and running a request), one module per family of
//! kinds. To add a workload: write a module with a `pub struct X;` implementing [`Workload`], add
//! it to [`REGISTRY`] (registry.rs), and document it in `docs/workloads.md`.

pub mod apps;
pub mod clock;
pub mod compute;
pub mod counts;
pub mod disk;
pub mod error;
pub mod load;
pub mod micro;
pub mod net;
pub mod params;
pub mod pfs;
pub mod registry;
pub mod rfc2544;
pub mod timer;
pub mod tools;
pub use virtperf_record::wire;
pub mod workload;

pub use error::{Error, FailureKind, OsError};
pub use params::{ParamError, ParamKind, ParamSpec, Params, Raw};
pub use registry::{
    describe, find, kinds, metric, metric_records, prepare, run, Prepared, DESCRIBER, REGISTRY,
};
pub use workload::*;
