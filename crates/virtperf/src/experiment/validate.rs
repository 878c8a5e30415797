//! The one validator of both front ends: raw items checked against every kind's schema, then
//! the experiment as a whole (lab, instances, memory, disks, size), in steps.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use virtperf_workload::{params, ParamError, Raw};

use crate::env;
use crate::lab::LabSpec;

use virtperf_workload::params::parse_rate_bps;

use super::flags::split_top;
use super::model::*;

/// The tools the workloads run inside an environment (iperf3, fio, …): a guest's image carries
/// them and their libraries (`extra`, beside any the user named); containers, gVisor and UML see
/// the host's.
fn guest_programs(envs: &mut [EnvDef], cases: &[Case]) {
    let mut progs: Vec<String> = Vec::new();
    for c in cases {
        if let Some(w) = virtperf_workload::find(&c.kind) {
            for p in w.programs(&virtperf_workload::Params(&c.params)) {
                if !progs.contains(&p) {
                    progs.push(p);
                }
            }
        }
    }
    if progs.is_empty() {
        return;
    }
    for e in envs.iter_mut().filter(|e| crate::env::find(&e.kind).is_some_and(|k| k.carries_programs())) {
        let mut all: Vec<String> = e.params.get("extra").and_then(Value::as_str).map_or(Vec::new(), |x| {
            x.split(['+', ' ', ',']).filter(|s| !s.is_empty()).map(String::from).collect()
        });
        for p in &progs {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        e.params.insert("extra".into(), Value::from(all.join("+")));
    }
}

/// Guests whose `disk` was not written get a scratch disk when a workload of the experiment
/// writes files (`disk`, `fio`, a file system's client…): virtio-blk for QEMU, virtio for libvirt,
/// ubd for UML.
/// Said as a sizing line (the dry run, the manifest, the report); `disk = "none"` written keeps
/// the guest without one, and then the check of disks says what to do.
fn scratch_by_default(envs: &mut [EnvDef], cases: &[Case]) -> Vec<Sizing> {
    let Some(writer) = cases.iter().find(|c| {
        !c.params.contains_key("dir") && virtperf_workload::find(&c.kind).is_some_and(|w| w.needs_scratch())
    }) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in envs.iter_mut() {
        let Some(model) = crate::env::find(&e.kind).and_then(|k| k.default_scratch_disk()) else { continue };
        if e.raw.iter().any(|(k, _)| k == "disk")
            || e.params.get("disk").and_then(Value::as_str) != Some("none")
        {
            continue;
        }
        e.params.insert("disk".into(), Value::from(model));
        let bytes = e.params.get("disk_size").and_then(Value::as_u64).unwrap_or(0);
        out.push(Sizing {
            case: e.name.clone(),
            key: "disk".into(),
            rule: format!(
                "a scratch disk by default, as workload `{}` writes files; disk = \"none\" goes without",
                writer.label
            ),
            derived: Value::from(model),
            used: Value::from(model),
            bytes_derived: bytes,
            bytes_used: bytes,
            limit: None,
        });
    }
    out
}

/// A delay in µs: `0`, `100us`, `1.5ms`, `1s` (the one parser of durations,
/// [`params::parse_duration_ns`]), at most a minute.
pub fn parse_delay_us(r: &Raw) -> Option<u64> {
    match r {
        Raw::Int(0) => Some(0),
        Raw::Str(s) => {
            params::parse_duration_ns(s).map(|ns| (ns + 500) / 1000).filter(|us| *us <= 60_000_000)
        }
        _ => None,
    }
}

pub(crate) fn lab_spec(raw: &RawExperiment) -> Result<(LabSpec, Vec<(String, Raw)>), InputError> {
    let mut spec = LabSpec::default();
    let mut written = Vec::new();
    for (k, s) in raw.settings.iter().filter(|(k, _)| k.starts_with("lab.")) {
        let key = &k[4..];
        lab_key(&mut spec, key, &s.value).map_err(|m| err(&s.origin, Some(k), m))?;
        written.push((key.to_string(), s.value.clone()));
    }
    switch_settings_fit(raw, &spec)?;
    Ok((spec, written))
}

/// A switch's settings only where that switch has them: pinning and a cap for a process (OVS, a
/// driver domain), vCPUs and the guest's kind for a driver domain.
fn switch_settings_fit(raw: &RawExperiment, spec: &LabSpec) -> Result<(), InputError> {
    let limits = [
        ("switch_cpus", spec.switch_limits.cpus.is_some()),
        ("switch_cap", spec.switch_limits.cap.is_some()),
    ];
    for (k, given) in limits {
        if given && spec.switch == crate::lab::Switch::Bridge {
            let o =
                raw.settings.get(&format!("lab.{k}")).map(|s| s.origin.clone()).unwrap_or(Origin::Default);
            return Err(err(
                &o,
                Some(&format!("lab.{k}")),
                "the kernel's bridge switches in softirq context, on whichever CPU a frame arrives: there is no process to pin or cap; use switch = \"ovs\" or \"driver-domain\"",
            ));
        }
    }
    for k in ["switch_vcpus", "switch_guest"] {
        if raw.settings.contains_key(&format!("lab.{k}")) && spec.switch != crate::lab::Switch::DriverDomain {
            let o =
                raw.settings.get(&format!("lab.{k}")).map(|s| s.origin.clone()).unwrap_or(Origin::Default);
            return Err(err(
                &o,
                Some(&format!("lab.{k}")),
                "that is a driver domain's setting: use switch = \"driver-domain\"",
            ));
        }
    }
    Ok(())
}

/// One `[lab]` key into `spec`; Err is the message (the caller names the file, line and key).
fn lab_key(spec: &mut LabSpec, key: &str, value: &Raw) -> Result<(), String> {
    match key {
        "mtu" => match value {
            Raw::Int(m) if (68..=65535).contains(m) => spec.mtu = *m as u32,
            v => {
                return Err(format!(
                    "got `{v}`: an MTU is an integer from 68 (IPv4's minimum) to 65535"
                ))
            }
        },
        "rate" => {
            spec.rate_bps = Some(parse_rate_bps(value).ok_or_else(|| {
                format!(
                    "got `{}`: expected a rate from 1 bit/s to 1 Tbit/s (no link virtperf shapes is faster), such as \"1gbit\", \"100mbit\" or bits/s",
                    value
                )
            })?)
        }
        "delay" => {
            spec.delay_us = parse_delay_us(value).ok_or_else(|| {
                format!(
                    "got `{}`: expected a one-way delay from 0 to 60s, e.g. \"100us\" or \"1ms\"",
                    value
                )
            })?
        }
        "loss" => {
            let v = match value {
                Raw::Int(i) => Some(*i as f64),
                Raw::Float(f) => Some(*f),
                Raw::Str(t) => t.trim().trim_end_matches('%').trim().parse().ok(),
                Raw::Bool(_) => None,
            };
            match v {
                Some(p) if (0.0..=100.0).contains(&p) => spec.loss_pct = p,
                _ => return Err(format!("got `{}`: loss is a percentage from 0 to 100", value)),
            }
        }
        "tester_cpu" => {
            let t = value.to_string();
            crate::host::check_cpuset(&t)?;
            spec.tester_cpuset = Some(t);
        }
        // Checked against the [[host]]s with the environments (check_remote).
        "tester_host" => match value {
            Raw::Str(h) => spec.tester_host = (h != LOCAL_HOST).then(|| h.clone()),
            v => return Err(format!("got `{v}`, expected the name of a [[host]] (or \"local\")")),
        },
        "switch" => {
            let sw = match value {
                Raw::Str(v) => crate::lab::Switch::parse(v),
                _ => None,
            };
            spec.switch = sw.ok_or_else(|| {
                format!(
                    "got `{}`, expected one of: {} (docs/lab.md)",
                    value,
                    crate::lab::switch::SWITCHES.join(", ")
                )
            })?;
            if spec.switch == crate::lab::Switch::Ovs {
                let missing = crate::lab::switch::ovs_missing();
                if !missing.is_empty() {
                    return Err(format!(
                        "Open vSwitch is not installed here: apt-get install -y {} (or: make deps)",
                        missing.join(" ")
                    ));
                }
            }
        }
        "switch_cpus" => {
            let t = value.to_string();
            crate::host::check_cpuset(&t)?;
            spec.switch_limits.cpus = Some(t);
        }
        "switch_cap" => {
            let cpus = match value {
                Raw::Str(t) => t
                    .trim()
                    .strip_suffix('%')
                    .and_then(|p| p.trim().parse::<f64>().ok())
                    .map(|p| p / 100.0),
                Raw::Float(f) => Some(*f),
                Raw::Int(i) => Some(*i as f64),
                Raw::Bool(_) => None,
            };
            match cpus {
                Some(c) if c > 0.0 && c <= crate::host::facts().cpus as f64 => spec.switch_limits.cap = Some(c),
                _ => {
                    return Err(format!(
                        "got `{}`: a share of the host's CPUs, e.g. \"50%\" (half of one CPU) or 1.5, at most {}",
                        value,
                        crate::host::facts().cpus
                    ))
                }
            }
        }
        // The driver domain's kind: one whose guests can bridge (the hook `bridges`).
        "switch_guest" => match value {
            Raw::Str(g) => match crate::env::find(g).map(|k| k.bridges()) {
                Some(Ok(())) => {}
                Some(Err(why)) => return Err(why),
                None => {
                    return Err(format!(
                        "`{g}` is not an environment kind: the driver domain is a guest that bridges; use switch_guest = \"qemu\""
                    ))
                }
            },
            v => return Err(format!("got `{v}`: the driver domain's kind, e.g. switch_guest = \"qemu\"")),
        },
        "switch_vcpus" => match value {
            Raw::Int(n) if (1..=64).contains(n) => spec.switch_limits.vcpus = *n as u32,
            v => return Err(format!("got `{v}`: the driver domain's vCPUs, 1 to 64")),
        },
        other => return Err(format!("unknown lab key `{other}` (known: {})", LAB_KEYS.join(", "))),
    }
    Ok(())
}

/// Takes the `load*` keys out of one sweep point.
pub(crate) fn load_spec(
    given: &mut BTreeMap<String, Raw>,
    origin: &Origin,
) -> Result<Option<LoadSpec>, InputError> {
    let percent = match given.remove("load") {
        None => 0.0,
        Some(Raw::Int(i)) if (0..=100).contains(&i) => i as f64,
        Some(Raw::Float(f)) if (0.0..=100.0).contains(&f) => f,
        Some(v) => {
            return Err(err(
                origin,
                Some("load"),
                format!("got `{v}`: load is a CPU percentage from 0 to 100"),
            ))
        }
    };
    let on = match given.remove("load_on") {
        None => LoadOn::Dut,
        Some(Raw::Str(s)) if s == "dut" => LoadOn::Dut,
        Some(Raw::Str(s)) if s == "tester" => LoadOn::Tester,
        Some(v) => {
            return Err(err(origin, Some("load_on"), format!("got `{v}`, expected \"dut\" or \"tester\"")))
        }
    };
    let cpus = match given.remove("load_cpus") {
        None => 1,
        Some(Raw::Int(i)) if (1..=1024).contains(&i) => i as u32,
        Some(v) => {
            return Err(err(
                origin,
                Some("load_cpus"),
                format!("got `{v}`, expected a number of loader threads from 1 to 1024"),
            ))
        }
    };
    Ok((percent > 0.0).then_some(LoadSpec { percent, on, cpus }))
}

/// `KIND:a=1,key=[1,2],b=2` without `key`: `KIND:a=1,b=2` (`KIND` alone when nothing is left).
pub(crate) fn without_key(written: &str, key: &str) -> String {
    let Some((kind, rest)) = written.split_once(':') else { return written.to_string() };
    let kept: Vec<&str> = split_top(rest, ',')
        .into_iter()
        .filter(|p| p.split_once('=').is_none_or(|(k, _)| k.trim() != key))
        .collect();
    if kept.iter().all(|p| p.trim().is_empty()) {
        kind.to_string()
    } else {
        format!("{kind}:{}", kept.join(","))
    }
}

pub(crate) fn setting_int(s: &RawSetting, key: &str, min: i64, max: i64) -> Result<i64, InputError> {
    match &s.value {
        Raw::Int(i) if (min..=max).contains(i) => Ok(*i),
        v => Err(err(&s.origin, Some(key), format!("got `{v}`, expected an integer from {min} to {max}"))),
    }
}

/// Checks a raw experiment against every kind's schema and expands sweeps into cases, in steps:
/// settings, environments, workloads, the lab, then the experiment as a whole (what the lab can
/// carry, instances, memory, disks, its size).
pub fn validate(raw: &RawExperiment, whole: &Origin) -> Result<Experiment, InputError> {
    validate_on(raw, whole, crate::host::facts())
}

/// [`validate`] against the facts of a given host (a profile of `host-profiles/` in tests).
pub fn validate_on(
    raw: &RawExperiment,
    whole: &Origin,
    facts: &crate::host::HostFacts,
) -> Result<Experiment, InputError> {
    let Settings {
        name,
        reps_given,
        warmup_given,
        seed,
        freeze_idle,
        equal_counts,
        order,
        timeout_ms,
        launches,
        precision,
        skip_unavailable,
        explain,
    } = settings(raw)?;
    let with_mechanisms;
    let raw = if explain {
        with_mechanisms = explain_cases(raw)?;
        &with_mechanisms
    } else {
        raw
    };

    if raw.envs.is_empty() {
        return Err(err(
            whole,
            Some("env"),
            "no environment: add [[env]] tables or --env KIND (e.g. --env native)",
        ));
    }
    if raw.workloads.is_empty() {
        return Err(err(
            whole,
            Some("workload"),
            "no workload: add [[workload]] tables or --workload KIND (e.g. --workload memcpy)",
        ));
    }

    let hosts = hosts(raw)?;
    let mut envs = environments(raw, &hosts)?;
    let (workloads, mut cases) = workloads(raw)?;
    guest_programs(&mut envs, &cases);
    let disks = scratch_by_default(&mut envs, &cases);
    let mut sizings = size_from_host(&envs, &mut cases, facts);
    sizings.extend(disks);
    let (lab, lab_raw) = lab_spec(raw)?;
    // A procedure (RFC 2544) is many trials already: its kind may ask for fewer repetitions.
    let procedure_reps: Option<(u32, u32)> = raw
        .workloads
        .iter()
        .map(|i| virtperf_workload::find(&i.kind).and_then(|w| w.default_reps()))
        .try_fold((u32::MAX, u32::MAX), |a, d| d.map(|d| (a.0.min(d.0), a.1.min(d.1))));
    let reps = reps_given.map(|r| r as u32).or(procedure_reps.map(|p| p.0)).unwrap_or(10);
    let warmup = warmup_given.map(|r| r as u32).or(procedure_reps.map(|p| p.1)).unwrap_or(1);
    check_precision(raw, whole, &envs, reps, launches, precision.as_ref())?;
    check_lab(raw, whole, &envs, &cases, &lab)?;
    check_instances(whole, &envs, &cases)?;
    check_memory(whole, &envs, &cases, facts)?;
    check_disks(whole, &envs, &cases)?;
    check_remote(raw, &hosts, &envs, &cases, &lab)?;
    let trials = (envs.len() as u64)
        .saturating_mul(cases.len() as u64)
        .saturating_mul(u64::from(reps + warmup))
        .saturating_mul(u64::from(launches));
    if trials > MAX_TRIALS {
        return Err(err(
            whole,
            Some("reps"),
            format!(
                "{} environments × {} cases × {} repetitions (warm-ups included) = {trials} trials, more than {MAX_TRIALS}: \
                 split the experiment or lower reps",
                envs.len(),
                cases.len(),
                reps + warmup
            ),
        ));
    }
    Ok(Experiment {
        name,
        reps,
        warmup,
        order,
        seed,
        timeout_ms,
        freeze_idle,
        equal_counts,
        envs,
        workloads,
        cases,
        lab,
        lab_raw,
        hosts,
        sizings,
        launches,
        precision,
        skip_unavailable,
        explain,
    })
}

/// Step 1b: the `[[host]]` tables (names unique, not `local`; an ssh destination that is not an
/// option; an ssh_config that exists).
fn hosts(raw: &RawExperiment) -> Result<Vec<HostDef>, InputError> {
    let mut out: Vec<HostDef> = Vec::new();
    for (origin, keys) in &raw.hosts {
        let get = |k: &str| keys.iter().find(|(n, _, _)| n == k);
        let text = |k: &str| -> Result<Option<String>, InputError> {
            match get(k) {
                None => Ok(None),
                Some((_, Raw::Str(s), _)) => Ok(Some(s.clone())),
                Some((_, v, o)) => {
                    Err(err(o, Some(&format!("host.{k}")), format!("got `{v}`, expected text")))
                }
            }
        };
        let name = text("name")?.ok_or_else(|| {
            err(
                origin,
                Some("host.name"),
                "every [[host]] needs name = \"...\" (environments say host = NAME)",
            )
        })?;
        let at = |k: &str| get(k).map(|x| x.2.clone()).unwrap_or_else(|| origin.clone());
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(err(
                &at("name"),
                Some("host.name"),
                format!("`{name}`: a host's name is letters, digits, - and _"),
            ));
        }
        if name == LOCAL_HOST {
            return Err(err(
                &at("name"),
                Some("host.name"),
                "`local` means this machine: name the host otherwise",
            ));
        }
        if out.iter().any(|h| h.name == name) {
            return Err(err(&at("name"), Some("host.name"), format!("two hosts are named `{name}`")));
        }
        let ssh = text("ssh")?.ok_or_else(|| {
            err(
                origin,
                Some("host.ssh"),
                format!("host `{name}` needs ssh = \"user@address\" (or a Host of your ssh config)"),
            )
        })?;
        if ssh.is_empty() || ssh.starts_with('-') || ssh.contains(char::is_whitespace) {
            return Err(err(
                &at("ssh"),
                Some("host.ssh"),
                format!("`{ssh}` is not an ssh destination (user@address, or a Host of your ssh config)"),
            ));
        }
        let ssh_config = text("ssh_config")?;
        if let Some(c) = &ssh_config {
            if !std::path::Path::new(c).is_file() {
                return Err(err(
                    &at("ssh_config"),
                    Some("host.ssh_config"),
                    format!("{c} does not exist or is not a file"),
                ));
            }
        }
        let ip = |k: &str| -> Result<Option<std::net::IpAddr>, InputError> {
            match text(k)? {
                None => Ok(None),
                Some(a) => a.parse().map(Some).map_err(|_| {
                    err(
                        &at(k),
                        Some(&format!("host.{k}")),
                        format!("`{a}` is not an IP address (e.g. 198.18.7.2)"),
                    )
                }),
            }
        };
        let (addr, local_addr) = (ip("addr")?, ip("local_addr")?);
        out.push(HostDef { name, ssh, ssh_config, addr, local_addr });
    }
    Ok(out)
}

