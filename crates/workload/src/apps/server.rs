//! A server process inside the environment: its own directory (configuration, data, logs,
//! pid file) in the instance's scratch space, started as the agent's child (killed with it:
//! `PR_SET_PDEATHSIG`), ready once its port answers the kind's own probe, stopped and its
//! directory removed when the run ends — however it ends (`Drop`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::AppError;
use crate::tools::{die_with_parent, find_program, writable_tmp, ToolError};
use crate::workload::RunCtx;

/// The most of a server's stderr and error log kept with the trial.
const KEEP_LOG: usize = 4 << 10;

/// How long a server is given to answer its first probe (a TCG guest starts nginx in ~1 s).
pub const READY_WITHIN: Duration = Duration::from_secs(30);

/// The server's directory: made fresh in the environment's writable temporary directory (the
/// scratch disk where there is one), removed on drop.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    pub fn new(prog: &str, scratch: Option<&str>) -> Result<Home, ToolError> {
        // The scratch disk first: it is the instance's own, and sized for data.
        let base = scratch
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .or_else(|| writable_tmp(scratch))
            .ok_or_else(|| ToolError::NoTmp(prog.to_string()))?;
        let dir = tempfile::Builder::new().prefix(&format!("virtperf-{prog}-")).tempdir_in(&base).map_err(
            |source| ToolError::Start {
                prog: format!("{prog} (its directory in {})", base.display()),
                source,
            },
        )?;
        Ok(Home { dir })
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// Writes `text` to `name` inside the directory.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, crate::error::OsError> {
        let p = self.dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| crate::error::OsError::new(format!("mkdir {}", parent.display()), e))?;
        }
        std::fs::write(&p, bytes)
            .map_err(|e| crate::error::OsError::new(format!("write {}", p.display()), e))?;
        Ok(p)
    }
    pub fn mkdir(&self, name: &str) -> Result<PathBuf, crate::error::OsError> {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p)
            .map_err(|e| crate::error::OsError::new(format!("mkdir {}", p.display()), e))?;
        Ok(p)
    }
}

/// A running server.
pub struct Server {
    prog: String,
    child: Child,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    started: Instant,
    ready_after: Option<Duration>,
    /// Reaped already (stopped, or seen to exit).
    reaped: bool,
}

