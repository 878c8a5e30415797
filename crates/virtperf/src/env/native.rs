//! `native`: the reference. The agent is a plain child process of the orchestrator.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use virtperf_workload::{ParamError, ParamKind, ParamSpec};

use super::cgroup::CpuProbe;
use super::conn::Conn;
use super::launch::{spawn_piped, Availability, Environment, Instance, LaunchCtx, LaunchError, Teardown};
use crate::ledger::Ledger;

pub struct Native;

/// A program run as native's agent in place of this virtperf: another build of virtperf, or the
/// tests' hostile agent (crates/virtperf/tests/e2e/hostile_agent.py), which plays a well-formed but
/// hostile peer. Recorded in the manifest and said before the numbers.
pub const AGENT_VAR: &str = "VIRTPERF_NATIVE_AGENT";

fn replaced_agent() -> Option<std::path::PathBuf> {
    std::env::var_os(AGENT_VAR).filter(|v| !v.is_empty()).map(std::path::PathBuf::from)
}

const PARAMS: &[ParamSpec] = &[ParamSpec {
    name: "cpuset",
    kind: ParamKind::Text,
    default: None,
    help: "pin the agent to these CPUs (taskset list, e.g. 0 or 0-1, or last: the host's last CPU)",
}];

/// Removes the accounting cgroup (the agent is gone by then: rmdir of an empty cgroup) and the
/// agent's temporary directory.
struct NativeTeardown {
    cgroup: Option<String>,
    tmp: Option<std::path::PathBuf>,
}
impl Teardown for NativeTeardown {
    fn teardown(&mut self, ledger: &mut Ledger) {
        if let Some(d) = self.tmp.take() {
            ledger.remove_dir(&d);
        }
        if let Some(rel) = self.cgroup.take() {
            let e = crate::ledger::Entry::Cgroup { rel };
            // The process must have left the cgroup before it can be removed.
            for _ in 0..50 {
                crate::ledger::undo(&e, ledger.state_dir());
                if !crate::host::cgroup_mounts().iter().any(|m| m.join(ledger_rel(&e)).exists()) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            ledger.forget(&e);
        }
    }
}

fn ledger_rel(e: &crate::ledger::Entry) -> &str {
    match e {
        crate::ledger::Entry::Cgroup { rel } => rel,
        _ => "",
    }
}

impl Environment for Native {
    fn uses_host_network(&self) -> bool {
        true
    }
    fn is_baseline(&self) -> bool {
        true
    }
    fn serves_files(&self, _params: &BTreeMap<String, Value>) -> Result<(), String> {
        Ok(())
    }
    fn on_host_fs(&self) -> bool {
        true
    }
    fn kind(&self) -> &'static str {
        "native"
    }
    fn agent_replaced(&self) -> Option<String> {
        replaced_agent().map(|p| p.display().to_string())
    }
    fn summary(&self) -> &'static str {
        "the reference: the agent as a plain child process of virtperf"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn check(&self, params: &BTreeMap<String, Value>) -> Result<(), ParamError> {
        if let Some(s) = params.get("cpuset").and_then(Value::as_str) {
            crate::host::check_cpuset(s).map_err(|e| ParamError::new("cpuset", e))?;
        }
        Ok(())
    }
    fn availability(&self, _params: &BTreeMap<String, Value>) -> Availability {
        Availability::yes("always available")
    }
    fn scratch(&self, _params: &BTreeMap<String, Value>) -> Result<String, ParamError> {
        Ok(format!("a directory of {}", super::scratch::root_description()))
    }
    fn launch(&self, ctx: &mut LaunchCtx, params: &BTreeMap<String, Value>) -> Result<Instance, LaunchError> {
        let agent = replaced_agent();
        let mut cmd = Command::new(agent.as_deref().unwrap_or(ctx.exe));
        cmd.arg("agent");
        if let Some(set) = params.get("cpuset").and_then(Value::as_str) {
            let cpus = crate::host::check_cpuset(set).map_err(LaunchError::Prepare)?;
            crate::host::pin_on_spawn(&mut cmd, cpus);
        }
        // The agent's TMPDIR: a directory of this run's, recorded before it is made and removed
        // with the instance (or by the next start's sweep), so that what the tools and commands
        // it runs write there is never left on the host.
        let tmp = ctx.run_dir.join(format!("native-{}", ctx.instance_id));
        ctx.ledger.create_dir(&tmp).map_err(|e| LaunchError::Prepare(format!("{}: {e}", tmp.display())))?;
        cmd.env("TMPDIR", &tmp);
        let mut started = Instant::now();
        let spawned = super::launch::join_netns_on_spawn(&mut cmd, ctx.netns.as_deref()).and_then(|netns| {
            started = Instant::now();
            let spawned = spawn_piped(&mut cmd, "native agent", ctx.ledger, true);
            drop(netns);
            spawned
        });
        // Not spawned: the directory goes now (once spawned, the teardown removes it).
        let (child, stdin, stdout, tail) = match spawned {
            Ok(x) => x,
            Err(e) => {
                ctx.ledger.remove_dir(&tmp);
                return Err(e);
            }
        };
        let conn = Conn::new(stdout, Box::new(super::conn::DeadlineWriter::new(stdin)), tail);
        let cg = super::cgroup::join_accounting_cgroup(ctx.ledger, &ctx.instance_id, child.id());
        let scratch = ctx.scratch_dir.as_ref().map(|d| super::launch::Scratch {
            dir: d.to_string_lossy().into_owned(),
            what: format!("a directory of the host's {} ({})", super::scratch::host_fs(d), d.display()),
        });
        let inst = Instance {
            scratch,
            cleanup: Vec::new(),
            cpu: Some(cg.clone().unwrap_or(CpuProbe::Proc(child.id()))),
            agent_pid: child.id(),
            child: Some(child),
            start_time: Default::default(),
            phases: Default::default(),
            rtt: Default::default(),
            rtt_jitter: Default::default(),
            go_floor: None,
            id: String::new(),
            own_clock: false,
            teardown: Box::new(NativeTeardown {
                cgroup: cg.map(|_| format!("virtperf/{}", ctx.instance_id)),
                tmp: Some(tmp),
            }),
            conn,
            pauser: None,
            inner_addr: None,
        };
        inst.await_hello(ctx, started)
    }
}
