//! The libvirt environment under the Debian libvirt daemon `make deps` sets up (QEMU, TCG here).

use crate::util::*;

fn need_libvirt() -> Option<String> {
    need_root_and_env("libvirt").or_else(|| need_tool("virsh"))
}

fn virsh(args: &[&str]) -> Output {
    Command::new("virsh").arg("-q").args(args).output().unwrap()
}

/// virtperf's own guest as a transient TCG domain: memcpy on the host's clock and TCP through
/// the lab's tap (lent to libvirt's namespace for the start, then back on the bridge); afterwards
/// no domain, no lent tap, the root namespace as it was.
pub(crate) fn libvirt_tcg_domain_runs_memcpy_and_tcp_stream() -> Outcome {
    if let Some(why) = need_libvirt() {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let before = root_netns_snapshot();
    let doc = fx.json(
        "run --env native --env libvirt:domain_type=qemu,name=lv --workload \
         memcpy:size=8MiB,copies=10 --workload tcp_stream:duration=1s --reps 2 --warmup \
         0",
    );
    let mean =
        |env: &str, metric: &str| -> f64 { row_or_fail(&doc, env, metric)["mean"].as_f64().unwrap_or(0.0) };
    let goodput = mean("lv", "tcp_goodput");
    // TCG here carries about 1.7–1.9 Gbit/s through virtio-net (MACHINE-NOTES: iperf3 1.9).
    assert!(goodput > 0.1, "TCP through the domain's virtio-net: {goodput} Gbit/s");
    assert!(mean("lv", "tcp_goodput") < mean("native", "tcp_goodput"));
    let m = row_or_fail(&doc, "lv", "memcpy_time");
    assert_eq!(m["clock"], "host", "a guest's figure is headlined on the host's clock: {m}");
    assert!(mean("lv", "memcpy_time") > mean("native", "memcpy_time"), "TCG is slower than the host");
    assert!(mean("lv", "host_cpu_time") > 0.0, "the domain's QEMU process is accounted");
    let e = doc["environments"].as_array().unwrap().iter().find(|x| x["name"] == "lv").unwrap().clone();
    println!(
        "    lv: tcp {goodput:.3} Gbit/s (native {:.2}), memcpy ×{:.2} native, start {:.0} ms",
        mean("native", "tcp_goodput"),
        mean("lv", "memcpy_time") / mean("native", "memcpy_time"),
        e["start_ms_mean"].as_f64().unwrap_or(0.0)
    );
    fx.assert_no_leftovers();
    assert_eq!(root_netns_snapshot(), before, "the root namespace is as it was (the lent tap went back)");
    Outcome::Pass
}

/// kill -9 of a run while libvirt starts its transient domain (the lab's tap lent to libvirt's
/// namespace, the guest booting): libvirt's QEMU is libvirtd's child, not virtperf's, so it
/// outlives the kill; the next start's sweep destroys it and brings the tap back, and the root
/// namespace is as it was.
pub(crate) fn libvirt_kill9_while_the_domain_starts_is_swept() -> Outcome {
    if let Some(why) = need_libvirt() {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let before = root_netns_snapshot();
    let child =
        fx.spawn("run --env libvirt:domain_type=qemu --workload tcp_rr:duration=20s --reps 1 --warmup 0");
    let prefix = format!("virtperf-vp{}-", child.id());
    let running = || {
        String::from_utf8_lossy(&virsh(&["list", "--name"]).stdout)
            .lines()
            .any(|l| l.trim().starts_with(&prefix))
    };
    let seen = wait_for(|| running().then_some(()), 90.0);
    kill(child.id(), 9);
    let _ = child.wait();
    assert!(seen.is_some(), "no domain {prefix}… appeared within 90 s");
    let outlived = running();
    assert!(outlived, "the domain {prefix}… did not outlive the kill (libvirtd's child): nothing to sweep");
    fx.sweep();
    assert!(!running(), "a domain {prefix}… is still running after the next start");
    assert_eq!(root_netns_snapshot(), before, "the root namespace is as it was (the lent tap went back)");
    println!("    killed as {prefix}… started; it outlived the kill: {outlived}; the next start swept it");
    Outcome::Pass
}

/// An existing domain (defined from `virtperf image domain-xml`) is started for each launch,
/// measured, powered off after and stays defined; a running one is refused.
pub(crate) fn libvirt_existing_domain_is_started_and_powered_off() -> Outcome {
    if let Some(why) = need_libvirt() {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let name = format!("vptest-existing-{}", std::process::id());
    let _domain = Domain::define(&fx, &name, None);
    let spec = format!("libvirt:domain={name},name=existing");
    existing_domain_measures(&fx, &spec, &name, "e.db");
    fx.assert_no_leftovers();

    // A running domain is refused before anything is made, with the fix.
    let start = virsh(&["start", &name]);
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    let out = fx.vp_on("r.db", &format!("run --env {spec} --workload memcpy --reps 1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("running") && err.contains("shutdown"), "{err}");
    let st = virsh(&["domstate", &name]);
    assert_eq!(String::from_utf8_lossy(&st.stdout).trim(), "running", "a refused run touches nothing");
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// Refusals before anything is created: libvirt not answering, a domain that does not exist,
/// `domain_type = "kvm"` where KVM cannot run a stock guest, bad parameters (exit 2).
pub(crate) fn libvirt_refusals_name_the_fix() -> Outcome {
    if let Some(why) = need_tool("root") {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tool("virsh") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let run = |spec: &str| -> (Option<i32>, String, f64) {
        let _ = std::fs::remove_file(&fx.db);
        let t0 = Instant::now();
        let out = fx.vp(&format!("run --env {spec} --workload memcpy --reps 1"));
        let secs = t0.elapsed().as_secs_f64();
        assert!(!fx.db.exists() || count_trials(&fx.db, "ok") == 0, "{spec}: nothing measured");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), secs)
    };
    let (code, err, s) = run("libvirt:uri=qemu:///system?socket=/nonexistent/libvirt-sock");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("does not answer") && err.contains("libvirtd"), "{err}");
    println!("    libvirt not answering: exit 3 in {s:.1} s");
    let (code, err, _) = run("libvirt:domain=vp-no-such-domain-here");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("vp-no-such-domain-here") && err.contains("virsh list --all"), "{err}");
    // kvm: refused exactly where doctor says QEMU's KVM cannot run a stock guest.
    let kvm_unusable = doctor_unusable("qemu:accel=kvm");
    let (code, err, _) = run("libvirt:domain_type=kvm");
    match kvm_unusable {
        Some(why) => {
            assert_eq!(code, Some(3), "{err}");
            assert!(err.contains("domain_type = \"qemu\""), "the fix names TCG: {err}");
            println!("    domain_type=kvm refused here ({})", why.chars().take(80).collect::<String>());
        }
        None => println!("    domain_type=kvm runs here (real KVM): exit {code:?}"),
    }
    let (code, err, _) = run("libvirt:domain_type=xen");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("xen:///system"), "{err}");
    for (spec, key) in [
        ("libvirt:snapshot=s1", "snapshot"),
        ("libvirt:uri=nope", "uri"),
        ("libvirt:domain_type=hyperv", "domain_type"),
        ("libvirt:pin=99999", "pin"),
    ] {
        let (code, err, _) = run(spec);
        assert_eq!(code, Some(2), "{spec}: {err}");
        assert!(err.contains(key), "{spec}: the message names `{key}`: {err}");
    }
    fx.assert_no_leftovers();
    Outcome::Pass
}

/// An existing domain reverted to a running snapshot for each launch (`snapshot=`): its agent
/// said hello before the snapshot, so virtperf finds it up by a ping; it measures, is powered off
/// after, and comes up faster than the same domain's cold boot.
pub(crate) fn libvirt_existing_domain_restored_from_a_snapshot() -> Outcome {
    if let Some(why) = need_libvirt() {
        return Outcome::Skip(why);
    }
    if let Some(why) = need_tool("qemu-img") {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new();
    let name = format!("vptest-snap-{}", std::process::id());
    // A running snapshot (memory included) needs a disk that can hold it: a small qcow2.
    let disk = fx.path("d.qcow2");
    let img = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&disk)
        .arg("16M")
        .output()
        .unwrap();
    assert!(img.status.success(), "{}", String::from_utf8_lossy(&img.stderr));
    let _domain = Domain::define(&fx, &name, Some(&disk));
    // Boot it, wait for its agent's hello on the socket, snapshot it running, power it off.
    let start = virsh(&["start", &name]);
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    let sock = fx.path("socks").join("agent.sock");
    let hello = wait_for(
        || {
            let s = std::os::unix::net::UnixStream::connect(&sock).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
            let mut r = std::io::BufReader::new(s);
            let mut line = String::new();
            loop {
                line.clear();
                if std::io::BufRead::read_line(&mut r, &mut line).ok()? == 0 {
                    return None;
                }
                if line.contains("\"hello\"") {
                    return Some(());
                }
            }
        },
        90.0,
    );
    assert!(hello.is_some(), "the domain's agent said hello");
    let snap = virsh(&["snapshot-create-as", &name, "s1"]);
    assert!(snap.status.success(), "{}", String::from_utf8_lossy(&snap.stderr));
    let off = virsh(&["destroy", &name]);
    assert!(off.status.success(), "{}", String::from_utf8_lossy(&off.stderr));
    let start_ms = |spec: &str, db: &str| {
        let doc = existing_domain_measures(&fx, spec, &name, db);
        doc["environments"][0]["start_ms_mean"].as_f64().unwrap_or(f64::NAN)
    };
    let restored = start_ms(&format!("libvirt:domain={name},snapshot=s1,name=d"), "s.db");
    let cold = start_ms(&format!("libvirt:domain={name},name=d"), "c.db");
    assert!(restored < cold, "restored from the snapshot in {restored:.0} ms, booted cold in {cold:.0} ms");
    fx.assert_no_leftovers();
    println!("    up in {restored:.0} ms from snapshot s1, {cold:.0} ms booting cold");
    Outcome::Pass
}

/// Runs memcpy in the existing domain `name` (environment `spec`, named by its `name=`): it
/// measures, and the domain is powered off after, still defined. The run's JSON report.
fn existing_domain_measures(fx: &Fixture, spec: &str, name: &str, db: &str) -> serde_json::Value {
    let out = fx.vp_on(
        db,
        &format!("run --env {spec} --workload memcpy:size=8MiB,copies=10 --reps 2 --warmup 0 --json"),
    );
    assert!(out.status.success(), "{spec}: {}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let label = spec.rsplit("name=").next().unwrap_or(spec);
    let r = row_or_fail(&doc, label, "memcpy_time");
    assert!(r["mean"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    let st = virsh(&["domstate", name]);
    assert_eq!(
        String::from_utf8_lossy(&st.stdout).trim(),
        "shut off",
        "{spec}: powered off after, still defined"
    );
    doc
}

/// A domain defined from `virtperf image domain-xml` (its agent socket in the fixture's `socks`,
/// TCG, with a qcow2 disk if given), destroyed, stripped of snapshot s1 and undefined when dropped.
struct Domain(String);

impl Domain {
    fn define(fx: &Fixture, name: &str, disk: Option<&Path>) -> Domain {
        let socks = fx.path("socks");
        std::fs::create_dir_all(&socks).unwrap();
        let xml = fx.bare(&format!(
            "image domain-xml {name} --socket-dir {} --set domain_type=qemu",
            socks.display()
        ));
        assert_ok(&xml, "image domain-xml");
        let mut xml = String::from_utf8_lossy(&xml.stdout).into_owned();
        if let Some(disk) = disk {
            xml = xml.replacen(
                "</devices>",
                &format!(
                    "<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='{}'/><target dev='vda' bus='virtio'/></disk></devices>",
                    disk.display()
                ),
                1,
            );
        }
        let xml_path = fx.file("d.xml", &xml);
        let def = virsh(&["define", xml_path.to_str().unwrap()]);
        assert!(def.status.success(), "{}", String::from_utf8_lossy(&def.stderr));
        Domain(name.to_string())
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        let _ = virsh(&["destroy", &self.0]);
        let _ = virsh(&["snapshot-delete", &self.0, "s1", "--metadata"]);
        let _ = virsh(&["undefine", &self.0]);
    }
}
