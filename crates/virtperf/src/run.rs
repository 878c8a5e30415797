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
use crate::experiment::Experiment;
use crate::lab::Lab;
use crate::ledger::Ledger;
use crate::plan;
use crate::trial::{self, Dut, Fail, Tester};
use virtperf_record::store::{
    InstanceRecord, LaunchStatus, Lifecycle, NewCase, PlannedTrial, RunStatus, Store, TrialOutcome,
    TrialStatus,
};
use virtperf_report::exit::ExitStatus;
use virtperf_report::report;

/// Set by SIGINT/SIGTERM; every wait checks it.
pub static CANCEL: AtomicBool = AtomicBool::new(false);

pub use virtperf_record::store::SWITCH_CPU;

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
    /// What the run writes when it ends (checked before it starts; see virtperf_report::export::choose).
    pub outputs: Vec<virtperf_report::export::Target>,
    pub boot_timeout: Duration,
    pub command_line: String,
}

/// Set while preflight does its one-time work (a guest image, virtperf's UML kernel: minutes),
/// before anything is measured or stored: an interrupt then ends the process at once. Its tools
/// die with it (PDEATHSIG) and what they left is the next start's sweep, as after a kill -9.
static PREPARING: AtomicBool = AtomicBool::new(false);

/// Marks the preparation phase for as long as it lives.
struct Preparing;

impl Preparing {
    fn start() -> Preparing {
        PREPARING.store(true, Ordering::SeqCst);
        if CANCEL.load(Ordering::SeqCst) {
            interrupted_while_preparing();
        }
        Preparing
    }
}

impl Drop for Preparing {
    fn drop(&mut self) {
        PREPARING.store(false, Ordering::SeqCst);
    }
}

fn interrupted_while_preparing() -> ! {
    eprintln!(
        "\nvirtperf: interrupted while preparing the environments (nothing was measured); the next start removes what the preparation left"
    );
    std::process::exit(ExitStatus::Interrupted as i32)
}

