//! The report's figures, drawn as SVG with `plotters` (a well-kept pure-Rust plotting library:
//! its SVG backend needs no system fonts or C libraries, the output embeds in one offline HTML
//! file and exports as-is for papers). This module only maps prepared data (see `html.rs`, where
//! the data each figure receives is built and unit-tested) onto five chart shapes: forest plot,
//! strip + box plot, lines, bars, heat map.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// One figure: a stable id (its file name with `--svg DIR`), a title and the SVG text.
#[derive(Debug, Clone)]
pub struct Figure {
    pub id: String,
    pub title: String,
    pub svg: String,
}

/// Colours that stay distinguishable in print (Okabe–Ito).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

const W: u32 = 760;
const FONT: &str = "sans-serif";

type DrawResult<T> = Result<T, String>;

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

/// Categories on one axis: `n` segments, labels from `names`.
fn categories(n: usize) -> plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordi32> {
    (0..(n.max(1) as i32 - 1)).into_segmented()
}

fn cat_label(names: &[String]) -> impl Fn(&SegmentValue<i32>) -> String + '_ {
    move |v| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
            names.get(*i as usize).cloned().unwrap_or_default()
        }
        SegmentValue::Last => String::new(),
    }
}

/// Two significant digits: axis ticks, where fmt_num's four crowd each other.
fn short_num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let d = (1 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.d$}")
}

/// Where segment `i` of `n` ends (the next one's start; the axis end for the last).
fn seg_end(i: usize, n: usize) -> SegmentValue<i32> {
    if i + 1 < n {
        SegmentValue::Exact(i as i32 + 1)
    } else {
        SegmentValue::Last
    }
}

/// The (low, high) of a set of values with a little room on both sides; never empty.
fn span(vals: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.02).max(1e-12);
    (if from_zero && lo >= 0.0 { 0.0 } else { lo - pad }, hi + pad)
}

/// A forest plot: one row per label, the ratio as a dot and its 95 % CI as a bar, log scale,
/// a dashed line at 1 (no difference). Rows without a CI show the dot alone.
pub fn forest(id: &str, title: &str, rows: &[(String, f64, Option<[f64; 2]>)]) -> DrawResult<Figure> {
    let mut svg = String::new();
    let n = rows.len().max(1);
    let h = 70 + 26 * n as u32;
    {
        let root = SVGBackend::with_string(&mut svg, (W, h)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let vals = rows.iter().flat_map(|(_, r, ci)| {
            let mut v = vec![*r, 1.0];
            if let Some([l, h]) = ci {
                v.extend([*l, *h]);
            }
            v
        });
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for v in vals.filter(|v| *v > 0.0 && v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        let (lo, hi) = if lo.is_finite() { (lo / 1.15, hi * 1.15) } else { (0.5, 2.0) };
        let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        let fmt = cat_label(&names);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(270)
            .build_cartesian_2d((lo..hi).log_scale(), categories(n))
            .map_err(e)?;
        chart
            .configure_mesh()
            .y_labels(n)
            .y_label_formatter(&fmt)
            .x_desc("ratio to the baseline (log scale; 1 = no difference)")
            .x_labels(5)
            .x_label_formatter(&|x| format!("×{}", short_num(*x)))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Last)],
                BLACK.mix(0.6).stroke_width(1),
            )))
            .map_err(e)?;
        for (i, (_, r, ci)) in rows.iter().enumerate() {
            let y = || SegmentValue::CenterOf(i as i32);
            let c = color(0);
            if let Some([l, h]) = ci {
                let (l, h) = (l.max(lo), h.min(hi));
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(l, y()), (h, y())],
                        c.stroke_width(2),
                    )))
                    .map_err(e)?;
            }
            if *r > 0.0 && r.is_finite() {
                chart.draw_series(std::iter::once(Circle::new((*r, y()), 4, c.filled()))).map_err(e)?;
            }
        }
        root.present().map_err(e)?;
    }
    Ok(Figure { id: id.into(), title: title.into(), svg })
}

