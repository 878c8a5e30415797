//! e2e: the lab: network workloads, instances sharing the link, all pairs, the GbE wire, delay, RFC 2544.

use crate::util::*;

/// The "done when" command (shorter flows), then: results for every workload on both
/// environments, CPU series stored, and the root namespace exactly as before.
pub(crate) fn network_workloads_native_and_container_root_ns_untouched() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let with_container = match need_root_and_env("container") {
        None => true,
        Some(why) => {
            dropped("the container side", &why);
            false
        }
    };
    let mut args = vec!["run", "--env", "native"];
    if with_container {
        args.extend(["--env", "container"]);
    }
    args.extend(
        "--workload tcp_stream:duration=1s --workload \
         udp_stream:frame_size=64,duration=1s --workload tcp_rr:duration=1s --workload \
         udp_rr:duration=1s,direction=both --reps 2 --warmup 0 --json"
            .split_whitespace(),
    );
    let before = root_netns_snapshot();
    let out = fx.vp_args(&args);
    let after = root_netns_snapshot();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(before, after, "the root namespace changed");
    fx.assert_no_leftovers();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let rows = doc["results"].as_array().unwrap();
    let envs: &[&str] = if with_container { &["native", "container"] } else { &["native"] };
    for e in envs {
        for (w, m) in [
            ("tcp_stream:duration=1s", "tcp_goodput"),
            ("udp_stream:frame_size=64,duration=1s", "udp_recv_rate"),
            ("udp_stream:frame_size=64,duration=1s", "udp_loss"),
            ("tcp_rr:duration=1s", "tcp_rr_p99"),
            ("udp_rr:duration=1s,direction=both", "udp_rr_rate_out"),
            ("udp_rr:duration=1s,direction=both", "udp_rr_rate_in"),
            ("tcp_stream:duration=1s", "cpu_per_gbit"),
            ("tcp_stream:duration=1s", "tester_cpu_time"),
        ] {
            let row = rows
                .iter()
                .find(|r| r["environment"] == *e && r["workload"] == w && r["metric"] == m)
                .unwrap_or_else(|| panic!("no {e} / {w} / {m} in {rows:#?}"));
            assert_eq!(row["n"], 2, "{e} {w} {m}");
        }
        let gp = rows
            .iter()
            .find(|r| r["environment"] == *e && r["metric"] == "tcp_goodput")
            .and_then(|r| r["mean"].as_f64())
            .unwrap();
        // A veth carries 14 Gbit/s of iperf3 here (MACHINE-NOTES; 13–20 measured by the tools
        // test); 1 Gbit/s is far below any healthy run and above the 0.39 a reordering path gave.
        println!("    {e}: TCP goodput {gp:.2} Gbit/s");
        assert!(gp > 1.0, "{e}: TCP goodput {gp} Gbit/s over a veth is implausibly low");
    }
    // CPU time series at ≥ 10 Hz: a 1 s flow gives at least 10 points per role.
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let (n, trials): (i64, i64) = c
        .query_row("SELECT count(*), count(DISTINCT trial_id) FROM cpu_series WHERE role = 'dut'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert!(trials > 0 && n / trials >= 10, "{n} CPU samples over {trials} trials");
    Outcome::Pass
}