pub fn install_signal_handler() {
    // Installing twice is an error we can ignore (tests call run more than once per process).
    let _ = ctrlc::set_handler(|| {
        if PREPARING.load(Ordering::SeqCst) {
            interrupted_while_preparing();
        }
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
    // Armed trials (fixed work on the DUT alone) are timed on the host's clock too; how late this
    // host wakes after an idle spell widens their clock check (none without them: 0.2 s saved).
    let host_wake = exp.cases.iter().any(crate::trial::armed_alone).then(crate::host::wake_latency);
    serde_json::json!({
        "lab": lab,
        "host_wake": host_wake,
        // Extra runsc flags a gVisor environment ran with (a different gVisor: said here).
        "runsc_flags": exp
            .envs
            .iter()
            .filter(|e| e.host.is_none())
            .find_map(|e| env::find(&e.kind).and_then(|k| k.runtime_flags())),
        // What the host holds each environment to (docs/security.md).
        "confinement": exp
            .envs
            .iter()
            .filter(|e| e.host.is_none())
            .filter_map(|e| env::find(&e.kind).map(|k| (e.name.clone(), k.confinement(&e.params))))
            .collect::<BTreeMap<String, String>>(),
        // The knobs set away from their kind's defaults, by environment (docs/knobs.md).
        "knobs": exp
            .envs
            .iter()
            .filter(|e| e.host.is_none())
            .filter_map(|e| env::find(&e.kind).map(|k| (e.name.clone(), k.knobs(&e.params))))
            .filter(|(_, k)| !k.is_empty())
            .collect::<BTreeMap<String, Vec<String>>>(),
        // Each knob's variant and the environment its cost is stated against (knobs = [...]).
        "against": exp
            .envs
            .iter()
            .filter_map(|e| {
                let a = e.against.as_ref()?;
                // The knob: the parameters in which it differs from the one it is stated against.
                let knob = exp.envs.iter().find(|x| x.name == *a).map(|x| {
                    e.params
                        .iter()
                        .filter(|(k, v)| x.params.get(*k) != Some(*v))
                        .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                        .collect::<Vec<_>>()
                        .join(",")
                });
                Some((e.name.clone(), serde_json::json!({"against": a, "knob": knob})))
            })
            .collect::<BTreeMap<String, serde_json::Value>>(),
        // An agent replaced by another program (VIRTPERF_NATIVE_AGENT), by environment kind.
        "agent_replaced": exp
            .envs
            .iter()
            .filter(|e| e.host.is_none())
            .filter_map(|e| env::find(&e.kind).and_then(|k| k.agent_replaced().map(|a| (e.kind.clone(), a))))
            .collect::<BTreeMap<String, String>>(),
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
        "warmup": exp.warmup,
        "reps": exp.reps,
        // How the trials run (paired: case groups) and so which estimate the report states.
        "order": exp.order.as_str(),
        "precision": exp.precision,
        "runtimes": runtimes,
        "hosts": hosts,
        "command_line": command_line,
        "date": virtperf_record::store::now_rfc3339(),
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
            // The tester, an agent on the bare host there.
            if exp.lab.tester_host.as_deref() == Some(h.name.as_str()) && exp.has_network() {
                envs.push(("tester".into(), env::baseline().kind().into(), BTreeMap::new()));
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
    let preparing = Preparing::start();
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
    drop(preparing);
    let plan = plan::make(&exp);
    let mut store = Store::open(&opts.db)?;
    let envs: Vec<_> = exp
        .envs
        .iter()
        .map(|e| virtperf_record::store::NewEnv {
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
            baseline: env::find(&e.kind).is_some_and(|k| k.is_baseline()),
            own_clock: env::find(&e.kind).is_some_and(|k| k.own_clock()),
        })
        .collect();
    let cases: Vec<_> = exp
        .cases
        .iter()
        .map(|c| {
            let params = serde_json::to_value(&c.params).unwrap_or_default();
            // What the case is, recorded with it: the report reads this, never the workload.
            let record = virtperf_workload::describe(&c.kind, &params)
                .unwrap_or_else(virtperf_record::CaseRecord::unknown);
            NewCase {
                workload: c.workload.clone(),
                kind: c.kind.clone(),
                label: c.label.clone(),
                params,
                record,
            }
        })
        .collect();
    let mut manifest = manifest(&exp, &opts.command_line);
    // Another run measuring on this host meanwhile: said now and before the numbers.
    if let Some(other) = crate::host::claim_measuring() {
        let who = if other == 0 { "another process".to_string() } else { format!("process {other}") };
        eprintln!("virtperf: warning: another virtperf run ({who}) is measuring on this host: each run's figures carry the other's load");
        manifest["concurrent_run"] = serde_json::json!(other);
    }
    manifest["skipped_environments"] = serde_json::json!(skipped
        .iter()
        .map(|(n, why)| serde_json::json!({"environment": n, "why": why}))
        .collect::<Vec<_>>());
    if exp.explain {
        // What the warm-ups will count natively and in containers (the guests count what they
        // can read themselves): the tracepoints, or why there are none.
        manifest["explain"] = match virtperf_workload::counts::host_tracepoint_ids() {
            Ok(ids) => serde_json::json!({ "tracepoints": ids }),
            Err(why) => serde_json::json!({ "tracepoints": {}, "why": why }),
        };
    }
    let metrics = virtperf_workload::metric_records();
    let run_id = store.create_run(&virtperf_record::store::NewRun {
        name: &exp.name,
        experiment_toml: &exp.to_toml(),
        manifest: &manifest,
        envs: &envs,
        cases: &cases,
        metrics: &metrics,
        plan: &plan,
    })?;
    eprintln!("virtperf: run {run_id} → {} ({} trials)", opts.db.display(), plan.len());
    if let Err(owner) = store.claim_run(run_id, this_process(), process_runs)? {
        return Err(virtperf_report::exit::bad_input(format!(
            "run {run_id} is already owned by process {owner}"
        )));
    }
    owned(&store, run_id, || execute(&store, run_id, &exp, opts))
}

/// This process as a run's owner: its pid, its start time (clock ticks since boot) and the boot.
fn this_process() -> (u32, u64, &'static str) {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let me = std::process::id();
    let boot = BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    });
    (me, crate::host::process_start(me).unwrap_or(0), boot.as_str())
}

/// Whether the owner a run records still runs: the same boot, and a process with its pid that
/// started when it did (a pid reused since is another process).
fn process_runs(pid: u32, start: u64, boot: &str) -> bool {
    boot == this_process().2 && crate::host::process_start(pid) == Some(start)
}

/// Runs `f` as run `run`'s owner, and gives the run up after it however it ends.
fn owned(store: &Store, run: i64, f: impl FnOnce() -> Result<ExitStatus>) -> Result<ExitStatus> {
    let r = f();
    let _ = store.release_run(run, std::process::id());
    r
}

/// What a stored run's experiment derives to now (this virtperf, this host) against what it
/// derived to when the run was made: the first environment or case that differs, by name and key.
/// A resume then would run other trials than the ones planned under the same names.
fn drift(store: &Store, run_id: i64, exp: &Experiment) -> Result<Option<String>> {
    let (envs, cases) = (store.environments(run_id)?, store.cases(run_id)?);
    if envs.len() != exp.envs.len() {
        return Ok(Some(format!("{} environments were stored, {} derive now", envs.len(), exp.envs.len())));
    }
    if cases.len() != exp.cases.len() {
        return Ok(Some(format!("{} cases were stored, {} derive now", cases.len(), exp.cases.len())));
    }
    let differs = |what: &str, stored: &serde_json::Value, now: &serde_json::Value| -> Option<String> {
        let (a, b) = (stored.as_object()?, now.as_object()?);
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        keys.into_iter().find(|k| a.get(*k) != b.get(*k)).map(|k| {
            let show = |v: Option<&serde_json::Value>| v.map_or("(absent)".to_string(), |v| v.to_string());
            format!("{what}: key `{k}` was {} and is now {}", show(a.get(k)), show(b.get(k)))
        })
    };
    for (stored, now) in envs.iter().zip(&exp.envs) {
        if (stored.name.as_str(), stored.kind.as_str(), stored.instances)
            != (now.name.as_str(), now.kind.as_str(), now.instances)
        {
            return Ok(Some(format!(
                "environment {}: stored as `{}` ({}, {} instance(s)), derives now as `{}` ({}, {})",
                stored.idx, stored.name, stored.kind, stored.instances, now.name, now.kind, now.instances
            )));
        }
        let now_params = serde_json::to_value(&now.params).unwrap_or_default();
        if let Some(d) = differs(&format!("environment `{}`", now.name), &stored.params, &now_params) {
            return Ok(Some(d));
        }
    }
    for (stored, now) in cases.iter().zip(&exp.cases) {
        // The key first: the label says which case, its parameters say what changed.
        let now_params = serde_json::to_value(&now.params).unwrap_or_default();
        if stored.kind == now.kind {
            if let Some(d) = differs(&format!("case `{}`", stored.label), &stored.params, &now_params) {
                return Ok(Some(d));
            }
        }
        if (stored.kind.as_str(), stored.label.as_str()) != (now.kind.as_str(), now.label.as_str()) {
            return Ok(Some(format!(
                "case {}: stored as `{}`, derives now as `{}`",
                stored.idx, stored.label, now.label
            )));
        }
    }
    Ok(None)
}

pub fn resume(run_id: i64, retry_failed: bool, opts: &RunOpts) -> Result<ExitStatus> {
    let mut store = Store::open_existing(&opts.db)?;
    let info = store.run(run_id)?;
    let raw = crate::experiment::read_toml(&format!("run {run_id}"), &info.experiment)
        .map_err(virtperf_report::exit::bad_input)?;
    let exp = crate::experiment::validate(&raw, &crate::experiment::Origin::Default)
        .map_err(virtperf_report::exit::bad_input)?;
    // One owner at a time: a second resume of a run in progress would run its trials twice.
    if let Err(owner) = store.claim_run(run_id, this_process(), process_runs)? {
        return Err(virtperf_report::exit::bad_input(format!(
            "run {run_id} is being run by process {owner} (`virtperf run` or `--resume {run_id}`): wait for it to end, or stop it (kill {owner}); nothing was changed"
        )));
    }
    let r = resume_owned(&mut store, run_id, retry_failed, &info, &exp, opts);
    let _ = store.release_run(run_id, std::process::id());
    r
}

fn resume_owned(
    store: &mut Store,
    run_id: i64,
    retry_failed: bool,
    info: &virtperf_record::store::RunInfo,
    exp: &Experiment,
    opts: &RunOpts,
) -> Result<ExitStatus> {
    if let Some(d) = drift(store, run_id, exp)? {
        return Err(virtperf_report::exit::bad_input(format!(
            "run {run_id}'s experiment no longer derives what it did when it was made ({d}): a resume here would run other trials under the same names. Resume it with the virtperf and on the host that made it, or start a new run; nothing was changed"
        )));
    }
    let to_retry = if retry_failed { store.failed_or_skipped(run_id)? } else { 0 };
    if info.status == RunStatus::Completed && to_retry == 0 {
        // A precision run whose budget ended with cells short of their target goes on, with a
        // budget of its own.
        let envs: Vec<usize> = (0..exp.envs.len()).collect();
        let short: Vec<String> = if crate::precision::paired(exp) {
            crate::precision::paired_cells(exp, store, run_id, &envs, &Default::default())?
                .0
                .iter()
                .filter(|c| !c.watched.met)
                .map(|c| format!("{} / {} {}", exp.envs[c.env].name, exp.cases[c.case].label, c.metric))
                .collect()
        } else {
            crate::precision::cells(exp, store, run_id, &envs, &Default::default())?
                .iter()
                .filter(|c| !c.standing.met())
                .map(|c| format!("{} / {} {}", exp.envs[c.env].name, exp.cases[c.case].label, c.metric))
                .collect()
        };
        if short.is_empty() {
            eprintln!(
                "run {run_id} is already complete; nothing to resume{}",
                if retry_failed { " (no trial failed)" } else { " (its failed trials: --retry-failed)" }
            );
            return Ok(ExitStatus::BadInput);
        }
        eprintln!(
            "virtperf: run {run_id}: {} ratio(s) short of their precision target ({}); measuring on",
            short.len(),
            short.join(", ")
        );
    }
    if let Some(other) = crate::host::claim_measuring() {
        let who = if other == 0 { "another process".to_string() } else { format!("process {other}") };
        eprintln!("virtperf: warning: another virtperf run ({who}) is measuring on this host: each run's figures carry the other's load");
    }
    let preparing = Preparing::start();
    if let Err(why) = preflight(exp, true) {
        eprintln!("error: cannot run here:\n{why}");
        return Ok(ExitStatus::Unavailable);
    }
    drop(preparing);
    // Only once the environments answer: a host still down keeps its trials' failures as they are.
    if to_retry > 0 {
        let n = store.retry_failed(run_id)?;
        eprintln!(
            "virtperf: run {run_id}: {n} trial(s) that failed or were skipped run again (how each ended before is kept)"
        );
    }
    store.set_run_status(run_id, RunStatus::Running)?;
    eprintln!("virtperf: resuming run {run_id} ({} trials left)", store.pending_trials(run_id)?.len());
    execute(store, run_id, exp, opts)
}

/// How long the instances of an environment are watched idle at the end of their lives, all at
/// once ([`Slot::idle_cpu`]): long enough for a guest's timer ticks (250 at 1 kHz), short beside a
/// launch.
const IDLE_WINDOW: Duration = Duration::from_millis(250);

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
    /// Each instance's launch record and its clock at the start (see [`Slot::close`]).
    clocks: Vec<Option<(i64, env::ClockPoint)>>,
    /// Each instance's launch record (`instances.id`), for its teardown's time.
    ids: Vec<Option<i64>>,
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
            clocks: (0..n).map(|_| None).collect(),
            ids: (0..n).map(|_| None).collect(),
        }
    }
    /// Stops every instance that is up (a planned relaunch: `shutdown`, the polite way): each
    /// launch's memory at its end and its clock rate stored first, all of them read while all are
    /// still up (as the memory once ready was), then each stopped and its teardown's time stored.
    fn shutdown(&mut self, ledger: &mut Ledger, store: &Store) {
        for k in 0..self.instances.len() {
            self.close(k, store);
        }
        self.idle_cpu(store);
        for k in 0..self.instances.len() {
            self.teardown(k, ledger, store);
        }
        self.launch_id = None;
    }
    /// Stops instance `k` the planned way (its memory at the end, clock rate and teardown time
    /// stored), as [`Slot::shutdown`] does for all.
    fn stop_one(&mut self, k: usize, ledger: &mut Ledger, store: &Store) {
        self.close(k, store);
        self.teardown(k, ledger, store);
    }
    /// What instance `k`'s life ends with, read before it is stopped: what its host processes
    /// hold after its trials (PSS, USS, the cgroup's charge), and the agent's clock against the
    /// host's over its whole life, from the point taken when it came up to one now: its rate
    /// error (ppm), stored with the launch (a span of seconds to minutes, where a trial's check
    /// spans milliseconds).
    fn close(&mut self, k: usize, store: &Store) {
        let Some(inst) = self.instances.get_mut(k).and_then(Option::as_mut) else { return };
        if let Some(id) = self.ids[k] {
            let end = memory(inst);
            if end.pss_kib.is_some() {
                let _ = store.record_memory_end(id, &end);
            }
        }
        if let Some((id, start)) = self.clocks[k].take() {
            let rate = inst.clock_point(&CANCEL).and_then(|end| start.rate_against(&end));
            if let Some((ppm, uncertainty, span)) = rate {
                let _ = store.record_clock_rate(id, span, ppm, uncertainty);
            }
        }
    }
    /// The host's CPU each instance up uses while idle after its trials — its every process, by
    /// its cgroup's counter — over one quiet window for all of them ([`IDLE_WINDOW`], no request
    /// in flight), stored as % of one CPU: a guest kernel's timer ticks, TCG's idle loop, the
    /// Sentry's timers, what an idle instance costs the host it shares.
    fn idle_cpu(&self, store: &Store) {
        if CANCEL.load(Ordering::SeqCst) {
            return;
        }
        let t0 = Instant::now();
        let before: Vec<(i64, &env::CpuProbe, u64)> = self
            .instances
            .iter()
            .zip(&self.ids)
            .filter_map(|(inst, id)| {
                let probe = inst.as_ref()?.cpu.as_ref()?;
                Some(((*id)?, probe, probe.read_ns()?))
            })
            .collect();
        if before.is_empty() {
            return;
        }
        std::thread::sleep(IDLE_WINDOW);
        let span = t0.elapsed().as_secs_f64();
        for (id, probe, was) in before {
            if let Some(now) = probe.read_ns() {
                let _ = store.record_idle_cpu(id, now.saturating_sub(was) as f64 / 1e9 / span * 100.0);
            }
        }
    }
    /// Stops instance `k` the polite way and stores how long its teardown took.
    fn teardown(&mut self, k: usize, ledger: &mut Ledger, store: &Store) {
        let Some(inst) = self.instances.get_mut(k).and_then(Option::take) else { return };
        let t0 = Instant::now();
        inst.shutdown(ledger);
        if let Some(id) = self.ids[k].take() {
            let _ = store.record_teardown(id, t0.elapsed().as_secs_f64() * 1e3);
        }
        if k == 0 {
            self.launch_id = None;
        }
    }
    /// Every instance is up.
    fn ready(&self) -> bool {
        self.instances.iter().all(Option::is_some)
    }
    /// Whether instance k's process (its agent, runtime or guest) has exited, waiting up to
    /// `within` for it: a death, told apart from a hang by the host's own word (wait(2)).
    fn exited(&mut self, k: usize, within: Duration) -> bool {
        let Some(child) = self.instances.get_mut(k).and_then(Option::as_mut).and_then(|i| i.child.as_mut())
        else {
            return false;
        };
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
    let together = match role {
        Role::Env(e) => l.worker.exp.envs[e].together,
        Role::Tester => false,
    };
    if together {
        // All at once, or (one failed) all again.
        if !slot.ready() && slot.gave_up.is_none() && !CANCEL.load(Ordering::SeqCst) {
            for k in 0..slot.instances.len() {
                slot.stop_one(k, ledger, l.worker.store);
            }
            let ks: Vec<usize> = (0..slot.instances.len()).collect();
            launch_together(l, role, &ks, slot, ledger);
        }
    } else {
        for k in 0..slot.instances.len() {
            if slot.instances[k].is_none() && slot.gave_up.is_none() && !CANCEL.load(Ordering::SeqCst) {
                launch_one(l, role, k, slot, ledger);
            }
        }
    }
    // Several instances: each one's memory again once all are up, so that their PSS divides the
    // pages they share among all of them (read as each came up, the first had them alone).
    if slot.instances.len() > 1 && slot.ready() {
        for (inst, id) in slot.instances.iter().zip(&slot.ids) {
            let (Some(inst), Some(id)) = (inst, id) else { continue };
            let mem = memory(inst);
            if mem.pss_kib.is_some() {
                let _ = l.worker.store.record_memory(*id, &mem);
            }
        }
    }
}

/// What an instance launches as.
struct Identity<'a> {
    kind: &'static dyn env::Environment,
    params: BTreeMap<String, serde_json::Value>,
    name: &'a str,
    /// Unique in the run: process, environment, instance and launch count.
    id: String,
    /// The environment's index; −1: the tester.
    e: i64,
}

