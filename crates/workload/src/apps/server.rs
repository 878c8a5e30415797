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
use crate::tools::{find_program, writable_tmp, ToolError};
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

/// Who a server runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAs {
    /// As the agent runs (root in most environments).
    Agent,
    /// As uid and gid [`UNPRIVILEGED`] in a user namespace of its own, the agent's uid and gid
    /// mapped to it: a server that refuses to run as root (PostgreSQL) owns every file the agent
    /// made for it — no `chown`, which gVisor and a container without capabilities refuse — and
    /// holds no capability outside its namespace. Mapping root needs CAP_SETFCAP (Linux 5.12+).
    Unprivileged,
}

/// The uid and gid an [`RunAs::Unprivileged`] server has inside its user namespace: `nobody` and
/// `nogroup`, which every Debian's password database names (initdb looks its user's name up).
pub const UNPRIVILEGED: u32 = 65534;

/// How a server is started and stopped.
#[derive(Debug, Clone, Copy)]
pub struct How {
    pub run_as: RunAs,
    /// The signal that asks it to stop (SIGTERM; PostgreSQL's fast shutdown is SIGINT).
    pub stop: i32,
    /// The signal it gets when the agent's thread that started it ends (PR_SET_PDEATHSIG).
    pub on_death: i32,
    /// Variables set in its environment.
    pub env: &'static [(&'static str, &'static str)],
}

impl Default for How {
    fn default() -> How {
        How { run_as: RunAs::Agent, stop: libc::SIGTERM, on_death: libc::SIGKILL, env: &[] }
    }
}

/// `prog` with `args` in `home` as `how` says; stdin closed.
fn command(path: &str, args: &[String], home: &Home, how: &How) -> Command {
    let mut cmd = Command::new(path);
    cmd.args(args).current_dir(home.path()).env("TMPDIR", home.path()).stdin(Stdio::null());
    for (k, v) in how.env {
        cmd.env(k, v);
    }
    if how.run_as == RunAs::Unprivileged {
        enter_user_namespace(&mut cmd);
    }
    crate::tools::signal_with_parent(&mut cmd, how.on_death);
    cmd
}

/// The child enters a user namespace of its own where it is uid and gid [`UNPRIVILEGED`], mapped
/// to the agent's own uid and gid outside (a one-line map of its own ids, which needs no
/// privilege but CAP_SETFCAP where the id is root's).
fn enter_user_namespace(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid/getegid only read the caller's credentials.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // Formatted here, before the fork: the child only writes these bytes.
    let uid_map = format!("{UNPRIVILEGED} {uid} 1\n").into_bytes();
    let gid_map = format!("{UNPRIVILEGED} {gid} 1\n").into_bytes();
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (unshare, open, write, close) on buffers allocated before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            write_proc(c"/proc/self/uid_map", &uid_map)?;
            // gVisor has no setgroups file; its gid map needs none.
            match write_proc(c"/proc/self/setgroups", b"deny") {
                Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e),
                _ => {}
            }
            write_proc(c"/proc/self/gid_map", &gid_map)
        });
    }
}

/// Writes `bytes` to the file at `path` with open/write/close alone (async-signal-safe).
fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: path is NUL-terminated; bytes is a live buffer of bytes.len() bytes; fd is closed once.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// A start refused before the program ran (the user namespace), said with what to do.
fn start_error(prog: &str, path: &str, how: &How, source: std::io::Error) -> AppError {
    if how.run_as == RunAs::Unprivileged
        && matches!(source.raw_os_error(), Some(libc::EPERM) | Some(libc::EINVAL) | Some(libc::ENOSPC))
    {
        return AppError::NoUserNamespace { prog: prog.to_string(), source };
    }
    ToolError::Start { prog: path.to_string(), source }.into()
}

