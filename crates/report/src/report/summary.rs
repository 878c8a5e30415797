//! The terminal's reports: the summary (the answer first, `answer.rs`, within 100 columns) and
//! `--full` (every figure per environment with the baseline's beside it, and every note, at the
//! terminal's width); the HTML page has the figures.

use comfy_table::{presets::UTF8_HORIZONTAL_ONLY, Cell, ContentArrangement, Table};

use super::words::{arrow, fmt_num, mean_text, overhead_text, wrap, WIDTH};
use super::{Report, GUEST_CPU, TESTER_CPU};

/// One summary line per workload / metric (environment-level rows only).
pub fn summary_rows(r: &Report) -> Vec<(String, Vec<String>)> {
    let envs: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    let mut keys: Vec<(&str, &str, &str, &str)> = Vec::new();
    // Cases of a disk matrix are summarised per matrix (`disk_rows`), not one line per cell.
    let in_matrix =
        |w: &str| r.disk.iter().any(|d| w.starts_with(&format!("{} [", d.workload)) || w == d.workload);
    for x in r.results.iter().filter(|x| x.peer.is_none() && x.instance.is_none()) {
        if [TESTER_CPU, GUEST_CPU].contains(&x.metric.as_str()) || in_matrix(&x.workload) {
            continue;
        }
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str(), x.better);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(w, m, unit, better)| {
            let arrow = arrow(better);
            let cells = envs
                .iter()
                .map(|e| {
                    match r.results.iter().find(|x| {
                        x.workload == w
                            && x.metric == m
                            && x.environment == *e
                            && x.peer.is_none()
                            && x.instance.is_none()
                    }) {
                        None => "—".to_string(),
                        Some(x) => match &x.overhead {
                            Some(o) => overhead_text(o, better),
                            None if r.is_baseline(e) => mean_text(x.mean, x.ci95, x.n),
                            None => fmt_num(x.mean),
                        },
                    }
                })
                .collect();
            (format!("{w}\n  {m} ({unit}) {arrow}"), cells)
        })
        .collect()
}

/// One line per disk matrix (phase metric): per environment, the geometric mean of its cells'
/// ratios to the baseline and their range — the matrix itself is in `--full` and the HTML.
pub fn disk_rows(r: &Report) -> Vec<(String, Vec<String>)> {
    r.disk
        .iter()
        .map(|d| {
            let cells = r
                .environments
                .iter()
                .map(|e| {
                    let Some(m) = d.environments.iter().find(|x| x.environment == e.name) else {
                        return "—".to_string();
                    };
                    let ratios: Vec<f64> = m
                        .cells
                        .iter()
                        .flatten()
                        .flatten()
                        .filter_map(|c| c.overhead.as_ref().map(|o| o.ratio))
                        .filter(|x| *x > 0.0 && x.is_finite())
                        .collect();
                    let means: Vec<f64> = m.cells.iter().flatten().flatten().map(|c| c.mean).collect();
                    if ratios.is_empty() {
                        let (lo, hi) =
                            means.iter().fold((f64::INFINITY, 0.0f64), |a, x| (a.0.min(*x), a.1.max(*x)));
                        return if means.is_empty() {
                            "—".into()
                        } else {
                            format!("{}–{}", fmt_num(lo), fmt_num(hi))
                        };
                    }
                    let g = (ratios.iter().map(|x| x.ln()).sum::<f64>() / ratios.len() as f64).exp();
                    let (lo, hi) =
                        ratios.iter().fold((f64::INFINITY, 0.0f64), |a, x| (a.0.min(*x), a.1.max(*x)));
                    format!("×{g:.3} geomean, cells ×{lo:.2}–×{hi:.2}")
                })
                .collect();
            let arrow = arrow(d.better);
            (
                format!(
                    "{} ({}×{} matrix)\n  {} ({}) {arrow}",
                    d.workload,
                    d.file_sizes.len(),
                    d.record_sizes.len(),
                    d.metric,
                    d.unit
                ),
                cells,
            )
        })
        .collect()
}

