//! e2e: containers and host measurement: many repetitions, CPU limits, background load, windows and clocks.

use crate::util::*;

pub(crate) fn avionics_1000_reps_native_and_container() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let t = std::time::Instant::now();
    let run = fx.json("run --env native --env container --workload memcpy --reps 1000");
    // The host's own noise, measured apart right after: the same copies (10 MB × 10) in this
    // process, each in a new thread as the agent runs a trial, paced and interleaved like the run's trials (one every 2 000th of its time, with
    // another pair of buffers' copies between them): what else runs on this machine, and the
    // other environment's copies, evict the buffers from the cache between trials — measured
    // here: +15 % and a CV of 3 % → 8–15 % from back to back to 5 ms apart.
    let bare = bare_memcpy_times(300, t.elapsed() / 2000);
    let host_cv = cv_of(&bare);
    let row = |env: &str, metric: &str| row_or_fail(&run, env, metric);
    let native = row("native", "memcpy_time");
    assert_eq!(native["n"], 1000);
    let (lo, hi, mean) = (
        native["ci95"][0].as_f64().unwrap(),
        native["ci95"][1].as_f64().unwrap(),
        native["mean"].as_f64().unwrap(),
    );
    let half = (hi - lo) / 2.0 / mean;
    // The statistics are self-consistent: half-width = t(0.975, 999) · s / √n.
    let expect = 1.9623 * native["stdev"].as_f64().unwrap() / 1000f64.sqrt() / mean;
    assert!((half - expect).abs() < 1e-4 * expect.max(1e-9) + 1e-9, "{half} vs {expect}");
    // Seed 002's target: < 1 % with 1000 repetitions, which holds when the copies' CV is below
    // 16 % (1.962 · 0.16 / √1000 = 0.99 %). virtperf's trials are noisier than the bare loop at
    // the same pace (measured: CV 9.6–13.8 % against 5.5–8.4 %; a new thread per trial and the
    // orchestrator's work between trials are what differ — not explained further yet): at most
    // 2× it + 2 points. Where the host is as quiet as this one (the loop's CV below 10 %) the
    // target is required; on a noisier host it is left out, said, and the interval must still
    // be what the host's noise allows.
    //
    // The loop runs after the run, not beside it: load that came and went during the run (a
    // burst of other work on a shared CI machine) widens the run's spread and not the loop's.
    // So virtperf's own noise is judged by a spread that a minority of disturbed trials cannot
    // move — 1.4826 · MAD / median, the CV of a normal sample — of both; and the < 1 % target,
    // which is of the ordinary CV, is required only where the run's ordinary CV says no burst
    // came (it is within 1.5× its robust one + 1 point).
    let cv = native["cv"].as_f64().unwrap();
    let samples: Vec<f64> = fx.export()["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["environment"] == "native" && t["status"] == "ok" && t["warmup"] != true)
        .flat_map(|t| t["samples"].as_array().cloned().unwrap_or_default())
        .filter(|x| x["metric"] == "memcpy_time")
        .filter_map(|x| x["value"].as_f64())
        .collect();
    assert_eq!(samples.len(), 1000, "the native trials' memcpy_time samples");
    let (robust, host_robust) = (robust_cv(&samples), robust_cv(&bare));
    println!(
        "    native memcpy: mean {mean:.3} ms, CV {:.1} % (robust {:.1} %; the bare loop's {:.1} %, robust {:.1} %), CI half-width {:.3} % of the mean (target < 1 %)",
        cv * 100.0,
        robust * 100.0,
        host_cv * 100.0,
        host_robust * 100.0,
        half * 100.0
    );
    assert!(
        robust <= 2.0 * host_robust + 0.02,
        "virtperf's robust CV {robust:.3} against the bare loop's {host_robust:.3}: noise of its own"
    );
    let burst = cv > 1.5 * robust + 0.01;
    if burst {
        dropped(
            "the < 1 % target",
            &format!(
                "load came and went during the run: its CV {:.1} % against {:.1} % robust",
                cv * 100.0,
                robust * 100.0
            ),
        );
    } else if host_cv < 0.10 {
        assert!(half < 0.01, "native CI half-width {:.3} % of the mean, target < 1 %", half * 100.0);
    } else {
        dropped(
            "the < 1 % target",
            &format!(
                "this host's own memcpy CV at the run's pace is {:.1} % (the target is required below 10 %)",
                host_cv * 100.0
            ),
        );
    }
    let c = row("container", "memcpy_time");
    assert_eq!(c["n"], 1000);
    assert!(c["overhead"]["ratio"].as_f64().unwrap() > 0.5 && c["overhead"]["ci95"].is_array(), "{c}");
    assert!(row("container", "host_cpu_time")["mean"].as_f64().unwrap() > 0.0, "cgroup CPU accounting works");
    let starts = run["environments"].as_array().unwrap();
    assert!(starts.iter().all(|e| e["start_ms_mean"].as_f64().is_some_and(|ms| ms > 0.0)), "{starts:?}");
    assert!(
        run["clock_checks"].as_array().unwrap().iter().all(|c| c["agree"] == true),
        "{:#}",
        run["clock_checks"]
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}

pub(crate) fn container_cpu_limit_is_enforced() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let run = fx.json(
        "run --env native --env container:cpus=0.3,memory=256MiB,name=small --workload \
         cpu:iterations=100000000 --reps 3",
    );
    let small = row_or_fail(&run, "small", "cpu_rate");
    let ratio = small["overhead"]["ratio"].as_f64().unwrap();
    // A 30 % CFS quota over a ~0.2 s loop: well under native, whatever the noise.
    assert!(ratio < 0.6, "cpus=0.3 should slow a CPU loop down, ratio {ratio}");
    // While one environment runs its trial the other is paused, and each trial says so.
    let raw = fx.export();
    for t in raw["trials"].as_array().unwrap() {
        let n = &t["extra"]["idle_neighbours"];
        assert_eq!((n["idle"].as_u64(), n["paused"].as_u64()), (Some(1), Some(1)), "{t:#}");
        let how = n["how"][0].as_str().unwrap_or_default();
        assert!(how == "the cgroup freezer" || how == "SIGSTOP/SIGCONT", "{n}");
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Seed 000's softloader: the achieved CPU of a 50 % and a 90 % load, measured, within ±3 points
/// of what this host lets one thread have at the time. The reference is measured beside them, in
/// the same run and interleaved with them: a 100 % load, which gets what a spinning thread can get
/// (all of a CPU on an idle host; about half of one beside a CPU hog and a busy orchestrator).
/// Under the fair scheduler a thread asking for T % gets min(T, that share): the margin is 3
/// points plus the reference's own spread over its trials.
pub(crate) fn background_load_lands_within_3_points() -> Outcome {
    let fx = Fixture::new();
    let doc = fx.json("run --env native --workload sleep:duration=1s,load=[50,90,100] --reps 3 --warmup 0");
    let row = |target: f64, metric: &str| -> serde_json::Value {
        doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["metric"] == metric && r["workload"].as_str().unwrap().contains(&format!("load={target}"))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {metric} row for {target}: {doc:#}"))
    };
    // The reference is measured beside each load, of the load itself: the time its threads
    // waited runnable for a CPU others held (load_starved). A busy host, or one whose load comes
    // and goes (make test-jitter), takes that much from the target and no more; a spinning
    // thread's share measured in other trials would not have seen the same moments.
    for target in [50.0, 90.0, 100.0] {
        let (got, starved) = (row(target, "load_achieved"), row(target, "load_starved"));
        let (mean, spread) =
            (got["mean"].as_f64().unwrap(), got["max"].as_f64().unwrap() - got["min"].as_f64().unwrap());
        let waited = starved["mean"].as_f64().unwrap();
        println!(
            "    target {target} %: achieved {mean:.1} % (spread {spread:.1}), waited runnable {waited:.1} %"
        );
        assert!(mean <= target + 3.0, "target {target} %, achieved {mean:.2} %: above it");
        assert!(
            mean + waited >= target - 3.0,
            "target {target} %, achieved {mean:.2} % and waited {waited:.2} %: {:.1} points lost that the host did not take",
            target - mean - waited
        );
        if waited < 1.0 && target < 100.0 {
            assert!((mean - target).abs() <= 3.0, "an idle host: {mean:.2} % for {target} %");
        }
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Issue 17's checks on real trials: (1) the guest CPU of a stream with a 90 % load on the DUT
/// excludes the loader; (2) `cpu_per_gbit` of a shaped 1 Gbit/s stream is the DUT's host CPU over
/// the stored transfer window ÷ the bytes received, recomputed here from the stored CPU series;
/// (3) fixed-work workloads carry both clocks, and native's agree trial by trial.
pub(crate) fn measurements_use_their_own_windows_and_clocks() -> Outcome {
    if let Some(why) = need_root_and("tc") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let doc = fx.json(
        "run --env native --workload tcp_stream:duration=2s,load=[0,90],name=s \
         --lab rate=1gbit,mtu=1500 --reps 3 --warmup 0",
    );
    let rows = doc["results"].as_array().unwrap();
    let mean = |w: &str, m: &str| {
        rows.iter()
            .find(|r| r["workload"].as_str().is_some_and(|x| x.contains(w)) && r["metric"] == m)
            .and_then(|r| r["mean"].as_f64())
            .unwrap_or_else(|| panic!("no {m} for {w}: {:?}", doc["failures"]))
    };
    // (1) A 90 % loader over 2 s is up to ~1800 ms of CPU (what it reached is measured: beside a
    // CPU hog about half of it); the stream's own threads spend far less. Counted in, the
    // loader would add what it achieved; half of that is the margin.
    let (idle, loaded) = (mean("load=0", "guest_cpu_time"), mean("load=90", "guest_cpu_time"));
    let achieved = mean("load=90", "load_achieved");
    assert!(achieved > 10.0, "the load ran: {achieved} %");
    let loader_ms = achieved / 100.0 * 2000.0;
    assert!(
        loaded < idle + 0.5 * loader_ms,
        "guest CPU with the loader {loaded:.0} ms vs {idle:.0} ms without: the loader ({loader_ms:.0} ms) is counted"
    );
    // (2) Recompute cpu_per_gbit of every shaped stream trial from what was stored.
    let ex = fx.export();
    let mut checked = 0;
    for t in ex["trials"].as_array().unwrap().iter().filter(|t| t["workload_kind"] == "tcp_stream") {
        let tr = &t["extra"]["transfer"];
        let (bytes, w) = (tr["bytes"].as_f64().unwrap(), tr["window_ms"].as_array().unwrap());
        let (w0, w1) = (w[0].as_f64().unwrap(), w[1].as_f64().unwrap());
        let pts: Vec<(f64, f64)> = t["cpu_series"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p[0] == "dut")
            .map(|p| (p[1].as_f64().unwrap(), p[2].as_f64().unwrap()))
            .collect();
        let at = |x: f64| {
            let i = pts.iter().position(|p| p.0 >= x).unwrap_or(pts.len() - 1).max(1);
            let (a, b) = (pts[i - 1], pts[i]);
            a.1 + (x - a.0).clamp(0.0, b.0 - a.0) / (b.0 - a.0).max(1e-9) * (b.1 - a.1)
        };
        let expect = (at(w1) - at(w0)) / 1e9 / (bytes * 8.0 / 1e9);
        let got = t["samples"].as_array().unwrap().iter().find(|s| s["metric"] == "cpu_per_gbit").unwrap()
            ["value"]
            .as_f64()
            .unwrap();
        assert!((got / expect - 1.0).abs() < 1e-6, "stored {got} vs recomputed {expect}");
        // The window is the transfer: most of the trial's 2 s, not its setup.
        assert!(w1 - w0 > 1500.0 && w1 - w0 < 4000.0, "window {w0}..{w1} ms");
        assert!(bytes > 0.8 * 0.9415e9 / 8.0 * 2.0, "a shaped GbE stream moved {bytes} bytes in 2 s");
        checked += 1;
    }
    assert_eq!(checked, 6);
    // (3) Two clocks, agreeing for native: a run of its own, five trials a case, since a cell's
    // clocks disagree when most of its trials do and one busy moment of the suite (the host's end
    // of a trial read 0.9 ms late in two of three) must not make a majority of three.
    let doc = fx.json(
        "run --env native --workload memcpy:size=4MiB,copies=200 --workload intmix:iterations=5000000 \
         --reps 5 --warmup 0",
    );
    let rows = doc["results"].as_array().unwrap();
    for (w, m) in [("memcpy", "memcpy_time"), ("intmix", "intmix_rate")] {
        let r = rows
            .iter()
            .find(|r| r["workload"].as_str().is_some_and(|x| x.contains(w)) && r["metric"] == m)
            .unwrap();
        assert_eq!(r["clock"], "guest", "native headlines its own timer: {r}");
        assert_eq!(r["other_clock"]["clock"], "host", "{r}");
        let (g, h) = (r["mean"].as_f64().unwrap(), r["other_clock"]["mean"].as_f64().unwrap());
        assert!((h / g - 1.0).abs() < 0.1, "{m}: host {h} vs guest {g}");
    }
    let checks = doc["clock_checks"].as_array().unwrap();
    assert!(
        checks.len() >= 2 && checks.iter().all(|c| c["agree"] == true && c["trials"] == 5),
        "{checks:#?}"
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The times of `reps` bare copies of seed 002's memcpy (10 MB, 10 times),
/// timed in this process, paced and interleaved like the run's trials: one every `every`, in a
/// random order with the copies of a second pair of buffers (the other environment's). The
/// host's own noise at that pace, with nothing of virtperf in it.
fn bare_memcpy_times(reps: usize, every: std::time::Duration) -> Vec<f64> {
    let pair = || {
        let src = vec![0xa5u8; 10_000_000];
        let mut dst = vec![0u8; 10_000_000];
        // Faulted in before any clock (the agent's buffers are touched in its setup too).
        dst.copy_from_slice(&src);
        (src, dst)
    };
    let (mut mine, mut other) = (pair(), pair());
    let mut times = Vec::with_capacity(reps);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while times.len() < reps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (src, dst) = if x & 1 == 0 { (&mine.0, &mut mine.1) } else { (&other.0, &mut other.1) };
        let t = std::time::Instant::now();
        // In a thread of its own, as the agent runs each trial: where a new thread lands beside
        // a busy CPU is part of what a trial meets (beside a hog the same-thread loop's CV was
        // 14.9 % against virtperf's 35.8 %).
        let took = std::thread::scope(|sc| {
            sc.spawn(|| {
                let t = std::time::Instant::now();
                for _ in 0..10 {
                    dst.copy_from_slice(std::hint::black_box(src));
                }
                std::hint::black_box(&mut *dst);
                t.elapsed().as_secs_f64()
            })
            .join()
            .unwrap_or(f64::NAN)
        });
        if x & 1 == 0 {
            times.push(took);
        }
        std::thread::sleep((t + every).saturating_duration_since(std::time::Instant::now()));
    }
    times
}

/// The coefficient of variation (sample standard deviation over the mean).
fn cv_of(v: &[f64]) -> f64 {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0);
    var.sqrt() / mean
}

/// 1.4826 · MAD / median: the CV of a normal sample, which a minority of outliers cannot move.
fn robust_cv(v: &[f64]) -> f64 {
    let median = |mut w: Vec<f64>| {
        w.sort_by(f64::total_cmp);
        let n = w.len();
        if n % 2 == 1 {
            w[n / 2]
        } else {
            (w[n / 2 - 1] + w[n / 2]) / 2.0
        }
    };
    let m = median(v.to_vec());
    1.4826 * median(v.iter().map(|x| (x - m).abs()).collect()) / m
}
