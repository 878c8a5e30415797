//! The TOML front end: an experiment file read into raw items that remember their lines.

use toml_edit::{ImDocument, Table};
use virtperf_workload::Raw;

use super::model::*;

pub(crate) const TOP_KEYS: &[&str] = &[
    "name",
    "reps",
    "warmup",
    "launches",
    "precision",
    "budget",
    "skip_unavailable",
    "order",
    "seed",
    "timeout",
    "freeze_idle",
    "counts",
    "explain",
    "lab",
    "env",
    "workload",
    "host",
];

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

pub(crate) fn raw_of(v: &toml_edit::Value) -> Option<Raw> {
    match v {
        toml_edit::Value::String(s) => Some(Raw::Str(s.value().clone())),
        toml_edit::Value::Integer(i) => Some(Raw::Int(*i.value())),
        toml_edit::Value::Float(f) => Some(Raw::Float(*f.value())),
        toml_edit::Value::Boolean(b) => Some(Raw::Bool(*b.value())),
        _ => None,
    }
}

/// An experiment file's text, read with a bound: at most [`super::MAX_EXPERIMENT_BYTES`], a
/// regular file (or a pipe: `run <(…)`), UTF-8; what is wrong, in words, else.
pub fn read_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read the experiment file: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot read the experiment file: {e}"))?;
    let ft = meta.file_type();
    {
        use std::os::unix::fs::FileTypeExt;
        if !(ft.is_file() || ft.is_fifo()) {
            return Err(
                "not a regular file (an experiment is a TOML file, e.g. examples/default.toml)".into()
            );
        }
    }
    let mut bytes = Vec::new();
    f.take(super::MAX_EXPERIMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the experiment file: {e}"))?;
    if bytes.len() as u64 > super::MAX_EXPERIMENT_BYTES {
        return Err(format!(
            "larger than {} MiB: an experiment is a TOML file of a few kilobytes (is this the right file?)",
            super::MAX_EXPERIMENT_BYTES >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!("not UTF-8 text (byte {}): an experiment is a TOML file", e.utf8_error().valid_up_to())
    })
}

/// Reads an experiment file's text into raw items (syntax and shape only).
pub fn read_toml(path: &str, text: &str) -> Result<RawExperiment, InputError> {
    let doc = ImDocument::parse(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        let msg = e.message().trim().to_string();
        err(&Origin::File { path: path.into(), line }, None, format!("TOML syntax error: {msg}"))
    })?;
    let at = |span: Option<std::ops::Range<usize>>| Origin::File {
        path: path.into(),
        line: span.map(|s| line_of(text, s.start)).unwrap_or(1),
    };
    let root: &Table = doc.as_table();
    let mut out = RawExperiment::default();
    for (key, item) in root.iter() {
        let kspan = root.key(key).and_then(|k| k.span());
        let origin = at(kspan.clone().or_else(|| item.span()));
        match key {
            "env" | "workload" => {
                let tables = item.as_array_of_tables().ok_or_else(|| {
                    err(&origin, Some(key), format!("expected a list of tables written [[{key}]]"))
                })?;
                for t in tables.iter() {
                    let raw = read_item(key, t, &at)?;
                    if key == "env" {
                        out.envs.push(raw);
                    } else {
                        out.workloads.push(raw);
                    }
                }
            }
            "host" => {
                let tables = item.as_array_of_tables().ok_or_else(|| {
                    err(
                        &origin,
                        Some(key),
                        "expected a list of tables written [[host]] (keys: name, ssh, ssh_config)",
                    )
                })?;
                for t in tables.iter() {
                    let mut keys = Vec::new();
                    for (k, v) in t.iter() {
                        let o = at(t.key(k).and_then(|kk| kk.span()).or_else(|| v.span()));
                        if !HOST_KEYS.contains(&k) {
                            return Err(err(
                                &o,
                                Some(&format!("host.{k}")),
                                format!("unknown key (known: {})", HOST_KEYS.join(", ")),
                            ));
                        }
                        let v = v
                            .as_value()
                            .and_then(raw_of)
                            .ok_or_else(|| err(&o, Some(&format!("host.{k}")), "expected text"))?;
                        keys.push((k.to_string(), v, o));
                    }
                    out.hosts.push((at(t.span()), keys));
                }
            }
            "lab" => {
                let t = item.as_table().ok_or_else(|| {
                    err(
                        &origin,
                        Some(key),
                        "expected a table written [lab] (keys: mtu, rate, delay, loss, tester_cpu, tester_host, switch, switch_cpus, switch_cap, switch_vcpus, switch_guest)",
                    )
                })?;
                for (k, v) in t.iter() {
                    let o = at(t.key(k).and_then(|kk| kk.span()).or_else(|| v.span()));
                    let v = v.as_value().and_then(raw_of).ok_or_else(|| {
                        err(&o, Some(&format!("lab.{k}")), "expected a single value (text or number)")
                    })?;
                    out.settings.insert(format!("lab.{k}"), RawSetting { value: v, origin: o });
                }
            }
            k if TOP_KEYS.contains(&k) => {
                let v = item.as_value().and_then(raw_of).ok_or_else(|| {
                    err(&origin, Some(k), "expected a single value (text, integer, number or boolean)")
                })?;
                out.settings.insert(k.to_string(), RawSetting { value: v, origin });
            }
            other => {
                return Err(err(
                    &origin,
                    Some(other),
                    format!("unknown key (known top-level keys: {})", TOP_KEYS.join(", ")),
                ))
            }
        }
    }
    Ok(out)
}

