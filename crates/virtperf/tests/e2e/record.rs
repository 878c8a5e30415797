//! The record a run leaves: a database made before cases had records (schema 9) reports byte for
//! byte as it did then, and a run made now records what each case is, so that its report never
//! asks the workload code.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::util::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Where `got` first differs from `want`, in lines, for the failure message.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let i = w.iter().zip(&g).position(|(a, b)| a != b).unwrap_or(w.len().min(g.len()));
    format!(
        "line {}: was {:?}, now {:?} ({} lines then, {} now)",
        i + 1,
        w.get(i).copied().unwrap_or("<end>"),
        g.get(i).copied().unwrap_or("<end>"),
        w.len(),
        g.len()
    )
}

/// A database virtperf made before cases had records (commit 6e820c6: run 1 a paired run of
/// native and a container over every family, a shaped link, a background load, the disk matrix,
/// the timer, a command better higher and explain's mechanisms; run 2 RFC 2544's procedure) is read
/// through a migrated copy — its cases described once by today's workloads — and every view of it
/// is the same, byte for byte, as what that virtperf printed: the summary, `--full`, `--json`,
/// `--explain`, the page and the CSV export. The file itself is never written. One deliberate
/// change since: `run1.json`'s 26 `predicted_ci` pairs are on the log scale (7178ee7), as every
/// measured ratio's interval is; and run 2's summary leads with RFC 2544's answer (frame size by
/// direction, the profile said first) where a one-sample matrix and the tables were, and its
/// JSON rows carry the profile and time figures that answer reads — `--full` and the page as then.
/// No other byte of any view moved.
pub(crate) fn a_database_from_before_records_reports_byte_for_byte_as_before() -> Outcome {
    let fx = Fixture::new();
    let original = fixtures().join("before-records.db");
    std::fs::copy(&original, &fx.db).expect("a copy of the fixture database");
    let before = sha256(&std::fs::read(&fx.db).unwrap());
    let expected = fixtures().join("before-records");
    let mut wrong = Vec::new();
    let views: [(&str, &str); 7] = [
        ("run1.summary.txt", "report 1"),
        ("run1.full.txt", "report 1 --full"),
        ("run1.explain.txt", "report 1 --explain"),
        ("run1.json", "report 1 --json"),
        ("run2.summary.txt", "report 2"),
        ("run2.full.txt", "report 2 --full"),
        ("run2.json", "report 2 --json"),
    ];
    for (file, line) in views {
        let out = fx.vp(line);
        assert_ok(&out, line);
        let want = std::fs::read_to_string(expected.join(file)).unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        if got != want {
            wrong.push(format!("`{line}` ({file}): {}", first_difference(&want, &got)));
        }
    }
    // The page and the export, by their SHA-256 (sha256sum's lines).
    let sums = std::fs::read_to_string(expected.join("SHA256SUMS")).unwrap();
    for l in sums.lines() {
        let (sum, file) = l.split_once("  ").expect("`SUM  FILE`");
        let run = &file[3..4];
        let path = fx.path(file);
        let p = path.to_str().unwrap();
        let out = if file.ends_with(".html") {
            fx.vp_args(&["report", run, "--html", p])
        } else {
            let out = fx.vp_args(&["export", run, "--format", "csv"]);
            std::fs::write(&path, &out.stdout).unwrap();
            out
        };
        assert_ok(&out, file);
        let got = sha256(&std::fs::read(&path).unwrap());
        if got != sum {
            wrong.push(format!("{file}: SHA-256 {got}, was {sum}"));
        }
    }
    assert!(wrong.is_empty(), "views that changed:\n{}", wrong.join("\n"));
    assert_eq!(sha256(&std::fs::read(&fx.db).unwrap()), before, "a report wrote the database");
    println!("    2 runs of schema 9: 7 views and 4 files byte for byte as then; the file untouched");
    Outcome::Pass
}

/// A run made now stores each case's record and the metrics of its build in its first
/// transaction: the report reads these, and a record edited in the database changes what the
/// report says (the report does not ask the workload).
pub(crate) fn a_run_records_what_each_case_is_and_the_report_reads_only_that() -> Outcome {
    let fx = Fixture::new();
    fx.ok("run --env native --workload cpu:target_time=10ms --workload command:cmd=date,better=higher --reps 2 --warmup 0");
    let c = rusqlite::Connection::open(&fx.db).unwrap();
    let records: Vec<(String, String)> = {
        let mut st = c.prepare("SELECT kind, record FROM cases ORDER BY idx").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    };
    let rec = |k: &str| -> serde_json::Value {
        let r = records.iter().find(|r| r.0 == k).unwrap_or_else(|| panic!("no {k} case: {records:?}"));
        serde_json::from_str(&r.1).unwrap()
    };
    let cpu = rec("cpu");
    assert_eq!((cpu["family"].as_str(), cpu["headlines"].as_u64()), (Some("compute"), Some(1)), "{cpu}");
    assert_eq!(cpu["metrics"][0]["name"], "cpu_rate");
    assert_eq!(cpu["metrics"][0]["better"], "higher");
    // The command's figures are better as its parameters say.
    let cmd = rec("command");
    let better = |m: &str| {
        cmd["metrics"].as_array().unwrap().iter().find(|x| x["name"] == m).map(|x| x["better"].clone())
    };
    assert_eq!(better("command_regex"), Some("higher".into()), "{cmd}");
    assert_eq!(better("command_time"), Some("lower".into()), "{cmd}");
    let n: i64 = c.query_row("SELECT count(*) FROM metrics", [], |r| r.get(0)).unwrap();
    assert!(n > 50, "the build's metrics: {n}");
    // The report's direction is the record's: flipped in the database, the row says so.
    let better_of = |doc: &serde_json::Value| {
        doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == "cpu_rate")
            .map(|r| r["better"].clone())
    };
    assert_eq!(better_of(&fx.report()), Some("higher".into()));
    let flipped = cpu.to_string().replace(r#""better":"higher""#, r#""better":"lower""#);
    c.execute("UPDATE cases SET record = ?1 WHERE kind = 'cpu'", [&flipped]).unwrap();
    assert_eq!(better_of(&fx.report()), Some("lower".into()), "read from the record, not the workload");
    println!("    {} cases recorded, {n} metrics of the build; the report follows the record", records.len());
    Outcome::Pass
}
