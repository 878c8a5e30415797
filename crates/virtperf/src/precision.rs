//! Precision mode (`precision = "2%"`, `budget = "5m"`): after the planned minimum, each further
//! launch (with `launches ≥ 3`) or repetition (with one launch) goes to the cell — an environment ×
//! case × headline metric — whose overhead ratio is furthest from its target, on the side (the
//! environment or its baseline) that adds more to the ratio's uncertainty; a cell stops when the
//! half-width of its ratio's interval is within the target, the run at its budget. The rule itself
//! is pure and lives in `virtperf_stats::sequential` (with the simulation that checks the coverage
//! of its intervals); this module finds the cells of a run and turns the rule's answer into trials.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use virtperf_stats::sequential::{self, Side, Standing};

use crate::experiment::Experiment;
use virtperf_record::store::{PlannedTrial, Store};

/// One ratio precision mode watches.
#[derive(Debug, Clone)]
pub struct Cell {
    pub env: usize,
    pub base: usize,
    pub case: usize,
    /// The metric as the report headlines it (the host clock's twin for a guest with its own).
    pub metric: String,
    pub standing: Standing,
    /// Repetitions a new launch of the environment (`[0]`) or of its baseline (`[1]`) should hold
    /// of this case: Kalibera and Jones' optimum from each side's variance components and costs
    /// ([`sequential::reps_per_launch`]).
    pub reps: [usize; 2],
}

/// What the orchestrator adds to a trial's host span (planning, storing, the idle neighbours'
/// freeze): measured at 4–7 ms a trial on 3 ms `memcpy` trials natively.
const TRIAL_OVERHEAD_S: f64 = 0.005;

/// The baseline of environment `e`: the environment of its machine that is the bare host.
pub fn baseline_of(exp: &Experiment, e: usize) -> Option<usize> {
    let host = &exp.envs.get(e)?.host;
    exp.envs
        .iter()
        .position(|b| &b.host == host && crate::env::find(&b.kind).is_some_and(|k| k.is_baseline()))
}

/// One launch's values of a metric: (its launch id, the values).
type LaunchValues = (Option<i64>, Vec<f64>);

/// Whether precision mode watches case `c` (a procedure is many trials of its own; all pairs
/// have no baseline).
fn watched(exp: &Experiment, c: usize) -> bool {
    let case = &exp.cases[c];
    !case.matrix && virtperf_workload::find(&case.kind).is_some_and(|w| !w.procedure())
}

