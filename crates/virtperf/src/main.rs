//! virtperf: what does this isolation layer cost?
//!
//! One binary: `run`, `report`, `export`, `doctor`, and `agent` (the same binary runs inside every
//! environment, so host and guest share one protocol and one set of workloads).

mod ab;
mod agent;
mod doctor;
mod env;
mod experiment;
mod host;
mod image;
mod lab;
mod layers;
mod ledger;
mod plan;
mod precision;
mod predict;
mod remote;
mod run;
mod trial;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use exit::{bad_input, ExitStatus, ExitStatusOf};
use experiment::{Origin, RawExperiment, RawSetting};
use virtperf_workload::Raw;
// The output side (the store; reports, exports, comparisons, histories read from it) is a crate
// of its own.
use virtperf_record::store;
use virtperf_report::{compare, exit, export, history, report};

const AFTER_HELP: &str = "\
Exit status: 0 done; 1 failure (or every trial failed); 2 bad input (nothing created);
3 an environment cannot run here (see `virtperf doctor`); 4 a regression (compare, history, ab with
--fail-on); 5 no regression but an inconclusive metric (the same); 130 interrupted (resume with
`run --resume RUN`).";

#[derive(Parser)]
#[command(name = "virtperf", version, about = "A virtualization performance testbed: what does this isolation layer cost?", after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run an experiment (a TOML file, or --env/--workload flags) and print its report
    Run(Box<RunArgs>),
    /// Re-render the report of a stored run (default: the latest)
    #[command(
        after_help = "Examples:\n  virtperf report\n  virtperf report 3 --full\n  virtperf report --html report.html --svg figures/ --png figures/\n  virtperf report 3 --json\n  virtperf report --list"
    )]
    Report(ReportArgs),
    /// Compare two runs (of one database or two): each metric's change with its CI, regressions flagged
    #[command(
        after_help = "A run is RUN (in --db), DB (its latest run) or DB:RUN.\nExamples:\n  virtperf compare 1 2\n  virtperf compare old.db new.db --threshold 10\n  virtperf compare lab.db:3 virtperf.db:1 --json --fail-on 5% --junit verdicts.xml\n\nExit status with --fail-on: 4 a regression, 5 no regression but an inconclusive metric, 0 neither."
    )]
    Compare(CompareArgs),
    /// Every stored run of one experiment as a series per metric: change points, and a verdict on
    /// the latest run that CI can act on
    #[command(
        after_help = "A source is a database (every run in it), DB:RUN or a run id of --db; default: every run of --db.\nRuns are taken oldest first, those of the latest run's experiment name (or --name).\nExamples:\n  virtperf history\n  virtperf history nightly/*.db --fail-on 5% --junit history.xml\n  virtperf history --name default --last 20 --html history.html\n\nExit status with --fail-on: 4 the latest run regressed, 5 no regression but an inconclusive metric, 0 neither."
    )]
    History(HistoryArgs),
    /// Run two experiments interleaved run by run (A B B A …) on this host and compare them runs
    /// against runs: is B's change real or noise?
    #[command(
        after_help = "Each run is a whole `virtperf run` into DIR/a.db or DIR/b.db (its output in DIR/NN-A.log); the same --dir resumes.\nExamples:\n  virtperf ab before.toml after.toml --runs 4\n  virtperf ab a.toml b.toml --runs 6 --run-args '--reps 5' --fail-on 3% --junit ab.xml\n\nExit status with --fail-on: 4 B regressed, 5 no regression but an inconclusive metric, 0 neither."
    )]
    Ab(AbArgs),
    /// Predict a workload's overhead in every environment a stored explain run priced, before it
    /// runs there: the workload runs natively with its events counted, times each environment's
    /// price per event
    #[command(
        after_help = "The prices come from the latest run with explain = true in --db (virtperf run examples/explain.toml).\nExamples:\n  virtperf predict --workload 'command:cmd=tar -cf /tmp/t.tar /usr/share/doc'\n  virtperf predict --workload pde --workload 'command:cmd=sqlite3 /tmp/x.db \"VACUUM\"' --db lab.db --run 4 --json"
    )]
    Predict(PredictArgs),
    /// Write every raw sample of a run (default: the latest) as CSV or JSON
    #[command(
        after_help = "Examples:\n  virtperf export --format csv > samples.csv\n  virtperf export 3 --format json -o run3.json"
    )]
    Export(ExportArgs),
    /// List every environment kind, whether it is usable here, and the fix when it is not
    #[command(
        after_help = "Examples:\n  virtperf doctor          # launches each usable environment once and pings its agent\n  virtperf doctor --quick  # static checks only"
    )]
    Doctor(DoctorArgs),
    /// Build (or find in the cache) the guest image of the qemu environment
    #[command(subcommand)]
    Image(ImageCmd),
    /// Serve the agent protocol on stdin/stdout (started by virtperf inside each environment)
    #[command(
        after_help = "The protocol is documented in docs/protocol.md. Example:\n  echo '{\"v\":1,\"tag\":1,\"type\":\"ping\"}' | virtperf agent\n  virtperf agent --tty /dev/tty1   # inside a UML or QEMU guest: a console kept free of kernel messages"
    )]
    Agent(AgentArgs),
    /// On a remote host, for an orchestrator's SSH session: check environments (docs/remote.md)
    #[command(hide = true)]
    RemoteCheck,
    /// On a remote host, for an orchestrator's SSH session: launch one environment and relay its
    /// agent's line (docs/remote.md)
    #[command(hide = true)]
    RemoteLaunch,
}

