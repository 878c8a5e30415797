//! `virtperf doctor`: every environment kind, whether it is usable here, and the fix when not.
//! Unless `--quick`, each usable kind is really launched and its agent pinged: a runtime that is
//! installed but refuses this host (crun on hybrid cgroups, say) shows up here, not mid-run.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use virtperf_workload::{params, Raw};

use crate::env::{self, LaunchCtx};
use crate::ledger::Ledger;

#[derive(Debug, Serialize)]
pub struct Row {
    pub environment: String,
    pub usable: bool,
    pub detail: String,
    pub fix: Option<String>,
    pub probe_ms: Option<f64>,
    /// Usable once a one-time preparation (a kernel build) has run; not launched by doctor.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub needs_prepare: bool,
    /// The console (or stderr) tail of a test launch that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console: Option<String>,
}

/// The variants worth checking separately (a kind with each of its runtimes).
fn variants() -> Vec<(String, &'static str, BTreeMap<String, Raw>)> {
    let mut v = Vec::new();
    for k in env::REGISTRY {
        v.push((k.kind().to_string(), k.kind(), BTreeMap::new()));
        for (key, value) in k.doctor_variants() {
            v.push((
                format!("{}:{key}={value}", k.kind()),
                k.kind(),
                [(key.to_string(), Raw::Str(value.to_string()))].into(),
            ));
        }
    }
    v
}

pub fn check(probe: bool) -> Vec<Row> {
    let never = AtomicBool::new(false);
    let mut ledger = if probe { Ledger::open().ok().map(|l| l.0) } else { None };
    let exe = std::env::current_exe().ok();
    let mut rows = Vec::new();
    for (label, kind, raw) in variants() {
        let Some(k) = env::find(kind) else { continue };
        let params: BTreeMap<String, Value> = match params::resolve(k.params(), &raw) {
            Ok(p) => p,
            Err(e) => {
                rows.push(Row {
                    environment: label,
                    usable: false,
                    detail: e.to_string(),
                    fix: Some("a bug in virtperf's default parameters: please report it".into()),
                    probe_ms: None,
                    needs_prepare: false,
                    console: None,
                });
                continue;
            }
        };
        let a = k.availability(&params);
        let mut row = Row {
            environment: label.clone(),
            usable: a.usable,
            detail: a.detail,
            fix: a.fix,
            probe_ms: None,
            needs_prepare: a.needs_prepare,
            console: None,
        };
        let launchable = a.usable && !a.needs_prepare;
        if let (true, true, Some(ledger), Some(exe)) = (probe, launchable, ledger.as_mut(), exe.as_deref()) {
            let run_dir = ledger.state_dir().join(format!("doctor-{}", std::process::id()));
            if ledger.create_dir(&run_dir).is_ok() {
                let mut ctx = LaunchCtx {
                    exe,
                    run_dir: &run_dir,
                    instance_id: format!("vpdoctor{}-{}", std::process::id(), rows.len()),
                    ledger,
                    boot_timeout: Duration::from_secs(30),
                    cancel: &never,
                    netns: None,
                    guest_net: None,
                    scratch_dir: None,
                    bridge: None,
                };
                let t0 = Instant::now();
                match k.launch(&mut ctx, &params) {
                    Ok(mut inst) => {
                        let ping =
                            inst.conn.call(virtperf_proto::Request::Ping, Duration::from_secs(5), &never);
                        row.probe_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                        if let Err(e) = ping {
                            row.usable = false;
                            row.detail = format!("launched but the agent did not answer a ping: {e}");
                            row.fix =
                                Some(format!("leave {label} out of the experiment (its agent hangs here)"));
                        }
                        inst.shutdown(ledger);
                    }
                    Err(e) => {
                        row.usable = false;
                        row.detail = format!(
                            "installed, but a test launch failed: {}",
                            crate::host::command::one_line(&e.to_string())
                        );
                        row.console = e.console();
                        row.fix = Some(if label.contains("crun") {
                            "use runtime=runc (the default)".into()
                        } else {
                            format!(
                                "leave {label} out of the experiment; `virtperf doctor --json` has the test launch's console tail"
                            )
                        });
                    }
                }
                ledger.remove_dir(&run_dir);
            }
        }
        rows.push(row);
    }
    if let Some(l) = ledger {
        l.close();
    }
    rows
}