/// Every sample per group as dots spread sideways (outliers as red crosses) over a box plot
/// (quartiles, median, whiskers to the furthest samples within 1.5 IQR; four samples or more).
pub fn strip(id: &str, title: &str, unit: &str, groups: &[(String, Vec<(f64, bool)>)]) -> DrawResult<Figure> {
    let mut svg = String::new();
    let n = groups.len().max(1);
    {
        let root = SVGBackend::with_string(&mut svg, (W, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (lo, hi) = span(groups.iter().flat_map(|g| g.1.iter().map(|s| s.0)), false);
        let names: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
        let fmt = cat_label(&names);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 15))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(categories(n), lo..hi)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&fmt)
            .y_desc(unit)
            .y_label_formatter(&|y| super::fmt_num(*y))
            .disable_x_mesh()
            .draw()
            .map_err(e)?;
        for (i, (_, samples)) in groups.iter().enumerate() {
            let x = SegmentValue::CenterOf(i as i32);
            let mut vals: Vec<f64> = samples.iter().map(|s| s.0).collect();
            vals.sort_by(f64::total_cmp);
            if vals.len() >= 4 {
                // Box: quartiles; whiskers: the furthest samples within 1.5 IQR; ~40 px wide.
                let q = |p: f64| vals[((vals.len() - 1) as f64 * p).round() as usize];
                let (q1, med, q3) = (q(0.25), q(0.5), q(0.75));
                let iqr = q3 - q1;
                let lo_w = vals.iter().copied().find(|v| *v >= q1 - 1.5 * iqr).unwrap_or(q1);
                let hi_w = vals.iter().rev().copied().find(|v| *v <= q3 + 1.5 * iqr).unwrap_or(q3);
                let seg = (W as i32 - 90) / n as i32;
                let m = ((seg - 40) / 2).max(0) as u32;
                let right = seg_end(i, n);
                let c = color(i);
                let mut bx = Rectangle::new(
                    [(SegmentValue::Exact(i as i32), q1), (right.clone(), q3)],
                    c.mix(0.9).stroke_width(1),
                );
                bx.set_margin(0, 0, m, m);
                let mut md =
                    Rectangle::new([(SegmentValue::Exact(i as i32), med), (right, med)], c.stroke_width(2));
                md.set_margin(0, 0, m, m);
                chart.draw_series([bx, md]).map_err(e)?;
                chart
                    .draw_series([
                        PathElement::new(vec![(x.clone(), lo_w), (x.clone(), q1)], c.stroke_width(1)),
                        PathElement::new(vec![(x.clone(), q3), (x.clone(), hi_w)], c.stroke_width(1)),
                    ])
                    .map_err(e)?;
            }
            let len = samples.len().max(1) as f64;
            for (k, (v, outlier)) in samples.iter().enumerate() {
                // Spread over ±40 px in a fixed pattern (no randomness: the same run draws the same figure).
                let dx = (((k as f64 * 0.618_034) % 1.0) - 0.5) * 80.0f64.min(8.0 * len);
                let el = EmptyElement::at((x.clone(), *v));
                if *outlier {
                    chart
                        .draw_series(std::iter::once(el + Cross::new((dx as i32, 0), 4, RED.stroke_width(2))))
                        .map_err(e)?;
                } else {
                    chart
                        .draw_series(std::iter::once(
                            el + Circle::new((dx as i32, 0), 3, color(i).mix(0.7).filled()),
                        ))
                        .map_err(e)?;
                }
            }
        }
        root.present().map_err(e)?;
    }
    Ok(Figure { id: id.into(), title: title.into(), svg })
}

/// One line per series over a numeric x (log 2 when `log_x`), with a legend.
pub fn lines(
    id: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> DrawResult<Figure> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, 340)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (x0, x1) = span(series.iter().flat_map(|s| s.1.iter().map(|p| p.0)), false);
        let (_, y1) = span(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)), true);
        let mut b = ChartBuilder::on(&root);
        b.caption(title, (FONT, 15)).margin(8).x_label_area_size(36).y_label_area_size(70);
        macro_rules! body {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_label_formatter(&|x| super::fmt_num(*x))
                    .y_label_formatter(&|y| super::fmt_num(*y))
                    .draw()
                    .map_err(e)?;
                for (i, (name, pts)) in series.iter().enumerate() {
                    let c = color(i);
                    chart
                        .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                        .map_err(e)?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled()))).map_err(e)?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::LowerRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK.mix(0.3))
                    .draw()
                    .map_err(e)?;
            }};
        }
        if log_x && x0 > 0.0 {
            body!(b.build_cartesian_2d((x0 * 0.9..x1 * 1.1).log_scale().base(2.0), 0.0..y1).map_err(e)?);
        } else {
            body!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(e)?);
        }
        root.present().map_err(e)?;
    }
    Ok(Figure { id: id.into(), title: title.into(), svg })
}

/// Vertical bars, one per label, coloured by `group` index, with an optional 95 % CI whisker.
pub fn bars(
    id: &str,
    title: &str,
    unit: &str,
    bars: &[(String, usize, f64, Option<[f64; 2]>)],
) -> DrawResult<Figure> {
    let mut svg = String::new();
    let n = bars.len().max(1);
    {
        let root = SVGBackend::with_string(&mut svg, (W, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (_, hi) = span(bars.iter().flat_map(|b| [b.2, b.3.map_or(b.2, |c| c[1])]), true);
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let fmt = cat_label(&names);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(70)
            .build_cartesian_2d(categories(n), 0.0..hi)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&fmt)
            .y_desc(unit)
            .y_label_formatter(&|y| super::fmt_num(*y))
            .disable_x_mesh()
            .draw()
            .map_err(e)?;
        for (i, (_, g, v, ci)) in bars.iter().enumerate() {
            let (l, r) = (SegmentValue::Exact(i as i32), || SegmentValue::CenterOf(i as i32));
            let c = color(*g);
            let mut bar = Rectangle::new([(l, 0.0), (r(), *v)], c.mix(0.85).filled());
            bar.set_margin(0, 0, 6, 0);
            chart.draw_series(std::iter::once(bar)).map_err(e)?;
            let right = seg_end(i, n);
            let mut bar2 = Rectangle::new([(r(), 0.0), (right, *v)], c.mix(0.85).filled());
            bar2.set_margin(0, 0, 0, 6);
            chart.draw_series(std::iter::once(bar2)).map_err(e)?;
            if let Some([lo, hi]) = ci {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(r(), *lo), (r(), *hi)],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(e)?;
            }
        }
        root.present().map_err(e)?;
    }
    Ok(Figure { id: id.into(), title: title.into(), svg })
}

