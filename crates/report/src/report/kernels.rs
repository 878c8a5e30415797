//! The kernel each environment's agent runs on, as the agent said it (a guest's own kernel; the
//! host's for a native agent or a container): its release, whether its command line turns the
//! CPU-vulnerability mitigations off, and what it says of each vulnerability — the *why* beside a
//! `mitigations` knob's cost (docs/knobs.md). A guest's words: passed through
//! [`virtperf_record::printable`] and cut before they are said anywhere.

use serde::Serialize;
use virtperf_record::store::KernelView;

/// One environment's kernel, from its launches' views (the first one's figures; `agree` says
/// whether every launch said the same).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvKernel {
    pub environment: String,
    pub release: String,
    /// `mitigations=off` on its command line.
    pub mitigations_off: bool,
    /// The vulnerabilities it says it mitigates ("Mitigation: …"), by name.
    pub mitigated: Vec<String>,
    /// Those it says it is vulnerable to ("Vulnerable…"), by name.
    pub vulnerable: Vec<String>,
    /// How many it says its CPU is not affected by.
    pub not_affected: usize,
    /// Those in another state ("Unknown: …"), by name.
    pub other: Vec<String>,
    /// The launches whose agents said it, and whether they all said the same.
    pub launches: usize,
    pub agree: bool,
}

/// The most of a name or release said.
const MAX_NAME: usize = 48;

/// Each environment's kernel (`envs`: index and name), in the environments' order; one whose
/// launches said nothing is left out.
pub fn build(envs: &[(usize, &str)], views: &[(usize, KernelView)]) -> Vec<EnvKernel> {
    let said = |s: &str| virtperf_record::printable(s, MAX_NAME);
    let mut out = Vec::new();
    for (idx, name) in envs {
        let mine: Vec<&KernelView> = views.iter().filter(|v| v.0 == *idx).map(|v| &v.1).collect();
        let Some(first) = mine.first() else { continue };
        let (mut mitigated, mut vulnerable, mut other, mut not_affected) =
            (Vec::new(), Vec::new(), Vec::new(), 0);
        for (n, line) in &first.vulnerabilities {
            if line.starts_with("Mitigation") {
                mitigated.push(said(n));
            } else if line.starts_with("Vulnerable") {
                vulnerable.push(said(n));
            } else if line.starts_with("Not affected") {
                not_affected += 1;
            } else {
                other.push(said(n));
            }
        }
        out.push(EnvKernel {
            environment: name.to_string(),
            release: said(&first.release),
            mitigations_off: off(first),
            mitigated,
            vulnerable,
            not_affected,
            other,
            launches: mine.len(),
            // What is said of the kernel, not its whole command line (a UML guest's names its
            // instance's own directories).
            agree: mine.iter().all(|v| {
                v.release == first.release
                    && v.vulnerabilities == first.vulnerabilities
                    && off(v) == off(first)
            }),
        });
    }
    out
}

/// `mitigations=off` on the kernel's command line.
fn off(v: &KernelView) -> bool {
    v.cmdline.split_whitespace().any(|w| w == "mitigations=off")
}

/// Up to four names, then how many more.
fn names(xs: &[String]) -> String {
    let shown: Vec<&str> = xs.iter().take(4).map(String::as_str).collect();
    match xs.len() {
        n if n > 4 => format!("{}, {} more", shown.join(", "), n - 4),
        _ => shown.join(", "),
    }
}

