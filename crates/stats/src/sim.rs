//! A simulated precision run, to check what the report states: the coverage of its intervals and
//! how many ratios reach their target in a budget, under the noise real runs have.
//!
//! The model is one case measured in a baseline and the environments compared with it (the
//! baseline shared by every ratio), on a host with the disturbances measured on these machines:
//!
//! - each launch of an environment shifts its values by a factor of its own (log-normal,
//!   `launch_sd`), each trial by another (`trial_sd`);
//! - **host-wide bursts**: at random moments (on average one every `burst_every` seconds) the
//!   whole host slows down by ×1.3–2.0 for 0.5–3 s, every trial running then alike (a trial
//!   partly inside one is slowed in proportion);
//! - **contaminated trials**: one in 20 is slowed ×1.5 on its own;
//! - trials take wall time (`trial_secs`), launches too (`launch_secs`, shared by the `cases` a
//!   launch serves: this case pays its share), and a round holds other cases' trials
//!   (`round_secs` of them, which serve their own ratios: they place this case's trials in time,
//!   they do not cost this case) — unpaired, each environment's trial of the case lands anywhere in
//!   its round; paired, they run back to back (a case group) at one place in it;
//! - the run ends when this case's share of the budget (`budget` / `cases` seconds) is spent,
//!   whatever its cells' standing.
//!
//! Two designs run on the same model: today's unpaired one (random order, two-level means per
//! side, Fieller's interval, precision mode adding a launch of the furthest cell's noisier side)
//! and the paired one (case groups; every further launch block holds the baseline and the
//! environments whose ratios still need one, chosen by value per second; the geometric-mean ratio
//! of the pairs, Student's t over blocks). Pure and seeded: the same run on every machine.

use crate::paired::{paired_ratio_stein, Pair};
use crate::sequential;

/// SplitMix64 and Box–Muller: the same draws on every machine, no dependency. The workspace's
/// one seeded generator: the simulations here and every test that draws (the statistics',
/// MLRsearch's) use it.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal(&mut self, mean: f64, sd: f64) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        mean + sd * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
}

/// One environment of the simulated case (index 0 is the baseline).
#[derive(Debug, Clone, Copy)]
pub struct EnvModel {
    /// Its true cost against the baseline's (the baseline's own is 1).
    pub ratio: f64,
    /// Log-normal sd of a launch's factor.
    pub launch_sd: f64,
    /// Log-normal sd of a trial's factor.
    pub trial_sd: f64,
    pub trial_secs: f64,
    pub launch_secs: f64,
}

/// The case: its environments (the baseline first), its host and its run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub envs: Vec<EnvModel>,
    /// Seconds of other cases' trials in each round (where this case's trials land in time).
    pub round_secs: f64,
    /// Cases a launch serves (and the run's budget is shared by).
    pub cases: f64,
    /// Mean seconds between host-wide bursts (0: none).
    pub burst_every: f64,
    /// Share of trials slowed ×1.5 on their own.
    pub contaminated: f64,
    /// Share of trials that stall (×1000 on their own: a flow that waited 17 s of a 0.5 s trial).
    pub stall: f64,
    /// Relative half-width each ratio is to reach.
    pub target: f64,
    /// Seconds the run may spend.
    pub budget: f64,
    /// Launches of every environment before the rule adds any (the plan's minimum).
    pub min_blocks: usize,
    /// Repetitions per launch in the plan's minimum.
    pub reps: usize,
    /// Cheap ratios' pilots grow beyond the minimum ([`sequential::pilot_blocks`]), as precision
    /// mode's do; false: every pilot is the minimum.
    pub grow_pilot: bool,
    /// A ratio whose blocks came out noisier than its pilot is sized once more from them
    /// ([`crate::paired::blocks_needed`]), as precision mode's are; false: two stages only.
    pub third_stage: bool,
}

/// The host's bursts over a run: (start, end, factor).
struct Bursts(Vec<(f64, f64, f64)>);

