//! Precision mode's rule: after a minimum number of repetitions (or launches), each further one goes
//! to the cell whose overhead ratio is furthest from its target precision, on the side (the
//! environment or its baseline) that contributes more to that ratio's uncertainty; a cell stops
//! when the half-width of its ratio's 95 % CI is within the target; the run stops at its budget.
//!
//! Pure: the orchestrator gives each cell's values grouped by launch and carries out the answer.
//!
//! A stopping rule that looks at the data biases the interval it stops on: it stops where the
//! spread happens to look small, so the ordinary 95 % interval then covers the truth only 86–90 %
//! of the time (simulated below, 3–5 launches a side to start, one more at a time). Two things keep
//! the stated intervals honest, both chosen by that simulation: at least [`MIN_DF`] degrees of
//! freedom on each side before a cell may stop (4 launches, or 4 repetitions of one launch), and
//! the rule's intervals — the one it stops on and the one the report states — computed at the
//! [`LEVEL`] level, which brings their coverage under the rule back to at least 95 %
//! (`tests::coverage_*`; a fixed design needs no such correction, and gets none). Of the pairs
//! simulated, this one gives the narrowest intervals for the trials spent: 3 launches of 2
//! repetitions at 99.5 % stated a half-width of 7.7 % where 4 launches of 1 at 99 % state 3.9 %
//! (a cell with equal launch and trial spreads of 1 %), at 8 trials a side instead of 9 with one
//! warm-up a launch; 2 degrees of freedom cost t = 9.9 at 99 %, 3 cost 5.8.

use crate::{ratio_ci_at, Estimate, Nested, RatioCi, Summary};
use serde::Serialize;

/// The confidence level of precision mode's intervals: what keeps their coverage at 95 % or more
/// under the stopping rule (see the module's documentation).
pub const LEVEL: f64 = 0.99;

/// Degrees of freedom each side of a ratio needs before its cell may stop (4 launches, or 4
/// repetitions when there is one launch).
pub const MIN_DF: f64 = 3.0;

/// The launches (or repetitions of one launch) a side needs before its cell may stop.
pub const MIN_UNITS: u32 = MIN_DF as u32 + 1;

/// A side's values, one list per launch.
pub type Groups = [Vec<f64>];

/// The estimate of one side's mean: over launches (Kalibera & Jones) when it has two or more,
/// else over the repetitions of its one launch.
pub fn side_estimate(groups: &Groups) -> Option<Estimate> {
    let n = Nested::of(groups)?;
    if n.launches >= 2 {
        return Some(n.estimate());
    }
    let all: Vec<f64> = groups.iter().flatten().copied().collect();
    Summary::of(&all).map(|s| s.estimate())
}

/// Which side of a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The environment (the numerator).
    Env,
    /// Its baseline (the denominator).
    Baseline,
}

/// Where a cell stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub ratio: Option<RatioCi>,
    /// Half-width of the ratio's 95 % CI relative to the ratio; infinite without an interval.
    pub relative_half_width: f64,
    /// relative_half_width / target: at most 1 when the cell is done.
    pub distance: f64,
    /// The side whose variance contributes more to the ratio's (`v_env` against `r² v_base`).
    pub noisier: Side,
}

impl Standing {
    pub fn met(&self) -> bool {
        self.distance <= 1.0
    }
}

/// Where the ratio `env / baseline` stands against `target` (relative half-width, 0.02 = 2 %),
/// its interval at precision mode's [`LEVEL`].
pub fn standing(env: &Groups, baseline: &Groups, target: f64) -> Standing {
    let (a, b) = (side_estimate(env), side_estimate(baseline));
    let ratio = a.zip(b).and_then(|(a, b)| ratio_ci_at(&a, &b, LEVEL));
    let enough = a.zip(b).is_some_and(|(a, b)| a.df >= MIN_DF && b.df >= MIN_DF);
    let rhw = match ratio.and_then(|r| r.ci95.map(|(lo, hi)| (hi - lo) / 2.0 / r.ratio.abs())) {
        Some(x) if x.is_finite() && enough => x,
        _ => f64::INFINITY,
    };
    // Without an estimate (or its variance) a side is the one to grow.
    let noisier = match (a, b, ratio) {
        (Some(a), Some(b), Some(r)) if a.df >= 1.0 && b.df >= 1.0 => {
            if a.var_of_mean >= r.ratio * r.ratio * b.var_of_mean {
                Side::Env
            } else {
                Side::Baseline
            }
        }
        (Some(a), _, _) if a.df >= 1.0 => Side::Baseline,
        _ => Side::Env,
    };
    Standing { ratio, relative_half_width: rhw, distance: rhw / target, noisier }
}

/// Most repetitions one launch of a case gets in precision mode, however cheap they are.
pub const MAX_REPS_PER_LAUNCH: usize = 25;

