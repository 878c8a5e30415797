//! Sizes in the words stored records use.

/// Bytes as MiB when whole (or large), else KiB: `480 MiB`, `64 KiB`.
pub fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.trailing_zeros() >= 20 || bytes >= 16 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
