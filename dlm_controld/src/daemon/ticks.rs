//! The main loop's clocks — its one-second tick and the watchdog — kept on a thread of
//! their own, which sends each when it is due. The daemon's thread then sleeps in its
//! reactor with no timer pending, as C's loop polls with no timeout: a sleep with a
//! timeout arms and cancels a high-resolution timer, twice per C-compatible request
//! (docs/BENCHMARKS.md, "Settings chosen by measurement"). The main loop still acts on
//! each tick itself, so a loop that stops turning feeds no watchdog.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::DaemonError;

/// The period of the main loop's tick (quorum and cfg dispatched, the daemon core's timeouts).
const SECOND: Duration = Duration::from_secs(1);

/// What the tick thread sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tick {
    /// A second has passed.
    Second,
    /// The watchdog is due (`WATCHDOG=1`).
    Watchdog,
}

/// When each tick is next due; a tick missed while the thread slept late is sent once, not
/// caught up.
#[derive(Debug)]
struct Due {
    second: Instant,
    watchdog: Option<(Instant, Duration)>,
}

impl Due {
    /// Both due at once, as tokio's intervals were.
    fn new(start: Instant, watchdog: Option<Duration>) -> Self {
        Self {
            second: start,
            watchdog: watchdog.map(|every| (start, every)),
        }
    }

    /// The ticks due at `now`, each moved on by its period (from `now` when it is more
    /// than a period late), and when the thread should next wake.
    fn take(&mut self, now: Instant) -> (Vec<Tick>, Instant) {
        let mut due = Vec::new();
        if now >= self.second {
            due.push(Tick::Second);
            self.second = next(self.second, SECOND, now);
        }
        let mut wake = self.second;
        if let Some((at, every)) = &mut self.watchdog {
            if now >= *at {
                due.push(Tick::Watchdog);
                *at = next(*at, *every, now);
            }
            wake = wake.min(*at);
        }
        (due, wake)
    }
}

/// The next time of a tick due at `at` every `every`, never in the past of `now`.
fn next(at: Instant, every: Duration, now: Instant) -> Instant {
    let n = at + every;
    if n > now { n } else { now + every }
}

/// Starts the tick thread (`dlm_tick`); it ends when the receiver is dropped. A tick the
/// main loop has not taken yet is not sent again (the channel holds two).
pub(crate) fn spawn(watchdog: Option<Duration>) -> Result<mpsc::Receiver<Tick>, DaemonError> {
    let (tx, rx) = mpsc::channel(2);
    std::thread::Builder::new()
        .name("dlm_tick".into())
        .spawn(move || run(&tx, watchdog))
        .map_err(|e| DaemonError::Io("dlm_tick thread", e))?;
    Ok(rx)
}

fn run(tx: &mpsc::Sender<Tick>, watchdog: Option<Duration>) {
    let mut due = Due::new(Instant::now(), watchdog);
    loop {
        let (ticks, wake) = due.take(Instant::now());
        for t in ticks {
            if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(t) {
                return;
            }
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_at_once_then_each_on_its_period() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut d = Due::new(t0, Some(Duration::from_millis(400)));
        assert_eq!(d.take(t0), (vec![Tick::Second, Tick::Watchdog], ms(400)));
        assert_eq!(d.take(ms(400)), (vec![Tick::Watchdog], ms(800)));
        assert_eq!(d.take(ms(800)), (vec![Tick::Watchdog], ms(1000)));
        assert_eq!(d.take(ms(1000)), (vec![Tick::Second], ms(1200)));
        assert_eq!(d.take(ms(1100)), (vec![], ms(1200)), "nothing due early");
    }

    #[test]
    fn a_late_wake_sends_each_tick_once_and_starts_again_from_now() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut d = Due::new(t0, None);
        assert_eq!(d.take(t0), (vec![Tick::Second], ms(1000)));
        // asleep for five seconds: one tick, not five
        assert_eq!(d.take(ms(6000)), (vec![Tick::Second], ms(7000)));
        assert_eq!(d.take(ms(7000)), (vec![Tick::Second], ms(8000)));
    }

    #[tokio::test]
    async fn the_thread_sends_both_ticks() {
        let mut rx = spawn(Some(Duration::from_millis(5))).expect("thread");
        let mut seen = Vec::new();
        while seen.len() < 3 {
            seen.push(rx.recv().await.expect("a tick"));
        }
        assert!(seen.contains(&Tick::Second), "{seen:?}");
        assert!(seen.contains(&Tick::Watchdog), "{seen:?}");
    }
}
