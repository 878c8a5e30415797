//! Figures in the words and widths a person reads: numbers to three significant digits, a mean
//! with its interval, a ratio with its verdict, a direction's arrow, counts, durations, the
//! terminal's width and line wrapping. Every rendering (summary, tables, the page, the figures)
//! says a figure the same way because it says it through here.

use virtperf_record::Better;

use super::rows::Overhead;

/// A metric's direction as reports and JSON spell it.
pub fn better_str(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
        Better::Neither => "neither",
    }
}

/// The arrow tables put after a metric: ↑ higher is better, ↓ lower, · neither.
pub fn arrow(better: &str) -> &'static str {
    match better {
        "higher" => "↑",
        "lower" => "↓",
        _ => "·",
    }
}

/// 4 significant digits, no exponent for ordinary magnitudes.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e9).contains(&a) {
        return format!("{x:.3e}");
    }
    let digits = (3 - a.log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

/// `mean ± half-width`, `mean [low, high]` where the interval is not centred on it (one kept above
/// zero, [`super::positive_ci`]), or `mean (n=1)` / `mean (n=5, all equal)` where none exists.
pub fn mean_text(mean: f64, ci95: Option<[f64; 2]>, n: usize) -> String {
    match ci95 {
        Some([l, h]) if ((h - mean) - (mean - l)).abs() > 1e-6 * (h - l).abs().max(mean.abs()) => {
            format!("{} [{}, {}]", fmt_num(mean), fmt_num(l), fmt_num(h))
        }
        Some([l, h]) => format!("{} ± {}", fmt_num(mean), fmt_num((h - l) / 2.0)),
        None if n < 2 => format!("{} (n=1)", fmt_num(mean)),
        None => format!("{} (n={n}, all equal)", fmt_num(mean)),
    }
}

/// The verdict on a ratio: `worse` or `better` when its CI excludes 1 (by the metric's
/// direction), `~same` when it holds 1, none without a CI.
pub fn verdict(o: &Overhead, better: &str) -> Option<&'static str> {
    match o.ci {
        Some([l, h]) if l > 1.0 || h < 1.0 => {
            let bigger = l > 1.0;
            let worse = (bigger && better == "lower") || (!bigger && better == "higher");
            Some(if worse { "worse" } else { "better" })
        }
        Some(_) => Some("~same"),
        None => None,
    }
}

pub fn overhead_text(o: &Overhead, better: &str) -> String {
    let verdict = verdict(o, better).map(|v| format!(" {v}")).unwrap_or_default();
    match (o.ci, o.no_ci) {
        (Some([l, h]), _) => format!("×{:.3} [{:.3}, {:.3}]{verdict}", o.ratio, l, h),
        (None, Some(why)) if why == virtperf_stats::NO_CI_UNBOUNDED => format!("×{:.3} [unbounded]", o.ratio),
        (None, Some(why)) if why == virtperf_stats::NO_CI_ONE_SAMPLE => {
            format!("×{:.3} (n=1, no CI)", o.ratio)
        }
        (None, _) => format!("×{:.3} (no CI)", o.ratio),
    }
}

/// A count with thin spaces between thousands: 12 986.
pub fn fmt_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Seconds as a person says them: "40 s", "6 min".
pub fn human_secs(s: f64) -> String {
    if s < 90.0 {
        format!("{:.0} s", s.max(1.0))
    } else if s < 5400.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// Terminal width the summary is laid out for.
pub const WIDTH: u16 = 100;

/// `line` broken at spaces into lines of at most `width` columns (a word longer than that stands
/// alone), continuation lines indented by two spaces; each line ends with a newline.
pub fn wrap(line: &str, width: usize) -> String {
    let mut out = String::new();
    let (mut cur, mut words) = (String::new(), 0);
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        if words > 0 && cur.chars().count() + 1 + word.chars().count() > width {
            out += &cur;
            out.push('\n');
            cur = String::from("  ");
            words = 0;
        }
        if words > 0 {
            cur.push(' ');
        }
        cur += word;
        words += 1;
    }
    out += &cur;
    out.push('\n');
    out
}

/// A runtime line of the manifest says the guest CPU is emulated (QEMU or libvirt under TCG).
pub fn runtime_emulated(rt: &str) -> bool {
    rt.contains("accel tcg") || rt.contains("domain_type qemu") || rt.contains("(TCG")
}

/// A value with 3 significant digits: times in the unit that reads best ("16.4 µs" for 16 439
/// ns), other large values with an SI prefix ("453M iter/s").
pub fn fmt_value(x: f64, unit: &str) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    const TIME: [(&str, f64); 4] = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let sig3 = |v: f64| {
        let a = v.abs();
        let digits = if a == 0.0 { 0 } else { (2 - a.log10().floor() as i32).clamp(0, 4) as usize };
        format!("{v:.digits$}")
    };
    if let Some(i) = TIME.iter().position(|(u, _)| *u == unit || (unit == "us" && *u == "µs")) {
        let secs = x * TIME[i].1;
        let (u, scale) = TIME.iter().rev().find(|(_, s)| secs.abs() >= *s).copied().unwrap_or(TIME[0]);
        return format!("{} {u}", sig3(secs / scale));
    }
    let (v, prefix) = match x.abs() {
        a if a >= 1e9 => (x / 1e9, "G"),
        a if a >= 1e6 => (x / 1e6, "M"),
        a if a >= 1e4 => (x / 1e3, "k"),
        _ => (x, ""),
    };
    if prefix.is_empty() {
        format!("{} {unit}", sig3(v))
    } else {
        format!("{}{prefix} {unit}", sig3(v))
    }
}
