//! The report's figures, one per question: what each shape draws, on `svg.rs`'s canvas. The data
//! each figure receives is prepared (and unit-tested) in `html.rs`; every figure carries a key of
//! its data, so the page can prove no two figures draw the same numbers.
//!
//! Shapes: dot rows (ratios with their intervals, one colour per environment, log axis), strips
//! (every sample over a box plot, log axis when the values span decades), lines (RFC 2544 against
//! frame size, histograms, CPU over time), stacked bars (N instances per count, with the sum and
//! the ceiling), horizontal bars (with intervals), heat maps (seed 001's matrices).

use sha2::{Digest, Sha256};

use super::svg::{self, Anchor, Axis, Canvas, SMALL, TEXT, W};
use super::words::{fmt_num, fmt_value};

/// One figure: a stable id (its file name with `--svg`/`--png DIR`), a title, the SVG text and a
/// key of the data it draws.
#[derive(Debug, Clone)]
pub struct Figure {
    pub id: String,
    pub title: String,
    pub svg: String,
    pub data_key: String,
}

type DrawResult<T> = Result<T, String>;

pub(crate) fn key_of(data: &impl std::fmt::Debug) -> String {
    let d = Sha256::digest(format!("{data:?}").as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn figure(id: &str, title: &str, c: Canvas, data: &impl std::fmt::Debug) -> DrawResult<Figure> {
    Ok(Figure { id: id.into(), title: title.into(), svg: c.finish(title), data_key: key_of(data) })
}

/// One value with its interval, in a colour (an environment), filled or hollow (a direction).
#[derive(Debug, Clone)]
pub struct Dot {
    pub color: usize,
    pub value: f64,
    pub ci: Option<[f64; 2]>,
    pub hollow: bool,
    /// What a pointer over the dot says.
    pub tip: String,
    /// A value written beside it ("116×"): the answer's figure says its numbers.
    pub label: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DotRow {
    pub label: String,
    pub dots: Vec<Dot>,
}

/// Legend entries: name, colour index, hollow.
pub type Legend = [(String, usize, bool)];

/// Left label area of row figures: the longest label, within 40 % of the width.
fn label_area(labels: impl Iterator<Item = String>) -> f64 {
    let longest = labels.map(|l| svg::text_width(&l, TEXT)).fold(60.0f64, f64::max);
    (longest + 14.0).min(W * 0.42)
}

/// Vertical grid lines and labelled ticks of `x` under a plot from `top` to `bottom`; a tick
/// whose label would touch the previous one keeps its line and loses its label.
fn x_axis(c: &mut Canvas, x: &Axis, top: f64, bottom: f64, prefix: &str, desc: &str) {
    let mut free_from = f64::NEG_INFINITY;
    for t in x.ticks() {
        let px = x.px(t);
        c.line(px, top, px, bottom, "grid");
        c.line(px, bottom, px, bottom + 4.0, "ax");
        let label = format!("{prefix}{}", svg::tick_text(t));
        let half = svg::text_width(&label, SMALL) / 2.0;
        if px - half >= free_from && px + half <= c.w {
            c.text(px, bottom + 14.0, &label, Anchor::Middle, SMALL, None);
            free_from = px + half + 6.0;
        }
    }
    c.line(x.a, bottom, x.b, bottom, "ax");
    c.text(
        (x.a + x.b) / 2.0,
        bottom + 34.0,
        &svg::fit(desc, W - 20.0, TEXT),
        Anchor::Middle,
        TEXT,
        Some(desc),
    );
}

/// Horizontal grid lines and labelled ticks of `y` left of a plot starting at `left`.
fn y_axis(c: &mut Canvas, y: &Axis, left: f64, right: f64, desc: &str) {
    for t in y.ticks() {
        let py = y.px(t);
        c.line(left, py, right, py, "grid");
        c.line(left - 4.0, py, left, py, "ax");
        c.text(left - 6.0, py, &svg::tick_text(t), Anchor::End, SMALL, None);
    }
    c.line(left, y.a, left, y.b, "ax");
    let mid = (y.a + y.b) / 2.0;
    c.vtext(12.0, mid, &svg::fit(desc, (y.a - y.b).abs(), TEXT));
}

/// The height a legend of these entries takes (drawn once on a scratch canvas).
fn legend_height(entries: &Legend) -> f64 {
    legend(&mut Canvas::new(1000.0), 0.0, entries)
}

fn legend(c: &mut Canvas, top: f64, entries: &Legend) -> f64 {
    let e: Vec<(String, String, bool)> =
        entries.iter().map(|(n, i, h)| (n.clone(), svg::color(*i).to_string(), *h)).collect();
    svg::legend(c, top, 10.0, &e)
}

/// Ratios as dots with their intervals, rows of one or more environments (one colour each), on a
/// log axis with a dashed line at `reference` (1: no difference).
pub fn dots(
    id: &str,
    title: &str,
    x_desc: &str,
    rows: &[DotRow],
    entries: &Legend,
    reference: f64,
) -> DrawResult<Figure> {
    if rows.iter().all(|r| r.dots.is_empty()) {
        return Err(format!("{title}: nothing to draw"));
    }
    let left = label_area(rows.iter().map(|r| r.label.clone()));
    let (right, top) = (W - 18.0, 10.0);
    // Labelled dots get rows a text's height apart, so labels of neighbours never overlap.
    let step = if rows.iter().flat_map(|r| &r.dots).any(|d| d.label.is_some()) { 17.0 } else { 12.0 };
    let heights: Vec<f64> = rows.iter().map(|r| step + step * r.dots.len().max(1) as f64).collect();
    let plot_h: f64 = heights.iter().sum();
    let bottom = top + plot_h;
    let legend_h = if entries.len() > 1 { legend_height(entries) + 6.0 } else { 0.0 };
    let mut c = Canvas::new(bottom + 46.0 + legend_h);
    let vals = rows.iter().flat_map(|r| {
        r.dots
            .iter()
            .flat_map(|d| [Some(d.value), d.ci.map(|c| c[0]), d.ci.map(|c| c[1])].into_iter().flatten())
    });
    let x = Axis::over(vals.chain([reference]), true, false, left, right);
    let mut y0 = top;
    for (i, (r, h)) in rows.iter().zip(&heights).enumerate() {
        if i % 2 == 0 {
            c.themed_rect(left, y0, right - left, *h, "band");
        }
        let label = svg::fit(&r.label, left - 10.0, TEXT);
        let title = (label != r.label).then_some(r.label.as_str());
        c.text(left - 8.0, y0 + h / 2.0, &label, Anchor::End, TEXT, title);
        y0 += h;
    }
    x_axis(&mut c, &x, top, bottom, "×", x_desc);
    let rx = x.px(reference);
    c.line(rx, top, rx, bottom, "ref");
    let mut y0 = top;
    for (r, h) in rows.iter().zip(&heights) {
        for (k, d) in r.dots.iter().enumerate() {
            let py = y0 + step + step * k as f64;
            let col = svg::color(d.color);
            let (mut from, mut to) = (x.px(d.value), x.px(d.value));
            if let Some([l, hi]) = d.ci {
                let (l, hi) = (l.max(x.lo), hi.min(x.hi));
                if l.is_finite() && hi.is_finite() && hi >= l {
                    c.stroke(x.px(l), py, x.px(hi), py, col, 2.0);
                    (from, to) = (x.px(l), x.px(hi));
                }
            }
            if d.value.is_finite() && d.value > 0.0 {
                c.dot(x.px(d.value), py, 4.5, col, d.hollow, &d.tip);
                if let Some(text) = &d.label {
                    // Right of the whisker, or left of it where the plot ends first.
                    let w = svg::text_width(text, SMALL);
                    if to + 8.0 + w <= right {
                        c.text(to.max(x.px(d.value) + 5.0) + 6.0, py + 4.5, text, Anchor::Start, SMALL, None);
                    } else {
                        c.text(from.min(x.px(d.value) - 5.0) - 6.0, py + 4.5, text, Anchor::End, SMALL, None);
                    }
                }
            }
        }
        y0 += h;
    }
    if entries.len() > 1 {
        legend(&mut c, bottom + 42.0, entries);
    }
    figure(id, title, c, &rows)
}

/// Samples of one metric per group (environment): a row each, every sample as a dot spread
/// over the row, outliers as crosses, a box plot (quartiles, median, 1.5 IQR whiskers) from four
/// samples; log axis when the values span decades.
#[derive(Debug, Clone)]
pub struct Strip {
    pub label: String,
    pub color: usize,
    /// (value, flagged as an outlier)
    pub samples: Vec<(f64, bool)>,
}

pub fn strips(id: &str, title: &str, unit: &str, groups: &[Strip]) -> DrawResult<Figure> {
    if groups.iter().all(|g| g.samples.is_empty()) {
        return Err(format!("{title}: no samples"));
    }
    let left = label_area(groups.iter().map(|g| g.label.clone()));
    let (right, top, row) = (W - 18.0, 10.0, 34.0);
    let bottom = top + row * groups.len() as f64;
    let mut c = Canvas::new(bottom + 46.0);
    let all = || groups.iter().flat_map(|g| g.samples.iter().map(|s| s.0));
    let log = Axis::wants_log(all());
    let x = Axis::over(all(), log, false, left, right);
    for (i, g) in groups.iter().enumerate() {
        let y0 = top + row * i as f64;
        if i % 2 == 0 {
            c.themed_rect(left, y0, right - left, row, "band");
        }
        let label = svg::fit(&g.label, left - 10.0, TEXT);
        c.text(left - 8.0, y0 + row / 2.0, &label, Anchor::End, TEXT, (label != g.label).then_some(&g.label));
    }
    x_axis(&mut c, &x, top, bottom, "", &if log { format!("{unit} (log scale)") } else { unit.to_string() });
    for (i, g) in groups.iter().enumerate() {
        let mid = top + row * i as f64 + row / 2.0;
        let col = svg::color(g.color);
        let mut v: Vec<f64> = g.samples.iter().map(|s| s.0).filter(|v| v.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        if v.len() >= 4 {
            let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
            let (q1, med, q3) = (q(0.25), q(0.5), q(0.75));
            let iqr = q3 - q1;
            let lo = v.iter().copied().find(|s| *s >= q1 - 1.5 * iqr).unwrap_or(q1);
            let hi = v.iter().rev().copied().find(|s| *s <= q3 + 1.5 * iqr).unwrap_or(q3);
            c.stroke(x.px(lo), mid, x.px(q1), mid, col, 1.5);
            c.stroke(x.px(q3), mid, x.px(hi), mid, col, 1.5);
            c.stroke(x.px(q1), mid - 10.0, x.px(q1), mid + 10.0, col, 1.5);
            c.stroke(x.px(q3), mid - 10.0, x.px(q3), mid + 10.0, col, 1.5);
            c.stroke(x.px(q1), mid - 10.0, x.px(q3), mid - 10.0, col, 1.5);
            c.stroke(x.px(q1), mid + 10.0, x.px(q3), mid + 10.0, col, 1.5);
            c.stroke(x.px(med), mid - 11.0, x.px(med), mid + 11.0, col, 3.0);
        }
        for (k, (s, outlier)) in g.samples.iter().enumerate() {
            if !s.is_finite() || (log && *s <= 0.0) {
                continue;
            }
            // Spread over ±9 px in a fixed pattern: the same run draws the same figure.
            let dy = (((k as f64 * 0.618_034) % 1.0) - 0.5) * 18.0;
            let tip = format!("{} {unit}", fmt_num(*s));
            if *outlier {
                c.cross(x.px(*s), mid + dy, 4.0, &format!("{tip} (outlier)"));
            } else {
                c.dot(x.px(*s), mid + dy, 3.0, col, false, &tip);
            }
        }
    }
    figure(id, title, c, &(unit, groups))
}

/// One line per series.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub color: usize,
    pub dashed: bool,
    pub hollow: bool,
    pub points: Vec<(f64, f64)>,
}

/// Lines over a numeric x (log when `log_x`), y from zero unless `log_y`; a legend below.
pub fn lines(
    id: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Line],
    log_x: bool,
    log_y: bool,
) -> DrawResult<Figure> {
    if series.iter().all(|s| s.points.is_empty()) {
        return Err(format!("{title}: no points"));
    }
    let (left, right, top, plot_h) = (78.0, W - 18.0, 12.0, 250.0);
    let bottom = top + plot_h;
    let entries: Vec<(String, String, bool)> =
        series.iter().map(|s| (s.name.clone(), svg::color(s.color).to_string(), s.hollow)).collect();
    let rows = {
        let mut probe = Canvas::new(1000.0);
        svg::legend(&mut probe, 0.0, 10.0, &entries)
    };
    let mut c = Canvas::new(bottom + 46.0 + rows + 6.0);
    let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let x = Axis::over(xs(), log_x && xs().all(|v| v > 0.0), false, left, right);
    let y = Axis::over(ys(), log_y && ys().any(|v| v > 0.0), !log_y, bottom, top);
    x_axis(&mut c, &x, top, bottom, "", x_desc);
    y_axis(&mut c, &y, left, right, y_desc);
    for s in series {
        let col = svg::color(s.color);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!y.log || p.1 > 0.0))
            .map(|p| (x.px(p.0), y.px(p.1)))
            .collect();
        c.polyline(&pts, col, s.dashed);
        if !s.dashed {
            for (p, raw) in pts.iter().zip(s.points.iter()) {
                c.dot(
                    p.0,
                    p.1,
                    3.5,
                    col,
                    s.hollow,
                    &format!("{}: {}, {}", s.name, fmt_num(raw.0), fmt_num(raw.1)),
                );
            }
        }
    }
    svg::legend(&mut c, bottom + 42.0, 10.0, &entries);
    figure(id, title, c, &(x_desc, y_desc, series))
}

