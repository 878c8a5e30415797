//! What every workload is: the [`Workload`] trait, its metrics ([`MetricSpec`]), what a run
//! returns ([`Output`]) and gets ([`RunCtx`]), and the helpers workloads share (calibrated counts,
//! histograms, the thread CPU clock). The registry of kinds lives apart (`registry.rs`), so that
//! every workload imports this file and this file imports none of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::Value;
use virtperf_proto::{NetRole, Sample};

use crate::error::Error;
use crate::params::{ParamError, ParamKind, ParamSpec, Params};

pub use virtperf_record::catalog::{Better, Family, LinkBound, HOST_SUFFIX};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricSpec {
    pub name: &'static str,
    pub unit: &'static str,
    pub better: Better,
    pub help: &'static str,
}

/// What a run of a workload produces.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Output {
    pub samples: Vec<Sample>,
    /// Detail that is not a scalar sample (a histogram, a time series); stored with the trial.
    pub extra: Value,
}

impl From<Vec<Sample>> for Output {
    fn from(samples: Vec<Sample>) -> Self {
        Output { samples, extra: Value::Null }
    }
}

/// What a running workload may use of the agent.
pub struct RunCtx<'a> {
    stop: &'a AtomicBool,
    ready: &'a (dyn Fn() + Sync),
    begin: &'a (dyn Fn() + Sync),
    lap: &'a (dyn Fn(&str) + Sync),
    count: &'a (dyn Fn(Count) + Sync),
    net: Option<&'a NetRole>,
    cpu: &'a ThreadCpuTotal,
    scratch: Option<&'a str>,
}

/// A boundary of what a counted run's events are counted over ([`RunCtx::count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// From here: what came before (a server's set-up, a cluster's initdb) is left out.
    From,
    /// To here: what comes after (a server's shutdown) is left out.
    Until,
}

impl<'a> RunCtx<'a> {
    /// This context for one request: its network role and scratch directory (the registry's
    /// `Prepared::run`).
    pub(crate) fn for_request<'b>(&self, net: Option<&'b NetRole>, scratch: Option<&'b str>) -> RunCtx<'b>
    where
        'a: 'b,
    {
        RunCtx { net, scratch, ..*self }
    }
}

/// CPU time of the threads a run started besides its own (user, system ns), summed as they end.
#[derive(Debug, Default)]
pub struct ThreadCpuTotal {
    pub user_ns: AtomicU64,
    pub system_ns: AtomicU64,
}

/// The calling thread's CPU time so far (user, system ns): `getrusage(RUSAGE_THREAD)`.
pub fn thread_cpu() -> (u64, u64) {
    // SAFETY: getrusage fills the rusage struct we own; RUSAGE_THREAD is valid on Linux.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

/// Adds the CPU time its thread used between its creation and its drop to the run's total.
pub struct ThreadCpuGuard<'a> {
    total: &'a ThreadCpuTotal,
    start: (u64, u64),
}

impl Drop for ThreadCpuGuard<'_> {
    fn drop(&mut self) {
        let (u, s) = thread_cpu();
        self.total.user_ns.fetch_add(u.saturating_sub(self.start.0), Ordering::Relaxed);
        self.total.system_ns.fetch_add(s.saturating_sub(self.start.1), Ordering::Relaxed);
    }
}

static NEVER: AtomicBool = AtomicBool::new(false);
static NO_CPU: ThreadCpuTotal = ThreadCpuTotal { user_ns: AtomicU64::new(0), system_ns: AtomicU64::new(0) };

