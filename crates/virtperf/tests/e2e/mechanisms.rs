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
    // Each figure within what the physics of any machine allows, in every kind: the fastest an
    // operation can be done (a few cycles at ~5 GHz; a page fault at least zeroes a page, a fork
    // copies a page table, an exec maps a binary) and the slowest a working one takes (a TCG
    // guest included: ~50× native at worst seen, with room). ns per operation; the timer's
    // lateness in µs (a 1 ms timer is late by less than a second).
    let bounds: [(&str, &str, f64, f64); 16] = [
        ("syscall_time", "syscall", 20.0, 1e6),
        ("cpuid_time", "cpuid", 5.0, 1e6),
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
