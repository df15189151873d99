//! Whether the plock device's reader, having emptied the device, reads on for a while
//! before it sleeps, and for how long. A process locking alone, or processes passing a
//! contended lock, send their next request soon after their reply; a reader that slept
//! meanwhile is woken for each (the scheduler's switch, on a VM an interrupt between
//! CPUs), and that wake-up is most of such a request's time.
//!
//! The reader learns two gaps from the device emptying to its next request: when it slept
//! meanwhile (the process's turn, a sleep and a wake-up) and when it read on (the
//! process's turn alone). Their difference is what a wake-up costs on this machine, which
//! is ten times more under emulation than on hardware; reading on is worth it while the
//! process's turn is at most [`WORTH`] times that (a process that works between its locks
//! is not read on for), and the window is a few times the turn or the gap when sleeping,
//! whichever is longer (a turn never outlasts that gap), at least [`WINDOW_MIN`], at most
//! `plock_spin_us`. It is tried after a request that came within a few windows of the
//! device emptying, given up at the first window without one or the first turn that
//! leaves it not worth it, after which it backs off for twice as many wake-ups at each
//! such end in a row (replies that wait for a CPG round trip make it rare; each try after
//! a back-off learns the turn again); nor is it while every CPU the daemon may
//! use has a task to run (the reader would hold a CPU that one of them, or the process its
//! reply wakes, needs), and it stops when yielding its CPU showed that another task wanted
//! it; either stop backs off as a missed window does if the spin had found no request yet
//! (a process that works on the CPU between its locks is found that way, before its next
//! request). No I/O and no clock: the reader passes the instants and the tasks runnable.

use std::time::{Duration, Instant};

/// A request that came within this many windows of the device emptying arms the spin.
const ARM_WINDOWS: u32 = 4;
/// After `k` windows in a row without a request, the next `2^k` wake-ups do not spin (at
/// most 2^6): where replies wait for something slower than the window (a CPG round trip
/// in a C-compatible lockspace), spinning stays rare.
const BACKOFF_MAX: u32 = 6;
/// Reading on is worth it while the process's turn is at most this many wake-ups.
const WORTH: u32 = 4;
/// The window is this many times the process's turn (or the gap when sleeping, if that
/// is longer)…
const WINDOW_TURNS: u32 = 4;
/// …and never shorter than this (or `plock_spin_us`, if that is shorter).
const WINDOW_MIN: Duration = Duration::from_micros(50);
/// A gap longer than this many longest windows is a pause, not a process's turn: it is not
/// learned from.
const PAUSE_WINDOWS: u32 = 16;

/// Each gap weighs this much (1/n) in its mean: the gaps vary from one to the next by more
/// than the difference of the two means, which decides whether to read on, and come by the
/// thousand a second while it matters.
const MEAN_OF: u64 = 32;

/// A mean that follows its samples, each weighing 1/[`MEAN_OF`] (nanoseconds).
#[derive(Debug, Clone, Copy)]
struct Mean(u64);

impl Mean {
    fn add(mean: &mut Option<Self>, sample: Duration) {
        let x = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
        *mean = Some(match *mean {
            None => Self(x),
            Some(Self(m)) if x >= m => Self(m + (x - m) / MEAN_OF),
            Some(Self(m)) => Self(m - (m - x) / MEAN_OF),
        });
    }

    const fn get(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

/// The reader's spin state.
#[derive(Debug, Default)]
pub(crate) struct Spin {
    /// Spin at the next empty read.
    armed: bool,
    /// When the device was last found empty.
    idle_since: Option<Instant>,
    /// Wake-ups to go without a spin after windows that passed without a request.
    back_off: BackOff,
    /// The gap from the device emptying to the next request when the reader slept.
    slept: Option<Mean>,
    /// The same gap when the reader read on.
    spun: Option<Mean>,
    /// The next request found while reading on starts the turn's mean again: a spin ended
    /// (its window passed, or its turn was long), and the turn may have changed since.
    relearn: bool,
    /// The spin under way has found a request.
    paid: bool,
}

/// What the reader has learned, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Learned {
    pub(crate) slept: Option<Duration>,
    pub(crate) spun: Option<Duration>,
}

impl Spin {
    /// The window under the longest, `most` (`plock_spin_us`; zero: never): a few times
    /// the process's turn, or the gap seen when sleeping if that is longer (so a window
    /// also covers turns that grew since the last found).
    pub(crate) fn window(&self, most: Duration) -> Duration {
        let turns = self.spun.map_or(Duration::ZERO, |t| t.get() * WINDOW_TURNS);
        let slept = self.slept.map_or(Duration::ZERO, Mean::get);
        turns.max(slept).max(WINDOW_MIN).min(most)
    }

