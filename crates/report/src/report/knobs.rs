//! What each knob costs against its default (docs/knobs.md): a knob's variant (`knobs = [...]`
//! in the experiment, the manifest's `against`) is the same environment but for one knob, and its
//! trials ran in the same case groups as the default's; its ratio to the default is paired like
//! any environment's to its baseline, and said in the same words.

use serde::Serialize;

use super::rows::ResultRow;
use super::{paired, paired_overhead, side_ratio, Report, Stating, Tally};

/// One knob's cost on one workload's metric: the variant against its default.
#[derive(Debug, Clone, Serialize)]
pub struct KnobCost {
    /// The variant (`container [seccomp=default]`).
    pub environment: String,
    /// The environment it is stated against: the same, with the knob at its default.
    pub against: String,
    /// The knob and its value (`seccomp=default`).
    pub knob: String,
    pub workload: String,
    /// The workload's kind (its metrics' prefix).
    pub kind: String,
    pub metric: String,
    /// One of its case's headline metrics: the ones its line says (all are in the JSON).
    pub headline: bool,
    pub better: &'static str,
    /// The launches of each side it was measured over.
    pub launches: usize,
    /// The ratio variant / default, and the verdict on it in the report's words.
    pub overhead: Option<super::Overhead>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<super::RowVerdict>,
}

/// Each knob's variant and its (default, knob) from the manifest's `against`.
pub fn variants(manifest: &serde_json::Value) -> Vec<(String, String, String)> {
    manifest["against"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(v, a)| {
            Some((
                v.clone(),
                a["against"].as_str()?.to_string(),
                a["knob"].as_str().unwrap_or("").to_string(),
            ))
        })
        .collect()
}

/// The knob costs of a run: for each variant, each of its top-level rows with a direction,
/// against the same row of its default (their verdicts are the report's, set once it has its
/// target).
pub(super) fn costs(
    rows: &super::RunRows,
    tally: &Tally,
    results: &[ResultRow],
    how: &Stating,
) -> Vec<KnobCost> {
    let envs = &rows.envs;
    let idx = |name: &str| envs.iter().find(|e| e.name == name).map(|e| e.idx);
    let mut out = Vec::new();
    for (variant, against, knob) in variants(&rows.info.manifest) {
        let (Some(e), Some(a)) = (idx(&variant), idx(&against)) else { continue };
        for r in results
            .iter()
            .filter(|r| r.environment == variant && r.peer.is_none() && r.instance.is_none())
            .filter(|r| r.better != "neither")
        {
            let Some(case) = rows.cases.iter().find(|c| c.label == r.workload) else { continue };
            // The metric on the clock the row headlines (its host-timed twin where it is).
            let shown = if r.clock == Some("host") {
                format!("{}{}", r.metric, virtperf_record::HOST_SUFFIX)
            } else {
                r.metric.clone()
            };
            let side = |x: usize| tally.side(case.idx, &shown, (x, None));
            let overhead = if how.estimate == paired::Estimate::Paired {
                paired_overhead(&tally.pairs_apart(case.idx, &shown, e, a), None)
            } else {
                match (side(e), side(a)) {
                    (Some(x), Some(y)) => side_ratio(&x, &y, how.level),
                    _ => None,
                }
            };
            out.push(KnobCost {
                environment: variant.clone(),
                against: against.clone(),
                knob: knob.clone(),
                workload: r.workload.clone(),
                kind: r.kind.clone(),
                metric: r.metric.clone(),
                headline: r.headline,
                better: r.better,
                launches: r.launches,
                overhead,
                verdict: None,
            });
        }
    }
    out
}

/// The knobs' lines, one per variant: "seccomp=default against container: syscall time 22 %
/// slower (15–30 %); pipe_rr time ≈ same: …".
pub fn lines(r: &Report) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for k in r.knob_costs.iter().filter(|k| k.headline) {
        // `syscall time`, `tcp_rr rate`: the metric less its workload's prefix.
        let metric = k.metric.strip_prefix(&format!("{}_", k.kind)).unwrap_or(&k.metric).replace('_', " ");
        let said = match &k.verdict {
            // A number and its % kept together where the line wraps, as every other line does.
            Some(v) => format!("{} {metric} {}", k.workload, v.phrase.replace(" %", "\u{a0}%")),
            None => format!("{} {metric}: no ratio", k.workload),
        };
        let head =
            format!("{} against {}", if k.knob.is_empty() { &k.environment } else { &k.knob }, k.against);
        match out.iter_mut().find(|(h, _)| *h == head) {
            Some((_, l)) => {
                l.push_str("; ");
                l.push_str(&said);
            }
            None => out.push((head, said)),
        }
    }
    // Why, where the knob changed what the kernel says of the CPU's vulnerabilities (a guest's
    // `mitigations`): its agents' own words beside the default's.
    let kernel = |env: &str| r.kernels.iter().find(|k| k.environment == env);
    for (head, l) in &mut out {
        let Some(k) = r.knob_costs.iter().find(|k| {
            let h = if k.knob.is_empty() { &k.environment } else { &k.knob };
            *head == format!("{h} against {}", k.against)
        }) else {
            continue;
        };
        let (Some(v), Some(a)) = (kernel(&k.environment), kernel(&k.against)) else { continue };
        let (vw, aw) = (super::kernels::vulnerability_words(v), super::kernels::vulnerability_words(a));
        if vw != aw {
            l.push_str(&format!(
                " — its kernel says: {} (the default's: {})",
                vw.as_deref().unwrap_or("nothing of the CPU's vulnerabilities"),
                aw.as_deref().unwrap_or("nothing of them")
            ));
        }
    }
    out
}