#[derive(Subcommand)]
enum ImageCmd {
    /// Kernel from Debian's package (apt-get download, not installed), initramfs with busybox,
    /// this virtperf as the agent, the device models' kernel modules; cached by content hash
    #[command(
        after_help = "Examples:\n  virtperf image build\n  virtperf image build --extra iperf3 --json\n  virtperf image build --kernel-package linux-image-6.1.0-56-amd64\n  virtperf image build --kernel /boot/vmlinuz-custom   # modules built in\n  virtperf image build --uml      # the UML kernel (uml:kernel=virtperf)\n\nThe cache is $VIRTPERF_CACHE, else $XDG_CACHE_HOME/virtperf, else ~/.cache/virtperf."
    )]
    Build(ImageBuildArgs),
    /// Print a libvirt domain of virtperf's own guest whose agent answers on a unix socket, to
    /// define once and use as an existing domain (`libvirt:domain=NAME`)
    #[command(
        after_help = "Examples:\n  virtperf image domain-xml vp-guest --socket-dir /var/lib/virtperf/vp-guest > vp-guest.xml\n  virsh define vp-guest.xml\n  virtperf run --env libvirt:domain=vp-guest --workload memcpy\n\nThe sockets are made by QEMU when the domain starts; the directory must exist."
    )]
    DomainXml(DomainXmlArgs),
}

#[derive(Args)]
struct DomainXmlArgs {
    /// The domain's name
    name: String,
    /// Where QEMU makes the agent's socket (agent.sock) and the console's (console.sock)
    #[arg(long, value_name = "DIR")]
    socket_dir: PathBuf,
    /// A libvirt environment parameter (domain_type, vcpus, memory, uri), repeatable
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(Args)]
struct ImageBuildArgs {
    /// Debian kernel package [default: what linux-image-amd64 depends on]
    #[arg(long, conflicts_with = "kernel")]
    kernel_package: Option<String>,
    /// Your own kernel (bzImage or ELF) instead of Debian's; its drivers must be built in
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// Also copy this host program (with its libraries) into the guest (repeatable)
    #[arg(long, value_name = "PROGRAM")]
    extra: Vec<String>,
    /// Build virtperf's User-Mode Linux kernel instead (linux-source-6.12 with the xstate patch;
    /// for CPUs whose XSAVE area the packaged linux.uml cannot hold, e.g. AMX)
    #[arg(long, conflicts_with_all = ["kernel", "kernel_package", "extra"])]
    uml: bool,
    /// Compilers run at once for the UML kernel (default: this host's CPUs); 1 builds gently
    /// beside other work
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: Option<u16>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AgentArgs {
    /// Serve on this terminal device (put in raw mode) instead of stdin/stdout
    #[arg(long, value_name = "DEVICE")]
    tty: Option<PathBuf>,
}

/// `run --help`'s closing text: the environment kinds and workloads come from their registries,
/// so a new kind shows up here without an edit (clap wraps it to the terminal).
fn run_help() -> String {
    let envs: Vec<String> = env::REGISTRY
        .iter()
        .map(|k| {
            let keys: Vec<&str> = k.params().iter().map(|p| p.name).collect();
            if keys.is_empty() {
                k.kind().to_string()
            } else {
                format!("{} ({})", k.kind(), keys.join(", "))
            }
        })
        .collect();
    format!(
        "An experiment is environments × workloads × parameters × repetitions. Each --env/--workload value is
KIND[:key=value[,key=value]...]; `name=` sets the label shown in reports; a list `key=[a,b]` is swept.

Environments, with their keys (docs/environments/ has each): {envs}.
Workloads (docs/workloads.md lists their keys and metrics): {workloads}.

Examples:
  virtperf run examples/default.toml
  virtperf run --env native --env container:cpus=1 --workload memcpy:size=10MiB,copies=10 --reps 1000
  virtperf run --env native --env container --workload pde:n=[128,256] --reps 20 --json
  virtperf run --env native --env qemu:nic=virtio --env qemu:nic=e1000 --workload tcp_stream --reps 3
  virtperf run --resume 4
  virtperf run --resume 4 --retry-failed   # and the trials that failed (a host back up)",
        envs = envs.join("; "),
        workloads = virtperf_workload::kinds().join(", "),
    )
}

#[derive(Args)]
struct RunArgs {
    /// Experiment file (TOML); see examples/
    experiment: Option<PathBuf>,
    /// Add an environment: KIND[:key=value,...] (repeatable)
    #[arg(long = "env", value_name = "SPEC")]
    envs: Vec<String>,
    /// Add a workload: KIND[:key=value,...] (repeatable)
    #[arg(long = "workload", value_name = "SPEC")]
    workloads: Vec<String>,
    /// The private network of network workloads: mtu=N, rate=1gbit, delay=1ms, loss=0.1,
    /// tester_cpu=N (overrides the file's [lab] keys)
    #[arg(long, value_name = "KEY=VALUE,...")]
    lab: Option<String>,
    /// One knob at a time: KIND:KNOB[,KNOB...] adds to every environment of KIND one variant per
    /// value of each knob, each stated against it (docs/knobs.md; repeatable)
    #[arg(long = "knobs", value_name = "KIND:KNOB,...")]
    knobs: Vec<String>,
    /// Measured repetitions of every environment × workload [default: 10, or the file's]
    #[arg(long)]
    reps: Option<String>,
    /// Pause the environments not in a trial while it runs (cgroup freezer): true or false
    /// [default: true, or the file's `freeze_idle`]
    #[arg(long, value_name = "BOOL")]
    freeze_idle: Option<String>,
    /// Calibrated counts: equal (every environment the slowest one's 0.2 s count: equal work)
    /// or each (every environment its own) [default: equal, or the file's `counts`]
    #[arg(long)]
    counts: Option<String>,
    /// Explain the overheads: count every warm-up's events and add the mechanism cases that price
    /// them (true or false) [default: false, or the file's `explain`]; `report --explain` shows
    /// the model against the measurements (docs/explain.md)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    explain: Option<String>,
    /// Warm-up trials per environment × workload, stored but not counted [default: 1]
    #[arg(long)]
    warmup: Option<String>,
    /// Launches of each environment, a level of repetition: `reps` repetitions on each, the
    /// environment launched afresh between them [default: 1, or the file's `launches`]
    #[arg(long)]
    launches: Option<String>,
    /// Precision mode: repeat until each overhead ratio's 95 % CI half-width is within this
    /// (e.g. 2%), `reps` and `launches` being the minimum [default: off, or the file's]
    #[arg(long, value_name = "PERCENT")]
    precision: Option<String>,
    /// Precision mode's wall-time budget, e.g. 5m [default: 5m, or the file's `budget`]
    #[arg(long, value_name = "DURATION")]
    budget: Option<String>,
    /// Trial order: paired (case groups: every environment's trial of a case back to back, in
    /// random order), random (seeded shuffle per round), interleaved, sequential [default: paired]
    #[arg(long)]
    order: Option<String>,
    /// Seed of the random order [default: 1]
    #[arg(long)]
    seed: Option<String>,
    /// Per-trial deadline, e.g. 30s [default: 300s]
    #[arg(long)]
    timeout: Option<String>,
    /// Name of the run
    #[arg(long)]
    name: Option<String>,
    /// Results database
    #[arg(long, default_value = "virtperf.db")]
    db: PathBuf,
    /// Print one JSON document on stdout instead of the table
    #[arg(long)]
    json: bool,
    /// Print every figure with its interval (the long table and every matrix), not the summary
    #[arg(long)]
    full: bool,
    /// Also write the report as one self-contained HTML page
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write every metric in Bencher Metric Format (JSON that Bencher and dashboards read)
    #[arg(long, value_name = "FILE")]
    bencher: Option<PathBuf>,
    /// Validate the experiment and print its plan; create nothing
    #[arg(long)]
    dry_run: bool,
    /// Finish the pending trials of an interrupted run
    #[arg(long, value_name = "RUN", conflicts_with_all = ["experiment", "envs", "workloads"])]
    resume: Option<i64>,
    /// With --resume: also run again the trials that failed or were skipped (a host that was
    /// down is back); how each ended before is kept
    #[arg(long, requires = "resume")]
    retry_failed: bool,
    /// How long an environment may take from launch to agent ready
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    boot_timeout: Duration,
}

#[derive(Args)]
struct PredictArgs {
    /// The workload to predict: KIND[:key=value,...] (repeatable)
    #[arg(long = "workload", value_name = "SPEC")]
    workloads: Vec<String>,
    /// The database whose latest run with explain = true prices the events
    #[arg(long, default_value = "virtperf.db")]
    db: PathBuf,
    /// That run instead of the latest
    #[arg(long)]
    run: Option<i64>,
    /// One JSON document on stdout
    #[arg(long)]
    json: bool,
}

/// A flag's duration (`--boot-timeout`), up to an hour: a guest that is not up within one will
/// not be (TCG boots take seconds), and a longer one is a typo. Read by the one parser of
/// durations, the parameters' (`500ms`, `2s`, `1m 30s`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let ms = virtperf_workload::params::parse_duration_ms(s)
        .ok_or_else(|| format!("`{s}` is not a duration (e.g. 30s, 2m)"))?;
    let d = Duration::from_millis(ms);
    if d > Duration::from_secs(3600) || d.is_zero() {
        return Err(format!("`{s}`: a duration above 0 and at most 1h (e.g. 60s)"));
    }
    Ok(d)
}

