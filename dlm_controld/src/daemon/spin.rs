//! Whether the plock device's reader, having emptied the device, reads on for a while
//! (`plock_spin_us`) before it sleeps. A process locking alone, or processes passing a
//! contended lock, send their next request microseconds after their reply; a reader that
//! slept meanwhile is woken for each (the scheduler's switch, on a VM an interrupt between
//! CPUs), and that wake-up is most of such a request's time. Reading on is worth it only
//! while requests do come back that quickly, so it is tried after a request that came
//! within a few windows of the device emptying, and given up at the first window without
//! one; nor is it while every CPU the daemon may use has a task to run (the reader would
//! hold a CPU that one of them, or the process its reply wakes, needs), and it stops when
//! yielding its CPU showed that another task wanted it. No I/O and no clock: the reader
//! passes the instants and the tasks runnable.

use std::time::{Duration, Instant};

/// A request that came within this many windows of the device emptying arms the spin.
const ARM_WINDOWS: u32 = 4;

/// The reader's spin state.
#[derive(Debug, Default)]
pub(crate) struct Spin {
    /// Spin at the next empty read.
    armed: bool,
    /// When the device was last found empty.
    idle_since: Option<Instant>,
}

impl Spin {
    /// The device found empty at `now`: read on until the instant returned, or sleep
    /// (`None`).
    pub(crate) fn idle(&mut self, now: Instant, window: Duration) -> Option<Instant> {
        self.idle_since = Some(now);
        (self.armed && !window.is_zero()).then(|| now + window)
    }

    /// Requests read at `now` after a sleep: the spin is armed if they came within
    /// [`ARM_WINDOWS`] windows of the device emptying.
    pub(crate) fn woke(&mut self, now: Instant, window: Duration) {
        if let Some(t) = self.idle_since.take() {
            self.armed = now.saturating_duration_since(t) <= window * ARM_WINDOWS;
        }
    }

    /// A window passed without a request: sleep at the next empty read too, until
    /// requests come back that quickly again.
    pub(crate) fn missed(&mut self) {
        self.armed = false;
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
