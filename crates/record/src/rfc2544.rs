//! What an RFC 2544 trial stores (`extra.rfc2544`): the procedures (`virtperf_workload::rfc2544`)
//! write these types and the report reads them back, one type for both, so that a key cannot be
//! written under one name and read under another.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The runs of lost frames a step keeps (the count of all runs is kept beside them).
pub const LOST_RUNS: usize = 8;

/// Where a step's frames were lost, by sequence number (the first frame is 1, the last `sent`).
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LossAt {
    pub lost: u64,
    pub first: Option<u64>,
    pub last: Option<u64>,
    /// Runs of consecutive lost frames, `[from, to]`, the first [`LOST_RUNS`] of them.
    pub runs: Vec<[u64; 2]>,
    pub run_count: u64,
}

impl LossAt {
    /// Counts a run of lost frames `[a, b]`, kept while fewer than [`LOST_RUNS`] are.
    pub fn close(&mut self, (a, b): (u64, u64)) {
        self.run_count += 1;
        if self.runs.len() < LOST_RUNS {
            self.runs.push([a, b]);
        }
    }

    /// In words: "lost 3 of 10: #8–10 (the tail)".
    pub fn describe(&self, sent: u64) -> String {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|[a, b]| if a == b { format!("#{a}") } else { format!("#{a}–{b}") })
            .collect();
        let more = self.run_count.saturating_sub(self.runs.len() as u64);
        let where_ = match (self.first, self.last) {
            (Some(1), Some(l)) if l == sent => " (head to tail)",
            (Some(1), _) => " (the head)",
            (_, Some(l)) if l == sent => " (the tail)",
            _ => "",
        };
        format!(
            "lost {} of {sent}: {}{}{where_}",
            self.lost,
            runs.join(", "),
            if more > 0 { format!(" and {more} more runs") } else { String::new() }
        )
    }
}

/// What one RFC 2544 trial stores (`extra.rfc2544`): written by the procedures
/// (`virtperf_workload::rfc2544::search`) and read back by the report (`Row::from_detail`,
/// crates/report/src/report/rfc2544.rs) through this one type, so that a key
/// cannot be written under one name and read under another. Every field has a default: a
/// detail from an older run, or one with parts not run, reads as far as it goes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Detail {
    pub frame_size: u64,
    pub direction: String,
    pub quick: bool,
    pub line_rate_bps: f64,
    /// The theoretical maximum at the line rate.
    pub line_max_fps: f64,
    pub trial_ms: u64,
    pub search_ms: u64,
    pub resolution_pct: f64,
    pub loss_tolerance_pct: f64,
    pub tests: Vec<String>,
    /// What the generator reached in the first step (offered the line's maximum).
    pub generator_max_fps: f64,
    /// The highest rate searched: the line's maximum, or 98 % of the generator's.
    pub top_fps: f64,
    pub generator_limited_probe: bool,
    /// The DUT's receiving socket's buffer (SO_RCVBUF as read back, bytes; directions `in` and
    /// `reflect`): the kernel's default unless `dut_rcvbuf` asked for more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dut_rcvbuf: Option<u64>,
    /// What `dut_rcvbuf` asked for, bytes (the kernel keeps twice that, for its overhead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dut_rcvbuf_asked: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    /// RFC 9971's search (test `mlrsearch`), beside §26.1's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlrsearch: Option<Mlr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame_loss: Option<FrameLoss>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub back_to_back: Option<BackToBack>,
    /// Every step, in order.
    pub steps: Vec<Step>,
    /// The trial's wall time on the host's clock (set by the trial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<f64>,
    /// The waits around each step, ms: learning, settle, drain (None: stores before 2026-12-03).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_ms: Option<[u64; 3]>,
    /// Back-to-back searches asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b2b_trials: Option<u64>,
}

