//! The accelerator of a QEMU guest: KVM where it can run a stock guest kernel, else TCG, with
//! the reason (on PVM hosts /dev/kvm exists but stock kernels hang).

/// The accelerator QEMU runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

pub use crate::host::KvmFacts;

/// Picks the accelerator for `requested` (auto|kvm|tcg). `own_kernel`: the user gave a kernel,
/// which may be PVM-enabled. Ok: the choice and why; Err: why `kvm` cannot be had, and the fix.
pub fn decide_accel(
    requested: &str,
    f: &KvmFacts,
    own_kernel: bool,
) -> Result<(Accel, String), (String, String)> {
    let kvm_ok = f.dev.is_ok() && f.hw && !f.pvm;
    match requested {
        "tcg" => Ok((Accel::Tcg, "TCG as requested".into())),
        "kvm" if kvm_ok => Ok((Accel::Kvm, "KVM as requested".into())),
        "kvm" if f.pvm && f.dev.is_ok() && own_kernel => {
            Ok((Accel::Kvm, "KVM on PVM as requested, with your kernel (it must be PVM-enabled)".into()))
        }
        "kvm" if f.pvm => Err((
            "/dev/kvm here is PVM (module kvm_pvm): only PVM-enabled guest kernels run; Debian's stock kernel hangs in early boot"
                .into(),
            "use accel=tcg (or auto), or give kernel=PATH of a PVM-enabled kernel".into(),
        )),
        "kvm" => Err((
            match &f.dev {
                Err(e) => format!("KVM is not usable: {e}"),
                Ok(()) => "KVM is not usable: the CPU shows no vmx/svm flag".into(),
            },
            "use accel=tcg, or load kvm_intel/kvm_amd on a host with hardware virtualization".into(),
        )),
        _ => Ok(if kvm_ok {
            (Accel::Kvm, "KVM: /dev/kvm with hardware virtualization".into())
        } else if f.pvm {
            (Accel::Tcg, "TCG: /dev/kvm is PVM (kvm_pvm), which cannot run a stock guest kernel".into())
        } else if let Err(e) = &f.dev {
            (Accel::Tcg, format!("TCG: no usable KVM ({e})"))
        } else {
            (Accel::Tcg, "TCG: the CPU shows no vmx/svm flag".into())
        }),
    }
}

/// The host's TSC frequency in kHz (measured once per process): under TCG the guest reads the
/// host's TSC, so this is the guest's too.
pub fn host_tsc_khz() -> Option<u64> {
    static KHZ: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *KHZ.get_or_init(crate::host::tsc_khz)
}