/// One environment's figure run after run (`history`): (run number from 1, value, interval).
#[derive(Debug, Clone)]
pub struct RunLine {
    pub name: String,
    pub color: usize,
    pub points: Vec<(usize, f64, Option<[f64; 2]>)>,
}

/// Series over runs: each run a dot with its interval as a whisker, the dots of one environment
/// joined; each change point a dashed vertical line before its run, labelled with its size
/// (`marks`: run number, label). Log y when the values span a decade.
pub fn over_runs(
    id: &str,
    title: &str,
    y_desc: &str,
    runs: usize,
    series: &[RunLine],
    marks: &[(usize, String)],
) -> DrawResult<Figure> {
    if series.iter().all(|s| s.points.is_empty()) || runs == 0 {
        return Err(format!("{title}: no points"));
    }
    let (left, right, top, plot_h) = (78.0, W - 18.0, 30.0, 230.0);
    let bottom = top + plot_h;
    let entries: Vec<(String, String, bool)> =
        series.iter().map(|s| (s.name.clone(), svg::color(s.color).to_string(), false)).collect();
    let rows = {
        let mut probe = Canvas::new(1000.0);
        svg::legend(&mut probe, 0.0, 10.0, &entries)
    };
    let mut c = Canvas::new(bottom + 46.0 + rows + 6.0);
    let x = Axis { lo: 0.5, hi: runs as f64 + 0.5, log: false, a: left, b: right };
    let ys = || {
        series.iter().flat_map(|s| {
            s.points
                .iter()
                .flat_map(|(_, v, ci)| [Some(*v), ci.map(|c| c[0]), ci.map(|c| c[1])].into_iter().flatten())
        })
    };
    let y = Axis::over(ys(), Axis::wants_log(ys()), false, bottom, top);
    // Run numbers: every run while they fit, else 1-2-5 steps.
    let step = [1usize, 2, 5, 10, 20, 50, 100].into_iter().find(|k| (runs / k) <= 24).unwrap_or(200);
    for r in (1..=runs).filter(|r| *r == 1 || r % step == 0) {
        let px = x.px(r as f64);
        c.line(px, top, px, bottom, "grid");
        c.text(px, bottom + 14.0, &r.to_string(), Anchor::Middle, SMALL, None);
    }
    c.line(x.a, bottom, x.b, bottom, "ax");
    c.text((x.a + x.b) / 2.0, bottom + 34.0, "run, oldest → latest", Anchor::Middle, TEXT, None);
    y_axis(&mut c, &y, left, right, y_desc);
    let mut free_from = f64::NEG_INFINITY;
    for (run, label) in marks {
        let px = x.px(*run as f64 - 0.5);
        c.line(px, top, px, bottom, "ref");
        let w = svg::text_width(label, SMALL);
        if px - w / 2.0 >= free_from {
            c.text(px.clamp(left + w / 2.0, right - w / 2.0), top - 10.0, label, Anchor::Middle, SMALL, None);
            free_from = px + w / 2.0 + 6.0;
        }
    }
    for s in series {
        let col = svg::color(s.color);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(_, v, _)| v.is_finite() && (!y.log || *v > 0.0))
            .map(|(r, v, _)| (x.px(*r as f64), y.px(*v)))
            .collect();
        c.polyline(&pts, col, false);
        for (r, v, ci) in &s.points {
            if !(v.is_finite() && (!y.log || *v > 0.0)) {
                continue;
            }
            let px = x.px(*r as f64);
            if let Some([l, h]) = ci.filter(|[l, h]| l.is_finite() && h.is_finite() && (!y.log || *l > 0.0)) {
                c.stroke(px, y.px(l.max(y.lo)), px, y.px(h.min(y.hi)), col, 1.5);
            }
            let tip = match ci {
                Some([l, h]) => {
                    format!("{}, run {r}: {} [{}, {}]", s.name, fmt_num(*v), fmt_num(*l), fmt_num(*h))
                }
                None => format!("{}, run {r}: {}", s.name, fmt_num(*v)),
            };
            c.dot(px, y.px(*v), 3.5, col, false, &tip);
        }
    }
    svg::legend(&mut c, bottom + 42.0, 10.0, &entries);
    figure(id, title, c, &(y_desc, runs, series, marks))
}

