//! `virtperf agent`: the process that runs workloads inside an environment.
//!
//! It speaks the protocol of `virtperf-proto` on stdin/stdout: a hello first, then replies with the
//! request's tag echoed. Each `run` executes on a thread of its own, so a receiver and a sender, or
//! background load and a workload, can be in flight together. Anything it cannot understand gets
//! an `error` reply and the agent goes on; only `shutdown` or the end of its input stops it. It
//! never prints anything else on stdout.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use virtperf_proto::{self as proto, CpuTime, ErrorCode, Frame, Reply, Request};

/// Cumulative `/proc/stat` CPU counters of all CPUs, in ns (USER_HZ ticks converted).
fn system_cpu() -> Option<virtperf_proto::SystemCpu> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let to_ns = |t: u64| t * 1_000_000_000 / hz;
    let f: Vec<u64> =
        s.lines().next()?.strip_prefix("cpu ")?.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    let g = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    let cpus = s.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count() as u32;
    Some(virtperf_proto::SystemCpu {
        busy_ns: to_ns(g(0) + g(1) + g(2) + g(5) + g(6) + g(7)),
        idle_ns: to_ns(g(3) + g(4)),
        softirq_ns: to_ns(g(6)),
        cpus,
    })
}

fn system_info() -> Reply {
    // uname(2) where /proc does not have it (gVisor's Sentry).
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(uname_release)
        .unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count() as u32;
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0);
    let cmdline = std::fs::read_to_string("/proc/cmdline").map(|s| s.trim().to_string()).unwrap_or_default();
    let mut vulnerabilities: Vec<(String, String)> =
        std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(e.path()).ok()?;
                Some((name, text.lines().next().unwrap_or("").trim().to_string()))
            })
            .take(16 * virtperf_proto::MAX_VULNERABILITIES)
            .collect();
    vulnerabilities.sort();
    vulnerabilities.truncate(virtperf_proto::MAX_VULNERABILITIES);
    for (n, l) in &mut vulnerabilities {
        *n = cut(n, virtperf_proto::MAX_VULNERABILITY_LINE);
        *l = cut(l, virtperf_proto::MAX_VULNERABILITY_LINE);
    }
    Reply::Info {
        kernel,
        cpu_model,
        cpus,
        memory_kib,
        cmdline: cut(&cmdline, virtperf_proto::MAX_CMDLINE),
        vulnerabilities,
    }
}

/// The kernel's release from uname(2).
fn uname_release() -> Option<String> {
    // SAFETY: uname(2) fills the zeroed struct it is given; each field is a NUL-terminated C
    // string within its fixed-size array (the kernel terminates it), read only after success.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return None;
        }
        let r = std::ffi::CStr::from_ptr(u.release.as_ptr());
        Some(r.to_string_lossy().into_owned())
    }
}

/// `s` cut to at most `max` bytes, at a character's boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// What the agent keeps of a run in flight: its stop flag and, for an armed run, the gate `go`
/// opens. Stopping also opens the gate, so an armed run that is never started still ends.
#[derive(Default)]
struct Slot {
    stop: AtomicBool,
    armed: bool,
    gate: Mutex<bool>,
    opened: Condvar,
}

impl Slot {
    fn open(&self) {
        if let Ok(mut g) = self.gate.lock() {
            *g = true;
            self.opened.notify_all();
        }
    }
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.open();
    }
    /// Blocks until `go` (or `stop`).
    fn wait_open(&self) {
        let Ok(mut g) = self.gate.lock() else { return };
        while !*g {
            g = match self.opened.wait(g) {
                Ok(g) => g,
                Err(_) => return,
            };
        }
    }
}

