//! Environments: where an agent runs.
//!
//! Every environment kind implements [`Environment`]: it declares its parameters, says whether it
//! can run on this host (and what to do when it cannot), and launches an [`Instance`]: an agent
//! reachable over a byte stream plus a way to read the host-side CPU time of everything the
//! instance runs. To add one, see `docs/environments/README.md`.

pub mod conn;
pub mod container;
pub mod gvisor;
pub mod libvirt;
pub mod native;
pub mod qemu;
pub mod scratch;
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
