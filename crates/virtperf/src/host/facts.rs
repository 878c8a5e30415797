//! The facts of this machine that decide sizes and availability: CPU vendor, model and count,
//! memory, last-level cache, the XSAVE area, the kernel's qdiscs and what `/dev/kvm` is.
//!
//! Measured once per process. For tests they can be replaced by a file (`VIRTPERF_HOST_FACTS`,
//! in the format `virtperf doctor --facts` prints; `host-profiles/` holds the machine kinds this
//! project runs on), so that every decision virtperf derives from the host is exercised under each
//! profile on whatever machine the suite runs. Only validation uses a replacement: `virtperf run`
//! without `--dry-run` refuses to start under one (see [`refuse_override_for_measuring`]), so a
//! measurement is never sized or judged by another machine's facts.

use std::path::Path;
use std::sync::OnceLock;

use serde::Serialize;

/// The environment variable naming a facts file that replaces this host's facts (tests).
pub const OVERRIDE_VAR: &str = "VIRTPERF_HOST_FACTS";

/// The qdiscs virtperf may use or report (the lab: `tbf` for rate, `netem` for delay and loss).
pub const KNOWN_QDISCS: &[&str] = &["tbf", "htb", "netem", "fq", "fq_codel", "cake"];

/// The XSAVE buffer (bytes) the packaged User-Mode Linux (Debian's 6.1) hands ptrace's
/// `NT_X86_XSTATE`, fixed when it was compiled (measured with strace by the e2e suite). The host
/// clips a larger buffer to its own user XSAVE size and refuses (EFAULT) a smaller one, so such a
/// kernel runs its processes only where the host's largest user XSAVE area (CPUID 0xD/0 ECX: all
/// the user features it supports, AMX's tiles included) is at most this: 832 bytes on an AVX2
/// EPYC, 11008 on an AVX-512 Xeon with AMX support, where it panics at its first process.
pub const UML_PACKAGED_XSAVE: u32 = 2696;

/// What `/dev/kvm` offers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvmFacts {
    /// `/dev/kvm` opened read-write, or why not.
    #[serde(serialize_with = "ser_dev")]
    pub dev: Result<(), String>,
    /// The `kvm_pvm` module: PVM, which runs only PVM-enabled guest kernels.
    pub pvm: bool,
    /// `vmx` or `svm` among the CPU flags.
    pub hw: bool,
}

fn ser_dev<S: serde::Serializer>(d: &Result<(), String>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Ok(()) => s.serialize_str("usable"),
        Err(e) => s.serialize_str(e),
    }
}

impl KvmFacts {
    /// The host's (see [`facts`]).
    pub fn probe() -> KvmFacts {
        facts().kvm.clone()
    }
    /// The kind as a facts file spells it: `hardware`, `pvm` or `none`.
    pub fn kind(&self) -> &'static str {
        match (&self.dev, self.pvm, self.hw) {
            (Err(_), _, _) => "none",
            (Ok(()), true, _) => "pvm",
            (Ok(()), false, true) => "hardware",
            (Ok(()), false, false) => "none",
        }
    }
    fn of_kind(kind: &str) -> Option<KvmFacts> {
        Some(match kind {
            "hardware" => KvmFacts { dev: Ok(()), pvm: false, hw: true },
            "pvm" => KvmFacts { dev: Ok(()), pvm: true, hw: false },
            "none" => {
                KvmFacts { dev: Err("no usable /dev/kvm (host profile)".into()), pvm: false, hw: false }
            }
            _ => return None,
        })
    }
    fn measure() -> KvmFacts {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .map(|_| ())
            .map_err(|e| format!("/dev/kvm: {e}"));
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hw = flags
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        KvmFacts { dev, pvm: Path::new("/sys/module/kvm_pvm").exists(), hw }
    }
}

/// The host's facts (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostFacts {
    /// `measured`, or the file they were read from.
    pub source: String,
    /// The profile's name (`profile = "…"` in a facts file).
    pub profile: Option<String>,
    pub cpu_vendor: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_bytes: Option<u64>,
    /// Size of the last-level cache (working sets are sized against it: STREAM's 4 × per array).
    pub llc_bytes: Option<u64>,
    /// CPUID 0xD/0 EBX: the XSAVE area of the features the OS enabled.
    pub xsave_enabled: Option<u32>,
    /// CPUID 0xD/0 ECX: the XSAVE area of every user feature the CPU supports — what ptrace's
    /// `NT_X86_XSTATE` takes, which decides whether the packaged UML kernel can run.
    pub xsave_max: Option<u32>,
    /// The [`KNOWN_QDISCS`] this kernel has.
    pub qdiscs: Vec<String>,
    pub kvm: KvmFacts,
    pub kernel: String,
}