impl<'a> RunCtx<'a> {
    pub fn new(stop: &'a AtomicBool, ready: &'a (dyn Fn() + Sync), net: Option<&'a NetRole>) -> Self {
        RunCtx { stop, ready, begin: &|| {}, lap: &|_| {}, count: &|_| {}, net, cpu: &NO_CPU, scratch: None }
    }
    /// The agent's context: `begin` blocks an armed run until the host says go; `cpu` collects
    /// the CPU time of the threads the workload starts.
    pub fn with_hooks(
        stop: &'a AtomicBool,
        ready: &'a (dyn Fn() + Sync),
        begin: &'a (dyn Fn() + Sync),
        net: Option<&'a NetRole>,
        cpu: &'a ThreadCpuTotal,
    ) -> Self {
        RunCtx { stop, ready, begin, lap: &|_| {}, count: &|_| {}, net, cpu, scratch: None }
    }
    /// A context with no agent behind it (tests, benchmarks).
    pub fn detached() -> RunCtx<'static> {
        RunCtx {
            stop: &NEVER,
            ready: &|| {},
            begin: &|| {},
            lap: &|_| {},
            count: &|_| {},
            net: None,
            cpu: &NO_CPU,
            scratch: None,
        }
    }
    /// The side this agent plays in a network workload, or an error saying how to run it.
    pub fn net(&self) -> Result<&NetRole, Error> {
        self.net.ok_or_else(|| crate::error::Failure::NoPeer.into())
    }
    /// The directory on the environment's scratch disk (see [`WorkloadSpec::scratch`]), if any.
    pub fn scratch(&self) -> Option<&str> {
        self.scratch
    }
    /// True once the host asked this run to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    /// Tells the host the run has begun (for a server: it now accepts peers). Only workloads whose
    /// [`Workload::announces_ready`] is true call it; for the others the agent does.
    pub fn ready(&self) {
        (self.ready)()
    }
    /// Marks the start of the timed region, after setup: in an armed run it waits for the host's
    /// `go`. Only workloads whose [`Workload::marks_timed_region`] is true call it (once, on the
    /// run's own thread, right before starting their clock); for the others the agent does.
    pub fn begin(&self) {
        (self.begin)()
    }
    /// The agent's hook for [`RunCtx::lap`] (an armed run's phases, timed by the host).
    pub fn with_lap(self, lap: &'a (dyn Fn(&str) + Sync)) -> Self {
        RunCtx { lap, ..self }
    }
    /// A boundary inside the timed region: phase `name` begins now (or, `end`, the last one
    /// ended). In an armed run the host stamps each on arrival and gives the workload the spans
    /// between them on its own clock ([`Workload::on_host_laps`]); elsewhere it does nothing.
    /// Call it outside the phases' own clocks: its write is not part of any phase.
    pub fn lap(&self, name: &str) {
        (self.lap)(name)
    }
    /// The agent's hook for [`RunCtx::count`].
    pub fn with_count(self, count: &'a (dyn Fn(Count) + Sync)) -> Self {
        RunCtx { count, ..self }
    }
    /// Narrows what a counted run's events are counted over (`explain`, docs/explain.md): a
    /// server counts from the moment it is ready to the moment it is told to stop, so its events
    /// are its requests' and not its set-up's or shutdown's. Does nothing in a run not counted.
    pub fn count(&self, at: Count) {
        (self.count)(at)
    }
    /// Counts the calling thread's CPU time in the run's until the guard drops: every thread a
    /// workload starts takes one, so `guest_cpu_time` is the run's own work and nothing else.
    pub fn thread_cpu(&self) -> ThreadCpuGuard<'_> {
        ThreadCpuGuard { total: self.cpu, start: thread_cpu() }
    }
}

/// The share of a trial's work a warm-up does, for workloads that say how to scale it
/// ([`Workload::warmup_scales`]). Warm-ups were 43 % of a precision run's measuring time (249 of
/// its 681 trials, 82 of 190 s: one per case per launch); what they are for — the first touch,
/// the caches, a guest settling — does not take a whole trial (UML's `pde` warm-up ran 1.7× a
/// trial, its next trial at the trial's pace either way).
pub const WARMUP_SHARE: f64 = 0.25;

/// The smallest whole value parameter `key` of `w` takes (an integer's `min`, a duration's
/// `min_ms`), at least 1: `pagefault`'s 16 pages, a flow's 100 ms.
pub fn param_min(w: &dyn Workload, key: &str) -> u64 {
    w.params()
        .iter()
        .find(|p| p.name == key)
        .and_then(|p| match p.kind {
            ParamKind::Int { min, .. } => u64::try_from(min).ok(),
            ParamKind::Duration { min_ms, .. } => Some(min_ms),
            _ => None,
        })
        .unwrap_or(1)
        .max(1)
}

/// `params` for a warm-up: the workload's scaling parameter at [`WARMUP_SHARE`] of its value (at
/// least the parameter's minimum), the rest unchanged. Unchanged where the workload scales
/// nothing or the value is not a whole number.
pub fn warmup_params(w: &dyn Workload, params: &mut BTreeMap<String, Value>) {
    let Some(key) = w.warmup_scales() else { return };
    if let Some(n) = params.get(key).and_then(Value::as_u64) {
        let scaled = ((n as f64 * WARMUP_SHARE).round() as u64).max(param_min(w, key));
        params.insert(key.to_string(), Value::from(scaled));
    }
}

