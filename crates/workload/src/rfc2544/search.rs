//! RFC 2544 §26 procedures — throughput (NDR and PDR by binary search, confirmed by a full-length
//! trial), latency at the throughput rate, frame loss from 100 % down in 10 % steps, and
//! back-to-back bursts — run by the orchestrator as steps of the `frames` generator
//! (`virtperf-workload/src/frames.rs`). One virtperf trial is one procedure for one environment,
//! frame size and direction; every step of it is stored with the trial (`extra.steps`).
//!
//! The searches never trust a rate the generator did not reach: the first step offers the
//! theoretical maximum at `line_rate`; when the generator falls short, the highest rate searched
//! (`top`) is what it achieved, and a DUT that passes `top` is reported as generator-limited
//! (its throughput is at least that), never as having that throughput.

use crate::rfc2544::frames::{line_max_fps, LossAt, BATCH};
use crate::rfc2544::Settings;
use serde_json::Value;
use virtperf_proto::Sample;

/// One step asked of the generator.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpec {
    pub test: &'static str,
    /// Offered frames per second (always > 0: the procedure paces every step).
    pub rate_fps: f64,
    pub duration_ms: u64,
    /// Exactly this many frames (a back-to-back burst); 0 = for `duration_ms`.
    pub count: u64,
    /// Sent as fast as the generator can, its own minimum inter-frame gap, rather than paced at
    /// `rate_fps` (which is then what the step is expected to reach): back-to-back bursts where
    /// the generator cannot reach the line's rate.
    pub unpaced: bool,
}

impl StepSpec {
    /// A step paced at `rate_fps` for `duration_ms`.
    fn timed(test: &'static str, rate_fps: f64, duration_ms: u64) -> StepSpec {
        StepSpec { test, rate_fps, duration_ms, count: 0, unpaced: false }
    }
}

/// What one step measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    pub sent: u64,
    pub received: u64,
    pub sent_fps: f64,
    pub gen_limited: bool,
    pub reordered: u64,
    pub duplicates: u64,
    /// The generator's latency summary (round trips of tagged frames).
    pub latency: Value,
    /// Host CPU of the DUT's processes over the step, % of one CPU.
    pub dut_cpu_pct: Option<f64>,
    /// CPU busy inside the DUT over the step (what sar shows).
    pub guest_cpu_pct: Option<f64>,
    pub wall_ms: f64,
    /// Which frames were lost, where the receiver knew how many were sent.
    pub lost_at: Option<LossAt>,
    /// Frames the tester's own receiving socket dropped (direction `out`: the DUT sends to the
    /// tester): a loss of the tester's, not the DUT's.
    pub tester_drops: u64,
    /// Frames the DUT's receiving socket dropped (direction `in`): its queue was
    /// full — the receiver did not keep up or was descheduled — a loss of the DUT's, said apart
    /// from the path's.
    pub dut_drops: u64,
    /// The DUT's receiving socket's buffer as the kernel reports it (SO_RCVBUF, bytes of
    /// truesize): the queue that absorbs the DUT's receiver being descheduled (direction `in`).
    pub dut_rcvbuf: Option<u64>,
    /// How much later than the end marker the step's last frame arrived, ms (the drain it
    /// needed: the drain waited less the gap the receiver saw between the two); None: not seen.
    pub tail_ms: Option<f64>,
}

impl Measured {
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            100.0
        } else {
            self.lost() as f64 / self.sent as f64 * 100.0
        }
    }
    /// Passes at a loss tolerance: nothing lost beyond it, and the generator reached the rate.
    fn passes(&self, tolerance_pct: f64) -> bool {
        self.sent > 0 && !self.gen_limited && self.loss_pct() <= tolerance_pct
    }
    /// The loss was the tester's receiver's: its socket dropped at least half of what was lost.
    fn lost_at_the_tester(&self) -> bool {
        self.tester_drops > 0 && 2 * self.tester_drops >= self.lost()
    }
}

pub use virtperf_record::rfc2544::{
    BackToBack, BurstTrial, Detail, FrameLoss, Latency, LossPoint, Mlr, MlrGoal, NdrCpu, Step, Throughput,
    BROKEN_BURST, BROKEN_TRIES, MIN_TAGGED,
};

/// Runs a step; an error ends the procedure (and the trial) with its reason.
pub type StepFn<'a, E> = dyn FnMut(&StepSpec) -> Result<Measured, E> + 'a;

struct Log<'a, 'b, E> {
    run: &'a mut StepFn<'b, E>,
    steps: Vec<Step>,
}

impl<E> Log<'_, '_, E> {
    fn step(&mut self, phase: &str, spec: StepSpec) -> Result<Measured, E> {
        let m = (self.run)(&spec)?;
        let mut lat = m.latency.clone();
        if let Some(o) = lat.as_object_mut() {
            o.remove("histogram_us");
        }
        self.steps.push(Step {
            test: spec.test.into(),
            phase: phase.into(),
            offered_fps: spec.rate_fps,
            duration_ms: spec.duration_ms,
            count: spec.count,
            sent: m.sent,
            received: m.received,
            loss_pct: m.loss_pct(),
            sent_fps: m.sent_fps,
            gen_limited: m.gen_limited,
            reordered: m.reordered,
            duplicates: m.duplicates,
            latency: lat,
            dut_cpu_pct: m.dut_cpu_pct,
            guest_cpu_pct: m.guest_cpu_pct,
            wall_ms: m.wall_ms,
            failed_by: None,
            lost_at: m.lost_at.clone(),
            tester_drops: m.tester_drops,
            dut_drops: m.dut_drops,
            tail_ms: m.tail_ms,
        });
        Ok(m)
    }

    /// A step judged at a loss tolerance. One the generator fell short on says nothing of the
    /// DUT: it is tried once more (`PHASE-retry`); a step that still fails records whether the
    /// generator or the DUT's loss failed it.
    fn judged(&mut self, phase: &str, spec: StepSpec, tolerance: f64) -> Result<Measured, E> {
        // The generator's shortfall decides a step only where the frames it did send passed: one
        // whose sent frames alone lost beyond the tolerance failed by loss, short or not, and
        // trying it again cannot change that.
        let short = |m: &Measured| m.gen_limited && m.loss_pct() <= tolerance;
        let by = |m: &Measured| {
            if short(m) {
                "generator"
            } else if m.lost_at_the_tester() {
                "tester"
            } else {
                "loss"
            }
        };
        let mut m = self.step(phase, spec.clone())?;
        // The generator fell short, or the tester's receiver dropped what was lost: nothing is
        // said of the DUT; once more.
        if short(&m) || (!m.passes(tolerance) && m.lost_at_the_tester()) {
            if let Some(last) = self.steps.last_mut() {
                last.failed_by = Some(by(&m).into());
            }
            m = self.step(&format!("{phase}-retry"), spec)?;
        }
        if !m.passes(tolerance) {
            if let Some(last) = self.steps.last_mut() {
                last.failed_by = Some(by(&m).into());
            }
        }
        Ok(m)
    }
}

fn s(metric: &str, value: f64, unit: &str) -> Sample {
    Sample { metric: metric.into(), value, unit: unit.into() }
}

/// Binary search between a passing `lo` and a failing `hi` down to `res` frames/s; returns the
/// highest rate that passed and the lowest that failed.
fn search<E>(
    log: &mut Log<E>,
    phase: &str,
    mut lo: f64,
    mut hi: f64,
    res: f64,
    ms: u64,
    tolerance: f64,
) -> Result<(f64, f64), E> {
    while hi - lo > res {
        let mid = (lo + hi) / 2.0;
        let m = log.judged(phase, StepSpec::timed("throughput", mid, ms), tolerance)?;
        if m.passes(tolerance) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, hi))
}