/// What the kernel says of the CPU's vulnerabilities, in a phrase: "9 mitigated, 2 vulnerable
/// (spec_store_bypass, mmio_stale_data), 9 not affected" (None: it said nothing of them —
/// gVisor's Sentry has no such directory).
pub fn vulnerability_words(k: &EnvKernel) -> Option<String> {
    let mut parts = Vec::new();
    if !k.mitigated.is_empty() {
        parts.push(format!("{} mitigated", k.mitigated.len()));
    }
    if !k.vulnerable.is_empty() {
        parts.push(format!("{} vulnerable ({})", k.vulnerable.len(), names(&k.vulnerable)));
    }
    if k.not_affected > 0 {
        parts.push(format!("{} not affected", k.not_affected));
    }
    if !k.other.is_empty() {
        parts.push(format!("{} unknown ({})", k.other.len(), names(&k.other)));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The kernel in a line: "6.1.0-40-amd64, mitigations=off: 2 mitigated, 9 vulnerable (…)".
pub fn words(k: &EnvKernel) -> String {
    let mut s = if k.release.is_empty() { "release not said".to_string() } else { k.release.clone() };
    if k.mitigations_off {
        s += ", mitigations=off";
    }
    match vulnerability_words(k) {
        Some(v) => s += &format!(": {v}"),
        None => s += ": says nothing of the CPU's vulnerabilities",
    }
    if !k.agree {
        s += &format!(" (its {} launches did not all say the same: the first's)", k.launches);
    }
    s
}

/// `report --full`'s section: each environment's kernel as its agents saw it.
pub fn render(ks: &[EnvKernel], width: usize) -> String {
    if ks.is_empty() {
        return String::new();
    }
    let w = ks.iter().map(|k| k.environment.chars().count()).max().unwrap_or(0);
    let mut out = String::from(
        "\nKernels, as each environment's agent saw its own (release; /sys/devices/system/cpu/vulnerabilities):\n",
    );
    // Each environment's words beside its name, wrapped under them.
    let indent = w + 4;
    for k in ks {
        let body = super::wrap(&words(k), width.saturating_sub(indent).max(20));
        for (i, l) in body.lines().enumerate() {
            let head = if i == 0 { format!("  {:<w$}  ", k.environment) } else { " ".repeat(indent) };
            out += &format!("{head}{}\n", l.trim_start());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(cmdline: &str, vs: &[(&str, &str)]) -> KernelView {
        KernelView {
            release: "6.1.0-40-amd64".into(),
            cmdline: cmdline.into(),
            vulnerabilities: vs.iter().map(|(n, l)| (n.to_string(), l.to_string())).collect(),
        }
    }

    /// A guest's kernel is said by what it says of each vulnerability, counted by state, its
    /// `mitigations=off` seen on its command line; launches that disagree are said to; the
    /// guest's words cannot carry a terminal's escape sequences.
    #[test]
    fn a_kernel_is_said_by_what_it_mitigates_and_what_it_is_vulnerable_to() {
        let auto = view(
            "console=ttyS0 quiet",
            &[
                ("meltdown", "Not affected"),
                ("spectre_v1", "Mitigation: usercopy/swapgs barriers and __user pointer sanitization"),
                ("spectre_v2", "Mitigation: Retpolines; STIBP: disabled; RSB filling"),
                ("spec_store_bypass", "Vulnerable"),
                ("srbds", "Unknown: Dependent on hypervisor status"),
            ],
        );
        let off = view(
            "console=ttyS0 quiet mitigations=off",
            &[
                ("meltdown", "Not affected"),
                (
                    "spectre_v1",
                    "Vulnerable: __user pointer sanitization and usercopy barriers only; no swapgs barriers",
                ),
                ("spectre_v2", "Vulnerable; IBPB: disabled; STIBP: disabled"),
                ("spec_store_bypass", "Vulnerable"),
                ("srbds", "Unknown: Dependent on hypervisor status"),
            ],
        );
        let mut odd = off.clone();
        odd.release = "6.1\u{1b}[2J".into();
        let mut elsewhere = auto.clone();
        elsewhere.cmdline += " uml_dir=/run/virtperf/vp2-0-1";
        let views = vec![(0, auto), (0, elsewhere), (1, off.clone()), (1, off), (2, odd.clone()), (2, odd)];
        let ks = build(&[(0, "qemu"), (1, "qemu [mitigations=off]"), (2, "x"), (3, "none said")], &views);
        assert_eq!(ks.len(), 3, "an environment that said nothing is left out");
        assert_eq!(
            words(&ks[0]),
            "6.1.0-40-amd64: 2 mitigated, 1 vulnerable (spec_store_bypass), 1 not affected, 1 unknown (srbds)"
        );
        assert_eq!(
            words(&ks[1]),
            "6.1.0-40-amd64, mitigations=off: 3 vulnerable (spectre_v1, spectre_v2, spec_store_bypass), 1 not affected, 1 unknown (srbds)"
        );
        assert!(
            ks[0].agree && ks[0].launches == 2,
            "launches whose command lines name their own directories agree"
        );
        assert!(!ks[2].release.contains('\u{1b}'), "{:?}", ks[2].release);
        let text = render(&ks, 100);
        assert!(
            text.contains("\n  qemu [mitigations=off]  6.1.0-40-amd64, mitigations=off: 3 vulnerable"),
            "{text}"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        let many: Vec<String> = (0..6).map(|i| format!("v{i}")).collect();
        assert_eq!(names(&many), "v0, v1, v2, v3, 2 more");
        let none = EnvKernel {
            vulnerable: Vec::new(),
            mitigated: Vec::new(),
            not_affected: 0,
            other: Vec::new(),
            ..ks[0].clone()
        };
        assert_eq!(vulnerability_words(&none), None);
        assert!(words(&none).ends_with("says nothing of the CPU's vulnerabilities"));
    }
}