/// How many repetitions of a case a new launch should hold, after Kalibera and Jones ("Rigorous
/// benchmarking in reasonable time", ISMM 2013, the optimal number of iterations per execution):
/// n = ⌈√((c₂ / c₁) · T²₁ / T²₂)⌉, with c₁ the cost of one repetition, c₂ the cost of a launch
/// (its start and warm-ups) and T²₁, T²₂ the within- and between-launch variance components
/// estimated from `groups` so far. Cheap, launch-quiet repetitions get many per launch; where
/// launches differ, launches are what pays. Bounded below by `min` (the experiment's `reps`) and
/// above by what costs no more than the launch itself (and [`MAX_REPS_PER_LAUNCH`]); `min`
/// until two launches have shown what varies.
pub fn reps_per_launch(groups: &Groups, trial_cost: f64, launch_cost: f64, min: usize) -> usize {
    let min = min.max(1);
    if !(trial_cost > 0.0 && launch_cost >= 0.0) {
        return min;
    }
    let most = ((launch_cost / trial_cost).floor() as usize).clamp(min, MAX_REPS_PER_LAUNCH.max(min));
    let Some(n) = Nested::of(groups).filter(|n| n.launches >= 2) else {
        return min;
    };
    // One repetition a launch so far shows nothing of the spread within one: a second, where it
    // costs less than the launch, lets the next launch be sized.
    if n.trials == n.launches {
        return if most >= 2 { min.max(2) } else { min };
    }
    if n.var_trial <= 0.0 {
        return min;
    }
    if n.var_launch <= 0.0 {
        return most;
    }
    let best = ((launch_cost / trial_cost) * n.var_trial / n.var_launch).sqrt().ceil();
    if best.is_finite() {
        (best as usize).clamp(min, most)
    } else {
        most
    }
}

/// A launch's first repetition of a case against its later ones, where they differ clearly: the
/// two-level model takes a launch's repetitions as alike, but a launch holding many repetitions of
/// one case runs them back to back, where the first ran after other workloads (UML's `pde`: ~8 ms
/// right after another, 11–19 ms after other workloads).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FirstVsRest {
    /// How much the first differs from the mean of the rest, geometric mean over launches, %.
    pub percent: f64,
    /// Student's t of the log-ratios over launches.
    pub t: f64,
    /// Launches of two repetitions or more it rests on.
    pub launches: usize,
}

/// The level at which [`first_vs_rest`] says a difference: 99.9 % two-sided, since a report tests
/// dozens of cells (45 in the default) and a false alarm in one would be read as a finding.
pub const ORDER_LEVEL: f64 = 0.999;

/// The first repetition of each launch (groups in the order they ran) against its later ones,
/// over the launches of two or more (at least 3 of them): Some when the mean log-ratio's t exceeds
/// the [`ORDER_LEVEL`] quantile, None when it does not or cannot be told.
pub fn first_vs_rest(groups: &Groups) -> Option<FirstVsRest> {
    let d: Vec<f64> = groups
        .iter()
        .filter(|g| g.len() >= 2)
        .filter_map(|g| {
            let rest = g[1..].iter().sum::<f64>() / (g.len() - 1) as f64;
            (g[0] > 0.0 && rest > 0.0).then(|| (g[0] / rest).ln())
        })
        .collect();
    if d.len() < 3 {
        return None;
    }
    let n = d.len() as f64;
    let mean = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    if var.is_nan() || var <= 0.0 {
        return None;
    }
    let t = mean / (var / n).sqrt();
    (t.abs() > crate::t_quantile(ORDER_LEVEL, n - 1.0)).then(|| FirstVsRest {
        percent: (mean.exp() - 1.0) * 100.0,
        t,
        launches: d.len(),
    })
}

/// The cell furthest from its target and the side to add to, or None when every cell is done.
pub fn next(standings: &[Standing]) -> Option<(usize, Side)> {
    standings
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.met())
        .max_by(|a, b| a.1.distance.total_cmp(&b.1.distance))
        .map(|(i, s)| (i, s.noisier))
}

// ------------------------------------------------------------------------------------------
// Paired designs: a further launch block holds the baseline and the environments whose ratios
// need one most per second of its cost.

/// When a paired ratio stops taking launch blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Once its interval at [`LEVEL`] (99 %) is within the target, with [`MIN_UNITS`] blocks at
    /// least: an optional stopping rule, whose 99 % intervals cover at 95 % or more.
    StopWhenMet,
    /// Stein's two-stage procedure: the plan's minimum is the pilot; the blocks a ratio needs are
    /// sized once from the pilot's spread and degrees of freedom
    /// ([`crate::paired::units_needed_stein`] at 95 %), and it stops there whatever its interval
    /// then looks like — no optional stopping; its interval rests on the pilot's spread where that
    /// is the larger ([`crate::paired::paired_ratio_stein`]), so its 95 % keeps its level.
    TwoStage,
}

impl Rule {
    /// The confidence level the rule's intervals are stated at.
    pub fn level(self) -> f64 {
        match self {
            Rule::StopWhenMet => LEVEL,
            Rule::TwoStage => 0.95,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Rule::StopWhenMet => "stop when met (99 %)",
            Rule::TwoStage => "two-stage (95 %)",
        }
    }
}

/// The most blocks a ratio's need is counted to (what it needs is said in full up to there; its
/// cost against the budget left decides whether it is set aside).
pub const MAX_BLOCKS: usize = 1_000_000;

/// The most blocks a ratio's pilot grows to (see [`pilot_blocks`]).
pub const MAX_PILOT: usize = 16;

/// What share of the budget one ratio's pilot may add beyond the plan's minimum.
pub const PILOT_SHARE: f64 = 0.02;