/// The compact report, answer first (`answer::render`: caveats, a line per environment, the
/// headline matrix), then the seed-style tables that are summaries themselves (all pairs,
/// instances, RFC 2544, timers), one line per disk matrix, and where the rest is. A run without
/// ratios (one environment) shows each figure instead. Every line within `WIDTH`.
pub fn render_summary(r: &Report) -> String {
    let mut out = super::run_line(r);
    let answer = super::answer::render(r, WIDTH as usize);
    let has_matrix = answer.contains("\nPer workload: ");
    out += &answer;
    // RFC 2544's own answer, in its own words, before any table.
    out += &super::rfc2544_answer::render(&r.rfc2544);
    let mut rows = if has_matrix || super::answer::rfc2544_only(r) { Vec::new() } else { summary_rows(r) };
    rows.extend(disk_rows(r));
    if !rows.is_empty() {
        out += "\n";
        out += &if fits(r, &rows) { one_table(r, rows) } else { per_environment(r, &rows) };
    }
    out += &super::hosts::render(&r.by_host);
    let envs: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    out += &super::render_matrices(r, &envs);
    out += &super::render_instances(r);
    // Start-up is the answer of a run that launched each environment several times.
    if r.manifest["launches"].as_u64().unwrap_or(1) >= 2 {
        out += &super::lifecycle::render_summary(&super::startups(r));
    }
    out += &super::lifecycle::render_densities(&r.density);
    out += &super::together::render(&r.together);
    // RFC 2544's answer came first; here how environments compare, and where its tables are.
    if !r.rfc2544.is_empty() {
        for line in super::rfc2544::compare(&r.rfc2544) {
            out += &wrap(&line, WIDTH as usize);
        }
        out += &wrap(
            &format!(
                "RFC 2544's tables (§26.1's NDR by frame size, MLRsearch's goals, each cell's latency, loss curve and \
                 back-to-back, {} notes): virtperf report {} --full",
                super::rfc2544::notes(&r.rfc2544).len(),
                r.run_id
            ),
            WIDTH as usize,
        );
    }
    out += &super::timer::render(&r.timers);
    out += &super::tool_agreement(r);
    let dual = r.results.iter().any(|x| x.clock.is_some());
    let notes = super::render_notes(r, dual).lines().count();
    if let Some(x) = &r.explain {
        let hit: usize = x.hits.iter().map(|h| h.within_20).sum();
        let all: usize = x.hits.iter().map(|h| h.cells).sum();
        out += &format!(
            "\nWhy each costs that (each event's price here × the workload's counts; {hit} of {all} overheads modelled within ±20 %): virtperf report {} --explain\n",
            r.run_id
        );
    }
    out += &format!(
        "\nOwn values, every metric, {notes} notes: virtperf report {} --full · the page: --html\n",
        r.run_id
    );
    fit_lines(&out)
}

/// Everything (`report --full`): per environment, every metric with the baseline's value, the
/// environment's own and the ratio with its interval and verdict; the seed tables; the notes —
/// each line within `width` (the terminal's, 100 when not a terminal).
pub fn render_full(r: &Report, width: usize) -> String {
    let mut out = super::run_line(r);
    let rows = full_rows(r);
    if !rows.is_empty() {
        out += &per_environment_full(r, &rows, width);
    }
    let envs: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    out += &super::render_matrices(r, &envs);
    out += &super::hosts::render(&r.by_host);
    out += &super::render_instances(r);
    out += &super::lifecycle::render(&super::startups(r));
    out += &super::lifecycle::render_densities(&r.density);
    out += &super::together::render(&r.together);
    out += &super::kernels::render(&r.kernels, width);
    out += &super::disk::render(&r.disk);
    out += &super::rfc2544::render(&r.rfc2544);
    out += &super::timer::render(&r.timers);
    out += "\nmean ± 95% CI half-width (Student t); ×ratio vs baseline with its interval and level; ↑/↓ = higher/lower is better\n";
    let dual = r.results.iter().any(|x| x.clock.is_some());
    for line in super::render_notes(r, dual).lines() {
        out += &wrap(line, width);
    }
    fit_lines_to(&out, width)
}