impl HostFacts {
    /// True when these are this machine's own facts (not a replacement read from a file).
    pub fn measured(&self) -> bool {
        self.source == "measured"
    }

    /// One line for reports and messages: `AMD EPYC, 2 CPUs, 23.5 GiB, LLC 32 MiB`.
    pub fn brief(&self) -> String {
        let mut s = format!("{}, {} CPUs", self.cpu_model, self.cpus);
        if let Some(m) = self.memory_bytes {
            s += &format!(", {:.1} GiB", m as f64 / (1u64 << 30) as f64);
        }
        if let Some(l) = self.llc_bytes {
            s += &format!(", LLC {}", mib(l));
        }
        s
    }

    pub fn has_qdisc(&self, kind: &str) -> bool {
        self.qdiscs.iter().any(|q| q == kind)
    }

    /// Whether the packaged UML kernel can run its processes here, from the XSAVE size alone (see
    /// [`UML_PACKAGED_XSAVE`]); None when the size is unknown.
    pub fn legacy_uml_fits(&self) -> Option<bool> {
        self.xsave_max.map(|b| b <= UML_PACKAGED_XSAVE)
    }

    /// This machine's facts, measured now.
    pub fn measure() -> HostFacts {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let memory_bytes = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            m.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                    .map(|kib| kib * 1024)
            })
        });
        let (xsave_enabled, xsave_max) = xsave_sizes();
        HostFacts {
            source: "measured".into(),
            profile: None,
            cpu_vendor: field("vendor_id"),
            cpu_model: field("model name"),
            cpus: super::host_cpus(),
            memory_bytes,
            llc_bytes: super::llc_bytes(),
            xsave_enabled,
            xsave_max,
            qdiscs: KNOWN_QDISCS.iter().filter(|q| qdisc_in_kernel(q)).map(|q| q.to_string()).collect(),
            kvm: KvmFacts::measure(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().into(),
        }
    }

    /// The facts as a facts file (what `virtperf doctor --facts` prints, and `read` reads).
    pub fn to_toml(&self) -> String {
        let q = |s: &str| toml_edit::Value::from(s).to_string().trim().to_string();
        let opt =
            |v: Option<u64>, f: &dyn Fn(u64) -> String| v.map(f).unwrap_or_else(|| "\"unknown\"".into());
        let mut s = String::from(
            "# virtperf host facts: what decides sizes and availability. Use with\n\
             # VIRTPERF_HOST_FACTS=FILE virtperf run --dry-run EXPERIMENT (validation only).\n",
        );
        if let Some(p) = &self.profile {
            s += &format!("profile = {}\n", q(p));
        }
        s += &format!(
            "cpu_vendor = {}\ncpu_model = {}\ncpus = {}\n",
            q(&self.cpu_vendor),
            q(&self.cpu_model),
            self.cpus
        );
        s += &format!("memory = {}\n", opt(self.memory_bytes, &|b| q(&format!("{}KiB", b >> 10))));
        s += &format!("llc = {}\n", opt(self.llc_bytes, &|b| q(&format!("{}KiB", b >> 10))));
        s += &format!("xsave_enabled = {}\n", opt(self.xsave_enabled.map(u64::from), &|b| b.to_string()));
        s += &format!("xsave_max = {}\n", opt(self.xsave_max.map(u64::from), &|b| b.to_string()));
        s += &format!("qdiscs = [{}]\n", self.qdiscs.iter().map(|x| q(x)).collect::<Vec<_>>().join(", "));
        s += &format!("kvm = {}   # hardware | pvm | none\n", q(self.kvm.kind()));
        s += &format!("kernel = {}\n", q(&self.kernel));
        s
    }

    /// Reads a facts file: every key is required (a profile never inherits this machine's facts),
    /// an unknown key is refused; errors name `FILE:LINE`, the key and what is expected.
    pub fn read(path: &str, text: &str) -> Result<HostFacts, String> {
        let line_of =
            |o: usize| text.as_bytes()[..o.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
        let doc = toml_edit::ImDocument::parse(text).map_err(|e| {
            let line = e.span().map(|s| line_of(s.start)).unwrap_or(1);
            format!("{path}:{line}: TOML syntax error: {}", e.message().trim())
        })?;
        let root = doc.as_table();
        const KEYS: &[&str] = &[
            "profile",
            "cpu_vendor",
            "cpu_model",
            "cpus",
            "memory",
            "llc",
            "xsave_enabled",
            "xsave_max",
            "qdiscs",
            "kvm",
            "kernel",
        ];
        let at = |k: &str| {
            root.key(k)
                .and_then(|x| x.span())
                .or_else(|| root.get(k).and_then(|i| i.span()))
                .map(|s| line_of(s.start))
        };
        for (k, _) in root.iter() {
            if !KEYS.contains(&k) {
                return Err(format!(
                    "{path}:{}: key `{k}`: unknown (known: {})",
                    at(k).unwrap_or(1),
                    KEYS.join(", ")
                ));
            }
        }
        let bad = |k: &str, what: &str| format!("{path}:{}: key `{k}`: {what}", at(k).unwrap_or(1));
        let value = |k: &str| -> Result<&toml_edit::Value, String> {
            root.get(k).and_then(|i| i.as_value()).ok_or_else(|| {
                format!(
                    "{path}: key `{k}` is missing: a facts file gives every fact (`virtperf doctor --facts` prints this machine's)"
                )
            })
        };
        let text_of = |k: &str| -> Result<String, String> {
            value(k)?.as_str().map(str::to_string).ok_or_else(|| bad(k, "expected text in quotes"))
        };
        let unknown = |v: &toml_edit::Value| v.as_str() == Some("unknown");
        let size = |k: &str| -> Result<Option<u64>, String> {
            let v = value(k)?;
            if unknown(v) {
                return Ok(None);
            }
            match v {
                toml_edit::Value::Integer(i) if *i.value() > 0 => Ok(Some(*i.value() as u64)),
                toml_edit::Value::String(s) => virtperf_workload::params::parse_size(s.value())
                    .filter(|&b| b > 0)
                    .map(Some)
                    .ok_or_else(|| bad(k, &format!("`{}` is not a size such as \"260MiB\"", s.value()))),
                _ => Err(bad(k, "expected a size such as \"260MiB\" (or \"unknown\")")),
            }
        };
        let xsave = |k: &str| -> Result<Option<u32>, String> {
            let v = value(k)?;
            if unknown(v) {
                return Ok(None);
            }
            v.as_integer()
                .and_then(|i| u32::try_from(i).ok())
                .filter(|&b| b >= 512)
                .map(Some)
                .ok_or_else(|| bad(k, "expected the XSAVE area in bytes (at least 512), or \"unknown\""))
        };
        let cpus = value("cpus")?
            .as_integer()
            .filter(|&n| (1..=4096).contains(&n))
            .ok_or_else(|| bad("cpus", "expected a number of CPUs from 1 to 4096"))?
            as usize;
        let qdiscs = match value("qdiscs")? {
            toml_edit::Value::Array(a) => a
                .iter()
                .map(|v| match v.as_str() {
                    Some(s) if KNOWN_QDISCS.contains(&s) => Ok(s.to_string()),
                    _ => Err(bad("qdiscs", &format!("`{v}` is not one of {}", KNOWN_QDISCS.join(", ")))),
                })
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(bad("qdiscs", "expected a list such as [\"tbf\", \"htb\"]")),
        };
        let kvm_text = text_of("kvm")?;
        let kvm = KvmFacts::of_kind(&kvm_text).ok_or_else(|| {
            bad("kvm", &format!("`{kvm_text}`: expected \"hardware\", \"pvm\" or \"none\""))
        })?;
        let profile = match root.get("profile") {
            None => None,
            Some(_) => Some(text_of("profile")?),
        };
        Ok(HostFacts {
            source: path.to_string(),
            profile,
            cpu_vendor: text_of("cpu_vendor")?,
            cpu_model: text_of("cpu_model")?,
            cpus,
            memory_bytes: size("memory")?,
            llc_bytes: size("llc")?,
            xsave_enabled: xsave("xsave_enabled")?,
            xsave_max: xsave("xsave_max")?,
            qdiscs,
            kvm,
            kernel: text_of("kernel")?,
        })
    }
}