/// The knobs' section of the terminal report (empty without knobs).
pub fn render(r: &Report, width: usize) -> String {
    let lines = lines(r);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nWhat each knob costs against its default ({}, 95 %; the variant's change):\n",
        match r.estimate {
            paired::Estimate::Paired => "paired",
            paired::Estimate::Unpaired => "unpaired",
        }
    );
    for (head, l) in lines {
        out += &super::wrap(&format!("- {head}: {l}"), width);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(knob: &str, workload: &str, metric: &str, ratio: f64, ci: [f64; 2]) -> KnobCost {
        let o = super::super::Overhead {
            ci90: Some(ci),
            ..super::super::Overhead::unpaired(ratio, Some(ci), None)
        };
        let v = super::super::answer::overhead_verdict(&o, "lower", 3, 0.05).unwrap();
        KnobCost {
            environment: format!("container [{knob}]"),
            against: "container".into(),
            knob: knob.into(),
            workload: workload.into(),
            kind: workload.into(),
            metric: metric.into(),
            headline: true,
            better: "lower",
            launches: 3,
            overhead: Some(o),
            verdict: Some(super::super::answer::json_verdict(&v, super::super::answer::Reading::Time)),
        }
    }

    #[test]
    fn each_knob_is_one_line_of_its_workloads_in_the_reports_words() {
        let mut r = super::super::summary_test_report();
        assert_eq!(render(&r, 100), "", "no knobs, no section");
        r.knob_costs = vec![
            cost("seccomp=default", "syscall", "syscall_time", 1.23, [1.15, 1.31]),
            cost("seccomp=default", "pipe_rr", "pipe_rr_time", 1.01, [0.985, 1.035]),
            cost("readonly_rootfs=false", "syscall", "syscall_time", 0.99, [0.90, 1.08]),
        ];
        let text = render(&r, 100);
        let flat = text.replace("\n  ", " ").replace('\u{a0}', " ");
        assert!(
            text.contains("What each knob costs against its default (unpaired, 95 %; the variant's change):"),
            "{text}"
        );
        assert!(
            flat.contains("- seccomp=default against container: syscall time 23 % slower (15–31 %); pipe_rr time ≈ same: 1.0 % slower"),
            "{flat}"
        );
        assert!(
            flat.contains(
                "- readonly_rootfs=false against container: syscall time inconclusive: 1.0 % faster"
            ),
            "{flat}"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        // A knob that changed what the kernel says of the CPU's vulnerabilities says so, beside
        // the default's; one that did not (seccomp) says nothing of the kernel.
        let k = |env: &str, off: bool, vulnerable: &[&str], mitigated: &[&str]| {
            super::super::kernels::EnvKernel {
                environment: env.into(),
                release: "6.1.0-40-amd64".into(),
                mitigations_off: off,
                mitigated: mitigated.iter().map(|x| x.to_string()).collect(),
                vulnerable: vulnerable.iter().map(|x| x.to_string()).collect(),
                not_affected: 3,
                other: Vec::new(),
                launches: 3,
                agree: true,
            }
        };
        let mut m = cost("mitigations=off", "syscall", "syscall_time", 0.97, [0.95, 0.99]);
        m.environment = "qemu [mitigations=off]".into();
        m.against = "qemu".into();
        r.knob_costs.push(m);
        r.kernels = vec![
            k("container", false, &[], &["spectre_v2"]),
            k("container [seccomp=default]", false, &[], &["spectre_v2"]),
            k("qemu", false, &["spec_store_bypass"], &["spectre_v1", "spectre_v2"]),
            k("qemu [mitigations=off]", true, &["spectre_v1", "spectre_v2", "spec_store_bypass"], &[]),
        ];
        let ls = lines(&r);
        let (_, off) = ls.iter().find(|(h, _)| h == "mitigations=off against qemu").expect("its line");
        assert!(
            off.ends_with(" — its kernel says: 3 vulnerable (spectre_v1, spectre_v2, spec_store_bypass), 3 not affected (the default's: 2 mitigated, 1 vulnerable (spec_store_bypass), 3 not affected)"),
            "{off}"
        );
        let (_, sec) = ls.iter().find(|(h, _)| h == "seccomp=default against container").unwrap();
        assert!(!sec.contains("its kernel"), "{sec}");
    }
}
