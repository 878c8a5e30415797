//! What every network workload shares: the datagram header's constants, the grace a server gives
//! its client, the duration and direction parameters.

use std::time::Duration;

use crate::params::{ParamError, ParamKind, ParamSpec, Params};

/// How a network workload fails.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("`{0}` is not an IP address")]
    BadAddress(String),
    /// A socket call (what was asked of which address), with the OS's answer.
    #[error("{what}: {source}")]
    Socket {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the client never connected")]
    NoClient,
    #[error("no data received")]
    NoData,
    #[error("stopped before the client connected")]
    Stopped,
    #[error(transparent)]
    Param(#[from] ParamError),
    #[error("a latency histogram: {0}")]
    Histogram(String),
}

impl crate::error::Kinded for NetError {
    fn kind(&self) -> crate::error::FailureKind {
        match self {
            NetError::Socket { source, .. } => crate::error::kind_of_io(source),
            NetError::NoClient | NetError::NoData => crate::error::FailureKind::Peer,
            NetError::Stopped => crate::error::FailureKind::Stopped,
            NetError::BadAddress(_) | NetError::Param(_) | NetError::Histogram(_) => {
                crate::error::FailureKind::Other
            }
        }
    }
}

/// The error of a socket call `what`, for `map_err`.
pub(crate) fn sock_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetError {
    move |source| NetError::Socket { what: what.into(), source }
}

/// Ethernet header 14 + IPv4 20 + UDP 8 + FCS 4: what a frame size adds to a UDP payload (RFC 2544 sizes include the FCS).
pub const UDP_FRAME_OVERHEAD: u64 = 46;

/// Our datagram header: magic (4) + flow (4) + sequence (8).
pub(super) const HDR: usize = 16;

pub(super) const MAGIC: &[u8; 4] = b"VPUD";

pub(super) const FIN_SEQ: u64 = u64::MAX;

/// How long a server waits for its client to connect or send, past the flow's duration.
pub(super) const GRACE: Duration = Duration::from_secs(15);

pub(super) const DURATION: ParamSpec = ParamSpec {
    name: "duration",
    kind: ParamKind::Duration { min_ms: 100, max_ms: 3_600_000 },
    default: Some("5s"),
    help: "how long the client sends (or asks)",
};

pub(super) const DIRECTION: ParamSpec = ParamSpec {
    name: "direction",
    kind: ParamKind::Choice(&["out", "in", "both"]),
    default: Some("out"),
    help: "out: the environment sends to the tester; in: the tester sends; both: at once",
};

pub(super) fn duration(p: &Params) -> Result<Duration, ParamError> {
    Ok(Duration::from_millis(p.u64("duration")?))
}