/// How many blocks a ratio's pilot holds — the blocks Stein's second stage is sized from and
/// whose spread and degrees of freedom its interval keeps: the plan's minimum `min`, grown where
/// a block of the ratio costs little against the `budget` (its extra blocks at most
/// [`PILOT_SHARE`] of it), up to [`MAX_PILOT`].
///
/// Why: Stein's need is (t(0.975, n₀ − 1) · s / δ)², so a pilot of 4 blocks (t = 3.18) asks on
/// average 2.1× the blocks of one of 16 (t = 2.13) for the same spread, and its s, on 3 degrees of
/// freedom, is above 1.6× the true spread one time in ten — measured: a container's `memcpy`
/// sized to 215 blocks from its pilot of 4 where its spread over 219 asked 30. Decided from costs
/// alone (never from the pilot's spread), so the procedure stays Stein's with its coverage.
pub fn pilot_blocks(min: usize, block_secs: f64, budget: f64) -> usize {
    if !(block_secs > 0.0 && budget > 0.0) {
        return min;
    }
    let extra = (PILOT_SHARE * budget / block_secs).floor();
    if extra.is_finite() {
        (min + extra as usize).clamp(min, MAX_PILOT.max(min))
    } else {
        min
    }
}

/// The level at which a ratio's minimum must already size it within itself for its pilot to stay
/// the minimum ([`keeps_minimum`]).
pub const KEEP_LEVEL: f64 = 0.99;

/// Whether a ratio keeps the minimum as its pilot: Stein's need from the minimum's spread (`sd`,
/// `df`), at [`KEEP_LEVEL`], is within the `blocks` it holds — it has its answer, and growing its
/// pilot would cost blocks for nothing. Checked at 99 %, not at the 95 % it states: a ratio kept
/// at its minimum is one whose spread looked small, and its interval, conditioned on that, covers
/// less than 95 %; the larger pilots of the rest no longer make up for it as Stein's over-wide
/// intervals from a large spread did. At 95 % the simulation's container cell (25 repetitions a
/// launch) covered 93.7 %.
pub fn keeps_minimum(sd: f64, df: f64, target: f64, blocks: usize) -> bool {
    crate::paired::units_needed_stein(sd, df, target, KEEP_LEVEL, MIN_UNITS as usize, MAX_BLOCKS) <= blocks
}

/// A ratio's pilot, decided once its `min` blocks are in: the minimum where their spread
/// (`spread`: sd and df, None below two blocks) already sizes it ([`keeps_minimum`]), else grown
/// where its blocks are cheap ([`pilot_blocks`]). Precision mode and the simulation both decide
/// with it.
pub fn pilot_of(spread: Option<(f64, f64)>, min: usize, target: f64, block_secs: f64, budget: f64) -> usize {
    if spread.is_some_and(|(sd, df)| keeps_minimum(sd, df, target, min)) {
        min
    } else {
        pilot_blocks(min, block_secs, budget)
    }
}

/// A paired ratio as the block planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Watched {
    /// The environment whose ratio it is (an index the caller knows; its baseline is shared).
    pub env: usize,
    /// Blocks it rests on.
    pub blocks: usize,
    /// The spread of its block log-ratios (None below two blocks).
    pub sd_log: Option<f64>,
    /// Relative half-width of its interval now (infinite without one).
    pub rhw: f64,
    pub target: f64,
    /// Blocks it needs in all, from its spread (at least [`MIN_UNITS`]).
    pub needed: usize,
    pub met: bool,
    /// Seconds one more block costs this ratio alone (its environment's launch and its
    /// baseline's, their warm-ups and trials of its case); 0 when not known, then a block of its
    /// environment with every case stands in.
    pub block_secs: f64,
    /// Of `block_secs`, what every ratio of its environment shares: the environment's launch and
    /// its baseline's (0 when not known: then nothing is counted as shared).
    pub launch_secs: f64,
}

/// Where paired `pairs` stand against `target` under `rule`.
pub fn watch(pairs: &[crate::paired::Pair], target: f64, rule: Rule) -> Watched {
    let r = crate::paired::paired_ratio(pairs, rule.level());
    let blocks = r.map_or(0, |r| r.blocks);
    let sd_log = r.filter(|r| r.blocks >= 2).map(|r| r.sd_log);
    let rhw = match r {
        Some(r) if r.blocks >= 2 => r.relative_half_width(),
        _ => f64::INFINITY,
    };
    let df = r.map_or(0.0, |r| r.df);
    let needed = match (sd_log, rule) {
        (None, _) => MIN_UNITS as usize,
        // Stein: the interval will rest on this spread and its degrees of freedom.
        (Some(sd), Rule::TwoStage) => {
            crate::paired::units_needed_stein(sd, df, target, rule.level(), MIN_UNITS as usize, MAX_BLOCKS)
        }
        (Some(sd), Rule::StopWhenMet) => {
            crate::paired::units_needed(sd, target, rule.level(), MAX_BLOCKS).max(MIN_UNITS as usize)
        }
    };
    let met = match rule {
        Rule::StopWhenMet => blocks >= MIN_UNITS as usize && rhw <= target,
        Rule::TwoStage => blocks >= needed,
    };
    Watched { env: 0, blocks, sd_log, rhw, target, needed, met, block_secs: 0.0, launch_secs: 0.0 }
}

