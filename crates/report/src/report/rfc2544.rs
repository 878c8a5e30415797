//! The report of RFC 2544 procedures: one row per measured trial, read from the detail the
//! procedure stored with it (crate::rfc2544 runs them), and the table of NDR, PDR, latency, frame
//! loss and back-to-back answers.

use serde_json::Value;

use super::words::{fmt_num, mean_text, WIDTH};

use virtperf_record::rfc2544::LossAt;
use virtperf_record::rfc2544::{BackToBack, Detail, Latency};

/// This section's name, as the workloads it shows give it (`Workload::report_section`).
pub const SECTION: &str = "rfc2544";

/// One procedure's answers, for the report (one row per measured trial).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Row {
    pub environment: String,
    /// The environment's kind (`native`, `qemu`, …) and whether its CPU was emulated (TCG): set
    /// by the report from the run's environments and manifest.
    pub kind: String,
    pub emulated_cpu: bool,
    pub direction: String,
    pub frame_size: u64,
    pub quick: bool,
    pub line_max_fps: f64,
    pub ndr_fps: Option<f64>,
    pub pdr_fps: Option<f64>,
    pub ndr_confirmed: bool,
    /// The throughput test ran and no rate passed a full-length trial: no NDR to report.
    pub ndr_undetermined: bool,
    /// The DUT passed everything the generator could send: its throughput is at least the NDR.
    pub gen_limited: bool,
    /// Direction `out`: the tester's receiving socket dropped frames (how many), and whether the
    /// lowest failed rate above the NDR failed there — the NDR is then the tester's bound.
    pub tester_drops: u64,
    /// Frames every step lost, and of them those the DUT's receiving socket dropped (direction
    /// `in`: its queue full — the receiver did not keep up or was descheduled).
    pub lost: u64,
    pub dut_drops: u64,
    /// The DUT's receiving buffer as its socket kept it (bytes; directions `in` and `reflect`),
    /// and what `dut_rcvbuf` asked for (None: the kernel's default).
    pub dut_rcvbuf: Option<u64>,
    pub dut_rcvbuf_asked: Option<u64>,
    /// §26.1's throughput test ran (tests `throughput`, or `latency` without `mlrsearch`).
    pub ran_throughput: bool,
    pub tester_bound: bool,
    pub dut_cpu_pct: Option<f64>,
    pub guest_cpu_pct: Option<f64>,
    pub latency: Value,
    /// Why the latency figures are not published, or what weakens them: fewer than
    /// [`virtperf_record::rfc2544::MIN_TAGGED`] tagged frames, frames lost in the latency trial.
    pub latency_note: Option<String>,
    /// (% of the highest rate, offered fps, loss %).
    pub loss_curve: Vec<(u64, f64, f64)>,
    pub b2b_mean: Option<f64>,
    pub b2b_capped: bool,
    /// (bursts that passed at the longest length, bursts, that length).
    pub b2b_of: Option<(u64, u64, u64)>,
    /// What the back-to-back figure rests on: whose minimum gap, bursts the generator broke up,
    /// where the shortest lossy bursts lost their frames.
    pub b2b_notes: Vec<String>,
    pub steps: usize,
    /// RFC 9971 MLRsearch (test `mlrsearch`): the NDR and PDR goals' conditional throughputs.
    pub mlr_ndr_fps: Option<f64>,
    pub mlr_pdr_fps: Option<f64>,
    /// Every goal's bounds came within its width (false: it stopped at `mlr_max_trials`).
    pub mlr_converged: bool,
    /// The NDR (PDR) goal's figure is the generator's limit: its upper bound lost mostly frames
    /// never sent.
    pub mlr_gen_limited: bool,
    pub mlr_pdr_gen_limited: bool,
    /// Each goal's name and parameters in words: what the figures state.
    pub mlr_goals: Vec<String>,
    pub mlr_trials: u64,
    pub mlr_wall_ms: f64,
    /// What the generator reached in the probe at the line's maximum.
    pub generator_fps: f64,
    /// The profile the procedure ran with: final trial and search step, resolution, MLRsearch's
    /// final trial, duration sum and width, the trials it shared with §26.1's, the waits, the
    /// back-to-back searches.
    pub trial_ms: u64,
    pub search_ms: u64,
    pub resolution_pct: f64,
    pub mlr_final_ms: u64,
    pub mlr_sum_ms: u64,
    pub mlr_width: f64,
    pub mlr_shared: u64,
    pub settle_ms: u64,
    pub drain_ms: u64,
    pub b2b_trials: u64,
    /// The procedure's wall time and its steps' own time, ms.
    pub wall_ms: f64,
    pub trial_time_ms: f64,
    /// The latest any step's last frame came after its end marker, ms (the drain it needed).
    pub tail_ms: Option<f64>,
}

impl Row {
    /// The tester ran out before the DUT did — its generator (directions `in` and `reflect`), or
    /// its receiver (direction `out`: its socket dropped what the lowest failed rate lost): the
    /// figure is a lower bound of the DUT's throughput.
    pub fn tester_limited(&self) -> bool {
        (self.gen_limited && self.direction != "out") || self.tester_bound
    }

    /// The generator ran out, and in direction `out` the generator runs inside the environment:
    /// the rate it reached is the environment's own sending limit (seed 003's TX figure), a
    /// figure of the DUT, not a bound.
    pub fn sender_limited(&self) -> bool {
        self.gen_limited && self.direction == "out"
    }

    /// Either: the figure is marked `≥` or `†`.
    pub fn tester_limited_or_sender(&self) -> bool {
        self.tester_limited() || self.sender_limited()
    }