/// What an environment on another host can run today: any kind, any number of instances, with
/// CPU, memory, system-call and disk workloads (in the host's scratch, never `dir=`); network
/// workloads (with the host's addresses; each instance's flows have ports of their own) in native
/// and container environments. docs/remote.md says what is next.
fn check_remote(
    raw: &RawExperiment,
    hosts: &[HostDef],
    envs: &[EnvDef],
    cases: &[Case],
    lab: &LabSpec,
) -> Result<(), InputError> {
    check_tester_host(raw, hosts, envs, cases, lab)?;
    for e in envs.iter().filter(|e| e.host.is_some()) {
        let item = raw.envs.get(e.item);
        let o = item
            .and_then(|i| i.params.iter().find(|p| p.0 == "host").map(|p| p.2.clone()))
            .unwrap_or_else(|| Origin::File { path: "experiment".into(), line: 1 });
        let host = e.host.clone().unwrap_or_default();
        let guest = !crate::env::find(&e.kind).is_some_and(|k| k.uses_host_network());
        if let Some(c) = cases.iter().find(|c| c.matrix) {
            return Err(err(&o, Some("host"), format!(
                "environment `{}` on host `{host}` and workload `{}`: pairs = \"all\" runs only here so far", e.name, c.label)));
        }
        // Disk workloads write into the instance's directory on the host's scratch disk; a
        // directory named here (`dir=`) would be this machine's.
        if let Some(c) = cases.iter().find(|c| c.params.contains_key("dir")) {
            return Err(err(&o, Some("host"), format!(
                "environment `{}` on host `{host}` and workload `{}`: dir= names a directory on this machine; leave it out (the host's VIRTPERF_SCRATCH decides there)", e.name, c.label)));
        }
        // Network workloads: between the host's agents (on `addr`) and the tester here (on
        // `local_addr`), over the user's own network: no lab.
        if let Some(c) = cases.iter().find(|c| c.network || c.load.is_some_and(|l| l.on == LoadOn::Tester)) {
            if guest {
                return Err(err(&o, Some("host"), format!(
                    "environment `{}` ({}) on host `{host}` and workload `{}`: a guest on another host has no network to the tester yet (it would need a tap on the host's path); network workloads run there in native and container environments", e.name, e.kind, c.label)));
            }
            let h = hosts.iter().find(|h| h.name == host);
            let hat = |k: &str| {
                raw.hosts
                    .iter()
                    .find(|(_, keys)| {
                        keys.iter().any(|(n, v, _)| n == "name" && *v == Raw::Str(host.clone()))
                    })
                    .map(|(o, keys)| {
                        keys.iter().find(|(n, _, _)| n == k).map(|x| x.2.clone()).unwrap_or(o.clone())
                    })
                    .unwrap_or(o.clone())
            };
            // With the tester on a host, an environment's host needs only its own address.
            let local = if lab.tester_host.is_some() {
                None
            } else {
                Some(("local_addr", h.and_then(|h| h.local_addr)))
            };
            for (k, v) in std::iter::once(("addr", h.and_then(|h| h.addr))).chain(local) {
                if v.is_none() {
                    return Err(err(&hat(k), Some(&format!("host.{k}")), format!(
                        "workload `{}` runs between host `{host}` and the tester here: give host `{host}` addr = \"…\" (its address on the path under test) and local_addr = \"…\" (this machine's)", c.label)));
                }
            }
            if let Some((k, _)) =
                raw.settings.iter().find(|(k, _)| k.starts_with("lab.") && !TESTER_KEYS.contains(&k.as_str()))
            {
                return Err(err(&raw.settings[k].origin, Some(k), "link emulation shapes the lab, and network workloads between hosts cross your own network: leave it out"));
            }
        }
    }
    Ok(())
}