#[derive(Args)]
struct ReportArgs {
    /// Run id (default: the latest)
    run: Option<i64>,
    #[arg(long, default_value = "virtperf.db")]
    db: PathBuf,
    /// One JSON document on stdout
    #[arg(long)]
    json: bool,
    /// List the runs in the database
    #[arg(long)]
    list: bool,
    /// Every figure with its interval (the long table and every matrix), not the summary
    #[arg(long)]
    full: bool,
    /// Write the report as one self-contained HTML page (figures inline; opens offline)
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write every figure as an SVG file into this directory (made if missing)
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Write every figure as a PNG file into this directory (made if missing; embedded font)
    #[arg(long, value_name = "DIR")]
    png: Option<PathBuf>,
    /// Write every metric in Bencher Metric Format (JSON that Bencher and dashboards read)
    #[arg(long, value_name = "FILE")]
    bencher: Option<PathBuf>,
    /// The ratios' estimate: paired (trials that ran side by side; the default where the run's
    /// order is paired) or unpaired (ratio of means, Fieller's interval), to compare
    #[arg(long, value_enum)]
    estimate: Option<EstimateArg>,
    /// Why each environment costs what it does: every overhead against the model of the run's
    /// counted events × their measured costs (a run with explain = true; docs/explain.md)
    #[arg(long)]
    explain: bool,
}

/// `--estimate`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum EstimateArg {
    Paired,
    Unpaired,
}

impl EstimateArg {
    fn estimate(self) -> report::paired::Estimate {
        match self {
            EstimateArg::Paired => report::paired::Estimate::Paired,
            EstimateArg::Unpaired => report::paired::Estimate::Unpaired,
        }
    }
}

#[derive(Args)]
struct CompareArgs {
    /// The earlier run: RUN, DB or DB:RUN
    a: String,
    /// The later run: RUN, DB or DB:RUN
    b: String,
    /// The database of bare run ids
    #[arg(long, default_value = "virtperf.db")]
    db: PathBuf,
    /// Smallest change, in %, that counts as a regression or improvement (beyond noise too)
    #[arg(long, default_value_t = 5.0)]
    threshold: f64,
    /// One JSON document on stdout
    #[arg(long)]
    json: bool,
    /// For CI: the smallest change that matters (e.g. 5%, replacing --threshold); exit 4 when a
    /// metric regressed by that much beyond noise, 5 when none did but some could have
    /// (inconclusive), 0 otherwise
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    fail_on: Option<f64>,
    /// --fail-on with --threshold's value
    #[arg(long, conflicts_with = "fail_on")]
    fail_on_regression: bool,
    /// Also write each metric's verdict as JUnit XML (a regression fails, inconclusive is skipped)
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Judge every row on its means, not environments on their overhead relative to the baseline
    #[arg(long)]
    raw: bool,
}