/// The cells of environments `envs` (a worker's share) and where each stands, from the values
/// stored so far. Environments in `gone` (they gave up launching) are left out: nothing more can be
/// learnt of them.
pub fn cells(
    exp: &Experiment,
    store: &Store,
    run_id: i64,
    envs: &[usize],
    gone: &BTreeSet<usize>,
) -> Result<Vec<Cell>> {
    let Some(p) = exp.precision else { return Ok(Vec::new()) };
    // (env, case, metric) → values grouped by launch, in the order they came.
    let mut groups: BTreeMap<(usize, usize, String), Vec<LaunchValues>> = BTreeMap::new();
    for (e, c, launch, metric, value, _, _) in store.measured_values(run_id)? {
        let g = groups.entry((e, c, metric)).or_default();
        match g.iter_mut().find(|x| x.0 == launch) {
            Some(x) => x.1.push(value),
            None => g.push((launch, vec![value])),
        }
    }
    // A case whose trials keep failing in an environment is not waited for: more launches would
    // fail the same way (the report lists its failures).
    let health = store.case_health(run_id)?;
    let trial_costs = store.trial_costs(run_id, false)?;
    let trial_cost = |e: usize, c: usize| trial_costs.get(&(e, c)).map_or(0.0, |s| s + TRIAL_OVERHEAD_S);
    // A warm-up does a share of a trial's work where its workload scales it: its own cost.
    let warmup_costs = store.trial_costs(run_id, true)?;
    let warmup_cost = |e: usize, c: usize| {
        warmup_costs.get(&(e, c)).map_or_else(|| trial_cost(e, c), |s| s + TRIAL_OVERHEAD_S)
    };
    // Each environment's mean start (launch to hello), in seconds.
    let mut starts: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    for (e, ms) in store.start_times(run_id)? {
        let s = starts.entry(e).or_default();
        *s = (s.0 + ms / 1e3, s.1 + 1.0);
    }
    // A launch: its start, then a warm-up of every watched case.
    let launch_cost = |e: usize| {
        starts.get(&e).map_or(0.0, |(sum, n)| sum / n)
            + (0..exp.cases.len()).filter(|&c| watched(exp, c)).map(|c| warmup_cost(e, c)).sum::<f64>()
                * exp.warmup as f64
    };
    let reps_of = |e: usize, c: usize, groups: &[Vec<f64>]| {
        sequential::reps_per_launch(groups, trial_cost(e, c), launch_cost(e), exp.reps.max(1) as usize)
    };
    let failing = |e: usize, c: usize| health.get(&(e, c)).is_some_and(|&(failed, last)| failed >= 2 && last);
    let values = |e: usize, c: usize, m: &str| -> Vec<Vec<f64>> {
        groups
            .get(&(e, c, m.to_string()))
            .map(|g| g.iter().map(|x| x.1.clone()).collect())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for &e in envs {
        let Some(b) = baseline_of(exp, e).filter(|&b| b != e) else { continue };
        if gone.contains(&e) || gone.contains(&b) {
            continue;
        }
        let own_clock = crate::env::find(&exp.envs[e].kind).is_some_and(|k| k.own_clock());
        for c in (0..exp.cases.len()).filter(|&c| watched(exp, c) && !failing(e, c) && !failing(b, c)) {
            let Some(w) = virtperf_workload::find(&exp.cases[c].kind) else { continue };
            for m in w.metrics().iter().take(w.headline_metrics()).map(|m| m.name) {
                let host = format!("{m}{}", virtperf_workload::HOST_SUFFIX);
                let metric = if own_clock && !values(e, c, &host).is_empty() { host } else { m.to_string() };
                let (a, base) = (values(e, c, &metric), values(b, c, &metric));
                // A baseline whose mean is zero has no ratio to make precise.
                let zero = base.iter().flatten().all(|x| *x == 0.0) && !base.is_empty();
                if zero {
                    continue;
                }
                let standing = sequential::standing(&a, &base, p.percent / 100.0);
                let reps = [reps_of(e, c, &a), reps_of(b, c, &base)];
                out.push(Cell { env: e, base: b, case: c, metric, standing, reps });
            }
        }
    }
    Ok(out)
}

// ------------------------------------------------------------------------------------------
// The paired design (order = "paired", launches ≥ 2): every further unit is a launch block of the
// baseline and the environments whose ratios still need one, their trials in case groups.

/// Whether a run's precision mode plans paired blocks (else today's unpaired launches).
pub fn paired(exp: &Experiment) -> bool {
    exp.order == crate::experiment::Order::Paired && exp.launches >= 2
}

/// A paired ratio precision mode watches.
#[derive(Debug, Clone)]
pub struct PairedCell {
    pub env: usize,
    pub base: usize,
    pub case: usize,
    pub metric: String,
    /// Where it stands (its blocks, its pilot's spread, what it needs: Stein's two-stage).
    pub watched: sequential::Watched,
    /// Repetitions a further block should hold of its case (Kalibera and Jones, on the pairs'
    /// log-ratios: a pair's two trials against the block's launches).
    pub reps: usize,
}

/// What a block costs, from what the run measured so far (seconds).
#[derive(Debug, Clone, Default)]
pub struct Costs {
    /// Each environment's mean start (launch to hello).
    pub start: BTreeMap<usize, f64>,
    /// Each environment × case's trial and warm-up.
    pub trial: BTreeMap<(usize, usize), f64>,
    pub warmup: BTreeMap<(usize, usize), f64>,
    pub warmups: u32,
}

impl Costs {
    fn trial(&self, e: usize, c: usize) -> f64 {
        self.trial.get(&(e, c)).map_or(0.0, |s| s + TRIAL_OVERHEAD_S)
    }
    fn warmup(&self, e: usize, c: usize) -> f64 {
        self.warmup.get(&(e, c)).map_or_else(|| self.trial(e, c), |s| s + TRIAL_OVERHEAD_S)
    }
    /// A block of `base` and `members` holding `cases` (case, repetitions; each member runs the
    /// cases in `needs`): every launch, its warm-ups and trials.
    pub fn block(
        &self,
        base: usize,
        members: &[usize],
        cases: &[(usize, usize)],
        needs: &dyn Fn(usize, usize) -> bool,
    ) -> f64 {
        let w = f64::from(self.warmups);
        let mut secs = self.start.get(&base).copied().unwrap_or(0.0);
        for &e in members {
            secs += self.start.get(&e).copied().unwrap_or(0.0);
        }
        for &(c, reps) in cases {
            let taking: Vec<usize> =
                std::iter::once(base).chain(members.iter().copied().filter(|&e| needs(e, c))).collect();
            for e in taking {
                secs += w * self.warmup(e, c) + reps as f64 * self.trial(e, c);
            }
        }
        secs
    }
}

/// The paired cells of environments `envs` and what blocks cost, from the values stored so far.
pub fn paired_cells(
    exp: &Experiment,
    store: &Store,
    run_id: i64,
    envs: &[usize],
    gone: &BTreeSet<usize>,
) -> Result<(Vec<PairedCell>, Costs)> {
    let Some(p) = exp.precision else { return Ok((Vec::new(), Costs::default())) };
    let target = p.percent / 100.0;
    // (env, case, metric) → ((block, rep), value), in the order they ran.
    let mut values: BTreeMap<(usize, usize, String), Vec<(virtperf_report::report::paired::Slot, f64)>> =
        BTreeMap::new();
    for (e, c, _, metric, value, block, rep) in store.measured_values(run_id)? {
        values.entry((e, c, metric)).or_default().push(((block, rep), value));
    }
    let health = store.case_health(run_id)?;
    let failing = |e: usize, c: usize| health.get(&(e, c)).is_some_and(|&(failed, last)| failed >= 2 && last);
    let mut costs = Costs {
        trial: store.trial_costs(run_id, false)?,
        warmup: store.trial_costs(run_id, true)?,
        warmups: exp.warmup,
        ..Default::default()
    };
    let mut starts: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    for (e, ms) in store.start_times(run_id)? {
        let s = starts.entry(e).or_default();
        *s = (s.0 + ms / 1e3, s.1 + 1.0);
    }
    costs.start = starts.into_iter().map(|(e, (sum, n))| (e, sum / n)).collect();
    use virtperf_report::report::paired::Design;
    let recorded = store.pilots(run_id)?;
    let mut decided: Vec<(String, u32)> = Vec::new();
    let budget_s = p.budget_ms as f64 / 1e3;
    let get = |e: usize, c: usize, m: &str| values.get(&(e, c, m.to_string())).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for &e in envs {
        let Some(b) = baseline_of(exp, e).filter(|&b| b != e) else { continue };
        if gone.contains(&e) || gone.contains(&b) {
            continue;
        }
        let own_clock = crate::env::find(&exp.envs[e].kind).is_some_and(|k| k.own_clock());
        for c in (0..exp.cases.len()).filter(|&c| watched(exp, c) && !failing(e, c) && !failing(b, c)) {
            let Some(w) = virtperf_workload::find(&exp.cases[c].kind) else { continue };
            for m in w.metrics().iter().take(w.headline_metrics()).map(|m| m.name) {
                let host = format!("{m}{}", virtperf_workload::HOST_SUFFIX);
                let metric = if own_clock && !get(e, c, &host).is_empty() { host } else { m.to_string() };
                let base_values = get(b, c, &metric);
                if !base_values.is_empty() && base_values.iter().all(|x| x.1 == 0.0) {
                    continue;
                }
                // Pairs far outside the others (a stall) are set apart, as the report sets them:
                // one stalled flow would otherwise price the cell at ~50 000 launches.
                let pairs = virtperf_report::report::paired::kept(&virtperf_report::report::paired::pairs(
                    &get(e, c, &metric),
                    &base_values,
                ));
                let groups = virtperf_stats::sim::log_groups(&pairs);
                let pair_cost = costs.trial(e, c) + costs.trial(b, c);
                let launch_cost =
                    costs.start.get(&e).copied().unwrap_or(0.0) + costs.start.get(&b).copied().unwrap_or(0.0);
                let reps =
                    sequential::reps_per_launch(&groups, pair_cost, launch_cost, exp.reps.max(1) as usize);
                // This ratio alone: its environment's and its baseline's launches, their
                // warm-ups and repetitions of its case.
                let block_secs = costs.block(b, &[e], &[(c, reps)], &|x, y| x == e && y == c);
                // Its pilot: decided once its first `launches` blocks are in, from what a block
                // of it costs against the budget (never from its spread), and recorded.
                let key = Design::key(e, c, &metric);
                let pilot_n = match recorded.get(&key) {
                    Some(&n) => n,
                    None if groups.len() >= exp.launches as usize && block_secs > 0.0 => {
                        // A ratio its minimum already sizes within itself keeps it (the
                        // two-stage procedure of the minimum stops there); the rest grow.
                        let n = sequential::pilot_of(
                            virtperf_report::report::paired::pilot_spread(&pairs, exp.launches),
                            exp.launches as usize,
                            target,
                            block_secs,
                            budget_s,
                        );
                        let n = u32::try_from(n).unwrap_or(exp.launches);
                        decided.push((key, n));
                        n
                    }
                    None => exp.launches,
                };
                let stated = virtperf_report::report::paired::stated(&pairs, Some(pilot_n));
                let blocks = stated.map_or(0, |r| r.blocks);
                let pilot_done = blocks >= pilot_n as usize;
                let pilot = virtperf_report::report::paired::pilot_spread(&pairs, pilot_n);
                let (min, max) = (sequential::MIN_UNITS as usize, sequential::MAX_BLOCKS);
                let needed = match pilot {
                    // Stein, sized from the whole pilot (and once more from the blocks it asked
                    // for, where they came out noisier: `blocks_needed`); while the pilot is still
                    // growing, what it will likely ask (its spread so far on the pilot's degrees
                    // of freedom), at least the pilot itself.
                    Some(_) if pilot_done => virtperf_stats::paired::blocks_needed(
                        &pairs,
                        pilot_n as usize,
                        target,
                        0.95,
                        min,
                        max,
                    )
                    .unwrap_or(pilot_n as usize),
                    Some((sd, _)) => virtperf_stats::paired::units_needed_stein(
                        sd,
                        f64::from(pilot_n) - 1.0,
                        target,
                        0.95,
                        min,
                        max,
                    )
                    .max(pilot_n as usize),
                    None => min.max(pilot_n as usize),
                };
                let rhw = stated.filter(|r| r.blocks >= 2).map_or(f64::INFINITY, |r| r.relative_half_width());
                // A ratio with no pairs to stand on (its trials fail, its values are not
                // positive) has no target to approach.
                if stated.is_none() && blocks == 0 && !pairs.is_empty() {
                    continue;
                }
                let watched = sequential::Watched {
                    env: e,
                    blocks,
                    sd_log: pilot.map(|x| x.0),
                    rhw,
                    target,
                    needed,
                    met: pilot_done && blocks >= needed && pilot.is_some(),
                    block_secs,
                    launch_secs: launch_cost,
                };
                out.push(PairedCell { env: e, base: b, case: c, metric, watched, reps });
            }
        }
    }
    store.record_pilots(run_id, &decided)?;
    Ok((out, costs))
}

/// The next paired block for `cells` with `budget_left` seconds, and the ratios set aside (out of
/// the budget's reach): [`sequential::plan_block`] by value per second, each environment's cost a
/// block of it and its baseline holding its unmet cases. None when nothing is left to do.
pub fn next_block(
    cells: &[PairedCell],
    costs: &Costs,
    budget_left: f64,
) -> (Option<Unit>, Vec<sequential::SetAside>) {
    let unmet: Vec<&PairedCell> = cells.iter().filter(|c| !c.watched.met).collect();
    let Some(base) = unmet.first().map(|c| c.base) else { return (None, Vec::new()) };
    // One baseline per block: the cells of the first unmet ratio's (a campaign's hosts plan apart).
    let unmet: Vec<&PairedCell> = unmet.into_iter().filter(|c| c.base == base).collect();
    // First what the budget can hold, ratio by ratio (each its own block's cost); the block is
    // then planned among those kept, and runs their cases only.
    let watched: Vec<sequential::Watched> = unmet.iter().map(|c| c.watched.clone()).collect();
    let aside = sequential::set_aside(&watched, &|_| f64::INFINITY, budget_left);
    let unmet: Vec<&PairedCell> = unmet
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !aside.iter().any(|a| a.index == *i))
        .map(|(_, c)| c)
        .collect();
    let needs = |e: usize, c: usize| unmet.iter().any(|x| x.env == e && x.case == c);
    let cases_of = |members: &[usize]| -> Vec<(usize, usize)> {
        let mut m: BTreeMap<usize, usize> = BTreeMap::new();
        for x in unmet.iter().filter(|x| members.contains(&x.env)) {
            let n = m.entry(x.case).or_default();
            *n = (*n).max(x.reps);
        }
        m.into_iter().collect()
    };
    let unit_cost = |members: &[usize]| costs.block(base, members, &cases_of(members), &needs);
    let watched: Vec<sequential::Watched> = unmet.iter().map(|c| c.watched.clone()).collect();
    let plan = sequential::plan_block(&watched, &unit_cost, budget_left, 0.95);
    // (Those kept fit the budget together, so the plan sets none of them aside.)
    if plan.members.is_empty() {
        return (None, aside);
    }
    let cases = cases_of(&plan.members);
    let needs: Vec<(usize, usize)> =
        unmet.iter().filter(|x| plan.members.contains(&x.env)).map(|x| (x.env, x.case)).collect();
    (Some(Unit::Block { base, members: plan.members, cases, needs }), aside)
}

