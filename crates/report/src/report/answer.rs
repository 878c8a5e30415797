//! The answer at a glance: what the terminal prints first and the page puts at its top.
//!
//! A ratio becomes words a person uses — "163× slower ±30 %", "≈ same ±3 %", "inconclusive ±60 %"
//! — by one rule ([`verdict`]): "≈ same" only when the whole interval lies within the run's target
//! (±5 % unless precision mode set another), "inconclusive" when it holds 1 but reaches beyond the
//! target, "N× slower / faster" (or "N % slower" below 1.5×) when it excludes 1, the direction from
//! the metric (a rate that halves is 2× slower). An interval that is missing, unbounded or reaches
//! below zero is never printed as numbers. Counts (drops, retransmits, losses) are not ratios and
//! are not in the answer; they are in `--full` with their totals.
//!
//! The summary ([`render`]) leads with the caveats that change how to read the numbers (an
//! emulated CPU, the host itself, how many ratios reached the target, host-wide slowdowns,
//! receivers that set a figure), then one line per environment by family, then one matrix of
//! every headline metric × environment; every other figure is in `--full` and the page.

use std::collections::BTreeMap;

use virtperf_record::Family;

use super::costs::{cost, cost_rows, family_costs};
use super::words::{fmt_num, fmt_value, runtime_emulated};
use super::{Report, ResultRow};

/// What an interval says about a cost (environment against its baseline, > 1 = slower), by one
/// rule, the same in the terminal, the page, the JSON and docs/methodology.md ("Verdicts"):
/// - `Slower` / `Faster`: its stated (95 %) interval excludes 1;
/// - `Same` ("≈ same"): else, when the equivalence test's interval (90 %: two one-sided tests at
///   5 %, TOST) lies within ±the run's target of 1;
/// - `Inconclusive`: neither — with the launches that would settle it, where they can be said.
///
/// `from`–`to` is the stated interval, in the cost's terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Same {
        cost: f64,
        from: f64,
        to: f64,
    },
    Inconclusive {
        cost: f64,
        from: f64,
        to: f64,
        more: Option<u64>,
    },
    Slower {
        cost: f64,
        from: f64,
        to: f64,
    },
    Faster {
        cost: f64,
        from: f64,
        to: f64,
    },
    /// No usable interval: why, in words.
    NoInterval {
        why: &'static str,
    },
}

/// The words for a ratio each of whose pairs stalled.
pub const EVERY_TRIAL_STALLED: &str = "every pair stalled";

/// The words for an unbounded interval, or one reaching below zero.
pub const BASELINE_VARIES: &str = "the baseline varies too much";

/// An interval that is one: finite, above zero, in order.
fn usable(ci: Option<[f64; 2]>) -> Option<[f64; 2]> {
    ci.filter(|[l, h]| l.is_finite() && h.is_finite() && *l > 0.0 && h >= l)
}

/// The verdict on a cost (`> 1` slower), its stated interval `ci` and its equivalence interval
/// `eq` (90 %; the stated one, stricter, where there is none), against a target half-width
/// (`target`, a fraction: 0.05 for ±5 %).
pub fn verdict(cost: f64, ci: Option<[f64; 2]>, eq: Option<[f64; 2]>, target: f64) -> Verdict {
    let Some(c) = ci else {
        return Verdict::NoInterval { why: "no interval" };
    };
    let Some([lo, hi]) = usable(Some(c)).filter(|_| cost.is_finite() && cost > 0.0) else {
        return Verdict::NoInterval { why: BASELINE_VARIES };
    };
    if lo > 1.0 {
        return Verdict::Slower { cost, from: lo, to: hi };
    }
    if hi < 1.0 {
        return Verdict::Faster { cost, from: lo, to: hi };
    }
    let [a, b] = usable(eq).unwrap_or([lo, hi]);
    if a >= 1.0 - target && b <= 1.0 + target {
        Verdict::Same { cost, from: lo, to: hi }
    } else {
        Verdict::Inconclusive { cost, from: lo, to: hi, more: None }
    }
}

/// How many more launches (blocks of pairs) would likely settle an inconclusive cost, from its
/// `blocks` so far: the half-width shrinks as 1/√blocks, until the stated interval excludes 1
/// (its estimate staying) or the equivalence interval fits within the target, whichever comes
/// first. None where neither can (an estimate on the target's edge).
pub fn settle(cost: f64, ci: [f64; 2], eq: Option<[f64; 2]>, target: f64, blocks: usize) -> Option<u64> {
    let m = cost.ln();
    let h95 = (ci[1].ln() - ci[0].ln()) / 2.0;
    let h90 = usable(eq).map_or(h95 * 0.84, |[a, b]| (b.ln() - a.ln()) / 2.0);
    // Each aim with a tenth to spare: an interval that just reaches it would not stay there.
    let differ = (m.abs() > 1e-9).then(|| (h95 / (0.9 * m.abs())).powi(2));
    let room = ((1.0 + target).ln() - m).min(m - (1.0 - target).ln());
    let same = (room > 1e-9).then(|| (h90 / (0.9 * room)).powi(2));
    let factor = [differ, same].into_iter().flatten().fold(f64::INFINITY, f64::min);
    (factor.is_finite() && factor > 1.0).then(|| ((blocks.max(1) as f64) * (factor - 1.0)).ceil() as u64)
}

/// The verdict on one result row's ratio, or None where it has none (the baseline, a metric
/// with no direction).
pub fn row_verdict(x: &ResultRow, target: f64) -> Option<Verdict> {
    overhead_verdict(x.overhead.as_ref()?, x.better, x.launches, target)
}

/// The verdict on a ratio `o` of a metric whose `better` direction is given, measured over
/// `launches` (a knob's variant against its default, as a row's against its baseline).
pub fn overhead_verdict(o: &super::Overhead, better: &str, launches: usize, target: f64) -> Option<Verdict> {
    if better == "neither" {
        return None;
    }
    if o.ci.is_none() && o.no_ci == Some(super::NO_CI_EVERY_TRIAL_STALLED) {
        return Some(Verdict::NoInterval { why: EVERY_TRIAL_STALLED });
    }
    if o.ci.is_none() && o.no_ci == Some(virtperf_stats::NO_CI_UNBOUNDED) {
        return Some(Verdict::NoInterval { why: BASELINE_VARIES });
    }
    if !(o.ratio.is_finite() && o.ratio > 0.0) {
        return Some(Verdict::NoInterval { why: BASELINE_VARIES });
    }
    if better == "higher" && o.ci.is_some_and(|[l, _]| l <= 0.0) {
        return Some(Verdict::NoInterval { why: BASELINE_VARIES });
    }
    let (c, ci) = cost(o.ratio, o.ci, better);
    let (_, eq) = cost(o.ratio, o.ci90, better);
    Some(match verdict(c, ci, eq, target) {
        Verdict::Inconclusive { cost, from, to, .. } => {
            let blocks = o.blocks.unwrap_or(launches.max(1));
            Verdict::Inconclusive { cost, from, to, more: settle(cost, [from, to], eq, target, blocks) }
        }
        v => v,
    })
}

/// What a ratio set apart, in words: "1 of 4 pairs set apart (stalled: 4887×); with it, 21×".
pub fn set_apart_words(sa: &super::SetApart) -> String {
    let n = sa.stalled + sa.burst + sa.beyond;
    let whys: Vec<&str> = [
        (sa.stalled, "stalled"),
        (sa.burst, "a slowdown on one side"),
        (sa.beyond, "far outside the others"),
    ]
    .into_iter()
    .filter(|(k, _)| *k > 0)
    .map(|(_, w)| w)
    .collect();
    let why = whys.join(" or ");
    let each: Vec<String> = sa.ratios.iter().map(|r| format!("×{}", fmt_factor(*r))).collect();
    format!(
        "{n} of {} pair{} set apart ({why}: {}); with {}, ×{}",
        sa.of,
        if sa.of == 1 { "" } else { "s" },
        each.join(", "),
        if n == 1 { "it" } else { "them" },
        fmt_factor(sa.ratio_with)
    )
}

/// A verdict as the JSON carries it, in the same words ([`Verdict::phrase`], [`Verdict::word`]).
pub fn json_verdict(v: &Verdict, reading: Reading) -> super::RowVerdict {
    let (cost, cost_ci, more) = match *v {
        Verdict::Same { cost, from, to }
        | Verdict::Slower { cost, from, to }
        | Verdict::Faster { cost, from, to } => (Some(cost), Some([from, to]), None),
        Verdict::Inconclusive { cost, from, to, more } => (Some(cost), Some([from, to]), more),
        Verdict::NoInterval { .. } => (None, None, None),
    };
    super::RowVerdict {
        word: v.word(reading),
        phrase: v.phrase(reading).replace('\u{a0}', " "),
        set_apart: None,
        cost,
        cost_ci,
        more_launches: more,
    }
}