/// Where the PDR search starts, from the throughput steps so far: `hi` is the lowest offered rate
/// above the NDR that lost more than `tolerance` % (the generator reaching it), else `top`; `lo`
/// the highest rate below `hi` that passed the tolerance, at least the NDR. (Seeding `hi` with the
/// lowest rate that failed at *zero* loss capped the PDR about one resolution step above the NDR.)
fn pdr_bracket(steps: &[Step], ndr: f64, top: f64, tolerance: f64) -> (f64, f64) {
    let measured = || {
        steps.iter().filter(|x| x.test == "throughput" && !x.gen_limited).map(|x| (x.offered_fps, x.loss_pct))
    };
    let hi = measured().filter(|(r, l)| *l > tolerance && *r > ndr).map(|(r, _)| r).fold(top, f64::min);
    let lo = measured().filter(|(r, l)| *l <= tolerance && *r < hi).map(|(r, _)| r).fold(ndr, f64::max);
    (lo, hi.max(lo))
}

/// Full-length trials a confirmation may spend halving the rate, after its steps of `res`.
const CONFIRM_HALVINGS: usize = 8;

/// A searched rate confirmed by a full-length trial: stepping down by `res` at most 3 times, then
/// halving (at most [`CONFIRM_HALVINGS`] times: to 1/256 of the last step), so that what is returned is a
/// rate that passed a full-length trial — (rate, true, its trial) — or, when none did,
/// (0, false, the last trial): not determined. A searched rate that lost frames at full length is
/// never reported as a throughput.
fn confirm<E>(
    log: &mut Log<E>,
    phase: &str,
    rate: f64,
    res: f64,
    st: &Settings,
    tolerance: f64,
) -> Result<(f64, bool, Option<Measured>), E> {
    let (mut r, mut last) = (rate, None);
    for i in 0..4 + CONFIRM_HALVINGS {
        if r < 1.0 {
            break;
        }
        let spec = StepSpec::timed("throughput", r, st.trial_ms);
        let m = log.judged(phase, spec, tolerance)?;
        if m.passes(tolerance) {
            return Ok((r, true, Some(m)));
        }
        last = Some(m);
        r = if i < 3 { r - res } else { r / 2.0 };
    }
    // Not determined: no full-length trial passed; what was measured last stays in the steps.
    Ok((0.0, false, last))
}

/// Runs the tests of `st` with `run` doing each step; returns the trial's samples and its detail.
pub fn run<E>(st: &Settings, run: &mut StepFn<E>) -> Result<(Vec<Sample>, Detail), E> {
    let line_max = line_max_fps(st.line_bps, st.frame_size);
    let mut log = Log { run, steps: Vec::new() };
    let mut detail = Detail {
        frame_size: st.frame_size,
        direction: st.direction.clone(),
        quick: st.quick,
        line_rate_bps: st.line_bps,
        line_max_fps: line_max,
        trial_ms: st.trial_ms,
        search_ms: st.search_ms,
        resolution_pct: st.resolution_pct,
        loss_tolerance_pct: st.loss_tolerance_pct,
        tests: st.tests.clone(),
        waits_ms: Some([st.learning_ms, st.settle_ms, st.drain_ms]),
        b2b_trials: Some(st.b2b_trials),
        ..Default::default()
    };

    // The highest rate searched: the line's maximum, or what the generator reaches when it is less.
    let probe = log.step("probe", StepSpec::timed("throughput", line_max, st.search_ms))?;
    detail.dut_rcvbuf = probe.dut_rcvbuf;
    detail.dut_rcvbuf_asked = st.dut_rcvbuf;
    let top = if probe.gen_limited { probe.sent_fps * 0.98 } else { line_max };
    let res = (top * st.resolution_pct / 100.0).max(1.0);
    detail.generator_max_fps = probe.sent_fps;
    detail.top_fps = top;
    detail.generator_limited_probe = probe.gen_limited;

    let mut t = Trial { st, log, out: Vec::new(), detail, line_max, top, res, probe };
    let ndr = if st.runs("throughput") || (st.runs("latency") && !st.runs("mlrsearch")) {
        throughput(&mut t)?
    } else {
        0.0
    };
    let mlr_ndr = if st.runs("mlrsearch") { mlrsearch(&mut t)? } else { None };
    latency(&mut t, ndr, mlr_ndr)?;
    if st.runs("frame_loss") {
        frame_loss(&mut t)?;
    }
    if st.runs("back_to_back") {
        back_to_back(&mut t)?;
    }
    t.detail.steps = t.log.steps;
    Ok((t.out, t.detail))
}

/// What the procedures of one trial share: the settings, the step log, the samples and detail so
/// far, and the rates the probe fixed (the line's maximum, the highest rate searched, the
/// resolution).
struct Trial<'x, 'a, 'b, E> {
    st: &'x Settings,
    log: Log<'a, 'b, E>,
    out: Vec<Sample>,
    detail: Detail,
    line_max: f64,
    top: f64,
    res: f64,
    /// The first step: at the line's maximum, what the generator reached.
    probe: Measured,
}

/// Throughput: NDR then PDR (§26.1).
/// Returns the NDR (0 when not determined).
fn throughput<E>(t: &mut Trial<E>) -> Result<f64, E> {
    let (st, top, res, line_max, probe) = (t.st, t.top, t.res, t.line_max, t.probe.clone());
    let Trial { log, out, detail, .. } = t;
    let l = st.frame_size as f64;
    let mbps = |fps: f64| fps * l * 8.0 / 1e6;
    let at_top = if probe.gen_limited {
        log.step("top", StepSpec::timed("throughput", top, st.search_ms))?
    } else {
        probe.clone()
    };
    let (ndr_s, _) = if at_top.passes(0.0) {
        (top, f64::INFINITY)
    } else {
        search(log, "ndr", 0.0, top, res, st.search_ms, 0.0)?
    };
    let (ndr, n_ok, n_m) = confirm(log, "ndr-confirm", ndr_s, res, st, 0.0)?;
    let ndr_trial = n_m.filter(|_| n_ok);
    // PDR ≥ NDR, searched on its own tolerance: between the highest rate that passed it and
    // the lowest above that which failed it (up to `top`), from what the NDR search measured.
    let (pdr_lo, pdr_hi) = pdr_bracket(&log.steps, ndr, top, st.loss_tolerance_pct);
    let pdr_s = if at_top.passes(st.loss_tolerance_pct) {
        top
    } else {
        search(log, "pdr", pdr_lo, pdr_hi, res, st.search_ms, st.loss_tolerance_pct)?.0
    };
    let (pdr, p_ok) = if pdr_s > ndr + res / 2.0 {
        let (p, ok, _) = confirm(log, "pdr-confirm", pdr_s, res, st, st.loss_tolerance_pct)?;
        // A PDR that no full-length trial confirmed falls back on a confirmed NDR.
        if ok {
            (p.max(ndr), true)
        } else {
            (ndr, n_ok)
        }
    } else {
        (ndr, n_ok)
    };
    // The generator bounds the figure where it could not reach the top, or where the lowest rate
    // above the NDR that failed, failed by the generator (twice: see `Log::judged`), not by loss.
    let bound_by = log
        .steps
        .iter()
        .filter(|x| x.failed_by.is_some() && x.offered_fps > ndr)
        .min_by(|a, b| a.offered_fps.total_cmp(&b.offered_fps))
        .and_then(|x| x.failed_by.clone());
    let gen_bound = bound_by.as_deref() == Some("generator");
    // Or by the tester's receiver (direction `out`): its socket dropped what was lost there.
    let tester_bound = n_ok && bound_by.as_deref() == Some("tester");
    let gen_limited = n_ok && ((probe.gen_limited && ndr >= top - res) || gen_bound);
    // Only rates that passed a full-length trial are throughputs: without one, the NDR (and
    // the PDR with it) is not determined and no figure is stored for it.
    if n_ok {
        out.push(s("rfc2544_ndr_fps", ndr, "fps"));
        out.push(s("rfc2544_ndr_mbps", mbps(ndr), "Mbit/s"));
        out.push(s("rfc2544_ndr_wire_mbps", ndr * (l + 20.0) * 8.0 / 1e6, "Mbit/s"));
        out.push(s("rfc2544_ndr_line_pct", ndr / line_max * 100.0, "%"));
    }
    if p_ok {
        out.push(s("rfc2544_pdr_fps", pdr, "fps"));
        out.push(s("rfc2544_pdr_mbps", mbps(pdr), "Mbit/s"));
    }
    out.push(s("rfc2544_gen_limited", if gen_limited { 1.0 } else { 0.0 }, "bool"));
    if let Some(m) = &ndr_trial {
        if let Some(c) = m.dut_cpu_pct {
            out.push(s("rfc2544_dut_cpu_pct", c, "% of a CPU"));
        }
        if let Some(c) = m.guest_cpu_pct {
            out.push(s("rfc2544_guest_cpu_pct", c, "%"));
        }
    }
    let lowest = log
        .steps
        .iter()
        .filter(|x| x.phase == "ndr-confirm")
        .map(|x| x.offered_fps)
        .fold(f64::INFINITY, f64::min);
    detail.throughput = Some(Throughput {
        ndr_fps: n_ok.then_some(ndr),
        ndr_confirmed: n_ok,
        pdr_fps: p_ok.then_some(pdr),
        pdr_confirmed: p_ok,
        not_determined: (!n_ok).then(|| {
            format!(
                "no full-length trial passed: frames lost at every rate confirmed, down to {lowest:.0} fps"
            )
        }),
        gen_limited,
        tester_bound,
        tester_drops: log.steps.iter().map(|x| x.tester_drops).sum(),
        ndr_mbps: mbps(ndr),
        pdr_mbps: mbps(pdr),
        ndr_cpu: ndr_trial
            .as_ref()
            .map(|m| NdrCpu { dut_host_pct: m.dut_cpu_pct, guest_pct: m.guest_cpu_pct }),
    });
    Ok(ndr)
}