/// Every metric of every workload (environment-level rows): per environment, its own value and,
/// beside a baseline, its ratio with the interval and the verdict in words.
fn full_rows(r: &Report) -> Vec<(String, Vec<String>)> {
    let t = super::answer::target(r);
    let envs: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    let mut keys: Vec<(&str, &str, &str, &str)> = Vec::new();
    for x in r.results.iter().filter(|x| x.peer.is_none() && x.instance.is_none()) {
        let k = (x.workload.as_str(), x.metric.as_str(), x.unit.as_str(), x.better);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(w, m, unit, better)| {
            let cells = envs
                .iter()
                .map(|e| {
                    let Some(x) = r.results.iter().find(|x| {
                        x.workload == w
                            && x.metric == m
                            && x.environment == *e
                            && x.peer.is_none()
                            && x.instance.is_none()
                    }) else {
                        return "—".to_string();
                    };
                    let mut s = mean_text(x.mean, x.ci95, x.n);
                    if is_count(unit) {
                        // A count (retransmits, drops, lost frames) is said as it is, with its
                        // total: a ratio of 2 to 0 events says nothing.
                        s +=
                            &format!("\n{} in all over {} trials", (x.mean * x.n as f64).round() as i64, x.n);
                        return s;
                    }
                    if let Some(o) = &x.overhead {
                        let numbers = match o.ci {
                            Some([l, h]) if l > 0.0 && h.is_finite() => format!(
                                "×{} [{}, {}] {:.0}%",
                                fmt_num(o.ratio),
                                fmt_num(l),
                                fmt_num(h),
                                o.ci_level * 100.0
                            ),
                            _ => format!("×{}", fmt_num(o.ratio)),
                        };
                        s += &format!("\n{numbers}");
                        if let Some(v) = super::answer::row_verdict(x, t) {
                            s += &format!("\n{}", v.phrase(super::answer::Reading::of(x.better)));
                        }
                        if let Some(sa) = &o.set_apart {
                            s += &format!("\n{}", super::answer::set_apart_words(sa));
                        }
                    }
                    s
                })
                .collect();
            (format!("{w}\n  {m} ({unit}) {}", arrow(better)), cells)
        })
        .collect()
}

/// Whether a metric in `unit` counts events (segments retransmitted, datagrams or frames dropped,
/// periods missed): said as figures with their totals, never as ratios.
pub fn is_count(unit: &str) -> bool {
    ["segments", "datagrams", "frames", "packets", "periods", "wake-ups", "events"].contains(&unit)
}

/// One block per environment at `width`: the baseline's figure beside the environment's.
fn per_environment_full(r: &Report, rows: &[(String, Vec<String>)], width: usize) -> String {
    let names: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    let first = names.iter().position(|e| r.is_baseline(e));
    let mut out = String::new();
    let others: Vec<usize> = (0..names.len()).filter(|&i| !r.is_baseline(names[i])).collect();
    let alone: Vec<usize> = if others.is_empty() { (0..names.len()).collect() } else { others };
    for i in alone {
        let env = names[i];
        let base = r.environments[i]
            .baseline
            .as_ref()
            .and_then(|b| names.iter().position(|n| n == b))
            .or(first)
            .filter(|&b| b != i);
        let mut head = vec![format!("{env}: workload / metric")];
        if let Some(b) = base {
            head.push(format!("{} (baseline)", names[b]));
        }
        head.push(env.to_string());
        let mut t = table(head);
        t.set_width(u16::try_from(width).unwrap_or(WIDTH));
        out += &block(t, rows, base, i);
    }
    out
}

/// One environment's block: each row's label, its baseline's cell (where it has one) and its own.
fn block(mut t: Table, rows: &[(String, Vec<String>)], base: Option<usize>, i: usize) -> String {
    for (label, cells) in rows {
        let mut row = vec![Cell::new(fold_label(label, LABEL_MAX))];
        if let Some(b) = base {
            row.push(Cell::new(cells.get(b).cloned().unwrap_or_default()));
        }
        row.push(Cell::new(cells.get(i).cloned().unwrap_or_default()));
        t.add_row(row);
    }
    t.to_string() + "\n"
}