/// Serves requests from `input`, writes replies to `output`. Returns when told to shut down or
/// when the input ends, after asking every run still in flight to stop and waiting for its result;
/// on `shutdown`, `bye` is the last frame.
pub fn serve<R: Read, W: Write + Send>(input: R, output: W) -> std::io::Result<()> {
    let mut input = BufReader::new(input);
    let out = Mutex::new(output);
    let send = |tag: u64, r: Reply| -> std::io::Result<()> {
        let mut w = out.lock().map_err(|_| std::io::Error::other("reply writer poisoned"))?;
        proto::write_frame(&mut *w, proto::FRAME_PREFIX, &Frame::new(tag, r))
    };
    let running: Mutex<HashMap<u64, Arc<Slot>>> = Mutex::new(HashMap::new());
    let stop_all = || {
        if let Ok(r) = running.lock() {
            r.values().for_each(|s| s.halt());
        }
    };
    let slot_of = |tag: u64| running.lock().ok().and_then(|r| r.get(&tag).cloned());
    send(
        0,
        Reply::Hello {
            agent_version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            clock_ns: virtperf_workload::now_ns(),
        },
    )?;
    let shutdown_tag = std::thread::scope(|scope| {
        let result = loop {
            let line = match proto::read_line(&mut input) {
                Ok(l) => l,
                Err(proto::FrameError::Eof) => break Ok(None),
                Err(proto::FrameError::TooLong) => {
                    send(
                        0,
                        Reply::Error {
                            code: ErrorCode::Malformed,
                            message: "frame too long".into(),
                            kind: None,
                        },
                    )?;
                    continue;
                }
                Err(proto::FrameError::Io(e)) => break Err(e),
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let frame = match proto::decode_request(&line) {
                Ok(f) => f,
                Err(e) => {
                    send(e.tag, Reply::Error { code: e.code, message: e.message, kind: None })?;
                    continue;
                }
            };
            let tag = frame.tag;
            let no_such = |target: u64, what: &str| Reply::Error {
                code: ErrorCode::NoSuchRun,
                message: format!("no {what}run with tag {target} in flight"),
                kind: None,
            };
            match frame.body {
                Request::Ping => send(tag, Reply::Pong { clock_ns: virtperf_workload::now_ns() })?,
                Request::Info => send(tag, system_info())?,
                Request::Shutdown => break Ok(Some(tag)),
                Request::Stop { target } => match slot_of(target) {
                    Some(slot) => {
                        slot.halt();
                        send(tag, Reply::Stopping)?
                    }
                    None => send(tag, no_such(target, ""))?,
                },
                // No reply: the run answers with its result.
                Request::Go { target } => match slot_of(target) {
                    Some(slot) if slot.armed => slot.open(),
                    _ => send(tag, no_such(target, "armed "))?,
                },
                Request::Run { workload, armed } => {
                    // Validate before saying "started": a bad request never starts.
                    let prepared = match virtperf_workload::prepare(&workload) {
                        Ok(p) => p,
                        Err(refused) => {
                            send(tag, refused.reply())?;
                            continue;
                        }
                    };
                    let slot = Arc::new(Slot { armed, ..Slot::default() });
                    {
                        let Ok(mut r) = running.lock() else {
                            break Err(std::io::Error::other("run table poisoned"));
                        };
                        if r.contains_key(&tag) {
                            drop(r);
                            send(
                                tag,
                                Reply::Error {
                                    code: ErrorCode::Malformed,
                                    message: format!("tag {tag} is already in flight"),
                                    kind: None,
                                },
                            )?;
                            continue;
                        }
                        r.insert(tag, slot.clone());
                    }
                    let (send, running) = (&send, &running);
                    let count = workload.count;
                    scope.spawn(move || run_one(tag, &prepared, count.as_ref(), &slot, send, running));
                }
            }
        };
        // Runs in flight are asked to stop; the scope waits for their results.
        stop_all();
        result
    })?;
    // `bye` is always the last frame.
    if let Some(tag) = shutdown_tag {
        send(tag, Reply::Bye)?;
    }
    Ok(())
}

/// One run, on its own thread: `started`, setup, the timed region (after `go` when armed), the
/// result. Times and CPU cover the timed region; CPU is this run's threads only (not the agent's
/// other runs: a background load, the other flow of `direction = both`).
fn run_one(
    tag: u64,
    prepared: &virtperf_workload::Prepared,
    count: Option<&virtperf_proto::Counting>,
    slot: &Slot,
    send: &(dyn Fn(u64, Reply) -> std::io::Result<()> + Sync),
    running: &Mutex<HashMap<u64, Arc<Slot>>>,
) {
    let said_started = AtomicBool::new(false);
    let ready = || {
        if !said_started.swap(true, Ordering::SeqCst) {
            let _ = send(tag, Reply::Started);
        }
    };
    if !prepared.announces_ready() {
        ready();
    }
    // A fixed-work workload armed: the host times its region, which must hold nothing else.
    let timed_by_host = slot.armed && prepared.marks_timed_region();
    // (monotonic ns, this thread's CPU, the system's CPU) when the timed region began.
    type Mark = (u64, (u64, u64), Option<virtperf_proto::SystemCpu>);
    let begun: Mutex<Option<Mark>> = Mutex::new(None);
    // Counters, opened on this thread (the run's: its threads and children inherit them) and
    // started with the timed region.
    let counters =
        Mutex::new(count.map(|c| virtperf_workload::counts::Counters::open(c, prepared.has_peer())));
    let begin = || {
        let Ok(mut b) = begun.lock() else { return };
        if b.is_some() {
            return;
        }
        // An armed fixed-work run is timed by the host from `go`: nothing but the work may happen
        // between `go` and the result (reading /proc/stat costs ~0.5 ms in a TCG guest); the
        // system's CPU is reported for the others (network runs).
        let sys = if timed_by_host { None } else { system_cpu() };
        if slot.armed {
            let _ = send(tag, Reply::Armed);
            slot.wait_open();
        }
        if let Some(c) = counters.lock().ok().as_deref_mut().and_then(Option::as_mut) {
            c.start();
        }
        let cpu = virtperf_workload::thread_cpu();
        *b = Some((virtperf_workload::now_ns(), cpu, sys));
    };
    if !prepared.marks_timed_region() {
        begin();
    }
    let others = virtperf_workload::ThreadCpuTotal::default();
    // Laps only where the host times the region: elsewhere nobody stamps them.
    let lap = |name: &str| {
        if timed_by_host {
            let _ = send(tag, Reply::Lap { name: name.into() });
        }
    };
    // A server narrows what is counted to its serving (from ready to stop).
    let count = |at: virtperf_workload::Count| {
        if let Some(c) = counters.lock().ok().as_deref_mut().and_then(Option::as_mut) {
            match at {
                virtperf_workload::Count::From => c.count_from(),
                virtperf_workload::Count::Until => c.count_until(),
            }
        }
    };
    let ctx = virtperf_workload::RunCtx::with_hooks(&slot.stop, &ready, &begin, None, &others)
        .with_lap(&lap)
        .with_count(&count);
    let res = prepared.run(&ctx);
    // What is counted ends with the work, before this function's own bookkeeping.
    if let Some(c) = counters.lock().ok().as_deref_mut().and_then(Option::as_mut) {
        c.stop();
    }
    let t1 = virtperf_workload::now_ns();
    let cpu1 = virtperf_workload::thread_cpu();
    let sys1 = if timed_by_host { None } else { system_cpu() };
    // A workload that failed before its timed region: its span is empty.
    let (t0, cpu0, sys0) = begun.lock().ok().and_then(|b| *b).unwrap_or((t1, cpu1, sys1));
    let guest_system = sys0.zip(sys1).map(|(a, b)| virtperf_proto::SystemCpu {
        busy_ns: b.busy_ns.saturating_sub(a.busy_ns),
        idle_ns: b.idle_ns.saturating_sub(a.idle_ns),
        softirq_ns: b.softirq_ns.saturating_sub(a.softirq_ns),
        cpus: b.cpus,
    });
    let cpu = CpuTime {
        user_ns: cpu1.0.saturating_sub(cpu0.0) + others.user_ns.load(Ordering::Relaxed),
        system_ns: cpu1.1.saturating_sub(cpu0.1) + others.system_ns.load(Ordering::Relaxed),
    };
    if let Ok(mut r) = running.lock() {
        r.remove(&tag);
    }
    let counts = counters.into_inner().ok().flatten().map(|c| c.finish(t1.saturating_sub(t0)));
    // A write error means the host is gone: nobody to tell.
    // JSON has no NaN or infinity: a figure that is not finite would reach the host as `null`
    // and read as a malformed reply. Said as what it is, a failure of the workload's arithmetic.
    let res = res.and_then(|o| match o.samples.iter().find(|x| !x.value.is_finite()) {
        Some(bad) => Err(virtperf_workload::registry::Refusal {
            code: virtperf_proto::ErrorCode::WorkloadFailed,
            message: format!(
                "the workload's {} came out {} (a span of 0 on this clock?): not sent",
                bad.metric, bad.value
            ),
            kind: Some(virtperf_proto::FailureKind::Other),
        }),
        None => Ok(o),
    });
    let _ = match res {
        Ok(mut o) => send(
            tag,
            Reply::Result {
                samples: o.samples,
                guest_elapsed_ns: t1.saturating_sub(t0),
                guest_cpu: cpu,
                extra: {
                    if let Some(c) = counts.filter(|c| !c.is_null()) {
                        with_counts(&mut o.extra, c);
                    }
                    o.extra
                },
                guest_system,
                window_ns: Some([t0, t1]),
            },
        ),
        Err(refused) => send(tag, refused.reply()),
    };
}

/// The run's counts go into its detail as `counts` (an object detail gets the key; a run
/// without detail gets an object of its own).
fn with_counts(extra: &mut serde_json::Value, counts: serde_json::Value) {
    match extra {
        serde_json::Value::Object(o) => {
            o.insert("counts".into(), counts);
        }
        serde_json::Value::Null => *extra = serde_json::json!({ "counts": counts }),
        _ => {}
    }
}

/// Entry point of `virtperf agent`: stdin/stdout, or a terminal device in raw mode (a guest's
/// console line that kernel messages do not use).
pub fn main(tty: Option<&std::path::Path>) -> std::io::Result<()> {
    match tty {
        None => {
            let stdin = std::io::stdin().lock();
            let stdout = std::io::stdout();
            serve(stdin, stdout)
        }
        Some(path) => {
            let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
            raw_mode(&f)?;
            let w = f.try_clone()?;
            serve(std::io::BufReader::new(f), w)
        }
    }
}

/// No echo, no line editing, no CR/LF translation: the line carries frames byte for byte.
fn raw_mode(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: termios is plain data filled by tcgetattr on a descriptor we own.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the descriptor is open for the duration of the calls.
    unsafe {
        if libc::tcgetattr(f.as_raw_fd(), &mut t) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::cfmakeraw(&mut t);
        if libc::tcsetattr(f.as_raw_fd(), libc::TCSANOW, &t) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(input: &str) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        serve(input.as_bytes(), &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str(l.strip_prefix(proto::FRAME_PREFIX).expect("every line is a frame"))
                    .unwrap()
            })
            .collect()
    }

    /// `info` says the kernel as the agent sees it: its command line and what it says of each CPU
    /// vulnerability, sorted by name, each within its bound (the host's own here).
    #[test]
    fn info_says_the_kernels_command_line_and_vulnerabilities() {
        let r = replies("{\"v\":1,\"tag\":2,\"type\":\"info\"}\n");
        let info = r.iter().find(|f| f["type"] == "info").expect("an info");
        let want = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        assert_eq!(info["cmdline"].as_str().unwrap_or(""), want.trim());
        let v: Vec<(String, String)> =
            serde_json::from_value(info["vulnerabilities"].clone()).unwrap_or_default();
        let on_host =
            std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities").map(|d| d.count()).unwrap_or(0);
        assert_eq!(v.len(), on_host.min(virtperf_proto::MAX_VULNERABILITIES), "{v:?}");
        assert!(v.windows(2).all(|w| w[0].0 < w[1].0), "sorted by name: {v:?}");
        assert!(v.iter().all(|(n, l)| n.len() <= 256 && l.len() <= 256 && !l.contains('\n')));
        assert_eq!(cut("ééé", 3), "é", "cut at a character's boundary");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        assert_eq!(uname_release().as_deref(), Some(release.trim()), "uname says what /proc says");
        assert_eq!(info["kernel"].as_str(), Some(release.trim()));
        assert_eq!(cut("abc", 10), "abc");
    }

    /// The request loop reads whatever its pipe carries — random streams of mutated requests and
    /// bytes, not one fixed stream: it never panics, writes frames only, says hello first, and
    /// answers only with tags it was given (0 for a line it could not read a tag from).
    #[test]
    fn fuzz_request_streams() {
        use virtperf_proto::fuzzing::{fuzz, mutated, with_corpus, JSON_TOKENS};
        let seeds = vec![
            b"{\"v\":1,\"tag\":1,\"type\":\"ping\"}\n{\"v\":1,\"tag\":2,\"type\":\"info\"}\n".to_vec(),
            b"{\"v\":1,\"tag\":3,\"type\":\"stop\",\"target\":9}\n{\"v\":1,\"tag\":4,\"type\":\"shutdown\"}\n"
                .to_vec(),
            b"{\"v\":1,\"tag\":5,\"type\":\"run\",\"workload\":{\"kind\":\"noop\"}}\n".to_vec(),
        ];
        fuzz(
            "agent request stream",
            mutated(with_corpus("agent request stream", seeds), JSON_TOKENS),
            |bytes| {
                let mut out = Vec::new();
                serve(&bytes[..], &mut out)
                    .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
                let text = String::from_utf8_lossy(&out);
                let tags: Vec<u64> = String::from_utf8_lossy(&bytes)
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|t| t.parse().ok())
                    .collect();
                for (i, l) in text.lines().enumerate() {
                    let body = l.strip_prefix(proto::FRAME_PREFIX);
                    proptest::prop_assert!(body.is_some(), "not a frame: {}", l);
                    let f: serde_json::Value = serde_json::from_str(body.unwrap_or_default())
                        .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
                    if i == 0 {
                        proptest::prop_assert_eq!(&f["type"], "hello");
                    }
                    let tag = f["tag"].as_u64().unwrap_or(u64::MAX);
                    proptest::prop_assert!(
                        tag == 0 || tags.contains(&tag),
                        "a reply with tag {} nobody sent",
                        tag
                    );
                }
                Ok(())
            },
        );
    }

    #[test]
    fn hello_then_one_reply_per_request_with_tags() {
        let r = replies(
            "{\"v\":1,\"tag\":1,\"type\":\"ping\"}\n\
             not json\n\
             {\"v\":2,\"tag\":2,\"type\":\"ping\"}\n\
             {\"v\":1,\"tag\":3,\"type\":\"run\",\"workload\":{\"kind\":\"nope\"}}\n\
             {\"v\":1,\"tag\":4,\"type\":\"run\",\"workload\":{\"kind\":\"memcpy\",\"params\":{\"size\":-1}}}\n\
             {\"v\":1,\"tag\":5,\"type\":\"run\",\"workload\":{\"kind\":\"memcpy\",\"params\":{\"size\":4096,\"copies\":2}}}\n\
             {\"v\":1,\"tag\":6,\"type\":\"info\"}\n\
             {\"v\":1,\"tag\":7,\"type\":\"shutdown\"}\n\
             {\"v\":1,\"tag\":8,\"type\":\"ping\"}\n",
        );
        // Runs execute concurrently: compare each tag's own sequence of replies.
        let mut by_tag: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
        for f in &r {
            by_tag
                .entry(f["tag"].as_u64().unwrap())
                .or_default()
                .push(f["type"].as_str().unwrap().to_string());
        }
        let seq = |t: u64| by_tag.get(&t).cloned().unwrap_or_default().join(",");
        assert_eq!(r[0]["type"], "hello");
        assert_eq!(seq(0), "hello,error");
        assert_eq!(seq(1), "pong");
        assert_eq!(seq(2), "error");
        assert_eq!(seq(3), "error");
        assert_eq!(seq(4), "error");
        assert_eq!(seq(5), "started,result");
        assert_eq!(seq(6), "info");
        assert_eq!(seq(7), "bye");
        assert!(!by_tag.contains_key(&8), "nothing after shutdown");
        let find = |t: u64, ty: &str| r.iter().find(|f| f["tag"] == t && f["type"] == ty).unwrap().clone();
        assert_eq!(find(2, "error")["code"], "unsupported_version");
        assert_eq!(find(3, "error")["code"], "unknown_workload");
        assert_eq!(find(4, "error")["code"], "bad_params");
        assert_eq!(find(5, "result")["samples"][0]["metric"], "memcpy_time");
    }

    #[test]
    fn stop_ends_a_run_in_flight_and_unknown_targets_are_errors() {
        let (r, mut w) = std::io::pipe().unwrap();
        let out = std::sync::Arc::new(Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let o2 = out.clone();
        let t = std::thread::spawn(move || serve(r, Shared(o2)).unwrap());
        let t0 = std::time::Instant::now();
        writeln!(w, "{{\"v\":1,\"tag\":1,\"type\":\"run\",\"workload\":{{\"kind\":\"sleep\",\"params\":{{\"duration\":60000}}}}}}").unwrap();
        writeln!(w, "{{\"v\":1,\"tag\":2,\"type\":\"ping\"}}").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        writeln!(w, "{{\"v\":1,\"tag\":3,\"type\":\"stop\",\"target\":1}}").unwrap();
        writeln!(w, "{{\"v\":1,\"tag\":4,\"type\":\"stop\",\"target\":99}}").unwrap();
        drop(w);
        t.join().unwrap();
        assert!(t0.elapsed().as_secs() < 5, "the sleep was stopped");
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("\"tag\":2,\"type\":\"pong\""),
            "ping answered while a run is in flight: {text}"
        );
        assert!(text.contains("\"tag\":3,\"type\":\"stopping\""), "{text}");
        assert!(text.contains("\"tag\":4,\"type\":\"error\",\"code\":\"no_such_run\""), "{text}");
        assert!(text.contains("\"tag\":1,\"type\":\"error\",\"code\":\"workload_failed\""), "{text}");
    }

    #[test]
    fn an_armed_run_waits_for_go_and_times_only_its_region() {
        let (r, mut w) = std::io::pipe().unwrap();
        let out = std::sync::Arc::new(Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let text = |o: &std::sync::Arc<Mutex<Vec<u8>>>| String::from_utf8(o.lock().unwrap().clone()).unwrap();
        let o2 = out.clone();
        let t = std::thread::spawn(move || serve(r, Shared(o2)).unwrap());
        // 64 MiB memcpy buffers: their setup (allocation, faulting) happens before `armed`.
        let sent = std::time::Instant::now();
        writeln!(w, "{{\"v\":1,\"tag\":1,\"type\":\"run\",\"armed\":true,\"workload\":{{\"kind\":\"memcpy\",\"params\":{{\"size\":67108864,\"copies\":1}}}}}}").unwrap();
        writeln!(
            w,
            "{{\"v\":1,\"tag\":2,\"type\":\"run\",\"armed\":true,\"workload\":{{\"kind\":\"noop\"}}}}"
        )
        .unwrap();
        writeln!(w, "{{\"v\":1,\"tag\":3,\"type\":\"go\",\"target\":77}}").unwrap();
        let armed = |o: &std::sync::Arc<Mutex<Vec<u8>>>, tag: u64| {
            text(o).contains(&format!("\"tag\":{tag},\"type\":\"armed\""))
        };
        let t0 = std::time::Instant::now();
        let mut setup = None;
        while !(armed(&out, 1) && armed(&out, 2)) && t0.elapsed().as_secs() < 20 {
            if setup.is_none() && armed(&out, 1) {
                setup = Some(sent.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // The run's setup, as seen from here (request written → `armed` read): at least the
        // allocation and faulting of its buffers.
        let setup_ms = setup.unwrap_or_else(|| sent.elapsed()).as_secs_f64() * 1e3;
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!text(&out).contains("\"type\":\"result\""), "nothing runs before go: {}", text(&out));
        // The agent runs in this process: its span is on this clock, so where it lies can be
        // checked against when `go` was written and when the result was read, without a margin.
        let go_ns = virtperf_workload::now_ns();
        writeln!(w, "{{\"v\":1,\"tag\":4,\"type\":\"go\",\"target\":1}}").unwrap();
        writeln!(w, "{{\"v\":1,\"tag\":5,\"type\":\"stop\",\"target\":2}}").unwrap();
        drop(w);
        t.join().unwrap();
        let read_ns = virtperf_workload::now_ns();
        let all = text(&out);
        assert!(
            all.contains("\"tag\":3,\"type\":\"error\",\"code\":\"no_such_run\""),
            "go to nothing: {all}"
        );
        let result = all.lines().find(|l| l.contains("\"tag\":1,\"type\":\"result\"")).expect("tag 1 result");
        let f = proto::decode_reply(result.as_bytes()).unwrap().unwrap();
        let Reply::Result { samples, guest_elapsed_ns, window_ns, guest_system, .. } = f.body else {
            panic!()
        };
        let ms = samples[0].value;
        // The agent's span is the timed region (one copy), not the 128 MiB of setup before it: it
        // begins after `go` was written (the setup was done before `armed`, long before), ends
        // before the result was read, and holds the copy.
        let [a, b] = window_ns.unwrap();
        assert_eq!(b - a, guest_elapsed_ns);
        assert!(
            a >= go_ns && b <= read_ns,
            "the span [{a}, {b}] is not inside go → result [{go_ns}, {read_ns}]: it holds part of the \
             {setup_ms:.1} ms of setup"
        );
        assert!(
            guest_elapsed_ns as f64 >= ms * 1e6 * 0.999,
            "{guest_elapsed_ns} ns holds the copy's {ms} ms"
        );
        assert!(guest_system.is_none(), "no /proc/stat reads inside an armed span");
        assert!(all.contains("\"tag\":2,\"type\":\"result\""), "a stopped armed run still ends: {all}");
    }

    #[test]
    fn survives_arbitrary_bytes() {
        let mut junk = Vec::new();
        let mut x: u32 = 12345;
        for _ in 0..20000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            junk.push((x >> 16) as u8);
        }
        let mut out = Vec::new();
        serve(&junk[..], &mut out).unwrap();
        assert!(!out.is_empty());
    }
}
