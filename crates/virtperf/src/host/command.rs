//! Every external command with a deadline and a bound on what it prints: `ip`, `tc`,
//! `ovs-vsctl`, `mke2fs`, `virsh`, the OCI runtimes' `kill` and `delete`, `apt-get`. A command
//! that hangs (a runtime waiting on a frozen cgroup, a daemon that stopped answering) is killed
//! with its whole process group at its deadline, and the caller gets a `TimedOut` error that
//! names it, instead of the run hanging with it.

use std::io::Read;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// What a short command of the host's may take (`ip`, `tc`, a runtime's `kill`): seconds where
/// it takes milliseconds, minutes never.
pub const SHORT: Duration = Duration::from_secs(60);
/// What a package manager's command may take (`apt-get update`, a kernel's download).
pub const LONG: Duration = Duration::from_secs(15 * 60);
/// Bytes of a command's stdout, and of its stderr, kept; the rest is read and dropped.
pub const OUTPUT_CAP: usize = 4 << 20;

/// Reads `r` to its end, keeping at most [`OUTPUT_CAP`] bytes.
fn capped(mut r: impl Read) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    kept
}

/// Runs `cmd` (stdin from /dev/null, in a process group of its own) to its end or to `limit`,
/// whichever comes first; its stdout and stderr kept up to [`OUTPUT_CAP`] each. Past the limit
/// the group is SIGKILLed and the error's kind is `TimedOut`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> std::io::Result<Output> {
    use std::os::unix::process::CommandExt;
    let what = format!("{:?}", cmd.get_program());
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn()?;
    let out = child.stdout.take().map(|o| std::thread::spawn(move || capped(o)));
    let err = child.stderr.take().map(|e| std::thread::spawn(move || capped(e)));
    let status = wait_within(&mut child, limit);
    let status = match status {
        Some(s) => s,
        None => {
            // SAFETY: kill(2) of the process group this function made (its leader is our child).
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = wait_within(&mut child, Duration::from_secs(2));
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{what} did not finish within {} s and was killed", limit.as_secs()),
            ));
        }
    };
    // The pipes close when the group has gone; a grandchild that keeps them open is not waited
    // for past the command's own end (its readers are left to finish on their own).
    let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        let Some(h) = h else { return Vec::new() };
        let t0 = Instant::now();
        while !h.is_finished() && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(2));
        }
        if h.is_finished() {
            h.join().unwrap_or_default()
        } else {
            Vec::new()
        }
    };
    Ok(Output { status, stdout: join(out), stderr: join(err) })
}

/// [`output_within`] when only the exit status matters.
pub fn status_within(cmd: &mut Command, limit: Duration) -> std::io::Result<ExitStatus> {
    output_within(cmd, limit).map(|o| o.status)
}

/// Waits for `child` until `limit`: its status, or None when it is still running then. Polls,
/// from 1 ms up to 20 ms apart (most commands end within milliseconds).
pub fn wait_within(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(_) => return None,
        }
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(pause.min(limit.saturating_sub(t0.elapsed())));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Lines joined with "; " (a tool's errors span lines — virsh's, ssh's — and a failure is stored
/// and shown as one).
pub fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_past_its_deadline_is_killed_with_its_children() {
        let t0 = Instant::now();
        // A shell that leaves a grandchild holding the pipes, and never ends.
        let e =
            output_within(Command::new("sh").args(["-c", "sleep 30 & sleep 30"]), Duration::from_millis(300))
                .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(e.to_string().contains("did not finish within"), "{e}");
    }

    #[test]
    fn output_is_kept_within_its_cap() {
        let out = output_within(
            Command::new("sh").args(["-c", "head -c 6000000 /dev/zero; echo err >&2"]),
            Duration::from_secs(30),
        )
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout.len(), OUTPUT_CAP);
        assert_eq!(out.stderr, b"err\n");
        let quick = output_within(&mut Command::new("true"), Duration::from_secs(5)).unwrap();
        assert!(quick.status.success() && quick.stdout.is_empty());
    }
}