/// What precision mode runs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Unit {
    /// A paired launch block: the baseline and `members` launched afresh, warm-ups then rounds of
    /// case groups — each case with its repetitions, run by the baseline and the members that
    /// need it (`needs`: (environment, case)).
    Block { base: usize, members: Vec<usize>, cases: Vec<(usize, usize)>, needs: Vec<(usize, usize)> },
    /// A new launch of environment `env` with its warm-ups and, of each case, the repetitions
    /// given beside it (at least the experiment's `reps`).
    Launch { env: usize, cases: Vec<(usize, usize)> },
    /// One more repetition of `case` in `env`'s current launch.
    Rep { env: usize, case: usize },
}

/// The rule's answer for `cells`, as a unit of work; None when every cell met its target.
pub fn next_unit(exp: &Experiment, cells: &[Cell]) -> Option<Unit> {
    let standings: Vec<Standing> = cells.iter().map(|c| c.standing.clone()).collect();
    let (i, side) = sequential::next(&standings)?;
    let cell = &cells[i];
    let env = match side {
        Side::Env => cell.env,
        Side::Baseline => cell.base,
    };
    if exp.launches < 2 {
        return Some(Unit::Rep { env, case: cell.case });
    }
    // A launch measures every case of the environment still short of its target (for a
    // baseline: every case where an environment compared with it is), each as often as the
    // neediest of its cells asks.
    let mut cases: BTreeMap<usize, usize> = BTreeMap::new();
    for x in cells.iter().filter(|x| !x.standing.met()) {
        let reps = if x.env == env {
            x.reps[0]
        } else if x.base == env {
            x.reps[1]
        } else {
            continue;
        };
        let n = cases.entry(x.case).or_default();
        *n = (*n).max(reps);
    }
    Some(Unit::Launch { env, cases: cases.into_iter().collect() })
}

