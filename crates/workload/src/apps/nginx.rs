//! `nginx`: Debian's nginx serving one static file from the instance's scratch space, driven by
//! virtperf's HTTP client on the tester (docs/apps.md).
//!
//! The server runs as one process (`master_process off`, one worker's event loop): what a layer
//! costs one request, not how a host spreads workers over its CPUs. Its configuration, its file
//! and its logs are written into a directory of its own (`apps::server::Home`), every path nginx
//! would otherwise write under /var pointed there, so it needs nothing of the environment's file
//! system but its binary, its libraries and the password database it reads its user from.

use serde_json::json;
use virtperf_proto::Side;

use super::http::HttpGet;
use super::server::Home;
use super::{AppError, CONNECTIONS, DURATION, LOADS_PARAM, PHASE, RATE, REFERENCE};
use crate::params::{ParamError, ParamKind, ParamSpec, Params};
use crate::tools::find_program;
use crate::workload::{MetricSpec, Output, RunCtx, Workload};

pub struct Nginx;

const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "size",
        kind: ParamKind::Size { min: 1, max: 64 << 20 },
        default: Some("1KiB"),
        help: "the served file's size (each answer's body)",
    },
    ParamSpec {
        name: "keepalive",
        kind: ParamKind::Bool,
        default: Some("true"),
        help: "keep each connection for the next request (false: a connection per request, `Connection: close`)",
    },
    ParamSpec {
        name: "client",
        kind: ParamKind::Choice(&["virtperf", "wrk"]),
        default: Some("virtperf"),
        help: "who measures the capacity: virtperf's own client, or wrk (the reference, as users run it; the offered loads are always virtperf's open loop)",
    },
    CONNECTIONS,
    DURATION,
    LOADS_PARAM,
    REFERENCE,
    PHASE,
    RATE,
];

static METRICS: &[MetricSpec] = service_metrics!("nginx", "requests");

/// The file's name under the server's root.
const FILE: &str = "index.bin";

impl Workload for Nginx {
    fn kind(&self) -> &'static str {
        "nginx"
    }
    fn summary(&self) -> &'static str {
        "nginx serving one static file inside the environment, driven from the tester: capacity (closed loop) and latency at fixed offered loads (open loop)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        METRICS
    }
    fn family(&self) -> crate::workload::Family {
        crate::workload::Family::Service
    }
    fn programs(&self, _p: &Params) -> Vec<String> {
        // nginx started as root looks its user up (`nobody`, `nogroup`) even in one process.
        vec!["nginx".into(), "/etc/passwd".into(), "/etc/group".into()]
    }
    fn announces_ready(&self) -> bool {
        true
    }
    fn needs_peer(&self) -> bool {
        true
    }
    fn service(&self) -> bool {
        true
    }
    fn planned_ms(&self, p: &Params) -> Option<f64> {
        super::planned_ms(p)
    }
    fn conditional_metrics(&self) -> &'static [&'static str] {
        static C: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        C.get_or_init(|| super::conditional(METRICS))
    }
    fn check(&self, p: &Params) -> Result<(), ParamError> {
        find_program("nginx").map_err(|m| ParamError::new("kind", m.to_string()))?;
        if p.str("client")? == "wrk" {
            find_program("wrk").map_err(|m| ParamError::new("client", m.to_string()))?;
        }
        super::loads(p)?;
        Ok(())
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, crate::error::Error> {
        let role = ctx.net()?.clone();
        Ok(match (role.side, super::phase(p)) {
            (Side::Server, _) => serve(p, ctx, &role)?,
            (Side::Client, phase) => client(p, ctx, &role, phase)?,
        })
    }
}

/// nginx's configuration: one process, every file it writes in `home`, the file served from
/// `home/www`, connections kept as long as the client likes.
pub fn config(home: &std::path::Path, bind: &str, port: u16, keepalive: bool) -> String {
    let h = home.display();
    let keep =
        if keepalive { "keepalive_timeout 75s; keepalive_requests 1000000;" } else { "keepalive_timeout 0;" };
    // As root, nginx chowns its temporary directories to its user (`nobody` by default), which
    // a sandbox without CAP_CHOWN refuses (gVisor): its user is root, as the process already is.
    // SAFETY: geteuid has no preconditions.
    let user = if unsafe { libc::geteuid() } == 0 { "user root root;\n" } else { "" };
    format!(
        "{user}daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {h}/error.log info;\npid {h}/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  tcp_nodelay on;\n  {keep}\n\
         \x20 default_type application/octet-stream;\n\
         \x20 client_body_temp_path {h}/tmp/body;\n  proxy_temp_path {h}/tmp/proxy;\n  fastcgi_temp_path {h}/tmp/fastcgi;\n\
         \x20 uwsgi_temp_path {h}/tmp/uwsgi;\n  scgi_temp_path {h}/tmp/scgi;\n\
         \x20 server {{\n    listen {bind}:{port};\n    root {h}/www;\n  }}\n}}\n"
    )
}

