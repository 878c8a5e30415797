//! Start-up and memory: every launch is timed in phases on the host's clock and weighed as the
//! host reads its processes, stored per launch, and said with intervals over launches — against
//! a bare agent the test starts and reads itself, beside the run.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// A `virtperf agent` started by the test, and when its hello's first byte came (ms after spawn).
fn agent() -> (std::process::Child, f64) {
    let t0 = Instant::now();
    let mut c = Command::new(exe())
        .arg("agent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("virtperf agent");
    let mut byte = [0u8; 1];
    c.stdout.as_mut().unwrap().read_exact(&mut byte).expect("the agent's hello");
    (c, t0.elapsed().as_secs_f64() * 1e3)
}

/// What the test measures of a bare `virtperf agent` on the host, by itself: spawn to the hello's
/// first byte (ms), and its PSS once it said it and idled a moment (KiB). Another process maps
/// the same binary meanwhile, as virtperf's orchestrator does beside a native agent (PSS divides
/// the pages they share between them).
fn bare_agent() -> (f64, u64) {
    let (mut companion, _) = agent();
    let (mut c, ms) = agent();
    std::thread::sleep(Duration::from_millis(100));
    let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", c.id())).unwrap();
    let pss = rollup
        .lines()
        .find_map(|l| {
            l.strip_prefix("Pss:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("Pss in smaps_rollup: {rollup}"));
    for p in [&mut c, &mut companion] {
        let _ = p.kill();
        let _ = p.wait();
    }
    (ms, pss)
}

/// Each launch of native, a container, gVisor, QEMU and UML (those this host runs; the others
/// left out with doctor's reason) is stored in phases — prepared, a guest's kernel boot to its
/// init's first line, to the hello, the first answer, the teardown — and with its memory once
/// ready (PSS ≤ RSS, USS ≤ PSS, a cgroup's charge where it has one). The report's ready time is
/// each launch's prepared + started; the summary says "ready in …" per environment. Beside the
/// run, the test starts the agent bare: native's start and PSS must come within 3× of it (or
/// 15 ms: a busy 2-core host), and each figure's distance from it is printed.
pub(crate) fn launches_are_timed_in_phases_and_weighed() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let mut envs = vec!["native", "container"];
    for e in ["gvisor", "qemu", "uml"] {
        match need_root_and_env(e) {
            None => envs.push(e),
            Some(why) => dropped(e, &why),
        }
    }
    let fx = Fixture::new();
    let list: String = envs.iter().map(|e| format!("--env {e} ")).collect();
    let out = fx.ok(&format!("run {list}--workload noop --reps 1 --warmup 0 --launches 2"));
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    let bare: Vec<(f64, u64)> = (0..3).map(|_| bare_agent()).collect();
    let bare_ms = bare.iter().map(|b| b.0).fold(f64::INFINITY, f64::min);
    let bare_pss = bare.iter().map(|b| b.1).min().unwrap();

    let c = rusqlite::Connection::open(&fx.db).unwrap();
    type Row = (i64, f64, f64, Option<f64>, Option<f64>, Option<f64>, Option<i64>, Option<i64>, Option<i64>);
    let rows: Vec<Row> = {
        let mut st = c
            .prepare(
                "SELECT env_idx, start_ms, prepare_ms, boot_ms, first_ms, teardown_ms, pss_kib, uss_kib, rss_kib FROM instances WHERE status = 'ready' ORDER BY id",
            )
            .unwrap();
        st.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    };
    // What each held at the end of its life, read just before its planned teardown.
    // And the host's CPU it used idle after its trials, % of one CPU.
    type End = (i64, Option<i64>, Option<i64>, Option<f64>);
    let ends: Vec<End> = {
        let mut st = c
            .prepare("SELECT env_idx, pss_end_kib, uss_end_kib, idle_cpu_pct FROM instances WHERE status = 'ready' ORDER BY id")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for (env_idx, pss_end, uss_end, idle) in &ends {
        let who = envs[*env_idx as usize];
        let idle = idle.unwrap_or_else(|| panic!("{who}: no idle CPU at the end: {ends:?}"));
        println!("    {who}: idle after its trials {idle:.2} % of one CPU");
        assert!((0.0..=100.0 * cpus).contains(&idle), "{who}: idle {idle} % of one CPU on {cpus} CPUs");
        if who == "native" {
            // An agent blocked on its pipe uses nothing, however busy the host is.
            assert!(idle < 2.0, "native's idle agent used {idle} % of a CPU");
        }
        let (pss, uss) = (
            pss_end.unwrap_or_else(|| panic!("{who}: no PSS at the end: {ends:?}")),
            uss_end.unwrap_or_else(|| panic!("{who}: no USS at the end: {ends:?}")),
        );
        assert!(0 < uss && uss <= pss, "{who}: at the end USS {uss} ≤ PSS {pss} KiB");
    }
    let doc = fx.report();
    for (i, env) in envs.iter().enumerate() {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.0 == i as i64).collect();
        assert_eq!(mine.len(), 2, "{env}: two launches: {rows:?}");
        let guest = matches!(*env, "qemu" | "uml");
        for (_, start, prepare, boot, first, teardown, pss, uss, rss) in &mine {
            let who = format!("{env} launch ({start:.1} ms)");
            assert!(*start > 0.0 && *prepare >= 0.0, "{who}: prepared {prepare}");
            match boot {
                Some(b) => {
                    assert!(guest, "{who}: a kernel boot without a guest kernel: {b}");
                    assert!(*b > 0.0 && b < start, "{who}: the boot {b} ms within spawn to hello");
                }
                None => assert!(!guest, "{who}: the guest's init never said it started"),
            }
            let first = first.expect("the first answer");
            assert!(first > 0.0 && first < 1000.0, "{who}: first answer {first} ms");
            let teardown = teardown.unwrap_or_else(|| panic!("{who}: no teardown time"));
            assert!(teardown > 0.0 && teardown < 15_000.0, "{who}: teardown {teardown} ms");
            let (pss, uss, rss) = (pss.expect("PSS"), uss.expect("USS"), rss.expect("RSS"));
            assert!(0 < uss && uss <= pss && pss <= rss, "{who}: USS {uss} ≤ PSS {pss} ≤ RSS {rss} KiB");
        }
        // The report: ready = prepared + started, per launch, averaged.
        let e = doc["environments"].as_array().unwrap().iter().find(|e| e["name"] == *env).unwrap();
        let s = &e["startup"];
        let want = mine.iter().map(|r| r.1 + r.2).sum::<f64>() / 2.0;
        let got = s["ready_ms"]["mean"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-6 * want, "{env}: ready {got} ms, the launches say {want}");
        assert_eq!(s["launches"], 2);
        let phases: Vec<&str> =
            s["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(phases.contains(&"kernel boot"), guest, "{env}: {phases:?}");
        let pss = s["memory"][0]["mean"].as_f64().unwrap();
        println!(
            "    {env}: ready in {got:.1} ms (spawn to hello {:.1}); PSS once ready {pss:.1} MiB; phases {phases:?}",
            mine.iter().map(|r| r.1).sum::<f64>() / 2.0
        );
        assert!(
            summary.lines().any(|l| l.trim_start().starts_with(env) && l.contains("ready in")),
            "{env}: no start-up line in the summary:\n{summary}"
        );
        if *env == "native" {
            // The bare agent beside the run: how close native's figures come to it.
            let start = mine.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let pss_kib = mine.iter().filter_map(|r| r.6).min().unwrap() as f64;
            println!(
                "    native against the bare agent: spawn to hello {start:.2} ms vs {bare_ms:.2} ms (×{:.2}); PSS {:.0} KiB vs {bare_pss} KiB (×{:.2})",
                start / bare_ms,
                pss_kib,
                pss_kib / bare_pss as f64
            );
            assert!(
                start <= 3.0 * bare_ms || start - bare_ms <= 15.0,
                "native starts {start} ms, the bare agent {bare_ms} ms"
            );
            let r = pss_kib / bare_pss as f64;
            assert!(
                (1.0 / 3.0..=3.0).contains(&r),
                "native's PSS {pss_kib} KiB against the bare agent's {bare_pss} KiB"
            );
        }
    }
    assert!(summary.contains("Start-up (asked for to the agent's hello"), "{summary}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Density: a container swept over 1, 2 and 4 instances, launched twice, gives the slope of the
/// instances' summed PSS over their count (each instance read again once all are up) with its
/// interval — 6 launch blocks, the estimate inside its interval. The reference is the instances'
/// own pages: an added instance brings its USS and shares the rest, so the slope must come within
/// 3× of the mean USS of the 4-instance blocks (measured: 1.25 MiB (0.65–1.85) against 0.83).
pub(crate) fn density_is_the_slope_of_memory_over_instances() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let out = fx.ok("run --env container:instances=[1,2,4] --workload noop --reps 1 --warmup 0 --launches 2");
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    let doc = fx.report();
    let d = doc["density"].as_array().unwrap_or_else(|| panic!("no density: {doc:#}"));
    assert_eq!(d.len(), 1, "{d:?}");
    let d = &d[0];
    assert_eq!(d["group"], "container");
    assert_eq!(d["points"].as_array().unwrap().len(), 6, "two launch blocks of each count: {d}");
    let slope = d["marginal_mib"].as_f64().unwrap();
    let [lo, hi] = [d["ci95"][0].as_f64().unwrap(), d["ci95"][1].as_f64().unwrap()];
    assert!(lo <= slope && slope <= hi, "{d}");
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let uss: f64 = c
        .query_row(
            "SELECT avg(i.uss_kib) / 1024.0 FROM instances i JOIN environments e ON e.idx = i.env_idx AND e.run_id = i.run_id WHERE e.instances = 4 AND i.status = 'ready'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    println!("    container: {slope:.3} MiB per added instance ({lo:.3}–{hi:.3}); USS at N = 4 {uss:.3} MiB (×{:.2})", slope / uss);
    assert!((uss / 3.0..=uss * 3.0).contains(&slope), "the slope {slope} MiB against the USS {uss} MiB");
    assert!(
        summary.contains("Memory per added instance") && summary.contains("per added instance"),
        "{summary}"
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Four bare `virtperf agent`s started at once by the test: spawn of the first to the last
/// hello's first byte, ms.
fn bare_agents_together(n: usize) -> f64 {
    let t0 = Instant::now();
    let mut kids: Vec<std::process::Child> = (0..n)
        .map(|_| {
            Command::new(exe())
                .arg("agent")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("virtperf agent")
        })
        .collect();
    let mut last = 0.0f64;
    std::thread::scope(|s| {
        let hs: Vec<_> = kids
            .iter_mut()
            .map(|c| {
                let out = c.stdout.as_mut().unwrap();
                s.spawn(move || {
                    let mut byte = [0u8; 1];
                    out.read_exact(&mut byte).expect("the agent's hello");
                    t0.elapsed().as_secs_f64() * 1e3
                })
            })
            .collect();
        for h in hs {
            last = last.max(h.join().unwrap());
        }
    });
    for c in &mut kids {
        let _ = c.kill();
        let _ = c.wait();
    }
    last
}

/// `start = "together"`: the instances of a block are asked for at once, a thread each. Each is
/// stored as a launch of its own (ready from the moment all were asked for, `together` = 4, its
/// share of the host's CPU) and the start as a whole (4 asked, 4 ready, the makespan: the last
/// hello); the report gives the makespan, the instances' p50 ≤ p99 ≤ max and one alone beside
/// it. Native's makespan is held against four bare agents the test starts at once beside the run
/// (within 3× or 25 ms). Then a start where the third launch fails (a failpoint): the failure
/// names the instance, the three that came up are stopped (their teardown stored), the next
/// attempt starts all four together and the trial runs; nothing is left behind.
pub(crate) fn started_together_each_is_timed_and_a_failed_one_stops_the_others() -> Outcome {
    let mut envs = vec!["native"];
    match need_root_and_env("container") {
        None => envs.push("container"),
        Some(why) => dropped("container", &why),
    }
    let fx = Fixture::new();
    let list: String = envs.iter().map(|e| format!("--env {e}:instances=[1,4],start=together ")).collect();
    let out = fx.ok(&format!("run {list}--workload noop --reps 1 --warmup 0 --launches 2"));
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    let bare = (0..3).map(|_| bare_agents_together(4)).fold(f64::INFINITY, f64::min);
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let doc = fx.report();
    for (i, env) in envs.iter().enumerate() {
        let (alone, four) = (2 * i as i64, 2 * i as i64 + 1);
        let starts: Vec<(i64, i64, i64, f64, Option<f64>)> = {
            let mut st = c
                .prepare("SELECT block, asked, ready, makespan_ms, host_cpu_ms FROM starts_together WHERE env_idx = ?1 ORDER BY id")
                .unwrap();
            st.query_map([four], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(starts.len(), 2, "{env}: two starts of four: {starts:?}");
        for (block, asked, ready, makespan, cpu) in &starts {
            assert_eq!((*asked, *ready), (4, 4), "{env}");
            let last: f64 = c
                .query_row(
                    "SELECT max(prepare_ms + start_ms) FROM instances WHERE env_idx = ?1 AND block = ?2 AND status = 'ready' AND together = 4",
                    [four, *block],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(
                (makespan - last).abs() < 0.01,
                "{env}: the makespan {makespan} ms is the last hello's, {last} ms"
            );
            assert!(cpu.is_some_and(|c| c > 0.0), "{env}: the host's CPU over the start: {cpu:?}");
        }
        let shares: Vec<(Option<i64>, Option<f64>)> = {
            let mut st = c
                .prepare(
                    "SELECT together, host_cpu_ms FROM instances WHERE env_idx = ?1 AND status = 'ready'",
                )
                .unwrap();
            st.query_map([four], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
        };
        assert_eq!(shares.len(), 8, "{env}: {shares:?}");
        assert!(shares.iter().all(|s| s.0 == Some(4) && s.1.is_some_and(|c| c > 0.0)), "{env}: {shares:?}");
        let alone_n: i64 = c
            .query_row(
                "SELECT count(*) FROM instances WHERE env_idx = ?1 AND together = 1 AND host_cpu_ms > 0",
                [alone],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(alone_n, 2, "{env}: one instance started together is one alone, its CPU its own");
        let t = doc["together"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["env"] == format!("{env} [instances=4]")))
            .unwrap_or_else(|| panic!("{env}: no start together in the report: {:#}", doc["together"]));
        let r = &t["ready_ms"];
        let (p50, p99, max) =
            (r["p50"].as_f64().unwrap(), r["p99"].as_f64().unwrap(), r["max"].as_f64().unwrap());
        assert!(p50 <= p99 && p99 <= max && r["n"] == 8, "{env}: {t}");
        let m = t["makespan_ms"]["mean"].as_f64().unwrap();
        let alone_ms = t["alone_ready_ms"].as_f64().expect("one alone beside it");
        println!(
            "    {env}: 4 at once all ready in {m:.1} ms (p50 {p50:.1}, max {max:.1}; one alone {alone_ms:.1} ms); host CPU {:.1} ms per instance",
            t["host_cpu_ms"]["mean"].as_f64().unwrap_or(f64::NAN)
        );
        if *env == "native" {
            println!(
                "    native 4 at once: {m:.1} ms against four bare agents at once {bare:.1} ms (×{:.2})",
                m / bare
            );
            assert!(m <= 3.0 * bare || m - bare <= 25.0, "native's 4 at once {m} ms, bare {bare} ms");
        }
    }
    assert!(summary.contains("Started together") && summary.contains("4 at once: all ready in"), "{summary}");
    fx.assert_no_leftovers();

    // The third launch of a start of four fails: the others are stopped, all four start again.
    let fx = Fixture::new().with_var("VIRTPERF_FAILPOINTS", "launch-start=2*off->1*return");
    // The trial launches again after a failed launch, as it does for one alone.
    let out = fx.ok("run --env native:instances=4,start=together --workload noop --reps 1 --warmup 0 --json");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (run["trials"]["ok"].as_u64(), run["trials"]["failed"].as_u64()),
        (Some(1), Some(0)),
        "{run:#}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    // The third thread to reach the failpoint: which instance that is, the threads decide.
    assert!(
        (1..=4).any(|k| said.contains(&format!("instance {k} of 4 started together: "))),
        "the failure names its instance: {said}"
    );
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let starts: Vec<(i64, i64, Option<String>)> = {
        let mut st = c.prepare("SELECT asked, ready, failed FROM starts_together ORDER BY id").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!((starts[0].0, starts[0].1), (4, 3), "{starts:?}");
    let why = starts[0].2.as_deref().unwrap_or_default();
    assert!(why.contains("of 4 started together") && why.contains("failpoint `launch-start`"), "{why}");
    assert_eq!((starts[1].0, starts[1].1, starts[1].2.as_deref()), (4, 4, None), "{starts:?}");
    let (ready, failed, torn): (i64, i64, i64) = c
        .query_row(
            "SELECT sum(status = 'ready'), sum(status = 'failed'), sum(status = 'ready' AND teardown_ms IS NOT NULL) FROM instances",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((ready, failed), (7, 1), "three, then four");
    assert_eq!(torn, 7, "the three stopped after the failure, and the four at the end, each timed");
    fx.assert_no_leftovers();
    Outcome::Pass
}
