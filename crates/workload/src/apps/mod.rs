//! Services under test: a real server (nginx, …) inside the environment, its client on the lab's
//! tester. The server's configuration and data are written by its kind into a directory of its own
//! in the instance's scratch space (removed when the trial ends, however it ends); the server is
//! started, readiness-checked (its port answers a real request) and stopped when the host says
//! so. The client is virtperf's own load generator ([`driver`]): a closed loop for capacity and an
//! open loop for latency at a fixed offered load, each latency taken from the request's scheduled
//! send time (no coordinated omission).
//!
//! The orchestrator drives a trial as phases (`trial.rs`, `service_trial`): the server's run,
//! then one client run per phase — `capacity`, then `open` at each of `loads` percent of the
//! reference rate (native's capacity measured in the same run, else this trial's own) — then the
//! server's stop. Each phase is timed on the host's clock, so the host CPU per request is the
//! environment's CPU over the phase over the requests it served.
//!
//! To add an application: a module with its server's configuration and start (as `nginx.rs`),
//! a [`driver::Protocol`] speaking its protocol (as `http.rs`), its metrics through
//! [`service_metrics!`], and a line in the registry.

use serde_json::{json, Value};

use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::workload::{sample, Output, RunCtx};

/// The offered loads a service may be asked for, in percent of the reference rate: each has its
/// metrics declared (`{kind}_p99_at50`…).
pub const LOADS: [u64; 5] = [10, 25, 50, 75, 90];

