//! Remote hosts over SSH, the host's side: `virtperf remote-check` and `virtperf remote-launch`,
//! run by the orchestrator's SSH sessions (see the module above). Both speak on stdin/stdout; their
//! own lines start with `@vpctl `, the agent's frames with `@vp `.

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use virtperf_proto::{self as proto, Frame, Reply};

use super::{CheckReply, CheckRequest, EnvCheck, Facts, LaunchRequest, Ready, CTL};
use crate::env::{self, LaunchCtx};
use crate::ledger::Ledger;

/// `virtperf remote-check`: each environment's availability (and one-time work) on this host,
/// and the host's facts, as one `@vpctl {json}` line.
pub fn check_main() -> std::io::Result<()> {
    let mut stdin = BufReader::new(std::io::stdin());
    let mut input = String::new();
    stdin.read_line(&mut input)?;
    // Then the clock exchange: `@vpctl clock` answered with this host's CLOCK_REALTIME, until the
    // orchestrator closes its end.
    let ask = format!("{CTL}clock");
    let mut line = String::new();
    loop {
        line.clear();
        if stdin.read_line(&mut line)? == 0 {
            break;
        }
        if line.trim_end() == ask {
            let mut out = std::io::stdout();
            writeln!(out, "{CTL}clock {}", super::realtime_ns())?;
            out.flush()?;
        }
    }
    let req: CheckRequest = serde_json::from_str(input.trim()).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the check request: {e}"))
    })?;
    let mut reply = CheckReply { facts: Facts::here(), envs: Vec::new() };
    for (_, kind, params) in &req.envs {
        let c = match env::find(kind) {
            None => EnvCheck {
                usable: false,
                detail: format!("this host's virtperf has no environment kind `{kind}`"),
                fix: Some("the same build runs on both ends: let virtperf copy itself again".into()),
                runtime: None,
            },
            Some(k) => {
                let a = k.availability(params);
                let prepared = if a.usable { k.prepare(params) } else { Ok(()) };
                match prepared {
                    Err(why) => EnvCheck { usable: false, detail: why, fix: a.fix, runtime: None },
                    Ok(()) => EnvCheck {
                        usable: a.usable,
                        detail: a.detail,
                        fix: a.fix,
                        runtime: k.runtime_version(params),
                    },
                }
            }
        };
        reply.envs.push(c);
    }
    let mut out = std::io::stdout();
    writeln!(out, "{CTL}{}", serde_json::to_string(&reply).unwrap_or_default())?;
    out.flush()
}