pub use virtperf_record::units::mib;

static FACTS: OnceLock<HostFacts> = OnceLock::new();

/// Reads the replacement facts when `VIRTPERF_HOST_FACTS` names a file; called once at start by
/// the commands that decide from facts. Errors (a missing or malformed file) are bad input.
pub fn init() -> Result<(), String> {
    let Some(path) = std::env::var_os(OVERRIDE_VAR).filter(|v| !v.is_empty()) else { return Ok(()) };
    let p = path.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{OVERRIDE_VAR}={p}: cannot read: {e}"))?;
    let f = HostFacts::read(&p, &text)?;
    let _ = FACTS.set(f);
    Ok(())
}

/// The facts every decision uses: the replacement read by [`init`], else this machine's, measured
/// on first use.
pub fn facts() -> &'static HostFacts {
    FACTS.get_or_init(HostFacts::measure)
}

/// A measurement must be sized and judged by this machine: refused (as bad input) while a
/// replacement is in force.
pub fn refuse_override_for_measuring() -> Result<(), String> {
    match std::env::var_os(OVERRIDE_VAR).filter(|v| !v.is_empty()) {
        None => Ok(()),
        Some(p) => Err(format!(
            "{OVERRIDE_VAR}={} replaces this host's facts for validation only (run --dry-run, doctor --quick); \
             unset it to measure",
            p.to_string_lossy()
        )),
    }
}

