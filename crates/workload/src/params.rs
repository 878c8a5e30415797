//! Parameter schemas shared by workloads and environments.
//!
//! One [`ParamSpec`] list per kind is the single source of truth for the experiment parser
//! (TOML and `--workload KIND:k=v` flags), for the agent's own re-validation, for `--help`
//! and for docs. Values are normalised to JSON: sizes to bytes, durations to milliseconds.

use std::collections::BTreeMap;

use serde_json::Value;

/// A raw value as the user wrote it, before normalisation.
#[derive(Debug, Clone, PartialEq)]
pub enum Raw {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raw::Str(s) => write!(f, "{s}"),
            Raw::Int(i) => write!(f, "{i}"),
            Raw::Float(x) => write!(f, "{x}"),
            Raw::Bool(b) => write!(f, "{b}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamKind {
    /// An integer in `[min, max]`.
    Int {
        min: i64,
        max: i64,
    },
    /// A byte count: `10MiB`, `4k`, `1048576`; normalised to bytes.
    Size {
        min: u64,
        max: u64,
    },
    /// A real number in `[min, max]`.
    Float {
        min: f64,
        max: f64,
    },
    /// A duration: `500ms`, `2s`, `1m`; normalised to milliseconds.
    Duration {
        min_ms: u64,
        max_ms: u64,
    },
    /// One of the listed words.
    Choice(&'static [&'static str]),
    Bool,
    /// Free text (a label, a path).
    Text,
    /// A bit rate: `1Gbit`, `100mbit`, `10000000`; normalised to bits per second.
    Rate,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    /// Default as the user would write it; `None` = optional with no default.
    pub default: Option<&'static str>,
    pub help: &'static str,
}

impl ParamSpec {
    /// What a valid value looks like, for error messages and docs.
    pub fn expected(&self) -> String {
        match self.kind {
            ParamKind::Int { min, max } => format!("an integer from {min} to {max}"),
            ParamKind::Size { min, max } => {
                format!("a size from {} to {} bytes, e.g. 4KiB, 10MiB, 1GiB", min, max)
            }
            ParamKind::Float { min, max } => format!("a number from {min} to {max}"),
            ParamKind::Duration { min_ms, max_ms } => {
                format!("a duration from {min_ms} ms to {} s, e.g. 500ms, 30s", max_ms / 1000)
            }
            ParamKind::Choice(cs) => format!("one of: {}", cs.join(", ")),
            ParamKind::Bool => "true or false".into(),
            ParamKind::Text => "text".into(),
            ParamKind::Rate => "a bit rate above zero, e.g. 1Gbit, 100Mbit, 10Gbit".into(),
        }
    }

