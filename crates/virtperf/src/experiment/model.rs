//! What an experiment is once read: where each value came from, the error that names it, the
//! environments, cases, lab and settings — the types the front ends (`file.rs`, `flags.rs`) and
//! the validator (`validate.rs`) share.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;
use virtperf_workload::Raw;

use crate::lab::LabSpec;

/// Where a value came from, for error messages.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    File { path: String, line: usize },
    Flag { flag: &'static str, value: String },
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{path}:{line}"),
            Origin::Flag { flag, value } => write!(f, "{flag} {value}"),
            Origin::Default => write!(f, "(default)"),
        }
    }
}

/// A bad experiment: where, which key, what is wrong and what is expected.
#[derive(Debug, Clone, PartialEq)]
pub struct InputError {
    pub origin: Origin,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(k) => write!(f, "{}: key `{}`: {}", self.origin, k, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

impl std::error::Error for InputError {}

pub(super) fn err(origin: &Origin, key: Option<&str>, message: impl Into<String>) -> InputError {
    InputError { origin: origin.clone(), key: key.map(str::to_string), message: message.into() }
}

/// In which order trials run. `random` (the default) shuffles every repetition's
/// (environment, case) pairs with the seed; `interleaved` cycles through them in a fixed order;
/// `sequential` runs all repetitions of one pair before the next (drift then biases results; the
/// report says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Case groups: each round runs one case after another, every environment's trial of that
    /// case back to back in random order, so an environment's trial and its baseline's are a pair
    /// that shared whatever the host did in those seconds (the default).
    Paired,
    Random,
    Interleaved,
    Sequential,
}

impl Order {
    pub const NAMES: &'static [&'static str] = &["paired", "random", "interleaved", "sequential"];
    pub fn parse(s: &str) -> Option<Order> {
        match s {
            "paired" => Some(Order::Paired),
            "random" => Some(Order::Random),
            "interleaved" => Some(Order::Interleaved),
            "sequential" => Some(Order::Sequential),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Paired => "paired",
            Order::Random => "random",
            Order::Interleaved => "interleaved",
            Order::Sequential => "sequential",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EnvDef {
    pub name: String,
    pub kind: String,
    /// Resolved parameters (defaults filled, normalised).
    pub params: BTreeMap<String, Value>,
    /// As written, for re-rendering the experiment.
    pub raw: Vec<(String, Raw)>,
    /// How many copies run at once, each a whole instance with its own lab address, all
    /// measured together (seed 000: 1, 2 and 4 VMs sharing one host and one link).
    pub instances: u32,
    /// Its instances are asked for all at once (`start = "together"`), not one after another:
    /// a launch block measures a concurrent start (docs/lifecycle.md).
    pub together: bool,
    /// The environment as written before an `instances` sweep split it (its name without the
    /// `[instances=N]` suffix): the seed-000 table groups by it.
    pub group: String,
    /// The `[[host]]` it runs on; None: this machine.
    pub host: Option<String>,
    /// Which `[[env]]` (or `--env`) it came from, for messages that point at the file.
    pub item: usize,
    /// The environment this one's cost is also stated against (`against = "NAME"`; a knob's
    /// variant, `knobs = [...]`, against the environment as given: docs/knobs.md).
    pub against: Option<String>,
}

/// Most instances of one environment.
pub const MAX_INSTANCES: i64 = 64;

/// One workload line, possibly with swept parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadDef {
    pub name: String,
    pub kind: String,
    /// As written; a key with several values is swept.
    pub raw: Vec<(String, Vec<Raw>)>,
}

/// One point of a sweep: a workload with every parameter fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub workload: String,
    pub kind: String,
    /// `name` plus the swept values, e.g. `udp [frame_size=64]`.
    pub label: String,
    pub params: BTreeMap<String, Value>,
    /// Background load during each trial (the `load*` keys), None at 0 %.
    pub load: Option<LoadSpec>,
    /// A network workload: runs between an environment and the lab's tester.
    pub network: bool,
    /// `pairs = "all"`: runs between every ordered pair of environments (the practicum's
    /// all-pairs table) instead of each environment with the tester.
    pub matrix: bool,
}

/// Where the softloader runs during a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOn {
    Dut,
    Tester,
}

/// Seed 000's softloader beside a workload: `load = {percent = 90, on = "dut", cpus = 1}` in a
/// file, `load=90,load_on=dut,load_cpus=1` on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSpec {
    pub percent: f64,
    pub on: LoadOn,
    /// Loader threads (each one a busy/sleep cycle on whichever CPU the scheduler gives it).
    pub cpus: u32,
}