/// CPUID 0xD/0: (EBX, ECX), the enabled and the largest XSAVE area.
fn xsave_sizes() -> (Option<u32>, Option<u32>) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        // SAFETY: CPUID exists on every x86_64 CPU; leaf 0 says whether leaf 0xD does.
        #[allow(unused_unsafe)]
        let (max, l) = unsafe { (__cpuid(0).eax, __cpuid_count(0xd, 0)) };
        if max < 0xd || l.ebx == 0 {
            return (None, None);
        }
        (Some(l.ebx), Some(l.ecx).filter(|&c| c > 0))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (None, None)
    }
}

/// Whether this kernel has qdisc `kind`: loaded (`/sys/module/sch_KIND`), configured in
/// (`CONFIG_NET_SCH_KIND` in /boot/config-RELEASE or /proc/config.gz), or a module file.
fn qdisc_in_kernel(kind: &str) -> bool {
    if Path::new(&format!("/sys/module/sch_{kind}")).exists() {
        return true;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    if let Some(cfg) = kernel_config(release) {
        let option = format!("CONFIG_NET_SCH_{}", kind.to_uppercase());
        return cfg.lines().any(|l| l == format!("{option}=y") || l == format!("{option}=m"));
    }
    std::fs::read_dir(format!("/lib/modules/{release}/kernel/net/sched"))
        .map(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().starts_with(&format!("sch_{kind}."))))
        .unwrap_or(false)
}

/// The running kernel's configuration (read once per process).
fn kernel_config(release: &str) -> Option<&'static str> {
    static CONFIG: OnceLock<Option<String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            if let Ok(s) = std::fs::read_to_string(format!("/boot/config-{release}")) {
                return Some(s);
            }
            let out = super::command::output_within(
                std::process::Command::new("zcat").arg("/proc/config.gz"),
                super::command::SHORT,
            )
            .ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .as_deref()
}

