//! One trial: a workload on an environment instance (and, for network workloads, on the lab's
//! tester), with the host's clock, host CPU time sampled during the trial, and optional
//! background load.
//!
//! A network trial has one flow per direction (`out`: the environment sends or asks, `in`: the
//! tester does, `both`: one of each at once, metrics suffixed `_out`/`_in`). Every server is
//! started and listening before any client starts; results of both sides are combined by the
//! workload's own `merge` (loss needs the sender's count and the receiver's). When anything
//! fails, every run still in flight on either side is asked to stop, so no agent is left busy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use virtperf_proto::{NetRole, Reply, Request, Sample, Side, WorkloadSpec};
// The workloads a trial drives itself (background load, the empty run that prices `go`, the
// RFC 2544 generator), named by their types.
use virtperf_workload::compute::Noop;
use virtperf_workload::load::Load;
use virtperf_workload::rfc2544::frames::Frames;
use virtperf_workload::{Output, Workload};

use crate::env::{CallError, CpuProbe, Instance};
use crate::experiment::{Case, LoadOn};
use virtperf_record::store::TrialOutcome;

/// Host CPU samples per second during a trial (seed 000 plotted CPU over time; ≥ 10 Hz).
pub const CPU_SAMPLE_HZ: u64 = 20;
/// First port of a trial's flows (iperf3's default); instance k's use BASE_PORT + 2k and + 2k + 1.
const BASE_PORT: u16 = *crate::lab::FLOW_PORTS.start();

/// Why a trial did not produce a result.
#[derive(Debug)]
pub enum Fail {
    /// Ctrl-C / SIGTERM: the trial stays pending.
    Interrupted,
    /// The trial failed; `dut_broken` (instance indexes) and `tester_broken` say whose agent
    /// must be relaunched.
    Failed { reason: String, dut_broken: Vec<usize>, tester_broken: bool },
    /// The workload cannot run in this environment: its agent said so by the failure's kind (a
    /// system call, program or scratch disk it lacks; a disk the work fills). The agent is
    /// healthy; the cell's later trials are skipped, not failed again.
    Cannot { reason: String, kind: virtperf_proto::FailureKind },
}

/// An instance of the environment under test and its lab address (None outside a lab); a trial
/// has one per instance (`instances = N`), all measured together.
pub struct Dut<'a> {
    pub inst: &'a mut Instance,
    pub addr: Option<String>,
}

/// The lab's tester agent and its address.
pub struct Tester<'a> {
    pub inst: &'a mut Instance,
    pub addr: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Who {
    /// Instance k of the environment under test.
    Dut(usize),
    Tester,
}

impl Who {
    fn broken(self) -> Vec<usize> {
        match self {
            Who::Dut(k) => vec![k],
            Who::Tester => Vec::new(),
        }
    }
}

fn fail(who: Who, what: &str, e: CallError) -> Fail {
    match e {
        CallError::Interrupted => Fail::Interrupted,
        // The agent answered: it is still healthy.
        CallError::Agent { kind: Some(kind), ref message, .. } if kind.lasts() => {
            Fail::Cannot { reason: format!("{what} {}: {message}", kind.words()), kind }
        }
        CallError::Agent { .. } => {
            Fail::Failed { reason: format!("{what}: {e}"), dut_broken: Vec::new(), tester_broken: false }
        }
        other => Fail::Failed {
            reason: format!("{what}: {other}"),
            dut_broken: who.broken(),
            tester_broken: who == Who::Tester,
        },
    }
}

struct Parties<'a, 'b> {
    duts: &'a mut [Dut<'b>],
    tester: Option<&'a mut Tester<'b>>,
    /// Requests in flight, to stop when the trial fails.
    in_flight: Vec<(Who, u64)>,
    /// Set when the run is being interrupted (Ctrl-C): waits end, the trial fails as interrupted.
    cancel: &'a AtomicBool,
}

impl Parties<'_, '_> {
    fn inst(&mut self, who: Who) -> Result<&mut Instance, Fail> {
        match who {
            Who::Dut(k) => self.duts.get_mut(k).map(|d| &mut *d.inst).ok_or_else(|| Fail::Failed {
                reason: format!("no instance {k} of the environment under test"),
                dut_broken: Vec::new(),
                tester_broken: false,
            }),
            Who::Tester => self.tester.as_mut().map(|t| &mut *t.inst).ok_or_else(|| Fail::Failed {
                reason: "this trial needs the lab's tester, which is not running".into(),
                dut_broken: Vec::new(),
                tester_broken: true,
            }),
        }
    }

    fn send(&mut self, who: Who, spec: WorkloadSpec) -> Result<(u64, Instant), Fail> {
        self.send_run(who, spec, false)
    }

    fn send_run(&mut self, who: Who, spec: WorkloadSpec, armed: bool) -> Result<(u64, Instant), Fail> {
        let sent = Instant::now();
        let tag = self
            .inst(who)?
            .conn
            .send(Request::Run { workload: spec, armed })
            .map_err(|e| fail(who, "send", e))?;
        self.in_flight.push((who, tag));
        Ok((tag, sent))
    }