    /// Normalises a raw value, or says why it does not fit.
    pub fn normalize(&self, raw: &Raw) -> Result<Value, String> {
        let bad = || format!("got `{raw}`, expected {}", self.expected());
        match (self.kind, raw) {
            (ParamKind::Int { min, max }, Raw::Int(i)) if (min..=max).contains(i) => Ok(Value::from(*i)),
            (ParamKind::Int { min, max }, Raw::Str(s)) => match s.trim().replace('_', "").parse::<i64>() {
                Ok(i) if (min..=max).contains(&i) => Ok(Value::from(i)),
                _ => Err(bad()),
            },
            (ParamKind::Size { min, max }, Raw::Int(i)) if *i >= 0 && (min..=max).contains(&(*i as u64)) => {
                Ok(Value::from(*i as u64))
            }
            (ParamKind::Size { min, max }, Raw::Str(s)) => match parse_size(s) {
                Some(b) if (min..=max).contains(&b) => Ok(Value::from(b)),
                _ => Err(bad()),
            },
            (ParamKind::Float { min, max }, Raw::Float(x)) if *x >= min && *x <= max => Ok(Value::from(*x)),
            (ParamKind::Float { min, max }, Raw::Int(i)) if (*i as f64) >= min && (*i as f64) <= max => {
                Ok(Value::from(*i as f64))
            }
            (ParamKind::Float { min, max }, Raw::Str(s)) => match s.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x >= min && x <= max => Ok(Value::from(x)),
                _ => Err(bad()),
            },
            (ParamKind::Duration { min_ms, max_ms }, Raw::Str(s)) => match parse_duration_ms(s) {
                Some(ms) if (min_ms..=max_ms).contains(&ms) => Ok(Value::from(ms)),
                _ => Err(bad()),
            },
            (ParamKind::Choice(cs), Raw::Str(s)) if cs.contains(&s.as_str()) => Ok(Value::from(s.clone())),
            (ParamKind::Bool, Raw::Bool(b)) => Ok(Value::from(*b)),
            (ParamKind::Bool, Raw::Str(s)) if s == "true" || s == "false" => Ok(Value::from(s == "true")),
            (ParamKind::Text, Raw::Str(s)) => Ok(Value::from(s.clone())),
            (ParamKind::Rate, r) => parse_rate_bps(r).map(Value::from).ok_or_else(bad),
            // `cpuset=0` arrives as a number; text parameters take any scalar as written.
            (ParamKind::Text, Raw::Int(_) | Raw::Float(_) | Raw::Bool(_)) => Ok(Value::from(raw.to_string())),
            _ => Err(bad()),
        }
    }
}

/// `10MiB`, `4k`, `512` → bytes. Negative or fractional byte counts are refused.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.starts_with('-') {
        return None;
    }
    parse_size::Config::new().with_binary().parse_size(s).ok()
}

/// The fastest rate a link may be given: 1 Tbit/s (`1e300` saturated to u64::MAX and went to tc).
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;

/// A link rate: bits per second as a number, or with a unit (`1gbit`, `100mbit`, `10kbit`,
/// `1Gbit/s`, `1gbps`), up to [`MAX_RATE_BPS`].
pub fn parse_rate_bps(r: &Raw) -> Option<u64> {
    parse_rate_unbounded(r).filter(|&b| b <= MAX_RATE_BPS)
}

fn parse_rate_unbounded(r: &Raw) -> Option<u64> {
    match r {
        Raw::Int(i) if *i > 0 => Some(*i as u64),
        Raw::Float(f) if *f >= 1.0 && f.is_finite() && *f <= MAX_RATE_BPS as f64 => Some(*f as u64),
        Raw::Str(s) => {
            let l = s.trim().to_ascii_lowercase().replace(' ', "");
            let l = l.trim_end_matches("/s").trim_end_matches("ps").trim_end_matches("it");
            let l = l.strip_suffix('b').unwrap_or(l);
            let (num, mult) = match l.chars().last()? {
                'k' => (&l[..l.len() - 1], 1e3),
                'm' => (&l[..l.len() - 1], 1e6),
                'g' => (&l[..l.len() - 1], 1e9),
                't' => (&l[..l.len() - 1], 1e12),
                _ => (l, 1.0),
            };
            let v: f64 = num.parse().ok()?;
            let bps = v * mult;
            (v > 0.0 && bps >= 1.0 && bps.is_finite() && bps <= MAX_RATE_BPS as f64).then_some(bps as u64)
        }
        _ => None,
    }
}

/// A parameter that is wrong: its key, and what is wrong with it and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    pub key: String,
    pub message: String,
}

impl ParamError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ParamError { key: key.into(), message: message.into() }
    }
}

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

impl std::error::Error for ParamError {}

/// A parameter the workload read at run time is missing or wrong (validation normally catches
/// it before the run).
impl crate::error::Kinded for ParamError {
    fn kind(&self) -> crate::error::FailureKind {
        crate::error::FailureKind::Other
    }
}