    /// Whether reading on is worth it: the process's turn is at most [`WORTH`] times what
    /// a wake-up costs (the gaps' difference); unknown until both are learned.
    fn worth(&self) -> bool {
        match (self.spun, self.slept) {
            (Some(t), Some(s)) => {
                let (t, s) = (t.get(), s.get());
                t <= s.saturating_sub(t) * WORTH
            }
            _ => true,
        }
    }

    /// What has been learned so far.
    pub(crate) fn learned(&self) -> Learned {
        Learned {
            slept: self.slept.map(Mean::get),
            spun: self.spun.map(Mean::get),
        }
    }

    /// The device found empty at `now`: read on until the instant returned, or sleep
    /// (`None`).
    pub(crate) fn idle(&mut self, now: Instant, most: Duration) -> Option<Instant> {
        self.idle_since = Some(now);
        let window = self.window(most);
        (self.armed && !window.is_zero()).then(|| now + window)
    }

    /// Requests read at `now` after a sleep: the gap is learned, and the spin is armed if
    /// they came within [`ARM_WINDOWS`] windows of the device emptying and no back-off is
    /// running (whether it is worth it is judged at its first request, with the turn
    /// learned again: the turn changes only while the reader reads on).
    pub(crate) fn woke(&mut self, now: Instant, most: Duration) {
        let Some(t) = self.idle_since.take() else {
            return;
        };
        let gap = now.saturating_duration_since(t);
        let quick = gap <= self.window(most) * ARM_WINDOWS;
        if !most.is_zero() && gap <= most * PAUSE_WINDOWS {
            Mean::add(&mut self.slept, gap);
        }
        self.armed = quick && self.back_off.allows();
        self.paid = false;
    }

    /// A read at `now` while spinning found requests: the gap is learned; the spin goes
    /// on (the back-off is over) while it is worth it, else it ends as a missed window
    /// does.
    pub(crate) fn found(&mut self, now: Instant) {
        self.paid = true;
        if let Some(t) = self.idle_since {
            if std::mem::take(&mut self.relearn) {
                self.spun = None;
            }
            Mean::add(&mut self.spun, now.saturating_duration_since(t));
        }
        if self.worth() {
            self.back_off.reset();
        } else {
            self.missed();
        }
    }

    /// The CPU was wanted by another task: the spin ends; if it had found no request yet,
    /// as a missed window (a process that works on the CPU between its locks is found that
    /// way, before its next request comes), else with no back-off (it paid).
    pub(crate) fn wanted(&mut self) {
        if !self.paid {
            self.missed();
        }
    }

