//! The explain model's events ("mechanisms") and the microbenchmark that prices each, and how a
//! pass's stored counts become those events (docs/explain.md). The agent stores its raw counts
//! with each counted warm-up; the report reads them back through [`model_events`], and the
//! experiment adds the pricing cases of [`MECHANISMS`] to an `explain = true` run, so both ends
//! read one table.

use std::collections::BTreeMap;

use serde_json::Value;

/// The system call classes the agent counts (`virtperf_workload::counts`): `syscalls` less these is
/// what none holds.
const SYSCALL_CLASSES: [&str; 6] =
    ["syscalls_fd", "syscalls_path", "syscalls_open", "syscalls_dir", "syscalls_io", "syscalls_mem"];

/// An event of the model and the microbenchmark that prices it in each environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mechanism {
    /// The event, as the model counts it (derived from the counts: `processes` is tasks less
    /// threads, `cpu_user_ns` the task clock's user-mode share).
    pub event: &'static str,
    /// The workload kind whose cases measure its cost.
    pub kind: &'static str,
    /// The parameters a case of `kind` needs to price it, as resolved (defaults included): a
    /// `udp_stream` of 64-byte frames is a workload to explain, one of 1518-byte frames the
    /// price of a stream's packet. Empty: any case of the kind.
    pub params: &'static [(&'static str, &'static str)],
    /// The name of the case an `explain = true` run adds (None: the kind's own).
    pub name: Option<&'static str>,
    /// The kind that priced it before `kind` existed (an older run's): used when no `kind` case is.
    pub older: Option<&'static str>,
    /// In words, for the report.
    pub what: &'static str,
}

impl Mechanism {
    /// The case that prices it, as a flag writes it: `udp_stream:frame_size=1518,direction=out,…`.
    pub fn spec(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if params.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}:{}", self.kind, params.join(","))
        }
    }

    /// A case of `kind` whose resolved parameter `k` reads `param(k)` prices this event.
    pub fn priced_by(&self, kind: &str, param: impl Fn(&str) -> Option<String>) -> bool {
        kind == self.kind && self.params.iter().all(|(k, v)| param(k).as_deref() == Some(*v))
    }
}

/// A mechanism that any case of its kind prices.
const fn of(event: &'static str, kind: &'static str, what: &'static str) -> Mechanism {
    Mechanism { event, kind, params: &[], name: None, older: None, what }
}

/// The model's events, each with the microbenchmark an `explain = true` run adds to price it.
pub const MECHANISMS: [Mechanism; 16] = [
    of("syscalls", "syscall", "other system calls"),
    Mechanism { older: Some("fileop"), ..of("syscalls_fd", "fdop", "descriptor calls") },
    of("syscalls_path", "stat", "path lookups"),
    of("syscalls_open", "open", "files opened"),
    // UML answers an open file's fstat from its inode, as cheap as getppid (7.9 against 7.2 µs
    // here), gVisor from its gofer, nearly a lookup (51 against 61 µs): a price of its own.
    of("fstats", "fstat", "descriptor attributes (fstat)"),
    of("syscalls_dir", "readdir", "directory reads"),
    of("syscalls_io", "pipe_rr", "reads and writes"),
    of("syscalls_mem", "mmap", "memory mappings"),
    of("faults_minor", "pagefault", "page faults"),
    of("switches", "ctxswitch", "context switches"),
    of("processes", "fork", "process creations"),
    of("execs", "exec", "program starts (execve)"),
    of("signals", "signal", "signals delivered"),
    of("cpu_user_ns", "cpu", "user-mode CPU time"),
    of("packets_rx", "udp_rr", "packets received and answered"),
    // A stream's packets, sent or received, priced in bulk by MTU-sized datagrams sent as fast
    // as they go (64 a call): a round trip's price (udp_rr's, a wake-up per packet) put UML's
    // TCP stream at 7.1x against 1.29x measured, its acknowledgements 1.9x of it.
    Mechanism {
        params: &[("frame_size", "1518"), ("direction", "out"), ("rate", "0"), ("batch", "64")],
        name: Some("udp_mtu"),
        ..of("stream_packets", "udp_stream", "packets of a stream (sent or received)")
    },
];