#[derive(Args)]
struct HistoryArgs {
    /// Databases (every run in each), DB:RUN, or run ids of --db [default: every run of --db]
    sources: Vec<String>,
    /// The database of bare run ids, and the default source
    #[arg(long, default_value = "virtperf.db")]
    db: PathBuf,
    /// Only runs of this experiment name [default: the latest run's]
    #[arg(long)]
    name: Option<String>,
    /// Only the latest N runs
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Smallest change, in %, that counts as a regression or improvement (beyond noise too)
    #[arg(long, default_value_t = 5.0)]
    threshold: f64,
    /// For CI: --threshold's value, and exit 4 when the latest run regressed, 5 when it may have
    /// (inconclusive)
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    fail_on: Option<f64>,
    /// Significance level of the change points
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    /// Fewest runs either side of a change point
    #[arg(long, default_value_t = 3)]
    min_runs: usize,
    /// Every series, not only those with a change or a latest run that is not unchanged
    #[arg(long)]
    all: bool,
    /// Follow every mean, not environments' overhead relative to the baseline
    #[arg(long)]
    raw: bool,
    /// One JSON document on stdout
    #[arg(long)]
    json: bool,
    /// Also write the history as a self-contained HTML page with a figure per metric
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write the latest run's verdicts as JUnit XML
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

#[derive(Args)]
struct AbArgs {
    /// Experiment A (TOML): the reference
    a: PathBuf,
    /// Experiment B (TOML): the change
    b: PathBuf,
    /// Runs of each side, interleaved A B B A A B …
    #[arg(long, default_value_t = 4)]
    runs: usize,
    /// Where the runs go (DIR/a.db, DIR/b.db, a log per run); an existing one is resumed
    /// [default: ab-YYYYMMDD-HHMMSS]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Flags for every `virtperf run`, as one string (e.g. '--reps 5 --warmup 1')
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    run_args: Option<String>,
    /// Smallest change, in %, that counts as a regression or improvement (beyond noise too)
    #[arg(long, default_value_t = 5.0)]
    threshold: f64,
    /// For CI: --threshold's value, and exit 4 when B regressed, 5 when it may have
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    fail_on: Option<f64>,
    /// Judge every row on its means, not environments on their overhead relative to the baseline
    #[arg(long)]
    raw: bool,
    /// One JSON document on stdout
    #[arg(long)]
    json: bool,
    /// Also write each metric's verdict as JUnit XML
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

/// `--fail-on 5%`: a percentage ≥ 0, with or without its sign.
fn parse_percent(s: &str) -> Result<f64, String> {
    let v = s.trim().trim_end_matches('%').trim();
    match v.parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!("`{s}` is not a percentage ≥ 0 (e.g. 5% or 2.5)")),
    }
}

/// `export --format`'s names, from the exporters' own list (each with its help).
fn export_formats() -> impl clap::builder::TypedValueParser<Value = export::Format> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        export::Format::FOR_EXPORT.iter().map(|(n, _, h)| PossibleValue::new(*n).help(*h)),
    )
    .try_map(|s| export::Format::for_export(&s))
}

#[derive(Args)]
struct ExportArgs {
    /// Run id (default: the latest)
    run: Option<i64>,
    #[arg(long, default_value = "virtperf.db")]
    db: PathBuf,
    #[arg(long, default_value = "csv", value_parser = export_formats())]
    format: export::Format,
    /// Write here instead of stdout
    #[arg(short, long)]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct DoctorArgs {
    /// Static checks only; do not launch anything
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    json: bool,
    /// Print this host's facts (what sizes and availability are decided from) in the format
    /// VIRTPERF_HOST_FACTS reads, and nothing else
    #[arg(long, conflicts_with_all = ["quick", "json"])]
    facts: bool,
}

/// Writes a command's output to stdout (see [`host::write_stdout`]).
fn out(text: &str) -> std::io::Result<()> {
    host::write_stdout(text.as_bytes())
}

fn experiment_from_args(a: &RunArgs) -> Result<experiment::Experiment, experiment::InputError> {
    let (mut raw, whole) = match &a.experiment {
        Some(path) => {
            if !a.envs.is_empty() || !a.workloads.is_empty() {
                return Err(experiment::InputError {
                    origin: Origin::Flag { flag: "--env/--workload", value: String::new() },
                    key: None,
                    message: "give either an experiment file or --env/--workload flags, not both".into(),
                });
            }
            let p = path.display().to_string();
            let text = experiment::read_file(path).map_err(|message| experiment::InputError {
                origin: Origin::File { path: p.clone(), line: 0 },
                key: None,
                message,
            })?;
            (experiment::read_toml(&p, &text)?, Origin::File { path: p, line: 1 })
        }
        None => {
            let mut raw = RawExperiment::default();
            for e in &a.envs {
                raw.envs.push(experiment::read_flag("--env", e)?);
            }
            for w in &a.workloads {
                raw.workloads.push(experiment::read_flag("--workload", w)?);
            }
            (raw, Origin::Flag { flag: "virtperf run", value: "(flags)".into() })
        }
    };
    let overrides: [(&'static str, &'static str, &Option<String>, bool); 12] = [
        ("--reps", "reps", &a.reps, true),
        ("--warmup", "warmup", &a.warmup, true),
        ("--launches", "launches", &a.launches, true),
        ("--precision", "precision", &a.precision, false),
        ("--budget", "budget", &a.budget, false),
        ("--freeze-idle", "freeze_idle", &a.freeze_idle, false),
        ("--counts", "counts", &a.counts, false),
        ("--explain", "explain", &a.explain, false),
        ("--seed", "seed", &a.seed, true),
        ("--order", "order", &a.order, false),
        ("--timeout", "timeout", &a.timeout, false),
        ("--name", "name", &a.name, false),
    ];
    for (flag, key, val, int) in overrides {
        if let Some(v) = val {
            let value = match (int, v.trim().parse::<i64>()) {
                (true, Ok(i)) => Raw::Int(i),
                _ => Raw::Str(v.clone()),
            };
            raw.settings.insert(
                key.to_string(),
                RawSetting { value, origin: Origin::Flag { flag, value: v.clone() } },
            );
        }
    }
    for k in &a.knobs {
        experiment::add_knobs(&mut raw, k)?;
    }
    if let Some(l) = &a.lab {
        for (k, v) in experiment::read_lab_flag(l)? {
            raw.settings.insert(k, v);
        }
    }
    experiment::validate(&raw, &whole)
}

