//! A lockspace's shell shared by its task and the plock device's reader, so that the reader
//! performs a request in place — decided, its reply written, its messages sent — instead of
//! handing it to the task: one turn from read to reply, as C's loop has it (a hand-off
//! costs a channel and a task switch per request). The
//! reader has a thread of its own (`plock_device.rs`): a request decided locally never
//! wakes the daemon's runtime. The task holds the lock for each step of its turn, never
//! across a wait, and the reader for one request or one turn's end, so either waits for
//! the other at most one step.
//!
//! A lockspace's requests keep their order: the reader performs none in place while one
//! it queued for the task is still there (`queued`, taken down only once the task has
//! performed the request). Before the task has joined and once it ends there is no shell
//! here: requests are queued, and at the end answered as for a lockspace gone.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dlm_proto::kernel::PlockInfo;

use super::lockspace::{LsCommand, Shell};
use super::polled::Bell;
use crate::clock::Stamp;

/// See the module's comment.
pub(crate) struct Direct {
    shell: Mutex<Option<Shell>>,
    /// Requests sent to the task's queue and not yet performed by it.
    queued: AtomicUsize,
    /// The fd of the shell's group while the reader dispatches it (`polled.rs`), or
    /// [`Self::NOT_POLLED`].
    polled: AtomicI32,
    /// The reader's bell, rung as the shell comes and goes (none: no reader).
    bell: Option<Arc<Bell>>,
}

impl Default for Direct {
    fn default() -> Self {
        Self::new(None)
    }
}

