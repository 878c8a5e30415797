//! e2e: mechanisms: micro-benchmarks in every environment.

use crate::util::*;

/// Every microbenchmark and the timer on every environment this host runs (the others skipped with
/// doctor's reason), with checks a benchmark optimised away or pointed at the wrong thing would
/// fail: gVisor's and UML's system calls cost far more than native ones, a TCG guest's memory
/// loads cost more, latency grows with the working set, the timer woke as often as asked.
pub(crate) fn mechanisms_run_everywhere_and_make_physical_sense() -> Outcome {
    if let Some(why) = need_tool("root") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let candidates =
        [("container", "container"), ("gvisor", "gvisor"), ("qemu", "qemu:memory=768MiB,name=qemu")];
    let mut args = vec!["run".to_string(), "--env".into(), "native".into()];
    let (mut ran, mut skipped) = (vec!["native"], Vec::new());
    for (kind, spec) in candidates {
        let why = if kind == "qemu" { need_qemu() } else { doctor_unusable(kind) };
        match why {
            Some(w) => skipped.push(format!("{kind}: {w}")),
            None => {
                args.extend(["--env".into(), spec.to_string()]);
                ran.push(kind);
            }
        }
    }
    // Every UML kernel that boots here (the packaged one and virtperf's where both do).
    match doctor_unusable("uml") {
        Some(w) => skipped.push(format!("uml: {w}")),
        None => {
            for (name, param) in uml_kernels() {
                let extra = if param.is_empty() { String::new() } else { format!(",{param}") };
                args.extend(["--env".into(), format!("uml:mem=640MiB,name={name}{extra}")]);
                ran.push(name);
            }
        }
    }
    let workloads = [
        "syscall:iterations=20000",
        "cpuid:iterations=20000",
        "clock:iterations=50000",
        // A million RDTSCs (~13 ms natively): 50 000 (0.65 ms) were below what gVisor's round trip
        // leaves uncertain on a busy host (0.05–0.4 ms), and its host-clock figure came out 0.
        "rdtsc:iterations=1000000",
        "pagefault:pages=2048",
        "mmap:iterations=1000",
        "memlat:size=[16KiB,64MiB],loads=500000",
        "ctxswitch:iterations=2000",
        "pipe_rr:iterations=2000",
        "unix_rr:iterations=2000",
        "fork:iterations=50",
        "exec:iterations=5",
        "signal:iterations=5000",
        "timer:interval=1ms,duration=300ms",
    ];
    for w in workloads {
        args.extend(["--workload".into(), w.to_string()]);
    }
    args.extend(["--reps", "2", "--warmup", "0", "--json"].map(String::from));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = fx.vp_args(&argv);
    assert_ok(&out, "run (mechanisms)");
    let doc = json_of(&out, "run (mechanisms)");
    let mean = |env: &str, metric: &str, case: &str| -> f64 {
        doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["environment"] == env
                    && r["metric"] == metric
                    && r["instance"].is_null()
                    && r["workload"].as_str().is_some_and(|w| w.contains(case))
            })
            .and_then(|r| r["mean"].as_f64())
            .unwrap_or_else(|| panic!("no {metric} ({case}) for {env}; failures: {}", doc["failures"]))
    };
    // Each figure within what the physics of any machine allows, in every kind: the fastest an
    // operation can be done (a few cycles at ~5 GHz; a page fault at least zeroes a page, a fork
    // copies a page table, an exec maps a binary) and the slowest a working one takes (a TCG
    // guest included: ~50× native at worst seen, with room). An instruction a TCG guest emulates
    // costs what its translation does: `cpuid` is a helper call of a few host instructions there
    // (3.3 ns, beside load that comes and goes), below what any CPU's own `cpuid` takes. ns per
    // operation; the timer's lateness in µs (a 1 ms timer is late by less than a second).
    let bounds: [(&str, &str, f64, f64); 16] = [
        ("syscall_time", "syscall", 20.0, 1e6),
        ("cpuid_time", "cpuid", 1.0, 1e6),
        ("clock_time", "clock", 5.0, 1e6),
        ("rdtsc_time", "rdtsc", 1.0, 1e5),
        ("pagefault_time", "pagefault", 50.0, 1e7),
        ("mmap_time", "mmap", 50.0, 1e7),
        ("memlat_time", "size=16KiB", 0.2, 1e3),
        ("memlat_time", "size=64MiB", 1.0, 1e4),
        ("ctxswitch_time", "ctxswitch", 100.0, 1e7),
        ("pipe_rr_time", "pipe_rr", 100.0, 1e7),
        ("unix_rr_time", "unix_rr", 100.0, 1e7),
        ("fork_time", "fork", 1e4, 1e9),
        ("exec_time", "exec", 5e4, 2e9),
        ("signal_time", "signal", 50.0, 1e7),
        ("timer_p50", "timer", 0.0, 1e6),
        ("timer_max", "timer", 0.0, 1e6),
    ];
    for e in &ran {
        for (m, case, lo, hi) in bounds {
            let v = mean(e, m, case);
            assert!((lo..=hi).contains(&v), "{e} / {m} ({case}): {v} outside [{lo}, {hi}]");
        }
        assert!(mean(e, "timer_p50", "timer") <= mean(e, "timer_max", "timer"));
        // Relations that hold in any kind: a process costs more than a system call, a chase over
        // 64 MiB more than one over 16 KiB (the cache is the host's, whatever emulates the loads).
        assert!(
            mean(e, "fork_time", "fork") > 10.0 * mean(e, "syscall_time", "syscall"),
            "{e}: fork vs syscall"
        );
        assert!(
            mean(e, "memlat_time", "size=16KiB") < mean(e, "memlat_time", "size=64MiB"),
            "{e}: 16 KiB chase vs 64 MiB"
        );
    }
    let native = |m: &str, case: &str| mean("native", m, case);
    for (e, m, case, factor) in [
        ("gvisor", "syscall_time", "syscall", 10.0),
        ("gvisor", "signal_time", "signal", 3.0),
        ("uml", "syscall_time", "syscall", 10.0),
        ("uml", "fork_time", "fork", 2.0),
        ("uml-virtperf", "syscall_time", "syscall", 10.0),
        ("uml-virtperf", "fork_time", "fork", 2.0),
        // A TCG guest's L1-resident chase: every load through the soft TLB's check, on the
        // chain's critical path. Measured on the AMX host: ×3.2, ×3.3 and ×1.77 of native in
        // three suite runs (×2.0 was the bound until the ×1.77 one); under KVM it is native
        // speed, ×1.0–1.1. The bound lies between the two.
        ("qemu", "memlat_time", "size=16KiB", 1.4),
    ] {
        if !ran.contains(&e) {
            continue;
        }
        // A TCG guest emulates every load; under KVM the cache-resident chase is native speed.
        if e == "qemu"
            && doc["manifest"]["runtimes"]["qemu"].as_str().is_some_and(|r| r.contains("accel kvm"))
        {
            continue;
        }
        let (x, n) = (mean(e, m, case), native(m, case));
        println!("    {e} / {m} ({case}): {x:.1} vs native {n:.1} ns/op = ×{:.1}", x / n);
        assert!(x > factor * n, "{e} / {m}: {x} ns/op, native {n}: expected more than ×{factor}");
    }
    let x = fx.export();
    let timer = x["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["environment"] == "native" && t["workload_kind"] == "timer")
        .unwrap();
    assert_eq!(timer["extra"]["wakeups"], 300, "{timer}");
    let text = fx.vp("report");
    assert!(String::from_utf8_lossy(&text.stdout).contains("timer lateness"));
    fx.assert_no_leftovers();
    // The kinds this host runs were checked; the others are named with doctor's reason and the
    // test is counted as passed with those parts left out.
    for s in &skipped {
        dropped("mechanisms in this kind", s);
    }
    Outcome::Pass
}

