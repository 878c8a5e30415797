//! Every output of a run, one file per format, as hyperfine's `export/`: an [`Exporter`] turns a
//! stored run into named parts of bytes; a [`Target`] pairs a [`Format`] with where it goes; and
//! [`write`] is the one place that writes them — to stdout (a reader that went away is not an
//! error), to a file (atomically: a reader never sees half of one) or into a directory.
//!
//! To add a format: a file here with its exporter, a variant of [`Format`] and its line in
//! [`Format::exporter`]; then a flag that asks for it (main.rs).

mod csv;
mod html;
mod json;
mod png;
mod samples;
mod text;

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::host::{write_atomic, write_stdout};
use crate::report::html::Page;
use crate::report::Report;
use crate::store::Store;

/// What exporters read: the stored run and its report, built once; the HTML page (with its
/// figures) is rendered at most once for every format that needs it.
pub struct RunData<'a> {
    pub store: &'a Store,
    pub run_id: i64,
    pub report: &'a Report,
    page: OnceCell<Page>,
}

impl<'a> RunData<'a> {
    pub fn new(store: &'a Store, run_id: i64, report: &'a Report) -> Self {
        RunData { store, run_id, report, page: OnceCell::new() }
    }
    /// The HTML page and its figures.
    pub fn page(&self) -> Result<&Page> {
        if let Some(p) = self.page.get() {
            return Ok(p);
        }
        let p = crate::report::html::render(self.store, self.run_id, self.report)?;
        Ok(self.page.get_or_init(|| p))
    }
}

/// One piece of an output: a file of a directory output (`name`), or the whole of a single one.
pub struct Part {
    pub name: Option<String>,
    pub bytes: Vec<u8>,
}

impl Part {
    fn whole(bytes: impl Into<Vec<u8>>) -> Vec<Part> {
        vec![Part { name: None, bytes: bytes.into() }]
    }
}

pub trait Exporter {
    /// What this output is, for "… → PATH" lines.
    fn what(&self) -> &'static str;
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>>;
}

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
}

impl Format {
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

/// The outputs that the flags of `run` and `report` ask for — the one place that chooses them.
/// Stdout gets the JSON report (`--json`), the full table (`--full`) or the summary; `report`
/// leaves it empty when it was asked only for files (`files_only_when_asked`). `--html FILE` and
/// `--svg DIR` add their files, each checked here, before anything runs; the error names the flag.
pub fn choose(
    json: bool,
    full: bool,
    html: Option<&Path>,
    svg: Option<&Path>,
    png: Option<&Path>,
    files_only_when_asked: bool,
) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    if json {
        targets.push(Target::new(Format::Json, Dest::Stdout));
    } else if full {
        targets.push(Target::new(Format::Table, Dest::Stdout));
    } else if !(files_only_when_asked && (html.is_some() || svg.is_some() || png.is_some())) {
        targets.push(Target::new(Format::Summary, Dest::Stdout));
    }
    for (flag, format, dest) in [
        ("--html", Format::Html, html.map(|p| Dest::File(p.to_path_buf()))),
        ("--svg", Format::Svg, svg.map(|d| Dest::Dir(d.to_path_buf()))),
        ("--png", Format::Png, png.map(|d| Dest::Dir(d.to_path_buf()))),
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
        assert_eq!(formats(choose(false, false, None, None, None, true).unwrap()), [Format::Summary]);
        assert_eq!(formats(choose(true, true, None, None, None, true).unwrap()), [Format::Json]);
        assert_eq!(formats(choose(false, true, None, None, None, true).unwrap()), [Format::Table]);
        // `report --html`: only the file; `run --html`: the summary too.
        assert_eq!(formats(choose(false, false, Some(&html), None, None, true).unwrap()), [Format::Html]);
        assert_eq!(
            formats(choose(false, false, Some(&html), None, None, false).unwrap()),
            [Format::Summary, Format::Html]
        );
        let e = choose(false, false, None, Some(&html.join("x/y")), None, true).unwrap_err();
        assert!(e.starts_with("--svg: "), "{e}");
        let e = choose(false, false, None, None, Some(&html.join("x/y")), true).unwrap_err();
        assert!(e.starts_with("--png: "), "{e}");
        assert_eq!(formats(choose(false, false, None, None, Some(dir.path()), true).unwrap()), [Format::Png]);
        let e = choose(false, false, Some(dir.path()), None, None, true).unwrap_err();
        assert!(e.starts_with("--html: ") && e.contains("is a directory"), "{e}");
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
