//! RFC 2544 (Benchmarking Methodology for Network Interconnect Devices) and RFC 9971 (MLRsearch),
//! in one place. Which file holds which part of the method:
//!
//! | RFC                                   | what                                             | file                                   |
//! |---------------------------------------|--------------------------------------------------|----------------------------------------|
//! | §9 frame sizes, §26 tests chosen      | the `rfc2544` workload's parameters, [`Settings`] | `params.rs`                            |
//! | §26 one trial at one rate             | the generator and receiver (workload `frames`)   | `frames.rs`                            |
//! | §26.1 throughput (NDR, PDR)           | binary search, confirmation by a full trial      | `search.rs` (`throughput`)             |
//! | RFC 9971 conditional throughput       | the goals and the load classification            | `mlrsearch.rs`; driven by `search.rs`  |
//! | §26.2 latency                         | tagged frames at the throughput rate             | `search.rs` (`latency`)                |
//! | §26.3 frame loss rate                 | 100 % down in 10 % steps                         | `search.rs` (`frame_loss`)             |
//! | §26.4 back-to-back frames             | bursts, halved and doubled                       | `search.rs` (`back_to_back`)           |
//! | the report's table (NDR, PDR, …)      | one row per procedure, seed 003's comparison     | `crates/report/src/report/rfc2544.rs`  |
//!
//! The searches are pure: [`search::run`] takes the step function that runs one `frames` flow
//! between the tester and the environment (virtperf's `trial.rs`, `rfc2544_trial`) and returns the
//! samples and the [`search::Detail`] stored with the trial, which the report reads back. An agent
//! runs only the generator's steps, never a search.

pub mod frames;
pub mod mlrsearch;
pub mod params;
pub mod search;

pub use params::{Rfc2544, Settings, FRAME_SIZES, MAX_STANDARD_FRAME, TESTS};
