//! The registry of workload kinds and the agent's entry: find a kind, validate a request
//! ([`prepare`]) and run it. It imports every workload; none imports it.
//!
//! To add a workload: write a module with a `pub struct X;` implementing
//! [`crate::workload::Workload`], add it to [`REGISTRY`] here, and document it in
//! `docs/workloads.md`.

use std::collections::BTreeMap;

use serde_json::Value;
use virtperf_proto::{ErrorCode, NetRole, Sample, WorkloadSpec};

use crate::params::{self, Params};
use crate::rfc2544::{self, frames};
use crate::workload::{MetricSpec, Output, RunCtx, Workload};
use crate::{apps, compute, disk, load, micro, net, pfs, timer, tools};

pub static REGISTRY: &[&dyn Workload] = &[
    &compute::IntMix,
    &compute::Cpu,
    &compute::Pde,
    &compute::Memcpy,
    &compute::Stream,
    &compute::Syscall,
    &micro::CPUID,
    &micro::CLOCK,
    &micro::RDTSC,
    &micro::PAGEFAULT,
    &micro::MMAP,
    &micro::MEMLAT,
    &micro::CTXSWITCH,
    &micro::PIPE_RR,
    &micro::UNIX_RR,
    &micro::FILEOP,
    &micro::FDOP,
    &micro::STAT,
    &micro::OPEN,
    &micro::FSTAT,
    &micro::READDIR,
    &micro::FORK,
    &micro::EXEC,
    &micro::SIGNAL,
    &timer::Timer,
    &compute::Sleep,
    &compute::Noop,
    &disk::Disk,
    &pfs::Pfs,
    &net::TcpStream,
    &net::UdpStream,
    &net::TcpRr,
    &net::UdpRr,
    &frames::Frames,
    &rfc2544::Rfc2544,
    &load::Load,
    &tools::Iperf3,
    &tools::Fio,
    &tools::Sysbench,
    &tools::StressNg,
    &tools::CommandLine,
    &apps::nginx::Nginx,
    &apps::redis::Redis,
    &apps::postgres::Postgres,
];

pub fn find(kind: &str) -> Option<&'static dyn Workload> {
    REGISTRY.iter().copied().find(|w| w.kind() == kind)
}

pub fn kinds() -> Vec<&'static str> {
    REGISTRY.iter().map(|w| w.kind()).collect()
}

/// Finds a metric's spec across all workloads. A flow suffix (`_out`, `_in`, for direction = both)
/// and the host-clock suffix (`_host`) name the same metric.
pub fn metric(name: &str) -> Option<&'static MetricSpec> {
    let [name, base] = virtperf_record::catalog::declared_names(name);
    REGISTRY.iter().flat_map(|w| w.metrics().iter()).find(|m| m.name == name || m.name == base)
}

/// What a case of `kind` with `params` is, as its run records it (`virtperf_record::catalog`):
/// the report reads this record, never the workload. None: a kind this build does not know.
pub fn describe(kind: &str, params: &Value) -> Option<virtperf_record::CaseRecord> {
    use virtperf_record::MetricRecord;
    let w = find(kind)?;
    let map: BTreeMap<String, Value> = serde_json::from_value(params.clone()).unwrap_or_default();
    let p = Params(&map);
    Some(virtperf_record::CaseRecord {
        family: w.family(),
        section: w.report_section().map(str::to_string),
        procedure: w.procedure(),
        streams: w.streams(),
        metrics: w
            .metrics()
            .iter()
            .map(|m| MetricRecord {
                name: m.name.to_string(),
                unit: m.unit.to_string(),
                better: w.better_for(m.name, params).unwrap_or(m.better),
            })
            .collect(),
        headlines: w.headline_metrics(),
        warmup_share: warmup_share(w, &map),
        link_bound: w.link_bound(&p).map(|(m, b)| (m.to_string(), b)),
        planned_ms: w.planned_ms(&p),
    })
}

