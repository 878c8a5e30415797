//! RFC 2544's answer at a glance: one line per environment · direction · frame size with the
//! figures a reader came for (§26.1's NDR, RFC 9971's conditional throughput with its spread over
//! the repetitions, the PDR, latency, loss at the top rate, back-to-back), what the profile left
//! out said first, a line per cell whose repetitions did not repeat and what moved with them, and
//! where the time went. The tables of `rfc2544.rs` follow it with every figure.

use super::rfc2544::{limit_mark as mark, Row};
use super::words::{human_secs, wrap, WIDTH};

/// A cell's repetitions repeat when their coefficient of variation is at most this.
pub const REPEATS_CV: f64 = 0.10;

/// A rate as a person reads it: `1.49M`, `71.3k`, `812`.
pub fn rate(x: f64) -> String {
    let a = x.abs();
    let sig = |v: f64| {
        let digits = if v == 0.0 { 0 } else { (2 - v.abs().log10().floor() as i32).clamp(0, 2) as usize };
        format!("{v:.digits$}")
    };
    if a >= 1e6 {
        format!("{}M", sig(x / 1e6))
    } else if a >= 1e3 {
        format!("{}k", sig(x / 1e3))
    } else {
        format!("{x:.0}")
    }
}

/// A loss as a person reads it: `0 %`, `0.53 %`, `3.8 %`, `99 %`.
fn pct(x: f64) -> String {
    match x {
        0.0 => "0 %".into(),
        x if x >= 10.0 => format!("{x:.0} %"),
        x if x >= 1.0 => format!("{x:.1} %"),
        x => format!("{x:.2} %"),
    }
}

/// `71.3k` (one), `45.1k (17.0k–62.0k)` (several), `n/d` (none), marked `≥`/`†`.
fn spread(v: &[f64], mark: &str, missing: usize) -> String {
    let nd = if missing > 0 { format!(" +{missing} n/d") } else { String::new() };
    match virtperf_stats::Summary::of(v) {
        None if missing > 0 => "n/d".into(),
        None => "—".into(),
        Some(s) if s.n == 1 => format!("{mark}{}{nd}", rate(s.mean)),
        Some(s) if rate(s.min) == rate(s.max) => format!("{mark}{} ×{}{nd}", rate(s.mean), s.n),
        Some(s) => format!("{mark}{} ({}–{}){nd}", rate(s.mean), rate(s.min), rate(s.max)),
    }
}

/// One cell: its repetitions.
struct Cell<'a> {
    label: String,
    reps: Vec<&'a Row>,
}

fn cells(rows: &[Row]) -> Vec<Cell<'_>> {
    let mut out: Vec<Cell> = Vec::new();
    for r in rows {
        let label = format!("{} · {} · {} B", r.environment, r.direction, r.frame_size);
        match out.iter_mut().find(|c| c.label == label) {
            Some(c) => c.reps.push(r),
            None => out.push(Cell { label, reps: vec![r] }),
        }
    }
    out
}

fn cv(v: &[f64]) -> Option<f64> {
    virtperf_stats::Summary::of(v).filter(|s| s.n >= 2).map(|s| s.cv)
}

/// The profile the procedures ran with, in words — for a quick run what it leaves out, the
/// first line a reader meets. Parts a store did not record (before 2026-12-03) are left out.
pub fn profile(rows: &[Row]) -> String {
    let Some(r) = rows.iter().find(|r| r.quick).or(rows.first()) else { return String::new() };
    let ms = |x: u64| if x >= 1000 { format!("{} s", x as f64 / 1e3) } else { format!("{x} ms") };
    let mut parts = Vec::new();
    if r.trial_ms > 0 {
        parts.push(format!(
            "{} final trials, {} search steps at a {} % resolution",
            ms(r.trial_ms),
            ms(r.search_ms),
            r.resolution_pct
        ));
    }
    if r.mlr_final_ms > 0 {
        parts.push(format!(
            "MLRsearch on {} trials summed to {} a load at a {} % width{}",
            ms(r.mlr_final_ms),
            ms(r.mlr_sum_ms),
            (r.mlr_width * 1e4).round() / 100.0,
            if r.mlr_shared > 0 { ", sharing §26.1's trials" } else { "" }
        ));
    }
    if r.drain_ms > 0 {
        parts.push(format!("{} settling and {} draining around each trial", ms(r.settle_ms), ms(r.drain_ms)));
    }
    if r.b2b_trials > 0 {
        parts.push(format!("{} back-to-back searches", r.b2b_trials));
    }
    let what = if parts.is_empty() { String::new() } else { format!(": {}", parts.join(", ")) };
    if r.quick {
        format!(
            "QUICK profile, a first look{what} — short trials hide slow queue build-up, so these are upper \
             bounds of what the RFC's 60 s trials find"
        )
    } else {
        format!("the full procedure{what}")
    }
}