/// `virtperf remote-launch`: reads a [`LaunchRequest`], launches the environment here with this
/// host's own ledger, says `ready` (or `error`), then relays the agent's line until either end
/// closes; tears the instance down on every path (the session's end, a signal, the agent's exit).
pub fn launch_main() -> std::io::Result<()> {
    let mut input = BufReader::new(std::io::stdin());
    let mut first = String::new();
    input.read_line(&mut first)?;
    let mut out = std::io::stdout();
    let say = |out: &mut std::io::Stdout, what: &str| -> std::io::Result<()> {
        writeln!(out, "{CTL}{what}")?;
        out.flush()
    };
    let req: LaunchRequest = match serde_json::from_str(first.trim()) {
        Ok(r) => r,
        Err(e) => return say(&mut out, &format!("error a bad launch request: {e}")),
    };
    let Some(kind) = env::find(&req.kind) else {
        return say(&mut out, &format!("error this host's virtperf has no environment kind `{}`", req.kind));
    };
    // The session's end, or a signal, stops the relay and tears down.
    let gone = Arc::new(AtomicBool::new(false));
    {
        let g = gone.clone();
        let _ = ctrlc::set_handler(move || g.store(true, Ordering::SeqCst));
    }
    let (mut ledger, _swept) = Ledger::open()?;
    let run_dir = ledger.state_dir().join(format!("remote-{}", std::process::id()));
    if let Err(e) = ledger.create_dir(&run_dir) {
        ledger.close();
        return say(&mut out, &format!("error {}: {e}", run_dir.display()));
    }
    // The instance's directory on this host's scratch disk, recorded in this host's ledger.
    let scratch = if req.scratch {
        let root = crate::host::scratch_root();
        let d = root.join(format!("remote-{}-{}", std::process::id(), req.instance_id));
        let made = crate::host::ensure_private_dir(&root).and_then(|()| ledger.create_scratch_dir(&d));
        if let Err(e) = made {
            ledger.remove_scratch_dir(&d);
            ledger.remove_dir(&run_dir);
            ledger.close();
            return say(&mut out, &format!("error the scratch directory {}: {e}; set VIRTPERF_SCRATCH on this host to a directory on the disk to measure", d.display()));
        }
        Some(d)
    } else {
        None
    };
    let exe = std::env::current_exe()?;
    let cancel = AtomicBool::new(false);
    let launched = {
        let mut ctx = LaunchCtx {
            exe: &exe,
            run_dir: &run_dir,
            instance_id: req.instance_id.clone(),
            ledger: &mut ledger,
            boot_timeout: Duration::from_millis(req.boot_timeout_ms),
            cancel: &cancel,
            // The host's own network namespace (this process's), for network workloads.
            netns: req
                .host_network
                .then(|| std::path::PathBuf::from(format!("/proc/{}/ns/net", std::process::id()))),
            guest_net: None,
            scratch_dir: scratch.clone(),
            bridge: None,
        };
        kind.launch(&mut ctx, &req.params)
    };
    let mut inst = match launched {
        Ok(i) => i,
        Err(e) => {
            if let Some(d) = &scratch {
                ledger.remove_scratch_dir(d);
            }
            ledger.remove_dir(&run_dir);
            ledger.close();
            return say(&mut out, &format!("error {}", crate::host::command::one_line(&e.to_string())));
        }
    };
    let ready = Ready {
        start_ns: inst.start_time.as_nanos() as u64,
        agent_pid: inst.agent_pid,
        scratch: inst.scratch.as_ref().map(|s| (s.dir.clone(), s.what.clone())),
    };
    let hello = Frame::new(
        0,
        Reply::Hello { agent_version: env!("CARGO_PKG_VERSION").into(), pid: inst.agent_pid, clock_ns: 0 }, // unused by the orchestrator
    );
    let greeted = say(&mut out, &format!("ready {}", serde_json::to_string(&ready).unwrap_or_default()))
        .and_then(|_| proto::write_frame(&mut out, proto::FRAME_PREFIX, &hello));
    if greeted.is_ok() {
        // The orchestrator's requests go straight to the agent, as they come; each `go` is
        // stamped here, on this host's clock, as it passes.
        let to_agent = inst.conn.take_writer();
        let (g, probe) = (gone.clone(), inst.cpu.clone());
        let gos = GoStamps::default();
        let stamps = gos.clone();
        std::thread::spawn(move || {
            relay_requests(&mut input, to_agent, probe, &stamps);
            g.store(true, Ordering::SeqCst);
        });
        relay_frames(&mut inst, &gos, &gone, &mut out);
    }
    inst.kill(&mut ledger);
    if let Some(d) = &scratch {
        ledger.remove_scratch_dir(d);
    }
    ledger.remove_dir(&run_dir);
    ledger.close();
    Ok(())
}

/// The orchestrator's requests go straight to the agent, as they come; each `go` is stamped here,
/// on this host's clock, as it passes; the CPU probe (`@vpctl cpu`) is answered from the
/// instance's probe, here and now. Ends with the session or the agent's side.
fn relay_requests(
    input: &mut impl std::io::BufRead,
    mut to_agent: Box<dyn Write + Send>,
    probe: Option<crate::env::CpuProbe>,
    stamps: &GoStamps,
) {
    let ask = format!("{CTL}cpu");
    loop {
        match proto::read_line(input) {
            Ok(line) if line == ask.as_bytes() => {
                let v = probe.as_ref().and_then(crate::env::CpuProbe::read_ns);
                let a = format!("{CTL}cpu {}\n", v.map_or("-".to_string(), |v| v.to_string()));
                let mut out = std::io::stdout().lock();
                if out.write_all(a.as_bytes()).and_then(|_| out.flush()).is_err() {
                    break;
                }
            }
            Ok(line) => {
                let go = go_target(&line);
                let mut l = line;
                l.push(b'\n');
                // Stamped just before it is written, as the orchestrator does here.
                if let (Some(t), Ok(mut m)) = (go, stamps.lock()) {
                    m.insert(t, std::time::Instant::now());
                }
                if to_agent.write_all(&l).and_then(|_| to_agent.flush()).is_err() {
                    break;
                }
            }
            Err(proto::FrameError::TooLong) => continue,
            Err(_) => break,
        }
    }
}

