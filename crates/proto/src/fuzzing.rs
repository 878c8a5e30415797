//! Fuzzing helpers shared by the crates' `fuzz_*` tests (feature `fuzzing`).
//!
//! Property-based random fuzzing with proptest, not coverage-guided: cargo-fuzz needs a nightly
//! compiler, which these machines cannot install. Each target runs for a time budget, batch
//! after batch of fresh random cases: `VIRTPERF_FUZZ_SECS` (default 1 s per target, what
//! `make test` spends; `make fuzz` sets 60). A panic, or a property that does not hold, fails
//! the test with the smallest input proptest could shrink it to and the seed of its batch:
//! `VIRTPERF_FUZZ_SEED=N` makes the first batch that one, so the failure replays at once.
//!
//! Each batch's generator is seeded (ChaCha, from a 64-bit seed: the run's first seed + the batch
//! number), so a run is the same run again from its seed. The inputs worth keeping — what a
//! failure shrank to, a case that once hung — live in `fuzz/corpus/TARGET/` at the repository's
//! root, one file each, and every target that mutates byte seeds takes them as seeds too
//! ([`corpus`]).

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
    fuzz_from(name, first_seed(), strategy, check)
}

/// [`fuzz`] from the batch seeded `first` (the next batches `first + 1`, …).
pub fn fuzz_from<S: Strategy>(
    name: &str,
    first: u64,
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
    for batch in 0u64.. {
        let seed = first.wrapping_add(batch);
        let mut runner = TestRunner::new_with_rng(
            Config { cases: 256, failure_persistence: None, ..Config::default() },
            rng_of(seed),
        );
        if let Err(e) = runner.run(&strategy, timed) {
            panic!(
                "fuzz target {name} failed after {cases} cases: {e}\n\
                 replay: VIRTPERF_FUZZ_SEED={seed} cargo test --release -p CRATE TEST \
                 (then keep the input in fuzz/corpus/{}/)",
                corpus_dir_name(name)
            );
        }
        cases += 256;
        if Instant::now() >= deadline {
            break;
        }
    }
    eprintln!("fuzz {name}: {cases} cases");
    cases
}

/// The seed of a run's first batch: `VIRTPERF_FUZZ_SEED` (a failure's replay), else fresh.
pub fn first_seed() -> u64 {
    match std::env::var("VIRTPERF_FUZZ_SEED").ok().and_then(|s| s.trim().parse::<u64>().ok()) {
        Some(s) => s,
        None => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            // Time and pid: two targets started in the same nanosecond still differ.
            (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 40)
        }
    }
}

/// The generator of the batch with seed `seed`: ChaCha keyed with it, the same on every machine.
pub fn rng_of(seed: u64) -> proptest::test_runner::TestRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &key)
}

/// The corpus directory's name for target `name` (`decode_reply`, `agent request stream` →
/// `agent-request-stream`).
pub fn corpus_dir_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect()
}

/// The kept inputs of target `name`: every file in `fuzz/corpus/NAME/` at the repository's root
/// (none when the directory does not exist), in name order.
pub fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(corpus_dir_name(name));
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.into_iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// `seeds` with the kept inputs of target `name` added ([`corpus`]).
pub fn with_corpus(name: &str, mut seeds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    seeds.extend(corpus(name));
    seeds
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

    /// A failure says the seed of its batch, and that seed replays it in the first batch, to the
    /// same shrunk input; the corpus is read from the repository.
    #[test]
    fn a_failure_prints_its_seed_and_the_seed_replays_it() {
        let strategy = proptest::collection::vec(any::<u8>(), 0..48);
        // Fails on about one input in a hundred: found within a batch or two.
        let check = |v: Vec<u8>| -> Result<(), TestCaseError> {
            prop_assert!(v.iter().filter(|b| **b >= 200).count() < 12);
            Ok(())
        };
        let message = |first: u64| {
            std::panic::catch_unwind(|| fuzz_from("seeded", first, strategy.clone(), check))
                .err()
                .and_then(|p| p.downcast_ref::<String>().cloned())
        };
        let mut found = None;
        for start in 0..200u64 {
            if let Some(m) = message(start * 1000) {
                found = Some(m);
                break;
            }
        }
        let m = found.expect("a failing input within 200 runs");
        let seed: u64 = m
            .split("VIRTPERF_FUZZ_SEED=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no seed in: {m}"));
        let again = message(seed).expect("the seed replays the failure");
        let input = |m: &str| {
            m.split("minimal failing input:")
                .nth(1)
                .and_then(|r| r.split("\nreplay:").next())
                .map(str::to_string)
        };
        assert!(again.contains("after 0 cases"), "replayed in the first batch: {again}");
        assert_eq!(input(&again), input(&m), "the same shrunk input");
        assert!(input(&m).is_some(), "{m}");
        // The corpus of a target with kept inputs is read; one without is empty.
        assert!(!corpus("decode_reply").is_empty(), "fuzz/corpus/decode_reply/ holds kept inputs");
        assert!(corpus("no such target").is_empty());
        assert_eq!(corpus_dir_name("agent request stream"), "agent-request-stream");
    }

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