/// RFC 9971 MLRsearch from the line's maximum down: every goal of `st.mlr_goals` from trials
/// they share, each a step of the generator judged like §26.1's (one the generator fell short on,
/// or whose loss the tester's receiver dropped, is tried once more). A trial's loss counts the
/// frames of the intended load that did not arrive, sent or not (as CSIT counts them): a load the
/// generator cannot offer is never a lower bound, so the search needs no probe of the generator —
/// §26.1's `top` is one step's reach, and it varied 99 k–376 k fps between repetitions here. A goal
/// whose relevant upper bound lost mostly frames never sent is the generator's limit. Returns the
/// NDR goal's relevant lower bound (the rate latency runs at without §26.1).
fn mlrsearch<E>(t: &mut Trial<E>) -> Result<Option<f64>, E> {
    use crate::rfc2544::mlrsearch;
    let (st, line_max) = (t.st, t.line_max);
    let Trial { log, out, detail, .. } = t;
    let min_load = (line_max / 1000.0).max(10.0).min(line_max);
    let t0 = std::time::Instant::now();
    let goals = st.mlr_goals;
    // Per trial: (load, share of the intended frames lost, share never sent).
    let mut seen: Vec<(f64, f64, f64)> = Vec::new();
    // Shared trials: §26.1's steps at their loads, each as MLRsearch would have counted it; a
    // step tried again (the generator fell short, or the tester dropped) counts by its retry,
    // as the search's own do. Only steps no longer than the goals' final trials: a longer one
    // (a confirmation) would weigh its one burst as several trials' in the duration sum.
    let mut prior = Vec::new();
    if st.mlr_share {
        let steps = &log.steps;
        let longest = goals.iter().map(|g| g.final_ms).min().unwrap_or(0);
        for (i, x) in steps.iter().enumerate() {
            let retried = steps.get(i + 1).is_some_and(|n| n.phase == format!("{}-retry", x.phase));
            if x.test != "throughput" || x.count > 0 || retried || x.duration_ms > longest {
                continue;
            }
            let (lost, unsent) =
                intended_loss(x.offered_fps, x.duration_ms, x.gen_limited, x.sent, x.received);
            seen.push((x.offered_fps, lost, unsent));
            prior.push(mlrsearch::Trial {
                load: x.offered_fps,
                duration_ms: x.duration_ms,
                loss_ratio: lost,
            });
        }
    }
    let (results, trials) = mlrsearch::search(
        &goals,
        line_max,
        min_load,
        st.mlr_max_trials as usize,
        &prior,
        &mut |load, ms| {
            // Tried again where the shortfall could decide a goal: the sent frames lost within
            // the most tolerant goal's ratio.
            let tolerance = goals.iter().map(|g| g.loss_ratio).fold(0.0, f64::max) * 100.0;
            let m = log.judged("mlr", StepSpec::timed("mlrsearch", load, ms), tolerance)?;
            let (lost, unsent) = intended_loss(load, ms, m.gen_limited, m.sent, m.received);
            seen.push((load, lost, unsent));
            Ok(lost)
        },
    )?;
    // The generator's limit: at the relevant upper bound, at least half of what its high-loss
    // trials lost was never sent.
    let gen_bound = |g: &mlrsearch::Goal, upper: Option<f64>| {
        let Some(u) = upper else { return false };
        let high: Vec<&(f64, f64, f64)> = seen.iter().filter(|x| x.0 == u && x.1 > g.loss_ratio).collect();
        let (lost, unsent) = high.iter().fold((0.0, 0.0), |a, x| (a.0 + x.1, a.1 + x.2));
        !high.is_empty() && 2.0 * unsent >= lost
    };
    let l = st.frame_size as f64;
    let goals: Vec<MlrGoal> = results
        .iter()
        .map(|r| MlrGoal {
            name: r.goal.name.into(),
            loss_ratio: r.goal.loss_ratio,
            initial_ms: r.goal.initial_ms,
            final_ms: r.goal.final_ms,
            duration_sum_ms: r.goal.duration_sum_ms,
            exceed_ratio: r.goal.exceed_ratio,
            width: r.goal.width,
            lower_fps: r.lower,
            upper_fps: r.upper,
            conditional_fps: r.conditional_throughput,
            converged: r.converged,
            gen_limited: r.lower.is_some() && gen_bound(&r.goal, r.upper),
        })
        .collect();
    for g in &goals {
        if let Some(c) = g.conditional_fps {
            let name = g.name.to_lowercase();
            out.push(s(&format!("rfc2544_mlr_{name}_fps"), c, "fps"));
            out.push(s(&format!("rfc2544_mlr_{name}_mbps"), c * l * 8.0 / 1e6, "Mbit/s"));
        }
    }
    let ndr_lower = goals.first().and_then(|g| g.lower_fps);
    detail.mlrsearch = Some(Mlr {
        shared_trials: prior.len() as u64,
        shared_time_ms: prior.iter().map(|x| x.duration_ms).sum(),
        capped: trials.len() as u64 >= st.mlr_max_trials && goals.iter().any(|g| !g.converged),
        goals,
        max_load_fps: line_max,
        min_load_fps: min_load,
        trials: trials.len() as u64,
        trial_time_ms: trials.iter().map(|x| x.duration_ms).sum(),
        wall_ms: t0.elapsed().as_secs_f64() * 1e3,
    });
    Ok(ndr_lower)
}

