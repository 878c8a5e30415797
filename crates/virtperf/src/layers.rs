//! The layers of each crate, checked: docs/architecture.md's layer tables are the data (one per
//! crate, under `## Layers` for the orchestrator and `## Layers of CRATE` for the others: their
//! rows name each module of the crate's `src/` and its layer), and the test below reads every
//! source file's `crate::…` paths and fails when a module reaches its own layer's side or above
//! it — naming the file, the line and the two layers. Rust's module system allows any path, so
//! without this nothing notices a circle closing again (it happened once: issue 29).
//! Beside it, the source check of workload names (no code outside crates/workload decides on
//! one), and the walker over source files that these checks and `env/`'s share.

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    /// The rows of the table under the heading line `heading`: `| 3 | `report/`, `plan.rs` | … |`
    /// → module (`report/`, `plan.rs`) → layer; `−` is the bottom (-1).
    fn layer_table(doc: &str, heading: &str) -> BTreeMap<String, i32> {
        let section = doc
            .split(&format!("\n{heading}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("docs/architecture.md has no `{heading}` section"));
        let section = section.split("\n## ").next().unwrap_or(section);
        let mut layers = BTreeMap::new();
        for line in section.lines() {
            let cols: Vec<&str> = line.split('|').map(str::trim).collect();
            if cols.len() < 4 {
                continue;
            }
            let layer = match cols[1] {
                "−" | "-" => -1,
                n => match n.parse::<i32>() {
                    Ok(n) => n,
                    Err(_) => continue,
                },
            };
            for m in cols[2].split('`').skip(1).step_by(2) {
                if m.ends_with(".rs") && !m.contains('/') || m.ends_with('/') && m.matches('/').count() == 1 {
                    assert!(layers.insert(m.to_string(), layer).is_none(), "{m} is listed twice");
                }
            }
        }
        layers
    }

    /// The module a source file belongs to: `env/cgroup.rs` → `env/`, `run.rs` → `run.rs`.
    fn module_of(rel: &str) -> String {
        match rel.split_once('/') {
            Some((dir, _)) => format!("{dir}/"),
            None => rel.to_string(),
        }
    }

    /// Each `crate::NAME` (and each name of a `crate::{a, b::c}` group, over several lines too)
    /// outside comments and test modules, as (line, module).
    fn uses(src: &Path, text: &str) -> Vec<(usize, String)> {
        // The code before the tests, comments cut, each char with its line.
        let mut code: Vec<(char, usize)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break; // tests may reach anywhere (they build fixtures)
            }
            code.extend(line.split("//").next().unwrap_or("").chars().map(|c| (c, i + 1)));
            code.push((' ', i + 1));
        }
        let chars: String = code.iter().map(|c| c.0).collect();
        let module = |name: &str| {
            if src.join(format!("{name}.rs")).is_file() {
                format!("{name}.rs")
            } else {
                format!("{name}/")
            }
        };
        let ident = |s: &str| -> String {
            s.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
        };
        let mut out = Vec::new();
        for (at, _) in chars.match_indices("crate::") {
            let line = code[chars[..at].chars().count()].1;
            let rest = &chars[at + 7..];
            if let Some(group) = rest.strip_prefix('{') {
                // The group's top-level items: `plan, report::x, env::{a, b}`.
                let (mut depth, mut item, mut names) = (0, String::new(), Vec::new());
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => names.push(std::mem::take(&mut item)),
                        _ if depth == 0 => item.push(c),
                        _ => {}
                    }
                }
                names.push(item);
                for n in names.iter().map(|n| ident(n)).filter(|n| !n.is_empty() && n != "self") {
                    out.push((line, module(&n)));
                }
            } else {
                let n = ident(rest);
                if !n.is_empty() {
                    out.push((line, module(&n)));
                }
            }
        }
        out
    }

    /// Every `.rs` file below `dir` (the source checks here and in `env/`).
    pub(crate) fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// The crates whose modules are layered, each with the heading of its table.
    const CRATES: &[(&str, &str)] = &[
        ("crates/virtperf", "## Layers"),
        ("crates/record", "## Layers of crates/record"),
        ("crates/report", "## Layers of crates/report"),
        ("crates/workload", "## Layers of crates/workload"),
    ];

    #[test]
    fn every_module_uses_only_the_layers_below_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
        let mut wrong = Vec::new();
        for (krate, heading) in CRATES {
            let layers = layer_table(&doc, heading);
            let src = root.join(krate).join("src");
            let mut files = Vec::new();
            sources(&src, &mut files);
            files.sort();
            for f in &files {
                let rel = f.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
                if rel == "layers.rs" || rel == "lib.rs" {
                    continue;
                }
                let me = module_of(&rel);
                let Some(mine) = layers.get(&me) else {
                    wrong.push(format!(
                        "{krate}/src/{rel}: module {me} is not in docs/architecture.md's `{heading}` table"
                    ));
                    continue;
                };
                for (line, used) in uses(&src, &std::fs::read_to_string(f).unwrap()) {
                    if used == me {
                        continue;
                    }
                    match layers.get(&used) {
                        None => wrong.push(format!(
                            "{krate}/src/{rel}:{line}: uses {used}, which the `{heading}` table does not list"
                        )),
                        Some(theirs) if theirs >= mine => wrong.push(format!(
                            "{krate}/src/{rel}:{line}: {me} (layer {mine}) uses {used} (layer {theirs}): only layers below may be used"
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    }

    #[test]
    fn the_checker_sees_an_upward_use_and_a_sideways_one() {
        let doc = "# A\n## Layers\n| layer | modules | what |\n|---|---|---|\n| 2 | `run.rs` | x |\n| 1 | `env/`, `lab/` | y |\n| − | `host/` | z |\n\n## Layers of crates/x\n| 9 | `nope.rs` | |\n";
        let t = layer_table(doc, "## Layers");
        assert_eq!(t.get("run.rs"), Some(&2));
        assert_eq!(t.get("lab/"), Some(&1));
        assert_eq!(t.get("host/"), Some(&-1));
        assert_eq!(t.get("nope.rs"), None, "only the Layers section is read");
        assert_eq!(layer_table(doc, "## Layers of crates/x").get("nope.rs"), Some(&9));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let u = uses(
            &src,
            "use crate::run::CANCEL; // crate::env in a comment\nlet x = crate::env::find(k);\nuse crate::{\n    plan,\n    report::{a, b},\n};\n#[cfg(test)]\nuse crate::lab;",
        );
        let want = [(1, "run.rs"), (2, "env/"), (3, "plan.rs"), (3, "report/")];
        assert_eq!(u, want.map(|(l, m)| (l, m.to_string())).to_vec());
        assert_eq!(module_of("env/cgroup.rs"), "env/");
        assert_eq!(module_of("main.rs"), "main.rs");
    }

    /// Outside crates/workload no code decides on a workload's name: the orchestrator and the report
    /// ask the workload (`report_section`, `read_host_files`, `needs_scratch`, …) or name the
    /// type it drives (`Load.kind()`), so that adding a workload touches the files the recipe in
    /// docs/architecture.md lists and no others.
    #[test]
    fn no_code_outside_the_workloads_decides_on_a_workloads_name() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        for krate in ["crates/virtperf/src", "crates/record/src", "crates/report/src"] {
            sources(&root.join(krate), &mut files);
        }
        let mut wrong = Vec::new();
        for f in &files {
            let rel = f.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(f).unwrap();
            if text.starts_with("//! Test") || rel.ends_with("fixtures.rs") {
                continue;
            }
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("#[cfg(test)]") {
                    break;
                }
                let code = line.split("//").next().unwrap_or("");
                for k in virtperf_workload::kinds() {
                    let named = [
                        format!("kind == \"{k}\""),
                        format!("kind != \"{k}\""),
                        format!("kind() == \"{k}\""),
                        format!("find(\"{k}\")"),
                        format!("kind: \"{k}\".into()"),
                        format!("kind: \"{k}\".to_string()"),
                    ];
                    if named.iter().any(|n| code.contains(n.as_str())) {
                        wrong.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "decided on a workload's name (ask the workload):\n{}", wrong.join("\n"));
    }
}