pub trait Workload: Sync {
    fn kind(&self) -> &'static str;
    fn summary(&self) -> &'static str;
    fn params(&self) -> &'static [ParamSpec];
    fn metrics(&self) -> &'static [MetricSpec];
    /// True when the workload calls [`RunCtx::ready`] itself (servers: after they listen).
    fn announces_ready(&self) -> bool {
        false
    }
    /// True when the workload calls [`RunCtx::begin`] itself, between its setup and its timed
    /// region; for the others the agent calls it before `run`.
    fn marks_timed_region(&self) -> bool {
        false
    }
    /// For fixed-work workloads: the headline metrics recomputed from `host_ns`, the host clock's
    /// span of the timed region (`go` → `result`, less the idle round trip), each named
    /// `METRIC_host`. Empty when a metric is not a function of that one span (best-of passes,
    /// rates over a duration the workload chose).
    fn on_host_clock(&self, _p: &Params, _host_ns: u64) -> Vec<Sample> {
        Vec::new()
    }
    /// Figures on the host's clock from the spans between the laps the run marked
    /// ([`RunCtx::lap`]): each `(name, ns)` is the host-clock span from lap `name` to the next,
    /// each figure named `METRIC_host`. `extra` is the run's own detail (what each phase moved).
    fn on_host_laps(&self, _p: &Params, _extra: &Value, _spans: &[(String, u64)]) -> Vec<Sample> {
        Vec::new()
    }
    /// Defaults that depend on the host's last-level cache (STREAM's arrays: ≥ 4× the cache), for
    /// parameters the user did not give; the orchestrator fills them from the host's own cache
    /// (a guest's idea of its cache is not the hardware's) and records the cache in the run.
    fn sized_by_cache(&self, _llc_bytes: u64) -> Vec<(&'static str, Value)> {
        Vec::new()
    }
    /// How [`Workload::sized_by_cache`] sizes, in words (`{llc}` stands for the cache's size), for
    /// the run's manifest and report.
    fn sizing_rule(&self) -> &'static str {
        ""
    }
    /// The largest value of a host-sized key (see [`Workload::sized_by_cache`]) whose allocation
    /// ([`Workload::memory_needed`]) fits `budget` bytes: a size derived from the host is clamped
    /// to what every environment of the experiment can hold. None: the key cannot shrink.
    fn fit_memory(&self, _key: &str, _budget: u64) -> Option<Value> {
        None
    }
    /// Per-operation workloads: the parameter counting a trial's operations (`iterations`). Left
    /// out of an experiment, the orchestrator calibrates it in each environment during the warm-up
    /// to the workload's `target_time` ([`TARGET_TIME`]), as Google Benchmark and criterion do,
    /// stores it with each trial, and the figures stay per operation. None: a workload whose fixed
    /// work is the point (seed 002's memcpy 10 MB × 10, pde, disk) or that runs for a duration.
    fn calibrates(&self) -> Option<&'static str> {
        None
    }
    /// The parameter that sets how much work a trial does without changing what it touches (its
    /// memory, files, connections): a warm-up runs [`WARMUP_SHARE`] of it — enough to fault in,
    /// fill caches and connect, at a quarter of a trial's cost. Default: the calibrated count.
    /// None: a warm-up is a whole trial (a workload whose first pass differs in kind).
    fn warmup_scales(&self) -> Option<&'static str> {
        self.calibrates()
    }
    /// How many of the leading declared metrics are headlines: what precision mode watches
    /// (each one's overhead ratio must reach the target). The rest (tails, counts of rare events)
    /// are reported with whatever precision the headlines' repetitions give them.
    fn headline_metrics(&self) -> usize {
        1
    }
    /// What the workload measures, for the report's answer (its ratios are summarised per
    /// family: compute, memory, system, timers, disk, network).
    fn family(&self) -> Family {
        Family::Other
    }
    /// Programs the workload runs inside the environment (a tool's binary): a guest's image
    /// carries them and their shared libraries; elsewhere the host's are seen.
    fn programs(&self, _p: &Params) -> Vec<String> {
        Vec::new()
    }
    /// Files on the host that a parameter names and the agent needs (fio's job file, whose
    /// text travels as `job_text`): read into the parameters when the experiment is validated,
    /// where the user's paths are; the error names the key.
    fn read_host_files(&self, _params: &mut BTreeMap<String, Value>) -> Result<(), ParamError> {
        Ok(())
    }
    /// The report's section for what this workload measures beyond the results table (`disk`'s
    /// matrices, `timer`'s histograms, `rfc2544`'s tables): the report picks a section's cases
    /// by this, never by the workload's name. None: the results table says it all.
    fn report_section(&self) -> Option<&'static str> {
        None
    }
    /// Which way `metric` is better for a case with these parameters, when the workload lets the
    /// user say (`command`'s metrics); None: as declared.
    fn better_for(&self, _metric: &str, _params: &Value) -> Option<Better> {
        None
    }
    /// Declared metrics a run reports only when its sample supports them (the timer's tail
    /// percentiles); the others are in every run's output.
    fn conditional_metrics(&self) -> &'static [&'static str] {
        &[]
    }
    /// How N instances' values of `metric` (its declared name, no `_out`/`_in`/`_host` suffix)
    /// add up into a trial's aggregate. Default: a rate of work (higher is better) is added, the
    /// rest (times, latencies) averaged.
    fn aggregation(&self, metric: &str, _p: &Params) -> Aggregation {
        match self.metrics().iter().find(|m| m.name == metric).map(|m| m.better) {
            Some(Better::Higher) => Aggregation::Sum,
            _ => Aggregation::Mean,
        }
    }
    /// An [`Aggregation::Pooled`] metric over the instances' details (a network flow's
    /// `{"server": …, "client": …}`, else the run's own detail); None where a detail lacks what
    /// pooling needs (the mean is used then).
    fn pooled(&self, _metric: &str, _details: &[&Value]) -> Option<f64> {
        None
    }
    /// Memory the workload allocates inside the environment, to check it fits a guest's.
    fn memory_needed(&self, _p: &Params) -> Option<u64> {
        None
    }
    /// The largest Ethernet frame (FCS included) this workload puts on the wire, so that a run
    /// is refused before it starts when the lab's MTU cannot carry it (frame − 18 ≤ MTU).
    fn largest_frame(&self, _p: &Params) -> Option<u64> {
        None
    }
    /// The metric a shaped link bounds, and how, so that the report can print the link's
    /// analytic ceiling next to the measurement (bulk TCP: goodput; UDP: datagrams per second).
    fn link_bound(&self, _p: &Params) -> Option<(&'static str, LinkBound)> {
        None
    }
    /// How long one trial is planned to take, ms (the report calls a trial far longer stalled).
    /// Default: the `duration` parameter, where the workload has one.
    fn planned_ms(&self, p: &Params) -> Option<f64> {
        p.opt_f64("duration").filter(|d| *d > 0.0)
    }
    /// True for workloads that write files: they need the environment's scratch disk
    /// ([`RunCtx::scratch`]), and the orchestrator stores what backs it with every trial.
    fn needs_scratch(&self) -> bool {
        false
    }
    /// True for network workloads: one server and one client per flow, paired by the orchestrator.
    fn needs_peer(&self) -> bool {
        false
    }
    /// True for a network workload whose sender goes on without waiting for answers (a stream):
    /// its packets are a pipeline, each costing its way through the stack in bulk, not a round
    /// trip's wake-ups — the explain model prices them so (docs/explain.md, "Packets").
    fn streams(&self) -> bool {
        false
    }
    /// Checks that need the host (a socket buffer the kernel allows), before anything is created.
    fn check(&self, _p: &Params) -> Result<(), ParamError> {
        Ok(())
    }
    /// Combines the server's and the client's samples of one flow into the flow's samples (e.g.
    /// loss needs the sender's count and the receiver's). Default: both, as they are.
    fn merge(&self, server: &Output, client: &Output) -> Vec<Sample> {
        server.samples.iter().chain(&client.samples).cloned().collect()
    }
    /// True for a workload whose servers run in every instance of the environment and whose one
    /// client runs on the lab's tester against all of them (`pfs`: a file system across the N
    /// instances); the orchestrator starts the servers, gives instance 0 the others' addresses,
    /// runs the client, then stops the servers.
    fn cluster(&self) -> bool {
        false
    }
    /// True for a service (`apps`): its server runs in the environment (`phase = server`) while
    /// the orchestrator runs its client on the tester phase by phase — the capacity, then each
    /// offered load — and stops the server after the last (`trial.rs`, `service_trial`).
    fn service(&self) -> bool {
        false
    }
    /// True for a procedure the orchestrator drives as many steps of another workload (RFC 2544:
    /// steps of `frames`); the agent never runs it itself.
    fn procedure(&self) -> bool {
        false
    }
    /// Keys whose list value is one set (`tests = [throughput, latency]`), not a sweep.
    fn set_params(&self) -> &'static [&'static str] {
        &[]
    }
    /// Keys swept over these values when the user gives none (RFC 2544: every frame size).
    fn default_sweep(&self) -> &'static [(&'static str, &'static [&'static str])] {
        &[]
    }
    /// Other names accepted for a key (`frame_sizes` for `frame_size`).
    fn aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// (repetitions, warm-ups) when the experiment sets neither and every case is of this kind: a
    /// procedure is already many trials.
    fn default_reps(&self) -> Option<(u32, u32)> {
        None
    }
    /// Runs once with parameters already resolved against [`Workload::params`].
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, Error>;
}

