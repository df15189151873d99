//! `plock_rate_limit` (plock.c `limit_plocks`): at most N plock requests read from the
//! kernel per second; once N are read in a one-second window, reading pauses until the
//! window ends. Pure: the caller supplies the time.

/// The limiter's state.
#[derive(Debug, Clone, Default)]
pub struct RateLimit {
    window_start_ms: u64,
    count: u64,
    /// Windows in which the limit was reached (C's `plock_rate_delays`).
    pub delays: u64,
}

impl RateLimit {
    /// May one more request be read at `now_ms` under `limit` per second (0 = none)? `Err`
    /// carries the time reading may resume.
    pub fn admit(&mut self, limit: i64, now_ms: u64) -> Result<(), u64> {
        self.admit_up_to(limit, now_ms, 1).map(|_| ())
    }

    /// How many of `want` more requests may be read at `now_ms` (at least one, and they
    /// count as read); `Err` as [`Self::admit`].
    pub fn admit_up_to(&mut self, limit: i64, now_ms: u64, want: u64) -> Result<u64, u64> {
        let Ok(limit) = u64::try_from(limit) else {
            return Ok(want);
        };
        if limit == 0 {
            return Ok(want);
        }
        if now_ms.saturating_sub(self.window_start_ms) >= 1000 {
            self.window_start_ms = now_ms;
            self.count = 0;
        }
        if self.count >= limit {
            if self.count == limit {
                self.delays += 1;
                self.count += 1; // count the delay once per window
            }
            return Err(self.window_start_ms + 1000);
        }
        let n = want.min(limit - self.count);
        self.count += n;
        Ok(n)
    }

    /// `n` requests admitted were not there to read: they do not count.
    pub fn unused(&mut self, n: u64) {
        self.count = self.count.saturating_sub(n);
    }
}

/// At most one line a second; says how many were held back since the last one. Pure:
/// the caller supplies the time (monotonic milliseconds).
#[derive(Debug, Default, Clone)]
pub struct LogEvery {
    last: Option<u64>,
    held: u64,
}

impl LogEvery {
    /// `Some(held back)` when a line may be written at `now_ms`.
    pub fn allow(&mut self, now_ms: u64) -> Option<u64> {
        if self.last.is_some_and(|t| now_ms.saturating_sub(t) < 1000) {
            self.held += 1;
            return None;
        }
        self.last = Some(now_ms);
        Some(std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second() {
        let mut l = LogEvery::default();
        let t = 5_000;
        assert_eq!(l.allow(t), Some(0));
        assert_eq!(l.allow(t + 10), None);
        assert_eq!(l.allow(t + 999), None);
        assert_eq!(l.allow(t + 1000), Some(2));
        assert_eq!(l.allow(t + 1001), None);
    }

    #[test]
    fn n_per_second_then_a_pause_until_the_window_ends() {
        let mut r = RateLimit::default();
        assert!((0..100).all(|i| r.admit(0, i).is_ok()), "0 is no limit");
        let mut r = RateLimit::default();
        let t = 5_000;
        assert!((0..3).all(|_| r.admit(3, t).is_ok()));
        assert_eq!(r.admit(3, t + 10), Err(t + 1000));
        assert_eq!(r.admit(3, t + 999), Err(t + 1000));
        assert_eq!(r.delays, 1, "one delay per window");
        assert_eq!(r.admit(3, t + 1000), Ok(()));
        assert!(r.admit(3, t + 1001).is_ok() && r.admit(3, t + 1002).is_ok());
        assert_eq!(r.admit(3, t + 1003), Err(t + 2000));
        assert_eq!(r.delays, 2);
        // a limit lowered at run time applies at once
        assert_eq!(r.admit(1, t + 2500), Ok(()));
        assert_eq!(r.admit(1, t + 2600), Err(t + 3500));
        assert_eq!(r.admit(-5, t + 2600), Ok(()), "negative: no limit");
    }

    #[test]
    fn a_batch_takes_what_is_left_of_the_window_and_gives_back_what_it_did_not_read() {
        let mut r = RateLimit::default();
        let t = 9_000;
        assert_eq!(r.admit_up_to(0, t, 16), Ok(16), "no limit");
        assert_eq!(r.admit_up_to(10, t, 16), Ok(10));
        assert_eq!(r.admit_up_to(10, t + 1, 16), Err(t + 1000));
        let mut r = RateLimit::default();
        assert_eq!(r.admit_up_to(10, t, 4), Ok(4));
        r.unused(3); // one of the four was there
        assert_eq!(r.admit_up_to(10, t, 16), Ok(9));
        assert_eq!(r.admit(10, t), Err(t + 1000));
        assert_eq!(r.delays, 1);
    }
}
