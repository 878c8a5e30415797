//! Host side of the agent channel: a byte stream to `virtperf agent`, whatever carries it.
//!
//! A reader thread turns the agent's output into [`Event`]s on a channel, each stamped with the
//! host's monotonic clock on arrival. The orchestrator waits on that channel in short slices, so a
//! deadline, a dead agent and Ctrl-C are all noticed within [`SLICE`].

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use virtperf_proto::{self as proto, Frame, Reply, Request};

/// How often a wait checks for interruption.
pub const SLICE: Duration = Duration::from_millis(50);
/// Frames read ahead of the orchestrator, at most: beyond this (or [`QUEUE_BYTES`]) the reader
/// waits, and a flooding agent is slowed down, never buffered without bound.
const QUEUE: usize = 1024;
/// Bytes of frames read ahead, at most (as received: a frame is parsed only when the
/// orchestrator takes it, one at a time). At least one whole frame always fits.
pub const QUEUE_BYTES: usize = 8 << 20;
/// Early replies kept for requests still in flight, at most, in count and in bytes as received;
/// more is a protocol error.
const STASH_MAX: usize = 1024;
pub const STASH_BYTES: usize = 8 << 20;
/// Lines of the agent's stderr (or a console) kept for error messages.
const TAIL_LINES: usize = 40;
/// Longest line of a tail kept, in characters (a frame is at most 1 MiB; a console line needs no
/// more than this to say why).
const LINE_MAX: usize = 2000;
/// Longest error message of an agent's kept, in characters.
const MESSAGE_MAX: usize = 4000;
/// Size at which a console log on disk is rotated.
pub const LOG_CAP: u64 = 1 << 20;

#[derive(Debug)]
enum Event {
    /// A frame-prefixed line as it came, and when it arrived (parsed when it is taken).
    Frame(Vec<u8>, Instant),
    /// A line longer than a frame may be.
    Overlong,
    Eof,
}

/// Bytes of frames the reader has queued and the orchestrator not yet taken; the reader waits on
/// it when full, and gives up once the connection is dropped.
#[derive(Default)]
struct Budget {
    used: Mutex<usize>,
    freed: std::sync::Condvar,
    gone: AtomicBool,
}

impl Budget {
    /// Waits until `n` more bytes fit (or nothing is queued: one frame always fits); false once
    /// the connection is gone.
    fn reserve(&self, n: usize) -> bool {
        let Ok(mut used) = self.used.lock() else { return false };
        while *used > 0 && *used + n > QUEUE_BYTES {
            if self.gone.load(Ordering::Relaxed) {
                return false;
            }
            match self.freed.wait_timeout(used, Duration::from_millis(100)) {
                Ok((u, _)) => used = u,
                Err(_) => return false,
            }
        }
        *used += n;
        true
    }
    fn release(&self, n: usize) {
        if let Ok(mut used) = self.used.lock() {
            *used = used.saturating_sub(n);
        }
        self.freed.notify_all();
    }
}

/// Why a call to the agent did not produce the reply it asked for.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// the agent did not answer before the deadline
    #[error("no answer from the agent within {0:?}")]
    Timeout(Duration),
    /// the agent's stream closed
    #[error("the agent exited or closed its channel{0}")]
    Exited(String),
    /// the run was interrupted
    #[error("interrupted")]
    Interrupted,
    /// the agent answered something that is not the protocol
    #[error("protocol error: {0}")]
    Protocol(String),
    /// the agent answered with an error reply
    #[error("agent error ({code:?}{}): {message}", kind.map(|k| format!(": {k:?}")).unwrap_or_default())]
    Agent { code: proto::ErrorCode, message: String, kind: Option<proto::FailureKind> },
    /// writing to the agent failed (its line ended: the tail's last words say why)
    #[error("cannot write to the agent: {0}{1}")]
    Write(std::io::Error, String),
}

/// A bounded tail of lines (stderr of the agent or its runtime, a guest console), and when the
/// guest's init said its first line ([`INIT_STARTED`]) as the host read it.
#[derive(Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<String>>>, Arc<OnceLock<Instant>>);

/// The line virtperf's guest inits print first (QEMU's and UML's): the kernel has booted and
/// runs user space. The guest's own word, so only a timing figure rests on it (the first such
/// line; the launch clamps it between the spawn and the hello).
pub const INIT_STARTED: &str = "virtperf-init: start";

