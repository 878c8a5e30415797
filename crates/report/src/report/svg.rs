//! A small SVG writer for the report's figures: a canvas, axes (linear or log, ticks chosen for
//! the range they show) and text that is never smaller than the page needs.
//!
//! Written by hand, not with a plotting library, for what the page demands and a plotting
//! backend cannot express: every mark carries a class the page's CSS recolours for a dark theme
//! (a backend writes fixed colours), truncated labels keep their full text in a `<title>`, log
//! axes get labelled ticks on ranges narrower than a decade (a backend labels powers of ten only,
//! so a forest plot of ×0.9–×1.2 showed one tick), and text sizes are fixed in pixels of a
//! figure whose width the page never shrinks below. What is drawn stays five shapes
//! (`figures.rs`); this module is only geometry and escaping.

use std::fmt::Write as _;

/// Every figure's width in px: the page's column (1180 px less its padding), so a figure is drawn at
/// the width it is shown, its text at its size (it was 540, shown at 578 px in a 1180 px column).
pub const W: f64 = 1080.0;
/// Text sizes, px (in the SVG's own units; the page never scales a figure below 1:1).
pub const TEXT: f64 = 14.0;
pub const SMALL: f64 = 13.0;
pub const FONT: &str = "DejaVu Sans, Verdana, sans-serif";

/// Colours that stay distinguishable for colour-blind readers and in print (Okabe–Ito, without
/// its black, which the dark theme would hide; yellow last: weak on white).
pub const PALETTE: [&str; 8] =
    ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#8A8A8A", "#F0E442"];

/// The colour of environment (or series) `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Width of `s` in px at `size`, estimated generously (DejaVu Sans averages ~0.6 em): used to
/// keep labels inside their area, never to place them exactly.
pub fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// `s` cut to `px` of width at `size`, with `…` when cut.
pub fn fit(s: &str, px: f64, size: f64) -> String {
    let max = (px / (size * 0.6)).floor().max(2.0) as usize;
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max - 1).collect::<String>())
    }
}

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[derive(Clone, Copy)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// One figure being drawn.
pub struct Canvas {
    pub w: f64,
    pub h: f64,
    body: String,
}

impl Canvas {
    pub fn new(h: f64) -> Self {
        Canvas { w: W, h, body: String::new() }
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, class: &str) {
        let _ = write!(
            self.body,
            "<line class=\"{class}\" x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" {}/>",
            stroke_of(class)
        );
    }

    /// A line in a data colour.
    pub fn stroke(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, color: &str, width: f64) {
        let _ = write!(
            self.body,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{color}\" stroke-width=\"{width}\"/>"
        );
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: Option<&str>) {
        let _ = write!(
            self.body,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\">{}</rect>",
            w.max(0.0),
            h.max(0.0),
            title.map(|t| format!("<title>{}</title>", esc(t))).unwrap_or_default()
        );
    }

    /// A rectangle painted by the page's theme (`band`: alternate rows; `bg`: the background).
    pub fn themed_rect(&mut self, x: f64, y: f64, w: f64, h: f64, class: &str) {
        let fill = if class == "band" { "#f3f5f8" } else { "#ffffff" };
        let _ = write!(
            self.body,
            "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>",
            w.max(0.0),
            h.max(0.0)
        );
    }

    /// A dot: filled, or hollow (a ring in `color`).
    pub fn dot(&mut self, x: f64, y: f64, r: f64, color: &str, hollow: bool, title: &str) {
        let paint = if hollow {
            format!("class=\"hollow\" fill=\"#ffffff\" stroke=\"{color}\" stroke-width=\"2\"")
        } else {
            format!("fill=\"{color}\"")
        };
        let _ = write!(
            self.body,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\" {paint}><title>{}</title></circle>",
            esc(title)
        );
    }

    /// A cross (an outlier's mark: a shape, not only a colour).
    pub fn cross(&mut self, x: f64, y: f64, r: f64, title: &str) {
        let _ = write!(
            self.body,
            "<path class=\"mark\" d=\"M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}\" stroke=\"#222222\" stroke-width=\"2\"><title>{}</title></path>",
            x - r,
            y - r,
            x + r,
            y + r,
            x - r,
            y + r,
            x + r,
            y - r,
            esc(title)
        );
    }

    pub fn polyline(&mut self, pts: &[(f64, f64)], color: &str, dashed: bool) {
        let p: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let dash = if dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        let _ = write!(
            self.body,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>",
            p.join(" ")
        );
    }

    /// Text whose vertical centre is `y`; `title` holds the full text of a cut label.
    pub fn text(&mut self, x: f64, y: f64, s: &str, anchor: Anchor, size: f64, title: Option<&str>) {
        self.text_in(x, y, s, anchor, size, title, None);
    }

    /// Text in a fixed colour (on a coloured cell), not the theme's.
    pub fn text_colored(&mut self, x: f64, y: f64, s: &str, size: f64, color: &str) {
        self.text_in(x, y, s, Anchor::Middle, size, None, Some(color));
    }

    #[allow(clippy::too_many_arguments)]
    fn text_in(
        &mut self,
        x: f64,
        y: f64,
        s: &str,
        anchor: Anchor,
        size: f64,
        title: Option<&str>,
        color: Option<&str>,
    ) {
        let a = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let (class, fill) = match color {
            Some(c) => ("fixed", c),
            None => ("t", "#1a1a1a"),
        };
        // Baseline a third of the size below the centre: centred in every renderer, without
        // dominant-baseline (which rasterisers support unevenly).
        let _ = write!(
            self.body,
            "<text class=\"{class}\" x=\"{x:.1}\" y=\"{:.1}\" font-size=\"{size}\" text-anchor=\"{a}\" fill=\"{fill}\">{}{}</text>",
            y + size * 0.35,
            esc(s),
            title.map(|t| format!("<title>{}</title>", esc(t))).unwrap_or_default()
        );
    }

    /// Vertical text (a y axis' description), centred on (x, y).
    pub fn vtext(&mut self, x: f64, y: f64, s: &str) {
        let _ = write!(
            self.body,
            "<text class=\"t\" x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{TEXT}\" text-anchor=\"middle\" fill=\"#1a1a1a\" transform=\"rotate(-90 {x:.1} {y:.1})\">{}</text>",
            esc(s)
        );
    }

    /// The SVG document; `label` is its accessible name.
    pub fn finish(self, label: &str) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h:.0}\" viewBox=\"0 0 {w} {h:.0}\" font-family=\"{FONT}\" role=\"img\" aria-label=\"{}\"><rect class=\"bg\" x=\"0\" y=\"0\" width=\"{w}\" height=\"{h:.0}\" fill=\"#ffffff\"/>{}</svg>",
            esc(label),
            self.body,
            w = self.w,
            h = self.h.ceil(),
        )
    }
}

