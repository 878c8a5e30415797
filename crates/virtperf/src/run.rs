//! `virtperf run`: preflight → plan → launch → trials → report.
//!
//! Order of events, chosen so that a failure at any point loses at most the trial in flight:
//! the experiment is validated and every environment's availability checked before anything is
//! created; leftovers of killed runs are swept; the run, its environments, cases and the whole
//! plan are stored in one transaction; each trial is committed as it ends; Ctrl-C/SIGTERM leave
//! the trial in flight pending, tear everything down and mark the run interrupted, and
//! `--resume RUN` runs exactly the pending trials.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use virtperf_proto::WorkloadSpec;

use crate::env::{self, Instance, LaunchCtx};
use crate::exit::ExitStatus;
use crate::experiment::Experiment;
use crate::lab::Lab;
use crate::ledger::Ledger;
use crate::store::{InstanceRecord, LaunchStatus, PlannedTrial, RunStatus, Store, TrialOutcome, TrialStatus};
use crate::trial::{self, Dut, Fail, Tester};
use crate::{plan, report};

/// Set by SIGINT/SIGTERM; every wait checks it.
pub static CANCEL: AtomicBool = AtomicBool::new(false);

pub use crate::store::SWITCH_CPU;

/// Whether process `pid` runs (not gone, not a zombie waiting for its parent).
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// After this many launches of one environment fail in a row, its remaining trials are skipped.
const MAX_LAUNCH_FAILURES: u32 = 3;

pub struct RunOpts {
    pub db: PathBuf,
    /// A progress bar on stderr (not when stdout carries JSON for a program).
    pub progress: bool,
    /// What the run writes when it ends (checked before it starts; see crate::export::choose).
    pub outputs: Vec<crate::export::Target>,
    pub boot_timeout: Duration,
    pub command_line: String,
}

pub fn install_signal_handler() {
    // Installing twice is an error we can ignore (tests call run more than once per process).
    let _ = ctrlc::set_handler(|| {
        if CANCEL.swap(true, Ordering::SeqCst) {
            eprintln!("\nvirtperf: second interrupt; still cleaning up, please wait");
        } else {
            eprintln!("\nvirtperf: interrupted; finishing cleanup (completed trials are saved)");
        }
    });
}

/// Everything about the host a reader of the results needs to trust or reproduce them.
pub fn manifest(exp: &Experiment, command_line: &str) -> serde_json::Value {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let facts = crate::host::facts();
    let runtimes: BTreeMap<String, Option<String>> = exp
        .envs
        .iter()
        .map(|e| {
            let rt = match &e.host {
                Some(h) => crate::remote::runtime_of(h, &e.name),
                None => env::find(&e.kind).and_then(|k| k.runtime_version(&e.params)),
            };
            (e.name.clone(), rt)
        })
        .collect();
    // Each remote host's facts, as its preflight found them.
    let hosts: BTreeMap<String, serde_json::Value> = exp
        .hosts
        .iter()
        .map(|h| {
            let info = crate::remote::info(&h.name);
            let facts = info.as_ref().map(|i| serde_json::to_value(&i.facts).unwrap_or_default());
            let clock = info.and_then(|i| i.clock);
            (h.name.clone(), serde_json::json!({"ssh": h.ssh, "facts": facts, "clock": clock}))
        })
        .collect();
    let lab = exp.has_network().then(|| {
        serde_json::json!({
            "mtu": exp.lab.mtu,
            "rate_bps": exp.lab.rate_bps,
            "delay_us": exp.lab.delay_us,
            "loss_pct": exp.lab.loss_pct,
            "tester_cpuset": exp.lab.tester_cpuset,
            "tester_host": exp.lab.tester_host,
            "addresses": "198.18.0.0/24: tester .1, environment i at .(10+i)",
            "switch": exp.lab.switch.as_str(),
            "switch_is": exp.lab.switch.describe(),
            "switch_cpus": exp.lab.switch_limits.cpus,
            "switch_cap": exp.lab.switch_limits.cap,
            "switch_vcpus": (exp.lab.switch == crate::lab::Switch::DriverDomain).then_some(exp.lab.switch_limits.vcpus),
        })
    });
    serde_json::json!({
        "lab": lab,
        "virtperf_version": env!("CARGO_PKG_VERSION"),
        "git_revision": option_env!("VIRTPERF_GIT_REV").unwrap_or("unknown"),
        "host_kernel": facts.kernel,
        "host_name": read("/proc/sys/kernel/hostname"),
        "host_cpu_model": facts.cpu_model,
        "host_cpus": facts.cpus,
        // Working sets are sized against it (STREAM: 4 × per array); microvm guests get the TSC's.
        "host_llc_bytes": facts.llc_bytes,
        "host_tsc_khz": crate::host::tsc_khz(),
        "host_memory_kib": facts.memory_bytes.map(|b| format!("{} kB", b >> 10)),
        "kvm": facts.kvm.dev.is_ok(),
        "kvm_pvm": facts.kvm.pvm,
        // Everything sizes and availability were decided from, and what was sized from it.
        "host_facts": facts,
        "sizing": exp.sizings,
        "launches": exp.launches,
        "precision": exp.precision,
        "runtimes": runtimes,
        "hosts": hosts,
        "command_line": command_line,
        "date": crate::store::now_rfc3339(),
    })
}

/// Refuses to start when an environment cannot run here; returns what to do. With `prepare`,
/// also does each environment's one-time work (guest images), which a dry run skips.
pub fn preflight(exp: &Experiment, prepare: bool) -> Result<(), String> {
    let mut problems = Vec::new();
    // Environments on other hosts are checked there (a dry run does not connect).
    if prepare {
        for h in &exp.hosts {
            let mut envs: Vec<_> = exp
                .envs
                .iter()
                .filter(|e| e.host.as_deref() == Some(h.name.as_str()))
                .map(|e| (e.name.clone(), e.kind.clone(), e.params.clone()))
                .collect();
            // The tester, a native agent there.
            if exp.lab.tester_host.as_deref() == Some(h.name.as_str()) && exp.has_network() {
                envs.push(("tester".into(), "native".into(), BTreeMap::new()));
            }
            if !envs.is_empty() {
                problems.extend(crate::remote::preflight(h, &envs));
            }
        }
    }
    for e in &exp.envs {
        let Some(kind) = env::find(&e.kind) else { continue };
        if e.host.is_some() {
            continue;
        }
        let a = kind.availability(&e.params);
        if !a.usable {
            problems.push(format!(
                "environment `{}` ({}): {}; fix: {}",
                e.name,
                e.kind,
                a.detail,
                a.fix.unwrap_or_default()
            ));
        } else if let Err(why) = if prepare { kind.prepare(&e.params) } else { Ok(()) } {
            problems.push(format!("environment `{}` ({}): {why}", e.name, e.kind));
        }
    }
    if exp.has_network() && exp.lab.tester_host.is_none() {
        if let Err(why) = crate::lab::availability(&exp.lab) {
            problems.push(format!("network workloads: {why}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}\n(`virtperf doctor` lists every environment kind and how to enable it)",
            problems.join("\n")
        ))
    }
}

/// The environments of this machine that cannot run here (or whose one-time preparation failed,
/// with `prepare`), with doctor's reason and fix.
pub fn unavailable(exp: &Experiment, prepare: bool) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, e) in exp.envs.iter().enumerate().filter(|(_, e)| e.host.is_none()) {
        let Some(kind) = env::find(&e.kind) else { continue };
        let a = kind.availability(&e.params);
        if !a.usable {
            out.push((i, format!("{}; fix: {}", a.detail, a.fix.unwrap_or_default())));
        } else if let Err(why) = if prepare { kind.prepare(&e.params) } else { Ok(()) } {
            out.push((i, why));
        }
    }
    out
}

