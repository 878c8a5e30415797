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

#[cfg(test)]
mod tests {
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
        c.execute_batch(virtperf_report::store::LEGACY_ENV_FLAGS).unwrap();
        for k in super::REGISTRY {
            let (base, own): (bool, bool) = c
                .query_row("SELECT baseline, own_clock FROM environments WHERE kind = ?1", [k.kind()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            assert_eq!((base, own), (k.is_baseline(), k.own_clock()), "kind {}", k.kind());
        }
    }
}