pub(crate) fn rfc2544_quick_in_out_reflect_native_and_container() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    // Bad input first: nothing is created, the key is named, exit 2.
    let bad = fx.vp("run --env native --workload rfc2544:frame_size=63");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("frame_size"));
    assert!(!fx.db.exists(), "a refused run created its database");
    let with_container = match need_root_and_env("container") {
        None => true,
        Some(why) => {
            dropped("the container side", &why);
            false
        }
    };
    let mut args = vec!["run", "--env", "native"];
    if with_container {
        args.extend(["--env", "container"]);
    }
    // §26's four tests here; MLRsearch has a test of its own (below).
    // Quick, with its final trials and search steps shorter still: what is checked here is the
    // procedure and its records, not the figures (seed 003's runs in docs/rfc2544.md are those).
    let w = "rfc2544:quick=true,frame_size=[64,1518],direction=[in,out,reflect],\
             tests=[throughput,latency,frame_loss,back_to_back],trial_duration=300ms,search_duration=150ms";
    args.extend(["--workload", w, "--json"]);
    let before = root_netns_snapshot();
    let out = fx.vp_args(&args);
    let after = root_netns_snapshot();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(before, after, "the root namespace changed");
    fx.assert_no_leftovers();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let rows = doc["rfc2544"].as_array().expect("an rfc2544 section");
    let n_env = if with_container { 2 } else { 1 };
    assert_eq!(rows.len(), n_env * 2 * 3, "{rows:#?}");
    let mut determined: std::collections::BTreeMap<String, usize> = Default::default();
    for r in rows {
        let what = format!("{} {} {}: {r}", r["environment"], r["direction"], r["frame_size"]);
        let line = r["line_max_fps"].as_f64().unwrap();
        let curve = r["loss_curve"].as_array().unwrap();
        assert_eq!(curve[0][0], 100, "{what}: frame loss starts at 100 %");
        assert!(r["b2b_mean"].as_f64().unwrap() > 0.0, "{what}");
        assert!(r["steps"].as_u64().unwrap() >= 5, "{what}");
        assert_eq!(r["quick"], true);
        let ndr = r["ndr_fps"].as_f64().unwrap_or(0.0);
        let pdr = r["pdr_fps"].as_f64().unwrap_or(0.0);
        if r["ndr_undetermined"] == true {
            // No full-length trial passed, down to 1/256 of the searched rate: a host busy enough
            // for that (it happened once in a suite beside the lint, native `in` at 64 B losing
            // at every confirmed rate) is said, never a throughput: no NDR, no latency at it.
            assert!(r["ndr_fps"].is_null() && r["ndr_confirmed"] == false, "{what}");
            assert_eq!(r["latency_note"], "n/d: no NDR", "{what}");
            println!(
                "    {} {} {}: NDR undetermined (frames lost at every confirmed rate)",
                r["environment"], r["direction"], r["frame_size"]
            );
            continue;
        }
        *determined.entry(r["environment"].to_string()).or_default() += 1;
        // A software path passes something; never more than the line allows; PDR >= NDR.
        assert!(
            ndr > 0.0 && ndr <= line * 1.000_001 && pdr >= ndr,
            "{what}: ndr {ndr} pdr {pdr} line {line}"
        );
        assert!(r["latency"]["count"].as_u64().unwrap_or(0) >= 20, "{what}: {}", r["latency"]);
        assert!(r["latency"]["min_us"].as_f64().unwrap() > 0.0, "{what}");
        assert!(r["dut_cpu_pct"].as_f64().is_some(), "{what}: no DUT CPU");
    }
    // At most one case in six of an environment may go undetermined: a path that passes nothing
    // at all is a broken path, not a busy host.
    for (env, n) in &determined {
        assert!(*n >= 5, "{env}: an NDR in only {n} of its 6 cases");
    }
    assert_eq!(determined.len(), n_env, "every environment determined an NDR somewhere: {determined:?}");
    // Every step is stored with its trial, with what the generator reached.
    let x = fx.export();
    for t in x["trials"].as_array().unwrap() {
        let steps = t["extra"]["rfc2544"]["steps"].as_array().expect("steps stored");
        assert_eq!(steps[0]["phase"], "probe");
        assert!(steps
            .iter()
            .all(|s| s["sent"].as_u64().unwrap() > 0 && s["sent_fps"].as_f64().unwrap() > 0.0));
        // A step that lost frames says which, and the receiver's positions add up to its counts.
        for st in steps {
            let lost = st["sent"].as_u64().unwrap().saturating_sub(st["received"].as_u64().unwrap());
            if lost > 0 && st["duplicates"] == 0 {
                assert_eq!(st["lost_at"]["lost"].as_u64(), Some(lost), "{st}");
            }
        }
        // Back-to-back at the minimum gap: the line's, paced, or the generator's own, unpaced —
        // never the searches' 98 % top.
        let d = &t["extra"]["rfc2544"];
        let b = &d["back_to_back"];
        let gen = d["generator_max_fps"].as_f64().unwrap();
        match b["gap"].as_str() {
            Some("line") => assert_eq!(b["rate_fps"], d["line_max_fps"], "{b}"),
            Some("generator") => {
                assert_eq!(b["rate_fps"].as_f64(), Some(gen), "{b}");
                let reached = b["burst_fps"].as_f64().unwrap();
                println!(
                    "    b2b {} {}: bursts at {reached:.0} fps, probe {gen:.0}",
                    t["environment"], d["direction"]
                );
                assert!(reached == 0.0 || reached >= 0.8 * gen, "{b}");
            }
            other => panic!("back-to-back gap {other:?}: {b}"),
        }
    }
    // The summary leads with RFC 2544's answer, the profile said first; --full has the tables.
    let text = fx.text("report");
    assert!(text.contains("RFC 2544, the answer in frames/s — QUICK profile, a first look"), "{text}");
    assert!(!text.contains("Per workload: "), "no one-sample matrix of a procedure's NDR: {text}");
    let text = fx.text("report --full");
    assert!(text.contains("RFC 2544 — QUICK profile") && text.contains("theoretical maximum"), "{text}");
    Outcome::Pass
}