/// What instance `k` of `role` launches as: its kind, parameters, name, instance id (unique in
/// the run: process, environment, instance and launch count) and environment index (−1: the
/// tester, whose only parameter is the lab's `tester_cpuset`). None for a kind this build does
/// not know.
fn identity<'a>(l: &'a Launcher, role: Role, k: usize, launches: u32) -> Option<Identity<'a>> {
    let pid = std::process::id();
    match role {
        Role::Env(e) => {
            let def = &l.worker.exp.envs[e];
            let kind = env::find(&def.kind)?;
            let id = if def.instances > 1 {
                format!("vp{pid}-{e}i{k}-{launches}")
            } else {
                format!("vp{pid}-{e}-{launches}")
            };
            Some(Identity { kind, params: def.params.clone(), name: def.name.as_str(), id, e: e as i64 })
        }
        Role::Tester => Some(Identity {
            kind: env::baseline(),
            params: (l.worker.exp.lab.tester_cpuset.iter())
                .map(|c| ("cpuset".to_string(), serde_json::Value::from(c.clone())))
                .collect(),
            name: "tester",
            id: format!("vp{pid}-{}-{launches}", l.tester_id),
            e: -1,
        }),
    }
}

/// What one launch is, decided before it starts (and, for a start of many at once, before any of
/// their threads does): who it is, where its network lives, where it runs.
struct Planned<'a> {
    k: usize,
    kind: &'static dyn env::Environment,
    params: BTreeMap<String, serde_json::Value>,
    name: &'a str,
    id: String,
    e: i64,
    netns: Option<PathBuf>,
    guest_net: Option<env::GuestNet>,
    remote_host: Option<&'a crate::experiment::HostDef>,
    /// An environment's (not the tester's): it gets a scratch directory where the run has one.
    is_env: bool,
}

/// What a launch's thread needs of its worker (the store stays with the worker: SQLite's
/// connection is one thread's).
#[derive(Clone, Copy)]
struct StartWith<'a> {
    exe: &'a Path,
    run_dir: &'a Path,
    boot_timeout: Duration,
    scratch_dir: Option<&'a Path>,
    exp: &'a Experiment,
}

/// A launch that came up: the instance, what it said as it came up, its phases and memory.
type Started = (Instance, Arrival, Lifecycle);

/// What an instance said as it came up: its clock against the host's, and the kernel its agent
/// runs on.
struct Arrival {
    clock: Option<env::ClockPoint>,
    kernel: Option<virtperf_record::store::KernelView>,
}

/// Decides launch `k` of `role` (its id counts the slot's launches); None for a kind this build
/// does not know. A later launch into the same lab endpoint finds it as the first did.
fn plan_launch<'a>(l: &'a Launcher, role: Role, k: usize, slot: &mut Slot) -> Option<Planned<'a>> {
    let Worker { exp, lab, .. } = *l.worker;
    let Identity { kind, params, name, id, e } = identity(l, role, k, slot.launches)?;
    let first_endpoint = l.first_endpoint;
    let mut netns = lab.map(|lab| match role {
        Role::Env(e) => lab.endpoints[first_endpoint[e] + k].netns_path(),
        Role::Tester => lab.tester.netns_path(),
    });
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
    slot.launches += 1;
    // An environment here with the tester on a host meets it over this machine's own network
    // (no lab): it joins this process's namespace, a container too.
    if remote_host.is_none() && lab.is_none() && tester_host_of(exp).is_some() && exp.has_network() {
        netns = Some(PathBuf::from(format!("/proc/{}/ns/net", std::process::id())));
    }
    if let (Role::Env(e), Some(l), true) = (role, lab, slot.launches > 1) {
        if let Err(why) = l.restore_endpoint(first_endpoint[e] + k) {
            eprintln!("virtperf: cannot restore the lab address of `{name}`: {why}");
        }
    }
    Some(Planned {
        k,
        kind,
        params,
        name,
        id,
        e,
        netns,
        guest_net,
        remote_host,
        is_env: matches!(role, Role::Env(_)),
    })
}

/// Starts a planned launch, recording into `ledger` what it creates: its scratch directory, the
/// instance, what a native agent may leave in directories the user named; then its first answer
/// (the cold start's last step) and its clock. Touches nothing shared but the ledger it is
/// given, so that many can start at once, a thread each.
fn start_planned(
    w: StartWith,
    p: &Planned,
    ledger: &mut Ledger,
    asked: Instant,
) -> Result<Started, env::LaunchError> {
    let StartWith { exe, run_dir, boot_timeout, scratch_dir, exp } = w;
    // A test's fault, where VIRTPERF_FAILPOINTS asks for one (`launch-start=2*off->1*return`:
    // the third launch to get here fails before it starts anything).
    fail::fail_point!("launch-start", |_| Err(env::LaunchError::Prepare(
        "the failpoint `launch-start` (a test's fault) stopped it".into()
    )));
    // The instance's scratch directory (environments only: the tester writes no files; one on
    // another host gets its directory there, from `remote-launch`).
    let sdir = match scratch_dir {
        Some(d) if p.is_env && p.remote_host.is_none() => {
            let sd = d.join(&p.id);
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
        instance_id: p.id.clone(),
        ledger,
        boot_timeout,
        cancel: &CANCEL,
        netns: p.netns.clone(),
        guest_net: p.guest_net.clone(),
        scratch_dir: sdir.clone(),
        bridge: None,
    };
    let launched = match p.remote_host {
        Some(h) => {
            let scratch = p.is_env && scratch_dir.is_some();
            crate::remote::launch(h, p.kind.kind(), &p.params, exp.has_network(), scratch, &mut ctx)
        }
        None => p.kind.launch(&mut ctx, &p.params),
    };
    let mut inst = match launched {
        Ok(inst) => inst,
        Err(err) => {
            if let Some(sd) = &sdir {
                ledger.remove_scratch_dir(sd);
            }
            return Err(err);
        }
    };
    if let Some(sd) = sdir {
        inst.cleanup.push(crate::ledger::Entry::ScratchDir { path: sd });
    }
    // Native agents write into directories the user named (`dir=`): what a killed agent
    // leaves there goes with the instance (and with a sweep after a crash).
    if p.kind.on_host_fs() && inst.agent_pid != 0 && p.remote_host.is_none() {
        for dir in user_disk_dirs(exp) {
            let prefix = format!("{}{}-", crate::ledger::DISK_FILE_PREFIX, inst.agent_pid);
            let e = crate::ledger::Entry::ScratchFiles { dir, prefix };
            ledger.record(e.clone());
            inst.cleanup.push(e);
        }
    }
    // The cold start's last step: the first request answered after the hello.
    let first = inst.first_answer(&CANCEL);
    let clock = inst.calibrate_rtt(&CANCEL);
    let kernel = inst.kernel_view(&CANCEL);
    inst.own_clock = p.kind.own_clock();
    let life = lifecycle(&inst, asked, first);
    Ok((inst, Arrival { clock, kernel }, life))
}

impl<'a> Launcher<'a> {
    fn start_with(&self) -> StartWith<'a> {
        let w = self.worker;
        StartWith {
            exe: w.exe,
            run_dir: w.run_dir,
            boot_timeout: w.opts.boot_timeout,
            scratch_dir: w.scratch_dir,
            exp: w.exp,
        }
    }
}

/// The host's CPU from `before` to now, ms (None where it has no counter).
fn host_cpu_since(before: Option<u64>) -> Option<f64> {
    before.zip(crate::host::cpu_busy_ns()).map(|(a, b)| b.saturating_sub(a) as f64 / 1e6)
}

