//! The `rfc2544` workload: its parameters, metrics and resolved [`Settings`]. It is a procedure:
//! the orchestrator (`virtperf/src/rfc2544.rs`, the searches of RFC 2544 §26) runs it as steps of
//! the [`crate::rfc2544::frames`] generator between the tester and the environment; an agent never runs it.

use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::rfc2544::mlrsearch::{Goal, NDR, PDR};
use crate::workload::{Better, MetricSpec, Output, RunCtx, Workload};

/// The tests, in the order they run: RFC 2544 §26.1–26.4, with RFC 9971's search beside the
/// throughput test (`mlrsearch`: the conditional throughput that repeats on a noisy host).
pub const TESTS: &[&str] = &["throughput", "mlrsearch", "latency", "frame_loss", "back_to_back"];
/// RFC 2544 §9.1: the frame sizes for Ethernet.
pub const FRAME_SIZES: &[&str] = &["64", "128", "256", "512", "1024", "1280", "1518"];
/// The largest standard Ethernet frame; above it only with `jumbo = true`.
pub const MAX_STANDARD_FRAME: u64 = 1518;

pub struct Rfc2544;

const fn dur(name: &'static str, help: &'static str) -> ParamSpec {
    ParamSpec { name, kind: ParamKind::Duration { min_ms: 10, max_ms: 3_600_000 }, default: None, help }
}

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "tests",
        kind: ParamKind::Text,
        default: Some("throughput,mlrsearch,latency,frame_loss,back_to_back"),
        help: "which of throughput, mlrsearch, latency, frame_loss, back_to_back (a list; latency runs at the throughput's NDR, or MLRsearch's when throughput is left out)",
    },
    ParamSpec {
        name: "frame_size",
        kind: ParamKind::Int { min: 64, max: 9018 },
        default: Some("64"),
        help: "Ethernet frame size incl. FCS (also `frame_sizes`); swept over 64…1518 when not given",
    },
    ParamSpec {
        name: "direction",
        kind: ParamKind::Choice(&["in", "out", "reflect"]),
        default: Some("in"),
        help: "in: tester→DUT; out: DUT→tester; reflect: tester→DUT→tester; swept over in, out when not given",
    },
    ParamSpec {
        name: "quick",
        kind: ParamKind::Bool,
        default: Some("false"),
        help: "a first look in seconds a cell: 0.5 s final trials, 0.25 s search steps, 5 % resolution, MLRsearch on 0.25 s trials summed to 0.5 s at a 5 % width, 0.1 s frame-loss trials and sharing §26.1's trials, 10 ms waits around each trial, 2 back-to-back searches; the report says so first",
    },
    dur("trial_duration", "length of a final trial (RFC default 60s; quick 500ms)"),
    dur("search_duration", "length of a search step (default: trial_duration; quick 250ms)"),
    dur("frame_loss_duration", "length of a frame-loss trial (default: search_duration; quick 100ms)"),
    ParamSpec {
        name: "resolution",
        kind: ParamKind::Float { min: 0.01, max: 50.0 },
        default: None,
        help: "search resolution, % of the highest rate offered (default 0.5; quick 5)",
    },
    ParamSpec {
        name: "loss_tolerance",
        kind: ParamKind::Float { min: 0.0, max: 100.0 },
        default: Some("0.1"),
        help: "frame loss % a partial-drop rate (PDR) may have; the no-drop rate (NDR) allows none",
    },
    ParamSpec {
        name: "line_rate",
        kind: ParamKind::Rate,
        default: Some("1Gbit"),
        help: "nominal line rate for percentages and the theoretical maximum line / ((L + 20) × 8) (seed 003: GbE)",
    },
    ParamSpec {
        name: "jumbo",
        kind: ParamKind::Bool,
        default: Some("false"),
        help: "allow frames above 1518 bytes (the lab's MTU must carry frame − 18)",
    },
    dur("learning", "learning frames, then this wait, before each trial (default 500ms; quick 10ms)"),
    dur("settle", "wait between trials (default 2s; quick 10ms)"),
    dur("drain", "after a trial, how long frames in flight still count (RFC: 2s; quick 20ms; the report says how long the last frame took to arrive)"),
    ParamSpec {
        name: "dut_rcvbuf",
        kind: ParamKind::Size { min: 4096, max: 1 << 30 },
        default: None,
        help: "the DUT's receiving socket buffer (SO_RCVBUF, forced where the DUT is root); default: the kernel's (net.core.rmem_default) — the queue that absorbs the DUT's receiver being descheduled; the report says what each DUT got",
    },
    dur("mlr_trial_duration", "MLRsearch (RFC 9971) goal final trial duration (default 1s, as FD.io CSIT; quick 250ms)"),
    dur("mlr_initial_duration", "MLRsearch goal initial trial duration: the first trial at a load (default: mlr_trial_duration)"),
    dur("mlr_duration_sum", "MLRsearch goal duration sum: trial time that decides a load (default 21s, as CSIT; quick 500ms: a load is a lower bound after one clean trial, an upper after two lossy)"),
    ParamSpec {
        name: "mlr_exceed_ratio",
        kind: ParamKind::Float { min: 0.0, max: 0.99 },
        default: Some("0.5"),
        help: "MLRsearch goal exceed ratio: the share of a load's trial time that may lose more than the goal's loss ratio and the load still pass",
    },
    ParamSpec {
        name: "mlr_width",
        kind: ParamKind::Float { min: 0.01, max: 50.0 },
        default: None,
        help: "MLRsearch goal width, % of the upper bound: the search ends when its bounds are this close (default 0.5; quick 5)",
    },
    ParamSpec {
        name: "mlr_pdr_loss",
        kind: ParamKind::Float { min: 0.0, max: 100.0 },
        default: Some("0.5"),
        help: "MLRsearch PDR goal loss ratio, % (the NDR goal's is 0; CSIT 0.5)",
    },
    ParamSpec {
        name: "mlr_max_trials",
        kind: ParamKind::Int { min: 1, max: 100_000 },
        default: None,
        help: "MLRsearch stops after this many trials, saying which goals it did not finish (default 400; quick 60)",
    },
    ParamSpec {
        name: "mlr_share",
        kind: ParamKind::Bool,
        default: None,
        help: "MLRsearch counts §26.1's trials (its search, confirmation and probe steps) at their loads beside its own: the searches share their trials (default: on in quick, off otherwise)",
    },
    ParamSpec {
        name: "b2b_trials",
        kind: ParamKind::Int { min: 1, max: 1000 },
        default: None,
        help: "back-to-back searches averaged (RFC: at least 50; quick 2)",
    },
    dur("b2b_duration", "longest burst tried, as time at the maximum rate (RFC: 2s; quick 100ms)"),
];

