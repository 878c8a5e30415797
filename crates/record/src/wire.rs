//! An emulated Ethernet link's arithmetic: what a frame costs on the wire and what an ideal TCP or
//! UDP sender gets through a link of a given rate and MTU. The lab shapes its links with these
//! figures (virtperf's `lab/`), and the report states the ceilings from the rate and MTU the run
//! recorded.

/// On-the-wire bytes a frame costs beyond what the qdisc sees (`skb->len` = L2 header + IP packet):
/// FCS 4 + preamble/SFD 8 + inter-frame gap 12. Given to the shaper so that a `rate` of 1 Gbit/s
/// behaves like Gigabit Ethernet.
pub const WIRE_OVERHEAD: u64 = 24;
/// Ethernet header (the MTU excludes it).
pub const ETH_HEADER: u64 = 14;
/// The smallest frame's cost on the wire: 64 bytes with FCS + preamble and gap.
pub const MIN_WIRE_FRAME: u64 = 84;
/// Goodput of an ideal TCP over one emulated link (seed 000 §3.1), bit/s: every segment carries
/// MSS = MTU − 20 (IP) − 20 (TCP) − 12 (timestamps option, on by default in Linux) bytes of data
/// and costs MTU + 14 (Ethernet) + 24 (FCS, preamble, gap) bytes on the wire. GbE, MTU 1500:
/// 1e9 × 1448 / 1538 = 941.49 Mbit/s. None for an MTU too small to carry a segment.
pub fn tcp_ceiling_bps(rate_bps: u64, mtu: u32) -> Option<f64> {
    let mss = (mtu as u64).checked_sub(52)? as f64;
    let wire = (mtu as u64 + ETH_HEADER + WIRE_OVERHEAD) as f64;
    Some(rate_bps as f64 * mss / wire)
}

/// Datagrams/s an ideal UDP sender of `payload`-byte datagrams can put on a link of `rate_bps`
/// (no IP fragmentation: payload ≤ MTU − 28). Ethernet pads frames to 64 bytes with FCS.
pub fn udp_ceiling_pps(rate_bps: u64, payload: u64) -> f64 {
    let frame = (payload + 28 + ETH_HEADER + 4).max(64);
    rate_bps as f64 / ((frame + 20) * 8) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gigabit_ceilings_match_seed_000_and_rfc_2544() {
        let c = tcp_ceiling_bps(1_000_000_000, 1500).unwrap() / 1e6;
        assert!((c - 941.49).abs() < 0.01, "{c}");
        // 64-byte frames on GbE: 1e9 / (84 × 8) = 1 488 095 frames/s (RFC 2544's figure).
        let pps = udp_ceiling_pps(1_000_000_000, 18);
        assert!((pps - 1_488_095.2).abs() < 1.0, "{pps}");
        assert_eq!(tcp_ceiling_bps(1_000_000_000, 40), None);
    }
}