/// The answer: empty without RFC 2544 rows.
pub fn render(rows: &[Row]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let width = WIDTH as usize;
    let mut out = String::from("\n");
    out += &wrap(&format!("RFC 2544, the answer in frames/s — {}:", profile(rows)), width);
    let cells = cells(rows);
    let label_w = cells.iter().map(|c| c.label.chars().count()).max().unwrap_or(0).max(11);
    let strict = rows.iter().any(|r| r.ran_throughput);
    let mlr = rows.iter().any(|r| !r.mlr_goals.is_empty());
    let mut head = vec![format!("{:<label_w$}", "")];
    let cols: [(&str, usize, bool); 6] = [
        ("NDR §26.1", 9, strict),
        ("NDR RFC 9971", 20, mlr),
        ("PDR", 7, strict || mlr),
        ("p99 µs", 7, rows.iter().any(|r| !r.latency.is_null() || r.latency_note.is_some())),
        ("top loss", 8, rows.iter().any(|r| !r.loss_curve.is_empty())),
        ("back-to-back", 12, rows.iter().any(|r| r.b2b_mean.is_some())),
    ];
    for (name, w, on) in cols {
        if on {
            head.push(format!("{name:>w$}"));
        }
    }
    out += head.join("  ").trim_end();
    out += "\n";
    let mut spreads = Vec::new();
    let mut one_rep = false;
    for c in &cells {
        let reps = &c.reps;
        one_rep |= reps.len() == 1;
        let ndr: Vec<f64> = reps.iter().filter_map(|r| r.ndr_fps).collect();
        let ndr_missing = reps.iter().filter(|r| r.ran_throughput && r.ndr_fps.is_none()).count();
        let cond: Vec<f64> = reps.iter().filter_map(|r| r.mlr_ndr_fps).collect();
        let cond_missing = reps.iter().filter(|r| !r.mlr_goals.is_empty() && r.mlr_ndr_fps.is_none()).count();
        let pdr: Vec<f64> = reps.iter().filter_map(|r| r.mlr_pdr_fps.or(r.pdr_fps)).collect();
        let p99: Vec<f64> = reps.iter().filter_map(|r| r.latency["p99_us"].as_f64()).collect();
        let top_loss: Vec<f64> = reps.iter().filter_map(|r| r.loss_curve.first().map(|p| p.2)).collect();
        let b2b: Vec<f64> = reps.iter().filter_map(|r| r.b2b_mean).collect();
        let mean = |v: &[f64]| virtperf_stats::Summary::of(v).map(|s| s.mean);
        let mut line = vec![format!("{:<label_w$}", c.label)];
        let mut push = |on: bool, w: usize, text: String| {
            if on {
                line.push(format!("{text:>w$}"));
            }
        };
        // §26.1's NDR by its mean (its spread, where it did not repeat, in a line below).
        let strict_mark = mark(reps, Row::tester_limited_or_sender);
        push(
            strict,
            9,
            match mean(&ndr) {
                Some(m) => format!("{strict_mark}{}", rate(m)),
                None if ndr_missing > 0 => "n/d".into(),
                None => "—".into(),
            },
        );
        let cond_mark = mark(reps, |r| r.mlr_gen_limited);
        push(mlr, 20, spread(&cond, cond_mark, cond_missing));
        push(strict || mlr, 7, mean(&pdr).map_or("—".into(), rate));
        push(
            cols[3].2,
            7,
            match mean(&p99) {
                Some(p) if p >= 100.0 => format!("{p:.0}"),
                Some(p) => format!("{p:.1}"),
                None if reps.iter().any(|r| r.latency_note.is_some()) => "n/d".into(),
                None => "—".into(),
            },
        );
        push(cols[4].2, 8, mean(&top_loss).map_or("—".into(), pct));
        push(
            cols[5].2,
            12,
            match mean(&b2b) {
                Some(b) if reps.iter().all(|r| r.b2b_of.is_some_and(|(c, n, _)| c == n)) => {
                    format!("≥{}", rate(b))
                }
                Some(b) => rate(b),
                None => "—".into(),
            },
        );
        out += line.join("  ").trim_end();
        out += "\n";
        // The repetitions that did not repeat, and what moved with them.
        for (name, v, other) in
            [("the conditional NDR (RFC 9971)", &cond, &ndr), ("§26.1's NDR", &ndr, &cond)]
        {
            let Some(x) = cv(v) else { continue };
            if x <= REPEATS_CV {
                continue;
            }
            let s = virtperf_stats::Summary::of(v).map(|s| (s.min, s.max)).unwrap_or_default();
            let mut why = Vec::new();
            if let Some(o) = cv(other) {
                why.push(format!(
                    "{} CV {:.0} %",
                    if name.starts_with('§') { "the conditional NDR's" } else { "§26.1's" },
                    o * 100.0
                ));
            }
            let gen: Vec<f64> = reps.iter().map(|r| r.generator_fps).filter(|g| *g > 0.0).collect();
            if let Some(g) = virtperf_stats::Summary::of(&gen).filter(|g| g.n >= 2 && g.min > 0.0) {
                let sender =
                    if reps[0].direction == "out" { "the DUT's generator" } else { "the tester's generator" };
                why.push(format!(
                    "{sender} reached {}–{} fps in its probes ({:.1}×)",
                    rate(g.min),
                    rate(g.max),
                    g.max / g.min
                ));
            }
            let (lost, dropped): (u64, u64) =
                reps.iter().fold((0, 0), |a, r| (a.0 + r.lost, a.1 + r.dut_drops));
            if lost > 0 && dropped * 5 >= lost && reps[0].direction != "out" {
                why.push(format!(
                    "the DUT's own receiving socket dropped {:.0} % of the frames its steps lost (its queue full: \
                     dut_rcvbuf gives it a larger one)",
                    dropped as f64 / lost as f64 * 100.0
                ));
            }
            spreads.push(format!(
                "{}: {name} did not repeat on this host — {}–{} fps over {} repetitions (CV {:.0} %){}",
                c.label,
                rate(s.0),
                rate(s.1),
                v.len(),
                x * 100.0,
                if why.is_empty() { String::new() } else { format!("; beside it: {}", why.join("; ")) }
            ));
            break;
        }
    }
    for s in &spreads {
        out += &wrap(&format!("! {s}"), width);
    }
    let mut notes = Vec::new();
    if mlr && one_rep {
        notes.push(
            "one repetition a cell: how well a figure repeats here is unknown (--reps 3 says)".to_string(),
        );
    } else if mlr && spreads.is_empty() {
        notes.push(format!("every cell's repetitions repeat within a CV of {:.0} %", REPEATS_CV * 100.0));
    }
    let mut legend = Vec::new();
    if mlr {
        legend.push(
            "NDR RFC 9971: MLRsearch's conditional throughput at loss ratio 0, its range the repetitions'",
        );
        legend.push("PDR: its goal at its loss ratio (§26.1's where MLRsearch did not run)");
    }
    if cols[3].2 {
        legend.push("p99: round trip at the NDR");
    }
    if cols[4].2 {
        legend.push("top loss: frames lost at the highest rate searched (§26.3)");
    }
    legend.push(
        "≥ the tester ran out first (the DUT's figure is at least that); † the DUT's own sending limit \
         (direction out); n/d no rate passed",
    );
    notes.push(legend.join("; "));
    let wall: f64 = rows.iter().map(|r| r.wall_ms).sum();
    let trial: f64 = rows.iter().map(|r| r.trial_time_ms).sum();
    if wall > 0.0 {
        let tail = rows.iter().filter_map(|r| r.tail_ms).reduce(f64::max);
        let drain = rows.iter().map(|r| r.drain_ms).max().unwrap_or(0);
        notes.push(format!(
            "time: {} for {} procedures, {:.0} % of it trials; the rest learning frames, draining, settling and \
             starting each trial on both ends{}",
            human_secs(wall / 1e3),
            rows.len(),
            trial / wall * 100.0,
            match tail {
                Some(t) if drain > 0 => {
                    format!(" (a lossless step's last frame needed at most {t:.1} ms of its {drain} ms drain)")
                }
                _ => String::new(),
            }
        ));
    }
    for n in notes {
        out += &wrap(&n, width);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(env: &str, cond: f64, ndr: f64, gen: f64) -> Row {
        Row {
            environment: env.into(),
            direction: "in".into(),
            frame_size: 64,
            quick: true,
            ran_throughput: true,
            ndr_fps: Some(ndr),
            mlr_ndr_fps: Some(cond),
            mlr_pdr_fps: Some(cond * 1.1),
            mlr_goals: vec!["NDR — …".into()],
            generator_fps: gen,
            trial_ms: 500,
            search_ms: 250,
            resolution_pct: 5.0,
            mlr_final_ms: 250,
            mlr_sum_ms: 1000,
            mlr_width: 0.05,
            mlr_shared: 8,
            settle_ms: 10,
            drain_ms: 20,
            b2b_trials: 2,
            wall_ms: 10_000.0,
            trial_time_ms: 8_000.0,
            tail_ms: Some(0.4),
            lost: 100,
            dut_drops: 70,
            ..Default::default()
        }
    }

    #[test]
    fn rates_read_as_a_person_says_them() {
        assert_eq!(
            (rate(1_488_095.0), rate(71_343.0), rate(812.4), rate(9_990.0)),
            ("1.49M".into(), "71.3k".into(), "812".into(), "9.99k".into())
        );
    }

    /// The answer leads with what quick left out, one line a cell within 100 columns, says which
    /// cells did not repeat with what moved beside them, and where the time went.
    #[test]
    fn the_answer_says_the_profile_the_spread_and_the_time() {
        let rows = vec![
            row("native", 17_000.0, 44_000.0, 134_000.0),
            row("native", 58_000.0, 108_000.0, 397_000.0),
            row("native", 62_000.0, 90_000.0, 300_000.0),
            row("container", 60_000.0, 60_000.0, 300_000.0),
            row("container", 61_000.0, 60_500.0, 301_000.0),
            row("container", 62_000.0, 61_000.0, 302_000.0),
        ];
        let text = render(&rows);
        println!("{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        // Prose as a reader reads it, across the lines it wraps on.
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("QUICK profile, a first look: 500 ms final trials, 250 ms search steps"),
            "{text}"
        );
        assert!(flat.contains("sharing §26.1's trials"), "{text}");
        let native = text.lines().find(|l| l.starts_with("native · in · 64 B")).unwrap();
        assert!(native.contains("45.7k (17.0k–62.0k)"), "{native}");
        assert!(
            flat.contains("native · in · 64 B: the conditional NDR (RFC 9971) did not repeat on this host — 17.0k–62.0k fps over 3 repetitions (CV 55 %)"),
            "{text}"
        );
        assert!(flat.contains("the tester's generator reached 134k–397k fps in its probes (3.0×)"), "{text}");
        assert!(flat.contains("dropped 70 %"), "{text}");
        assert!(!text.contains("container · in · 64 B: the"), "the container repeated: {text}");
        assert!(flat.contains("time: 60 s for 6 procedures, 80 % of it trials"), "{text}");
        assert!(
            flat.contains("a lossless step's last frame needed at most 0.4 ms of its 20 ms drain"),
            "{text}"
        );
        // One repetition: said, not guessed.
        let text = render(&rows[..1]).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains("one repetition a cell"), "{text}");
        assert!(!text.contains("did not repeat"), "{text}");
        assert_eq!(render(&[]), "");
    }
}