/// The model's events from one pass's counts (what the agent's counters report: `virtperf_workload::counts`): None for an event
/// the pass could not count. `streams`: the pass is of a stream ([`crate::CaseRecord::streams`]),
/// whose packets, sent and received, are `stream_packets`; a request/response's received ones
/// are `packets_rx` (each answered: the packet sent is in its price).
pub fn model_events(counts: &Value, streams: bool) -> BTreeMap<&'static str, f64> {
    let get = |k: &str| counts.get(k).and_then(Value::as_f64);
    let mut out = BTreeMap::new();
    for k in ["execs", "signals"] {
        if let Some(v) = get(k) {
            out.insert(k, v);
        }
    }
    // `syscalls` is what no class holds (a pass counted without classes: all of them).
    if let Some(total) = get("syscalls") {
        let mut rest = total;
        for k in SYSCALL_CLASSES {
            // An older run counted one class of file system calls, priced by `fileop`.
            let v = get(k).or_else(|| (k == "syscalls_fd").then(|| get("syscalls_file")).flatten());
            if let Some(v) = v {
                out.insert(k, v);
                rest -= v;
            }
        }
        out.insert("syscalls", rest.max(0.0));
        // A descriptor's attributes asked through newfstatat or statx: an event of its own, not a
        // lookup (where the pass could tell them apart).
        let (f, fx) = (get("fstats"), get("fstats_statx"));
        if let (Some(path), true) = (out.get("syscalls_path").copied(), f.is_some() || fx.is_some()) {
            let moved = (f.unwrap_or(0.0) + fx.unwrap_or(0.0)).min(path);
            out.insert("syscalls_path", path - moved);
            out.insert("fstats", moved);
        }
    }
    out.insert("faults_minor", get("faults_minor").or_else(|| get("ru_minflt")).unwrap_or(0.0));
    if let Some(v) = get("switches").or_else(|| Some(get("ru_nvcsw")? + get("ru_nivcsw")?)) {
        out.insert("switches", v);
    }
    if let (Some(t), Some(th)) = (get("tasks"), get("threads")) {
        out.insert("processes", (t - th).max(0.0));
    }
    match (get("net_rx_packets"), get("net_tx_packets")) {
        (Some(rx), tx) if streams => {
            out.insert("stream_packets", rx + tx.unwrap_or(0.0));
        }
        (Some(rx), _) => {
            out.insert("packets_rx", rx);
        }
        _ => {}
    }
    // User-mode CPU: the task clock (exact) split as getrusage splits it (by ticks).
    let (u, s) = (get("ru_utime_ns").unwrap_or(0.0), get("ru_stime_ns").unwrap_or(0.0));
    let user = match get("task_clock_ns") {
        Some(tc) if u + s > 0.0 => tc * u / (u + s),
        _ => u,
    };
    out.insert("cpu_user_ns", user);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A request/response's packets received are each one answered (`udp_rr`'s price); a
    /// stream's, sent and received, are one bulk event (an MTU-sized `udp_stream`'s price), and
    /// only a case of those parameters prices it.
    #[test]
    fn a_streams_packets_are_priced_in_bulk_and_a_round_trips_each() {
        let c = json!({"net_rx_packets": 30, "net_tx_packets": 70, "syscalls": 5});
        let rr = model_events(&c, false);
        assert_eq!((rr.get("packets_rx"), rr.get("stream_packets")), (Some(&30.0), None));
        let stream = model_events(&c, true);
        assert_eq!((stream.get("packets_rx"), stream.get("stream_packets")), (None, Some(&100.0)));
        // Nothing counted on the wire: no packet event either way.
        assert!(!model_events(&json!({"syscalls": 5}), true).contains_key("stream_packets"));
        let bulk = MECHANISMS.iter().find(|m| m.event == "stream_packets").unwrap();
        let params = |frame: &'static str| {
            move |k: &str| {
                Some(String::from(match k {
                    "frame_size" => frame,
                    "direction" => "out",
                    "rate" => "0",
                    "batch" => "64",
                    _ => return None,
                }))
            }
        };
        assert!(bulk.priced_by("udp_stream", params("1518")));
        assert!(!bulk.priced_by("udp_stream", params("64")), "a 64-byte stream is a workload, not the price");
        assert!(!bulk.priced_by("tcp_stream", params("1518")));
        // A mechanism without parameters: any case of its kind.
        let rr_m = MECHANISMS.iter().find(|m| m.event == "packets_rx").unwrap();
        assert!(rr_m.priced_by("udp_rr", |_| None));
    }

    /// An older run's one class of file system calls (`syscalls_file`, priced by `fileop`) reads
    /// as descriptor calls, so its report still prices them; what no class holds is the rest.
    #[test]
    fn an_older_runs_file_class_reads_as_descriptor_calls() {
        let old = json!({"syscalls": 100, "syscalls_file": 30, "syscalls_io": 20});
        let ev = model_events(&old, false);
        assert_eq!((ev["syscalls_fd"], ev["syscalls_io"], ev["syscalls"]), (30.0, 20.0, 50.0));
        assert!(!ev.contains_key("syscalls_path") && !ev.contains_key("syscalls_dir"));
        let m = MECHANISMS.iter().find(|m| m.event == "syscalls_fd").unwrap();
        assert_eq!((m.kind, m.older), ("fdop", Some("fileop")));
        // Today's classes, each its own.
        let now = json!({"syscalls": 100, "syscalls_fd": 10, "syscalls_path": 20, "syscalls_open": 4, "syscalls_dir": 5, "syscalls_file": 99});
        let ev = model_events(&now, false);
        assert_eq!(
            (ev["syscalls_fd"], ev["syscalls_path"], ev["syscalls_open"], ev["syscalls_dir"], ev["syscalls"]),
            (10.0, 20.0, 4.0, 5.0, 61.0)
        );
        assert!(!ev.contains_key("fstats"), "counted together, as before: {ev:?}");
        // newfstatat and statx with AT_EMPTY_PATH (7 + 2 of the 20 path calls): fstats, apart.
        let split =
            json!({"syscalls": 100, "syscalls_fd": 10, "syscalls_path": 20, "fstats": 7, "fstats_statx": 2});
        let ev = model_events(&split, false);
        assert_eq!(
            (ev["fstats"], ev["syscalls_path"], ev["syscalls_fd"], ev["syscalls"]),
            (9.0, 11.0, 10.0, 70.0)
        );
        // Never more than the lookups counted (the counters opened a moment apart).
        let ev = model_events(
            &json!({"syscalls": 100, "syscalls_fd": 10, "syscalls_path": 3, "fstats": 5}),
            false,
        );
        assert_eq!((ev["fstats"], ev["syscalls_path"]), (3.0, 0.0));
    }
}