/// A trial's loss as MLRsearch counts it: the share of the intended load's frames that did not
/// arrive, and the share never sent. What the generator fell short of the rate by (below 99 % of
/// it: `gen_limited`) counts; a frame or two of rounding does not.
fn intended_loss(load: f64, ms: u64, gen_limited: bool, sent: u64, received: u64) -> (f64, f64) {
    let asked = if gen_limited { load * ms as f64 / 1e3 } else { 0.0 };
    let intended = asked.max(sent as f64).max(1.0);
    ((intended - received as f64).max(0.0) / intended, (intended - sent as f64).max(0.0) / intended)
}

/// Latency at the throughput rate (§26.2): round trips of tagged frames over a full trial, at
/// a rate that passed one — never at a throughput that was not determined.
fn latency<E>(t: &mut Trial<E>, ndr: f64, mlr_ndr: Option<f64>) -> Result<(), E> {
    let st = t.st;
    let Trial { log, out, detail, .. } = t;
    // At §26.1's NDR where the throughput test ran, else at MLRsearch's NDR lower bound.
    let rate = match &detail.throughput {
        Some(t) => t.ndr_confirmed.then_some(ndr),
        None => mlr_ndr,
    };
    let undetermined = st.runs("latency") && rate.is_none();
    if undetermined {
        detail.latency = Some(Latency::Skipped {
            skipped: "the throughput (NDR) was not determined: no rate passed a full-length trial".into(),
        });
    }
    if let (true, Some(rate)) = (st.runs("latency"), rate) {
        let m = log.step("latency", StepSpec::timed("latency", rate, st.trial_ms))?;
        let lat = &m.latency;
        let n = lat["count"].as_u64().unwrap_or(0);
        // Too few round trips carry no percentile (and hardly a mean): none is published, and the
        // detail says how many there were.
        if n >= MIN_TAGGED {
            for (k, metric) in [
                ("mean_us", "rfc2544_latency_mean_us"),
                ("min_us", "rfc2544_latency_min_us"),
                ("p99_us", "rfc2544_latency_p99_us"),
                ("max_us", "rfc2544_latency_max_us"),
            ] {
                out.push(s(metric, lat[k].as_f64().unwrap_or(0.0), "µs"));
            }
        }
        detail.latency = Some(Latency::Measured {
            rate_fps: rate,
            at_ndr: rate > 0.0,
            tagged_frames: n,
            enough: n >= MIN_TAGGED,
            loss_pct: m.loss_pct(),
            gen_limited: m.gen_limited,
            summary: lat.clone(),
        });
    }
    Ok(())
}

/// Frame loss (§26.3): 100 % of the highest rate, then 10 % steps down until two successive
/// trials lose nothing.
fn frame_loss<E>(t: &mut Trial<E>) -> Result<(), E> {
    let (st, top, line_max) = (t.st, t.top, t.line_max);
    let Trial { log, out, detail, .. } = t;
    let mut curve = Vec::new();
    let mut zero_run = 0;
    for tenth in (1..=10).rev() {
        let rate = top * tenth as f64 / 10.0;
        let m = log.step("frame_loss", StepSpec::timed("frame_loss", rate, st.frame_loss_ms))?;
        curve.push(LossPoint {
            offered_fps: rate,
            pct_of_top: tenth * 10,
            pct_of_line: rate / line_max * 100.0,
            loss_pct: m.loss_pct(),
            gen_limited: m.gen_limited,
        });
        if tenth == 10 {
            out.push(s("rfc2544_loss_at_max_pct", m.loss_pct(), "%"));
        }
        zero_run = if m.lost() == 0 { zero_run + 1 } else { 0 };
        if zero_run == 2 {
            break;
        }
    }
    detail.frame_loss = Some(FrameLoss { curve, ended_with_two_zero: zero_run == 2 });
    Ok(())
}

/// How often a lossy burst is sent before it is judged: twice (one lost frame of a noisy host is
/// not the DUT's queue overflowing); one the generator broke up, [`BROKEN_TRIES`] times.
const LOSSY_TRIES: usize = 2;

/// Back-to-back bursts as the procedure sends and judges them.
struct Bursts {
    rate: f64,
    ms: u64,
    unpaced: bool,
    /// What the generator reached in the probe.
    gen_max: f64,
    /// Bursts broken up at every try, and the rates of the bursts sent whole that passed.
    broken: u64,
    rates: Vec<f64>,
}