/// `skip_unavailable = true`: leaves out the environments this host cannot run, saying why, so
/// that the rest of the experiment runs (the default experiment runs what the host can). The
/// baseline is never left out silently: without it there is no ratio, so that is an error.
pub fn drop_unavailable(exp: &mut Experiment, prepare: bool) -> Result<Vec<(String, String)>, String> {
    let gone = unavailable(exp, prepare);
    let mut skipped = Vec::new();
    for (i, why) in gone.iter().rev() {
        let e = exp.envs.remove(*i);
        if env::find(&e.kind).is_some_and(|k| k.is_baseline()) {
            return Err(format!(
                "environment `{}` ({}), the baseline, cannot run here: {why}",
                e.name, e.kind
            ));
        }
        skipped.push((e.name, why.clone()));
    }
    skipped.reverse();
    if exp.envs.is_empty() {
        return Err("no environment of the experiment can run here".into());
    }
    Ok(skipped)
}

pub fn run_new(mut exp: Experiment, opts: &RunOpts) -> Result<ExitStatus> {
    let mut skipped = Vec::new();
    if exp.skip_unavailable {
        match drop_unavailable(&mut exp, true) {
            Ok(s) => skipped = s,
            Err(why) => {
                eprintln!("error: cannot run here: {why}\n(`virtperf doctor` lists every environment kind and how to enable it)");
                return Ok(ExitStatus::Unavailable);
            }
        }
        for (name, why) in &skipped {
            eprintln!("virtperf: skipped environment `{name}`: this host cannot run it ({why})");
        }
    }
    if let Err(why) = preflight(&exp, true) {
        eprintln!("error: cannot run here:\n{why}");
        return Ok(ExitStatus::Unavailable);
    }
    let plan = plan::make(&exp);
    let mut store = Store::open(&opts.db)?;
    let envs: Vec<_> = exp
        .envs
        .iter()
        .map(|e| crate::store::NewEnv {
            name: e.name.clone(),
            kind: e.kind.clone(),
            params: serde_json::to_value(&e.params).unwrap_or_default(),
            runtime: match &e.host {
                Some(h) => crate::remote::runtime_of(h, &e.name),
                None => env::find(&e.kind).and_then(|k| k.runtime_version(&e.params)),
            },
            instances: e.instances,
            group: e.group.clone(),
            host: e.host.clone(),
        })
        .collect();
    let cases: Vec<_> = exp
        .cases
        .iter()
        .map(|c| {
            (
                c.workload.clone(),
                c.kind.clone(),
                c.label.clone(),
                serde_json::to_value(&c.params).unwrap_or_default(),
            )
        })
        .collect();
    let mut manifest = manifest(&exp, &opts.command_line);
    manifest["skipped_environments"] = serde_json::json!(skipped
        .iter()
        .map(|(n, why)| serde_json::json!({"environment": n, "why": why}))
        .collect::<Vec<_>>());
    let run_id = store.create_run(&exp.name, &exp.to_toml(), &manifest, &envs, &cases, &plan)?;
    eprintln!("virtperf: run {run_id} → {} ({} trials)", opts.db.display(), plan.len());
    execute(&store, run_id, &exp, opts)
}

pub fn resume(run_id: i64, opts: &RunOpts) -> Result<ExitStatus> {
    let store = Store::open_existing(&opts.db)?;
    let info = store.run(run_id)?;
    let raw = crate::experiment::read_toml(&format!("run {run_id}"), &info.experiment)
        .map_err(crate::exit::bad_input)?;
    let exp = crate::experiment::validate(&raw, &crate::experiment::Origin::Default)
        .map_err(crate::exit::bad_input)?;
    if info.status == RunStatus::Completed {
        // A precision run whose budget ended with cells short of their target goes on, with a
        // budget of its own.
        let envs: Vec<usize> = (0..exp.envs.len()).collect();
        let short: Vec<String> = crate::precision::cells(&exp, &store, run_id, &envs, &Default::default())?
            .iter()
            .filter(|c| !c.standing.met())
            .map(|c| format!("{} / {} {}", exp.envs[c.env].name, exp.cases[c.case].label, c.metric))
            .collect();
        if short.is_empty() {
            eprintln!("run {run_id} is already complete; nothing to resume");
            return Ok(ExitStatus::BadInput);
        }
        eprintln!(
            "virtperf: run {run_id}: {} ratio(s) short of their precision target ({}); measuring on",
            short.len(),
            short.join(", ")
        );
    }
    if let Err(why) = preflight(&exp, true) {
        eprintln!("error: cannot run here:\n{why}");
        return Ok(ExitStatus::Unavailable);
    }
    store.set_run_status(run_id, RunStatus::Running)?;
    eprintln!("virtperf: resuming run {run_id} ({} trials left)", store.pending_trials(run_id)?.len());
    execute(&store, run_id, &exp, opts)
}

struct Slot {
    /// One per instance of the environment (the tester: one).
    instances: Vec<Option<Instance>>,
    launches: u32,
    failures_in_a_row: u32,
    gave_up: Option<String>,
    /// Why the last launch failed (stored as the failed trial's reason).
    last_failure: Option<String>,
    /// The planned block the instances up now were launched for (`launches = L`).
    block: u32,
    /// The launch of instance 0 (`instances.id`), stored with each trial it runs.
    launch_id: Option<i64>,
}

impl Slot {
    fn new(n: u32) -> Slot {
        Slot {
            instances: (0..n).map(|_| None).collect(),
            launches: 0,
            failures_in_a_row: 0,
            gave_up: None,
            last_failure: None,
            block: 0,
            launch_id: None,
        }
    }
    /// Stops every instance that is up (a planned relaunch: `shutdown`, the polite way).
    fn shutdown(&mut self, ledger: &mut Ledger) {
        for inst in self.instances.iter_mut().filter_map(Option::take) {
            inst.shutdown(ledger);
        }
        self.launch_id = None;
    }
    /// Every instance is up.
    fn ready(&self) -> bool {
        self.instances.iter().all(Option::is_some)
    }
    fn kill(&mut self, k: usize, ledger: &mut Ledger) {
        if let Some(inst) = self.instances.get_mut(k).and_then(Option::take) {
            inst.kill(ledger);
        }
    }
    /// The first (the tester's only) instance.
    fn first(&mut self) -> Option<&mut Instance> {
        self.instances.first_mut().and_then(Option::as_mut)
    }
}

