//! The `seccomp` knob of the `container` environment: a system-call filter in the OCI config,
//! from a profile in the format Docker and Podman read (moby's `profiles/seccomp`,
//! containers-common's `seccomp.json`).
//!
//! Such a profile is not an OCI `linux.seccomp` section: its rules carry `includes` and `excludes`
//! (by architecture, by capability, by kernel version) that the engine resolves against the
//! container it starts, and an `archMap` from the host's architecture to the ones it also filters.
//! [`oci_section`] resolves them as moby's `setupSeccomp` does, for this container's capabilities
//! (virtperf's `capabilities` parameter), this host's architecture and kernel. Written here rather
//! than taken from a crate: no Rust crate reads Docker's profile format, and the resolution is
//! a page of rules whose every step the tests below pin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

/// The profile `seccomp = "default"` stands for: the one Podman applies (and Docker's default,
/// rule for rule, as containers-common keeps it), from Debian's golang-github-containers-common.
pub const DEFAULT_PROFILE: &str = "/usr/share/containers/seccomp.json";
/// The Debian package that ships [`DEFAULT_PROFILE`].
pub const DEFAULT_PACKAGE: &str = "golang-github-containers-common";
/// A profile larger than this is refused (Docker's default is 16 KiB).
const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// What the `seccomp` parameter asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// No filter (runc's own default when the config has none): namespaces and cgroups alone.
    None,
    /// A profile file: [`DEFAULT_PROFILE`] for `default`, or the path given.
    Profile { path: PathBuf, default: bool },
}

