//! A result row: one metric of one environment × case, its statistics, its overhead against the
//! baseline and its second clock — the model every part of the report reads — and the metric
//! names the orchestrator adds to every trial.

use serde::Serialize;

/// Derived per-trial metric: CPU time of the instance's host-side processes during the trial.
pub const HOST_CPU: &str = "host_cpu_time";

/// Derived for network workloads: the tester's host CPU, the agent's own CPU (what `sar` inside
/// the environment would attribute to the workload), and host CPU per Gbit moved (netperf's
/// service demand; seed 000's "CPU cost").
pub const TESTER_CPU: &str = "tester_cpu_time";

pub const GUEST_CPU: &str = "guest_cpu_time";

pub use virtperf_record::store::CPU_PER_GBIT;

/// The CPU times every trial carries beside its workload's own metrics (the host's for the
/// environment, the tester's, the agent's inside it).
pub const CPU_TIMES: [&str; 3] = [HOST_CPU, TESTER_CPU, GUEST_CPU];

/// The clock check, per armed trial: the host's span of the timed region (`go` → `result`, less
/// the shortest median span of armed runs that do nothing) and the guest's agree when they differ
/// by at most `max(4 × jitter, overhead / 2, 100 µs, wake) + CLOCK_RATE_TOL × guest`. The absolute
/// part is what the calibration allows: its runs vary by `jitter` (their spread), a busy guest's
/// `go` path varies more than an idle one's (TCG guests: ±0.5 ms around an overhead of ~1 ms,
/// measured), and `wake` is the longest this host took, at the run's start, to run a thread woken
/// after a 20 ms idle spell — what a result arriving after a long trial meets and the no-ops'
/// calibration does not (native's `intmix`, 29 ms: host − guest 0.05–0.35 ms on an idle host,
/// against 0.39 ms allowed without it). The relative part is the clock-rate error tolerated; a
/// guest clock off by more is a finding (seed 002).
const CLOCK_RATE_TOL: f64 = 0.01;

/// Tolerance of one trial's clock check, ns.
pub fn clock_tolerance_ns(overhead_ns: f64, jitter_ns: f64, wake_ns: f64, guest_ns: f64) -> f64 {
    (4.0 * jitter_ns).max(overhead_ns / 2.0).max(100_000.0).max(wake_ns) + CLOCK_RATE_TOL * guest_ns
}

#[derive(Debug, Clone, Serialize)]
pub struct Overhead {
    /// The environment's cost against its baseline's: the geometric mean of paired trials'
    /// ratios (`estimate` = paired), or the ratio of the two sides' means (unpaired).
    pub ratio: f64,
    /// Its 95 % interval (paired: Student's t over launch blocks, Stein's for a precision run;
    /// unpaired: Fieller's); null when there is none (`no_ci` says why).
    pub ci95: Option<[f64; 2]>,
    /// Why `ci95` is null: unbounded, one sample on a side, no variation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_ci: Option<&'static str>,
    /// Which estimate this is: `paired` or `unpaired`.
    pub estimate: &'static str,
    /// The interval the report states, at `ci_level`: `ci95` but for an unpaired precision run,
    /// whose stopping rule needs 99 % intervals to cover at 95 %.
    pub ci: Option<[f64; 2]>,
    pub ci_level: f64,
    /// The interval of the equivalence test (TOST: two one-sided tests at the stated level's α,
    /// so 90 % beside a 95 % statement, 98 % beside precision mode's 99 %): the ratio is "≈ same"
    /// when it lies within ±the run's target and `ci` holds 1.
    pub ci90: Option<[f64; 2]>,
    /// Paired: how many pairs, over how many launch blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<usize>,
    /// Pairs left out of the ratio: stalled trials, pairs far outside the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_apart: Option<SetApart>,
}

/// What a paired ratio left out, and what it would have been with it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SetApart {
    /// Pairs with a trial that took more than twice its planned duration and a second more.
    pub stalled: usize,
    /// Pairs a host-wide slowdown touched on one side alone (the other side's trial was not in
    /// it): pairing does not cancel those.
    pub burst: usize,
    /// Pairs beyond 5 robust standard deviations and 3× of the others' median ratio.
    pub beyond: usize,
    /// Pairs in all.
    pub of: usize,
    /// The ratio with every pair in.
    pub ratio_with: f64,
    /// Each pair set apart's own ratio (environment over baseline).
    pub ratios: Vec<f64>,
}

impl Overhead {
    /// An unpaired ratio with its 95 % interval, stated as is.
    pub fn unpaired(ratio: f64, ci95: Option<[f64; 2]>, no_ci: Option<&'static str>) -> Overhead {
        Overhead {
            ratio,
            ci95,
            no_ci,
            estimate: "unpaired",
            ci: ci95,
            ci_level: 0.95,
            ci90: None,
            pairs: None,
            blocks: None,
            set_apart: None,
        }
    }
    /// The stated interval's half-width relative to the ratio, where there is one.
    pub fn relative_half_width(&self) -> Option<f64> {
        self.ci.map(|[lo, hi]| (hi - lo) / 2.0 / self.ratio.abs()).filter(|h| h.is_finite())
    }
}

