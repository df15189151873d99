//! The monotonic clock, read in one place (the pure parts take time as an argument).
//!
//! Every reading of a time the daemon keeps (a request's, a message's, the cores'
//! milliseconds) is a [`Stamp`]: CLOCK_MONOTONIC (C's `monotime()`) in nanoseconds, one
//! `clock_gettime` through the vDSO. (The reader's spin measures its short waits with
//! `Instant`s, the same clock, and keeps none of them.) The milliseconds the cores take are derived from it, so
//! one read can serve a request's latency and the cores' time both, and every millisecond
//! value comes from the same source: none runs behind another read later. A plain integer,
//! so the request path's latencies are plain subtractions (an `Instant`'s subtraction
//! normalises seconds and nanoseconds).

/// A CLOCK_MONOTONIC reading, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// The clock now (CLOCK_MONOTONIC cannot fail; if it did, the epoch).
    pub fn now() -> Self {
        let ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let ns = u64::try_from(t.tv_nsec()).unwrap_or(0);
            secs.saturating_mul(1_000_000_000).saturating_add(ns)
        });
        Self(ns)
    }

    /// Its milliseconds (what the cores take).
    pub fn ms(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Seconds from `earlier` to this reading (zero if `earlier` is later), for latencies.
    pub fn secs_since(self, earlier: Self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // nanoseconds below 2^52: 52 days
        let secs = self.0.saturating_sub(earlier.0) as f64 / 1e9;
        secs
    }
}

impl std::ops::Add<std::time::Duration> for Stamp {
    type Output = Self;

    /// The reading `d` later (saturating).
    fn add(self, d: std::time::Duration) -> Self {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(ns))
    }
}

/// Monotonic milliseconds.
pub fn monotonic_ms() -> u64 {
    Stamp::now().ms()
}

/// Monotonic seconds (C's `monotime()`).
pub fn monotonic_secs() -> u64 {
    monotonic_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_follow_the_clock_and_never_go_back() {
        let first = monotonic_ms();
        let a = Stamp::now();
        assert!(a.ms() >= first);
        assert!(monotonic_ms() >= a.ms());
        // CLOCK_MONOTONIC's own reading
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
        let direct = u64::try_from(t.tv_sec()).expect("secs") * 1000
            + u64::try_from(t.tv_nsec()).expect("ns") / 1_000_000;
        assert!(
            direct >= a.ms() && direct - a.ms() <= 1000,
            "{direct} {a:?}"
        );
        // the same clock as std's Instant: a sleep shows in both
        let (i0, s0) = (std::time::Instant::now(), Stamp::now());
        std::thread::sleep(std::time::Duration::from_millis(30));
        let (s1, i1) = (Stamp::now(), std::time::Instant::now());
        let ours = s1.secs_since(s0);
        let std = i1.duration_since(i0).as_secs_f64();
        assert!(ours >= 0.03 && ours <= std, "{ours} {std}");
        assert!(s0.secs_since(s1).abs() < f64::EPSILON, "never negative");
    }
}