/// The trial length a calibrated workload's operation count is chosen for (see
/// [`Workload::calibrates`]), on the host's clock.
pub const TARGET_TIME: ParamSpec = ParamSpec {
    name: "target_time",
    kind: ParamKind::Duration { min_ms: 10, max_ms: 600_000 },
    default: Some("200ms"),
    help: "how long a trial should take when the operation count is left out: the count is calibrated to it in each environment (Google Benchmark's and criterion's way)",
};

/// The operation count `key` of a calibrated workload, or why there is none: `virtperf run`
/// calibrates it; a run without the orchestrator must give it.
pub fn counted(p: &Params, key: &str) -> Result<u64, ParamError> {
    p.opt_u64(key).ok_or_else(|| {
        ParamError::new(
            key,
            format!("left out: `virtperf run` calibrates it to target_time in each environment; give {key}=N to run the workload alone"),
        )
    })
}

/// How N instances' values of a metric add up into one trial's aggregate (seed 000's table of N VMs
/// on one link; see [`Workload::aggregation`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregation {
    /// A flow's rate: the flows' counts (their detail's `series[name]`, [`net::series`]) added over
    /// the one window where every flow runs, on one clock, times `scale` (counts per second → the
    /// metric's unit). Where the flows' series are not on one clock, each instance's own rate, added.
    Window {
        series: &'static str,
        scale: f64,
    },
    /// Added: counts (retransmits, drops) and rates of work each instance does on its own (Mops/s).
    Sum,
    /// The mean over the instances: times, latencies, utilisations.
    Mean,
    /// The largest (a worst case) / the smallest.
    Max,
    Min,
    /// Computed from the instances' pooled detail ([`Workload::pooled`]: merged latency histograms,
    /// summed sent and received counts); the mean where the detail is missing.
    Pooled,
}