/// RFC 9971's search on real traffic (native, and a container where it runs; 64 B, direction
/// in, short trials and a 10 % width to keep it short): each goal's conditional throughput is stored with its
/// parameters, lies within the line's maximum, the PDR's at least the NDR's within their width;
/// every trial is a step, and latency runs at MLRsearch's NDR when §26.1's test is left out.
pub(crate) fn mlrsearch_finds_conditional_throughput_native_and_container() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let mut line = String::from("run --env native");
    match need_root_and_env("container") {
        None => line += " --env container",
        Some(why) => dropped("the container side", &why),
    }
    // 250 ms trials, a 500 ms sum and a 10 % width: a load decided in one or two short trials, a
    // search of a few loads.
    line += " --workload rfc2544:quick=true,frame_size=64,direction=in,tests=[mlrsearch,latency],\
             mlr_trial_duration=250ms,mlr_duration_sum=500ms,mlr_width=10,dut_rcvbuf=1MiB";
    let doc = fx.json(&line);
    let rows = doc["rfc2544"].as_array().expect("an rfc2544 section");
    assert!(!rows.is_empty());
    for r in rows {
        let what = format!("{}: {r}", r["environment"]);
        let (ndr, pdr) = (r["mlr_ndr_fps"].as_f64(), r["mlr_pdr_fps"].as_f64());
        let (Some(ndr), Some(pdr)) = (ndr, pdr) else { panic!("{what}: no conditional throughput") };
        let line = r["line_max_fps"].as_f64().unwrap();
        assert!(ndr > 0.0 && ndr <= line * 1.000_001 && pdr >= ndr * 0.9, "{what}");
        assert!(r["ndr_fps"].is_null(), "{what}: §26.1's search did not run");
        assert!(
            r["mlr_goals"][0]
                .as_str()
                .unwrap()
                .contains("trials 0.25–0.25 s, duration sum 0.5 s, exceed ratio 0.5, width 10 %"),
            "{what}"
        );
        assert!(r["latency"]["count"].as_u64().unwrap_or(0) >= 20, "{what}: latency at MLRsearch's NDR");
        // The DUT's receiving buffer, as asked: root forces it (the kernel keeps twice what was
        // set); a DUT that may not keeps what net.core.rmem_max lets it, and says so.
        let kept = r["dut_rcvbuf"].as_u64().unwrap_or_else(|| panic!("{what}: the DUT's buffer kept"));
        assert_eq!(r["dut_rcvbuf_asked"].as_u64(), Some(1 << 20), "{what}");
        if r["environment"] == "native" {
            assert_eq!(kept, 2 << 20, "{what}: forced as root");
        }
        println!(
            "    {} in 64 B: MLRsearch NDR {ndr:.0} fps, PDR {pdr:.0} fps, {} trials in {:.1} s, DUT buffer {} KiB",
            r["environment"],
            r["mlr_trials"],
            r["mlr_wall_ms"].as_f64().unwrap_or(0.0) / 1e3,
            kept >> 10
        );
    }
    for t in fx.export()["trials"].as_array().unwrap() {
        let d = &t["extra"]["rfc2544"];
        let m = &d["mlrsearch"];
        let mlr_steps = d["steps"].as_array().unwrap().iter().filter(|s| s["phase"] == "mlr").count();
        assert_eq!(m["trials"].as_u64(), Some(mlr_steps as u64), "{m}");
        assert_eq!(m["goals"][1]["loss_ratio"], 0.005, "{m}");
        assert_eq!(d["latency"]["rate_fps"], m["goals"][0]["lower_fps"], "{d}");
    }
    let text = fx.text("report");
    assert!(text.contains("NDR RFC 9971"), "{text}");
    let text = fx.text("report --full");
    assert!(text.contains("MLRsearch (RFC 9971)"), "{text}");
    assert!(text.contains("the DUT's receiving buffer: dut_rcvbuf asked 1MiB"), "{text}");
    // §26.1's search did not run: no table of its NDR.
    assert!(!text.contains("throughput, NDR frames/s"), "{text}");
    Outcome::Pass
}