fn cmd_run(a: RunArgs) -> anyhow::Result<ExitStatus> {
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let outputs = match export::choose(&export::Asked {
        json: a.json,
        full: a.full,
        html: a.html.as_deref(),
        bencher: a.bencher.as_deref(),
        ..Default::default()
    }) {
        Ok(t) => t,
        Err(e) => return Err(bad_input(e)),
    };
    let opts = run::RunOpts {
        db: a.db.clone(),
        progress: !a.json,
        outputs,
        boot_timeout: a.boot_timeout,
        command_line,
    };
    if !a.dry_run {
        // Sizes and availability of a measurement come from this machine, never a replacement.
        host::facts::refuse_override_for_measuring().map_err(bad_input)?;
    }
    if let Some(id) = a.resume {
        run::install_signal_handler();
        return run::resume(id, a.retry_failed, &opts);
    }
    let exp = match experiment_from_args(&a) {
        Ok(e) => e,
        Err(e) => return Err(bad_input(e)),
    };
    if a.dry_run {
        let mut exp = exp;
        if exp.skip_unavailable {
            match run::drop_unavailable(&mut exp, false) {
                Ok(skipped) => {
                    for (name, why) in skipped {
                        println!("would skip environment `{name}`: this host cannot run it ({why})");
                    }
                }
                Err(why) => {
                    println!("cannot run here: {why}");
                    return Ok(ExitStatus::Unavailable);
                }
            }
        }
        let plan = plan::make(&exp);
        println!("experiment \"{}\": valid", exp.name);
        println!("environments: {}", exp.envs.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", "));
        println!("cases: {}", exp.cases.iter().map(|c| c.label.as_str()).collect::<Vec<_>>().join(", "));
        println!(
            "{} trials ({} warm-up), order {}, seed {}, per-trial timeout {} ms",
            plan.len(),
            plan.iter().filter(|t| t.warmup).count(),
            exp.order.as_str(),
            exp.seed,
            exp.timeout_ms
        );
        if exp.launches > 1 {
            println!(
                "{} launches of each environment, {} repetitions on each: intervals cover launch-to-launch variation",
                exp.launches, exp.reps
            );
        }
        if let Some(p) = &exp.precision {
            println!(
                "precision mode: after that minimum, more {} until each ratio's 95 % CI is within ±{}% (intervals at the {} % level, which keeps 95 % coverage under the rule), for at most {}",
                if exp.launches > 1 { "launches" } else { "repetitions" },
                p.percent,
                virtperf_stats::sequential::LEVEL * 100.0,
                humantime::format_duration(Duration::from_millis(p.budget_ms))
            );
        }
        let calibrated: Vec<&str> = exp
            .cases
            .iter()
            .filter(|c| {
                virtperf_workload::find(&c.kind)
                    .and_then(|w| w.calibrates())
                    .is_some_and(|k| !c.network && !c.params.contains_key(k))
            })
            .map(|c| c.label.as_str())
            .collect();
        if !calibrated.is_empty() {
            println!(
                "calibrated in each environment to their target_time (operations per trial): {}",
                calibrated.join(", ")
            );
        }
        let mut machines: Vec<&str> =
            exp.envs.iter().map(|e| e.host.as_deref().unwrap_or(experiment::LOCAL_HOST)).collect();
        machines.sort_unstable();
        machines.dedup();
        if machines.len() > 1 {
            println!(
                "{} workers at once, one per host ({}); trials with a tester take turns on this machine",
                machines.len(),
                machines.join(", ")
            );
        }
        if let Some(t) = &exp.lab.tester_host {
            println!("the tester runs on host {t}; network workloads cross your network to it");
        }
        let facts = host::facts();
        if !facts.measured() {
            println!(
                "host facts from {} (not this machine's): {}",
                facts.profile.as_deref().unwrap_or(&facts.source),
                facts.brief()
            );
        }
        for z in &exp.sizings {
            println!("sized from the host: {}", z.line());
        }
        if let Err(why) = run::preflight(&exp, false) {
            println!("cannot run here:\n{why}");
            return Ok(ExitStatus::Unavailable);
        }
        return Ok(ExitStatus::Success);
    }
    run::install_signal_handler();
    run::run_new(exp, &opts)
}

fn pick_run(store: &store::Store, run: Option<i64>) -> anyhow::Result<i64> {
    match run {
        Some(r) => store.run(r).map(|_| r),
        None => store.latest_run()?.ok_or_else(|| anyhow::anyhow!("the database holds no run yet")),
    }
}

fn cmd_report(a: ReportArgs) -> anyhow::Result<ExitStatus> {
    let store = match store::Store::open_read(&a.db) {
        Ok(s) => s,
        Err(e) => return Err(bad_input(e)),
    };
    if a.list {
        for r in store.runs()? {
            out(&format!("{:>4}  {:<12} {}  {}\n", r.id, r.status, r.started_at, r.name))?;
        }
        return Ok(ExitStatus::Success);
    }
    let id = match pick_run(&store, a.run) {
        Ok(i) => i,
        Err(e) => return Err(bad_input(e)),
    };
    let outputs = match export::choose(&export::Asked {
        json: a.json,
        full: a.full,
        html: a.html.as_deref(),
        svg: a.svg.as_deref(),
        png: a.png.as_deref(),
        bencher: a.bencher.as_deref(),
        files_only_when_asked: true,
    }) {
        Ok(t) => t,
        Err(e) => return Err(bad_input(e)),
    };
    let rows = store.load(id)?;
    let rep = report::build_with(&rows, a.estimate.map(EstimateArg::estimate))?;
    if a.explain && !a.json {
        let Some(x) = &rep.explain else {
            return Err(bad_input(format!(
                "run {id} counted no events to explain its overheads with: run the experiment with explain = true (or virtperf run --explain)"
            )));
        };
        out(&report::explain::render(x, report::summary::terminal_width()))?;
        return Ok(ExitStatus::Success);
    }
    export::write(&outputs, &export::RunData::new(&rows, &rep))?;
    Ok(ExitStatus::Success)
}

