//! e2e: tools inside environments — iperf3 and fio in every kind the host can run (native,
//! container, gVisor, UML, a QEMU guest), `command` with a JSON and a regex metric, virtperf's own
//! tcp_stream and disk beside them, and bad input.

use crate::util::*;

const EXPERIMENT: &str = r#"
name = "tools"
reps = 2
warmup = 0

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
    for prog in ["iperf3", "fio"] {
        if !has(prog) {
            return Outcome::Skip(format!("needs {prog} (apt-get install {prog}, or make deps)"));
        }
    }
    let fx = Fixture::new().with_scratch();
    let mut toml =
        String::from(EXPERIMENT) + "\n[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\n";
    let mut envs = vec!["native", "container"];
    let mut dropped = Vec::new();
    for (name, spec) in [
        ("gvisor", "kind = \"gvisor\"\n"),
        ("uml", "kind = \"uml\"\ndisk = \"ubd\"\n"),
        ("qemu", "kind = \"qemu\"\ndisk = \"virtio-blk\"\ndisk_size = \"96MiB\"\n"),
    ] {
        match doctor_unusable(name) {
            None => {
                envs.push(name);
                toml += &format!("\n[[env]]\n{spec}");
            }
            Some(why) => dropped.push(format!("{name}: {why}")),
        }
    }
    let file = fx.file("tools.toml", &toml);
    let doc = fx.json(&format!("run {}", file.display()));
    for e in &envs {
        let ip = row_or_fail(&doc, e, "iperf3_goodput");
        let own = row_or_fail(&doc, e, "tcp_goodput");
        let fio = row_or_fail(&doc, e, "fio_bw");
        let disk = row_or_fail(&doc, e, "disk_write");
        assert_eq!(ip["n"], 2, "{e}: both iperf3 trials measured");
        let (a, b) = (ip["mean"].as_f64().unwrap(), own["mean"].as_f64().unwrap());
        println!(
            "    {e}: iperf3 {a:.3} Gbit/s, tcp_stream {b:.3} Gbit/s (×{:.2}); fio {:.0} MB/s, disk {:.0} MB/s",
            a / b,
            fio["mean"].as_f64().unwrap(),
            disk["mean"].as_f64().unwrap()
        );
        assert!(a > 0.0 && fio["mean"].as_f64().unwrap() > 0.0, "{e}: iperf3 and fio measured something");
        let j = row_or_fail(&doc, e, "command_json");
        let r = row_or_fail(&doc, e, "command_regex");
        assert_eq!((j["mean"].as_f64(), r["mean"].as_f64()), (Some(3.5), Some(12.5)), "{e}");
        assert_eq!((j["better"].as_str(), j["unit"].as_str()), (Some("higher"), Some("MB/s")), "{e}");
        assert!(row_or_fail(&doc, e, "command_time")["mean"].as_f64().unwrap() > 0.0);
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
    if !dropped.is_empty() {
        println!("    partial (kinds this host cannot run, doctor's reason): {}", dropped.join("; "));
    }
    Outcome::Pass
}
