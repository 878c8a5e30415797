//! The rows a stored run is made of, as the store writes and reads them: a run's environments,
//! cases (each with its record), planned trials and their outcomes, launches, calibrations; the
//! statuses stored by name; the metrics the orchestrator adds itself.

use std::collections::BTreeMap;

use virtperf_proto::Sample;

use crate::catalog::{CaseRecord, MetricRecord, Metrics};

/// Metrics the orchestrator itself adds to a trial's samples (a workload's own are named by its
/// `MetricSpec`s): host CPU per Gbit received, of stream workloads…
pub const CPU_PER_GBIT: &str = "cpu_per_gbit";

/// Host CPU time of the lab's switch during a network trial (OVS's daemon, the driver domain's
/// QEMU), ms: xenmon's dom0 line. The kernel's bridge has no process and no such row.
pub const SWITCH_CPU: &str = "switch_cpu_time";

/// …and, in an N-instance trial, how far apart the instances started (ms).
pub const START_SKEW: &str = "start_skew";

/// The name that means this machine in `host = …` (an environment's stored host is NULL there).
pub const LOCAL_HOST: &str = "local";

/// A parameter virtperf sized from the host because the experiment left it out (STREAM's arrays
/// from the last-level cache), as derived and as used once clamped to what every environment can
/// hold: recorded in the run's manifest and said by the report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sizing {
    /// The case's label; for a setting of an environment (a scratch `disk` given by default), the
    /// environment's name.
    pub case: String,
    pub key: String,
    /// How the host decided it: `STREAM's rule: 4 × the host's 260 MiB last-level cache per array`.
    pub rule: String,
    pub derived: serde_json::Value,
    pub used: serde_json::Value,
    /// What the workload allocates with the derived value, and with the one used.
    pub bytes_derived: u64,
    pub bytes_used: u64,
    /// Why the derived value was clamped (None: it was used as derived).
    pub limit: Option<String>,
}

impl Sizing {
    /// One line: `stream: elements = 20971520 (480 MiB) instead of 136314880 (3120 MiB, STREAM's
    /// rule: …): environment `uml` has mem = 640 MiB, and a workload may take 3/4 of it (…)`.
    pub fn line(&self) -> String {
        use crate::units::mib;
        match &self.limit {
            Some(why) => format!(
                "{}: {} = {} ({}) instead of {} ({}, {}): {why}",
                self.case,
                self.key,
                self.used,
                mib(self.bytes_used),
                self.derived,
                mib(self.bytes_derived),
                self.rule
            ),
            None => format!(
                "{}: {} = {} ({}; {})",
                self.case,
                self.key,
                self.used,
                mib(self.bytes_used),
                self.rule
            ),
        }
    }
}

/// The pilots a run's manifest records (`precision.pilots`), empty where none.
pub fn pilots_of(manifest: &serde_json::Value) -> std::collections::BTreeMap<String, u32> {
    manifest["precision"]["pilots"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), u32::try_from(v.as_u64()?).ok()?))).collect())
        .unwrap_or_default()
}

#[derive(Debug, Clone)]
pub struct PlannedTrial {
    pub id: i64,
    pub seq: i64,
    pub env_idx: usize,
    pub case_idx: usize,
    pub rep: i64,
    pub warmup: bool,
    /// All-pairs trials: the environment at the other end (env_idx sends to it).
    pub peer_idx: Option<usize>,
    /// The planned launch (0 ≤ block < launches): each block of an environment runs on a launch
    /// of its own.
    pub block: u32,
}

/// Declares a status stored as lowercase text: its variants and their names, `as_str`, `Display`,
/// and the SQLite conversions (an unknown name read back is an error, not a silent default).
macro_rules! stored_status {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($(#[$vdoc])* $v),+ }
        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$v),)+ _ => None }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
        impl rusqlite::types::FromSql for $name {
            fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let s = v.as_str()?;
                $name::parse(s).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(format!("unknown {} `{s}`", stringify!($name)).into())
                })
            }
        }
    };
}

stored_status! {
    /// Where a trial is (`trials.status`).
    TrialStatus {
        /// Planned, not yet run (a resumed run runs these).
        #[default]
        Pending = "pending",
        Ok = "ok",
        Failed = "failed",
        /// Not run: its environment could not be launched.
        Skipped = "skipped",
    }
}

stored_status! {
    /// How a launch of an environment ended (`instances.status`).
    LaunchStatus {
        /// Its agent said hello.
        #[default]
        Ready = "ready",
        Failed = "failed",
    }
}

