//! e2e: services — nginx (and redis) inside every environment this host can run, driven from the tester:
//! capacity, latency at offered loads of native's capacity measured in the same run, CPU per
//! request, wrk's capacity beside virtperf's, bad input, and nothing left behind however a run
//! ends.

use crate::util::*;

const EXPERIMENT: &str = r#"
name = "apps"
reps = 2
warmup = 1
order = "paired"

[[workload]]
kind = "nginx"
name = "nginx"
duration = "1s"
loads = "25,50"

[[workload]]
kind = "nginx"
name = "nginx-wrk"
client = "wrk"
duration = "1s"
loads = "none"
"#;

/// Processes on this host whose executable's path ends with `suffix`, as "pid cmdline".
fn processes_of(suffix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(exe) = std::fs::read_link(e.path().join("exe")) else { continue };
        if exe.to_string_lossy().ends_with(suffix) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            out.push(format!(
                "{} {}",
                e.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    out
}

/// nginx processes on this host (by their executable).
fn nginx_processes() -> Vec<String> {
    processes_of("/nginx")
}

fn row<'a>(
    doc: &'a serde_json::Value,
    env: &str,
    workload: &str,
    metric: &str,
) -> Option<&'a serde_json::Value> {
    doc["results"]
        .as_array()?
        .iter()
        .find(|r| r["environment"] == env && r["workload"] == workload && r["metric"] == metric)
}

fn mean(doc: &serde_json::Value, env: &str, workload: &str, metric: &str) -> f64 {
    row(doc, env, workload, metric)
        .and_then(|r| r["mean"].as_f64())
        .unwrap_or_else(|| panic!("{env} / {workload}: no {metric} in {:#}", doc["results"]))
}