/// Runs `prog` to its end in `home` as `how` says, within `within` (or until the host stops the
/// run); its stdout and stderr go to `{name}.out` in `home`, whose tail a failure quotes.
pub fn run_once(
    prog: &str,
    args: &[String],
    home: &Home,
    how: &How,
    within: Duration,
    ctx: &RunCtx,
) -> Result<Duration, AppError> {
    let path = find_program(prog)?;
    let name = Path::new(prog).file_name().map_or(prog.to_string(), |n| n.to_string_lossy().into_owned());
    let out_path = home.path().join(format!("{name}.out"));
    let out = std::fs::File::create(&out_path)
        .map_err(|e| crate::error::OsError::new(format!("create {}", out_path.display()), e))?;
    let err = out.try_clone().map_err(|e| crate::error::OsError::new("dup an output file", e))?;
    let mut cmd = command(&path, args, home, how);
    cmd.stdout(out).stderr(err);
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| start_error(&name, &path, how, e))?;
    let said = |how: String| {
        let b = std::fs::read(&out_path).unwrap_or_default();
        AppError::Tool(ToolError::Exited { prog: name.clone(), how, stderr: tail(&b).trim().to_string() })
    };
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(t0.elapsed()),
            Ok(Some(st)) => {
                return Err(said(st.code().map_or("a signal".to_string(), |c| format!("status {c}"))))
            }
            Ok(None) if ctx.stopped() || t0.elapsed() > within => {
                let _ = child.kill();
                let _ = child.wait();
                if ctx.stopped() {
                    return Err(AppError::Stopped);
                }
                return Err(said(format!("no end within {} s (killed)", within.as_secs())));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(ToolError::Start { prog: path, source: e }.into()),
        }
    }
}

/// A running server.
pub struct Server {
    prog: String,
    stop_signal: i32,
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
    /// Starts `prog` with `args` in `home` as `how` says, stdout discarded, stderr kept (its
    /// tail, bounded).
    pub fn start(prog: &str, args: &[String], home: &Home, how: &How) -> Result<Server, AppError> {
        let path = find_program(prog)?;
        let mut cmd = command(&path, args, home, how);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| start_error(prog, &path, how, e))?;
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
            prog: Path::new(prog).file_name().map_or(prog.to_string(), |n| n.to_string_lossy().into_owned()),
            stop_signal: how.stop,
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

    /// Stops the server (its stop signal, then SIGKILL after 2 s) and says what it left: its exit, its
    /// stderr's tail, `log`'s tail (the server's own error log, in its home), its CPU time as its
    /// kernel counted it (`wait4`'s rusage: the guest's view).
    pub fn stop(mut self, log: Option<&Path>) -> Value {
        let pid = self.child.id() as libc::pid_t;
        if !self.reaped {
            // SAFETY: kill(2) on our own child's pid, which we have not reaped yet (wait4 below
            // reaps it), so the pid cannot name another process.
            unsafe { libc::kill(pid, self.stop_signal) };
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
    serve_then(prog, args, &How::default(), home, log, ctx, at, probe, || Ok(()))
}

/// [`serve`], started as `how` says, with `then` run once the server answers and before the host
/// is told it is ready (PostgreSQL's tables are loaded there).
#[allow(clippy::too_many_arguments)]
pub fn serve_then(
    prog: &str,
    args: &[String],
    how: &How,
    home: &Home,
    log: &str,
    ctx: &RunCtx,
    at: &std::net::SocketAddr,
    probe: impl FnMut() -> Result<(), String>,
    then: impl FnOnce() -> Result<(), AppError>,
) -> Result<crate::workload::Output, AppError> {
    let log = home.path().join(log);
    let mut server = Server::start(prog, args, home, how)?;
    if let Err(e) = server.wait_ready(&at.to_string(), ctx, probe).and_then(|_| then()) {
        let left = server.stop(Some(&log));
        return Err(with_log(e, &left));
    }
    // A counted run's events are the serving's: set-up before, shutdown after, left out.
    ctx.count(crate::workload::Count::From);
    ctx.ready();
    let served = server.serve_until_stopped(ctx);
    ctx.count(crate::workload::Count::Until);
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
