//! The virtperf agent wire protocol.
//!
//! One frame is one line of UTF-8 JSON terminated by `\n`, at most [`MAX_FRAME`] bytes.
//! Every frame carries the protocol version `v` and a `tag`; a reply echoes the tag of the
//! request it answers. The full contract, with examples, is in `docs/protocol.md`.
//!
//! Line framing was chosen over a binary length prefix because the same stream later crosses
//! serial ports and virtio-serial: a line can be re-synchronised after garbage, is readable in
//! a console log, and a bounded line length protects both sides from unbounded allocation.

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

/// Protocol version spoken by this build. A peer with another version gets an
/// `unsupported_version` error reply.
pub const VERSION: u32 = 1;

/// Longest frame accepted, newline included (1 MiB). Longer lines are discarded and answered
/// with a `malformed` error.
pub const MAX_FRAME: usize = 1 << 20;

/// The most of a kernel command line an `info` carries, bytes.
pub const MAX_CMDLINE: usize = 4096;
/// The most CPU vulnerabilities an `info` names (Linux 6.12 knows 20).
pub const MAX_VULNERABILITIES: usize = 64;
/// The most of one vulnerability's line an `info` carries, bytes.
pub const MAX_VULNERABILITY_LINE: usize = 256;

/// Prefix the agent writes before the JSON of every frame it sends. Anything on the stream that
/// does not start with it (a shell banner, a stray kernel message on a console) is ignored by
/// the host instead of being parsed as a reply.
pub const FRAME_PREFIX: &str = "@vp ";

/// A workload to run: its kind and its parameters, already validated by the orchestrator
/// (the agent validates again and answers `bad_params` on a mismatch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub kind: String,
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// For network workloads: which side this agent plays and where its peer is (set by the
    /// orchestrator, never by the user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetRole>,
    /// The directory, inside the environment, on the scratch disk it provides (a file system of
    /// its own: a bind-mounted host directory, an overlay, a guest's block device); set by the
    /// orchestrator for workloads that write files, absent when the environment has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<String>,
    /// Count the run's events (system calls, faults, switches…) over its timed region and return
    /// them in the result's `extra.counts` (set by the orchestrator on unstored passes only: the
    /// counters cost time, docs/explain.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<Counting>,
}

/// What to count in a run (docs/explain.md). The kernel's software events (faults, switches,
/// migrations) need no names; tracepoints (system calls, forks, execs, signals) are numbered per
/// booted kernel, so the host sends its ids with its boot id and an agent uses them only when it
/// runs on that same kernel (natively, in a container); elsewhere it counts what it can read itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counting {
    /// `/proc/sys/kernel/random/boot_id` of the kernel the ids belong to.
    #[serde(default)]
    pub boot_id: String,
    /// Event name (`syscalls`, `forks`, `execs`, `signals`) → tracepoint id.
    #[serde(default)]
    pub tracepoints: BTreeMap<String, u64>,
    /// Only what getrusage says (faults, switches, CPU): two calls each side of a timed trial,
    /// where the full counters would slow it.
    #[serde(default)]
    pub rusage_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Listens on `bind:port`, receives (stream) or answers (request/response).
    Server,
    /// Connects to `peer:port`, sends (stream) or asks (request/response).
    Client,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRole {
    pub side: Side,
    /// Local address to bind (the agent's lab address).
    pub bind: String,
    /// The other side's lab address (for a server: the only address it accepts traffic from).
    pub peer: String,
    pub port: u16,
    /// Distinguishes the flows of one trial (direction = both): stamped into datagrams.
    #[serde(default)]
    pub flow: u32,
    /// This side is the lab's tester — the measuring instrument — not an environment under test.
    /// The instrument may take what no application in an environment is given (socket buffers
    /// beyond the kernel's defaults), so that it never sets the figure; a side under test gets
    /// exactly the same in every environment.
    #[serde(default)]
    pub instrument: bool,
}

/// One measured value. `metric` names carry no unit; `unit` does (`ms`, `ops/s`, `GB/s`, `ns/op`, `s`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

/// CPU time used, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTime {
    pub user_ns: u64,
    pub system_ns: u64,
}

impl CpuTime {
    pub fn total_ns(&self) -> u64 {
        self.user_ns + self.system_ns
    }
}

