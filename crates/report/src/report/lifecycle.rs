//! Start-up and memory per environment, from each launch's record: how long a launch took in
//! phases on the host's clock (prepared, a guest's kernel boot, to the agent's hello, the first
//! request answered, the teardown) and what its host processes held once ready and idle (PSS,
//! USS, RSS, the cgroup's charge) — each a mean over launches with its interval, as every
//! measurement. Runs stored before launches had phases have none: nothing here is said of them.

use serde::Serialize;
use virtperf_record::store::LaunchLife;
#[cfg(test)]
use virtperf_record::store::Lifecycle;
use virtperf_stats::Summary;

use super::StartTimes;

/// One environment's launches in phases and its memory once ready.
#[derive(Debug, Serialize)]
pub struct Startup {
    /// Launches with phases.
    pub launches: usize,
    /// Asked for to the agent's hello (prepared + started), ms.
    pub ready_ms: StartTimes,
    /// The phases, in order, ms: `prepared`, `kernel boot` (guests), `init and agent` (guests) or
    /// `runtime and agent`, `first answer`, `teardown`.
    pub phases: Vec<Figure>,
    /// Once ready and idle, MiB: `PSS`, `USS`, `RSS`, `cgroup charge`; then at the end of the
    /// instances' lives, just before their teardown: `PSS at the end`, `USS at the end`, `cgroup
    /// charge at the end` (each where the launches stored it).
    pub memory: Vec<Figure>,
    /// The host's CPU over a launch on its own (asked for to ready and its first round trips:
    /// every process of the host, the runtime's and the kernel's work included), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cpu_ms: Option<StartTimes>,
    /// The host's CPU its processes used idle at the end of its life (a quiet window after its
    /// trials), % of one CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_cpu_pct: Option<StartTimes>,
    /// Host processes the instance ran once ready (the most over its launches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
}

/// How a memory figure's name ends when it was read at the end of the instance's life.
const AT_THE_END: &str = " at the end";

/// A named figure of a launch, over launches.
#[derive(Debug, Serialize)]
pub struct Figure {
    pub name: &'static str,
    pub unit: &'static str,
    #[serde(flatten)]
    pub of: StartTimes,
}

/// A figure over launches: a time or a size is never below zero, so a wide interval is the
/// log scale's (`positive_ci`), as a ratio's.
pub(super) fn times(xs: &[f64]) -> Option<StartTimes> {
    Summary::of(xs).map(|x| StartTimes {
        n: x.n,
        mean: x.mean,
        ci95: x.ci95.map(|(l, h)| super::positive_ci(l, h, x.mean, x.min)).map(|(l, h)| [l, h]),
        no_ci: x.no_ci_reason(),
        min: x.min,
        max: x.max,
    })
}

/// The start-up of environment `env` from the launches that stored phases (None: none did).
pub fn startup(launches: &[LaunchLife], env: usize) -> Option<Startup> {
    let mine: Vec<&LaunchLife> = launches.iter().filter(|l| l.env_idx == env).collect();
    let ready: Vec<f64> = mine.iter().filter_map(|l| l.life.prepare_ms.map(|p| p + l.start_ms)).collect();
    let ready_ms = times(&ready)?;
    let figure = |name, unit, f: &dyn Fn(&LaunchLife) -> Option<f64>| {
        let xs: Vec<f64> = mine.iter().filter_map(|l| f(l)).collect();
        times(&xs).map(|of| Figure { name, unit, of })
    };
    let guest = mine.iter().any(|l| l.life.boot_ms.is_some());
    let mib = |v: Option<u64>| v.map(|k| k as f64 / 1024.0);
    let after_boot = |l: &LaunchLife| l.life.boot_ms.map(|b| (l.start_ms - b).max(0.0));
    let phases = [
        figure("prepared", "ms", &|l| l.life.prepare_ms),
        if guest { figure("kernel boot", "ms", &|l| l.life.boot_ms) } else { None },
        if guest {
            figure("init and agent", "ms", &after_boot)
        } else {
            figure("runtime and agent", "ms", &|l| Some(l.start_ms))
        },
        figure("first answer", "ms", &|l| l.life.first_ms),
        figure("teardown", "ms", &|l| l.life.teardown_ms),
    ];
    let memory = [
        figure("PSS", "MiB", &|l| mib(l.life.pss_kib)),
        figure("USS", "MiB", &|l| mib(l.life.uss_kib)),
        figure("RSS", "MiB", &|l| mib(l.life.rss_kib)),
        figure("cgroup charge", "MiB", &|l| mib(l.life.charged_kib)),
        // The same instances at the end of their lives, just before their teardown: what their
        // trials left them holding (a guest's page cache, a runtime's buffers, a leak).
        figure("PSS at the end", "MiB", &|l| mib(l.life.pss_end_kib)),
        figure("USS at the end", "MiB", &|l| mib(l.life.uss_end_kib)),
        figure("cgroup charge at the end", "MiB", &|l| mib(l.life.charged_end_kib)),
    ];
    Some(Startup {
        launches: ready.len(),
        ready_ms,
        phases: phases.into_iter().flatten().collect(),
        memory: memory.into_iter().flatten().collect(),
        processes: mine.iter().filter_map(|l| l.life.processes).max(),
        idle_cpu_pct: times(&mine.iter().filter_map(|l| l.life.idle_cpu_pct).collect::<Vec<_>>()),
        host_cpu_ms: times(
            &mine
                .iter()
                .filter(|l| l.life.together == Some(1))
                .filter_map(|l| l.life.host_cpu_ms)
                .collect::<Vec<_>>(),
        ),
    })
}