fn launch_one(l: &Launcher, role: Role, k: usize, slot: &mut Slot, ledger: &mut Ledger) {
    let asked = Instant::now();
    let cpu0 = crate::host::cpu_busy_ns();
    let Some(p) = plan_launch(l, role, k, slot) else { return };
    let Worker { store, run_id, .. } = *l.worker;
    match start_planned(l.start_with(), &p, ledger, asked) {
        Ok((inst, arrival, mut life)) => {
            life.together = Some(1);
            life.host_cpu_ms = host_cpu_since(cpu0);
            slot.up(k, inst, arrival, life, store, run_id, p.e);
        }
        Err(err) => slot.failed(&err, store, run_id, p.e, p.name),
    }
}

/// Instances `ks` of environment `role` asked for all at once (`start = "together"`), a thread
/// each, every thread recording into its own part of the ledger (taken over by `ledger` as it
/// ends). Each instance is stored as it would be alone — its ready time from the moment all were
/// asked for — and the start as a whole (how many became ready, the makespan, the host's CPU
/// over it). Should any fail, those that came up are stopped again: the next attempt starts them
/// all together, as asked.
fn launch_together(l: &Launcher, role: Role, ks: &[usize], slot: &mut Slot, ledger: &mut Ledger) {
    let Worker { store, run_id, .. } = *l.worker;
    let plans: Vec<Planned> = ks.iter().filter_map(|&k| plan_launch(l, role, k, slot)).collect();
    let Some(first) = plans.first() else { return };
    let (e, name) = (first.e, first.name);
    let with = l.start_with();
    let cpu0 = crate::host::cpu_busy_ns();
    let asked = Instant::now();
    type Joined = std::thread::Result<(Result<Started, env::LaunchError>, Option<Ledger>)>;
    let results: Vec<Joined> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|p| {
                scope.spawn(move || match Ledger::open_part(&p.id) {
                    Ok(mut part) => {
                        let r = start_planned(with, p, &mut part, asked);
                        (r, Some(part))
                    }
                    Err(err) => (
                        Err(env::LaunchError::Prepare(format!(
                            "cannot open its part of the ledger in the state directory: {err}"
                        ))),
                        None,
                    ),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    // The host's CPU until every thread is back: the last ready, and its first round trips.
    let host_cpu = host_cpu_since(cpu0);
    let joined = asked.elapsed();
    let n = plans.len() as u32;
    let failures_before = slot.failures_in_a_row;
    let mut failed: Vec<String> = Vec::new();
    let mut up: Vec<usize> = Vec::new();
    // Asked for to the last hello (none came: until the last thread gave up).
    let mut makespan_ms: Option<f64> = None;
    for (p, r) in plans.iter().zip(results) {
        let (r, part) = r.unwrap_or_else(|panic| {
            let why = crate::host::panics::take_last(panic.as_ref());
            let msg = format!(
                "its start stopped at a bug (please report it): {}",
                virtperf_proto::printable(&why, 400)
            );
            (Err(env::LaunchError::Prepare(msg)), None)
        });
        // What a failed start left is undone now; a started instance's goes with it.
        match (&r, part) {
            (Ok(_), Some(part)) => ledger.absorb(part),
            (Err(_), Some(part)) => part.close(),
            (_, None) => {}
        }
        match r {
            Ok((inst, arrival, mut life)) => {
                life.together = Some(n);
                life.host_cpu_ms = host_cpu.map(|c| c / f64::from(n));
                let ready = life.prepare_ms.unwrap_or(0.0) + inst.start_time.as_secs_f64() * 1e3;
                makespan_ms = Some(makespan_ms.map_or(ready, |m: f64| m.max(ready)));
                slot.up(p.k, inst, arrival, life, store, run_id, e);
                up.push(p.k);
            }
            Err(err) => {
                let msg = format!("instance {} of {n} started together: {err}", p.k + 1);
                failed.push(msg.clone());
                slot.failed_as(msg, err.console(), store, run_id, e, name);
            }
        }
    }
    // One start, however many of it failed: counted once towards giving up.
    slot.failures_in_a_row = if failed.is_empty() { 0 } else { failures_before + 1 };
    if slot.failures_in_a_row < MAX_LAUNCH_FAILURES {
        slot.gave_up = None;
    }
    let _ = store.record_start_together(
        run_id,
        &virtperf_record::store::StartTogether {
            env_idx: e.max(0) as usize,
            block: Some(slot.block),
            asked: n,
            ready: up.len() as u32,
            makespan_ms: if failed.is_empty() {
                makespan_ms.unwrap_or(joined.as_secs_f64() * 1e3)
            } else {
                joined.as_secs_f64() * 1e3
            },
            host_cpu_ms: host_cpu,
            failed: (!failed.is_empty()).then(|| failed.join("\n")),
        },
    );
    if !failed.is_empty() {
        for k in up {
            slot.stop_one(k, ledger, store);
        }
    }
}

/// A launch's phases and its memory once ready and idle (after its first round trips), for its
/// record: what the host prepared before the runtime or VMM started, a guest's kernel boot up to
/// its init's first line, and the first request answered after the hello.
fn lifecycle(inst: &Instance, asked: Instant, first: Option<Duration>) -> Lifecycle {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = inst.phases;
    Lifecycle {
        prepare_ms: p.spawned.map(|s| ms(s.saturating_duration_since(asked))),
        boot_ms: p.spawned.zip(p.init).map(|(s, i)| ms(i.saturating_duration_since(s))),
        first_ms: first.map(ms),
        ..memory(inst)
    }
}

/// What an instance's host processes hold now (the memory figures of a [`Lifecycle`] alone).
fn memory(inst: &Instance) -> Lifecycle {
    let mem = inst.cpu.as_ref().and_then(env::footprint::footprint);
    Lifecycle {
        pss_kib: mem.map(|m| m.pss_kib),
        uss_kib: mem.map(|m| m.uss_kib),
        rss_kib: mem.map(|m| m.rss_kib),
        processes: mem.map(|m| m.processes),
        charged_kib: mem.and_then(|m| m.charged_kib),
        ..Lifecycle::default()
    }
}

impl Slot {
    /// Instance `k` is up: stored as a ready launch (its start time, phases, memory and round
    /// trip) with its clock as it came up (for [`Slot::close`]), the slot's failure count
    /// reset.
    #[allow(clippy::too_many_arguments)]
    fn up(
        &mut self,
        k: usize,
        inst: Instance,
        arrival: Arrival,
        lifecycle: Lifecycle,
        store: &Store,
        run_id: i64,
        e: i64,
    ) {
        let id = store.record_instance(
            run_id,
            &InstanceRecord {
                env_idx: e,
                block: Some(self.block),
                start_ms: Some(inst.start_time.as_secs_f64() * 1e3),
                rtt_us: Some(inst.rtt.as_secs_f64() * 1e6),
                rtt_jitter_us: Some(inst.rtt_jitter.as_secs_f64() * 1e6),
                status: LaunchStatus::Ready,
                lifecycle,
                kernel_view: arrival.kernel,
                ..Default::default()
            },
        );
        if k == 0 {
            self.launch_id = id.as_ref().ok().copied();
        }
        self.ids[k] = id.as_ref().ok().copied();
        self.clocks[k] = id.ok().zip(arrival.clock);
        self.failures_in_a_row = 0;
        self.instances[k] = Some(inst);
    }

    /// A launch failed: stored with its reason and console, and after
    /// [`MAX_LAUNCH_FAILURES`] in a row the environment is given up.
    fn failed(&mut self, err: &env::LaunchError, store: &Store, run_id: i64, e: i64, name: &str) {
        self.failed_as(err.to_string(), err.console(), store, run_id, e, name);
    }

    /// A launch failed, said as `msg` (e.g. naming which of several started together).
    fn failed_as(
        &mut self,
        msg: String,
        console: Option<String>,
        store: &Store,
        run_id: i64,
        e: i64,
        name: &str,
    ) {
        let _ = store.record_instance(
            run_id,
            &InstanceRecord {
                env_idx: e,
                block: Some(self.block),
                status: LaunchStatus::Failed,
                detail: Some(msg.clone()),
                console,
                ..Default::default()
            },
        );
        self.failures_in_a_row += 1;
        self.last_failure = Some(msg.clone());
        if self.failures_in_a_row >= MAX_LAUNCH_FAILURES {
            self.gave_up = Some(format!(
                "environment failed to start {MAX_LAUNCH_FAILURES} times in a row; last: {msg}"
            ));
        }
        if !CANCEL.load(Ordering::SeqCst) {
            eprintln!("virtperf: environment `{name}` failed to start: {msg}");
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
    /// The plan's own trials; beyond them, precision mode's additions.
    planned: u64,
    done: u64,
    started: Instant,
    last_line: Instant,
    /// Precision mode's budget: no further launch starts after it.
    budget_end: Option<Instant>,
}

impl Progress {
    fn new(total: u64, show: bool, budget_end: Option<Instant>) -> Progress {
        let bar = (std::io::stderr().is_terminal() && show).then(|| {
            let b = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} ETA {eta} {msg}",
            ) {
                b.set_style(style);
            }
            b
        });
        Progress {
            bar,
            total,
            planned: total,
            done: 0,
            started: Instant::now(),
            last_line: Instant::now(),
            budget_end,
        }
    }

    /// Past the plan, precision mode adds blocks one at a time: a total that grows with every
    /// block and an ETA of 0 say nothing; the budget's end does.
    fn in_precision(&self) -> bool {
        self.budget_end.is_some() && self.done > self.planned
    }

    /// Whether the trial just done gets a line (without a terminal): one every 5 s, and the
    /// plan's last trial. Precision mode's blocks each end at a new total, so "done == total"
    /// printed a line per block (134 of the default run's 182 lines).
    fn due(&self) -> bool {
        self.last_line.elapsed() >= Duration::from_secs(5) || self.done == self.planned
    }

    /// The line (or the bar's message) for the trial just done.
    fn line(&self, msg: &str) -> String {
        let el = self.started.elapsed().as_secs_f64();
        match self.budget_end.filter(|_| self.in_precision()) {
            Some(end) => format!(
                "{} trials ({} planned, {} added by precision mode), {el:.0}s elapsed, budget ends in {:.0}s ({msg})",
                self.done,
                self.planned,
                self.done - self.planned,
                end.saturating_duration_since(Instant::now()).as_secs_f64()
            ),
            None => {
                let eta = el / self.done.max(1) as f64 * self.total.saturating_sub(self.done) as f64;
                format!("{}/{} trials, {el:.0}s elapsed, ETA {eta:.0}s ({msg})", self.done, self.total)
            }
        }
    }

    fn tick(&mut self, msg: &str) {
        self.done += 1;
        let precision = self.in_precision();
        match &self.bar {
            Some(b) => {
                // The first trial past the plan: the bar drops its total and ETA (the budget decides).
                if precision && self.done == self.planned + 1 {
                    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}") {
                        b.set_style(style);
                    }
                }
                b.set_position(self.done);
                b.set_message(if precision { self.line(msg) } else { msg.to_string() });
            }
            None => {
                if self.due() {
                    self.last_line = Instant::now();
                    eprintln!("virtperf: {}", self.line(msg));
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
    let first_endpoint = first_endpoints(w.exp, share);
    let mut s = Session::new(w, share, &first_endpoint)?;
    s.launch_needed(ledger);
    let result = s.run_queue(ledger);
    s.stop(ledger);
    result?;
    Ok(s.interrupted)
}

/// Lab endpoint of each environment's instance 0: every instance of the share's environments has
/// its own, in order.
fn first_endpoints(exp: &Experiment, share: &Share) -> Vec<usize> {
    let mut first = vec![0usize; exp.envs.len()];
    let mut next = 0usize;
    for &e in &share.envs {
        first[e] = next;
        next += exp.envs[e].instances as usize;
    }
    first
}

/// Whether a case's trials need the lab's tester (a network workload, or load on the tester).
fn wants_tester(case: &crate::experiment::Case) -> bool {
    case.network || case.load.is_some_and(|l| l.on == crate::experiment::LoadOn::Tester)
}

/// One worker's session over its share: what it measures with (read-only) and the slots it
/// launches, relaunches per block and stops at the end.
struct Session<'a> {
    ctx: Ctx<'a>,
    slots: Vec<Slot>,
    tester_slot: Slot,
    /// Per-operation counts calibrated so far, by (environment, case).
    calibrations: BTreeMap<(usize, usize), virtperf_record::store::Calibration>,
    /// Cells (environment, peer, case) whose workload cannot run there, by the kind its agent
    /// gave ([`Fail::Cannot`]), with why: their later trials are skipped.
    cannot: BTreeMap<(usize, Option<usize>, usize), String>,
    /// The last trial failed because an instance's process died under it (not a hang, not the
    /// workload's error): why, so that [`Worker::run_trial`] runs it once more on a fresh one.
    died: Option<String>,
    freeze_warned: bool,
    interrupted: bool,
}

/// What a session's trials are run with.
struct Ctx<'a> {
    w: &'a Worker<'a>,
    share: &'a Share,
    launcher: Launcher<'a>,
    /// Each case's workload as the agents get it (before calibration).
    specs: Vec<WorkloadSpec>,
    timeout: Duration,
    tester_machine: &'a str,
    /// What warm-ups count (`explain = true`), else None.
    counting: Option<virtperf_proto::Counting>,
}

/// The environments a trial's idle neighbours were paused in, and how.
struct Paused {
    idle: usize,
    frozen: Vec<(String, Option<env::Pauser>, Option<u32>, env::PausedBy)>,
    how: Vec<&'static str>,
}

impl Paused {
    /// Resumes every instance the way it was paused.
    fn resume(&self) {
        for (id, p, pid, by) in &self.frozen {
            if let Err(why) = env::resume(*by, id, p.as_ref(), *pid) {
                eprintln!("virtperf: cannot resume {id}: {why}");
            }
        }
    }
}

/// The other end of a trial: another environment (all-pairs) or the lab's tester.
struct OtherEnd {
    role: Role,
    addr: String,
    name: String,
}

impl<'a> Session<'a> {
    fn new(w: &'a Worker<'a>, share: &'a Share, first_endpoint: &'a [usize]) -> Result<Session<'a>> {
        let exp = w.exp;
        let specs = exp
            .cases
            .iter()
            .map(|c| WorkloadSpec {
                kind: c.kind.clone(),
                params: c.params.clone(),
                net: None,
                scratch: None,
                count: None,
            })
            .collect();
        let tester_id = match &share.host {
            Some(h) => format!("tester-{h}"),
            None => "tester".into(),
        };
        // `explain`: warm-ups count their events; tracepoint ids only hold on this kernel (an
        // agent elsewhere compares the boot id and counts what it can read itself).
        let counting = exp.explain.then(|| virtperf_proto::Counting {
            boot_id: virtperf_workload::counts::boot_id().unwrap_or_default(),
            tracepoints: virtperf_workload::counts::host_tracepoint_ids().unwrap_or_default(),
            rusage_only: false,
        });
        Ok(Session {
            ctx: Ctx {
                w,
                share,
                launcher: Launcher { worker: w, first_endpoint, tester_id },
                specs,
                timeout: Duration::from_millis(exp.timeout_ms),
                tester_machine: exp.lab.tester_host.as_deref().unwrap_or(LOCAL_MACHINE),
                counting,
            },
            slots: exp.envs.iter().map(|e| Slot::new(e.instances)).collect(),
            tester_slot: Slot::new(1),
            calibrations: w.store.calibrations(w.run_id)?.into_iter().collect(),
            cannot: BTreeMap::new(),
            died: None,
            freeze_warned: false,
            interrupted: false,
        })
    }

    /// Launches the tester (when a trial needs it) and every environment with pending trials,
    /// each for the first block it has trials in.
    fn launch_needed(&mut self, ledger: &mut Ledger) {
        let Ctx { w, share, launcher, tester_machine, .. } = &self.ctx;
        let exp = w.exp;
        let pending = &share.trials;
        let tester_case = |c: &crate::experiment::Case| !c.matrix && wants_tester(c);
        // Precision mode may add any case of the share's environments.
        let needs_tester =
            pending.iter().any(|t| t.peer_idx.is_none() && tester_case(&exp.cases[t.case_idx]))
                || (exp.precision.is_some() && exp.cases.iter().any(tester_case));
        if needs_tester {
            let _hold = w.machines.hold([*tester_machine]);
            launch(launcher, Role::Tester, &mut self.tester_slot, ledger);
        }
        let needed: std::collections::BTreeSet<usize> =
            pending.iter().flat_map(|t| std::iter::once(t.env_idx).chain(t.peer_idx)).collect();
        for &e in &needed {
            if CANCEL.load(Ordering::SeqCst) {
                break;
            }
            self.slots[e].block =
                pending.iter().filter(|t| t.env_idx == e).map(|t| t.block).min().unwrap_or(0);
            let _hold = w.machines.hold([share.machine()]);
            launch(launcher, Role::Env(e), &mut self.slots[e], ledger);
        }
    }

    /// The plan's pending trials, then (precision mode) what the rule adds as it goes, until
    /// done, interrupted or out of budget.
    fn run_queue(&mut self, ledger: &mut Ledger) -> Result<()> {
        let w = self.ctx.w;
        let mut queue: std::collections::VecDeque<PlannedTrial> =
            self.ctx.share.trials.iter().cloned().collect();
        let budget_end = w.exp.precision.map(|p| w.started + Duration::from_millis(p.budget_ms));
        let mut added: std::collections::BTreeSet<i64> = Default::default();
        loop {
            if CANCEL.load(Ordering::SeqCst) {
                self.interrupted = true;
                return Ok(());
            }
            if budget_end.is_some_and(|end| Instant::now() >= end) {
                return self.budget_spent(&mut queue, &added);
            }
            let t = match queue.pop_front() {
                Some(t) => t,
                None if w.exp.precision.is_some() => match self.propose(added.len() as u64)? {
                    Some(more) => {
                        added.extend(more.iter().map(|t| t.id));
                        queue.extend(more);
                        continue;
                    }
                    None => return Ok(()),
                },
                None => return Ok(()),
            };
            if !self.run_trial(&t, ledger)? {
                self.interrupted = true;
                return Ok(());
            }
        }
    }

    /// The budget ended the run: the rule's proposals that did not start are withdrawn; planned
    /// trials left (the minimum) stay pending for `--resume`.
    fn budget_spent(
        &mut self,
        queue: &mut std::collections::VecDeque<PlannedTrial>,
        added: &std::collections::BTreeSet<i64>,
    ) -> Result<()> {
        let w = self.ctx.w;
        let withdrawn: Vec<i64> = queue.iter().map(|t| t.id).filter(|id| added.contains(id)).collect();
        w.store.drop_pending(&withdrawn)?;
        queue.retain(|t| !added.contains(&t.id));
        if let Ok(mut p) = w.progress.lock() {
            p.grow(-(withdrawn.len() as i64));
        }
        self.interrupted |= !queue.is_empty();
        if let Ok(mut o) = w.outcome.lock() {
            o.budget_spent = true;
            o.minimum_left += queue.len();
        }
        Ok(())
    }

    /// Precision mode's next unit (a launch or repetitions), planned and stored; None when every
    /// cell met its target (or cannot go on).
    fn propose(&self, added: u64) -> Result<Option<Vec<PlannedTrial>>> {
        let Ctx { w, share, .. } = &self.ctx;
        let exp = w.exp;
        let gone: std::collections::BTreeSet<usize> =
            (0..self.slots.len()).filter(|&i| self.slots[i].gave_up.is_some()).collect();
        let unit = if crate::precision::paired(exp) {
            // Paired: a block of the baseline and the environments whose ratios need one most per
            // second of what is left of the budget.
            let (cells, costs) = crate::precision::paired_cells(exp, w.store, w.run_id, &share.envs, &gone)?;
            let left = exp.precision.map_or(0.0, |p| {
                (w.started + Duration::from_millis(p.budget_ms))
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64()
            });
            match crate::precision::next_block(&cells, &costs, left).0 {
                Some(u) => u,
                None => return Ok(None),
            }
        } else {
            let cells = crate::precision::cells(exp, w.store, w.run_id, &share.envs, &gone)?;
            let Some(unit) = crate::precision::next_unit(exp, &cells) else { return Ok(None) };
            unit
        };
        let more = crate::precision::trials(exp, w.store, w.run_id, &unit, added)?;
        let more = w.store.extend_plan(w.run_id, &more)?;
        if let Ok(mut p) = w.progress.lock() {
            p.grow(more.len() as i64);
        }
        Ok(Some(more))
    }

    /// Runs one planned trial and stores its outcome; false when it was interrupted (it stays
    /// pending).
    fn run_trial(&mut self, t: &PlannedTrial, ledger: &mut Ledger) -> Result<bool> {
        let w = self.ctx.w;
        let exp = w.exp;
        let (e, peer) = (t.env_idx, t.peer_idx);
        // A new block runs on a new launch of its environment (`launches = L`).
        for x in std::iter::once(e).chain(peer) {
            if self.slots[x].block != t.block {
                let _hold = w.machines.hold([self.ctx.share.machine()]);
                self.slots[x].shutdown(ledger, w.store);
                self.slots[x].block = t.block;
                launch(&self.ctx.launcher, Role::Env(x), &mut self.slots[x], ledger);
            }
        }
        let case = &exp.cases[t.case_idx];
        let tester = peer.is_none() && wants_tester(case);
        // The machines this trial uses: its environments' and, with a tester, this one.
        let _hold = if tester {
            w.machines.hold([self.ctx.share.machine(), self.ctx.tester_machine])
        } else {
            w.machines.hold([self.ctx.share.machine()])
        };
        if peer.is_none() {
            self.equal_counts(t.case_idx);
        }
        let paused = self.pause_idle(e, peer);
        self.died = None;
        let mut outcome = self.outcome(t, tester, ledger);
        if let Some(why) = self.died.take().filter(|_| !CANCEL.load(Ordering::SeqCst)) {
            // An instance's process died under the trial (a guest kernel's crash, a runtime's):
            // the trial runs once more on a fresh launch, its first attempt kept beside it
            // (the report counts it), so that one crash does not cost its pair.
            eprintln!(
                "virtperf: `{}` in `{}`: an instance died under the trial ({why}); it runs once more on a fresh one",
                case.label, exp.envs[e].name
            );
            w.store.record_attempt(t.id, TrialStatus::Failed, &why).with_context(|| {
                format!("cannot store trial {}'s attempt in {}", t.id, w.opts.db.display())
            })?;
            outcome = self.outcome(t, tester, ledger);
            self.died = None;
        }
        paused.resume();
        let Some(mut outcome) = outcome else { return Ok(false) };
        if paused.idle > 0 {
            // Whether this trial's idle neighbours were paused, stored with it.
            let x = outcome.extra.get_or_insert_with(|| serde_json::json!({}));
            if let Some(o) = x.as_object_mut() {
                o.insert(
                    "idle_neighbours".into(),
                    serde_json::json!({"idle": paused.idle, "paused": paused.frozen.len(), "how": paused.how}),
                );
            }
        }
        w.store
            .record_trial(t.id, &outcome)
            .with_context(|| format!("cannot store trial {} in {}", t.id, w.opts.db.display()))?;
        // A test's fault outside any trial (`trial-stored=panic`): the run ends, torn down.
        fail::fail_point!("trial-stored");
        let pair = match peer {
            Some(p) => format!("{} → {}", exp.envs[e].name, exp.envs[p].name),
            None => exp.envs[e].name.clone(),
        };
        if let Ok(mut p) = w.progress.lock() {
            p.tick(&format!("{pair} / {}", case.label));
        }
        Ok(true)
    }

    /// Equal counts (`counts = "equal"`): before the first trial of a calibrated case, every
    /// environment of this share that is up calibrates it (the others paused, as for a trial),
    /// and all of them run the smallest count — the slowest environment's 0.2 s — so that a
    /// ratio compares the same work (gVisor's cost per system call grows with the count: 11.3,
    /// 12.7, 15.4 µs at 100, 1 000 and 10 000 calls measured). Each keeps its own count beside it
    /// (`own`). An environment calibrated later (up only later) takes the count already decided.
    fn equal_counts(&mut self, c: usize) {
        let exp = self.ctx.w.exp;
        if !exp.equal_counts || calibrated_param(&exp.cases[c]).is_none() {
            return;
        }
        let envs: Vec<usize> =
            self.ctx.share.envs.iter().copied().filter(|&e| self.slots[e].ready()).collect();
        let missing: Vec<usize> =
            envs.iter().copied().filter(|e| !self.calibrations.contains_key(&(*e, c))).collect();
        if missing.is_empty() {
            return;
        }
        let decided = self.calibrations.iter().filter(|((_, x), _)| *x == c).map(|(_, cal)| cal.count).min();
        let mut found = Vec::new();
        for e in missing {
            let paused = self.pause_idle(e, None);
            let spec = self.ctx.specs[c].clone();
            let r = self.ctx.calibrate_env(&mut self.slots[e], e, c, &spec);
            paused.resume();
            match r {
                Ok(cal) => found.push((e, cal)),
                // That environment calibrates on its own at its first trial (and fails it there
                // with the reason, if it still cannot).
                Err(_) => continue,
            }
        }
        let common = decided.or_else(|| found.iter().map(|(_, x)| x.count).min());
        for (e, mut cal) in found {
            if let Some(n) = common.filter(|n| *n != cal.count) {
                cal.own = Some(cal.count);
                cal.count = n;
            }
            if self.ctx.store_calibration(e, c, &cal).is_ok() {
                self.calibrations.insert((e, c), cal);
            }
        }
    }

    /// Pauses every instance of the environments not in the trial (`freeze_idle`): by the cgroup
    /// freezer, or by signals where no freezer can be written.
    fn pause_idle(&mut self, e: usize, peer: Option<usize>) -> Paused {
        let mut paused = Paused { idle: 0, frozen: Vec::new(), how: Vec::new() };
        if !self.ctx.w.exp.freeze_idle {
            return paused;
        }
        let others: Vec<(String, Option<env::Pauser>, Option<u32>)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != e && Some(*i) != peer)
            .flat_map(|(_, s)| {
                s.instances.iter().flatten().map(|i| {
                    let pid = i.child.as_ref().map(|c| c.id()).or((i.agent_pid > 0).then_some(i.agent_pid));
                    (i.id.clone(), i.pauser.clone(), pid)
                })
            })
            .collect();
        paused.idle = others.len();
        for (id, p, pid) in others {
            match env::pause(&id, p.as_ref(), pid) {
                Ok(by) => {
                    if !paused.how.contains(&by.words()) {
                        paused.how.push(by.words());
                    }
                    paused.frozen.push((id, p, pid, by));
                }
                Err(why) => {
                    if !self.freeze_warned {
                        eprintln!(
                            "virtperf: cannot pause an idle environment ({why}); it runs beside the trials"
                        );
                        self.freeze_warned = true;
                    }
                }
            }
        }
        paused
    }

    /// The trial's outcome: skipped or failed where an end of it is not up, else measured; None
    /// when it was interrupted.
    fn outcome(&mut self, t: &PlannedTrial, tester: bool, ledger: &mut Ledger) -> Option<TrialOutcome> {
        let Ctx { w, launcher, .. } = &self.ctx;
        let (exp, lab) = (w.exp, w.lab);
        let e = t.env_idx;
        let cell = (e, t.peer_idx, t.case_idx);
        if let Some(why) = self.cannot.get(&cell) {
            // Decided on the kind an earlier trial's agent gave, not on its words.
            return Some(TrialOutcome {
                status: TrialStatus::Skipped,
                reason: Some(format!("skipped after an earlier trial: {why}")),
                ..Default::default()
            });
        }
        let (slot, mut other, end) = match t.peer_idx {
            Some(p) => {
                let (a, b) = pair_mut(&mut self.slots, e, p);
                let addr =
                    lab.map(|l| l.endpoints[launcher.first_endpoint[p]].addr.to_string()).unwrap_or_default();
                let name = format!("environment `{}`", exp.envs[p].name);
                (a, Some(b), OtherEnd { role: Role::Env(p), addr, name })
            }
            None => {
                let addr = match lab {
                    Some(l) => l.tester.addr.to_string(),
                    None => path_addrs(exp, e).0.unwrap_or_default(),
                };
                let t = tester.then_some(&mut self.tester_slot);
                (
                    &mut self.slots[e],
                    t,
                    OtherEnd { role: Role::Tester, addr, name: "the lab's tester".into() },
                )
            }
        };
        // A relaunch (the instance died in an earlier trial) gets a warm-up of its own.
        let mut relaunched = false;
        if !slot.ready() && slot.gave_up.is_none() {
            relaunched = slot.launches > 0;
            launch(launcher, Role::Env(e), slot, ledger);
        }
        if let Some(o) = other.as_deref_mut() {
            if !o.ready() && o.gave_up.is_none() {
                launch(launcher, end.role, o, ledger);
            }
        }
        let other_missing = other.as_ref().is_some_and(|o| !o.ready());
        let other_gave_up = other.as_ref().and_then(|o| o.gave_up.clone());
        let not_run =
            |status, reason| Some(TrialOutcome { status, reason: Some(reason), ..Default::default() });
        if let Some(why) = &slot.gave_up {
            return not_run(TrialStatus::Skipped, why.clone());
        }
        if other_missing {
            if let Some(why) = other_gave_up {
                return not_run(TrialStatus::Skipped, format!("{}: {why}", end.name));
            }
        }
        if !slot.ready() || other_missing {
            if CANCEL.load(Ordering::SeqCst) {
                return None;
            }
            let reason = match (&slot.last_failure, slot.ready()) {
                (_, true) => format!("{} failed to start", end.name),
                (Some(m), false) => format!("the environment failed to start: {m}"),
                (None, false) => "the environment failed to start".into(),
            };
            return not_run(TrialStatus::Failed, reason);
        }
        let launch_id = slot.launch_id;
        match self.ctx.measure(&mut self.calibrations, slot, other.as_deref_mut(), t, end.addr, relaunched) {
            Ok(o) => Some(TrialOutcome { launch_id, ..o }),
            Err(Fail::Interrupted) => None,
            Err(Fail::Cannot { reason, kind }) => {
                if !CANCEL.load(Ordering::SeqCst) {
                    eprintln!(
                        "virtperf: `{}` in `{}`: {}; its other trials are skipped",
                        w.exp.cases[t.case_idx].label,
                        w.exp.envs[e].name,
                        kind.words()
                    );
                }
                self.cannot.insert(cell, reason.clone());
                not_run(TrialStatus::Failed, reason)
            }
            Err(Fail::Failed { mut reason, dut_broken, tester_broken }) => {
                // Only the instances that broke are relaunched; one whose process is gone died.
                if dut_broken.iter().any(|&k| slot.exited(k, Duration::from_millis(500))) {
                    if !reason.contains("exited") {
                        reason = format!("{reason} (its instance's process had exited)");
                    }
                    self.died = Some(reason.clone());
                }
                for k in dut_broken {
                    slot.kill(k, ledger);
                }
                if tester_broken {
                    if let Some(o) = other {
                        o.kill(0, ledger);
                    }
                }
                not_run(TrialStatus::Failed, reason)
            }
        }
    }

    /// Stops every instance: shut down after a whole run, killed after an interruption.
    fn stop(&mut self, ledger: &mut Ledger) {
        for slot in self.slots.iter_mut().chain(std::iter::once(&mut self.tester_slot)) {
            if self.interrupted {
                for inst in slot.instances.iter_mut().filter_map(Option::take) {
                    inst.kill(ledger);
                }
            } else {
                slot.shutdown(ledger, self.ctx.w.store);
            }
        }
    }
}

impl Ctx<'_> {
    /// Measures one trial on ready instances: the calibrated count, the trial itself (after an
    /// unstored one on a relaunched environment), and the lab's switch alive before and after.
    /// A service's offered loads are percentages of the baseline's capacity measured in this
    /// run: the median of its trials' so far (its first trial, run before the others' in each
    /// group, uses its own), given to the trial as `reference` — unless the experiment gives one.
    fn service_reference(&self, e: usize, c: usize, spec: &mut WorkloadSpec) {
        let case = &self.w.exp.cases[c];
        if case.params.contains_key("reference")
            || !virtperf_workload::find(&case.kind).is_some_and(|w| w.service())
        {
            return;
        }
        let Some(b) = crate::precision::baseline_of(self.w.exp, e) else { return };
        let metric = format!("{}_capacity", case.kind);
        let mut v = match self.w.store.values_of(self.w.run_id, b, c, &metric) {
            Ok(v) => v,
            Err(err) => {
                eprintln!(
                    "virtperf: cannot read {metric} of the baseline so far ({err}): the trial uses its own"
                );
                return;
            }
        };
        v.retain(|x| x.is_finite() && *x > 0.0);
        if v.is_empty() {
            return;
        }
        v.sort_by(f64::total_cmp);
        let median =
            if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
        spec.params.insert("reference".into(), serde_json::json!(median));
    }

    fn measure(
        &self,
        calibrations: &mut BTreeMap<(usize, usize), virtperf_record::store::Calibration>,
        slot: &mut Slot,
        other: Option<&mut Slot>,
        t: &PlannedTrial,
        other_addr: String,
        relaunched: bool,
    ) -> std::result::Result<TrialOutcome, Fail> {
        let (w, lab) = (self.w, self.w.lab);
        let (e, c) = (t.env_idx, t.case_idx);
        let case = &w.exp.cases[c];
        let mut spec = self.specs[c].clone();
        let mut work = self.calibrated(calibrations, slot, e, c, &mut spec)?;
        self.service_reference(e, c, &mut spec);
        if t.warmup {
            // A share of the trial's work, where the workload says how to scale it; the count
            // stored is the one it did.
            if let Some(wl) = virtperf_workload::find(&case.kind) {
                virtperf_workload::warmup_params(wl, &mut spec.params);
            }
            work = work.and_then(|_| calibrated_param(case).and_then(|p| spec.params.get(p)?.as_u64()));
        }
        // `explain`: the warm-up runs twice, and the second pass — warm, as the timed trials are
        // (a first run maps its buffers and grows its allocator's arenas: pde's faults fall
        // after it) — counts its events and is the warm-up stored. Never a timed trial: the
        // counters slow every system call.
        let count_pass = t.warmup && self.counting.is_some();
        let first = self.launcher.first_endpoint[e];
        let mut duts: Vec<Dut> = slot
            .instances
            .iter_mut()
            .flatten()
            .enumerate()
            .map(|(k, inst)| Dut {
                inst,
                addr: match lab {
                    Some(l) => Some(l.endpoints[first + k].addr.to_string()),
                    None => path_addrs(w.exp, e).1,
                },
            })
            .collect();
        let mut tester = other.and_then(|o| o.first()).map(|ti| Tester { inst: ti, addr: other_addr });
        if relaunched || count_pass {
            // Not stored: the first trial after a launch runs slower (cold caches, a guest still
            // settling), as the run's own warm-ups showed.
            let _ = trial::run(&mut duts, tester.as_mut(), case, &spec, self.timeout, &CANCEL);
        }
        if count_pass {
            spec.count = self.counting.clone();
        } else if self.counting.is_some()
            && !t.warmup
            && env::find(&w.exp.envs[e].kind).is_some_and(|k| k.is_baseline())
        {
            // The baseline's timed trials say their own faults (getrusage: two calls each side,
            // a microsecond natively): a warm-up's allocator state is not theirs — memcpy's
            // counted pass reused its buffers, its timed trials faulted them in afresh.
            spec.count = Some(virtperf_proto::Counting { rusage_only: true, ..Default::default() });
        }
        // The lab's switch, where it is a process: alive, or the trial fails; its CPU during the
        // trial is a row of its own (xenmon's dom0 line).
        let switch = w.switch_cpu.filter(|_| t.peer_idx.is_none() && wants_tester(case));
        let switch_down = || {
            let why = lab.and_then(Lab::switch_gone).or_else(|| {
                switch
                    .filter(|(_, pid)| !process_alive(*pid))
                    .map(|(_, pid)| format!("the driver domain (QEMU, pid {pid}) has exited"))
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
        let out = trial::run(&mut duts, tester.as_mut(), case, &spec, self.timeout, &CANCEL);
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
    }

    /// A per-operation workload's count, calibrated once per environment (the probes are warm-up;
    /// a resumed run reuses the stored one), set in `spec`; the count, where there is one.
    fn calibrated(
        &self,
        calibrations: &mut BTreeMap<(usize, usize), virtperf_record::store::Calibration>,
        slot: &mut Slot,
        e: usize,
        c: usize,
        spec: &mut WorkloadSpec,
    ) -> std::result::Result<Option<u64>, Fail> {
        let case = &self.w.exp.cases[c];
        let Some(param) = calibrated_param(case) else { return Ok(None) };
        if let std::collections::btree_map::Entry::Vacant(todo) = calibrations.entry((e, c)) {
            let found = self.calibrate_env(slot, e, c, spec)?;
            self.store_calibration(e, c, &found)?;
            todo.insert(found);
        }
        Ok(calibrations.get(&(e, c)).map(|cal| {
            spec.params.insert(param.to_string(), serde_json::json!(cal.count));
            cal.count
        }))
    }

    /// Calibrates case `c`'s count in environment `e` (its first instance) to the case's target
    /// time, within what its memory holds.
    fn calibrate_env(
        &self,
        slot: &mut Slot,
        e: usize,
        c: usize,
        spec: &WorkloadSpec,
    ) -> std::result::Result<virtperf_record::store::Calibration, Fail> {
        let (w, case) = (self.w, &self.w.exp.cases[c]);
        let Some(param) = calibrated_param(case) else {
            return Err(Fail::Failed {
                reason: "not a calibrated case".into(),
                dut_broken: Vec::new(),
                tester_broken: false,
            });
        };
        let Some(inst) = slot.instances[0].as_mut() else {
            return Err(Fail::Failed {
                reason: "no instance to calibrate on".into(),
                dut_broken: vec![0],
                tester_broken: false,
            });
        };
        let target = Duration::from_millis(
            case.params.get("target_time").and_then(serde_json::Value::as_u64).unwrap_or(200),
        );
        let cap = calibration_cap(w.exp, e, case, param);
        trial::calibrate(
            &mut Dut { inst, addr: None },
            spec,
            param,
            target,
            (cap.0, &cap.1),
            self.timeout,
            &CANCEL,
        )
    }

    fn store_calibration(
        &self,
        e: usize,
        c: usize,
        cal: &virtperf_record::store::Calibration,
    ) -> std::result::Result<(), Fail> {
        let w = self.w;
        w.store.record_calibration(w.run_id, e, c, cal).map_err(|err| Fail::Failed {
            reason: format!("cannot store the calibration: {err:#}"),
            dut_broken: Vec::new(),
            tester_broken: false,
        })
    }
}

/// The run's directory on the scratch disk, when a workload writes files or a guest has a disk.
fn make_scratch_dir(exp: &Experiment, ledger: &mut Ledger) -> std::result::Result<Option<PathBuf>, String> {
    if !needs_scratch(exp) {
        return Ok(None);
    }
    let root = crate::host::scratch_root();
    let d = root.join(format!("run-{}", std::process::id()));
    match crate::host::ensure_private_dir(&root).and_then(|()| ledger.create_scratch_dir(&d)) {
        Ok(()) => Ok(Some(d)),
        Err(e) => {
            ledger.remove_scratch_dir(&d);
            Err(format!(
                "cannot create the run's scratch directory {}: {e}; set VIRTPERF_SCRATCH to a directory on the disk to measure",
                d.display()
            ))
        }
    }
}

/// The lab joining this machine's share of environments (one endpoint per instance, a tap where
/// the kind wants one) to its tester, and the driver domain where it is the switch.
fn build_lab(
    exp: &Experiment,
    opts: &RunOpts,
    share: &Share,
    ledger: &mut Ledger,
    run_dir: &Path,
    exe: &Path,
) -> std::result::Result<(Lab, Option<Instance>), crate::lab::LabError> {
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
    let mut lab = Lab::build(ledger, &taps, &exp.lab, pairs, run_dir)?;
    // The driver domain is a guest: launched on the lab's taps once the lab stands.
    if exp.lab.switch != crate::lab::Switch::DriverDomain {
        return Ok((lab, None));
    }
    match launch_driver_domain(&lab, ledger, exp, opts, run_dir, exe) {
        Ok(d) => Ok((lab, Some(d))),
        Err(e) => {
            lab.teardown(ledger);
            Err(crate::lab::LabError::DriverDomain(e.to_string()))
        }
    }
}

/// Runs one worker per share: a campaign's hosts measure at once (each trial holding the machines
/// it uses, see [`Machines`]); a run on one machine runs on this thread. Whether any was
/// interrupted, or the first error.
fn run_workers(
    shares: &[Share],
    store: &Store,
    ledger: &mut Ledger,
    db: &Path,
    worker: &(dyn Fn(&Share, &Store, &mut Ledger) -> Result<bool> + Sync),
) -> Result<bool> {
    if shares.len() <= 1 {
        return shares.first().map_or(Ok(false), |s| worker(s, store, ledger));
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(i, share)| {
                scope.spawn(move || -> Result<bool> {
                    // Each worker has its own connection (SQLite serialises the writes) and its
                    // own ledger file (swept like any other when this process dies).
                    let store = Store::open_existing(db)?;
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
        for (h, share) in handles.into_iter().zip(shares) {
            match h.join() {
                Ok(Ok(i)) => interrupted |= i,
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(p) => {
                    first_err.get_or_insert(anyhow::anyhow!(
                        "the worker of host `{}` stopped at a bug (please report it): {}",
                        share.machine(),
                        virtperf_proto::printable(&crate::host::panics::take_last(p.as_ref()), 400)
                    ));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(interrupted),
        }
    })
}

/// Why a run stopped before its end, and how to go on: the trials stored are kept, `--resume`
/// runs the rest; a full disk (`full`, [`virtperf_record::store::is_disk_full`]) is named as such.
fn stopped_how(run_id: i64, db: &Path, full: bool) -> String {
    let fix = if full {
        format!(
            "free space on the full disk (the database's, or the state directory's: {}), then ",
            crate::ledger::state_dir().display()
        )
    } else {
        String::new()
    };
    format!(
        "run {run_id} stopped; the trials it stored in {} are kept: {fix}`virtperf run --resume {run_id} --db {}` runs the rest",
        db.display(),
        db.display()
    )
}

/// Runs the pending trials of run `run_id`; a run that cannot go on (its state directory or its
/// database failing, a worker's error) is left interrupted — what was stored stays — and the
/// error says how to resume.
fn execute(store: &Store, run_id: i64, exp: &Experiment, opts: &RunOpts) -> Result<ExitStatus> {
    store.keep_reserve(&opts.db);
    // A panic outside a trial (a trial's own are its failure: trial::run) unwinds through the
    // ledgers, which undo what they hold as they go (Ledger's Drop); the run is left interrupted.
    let ran =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute_inner(store, run_id, exp, opts)))
            .unwrap_or_else(|p| {
                Err(anyhow::anyhow!(
                    "virtperf stopped at a bug (please report it): {}",
                    virtperf_proto::printable(&crate::host::panics::take_last(p.as_ref()), 400)
                ))
            });
    ran.map_err(|e| {
        // On a full disk, with the space the store kept for it.
        let _ = store.mark_interrupted(run_id);
        let how = stopped_how(run_id, &opts.db, virtperf_record::store::is_disk_full(&e));
        e.context(how)
    })
}

/// Says how precision mode's budget ended the run, where it did.
fn say_budget(exp: &Experiment, run_id: i64, o: &Ended) {
    let Some(p) = exp.precision.filter(|_| o.budget_spent) else { return };
    let budget = humantime::format_duration(Duration::from_millis(p.budget_ms));
    if o.minimum_left > 0 {
        eprintln!(
            "virtperf: the budget ({budget}) ended with {} trial(s) of the minimum left: `virtperf run --resume {run_id}` runs them",
            o.minimum_left
        );
    } else {
        eprintln!(
            "virtperf: the budget ({budget}) ended the run; the report says which ratios met the ±{}% target",
            p.percent
        );
    }
}

fn execute_inner(store: &Store, run_id: i64, exp: &Experiment, opts: &RunOpts) -> Result<ExitStatus> {
    let started = Instant::now();
    let exe = std::env::current_exe().context("cannot find the virtperf binary to run as the agent")?;
    let (mut ledger, swept) = Ledger::open().with_context(|| {
        format!("cannot open the ledger in the state directory {}", crate::ledger::state_dir().display())
    })?;
    if !swept.is_empty() {
        eprintln!("virtperf: removed {} leftover(s) of an earlier run that was killed", swept.len());
    }
    let run_dir = ledger.state_dir().join(format!("run-{}", std::process::id()));
    ledger.create_dir(&run_dir).with_context(|| format!("cannot create {}", run_dir.display()))?;
    let scratch_dir = match make_scratch_dir(exp, &mut ledger) {
        Ok(d) => d,
        Err(why) => {
            ledger.remove_dir(&run_dir);
            ledger.close();
            store.set_run_status(run_id, RunStatus::Failed)?;
            eprintln!("error: {why}");
            return Ok(ExitStatus::Unavailable);
        }
    };

    let pending = store.pending_trials(run_id)?;
    let shares = shares(exp, &pending);
    // The lab joins this machine's environments to its tester; environments on other hosts meet
    // their tester over the hosts' own network.
    let (mut lab, mut domain) = (None, None);
    let local = shares.iter().find(|s| s.host.is_none() && exp.lab.tester_host.is_none());
    if let Some(share) = local.filter(|s| s.trials.iter().any(|t| exp.cases[t.case_idx].network)) {
        if !CANCEL.load(Ordering::SeqCst) {
            match build_lab(exp, opts, share, &mut ledger, &run_dir, &exe) {
                Ok((l, d)) => (lab, domain) = (Some(l), d),
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
    let budget_end = exp.precision.map(|p| started + Duration::from_millis(p.budget_ms));
    let progress = std::sync::Mutex::new(Progress::new(pending.len() as u64, opts.progress, budget_end));
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
    let ended = run_workers(&shares, store, &mut ledger, &opts.db, &worker);
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
        say_budget(exp, run_id, &o);
    }
    let rows = store.load(run_id)?;
    let rep = report::build(&rows)?;
    virtperf_report::export::write(&opts.outputs, &virtperf_report::export::RunData::new(&rows, &rep))?;
    Ok(match status {
        RunStatus::Interrupted => ExitStatus::Interrupted,
        _ if rep.trials.ok == 0 && (rep.trials.failed + rep.trials.skipped) > 0 => ExitStatus::Failure,
        _ => ExitStatus::Success,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_past_the_plan_says_the_budget_not_a_growing_total() {
        let mut p = Progress::new(3, false, Some(Instant::now() + Duration::from_secs(60)));
        p.last_line = Instant::now();
        p.done = 2;
        assert!(!p.due(), "within 5 s of the last line");
        p.done = 3;
        assert!(p.due(), "the plan's last trial gets its line");
        assert!(p.line("native / cpu").starts_with("3/3 trials"), "{}", p.line("x"));
        // Precision mode adds a block of 2 and runs it: done == total again, but no line.
        p.grow(2);
        p.done = 5;
        assert_eq!(p.total, 5);
        assert!(!p.due(), "a block's end is not a line of its own");
        let l = p.line("native / cpu");
        assert!(l.starts_with("5 trials (3 planned, 2 added by precision mode)"), "{l}");
        assert!(l.contains("budget ends in 60s") || l.contains("budget ends in 59s"), "{l}");
        assert!(!l.contains("ETA"), "{l}");
        // Without a budget the total and the ETA stay.
        let mut q = Progress::new(4, false, None);
        q.done = 2;
        assert!(q.line("x").starts_with("2/4 trials") && q.line("x").contains("ETA"));
    }
}