/// A ratio set aside: it cannot reach its target in the budget left at the rate it gets there.
#[derive(Debug, Clone, PartialEq)]
pub struct SetAside {
    /// The ratio's place in the list given to [`plan_block`].
    pub index: usize,
    pub env: usize,
    pub rhw: f64,
    pub more_blocks: usize,
    /// Seconds those blocks would take (its launches, its baseline's, their trials).
    pub secs: f64,
}

/// The next launch block: its members (environments besides the baseline, which every block
/// holds), and the ratios set aside.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockPlan {
    pub members: Vec<usize>,
    pub set_aside: Vec<SetAside>,
    /// The ratios the block serves (places in the list given to [`plan_block`]): those of its
    /// members neither met nor set aside — a block runs their cases only.
    pub serving: Vec<usize>,
}

/// How much nearer its target one more block brings a ratio: the drop in its excess width
/// (relative half-width over target, above 1), predicted from its spread; a ratio with no spread
/// known yet gains a whole unit (it must be measured to be planned).
fn block_gain(w: &Watched, level: f64) -> f64 {
    let Some(sd) = w.sd_log else { return 1.0 };
    let half = |n: usize| (crate::t_quantile(level, (n - 1) as f64) * sd / (n as f64).sqrt()).exp() - 1.0;
    let now = if w.rhw.is_finite() { w.rhw } else { half(w.blocks.max(2)) };
    let next = half(w.blocks.max(1) + 1);
    let excess = |h: f64| (h / w.target - 1.0).max(0.0);
    let gain = (excess(now) - excess(next)).max(0.0);
    // Short of the blocks its stages asked for, a ratio whose interval already looks within the
    // target still gains a little: stopping it where it looks met is the optional stopping the
    // stages exist to avoid (its pilot above all), so it is finished when nothing needier is left.
    if w.blocks < w.needed {
        gain.max(PENDING_GAIN)
    } else {
        gain
    }
}

/// The gain of a block to a ratio short of its stages' blocks whose interval looks met already.
const PENDING_GAIN: f64 = 1e-3;

/// The ratios the budget left cannot hold (see [`plan_block`]): with known spreads, taken by the
/// least each adds to what is already held, up to `budget_left`; the rest, in `watched`'s order.
///
/// A ratio adds its own trials, and launches only beyond those its environment's ratios already
/// held will run: two ratios of one environment share its launches (`launch_secs`), so UML's
/// `intmix` and `syscall`, 20 blocks each at ~1.8 s a launch, cost ~80 s priced apart and ~55 s
/// together.
pub fn set_aside(
    watched: &[Watched],
    unit_cost: &dyn Fn(&[usize]) -> f64,
    budget_left: f64,
) -> Vec<SetAside> {
    let own = |w: &Watched| if w.block_secs > 0.0 { w.block_secs } else { unit_cost(&[w.env]) };
    let more = |w: &Watched| w.needed.saturating_sub(w.blocks).max(1);
    let shared = |w: &Watched| w.launch_secs.clamp(0.0, own(w));
    let mut left: Vec<usize> = (0..watched.len())
        .filter(|&i| {
            let w = &watched[i];
            !w.met && w.sd_log.is_some() && w.blocks >= MIN_UNITS as usize
        })
        .collect();
    // Blocks each environment's held ratios will run.
    let mut held: Vec<(usize, usize)> = Vec::new();
    let (mut committed, mut out) = (0.0, Vec::new());
    let adds = |held: &[(usize, usize)], w: &Watched| -> f64 {
        let n = more(w);
        let runs = held.iter().find(|h| h.0 == w.env).map_or(0, |h| h.1);
        n as f64 * (own(w) - shared(w)) + n.saturating_sub(runs) as f64 * shared(w)
    };
    while !left.is_empty() {
        let Some((k, secs)) = left
            .iter()
            .enumerate()
            .map(|(k, &i)| (k, adds(&held, &watched[i])))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(left[a.0].cmp(&left[b.0])))
        else {
            break;
        };
        let i = left.remove(k);
        let w = &watched[i];
        if committed + secs <= budget_left {
            committed += secs;
            match held.iter_mut().find(|h| h.0 == w.env) {
                Some(h) => h.1 = h.1.max(more(w)),
                None => held.push((w.env, more(w))),
            }
        } else {
            out.push(SetAside {
                index: i,
                env: w.env,
                rhw: w.rhw,
                more_blocks: more(w),
                secs: more(w) as f64 * own(w),
            });
        }
    }
    out.sort_by_key(|a| a.index);
    out
}