/// Theme classes drawn as lines: their light-theme stroke (the page's CSS overrides it).
fn stroke_of(class: &str) -> &'static str {
    match class {
        "grid" => "stroke=\"#e2e5e9\" stroke-width=\"1\"",
        "ref" => "stroke=\"#333333\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\"",
        _ => "stroke=\"#555555\" stroke-width=\"1\"",
    }
}

/// A numeric axis: data `lo..hi` onto pixels `a..b` (b < a for a y axis), linear or log.
#[derive(Debug, Clone, Copy)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    pub a: f64,
    pub b: f64,
}

impl Axis {
    /// An axis over `vals` with a little room on both sides; from zero when `zero` (and linear);
    /// log when `log` and every value is positive.
    pub fn over(vals: impl Iterator<Item = f64>, log: bool, zero: bool, a: f64, b: f64) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in vals.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            return Axis { lo: if log { 0.5 } else { 0.0 }, hi: if log { 2.0 } else { 1.0 }, log, a, b };
        }
        if log {
            let (lo, hi) = if hi / lo < 1.02 { (lo / 1.05, hi * 1.05) } else { (lo, hi) };
            let pad = (hi / lo).powf(0.06);
            return Axis { lo: lo / pad, hi: hi * pad, log, a, b };
        }
        if zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        let pad = ((hi - lo) * 0.06).max(hi.abs().max(lo.abs()) * 0.02).max(1e-12);
        Axis {
            lo: if zero && lo >= 0.0 { 0.0 } else { lo - pad },
            hi: if zero && hi <= 0.0 { 0.0 } else { hi + pad },
            log,
            a,
            b,
        }
    }

    /// Whether values spanning `lo..hi` (positive) call for a log axis: a decade or more (a TCG
    /// guest's request rate beside native's, 2.5 k against 27 k, reads on one).
    pub fn wants_log(vals: impl Iterator<Item = f64>) -> bool {
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for v in vals.filter(|v| v.is_finite()) {
            if v <= 0.0 {
                return false;
            }
            lo = lo.min(v);
            hi = hi.max(v);
        }
        lo.is_finite() && hi / lo >= 10.0
    }

    pub fn px(&self, v: f64) -> f64 {
        let k = if self.log {
            (v.max(self.lo * 1e-3).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.a + (self.b - self.a) * k
    }

    /// Ticks inside the axis: 1-2-5 steps (linear), or on a log axis 1-2-5 per decade over wide
    /// ranges and linear steps within narrow ones (so ×0.9–×1.2 still gets 3–6 labelled ticks).
    pub fn ticks(&self) -> Vec<f64> {
        let inside = |v: &f64| *v >= self.lo * (1.0 - 1e-9) && *v <= self.hi * (1.0 + 1e-9);
        if !self.log || self.hi / self.lo < 4.0 {
            return linear_ticks(self.lo, self.hi, 5);
        }
        let decades = (self.hi / self.lo).log10();
        let mults: &[f64] = if decades <= 1.5 {
            &[1.0, 2.0, 3.0, 5.0]
        } else if decades <= 3.5 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        let mut out = Vec::new();
        let k0 = self.lo.log10().floor() as i32;
        let k1 = self.hi.log10().ceil() as i32;
        for k in k0..=k1 {
            for m in mults {
                let v = m * 10f64.powi(k);
                if inside(&v) {
                    out.push(v);
                }
            }
        }
        // Very wide: every other decade.
        while out.len() > 8 {
            out = out.into_iter().step_by(2).collect();
        }
        out
    }
}

/// About `n` ticks at 1-2-5 steps within lo..hi.
pub fn linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        // -0.0 and 1e-17 print as 0.
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    out
}

