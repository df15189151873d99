//! Whether the plock device's reader, having emptied the device, reads on for a while
//! (`plock_spin_us`) before it sleeps. A process locking alone, or processes passing a
//! contended lock, send their next request microseconds after their reply; a reader that
//! slept meanwhile is woken for each (the scheduler's switch, on a VM an interrupt between
//! CPUs), and that wake-up is most of such a request's time. Reading on is worth it only
//! while requests do come back that quickly, so it is tried after a request that came
//! within a few windows of the device emptying, and given up at the first window without
//! one, after which it backs off for twice as many wake-ups at each window missed in a row
//! (replies that wait for a CPG round trip make it rare); nor is it while every CPU the daemon may use has a task to run (the reader would
//! hold a CPU that one of them, or the process its reply wakes, needs), and it stops when
//! yielding its CPU showed that another task wanted it. No I/O and no clock: the reader
//! passes the instants and the tasks runnable.

use std::time::{Duration, Instant};

/// A request that came within this many windows of the device emptying arms the spin.
const ARM_WINDOWS: u32 = 4;
/// After `k` windows in a row without a request, the next `2^k` wake-ups do not spin (at
/// most 2^6): where replies wait for something slower than the window (a CPG round trip
/// in a C-compatible lockspace), spinning stays rare.
const BACKOFF_MAX: u32 = 6;

/// The reader's spin state.
#[derive(Debug, Default)]
pub(crate) struct Spin {
    /// Spin at the next empty read.
    armed: bool,
    /// When the device was last found empty.
    idle_since: Option<Instant>,
    /// Windows in a row that passed without a request (at most [`BACKOFF_MAX`]).
    misses: u32,
    /// Wake-ups still to go without a spin.
    skip: u32,
}

impl Spin {
    /// The device found empty at `now`: read on until the instant returned, or sleep
    /// (`None`).
    pub(crate) fn idle(&mut self, now: Instant, window: Duration) -> Option<Instant> {
        self.idle_since = Some(now);
        (self.armed && !window.is_zero()).then(|| now + window)
    }

    /// Requests read at `now` after a sleep: the spin is armed if they came within
    /// [`ARM_WINDOWS`] windows of the device emptying and no back-off is running.
    pub(crate) fn woke(&mut self, now: Instant, window: Duration) {
        if let Some(t) = self.idle_since.take() {
            let quick = now.saturating_duration_since(t) <= window * ARM_WINDOWS;
            self.armed = quick && self.skip == 0;
            self.skip = self.skip.saturating_sub(1);
        }
    }

    /// A read while spinning found requests: the spin pays, the back-off is over.
    pub(crate) fn found(&mut self) {
        self.misses = 0;
    }

    /// A window passed without a request: sleep at the next empty read, and let the next
    /// 2^k wake-ups (k windows missed in a row) pass without a spin.
    pub(crate) fn missed(&mut self) {
        self.armed = false;
        self.misses = (self.misses + 1).min(BACKOFF_MAX);
        self.skip = 1 << self.misses;
    }
}

