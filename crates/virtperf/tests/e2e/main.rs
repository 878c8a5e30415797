//! End-to-end tests: the real binary, real agents, real containers, real signals.
//!
//! A small harness of our own (harness = false) so that a test whose requirement is missing (root,
//! runc) is reported as `skipped: reason` instead of passing silently, and so that the run ends with
//! the plain `N passed, N failed, N skipped` line. Filter: `cargo test --test e2e -- NAME`.

// This file is a test harness (harness = false), so clippy's allow-unwrap-in-tests does not
// reach it; a failed unwrap here is a failed test, reported by the harness with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use util::*;

type TestFn = fn() -> Outcome;

fn main() {
    let tests: &[(&str, TestFn)] = &[
        ("agent_answers_every_frame_and_survives_garbage", agent_answers_every_frame_and_survives_garbage),
        ("bad_input_exits_2_and_creates_nothing", bad_input_exits_2_and_creates_nothing),
        ("examples_validate", examples_validate),
        ("native_run_report_export_agree", native_run_report_export_agree),
        (
            "hung_agent_fails_trial_at_deadline_and_run_goes_on",
            hung_agent_fails_trial_at_deadline_and_run_goes_on,
        ),
        ("agent_killed_mid_trial_fails_that_trial_only", agent_killed_mid_trial_fails_that_trial_only),
        (
            "sigterm_interrupts_then_resume_finishes_exactly_the_rest",
            sigterm_interrupts_then_resume_finishes_exactly_the_rest,
        ),
        ("kill9_leftovers_are_swept_by_next_start", kill9_leftovers_are_swept_by_next_start),
        ("doctor_lists_every_kind_with_fixes", doctor_lists_every_kind_with_fixes),
        ("avionics_1000_reps_native_and_container", avionics_1000_reps_native_and_container),
        ("container_cpu_limit_is_enforced", container_cpu_limit_is_enforced),
        (
            "network_workloads_native_and_container_root_ns_untouched",
            network_workloads_native_and_container_root_ns_untouched,
        ),
        ("kill9_during_network_trial_lab_is_swept", kill9_during_network_trial_lab_is_swept),
        (
            "rfc2544_quick_in_out_reflect_native_and_container",
            rfc2544_quick_in_out_reflect_native_and_container,
        ),
        ("background_load_lands_within_3_points", background_load_lands_within_3_points),
        ("all_pairs_matrix_covers_every_ordered_pair", all_pairs_matrix_covers_every_ordered_pair),
        (
            "silent_peer_ends_trial_at_deadline_sigterm_removes_lab",
            silent_peer_ends_trial_at_deadline_sigterm_removes_lab,
        ),
        ("gvisor_serves_syscalls_and_joins_the_lab", gvisor_serves_syscalls_and_joins_the_lab),
        ("uml_guest_boots_joins_the_lab_and_is_swept", uml_guest_boots_joins_the_lab_and_is_swept),
        (
            "link_emulation_caps_goodput_below_the_gbe_ceiling",
            link_emulation_caps_goodput_below_the_gbe_ceiling,
        ),
        ("qemu_guests_carry_tcp_through_virtio_and_e1000", qemu_guests_carry_tcp_through_virtio_and_e1000),
        (
            "qemu_faults_fail_the_trial_with_the_reason_and_the_run_goes_on",
            qemu_faults_fail_the_trial_with_the_reason_and_the_run_goes_on,
        ),
    ];
    util::take_baseline();
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, f) in tests {
        if !filter.is_empty() && !filter.iter().any(|p| name.contains(p.as_str())) {
            continue;
        }
        let t0 = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Fail(msg)
        });
        let secs = t0.elapsed().as_secs_f64();
        match outcome {
            Outcome::Pass => {
                passed += 1;
                println!("test {name} ... ok ({secs:.1}s)");
            }
            Outcome::Skip(why) => {
                skipped += 1;
                println!("test {name} ... skipped: {why}");
            }
            Outcome::Fail(msg) => {
                failed += 1;
                println!("test {name} ... FAILED ({secs:.1}s)");
                failures.push((name, msg));
            }
        }
    }
    for (name, msg) in &failures {
        println!("\n---- {name} ----\n{msg}");
    }
    println!("\ne2e: {passed} passed, {failed} failed, {skipped} skipped");
    std::process::exit(if failed > 0 { 1 } else { 0 });
}

fn agent_answers_every_frame_and_survives_garbage() -> Outcome {
    let out = vp_with_stdin(
        &["agent"],
        "{\"v\":1,\"tag\":1,\"type\":\"ping\"}\n\u{1}\u{2}garbage\n{\"v\":1,\"tag\":2,\"type\":\"run\",\"workload\":{\"kind\":\"syscall\",\"params\":{\"iterations\":10}}}\n{\"v\":1,\"tag\":3,\"type\":\"shutdown\"}\n",
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let types: Vec<String> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l.strip_prefix("@vp ").expect("prefix")).expect("json");
            format!("{}:{}", v["tag"], v["type"].as_str().unwrap_or("?"))
        })
        .collect();
    assert_eq!(types, ["0:hello", "1:pong", "0:error", "2:started", "2:result", "3:bye"], "{stdout}");
    Outcome::Pass
}