/// §26.1: the NDR and PDR, each a rate that passed a full-length trial or not determined.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Throughput {
    pub ndr_fps: Option<f64>,
    pub ndr_confirmed: bool,
    pub pdr_fps: Option<f64>,
    pub pdr_confirmed: bool,
    /// Why no NDR was determined, where none was.
    pub not_determined: Option<String>,
    /// The DUT passed everything the generator could send.
    pub gen_limited: bool,
    /// The lowest rate above the NDR that failed, failed at the tester's receiver (direction
    /// `out`: its socket dropped what was lost): the NDR is a bound of the tester's, not the DUT's.
    pub tester_bound: bool,
    /// Frames the tester's receiving socket dropped over every step (direction `out`).
    pub tester_drops: u64,
    pub ndr_mbps: f64,
    pub pdr_mbps: f64,
    /// CPU during the confirming trial at the NDR.
    pub ndr_cpu: Option<NdrCpu>,
}

/// RFC 9971 MLRsearch: every goal's bounds and conditional throughput, and what the search cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mlr {
    pub goals: Vec<MlrGoal>,
    /// The search's range: the line's maximum and a thousandth of it.
    pub max_load_fps: f64,
    pub min_load_fps: f64,
    pub trials: u64,
    /// Trial time summed, ms (what the goals' duration sums were spent on).
    pub trial_time_ms: u64,
    /// The search's wall time, waits between trials included, ms.
    pub wall_ms: f64,
    /// It stopped at `mlr_max_trials` before every goal reached its width.
    pub capped: bool,
    /// Trials it shared with §26.1's search (`mlr_share`, quick's default): counted at their
    /// loads beside its own, not in `trials`; and their time, ms.
    pub shared_trials: u64,
    pub shared_time_ms: u64,
}

/// One goal (RFC 9971 §4.1) and what the search found for it (§4.7).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MlrGoal {
    /// `NDR` (loss ratio 0) or `PDR`.
    pub name: String,
    pub loss_ratio: f64,
    pub initial_ms: u64,
    pub final_ms: u64,
    pub duration_sum_ms: u64,
    pub exceed_ratio: f64,
    pub width: f64,
    /// The relevant lower bound, fps: the highest load its trials classified as a lower bound.
    pub lower_fps: Option<f64>,
    /// The relevant upper bound; none where the DUT passed the highest load searched.
    pub upper_fps: Option<f64>,
    /// The conditional throughput: the lower bound × (1 − its loss ratio at the exceed ratio's
    /// quantile of its trials).
    pub conditional_fps: Option<f64>,
    /// The bounds came within the goal's width.
    pub converged: bool,
    /// The relevant upper bound lost mostly frames the generator never sent: the figure is the
    /// generator's limit — the tester's in directions in and reflect (the DUT's is at least
    /// that), the DUT's own sending limit in direction out (see [`Throughput::gen_limited`]).
    pub gen_limited: bool,
}