/// A ratio as numbers, with no verdict: "×3.19 [1.97, 5.15]" (its interval only where it is
/// above zero and bounded).
pub fn ratio_numbers(o: &super::Overhead) -> String {
    let f = |x: f64| if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.3}") };
    match o.ci {
        Some([l, h]) if l > 0.0 && h.is_finite() => format!("×{} [{}, {}]", f(o.ratio), f(l), f(h)),
        _ => format!("×{}", f(o.ratio)),
    }
}

/// A factor with 2–3 significant digits: 163, 16, 6.2, 1.8; below 0.95, two: 0.42, 0.0031 (the
/// low end of an inconclusive interval).
pub fn fmt_factor(f: f64) -> String {
    if f >= 9.95 {
        format!("{f:.0}")
    } else if f >= 0.95 || !(f > 0.0 && f.is_finite()) {
        format!("{f:.1}")
    } else {
        let digits = (-f.log10()).floor() as usize + 2;
        format!("{f:.digits$}")
    }
}

/// A half-width in %: 2 significant digits (±3.5 %, ±27 %, ±375 %).
pub fn fmt_half(h: f64) -> String {
    // A no-break space keeps the number and its sign together when a line wraps.
    if h >= 9.95 {
        format!("±{h:.0}\u{a0}%")
    } else {
        format!("±{h:.1}\u{a0}%")
    }
}

/// A percentage of a change, 2 significant digits: 4.9, 28, 0.4.
fn fmt_pct(p: f64) -> String {
    // An end just past 1 keeps a digit that says so: "0.04–9.5 %", not "0.0–9.5 %".
    if p > 0.0 && p < 0.095 {
        format!("{p:.2}")
    } else if p < 9.95 {
        format!("{p:.1}")
    } else {
        format!("{p:.0}")
    }
}

/// Factors from this size on are said as factors (5.1× slower), smaller ones in per cent
/// (28 % lower): a person says a change both ways, and this is where one reads better.
const FACTOR_FROM: f64 = 1.5;

/// The words of a direction: a time's (more is slower) or a rate's (more is higher).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// Lower is better (a time, a latency): said "slower" / "faster".
    Time,
    /// Higher is better (a rate, a throughput): said of the rate itself, "lower" / "higher".
    Rate,
}

impl Reading {
    pub fn of(better: &str) -> Reading {
        if better == "higher" {
            Reading::Rate
        } else {
            Reading::Time
        }
    }
    /// The value's own ratio (environment / baseline) of a cost.
    fn value(self, cost: f64) -> f64 {
        match self {
            Reading::Time => cost,
            Reading::Rate => 1.0 / cost,
        }
    }
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Reading::Time => ("slower", "faster"),
            Reading::Rate => ("higher", "lower"),
        }
    }
}

/// A cost as the change a person says: "5.1× slower", "4.9 % slower", "2.0 % faster"; of a rate,
/// the rate's own: "28 % lower", "3.1× higher".
pub fn change(cost: f64, reading: Reading) -> String {
    let v = reading.value(cost);
    let (up, down) = reading.words();
    if v >= 1.0 {
        if v >= FACTOR_FROM {
            format!("{}× {up}", fmt_factor(v))
        } else {
            format!("{}\u{a0}% {up}", fmt_pct((v - 1.0) * 100.0))
        }
    } else if 1.0 / v >= FACTOR_FROM {
        format!("{}× {down}", fmt_factor(1.0 / v))
    } else {
        format!("{}\u{a0}% {down}", fmt_pct((1.0 - v) * 100.0))
    }
}

/// An interval on one side of 1, in the words of that side: "2.6–9.9×", "2.7–7.1 %".
fn one_side(from: f64, to: f64, reading: Reading) -> String {
    let (a, b) = (reading.value(from), reading.value(to));
    let up = a >= 1.0 && b >= 1.0;
    let g = |v: f64| if up { v } else { 1.0 / v };
    let (lo, hi) = if g(a) <= g(b) { (g(a), g(b)) } else { (g(b), g(a)) };
    if hi >= FACTOR_FROM {
        format!("{}–{}×", fmt_factor(lo), fmt_factor(hi))
    } else {
        let p = |x: f64| if up { (x - 1.0) * 100.0 } else { (1.0 - 1.0 / x) * 100.0 };
        format!("{}–{}\u{a0}%", fmt_pct(p(lo)), fmt_pct(p(hi)))
    }
}

/// An interval across 1, each end in words: "5.0 % faster … 1.1 % slower".
fn across(from: f64, to: f64, reading: Reading) -> String {
    let (a, b) = (reading.value(from), reading.value(to));
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    format!("{} … {}", change(reading_cost(lo, reading), reading), change(reading_cost(hi, reading), reading))
}

/// The cost of a value ratio (the inverse of [`Reading::value`]).
fn reading_cost(v: f64, reading: Reading) -> f64 {
    match reading {
        Reading::Time => v,
        Reading::Rate => 1.0 / v,
    }
}

/// A value's change as a signed percentage (or a factor where it is large), for a table's cell:
/// "+4.9 %", "−2.0 %", "×0.12".
fn signed(v: f64) -> String {
    if ((v - 1.0) * 100.0).abs() < 0.05 {
        "0.0".into()
    } else if v >= FACTOR_FROM || v <= 1.0 / FACTOR_FROM {
        format!("×{}", fmt_factor(v))
    } else if v >= 1.0 {
        format!("+{}", fmt_pct((v - 1.0) * 100.0))
    } else {
        format!("−{}", fmt_pct((1.0 - v) * 100.0))
    }
}

/// "inconclusive" where a table's column has no room for the word and the estimate apart.
pub const ABBREVIATED: &str = "inconcl.";

/// How many digits a signed change keeps in a table's cell.
#[derive(Clone, Copy, PartialEq)]
enum Digits {
    /// "+4.6 %", "×0.59".
    Full,
    /// "+4.6", "×0.59": the unit said once, in the legend.
    Bare,
    /// "+5", "−41", "×2.5": whole per cent, a factor only above 1.5×.
    Whole,
}