/// One bar per group, stacked from its parts (N instances: each instance's figure), the sum on
/// top, an optional dashed ceiling; `sub` labels under each bar (Jain's index).
#[derive(Debug, Clone)]
pub struct Stack {
    pub label: String,
    pub sub: String,
    pub color: usize,
    pub parts: Vec<f64>,
}

pub fn stacked(
    id: &str,
    title: &str,
    unit: &str,
    stacks: &[Stack],
    ceiling: Option<(f64, String)>,
) -> DrawResult<Figure> {
    if stacks.is_empty() {
        return Err(format!("{title}: no bars"));
    }
    let (left, right, top, plot_h) = (78.0, W - 18.0, 30.0, 240.0);
    let bottom = top + plot_h;
    let mut c = Canvas::new(bottom + 62.0);
    let sums = stacks.iter().map(|s| s.parts.iter().sum::<f64>());
    let y = Axis::over(sums.chain(ceiling.as_ref().map(|c| c.0)), false, true, bottom, top);
    y_axis(&mut c, &y, left, right, unit);
    let slot = (right - left) / stacks.len() as f64;
    let bw = (slot * 0.55).min(90.0);
    for (i, s) in stacks.iter().enumerate() {
        let cx = left + slot * (i as f64 + 0.5);
        let col = svg::color(s.color);
        let mut acc = 0.0;
        for (k, v) in s.parts.iter().enumerate() {
            let (y1, y2) = (y.px(acc), y.px(acc + v));
            // Each instance a shade of the environment's colour, a light seam between.
            let shade = if k % 2 == 0 { 1.0 } else { 0.6 };
            c.rect(
                cx - bw / 2.0,
                y2,
                bw,
                (y1 - y2 - 1.0).max(0.5),
                &with_alpha(col, shade),
                Some(&format!("{} #{}: {} {unit}", s.label, k + 1, fmt_num(*v))),
            );
            acc += v;
        }
        c.text(cx, y.px(acc) - 9.0, &svg::tick_text(acc), Anchor::Middle, SMALL, None);
        c.text(
            cx,
            bottom + 14.0,
            &svg::fit(&s.label, slot - 4.0, SMALL),
            Anchor::Middle,
            SMALL,
            Some(&s.label),
        );
        c.text(cx, bottom + 32.0, &svg::fit(&s.sub, slot - 4.0, SMALL), Anchor::Middle, SMALL, Some(&s.sub));
    }
    c.line(left, bottom, right, bottom, "ax");
    // The ceiling: a dashed line across, named in a key above the plot (a label on the line
    // would sit on the bars' sums, which come close to it by design).
    if let Some((v, name)) = &ceiling {
        let py = y.px(*v);
        c.line(left, py, right, py, "ref");
        c.line(
            right - svg::text_width(name, SMALL) - 34.0,
            10.0,
            right - svg::text_width(name, SMALL) - 8.0,
            10.0,
            "ref",
        );
        c.text(right, 10.0, name, Anchor::End, SMALL, None);
    }
    figure(id, title, c, &(unit, stacks, ceiling))
}

