//! What every network workload shares: the datagram header's constants, the grace a server gives
//! its client, the duration and direction parameters.

use std::time::Duration;

use crate::params::{ParamKind, ParamSpec, Params};

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

pub(super) fn duration(p: &Params) -> Result<Duration, String> {
    Ok(Duration::from_millis(p.u64("duration")?))
}
