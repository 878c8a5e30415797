//! The plan: every trial of a run, in the order it will run, decided before anything starts and
//! stored with the run, so that `--resume` finishes exactly the missing trials.
//!
//! Warm-up trials come first (per environment × case), then the measured repetitions. With
//! `order = "paired"` (the default) each round (one trial of every environment × case) is a
//! sequence of **case groups**: the cases in a seeded random order, and within each, every
//! environment's trial of that case back to back in a seeded random order. An environment's trial
//! and its baseline's of one round are then seconds apart at most, so a slowdown of the whole
//! host lands on both and cancels in their ratio (the paired estimate, `stats::paired`). With
//! `order = "random"` each round is shuffled whole, with a seeded ChaCha generator: slow drift
//! of the host (thermal, another tenant) spreads over all environments instead of biasing
//! whichever ran last, but the trials of one case in two environments may run far apart.
//!
//! With `launches = L` the plan is L blocks, one after the other: every environment is launched
//! afresh for each block, which holds its warm-ups and `reps` repetitions of every case, shuffled
//! across environments as above. Launch-to-launch variation (memory placement, page backing, vCPU
//! placement, device set-up) then shows in the results as a level of its own.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::experiment::{Experiment, Order};
use virtperf_record::store::PlannedTrial;

/// Adds one trial to the plan: (environment, case, peer), repetition, warm-up, block.
type Push<'a> = dyn FnMut((usize, usize, Option<usize>), i64, bool, u32) + 'a;

