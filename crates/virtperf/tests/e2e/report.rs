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
    let child = std::process::Command::new("unshare")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare runs the browser");
    // A page load takes seconds; a browser that hangs fails the test instead of the suite.
    let out = Spawned::new(child, format!("the browser on {}", page.display()))
        .wait_within(Duration::from_secs(120));
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

/// The attributes the page's own check script writes on `<body>` after load.
fn body_attr<'a>(dom: &'a str, name: &str) -> &'a str {
    dom.split(&format!("{name}=\"")).nth(1).and_then(|r| r.split('"').next()).unwrap_or("")
}

/// Runs shaped like the examples whose pages people read (the default's families, seed 000's
/// instances, seed 003's RFC 2544, seed 001's disk matrix and all pairs, the mechanisms and the
/// timer, six environments on one axis, a run without native), each written as one page, loaded
/// by a real headless browser with no network at 1280 px: no console error, no request, every
/// figure drawn, the smallest figure text ≥ 11 px as rendered (getBoundingClientRect), no figure
/// or table past the right edge, no two figures drawing the same data, no two texts of a figure
/// over each other; the figures also as SVG and PNG files; screenshots kept as artifacts.
pub(crate) fn html_report_renders_offline_in_a_headless_browser() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    if browser().is_none() {
        return skip(
            "browser",
            "needs a headless browser (apt-get install chromium-headless-shell, or make deps)",
        );
    }
    let fx = Fixture::new().with_scratch();
    let dbs = fx.db_str();
    let six: Vec<String> = (1..=5).map(|i| format!("container:name=container-number-{i}")).collect();
    let mut six_args: Vec<&str> = vec!["--env", "native"];
    for c in &six {
        six_args.extend(["--env", c.as_str()]);
    }
    six_args.extend(["--workload", "cpu:target_time=50ms", "--workload", "syscall:target_time=50ms"]);
    // (name, run arguments, figures that must be drawn)
    let runs: Vec<(&str, Vec<&str>, &[&str])> =
        vec![
        (
            "default",
            words(
                "--env native --env container --workload cpu:target_time=50ms --workload \
                 intmix:target_time=50ms --workload syscall:target_time=50ms --workload \
                 memcpy:size=1MiB,copies=2 --workload tcp_stream:duration=400ms --workload \
                 tcp_rr:duration=300ms"),
            &[
                "fig-overview",
                "fig-cost-compute",
                "fig-samples-memcpy",
                "fig-cpu-per-gbit",
                "fig-cpu-series-",
            ],
        ),
        (
            "instances",
            vec!["--env", "container:instances=[1,2]", "--workload", "tcp_stream:duration=300ms"],
            &["fig-instances-"],
        ),
        (
            "rfc2544",
            words(
                "--env native --env container --workload \
                 rfc2544:quick=true,frame_size=[64,1518],direction=out,mlr_trial_duration=250ms,mlr_duration_sum=500ms,mlr_width=10,\
                 trial_duration=300ms,search_duration=150ms,b2b_duration=50ms"),
            &["fig-rfc2544-throughput", "fig-rfc2544-mlrsearch", "fig-rfc2544-latency"],
        ),
        (
            "disk",
            words(
                "--env native --env container --workload \
                 disk:file_size=[1MiB,2MiB],record_size=[64KiB,256KiB],modes=write+read"),
            &["fig-disk-"],
        ),
        (
            "mechanisms",
            words(
                "--env native --env container --workload pagefault:target_time=50ms --workload \
                 ctxswitch:target_time=50ms --workload fork:target_time=50ms --workload \
                 timer:duration=300ms"),
            &["fig-cost-system-calls-kernel", "fig-timer-histogram"],
        ),
        (
            "pairs",
            vec!["--env", "native", "--env", "container", "--workload", "tcp_rr:duration=300ms,pairs=all"],
            &["fig-pairs-"],
        ),
        ("six", six_args.clone(), &["fig-overview", "fig-samples-cpu"]),
        (
            "no-native",
            words("--env container:name=c1 --env container:name=c2,cpus=0.5 --workload cpu:target_time=50ms"),
            &["fig-samples-cpu"],
        ),
    ];
    let artifacts = repo_root().join("target/e2e-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    for (run, (name, args, want)) in runs.iter().enumerate() {
        let mut a = vec!["run"];
        a.extend(args.iter().copied());
        // An RFC 2544 trial is a whole search already (rfc2544's own default is one repetition).
        let reps = if *name == "rfc2544" { "1" } else { "3" };
        a.extend(["--reps", reps, "--warmup", "0", "--db", dbs]);
        let out = vp(&a, &fx.env());
        assert!(out.status.success(), "{a:?}: {}", String::from_utf8_lossy(&out.stderr));
        // The terminal summary keeps to 100 columns, whatever the number of environments.
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            assert!(l.chars().count() <= 100, "{name}: a {}-column summary line: {l}", l.chars().count());
        }
        let run_id = (run + 1).to_string();
        let page = fx.dir().join(format!("{name}.html"));
        let svgdir = fx.dir().join(format!("svg-{name}"));
        let pngdir = fx.dir().join(format!("png-{name}"));
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
                "--png",
                pngdir.to_str().unwrap(),
            ],
            &fx.env(),
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let html = std::fs::read_to_string(&page).unwrap();
        // Self-contained: no reference to anything outside the page.
        for bad in ["src=\"http", "href=\"http", "url(http", "@import", "<link"] {
            assert!(!html.contains(bad), "{name}: the page references something outside: {bad}");
        }
        if *name == "no-native" {
            assert!(
                html.contains("No native environment in this run"),
                "{name}: the natural baseline is named"
            );
            assert!(
                html.contains("faster") || html.contains("slower"),
                "{name}: c2 at half a CPU is compared with c1"
            );
        } else if *name != "pairs" {
            // (An all-pairs run has no environment-level ratio: its answer is the matrix.)
            assert!(html.contains("<ul class=\"lead\">\n<li>"), "{name}: the answer in sentences");
        }
        let (dom, stderr) = browse(&page, None);
        let errors = console_errors(&stderr);
        assert!(errors.is_empty(), "{name}: the browser logged {errors:#?}");
        let drawn = body_attr(&dom, "data-figures");
        assert!(!drawn.is_empty(), "{name}: the page's check did not run: {}", &dom[..dom.len().min(400)]);
        let (total, ok) = drawn.split_once('/').unwrap();
        assert!(total.parse::<usize>().unwrap() > 0 && total == ok, "{name}: {ok} of {total} figures drawn");
        for w in *want {
            let present = dom
                .match_indices(w)
                .any(|(i, _)| dom[i..].split('>').next().is_some_and(|tag| tag.contains("data-drawn=\"1\"")));
            assert!(present, "{name}: no drawn figure {w}*");
        }
        let min_text: f64 = body_attr(&dom, "data-min-text-px").parse().unwrap();
        let example = body_attr(&dom, "data-example");
        assert!(min_text >= 11.0, "{name}: a figure text renders {min_text} px tall (≥ 11 wanted)");
        let (right, width) = body_attr(&dom, "data-max-right").split_once('/').unwrap();
        assert!(
            right.parse::<f64>().unwrap() <= width.parse::<f64>().unwrap(),
            "{name}: a figure ends at {right} px of {width}"
        );
        assert_eq!(
            body_attr(&dom, "data-overflow"),
            "0",
            "{name}: something runs past the right edge: {example}"
        );
        assert_eq!(
            body_attr(&dom, "data-duplicates"),
            "0",
            "{name}: two figures draw the same data: {example}"
        );
        assert_eq!(body_attr(&dom, "data-overlaps"), "0", "{name}: texts printed over each other: {example}");
        // The same figures as SVG and PNG files.
        for (d, ext) in [(&svgdir, "svg"), (&pngdir, "png")] {
            let files: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
            assert_eq!(files.len().to_string(), total, "{name}: one {ext} file per figure");
            assert!(files.iter().all(|f| f.path().extension().is_some_and(|e| e == ext)));
        }
        println!(
            "    {name}: {total} figures drawn, smallest text {min_text} px, nothing overflows or overlaps"
        );
        let shot = artifacts.join(format!("report-{name}.png"));
        let _ = browse(&page, Some(&shot));
        assert!(
            std::fs::metadata(&shot).map(|m| m.len() > 10_000).unwrap_or(false),
            "screenshot {}",
            shot.display()
        );
    }
    // Bad input: an unknown run, a file that cannot be written; nothing half-written.
    let nowhere = fx.path("no/such/dir/r.html");
    for (args, what) in [
        (vec!["report", "99", "--db", dbs, "--html", "x.html"], "run"),
        (vec!["report", "--db", dbs, "--png", nowhere.to_str().unwrap()], "does not exist"),
        (vec!["report", "--db", dbs, "--html", nowhere.to_str().unwrap()], "does not exist"),
        (vec!["report", "--db", dbs, "--html", fx.dir().to_str().unwrap()], "directory"),
    ] {
        let out = vp(&args, &fx.env());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(what),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!std::path::Path::new("x.html").exists());
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The default experiment's shape twice: the second time the container gets half a CPU; compare
/// flags the container's compute metric, not native's; the same run against itself flags
/// nothing; runs that share nothing are refused.
pub(crate) fn compare_flags_a_slowed_environment_only() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let (a, b) = (fx.path("a.db"), fx.path("b.db"));
    for (db, cpus) in [("a.db", "cpus=2"), ("b.db", "cpus=0.5")] {
        fx.ok_on(
            db,
            &format!(
                "run --env native --env container:name=container,{cpus} --workload \
             cpu:iterations=100000000 --reps 5 --warmup 1"
            ),
        );
    }
    let out = vp(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--json"], &fx.env());
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
    let text = vp(&["compare", a.to_str().unwrap(), b.to_str().unwrap()], &fx.env());
    assert!(String::from_utf8_lossy(&text.stdout).contains("REGRESSION"));
    // For CI: a regression exits 4, whether asked as --fail-on-regression or --fail-on P%.
    let fail = vp(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--fail-on-regression"], &fx.env());
    assert_eq!(fail.status.code(), Some(4));
    let junit = fx.path("c.xml");
    let fail = vp(
        &[
            "compare",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--fail-on",
            "10%",
            "--junit",
            junit.to_str().unwrap(),
        ],
        &fx.env(),
    );
    assert_eq!(fail.status.code(), Some(4), "{}", String::from_utf8_lossy(&fail.stdout));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<failure") && xml.contains("cpu_rate"), "{xml}");
    let same =
        vp(&["compare", &format!("{}:1", a.display()), &format!("{}:1", a.display()), "--json"], &fx.env());
    let same: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(same["regressions"], 0, "{same:#}");
    // Nothing in common, an unknown run, a database that is not there: exit 2 with the reason.
    let other = fx.path("o.db");
    fx.ok_on("o.db", "run --env native --workload noop --reps 2");
    for (args, what) in [
        (vec!["compare", a.to_str().unwrap(), other.to_str().unwrap()], "nothing to compare"),
        (vec!["compare", "--db", a.to_str().unwrap(), "1", "7"], "7"),
        (vec!["compare", "/no/such.db", a.to_str().unwrap()], "neither"),
    ] {
        let out = vp(&args, &fx.env());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(what),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// `history` and `ab` on real runs: a native and a container computing; the container given half
/// a CPU from the fifth of eight runs on. `history` finds the change at that run, judges the latest run
/// against the level before it and exits 4 under `--fail-on`, with its JSON, JUnit, Bencher and a
/// page a browser draws; `ab` interleaves A and B (A B B A), flags the same regression runs against
/// runs, exits 4, and a second call with the same directory resumes with nothing left to run. Bad
/// input exits 2 and creates nothing.
pub(crate) fn history_and_ab_give_verdicts_ci_can_act_on() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let exp = |cpus: &str| {
        format!(
            "name = \"hist\"\nreps = 4\nwarmup = 1\n[[env]]\nkind = \"native\"\n[[env]]\nkind = \"container\"\nname = \"c\"\ncpus = {cpus}\n[[workload]]\nkind = \"cpu\"\niterations = 100000000\n"
        )
    };
    let (a, b) = (fx.path("a.toml"), fx.path("b.toml"));
    std::fs::write(&a, exp("2")).unwrap();
    std::fs::write(&b, exp("0.5")).unwrap();
    let db = fx.path("h.db");
    let dbs = db.to_str().unwrap();
    // Eight runs: the fewest in which a change point can be significant at 5 % (2 / C(8, 4)).
    for file in [&a, &a, &a, &a, &b, &b, &b, &b] {
        fx.ok_on("h.db", &format!("run {}", file.display()));
    }
    // The change: found at run 5, a regression of the container's rate overhead (×0.5).
    let out = vp(&["history", dbs, "--json", "--all"], &fx.env());
    assert_eq!(out.status.code(), Some(0), "no --fail-on: exit 0: {}", String::from_utf8_lossy(&out.stderr));
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["runs"].as_array().unwrap().len(), 8);
    let series = h["series"].as_array().unwrap();
    let c = series
        .iter()
        .find(|s| s["environment"] == "c" && s["metric"] == "cpu_rate")
        .unwrap_or_else(|| panic!("no container cpu_rate series: {h:#}"));
    assert_eq!(c["judged_on"], "overhead");
    let changes = c["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "one change in the container's rate: {c:#}");
    assert_eq!(changes[0]["run"], 4, "at the fifth run: {c:#}");
    assert_eq!(changes[0]["verdict"], "regression", "{c:#}");
    let ratio = changes[0]["ratio"].as_f64().unwrap();
    // Half a CPU halves the rate; a shared host can move the full-CPU side a little.
    assert!((0.35..0.7).contains(&ratio), "the change is ×{ratio}, about ×0.5 expected: {c:#}");
    // The latest run at the fifth: regressed against the four before it, exit 4, JUnit fails it.
    let junit = fx.path("h.xml");
    let html = fx.path("h.html");
    let src: Vec<String> = (1..=5).map(|i| format!("{dbs}:{i}")).collect();
    let mut args: Vec<&str> = vec!["history"];
    args.extend(src.iter().map(String::as_str));
    args.extend(["--fail-on", "10%", "--junit", junit.to_str().unwrap(), "--html", html.to_str().unwrap()]);
    let out = vp(&args, &fx.env());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "a regression in the latest run: exit 4\n{text}");
    assert!(text.starts_with("History of \"hist\": 5 run(s)"), "{text}");
    assert!(text.contains("REGRESSED on"), "the answer first: {text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let failed: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .filter_map(|n| n.parent())
        .map(|t| format!("{} {}", t.attribute("classname").unwrap_or(""), t.attribute("name").unwrap_or("")))
        .collect();
    assert!(failed.iter().any(|f| f.starts_with("c / cpu") && f.ends_with("cpu_rate")), "{failed:?}\n{xml}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("fig-history-"), "a figure per metric");
    match browser() {
        None => dropped("the history page in a browser", "no headless browser"),
        Some(_) => {
            let (dom, stderr) = browse(&html, None);
            assert!(console_errors(&stderr).is_empty(), "{stderr}");
            let (total, ok) = body_attr(&dom, "data-figures").split_once('/').unwrap_or(("", "x"));
            assert!(total.parse::<usize>().unwrap_or(0) > 0 && total == ok, "{ok} of {total} figures drawn");
            let example = body_attr(&dom, "data-example");
            assert_eq!(body_attr(&dom, "data-overflow"), "0", "past the right edge: {example}");
            assert_eq!(body_attr(&dom, "data-overlaps"), "0", "texts over each other: {example}");
        }
    }
    // Bencher's format of one run: every row a measure, overheads beside.
    let bmf = fx.path("bmf.json");
    fx.ok_on("h.db", &format!("report 5 --bencher {}", bmf.display()));
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bmf).unwrap()).unwrap();
    let bench =
        doc.as_object().unwrap().iter().find(|(k, _)| k.starts_with("c / cpu")).map(|(_, v)| v).unwrap();
    assert!(bench["cpu_rate"]["value"].as_f64().unwrap() > 0.0, "{doc:#}");
    let o = &bench["cpu_rate overhead"];
    assert!(o["lower_value"].as_f64().unwrap() <= o["value"].as_f64().unwrap(), "{doc:#}");

    // ab: A B B A, runs against runs.
    let dir = fx.path("ab");
    let ab_args = |json: bool| {
        let mut v = vec![
            "ab".to_string(),
            a.display().to_string(),
            b.display().to_string(),
            "--runs".into(),
            // Four a side: Welch's interval over 2 runs a side has as little as 1 degree of
            // freedom (t = 12.7), too wide for ×0.5 on a busy host (CI once said inconclusive);
            // over 4 a side t ≤ 3.2, and ABBAABBA cancels a linear drift.
            "4".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--run-args".into(),
            "--reps 3".into(),
            "--fail-on".into(),
            "10%".into(),
        ];
        if json {
            v.push("--json".into());
        }
        v
    };
    let args = ab_args(true);
    let out = vp(&args.iter().map(String::as_str).collect::<Vec<_>>(), &fx.env());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "B regressed: exit 4\n{err}");
    // "ab: run 2/4: B (b.toml) … 2 s"
    let order: String = err
        .lines()
        .filter(|l| l.starts_with("ab: run "))
        .filter_map(|l| l.split(": ").nth(2).and_then(|x| x.chars().next()))
        .collect();
    assert_eq!(order, "ABBAABBA", "{err}");
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = c["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["environment"] == "c" && x["metric"] == "cpu_rate")
        .unwrap_or_else(|| panic!("{c:#}"));
    assert_eq!(
        (row["verdict"].as_str(), row["a_n"].as_u64(), row["b_n"].as_u64()),
        (Some("regression"), Some(4), Some(4)),
        "{row:#}"
    );
    for k in 1..=8 {
        assert!(
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .any(|f| f.file_name().to_string_lossy().starts_with(&format!("0{k}-"))),
            "a log per run"
        );
    }
    // The same directory again: nothing left to run, the same verdict.
    let args = ab_args(false);
    let again = vp(&args.iter().map(String::as_str).collect::<Vec<_>>(), &fx.env());
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(4), "{err}");
    assert!(err.contains("holds 4 run(s) of A and 4 of B") && !err.contains("ab: run "), "{err}");
    assert!(String::from_utf8_lossy(&again.stdout).contains("REGRESSION"));

    // Bad input: exit 2, nothing made.
    let none = fx.path("never");
    for (args, what) in [
        (vec!["ab", a.to_str().unwrap(), "/no/such.toml", "--dir", none.to_str().unwrap()], "such.toml"),
        (
            vec![
                "ab",
                a.to_str().unwrap(),
                b.to_str().unwrap(),
                "--runs",
                "1",
                "--dir",
                none.to_str().unwrap(),
            ],
            "--runs 1",
        ),
        (vec!["history", "/no/such.db"], "neither"),
        (vec!["history", dbs, "--name", "other"], "no completed run named"),
        (vec!["history", dbs, "--fail-on", "five"], "percentage"),
    ] {
        let out = vp(&args, &fx.env());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
    assert!(!none.exists(), "a refused ab made its directory");
    fx.assert_no_leftovers();
    Outcome::Pass
}
