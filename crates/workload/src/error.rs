//! How a workload fails, typed. Each family's module says what can go wrong in its own enum
//! (`micro::MicroError`, `net::NetError` — the RFC 2544 generator's too —, `disk::DiskError`,
//! `tools::ToolError`, `pfs::PfsError`), and this file what they share ([`OsError`] for a system
//! call, [`Failure`] for a stop, a check, a lack); each implements [`Kinded`], and [`Error`]
//! carries any of them out of [`crate::Workload::run`] with its [`FailureKind`]. The agent sends
//! the kind beside the message, and the orchestrator decides on the kind — a cell that cannot run
//! in an environment is set aside, not failed at every repetition — never on the message's words.

use std::io;

pub use virtperf_proto::FailureKind;

/// A system call or file operation that failed: what was asked (and of what), and the OS's
/// answer, whose errno gives the kind.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct OsError {
    pub what: String,
    #[source]
    pub source: io::Error,
}

impl OsError {
    pub fn new(what: impl Into<String>, source: io::Error) -> Self {
        OsError { what: what.into(), source }
    }
    /// The calling thread's last OS error (`errno`), right after a libc call returned failure.
    pub fn last(what: impl Into<String>) -> Self {
        OsError::new(what, io::Error::last_os_error())
    }
    pub fn kind(&self) -> FailureKind {
        kind_of_io(&self.source)
    }
}

/// The kind of an OS error, by its errno: what the orchestrator may decide on.
pub fn kind_of_io(e: &io::Error) -> FailureKind {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => FailureKind::NoSpace,
        // The kernel (or gVisor's, or UML's) has no such call, option or family.
        Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::ENODEV) => {
            FailureKind::Unsupported
        }
        Some(
            libc::ECONNREFUSED
            | libc::ECONNRESET
            | libc::ECONNABORTED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::ETIMEDOUT
            | libc::EPIPE,
        ) => FailureKind::Peer,
        Some(libc::ENOMEM | libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOBUFS) => {
            FailureKind::Resource
        }
        Some(_) => FailureKind::Other,
        // No errno (a connect's own timeout, an I/O error made by the standard library).
        None => match e.kind() {
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::TimedOut => FailureKind::Peer,
            io::ErrorKind::Unsupported => FailureKind::Unsupported,
            io::ErrorKind::OutOfMemory => FailureKind::Resource,
            _ => FailureKind::Other,
        },
    }
}

/// What every error of a workload says besides its words: its kind. Each family's enum
/// implements it; [`Error`] carries any of them.
pub trait Kinded {
    fn kind(&self) -> FailureKind;
}

impl Kinded for OsError {
    fn kind(&self) -> FailureKind {
        OsError::kind(self)
    }
}

/// Failures every family may meet, with nothing of its own to say.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A network workload run without a peer (not through `virtperf run`).
    #[error(
        "a network workload needs a peer: run it through `virtperf run`, which pairs it with the tester"
    )]
    NoPeer,
    /// This environment lacks what the workload needs.
    #[error("{0}")]
    Unsupported(String),
    /// Its own check of what it did failed.
    #[error("{0}")]
    Check(String),
    /// The host asked it to stop before the end.
    #[error("stopped before the end {0}")]
    Stopped(&'static str),
    /// A thread the workload started panicked.
    #[error("{0} thread panicked")]
    Panicked(&'static str),
}

impl Kinded for Failure {
    fn kind(&self) -> FailureKind {
        match self {
            Failure::NoPeer => FailureKind::Peer,
            Failure::Unsupported(_) => FailureKind::Unsupported,
            Failure::Check(_) => FailureKind::Check,
            Failure::Stopped(_) => FailureKind::Stopped,
            Failure::Panicked(_) => FailureKind::Other,
        }
    }
}

/// A workload's failure, from any family: the family's own error (its words, its sources, and
/// `downcast_ref` to it) and its kind, fixed when it was made. Not an enum of the families: this
/// file is below every workload, which each convert their errors into it.
pub struct Error {
    kind: FailureKind,
    inner: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl Error {
    pub fn kind(&self) -> FailureKind {
        self.kind
    }
    /// The family's error, when it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.inner.downcast_ref()
    }
}

impl<E: Kinded + std::error::Error + Send + Sync + 'static> From<E> for Error {
    fn from(e: E) -> Self {
        Error { kind: e.kind(), inner: Box::new(e) }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({:?})", self.inner, self.kind)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_give_the_kinds_the_orchestrator_decides_on() {
        let k = |errno| OsError::new("x", io::Error::from_raw_os_error(errno)).kind();
        assert_eq!(k(libc::ENOSPC), FailureKind::NoSpace);
        assert_eq!(k(libc::EDQUOT), FailureKind::NoSpace);
        assert_eq!(k(libc::ENOSYS), FailureKind::Unsupported);
        assert_eq!(k(libc::EOPNOTSUPP), FailureKind::Unsupported);
        assert_eq!(k(libc::ECONNREFUSED), FailureKind::Peer);
        assert_eq!(k(libc::EPIPE), FailureKind::Peer);
        assert_eq!(k(libc::EMFILE), FailureKind::Resource);
        assert_eq!(k(libc::ENOENT), FailureKind::Other);
        // socket2's connect timeout has no errno.
        assert_eq!(kind_of_io(&io::Error::from(io::ErrorKind::TimedOut)), FailureKind::Peer);
        // The message keeps what was asked and the OS's words.
        let e = Error::from(OsError::new("open /x", io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(e.to_string().starts_with("open /x: "), "{e}");
        assert_eq!(e.kind(), FailureKind::NoSpace);
        // The family's error stays reachable, with its source.
        assert!(e.downcast_ref::<OsError>().is_some());
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(Error::from(Failure::NoPeer).kind(), FailureKind::Peer);
    }

    #[test]
    fn an_unknown_kind_from_a_newer_agent_reads_as_other() {
        let k: FailureKind = serde_json::from_str("\"quantum\"").unwrap();
        assert_eq!(k, FailureKind::Other);
        assert_eq!(serde_json::to_string(&FailureKind::NoSpace).unwrap(), "\"no_space\"");
    }
}