/// Every parameter resolved, quick-profile defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub tests: Vec<String>,
    pub frame_size: u64,
    pub direction: String,
    pub quick: bool,
    pub trial_ms: u64,
    pub search_ms: u64,
    pub frame_loss_ms: u64,
    pub resolution_pct: f64,
    pub loss_tolerance_pct: f64,
    pub line_bps: f64,
    pub learning_ms: u64,
    pub settle_ms: u64,
    pub drain_ms: u64,
    pub b2b_trials: u64,
    pub b2b_ms: u64,
    /// RFC 9971's goals: NDR (loss ratio 0) and PDR (`mlr_pdr_loss`), sharing the durations,
    /// exceed ratio and width given.
    pub mlr_goals: [Goal; 2],
    pub mlr_max_trials: u64,
    /// MLRsearch starts from §26.1's trials (when the throughput test ran before it).
    pub mlr_share: bool,
    /// The DUT's receiving buffer asked for, bytes; None: the kernel's default.
    pub dut_rcvbuf: Option<u64>,
}

impl Settings {
    pub fn from_params(p: &Params) -> Result<Settings, ParamError> {
        let quick = p.bool("quick");
        let q = |quick_v: u64, full: u64| if quick { quick_v } else { full };
        let tests = parse_tests(p.str("tests")?)?;
        let trial_ms = p.ms_or("trial_duration", q(500, 60_000));
        Ok(Settings {
            tests,
            frame_size: p.u64("frame_size")?,
            direction: p.str("direction")?.to_string(),
            quick,
            trial_ms,
            search_ms: p.ms_or("search_duration", if quick { 250 } else { trial_ms }),
            frame_loss_ms: p
                .ms_or("frame_loss_duration", if quick { 100 } else { p.ms_or("search_duration", trial_ms) }),
            resolution_pct: p.opt_f64("resolution").unwrap_or(if quick { 5.0 } else { 0.5 }),
            loss_tolerance_pct: p.f64("loss_tolerance")?,
            line_bps: p.u64("line_rate")? as f64,
            learning_ms: p.ms_or("learning", q(10, 500)),
            settle_ms: p.ms_or("settle", q(10, 2000)),
            drain_ms: p.ms_or("drain", q(20, 2000)),
            b2b_trials: p.opt_u64("b2b_trials").unwrap_or(q(2, 50)),
            b2b_ms: p.ms_or("b2b_duration", q(100, 2000)),
            mlr_goals: {
                let final_ms = p.ms_or("mlr_trial_duration", q(250, NDR.final_ms));
                let ndr = Goal {
                    initial_ms: p.ms_or("mlr_initial_duration", final_ms).min(final_ms),
                    final_ms,
                    duration_sum_ms: p.ms_or("mlr_duration_sum", q(500, NDR.duration_sum_ms)),
                    exceed_ratio: p.f64("mlr_exceed_ratio")?,
                    width: p.opt_f64("mlr_width").unwrap_or(if quick { 5.0 } else { NDR.width * 100.0 })
                        / 100.0,
                    ..NDR
                };
                let pdr_loss = p.f64("mlr_pdr_loss")? / 100.0;
                [ndr, Goal { loss_ratio: pdr_loss, ..ndr }.named(PDR.name)]
            },
            mlr_max_trials: p.opt_u64("mlr_max_trials").unwrap_or(q(60, 400)),
            mlr_share: p.opt_bool("mlr_share").unwrap_or(quick),
            dut_rcvbuf: p.opt_u64("dut_rcvbuf"),
        })
    }
    pub fn runs(&self, test: &str) -> bool {
        self.tests.iter().any(|t| t == test)
    }
}