#[derive(Debug, Serialize)]
pub struct ResultRow {
    pub environment: String,
    /// All-pairs results: the receiving environment (`environment` sends to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Several instances: this row is instance k's own figure (absent: the environment's, which
    /// for several instances is the aggregate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    pub workload: String,
    /// The workload's kind (`memcpy`, `tcp_stream`, …): its family and headline metrics.
    pub kind: String,
    pub params: serde_json::Value,
    pub metric: String,
    pub unit: String,
    pub better: &'static str,
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    pub stdev: f64,
    pub min: f64,
    pub max: f64,
    pub cv: Option<f64>,
    /// Student-t 95 % interval of the mean; null when n = 1 or all samples are equal (`no_ci`).
    pub ci95: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_ci: Option<&'static str>,
    /// Samples flagged by median/MAD (kept in every statistic).
    pub outliers: usize,
    /// Samples that were not finite (NaN, ±∞): left out of every figure of the row.
    #[serde(skip_serializing_if = "is_zero")]
    pub non_finite: usize,
    pub overhead: Option<Overhead>,
    /// Which clock timed this figure, for metrics measured on both: `host` (the orchestrator's,
    /// around the timed region) for environments with a clock of their own, `guest` (the
    /// workload's timer) where that is the host kernel's clock. Absent: one clock only (a rate the
    /// workload measured over its own duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<&'static str>,
    /// The same metric on the other clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_clock: Option<OtherClock>,
    /// Most of this environment's trials of this workload failed the clock check: its figures,
    /// and its ratio, rest on a clock that does not keep time with the host's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub clock_disagrees: bool,
    /// Launches the figure comes from. With two or more, `mean` is the mean of the launch means
    /// and `ci95` comes from their spread (Kalibera & Jones); with one, `ci95` covers that launch.
    pub launches: usize,
    /// What the interval covers: `launches` (launch-to-launch variation included) or `one launch`.
    pub ci_covers: &'static str,
    /// The confidence level the intervals were computed at: 0.95, or precision mode's 0.99 (what
    /// keeps 95 % coverage under its stopping rule).
    pub ci_level: f64,
    /// With two or more launches: how the variance splits between launches and repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variance: Option<Variance>,
    /// A calibrated workload: the operations of each trial here (the count per launch: the
    /// calibration is the environment's, once per run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<Work>,
    /// What the ratio says in words, as the terminal and the page say it (absent: no ratio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<RowVerdict>,
    /// One of its case's headline metrics (what the answer and the families show), as the run
    /// recorded the case.
    #[serde(skip)]
    pub headline: bool,
    /// Its case's family, as the run recorded the case.
    #[serde(skip)]
    pub family: virtperf_record::Family,
}

/// A ratio's verdict in the JSON: the same words the terminal prints (docs/methodology.md,
/// "Verdicts").
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RowVerdict {
    /// `slower`, `faster` (of a time), `lower`, `higher` (of a rate), `same`, `inconclusive`, or
    /// `no interval`.
    pub word: &'static str,
    /// The sentence: "5.1× slower (2.6–9.9×)", "≈ same: 2.0 % faster (5.0 % faster … 1.1 % slower)".
    pub phrase: String,
    /// The cost on time (> 1: slower) and its stated interval, in the same terms.
    pub cost: Option<f64>,
    pub cost_ci: Option<[f64; 2]>,
    /// Inconclusive: about how many more launches would settle it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_launches: Option<u64>,
    /// What the ratio set apart, in words ("1 of 4 pairs set apart (stalled: ×4887); with it, ×21").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_apart: Option<String>,
}

/// The two variance components of a figure measured over several launches.
#[derive(Debug, Clone, Serialize)]
pub struct Variance {
    /// Share of the variance between launches (T²₂ / (T²₁ + T²₂)), 0 to 1.
    pub launch_share: f64,
    /// Share within a launch, between its repetitions.
    pub trial_share: f64,
    /// Standard deviation between launch means beyond what repetitions explain (√T²₂).
    pub launch_sd: f64,
    /// Standard deviation of repetitions within a launch (√T²₁).
    pub trial_sd: f64,
}

/// How many operations a calibrated workload's trials did.
#[derive(Debug, Clone, Serialize)]
pub struct Work {
    pub param: String,
    pub count: u64,
    pub target_ms: f64,
    /// With equal counts: this environment's own count at the target time, where it ran
    /// another (the slowest environment's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct OtherClock {
    pub clock: &'static str,
    pub mean: f64,
    pub ci95: Option<[f64; 2]>,
    pub n: usize,
}

/// For `skip_serializing_if`: a count of nothing is left out of the JSON.
pub(super) fn is_zero(n: &usize) -> bool {
    *n == 0
}
