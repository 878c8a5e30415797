//! Every output of a run, one file per format, as hyperfine's `export/`: an [`Exporter`] turns a
//! stored run into named parts of bytes; a [`Target`] pairs a [`Format`] with where it goes; and
//! [`write`] is the one place that writes them — to stdout (a reader that went away is not an
//! error), to a file (atomically: a reader never sees half of one) or into a directory.
//!
//! To add a format: a file here with its exporter (the trait is in `exporter.rs`), a variant of
//! [`Format`] and its line in [`Format::exporter`]; then a flag that asks for it (main.rs).

pub mod bencher;
mod csv;
mod exporter;
mod html;
mod json;
pub mod junit;
mod png;
mod samples;
mod text;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use exporter::{Exporter, RunData};

use crate::files::{write_atomic, write_stdout};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The 100-column summary (`run`, `report`).
    Summary,
    /// Every figure of every case (`--full`).
    Table,
    /// The report as JSON (`--json`).
    Json,
    /// Every raw sample as CSV (`export --format csv`).
    Csv,
    /// Every trial with its samples, detail and CPU series as JSON (`export --format json`).
    Samples,
    /// The self-contained HTML page (`--html FILE`).
    Html,
    /// Every figure as its own SVG file (`--svg DIR`).
    Svg,
    /// Every figure as a PNG file (`--png DIR`), drawn with an embedded font.
    Png,
    /// Each metric in Bencher Metric Format (`--bencher FILE`).
    Bencher,
}