fn bad_input_exits_2_and_creates_nothing() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("x.db");
    let db_s = db.to_str().unwrap();
    let bad_file = dir.path().join("bad.toml");
    std::fs::write(
        &bad_file,
        "reps = 3\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nsize = \"lots\"\n",
    )
    .unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "--env", "native", "--workload", "memcpy:size=-1"], "key `size`"),
        (vec!["run", "--env", "xen9", "--workload", "cpu"], "unknown environment kind `xen9`"),
        (vec!["run", "--env", "native", "--workload", "cpu", "--reps", "0"], "--reps 0: key `reps`"),
        (vec!["run", "--env", "native", "--env", "native", "--workload", "cpu"], "distinct name"),
        (vec!["run", "--env", "native", "--workload", "cpu:iterations"], "key=value"),
        (vec!["run", "--env", "container:cpuset=99", "--workload", "cpu"], "CPU 99 does not exist"),
        (vec!["run", bad_file.to_str().unwrap()], "bad.toml:6: key `size`"),
        (vec!["run", "/nonexistent.toml"], "cannot read the experiment file"),
        (vec!["run", "--env", "native"], "no workload"),
        (vec!["run", "--env", "native", "--workload", "tcp_stream", "--lab", "mtu=60"], "key `lab.mtu`"),
        (vec!["run", "--env", "native", "--workload", "tcp_stream", "--lab", "loss=101"], "key `lab.loss`"),
        (
            vec!["run", "--env", "native", "--workload", "tcp_stream", "--lab", "rate=-5mbit"],
            "key `lab.rate`",
        ),
        (
            vec!["run", "--env", "native", "--workload", "tcp_stream", "--lab", "tester_cpu=99"],
            "CPU 99 does not exist",
        ),
        (
            vec!["run", "--env", "native", "--workload", "tcp_stream", "--lab", "colour=red"],
            "unknown lab key",
        ),
        (vec!["run", "--env", "native", "--workload", "tcp_stream:window=1TiB"], "key `window`"),
        (vec!["run", "--env", "native", "--workload", "udp_stream:rate=-3"], "key `rate`"),
        (vec!["run", "--env", "native", "--workload", "cpu:load=150"], "key `load`"),
        (vec!["run", "--env", "native", "--workload", "cpu:load=50,load_on=tester"], "key `load_on`"),
        (vec!["run", "--env", "qemu:machine=microvm,nic=e1000", "--workload", "cpu"], "key `nic`"),
        (vec!["run", "--env", "qemu:nic=ne2000", "--workload", "cpu"], "key `nic`"),
        (vec!["run", "--env", "qemu:initrd=/etc/hostname", "--workload", "cpu"], "key `initrd`"),
        (vec!["run", "--env", "qemu:vcpus=0", "--workload", "cpu"], "key `vcpus`"),
        (vec!["run", "--env", "qemu:pin=77", "--workload", "cpu"], "CPU 77 does not exist"),
    ];
    for (args, needle) in cases {
        let mut a = args.clone();
        a.extend(["--db", db_s]);
        let out = vp(&a, &[("VIRTPERF_STATE_DIR", dir.path().join("state").to_str().unwrap())]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
        assert!(!db.exists(), "{args:?} created the database");
        assert!(!dir.path().join("state").exists(), "{args:?} created the state directory");
    }
    Outcome::Pass
}

fn examples_validate() -> Outcome {
    let root = repo_root();
    let mut n = 0;
    for ent in std::fs::read_dir(root.join("examples")).unwrap() {
        let p = ent.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            let out = vp(&["run", p.to_str().unwrap(), "--dry-run"], &[]);
            // 3 = valid but an environment cannot run on this host (e.g. not root).
            assert!(
                matches!(out.status.code(), Some(0) | Some(3)),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
            n += 1;
        }
    }
    assert!(n >= 3, "expected the example experiments");
    Outcome::Pass
}