fn cmd_compare(a: CompareArgs) -> anyhow::Result<ExitStatus> {
    if !(a.threshold.is_finite() && a.threshold >= 0.0) {
        return Err(bad_input(format!("--threshold {}: a percentage ≥ 0 (e.g. 5)", a.threshold)));
    }
    if let Some(j) = &a.junit {
        export::check_writable(j).map_err(|e| bad_input(format!("--junit: {e}")))?;
    }
    let fail = a.fail_on.is_some() || a.fail_on_regression;
    let threshold = a.fail_on.unwrap_or(a.threshold);
    let mut reports = Vec::new();
    for s in [&a.a, &a.b] {
        let r = match compare::parse_ref(s, &a.db) {
            Ok(r) => r,
            Err(e) => return Err(bad_input(e)),
        };
        let store = match store::Store::open_read(&r.db) {
            Ok(st) => st,
            Err(e) => return Err(bad_input(format!("{s}: {e:#}"))),
        };
        let id = match pick_run(&store, r.run) {
            Ok(i) => i,
            Err(e) => return Err(bad_input(format!("{s}: {e:#}"))),
        };
        let rep = report::build(&store.load(id)?)?;
        reports.push((format!("run {id} \"{}\" of {} ({})", rep.name, r.db.display(), rep.started_at), rep));
    }
    let ((an, ar), (bn, br)) = (&reports[0], &reports[1]);
    let c = compare::compare(ar, an, br, bn, threshold, a.raw);
    if c.changes.is_empty() {
        return Err(bad_input(format!(
            "nothing to compare: no environment / workload / metric of {an} is in {bn} (A has {}; B has {})",
            c.only_in_a.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            c.only_in_b.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    if a.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&c)?))?;
    } else {
        out(&compare::render(&c))?;
    }
    if let Some(j) = &a.junit {
        let xml =
            export::junit::render("virtperf compare", &format!("{an} → {bn}"), &compare::junit_cases(&c))?;
        write_file(j, xml.as_bytes(), "JUnit verdicts")?;
    }
    Ok(compare::exit_status(c.regressions, c.inconclusive, fail))
}

fn cmd_history(a: HistoryArgs) -> anyhow::Result<ExitStatus> {
    if !(a.threshold.is_finite() && a.threshold >= 0.0) {
        return Err(bad_input(format!("--threshold {}: a percentage ≥ 0 (e.g. 5)", a.threshold)));
    }
    if !(a.alpha > 0.0 && a.alpha < 1.0) {
        return Err(bad_input(format!("--alpha {}: a level between 0 and 1 (e.g. 0.05)", a.alpha)));
    }
    if a.min_runs < 2 {
        return Err(bad_input(format!("--min-runs {}: at least 2 runs a side", a.min_runs)));
    }
    if a.last == Some(0) {
        return Err(bad_input("--last 0: at least one run"));
    }
    for (flag, f) in [("--html", &a.html), ("--junit", &a.junit)] {
        if let Some(f) = f {
            export::check_writable(f).map_err(|e| bad_input(format!("{flag}: {e}")))?;
        }
    }
    let sources = if a.sources.is_empty() { vec![a.db.display().to_string()] } else { a.sources.clone() };
    // Every run the sources name, once: (db, id, info), oldest first.
    let mut found: Vec<(PathBuf, store::RunInfo)> = Vec::new();
    for s in &sources {
        let r = compare::parse_ref(s, &a.db).map_err(bad_input)?;
        let store = store::Store::open_read(&r.db).map_err(|e| bad_input(format!("{s}: {e:#}")))?;
        let infos = match r.run {
            Some(id) => vec![store.run(id).map_err(|e| bad_input(format!("{s}: {e:#}")))?],
            None => store.runs()?,
        };
        for info in infos {
            if !found.iter().any(|(db, i)| *db == r.db && i.id == info.id) {
                found.push((r.db.clone(), info));
            }
        }
    }
    found.sort_by(|(_, x), (_, y)| {
        let t = |i: &store::RunInfo| store::epoch_ms(&i.started_at).unwrap_or(f64::NAN);
        t(x).total_cmp(&t(y))
    });
    let Some(name) = a.name.clone().or_else(|| found.last().map(|(_, i)| i.name.clone())) else {
        return Err(bad_input(format!("{}: no run to follow", sources.join(", "))));
    };
    let mut skipped = Vec::new();
    let mut keep: Vec<(PathBuf, store::RunInfo)> = Vec::new();
    for (db, info) in found {
        let label = format!("{}:{}", db.display(), info.id);
        if info.name != name {
            continue;
        }
        if info.status != store::RunStatus::Completed {
            skipped.push(format!("{label} ({})", info.status));
            continue;
        }
        keep.push((db, info));
    }
    if keep.is_empty() {
        return Err(bad_input(format!("no completed run named \"{name}\" in {}", sources.join(", "))));
    }
    if let Some(n) = a.last {
        let cut = keep.len().saturating_sub(n);
        keep.drain(..cut);
    }
    let mut runs = Vec::new();
    for (db, info) in keep {
        let store = store::Store::open_read(&db)?;
        let rep = report::build(&store.load(info.id)?)?;
        let point = history::RunPoint {
            db: db.display().to_string(),
            run: info.id,
            name: info.name.clone(),
            started_at: info.started_at.clone(),
        };
        runs.push((point, rep));
    }
    let opts = history::Options {
        threshold_pct: a.fail_on.unwrap_or(a.threshold),
        alpha: a.alpha,
        min_runs: a.min_runs,
        raw: a.raw,
    };
    let h = history::build(&name, runs, skipped, &opts);
    if a.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&h)?))?;
    } else {
        out(&history::render(&h, a.all))?;
    }
    if let Some(f) = &a.html {
        write_file(f, history::page(&h).as_bytes(), "HTML history")?;
    }
    if let Some(j) = &a.junit {
        let suite = format!("history of {name}: the latest run");
        let xml = export::junit::render("virtperf history", &suite, &history::junit_cases(&h))?;
        write_file(j, xml.as_bytes(), "JUnit verdicts")?;
    }
    Ok(compare::exit_status(h.regressions, h.inconclusive, a.fail_on.is_some()))
}

fn cmd_predict(a: PredictArgs) -> anyhow::Result<ExitStatus> {
    host::facts::refuse_override_for_measuring().map_err(bad_input)?;
    run::install_signal_handler();
    let opts = predict::Opts {
        workloads: a.workloads,
        costs_db: a.db,
        costs_run: a.run,
        json: a.json,
        boot_timeout: Duration::from_secs(60),
    };
    let answer = predict::predict(&opts)?;
    if a.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&answer)?))?;
    } else {
        out(&predict::render(&answer, report::summary::terminal_width()))?;
    }
    Ok(ExitStatus::Success)
}

