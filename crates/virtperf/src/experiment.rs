//! Experiments: environments × workloads × parameters × repetitions.
//!
//! Two front ends, one validator: a TOML file (`examples/*.toml`) and `--env/--workload` flags.
//! Both are read into [`RawItem`]s that remember where each value came from ([`Origin`]), then
//! checked against the parameter schemas of each environment and workload kind. Every error names
//! the file and line (or the flag) and the key, and says what is expected. Nothing is created
//! before an experiment passes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;
use toml_edit::{ImDocument, Table};
use virtperf_workload::{params, ParamError, Raw};

use crate::env;
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

fn err(origin: &Origin, key: Option<&str>, message: impl Into<String>) -> InputError {
    InputError { origin: origin.clone(), key: key.map(str::to_string), message: message.into() }
}

/// In which order trials run. `random` (the default) shuffles every repetition's
/// (environment, case) pairs with the seed; `interleaved` cycles through them in a fixed order;
/// `sequential` runs all repetitions of one pair before the next (drift then biases results; the
/// report says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Random,
    Interleaved,
    Sequential,
}

impl Order {
    pub const NAMES: &'static [&'static str] = &["random", "interleaved", "sequential"];
    pub fn parse(s: &str) -> Option<Order> {
        match s {
            "random" => Some(Order::Random),
            "interleaved" => Some(Order::Interleaved),
            "sequential" => Some(Order::Sequential),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
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
    /// The environment as written before an `instances` sweep split it (its name without the
    /// `[instances=N]` suffix): the seed-000 table groups by it.
    pub group: String,
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
pub const LAB_KEYS: &[&str] = &["mtu", "rate", "delay", "loss", "tester_cpu"];

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
    pub envs: Vec<EnvDef>,
    pub workloads: Vec<WorkloadDef>,
    pub cases: Vec<Case>,
    /// The private network (used when a case is a network workload).
    pub lab: LabSpec,
    /// The `[lab]` keys as written, for re-rendering.
    pub lab_raw: Vec<(String, Raw)>,
}

impl Experiment {
    pub fn has_network(&self) -> bool {
        self.cases.iter().any(|c| c.network)
    }
}

pub const DEFAULT_TIMEOUT_MS: u64 = 300_000;
pub const MAX_REPS: i64 = 10_000_000;
/// Most sweep points of one workload (the product of its lists' lengths).
pub const MAX_CASES: usize = 10_000;
/// Most trials of one run (each is a row in the database and an entry of the stored plan).
pub const MAX_TRIALS: u64 = 10_000_000;
const TOP_KEYS: &[&str] =
    &["name", "reps", "warmup", "order", "seed", "timeout", "freeze_idle", "lab", "env", "workload"];

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
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

fn raw_of(v: &toml_edit::Value) -> Option<Raw> {
    match v {
        toml_edit::Value::String(s) => Some(Raw::Str(s.value().clone())),
        toml_edit::Value::Integer(i) => Some(Raw::Int(*i.value())),
        toml_edit::Value::Float(f) => Some(Raw::Float(*f.value())),
        toml_edit::Value::Boolean(b) => Some(Raw::Bool(*b.value())),
        _ => None,
    }
}

/// Reads an experiment file's text into raw items (syntax and shape only).
pub fn read_toml(path: &str, text: &str) -> Result<RawExperiment, InputError> {
    let doc = ImDocument::parse(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        let msg = e.message().trim().to_string();
        err(&Origin::File { path: path.into(), line }, None, format!("TOML syntax error: {msg}"))
    })?;
    let at = |span: Option<std::ops::Range<usize>>| Origin::File {
        path: path.into(),
        line: span.map(|s| line_of(text, s.start)).unwrap_or(1),
    };
    let root: &Table = doc.as_table();
    let mut out = RawExperiment::default();
    for (key, item) in root.iter() {
        let kspan = root.key(key).and_then(|k| k.span());
        let origin = at(kspan.clone().or_else(|| item.span()));
        match key {
            "env" | "workload" => {
                let tables = item.as_array_of_tables().ok_or_else(|| {
                    err(&origin, Some(key), format!("expected a list of tables written [[{key}]]"))
                })?;
                for t in tables.iter() {
                    let raw = read_item(key, t, &at)?;
                    if key == "env" {
                        out.envs.push(raw);
                    } else {
                        out.workloads.push(raw);
                    }
                }
            }
            "lab" => {
                let t = item.as_table().ok_or_else(|| {
                    err(
                        &origin,
                        Some(key),
                        "expected a table written [lab] (keys: mtu, rate, delay, loss, tester_cpu)",
                    )
                })?;
                for (k, v) in t.iter() {
                    let o = at(t.key(k).and_then(|kk| kk.span()).or_else(|| v.span()));
                    let v = v.as_value().and_then(raw_of).ok_or_else(|| {
                        err(&o, Some(&format!("lab.{k}")), "expected a single value (text or number)")
                    })?;
                    out.settings.insert(format!("lab.{k}"), RawSetting { value: v, origin: o });
                }
            }
            k if TOP_KEYS.contains(&k) => {
                let v = item.as_value().and_then(raw_of).ok_or_else(|| {
                    err(&origin, Some(k), "expected a single value (text, integer, number or boolean)")
                })?;
                out.settings.insert(k.to_string(), RawSetting { value: v, origin });
            }
            other => {
                return Err(err(
                    &origin,
                    Some(other),
                    format!("unknown key (known top-level keys: {})", TOP_KEYS.join(", ")),
                ))
            }
        }
    }
    Ok(out)
}

fn read_item(
    what: &str,
    t: &Table,
    at: &dyn Fn(Option<std::ops::Range<usize>>) -> Origin,
) -> Result<RawItem, InputError> {
    let origin = at(t.span());
    let mut kind = None;
    let mut name = None;
    let mut params = Vec::new();
    for (key, item) in t.iter() {
        let o = at(t.key(key).and_then(|k| k.span()).or_else(|| item.span()));
        let value = item.as_value().ok_or_else(|| err(&o, Some(key), "expected a value, not a table"))?;
        if let (true, toml_edit::Value::InlineTable(lt)) = (key == "load", value) {
            // load = {percent = 90, on = "dut", cpus = 1} → load, load_on, load_cpus.
            for (k, v) in lt.iter() {
                let flat = match k {
                    "percent" => "load",
                    "on" => "load_on",
                    "cpus" => "load_cpus",
                    other => {
                        return Err(err(
                            &o,
                            Some(&format!("load.{other}")),
                            "unknown key (known: percent, on, cpus)",
                        ))
                    }
                };
                params.push((flat.to_string(), toml_values(v, &o, flat)?, o.clone()));
            }
            continue;
        }
        match key {
            "kind" => {
                kind = Some(value.as_str().ok_or_else(|| err(&o, Some(key), "expected text"))?.to_string())
            }
            "name" => {
                name = Some(value.as_str().ok_or_else(|| err(&o, Some(key), "expected text"))?.to_string())
            }
            _ => params.push((key.to_string(), toml_values(value, &o, key)?, o)),
        }
    }
    let kind =
        kind.ok_or_else(|| err(&origin, Some("kind"), format!("every [[{what}]] needs `kind = \"...\"`")))?;
    // In a file the default label is the kind; two of a kind need names (checked later).
    let written = kind.clone();
    Ok(RawItem { origin, kind, name, params, written })
}