/// `throughput,latency` → the tests, in RFC order; an unknown name is an error naming it.
pub fn parse_tests(s: &str) -> Result<Vec<String>, ParamError> {
    let mut out = Vec::new();
    for t in s.split([',', '+', ' ']).map(str::trim).filter(|t| !t.is_empty()) {
        if !TESTS.contains(&t) {
            return Err(ParamError::new(
                "tests",
                format!("unknown test `{t}` (known: {})", TESTS.join(", ")),
            ));
        }
        out.push(t.to_string());
    }
    if out.is_empty() {
        return Err(ParamError::new("tests", format!("no test named; give some of: {}", TESTS.join(", "))));
    }
    Ok(TESTS.iter().filter(|t| out.iter().any(|o| o == *t)).map(|t| t.to_string()).collect())
}

impl Workload for Rfc2544 {
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Network
    }
    fn kind(&self) -> &'static str {
        "rfc2544"
    }
    fn report_section(&self) -> Option<&'static str> {
        Some("rfc2544")
    }
    fn largest_frame(&self, p: &Params) -> Option<u64> {
        p.opt_u64("frame_size")
    }
    fn summary(&self) -> &'static str {
        "RFC 2544 throughput (NDR/PDR), latency, frame loss and back-to-back per frame size and direction"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        METRICS
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn procedure(&self) -> bool {
        true
    }
    fn set_params(&self) -> &'static [&'static str] {
        &["tests"]
    }
    fn default_sweep(&self) -> &'static [(&'static str, &'static [&'static str])] {
        &[("frame_size", FRAME_SIZES), ("direction", &["in", "out"])]
    }
    fn aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[("frame_sizes", "frame_size"), ("directions", "direction")]
    }
    fn default_reps(&self) -> Option<(u32, u32)> {
        Some((1, 0))
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        let s = Settings::from_params(p)?;
        if s.frame_size > MAX_STANDARD_FRAME && !p.bool("jumbo") {
            return Err(ParamError::new(
                "frame_size",
                format!("{} bytes is above Ethernet's 1518: set jumbo = true (and a lab mtu of at least frame − 18)", s.frame_size),
            ));
        }
        if s.search_ms > s.trial_ms {
            return Err(ParamError::new(
                "search_duration",
                "a search step cannot be longer than trial_duration",
            ));
        }
        Ok(())
    }
    fn run(&self, _p: &Params, _ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        Err(crate::error::Failure::Unsupported(
            "`rfc2544` is a procedure: `virtperf run` drives it as steps of the `frames` workload".into(),
        )
        .into())
    }
}

const fn m(name: &'static str, unit: &'static str, better: Better, help: &'static str) -> MetricSpec {
    MetricSpec { name, unit, better, help }
}