fn serve(p: &Params, ctx: &RunCtx, role: &virtperf_proto::NetRole) -> Result<Output, AppError> {
    let size = p.u64("size")?;
    let keepalive = p.bool("keepalive");
    let home = Home::new("nginx", ctx.scratch())?;
    // The file's bytes are a pattern, not zeros: nothing on the path may shortcut them.
    let body: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    home.write(&format!("www/{FILE}"), &body)?;
    home.mkdir("tmp")?;
    let conf = home.write("nginx.conf", config(home.path(), &role.bind, role.port, keepalive).as_bytes())?;
    let prefix = format!("{}/", home.path().display());
    let args: Vec<String> = vec![
        "-p".into(),
        prefix,
        "-c".into(),
        conf.display().to_string(),
        "-e".into(),
        home.path().join("error.log").display().to_string(),
    ];
    // Ready once it answers a real request for the file, from its own address.
    let at = crate::net::addr(&role.bind, role.port)?;
    let get = HttpGet::new(crate::net::addr(&role.bind, 0)?, at, &format!("/{FILE}"), size, false);
    super::server::serve("nginx", &args, &home, "error.log", ctx, &at, || super::driver::once(&get))
}

fn client(p: &Params, ctx: &RunCtx, role: &virtperf_proto::NetRole, phase: &str) -> Result<Output, AppError> {
    let (from, to) = (crate::net::addr(&role.bind, 0)?, crate::net::addr(&role.peer, role.port)?);
    let get = HttpGet::new(from, to, &format!("/{FILE}"), p.u64("size")?, p.bool("keepalive"));
    if phase == "capacity" {
        super::warm_up(p, ctx, &get)?;
        if p.str("client")? == "wrk" {
            return wrk(p, ctx, &to);
        }
    }
    super::phase_output("nginx", p, ctx, &get, phase)
}

/// The capacity as wrk measures it, run on the tester as users run it: its threads one per CPU
/// the client may use (as virtperf's), its connections, its duration.
fn wrk(p: &Params, ctx: &RunCtx, to: &std::net::SocketAddr) -> Result<Output, AppError> {
    let connections = p.u64("connections")?;
    let threads = super::driver::threads_for(connections as usize);
    let secs = (p.ms_or("duration", 3000) as f64 / 1e3).max(1.0).round() as u64;
    let mut argv: Vec<String> = vec![
        "wrk".into(),
        format!("-t{threads}"),
        format!("-c{connections}"),
        format!("-d{secs}s"),
        "--timeout".into(),
        format!("{}s", super::driver::ANSWER_WITHIN.as_secs()),
    ];
    if !p.bool("keepalive") {
        argv.extend(["-H".into(), "Connection: close".into()]);
    }
    argv.push(format!("http://{to}/{FILE}"));
    let ran = crate::tools::run_tool(&argv, ctx, false)?;
    ran.check()?;
    let (rate, requests, errors) = wrk_figures(&ran.stdout).ok_or_else(|| {
        crate::tools::ToolError::NoFigure { prog: "wrk".into(), stdout: ran.stdout.clone() }
    })?;
    Ok(Output {
        samples: vec![
            crate::workload::sample("nginx_capacity", rate, "req/s"),
            crate::workload::sample("nginx_errors", errors as f64, "req"),
        ],
        extra: json!({ "phase": "capacity", "client": "wrk", "tally": { "requests": requests, "errors": errors }, "tool": ran.detail() }),
    })
}

/// wrk's requests per second, requests and failed requests (socket errors, non-2xx answers).
fn wrk_figures(out: &str) -> Option<(f64, u64, u64)> {
    let num = |line: &str, after: &str| -> Option<f64> {
        line.split(after).nth(1)?.split_whitespace().next()?.trim_end_matches(',').parse().ok()
    };
    let mut rate = None;
    let mut requests = None;
    let mut errors = 0u64;
    for l in out.lines().map(str::trim) {
        if l.starts_with("Requests/sec:") {
            rate = num(l, "Requests/sec:");
        } else if l.contains(" requests in ") {
            requests = l.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if l.starts_with("Socket errors:") {
            for k in ["connect", "read", "write", "timeout"] {
                errors += num(l, &format!("{k} ")).unwrap_or(0.0) as u64;
            }
        } else if l.starts_with("Non-2xx or 3xx responses:") {
            errors += num(l, "responses:").unwrap_or(0.0) as u64;
        }
    }
    Some((rate?, requests?, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_keeps_every_file_nginx_writes_in_its_home() {
        let c = config(std::path::Path::new("/s/virtperf-nginx-x"), "198.18.0.2", 5201, true);
        assert!(c.contains("listen 198.18.0.2:5201"), "{c}");
        for key in [
            "error_log",
            "pid",
            "client_body_temp_path",
            "proxy_temp_path",
            "fastcgi_temp_path",
            "uwsgi_temp_path",
            "scgi_temp_path",
            "root",
        ] {
            let line =
                c.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_else(|| panic!("{key} in {c}"));
            assert!(line.contains("/s/virtperf-nginx-x/"), "{line}");
        }
        assert!(c.contains("master_process off"));
        assert!(config(std::path::Path::new("/h"), "a", 1, false).contains("keepalive_timeout 0;"));
    }

    #[test]
    fn wrk_figures_are_read_from_its_report() {
        let out = "Running 3s test @ http://198.18.0.2:5201/index.bin\n  1 threads and 8 connections\n  \
            Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   128.54us  223.15us   6.95ms   98.72%\n  \
            207002 requests in 3.00s, 245.37MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\n  \
            Non-2xx or 3xx responses: 4\nRequests/sec:  68896.18\nTransfer/sec:     81.71MB\n";
        assert_eq!(wrk_figures(out), Some((68896.18, 207002, 7)));
        assert_eq!(wrk_figures("nothing"), None);
    }
}
