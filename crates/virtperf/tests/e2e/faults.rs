//! e2e: faults: hung and killed agents, signals, kill -9 and the sweep, silent peers.

use crate::util::*;

pub(crate) fn hung_agent_fails_trial_at_deadline_and_run_goes_on() -> Outcome {
    let fx = Fixture::new();
    let t0 = Instant::now();
    let out = fx.vp("run --env native --workload sleep:duration=30s --workload noop --timeout 400ms \
         --reps 2 --warmup 0 --order interleaved --json");
    assert!(t0.elapsed().as_secs() < 20, "the deadline was not enforced");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["trials"]["failed"], 2);
    assert_eq!(run["trials"]["ok"], 2, "noop trials still ran after each hung one");
    let reason = run["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("no answer from the agent within"), "{reason}");
    assert!(run["environments"][0]["launches"].as_u64().unwrap() >= 3, "the hung agent was replaced");
    fx.assert_no_leftovers();
    Outcome::Pass
}

pub(crate) fn an_agent_killed_mid_trial_costs_one_attempt_then_one_trial() -> Outcome {
    // Killed once: the trial runs again at once on a fresh agent, its first attempt kept and said.
    let fx = Fixture::new();
    let child = fx.spawn("run --env native --workload sleep:duration=3s --reps 2 --warmup 0 --json");
    let agent = wait_for(|| agents_of(child.id()).into_iter().next(), 10.0).expect("an agent appeared");
    std::thread::sleep(std::time::Duration::from_millis(500));
    kill(agent, 9);
    let out = child.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("an instance died under the trial") && stderr.contains("runs once more"),
        "{stderr}"
    );
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (run["trials"]["failed"].as_u64(), run["trials"]["ok"].as_u64()),
        (Some(0), Some(2)),
        "{run:#}"
    );
    let again = &run["retried"][0];
    assert_eq!((again["status"].as_str(), again["count"].as_u64()), (Some("failed"), Some(1)), "{run:#}");
    assert!(again["reason"].as_str().unwrap().contains("exited"), "{again}");
    fx.assert_no_leftovers();

    // Killed twice, the fresh one too: only that trial fails, the run goes on.
    let fx = Fixture::new();
    let child = fx.spawn("run --env native --workload sleep:duration=3s --reps 2 --warmup 0 --json");
    let first = wait_for(|| agents_of(child.id()).into_iter().next(), 10.0).expect("an agent appeared");
    std::thread::sleep(std::time::Duration::from_millis(500));
    kill(first, 9);
    let second =
        wait_for(|| agents_of(child.id()).into_iter().find(|a| *a != first), 10.0).expect("a fresh agent");
    std::thread::sleep(std::time::Duration::from_millis(500));
    kill(second, 9);
    let out = child.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (run["trials"]["failed"].as_u64(), run["trials"]["ok"].as_u64()),
        (Some(1), Some(1)),
        "{run:#}"
    );
    let reason = run["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("exited"), "{reason}");
    assert_eq!(run["retried"][0]["count"].as_u64(), Some(1), "{run:#}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The agent of `run` that is using the CPU now (its user time grows over 50 ms): the one mid-trial
/// of a CPU-bound workload.
fn busy_agent(run: u32) -> Option<u32> {
    let utime = |p: u32| {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        s[s.rfind(')')? + 2..].split_whitespace().nth(11)?.parse::<u64>().ok()
    };
    let agents = agents_of(run);
    let before: Vec<Option<u64>> = agents.iter().map(|a| utime(*a)).collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    agents.iter().zip(before).find(|(a, b)| utime(**a).zip(*b).is_some_and(|(n, o)| n > o)).map(|(a, _)| *a)
}

/// The agent of `run` one of whose threads is in a sleep system call now.
fn sleeping_agent(run: u32) -> Option<u32> {
    agents_of(run).into_iter().find(|a| {
        std::fs::read_dir(format!("/proc/{a}/task")).into_iter().flatten().flatten().any(|t| {
            std::fs::read_to_string(t.path().join("syscall"))
                .ok()
                .and_then(|s| s.split_whitespace().next().map(str::to_string))
                .is_some_and(|n| n == "230" || n == "35")
        })
    })
}

/// Stalls made on purpose: an environment's agent stopped (SIGSTOP) for 3 s mid-trial, then
/// continued. (1) A CPU-bound trial of 200 ms spread over 3.2 s, with no planned time to say it
/// stalled: its pair lies far outside the others (×16 against ±2 %), is set apart, and the ratio
/// of the rest keeps its narrow interval, the set-apart pair said beside it. (2) A 300 ms sleep
/// that took 3 s (both agents stopped: the one mid-trial stalls): a stall by its planned time,
/// set apart and said in the stall's caveat.
pub(crate) fn a_stall_made_on_purpose_is_set_apart_and_said() -> Outcome {
    let fx = Fixture::new();
    // Idle neighbours left running: virtperf's own freezing would resume a stopped agent.
    let exp = |name: &str, workload: &str| {
        fx.file(
            &format!("{name}.toml"),
            &format!(
                "name = \"{name}\"\nreps = 2\nlaunches = 3\nwarmup = 0\nfreeze_idle = false\n\
                 [[env]]\nkind = \"native\"\n[[env]]\nkind = \"native\"\nname = \"b\"\n[[workload]]\n{workload}\n"
            ),
        )
    };
    let pause = |child: &Spawned, after_ok: i64, busy: bool| {
        // Mid-launch (a launch is 4 trials: 2 environments × 2 repetitions), so that the agents
        // paused are the ones the next trial runs in, not ones about to be replaced.
        wait_for(|| (count_trials(&fx.db, "ok") >= after_ok).then_some(()), 60.0)
            .expect("trials were being stored");
        // The CPU-bound one's busy agent; a sleeping one's cannot be told apart, so every agent
        // (the one mid-trial stalls, the idle one is only late to its next request).
        let agents = if busy {
            vec![wait_for(|| busy_agent(child.id()), 10.0).expect("an agent mid-trial")]
        } else {
            // The agent inside its trial's sleep (a thread in clock_nanosleep, x86-64 230, or
            // nanosleep, 35): before the sleep, the host measures its round trip to the agent, and
            // a pause there only delays the trial (the run went on 3 s later, its trial took
            // 300 ms).
            vec![wait_for(|| sleeping_agent(child.id()), 20.0).expect("an agent in its sleep")]
        };
        for a in &agents {
            kill(*a, libc::SIGSTOP);
        }
        std::thread::sleep(std::time::Duration::from_secs(3));
        for a in &agents {
            kill(*a, libc::SIGCONT);
        }
    };
    let headline = |run: &serde_json::Value, metric: &str| {
        run["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["environment"] == "b" && r["metric"] == metric)
            .cloned()
            .unwrap_or_else(|| panic!("b's {metric}: {run}"))
    };

    // (1) Far outside the others.
    let child = fx.spawn(&format!("run {} --json", exp("burst", "kind = \"cpu\"").display()));
    pause(&child, 1 + count_trials(&fx.db, "ok"), true);
    let out = child.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = headline(&run, "cpu_rate");
    let o = &row["overhead"];
    let sa = &o["set_apart"];
    // Set apart as far outside the others — or, where a host-wide slowdown touched one side of
    // it (beside load that comes and goes, the detector saw the pause as one), as a one-sided
    // burst: either way out of the ratio.
    assert_eq!(sa["of"].as_u64(), Some(6), "{o}");
    assert!(sa["beyond"].as_u64().unwrap_or(0) + sa["burst"].as_u64().unwrap_or(0) >= 1, "{o}");
    let (l, h) = (o["ci"][0].as_f64().unwrap(), o["ci"][1].as_f64().unwrap());
    let with = sa["ratio_with"].as_f64().unwrap();
    println!(
        "    cpu, paused 3 s mid-trial: b/native ×{:.4} [{l:.4}, {h:.4}] of 5 pairs; with the paused one ×{with:.3} (set apart: {}); {}",
        o["ratio"].as_f64().unwrap(),
        sa["ratios"],
        row["verdict"]["phrase"]
    );
    // The pause would have moved the answer out of the rest's interval, and is taken out of it:
    // what is left is nearer no difference than what the pause made of it.
    // Beside load that comes and goes, the rest's pairs spread too (a CPU hog in one trial of a
    // pair and not the other): where their interval is wider than the pause moved the answer,
    // the load, measured beside the pause, hides it there, and only what the pause did to its own
    // pair is checked.
    let ratio = o["ratio"].as_f64().unwrap();
    let (shift, half) = ((with / ratio).ln().abs(), (h / l).ln() / 2.0);
    if half < shift {
        assert!(!(l..=h).contains(&with), "with the pause, ×{with:.3}, lies outside the rest's [{l}, {h}]");
    } else {
        println!(
            "    the rest's interval (±{:.0} % in log) is wider than the pause moved the answer ({:.0} %): the load around the run spread it; not checked against it",
            half * 100.0,
            shift * 100.0
        );
    }
    assert!(ratio.ln().abs() < with.ln().abs(), "the rest ×{ratio:.3} is nearer 1 than ×{with:.3}");
    let paused = sa["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_f64())
        .find(|r| !(1.0 / 3.0..=3.0).contains(r));
    assert!(paused.is_some(), "the paused pair is among those set apart: {}", sa["ratios"]);
    let text = fx.text("report");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("set apart: b / cpu: 1 of 6 pairs set apart (far outside the others")
            || flat.contains("had one alone, set apart from")
            || flat.contains("had one trial inside and not the other, set apart from"),
        "{text}"
    );

    // (2) A stall by its planned time.
    let child =
        fx.spawn(&format!("run {} --json", exp("stall", "kind = \"sleep\"\nduration = \"300ms\"").display()));
    pause(&child, 5 + count_trials(&fx.db, "ok"), false);
    let out = child.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stalls = run["stalls"].as_array().cloned().unwrap_or_default();
    assert_eq!(stalls.len(), 1, "one cell stalled: {}", run["stalls"]);
    assert!(stalls[0]["longest_ms"].as_f64().is_some_and(|ms| ms > 2000.0), "{}", stalls[0]);
    let row = headline(&run, "sleep_overshoot");
    let sa = &row["overhead"]["set_apart"];
    assert_eq!((sa["stalled"].as_u64(), sa["of"].as_u64()), (Some(1), Some(6)), "{}", row["overhead"]);
    assert!(
        row["verdict"]["set_apart"].as_str().is_some_and(|w| w.contains(" of 6 pairs set apart (stalled")),
        "{}",
        row["verdict"]
    );
    println!("    sleep 300 ms, paused 3 s: {}; {}", row["verdict"]["phrase"], row["verdict"]["set_apart"]);
    let text = fx.text("report");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("stalled: ")
            && (flat.contains("its ratio is of the rest: ")
                || flat.contains("the ratios against it are of the rest: b's ")),
        "{text}"
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}

pub(crate) fn sigterm_interrupts_then_resume_finishes_exactly_the_rest() -> Outcome {
    let fx = Fixture::new();
    let child =
        fx.spawn("run --env native --env native:name=b --workload sleep:duration=40ms --reps 40 --warmup 1");
    let pid = child.id();
    wait_for(|| (count_trials(&fx.db, "ok") >= 10).then_some(()), 20.0).expect("trials were being stored");
    kill(pid, 15);
    let out = child.wait();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--resume 1"));
    let ok_before = count_trials(&fx.db, "ok");
    let pending = trials_with(&fx.db, "pending");
    assert!(ok_before >= 10 && !pending.is_empty(), "ok {ok_before}, pending {}", pending.len());
    assert_eq!(run_status(&fx.db), "interrupted");
    fx.assert_no_leftovers();
    let done = ok_trials(&fx.db);
    fx.ok("run --resume 1 --json");
    assert_resume_ran_exactly(&done, &pending, &fx.db);
    assert_eq!(count_trials(&fx.db, "ok"), 2 * 41, "every planned trial exactly once");
    assert_eq!(count_trials(&fx.db, "pending"), 0);
    assert_eq!(run_status(&fx.db), "completed");
    let again = fx.vp("run --resume 1");
    assert_eq!(again.status.code(), Some(2), "a completed run cannot be resumed");
    fx.assert_no_leftovers();

    // Ctrl-C (SIGINT), then a hang-up (SIGHUP) while the first is being handled: the same clean
    // end — exit 130, the run interrupted and resumable, nothing left.
    let child = fx.spawn("run --env native --env native:name=b --workload sleep:duration=40ms --reps 40");
    let pid = child.id();
    wait_for(|| (count_trials(&fx.db, "ok") >= 2 * 41 + 5).then_some(()), 20.0).expect("run 2 stored trials");
    kill(pid, libc::SIGINT);
    std::thread::sleep(std::time::Duration::from_millis(5));
    kill(pid, libc::SIGHUP);
    let out = child.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--resume 2"), "{err}");
    fx.assert_no_leftovers();
    // kill -9 of the resume itself: the next resume sweeps what it left and finishes the rest.
    let ok_now = count_trials(&fx.db, "ok");
    let child = fx.spawn("run --resume 2");
    let pid = child.id();
    wait_for(|| (count_trials(&fx.db, "ok") >= ok_now + 3).then_some(()), 20.0)
        .expect("the resume stored trials");
    kill(pid, 9);
    let _ = child.wait();
    let (done, pending) = (ok_trials(&fx.db), trials_with(&fx.db, "pending"));
    assert!(!pending.is_empty(), "killed before the end");
    fx.ok("run --resume 2");
    assert_resume_ran_exactly(&done, &pending, &fx.db);
    assert_eq!(count_trials(&fx.db, "pending"), 0);
    fx.assert_no_leftovers();
    Outcome::Pass
}

pub(crate) fn kill9_leftovers_are_swept_by_next_start() -> Outcome {
    let fx = Fixture::new();
    let use_container = match need_root_and_env("container") {
        None => true,
        Some(why) => {
            dropped("the container part (the run killed is a native one)", &why);
            false
        }
    };
    let kind = if use_container { "container" } else { "native" };
    let child = fx.spawn(&format!("run --env {kind} --workload sleep:duration=60s --reps 1 --warmup 0"));
    let pid = child.id();
    // Wait until the trial is running: the agent said hello and a run request went out.
    wait_for(
        || {
            ledger_files(&fx.state)
                .into_iter()
                .find(|l| std::fs::read_to_string(l).is_ok_and(|s| s.contains("\"process\"")))
        },
        20.0,
    )
    .expect("a ledger with a process");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let ledger = std::fs::read_to_string(&ledger_files(&fx.state)[0]).unwrap();
    kill(pid, 9);
    let _ = child.wait();
    let leftovers_before = leftover_things(&fx.state);
    assert!(!leftovers_before.is_empty(), "kill -9 left something for the sweep to find: {ledger}");
    let out = fx.ok("run --env native --workload noop --reps 1");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("leftover"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}

pub(crate) fn kill9_during_network_trial_lab_is_swept() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let before = root_netns_snapshot();
    let child = fx.spawn("run --env native --workload tcp_rr:duration=60s --reps 1 --warmup 0");
    let pid = child.id();
    wait_for(|| (lab_namespaces().len() >= 3).then_some(()), 20.0).expect("the lab's namespaces");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill(pid, 9);
    let _ = child.wait();
    assert!(!lab_namespaces().is_empty(), "kill -9 left the lab for the sweep to find");
    fx.sweep();
    assert_eq!(before, root_netns_snapshot(), "the root namespace changed");
    Outcome::Pass
}

/// One instance killed (kill -9 of its agent) costs only the trial in flight, which runs once
/// more on a relaunched instance; the run goes on, and every instance is gone at the end.
pub(crate) fn one_dead_instance_costs_only_an_attempt() -> Outcome {
    let fx = Fixture::new();
    let child = fx.spawn("run --env native:instances=3 --workload sleep:duration=2s --reps 3 --warmup 0");
    let pid = child.id();
    // The run's agents are its children; kill one of them during the first trial.
    let agents = wait_for(|| Some(agents_of(pid)).filter(|c| c.len() >= 3), 10.0).expect("three agents");
    std::thread::sleep(std::time::Duration::from_millis(700));
    kill(agents[1], 9);
    let out = child.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count_trials(&fx.db, "failed"), 0, "the trial in flight ran again");
    assert_eq!(count_trials(&fx.db, "ok"), 3);
    let again = rusqlite::Connection::open(&fx.db)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM retried", [], |r| r.get::<_, i64>(0))
        .unwrap();
    assert_eq!(again, 1, "its first attempt is kept");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The network namespace a process is in, by `ip netns identify`.
fn netns_of(pid: u32) -> String {
    let out =
        std::process::Command::new("ip").args(["netns", "identify", &pid.to_string()]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A tester that stops answering (SIGSTOP) ends the trial at its deadline with a reason, and the
/// run goes on; then SIGTERM during a network trial removes the whole lab.
pub(crate) fn silent_peer_ends_trial_at_deadline_sigterm_removes_lab() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let before = root_netns_snapshot();
    let t0 = std::time::Instant::now();
    let child = fx.spawn(
        "run --env native --workload tcp_stream:duration=3s --reps 2 --warmup 0 \
         --timeout 6s --order sequential",
    );
    let pid = child.id();
    // The tester agent (`virtperf agent` in the lab's `-t` namespace), not a helper the lab runs
    // there for a moment (`ip netns exec …`): stopping one of those stops nothing.
    let tester = wait_for(
        || children_of(pid).into_iter().find(|c| is_agent(*c) && netns_of(*c).ends_with("-t")),
        20.0,
    )
    .expect("the tester agent");
    std::thread::sleep(std::time::Duration::from_millis(800));
    kill(tester, libc::SIGSTOP);
    let out = child.wait();
    let secs = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(secs < 30.0, "the run took {secs:.1}s: the deadline did not end the trial");
    assert_eq!(count_trials(&fx.db, "failed"), 1, "{stderr}");
    assert_eq!(count_trials(&fx.db, "ok"), 1, "the relaunched tester served the next trial: {stderr}");
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let reason: String =
        c.query_row("SELECT reason FROM trials WHERE status = 'failed'", [], |r| r.get(0)).unwrap();
    assert!(reason.contains("no answer") && reason.contains("other side"), "{reason}");
    fx.assert_no_leftovers();

    let child = fx.spawn("run --env native --workload tcp_stream:duration=30s --reps 1 --warmup 0");
    let pid = child.id();
    wait_for(|| (lab_namespaces().len() >= 3).then_some(()), 20.0).expect("the lab's namespaces");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill(pid, libc::SIGTERM);
    let out = child.wait();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    fx.assert_no_leftovers();
    assert_eq!(before, root_netns_snapshot(), "the root namespace changed");
    Outcome::Pass
}

/// A UDP sender still sending at its trial's deadline (a 10 s flow, 3 s allowed: as gVisor's
/// MTU-sized sender went on past 30 s in an explain run) is stopped with the trial: the tester's
/// server then lets go of its port, and the next trial binds it. Before, the run that missed its
/// deadline was forgotten unstopped, and every following trial on that tester failed with
/// "Address already in use".
pub(crate) fn a_sender_past_its_deadline_leaves_the_testers_port_free() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let out = fx.vp("run --env native --workload udp_stream:duration=10s,frame_size=1518,name=long \
         --workload udp_stream:duration=1s,frame_size=1518,name=short --reps 2 --warmup 0 \
         --timeout 3s --order interleaved");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let failed: Vec<(String, String)> = c
        .prepare(
            "SELECT c.label, t.reason FROM trials t JOIN cases c ON c.idx = t.case_idx \
             WHERE t.status = 'failed' ORDER BY t.seq",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}\n{stderr}");
    for (case, why) in &failed {
        assert!(case == "long" && why.contains("no answer"), "{failed:?}");
    }
    assert_eq!(count_trials(&fx.db, "ok"), 2, "the short flows after each long one bound the port: {stderr}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The database's disk fills up in the middle of a run: the trial that cannot be stored stops
/// the run with a message naming the database, the full disk and the resume command (exit 1);
/// the trials stored before stay, the run is marked interrupted, nothing is left behind; with
/// space made, `--resume` runs exactly the trials left.
pub(crate) fn database_disk_full_stops_the_run_resumably() -> Outcome {
    if let Some(why) = need_tool("root") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let small = fx.path("small");
    std::fs::create_dir(&small).unwrap();
    let Some(tmpfs) = Tmpfs::mount(&small, "size=360k") else {
        return skip("mount", "cannot mount a tmpfs here (mount -t tmpfs failed)");
    };
    let db = small.join("r.db");
    let args =
        ["run", "--env", "native", "--workload", "timer:duration=20ms", "--reps", "300", "--warmup", "0"];
    let out = vp(&[&args[..], &["--db", db.to_str().unwrap()]].concat(), &fx.env());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("database or disk is full")
            && err.contains("free space on the full disk")
            && err.contains(&format!("virtperf run --resume 1 --db {}", db.display())),
        "{err}"
    );
    assert_eq!(run_status(&db), "interrupted");
    let before = ok_trials(&db);
    let pending = trials_with(&db, "pending");
    assert!(
        !pending.is_empty() && before.len() + pending.len() == 300,
        "{} ok, {} pending",
        before.len(),
        pending.len()
    );
    fx.assert_no_leftovers();
    // Space made: the run goes on from where it stopped.
    tmpfs.resize("64m");
    let out = vp(&["run", "--resume", "1", "--db", db.to_str().unwrap()], &fx.env());
    assert_ok(&out, "run --resume 1");
    assert_resume_ran_exactly(&before, &pending, &db);
    assert_eq!(run_status(&db), "completed");
    fx.assert_no_leftovers();
    println!(
        "    the disk filled after {} of 300 trials; the resume ran the other {}",
        before.len(),
        pending.len()
    );
    Outcome::Pass
}

/// kill -9 while the lab is being built — its first namespace made, the others not yet: the next
/// start sweeps what exists (the ledger recorded each namespace before it was made), and the root
/// namespace is as it was.
pub(crate) fn kill9_while_the_lab_is_built_is_swept() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let before = root_netns_snapshot();
    let child =
        fx.spawn("run --env native --env native:name=b --workload tcp_rr:duration=5s --reps 1 --warmup 0");
    let mine = format!("vp{}-", child.id());
    let made = || lab_namespaces().into_iter().filter(|n| n.starts_with(&mine)).count();
    let t0 = Instant::now();
    let mut at_kill = 0;
    while t0.elapsed() < Duration::from_secs(30) && at_kill == 0 {
        at_kill = made();
        if at_kill == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    kill(child.id(), 9);
    let _ = child.wait();
    assert!(at_kill >= 1, "no namespace of the lab appeared within 30 s");
    let left = made();
    assert!(left >= 1, "the kill left no namespace of the lab: nothing for the sweep to do");
    fx.sweep();
    assert_eq!(made(), 0, "the lab's namespaces outlived the next start");
    assert_eq!(before, root_netns_snapshot(), "the root namespace changed");
    println!("    killed with {at_kill} of the lab's 4 namespaces seen ({left} left after the kill); the next start swept them");
    Outcome::Pass
}

/// The state directory's disk is full when a run starts: the run stops at once (exit 1) naming
/// the directory, the full disk and the resume command; nothing of it is left there, the run is
/// marked interrupted; with space made `--resume` runs all of it.
pub(crate) fn state_directory_disk_full_stops_the_run_resumably() -> Outcome {
    if let Some(why) = need_tool("root") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    std::fs::create_dir(&fx.state).unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&fx.state, "size=64k,mode=755") else {
        return skip("mount", "cannot mount a tmpfs here (mount -t tmpfs failed)");
    };
    let fill = fx.state.join("fill");
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", fill.display()))
        .args(["bs=1k", "count=64"])
        .output();
    let out = fx.vp("run --env native --workload memcpy --reps 3 --warmup 0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("state directory {}", fx.state.display()))
            && err.contains("No space left")
            && err.contains(&format!("virtperf run --resume 1 --db {}", fx.db.display())),
        "{err}"
    );
    assert_eq!(run_status(&fx.db), "interrupted");
    let pending = trials_with(&fx.db, "pending");
    assert_eq!(pending.len(), 3, "it stopped before its first trial: all 3 are pending");
    assert_eq!(count_trials(&fx.db, "ok") + count_trials(&fx.db, "failed"), 0, "no trial ran");
    std::fs::remove_file(&fill).unwrap();
    fx.ok("run --resume 1");
    assert_resume_ran_exactly(&[], &pending, &fx.db);
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// kill -9 in the middle of a real image build (`virtperf image build`, the initramfs path): its
/// working directory (`images/.HASH.PID`) is left behind; the next build removes it and builds.
/// The build is slowed by a 1 GiB sparse "kernel" (hashed, then read, with the working directory
/// already made): seconds to kill in rather than the 0.2 s of a real one. The next build takes a
/// small ELF as its kernel (it is not booted here: the sweep and the build are what is tested).
pub(crate) fn kill9_during_an_image_build_is_swept() -> Outcome {
    let fx = Fixture::new();
    let cache = fx.path("cache");
    let fx = fx.with_var("VIRTPERF_CACHE", &cache.to_string_lossy());
    let slow = fx.path("slow-kernel");
    std::fs::File::create(&slow).and_then(|f| f.set_len(1 << 30)).expect("a sparse file");
    let slow = slow.to_string_lossy().into_owned();
    let child = vp_spawn(&["image", "build", "--kernel", &slow], &fx.env());
    let unfinished = || names_in(&cache.join("images"), |n| n.starts_with('.'));
    let t0 = Instant::now();
    while unfinished().is_empty() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = child.id();
    kill(pid, 9);
    let out = child.wait();
    let left = unfinished();
    assert_eq!(left.len(), 1, "one working directory of the killed build: {left:?} ({:?})", out.status);
    let name = left[0].clone();
    assert!(name.ends_with(&format!(".{pid}")), "{name} is not the killed build's ({pid})");
    let ok = fx.bare("image build --kernel /bin/true --json");
    assert_ok(&ok, "image build --kernel /bin/true");
    assert!(unfinished().is_empty(), "the dead build's {name} outlived the next build: {:?}", unfinished());
    let built = json_of(&ok, "image build");
    assert!(
        Path::new(built["initramfs"].as_str().unwrap_or("")).is_file(),
        "the next build made its image: {built}"
    );
    println!(
        "    killed after {:.2} s with {name} made; the next build removed it and built",
        t0.elapsed().as_secs_f64()
    );
    Outcome::Pass
}

/// kill -9 while a guest kernel package downloads (`image build` in an empty cache): apt-get
/// ends with virtperf, and no truncated `.deb` is left under its final name — one was, and every
/// later build trusted it (a killed `apt-get download` writes its file in place: 63 of ~150 MB
/// measured). The partial download stays in its working directory, which the next start sweeps.
pub(crate) fn kill9_during_a_kernel_download_leaves_no_truncated_package() -> Outcome {
    if !has("apt-get") || !apt_candidate("linux-image-amd64") {
        // The guest image needs it: where QEMU guests are required, so is it.
        return skip(
            "qemu",
            "apt offers no linux-image-amd64 here (a Debian host with its mirror is needed)",
        );
    }
    let fx = Fixture::new();
    let cache = fx.path("cache");
    let fx = fx.with_var("VIRTPERF_CACHE", &cache.to_string_lossy());
    let debs = cache.join("debs");
    let in_debs = |pred: &dyn Fn(&str) -> bool| names_in(&debs, pred);
    // The bytes downloaded so far into `.dl-PID` (None: no such directory yet).
    let downloaded = |pid: u32| -> Option<u64> {
        let dir = std::fs::read_dir(debs.join(format!(".dl-{pid}"))).ok()?;
        Some(dir.flatten().map(|f| f.metadata().map(|m| m.len()).unwrap_or(0)).max().unwrap_or(0))
    };
    let whole = || in_debs(&|n| n.ends_with(".deb"));
    // Started, and killed once it has downloaded `at_least` bytes (or its package is whole).
    let start_and_kill = |at_least: u64| -> (u32, Option<u64>, Vec<u32>) {
        let child = vp_spawn(&["image", "build"], &fx.env());
        let pid = child.id();
        let t0 = Instant::now();
        let got = loop {
            let got = downloaded(pid);
            if got.is_some_and(|b| b >= at_least)
                || !whole().is_empty()
                || t0.elapsed() > Duration::from_secs(120)
            {
                break got;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let below = descendants(pid);
        kill(pid, 9);
        let _ = child.wait();
        (pid, got, below)
    };
    let (pid, got, below) = start_and_kill(1 << 20);
    let Some(bytes) = got.filter(|_| whole().is_empty()) else {
        dropped(
            "the kill during the download",
            &format!("it ended before it could be killed ({:?})", whole()),
        );
        return Outcome::Pass;
    };
    // It was killed in the middle of the download: bytes had arrived, apt-get ran below it.
    assert!(
        bytes >= 1 << 20,
        "killed after 120 s with {bytes} bytes of the package downloaded: the download did not go on"
    );
    assert!(!below.is_empty(), "no download process ran below virtperf when it was killed");
    // apt-get and its download methods end with virtperf.
    let gone = |p: &u32| !Path::new(&format!("/proc/{p}")).exists();
    let ended = wait_for(|| below.iter().all(gone).then_some(()), 5.0);
    assert!(
        ended.is_some(),
        "virtperf's download processes outlived it: {:?}",
        below.iter().filter(|p| !gone(p)).collect::<Vec<_>>()
    );
    assert!(whole().is_empty(), "a truncated package was left under its final name: {:?}", whole());
    let dead = format!(".dl-{pid}");
    assert_eq!(
        in_debs(&|n| n.starts_with(".dl-")),
        vec![dead.clone()],
        "the killed download's directory stays until the next start"
    );
    // The next start sweeps it (killed again as soon as its own download began: the package is
    // not fetched whole here).
    let (pid2, got2, _) = start_and_kill(0);
    assert!(got2.is_some(), "the next start never began its own download (no .dl-{pid2})");
    let left = in_debs(&|n| n.starts_with(".dl-"));
    assert!(!left.contains(&dead), "the dead download's {dead} outlived the next start ({pid2}): {left:?}");
    println!("    killed with {:.1} MB of the package downloaded: apt-get ended, nothing in place; the next start swept {dead}", bytes as f64 / 1e6);
    Outcome::Pass
}

/// The most a run's orchestrator may hold (its peak resident set, VmHWM) while an agent floods
/// it: frames read ahead are bounded in bytes as received (8 MiB queued, 8 MiB of early replies)
/// and parsed one at a time (a 1 MiB frame of small numbers is ~30 MiB once parsed). Measured
/// here: 80-125 MiB over floods of 0.2 to 1.5 GB; before the bound, 4 975 MiB for 300 frames of 1 MiB from
/// an environment nobody read while another ran (1024 frames of ~16 MiB each could queue).
const HOSTILE_PEAK_KIB: u64 = 160 << 10;

/// A hostile agent (tests/e2e/hostile_agent.py as native's agent, VIRTPERF_NATIVE_AGENT) answers
/// with well-formed frames of the wrong shape, terminal escapes, a flood of megabyte frames, a
/// hundred thousand laps, numbers past the protocol's integers and a line without end. Each bad
/// case fails its own trial with the reason, the good ones pass, the run ends within its
/// deadlines, nothing printed carries an escape sequence, and the orchestrator stays within
/// [`HOSTILE_PEAK_KIB`].
pub(crate) fn a_hostile_agent_fails_its_trials_within_bounds() -> Outcome {
    if let Some(why) = need_tool("python3") {
        return Outcome::Skip(why);
    }
    let agent = repo_root().join("crates/virtperf/tests/e2e/hostile_agent.py");
    // 200 MiB of flood: drained within the next case's deadline (taking ~35 MB/s: serde parses a
    // flattened frame twice), so that it fails no other case of its environment, whatever the order.
    let fx = Fixture::new()
        .with_var("VIRTPERF_NATIVE_AGENT", agent.to_str().unwrap())
        .with_var("HOSTILE_FLOOD_FRAMES", "200");
    let exp = fx.file(
        "hostile.toml",
        // Two environments, idle neighbours left running: one floods while nobody reads it, the
        // other runs a slow case meanwhile (the old reader queued ~5 GB of 300 MiB so).
        "name = \"hostile\"\nreps = 1\nwarmup = 0\ntimeout = \"20s\"\nfreeze_idle = false\n\
         [[env]]\nkind = \"native\"\n[[env]]\nkind = \"native\"\nname = \"b\"\n[[workload]]\nkind = \"command\"\n\
         cmd = [\"echo ok\", \"echo extra-number\", \"echo escape\", \"echo flood\", \"echo laps\", \"echo huge\", \"echo endless\", \"echo slow\"]\n",
    );
    let child = fx.spawn(&format!("run {} --json", exp.display()));
    let pid = child.id();
    let peak = std::thread::spawn(move || {
        let mut peak = 0u64;
        while let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let hwm = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            peak = peak.max(hwm.unwrap_or(0));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        peak
    });
    let t0 = Instant::now();
    let out = child.wait();
    let peak = peak.join().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    // 16 trials, two of them to their 20 s deadline: well within three minutes.
    assert!(t0.elapsed().as_secs() < 180, "took {:?}", t0.elapsed());
    let run: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let reasons: Vec<String> = run["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reason"].as_str().unwrap().to_string())
        .collect();
    let has = |w: &str| reasons.iter().any(|r| r.contains(w));
    assert!(has("`extra` must be an object"), "{reasons:#?}");
    assert!(has("expected u64"), "the number past u64: {reasons:#?}");
    assert!(has("boom \\x1b[2J"), "the escape shown, not sent: {reasons:#?}");
    assert!(has("no answer from the agent within"), "the endless line met its deadline: {reasons:#?}");
    let ok = run["trials"]["ok"].as_u64().unwrap();
    assert!(ok >= 4, "ok, laps and the flood's own result passed: {ok} ok, {reasons:#?}");
    let (report, full) = (fx.text("report"), fx.text("report --full"));
    let texts = [
        ("stdout", stdout.as_ref()),
        ("stderr", stderr.as_ref()),
        ("report", report.as_str()),
        ("report --full", full.as_str()),
    ];
    for (what, text) in texts {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'),
            "{what} carries a raw escape"
        );
    }
    assert!(report.contains("VIRTPERF_NATIVE_AGENT"), "the replaced agent is said: {report}");
    assert!(peak > 0 && peak < HOSTILE_PEAK_KIB, "peak {peak} KiB, bound {HOSTILE_PEAK_KIB} KiB");
    let failed: u64 = run["failures"].as_array().unwrap().iter().filter_map(|f| f["count"].as_u64()).sum();
    println!(
        "    a hostile agent: {failed} of 16 trials failed with their reasons; peak {} MiB (bound {} MiB)",
        peak >> 10,
        HOSTILE_PEAK_KIB >> 10
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// A panic inside a trial (a bug, set off by a failpoint) fails that trial with its place and
/// the run goes on; one outside any trial ends the run, interrupted, everything torn down, and
/// `--resume` finishes it. Before, a panic in a trial body waited for ever for the CPU sampler.
pub(crate) fn a_panic_fails_its_trial_or_ends_the_run_torn_down() -> Outcome {
    let fx =
        Fixture::new().with_var("VIRTPERF_FAILPOINTS", "trial-body=1*panic").with_var("RUST_BACKTRACE", "0");
    let out = vp_within(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "sleep:duration=100ms",
            "--reps",
            "3",
            "--warmup",
            "0",
            "--json",
            "--db",
            fx.db_str(),
        ],
        &fx.env(),
        std::time::Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (run["trials"]["ok"].as_u64(), run["trials"]["failed"].as_u64()),
        (Some(2), Some(1)),
        "{run:#}"
    );
    let reason = run["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("a bug") && reason.contains("failpoint trial-body panic at "), "{reason}");
    fx.assert_no_leftovers();

    let kind = if need_root_and_env("container").is_none() { "container" } else { "native" };
    let fx = Fixture::new()
        .with_var("VIRTPERF_FAILPOINTS", "trial-stored=2*off->1*panic")
        .with_var("RUST_BACKTRACE", "0");
    let out = vp_within(
        &[
            "run",
            "--env",
            "native",
            "--env",
            kind,
            "--workload",
            "sleep:duration=100ms",
            "--reps",
            "3",
            "--warmup",
            "0",
            "--db",
            fx.db_str(),
        ],
        &fx.env(),
        std::time::Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("stopped at a bug") && err.contains("--resume 1"), "{err}");
    assert_eq!(run_status(&fx.db), "interrupted");
    assert_eq!(count_trials(&fx.db, "ok"), 3, "the trials stored before it are kept");
    fx.assert_no_leftovers();
    let again = vp(
        &["run", "--resume", "1", "--db", fx.db_str()],
        &[("VIRTPERF_STATE_DIR", fx.state.to_str().unwrap())],
    );
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(count_trials(&fx.db, "ok"), 6);
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// One owner per run: a second `--resume` of a run being resumed is refused (exit 2, the owner
/// named, nothing changed) where it used to run the same trials; a resume whose experiment now
/// derives other cases (the stored file made to say another duration, as a changed default of a
/// newer virtperf would) is refused naming the key; `ab` passes SIGTERM on to the run it waits for.
pub(crate) fn one_owner_per_run_and_resume_refuses_what_drifted() -> Outcome {
    let fx = Fixture::new();
    let child = fx.spawn("run --env native --workload sleep:duration=100ms --reps 60 --warmup 0");
    wait_for(|| (count_trials(&fx.db, "ok") >= 3).then_some(()), 20.0).expect("trials were stored");
    kill(child.id(), 15);
    let out = child.wait();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    // Two resumes at once: the second is refused while the first runs.
    let first = fx.spawn("run --resume 1");
    wait_for(|| (count_trials(&fx.db, "ok") >= 6).then_some(()), 20.0).expect("the first resume ran");
    let ok_then = count_trials(&fx.db, "ok");
    let second = fx.vp("run --resume 1");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("is being run by process {}", first.id())), "{err}");
    kill(first.id(), 15);
    let _ = first.wait();
    assert!(count_trials(&fx.db, "ok") >= ok_then);
    assert_eq!(count_trials(&fx.db, "ok") + count_trials(&fx.db, "pending"), 60, "every trial once");
    fx.assert_no_leftovers();
    // The stored experiment says 150ms now: its cases no longer derive what the plan holds.
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    c.execute("UPDATE runs SET experiment = replace(experiment, '100ms', '150ms') WHERE id = 1", []).unwrap();
    drop(c);
    let pending = count_trials(&fx.db, "pending");
    let drifted = fx.vp("run --resume 1");
    let err = String::from_utf8_lossy(&drifted.stderr);
    assert_eq!(drifted.status.code(), Some(2), "{err}");
    assert!(err.contains("no longer derives") && err.contains("key `duration`"), "{err}");
    assert_eq!(count_trials(&fx.db, "pending"), pending, "nothing ran");
    fx.assert_no_leftovers();
    // ab: SIGTERM reaches the run it waits for, which ends interrupted.
    let exp = fx.file("ab.toml", "name = \"ab\"\nreps = 60\nwarmup = 0\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"sleep\"\nduration = \"100ms\"\n");
    let dir = fx.path("ab");
    let ab = vp_spawn(
        &["ab", exp.to_str().unwrap(), exp.to_str().unwrap(), "--runs", "2", "--dir", dir.to_str().unwrap()],
        &fx.env(),
    );
    let a_db = wait_for(
        || {
            std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "db") && count_trials(p, "ok") >= 2)
        },
        30.0,
    )
    .expect("ab's first run stored trials");
    let runs: Vec<u32> = descendants(ab.id());
    kill(ab.id(), 15);
    let t0 = Instant::now();
    let out = ab.wait();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t0.elapsed().as_secs() < 10, "ab took {:?} to end", t0.elapsed());
    let left: Vec<u32> =
        runs.into_iter().filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists()).collect();
    assert!(left.is_empty(), "ab's run went on alone: {left:?}");
    assert_eq!(run_status(&a_db), "interrupted");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Each phase of a run ends within 2 s of a SIGTERM, exit 130 and nothing left: the preparation
/// (virtperf's UML kernel built in a cache of its own: minutes, and it never checked the interrupt,
/// so a SIGTERM waited for the whole build), a guest's boot, a trial in flight. The latencies are
/// printed.
pub(crate) fn sigterm_ends_every_phase_within_2_s() -> Outcome {
    let mut latencies = Vec::new();
    let mut stop = |fx: &Fixture, child: Spawned, phase: &str| {
        let pid = child.id();
        let t0 = Instant::now();
        kill(pid, 15);
        let out = child.wait();
        let took = t0.elapsed();
        assert_eq!(out.status.code(), Some(130), "{phase}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(took < Duration::from_secs(2), "{phase}: {took:?} after SIGTERM");
        fx.sweep();
        latencies.push(format!("{phase} {:.2} s", took.as_secs_f64()));
    };
    // A trial in flight.
    let fx = Fixture::new();
    let child = fx.spawn("run --env native --workload sleep:duration=30s --reps 1 --warmup 0");
    wait_for(|| agents_of(child.id()).into_iter().next(), 10.0).expect("an agent");
    std::thread::sleep(Duration::from_millis(800));
    stop(&fx, child, "trial");
    match need_root_and_env("uml").or_else(|| doctor_unusable("uml:kernel=virtperf")) {
        Some(why) => dropped("the preparation (virtperf's UML kernel build)", &why),
        None => {
            let fx = Fixture::new();
            let cache = fx.path("cache");
            let fx = fx.with_var("VIRTPERF_CACHE", &cache.to_string_lossy());
            let child = fx.spawn("run --env uml:kernel=virtperf --workload noop --reps 1");
            // The build under way: its compilers run below the run.
            let building = wait_for(|| (descendants(child.id()).len() >= 3).then_some(()), 60.0);
            assert!(building.is_some(), "the kernel build began");
            std::thread::sleep(Duration::from_secs(2));
            stop(&fx, child, "preparation");
        }
    }
    if let Some(why) = need_qemu() {
        dropped("a guest's boot", &why);
    } else {
        // A guest's boot (TCG: seconds), before its agent says hello.
        let fx = Fixture::new();
        let child = fx.spawn("run --env qemu --workload noop --reps 1");
        wait_for(|| (!qemu_guests().is_empty()).then_some(()), 60.0).expect("a QEMU guest started");
        std::thread::sleep(Duration::from_millis(500));
        stop(&fx, child, "boot");
    }
    println!("    SIGTERM to exit: {}", latencies.join(", "));
    Outcome::Pass
}