/// What each added instance costs in memory: the slope of the instances' summed PSS over their
/// count, in one group of environments swept over `instances` (seed 000's N = 1, 2, 4) — density.
#[derive(Debug, Serialize)]
pub struct Density {
    pub group: String,
    /// (instances up together, their summed PSS in MiB) per launch block.
    pub points: Vec<(u32, f64)>,
    /// MiB per added instance (the slope), with its 95 % interval (Student t, n − 2 df).
    pub marginal_mib: f64,
    pub ci95: Option<[f64; 2]>,
    /// What the fit says N = 0 costs: memory the instances share (MiB, may be negative).
    pub fixed_mib: f64,
    /// Instances per GiB at the marginal cost.
    pub per_gib: Option<f64>,
}

/// A line fitted: slope, intercept, the slope's 95 % interval (where n ≥ 3).
type Fit = (f64, f64, Option<(f64, f64)>);

/// Least squares of y over x.
fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let b = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
    let a = my - b * mx;
    let ci = (points.len() >= 3).then(|| {
        let rss: f64 = points.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
        let se = (rss / (n - 2.0) / sxx).sqrt();
        let h = virtperf_stats::t_quantile(0.95, n - 2.0) * se;
        (b - h, b + h)
    });
    Some((b, a, ci))
}

/// The density of each group swept over two or more instance counts: each launch block whose
/// instances all stored their PSS is a point (N, their sum).
pub fn densities(envs: &[(usize, u32, &str)], launches: &[LaunchLife]) -> Vec<Density> {
    let mut groups: Vec<&str> = envs.iter().map(|e| e.2).collect();
    groups.dedup();
    let mut out = Vec::new();
    for g in groups {
        let mut points: Vec<(u32, f64)> = Vec::new();
        for (idx, n, _) in envs.iter().filter(|e| e.2 == g) {
            let mut blocks: std::collections::BTreeMap<Option<u32>, Vec<u64>> = Default::default();
            for l in launches.iter().filter(|l| l.env_idx == *idx) {
                if let Some(p) = l.life.pss_kib {
                    blocks.entry(l.block).or_default().push(p);
                }
            }
            for ps in blocks.values() {
                // A block of N instances is one point; an old launch without a block is not.
                if ps.len() == *n as usize {
                    points.push((*n, ps.iter().sum::<u64>() as f64 / 1024.0));
                }
            }
        }
        let distinct: std::collections::BTreeSet<u32> = points.iter().map(|p| p.0).collect();
        if distinct.len() < 2 {
            continue;
        }
        let xy: Vec<(f64, f64)> = points.iter().map(|(n, m)| (f64::from(*n), *m)).collect();
        let Some((b, a, ci)) = fit(&xy) else { continue };
        out.push(Density {
            group: g.to_string(),
            points,
            marginal_mib: b,
            ci95: ci.map(|(l, h)| [l, h]),
            fixed_mib: a,
            per_gib: (b > 0.0).then(|| 1024.0 / b),
        });
    }
    out
}