/// A value ratio as a signed change for a cell, in [`Digits`].
fn pct(v: f64, d: Digits) -> String {
    match d {
        Digits::Full => {
            let s = signed(v);
            if s.starts_with('×') {
                s
            } else {
                format!("{s}\u{a0}%")
            }
        }
        Digits::Bare => signed(v),
        Digits::Whole if v >= FACTOR_FROM => format!("×{}", fmt_factor(v)),
        Digits::Whole => {
            let p = (v - 1.0) * 100.0;
            let sign = if p < 0.0 { "−" } else { "+" };
            if p.abs() < 0.95 {
                format!("{sign}{:.1}", p.abs())
            } else {
                format!("{sign}{:.0}", p.abs())
            }
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// "≈ 40 more launches would settle it".
fn settling(more: Option<u64>) -> String {
    match more {
        Some(n) if n > 100_000 => "; more than 100 000 further launches would be needed to settle it".into(),
        Some(n) => format!("; ≈ {n} more launch{} would settle it", if n == 1 { "" } else { "es" }),
        None => String::new(),
    }
}

impl Verdict {
    /// The relative half-width of its interval, in % of the estimate (what a target is about).
    pub fn half(&self) -> Option<f64> {
        match *self {
            Verdict::Same { cost, from, to }
            | Verdict::Inconclusive { cost, from, to, .. }
            | Verdict::Slower { cost, from, to }
            | Verdict::Faster { cost, from, to } => Some((to - from) / 2.0 / cost * 100.0),
            Verdict::NoInterval { .. } => None,
        }
    }

    /// Whether it says something: slower, faster, or the same within the target.
    pub fn decided(&self) -> bool {
        matches!(self, Verdict::Slower { .. } | Verdict::Faster { .. } | Verdict::Same { .. })
    }

    /// The one word it comes to: slower, faster (lower, higher of a rate), same, inconclusive,
    /// no interval.
    pub fn word(&self, reading: Reading) -> &'static str {
        let (up, down) = reading.words();
        match *self {
            Verdict::Slower { .. } if reading == Reading::Time => up,
            Verdict::Slower { .. } => down,
            Verdict::Faster { .. } if reading == Reading::Time => down,
            Verdict::Faster { .. } => up,
            Verdict::Same { .. } => "same",
            Verdict::Inconclusive { .. } => "inconclusive",
            Verdict::NoInterval { why } if why == BASELINE_VARIES => "inconclusive",
            Verdict::NoInterval { why } if why == EVERY_TRIAL_STALLED => "stalled",
            Verdict::NoInterval { .. } => "no interval",
        }
    }

    /// In a table's cell, two lines: the answer with its estimate, then its interval —
    /// ("4.9 % slower", "(2.7–7.1 %)"); ("≈ same", "−2.0 % (−5.0…+1.1)"), signed as the value's
    /// change in % (less time or rate: −). The most precise form.
    pub fn cell(&self, reading: Reading) -> (String, String) {
        let [a, b] = self.cells(reading).swap_remove(0);
        (a, b)
    }

    /// [`Verdict::cell`]'s forms, the most precise first, each narrower: a table takes the first
    /// that fits its columns. Every form keeps the word, the estimate and the interval.
    pub fn cells(&self, reading: Reading) -> Vec<[String; 2]> {
        let val = |c: f64| reading.value(c);
        let ends = |from: f64, to: f64| {
            let (a, b) = (val(from), val(to));
            if a <= b {
                (a, b)
            } else {
                (b, a)
            }
        };
        match *self {
            Verdict::Slower { cost, from, to } | Verdict::Faster { cost, from, to } => {
                vec![[change(cost, reading), format!("({})", one_side(from, to, reading))]]
            }
            Verdict::Same { cost, from, to } | Verdict::Inconclusive { cost, from, to, .. } => {
                let word = if matches!(self, Verdict::Same { .. }) { "≈ same" } else { "inconclusive" };
                let (lo, hi) = ends(from, to);
                let est = val(cost);
                let mut out = vec![
                    [
                        word.to_string(),
                        format!(
                            "{} ({}…{})",
                            pct(est, Digits::Full),
                            pct(lo, Digits::Bare),
                            pct(hi, Digits::Bare)
                        ),
                    ],
                    [
                        word.to_string(),
                        format!(
                            "{} ({}…{})",
                            pct(est, Digits::Bare),
                            pct(lo, Digits::Bare),
                            pct(hi, Digits::Bare)
                        ),
                    ],
                ];
                if matches!(self, Verdict::Same { .. }) {
                    out.push([
                        format!("{word} {}", pct(est, Digits::Bare)),
                        format!("({}…{})", pct(lo, Digits::Bare), pct(hi, Digits::Bare)),
                    ]);
                }
                let whole = format!("({}…{})", pct(lo, Digits::Whole), pct(hi, Digits::Whole));
                out.push([word.to_string(), format!("{} {whole}", pct(est, Digits::Whole))]);
                // The narrowest: the estimate beside the word, shortened ([`ABBREVIATED`]).
                let short = if matches!(self, Verdict::Same { .. }) { word } else { ABBREVIATED };
                out.push([format!("{short} {}", pct(est, Digits::Whole)), whole]);
                out
            }
            Verdict::NoInterval { why } if why == BASELINE_VARIES => {
                vec![["inconclusive".into(), "baseline varies".into()]]
            }
            Verdict::NoInterval { why } if why == EVERY_TRIAL_STALLED => {
                vec![["stalled".into(), "every pair".into()]]
            }
            Verdict::NoInterval { .. } => vec![["no interval".into(), "one sample".into()]],
        }
    }

    /// In a sentence, its estimate beside its interval: "5.1× slower (2.6–9.9×)", "≈ same: 2.0 %
    /// faster (5.0 % faster … 1.1 % slower)", "inconclusive: … ; ≈ 40 more launches would
    /// settle it", "inconclusive: the baseline varies too much".
    pub fn phrase(&self, reading: Reading) -> String {
        match *self {
            Verdict::Slower { cost, from, to } | Verdict::Faster { cost, from, to } => {
                format!("{} ({})", change(cost, reading), one_side(from, to, reading))
            }
            Verdict::Same { cost, from, to } => {
                format!("≈ same: {} ({})", change(cost, reading), across(from, to, reading))
            }
            Verdict::Inconclusive { cost, from, to, more } => format!(
                "inconclusive: {} ({}){}",
                change(cost, reading),
                across(from, to, reading),
                settling(more)
            ),
            Verdict::NoInterval { why } if why == BASELINE_VARIES => format!("inconclusive: {why}"),
            Verdict::NoInterval { why } if why == EVERY_TRIAL_STALLED => {
                "stalled: every pair had a trial that stalled, no interval".into()
            }
            Verdict::NoInterval { .. } => "no interval (one sample a side)".into(),
        }
    }

    /// Short, for a line of several: "5.1× slower (2.6–9.9×)", "≈ same, −2.0 % (−5.0…+1.1)",
    /// "inconclusive, +5.6 % (−7.3…+20)" (signed: the value's change in %).
    pub fn short(&self, reading: Reading) -> String {
        match self {
            Verdict::Same { .. } | Verdict::Inconclusive { .. } => {
                let [w, n] = self.cells(reading).swap_remove(0);
                format!("{w}, {n}")
            }
            _ => self.phrase(reading),
        }
    }

    /// [`Verdict::phrase`] of a cost (a family's, a workload's: said as time).
    pub fn line(&self) -> String {
        self.phrase(Reading::Time)
    }

    /// How the page colours it: `worse`, `better`, `same`, `unclear`.
    pub fn class(&self) -> &'static str {
        match self {
            Verdict::Slower { .. } => "worse",
            Verdict::Faster { .. } => "better",
            Verdict::Same { .. } => "same",
            _ => "unclear",
        }
    }
}

/// The run's target half-width as a fraction: precision mode's, else ±5 %.
pub fn target(r: &Report) -> f64 {
    r.precision.as_ref().map_or(0.05, |p| p.target_percent / 100.0)
}

/// Environments whose guest CPU was emulated (QEMU or libvirt under TCG), with why, from the
/// runtimes the manifest recorded.
pub fn emulated(r: &Report) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in &r.environments {
        let Some(rt) = r.manifest["runtimes"][&e.name].as_str() else { continue };
        if runtime_emulated(rt) {
            let why = rt.split_once("(TCG: ").map(|(_, rest)| balanced(rest)).unwrap_or_default();
            out.push((e.name.clone(), why));
        }
    }
    out
}

/// A budget as a person says it: "4 min 30 s", "90 s", "2 h".
/// A span in seconds, as a person says it: "0.5 s", "15.6 s", "2 min 5 s".
fn secs_words(ms: f64) -> String {
    if ms >= 60_000.0 {
        format!("{} min {:.0} s", (ms / 60_000.0).floor(), (ms % 60_000.0) / 1e3)
    } else if ms >= 10_000.0 {
        format!("{:.0} s", ms / 1e3)
    } else {
        format!("{:.1} s", ms / 1e3)
    }
}

fn budget_words(ms: u64) -> String {
    let s = ms / 1000;
    match (s / 60, s % 60) {
        (0, s) => format!("{s} s"),
        (m, 0) if m % 60 == 0 => format!("{} h", m / 60),
        (m, 0) => format!("{m} min"),
        (m, s) => format!("{m} min {s} s"),
    }
}

/// The text up to the parenthesis that closes one already open: "a (b) c) d" → "a (b) c".
fn balanced(rest: &str) -> String {
    let mut depth = 0usize;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' if depth == 0 => return rest[..i].to_string(),
            ')' => depth -= 1,
            _ => {}
        }
    }
    rest.to_string()
}

/// The headline ratios of the report: (environment, workload, metric) → row, environment-level
/// rows only, disk matrices left out (summarised apart).
fn headline_rows(r: &Report) -> Vec<&ResultRow> {
    r.results
        .iter()
        .filter(|x| x.peer.is_none() && x.instance.is_none() && x.headline)
        .filter(|x| {
            !r.disk
                .iter()
                .any(|d| x.workload.starts_with(&format!("{} [", d.workload)) || x.workload == d.workload)
        })
        .collect()
}