impl Bursts {
    fn new(rng: &mut Rng, every: f64, horizon: f64) -> Bursts {
        let mut v = Vec::new();
        if every > 0.0 {
            let mut t = 0.0;
            loop {
                t += -every * rng.uniform().max(1e-12).ln();
                if t > horizon {
                    break;
                }
                let len = rng.range(0.5, 3.0);
                v.push((t, t + len, rng.range(1.3, 2.0)));
            }
        }
        Bursts(v)
    }
    /// The slowdown of a trial running from `t0` for `d` seconds.
    fn factor(&self, t0: f64, d: f64) -> f64 {
        let t1 = t0 + d;
        self.0.iter().fold(1.0, |f, &(a, b, x)| {
            let overlap = (t1.min(b) - t0.max(a)).max(0.0);
            f * (1.0 + (x - 1.0) * overlap / d.max(1e-9))
        })
    }
}

/// The world a simulated run measures: true values, launch factors, the clock, the bursts.
struct World<'a> {
    s: &'a Scenario,
    rng: Rng,
    bursts: Bursts,
    now: f64,
}

impl World<'_> {
    fn launch_factor(&mut self, e: usize) -> f64 {
        self.now += self.s.envs[e].launch_secs / self.s.cases;
        self.rng.normal(0.0, self.s.envs[e].launch_sd).exp()
    }
    /// One trial of `e` (with launch factor `lf`) starting at `t0`.
    fn trial(&mut self, e: usize, lf: f64, t0: f64) -> f64 {
        let m = self.s.envs[e];
        let mut x =
            m.ratio * lf * self.rng.normal(0.0, m.trial_sd).exp() * self.bursts.factor(t0, m.trial_secs);
        if self.rng.uniform() < self.s.contaminated {
            x *= 1.5;
        }
        if self.s.stall > 0.0 && self.rng.uniform() < self.s.stall {
            x *= 1000.0;
        }
        x
    }
    fn spent(&self) -> bool {
        self.now >= self.budget()
    }
    /// The run's wall clock: this case's own time, with the other cases' alongside it.
    fn clock(&self) -> f64 {
        self.now * self.s.cases
    }
    fn budget(&self) -> f64 {
        self.s.budget / self.s.cases
    }
}

/// How one simulated ratio ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ended {
    /// An interval was stated, and whether it covered the truth.
    pub covered: Option<bool>,
    /// Its relative half-width (infinite without one).
    pub rhw: f64,
    /// The report's verdict said "≈ same": the stated interval holds 1 and the equivalence
    /// test's (at twice its α) lies within ±target.
    pub same: bool,
}

/// Today's design: random order (each environment's trial anywhere in its round), two-level
/// means per side, Fieller's interval at precision mode's level, one launch of the furthest
/// cell's noisier side at a time. The truth it is held against is its own estimand, the ratio of
/// the two sides' arithmetic means.
pub fn run_unpaired(s: &Scenario, seed: u64) -> Vec<Ended> {
    let mut w = World {
        s,
        rng: Rng(seed),
        bursts: Bursts::new(&mut Rng(seed ^ 0xb), s.burst_every, s.budget * 3.0),
        now: 0.0,
    };
    let k = s.envs.len();
    let mut groups: Vec<Vec<Vec<f64>>> = vec![Vec::new(); k];
    let one_launch = |w: &mut World, e: usize, reps: usize, g: &mut Vec<Vec<f64>>| {
        let lf = w.launch_factor(e);
        let mut v = Vec::new();
        for _ in 0..reps {
            // Its trial lands anywhere in a round of the other cases' trials.
            let t0 = w.clock() + w.rng.range(0.0, s.round_secs);
            v.push(w.trial(e, lf, t0));
            w.now += s.envs[e].trial_secs;
        }
        g.push(v);
    };
    for _ in 0..s.min_blocks {
        for (e, g) in groups.iter_mut().enumerate() {
            one_launch(&mut w, e, s.reps, g);
        }
    }
    loop {
        let standings: Vec<sequential::Standing> =
            (1..k).map(|e| sequential::standing(&groups[e], &groups[0], s.target)).collect();
        let Some((i, side)) = sequential::next(&standings) else { break };
        let e = match side {
            sequential::Side::Env => i + 1,
            sequential::Side::Baseline => 0,
        };
        if w.spent() {
            break;
        }
        let reps =
            sequential::reps_per_launch(&groups[e], s.envs[e].trial_secs, s.envs[e].launch_secs, s.reps);
        one_launch(&mut w, e, reps, &mut groups[e]);
    }
    let arith = |m: &EnvModel| (m.launch_sd.powi(2) / 2.0 + m.trial_sd.powi(2) / 2.0).exp();
    (1..k)
        .map(|e| {
            let st = sequential::standing(&groups[e], &groups[0], s.target);
            let truth = s.envs[e].ratio * arith(&s.envs[e]) / arith(&s.envs[0]);
            let covered = st.ratio.and_then(|r| r.ci95).map(|(lo, hi)| lo <= truth && truth <= hi);
            Ended { covered, rhw: st.relative_half_width, same: false }
        })
        .collect()
}

