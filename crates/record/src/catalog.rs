//! What a case *is*, as a run stores it: its family, its report section, its metrics with their
//! units and which way each is better, how many are headlines, what a warm-up does of a trial's
//! work, the link bound it is compared with. The orchestrator writes a [`CaseRecord`] for every
//! case (and the [`MetricRecord`] of every metric its build declared) in the run's first
//! transaction; the report reads only these, never the workload code that made them, so a run
//! reads the same years later, after the workloads changed.
//!
//! A database stored before the records were is filled once, when it is migrated, by the
//! [`Describe`] the program installed ([`install`]): the workloads of the build that reads it,
//! which is what described such a run before.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which direction of a metric is better: the report uses it to say "slower" or "faster".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
    /// Not a performance figure (the background load reached): reported, never compared.
    Neither,
}

impl Better {
    /// Its stored (and printed) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
            Better::Neither => "neither",
        }
    }
    pub fn parse(s: &str) -> Option<Better> {
        [Better::Higher, Better::Lower, Better::Neither].into_iter().find(|b| b.as_str() == s)
    }
}

/// What a workload measures: the report states each environment's cost per family (the
/// geometric mean of its workloads' headline ratios).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Compute,
    Memory,
    /// System calls and the kernel's mechanisms (faults, switches, processes, signals, IPC).
    System,
    Timer,
    Disk,
    Network,
    /// A real server (nginx, …) under load from the tester: what a layer costs a service.
    Service,
    Other,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Compute => "compute",
            Family::Memory => "memory",
            Family::System => "system calls & kernel",
            Family::Timer => "timers",
            Family::Disk => "disk",
            Family::Network => "network",
            Family::Service => "services",
            Family::Other => "other",
        }
    }
}

/// What a shaped link bounds in a workload (the report prints the link's analytic ceiling beside
/// the measurement: [`LinkBound::ceiling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "bound", rename_all = "snake_case")]
pub enum LinkBound {
    /// TCP goodput: payload bits per second through MSS-sized segments.
    TcpGoodput,
    /// UDP datagrams per second of this payload size.
    UdpDatagrams { payload: u64 },
}

impl LinkBound {
    /// What this bound is on a link of `rate_bps` and `mtu`: Gbit/s of TCP goodput, or thousands
    /// of datagrams per second.
    pub fn ceiling(self, rate_bps: u64, mtu: u32) -> Option<f64> {
        match self {
            LinkBound::TcpGoodput => crate::wire::tcp_ceiling_bps(rate_bps, mtu).map(|b| b / 1e9),
            LinkBound::UdpDatagrams { payload } => {
                Some(crate::wire::udp_ceiling_pps(rate_bps, payload) / 1e3)
            }
        }
    }
}

/// Suffix of a metric recomputed from the host's clock (a guest's figure timed by the host).
pub const HOST_SUFFIX: &str = "_host";

/// The metric `name` stands for: without the host-clock suffix and a flow's direction
/// (`_out`, `_in`, for direction = both), the candidates in the order they are tried. The one
/// reading of a suffixed name: the records here and the workload registry's `metric` use it.
pub fn declared_names(name: &str) -> [&str; 2] {
    let name = name.strip_suffix(HOST_SUFFIX).unwrap_or(name);
    let base = name.strip_suffix("_out").or_else(|| name.strip_suffix("_in")).unwrap_or(name);
    [name, base]
}

/// One metric as a run stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRecord {
    pub name: String,
    pub unit: String,
    /// Which way it is better, for this case's parameters (`command`'s metrics say so).
    pub better: Better,
}

/// What the report needs to know of a case, recorded when its run starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseRecord {
    pub family: Family,
    /// The report's section for what it measures beyond the results table (`disk`, `timer`,
    /// `rfc2544`); None: the results table says it all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// A procedure the orchestrator drives as many steps of another workload (RFC 2544).
    #[serde(default)]
    pub procedure: bool,
    /// A network stream (a sender that does not wait for answers): the explain model prices its
    /// packets in bulk.
    #[serde(default)]
    pub streams: bool,
    /// Its declared metrics, in the workload's order.
    pub metrics: Vec<MetricRecord>,
    /// How many of the leading metrics are headlines (what precision mode watches, what the
    /// answer and the families show).
    pub headlines: usize,
    /// The share of a trial's work its warm-up does, where a warm-up scales a count the case
    /// gives (`pde`'s iterations at a quarter); None: a warm-up does a whole trial's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_share: Option<f64>,
    /// The metric a shaped link bounds, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bound: Option<(String, LinkBound)>,
    /// How long one trial is planned to take, ms, where the case says (its `duration`; a
    /// service's every phase): a trial far longer stalled. None: a fixed amount of work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_ms: Option<f64>,
}

