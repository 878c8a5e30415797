//! Sizes in the words a person reads.

/// `1040 MiB`, `260 MiB`, `640 KiB`.
pub fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.trailing_zeros() >= 20 || bytes >= 16 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