/// The paired design: case groups (every environment's trial of the case back to back, in random
/// order, at one place in the round); further launch blocks chosen by
/// [`sequential::plan_block`] (the baseline with the environments whose ratios need a launch
/// most per second); the geometric-mean ratio of the pairs over blocks, with the stopping rule
/// `rule`. Held against the truth it estimates, the ratio of the true costs.
pub fn run_paired(s: &Scenario, seed: u64, rule: sequential::Rule) -> Vec<Ended> {
    let mut w = World {
        s,
        rng: Rng(seed),
        bursts: Bursts::new(&mut Rng(seed ^ 0xb), s.burst_every, s.budget * 3.0),
        now: 0.0,
    };
    let k = s.envs.len();
    // pairs[e]: environment e's pairs with the baseline.
    let mut pairs: Vec<Vec<Pair>> = vec![Vec::new(); k];
    let mut block = 0i64;
    let run_block =
        |w: &mut World, members: &[usize], reps: usize, pairs: &mut Vec<Vec<Pair>>, block: i64| {
            let lf: Vec<(usize, f64)> =
                std::iter::once(0).chain(members.iter().copied()).map(|e| (e, w.launch_factor(e))).collect();
            for _ in 0..reps {
                let start = w.clock() + w.rng.range(0.0, s.round_secs);
                let mut order: Vec<(usize, f64)> = lf.clone();
                // Random order within the group (Fisher–Yates).
                for i in (1..order.len()).rev() {
                    let j = (w.rng.uniform() * (i + 1) as f64) as usize;
                    order.swap(i, j.min(i));
                }
                let mut t = start;
                let mut values = vec![0.0; k];
                for &(e, f) in &order {
                    values[e] = w.trial(e, f, t);
                    t += s.envs[e].trial_secs;
                }
                for &e in members {
                    pairs[e].push(Pair { block, env: values[e], base: values[0] });
                }
                w.now += t - start;
            }
        };
    let all: Vec<usize> = (1..k).collect();
    for _ in 0..s.min_blocks {
        run_block(&mut w, &all, s.reps, &mut pairs, block);
        block += 1;
    }
    let unit_cost = |members: &[usize]| -> f64 {
        std::iter::once(0)
            .chain(members.iter().copied())
            .map(|e| s.envs[e].launch_secs / s.cases + s.reps as f64 * s.envs[e].trial_secs)
            .sum()
    };
    // Two-stage: each ratio's pilot, grown where its blocks are cheap against the budget (decided
    // from costs alone), run before any ratio is sized.
    // A ratio the minimum already sizes within itself keeps it.
    let pilot_n: Vec<usize> = (0..k)
        .map(|e| match (e, rule, s.grow_pilot) {
            (0, _, _) | (_, sequential::Rule::StopWhenMet, _) | (_, _, false) => s.min_blocks,
            _ => sequential::pilot_of(
                crate::paired::paired_ratio(&kept(&pairs[e]), 0.95)
                    .filter(|r| r.blocks >= 2)
                    .map(|r| (r.sd_log, r.df)),
                s.min_blocks,
                s.target,
                unit_cost(&[e]),
                s.budget,
            ),
        })
        .collect();
    loop {
        let members: Vec<usize> = (1..k).filter(|&e| log_groups(&pairs[e]).len() < pilot_n[e]).collect();
        if members.is_empty() || w.spent() {
            break;
        }
        run_block(&mut w, &members, s.reps, &mut pairs, block);
        block += 1;
    }
    // The pilot's spread (sd of its block log-ratios, its df), for Stein's interval: of the pairs
    // the report keeps (a stall set apart), as precision mode reads it.
    let pilot_sd: Vec<Option<(f64, f64)>> = (0..k)
        .map(|e| {
            crate::paired::paired_ratio(&crate::paired::first_blocks(&kept(&pairs[e]), pilot_n[e]), 0.95)
                .filter(|r| r.blocks >= 2)
                .map(|r| (r.sd_log, r.df))
        })
        .collect();
    // Two-stage: what each ratio needs, sized once from the pilot (the plan's minimum).
    let pilot: Vec<usize> = (0..k)
        .map(|e| match (e, rule) {
            (0, _) | (_, sequential::Rule::StopWhenMet) => 0,
            (_, sequential::Rule::TwoStage) => {
                sequential::watch(&kept(&pairs[e]), s.target, rule).needed.max(pilot_n[e])
            }
        })
        .collect();
    loop {
        if w.spent() {
            break;
        }
        let watched: Vec<sequential::Watched> = (1..k)
            .map(|e| {
                let mut x = sequential::watch(&kept(&pairs[e]), s.target, rule);
                if rule == sequential::Rule::TwoStage {
                    x.needed = if s.third_stage {
                        crate::paired::blocks_needed(
                            &kept(&pairs[e]),
                            pilot_n[e],
                            s.target,
                            0.95,
                            sequential::MIN_UNITS as usize,
                            sequential::MAX_BLOCKS,
                        )
                        .unwrap_or(pilot[e])
                    } else {
                        pilot[e]
                    };
                    x.met = x.blocks >= x.needed;
                }
                sequential::Watched { env: e, ..x }
            })
            .collect();
        let plan = sequential::plan_block(&watched, &unit_cost, w.budget() - w.now, rule.level());
        if plan.members.is_empty() {
            break;
        }
        // Repetitions a block holds: Kalibera and Jones' optimum from the members' log-ratios
        // (a pair's trials against the block's launches), the neediest member's.
        let reps = plan
            .members
            .iter()
            .map(|&e| {
                let pair_cost = s.envs[e].trial_secs + s.envs[0].trial_secs;
                sequential::reps_per_launch(&log_groups(&pairs[e]), pair_cost, unit_cost(&[e]), s.reps)
            })
            .max()
            .unwrap_or(s.reps);
        run_block(&mut w, &plan.members, reps, &mut pairs, block);
        block += 1;
    }
    (1..k)
        .map(|e| {
            // As the report states it: the pairs far outside the others set apart first.
            let kept = kept(&pairs[e]);
            let pilot = (rule == sequential::Rule::TwoStage).then_some(pilot_sd[e]).flatten();
            let eq = paired_ratio_stein(&kept, 2.0 * rule.level() - 1.0, pilot).and_then(|r| r.ci);
            match paired_ratio_stein(&kept, rule.level(), pilot) {
                Some(r) => Ended {
                    covered: r.ci.map(|(lo, hi)| lo <= s.envs[e].ratio && s.envs[e].ratio <= hi),
                    rhw: r.relative_half_width(),
                    same: r.ci.is_some_and(|(lo, hi)| lo <= 1.0 && hi >= 1.0)
                        && eq.is_some_and(|(a, b)| a >= 1.0 - s.target && b <= 1.0 + s.target),
                },
                None => Ended { covered: None, rhw: f64::INFINITY, same: false },
            }
        })
        .collect()
}