/// The lab keys that are about the tester, not the lab's link: they hold without a lab.
const TESTER_KEYS: &[&str] = &["lab.tester_cpu", "lab.tester_host"];

/// `[lab] tester_host = "c"`: the tester runs on host c (the seeds' traffic generator on a second
/// machine) and network workloads cross the user's network from each environment's address to
/// c's `addr`: a remote environment binds its host's `addr`, one here binds c's `local_addr` (in
/// this machine's own network namespace, no lab; native and container only).
fn check_tester_host(
    raw: &RawExperiment,
    hosts: &[HostDef],
    envs: &[EnvDef],
    cases: &[Case],
    lab: &LabSpec,
) -> Result<(), InputError> {
    let Some(t) = &lab.tester_host else { return Ok(()) };
    let o = raw.settings.get("lab.tester_host").map(|s| s.origin.clone()).unwrap_or(Origin::Default);
    let Some(h) = hosts.iter().find(|h| &h.name == t) else {
        let known: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        return Err(err(&o, Some("lab.tester_host"), format!(
            "unknown host `{t}` (declared: {}): add a [[host]] table with name = \"{t}\", ssh = \"user@address\" and addr = \"…\"",
            if known.is_empty() { "none".to_string() } else { known.join(", ") })));
    };
    let Some(c) = cases.iter().find(|c| c.network || c.load.is_some_and(|l| l.on == LoadOn::Tester)) else {
        return Ok(());
    };
    if h.addr.is_none() {
        return Err(err(&o, Some("lab.tester_host"), format!(
            "the tester runs on host `{t}` for workload `{}`: give host `{t}` addr = \"…\" (its address on the path under test)", c.label)));
    }
    if let Some(m) = cases.iter().find(|c| c.matrix) {
        return Err(err(&o, Some("lab.tester_host"), format!(
            "workload `{}` runs between pairs of environments, with no tester: run it without tester_host", m.label)));
    }
    if let Some((k, _)) =
        raw.settings.iter().find(|(k, _)| k.starts_with("lab.") && !TESTER_KEYS.contains(&k.as_str()))
    {
        return Err(err(&raw.settings[k].origin, Some(k), "link emulation shapes the lab, and with tester_host the traffic crosses your own network: leave it out"));
    }
    for e in envs.iter().filter(|e| e.host.is_none()) {
        let eo = raw.envs.get(e.item).map(|i| i.origin.clone()).unwrap_or(o.clone());
        if !crate::env::find(&e.kind).is_some_and(|k| k.uses_host_network()) {
            return Err(err(&eo, Some("lab.tester_host"), format!(
                "environment `{}` ({}) is here and the tester on host `{t}`: a guest here reaches a tester only through the lab; put the tester here, or run the guest on a host", e.name, e.kind)));
        }
        if h.local_addr.is_none() {
            return Err(err(&o, Some("lab.tester_host"), format!(
                "environment `{}` is here and the tester on host `{t}`: give host `{t}` local_addr = \"…\" (this machine's address on the path to it)", e.name)));
        }
    }
    Ok(())
}