/// The next block, by value per second: each ratio not yet met gains what [`block_gain`] says;
/// an environment's gain is its ratios', its cost what a block of it alone costs (`unit_cost(&[e])`:
/// its launch, its warm-ups and trials, and the baseline's beside them). The block starts with the
/// environment of the best gain per second and takes in every other whose joining does not lower
/// the block's gain per second — the baseline's launch is shared, so one block usually serves
/// several.
///
/// What the budget left can hold is decided first, ratio by ratio: each ratio's remaining blocks
/// cost what a block of its own case costs (`block_secs`, its launch and its baseline's shared
/// with the other ratios of its environment, `launch_secs`); taken from the cheapest addition up,
/// the ratios that pass `budget_left` are set aside (once their spread is known) and said with
/// what they would need. Cheapest first is what brings the most ratios to their target in a budget (each met ratio
/// counts one, whatever it cost); a block then runs only the cases of the ratios kept, so a
/// ratio out of reach costs no trial — measured on the default experiment before this rule, a
/// container's six cheap ratios (5–32 s each) were all set aside because a block of the
/// container priced in its network cases too, and the budget went to one gVisor ratio.
pub fn plan_block(
    watched: &[Watched],
    unit_cost: &dyn Fn(&[usize]) -> f64,
    budget_left: f64,
    level: f64,
) -> BlockPlan {
    let mut plan = BlockPlan { set_aside: set_aside(watched, unit_cost, budget_left), ..Default::default() };
    let aside = |i: usize| plan.set_aside.iter().any(|a| a.index == i);
    let mut gains: Vec<(usize, f64)> = Vec::new();
    for (_, w) in watched.iter().enumerate().filter(|(i, w)| !w.met && !aside(*i)) {
        let g = block_gain(w, level);
        match gains.iter_mut().find(|x| x.0 == w.env) {
            Some(x) => x.1 += g,
            None => gains.push((w.env, g)),
        }
    }
    gains.retain(|g| g.1 > 0.0);
    let per_sec = |e: usize, g: f64| g / unit_cost(&[e]).max(1e-9);
    gains.sort_by(|a, b| per_sec(b.0, b.1).total_cmp(&per_sec(a.0, a.1)).then(a.0.cmp(&b.0)));
    let mut total = 0.0;
    for (e, g) in gains {
        let mut with = plan.members.clone();
        with.push(e);
        if plan.members.is_empty()
            || (total + g) / unit_cost(&with).max(1e-9) >= total / unit_cost(&plan.members).max(1e-9)
        {
            plan.members = with;
            total += g;
        }
    }
    plan.members.sort_unstable();
    plan.serving = watched
        .iter()
        .enumerate()
        .filter(|(i, w)| !w.met && !aside(*i) && plan.members.contains(&w.env))
        .map(|(i, _)| i)
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UML's `pde` as measured (launches of 1 and of 25, the first of each slower): said; launches
    /// whose first is like the rest, or too few launches of several, say nothing.
    #[test]
    fn a_first_trial_unlike_the_rest_is_said_and_only_then() {
        let mut rng = Rng(7);
        let launch = |rng: &mut Rng, n: usize, first: f64| -> Vec<f64> {
            (0..n).map(|i| rng.normal(if i == 0 { first } else { 8.0 }, 0.24)).collect()
        };
        let uml: Vec<Vec<f64>> =
            (0..12).map(|i| launch(&mut rng, if i < 4 { 1 } else { 25 }, 14.0)).collect();
        let f = first_vs_rest(&uml).expect("said");
        assert_eq!(f.launches, 8);
        assert!((60.0..=90.0).contains(&f.percent) && f.t > 10.0, "{f:?}");
        let alike: Vec<Vec<f64>> = (0..12).map(|_| launch(&mut rng, 5, 8.0)).collect();
        assert_eq!(first_vs_rest(&alike), None);
        let few: Vec<Vec<f64>> = (0..2).map(|_| launch(&mut rng, 25, 14.0)).collect();
        assert_eq!(first_vs_rest(&few), None, "two launches of several cannot tell");
    }

    use crate::sim::Rng;

    /// An environment measured as the orchestrator does: launches, each with its own offset
    /// (sd `launch`) around `mean`, and repetitions around that (sd `trial`).
    struct Truth {
        mean: f64,
        launch: f64,
        trial: f64,
    }
    impl Truth {
        fn launch_of(&self, rng: &mut Rng, reps: usize) -> Vec<f64> {
            let m = rng.normal(self.mean, self.launch);
            (0..reps).map(|_| rng.normal(m, self.trial)).collect()
        }
    }

    /// How a simulated run grows: launches of a fixed size, launches sized by
    /// [`reps_per_launch`] (a repetition costing 1, a launch [`LAUNCH_COST`]), or repetitions
    /// of one launch.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Design {
        Launches,
        Allocated,
        Repetitions,
    }

    /// A launch's cost in repetitions in the simulation (a TCG guest's boot and warm-ups against
    /// 0.2 s trials is of this order).
    const LAUNCH_COST: f64 = 30.0;

    /// Runs precision mode on one cell to the end: [`MIN_UNITS`] launches of one repetition on
    /// each side (or, for `Repetitions`, one launch of as many), then one more launch (or repetition) at a time on the
    /// side `next` names, until the target is met or `max` units a side; returns whether the
    /// final interval covers the true ratio, how many units it took and what they cost.
    fn simulate(
        rng: &mut Rng,
        env: &Truth,
        base: &Truth,
        design: Design,
        target: f64,
    ) -> (Option<bool>, usize, f64) {
        let launches = design != Design::Repetitions;
        let min = MIN_UNITS as usize;
        let (reps, max) = if launches { (1, 40) } else { (0, 400) };
        // One launch: what its interval covers is that launch; the repetitions are drawn with no
        // launch effect to miss (the whole spread within the launch).
        let sd = |t: &Truth| (t.launch * t.launch + t.trial * t.trial).sqrt();
        let start = |t: &Truth, rng: &mut Rng| -> Vec<Vec<f64>> {
            if launches {
                (0..min).map(|_| t.launch_of(rng, reps)).collect()
            } else {
                vec![(0..min).map(|_| rng.normal(t.mean, sd(t))).collect()]
            }
        };
        let (mut a, mut b) = (start(env, rng), start(base, rng));
        let size = |g: &Vec<Vec<f64>>| if launches { g.len() } else { g[0].len() };
        let cost =
            |g: &Vec<Vec<f64>>| g.len() as f64 * LAUNCH_COST + g.iter().map(Vec::len).sum::<usize>() as f64;
        loop {
            let s = standing(&a, &b, target);
            let side = match next(std::slice::from_ref(&s)) {
                Some((_, side)) if size(&a) + size(&b) < 2 * max => side,
                _ => {
                    let truth = env.mean / base.mean;
                    let covered = s.ratio.and_then(|r| r.ci95).map(|(lo, hi)| lo <= truth && truth <= hi);
                    return (covered, size(&a) + size(&b), cost(&a) + cost(&b));
                }
            };
            let (g, t) = match side {
                Side::Env => (&mut a, env),
                Side::Baseline => (&mut b, base),
            };
            match design {
                Design::Launches => g.push(t.launch_of(rng, reps)),
                Design::Allocated => {
                    let n = reps_per_launch(g, 1.0, LAUNCH_COST, reps);
                    g.push(t.launch_of(rng, n));
                }
                Design::Repetitions => g[0].push(rng.normal(t.mean, sd(t))),
            }
        }
    }

    /// Cells of the kinds precision mode meets: variance mostly between launches, mostly within
    /// one, noisy on the baseline's side, no launch effect at all, a tight target and loose ones.
    fn cells() -> Vec<(Truth, Truth, f64)> {
        let t = |mean, launch, trial| Truth { mean, launch, trial };
        vec![
            (t(150.0, 4.0, 1.0), t(100.0, 2.0, 1.0), 0.02),
            (t(120.0, 0.5, 6.0), t(100.0, 0.5, 5.0), 0.02),
            (t(300.0, 3.0, 2.0), t(100.0, 3.0, 2.0), 0.03),
            (t(110.0, 1.0, 1.0), t(100.0, 1.0, 1.0), 0.005),
            (t(200.0, 8.0, 4.0), t(100.0, 2.0, 2.0), 0.05),
            (t(200.0, 0.0, 4.0), t(100.0, 0.0, 2.0), 0.01),
            (t(100.0, 0.2, 0.5), t(100.0, 0.2, 0.5), 0.05),
            (t(130.0, 1.5, 1.0), t(100.0, 1.0, 1.0), 0.05),
        ]
    }

    /// Coverage of each simulated cell's intervals under `design`, and the mean cost of a run.
    fn coverage(design: Design, seed: u64) -> Vec<f64> {
        let mut costs = Vec::new();
        for (i, (env, base, target)) in cells().iter().enumerate() {
            let mut rng = Rng(seed + i as u64);
            let (mut covered, mut stated, mut units, mut spent) = (0usize, 0usize, 0usize, 0.0);
            let runs = 2000;
            for _ in 0..runs {
                let (c, n, cost) = simulate(&mut rng, env, base, design, *target);
                units += n;
                spent += cost;
                if let Some(c) = c {
                    stated += 1;
                    covered += usize::from(c);
                }
            }
            let cov = covered as f64 / stated as f64;
            // 2000 runs: the binomial standard error at 95 % is 0.005; 0.94 is two of them below.
            assert!(
                cov >= 0.94,
                "cell {i} ({design:?}): coverage {cov:.4} over {stated} intervals ({:.1} units a run)",
                units as f64 / runs as f64
            );
            assert_eq!(stated, runs, "cell {i}: every run ends with an interval");
            costs.push(spent / runs as f64);
        }
        costs
    }

    /// The promise of precision mode with launches (the two-level model): under the stopping
    /// rule, the stated intervals cover the true ratio at least 94 % of the time.
    #[test]
    fn coverage_under_the_rule_and_the_two_level_model_stays_at_least_94_percent() {
        coverage(Design::Launches, 2013);
    }

    /// The same with one launch, repetitions added one at a time (what the interval then covers
    /// is that launch; here the repetitions have no launch effect to miss).
    #[test]
    fn coverage_under_the_rule_with_one_launch_stays_at_least_94_percent() {
        coverage(Design::Repetitions, 1955);
    }

    /// Launches sized after Kalibera and Jones keep the coverage, and cost less where the
    /// repetitions are noisy and the launches quiet (cells 1 and 5: the spread lies within a
    /// launch, so cheap repetitions do the work of costly launches); nowhere do they cost much more.
    /// (Measured: 0.86× and 0.68× there, 0.97–1.12× elsewhere.)
    #[test]
    fn launches_sized_by_their_variance_components_keep_coverage_and_cost_less() {
        let fixed = coverage(Design::Launches, 2013);
        let sized = coverage(Design::Allocated, 2013);
        for (i, (f, s)) in fixed.iter().zip(&sized).enumerate() {
            eprintln!("cell {i}: fixed launches cost {f:.0}, sized {s:.0} ({:.2}×)", s / f);
            assert!(*s <= f * 1.15, "cell {i}: sized launches cost {s:.0} against {f:.0}");
        }
        let (s, f) = (sized[1] + sized[5], fixed[1] + fixed[5]);
        assert!(s <= f * 0.85, "cells 1 and 5: sized launches cost {s:.0} against {f:.0}");
    }

    /// The allocation itself: many repetitions where launches are quiet and repetitions cheap,
    /// few where launches differ, bounded by the launch's own cost and the experiment's minimum.
    #[test]
    fn repetitions_per_launch_follow_the_costs_and_the_variance_components() {
        let quiet = vec![vec![10.0, 14.0, 6.0], vec![9.0, 13.0, 8.0], vec![12.0, 7.0, 11.0]];
        let launchy = vec![vec![10.0, 10.1, 9.9], vec![20.0, 20.2, 19.9], vec![15.0, 15.1, 14.8]];
        assert_eq!(reps_per_launch(&quiet, 1.0, 30.0, 2), 25, "no launch effect: as many as the cap");
        assert_eq!(reps_per_launch(&quiet, 1.0, 8.0, 2), 8, "no more than the launch costs");
        assert_eq!(reps_per_launch(&launchy, 1.0, 30.0, 2), 2, "launches differ: the minimum");
        assert_eq!(reps_per_launch(&quiet[..1], 1.0, 30.0, 2), 2, "one launch shows nothing");
        assert_eq!(reps_per_launch(&quiet, 0.0, 30.0, 3), 3, "no cost known");
        let single = vec![vec![10.0], vec![14.0], vec![6.0], vec![9.0]];
        assert_eq!(reps_per_launch(&single, 1.0, 30.0, 1), 2, "a second repetition shows the spread within");
        assert_eq!(reps_per_launch(&single, 1.0, 1.5, 1), 1, "unless it costs more than the launch");
        // Between: √(c₂/c₁ · T²₁/T²₂) with T²₁ = 1, T²₂ = 1 − 1/3.
        let mid = vec![vec![9.0, 10.0, 11.0], vec![10.0, 11.0, 12.0], vec![11.0, 12.0, 13.0]];
        assert_eq!(reps_per_launch(&mid, 1.0, 24.0, 2), 6);
    }

    /// What the correction is for: the ordinary 95 % interval, stopped on by the same rule, falls
    /// well short (if it did not, the wider intervals would cost launches for nothing).
    #[test]
    fn coverage_of_ordinary_intervals_under_the_rule_falls_short() {
        let mut rng = Rng(99);
        let (env, base, target) = &cells()[0];
        let (mut covered, runs) = (0, 1000);
        for _ in 0..runs {
            let mut a: Vec<Vec<f64>> = (0..3).map(|_| env.launch_of(&mut rng, 3)).collect();
            let mut b: Vec<Vec<f64>> = (0..3).map(|_| base.launch_of(&mut rng, 3)).collect();
            loop {
                let r = crate::ratio_ci_of(&side_estimate(&a).unwrap(), &side_estimate(&b).unwrap()).unwrap();
                let (lo, hi) = r.ci95.unwrap_or((f64::NEG_INFINITY, f64::INFINITY));
                if (hi - lo) / 2.0 / r.ratio <= *target || a.len() + b.len() >= 80 {
                    covered += usize::from(lo <= 1.5 && 1.5 <= hi);
                    break;
                }
                match standing(&a, &b, *target).noisier {
                    Side::Env => a.push(env.launch_of(&mut rng, 3)),
                    Side::Baseline => b.push(base.launch_of(&mut rng, 3)),
                }
            }
        }
        let cov = covered as f64 / runs as f64;
        assert!(cov < 0.92, "ordinary intervals under the rule cover {cov}");
    }

    /// The default experiment's case before this rule: a container whose cheap ratios need many
    /// cheap blocks (5–32 s in all each) beside network ratios out of reach, and a gVisor ratio
    /// two blocks short. The budget holds the cheap ones from the cheapest up; the network ones
    /// are set aside with what they need, and the container's block serves only what was kept.
    #[test]
    fn the_budget_holds_the_cheapest_ratios_and_a_block_runs_only_theirs() {
        let w = |env: usize, blocks: usize, needed: usize, block_secs: f64| Watched {
            env,
            blocks,
            sd_log: Some(0.15),
            rhw: 0.3,
            target: 0.05,
            needed,
            met: false,
            block_secs,
            launch_secs: 0.0,
        };
        // 0..3: the container (env 1): syscall, pde, memcpy, tcp_stream; 4: gVisor (env 2) syscall.
        let watched =
            [w(1, 4, 122, 0.04), w(1, 4, 219, 0.11), w(1, 4, 317, 0.1), w(1, 4, 900, 2.0), w(2, 19, 21, 0.5)];
        // A container block with every case (the network's too) costs 3 s, gVisor's 5 s.
        let unit_cost = |m: &[usize]| m.iter().map(|&e| if e == 1 { 3.0 } else { 5.0 }).sum::<f64>() + 0.01;
        let plan = plan_block(&watched, &unit_cost, 100.0, 0.95);
        let aside: Vec<usize> = plan.set_aside.iter().map(|a| a.index).collect();
        assert_eq!(aside, [3], "only the network ratio is out of reach: {plan:?}");
        assert_eq!(plan.set_aside[0].more_blocks, 896);
        assert!((plan.set_aside[0].secs - 1792.0).abs() < 1e-6);
        assert!(plan.members.contains(&1), "the container's cheap ratios are planned: {plan:?}");
        assert!(!plan.serving.contains(&3), "its block does not run what was set aside: {plan:?}");
        // A budget of 20 s holds gVisor's (1 s) and the container's syscall (4.7 s) and pde
        // (23.7 s passes it): cheapest first.
        let aside: Vec<usize> = set_aside(&watched, &unit_cost, 20.0).iter().map(|a| a.index).collect();
        assert_eq!(aside, [1, 2, 3]);
        // Met ratios, and ratios whose spread is not known yet, are never set aside.
        let mut unknown = watched.clone();
        unknown[3].sd_log = None;
        unknown[2].met = true;
        let aside: Vec<usize> = set_aside(&unknown, &unit_cost, 20.0).iter().map(|a| a.index).collect();
        assert_eq!(aside, [1]);
    }

    /// A pilot grows where a block is cheap against the budget, never past MAX_PILOT, never below
    /// the minimum; the guests' blocks of seconds keep the minimum.
    #[test]
    fn pilots_grow_where_blocks_are_cheap() {
        assert_eq!(pilot_blocks(4, 0.1, 270.0), MAX_PILOT, "a container's block: the most");
        assert_eq!(pilot_blocks(4, 0.7, 270.0), 11, "gVisor's: 5.4 s buys 7 more");
        assert_eq!(pilot_blocks(4, 2.8, 270.0), 5, "UML's: one more");
        assert_eq!(pilot_blocks(4, 6.0, 270.0), 4, "a TCG guest's: the minimum");
        assert_eq!(pilot_blocks(4, 0.0, 270.0), 4, "no cost known");
        assert_eq!(pilot_blocks(20, 0.1, 270.0), 20, "a minimum above the cap stands");
    }

    /// Ratios of one environment share its launches: two UML ratios that each fit the budget
    /// alone but not priced apart are both kept when their launches are counted once.
    #[test]
    fn ratios_of_one_environment_share_its_launches_in_the_budget() {
        let w = |env: usize, needed: usize, block_secs: f64, launch_secs: f64| Watched {
            env,
            blocks: 4,
            sd_log: Some(0.1),
            rhw: 0.1,
            target: 0.05,
            needed,
            met: false,
            block_secs,
            launch_secs,
        };
        // UML intmix and syscall: 20 more blocks each, 2.3 s a block of which 1.8 s its launch.
        let uml = [w(3, 24, 2.3, 1.8), w(3, 24, 2.3, 1.8)];
        let unit_cost = |_: &[usize]| 3.0;
        assert!(set_aside(&uml, &unit_cost, 60.0).is_empty(), "20 × 1.8 + 40 × 0.5 = 56 s fit 60 s");
        let apart = [w(3, 24, 2.3, 0.0), w(3, 24, 2.3, 0.0)];
        assert_eq!(set_aside(&apart, &unit_cost, 60.0).len(), 1, "priced apart, 92 s: one is set aside");
        // Another environment's launches are its own.
        let two = [w(3, 24, 2.3, 1.8), w(4, 24, 2.3, 1.8)];
        let aside = set_aside(&two, &unit_cost, 60.0);
        assert_eq!(aside.len(), 1);
        assert_eq!((aside[0].more_blocks, aside[0].secs), (20, 46.0), "said with what it needs alone");
    }

    #[test]
    fn the_noisier_side_and_the_furthest_cell_are_chosen() {
        let quiet = vec![
            vec![100.0, 100.5, 99.6],
            vec![100.2, 99.8, 100.1],
            vec![100.1, 99.9, 99.9],
            vec![100.0, 99.9],
        ];
        let noisy = vec![
            vec![150.0, 160.0, 140.0],
            vec![170.0, 130.0, 150.0],
            vec![155.0, 145.0, 165.0],
            vec![140.0, 160.0],
        ];
        // Three launches are not enough to stop on, however quiet.
        assert!(!standing(&quiet[..3], &quiet[..3], 0.02).met());
        let s = standing(&noisy, &quiet, 0.02);
        assert_eq!(s.noisier, Side::Env);
        assert!(!s.met() && s.distance > 1.0);
        assert_eq!(standing(&quiet, &noisy, 0.02).noisier, Side::Baseline);
        let done = standing(&quiet, &quiet, 0.02);
        assert!(done.met(), "{done:?}");
        assert_eq!(next(&[done.clone(), s.clone()]), Some((1, Side::Env)));
        assert_eq!(next(&[done.clone(), done]), None);
        // One launch on each side: the interval of its repetitions.
        let one = standing(&[vec![101.0, 99.0, 100.0]], &[vec![50.0, 50.5, 49.5]], 0.05);
        assert!(one.ratio.is_some_and(|r| r.ci95.is_some()), "{one:?}");
        // A side measured once has no interval: that side grows first.
        let s = standing(&[vec![100.0]], &quiet, 0.02);
        assert_eq!((s.distance.is_infinite(), s.noisier), (true, Side::Env));
    }
}