/// Where `pfs`'s file-system servers (GlusterFS) run, per kind, with what they need or why not.
fn file_servers(width: usize) -> String {
    let gluster = virtperf_workload::tools::find_program("glusterd")
        .and_then(|_| virtperf_workload::tools::find_program("glusterfs"));
    let mut out =
        format!("{:<26} {}\n", "pfs servers (GlusterFS)", if gluster.is_ok() { "see below" } else { "NO" });
    if let Err(why) = gluster {
        return out + &indented(&format!("{why} (and glusterfs-client for the tester's mount)"), 4, width);
    }
    for k in env::REGISTRY {
        let (kind, (params, how)) = (k.kind(), k.file_server_params());
        let line = match k.serves_files(&params) {
            Ok(()) => format!("{kind}: yes{how}"),
            Err(why) => format!("{kind}: no — {why}"),
        };
        out += &indented(&line, 4, width);
    }
    out
}

/// `text` wrapped to `width` columns, every line indented by `indent` spaces.
fn indented(text: &str, indent: usize, width: usize) -> String {
    let pad = " ".repeat(indent);
    virtperf_report::report::wrap(text, width - indent).lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// Doctor's answer in at most 100 columns: one block per environment kind — its name and
/// whether it is usable on the first line, the detail and the fix wrapped under it.
pub fn render(rows: &[Row]) -> String {
    let width = virtperf_report::report::SUMMARY_WIDTH as usize;
    let mut blocks = String::new();
    for r in rows {
        let usable = match (r.usable, r.probe_ms) {
            (true, Some(ms)) => format!("yes (agent ready + ping in {ms:.0} ms)"),
            (true, None) if r.needs_prepare => "yes, after a one-time build".into(),
            (true, None) => "yes".into(),
            (false, _) => "NO".into(),
        };
        let head = format!("{:<26} {usable}", r.environment);
        blocks += &if head.chars().count() <= width {
            head + "\n"
        } else {
            virtperf_report::report::wrap(&head, width)
        };
        if !r.detail.is_empty() {
            blocks += &indented(&r.detail, 4, width);
        }
        if let Some(fix) = r.fix.as_deref().filter(|f| !f.is_empty()) {
            blocks += &indented(&format!("fix: {fix}"), 4, width);
        }
    }
    blocks += &file_servers(width);
    let mut out = String::new();
    let f = crate::host::facts();
    if !f.measured() {
        out += &virtperf_report::report::wrap(
            &format!(
                "host facts from {} (not this machine's; nothing launched): {}",
                f.profile.as_deref().unwrap_or(&f.source),
                f.brief()
            ),
            width,
        );
    }
    out += &blocks;
    out += "\n";
    out += &virtperf_report::report::wrap(
        &format!("state directory (ledger, scratch): {}", crate::ledger::state_dir().display()),
        width,
    );
    if crate::host::facts().kvm.pvm {
        out += &virtperf_report::report::wrap(
            "note: /dev/kvm here is PVM (kvm_pvm): it runs only PVM-enabled guest kernels; QEMU guests will use TCG",
            width,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_fits_100_columns_whatever_the_detail() {
        let rows = vec![
            Row {
                environment: "qemu:accel=kvm".into(),
                usable: false,
                detail: "word ".repeat(80),
                fix: Some("apt-get install something-with-a-long-name ".repeat(5)),
                probe_ms: None,
                needs_prepare: false,
                console: None,
            },
            Row {
                environment: "native".into(),
                usable: true,
                detail: "the host itself".into(),
                fix: None,
                probe_ms: Some(12.0),
                needs_prepare: false,
                console: None,
            },
        ];
        let text = render(&rows);
        for l in text.lines() {
            assert!(l.chars().count() <= 100, "{} columns: {l}", l.chars().count());
        }
        assert!(text.contains("qemu:accel=kvm") && text.contains("    fix: apt-get install"), "{text}");
        assert!(text.contains("native                     yes (agent ready + ping in 12 ms)"), "{text}");
    }
}