/// `500ms`, `2s`, `1m 30s`, `1.5ms`, `100us` → nanoseconds: the one parser of durations
/// (experiment keys, parameters, flags, the lab's delay). humantime's forms, and a single decimal
/// number with its unit (`1.5ms`), which humantime does not take. None: not a duration, or
/// negative.
pub fn parse_duration_ns(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Ok(d) = humantime::parse_duration(s) {
        return u64::try_from(d.as_nanos()).ok();
    }
    let at = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = (s[..at].trim(), s[at..].trim());
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    let v: f64 = num.parse().ok()?;
    let ns = (v * scale).round();
    (v.is_finite() && v >= 0.0 && ns < u64::MAX as f64).then_some(ns as u64)
}

/// [`parse_duration_ns`] in milliseconds (rounded down).
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    parse_duration_ns(s).map(|ns| ns / 1_000_000)
}

/// Validates a complete parameter map against `specs`: unknown keys are refused, defaults filled.
/// Values already normalised (the agent's case) pass through `normalize` unchanged.
pub fn resolve(
    specs: &[ParamSpec],
    given: &BTreeMap<String, Raw>,
) -> Result<BTreeMap<String, Value>, ParamError> {
    for key in given.keys() {
        if !specs.iter().any(|s| s.name == key) {
            let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err(ParamError::new(key.clone(), format!("unknown key `{key}` (known keys: {known})")));
        }
    }
    let mut out = BTreeMap::new();
    for spec in specs {
        let raw = match (given.get(spec.name), spec.default) {
            (Some(r), _) => r.clone(),
            (None, Some(d)) => default_raw(spec, d),
            (None, None) => continue,
        };
        let v = spec.normalize(&raw).map_err(|e| ParamError::new(spec.name, e))?;
        out.insert(spec.name.to_string(), v);
    }
    Ok(out)
}

fn default_raw(spec: &ParamSpec, d: &str) -> Raw {
    match spec.kind {
        ParamKind::Int { .. } => d.parse().map(Raw::Int).unwrap_or_else(|_| Raw::Str(d.into())),
        _ => Raw::Str(d.into()),
    }
}

/// Converts a normalised JSON value back to a [`Raw`] (the agent receives normalised JSON).
pub fn raw_from_json(v: &Value) -> Option<Raw> {
    match v {
        Value::String(s) => Some(Raw::Str(s.clone())),
        Value::Bool(b) => Some(Raw::Bool(*b)),
        Value::Number(n) => n.as_i64().map(Raw::Int).or_else(|| n.as_f64().map(Raw::Float)),
        _ => None,
    }
}

/// Re-validates normalised parameters (agent side). Sizes and durations arrive as integers.
pub fn revalidate(
    specs: &[ParamSpec],
    given: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, Value>, ParamError> {
    let mut raw = BTreeMap::new();
    for (k, v) in given {
        let r =
            raw_from_json(v).ok_or_else(|| ParamError::new(k.clone(), format!("`{k}` must be a scalar")))?;
        // Durations travel as integer milliseconds; give them back their unit.
        let r = match (specs.iter().find(|s| s.name == k).map(|s| s.kind), &r) {
            (Some(ParamKind::Duration { .. }), Raw::Int(ms)) => Raw::Str(format!("{ms}ms")),
            _ => r,
        };
        raw.insert(k.clone(), r);
    }
    resolve(specs, &raw)
}

/// Typed access to a resolved parameter map (defaults were filled by [`resolve`]).
pub struct Params<'a>(pub &'a BTreeMap<String, Value>);

