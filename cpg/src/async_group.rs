//! Driving a [`CorosyncGroup`] from tokio through its fd (corosync-notes §5.3): await
//! readability, dispatch everything pending without blocking, clear the readiness tick.
//! Retried sends wait asynchronously, so no other task waits behind `CS_ERR_TRY_AGAIN`.

use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::{CorosyncGroup, CpgError, Event, Group};

/// Messages dispatched per wake-up of [`AsyncCorosyncGroup::next_event`].
const DISPATCH_BUDGET: usize = 64;

/// A corosync group registered with the tokio reactor. Dropping it deregisters the fd
/// before the group (and so the libqb fd) is finalized.
#[derive(Debug)]
pub struct AsyncCorosyncGroup {
    fd: AsyncFd<CorosyncGroup>,
}

impl AsyncCorosyncGroup {
    /// Registers `group`; must be called inside a tokio runtime.
    pub fn new(group: CorosyncGroup) -> Result<Self, CpgError> {
        // SAFETY: the fd is libqb's connection fd, open and unchanged for as long as the
        // CorosyncGroup lives, and the AsyncFd owns the group, so it outlives the
        // registration; the group never reports another fd.
        let fd =
            unsafe { AsyncFd::register_with_interest(group, Interest::READABLE) }.map_err(|e| {
                CpgError::Io {
                    call: "tokio fd registration",
                    source: std::io::Error::from(e).into(),
                }
            })?;
        Ok(Self { fd })
    }

    /// The group, for `mcast`, `local_nodeid` and the like.
    pub fn group(&mut self) -> &mut CorosyncGroup {
        self.fd.get_mut()
    }

    /// The next event, waiting for corosync without blocking the runtime. Dispatches at
    /// most 64 messages per wake-up and keeps the readiness while more
    /// are pending, so a stream of deliveries never holds the caller for long.
    pub async fn next_event(&mut self) -> Result<Event, CpgError> {
        std::future::poll_fn(|cx| self.poll_next_event(cx)).await
    }

    /// [`Self::next_event`] as a poll: the task is woken when the fd is readable. The fd's
    /// one reader slot holds the waker (a caller that polls it afresh every turn, in a
    /// `select!`, adds and removes no waiter each time, as the `readable` future does).
    pub fn poll_next_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<Event, CpgError>> {
        loop {
            if let Some(e) = self.fd.get_mut().poll_event() {
                return Poll::Ready(Ok(e));
            }
            let mut guard = match self.fd.poll_read_ready_mut(cx) {
                Poll::Ready(Ok(g)) => g,
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(CpgError::Io {
                        call: "tokio readiness",
                        source: e.into(),
                    }));
                }
                Poll::Pending => return Poll::Pending,
            };
            match guard.get_inner_mut().dispatch_some(DISPATCH_BUDGET) {
                Ok(true) => guard.clear_ready(),
                Ok(false) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Sends everything queued, retrying `CS_ERR_TRY_AGAIN` every millisecond without
    /// blocking other tasks.
    pub async fn flush(&mut self) -> Result<(), CpgError> {
        while !self.fd.get_mut().flush()? {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }
}