/// `#RRGGBB` at opacity `a` as an SVG paint (`rgba` is not SVG 1.1; resvg and browsers take it).
fn with_alpha(hex: &str, a: f64) -> String {
    if a >= 1.0 {
        return hex.to_string();
    }
    let p = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
    format!("rgba({},{},{},{a})", p(1), p(3), p(5))
}

/// Horizontal bars from zero, one per label, in their colour, with an optional interval.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub color: usize,
    pub value: f64,
    pub ci: Option<[f64; 2]>,
}

pub fn hbars(id: &str, title: &str, unit: &str, bars: &[Bar]) -> DrawResult<Figure> {
    if bars.is_empty() {
        return Err(format!("{title}: no bars"));
    }
    let left = label_area(bars.iter().map(|b| b.label.clone()));
    let (right, top, row) = (W - 18.0, 10.0, 26.0);
    let bottom = top + row * bars.len() as f64;
    let mut c = Canvas::new(bottom + 46.0);
    let vals = || bars.iter().flat_map(|b| [Some(b.value), b.ci.map(|c| c[1])].into_iter().flatten());
    // Values over decades (a TCG guest's CPU per Gbit beside a container's) on a log axis, where
    // a short bar still shows; a whisker never reaches below the axis.
    let log = Axis::wants_log(bars.iter().map(|b| b.value));
    let x = Axis::over(vals(), log, !log, left, right);
    let floor = if log { x.lo } else { 0.0 };
    for (i, b) in bars.iter().enumerate() {
        let label = svg::fit(&b.label, left - 10.0, TEXT);
        c.text(
            left - 8.0,
            top + row * (i as f64 + 0.5),
            &label,
            Anchor::End,
            TEXT,
            (label != b.label).then_some(&b.label),
        );
    }
    x_axis(&mut c, &x, top, bottom, "", unit);
    for (i, b) in bars.iter().enumerate() {
        let y0 = top + row * i as f64;
        c.rect(
            x.px(floor),
            y0 + 5.0,
            x.px(b.value) - x.px(floor),
            row - 10.0,
            svg::color(b.color),
            Some(&format!("{}: {} {unit}", b.label, fmt_num(b.value))),
        );
        let mut end = x.px(b.value);
        if let Some([l, h]) = b.ci {
            let (l, h) = (l.max(floor), h.min(x.hi));
            c.stroke(x.px(l), y0 + row / 2.0, x.px(h), y0 + row / 2.0, "#222222", 2.0);
            end = end.max(x.px(h));
        }
        // The value at the bar's end (inside the plot when the bar reaches its right edge).
        let label = fmt_value(b.value, "");
        let label = label.trim();
        if end + 6.0 + svg::text_width(label, SMALL) <= right {
            c.text(end + 4.0, y0 + row / 2.0 + 4.0, label, Anchor::Start, SMALL, None);
        } else {
            c.text(x.px(floor) + 4.0, y0 + row / 2.0 + 4.0, label, Anchor::Start, SMALL, None);
        }
    }
    figure(id, title, c, &(unit, bars))
}