/// The experiment's own settings (name, repetitions, order, seed, timeout…), as given.
struct Settings {
    name: String,
    reps_given: Option<i64>,
    warmup_given: Option<i64>,
    seed: u64,
    freeze_idle: bool,
    equal_counts: bool,
    order: Order,
    timeout_ms: u64,
    launches: u32,
    precision: Option<Precision>,
    skip_unavailable: bool,
    explain: bool,
}

/// A boolean setting: `true`/`false` (or the words, from a flag).
fn setting_bool(s: &RawSetting, key: &str) -> Result<bool, InputError> {
    match &s.value {
        Raw::Bool(b) => Ok(*b),
        Raw::Str(v) if v == "true" || v == "false" => Ok(v == "true"),
        v => Err(err(&s.origin, Some(key), format!("got `{v}`, expected true or false"))),
    }
}

/// `precision = "2%"` (the target half-width of each overhead ratio's 95 % CI, relative to the
/// ratio; a bare number is a percentage too) and `budget = "5m"`.
fn precision_setting(raw: &RawExperiment) -> Result<Option<Precision>, InputError> {
    let get = |k: &str| raw.settings.get(k);
    let Some(p) = get("precision") else {
        if let Some(b) = get("budget") {
            return Err(err(
                &b.origin,
                Some("budget"),
                "a budget bounds precision mode: give precision = \"2%\" (the target half-width of each ratio's 95 % CI) with it",
            ));
        }
        return Ok(None);
    };
    let pct = match &p.value {
        Raw::Str(t) => t.trim().strip_suffix('%').and_then(|n| n.trim().parse::<f64>().ok()),
        Raw::Int(i) => Some(*i as f64),
        Raw::Float(f) => Some(*f),
        Raw::Bool(_) => None,
    };
    let percent = match pct {
        Some(x) if x > 0.0 && x < 100.0 && x.is_finite() => x,
        _ => {
            return Err(err(
                &p.origin,
                Some("precision"),
                format!("got `{}`, expected a percentage above 0 and below 100, e.g. \"2%\"", p.value),
            ))
        }
    };
    let budget_ms = match get("budget") {
        None => DEFAULT_BUDGET_MS,
        Some(b) => match &b.value {
            Raw::Str(v) => match params::parse_duration_ms(v) {
                Some(ms) if (1000..=MAX_BUDGET_MS).contains(&ms) => ms,
                _ => {
                    return Err(err(
                        &b.origin,
                        Some("budget"),
                        format!("got `{v}`, expected a duration from 1s to 7 days, e.g. \"5m\""),
                    ))
                }
            },
            v => {
                return Err(err(
                    &b.origin,
                    Some("budget"),
                    format!("got `{v}`, expected a duration in quotes, e.g. \"5m\""),
                ))
            }
        },
    };
    Ok(Some(Precision { percent, budget_ms }))
}

/// Step 1: the settings.
fn settings(raw: &RawExperiment) -> Result<Settings, InputError> {
    let get = |k: &str| raw.settings.get(k);
    let name = match get("name") {
        Some(RawSetting { value: Raw::Str(s), .. }) if !s.trim().is_empty() => s.clone(),
        Some(s) => return Err(err(&s.origin, Some("name"), "expected non-empty text")),
        None => "experiment".to_string(),
    };
    let reps_given = get("reps").map(|s| setting_int(s, "reps", 1, MAX_REPS)).transpose()?;
    let warmup_given = get("warmup").map(|s| setting_int(s, "warmup", 0, 1_000_000)).transpose()?;
    let seed = get("seed").map(|s| setting_int(s, "seed", 0, i64::MAX)).transpose()?.unwrap_or(1) as u64;
    let freeze_idle = get("freeze_idle").map(|s| setting_bool(s, "freeze_idle")).transpose()?.unwrap_or(true);
    let equal_counts = match get("counts") {
        None => true,
        Some(RawSetting { value: Raw::Str(v), .. }) if v == "equal" || v == "each" => v == "equal",
        Some(s) => {
            return Err(err(
                &s.origin,
                Some("counts"),
                format!("got `{}`, expected \"equal\" (every environment the same count: equal work) or \"each\" (each its own 0.2 s count)", s.value),
            ))
        }
    };
    let order = match get("order") {
        None => Order::Paired,
        Some(s) => match &s.value {
            Raw::Str(v) if Order::parse(v).is_some() => Order::parse(v).unwrap_or(Order::Paired),
            v => {
                return Err(err(
                    &s.origin,
                    Some("order"),
                    format!("got `{v}`, expected one of: {}", Order::NAMES.join(", ")),
                ))
            }
        },
    };
    let timeout_ms = match get("timeout") {
        None => DEFAULT_TIMEOUT_MS,
        Some(s) => match &s.value {
            Raw::Str(v) => match params::parse_duration_ms(v) {
                Some(ms) if (100..=MAX_TIMEOUT_MS).contains(&ms) => ms,
                _ => {
                    return Err(err(
                        &s.origin,
                        Some("timeout"),
                        format!("got `{v}`, expected a duration from 100ms to 24h, e.g. \"30s\" (a trial's deadline: none takes longer than a day)"),
                    ))
                }
            },
            v => {
                return Err(err(
                    &s.origin,
                    Some("timeout"),
                    format!("got `{v}`, expected a duration in quotes, e.g. \"30s\""),
                ))
            }
        },
    };
    let launches =
        get("launches").map(|s| setting_int(s, "launches", 1, 1000)).transpose()?.unwrap_or(1) as u32;
    let skip_unavailable =
        get("skip_unavailable").map(|s| setting_bool(s, "skip_unavailable")).transpose()?.unwrap_or(false);
    let precision = precision_setting(raw)?;
    let explain = get("explain").map(|s| setting_bool(s, "explain")).transpose()?.unwrap_or(false);
    Ok(Settings {
        name,
        reps_given,
        warmup_given,
        seed,
        freeze_idle,
        equal_counts,
        order,
        timeout_ms,
        launches,
        precision,
        skip_unavailable,
        explain,
    })
}

/// `explain = true`: the experiment with the mechanism cases the model needs that it lacks (a
/// case of that kind, with the parameters the mechanism names, counts as there).
fn explain_cases(raw: &RawExperiment) -> Result<RawExperiment, InputError> {
    let mut out = raw.clone();
    // Packets are counted for network workloads only, and priced by one (which needs the lab).
    let network = raw.workloads.iter().any(is_network);
    // The packets' price in flows as long as the shortest the experiment gives its network
    // workloads (its default, 1 s, doubled the explain example's run).
    let flow_ms = shortest_flow(raw);
    for m in virtperf_record::mechanisms::MECHANISMS {
        if priced_by_a_flow(&m) && !network {
            continue;
        }
        if !raw.workloads.iter().any(|w| stands_for(w, &m)) {
            let mut parts: Vec<String> = m.name.map(|n| format!("name={n}")).into_iter().collect();
            parts.extend(m.params.iter().map(|(k, v)| format!("{k}={v}")));
            if let Some(d) = flow_ms.filter(|_| priced_by_a_flow(&m)) {
                parts.push(format!("duration={d}ms"));
            }
            let spec =
                if parts.is_empty() { m.kind.to_string() } else { format!("{}:{}", m.kind, parts.join(",")) };
            out.workloads.push(super::flags::read_flag("explain = true", &spec)?);
        }
    }
    if let Some(w) = raw.settings.get("warmup").filter(|w| matches!(w.value, Raw::Int(0))) {
        return Err(err(
            &w.origin,
            Some("warmup"),
            "explain = true counts each case's events on its warm-up: give warmup = 1 (or leave it out)",
        ));
    }
    Ok(out)
}