/// How many of the distinct measurements are measured to the target (their interval's
/// half-width at most it), of how many. A workload's several headline metrics come from the
/// same trials (tcp_rr's rate and latency are reciprocals): they count once, by the widest.
pub fn within_target(r: &Report) -> (usize, usize) {
    let t = target(r);
    let mut widest: BTreeMap<(&str, &str), Option<f64>> = BTreeMap::new();
    for x in headline_rows(r) {
        let Some(v) = row_verdict(x, t) else { continue };
        let h = v.half();
        let e = widest.entry((x.environment.as_str(), x.workload.as_str())).or_insert(Some(0.0));
        *e = match (*e, h) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    let within = widest.values().filter(|h| h.is_some_and(|h| h <= t * 100.0)).count();
    (within, widest.len())
}

/// Environments held to some CPUs (`cpuset`, a guest's `pin`) and the lab's tester (`tester_cpu`,
/// where the lab's packets are then received too), in one sentence: their figures hold for that
/// placement (a ptrace sandbox's system call cost 2–3× more, and ×3 between launches, where the
/// scheduler put its two threads on different CPUs of a nested host; a TCP stream's goodput was
/// 9–10 or 15 Gbit/s by which CPU received its packets).
fn placement(r: &Report) -> Option<String> {
    let cpus = r.manifest["host_cpus"].as_u64();
    let named = |set: &str| match (set, cpus) {
        ("last", Some(n)) if n > 0 => format!("{}", n - 1),
        (s, _) => s.to_string(),
    };
    let mut by_set: Vec<(String, Vec<&str>)> = Vec::new();
    for e in &r.environments {
        let Some(set) = e.params.get("cpuset").or_else(|| e.params.get("pin")).and_then(|v| v.as_str())
        else {
            continue;
        };
        let set = named(set);
        match by_set.iter_mut().find(|(s, _)| *s == set) {
            Some((_, names)) => names.push(&e.name),
            None => by_set.push((set, vec![&e.name])),
        }
    }
    let tester = r.manifest["lab"]["tester_cpuset"].as_str().map(named);
    if by_set.is_empty() && tester.is_none() {
        return None;
    }
    let on = |set: &str| if set.contains([',', '-']) { format!("CPUs {set}") } else { format!("CPU {set}") };
    let every = by_set.len() == 1 && by_set[0].1.len() == r.environments.len() && r.environments.len() > 1;
    let mut parts: Vec<String> = by_set
        .iter()
        .map(|(set, names)| {
            let who = if every { "every environment".to_string() } else { names.join(", ") };
            format!("{who} on {} only", on(set))
        })
        .collect();
    if let Some(t) = tester {
        parts.push(format!("the lab's tester and its packets' receive work on {}", on(&t)));
    }
    Some(format!("placement: {} (cpuset): their figures hold for that placement", parts.join("; ")))
}

/// Request/response results that lost exchanges: `udp_rr`'s unanswered requests (a 100 ms
/// timeout each), `tcp_rr`'s transactions that waited for a retransmission (50 ms or more). UML's
/// NIC lost two a `tcp_rr` trial, 200 ms each, in reports that said only "slower".
pub(crate) fn lost_exchanges(r: &Report) -> impl Iterator<Item = &super::ResultRow> {
    r.results.iter().filter(|x| {
        x.instance.is_none()
            && (x.metric.ends_with("_rr_timeouts") || x.metric.ends_with("_rr_waits"))
            && x.mean > 0.0
    })
}

/// A mean count of lost exchanges, as a person says it ("2", "0.3").
pub(crate) fn fmt_lost(n: f64) -> String {
    if n >= 10.0 || (n - n.round()).abs() < 0.05 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

/// What changes how the numbers read, before them: each a sentence.
pub fn caveats(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let emu = emulated(r);
    if !emu.is_empty() {
        let names: Vec<&str> = emu.iter().map(|(n, _)| n.as_str()).collect();
        let why = emu.iter().map(|(_, w)| w.as_str()).find(|w| !w.is_empty());
        out.push(format!(
            "{}: no KVM here{}: the guest CPU is emulated (TCG), so {} compute and memory ratios measure emulation, not virtualization",
            names.join(", "),
            why.map(|w| format!(" ({w})")).unwrap_or_default(),
            if names.len() > 1 { "their" } else { "its" }
        ));
    }
    let m = &r.manifest;
    if let Some(cpus) = m["host_cpus"].as_u64() {
        let model = m["host_cpu_model"].as_str().unwrap_or("CPU");
        let mem = m["host_memory_kib"]
            .as_u64()
            .map(|k| format!(", {:.0} GiB", k as f64 / 1048576.0))
            .unwrap_or_default();
        let vm = if m["kvm_pvm"].as_bool() == Some(true) {
            "; KVM here is PVM (no hardware virtualization: the host is likely a virtual machine itself)"
        } else {
            ""
        };
        out.push(format!("host: {model}, {cpus} CPUs{mem}{vm}"));
    }
    for l in super::hosts_note(&r.manifest).lines() {
        out.push(l.to_string());
    }
    if let Some(p) = placement(r) {
        out.push(p);
    }
    // gVisor run with extra runsc flags (VIRTPERF_RUNSC_FLAGS): another gVisor than the default
    // one, and `--strace` alone makes each of its system calls several times dearer.
    if let Some(f) = m["runsc_flags"].as_str() {
        out.push(format!(
            "runsc ran with {f} (VIRTPERF_RUNSC_FLAGS): gVisor's figures are of that configuration"
        ));
    }
    // Another virtperf run measured on this host at the same time.
    if let Some(p) = m["concurrent_run"].as_u64() {
        let who = if p == 0 { "another process".to_string() } else { format!("process {p}") };
        out.push(format!(
            "another virtperf run ({who}) was measuring on this host when this one started: its load may be in these figures"
        ));
    }
    // An agent that is not this virtperf's (VIRTPERF_NATIVE_AGENT): its figures are that
    // program's.
    if let Some(m) = m["agent_replaced"].as_object() {
        for (kind, prog) in m {
            out.push(format!(
                "{kind}'s agent was {} (VIRTPERF_NATIVE_AGENT), not virtperf's: its figures are that program's",
                virtperf_record::printable(prog.as_str().unwrap_or("?"), 200)
            ));
        }
    }
    // Knobs set away from their kind's defaults (docs/knobs.md): the environment's figures
    // include what they cost.
    if let Some(k) = m["knobs"].as_object() {
        for (env, knobs) in k {
            let words: Vec<String> = knobs
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|w| w.as_str())
                .map(|w| virtperf_record::printable(w, 300))
                .collect();
            if !words.is_empty() {
                out.push(format!(
                    "{} runs with {}: its figures include {}",
                    virtperf_record::printable(env, 80),
                    words.join("; "),
                    if words.len() > 1 { "their cost" } else { "its cost" }
                ));
            }
        }
    }
    // A shaped link: what each figure is to be held against.
    for l in super::ceiling_notes(r).lines() {
        out.push(l.to_string());
    }
    let (within, n) = within_target(r);
    let t = target(r) * 100.0;
    if n > 0 {
        let how = match &r.precision {
            Some(p) => format!(
                " after precision mode's budget of {}{}",
                budget_words(p.budget_ms),
                if p.met < p.cells.len() {
                    " (the rest need more than it held: --full says how much)"
                } else {
                    ""
                }
            ),
            None => String::new(),
        };
        out.push(format!(
            "precision: {within} of {n} measurements are measured to ±{t:.0} %{how}; \"≈ same\": the 90 % interval within ±{t:.0} %; \"inconclusive\": neither that nor a 95 % interval that excludes no difference"
        ));
    }
    if let Some(one) = r.environments.iter().find(|e| e.launches == 1 && !r.is_baseline(&e.name)) {
        let _ = one;
        out.push(
            "intervals cover one launch of each environment: another launch may differ more than they say"
                .into(),
        );
    }
    if !r.disturbances.is_empty() {
        let d = &r.disturbances[0];
        out.push(format!(
            "the host slowed down as a whole {} (first at {} for {:.1} s over {} environments){}",
            match r.disturbances.len() {
                1 => "once".to_string(),
                n => format!("{n} times"),
            },
            d.at.split('T')
                .nth(1)
                .unwrap_or(&d.at)
                .split('.')
                .next()
                .unwrap_or_default()
                .trim_end_matches('Z'),
            d.seconds,
            d.environments,
            match r.estimate {
                super::paired::Estimate::Paired => {
                    let both: usize = r.disturbances.iter().map(|d| d.both_sides).sum();
                    let one: usize = r.disturbances.iter().map(|d| d.one_side).sum();
                    match (both, one) {
                        (b, 0) => format!(": {b} pair{} had both trials inside, which pairing cancels", plural(b)),
                        (0, o) => format!(": {o} pair{} had one trial inside and not the other, set apart from {}", plural(o), if o == 1 { "its ratio" } else { "their ratios" }),
                        (b, o) => format!(": {b} pair{} had both trials inside, which pairing cancels; {o} had one alone, set apart from {}", plural(b), if o == 1 { "its ratio" } else { "their ratios" }),
                    }
                }
                super::paired::Estimate::Unpaired => ": unpaired ratios hold it as their sides' spread".into(),
            }
        ));
    }
    let limited: Vec<String> = r
        .results
        .iter()
        .filter(|x| x.instance.is_none() && x.metric.ends_with("rx_socket_drops") && x.mean > 0.0)
        .map(|x| format!("{} / {}", x.environment, x.workload))
        .collect();
    if !limited.is_empty() {
        out.push(format!(
            "receiver-limited: {} (the receiving socket dropped datagrams: the receiver, not the path, set the figure)",
            limited.join(", ")
        ));
    }
    let lost: Vec<String> = lost_exchanges(r)
        .map(|x| format!("{} / {} ({} a trial)", x.environment, x.workload, fmt_lost(x.mean)))
        .collect();
    if !lost.is_empty() {
        out.push(format!(
            "lost: {} (requests or responses that waited for a timeout or a retransmission: the rate holds the waits, not only the path's cost)",
            lost.join(", ")
        ));
    }
    for l in r.loads.iter().filter(|l| !l.reached) {
        out.push(format!(
            "background load not reached for {} / {}: {:.0} % of the {:.0} % target",
            l.environment, l.workload, l.achieved_mean, l.target_percent
        ));
    }
    // The ratio a stall was set apart from: its environment's own, or, the baseline's stall, the
    // first ratio against it that set it apart.
    let apart = |env: &str, w: &str| {
        let base = r.is_baseline(env);
        headline_rows(r).into_iter().filter(|x| x.workload == w && (x.environment == env || base)).find_map(
            |x| {
                let sa = x.overhead.as_ref()?.set_apart.clone().filter(|sa| sa.stalled > 0)?;
                Some((x.environment.clone(), sa))
            },
        )
    };
    for st in &r.stalls {
        let how = match apart(&st.environment, &st.workload) {
            Some((e, sa)) if e == st.environment => {
                format!("its ratio is of the rest: {}", set_apart_words(&sa))
            }
            Some((e, sa)) => format!("the ratios against it are of the rest: {e}'s {}", set_apart_words(&sa)),
            None => "the environment paused; its ratio holds the pause".into(),
        };
        out.push(format!(
            "stalled: {} / {}: {} of {} trials took up to {} where {} was planned ({how})",
            st.environment,
            st.workload,
            st.trials,
            st.of,
            secs_words(st.longest_ms),
            secs_words(st.planned_ms)
        ));
    }
    // Pairs far outside their cell's others, with no planned time to say they stalled.
    for x in headline_rows(r) {
        let Some(sa) = x
            .overhead
            .as_ref()
            .and_then(|o| o.set_apart.as_ref())
            .filter(|sa| sa.beyond > 0 && sa.stalled == 0)
        else {
            continue;
        };
        if headline_rows(r).iter().any(|y| {
            y.environment == x.environment
                && y.workload == x.workload
                && !std::ptr::eq(*y, x)
                && y.metric < x.metric
                && y.overhead.as_ref().is_some_and(|o| o.set_apart.is_some())
        }) {
            continue;
        }
        out.push(format!(
            "set apart: {} / {}: {} (beyond 5 robust standard deviations and 3× of the others' median: a stall or a burst on one side); its ratio is of the rest",
            x.environment,
            x.workload,
            set_apart_words(sa)
        ));
    }
    for f in r.failures.iter().take(3) {
        out.push(format!(
            "{} trial(s) of {} / {} did not complete: {}",
            f.count, f.environment, f.workload, f.reason
        ));
    }
    if r.failures.len() > 3 {
        out.push(format!("and {} more groups of failed trials (--full lists them)", r.failures.len() - 3));
    }
    if !r.failures.is_empty() {
        out.push(format!(
            "once their cause is fixed, `virtperf run --resume {} --retry-failed` runs them again",
            r.run_id
        ));
    }
    if r.status == super::RunStatus::Interrupted {
        out.push(format!(
            "this run was interrupted: `virtperf run --resume {}` finishes the missing trials",
            r.run_id
        ));
    }
    out
}

/// One line per environment: its cost by family, in words, largest first. A family's verdict
/// never contradicts all of its cells: "≈ same" only where one of its cells is, "slower" or
/// "faster" only where one of them is too; else it is said inconclusive, with why.
pub fn environment_lines(r: &Report) -> Vec<(String, String)> {
    let t = target(r);
    let rows = cost_rows(&r.results);
    let envs: Vec<String> =
        r.environments.iter().filter(|e| !r.is_baseline(&e.name)).map(|e| e.name.clone()).collect();
    let fam = family_costs(&rows, &envs);
    let emu: Vec<String> = emulated(r).into_iter().map(|(n, _)| n).collect();
    let mut out = Vec::new();
    for e in &envs {
        let mut said: Vec<(f64, String)> = Vec::new();
        let mut same: Vec<String> = Vec::new();
        let mut unclear: Vec<String> = Vec::new();
        for f in fam.iter().filter(|f| f.environment == *e && f.family != Family::Other) {
            let name = family_name(f.family);
            let (v, contradicts) = family_verdict(&rows, f, t);
            if let Some(why) = contradicts {
                unclear.push(format!("{name} inconclusive: {why}"));
                continue;
            }
            let said_as = format!("{name} {}", v.short(Reading::Time));
            match v {
                Verdict::Same { .. } => same.push(said_as),
                Verdict::Slower { .. } | Verdict::Faster { .. } => said.push((f.cost, said_as)),
                Verdict::Inconclusive { .. } => unclear.push(said_as),
                Verdict::NoInterval { .. } => unclear.push(format!("{name} inconclusive")),
            }
        }
        said.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut parts: Vec<String> = said.into_iter().map(|x| x.1).collect();
        parts.extend(same);
        parts.extend(unclear);
        if parts.is_empty() {
            continue;
        }
        let mut line = parts.join("; ");
        if emu.contains(e) {
            line += " (CPU emulated)";
        }
        out.push((e.clone(), line));
    }
    out
}

/// A family's verdict, and why it is said inconclusive instead where its geometric mean says
/// slower, faster or the same and none of its cells does (a mean is no evidence its cells lack).
pub fn family_verdict(
    rows: &[super::costs::CostRow],
    f: &super::costs::FamilyCost,
    t: f64,
) -> (Verdict, Option<String>) {
    let cells: Vec<Verdict> = rows
        .iter()
        .filter(|x| x.environment == f.environment && x.family == f.family)
        .map(|x| verdict(x.cost, x.ci, x.eq, t))
        .collect();
    let some = |k: fn(&Verdict) -> bool| cells.iter().any(k);
    let v = verdict(f.cost, f.ci, f.eq, t);
    let agrees = match v {
        Verdict::Same { .. } => some(|c| matches!(c, Verdict::Same { .. })),
        Verdict::Slower { .. } => some(|c| matches!(c, Verdict::Slower { .. })),
        Verdict::Faster { .. } => some(|c| matches!(c, Verdict::Faster { .. })),
        _ => true,
    };
    let why = (!agrees)
        .then(|| format!("its workloads' geometric mean says {}, none of them does", v.word(Reading::Time)));
    (v, why)
}

fn family_name(f: Family) -> &'static str {
    match f {
        Family::System => "system calls",
        other => other.name(),
    }
}