/// nginx in native, a container, gVisor, UML and a QEMU guest (those doctor says this host can
/// run; the others named as dropped): every trial served, its capacity a real figure, each
/// offered load either carried (its rate within 10 % of what was offered, its latencies present
/// and ordered) or said not to be (its latencies left out, its backlog counted); the loads are
/// percentages of native's capacity measured in the same run; the server's CPU per request is
/// gVisor's several times native's; wrk's capacity and virtperf's agree; redis GET and a
/// pipelined SET natively and in gVisor; bad keys exit 2; no server and no server directory
/// outlive a run, even one killed with -9 mid-trial.
pub(crate) fn services_serve_from_every_environment_and_agree_with_wrk() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tools(&["nginx", "wrk", "redis"]) {
        return Outcome::Skip(why);
    }
    if !nginx_processes().is_empty() {
        return Outcome::Skip(format!(
            "nginx already runs on this host (not the test's): {:?}",
            nginx_processes()
        ));
    }
    let fx = Fixture::new();
    let mut toml =
        String::from(EXPERIMENT) + "\n[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\n";
    let mut envs = vec!["native", "container"];
    for (name, spec) in
        [("gvisor", "kind = \"gvisor\"\n"), ("uml", "kind = \"uml\"\n"), ("qemu", "kind = \"qemu\"\n")]
    {
        match doctor_unusable(name) {
            None => {
                envs.push(name);
                toml += &format!("\n[[env]]\n{spec}");
            }
            Some(why) => dropped(&format!("nginx in {name}"), &why),
        }
    }
    let file = fx.file("apps.toml", &toml);
    let doc = fx.json(&format!("run {}", file.display()));
    let raw = fx.export();
    let trials = raw["trials"].as_array().unwrap();
    let failed: Vec<_> = trials.iter().filter(|t| t["status"] != "ok").map(|t| t["reason"].clone()).collect();
    assert!(failed.is_empty(), "every trial served: {failed:#?}");
    let native_caps: Vec<f64> = trials
        .iter()
        .filter(|t| t["environment"] == "native" && t["workload"] == "nginx")
        .filter_map(|t| {
            t["samples"].as_array()?.iter().find(|s| s["metric"] == "nginx_capacity")?["value"].as_f64()
        })
        .collect();
    assert!(!native_caps.is_empty(), "native's capacity stored");
    let (lo, hi) = native_caps.iter().fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    let mut line = Vec::new();
    for e in &envs {
        let cap = mean(&doc, e, "nginx", "nginx_capacity");
        // A 1 KiB file over the lab's veth: thousands per second natively (this host: 40-48k),
        // hundreds at least in an emulated guest (TCG here: 2.5k).
        let floor = if *e == "native" || *e == "container" { 2000.0 } else { 100.0 };
        assert!(cap > floor && cap < 2e6, "{e}: capacity {cap} req/s");
        assert_eq!(mean(&doc, e, "nginx", "nginx_errors"), 0.0, "{e}: no request failed");
        let scpu = mean(&doc, e, "nginx", "nginx_server_cpu");
        let ccpu = mean(&doc, e, "nginx", "nginx_client_cpu");
        // A request costs the server's side at least a microsecond and at most a CPU-second.
        assert!(scpu > 1.0 && scpu < 1e6 && ccpu > 0.5 && ccpu < 1e6, "{e}: {scpu} / {ccpu} us/req");
        line.push(format!("{e} {cap:.0} req/s, server {scpu:.1} us/req"));
        for t in trials.iter().filter(|t| t["environment"] == *e && t["workload"] == "nginx") {
            let x = &t["extra"];
            let reference =
                x["reference"]["rate"].as_f64().unwrap_or_else(|| panic!("{e}: no reference: {x:#}"));
            let from = x["reference"]["from"].as_str().unwrap_or("");
            if from.starts_with("the baseline's") {
                // The median of native's capacities so far: within their range.
                assert!(
                    reference >= lo * 0.999 && reference <= hi * 1.001,
                    "{e}: reference {reference} outside native's {lo}..{hi}"
                );
            } else {
                assert!(
                    *e == "native" && t["warmup"] == true,
                    "{e}: only native's first trial uses its own capacity: {from}"
                );
            }
            let phases = x["phases"].as_array().unwrap();
            assert_eq!(phases.len(), 3, "capacity, 25 % and 50 %: {x:#}");
            let samples = t["samples"].as_array().unwrap();
            let has = |m: &str| samples.iter().any(|s| s["metric"] == m);
            for (ph, l) in phases[1..].iter().zip([25, 50]) {
                let offered = ph["tally"]["offered"].as_f64().unwrap();
                assert!(
                    (offered / reference - l as f64 / 100.0).abs() < 1e-6,
                    "{e}: {l} % offered {offered} of {reference}"
                );
                let rate = ph["tally"]["rate"].as_f64().unwrap();
                let carried = ph["tally"]["carried"].as_bool().unwrap();
                assert_eq!(carried, rate >= 0.95 * offered, "{e} {l} %: {ph:#}");
                assert_eq!(
                    has(&format!("nginx_p99_at{l}")),
                    carried,
                    "{e} {l} %: latencies only where carried"
                );
                assert!(
                    has(&format!("nginx_rate_at{l}")) && has(&format!("nginx_backlog_at{l}")),
                    "{e} {l} %"
                );
                if carried {
                    // An open loop offers what it was asked, no more.
                    assert!(rate < 1.1 * offered, "{e} {l} %: {rate} achieved of {offered} offered");
                    let q = |m: &str| {
                        samples.iter().find(|s| s["metric"] == format!("nginx_{m}_at{l}")).unwrap()["value"]
                            .as_f64()
                            .unwrap()
                    };
                    assert!(
                        q("p50") <= q("p90") && q("p90") <= q("p99") && q("p99") <= q("p999"),
                        "{e} {l} %"
                    );
                    assert!(q("p50") > 1.0, "{e} {l} %: a request over a network takes microseconds");
                } else {
                    assert!(
                        ph["tally"]["backlog"].as_u64().unwrap() > 0 || rate < 0.95 * offered,
                        "{e} {l} %"
                    );
                }
                // The histogram is stored with the phase.
                assert!(ph["tally"]["histogram_us"].as_array().is_some_and(|h| !h.is_empty()), "{e} {l} %");
            }
        }
    }
    println!("    {}", line.join("; "));
    // Native carries a quarter of its own capacity.
    assert!(row(&doc, "native", "nginx", "nginx_p99_at25").is_some(), "native carries 25 % of its capacity");
    if envs.contains(&"gvisor") {
        let (g, n) = (
            mean(&doc, "gvisor", "nginx", "nginx_server_cpu"),
            mean(&doc, "native", "nginx", "nginx_server_cpu"),
        );
        // gVisor serves each request through its own network stack and system call layer: this
        // host measured 15x native's CPU per request.
        assert!(g > 2.0 * n, "gVisor's CPU per request {g} us against native's {n}");
    }
    // wrk's capacity against virtperf's, on the same nginx in the same environments: within a
    // factor 1.5, what a misread figure (a thread's rate for the total, the wrong side) is not.
    // Closer is not two 1 s trials' to promise on a 2-CPU host (one run here: x1.17 native,
    // x0.74 in a container — trial to trial, not client to client); how close the clients are is
    // bench/apps.sh's figure (medians of paired trials: 1.00 here).
    for e in ["native", "container"] {
        let v = row(&doc, e, "nginx", "nginx_capacity").unwrap();
        let w = row(&doc, e, "nginx-wrk", "nginx_capacity").unwrap_or_else(|| panic!("{e}: no wrk capacity"));
        let r = v["mean"].as_f64().unwrap() / w["mean"].as_f64().unwrap();
        println!("    {e}: virtperf {:.0} req/s, wrk {:.0} req/s: x{r:.2}", v["mean"], w["mean"]);
        assert!(r > 0.67 && r < 1.5, "{e}: virtperf's capacity x{r:.2} of wrk's");
    }
    // The report says it in words: the family, then each service's line per environment — its
    // requests against native's with their interval, its latency at half load or that the load
    // was not carried, its CPU per request; within 100 columns.
    let rep = fx.text("report");
    assert!(rep.contains("services"), "{rep}");
    let said = rep
        .split("Your services against native")
        .nth(1)
        .unwrap_or_else(|| panic!("no services block: {rep}"));
    for e in envs.iter().filter(|e| **e != "native") {
        let at = said.find(&format!("nginx: {e} serves ")).unwrap_or_else(|| panic!("{e}: {said}"));
        let line: String = said[at..].split("\n- ").next().unwrap_or("").replace("\n  ", " ");
        assert!(line.contains("native's requests") && line.contains("×)"), "{line}");
        assert!(line.contains("half load"), "{line}");
        assert!(line.contains("CPU per request"), "{line}");
    }
    assert!(rep.lines().all(|l| l.chars().count() <= 100), "{rep}");
    fx.assert_no_leftovers();
    assert!(nginx_processes().is_empty(), "left running: {:?}", nginx_processes());

    // Bad input: the key and what to give, exit 2, nothing made.
    for (w, key) in [
        ("nginx:size=0", "size"),
        ("nginx:loads=30", "loads"),
        ("nginx:phase=open", "phase"),
        ("nginx:rate=100", "rate"),
        ("nginx:keepalive=maybe", "keepalive"),
    ] {
        let out = fx.vp_on("bad.db", &format!("run --env native --workload {w}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{w}: {err}");
        assert!(err.contains(&format!("`{key}`")), "{w}: {err}");
    }
    let out = fx.vp_on("bad.db", "run --env native:instances=2 --workload nginx");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("instances"));
    assert!(!fx.path("bad.db").exists(), "nothing created");

    // redis in native and gVisor (UML and QEMU where nginx ran: the same path): GET and a
    // pipelined SET, each command checked, the pipeline's commands counted as requests.
    let mut renvs = vec!["native"];
    if envs.contains(&"gvisor") {
        renvs.push("gvisor");
    }
    let mut rtoml = String::from(
        "name = \"redis\"\nreps = 2\nwarmup = 1\n\n[[workload]]\nkind = \"redis\"\nname = \"get\"\nduration = \"1s\"\nloads = \"50\"\n\n[[workload]]\nkind = \"redis\"\nname = \"set16\"\nop = \"set\"\npipeline = 16\nvalue_size = \"1KiB\"\nduration = \"1s\"\nloads = \"50\"\n",
    );
    for e in &renvs {
        rtoml += &format!("\n[[env]]\nkind = \"{e}\"\n");
    }
    let rfile = fx.file("redis.toml", &rtoml);
    let rdoc = fx.json_on("redis.db", &format!("run {}", rfile.display()));
    let mut rline = Vec::new();
    for e in &renvs {
        let get = mean(&rdoc, e, "get", "redis_capacity");
        let set = mean(&rdoc, e, "set16", "redis_capacity");
        assert!(get > 100.0 && set > 100.0, "{e}: GET {get}, SET x16 {set} per second");
        assert_eq!(
            mean(&rdoc, e, "get", "redis_errors") + mean(&rdoc, e, "set16", "redis_errors"),
            0.0,
            "{e}"
        );
        rline.push(format!("{e} GET {get:.0}/s, SET x16 {set:.0}/s"));
    }
    // Pipelined, a command costs native a fraction of a round trip: more commands per second.
    assert!(
        mean(&rdoc, "native", "set16", "redis_capacity")
            > 2.0 * mean(&rdoc, "native", "get", "redis_capacity")
    );
    // At half of native's capacity the open loop offers half, counted in commands.
    let half =
        mean(&rdoc, "native", "set16", "redis_rate_at50") / mean(&rdoc, "native", "set16", "redis_capacity");
    assert!(half > 0.3 && half < 0.7, "SET x16 at 50 %: {half:.2} of the capacity");
    println!("    redis: {}", rline.join("; "));
    assert!(
        processes_of("/redis-server").is_empty(),
        "a redis-server left running: {:?}",
        processes_of("/redis-server")
    );

    // kill -9 while nginx serves: the next start leaves no nginx and no server directory.
    let child = fx.spawn("run --env native --workload nginx:duration=20s --reps 1 --warmup 0");
    let pid = child.id();
    let running = wait_for(|| (!nginx_processes().is_empty()).then(nginx_processes), 60.0);
    std::thread::sleep(std::time::Duration::from_millis(500));
    kill(pid, 9);
    let _ = child.wait();
    assert!(running.is_some(), "nginx never ran");
    fx.ok("run --env native --workload noop --reps 1");
    let gone = wait_for(|| nginx_processes().is_empty().then_some(()), 5.0);
    assert!(gone.is_some(), "not swept: {:?}", nginx_processes());
    fx.assert_no_leftovers();
    println!("    kill -9 while nginx served: swept by the next start");
    Outcome::Pass
}