/// What every launch of a worker shares: the run's, and where its instances meet the lab.
struct Launcher<'a> {
    worker: &'a Worker<'a>,
    /// Lab endpoint of environment e's instance 0 (its instances follow).
    first_endpoint: &'a [usize],
    /// The tester's name in its instance ids (a campaign has one tester per host's worker).
    tester_id: String,
}

/// Which agent a slot holds: environment `e`, or the lab's tester.
#[derive(Clone, Copy)]
enum Role {
    Env(usize),
    Tester,
}

/// The `[[host]]` environment `e` runs on; None: this machine.
fn remote_host_of(exp: &Experiment, e: usize) -> Option<&crate::experiment::HostDef> {
    let name = exp.envs.get(e)?.host.as_ref()?;
    exp.hosts.iter().find(|h| &h.name == name)
}

/// The `[[host]]` the tester runs on (`[lab] tester_host`); None: this machine.
fn tester_host_of(exp: &Experiment) -> Option<&crate::experiment::HostDef> {
    let name = exp.lab.tester_host.as_ref()?;
    exp.hosts.iter().find(|h| &h.name == name)
}

/// Where a trial's tester listens and where environment `e` meets it, when they meet over the
/// hosts' own network (no lab): (the tester's address, the environment's).
fn path_addrs(exp: &Experiment, e: usize) -> (Option<String>, Option<String>) {
    let s = |a: Option<std::net::IpAddr>| a.map(|a| a.to_string());
    match (tester_host_of(exp), remote_host_of(exp, e)) {
        // The tester on a host: at its address; the environment at its host's, or (here) at this
        // machine's address on the path to the tester.
        (Some(t), Some(h)) => (s(t.addr), s(h.addr)),
        (Some(t), None) => (s(t.addr), s(t.local_addr)),
        // The tester here: at this machine's address on the path to the environment's host.
        (None, Some(h)) => (s(h.local_addr), s(h.addr)),
        (None, None) => (None, None),
    }
}

