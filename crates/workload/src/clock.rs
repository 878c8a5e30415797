//! The clock every timestamp of a workload is read from: CLOCK_MONOTONIC, in nanoseconds (frames,
//! request/response series, the marks of a counted span). Below every module that reads it.

/// CLOCK_MONOTONIC in nanoseconds: the timestamps of frames and of request/response series.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, which lives on this stack frame.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