stored_status! {
    /// Where a run is (`runs.status`).
    RunStatus {
        #[default]
        Running = "running",
        Completed = "completed",
        /// Stopped by Ctrl-C or SIGTERM: `run --resume` finishes it.
        Interrupted = "interrupted",
        /// Stopped before its trials (the lab or a preparation failed).
        Failed = "failed",
    }
}

/// A value of a completed repetition: (environment, case, launch, metric, value).
/// A measured value: (environment, case, launch id, metric, value, block, rep).
pub type MeasuredValue = (usize, usize, Option<i64>, String, f64, u32, i64);

/// Host CPU samples of a trial: (role, ms since the trial started, cumulative CPU ns).
pub type CpuSeries = Vec<(String, f64, i64)>;

/// Everything stored of one run, read once ([`Store::load`]): the report and every output are
/// built from it, none reads the database again.
#[derive(Debug, Clone, Default)]
pub struct RunRows {
    pub run_id: i64,
    pub info: RunInfo,
    pub envs: Vec<EnvRow>,
    pub cases: Vec<CaseRow>,
    /// Every metric the run's build declared (figures not a case's own).
    pub metrics: Metrics,
    pub trials: Vec<TrialRow>,
    /// Per-operation counts by (environment, case).
    pub calibrations: BTreeMap<(usize, usize), Calibration>,
    /// Each ready launch's start time: (environment, ms).
    pub starts: Vec<(usize, f64)>,
    /// Each ready launch's phases and memory, where its run stored them (runs of schema 11 on).
    pub lifecycles: Vec<LaunchLife>,
    /// Each start of many instances at once (`start = "together"`; schema 12 on).
    pub together: Vec<StartTogether>,
    /// The kernel each ready launch's agent said it runs on: (environment, view; schema 13 on).
    pub kernel_views: Vec<(usize, KernelView)>,
    /// Each launch's clock rate against the host's: (environment, span s, ppm, uncertainty ppm).
    pub clock_rates: Vec<(usize, f64, f64, f64)>,
    /// Each trial's non-scalar detail (JSON) and host CPU series, by trial id.
    pub details: BTreeMap<i64, (Option<serde_json::Value>, CpuSeries)>,
    /// How attempts before `--retry-failed` ended: (status, reason, how many).
    pub retried: Vec<(String, String, u64)>,
}

impl RunRows {
    /// A trial's detail, where it has one.
    pub fn detail(&self, trial_id: i64) -> Option<&serde_json::Value> {
        self.details.get(&trial_id).and_then(|d| d.0.as_ref())
    }
    /// A trial's host CPU series (empty where none was kept).
    pub fn series(&self, trial_id: i64) -> &[(String, f64, i64)] {
        self.details.get(&trial_id).map_or(&[], |d| d.1.as_slice())
    }
}

#[derive(Debug, Clone, Default)]
pub struct TrialOutcome {
    pub status: TrialStatus,
    pub reason: Option<String>,
    pub host_ns: Option<u64>,
    pub guest_ns: Option<u64>,
    pub host_cpu_ns: Option<u64>,
    pub guest_cpu_ns: Option<u64>,
    pub samples: Vec<Sample>,
    /// Host CPU of the tester (network workloads).
    pub tester_cpu_ns: Option<u64>,
    /// Non-scalar detail (JSON), e.g. latency histograms.
    pub extra: Option<serde_json::Value>,
    /// Several instances: each one's own samples (instance index, sample); `samples` then holds
    /// the aggregates.
    pub instance_samples: Vec<(u32, Sample)>,
    /// (role, t_ms, cumulative cpu_ns) samples taken during the trial.
    pub cpu_series: Vec<(&'static str, f64, u64)>,
    /// Armed trials: the idle round trip subtracted from `host_ns`, and its spread.
    pub rtt_ns: Option<u64>,
    pub rtt_jitter_ns: Option<u64>,
    /// The launch (`instances.id`) that ran it.
    pub launch_id: Option<i64>,
    /// A calibrated workload: the operations this trial did.
    pub work: Option<u64>,
}

/// One launch of an environment (or of the tester: `env_idx` -1).
#[derive(Debug, Clone, Default)]
pub struct InstanceRecord {
    pub env_idx: i64,
    /// The planned block it was launched for.
    pub block: Option<u32>,
    /// Launch to the agent's hello, host clock.
    pub start_ms: Option<f64>,
    pub rtt_us: Option<f64>,
    pub rtt_jitter_us: Option<f64>,
    pub status: LaunchStatus,
    /// Why a launch failed, one line.
    pub detail: Option<String>,
    /// The console tail of a failed launch.
    pub console: Option<String>,
    /// Where the launch's time went, and what it holds in memory once ready.
    pub lifecycle: Lifecycle,
    /// The kernel its agent runs on, as the agent said (schema 13 on).
    pub kernel_view: Option<KernelView>,
}

/// The kernel an instance's agent runs on, as the agent says it (a guest's own kernel; the host's
/// for a native agent): its release, its command line, and what it says of each CPU vulnerability
/// (`/sys/devices/system/cpu/vulnerabilities`). A guest's words: bounded by the protocol, only
/// ever said as text.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelView {
    pub release: String,
    pub cmdline: String,
    /// (name, its first line), by name: "spectre_v2", "Mitigation: Retpolines; …".
    pub vulnerabilities: Vec<(String, String)>,
}