/// Seed 000's experiment in small: 1, 2 and 4 instances of native and of a container stream to the
/// tester at once over one shaped GbE link (the tester's) and run a CPU kernel together: the
/// aggregate stays at the wire's ceiling, each instance has its own figure, Jain's index and the
/// start skew are reported, and nothing is left behind.
pub(crate) fn instances_share_the_link_and_are_measured_each() -> Outcome {
    if let Some(why) = need_root_and_env("container").or_else(|| need_root_and("tc")) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let doc = fx.json(
        "run --env native:instances=[1,2,4] --env container:instances=[1,2] --workload \
         tcp_stream:duration=2s --workload intmix:iterations=5000000 --lab rate=1gbit \
         --reps 2 --warmup 0",
    );
    let tables = doc["instances"].as_array().unwrap();
    assert_eq!(tables.len(), 4, "native and container × tcp_stream and intmix: {tables:#?}");
    for t in tables {
        let rows = t["rows"].as_array().unwrap();
        for r in rows {
            let n = r["instances"].as_u64().unwrap() as usize;
            let each = r["per_instance"].as_array().unwrap();
            assert_eq!(each.len(), n, "{r}");
            let agg = r["aggregate"].as_f64().unwrap();
            let sum: f64 = each.iter().map(|x| x.as_f64().unwrap()).sum();
            assert!((sum - agg).abs() <= 1e-6 * agg.max(1.0), "aggregate = Σ instances: {r}");
            if n > 1 {
                let j = r["jain"].as_f64().unwrap();
                assert!(j > 1.0 / n as f64 - 1e-9 && j <= 1.0 + 1e-9, "Jain's index in [1/N, 1]: {r}");
                let skew = r["start_skew_ms"].as_f64().unwrap();
                assert!((0.0..200.0).contains(&skew), "start barrier: skew {skew} ms: {r}");
                assert!(r["vs_one"]["ratio"].is_number(), "{r}");
            }
            if t["metric"] == "tcp_goodput" {
                // One wire shared: N flows' bytes added over the one window where all of them run
                // (the tester's byte counts every 100 ms, on the host's clock), so the sum cannot
                // pass the wire: at most the ceiling + 0.5 % (interpolation between samples), and it
                // fills most of it.
                let top = 0.9415 * 1.005;
                println!(
                    "    {} N={n}: {agg:.4} Gbit/s together ({:+.2} % of the ceiling)",
                    t["group"].as_str().unwrap_or("?"),
                    (agg / 0.9415 - 1.0) * 100.0
                );
                assert!(
                    (0.9415 * 0.8..=top).contains(&agg),
                    "{n} instances together: {agg} Gbit/s (ceiling 0.9415, at most {top:.4})"
                );
            }
        }
    }
    // Every trial of several instances says the window its aggregate was added over, and the ramps.
    let raw = fx.export();
    let mut windows = 0;
    for t in raw["trials"].as_array().unwrap() {
        let several =
            t["environment"].as_str().is_some_and(|e| e.contains("instances=2") || e.contains("instances=4"));
        if several
            && t["workload"].as_str().is_some_and(|w| w.starts_with("tcp_stream"))
            && t["status"] == "ok"
        {
            let w = &t["extra"]["aggregate_windows"][0];
            assert_eq!(w["metric"], "tcp_goodput", "{t:#}");
            let (ms, up, down) = (
                w["ms"].as_f64().unwrap(),
                w["ramp_up_ms"].as_f64().unwrap(),
                w["ramp_down_ms"].as_f64().unwrap(),
            );
            assert!(ms > 1000.0 && ms <= 2100.0 && up >= 0.0 && down >= 0.0 && up + down < 1000.0, "{w}");
            windows += 1;
        }
    }
    assert_eq!(windows, 2 * 3, "(native 2 and 4, container 2) × 2 reps");
    let per_instance_rows =
        doc["results"].as_array().unwrap().iter().filter(|r| r["instance"].is_number()).count();
    assert!(per_instance_rows >= 2 * (2 + 4 + 2), "each instance has rows of its own: {per_instance_rows}");
    let text = fx.text("report");
    assert!(text.contains("N=4") && text.contains("Jain") && text.contains(" + "), "{text}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// `--lab rate=1gbit` is Gigabit Ethernet frame by frame: TCP goodput within 2 % of the analytic
/// ceiling (941.49 Mbit/s) in both directions, native and container, with no retransmits, and
/// 1518-byte UDP frames within 2 % of the frame-rate ceiling (81 274 frames/s); never above.
/// A TCP flow is paced by its ACKs: on a busy host its ends, descheduled, leave the wire idle
/// (measured beside a CPU hog: 95.4 % of the ceiling at best). iperf3 through the same wire in the
/// same run is the reference: where it too falls short of 98 %, virtperf's flows must come
/// within 2 points of it.
pub(crate) fn gbe_wire_runs_within_2_percent_of_its_ceiling() -> Outcome {
    if let Some(why) = need_root_and_env("container").or_else(|| need_root_and("tc")) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let out = fx.ok("run --env native --env container --workload \
         tcp_stream:duration=3s,direction=[out,in] --workload iperf3:duration=3s,direction=[out,in] \
         --workload udp_stream:frame_size=1518,rate=84000,duration=3s --lab rate=1gbit,mtu=1500 \
         --reps 3 --warmup 0");
    // What this host gives two spinning threads now — a sender and a receiver's worth (a 100 %
    // load on 2 threads, measured just after): whether a receiver that falls behind is the host's
    // doing or the receiving code's (idle: 94–97 % each; beside a CPU hog: 60–63 %).
    let probe = fx.json_on(
        "probe.db",
        "run --env native --workload sleep:duration=1s,load=100,load_cpus=2 --reps 3 --warmup 0",
    );
    let share = row_or_fail(&probe, "native", "load_achieved")["min"].as_f64().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("link ceiling") && stdout.contains("81.27 kpps"), "{stdout}");
    let doc = fx.report();
    let rows = doc["results"].as_array().unwrap();
    // iperf3's best and mean share of the ceiling per environment and direction: the reference.
    let reference = |env: &str, workload: &str| -> (f64, f64) {
        let dir = if workload.contains("direction=in]") { "direction=in]" } else { "direction=out]" };
        let r = rows
            .iter()
            .find(|x| {
                x["metric"] == "iperf3_goodput"
                    && x["environment"] == env
                    && x["workload"].as_str().is_some_and(|w| w.ends_with(dir))
            })
            .unwrap_or_else(|| panic!("no iperf3 reference for {env} {dir}: {:?}", doc["failures"]));
        (r["max"].as_f64().unwrap() / 0.941_495, r["median"].as_f64().unwrap() / 0.941_495)
    };
    let mut seen = 0;
    for r in rows {
        let (m, mean) = (r["metric"].as_str().unwrap_or(""), r["mean"].as_f64().unwrap_or(0.0));
        let who = format!("{} / {} / {m}", r["environment"], r["workload"]);
        let ceiling = match m {
            "tcp_goodput" => 0.941_495,
            "udp_recv_rate" => 81.274,
            "tcp_retransmits" => {
                assert!(mean <= 5.0, "{who}: {mean} retransmits per trial on an ordered wire");
                continue;
            }
            _ => continue,
        };
        // The wire's fidelity is what it delivered. For UDP that is what reached the receiving
        // socket: the datagrams received plus those the socket dropped because its buffer was
        // full (the receiver — on a busy 2-core host, the tester — fell behind, after the wire;
        // the report says "receiver-limited" then). A CI run saw the tester's socket drop ~100 000
        // datagrams a trial: 55.6 % received, 97.8 % delivered.
        let (typical, best) = if m == "udp_recv_rate" {
            let name = r["environment"].as_str().unwrap();
            let delivered = udp_delivered_kpps(&fx.db, name);
            assert_eq!(delivered.len(), 3, "{who}: one figure per trial");
            if delivered.iter().any(|(_, d, _, _)| *d > 0.0) {
                // Said among the summary's caveats: "! receiver-limited: native / udp_stream, …".
                let flat = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
                let said = flat.split("! ").any(|c| {
                    c.starts_with("receiver-limited:") && c.contains(&format!("{name} / udp_stream"))
                });
                assert!(
                    said,
                    "{who}: drops at the socket, yet no receiver-limited caveat for {name} in {stdout}"
                );
            }
            let received: Vec<String> = delivered
                .iter()
                .map(|(r, d, o, _)| format!("{r:.2} (+{d:.2} dropped) of {o:.2} sent"))
                .collect();
            println!(
                "    {who}: per trial, kpps received (+ dropped at the socket): {}",
                received.join(", ")
            );
            // The receiver, apart from the wire: virtperf's own receiving code must keep what
            // the wire delivers (measured here: all of it, 0 dropped). A trial where it fell
            // behind (a CI host's tester once kept 55.6 %) is said as a part left out; a receiver
            // that kept less than 98 % in every trial fails — the wire's figure cannot hide it.
            // On a busy host (two spinning threads got less than 90 % of a CPU each beside the
            // run) the tester's receiver shares its CPU with the sender and the other load: falling
            // behind there is the host's, said and not failed (beside a CPU hog: 80–97 % kept).
            let kept: Vec<f64> = delivered.iter().map(|(r, d, _, _)| r / (r + d).max(1e-9)).collect();
            let behind = kept.iter().filter(|k| **k < 0.98).count();
            if share >= 90.0 {
                assert!(
                    kept.iter().any(|k| *k >= 0.98),
                    "{who}: the receiver kept {kept:?} of what the wire delivered, in every trial below 98 % (two spinning threads got {share:.0} % of a CPU each)"
                );
            }
            if behind > 0 {
                dropped(
                    &format!("{name}'s udp receiver in {behind} of 3 trials"),
                    &format!("it kept {kept:.3?} of what the wire delivered: this host's tester fell behind (two spinning threads got {share:.0} % of a CPU each)"),
                );
            }
            // The wire delivers what it is offered, up to its ceiling: a sender descheduled on a
            // busy host offers less (measured beside a hog: 75–81 of 84 kpps sent), and what it
            // did send is the reference for that trial. Scaled to the ceiling for the checks below.
            // Below the ceiling, the share of the datagrams sent that reached the socket, by
            // count: rates over each side's own window disagree beside a hog (one trial "delivered"
            // 80.5 kpps of 77.2 sent: the receiver's window was shorter than the sender's).
            let mut shares: Vec<f64> =
                delivered.iter().map(|(r, d, o, f)| if *o < ceiling { f * ceiling } else { r + d }).collect();
            shares.sort_by(f64::total_cmp);
            (shares[shares.len() / 2], shares.iter().cloned().fold(0.0, f64::max))
        } else {
            (r["median"].as_f64().unwrap_or(0.0), r["max"].as_f64().unwrap_or(0.0))
        };
        // Within 2 % of the analytic ceiling at best, never above it; the typical trial — the
        // median, not the mean — within 5 %: beside load that comes and goes one trial of three
        // can meet the hog at its worst while iperf3's beside it did not (a CI run under jitter:
        // virtperf's mean 94.8 %, its best and iperf3's ≥ 98 %). The median still fails a wire
        // that is slow in two trials of three.
        let (share, best) = (typical / ceiling, best / ceiling);
        println!(
            "    {who}: median {typical:.4} = {:.2} %, best trial {:.2} % of the ceiling",
            share * 100.0,
            best * 100.0
        );
        assert!(
            best <= 1.005,
            "{who}: the best trial is {:.1} % of the ceiling {ceiling}: above it",
            best * 100.0
        );
        // TCP: where iperf3 through the same wire fell short too, the host set the pace.
        let (want_best, want_typical) = if m == "tcp_goodput" {
            let (rb, rm) = reference(r["environment"].as_str().unwrap(), r["workload"].as_str().unwrap());
            println!("    {who}: iperf3 beside it: best {:.2} %, median {:.2} %", rb * 100.0, rm * 100.0);
            (f64::min(0.98, rb - 0.02), f64::min(0.95, rm - 0.03))
        } else {
            (0.98, 0.95)
        };
        assert!(
            best >= want_best,
            "{who}: the best trial is {:.1} % of the ceiling {ceiling} (target ≥ {:.1} %)",
            best * 100.0,
            want_best * 100.0
        );
        assert!(
            share >= want_typical,
            "{who}: the median trial {typical} is {:.1} % of the ceiling {ceiling} (≥ {:.1} % expected)",
            share * 100.0,
            want_typical * 100.0
        );
        seen += 1;
    }
    assert_eq!(seen, 6, "tcp out/in and udp, native and container: {rows:#?}");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Per trial of environment `env` in `db`: (received, dropped at the receiving socket) in kpps,
/// both over the receiver's window, what the sender sent (kpps over its own), and the share of the
/// datagrams sent that were received or dropped at the socket (counts: no window).
fn udp_delivered_kpps(db: &std::path::Path, env: &str) -> Vec<(f64, f64, f64, f64)> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut q = c
        .prepare(
            "SELECT t.extra, (SELECT value FROM samples WHERE trial_id = t.id AND metric = 'udp_rx_socket_drops')
             FROM trials t JOIN environments e ON e.run_id = t.run_id AND e.idx = t.env_idx
             JOIN cases c ON c.run_id = t.run_id AND c.idx = t.case_idx
             WHERE e.name = ?1 AND c.kind = 'udp_stream' AND t.status = 'ok' AND t.warmup = 0 ORDER BY t.seq",
        )
        .unwrap();
    let rows = q
        .query_map([env], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<f64>>(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>();
    rows.into_iter()
        .map(|(extra, drops)| {
            let x: serde_json::Value = serde_json::from_str(&extra).unwrap();
            let server = &x["flows"][0]["server"];
            let secs = server["seconds"].as_f64().unwrap();
            let received = server["received"].as_f64().unwrap();
            let client = &x["flows"][0]["client"];
            let offered = client["sent"].as_f64().unwrap() / client["seconds"].as_f64().unwrap();
            let delivered = (received + drops.unwrap_or(0.0)) / client["sent"].as_f64().unwrap().max(1.0);
            (received / secs / 1e3, drops.unwrap_or(0.0) / secs / 1e3, offered / 1e3, delivered)
        })
        .collect()
}

/// Delay and loss need netem: where the kernel has it, a 1 ms one-way delay shows in every round
/// trip; where it does not, the run is refused before anything is created, with the reason.
pub(crate) fn link_delay_shows_in_round_trips_or_is_refused() -> Outcome {
    if let Some(why) = need_root_and("tc") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let before = root_netns_snapshot();
    let out =
        fx.vp("run --env native --workload udp_rr:duration=500ms --lab delay=1ms --reps 1 --warmup 0 --json");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Asked of the host, not of virtperf: can a netem qdisc be made in a namespace of our own?
    let host_netem = host_has_netem();
    if out.status.code() == Some(3) {
        assert!(stderr.contains("netem") && stderr.contains("CONFIG_NET_SCH_NETEM"), "{stderr}");
        assert!(
            !host_netem,
            "this host makes netem qdiscs (tc in a scratch namespace), yet virtperf refused: {stderr}"
        );
        assert_eq!(before, root_netns_snapshot());
        fx.assert_no_leftovers();
        return Outcome::Skip(format!(
            "delay/loss need the kernel's netem qdisc, which this kernel lacks (refused with the reason, nothing created): {}",
            stderr.lines().find(|l| l.contains("netem")).unwrap_or_default().trim()
        ));
    }
    assert!(out.status.success(), "{stderr}");
    assert!(host_netem, "virtperf ran a link delay where tc could not make a netem qdisc");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p50 = doc["results"].as_array().unwrap().iter().find(|r| r["metric"] == "udp_rr_p50").unwrap()
        ["mean"]
        .as_f64()
        .unwrap();
    assert!(p50 >= 2000.0, "1 ms each way, yet a round trip took {p50} us");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// `pairs = "all"`: one result per ordered pair of environments, rendered as a matrix.
pub(crate) fn all_pairs_matrix_covers_every_ordered_pair() -> Outcome {
    if let Some(why) = need_root_and("ip") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let mut envs = vec!["native", "native:name=b"];
    match need_root_and_env("container") {
        None => envs.push("container"),
        Some(why) => dropped("the container's rows", &why),
    }
    let mut args = vec!["run"];
    for e in &envs {
        args.extend(["--env", e]);
    }
    args.extend("--workload tcp_rr:duration=300ms,pairs=all --reps 2 --warmup 0".split_whitespace());
    let out = fx.vp_args(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("from ↓ to →"), "no matrix in {stdout}");
    let doc = fx.report();
    let names: Vec<&str> = envs.iter().map(|e| e.split_once("name=").map(|x| x.1).unwrap_or(e)).collect();
    let rows = doc["results"].as_array().unwrap();
    for a in &names {
        for b in &names {
            let n = rows
                .iter()
                .filter(|r| r["metric"] == "tcp_rr_rate" && r["environment"] == *a && r["peer"] == *b)
                .count();
            assert_eq!(n, usize::from(a != b), "{a} → {b}: {n} rows");
        }
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// The lab's switch (VSPERF's deployments): the kernel's bridge, Open vSwitch's userspace
/// datapath, and a driver domain (a QEMU guest bridging every endpoint's NIC, Xen's dom0), each
/// carrying 2 instances over one emulated GbE wire: their one-window aggregate never above the
/// wire's ceiling, the switch's own CPU a row of its own where it is a process, nothing left behind.
pub(crate) fn switches_carry_two_instances_on_one_wire() -> Outcome {
    if let Some(why) = need_root_and("tc") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let mut bridge: Option<f64> = None;
    for switch in ["bridge", "ovs", "driver-domain"] {
        let why = match switch {
            "ovs" => need_tools(&["ovs", "ethtool"]),
            "driver-domain" => need_qemu(),
            _ => None,
        };
        if let Some(why) = why {
            dropped(&format!("the {switch} switch"), &why);
            continue;
        }
        // The bridge runs one instance beside the two, interleaved on the same wire: the reference
        // the two are held against is what this host carried on that wire in the same seconds.
        let envs = if switch == "bridge" { "native:instances=[1,2]" } else { "native:instances=2" };
        let out = fx.vp_on(
            &format!("{switch}.db"),
            &format!(
                "run --env {envs} --workload tcp_stream:duration=2s \
                 --lab rate=1gbit,switch={switch} --reps 2 --warmup 0 --json"
            ),
        );
        assert!(out.status.success(), "{switch}: {}", String::from_utf8_lossy(&out.stderr));
        let doc = json_of(&out, switch);
        let env = if switch == "bridge" { "native [instances=2]" } else { "native" };
        let agg = row_or_fail(&doc, env, "tcp_goodput")["mean"].as_f64().unwrap();
        // One window on one wire: never above the ceiling (+0.5 % for the samples' interpolation).
        // The kernel's bridge costs next to no CPU, so the wire is what bounds it: two instances
        // together carry what one carries on it, within 15 % (measured: 0.900 vs 0.911, beside a
        // hog 0.923 vs 0.931 Gbit/s; a host busy with something else made the two 0.878, under a
        // fixed 95 % of the ceiling this once held them to), and one carries a quarter of the
        // ceiling at least (a broken bridge: a trickle). A userspace switch and a TCG driver domain
        // forward on CPU this host shares with the flows (and with whatever else runs here): what
        // they carry is held against the bridge's two measured just before on the same wire — a
        // quarter of it at least, which a switch that forwards at all reaches (measured: ovs
        // 0.57–0.93, driver domain 0.82 of ~0.9 Gbit/s) and a broken one (bad checksums, a lost
        // port: a trickle) does not. How fast each forwards is bench/ovs.sh's figure, beside a
        // bare OVS.
        let ceiling = 0.9415 * 1.005;
        let floor = match bridge {
            None => {
                let one = row_or_fail(&doc, "native [instances=1]", "tcp_goodput")["mean"].as_f64().unwrap();
                assert!(
                    (0.25 * 0.9415..=ceiling).contains(&one),
                    "bridge: 1 instance {one} Gbit/s on a 0.9415 Gbit/s wire"
                );
                println!("    bridge: 1 instance {one:.3} Gbit/s");
                0.85 * one
            }
            Some(b) => 0.25 * b,
        };
        assert!(
            agg <= ceiling && agg >= floor,
            "{switch}: 2 instances together {agg} Gbit/s (at least {floor:.3} expected; the bridge carried {bridge:?})"
        );
        if switch == "bridge" {
            bridge = Some(agg);
        }
        // Both instances got through: Jain's index over the two ≥ 0.6, the smaller's share ≥ 10 %
        // (TCP flows on one wire need not split it evenly: seed 000 saw 500 + 410 Mbit/s).
        let jain = row_or_fail(&doc, env, "tcp_goodput_jain")["mean"].as_f64().unwrap();
        assert!(jain >= 0.6, "{switch}: one instance was starved (Jain's index {jain})");
        let cpu = result_row(&doc, env, "switch_cpu_time").ok().and_then(|r| r["mean"].as_f64());
        match switch {
            "bridge" => assert!(cpu.is_none(), "the kernel's bridge has no process: {cpu:?}"),
            _ => assert!(cpu.is_some_and(|c| c > 10.0), "{switch}: its CPU per 2 s trial: {cpu:?}"),
        }
        assert_eq!(doc["manifest"]["lab"]["switch"], switch);
        println!("    {switch}: 2 instances {agg:.3} Gbit/s, switch CPU {cpu:?} ms per trial");
        fx.assert_no_leftovers();
    }
    Outcome::Pass
}

/// A switch that dies mid-run fails the trial in flight and the rest of its network trials, the
/// run goes on; a virtperf killed with -9 while its OVS runs leaves nothing the next start does not
/// sweep.
pub(crate) fn a_dying_switch_fails_the_trial_and_a_killed_run_is_swept() -> Outcome {
    if let Some(why) = need_root_and("tc") {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tools(&["ovs", "ethtool"]) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let ovs_of = |pid: u32| {
        wait_for(
            || {
                std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
                    let p: u32 = e.file_name().to_string_lossy().parse().ok()?;
                    let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                    let s = String::from_utf8_lossy(&cmd);
                    (s.starts_with("ovs-vswitchd") && s.contains(&format!("run-{pid}/ovs"))).then_some(p)
                })
            },
            20.0,
        )
    };
    let line = "run --env native --workload tcp_rr:duration=1s --workload cpu:iterations=1000000 \
                --lab switch=ovs --reps 6 --warmup 0 --order sequential --json";
    let child = fx.spawn_on("d.db", line);
    let switch = ovs_of(child.id()).expect("the lab's OVS started");
    std::thread::sleep(Duration::from_millis(1500));
    kill(switch, 9);
    let out = child.wait();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let failures = doc["failures"].as_array().cloned().unwrap_or_default();
    assert!(
        failures.iter().any(|f| f["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the lab's switch is down: ovs-vswitchd exited"))),
        "{:#}\n{}",
        doc["failures"],
        String::from_utf8_lossy(&out.stderr)
    );
    // The run went on: the CPU trials (no switch involved) all ran.
    assert_eq!(row_or_fail(&doc, "native", "cpu_rate")["n"], 6, "{:#}", doc["trials"]);
    fx.assert_no_leftovers();
    // Killed with -9 while OVS runs: its daemons die with it (PDEATHSIG); the next start sweeps the
    // rest (namespaces, the run's directory).
    let child = fx.spawn_on("k.db", line);
    ovs_of(child.id()).expect("the lab's OVS started");
    kill(child.id(), 9);
    let _ = child.wait();
    let left = left_for_the_sweep(&fx.state, "a run killed while its OVS ran");
    assert!(left.iter().any(|l| l.starts_with("netns")), "the lab's namespaces were left: {left:?}");
    fx.ok("run --env native --workload noop");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Whether this kernel makes a netem qdisc: `tc qdisc add … netem delay 1ms` on the loopback of a
/// namespace this test makes and removes (independent of virtperf's own probe).
fn host_has_netem() -> bool {
    let ns = format!("vptest-netem-{}", std::process::id());
    if !Command::new("ip").args(["netns", "add", &ns]).status().is_ok_and(|s| s.success()) {
        return false;
    }
    let ok = Command::new("ip")
        .args(["netns", "exec", &ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = Command::new("ip").args(["netns", "delete", &ns]).status();
    ok
}