/// The agent's frames go back, as they come, until the session is gone; an armed run's result is
/// preceded by its span from `go`, timed here (`@vpctl span TAG NS`): the environment's host
/// clock, without the SSH path's delays.
fn relay_frames(
    inst: &mut crate::env::Instance,
    gos: &GoStamps,
    gone: &AtomicBool,
    out: &mut std::io::Stdout,
) {
    while !gone.load(Ordering::SeqCst) {
        match inst.conn.next_frame(Duration::from_millis(100)) {
            Ok(Some((f, at))) => {
                if let Some(ns) = span_of(gos, &f, at) {
                    if writeln!(out, "{CTL}span {} {ns}", f.tag).and_then(|_| out.flush()).is_err() {
                        break;
                    }
                }
                if proto::write_frame(out, proto::FRAME_PREFIX, &f).is_err() {
                    break;
                }
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
}

/// When each `go` passed the relay, by the armed run's tag.
type GoStamps = Arc<std::sync::Mutex<std::collections::HashMap<u64, std::time::Instant>>>;

/// The armed run a request line starts (`go`), if it is one.
fn go_target(line: &[u8]) -> Option<u64> {
    let body = line.strip_prefix(proto::FRAME_PREFIX.as_bytes()).unwrap_or(line);
    match proto::decode_request(body) {
        Ok(Frame { body: proto::Request::Go { target }, .. }) => Some(target),
        _ => None,
    }
}

/// The span from an armed run's `go` to its result arriving here (ns), for a result frame.
fn span_of(gos: &GoStamps, f: &Frame<Reply>, at: std::time::Instant) -> Option<u64> {
    if !matches!(f.body, Reply::Result { .. }) {
        return None;
    }
    let go = gos.lock().ok()?.remove(&f.tag)?;
    Some(at.saturating_duration_since(go).as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_is_recognised_and_its_result_gets_the_span_timed_here() {
        let mut line = Vec::new();
        proto::write_frame(&mut line, "", &Frame::new(9, proto::Request::Go { target: 7 })).unwrap();
        let line = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
        assert_eq!(go_target(&line), Some(7));
        let mut ping = Vec::new();
        proto::write_frame(&mut ping, "", &Frame::new(3, proto::Request::Ping)).unwrap();
        assert_eq!(go_target(ping.strip_suffix(b"\n").unwrap()), None);
        assert_eq!(go_target(b"garbage"), None);

        let gos = GoStamps::default();
        let t0 = std::time::Instant::now();
        gos.lock().unwrap().insert(7, t0);
        let result = |tag| {
            Frame::new(
                tag,
                Reply::Result {
                    samples: Vec::new(),
                    guest_elapsed_ns: 0,
                    guest_cpu: Default::default(),
                    extra: serde_json::Value::Null,
                    guest_system: None,
                    window_ns: None,
                },
            )
        };
        // Another run's result, or another reply of this one, carries no span.
        assert_eq!(span_of(&gos, &result(8), t0), None);
        assert_eq!(span_of(&gos, &Frame::new(7, Reply::Armed), t0), None);
        let at = t0 + Duration::from_millis(12);
        assert_eq!(span_of(&gos, &result(7), at), Some(12_000_000));
        // Once: the stamp is used up.
        assert_eq!(span_of(&gos, &result(7), at), None);
    }
}