/// A start of many instances at once: how many were asked for together, how many became ready,
/// how long until the last of them was (host clock), and the host's CPU over that span.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartTogether {
    pub env_idx: usize,
    /// The planned block the instances were launched for.
    pub block: Option<u32>,
    pub asked: u32,
    pub ready: u32,
    /// Asked for to the last of them ready (its hello), ms; where some failed, to the last
    /// start's end, failed or not.
    pub makespan_ms: f64,
    /// Every process of the host over the makespan, ms of CPU (not divided).
    pub host_cpu_ms: Option<f64>,
    /// Why those that did not become ready failed, one line each.
    pub failed: Option<String>,
}

/// A launch in phases (host clock, ms) and its memory once ready and idle (KiB, the host's
/// reading of its processes).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lifecycle {
    /// Asked for to the runtime's or VMM's process started.
    pub prepare_ms: Option<f64>,
    /// That process started to the guest init's first line (guests only).
    pub boot_ms: Option<f64>,
    /// The hello to the first request answered.
    pub first_ms: Option<f64>,
    /// The planned shutdown: asked to stop to everything stopped and removed (stored after it,
    /// by [`super::Store::record_teardown`]; not by the launch's insert).
    pub teardown_ms: Option<f64>,
    pub pss_kib: Option<u64>,
    pub uss_kib: Option<u64>,
    pub rss_kib: Option<u64>,
    pub processes: Option<u32>,
    pub charged_kib: Option<u64>,
    /// How many instances were asked for together with this one (1: alone; schema 12 on).
    pub together: Option<u32>,
    /// The host's CPU over the start (asked for to the last of those started together ready),
    /// divided among them, ms.
    pub host_cpu_ms: Option<f64>,
    /// PSS, USS and the cgroup's charge again at the end of the instance's life, just before
    /// its planned teardown (stored by [`super::Store::record_memory_end`]; schema 13 on).
    pub pss_end_kib: Option<u64>,
    pub uss_end_kib: Option<u64>,
    pub charged_end_kib: Option<u64>,
    /// The host's CPU its processes used idle at the end of its life, % of one CPU (stored by
    /// [`super::Store::record_idle_cpu`]; schema 13 on).
    pub idle_cpu_pct: Option<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub id: i64,
    pub name: String,
    pub status: RunStatus,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub experiment: String,
    pub manifest: serde_json::Value,
}

#[derive(Debug, Clone, Default)]
pub struct EnvRow {
    pub idx: usize,
    pub name: String,
    pub kind: String,
    pub params: serde_json::Value,
    pub instances: u32,
    /// The environment an `instances` sweep split (its own name when not swept).
    pub group: String,
    /// The `[[host]]` it ran on; None: the machine that ran virtperf.
    pub host: Option<String>,
    /// Its kind is the baseline (the bare host): the report's reference.
    pub baseline: bool,
    /// It keeps a clock of its own (a guest, gVisor), which the report checks against the host's.
    pub own_clock: bool,
}

/// An environment of a new run.
#[derive(Debug, Clone)]
pub struct NewEnv {
    pub name: String,
    pub kind: String,
    pub params: serde_json::Value,
    pub runtime: Option<String>,
    pub instances: u32,
    pub group: String,
    pub host: Option<String>,
    /// What the report needs of its kind ([`EnvRow::baseline`], [`EnvRow::own_clock`]).
    pub baseline: bool,
    pub own_clock: bool,
}

impl NewEnv {
    /// An environment of kind `name`, one instance here (tests' runs made by hand).
    pub fn of_kind(name: &str) -> NewEnv {
        NewEnv {
            name: name.into(),
            kind: name.into(),
            params: serde_json::json!({}),
            runtime: None,
            instances: 1,
            group: name.into(),
            host: None,
            baseline: name == "native",
            own_clock: ["gvisor", "uml", "qemu", "libvirt"].contains(&name),
        }
    }
}