fn cmd_ab(a: AbArgs) -> anyhow::Result<ExitStatus> {
    if !(a.threshold.is_finite() && a.threshold >= 0.0) {
        return Err(bad_input(format!("--threshold {}: a percentage ≥ 0 (e.g. 5)", a.threshold)));
    }
    if a.runs < 2 {
        return Err(bad_input(format!(
            "--runs {}: at least 2 runs a side (an interval over runs needs two)",
            a.runs
        )));
    }
    if let Some(j) = &a.junit {
        export::check_writable(j).map_err(|e| bad_input(format!("--junit: {e}")))?;
    }
    let run_args = match &a.run_args {
        Some(s) => {
            shlex::split(s).ok_or_else(|| bad_input(format!("--run-args `{s}`: unbalanced quotes")))?
        }
        None => Vec::new(),
    };
    if let Some(bad) =
        run_args.iter().find(|f| matches!(f.as_str(), "--db" | "--resume" | "--dry-run" | "--json"))
    {
        return Err(bad_input(format!("--run-args: {bad} is ab's to set, not a run flag to pass")));
    }
    let dir = a.dir.clone().unwrap_or_else(|| {
        let now = store::now_rfc3339().replace(['-', ':'], "");
        PathBuf::from(format!("ab-{}", now.get(..15).unwrap_or(&now).replace('T', "-")))
    });
    let opts = ab::Opts { a: a.a.clone(), b: a.b.clone(), runs: a.runs, dir, run_args };
    let child = |e: anyhow::Error| -> anyhow::Result<ExitStatus> {
        match e.downcast_ref::<ab::ChildFailed>().and_then(|c| c.code) {
            Some(2) => Err(bad_input(e)),
            Some(3) => {
                eprintln!("virtperf: {e:#}");
                Ok(ExitStatus::Unavailable)
            }
            Some(130) => {
                eprintln!("virtperf: {e:#}\n(`virtperf ab` with the same --dir resumes)");
                Ok(ExitStatus::Interrupted)
            }
            _ => Err(e),
        }
    };
    // SIGINT/SIGTERM reach the run in progress (ab::run_all forwards them) and end the sequence.
    run::install_signal_handler();
    if let Err(e) = ab::validate(&opts) {
        return child(e);
    }
    if let Err(e) = ab::run_all(&opts) {
        return child(e);
    }
    let (ra, rb) = (ab::reports(&opts.db(ab::Side::A))?, ab::reports(&opts.db(ab::Side::B))?);
    let name = |s: ab::Side, n: usize| {
        format!("{} ({n} run(s) in {})", opts.file(s).display(), opts.db(s).display())
    };
    let threshold = a.fail_on.unwrap_or(a.threshold);
    let c = compare::compare_runs(
        &ra,
        &name(ab::Side::A, ra.len()),
        &rb,
        &name(ab::Side::B, rb.len()),
        threshold,
        a.raw,
    );
    if c.changes.is_empty() {
        return Err(bad_input(format!(
            "nothing to compare: A and B share no environment / workload / metric (A has {}; B has {})",
            c.only_in_a.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            c.only_in_b.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    if a.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&c)?))?;
    } else {
        out("Interleaved A B B A …; each figure is a run's, B/A the ratio of geometric means over runs with Welch's 95 % interval.\n")?;
        out(&compare::render(&c))?;
    }
    if let Some(j) = &a.junit {
        let xml = export::junit::render("virtperf ab", "A → B", &compare::junit_cases(&c))?;
        write_file(j, xml.as_bytes(), "JUnit verdicts")?;
    }
    Ok(compare::exit_status(c.regressions, c.inconclusive, a.fail_on.is_some()))
}

/// Writes a whole file atomically and says so on stderr.
fn write_file(path: &std::path::Path, bytes: &[u8], what: &str) -> anyhow::Result<()> {
    host::write_atomic(path, bytes)
        .map_err(|e| anyhow::anyhow!("cannot write the {what} {}: {e}", path.display()))?;
    eprintln!("virtperf: {what} → {}", path.display());
    Ok(())
}

fn cmd_export(a: ExportArgs) -> anyhow::Result<ExitStatus> {
    let store = match store::Store::open_read(&a.db) {
        Ok(s) => s,
        Err(e) => return Err(bad_input(e)),
    };
    let id = match pick_run(&store, a.run) {
        Ok(i) => i,
        Err(e) => return Err(bad_input(e)),
    };
    let target =
        export::Target::new(a.format, a.output.map(export::Dest::File).unwrap_or(export::Dest::Stdout));
    if let Err(e) = target.check() {
        return Err(bad_input(format!("-o: {e}")));
    }
    let rows = store.load(id)?;
    let rep = report::build(&rows)?;
    export::write(&[target], &export::RunData::new(&rows, &rep))?;
    Ok(ExitStatus::Success)
}

fn cmd_doctor(a: DoctorArgs) -> anyhow::Result<ExitStatus> {
    let facts = host::facts();
    if a.facts {
        out(&facts.to_toml())?;
        return Ok(ExitStatus::Success);
    }
    // Another machine's facts: nothing is launched here on its behalf.
    let probe = !a.quick && facts.measured();
    let rows = doctor::check(probe);
    if a.json {
        let kinds: BTreeMap<&str, &str> = env::REGISTRY.iter().map(|k| (k.kind(), k.summary())).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"environments": rows, "kinds": kinds, "host_facts": facts})
            )?
        );
    } else {
        print!("{}", doctor::render(&rows));
    }
    Ok(ExitStatus::Success)
}

fn cmd_image_build_uml(json: bool, jobs: Option<u16>) -> anyhow::Result<ExitStatus> {
    let jobs = jobs.map_or_else(host::host_cpus, usize::from);
    let k = match image::uml::ensure(&image::cache_dir(), jobs) {
        Ok(k) => k,
        Err(image::ImageError::Missing(m)) => {
            eprintln!("error: {m}");
            return Ok(ExitStatus::Unavailable);
        }
        Err(e) => anyhow::bail!("cannot build the UML kernel: {e}"),
    };
    let probe = env::uml::probe(&k.path, "virtperf's UML kernel");
    if json {
        let mut v = serde_json::to_value(&k)?;
        v["boots_here"] = serde_json::Value::from(probe.ok);
        v["host_xsave_bytes"] = serde_json::json!(host::facts().xsave_enabled);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "UML kernel ({} in {:.1} s)\n  source  {} + image/uml/xstate.patch\n  kernel  {}\n  boots here: {}",
            if k.built { "built" } else { "up to date" },
            k.seconds,
            k.source,
            k.path.display(),
            if probe.ok { "yes".to_string() } else { format!("no: {}", probe.reason) }
        );
    }
    Ok(if probe.ok { ExitStatus::Success } else { ExitStatus::Failure })
}