    /// Reads a stored trial's detail (`extra.rfc2544`).
    pub fn from_detail(environment: &str, d: &Value) -> Option<Row> {
        let d: Detail = serde_json::from_value(d.get("rfc2544")?.clone()).ok()?;
        if d.frame_size == 0 {
            return None;
        }
        let ran_throughput = d.throughput.is_some();
        let t = d.throughput.unwrap_or_default();
        let ndr_cpu = t.ndr_cpu.unwrap_or_default();
        let mlr = d.mlrsearch.unwrap_or_default();
        let goal = |name: &str| mlr.goals.iter().find(|g| g.name == name);
        Some(Row {
            environment: environment.to_string(),
            kind: String::new(),
            emulated_cpu: false,
            mlr_ndr_fps: goal("NDR").and_then(|g| g.conditional_fps),
            mlr_pdr_fps: goal("PDR").and_then(|g| g.conditional_fps),
            mlr_converged: !mlr.goals.is_empty() && mlr.goals.iter().all(|g| g.converged),
            mlr_gen_limited: goal("NDR").is_some_and(|g| g.gen_limited),
            mlr_pdr_gen_limited: goal("PDR").is_some_and(|g| g.gen_limited),
            mlr_goals: mlr.goals.iter().map(|g| format!("{} — {}", g.name, g.describe())).collect(),
            mlr_trials: mlr.trials,
            mlr_wall_ms: mlr.wall_ms,
            direction: if d.direction.is_empty() { "?".into() } else { d.direction },
            frame_size: d.frame_size,
            quick: d.quick,
            line_max_fps: d.line_max_fps,
            ndr_fps: t.ndr_fps,
            pdr_fps: t.pdr_fps,
            ndr_confirmed: t.ndr_confirmed,
            ndr_undetermined: t.not_determined.is_some(),
            gen_limited: t.gen_limited,
            tester_drops: t.tester_drops,
            lost: d.steps.iter().map(|s| s.sent.saturating_sub(s.received)).sum(),
            dut_drops: d.steps.iter().map(|s| s.dut_drops).sum(),
            dut_rcvbuf: d.dut_rcvbuf,
            dut_rcvbuf_asked: d.dut_rcvbuf_asked,
            ran_throughput,
            tester_bound: t.tester_bound,
            dut_cpu_pct: ndr_cpu.dut_host_pct,
            guest_cpu_pct: ndr_cpu.guest_pct,
            latency_note: match &d.latency {
                Some(Latency::Measured { enough: false, tagged_frames, .. }) => {
                    Some(format!("n/d: {tagged_frames} tagged < {}", virtperf_record::rfc2544::MIN_TAGGED))
                }
                Some(Latency::Measured { loss_pct, .. }) if *loss_pct > 0.0 => {
                    Some(format!("its trial lost {} %", fmt_num(*loss_pct)))
                }
                Some(Latency::Skipped { .. }) => Some("n/d: no NDR".into()),
                _ => None,
            },
            latency: match d.latency {
                Some(Latency::Measured { mut summary, enough: true, .. }) => {
                    if let Some(o) = summary.as_object_mut() {
                        o.remove("histogram_us");
                    }
                    summary
                }
                _ => Value::Null,
            },
            loss_curve: d
                .frame_loss
                .map(|f| f.curve.iter().map(|p| (p.pct_of_top, p.offered_fps, p.loss_pct)).collect())
                .unwrap_or_default(),
            b2b_mean: d.back_to_back.as_ref().map(|b| b.exact_mean.unwrap_or(b.mean)),
            b2b_capped: d.back_to_back.as_ref().is_some_and(|b| b.capped > 0),
            b2b_of: d.back_to_back.as_ref().map(|b| {
                let at_max = b.bursts.iter().filter(|l| **l >= b.max_burst).count() as u64;
                (at_max, b.bursts.len() as u64, b.max_burst)
            }),
            b2b_notes: d.back_to_back.as_ref().map(|b| b2b_notes(b, d.line_max_fps)).unwrap_or_default(),
            steps: d.steps.len(),
            generator_fps: d.generator_max_fps,
            trial_ms: d.trial_ms,
            search_ms: d.search_ms,
            resolution_pct: d.resolution_pct,
            mlr_final_ms: goal("NDR").map_or(0, |g| g.final_ms),
            mlr_sum_ms: goal("NDR").map_or(0, |g| g.duration_sum_ms),
            mlr_width: goal("NDR").map_or(0.0, |g| g.width),
            mlr_shared: mlr.shared_trials,
            settle_ms: d.waits_ms.map_or(0, |w| w[1]),
            drain_ms: d.waits_ms.map_or(0, |w| w[2]),
            b2b_trials: d.b2b_trials.unwrap_or(0),
            wall_ms: d.wall_ms.unwrap_or(0.0),
            trial_time_ms: d
                .steps
                .iter()
                .map(|x| {
                    if x.count > 0 && x.sent_fps > 0.0 {
                        x.sent as f64 / x.sent_fps * 1e3
                    } else {
                        x.duration_ms as f64
                    }
                })
                .sum(),
            // Steps that lost nothing only: in one that lost, the receiver fell behind, and it
            // read its last frames and the end marker from its queue together.
            tail_ms: d
                .steps
                .iter()
                .filter(|x| x.sent > 0 && x.received >= x.sent)
                .filter_map(|x| x.tail_ms)
                .reduce(f64::max),
        })
    }
}

/// The lines below the RFC 2544 tables, in the text report and on the HTML page alike: where
/// one report's results disagree, the tester's receiver's drops (direction `out`), and what each
/// back-to-back figure rests on.
pub fn notes(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = consistency(rows).lines().map(String::from).collect();
    for r in rows.iter().filter(|r| r.tester_drops > 0) {
        out.push(format!(
            "⚠ {} · {} · {} B: the tester's receiver dropped {} frames at its socket (direction out: the DUT sends to it); {}",
            r.environment,
            r.direction,
            r.frame_size,
            r.tester_drops,
            if r.tester_bound {
                "the lowest failed rate above the NDR failed there: the NDR is a bound set by the tester, the DUT's may be higher"
            } else {
                "those steps were tried again and the NDR rests on steps the DUT failed"
            }
        ));
    }
    out.extend(dut_drop_notes(rows));
    for r in rows {
        for n in &r.b2b_notes {
            out.push(format!("back-to-back {} · {} · {} B: {n}", r.environment, r.direction, r.frame_size));
        }
    }
    out
}

