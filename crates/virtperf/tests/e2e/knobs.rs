//! e2e: the knobs of an environment (docs/knobs.md): each is refused with its reason when wrong,
//! really applied when asked for (seen from the host, not taken from the agent's word), said
//! before the numbers, and its cost measured beside the default in one run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::util::*;

/// Docker's and Podman's default profile, from Debian's golang-github-containers-common.
const DEFAULT_PROFILE: &str = "/usr/share/containers/seccomp.json";

/// The cgroup below `virtperf/` of the process whose /proc directory is `dir` (None: not one of
/// virtperf's, or gone).
fn virtperf_cgroup(dir: &Path) -> Option<String> {
    let c = std::fs::read_to_string(dir.join("cgroup")).ok()?;
    c.lines().find_map(|l| l.split_once("/virtperf/").map(|(_, rest)| rest.to_string()))
}

/// The seccomp mode (`Seccomp:` of /proc/PID/status: 0 none, 2 filter) of every process the host
/// sees in one of virtperf's cgroups, by cgroup, polled until `stop`.
fn watch_seccomp(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<BTreeMap<String, BTreeSet<u32>>> {
    std::thread::spawn(move || {
        let mut seen: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        while !stop.load(Ordering::Relaxed) {
            for ent in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let dir = ent.path();
                let Some(cg) = virtperf_cgroup(&dir) else { continue };
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

/// What the host sees of each of virtperf's cgroups while a run goes: per cgroup (below
/// `virtperf/`), whether any of its processes' command lines held `needle`, and how many
/// processes it saw there, polled until `stop`.
fn watch_cmdlines(
    stop: Arc<AtomicBool>,
    needle: &'static str,
) -> std::thread::JoinHandle<BTreeMap<String, (bool, usize)>> {
    std::thread::spawn(move || {
        let mut seen: BTreeMap<String, (bool, BTreeSet<u32>)> = BTreeMap::new();
        while !stop.load(Ordering::Relaxed) {
            for ent in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Some(pid) = ent.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                    continue;
                };
                let dir = ent.path();
                let Some(cg) = virtperf_cgroup(&dir) else { continue };
                let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
                let has = cmdline.split(|b| *b == 0).any(|w| String::from_utf8_lossy(w).contains(needle));
                let e = seen.entry(cg).or_default();
                e.0 |= has;
                e.1.insert(pid);
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        seen.into_iter().map(|(cg, (has, pids))| (cg, (has, pids.len()))).collect()
    })
}

/// Whether any cgroup of environment `env` of the run whose cgroups start with `own` held the
/// needle, and whether the host saw any of its processes at all.
fn env_saw(seen: &BTreeMap<String, (bool, usize)>, own: &str, env: usize) -> (bool, usize) {
    seen.iter()
        .filter(|(cg, _)| cg.starts_with(&format!("{own}{env}-")))
        .fold((false, 0), |(h, n), (_, (has, k))| (h || *has, n + k))
}

/// The guests' and the sandbox's knobs (docs/knobs.md): `gvisor:network` runs the sandbox on the
/// host kernel's sockets (runsc's processes carry `--network=host`, seen by the host, the
/// default's never), `uml:mitigations` and `qemu:mitigations` put `mitigations=off` on the guest
/// kernel's command line (seen in the host's UML and QEMU processes, and by each guest's agent in
/// its own `/proc/cmdline`); each is said before the numbers, costed against its default in one
/// run, and the kernel each agent ran on is in the report — where the knob changed what the guest
/// says of the CPU's vulnerabilities, the knob's line says so.
pub(crate) fn guest_and_sandbox_knobs_are_applied_said_and_measured() -> Outcome {
    let mut envs = Vec::new();
    let mut why_not = Vec::new();
    for e in ["gvisor", "uml", "qemu"] {
        match need_root_and_env(e) {
            None => envs.push(e),
            Some(why) => why_not.push((e, why)),
        }
    }
    if envs.is_empty() {
        return Outcome::Skip(
            why_not.iter().map(|(e, w)| format!("{e}: {w}")).collect::<Vec<_>>().join("; "),
        );
    }
    for (e, why) in &why_not {
        dropped(e, why);
    }
    let fx = Fixture::new();
    // Bad input: a value that is no choice, a knob the kind does not have.
    for (line, says) in [
        ("run --env gvisor:network=hostinet --workload noop --reps 1", "network"),
        ("run --env qemu:mitigations=none --workload noop --reps 1", "mitigations"),
        ("run --env uml --knobs uml:machine --workload noop --reps 1", "its knobs: mitigations"),
    ] {
        let out = fx.vp(line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{line}: {err}");
        assert!(err.contains(says), "{line}: {err}");
    }
    assert!(!fx.db.exists(), "refused input created the database");

    // gVisor's network: netstack against the host's sockets, on a stream and on round trips.
    if envs.contains(&"gvisor") {
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = watch_cmdlines(stop.clone(), "--network=host");
        let line = "run --env native --env gvisor --knobs gvisor:network --workload tcp_rr \
                    --workload tcp_stream:duration=2s --reps 3 --json";
        let child = fx.spawn(line);
        let own = format!("vp{}-", child.id());
        let out = child.wait_within(std::time::Duration::from_secs(400));
        stop.store(true, Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        assert_ok(&out, line);
        let run = json_of(&out, line);
        let (plain, host) = (env_saw(&seen, &own, 1), env_saw(&seen, &own, 2));
        println!("    runsc --network=host seen: netstack {plain:?}, host {host:?} (held it, processes)");
        assert!(host.0 && host.1 > 0, "the variant's runsc processes carry --network=host: {seen:?}");
        assert!(!plain.0 && plain.1 > 0, "the default's never: {seen:?}");
        let text = fx.text(&format!("report {}", run["run_id"]));
        let flat = text.replace("\n  ", " ").replace('\u{a0}', " ");
        assert!(
            flat.contains(
                "gvisor [network=host] runs with network=host — the sandbox's sockets are the host kernel's"
            ),
            "{text}"
        );
        for metric in ["tcp_rr_rate", "tcp_goodput"] {
            let k = run["knob_costs"].as_array().unwrap().iter().find(|k| k["metric"] == metric);
            let k = k.unwrap_or_else(|| panic!("no knob cost of {metric}: {:#}", run["knob_costs"]));
            let o = &k["overhead"];
            let r = o["ratio"].as_f64().unwrap();
            println!(
                "    {metric}: network=host against netstack, paired {r:.3} [{:.3}, {:.3}] — {}",
                o["ci95"][0].as_f64().unwrap_or(f64::NAN),
                o["ci95"][1].as_f64().unwrap_or(f64::NAN),
                k["verdict"]["phrase"].as_str().unwrap_or("no verdict")
            );
            assert!(r.is_finite() && r > 0.0, "{metric}: {k:#}");
        }
        assert!(flat.contains("- network=host against gvisor: tcp_rr"), "{flat}");
    }

    // The guests' mitigations, seen on the host's processes and in each guest's own kernel.
    let guests: Vec<&str> = envs.iter().copied().filter(|e| *e != "gvisor").collect();
    if !guests.is_empty() {
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = watch_cmdlines(stop.clone(), "mitigations=off");
        let list: String = guests.iter().map(|e| format!("--env {e} --knobs {e}:mitigations ")).collect();
        let line = format!("run {list}--workload syscall --reps 2 --json");
        let child = fx.spawn(&line);
        let own = format!("vp{}-", child.id());
        let out = child.wait_within(std::time::Duration::from_secs(400));
        stop.store(true, Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        assert_ok(&out, &line);
        let run = json_of(&out, &line);
        let names: Vec<String> = run["environments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        let kernels = run["kernels"].as_array().unwrap_or_else(|| panic!("no kernels: {run:#}"));
        let text = fx.text(&format!("report {}", run["run_id"]));
        let flat = text.replace("\n  ", " ").replace('\u{a0}', " ");
        for g in &guests {
            let variant = format!("{g} [mitigations=off]");
            let (d, v) = (
                names.iter().position(|n| n == g).unwrap(),
                names.iter().position(|n| *n == variant).unwrap_or_else(|| panic!("{variant} in {names:?}")),
            );
            let (ds, vs) = (env_saw(&seen, &own, d), env_saw(&seen, &own, v));
            println!("    {g}: mitigations=off on the host's processes: default {ds:?}, variant {vs:?}");
            assert!(vs.0, "{variant}'s host processes carry mitigations=off: {seen:?}");
            assert!(!ds.0 && ds.1 > 0, "{g}'s never: {seen:?}");
            let k = |name: &str| kernels.iter().find(|k| k["environment"] == name).cloned();
            let (kd, kv) = (k(g).unwrap_or_else(|| panic!("{g}: {kernels:?}")), k(&variant).unwrap());
            assert_eq!(kd["mitigations_off"], false, "{kd}");
            assert_eq!(kv["mitigations_off"], true, "the guest's own /proc/cmdline: {kv}");
            println!(
                "    {g}: its kernel {} — default: {} mitigated, {} vulnerable; mitigations=off: {} mitigated, {} vulnerable",
                kd["release"],
                kd["mitigated"].as_array().map_or(0, Vec::len),
                kd["vulnerable"].as_array().map_or(0, Vec::len),
                kv["mitigated"].as_array().map_or(0, Vec::len),
                kv["vulnerable"].as_array().map_or(0, Vec::len)
            );
            assert!(flat.contains(&format!("{variant} runs with mitigations=off — ")), "{text}");
            let head = format!("- mitigations=off against {g}: syscall time");
            let line = flat.lines().find(|l| l.contains(&head)).unwrap_or_else(|| panic!("{head}: {flat}"));
            println!("    {}", line.trim());
            // The knob's line says why where the guest's words changed, and only there.
            let changed = kd["mitigated"] != kv["mitigated"] || kd["vulnerable"] != kv["vulnerable"];
            assert_eq!(line.contains("its kernel says:"), changed, "{line}");
        }
        let full = fx.text(&format!("report {} --full", run["run_id"]));
        assert!(full.contains("Kernels, as each environment's agent saw its own"), "{full}");
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// One process the host saw in one of virtperf's cgroups: its cgroup, name, network namespace,
/// and (an agent's only) the MTU of the non-loopback links of that namespace.
#[derive(Debug, Clone)]
struct Seen {
    cgroup: String,
    comm: String,
    netns: String,
    mtus: Vec<u32>,
}

/// Every process of virtperf's cgroups the host sees until `stop`, by pid.
fn watch_netns(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<BTreeMap<u32, Seen>> {
    std::thread::spawn(move || {
        let mut seen: BTreeMap<u32, Seen> = BTreeMap::new();
        while !stop.load(Ordering::Relaxed) {
            for ent in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Some(pid) = ent.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                    continue;
                };
                if seen.contains_key(&pid) {
                    continue;
                }
                let dir = ent.path();
                let Some(cgroup) = virtperf_cgroup(&dir) else { continue };
                let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim().to_string();
                // runc's init is the agent before its exec: looked at again next round.
                if comm.starts_with("runc:") {
                    continue;
                }
                let Ok(netns) = std::fs::read_link(dir.join("ns/net")) else { continue };
                let mtus = if comm == "virtperf" {
                    let out = std::process::Command::new("nsenter")
                        .args(["-t", &pid.to_string(), "-n", "ip", "-o", "link", "show"])
                        .output();
                    let text =
                        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
                    text.lines()
                        .filter(|l| !l.contains(" lo:"))
                        .filter_map(|l| {
                            let w: Vec<&str> = l.split_whitespace().collect();
                            w.iter().position(|x| *x == "mtu").and_then(|i| w.get(i + 1)?.parse().ok())
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                seen.insert(pid, Seen { cgroup, comm, netns: netns.display().to_string(), mtus });
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        seen
    })
}

/// `network = "pasta" | "slirp4netns"` (docs/knobs.md): wrong values are refused before anything
/// starts (exit 2, the key named); each variant's container runs in a namespace of its own — not
/// the root's, not its helper's — whose link has the MTU asked for, and its helper (the real
/// pasta, the real slirp4netns) runs in the container's cgroup, its CPU counted with it; the knob
/// is said before the numbers and its cost on a stream both ways and on round trips is measured
/// beside the plain container (veth) in one run, the paired ratio beside the two rows' quotient.
pub(crate) fn container_network_helpers_are_applied_said_and_measured() -> Outcome {
    if let Some(why) = need_root_and_env("container").or_else(|| need_tools(&["pasta", "slirp4netns"])) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    for (param, says) in [
        ("network=tap", "expected one of: veth, pasta, slirp4netns"),
        ("network_mtu=1500", "applies to network = \"pasta\" or \"slirp4netns\" only"),
        ("network=pasta,network_mtu=100", "network_mtu"),
    ] {
        let out = fx.vp(&format!("run --env container:{param} --workload noop --reps 1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{param}: {err}");
        assert!(err.contains(says), "{param}: {err}");
    }
    assert!(!fx.db.exists(), "refused input created the database");

    // One run per the MTU asked for (a knob's variants cannot be set too), then the knob's run.
    let small = "container:network=pasta,network_mtu=16000";
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_netns(stop.clone());
    let line = format!("run --env {small} --workload tcp_rr --reps 1 --warmup 0");
    let child = fx.spawn_on("mtu.db", &line);
    let small_own = format!("vp{}-", child.id());
    let out = child.wait_within(std::time::Duration::from_secs(120));
    stop.store(true, Ordering::Relaxed);
    let small_seen = watcher.join().unwrap();
    assert_ok(&out, &line);
    let small_text = String::from_utf8_lossy(&fx.vp_on("mtu.db", "report").stdout).replace("\n  ", " ");
    assert!(small_text.contains("(MTU 16000 inside)"), "{small_text}");

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_netns(stop.clone());
    let line = "run --env container --knobs container:network \
                --workload tcp_stream:direction=both,duration=1s --workload tcp_rr --reps 3 --json";
    let child = fx.spawn(line);
    let own = format!("vp{}-", child.id());
    let out = child.wait_within(std::time::Duration::from_secs(600));
    stop.store(true, Ordering::Relaxed);
    let mut seen = watcher.join().unwrap();
    assert_ok(&out, line);
    let run = json_of(&out, line);
    // The small MTU's run, as a fourth environment of this one's.
    let four = format!("{own}3-");
    for (pid, mut s) in small_seen {
        if let Some(rest) = s.cgroup.strip_prefix(&format!("{small_own}0-")) {
            s.cgroup = format!("{four}{rest}");
            seen.insert(pid, s);
        }
    }
    let (pasta, slirp) = ("container [network=pasta]", "container [network=slirp4netns]");
    let index = |name: &str| {
        if name == small {
            return 3;
        }
        run["environments"]
            .as_array()
            .and_then(|a| a.iter().position(|e| e["name"] == name))
            .unwrap_or_else(|| panic!("no environment {name}: {:#}", run["environments"]))
    };
    let root_ns = std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string();
    let of_env = |env: usize| -> Vec<&Seen> {
        seen.values().filter(|s| s.cgroup.starts_with(&format!("{own}{env}-"))).collect()
    };
    // pasta is passt under another name (its comm: `passt.avx2` where the CPU has AVX2).
    let is_helper =
        |s: &Seen, h: &str| s.comm.starts_with(h) || (h == "pasta" && s.comm.starts_with("passt"));
    for (name, helper, mtu) in [
        ("container", None, None),
        (pasta, Some("pasta"), Some(65520)),
        (slirp, Some("slirp4netns"), Some(65520)),
        (small, Some("pasta"), Some(16000)),
    ] {
        let env = index(name);
        let procs = of_env(env);
        let agents: Vec<&&Seen> = procs.iter().filter(|s| s.comm == "virtperf").collect();
        let helpers: Vec<&&Seen> = procs.iter().filter(|s| helper.is_some_and(|h| is_helper(s, h))).collect();
        println!(
            "    {name}: {} agent(s) in {:?} (link MTU {:?}); helper(s) {:?} in {:?}",
            agents.len(),
            agents.iter().map(|a| &a.netns).collect::<BTreeSet<_>>(),
            agents.iter().flat_map(|a| a.mtus.clone()).collect::<BTreeSet<_>>(),
            helpers.iter().map(|h| &h.comm).collect::<BTreeSet<_>>(),
            helpers.iter().map(|h| &h.netns).collect::<BTreeSet<_>>()
        );
        assert!(!agents.is_empty(), "{name}'s agent, by cgroup: {procs:?}");
        assert!(agents.iter().all(|a| a.netns != root_ns), "an agent in the root namespace: {agents:?}");
        match (helper, mtu) {
            (Some(h), Some(m)) => {
                assert!(
                    !helpers.is_empty(),
                    "{h} in the container's cgroup (its CPU the container's): {procs:?}"
                );
                for a in &agents {
                    assert!(
                        helpers.iter().all(|x| x.netns != a.netns),
                        "{h} shares its container's namespace"
                    );
                    assert!(a.mtus.contains(&m), "the container's link MTU, asked {m}: {a:?}");
                }
                assert!(helpers.iter().all(|x| x.netns != root_ns), "{h} in the root namespace: {helpers:?}");
            }
            _ => assert!(
                procs.iter().all(|s| !is_helper(s, "pasta") && !is_helper(s, "slirp4netns")),
                "a helper in the plain container: {procs:?}"
            ),
        }
    }

    // Said before the numbers.
    let text = fx.text("report");
    let before = text.split("What each environment costs").next().unwrap_or_default().replace("\n  ", " ");
    for (variant, words) in
        [(pasta, "joined to the lab by pasta"), (slirp, "joined to the lab by slirp4netns")]
    {
        assert!(before.contains(&format!("{variant} runs with")) && before.contains(words), "{text}");
    }
    // Each knob's cost, paired against the plain container: finite, and near the rows' quotient.
    // (pasta's stream may stall here and be set apart: its rows are then said, not costed.)
    let checks: [(&str, &[&str]); 2] = [
        (pasta, &["tcp_rr_rate", "tcp_rr_latency"]),
        (slirp, &["tcp_goodput_out", "tcp_goodput_in", "tcp_rr_rate", "tcp_rr_latency"]),
    ];
    for (variant, metrics) in checks {
        for metric in metrics {
            let row = row_or_fail(&run, variant, metric);
            let k = run["knob_costs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|k| k["environment"] == variant && k["metric"] == *metric)
                .unwrap_or_else(|| panic!("no knob cost of {variant} {metric}: {:#}", run["knob_costs"]));
            assert_eq!(k["against"], "container", "{k:#}");
            let (r, q) =
                (k["overhead"]["ratio"].as_f64().unwrap(), row["overhead"]["ratio"].as_f64().unwrap());
            println!(
                "    {variant} {metric}: paired {r:.3} [{:.3}, {:.3}] — {}",
                k["overhead"]["ci95"][0].as_f64().unwrap_or(f64::NAN),
                k["overhead"]["ci95"][1].as_f64().unwrap_or(f64::NAN),
                k["verdict"]["phrase"].as_str().unwrap_or("no verdict")
            );
            assert!(r.is_finite() && r > 0.0, "{variant} {metric}: {k:#}");
            assert!((r / q).ln().abs() < 0.5, "{variant} {metric}: paired {r:.3} against the row's {q:.3}");
        }
    }
    for metric in ["tcp_goodput_out", "tcp_goodput_in"] {
        row_or_fail(&run, pasta, metric);
    }
    // A TCP/IP stack in user space between the container and the wire costs round-trip time:
    // the veth measured beside it is the reference (≈2.4× here).
    let slirp_rr = row_or_fail(&run, slirp, "tcp_rr_latency");
    assert!(
        slirp_rr["overhead"]["ratio"].as_f64().unwrap() > 1.0,
        "slirp4netns round trips no slower than veth's: {slirp_rr:#}"
    );
    fx.assert_no_leftovers();
    Outcome::Pass
}