impl Tail {
    pub fn push(&self, line: String) {
        if line.trim_end() == INIT_STARTED {
            let _ = self.1.set(Instant::now());
        }
        // Kept printable (a console's escape sequences never reach a terminal) and bounded.
        let line = proto::printable(&line, LINE_MAX);
        if let Ok(mut t) = self.0.lock() {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
    /// The most telling line, formatted for a one-line error message (empty when there is none):
    /// the last one that reads like a failure (a kernel panic, "failed", "error"), else the last.
    /// The whole tail is [`Tail::lines`], stored beside the failure.
    pub fn render(&self) -> String {
        let lines = self.lines();
        match telling_line(&lines) {
            Some(l) => format!("; last output: {l}"),
            None => String::new(),
        }
    }

    /// When the host read the guest init's first line, if it did.
    pub fn init_started(&self) -> Option<Instant> {
        self.1.get().copied()
    }

    /// Every line kept, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default()
    }
    /// Starts a thread copying `r`'s lines into the tail and, with `log`, appending them to
    /// that file (a guest console kept on disk), rotated to `log.1` when it reaches [`LOG_CAP`] bytes: at most twice that on disk.
    pub fn follow_logged<R: Read + Send + 'static>(&self, r: R, log: Option<std::path::PathBuf>) {
        let tail = self.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(r);
            let mut file = log.as_ref().and_then(|p| std::fs::File::create(p).ok());
            let mut written = 0u64;
            loop {
                let line = match proto::read_line(&mut r) {
                    Ok(l) => String::from_utf8_lossy(&l).into_owned(),
                    Err(proto::FrameError::TooLong) => "(overlong line)".into(),
                    Err(_) => break,
                };
                if let Some(p) = log.as_ref() {
                    let n = line.len() as u64 + 1;
                    if written + n > LOG_CAP {
                        let _ = std::fs::rename(p, p.with_extension("log.1"));
                        file = std::fs::File::create(p).ok();
                        written = 0;
                    }
                    if let Some(f) = file.as_mut() {
                        let _ = writeln!(f, "{line}");
                        written += n;
                    }
                }
                tail.push(line);
            }
        });
    }
}

/// Words that mark a console line as the likely cause of a failure.
const FAILURE_WORDS: &[&str] = &["panic", "fail", "error", "fatal", "cannot", "refused", "denied", "unable"];
/// Longest line quoted in an error message.
const QUOTE_MAX: usize = 200;

/// The line of `lines` that best explains a failure, shortened to [`QUOTE_MAX`] characters.
pub fn telling_line(lines: &[String]) -> Option<String> {
    let nonempty: Vec<&str> = lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
    let pick = nonempty
        .iter()
        .rev()
        .find(|l| {
            let low = l.to_ascii_lowercase();
            FAILURE_WORDS.iter().any(|w| low.contains(w))
        })
        .or(nonempty.last())?;
    let mut s: String = pick.chars().filter(|c| !c.is_control()).take(QUOTE_MAX).collect();
    if pick.chars().count() > QUOTE_MAX {
        s.push('…');
    }
    Some(s)
}

pub struct Conn {
    writer: Box<dyn Write + Send>,
    events: Receiver<Event>,
    budget: Arc<Budget>,
    /// Bytes (as received) of the frames in `stash`.
    stashed_bytes: usize,
    next_tag: u64,
    pub tail: Tail,
    closed: bool,
    /// Tags still expecting replies; frames for them that arrive while another tag is awaited are
    /// kept in `stash` (an agent runs several requests at once: a server and a client, a load).
    live: std::collections::BTreeSet<u64>,
    stash: Vec<Stashed>,
    relayed: Option<RelaySpans>,
}

/// How long one frame's write to an agent may wait for room in its line: an agent that stopped
/// reading (hung, or hostile) fails the call instead of blocking the run for ever.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// A writer to an agent whose every write has a deadline ([`WRITE_DEADLINE`]): its descriptor
/// made non-blocking, each write waiting for room with poll(2) until then.
pub struct DeadlineWriter<W: Write + std::os::fd::AsRawFd> {
    inner: W,
    deadline: Duration,
}

impl<W: Write + std::os::fd::AsRawFd> DeadlineWriter<W> {
    pub fn new(inner: W) -> DeadlineWriter<W> {
        let fd = inner.as_raw_fd();
        // SAFETY: fcntl(2) on a descriptor `inner` owns, reading and setting its status flags.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        DeadlineWriter { inner, deadline: WRITE_DEADLINE }
    }
}