/// Per cell (environment · direction · frame size, its repetitions together): the share of the
/// frames its steps lost that the DUT's own receiving socket dropped, and the buffer that socket
/// had — what sets the NDR at a loss ratio of 0 on a host where the DUT's receiver is
/// descheduled. Where `dut_rcvbuf` asked for a buffer, what each environment's DUT got.
fn dut_drop_notes(rows: &[Row]) -> Vec<String> {
    let buf = |b: Option<u64>| b.map(super::disk::size_text).unwrap_or_else(|| "?".into());
    let mut out = Vec::new();
    let mut cells: Vec<(&str, &str, u64)> = Vec::new();
    for r in rows {
        let k = (r.environment.as_str(), r.direction.as_str(), r.frame_size);
        if !cells.contains(&k) {
            cells.push(k);
        }
    }
    for (env, dir, size) in cells {
        let reps: Vec<&Row> = rows
            .iter()
            .filter(|r| (r.environment.as_str(), r.direction.as_str(), r.frame_size) == (env, dir, size))
            .collect();
        let (lost, drops) = reps.iter().fold((0, 0), |(l, d), r| (l + r.lost, d + r.dut_drops));
        if lost == 0 || drops == 0 {
            continue;
        }
        let over = if reps.len() > 1 { format!(" over {} repetitions", reps.len()) } else { String::new() };
        let kept = reps.iter().find_map(|r| r.dut_rcvbuf);
        let asked = reps.iter().find_map(|r| r.dut_rcvbuf_asked);
        out.push(format!(
            "{env} · {dir} · {size} B: of the {lost} frames its steps lost{over}, {drops} ({:.0} %) were dropped at the DUT's own receiving socket ({}) — its queue full: the receiver did not keep up or was descheduled — not on the path{}",
            drops as f64 / lost as f64 * 100.0,
            match (kept, asked) {
                (Some(k), Some(_)) => format!("{} buffer, as dut_rcvbuf asked", buf(Some(k))),
                (Some(k), None) => format!("{} buffer, the kernel's default", buf(Some(k))),
                (None, _) => "the kernel's default buffer".to_string(),
            },
            if asked.is_some() { "" } else { "; dut_rcvbuf gives it a larger queue (docs/rfc2544.md)" }
        ));
    }
    let mut envs: Vec<(&str, Option<u64>, Option<u64>)> = Vec::new();
    for r in rows.iter().filter(|r| r.dut_rcvbuf_asked.is_some() && r.direction != "out") {
        if !envs.iter().any(|(e, _, _)| *e == r.environment) {
            envs.push((&r.environment, r.dut_rcvbuf_asked, r.dut_rcvbuf));
        }
    }
    if let Some((_, asked, _)) = envs.first() {
        // The kernel keeps twice what a socket sets: a DUT kept less than that where it could
        // not be forced past net.core.rmem_max (no CAP_NET_ADMIN, a user-space stack's limit).
        let want = asked.unwrap_or(0) * 2;
        let each: Vec<String> = envs
            .iter()
            .map(|(e, _, kept)| {
                let short = kept.is_some_and(|k| k < want);
                format!("{e} {}{}", buf(*kept), if short { " (less: not forced there)" } else { "" })
            })
            .collect();
        out.push(format!(
            "the DUT's receiving buffer: dut_rcvbuf asked {} (the kernel keeps twice that); kept: {}",
            buf(*asked),
            each.join(", ")
        ));
    }
    out
}

/// What a back-to-back figure rests on, in words: the gap the bursts were sent at when it was
/// the generator's rather than the line's, bursts the generator broke up (their lengths are lower
/// bounds), and where the shortest burst that failed lost its frames — at the tail a queue
/// overflowed; a 0 (one frame sent alone was lost) says so.
fn b2b_notes(b: &BackToBack, line_max: f64) -> Vec<String> {
    let mut notes = Vec::new();
    if b.gap == "generator" && b.burst_fps == 0.0 {
        notes.push(format!(
            "bursts at the generator's minimum gap (the line's: {} fps); every burst that passed was one send batch, so the gap they reached is not measured",
            fmt_num(line_max)
        ));
    } else if b.gap == "generator" {
        notes.push(format!(
            "bursts at the generator's minimum gap, {} fps (the line's: {} fps): a DUT that absorbs them may still overflow at the line's rate",
            fmt_num(b.burst_fps),
            fmt_num(line_max)
        ));
    }
    if b.broken > 0 {
        notes.push(format!(
            "{} burst(s) the generator broke up (sent below {:.0} % of its own rate at each of {} tries): the lengths they bound are lower bounds",
            b.broken,
            virtperf_record::rfc2544::BROKEN_BURST * 100.0,
            virtperf_record::rfc2544::BROKEN_TRIES
        ));
    }
    let lossy: Vec<(u64, &LossAt)> = b
        .trials
        .iter()
        .filter(|t| t.failed_by.as_deref() == Some("loss"))
        .filter_map(|t| Some((t.failed?, t.lost_at.as_ref()?)))
        .collect();
    if let Some((n, at)) = lossy.iter().min_by_key(|(n, _)| *n) {
        let tail = lossy.iter().filter(|(n, at)| at.last == Some(*n)).count();
        notes.push(format!(
            "shortest burst that lost frames: {n} frames, {}; the last frame of the burst was lost in {tail} of {} trials (a queue overflowing loses the tail)",
            at.describe(*n),
            lossy.len()
        ));
    }
    notes
}

/// What one report of RFC 2544 results must not hide: a frame-loss curve that lost frames at or
/// below the rate its own throughput test passed (the NDR), a curve that loses more at a lower
/// rate (by more than a point), and several repetitions' spread of the NDR. One trial per step on
/// a noisy host is a single draw; these lines say where the draws disagree.
fn consistency(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        let name = format!("{} · {} · {} B", r.environment, r.direction, r.frame_size);
        if let Some(ndr) = r.ndr_fps {
            if let Some((p, offered, loss)) =
                r.loss_curve.iter().find(|(_, offered, loss)| *offered <= ndr * 1.0001 && *loss > 0.0)
            {
                out += &format!(
                    "⚠ {name}: the frame-loss curve lost {} % at {} fps ({p} % of the top), at or below the NDR of {} fps its throughput test passed: one trial per step does not repeat here; more repetitions (reps) show the spread\n",
                    fmt_num(*loss),
                    fmt_num(*offered),
                    fmt_num(ndr)
                );
            }
        }
        if let Some((p, offered, _)) = r.ndr_fps.and_then(|ndr| {
            r.loss_curve
                .iter()
                .filter(|(_, o, loss)| *loss == 0.0 && *o > 1.5 * ndr)
                .max_by(|a, b| a.1.total_cmp(&b.1))
        }) {
            out += &format!(
                "⚠ {name}: the frame-loss curve lost nothing at {} fps ({p} % of the top), {:.1}× the NDR: the throughput search's single trials did not repeat here\n",
                fmt_num(*offered),
                offered / r.ndr_fps.unwrap_or(1.0)
            );
        }
        let rising = r.loss_curve.windows(2).find(|w| w[1].2 > w[0].2 + 1.0);
        if let Some(w) = rising {
            out += &format!(
                "⚠ {name}: the frame-loss curve is not monotonic: {} % lost at {} % of the top, {} % at {} %\n",
                fmt_num(w[1].2),
                w[1].0,
                fmt_num(w[0].2),
                w[0].0
            );
        }
    }
    let mut seen: Vec<(&str, &str, u64)> = Vec::new();
    for r in rows {
        let k = (r.environment.as_str(), r.direction.as_str(), r.frame_size);
        if seen.contains(&k) {
            continue;
        }
        seen.push(k);
        let ndrs: Vec<f64> = rows
            .iter()
            .filter(|x| (x.environment.as_str(), x.direction.as_str(), x.frame_size) == k)
            .filter_map(|x| x.ndr_fps)
            .collect();
        let mlrs: Vec<f64> = rows
            .iter()
            .filter(|x| (x.environment.as_str(), x.direction.as_str(), x.frame_size) == k)
            .filter_map(|x| x.mlr_ndr_fps)
            .collect();
        let spread = |v: &[f64], what: &str| {
            virtperf_stats::Summary::of(v).filter(|s| s.n > 1).map(|sum| {
                format!(
                    "{what} over {} repetitions {} fps, from {} to {} (CV {:.1} %)",
                    sum.n,
                    mean_text(sum.mean, sum.ci95.map(|(l, h)| [l, h]), sum.n),
                    fmt_num(sum.min),
                    fmt_num(sum.max),
                    sum.cv * 100.0
                )
            })
        };
        let parts: Vec<String> =
            [spread(&ndrs, "NDR"), spread(&mlrs, "MLRsearch's NDR (conditional throughput)")]
                .into_iter()
                .flatten()
                .collect();
        if !parts.is_empty() {
            out += &format!("{} · {} · {} B: {}\n", k.0, k.1, k.2, parts.join("; "));
        }
    }
    out
}