fn cmd_image_build(a: ImageBuildArgs) -> anyhow::Result<ExitStatus> {
    if a.uml {
        return cmd_image_build_uml(a.json, a.jobs);
    }
    if a.jobs.is_some() {
        eprintln!("error: --jobs sets the compilers of the UML kernel's build: give it with --uml");
        return Ok(ExitStatus::BadInput);
    }
    let spec = image::ImageSpec {
        kernel: match a.kernel {
            Some(k) => image::KernelSource::File(k),
            None => image::KernelSource::Debian(a.kernel_package),
        },
        extra: a.extra,
        drivers: image::DEVICE_MODULES.iter().map(|s| s.to_string()).collect(),
    };
    let exe = std::env::current_exe()?;
    let cache = image::cache_dir();
    let img = match image::ensure(&spec, &exe, &cache) {
        Ok(i) => i,
        Err(image::ImageError::Missing(m)) => {
            eprintln!("error: {m}");
            return Ok(ExitStatus::Unavailable);
        }
        Err(e) => anyhow::bail!("cannot build the guest image: {e}"),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&img)?);
    } else {
        println!(
            "image {} ({} in {:.2} s)\n  kernel    {} (release {})\n  vmlinux   {}\n  initramfs {}\n  modules   {}",
            img.hash,
            if img.built { "built" } else { "up to date" },
            img.seconds,
            img.kernel_source,
            img.kernel_release,
            img.vmlinux.display(),
            img.initramfs.display(),
            img.modules.join(" ")
        );
    }
    Ok(ExitStatus::Success)
}

fn cmd_domain_xml(a: DomainXmlArgs) -> anyhow::Result<ExitStatus> {
    let kind = &env::libvirt::Libvirt as &dyn env::Environment;
    let mut raw = BTreeMap::new();
    for kv in &a.set {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(bad_input(format!("--set {kv}: expected KEY=VALUE, e.g. --set vcpus=2")));
        };
        raw.insert(k.trim().to_string(), Raw::Str(v.trim().to_string()));
    }
    let params = virtperf_workload::params::resolve(kind.params(), &raw)
        .map_err(|e| bad_input(format!("--set: {e}")))?;
    kind.check(&params).map_err(|e| bad_input(format!("--set {}: {}", e.key, e.message)))?;
    if !a.socket_dir.is_absolute() {
        return Err(bad_input(format!(
            "--socket-dir {}: give an absolute path (QEMU makes the sockets there)",
            a.socket_dir.display()
        )));
    }
    let xml =
        env::libvirt::example_domain_xml(&params, &a.name, &a.socket_dir).map_err(anyhow::Error::msg)?;
    host::write_stdout(xml.as_bytes())?;
    Ok(ExitStatus::Success)
}

fn main() -> ExitCode {
    host::panics::install_hook();
    // A database stored before its cases had records is described, once, by this build's
    // workloads as it is migrated (virtperf_record::catalog).
    virtperf_record::catalog::install(&virtperf_workload::DESCRIBER);
    // `run --help` lists what the registries hold (see run_help).
    let matches = Cli::command().mut_subcommand("run", |c| c.after_help(run_help())).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The host's facts may be replaced for validation (VIRTPERF_HOST_FACTS): a bad file is bad
    // input, refused before anything else (never in the agent, which runs inside environments).
    if let Err(e) = host::panics::failpoints_from_env() {
        eprintln!("error: {e}");
        return ExitCode::from(ExitStatus::BadInput);
    }
    if !matches!(cli.cmd, Cmd::Agent(_)) {
        if let Err(e) = host::facts::init() {
            eprintln!("error: {e}");
            return ExitCode::from(ExitStatus::BadInput);
        }
    }
    let res = match cli.cmd {
        Cmd::Run(a) => cmd_run(*a),
        Cmd::Report(a) => cmd_report(a),
        Cmd::Compare(a) => cmd_compare(a),
        Cmd::History(a) => cmd_history(a),
        Cmd::Ab(a) => cmd_ab(a),
        Cmd::Predict(a) => cmd_predict(a),
        Cmd::Export(a) => cmd_export(a),
        Cmd::Doctor(a) => cmd_doctor(a),
        Cmd::Image(ImageCmd::Build(a)) => cmd_image_build(a),
        Cmd::Image(ImageCmd::DomainXml(a)) => cmd_domain_xml(a),
        Cmd::RemoteCheck => {
            remote::serve::check_main().map(|()| ExitStatus::Success).map_err(anyhow::Error::from)
        }
        Cmd::RemoteLaunch => {
            remote::serve::launch_main().map(|()| ExitStatus::Success).map_err(anyhow::Error::from)
        }
        Cmd::Agent(a) => {
            return match agent::main(a.tty.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                // A closed pipe means the host went away: nothing to report to.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("agent: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    let status = match res {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            e.exit_status()
        }
    };
    ExitCode::from(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_help_names_every_registered_kind_within_100_columns() {
        let mut cmd = Cli::command().term_width(100).mut_subcommand("run", |c| c.after_help(run_help()));
        let h = cmd.find_subcommand_mut("run").unwrap().render_long_help().to_string();
        // Wrapped lines may split a kind from its neighbours, never a kind itself.
        let words: Vec<&str> = h.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).collect();
        for k in env::REGISTRY.iter().map(|k| k.kind()).chain(virtperf_workload::kinds()) {
            assert!(words.contains(&k), "`{k}` missing from run --help:\n{h}");
        }
        for l in h.lines() {
            assert!(l.chars().count() <= 100, "a line of {} columns: {l}", l.chars().count());
        }
    }
}
