//! Verdicts as JUnit XML, the report every CI system annotates (GitLab, Jenkins, GitHub actions
//! that read test reports): one test case per metric — a **regression** fails, an
//! **inconclusive** metric is skipped with its reason (a CI shows it as a warning, not a pass), and
//! everything else passes with its figures in the case's output (the caller says which: see
//! `compare::junit_kind`). Serialized by nextest's `quick-junit`.

use anyhow::Result;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

/// How a verdict shows in CI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pass,
    /// A regression: the case fails.
    Fail,
    /// Inconclusive: the case is skipped with its reason.
    Skip,
}

/// One metric's verdict.
#[derive(Debug, Clone)]
pub struct Case {
    /// The test's class: environment / workload.
    pub group: String,
    /// The test's name: the metric (with its peer or instance).
    pub name: String,
    pub verdict: &'static str,
    pub kind: Kind,
    /// What the verdict rests on, in words ("overhead ×1.12 [1.05, 1.19], threshold 5 %").
    pub detail: String,
}

/// The JUnit document of one suite of verdicts (`suite`: what was compared).
pub fn render(report_name: &str, suite: &str, cases: &[Case]) -> Result<String> {
    let mut ts = TestSuite::new(suite);
    for c in cases {
        let status = match c.kind {
            Kind::Fail => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(format!("{}: {}", c.verdict, c.detail)).set_type(c.verdict);
                s
            }
            Kind::Skip => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!("{}: {}", c.verdict, c.detail)).set_type(c.verdict);
                s
            }
            Kind::Pass => TestCaseStatus::success(),
        };
        let mut tc = TestCase::new(c.name.as_str(), status);
        tc.set_classname(c.group.as_str());
        tc.set_system_out(format!("{}: {}", c.verdict, c.detail));
        ts.add_test_case(tc);
    }
    let mut r = Report::new(report_name);
    r.add_test_suite(ts);
    Ok(r.to_string()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regression_fails_an_inconclusive_metric_is_skipped_the_rest_pass() {
        let case = |name: &str, verdict, kind| Case {
            group: "gvisor / syscall".into(),
            name: name.into(),
            verdict,
            kind,
            detail: "overhead ×1.12 [1.05, 1.19] <&> threshold 5 %".into(),
        };
        let xml = render(
            "virtperf compare",
            "run 1 → run 2",
            &[
                case("syscall_time", "regression", Kind::Fail),
                case("cpu", "inconclusive", Kind::Skip),
                case("rate", "no change", Kind::Pass),
            ],
        )
        .unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
        assert_eq!(suite.attribute("tests"), Some("3"));
        assert_eq!(suite.attribute("failures"), Some("1"));
        assert_eq!(suite.attribute("skipped"), Some("1"));
        let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
        // The message survives XML escaping intact.
        assert!(failure.attribute("message").unwrap().contains("<&>"), "{xml}");
        let cases: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("testcase")).collect();
        assert_eq!(cases[0].attribute("classname"), Some("gvisor / syscall"));
        assert_eq!(cases[0].attribute("name"), Some("syscall_time"));
    }
}