/// Keys of the `[lab]` table / `--lab` flag.
pub const LAB_KEYS: &[&str] = &[
    "mtu",
    "rate",
    "delay",
    "loss",
    "tester_cpu",
    "tester_host",
    "switch",
    "switch_cpus",
    "switch_cap",
    "switch_vcpus",
    "switch_guest",
];

#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    pub name: String,
    pub reps: u32,
    pub warmup: u32,
    pub order: Order,
    pub seed: u64,
    pub timeout_ms: u64,
    /// Pause (cgroup freezer) the environments not taking part in a trial while it runs.
    pub freeze_idle: bool,
    /// Calibrated per-operation workloads run the same count in every environment (`counts =
    /// "equal"`, the default: the smallest of their 0.2 s counts, the slowest environment's), so
    /// a ratio compares equal work; `"each"`: every environment its own count.
    pub equal_counts: bool,
    pub envs: Vec<EnvDef>,
    pub workloads: Vec<WorkloadDef>,
    pub cases: Vec<Case>,
    /// The private network (used when a case is a network workload).
    pub lab: LabSpec,
    /// The `[lab]` keys as written, for re-rendering.
    pub lab_raw: Vec<(String, Raw)>,
    /// Other machines reached over SSH (`[[host]]`).
    pub hosts: Vec<HostDef>,
    /// Parameters sized from the host's facts (not given), with any clamp and its reason.
    pub sizings: Vec<Sizing>,
    /// Launches of each environment (`launches = L`, a level of repetition): `reps` repetitions
    /// run on each, the environment torn down and launched afresh between its blocks.
    pub launches: u32,
    /// Precision mode: further repetitions (or launches) until each overhead ratio's interval is
    /// narrow enough, within a budget. `reps` and `launches` are then the minimum.
    pub precision: Option<Precision>,
    /// Environments the host cannot run are left out (with doctor's reason) instead of refusing
    /// the run (`skip_unavailable = true`: the default experiment runs what the host can).
    pub skip_unavailable: bool,
    /// `explain = true`: every warm-up counts its events, and the mechanism cases the model needs
    /// are added where missing (docs/explain.md), so the report can say why each overhead is what
    /// it is.
    pub explain: bool,
}

/// `precision = "2%"`, `budget = "5m"`: the stopping rule of precision mode (docs/methodology.md).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Precision {
    /// Target half-width of each overhead ratio's 95 % CI, in % of the ratio (2 = ±2 %).
    pub percent: f64,
    /// Wall time after which no further repetition starts.
    pub budget_ms: u64,
}

/// Precision mode's budget when only `precision` is given.
pub const DEFAULT_BUDGET_MS: u64 = 5 * 60_000;

pub use virtperf_record::store::Sizing;

impl Experiment {
    pub fn has_network(&self) -> bool {
        self.cases.iter().any(|c| c.network)
    }
}

pub const DEFAULT_TIMEOUT_MS: u64 = 300_000;

/// The longest trial deadline: a day. Nothing virtperf runs takes longer in one trial (RFC 2544's
/// full procedure at one frame size takes hours); a deadline beyond it is a typo, and a year's
/// worth of milliseconds overflowed the clocks it is added to.
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// The longest precision budget: a week.
pub const MAX_BUDGET_MS: u64 = 7 * 86_400_000;

/// The largest experiment file read: 1 MiB (the largest example is a few kilobytes; `/dev/zero`
/// was read until memory ran out).
pub const MAX_EXPERIMENT_BYTES: u64 = 1 << 20;

pub const MAX_REPS: i64 = 10_000_000;

/// Most sweep points of one workload (the product of its lists' lengths).
pub const MAX_CASES: usize = 10_000;

/// Most trials of one run (each is a row in the database and an entry of the stored plan).
pub const MAX_TRIALS: u64 = 10_000_000;

/// A run setting or a list item before validation.
#[derive(Debug, Clone)]
pub struct RawSetting {
    pub value: Raw,
    pub origin: Origin,
}

#[derive(Debug, Clone)]
pub struct RawItem {
    pub origin: Origin,
    pub kind: String,
    pub name: Option<String>,
    pub params: Vec<(String, Vec<Raw>, Origin)>,
    /// The text that a default label is made of (`memcpy:size=10MiB`).
    pub written: String,
}

#[derive(Debug, Clone, Default)]
pub struct RawExperiment {
    pub settings: BTreeMap<String, RawSetting>,
    pub envs: Vec<RawItem>,
    pub workloads: Vec<RawItem>,
    /// `[[host]]` tables: where each was written, and its keys.
    pub hosts: Vec<(Origin, Vec<RawKey>)>,
}

