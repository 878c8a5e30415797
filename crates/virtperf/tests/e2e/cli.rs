//! e2e: the command line: the agent protocol, bad input, examples, run/report/export, doctor.

use crate::util::*;

pub(crate) fn agent_answers_every_frame_and_survives_garbage() -> Outcome {
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

pub(crate) fn bad_input_exits_2_and_creates_nothing() -> Outcome {
    let fx = Fixture::new();
    let db_s = fx.db_str();
    let bad_file = fx.path("bad.toml");
    std::fs::write(
        &bad_file,
        "reps = 3\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nsize = \"lots\"\n",
    )
    .unwrap();
    let big = fx.path("big.toml");
    std::fs::write(&big, format!("name = \"{}\"\n", "x".repeat(2 << 20))).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "--env", "native", "--workload", "memcpy:size=-1"], "key `size`"),
        (vec!["run", "--env", "xen9", "--workload", "cpu"], "unknown environment kind `xen9`"),
        (vec!["run", "--env", "native", "--workload", "tcp_rr", "--lab", "switch=vde"], "key `lab.switch`"),
        (
            vec!["run", "--env", "native", "--workload", "tcp_rr", "--lab", "switch_cpus=0"],
            "no process to pin",
        ),
        (
            vec!["run", "--env", "native", "--workload", "tcp_rr", "--lab", "switch=ovs,switch_vcpus=2"],
            "key `lab.switch_vcpus`",
        ),
        (
            words("run --env native --workload tcp_rr --lab switch=driver-domain,switch_guest=uml"),
            "cannot bridge",
        ),
        (
            words("run --env native --workload tcp_rr --lab switch=driver-domain,switch_guest=gvisor"),
            "key `lab.switch_guest`",
        ),
        (
            words("run --env native --workload tcp_rr --lab switch=driver-domain,switch_cap=300%"),
            "key `lab.switch_cap`",
        ),
        (
            vec!["run", "--env", "native", "--workload", "cpu", "--precision", "5%", "--launches", "2"],
            "key `launches`",
        ),
        (
            vec!["run", "--env", "native", "--workload", "cpu", "--precision", "5%", "--launches", "3"],
            "needs at least 4 launches",
        ),
        (
            vec!["run", "--env", "native", "--workload", "cpu", "--precision", "5%", "--reps", "3"],
            "needs at least 4 repetitions",
        ),
        (
            vec!["run", "--env", "container", "--workload", "cpu", "--precision", "5%"],
            "has none on its machine",
        ),
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
        (vec!["run", "--env", "native:instances=0", "--workload", "cpu"], "key `instances`"),
        (vec!["run", "--env", "qemu:memory=8GiB,instances=[1,4]", "--workload", "cpu"], "key `instances`"),
        (
            words("run --env native:instances=2 --env container --workload tcp_rr:pairs=all"),
            "key `instances`",
        ),
        (vec!["run", "--env", "uml:kernel=/nonexistent", "--workload", "cpu"], "key `kernel`"),
        (vec!["run", "--env", "qemu:initrd=/etc/hostname", "--workload", "cpu"], "key `initrd`"),
        (vec!["run", "--env", "qemu:vcpus=0", "--workload", "cpu"], "key `vcpus`"),
        (vec!["run", "--env", "qemu:pin=77", "--workload", "cpu"], "CPU 77 does not exist"),
        // Bounds (issue 66): a year's deadline, a rate beyond any link, a file without end.
        (words("run --env native --workload noop --timeout 100000000years"), "key `timeout`"),
        (words("run --env native --workload tcp_stream --lab rate=1e300"), "key `lab.rate`"),
        (words("run --env native --workload tcp_stream --lab rate=2tbit"), "1 Tbit/s"),
        (vec!["run", "/dev/zero"], "not a regular file"),
        (vec!["run", big.to_str().unwrap()], "larger than 1 MiB"),
        (words("run --env native --workload noop --precision 5% --budget 400days"), "key `budget`"),
    ];
    for (args, needle) in cases {
        let mut a = args.clone();
        a.extend(["--db", db_s]);
        let out = vp(&a, &[("VIRTPERF_STATE_DIR", fx.path("state").to_str().unwrap())]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
        assert!(!fx.db.exists(), "{args:?} created the database");
        assert!(!fx.path("state").exists(), "{args:?} created the state directory");
    }
    read_only_commands_never_write_and_refuse_what_is_not_theirs(&fx);
    Outcome::Pass
}

