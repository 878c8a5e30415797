//! The paired estimate of a run's ratios: which trials pair, and the estimate a run states.
//!
//! With `order = "paired"` (the default) each round runs case groups: every environment's trial of
//! one case back to back. An environment's trial and its baseline's of the same case, launch block
//! and round (`rep`) are a pair; the ratio is their geometric mean over blocks
//! (`virtperf_stats::paired`). A precision run sizes its further blocks from the plan's minimum
//! (the pilot: the first `launches` blocks) and states Stein's interval
//! (`virtperf_stats::paired::paired_ratio_stein`). A run in another order (and one stored before
//! pairs existed) states the unpaired estimate, the ratio of means with Fieller's interval; both
//! are one flag away (`report --estimate paired|unpaired`).

use serde::Serialize;
use virtperf_stats::paired::{paired_ratio, paired_ratio_stein, Pair, PairedRatio};

/// Where a value sits in the plan: its launch block and its repetition number.
pub type Slot = (u32, i64);

/// Which estimate a report states for its ratios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Estimate {
    /// The geometric mean of paired trials' ratios, over launch blocks.
    Paired,
    /// The ratio of the two sides' means with Fieller's interval.
    Unpaired,
}

impl Estimate {
    /// How the report says it, in a line.
    pub fn method(self) -> &'static str {
        match self {
            Estimate::Paired => {
                "paired: each environment's trial and its baseline's ran back to back (a case group); the ratio is the geometric mean of their ratios over launch blocks, Student's t over the blocks"
            }
            Estimate::Unpaired => "unpaired: ratio of means (environment / baseline), Fieller's interval, Welch-Satterthwaite df",
        }
    }
}

/// What a run's stored experiment and manifest say about its ratios: the order its trials ran in
/// (paired or not) and, for a precision run, the blocks of its pilots.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Design {
    /// The trials ran in case groups.
    pub paired_order: bool,
    /// Precision mode's pilot: the plan's minimum blocks (None: not a precision run).
    pub pilot_blocks: Option<u32>,
    /// Pilots precision mode grew beyond the minimum, by ratio ([`Design::key`]; the manifest's
    /// `precision.pilots`): a ratio whose blocks are cheap against the budget is sized from more
    /// (`virtperf_stats::sequential::pilot_blocks`).
    pub pilots: std::collections::BTreeMap<String, u32>,
}

impl Design {
    /// From the run's stored experiment text and manifest.
    pub fn of(experiment: &str, manifest: &serde_json::Value) -> Design {
        let paired_order = manifest["order"].as_str().map_or_else(
            || {
                experiment
                    .lines()
                    .any(|l| l.split('#').next().unwrap_or("").replace(' ', "") == "order=\"paired\"")
            },
            |o| o == "paired",
        );
        let pilot_blocks = manifest["precision"]
            .is_object()
            .then(|| manifest["launches"].as_u64().unwrap_or(1).max(1) as u32);
        Design { paired_order, pilot_blocks, pilots: virtperf_record::store::pilots_of(manifest) }
    }
    /// A paired ratio's key among the pilots: its environment, case and metric (as measured: the
    /// host clock's twin where the report headlines it).
    pub fn key(env: usize, case: usize, metric: &str) -> String {
        format!("{env}:{case}:{metric}")
    }
    /// The blocks of a ratio's pilot: the one recorded for it, else the plan's minimum (None:
    /// not a precision run).
    pub fn pilot(&self, env: usize, case: usize, metric: &str) -> Option<u32> {
        self.pilot_blocks.map(|min| self.pilots.get(&Design::key(env, case, metric)).copied().unwrap_or(min))
    }
    /// The estimate a report states unless asked for the other: paired where the trials ran in
    /// case groups.
    pub fn default_estimate(&self) -> Estimate {
        if self.paired_order {
            Estimate::Paired
        } else {
            Estimate::Unpaired
        }
    }
}

/// The pairs of an environment's values and its baseline's: the same block and repetition.
pub fn pairs(env: &[(Slot, f64)], base: &[(Slot, f64)]) -> Vec<Pair> {
    env.iter()
        .filter_map(|(k, x)| {
            base.iter().find(|(b, _)| b == k).map(|(_, y)| Pair { block: i64::from(k.0), env: *x, base: *y })
        })
        .collect()
}

/// The pilot's spread and degrees of freedom (the ratio's first `pilot_blocks` blocks), where it
/// has two blocks or more.
pub fn pilot_spread(pairs: &[Pair], pilot_blocks: u32) -> Option<(f64, f64)> {
    let pilot = virtperf_stats::paired::first_blocks(pairs, pilot_blocks as usize);
    paired_ratio(&pilot, 0.95).filter(|r| r.blocks >= 2).map(|r| (r.sd_log, r.df))
}