pub(crate) fn read_item(
    what: &str,
    t: &Table,
    at: &dyn Fn(Option<std::ops::Range<usize>>) -> Origin,
) -> Result<RawItem, InputError> {
    let origin = at(t.span());
    let mut kind = None;
    let mut name = None;
    let mut params = Vec::new();
    for (key, item) in t.iter() {
        let o = at(t.key(key).and_then(|k| k.span()).or_else(|| item.span()));
        let value = item.as_value().ok_or_else(|| err(&o, Some(key), "expected a value, not a table"))?;
        if let (true, toml_edit::Value::InlineTable(lt)) = (key == "load", value) {
            // load = {percent = 90, on = "dut", cpus = 1} → load, load_on, load_cpus.
            for (k, v) in lt.iter() {
                let flat = match k {
                    "percent" => "load",
                    "on" => "load_on",
                    "cpus" => "load_cpus",
                    other => {
                        return Err(err(
                            &o,
                            Some(&format!("load.{other}")),
                            "unknown key (known: percent, on, cpus)",
                        ))
                    }
                };
                params.push((flat.to_string(), toml_values(v, &o, flat)?, o.clone()));
            }
            continue;
        }
        match key {
            "kind" => {
                kind = Some(value.as_str().ok_or_else(|| err(&o, Some(key), "expected text"))?.to_string())
            }
            "name" => {
                name = Some(value.as_str().ok_or_else(|| err(&o, Some(key), "expected text"))?.to_string())
            }
            _ => params.push((key.to_string(), toml_values(value, &o, key)?, o)),
        }
    }
    let kind =
        kind.ok_or_else(|| err(&origin, Some("kind"), format!("every [[{what}]] needs `kind = \"...\"`")))?;
    // In a file the default label is the kind; two of a kind need names (checked later).
    let written = kind.clone();
    Ok(RawItem { origin, kind, name, params, written })
}

/// A plain value, or a list of them (a sweep).
pub(crate) fn toml_values(value: &toml_edit::Value, o: &Origin, key: &str) -> Result<Vec<Raw>, InputError> {
    Ok(match value {
        toml_edit::Value::Array(a) => {
            let vals: Option<Vec<Raw>> = a.iter().map(raw_of).collect();
            let vals = vals.ok_or_else(|| err(o, Some(key), "a list may hold only plain values"))?;
            if vals.is_empty() {
                return Err(err(o, Some(key), "an empty list sweeps nothing; give at least one value"));
            }
            vals
        }
        v => vec![raw_of(v).ok_or_else(|| err(o, Some(key), "expected a plain value"))?],
    })
}