impl<W: Write + std::os::fd::AsRawFd> Write for DeadlineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let until = Instant::now() + self.deadline;
        loop {
            match self.inner.write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "the agent read nothing for {} s (its line is full)",
                                self.deadline.as_secs()
                            ),
                        ));
                    }
                    let mut pfd =
                        libc::pollfd { fd: self.inner.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                    let ms = left.as_millis().min(i32::MAX as u128) as i32;
                    // SAFETY: poll(2) on one pollfd we own, for at most `ms` milliseconds.
                    unsafe { libc::poll(&mut pfd, 1, ms) };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// An event of the reader as the orchestrator takes it.
enum Parsed {
    /// A reply, when it arrived, and its size as received.
    Frame(Frame<Reply>, Instant, usize),
    /// A frame-prefixed line that is not a reply (its error, printable), or an overlong line.
    Garbage(String),
    Eof,
}

/// An early reply kept for a request in flight.
struct Stashed {
    frame: Frame<Reply>,
    at: Instant,
    /// Its size as received (what [`STASH_BYTES`] counts).
    bytes: usize,
}

/// The reader stops waiting for room once the connection is gone.
impl Drop for Conn {
    fn drop(&mut self) {
        self.budget.gone.store(true, Ordering::Relaxed);
        self.budget.freed.notify_all();
    }
}

/// Spans (ns) a relay timed on its host, by the armed run's tag; filled by whoever reads the
/// relay's control lines, emptied by [`Conn::relayed_span`].
pub type RelaySpans = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, u64>>>;

impl Conn {
    /// Wraps a stream to an agent. Lines the agent writes without the frame prefix go to `tail`.
    pub fn new<R: Read + Send + 'static>(reader: R, writer: Box<dyn Write + Send>, tail: Tail) -> Conn {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let t = tail.clone();
        let budget = Arc::new(Budget::default());
        let b = budget.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(64 * 1024, reader);
            loop {
                let ev = match proto::read_line(&mut r) {
                    Ok(line) if line.starts_with(proto::FRAME_PREFIX.as_bytes()) => {
                        // Stamped on arrival: the host's clock of the reply, whenever it is parsed.
                        let now = Instant::now();
                        if !b.reserve(line.len()) {
                            break;
                        }
                        Event::Frame(line, now)
                    }
                    Ok(line) => {
                        t.push(String::from_utf8_lossy(&line).into_owned());
                        continue;
                    }
                    Err(proto::FrameError::TooLong) => Event::Overlong,
                    Err(_) => {
                        let _ = tx.send(Event::Eof);
                        break;
                    }
                };
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
        Conn {
            writer,
            events: rx,
            budget,
            stashed_bytes: 0,
            next_tag: 1,
            tail,
            closed: false,
            live: Default::default(),
            stash: Vec::new(),
            relayed: None,
        }
    }

    /// The next event of the reader, a frame parsed (its bytes given back to the budget).
    fn next_event(&mut self, timeout: Duration) -> Result<Parsed, RecvTimeoutError> {
        match self.events.recv_timeout(timeout)? {
            Event::Frame(line, at) => {
                self.budget.release(line.len());
                Ok(match proto::decode_reply(&line) {
                    Ok(Some(f)) => Parsed::Frame(f, at, line.len()),
                    Ok(None) => Parsed::Garbage("a frame without its prefix".into()),
                    Err(e) => Parsed::Garbage(proto::printable(&e, MESSAGE_MAX)),
                })
            }
            Event::Overlong => Ok(Parsed::Garbage("overlong line".into())),
            Event::Eof => Ok(Parsed::Eof),
        }
    }

    /// Keeps an early reply for a request in flight, within [`STASH_MAX`] and [`STASH_BYTES`].
    fn keep(&mut self, f: Frame<Reply>, at: Instant, bytes: usize) -> Result<(), CallError> {
        if self.stash.len() >= STASH_MAX || self.stashed_bytes + bytes > STASH_BYTES {
            return Err(CallError::Protocol(format!(
                "more than {STASH_MAX} early replies or {} MiB of them: the agent floods its channel",
                STASH_BYTES >> 20
            )));
        }
        self.stashed_bytes += bytes;
        self.stash.push(Stashed { frame: f, at, bytes });
        Ok(())
    }

    fn unstash(&mut self, i: usize) -> (Frame<Reply>, Instant) {
        let s = self.stash.remove(i);
        self.stashed_bytes = self.stashed_bytes.saturating_sub(s.bytes);
        (s.frame, s.at)
    }

    pub fn send(&mut self, req: Request) -> Result<u64, CallError> {
        let tag = self.next_tag;
        self.next_tag += 1;
        proto::write_frame(&mut self.writer, "", &Frame::new(tag, req)).map_err(|e| self.write_failed(e))?;
        self.live.insert(tag);
        Ok(tag)
    }

    /// A write to the agent failed: its line ended, as a read would find a moment later. The
    /// tail says why (a remote host's session: "the SSH connection to host `b` closed").
    fn write_failed(&self, e: std::io::Error) -> CallError {
        CallError::Write(e, self.last_words())
    }

    /// The tail's telling line once the stderr follower has had a moment to catch the agent's
    /// (or its session's) last words: its line has just ended, on a read or a write.
    fn last_words(&self) -> String {
        std::thread::sleep(Duration::from_millis(20));
        self.tail.render()
    }

    /// Sends a request that gets no reply when it succeeds (`go`).
    pub fn send_oneway(&mut self, req: Request) -> Result<(), CallError> {
        let tag = self.next_tag;
        self.next_tag += 1;
        proto::write_frame(&mut self.writer, "", &Frame::new(tag, req)).map_err(|e| self.write_failed(e))
    }

    /// Stops expecting replies for `tag` (an abandoned request); late frames are then dropped.
    /// Whether request `tag` is still open: sent, and neither its last reply (a result, an error)
    /// arrived nor was it forgotten.
    pub fn is_live(&self, tag: u64) -> bool {
        self.live.contains(&tag)
    }

    pub fn forget(&mut self, tag: u64) {
        self.live.remove(&tag);
        self.stash.retain(|s| s.frame.tag != tag);
        self.stashed_bytes = self.stash.iter().map(|s| s.bytes).sum();
    }

    fn deliver(&mut self, f: Frame<Reply>, at: Instant) -> Result<(Reply, Instant), CallError> {
        // `started`, `armed` and laps are followed by the result; every other reply ends its request.
        if !matches!(f.body, Reply::Started | Reply::Armed | Reply::Lap { .. }) {
            self.live.remove(&f.tag);
        }
        match f.body {
            Reply::Error { code, message, kind } => {
                Err(CallError::Agent { code, message: proto::printable(&message, MESSAGE_MAX), kind })
            }
            body => Ok((body, at)),
        }
    }

    /// Waits for the next frame with `tag` (stale frames of abandoned calls are skipped).
    pub fn wait(
        &mut self,
        tag: u64,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<(Reply, Instant), CallError> {
        let started = Instant::now();
        if let Some(i) = self.stash.iter().position(|s| s.frame.tag == tag) {
            let (f, at) = self.unstash(i);
            return self.deliver(f, at);
        }
        loop {
            if cancel.load(Ordering::SeqCst) {
                return Err(CallError::Interrupted);
            }
            if self.closed {
                return Err(CallError::Exited(self.tail.render()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(CallError::Timeout(deadline.saturating_duration_since(started)));
            }
            match self.next_event(SLICE.min(deadline - now)) {
                Ok(Parsed::Frame(f, at, _)) if f.tag == tag => return self.deliver(f, at),
                Ok(Parsed::Frame(f, at, bytes)) => {
                    if self.live.contains(&f.tag) {
                        self.keep(f, at, bytes)?;
                    }
                }
                Ok(Parsed::Garbage(g)) => return Err(CallError::Protocol(g)),
                Ok(Parsed::Eof) | Err(RecvTimeoutError::Disconnected) => {
                    self.closed = true;
                    return Err(CallError::Exited(self.last_words()));
                }
                Err(RecvTimeoutError::Timeout) => continue,
            }
        }
    }

    /// Hands the line to the agent over to the caller (a relay: `virtperf remote-launch` copies
    /// request lines through it as they come); this Conn can no longer send.
    pub fn take_writer(&mut self) -> Box<dyn Write + Send> {
        std::mem::replace(&mut self.writer, Box::new(std::io::sink()))
    }

    /// The next frame the agent sends, whatever its tag, and when it arrived (a relay's half of
    /// [`Conn::wait`]): None after `timeout` without one; an error when the agent's line ended or
    /// carried garbage.
    pub fn next_frame(&mut self, timeout: Duration) -> Result<Option<(Frame<Reply>, Instant)>, CallError> {
        if !self.stash.is_empty() {
            return Ok(Some(self.unstash(0)));
        }
        match self.next_event(timeout) {
            Ok(Parsed::Frame(f, at, _)) => Ok(Some((f, at))),
            Ok(Parsed::Garbage(g)) => Err(CallError::Protocol(g)),
            Ok(Parsed::Eof) | Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                Err(CallError::Exited(self.tail.render()))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
        }
    }

    /// An agent behind a relay on another host (`remote-launch`): the `go` → `result` spans of
    /// armed runs, timed there on that host's clock, by tag (see [`Conn::relayed_span`]).
    pub fn set_relay(&mut self, spans: RelaySpans) {
        self.relayed = Some(spans);
    }

    /// The span of armed run `tag` from its `go` to its `result`, as the relay on the agent's host
    /// timed it; None for an agent on this machine (the caller times it here).
    pub fn relayed_span(&self, tag: u64) -> Option<Duration> {
        let spans = self.relayed.as_ref()?;
        let ns = spans.lock().ok()?.remove(&tag)?;
        Some(Duration::from_nanos(ns))
    }

    /// The tail of the instance's stderr (runtime messages, a guest's console).
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// Waits for the unsolicited hello (tag 0).
    pub fn hello(&mut self, deadline: Instant, cancel: &AtomicBool) -> Result<(Reply, Instant), CallError> {
        self.wait(0, deadline, cancel)
    }

    /// One request, one reply.
    pub fn call(&mut self, req: Request, timeout: Duration, cancel: &AtomicBool) -> Result<Reply, CallError> {
        let tag = self.send(req)?;
        self.wait(tag, Instant::now() + timeout, cancel).map(|r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_telling_line_is_one_line_and_names_the_cause() {
        let lines: Vec<String> = [
            "Run /init as init process",
            "userspace - ptrace set fp regs failed, errno = 14",
            "Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b",
            "Stack:",
            " 6022ef6b 00000000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            telling_line(&lines).unwrap(),
            "Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b"
        );
        assert_eq!(telling_line(&["a".into(), "b\u{1b}[0m".into()]).unwrap(), "b[0m");
        assert!(telling_line(&["x".repeat(500)]).unwrap().chars().count() <= QUOTE_MAX + 1);
        assert_eq!(telling_line(&[]), None);
    }

    /// A write into a line that ended says why, as a read at its end does: a remote host's
    /// sshd dying mid-trial failed the trial with "Broken pipe" alone when the next request was
    /// being sent, and with the session's last words when a reply was awaited.
    #[test]
    fn a_failed_write_says_the_agents_last_words() {
        struct Gone;
        impl Write for Gone {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let tail = Tail::default();
        tail.push("the SSH connection to host `b` closed".into());
        let mut c = Conn::new(std::io::empty(), Box::new(Gone), tail);
        let e = c.send(Request::Ping).unwrap_err().to_string();
        assert!(e.contains("cannot write to the agent") && e.contains("host `b` closed"), "{e}");
    }

    /// A stream that counts what was read from it: an agent sending result after result of a
    /// megabyte each (a histogram's worth of `extra`), for a request nobody awaits.
    struct Flood {
        frame: Vec<u8>,
        at: usize,
        read: Arc<std::sync::atomic::AtomicUsize>,
    }
    impl Read for Flood {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.frame.len() - self.at);
            buf[..n].copy_from_slice(&self.frame[self.at..self.at + n]);
            self.at = (self.at + n) % self.frame.len();
            self.read.fetch_add(n, Ordering::Relaxed);
            Ok(n)
        }
    }

    /// While the orchestrator takes nothing (between trials), the reader stops once
    /// [`QUEUE_BYTES`] are queued: what the host holds of a flooding agent is bounded in bytes as
    /// received, not in frames (1024 frames of 1 MiB once parsed were ~16 GiB). Taken, the frames
    /// for an abandoned request are dropped one by one, and the flood goes on within the bound.
    #[test]
    fn a_flooding_agent_is_read_ahead_within_the_byte_bound() {
        let zeros = vec!["0"; 500_000].join(",");
        let line = format!(
            "{}{{\"v\":{},\"tag\":99,\"type\":\"result\",\"samples\":[],\"guest_elapsed_ns\":1,\"guest_cpu\":{{\"user_ns\":0,\"system_ns\":0}},\"extra\":{{\"a\":[{zeros}]}}}}\n",
            proto::FRAME_PREFIX,
            proto::VERSION
        );
        assert!(line.len() < proto::MAX_FRAME && line.len() > 900_000);
        let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let flood = Flood { frame: line.clone().into_bytes(), at: 0, read: read.clone() };
        let mut c = Conn::new(flood, Box::new(std::io::sink()), Tail::default());
        // The reader fills its budget and waits.
        let mut last = 0;
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(20));
            let now = read.load(Ordering::Relaxed);
            if now == last && now > 0 {
                break;
            }
            last = now;
        }
        let ahead = read.load(Ordering::Relaxed);
        // What is queued, the frame waiting for room, and the BufReader's 64 KiB.
        let bound = QUEUE_BYTES + 2 * line.len() + 64 * 1024;
        assert!(ahead <= bound, "read {ahead} bytes ahead; the bound is {bound}");
        assert!(ahead >= QUEUE_BYTES / 2, "the reader read ahead ({ahead} bytes)");
        // Awaiting another tag takes (and drops) the stale frames; the reader goes on, bounded.
        let never = AtomicBool::new(false);
        let r = c.wait(7, Instant::now() + Duration::from_millis(300), &never);
        assert!(matches!(r, Err(CallError::Timeout(_))), "{r:?}");
        assert!(read.load(Ordering::Relaxed) > ahead, "the flood was taken and dropped");
        assert!(c.stash.is_empty(), "frames for no request in flight are not kept");
    }

    /// Early replies for a request in flight are kept within their own byte bound: past it the
    /// agent floods, which fails the call.
    #[test]
    fn early_replies_past_their_byte_bound_are_a_protocol_error() {
        let zeros = vec!["0"; 400_000].join(",");
        let line = format!(
            "{}{{\"v\":{},\"tag\":1,\"type\":\"lap\",\"name\":\"x\",\"pad\":[{zeros}]}}\n",
            proto::FRAME_PREFIX,
            proto::VERSION
        );
        let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let flood = Flood { frame: line.into_bytes(), at: 0, read };
        let mut c = Conn::new(flood, Box::new(std::io::sink()), Tail::default());
        c.send(Request::Ping).unwrap(); // tag 1: in flight, its laps kept
        c.send(Request::Ping).unwrap(); // tag 2: awaited
        let never = AtomicBool::new(false);
        let e = c.wait(2, Instant::now() + Duration::from_secs(10), &never).unwrap_err().to_string();
        assert!(e.contains("floods its channel"), "{e}");
        assert!(c.stashed_bytes <= STASH_BYTES, "{}", c.stashed_bytes);
    }

    /// An agent that reads nothing: the host's writes fail at their deadline instead of blocking
    /// (a pipe holds 64 KiB; before, the next request past it blocked the run for ever).
    #[test]
    fn a_write_to_an_agent_that_reads_nothing_meets_its_deadline() {
        let (r, w) = std::io::pipe().unwrap();
        let mut dw = DeadlineWriter::new(w);
        dw.deadline = Duration::from_millis(300);
        let chunk = vec![b'x'; 64 * 1024];
        let t0 = Instant::now();
        let mut err = None;
        for _ in 0..64 {
            if let Err(e) = dw.write_all(&chunk) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("the pipe filled up");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        drop(r);
    }

    #[test]
    fn console_log_on_disk_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("console.log");
        let line = "x".repeat(999);
        let text: String = (0..3000).map(|_| format!("{line}\n")).collect(); // ~3 MB
        let tail = Tail::default();
        tail.follow_logged(std::io::Cursor::new(text.into_bytes()), Some(log.clone()));
        let deadline = Instant::now() + Duration::from_secs(10);
        // 3000 lines of 1000 bytes: two rotations, then 3000000 - 2*1048000 in the live file. The
        // live file passes 900 kB before each rotation too: wait until it also stopped growing.
        let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut last = 0;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            let full = size(&log);
            if full >= 900_000 && full == last && size(&log.with_extension("log.1")) > 0 {
                break;
            }
            last = full;
        }
        let a = std::fs::metadata(&log).unwrap().len();
        let b = std::fs::metadata(log.with_extension("log.1")).unwrap().len();
        assert!(a <= LOG_CAP && b <= LOG_CAP && b > LOG_CAP / 2, "{a} {b}");
        assert_eq!(tail.0.lock().unwrap().len(), TAIL_LINES);
    }
}