/// A plain value, or a list of them (a sweep).
fn toml_values(value: &toml_edit::Value, o: &Origin, key: &str) -> Result<Vec<Raw>, InputError> {
    Ok(match value {
        toml_edit::Value::Array(a) => {
            let vals: Option<Vec<Raw>> = a.iter().map(raw_of).collect();
            let vals = vals.ok_or_else(|| err(o, Some(key), "a list may hold only plain values"))?;
            if vals.is_empty() {
                return Err(err(o, Some(key), "an empty list sweeps nothing; give at least one value"));
            }
            vals
        }
        v => vec![raw_of(v).ok_or_else(|| err(o, Some(key), "expected a plain value"))?],
    })
}

/// Parses `--lab key=value[,key=value]...` into `lab.KEY` settings.
pub fn read_lab_flag(value: &str) -> Result<Vec<(String, RawSetting)>, InputError> {
    let origin = Origin::Flag { flag: "--lab", value: value.to_string() };
    let mut out = Vec::new();
    for part in split_top(value, ',') {
        if part.trim().is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=').ok_or_else(|| {
            err(&origin, Some(part.trim()), "expected key=value, e.g. --lab mtu=9000,rate=1gbit")
        })?;
        out.push((format!("lab.{}", k.trim()), RawSetting { value: flag_scalar(v), origin: origin.clone() }));
    }
    Ok(out)
}

pub use virtperf_workload::params::parse_rate_bps;

/// A delay in µs: `0`, `100us`, `1.5ms`, `1s`.
pub fn parse_delay_us(r: &Raw) -> Option<u64> {
    match r {
        Raw::Int(0) => Some(0),
        Raw::Str(s) => {
            let s = s.trim();
            let (num, mult) = if let Some(n) = s.strip_suffix("us") {
                (n, 1.0)
            } else if let Some(n) = s.strip_suffix("ms") {
                (n, 1e3)
            } else if let Some(n) = s.strip_suffix('s') {
                (n, 1e6)
            } else {
                return None;
            };
            let v: f64 = num.trim().parse().ok()?;
            (v >= 0.0 && v.is_finite() && v * mult <= 60e6).then(|| (v * mult).round() as u64)
        }
        _ => None,
    }
}

fn lab_spec(raw: &RawExperiment) -> Result<(LabSpec, Vec<(String, Raw)>), InputError> {
    let mut spec = LabSpec::default();
    let mut written = Vec::new();
    for (k, s) in raw.settings.iter().filter(|(k, _)| k.starts_with("lab.")) {
        let key = &k[4..];
        let bad = |m: String| err(&s.origin, Some(k), m);
        match key {
            "mtu" => match &s.value {
                Raw::Int(m) if (68..=65535).contains(m) => spec.mtu = *m as u32,
                v => {
                    return Err(bad(format!(
                        "got `{v}`: an MTU is an integer from 68 (IPv4's minimum) to 65535"
                    )))
                }
            },
            "rate" => {
                spec.rate_bps = Some(parse_rate_bps(&s.value).ok_or_else(|| {
                    bad(format!(
                        "got `{}`: expected a positive rate such as \"1gbit\", \"100mbit\" or bits/s",
                        s.value
                    ))
                })?)
            }
            "delay" => {
                spec.delay_us = parse_delay_us(&s.value).ok_or_else(|| {
                    bad(format!(
                        "got `{}`: expected a one-way delay from 0 to 60s, e.g. \"100us\" or \"1ms\"",
                        s.value
                    ))
                })?
            }
            "loss" => {
                let v = match &s.value {
                    Raw::Int(i) => Some(*i as f64),
                    Raw::Float(f) => Some(*f),
                    Raw::Str(t) => t.trim().trim_end_matches('%').trim().parse().ok(),
                    Raw::Bool(_) => None,
                };
                match v {
                    Some(p) if (0.0..=100.0).contains(&p) => spec.loss_pct = p,
                    _ => return Err(bad(format!("got `{}`: loss is a percentage from 0 to 100", s.value))),
                }
            }
            "tester_cpu" => {
                let t = s.value.to_string();
                crate::host::check_cpuset(&t).map_err(bad)?;
                spec.tester_cpuset = Some(t);
            }
            other => {
                return Err(err(
                    &s.origin,
                    Some(k),
                    format!("unknown lab key `{other}` (known: {})", LAB_KEYS.join(", ")),
                ))
            }
        }
        written.push((key.to_string(), s.value.clone()));
    }
    Ok((spec, written))
}

/// Takes the `load*` keys out of one sweep point.
fn load_spec(given: &mut BTreeMap<String, Raw>, origin: &Origin) -> Result<Option<LoadSpec>, InputError> {
    let percent = match given.remove("load") {
        None => 0.0,
        Some(Raw::Int(i)) if (0..=100).contains(&i) => i as f64,
        Some(Raw::Float(f)) if (0.0..=100.0).contains(&f) => f,
        Some(v) => {
            return Err(err(
                origin,
                Some("load"),
                format!("got `{v}`: load is a CPU percentage from 0 to 100"),
            ))
        }
    };
    let on = match given.remove("load_on") {
        None => LoadOn::Dut,
        Some(Raw::Str(s)) if s == "dut" => LoadOn::Dut,
        Some(Raw::Str(s)) if s == "tester" => LoadOn::Tester,
        Some(v) => {
            return Err(err(origin, Some("load_on"), format!("got `{v}`, expected \"dut\" or \"tester\"")))
        }
    };
    let cpus = match given.remove("load_cpus") {
        None => 1,
        Some(Raw::Int(i)) if (1..=1024).contains(&i) => i as u32,
        Some(v) => {
            return Err(err(
                origin,
                Some("load_cpus"),
                format!("got `{v}`, expected a number of loader threads from 1 to 1024"),
            ))
        }
    };
    Ok((percent > 0.0).then_some(LoadSpec { percent, on, cpus }))
}

