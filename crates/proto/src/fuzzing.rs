//! Fuzzing helpers shared by the crates' `fuzz_*` tests (feature `fuzzing`).
//!
//! Property-based random fuzzing with proptest, not coverage-guided: cargo-fuzz needs a nightly
//! compiler, which these machines cannot install. Each target runs for a time budget, batch
//! after batch of fresh random cases: `VIRTPERF_FUZZ_SECS` (default 1 s per target, what
//! `make test` spends; `make fuzz` sets 60). A panic, or a property that does not hold, fails
//! the test with the smallest input proptest could shrink it to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The time budget of one fuzz target.
pub fn budget() -> Duration {
    let secs = std::env::var("VIRTPERF_FUZZ_SECS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(1.0);
    Duration::from_secs_f64(secs.clamp(0.05, 86_400.0))
}

/// The longest one case may run: past it the target has hung (or crawls), which is a finding as
/// much as a panic. `VIRTPERF_FUZZ_CASE_SECS` (default 10).
pub fn case_limit() -> Duration {
    let secs =
        std::env::var("VIRTPERF_FUZZ_CASE_SECS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(10.0);
    Duration::from_secs_f64(secs.clamp(0.01, 86_400.0))
}

/// Runs `check` on inputs from `strategy` until the budget is spent; panics with the shrunk
/// failing input when a case fails or panics. A case that runs past [`case_limit`] ends the test
/// process (a hung case cannot be unwound) after printing the target and the input. Returns the
/// number of cases run.
pub fn fuzz<S: Strategy>(
    name: &str,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> u64 {
    let deadline = Instant::now() + budget();
    let watch = Watchdog::start(name, case_limit(), |name, limit, input| {
        eprintln!("fuzz target {name}: one case ran longer than {limit:?} (a hang?); its input: {input}");
        std::process::exit(101);
    });
    let timed = |v: S::Value| {
        watch.begin(&v);
        let r = check(v);
        watch.end();
        r
    };
    let mut cases = 0u64;
    loop {
        let mut runner =
            TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() });
        if let Err(e) = runner.run(&strategy, timed) {
            panic!("fuzz target {name} failed after {cases} cases: {e}");
        }
        cases += 256;
        if Instant::now() >= deadline {
            break;
        }
    }
    eprintln!("fuzz {name}: {cases} cases");
    cases
}

/// Watches the case in flight from a thread of its own; one that runs past the limit is printed
/// and the process exits with a failure.
struct Watchdog {
    current: Arc<Mutex<Option<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(name: &str, limit: Duration, on_late: fn(&str, Duration, &str)) -> Watchdog {
        let current: Arc<Mutex<Option<(Instant, String)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st, name) = (current.clone(), stop.clone(), name.to_string());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50).min(limit));
                let late =
                    c.lock().ok().and_then(|g| g.as_ref().filter(|(t, _)| t.elapsed() > limit).cloned());
                if let Some((_, input)) = late {
                    on_late(&name, limit, &input);
                    return;
                }
            }
        });
        Watchdog { current, stop }
    }
    fn begin(&self, input: &dyn std::fmt::Debug) {
        if let Ok(mut g) = self.current.lock() {
            *g = Some((Instant::now(), format!("{input:?}")));
        }
    }
    fn end(&self) {
        if let Ok(mut g) = self.current.lock() {
            *g = None;
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One edit of a seed input.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Overwrite the byte at (position × len) with this byte.
    Set(f64, u8),
    /// Insert bytes (often a token of the format) at a position.
    Insert(f64, Vec<u8>),
    /// Delete up to n bytes at a position.
    Delete(f64, usize),
    /// Repeat a slice (lengths, nesting).
    Repeat(f64, usize, usize),
}

fn edit_strategy(tokens: &'static [&'static str]) -> impl Strategy<Value = Edit> {
    let token = proptest::sample::select(tokens).prop_map(|t| t.as_bytes().to_vec());
    let bytes = proptest::collection::vec(any::<u8>(), 1..8);
    prop_oneof![
        (0.0..1.0f64, any::<u8>()).prop_map(|(p, b)| Edit::Set(p, b)),
        (0.0..1.0f64, prop_oneof![token, bytes]).prop_map(|(p, b)| Edit::Insert(p, b)),
        (0.0..1.0f64, 1..16usize).prop_map(|(p, n)| Edit::Delete(p, n)),
        (0.0..1.0f64, 1..32usize, 1..64usize).prop_map(|(p, n, k)| Edit::Repeat(p, n, k)),
    ]
}

