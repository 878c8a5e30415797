//! e2e: rigour in reasonable time — operation counts calibrated per environment, launches as a
//! level of repetition, precision mode's stopping rule and budget.

use crate::util::*;

fn db_conn(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("db")
}

fn run_json(fx: &Fixture, line: &str) -> (Output, serde_json::Value) {
    let out = fx.vp(line);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, doc)
}

/// Per-operation workloads left without a count are calibrated in each environment to their
/// target_time, on the host's clock: the trials then last about that long, each stores the count
/// it ran with, and a count given in the experiment is kept as given.
pub(crate) fn calibration_fits_each_environment_to_its_target_time() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let ((out, doc), spread) = with_speed_spread(|| {
        run_json(
            &fx,
            "run --env native --env container --workload syscall:target_time=100ms \
             --workload intmix:target_time=100ms --workload \
             cpu:iterations=1000000,name=fixed --reps 5 --counts each --json",
        )
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c = db_conn(&fx.db);
    let cal: Vec<(i64, i64, String, i64, i64)> = c
        .prepare(
            "SELECT env_idx, case_idx, param, count, target_ns FROM calibrations ORDER BY env_idx, case_idx",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // Two environments × two calibrated cases; the fixed one is not calibrated.
    assert_eq!(cal.len(), 4, "{cal:?}");
    for (e, k, param, count, target) in &cal {
        assert_eq!((param.as_str(), *target), ("iterations", 100_000_000), "{cal:?}");
        // Every measured trial of that environment × case ran with the calibrated count, its
        // warm-up with a quarter of it (and stored what it did).
        let works: Vec<(bool, Option<i64>)> = c
            .prepare("SELECT warmup, work FROM trials WHERE env_idx = ?1 AND case_idx = ?2")
            .unwrap()
            .query_map([e, k], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let quarter = (*count as f64 * 0.25).round() as i64;
        assert!(
            works.iter().all(|(warm, w)| *w == Some(if *warm { quarter } else { *count })),
            "env {e} case {k}: {works:?} vs {count} (warm-ups {quarter})"
        );
        assert_eq!(works.iter().filter(|x| x.0).count(), 1, "one warm-up: {works:?}");
        // The measured trials last about the target on the host's clock (the count is linear
        // in time here: a syscall or an intmix step costs the same 1 000 or 1 000 000 times).
        let mut spans: Vec<f64> = c
            .prepare("SELECT host_ns FROM trials WHERE env_idx = ?1 AND case_idx = ?2 AND warmup = 0 AND status = 'ok'")
            .unwrap()
            .query_map([e, k], |r| r.get::<_, i64>(0))
            .unwrap()
            .map(|x| x.unwrap() as f64 / 1e6)
            .collect();
        spans.sort_by(f64::total_cmp);
        let median = spans[spans.len() / 2];
        println!("    env {e} case {k}: {count} iterations, median trial {median:.1} ms for a 100 ms target (host speed spread ×{spread:.2})");
        // Within 0.6–1.6× of the target, widened by how much the host's speed varied beside the
        // run (the count was calibrated at one moment and timed at others).
        assert!(
            (60.0 / spread..=160.0 * spread).contains(&median),
            "env {e} case {k}: median trial {median:.1} ms, target 100 ms (host speed spread ×{spread:.2})"
        );
    }
    // The fixed case ran its given count and says so nowhere as calibrated.
    let fixed: Vec<Option<i64>> = c
        .prepare("SELECT work FROM trials WHERE case_idx = 2")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(fixed.iter().all(Option::is_none), "{fixed:?}");
    // The report carries each environment's count, and the figures stay per operation.
    let row = row_or_fail(&doc, "container", "syscall_time");
    let count = cal.iter().find(|x| x.0 == 1 && x.1 == 0).unwrap().3;
    assert_eq!(row["work"]["count"].as_i64(), Some(count), "{row}");
    assert!(row["mean"].as_f64().unwrap() < 100_000.0, "ns per call, not per trial: {row}");
    assert!(row_or_fail(&doc, "native", "cpu_rate")["work"].is_null());
    fx.assert_no_leftovers();

    // Equal counts (the default): a container held to 30 % of a CPU is the slow one; both run its
    // count, native keeps its own beside it, and the report says the work was equal.
    let eq = Fixture::new();
    let (out, doc) = run_json(
        &eq,
        "run --env native --env container:cpus=0.3,name=slow --workload intmix:target_time=100ms \
         --reps 3 --warmup 1 --json",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (native, slow) =
        (row_or_fail(&doc, "native", "intmix_rate"), row_or_fail(&doc, "slow", "intmix_rate"));
    let n = native["work"]["count"].as_u64().unwrap();
    assert_eq!(slow["work"]["count"].as_u64(), Some(n), "one count for both: {native} {slow}");
    let own = native["work"]["own"].as_u64().expect("native's own count beside it");
    // Held to 30 % of a CPU the container runs ~3× slower over a long trial, but a calibration
    // probe shorter than the quota (30 ms of each 100 ms period) runs at full speed: its count
    // came out at 0.63 × native's in one CI run. Native's own must be the larger, by a clear margin.
    assert!(own * 4 > n * 5 && slow["work"]["own"].is_null(), "native's own {own}, the common {n}");
    let works: Vec<Option<i64>> = db_conn(&eq.db)
        .prepare("SELECT work FROM trials WHERE warmup = 0")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(works.iter().all(|w| *w == Some(n as i64)), "every measured trial ran {n}: {works:?}");
    let text = String::from_utf8_lossy(&eq.vp("report --full").stdout).to_string();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("equal work: intmix") && flat.contains("slow's count at its target time"),
        "{text}"
    );
    println!("    equal counts: both ran {n} (native's own {own})");
    eq.assert_no_leftovers();
    Outcome::Pass
}

/// `launches = 3`: each environment runs its repetitions in three blocks, each on a fresh launch,
/// and the figures follow the two-level model — checked here against the stored values by hand.
pub(crate) fn launches_run_blocks_on_fresh_launches_and_intervals_cover_them() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let (out, doc) = run_json(
        &fx,
        "run --env native --env container --workload syscall:target_time=30ms --reps 3 --launches 3 --json",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c = db_conn(&fx.db);
    for e in 0..2i64 {
        // Three launches of the environment, one per block, each running that block's trials.
        let launches: Vec<(i64, i64)> = c
            .prepare("SELECT id, block FROM instances WHERE env_idx = ?1 AND status = 'ready' ORDER BY id")
            .unwrap()
            .query_map([e], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(launches.iter().map(|l| l.1).collect::<Vec<_>>(), vec![0, 1, 2], "env {e}: {launches:?}");
        for (id, block) in &launches {
            let (n, other): (i64, i64) = c
                .query_row(
                    "SELECT count(*), sum(launch_id != ?2) FROM trials WHERE env_idx = ?1 AND block = ?3",
                    [e, *id, *block],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            assert_eq!((n, other), (4, 0), "env {e} block {block}: a warm-up and 3 reps on launch {id}");
        }
        // The two-level figures, from the stored values: mean of the launch means, and the
        // interval t(0.975, 2) · s(launch means) / √3.
        let vals: Vec<(i64, f64)> = c
            .prepare(
                "SELECT t.launch_id, s.value FROM samples s JOIN trials t ON t.id = s.trial_id
                 WHERE t.env_idx = ?1 AND t.warmup = 0 AND s.metric = 'syscall_time'",
            )
            .unwrap()
            .query_map([e], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let means: Vec<f64> = launches
            .iter()
            .map(|(id, _)| {
                let v: Vec<f64> = vals.iter().filter(|x| x.0 == *id).map(|x| x.1).collect();
                v.iter().sum::<f64>() / v.len() as f64
            })
            .collect();
        let grand = means.iter().sum::<f64>() / 3.0;
        let s = (means.iter().map(|m| (m - grand).powi(2)).sum::<f64>() / 2.0).sqrt();
        let half = 4.302_653 * s / 3f64.sqrt();
        let env = ["native", "container"][e as usize];
        let row = row_or_fail(&doc, env, "syscall_time");
        assert_eq!(
            (row["launches"].as_i64(), row["ci_covers"].as_str(), row["n"].as_i64()),
            (Some(3), Some("launches"), Some(9)),
            "{row}"
        );
        let (m, lo, hi) = (
            row["mean"].as_f64().unwrap(),
            row["ci95"][0].as_f64().unwrap(),
            row["ci95"][1].as_f64().unwrap(),
        );
        assert!((m - grand).abs() < 1e-9 * grand, "{env}: mean {m} vs the launch means' {grand}");
        assert!(
            ((hi - lo) / 2.0 - half).abs() < 1e-6 * half,
            "{env}: half-width {} vs {half}",
            (hi - lo) / 2.0
        );
        let v = &row["variance"];
        let shares = v["launch_share"].as_f64().unwrap() + v["trial_share"].as_f64().unwrap();
        assert!((shares - 1.0).abs() < 1e-9, "{v}");
    }
    let text = fx.text("report --full");
    assert!(text.contains("intervals cover up to 3 launches"), "{text}");
    assert!(!text.contains("intervals cover one launch"), "{text}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Precision mode, paired (the default order): a loose target is met at the plan's minimum (the
/// pilot: 4 launch blocks) and the run ends there; a reachable one gets further blocks, each
/// holding the baseline and the environment beside it in case groups, until the ratio has the
/// blocks its pilot's spread asked for (Stein) — the budget spent on it and nothing else; an
/// impossible one is set aside at once, said with what it would need, and its budget is not
/// spent; a budget shorter than the minimum leaves the run resumable.
pub(crate) fn precision_mode_stops_at_its_target_or_its_budget_and_resumes() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let run = |fx: &Fixture, precision: &str, budget: &str, reps: &str| {
        let t0 = Instant::now();
        let (out, doc) = run_json(
            fx,
            &format!(
                "run --env native --env container --workload cpu:target_time=20ms --reps {reps} --warmup 1 \
                 --launches 4 --precision {precision} --budget {budget} --json"
            ),
        );
        assert!(out.status.success() || reps != "1", "{}", String::from_utf8_lossy(&out.stderr));
        (out, doc, t0.elapsed().as_secs_f64())
    };
    // The blocks of a run: how many there are, and each one's environments.
    let blocks = |db: &Path| -> Vec<Vec<i64>> {
        let c = db_conn(db);
        let mut st =
            c.prepare("SELECT block, env_idx FROM trials WHERE warmup = 0 ORDER BY block, seq").unwrap();
        let rows: Vec<(i64, i64)> =
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
        let n = rows.iter().map(|r| r.0).max().map_or(0, |m| m + 1);
        (0..n).map(|b| rows.iter().filter(|r| r.0 == b).map(|r| r.1).collect()).collect()
    };
    // A loose target: met at the minimum; the run ends there.
    let loose = Fixture::new();
    let (out, doc, secs) = run(&loose, "90%", "60s", "1");
    let p = &doc["precision"];
    assert_eq!((p["met"].as_u64(), p["rule"].as_str()), (Some(1), Some("two-stage")), "{p:#}");
    // No block beyond the minimum — unless the pilot's own four blocks do not size the ratio
    // within themselves. The run decides that at 99 % (`sequential::KEEP_LEVEL`: a ratio kept at
    // its minimum is one whose spread looked small) on the pairs it keeps (a stall set apart); CI
    // on a busy host: ±52 % at 95 % is ±116 % at 99 % on 3 degrees of freedom, and the pilot grew
    // to 13 blocks, rightly. The test recomputes that from the stored trials; within 20 % of the
    // target either way is the rule's edge, where both are right.
    let pilot_half = {
        let c = db_conn(&loose.db);
        let mut st = c
            .prepare(
                "SELECT t.block, t.env_idx, s.value FROM trials t JOIN samples s ON s.trial_id = t.id \
                 WHERE t.warmup = 0 AND t.status = 'ok' AND s.metric = 'cpu_rate' AND t.block < 4",
            )
            .unwrap();
        let rows: Vec<(i64, i64, f64)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let pairs: Vec<virtperf_stats::paired::Pair> = (0..4)
            .filter_map(|b| {
                let side = |e: i64| rows.iter().find(|r| r.0 == b && r.1 == e).map(|r| r.2);
                Some(virtperf_stats::paired::Pair { block: b, env: side(1)?, base: side(0)? })
            })
            .collect();
        let apart = virtperf_stats::paired::set_apart(&pairs);
        let logs: Vec<f64> = pairs
            .iter()
            .enumerate()
            .filter(|(i, _)| !apart.contains(i))
            .map(|(_, p)| (p.env / p.base).ln())
            .collect();
        let n = logs.len() as f64;
        let m = logs.iter().sum::<f64>() / n;
        let sd = (logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        // What 4 blocks of that spread give at 99 %: the minimum keeps the ratio where that is
        // within the target.
        let t = virtperf_stats::t_quantile(virtperf_stats::sequential::KEEP_LEVEL, n - 1.0);
        ((t * sd / 2.0).exp() - 1.0) * 100.0
    };
    let nblocks = blocks(&loose.db).len();
    if pilot_half < 0.8 * 90.0 {
        assert_eq!(nblocks, 4, "no block beyond the minimum (the pilot's pairs: ±{pilot_half:.0} % at 99 %)");
    } else {
        println!(
            "    the pilot's four blocks ±{pilot_half:.0} % at 99 % against ±90 %: {nblocks} blocks, met"
        );
        assert!(
            nblocks > 4 || pilot_half < 1.2 * 90.0,
            "a pilot of ±{pilot_half:.0} % at 99 % was not grown"
        );
    }
    // The minimum alone is quick; a grown pilot spends what the 60 s budget allows, no more.
    let bound = if nblocks == 4 { 30.0 } else { 75.0 };
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("budget") && secs < bound,
        "{secs:.1} s for {nblocks} blocks"
    );
    // A reachable target: more blocks, every one paired (both environments, back to back), and
    // the ratio ends with the blocks its pilot asked for — or met. Reachable is the host's to
    // say: a fixed ±1 % asked 65 blocks of a quiet pilot and ~650 of a noisy one (then rightly
    // set aside, a CI run). A third of the last run's half-width at the minimum asks about 9× the
    // pilot's blocks of the same spread (≈ 36 of ~0.1 s); a 4-block pilot's spread varies by
    // 3× and more between runs, so a pilot quiet enough to meet it at once is checked as such
    // (met at the minimum, nothing added) and the target tightened again, three times at most.
    let mut h = p["cells"][0]["half_width_percent"].as_f64().expect("the loose run's half-width");
    let mut found = None;
    for _ in 0..3 {
        let target = format!("{:.2}%", (h / 3.0).max(0.2));
        let fx = Fixture::new();
        let (_, doc, _) = run(&fx, &target, "60s", "1");
        let b = blocks(&fx.db);
        let cell = doc["precision"]["cells"][0].clone();
        if b.len() > 4 {
            found = Some((fx, doc, b, target, h));
            break;
        }
        // Nothing added: its pilot met the target, or (a pilot far noisier than the run before
        // it, beside a hog: ±22 % after ±3 %) the blocks it would need do not fit in the budget
        // and the cell is set aside, said with what it needs. Either way the next target is a
        // third of this pilot's half-width.
        let set_aside = cell["met"] == false && cell["needs"]["seconds"].as_f64().is_some_and(|s| s > 60.0);
        assert!(
            cell["met"] == true || set_aside,
            "nothing added, so its pilot met {target} or needed more than the 60 s budget: {cell}"
        );
        h = cell["half_width_percent"].as_f64().unwrap_or(h);
        fx.assert_no_leftovers();
    }
    let (reach, doc, b, target, h4) = found.expect("blocks were added at one of three targets");
    for (i, env_of) in b.iter().enumerate() {
        assert!(env_of.contains(&0) && env_of.contains(&1), "block {i} holds both sides: {env_of:?}");
    }
    let row = row_or_fail(&doc, "container", "cpu_rate");
    let o = &row["overhead"];
    assert_eq!((o["estimate"].as_str(), o["ci_level"].as_f64()), (Some("paired"), Some(0.95)), "{o}");
    // Every block in the ratio but those set apart (a stall; a burst of load on one side of a
    // pair, beside load that comes and goes: 32 of 219), which the ratio says.
    let apart = &o["set_apart"];
    let set_apart =
        ["stalled", "burst", "beyond"].iter().map(|k| apart[k].as_u64().unwrap_or(0)).sum::<u64>();
    assert_eq!(o["blocks"].as_u64().map(|n| n + set_apart), Some(b.len() as u64), "{o}");
    if set_apart > 0 {
        assert_eq!(apart["of"].as_u64(), Some(b.len() as u64), "{o}");
    }
    // Its pilot was decided once its minimum was in, and recorded for the report and a resume:
    // the minimum where that already sized it, else grown (a 20 ms case is cheap against 60 s).
    let manifest: String =
        db_conn(&reach.db).query_row("SELECT manifest FROM runs", [], |r| r.get(0)).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    let pilot = manifest["precision"]["pilots"]["1:0:cpu_rate"].as_u64();
    assert!(pilot.is_some_and(|n| (4..=16).contains(&n)), "{manifest:#}");
    let cell = &doc["precision"]["cells"][0];
    // Its whole pilot — unless, while the pilot grew, its spread so far asked for more than the
    // budget holds, and it was set aside, said with what it needs (CI: 10 blocks of a pilot of
    // more, on a busy host).
    let set_aside = cell["met"] == false && cell["needs"]["more_blocks"].as_u64().is_some();
    assert!(
        b.len() as u64 >= pilot.unwrap_or(0) || set_aside,
        "the run holds its whole pilot ({} blocks of {pilot:?}) or set it aside: {cell}",
        b.len()
    );
    println!(
        "    {target} (a third of the pilot's ±{h4:.2} %): {} blocks, ±{:.2} %, met {}, needs {}",
        b.len(),
        cell["half_width_percent"].as_f64().unwrap_or(f64::NAN),
        cell["met"],
        cell["needs"]
    );
    println!("    its pilot: {} blocks", pilot.unwrap_or(0));
    // An impossible target: set aside at once (its blocks would take longer than the budget),
    // said with what it would need; the budget is not spent on it.
    let tight = Fixture::new();
    let (_, doc, secs) = run(&tight, "0.001%", "30s", "1");
    assert_eq!(blocks(&tight.db).len(), 4, "nothing added for a ratio out of reach");
    assert!(secs < 25.0, "the budget was not spent on it: {secs:.1} s");
    let cell = &doc["precision"]["cells"][0];
    assert!(cell["met"] == false && cell["needs"]["more_blocks"].as_u64().is_some_and(|n| n > 100), "{cell}");
    let text = String::from_utf8_lossy(&tight.vp("report --full").stdout).to_string();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("precision target ±0.001 %") && flat.contains("0 of 1 ratios met it"), "{text}");
    assert!(flat.contains("more launches, ~"), "what it would need: {text}");
    // A budget shorter than the minimum: what is left stays pending, the run is resumable.
    let short = Fixture::new();
    let (out, _, _) = run(&short, "5%", "1s", "40");
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("of the minimum left"));
    let pending = trials_with(&short.db, "pending");
    assert!(!pending.is_empty() && run_status(&short.db) == "interrupted", "{} pending", pending.len());
    for fx in [&loose, &reach, &tight, &short] {
        fx.assert_no_leftovers();
    }
    Outcome::Pass
}

/// Several instances get the two-clock check too: one point per instance and trial, each on its
/// own calibration; a single instance keeps one point per trial. (Whether the clocks agree
/// depends on the host's CPUs — two busy instances on two CPUs delay the stamping here — so the
/// test checks what is counted and said, not the verdict.)
pub(crate) fn several_instances_get_a_clock_check_each() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let (out, doc) = run_json(
        &fx,
        "run --env native --env container:instances=2,name=two --workload \
         memcpy:size=8MiB,copies=5 --reps 3 --warmup 0 --json",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let checks = doc["clock_checks"].as_array().unwrap();
    let of = |e: &str| checks.iter().find(|c| c["environment"] == e).unwrap_or_else(|| panic!("{checks:#?}"));
    assert_eq!((of("native")["trials"].as_u64(), of("native")["instances"].as_u64()), (Some(3), Some(1)));
    assert_eq!((of("two")["trials"].as_u64(), of("two")["instances"].as_u64()), (Some(6), Some(2)));
    let two = of("two");
    println!(
        "    2 instances: host − guest {:+.3} ms ({:+.2} %), {}/6 within ±{:.3} ms",
        two["median_offset_ms"].as_f64().unwrap_or(f64::NAN),
        two["median_offset_pct"].as_f64().unwrap_or(f64::NAN),
        two["agreeing"],
        two["tolerance_ms"].as_f64().unwrap_or(f64::NAN)
    );
    // The guest span of each point is one instance's own run (8 MiB × 5 takes milliseconds).
    let g = two["guest_ms_mean"].as_f64().unwrap();
    assert!(g > 0.1 && g < 1000.0, "{two}");
    let text = String::from_utf8_lossy(&fx.vp("report --full").stdout).to_string();
    assert!(
        text.contains("clock check (host − guest per armed trial, median)") && text.contains("two "),
        "{text}"
    );
    // Said in words, wherever the 100-column report wraps them (the numbers' widths move it).
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if two["agree"] == false {
        assert!(flat.contains("2 instances at once, one point each"), "{text}");
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}