/// A key of a table as written: its name, its value, where.
pub type RawKey = (String, Raw, Origin);

/// Another machine, reached over SSH, where environments may run (`host = "NAME"` on an
/// environment; docs/remote.md).
#[derive(Debug, Clone, PartialEq)]
pub struct HostDef {
    pub name: String,
    /// The ssh destination (`root@hostB`, or a `Host` of `ssh_config`).
    pub ssh: String,
    /// An ssh configuration file to use instead of the user's (`ssh -F`).
    pub ssh_config: Option<String>,
    /// For network workloads: the host's address on the path under test (its agents bind it).
    pub addr: Option<std::net::IpAddr>,
    /// For network workloads: this machine's address on that path (the tester binds it).
    pub local_addr: Option<std::net::IpAddr>,
}

/// The keys of a `[[host]]` table.
pub const HOST_KEYS: &[&str] = &["name", "ssh", "ssh_config", "addr", "local_addr"];

pub use virtperf_record::store::LOCAL_HOST;

pub(super) fn toml_value(r: &Raw) -> String {
    match r {
        Raw::Str(s) => toml_edit::Value::from(s.as_str()).to_string().trim().to_string(),
        Raw::Int(i) => i.to_string(),
        Raw::Float(f) => format!("{f:?}"),
        Raw::Bool(b) => b.to_string(),
    }
}

impl Experiment {
    /// Renders the experiment as TOML (stored in the run's manifest; `--resume` re-reads it).
    pub fn to_toml(&self) -> String {
        let mut s = String::new();
        s += &format!("name = {}\n", toml_value(&Raw::Str(self.name.clone())));
        s += &format!(
            "reps = {}\nwarmup = {}\norder = \"{}\"\nseed = {}\ntimeout = \"{}ms\"\nfreeze_idle = {}\n",
            self.reps,
            self.warmup,
            self.order.as_str(),
            self.seed,
            self.timeout_ms,
            self.freeze_idle
        );
        if self.launches != 1 {
            s += &format!("launches = {}\n", self.launches);
        }
        if !self.equal_counts {
            s += "counts = \"each\"\n";
        }
        if let Some(p) = &self.precision {
            s += &format!("precision = \"{}%\"\nbudget = \"{}ms\"\n", p.percent, p.budget_ms);
        }
        if self.skip_unavailable {
            s += "skip_unavailable = true\n";
        }
        if self.explain {
            s += "explain = true\n";
        }
        if !self.lab_raw.is_empty() {
            s += "\n[lab]\n";
            for (k, v) in &self.lab_raw {
                s += &format!("{k} = {}\n", toml_value(v));
            }
        }
        for h in &self.hosts {
            s += &format!(
                "\n[[host]]\nname = {}\nssh = {}\n",
                toml_value(&Raw::Str(h.name.clone())),
                toml_value(&Raw::Str(h.ssh.clone()))
            );
            if let Some(c) = &h.ssh_config {
                s += &format!("ssh_config = {}\n", toml_value(&Raw::Str(c.clone())));
            }
            for (k, a) in [("addr", h.addr), ("local_addr", h.local_addr)] {
                if let Some(a) = a {
                    s += &format!("{k} = \"{a}\"\n");
                }
            }
        }
        for e in &self.envs {
            s += &format!(
                "\n[[env]]\nkind = \"{}\"\nname = {}\n",
                e.kind,
                toml_value(&Raw::Str(e.name.clone()))
            );
            if let Some(h) = &e.host {
                s += &format!("host = {}\n", toml_value(&Raw::Str(h.clone())));
            }
            for (k, v) in &e.raw {
                s += &format!("{k} = {}\n", toml_value(v));
            }
            if e.instances != 1 {
                s += &format!("instances = {}\n", e.instances);
            }
            if e.together {
                s += "start = \"together\"\n";
            }
            if let Some(a) = &e.against {
                s += &format!("against = {}\n", toml_value(&Raw::Str(a.clone())));
            }
        }
        for w in &self.workloads {
            s += &format!(
                "\n[[workload]]\nkind = \"{}\"\nname = {}\n",
                w.kind,
                toml_value(&Raw::Str(w.name.clone()))
            );
            for (k, vs) in &w.raw {
                if vs.len() == 1 {
                    s += &format!("{k} = {}\n", toml_value(&vs[0]));
                } else {
                    s += &format!("{k} = [{}]\n", vs.iter().map(toml_value).collect::<Vec<_>>().join(", "));
                }
            }
        }
        s
    }
}