/// Two distinct slots at once (an all-pairs trial uses both environments).
fn pair_mut(slots: &mut [Slot], a: usize, b: usize) -> (&mut Slot, &mut Slot) {
    debug_assert_ne!(a, b);
    if a < b {
        let (x, y) = slots.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = slots.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

/// Launches every instance of the slot that is not up.
fn launch(l: &Launcher, role: Role, slot: &mut Slot, ledger: &mut Ledger) {
    for k in 0..slot.instances.len() {
        if slot.instances[k].is_none() && slot.gave_up.is_none() && !CANCEL.load(Ordering::SeqCst) {
            launch_one(l, role, k, slot, ledger);
        }
    }
}

fn launch_one(l: &Launcher, role: Role, k: usize, slot: &mut Slot, ledger: &mut Ledger) {
    let Worker { store, run_id, exp, run_dir, exe, opts, lab, scratch_dir, .. } = *l.worker;
    let first_endpoint = l.first_endpoint;
    let tester_params: BTreeMap<String, serde_json::Value> = exp
        .lab
        .tester_cpuset
        .iter()
        .map(|c| ("cpuset".to_string(), serde_json::Value::from(c.clone())))
        .collect();
    let (kind, params, name, netns, id, e) = match role {
        Role::Env(e) => {
            let def = &exp.envs[e];
            let Some(kind) = env::find(&def.kind) else { return };
            let id = if def.instances > 1 {
                format!("vp{}-{}i{}-{}", std::process::id(), e, k, slot.launches)
            } else {
                format!("vp{}-{}-{}", std::process::id(), e, slot.launches)
            };
            (
                kind,
                &def.params,
                def.name.as_str(),
                lab.map(|l| l.endpoints[first_endpoint[e] + k].netns_path()),
                id,
                e as i64,
            )
        }
        Role::Tester => (
            &env::native::Native as &dyn env::Environment,
            &tester_params,
            "tester",
            lab.map(|l| l.tester.netns_path()),
            format!("vp{}-{}-{}", std::process::id(), l.tester_id, slot.launches),
            -1,
        ),
    };
    let guest_net = match (role, lab) {
        (Role::Env(e), Some(l)) => {
            let ep = &l.endpoints[first_endpoint[e] + k];
            ep.tap.as_ref().map(|tap| env::GuestNet { tap: tap.clone(), addr: ep.addr, mtu: l.spec.mtu })
        }
        _ => None,
    };
    let remote_host = match role {
        Role::Env(e) => remote_host_of(exp, e),
        Role::Tester => tester_host_of(exp),
    };
    // The instance's scratch directory (environments only: the tester writes no files; one on
    // another host gets its directory there, from `remote-launch`).
    let sdir = match (role, scratch_dir) {
        (Role::Env(_), Some(d)) if remote_host.is_none() => {
            let sd = d.join(&id);
            match ledger.create_scratch_dir(&sd) {
                Ok(()) => Some(sd),
                Err(err) => {
                    eprintln!("virtperf: cannot create the scratch directory {}: {err}", sd.display());
                    ledger.remove_scratch_dir(&sd);
                    None
                }
            }
        }
        _ => None,
    };
    let mut ctx = LaunchCtx {
        exe,
        run_dir,
        instance_id: id,
        ledger,
        boot_timeout: opts.boot_timeout,
        cancel: &CANCEL,
        netns,
        guest_net,
        scratch_dir: sdir.clone(),
        bridge: None,
    };
    slot.launches += 1;
    let def_name = name;
    // An environment here with the tester on a host meets it over this machine's own network
    // (no lab): it joins this process's namespace, a container too.
    if remote_host.is_none() && lab.is_none() && tester_host_of(exp).is_some() && exp.has_network() {
        ctx.netns = Some(PathBuf::from(format!("/proc/{}/ns/net", std::process::id())));
    }
    // A later launch into the same lab endpoint finds it as the first did.
    if let (Role::Env(e), Some(l), true) = (role, lab, slot.launches > 1) {
        if let Err(why) = l.restore_endpoint(first_endpoint[e] + k) {
            eprintln!("virtperf: cannot restore the lab address of `{def_name}`: {why}");
        }
    }
    let launched = match remote_host {
        Some(h) => {
            let scratch = matches!(role, Role::Env(_)) && scratch_dir.is_some();
            crate::remote::launch(h, kind.kind(), params, exp.has_network(), scratch, &mut ctx)
        }
        None => kind.launch(&mut ctx, params),
    };
    if let (Err(_), Some(sd)) = (&launched, &sdir) {
        ledger.remove_scratch_dir(sd);
    }
    match launched {
        Ok(mut inst) => {
            if let Some(sd) = sdir {
                inst.cleanup.push(crate::ledger::Entry::ScratchDir { path: sd });
            }
            // Native agents write into directories the user named (`dir=`): what a killed agent
            // leaves there goes with the instance (and with a sweep after a crash).
            if kind.on_host_fs() && inst.agent_pid != 0 && remote_host.is_none() {
                for dir in user_disk_dirs(exp) {
                    let prefix = format!("{}{}-", crate::ledger::DISK_FILE_PREFIX, inst.agent_pid);
                    let e = crate::ledger::Entry::ScratchFiles { dir, prefix };
                    ledger.record(e.clone());
                    inst.cleanup.push(e);
                }
            }
            inst.calibrate_rtt(&CANCEL);
            inst.own_clock = kind.own_clock();
            let id = store.record_instance(
                run_id,
                &InstanceRecord {
                    env_idx: e,
                    block: Some(slot.block),
                    start_ms: Some(inst.start_time.as_secs_f64() * 1e3),
                    rtt_us: Some(inst.rtt.as_secs_f64() * 1e6),
                    rtt_jitter_us: Some(inst.rtt_jitter.as_secs_f64() * 1e6),
                    status: LaunchStatus::Ready,
                    ..Default::default()
                },
            );
            if k == 0 {
                slot.launch_id = id.ok();
            }
            slot.failures_in_a_row = 0;
            slot.instances[k] = Some(inst);
        }
        Err(err) => {
            let msg = err.to_string();
            let _ = store.record_instance(
                run_id,
                &InstanceRecord {
                    env_idx: e,
                    block: Some(slot.block),
                    status: LaunchStatus::Failed,
                    detail: Some(msg.clone()),
                    console: err.console(),
                    ..Default::default()
                },
            );
            slot.failures_in_a_row += 1;
            slot.last_failure = Some(msg.clone());
            if slot.failures_in_a_row >= MAX_LAUNCH_FAILURES {
                slot.gave_up = Some(format!(
                    "environment failed to start {MAX_LAUNCH_FAILURES} times in a row; last: {msg}"
                ));
            }
            if !CANCEL.load(Ordering::SeqCst) {
                eprintln!("virtperf: environment `{def_name}` failed to start: {msg}");
            }
        }
    }
}

/// Launches the lab's driver domain (`[lab] switch = "driver-domain"`): virtperf's QEMU guest in
/// the hub namespace, one virtio NIC per endpoint's tap bridged inside it, with the vCPUs, pinning
/// and cap of `[lab] switch_*`.
fn launch_driver_domain(
    lab: &Lab,
    ledger: &mut Ledger,
    exp: &Experiment,
    opts: &RunOpts,
    run_dir: &Path,
    exe: &Path,
) -> std::result::Result<Instance, String> {
    let kind = env::find("qemu").ok_or("no qemu environment in this build")?;
    let lim = &exp.lab.switch_limits;
    let mut raw: BTreeMap<String, virtperf_workload::Raw> = BTreeMap::new();
    raw.insert("vcpus".into(), virtperf_workload::Raw::Int(i64::from(lim.vcpus)));
    raw.insert("memory".into(), virtperf_workload::Raw::Str("256MiB".into()));
    raw.insert("nic".into(), virtperf_workload::Raw::Str("virtio".into()));
    if let Some(c) = &lim.cpus {
        raw.insert("pin".into(), virtperf_workload::Raw::Str(c.clone()));
    }
    let params = virtperf_workload::params::resolve(kind.params(), &raw).map_err(|e| e.to_string())?;
    let a = kind.availability(&params);
    if !a.usable {
        return Err(format!("{}; fix: {}", a.detail, a.fix.unwrap_or_default()));
    }
    kind.prepare(&params)?;
    let mut ctx = LaunchCtx {
        exe,
        run_dir,
        instance_id: format!("vp{}-switch", std::process::id()),
        ledger,
        boot_timeout: opts.boot_timeout,
        cancel: &CANCEL,
        netns: Some(lab.hub_netns_path()),
        guest_net: None,
        scratch_dir: None,
        bridge: Some(env::BridgeNet { taps: lab.domain_taps(), mtu: lab.spec.mtu, cpu_cap: lim.cap }),
    };
    let inst = kind.launch(&mut ctx, &params).map_err(|e| e.to_string())?;
    eprintln!(
        "virtperf: driver domain up ({} NICs bridged, {} vCPU{}{}{})",
        lab.domain_taps().len(),
        lim.vcpus,
        if lim.vcpus == 1 { "" } else { "s" },
        lim.cpus.as_ref().map(|c| format!(", pinned to CPU {c}")).unwrap_or_default(),
        lim.cap.map(|c| format!(", capped at {:.0} % of a CPU", c * 100.0)).unwrap_or_default()
    );
    Ok(inst)
}

/// The count parameter virtperf calibrates for this case (its workload counts operations and the
/// experiment left the count out), on one environment alone (not network, not all pairs).
fn calibrated_param(case: &crate::experiment::Case) -> Option<&'static str> {
    let param = virtperf_workload::find(&case.kind)?.calibrates()?;
    (!case.network && !case.matrix && !case.params.contains_key(param)).then_some(param)
}

/// The most a calibration may set `param` to in environment `e`, and why: the parameter's own
/// maximum, and what fits 3/4 of the environment's memory (of the host's, for those on it).
fn calibration_cap(exp: &Experiment, e: usize, case: &crate::experiment::Case, param: &str) -> (u64, String) {
    let Some(w) = virtperf_workload::find(&case.kind) else { return (u64::MAX, String::new()) };
    let mut cap = (u64::MAX, String::new());
    if let Some(spec) = w.params().iter().find(|p| p.name == param) {
        if let virtperf_workload::ParamKind::Int { max, .. } = spec.kind {
            cap = (max.max(1) as u64, "the parameter's maximum".into());
        }
    }
    let def = &exp.envs[e];
    let memory = env::find(&def.kind)
        .and_then(|k| k.memory_bytes(&def.params))
        .map(|(key, b)| (b, format!("3/4 of environment `{}`'s {key}", def.name)))
        .or_else(|| crate::host::facts().memory_bytes.map(|b| (b, "3/4 of the host's memory".to_string())));
    if let Some((bytes, why)) = memory {
        if let Some(n) = w.fit_memory(param, bytes / 4 * 3).and_then(|v| v.as_u64()) {
            if n < cap.0 {
                cap = (n, why);
            }
        }
    }
    cap
}

/// The directories disk workloads were told to write into (`dir=`, native only).
fn user_disk_dirs(exp: &Experiment) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = exp
        .cases
        .iter()
        .filter(|c| virtperf_workload::find(&c.kind).is_some_and(|w| w.needs_scratch()))
        .filter_map(|c| c.params.get("dir").and_then(serde_json::Value::as_str))
        .map(std::path::PathBuf::from)
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Whether the run needs a directory on the host's scratch disk: a workload writes files, or an
/// environment's guest has a disk image.
fn needs_scratch(exp: &Experiment) -> bool {
    exp.cases.iter().any(|c| virtperf_workload::find(&c.kind).is_some_and(|w| w.needs_scratch()))
        || exp.envs.iter().any(|e| env::find(&e.kind).is_some_and(|k| k.disk_bytes(&e.params).is_some()))
}

struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    done: u64,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    fn new(total: u64, show: bool) -> Progress {
        let bar = (std::io::stderr().is_terminal() && show).then(|| {
            let b = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} ETA {eta} {msg}",
            ) {
                b.set_style(style);
            }
            b
        });
        Progress { bar, total, done: 0, started: Instant::now(), last_line: Instant::now() }
    }
    fn tick(&mut self, msg: &str) {
        self.done += 1;
        match &self.bar {
            Some(b) => {
                b.set_position(self.done);
                b.set_message(msg.to_string());
            }
            None => {
                if self.last_line.elapsed() >= Duration::from_secs(5) || self.done == self.total {
                    self.last_line = Instant::now();
                    let el = self.started.elapsed().as_secs_f64();
                    let eta = el / self.done as f64 * (self.total - self.done) as f64;
                    eprintln!(
                        "virtperf: {}/{} trials, {:.0}s elapsed, ETA {:.0}s ({msg})",
                        self.done, self.total, el, eta
                    );
                }
            }
        }
    }
    /// Precision mode adds (or withdraws) trials as it goes.
    fn grow(&mut self, n: i64) {
        self.total = (self.total as i64 + n).max(self.done as i64) as u64;
        if let Some(b) = &self.bar {
            b.set_length(self.total);
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// This machine, in [`Machines`].
const LOCAL_MACHINE: &str = crate::experiment::LOCAL_HOST;

/// A worker's share of a run: the environments on one machine and their pending trials, in the
/// plan's order.
struct Share {
    /// None: this machine.
    host: Option<String>,
    envs: Vec<usize>,
    trials: Vec<PlannedTrial>,
}

impl Share {
    fn machine(&self) -> &str {
        self.host.as_deref().unwrap_or(LOCAL_MACHINE)
    }
}

/// The pending trials split by the machine their environment runs on (this machine first).
/// A trial between two environments runs where the first one does (pairs never cross machines:
/// validation keeps them here).
fn shares(exp: &Experiment, pending: &[PlannedTrial]) -> Vec<Share> {
    let mut out: Vec<Share> = Vec::new();
    let mut hosts: Vec<Option<String>> = exp.envs.iter().map(|e| e.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    for host in hosts {
        let envs: Vec<usize> = (0..exp.envs.len()).filter(|&e| exp.envs[e].host == host).collect();
        let trials: Vec<PlannedTrial> =
            pending.iter().filter(|t| envs.contains(&t.env_idx)).cloned().collect();
        // Precision mode may add trials to a share with none pending (a resumed run).
        if !trials.is_empty() || exp.precision.is_some() {
            out.push(Share { host, envs, trials });
        }
    }
    out
}

/// One lock per machine of a run. A trial holds every machine it uses (its environments' host
/// and, when it has a tester, the tester's machine: this one, or `[lab] tester_host`), so that a
/// campaign's workers measure at once only where they share nothing: two hosts' CPU trials
/// overlap, while two network trials whose testers would load the same machine take turns, and a
/// trial here never runs beside another host's tester. Locks are taken in name order (no deadlock).
struct Machines(BTreeMap<String, std::sync::Mutex<()>>);

impl Machines {
    fn of(shares: &[Share], tester: Option<&str>) -> Machines {
        let mut m: BTreeMap<String, std::sync::Mutex<()>> = BTreeMap::new();
        m.insert(LOCAL_MACHINE.to_string(), std::sync::Mutex::new(()));
        if let Some(t) = tester {
            m.entry(t.to_string()).or_default();
        }
        for s in shares {
            m.entry(s.machine().to_string()).or_default();
        }
        Machines(m)
    }
    fn hold<const N: usize>(&self, names: [&str; N]) -> Vec<std::sync::MutexGuard<'_, ()>> {
        // BTreeMap iteration is in name order: every worker locks in the same order.
        self.0
            .iter()
            .filter(|(k, _)| names.contains(&k.as_str()))
            // A worker that panicked while holding a lock leaves nothing half-done in `()`.
            .map(|(_, m)| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            .collect()
    }
}

/// What a worker shares with the run.
struct Worker<'a> {
    store: &'a Store,
    run_id: i64,
    exp: &'a Experiment,
    run_dir: &'a Path,
    exe: &'a Path,
    opts: &'a RunOpts,
    /// The lab (this machine's worker, when the run has network workloads here).
    lab: Option<&'a Lab>,
    /// The run's directory on this machine's scratch disk, when a workload writes files or a
    /// guest has a disk: each instance here gets a directory of its own below it.
    scratch_dir: Option<&'a Path>,
    progress: &'a std::sync::Mutex<Progress>,
    machines: &'a Machines,
    /// When this session of the run started (precision mode's budget counts from it).
    started: Instant,
    /// What the workers report beyond their trials.
    outcome: &'a std::sync::Mutex<Ended>,
    /// The lab's switch process, where it has one: its CPU probe and pid.
    switch_cpu: Option<&'a (env::CpuProbe, u32)>,
}

/// How a run's workers ended, beyond their trials.
#[derive(Debug, Default)]
struct Ended {
    /// Precision mode's budget ended the run.
    budget_spent: bool,
    /// Planned trials (the minimum) left pending when it did.
    minimum_left: usize,
}

/// Runs a share's trials on its machine's environments, then stops them; returns whether it was
/// interrupted.
fn work(w: &Worker, share: &Share, ledger: &mut Ledger) -> Result<bool> {
    let Worker { store, exp, lab, machines, .. } = *w;
    let pending = &share.trials;
    let timeout = Duration::from_millis(exp.timeout_ms);
    let specs: Vec<WorkloadSpec> = exp
        .cases
        .iter()
        .map(|c| WorkloadSpec { kind: c.kind.clone(), params: c.params.clone(), net: None, scratch: None })
        .collect();
    let mut slots: Vec<Slot> = exp.envs.iter().map(|e| Slot::new(e.instances)).collect();
    let mut tester_slot = Slot::new(1);
    // Lab endpoints: every instance of this share's environments has its own, in order.
    let mut first_endpoint = vec![0usize; exp.envs.len()];
    let mut next = 0usize;
    for &e in &share.envs {
        first_endpoint[e] = next;
        next += exp.envs[e].instances as usize;
    }
    let wants_tester = |c: &crate::experiment::Case| {
        !c.matrix && (c.network || c.load.is_some_and(|l| l.on == crate::experiment::LoadOn::Tester))
    };
    // Precision mode may add any case of the share's environments.
    let needs_tester = pending.iter().any(|t| t.peer_idx.is_none() && wants_tester(&exp.cases[t.case_idx]))
        || (exp.precision.is_some() && exp.cases.iter().any(wants_tester));
    let mut freeze_warned = false;
    let mut interrupted = false;
    let result: Result<()> = {
        let launcher = Launcher {
            worker: w,
            first_endpoint: &first_endpoint,
            tester_id: match &share.host {
                Some(h) => format!("tester-{h}"),
                None => "tester".into(),
            },
        };
        let tester_machine = exp.lab.tester_host.as_deref().unwrap_or(LOCAL_MACHINE);
        if needs_tester {
            let _hold = machines.hold([tester_machine]);
            launch(&launcher, Role::Tester, &mut tester_slot, ledger);
        }
        let needed: std::collections::BTreeSet<usize> =
            pending.iter().flat_map(|t| std::iter::once(t.env_idx).chain(t.peer_idx)).collect();
        for &e in &needed {
            if CANCEL.load(Ordering::SeqCst) {
                break;
            }
            // Launched for the first block it has trials in.
            slots[e].block = pending.iter().filter(|t| t.env_idx == e).map(|t| t.block).min().unwrap_or(0);
            let _hold = machines.hold([share.machine()]);
            launch(&launcher, Role::Env(e), &mut slots[e], ledger);
        }
        let mut calibrations: BTreeMap<(usize, usize), crate::store::Calibration> =
            store.calibrations(w.run_id)?.into_iter().collect();
        // The plan's pending trials, then (precision mode) what the rule adds as it goes.
        let mut queue: std::collections::VecDeque<PlannedTrial> = pending.iter().cloned().collect();
        let budget_end = exp.precision.map(|p| w.started + Duration::from_millis(p.budget_ms));
        let mut added: std::collections::BTreeSet<i64> = Default::default();
        (|| {
            loop {
                if CANCEL.load(Ordering::SeqCst) {
                    interrupted = true;
                    break;
                }
                if budget_end.is_some_and(|end| Instant::now() >= end) {
                    // The rule's proposals that did not start are withdrawn; planned trials left
                    // (the minimum) stay pending for `--resume`.
                    let withdrawn: Vec<i64> =
                        queue.iter().map(|t| t.id).filter(|id| added.contains(id)).collect();
                    store.drop_pending(&withdrawn)?;
                    queue.retain(|t| !added.contains(&t.id));
                    if let Ok(mut p) = w.progress.lock() {
                        p.grow(-(withdrawn.len() as i64));
                    }
                    interrupted |= !queue.is_empty();
                    if let Ok(mut o) = w.outcome.lock() {
                        o.budget_spent = true;
                        o.minimum_left += queue.len();
                    }
                    break;
                }
                let t = match queue.pop_front() {
                    Some(t) => t,
                    None if exp.precision.is_some() => {
                        let gone: std::collections::BTreeSet<usize> =
                            (0..slots.len()).filter(|&i| slots[i].gave_up.is_some()).collect();
                        let cells = crate::precision::cells(exp, store, w.run_id, &share.envs, &gone)?;
                        let Some(unit) = crate::precision::next_unit(exp, &cells) else { break };
                        let more = crate::precision::trials(exp, store, w.run_id, &unit, added.len() as u64)?;
                        let more = store.extend_plan(w.run_id, &more)?;
                        if let Ok(mut p) = w.progress.lock() {
                            p.grow(more.len() as i64);
                        }
                        added.extend(more.iter().map(|t| t.id));
                        queue.extend(more);
                        continue;
                    }
                    None => break,
                };
                let PlannedTrial { id, env_idx: e, case_idx: c, peer_idx, block, .. } = t;
                // A new block runs on a new launch of its environment (`launches = L`).
                for x in std::iter::once(e).chain(peer_idx) {
                    if slots[x].block != block {
                        let _hold = machines.hold([share.machine()]);
                        slots[x].shutdown(ledger);
                        slots[x].block = block;
                        launch(&launcher, Role::Env(x), &mut slots[x], ledger);
                    }
                }
                let case = &exp.cases[c];
                let wants_tester = peer_idx.is_none()
                    && (case.network || case.load.is_some_and(|l| l.on == crate::experiment::LoadOn::Tester));
                // The machines this trial uses: its environments' and, with a tester, this one.
                let _hold = if wants_tester {
                    machines.hold([share.machine(), tester_machine])
                } else {
                    machines.hold([share.machine()])
                };
                // The environments not in this trial are paused while it runs.
                type Idle = (String, Option<env::Pauser>, Option<u32>);
                let (mut idle_count, mut paused_how) = (0usize, Vec::<&'static str>::new());
                let frozen: Vec<Idle> = if exp.freeze_idle {
                    let others: Vec<Idle> = slots
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != e && Some(*i) != peer_idx)
                        .flat_map(|(_, s)| {
                            s.instances.iter().flatten().map(|i| {
                                let pid = i
                                    .child
                                    .as_ref()
                                    .map(|c| c.id())
                                    .or((i.agent_pid > 0).then_some(i.agent_pid));
                                (i.id.clone(), i.pauser.clone(), pid)
                            })
                        })
                        .collect();
                    idle_count = others.len();
                    others
                        .into_iter()
                        .filter(|(id, p, pid)| match env::pause(id, p.as_ref(), *pid, true) {
                            Ok(how) => {
                                if !paused_how.contains(&how) {
                                    paused_how.push(how);
                                }
                                true
                            }
                            Err(why) => {
                                if !freeze_warned {
                                    eprintln!("virtperf: cannot pause an idle environment ({why}); it runs beside the trials");
                                    freeze_warned = true;
                                }
                                false
                            }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                // The other side of the trial: another environment (all-pairs) or the lab's tester.
                let (slot, mut other, other_role, other_addr, other_name) = match peer_idx {
                    Some(p) => {
                        let (a, b) = pair_mut(&mut slots, e, p);
                        let addr = lab
                            .as_ref()
                            .map(|l| l.endpoints[first_endpoint[p]].addr.to_string())
                            .unwrap_or_default();
                        (a, Some(b), Role::Env(p), addr, format!("environment `{}`", exp.envs[p].name))
                    }
                    None => {
                        let addr = match &lab {
                            Some(l) => l.tester.addr.to_string(),
                            None => path_addrs(exp, e).0.unwrap_or_default(),
                        };
                        let t = wants_tester.then_some(&mut tester_slot);
                        (&mut slots[e], t, Role::Tester, addr, "the lab's tester".to_string())
                    }
                };
                // A relaunch (the instance died in an earlier trial) gets a warm-up of its own.
                let mut relaunched = false;
                if !slot.ready() && slot.gave_up.is_none() {
                    relaunched = slot.launches > 0;
                    launch(&launcher, Role::Env(e), slot, ledger);
                }
                if let Some(o) = other.as_deref_mut() {
                    if !o.ready() && o.gave_up.is_none() {
                        launch(&launcher, other_role, o, ledger);
                    }
                }
                let other_missing = other.as_ref().is_some_and(|o| !o.ready());
                let other_gave_up = other.as_ref().and_then(|o| o.gave_up.clone());
                let slot_ready = slot.ready();
                let outcome = match (slot_ready, &slot.gave_up) {
                    (_, Some(why)) => TrialOutcome {
                        status: TrialStatus::Skipped,
                        reason: Some(why.clone()),
                        ..Default::default()
                    },
                    _ if other_missing && other_gave_up.is_some() => TrialOutcome {
                        status: TrialStatus::Skipped,
                        reason: Some(format!("{other_name}: {}", other_gave_up.unwrap_or_default())),
                        ..Default::default()
                    },
                    (false, None) => {
                        if CANCEL.load(Ordering::SeqCst) {
                            interrupted = true;
                            break;
                        }
                        TrialOutcome {
                            status: TrialStatus::Failed,
                            reason: Some(match &slot.last_failure {
                                Some(m) => format!("the environment failed to start: {m}"),
                                None => "the environment failed to start".into(),
                            }),
                            ..Default::default()
                        }
                    }
                    _ if other_missing => {
                        if CANCEL.load(Ordering::SeqCst) {
                            interrupted = true;
                            break;
                        }
                        TrialOutcome {
                            status: TrialStatus::Failed,
                            reason: Some(format!("{other_name} failed to start")),
                            ..Default::default()
                        }
                    }
                    (true, None) => {
                        let launch_id = slot.launch_id;
                        let result = (|| {
                            // A per-operation workload's count, calibrated once per environment
                            // (the probes are warm-up; a resumed run reuses the stored one).
                            let mut spec = specs[c].clone();
                            let mut work = None;
                            if let Some(param) = calibrated_param(case) {
                                if let std::collections::btree_map::Entry::Vacant(todo) =
                                    calibrations.entry((e, c))
                                {
                                    let Some(inst) = slot.instances[0].as_mut() else {
                                        return Err(Fail::Failed {
                                            reason: "no instance to calibrate on".into(),
                                            dut_broken: vec![0],
                                            tester_broken: false,
                                        });
                                    };
                                    let target = Duration::from_millis(
                                        case.params
                                            .get("target_time")
                                            .and_then(serde_json::Value::as_u64)
                                            .unwrap_or(200),
                                    );
                                    let cap = calibration_cap(exp, e, case, param);
                                    let found = trial::calibrate(
                                        &mut Dut { inst, addr: None },
                                        &spec,
                                        param,
                                        target,
                                        (cap.0, &cap.1),
                                        timeout,
                                        &CANCEL,
                                    )?;
                                    store.record_calibration(w.run_id, e, c, &found).map_err(|err| {
                                        Fail::Failed {
                                            reason: format!("cannot store the calibration: {err:#}"),
                                            dut_broken: Vec::new(),
                                            tester_broken: false,
                                        }
                                    })?;
                                    todo.insert(found);
                                }
                                if let Some(cal) = calibrations.get(&(e, c)) {
                                    spec.params.insert(param.to_string(), serde_json::json!(cal.count));
                                    work = Some(cal.count);
                                }
                            }
                            let mut duts: Vec<Dut> = slot
                                .instances
                                .iter_mut()
                                .flatten()
                                .enumerate()
                                .map(|(k, inst)| Dut {
                                    inst,
                                    addr: match &lab {
                                        Some(l) => Some(l.endpoints[first_endpoint[e] + k].addr.to_string()),
                                        None => path_addrs(exp, e).1,
                                    },
                                })
                                .collect();
                            let mut tester = other
                                .as_deref_mut()
                                .and_then(|o| o.first())
                                .map(|ti| Tester { inst: ti, addr: other_addr });
                            if relaunched {
                                // Not stored: the first trial after a launch runs slower (cold
                                // caches, a guest still settling), as the run's own warm-ups showed.
                                let _ = trial::run(&mut duts, tester.as_mut(), case, &spec, timeout, &CANCEL);
                            }
                            // The lab's switch, where it is a process: alive, or the trial fails;
                            // its CPU during the trial is a row of its own (xenmon's dom0 line).
                            let switch = w.switch_cpu.filter(|_| wants_tester && peer_idx.is_none());
                            let switch_down = || {
                                let why = lab.and_then(Lab::switch_gone).or_else(|| {
                                    switch.filter(|(_, pid)| !process_alive(*pid)).map(|(_, pid)| {
                                        format!("the driver domain (QEMU, pid {pid}) has exited")
                                    })
                                });
                                why.map(|why| Fail::Failed {
                                    reason: format!("the lab's switch is down: {why}"),
                                    dut_broken: Vec::new(),
                                    tester_broken: false,
                                })
                            };
                            if let Some(f) = switch.and(switch_down()) {
                                return Err(f);
                            }
                            let cpu0 = switch.and_then(|(p, _)| p.read_ns());
                            let out = trial::run(&mut duts, tester.as_mut(), case, &spec, timeout, &CANCEL);
                            if let Some(f) = switch.and(switch_down()) {
                                return Err(f);
                            }
                            out.map(|mut o| {
                                if let (Some(a), Some(b)) = (cpu0, switch.and_then(|(p, _)| p.read_ns())) {
                                    o.samples.push(virtperf_proto::Sample {
                                        metric: SWITCH_CPU.into(),
                                        value: b.saturating_sub(a) as f64 / 1e6,
                                        unit: "ms".into(),
                                    });
                                }
                                TrialOutcome { work, ..o }
                            })
                        })();
                        match result {
                            Ok(o) => TrialOutcome { launch_id, ..o },
                            Err(Fail::Interrupted) => {
                                interrupted = true;
                                break;
                            }
                            Err(Fail::Failed { reason, dut_broken, tester_broken }) => {
                                // Only the instances that broke are relaunched.
                                for k in dut_broken {
                                    slot.kill(k, ledger);
                                }
                                if tester_broken {
                                    if let Some(o) = other {
                                        o.kill(0, ledger);
                                    }
                                }
                                TrialOutcome {
                                    status: TrialStatus::Failed,
                                    reason: Some(reason),
                                    ..Default::default()
                                }
                            }
                        }
                    }
                };
                for (fid, p, pid) in &frozen {
                    if let Err(why) = env::pause(fid, p.as_ref(), *pid, false) {
                        eprintln!("virtperf: cannot resume {fid}: {why}");
                    }
                }
                let mut outcome = outcome;
                if idle_count > 0 {
                    // Whether this trial's idle neighbours were paused, stored with it.
                    let x = outcome.extra.get_or_insert_with(|| serde_json::json!({}));
                    if let Some(o) = x.as_object_mut() {
                        o.insert(
                            "idle_neighbours".into(),
                            serde_json::json!({"idle": idle_count, "paused": frozen.len(), "how": paused_how}),
                        );
                    }
                }
                store.record_trial(id, &outcome)?;
                let pair = match peer_idx {
                    Some(p) => format!("{} → {}", exp.envs[e].name, exp.envs[p].name),
                    None => exp.envs[e].name.clone(),
                };
                if let Ok(mut p) = w.progress.lock() {
                    p.tick(&format!("{pair} / {}", case.label));
                }
            }
            Ok(())
        })()
    };
    for slot in slots.iter_mut().chain(std::iter::once(&mut tester_slot)) {
        for inst in slot.instances.iter_mut().filter_map(Option::take) {
            if interrupted {
                inst.kill(ledger);
            } else {
                inst.shutdown(ledger);
            }
        }
    }
    result?;
    Ok(interrupted)
}

fn execute(store: &Store, run_id: i64, exp: &Experiment, opts: &RunOpts) -> Result<ExitStatus> {
    let started = Instant::now();
    let exe = std::env::current_exe().context("cannot find the virtperf binary to run as the agent")?;
    let (mut ledger, swept) = Ledger::open().context("cannot open the ledger in the state directory")?;
    if !swept.is_empty() {
        eprintln!("virtperf: removed {} leftover(s) of an earlier run that was killed", swept.len());
    }
    let run_dir = ledger.state_dir().join(format!("run-{}", std::process::id()));
    ledger.create_dir(&run_dir).with_context(|| format!("cannot create {}", run_dir.display()))?;
    let scratch_dir = if needs_scratch(exp) {
        let root = crate::host::scratch_root();
        let d = root.join(format!("run-{}", std::process::id()));
        let made = crate::host::ensure_private_dir(&root).and_then(|()| ledger.create_scratch_dir(&d));
        if let Err(e) = made {
            ledger.remove_scratch_dir(&d);
            ledger.remove_dir(&run_dir);
            ledger.close();
            store.set_run_status(run_id, RunStatus::Failed)?;
            eprintln!(
                "error: cannot create the run's scratch directory {}: {e}; set VIRTPERF_SCRATCH to a directory on the disk to measure",
                d.display()
            );
            return Ok(ExitStatus::Unavailable);
        }
        Some(d)
    } else {
        None
    };

    let pending = store.pending_trials(run_id)?;
    let shares = shares(exp, &pending);
    // The lab joins this machine's environments to its tester; environments on other hosts meet
    // their tester over the hosts' own network.
    let mut lab = None;
    let mut domain: Option<Instance> = None;
    let local = shares.iter().find(|s| s.host.is_none() && exp.lab.tester_host.is_none());
    if let Some(share) = local.filter(|s| s.trials.iter().any(|t| exp.cases[t.case_idx].network)) {
        if !CANCEL.load(Ordering::SeqCst) {
            let taps: Vec<bool> = share
                .envs
                .iter()
                .flat_map(|&e| {
                    let def = &exp.envs[e];
                    let tap = env::find(&def.kind).is_some_and(|k| k.wants_tap());
                    std::iter::repeat_n(tap, def.instances as usize)
                })
                .collect();
            let pairs = exp.cases.iter().any(|c| c.matrix);
            let built = Lab::build(&mut ledger, &taps, &exp.lab, pairs, &run_dir).and_then(|l| {
                // The driver domain is a guest: launched on the lab's taps once the lab stands.
                match exp.lab.switch {
                    crate::lab::Switch::DriverDomain => {
                        match launch_driver_domain(&l, &mut ledger, exp, opts, &run_dir, &exe) {
                            Ok(d) => {
                                domain = Some(d);
                                Ok(l)
                            }
                            Err(e) => {
                                let mut l = l;
                                l.teardown(&mut ledger);
                                Err(format!("the driver domain: {e}"))
                            }
                        }
                    }
                    _ => Ok(l),
                }
            });
            match built {
                Ok(l) => lab = Some(l),
                Err(e) => {
                    if let Some(d) = &scratch_dir {
                        ledger.remove_scratch_dir(d);
                    }
                    ledger.remove_dir(&run_dir);
                    ledger.close();
                    store.set_run_status(run_id, RunStatus::Failed)?;
                    eprintln!("error: cannot build the lab network: {e}");
                    return Ok(ExitStatus::Unavailable);
                }
            }
        }
    }
    let progress = std::sync::Mutex::new(Progress::new(pending.len() as u64, opts.progress));
    let ended_how = std::sync::Mutex::new(Ended::default());
    // The switch's processes (OVS's daemon, the driver domain's QEMU): their CPU is a row of
    // every network trial, and one that dies fails the trial in flight.
    let switch_cpu: Option<(env::CpuProbe, u32)> = match (&domain, &lab) {
        (Some(d), _) => d.cpu.clone().zip(d.child.as_ref().map(|c| c.id())),
        (None, Some(l)) => l.switch_pid().map(|p| (env::CpuProbe::Proc(p), p)),
        _ => None,
    };
    let machines = Machines::of(&shares, exp.lab.tester_host.as_deref());
    let worker = |share: &Share, store: &Store, ledger: &mut Ledger| {
        let w = Worker {
            store,
            run_id,
            exp,
            run_dir: &run_dir,
            exe: &exe,
            opts,
            lab: if share.host.is_none() { lab.as_ref() } else { None },
            scratch_dir: scratch_dir.as_deref(),
            progress: &progress,
            machines: &machines,
            started,
            outcome: &ended_how,
            switch_cpu: if share.host.is_none() { switch_cpu.as_ref() } else { None },
        };
        work(&w, share, ledger)
    };
    // One worker per machine: a campaign's hosts measure at once (each trial holding the machines
    // it uses, see [`Machines`]); a run on one machine runs on this thread.
    let ended: Result<bool> = if shares.len() <= 1 {
        shares.first().map_or(Ok(false), |s| worker(s, store, &mut ledger))
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .iter()
                .enumerate()
                .map(|(i, share)| {
                    let worker = &worker;
                    scope.spawn(move || -> Result<bool> {
                        // Each worker has its own connection (SQLite serialises the writes) and its
                        // own ledger file (swept like any other when this process dies).
                        let store = Store::open_existing(&opts.db)?;
                        let mut ledger = Ledger::open_worker(i)
                            .context("cannot open a worker's ledger in the state directory")?;
                        let r = worker(share, &store, &mut ledger);
                        ledger.close();
                        r
                    })
                })
                .collect();
            let mut interrupted = false;
            let mut first_err = None;
            for (h, share) in handles.into_iter().zip(&shares) {
                match h.join() {
                    Ok(Ok(i)) => interrupted |= i,
                    Ok(Err(e)) => {
                        first_err.get_or_insert(e);
                    }
                    Err(_) => {
                        first_err.get_or_insert(anyhow::anyhow!(
                            "the worker of host `{}` stopped unexpectedly (a bug: please report it)",
                            share.machine()
                        ));
                    }
                }
            }
            match first_err {
                Some(e) => Err(e),
                None => Ok(interrupted),
            }
        })
    };
    if let Ok(p) = progress.lock() {
        p.finish();
    }
    // The namespaces go after every process that lived in them: the driver domain first.
    if let Some(d) = domain.take() {
        d.shutdown(&mut ledger);
    }
    if let Some(mut l) = lab.take() {
        l.teardown(&mut ledger);
    }
    if let Some(d) = &scratch_dir {
        ledger.remove_scratch_dir(d);
    }
    ledger.remove_dir(&run_dir);
    ledger.close();
    let interrupted = ended?;

    let status = if interrupted || CANCEL.load(Ordering::SeqCst) {
        RunStatus::Interrupted
    } else {
        RunStatus::Completed
    };
    store.set_run_status(run_id, status)?;
    if let Ok(o) = ended_how.lock() {
        if let Some(p) = exp.precision.filter(|_| o.budget_spent) {
            let budget = humantime::format_duration(Duration::from_millis(p.budget_ms));
            if o.minimum_left > 0 {
                eprintln!(
                    "virtperf: the budget ({budget}) ended with {} trial(s) of the minimum left: `virtperf run --resume {run_id}` runs them",
                    o.minimum_left
                );
            } else {
                eprintln!("virtperf: the budget ({budget}) ended the run; the report says which ratios met the ±{}% target", p.percent);
            }
        }
    }
    let rep = report::build(store, run_id)?;
    crate::export::write(&opts.outputs, &crate::export::RunData::new(store, run_id, &rep))?;
    Ok(match status {
        RunStatus::Interrupted => ExitStatus::Interrupted,
        _ if rep.trials.ok == 0 && (rep.trials.failed + rep.trials.skipped) > 0 => ExitStatus::Failure,
        _ => ExitStatus::Success,
    })
}