/// The matrix's rows: each headline metric, with its baseline's value and each environment's
/// verdict. Columns: the baseline, then each other environment in the report's order.
struct Matrix {
    head: Vec<String>,
    /// Each row's workload and metric as the results name them.
    keys: Vec<(String, String)>,
    rows: Vec<[String; 2]>,
    /// Each row's cells, each as its forms, the most precise first ([`Verdict::cells`]).
    cells: Vec<Vec<Vec<[String; 2]>>>,
}

fn matrix(r: &Report) -> Option<Matrix> {
    let t = target(r);
    let rows = headline_rows(r);
    // No ratio (one environment): the same table of each one's own values, answer first.
    if rows.is_empty() {
        return None;
    }
    let base = r.environments.iter().position(|e| r.is_baseline(&e.name));
    let mut cols: Vec<usize> = base.into_iter().collect();
    cols.extend((0..r.environments.len()).filter(|&i| Some(i) != base));
    let mut keys: Vec<(&str, &str, &str, &str)> = Vec::new();
    for x in &rows {
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str(), x.better);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut m = Matrix { head: Vec::new(), keys: Vec::new(), rows: Vec::new(), cells: Vec::new() };
    m.head = cols
        .iter()
        .map(|&i| {
            let n = &r.environments[i].name;
            if Some(i) == base {
                format!("{n} (base)")
            } else {
                n.clone()
            }
        })
        .collect();
    let by: BTreeMap<(&str, &str, &str), &ResultRow> =
        rows.iter().map(|x| ((x.environment.as_str(), x.workload.as_str(), x.metric.as_str()), *x)).collect();
    for (w, metric, unit, better) in keys {
        // The metric without its workload's name ("tcp_rr_latency" under "tcp_rr": "latency"),
        // or the protocol they share ("udp_sent_rate" under "udp_stream": "sent_rate").
        let short = metric.strip_prefix(w).and_then(|m| m.strip_prefix('_')).unwrap_or_else(|| {
            match (w.split_once('_'), metric.split_once('_')) {
                (Some((a, _)), Some((b, rest))) if a == b && !rest.is_empty() => rest,
                _ => metric,
            }
        });
        m.rows.push([shorten(w, ROW_LABEL_MAX), format!("{short} {}", super::arrow(better))]);
        m.keys.push((w.to_string(), metric.to_string()));
        let cells = cols
            .iter()
            .map(|&i| {
                let e = r.environments[i].name.as_str();
                match by.get(&(e, w, metric)) {
                    None => vec![["—".to_string(), String::new()]],
                    Some(x) if Some(i) == base || x.overhead.is_none() => {
                        // Centred: ±%; kept above zero (log scale), its ends.
                        let spread = x.ci95.and_then(|[l, h]| {
                            let half = (h - l) / 2.0 / x.mean.abs() * 100.0;
                            let centred =
                                ((h - x.mean) - (x.mean - l)).abs() <= 1e-3 * (h - l).abs().max(x.mean.abs());
                            if !half.is_finite() {
                                None
                            } else if centred {
                                Some(fmt_half(half))
                            } else {
                                // Its ends as changes of the value: "(−65…+180 %)".
                                let end = |v: f64| {
                                    let p = (v / x.mean - 1.0) * 100.0;
                                    format!("{}{}", if p < 0.0 { "−" } else { "+" }, fmt_pct(p.abs()))
                                };
                                Some(format!("({}…{}\u{a0}%)", end(l), end(h)))
                            }
                        });
                        vec![[fmt_value(x.mean, unit), spread.unwrap_or_default()]]
                    }
                    Some(x) => match row_verdict(x, t) {
                        Some(v) => v.cells(Reading::of(x.better)),
                        None => vec![[
                            format!("×{}", fmt_num(x.overhead.as_ref().map_or(f64::NAN, |o| o.ratio))),
                            String::new(),
                        ]],
                    },
                }
            })
            .collect();
        m.cells.push(cells);
    }
    Some(m)
}