/// The share of a trial's work a warm-up of this case does, where the warm-up scales a count the
/// case gives (an integer parameter: `pde`'s iterations); None where it scales nothing the case
/// gives (a calibrated count is chosen later, per environment; a duration is not a count).
fn warmup_share(w: &dyn Workload, params: &BTreeMap<String, Value>) -> Option<f64> {
    let key = w.warmup_scales()?;
    let is_count =
        w.params().iter().any(|p| p.name == key && matches!(p.kind, params::ParamKind::Int { .. }));
    let n = params.get(key).and_then(Value::as_u64).filter(|n| is_count && *n > 0)?;
    let mut p: BTreeMap<String, Value> = [(key.to_string(), Value::from(n))].into();
    crate::workload::warmup_params(w, &mut p);
    p.get(key).and_then(Value::as_u64).map(|m| m as f64 / n as f64)
}

/// Every metric the registry declares, each name once (its first declaration, as [`metric`]
/// finds it).
pub fn metric_records() -> Vec<virtperf_record::MetricRecord> {
    let mut out: Vec<virtperf_record::MetricRecord> = Vec::new();
    for m in REGISTRY.iter().flat_map(|w| w.metrics().iter()) {
        if !out.iter().any(|o| o.name == m.name) {
            out.push(virtperf_record::MetricRecord {
                name: m.name.into(),
                unit: m.unit.into(),
                better: m.better,
            });
        }
    }
    out
}

/// The registry as what describes the cases of runs stored before their records were.
pub struct Describer;

impl virtperf_record::catalog::Describe for Describer {
    fn case(&self, kind: &str, params: &Value) -> Option<virtperf_record::CaseRecord> {
        describe(kind, params)
    }
    fn metrics(&self) -> Vec<virtperf_record::MetricRecord> {
        metric_records()
    }
}

/// The one [`Describer`], to install (`virtperf_record::catalog::install(&DESCRIBER)`).
pub static DESCRIBER: Describer = Describer;

/// Why a request gave no result: the protocol's code, the message, and for a workload that ran
/// and failed its [`FailureKind`](crate::error::FailureKind) — what the agent sends as `error`.
#[derive(Debug)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
    pub kind: Option<crate::error::FailureKind>,
}

impl Refusal {
    fn new(code: ErrorCode, message: String) -> Self {
        Refusal { code, message, kind: None }
    }
    /// The agent's `error` reply.
    pub fn reply(self) -> virtperf_proto::Reply {
        virtperf_proto::Reply::Error { code: self.code, message: self.message, kind: self.kind }
    }
}

impl From<crate::error::Error> for Refusal {
    fn from(e: crate::error::Error) -> Self {
        Refusal { code: ErrorCode::WorkloadFailed, message: e.to_string(), kind: Some(e.kind()) }
    }
}

/// A validated request, ready to run.
pub struct Prepared {
    workload: &'static dyn Workload,
    params: BTreeMap<String, Value>,
    net: Option<NetRole>,
    scratch: Option<String>,
}

/// Validates a workload request (agent side): known kind, parameters within their schema.
impl Prepared {
    /// The run has a network peer (a flow's side).
    pub fn has_peer(&self) -> bool {
        self.net.is_some()
    }
}

pub fn prepare(spec: &WorkloadSpec) -> Result<Prepared, Refusal> {
    let workload = find(&spec.kind).ok_or_else(|| {
        Refusal::new(
            ErrorCode::UnknownWorkload,
            format!("unknown workload `{}` (known: {})", spec.kind, kinds().join(", ")),
        )
    })?;
    let params = params::revalidate(workload.params(), &spec.params)
        .map_err(|e| Refusal::new(ErrorCode::BadParams, e.to_string()))?;
    if workload.needs_peer() != spec.net.is_some() {
        let why = if workload.needs_peer() {
            "needs a `net` role (side, bind, peer, port)"
        } else {
            "takes no `net` role"
        };
        return Err(Refusal::new(ErrorCode::BadParams, format!("workload `{}` {why}", spec.kind)));
    }
    Ok(Prepared { workload, params, net: spec.net.clone(), scratch: spec.scratch.clone() })
}