/// The CPUs this process may run on (its affinity, its cgroup's quota): with one, the
/// spin is never tried.
pub(crate) fn cpus_allowed() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// The tasks running or runnable now, from `/proc/loadavg` (`0.00 0.01 0.05 2/81 123`: the
/// fourth field's first number), or `None` if it is not in that form.
pub(crate) fn runnable_of(loadavg: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(loadavg).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

/// Whether a spin takes no CPU that another task waits for: fewer tasks runnable than
/// CPUs allowed (the reader itself is one of them), so one stays free for the process
/// its reply wakes.
pub(crate) fn cpu_to_spare(runnable: usize, cpus: usize) -> bool {
    cpus > 1 && runnable < cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_micros(50);

    fn us(t: Instant, n: u64) -> Instant {
        t + Duration::from_micros(n)
    }

    #[test]
    fn a_quick_request_after_a_sleep_arms_the_spin_and_an_empty_window_disarms_it() {
        let t = Instant::now();
        let mut s = Spin::default();
        // fresh: sleeps at once
        assert_eq!(s.idle(t, W), None);
        // the next request 150 µs after the device emptied (within 4 windows): armed
        s.woke(us(t, 150), W);
        assert_eq!(s.idle(us(t, 160), W), Some(us(t, 210)));
        // requests while spinning keep it going: each empty read gives a new window
        assert_eq!(s.idle(us(t, 190), W), Some(us(t, 240)));
        // a window without a request: the next empty read sleeps
        s.missed();
        assert_eq!(s.idle(us(t, 300), W), None);
    }

    #[test]
    fn windows_missed_in_a_row_back_off_twice_as_long_each_time() {
        let t = Instant::now();
        let mut s = Spin::default();
        // one quick wake-up: armed
        let wake = |s: &mut Spin, at: u64| {
            s.idle(us(t, at), W);
            s.woke(us(t, at + 10), W);
            s.idle(us(t, at + 20), W).is_some()
        };
        assert!(wake(&mut s, 0));
        s.missed();
        // 2 quick wake-ups without a spin, then one
        assert!(!wake(&mut s, 100));
        assert!(!wake(&mut s, 200));
        assert!(wake(&mut s, 300));
        s.missed();
        // now 4
        for i in 0..4 {
            assert!(!wake(&mut s, 400 + 100 * i), "{i}");
        }
        assert!(wake(&mut s, 900));
        // a request found while spinning ends the back-off: the next miss skips 2 again
        s.found();
        s.missed();
        assert!(!wake(&mut s, 1000));
        assert!(!wake(&mut s, 1100));
        assert!(wake(&mut s, 1200));
        // never more than 64
        for _ in 0..10 {
            s.missed();
        }
        let spun = (0..70).filter(|i| wake(&mut s, 2000 + 100 * i)).count();
        assert_eq!(spun, 70 - 64);
    }

    #[test]
    fn a_slow_request_leaves_it_disarmed() {
        let t = Instant::now();
        let mut s = Spin::default();
        assert_eq!(s.idle(t, W), None);
        // 201 µs after the device emptied: over four windows
        s.woke(us(t, 201), W);
        assert_eq!(s.idle(us(t, 210), W), None);
        // exactly four windows still arms
        s.woke(us(t, 410), W);
        assert_eq!(s.idle(us(t, 420), W), Some(us(t, 470)));
        // a wake-up with no empty read before it (the reader's first) arms nothing
        let mut first = Spin::default();
        first.woke(t, W);
        assert_eq!(first.idle(t, W), None);
    }

    #[test]
    fn the_runnable_tasks_are_read_from_loadavg_and_a_busy_machine_is_not_spun_on() {
        assert_eq!(runnable_of(b"0.00 0.01 0.05 2/81 12345\n"), Some(2));
        assert_eq!(runnable_of(b"4.53 3.39 2.32 17/1081 29223"), Some(17));
        for bad in [
            &b""[..],
            b"0.00 0.01 0.05",
            b"0.00 0.01 0.05 x/81 1",
            b"1 2 3 4 5",
            b"\xff",
        ] {
            assert_eq!(runnable_of(bad), None);
        }
        assert!(cpu_to_spare(1, 2));
        assert!(
            !cpu_to_spare(2, 2),
            "every CPU taken: the woken process would wait"
        );
        assert!(!cpu_to_spare(1, 1), "one CPU: never");
        assert!(cpu_to_spare(7, 8));
    }

    #[test]
    fn a_zero_window_never_spins() {
        let t = Instant::now();
        let mut s = Spin::default();
        s.idle(t, Duration::ZERO);
        s.woke(t, Duration::ZERO);
        assert_eq!(s.idle(t, Duration::ZERO), None);
        // armed with a window, then the window set to 0 (a reload): no spin
        s.woke(t, W);
        assert_eq!(s.idle(t, Duration::ZERO), None);
    }
}