fn num(x: Option<f64>) -> String {
    x.map(fmt_num).unwrap_or_else(|| "—".into())
}

/// The RFC 2544 section of the text report: throughput against frame size per environment and
/// direction with the theoretical maximum, then latency, CPU, loss curves and back-to-back.
pub fn render(rows: &[Row]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nRFC 2544");
    if rows.iter().any(|r| r.quick) {
        out += " — QUICK profile: shortened trials and coarse searches, not the RFC's 60 s trials";
    }
    out += "\n";
    let (sizes, keys) = sizes_and_keys(rows);
    // §26.1's table where its throughput test ran (a run of `tests = [mlrsearch]` has none).
    let strict = rows.iter().any(|r| r.ran_throughput);
    if strict {
        out += &strict_table(rows, &sizes, &keys);
    }
    let mlr = render_mlr(rows, &sizes, &keys);
    // A blank line parts it from the strict table's legend, not from the section's title.
    out += if strict { &mlr } else { mlr.trim_start_matches('\n') };
    out += &detail_table(rows);
    for line in notes(rows) {
        out += &line;
        out += "\n";
    }
    if rows.iter().any(|r| !r.latency.is_null() || r.latency_note.is_some()) {
        out += "latency: round trip of tagged frames at the NDR rate, on the generator's clock, tags from the \
                 trial's second quarter on (in/out: the receiver echoes the tags; reflect: the DUT returns every \
                 frame); RFC 2544 §26.2 defines latency one way through the DUT, so a round trip holds both \
                 directions and the echo; published from 20 tagged frames\n";
    }
    out
}

/// §26.1's throughput table: the NDR by frame size per environment · direction (with
/// repetitions: the mean and its interval), under the theoretical maximum.
fn strict_table(rows: &[Row], sizes: &[u64], keys: &[(String, String)]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_width(WIDTH);
    let mut head = vec!["throughput, NDR frames/s (% of line)".to_string()];
    head.extend(sizes.iter().map(|s| format!("{s} B")));
    t.set_header(head);
    let mut theory = vec!["theoretical maximum".to_string()];
    for s in sizes {
        theory.push(num(rows.iter().find(|r| r.frame_size == *s).map(|r| r.line_max_fps)));
    }
    t.add_row(theory);
    for (env, dir) in keys {
        let mut cells = vec![format!("{env} · {dir}")];
        for s in sizes {
            let reps: Vec<&Row> = rows
                .iter()
                .filter(|r| &r.environment == env && &r.direction == dir && r.frame_size == *s)
                .collect();
            // Several repetitions: the mean of their NDRs with its interval, and how many.
            let ndrs: Vec<f64> = reps.iter().filter_map(|r| r.ndr_fps).collect();
            if reps.len() > 1 {
                let cell = match virtperf_stats::Summary::of(&ndrs) {
                    Some(sum) => format!(
                        "{}{} (n={}{}{})",
                        if reps.iter().any(|r| r.tester_limited()) { "≥" } else { "" },
                        // Without an interval (one figure, or all equal) the count says why.
                        match sum.ci95 {
                            Some((l, h)) => mean_text(sum.mean, Some([l, h]), sum.n),
                            None => fmt_num(sum.mean),
                        },
                        sum.n,
                        if ndrs.len() < reps.len() {
                            format!(", {} n/d", reps.len() - ndrs.len())
                        } else {
                            String::new()
                        },
                        if sum.ci95.is_none() && sum.n > 1 { ", all equal" } else { "" }
                    ),
                    None => "n/d".into(),
                };
                cells.push(cell);
                continue;
            }
            let cell = reps
                .first()
                .map(|r| match r.ndr_fps {
                    Some(n) => format!(
                        "{}{}{} ({:.1} %)",
                        if r.tester_limited() { "≥" } else { "" },
                        fmt_num(n),
                        if r.sender_limited() {
                            "†"
                        } else if r.ndr_confirmed {
                            ""
                        } else {
                            "?"
                        },
                        n / r.line_max_fps * 100.0
                    ),
                    None if r.ndr_undetermined => "n/d".into(),
                    None => "—".into(),
                })
                .unwrap_or_default();
            cells.push(cell);
        }
        t.add_row(cells);
    }
    let mut out = t.to_string();
    out += "\n≥ the tester's limit, not the DUT's (directions in and reflect: the DUT lost nothing at the highest rate the tester's generator sent; out: the tester's receiver dropped what the next rate lost); † the DUT's own sending limit (direction out: the generator runs inside it, and it lost nothing at the highest rate it sent); ? not confirmed by the final full-length trial (stores before 2026-11-25); n/d not determined: no rate passed a full-length trial\n";
    out
}