/// A density in words: "24.1 MiB (22.0–26.2) per added instance, 42 per GiB (N = 1, 2, 4; 6
/// launches)".
pub fn density_text(d: &Density) -> String {
    let ns: std::collections::BTreeSet<u32> = d.points.iter().map(|p| p.0).collect();
    let ns: Vec<String> = ns.iter().map(u32::to_string).collect();
    let ci = d
        .ci95
        .map(|[l, h]| format!(" ({}–{})", sig3(l), sig3(h)))
        .unwrap_or_else(|| " (no interval: 2 points)".into());
    let per = d.per_gib.map(|p| format!(", {:.0} per GiB", p)).unwrap_or_default();
    format!(
        "{} MiB{ci} per added instance{per} (N = {}; {} launch blocks; shared {} MiB)",
        sig3(d.marginal_mib),
        ns.join(", "),
        d.points.len(),
        sig3(d.fixed_mib)
    )
}

/// The densities' lines, for the summary and `--full`.
pub fn render_densities(ds: &[Density]) -> String {
    let mut out = String::new();
    if ds.is_empty() {
        return out;
    }
    out += "
Memory per added instance (the slope of the instances' summed PSS over their count):
";
    let w = ds.iter().map(|d| d.group.chars().count()).max().unwrap_or(0);
    for d in ds {
        out += &format!("  {:<w$}  {}\n", d.group, density_text(d));
    }
    out
}

/// Three significant digits.
fn sig3(v: f64) -> String {
    let digits = |a: f64| if a == 0.0 { 0 } else { (2 - a.log10().floor() as i32).clamp(0, 4) as usize };
    let d = digits(v.abs());
    let first = format!("{v:.d$}");
    // 99.96 rounds to "100.0": three digits are "100".
    let rounded: f64 = first.parse().unwrap_or(v);
    let d2 = digits(rounded.abs());
    if d2 < d {
        format!("{v:.d2$}")
    } else {
        first
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A mean over launches with its interval in the unit the mean reads best in: "412 ms (392–432)",
/// "1.20 s (1.10–1.31)", "24.1 MiB (23.9–24.3)"; "5.0 ms (n=1)" where there is no interval.
pub fn figure_text(t: &StartTimes, unit: &str) -> String {
    let (scale, unit) = match unit {
        "ms" if t.mean.abs() >= 1000.0 => (1e-3, "s"),
        "ms" if t.mean.abs() < 1.0 => (1e3, "µs"),
        u => (1.0, u),
    };
    let m = sig3(t.mean * scale);
    match t.ci95 {
        Some([l, h]) => format!("{m} {unit} ({}–{})", sig3(l * scale), sig3(h * scale)),
        None if t.n < 2 => format!("{m} {unit} (n=1)"),
        None => format!("{m} {unit} (n={}, all equal)", t.n),
    }
}

/// The answer's line for one environment: "ready in 412 ms (392–432), 24.1 MiB (23.9–24.3) PSS
/// once ready" (the phases are the table's).
pub fn answer_line(s: &Startup) -> String {
    let mut line = format!("ready in {}", figure_text(&s.ready_ms, "ms"));
    if let Some(p) = s.memory.iter().find(|f| f.name == "PSS") {
        line += &format!(", {} PSS once ready", figure_text(&p.of, "MiB"));
    }
    line
}

/// The summary's section: a line per environment, its ready time and memory.
pub fn render_summary(envs: &[(&str, &Startup)]) -> String {
    if envs.is_empty() {
        return String::new();
    }
    let w = envs.iter().map(|(n, _)| n.chars().count()).max().unwrap_or(0);
    let mut out = String::from(
        "
Start-up (asked for to the agent's hello, host clock, per launch; phases: --full):
",
    );
    for (name, s) in envs {
        out += &format!(
            "  {name:<w$}  {}
",
            answer_line(s)
        );
    }
    out
}

/// `report --full`'s section: per environment its ready time, each phase and its memory.
pub fn render(envs: &[(&str, &Startup)]) -> String {
    if envs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nstart-up and memory, per launch (host clock; memory as the host reads the instance's processes once ready and idle):\n",
    );
    let w = envs.iter().map(|(n, _)| n.chars().count()).max().unwrap_or(0);
    for (name, s) in envs {
        out +=
            &format!("  {name:<w$}  {} over {}\n", answer_line(s), plural(s.launches, "launch", "launches"));
        let phases: Vec<String> =
            s.phases.iter().map(|f| format!("{} {}", f.name, figure_text(&f.of, f.unit))).collect();
        out += &format!("  {:<w$}    phases: {}\n", "", phases.join(" · "));
        // Once ready (PSS is in the answer line above), then at the end of the instances' lives.
        let said = |f: &Figure, name: &str| format!("{name} {}", figure_text(&f.of, f.unit));
        let mem: Vec<String> = s
            .memory
            .iter()
            .filter(|f| f.name != "PSS" && !f.name.ends_with(AT_THE_END))
            .map(|f| said(f, f.name))
            .collect();
        if !mem.is_empty() {
            let procs = s
                .processes
                .map(|p| format!(" over {}", plural(p as usize, "process", "processes")))
                .unwrap_or_default();
            out += &format!("  {:<w$}    memory: {}{procs}\n", "", mem.join(" · "));
        }
        let end: Vec<String> =
            s.memory.iter().filter_map(|f| f.name.strip_suffix(AT_THE_END).map(|n| said(f, n))).collect();
        if !end.is_empty() {
            out += &format!("  {:<w$}    at the end, before teardown: {}\n", "", end.join(" · "));
        }
        if let Some(c) = &s.idle_cpu_pct {
            out += &format!(
                "  {:<w$}    idle after its trials: {} of one CPU (the host's, every process of it, over 250 ms)\n",
                "",
                figure_text(c, "%")
            );
        }
        if let Some(c) = &s.host_cpu_ms {
            out += &format!(
                "  {:<w$}    host CPU per launch (every process of the host): {}\n",
                "",
                figure_text(c, "ms")
            );
        }
    }
    out
}

/// A launch record for tests.
#[cfg(test)]
pub fn launch(
    env_idx: usize,
    start_ms: f64,
    prepare_ms: f64,
    boot_ms: Option<f64>,
    pss_kib: u64,
) -> LaunchLife {
    LaunchLife {
        env_idx,
        block: None,
        start_ms,
        life: Lifecycle {
            prepare_ms: Some(prepare_ms),
            boot_ms,
            first_ms: Some(0.2),
            teardown_ms: Some(30.0),
            pss_kib: Some(pss_kib),
            uss_kib: Some(pss_kib / 2),
            rss_kib: Some(pss_kib * 2),
            processes: Some(3),
            charged_kib: None,
            ..Lifecycle::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_is_said_in_phases_with_its_boot_and_its_memory() {
        let l = vec![
            launch(1, 1000.0, 20.0, Some(700.0), 40 * 1024),
            launch(1, 1100.0, 22.0, Some(760.0), 41 * 1024),
            launch(1, 1050.0, 21.0, Some(730.0), 42 * 1024),
            launch(0, 5.0, 1.0, None, 2048),
        ];
        let s = startup(&l, 1).expect("phases");
        assert_eq!(s.launches, 3);
        // Ready is prepared + spawn to hello, per launch: 1020, 1122, 1071 → mean 1071.
        assert!((s.ready_ms.mean - 1071.0).abs() < 1e-9, "{:?}", s.ready_ms);
        let names: Vec<&str> = s.phases.iter().map(|f| f.name).collect();
        assert_eq!(names, ["prepared", "kernel boot", "init and agent", "first answer", "teardown"]);
        // Init and agent: the hello less the boot, 300, 340, 320.
        assert!((s.phases[2].of.mean - 320.0).abs() < 1e-9);
        let line = answer_line(&s);
        assert!(
            line.starts_with("ready in 1.07 s (0.944–1.20), 41.0 MiB (38.5–43.5) PSS once ready"),
            "{line}"
        );
        let n = startup(&l, 0).unwrap();
        assert_eq!(n.phases[1].name, "runtime and agent", "no kernel of its own");
        assert_eq!(figure_text(&n.ready_ms, "ms"), "6.00 ms (n=1)");
        assert!(startup(&l, 2).is_none(), "no launches, nothing said");
        let text = render(&[("native", &n), ("qemu", &s)]);
        assert!(text.contains("  qemu    ready in 1.07 s"), "{text}");
        assert!(text.contains("kernel boot 730 ms (655–805)"), "{text}");
        assert!(
            text.contains("memory: USS 20.5 MiB (19.3–21.7) · RSS 82.0 MiB (77.0–87.0) over 3 processes"),
            "{text}"
        );
        // Density: blocks of N = 1, 2, 4 instances at 10 MiB each plus 4 MiB shared.
        let mut l = Vec::new();
        for (env, n) in [(0usize, 1u32), (1, 2), (2, 4)] {
            for block in 0..2u32 {
                for k in 0..n {
                    let mut x = launch(env, 5.0, 1.0, None, 10 * 1024 + u64::from(block + k) * 16);
                    x.block = Some(block);
                    if k == 0 {
                        x.life.pss_kib = x.life.pss_kib.map(|p| p + 4 * 1024);
                    }
                    l.push(x);
                }
            }
        }
        let envs = [(0, 1, "c"), (1, 2, "c"), (2, 4, "c")];
        let d = densities(&envs, &l);
        assert_eq!(d.len(), 1);
        assert!((d[0].marginal_mib - 10.0).abs() < 0.1, "{:?}", d[0]);
        assert!((d[0].fixed_mib - 4.0).abs() < 0.2, "{:?}", d[0]);
        let [lo, hi] = d[0].ci95.unwrap();
        assert!(lo < d[0].marginal_mib && d[0].marginal_mib < hi && hi - lo < 0.5, "{:?}", d[0]);
        assert!(density_text(&d[0]).starts_with("10.0 MiB ("), "{}", density_text(&d[0]));
        assert!(
            density_text(&d[0]).contains("per added instance, 102 per GiB (N = 1, 2, 4; 6 launch blocks"),
            "{}",
            density_text(&d[0])
        );
        // One count only: no slope.
        assert!(densities(&envs[..1], &l).is_empty());
        assert_eq!(sig3(99.996), "100");
        assert_eq!(sig3(0.09996), "0.100");
        assert_eq!(sig3(1.2345), "1.23");
    }

    /// What the instances held at the end of their lives is said beside what they held once
    /// ready, each under its own name, never mixed into the other's mean; launches that did not
    /// store it (an older run) leave it out.
    #[test]
    fn memory_at_the_end_is_said_beside_memory_once_ready() {
        let mut l = vec![launch(0, 5.0, 1.0, None, 10 * 1024), launch(0, 5.0, 1.0, None, 12 * 1024)];
        let s = startup(&l, 0).unwrap();
        assert!(s.memory.iter().all(|f| !f.name.ends_with("at the end")), "none stored, none said");
        for (x, end) in l.iter_mut().zip([30u64, 34]) {
            x.life.pss_end_kib = Some(end * 1024);
            x.life.uss_end_kib = Some(end * 512);
        }
        let s = startup(&l, 0).unwrap();
        let names: Vec<&str> = s.memory.iter().map(|f| f.name).collect();
        assert_eq!(names, ["PSS", "USS", "RSS", "PSS at the end", "USS at the end"]);
        assert!((s.memory[0].of.mean - 11.0).abs() < 1e-9, "once ready: {:?}", s.memory[0]);
        assert!((s.memory[3].of.mean - 32.0).abs() < 1e-9, "at the end: {:?}", s.memory[3]);
        let text = render(&[("native", &s)]);
        assert!(text.contains("    at the end, before teardown: PSS 32.0 MiB ("), "{text}");
        assert!(text.contains(" · USS 16.0 MiB ("), "{text}");
        assert!(!text.contains("idle after its trials"), "none stored, none said: {text}");
        let ready = text.lines().find(|l| l.contains("memory: ")).unwrap();
        assert!(ready.ends_with("over 3 processes") && !ready.contains("32.0"), "once ready alone: {ready}");
        l[0].life.idle_cpu_pct = Some(2.0);
        l[1].life.idle_cpu_pct = Some(3.0);
        let text = render(&[("qemu", &startup(&l, 0).unwrap())]);
        assert!(text.contains("    idle after its trials: 2.50 % ("), "{text}");
        assert!(text.contains(" of one CPU (the host's, every process of it, over 250 ms)"), "{text}");
    }
}