/// The longest line of a row's label: a workload given many parameters
/// (`rfc2544:quick=true,frame_size=[64,1518],…`) is one word to the table, which would widen it
/// past the terminal.
const LABEL_MAX: usize = 44;

/// `label` broken after its commas into lines of at most `max` characters (a part longer than that
/// stays whole).
fn fold_label(label: &str, max: usize) -> String {
    if label.chars().count() <= max {
        return label.to_string();
    }
    let mut lines: Vec<String> = vec![String::new()];
    for part in label.split_inclusive(',') {
        let last = lines.last_mut().map_or(0, |l| l.chars().count());
        if last > 0 && last + part.chars().count() > max {
            lines.push(String::new());
        }
        if let Some(l) = lines.last_mut() {
            l.push_str(part);
        }
    }
    lines.join("\n")
}

/// The terminal's width, or 100 when not a terminal.
pub fn terminal_width() -> usize {
    if cfg!(test) {
        return WIDTH as usize;
    }
    console::Term::stdout().size_checked().map_or(WIDTH as usize, |(_, cols)| usize::from(cols).max(60))
}

/// Every line of `text` within `WIDTH`: a longer one (a seed table's title, an RFC 2544 row) is
/// broken at spaces, its continuation indented under it.
pub fn fit_lines(text: &str) -> String {
    fit_lines_to(text, WIDTH as usize)
}

/// Every line of `text` within `width` columns (see [`fit_lines`]).
pub fn fit_lines_to(text: &str, width: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.chars().count() <= width {
            out += line;
            out.push('\n');
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let pad = &line[..indent];
        for l in wrap(line.trim_start(), width.saturating_sub(indent).max(20)).lines() {
            out += pad;
            out += l;
            out.push('\n');
        }
    }
    out
}

/// Columns a cell takes: its longest line.
fn cols(s: &str) -> usize {
    s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

fn header(r: &Report, env: &str) -> String {
    if r.is_baseline(env) {
        format!("{env} (baseline)")
    } else {
        format!("{env}: ×ratio [95% CI]")
    }
}

/// Whether one table with a column per environment fits `WIDTH` without breaking a word or a
/// ratio: each column as wide as its widest cell or header word, plus the table's borders.
fn fits(r: &Report, rows: &[(String, Vec<String>)]) -> bool {
    let label = rows.iter().map(|(l, _)| cols(l)).max().unwrap_or(0).max(17);
    let envs: usize = r
        .environments
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let word = header(r, &e.name).split(' ').map(|w| w.chars().count()).max().unwrap_or(0);
            rows.iter().map(|(_, c)| c.get(i).map_or(0, |c| cols(c))).max().unwrap_or(0).max(word)
        })
        .sum();
    label + envs + 3 * (r.environments.len() + 1) < WIDTH as usize
}

fn table(header: Vec<String>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_HORIZONTAL_ONLY).set_content_arrangement(ContentArrangement::Dynamic).set_width(WIDTH);
    t.set_header(header.into_iter().map(Cell::new));
    t
}

/// A column per environment: the layout while it fits.
fn one_table(r: &Report, rows: Vec<(String, Vec<String>)>) -> String {
    let mut head = vec!["workload / metric".to_string()];
    head.extend(r.environments.iter().map(|e| header(r, &e.name)));
    let mut t = table(head);
    for (label, cells) in rows {
        let mut row = vec![Cell::new(fold_label(&label, LABEL_MAX))];
        row.extend(cells.into_iter().map(Cell::new));
        t.add_row(row);
    }
    t.to_string() + "\n"
}