fn native_run_report_export_agree() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("r.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "native:name=pinned,cpuset=0",
            "--workload",
            "cpu:iterations=200000",
            "--workload",
            "pde:n=[16,32],iterations=5",
            "--reps",
            "5",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let results = run["results"].as_array().unwrap();
    // 3 cases × 2 envs × (metric + host_cpu_time)
    assert_eq!(results.len(), 12, "{results:#?}");
    for r in results {
        assert_eq!(r["n"], 5);
        assert!(r["ci95"][0].as_f64().unwrap() <= r["mean"].as_f64().unwrap());
        let is_base = r["environment"] == "native";
        assert_eq!(r["overhead"].is_null(), is_base, "{r}");
    }
    assert!(run["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["workload"] == "pde:n=[16,32],iterations=5 [n=32]"));
    assert!(run["manifest"]["host_kernel"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(run["manifest"]["git_revision"].is_string());
    assert_eq!(run["trials"]["ok"], 30);
    // report re-renders the same results from the database.
    let rep = vp(&["report", "--json", "--db", db.to_str().unwrap()], &[]);
    let again: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    assert_eq!(again["results"], run["results"]);
    let table = vp(&["report", "--db", db.to_str().unwrap()], &[]);
    let t = String::from_utf8_lossy(&table.stdout);
    assert!(t.contains("native (baseline)") && t.contains("cpu_rate (Mops/s)") && t.contains("×"), "{t}");
    // export: every sample, warm-ups included.
    let csv = vp(&["export", "--format", "csv", "--db", db.to_str().unwrap()], &[]);
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert!(csv.starts_with("run_id,trial_id,seq,environment,workload,params,rep,warmup,status"));
    assert_eq!(csv.lines().count(), 1 + 2 * 3 * 6, "{csv}");
    let json = vp(&["export", "--format", "json", "--db", db.to_str().unwrap()], &[]);
    let j: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(j["trials"].as_array().unwrap().len(), 36);
    assert!(j["experiment"].as_str().unwrap().contains("[[workload]]"));
    assert_no_leftovers(&state);
    Outcome::Pass
}

fn hung_agent_fails_trial_at_deadline_and_run_goes_on() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("h.db");
    let state = dir.path().join("state");
    let t0 = Instant::now();
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "sleep:duration=30s",
            "--workload",
            "noop",
            "--timeout",
            "400ms",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--order",
            "interleaved",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &[("VIRTPERF_STATE_DIR", state.to_str().unwrap())],
    );
    assert!(t0.elapsed().as_secs() < 20, "the deadline was not enforced");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["trials"]["failed"], 2);
    assert_eq!(run["trials"]["ok"], 2, "noop trials still ran after each hung one");
    let reason = run["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("no answer from the agent within"), "{reason}");
    assert!(run["environments"][0]["launches"].as_u64().unwrap() >= 3, "the hung agent was replaced");
    assert_no_leftovers(&state);
    Outcome::Pass
}

fn agent_killed_mid_trial_fails_that_trial_only() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("k.db");
    let state = dir.path().join("state");
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "sleep:duration=3s",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &[("VIRTPERF_STATE_DIR", state.to_str().unwrap())],
    );
    let agent = wait_for(|| children_of(child.id()).into_iter().next(), 10.0).expect("an agent appeared");
    std::thread::sleep(std::time::Duration::from_millis(500));
    kill(agent, 9);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (run["trials"]["failed"].as_u64(), run["trials"]["ok"].as_u64()),
        (Some(1), Some(1)),
        "{run:#}"
    );
    let reason = run["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("exited"), "{reason}");
    assert_no_leftovers(&state);
    Outcome::Pass
}

fn sigterm_interrupts_then_resume_finishes_exactly_the_rest() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("i.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "native:name=b",
            "--workload",
            "sleep:duration=40ms",
            "--reps",
            "40",
            "--warmup",
            "1",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    wait_for(|| (count_trials(&db, "ok") >= 10).then_some(()), 20.0).expect("trials were being stored");
    kill(pid, 15);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--resume 1"));
    let ok_before = count_trials(&db, "ok");
    let pending = count_trials(&db, "pending");
    assert!(ok_before >= 10 && pending > 0, "ok {ok_before}, pending {pending}");
    assert_eq!(run_status(&db), "interrupted");
    assert_no_leftovers(&state);
    let out = vp(&["run", "--resume", "1", "--json", "--db", db.to_str().unwrap()], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count_trials(&db, "ok"), 2 * 41, "every planned trial exactly once");
    assert_eq!(count_trials(&db, "pending"), 0);
    assert_eq!(run_status(&db), "completed");
    let again = vp(&["run", "--resume", "1", "--db", db.to_str().unwrap()], &env);
    assert_eq!(again.status.code(), Some(2), "a completed run cannot be resumed");
    assert_no_leftovers(&state);
    Outcome::Pass
}