/// The detail table: per trial, what §26.1's NDR, latency, frame-loss and back-to-back tests
/// found (rows with none of them — a run of MLRsearch alone — are left out).
fn detail_table(rows: &[Row]) -> String {
    let shown: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            r.ndr_fps.is_some()
                || r.pdr_fps.is_some()
                || r.dut_cpu_pct.is_some()
                || !r.latency.is_null()
                || r.latency_note.is_some()
                || !r.loss_curve.is_empty()
                || r.b2b_mean.is_some()
        })
        .collect();
    if shown.is_empty() {
        return String::new();
    }
    let mut d = comfy_table::Table::new();
    d.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_width(WIDTH);
    d.set_header(vec![
        "environment · direction · frame",
        "NDR / PDR fps",
        "NDR Mbit/s L2 / wire",
        "DUT CPU host / guest %",
        "latency µs mean / min / p99 / max (n)",
        "loss % by offered % of top",
        "back-to-back frames",
    ]);
    for r in shown {
        let l = &r.latency;
        let mut lat = if l["count"].as_u64().unwrap_or(0) > 0 {
            format!(
                "{} / {} / {} / {} ({})",
                num(l["mean_us"].as_f64()),
                num(l["min_us"].as_f64()),
                num(l["p99_us"].as_f64()),
                num(l["max_us"].as_f64()),
                l["count"]
            )
        } else {
            String::new()
        };
        match (&r.latency_note, lat.is_empty()) {
            (Some(n), true) => lat = n.clone(),
            (Some(n), false) => lat += &format!("; {n}"),
            (None, true) => lat = "—".into(),
            (None, false) => {}
        }
        let curve: Vec<String> =
            r.loss_curve.iter().map(|(p, _, loss)| format!("{p}:{}", fmt_num(*loss))).collect();
        let l2 = r.ndr_fps.map(|n| n * r.frame_size as f64 * 8.0 / 1e6);
        let wire = r.ndr_fps.map(|n| n * (r.frame_size as f64 + 20.0) * 8.0 / 1e6);
        d.add_row(vec![
            format!("{} · {} · {} B", r.environment, r.direction, r.frame_size),
            format!("{} / {}", num(r.ndr_fps), num(r.pdr_fps)),
            format!("{} / {}", num(l2), num(wire)),
            format!("{} / {}", num(r.dut_cpu_pct), num(r.guest_cpu_pct)),
            lat,
            if curve.is_empty() { "—".into() } else { curve.join(" ") },
            match (r.b2b_mean, r.b2b_of) {
                // Every burst passed at the longest length: a lower bound.
                (Some(_), Some((c, n, max))) if c == n => format!("≥{max}"),
                // Some did: the searched lengths' mean, and how many passed whole.
                (Some(b), Some((c, n, max))) if c > 0 => format!("{} ({c}/{n} ≥{max})", fmt_num(b)),
                (Some(b), _) => format!("{}{}", if r.b2b_capped { "≥" } else { "" }, fmt_num(b)),
                (None, _) => "—".into(),
            },
        ]);
    }
    format!("{d}\n")
}

/// The mark of a cell's figure whose repetitions any `limited`: `†` (direction out: the DUT's own
/// sending limit) or `≥` (the tester's: the DUT's figure is at least that); none otherwise.
pub fn limit_mark(reps: &[&Row], limited: fn(&Row) -> bool) -> &'static str {
    match reps.first() {
        Some(r) if reps.iter().any(|x| limited(x)) => {
            if r.direction == "out" {
                "†"
            } else {
                "≥"
            }
        }
        _ => "",
    }
}

/// One cell of the MLRsearch table: a figure per repetition → the figure (one), or the mean with
/// its interval and CV (several); ≥ where the DUT passed the highest load searched, ~ where the
/// search stopped before its width.
fn mlr_cell(reps: &[&Row], of: fn(&Row) -> Option<f64>, limited: fn(&Row) -> bool) -> String {
    let v: Vec<f64> = reps.iter().filter_map(|r| of(r)).collect();
    let mark = limit_mark(reps, limited);
    let rough = if reps.iter().any(|r| !r.mlr_converged) { "~" } else { "" };
    let missing = reps.len() - v.len();
    let nd = if missing > 0 { format!(", {missing} n/d") } else { String::new() };
    match virtperf_stats::Summary::of(&v) {
        None if reps.is_empty() => String::new(),
        None => "n/d".into(),
        Some(s) if s.n == 1 && reps.len() == 1 => format!("{mark}{}{rough}", fmt_num(s.mean)),
        Some(s) if s.ci95.is_none() => {
            format!("{mark}{}{rough} (n={}{nd}, all equal)", fmt_num(s.mean), s.n)
        }
        Some(s) => format!(
            "{mark}{}{rough} (n={}{nd}, CV {:.1} %)",
            mean_text(s.mean, s.ci95.map(|(l, h)| [l, h]), s.n),
            s.n,
            s.cv * 100.0
        ),
    }
}

/// RFC 9971's table (where `mlrsearch` ran): per environment · direction, each goal's
/// conditional throughput by frame size, the goals' parameters, and how environments compare.
fn render_mlr(rows: &[Row], sizes: &[u64], keys: &[(String, String)]) -> String {
    let Some(m) = mlr_table(rows, sizes, keys) else { return String::new() };
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_width(WIDTH);
    t.set_header(m.head);
    for r in m.rows {
        t.add_row(r);
    }
    let mut out = format!("\n{t}\n{}\n", m.legend);
    for line in compare(rows) {
        out += &line;
        out += "\n";
    }
    out
}

/// MLRsearch's table as cells, for the terminal and the page alike.
pub struct MlrTable {
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// What the figures are, the goals' parameters and the marks.
    pub legend: String,
}

/// Per environment · direction · goal, each frame size's conditional throughput (one figure, or
/// the mean with its interval and CV over repetitions); None where MLRsearch did not run.
pub fn mlr_table(rows: &[Row], sizes: &[u64], keys: &[(String, String)]) -> Option<MlrTable> {
    let first = rows.iter().find(|r| !r.mlr_goals.is_empty())?;
    let mut head = vec!["MLRsearch (RFC 9971) conditional throughput, frames/s".to_string()];
    head.extend(sizes.iter().map(|s| format!("{s} B")));
    type Of = fn(&Row) -> Option<f64>;
    type Limited = fn(&Row) -> bool;
    let goals: [(&str, Of, Limited); 2] = [
        ("NDR", |r| r.mlr_ndr_fps, |r| r.mlr_gen_limited),
        ("PDR", |r| r.mlr_pdr_fps, |r| r.mlr_pdr_gen_limited),
    ];
    let mut body = Vec::new();
    for (env, dir) in keys {
        for (goal, of, limited) in goals {
            let mut cells = vec![format!("{env} · {dir} · {goal}")];
            for s in sizes {
                let reps: Vec<&Row> = rows
                    .iter()
                    .filter(|r| &r.environment == env && &r.direction == dir && r.frame_size == *s)
                    .filter(|r| !r.mlr_goals.is_empty())
                    .collect();
                cells.push(mlr_cell(&reps, of, limited));
            }
            body.push(cells);
        }
    }
    let legend = format!(
        "each goal's conditional throughput: its relevant lower bound × (1 − the loss ratio at its exceed ratio's quantile of that load's trials), a figure that repeats where §26.1's single-trial NDR does not (docs/rfc2544.md); goals: {}; ≥ the tester's generator ran out first (its relevant upper bound lost mostly frames never sent: the DUT's figure is at least that); † the DUT's own sending limit (direction out); ~ stopped at mlr_max_trials before its width",
        first.mlr_goals.join("; ")
    );
    Some(MlrTable { head, rows: body, legend })
}