/// Too many environments for one table: one block per environment, each the baseline's figure
/// beside that environment's ratio (seed 000's six environments stay readable at 100 columns).
fn per_environment(r: &Report, rows: &[(String, Vec<String>)]) -> String {
    let names: Vec<&str> = r.environments.iter().map(|e| e.name.as_str()).collect();
    let first = names.iter().position(|e| r.is_baseline(e));
    let mut out = String::new();
    for (i, env) in names.iter().enumerate().filter(|(_, e)| !r.is_baseline(e)) {
        // Its own baseline's column (N = 1 of its group when the run has no native).
        let base =
            r.environments[i].baseline.as_ref().and_then(|b| names.iter().position(|n| n == b)).or(first);
        let mut head = vec![format!("{env}: workload / metric")];
        if let Some(b) = base {
            head.push(header(r, names[b]));
        }
        head.push("×ratio [95% CI] verdict".into());
        out += &block(table(head), rows, base, i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_label_breaks_after_its_commas() {
        let l = "rfc2544:quick=true,frame_size=[64,1518],direction=out,mlr_trial_duration=250ms,mlr_width=10";
        let f = fold_label(l, LABEL_MAX);
        assert!(f.lines().all(|x| x.chars().count() <= LABEL_MAX), "{f}");
        assert_eq!(f.replace('\n', ""), l);
        assert_eq!(fold_label("memcpy", LABEL_MAX), "memcpy");
    }
    use crate::report::{Overhead, ResultRow};

    fn row(env: &str, metric: &str, mean: f64, ratio: Option<f64>) -> ResultRow {
        ResultRow {
            environment: env.into(),
            peer: None,
            instance: None,
            workload: "memcpy".into(),
            kind: "memcpy".into(),
            params: serde_json::json!({}),
            metric: metric.into(),
            unit: "ms".into(),
            better: "lower",
            n: 5,
            mean,
            median: mean,
            stdev: 0.1,
            min: mean,
            max: mean,
            cv: None,
            ci95: Some([mean - 0.1, mean + 0.1]),
            no_ci: None,
            outliers: 0,
            non_finite: 0,
            overhead: ratio.map(|r| Overhead::unpaired(r, Some([r - 0.05, r + 0.05]), None)),
            clock: None,
            other_clock: None,
            clock_disagrees: false,
            launches: 1,
            ci_covers: "one launch",
            ci_level: 0.95,
            variance: None,
            work: None,
            verdict: None,
            headline: false,
            family: virtperf_record::Family::Other,
        }
        .as_recorded()
    }

    fn report(results: Vec<ResultRow>) -> Report {
        let mut r = crate::report::summary_test_report();
        r.results = results;
        r
    }

    #[test]
    fn six_environments_get_one_block_each_and_no_word_is_broken() {
        let names = [
            "native",
            "container [instances=1]",
            "container [instances=2]",
            "qemu-virtio",
            "qemu-e1000",
            "gvisor",
        ];
        let mut r = report(Vec::new());
        r.environments = names
            .iter()
            .map(|n| crate::report::EnvSummary {
                name: n.to_string(),
                kind: "x".into(),
                params: serde_json::json!({}),
                launches: 1,
                start_ms_mean: None,
                start_ms: None,
                startup: None,
                baseline: None,
                own_clock: false,
            })
            .collect();
        for (i, n) in names.iter().enumerate() {
            let mut x = row(n, "tcp_retransmits", 4.5, (i > 0).then_some(1.5));
            x.workload = "tcp_stream".into();
            r.results.push(x);
        }
        let text = render_summary(&r);
        for l in text.lines() {
            assert!(l.chars().count() <= WIDTH as usize, "{} columns: {l}", l.chars().count());
        }
        for n in &names[1..] {
            assert!(text.contains(&format!("{n}: workload / metric")), "a block for {n}: {text}");
        }
        assert!(text.contains("tcp_retransmits (ms)"), "the metric is not broken: {text}");
        assert!(text.matches("×1.500 [1.450, 1.550] worse").count() == 5, "every ratio whole: {text}");
    }

    /// The summary a person meets first, whole: a layout change shows in review as a changed
    /// snapshot (`src/report/snapshots/`). The default campaign fits 100 columns and 60 lines,
    /// leads with its caveats, and prints no interval reaching below zero.
    #[test]
    fn the_default_campaigns_summary_is_answer_first_and_fits_one_screen() {
        for (name, r) in [
            ("summary_default_6x8", crate::report::fixtures::default_run()),
            ("summary_precision", crate::report::fixtures::precision_run()),
            ("summary_rfc2544", crate::report::fixtures::rfc2544_run()),
        ] {
            let text = render_summary(&r);
            let lines: Vec<&str> = text.lines().collect();
            assert!(lines.len() <= 60, "{name}: {} lines:\n{text}", lines.len());
            for l in &lines {
                assert!(l.chars().count() <= WIDTH as usize, "{name}: {} columns: {l}", l.chars().count());
            }
            insta::assert_snapshot!(name, text);
        }
        let text = render_summary(&crate::report::fixtures::default_run());
        let at = |s: &str| text.find(s).unwrap_or_else(|| panic!("{s:?} in:\n{text}"));
        assert!(at("no KVM here") < at("What each environment costs"), "caveats first:\n{text}");
        assert!(at("gvisor  ") < at("Per workload: "));
        assert!(text.contains("111× slower"), "gVisor's system calls in words:\n{text}");
        assert!(!text.contains("[-"), "no interval below zero:\n{text}");
        assert!(
            !text.contains("host_cpu_time") && !text.contains("tcp_retransmits"),
            "secondary metrics are in --full:\n{text}"
        );
        // --full has them, each environment's own value, within the width asked.
        let full = render_full(&crate::report::fixtures::default_run(), 100);
        assert!(full.contains("host_cpu_time") && full.contains("tcp_retransmits"), "{full}");
        assert!(full.lines().all(|l| l.chars().count() <= 100), "{full}");
        let narrow = render_full(&crate::report::fixtures::default_run(), 80);
        assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
    }

    #[test]
    fn long_lines_are_broken_at_spaces_keeping_their_indent() {
        let text = format!("short\n  {}\n", "word ".repeat(40).trim());
        let out = fit_lines(&text);
        assert!(out.lines().all(|l| l.chars().count() <= WIDTH as usize), "{out}");
        assert!(
            out.lines().skip(1).all(|l| l.starts_with("  ") && l.trim_start().starts_with("word")),
            "{out}"
        );
        assert_eq!(out.split_whitespace().count(), 41);
    }

    #[test]
    fn notes_wrap_at_word_boundaries() {
        assert_eq!(wrap("aaa bbb ccc ddd", 9), "aaa bbb\n  ccc ddd\n");
        assert_eq!(wrap("aaa bbb ccc ddd", 8), "aaa bbb\n  ccc\n  ddd\n");
        assert_eq!(wrap("short", 100), "short\n");
        assert_eq!(wrap("averyveryverylongword x", 5), "averyveryverylongword\n  x\n");
        let long = "word ".repeat(60);
        for l in wrap(long.trim(), 100).lines() {
            assert!(l.chars().count() <= 100);
        }
    }

    #[test]
    fn one_line_per_metric_and_it_fits_100_columns() {
        let r = report(vec![
            row("native", "memcpy_time", 4.5, None),
            row("container", "memcpy_time", 4.4, Some(0.97)),
            row("qemu-virtio-with-a-long-name", "memcpy_time", 9.0, Some(2.0)),
            row("native", "guest_cpu_time", 1.0, None),
        ]);
        let rows = summary_rows(&r);
        assert_eq!(rows.len(), 1, "guest CPU is a detail: {rows:?}");
        assert!(rows[0].1[0].starts_with("4.500 ± 0.1"), "{:?}", rows[0].1);
        assert!(rows[0].0.contains("memcpy_time (ms) ↓"), "{:?}", rows[0].0);
        assert!(rows[0].1[2].starts_with("×2.000 [1.950, 2.050] worse"), "{:?}", rows[0].1);
        let text = render_summary(&r);
        assert!(text.contains("intervals cover one launch"), "{text}");
        for l in text.lines() {
            assert!(l.chars().count() <= WIDTH as usize, "{} columns: {l}", l.chars().count());
        }
    }
}