/// CPU time of the whole system the agent sees (`/proc/stat`, all CPUs), over a run: what `sar`
/// reports inside a guest. In a container it is the host's (Linux does not virtualise /proc/stat).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemCpu {
    /// user + nice + system + irq + softirq + steal, ns summed over CPUs.
    pub busy_ns: u64,
    /// idle + iowait, ns summed over CPUs.
    pub idle_ns: u64,
    /// softirq alone (network receive processing lands here), ns.
    pub softirq_ns: u64,
    pub cpus: u32,
}

impl SystemCpu {
    /// Busy share of all CPUs, %.
    pub fn util_pct(&self) -> Option<f64> {
        let t = self.busy_ns + self.idle_ns;
        (t > 0).then(|| self.busy_ns as f64 / t as f64 * 100.0)
    }
}

/// Host → agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Liveness and round-trip check; answered with `pong`.
    Ping,
    /// Describe the system the agent runs on; answered with `info`.
    Info,
    /// Run a workload; answered with `started` when the work begins (for a server: once it
    /// listens), then `result` (or `error`). Several runs may be in flight at once, each on its own
    /// thread of the agent (a receiver beside a sender, background load beside a workload).
    ///
    /// `armed`: the workload does its setup (allocating and touching buffers), answers `armed`,
    /// and starts its timed region only when `go` names it. The host then times exactly that
    /// region on its own clock (`go` sent → `result` received, less the idle round trip), and `go`
    /// can be sent to N instances at once (a start barrier).
    Run {
        workload: WorkloadSpec,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        armed: bool,
    },
    /// Starts the armed run with tag `target`. No reply (the run answers with its `result`);
    /// `error` `no_such_run` when no armed run has that tag.
    Go { target: u64 },
    /// Ask the run with tag `target` to finish early; answered with `stopping` (or `error` when no
    /// such run is in flight). The run itself still answers with its `result`.
    Stop { target: u64 },
    /// Exit cleanly; answered with `bye`.
    Shutdown,
}

/// Agent → host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Sent once, unsolicited (tag 0), as soon as the agent is ready.
    Hello {
        agent_version: String,
        pid: u32,
        clock_ns: u64,
    },
    Pong {
        clock_ns: u64,
    },
    Info {
        kernel: String,
        cpu_model: String,
        cpus: u32,
        memory_kib: u64,
        /// The kernel's command line as it booted (`/proc/cmdline`), at most [`MAX_CMDLINE`]
        /// bytes; empty from an agent that does not say it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        cmdline: String,
        /// What the kernel says of each CPU vulnerability it knows (`/sys/devices/system/cpu/
        /// vulnerabilities`): its name and its file's first line ("Mitigation: Retpolines",
        /// "Vulnerable", "Not affected"), by name, at most [`MAX_VULNERABILITIES`] of at most
        /// [`MAX_VULNERABILITY_LINE`] bytes each.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        vulnerabilities: Vec<(String, String)>,
    },
    /// The workload has begun (a server: it listens). The host's deadline for the result starts here.
    Started,
    /// An armed run has done its setup and waits for `go`.
    Armed,
    /// A boundary inside an armed run's timed region (a disk phase begins, or the last ends):
    /// the host stamps it on arrival, so that the span from one lap to the next is on the host's
    /// clock. Followed by more laps and the result.
    Lap {
        name: String,
    },
    /// Results of a `run`. `guest_elapsed_ns` is the guest's monotonic clock around the work;
    /// `guest_cpu` the agent's own CPU time during it (getrusage).
    Result {
        samples: Vec<Sample>,
        guest_elapsed_ns: u64,
        guest_cpu: CpuTime,
        /// Workload-specific detail (a latency histogram, a CPU time series): an object, or
        /// absent. Anything else is refused as the frame is read, so that no part of the host
        /// meets a number where it adds a key.
        #[serde(
            default,
            skip_serializing_if = "serde_json::Value::is_null",
            deserialize_with = "object_or_null"
        )]
        extra: serde_json::Value,
        /// The whole system's CPU as the agent sees it, over the run (optional: older agents).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guest_system: Option<SystemCpu>,
        /// The timed region on the agent's monotonic clock, [begin, end] ns: lets the host cut
        /// another run's series (background load) to this run's window.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window_ns: Option<[u64; 2]>,
    },
    Stopping,
    Bye,
    Error {
        code: ErrorCode,
        message: String,
        /// A failed workload's kind of failure (`workload_failed` only), for the host to decide
        /// on: absent from older agents and for the other codes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<FailureKind>,
    },
}