/// The `seccomp` parameter, or what is wrong with it (absent: `none`).
pub fn choice_of(params: &BTreeMap<String, Value>) -> Result<Choice, String> {
    match params.get("seccomp").and_then(Value::as_str).unwrap_or("none") {
        "none" => Ok(Choice::None),
        "default" => Ok(Choice::Profile { path: PathBuf::from(DEFAULT_PROFILE), default: true }),
        p if p.starts_with('/') => Ok(Choice::Profile { path: PathBuf::from(p), default: false }),
        other => Err(format!(
            "`{other}` is neither `none`, `default` (Podman's and Docker's default profile, {DEFAULT_PROFILE}) nor an absolute path to a profile in Docker's format; e.g. seccomp = \"default\""
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Profile {
    default_action: String,
    #[serde(default)]
    default_errno_ret: Option<u32>,
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    arch_map: Vec<ArchMap>,
    #[serde(default)]
    syscalls: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMap {
    architecture: String,
    #[serde(default)]
    sub_architectures: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    names: Vec<String>,
    action: String,
    #[serde(default)]
    args: Option<Vec<Value>>,
    #[serde(default)]
    errno_ret: Option<u32>,
    #[serde(default)]
    includes: Option<Filter>,
    #[serde(default)]
    excludes: Option<Filter>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    arches: Vec<String>,
    #[serde(default)]
    caps: Vec<String>,
    #[serde(default)]
    min_kernel: Option<String>,
}

/// The actions runc 1.1 (libseccomp 2.5) knows.
const ACTIONS: &[&str] = &[
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_TRAP",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_ALLOW",
    "SCMP_ACT_LOG",
    "SCMP_ACT_NOTIFY",
];

/// The host the filter is resolved for: Go's name of its architecture (what `includes.arches`
/// lists), libseccomp's (what `archMap` maps), its kernel release, and the container's
/// capabilities (OCI names, `CAP_…`).
#[derive(Debug, Clone)]
pub struct Target {
    pub go_arch: &'static str,
    pub seccomp_arch: &'static str,
    pub kernel: (u32, u32),
    pub caps: Vec<String>,
}

impl Target {
    /// This host, for a container keeping `caps`.
    pub fn host(caps: Vec<String>) -> Target {
        let (go_arch, seccomp_arch) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", "SCMP_ARCH_X86_64"),
            "aarch64" => ("arm64", "SCMP_ARCH_AARCH64"),
            "x86" => ("386", "SCMP_ARCH_X86"),
            "riscv64" => ("riscv64", "SCMP_ARCH_RISCV64"),
            "s390x" => ("s390x", "SCMP_ARCH_S390X"),
            _ => ("unknown", "SCMP_ARCH_NATIVE"),
        };
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Target { go_arch, seccomp_arch, kernel: kernel_version(&release).unwrap_or((0, 0)), caps }
    }
}

/// `6.1.0-18-amd64` → (6, 1).
fn kernel_version(s: &str) -> Option<(u32, u32)> {
    let mut it = s.trim().split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// What a resolved filter holds, for the words said before the numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The OCI `linux.seccomp` section.
    pub section: Value,
    /// The rules kept for this container (of the profile's).
    pub rules: usize,
    pub of: usize,
    /// The system calls the kept rules allow (by name; a name in several rules counts once).
    pub allowed: usize,
    pub default_action: String,
}

/// Reads and resolves the profile at `path` for `target`: the OCI section, or what is wrong with
/// the file (named, with its line where the JSON is broken).
pub fn load(path: &Path, target: &Target) -> Result<Resolved, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(format!(
            "{} is {} bytes, more than a seccomp profile's {MAX_PROFILE_BYTES}",
            path.display(),
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    oci_section(&text, target).map_err(|e| format!("{}: {e}", path.display()))
}

/// Resolves a profile's text for `target`, as moby's `setupSeccomp` does: the host's architecture
/// and its `archMap` sub-architectures; each rule kept unless an `excludes` matches (its arch,
/// any of its capabilities held, a kernel at least its `minKernel`) or an `includes` does not (its
/// arches lack this one, a capability it lists is not held, the kernel is older).
pub fn oci_section(text: &str, target: &Target) -> Result<Resolved, String> {
    let p: Profile = serde_json::from_str(text).map_err(|e| format!("line {}: {e}", e.line()))?;
    if !p.architectures.is_empty() && !p.arch_map.is_empty() {
        return Err("`architectures` and `archMap` both given; a profile uses one".into());
    }
    let action = |a: &str, where_: &str| {
        if ACTIONS.contains(&a) {
            Ok(())
        } else {
            Err(format!("{where_}: `{a}` is not a seccomp action ({})", ACTIONS.join(", ")))
        }
    };
    action(&p.default_action, "defaultAction")?;
    let mut arches = p.architectures.clone();
    for m in p.arch_map.iter().filter(|m| m.architecture == target.seccomp_arch) {
        arches.push(m.architecture.clone());
        arches.extend(m.sub_architectures.iter().cloned());
    }
    let kernel_at_least = |v: &str| kernel_version(v).is_some_and(|want| target.kernel >= want);
    let mut syscalls = Vec::new();
    let mut allowed = std::collections::BTreeSet::new();
    for (i, r) in p.syscalls.iter().enumerate() {
        let at = format!("syscalls[{i}]");
        action(&r.action, &at)?;
        let names: Vec<String> = match (&r.name, r.names.is_empty()) {
            (Some(_), false) => return Err(format!("{at}: both `name` and `names`")),
            (Some(n), true) => vec![n.clone()],
            (None, _) => r.names.clone(),
        };
        if let Some(x) = &r.excludes {
            if x.arches.iter().any(|a| a == target.go_arch)
                || x.caps.iter().any(|c| target.caps.contains(c))
                || x.min_kernel.as_deref().is_some_and(kernel_at_least)
            {
                continue;
            }
        }
        if let Some(n) = &r.includes {
            if (!n.arches.is_empty() && !n.arches.iter().any(|a| a == target.go_arch))
                || n.caps.iter().any(|c| !target.caps.contains(c))
                || n.min_kernel.as_deref().is_some_and(|v| !kernel_at_least(v))
            {
                continue;
            }
        }
        if r.action == "SCMP_ACT_ALLOW" {
            allowed.extend(names.iter().cloned());
        }
        let mut s = json!({"names": names, "action": r.action});
        if let Some(args) = r.args.as_ref().filter(|a| !a.is_empty()) {
            s["args"] = Value::from(args.clone());
        }
        if let Some(e) = r.errno_ret {
            s["errnoRet"] = json!(e);
        }
        syscalls.push(s);
    }
    let mut section = json!({"defaultAction": p.default_action, "syscalls": syscalls});
    if !arches.is_empty() {
        section["architectures"] = json!(arches);
    }
    if let Some(e) = p.default_errno_ret {
        section["defaultErrnoRet"] = json!(e);
    }
    Ok(Resolved {
        rules: syscalls_len(&section),
        of: p.syscalls.len(),
        allowed: allowed.len(),
        default_action: p.default_action,
        section,
    })
}

fn syscalls_len(section: &Value) -> usize {
    section["syscalls"].as_array().map_or(0, Vec::len)
}

/// Loads the profile `choice` names for a container keeping `caps` on this host and says it in
/// words ([`describe`]).
pub fn describe_loaded(choice: &Choice, caps: &[String]) -> Result<String, String> {
    match choice {
        Choice::None => Ok("no seccomp filter".into()),
        Choice::Profile { path, .. } => {
            load(path, &Target::host(caps.to_vec())).map(|r| describe(choice, &r))
        }
    }
}

/// The words for a resolved profile, said before the numbers: which profile, how many rules of
/// its own it kept for this container, and what every other system call gets.
pub fn describe(choice: &Choice, r: &Resolved) -> String {
    let which = match choice {
        Choice::None => return "no seccomp filter".into(),
        Choice::Profile { default: true, .. } => {
            format!("the default seccomp profile of Podman and Docker ({DEFAULT_PROFILE})")
        }
        Choice::Profile { path, .. } => format!("the seccomp profile {}", path.display()),
    };
    let rest = match r.default_action.as_str() {
        "SCMP_ACT_ERRNO" => "every other system call fails",
        "SCMP_ACT_ALLOW" => "every other system call is allowed",
        _ => "every other system call meets its default action",
    };
    format!("{which}, {} of its {} rules kept for this container's capabilities, {} system calls allowed by name, {rest}", r.rules, r.of, r.allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(caps: &[&str]) -> Target {
        Target {
            go_arch: "amd64",
            seccomp_arch: "SCMP_ARCH_X86_64",
            kernel: (6, 1),
            caps: caps.iter().map(|c| c.to_string()).collect(),
        }
    }

    const PROFILE: &str = r#"{
        "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}
        ],
        "syscalls": [
            {"names": ["getppid", "read"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64", "x32"]}},
            {"names": ["arm_fadvise64_64"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["arm", "arm64"]}},
            {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
            {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
            {"names": ["clone3"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "5.3"}},
            {"names": ["futex_waitv"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "7.0"}},
            {"name": "personality", "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]}
        ]
    }"#;

    fn names(r: &Resolved) -> Vec<(String, String)> {
        r.section["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["names"][0].as_str().unwrap().to_string(), s["action"].as_str().unwrap().to_string()))
            .collect()
    }

    #[test]
    fn rules_resolve_for_the_arch_the_capabilities_and_the_kernel() {
        let r = oci_section(PROFILE, &target(&[])).unwrap();
        assert_eq!(r.section["architectures"], json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]));
        assert_eq!(r.section["defaultAction"], json!("SCMP_ACT_ERRNO"));
        assert_eq!(r.section["defaultErrnoRet"], json!(38));
        let n = names(&r);
        let has = |name: &str, action: &str| n.contains(&(name.to_string(), action.to_string()));
        assert!(has("getppid", "SCMP_ACT_ALLOW") && has("arch_prctl", "SCMP_ACT_ALLOW"), "{n:?}");
        assert!(!n.iter().any(|(s, _)| s == "arm_fadvise64_64"), "another arch's rule: {n:?}");
        assert!(has("mount", "SCMP_ACT_ERRNO") && !has("mount", "SCMP_ACT_ALLOW"), "no SYS_ADMIN: {n:?}");
        assert!(has("clone3", "SCMP_ACT_ALLOW") && !n.iter().any(|(s, _)| s == "futex_waitv"), "{n:?}");
        let p = r.section["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["names"][0] == "personality")
            .unwrap();
        assert_eq!(p["args"][0]["value"], json!(8), "arguments kept");
        assert_eq!((r.rules, r.of, r.allowed), (5, 8, 5), "getppid, read, arch_prctl, clone3, personality");

        let admin = oci_section(PROFILE, &target(&["CAP_SYS_ADMIN"])).unwrap();
        let n = names(&admin);
        assert!(n.contains(&("mount".into(), "SCMP_ACT_ALLOW".into())), "{n:?}");
        assert!(!n.contains(&("mount".into(), "SCMP_ACT_ERRNO".into())), "{n:?}");
        let old = Target { kernel: (4, 19), ..target(&[]) };
        assert!(!names(&oci_section(PROFILE, &old).unwrap()).iter().any(|(s, _)| s == "clone3"));
    }

    #[test]
    fn broken_profiles_say_where() {
        let e =
            oci_section("{\n\"defaultAction\": \"SCMP_ACT_ERRNO\",\n\"syscalls\": [\n{]\n}", &target(&[]))
                .unwrap_err();
        assert!(e.starts_with("line 4"), "{e}");
        let e = oci_section(r#"{"defaultAction": "SCMP_ACT_BOGUS"}"#, &target(&[])).unwrap_err();
        assert!(e.contains("`SCMP_ACT_BOGUS` is not a seccomp action"), "{e}");
        let e = oci_section(
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["a"], "action": "KILL"}]}"#,
            &target(&[]),
        )
        .unwrap_err();
        assert!(e.starts_with("syscalls[0]"), "{e}");
        let e = oci_section(
            r#"{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"], "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}"#,
            &target(&[]),
        )
        .unwrap_err();
        assert!(e.contains("both given"), "{e}");
    }

    #[test]
    fn the_parameter_is_none_default_or_a_path() {
        let p = |v: &str| choice_of(&[("seccomp".to_string(), json!(v))].into());
        assert_eq!(choice_of(&BTreeMap::new()).unwrap(), Choice::None);
        assert_eq!(p("none").unwrap(), Choice::None);
        assert_eq!(p("default").unwrap(), Choice::Profile { path: DEFAULT_PROFILE.into(), default: true });
        assert_eq!(p("/x/y.json").unwrap(), Choice::Profile { path: "/x/y.json".into(), default: false });
        assert!(p("docker").unwrap_err().contains("e.g. seccomp = \"default\""));
        assert_eq!(kernel_version("6.18.44-pvm\n"), Some((6, 18)));
        assert_eq!(kernel_version("5"), Some((5, 0)));
    }

    #[test]
    fn the_packaged_default_profile_resolves_where_it_is_installed() {
        if !Path::new(DEFAULT_PROFILE).is_file() {
            eprintln!("skipped: {DEFAULT_PROFILE} missing (apt-get install {DEFAULT_PACKAGE})");
            return;
        }
        let r = load(Path::new(DEFAULT_PROFILE), &Target::host(Vec::new())).unwrap();
        // Docker's default allows some 350 system calls by name and fails the rest with ENOSYS.
        assert!((300..500).contains(&r.allowed), "{}", describe(&Choice::None, &r));
        assert!(r.rules < r.of, "rules for capabilities this container lacks are left out");
        let words = describe(&Choice::Profile { path: DEFAULT_PROFILE.into(), default: true }, &r);
        assert!(words.contains("every other system call fails"), "{words}");
    }
}
