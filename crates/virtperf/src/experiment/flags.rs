//! The flags front end: `--env`, `--workload`, `--lab` values read into raw items.

use virtperf_workload::Raw;

use super::model::*;

/// Parses `--lab key=value[,key=value]...` into `lab.KEY` settings.
pub fn read_lab_flag(value: &str) -> Result<Vec<(String, RawSetting)>, InputError> {
    let origin = Origin::Flag { flag: "--lab", value: value.to_string() };
    let mut out = Vec::new();
    for part in split_top(value, ',') {
        if part.trim().is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=').ok_or_else(|| {
            err(&origin, Some(part.trim()), "expected key=value, e.g. --lab mtu=9000,rate=1gbit")
        })?;
        out.push((format!("lab.{}", k.trim()), RawSetting { value: flag_scalar(v), origin: origin.clone() }));
    }
    Ok(out)
}

/// Splits on `sep` outside brackets: `a=1,b=[1,2]` → `a=1`, `b=[1,2]`.
pub(crate) fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

pub(crate) fn flag_scalar(s: &str) -> Raw {
    let s = s.trim();
    if let Ok(i) = s.replace('_', "").parse::<i64>() {
        return Raw::Int(i);
    }
    if s.contains('.') {
        if let Ok(f) = s.parse::<f64>() {
            return Raw::Float(f);
        }
    }
    match s {
        "true" => Raw::Bool(true),
        "false" => Raw::Bool(false),
        _ => Raw::Str(s.trim_matches('"').to_string()),
    }
}

/// Parses one `--env`/`--workload` value: `KIND[:key=value[,key=value]...]`, lists as `key=[a,b]`.
/// `--knobs KIND:KNOB,...`: every environment of KIND gets `knobs = [KNOB, ...]` (validation
/// checks each knob against the kind). None of KIND in the experiment is an error.
pub fn add_knobs(raw: &mut RawExperiment, value: &str) -> Result<(), InputError> {
    let origin = Origin::Flag { flag: "--knobs", value: value.to_string() };
    let Some((kind, list)) = value.split_once(':') else {
        return Err(err(
            &origin,
            None,
            "expected KIND:KNOB[,KNOB...], e.g. --knobs container:seccomp,readonly_rootfs",
        ));
    };
    let knobs: Vec<Raw> =
        list.split(',').map(str::trim).filter(|k| !k.is_empty()).map(|k| Raw::Str(k.to_string())).collect();
    if knobs.is_empty() {
        return Err(err(&origin, None, "no knob named: e.g. --knobs container:seccomp"));
    }
    let mut hit = false;
    for e in raw.envs.iter_mut().filter(|e| e.kind == kind.trim()) {
        if e.params.iter().any(|(k, _, _)| k == "knobs") {
            return Err(err(
                &origin,
                Some("knobs"),
                format!("an environment of kind `{kind}` already lists its knobs: name them in one place"),
            ));
        }
        e.params.push(("knobs".to_string(), knobs.clone(), origin.clone()));
        hit = true;
    }
    if !hit {
        return Err(err(
            &origin,
            None,
            format!("the experiment has no environment of kind `{kind}`: add --env {kind}"),
        ));
    }
    Ok(())
}

pub fn read_flag(flag: &'static str, value: &str) -> Result<RawItem, InputError> {
    let origin = Origin::Flag { flag, value: value.to_string() };
    let (kind, rest) = match value.split_once(':') {
        Some((k, r)) => (k.trim(), Some(r)),
        None => (value.trim(), None),
    };
    if kind.is_empty() {
        return Err(err(&origin, None, "expected KIND[:key=value,...], e.g. memcpy:size=10MiB,copies=10"));
    }
    let mut name = None;
    let mut params = Vec::new();
    for part in rest.map(|r| split_top(r, ',')).unwrap_or_default() {
        if part.trim().is_empty() {
            continue;
        }
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| err(&origin, Some(part.trim()), "expected key=value (lists as key=[a,b])"))?;
        let (k, v) = (k.trim(), v.trim());
        if k == "name" {
            name = Some(v.to_string());
            continue;
        }
        if k == "kind" {
            return Err(err(&origin, Some(k), "the kind is the part before `:`"));
        }
        let vals: Vec<Raw> = match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            Some(inner) => {
                split_top(inner, ',').into_iter().filter(|s| !s.trim().is_empty()).map(flag_scalar).collect()
            }
            None => vec![flag_scalar(v)],
        };
        if vals.is_empty() {
            return Err(err(&origin, Some(k), "an empty list sweeps nothing; give at least one value"));
        }
        params.push((k.to_string(), vals, origin.clone()));
    }
    let written =
        value.split(',').filter(|p| !p.trim_start().starts_with("name=")).collect::<Vec<_>>().join(",");
    let written = written.trim_end_matches(':').to_string();
    Ok(RawItem { origin, kind: kind.to_string(), name, params, written })
}
