//! e2e: the knobs of an environment (docs/knobs.md): each is refused with its reason when wrong,
//! really applied when asked for (seen from the host, not taken from the agent's word), said
//! before the numbers, and its cost measured beside the default in one run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::util::*;

/// Docker's and Podman's default profile, from Debian's golang-github-containers-common.
const DEFAULT_PROFILE: &str = "/usr/share/containers/seccomp.json";

/// The seccomp mode (`Seccomp:` of /proc/PID/status: 0 none, 2 filter) of every process the host
/// sees in one of virtperf's cgroups, by cgroup, polled until `stop`.
fn watch_seccomp(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<BTreeMap<String, BTreeSet<u32>>> {
    std::thread::spawn(move || {
        let mut seen: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        while !stop.load(Ordering::Relaxed) {
            for ent in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let dir = ent.path();
                let Some(cg) = std::fs::read_to_string(dir.join("cgroup")).ok().and_then(|c| {
                    c.lines().find_map(|l| l.split_once("/virtperf/").map(|(_, rest)| rest.to_string()))
                }) else {
                    continue;
                };
                let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
                let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                // The agent itself (runc's own processes run before the filter is loaded).
                if comm.trim() != "virtperf" {
                    continue;
                }
                if let Some(mode) = status
                    .lines()
                    .find_map(|l| l.strip_prefix("Seccomp:"))
                    .and_then(|v| v.trim().parse::<u32>().ok())
                {
                    seen.entry(cg).or_default().insert(mode);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        seen
    })
}

/// `seccomp = "default"`: wrong values are refused before anything starts (exit 2, the key and
/// the fix named); the filter is loaded in the agent (the host reads `Seccomp: 2` in its status,
/// and 0 in the plain container's); the manifest says which profile and how many of its rules
/// this container kept; and its cost on system calls and pipes is measured beside the plain
/// container, in one run.
pub(crate) fn container_seccomp_default_is_loaded_said_and_measured() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    if !std::path::Path::new(DEFAULT_PROFILE).is_file() {
        return Outcome::Skip(format!(
            "{DEFAULT_PROFILE} is missing (apt-get install golang-github-containers-common, or make deps)"
        ));
    }
    let fx = Fixture::new();
    // Bad input: a word that is no choice, a path that is not there, a broken profile.
    let broken = fx.path("broken.json");
    std::fs::write(
        &broken,
        "{\n  \"defaultAction\": \"SCMP_ACT_ERRNO\",\n  \"syscalls\": [ {\"names\": ]\n}\n",
    )
    .unwrap();
    for (value, says) in [
        ("docker", "neither `none`, `default`"),
        ("/nonexistent/profile.json", "/nonexistent/profile.json"),
        (broken.to_str().unwrap(), "line 3"),
    ] {
        let out = fx.vp(&format!("run --env container:seccomp={value} --workload noop --reps 1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "seccomp={value}: {err}");
        assert!(err.contains("seccomp") && err.contains(says), "seccomp={value}: {err}");
    }
    assert!(!fx.db.exists(), "refused input created the database");

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_seccomp(stop.clone());
    let line = "run --env native --env container --knobs container:seccomp \
                --workload syscall --workload pipe_rr --reps 5 --json";
    let child = fx.spawn(line);
    // This run's instances only (another run may share the host): cgroup `vpPID-ENV-LAUNCH`.
    let own = format!("vp{}-", child.id());
    let out = child.wait_within(std::time::Duration::from_secs(300));
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.join().unwrap();
    assert_ok(&out, line);
    let run = json_of(&out, line);
    let mode = |env: usize| -> BTreeSet<u32> {
        seen.iter()
            .filter(|(cg, _)| cg.starts_with(&format!("{own}{env}-")))
            .flat_map(|(_, m)| m.clone())
            .collect()
    };
    println!("    seccomp modes of this run's agents: container {:?}, with the knob {:?}", mode(1), mode(2));
    assert_eq!(mode(2), BTreeSet::from([2]), "the filtered container's agent, by cgroup: {seen:?}");
    assert_eq!(mode(1), BTreeSet::from([0]), "the plain container's agent, by cgroup: {seen:?}");

    let raw = fx.export();
    let conf = &raw["manifest"]["confinement"];
    let variant = "container [seccomp=default]";
    let filtered = conf[variant].as_str().unwrap_or_else(|| panic!("no confinement for {variant}: {conf:#}"));
    assert!(
        filtered.contains("the default seccomp profile of Podman and Docker")
            && filtered.contains("rules kept"),
        "{filtered}"
    );
    assert!(conf["container"].as_str().unwrap().contains("no seccomp filter"), "{conf:#}");

    // Said before the numbers, in the report a person reads.
    let text = fx.text("report");
    let before = text.split("What each environment costs").next().unwrap_or_default().replace("\n  ", " ");
    assert!(
        before
            .contains("container [seccomp=default] runs with seccomp=default — the default seccomp profile"),
        "{text}"
    );
    assert_eq!(raw["manifest"]["against"][variant]["against"], "container", "{:#}", raw["manifest"]);
    assert_eq!(raw["manifest"]["against"][variant]["knob"], "seccomp=default");
    // The knob's own cost, paired against the plain container, in the report's words.
    let knobs =
        text.split("What each knob costs against its default").nth(1).unwrap_or_else(|| panic!("{text}"));
    let knobs = knobs.replace("\n  ", " ").replace('\u{a0}', " ");
    assert!(knobs.contains("- seccomp=default against container: syscall time"), "{knobs}");
    assert!(knobs.contains("pipe_rr time"), "{knobs}");
    assert!(!before.contains("container runs with"), "the plain container has no knob set: {text}");

    // The filter's cost: each container against native, and the filtered one against the plain.
    for metric in ["syscall_time", "pipe_rr_time"] {
        let ratio = |env: &str| {
            let r = row_or_fail(&run, env, metric);
            let o = &r["overhead"];
            (
                o["ratio"].as_f64().unwrap(),
                o["ci95"][0].as_f64().unwrap_or(f64::NAN),
                o["ci95"][1].as_f64().unwrap_or(f64::NAN),
            )
        };
        let (c, f) = (ratio("container"), ratio(variant));
        println!(
            "    {metric}: container {:.3} [{:.3}, {:.3}], filtered {:.3} [{:.3}, {:.3}] of native; the filter {:+.1} %",
            c.0,
            c.1,
            c.2,
            f.0,
            f.1,
            f.2,
            (f.0 / c.0 - 1.0) * 100.0
        );
        assert!(f.0.is_finite() && f.0 > 0.0 && c.0 > 0.0, "{metric}: {c:?} {f:?}");
        let k = run["knob_costs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["metric"] == metric)
            .unwrap_or_else(|| panic!("no knob cost of {metric}: {:#}", run["knob_costs"]));
        let o = &k["overhead"];
        println!(
            "    {metric}: seccomp=default against container, paired: {:.3} [{:.3}, {:.3}] — {}",
            o["ratio"].as_f64().unwrap(),
            o["ci95"][0].as_f64().unwrap_or(f64::NAN),
            o["ci95"][1].as_f64().unwrap_or(f64::NAN),
            k["verdict"]["phrase"].as_str().unwrap_or("no verdict")
        );
        // The knob's ratio is its own pairs', near the two ratios' quotient (the same trials).
        let q = f.0 / c.0;
        let r = o["ratio"].as_f64().unwrap();
        assert!((r / q).ln().abs() < 0.5, "{metric}: paired {r:.3} against the quotient {q:.3}");
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}