    /// Waits until the armed run `tag` has done its setup (`started` comes first and is skipped),
    /// then [`GO_SETTLE`] more, so that its `go` finds the environment asleep.
    fn wait_armed(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<(), Fail> {
        loop {
            match self.wait(who, tag, deadline, what)? {
                (Reply::Started, _) => continue,
                (Reply::Armed, _) => {
                    std::thread::sleep(GO_SETTLE);
                    return Ok(());
                }
                (other, _) => {
                    return Err(Fail::Failed {
                        reason: format!("{what}: expected `armed`, got {}", brief(&other)),
                        dut_broken: who.broken(),
                        tester_broken: who == Who::Tester,
                    })
                }
            }
        }
    }

    /// Starts the armed run `tag`; returns the time just before `go` was written (after it, this
    /// thread may be preempted while the run already goes: the span would come out short).
    fn go(&mut self, who: Who, tag: u64) -> Result<Instant, Fail> {
        let t = Instant::now();
        self.inst(who)?.conn.send_oneway(Request::Go { target: tag }).map_err(|e| fail(who, "go", e))?;
        Ok(t)
    }

    fn wait(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<(Reply, Instant), Fail> {
        let cancel = self.cancel;
        let conn = &mut self.inst(who)?.conn;
        let r = conn.wait(tag, deadline, cancel);
        // In flight until it ended (its result, or its error reply: the connection's own record).
        // A run that did not answer in time is still in flight, and stopped with the others when
        // the trial is abandoned: forgotten, a UDP sender past its deadline went on for its whole
        // duration, and the tester's server kept receiving it on the port the next trials needed
        // ("Address already in use").
        if !conn.is_live(tag) {
            self.in_flight.retain(|x| *x != (who, tag));
        }
        r.map_err(|e| fail(who, what, e))
    }

    fn wait_started(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<Instant, Fail> {
        match self.wait(who, tag, deadline, what)? {
            (Reply::Started, at) => Ok(at),
            (other, _) => Err(Fail::Failed {
                reason: format!("{what}: expected `started`, got {}", brief(&other)),
                dut_broken: who.broken(),
                tester_broken: who == Who::Tester,
            }),
        }
    }

    fn wait_result(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<RunResult, Fail> {
        let mut laps = Vec::new();
        match loop {
            match self.wait(who, tag, deadline, what)? {
                (Reply::Lap { name }, at) if laps.len() < MAX_LAPS => laps.push((name, at)),
                (Reply::Lap { .. }, _) => {}
                other => break other,
            }
        } {
            (Reply::Result { samples, guest_elapsed_ns, guest_cpu, extra, guest_system, window_ns }, at) => {
                let relayed = self.inst(who)?.conn.relayed_span(tag);
                Ok(RunResult {
                    laps,
                    relayed,
                    out: Output { samples, extra },
                    guest_system,
                    guest_ns: guest_elapsed_ns,
                    guest_cpu_ns: guest_cpu.total_ns(),
                    window_ns,
                    at,
                })
            }
            (other, _) => Err(Fail::Failed {
                reason: format!("{what}: expected `result`, got {}", brief(&other)),
                dut_broken: who.broken(),
                tester_broken: who == Who::Tester,
            }),
        }
    }

    /// Asks the run `tag` to stop (the agent answers within 5 s) and waits up to `within` for its
    /// result: a server's or a background load's end.
    fn stop_run(&mut self, who: Who, tag: u64, within: Duration, what: &str) -> Result<RunResult, Fail> {
        let never = AtomicBool::new(false);
        self.inst(who)?
            .conn
            .call(Request::Stop { target: tag }, Duration::from_secs(5), &never)
            .map_err(|e| fail(who, &format!("stopping {what}"), e))?;
        self.wait_result(who, tag, Instant::now() + within, what)
    }

    /// True when `who` takes part and does not answer a ping within a second.
    fn unresponsive(&mut self, who: Who) -> bool {
        if who == Who::Tester && self.tester.is_none() {
            return false;
        }
        let never = AtomicBool::new(false);
        match self.inst(who) {
            Ok(inst) => inst.conn.call(Request::Ping, Duration::from_secs(1), &never).is_err(),
            Err(_) => false,
        }
    }

    /// Best effort: asks every run still in flight to stop, waits a moment for each to end (its
    /// result or its error: a server's socket is closed by then), and forgets it. Forgotten
    /// while still running, a tester's UDP server kept its port, and the next trials on that
    /// tester failed to bind it ("Address already in use": four trials after gVisor's MTU-sized
    /// UDP sender hung, in an explain run).
    fn abandon(&mut self) {
        let never = AtomicBool::new(false);
        let mut stopping = Vec::new();
        for (who, tag) in std::mem::take(&mut self.in_flight) {
            if let Ok(inst) = self.inst(who) {
                if inst.conn.call(Request::Stop { target: tag }, STOP_WAIT, &never).is_ok() {
                    stopping.push((who, tag));
                } else {
                    inst.conn.forget(tag);
                }
            }
        }
        let deadline = Instant::now() + STOP_WAIT;
        for (who, tag) in stopping {
            if let Ok(inst) = self.inst(who) {
                while let Ok((Reply::Started | Reply::Armed | Reply::Lap { .. }, _)) =
                    inst.conn.wait(tag, deadline, &never)
                {}
                inst.conn.forget(tag);
            }
        }
    }
}

/// A reply named in an error message (never a whole histogram).
fn brief(r: &Reply) -> String {
    let s =
        serde_json::to_value(r).ok().and_then(|v| v.get("type").and_then(Value::as_str).map(String::from));
    format!("`{}`", s.unwrap_or_else(|| "an unexpected reply".into()))
}

struct RunResult {
    out: Output,
    guest_system: Option<virtperf_proto::SystemCpu>,
    guest_ns: u64,
    guest_cpu_ns: u64,
    /// The timed region on the agent's monotonic clock.
    window_ns: Option<[u64; 2]>,
    at: Instant,
    /// An armed run behind a relay on another host: its `go` → `result` span timed there.
    relayed: Option<Duration>,
    /// The laps the run marked, stamped here on arrival.
    laps: Vec<(String, Instant)>,
}

impl RunResult {
    /// The armed run's span from `go` (written here at `go`) to its result: on the clock of the
    /// machine that runs the environment — the relay's when there is one, this one's otherwise.
    fn span_from(&self, go: Instant) -> Duration {
        self.relayed.unwrap_or_else(|| self.at.duration_since(go))
    }

    /// The host-clock span from each lap to the next, by the first lap's name. None behind a
    /// relay: the laps crossed a network to get here (its latency, not the guest's clock, would
    /// be in them), and the relay stamps only `go` and the result.
    fn lap_spans(&self) -> Option<Vec<(String, u64)>> {
        if self.relayed.is_some() {
            return None;
        }
        Some(
            self.laps
                .windows(2)
                .map(|w| (w[0].0.clone(), w[1].1.saturating_duration_since(w[0].1).as_nanos() as u64))
                .collect(),
        )
    }
}

/// One direction of a network trial.
struct Flow {
    suffix: &'static str,
    direction: &'static str,
    /// The DUT instance sends (out) or the tester does (in, reflect).
    dut_client: bool,
    port: u16,
}

/// The flows of a direction for instance `k`: each instance has its own pair of ports, so N
/// instances stream to the tester at once without sharing a socket.
fn flows(direction: &str, k: usize) -> Vec<Flow> {
    let base = BASE_PORT + 2 * k as u16;
    let out = |suffix| Flow { suffix, direction: "out", dut_client: true, port: base };
    let inn = |suffix| Flow { suffix, direction: "in", dut_client: false, port: base + 1 };
    match direction {
        "in" => vec![inn("")],
        // The tester generates, the DUT sends every frame back (RFC 2544's own setup).
        "reflect" => vec![Flow { direction: "reflect", ..inn("") }],
        "both" => vec![out("_out"), inn("_in")],
        _ => vec![out("")],
    }
}

/// Samples host CPU of the DUT and the tester every 1/CPU_SAMPLE_HZ s until `stop`.
fn sample_cpu(
    probes: &[(&'static str, Vec<CpuProbe>, u64)],
    t0: Instant,
    stop: &AtomicBool,
) -> Vec<(&'static str, f64, u64)> {
    let mut series = Vec::new();
    let period = Duration::from_millis(1000 / CPU_SAMPLE_HZ);
    let mut next = t0;
    loop {
        let t = t0.elapsed().as_secs_f64() * 1e3;
        for (role, p, base) in probes {
            if let Some(v) = read_all(p) {
                series.push((*role, t, v.saturating_sub(*base)));
            }
        }
        if stop.load(Ordering::Relaxed) {
            return series;
        }
        next += period;
        // Parked until the next sample; the end of the trial unparks it at once (a trial of a few
        // milliseconds must not wait out a sampling period).
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
        }
    }
}

/// The CPU of several instances together; None when any cannot be read.
fn read_all(probes: &[CpuProbe]) -> Option<u64> {
    probes.iter().map(CpuProbe::read_ns).sum()
}

/// Sets its flag and wakes its thread when dropped, on every way out of a scope.
struct StopOnDrop<'a>(&'a AtomicBool, std::thread::Thread);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        self.1.unpark();
    }
}

/// A panic in a trial's body (a bug of virtperf's, whatever set it off) as the trial's failure:
/// its message, and every party relaunched, since what they were doing is unknown.
fn panicked(payload: &(dyn std::any::Any + Send), duts: usize) -> Fail {
    let msg = crate::host::panics::take_last(payload);
    Fail::Failed {
        reason: format!(
            "virtperf failed inside the trial (a bug: please report it): {}",
            virtperf_proto::printable(&msg, 400)
        ),
        dut_broken: (0..duts).collect(),
        tester_broken: true,
    }
}

/// Runs one trial of `case` (whose resolved spec is `spec`) on every instance in `duts` at once.
pub fn run<'b>(
    duts: &mut [Dut<'b>],
    tester: Option<&mut Tester<'b>>,
    case: &Case,
    spec: &WorkloadSpec,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<TrialOutcome, Fail> {
    let dut_probes: Option<Vec<CpuProbe>> = duts.iter().map(|d| d.inst.cpu.clone()).collect();
    let tester_probe: Option<Vec<CpuProbe>> =
        tester.as_ref().and_then(|t| t.inst.cpu.clone()).map(|p| vec![p]);
    let cpu0 = dut_probes.as_deref().and_then(read_all);
    let tcpu0 = tester_probe.as_deref().and_then(read_all);
    let mut probes = Vec::new();
    if let (Some(p), Some(b)) = (&dut_probes, cpu0) {
        probes.push(("dut", p.clone(), b));
    }
    if let (Some(p), Some(b)) = (&tester_probe, tcpu0) {
        probes.push(("tester", p.clone(), b));
    }
    let mut parties = Parties { duts, tester, in_flight: Vec::new(), cancel };
    let stop_sampling = AtomicBool::new(false);
    let t0 = Instant::now();
    let (body, series) = std::thread::scope(|s| {
        let sampler = s.spawn(|| sample_cpu(&probes, t0, &stop_sampling));
        // The sampler stops however the body ends: a panic in it unwinds through this guard
        // (the scope would otherwise wait for the sampler for ever, and the run hang).
        let stop = StopOnDrop(&stop_sampling, sampler.thread().clone());
        let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            body(&mut parties, case, spec, timeout)
        }))
        .unwrap_or_else(|p| Err(panicked(p.as_ref(), parties.duts.len())));
        drop(stop);
        (body, sampler.join().unwrap_or_default())
    });
    let body = match body {
        Ok(b) => b,
        Err(Fail::Failed { reason, mut dut_broken, tester_broken }) => {
            parties.abandon();
            // Which side hung is not known from a deadline alone: whoever does not answer a
            // ping now is relaunched (a stopped tester, a wedged guest), whoever does is kept.
            for k in 0..parties.duts.len() {
                if !dut_broken.contains(&k) && parties.unresponsive(Who::Dut(k)) {
                    dut_broken.push(k);
                }
            }
            let tester_dead = parties.unresponsive(Who::Tester);
            let mut reason = reason;
            if tester_dead && !tester_broken {
                reason += "; the other side (tester or peer) does not answer";
            }
            return Err(Fail::Failed { reason, dut_broken, tester_broken: tester_broken || tester_dead });
        }
        Err(e) => {
            parties.abandon();
            return Err(e);
        }
    };
    let cpu1 = dut_probes.as_deref().and_then(read_all);
    let tcpu1 = tester_probe.as_deref().and_then(read_all);
    let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    let mut body = body;
    if let Some((bytes, w0, w1)) = body.transfer {
        let ms = |t: Instant| t.saturating_duration_since(t0).as_secs_f64() * 1e3;
        let w = (ms(w0), ms(w1));
        if let Some(c) = cpu_per_gbit(&series, bytes, w) {
            body.samples.push(Sample {
                metric: virtperf_record::store::CPU_PER_GBIT.into(),
                value: c,
                unit: "CPU-s/Gbit".into(),
            });
        }
        let extra = body.extra.get_or_insert_with(|| json!({}));
        extra["transfer"] = json!({ "bytes": bytes, "window_ms": [w.0, w.1] });
    }
    if let Some((requests, w0, w1)) = body.served {
        let ms = |t: Instant| t.saturating_duration_since(t0).as_secs_f64() * 1e3;
        body.samples.extend(cpu_per_request(&series, &case.kind, requests, (ms(w0), ms(w1))));
    }
    Ok(TrialOutcome {
        status: virtperf_record::store::TrialStatus::Ok,
        reason: None,
        host_ns: Some(body.host_ns),
        guest_ns: Some(body.guest_ns),
        host_cpu_ns: delta(cpu0, cpu1),
        guest_cpu_ns: Some(body.guest_cpu_ns),
        samples: body.samples,
        tester_cpu_ns: delta(tcpu0, tcpu1),
        extra: body.extra,
        cpu_series: series,
        rtt_ns: body.rtt.map(|r| r.0),
        rtt_jitter_ns: body.rtt.map(|r| r.1),
        instance_samples: body.instance_samples,
        launch_id: None,
        work: None,
    })
}

/// Most probe runs of one calibration.
const MAX_PROBES: usize = 16;