    /// A window passed without a request: sleep at the next empty read, and let the next
    /// 2^k wake-ups (k such ends in a row) pass without a spin.
    pub(crate) fn missed(&mut self) {
        self.armed = false;
        self.relearn = true;
        self.back_off.missed();
    }
}

/// Tries (a spin, or with one CPU the reader's look, `plock_device.rs`) that end without
/// a request make the next `2^k` wake-ups (k such ends in a row, at most
/// [`BACKOFF_MAX`]) pass without one, so where replies wait for something slower (a CPG
/// round trip) tries stay rare.
#[derive(Debug, Default)]
pub(crate) struct BackOff {
    /// Tries in a row that ended without a request.
    misses: u32,
    /// Wake-ups still to go without a try.
    skip: u32,
}

impl BackOff {
    /// A wake-up: whether it may try.
    pub(crate) fn allows(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// A try found requests: the back-off is over.
    pub(crate) fn reset(&mut self) {
        self.misses = 0;
    }

    /// A try ended without a request.
    pub(crate) fn missed(&mut self) {
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

    /// The longest window these tests allow (`plock_spin_us`'s default).
    const MOST: Duration = Duration::from_micros(1000);

    fn us(t: Instant, n: u64) -> Instant {
        t + Duration::from_micros(n)
    }

    fn micros(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// The device empties at `at`, the reader sleeps, the next request comes `gap` µs
    /// later and the device is empty again: whether the reader reads on.
    fn wake(s: &mut Spin, at: Instant, gap: u64) -> bool {
        s.idle(at, MOST);
        s.woke(at + micros(gap), MOST);
        s.idle(at + micros(gap), MOST).is_some()
    }

    #[test]
    fn a_quick_request_after_a_sleep_arms_the_spin_and_an_empty_window_disarms_it() {
        let t = Instant::now();
        let mut s = Spin::default();
        // fresh: sleeps at once
        assert_eq!(s.idle(t, MOST), None);
        // the next request 150 µs after the device emptied (within four of the shortest
        // windows): learned and armed, and until the process's turn is known the window is
        // that gap
        s.woke(us(t, 150), MOST);
        assert_eq!(s.idle(us(t, 160), MOST), Some(us(t, 310)));
        // a request 30 µs into the spin: the turn is 30 µs; the window is four turns or
        // the gap when sleeping, whichever is longer (150)
        s.found(us(t, 190));
        assert_eq!(s.idle(us(t, 190), MOST), Some(us(t, 340)));
        assert_eq!(
            s.learned(),
            Learned {
                slept: Some(micros(150)),
                spun: Some(micros(30))
            }
        );
        // a window without a request: the next empty read sleeps
        s.missed();
        assert_eq!(s.idle(us(t, 400), MOST), None);
        // later gaps move each mean by 1/32 of the difference
        s.woke(us(t, 470), MOST);
        assert_eq!(s.learned().slept, Some(Duration::from_nanos(147_500)));
    }

    #[test]
    fn windows_missed_in_a_row_back_off_twice_as_long_each_time() {
        let t = Instant::now();
        let mut s = Spin::default();
        // a wake-up 100 µs after the device emptied, then a turn of 10 µs learned
        s.idle(t, MOST);
        s.woke(us(t, 100), MOST);
        s.idle(us(t, 100), MOST);
        s.found(us(t, 110));
        let wake = |s: &mut Spin, at: u64| wake(s, us(t, at), 100);
        assert!(wake(&mut s, 1000));
        s.missed();
        // 2 quick wake-ups without a spin, then one
        assert!(!wake(&mut s, 2000));
        assert!(!wake(&mut s, 3000));
        assert!(wake(&mut s, 4000));
        s.missed();
        // now 4
        for i in 0..4 {
            assert!(!wake(&mut s, 5000 + 1000 * i), "{i}");
        }
        assert!(wake(&mut s, 9000));
        // a request found while spinning ends the back-off: the next miss skips 2 again
        s.found(us(t, 9115));
        s.missed();
        assert!(!wake(&mut s, 10_000));
        assert!(!wake(&mut s, 11_000));
        assert!(wake(&mut s, 12_000));
        // never more than 64
        for _ in 0..10 {
            s.missed();
        }
        let spun = (0..70).filter(|i| wake(&mut s, 20_000 + 1000 * i)).count();
        assert_eq!(spun, 70 - 64);
    }

    #[test]
    fn a_pause_is_not_learned_and_a_slow_request_leaves_it_disarmed() {
        let t = Instant::now();
        let mut s = Spin::default();
        // 17 ms after the device emptied: a pause (over 16 windows of 1 ms), not a turn;
        // nothing learned, and far over four of the shortest windows: not armed
        s.idle(t, MOST);
        s.woke(us(t, 17_000), MOST);
        assert_eq!(s.learned().slept, None);
        assert_eq!(s.idle(us(t, 17_010), MOST), None);
        // a gap of 40 µs and a turn of 20 µs learned: the window is 80 µs
        s.woke(us(t, 17_050), MOST);
        s.idle(us(t, 17_050), MOST);
        s.found(us(t, 17_070));
        assert_eq!(s.window(MOST), micros(80));
        // a request 321 µs after the device emptied is over four windows: not armed
        s.idle(us(t, 18_000), MOST);
        s.woke(us(t, 18_321), MOST);
        assert_eq!(s.idle(us(t, 18_330), MOST), None);
        // exactly four windows arms
        s.woke(us(t, 18_330 + 320), MOST);
        assert!(s.idle(us(t, 18_700), MOST).is_some());
        // a wake-up with no empty read before it (the reader's first) arms nothing
        let mut first = Spin::default();
        first.woke(t, MOST);
        assert_eq!(first.idle(t, MOST), None);
    }

    #[test]
    fn a_process_whose_turn_is_long_beside_a_wake_up_is_not_read_on_for() {
        let t = Instant::now();
        let mut s = Spin::default();
        // a process that works 400 µs between its requests, on a machine where a wake-up
        // costs 10 µs: the first gap is learned (over four of the shortest windows, not
        // armed), the next is within four windows of it
        s.idle(t, MOST);
        s.woke(us(t, 410), MOST);
        assert_eq!(s.idle(us(t, 410), MOST), None);
        s.woke(us(t, 820), MOST);
        assert_eq!(s.idle(us(t, 820), MOST), Some(us(t, 1230)));
        // the spin learns the turn, and ends there
        s.found(us(t, 1220));
        assert_eq!(s.idle(us(t, 1220), MOST), None, "400 > 4 × 10");
        // and the next two wake-ups do not try
        let wake = |s: &mut Spin, at: u64| wake(s, us(t, at), 410);
        assert!(!wake(&mut s, 2000));
        assert!(!wake(&mut s, 3000));
        // the third tries again and learns the turn again: still long, so it ends at its
        // first request and the next four do not try
        assert!(wake(&mut s, 4000));
        s.found(us(t, 4810));
        assert_eq!(s.idle(us(t, 4810), MOST), None);
        for i in 0..4 {
            assert!(!wake(&mut s, 5000 + 1000 * i), "{i}");
        }
        // a turn that became short (the process stopped working between its locks) is
        // learned at the next try, and the spin goes on
        assert!(wake(&mut s, 9000));
        for k in 0..64 {
            let at = 9410 + 20 * k;
            s.found(us(t, at + 20));
            assert!(s.idle(us(t, at + 20), MOST).is_some(), "{k}");
        }
    }

    #[test]
    fn under_emulation_the_window_grows_to_the_turn_and_stays_under_plock_spin_us() {
        let t = Instant::now();
        let mut s = Spin::default();
        // a wake-up costs 450 µs and a turn 150 µs: after the first gap, the window is
        // that gap, then four turns
        s.idle(t, MOST);
        s.woke(us(t, 600), MOST);
        s.idle(us(t, 600), MOST);
        s.woke(us(t, 1200), MOST);
        assert_eq!(s.idle(us(t, 1200), MOST), Some(us(t, 1800)));
        s.found(us(t, 1350));
        assert_eq!(s.idle(us(t, 1350), MOST), Some(us(t, 1950)));
        // a turn of 310 µs: the mean is 150 + 160/32, the window four of it
        s.found(us(t, 1660));
        assert_eq!(s.window(MOST), micros(620));
        // plock_spin_us bounds it, and the shortest window is 50 µs
        assert_eq!(s.window(micros(300)), micros(300));
        assert_eq!(s.window(micros(20)), micros(20));
        let mut quick = Spin::default();
        quick.idle(t, MOST);
        quick.woke(us(t, 5), MOST);
        assert_eq!(quick.window(MOST), WINDOW_MIN);
        assert_eq!(Spin::default().window(MOST), WINDOW_MIN);
    }

    #[test]
    fn a_spin_the_cpu_was_wanted_from_backs_off_unless_it_had_paid() {
        let t = Instant::now();
        let mut s = Spin::default();
        assert!(wake(&mut s, t, 100));
        // wanted before any request: the next two wake-ups do not try
        s.wanted();
        assert!(!wake(&mut s, us(t, 2000), 100));
        assert!(!wake(&mut s, us(t, 3000), 100));
        assert!(wake(&mut s, us(t, 4000), 100));
        // wanted after requests were found: no back-off
        s.found(us(t, 4120));
        s.wanted();
        assert!(wake(&mut s, us(t, 5000), 100));
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
        s.woke(us(t, 10), Duration::ZERO);
        assert_eq!(s.idle(us(t, 10), Duration::ZERO), None);
        assert_eq!(s.learned().slept, None, "nothing learned with no window");
        // armed with a window, then the window set to 0 (a reload): no spin
        s.woke(us(t, 20), MOST);
        s.idle(us(t, 20), MOST);
        s.woke(us(t, 30), MOST);
        assert_eq!(s.idle(us(t, 30), Duration::ZERO), None);
    }

    #[test]
    fn a_try_that_finds_nothing_backs_off_for_twice_as_many_wake_ups_each_time() {
        let mut l = BackOff::default();
        assert!(l.allows(), "the first wake-up tries");
        l.reset();
        assert!(l.allows(), "tries that find requests go on");
        l.missed();
        let skipped = |l: &mut BackOff| (0..200).take_while(|_| !l.allows()).count();
        assert_eq!(skipped(&mut l), 2, "one miss: two wake-ups pass");
        l.missed();
        assert_eq!(skipped(&mut l), 4, "two in a row: four");
        for _ in 0..10 {
            l.missed();
        }
        assert_eq!(skipped(&mut l), 64, "at most 2^6");
        l.reset();
        l.missed();
        assert_eq!(skipped(&mut l), 2, "a find starts the count again");
    }
}