/// The matrix as text within `width`: the label column, then as many environment columns as fit;
/// the rest in a further table under it (each with the label column again).
/// The widest workload label of the matrix: a workload given many parameters would push every
/// column past the terminal.
const ROW_LABEL_MAX: usize = 40;

/// `label` within `max` characters: its swept case (` [frame_size=64]`) kept, the workload's own
/// parameters cut with an ellipsis (the full label is in `--full` and on the page).
fn shorten(label: &str, max: usize) -> String {
    if label.chars().count() <= max {
        return label.to_string();
    }
    let (head, case) = match label.rfind(" [") {
        Some(i) => (&label[..i], &label[i..]),
        None => (label, ""),
    };
    let keep = max.saturating_sub(case.chars().count() + 1).max(8);
    format!("{}…{case}", head.chars().take(keep).collect::<String>())
}

fn render_matrix(m: &Matrix, width: usize) -> String {
    let w = |s: &str| s.chars().count();
    let label = m.rows.iter().flat_map(|r| r.iter().map(|s| w(s))).max().unwrap_or(0).max(8);
    let gap = 2;
    let ncols = m.head.len();
    let form_width = |f: &[String; 2]| w(&f[0]).max(w(&f[1]));
    // A column of one form each (the baseline's) is as wide as it is; the others share what is
    // left, each cell taking its most precise form that fits that share.
    let fixed: Vec<bool> = (0..ncols).map(|i| m.cells.iter().all(|c| c[i].len() <= 1)).collect();
    let fixed_width: usize = (0..ncols)
        .filter(|&i| fixed[i])
        .map(|i| gap + m.cells.iter().map(|c| form_width(&c[i][0])).chain([w(&m.head[i])]).max().unwrap_or(0))
        .sum();
    let flexible = fixed.iter().filter(|f| !**f).count().max(1);
    let share = (width.saturating_sub(label + fixed_width) / flexible).saturating_sub(gap);
    let chosen: Vec<Vec<[String; 2]>> = m
        .cells
        .iter()
        .map(|row| {
            row.iter()
                .map(|forms| {
                    forms
                        .iter()
                        .find(|f| form_width(f) <= share)
                        .or(forms.last())
                        .cloned()
                        .unwrap_or_default()
                })
                .collect()
        })
        .collect();
    let col: Vec<usize> = (0..ncols)
        .map(|i| {
            chosen.iter().flat_map(|c| c[i].iter().map(|s| w(s))).chain([w(&m.head[i])]).max().unwrap_or(0)
        })
        .collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = label;
    for (i, &c) in col.iter().enumerate() {
        if groups.is_empty() || used + gap + c > width {
            groups.push(Vec::new());
            used = label;
        }
        used += gap + c;
        if let Some(g) = groups.last_mut() {
            g.push(i);
        }
    }
    let pad = |s: &str, n: usize| format!("{s}{}", " ".repeat(n.saturating_sub(w(s))));
    let mut out = String::new();
    for g in groups {
        let total = label + g.iter().map(|&i| gap + col[i]).sum::<usize>();
        let mut line = pad("", label);
        for &i in &g {
            line += &" ".repeat(gap);
            line += &pad(&m.head[i], col[i]);
        }
        out += line.trim_end();
        out.push('\n');
        out += &"─".repeat(total);
        out.push('\n');
        for (row, cells) in m.rows.iter().zip(&chosen) {
            for k in 0..2 {
                let mut line = pad(&row[k], label);
                for &i in &g {
                    line += &" ".repeat(gap);
                    line += &pad(&cells[i][k], col[i]);
                }
                out += line.trim_end();
                out.push('\n');
            }
        }
        out += &"─".repeat(total);
        out.push('\n');
    }
    out
}

/// The answer: caveats, a line per environment, the matrix.
/// Each service case in words, per environment against the baseline: the requests it serves
/// (its capacity's ratio), its p99 at half load (or, where that load was not carried, what was
/// answered of what was offered — never a latency), and the server's CPU per request; each
/// estimate beside its interval.
pub fn service_lines(r: &Report) -> Vec<String> {
    let base = r.baseline.as_deref().or(r.natural_baseline.as_deref()).unwrap_or("the baseline");
    let top = |x: &&ResultRow| x.peer.is_none() && x.instance.is_none();
    let find = |env: &str, w: &str, m: &str| {
        r.results
            .iter()
            .filter(top)
            .find(|x| x.environment == env && x.workload == w && x.metric.ends_with(m))
    };
    // Why a figure has no interval, said once a line however many of its figures lack one (it
    // read "(no interval: one pair: …)" three times in one line).
    let why: std::cell::RefCell<Vec<&str>> = std::cell::RefCell::new(Vec::new());
    let factor = |o: &super::Overhead| match o.ci {
        Some([lo, hi]) => format!("{}× ({}–{}×)", fmt_factor(o.ratio), fmt_factor(lo), fmt_factor(hi)),
        None => {
            let reason = o.no_ci.unwrap_or("too few trials");
            let mut w = why.borrow_mut();
            if w.contains(&reason) {
                format!("{}× (no interval)", fmt_factor(o.ratio))
            } else {
                w.push(reason);
                format!("{}× (no interval: {reason})", fmt_factor(o.ratio))
            }
        }
    };
    let mut out = Vec::new();
    for x in r
        .results
        .iter()
        .filter(top)
        .filter(|x| x.family == Family::Service && x.metric.ends_with("_capacity"))
    {
        let Some(o) = x.overhead.as_ref().filter(|o| o.ratio.is_finite() && o.ratio > 0.0) else { continue };
        let (e, w) = (&x.environment, &x.workload);
        why.borrow_mut().clear();
        let mut line = format!("{w}: {e} serves {} {base}'s requests", factor(o));
        let base_cap = find(base, w, "_capacity").map(|b| b.mean);
        let p99 = |l: u64| {
            find(e, w, &format!("_p99_at{l}"))
                .and_then(|p| p.overhead.as_ref())
                .filter(|p| p.ratio.is_finite() && p.ratio > 0.0)
        };
        let load_name = |l: u64| if l == 50 { "half load".to_string() } else { format!("{l} % load") };
        for l in [50, 25, 75, 90, 10] {
            let rate = find(e, w, &format!("_rate_at{l}"));
            let Some(rate) = rate else { continue };
            let load = load_name(l);
            match p99(l) {
                Some(p) => line += &format!(", p99 at {load} {} {base}'s", factor(p)),
                _ => {
                    let offered = base_cap.map(|c| c * l as f64 / 100.0);
                    line += &match offered {
                        Some(off) => format!(
                            ", {load} not carried ({} of {} req/s offered answered)",
                            fmt_num(rate.mean),
                            fmt_num(off)
                        ),
                        None => format!(", {load} not carried"),
                    };
                    // The highest lower load it did carry, where there is one.
                    if let Some((lo, p)) =
                        [25, 10].into_iter().filter(|x| *x < l).find_map(|x| p99(x).map(|p| (x, p)))
                    {
                        line += &format!(", p99 at {} {} {base}'s", load_name(lo), factor(p));
                    }
                }
            }
            break;
        }
        if let Some(c) = find(e, w, "_server_cpu")
            .and_then(|c| c.overhead.as_ref())
            .filter(|c| c.ratio.is_finite() && c.ratio > 0.0)
        {
            line += &format!("; its CPU per request {} {base}'s", factor(c));
        }
        out.push(line);
    }
    out
}

pub fn render(r: &Report, width: usize) -> String {
    let mut out = String::new();
    let cav = caveats(r);
    if !cav.is_empty() {
        out += "Before the numbers:\n";
        for c in cav {
            out += &super::wrap(&format!("! {c}"), width);
        }
    }
    // A run of RFC 2544 procedures only: its own answer (`rfc2544_answer`) says it, frame size by
    // direction; a matrix of one NDR per cell, its family and its ratios of one sample, would not.
    if rfc2544_only(r) {
        return out;
    }
    let base = r.baseline.as_deref().or(r.natural_baseline.as_deref()).unwrap_or("the baseline");
    let lines = environment_lines(r);
    if !lines.is_empty() {
        out += &format!(
            "\nWhat each environment costs against {base} ({}, 95 %, by family; signed: the change in time):\n",
            match r.estimate {
                super::paired::Estimate::Paired => "paired",
                super::paired::Estimate::Unpaired => "unpaired",
            }
        );
        let name = lines.iter().map(|(e, _)| e.chars().count()).max().unwrap_or(0);
        for (e, l) in &lines {
            // The environment's name in a column of its own, its line wrapped beside it.
            for (i, part) in super::wrap(l, width.saturating_sub(name + 2).max(30)).lines().enumerate() {
                let head = if i == 0 { e.as_str() } else { "" };
                out += &format!("{head:<name$}  {}\n", part.trim_start());
            }
        }
    }
    if let Some(m) = matrix(r) {
        let table = render_matrix(&m, width);
        let abbreviated = if table.contains(&format!("{ABBREVIATED} ")) {
            format!("; {ABBREVIATED}: inconclusive")
        } else {
            String::new()
        };
        let ratios = r.results.iter().any(|x| x.overhead.is_some());
        if ratios {
            out += &format!(
                "\nPer workload: {base}'s value ±95 %; each environment's change, its 95 % interval under it (in %{abbreviated}):\n"
            );
        } else {
            out += "\nPer workload: the value (its mean), its 95 % interval under it (no ratios: nothing to compare it with)\n";
        }
        out += &table;
    }
    out += &super::knobs::render(r, width);
    let services = service_lines(r);
    if !services.is_empty() {
        out += &format!(
            "\nYour services against {base} (capacity, latency at an offered load, CPU per request):\n"
        );
        for l in services {
            out += &super::wrap(&format!("- {l}"), width);
        }
    }
    out
}