/// The operation count of a calibrated workload (see `Workload::calibrates`) for this environment:
/// armed probe runs of growing counts on instance 0, each timed on the host's clock exactly like a
/// trial (`go` → `result`, less the idle span of an armed run that does nothing), until one lasts
/// at least half of `target`; the count is then scaled to `target` (Google Benchmark's rule: grow
/// ×10 below 10 % of the target, else straight to it). `cap` bounds the count (the
/// memory of the environment, the parameter's maximum) and says why. The probes are warm-up.
pub fn calibrate(
    dut: &mut Dut,
    spec: &WorkloadSpec,
    param: &str,
    target: Duration,
    cap: (u64, &str),
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<virtperf_record::store::Calibration, Fail> {
    let deadline = Instant::now() + timeout;
    let mut parties =
        Parties { duts: std::slice::from_mut(dut), tester: None, in_flight: Vec::new(), cancel };
    let r = calibrate_on(&mut parties, spec, param, target, cap, deadline);
    if r.is_err() {
        parties.abandon();
    }
    r
}

fn calibrate_on(
    p: &mut Parties,
    spec: &WorkloadSpec,
    param: &str,
    target: Duration,
    (cap, cap_why): (u64, &str),
    deadline: Instant,
) -> Result<virtperf_record::store::Calibration, Fail> {
    let target_ns = target.as_nanos() as u64;
    let (overhead, _) = go_overhead(p, Who::Dut(0), deadline)?;
    // From the parameter's own minimum (`pagefault`'s pages start at 16).
    let least = virtperf_workload::find(&spec.kind).map_or(1, |w| virtperf_workload::param_min(w, param));
    let mut count = least;
    let mut probes = Vec::new();
    let what = format!("calibrating `{param}`");
    loop {
        let mut s = spec.clone();
        s.params.insert(param.to_string(), json!(count));
        let (tag, _) = p.send_run(Who::Dut(0), s, true)?;
        p.wait_armed(Who::Dut(0), tag, deadline, &what)?;
        let go = p.go(Who::Dut(0), tag)?;
        let r = p.wait_result(Who::Dut(0), tag, deadline, &what)?;
        let h = r.span_from(go).saturating_sub(overhead).as_nanos() as u64;
        probes.push((count, h));
        let capped = count >= cap;
        if h >= target_ns / 2 || capped || probes.len() >= MAX_PROBES {
            let scaled = (count as f64 * target_ns as f64 / h.max(1) as f64).round().max(least as f64) as u64;
            let (count, capped) = if scaled > cap {
                (cap, Some(format!("{param} ≤ {cap}: {cap_why}")))
            } else if h < target_ns / 2 && !capped {
                // Out of probes before reaching the target: the last probe's scaling stands.
                (scaled, Some(format!("{MAX_PROBES} probes did not reach half the target")))
            } else {
                (scaled, None)
            };
            return Ok(virtperf_record::store::Calibration {
                param: param.to_string(),
                count,
                target_ns,
                probes,
                capped,
                own: None,
            });
        }
        // At most ×10 a step: the cost of an operation may change with the count (a gVisor
        // system call cost 16 µs over 100 calls and 81 µs over 10 000).
        let grow = if h < target_ns / 10 { 10.0 } else { target_ns as f64 / h as f64 };
        count = ((count as f64 * grow).round() as u64).clamp(count + 1, cap);
    }
}

struct Body {
    host_ns: u64,
    guest_ns: u64,
    guest_cpu_ns: u64,
    samples: Vec<Sample>,
    extra: Option<Value>,
    /// Armed trials: the round trip subtracted from `host_ns` and its spread (ns).
    rtt: Option<(u64, u64)>,
    /// Stream workloads: payload bytes the receivers got, and the host-clock window of the
    /// transfer (first client `started` → last result).
    transfer: Option<(u64, Instant, Instant)>,
    /// The timed regions of the runs, on each side's agent clock.
    windows: Vec<(Who, [u64; 2])>,
    /// Several instances: each one's samples; `samples` then holds the aggregates.
    instance_samples: Vec<(u32, Sample)>,
    /// A service: the requests its capacity phase served and that phase's host-clock window, for
    /// the CPU per request of the server's and the client's sides.
    served: Option<(u64, Instant, Instant)>,
}

/// What the aggregation of N instances may read beside their samples: per instance, its run's
/// detail (single-party), or each of its flows' — keyed by the flows' metric suffix (`""`, `_out`,
/// `_in`) — with the flow's count series on the host's clock when it has one.
#[derive(Debug, Default, Clone)]
pub struct Detail {
    pub run: Value,
    pub flows: Vec<(&'static str, Value, Option<Value>)>,
}

impl Detail {
    fn flow(&self, suffix: &str) -> Option<&(&'static str, Value, Option<Value>)> {
        self.flows.iter().find(|f| f.0 == suffix)
    }
}

/// A metric's name split into the declared metric and its suffixes (`tcp_goodput_in_host` →
/// `tcp_goodput`, `_in`).
fn declared(metric: &str) -> (&str, &'static str) {
    let m = metric.strip_suffix(virtperf_workload::HOST_SUFFIX).unwrap_or(metric);
    for sfx in ["_out", "_in"] {
        if let Some(b) = m.strip_suffix(sfx) {
            if virtperf_workload::metric(b).is_some_and(|d| d.name == b) {
                return (b, sfx);
            }
        }
    }
    (m, "")
}

/// What a trial of N instances reports beside each instance's figures: per metric the aggregate
/// its workload declares (`Workload::aggregation`) — a flow's rate added over the one window where
/// every flow runs (from their count series on the host's clock; each instance's figure becomes its
/// rate over that window), counts added, times averaged, worst cases as the worst, latency
/// percentiles from the pooled histograms — and for each throughput Jain's fairness index
/// (`METRIC_jain`) and the smallest and largest instance's share of the sum (`METRIC_share_min`,
/// `METRIC_share_max`, %). Returns the aggregates and, per metric added over one window, the
/// window (stored with the trial: its span and the ramps before and after it).
pub fn aggregate(
    per_instance: &mut [Vec<Sample>],
    details: &[Detail],
    w: Option<&dyn virtperf_workload::Workload>,
    params: &virtperf_workload::Params,
) -> (Vec<Sample>, Vec<Value>) {
    let mut names: Vec<(String, String)> = Vec::new();
    for smp in per_instance.iter().flatten() {
        if !names.iter().any(|(m, _)| *m == smp.metric) {
            names.push((smp.metric.clone(), smp.unit.clone()));
        }
    }
    let (mut out, mut windows) = (Vec::new(), Vec::new());
    for (m, unit) in names {
        let xs: Vec<f64> =
            per_instance.iter().filter_map(|v| v.iter().find(|x| x.metric == m).map(|x| x.value)).collect();
        if xs.len() != per_instance.len() {
            continue;
        }
        let (base, suffix) = declared(&m);
        let higher =
            virtperf_workload::metric(&m).is_some_and(|d| d.better == virtperf_workload::Better::Higher);
        let how = match w {
            Some(w) if w.metrics().iter().any(|d| d.name == base) => w.aggregation(base, params),
            _ if higher => virtperf_workload::Aggregation::Sum,
            _ => virtperf_workload::Aggregation::Mean,
        };
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let mut each = xs.clone();
        let value = match how {
            virtperf_workload::Aggregation::Window { series, scale } => {
                // The host clock's series of every flow (a `_host` twin is the same flow again).
                let flows: Option<Vec<Vec<[u64; 2]>>> = details
                    .iter()
                    .map(|d| {
                        d.flow(suffix)?
                            .2
                            .as_ref()
                            .and_then(|s| virtperf_workload::net::series::parse(&s[series]))
                    })
                    .collect();
                match flows.as_deref().and_then(virtperf_workload::net::series::Window::of) {
                    Some(win) if !m.ends_with(virtperf_workload::HOST_SUFFIX) => {
                        each = win.rates().iter().map(|r| r * scale).collect();
                        windows.push(json!({
                            "metric": m,
                            "start_ns": win.start_ns,
                            "ms": win.seconds() * 1e3,
                            "ramp_up_ms": win.ramp_up_ns as f64 / 1e6,
                            "ramp_down_ms": win.ramp_down_ns as f64 / 1e6,
                            "each_own_window": xs,
                        }));
                        each.iter().sum()
                    }
                    _ => xs.iter().sum(),
                }
            }
            virtperf_workload::Aggregation::Sum => xs.iter().sum(),
            virtperf_workload::Aggregation::Mean => mean,
            virtperf_workload::Aggregation::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            virtperf_workload::Aggregation::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
            virtperf_workload::Aggregation::Pooled => {
                let ds: Option<Vec<&Value>> = details
                    .iter()
                    .map(|d| if d.flows.is_empty() { Some(&d.run) } else { d.flow(suffix).map(|f| &f.1) })
                    .collect();
                ds.and_then(|ds| w.and_then(|w| w.pooled(base, &ds))).unwrap_or(mean)
            }
        };
        // Each instance's figure over the same window as the aggregate (their sum is it).
        if each != xs {
            for (v, x) in per_instance.iter_mut().zip(&each) {
                if let Some(smp) = v.iter_mut().find(|s| s.metric == m) {
                    smp.value = *x;
                }
            }
        }
        out.push(Sample { metric: m.clone(), value, unit: unit.clone() });
        // Fairness of the headline figures (a `_host` twin says the same thing again).
        if higher && !m.ends_with(virtperf_workload::HOST_SUFFIX) {
            if let Some(j) = virtperf_stats::jain_index(&each) {
                out.push(Sample { metric: format!("{m}_jain"), value: j, unit: "index".into() });
            }
            let sum: f64 = each.iter().sum();
            if sum > 0.0 {
                let share = |x: f64| x / sum * 100.0;
                let (lo, hi) = each.iter().fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
                out.push(Sample { metric: format!("{m}_share_min"), value: share(lo), unit: "%".into() });
                out.push(Sample { metric: format!("{m}_share_max"), value: share(hi), unit: "%".into() });
            }
        }
    }
    (out, windows)
}

/// Folds the instances' results of one trial into a body: one instance keeps its own samples;
/// several give aggregates plus each one's samples, and the start skew; the windows the
/// aggregates were added over go with the trial's detail.
fn combine(
    mut per: Vec<Vec<Sample>>,
    details: &[Detail],
    spec: &WorkloadSpec,
    skew_ms: f64,
) -> (Vec<Sample>, Vec<(u32, Sample)>, Vec<Value>) {
    if per.len() == 1 {
        return (per.pop().unwrap_or_default(), Vec::new(), Vec::new());
    }
    let w = virtperf_workload::find(&spec.kind);
    let (mut agg, windows) = aggregate(&mut per, details, w, &virtperf_workload::Params(&spec.params));
    agg.push(Sample { metric: virtperf_record::store::START_SKEW.into(), value: skew_ms, unit: "ms".into() });
    let each =
        per.into_iter().enumerate().flat_map(|(k, v)| v.into_iter().map(move |x| (k as u32, x))).collect();
    (agg, each, windows)
}

/// Spread of the instances' starts, ms: the spread of their timed regions' beginnings where the
/// instances read the host's clock (`starts` on one clock), else of the `go`s the host wrote.
fn start_skew_ms(gos: &[Instant], starts: Option<Vec<u64>>) -> f64 {
    if let Some(st) = starts.filter(|s| s.len() == gos.len() && !s.is_empty()) {
        let (lo, hi) = st.iter().fold((u64::MAX, 0), |(l, h), &x| (l.min(x), h.max(x)));
        return hi.saturating_sub(lo) as f64 / 1e6;
    }
    let (Some(lo), Some(hi)) = (gos.iter().min(), gos.iter().max()) else { return 0.0 };
    hi.duration_since(*lo).as_secs_f64() * 1e3
}

/// Cumulative CPU of `role` at `t_ms`, interpolated linearly in its series.
pub fn cpu_at(series: &[(&str, f64, u64)], role: &str, t_ms: f64) -> Option<f64> {
    let pts: Vec<(f64, f64)> = series.iter().filter(|x| x.0 == role).map(|x| (x.1, x.2 as f64)).collect();
    let (first, last) = (pts.first()?, pts.last()?);
    if t_ms <= first.0 {
        return Some(first.1);
    }
    if t_ms >= last.0 {
        return Some(last.1);
    }
    let i = pts.iter().position(|p| p.0 >= t_ms)?;
    let (a, b) = (pts[i - 1], pts[i]);
    let f = if b.0 > a.0 { (t_ms - a.0) / (b.0 - a.0) } else { 1.0 };
    Some(a.1 + f * (b.1 - a.1))
}

/// The CPU `role` used over a window (ms since the trial began), ns, interpolated in the series.
fn cpu_over(series: &[(&str, f64, u64)], role: &str, w_ms: (f64, f64)) -> Option<f64> {
    Some(cpu_at(series, role, w_ms.1)? - cpu_at(series, role, w_ms.0)?)
}

/// Host CPU of the DUT per Gbit received (netperf's service demand; seed 000's CPU cost), over the
/// transfer window only: CPU interpolated in the 20 Hz series at the window's ends (ms since the
/// trial began), bytes the receivers counted.
pub fn cpu_per_gbit(series: &[(&str, f64, u64)], bytes: u64, w_ms: (f64, f64)) -> Option<f64> {
    let cpu_ns = cpu_over(series, "dut", w_ms)?;
    let gbit = bytes as f64 * 8.0 / 1e9;
    (gbit > 0.0 && cpu_ns >= 0.0).then(|| cpu_ns / 1e9 / gbit)
}

/// A service's host CPU per request at capacity (`{kind}_server_cpu`: the environment's, its
/// cgroup or processes; `{kind}_client_cpu`: the tester's), µs, over the capacity phase's window
/// (ms since the trial began) interpolated in the 20 Hz series.
fn cpu_per_request(series: &[(&str, f64, u64)], kind: &str, requests: u64, w_ms: (f64, f64)) -> Vec<Sample> {
    let mut out = Vec::new();
    for (role, name) in [("dut", "server_cpu"), ("tester", "client_cpu")] {
        if let Some(ns) = cpu_over(series, role, w_ms).filter(|ns| *ns >= 0.0 && requests > 0) {
            out.push(Sample {
                metric: format!("{kind}_{name}"),
                value: ns / 1e3 / requests as f64,
                unit: "us/req".into(),
            });
        }
    }
    out
}

fn body(p: &mut Parties, case: &Case, spec: &WorkloadSpec, timeout: Duration) -> Result<Body, Fail> {
    // A test's fault, where VIRTPERF_FAILPOINTS asks for one (`trial-body=panic`).
    fail::fail_point!("trial-body");
    let deadline = Instant::now() + timeout;
    // Background load first, so that the work runs on an already loaded CPU: on the tester, or
    // on every instance of the environment under test.
    let mut loads = Vec::new();
    if let Some(l) = case.load {
        let whos: Vec<Who> = if l.on == LoadOn::Tester {
            vec![Who::Tester]
        } else {
            (0..p.duts.len()).map(Who::Dut).collect()
        };
        for who in whos {
            let params = [("percent", json!(l.percent)), ("cpus", json!(l.cpus))]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let (tag, _) = p.send(
                who,
                WorkloadSpec { kind: Load.kind().into(), params, net: None, scratch: None, count: None },
            )?;
            p.wait_started(who, tag, deadline, "background load")?;
            loads.push((who, tag));
        }
    }
    let procedure = virtperf_workload::find(&case.kind).is_some_and(|w| w.procedure());
    let cluster = virtperf_workload::find(&case.kind).is_some_and(|w| w.cluster());
    let service = virtperf_workload::find(&case.kind).is_some_and(|w| w.service());
    let mut b = if procedure {
        rfc2544_trial(p, spec, timeout)?
    } else if service {
        service_trial(p, case, spec, deadline)?
    } else if cluster {
        cluster_trial(p, spec, deadline)?
    } else if case.network {
        let direction = case.params.get("direction").and_then(Value::as_str).unwrap_or("out");
        network(p, direction, spec, deadline)?
    } else {
        single(p, spec, deadline)?
    };
    let mut reached = Vec::new();
    let mut results = Vec::new();
    for (who, tag) in loads {
        let r = p.stop_run(who, tag, Duration::from_secs(10), "the background load")?;
        let mut result = r.out.extra;
        // The load reached over the measured workload's window on the loader's side (same agent,
        // same clock), not over the loader's whole life.
        let series: Vec<Vec<Vec<i64>>> = serde_json::from_value(result["series"].take()).unwrap_or_default();
        let side: Vec<[u64; 2]> = b.windows.iter().filter(|w| w.0 == who).map(|w| w.1).collect();
        let window = side.iter().map(|w| w[0]).min().zip(side.iter().map(|w| w[1]).max());
        let in_window =
            window.and_then(|(a, z)| virtperf_workload::load::in_window(&series, a as i64, z as i64));
        let life_of = |m: &str| r.out.samples.iter().find(|x| x.metric == m).map(|x| x.value);
        let life = life_of("load_achieved").map(|a| (a, life_of("load_starved").unwrap_or(0.0)));
        if let Some(x) = in_window.or(life) {
            reached.push(x);
        }
        result["achieved_over"] =
            json!(if in_window.is_some() { "the workload's window" } else { "the loader's life" });
        results.push(result);
    }
    if !reached.is_empty() {
        // Over the loaders (one per instance): their mean.
        let n = reached.len() as f64;
        let (got, starved) = reached.iter().fold((0.0, 0.0), |s, r| (s.0 + r.0 / n, s.1 + r.1 / n));
        b.samples.push(Sample { metric: "load_achieved".into(), value: got, unit: "%".into() });
        // What the host denied the loader meanwhile (its wait runnable): the reference for how
        // far from its target it could land.
        b.samples.push(Sample { metric: "load_starved".into(), value: starved, unit: "%".into() });
        let on = if case.load.is_some_and(|l| l.on == LoadOn::Tester) { "tester" } else { "dut" };
        let result = if results.len() == 1 { results.remove(0) } else { json!(results) };
        let extra = b.extra.get_or_insert_with(|| json!({}));
        extra["load"] = json!({"on": on, "result": result});
    }
    Ok(b)
}

/// Armed `noop` runs timed like a workload (`go` → `result`) before each armed trial.
const GO_CALIBRATIONS: usize = 5;
/// The most laps one run may mark (a disk run marks one per phase and one at the end): more are
/// dropped, so a flooding agent cannot grow the host's memory.
const MAX_LAPS: usize = 64;

/// How long an abandoned run is given to acknowledge its stop, and then to end.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Calibrations of the `go` span made before a trial at most, when one's runs disagree.
const GO_ATTEMPTS: usize = 3;

/// How long the host waits between an armed run's `armed` and its `go`, so that `go` finds the
/// environment asleep rather than going to sleep. User-Mode Linux's idle (arch/um os_idle_sleep,
/// 6.1 and 6.12 alike) is entered with the guest's interrupts off: a SIGIO that comes then is
/// only marked pending, and the host sleep that follows lasts until the next timer signal — up to
/// a tick, 10 ms at UML's HZ = 100. The agent goes idle right after `armed`, and a `go` written at
/// once came in that window: 1 to 5 of every 16 UML `pde` trials had host spans 2.4-9.5 ms longer
/// than the guest's own (its noops, 0.19 ms), which put UML's `pde` at 1.30x and its `memcpy` at
/// 1.21x where the work costs what it does natively. Outside the span: it costs the trial only
/// time. Waited in [`Parties::wait_armed`], so every armed run gets it: a trial, its calibration's
/// no-ops, the probes that size its work, the armed clients of a flow.
const GO_SETTLE: Duration = Duration::from_millis(1);

/// The host-clock span of an armed run that does nothing: the cost of `go` reaching the agent,
/// waking the run's thread and the result coming back — what an armed workload's host span
/// includes besides its work. Median and spread (second-longest − second-shortest) of
/// [`GO_CALIBRATIONS`] runs, measured now: an idle ping at launch is neither the same path nor
/// the same moment (a UML guest's was 6 ms with a 10 ms spread right after boot, 0.5 ms later).
/// A calibration whose runs spread over half their median met a stall and is made again (up to
/// [`GO_ATTEMPTS`]), the steadiest kept ([`steadiest`]): one made during a 10 ms stall of a UML
/// guest (median 9.6 ms, spread 5.2 ms, against 0.2 ms and 0.03 ms before and after) was
/// subtracted from a 9.3 ms `pde` trial, whose host-clock time came out 0.
fn go_overhead(p: &mut Parties, who: Who, deadline: Instant) -> Result<(Duration, Duration), Fail> {
    let mut attempts = Vec::with_capacity(GO_ATTEMPTS);
    for _ in 0..GO_ATTEMPTS {
        let a = go_calibration(p, who, deadline)?;
        attempts.push(a);
        if steady(a) {
            break;
        }
    }
    Ok(steadiest(&attempts))
}

/// A calibration (median, spread) whose runs agree: spread at most half the median.
fn steady((median, spread): (Duration, Duration)) -> bool {
    spread <= median / 2
}

/// Of calibrations (median, spread), the first [`steady`] one, else the one with the smallest
/// median: a stall only lengthens the runs it falls on.
fn steadiest(attempts: &[(Duration, Duration)]) -> (Duration, Duration) {
    attempts
        .iter()
        .copied()
        .find(|&a| steady(a))
        .or_else(|| attempts.iter().copied().min_by_key(|a| a.0))
        .unwrap_or_default()
}

fn go_calibration(p: &mut Parties, who: Who, deadline: Instant) -> Result<(Duration, Duration), Fail> {
    let noop = WorkloadSpec {
        kind: Noop.kind().into(),
        params: Default::default(),
        net: None,
        scratch: None,
        count: None,
    };
    let mut spans = Vec::with_capacity(GO_CALIBRATIONS);
    for _ in 0..GO_CALIBRATIONS {
        let (tag, _) = p.send_run(who, noop.clone(), true)?;
        p.wait_armed(who, tag, deadline, "calibrating the host clock")?;
        let go = p.go(who, tag)?;
        let r = p.wait_result(who, tag, deadline, "calibrating the host clock")?;
        spans.push(r.span_from(go));
    }
    spans.sort();
    Ok((spans[spans.len() / 2], spans[spans.len() - 2].saturating_sub(spans[1])))
}

/// What an armed trial's host span has subtracted: the `go` calibration made just before it —
/// unless that met a stall the trial did not, which the trial itself shows: its span less the
/// calibration is under half of the guest's own span. Then the instance's shortest calibration so
/// far (`floor`). A UML guest's no-ops took 9.2 ms (spread 3.8 ms, steady by the retry's rule)
/// just before a 7.4 ms `pde` trial whose whole span was 7.6 ms, against 0.2 ms in its other
/// calibrations: subtracted, that trial's host time came out 24 µs. The floor every time instead
/// biased a TCG guest's host spans by its `go` path's usual variation over its fastest: a
/// microvm's 218 ms `memcpy` read 3.8 ms (1.8 %) over its own clock, 1 trial of 4 within the
/// clock check.
fn go_subtrahend(span: Duration, guest_ns: u64, calibration: Duration, floor: Duration) -> Duration {
    let rest = span.saturating_sub(calibration).as_nanos() as f64;
    if rest < 0.5 * guest_ns as f64 {
        floor.min(calibration)
    } else {
        calibration
    }
}

/// Whether `case`'s trials run on the DUT alone and armed (`single`): timed on the host's clock
/// too, and so clock-checked. The others are procedures, clusters and network workloads (`body`
/// dispatches in that order).
pub fn armed_alone(case: &Case) -> bool {
    !case.network && virtperf_workload::find(&case.kind).is_some_and(|w| !w.procedure() && !w.cluster())
}

/// A workload on the DUT alone, armed: its setup happens before `go`, so the host's clock spans
/// exactly the timed region (`go` written → `result` read, less the same span of an armed run
/// that does nothing), and fixed-work workloads report their headline metric on that clock too
/// (`METRIC_host`). With several instances every one is armed, then all get `go` back to back (a
/// start barrier), and the trial ends when the last one finishes.
fn single(p: &mut Parties, spec: &WorkloadSpec, deadline: Instant) -> Result<Body, Fail> {
    let n = p.duts.len();
    let mut cal = Vec::with_capacity(n);
    for k in 0..n {
        let (median, spread) = go_overhead(p, Who::Dut(k), deadline)?;
        // The instance's shortest so far, for a calibration that met a stall (`go_subtrahend`).
        let floor = p.duts[k].inst.go_floor.map_or(median, |f| f.min(median));
        p.duts[k].inst.go_floor = Some(floor);
        cal.push((median, spread, floor));
    }
    let mut tags = Vec::with_capacity(n);
    let writes = virtperf_workload::find(&spec.kind).is_some_and(|w| w.needs_scratch());
    for k in 0..n {
        // Each instance writes on its own scratch disk.
        let scratch = p.duts[k].inst.scratch.as_ref().filter(|_| writes).map(|s| s.dir.clone());
        tags.push(p.send_run(Who::Dut(k), WorkloadSpec { scratch, ..spec.clone() }, true)?.0);
    }
    for (k, &tag) in tags.iter().enumerate() {
        p.wait_armed(Who::Dut(k), tag, deadline, "the workload")?;
    }
    let mut gos = Vec::with_capacity(n);
    for (k, &tag) in tags.iter().enumerate() {
        gos.push(p.go(Who::Dut(k), tag)?);
    }
    let w = virtperf_workload::find(&spec.kind);
    let (mut host_ns, mut guest_ns, mut guest_cpu_ns) = (0u64, 0u64, 0u64);
    let (mut per, mut windows, mut extras, mut starts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut relayed = false;
    // Each instance's two clocks over its own run (host span, guest span, its calibration): the
    // clock check of several instances, one point per instance.
    let mut clocks = Vec::with_capacity(n);
    let mut subs = Vec::with_capacity(n);
    for (k, &tag) in tags.iter().enumerate() {
        let r = p.wait_result(Who::Dut(k), tag, deadline, "the workload")?;
        relayed |= r.relayed.is_some();
        let span = r.span_from(gos[k]);
        let sub = go_subtrahend(span, r.guest_ns, cal[k].0, cal[k].2);
        let h = span.saturating_sub(sub).as_nanos() as u64;
        subs.push(sub);
        let spans = r.lap_spans();
        let mut samples = r.out.samples;
        if let Some(w) = w {
            let params = virtperf_workload::Params(&spec.params);
            samples.extend(w.on_host_clock(&params, h));
            if let Some(spans) = spans {
                samples.extend(w.on_host_laps(&params, &r.out.extra, &spans));
            }
        }
        clocks.push(json!([h, r.guest_ns, sub.as_nanos() as u64, cal[k].1.as_nanos() as u64]));
        host_ns = host_ns.max(h);
        guest_ns = guest_ns.max(r.guest_ns);
        guest_cpu_ns += r.guest_cpu_ns;
        if let Some(win) = r.window_ns {
            windows.push((Who::Dut(k), win));
            starts.push(win[0]);
        }
        per.push(samples);
        let mut extra = r.out.extra;
        // Where the bytes landed, as the environment made it (stored with the trial).
        if let (true, Some(sc), Some(obj)) = (writes, &p.duts[k].inst.scratch, extra.as_object_mut()) {
            if !obj.contains_key("dir") || obj.get("dir").and_then(Value::as_str) == Some(sc.dir.as_str()) {
                obj.insert("scratch".into(), json!(sc.what));
            }
        }
        extras.push(extra);
    }
    let shared_clock = p.duts.iter().all(|d| !d.inst.own_clock);
    let skew = start_skew_ms(&gos, shared_clock.then_some(starts));
    let details: Vec<Detail> = extras.iter().map(|e| Detail { run: e.clone(), flows: Vec::new() }).collect();
    let (samples, instance_samples, _) = combine(per, &details, spec, skew);
    let mut extra = if n == 1 {
        extras.pop().filter(|e| !e.is_null())
    } else {
        Some(json!({ "instances": extras, "clock_instances": clocks }))
    };
    if relayed {
        // Provenance: the host span was timed on the environment's host, not here.
        if let Some(o) = extra.get_or_insert_with(|| json!({})).as_object_mut() {
            o.insert("host_span".into(), json!("relayed"));
        }
    }
    Ok(Body {
        host_ns,
        guest_ns,
        guest_cpu_ns,
        samples,
        extra,
        // One instance: its calibration, for the clock check (several: `clock_instances`).
        rtt: (n == 1).then(|| (subs[0].as_nanos() as u64, cal[0].1.as_nanos() as u64)),
        transfer: None,
        windows,
        instance_samples,
        served: None,
    })
}

/// A network workload between the DUT and the tester: one flow per direction and per instance,
/// all at once (the tester runs one server or client per instance). Every server listens before
/// any client starts; with several instances the clients are armed and started back to back.
fn network(p: &mut Parties, direction: &str, spec: &WorkloadSpec, deadline: Instant) -> Result<Body, Fail> {
    let n = p.duts.len();
    let (dut_addrs, tester_addr) = lab_addrs(p)?;
    // (instance, flow) pairs; the client and server of each.
    let all: Vec<(usize, Flow)> =
        (0..n).flat_map(|k| flows(direction, k).into_iter().map(move |f| (k, f))).collect();
    let addr_of = |w: Who| match w {
        Who::Dut(k) => dut_addrs[k].clone(),
        Who::Tester => tester_addr.clone(),
    };
    // What a party binds to: its own address, which behind a NAT (slirp4netns) is not the one
    // its peer reaches it at.
    let inner: Vec<Option<String>> = p.duts.iter().map(|d| d.inst.inner_addr.clone()).collect();
    let bind_of = |w: Who| match w {
        Who::Dut(k) => inner[k].clone().unwrap_or_else(|| dut_addrs[k].clone()),
        Who::Tester => tester_addr.clone(),
    };
    let role = |k: usize, f: &Flow, side: Side, i: usize| {
        let (me, peer) = match side {
            Side::Client => (f.client(k), f.server(k)),
            Side::Server => (f.server(k), f.client(k)),
        };
        WorkloadSpec {
            net: Some(NetRole {
                side,
                bind: bind_of(me),
                peer: addr_of(peer),
                port: f.port,
                flow: i as u32 + 1,
                instrument: me == Who::Tester,
            }),
            ..spec.clone()
        }
    };
    let started = start_flows(p, &all, &role, deadline)?;
    let w = virtperf_workload::find(&spec.kind).ok_or_else(|| Fail::Failed {
        reason: format!("unknown workload `{}`", spec.kind),
        dut_broken: Vec::new(),
        tester_broken: false,
    })?;
    let g = gather_flows(p, w, &virtperf_workload::Params(&spec.params), &all, &started, deadline)?;
    let shared_clock = p.duts.iter().all(|d| !d.inst.own_clock) && all.iter().all(|(_, f)| f.dut_client);
    let skew = start_skew_ms(&started.gos, shared_clock.then_some(g.client_starts));
    let (samples, instance_samples, agg_windows) = combine(g.per, &g.details, spec, skew);
    let mut extra = json!({ "flows": g.flows_extra });
    if !agg_windows.is_empty() {
        extra["aggregate_windows"] = json!(agg_windows);
    }
    Ok(Body {
        host_ns: g.host_ns,
        guest_ns: g.guest_ns,
        guest_cpu_ns: g.guest_cpu_ns,
        samples,
        extra: Some(extra),
        rtt: None,
        transfer: g.bytes.zip(started.first_started).zip(g.last_result).map(|((b, w0), w1)| (b, w0, w1)),
        windows: g.windows,
        instance_samples,
        served: None,
    })
}

/// Every instance's lab address and the tester's, or why the trial cannot run.
fn lab_addrs(p: &Parties) -> Result<(Vec<String>, String), Fail> {
    let dut_addrs: Vec<String> =
        p.duts.iter().map(|d| d.addr.clone()).collect::<Option<_>>().ok_or_else(|| Fail::Failed {
            reason: "a network workload needs the lab, which was not built".into(),
            dut_broken: Vec::new(),
            tester_broken: false,
        })?;
    match &p.tester {
        Some(t) => Ok((dut_addrs, t.addr.clone())),
        None => Err(Fail::Failed {
            reason: "the lab's tester is not running".into(),
            dut_broken: Vec::new(),
            tester_broken: true,
        }),
    }
}

impl Flow {
    fn client(&self, k: usize) -> Who {
        if self.dut_client {
            Who::Dut(k)
        } else {
            Who::Tester
        }
    }
    fn server(&self, k: usize) -> Who {
        if self.dut_client {
            Who::Tester
        } else {
            Who::Dut(k)
        }
    }
}

/// Each side of a network trial's flows as sent: (who, tag, when sent or told to go).
struct Started {
    servers: Vec<(Who, u64, Instant)>,
    clients: Vec<(Who, u64, Instant)>,
    /// Several instances: when each client was told to go.
    gos: Vec<Instant>,
    /// When the first client started (the transfer's start on the host's clock).
    first_started: Option<Instant>,
}

/// Starts every flow's server, then its client; several instances' clients are armed first and
/// told to go together.
fn start_flows(
    p: &mut Parties,
    all: &[(usize, Flow)],
    role: &dyn Fn(usize, &Flow, Side, usize) -> WorkloadSpec,
    deadline: Instant,
) -> Result<Started, Fail> {
    let mut servers = Vec::new();
    for (i, (k, f)) in all.iter().enumerate() {
        let who = f.server(*k);
        let (tag, sent) = p.send(who, role(*k, f, Side::Server, i))?;
        p.wait_started(who, tag, deadline, &format!("the {} server", f.direction))?;
        servers.push((who, tag, sent));
    }
    let armed = p.duts.len() > 1;
    let mut clients = Vec::new();
    let mut first_started = None;
    for (i, (k, f)) in all.iter().enumerate() {
        let who = f.client(*k);
        let (tag, sent) = p.send_run(who, role(*k, f, Side::Client, i), armed)?;
        let at = p.wait_started(who, tag, deadline, &format!("the {} client", f.direction))?;
        if !armed {
            first_started.get_or_insert(at);
        }
        clients.push((who, tag, sent));
    }
    let mut gos = Vec::new();
    if armed {
        for (i, (_, f)) in all.iter().enumerate() {
            let (who, tag, _) = clients[i];
            p.wait_armed(who, tag, deadline, &format!("the {} client", f.direction))?;
        }
        for c in clients.iter_mut() {
            let go = p.go(c.0, c.1)?;
            c.2 = go;
            gos.push(go);
        }
        first_started = gos.iter().min().copied();
    }
    Ok(Started { servers, clients, gos, first_started })
}

/// What the flows' results add up to.
struct Gathered {
    bytes: Option<u64>,
    last_result: Option<Instant>,
    windows: Vec<(Who, [u64; 2])>,
    per: Vec<Vec<Sample>>,
    details: Vec<Detail>,
    flows_extra: Vec<Value>,
    host_ns: u64,
    guest_ns: u64,
    guest_cpu_ns: u64,
    client_starts: Vec<u64>,
}

/// A flow's rates on the host's clock (`METRIC_host`, beside the environment's own figure): each
/// windowed metric the flow reported (goodput, transactions), from the counts the host-clock side
/// of the flow sampled over its span. A guest that receives or answers is timed by its own
/// kernel's clock; these are what the host saw of the same flow.
fn host_twins(
    w: &dyn virtperf_workload::Workload,
    params: &virtperf_workload::Params,
    series: &Value,
    suffix: &str,
    reported: &[Sample],
) -> Vec<Sample> {
    let mut out = Vec::new();
    for d in w.metrics() {
        let virtperf_workload::Aggregation::Window { series: name, scale } = w.aggregation(d.name, params)
        else {
            continue;
        };
        let metric = format!("{}{suffix}", d.name);
        if !reported.iter().any(|x| x.metric == metric) {
            continue;
        }
        let rate = virtperf_workload::net::series::parse(&series[name])
            .and_then(|s| virtperf_workload::net::series::Window::of(&[s]))
            .and_then(|win| win.rates().first().copied());
        if let Some(r) = rate.filter(|r| r.is_finite() && *r > 0.0) {
            out.push(Sample {
                metric: format!("{metric}{}", virtperf_workload::HOST_SUFFIX),
                value: r * scale,
                unit: d.unit.into(),
            });
        }
    }
    out
}

/// Waits for every flow's client and server results and folds them: bytes moved, the spans on
/// the host's clock, each instance's samples and the flows' detail.
fn gather_flows(
    p: &mut Parties,
    w: &dyn virtperf_workload::Workload,
    params: &virtperf_workload::Params,
    all: &[(usize, Flow)],
    started: &Started,
    deadline: Instant,
) -> Result<Gathered, Fail> {
    let n = p.duts.len();
    let mut g = Gathered {
        bytes: None,
        last_result: None,
        windows: Vec::new(),
        per: vec![Vec::new(); n],
        details: vec![Detail::default(); n],
        flows_extra: Vec::new(),
        host_ns: 0,
        guest_ns: 0,
        guest_cpu_ns: 0,
        client_starts: Vec::new(),
    };
    for (i, (k, f)) in all.iter().enumerate() {
        let (cw, ctag, csent) = started.clients[i];
        let (sw, stag, ssent) = started.servers[i];
        let c = p.wait_result(cw, ctag, deadline, &format!("the {} client", f.direction))?;
        let s = p.wait_result(sw, stag, deadline, &format!("the {} server", f.direction))?;
        if let Some(b) = s.out.extra["bytes"].as_u64() {
            *g.bytes.get_or_insert(0) += b;
        }
        g.last_result = Some(g.last_result.map_or(c.at.max(s.at), |l| l.max(c.at).max(s.at)));
        g.windows.extend(c.window_ns.map(|w| (cw, w)));
        g.windows.extend(s.window_ns.map(|w| (sw, w)));
        g.client_starts.extend(c.window_ns.map(|w| w[0]));
        // The DUT's side of the flow is what the host clock times and the guest reports.
        let (dut_r, dut_sent) = if f.dut_client { (&c, csent) } else { (&s, ssent) };
        g.host_ns = g
            .host_ns
            .max(dut_r.at.duration_since(dut_sent).saturating_sub(p.duts[*k].inst.rtt).as_nanos() as u64);
        g.guest_ns = g.guest_ns.max(dut_r.guest_ns);
        g.guest_cpu_ns += dut_r.guest_cpu_ns;
        if let Some(u) = dut_r.guest_system.and_then(|gs| gs.util_pct()) {
            // What sar inside the environment shows: every CPU it sees, all processes, softirq included.
            g.per[*k].push(Sample {
                metric: format!("guest_cpu_util{}", f.suffix),
                value: u,
                unit: "%".into(),
            });
        }
        for mut smp in w.merge(&s.out, &c.out) {
            smp.metric.push_str(f.suffix);
            g.per[*k].push(smp);
        }
        // The flow's counts on the host's clock: the tester's side (a native agent here), or the
        // environment's where its clock is the host's (native, containers).
        let (tester_side, dut_side) = if f.dut_client { (&s, &c) } else { (&c, &s) };
        let on_host = tester_side
            .out
            .extra
            .get("series")
            .or_else(|| (!p.duts[*k].inst.own_clock).then(|| dut_side.out.extra.get("series")).flatten());
        if let Some(series) = on_host {
            let twins = host_twins(w, params, series, f.suffix, &g.per[*k]);
            g.per[*k].extend(twins);
        }
        g.details[*k].flows.push((
            f.suffix,
            json!({"server": s.out.extra, "client": c.out.extra}),
            on_host.cloned(),
        ));
        g.flows_extra.push(json!({
            "instance": k,
            "direction": f.direction,
            "dut": if f.dut_client { "client" } else { "server" },
            "server": s.out.extra,
            "client": c.out.extra,
        }));
    }
    Ok(g)
}

/// A file system across the instances (`pfs`): a server in each instance (instance 0, started
/// last, makes the volume over every brick), then one client on the tester writes and reads
/// through it; the servers stop after the client. A server that dies while the client runs ends
/// its own run with the reason, which fails the trial (the client's error is joined to it).
fn cluster_trial(p: &mut Parties, spec: &WorkloadSpec, deadline: Instant) -> Result<Body, Fail> {
    let n = p.duts.len();
    let lab = |what: &str| Fail::Failed { reason: what.into(), dut_broken: Vec::new(), tester_broken: false };
    let addrs: Vec<String> = p
        .duts
        .iter()
        .map(|d| d.addr.clone())
        .collect::<Option<_>>()
        .ok_or_else(|| lab("a pfs volume needs the lab, which was not built"))?;
    let scratch: Vec<String> = p
        .duts
        .iter()
        .map(|d| d.inst.scratch.as_ref().map(|s| s.dir.clone()))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            lab("each pfs server keeps its brick on its instance's scratch disk, and one has none")
        })?;
    let tester_addr = p.tester.as_ref().map(|t| t.addr.clone()).ok_or_else(|| Fail::Failed {
        reason: "the lab's tester (the pfs client) is not running".into(),
        dut_broken: Vec::new(),
        tester_broken: true,
    })?;
    let bricks: Vec<String> = (0..n)
        .map(|k| {
            let home = virtperf_workload::pfs::home(std::path::Path::new(&scratch[k]));
            format!("{}:{}", addrs[k], home.join("brick").display())
        })
        .collect();
    let role = |side: Side, bind: &str, peer: &str| NetRole {
        side,
        bind: bind.to_string(),
        peer: peer.to_string(),
        port: virtperf_workload::pfs::PORT,
        flow: 1,
        instrument: side == Side::Client,
    };
    // Instance 0 last: it probes the others, which must listen by then.
    let mut servers = Vec::new();
    for k in (0..n).rev() {
        let mut params = spec.params.clone();
        if k == 0 {
            params.insert("bricks".into(), json!(bricks.join(",")));
        }
        let s = WorkloadSpec {
            params,
            net: Some(role(Side::Server, &addrs[k], &tester_addr)),
            scratch: Some(scratch[k].clone()),
            ..spec.clone()
        };
        let (tag, _) = p.send(Who::Dut(k), s)?;
        let what = if k == 0 { "the pfs server of instance 0 (making the volume)" } else { "a pfs server" };
        p.wait_started(Who::Dut(k), tag, deadline, what)?;
        servers.push((k, tag));
    }
    let c = WorkloadSpec {
        net: Some(role(Side::Client, &tester_addr, &addrs[0])),
        scratch: None,
        ..spec.clone()
    };
    let (ctag, csent) = p.send(Who::Tester, c)?;
    let client = p
        .wait_started(Who::Tester, ctag, deadline, "the pfs client")
        .and_then(|_| p.wait_result(Who::Tester, ctag, deadline, "the pfs client"));
    // Stop the servers whatever the client did; a server's own failure is the better reason.
    let mut server_out = Vec::new();
    let mut server_err = None;
    for &(k, tag) in servers.iter().rev() {
        match p.stop_run(Who::Dut(k), tag, Duration::from_secs(20), "a pfs server") {
            Ok(r) => server_out.push((k, r.guest_cpu_ns, r.out.extra)),
            Err(e) => {
                server_err.get_or_insert(e);
            }
        }
    }
    let c = match (client, server_err) {
        (Ok(c), None) => c,
        (Err(Fail::Interrupted), _) | (_, Some(Fail::Interrupted)) => return Err(Fail::Interrupted),
        (Ok(_), Some(e)) => return Err(e),
        (
            Err(Fail::Failed { reason: cr, tester_broken, .. }),
            Some(Fail::Failed { reason, dut_broken, .. }),
        ) => return Err(Fail::Failed { reason: format!("{reason}; {cr}"), dut_broken, tester_broken }),
        (Err(e), _) => return Err(e),
    };
    let host_ns = c.at.duration_since(csent).as_nanos() as u64;
    let guest_cpu_ns = server_out.iter().map(|s| s.1).sum();
    server_out.sort_by_key(|s| s.0);
    let volume = server_out.iter().find_map(|s| s.2.get("volume").filter(|v| !v.is_null()).cloned());
    let mut windows = Vec::new();
    windows.extend(c.window_ns.map(|w| (Who::Tester, w)));
    Ok(Body {
        host_ns,
        guest_ns: c.guest_ns,
        guest_cpu_ns,
        samples: c.out.samples,
        extra: Some(json!({
            "client": c.out.extra,
            "volume": volume,
            "servers": server_out.iter().map(|s| s.2.clone()).collect::<Vec<_>>(),
        })),
        rtt: None,
        transfer: None,
        windows,
        instance_samples: Vec::new(),
        served: None,
    })
}

/// Where a service's offered loads come from, in the words the trial's detail keeps.
fn reference_of(case: &Case, spec: &WorkloadSpec) -> Option<(f64, &'static str)> {
    let r = spec.params.get("reference").and_then(Value::as_f64).filter(|r| *r > 0.0)?;
    let from = if case.params.contains_key("reference") {
        "given in the experiment"
    } else {
        "the baseline's capacity measured in this run (the median of its trials so far)"
    };
    Some((r, from))
}

/// A service (`apps`): its server in instance 0 of the environment, readiness-checked by its own
/// agent; then its client on the tester, one run per phase — the capacity (closed loop), then
/// each offered load (open loop) at its percentage of the reference rate (the baseline's
/// capacity measured in this run, injected by the run; else this trial's own) — each timed on
/// the host's clock; then the server's stop. A server that dies meanwhile ends its own run with
/// the reason, which is the trial's (the client's error joined to it).
fn service_trial(p: &mut Parties, case: &Case, spec: &WorkloadSpec, deadline: Instant) -> Result<Body, Fail> {
    let (dut_addrs, tester_addr) = lab_addrs(p)?;
    if dut_addrs.len() != 1 {
        return Err(Fail::Failed {
            reason: format!("a service runs in one instance, not {}: give instances = 1", dut_addrs.len()),
            dut_broken: Vec::new(),
            tester_broken: false,
        });
    }
    let dut = dut_addrs[0].clone();
    // The server listens on its own address, which behind a NAT (slirp4netns) is not its lab one.
    let dut_bind = p.duts[0].inst.inner_addr.clone().unwrap_or_else(|| dut.clone());
    let params = virtperf_workload::Params(&spec.params);
    let bad = |e: virtperf_workload::ParamError| Fail::Failed {
        reason: e.to_string(),
        dut_broken: Vec::new(),
        tester_broken: false,
    };
    let loads = virtperf_workload::apps::loads(&params).map_err(bad)?;
    let role = |side: Side, bind: &str, peer: &str| NetRole {
        side,
        bind: bind.to_string(),
        peer: peer.to_string(),
        port: BASE_PORT,
        flow: 1,
        instrument: false,
    };
    let with = |phase: &str, extra: &[(&str, Value)]| {
        let mut params = spec.params.clone();
        params.insert("phase".into(), json!(phase));
        for (k, v) in extra {
            params.insert(k.to_string(), v.clone());
        }
        params
    };
    // `explain`'s counted pass: the server counts its events from ready to stop (its set-up and
    // shutdown left out) over the capacity phase alone, the phase the model explains. A timed
    // trial's getrusage would be the agent's own (the server's processes are reaped after the
    // count): the server is not counted there, nor the client ever.
    let counted = spec.count.as_ref().is_some_and(|c| !c.rusage_only);
    let server = WorkloadSpec {
        params: with("server", &[]),
        net: Some(role(Side::Server, &dut_bind, &tester_addr)),
        scratch: p.duts[0].inst.scratch.as_ref().map(|s| s.dir.clone()),
        count: if counted { spec.count.clone() } else { None },
        ..spec.clone()
    };
    let (stag, ssent) = p.send(Who::Dut(0), server)?;
    p.wait_started(Who::Dut(0), stag, deadline, "the server")?;
    let mut phases = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut served = None;
    let mut reference = reference_of(case, spec);
    // The client's phases' span: from the capacity phase's start to the last phase's answer.
    let mut span: Option<(Instant, Instant)> = None;
    let run_phase = |p: &mut Parties, params: std::collections::BTreeMap<String, Value>, what: &str| {
        let c = WorkloadSpec {
            params,
            net: Some(role(Side::Client, &tester_addr, &dut)),
            scratch: None,
            count: None,
            ..spec.clone()
        };
        let (tag, _) = p.send(Who::Tester, c)?;
        let at = p.wait_started(Who::Tester, tag, deadline, what)?;
        let r = p.wait_result(Who::Tester, tag, deadline, what)?;
        Ok::<_, Fail>((r, at))
    };
    let mut spanned = |at: Instant, end: Instant| span = Some((span.map_or(at, |s| s.0), end));
    let client: Result<(), Fail> = (|| {
        let (r, at) = run_phase(p, with("capacity", &[]), "the client's capacity phase")?;
        let cap = r.out.samples.iter().find(|x| x.metric.ends_with("_capacity")).map(|x| x.value);
        let requests = r.out.extra["tally"]["requests"].as_u64().unwrap_or(0);
        served = Some((requests, at, r.at));
        spanned(at, r.at);
        if reference.is_none() {
            reference = cap
                .filter(|c| *c > 0.0)
                .map(|c| (c, "this trial's own capacity (no baseline measured before it)"));
        }
        samples.extend(r.out.samples);
        phases.push(r.out.extra);
        let Some((rate, _)) = reference else {
            return Err(Fail::Failed {
                reason: "the capacity phase served nothing: no offered load to derive".into(),
                dut_broken: Vec::new(),
                tester_broken: false,
            });
        };
        for l in loads.iter().filter(|_| !counted) {
            let offered = rate * *l as f64 / 100.0;
            let params = with("open", &[("loads", json!(l.to_string())), ("rate", json!(offered))]);
            let (r, at) = run_phase(p, params, &format!("the client at {l} % load"))?;
            spanned(at, r.at);
            samples.extend(r.out.samples);
            phases.push(r.out.extra);
        }
        Ok(())
    })();
    // The server stops whatever the client did; its own failure is the better reason.
    let stopped = p.stop_run(Who::Dut(0), stag, Duration::from_secs(20), "the server");
    let s = match (client, stopped) {
        (Ok(()), Ok(s)) => s,
        (Err(Fail::Interrupted), _) | (_, Err(Fail::Interrupted)) => return Err(Fail::Interrupted),
        (Ok(()), Err(e)) => return Err(e),
        (
            Err(Fail::Failed { reason: cr, tester_broken, .. }),
            Err(Fail::Failed { reason, dut_broken, .. }),
        ) => return Err(Fail::Failed { reason: format!("{reason}; {cr}"), dut_broken, tester_broken }),
        (Err(e), _) => return Err(e),
    };
    // One count of failed requests over every phase.
    let errors: f64 = samples.iter().filter(|x| x.metric.ends_with("_errors")).map(|x| x.value).sum();
    let errors_name = format!("{}_errors", case.kind);
    samples.retain(|x| !x.metric.ends_with("_errors"));
    samples.push(Sample { metric: errors_name, value: errors, unit: "req".into() });
    // The trial's time is its phases' (what `planned_ms` plans and a stall is judged by); the
    // server's set-up (a cluster's initdb and load) is its own figure, `server.ready_ms`.
    let host_ns = span.map_or(s.at.duration_since(ssent), |(a, b)| b.duration_since(a)).as_nanos() as u64;
    // The counts' span is the capacity phase's on the host's clock: the server counted from
    // ready to stop, a few ms more on each side in which it served nothing.
    let counts = s.out.extra.get("counts").filter(|c| c.is_object()).cloned().map(|mut c| {
        if let Some((_, from, to)) = served {
            c["server_window_ns"] = c["elapsed_ns"].clone();
            c["elapsed_ns"] = json!(to.duration_since(from).as_nanos() as u64);
        }
        c
    });
    let mut extra = json!({
        "server": s.out.extra.get("server").cloned().unwrap_or(Value::Null),
        "phases": phases,
        "reference": reference.map(|(r, from)| json!({"rate": r, "from": from})),
    });
    if let Some(c) = counts {
        extra["counts"] = c;
    }
    Ok(Body {
        host_ns,
        guest_ns: s.guest_ns,
        guest_cpu_ns: s.guest_cpu_ns,
        samples,
        extra: Some(extra),
        rtt: None,
        transfer: None,
        windows: Vec::new(),
        instance_samples: Vec::new(),
        served,
    })
}

/// An RFC 2544 procedure: many `frames` steps between the tester and the DUT, each with its own
/// deadline (a procedure at the RFC's 60 s trials runs for hours, beyond any one trial timeout).
fn rfc2544_trial(p: &mut Parties, spec: &WorkloadSpec, timeout: Duration) -> Result<Body, Fail> {
    let st = virtperf_workload::rfc2544::Settings::from_params(&virtperf_workload::Params(&spec.params))
        .map_err(|e| Fail::Failed { reason: e.to_string(), dut_broken: Vec::new(), tester_broken: false })?;
    let probe = p.duts.first().and_then(|d| d.inst.cpu.clone());
    let t0 = Instant::now();
    let (mut tag, mut host_ns, mut guest_ns, mut guest_cpu_ns) = (0u16, 0u64, 0u64, 0u64);
    let mut step = |sp: &virtperf_workload::rfc2544::search::StepSpec| -> Result<virtperf_workload::rfc2544::search::Measured, Fail> {
        if p.cancel.load(Ordering::Relaxed) {
            return Err(Fail::Interrupted);
        }
        if tag > 0 {
            std::thread::sleep(Duration::from_millis(st.settle_ms));
        }
        // A fresh tag per step: a late frame of the step before is stale, never counted.
        tag = tag.checked_add(1).unwrap_or(1);
        let params = virtperf_workload::rfc2544::frames::StepRequest {
            frame_size: st.frame_size,
            // Unpaced: the generator's own minimum gap (rate 0 asks it to send as fast as it can).
            rate_fps: if sp.unpaced { 0.0 } else { sp.rate_fps },
            duration_ms: sp.duration_ms,
            count: sp.count,
            reflect: st.direction == "reflect",
            learning_ms: st.learning_ms,
            drain_ms: st.drain_ms,
            rcvbuf: st.dut_rcvbuf.unwrap_or(0),
            tag,
        }
        .params();
        let fspec = WorkloadSpec { kind: Frames.kind().into(), params, net: None, scratch: None, count: None };
        let send_ms =
            if sp.count > 0 { (sp.count as f64 / sp.rate_fps.max(1.0) * 1e3) as u64 } else { sp.duration_ms };
        let deadline = Instant::now()
            + Duration::from_millis(send_ms.max(sp.duration_ms) + st.learning_ms + st.drain_ms)
            + timeout.min(Duration::from_secs(60));
        let c0 = probe.as_ref().and_then(CpuProbe::read_ns);
        let t = Instant::now();
        let b = network(p, &st.direction, &fspec, deadline)?;
        let wall = t.elapsed();
        let c1 = probe.as_ref().and_then(CpuProbe::read_ns);
        // The steps' own spans on both clocks (not the waits between them), so they compare.
        host_ns += b.host_ns;
        guest_ns += b.guest_ns;
        guest_cpu_ns += b.guest_cpu_ns;
        let flow = b.extra.as_ref().map(|e| e["flows"][0].clone()).unwrap_or(Value::Null);
        let (server, client) = (&flow["server"], &flow["client"]);
        let k = virtperf_workload::rfc2544::frames::StepCounts::of(server, client);
        let metric = |m: &str| b.samples.iter().find(|x| x.metric == m).map(|x| x.value);
        Ok(virtperf_workload::rfc2544::search::Measured {
            sent: k.sent,
            received: k.received,
            sent_fps: client["achieved_fps"].as_f64().unwrap_or(0.0),
            gen_limited: k.gen_limited,
            reordered: k.reordered,
            duplicates: k.duplicates,
            lost_at: k.lost_at,
            // Direction `out`: the receiver is the tester's; what its socket dropped is its loss.
            tester_drops: if st.direction == "out" { k.receiver_drops.unwrap_or(0) } else { 0 },
            // Direction `in`: the receiver is the DUT's; its socket's drops are
            // the DUT's own loss (its queue full), not the path's.
            dut_drops: if st.direction == "out" { 0 } else { k.receiver_drops.unwrap_or(0) },
            dut_rcvbuf: if st.direction == "out" { None } else { server["rcvbuf"].as_u64() },
            // The receiver saw the end marker this long after the last frame; the generator
            // waited the drain between sending them: the last frame came the difference late.
            tail_ms: server["fin_gap_ns"]
                .as_u64()
                .map(|gap| (st.drain_ms as f64 - gap as f64 / 1e6).max(0.0)),
            latency: client["latency"].clone(),
            // Over the whole step (learning and drain included): what the DUT spent on it.
            dut_cpu_pct: c0
                .zip(c1)
                .map(|(a, b)| b.saturating_sub(a) as f64 / wall.as_nanos().max(1) as f64 * 100.0),
            guest_cpu_pct: metric("guest_cpu_util"),
            wall_ms: wall.as_secs_f64() * 1e3,
        })
    };
    let (samples, mut detail) = virtperf_workload::rfc2544::search::run(&st, &mut step)?;
    detail.wall_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
    Ok(Body {
        host_ns,
        guest_ns,
        guest_cpu_ns,
        samples,
        extra: Some(json!({ "rfc2544": detail })),
        rtt: None,
        transfer: None,
        windows: Vec::new(),
        instance_samples: Vec::new(),
        served: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_calibration_gives_way_to_the_floor_and_only_then() {
        let ms = |x: f64| Duration::from_secs_f64(x / 1e3);
        // UML's pde: 7.6 ms span, 7.4 ms of its own, a 9.2 ms calibration, 0.2 ms floor.
        assert_eq!(go_subtrahend(ms(7.6), 7_400_000, ms(9.2), ms(0.2)), ms(0.2));
        // A TCG guest's memcpy: its go path slower than its fastest, as usual: kept.
        assert_eq!(go_subtrahend(ms(221.7), 217_800_000, ms(2.0), ms(0.6)), ms(2.0));
        // A trial slower on the host than its guest says keeps its calibration too.
        assert_eq!(go_subtrahend(ms(30.0), 10_000_000, ms(1.0), ms(0.5)), ms(1.0));
        // Never more than the calibration itself.
        assert_eq!(go_subtrahend(ms(1.0), 5_000_000, ms(0.3), ms(0.4)), ms(0.3));
    }

    #[test]
    fn a_calibration_that_met_a_stall_is_not_the_one_kept() {
        let us = Duration::from_micros;
        // Steady at once: kept.
        assert_eq!(steadiest(&[(us(210), us(30))]), (us(210), us(30)));
        // A stall in the first (9.6 ms ± 5.2 ms), the second steady: the second.
        assert_eq!(steadiest(&[(us(9558), us(5187)), (us(230), us(25))]), (us(230), us(25)));
        // None steady: the smallest median, which the stall lengthened least.
        assert_eq!(
            steadiest(&[(us(9558), us(5187)), (us(2456), us(9472)), (us(4000), us(3000))]),
            (us(2456), us(9472))
        );
        assert_eq!(steadiest(&[]), (Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn directions_make_flows() {
        // Every instance's ports are among those a container's network helper forwards.
        let last = crate::experiment::MAX_INSTANCES as usize - 1;
        for d in ["out", "in", "both", "reflect"] {
            for f in flows(d, 0).iter().chain(&flows(d, last)) {
                assert!(crate::lab::FLOW_PORTS.contains(&f.port), "{d}: {}", f.port);
            }
        }
        assert_eq!(flows("in", last)[0].port, *crate::lab::FLOW_PORTS.end());
        let f = flows("out", 0);
        assert_eq!((f.len(), f[0].dut_client, f[0].suffix, f[0].port), (1, true, "", BASE_PORT));
        let f = flows("in", 0);
        assert_eq!((f.len(), f[0].dut_client), (1, false));
        let f = flows("both", 0);
        assert_eq!(f.len(), 2);
        assert_ne!(f[0].port, f[1].port, "two flows at once need two ports");
        assert_eq!((f[0].suffix, f[1].suffix), ("_out", "_in"));
        // Instance 3's flows have ports of their own.
        let g = flows("both", 3);
        assert!(g.iter().all(|x| f.iter().all(|y| x.port != y.port)));
    }

    #[test]
    fn n_instances_aggregate_sums_throughputs_averages_times_and_rates_fairness() {
        let s = |m: &str, v: f64, u: &str| Sample { metric: m.into(), value: v, unit: u.into() };
        // Seed 000, 4 VMs loaded: 60 + 50 + 60 + 60 Mbit/s.
        let mut per: Vec<Vec<Sample>> = [0.060, 0.050, 0.060, 0.060]
            .iter()
            .map(|&g| vec![s("tcp_goodput", g, "Gbit/s"), s("tcp_rr_latency", g * 1000.0, "us")])
            .collect();
        // No series to add over one window, no histogram to pool: each instance's own figures.
        let none = vec![Detail::default(); 4];
        let (a, windows) = aggregate(&mut per, &none, None, &virtperf_workload::Params(&Default::default()));
        assert!(windows.is_empty());
        let get = |m: &str| a.iter().find(|x| x.metric == m).map(|x| x.value).unwrap();
        assert!((get("tcp_goodput") - 0.230).abs() < 1e-12, "sum of throughputs");
        assert!((get("tcp_rr_latency") - 57.5).abs() < 1e-9, "mean of the others");
        assert!((get("tcp_goodput_jain") - 0.99436).abs() < 1e-5);
        assert!((get("tcp_goodput_share_min") - 0.050 / 0.230 * 100.0).abs() < 1e-9);
        assert!((get("tcp_goodput_share_max") - 0.060 / 0.230 * 100.0).abs() < 1e-9);
        assert!(a.iter().all(|x| x.metric != "tcp_rr_latency_jain"), "no fairness of a time");
        let spec = WorkloadSpec {
            kind: "noop".into(),
            params: Default::default(),
            net: None,
            scratch: None,
            count: None,
        };
        let (agg, each, _) = combine(per, &none, &spec, 1.5);
        assert_eq!(each.len(), 8);
        assert!(agg.iter().any(|x| x.metric == virtperf_record::store::START_SKEW && x.value == 1.5));
        let (one, none, _) = combine(vec![vec![s("cpu_rate", 1.0, "Mops/s")]], &none[..1], &spec, 0.0);
        assert_eq!((one.len(), none.len()), (1, 0), "one instance keeps its own samples");
    }

    #[test]
    fn cpu_per_gbit_is_cpu_over_the_transfer_window_per_byte_received() {
        // 1 CPU-second per second from t = 0; the trial's setup before 100 ms and the teardown
        // after 1100 ms must not count.
        let series: Vec<(&str, f64, u64)> =
            (0..=24).map(|i| ("dut", i as f64 * 50.0, i as u64 * 50_000_000)).collect();
        // 1 Gbit received between 100 and 1100 ms: 1 CPU-s over that second → 1 CPU-s/Gbit.
        let c = cpu_per_gbit(&series, 125_000_000, (100.0, 1100.0)).unwrap();
        assert!((c - 1.0).abs() < 1e-9, "{c}");
        // Interpolated between samples, clamped outside the series.
        assert_eq!(cpu_at(&series, "dut", 75.0), Some(75e6));
        assert_eq!(cpu_at(&series, "dut", 5000.0), Some(1200e6));
        assert_eq!(cpu_at(&series, "tester", 5.0), None);
        assert_eq!(cpu_per_gbit(&series, 0, (0.0, 100.0)), None);
    }

    #[test]
    fn cpu_sampler_runs_at_its_rate() {
        let stop = AtomicBool::new(false);
        let probes = vec![("dut", vec![CpuProbe::Proc(std::process::id())], 0)];
        let t0 = Instant::now();
        let series = std::thread::scope(|s| {
            let h = s.spawn(|| sample_cpu(&probes, t0, &stop));
            std::thread::sleep(Duration::from_millis(520));
            stop.store(true, Ordering::Relaxed);
            h.join().unwrap()
        });
        // 20 Hz over ~0.5 s: about 11 samples; the machine may be slow, never much fewer.
        assert!((8..=14).contains(&series.len()), "{} samples", series.len());
        assert!(series.windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