/// A tick's label: at most 3 significant digits, SI suffixes from 10 000 (12k, 1.5M, 2G).
pub fn tick_text(v: f64) -> String {
    let a = v.abs();
    let (x, suf) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let ax = x.abs();
    let s = if ax == 0.0 {
        "0".to_string()
    } else if ax >= 100.0 {
        format!("{x:.0}")
    } else {
        let d = (2 - ax.log10().floor() as i32).clamp(0, 6) as usize;
        let s = format!("{x:.d$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    format!("{s}{suf}")
}

/// A legend under a plot: one swatch and name per entry, wrapped to the figure's width.
/// Returns the height it took.
pub fn legend(c: &mut Canvas, top: f64, left: f64, entries: &[(String, String, bool)]) -> f64 {
    let (mut x, mut y) = (left, top + 10.0);
    for (name, color, hollow) in entries {
        let name = fit(name, c.w - left - 40.0, SMALL);
        let w = 26.0 + text_width(&name, SMALL) + 14.0;
        if x + w > c.w - 8.0 && x > left {
            x = left;
            y += 20.0;
        }
        c.stroke(x, y, x + 18.0, y, color, 2.0);
        c.dot(x + 9.0, y, 4.0, color, *hollow, name.as_str());
        c.text(x + 24.0, y, &name, Anchor::Start, SMALL, None);
        x += w;
    }
    if entries.is_empty() {
        0.0
    } else {
        y - top + 14.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_log_axes_get_several_labelled_ticks() {
        let a = Axis::over([0.95, 1.0, 1.12].into_iter(), true, false, 0.0, 400.0);
        let t = a.ticks();
        assert!(t.len() >= 3, "{t:?}");
        assert!(t.iter().all(|v| *v >= a.lo && *v <= a.hi));
        let wide = Axis::over([1e-7, 1e-4].into_iter(), true, false, 0.0, 400.0);
        let t = wide.ticks();
        assert!(t.len() >= 3 && t.len() <= 8, "{t:?}");
    }

    #[test]
    fn log_axes_map_decades_evenly_and_linear_axes_from_zero() {
        let a = Axis { lo: 1.0, hi: 100.0, log: true, a: 0.0, b: 200.0 };
        assert!((a.px(10.0) - 100.0).abs() < 1e-9);
        let l = Axis::over([3.0, 8.0].into_iter(), false, true, 300.0, 0.0);
        assert_eq!(l.lo, 0.0);
        assert!((l.px(0.0) - 300.0).abs() < 1e-9, "y axes run upwards");
        assert!(Axis::wants_log([107e-9, 76e-6].into_iter()));
        assert!(!Axis::wants_log([1.0, 2.0].into_iter()));
        assert!(!Axis::wants_log([0.0, 200.0].into_iter()));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_text(0.0), "0");
        assert_eq!(tick_text(1.5), "1.5");
        assert_eq!(tick_text(0.0012), "0.0012");
        assert_eq!(tick_text(250.0), "250");
        assert_eq!(tick_text(12_000.0), "12k");
        assert_eq!(tick_text(1_488_095.0), "1.49M");
        assert_eq!(linear_ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    #[test]
    fn labels_are_cut_to_their_area_and_escaped() {
        assert_eq!(fit("abcdefghij", 14.0 * 0.6 * 5.0, 14.0), "abcd…");
        assert_eq!(fit("abc", 100.0, 14.0), "abc");
        let mut c = Canvas::new(100.0);
        c.text(1.0, 1.0, "a<b", Anchor::Start, TEXT, Some("x & y"));
        let s = c.finish("t");
        assert!(s.contains("a&lt;b") && s.contains("<title>x &amp; y</title>"), "{s}");
    }
}