/// Every result of the run is an RFC 2544 procedure's.
pub fn rfc2544_only(r: &Report) -> bool {
    !r.rfc2544.is_empty() && r.results.iter().all(|x| x.workload.starts_with("rfc2544"))
}

/// The top of the page: the caveats, then the environment × workload table, each cell the
/// verdict in words coloured by what it means (slower, faster, the same; grey for inconclusive)
/// with the baseline's value in its column.
pub fn render_html(r: &Report) -> String {
    use super::svg::esc;
    let mut out = String::new();
    let cav = caveats(r);
    if !cav.is_empty() {
        out += "<div class=\"caveats\"><b>Before the numbers</b><ul>\n";
        for c in cav {
            out += &format!("<li>{}</li>\n", esc(&c));
        }
        out += "</ul></div>\n";
    }
    let Some(m) = matrix(r) else { return out };
    let base = r.baseline.as_deref().or(r.natural_baseline.as_deref()).unwrap_or("the baseline");
    out += &format!(
        "<p class=\"muted\">Each workload's headline metric: {}'s value ±95 %, then each environment against it ({} estimate, 95 % intervals; ≈ same: the 90 % interval within ±{:.0} %; inconclusive: neither that nor a 95 % interval that excludes no difference).</p>\n<div class=\"tw\"><table class=\"matrix\"><tr><th>workload · metric</th>",
        esc(base),
        match r.estimate {
            super::paired::Estimate::Paired => "paired",
            super::paired::Estimate::Unpaired => "unpaired",
        },
        target(r) * 100.0
    );
    for h in &m.head {
        out += &format!("<th>{}</th>", esc(h));
    }
    out += "</tr>\n";
    let t = target(r);
    let rows = headline_rows(r);
    for ((row, cells), (w, metric)) in m.rows.iter().zip(&m.cells).zip(&m.keys) {
        out += &format!("<tr><th>{}<br><span class=\"muted\">{}</span></th>", esc(&row[0]), esc(&row[1]));
        for (i, forms) in cells.iter().enumerate() {
            let Some(c) = forms.first() else { continue };
            let env = m.head[i].trim_end_matches(" (base)");
            let class = rows
                .iter()
                .find(|x| x.environment == env && x.workload == *w && x.metric == *metric)
                .and_then(|x| row_verdict(x, t))
                .map_or("base", |v| v.class());
            out += &format!("<td class=\"v {class}\">{}<br><small>{}</small></td>", esc(&c[0]), esc(&c[1]));
        }
        out += "</tr>\n";
    }
    out += "</table></div>\n";
    let knobs = super::knobs::lines(r);
    if !knobs.is_empty() {
        out += "<h3>What each knob costs against its default</h3>\n<ul class=\"knobs\">\n";
        for (head, l) in knobs {
            out += &format!("<li><b>{}</b>: {}</li>\n", esc(&head), esc(&l));
        }
        out += "</ul>\n";
    }
    let services = service_lines(r);
    if !services.is_empty() {
        out += "<h3>Your services against the baseline</h3>\n<ul class=\"services\">\n";
        for l in services {
            out += &format!("<li>{}</li>\n", esc(&l));
        }
        out += "</ul>\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service's line: its requests against native's with the interval; the p99 at half load
    /// where that load was carried; where not, what was answered of what was offered and the p99
    /// of the highest lower load carried — never a latency of a load it could not carry.
    #[test]
    fn a_service_is_said_by_its_requests_its_latency_at_a_load_and_its_cpu() {
        let mut r = crate::report::summary_test_report();
        let row = |env: &str, metric: &str, better: &'static str, mean: f64, ratio: Option<f64>| {
            ResultRow {
                workload: "nginx".into(),
                kind: "nginx".into(),
                metric: metric.into(),
                mean,
                overhead: ratio.map(|x| crate::report::Overhead::unpaired(x, Some([x * 0.9, x * 1.1]), None)),
                ..crate::report::test_row(env, mean, 0.1, better)
            }
            .as_recorded()
        };
        r.results = vec![
            row("native", "nginx_capacity", "higher", 40000.0, None),
            row("container", "nginx_capacity", "higher", 39000.0, Some(0.975)),
            row("container", "nginx_p99_at50", "lower", 900.0, Some(1.5)),
            row("container", "nginx_rate_at50", "higher", 20000.0, Some(1.0)),
            row("gvisor", "nginx_capacity", "higher", 4000.0, Some(0.1)),
            row("gvisor", "nginx_rate_at50", "higher", 3900.0, Some(0.195)),
            row("gvisor", "nginx_rate_at10", "higher", 3990.0, Some(1.0)),
            row("gvisor", "nginx_p99_at10", "lower", 5000.0, Some(4.0)),
            row("gvisor", "nginx_server_cpu", "lower", 150.0, Some(9.0)),
        ];
        let l = service_lines(&r);
        assert_eq!(l.len(), 2, "{l:#?}");
        assert_eq!(l[0], "nginx: container serves 1.0× (0.88–1.1×) native's requests, p99 at half load 1.5× (1.4–1.7×) native's");
        assert!(l[1].starts_with("nginx: gvisor serves 0.100× (0.090–0.11×) native's requests, half load not carried (3900 of 20000 req/s offered answered), p99 at 10 % load 4.0× (3.6–4.4×) native's"), "{}", l[1]);
        assert!(l[1].ends_with("its CPU per request 9.0× (8.1–9.9×) native's"), "{}", l[1]);
        // Figures without an interval: the reason said once a line.
        let bare = |env: &str, metric: &str, better: &'static str, mean: f64, x: f64| {
            let mut row = row(env, metric, better, mean, Some(x));
            row.overhead = Some(crate::report::Overhead::unpaired(x, None, Some("one pair")));
            row
        };
        r.results.extend([
            bare("uml", "nginx_capacity", "higher", 4000.0, 0.1),
            bare("uml", "nginx_rate_at50", "higher", 20000.0, 1.0),
            bare("uml", "nginx_p99_at50", "lower", 900.0, 3.0),
            bare("uml", "nginx_server_cpu", "lower", 150.0, 9.0),
        ]);
        let l = service_lines(&r);
        assert_eq!(
            l[2],
            "nginx: uml serves 0.100× (no interval: one pair) native's requests, p99 at half load 3.0× (no interval) native's; its CPU per request 9.0× (no interval) native's"
        );
    }

    #[test]
    fn a_long_workload_label_is_cut_and_keeps_its_case() {
        let l = "rfc2544:quick=true,frame_size=[64,1518],direction=out,mlr_width=10 [frame_size=64]";
        let s = shorten(l, ROW_LABEL_MAX);
        assert!(s.chars().count() <= ROW_LABEL_MAX && s.ends_with("… [frame_size=64]"), "{s}");
        assert_eq!(shorten("memcpy", ROW_LABEL_MAX), "memcpy");
    }

    #[test]
    fn verdict_words_follow_the_interval_and_the_target() {
        let nb = |s: String| s.replace('\u{a0}', " ");
        let v = |c: f64, l: f64, h: f64| nb(verdict(c, Some([l, h]), None, 0.05).line());
        assert_eq!(v(163.0, 114.0, 212.0), "163× slower (114–212×)");
        assert_eq!(v(1.23, 1.1, 1.36), "23 % slower (10–36 %)");
        assert_eq!(v(0.5, 0.45, 0.55), "2.0× faster (1.8–2.2×)");
        assert_eq!(v(0.9, 0.86, 0.94), "10 % faster (6.0–14 %)");
        // A lopsided interval reads as its range, the estimate beside it.
        assert_eq!(v(18.0, 2.7, 110.0), "18× slower (2.7–110×)");
        // Across 1: each end in words, and the estimate first.
        assert_eq!(v(1.01, 0.98, 1.03), "≈ same: 1.0 % slower (2.0 % faster … 3.0 % slower)");
        assert_eq!(v(1.02, 0.79, 1.32), "inconclusive: 2.0 % slower (21 % faster … 32 % slower)");
        // "≈ same" by equivalence: the 90 % interval within the target, not the 95 % one. The
        // container's syscall of the issue: 0.980 [0.9498, 1.011] missed 0.95 by 0.0002.
        let (c, ci, eq) = (0.980, Some([0.9498, 1.011]), Some([0.9545, 1.006]));
        assert!(matches!(verdict(c, ci, None, 0.05), Verdict::Inconclusive { .. }));
        assert!(matches!(verdict(c, ci, eq, 0.05), Verdict::Same { .. }));
        assert_eq!(nb(verdict(c, ci, eq, 0.05).line()), "≈ same: 2.0 % faster (5.0 % faster … 1.1 % slower)");
        // An interval that excludes 1 is slower, however narrow (the target is about "same").
        assert!(matches!(verdict(1.01, Some([1.005, 1.015]), None, 0.05), Verdict::Slower { .. }));
        // Never numbers for an interval below zero or unbounded.
        assert_eq!(
            verdict(53.8, Some([-29.1, 138.9]), None, 0.05).line(),
            "inconclusive: the baseline varies too much"
        );
        assert_eq!(
            verdict(1.2, Some([0.9, f64::INFINITY]), None, 0.05).line(),
            "inconclusive: the baseline varies too much"
        );
        assert_eq!(verdict(1.2, None, None, 0.05).line(), "no interval (one sample a side)");
        // A cell: its words with the estimate, then its interval.
        let cell = |v: Verdict, r: Reading| {
            let (a, b) = v.cell(r);
            (nb(a), nb(b))
        };
        assert_eq!(
            cell(verdict(5.1, Some([2.6, 9.9]), None, 0.05), Reading::Time),
            ("5.1× slower".into(), "(2.6–9.9×)".into())
        );
        assert_eq!(
            cell(verdict(c, ci, eq, 0.05), Reading::Time),
            ("≈ same".into(), "−2.0 % (−5.0…+1.1)".into())
        );
    }

    /// What settles an inconclusive cell shrinks with the launches: more of them where it is
    /// wider, none where it cannot settle.
    #[test]
    fn what_settles_an_inconclusive_cell_is_counted_in_launches() {
        // Estimate 1.0, ±10 %: the 90 % interval (±8.4 %) must shrink under ±4.5 %: (8.4/4.5)² ≈ 3.5×.
        let n = settle(1.0, [1.0 / 1.1, 1.1], None, 0.05, 10).expect("it can settle");
        assert!((20..=30).contains(&n), "{n}");
        // Twice as wide: about four times as many in all, five times as many more.
        let m = settle(1.0, [1.0 / 1.21, 1.21], None, 0.05, 10).expect("it can settle");
        assert!(m > 4 * n && m < 6 * n, "{n} {m}");
        // An estimate of 1.3 across 1 settles as "slower" first.
        let k = settle(1.3, [0.9, 1.9], None, 0.05, 4).expect("it can settle");
        assert!(k > 0 && k < 40, "{k}");
        // On the target's edge (1.05) and ±1 %: not as "same"; as "slower" it nearly is.
        assert!(settle(1.05, [1.0 / 1.01 * 1.05, 1.05 * 1.01], None, 0.05, 4).is_none_or(|k| k <= 4));
    }

    /// Exchanges lost in a request/response run are said before the numbers, per environment
    /// and workload; none lost (every clean run), nothing said.
    #[test]
    fn lost_exchanges_are_said_before_the_numbers() {
        let mut r = crate::report::fixtures::default_run();
        let row = |env: &str, metric: &str, mean: f64| {
            let mut x = crate::report::test_row(env, mean, 0.0, "lower");
            (x.workload, x.metric) = (metric.split('_').take(2).collect::<Vec<_>>().join("_"), metric.into());
            x
        };
        r.results.push(row("uml", "tcp_rr_waits", 0.0));
        assert!(!caveats(&r).iter().any(|c| c.starts_with("lost:")), "none lost, none said");
        r.results.push(row("uml", "tcp_rr_waits", 2.0));
        r.results.push(row("qemu-e1000", "udp_rr_timeouts", 0.33));
        let said: Vec<String> = caveats(&r).into_iter().filter(|c| c.starts_with("lost:")).collect();
        assert_eq!(
            said,
            ["lost: uml / tcp_rr (2 a trial), qemu-e1000 / udp_rr (0.3 a trial) (requests or responses that waited for a timeout or a retransmission: the rate holds the waits, not only the path's cost)"]
        );
        assert_eq!((fmt_lost(12.4), fmt_lost(1.98), fmt_lost(0.26)), ("12".into(), "2".into(), "0.3".into()));
    }

    #[test]
    fn runsc_flags_are_said_before_the_numbers() {
        let mut r = crate::report::fixtures::default_run();
        assert!(!caveats(&r).iter().any(|c| c.contains("runsc")), "none given: nothing said");
        r.manifest["runsc_flags"] = serde_json::json!("--strace --gso=false");
        let c = caveats(&r);
        assert!(
            c.iter().any(|c| c.starts_with("runsc ran with --strace --gso=false (VIRTPERF_RUNSC_FLAGS)")),
            "{c:#?}"
        );
    }

    #[test]
    fn environments_held_to_cpus_are_said_before_the_numbers() {
        let mut r = crate::report::fixtures::default_run();
        assert!(placement(&r).is_none(), "no environment pinned: nothing said");
        r.manifest["host_cpus"] = serde_json::json!(2);
        for e in r.environments.iter_mut() {
            match e.name.as_str() {
                "gvisor" | "uml" => e.params = serde_json::json!({"cpuset": "last"}),
                "qemu-virtio" => e.params = serde_json::json!({"pin": "0-1"}),
                _ => {}
            }
        }
        let p = placement(&r).expect("a placement line");
        assert_eq!(
            p,
            "placement: gvisor, uml on CPU 1 only; qemu-virtio on CPUs 0-1 only (cpuset): their figures hold for that placement"
        );
        assert!(caveats(&r).contains(&p));
        // The tester pinned: said with where the lab's packets are received.
        r.manifest["lab"] = serde_json::json!({"tester_cpuset": "0"});
        assert_eq!(
            placement(&r).expect("a placement line"),
            "placement: gvisor, uml on CPU 1 only; qemu-virtio on CPUs 0-1 only; the lab's tester and its packets' receive work on CPU 0 (cpuset): their figures hold for that placement"
        );
        // Every environment on one CPU: said so, not listed.
        for e in r.environments.iter_mut() {
            e.params = serde_json::json!({"cpuset": "last"});
        }
        assert_eq!(
            placement(&r).expect("a placement line"),
            "placement: every environment on CPU 1 only; the lab's tester and its packets' receive work on CPU 0 (cpuset): their figures hold for that placement"
        );
        for e in r.environments.iter_mut() {
            e.params = serde_json::json!({});
        }
        assert_eq!(
            placement(&r).expect("the tester alone is a placement"),
            "placement: the lab's tester and its packets' receive work on CPU 0 (cpuset): their figures hold for that placement"
        );
    }

    #[test]
    fn a_rate_that_falls_is_slower() {
        let mut x = crate::report::test_row("gvisor", 1.0, 0.1, "higher");
        x.overhead = Some(crate::report::Overhead::unpaired(0.156, Some([0.14, 0.17]), None));
        let v = row_verdict(&x, 0.05).unwrap();
        assert!(matches!(v, Verdict::Slower { cost, .. } if (cost - 6.41).abs() < 0.01), "{v:?}");
        // Said of the rate itself: it is 6.4× lower; as time, 6.4× slower.
        assert_eq!(v.phrase(Reading::Rate), "6.4× lower (5.9–7.1×)");
        assert_eq!(v.line(), "6.4× slower (5.9–7.1×)");
        assert_eq!(v.word(Reading::Rate), "lower");
        // UML's goodput at 0.72× native's: 28 % lower (39 % slower as time).
        x.overhead = Some(crate::report::Overhead::unpaired(0.72, Some([0.70, 0.74]), None));
        let v = row_verdict(&x, 0.05).unwrap();
        assert_eq!(v.phrase(Reading::Rate).replace('\u{a0}', " "), "28 % lower (26–30 %)");
        // A rate's interval reaching below zero: no numbers.
        x.overhead = Some(crate::report::Overhead::unpaired(3.05, Some([-2.57, 8.76]), None));
        assert_eq!(row_verdict(&x, 0.05).unwrap().line(), "inconclusive: the baseline varies too much");
        assert_eq!(budget_words(270_000), "4 min 30 s");
        assert_eq!(budget_words(7_200_000), "2 h");
    }

    #[test]
    fn values_read_with_three_digits() {
        assert_eq!(fmt_value(86.26, "ns"), "86.3 ns");
        assert_eq!(fmt_value(453_000_000.0, "iter/s"), "453M iter/s");
        assert_eq!(fmt_value(25_200.0, "trans/s"), "25.2k trans/s");
        assert_eq!(fmt_value(16_439.0, "ns"), "16.4 µs");
        assert_eq!(fmt_value(2_500_000.0, "ns"), "2.50 ms");
        assert_eq!(fmt_value(999.0, "ns"), "999 ns");
        assert_eq!(fmt_value(0.01716, "s"), "17.2 ms");
        assert_eq!(fmt_value(17.16, "ms"), "17.2 ms");
        assert_eq!(fmt_value(2.5, "Gbit/s"), "2.50 Gbit/s");
    }
}