/// `--explain`: warm-ups count their events natively, the mechanism cases price each event in
/// every environment, and the report's model is what docs/explain.md says — each mechanism case
/// fits by construction, every other cell is 1 + Σ rate × price from the JSON's own figures, a
/// counted system call is one per `syscall` operation, gVisor's and UML's system calls cost far
/// more than native's (against native's measured beside them). A run without it says how to get
/// one (exit 2).
pub(crate) fn explain_prices_events_and_predicts_from_them() -> Outcome {
    if let Some(why) = need_tool("root") {
        return Outcome::Skip(why);
    }
    let mut args: Vec<String> = ["run", "--env", "native"].map(String::from).to_vec();
    let mut sandboxes = Vec::new();
    let mut skipped = Vec::new();
    for (kind, spec) in [("gvisor", "gvisor"), ("uml", "uml:mem=640MiB,name=uml")] {
        match doctor_unusable(kind) {
            Some(w) => skipped.push(format!("{kind}: {w}")),
            None => {
                args.extend(["--env".into(), spec.into()]);
                sandboxes.push(kind);
            }
        }
    }
    if sandboxes.is_empty() {
        return Outcome::Skip(format!("neither gVisor nor UML runs here ({})", skipped.join("; ")));
    }
    for s in &skipped {
        println!("  skipped: {s}");
    }
    let fx = Fixture::new();
    args.extend(
        [
            "--workload",
            "command:name=find,cmd=find /usr/share/zoneinfo -name nothing-here",
            "--explain",
            "--launches",
            "2",
            "--reps",
            "1",
            "--json",
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = fx.vp_args(&argv);
    assert_ok(&out, "run --explain");
    let doc = json_of(&out, "run --explain");
    let x = &doc["explain"];
    assert!(x.is_object(), "no explain section: {}", &doc.to_string()[..2000.min(doc.to_string().len())]);
    let cells = x["cells"].as_array().unwrap();
    let costs = x["costs"].as_array().unwrap();
    let cell = |env: &str, w: &str| {
        cells
            .iter()
            .find(|c| c["environment"] == env && c["workload"] == w)
            .unwrap_or_else(|| panic!("no cell {env}/{w}"))
    };
    let price = |env: &str, ev: &str| {
        costs
            .iter()
            .find(|c| c["environment"] == env && c["event"] == ev)
            .and_then(|c| c["delta_ns"].as_f64())
    };
    let native_syscall_ns = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["environment"] == "native" && r["workload"] == "syscall" && r["metric"] == "syscall_time")
        .and_then(|r| r["mean"].as_f64())
        .expect("native's syscall_time");
    let counted = doc["manifest"]["explain"]["why"].is_null();
    for env in &sandboxes {
        // The mechanism cases are what the prices are solved from: they fit exactly.
        // All but those that showed no difference here, whose events are priced at 0 instead.
        let zeroed: Vec<&str> = x["costs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["environment"] == *env && c["no_difference"] == true)
            .filter_map(|c| c["from"].as_str())
            .collect();
        for c in cells.iter().filter(|c| c["environment"] == *env && c["mechanism"] == true) {
            let (m, p) = (c["measured"].as_f64().unwrap(), c["predicted"].as_f64().unwrap());
            if zeroed.iter().any(|z| c["workload"] == *z) {
                let ci = &c["measured_ci"];
                let (l, h) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
                assert!(
                    l <= 1.0 && h >= 1.0 && l >= 0.8 && h <= 1.25,
                    "{env}: {} priced at 0: {c}",
                    c["workload"]
                );
                continue;
            }
            let priced = costs.iter().any(|k| {
                k["environment"] == *env && k["from"] == c["workload"] && k["no_difference"] != true
            });
            if !priced {
                // A mechanism left unpriced (its sender stalled, it lost requests, it has no
                // interval) is modelled from the others' prices, and a note says why.
                let w = c["workload"].as_str().unwrap_or_default();
                let noted = x["notes"].as_array().is_some_and(|ns| {
                    ns.iter()
                        .filter_map(|n| n.as_str())
                        .any(|n| n.starts_with(&format!("{env}: ")) && n.contains(&format!("`{w}`")))
                });
                assert!(noted, "{env}: mechanism {w} neither priced nor noted: {c}\nnotes: {}", x["notes"]);
                continue;
            }
            // A price solved below zero is held at 0 and the rest solved by least squares over
            // the mechanism cases: checked below, as a whole, not cell by cell.
            if costs.iter().any(|k| k["environment"] == *env && k["solved_ns"].is_number()) {
                continue;
            }
            assert!(
                (p / m - 1.0).abs() < 1e-6,
                "{env}: mechanism {} measured {m}, model {p}\ncosts: {}\nnotes: {}",
                c["workload"],
                x["costs"],
                x["notes"]
            );
        }
        // Held prices: the others are the least-squares solution over the priced mechanism cases,
        // so each free event's column is orthogonal to the residuals (Σ_m rate_m(e) · (measured_m −
        // model_m) = 0), the held ones are 0 from 0 up, and a note says which were held.
        let priced: Vec<&serde_json::Value> =
            costs.iter().filter(|k| k["environment"] == *env && k["no_difference"] != true).collect();
        if priced.iter().any(|k| k["solved_ns"].is_number()) {
            assert!(
                x["notes"].to_string().contains("held at 0"),
                "{env}: a held price is said: {}",
                x["notes"]
            );
            let used: Vec<&serde_json::Value> = cells
                .iter()
                .filter(|c| c["environment"] == *env && c["mechanism"] == true)
                .filter(|c| priced.iter().any(|k| k["from"] == c["workload"]))
                .collect();
            for k in &priced {
                let ev = k["event"].as_str().unwrap();
                if k["solved_ns"].is_number() {
                    assert_eq!(k["delta_ns"].as_f64(), Some(0.0), "{env}: {ev} held at 0: {k}");
                    assert!(k["ci"][0].as_f64() == Some(0.0), "{env}: {ev}'s interval from 0: {k}");
                    continue;
                }
                let rate = |c: &serde_json::Value| c["rates_per_ms"][ev].as_f64().unwrap_or(0.0);
                let dot: f64 = used
                    .iter()
                    .map(|c| rate(c) * (c["measured"].as_f64().unwrap() - c["predicted"].as_f64().unwrap()))
                    .sum();
                let scale: f64 = used.iter().map(|c| (rate(c) * c["measured"].as_f64().unwrap()).abs()).sum();
                assert!(
                    dot.abs() <= 1e-6 * scale.max(1e-300),
                    "{env}: {ev}'s column is not orthogonal to the residuals ({dot} of {scale}): not least squares\ncosts: {}",
                    x["costs"]
                );
                assert!(k["delta_ns"].as_f64().unwrap() >= 0.0, "{env}: no price below zero: {k}");
            }
            println!(
                "    {env}: held at 0: {}",
                priced
                    .iter()
                    .filter(|k| k["solved_ns"].is_number())
                    .map(|k| format!(
                        "{} (solved {:.0} ns)",
                        k["what"].as_str().unwrap_or("?"),
                        k["solved_ns"].as_f64().unwrap_or(0.0)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        // Every other cell is the model of docs/explain.md on the JSON's own figures.
        let f = cell(env, "find");
        let sum: f64 = f["rates_per_ms"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(ev, r)| r.as_f64().unwrap() / 1e6 * price(env, ev).unwrap_or(0.0))
            .sum();
        let p = f["predicted"].as_f64().unwrap();
        assert!(
            (1.0 + sum - p).abs() < 1e-6 * p.max(1.0),
            "{env}: find's model {p}, 1 + Σ rate × price = {}",
            1.0 + sum
        );
        if counted {
            // A system call in gVisor or UML is a trip through ptrace or a sentry: at least 10×
            // native's own, measured beside it (~100× here).
            let s = price(env, "syscalls").expect("a price for system calls");
            assert!(
                s > 10.0 * native_syscall_ns,
                "{env}: a system call costs +{s:.0} ns, native's {native_syscall_ns:.0} ns"
            );
            // find is system calls: its model is well above native, and says so.
            assert!(p > 1.5, "{env}: find predicted at {p:.2}× from {f}");
            // find lists directories, looks up their entries and closes what it opened: each
            // class counted, and each priced by its own microbenchmark.
            for ev in ["syscalls_dir", "syscalls_path", "syscalls_fd"] {
                assert!(f["rates_per_ms"][ev].as_f64().unwrap_or(0.0) > 0.0, "{env}: find has no {ev}: {f}");
                assert!(price(env, ev).is_some(), "{env}: no price for {ev}");
            }
            // It fstats each directory it opens (newfstatat(fd, "", AT_EMPTY_PATH) from glibc
            // 2.33 on): apart from its lookups where the host's kernel names that flag, and
            // priced by `fstat` — a third to a half of find's newfstatat here.
            if doc["manifest"]["explain"]["tracepoints"].get("fstats").is_some() {
                let rate = |ev: &str| f["rates_per_ms"][ev].as_f64().unwrap_or(0.0);
                let share = rate("fstats") / (rate("fstats") + rate("syscalls_path"));
                assert!((0.1..0.9).contains(&share), "{env}: fstats {share:.2} of find's stats: {f}");
                assert!(price(env, "fstats").is_some(), "{env}: no price for fstats");
            } else {
                println!(
                    "  skipped: fstats apart from lookups: the host names no syscalls:sys_enter_newfstatat"
                );
            }
        }
    }
    if counted {
        // One counted system call per `syscall` operation, the counters' slowdown corrected: a
        // rate per ms × ns per operation ≈ 1 (getppid, and nothing else in the loop).
        let r = cell(sandboxes[0], "syscall")["rates_per_ms"]["syscalls"].as_f64().unwrap();
        let per_op = r / 1e6 * native_syscall_ns;
        assert!((0.8..1.25).contains(&per_op), "{per_op:.2} counted system calls per syscall operation");
    } else {
        println!("  skipped: the counts' checks: {}", doc["manifest"]["explain"]["why"]);
    }
    // The terminal's explanation within 100 columns; the page has its section.
    let text = fx.vp("report --explain");
    assert_ok(&text, "report --explain");
    let t = String::from_utf8_lossy(&text.stdout).to_string();
    for env in &sandboxes {
        assert!(t.contains(&format!("\n{env}\n")) && t.contains("per event:"), "{t}");
    }
    assert!(t.lines().all(|l| l.chars().count() <= 100), "wider than 100 columns:\n{t}");
    let page = fx.path("r.html");
    assert_ok(&fx.vp_args(&["report", "--html", page.to_str().unwrap()]), "report --html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("id=\"explain\"") && html.contains("fig-explain-"),
        "no explain section on the page"
    );
    // Predicted before running: the same program run natively (a run of its own) × this run's
    // prices gives each environment's cost — exactly 1 + Σ its own rate × the run's price, and,
    // find being system calls, well above native there. (Its rates come from another native run
    // than the model's above: beside a hog they moved by 57 %, so the two are not compared.)
    let p = fx.vp_args(&[
        "predict",
        "--workload",
        "command:name=find,cmd=find /usr/share/zoneinfo -name nothing-here",
        "--json",
    ]);
    assert_ok(&p, "predict");
    let pj = json_of(&p, "predict");
    let w = &pj["workloads"][0];
    for env in &sandboxes {
        let got = w["predictions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["environment"] == *env)
            .and_then(|x| x["predicted"].as_f64())
            .unwrap_or_else(|| panic!("no prediction for {env}: {pj}"));
        let sum: f64 = w["rates_per_ms"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(ev, r)| r.as_f64().unwrap() / 1e6 * price(env, ev).unwrap_or(0.0))
            .sum();
        assert!(
            (1.0 + sum - got).abs() < 1e-6 * got.max(1.0),
            "{env}: predict {got}, 1 + Σ rate × price = {}",
            1.0 + sum
        );
        if counted {
            assert!(got > 1.5, "{env}: find predicted at {got:.2}× from {w}");
        }
    }
    // A run that counted nothing: exit 2, and what to do.
    fx.ok("run --env native --workload cpu:iterations=1000 --reps 1");
    let bad = fx.vp_on("none.db", "predict --workload cpu");
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("none.db"), "{bad:?}");
    let none = fx.vp("report --explain");
    assert_eq!(none.status.code(), Some(2), "{none:?}");
    assert!(String::from_utf8_lossy(&none.stderr).contains("explain = true"), "{none:?}");
    Outcome::Pass
}