/// A heat map: rows × columns of values (None: not measured), each cell coloured on a
/// white → blue scale of its value and labelled with `text`.
pub fn heatmap(
    id: &str,
    title: &str,
    rows: &[String],
    cols: &[String],
    cells: &[Vec<Option<(f64, String)>>],
) -> DrawResult<Figure> {
    let mut svg = String::new();
    let (nr, nc) = (rows.len().max(1), cols.len().max(1));
    let h = 90 + 34 * nr as u32;
    {
        let root = SVGBackend::with_string(&mut svg, (W, h)).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in cells.iter().flatten().flatten().map(|c| c.0).filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        let fx = cat_label(cols);
        let fy = cat_label(rows);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 15))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(190)
            .build_cartesian_2d(categories(nc), categories(nr))
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_labels(nc)
            .y_labels(nr)
            .x_label_formatter(&fx)
            .y_label_formatter(&fy)
            .disable_mesh()
            .draw()
            .map_err(e)?;
        for (r, row) in cells.iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                let corner0 = (SegmentValue::Exact(c as i32), SegmentValue::Exact(r as i32));
                let corner1 = (seg_end(c, nc), seg_end(r, nr));
                let (fill, text) = match cell {
                    Some((v, t)) => {
                        let k = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
                        let k = k.clamp(0.0, 1.0);
                        let mixc = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * k) as u8;
                        (RGBColor(mixc(240, 8), mixc(246, 81), mixc(255, 156)), t.clone())
                    }
                    None => (RGBColor(225, 225, 225), "—".to_string()),
                };
                chart
                    .draw_series(std::iter::once(Rectangle::new([corner0, corner1], fill.filled())))
                    .map_err(e)?;
                let dark = cell.as_ref().is_some_and(|(v, _)| hi > lo && (v - lo) / (hi - lo) > 0.55);
                let style = TextStyle::from((FONT, 13).into_font())
                    .color(if dark { &WHITE } else { &BLACK })
                    .pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Center,
                    ));
                chart
                    .draw_series(std::iter::once(Text::new(
                        text,
                        (SegmentValue::CenterOf(c as i32), SegmentValue::CenterOf(r as i32)),
                        style,
                    )))
                    .map_err(e)?;
            }
        }
        root.present().map_err(e)?;
    }
    Ok(Figure { id: id.into(), title: title.into(), svg })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_draws_svg_with_its_marks() {
        let f = forest("f", "t", &[("a".into(), 1.2, Some([1.1, 1.3])), ("b".into(), 0.9, None)]).unwrap();
        assert!(f.svg.starts_with("<svg") && f.svg.matches("<circle").count() >= 2, "{}", f.svg);
        let s =
            strip("s", "t", "ms", &[("x".into(), vec![(1.0, false), (2.0, false), (9.0, true)])]).unwrap();
        assert!(s.svg.contains("<circle") && s.svg.contains("<polyline") || s.svg.contains("<line"));
        let l = lines("l", "t", "x", "y", &[("a".into(), vec![(64.0, 1.0), (128.0, 2.0)])], true).unwrap();
        assert!(l.svg.contains("<polyline"), "{}", l.svg);
        let b = bars("b", "t", "u", &[("a".into(), 0, 3.0, Some([2.0, 4.0])), ("b".into(), 1, 1.0, None)])
            .unwrap();
        assert!(b.svg.matches("<rect").count() >= 4);
        let h = heatmap(
            "h",
            "t",
            &["r".into()],
            &["c1".into(), "c2".into()],
            &[vec![Some((1.0, "1".into())), None]],
        )
        .unwrap();
        assert!(h.svg.contains(">—<") || h.svg.contains("—"), "{}", h.svg);
    }

    #[test]
    fn spans_are_never_empty() {
        assert_eq!(span(std::iter::empty(), true), (0.0, 1.0));
        let (lo, hi) = span([5.0, 5.0].into_iter(), false);
        assert!(lo < 5.0 && hi > 5.0);
        assert_eq!(span([2.0, 3.0].into_iter(), true).0, 0.0);
    }
}
