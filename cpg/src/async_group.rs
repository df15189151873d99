//! Driving a [`CorosyncGroup`] from tokio through its fd (corosync-notes §5.3): await
//! readability, dispatch everything pending without blocking, clear the readiness tick.
//! Retried sends wait asynchronously, so no other task waits behind `CS_ERR_TRY_AGAIN`.

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
        loop {
            if let Some(e) = self.fd.get_mut().poll_event() {
                return Ok(e);
            }
            let mut guard = self.fd.readable_mut().await.map_err(|e| CpgError::Io {
                call: "tokio readiness",
                source: e.into(),
            })?;
            if guard.get_inner_mut().dispatch_some(DISPATCH_BUDGET)? {
                guard.clear_ready();
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