/// report, export, compare and history open a database to read it only: someone else's SQLite
/// file is refused and left byte for byte as it was (before, `report` turned it to WAL and added
/// virtperf's tables), and so is a text file; a database whose rows disagree is refused with the
/// table and the row, where the report used to panic on an index.
fn read_only_commands_never_write_and_refuse_what_is_not_theirs(fx: &Fixture) {
    let foreign = fx.path("foreign.db");
    let made = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import sqlite3; c=sqlite3.connect('{}'); c.execute('create table t(a)'); c.commit()",
                foreign.display()
            ),
        ])
        .status();
    if !made.is_ok_and(|s| s.success()) {
        dropped("someone else's SQLite file", "python3's sqlite3 did not make one");
    } else {
        let before = std::fs::read(&foreign).unwrap();
        for cmd in [&["report"][..], &["export", "--format", "csv"], &["history"]] {
            let mut a = cmd.to_vec();
            a.extend(["--db", foreign.to_str().unwrap()]);
            let out = vp(&a, &[]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
            assert!(err.contains("not virtperf's"), "{cmd:?}: {err}");
        }
        assert_eq!(
            std::fs::read(&foreign).unwrap(),
            before,
            "a read-only command changed someone else's file"
        );
        assert!(!fx.path("foreign.db-wal").exists(), "no WAL made of someone else's file");
    }
    let text = fx.file("notes.txt", "hello\n");
    let out = vp(&["report", "--db", text.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an SQLite database"));
    // A run of ours, then a row made inconsistent by hand.
    let db = fx.path("mine.db");
    let state = fx.path("state-ro");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "2", "--db", db.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = std::fs::read(&db).unwrap();
    let out = vp(&["report", "--db", db.to_str().unwrap()], &env);
    assert!(out.status.success());
    assert_eq!(std::fs::read(&db).unwrap(), before, "report wrote the database");
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute("UPDATE trials SET env_idx = 7 WHERE id = (SELECT min(id) FROM trials)", []).unwrap();
    drop(c);
    let out = vp(&["report", "--db", db.to_str().unwrap()], &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("inconsistent: table trials, row id") && err.contains("env_idx 7"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

pub(crate) fn examples_validate() -> Outcome {
    let root = repo_root();
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 3, "expected the example experiments");
    // This machine, then every host profile of this machine kind (VIRTPERF_HOST_FACTS: the
    // validation of another machine's sizes and availability, whatever machine runs the suite).
    let mut profiles: Vec<Option<PathBuf>> = vec![None];
    for e in std::fs::read_dir(root.join("host-profiles")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            profiles.push(Some(p));
        }
    }
    assert!(profiles.len() >= 3, "the Intel and AMD profiles: {profiles:?}");
    for profile in &profiles {
        let env: Vec<(&str, &str)> =
            profile.iter().map(|p| ("VIRTPERF_HOST_FACTS", p.to_str().unwrap())).collect();
        for p in &examples {
            let out = vp(&["run", p.to_str().unwrap(), "--dry-run"], &env);
            let text = String::from_utf8_lossy(&out.stdout);
            // 3 = valid but an environment cannot run on this host: only without root here.
            let ok = out.status.code() == Some(0) || (!is_root() && out.status.code() == Some(3));
            assert!(
                ok,
                "{} under {profile:?}: {:?}\n{text}{}",
                p.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("valid"));
            if let Some(pf) = profile {
                let name = pf.file_stem().unwrap().to_string_lossy();
                assert!(text.contains(&format!("host facts from {name}")), "{text}");
            }
            if p.ends_with("memory.toml") {
                assert!(text.contains("sized from the host: stream: elements = "), "{text}");
            }
        }
        // What doctor decides from a profile: QEMU on TCG (/dev/kvm is PVM on both kinds), and which
        // UML kernel can run, predicted from the XSAVE size without booting anything here.
        if let Some(pf) = profile {
            let name = pf.file_stem().unwrap().to_string_lossy().to_string();
            let out = vp(&["doctor", "--quick", "--json"], &[("VIRTPERF_HOST_FACTS", pf.to_str().unwrap())]);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(doc["host_facts"]["profile"].as_str(), Some(name.as_str()), "{doc:#}");
            let row = |env: &str| {
                doc["environments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["environment"] == env)
                    .unwrap()
                    .clone()
            };
            assert!(
                row("qemu")["detail"].as_str().unwrap().contains("TCG: /dev/kvm is PVM"),
                "{}",
                row("qemu")
            );
            assert_eq!(row("qemu:accel=kvm")["usable"], false);
            let uml = row("uml");
            let detail = uml["detail"].as_str().unwrap_or_default();
            if has("linux.uml") {
                match name.as_str() {
                    "intel-xeon" | "intel-xeon-amx" => assert!(
                        detail.contains("cannot save this CPU's XSAVE state (11008 bytes")
                            && detail.contains("predicted"),
                        "{uml}"
                    ),
                    _ => assert!(detail.contains("boots here"), "{name}: {uml}"),
                }
            }
        }
        // A measurement never runs on replaced facts: refused as bad input, nothing created.
        if let Some(pf) = profile {
            let fx = Fixture::new().with_var("VIRTPERF_HOST_FACTS", pf.to_str().unwrap());
            let out = fx.vp("run --env native --workload noop");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(err.contains("validation only") && !fx.db.exists(), "{err}");
        }
    }
    // A facts file that is wrong is bad input naming the file, the line and the key.
    let fx = Fixture::new();
    let text = std::fs::read_to_string(root.join("host-profiles/intel-xeon.toml")).unwrap();
    let bad = fx.file("bad.toml", &text.replace("cpus = 2", "cpus = \"two\""));
    let out = vp(
        &["run", "--dry-run", "--env", "native", "--workload", "noop"],
        &[("VIRTPERF_HOST_FACTS", bad.to_str().unwrap())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = text.lines().position(|l| l.starts_with("cpus =")).unwrap() + 1;
    assert!(err.contains(&format!("bad.toml:{line}: key `cpus`")), "{err}");
    // `doctor --facts` prints this machine's facts in the format the override reads.
    let out = vp(&["doctor", "--facts"], &[]);
    let mine = fx.file("mine.toml", &String::from_utf8_lossy(&out.stdout));
    let out = vp(
        &["run", "--dry-run", "--env", "native", "--workload", "stream"],
        &[("VIRTPERF_HOST_FACTS", mine.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    Outcome::Pass
}

pub(crate) fn native_run_report_export_agree() -> Outcome {
    let fx = Fixture::new();
    let out = fx.ok("run --env native --env native:name=pinned,cpuset=0 --workload \
         cpu:iterations=200000 --workload pde:n=[16,32],iterations=5 --reps 5 --json");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let results = run["results"].as_array().unwrap();
    // 3 cases × 2 envs × (metric + host_cpu_time)
    assert_eq!(results.len(), 12, "{results:#?}");
    for r in results {
        assert_eq!(r["n"], 5);
        match r["ci95"].as_array() {
            Some(ci) => assert!(ci[0].as_f64().unwrap() <= r["mean"].as_f64().unwrap()),
            None => {
                assert!(r["no_ci"].as_str().is_some_and(|w| w.contains("equal")), "n = 5 without a CI: {r}")
            }
        }
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
    let again = fx.report();
    assert_eq!(again["results"], run["results"]);
    let t = fx.text("report");
    let verdict = ["≈ same", "slower", "faster", "inconclusive"].iter().any(|v| t.contains(v));
    assert!(t.contains("native (base)") && t.contains("Mops/s") && verdict, "the answer in words: {t}");
    // The JSON says each ratio in the words the terminal prints: every ratio has a verdict whose
    // phrase leads with its word, and whose cost interval holds its cost.
    for r in run["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["overhead"].is_null() && r["better"] != "neither")
    {
        let v = &r["verdict"];
        let (word, phrase) = (v["word"].as_str().unwrap_or(""), v["phrase"].as_str().unwrap_or(""));
        let leads = match word {
            "same" => phrase.starts_with("≈ same: "),
            "inconclusive" => phrase.starts_with("inconclusive"),
            "no interval" => phrase.starts_with("no interval"),
            w => phrase.split(" (").next().is_some_and(|head| head.ends_with(w)),
        };
        assert!(leads, "{word:?} / {phrase:?}: {r}");
        if let (Some(c), Some([l, h])) =
            (v["cost"].as_f64(), v["cost_ci"].as_array().map(|a| [a[0].as_f64(), a[1].as_f64()]))
        {
            assert!(l.unwrap() <= c && c <= h.unwrap(), "{v}");
        }
        // Said in the terminal where its metric is shown (the summary shows headline metrics).
        let shown = r["metric"].as_str().is_some_and(|m| t.contains(m));
        if shown && word != "no interval" && word != "inconclusive" {
            assert!(
                t.contains(word) || word == "same" && t.contains("≈ same"),
                "{word} not in the terminal's answer: {t}"
            );
        }
    }
    let full = fx.text("report --full");
    assert!(
        full.contains("native (baseline)") && full.contains("cpu_rate (Mops/s)") && full.contains("×"),
        "{full}"
    );
    // export: every sample, warm-ups included.
    let csv = fx.text("export --format csv");
    assert!(csv.starts_with("run_id,trial_id,seq,environment,workload,params,rep,warmup,status"));
    // Each trial: its metric and the same metric on the host clock (METRIC_host).
    assert_eq!(csv.lines().count(), 1 + 2 * 3 * 6 * 2, "{csv}");
    let j = fx.export();
    assert_eq!(j["trials"].as_array().unwrap().len(), 36);
    assert!(j["experiment"].as_str().unwrap().contains("[[workload]]"));
    // Start time is a measurement: n, mean, CI, min and max per environment.
    for e in run["environments"].as_array().unwrap() {
        let st = &e["start_ms"];
        assert!(st["n"].as_u64().is_some_and(|n| n >= 1) && st["min"].as_f64() <= st["max"].as_f64(), "{e}");
        assert!(
            st["mean"].as_f64() >= st["min"].as_f64() && st["mean"].as_f64() <= st["max"].as_f64(),
            "{e}"
        );
    }
    // A cell measured once claims no interval: no `± 0`, no ratio CI.
    let db1 = fx.path("one.db");
    let out = vp(
        &[
            "run",
            "--env",
            "native",
            "--env",
            "native:name=again",
            "--workload",
            "cpu:iterations=100000",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--db",
            db1.to_str().unwrap(),
        ],
        &fx.env(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let one: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = row_or_fail(&one, "again", "cpu_rate");
    assert_eq!(r["n"], 1);
    assert!(r["ci95"].is_null() && r["no_ci"].as_str().is_some_and(|w| w.starts_with("n = 1")), "{r}");
    assert!(r["overhead"]["ci95"].is_null() && r["overhead"]["no_ci"].is_string(), "{r}");
    let t = vp(&["report", "--db", db1.to_str().unwrap()], &[]);
    let t = String::from_utf8_lossy(&t.stdout);
    assert!(t.contains("no interval") && !t.contains("± 0 "), "{t}");
    let t = vp(&["report", "--full", "--db", db1.to_str().unwrap()], &[]);
    let t = String::from_utf8_lossy(&t.stdout);
    assert!(t.contains("(n=1)") && !t.contains("± 0 ") && t.contains("no interval"), "{t}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

pub(crate) fn doctor_lists_every_kind_with_fixes() -> Outcome {
    let fx = Fixture::new();
    let out = fx.bare("doctor --json");
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
        } else if r["needs_prepare"] == true {
            // Usable after a one-time build doctor does not start (virtperf's UML kernel).
            assert!(r["detail"].as_str().is_some_and(|d| d.contains("virtperf image build")), "{r}");
        } else {
            assert!(r["probe_ms"].is_number(), "a usable kind was really launched: {r}");
        }
        let detail = r["detail"].as_str().unwrap_or_default();
        assert!(!detail.contains('\n') && detail.len() < 600, "one line, not a console dump: {r}");
    }
    assert_eq!(rows.iter().find(|r| r["environment"] == "native").unwrap()["usable"], true);
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The suite's own deadline: a virtperf that does not end within its limit is stopped (SIGTERM:
/// it cleans up) and fails its test with the command line, instead of blocking the suite.
pub(crate) fn a_hung_virtperf_fails_its_test_with_the_command_line() -> Outcome {
    let fx = Fixture::new();
    let args = words("run --env native --workload sleep:duration=60s --reps 1 --warmup 0 --db");
    let args = [&args[..], &[fx.db_str()]].concat();
    let t0 = Instant::now();
    // The panic is the expected outcome here: not printed as if a test had failed.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = std::panic::catch_unwind(|| vp_within(&args, &fx.env(), Duration::from_secs(2)));
    std::panic::set_hook(hook);
    let msg = match caught {
        Ok(out) => panic!("a 60 s trial ended within the 2 s deadline? {:?}", out.status),
        Err(p) => p.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(msg.contains("did not end within 2 s") && msg.contains("sleep:duration=60s"), "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(20), "stopped in {:?}", t0.elapsed());
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// A required environment (VIRTPERF_E2E_REQUIRE, set by .ci/run) whose test would skip fails
/// that test instead; an environment not required still skips with its reason; one that can run
/// goes on. And the environments .ci/run requires are doctor's own rows.
pub(crate) fn a_required_environment_that_would_skip_fails_its_test() -> Outcome {
    let required = vec!["gvisor".to_string(), "uml:kernel=virtperf".to_string(), "iperf3".to_string()];
    let why = || Some("doctor says no".to_string());
    let fails = |name: &'static str| {
        let r = required.clone();
        std::panic::catch_unwind(move || unless_required_in(&r, name, why()))
    };
    let failed = fails("gvisor");
    let message = failed.as_ref().err().and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_default();
    assert!(message.contains("gvisor is required") && message.contains("doctor says no"), "{failed:?}");
    // A variant requires its kind (`uml:kernel=virtperf` requires `uml`, which `auto` picks),
    // a required kind the host's root and the programs its tests use, a tool itself.
    for name in ["uml:kernel=virtperf", "uml", "root", "strace", "iperf3"] {
        assert!(fails(name).is_err(), "{name} is required by {required:?}");
    }
    for name in ["qemu", "runc", "fio", "virsh"] {
        assert_eq!(unless_required_in(&required, name, why()), why(), "{name}: not required, skipped");
    }
    assert!(is_required_in(&["container".into()], "runc") && is_required_in(&["libvirt".into()], "qemu-img"));
    assert!(!is_required_in(&["uml".into()], "uml:kernel=virtperf"), "a kind does not require each variant");
    assert_eq!(unless_required_in(&required, "gvisor", None), None, "usable: runs");
    // .ci/run's list names rows doctor has or the tools the tests know (a misspelt one would
    // require nothing).
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run")).unwrap();
    let line =
        ci.lines().find(|l| l.contains("VIRTPERF_E2E_REQUIRE=")).expect(".ci/run sets VIRTPERF_E2E_REQUIRE");
    let list = line.split_once('=').unwrap().1.trim_matches('"');
    let rows = doctor_rows().unwrap();
    let rows: Vec<&str> = rows.iter().filter_map(|r| r["environment"].as_str()).collect();
    for name in list.split(',') {
        assert!(
            rows.contains(&name) || TOOLS.iter().any(|t| t.0 == name),
            ".ci/run requires {name}, which is neither a row of doctor's ({rows:?}) nor one of util::TOOLS"
        );
    }
    println!("    required on this machine kind by .ci/run: {list}; now: {:?}", required_envs());
    Outcome::Pass
}
