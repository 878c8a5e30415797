//! e2e: tools inside environments — iperf3, fio, sysbench and stress-ng in every kind the host can
//! run (native, container, gVisor, UML on each kernel that boots here, a QEMU guest), `command`
//! with a JSON and a regex metric, virtperf's own tcp_stream and disk beside them, and bad input.

use crate::util::*;

const EXPERIMENT: &str = r#"
name = "tools"
reps = 3
warmup = 1

[[workload]]
kind = "iperf3"
duration = "1s"

[[workload]]
kind = "tcp_stream"
duration = "1s"

[[workload]]
kind = "fio"
size = "16MiB"
bs = "64KiB"

[[workload]]
kind = "disk"
file_size = "16MiB"
record_size = "64KiB"
modes = "write"

[[workload]]
kind = "command"
cmd = '''sh -c "echo '{\"v\": {\"w\": [1, 3.5]}}'; echo rate: 12.5 MB/s"'''
json = "/v/w/1"
regex = 'rate: ([0-9.]+)'
unit = "MB/s"
better = "higher"
"#;

/// iperf3 and fio run inside native, container, gVisor, UML and a QEMU guest (the kinds doctor
/// says this host can run; the others are named as dropped), each a trial like any other: the
/// figures parsed, the raw output kept in the export, the report saying how far iperf3 agrees
/// with tcp_stream and fio with disk; `command` reads a number by JSON pointer and one by regex,
/// its direction as the user said. Bad input: a program that is not installed exits 2 naming the
/// key and the package; a command that fails, or whose pattern matches nothing, fails its trials
/// with the reason and the run goes on. Nothing left behind.
pub(crate) fn tools_run_inside_every_environment_and_agree_with_virtperf() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tools(&["iperf3", "fio"]) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new().with_scratch();
    let mut toml =
        String::from(EXPERIMENT) + "\n[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\n";
    let mut envs = vec!["native", "container"];
    for (name, spec) in [
        ("gvisor", "kind = \"gvisor\"\n"),
        ("qemu", "kind = \"qemu\"\ndisk = \"virtio-blk\"\ndisk_size = \"96MiB\"\n"),
    ] {
        match doctor_unusable(name) {
            None => {
                envs.push(name);
                toml += &format!("\n[[env]]\n{spec}");
            }
            Some(why) => dropped(name, &why),
        }
    }
    // Every UML kernel that boots here: the packaged one and virtperf's where both do.
    match need_root_and_env("uml") {
        Some(why) => dropped("uml", &why),
        None => {
            for (name, param) in uml_kernels() {
                envs.push(name);
                toml += &format!("\n[[env]]\nkind = \"uml\"\nname = \"{name}\"\ndisk = \"ubd\"\n");
                if let Some((k, v)) = param.split_once('=') {
                    toml += &format!("{k} = \"{v}\"\n");
                }
            }
        }
    }
    let file = fx.file("tools.toml", &toml);
    let doc = fx.json(&format!("run {}", file.display()));
    for e in &envs {
        let ip = row_or_fail(&doc, e, "iperf3_goodput");
        let own = row_or_fail(&doc, e, "tcp_goodput");
        let fio = row_or_fail(&doc, e, "fio_bw");
        let disk = row_or_fail(&doc, e, "disk_write");
        assert_eq!(ip["n"], 3, "{e}: every iperf3 trial measured");
        // Agreement, as far as a 2-CPU host lets two tools agree: the 95 % interval of the ratio
        // of their means (from their own trials' spread) must reach within a factor 2 of 1 —
        // what a misread figure (bits for bytes, the sender's side, a unit off by 1000) is not.
        // Closer is not the host's to promise: where a flow's two ends land on 2 CPUs sets its
        // rate, a launch keeps its placement, and two tools land differently (measured on an AMD
        // host, one run each: iperf3 ×0.51 [0.34, 0.76] of tcp_stream in a container, ×1.13
        // and ×1.38 in others; pinned to one CPU, gVisor's iperf3 ×0.14). How close the tools
        // are is bench/net.sh's and bench/disk.sh's figure (rounds alternating, medians).
        for (tool, mine) in [(&ip, &own), (&fio, &disk)] {
            let (lo, r, hi) = ratio_interval(tool, mine);
            println!(
                "    {e}: {} {:.3} against {} {:.3} {}: ×{r:.2} [{lo:.2}, {hi:.2}]",
                tool["metric"].as_str().unwrap_or("?"),
                tool["mean"].as_f64().unwrap_or(0.0),
                mine["metric"].as_str().unwrap_or("?"),
                mine["mean"].as_f64().unwrap_or(0.0),
                mine["unit"].as_str().unwrap_or("")
            );
            assert!(
                lo <= 2.0 && hi >= 0.5,
                "{e}: {} and {} disagree: ×{r:.3}, 95 % interval [{lo:.3}, {hi:.3}] beyond a factor 2",
                tool["metric"],
                mine["metric"]
            );
        }
        let j = row_or_fail(&doc, e, "command_json");
        let r = row_or_fail(&doc, e, "command_regex");
        assert_eq!((j["mean"].as_f64(), r["mean"].as_f64()), (Some(3.5), Some(12.5)), "{e}");
        assert_eq!((j["better"].as_str(), j["unit"].as_str()), (Some("higher"), Some("MB/s")), "{e}");
        assert!(row_or_fail(&doc, e, "command_time")["mean"].as_f64().unwrap() > 0.0);
    }
    // sysbench and stress-ng work in each of them too (a figure, once each: what they need of
    // the environment — threads, SysV IPC, fork, a writable TMPDIR — not how fast they go).
    let more = fx.file(
        "more.toml",
        &toml.replace(EXPERIMENT, "name = \"more tools\"\nreps = 1\nwarmup = 0\n\n[[workload]]\nkind = \"sysbench\"\ntime = \"1s\"\n\n[[workload]]\nkind = \"stress-ng\"\nstressor = \"fork\"\ntime = \"1s\"\n"),
    );
    let doc2 = json_of(&fx.ok_on("more.db", &format!("run {} --json", more.display())), "more tools");
    for e in &envs {
        for m in ["sysbench_events", "stressng_bogo_ops"] {
            let v = row_or_fail(&doc2, e, m)["mean"].as_f64().unwrap_or(0.0);
            assert!(v > 0.0, "{e}: {m} = {v}");
        }
    }

    // The raw output of every tool trial, in the export.
    let ex = fx.ok("export --format json");
    let text = String::from_utf8_lossy(&ex.stdout);
    assert!(
        text.contains("\"argv\"") && text.contains("sum_received") && text.contains("--output-format=json"),
        "the tools' raw output is exported"
    );
    // The report says how far they agree.
    let rep = fx.text("report");
    assert!(
        rep.contains("iperf3 against tcp_stream in native") && rep.contains("fio against disk in container"),
        "{rep}"
    );
    for l in rep.lines() {
        assert!(l.chars().count() <= 100, "{l}");
    }

    // Bad input: a tool that is not installed is refused before anything runs.
    let out = fx.vp_on("bad.db", "run --env native --workload command:cmd=no-such-tool-virtperf");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cmd") && err.contains("apt-get install no-such-tool-virtperf"), "{err}");
    assert!(!fx.path("bad.db").exists(), "nothing created");
    // A command that fails, and a pattern that matches nothing: those trials fail, the run goes on.
    let bad = fx.file(
        "bad.toml",
        "reps = 2\nwarmup = 0\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"command\"\nname = \"fails\"\ncmd = 'sh -c \"echo no-such-thing >&2; exit 4\"'\n[[workload]]\nkind = \"command\"\nname = \"nomatch\"\ncmd = 'echo hello'\nregex = 'rate: ([0-9]+)'\n[[workload]]\nkind = \"memcpy\"\nsize = \"1MiB\"\ncopies = 2\n",
    );
    let out = fx.vp_on("bad.db", &format!("run {} --json", bad.display()));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let fails = serde_json::to_string(&doc["failures"]).unwrap();
    assert!(fails.contains("status 4") && fails.contains("no-such-thing"), "the stderr tail: {fails}");
    assert!(fails.contains("matches nothing"), "{fails}");
    row_or_fail(&doc, "native", "memcpy_time");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// A program that exists where virtperf runs but not inside an environment (a container sees the