/// What kind of failure a workload met: the host decides on it, never on the message's words
/// (a cell that cannot run in an environment is set aside, not failed at every repetition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The environment lacks what the workload needs (a system call, an instruction, a program,
    /// a privilege, a scratch disk): it fails the same way every time there.
    Unsupported,
    /// The disk or its quota is full.
    NoSpace,
    /// The network peer refused, reset, did not answer or is missing.
    Peer,
    /// The system refused a resource it may have later (memory, file descriptors, processes).
    Resource,
    /// The workload ran, and its own check of what it did failed (a wrong count, a broken chain).
    Check,
    /// Asked to stop before the end.
    Stopped,
    /// Anything else; a kind from a newer agent that this host does not know reads as this.
    #[serde(other)]
    Other,
}

impl FailureKind {
    /// Whether the same workload fails again in the same environment whatever the host does:
    /// what it lacks stays lacking, and the same work fills the same disk again.
    pub fn lasts(self) -> bool {
        matches!(self, FailureKind::Unsupported | FailureKind::NoSpace)
    }
    /// The kind in a person's words, after what failed ("the workload …"), for a trial's reason.
    pub fn words(self) -> &'static str {
        match self {
            FailureKind::Unsupported => "cannot run in this environment",
            FailureKind::NoSpace => "ran out of disk space",
            FailureKind::Peer => "lost its peer",
            FailureKind::Resource => "ran out of a resource",
            FailureKind::Check => "failed its own check",
            FailureKind::Stopped => "was stopped",
            FailureKind::Other => "failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, not an object, too long, or missing `v`/`tag`/`type`.
    Malformed,
    /// `v` is not [`VERSION`].
    UnsupportedVersion,
    /// `type` is not one this agent knows.
    UnknownType,
    /// The workload kind is unknown to this agent.
    UnknownWorkload,
    /// A parameter is missing, of the wrong type or out of range.
    BadParams,
    /// The workload started but failed.
    WorkloadFailed,
    /// `stop` named a tag with no run in flight.
    NoSuchRun,
}

/// A frame as sent on the wire: version, tag and the message fields flattened beside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame<T> {
    pub v: u32,
    pub tag: u64,
    #[serde(flatten)]
    pub body: T,
}

impl<T> Frame<T> {
    pub fn new(tag: u64, body: T) -> Self {
        Frame { v: VERSION, tag, body }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// the stream ended
    #[error("the stream ended")]
    Eof,
    /// the line is longer than the protocol allows
    #[error("frame longer than {MAX_FRAME} bytes")]
    TooLong,
    /// I/O error on the stream
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one line (without its newline) of at most [`MAX_FRAME`] bytes. A longer line is consumed
/// up to its end and reported as [`FrameError::TooLong`] so the stream stays in sync.
pub fn read_line<R: BufRead>(r: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    let mut too_long = false;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            if out.is_empty() && !too_long {
                return Err(FrameError::Eof);
            }
            break;
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if out.len() + chunk.len() > MAX_FRAME {
                too_long = true;
                out.clear();
            } else {
                out.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(buf.len());
        r.consume(consumed);
        if done.is_some() {
            break;
        }
    }
    if too_long {
        return Err(FrameError::TooLong);
    }
    if out.last() == Some(&b'\r') {
        out.pop();
    }
    Ok(out)
}

/// Why a request line could not be turned into a [`Request`]; carries the tag when it was readable
/// so the error reply can echo it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    pub tag: u64,
    pub code: ErrorCode,
    pub message: String,
}

/// Decodes a request line. Never panics on any input.
pub fn decode_request(line: &[u8]) -> Result<Frame<Request>, DecodeError> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| DecodeError {
        tag: 0,
        code: ErrorCode::Malformed,
        message: format!("not JSON: {e}"),
    })?;
    let obj = value.as_object().ok_or_else(|| DecodeError {
        tag: 0,
        code: ErrorCode::Malformed,
        message: "a frame must be a JSON object".into(),
    })?;
    let tag = match obj.get("tag").and_then(|t| t.as_u64()) {
        Some(t) => t,
        None => {
            return Err(DecodeError {
                tag: 0,
                code: ErrorCode::Malformed,
                message: "missing or non-integer `tag`".into(),
            })
        }
    };
    match obj.get("v").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(VERSION) => {}
        Some(v) => {
            return Err(DecodeError {
                tag,
                code: ErrorCode::UnsupportedVersion,
                message: format!("protocol version {v} is not supported; this agent speaks {VERSION}"),
            })
        }
        None => return Err(DecodeError { tag, code: ErrorCode::Malformed, message: "missing `v`".into() }),
    }
    let ty = obj.get("type").and_then(|t| t.as_str()).ok_or_else(|| DecodeError {
        tag,
        code: ErrorCode::Malformed,
        message: "missing `type`".into(),
    })?;
    if !matches!(ty, "ping" | "info" | "run" | "go" | "stop" | "shutdown") {
        return Err(DecodeError {
            tag,
            code: ErrorCode::UnknownType,
            message: format!("unknown request type `{ty}` (known: ping, info, run, go, stop, shutdown)"),
        });
    }
    serde_json::from_value::<Frame<Request>>(value.clone()).map_err(|e| DecodeError {
        tag,
        code: ErrorCode::Malformed,
        message: format!("bad `{ty}` request: {e}"),
    })
}