/// Processes of PostgreSQL's server on this host (by their executable).
fn postgres_processes() -> Vec<String> {
    processes_of("/bin/postgres")
}

/// The host's System V shared memory segments (their keys): PostgreSQL keeps one per cluster.
fn shm_segments() -> std::collections::BTreeSet<String> {
    std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

/// PostgreSQL in native, a container with Docker's capabilities, gVisor, UML and a QEMU guest
/// (those doctor says this host can run): its cluster made and loaded inside each, pgbench on the
/// tester; every trial served, its capacity a real figure, the half load carried or said not to
/// be (its latencies then left out), each transaction's latency from pgbench's own log; the
/// cluster's set-up is not the trial's time (no trial judged stalled for it); a container without
/// CAP_SETFCAP fails with what to give it; bad keys exit 2; no server, no shared memory segment
/// and no directory outlive a run, even one killed with -9 while the server serves.
pub(crate) fn postgres_serves_from_every_environment_with_pgbench() -> Outcome {
    if let Some(why) = need_root_and_env("container") {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tools(&["postgres"]) {
        return Outcome::Skip(why);
    }
    if !postgres_processes().is_empty() {
        return Outcome::Skip(format!(
            "PostgreSQL already runs on this host (not the test's): {:?}",
            postgres_processes()
        ));
    }
    let shm_before = shm_segments();
    let fx = Fixture::new();
    let mut toml = String::from(
        "name = \"pg\"\nreps = 2\nwarmup = 0\norder = \"paired\"\n\n[[workload]]\nkind = \"postgres\"\nduration = \"1s\"\nloads = \"50\"\n\n[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\ncapabilities = \"docker\"\n",
    );
    let mut envs = vec!["native", "container"];
    for name in ["gvisor", "uml", "qemu"] {
        match doctor_unusable(name) {
            None => {
                envs.push(name);
                toml += &format!("\n[[env]]\nkind = \"{name}\"\n");
            }
            Some(why) => dropped(&format!("postgres in {name}"), &why),
        }
    }
    let file = fx.file("pg.toml", &toml);
    let doc = fx.json(&format!("run {}", file.display()));
    let raw = fx.export();
    let trials = raw["trials"].as_array().unwrap();
    let failed: Vec<_> = trials.iter().filter(|t| t["status"] != "ok").map(|t| t["reason"].clone()).collect();
    assert!(failed.is_empty(), "every trial served: {failed:#?}");
    let mut line = Vec::new();
    for e in &envs {
        let cap = mean(&doc, e, "postgres", "postgres_capacity");
        // Select-only at scale 1: ~15k transactions per second natively here, ~400 in TCG.
        let floor = if *e == "native" || *e == "container" { 1000.0 } else { 20.0 };
        assert!(cap > floor && cap < 1e6, "{e}: capacity {cap} tps");
        assert_eq!(mean(&doc, e, "postgres", "postgres_errors"), 0.0, "{e}: no transaction failed");
        let scpu = mean(&doc, e, "postgres", "postgres_server_cpu");
        assert!(scpu > 1.0 && scpu < 1e6, "{e}: {scpu} us/transaction");
        line.push(format!("{e} {cap:.0} tps, server {scpu:.0} us/tx"));
        for t in trials.iter().filter(|t| t["environment"] == *e) {
            let x = &t["extra"];
            let server = &x["server"];
            assert!(
                server["initdb_ms"].as_f64().is_some_and(|v| v > 0.0)
                    && server["ready_ms"].as_f64().is_some_and(|v| v > 0.0),
                "{e}: the cluster's set-up is said: {server:#}"
            );
            // The trial's time is its phases' (capacity and one load, each a second's warm-up
            // and a second: 4 s planned), never the cluster's initdb and load (9 s in a TCG
            // guest here).
            let secs = t["host_ns"].as_f64().unwrap() / 1e9;
            assert!(secs > 4.0 && secs < 2.0 * 4.0 + 1.0, "{e}: a trial of {secs:.1} s");
            let phases = x["phases"].as_array().unwrap();
            assert_eq!(phases.len(), 2, "capacity and 50 %: {x:#}");
            let ph = &phases[1];
            let (offered, rate) =
                (ph["tally"]["offered"].as_f64().unwrap(), ph["tally"]["rate"].as_f64().unwrap());
            let carried = ph["tally"]["carried"].as_bool().unwrap();
            assert_eq!(carried, rate >= 0.95 * offered, "{e}: {ph:#}");
            let samples = t["samples"].as_array().unwrap();
            let q = |m: &str| samples.iter().find(|s| s["metric"] == m).and_then(|s| s["value"].as_f64());
            assert_eq!(q("postgres_p99_at50").is_some(), carried, "{e}: latencies only where carried");
            assert!(q("postgres_rate_at50").is_some() && q("postgres_backlog_at50").is_some(), "{e}");
            if carried {
                let (p50, p99) = (q("postgres_p50_at50").unwrap(), q("postgres_p99_at50").unwrap());
                assert!(p50 > 10.0 && p50 <= p99, "{e}: p50 {p50} us, p99 {p99} us");
                // Every latency after the warm-up from pgbench's log: the histogram holds each
                // transaction the load's rate counts.
                let n: f64 = ph["tally"]["histogram_us"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b[1].as_f64().unwrap())
                    .sum();
                let done = rate * ph["tally"]["secs"].as_f64().unwrap();
                assert!((n - done).abs() <= 0.01 * done + 8.0, "{e}: {n} latencies of {done} transactions");
            }
        }
    }
    println!("    {}", line.join("; "));
    assert!(
        row(&doc, "native", "postgres", "postgres_p99_at50").is_some(),
        "native carries half its capacity"
    );
    let rep = fx.text("report");
    assert!(!rep.contains("stalled"), "the cluster's set-up is no stall: {rep}");
    fx.assert_no_leftovers();
    assert!(postgres_processes().is_empty(), "left running: {:?}", postgres_processes());
    assert_eq!(shm_segments(), shm_before, "a shared memory segment left behind");

    // A container without capabilities: the server cannot drop root; said with what to give.
    let out = fx.vp_on(
        "nocaps.db",
        "run --env container --workload postgres:duration=1s,loads=none --reps 1 --warmup 0",
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("capabilities = \"docker\"") && said.contains("CAP_SETFCAP"), "{said}");

    // Bad input: the key and what to give, exit 2, nothing made.
    for (w, key) in [
        ("postgres:duration=1500ms", "duration"),
        ("postgres:transaction=tpcc", "transaction"),
        ("postgres:scale=0", "scale"),
        ("postgres:loads=60", "loads"),
    ] {
        let out = fx.vp_on("bad.db", &format!("run --env native --workload {w}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{w}: {err}");
        assert!(err.contains(&format!("`{key}`")), "{w}: {err}");
    }
    assert!(!fx.path("bad.db").exists(), "nothing created");

    // kill -9 while the server serves: the next start leaves no server, segment or directory.
    let child = fx.spawn("run --env native --workload postgres:duration=20s,loads=none --reps 1 --warmup 0");
    let pid = child.id();
    let running = wait_for(|| (!postgres_processes().is_empty()).then(postgres_processes), 60.0);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    kill(pid, 9);
    let _ = child.wait();
    assert!(running.is_some(), "postgres never ran");
    fx.ok("run --env native --workload noop --reps 1");
    let gone = wait_for(|| postgres_processes().is_empty().then_some(()), 10.0);
    assert!(gone.is_some(), "not swept: {:?}", postgres_processes());
    assert_eq!(shm_segments(), shm_before, "a shared memory segment left by the killed run");
    fx.assert_no_leftovers();
    println!("    kill -9 while postgres served: swept by the next start");
    Outcome::Pass
}

/// `explain` counts a server from ready to stop over its capacity phase: its set-up (nginx's
/// exec) left out, its requests' events in — nginx opens the file once per request, so its
/// opens per second are the client's capacity, and the counts' span is the phase's.
pub(crate) fn a_server_is_counted_from_ready_to_stop() -> Outcome {
    if let Some(why) = need_tool("root") {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tools(&["nginx"]) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    fx.json("run --env native --workload nginx:duration=1s,loads=none --explain --reps 1");
    let raw = fx.export();
    let pass = raw["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| {
            t["workload"].as_str().is_some_and(|w| w.starts_with("nginx"))
                && t["warmup"] == true
                && t["extra"]["counts"].is_object()
        })
        .unwrap_or_else(|| panic!("no counted warm-up of nginx"));
    let c = &pass["extra"]["counts"];
    assert_eq!(c["counted_from_mark"], true, "{c:#}");
    let phase = &pass["extra"]["phases"][0]["tally"];
    let (rate, secs) = (phase["rate"].as_f64().unwrap(), phase["secs"].as_f64().unwrap());
    let elapsed = c["elapsed_ns"].as_f64().unwrap() / 1e9;
    // The capacity phase on the host's clock: its measured second and the client's warm-up and
    // connections around it, never the server's start (nginx's configuration check, its fork).
    assert!(elapsed >= secs && elapsed < secs * 3.0 + 1.0, "counted {elapsed} s of a {secs} s phase: {c:#}");
    let server_window = c["server_window_ns"].as_f64().unwrap() / 1e9;
    assert!(server_window >= elapsed * 0.9 && server_window < elapsed + 2.0, "{server_window} s: {c:#}");
    if c.get("syscalls").is_none() {
        return Outcome::Skip(format!(
            "the host's syscall tracepoints are not counted here: {}",
            c["missing"]
        ));
    }
    assert_eq!(c["execs"], 0, "nginx's start is before the mark: {c:#}");
    let opens = c["syscalls_open"].as_f64().unwrap() / elapsed;
    let per_request = c["syscalls"].as_f64().unwrap() / elapsed / rate;
    println!(
        "  nginx counted {elapsed:.2} s: {opens:.0} opens/s against the client's {rate:.0} req/s, {per_request:.1} system calls a request"
    );
    // One open per request: within ±40 % (the counted span has the client's warm-up, served at
    // its own rate, and the counters slow each call a little).
    assert!((opens / rate - 1.0).abs() < 0.4, "{opens:.0} opens/s against {rate:.0} req/s: {c:#}");
    // accept/recv, open, fstat, sendfile or writev, close, epoll: a handful, never hundreds.
    assert!((3.0..60.0).contains(&per_request), "{per_request} system calls a request: {c:#}");
    Outcome::Pass
}