/// host's /usr, /etc and /opt, not a test's temporary directory): the agent fails the workload
/// with the kind `unsupported`, and the orchestrator decides on that kind — the container's first
/// trial fails saying so, its later trials are skipped, not run and failed again, and native's
/// trials run as usual.
pub(crate) fn a_program_an_environment_lacks_sets_its_cell_aside() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let prog = fx.file("rate.sh", "#!/bin/sh\necho 'rate: 7'\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let exp = fx.file(
        "lacks.toml",
        &format!(
            "reps = 3\nwarmup = 1\n[[env]]\nkind = \"native\"\n[[env]]\nkind = \"container\"\n[[workload]]\nkind = \"command\"\ncmd = '{}'\nregex = 'rate: ([0-9]+)'\n",
            prog.display()
        ),
    );
    let t0 = std::time::Instant::now();
    let out = fx.vp(&format!("run {} --json", exp.display()));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let fails = serde_json::to_string_pretty(&doc["failures"]).unwrap();
    assert_eq!(count_trials(&fx.db, "failed"), 1, "only the container's first trial: {fails}");
    assert_eq!(count_trials(&fx.db, "skipped"), 3, "the container's other trials: {fails}");
    assert!(
        fails.contains("cannot run in this environment") && fails.contains("does not exist"),
        "the kind and the agent's words: {fails}"
    );
    assert!(fails.contains("skipped after an earlier trial"), "{fails}");
    let native = row_or_fail(&doc, "native", "command_regex");
    assert_eq!(native["mean"].as_f64(), Some(7.0), "{native}");
    assert_eq!(native["n"].as_u64(), Some(3), "{native}");
    println!("    container: 1 failed, 3 skipped; native 3 trials; {:.1} s", t0.elapsed().as_secs_f64());
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The ratio of two result rows' means with its 95 % interval from their trials (a Welch
/// interval of the log-ratio: each side's relative variance of the mean, Welch–Satterthwaite
/// degrees of freedom): (low, ratio, high).
fn ratio_interval(a: &serde_json::Value, b: &serde_json::Value) -> (f64, f64, f64) {
    let side = |x: &serde_json::Value| {
        let (m, sd, n) =
            (x["mean"].as_f64().unwrap(), x["stdev"].as_f64().unwrap_or(0.0), x["n"].as_f64().unwrap());
        ((sd / m).powi(2) / n, n - 1.0, m)
    };
    let ((va, dfa, ma), (vb, dfb, mb)) = (side(a), side(b));
    let df = (va + vb).powi(2) / (va * va / dfa.max(1.0) + vb * vb / dfb.max(1.0)).max(1e-300);
    let half = virtperf_stats::t_quantile(0.95, df) * (va + vb).sqrt();
    let r = ma / mb;
    (r * (-half).exp(), r, r * half.exp())
}