/// Parses one line from the agent. Lines without [`FRAME_PREFIX`] are `Ok(None)` (noise).
pub fn decode_reply(line: &[u8]) -> Result<Option<Frame<Reply>>, String> {
    let Some(rest) = line.strip_prefix(FRAME_PREFIX.as_bytes()) else {
        return Ok(None);
    };
    let frame: Frame<Reply> = serde_json::from_slice(rest).map_err(|e| format!("malformed reply: {e}"))?;
    if frame.v != VERSION {
        return Err(format!("agent speaks protocol version {}, this host speaks {VERSION}", frame.v));
    }
    Ok(Some(frame))
}

/// Text from the other side of the boundary (an agent's error message, a guest's console, a
/// tool's output) made safe to print: control characters but newline and tab — the terminal's
/// escape sequences among them — and Unicode's direction overrides are shown as `\x1b`,
/// `\u{202e}`, and the text is cut to `max` characters (an ellipsis says so). What is stored
/// stays as it came; whatever prints it passes it through here.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4));
    for (n, c) in s.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
        if (c.is_control() && c != '\n' && c != '\t') || bidi {
            if (c as u32) < 0x100 {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A JSON object or null, refusing any other value (a result's `extra`).
fn object_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    if v.is_object() || v.is_null() {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "a result's `extra` must be an object, not {}",
            match v {
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::String(_) => "a string",
                _ => "an array",
            }
        )))
    }
}