/// Applies edits to a copy of `seed`.
pub fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut v = seed.to_vec();
    let at = |p: f64, len: usize| ((p * len as f64) as usize).min(len);
    for e in edits {
        match e {
            Edit::Set(p, b) if !v.is_empty() => {
                let i = at(*p, v.len() - 1);
                v[i] = *b;
            }
            Edit::Set(..) => {}
            Edit::Insert(p, bytes) => {
                let i = at(*p, v.len());
                v.splice(i..i, bytes.iter().copied());
            }
            Edit::Delete(p, n) => {
                let i = at(*p, v.len());
                let j = (i + n).min(v.len());
                v.drain(i..j);
            }
            Edit::Repeat(p, n, k) => {
                let i = at(*p, v.len());
                let j = (i + n).min(v.len());
                let piece = v[i..j].to_vec();
                for _ in 0..*k {
                    v.splice(j..j, piece.iter().copied());
                }
            }
        }
    }
    v
}

/// Inputs for a parser: valid seeds mutated by a few edits (bytes, the format's tokens,
/// deletions, repetitions), mixed with arbitrary bytes.
pub fn mutated(seeds: Vec<Vec<u8>>, tokens: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let seeded = (proptest::sample::select(seeds), proptest::collection::vec(edit_strategy(tokens), 0..6))
        .prop_map(|(seed, edits)| apply(&seed, &edits));
    prop_oneof![4 => seeded, 1 => proptest::collection::vec(any::<u8>(), 0..512)]
}

/// Tokens of JSON, for mutating protocol frames.
pub const JSON_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "-1",
    "0",
    "1e999",
    "-0",
    "18446744073709551616",
    "1.5",
    "\"type\"",
    "\"tag\"",
    "\"v\"",
    "\"samples\"",
    "\"value\"",
    "\\u0000",
    "\n",
    "@vp ",
    "NaN",
];

/// An arbitrary JSON value, nested a few levels (what an untrusted agent could send as `extra`).
pub fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(serde_json::Value::from),
        "[a-z_]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    proptest::sample::select(
                        &[
                            "rfc2544",
                            "throughput",
                            "latency",
                            "steps",
                            "frame_size",
                            "direction",
                            "ndr_fps",
                            "pdr_fps",
                            "mean_us",
                            "loss",
                            "b2b",
                            "flows",
                            "received",
                            "sent",
                        ][..]
                    )
                    .prop_map(str::to_string),
                    "[a-z_]{1,10}"
                ],
                inner,
                0..8
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static LATE: Mutex<Option<String>> = Mutex::new(None);

    /// The watchdog sees a case that runs past its limit (and names its input), and stays quiet
    /// for cases that end in time.
    #[test]
    fn a_case_past_its_limit_is_caught_with_its_input() {
        let note = |_: &str, _: Duration, input: &str| {
            if let Ok(mut l) = LATE.lock() {
                *l = Some(input.to_string());
            }
        };
        let w = Watchdog::start("t", Duration::from_millis(100), note);
        w.begin(&"quick");
        std::thread::sleep(Duration::from_millis(20));
        w.end();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(*LATE.lock().unwrap(), None, "a case that ended in time was reported");
        w.begin(&"slow input");
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(LATE.lock().unwrap().as_deref(), Some("\"slow input\""));
    }
}