/// What [`Direct::dispatch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dispatched {
    /// Events handled; `wake`: the task must look again at what its turn waits for.
    Handled { wake: bool },
    /// The group failed: the task is told and ends; the reader polls it no more.
    Failed,
    /// No shell here (the task has it back): the reader polls it no more.
    Gone,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Direct {
    const NOT_POLLED: RawFd = -1;

    pub(crate) fn new(bell: Option<Arc<Bell>>) -> Self {
        Self {
            shell: Mutex::default(),
            queued: AtomicUsize::new(0),
            polled: AtomicI32::new(Self::NOT_POLLED),
            bell,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Shell>> {
        // a panic aborts the daemon (panic = "abort"): a poisoned lock is only a test's
        self.shell.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The task's shell, once its group has joined.
    /// The task's shell, once its group has joined; a group left to the reader is polled
    /// from now on.
    pub(super) fn put(&self, shell: Shell) {
        let fd = shell.polled_fd();
        *self.lock() = Some(shell);
        if let Some(fd) = fd {
            self.publish_polled(fd);
        }
    }

    /// The reader is told to poll `fd` from now on (when there is a reader).
    fn publish_polled(&self, fd: RawFd) {
        if let Some(bell) = &self.bell {
            self.polled.store(fd, Ordering::Release);
            bell.ring();
        }
    }

    /// The shell back to the task at its end; the reader polls its group no more.
    pub(super) fn take(&self) -> Option<Shell> {
        self.unpoll();
        self.lock().take()
    }

    fn unpoll(&self) {
        if self.polled.swap(Self::NOT_POLLED, Ordering::AcqRel) != Self::NOT_POLLED {
            if let Some(bell) = &self.bell {
                bell.ring();
            }
        }
    }

    /// As [`Self::put`] does for a shell's polled group, without a shell (no shell is
    /// built in a unit test).
    #[cfg(test)]
    pub(super) fn poll_as_if_put(&self, fd: RawFd) {
        self.publish_polled(fd);
    }

    /// The fd of the group the reader dispatches, while it does.
    pub(super) fn polled_fd(&self) -> Option<RawFd> {
        let fd = self.polled.load(Ordering::Acquire);
        (fd != Self::NOT_POLLED).then_some(fd)
    }

    /// The reader found the group's fd ready (`hangup`: closed or failed): its deliveries
    /// dispatched and handled under the shell, as the task's turn handles an event.
    pub(super) fn dispatch(&self, hangup: bool) -> Dispatched {
        let mut guard = self.lock();
        let Some(ls) = guard.as_mut() else {
            return Dispatched::Gone;
        };
        let name = ls.name().clone();
        match crate::log::named(name, || ls.dispatch_polled(hangup)) {
            Some(wake) => Dispatched::Handled { wake },
            None => {
                drop(guard);
                self.unpoll();
                Dispatched::Failed
            }
        }
    }

    /// `f` on the shell (the task's steps; `None` before [`Self::put`] and after
    /// [`Self::take`]).
    pub(super) fn with<T>(&self, f: impl FnOnce(&mut Shell) -> T) -> Option<T> {
        self.lock().as_mut().map(f)
    }

    /// The task performs a command from its queue; a request leaves the count of those
    /// queued only once performed.
    pub(super) fn command(&self, cmd: LsCommand, leave: &mut super::lockspace::LeaveRetry) {
        let request = matches!(cmd, LsCommand::Plock(..));
        self.with(|ls| ls.command(cmd, leave));
        if request {
            self.queued.fetch_sub(1, Ordering::Release);
        }
    }

    /// The reader is about to queue a request for the task.
    pub(super) fn queuing(&self) {
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    /// The reader performs `info` (read at `t0`) in place (after the task's step under way,
    /// if one is), unless a request it queued earlier still waits for the task or the task
    /// is not running. `false`: queue it instead. Its reply is written
    /// at the next [`Self::after`].
    pub(super) fn perform(&self, info: &PlockInfo, t0: Stamp) -> bool {
        if self.queued.load(Ordering::Acquire) != 0 {
            return false;
        }
        let mut guard = self.lock();
        let Some(ls) = guard.as_mut().filter(|ls| !ls.is_left()) else {
            return false;
        };
        // into the backlog as a queued request would be; `plock` takes it out again
        crate::metrics::get().plock_backlog.inc();
        let name = ls.name().clone();
        crate::log::named(name, || ls.plock(info, t0));
        true
    }

    /// After the requests performed in place (every few, and at the end of a read): their
    /// replies written, their messages sent. `true` when the task must be woken
    /// ([`LsCommand::Wake`]).
    pub(super) fn after(&self) -> bool {
        let mut guard = self.lock();
        let Some(ls) = guard.as_mut() else {
            return false;
        };
        let name = ls.name().clone();
        crate::log::named(name, || ls.after_direct())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A non-blocking write lock of owner 1 on byte 0 of file 1 of lockspace 7 (the
    /// reader's tests vary it).
    pub(in crate::daemon) fn info() -> PlockInfo {
        PlockInfo {
            version: dlm_proto::kernel::PLOCK_VERSION,
            op: dlm_proto::kernel::PlockOp::LOCK,
            ex: true,
            wait: false,
            flags: dlm_proto::kernel::PlockFlags(0),
            pid: 1,
            nodeid: 1,
            rv: 0,
            fsid: 7,
            number: 1,
            start: 0,
            end: 0,
            owner: 1,
        }
    }

    /// Without a shell (the task joining, or ended) nothing is performed in place, and
    /// nothing is counted into the backlog.
    #[test]
    fn no_shell_no_request_in_place() {
        let d = Direct::default();
        let before = crate::metrics::get().plock_backlog.get();
        assert!(!d.perform(&info(), Stamp::now()));
        assert!(!d.after());
        assert_eq!(crate::metrics::get().plock_backlog.get(), before);
        assert!(d.with(|_| ()).is_none());
        assert!(d.take().is_none());
    }

    /// The count of queued requests goes up as the reader queues and down only as the
    /// task performs one, never for its other commands.
    #[test]
    fn queued_counts_requests_until_performed() {
        let d = Direct::default();
        d.queuing();
        d.queuing();
        let mut leave = super::super::lockspace::LeaveRetry::default();
        d.command(LsCommand::Wake, &mut leave);
        assert_eq!(d.queued.load(Ordering::Relaxed), 2);
        d.command(LsCommand::Plock(info(), Stamp::now()), &mut leave);
        assert_eq!(d.queued.load(Ordering::Relaxed), 1);
        assert!(!d.perform(&info(), Stamp::now()), "one still queued");
    }
}