/// The frame sizes and environment · direction keys of the rows, in the order met.
pub fn sizes_and_keys(rows: &[Row]) -> (Vec<u64>, Vec<(String, String)>) {
    let mut sizes: Vec<u64> = rows.iter().map(|r| r.frame_size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.environment.clone(), r.direction.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    (sizes, keys)
}

/// How the environments' MLRsearch NDRs compare, per direction, each pair over the frame sizes
/// both measured: the geometric mean of the ratios of their means with a 95 % interval (Welch on
/// the logarithms, repetitions as the samples), and whether one beats the other. Seed 003's
/// question: does virtio beat e1000, in each direction, and by how much.
pub fn compare(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs: Vec<&str> = rows.iter().map(|r| r.direction.as_str()).collect();
    dirs.dedup();
    dirs.sort_unstable();
    dirs.dedup();
    for dir in dirs {
        let mut envs: Vec<&str> = Vec::new();
        for r in rows.iter().filter(|r| r.direction == dir && r.mlr_ndr_fps.is_some()) {
            if !envs.contains(&r.environment.as_str()) {
                envs.push(&r.environment);
            }
        }
        let logs = |env: &str, size: u64| -> Vec<f64> {
            rows.iter()
                .filter(|r| r.environment == env && r.direction == dir && r.frame_size == size)
                .filter_map(|r| r.mlr_ndr_fps.filter(|v| *v > 0.0).map(f64::ln))
                .collect()
        };
        for (i, a) in envs.iter().enumerate() {
            for b in &envs[i + 1..] {
                let mut sizes: Vec<u64> = rows.iter().map(|r| r.frame_size).collect();
                sizes.sort_unstable();
                sizes.dedup();
                // Per size: the difference of the mean logarithms, its variance and each side's
                // share with its degrees of freedom.
                let mut per: Vec<(u64, f64, f64, f64, f64, f64)> = Vec::new();
                for s in sizes {
                    let (la, lb) = (logs(a, s), logs(b, s));
                    let (Some(sa), Some(sb)) =
                        (virtperf_stats::Summary::of(&la), virtperf_stats::Summary::of(&lb))
                    else {
                        continue;
                    };
                    let va = sa.stdev.powi(2) / sa.n as f64;
                    let vb = sb.stdev.powi(2) / sb.n as f64;
                    per.push((s, sa.mean - sb.mean, va, (sa.n - 1) as f64, vb, (sb.n - 1) as f64));
                }
                if per.is_empty() {
                    continue;
                }
                let k = per.len() as f64;
                let d = per.iter().map(|p| p.1).sum::<f64>() / k;
                let v = per.iter().map(|p| p.2 + p.4).sum::<f64>() / (k * k);
                let den: f64 = per
                    .iter()
                    .map(|p| {
                        let part =
                            |var: f64, df: f64| if df > 0.0 { (var / (k * k)).powi(2) / df } else { 0.0 };
                        part(p.2, p.3) + part(p.4, p.5)
                    })
                    .sum();
                let one_rep = per.iter().all(|p| p.3 == 0.0 && p.5 == 0.0);
                let (hi_env, lo_env, d) = if d >= 0.0 { (*a, *b, d) } else { (*b, *a, -d) };
                let sizes_text: Vec<String> = per.iter().map(|p| p.0.to_string()).collect();
                let over = format!("{} B", sizes_text.join(", "));
                let emulated: Vec<&str> = [*a, *b]
                    .into_iter()
                    .filter(|e| rows.iter().any(|r| r.environment == *e && r.emulated_cpu))
                    .collect();
                let caveat = if emulated.is_empty() {
                    String::new()
                } else {
                    format!(
                        " — CPU emulated (TCG) in {}: the ratio holds the emulated CPU's cost with the device's",
                        emulated.join(" and ")
                    )
                };
                let line = if one_rep || v <= 0.0 || den <= 0.0 {
                    format!(
                        "MLRsearch NDR, direction {dir}: {hi_env} forwarded {:.2}× {lo_env}'s (geometric mean over {over}; one repetition: no interval, more reps give one){caveat}",
                        d.exp()
                    )
                } else {
                    let df = v * v / den;
                    let h = virtperf_stats::t_quantile(0.95, df) * v.sqrt();
                    let (lo, hi) = ((d - h).exp(), (d + h).exp());
                    if lo > 1.0 {
                        format!(
                            "MLRsearch NDR, direction {dir}: {hi_env} beats {lo_env}, {:.2}× its conditional throughput [{lo:.2}, {hi:.2}] (95 %, geometric mean over {over}){caveat}",
                            d.exp()
                        )
                    } else {
                        format!(
                            "MLRsearch NDR, direction {dir}: {hi_env} and {lo_env} do not differ measurably, ×{:.2} [{lo:.2}, {hi:.2}] (95 %, geometric mean over {over}){caveat}",
                            d.exp()
                        )
                    }
                };
                out.push(line);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who ran out decides what a generator-limited figure means: the tester's generator (in,
    /// reflect) bounds the DUT from below (≥); the DUT's own (out) is its sending limit (†); and
    /// a throughput no full-length trial confirmed prints n/d.
    #[test]
    fn a_generator_limit_is_attributed_by_direction() {
        let detail = |dir: &str, gen: bool, ndr: Option<f64>| {
            serde_json::json!({"rfc2544": {
                "direction": dir, "frame_size": 64, "line_max_fps": 1_488_095.0,
                "throughput": {"ndr_fps": ndr, "ndr_confirmed": ndr.is_some(), "gen_limited": gen,
                    "not_determined": if ndr.is_none() { Some("no full-length trial passed") } else { None }},
            }})
        };
        let rows: Vec<Row> =
            [("in", true, Some(400_000.0)), ("out", true, Some(300_000.0)), ("reflect", false, None)]
                .iter()
                .map(|(d, g, n)| Row::from_detail("e", &detail(d, *g, *n)).unwrap())
                .collect();
        assert!(rows[0].tester_limited() && !rows[0].sender_limited());
        assert!(rows[1].sender_limited() && !rows[1].tester_limited());
        let text = render(&rows);
        let line = |dir: &str| {
            text.lines().find(|l| l.contains(&format!("e · {dir}"))).unwrap_or_default().to_string()
        };
        assert!(line("in").contains("≥400"), "{text}");
        assert!(
            line("out").contains("300") && line("out").contains('†') && !line("out").contains('≥'),
            "{text}"
        );
        assert!(line("reflect").contains("n/d"), "{text}");
    }

    /// A back-to-back figure says what it rests on: the generator's gap, broken bursts, and where
    /// the shortest lossy burst lost its frames.
    #[test]
    fn back_to_back_says_its_gap_and_where_frames_were_lost() {
        let tail =
            |n: u64| LossAt { lost: 1, first: Some(n), last: Some(n), runs: vec![[n, n]], run_count: 1 };
        let d = serde_json::json!({"rfc2544": {
            "direction": "in", "frame_size": 64, "line_max_fps": 1_488_095.0,
            "back_to_back": {"rate_fps": 900_000.0, "gap": "generator", "burst_fps": 912_345.0,
                "max_burst": 90_000, "bursts": [1200, 0], "mean": 600.0, "broken": 1,
                "trials": [
                    {"passed": 1200, "failed": 1300, "failed_by": "loss", "lost_at": tail(1300)},
                    {"passed": 0, "failed": 1, "failed_by": "loss", "lost_at": tail(1)},
                ]},
        }});
        let text = render(&[Row::from_detail("e", &d).unwrap()]);
        assert!(text.contains("generator's minimum gap, 912345 fps (the line's: 1488095 fps)"), "{text}");
        assert!(text.contains("1 burst(s) the generator broke up"), "{text}");
        assert!(
            text.contains("shortest burst that lost frames: 1 frames, lost 1 of 1: #1 (head to tail); the last frame of the burst was lost in 2 of 2 trials"),
            "{text}"
        );
    }

    /// Frames the DUT's own socket dropped are said apart from the path's loss, with their share
    /// of what the steps lost (measured on the host, 1518 B in: 143 772 of 146 921 frames lost in
    /// a quick MLRsearch were the receiving socket's, polled from /proc/net/udp).
    #[test]
    fn the_duts_socket_drops_are_said_with_their_share_of_the_loss() {
        let d = serde_json::json!({"rfc2544": {
            "direction": "in", "frame_size": 1518, "line_max_fps": 81_274.0,
            "steps": [
                {"test": "mlrsearch", "phase": "trial", "sent": 40_000, "received": 39_800, "dut_drops": 190},
                {"test": "mlrsearch", "phase": "trial", "sent": 20_000, "received": 20_000},
            ],
        }});
        let row = Row::from_detail("host", &d).unwrap();
        assert_eq!((row.lost, row.dut_drops), (200, 190));
        let n = notes(std::slice::from_ref(&row));
        assert!(
            n.iter().any(|l| l.starts_with("host · in · 1518 B: of the 200 frames its steps lost, 190 (95 %) were dropped at the DUT's own receiving socket (the kernel's default buffer)")
                && l.ends_with("dut_rcvbuf gives it a larger queue (docs/rfc2544.md)")),
            "{n:?}"
        );
        // Repetitions of a cell are one line, their losses summed; the buffer each DUT kept is said.
        let mut d2 = d.clone();
        d2["rfc2544"]["dut_rcvbuf"] = serde_json::json!(212_992);
        let n = notes(&[row, Row::from_detail("host", &d2).unwrap()]);
        let lines: Vec<&String> = n.iter().filter(|l| l.contains("receiving socket")).collect();
        assert_eq!(lines.len(), 1, "{n:?}");
        assert!(
            lines[0].contains("of the 400 frames its steps lost over 2 repetitions, 380 (95 %)"),
            "{n:?}"
        );
        assert!(lines[0].contains("(208KiB buffer, the kernel's default)"), "{n:?}");
        // Asked for a buffer: what each environment kept, and one that could not have it.
        let asked = |env: &str, kept: u64| {
            let mut d = d.clone();
            d["rfc2544"]["dut_rcvbuf"] = serde_json::json!(kept);
            d["rfc2544"]["dut_rcvbuf_asked"] = serde_json::json!(4u64 << 20);
            Row::from_detail(env, &d).unwrap()
        };
        let n = notes(&[asked("host", 8 << 20), asked("container", 8 << 20), asked("gvisor", 4 << 20)]);
        assert!(
            n.iter().any(|l| l
                == "the DUT's receiving buffer: dut_rcvbuf asked 4MiB (the kernel keeps twice that); kept: host 8MiB, container 8MiB, gvisor 4MiB (less: not forced there)"),
            "{n:?}"
        );
        assert!(
            n.iter().any(|l| l.contains("(8MiB buffer, as dut_rcvbuf asked)") && !l.contains("gives it")),
            "{n:?}"
        );
        let quiet =
            Row::from_detail("host", &serde_json::json!({"rfc2544": {"direction": "in", "frame_size": 64}}))
                .unwrap();
        assert!(notes(&[quiet]).is_empty());
    }

    /// Repetitions of a cell are summarised (mean ± interval of their NDRs, n); a loss curve that
    /// lost frames at or below its own NDR, or that loses more at a lower rate, is said.
    #[test]
    fn repetitions_and_contradictions_are_shown() {
        let row = |ndr: f64, curve: Vec<(u64, f64, f64)>| Row {
            environment: "e".into(),
            direction: "in".into(),
            frame_size: 64,
            quick: true,
            line_max_fps: 1_488_095.0,
            ndr_fps: Some(ndr),
            pdr_fps: None,
            ndr_confirmed: true,
            ndr_undetermined: false,
            gen_limited: false,
            dut_cpu_pct: None,
            guest_cpu_pct: None,
            latency: Value::Null,
            latency_note: None,
            loss_curve: curve,
            b2b_mean: None,
            b2b_capped: false,
            b2b_of: None,
            b2b_notes: Vec::new(),
            tester_drops: 0,
            lost: 0,
            dut_drops: 0,
            tester_bound: false,
            ran_throughput: true,
            steps: 10,
            ..Default::default()
        };
        let good = vec![(100, 200_000.0, 5.0), (90, 180_000.0, 1.0), (80, 160_000.0, 0.0)];
        let text =
            render(&[row(170_000.0, good.clone()), row(172_000.0, good.clone()), row(168_000.0, good)]);
        assert!(text.contains("(n=3)") && text.contains("NDR over 3 repetitions"), "{text}");
        assert!(!text.contains("┘⚠"), "warnings start on a line of their own: {text}");
        assert!(!text.contains('⚠'), "{text}");
        // Lost 0.5 % at 160 k with an NDR of 170 k; and more at 80 % than at 90 %.
        let bad = vec![(100, 200_000.0, 5.0), (90, 180_000.0, 1.0), (80, 160_000.0, 2.5)];
        let text = render(&[row(170_000.0, bad)]);
        assert!(text.contains("at or below the NDR"), "{text}");
        assert!(text.contains("not monotonic"), "{text}");
        // Nothing lost at 180 k, more than 1.5× an NDR of 100 k.
        let text = render(&[row(
            100_000.0,
            vec![(100, 200_000.0, 5.0), (90, 180_000.0, 0.0), (80, 160_000.0, 0.0)],
        )]);
        assert!(text.contains("lost nothing at 180000 fps") && text.contains("1.8× the NDR"), "{text}");
    }

    /// MLRsearch's figures get a table of their own (mean, interval and CV over repetitions, the
    /// goals' parameters), the repeatability line sets its CV beside the strict NDR's, and the
    /// environments compare per direction: a clear gap is "beats" with its interval, an emulated
    /// CPU is said, and one repetition gives no interval.
    #[test]
    fn mlrsearch_figures_repeat_and_environments_compare() {
        let row = |env: &str, dir: &str, size: u64, ndr: f64, mlr: f64| Row {
            environment: env.into(),
            kind: if env == "host" { "native" } else { "qemu" }.into(),
            emulated_cpu: env != "host",
            direction: dir.into(),
            frame_size: size,
            line_max_fps: 1_488_095.0,
            ndr_fps: Some(ndr),
            ndr_confirmed: true,
            mlr_ndr_fps: Some(mlr),
            mlr_pdr_fps: Some(mlr * 1.02),
            mlr_converged: true,
            mlr_goals: vec!["NDR — loss ratio 0 %, duration sum 5 s".into(), "PDR — loss ratio 0.5 %".into()],
            mlr_trials: 20,
            ..Default::default()
        };
        let mut rows = Vec::new();
        for (i, strict) in [32_000.0, 120_000.0, 72_000.0].iter().enumerate() {
            let j = i as f64;
            rows.push(row("host", "in", 64, *strict, 150_000.0 + 2_000.0 * j));
            rows.push(row("virtio", "in", 64, 20_000.0, 40_000.0 + 500.0 * j));
            rows.push(row("e1000", "in", 64, 10_000.0, 20_000.0 + 400.0 * j));
            rows.push(row("virtio", "in", 1518, 20_000.0, 30_000.0 + 300.0 * j));
            rows.push(row("e1000", "in", 1518, 10_000.0, 29_000.0 + 900.0 * j));
        }
        let text = render(&rows);
        assert!(text.contains("MLRsearch (RFC 9971)"), "{text}");
        assert!(text.contains("host · in · NDR") && text.contains("host · in · PDR"), "{text}");
        assert!(text.contains("NDR — loss ratio 0 %, duration sum 5 s; PDR — loss ratio 0.5 %"), "{text}");
        let rep = text.lines().find(|l| l.starts_with("host · in · 64 B: NDR over 3")).expect(&text);
        assert!(
            rep.contains("(CV 59.0 %)")
                && rep.contains("MLRsearch's NDR (conditional throughput) over 3 repetitions"),
            "{rep}"
        );
        assert!(rep.ends_with("(CV 1.3 %)"), "{rep}");
        let cmp = compare(&rows);
        let line = |a: &str, b: &str| {
            cmp.iter()
                .find(|l| l.contains(a) && l.contains(b))
                .cloned()
                .unwrap_or_else(|| panic!("{a} {b}: {cmp:?}"))
        };
        // virtio: ×2 at 64 B and ×1.03 at 1518 B; a geometric mean of about 1.44, clear of 1.
        let ve = line("virtio", "e1000");
        assert!(ve.contains("virtio beats e1000, 1.4") && ve.contains("over 64, 1518 B"), "{ve}");
        assert!(ve.contains("CPU emulated (TCG) in virtio and e1000"), "{ve}");
        // The host only measured 64 B: compared there alone.
        assert!(line("host beats virtio", "over 64 B").contains("3.7"), "{cmp:?}");
        // Equal figures do not differ; one repetition has no interval.
        let same: Vec<Row> = [("a", 100.0), ("a", 104.0), ("b", 101.0), ("b", 103.0)]
            .iter()
            .map(|(e, v)| Row { emulated_cpu: false, ..row(e, "out", 64, 1.0, *v) })
            .collect();
        let c = compare(&same);
        assert!(
            c[0].contains("a and b do not differ measurably")
                || c[0].contains("b and a do not differ measurably"),
            "{c:?}"
        );
        assert!(!c[0].contains("emulated"), "{c:?}");
        let c = compare(&[row("a", "out", 64, 1.0, 200.0), row("b", "out", 64, 1.0, 100.0)]);
        assert!(c[0].contains("a forwarded 2.00× b's") && c[0].contains("no interval"), "{c:?}");
    }

    /// A run of MLRsearch alone (`tests = [mlrsearch]`) ran no §26.1 test: its report has the
    /// MLRsearch table, and neither a strict table of `n/d` nor a detail table of dashes.
    #[test]
    fn mlrsearch_alone_shows_only_what_ran() {
        let d = serde_json::json!({"rfc2544": {
            "direction": "in", "frame_size": 1518, "line_max_fps": 81_274.0, "tests": ["mlrsearch"],
            "mlrsearch": {"goals": [
                {"name": "NDR", "conditional_fps": 60_000.0, "converged": true},
                {"name": "PDR", "conditional_fps": 70_000.0, "converged": true},
            ]},
            "steps": [{"test": "throughput", "phase": "probe", "sent": 100, "received": 100}],
        }});
        let row = Row::from_detail("host", &d).unwrap();
        assert!(!row.ran_throughput);
        let text = render(&[row.clone(), row]);
        assert!(text.contains("MLRsearch (RFC 9971)") && text.contains("60000"), "{text}");
        assert!(!text.contains("throughput, NDR frames/s") && !text.contains("n/d"), "{text}");
        assert!(text.matches('┌').count() == 1 && !text.contains("latency: round trip"), "{text}");
        // With §26.1's throughput test, both tables.
        let mut d = d.clone();
        d["rfc2544"]["throughput"] = serde_json::json!({"ndr_fps": 50_000.0, "ndr_confirmed": true});
        let text = render(&[Row::from_detail("host", &d).unwrap()]);
        assert!(text.contains("throughput, NDR frames/s") && text.matches('┌').count() == 3, "{text}");
    }

    /// A trial's detail comes from the agent, which runs inside an untrusted guest: reading any
    /// JSON it could send never panics.
    #[test]
    fn fuzz_detail_from_the_agent() {
        use virtperf_proto::fuzzing::{fuzz, json_value};
        fuzz("rfc2544 detail", json_value(), |v| {
            let _ = Row::from_detail("dut", &v);
            let _ = Row::from_detail("dut", &serde_json::json!({ "rfc2544": v }));
            Ok(())
        });
    }
}