/// Why a burst failed, and the frames it lost.
type Failed = (&'static str, Option<LossAt>);

impl Bursts {
    /// Sent at the gap asked: paced, the generator reached the rate; unpaced, a burst of more
    /// than one batch (one sendmmsg cannot be broken up) reached most of the generator's rate.
    fn whole(&self, m: &Measured, n: u64) -> bool {
        if self.unpaced {
            n <= BATCH as u64 || m.sent_fps >= BROKEN_BURST * self.gen_max
        } else {
            !m.gen_limited
        }
    }

    /// A burst of `n` frames, tried again while it lost frames or was not sent whole: None when
    /// it passed, or who failed it — the DUT's `loss`, or the `generator` (broken up at every try).
    fn send<E>(&mut self, log: &mut Log<E>, n: u64) -> Result<Option<Failed>, E> {
        let spec = StepSpec {
            test: "back_to_back",
            rate_fps: self.rate,
            duration_ms: self.ms,
            count: n,
            unpaced: self.unpaced,
        };
        let mut tries = 0;
        let m = loop {
            tries += 1;
            let phase = if tries == 1 { "back_to_back" } else { "back_to_back-retry" };
            let m = log.step(phase, spec.clone())?;
            let again =
                if !self.whole(&m, n) { tries < BROKEN_TRIES } else { m.lost() > 0 && tries < LOSSY_TRIES };
            if !again {
                break m;
            }
        };
        let by = if !self.whole(&m, n) {
            self.broken += 1;
            "generator"
        } else if m.lost() > 0 {
            "loss"
        } else {
            // The gap a burst was sent at is its rate only past one batch: one sendmmsg's rate
            // is that call's timing, whole whatever it measured.
            if n > BATCH as u64 {
                self.rates.push(m.sent_fps);
            }
            return Ok(None);
        };
        let last = log.steps.last_mut();
        let lost_at = last.map(|x| {
            x.failed_by = Some(by.into());
            x.lost_at.clone()
        });
        Ok(Some((by, lost_at.flatten())))
    }

    /// One trial: the longest burst that passed, by binary search from `max_len` — guided by the
    /// loss positions: a whole burst that lost from frame f on had the DUT absorb f − 1 frames,
    /// so f − 1 is tried next, then f (two steps bracket a queue exactly where halving takes a
    /// dozen).
    fn trial<E>(&mut self, log: &mut Log<E>, max_len: u64, res_len: u64) -> Result<BurstTrial, E> {
        let Some((by, lost)) = self.send(log, max_len)? else {
            return Ok(BurstTrial { passed: max_len, ..Default::default() });
        };
        let (mut lo, mut hi, mut hi_failed) = (0u64, max_len, (by, lost));
        let hint_of =
            |f: &Failed| f.1.as_ref().filter(|_| f.0 == "loss").and_then(|l| l.first).map(|x| x - 1);
        let mut hint = hint_of(&hi_failed);
        // The resolution is relative to what passes (at least one frame): on a path that loses
        // short bursts the search goes on down instead of stopping at 0.
        while hi - lo > res_len.min(lo * res_len / max_len).max(1) {
            let guided = hint.filter(|h| *h > lo && *h < hi);
            let mid = guided.unwrap_or((lo + hi) / 2);
            match self.send(log, mid)? {
                None => {
                    lo = mid;
                    hint = guided.map(|h| h + 1);
                }
                Some(f) => {
                    hint = hint_of(&f);
                    (hi, hi_failed) = (mid, f);
                }
            }
        }
        Ok(BurstTrial {
            passed: lo,
            failed: Some(hi),
            failed_by: Some(hi_failed.0.into()),
            lost_at: hi_failed.1,
        })
    }
}

/// Back-to-back (§26.4): the longest burst with no loss at the minimum inter-frame gap — the
/// line's when the generator reaches the line's maximum (paced there), otherwise the generator's
/// own (unpaced: as fast as it sends; the rate it reached is stored) — per trial, and the mean.
fn back_to_back<E>(t: &mut Trial<E>) -> Result<(), E> {
    let st = t.st;
    let unpaced = t.detail.generator_limited_probe;
    let mut b = Bursts {
        rate: if unpaced { t.probe.sent_fps } else { t.line_max },
        ms: st.b2b_ms.max(10),
        unpaced,
        gen_max: t.probe.sent_fps,
        broken: 0,
        rates: Vec::new(),
    };
    let max_len = ((t.top * st.b2b_ms as f64 / 1000.0).round() as u64).max(2);
    let res_len = ((max_len as f64 * st.resolution_pct / 100.0).round() as u64).max(1);
    let mut trials = Vec::new();
    for _ in 0..st.b2b_trials {
        trials.push(b.trial(&mut t.log, max_len, res_len)?);
    }
    let lens: Vec<u64> = trials.iter().map(|x| x.passed).collect();
    let mean = lens.iter().sum::<u64>() as f64 / lens.len().max(1) as f64;
    // A length that is a lower bound (passed at the longest length tried, or bounded by a burst
    // the generator broke up) is not a length: the figure is the mean of the lengths the DUT's
    // loss bounded where there are any, the bound otherwise.
    let exact: Vec<u64> =
        trials.iter().filter(|x| x.failed_by.as_deref() == Some("loss")).map(|x| x.passed).collect();
    let exact_mean = (!exact.is_empty()).then(|| exact.iter().sum::<u64>() as f64 / exact.len() as f64);
    t.out.push(s("rfc2544_b2b_frames", exact_mean.unwrap_or(mean), "frames"));
    t.detail.back_to_back = Some(BackToBack {
        rate_fps: b.rate,
        gap: if unpaced { "generator" } else { "line" }.into(),
        burst_fps: b.rates.iter().sum::<f64>() / b.rates.len().max(1) as f64,
        max_burst: max_len,
        capped: (trials.len() - exact.len()) as u64,
        bursts: lens,
        mean,
        resolution_frames: res_len,
        exact_mean,
        trials,
        broken: b.broken,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rfc2544::frames::Account;
    use serde_json::json;

    use crate::params::{resolve, Params};
    use crate::Workload;

    fn settings(extra: &[(&str, serde_json::Value)]) -> Settings {
        let mut m = resolve(crate::rfc2544::Rfc2544.params(), &Default::default()).unwrap();
        m.insert("quick".into(), true.into());
        for (k, v) in extra {
            m.insert(k.to_string(), v.clone());
        }
        Settings::from_params(&Params(&m)).unwrap()
    }

    /// A DUT that drops everything above `cap` frames/s, and a generator that tops out at `gen`.
    fn model(cap: f64, gen: f64) -> impl FnMut(&StepSpec) -> Result<Measured, String> {
        move |sp: &StepSpec| {
            let achieved = sp.rate_fps.min(gen);
            let secs = if sp.count > 0 { sp.count as f64 / achieved } else { sp.duration_ms as f64 / 1e3 };
            let sent = if sp.count > 0 { sp.count } else { (achieved * secs) as u64 };
            // Bursts: a queue of 1000 frames absorbs the excess.
            let lost = if achieved > cap {
                let over = ((achieved - cap) / achieved * sent as f64) as u64;
                if sp.count > 0 {
                    over.saturating_sub(1000)
                } else {
                    over
                }
            } else {
                0
            };
            // A burst overflows the queue with the first frame beyond 1000 more than the DUT
            // drained (the shortest burst above that loses); from there on it loses to the tail.
            let lost_at = (sp.count > 0 && lost > 0).then(|| LossAt {
                lost,
                first: Some((1001.0 / (1.0 - cap / achieved)).ceil() as u64),
                last: Some(sent),
                runs: Vec::new(),
                run_count: lost,
            });
            Ok(Measured {
                sent,
                received: sent - lost,
                sent_fps: achieved,
                gen_limited: achieved < 0.99 * sp.rate_fps,
                lost_at,
                latency: json!({"count": 500, "mean_us": 20.0, "min_us": 5.0, "p99_us": 50.0, "max_us": 90.0}),
                dut_cpu_pct: Some(42.0),
                ..Default::default()
            })
        }
    }

    /// A generator that falls short of the offered rate on every third step, whatever the rate,
    /// before a DUT that loses above `cap`: the NDR is the DUT's (a shortfall is retried, not
    /// charged to it), and each step that failed says by whom.
    #[test]
    fn a_generator_shortfall_is_retried_not_charged_to_the_dut() {
        let st = settings(&[("tests", json!("throughput"))]);
        let mut inner = model(500_000.0, 1e9);
        let mut n = 0;
        let mut flaky = |sp: &StepSpec| {
            n += 1;
            let mut m = inner(sp)?;
            if n % 3 == 0 {
                m.sent = (m.sent as f64 * 0.5) as u64;
                m.received = m.received.min(m.sent);
                m.sent_fps *= 0.5;
                m.gen_limited = true;
            }
            Ok(m)
        };
        let (out, d) = run::<String>(&st, &mut flaky).unwrap();
        let res = line_max_fps(st.line_bps, st.frame_size) * st.resolution_pct / 100.0;
        let ndr = get(&out, "rfc2544_ndr_fps");
        assert!(
            ndr <= 500_000.0 && ndr > 500_000.0 - 2.0 * res,
            "NDR {ndr} against the DUT's 500000 (res {res})"
        );
        assert!(d.steps.iter().any(|x| x.phase.ends_with("-retry")), "shortfalls were retried");
        assert!(d.steps.iter().any(|x| x.failed_by.as_deref() == Some("loss")), "the DUT's losses are named");
        assert!(
            d.steps.iter().filter(|x| x.failed_by.as_deref() == Some("generator")).all(|x| x.gen_limited),
            "only generator-limited steps are blamed on the generator"
        );
    }

    /// Direction `out`: a DUT that never loses, sending to a tester whose receiver drops frames
    /// above 600 kfps at its socket. Those losses are the tester's: each such step is retried,
    /// said (`failed_by` tester), and the NDR is marked as the tester's bound, not the DUT's.
    #[test]
    fn losses_at_the_testers_receiver_are_not_the_duts() {
        let st = settings(&[("tests", json!("throughput")), ("direction", json!("out"))]);
        let mut inner = model(1e12, 1e12);
        let mut tester = |sp: &StepSpec| {
            let mut m = inner(sp)?;
            if sp.rate_fps > 600_000.0 {
                let dropped = m.sent / 10;
                m.received = m.sent - dropped;
                m.tester_drops = dropped;
            }
            Ok(m)
        };
        let (_, d) = run::<String>(&st, &mut tester).unwrap();
        let t = d.throughput.clone().unwrap();
        assert!(t.tester_bound && !t.gen_limited && t.tester_drops > 0, "{t:?}");
        assert!(t.ndr_fps.is_some_and(|n| n <= 600_000.0), "{t:?}");
        let failed: Vec<&Step> = d.steps.iter().filter(|x| x.failed_by.is_some()).collect();
        assert!(
            !failed.is_empty() && failed.iter().all(|x| x.failed_by.as_deref() == Some("tester")),
            "{failed:#?}"
        );
        assert!(d.steps.iter().any(|x| x.phase.ends_with("-retry")), "each such step was tried again");
        // The same losses without the tester's drops are the DUT's.
        let mut inner = model(600_000.0, 1e12);
        let (_, d) = run::<String>(&st, &mut |sp: &StepSpec| inner(sp)).unwrap();
        assert!(!d.throughput.unwrap().tester_bound);
    }

    fn get(o: &[Sample], m: &str) -> f64 {
        o.iter().find(|s| s.metric == m).unwrap_or_else(|| panic!("{m} missing")).value
    }

    #[test]
    fn finds_the_dut_limit_within_resolution_and_confirms_it() {
        let st = settings(&[]);
        let line = line_max_fps(1e9, 64); // 1.488 Mfps
        let (out, d) =
            run(&st, &mut model(500_000.0, 2e6)).map(|(o, d)| (o, serde_json::to_value(d).unwrap())).unwrap();
        let ndr = get(&out, "rfc2544_ndr_fps");
        assert!(ndr <= 500_000.0 && ndr > 500_000.0 - line * 0.05, "{ndr}");
        assert_eq!(get(&out, "rfc2544_gen_limited"), 0.0);
        assert_eq!(d["throughput"]["ndr_confirmed"], true);
        assert!((get(&out, "rfc2544_ndr_line_pct") - ndr / line * 100.0).abs() < 1e-9);
        // PDR: 0.1 % loss allowed, so at least NDR and still close to the cap.
        let pdr = get(&out, "rfc2544_pdr_fps");
        assert!(pdr >= ndr && pdr < 500_000.0 * 1.002 + 1.0, "{pdr}");
        assert_eq!(get(&out, "rfc2544_dut_cpu_pct"), 42.0);
        // Every step stored; a confirming trial has the full length.
        let steps = d["steps"].as_array().unwrap();
        assert!(steps.iter().any(|x| x["phase"] == "ndr-confirm" && x["duration_ms"] == st.trial_ms));
        assert!(steps.len() > 10);
    }

    /// A DUT whose loss grows with the rate above `clean` (no hard cap): `per_100k` % more loss for
    /// every 100 000 frames/s beyond it.
    fn gradual(clean: f64, per_100k: f64) -> impl FnMut(&StepSpec) -> Result<Measured, String> {
        move |sp: &StepSpec| {
            let secs = if sp.count > 0 { sp.count as f64 / sp.rate_fps } else { sp.duration_ms as f64 / 1e3 };
            let sent = if sp.count > 0 { sp.count } else { (sp.rate_fps * secs) as u64 };
            let loss_pct = ((sp.rate_fps - clean).max(0.0) / 100_000.0 * per_100k).min(100.0);
            let lost = (sent as f64 * loss_pct / 100.0).ceil() as u64;
            Ok(Measured {
                sent,
                received: sent - lost.min(sent),
                sent_fps: sp.rate_fps,
                latency: json!({"count": 500, "mean_us": 20.0, "min_us": 5.0, "p99_us": 50.0, "max_us": 90.0}),
                ..Default::default()
            })
        }
    }

    #[test]
    fn the_pdr_is_searched_on_its_own_tolerance_when_loss_grows_gradually() {
        // Loss from 400 kfps, 0.1 % more per 100 kfps: the NDR is 400 k, and with a 0.1 %
        // tolerance the PDR is 500 k — far above the NDR's bracket, where the old search stopped.
        let st = settings(&[("loss_tolerance", json!(0.1))]);
        let line = line_max_fps(1e9, 64);
        let (out, _) = run(&st, &mut gradual(400_000.0, 0.1)).unwrap();
        let (ndr, pdr) = (get(&out, "rfc2544_ndr_fps"), get(&out, "rfc2544_pdr_fps"));
        let res = line * st.resolution_pct / 100.0;
        assert!((ndr - 400_000.0).abs() <= res + 1.0, "NDR {ndr}");
        assert!(
            pdr <= 500_000.0 + 1.0 && pdr >= 500_000.0 - res - 1.0,
            "PDR {pdr} (NDR {ndr}, resolution {res})"
        );
    }

    /// A DUT that loses frames only in full-length trials above `long_cap` (a buffer that the
    /// short search trials never fill) and everywhere above `cap`.
    fn slow_to_fill(
        cap: f64,
        long_cap: f64,
        trial_ms: u64,
    ) -> impl FnMut(&StepSpec) -> Result<Measured, String> {
        let mut inner = model(cap, 2e6);
        move |sp: &StepSpec| {
            let mut m = inner(sp)?;
            if sp.duration_ms >= trial_ms && sp.rate_fps > long_cap && sp.test == "throughput" {
                m.received = m.sent - m.sent / 10;
            }
            Ok(m)
        }
    }

    #[test]
    fn an_ndr_is_a_rate_that_passed_a_full_length_trial_or_not_determined() {
        let st = settings(&[]);
        // The search finds ~500 k; full-length trials lose above 100 k: the confirmation halves
        // down to a rate that passes, and that is the NDR.
        let (out, d) = run(&st, &mut slow_to_fill(500_000.0, 100_000.0, st.trial_ms))
            .map(|(o, d)| (o, serde_json::to_value(d).unwrap()))
            .unwrap();
        let ndr = get(&out, "rfc2544_ndr_fps");
        assert!(ndr <= 100_000.0 && ndr > 40_000.0, "NDR {ndr}");
        assert_eq!(d["throughput"]["ndr_confirmed"], true);
        let confirmed = d["steps"].as_array().unwrap().iter().filter(|x| x["phase"] == "ndr-confirm").count();
        assert!((5..=4 + CONFIRM_HALVINGS).contains(&confirmed), "{confirmed} confirmation trials");
        // Latency ran at that rate.
        let lat = d["steps"].as_array().unwrap().iter().find(|x| x["phase"] == "latency").unwrap();
        assert_eq!(lat["offered_fps"].as_f64(), Some(ndr));
        // Full-length trials lose at every rate: no NDR, no PDR, no latency at a rate that lost.
        let st = settings(&[("tests", json!("throughput,latency"))]);
        let (out, d) = run(&st, &mut slow_to_fill(500_000.0, 0.0, st.trial_ms))
            .map(|(o, d)| (o, serde_json::to_value(d).unwrap()))
            .unwrap();
        assert!(
            out.iter().all(|x| !x.metric.starts_with("rfc2544_ndr") && !x.metric.starts_with("rfc2544_pdr")),
            "{out:?}"
        );
        assert!(out.iter().all(|x| !x.metric.starts_with("rfc2544_latency")), "{out:?}");
        assert_eq!(d["throughput"]["ndr_confirmed"], false);
        assert!(d["throughput"]["ndr_fps"].is_null());
        assert!(
            d["throughput"]["not_determined"]
                .as_str()
                .is_some_and(|n| n.contains("no full-length trial passed")),
            "{d}"
        );
        assert!(d["latency"]["skipped"].is_string(), "{}", d["latency"]);
    }

    #[test]
    fn the_pdr_bracket_comes_from_the_steps_at_its_tolerance() {
        let step = |r: f64, l: f64| Step {
            test: "throughput".into(),
            offered_fps: r,
            loss_pct: l,
            ..Default::default()
        };
        let steps =
            [step(1000.0, 5.0), step(500.0, 0.05), step(750.0, 0.5), step(400.0, 0.0), step(450.0, 0.01)];
        // At 0.1 %: 500 passed, 750 failed; the NDR (400) is below both.
        assert_eq!(pdr_bracket(&steps, 400.0, 1000.0, 0.1), (500.0, 750.0));
        // Nothing failed the tolerance: up to the top.
        assert_eq!(pdr_bracket(&steps[1..2], 400.0, 1000.0, 0.1), (500.0, 1000.0));
        // A generator-limited step is not the DUT's failure.
        let g = Step {
            test: "throughput".into(),
            gen_limited: true,
            offered_fps: 600.0,
            loss_pct: 50.0,
            ..Default::default()
        };
        assert_eq!(pdr_bracket(&[g], 400.0, 1000.0, 0.1), (400.0, 1000.0));
    }

    #[test]
    fn a_generator_limit_is_never_reported_as_the_duts_throughput() {
        let st = settings(&[]);
        let (out, d) =
            run(&st, &mut model(1e9, 300_000.0)).map(|(o, d)| (o, serde_json::to_value(d).unwrap())).unwrap();
        assert_eq!(get(&out, "rfc2544_gen_limited"), 1.0);
        assert!(d["generator_limited_probe"] == true);
        assert!(get(&out, "rfc2544_ndr_fps") <= 300_000.0);
        // Not limited by the DUT: frame loss at the top rate is zero.
        assert_eq!(get(&out, "rfc2544_loss_at_max_pct"), 0.0);
    }

    #[test]
    fn frame_loss_walks_down_in_ten_percent_steps_to_two_clean_trials() {
        let st = settings(&[("tests", json!("frame_loss"))]);
        let (out, d) =
            run(&st, &mut model(700_000.0, 1e7)).map(|(o, d)| (o, serde_json::to_value(d).unwrap())).unwrap();
        let curve = d["frame_loss"]["curve"].as_array().unwrap();
        let pcts: Vec<u64> = curve.iter().map(|c| c["pct_of_top"].as_u64().unwrap()).collect();
        // 1.488 Mfps top; the DUT holds 700 k = 47 %: loss at 100…50 %, clean at 40 and 30 %.
        assert_eq!(pcts, vec![100, 90, 80, 70, 60, 50, 40, 30]);
        assert!(get(&out, "rfc2544_loss_at_max_pct") > 50.0);
        assert_eq!(d["frame_loss"]["ended_with_two_zero"], true);
        assert!(out.iter().all(|s| !s.metric.starts_with("rfc2544_ndr")), "throughput was not asked");
    }

    #[test]
    fn back_to_back_finds_the_queue_length() {
        let st = settings(&[
            ("tests", json!("back_to_back")),
            ("b2b_trials", json!(3)),
            ("resolution", json!(0.1)),
        ]);
        // Top 1.488 Mfps × 100 ms = 148,800 frames; the DUT takes 500 k/s plus a 1000-frame queue.
        let (out, d) =
            run(&st, &mut model(500_000.0, 1e7)).map(|(o, d)| (o, serde_json::to_value(d).unwrap())).unwrap();
        let b2b = get(&out, "rfc2544_b2b_frames");
        // Loss-free while (1 − 500k/1.488M) × n ≤ 1000: n ≤ ~1507; within 0.1 % of the max burst.
        assert!((1507.0 - 149.0..=1508.0).contains(&b2b), "{b2b}");
        assert_eq!(d["back_to_back"]["bursts"].as_array().unwrap().len(), 3);
    }

    /// A DUT that never overflows but loses one frame of every other burst (noise): each lossy
    /// burst is tried again, so every burst passes at the longest length and the figure is that
    /// bound (before, the search halved on the first lost frame). And bursts that passed whole
    /// are not averaged with searched lengths.
    #[test]
    fn a_lossy_burst_is_retried_and_bounds_are_not_averaged() {
        let st = settings(&[("tests", json!("back_to_back")), ("b2b_trials", json!(3))]);
        let mut inner = model(1e12, 1e12);
        let mut n = 0;
        let mut noisy = |sp: &StepSpec| {
            n += 1;
            let mut m = inner(sp)?;
            if n % 2 == 1 {
                m.received = m.sent.saturating_sub(1);
            }
            Ok(m)
        };
        let (out, d) = run::<String>(&st, &mut noisy).unwrap();
        let b = d.back_to_back.unwrap();
        assert_eq!((b.capped, b.exact_mean), (3, None), "{b:?}");
        assert_eq!(get(&out, "rfc2544_b2b_frames"), b.max_burst as f64);
        // The probe took the first lossy draw; bursts 2 and 3 each lost once and passed again.
        assert_eq!(d.steps.iter().filter(|x| x.phase == "back_to_back-retry").count(), 2);
    }

    /// §26.4's minimum gap: a generator that cannot reach the line's rate sends its bursts
    /// unpaced, at its own rate (not at 98 % of it, the searches' top), and says so; each trial
    /// keeps the shortest burst that failed and the frames it lost.
    #[test]
    fn bursts_go_at_the_minimum_gap_and_say_what_they_lost() {
        let st = settings(&[
            ("tests", json!("back_to_back")),
            ("b2b_trials", json!(2)),
            ("resolution", json!(0.1)),
        ]);
        // Generator 1 Mfps (line 1.488 M); the DUT takes 500 k/s plus a 1000-frame queue: at
        // 1 Mfps loss-free while n/2 ≤ 1000, n ≤ 2000 (at the top's 980 k it would be 2041).
        let (out, d) = run(&st, &mut model(500_000.0, 1e6)).unwrap();
        let b = d.back_to_back.clone().unwrap();
        assert_eq!((b.gap.as_str(), b.rate_fps, b.burst_fps), ("generator", 1e6, 1e6));
        let b2b = get(&out, "rfc2544_b2b_frames");
        assert!((1995.0..=2001.0).contains(&b2b), "{b2b}");
        let bursts: Vec<&Step> = d.steps.iter().filter(|x| x.test == "back_to_back").collect();
        assert!(bursts.iter().all(|x| x.offered_fps == 1e6), "every burst at the generator's own rate");
        // Guided by where the frames were lost: the longest burst, the frames it absorbed, one
        // more (halving alone takes 16 bursts from 98 000 frames down to 2 000).
        let first_tries = bursts.iter().filter(|x| x.phase == "back_to_back").count();
        assert_eq!(first_tries, 3 * b.trials.len(), "{bursts:#?}");
        for tr in &b.trials {
            assert_eq!(tr.failed_by.as_deref(), Some("loss"));
            let (failed, at) = (tr.failed.unwrap(), tr.lost_at.clone().unwrap());
            assert!(failed > tr.passed && at.last == Some(failed) && at.first > Some(1), "{tr:?}");
        }
        // A line-rate generator paces its bursts at the line's maximum.
        let (_, d) = run(&st, &mut model(500_000.0, 1e7)).unwrap();
        let b = d.back_to_back.unwrap();
        assert_eq!((b.gap.as_str(), b.rate_fps), ("line", line_max_fps(st.line_bps, st.frame_size)));
    }

    /// A burst of one send batch is whole whatever rate its one call measured, but that rate is
    /// not a gap: the rate the bursts reached averages longer bursts only (it was the mean of
    /// every burst that passed, 0.1× the generator here, under the 0.8× a whole burst must reach).
    #[test]
    fn one_batch_bursts_do_not_stand_for_the_gap() {
        let st = settings(&[("tests", json!("back_to_back")), ("b2b_trials", json!(1))]);
        let tiny_queue = |sp: &StepSpec| -> Result<Measured, String> {
            // The probe (a timed step) finds a 1 Mfps generator; bursts lose past 40 frames.
            let achieved = sp.rate_fps.min(1e6);
            let timed = sp.count == 0;
            let sent = if timed { (achieved * sp.duration_ms as f64 / 1e3) as u64 } else { sp.count };
            let received = if timed { sent } else { sent.min(40) };
            let lost = sent - received;
            Ok(Measured {
                sent,
                received,
                sent_fps: if !timed && sent <= BATCH as u64 { 1e5 } else { achieved },
                gen_limited: achieved < 0.99 * sp.rate_fps,
                lost_at: (lost > 0).then(|| LossAt {
                    lost,
                    first: Some(41),
                    last: Some(sent),
                    runs: Vec::new(),
                    run_count: 1,
                }),
                latency: json!({"count": 500, "mean_us": 20.0, "min_us": 5.0, "p99_us": 50.0, "max_us": 90.0}),
                ..Default::default()
            })
        };
        let mut m = tiny_queue;
        let (out, d) = run::<String>(&st, &mut m).unwrap();
        let b = d.back_to_back.unwrap();
        assert_eq!(b.gap, "generator");
        assert_eq!(get(&out, "rfc2544_b2b_frames"), 40.0, "{b:?}");
        assert_eq!(b.burst_fps, 0.0, "{b:?}");
    }

    /// An unpaced burst the generator broke up (a stall: well below its own rate) is not a
    /// back-to-back burst: retried, then failed as the generator's, and the trial's length is a
    /// lower bound — never a DUT figure. And a DUT that loses even one frame sent alone says so.
    #[test]
    fn a_broken_burst_is_the_generators_and_a_zero_explains_itself() {
        let st = settings(&[("tests", json!("back_to_back")), ("b2b_trials", json!(2))]);
        let mut inner = model(1e12, 1e6);
        let mut stalls = |sp: &StepSpec| {
            let mut m = inner(sp)?;
            if sp.count > 5000 {
                m.sent_fps *= 0.5;
            }
            Ok(m)
        };
        let (out, d) = run::<String>(&st, &mut stalls).unwrap();
        let b = d.back_to_back.unwrap();
        assert!(b.trials.iter().all(|t| t.failed_by.as_deref() == Some("generator")), "{b:?}");
        assert!(b.broken >= 2 && b.capped == 2 && b.exact_mean.is_none(), "{b:?}");
        assert!(d.steps.iter().any(|x| x.failed_by.as_deref() == Some("generator")));
        let b2b = get(&out, "rfc2544_b2b_frames");
        assert!(b2b <= 5000.0 && b2b > 4000.0, "{b2b}");
        // Every frame lost, even a burst of one.
        let mut drops = |sp: &StepSpec| {
            let n = sp.count.max(1);
            let at = Account::default().losses(n);
            Ok::<_, String>(Measured {
                sent: n,
                received: 0,
                sent_fps: 1e6,
                lost_at: at,
                ..Default::default()
            })
        };
        let (out, d) = run::<String>(&st, &mut drops).unwrap();
        assert_eq!(get(&out, "rfc2544_b2b_frames"), 0.0);
        let tr = &d.back_to_back.unwrap().trials[0];
        assert_eq!((tr.passed, tr.failed), (0, Some(1)));
        assert_eq!(tr.lost_at.as_ref().unwrap().describe(1), "lost 1 of 1: #1 (head to tail)");
    }

    #[test]
    fn latency_runs_at_the_throughput_rate() {
        let st = settings(&[("tests", json!("throughput,latency"))]);
        let (out, d) =
            run(&st, &mut model(400_000.0, 1e7)).map(|(o, d)| (o, serde_json::to_value(d).unwrap())).unwrap();
        assert_eq!(d["latency"]["rate_fps"], d["throughput"]["ndr_fps"]);
        assert_eq!(get(&out, "rfc2544_latency_p99_us"), 50.0);
        assert_eq!(d["latency"]["enough"], true);
    }

    /// RFC 9971's search on the same generator, on a DUT that loses a burst of 200 frames in one
    /// step of four whatever the rate: each goal's conditional throughput lands within its width
    /// of the capacity (the burst is 0.04 % of a second at 500 k fps: below the PDR goal's loss
    /// ratio, a high-loss trial for the NDR goal that the exceed ratio absorbs), its parameters
    /// are stored, and without §26.1's test latency runs at MLRsearch's NDR.
    #[test]
    fn mlrsearch_finds_the_capacity_through_bursts_and_says_its_goals() {
        let st = settings(&[("tests", json!("mlrsearch,latency"))]);
        let cap = 500_000.0;
        let mut inner = model(cap, 1e9);
        let mut n = 0;
        let mut noisy = |sp: &StepSpec| {
            n += 1;
            let mut m = inner(sp)?;
            if n % 4 == 0 {
                m.received = m.received.saturating_sub(200);
            }
            Ok::<_, String>(m)
        };
        let (out, d) = run(&st, &mut noisy).unwrap();
        let mlr = d.mlrsearch.clone().expect("mlrsearch detail");
        assert!(d.throughput.is_none(), "§26.1's search did not run");
        let (ndr, pdr) = (&mlr.goals[0], &mlr.goals[1]);
        assert_eq!((ndr.name.as_str(), pdr.name.as_str()), ("NDR", "PDR"));
        assert_eq!((ndr.loss_ratio, pdr.loss_ratio, ndr.exceed_ratio), (0.0, 0.005, 0.5));
        assert_eq!((ndr.final_ms, ndr.duration_sum_ms, ndr.width), (250, 500, 0.05));
        assert!(
            ndr.describe().contains("duration sum 0.5 s, exceed ratio 0.5, width 5 %"),
            "{}",
            ndr.describe()
        );
        let got = get(&out, "rfc2544_mlr_ndr_fps");
        assert!(ndr.converged && (got - cap).abs() / cap <= ndr.width, "NDR {got} against {cap}: {mlr:?}");
        assert!(got <= cap * 1.0001, "below the capacity: {got}");
        let got_pdr = get(&out, "rfc2544_mlr_pdr_fps");
        assert!(pdr.converged && (got_pdr - cap).abs() / cap <= pdr.width, "PDR {got_pdr}");
        assert_eq!(ndr.upper_fps.is_some(), !ndr.gen_limited);
        assert!(mlr.trials > 5 && mlr.trial_time_ms >= mlr.trials * 250 && mlr.wall_ms >= 0.0);
        assert_eq!(mlr.trials as usize, d.steps.iter().filter(|x| x.phase == "mlr").count());
        assert!(d.steps.iter().filter(|x| x.test == "mlrsearch").all(|x| x.duration_ms == 250));
        // Without §26.1's search only its probe is shared.
        assert_eq!(mlr.shared_trials, 1);
        match d.latency {
            Some(Latency::Measured { rate_fps, .. }) => assert_eq!(Some(rate_fps), ndr.lower_fps),
            other => panic!("latency at MLRsearch's NDR: {other:?}"),
        }
        // The parameters given are the goals'.
        let st = settings(&[
            ("tests", json!("mlrsearch")),
            ("mlr_exceed_ratio", json!(0.2)),
            ("mlr_duration_sum", json!(9000)),
            ("mlr_initial_duration", json!(250)),
            ("mlr_pdr_loss", json!(1.0)),
            ("mlr_width", json!(5.0)),
        ]);
        let (_, d) = run(&st, &mut model(cap, 1e9)).unwrap();
        let g = &d.mlrsearch.unwrap().goals;
        assert_eq!((g[0].exceed_ratio, g[0].duration_sum_ms, g[0].initial_ms), (0.2, 9000, 250));
        assert_eq!((g[1].loss_ratio, g[1].width), (0.01, 0.05));
        assert!(d.steps.iter().any(|x| x.duration_ms == 250), "first trials at a load are short");
        // A generator that tops out at 300 k before a DUT that loses nothing: the frames it never
        // sent count as lost, so the figure is its limit (within the 99 % it is judged by and the
        // width), marked as the generator's — never a load it could not offer.
        let st = settings(&[("tests", json!("mlrsearch"))]);
        let (_, d) = run(&st, &mut model(1e9, 300_000.0)).unwrap();
        let g = &d.mlrsearch.unwrap().goals[0];
        let c = g.conditional_fps.unwrap_or(0.0);
        assert!(g.gen_limited && (c - 300_000.0).abs() / 300_000.0 <= 0.011 + g.width, "{g:?}");
    }

    #[test]
    fn a_step_error_ends_the_procedure() {
        let st = settings(&[]);
        let mut n = 0;
        let r = run(&st, &mut |_: &StepSpec| {
            n += 1;
            if n == 3 {
                Err("peer gone".to_string())
            } else {
                Ok(Measured { sent: 10, received: 5, sent_fps: 1e6, ..Default::default() })
            }
        });
        assert_eq!(r.unwrap_err(), "peer gone");
    }
}