/// How a service workload fails.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Tool(#[from] crate::tools::ToolError),
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error(transparent)]
    Os(#[from] crate::error::OsError),
    #[error("{prog} did not answer on {addr} within {secs} s: {detail}")]
    NotReady { prog: String, addr: String, secs: u64, detail: String },
    #[error("{prog} exited while serving ({how}): {stderr}")]
    Died { prog: String, how: String, stderr: String },
    #[error("{prog} refuses to run as root, and cannot be started as an unprivileged user in a user namespace of its own here ({source}): mapping root's files to it needs CAP_SETFCAP — give a container capabilities = \"docker\" (Docker's default set), or SETFCAP")]
    NoUserNamespace { prog: String, source: std::io::Error },
    #[error("{0}")]
    Protocol(String),
    #[error("every connection failed: {0}")]
    NoConnection(String),
    #[error(transparent)]
    Param(#[from] ParamError),
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
    #[error("stopped before the end of its phase")]
    Stopped,
}

impl crate::error::Kinded for AppError {
    fn kind(&self) -> crate::error::FailureKind {
        use crate::error::FailureKind as K;
        match self {
            AppError::Tool(e) => e.kind(),
            AppError::Net(e) => e.kind(),
            AppError::Os(e) => e.kind(),
            AppError::NotReady { .. } | AppError::Died { .. } | AppError::NoUserNamespace { .. } => K::Other,
            AppError::NoConnection(_) => K::Peer,
            AppError::Protocol(_) | AppError::Param(_) | AppError::Panicked(_) => K::Other,
            AppError::Stopped => K::Stopped,
        }
    }
}

/// Which side of a service trial a run is: set by the orchestrator, never by the user.
pub const PHASE: ParamSpec = ParamSpec {
    name: "phase",
    kind: ParamKind::Choice(&["server", "capacity", "open"]),
    default: None,
    help: "set by virtperf: the server's run, or the client's capacity or open-loop phase",
};

/// The open loop's offered rate: set by the orchestrator.
pub const RATE: ParamSpec = ParamSpec {
    name: "rate",
    kind: ParamKind::Float { min: 0.0, max: 1e9 },
    default: None,
    help: "set by virtperf: the open-loop phase's offered rate (requests/s)",
};

/// The rate the offered loads are percentages of.
pub const REFERENCE: ParamSpec = ParamSpec {
    name: "reference",
    kind: ParamKind::Float { min: 0.0, max: 1e9 },
    default: None,
    help: "requests/s that `loads` are percentages of (none: native's capacity measured in the same run, else this trial's own)",
};

pub const LOADS_PARAM: ParamSpec = ParamSpec {
    name: "loads",
    kind: ParamKind::Text,
    default: Some("25,50,75"),
    help: "offered loads of the open-loop phases, in percent of the reference rate (a set of 10, 25, 50, 75, 90; none: the capacity alone)",
};

pub const CONNECTIONS: ParamSpec = ParamSpec {
    name: "connections",
    kind: ParamKind::Int { min: 1, max: 256 },
    default: Some("8"),
    help: "the client's connections (one thread each), in every phase",
};

pub const DURATION: ParamSpec = ParamSpec {
    name: "duration",
    kind: ParamKind::Duration { min_ms: 200, max_ms: 600_000 },
    default: Some("3s"),
    help: "how long each phase (capacity, each offered load) runs",
};

/// The `loads` set, in ascending order, or the key and what to give.
pub fn loads(p: &Params) -> Result<Vec<u64>, ParamError> {
    let s = p.str("loads")?;
    let mut out = Vec::new();
    if s.trim() == "none" {
        return Ok(out);
    }
    for t in s.split([',', '+', ' ']).map(str::trim).filter(|t| !t.is_empty()) {
        let v: u64 = t.trim_end_matches('%').parse().map_err(|_| {
            ParamError::new("loads", format!("`{t}` is not a percentage; give some of 10, 25, 50, 75, 90"))
        })?;
        if !LOADS.contains(&v) {
            return Err(ParamError::new("loads", format!("{v} % is not one of 10, 25, 50, 75, 90")));
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// A service trial's planned length, ms: the warm-up, its capacity phase and each offered load's,
/// each `duration` long.
pub fn planned_ms(p: &Params) -> Option<f64> {
    let phases = 1 + loads(p).map_or(0, |l| l.len());
    p.opt_f64("duration").map(|d| WARM_UP.as_secs_f64() * 1e3 + d * phases as f64)
}

/// How long the client loads the server, uncounted, before its capacity is measured: the server's
/// caches and connections, a TCG guest's translated code, warm. (Measured without it: a TCG
/// guest's PostgreSQL served 30 % more in the open loop that followed its capacity phase, at an
/// offered rate it could not carry, than in the capacity phase itself.)
pub const WARM_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// [`WARM_UP`] with virtperf's closed loop on the phase's connections; its figures dropped.
pub fn warm_up<C: driver::Protocol>(p: &Params, ctx: &RunCtx, c: &C) -> Result<(), AppError> {
    let connections = p.u64("connections")? as usize;
    driver::drive(c, driver::Phase { connections, duration: WARM_UP, rate: None }, ctx)?;
    Ok(())
}

/// The phase this run plays (the server's, unless the orchestrator says).
pub fn phase<'a>(p: &'a Params<'a>) -> &'a str {
    p.0.get("phase").and_then(Value::as_str).unwrap_or("server")
}

/// The keys an experiment may not give a service: the orchestrator sets them per phase.
pub const SET_BY_VIRTPERF: [&str; 2] = ["phase", "rate"];

/// A service's metrics: capacity, each offered load's latencies (p50, p90, p99, p99.9, µs from the
/// scheduled send), rate achieved and backlog, the CPU per request of server and client at
/// capacity, and failed requests. One static table per kind (metric names are `'static`).
/// (Defined before the kinds' modules, which see it by its textual scope.)
macro_rules! service_metrics {
    ($k:literal, $what:literal) => {
        service_metrics!(@all $k, $what, "10", "25", "50", "75", "90")
    };
    (@all $k:literal, $what:literal, $($l:literal),*) => {
        &[
            $crate::workload::MetricSpec {
                name: concat!($k, "_capacity"),
                unit: "req/s",
                better: $crate::workload::Better::Higher,
                help: concat!("the most ", $what, " per second with the closed-loop client (every connection asks again as soon as it is answered)"),
            },
            $(
            $crate::workload::MetricSpec {
                name: concat!($k, "_p50_at", $l),
                unit: "us",
                better: $crate::workload::Better::Lower,
                help: concat!("median latency at ", $l, " % of the reference rate, from each request's scheduled send"),
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_p90_at", $l),
                unit: "us",
                better: $crate::workload::Better::Lower,
                help: concat!("90th percentile latency at ", $l, " % of the reference rate"),
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_p99_at", $l),
                unit: "us",
                better: $crate::workload::Better::Lower,
                help: concat!("99th percentile latency at ", $l, " % of the reference rate"),
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_p999_at", $l),
                unit: "us",
                better: $crate::workload::Better::Lower,
                help: concat!("99.9th percentile latency at ", $l, " % of the reference rate"),
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_rate_at", $l),
                unit: "req/s",
                better: $crate::workload::Better::Higher,
                help: concat!("requests per second answered at ", $l, " % of the reference rate offered (below the offered rate: the layer could not carry it)"),
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_backlog_at", $l),
                unit: "req",
                better: $crate::workload::Better::Lower,
                help: concat!("requests scheduled at ", $l, " % load but never sent by the phase's end"),
            },
            )*
            $crate::workload::MetricSpec {
                name: concat!($k, "_server_cpu"),
                unit: "us/req",
                better: $crate::workload::Better::Lower,
                help: "host CPU of the environment (its cgroup or processes) per request served, at capacity",
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_client_cpu"),
                unit: "us/req",
                better: $crate::workload::Better::Lower,
                help: "host CPU of the tester (the client) per request, at capacity",
            },
            $crate::workload::MetricSpec {
                name: concat!($k, "_errors"),
                unit: "req",
                better: $crate::workload::Better::Lower,
                help: "requests that failed (a refused or reset connection, a timeout, a wrong answer), over every phase",
            },
        ]
    };
}

pub mod driver;
pub mod http;
pub mod nginx;
pub mod postgres;
pub mod redis;
pub mod server;

/// The metrics of a service that are present only in some trials: each load's (a load not asked
/// for, or not carried: its latencies left out).
pub fn conditional(kind_metrics: &'static [crate::workload::MetricSpec]) -> Vec<&'static str> {
    kind_metrics.iter().map(|m| m.name).filter(|n| n.contains("_at")).collect()
}

/// One client phase of service `k` as samples: the capacity, or one offered load's latencies
/// (left out where the load was not carried), rate and backlog; errors in both.
pub fn phase_output<C: driver::Protocol>(
    k: &str,
    p: &Params,
    ctx: &RunCtx,
    c: &C,
    phase: &str,
) -> Result<Output, AppError> {
    let connections = p.u64("connections")? as usize;
    let duration = std::time::Duration::from_millis(p.ms_or("duration", 3000));
    let o = offered(p, phase)?;
    let (rate, load) = (o.map(|x| x.0), o.map(|x| x.1));
    let t = driver::drive(c, driver::Phase { connections, duration, rate }, ctx)?;
    Ok(tally_output(k, phase, load, &t, json!({})))
}

/// The phase's rate for an open loop (`rate`, its `loads` percentage), None for the capacity.
pub fn offered(p: &Params, phase: &str) -> Result<Option<(f64, u64)>, AppError> {
    if phase != "open" {
        return Ok(None);
    }
    let load = loads(p)?.first().copied().ok_or_else(|| ParamError::new("loads", "no load given"))?;
    let rate = p.f64("rate")?;
    if rate <= 0.0 {
        return Err(ParamError::new("rate", "an open-loop phase needs the rate it offers").into());
    }
    Ok(Some((rate, load)))
}

/// A phase's tally as samples (the capacity, or the load's latencies where carried, its rate and
/// backlog; errors in both) and its stored detail (`more` merged into it: a tool's output).
pub fn tally_output(k: &str, phase: &str, load: Option<u64>, t: &driver::Tally, more: Value) -> Output {
    let mut samples = Vec::new();
    match load {
        None => samples.push(sample(&format!("{k}_capacity"), t.rate(), "req/s")),
        Some(l) => {
            if t.carried() {
                for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999")] {
                    samples.push(sample(&format!("{k}_{name}_at{l}"), t.quantile_us(q), "us"));
                }
            }
            samples.push(sample(&format!("{k}_rate_at{l}"), t.rate(), "req/s"));
            samples.push(sample(&format!("{k}_backlog_at{l}"), t.backlog as f64, "req"));
        }
    }
    samples.push(sample(&format!("{k}_errors"), t.errors as f64, "req"));
    let mut extra: Value = json!({ "phase": phase, "load": load, "tally": t.detail() });
    if let (Some(e), Value::Object(m)) = (extra.as_object_mut(), more) {
        e.extend(m);
    }
    Output { samples, extra }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: serde_json::Value) -> std::collections::BTreeMap<String, serde_json::Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn loads_are_a_set_of_the_declared_percentages() {
        let m = params(json!({"loads": "75, 25,50,25"}));
        assert_eq!(loads(&Params(&m)).unwrap(), vec![25, 50, 75]);
        let bad = params(json!({"loads": "30"}));
        let e = loads(&Params(&bad)).unwrap_err();
        assert_eq!(e.key, "loads");
        assert!(e.message.contains("10, 25, 50, 75, 90"), "{}", e.message);
        let word = params(json!({"loads": "half"}));
        assert!(loads(&Params(&word)).is_err());
    }

    #[test]
    fn every_offered_load_has_its_metrics_declared() {
        let m: &[crate::workload::MetricSpec] = service_metrics!("x", "requests");
        for l in LOADS {
            for q in ["p50", "p90", "p99", "p999", "rate", "backlog"] {
                let name = format!("x_{q}_at{l}");
                assert!(m.iter().any(|s| s.name == name), "{name}");
            }
        }
        assert_eq!(m[0].name, "x_capacity");
        assert!(conditional(m).iter().all(|n| n.contains("_at")));
    }
}