/// `KIND:a=1,key=[1,2],b=2` without `key`: `KIND:a=1,b=2` (`KIND` alone when nothing is left).
fn without_key(written: &str, key: &str) -> String {
    let Some((kind, rest)) = written.split_once(':') else { return written.to_string() };
    let kept: Vec<&str> = split_top(rest, ',')
        .into_iter()
        .filter(|p| p.split_once('=').is_none_or(|(k, _)| k.trim() != key))
        .collect();
    if kept.iter().all(|p| p.trim().is_empty()) {
        kind.to_string()
    } else {
        format!("{kind}:{}", kept.join(","))
    }
}

/// Splits on `sep` outside brackets: `a=1,b=[1,2]` → `a=1`, `b=[1,2]`.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn flag_scalar(s: &str) -> Raw {
    let s = s.trim();
    if let Ok(i) = s.replace('_', "").parse::<i64>() {
        return Raw::Int(i);
    }
    if s.contains('.') {
        if let Ok(f) = s.parse::<f64>() {
            return Raw::Float(f);
        }
    }
    match s {
        "true" => Raw::Bool(true),
        "false" => Raw::Bool(false),
        _ => Raw::Str(s.trim_matches('"').to_string()),
    }
}

/// Parses one `--env`/`--workload` value: `KIND[:key=value[,key=value]...]`, lists as `key=[a,b]`.
pub fn read_flag(flag: &'static str, value: &str) -> Result<RawItem, InputError> {
    let origin = Origin::Flag { flag, value: value.to_string() };
    let (kind, rest) = match value.split_once(':') {
        Some((k, r)) => (k.trim(), Some(r)),
        None => (value.trim(), None),
    };
    if kind.is_empty() {
        return Err(err(&origin, None, "expected KIND[:key=value,...], e.g. memcpy:size=10MiB,copies=10"));
    }
    let mut name = None;
    let mut params = Vec::new();
    for part in rest.map(|r| split_top(r, ',')).unwrap_or_default() {
        if part.trim().is_empty() {
            continue;
        }
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| err(&origin, Some(part.trim()), "expected key=value (lists as key=[a,b])"))?;
        let (k, v) = (k.trim(), v.trim());
        if k == "name" {
            name = Some(v.to_string());
            continue;
        }
        if k == "kind" {
            return Err(err(&origin, Some(k), "the kind is the part before `:`"));
        }
        let vals: Vec<Raw> = match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            Some(inner) => {
                split_top(inner, ',').into_iter().filter(|s| !s.trim().is_empty()).map(flag_scalar).collect()
            }
            None => vec![flag_scalar(v)],
        };
        if vals.is_empty() {
            return Err(err(&origin, Some(k), "an empty list sweeps nothing; give at least one value"));
        }
        params.push((k.to_string(), vals, origin.clone()));
    }
    let written =
        value.split(',').filter(|p| !p.trim_start().starts_with("name=")).collect::<Vec<_>>().join(",");
    let written = written.trim_end_matches(':').to_string();
    Ok(RawItem { origin, kind: kind.to_string(), name, params, written })
}

fn setting_int(s: &RawSetting, key: &str, min: i64, max: i64) -> Result<i64, InputError> {
    match &s.value {
        Raw::Int(i) if (min..=max).contains(i) => Ok(*i),
        v => Err(err(&s.origin, Some(key), format!("got `{v}`, expected an integer from {min} to {max}"))),
    }
}