impl Drop for Server {
    /// A run that ends early (an error, a panic unwinding) still leaves no server behind.
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// Starts `prog` with `args` in `home`, stdout discarded, stderr kept (its tail, bounded).
    pub fn start(prog: &str, args: &[String], home: &Home) -> Result<Server, AppError> {
        let path = find_program(prog)?;
        let mut cmd = Command::new(&path);
        cmd.args(args)
            .current_dir(home.path())
            .env("TMPDIR", home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| ToolError::Start { prog: path.clone(), source })?;
        let mut err = child.stderr.take().ok_or_else(|| ToolError::Start {
            prog: path.clone(),
            source: std::io::Error::other("no stderr pipe"),
        })?;
        // Drained on its own thread, bounded: a chatty server never blocks on its pipe.
        let stderr = std::thread::spawn(move || {
            let mut keep = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                keep.extend_from_slice(&buf[..n]);
                if keep.len() > 2 * KEEP_LOG {
                    keep.drain(..keep.len() - KEEP_LOG);
                }
            }
            keep
        });
        Ok(Server {
            prog: prog.to_string(),
            child,
            stderr: Some(stderr),
            started: Instant::now(),
            ready_after: None,
            reaped: false,
        })
    }

    /// Waits until `probe` succeeds (the kind's own request), the server exits, or
    /// [`READY_WITHIN`] passes.
    pub fn wait_ready(
        &mut self,
        addr: &str,
        ctx: &RunCtx,
        mut probe: impl FnMut() -> Result<(), String>,
    ) -> Result<Duration, AppError> {
        let t0 = Instant::now();
        let mut last;
        loop {
            if let Some(how) = self.exited() {
                return Err(self.died(how));
            }
            match probe() {
                Ok(()) => {
                    let d = self.started.elapsed();
                    self.ready_after = Some(d);
                    return Ok(d);
                }
                Err(e) => last = e,
            }
            if t0.elapsed() > READY_WITHIN || ctx.stopped() {
                return Err(AppError::NotReady {
                    prog: self.prog.clone(),
                    addr: addr.to_string(),
                    secs: READY_WITHIN.as_secs(),
                    detail: last,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Serves until the host asks the run to stop; a server that exits meanwhile fails the run.
    pub fn serve_until_stopped(&mut self, ctx: &RunCtx) -> Result<(), AppError> {
        while !ctx.stopped() {
            if let Some(how) = self.exited() {
                return Err(self.died(how));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => {
                self.reaped = true;
                Some(st.code().map_or("a signal".to_string(), |c| format!("status {c}")))
            }
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait for it: {e}")),
        }
    }

    fn died(&mut self, how: String) -> AppError {
        let stderr = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        AppError::Died { prog: self.prog.clone(), how, stderr: tail(&stderr).trim().to_string() }
    }

    /// Stops the server (SIGTERM, then SIGKILL after 2 s) and says what it left: its exit, its
    /// stderr's tail, `log`'s tail (the server's own error log, in its home), its CPU time as its
    /// kernel counted it (`wait4`'s rusage: the guest's view).
    pub fn stop(mut self, log: Option<&Path>) -> Value {
        let pid = self.child.id() as libc::pid_t;
        if !self.reaped {
            // SAFETY: kill(2) on our own child's pid, which we have not reaped yet (wait4 below
            // reaps it), so the pid cannot name another process.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let t0 = Instant::now();
        // SAFETY: rusage is plain data; zeroed is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let mut status = 0;
        let mut reaped = false;
        while !self.reaped && t0.elapsed() < Duration::from_secs(2) {
            // SAFETY: wait4 on our own child with WNOHANG, into values we own.
            let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
            if r == pid || r < 0 {
                reaped = r == pid;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !reaped && !self.reaped {
            // SAFETY: as above; the child is not reaped yet, so its pid is still ours.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above, blocking: the child is being killed.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
            reaped = r == pid;
        }
        self.reaped = true;
        let stderr = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        let ms = |tv: libc::timeval| tv.tv_sec as f64 * 1e3 + tv.tv_usec as f64 / 1e3;
        let log_tail = log.and_then(|p| std::fs::read(p).ok()).map(|b| tail(&b));
        json!({
            "program": self.prog,
            "ready_ms": self.ready_after.map(|d| d.as_secs_f64() * 1e3),
            "cpu_ms": reaped.then(|| ms(ru.ru_utime) + ms(ru.ru_stime)),
            "stderr": tail(&stderr),
            "log": log_tail,
        })
    }
}

/// A server's whole run: started in `home`, ready once `probe` succeeds against `at` (the host
/// told only then), serving until the host says stop, stopped; its exit, CPU and the tails of its
/// stderr and of `log` (a file in `home`) kept as the run's detail.
pub fn serve(
    prog: &str,
    args: &[String],
    home: &Home,
    log: &str,
    ctx: &RunCtx,
    at: &std::net::SocketAddr,
    probe: impl FnMut() -> Result<(), String>,
) -> Result<crate::workload::Output, AppError> {
    let log = home.path().join(log);
    let mut server = Server::start(prog, args, home)?;
    if let Err(e) = server.wait_ready(&at.to_string(), ctx, probe) {
        let left = server.stop(Some(&log));
        return Err(with_log(e, &left));
    }
    ctx.ready();
    let served = server.serve_until_stopped(ctx);
    let detail = server.stop(Some(&log));
    served?;
    Ok(crate::workload::Output { samples: Vec::new(), extra: json!({ "server": detail }) })
}

/// A server's failure with the end of its error log and stderr, where it wrote any.
fn with_log(e: AppError, left: &serde_json::Value) -> AppError {
    let log: String = ["log", "stderr"]
        .iter()
        .filter_map(|k| left[*k].as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match e {
        AppError::NotReady { prog, addr, secs, detail } if !log.is_empty() => {
            let tail: String = log.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
            AppError::NotReady { prog, addr, secs, detail: format!("{detail}; its log ends: {tail}") }
        }
        e => e,
    }
}

fn tail(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let cut = s.len().saturating_sub(KEEP_LOG);
    let cut = (cut..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len());
    s[cut..].to_string()
}