/// `pairs` without those [`crate::paired::set_apart`] sets apart (what the report keeps).
fn kept(pairs: &[Pair]) -> Vec<Pair> {
    let far = crate::paired::set_apart(pairs);
    pairs.iter().enumerate().filter(|(i, _)| !far.contains(i)).map(|(_, p)| *p).collect()
}

/// The pairs' log-ratios grouped by block, in block order.
pub fn log_groups(pairs: &[Pair]) -> Vec<Vec<f64>> {
    let mut g: Vec<(i64, Vec<f64>)> = Vec::new();
    for p in pairs {
        let d = (p.env / p.base).ln();
        match g.iter_mut().find(|x| x.0 == p.block) {
            Some(x) => x.1.push(d),
            None => g.push((p.block, vec![d])),
        }
    }
    g.into_iter().map(|x| x.1).collect()
}

/// Coverage and precision of one design over `runs` simulated runs of a scenario: per ratio,
/// (the share of stated intervals that covered the truth, the share of ratios within the target,
/// the median relative half-width).
pub fn summarise(
    s: &Scenario,
    runs: u64,
    seed: u64,
    one: impl Fn(&Scenario, u64) -> Vec<Ended>,
) -> Vec<(f64, f64, f64)> {
    let k = s.envs.len() - 1;
    let mut covered = vec![(0usize, 0usize); k];
    let mut met = vec![0usize; k];
    let mut widths: Vec<Vec<f64>> = vec![Vec::new(); k];
    for r in 0..runs {
        for (i, e) in one(s, seed.wrapping_mul(1_000_003).wrapping_add(r)).into_iter().enumerate() {
            if let Some(c) = e.covered {
                covered[i].0 += usize::from(c);
                covered[i].1 += 1;
            }
            met[i] += usize::from(e.rhw <= s.target);
            widths[i].push(e.rhw);
        }
    }
    (0..k)
        .map(|i| {
            let cov = covered[i].0 as f64 / covered[i].1.max(1) as f64;
            (cov, met[i] as f64 / runs as f64, crate::median(&widths[i]))
        })
        .collect()
}

