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
use virtperf_workload::Output;

use crate::env::{CallError, CpuProbe, Instance};
use crate::experiment::{Case, LoadOn};
use crate::store::TrialOutcome;

/// Host CPU samples per second during a trial (seed 000 plotted CPU over time; ≥ 10 Hz).
pub const CPU_SAMPLE_HZ: u64 = 20;
/// First port of a trial's flows (iperf3's default); flow `i` uses BASE_PORT + i.
const BASE_PORT: u16 = 5201;

/// Why a trial did not produce a result.
#[derive(Debug)]
pub enum Fail {
    /// Ctrl-C / SIGTERM: the trial stays pending.
    Interrupted,
    /// The trial failed; `dut_broken`/`tester_broken` say whose agent must be relaunched.
    Failed { reason: String, dut_broken: bool, tester_broken: bool },
}

/// The environment instance under test and its lab address (None outside a lab).
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
    Dut,
    Tester,
}

fn fail(who: Who, what: &str, e: CallError) -> Fail {
    match e {
        CallError::Interrupted => Fail::Interrupted,
        // The agent answered: it is still healthy.
        CallError::Agent { .. } => {
            Fail::Failed { reason: format!("{what}: {e}"), dut_broken: false, tester_broken: false }
        }
        other => Fail::Failed {
            reason: format!("{what}: {other}"),
            dut_broken: who == Who::Dut,
            tester_broken: who == Who::Tester,
        },
    }
}

struct Parties<'a, 'b> {
    dut: &'a mut Dut<'b>,
    tester: Option<&'a mut Tester<'b>>,
    /// Requests in flight, to stop when the trial fails.
    in_flight: Vec<(Who, u64)>,
}

impl Parties<'_, '_> {
    fn inst(&mut self, who: Who) -> Result<&mut Instance, Fail> {
        match who {
            Who::Dut => Ok(self.dut.inst),
            Who::Tester => self.tester.as_mut().map(|t| &mut *t.inst).ok_or_else(|| Fail::Failed {
                reason: "this trial needs the lab's tester, which is not running".into(),
                dut_broken: false,
                tester_broken: true,
            }),
        }
    }

    fn send(&mut self, who: Who, spec: WorkloadSpec) -> Result<(u64, Instant), Fail> {
        let sent = Instant::now();
        let tag =
            self.inst(who)?.conn.send(Request::Run { workload: spec }).map_err(|e| fail(who, "send", e))?;
        self.in_flight.push((who, tag));
        Ok((tag, sent))
    }