/// The paired ratio a report states for `pairs` at 95 %: Stein's interval for a precision run
/// (its blocks were sized from its pilot of `pilot` blocks, [`Design::pilot`]), the plain one
/// otherwise.
pub fn stated(pairs: &[Pair], pilot: Option<u32>) -> Option<PairedRatio> {
    stated_at(pairs, pilot, 0.95)
}

/// [`stated`] at another level (0.90: the equivalence test's interval).
/// Pairs far outside the others ([`virtperf_stats::paired::set_apart`]) are left out of it: a
/// stalled flow's 4887× beside pairs of 4–7× made an interval of 0.12–6762× and would have
/// had precision mode price the cell at ~50 000 launches.
pub fn stated_at(pairs: &[Pair], pilot: Option<u32>, level: f64) -> Option<PairedRatio> {
    let kept = kept(pairs);
    paired_ratio_stein(&kept, level, pilot.and_then(|b| pilot_spread(&kept, b)))
}

/// `pairs` without those set apart.
pub fn kept(pairs: &[Pair]) -> Vec<Pair> {
    let far = virtperf_stats::paired::set_apart(pairs);
    pairs.iter().enumerate().filter(|(i, _)| !far.contains(i)).map(|(_, p)| *p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_pair_by_block_and_repetition() {
        let env = [((0, 0), 2.0), ((0, 1), 2.2), ((1, 2), 3.0), ((2, 3), 9.0)];
        let base = [((0, 1), 1.1), ((0, 0), 1.0), ((1, 2), 1.5)];
        let p = pairs(&env, &base);
        assert_eq!(p.len(), 3, "the unmatched one is left out: {p:?}");
        assert!(p.iter().all(|x| (x.env / x.base - 2.0).abs() < 1e-12), "{p:?}");
        assert_eq!(p.iter().map(|x| x.block).collect::<Vec<_>>(), [0, 0, 1]);
    }

    #[test]
    fn the_design_is_read_from_the_run() {
        let m = serde_json::json!({"order": "paired", "precision": {"percent": 5.0}, "launches": 4});
        assert_eq!(
            Design::of("", &m),
            Design { paired_order: true, pilot_blocks: Some(4), ..Default::default() }
        );
        // A pilot precision mode grew is that ratio's; the others keep the minimum.
        let m = serde_json::json!({"order": "paired", "precision": {"percent": 5.0, "pilots": {"1:4:memcpy_time": 16}}, "launches": 4});
        let d = Design::of("", &m);
        assert_eq!((d.pilot(1, 4, "memcpy_time"), d.pilot(1, 3, "pde_time")), (Some(16), Some(4)));
        assert_eq!(Design::of("", &m).default_estimate(), Estimate::Paired);
        // Older runs: the stored experiment says its order.
        let d = Design::of("name = \"x\"\norder = \"random\"\n", &serde_json::json!({}));
        assert_eq!((d.paired_order, d.pilot_blocks, d.default_estimate()), (false, None, Estimate::Unpaired));
        assert!(Design::of("order = \"paired\"   # case groups\n", &serde_json::json!({})).paired_order);
    }

    #[test]
    fn a_precision_run_states_steins_interval() {
        // Four pilot blocks of a quiet ratio, then four noisier ones: the interval keeps the
        // run's own spread (the larger); with a noisy pilot, the pilot's.
        let mk = |sds: &[f64]| -> Vec<Pair> {
            sds.iter()
                .enumerate()
                .map(|(i, d)| Pair { block: i as i64, env: 2.0 * d.exp(), base: 1.0 })
                .collect()
        };
        let quiet_pilot = mk(&[0.01, -0.01, 0.0, 0.005, 0.1, -0.1, 0.08, -0.09]);
        let s = stated(&quiet_pilot, Some(4)).unwrap();
        let plain = paired_ratio(&quiet_pilot, 0.95).unwrap();
        assert_eq!(s.ci, plain.ci, "the run's own spread is the larger");
        let noisy_pilot = mk(&[0.1, -0.1, 0.08, -0.09, 0.01, -0.01, 0.0, 0.005]);
        let s = stated(&noisy_pilot, Some(4)).unwrap();
        assert!(s.relative_half_width() > paired_ratio(&noisy_pilot, 0.95).unwrap().relative_half_width());
        assert_eq!(s.df, 3.0, "the pilot's degrees of freedom");
        // A pilot of all eight blocks: the whole run's spread and degrees of freedom.
        assert_eq!(stated(&noisy_pilot, Some(8)).unwrap().df, 7.0);
        // A block the ratio was not measured in is not its pilot's: its first four it was.
        let mut gap = noisy_pilot.clone();
        gap.retain(|p| p.block != 2);
        assert_eq!(pilot_spread(&gap, 4), paired_ratio(&gap[..4], 0.95).map(|r| (r.sd_log, r.df)));
    }
}
