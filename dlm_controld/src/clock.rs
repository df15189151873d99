//! The monotonic clock, read in one place (the pure parts take time as an argument).
//!
//! Every reading is an [`Instant`] (CLOCK_MONOTONIC on Linux, as C's `monotime()`), and the
//! milliseconds the cores take are derived from it: one clock read can serve a latency and
//! the cores' time both, and every millisecond value comes from the same source, so none
//! runs behind another read later.

use std::sync::OnceLock;
use std::time::Instant;

/// An instant read at the first use, and CLOCK_MONOTONIC's milliseconds then.
fn base() -> (Instant, u64) {
    static BASE: OnceLock<(Instant, u64)> = OnceLock::new();
    *BASE.get_or_init(|| {
        let at = Instant::now();
        let ms = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| {
                u64::try_from(t.tv_sec()).unwrap_or(0) * 1000
                    + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1_000_000
            })
            .unwrap_or(0);
        (at, ms)
    })
}

/// Monotonic milliseconds at `at` (an instant read by the caller for its own use too; one
/// read before the clock's first use counts as that use).
pub fn ms_at(at: Instant) -> u64 {
    let (at0, ms0) = base();
    let since = at.saturating_duration_since(at0).as_millis();
    ms0.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
}

/// Monotonic milliseconds.
pub fn monotonic_ms() -> u64 {
    ms_at(Instant::now())
}

/// Monotonic seconds (C's `monotime()`).
pub fn monotonic_secs() -> u64 {
    monotonic_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_follow_the_instant_and_never_go_back() {
        let first = monotonic_ms();
        let a = Instant::now();
        let ms_a = ms_at(a);
        assert!(ms_a >= first);
        let later = a + std::time::Duration::from_millis(1500);
        assert_eq!(ms_at(later), ms_a + 1500);
        assert!(monotonic_ms() >= ms_a);
        // CLOCK_MONOTONIC's own reading, within the base's rounding
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
        let direct = u64::try_from(t.tv_sec()).expect("secs") * 1000
            + u64::try_from(t.tv_nsec()).expect("ns") / 1_000_000;
        assert!(monotonic_ms().abs_diff(direct) <= 2, "{direct}");
    }
}