/// A heat map: rows × columns of values (None: not measured), each cell coloured on a light →
/// dark blue scale of its value and labelled with its text.
pub fn heatmap(
    id: &str,
    title: &str,
    corner: &str,
    rows: &[String],
    cols: &[String],
    cells: &[Vec<Option<(f64, String)>>],
) -> DrawResult<Figure> {
    if rows.is_empty() || cols.is_empty() {
        return Err(format!("{title}: empty matrix"));
    }
    let left = label_area(rows.iter().cloned()).min(150.0);
    let (right, top, row) = (W - 10.0, 30.0, 30.0);
    let cw = (right - left) / cols.len() as f64;
    let mut c = Canvas::new(top + row * rows.len() as f64 + 10.0);
    c.text(4.0, top / 2.0, &svg::fit(corner, left - 6.0, SMALL), Anchor::Start, SMALL, Some(corner));
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in cells.iter().flatten().flatten().map(|c| c.0).filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    for (j, name) in cols.iter().enumerate() {
        let t = svg::fit(name, cw - 4.0, SMALL);
        c.text(
            left + cw * (j as f64 + 0.5),
            top / 2.0,
            &t,
            Anchor::Middle,
            SMALL,
            (t != *name).then_some(name),
        );
    }
    for (i, name) in rows.iter().enumerate() {
        let y0 = top + row * i as f64;
        let t = svg::fit(name, left - 10.0, TEXT);
        c.text(left - 8.0, y0 + row / 2.0, &t, Anchor::End, TEXT, (t != *name).then_some(name));
        for j in 0..cols.len() {
            let x0 = left + cw * j as f64;
            let cell = cells.get(i).and_then(|r| r.get(j)).cloned().flatten();
            match cell {
                Some((v, text)) => {
                    let k = if hi > lo { ((v - lo) / (hi - lo)).clamp(0.0, 1.0) } else { 0.5 };
                    let mix = |a: f64, b: f64| (a + (b - a) * k).round() as u8;
                    let fill =
                        format!("#{:02x}{:02x}{:02x}", mix(232.0, 8.0), mix(241.0, 69.0), mix(250.0, 148.0));
                    c.rect(x0 + 1.0, y0 + 1.0, cw - 2.0, row - 2.0, &fill, Some(&text));
                    let ink = if k > 0.5 { "#ffffff" } else { "#111111" };
                    c.text_colored(
                        x0 + cw / 2.0,
                        y0 + row / 2.0,
                        &svg::fit(&text, cw - 4.0, SMALL),
                        SMALL,
                        ink,
                    );
                }
                None => {
                    c.rect(x0 + 1.0, y0 + 1.0, cw - 2.0, row - 2.0, "#d9d9d9", Some("not measured"));
                    c.text_colored(x0 + cw / 2.0, y0 + row / 2.0, "—", SMALL, "#111111");
                }
            }
        }
    }
    figure(id, title, c, &(rows, cols, cells))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(v: f64) -> Dot {
        Dot { color: 0, value: v, ci: Some([v * 0.9, v * 1.1]), hollow: false, tip: "t".into(), label: None }
    }

    #[test]
    fn every_shape_draws_its_marks_and_no_text_below_the_page_minimum() {
        let figs = [
            dots("d", "t", "x", &[DotRow { label: "a".into(), dots: vec![dot(1.2), dot(0.9)] }], &[], 1.0)
                .unwrap(),
            strips(
                "s",
                "t",
                "ms",
                &[Strip {
                    label: "x".into(),
                    color: 1,
                    samples: vec![(1.0, false), (2.0, false), (3.0, false), (9.0, true)],
                }],
            )
            .unwrap(),
            lines(
                "l",
                "t",
                "x",
                "y",
                &[Line {
                    name: "a".into(),
                    color: 0,
                    dashed: false,
                    hollow: false,
                    points: vec![(64.0, 1.0), (128.0, 2.0)],
                }],
                true,
                false,
            )
            .unwrap(),
            stacked(
                "b",
                "t",
                "u",
                &[Stack { label: "N=2".into(), sub: "J 0.99".into(), color: 0, parts: vec![1.0, 2.0] }],
                Some((4.0, "ceiling".into())),
            )
            .unwrap(),
            hbars("h", "t", "u", &[Bar { label: "a".into(), color: 0, value: 3.0, ci: Some([2.0, 4.0]) }])
                .unwrap(),
            heatmap(
                "m",
                "t",
                "file ↓ record →",
                &["r".into()],
                &["c1".into(), "c2".into()],
                &[vec![Some((1.0, "1".into())), None]],
            )
            .unwrap(),
        ];
        for f in &figs {
            assert!(f.svg.starts_with("<svg") && f.svg.ends_with("</svg>"), "{}", f.svg);
            for size in f
                .svg
                .split("font-size=\"")
                .skip(1)
                .map(|r| r.split('"').next().unwrap().parse::<f64>().unwrap())
            {
                assert!(size >= SMALL, "{}: a {size} px text", f.id);
            }
            assert_eq!(f.svg.matches("<svg").count(), 1);
        }
        assert!(figs[0].svg.matches("<circle").count() == 2 && figs[0].svg.contains("class=\"ref\""));
        assert!(figs[1].svg.matches("<circle").count() == 3 && figs[1].svg.contains("outlier"));
        assert!(figs[2].svg.contains("<polyline"));
        assert!(
            figs[3].svg.contains(">3<") && figs[3].svg.contains("ceiling"),
            "the sum and the ceiling: {}",
            figs[3].svg
        );
        assert!(figs[5].svg.contains("not measured"));
    }

    #[test]
    fn the_data_key_follows_the_data_not_the_title() {
        let r = [DotRow { label: "a".into(), dots: vec![dot(1.2)] }];
        let a = dots("a", "one", "x", &r, &[], 1.0).unwrap();
        let b = dots("b", "two", "x", &r, &[], 1.0).unwrap();
        let r2 = [DotRow { label: "a".into(), dots: vec![dot(1.3)] }];
        let c = dots("c", "one", "x", &r2, &[], 1.0).unwrap();
        assert_eq!(a.data_key, b.data_key);
        assert_ne!(a.data_key, c.data_key);
    }

    #[test]
    fn samples_spanning_decades_get_a_log_axis() {
        let g = [
            Strip { label: "native".into(), color: 0, samples: vec![(107e-9, false); 5] },
            Strip { label: "gvisor".into(), color: 1, samples: vec![(76e-6, false); 5] },
        ];
        let f = strips("s", "t", "s", &g).unwrap();
        assert!(f.svg.contains("(log scale)"));
        // Native's dots are not squashed onto gVisor's axis origin: they sit left, gVisor right.
        let xs: Vec<f64> = f
            .svg
            .split("<circle cx=\"")
            .skip(1)
            .map(|r| r.split('"').next().unwrap().parse().unwrap())
            .collect();
        let (n, g) = (xs[..5].iter().sum::<f64>() / 5.0, xs[5..].iter().sum::<f64>() / 5.0);
        assert!(g - n > 200.0, "{n} {g}");
    }
}