impl MlrGoal {
    /// The goal's parameters in words, as the report names what it states.
    pub fn describe(&self) -> String {
        format!(
            "loss ratio {} %, trials {}–{} s, duration sum {} s, exceed ratio {}, width {} %",
            self.loss_ratio * 100.0,
            self.initial_ms as f64 / 1e3,
            self.final_ms as f64 / 1e3,
            self.duration_sum_ms as f64 / 1e3,
            self.exceed_ratio,
            self.width * 100.0
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NdrCpu {
    /// Host CPU of the DUT's processes, % of one CPU.
    pub dut_host_pct: Option<f64>,
    /// CPU busy inside the DUT.
    pub guest_pct: Option<f64>,
}

/// §26.2: round trips of tagged frames at the NDR, or why the test was skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Latency {
    Skipped {
        skipped: String,
    },
    Measured {
        rate_fps: f64,
        at_ndr: bool,
        tagged_frames: u64,
        /// At least 20 tagged frames: enough to publish the figures.
        enough: bool,
        loss_pct: f64,
        gen_limited: bool,
        /// The generator's latency summary (count, mean, min, p99, max, histogram).
        summary: Value,
    },
}

/// §26.3: loss from 100 % of the highest rate down in 10 % steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FrameLoss {
    pub curve: Vec<LossPoint>,
    /// The curve ended with two successive trials that lost nothing (§26.3's stopping rule).
    pub ended_with_two_zero: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LossPoint {
    pub offered_fps: f64,
    pub pct_of_top: u64,
    pub pct_of_line: f64,
    pub loss_pct: f64,
    pub gen_limited: bool,
}

/// §26.4: the longest burst at the minimum inter-frame gap with no loss, per trial.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackToBack {
    /// The rate of the minimum gap asked: the line's maximum, or (`gap` = "generator") what the
    /// generator reached in the probe.
    pub rate_fps: f64,
    /// Whose minimum gap the bursts were sent at: "line" (paced at the line's maximum) or
    /// "generator" (unpaced: the generator cannot reach the line's rate).
    pub gap: String,
    /// The mean rate the bursts of more than one batch that were sent whole and passed reached
    /// (their actual gap); 0 when every burst that passed was one batch.
    pub burst_fps: f64,
    pub max_burst: u64,
    pub bursts: Vec<u64>,
    pub mean: f64,
    /// Trials whose length is a lower bound: a burst passed at the longest length tried, or the
    /// shortest burst that failed was one the generator broke up, not one the DUT lost.
    pub capped: u64,
    pub resolution_frames: u64,
    /// The mean of the bursts whose length was searched (none passed at the longest length).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_mean: Option<f64>,
    /// Per trial: the shortest burst that failed, and why.
    pub trials: Vec<BurstTrial>,
    /// Bursts the generator broke up twice (sent well below its own rate: a stall left gaps).
    pub broken: u64,
}

/// One back-to-back trial: the longest burst that passed, and the shortest that did not — with
/// the frames it lost, so that a 0 (even one frame lost) explains itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BurstTrial {
    pub passed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    /// "loss" (the DUT) or "generator" (the burst was broken up: the length is a lower bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_at: Option<LossAt>,
}

/// One step of a procedure, as measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    pub test: String,
    pub phase: String,
    pub offered_fps: f64,
    pub duration_ms: u64,
    pub count: u64,
    pub sent: u64,
    pub received: u64,
    pub loss_pct: f64,
    pub sent_fps: f64,
    pub gen_limited: bool,
    pub reordered: u64,
    pub duplicates: u64,
    /// The step's latency summary, without its histogram.
    pub latency: Value,
    pub dut_cpu_pct: Option<f64>,
    pub guest_cpu_pct: Option<f64>,
    pub wall_ms: f64,
    /// A judged step that did not pass: by `loss` (the DUT), or by the `generator` (it did not
    /// reach the offered rate, twice: nothing is said of the DUT there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_by: Option<String>,
    /// Which frames the step lost (first, last, runs), when it lost any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_at: Option<LossAt>,
    /// Frames the tester's receiving socket dropped (direction `out`).
    #[serde(skip_serializing_if = "is_zero")]
    pub tester_drops: u64,
    /// Frames the DUT's receiving socket dropped (direction `in`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dut_drops: u64,
    /// How much later than the end marker the last frame arrived, ms: the drain the step needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_ms: Option<f64>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The fewest tagged round trips whose latency figures are published.
pub const MIN_TAGGED: u64 = 20;

/// A burst sent unpaced that reached less than this share of the generator's rate in the probe
/// was broken up (the sender was descheduled mid-burst): its gaps let the DUT drain its queue.
pub const BROKEN_BURST: f64 = 0.8;

/// How often a burst the generator broke up is sent before it is judged: three times (on a
/// 2-CPU host the sender is descheduled in about a third of the bursts).
pub const BROKEN_TRIES: usize = 3;