/// The host profiles this project is tested under (`host-profiles/*.toml`), by name.
#[cfg(test)]
pub fn profiles() -> Vec<(&'static str, HostFacts)> {
    [
        ("amd-epyc", include_str!("../../../../host-profiles/amd-epyc.toml")),
        ("intel-xeon", include_str!("../../../../host-profiles/intel-xeon.toml")),
        ("intel-xeon-cascadelake", include_str!("../../../../host-profiles/intel-xeon-cascadelake.toml")),
        ("intel-xeon-amx", include_str!("../../../../host-profiles/intel-xeon-amx.toml")),
    ]
    .into_iter()
    .map(|(n, t)| (n, HostFacts::read(&format!("host-profiles/{n}.toml"), t).expect("a valid profile")))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_facts_survive_their_own_file_format() {
        let f = HostFacts::measure();
        assert!(f.cpus >= 1 && f.measured());
        let back = HostFacts::read("x.toml", &f.to_toml()).unwrap();
        // Sizes are written in KiB: the same to the KiB.
        assert_eq!(back.memory_bytes.map(|b| b >> 10), f.memory_bytes.map(|b| b >> 10));
        assert_eq!(back.llc_bytes.map(|b| b >> 10), f.llc_bytes.map(|b| b >> 10));
        assert_eq!(
            (back.cpus, &back.cpu_model, &back.qdiscs, back.kvm.kind(), back.xsave_enabled),
            (f.cpus, &f.cpu_model, &f.qdiscs, f.kvm.kind(), f.xsave_enabled)
        );
        assert_eq!(back.source, "x.toml");
    }

    #[test]
    fn the_profiles_hold_what_was_measured_on_each_machine_kind() {
        let p: std::collections::BTreeMap<_, _> = profiles().into_iter().collect();
        let intel = &p["intel-xeon"];
        assert_eq!(intel.llc_bytes, Some(260 << 20));
        assert_eq!((intel.xsave_enabled, intel.xsave_max), (Some(2688), Some(11008)));
        assert_eq!(intel.legacy_uml_fits(), Some(false), "UML ≤ 6.12 panics on the Xeon");
        assert!(intel.kvm.pvm && !intel.has_qdisc("netem") && intel.has_qdisc("tbf"));
        let amd = &p["amd-epyc"];
        assert_eq!(amd.legacy_uml_fits(), Some(true), "the packaged UML runs on the EPYC");
        assert!(amd.llc_bytes.is_some_and(|l| l < intel.llc_bytes.unwrap()));
        // Cascade Lake: AVX-512 without AMX, an XSAVE area the packaged UML's 2696 bytes holds
        // exactly (it boots there: the suite then tests both UML kernels), a 35.75 MiB L3.
        let cl = &p["intel-xeon-cascadelake"];
        assert_eq!((cl.xsave_enabled, cl.xsave_max), (Some(2696), Some(2696)));
        assert_eq!(cl.legacy_uml_fits(), Some(true), "the packaged UML runs on Cascade Lake");
        assert_eq!(cl.llc_bytes, Some(36608 << 10));
        assert!(cl.kvm.pvm && !cl.has_qdisc("netem") && cl.has_qdisc("htb"));
        // AMX enabled (11008 bytes of XSAVE in use, not only at most) and a 480 MiB L3.
        let amx = &p["intel-xeon-amx"];
        assert_eq!((amx.xsave_enabled, amx.xsave_max), (Some(11008), Some(11008)));
        assert_eq!(amx.legacy_uml_fits(), Some(false), "UML ≤ 6.12 panics with AMX enabled");
        assert_eq!(amx.llc_bytes, Some(480 << 20));
        assert!(amx.kvm.pvm && !amx.has_qdisc("netem") && amx.has_qdisc("tbf"));
        for f in p.values() {
            assert_eq!(f.cpus, 2);
            assert!(f.memory_bytes.is_some_and(|m| m > 20 << 30));
        }
    }

    #[test]
    fn bad_facts_files_name_the_line_and_the_key() {
        let good = include_str!("../../../../host-profiles/intel-xeon.toml");
        let cases: &[(&str, &str, &str)] = &[
            ("llc = \"260MiB\"", "llc = \"lots\"", "key `llc`"),
            ("cpus = 2", "cpus = 0", "key `cpus`"),
            ("kvm = \"pvm\"", "kvm = \"vmx\"", "key `kvm`"),
            ("qdiscs = [\"htb\", \"tbf\"]", "qdiscs = [\"wfq\"]", "key `qdiscs`"),
            ("xsave_enabled = 2688", "xsave_enabled = 12", "key `xsave_enabled`"),
            ("cpus = 2", "cpus = 2\ncolour = \"blue\"", "key `colour`: unknown"),
            ("cpus = 2\n", "", "key `cpus` is missing"),
            ("cpus = 2", "cpus = [", "TOML syntax error"),
        ];
        for (from, to, want) in cases {
            assert!(good.contains(from), "the profile has `{from}`");
            let e = HostFacts::read("p.toml", &good.replacen(from, to, 1)).unwrap_err();
            assert!(e.starts_with("p.toml") && e.contains(want), "{to}: {e}");
            if !want.contains("missing") {
                let line =
                    good.lines().position(|l| l.starts_with(from.split('\n').next().unwrap())).unwrap() + 1;
                assert!(
                    e.starts_with(&format!("p.toml:{line}"))
                        || want.contains("unknown")
                        || want.contains("syntax"),
                    "{e}"
                );
            }
        }
    }
}