/// The scenarios the suite and `bench/precision.sh` simulate: cells shaped like the default
/// campaign's (system calls: a quiet baseline and sandboxes 100× slower; a solver with launch
/// effects; a network stream; a container within 2 % of native), with bursts every 20 s, 1 in 20
/// trials contaminated, launches of native in milliseconds and of guests in seconds.
pub fn scenarios() -> Vec<Scenario> {
    let m = |ratio, launch_sd, trial_sd, trial_secs, launch_secs| EnvModel {
        ratio,
        launch_sd,
        trial_sd,
        trial_secs,
        launch_secs,
    };
    let base = |trial_sd, trial_secs| m(1.0, 0.03, trial_sd, trial_secs, 0.004);
    let run = |name, envs, round_secs, target, budget, reps| Scenario {
        name,
        envs,
        round_secs,
        cases: 8.0,
        burst_every: 20.0,
        contaminated: 0.05,
        stall: 0.0,
        target,
        budget,
        min_blocks: 4,
        reps,
        grow_pilot: true,
        third_stage: true,
    };
    vec![
        run(
            "syscall",
            vec![
                base(0.005, 0.2),
                m(160.0, 0.05, 0.04, 0.2, 0.3),
                m(90.0, 0.08, 0.03, 0.2, 1.7),
                m(1.0, 0.02, 0.01, 0.2, 0.3),
            ],
            12.0,
            0.05,
            270.0,
            1,
        ),
        run(
            "pde",
            vec![
                base(0.02, 0.2),
                m(1.15, 0.10, 0.05, 0.2, 1.7),
                m(50.0, 0.04, 0.02, 0.2, 3.0),
                m(0.98, 0.03, 0.02, 0.2, 0.3),
            ],
            12.0,
            0.05,
            270.0,
            1,
        ),
        run(
            "stream",
            vec![base(0.10, 1.0), m(0.25, 0.15, 0.10, 1.0, 3.0), m(0.5, 0.08, 0.06, 1.0, 1.7)],
            12.0,
            0.05,
            270.0,
            1,
        ),
        run(
            "mixed reps",
            vec![base(0.01, 0.01), m(3.0, 0.02, 0.05, 0.01, 0.3), m(1.02, 0.01, 0.01, 0.01, 0.3)],
            4.0,
            0.02,
            120.0,
            25,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequential::Rule;

    /// What the report states, held to it: the paired design's 95 % intervals (two-stage, with
    /// Stein's interval) cover the true ratio at least 94 % of the time in every simulated cell —
    /// bursts of the whole host, contaminated trials, a shared baseline, launches of 1 and of 25
    /// repetitions, runs ended by the budget, pilots grown where blocks are cheap and a third
    /// stage. 2000 runs a cell: the binomial standard error at 95 % is 0.5 points (with 1000, one
    /// cell's true 95.5 % drew 93.9 %). (Measured: 94.4–97.0 %.)
    #[test]
    fn paired_intervals_cover_at_their_level_in_every_cell() {
        for s in scenarios() {
            let r = summarise(&s, 2000, 11, |s, seed| run_paired(s, seed, Rule::TwoStage));
            for (i, (cov, met, w)) in r.iter().enumerate() {
                eprintln!(
                    "{} ratio {}: coverage {:.1} %, {:.1} % within target, median ±{:.1} %",
                    s.name,
                    i + 1,
                    cov * 100.0,
                    met * 100.0,
                    w * 100.0
                );
                assert!(*cov >= 0.94, "{} ratio {}: coverage {cov:.4} at 95 %", s.name, i + 1);
            }
        }
    }

    /// Today's unpaired design on the same model falls short of its stated level (a burst lands on
    /// one side and is booked as its variance; the 99 % correction under the old stopping rule
    /// does not make up for it) or, where it covers, is wider than the paired one. (Measured with
    /// 2000 runs: 82.3–89.7 % coverage in the system-call, solver and mixed cells; the stream cells
    /// cover, at ±25 % against ±32–39 %... and the paired design meets its target there as rarely.)
    #[test]
    fn the_unpaired_estimate_falls_short_or_is_wider() {
        let mut short = 0;
        for s in scenarios() {
            let u = summarise(&s, 400, 11, run_unpaired);
            let p = summarise(&s, 400, 11, |s, seed| run_paired(s, seed, Rule::TwoStage));
            for (i, (a, b)) in u.iter().zip(&p).enumerate() {
                let falls_short = a.0 < 0.94;
                short += usize::from(falls_short);
                eprintln!(
                    "{} ratio {}: unpaired {:.1} % ±{:.1} %, paired {:.1} % ±{:.1} %",
                    s.name,
                    i + 1,
                    a.0 * 100.0,
                    a.2 * 100.0,
                    b.0 * 100.0,
                    b.2 * 100.0
                );
            }
        }
        assert!(short >= 6, "the unpaired estimate fell short in {short} of 10 cells only");
    }

    /// The stopping rule, chosen by measuring: stopping once a 99 % interval is within the target
    /// (today's rule, carried over to pairs) covers at 98–100 % and states wide intervals; Stein's
    /// two-stage at 95 % keeps its coverage (above), states narrower intervals in most cells and
    /// meets about as many targets for the same budget. (Measured, 2000 runs: medians ±8–23 %
    /// against ±26–45 % in the system-call and solver cells; cells' worth met 1.31 against 1.39.)
    #[test]
    fn two_stage_states_narrower_intervals_than_stopping_when_met() {
        let (mut two_met, mut stop_met, mut narrower, mut cells) = (0.0, 0.0, 0, 0);
        for s in scenarios() {
            let two = summarise(&s, 300, 5, |s, seed| run_paired(s, seed, Rule::TwoStage));
            let stop = summarise(&s, 300, 5, |s, seed| run_paired(s, seed, Rule::StopWhenMet));
            for (a, b) in two.iter().zip(&stop) {
                two_met += a.1;
                stop_met += b.1;
                narrower += usize::from(a.2 < b.2);
                cells += 1;
            }
        }
        assert!(narrower * 10 >= cells * 7, "two-stage narrower in {narrower} of {cells} cells");
        assert!(
            two_met >= 0.8 * stop_met,
            "two-stage met {two_met:.2} cells' worth, stop-when-met {stop_met:.2}"
        );
    }

    /// Pilots grown where blocks are cheap ([`sequential::pilot_blocks`]) state narrower intervals
    /// than pilots of the plan's minimum in the same budget (Stein's interval keeps its pilot's
    /// t(0.975, n₀ − 1): 3.18 for 4 blocks, 2.13 for 16) and bring more ratios to their target; so
    /// does a third stage, where a ratio's blocks came out noisier than its pilot. Coverage of all
    /// of it is checked above. (Measured, 300 runs a cell: medians narrower in 10 of 10 cells,
    /// ±6.7 against ±7.5 % in the system-call cell, ±11.3 against ±22.9 % in the solver's; cells'
    /// worth met 2.89 against 2.36 for pilots of the minimum, and against 2.22 with two stages.)
    #[test]
    fn grown_pilots_and_a_third_stage_state_narrower_intervals_and_meet_more() {
        let (mut narrower, mut cells) = (0, 0);
        let (mut grown, mut fixed, mut two) = (0.0, 0.0, 0.0);
        let twostage = |s: &Scenario, seed| run_paired(s, seed, Rule::TwoStage);
        for s in scenarios() {
            let g = summarise(&s, 300, 17, twostage);
            let f = summarise(&Scenario { grow_pilot: false, ..s.clone() }, 300, 17, twostage);
            let t = summarise(&Scenario { third_stage: false, ..s.clone() }, 300, 17, twostage);
            for (i, ((a, b), c)) in g.iter().zip(&f).zip(&t).enumerate() {
                eprintln!(
                    "{} ratio {}: grown {:.1} % met ±{:.1} %, of the minimum {:.1} % met ±{:.1} %, two stages {:.1} % met",
                    s.name,
                    i + 1,
                    a.1 * 100.0,
                    a.2 * 100.0,
                    b.1 * 100.0,
                    b.2 * 100.0,
                    c.1 * 100.0,
                );
                narrower += usize::from(a.2 < b.2);
                cells += 1;
                grown += a.1;
                fixed += b.1;
                two += c.1;
            }
        }
        assert!(narrower * 10 >= cells * 8, "grown pilots narrower in {narrower} of {cells} cells");
        assert!(
            grown >= 1.1 * fixed,
            "grown pilots met {grown:.2} cells' worth, pilots of the minimum {fixed:.2}"
        );
        assert!(grown >= 1.1 * two, "three stages met {grown:.2} cells' worth, two {two:.2}");
    }

    /// Bursts of the whole host cancel in pairs: with bursts and nothing else, a paired syscall
    /// cell's intervals are far narrower than the unpaired ones (not all of it cancels: a burst
    /// that begins or ends between a pair's two trials lands on one of them; measured ±8.7 %
    /// against ±19.8 % with a burst every 5 s).
    /// Stalls (1 trial in 50 ×1000 on its own side) set apart by the report's rule
    /// ([`crate::paired::set_apart`]) leave every cell's coverage at its level: the stalls are not
    /// the truth, and what is left covers it. (Measured: see docs/methodology.md, "Verdicts".)
    #[test]
    fn stalls_set_apart_keep_coverage_in_every_cell() {
        for mut s in scenarios() {
            s.stall = 0.02;
            let r = summarise(&s, 2000, 13, |s, seed| run_paired(s, seed, Rule::TwoStage));
            for (i, (cov, met, w)) in r.iter().enumerate() {
                eprintln!(
                    "stalls: {} ratio {}: coverage {:.1} %, {:.1} % within target, median ±{:.1} %",
                    s.name,
                    i + 1,
                    cov * 100.0,
                    met * 100.0,
                    w * 100.0
                );
                assert!(*cov >= 0.94, "{} ratio {}: coverage {cov:.4} at 95 % with stalls", s.name, i + 1);
            }
        }
    }

    /// "≈ same" is an equivalence claim: a cell whose true ratio lies on the target's edge (1 ±
    /// target) is called the same in at most 5 % of runs — TOST's error rate — and one at 1 is,
    /// where the budget is enough, most of the time. (Measured: see docs/methodology.md.)
    #[test]
    fn equivalence_calls_a_cell_on_the_targets_edge_the_same_at_most_5_percent_of_the_time() {
        let runs = 2000u64;
        for s0 in scenarios() {
            for edge in [1.0 + s0.target, 1.0 / (1.0 + s0.target), 1.0] {
                let mut s = s0.clone();
                // The quietest non-baseline environment, moved to the edge (or to no difference).
                let e = (1..s.envs.len())
                    .min_by(|&a, &b| s.envs[a].trial_sd.total_cmp(&s.envs[b].trial_sd))
                    .unwrap_or(1);
                s.envs[e].ratio = edge;
                let mut same = 0u64;
                for r in 0..runs {
                    same += u64::from(
                        run_paired(&s, 17u64.wrapping_mul(1_000_003).wrapping_add(r), Rule::TwoStage)[e - 1]
                            .same,
                    );
                }
                let rate = same as f64 / runs as f64;
                eprintln!(
                    "tost: {} ratio {e} at {edge:.4}: \"≈ same\" in {:.1} % of runs",
                    s.name,
                    rate * 100.0
                );
                if edge != 1.0 {
                    assert!(
                        rate <= 0.05 + 2.0 * (0.05f64 * 0.95 / runs as f64).sqrt(),
                        "{} at {edge}: {rate}",
                        s.name
                    );
                }
            }
        }
    }

    #[test]
    fn a_burst_of_the_whole_host_cancels_in_pairs() {
        let mut s = scenarios().remove(0);
        for e in &mut s.envs {
            e.launch_sd = 0.005;
            e.trial_sd = 0.005;
        }
        s.contaminated = 0.0;
        s.burst_every = 5.0;
        let u = summarise(&s, 200, 3, run_unpaired);
        let p = summarise(&s, 200, 3, |s, seed| run_paired(s, seed, Rule::TwoStage));
        for (a, b) in u.iter().zip(&p) {
            assert!(b.2 * 2.0 < a.2, "paired ±{:.1} % against unpaired ±{:.1} %", b.2 * 100.0, a.2 * 100.0);
        }
    }
}