impl Format {
    /// What `virtperf export --format NAME` writes: the names the command accepts, each with its
    /// format and what it is. The one list (the CLI parses with [`Format::for_export`]).
    pub const FOR_EXPORT: &'static [(&'static str, Format, &'static str)] = &[
        ("csv", Format::Csv, "every raw sample as CSV"),
        ("json", Format::Samples, "every trial with its samples, detail and CPU series as JSON"),
    ];

    /// The format `export --format NAME` names, or what it accepts.
    pub fn for_export(name: &str) -> Result<Format, String> {
        Self::FOR_EXPORT.iter().find(|(n, _, _)| *n == name).map(|(_, f, _)| *f).ok_or_else(|| {
            let names: Vec<&str> = Self::FOR_EXPORT.iter().map(|(n, _, _)| *n).collect();
            format!("`{name}` is not an export format; give one of: {}", names.join(", "))
        })
    }

    pub fn exporter(self) -> Box<dyn Exporter> {
        match self {
            Format::Summary => Box::new(text::Summary),
            Format::Table => Box::new(text::Table),
            Format::Json => Box::new(json::ReportJson),
            Format::Csv => Box::new(csv::SamplesCsv),
            Format::Samples => Box::new(samples::SamplesJson),
            Format::Html => Box::new(html::HtmlPage),
            Format::Svg => Box::new(html::SvgFigures),
            Format::Png => Box::new(png::PngFigures),
            Format::Bencher => Box::new(bencher::BencherJson),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    Stdout,
    File(PathBuf),
    /// A directory, made if missing, one file per part.
    Dir(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub format: Format,
    pub dest: Dest,
}

impl Target {
    pub fn new(format: Format, dest: Dest) -> Self {
        Target { format, dest }
    }
    /// Refuses a destination the output could not be written to, before anything runs.
    pub fn check(&self) -> Result<(), String> {
        match &self.dest {
            Dest::Stdout => Ok(()),
            Dest::File(p) => check_writable(p),
            Dest::Dir(d) => {
                if d.exists() && !d.is_dir() {
                    return Err(format!("{} exists and is not a directory", d.display()));
                }
                if !d.exists() && !d.parent().is_none_or(|p| p.as_os_str().is_empty() || p.is_dir()) {
                    return Err(format!("the parent of {} does not exist", d.display()));
                }
                Ok(())
            }
        }
    }
}

/// What the flags of `run` and `report` ask for (their outputs, [`choose`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    /// `--json`: the JSON report on stdout.
    pub json: bool,
    /// `--full`: the full table on stdout.
    pub full: bool,
    pub html: Option<&'a Path>,
    pub svg: Option<&'a Path>,
    pub png: Option<&'a Path>,
    pub bencher: Option<&'a Path>,
    /// `report`: stdout stays empty when only files were asked for.
    pub files_only_when_asked: bool,
}

/// The outputs that the flags of `run` and `report` ask for — the one place that chooses them.
/// Stdout gets the JSON report (`--json`), the full table (`--full`) or the summary; `report`
/// leaves it empty when it was asked only for files (`files_only_when_asked`). `--html FILE` and
/// `--svg DIR` add their files, each checked here, before anything runs; the error names the flag.
pub fn choose(a: &Asked) -> Result<Vec<Target>, String> {
    let Asked { json, full, html, svg, png, bencher, files_only_when_asked } = *a;
    let mut targets = Vec::new();
    if json {
        targets.push(Target::new(Format::Json, Dest::Stdout));
    } else if full {
        targets.push(Target::new(Format::Table, Dest::Stdout));
    } else if !(files_only_when_asked
        && (html.is_some() || svg.is_some() || png.is_some() || bencher.is_some()))
    {
        targets.push(Target::new(Format::Summary, Dest::Stdout));
    }
    for (flag, format, dest) in [
        ("--html", Format::Html, html.map(|p| Dest::File(p.to_path_buf()))),
        ("--svg", Format::Svg, svg.map(|d| Dest::Dir(d.to_path_buf()))),
        ("--png", Format::Png, png.map(|d| Dest::Dir(d.to_path_buf()))),
        ("--bencher", Format::Bencher, bencher.map(|p| Dest::File(p.to_path_buf()))),
    ] {
        if let Some(dest) = dest {
            let t = Target::new(format, dest);
            t.check().map_err(|e| format!("{flag}: {e}"))?;
            targets.push(t);
        }
    }
    Ok(targets)
}

/// Writes every target, in order; files and directories are announced on stderr.
pub fn write(targets: &[Target], run: &RunData) -> Result<()> {
    for t in targets {
        let ex = t.format.exporter();
        let parts = ex.serialize(run)?;
        match &t.dest {
            Dest::Stdout => {
                for p in &parts {
                    write_stdout(&p.bytes)?;
                }
            }
            Dest::File(path) => {
                let bytes: Vec<u8> = parts.into_iter().flat_map(|p| p.bytes).collect();
                write_atomic(path, &bytes)
                    .map_err(|e| anyhow::anyhow!("cannot write the {} {}: {e}", ex.what(), path.display()))?;
                eprintln!("virtperf: {} → {}", ex.what(), path.display());
            }
            Dest::Dir(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
                let n = parts.len();
                for (i, p) in parts.into_iter().enumerate() {
                    let path = dir.join(p.name.unwrap_or_else(|| format!("part-{i}")));
                    write_atomic(&path, &p.bytes)
                        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                }
                eprintln!("virtperf: {n} {} → {}", ex.what(), dir.display());
            }
        }
    }
    Ok(())
}

/// Refuses a path a file could not be written to: its directory must exist and take a new file.
pub fn check_writable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!(
            "{} is a directory; give a file name (e.g. {}/report.html)",
            path.display(),
            path.display()
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "cannot write {}: the directory {} does not exist",
            path.display(),
            dir.display()
        ));
    }
    let probe = dir.join(format!(".virtperf-probe-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("cannot write {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtperf_record::store::{RunRows, Store};

    /// A run made by hand, the same every time: native and a container, a fixed-work workload
    /// (memcpy) and a network one (tcp_stream, with CPU series and detail), five repetitions of
    /// known values each, one failed trial; timestamps fixed.
    fn fixture_run(dir: &Path) -> RunRows {
        use virtperf_record::store::{NewEnv, PlannedTrial, TrialOutcome, TrialStatus};
        let db = dir.join("fixture.db");
        let mut s = Store::open(&db).unwrap();
        let env = NewEnv::of_kind;
        let plan: Vec<PlannedTrial> =
            (0..20).map(|i| PlannedTrial::alternating(i, ((i / 2) % 2) as usize, i / 4)).collect();
        let cases = [
            crate::report::described(
                "memcpy",
                "memcpy",
                "memcpy:size=4MiB",
                serde_json::json!({"size": "4MiB"}),
            ),
            crate::report::described("tcp_stream", "tcp_stream", "tcp_stream", serde_json::json!({})),
        ];
        let run = s
            .create_run(&virtperf_record::store::NewRun {
                name: "fixture",
                experiment_toml: "reps = 5\n",
                manifest: &serde_json::json!({"git_revision": "fixture"}),
                envs: &[env("native"), env("container")],
                cases: &cases,
                metrics: &virtperf_workload::metric_records(),
                plan: &plan,
            })
            .unwrap();
        for t in s.pending_trials(run).unwrap() {
            let k = t.rep as f64;
            let smp = |metric: &str, value: f64, unit: &str| virtperf_proto::Sample {
                metric: metric.into(),
                value,
                unit: unit.into(),
            };
            let container = t.env_idx == 1;
            let o = if container && t.case_idx == 1 && t.rep == 4 {
                TrialOutcome {
                    status: TrialStatus::Failed,
                    reason: Some("the agent stopped answering".into()),
                    ..Default::default()
                }
            } else if t.case_idx == 0 {
                let ms = if container { 10.5 + 0.1 * k } else { 10.0 + 0.1 * k };
                TrialOutcome {
                    status: TrialStatus::Ok,
                    samples: vec![smp("memcpy_time", ms, "ms")],
                    host_ns: Some((ms * 1e6) as u64 + 20_000),
                    guest_ns: Some((ms * 1e6) as u64),
                    rtt_ns: Some(20_000),
                    rtt_jitter_ns: Some(1_000),
                    host_cpu_ns: Some((ms * 1e6) as u64),
                    ..Default::default()
                }
            } else {
                let g = if container { 9.0 - 0.1 * k } else { 9.4 - 0.1 * k };
                TrialOutcome {
                    status: TrialStatus::Ok,
                    samples: vec![smp("tcp_goodput", g, "Gbit/s"), smp("tcp_retransmits", k, "segments")],
                    host_cpu_ns: Some(900_000_000 + t.rep as u64 * 1_000_000),
                    tester_cpu_ns: Some(800_000_000),
                    cpu_series: vec![
                        ("dut", 0.0, 0),
                        ("dut", 500.0, 450_000_000),
                        ("dut", 1000.0, 900_000_000),
                    ],
                    extra: Some(serde_json::json!({"mss": 1448})),
                    ..Default::default()
                }
            };
            s.record_trial(t.id, &o).unwrap();
        }
        for (e, ppm) in [(0, 1.5), (1, -3.0)] {
            let launch = virtperf_record::store::InstanceRecord {
                env_idx: e,
                status: virtperf_record::store::LaunchStatus::Ready,
                start_ms: Some(120.0 + 10.0 * e as f64),
                ..Default::default()
            };
            let id = s.record_instance(run, &launch).unwrap();
            s.record_clock_rate(id, 12.0, ppm, 4.0).unwrap();
        }
        s.set_run_status(run, virtperf_record::store::RunStatus::Completed).unwrap();
        drop(s);
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "UPDATE runs SET started_at = '2026-11-25T12:00:00Z', finished_at = '2026-11-25T12:01:00Z';
             UPDATE trials SET finished_at = '2026-11-25T12:00:31Z';",
        )
        .unwrap();
        Store::open_existing(&db).unwrap().load(run).unwrap()
    }

    /// Every text output of one fixture run, whole (as hyperfine checks its exports with insta):
    /// a change to any of them shows in review as a changed snapshot under `src/export/snapshots/`.
    /// `export --format`'s names come from one list, each naming a format whose exporter exists.
    #[test]
    fn export_format_names_are_one_list() {
        assert_eq!(Format::for_export("csv"), Ok(Format::Csv));
        assert_eq!(Format::for_export("json"), Ok(Format::Samples));
        let e = Format::for_export("xml").unwrap_err();
        assert!(e.contains("csv, json"), "{e}");
        for (name, f, help) in Format::FOR_EXPORT {
            assert!(!help.is_empty() && !f.exporter().what().is_empty(), "{name}");
        }
    }

    #[test]
    fn outputs_of_a_fixture_run_are_as_their_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let rows = fixture_run(dir.path());
        let rep = crate::report::build(&rows).unwrap();
        let data = RunData::new(&rows, &rep);
        for (name, format) in [
            ("summary", Format::Summary),
            ("full", Format::Table),
            ("report_json", Format::Json),
            ("samples_csv", Format::Csv),
            ("samples_json", Format::Samples),
        ] {
            let parts = format.exporter().serialize(&data).unwrap();
            let text: String = parts.iter().map(|p| String::from_utf8_lossy(&p.bytes).into_owned()).collect();
            insta::assert_snapshot!(name, text);
        }
    }

    #[test]
    fn destinations_are_checked_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let file = Target::new(Format::Html, Dest::File(dir.path().join("r.html")));
        assert_eq!(file.check(), Ok(()));
        let is_dir = Target::new(Format::Html, Dest::File(dir.path().to_path_buf()));
        assert!(is_dir.check().unwrap_err().contains("is a directory"));
        let no_parent = Target::new(Format::Csv, Dest::File(dir.path().join("nope/x.csv")));
        assert!(no_parent.check().unwrap_err().contains("does not exist"));
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let not_a_dir = Target::new(Format::Svg, Dest::Dir(dir.path().join("f")));
        assert!(not_a_dir.check().unwrap_err().contains("not a directory"));
        assert_eq!(Target::new(Format::Svg, Dest::Dir(dir.path().join("new"))).check(), Ok(()));
        assert!(Target::new(Format::Svg, Dest::Dir(dir.path().join("a/b"))).check().is_err());
        // Nothing was left behind by the checks.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn flags_choose_the_outputs_in_one_place() {
        let dir = tempfile::tempdir().unwrap();
        let html = dir.path().join("r.html");
        let formats = |t: Vec<Target>| t.into_iter().map(|t| t.format).collect::<Vec<_>>();
        assert_eq!(
            formats(choose(&Asked { files_only_when_asked: true, ..Default::default() }).unwrap()),
            [Format::Summary]
        );
        assert_eq!(
            formats(
                choose(&Asked { json: true, full: true, files_only_when_asked: true, ..Default::default() })
                    .unwrap()
            ),
            [Format::Json]
        );
        assert_eq!(
            formats(
                choose(&Asked { full: true, files_only_when_asked: true, ..Default::default() }).unwrap()
            ),
            [Format::Table]
        );
        // `report --html`: only the file; `run --html`: the summary too.
        assert_eq!(
            formats(
                choose(&Asked { html: Some(&html), files_only_when_asked: true, ..Default::default() })
                    .unwrap()
            ),
            [Format::Html]
        );
        assert_eq!(
            formats(choose(&Asked { html: Some(&html), ..Default::default() }).unwrap()),
            [Format::Summary, Format::Html]
        );
        let e = choose(&Asked {
            svg: Some(&html.join("x/y")),
            files_only_when_asked: true,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.starts_with("--svg: "), "{e}");
        let e = choose(&Asked {
            png: Some(&html.join("x/y")),
            files_only_when_asked: true,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.starts_with("--png: "), "{e}");
        assert_eq!(
            formats(
                choose(&Asked { png: Some(dir.path()), files_only_when_asked: true, ..Default::default() })
                    .unwrap()
            ),
            [Format::Png]
        );
        let e = choose(&Asked { html: Some(dir.path()), files_only_when_asked: true, ..Default::default() })
            .unwrap_err();
        assert!(e.starts_with("--html: ") && e.contains("is a directory"), "{e}");
        let bmf = dir.path().join("bmf.json");
        assert_eq!(
            formats(
                choose(&Asked { bencher: Some(&bmf), files_only_when_asked: true, ..Default::default() })
                    .unwrap()
            ),
            [Format::Bencher]
        );
        assert_eq!(
            formats(choose(&Asked { bencher: Some(&bmf), ..Default::default() }).unwrap()),
            [Format::Summary, Format::Bencher]
        );
        let e = choose(&Asked {
            bencher: Some(&html.join("x/y")),
            files_only_when_asked: true,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.starts_with("--bencher"), "{e}");
    }

    #[test]
    fn a_file_is_replaced_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(write_atomic(&dir.path().join("missing/x"), b"x").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
    }
}