/// The trials of `unit`, to append to the run's plan (ids and seq are the store's to give).
pub fn trials(
    exp: &Experiment,
    store: &Store,
    run_id: i64,
    unit: &Unit,
    seed: u64,
) -> Result<Vec<PlannedTrial>> {
    if let Unit::Block { base, members, cases, needs } = unit {
        return block_trials(exp, store, run_id, *base, members, cases, needs, seed);
    }
    let env = match unit {
        Unit::Launch { env, .. } | Unit::Rep { env, .. } => *env,
        Unit::Block { base, .. } => *base,
    };
    let (last_block, last_rep) = store.plan_tail(run_id, env)?;
    let next_rep = |c: usize| last_rep.get(&c).map_or(0, |r| r + 1);
    let trial = |case: usize, rep: i64, warmup: bool, block: u32| PlannedTrial {
        id: 0,
        seq: 0,
        env_idx: env,
        case_idx: case,
        rep,
        warmup,
        peer_idx: None,
        block,
    };
    Ok(match unit {
        Unit::Rep { case, .. } => vec![trial(*case, next_rep(*case), false, last_block)],
        Unit::Block { .. } => Vec::new(),
        Unit::Launch { cases, .. } => {
            let block = last_block + 1;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(exp.seed ^ seed.rotate_left(17));
            let mut out = Vec::new();
            let most = cases.iter().map(|c| u32::try_from(c.1).unwrap_or(u32::MAX)).max().unwrap_or(0);
            for (n, warmup) in [(exp.warmup, true), (most, false)] {
                for r in 0..n {
                    // Round r holds every case with more than r repetitions (all of them for the
                    // warm-ups), shuffled like the plan's rounds.
                    let mut round: Vec<usize> =
                        cases.iter().filter(|c| warmup || c.1 > r as usize).map(|c| c.0).collect();
                    if exp.order != crate::experiment::Order::Sequential {
                        round.shuffle(&mut rng);
                    }
                    for c in round {
                        out.push(trial(c, next_rep(c) + i64::from(r), warmup, block));
                    }
                }
            }
            out
        }
    })
}