    fn wait(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<(Reply, Instant), Fail> {
        let r = self.inst(who)?.conn.wait(tag, deadline, &crate::run::CANCEL).map_err(|e| fail(who, what, e));
        if !matches!(r, Ok((Reply::Started, _))) {
            self.in_flight.retain(|x| *x != (who, tag));
        }
        r
    }

    fn wait_started(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<Instant, Fail> {
        match self.wait(who, tag, deadline, what)? {
            (Reply::Started, at) => Ok(at),
            (other, _) => Err(Fail::Failed {
                reason: format!("{what}: expected `started`, got {}", brief(&other)),
                dut_broken: who == Who::Dut,
                tester_broken: who == Who::Tester,
            }),
        }
    }

    fn wait_result(&mut self, who: Who, tag: u64, deadline: Instant, what: &str) -> Result<RunResult, Fail> {
        match self.wait(who, tag, deadline, what)? {
            (Reply::Result { samples, guest_elapsed_ns, guest_cpu, extra, guest_system }, at) => {
                Ok(RunResult {
                    out: Output { samples, extra },
                    guest_system,
                    guest_ns: guest_elapsed_ns,
                    guest_cpu_ns: guest_cpu.total_ns(),
                    at,
                })
            }
            (other, _) => Err(Fail::Failed {
                reason: format!("{what}: expected `result`, got {}", brief(&other)),
                dut_broken: who == Who::Dut,
                tester_broken: who == Who::Tester,
            }),
        }
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

    /// Best effort: asks every run still in flight to stop and forgets it.
    fn abandon(&mut self) {
        let never = AtomicBool::new(false);
        for (who, tag) in std::mem::take(&mut self.in_flight) {
            if let Ok(inst) = self.inst(who) {
                let _ = inst.conn.call(Request::Stop { target: tag }, Duration::from_secs(2), &never);
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
    at: Instant,
}

/// One direction of a network trial.
struct Flow {
    suffix: &'static str,
    direction: &'static str,
    client: Who,
    port: u16,
}

fn flows(direction: &str) -> Vec<Flow> {
    let out = |suffix| Flow { suffix, direction: "out", client: Who::Dut, port: BASE_PORT };
    let inn = |suffix| Flow { suffix, direction: "in", client: Who::Tester, port: BASE_PORT + 1 };
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
    probes: &[(&'static str, CpuProbe, u64)],
    t0: Instant,
    stop: &AtomicBool,
) -> Vec<(&'static str, f64, u64)> {
    let mut series = Vec::new();
    let period = Duration::from_millis(1000 / CPU_SAMPLE_HZ);
    let mut next = t0;
    loop {
        let t = t0.elapsed().as_secs_f64() * 1e3;
        for (role, p, base) in probes {
            if let Some(v) = p.read_ns() {
                series.push((*role, t, v.saturating_sub(*base)));
            }
        }
        if stop.load(Ordering::Relaxed) {
            return series;
        }
        next += period;
        // Short sleeps so the end of the trial is seen promptly.
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5).min(next.saturating_duration_since(Instant::now())));
        }
    }
}

/// Runs one trial of `case` (whose resolved spec is `spec`).
pub fn run<'b>(
    dut: &mut Dut<'b>,
    tester: Option<&mut Tester<'b>>,
    case: &Case,
    spec: &WorkloadSpec,
    timeout: Duration,
) -> Result<TrialOutcome, Fail> {
    let dut_probe = dut.inst.cpu.clone();
    let tester_probe = tester.as_ref().and_then(|t| t.inst.cpu.clone());
    let cpu0 = dut_probe.as_ref().and_then(CpuProbe::read_ns);
    let tcpu0 = tester_probe.as_ref().and_then(CpuProbe::read_ns);
    let mut probes = Vec::new();
    if let (Some(p), Some(b)) = (&dut_probe, cpu0) {
        probes.push(("dut", p.clone(), b));
    }
    if let (Some(p), Some(b)) = (&tester_probe, tcpu0) {
        probes.push(("tester", p.clone(), b));
    }
    let mut parties = Parties { dut, tester, in_flight: Vec::new() };
    let stop_sampling = AtomicBool::new(false);
    let t0 = Instant::now();
    let (body, series) = std::thread::scope(|s| {
        let sampler = s.spawn(|| sample_cpu(&probes, t0, &stop_sampling));
        let body = body(&mut parties, case, spec, timeout);
        stop_sampling.store(true, Ordering::Relaxed);
        (body, sampler.join().unwrap_or_default())
    });
    let body = match body {
        Ok(b) => b,
        Err(Fail::Failed { reason, dut_broken, tester_broken }) => {
            parties.abandon();
            // Which side hung is not known from a deadline alone: whoever does not answer a
            // ping now is relaunched (a stopped tester, a wedged guest), whoever does is kept.
            let (dut_dead, tester_dead) = (parties.unresponsive(Who::Dut), parties.unresponsive(Who::Tester));
            let mut reason = reason;
            if tester_dead && !tester_broken {
                reason += "; the other side (tester or peer) does not answer";
            }
            return Err(Fail::Failed {
                reason,
                dut_broken: dut_broken || dut_dead,
                tester_broken: tester_broken || tester_dead,
            });
        }
        Err(e) => {
            parties.abandon();
            return Err(e);
        }
    };
    let cpu1 = dut_probe.as_ref().and_then(CpuProbe::read_ns);
    let tcpu1 = tester_probe.as_ref().and_then(CpuProbe::read_ns);
    let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    Ok(TrialOutcome {
        status: "ok",
        reason: None,
        host_ns: Some(body.host_ns),
        guest_ns: Some(body.guest_ns),
        host_cpu_ns: delta(cpu0, cpu1),
        guest_cpu_ns: Some(body.guest_cpu_ns),
        samples: body.samples,
        tester_cpu_ns: delta(tcpu0, tcpu1),
        extra: body.extra,
        cpu_series: series,
    })
}

struct Body {
    host_ns: u64,
    guest_ns: u64,
    guest_cpu_ns: u64,
    samples: Vec<Sample>,
    extra: Option<Value>,
}

fn body(p: &mut Parties, case: &Case, spec: &WorkloadSpec, timeout: Duration) -> Result<Body, Fail> {
    let deadline = Instant::now() + timeout;
    // Background load first, so that the work runs on an already loaded CPU.
    let load = match case.load {
        Some(l) => {
            let who = if l.on == LoadOn::Tester { Who::Tester } else { Who::Dut };
            let params = [("percent", json!(l.percent)), ("cpus", json!(l.cpus))]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let (tag, _) = p.send(who, WorkloadSpec { kind: "load".into(), params, net: None })?;
            p.wait_started(who, tag, deadline, "background load")?;
            Some((who, tag))
        }
        None => None,
    };
    let procedure = virtperf_workload::find(&case.kind).is_some_and(|w| w.procedure());
    let mut b = if procedure {
        rfc2544_trial(p, spec, timeout)?
    } else if case.network {
        let direction = case.params.get("direction").and_then(Value::as_str).unwrap_or("out");
        network(p, direction, spec, deadline)?
    } else {
        single(p, spec, deadline)?
    };
    if let Some((who, tag)) = load {
        let never = AtomicBool::new(false);
        p.inst(who)?
            .conn
            .call(Request::Stop { target: tag }, Duration::from_secs(5), &never)
            .map_err(|e| fail(who, "stopping the background load", e))?;
        let r = p.wait_result(who, tag, Instant::now() + Duration::from_secs(10), "background load")?;
        b.samples.extend(r.out.samples.iter().cloned());
        let extra = b.extra.get_or_insert_with(|| json!({}));
        extra["load"] = json!({"on": if who == Who::Dut { "dut" } else { "tester" }, "result": r.out.extra});
    }
    Ok(b)
}

/// A workload on the DUT alone.
fn single(p: &mut Parties, spec: &WorkloadSpec, deadline: Instant) -> Result<Body, Fail> {
    let (tag, sent) = p.send(Who::Dut, spec.clone())?;
    let started = p.wait_started(Who::Dut, tag, deadline, "the workload")?;
    let r = p.wait_result(Who::Dut, tag, started.max(deadline), "the workload")?;
    let rtt = p.dut.inst.rtt;
    Ok(Body {
        // Request sent → result received, less the instance's idle round trip. Not `started` →
        // `result`: the agent saturates a CPU right after writing `started`, and the scheduler
        // may keep the host's reader waiting on that CPU until the work ends.
        host_ns: r.at.duration_since(sent).saturating_sub(rtt).as_nanos() as u64,
        guest_ns: r.guest_ns,
        guest_cpu_ns: r.guest_cpu_ns,
        samples: r.out.samples,
        extra: (!r.out.extra.is_null()).then_some(r.out.extra),
    })
}

/// A network workload between the DUT and the tester.
fn network(p: &mut Parties, direction: &str, spec: &WorkloadSpec, deadline: Instant) -> Result<Body, Fail> {
    let dut_addr = p.dut.addr.clone().ok_or_else(|| Fail::Failed {
        reason: "a network workload needs the lab, which was not built".into(),
        dut_broken: false,
        tester_broken: false,
    })?;
    let tester_addr = match &p.tester {
        Some(t) => t.addr.clone(),
        None => {
            return Err(Fail::Failed {
                reason: "the lab's tester is not running".into(),
                dut_broken: false,
                tester_broken: true,
            })
        }
    };
    let flows = flows(direction);
    let addr_of = |w: Who| if w == Who::Dut { dut_addr.clone() } else { tester_addr.clone() };
    let other = |w: Who| if w == Who::Dut { Who::Tester } else { Who::Dut };
    let role = |f: &Flow, side: Side, i: usize| {
        let me = if side == Side::Client { f.client } else { other(f.client) };
        WorkloadSpec {
            net: Some(NetRole {
                side,
                bind: addr_of(me),
                peer: addr_of(other(me)),
                port: f.port,
                flow: i as u32 + 1,
            }),
            ..spec.clone()
        }
    };
    // Servers listen before any client starts.
    let mut servers = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        let who = other(f.client);
        let (tag, sent) = p.send(who, role(f, Side::Server, i))?;
        p.wait_started(who, tag, deadline, &format!("the {} server", f.direction))?;
        servers.push((who, tag, sent));
    }
    let mut clients = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        let (tag, sent) = p.send(f.client, role(f, Side::Client, i))?;
        p.wait_started(f.client, tag, deadline, &format!("the {} client", f.direction))?;
        clients.push((f.client, tag, sent));
    }
    let w = virtperf_workload::find(&spec.kind).ok_or_else(|| Fail::Failed {
        reason: format!("unknown workload `{}`", spec.kind),
        dut_broken: false,
        tester_broken: false,
    })?;
    let mut samples = Vec::new();
    let mut flows_extra = Vec::new();
    let (mut host_ns, mut guest_ns, mut guest_cpu_ns) = (0u64, 0u64, 0u64);
    let rtt = p.dut.inst.rtt;
    for (i, f) in flows.iter().enumerate() {
        let (cw, ctag, csent) = clients[i];
        let (sw, stag, ssent) = servers[i];
        let c = p.wait_result(cw, ctag, deadline, &format!("the {} client", f.direction))?;
        let s = p.wait_result(sw, stag, deadline, &format!("the {} server", f.direction))?;
        // The DUT's side of the flow is what the host clock times and the guest reports.
        let (dut_r, dut_sent) = if cw == Who::Dut { (&c, csent) } else { (&s, ssent) };
        host_ns = host_ns.max(dut_r.at.duration_since(dut_sent).saturating_sub(rtt).as_nanos() as u64);
        guest_ns = guest_ns.max(dut_r.guest_ns);
        guest_cpu_ns += dut_r.guest_cpu_ns;
        if let Some(u) = dut_r.guest_system.and_then(|g| g.util_pct()) {
            // What sar inside the environment shows: every CPU it sees, all processes, softirq included.
            samples.push(Sample {
                metric: format!("guest_cpu_util{}", f.suffix),
                value: u,
                unit: "%".into(),
            });
        }
        for mut smp in w.merge(&s.out, &c.out) {
            smp.metric.push_str(f.suffix);
            samples.push(smp);
        }
        flows_extra.push(json!({
            "direction": f.direction,
            "dut": if cw == Who::Dut { "client" } else { "server" },
            "server": s.out.extra,
            "client": c.out.extra,
        }));
    }
    Ok(Body { host_ns, guest_ns, guest_cpu_ns, samples, extra: Some(json!({ "flows": flows_extra })) })
}

/// An RFC 2544 procedure: many `frames` steps between the tester and the DUT, each with its own
/// deadline (a procedure at the RFC's 60 s trials runs for hours, beyond any one trial timeout).
fn rfc2544_trial(p: &mut Parties, spec: &WorkloadSpec, timeout: Duration) -> Result<Body, Fail> {
    let st =
        virtperf_workload::rfc2544::Settings::from_params(&virtperf_workload::Params(&spec.params)).map_err(
            |(k, m)| Fail::Failed { reason: format!("{k}: {m}"), dut_broken: false, tester_broken: false },
        )?;
    let probe = p.dut.inst.cpu.clone();
    let t0 = Instant::now();
    let (mut tag, mut host_ns, mut guest_ns, mut guest_cpu_ns) = (0u16, 0u64, 0u64, 0u64);
    let mut step = |sp: &crate::rfc2544::StepSpec| -> Result<crate::rfc2544::Measured, Fail> {
        if crate::run::CANCEL.load(Ordering::Relaxed) {
            return Err(Fail::Interrupted);
        }
        if tag > 0 {
            std::thread::sleep(Duration::from_millis(st.settle_ms));
        }
        // A fresh tag per step: a late frame of the step before is stale, never counted.
        tag = tag.checked_add(1).unwrap_or(1);
        let mode = if st.direction == "reflect" { "reflect" } else { "stream" };
        let params = [
            ("frame_size", json!(st.frame_size)),
            ("rate", json!(sp.rate_fps)),
            ("duration", json!(sp.duration_ms)),
            ("count", json!(sp.count)),
            ("mode", json!(mode)),
            ("latency", json!(true)),
            ("learning", json!(st.learning_ms)),
            ("drain", json!(st.drain_ms)),
            ("tag", json!(tag)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let fspec = WorkloadSpec { kind: "frames".into(), params, net: None };
        let send_ms =
            if sp.count > 0 { (sp.count as f64 / sp.rate_fps * 1e3) as u64 } else { sp.duration_ms };
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
        let k = virtperf_workload::frames::StepCounts::of(server, client);
        let metric = |m: &str| b.samples.iter().find(|x| x.metric == m).map(|x| x.value);
        Ok(crate::rfc2544::Measured {
            sent: k.sent,
            received: k.received,
            sent_fps: client["achieved_fps"].as_f64().unwrap_or(0.0),
            gen_limited: k.gen_limited,
            reordered: k.reordered,
            duplicates: k.duplicates,
            latency: client["latency"].clone(),
            // Over the whole step (learning and drain included): what the DUT spent on it.
            dut_cpu_pct: c0
                .zip(c1)
                .map(|(a, b)| b.saturating_sub(a) as f64 / wall.as_nanos().max(1) as f64 * 100.0),
            guest_cpu_pct: metric("guest_cpu_util"),
            wall_ms: wall.as_secs_f64() * 1e3,
        })
    };
    let (samples, mut detail) = crate::rfc2544::run(&st, &mut step)?;
    detail["wall_ms"] = json!(t0.elapsed().as_secs_f64() * 1e3);
    Ok(Body { host_ns, guest_ns, guest_cpu_ns, samples, extra: Some(json!({ "rfc2544": detail })) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_make_flows() {
        let f = flows("out");
        assert_eq!((f.len(), f[0].client, f[0].suffix), (1, Who::Dut, ""));
        let f = flows("in");
        assert_eq!((f.len(), f[0].client), (1, Who::Tester));
        let f = flows("both");
        assert_eq!(f.len(), 2);
        assert_ne!(f[0].port, f[1].port, "two flows at once need two ports");
        assert_eq!((f[0].suffix, f[1].suffix), ("_out", "_in"));
    }

    #[test]
    fn cpu_sampler_runs_at_its_rate() {
        let stop = AtomicBool::new(false);
        let probes = vec![("dut", CpuProbe::Proc(std::process::id()), 0)];
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