impl PlannedTrial {
    /// Trial `i` of a plan alternating between two environments (tests' runs made by hand).
    pub fn alternating(i: i64, case_idx: usize, rep: i64) -> PlannedTrial {
        PlannedTrial {
            id: 0,
            seq: i,
            env_idx: (i % 2) as usize,
            case_idx,
            rep,
            warmup: false,
            peer_idx: None,
            block: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct CaseRow {
    pub idx: usize,
    pub workload: String,
    pub kind: String,
    pub label: String,
    pub params: serde_json::Value,
    /// What it is, as its run recorded it.
    pub record: CaseRecord,
}

impl Default for CaseRecord {
    fn default() -> Self {
        CaseRecord::unknown()
    }
}

/// A new run, as [`Store::create_run`] writes it in its first transaction.
#[derive(Debug, Clone, Copy)]
pub struct NewRun<'a> {
    pub name: &'a str,
    /// The experiment as TOML (re-read by `--resume`).
    pub experiment_toml: &'a str,
    pub manifest: &'a serde_json::Value,
    pub envs: &'a [NewEnv],
    pub cases: &'a [NewCase],
    /// Every metric the build declares.
    pub metrics: &'a [MetricRecord],
    pub plan: &'a [PlannedTrial],
}

/// A case of a new run ([`Store::create_run`]).
#[derive(Debug, Clone)]
pub struct NewCase {
    pub workload: String,
    pub kind: String,
    pub label: String,
    pub params: serde_json::Value,
    pub record: CaseRecord,
}

impl NewCase {
    /// A case named by its kind, with no record of what it is (tests of the store's plumbing).
    pub fn plain(kind: &str, params: serde_json::Value) -> NewCase {
        NewCase {
            workload: kind.into(),
            kind: kind.into(),
            label: kind.into(),
            params,
            record: CaseRecord::unknown(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct TrialRow {
    pub id: i64,
    pub seq: i64,
    pub env_idx: usize,
    pub case_idx: usize,
    pub rep: i64,
    pub warmup: bool,
    pub status: TrialStatus,
    pub reason: Option<String>,
    pub host_ns: Option<i64>,
    pub guest_ns: Option<i64>,
    pub host_cpu_ns: Option<i64>,
    pub guest_cpu_ns: Option<i64>,
    pub tester_cpu_ns: Option<i64>,
    pub peer_idx: Option<usize>,
    pub rtt_ns: Option<i64>,
    pub rtt_jitter_ns: Option<i64>,
    pub block: u32,
    /// The launch that ran it (None: stored before launches were recorded).
    pub launch_id: Option<i64>,
    /// A calibrated workload: the operations of this trial.
    pub work: Option<i64>,
    /// When it ended, ms since the epoch (to the millisecond since trials were stamped so).
    pub finished_ms: Option<f64>,
    /// The trial's own samples (aggregates, when several instances ran).
    pub samples: Vec<Sample>,
    /// Each instance's samples (several instances only).
    pub instance_samples: Vec<(u32, Sample)>,
    /// Several instances of an armed run: each one's (host span, guest span, calibration
    /// median, its spread) in ns, for the clock check (one instance: the trial's own columns).
    pub clock_instances: Vec<[i64; 4]>,
}

/// What calibrating a per-operation workload in an environment found: the operation count that
/// makes a trial last `target_ns` on the host's clock, from armed probe runs of growing counts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// The workload's count parameter (`iterations`, `pages`, `loads`).
    pub param: String,
    pub count: u64,
    pub target_ns: u64,
    /// Each probe run: (count, host ns of its timed region).
    pub probes: Vec<(u64, u64)>,
    /// Why the count stopped short of the target (a memory cap, the parameter's maximum).
    #[serde(default)]
    pub capped: Option<String>,
    /// With equal counts (`counts = "equal"`): this environment's own 0.2 s count, where the
    /// count it runs (`count`, the slowest environment's) is another.
    #[serde(default)]
    pub own: Option<u64>,
}

/// One ready launch's start-up in phases and memory (see [`Lifecycle`]).
#[derive(Debug, Clone, Default)]
pub struct LaunchLife {
    pub env_idx: usize,
    /// The planned block it was launched for: the instances of one block were up together.
    pub block: Option<u32>,
    /// The runtime's or VMM's process started to the agent's hello.
    pub start_ms: f64,
    pub life: Lifecycle,
}