/// Writes one frame: optional prefix, JSON, newline, flush.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, prefix: &str, frame: &Frame<T>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(prefix.as_bytes());
    serde_json::to_writer(&mut buf, frame)?;
    buf.push(b'\n');
    w.write_all(&buf)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn printable_text_carries_no_escape_sequence() {
        let s = printable("red \u{1b}[31mX\u{1b}[0m\u{7}\ttab\nline \u{202e}txt \u{9b}2J", 100);
        assert_eq!(s, "red \\x1b[31mX\\x1b[0m\\x07\ttab\nline \\u{202e}txt \\x9b2J");
        assert!(!s.chars().any(|c| c.is_control() && c != '\n' && c != '\t'));
        assert_eq!(printable("abcdef", 3), "abc…");
        assert_eq!(printable("é日本", 10), "é日本");
    }

    /// A well-formed result whose `extra` is not an object is refused when read (the host once
    /// panicked adding a key to it, and the trial's helpers hung the run).
    #[test]
    fn a_result_whose_extra_is_not_an_object_is_refused() {
        let line = |extra: &str| {
            format!(
                "{FRAME_PREFIX}{{\"v\":{VERSION},\"tag\":3,\"type\":\"result\",\"samples\":[],\"guest_elapsed_ns\":1,\"guest_cpu\":{{\"user_ns\":0,\"system_ns\":0}}{extra}}}"
            )
        };
        let ok = decode_reply(line("").as_bytes());
        assert!(matches!(ok, Ok(Some(_))), "{ok:?}");
        assert!(matches!(decode_reply(line(",\"extra\":{\"a\":1}").as_bytes()), Ok(Some(_))));
        for bad in ["5", "\"x\"", "[1]", "true"] {
            let e = decode_reply(line(&format!(",\"extra\":{bad}")).as_bytes()).unwrap_err();
            assert!(e.contains("must be an object"), "{bad}: {e}");
        }
    }

    #[test]
    fn request_round_trip() {
        let f = Frame::new(
            7,
            Request::Run {
                workload: WorkloadSpec {
                    kind: "memcpy".into(),
                    params: [("size".to_string(), serde_json::json!(1024))].into_iter().collect(),
                    net: Some(NetRole {
                        side: Side::Server,
                        bind: "198.18.0.2".into(),
                        peer: "198.18.0.1".into(),
                        port: 5201,
                        flow: 1,
                        instrument: false,
                    }),
                    scratch: Some("/scratch".into()),
                    count: Some(Counting {
                        boot_id: "b".into(),
                        tracepoints: [("syscalls".to_string(), 443)].into_iter().collect(),
                        rusage_only: false,
                    }),
                },
                armed: true,
            },
        );
        let mut buf = Vec::new();
        write_frame(&mut buf, "", &f).unwrap();
        let line = read_line(&mut Cursor::new(buf)).unwrap();
        assert_eq!(decode_request(&line).unwrap(), f);
    }

    #[test]
    fn wire_format_is_stable() {
        let mut buf = Vec::new();
        write_frame(&mut buf, "", &Frame::new(3, Request::Ping)).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), "{\"v\":1,\"tag\":3,\"type\":\"ping\"}\n");
        let mut buf = Vec::new();
        write_frame(&mut buf, FRAME_PREFIX, &Frame::new(3, Reply::Pong { clock_ns: 5 })).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "@vp {\"v\":1,\"tag\":3,\"type\":\"pong\",\"clock_ns\":5}\n"
        );
    }

    #[test]
    fn malformed_requests_get_codes_and_tags() {
        let cases: &[(&[u8], u64, ErrorCode)] = &[
            (b"", 0, ErrorCode::Malformed),
            (b"garbage", 0, ErrorCode::Malformed),
            (b"[1,2]", 0, ErrorCode::Malformed),
            (b"{\"v\":1,\"type\":\"ping\"}", 0, ErrorCode::Malformed),
            (b"{\"tag\":4,\"type\":\"ping\"}", 4, ErrorCode::Malformed),
            (b"{\"v\":9,\"tag\":5,\"type\":\"ping\"}", 5, ErrorCode::UnsupportedVersion),
            (b"{\"v\":1,\"tag\":6,\"type\":\"dance\"}", 6, ErrorCode::UnknownType),
            (b"{\"v\":1,\"tag\":8,\"type\":\"run\"}", 8, ErrorCode::Malformed),
            (b"{\"v\":1,\"tag\":9,\"type\":\"run\",\"workload\":{\"kind\":3}}", 9, ErrorCode::Malformed),
            (b"\xff\xfe", 0, ErrorCode::Malformed),
        ];
        for (line, tag, code) in cases {
            let e = decode_request(line).unwrap_err();
            assert_eq!((e.tag, e.code), (*tag, *code), "{:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn overlong_line_is_skipped_and_stream_stays_in_sync() {
        let mut data = vec![b'x'; MAX_FRAME + 10];
        data.push(b'\n');
        data.extend_from_slice(b"{\"v\":1,\"tag\":1,\"type\":\"ping\"}\n");
        let mut c = Cursor::new(data);
        assert!(matches!(read_line(&mut c), Err(FrameError::TooLong)));
        let line = read_line(&mut c).unwrap();
        assert_eq!(decode_request(&line).unwrap().tag, 1);
        assert!(matches!(read_line(&mut c), Err(FrameError::Eof)));
    }

    #[test]
    fn reply_noise_is_ignored() {
        assert_eq!(decode_reply(b"[    0.000000] Linux version 6.1").unwrap(), None);
        assert!(decode_reply(b"@vp {\"v\":1}").is_err());
        assert!(decode_reply(b"@vp {\"v\":2,\"tag\":0,\"type\":\"bye\"}").is_err());
        let f = decode_reply(b"@vp {\"v\":1,\"tag\":2,\"type\":\"bye\"}").unwrap().unwrap();
        assert_eq!(f.body, Reply::Bye);
    }

    /// An error reply's kind: absent from an older agent (read as none), unknown from a newer one
    /// (read as `other`), else what the workload said.
    #[test]
    fn error_kinds_cross_the_wire_both_ways_compatible() {
        let old = decode_reply(
            b"@vp {\"v\":1,\"tag\":3,\"type\":\"error\",\"code\":\"workload_failed\",\"message\":\"m\"}",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            old.body,
            Reply::Error { code: ErrorCode::WorkloadFailed, message: "m".into(), kind: None }
        );
        let newer = decode_reply(
            b"@vp {\"v\":1,\"tag\":3,\"type\":\"error\",\"code\":\"workload_failed\",\"message\":\"m\",\"kind\":\"quantum\"}",
        )
        .unwrap()
        .unwrap();
        assert!(matches!(newer.body, Reply::Error { kind: Some(FailureKind::Other), .. }), "{newer:?}");
        let line = frame_bytes(
            FRAME_PREFIX,
            4,
            Reply::Error {
                code: ErrorCode::WorkloadFailed,
                message: "m".into(),
                kind: Some(FailureKind::NoSpace),
            },
        );
        let back = decode_reply(&line).unwrap().unwrap();
        assert!(matches!(back.body, Reply::Error { kind: Some(FailureKind::NoSpace), .. }), "{back:?}");
        assert!(FailureKind::Unsupported.lasts() && FailureKind::NoSpace.lasts());
        assert!(!FailureKind::Peer.lasts() && !FailureKind::Other.lasts() && !FailureKind::Check.lasts());
    }

    /// Regression (found by `fuzz_decode_reply_never_panics_and_round_trips`): a measured value
    /// must reach the host bit for bit; serde_json's default float parser was off by an ulp.
    #[test]
    fn samples_cross_the_wire_bit_exactly() {
        for x in [
            1.1111111111111113e23,
            0.1 + 0.2,
            123456.78901234567,
            f64::MIN_POSITIVE,
            5e-324,
            1.7976931348623157e308,
        ] {
            let line = frame_bytes(
                FRAME_PREFIX,
                1,
                Reply::Result {
                    samples: vec![Sample { metric: "m".into(), value: x, unit: "ms".into() }],
                    guest_elapsed_ns: 0,
                    guest_cpu: CpuTime::default(),
                    extra: serde_json::json!({ "x": x }),
                    guest_system: None,
                    window_ns: None,
                },
            );
            let Ok(Some(Frame { body: Reply::Result { samples, extra, .. }, .. })) = decode_reply(&line)
            else {
                panic!("does not decode")
            };
            assert_eq!(samples[0].value.to_bits(), x.to_bits(), "{x}");
            assert_eq!(extra["x"].as_f64().map(f64::to_bits), Some(x.to_bits()), "{x} in extra");
        }
    }

    // ---- fuzz targets (crates/proto/src/fuzzing.rs; `make fuzz` runs them longer) ----

    fn frame_bytes<T: Serialize>(prefix: &str, tag: u64, body: T) -> Vec<u8> {
        let mut v = Vec::new();
        write_frame(&mut v, prefix, &Frame::new(tag, body)).unwrap();
        v.pop(); // the newline
        v
    }

    fn reply_seeds() -> Vec<Vec<u8>> {
        let sample = |m: &str, x: f64| Sample { metric: m.into(), value: x, unit: "ms".into() };
        vec![
            frame_bytes(FRAME_PREFIX, 0, Reply::Hello { agent_version: "0.1.0".into(), pid: 7, clock_ns: 1 }),
            frame_bytes(FRAME_PREFIX, 3, Reply::Pong { clock_ns: 99 }),
            frame_bytes(FRAME_PREFIX, 4, Reply::Started),
            frame_bytes(
                FRAME_PREFIX,
                5,
                Reply::Result {
                    samples: vec![sample("memcpy_time", 4.5), sample("x", -0.0)],
                    guest_elapsed_ns: 123,
                    guest_cpu: CpuTime { user_ns: 1, system_ns: 2 },
                    extra: serde_json::json!({"flows": [{"received": 10}], "rfc2544": {"steps": []}}),
                    guest_system: Some(SystemCpu { busy_ns: 1, idle_ns: 2, softirq_ns: 0, cpus: 2 }),
                    window_ns: Some([10, 20]),
                },
            ),
            frame_bytes(FRAME_PREFIX, 7, Reply::Armed),
            frame_bytes(FRAME_PREFIX, 7, Reply::Lap { name: "randread".into() }),
            frame_bytes(
                FRAME_PREFIX,
                6,
                Reply::Error { code: ErrorCode::BadParams, message: "size".into(), kind: None },
            ),
            frame_bytes(
                FRAME_PREFIX,
                8,
                Reply::Error {
                    code: ErrorCode::WorkloadFailed,
                    message: "fio is not installed".into(),
                    kind: Some(FailureKind::Unsupported),
                },
            ),
        ]
    }

    #[test]
    fn fuzz_decode_reply_never_panics_and_round_trips() {
        use crate::fuzzing::{fuzz, mutated, with_corpus, JSON_TOKENS};
        use proptest::prelude::*;
        fuzz("decode_reply", mutated(with_corpus("decode_reply", reply_seeds()), JSON_TOKENS), |line| {
            if let Ok(Some(f)) = decode_reply(&line) {
                // What decodes re-encodes to a frame that decodes the same.
                let again = decode_reply(&frame_bytes(FRAME_PREFIX, f.tag, f.body.clone()));
                prop_assert_eq!(again, Ok(Some(f)));
            }
            Ok(())
        });
    }

    #[test]
    fn fuzz_decode_request_never_panics_and_echoes_the_tag() {
        use crate::fuzzing::{fuzz, mutated, with_corpus, JSON_TOKENS};
        use proptest::prelude::*;
        let spec = WorkloadSpec {
            kind: "memcpy".into(),
            params: BTreeMap::new(),
            net: None,
            scratch: None,
            count: None,
        };
        let seeds = vec![
            frame_bytes("", 1, Request::Ping),
            frame_bytes("", 2, Request::Run { workload: spec.clone(), armed: false }),
            frame_bytes("", 5, Request::Run { workload: spec, armed: true }),
            frame_bytes("", 6, Request::Go { target: 5 }),
            frame_bytes("", 3, Request::Stop { target: 2 }),
            frame_bytes("", 4, Request::Shutdown),
        ];
        fuzz("decode_request", mutated(with_corpus("decode_request", seeds), JSON_TOKENS), |line| {
            match decode_request(&line) {
                Ok(f) => prop_assert_eq!(f.v, VERSION),
                Err(e) => prop_assert!(!e.message.is_empty()),
            }
            Ok(())
        });
    }

    #[test]
    fn fuzz_read_line_stays_bounded_and_in_sync() {
        use crate::fuzzing::fuzz;
        use proptest::prelude::*;
        // Random chunks, some longer than a frame: every line read is within MAX_FRAME, and the
        // line after an overlong one is read whole.
        let chunk = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            (0..3usize).prop_map(|k| vec![b'x'; MAX_FRAME - 1 + k]),
        ];
        fuzz("read_line", proptest::collection::vec(chunk, 0..4), |chunks| {
            let mut stream = Vec::new();
            for c in &chunks {
                stream.extend(c.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
                stream.push(b'\n');
            }
            stream.extend_from_slice(b"end\n");
            let mut r = Cursor::new(stream);
            let mut last = None;
            loop {
                match read_line(&mut r) {
                    Ok(l) => {
                        prop_assert!(l.len() <= MAX_FRAME);
                        last = Some(l);
                    }
                    Err(FrameError::TooLong) => last = None,
                    Err(FrameError::Eof) => break,
                    Err(e) => return Err(proptest::test_runner::TestCaseError::fail(format!("{e}"))),
                }
            }
            prop_assert_eq!(last.as_deref(), Some(&b"end"[..]));
            Ok(())
        });
    }
}