/// Checks a raw experiment against every kind's schema and expands sweeps into cases.
pub fn validate(raw: &RawExperiment, whole: &Origin) -> Result<Experiment, InputError> {
    let get = |k: &str| raw.settings.get(k);
    let name = match get("name") {
        Some(RawSetting { value: Raw::Str(s), .. }) if !s.trim().is_empty() => s.clone(),
        Some(s) => return Err(err(&s.origin, Some("name"), "expected non-empty text")),
        None => "experiment".to_string(),
    };
    let reps_given = get("reps").map(|s| setting_int(s, "reps", 1, MAX_REPS)).transpose()?;
    let warmup_given = get("warmup").map(|s| setting_int(s, "warmup", 0, 1_000_000)).transpose()?;
    let seed = get("seed").map(|s| setting_int(s, "seed", 0, i64::MAX)).transpose()?.unwrap_or(1) as u64;
    let freeze_idle = match get("freeze_idle") {
        None => true,
        Some(RawSetting { value: Raw::Bool(b), .. }) => *b,
        Some(RawSetting { value: Raw::Str(v), .. }) if v == "true" || v == "false" => v == "true",
        Some(s) => {
            return Err(err(
                &s.origin,
                Some("freeze_idle"),
                format!("got `{}`, expected true or false", s.value),
            ))
        }
    };
    let order = match get("order") {
        None => Order::Random,
        Some(s) => match &s.value {
            Raw::Str(v) if Order::parse(v).is_some() => Order::parse(v).unwrap_or(Order::Random),
            v => {
                return Err(err(
                    &s.origin,
                    Some("order"),
                    format!("got `{v}`, expected one of: {}", Order::NAMES.join(", ")),
                ))
            }
        },
    };
    let timeout_ms = match get("timeout") {
        None => DEFAULT_TIMEOUT_MS,
        Some(s) => match &s.value {
            Raw::Str(v) => match params::parse_duration_ms(v) {
                Some(ms) if ms >= 100 => ms,
                _ => {
                    return Err(err(
                        &s.origin,
                        Some("timeout"),
                        format!("got `{v}`, expected a duration of at least 100ms, e.g. \"30s\""),
                    ))
                }
            },
            v => {
                return Err(err(
                    &s.origin,
                    Some("timeout"),
                    format!("got `{v}`, expected a duration in quotes, e.g. \"30s\""),
                ))
            }
        },
    };

    if raw.envs.is_empty() {
        return Err(err(
            whole,
            Some("env"),
            "no environment: add [[env]] tables or --env KIND (e.g. --env native)",
        ));
    }
    if raw.workloads.is_empty() {
        return Err(err(
            whole,
            Some("workload"),
            "no workload: add [[workload]] tables or --workload KIND (e.g. --workload memcpy)",
        ));
    }

    let mut envs = Vec::new();
    let mut names = BTreeSet::new();
    for item in &raw.envs {
        let kind = env::find(&item.kind).ok_or_else(|| {
            err(
                &item.origin,
                Some("kind"),
                format!("unknown environment kind `{}` (known: {})", item.kind, env::kinds().join(", ")),
            )
        })?;
        let mut given = BTreeMap::new();
        let mut rawv = Vec::new();
        let mut counts: Vec<u32> = vec![1];
        for (k, vals, o) in &item.params {
            if k == "instances" {
                // Any environment; a list is swept (one environment per count).
                counts = vals
                    .iter()
                    .map(|v| match v {
                        Raw::Int(i) if (1..=MAX_INSTANCES).contains(i) => Ok(*i as u32),
                        v => Err(err(
                            o,
                            Some("instances"),
                            format!("got `{v}`, expected a number of instances from 1 to {MAX_INSTANCES}, or a list of them to sweep"),
                        )),
                    })
                    .collect::<Result<_, _>>()?;
                continue;
            }
            if vals.len() != 1 {
                return Err(err(o, Some(k), "environment parameters cannot be swept: declare one environment per value, each with its own name"));
            }
            if given.insert(k.clone(), vals[0].clone()).is_some() {
                return Err(err(o, Some(k), "given twice"));
            }
            rawv.push((k.clone(), vals[0].clone()));
        }
        let params =
            params::resolve(kind.params(), &given).map_err(|ParamError { key: k, message: m }| {
                let o =
                    item.params.iter().find(|p| p.0 == k).map(|p| p.2.clone()).unwrap_or(item.origin.clone());
                err(&o, Some(&k), m)
            })?;
        kind.check(&params).map_err(|e| err(&item.origin, Some(&e.key), e.message))?;
        // Its name as written, less the instance count (which the sweep's names add back).
        let label = item.name.clone().unwrap_or_else(|| without_key(&item.written, "instances"));
        for &n in &counts {
            let name = if counts.len() > 1 { format!("{label} [instances={n}]") } else { label.clone() };
            if !names.insert(name.clone()) {
                return Err(err(
                    &item.origin,
                    Some("name"),
                    format!("two environments are named `{name}`: give each a distinct name="),
                ));
            }
            envs.push(EnvDef {
                name,
                kind: item.kind.clone(),
                params: params.clone(),
                raw: rawv.clone(),
                instances: n,
                group: label.clone(),
            });
        }
    }

    let mut workloads = Vec::new();
    let mut cases = Vec::new();
    let mut wnames = BTreeSet::new();
    for item in &raw.workloads {
        let w = virtperf_workload::find(&item.kind).ok_or_else(|| {
            err(
                &item.origin,
                Some("kind"),
                format!(
                    "unknown workload kind `{}` (known: {})",
                    item.kind,
                    virtperf_workload::kinds().join(", ")
                ),
            )
        })?;
        let mut seen = BTreeSet::new();
        // As written, with the kind's aliases renamed, set-valued keys joined into one value
        // (`tests = [throughput, latency]` is one set, not a sweep) and default sweeps added.
        let mut given_params: Vec<(String, Vec<Raw>, Origin)> = Vec::new();
        for (k, vals, o) in &item.params {
            let k = w.aliases().iter().find(|a| a.0 == k).map(|a| a.1).unwrap_or(k);
            if !seen.insert(k.to_string()) {
                return Err(err(o, Some(k), "given twice"));
            }
            let vals = if w.set_params().contains(&k) && vals.len() > 1 {
                vec![Raw::Str(vals.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","))]
            } else {
                vals.clone()
            };
            given_params.push((k.to_string(), vals, o.clone()));
        }
        for (k, vals) in w.default_sweep() {
            if !seen.contains(*k) {
                let raw =
                    vals.iter().map(|v| v.parse().map(Raw::Int).unwrap_or_else(|_| Raw::Str(v.to_string())));
                given_params.push((k.to_string(), raw.collect(), item.origin.clone()));
            }
        }
        let item_params = &given_params;
        let label = item.name.clone().unwrap_or_else(|| item.written.clone());
        if !wnames.insert(label.clone()) {
            return Err(err(
                &item.origin,
                Some("name"),
                format!("two workloads are named `{label}`: give each a distinct name="),
            ));
        }
        // Cartesian product of the swept values, first key varying slowest.
        let combos = item_params.iter().try_fold(1usize, |n, (_, vals, _)| n.checked_mul(vals.len()));
        if !matches!(combos, Some(n) if n <= MAX_CASES) {
            return Err(err(
                &item.origin,
                None,
                format!(
                    "the sweeps of this workload make {} combinations, more than {MAX_CASES}: sweep fewer values",
                    combos.map_or("too many".to_string(), |n| n.to_string())
                ),
            ));
        }
        let mut points: Vec<Vec<(String, Raw)>> = vec![Vec::new()];
        for (k, vals, _) in item_params {
            points = points
                .into_iter()
                .flat_map(|p| {
                    vals.iter().map(move |v| {
                        let mut q = p.clone();
                        q.push((k.clone(), v.clone()));
                        q
                    })
                })
                .collect();
        }
        let swept: Vec<&String> = item_params.iter().filter(|p| p.1.len() > 1).map(|p| &p.0).collect();
        for point in points {
            let mut given: BTreeMap<String, Raw> = point.iter().cloned().collect();
            let load = load_spec(&mut given, &item.origin)?;
            if load.is_some_and(|l| l.on == LoadOn::Tester) && !w.needs_peer() {
                return Err(err(
                    &item.origin,
                    Some("load_on"),
                    "the tester exists only for network workloads; put the load on the \"dut\"",
                ));
            }
            let matrix = match given.remove("pairs") {
                None => false,
                Some(Raw::Str(s)) if s == "tester" => false,
                Some(Raw::Str(s)) if s == "all" => true,
                Some(v) => {
                    return Err(err(
                        &item.origin,
                        Some("pairs"),
                        format!("got `{v}`, expected \"tester\" (each environment with the tester) or \"all\" (every environment to every other)"),
                    ))
                }
            };
            if matrix && !w.needs_peer() {
                return Err(err(&item.origin, Some("pairs"), "pairs = \"all\" is for network workloads"));
            }
            if matrix && given.contains_key("direction") {
                return Err(err(
                    &item.origin,
                    Some("direction"),
                    "with pairs = \"all\" every ordered pair is measured (both directions): leave direction out",
                ));
            }
            if matrix && load.is_some_and(|l| l.on == LoadOn::Tester) {
                return Err(err(
                    &item.origin,
                    Some("load_on"),
                    "with pairs = \"all\" there is no tester to load",
                ));
            }
            let mut params =
                params::resolve(w.params(), &given).map_err(|ParamError { key: k, message: m }| {
                    let o = item_params
                        .iter()
                        .find(|p| p.0 == k)
                        .map(|p| p.2.clone())
                        .unwrap_or(item.origin.clone());
                    err(&o, Some(&k), m)
                })?;
            // Sizes that follow the host's cache (recorded in the run's manifest), where not given.
            if let Some(llc) = crate::host::llc_bytes() {
                for (k, v) in w.sized_by_cache(llc) {
                    params.entry(k.to_string()).or_insert(v);
                }
            }
            let suffix: Vec<String> =
                point.iter().filter(|(k, _)| swept.contains(&k)).map(|(k, v)| format!("{k}={v}")).collect();
            let case_label =
                if suffix.is_empty() { label.clone() } else { format!("{label} [{}]", suffix.join(",")) };
            w.check(&virtperf_workload::Params(&params)).map_err(|ParamError { key: k, message: m }| {
                let o =
                    item_params.iter().find(|p| p.0 == k).map(|p| p.2.clone()).unwrap_or(item.origin.clone());
                err(&o, Some(&k), m)
            })?;
            cases.push(Case {
                workload: label.clone(),
                kind: item.kind.clone(),
                label: case_label,
                params,
                load,
                network: w.needs_peer(),
                matrix,
            });
        }
        workloads.push(WorkloadDef {
            name: label,
            kind: item.kind.clone(),
            raw: item.params.iter().map(|(k, v, _)| (k.clone(), v.clone())).collect(),
        });
    }
    let (lab, lab_raw) = lab_spec(raw)?;
    // A procedure (RFC 2544) is many trials already: its kind may ask for fewer repetitions.
    let procedure_reps: Option<(u32, u32)> = raw
        .workloads
        .iter()
        .map(|i| virtperf_workload::find(&i.kind).and_then(|w| w.default_reps()))
        .try_fold((u32::MAX, u32::MAX), |a, d| d.map(|d| (a.0.min(d.0), a.1.min(d.1))));
    let reps = reps_given.map(|r| r as u32).or(procedure_reps.map(|p| p.0)).unwrap_or(10);
    let warmup = warmup_given.map(|r| r as u32).or(procedure_reps.map(|p| p.1)).unwrap_or(1);
    for c in cases.iter().filter(|c| c.network) {
        if let Some(fs) = c.params.get("frame_size").and_then(Value::as_u64) {
            // An Ethernet frame carries MTU + 18 bytes (header 14, FCS 4).
            if fs > lab.mtu as u64 + 18 {
                let wd = raw.workloads.iter().find(|i| i.name.as_deref().unwrap_or(&i.written) == c.workload);
                return Err(err(
                    wd.map(|i| &i.origin).unwrap_or(whole),
                    Some("frame_size"),
                    format!(
                        "a {fs}-byte frame does not fit the lab's MTU of {} (frame − 18 ≤ MTU): lower frame_size or raise --lab mtu=",
                        lab.mtu
                    ),
                ));
            }
        }
    }
    if cases.iter().any(|c| c.matrix) && envs.len() < 2 {
        return Err(err(whole, Some("pairs"), "pairs = \"all\" needs at least two environments"));
    }
    if cases.iter().any(|c| c.network) {
        for e in &envs {
            if !crate::env::find(&e.kind).is_some_and(|k| k.joins_lab()) {
                let can: Vec<&str> =
                    crate::env::REGISTRY.iter().filter(|k| k.joins_lab()).map(|k| k.kind()).collect();
                return Err(err(
                    whole,
                    Some("env"),
                    format!(
                        "environment kind `{}` cannot join the lab yet; network workloads run on: {}",
                        e.kind,
                        can.join(", ")
                    ),
                ));
            }
        }
        if envs.iter().map(|e| e.instances as usize).sum::<usize>() > crate::lab::MAX_ENDPOINTS {
            return Err(err(
                whole,
                Some("env"),
                format!(
                    "at most {} environment instances per run with network workloads (each has a lab address)",
                    crate::lab::MAX_ENDPOINTS
                ),
            ));
        }
    }
    // Several instances of an environment: what each would need to be compared against.
    if let Some(e) = envs.iter().find(|e| e.instances > 1) {
        if let Some(c) = cases.iter().find(|c| c.matrix) {
            return Err(err(
                whole,
                Some("instances"),
                format!(
                    "environment `{}` runs {} instances, and `{}` has pairs = \"all\": a pair of environments is two agents, not two groups; use instances with the lab's tester (pairs = \"tester\")",
                    e.name, e.instances, c.label
                ),
            ));
        }
        if let Some(c) =
            cases.iter().find(|c| virtperf_workload::find(&c.kind).is_some_and(|w| w.procedure()))
        {
            return Err(err(
                whole,
                Some("instances"),
                format!("`{}` is an RFC 2544 procedure, which measures one device under test: give environment `{}` instances = 1", c.label, e.name),
            ));
        }
    }
    // Every instance of every environment stays up for the whole run: their memory together must
    // fit the host's.
    let host_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find_map(|l| {
            l.strip_prefix("MemTotal:")
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
    });
    if let Some(kib) = host_kib {
        let host = kib * 1024;
        let mut total = 0u64;
        for e in &envs {
            if let Some((_, m)) = env::find(&e.kind).and_then(|k| k.memory_bytes(&e.params)) {
                total = total.saturating_add(u64::from(e.instances).saturating_mul(m));
            }
        }
        if total > host / 10 * 8 {
            let e = envs.iter().max_by_key(|e| e.instances).map(|e| e.name.clone()).unwrap_or_default();
            return Err(err(
                whole,
                Some("instances"),
                format!(
                    "the guests of this run would hold {} MiB together (every instance stays up for the whole run), more than 80 % of this host's {} MiB: fewer instances (e.g. of `{e}`) or less memory each",
                    total >> 20,
                    host >> 20
                ),
            ));
        }
    }
    // A workload's memory must fit every guest that runs it (with room for the guest's own).
    for c in &cases {
        let Some(w) = virtperf_workload::find(&c.kind) else { continue };
        let Some(need) = w.memory_needed(&virtperf_workload::Params(&c.params)) else { continue };
        for e in &envs {
            let Some((key, has)) = env::find(&e.kind).and_then(|k| k.memory_bytes(&e.params)) else {
                continue;
            };
            if need.saturating_mul(4) > has.saturating_mul(3) {
                return Err(err(
                    whole,
                    Some(key),
                    format!(
                        "workload `{}` allocates {} MiB, more than 3/4 of environment `{}`'s {key} = {} MiB: raise that environment's {key}, or make the workload smaller",
                        c.label,
                        need >> 20,
                        e.name,
                        has >> 20
                    ),
                ));
            }
        }
    }
    // Workloads that write files need a scratch disk in every environment that runs them, large
    // enough for their file; `dir` names a host directory, so it is for native only.
    for c in &cases {
        if !virtperf_workload::find(&c.kind).is_some_and(|w| w.needs_scratch()) {
            continue;
        }
        let file = c.params.get("file_size").and_then(Value::as_u64).unwrap_or(0);
        for e in &envs {
            let Some(k) = env::find(&e.kind) else { continue };
            if c.params.contains_key("dir") {
                if !k.on_host_fs() {
                    return Err(err(
                        whole,
                        Some("dir"),
                        format!(
                            "workload `{}` gives dir, a directory of the host, but environment `{}` ({}) writes on its own scratch disk: leave dir out (the environment's disk parameter chooses where its bytes land), or run that case natively only",
                            c.label, e.name, e.kind
                        ),
                    ));
                }
                continue;
            }
            if let Err(ParamError { key, message: why }) = k.scratch(&e.params) {
                return Err(err(
                    whole,
                    Some(&key),
                    format!("workload `{}` writes files, and environment `{}`: {why}", c.label, e.name),
                ));
            }
            if let Some((key, size)) = k.disk_bytes(&e.params) {
                // ext4's journal and inode tables take about 5 % and at most a few tens of MiB.
                let need = file + file / 20 + (32 << 20);
                if need > size {
                    return Err(err(
                        whole,
                        Some(key),
                        format!(
                            "workload `{}` writes a {} MiB file, and environment `{}`'s scratch disk of {key} = {} MiB holds about {} MiB once formatted: raise {key} (to {} MiB or more) or lower file_size",
                            c.label,
                            file >> 20,
                            e.name,
                            size >> 20,
                            size.saturating_sub(size / 20 + (32 << 20)) >> 20,
                            need.div_ceil(1 << 20)
                        ),
                    ));
                }
            }
        }
    }
    // Every guest's disk image lives on the host's scratch disk for the whole run.
    let images: u64 = envs
        .iter()
        .filter_map(|e| {
            env::find(&e.kind)?.disk_bytes(&e.params).map(|(_, b)| b.saturating_mul(u64::from(e.instances)))
        })
        .sum();
    if images > 0 {
        let root = crate::host::scratch_root();
        if let Some(free) = crate::host::free_bytes(&root) {
            if images > free {
                return Err(err(
                    whole,
                    Some("disk_size"),
                    format!(
                        "the guests' disk images would take {} MiB on the host's scratch disk ({}), which has {} MiB free: a smaller disk_size, fewer instances, or VIRTPERF_SCRATCH on a larger file system",
                        images >> 20,
                        root.display(),
                        free >> 20
                    ),
                ));
            }
        }
    }
    let trials =
        (envs.len() as u64).saturating_mul(cases.len() as u64).saturating_mul(u64::from(reps + warmup));
    if trials > MAX_TRIALS {
        return Err(err(
            whole,
            Some("reps"),
            format!(
                "{} environments × {} cases × {} repetitions (warm-ups included) = {trials} trials, more than {MAX_TRIALS}: \
                 split the experiment or lower reps",
                envs.len(),
                cases.len(),
                reps + warmup
            ),
        ));
    }
    Ok(Experiment {
        name,
        reps,
        warmup,
        order,
        seed,
        timeout_ms,
        freeze_idle,
        envs,
        workloads,
        cases,
        lab,
        lab_raw,
    })
}