pub fn make(exp: &Experiment) -> Vec<PlannedTrial> {
    // One unit per environment × case; an all-pairs case has one per ordered pair of environments.
    let n = exp.envs.len();
    let pairs: Vec<(usize, usize, Option<usize>)> = (0..n)
        .flat_map(|e| {
            (0..exp.cases.len()).flat_map(move |c| {
                let peers: Vec<Option<usize>> = if exp.cases[c].matrix {
                    (0..n).filter(|&p| p != e).map(Some).collect()
                } else {
                    vec![None]
                };
                peers.into_iter().map(move |p| (e, c, p))
            })
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(exp.seed);
    let mut out = Vec::new();
    let mut block = 0u32;
    let mut push = |(e, c, peer): (usize, usize, Option<usize>), rep: i64, warmup: bool, block: u32| {
        out.push(PlannedTrial {
            id: 0,
            seq: out.len() as i64,
            env_idx: e,
            case_idx: c,
            rep: rep + i64::from(block) * i64::from(if warmup { exp.warmup } else { exp.reps }),
            warmup,
            peer_idx: peer,
            block,
        });
    };
    let rounds = |n: u32, warmup: bool, block: u32, rng: &mut ChaCha8Rng, push: &mut Push| match exp.order {
        Order::Sequential => {
            for &u in &pairs {
                for r in 0..n {
                    push(u, r as i64, warmup, block);
                }
            }
        }
        Order::Paired => {
            for r in 0..n {
                let mut cases: Vec<usize> = pairs.iter().map(|u| u.1).collect();
                cases.dedup();
                cases.sort_unstable();
                cases.dedup();
                cases.shuffle(rng);
                for c in cases {
                    let mut group: Vec<_> = pairs.iter().copied().filter(|u| u.1 == c).collect();
                    group.shuffle(rng);
                    // A service's offered loads are percentages of the baseline's capacity
                    // measured in this run: its trial comes first in the group.
                    if virtperf_workload::find(&exp.cases[c].kind).is_some_and(|w| w.service()) {
                        let base =
                            |e: usize| crate::env::find(&exp.envs[e].kind).is_some_and(|k| k.is_baseline());
                        group.sort_by_key(|u| !base(u.0));
                    }
                    for u in group {
                        push(u, r as i64, warmup, block);
                    }
                }
            }
        }
        Order::Interleaved | Order::Random => {
            for r in 0..n {
                let mut round = pairs.clone();
                if exp.order == Order::Random {
                    round.shuffle(rng);
                }
                for u in round {
                    push(u, r as i64, warmup, block);
                }
            }
        }
    };
    while block < exp.launches.max(1) {
        rounds(exp.warmup, true, block, &mut rng, &mut push);
        rounds(exp.reps, false, block, &mut rng, &mut push);
        block += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{read_flag, validate, Origin, RawExperiment};

    fn exp(order: &str, seed: u64) -> Experiment {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.envs.push(read_flag("--env", "native:name=b").unwrap());
        raw.workloads.push(read_flag("--workload", "cpu").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy").unwrap());
        let mut e = validate(&raw, &Origin::Default).unwrap();
        e.order = Order::parse(order).unwrap();
        e.seed = seed;
        e.reps = 50;
        e.warmup = 2;
        e
    }

    #[test]
    fn every_pair_gets_every_rep_and_warmups_come_first() {
        for order in Order::NAMES {
            let p = make(&exp(order, 1));
            assert_eq!(p.len(), 4 * 52);
            assert!(p[..8].iter().all(|t| t.warmup), "{order}");
            assert!(p[8..].iter().all(|t| !t.warmup), "{order}");
            for e in 0..2 {
                for c in 0..2 {
                    let n = p.iter().filter(|t| !t.warmup && t.env_idx == e && t.case_idx == c).count();
                    assert_eq!(n, 50);
                }
            }
            assert!(p.iter().enumerate().all(|(i, t)| t.seq == i as i64));
        }
    }

    #[test]
    fn paired_order_runs_each_case_as_a_group() {
        let a = make(&exp("paired", 7));
        assert_eq!(key_of(&a), key_of(&make(&exp("paired", 7))), "seeded");
        assert_ne!(key_of(&a), key_of(&make(&exp("paired", 8))));
        // Every round: two groups of two (both environments of one case back to back).
        for round in a.chunks(4) {
            assert_eq!(round[0].case_idx, round[1].case_idx, "{round:?}");
            assert_eq!(round[2].case_idx, round[3].case_idx, "{round:?}");
            assert_ne!(round[0].case_idx, round[2].case_idx);
            assert_ne!(round[0].env_idx, round[1].env_idx);
        }
        // Which environment goes first in a group, and which case first in a round, vary.
        let firsts = a.chunks(2).filter(|g| g[0].env_idx == 0).count();
        assert!(firsts > 10 && firsts < 94, "{firsts}");
        let case_first = a.chunks(4).filter(|r| r[0].case_idx == 0).count();
        assert!(case_first > 5 && case_first < 47, "{case_first}");
    }

    fn key_of(p: &[PlannedTrial]) -> Vec<(usize, usize)> {
        p.iter().map(|t| (t.env_idx, t.case_idx)).collect()
    }

    #[test]
    fn random_order_is_seeded_and_balanced() {
        let a = make(&exp("random", 7));
        let b = make(&exp("random", 7));
        let c = make(&exp("random", 8));
        let key = |p: &[PlannedTrial]| p.iter().map(|t| (t.env_idx, t.case_idx)).collect::<Vec<_>>();
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
        // Not the fixed interleaving: environment 0 is not always first in its round.
        let firsts = a.chunks(4).filter(|r| r[0].env_idx == 0).count();
        assert!(firsts > 5 && firsts < 47, "{firsts}");
    }

    #[test]
    fn launches_make_blocks_each_with_its_warmups_and_reps() {
        let mut e = exp("random", 3);
        e.reps = 4;
        e.warmup = 1;
        e.launches = 3;
        let p = make(&e);
        // 3 blocks × (1 warm-up + 4 reps) × 2 environments × 2 cases.
        assert_eq!(p.len(), 3 * 5 * 4);
        for (b, chunk) in p.chunks(20).enumerate() {
            assert!(chunk.iter().all(|t| t.block == b as u32), "blocks run one after the other");
            assert!(chunk[..4].iter().all(|t| t.warmup) && chunk[4..].iter().all(|t| !t.warmup));
        }
        // Every environment × case has reps in every block, numbered apart across blocks.
        for env in 0..2 {
            for case in 0..2 {
                let mut reps: Vec<i64> = p
                    .iter()
                    .filter(|t| !t.warmup && t.env_idx == env && t.case_idx == case)
                    .map(|t| t.rep)
                    .collect();
                reps.sort();
                assert_eq!(reps, (0..12).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn all_pairs_cases_plan_every_ordered_pair() {
        let mut raw = RawExperiment::default();
        for e in ["native", "native:name=b", "native:name=c"] {
            raw.envs.push(read_flag("--env", e).unwrap());
        }
        raw.workloads.push(read_flag("--workload", "tcp_rr:pairs=all").unwrap());
        raw.workloads.push(read_flag("--workload", "cpu").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        let p = make(&e);
        let measured: Vec<_> = p.iter().filter(|t| !t.warmup).collect();
        // reps × (3 × 2 ordered pairs + 3 environments for cpu)
        assert_eq!(measured.len() as u32, e.reps * (6 + 3));
        assert!(p.iter().filter(|t| t.case_idx == 0).all(|t| t.peer_idx.is_some_and(|q| q != t.env_idx)));
        assert!(p.iter().filter(|t| t.case_idx == 1).all(|t| t.peer_idx.is_none()));
    }
}
