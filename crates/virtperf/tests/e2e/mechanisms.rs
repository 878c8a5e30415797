//! e2e: mechanisms: micro-benchmarks in every environment.

use crate::util::*;

/// Every microbenchmark and the timer on every environment this host runs (the others skipped with
/// doctor's reason), with checks a benchmark optimised away or pointed at the wrong thing would
/// fail: gVisor's and UML's system calls cost far more than native ones, a TCG guest's memory
/// loads cost more, latency grows with the working set, the timer woke as often as asked.
pub(crate) fn mechanisms_run_everywhere_and_make_physical_sense() -> Outcome {
    if !is_root() {
        return Outcome::Skip("needs root (containers, guests)".into());
    }
    let fx = Fixture::new();
    let candidates = [
        ("container", "container"),
        ("gvisor", "gvisor"),
        ("uml", "uml:mem=640MiB,name=uml"),
        ("qemu", "qemu:memory=768MiB,name=qemu"),
    ];
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
    let workloads = [
        "syscall:iterations=20000",
        "cpuid:iterations=20000",
        "clock:iterations=50000",
        "rdtsc:iterations=50000",
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
    let metrics = [
        ("syscall_time", "syscall"),
        ("cpuid_time", "cpuid"),
        ("clock_time", "clock"),
        ("rdtsc_time", "rdtsc"),
        ("pagefault_time", "pagefault"),
        ("mmap_time", "mmap"),
        ("memlat_time", "size=16KiB"),
        ("memlat_time", "size=64MiB"),
        ("ctxswitch_time", "ctxswitch"),
        ("pipe_rr_time", "pipe_rr"),
        ("unix_rr_time", "unix_rr"),
        ("fork_time", "fork"),
        ("exec_time", "exec"),
        ("signal_time", "signal"),
        ("timer_p50", "timer"),
        ("timer_max", "timer"),
    ];
    for e in &ran {
        for (m, case) in metrics {
            let v = mean(e, m, case);
            assert!(v.is_finite() && v >= 0.0, "{e} / {m}: {v}");
        }
        assert!(mean(e, "timer_p50", "timer") <= mean(e, "timer_max", "timer"));
    }
    let native = |m: &str, case: &str| mean("native", m, case);
    // Natively: a cache-resident chase is faster than one over 64 MiB; an operation costs time.
    assert!(native("memlat_time", "size=16KiB") < native("memlat_time", "size=64MiB"));
    assert!(native("fork_time", "fork") > 10.0 * native("syscall_time", "syscall"));
    for (e, m, case, factor) in [
        ("gvisor", "syscall_time", "syscall", 10.0),
        ("gvisor", "signal_time", "signal", 3.0),
        ("uml", "syscall_time", "syscall", 10.0),
        ("uml", "fork_time", "fork", 2.0),
        ("qemu", "memlat_time", "size=16KiB", 2.0),
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