fn toml_value(r: &Raw) -> String {
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
        if !self.lab_raw.is_empty() {
            s += "\n[lab]\n";
            for (k, v) in &self.lab_raw {
                s += &format!("{k} = {}\n", toml_value(v));
            }
        }
        for e in &self.envs {
            s += &format!(
                "\n[[env]]\nkind = \"{}\"\nname = {}\n",
                e.kind,
                toml_value(&Raw::Str(e.name.clone()))
            );
            for (k, v) in &e.raw {
                s += &format!("{k} = {}\n", toml_value(v));
            }
            if e.instances != 1 {
                s += &format!("instances = {}\n", e.instances);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Experiment files and flags come from users: whatever they hold, the parser answers with an
    /// experiment or an error that names where, never a panic (and never an exploding sweep).
    #[test]
    fn fuzz_experiment_files_and_flags() {
        use proptest::prelude::*;
        use virtperf_proto::fuzzing::{fuzz, mutated};
        let seeds: Vec<Vec<u8>> = [
            GOOD,
            include_str!("../../../examples/default.toml"),
            include_str!("../../../examples/all-pairs.toml"),
            include_str!("../../../examples/seed000-exp1-load.toml"),
            include_str!("../../../examples/seed003-kvm-nics.toml"),
            include_str!("../../../examples/rfc2544-kvm-seed.toml"),
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        const TOKENS: &[&str] = &[
            "\n",
            "=",
            "[",
            "]",
            "[[env]]\n",
            "[[workload]]\n",
            "[lab]\n",
            "\"",
            ",",
            "kind = ",
            "reps = ",
            "-1",
            "0",
            "99999999999999999999",
            "1e309",
            "\"10MiB\"",
            "\"1ms\"",
            "[1,2,3,4,5,6,7,8]",
            "true",
            "{",
            "}",
            "#",
            "\u{0}",
            "é",
            "name = \"x\"\n",
        ];
        fuzz("experiment toml", mutated(seeds, TOKENS), |bytes| {
            let text = String::from_utf8_lossy(&bytes);
            match read_toml("x.toml", &text).and_then(|raw| validate(&raw, &Origin::Default)) {
                Ok(e) => prop_assert!(!e.envs.is_empty() && !e.cases.is_empty()),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            Ok(())
        });
        let flags =
            prop_oneof!["[a-z_]{0,10}(:[a-z_]{0,8}=[a-zA-Z0-9\\[\\],.]{0,12}){0,4}", any::<String>(),];
        fuzz("experiment flags", (flags.clone(), flags), |(env, workload)| {
            let (Ok(e), Ok(w)) = (read_flag("--env", &env), read_flag("--workload", &workload)) else {
                return Ok(());
            };
            let raw = RawExperiment { envs: vec![e], workloads: vec![w], ..Default::default() };
            if let Err(err) = validate(&raw, &Origin::Default) {
                prop_assert!(!err.to_string().is_empty());
            }
            let _ = read_lab_flag(&env);
            Ok(())
        });
    }

    #[test]
    fn instances_sweep_into_environments_and_bad_counts_are_refused() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native:instances=[1,2,4]").unwrap());
        raw.envs.push(read_flag("--env", "container:cpus=1,instances=2").unwrap());
        raw.workloads.push(read_flag("--workload", "intmix").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        let names: Vec<(&str, u32, &str)> =
            e.envs.iter().map(|x| (x.name.as_str(), x.instances, x.group.as_str())).collect();
        assert_eq!(
            names,
            [
                ("native [instances=1]", 1, "native"),
                ("native [instances=2]", 2, "native"),
                ("native [instances=4]", 4, "native"),
                ("container:cpus=1", 2, "container:cpus=1")
            ]
        );
        assert!(e.to_toml().contains("instances = 4"));
        for bad in ["native:instances=0", "native:instances=65", "native:instances=two"] {
            let mut raw = RawExperiment::default();
            raw.envs.push(read_flag("--env", bad).unwrap());
            raw.workloads.push(read_flag("--workload", "noop").unwrap());
            let err = validate(&raw, &Origin::Default).unwrap_err();
            assert_eq!(err.key.as_deref(), Some("instances"), "{bad}: {err}");
        }
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native:instances=2").unwrap());
        raw.envs.push(read_flag("--env", "container").unwrap());
        raw.workloads.push(read_flag("--workload", "tcp_rr:pairs=all").unwrap());
        let err = validate(&raw, &Origin::Default).unwrap_err();
        assert!(err.key.as_deref() == Some("instances") && err.to_string().contains("pairs"), "{err}");
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "qemu:memory=4GiB,instances=64").unwrap());
        raw.workloads.push(read_flag("--workload", "noop").unwrap());
        let err = validate(&raw, &Origin::Default).unwrap_err();
        assert!(err.key.as_deref() == Some("instances") && err.to_string().contains("80 %"), "{err}");
    }

    #[test]
    fn exploding_sweeps_and_plans_are_refused() {
        let many: String = (16..117).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let text = format!(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"pde\"\nn = [{many}]\niterations = [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100]\n"
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("combinations") && e.contains("10000"), "{e}");
        let e = parse("reps = 10000000\n[[env]]\nkind = \"native\"\n[[env]]\nkind = \"native\"\nname = \"b\"\n[[workload]]\nkind = \"noop\"\n").unwrap_err().to_string();
        assert!(e.contains("trials, more than") && e.contains("reps"), "{e}");
    }

    fn parse(text: &str) -> Result<Experiment, InputError> {
        let raw = read_toml("x.toml", text)?;
        validate(&raw, &Origin::File { path: "x.toml".into(), line: 1 })
    }

    const GOOD: &str = r#"
name = "avionics"
reps = 1000
warmup = 2
seed = 7
timeout = "30s"

[[env]]
kind = "native"

[[env]]
kind = "container"
name = "box"
cpus = 1

[[workload]]
kind = "memcpy"
size = "10MiB"
copies = 10

[[workload]]
kind = "pde"
n = [64, 128]
iterations = [10, 20]
"#;

    #[test]
    fn good_file_parses_and_sweeps() {
        let e = parse(GOOD).unwrap();
        assert_eq!((e.reps, e.warmup, e.seed, e.timeout_ms), (1000, 2, 7, 30_000));
        assert_eq!(e.envs[1].name, "box");
        assert_eq!(e.envs[0].name, "native");
        assert_eq!(e.cases.len(), 5);
        assert_eq!(e.cases[0].label, "memcpy");
        assert_eq!(e.cases[1].label, "pde [n=64,iterations=10]");
        assert_eq!(e.cases[0].params["size"], Value::from(10u64 << 20));
    }

    fn flag_exp(workload: &str, lab: Option<&str>) -> Result<Experiment, InputError> {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.workloads.push(read_flag("--workload", workload).unwrap());
        if let Some(l) = lab {
            for (k, v) in read_lab_flag(l).unwrap() {
                raw.settings.insert(k, v);
            }
        }
        validate(&raw, &Origin::Default)
    }

    #[test]
    fn rfc2544_sweeps_every_frame_size_and_both_directions_once() {
        let e = flag_exp("rfc2544:quick=true", None).unwrap();
        assert_eq!(e.cases.len(), 14);
        assert_eq!(e.cases[0].label, "rfc2544:quick=true [frame_size=64,direction=in]");
        assert_eq!(e.cases[13].params["frame_size"], Value::from(1518));
        assert_eq!(e.cases[13].params["direction"], Value::from("out"));
        // A procedure is many trials: one repetition, no warm-up, unless asked.
        assert_eq!((e.reps, e.warmup), (1, 0));
        // `tests` is a set, not a sweep; `frame_sizes` names `frame_size`.
        let e = flag_exp("rfc2544:tests=[latency,throughput],frame_sizes=[64,128],direction=reflect", None)
            .unwrap();
        assert_eq!(e.cases.len(), 2);
        assert_eq!(e.cases[0].params["tests"], Value::from("latency,throughput"));
        // Mixed with another workload, the usual repetitions apply.
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.workloads.push(read_flag("--workload", "rfc2544:frame_size=64,direction=in").unwrap());
        raw.workloads.push(read_flag("--workload", "tcp_stream").unwrap());
        assert_eq!(validate(&raw, &Origin::Default).unwrap().reps, 10);
    }

    #[test]
    fn rfc2544_bad_input_names_the_key() {
        let key = |w: &str, lab: Option<&str>| flag_exp(w, lab).unwrap_err().key;
        assert_eq!(key("rfc2544:frame_size=63", None).as_deref(), Some("frame_size"));
        assert_eq!(key("rfc2544:frame_size=1519", None).as_deref(), Some("frame_size"));
        assert_eq!(key("rfc2544:frame_size=9000,jumbo=true", None).as_deref(), Some("frame_size"));
        assert!(flag_exp("rfc2544:frame_size=9000,jumbo=true", Some("mtu=9000")).is_ok());
        assert_eq!(key("rfc2544:resolution=0", None).as_deref(), Some("resolution"));
        assert_eq!(key("rfc2544:resolution=-1", None).as_deref(), Some("resolution"));
        assert_eq!(key("rfc2544:trial_duration=0s", None).as_deref(), Some("trial_duration"));
        assert_eq!(key("rfc2544:line_rate=0", None).as_deref(), Some("line_rate"));
        assert_eq!(key("rfc2544:line_rate=-1Gbit", None).as_deref(), Some("line_rate"));
        assert_eq!(key("rfc2544:tests=jitter", None).as_deref(), Some("tests"));
        assert_eq!(key("rfc2544:direction=both", None).as_deref(), Some("direction"));
        assert_eq!(key("rfc2544:frame_size=64,frame_sizes=128", None).as_deref(), Some("frame_size"));
        assert_eq!(key("frames:rate=-5", None).as_deref(), Some("rate"));
        let e = flag_exp("rfc2544:frame_size=1518", Some("mtu=1000")).unwrap_err();
        assert!(e.to_string().contains("MTU of 1000"), "{e}");
    }

    #[test]
    fn rendered_toml_round_trips() {
        let e = parse(GOOD).unwrap();
        let again = parse(&e.to_toml()).unwrap();
        assert_eq!(e, again);
    }

    fn expect_err(text: &str, line: usize, key: Option<&str>, needle: &str) {
        let e = parse(text).unwrap_err();
        assert_eq!(e.origin, Origin::File { path: "x.toml".into(), line }, "{e}");
        assert_eq!(e.key.as_deref(), key, "{e}");
        assert!(e.to_string().contains(needle), "`{e}` should mention `{needle}`");
    }

    #[test]
    fn bad_files_name_line_and_key() {
        let base = "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n";
        expect_err("reps = 0\n", 1, Some("reps"), "from 1");
        expect_err("reps = \"ten\"\n", 1, Some("reps"), "integer");
        expect_err(&format!("{base}reps = = 3\n"), 5, None, "syntax");
        expect_err(&format!("reps = 3\ncolour = 1\n{base}"), 2, Some("colour"), "unknown key");
        expect_err(
            "[[env]]\nkind = \"xen9\"\n[[workload]]\nkind = \"cpu\"\n",
            1,
            Some("kind"),
            "known: native",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nsize = \"-1MiB\"\n",
            5,
            Some("size"),
            "expected a size",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nsize = -3\n",
            5,
            Some("size"),
            "expected a size",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nbogus = 3\n",
            5,
            Some("bogus"),
            "known keys: size, copies",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n",
            3,
            Some("name"),
            "distinct",
        );
        expect_err("[[env]]\nkind = \"native\"\n", 1, Some("workload"), "no workload");
        expect_err("[[env]]\nname = \"x\"\n[[workload]]\nkind = \"cpu\"\n", 1, Some("kind"), "needs `kind");
        expect_err(&format!("order = \"backwards\"\n{base}"), 1, Some("order"), "random, interleaved");
        expect_err(&format!("timeout = \"soon\"\n{base}"), 1, Some("timeout"), "duration");
        expect_err(
            "[[env]]\nkind = \"container\"\ncpus = [1, 2]\n[[workload]]\nkind = \"cpu\"\n",
            3,
            Some("cpus"),
            "cannot be swept",
        );
        expect_err(
            "[[env]]\nkind = \"container\"\ncpus = 0\n[[workload]]\nkind = \"cpu\"\n",
            3,
            Some("cpus"),
            "expected",
        );
    }

    #[test]
    fn flags_parse_like_files() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.envs.push(read_flag("--env", "container:cpus=1,name=c1").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy:size=10MiB,copies=10").unwrap());
        raw.workloads.push(read_flag("--workload", "pde:n=[32,64]").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        assert_eq!(e.envs[1].name, "c1");
        assert_eq!(e.cases.len(), 3);
        assert_eq!(e.cases[0].label, "memcpy:size=10MiB,copies=10");
        assert_eq!(e.cases[2].label, "pde:n=[32,64] [n=64]");
        assert_eq!(parse(&e.to_toml()).unwrap().cases, e.cases);
    }

    #[test]
    fn bad_flags_name_flag_and_key() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy:size=-1").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap_err();
        assert_eq!(e.to_string(), "--workload memcpy:size=-1: key `size`: got `-1`, expected a size from 1 to 17179869184 bytes, e.g. 4KiB, 10MiB, 1GiB");
        assert!(read_flag("--workload", "memcpy:size").is_err());
        assert!(read_flag("--workload", ":x=1").is_err());
    }

    #[test]
    fn rates_and_delays() {
        assert_eq!(parse_rate_bps(&Raw::Str("1gbit".into())), Some(1_000_000_000));
        assert_eq!(parse_rate_bps(&Raw::Str("100Mbit/s".into())), Some(100_000_000));
        assert_eq!(parse_rate_bps(&Raw::Str("2.5gbps".into())), Some(2_500_000_000));
        assert_eq!(parse_rate_bps(&Raw::Int(9600)), Some(9600));
        for bad in ["-5mbit", "0", "fast", ""] {
            assert_eq!(parse_rate_bps(&Raw::Str(bad.into())), None, "{bad}");
        }
        assert_eq!(parse_rate_bps(&Raw::Int(-1)), None);
        assert_eq!(parse_delay_us(&Raw::Str("1.5ms".into())), Some(1500));
        assert_eq!(parse_delay_us(&Raw::Str("100us".into())), Some(100));
        assert_eq!(parse_delay_us(&Raw::Int(0)), Some(0));
        assert_eq!(parse_delay_us(&Raw::Str("-1ms".into())), None);
    }

    #[test]
    fn lab_table_and_load_keys_round_trip() {
        let text = r#"
[lab]
mtu = 9000
rate = "1gbit"
loss = 0.5

[[env]]
kind = "native"

[[workload]]
kind = "tcp_stream"
load = {percent = [0, 90], on = "tester", cpus = 1}
"#;
        let e = parse(text).unwrap();
        assert_eq!((e.lab.mtu, e.lab.rate_bps, e.lab.loss_pct), (9000, Some(1_000_000_000), 0.5));
        assert_eq!(e.cases.len(), 2);
        assert_eq!(e.cases[0].load, None, "0 % is no load");
        assert_eq!(e.cases[1].load, Some(LoadSpec { percent: 90.0, on: LoadOn::Tester, cpus: 1 }));
        assert!(e.cases.iter().all(|c| c.network && !c.params.contains_key("load")));
        let again = parse(&e.to_toml()).unwrap();
        assert_eq!((again.lab, again.cases), (e.lab, e.cases));
        expect_err(
            "[lab]\nmtu = 60\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n",
            2,
            Some("lab.mtu"),
            "68",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\nload = {percent = 50, where = 1}\n",
            5,
            Some("load.where"),
            "unknown key",
        );
    }
}
