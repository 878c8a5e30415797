//! e2e: reports: the HTML page in a headless browser, comparing runs.

use crate::util::*;

/// The headless browser Debian packages (chromium-headless-shell, or chromium).
fn browser() -> Option<&'static str> {
    ["chromium-headless-shell", "chromium"].into_iter().find(|b| has(b))
}

/// Loads `page` in a headless browser inside a network namespace with no network (any fetch
/// would fail and log), with console logging on; returns (DOM after load, browser stderr).
fn browse(page: &std::path::Path, shot: Option<&std::path::Path>) -> (String, String) {
    let b = browser().unwrap();
    let profile = tempdir();
    let url = format!("file://{}", page.display());
    let mut args = vec![
        "-n".to_string(),
        b.to_string(),
        "--headless".into(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--no-first-run".into(),
        format!("--user-data-dir={}", profile.path().display()),
        "--enable-logging=stderr".into(),
        "--v=0".into(),
        "--virtual-time-budget=3000".into(),
        "--window-size=1280,2400".into(),
    ];
    match shot {
        Some(s) => args.push(format!("--screenshot={}", s.display())),
        None => args.push("--dump-dom".into()),
    }
    args.push(url);
    let out = std::process::Command::new("unshare").args(&args).output().expect("unshare runs the browser");
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Console errors and refused loads the browser logged.
fn console_errors(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| {
            (l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("rror")))
                || l.contains("Refused to")
                || l.contains("net::ERR_")
        })
        .map(str::to_string)
        .collect()
}