/// The trials of a paired block: a block number after every one so far, its warm-ups then its
/// rounds, each round the cases with repetitions left in random order and each case a group of
/// the baseline and the members that need it, in random order; repetition numbers continue each
/// case's, the same for every environment of a round (what pairs their trials).
#[allow(clippy::too_many_arguments)]
fn block_trials(
    exp: &Experiment,
    store: &Store,
    run_id: i64,
    base: usize,
    members: &[usize],
    cases: &[(usize, usize)],
    needs: &[(usize, usize)],
    seed: u64,
) -> Result<Vec<PlannedTrial>> {
    let (last_block, last_rep) = store.plan_end(run_id)?;
    let block = last_block + 1;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(exp.seed ^ seed.rotate_left(23));
    let group = |c: usize| -> Vec<usize> {
        std::iter::once(base).chain(members.iter().copied().filter(|&e| needs.contains(&(e, c)))).collect()
    };
    let mut out = Vec::new();
    let most = cases.iter().map(|c| c.1).max().unwrap_or(0);
    for (n, warmup) in [(exp.warmup as usize, true), (most, false)] {
        for r in 0..n {
            let mut round: Vec<usize> = cases.iter().filter(|c| warmup || c.1 > r).map(|c| c.0).collect();
            round.shuffle(&mut rng);
            for c in round {
                let mut g = group(c);
                g.shuffle(&mut rng);
                let rep = last_rep.get(&c).map_or(0, |x| x + 1) + r as i64;
                for e in g {
                    out.push(PlannedTrial {
                        id: 0,
                        seq: 0,
                        env_idx: e,
                        case_idx: c,
                        rep,
                        warmup,
                        peer_idx: None,
                        block,
                    });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{read_flag, validate, Origin, RawExperiment, RawSetting};
    use virtperf_proto::Sample;
    use virtperf_record::store::{NewCase, NewEnv, TrialOutcome, TrialStatus};
    use virtperf_workload::Raw;

    /// Today's unpaired design (order = random): launches of one side at a time.
    fn exp(launches: i64) -> Experiment {
        exp_in(launches, "random")
    }

    fn exp_in(launches: i64, order: &str) -> Experiment {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.envs.push(read_flag("--env", "container").unwrap());
        raw.workloads.push(read_flag("--workload", "syscall").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy").unwrap());
        for (k, v) in [
            ("launches", Raw::Int(launches)),
            ("reps", Raw::Int(4)),
            ("precision", Raw::Str("5%".into())),
            ("order", Raw::Str(order.into())),
        ] {
            raw.settings.insert(k.into(), RawSetting { value: v, origin: Origin::Default });
        }
        validate(&raw, &Origin::Default).unwrap()
    }

    /// A store holding the plan of `e` with every trial done: each environment × case's value
    /// drawn around `mean(env, case)` with a spread of `sd(env, case)`, launches by block.
    fn store_with(
        e: &Experiment,
        dir: &std::path::Path,
        value: &dyn Fn(usize, usize, i64) -> f64,
    ) -> (Store, i64) {
        let mut s = Store::open(&dir.join("p.db")).unwrap();
        let plan = crate::plan::make(e);
        let envs: Vec<NewEnv> = e
            .envs
            .iter()
            .map(|x| NewEnv {
                name: x.name.clone(),
                kind: x.kind.clone(),
                params: serde_json::json!({}),
                runtime: None,
                instances: 1,
                group: x.name.clone(),
                host: None,
                baseline: x.kind == "native",
                own_clock: false,
            })
            .collect();
        let cases: Vec<_> = e
            .cases
            .iter()
            .map(|c| NewCase {
                workload: c.workload.clone(),
                kind: c.kind.clone(),
                label: c.label.clone(),
                params: serde_json::json!({}),
                record: virtperf_workload::describe(&c.kind, &serde_json::json!({})).unwrap(),
            })
            .collect();
        let run = s
            .create_run(&virtperf_record::store::NewRun {
                name: "p",
                experiment_toml: "",
                manifest: &serde_json::json!({}),
                envs: &envs,
                cases: &cases,
                metrics: &virtperf_workload::metric_records(),
                plan: &plan,
            })
            .unwrap();
        for t in s.pending_trials(run).unwrap() {
            let metric = if t.case_idx == 0 { "syscall_time" } else { "memcpy_time" };
            let v = value(t.env_idx, t.case_idx, t.rep);
            let o = TrialOutcome {
                status: TrialStatus::Ok,
                samples: vec![Sample { metric: metric.into(), value: v, unit: "x".into() }],
                // syscall trials of 200 ms, memcpy ones of 3 ms
                host_ns: Some(if t.case_idx == 0 { 200_000_000 } else { 3_000_000 }),
                launch_id: Some(1000 * t.env_idx as i64 + i64::from(t.block)),
                ..Default::default()
            };
            s.record_trial(t.id, &o).unwrap();
        }
        (s, run)
    }

    #[test]
    fn the_furthest_cell_gets_a_launch_of_the_cases_still_short() {
        let e = exp(4);
        let dir = tempfile::tempdir().unwrap();
        // syscall: container 3× native and noisy between launches; memcpy: both quiet.
        let (s, run) = store_with(&e, dir.path(), &|env, case, rep| match (env, case) {
            (0, 0) => 100.0 + (rep % 3) as f64 * 0.1,
            (1, 0) => 300.0 + [0.0, 40.0, -35.0][(rep / 4 % 3) as usize] + (rep % 3) as f64,
            (_, _) => 10.0 + rep as f64 * 0.001 + env as f64,
        });
        let cells = cells(&e, &s, run, &[0, 1], &BTreeSet::new()).unwrap();
        assert_eq!(cells.len(), 2, "{cells:?}");
        let memcpy = cells.iter().find(|c| c.case == 1).unwrap();
        assert!(memcpy.standing.met(), "{memcpy:?}");
        let syscall = cells.iter().find(|c| c.case == 0).unwrap();
        assert!(!syscall.standing.met(), "{syscall:?}");
        assert_eq!(next_unit(&e, &cells), Some(Unit::Launch { env: 1, cases: vec![(0, 4)] }));
        // The launch: a block of its own after the planned four, warm-ups then reps.
        let t = trials(&e, &s, run, &Unit::Launch { env: 1, cases: vec![(0, 4)] }, 1).unwrap();
        assert_eq!(t.len(), (e.warmup + e.reps) as usize);
        assert!(t.iter().all(|x| x.block == 4 && x.env_idx == 1 && x.case_idx == 0));
        assert!(t.iter().filter(|x| !x.warmup).all(|x| x.rep >= 16), "reps continue after the plan's");
        // Nothing short: nothing to run. An environment that gave up is not waited for.
        assert!(cells_met_or_gone(&e, &s, run));
    }

    #[test]
    fn a_launch_holds_more_of_a_cheap_case_whose_spread_lies_within_launches() {
        let e = exp(4);
        let dir = tempfile::tempdir().unwrap();
        // memcpy: noisy from trial to trial, the same from launch to launch, 3 ms a trial;
        // syscall: 200 ms a trial, container launches differ.
        let (s, run) = store_with(&e, dir.path(), &|env, case, rep| match (env, case) {
            (_, 1) => 10.0 * (env + 1) as f64 + [0.0, 3.0, -3.0][(rep % 3) as usize],
            (0, 0) => 100.0 + (rep % 3) as f64 * 0.1,
            (_, _) => 300.0 + [0.0, 40.0, -35.0][(rep / 4 % 3) as usize] + (rep % 3) as f64,
        });
        let cells = cells(&e, &s, run, &[0, 1], &BTreeSet::new()).unwrap();
        let memcpy = cells.iter().find(|c| c.case == 1).unwrap();
        let syscall = cells.iter().find(|c| c.case == 0).unwrap();
        assert!(!memcpy.standing.met() && !syscall.standing.met(), "{cells:?}");
        // A launch costs its warm-ups (≈ 0.2 s): ≈ 25 memcpy trials of 8 ms with the overhead.
        assert!(memcpy.reps[0] >= 20, "{memcpy:?}");
        assert_eq!(syscall.reps[0], 4, "{syscall:?}");
        let Some(Unit::Launch { env: 1, cases }) = next_unit(&e, &cells) else { panic!("{cells:?}") };
        assert_eq!(cases, vec![(0, 4), (1, memcpy.reps[0])]);
        let t = trials(&e, &s, run, &Unit::Launch { env: 1, cases: cases.clone() }, 1).unwrap();
        let measured = |c: usize| t.iter().filter(|x| !x.warmup && x.case_idx == c).count();
        assert_eq!((measured(0), measured(1)), (4, memcpy.reps[0]));
        assert_eq!(t.iter().filter(|x| x.warmup).count(), 2, "one warm-up of each case");
        // The first rounds interleave both cases; memcpy's extra repetitions come after.
        assert!(t[2..4].iter().any(|x| x.case_idx == 0) && t[2..4].iter().any(|x| x.case_idx == 1), "{t:?}");
    }

    fn cells_met_or_gone(e: &Experiment, s: &Store, run: i64) -> bool {
        let gone: BTreeSet<usize> = [1].into();
        cells(e, s, run, &[0, 1], &gone).unwrap().is_empty()
    }

    #[test]
    fn with_one_launch_the_unit_is_a_repetition_on_the_noisier_side() {
        let e = exp(1);
        let dir = tempfile::tempdir().unwrap();
        // The baseline is the noisy side of syscall.
        let (s, run) = store_with(&e, dir.path(), &|env, case, rep| match (env, case) {
            (0, 0) => 100.0 + [0.0, 30.0, -25.0][(rep % 3) as usize],
            (1, 0) => 300.0 + (rep % 3) as f64 * 0.1,
            (_, _) => 10.0 + rep as f64 * 0.001,
        });
        let cells = cells(&e, &s, run, &[0, 1], &BTreeSet::new()).unwrap();
        assert_eq!(next_unit(&e, &cells), Some(Unit::Rep { env: 0, case: 0 }));
        let t = trials(&e, &s, run, &Unit::Rep { env: 0, case: 0 }, 1).unwrap();
        assert_eq!((t.len(), t[0].rep, t[0].block, t[0].warmup), (1, 4, 0, false));
    }

    /// A paired run: its pairs are the same block and repetition; a ratio whose pilot (the
    /// plan's four blocks) is noisy needs more blocks (Stein's second stage), one that is quiet is
    /// done; the next block holds the baseline and the environment that needs it, in case groups,
    /// with repetition numbers continuing each case's.
    #[test]
    fn a_paired_block_holds_the_baseline_and_the_ratios_that_need_it() {
        let mut e = exp_in(4, "paired");
        e.reps = 1;
        let dir = tempfile::tempdir().unwrap();
        // syscall: container 3× native, its launches differ by ±15 % (a block's pair moves with
        // them); memcpy: both quiet. The host's slowdowns (rep 2: ×1.6 for both) cancel.
        let (s, run) = store_with(&e, dir.path(), &|env, case, rep| {
            let host = if rep == 2 { 1.6 } else { 1.0 };
            host * match (env, case) {
                (0, 0) => 100.0,
                (1, 0) => 300.0 * [1.0, 1.15, 0.85, 1.1][(rep % 4) as usize],
                (_, _) => 10.0 * (env + 1) as f64 * (1.0 + ((rep * 7 + env as i64 * 3) % 5) as f64 * 1e-3),
            }
        });
        let (cells, costs) = paired_cells(&e, &s, run, &[0, 1], &BTreeSet::new()).unwrap();
        assert_eq!(cells.len(), 2, "{cells:?}");
        let memcpy = cells.iter().find(|c| c.case == 1).unwrap();
        let syscall = cells.iter().find(|c| c.case == 0).unwrap();
        assert!(memcpy.watched.met && memcpy.watched.rhw < 0.01, "{memcpy:?}");
        assert!(!syscall.watched.met && syscall.watched.needed > 4, "{syscall:?}");
        let (unit, aside) = next_block(&cells, &costs, 1e6);
        assert!(aside.is_empty());
        let Some(Unit::Block { base, members, cases, needs }) = unit.clone() else { panic!("{unit:?}") };
        assert_eq!((base, members.clone(), needs.clone()), (0, vec![1], vec![(1, 0)]));
        assert_eq!(cases.iter().map(|c| c.0).collect::<Vec<_>>(), [0]);
        let t = trials(&e, &s, run, &unit.unwrap(), 1).unwrap();
        assert!(t.iter().all(|x| x.block == 4 && x.case_idx == 0), "a block after the plan's four: {t:?}");
        let measured: Vec<&PlannedTrial> = t.iter().filter(|x| !x.warmup).collect();
        // Each round: both environments, back to back, with one repetition number.
        for g in measured.chunks(2) {
            assert_eq!(g[0].rep, g[1].rep);
            assert_ne!(g[0].env_idx, g[1].env_idx);
        }
        assert!(measured.iter().all(|x| x.rep >= 4), "repetitions continue the plan's: {measured:?}");
        // A budget that cannot pay for what the ratio still needs sets it aside, with what it needs.
        let (unit, aside) = next_block(&cells, &costs, 0.0);
        assert!(unit.is_none() && aside.len() == 1 && aside[0].more_blocks >= 1, "{aside:?}");
    }
}
