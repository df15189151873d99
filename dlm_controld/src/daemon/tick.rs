//! A periodic tick from a kernel timer (`timerfd`), for the daemon thread's loop.
//!
//! A tokio timer makes the runtime park with a timeout: every `epoll_wait` then arms a
//! high-resolution timer in the kernel and cancels it on the wake-up, once per plock
//! request or delivery when the daemon is busy (in a virtual machine each arming is an
//! exit to the hypervisor). The daemon thread's only timers that are always pending are
//! the once-a-second tick and the watchdog; as periodic `timerfd`s the kernel re-arms
//! them once per period, and the thread parks with no timeout, as C's `poll(-1)` loop.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Ticks every `period`, the first at once (as `tokio::time::interval`); ticks missed while
/// the loop was busy are one tick, not a burst.
pub(super) struct Tick(AsyncFd<Fd>);

impl std::fmt::Debug for Tick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tick")
    }
}

impl Tick {
    /// A monotonic timer of `period` (at least a microsecond), registered with the runtime.
    pub(super) fn every(period: Duration) -> std::io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        let period = TimeSpec::from_duration(period.max(Duration::from_micros(1)));
        // the first expiry a nanosecond from now: the first tick comes at once
        let first = TimeSpec::from_duration(Duration::from_nanos(1));
        fd.set(
            Expiration::IntervalDelayed(first, period),
            TimerSetTimeFlags::empty(),
        )?;
        // SAFETY: `Fd` owns the timer's descriptor; it stays open and the same for as long
        // as the AsyncFd that owns the `Fd`.
        let fd = unsafe { AsyncFd::register_with_interest(Fd(fd), tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(Self(fd))
    }

    /// The next tick: returns once the timer has expired since the last call.
    pub(super) async fn tick(&mut self) {
        loop {
            let Ok(mut guard) = self.0.readable_mut().await else {
                // the runtime is shutting down: no tick comes again
                return std::future::pending().await;
            };
            let mut count = [0u8; 8];
            match nix::unistd::read(guard.get_inner().0.as_fd(), &mut count) {
                Ok(_) => return,
                Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => {
                    tracing::error!("tick timer: {e}");
                    return std::future::pending().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn ticks_at_once_then_every_period_and_missed_ticks_are_one() {
        let period = Duration::from_millis(200);
        let mut t = Tick::every(period).expect("timerfd");
        let t0 = std::time::Instant::now();
        t.tick().await;
        assert!(t0.elapsed() < period * 3 / 4, "the first tick at once");
        t.tick().await;
        assert!(t0.elapsed() >= period, "the second a period later");
        // five periods pass without a look: they are one tick, not a burst of five
        std::thread::sleep(period * 5);
        t.tick().await;
        let again = tokio::time::timeout(Duration::ZERO, t.tick()).await;
        assert!(
            again.is_err(),
            "a second tick at once: the missed ones burst"
        );
    }
}