/// A fixture run covering every section of the HTML report (samples, ratios, network CPU,
/// RFC 2544, disk matrix; instances and all pairs in runs of their own) is written as one page
/// per run, loaded by a real headless browser with no network: no console error, no request,
/// every expected figure drawn and non-empty; a screenshot is kept as an artifact.
pub(crate) fn html_report_renders_offline_in_a_headless_browser() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    if browser().is_none() {
        return Outcome::Skip(
            "needs a headless browser (apt-get install chromium-headless-shell, or make deps)".into(),
        );
    }
    let dir = tempdir();
    let db = dir.path().join("h.db");
    let state = dir.path().join("state");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let env =
        [("VIRTPERF_STATE_DIR", state.to_str().unwrap()), ("VIRTPERF_SCRATCH", scratch.to_str().unwrap())];
    let dbs = db.to_str().unwrap();
    let runs: [(&[&str], &[&str]); 3] = [
        (
            &["--env", "native", "--env", "container"],
            &[
                "--workload",
                "memcpy:size=1MiB,copies=2",
                "--workload",
                "tcp_stream:duration=400ms",
                "--workload",
                "rfc2544:quick=true,frame_size=[64,1518],direction=out",
                "--workload",
                "disk:file_size=[1MiB,2MiB],record_size=[64KiB,256KiB],modes=write+read",
            ],
        ),
        (&["--env", "container:instances=[1,2]"], &["--workload", "tcp_stream:duration=300ms"]),
        (&["--env", "native", "--env", "container"], &["--workload", "tcp_rr:duration=300ms,pairs=all"]),
    ];
    for (envs, wls) in runs {
        let mut args = vec!["run"];
        args.extend(envs);
        args.extend(wls);
        args.extend(["--reps", "2", "--warmup", "0", "--db", dbs]);
        let out = vp(&args, &env);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let expected: [&[&str]; 3] = [
        &[
            "fig-forest-",
            "fig-samples-memcpy",
            "fig-cpu-per-gbit",
            "fig-cpu-series-",
            "fig-rfc2544-throughput",
            "fig-rfc2544-latency",
            "fig-disk-",
        ],
        &["fig-instances-"],
        &["fig-pairs-"],
    ];
    let artifacts = repo_root().join("target/e2e-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    for (run, want) in expected.iter().enumerate() {
        let run_id = (run + 1).to_string();
        let page = dir.path().join(format!("run{run_id}.html"));
        let svgdir = dir.path().join(format!("svg{run_id}"));
        let out = vp(
            &[
                "report",
                &run_id,
                "--db",
                dbs,
                "--html",
                page.to_str().unwrap(),
                "--svg",
                svgdir.to_str().unwrap(),
            ],
            &env,
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let html = std::fs::read_to_string(&page).unwrap();
        // Self-contained: no reference to anything outside the page.
        for bad in ["src=\"http", "href=\"http", "url(http", "@import", "<link"] {
            assert!(!html.contains(bad), "run {run_id}: the page references something outside: {bad}");
        }
        let (dom, stderr) = browse(&page, None);
        let errors = console_errors(&stderr);
        assert!(errors.is_empty(), "run {run_id}: the browser logged {errors:#?}");
        let drawn =
            dom.split("data-figures=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_else(|| {
                panic!("run {run_id}: the page's check did not run: {}", &dom[..dom.len().min(400)])
            });
        let (total, ok) = drawn.split_once('/').unwrap();
        assert!(
            total.parse::<usize>().unwrap() > 0 && total == ok,
            "run {run_id}: {ok} of {total} figures drawn"
        );
        for w in *want {
            let present = dom
                .match_indices(w)
                .any(|(i, _)| dom[i..].split('>').next().is_some_and(|tag| tag.contains("data-drawn=\"1\"")));
            assert!(present, "run {run_id}: no drawn figure {w}*");
        }
        // The same figures as SVG files.
        let files = std::fs::read_dir(&svgdir).unwrap().count();
        assert_eq!(files.to_string(), total, "run {run_id}: one SVG file per figure");
        println!("    run {run_id}: {total} figures drawn, no console error");
        let shot = artifacts.join(format!("report-run{run_id}.png"));
        let _ = browse(&page, Some(&shot));
        assert!(
            std::fs::metadata(&shot).map(|m| m.len() > 10_000).unwrap_or(false),
            "screenshot {}",
            shot.display()
        );
    }
    // Bad input: an unknown run, a file that cannot be written; nothing half-written.
    let nowhere = dir.path().join("no/such/dir/r.html");
    for (args, what) in [
        (vec!["report", "99", "--db", dbs, "--html", "x.html"], "run"),
        (vec!["report", "--db", dbs, "--html", nowhere.to_str().unwrap()], "does not exist"),
        (vec!["report", "--db", dbs, "--html", dir.path().to_str().unwrap()], "directory"),
    ] {
        let out = vp(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(what),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!std::path::Path::new("x.html").exists());
    assert_no_leftovers(&state);
    Outcome::Pass
}

/// The default experiment's shape twice: the second time the container gets half a CPU; compare
/// flags the container's compute metric, not native's; the same run against itself flags
/// nothing; runs that share nothing are refused.
pub(crate) fn compare_flags_a_slowed_environment_only() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let dir = tempdir();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let state = dir.path().join("state");
    let env = [("VIRTPERF_STATE_DIR", state.to_str().unwrap())];
    for (db, cpus) in [(&a, "cpus=2"), (&b, "cpus=0.5")] {
        let c = format!("container:name=container,{cpus}");
        let out = vp(
            &[
                "run",
                "--env",
                "native",
                "--env",
                &c,
                "--workload",
                "cpu:iterations=100000000",
                "--reps",
                "5",
                "--warmup",
                "1",
                "--db",
                db.to_str().unwrap(),
            ],
            &env,
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = vp(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--json"], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let regressions: Vec<String> = c["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["verdict"] == "regression")
        .map(|x| format!("{} / {}", x["environment"].as_str().unwrap(), x["metric"].as_str().unwrap()))
        .collect();
    assert!(
        regressions.iter().any(|r| r == "container / cpu_rate"),
        "the half-CPU container is flagged: {c:#}"
    );
    // Native's own figures did not change (its CPU-time rows may wander on a noisy host).
    assert!(!regressions.iter().any(|r| r == "native / cpu_rate"), "native did not change: {regressions:?}");
    let text = vp(&["compare", a.to_str().unwrap(), b.to_str().unwrap()], &env);
    assert!(String::from_utf8_lossy(&text.stdout).contains("REGRESSION"));
    let fail = vp(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--fail-on-regression"], &env);
    assert_eq!(fail.status.code(), Some(1));
    let same = vp(&["compare", &format!("{}:1", a.display()), &format!("{}:1", a.display()), "--json"], &env);
    let same: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(same["regressions"], 0, "{same:#}");
    // Nothing in common, an unknown run, a database that is not there: exit 2 with the reason.
    let other = dir.path().join("o.db");
    let out = vp(
        &["run", "--env", "native", "--workload", "noop", "--reps", "2", "--db", other.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success());
    for (args, what) in [
        (vec!["compare", a.to_str().unwrap(), other.to_str().unwrap()], "nothing to compare"),
        (vec!["compare", "--db", a.to_str().unwrap(), "1", "7"], "7"),
        (vec!["compare", "/no/such.db", a.to_str().unwrap()], "neither"),
    ] {
        let out = vp(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(what),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_no_leftovers(&state);
    Outcome::Pass
}