impl Prepared {
    /// Whether the run says `started` itself: only servers do (once they listen); a client is
    /// started as soon as it runs.
    pub fn announces_ready(&self) -> bool {
        self.workload.announces_ready()
            && self.net.as_ref().is_none_or(|n| n.side == virtperf_proto::Side::Server)
    }
    /// Whether the workload calls `begin` itself (else the agent calls it before `run`).
    pub fn marks_timed_region(&self) -> bool {
        self.workload.marks_timed_region()
    }
    /// Runs in the agent's context; the net role comes from the request.
    pub fn run(&self, ctx: &RunCtx) -> Result<Output, Refusal> {
        let ctx = ctx.for_request(self.net.as_ref(), self.scratch.as_deref());
        Ok(self.workload.run(&Params(&self.params), &ctx)?)
    }
}

/// Validates and runs a workload request without an agent around it.
pub fn run(spec: &WorkloadSpec) -> Result<Vec<Sample>, Refusal> {
    prepare(spec)?.run(&RunCtx::detached()).map(|o| o.samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::*;

    /// A case's record says what its workload declares: every metric in order with its unit, the
    /// headlines, the family, the section; `command`'s direction as its parameters say; the
    /// warm-up's share of a count the case gives; a link bound of its parameters.
    #[test]
    fn a_cases_record_is_what_its_workload_declares() {
        for w in REGISTRY {
            let r = describe(w.kind(), &serde_json::json!({})).unwrap();
            let names: Vec<&str> = r.metrics.iter().map(|m| m.name.as_str()).collect();
            let declared: Vec<&str> = w.metrics().iter().map(|m| m.name).collect();
            assert_eq!(names, declared, "{}", w.kind());
            assert_eq!(
                (r.headlines, r.family, r.section.as_deref()),
                (w.headline_metrics(), w.family(), w.report_section())
            );
            assert_eq!((r.procedure, r.streams), (w.procedure(), w.streams()), "{}", w.kind());
        }
        assert!(describe("no-such-kind", &serde_json::json!({})).is_none());
        let cmd = |better: &str| describe("command", &serde_json::json!({ "better": better })).unwrap();
        assert_eq!(cmd("higher").metric("command_regex").map(|m| m.better), Some(Better::Higher));
        assert_eq!(cmd("lower").metric("command_regex").map(|m| m.better), Some(Better::Lower));
        assert_eq!(cmd("higher").metric("command_time").map(|m| m.better), Some(Better::Lower));
        let pde = describe("pde", &serde_json::json!({ "iterations": 300 })).unwrap();
        assert_eq!(pde.warmup_share, Some(0.25));
        assert_eq!(describe("pde", &serde_json::json!({})).unwrap().warmup_share, None, "no count given");
        assert_eq!(
            describe("cpu", &serde_json::json!({ "iterations": 1000 })).unwrap().warmup_share,
            Some(0.25)
        );
        let udp = describe("udp_stream", &serde_json::json!({ "frame_size": 64 })).unwrap();
        assert!(matches!(udp.link_bound, Some((_, LinkBound::UdpDatagrams { .. }))), "{udp:?}");
        let r = describe("tcp_stream", &serde_json::json!({})).unwrap();
        assert!(r.is_headline("tcp_goodput_in") && !r.is_headline("tcp_retransmits"), "{r:?}");
    }

    /// A metric's name means one thing in every workload that declares it: the run's list of the
    /// build's metrics (each name once) then says how any figure of that name is better, whichever
    /// case it came from.
    #[test]
    fn a_metric_declared_twice_is_declared_alike() {
        let mut seen: BTreeMap<&str, (&str, Better, &str)> = BTreeMap::new();
        for w in REGISTRY {
            for m in w.metrics() {
                let first = *seen.entry(m.name).or_insert((m.unit, m.better, w.kind()));
                assert_eq!(
                    (first.0, first.1),
                    (m.unit, m.better),
                    "{}: {} and {}",
                    m.name,
                    first.2,
                    w.kind()
                );
            }
        }
        assert_eq!(metric_records().len(), seen.len());
    }

    /// A warm-up does a quarter of the work of the workload's own scaling parameter — a
    /// calibrated count, a fixed-work workload's repeat count, a flow's duration — and leaves what
    /// a trial touches (sizes) alone; a workload that scales nothing warms up with a whole trial.
    #[test]
    fn warmups_do_a_share_of_the_work_and_touch_the_same_things() {
        let warm = |kind: &str, p: Value| {
            let mut m: BTreeMap<String, Value> = serde_json::from_value(p).unwrap();
            warmup_params(find(kind).unwrap(), &mut m);
            serde_json::to_value(m).unwrap()
        };
        assert_eq!(
            warm("syscall", serde_json::json!({"iterations": 1_000_000})),
            serde_json::json!({"iterations": 250_000})
        );
        assert_eq!(
            warm("memcpy", serde_json::json!({"copies": 10, "size": 10_485_760})),
            serde_json::json!({"copies": 3, "size": 10_485_760})
        );
        assert_eq!(
            warm("pde", serde_json::json!({"iterations": 300, "n": 256})),
            serde_json::json!({"iterations": 75, "n": 256})
        );
        assert_eq!(
            warm("tcp_stream", serde_json::json!({"duration": 500, "streams": 1})),
            serde_json::json!({"duration": 125, "streams": 1})
        );
        assert_eq!(
            warm("memcpy", serde_json::json!({"copies": 1, "size": 4096})),
            serde_json::json!({"copies": 1, "size": 4096}),
            "at least 1"
        );
        // Not scaled: STREAM (its first pass faults in arrays of 4 × the cache) and disk.
        for kind in ["stream", "disk", "rfc2544"] {
            assert_eq!(find(kind).unwrap().warmup_scales(), None, "{kind}");
        }
    }

    #[test]
    fn every_metric_name_is_unique_and_declared_once() {
        let mut seen = std::collections::BTreeSet::new();
        for w in REGISTRY {
            for m in w.metrics() {
                assert!(seen.insert(m.name), "metric {} declared twice", m.name);
            }
        }
    }

    #[test]
    fn docs_describe_every_workload_parameter_and_metric() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/workloads.md")).unwrap();
        for w in REGISTRY {
            let row = doc
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", w.kind())))
                .unwrap_or_else(|| panic!("docs/workloads.md has no row for `{}`", w.kind()));
            for p in w.params() {
                assert!(
                    row.contains(&format!("`{}`", p.name)),
                    "docs: `{}` lacks parameter `{}`",
                    w.kind(),
                    p.name
                );
            }
            for m in w.metrics() {
                assert!(
                    row.contains(&format!("`{}`", m.name)),
                    "docs: `{}` lacks metric `{}`",
                    w.kind(),
                    m.name
                );
                assert!(row.contains(m.unit), "docs: `{}` lacks unit {}", w.kind(), m.unit);
            }
        }
    }

    #[test]
    fn every_default_is_valid() {
        for w in REGISTRY {
            params::resolve(w.params(), &BTreeMap::new())
                .unwrap_or_else(|e| panic!("{}: default of {} invalid: {}", w.kind(), e.key, e.message));
        }
    }

    #[test]
    fn run_rejects_bad_requests_with_codes() {
        let spec = |k: &str, p: Value| WorkloadSpec {
            kind: k.into(),
            params: serde_json::from_value(p).unwrap(),
            net: None,
            scratch: None,
            count: None,
        };
        assert_eq!(run(&spec("nope", serde_json::json!({}))).unwrap_err().code, ErrorCode::UnknownWorkload);
        assert_eq!(
            run(&spec("memcpy", serde_json::json!({"size": -1}))).unwrap_err().code,
            ErrorCode::BadParams
        );
        assert_eq!(
            run(&spec("memcpy", serde_json::json!({"wat": 1}))).unwrap_err().code,
            ErrorCode::BadParams
        );
        assert_eq!(
            run(&spec("memcpy", serde_json::json!({"size": [1]}))).unwrap_err().code,
            ErrorCode::BadParams
        );
        // A workload that ran and failed says its kind beside the message: the disk workload
        // with no scratch disk cannot run in that environment at all.
        let no_disk = run(&spec("disk", serde_json::json!({}))).unwrap_err();
        assert_eq!(no_disk.code, ErrorCode::WorkloadFailed);
        assert_eq!(no_disk.kind, Some(crate::error::FailureKind::Unsupported), "{no_disk:?}");
        assert!(no_disk.message.contains("no scratch disk"), "{no_disk:?}");
        // Validation's refusals carry no kind: the request never ran.
        assert_eq!(run(&spec("nope", serde_json::json!({}))).unwrap_err().kind, None);
        // On the wire: the kind beside the message.
        let wire = serde_json::to_value(no_disk.reply()).unwrap();
        assert_eq!(wire["kind"], "unsupported", "{wire}");
    }

    #[test]
    fn every_workload_runs_small_and_reports_its_declared_metrics() {
        let small = serde_json::json!({
            "intmix": {"iterations": 1000, "working_set": 4096},
            "cpu": {"iterations": 1000},
            "pde": {"n": 16, "iterations": 5},
            "memcpy": {"size": 4096, "copies": 2},
            "stream": {"elements": 1000, "ntimes": 2},
            "syscall": {"iterations": 100},
            "fileop": {"iterations": 100},
            "fdop": {"iterations": 100},
            "stat": {"iterations": 100},
            "open": {"iterations": 100},
            "fstat": {"iterations": 100},
            "readdir": {"iterations": 10},
            "cpuid": {"iterations": 100},
            "clock": {"iterations": 100},
            "rdtsc": {"iterations": 100},
            "pagefault": {"pages": 64},
            "mmap": {"iterations": 10},
            "memlat": {"size": 65536, "loads": 1000},
            "ctxswitch": {"iterations": 10},
            "pipe_rr": {"iterations": 10},
            "unix_rr": {"iterations": 10},
            "fork": {"iterations": 2},
            "exec": {"iterations": 1, "program": "/bin/true"},
            "signal": {"iterations": 10},
            "timer": {"interval": 1, "duration": 20},
            "sleep": {"duration": 1},
            "noop": {},
            "disk": {"file_size": 1 << 20, "record_size": 65536},
        });
        for w in REGISTRY
            .iter()
            .filter(|w| !w.needs_peer() && w.kind() != "load" && !tools::KINDS.contains(&w.kind()))
        {
            let p = small.get(w.kind()).unwrap_or_else(|| panic!("no small case for {}", w.kind()));
            let samples = run(&WorkloadSpec {
                kind: w.kind().into(),
                params: serde_json::from_value(p.clone()).unwrap(),
                net: None,
                scratch: std::env::temp_dir().to_str().map(String::from),
                count: None,
            })
            .unwrap_or_else(|e| panic!("{}: {:?}", w.kind(), e));
            let mut names: Vec<&str> = samples.iter().map(|s| s.metric.as_str()).collect();
            let mut declared: Vec<&str> =
                w.metrics().iter().map(|m| m.name).filter(|m| !w.conditional_metrics().contains(m)).collect();
            names.retain(|n| !w.conditional_metrics().contains(n));
            names.sort();
            declared.sort();
            assert_eq!(names, declared, "{}", w.kind());
            for s in &samples {
                assert!(s.value.is_finite() && s.value >= 0.0, "{}: {:?}", w.kind(), s);
                assert_eq!(Some(s.unit.as_str()), metric(&s.metric).map(|m| m.unit));
            }
        }
    }
}
