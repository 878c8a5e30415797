//! Environments: where an agent runs.
//!
//! Every environment kind implements [`Environment`]: it declares its parameters, says whether it
//! can run on this host (and what to do when it cannot), and launches an [`Instance`]: an agent
//! reachable over a byte stream plus a way to read the host-side CPU time of everything the
//! instance runs. To add one, see `docs/environments/README.md`.

pub mod conn;
pub mod container;
pub mod container_net;
pub mod footprint;
pub mod gvisor;
pub mod libvirt;
pub mod native;
pub mod qemu;
pub mod scratch;
pub mod seccomp;
pub mod uml;

pub mod cgroup;
pub mod launch;

pub use cgroup::*;
pub use conn::CallError;
pub use launch::*;

/// Every environment kind this build knows.
pub static REGISTRY: &[&dyn Environment] =
    &[&native::Native, &container::Container, &gvisor::Gvisor, &uml::Uml, &qemu::Qemu, &libvirt::Libvirt];

pub fn find(kind: &str) -> Option<&'static dyn Environment> {
    REGISTRY.iter().copied().find(|e| e.kind() == kind)
}

pub fn kinds() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.kind()).collect()
}

/// The kind every other environment's overhead is measured against: the bare host.
pub fn baseline() -> &'static dyn Environment {
    &native::Native
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// What the baseline is, the registry says too.
    #[test]
    fn the_baseline_is_the_registrys_one_baseline_kind() {
        let bases: Vec<&str> = super::REGISTRY.iter().filter(|k| k.is_baseline()).map(|k| k.kind()).collect();
        assert_eq!(bases, [super::baseline().kind()]);
    }

    /// Where the source may name an environment kind other than in the kind's own files
    /// (`env/KIND.rs`, `env/KIND/`) and the registry (`env/mod.rs`), and why.
    const NAMED_ELSEWHERE: &[(&str, &str, &str)] = &[
        (
            "crates/record/src/store/schema.rs",
            "*",
            "the migration records what each kind was when the flags came",
        ),
        ("crates/virtperf/src/run.rs", "qemu", "the lab's driver domain is a QEMU guest by definition"),
        ("crates/virtperf/src/env/libvirt.rs", "qemu", "libvirt's own word: its domain type `qemu` (TCG)"),
        ("crates/virtperf/src/main.rs", "uml", "`image build`'s UML kernel is probed where it is built"),
        ("crates/virtperf/src/main.rs", "libvirt", "`domain-xml` prints the libvirt kind's example domain"),
        (
            "crates/virtperf/src/image/uml.rs",
            "uml",
            "a directory of the image cache, named after what it holds",
        ),
    ];

    /// docs/architecture.md's recipe for a new environment lists the files it touches; the rest
    /// of the tool asks the kind through `Environment`'s hooks. So no other source file names a
    /// kind (outside tests), in quotes or by its module's path: a `"qemu"` in doctor, the parser
    /// or the report, or an `env::libvirt::` call there, would be a file the recipe forgot.
    #[test]
    fn no_code_outside_a_kinds_files_names_the_kind() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        for krate in ["crates/virtperf/src", "crates/report/src", "crates/workload/src"] {
            crate::layers::tests::sources(&root.join(krate), &mut files);
        }
        let mut wrong = Vec::new();
        for f in &files {
            let rel = f.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(f).unwrap();
            for (i, line) in text.lines().enumerate() {
                let t = line.trim_start();
                if t.starts_with("#[cfg(test)]") || t.starts_with("#![cfg(test)]") {
                    break;
                }
                let code = line.split("//").next().unwrap_or("");
                for k in super::REGISTRY.iter().map(|k| k.kind()) {
                    // By its name in quotes, or by its module's path (`env::uml::probe`).
                    let module = format!("env::{}::", k.replace('-', "_"));
                    let named = code.contains(&format!("\"{k}\"")) || code.contains(&module);
                    if !named || rel == "crates/virtperf/src/env/mod.rs" {
                        continue;
                    }
                    let own = rel.starts_with(&format!("crates/virtperf/src/env/{k}.rs"))
                        || rel.starts_with(&format!("crates/virtperf/src/env/{k}/"));
                    let allowed =
                        NAMED_ELSEWHERE.iter().any(|(p, kind, _)| rel == *p && (*kind == "*" || *kind == k));
                    if !own && !allowed {
                        wrong.push(format!("{rel}:{}: names kind \"{k}\": {}", i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "kinds named outside their files (ask the kind through a hook):\n{}",
            wrong.join("\n")
        );
    }

    /// The recipe's documentation step, done for every kind: its page and its row in the index.
    #[test]
    fn every_kind_has_its_page_and_its_row() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/environments");
        let index = std::fs::read_to_string(docs.join("README.md")).unwrap();
        for k in super::REGISTRY.iter().map(|k| k.kind()) {
            assert!(docs.join(format!("{k}.md")).is_file(), "docs/environments/{k}.md is missing");
            assert!(
                index.contains(&format!("| `{k}` |")),
                "docs/environments/README.md has no row for `{k}`"
            );
        }
    }

    /// A run stored before environments carried their kind's flags is read with the flags the
    /// store's migration gives each kind: they must be what the kinds say today, or an old run's
    /// report would pick another baseline or another clock.
    #[test]
    fn old_runs_get_the_flags_their_kinds_have() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE environments (kind TEXT, baseline INTEGER, own_clock INTEGER);")
            .unwrap();
        for k in super::REGISTRY {
            c.execute("INSERT INTO environments (kind, baseline, own_clock) VALUES (?1, 9, 9)", [k.kind()])
                .unwrap();
        }
        c.execute_batch(virtperf_record::store::LEGACY_ENV_FLAGS).unwrap();
        for k in super::REGISTRY {
            let (base, own): (bool, bool) = c
                .query_row("SELECT baseline, own_clock FROM environments WHERE kind = ?1", [k.kind()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            assert_eq!((base, own), (k.is_baseline(), k.own_clock()), "kind {}", k.kind());
        }
    }

    /// Every kind's knobs come from its one table: each names a parameter of the kind, each value
    /// is one the parameter takes and not its default, typed as the parameter is; a knob set away
    /// from its default is said in words (the machine type excepted: the label says it), and
    /// nothing is said of a kind left at its defaults.
    #[test]
    fn every_knob_is_a_parameter_its_values_resolve_and_set_ones_are_said() {
        use std::collections::BTreeMap;
        use virtperf_workload::params::{resolve, Raw};
        let silent = ["machine"];
        let mut seen = Vec::new();
        for k in super::REGISTRY {
            let defaults = resolve(k.params(), &BTreeMap::new()).unwrap();
            assert!(k.knobs(&defaults).is_empty(), "{}: at its defaults: {:?}", k.kind(), k.knobs(&defaults));
            assert_eq!(k.knob_names(), k.knob_table().iter().map(|n| n.name).collect::<Vec<_>>());
            for knob in k.knob_table() {
                let spec = k.params().iter().find(|p| p.name == knob.name);
                let spec = spec.unwrap_or_else(|| panic!("{}: knob {} is no parameter", k.kind(), knob.name));
                let values = k.knob_values(knob.name).unwrap();
                assert_eq!(values.len(), knob.values.len());
                for v in values {
                    assert!(
                        !matches!(spec.kind, virtperf_workload::ParamKind::Bool) || matches!(v, Raw::Bool(_))
                    );
                    let set = resolve(k.params(), &[(knob.name.to_string(), v.clone())].into())
                        .unwrap_or_else(|e| panic!("{} {}={v}: {}", k.kind(), knob.name, e.message));
                    assert_ne!(
                        set.get(knob.name),
                        defaults.get(knob.name),
                        "{} {}={v} is the default",
                        k.kind(),
                        knob.name
                    );
                    let said = k.knobs(&set);
                    if silent.contains(&knob.name) {
                        assert!(said.is_empty(), "{} {}: {said:?}", k.kind(), knob.name);
                    } else {
                        assert!(
                            said.len() == 1 && said[0].starts_with(&format!("{}={v} — ", knob.name)),
                            "{} {}={v}: {said:?}",
                            k.kind(),
                            knob.name
                        );
                    }
                    seen.push(format!("{}:{}={v}", k.kind(), knob.name));
                }
            }
            assert_eq!(k.knob_values("no such knob"), None);
        }
        for want in [
            "container:seccomp=default",
            "uml:mitigations=off",
            "qemu:mitigations=off",
            "qemu:machine=pc",
            "gvisor:network=host",
        ] {
            assert!(seen.iter().any(|s| s == want), "{want} in {seen:?}");
        }
        let off = BTreeMap::from([("mitigations".to_string(), serde_json::json!("off"))]);
        assert_eq!(super::mitigations_arg(&off), Some("mitigations=off"));
        assert_eq!(super::mitigations_arg(&BTreeMap::new()), None);
    }
}
