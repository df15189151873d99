//! The monotonic clock, read in one place (the pure parts take time as an argument).

/// Monotonic milliseconds.
pub fn monotonic_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1000
                + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000_000
        })
        .unwrap_or(0)
}

/// Monotonic seconds (C's `monotime()`).
pub fn monotonic_secs() -> u64 {
    monotonic_ms() / 1000
}