impl Aggregation {
    /// The name for reports and stored detail.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Window { .. } => "sum over one window",
            Aggregation::Sum => "sum",
            Aggregation::Mean => "mean",
            Aggregation::Max => "max",
            Aggregation::Min => "min",
            Aggregation::Pooled => "pooled",
        }
    }
}

/// Merges the sparse `(value, count)` histograms at `key` of `details` (found by `at`); None when
/// one is missing.
pub fn merged_histogram(
    details: &[&Value],
    at: impl Fn(&Value) -> Option<&Value>,
) -> Option<Vec<(f64, u64)>> {
    let mut all: Vec<(f64, u64)> = Vec::new();
    for d in details {
        for b in at(d)?.as_array()? {
            all.push((b.get(0)?.as_f64()?, b.get(1)?.as_u64()?));
        }
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    (!all.is_empty()).then_some(all)
}

/// The `q` quantile (0..=1) and the mean of a merged histogram.
pub fn histogram_quantile(h: &[(f64, u64)], q: f64) -> f64 {
    let total: u64 = h.iter().map(|b| b.1).sum();
    let rank = ((total.saturating_sub(1)) as f64 * q).round() as u64;
    let mut seen = 0u64;
    for (v, c) in h {
        seen += c;
        if seen > rank {
            return *v;
        }
    }
    h.last().map_or(0.0, |b| b.0)
}

pub fn histogram_mean(h: &[(f64, u64)]) -> f64 {
    let total: u64 = h.iter().map(|b| b.1).sum();
    h.iter().map(|(v, c)| v * *c as f64).sum::<f64>() / total.max(1) as f64
}

/// Unit tests that time or pace things, or load the CPUs, hold this so they do not skew each other.
#[cfg(test)]
pub(crate) fn cpu_heavy() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn sample(metric: &str, value: f64, unit: &str) -> Sample {
    Sample { metric: metric.to_string(), value, unit: unit.to_string() }
}

pub use crate::clock::now_ns;