fn kill9_leftovers_are_swept_by_next_start() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("s.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let use_container = is_root() && has("runc");
    let kind = if use_container { "container" } else { "native" };
    let child = vp_spawn(
        &[
            "run",
            "--env",
            kind,
            "--workload",
            "sleep:duration=60s",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    // Wait until the trial is running: the agent said hello and a run request went out.
    wait_for(
        || {
            ledger_files(&state)
                .into_iter()
                .find(|l| std::fs::read_to_string(l).is_ok_and(|s| s.contains("\"process\"")))
        },
        20.0,
    )
    .expect("a ledger with a process");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let ledger = std::fs::read_to_string(&ledger_files(&state)[0]).unwrap();
    kill(pid, 9);
    let _ = child.wait_with_output();
    let leftovers_before = leftover_things(&state);
    assert!(!leftovers_before.is_empty(), "kill -9 left something for the sweep to find: {ledger}");
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "1", "--db", db.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("leftover"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_leftovers(&state);
    if !use_container {
        return Outcome::Skip("container part needs root and runc; the native part passed".into());
    }
    Outcome::Pass
}

fn doctor_lists_every_kind_with_fixes() -> Outcome {
    let dir = tempdir();
    let state = dir.path().join("state");
    let out = vp(&["doctor", "--json"], &[("VIRTPERF_STATE_DIR", state.to_str().unwrap())]);
    assert!(out.status.success());
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = d["environments"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["environment"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"native")
            && names.contains(&"container")
            && names.contains(&"container:runtime=crun"),
        "{names:?}"
    );
    for r in rows {
        if r["usable"] == false {
            assert!(
                r["fix"].as_str().is_some_and(|f| !f.is_empty()),
                "an unusable kind says what to do: {r}"
            );
        } else {
            assert!(r["probe_ms"].is_number(), "a usable kind was really launched: {r}");
        }
    }
    assert_eq!(rows.iter().find(|r| r["environment"] == "native").unwrap()["usable"], true);
    assert_no_leftovers(&state);
    Outcome::Pass
}

fn avionics_1000_reps_native_and_container() -> Outcome {
    if let Some(why) = need_root_and("runc") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("a.db");
    let state = dir.path().join("state");
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "container",
            "--workload",
            "memcpy",
            "--reps",
            "1000",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &[("VIRTPERF_STATE_DIR", state.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |env: &str, metric: &str| {
        run["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["environment"] == env && r["metric"] == metric)
            .cloned()
            .unwrap()
    };
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
    // The target is < 1 %; that holds when the host's memory bandwidth is steady
    // (CV < 16 %). Shared machines are not always: bench/harness.sh reports the figure, and this
    // test only refuses what no amount of neighbour noise explains.
    println!(
        "    native memcpy: mean {mean:.3} ms, CI half-width {:.3}% of the mean (target < 1%)",
        half * 100.0
    );
    assert!(half < 0.03, "native CI half-width {:.3}% of the mean", half * 100.0);
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
    assert_no_leftovers(&state);
    Outcome::Pass
}

fn container_cpu_limit_is_enforced() -> Outcome {
    if let Some(why) = need_root_and("runc") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("c.db");
    let state = dir.path().join("state");
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "container:cpus=0.3,memory=256MiB,name=small",
            "--workload",
            "cpu:iterations=100000000",
            "--reps",
            "3",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &[("VIRTPERF_STATE_DIR", state.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let small = run["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["environment"] == "small" && r["metric"] == "cpu_rate")
        .unwrap();
    let ratio = small["overhead"]["ratio"].as_f64().unwrap();
    // A 30 % CFS quota over a ~0.2 s loop: well under native, whatever the noise.
    assert!(ratio < 0.6, "cpus=0.3 should slow a CPU loop down, ratio {ratio}");
    assert_no_leftovers(&state);
    Outcome::Pass
}

/// The "done when" command (shorter flows), then: results for every workload on both
/// environments, CPU series stored, and the root namespace exactly as before.
fn network_workloads_native_and_container_root_ns_untouched() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("n.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let with_container = has("runc");
    let mut args = vec!["run", "--env", "native"];
    if with_container {
        args.extend(["--env", "container"]);
    }
    args.extend([
        "--workload",
        "tcp_stream:duration=1s",
        "--workload",
        "udp_stream:frame_size=64,duration=1s",
        "--workload",
        "tcp_rr:duration=1s",
        "--workload",
        "udp_rr:duration=1s,direction=both",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--json",
        "--db",
        db.to_str().unwrap(),
    ]);
    let before = root_netns_snapshot();
    let out = vp(&args, &env);
    let after = root_netns_snapshot();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(before, after, "the root namespace changed");
    assert_no_leftovers(&state);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let rows = doc["results"].as_array().unwrap();
    let envs: &[&str] = if with_container { &["native", "container"] } else { &["native"] };
    for e in envs {
        for (w, m) in [
            ("tcp_stream:duration=1s", "tcp_goodput"),
            ("udp_stream:frame_size=64,duration=1s", "udp_recv_rate"),
            ("udp_stream:frame_size=64,duration=1s", "udp_loss"),
            ("tcp_rr:duration=1s", "tcp_rr_p99"),
            ("udp_rr:duration=1s,direction=both", "udp_rr_rate_out"),
            ("udp_rr:duration=1s,direction=both", "udp_rr_rate_in"),
            ("tcp_stream:duration=1s", "cpu_per_gbit"),
            ("tcp_stream:duration=1s", "tester_cpu_time"),
        ] {
            let row = rows
                .iter()
                .find(|r| r["environment"] == *e && r["workload"] == w && r["metric"] == m)
                .unwrap_or_else(|| panic!("no {e} / {w} / {m} in {rows:#?}"));
            assert_eq!(row["n"], 2, "{e} {w} {m}");
        }
        let gp = rows
            .iter()
            .find(|r| r["environment"] == *e && r["metric"] == "tcp_goodput")
            .and_then(|r| r["mean"].as_f64())
            .unwrap();
        assert!(gp > 0.05, "{e}: TCP goodput {gp} Gbit/s over a veth is implausibly low");
    }
    // CPU time series at ≥ 10 Hz: a 1 s flow gives at least 10 points per role.
    let c = rusqlite::Connection::open(&db).unwrap();
    let (n, trials): (i64, i64) = c
        .query_row("SELECT count(*), count(DISTINCT trial_id) FROM cpu_series WHERE role = 'dut'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert!(trials > 0 && n / trials >= 10, "{n} CPU samples over {trials} trials");
    Outcome::Pass
}

fn rfc2544_quick_in_out_reflect_native_and_container() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("r.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    // Bad input first: nothing is created, the key is named, exit 2.
    let bad = vp(
        &["run", "--env", "native", "--workload", "rfc2544:frame_size=63", "--db", db.to_str().unwrap()],
        &env,
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("frame_size"));
    assert!(!db.exists(), "a refused run created its database");
    let with_container = has("runc");
    let mut args = vec!["run", "--env", "native"];
    if with_container {
        args.extend(["--env", "container"]);
    }
    let w = "rfc2544:quick=true,frame_size=[64,1518],direction=[in,out,reflect]";
    args.extend(["--workload", w, "--json", "--db", db.to_str().unwrap()]);
    let before = root_netns_snapshot();
    let out = vp(&args, &env);
    let after = root_netns_snapshot();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(before, after, "the root namespace changed");
    assert_no_leftovers(&state);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let rows = doc["rfc2544"].as_array().expect("an rfc2544 section");
    let n_env = if with_container { 2 } else { 1 };
    assert_eq!(rows.len(), n_env * 2 * 3, "{rows:#?}");
    for r in rows {
        let what = format!("{} {} {}: {r}", r["environment"], r["direction"], r["frame_size"]);
        let line = r["line_max_fps"].as_f64().unwrap();
        let ndr = r["ndr_fps"].as_f64().unwrap_or(0.0);
        let pdr = r["pdr_fps"].as_f64().unwrap_or(0.0);
        // A software path passes something; never more than the line allows; PDR >= NDR.
        assert!(
            ndr > 0.0 && ndr <= line * 1.000_001 && pdr >= ndr,
            "{what}: ndr {ndr} pdr {pdr} line {line}"
        );
        assert!(r["latency"]["count"].as_u64().unwrap_or(0) >= 20, "{what}: {}", r["latency"]);
        assert!(r["latency"]["min_us"].as_f64().unwrap() > 0.0, "{what}");
        let curve = r["loss_curve"].as_array().unwrap();
        assert_eq!(curve[0][0], 100, "{what}: frame loss starts at 100 %");
        assert!(r["b2b_mean"].as_f64().unwrap() > 0.0, "{what}");
        assert!(r["steps"].as_u64().unwrap() >= 5, "{what}");
        assert!(r["dut_cpu_pct"].as_f64().is_some(), "{what}: no DUT CPU");
        assert_eq!(r["quick"], true);
    }
    // Every step is stored with its trial, with what the generator reached.
    let x = vp(&["export", "--format", "json", "--db", db.to_str().unwrap()], &env);
    let x: serde_json::Value = serde_json::from_slice(&x.stdout).unwrap();
    for t in x["trials"].as_array().unwrap() {
        let steps = t["extra"]["rfc2544"]["steps"].as_array().expect("steps stored");
        assert_eq!(steps[0]["phase"], "probe");
        assert!(steps
            .iter()
            .all(|s| s["sent"].as_u64().unwrap() > 0 && s["sent_fps"].as_f64().unwrap() > 0.0));
    }
    // The text report has the section and says the profile was quick.
    let text = vp(&["report", "--db", db.to_str().unwrap()], &env);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("RFC 2544 — QUICK profile") && text.contains("theoretical maximum"), "{text}");
    Outcome::Pass
}

fn kill9_during_network_trial_lab_is_swept() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("k.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let before = root_netns_snapshot();
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "tcp_rr:duration=60s",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    wait_for(|| (lab_namespaces().len() >= 3).then_some(()), 20.0).expect("the lab's namespaces");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill(pid, 9);
    let _ = child.wait_with_output();
    assert!(!lab_namespaces().is_empty(), "kill -9 left the lab for the sweep to find");
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "1", "--db", db.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_leftovers(&state);
    assert_eq!(before, root_netns_snapshot(), "the root namespace changed");
    Outcome::Pass
}

/// Seed 000's softloader: the achieved CPU of a 50 % and a 90 % load, measured, within ±3 points.
fn background_load_lands_within_3_points() -> Outcome {
    let dir = tempdir();
    let db = dir.path().join("l.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "sleep:duration=1s,load=[50,90]",
            "--reps",
            "3",
            "--warmup",
            "0",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for target in [50.0, 90.0] {
        let row = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["metric"] == "load_achieved"
                    && r["workload"].as_str().unwrap().contains(&format!("load={target}"))
            })
            .unwrap_or_else(|| panic!("no load_achieved row for {target}: {doc:#}"));
        let got = row["mean"].as_f64().unwrap();
        assert!((got - target).abs() <= 3.0, "target {target} %, achieved {got:.2} %");
    }
    assert_no_leftovers(&state);
    Outcome::Pass
}

/// `--lab rate=1gbit`: TCP goodput stays under the analytic GbE ceiling (941.49 Mbit/s) and
/// reaches a good share of it; the report prints the ceiling.
fn link_emulation_caps_goodput_below_the_gbe_ceiling() -> Outcome {
    if let Some(why) = need_root_and("tc") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("r.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "udp_stream:frame_size=1518,duration=1s",
            "--lab",
            "rate=1gbit",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("link ceiling") && stdout.contains("81.27 kpps"), "{stdout}");
    let doc: serde_json::Value =
        serde_json::from_slice(&vp(&["report", "--json", "--db", db.to_str().unwrap()], &env).stdout)
            .unwrap();
    let rate = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "udp_recv_rate")
        .and_then(|r| r["mean"].as_f64())
        .unwrap();
    // 1 Gbit/s of 1518-byte frames: 81.27 k/s. A shaper that lets more through is broken; a host
    // too slow for 81 kpps would show less (then the run says so in the ceiling line, too).
    assert!(rate <= 81.27 * 1.01, "{rate} kpps through a 1 Gbit/s shaper");
    assert!(rate >= 81.27 * 0.5, "{rate} kpps: the shaper or the sender is far off");
    assert_no_leftovers(&state);

    // Delay needs netem: where the kernel has it, a 1 ms one-way delay shows in every round trip;
    // where it does not, the run is refused before anything is created, with the reason.
    let before = root_netns_snapshot();
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "udp_rr:duration=500ms",
            "--lab",
            "delay=1ms",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        assert!(stderr.contains("netem") && stderr.contains("CONFIG_NET_SCH_NETEM"), "{stderr}");
        assert_eq!(before, root_netns_snapshot());
        assert_no_leftovers(&state);
        return Outcome::Skip(format!(
            "rate shaping passed; delay/loss need the kernel's netem qdisc, which this kernel lacks: {}",
            stderr.lines().find(|l| l.contains("netem")).unwrap_or_default().trim()
        ));
    }
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p50 = doc["results"].as_array().unwrap().iter().find(|r| r["metric"] == "udp_rr_p50").unwrap()
        ["mean"]
        .as_f64()
        .unwrap();
    assert!(p50 >= 2000.0, "1 ms each way, yet a round trip took {p50} us");
    assert_no_leftovers(&state);
    Outcome::Pass
}

/// `pairs = "all"`: one result per ordered pair of environments, rendered as a matrix.
fn all_pairs_matrix_covers_every_ordered_pair() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("m.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let mut envs = vec!["native", "native:name=b"];
    if has("runc") {
        envs.push("container");
    }
    let mut args = vec!["run"];
    for e in &envs {
        args.extend(["--env", e]);
    }
    args.extend([
        "--workload",
        "tcp_rr:duration=300ms,pairs=all",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--db",
        db.to_str().unwrap(),
    ]);
    let out = vp(&args, &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("from ↓ to →"), "no matrix in {stdout}");
    let doc: serde_json::Value =
        serde_json::from_slice(&vp(&["report", "--json", "--db", db.to_str().unwrap()], &env).stdout)
            .unwrap();
    let names: Vec<&str> = envs.iter().map(|e| e.split_once("name=").map(|x| x.1).unwrap_or(e)).collect();
    let rows = doc["results"].as_array().unwrap();
    for a in &names {
        for b in &names {
            let n = rows
                .iter()
                .filter(|r| r["metric"] == "tcp_rr_rate" && r["environment"] == *a && r["peer"] == *b)
                .count();
            assert_eq!(n, usize::from(a != b), "{a} → {b}: {n} rows");
        }
    }
    assert_no_leftovers(&state);
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
fn silent_peer_ends_trial_at_deadline_sigterm_removes_lab() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("p.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let before = root_netns_snapshot();
    let t0 = std::time::Instant::now();
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "tcp_stream:duration=3s",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--timeout",
            "6s",
            "--order",
            "sequential",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    let tester = wait_for(|| children_of(pid).into_iter().find(|c| netns_of(*c).ends_with("-t")), 20.0)
        .expect("the tester agent");
    std::thread::sleep(std::time::Duration::from_millis(800));
    kill(tester, libc::SIGSTOP);
    let out = child.wait_with_output().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(secs < 30.0, "the run took {secs:.1}s: the deadline did not end the trial");
    assert_eq!(count_trials(&db, "failed"), 1, "{stderr}");
    assert_eq!(count_trials(&db, "ok"), 1, "the relaunched tester served the next trial: {stderr}");
    let c = rusqlite::Connection::open(&db).unwrap();
    let reason: String =
        c.query_row("SELECT reason FROM trials WHERE status = 'failed'", [], |r| r.get(0)).unwrap();
    assert!(reason.contains("no answer") && reason.contains("other side"), "{reason}");
    assert_no_leftovers(&state);

    let child = vp_spawn(
        &[
            "run",
            "--env",
            "native",
            "--workload",
            "tcp_stream:duration=30s",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    wait_for(|| (lab_namespaces().len() >= 3).then_some(()), 20.0).expect("the lab's namespaces");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill(pid, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_leftovers(&state);
    assert_eq!(before, root_netns_snapshot(), "the root namespace changed");
    Outcome::Pass
}

/// gVisor: system calls go through the Sentry (so `syscall` is far slower than native: proof the
/// workload really ran sandboxed), its network is on the lab, and nothing is left behind — also
/// after a `kill -9` of the orchestrator mid-trial.
fn gvisor_serves_syscalls_and_joins_the_lab() -> Outcome {
    if let Some(why) = need_root_and("runsc") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("g.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let before = root_netns_snapshot();
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "gvisor",
            "--workload",
            "syscall:iterations=20000",
            "--workload",
            "tcp_rr:duration=500ms",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |e: &str, m: &str| {
        doc["results"].as_array().unwrap().iter().find(|r| r["environment"] == e && r["metric"] == m).cloned()
    };
    let ratio = row("gvisor", "syscall_time").unwrap()["overhead"]["ratio"].as_f64().unwrap();
    assert!(ratio > 5.0, "a system call under gVisor costs only {ratio:.1}× native: not sandboxed?");
    assert!(row("gvisor", "tcp_rr_rate").unwrap()["mean"].as_f64().unwrap() > 100.0);
    assert!(row("gvisor", "host_cpu_time").is_some(), "the sandbox's host CPU is accounted");
    assert_no_leftovers(&state);
    assert_eq!(before, root_netns_snapshot());

    let child = vp_spawn(
        &[
            "run",
            "--env",
            "gvisor",
            "--workload",
            "tcp_rr:duration=60s",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    wait_for(|| (lab_namespaces().len() >= 3).then_some(()), 20.0).expect("the lab");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    kill(pid, 9);
    let _ = child.wait_with_output();
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "1", "--db", db.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_leftovers(&state);
    let runsc_left =
        std::process::Command::new("pgrep").args(["-f", &format!("virtperf/vp{pid}-")]).output().unwrap();
    assert!(
        runsc_left.stdout.is_empty(),
        "sandbox processes left: {}",
        String::from_utf8_lossy(&runsc_left.stdout)
    );
    assert_eq!(before, root_netns_snapshot());
    Outcome::Pass
}

/// Host processes whose command line mentions `needle` (a test's own state directory).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let out = std::process::Command::new("pgrep").args(["-a", "-f", needle]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// User-Mode Linux: a guest kernel serves the system calls (far slower than native), its NIC is a
/// tap on the lab, the agent answers on tty1 while the kernel console goes elsewhere, and every
/// host process of the guest is gone after the run — and after a `kill -9` of the orchestrator.
fn uml_guest_boots_joins_the_lab_and_is_swept() -> Outcome {
    if let Some(why) = need_root_and("linux.uml") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("u.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let before = root_netns_snapshot();
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "uml",
            "--workload",
            "syscall:iterations=20000",
            "--workload",
            "tcp_rr:duration=500ms,direction=[out,in]",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    let ratio = rows.iter().find(|r| r["environment"] == "uml" && r["metric"] == "syscall_time").unwrap()
        ["overhead"]["ratio"]
        .as_f64()
        .unwrap();
    assert!(ratio > 5.0, "a system call in UML costs only {ratio:.1}× native: not in the guest?");
    let rr: Vec<f64> = rows
        .iter()
        .filter(|r| r["environment"] == "uml" && r["metric"] == "tcp_rr_rate")
        .map(|r| r["mean"].as_f64().unwrap())
        .collect();
    assert!(rr.len() == 2 && rr.iter().all(|&x| x > 100.0), "both directions through the tap: {rr:?}");
    let uml_start = doc["environments"].as_array().unwrap().iter().find(|x| x["name"] == "uml").unwrap()
        ["start_ms_mean"]
        .as_f64()
        .unwrap();
    assert!(uml_start > 100.0, "a kernel booted in {uml_start} ms?");
    assert_no_leftovers(&state);
    assert!(processes_mentioning(state.to_str().unwrap()).is_empty());
    assert_eq!(before, root_netns_snapshot());

    let child = vp_spawn(
        &[
            "run",
            "--env",
            "uml",
            "--workload",
            "tcp_rr:duration=60s",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let pid = child.id();
    wait_for(|| (lab_namespaces().len() >= 3).then_some(()), 20.0).expect("the lab");
    std::thread::sleep(std::time::Duration::from_millis(4000));
    assert!(!processes_mentioning(state.to_str().unwrap()).is_empty(), "the guest is running");
    kill(pid, 9);
    let _ = child.wait_with_output();
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "1", "--db", db.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_no_leftovers(&state);
    let left = wait_for(|| processes_mentioning(state.to_str().unwrap()).is_empty().then_some(()), 5.0);
    assert!(left.is_some(), "guest processes left: {:?}", processes_mentioning(state.to_str().unwrap()));
    assert_eq!(before, root_netns_snapshot());
    Outcome::Pass
}

/// QEMU processes of virtperf (named `vpPID-...` with debug-threads).
fn qemu_processes() -> Vec<String> {
    processes_mentioning("debug-threads=on")
        .into_iter()
        .filter(|l| l.contains("qemu-system") && l.contains("-name vp"))
        .collect()
}

fn need_qemu() -> Option<String> {
    need_root_and("qemu-system-x86_64").or_else(|| {
        (!std::path::Path::new("/bin/busybox").exists())
            .then(|| "needs busybox-static (apt-get install busybox-static, or make deps)".to_string())
    })
}

/// The done-when command, smaller: native, QEMU with virtio-net and with e1000 (TCG on
/// hosts without usable KVM), TCP through the guest's NIC and memcpy inside it; the image is
/// found in the cache the second time; nothing is left behind.
fn qemu_guests_carry_tcp_through_virtio_and_e1000() -> Outcome {
    if let Some(why) = need_qemu() {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let db = dir.path().join("q.db");
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let qemus_before = qemu_processes();
    let before = root_netns_snapshot();
    let b1 = vp(&["image", "build", "--json"], &env);
    assert!(b1.status.success(), "{}", String::from_utf8_lossy(&b1.stderr));
    let b2 = vp(&["image", "build", "--json"], &env);
    let j1: serde_json::Value = serde_json::from_slice(&b1.stdout).unwrap();
    let j2: serde_json::Value = serde_json::from_slice(&b2.stdout).unwrap();
    assert_eq!(j1["hash"], j2["hash"]);
    assert_eq!(j2["built"], false, "an unchanged image is found in the cache");
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "qemu:nic=virtio",
            "--env",
            "qemu:nic=e1000",
            "--workload",
            "tcp_stream:duration=1s",
            "--workload",
            "memcpy:size=4MiB,copies=4",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--json",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    let mean = |env: &str, metric: &str| -> f64 {
        rows.iter()
            .find(|r| r["environment"] == env && r["metric"] == metric)
            .unwrap_or_else(|| panic!("{env} {metric}"))["mean"]
            .as_f64()
            .unwrap()
    };
    let (v, e) = (mean("qemu:nic=virtio", "tcp_goodput"), mean("qemu:nic=e1000", "tcp_goodput"));
    assert!(v > 0.05 && e > 0.01, "goodput through the guests' NICs: virtio {v}, e1000 {e} Gbit/s");
    assert!(v > e, "paravirtual beats emulated (the seeds' result): virtio {v} vs e1000 {e} Gbit/s");
    assert!(mean("qemu:nic=virtio", "memcpy_time") > mean("native", "memcpy_time"));
    for name in ["qemu:nic=virtio", "qemu:nic=e1000"] {
        let s = doc["environments"].as_array().unwrap().iter().find(|x| x["name"] == name).unwrap()
            ["start_ms_mean"]
            .as_f64()
            .unwrap();
        assert!(s > 200.0, "{name} booted in {s} ms?");
    }
    let manifest = vp(&["report", "--json", "--db", db.to_str().unwrap()], &env);
    assert!(
        String::from_utf8_lossy(&manifest.stdout).contains("linux-image"),
        "kernel package in the manifest"
    );
    assert_no_leftovers(&state);
    let left = wait_for(|| (qemu_processes() == qemus_before).then_some(()), 5.0);
    assert!(left.is_some(), "QEMU left running: {:?}", qemu_processes());
    assert_eq!(before, root_netns_snapshot());
    Outcome::Pass
}

/// A guest that never says hello fails its trial at the boot deadline with the reason; a
/// kernel QEMU cannot boot fails with QEMU's own words; QEMU killed in the middle of a trial
/// fails that trial only, and the next trial gets a fresh guest; virtperf killed takes QEMU
/// with it and the next start sweeps the rest.
fn qemu_faults_fail_the_trial_with_the_reason_and_the_run_goes_on() -> Outcome {
    if let Some(why) = need_qemu() {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let reasons = |db: &std::path::Path| -> Vec<(String, String)> {
        let c = rusqlite::Connection::open(db).unwrap();
        let mut st = c.prepare("SELECT status, coalesce(reason,'') FROM trials ORDER BY id").unwrap();
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.map(Result::unwrap).collect()
    };
    // Silent: the machine is created stopped (-S).
    let db = dir.path().join("silent.db");
    let out = vp(
        &[
            "run",
            "--env",
            "qemu:qemu_args=-S",
            "--workload",
            "noop",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--boot-timeout",
            "3s",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(1), "every trial failed: {}", String::from_utf8_lossy(&out.stderr));
    let r = reasons(&db);
    assert!(r[0].0 == "failed" && r[0].1.contains("no hello within"), "{r:?}");
    // Unbootable: QEMU refuses an ELF without the PVH note and says so.
    let db = dir.path().join("bad.db");
    let out = vp(
        &[
            "run",
            "--env",
            "qemu:kernel=/bin/true",
            "--workload",
            "noop",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(1));
    let r = reasons(&db);
    assert!(r[0].0 == "failed" && r[0].1.to_lowercase().contains("pvh"), "QEMU's own message: {r:?}");
    // Killed mid-trial.
    let db = dir.path().join("kill.db");
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "qemu",
            "--workload",
            "sleep:duration=3s",
            "--reps",
            "3",
            "--warmup",
            "0",
            "--order",
            "sequential",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let run_pid = child.id();
    let needle = format!("name vp{run_pid}-");
    let qpid = wait_for(
        || {
            processes_mentioning(&needle)
                .first()
                .and_then(|l| l.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()))
        },
        30.0,
    )
    .expect("QEMU started");
    // Into the first trial (boot ≈ 3 s under TCG), then kill QEMU.
    let ready = || -> i64 {
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| {
                c.query_row("SELECT count(*) FROM instances WHERE status = 'ready'", [], |r| r.get(0))
            })
            .unwrap_or(0)
    };
    wait_for(|| (ready() > 0).then_some(()), 60.0).expect("the guest became ready");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill(qpid, 9);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = reasons(&db);
    assert_eq!(r.iter().filter(|x| x.0 == "failed").count(), 1, "{r:?}");
    assert_eq!(r.iter().filter(|x| x.0 == "ok").count(), 2, "a fresh guest for the rest: {r:?}");
    assert_no_leftovers(&state);
    assert!(processes_mentioning(&needle).is_empty());
    // virtperf itself killed: QEMU dies with it, the next start sweeps its cgroup and directory.
    let db = dir.path().join("kill9.db");
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "qemu",
            "--workload",
            "sleep:duration=30s",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--db",
            db.to_str().unwrap(),
        ],
        &env,
    );
    let needle = format!("name vp{}-", child.id());
    wait_for(|| (!processes_mentioning(&needle).is_empty()).then_some(()), 30.0).expect("QEMU started");
    kill(child.id(), 9);
    let _ = child.wait_with_output();
    let gone = wait_for(|| processes_mentioning(&needle).is_empty().then_some(()), 10.0);
    assert!(gone.is_some(), "QEMU outlived a kill -9 of virtperf: {:?}", processes_mentioning(&needle));
    assert!(!leftover_things(&state).is_empty(), "the ledger and cgroup are there for the sweep");
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "1", "--db", db.to_str().unwrap()],
        &env,
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("leftover"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_leftovers(&state);
    Outcome::Pass
}