impl CaseRecord {
    /// A case of a kind this build does not know: no metrics of its own, family "other".
    pub fn unknown() -> CaseRecord {
        CaseRecord {
            family: Family::Other,
            section: None,
            procedure: false,
            streams: false,
            metrics: Vec::new(),
            headlines: 0,
            warmup_share: None,
            link_bound: None,
            planned_ms: None,
        }
    }
    /// Its declared metric `name` stands for (a `_out`/`_in`/`_host` suffix names the same).
    pub fn metric(&self, name: &str) -> Option<&MetricRecord> {
        declared_names(name).into_iter().find_map(|n| self.metrics.iter().find(|m| m.name == n))
    }
    /// Where `name` is among its declared metrics (exactly, no suffix).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.metrics.iter().position(|m| m.name == name)
    }
    /// Its first metric: the one its tables and instance tables show.
    pub fn headline(&self) -> Option<&MetricRecord> {
        self.metrics.first()
    }
    /// Whether `metric` (a declared name, or one with a `_out`/`_in`/`_host` suffix) is one of
    /// its headline metrics.
    pub fn is_headline(&self, metric: &str) -> bool {
        self.metrics.iter().take(self.headlines).any(|m| {
            metric == m.name || metric.strip_prefix(m.name.as_str()).is_some_and(|rest| rest.starts_with('_'))
        })
    }
    /// Whether its cases show in the report's section `section`.
    pub fn in_section(&self, section: &str) -> bool {
        self.section.as_deref() == Some(section)
    }
}

/// Every metric a run's build declared, for figures that are not a case's own (the background
/// load's `load_achieved` in any case's trials).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(pub Vec<MetricRecord>);

impl Metrics {
    /// The metric `name` stands for, as [`CaseRecord::metric`] finds it, among all of them.
    pub fn find(&self, name: &str) -> Option<&MetricRecord> {
        declared_names(name).into_iter().find_map(|n| self.0.iter().find(|m| m.name == n))
    }
}

/// What describes a case from its kind and parameters: the workloads of a build. The store asks
/// it only to fill the records of runs stored before records were ([`install`]).
pub trait Describe: Sync {
    /// The record of a case of `kind` with `params` (None: a kind this build does not know).
    fn case(&self, kind: &str, params: &Value) -> Option<CaseRecord>;
    /// Every metric the build's workloads declare, each name once (the first declaration).
    fn metrics(&self) -> Vec<MetricRecord>;
}

static DESCRIBER: OnceLock<&'static dyn Describe> = OnceLock::new();

/// Installs what describes the cases of runs stored before records were (once; the program's
/// workloads). A later call is ignored: one build has one set of workloads.
pub fn install(d: &'static dyn Describe) {
    let _ = DESCRIBER.set(d);
}

/// The installed describer, if any.
pub(crate) fn describer() -> Option<&'static dyn Describe> {
    DESCRIBER.get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> CaseRecord {
        let m = |name: &str, better| MetricRecord { name: name.into(), unit: "x".into(), better };
        CaseRecord {
            family: Family::Network,
            metrics: vec![m("tcp_goodput", Better::Higher), m("tcp_retransmits", Better::Lower)],
            headlines: 1,
            ..CaseRecord::unknown()
        }
    }

    #[test]
    fn suffixes_name_the_declared_metric() {
        let r = rec();
        assert_eq!(r.metric("tcp_goodput_in").map(|m| m.better), Some(Better::Higher));
        assert_eq!(r.metric("tcp_goodput_host").map(|m| m.name.as_str()), Some("tcp_goodput"));
        assert!(r.metric("tcp_goodput_sideways").is_none());
        assert!(r.is_headline("tcp_goodput_in") && r.is_headline("tcp_goodput"));
        assert!(!r.is_headline("tcp_retransmits"));
        assert_eq!((r.position("tcp_retransmits"), r.position("tcp_goodput_in")), (Some(1), None));
    }

    #[test]
    fn records_round_trip_through_their_stored_json() {
        let mut r = rec();
        r.link_bound = Some(("udp_pps".into(), LinkBound::UdpDatagrams { payload: 18 }));
        r.section = Some("disk".into());
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            text.contains(r#""better":"higher""#) && text.contains(r#""bound":"udp_datagrams""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<CaseRecord>(&text).unwrap(), r);
        assert_eq!(
            LinkBound::UdpDatagrams { payload: 18 }.ceiling(1_000_000_000, 1500).map(f64::round),
            Some(1488.0),
            "64-byte frames on GbE, in thousands per second"
        );
        for b in [Better::Higher, Better::Lower, Better::Neither] {
            assert_eq!(Better::parse(b.as_str()), Some(b));
        }
    }
}