/// A mechanism priced by a network workload (packets: a flow with the lab's tester).
pub(super) fn priced_by_a_flow(m: &virtperf_record::mechanisms::Mechanism) -> bool {
    virtperf_workload::find(m.kind).is_some_and(|w| w.needs_peer())
}

/// The workload as written gives a case that prices `m`: its kind, and each parameter `m` names
/// given that value (one of a sweep's) or left at that default; `payload`, which overrides the
/// frame size, not given.
fn stands_for(w: &RawItem, m: &virtperf_record::mechanisms::Mechanism) -> bool {
    let default = |k: &str| {
        virtperf_workload::find(&w.kind).and_then(|x| x.params().iter().find(|p| p.name == k)?.default)
    };
    w.kind == m.kind
        && (m.params.is_empty() || !w.params.iter().any(|(k, _, _)| k == "payload"))
        && m.params.iter().all(|(k, v)| match w.params.iter().find(|(pk, _, _)| pk == k) {
            Some((_, vals, _)) => vals.iter().any(|x| x.to_string() == *v),
            None => default(k) == Some(*v),
        })
}

/// A network workload (a flow with a peer: it needs the lab).
fn is_network(w: &RawItem) -> bool {
    virtperf_workload::find(&w.kind).is_some_and(|k| k.needs_peer())
}

/// The shortest `duration` (ms) given to a network workload, as written; None where none is.
fn shortest_flow(raw: &RawExperiment) -> Option<u64> {
    raw.workloads
        .iter()
        .filter(|w| is_network(w))
        .flat_map(|w| w.params.iter().filter(|(k, _, _)| k == "duration"))
        .flat_map(|(_, vals, _)| vals.iter())
        .filter_map(|v| virtperf_workload::params::parse_duration_ms(&v.to_string()))
        .min()
}