pub const METRICS: &[MetricSpec] = &[
    m(
        "rfc2544_ndr_fps",
        "fps",
        Better::Higher,
        "throughput: highest rate with no frame lost (NDR), confirmed by a full trial",
    ),
    m("rfc2544_ndr_mbps", "Mbit/s", Better::Higher, "NDR in bits of the frames (L2, FCS included)"),
    m(
        "rfc2544_ndr_wire_mbps",
        "Mbit/s",
        Better::Higher,
        "NDR on the wire (+20 bytes of preamble and gap per frame)",
    ),
    m("rfc2544_ndr_line_pct", "%", Better::Higher, "NDR as % of the theoretical maximum at line_rate"),
    m("rfc2544_pdr_fps", "fps", Better::Higher, "highest rate with loss within loss_tolerance (PDR)"),
    m("rfc2544_pdr_mbps", "Mbit/s", Better::Higher, "PDR in bits of the frames (L2)"),
    m(
        "rfc2544_mlr_ndr_fps",
        "fps",
        Better::Higher,
        "RFC 9971 MLRsearch conditional throughput of the NDR goal (loss ratio 0, exceed ratio mlr_exceed_ratio): repeats where the strict NDR does not",
    ),
    m("rfc2544_mlr_ndr_mbps", "Mbit/s", Better::Higher, "MLRsearch NDR conditional throughput in bits of the frames (L2)"),
    m(
        "rfc2544_mlr_pdr_fps",
        "fps",
        Better::Higher,
        "RFC 9971 MLRsearch conditional throughput of the PDR goal (loss ratio mlr_pdr_loss)",
    ),
    m("rfc2544_mlr_pdr_mbps", "Mbit/s", Better::Higher, "MLRsearch PDR conditional throughput in bits of the frames (L2)"),
    m(
        "rfc2544_gen_limited",
        "bool",
        Better::Lower,
        "1 when the DUT passed all the generator could offer: its throughput is at least the NDR",
    ),
    m(
        "rfc2544_dut_cpu_pct",
        "% of a CPU",
        Better::Lower,
        "host CPU of the DUT's processes during the NDR trial",
    ),
    m(
        "rfc2544_guest_cpu_pct",
        "%",
        Better::Lower,
        "CPU busy inside the DUT during the NDR trial (all its CPUs)",
    ),
    m(
        "rfc2544_latency_mean_us",
        "µs",
        Better::Lower,
        "round trip of tagged frames at the throughput rate, mean",
    ),
    m("rfc2544_latency_min_us", "µs", Better::Lower, "round trip at the throughput rate, minimum"),
    m("rfc2544_latency_p99_us", "µs", Better::Lower, "round trip at the throughput rate, 99th percentile"),
    m("rfc2544_latency_max_us", "µs", Better::Lower, "round trip at the throughput rate, maximum"),
    m("rfc2544_loss_at_max_pct", "%", Better::Lower, "frame loss at 100 % of the highest rate offered"),
    m(
        "rfc2544_b2b_frames",
        "frames",
        Better::Higher,
        "longest burst at the highest rate with no loss, mean of the trials",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_parse_in_rfc_order_and_unknowns_are_named() {
        assert_eq!(parse_tests("latency,throughput").unwrap(), vec!["throughput", "latency"]);
        assert!(parse_tests("jitter").unwrap_err().message.contains("jitter"));
        assert!(parse_tests(" , ").is_err());
    }

    #[test]
    fn quick_changes_the_defaults_and_explicit_values_win() {
        let mut m = crate::params::resolve(PARAMS, &Default::default()).unwrap();
        let s = Settings::from_params(&Params(&m)).unwrap();
        assert_eq!((s.trial_ms, s.search_ms, s.b2b_trials, s.drain_ms), (60_000, 60_000, 50, 2000));
        assert_eq!(s.line_bps, 1e9);
        m.insert("quick".into(), true.into());
        m.insert("trial_duration".into(), 3000.into());
        let s = Settings::from_params(&Params(&m)).unwrap();
        assert_eq!((s.trial_ms, s.search_ms, s.b2b_trials, s.resolution_pct), (3000, 250, 2, 5.0));
        assert_eq!((s.settle_ms, s.drain_ms, s.learning_ms, s.mlr_share), (10, 20, 10, true));
        let g = s.mlr_goals[0];
        assert_eq!((g.initial_ms, g.final_ms, g.duration_sum_ms, g.width), (250, 250, 500, 0.05));
        assert_eq!(s.frame_loss_ms, 100);
        m.insert("mlr_share".into(), false.into());
        assert!(!Settings::from_params(&Params(&m)).unwrap().mlr_share);
    }
}
