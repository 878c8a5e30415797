//! The coverage table of precision mode's designs under simulated real-run noise (`sim`):
//! `cargo run --release -p virtperf-stats --example coverage [RUNS]` (bench/precision.sh prints it).

use virtperf_stats::sequential::Rule;
use virtperf_stats::sim::{run_paired, run_unpaired, scenarios, summarise};

fn main() {
    let runs: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(400);
    println!(
        "coverage of the stated intervals, ratios within target, median half-width ({runs} runs a scenario)"
    );
    println!(
        "{:<12} {:<5} {:>26} {:>26} {:>26}",
        "scenario", "ratio", "unpaired, stop at 99 %", "paired, stop at 99 %", "paired, two-stage 95 %"
    );
    let only = std::env::args().nth(2);
    let seed: u64 = std::env::args().nth(3).and_then(|a| a.parse().ok()).unwrap_or(7);
    for s in scenarios().into_iter().filter(|s| only.as_deref().is_none_or(|o| s.name.starts_with(o))) {
        let u = summarise(&s, runs, seed, run_unpaired);
        let p = summarise(&s, runs, seed, |s, seed| run_paired(s, seed, Rule::StopWhenMet));
        let t = summarise(&s, runs, seed, |s, seed| run_paired(s, seed, Rule::TwoStage));
        for i in 0..u.len() {
            let cell = |x: (f64, f64, f64)| {
                format!("{:>5.1} % {:>5.1} % ±{:>6.1} %", x.0 * 100.0, x.1 * 100.0, x.2 * 100.0)
            };
            println!("{:<12} {:<5} {:>26} {:>26} {:>26}", s.name, i + 1, cell(u[i]), cell(p[i]), cell(t[i]));
        }
    }
}