/// Step 2: each environment against its kind's schema (names unique; `instances` swept; `host`
/// one of the `[[host]]`s).
fn environments(raw: &RawExperiment, hosts: &[HostDef]) -> Result<Vec<EnvDef>, InputError> {
    let mut envs = Vec::new();
    let mut names = BTreeSet::new();
    let mut against_at: Vec<(String, Origin)> = Vec::new();
    for (item_idx, item) in raw.envs.iter().enumerate() {
        let mut against_origin: Option<Origin> = None;
        let kind = env::find(&item.kind).ok_or_else(|| {
            err(
                &item.origin,
                Some("kind"),
                format!("unknown environment kind `{}` (known: {})", item.kind, env::kinds().join(", ")),
            )
        })?;
        let mut given = BTreeMap::new();
        let mut rawv = Vec::new();
        let mut counts: Vec<u32> = vec![1];
        // Where it runs: this machine, one [[host]], or a list (a campaign: one environment per
        // host, each named `NAME [host=H]`, run by that host's worker).
        let mut on: Vec<Option<String>> = vec![None];
        let mut knobs: Vec<(String, Vec<Raw>, Origin)> = Vec::new();
        let mut against_given: Option<String> = None;
        let mut together = false;
        for (k, vals, o) in &item.params {
            if k == "against" {
                match vals.as_slice() {
                    [Raw::Str(a)] => against_given = Some(a.clone()),
                    _ => return Err(err(o, Some("against"), "expected the name of another environment of the experiment, whose figures this one's are also stated against")),
                }
                against_origin = Some(o.clone());
                continue;
            }
            if k == "host" {
                let mut seen = BTreeSet::new();
                on = Vec::new();
                for v in vals {
                    let Raw::Str(name) = v else {
                        return Err(err(o, Some("host"), format!("got `{v}`, expected the name of a [[host]] (or \"local\"), or a list of them to run the environment on each")));
                    };
                    if !seen.insert(name.clone()) {
                        return Err(err(o, Some("host"), format!("host `{name}` is listed twice")));
                    }
                    if name != LOCAL_HOST && !hosts.iter().any(|h| h.name == *name) {
                        let known: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
                        return Err(err(o, Some("host"), format!(
                            "unknown host `{name}` (declared: {}): add a [[host]] table with name = \"{name}\" and ssh = \"user@address\"",
                            if known.is_empty() { "none".to_string() } else { known.join(", ") })));
                    }
                    on.push((name != LOCAL_HOST).then(|| name.clone()));
                }
                if on.is_empty() {
                    return Err(err(
                        o,
                        Some("host"),
                        "an empty list of hosts: name at least one (\"local\" is this machine)",
                    ));
                }
                continue;
            }
            if k == "start" {
                // How several instances start (docs/lifecycle.md): one after another (each
                // asked for once the one before is ready), or all asked for at once.
                together = match vals.as_slice() {
                    [Raw::Str(s)] if s == "together" => true,
                    [Raw::Str(s)] if s == "one by one" => false,
                    _ => {
                        return Err(err(
                            o,
                            Some("start"),
                            format!("got `{}`, expected \"together\" (every instance asked for at once) or \"one by one\" (each once the one before is ready; the default)", vals.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
                        ))
                    }
                };
                continue;
            }
            if k == "instances" {
                // Any environment; a list is swept (one environment per count).
                counts = vals
                    .iter()
                    .map(|v| match v {
                        Raw::Int(i) if (1..=MAX_INSTANCES).contains(i) => Ok(*i as u32),
                        v => Err(err(
                            o,
                            Some("instances"),
                            format!("got `{v}`, expected a number of instances from 1 to {MAX_INSTANCES}, or a list of them to sweep"),
                        )),
                    })
                    .collect::<Result<_, _>>()?;
                continue;
            }
            if k == "knobs" {
                // One knob at a time (docs/knobs.md): the environment as given, and beside it one
                // environment per value of each knob named, each stated against it.
                for v in vals {
                    let name = v.to_string();
                    let Some(values) = kind.knob_values(&name) else {
                        let known = kind.knob_names();
                        return Err(err(
                            o,
                            Some("knobs"),
                            format!(
                                "`{name}` is not a knob of `{}` ({}){}",
                                item.kind,
                                if known.is_empty() {
                                    "it has none".to_string()
                                } else {
                                    format!("its knobs: {}", known.join(", "))
                                },
                                if known.is_empty() {
                                    String::new()
                                } else {
                                    format!("; e.g. knobs = [\"{}\"]", known[0])
                                }
                            ),
                        ));
                    };
                    if knobs.iter().any(|(n, _, _): &(String, Vec<Raw>, Origin)| *n == name) {
                        return Err(err(o, Some("knobs"), format!("knob `{name}` is listed twice")));
                    }
                    knobs.push((name, values, o.clone()));
                }
                continue;
            }
            if vals.len() != 1 {
                return Err(err(o, Some(k), "environment parameters cannot be swept: declare one environment per value, each with its own name, or name the parameter in knobs = [...] to measure each value against the default"));
            }
            if given.insert(k.clone(), vals[0].clone()).is_some() {
                return Err(err(o, Some(k), "given twice"));
            }
            rawv.push((k.clone(), vals[0].clone()));
        }
        if together && on.iter().any(Option::is_some) {
            let o = item
                .params
                .iter()
                .find(|p| p.0 == "start")
                .map(|p| p.2.clone())
                .unwrap_or(item.origin.clone());
            return Err(err(&o, Some("start"), "start = \"together\" is for instances on this machine (a [[host]]'s are started over ssh one by one): leave `start` out, or run it on \"local\""));
        }
        let params =
            params::resolve(kind.params(), &given).map_err(|ParamError { key: k, message: m }| {
                let o =
                    item.params.iter().find(|p| p.0 == k).map(|p| p.2.clone()).unwrap_or(item.origin.clone());
                err(&o, Some(&k), m)
            })?;
        kind.check(&params).map_err(|e| err(&item.origin, Some(&e.key), e.message))?;
        // Its name as written, less the instance count and the hosts (which the sweep's names add
        // back).
        let campaign = on.len() > 1;
        let label = item.name.clone().unwrap_or_else(|| {
            let l = without_key(&without_key(&without_key(&item.written, "instances"), "knobs"), "start");
            if campaign {
                without_key(&l, "host")
            } else {
                l
            }
        });
        // The environment as given, then its knobs' variants: each the same but for one knob.
        let mut variants = vec![(None, params.clone(), rawv.clone())];
        for (knob, values, o) in &knobs {
            if given.contains_key(knob) {
                return Err(err(o, Some("knobs"), format!(
                    "`{knob}` is both set (to `{}`) and a knob to vary: a knob's variants are measured against the default, so leave `{knob}` out or drop it from knobs",
                    given[knob]
                )));
            }
            for value in values {
                let mut g = given.clone();
                g.insert(knob.clone(), value.clone());
                let p = params::resolve(kind.params(), &g)
                    .map_err(|ParamError { key: k, message: m }| err(o, Some(&k), m))?;
                kind.check(&p).map_err(|e| err(o, Some(&e.key), e.message))?;
                let mut r = rawv.clone();
                r.push((knob.clone(), value.clone()));
                variants.push((Some(format!("{knob}={value}")), p, r));
            }
        }
        for host in &on {
            let at = match host {
                Some(h) if campaign => format!("{label} [host={h}]"),
                None if campaign => format!("{label} [host={LOCAL_HOST}]"),
                _ => label.clone(),
            };
            for &n in &counts {
                let name = if counts.len() > 1 { format!("{at} [instances={n}]") } else { at.clone() };
                for (knob, params, raw) in &variants {
                    let (vname, against) = match knob {
                        Some(k) => (format!("{name} [{k}]"), Some(name.clone())),
                        None => (name.clone(), None),
                    };
                    if !names.insert(vname.clone()) {
                        return Err(err(
                            &item.origin,
                            Some("name"),
                            format!("two environments are named `{vname}`: give each a distinct name="),
                        ));
                    }
                    envs.push(EnvDef {
                        name: vname.clone(),
                        kind: item.kind.clone(),
                        params: params.clone(),
                        raw: raw.clone(),
                        instances: n,
                        together,
                        group: if knob.is_some() {
                            format!("{at} [{}]", knob.as_deref().unwrap_or_default())
                        } else {
                            at.clone()
                        },
                        host: host.clone(),
                        item: item_idx,
                        against: against.or_else(|| against_given.clone()),
                    });
                    if let Some(o) = &against_origin {
                        against_at.push((vname.clone(), o.clone()));
                    }
                }
            }
        }
    }
    // `against` names another environment of the experiment, on the same machine.
    for (name, o) in against_at {
        let Some(e) = envs.iter().find(|e| e.name == name) else { continue };
        let a = e.against.clone().unwrap_or_default();
        match envs.iter().find(|x| x.name == a) {
            None => {
                let known: Vec<&str> = envs.iter().map(|x| x.name.as_str()).filter(|n| *n != name).collect();
                return Err(err(
                    &o,
                    Some("against"),
                    format!("no environment is named `{a}` (the experiment's: {})", known.join(", ")),
                ));
            }
            Some(x) if x.name == name => {
                return Err(err(&o, Some("against"), "an environment cannot be stated against itself"))
            }
            Some(x) if x.host != e.host => {
                return Err(err(
                    &o,
                    Some("against"),
                    format!("`{a}` runs on another machine: a ratio across machines measures the machines"),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(envs)
}

/// Step 3: each workload against its kind's schema, its sweeps expanded into cases.
fn workloads(raw: &RawExperiment) -> Result<(Vec<WorkloadDef>, Vec<Case>), InputError> {
    let mut workloads = Vec::new();
    let mut cases = Vec::new();
    let mut wnames = BTreeSet::new();
    for item in &raw.workloads {
        let w = virtperf_workload::find(&item.kind).ok_or_else(|| {
            err(
                &item.origin,
                Some("kind"),
                format!(
                    "unknown workload kind `{}` (known: {})",
                    item.kind,
                    virtperf_workload::kinds().join(", ")
                ),
            )
        })?;
        let given_params = given_params(w, item)?;
        let item_params = &given_params;
        let label = item.name.clone().unwrap_or_else(|| item.written.clone());
        if !wnames.insert(label.clone()) {
            return Err(err(
                &item.origin,
                Some("name"),
                format!("two workloads are named `{label}`: give each a distinct name="),
            ));
        }
        let points = sweep_points(item_params, &item.origin)?;
        let swept: Vec<&String> = item_params.iter().filter(|p| p.1.len() > 1).map(|p| &p.0).collect();
        for point in points {
            let mut given: BTreeMap<String, Raw> = point.iter().cloned().collect();
            let load = load_spec(&mut given, &item.origin)?;
            if load.is_some_and(|l| l.on == LoadOn::Tester) && !w.needs_peer() {
                return Err(err(
                    &item.origin,
                    Some("load_on"),
                    "the tester exists only for network workloads; put the load on the \"dut\"",
                ));
            }
            let matrix = pairs(&mut given, load, w, &item.origin)?;
            let origin_of = |k: &str| {
                item_params.iter().find(|p| p.0 == k).map(|p| p.2.clone()).unwrap_or(item.origin.clone())
            };
            let mut params = params::resolve(w.params(), &given)
                .map_err(|ParamError { key: k, message: m }| err(&origin_of(&k), Some(&k), m))?;
            w.read_host_files(&mut params)
                .map_err(|ParamError { key: k, message: m }| err(&origin_of(&k), Some(&k), m))?;
            let suffix: Vec<String> =
                point.iter().filter(|(k, _)| swept.contains(&k)).map(|(k, v)| format!("{k}={v}")).collect();
            let case_label =
                if suffix.is_empty() { label.clone() } else { format!("{label} [{}]", suffix.join(",")) };
            w.check(&virtperf_workload::Params(&params)).map_err(|ParamError { key: k, message: m }| {
                let o =
                    item_params.iter().find(|p| p.0 == k).map(|p| p.2.clone()).unwrap_or(item.origin.clone());
                err(&o, Some(&k), m)
            })?;
            cases.push(Case {
                workload: label.clone(),
                kind: item.kind.clone(),
                label: case_label,
                params,
                load,
                network: w.needs_peer(),
                matrix,
            });
        }
        workloads.push(WorkloadDef {
            name: label,
            kind: item.kind.clone(),
            raw: item.params.iter().map(|(k, v, _)| (k.clone(), v.clone())).collect(),
        });
    }
    Ok((workloads, cases))
}

/// A workload's parameters as written, with the kind's aliases renamed, set-valued keys joined
/// into one value (`tests = [throughput, latency]` is one set, not a sweep) and default sweeps
/// added: (key, values, where given).
fn given_params(
    w: &dyn virtperf_workload::Workload,
    item: &RawItem,
) -> Result<Vec<(String, Vec<Raw>, Origin)>, InputError> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<(String, Vec<Raw>, Origin)> = Vec::new();
    for (k, vals, o) in &item.params {
        let k = w.aliases().iter().find(|a| a.0 == k).map(|a| a.1).unwrap_or(k);
        if !seen.insert(k.to_string()) {
            return Err(err(o, Some(k), "given twice"));
        }
        let vals = if w.set_params().contains(&k) && vals.len() > 1 {
            vec![Raw::Str(vals.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","))]
        } else {
            vals.clone()
        };
        out.push((k.to_string(), vals, o.clone()));
    }
    for (k, vals) in w.default_sweep() {
        if !seen.contains(*k) {
            let raw =
                vals.iter().map(|v| v.parse().map(Raw::Int).unwrap_or_else(|_| Raw::Str(v.to_string())));
            out.push((k.to_string(), raw.collect(), item.origin.clone()));
        }
    }
    Ok(out)
}

/// The Cartesian product of the swept values, first key varying slowest; refused past
/// [`MAX_CASES`] before any is made.
fn sweep_points(
    params: &[(String, Vec<Raw>, Origin)],
    origin: &Origin,
) -> Result<Vec<Vec<(String, Raw)>>, InputError> {
    let combos = params.iter().try_fold(1usize, |n, (_, vals, _)| n.checked_mul(vals.len()));
    if !matches!(combos, Some(n) if n <= MAX_CASES) {
        return Err(err(
            origin,
            None,
            format!(
                "the sweeps of this workload make {} combinations, more than {MAX_CASES}: sweep fewer values",
                combos.map_or("too many".to_string(), |n| n.to_string())
            ),
        ));
    }
    let mut points: Vec<Vec<(String, Raw)>> = vec![Vec::new()];
    for (k, vals, _) in params {
        points = points
            .into_iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((k.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    Ok(points)
}

/// `pairs`, taken out of a sweep point: "tester" (each environment with the tester) or "all"
/// (every ordered pair of environments: network workloads, no direction, no tester to load).
fn pairs(
    given: &mut BTreeMap<String, Raw>,
    load: Option<LoadSpec>,
    w: &dyn virtperf_workload::Workload,
    origin: &Origin,
) -> Result<bool, InputError> {
    let matrix = match given.remove("pairs") {
        None => false,
        Some(Raw::Str(s)) if s == "tester" => false,
        Some(Raw::Str(s)) if s == "all" => true,
        Some(v) => {
            return Err(err(
                origin,
                Some("pairs"),
                format!("got `{v}`, expected \"tester\" (each environment with the tester) or \"all\" (every environment to every other)"),
            ))
        }
    };
    if matrix && !w.needs_peer() {
        return Err(err(origin, Some("pairs"), "pairs = \"all\" is for network workloads"));
    }
    if matrix && given.contains_key("direction") {
        return Err(err(
            origin,
            Some("direction"),
            "with pairs = \"all\" every ordered pair is measured (both directions): leave direction out",
        ));
    }
    if matrix && load.is_some_and(|l| l.on == LoadOn::Tester) {
        return Err(err(origin, Some("load_on"), "with pairs = \"all\" there is no tester to load"));
    }
    Ok(matrix)
}

/// The lab can carry every case: frames fit its MTU, every environment can join it, and each
/// instance gets an address.
pub(crate) fn check_lab(
    raw: &RawExperiment,
    whole: &Origin,
    envs: &[EnvDef],
    cases: &[Case],
    lab: &LabSpec,
) -> Result<(), InputError> {
    for c in cases.iter().filter(|c| c.network) {
        let largest = virtperf_workload::find(&c.kind)
            .and_then(|w| w.largest_frame(&virtperf_workload::Params(&c.params)));
        if let Some(fs) = largest {
            // An Ethernet frame carries MTU + 18 bytes (header 14, FCS 4).
            if fs > lab.mtu as u64 + 18 {
                let wd = raw.workloads.iter().find(|i| i.name.as_deref().unwrap_or(&i.written) == c.workload);
                return Err(err(
                    wd.map(|i| &i.origin).unwrap_or(whole),
                    Some("frame_size"),
                    format!(
                        "a {fs}-byte frame does not fit the lab's MTU of {} (frame − 18 ≤ MTU): lower frame_size or raise --lab mtu=",
                        lab.mtu
                    ),
                ));
            }
        }
    }
    if cases.iter().any(|c| c.matrix) && envs.len() < 2 {
        return Err(err(whole, Some("pairs"), "pairs = \"all\" needs at least two environments"));
    }
    if cases.iter().any(|c| c.network) {
        for e in envs {
            if !crate::env::find(&e.kind).is_some_and(|k| k.joins_lab()) {
                let can: Vec<&str> =
                    crate::env::REGISTRY.iter().filter(|k| k.joins_lab()).map(|k| k.kind()).collect();
                return Err(err(
                    whole,
                    Some("env"),
                    format!(
                        "environment kind `{}` cannot join the lab yet; network workloads run on: {}",
                        e.kind,
                        can.join(", ")
                    ),
                ));
            }
        }
        if envs.iter().map(|e| e.instances as usize).sum::<usize>() > crate::lab::MAX_ENDPOINTS {
            return Err(err(
                whole,
                Some("env"),
                format!(
                    "at most {} environment instances per run with network workloads (each has a lab address)",
                    crate::lab::MAX_ENDPOINTS
                ),
            ));
        }
    }
    Ok(())
}

/// Precision mode compares each environment with its machine's baseline, and needs enough
/// repetitions before its rule may stop a cell: 4 launches (or 4 repetitions of one launch), the
/// minimum its simulated coverage holds for (virtperf_stats::sequential::MIN_UNITS).
fn check_precision(
    raw: &RawExperiment,
    whole: &Origin,
    envs: &[EnvDef],
    reps: u32,
    launches: u32,
    precision: Option<&Precision>,
) -> Result<(), InputError> {
    let Some(_) = precision else {
        return Ok(());
    };
    let at = |k: &str| raw.settings.get(k).map(|s| s.origin.clone()).unwrap_or(whole.clone());
    let base = |e: &EnvDef| env::find(&e.kind).is_some_and(|k| k.is_baseline());
    if let Some(e) = envs.iter().find(|e| !envs.iter().any(|b| b.host == e.host && base(b))) {
        return Err(err(
            &at("precision"),
            Some("precision"),
            format!(
                "precision mode narrows each environment's ratio to its baseline, and environment `{}` has none on its machine: add [[env]] kind = \"native\"{}",
                e.name,
                e.host.as_ref().map(|h| format!(" with host = \"{h}\"")).unwrap_or_default()
            ),
        ));
    }
    let min = virtperf_stats::sequential::MIN_UNITS;
    if launches > 1 && launches < min {
        return Err(err(
            &at("launches"),
            Some("launches"),
            format!("precision mode needs at least {min} launches ({launches} leave too few degrees of freedom between launches for its stopping rule to keep its intervals' coverage): launches = {min}, or launches = 1 for repetitions of one launch"),
        ));
    }
    if launches == 1 && reps < min {
        return Err(err(
            &at("reps"),
            Some("reps"),
            format!("precision mode needs at least {min} repetitions before its stopping rule may judge a cell: reps = {min} or more"),
        ));
    }
    Ok(())
}

/// Several instances of an environment: what each would need to be compared against.
pub(crate) fn check_instances(whole: &Origin, envs: &[EnvDef], cases: &[Case]) -> Result<(), InputError> {
    // Several instances of an environment: what each would need to be compared against.
    if let Some(e) = envs.iter().find(|e| e.instances > 1) {
        if let Some(c) = cases.iter().find(|c| c.matrix) {
            return Err(err(
                whole,
                Some("instances"),
                format!(
                    "environment `{}` runs {} instances, and `{}` has pairs = \"all\": a pair of environments is two agents, not two groups; use instances with the lab's tester (pairs = \"tester\")",
                    e.name, e.instances, c.label
                ),
            ));
        }
        if let Some(c) =
            cases.iter().find(|c| virtperf_workload::find(&c.kind).is_some_and(|w| w.procedure()))
        {
            return Err(err(
                whole,
                Some("instances"),
                format!("`{}` is an RFC 2544 procedure, which measures one device under test: give environment `{}` instances = 1", c.label, e.name),
            ));
        }
    }
    // A file system across the instances: servers where they can run, a volume their number
    // can make.
    for c in cases.iter().filter(|c| virtperf_workload::find(&c.kind).is_some_and(|w| w.cluster())) {
        for e in envs {
            let Some(k) = env::find(&e.kind) else { continue };
            if let Err(why) = k.serves_files(&e.params) {
                return Err(err(
                    whole,
                    Some("kind"),
                    format!("workload `{}` runs its servers in environment `{}`: {why}", c.label, e.name),
                ));
            }
            let volume = c.params.get("volume").and_then(Value::as_str).unwrap_or("distribute");
            if let Err(virtperf_workload::ParamError { message: why, .. }) =
                virtperf_workload::pfs::shape(volume, e.instances as usize)
            {
                return Err(err(
                    whole,
                    Some("volume"),
                    format!(
                        "workload `{}` in environment `{}` ({} instances): {why}",
                        c.label, e.name, e.instances
                    ),
                ));
            }
        }
        if c.params.contains_key("bricks") {
            return Err(err(
                whole,
                Some("bricks"),
                format!("workload `{}`: bricks is set by virtperf (each instance's address and scratch disk); leave it out", c.label),
            ));
        }
    }
    // A service: one server per environment, its phases the orchestrator's.
    for c in cases.iter().filter(|c| virtperf_workload::find(&c.kind).is_some_and(|w| w.service())) {
        if let Some(k) = virtperf_workload::apps::SET_BY_VIRTPERF.iter().find(|k| c.params.contains_key(**k))
        {
            return Err(err(
                whole,
                Some(k),
                format!(
                    "workload `{}`: {k} is set by virtperf for each phase of the trial; leave it out",
                    c.label
                ),
            ));
        }
        if let Some(e) = envs.iter().find(|e| e.instances > 1) {
            return Err(err(
                whole,
                Some("instances"),
                format!(
                    "workload `{}` is a service: one server in each environment, and `{}` has {} instances; give instances = 1 (or leave it out)",
                    c.label, e.name, e.instances
                ),
            ));
        }
    }
    Ok(())
}

/// Share of an environment's memory a workload may allocate (the rest: the guest's kernel, its
/// init, the agent).
const WORKLOAD_MEMORY_SHARE: (u64, u64) = (3, 4);

/// Step 4b: sizes derived from the host (STREAM's arrays from its last-level cache), for the
/// parameters the user left out, clamped to what every environment of the experiment can hold
/// (3/4 of a guest's memory, 3/4 of the host's for those that run on it). Each is recorded, with
/// the clamp and its reason, in the run's manifest and report.
pub(crate) fn size_from_host(
    envs: &[EnvDef],
    cases: &mut [Case],
    facts: &crate::host::HostFacts,
) -> Vec<Sizing> {
    use crate::host::facts::mib;
    let (num, den) = WORKLOAD_MEMORY_SHARE;
    // The tightest place a workload must fit: (its budget, what it is, in words).
    let mut places: Vec<(u64, String)> = envs
        .iter()
        .filter_map(|e| {
            let (key, has) = env::find(&e.kind)?.memory_bytes(&e.params)?;
            Some((has / den * num, format!("environment `{}` has {key} = {}", e.name, mib(has))))
        })
        .collect();
    if let Some(m) = facts.memory_bytes {
        places.push((m / den * num, format!("this host has {}", mib(m))));
    }
    let tightest = places.into_iter().min_by_key(|p| p.0);
    let mut out = Vec::new();
    for c in cases.iter_mut() {
        let Some(w) = virtperf_workload::find(&c.kind) else { continue };
        let Some(llc) = facts.llc_bytes else { continue };
        for (k, derived) in w.sized_by_cache(llc) {
            if c.params.contains_key(k) {
                continue;
            }
            let mut p = c.params.clone();
            p.insert(k.to_string(), derived.clone());
            let need =
                |p: &BTreeMap<String, Value>| w.memory_needed(&virtperf_workload::Params(p)).unwrap_or(0);
            let derived_bytes = need(&p);
            let mut limit = None;
            if let Some((budget, what)) = &tightest {
                if derived_bytes > *budget {
                    if let Some(v) = w.fit_memory(k, *budget) {
                        p.insert(k.to_string(), v);
                        limit = Some(format!(
                            "{what}, and a workload may take {num}/{den} of it (below the rule's size a cache may serve part of the work)"
                        ));
                    }
                }
            }
            let used = p.get(k).cloned().unwrap_or(Value::Null);
            out.push(Sizing {
                case: c.label.clone(),
                key: k.to_string(),
                rule: w.sizing_rule().replace("{llc}", &mib(llc)),
                derived,
                used,
                bytes_derived: derived_bytes,
                bytes_used: need(&p),
                limit,
            });
            c.params = p;
        }
    }
    out
}

/// Memory: every instance together fits the host, and each workload fits every guest that runs it.
pub(crate) fn check_memory(
    whole: &Origin,
    envs: &[EnvDef],
    cases: &[Case],
    facts: &crate::host::HostFacts,
) -> Result<(), InputError> {
    // Every instance of every environment stays up for the whole run: their memory together must
    // fit the host's.
    if let Some(host) = facts.memory_bytes {
        let mut total = 0u64;
        for e in envs {
            if let Some((_, m)) = env::find(&e.kind).and_then(|k| k.memory_bytes(&e.params)) {
                total = total.saturating_add(u64::from(e.instances).saturating_mul(m));
            }
        }
        if total > host / 10 * 8 {
            let e = envs.iter().max_by_key(|e| e.instances).map(|e| e.name.clone()).unwrap_or_default();
            return Err(err(
                whole,
                Some("instances"),
                format!(
                    "the guests of this run would hold {} MiB together (every instance stays up for the whole run), more than 80 % of this host's {} MiB: fewer instances (e.g. of `{e}`) or less memory each",
                    total >> 20,
                    host >> 20
                ),
            ));
        }
    }
    // A workload's memory must fit every guest that runs it (with room for the guest's own).
    for c in cases {
        let Some(w) = virtperf_workload::find(&c.kind) else { continue };
        let Some(need) = w.memory_needed(&virtperf_workload::Params(&c.params)) else { continue };
        for e in envs {
            let Some((key, has)) = env::find(&e.kind).and_then(|k| k.memory_bytes(&e.params)) else {
                continue;
            };
            if need.saturating_mul(WORKLOAD_MEMORY_SHARE.1) > has.saturating_mul(WORKLOAD_MEMORY_SHARE.0) {
                return Err(err(
                    whole,
                    Some(key),
                    format!(
                        "workload `{}` allocates {} MiB, more than 3/4 of environment `{}`'s {key} = {} MiB: raise that environment's {key}, or make the workload smaller",
                        c.label,
                        need >> 20,
                        e.name,
                        has >> 20
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Disks: a scratch disk, large enough, wherever a workload writes files; the guests' images fit
/// the host's scratch disk.
pub(crate) fn check_disks(whole: &Origin, envs: &[EnvDef], cases: &[Case]) -> Result<(), InputError> {
    // Workloads that write files need a scratch disk in every environment that runs them, large
    // enough for their file; `dir` names a host directory, so it is for native only.
    for c in cases {
        if !virtperf_workload::find(&c.kind).is_some_and(|w| w.needs_scratch()) {
            continue;
        }
        let file = c.params.get("file_size").and_then(Value::as_u64).unwrap_or(0);
        for e in envs {
            let Some(k) = env::find(&e.kind) else { continue };
            if c.params.contains_key("dir") {
                if !k.on_host_fs() {
                    return Err(err(
                        whole,
                        Some("dir"),
                        format!(
                            "workload `{}` gives dir, a directory of the host, but environment `{}` ({}) writes on its own scratch disk: leave dir out (the environment's disk parameter chooses where its bytes land), or run that case natively only",
                            c.label, e.name, e.kind
                        ),
                    ));
                }
                continue;
            }
            if let Err(ParamError { key, message: why }) = k.scratch(&e.params) {
                return Err(err(
                    whole,
                    Some(&key),
                    format!("workload `{}` writes files, and environment `{}`: {why}", c.label, e.name),
                ));
            }
            if let Some((key, size)) = k.disk_bytes(&e.params) {
                // ext4's journal and inode tables take about 5 % and at most a few tens of MiB.
                let need = file + file / 20 + (32 << 20);
                if need > size {
                    return Err(err(
                        whole,
                        Some(key),
                        format!(
                            "workload `{}` writes a {} MiB file, and environment `{}`'s scratch disk of {key} = {} MiB holds about {} MiB once formatted: raise {key} (to {} MiB or more) or lower file_size",
                            c.label,
                            file >> 20,
                            e.name,
                            size >> 20,
                            size.saturating_sub(size / 20 + (32 << 20)) >> 20,
                            need.div_ceil(1 << 20)
                        ),
                    ));
                }
            }
        }
    }
    // Every guest's disk image lives on the host's scratch disk for the whole run (this machine's
    // guests here; another host's are made there, and a full disk fails that launch with the reason).
    let images: u64 = envs
        .iter()
        .filter(|e| e.host.is_none())
        .filter_map(|e| {
            env::find(&e.kind)?.disk_bytes(&e.params).map(|(_, b)| b.saturating_mul(u64::from(e.instances)))
        })
        .sum();
    if images > 0 {
        let root = crate::host::scratch_root();
        if let Some(free) = crate::host::free_bytes(&root) {
            if images > free {
                return Err(err(
                    whole,
                    Some("disk_size"),
                    format!(
                        "the guests' disk images would take {} MiB on the host's scratch disk ({}), which has {} MiB free: a smaller disk_size, fewer instances, or VIRTPERF_SCRATCH on a larger file system",
                        images >> 20,
                        root.display(),
                        free >> 20
                    ),
                ));
            }
        }
    }
    Ok(())
}
