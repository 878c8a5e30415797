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
    /// Once ready and idle, MiB: `PSS`, `USS`, `RSS`, `cgroup charge`.
    pub memory: Vec<Figure>,
    /// Host processes the instance ran once ready (the most over its launches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
}

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
fn times(xs: &[f64]) -> Option<StartTimes> {
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
    ];
    Some(Startup {
        launches: ready.len(),
        ready_ms,
        phases: phases.into_iter().flatten().collect(),
        memory: memory.into_iter().flatten().collect(),
        processes: mine.iter().filter_map(|l| l.life.processes).max(),
    })
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
        let mem: Vec<String> = s
            .memory
            .iter()
            .filter(|f| f.name != "PSS")
            .map(|f| format!("{} {}", f.name, figure_text(&f.of, f.unit)))
            .collect();
        if !mem.is_empty() {
            let procs = s
                .processes
                .map(|p| format!(" over {}", plural(p as usize, "process", "processes")))
                .unwrap_or_default();
            out += &format!("  {:<w$}    memory: {}{procs}\n", "", mem.join(" · "));
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
        assert_eq!(sig3(99.996), "100");
        assert_eq!(sig3(0.09996), "0.100");
        assert_eq!(sig3(1.2345), "1.23");
    }
}