impl Params<'_> {
    pub fn u64(&self, k: &str) -> Result<u64, ParamError> {
        self.0.get(k).and_then(Value::as_u64).ok_or_else(|| ParamError::new(k, "missing or not an integer"))
    }
    pub fn f64(&self, k: &str) -> Result<f64, ParamError> {
        self.0.get(k).and_then(Value::as_f64).ok_or_else(|| ParamError::new(k, "missing or not a number"))
    }
    pub fn str(&self, k: &str) -> Result<&str, ParamError> {
        self.0.get(k).and_then(Value::as_str).ok_or_else(|| ParamError::new(k, "missing or not text"))
    }
    pub fn opt_u64(&self, k: &str) -> Option<u64> {
        self.0.get(k).and_then(Value::as_u64)
    }
    pub fn opt_f64(&self, k: &str) -> Option<f64> {
        self.0.get(k).and_then(Value::as_f64)
    }
    pub fn opt_bool(&self, k: &str) -> Option<bool> {
        self.0.get(k).and_then(Value::as_bool)
    }
    pub fn bool(&self, k: &str) -> bool {
        self.0.get(k).and_then(Value::as_bool).unwrap_or(false)
    }
    /// A duration parameter (milliseconds) or `default` when it was not given.
    pub fn ms_or(&self, k: &str, default: u64) -> u64 {
        self.opt_u64(k).unwrap_or(default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One parser for every duration: humantime's forms and a decimal with its unit.
    #[test]
    fn durations_read_in_every_form_one_parser_takes() {
        assert_eq!(parse_duration_ns("1m 30s"), Some(90_000_000_000));
        assert_eq!(parse_duration_ns("1.5ms"), Some(1_500_000));
        assert_eq!(parse_duration_ns(" 100us "), Some(100_000));
        assert_eq!(parse_duration_ns("0.25s"), Some(250_000_000));
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        for bad in ["", "-1ms", "1.5", "ms", "1.5 parsecs", "1..5ms"] {
            assert_eq!(parse_duration_ns(bad), None, "{bad:?}");
        }
    }

    const SPECS: &[ParamSpec] = &[
        ParamSpec {
            name: "size",
            kind: ParamKind::Size { min: 1, max: 1 << 30 },
            default: Some("10MiB"),
            help: "",
        },
        ParamSpec {
            name: "copies",
            kind: ParamKind::Int { min: 1, max: 1000 },
            default: Some("10"),
            help: "",
        },
        ParamSpec {
            name: "t",
            kind: ParamKind::Duration { min_ms: 1, max_ms: 60_000 },
            default: None,
            help: "",
        },
        ParamSpec { name: "mode", kind: ParamKind::Choice(&["a", "b"]), default: Some("a"), help: "" },
    ];

    #[test]
    fn defaults_and_normalisation() {
        let r = resolve(SPECS, &BTreeMap::new()).unwrap();
        assert_eq!(r["size"], Value::from(10u64 << 20));
        assert_eq!(r["copies"], Value::from(10));
        assert!(!r.contains_key("t"));
        let given = [("size".to_string(), Raw::Str("4KiB".into())), ("t".to_string(), Raw::Str("2s".into()))];
        let r = resolve(SPECS, &given.into_iter().collect()).unwrap();
        assert_eq!(r["size"], Value::from(4096u64));
        assert_eq!(r["t"], Value::from(2000u64));
        assert_eq!(revalidate(SPECS, &r).unwrap(), r, "normalised values survive the agent's check");
    }

    #[test]
    fn errors_name_the_key() {
        let bad = |k: &str, v: Raw| resolve(SPECS, &[(k.to_string(), v)].into_iter().collect()).unwrap_err();
        assert_eq!(bad("size", Raw::Str("-1".into())).key, "size");
        assert_eq!(bad("size", Raw::Int(-5)).key, "size");
        assert_eq!(bad("size", Raw::Str("2GiB".into())).key, "size");
        assert_eq!(bad("copies", Raw::Int(0)).key, "copies");
        assert_eq!(bad("copies", Raw::Float(1.5)).key, "copies");
        assert_eq!(bad("mode", Raw::Str("c".into())).key, "mode");
        let ParamError { key: k, message: msg } = bad("colour", Raw::Int(1));
        assert_eq!(k, "colour");
        assert!(msg.contains("known keys: size, copies, t, mode"), "{msg}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10MiB"), Some(10 << 20));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("-4k"), None);
        assert_eq!(parse_size("lots"), None);
    }
}
