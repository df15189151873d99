//! The lockspace groups the plock device's reader dispatches on its thread, beside the
//! device, as C's one loop polls the device and every group (`process_cpg_lockspace`): a
//! delivery wakes the reader alone, where a group on the daemon's runtime woke a second
//! thread for every CPG round trip. Each group's events are handled under its lockspace's
//! shell (`Direct::dispatch`), the turn ending as a request performed in place ends.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::LsCommand;
use super::direct::{Direct, Dispatched};
use super::query;

/// Rung when a lockspace's shell comes or goes, so that the reader's `poll` takes the set
/// of groups again at once (a joined lockspace's deliveries must not wait for the device).
#[derive(Debug)]
pub(crate) struct Bell {
    tx: UnixDatagram,
    rx: UnixDatagram,
}

impl Bell {
    pub(crate) fn new() -> io::Result<Self> {
        let (tx, rx) = UnixDatagram::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(Self { tx, rx })
    }

    /// Wakes the reader; a full socket has rung already.
    pub(crate) fn ring(&self) {
        let _ = self.tx.send(&[1]);
    }

    /// Takes every ring out, so the next `poll` sleeps again.
    fn quiet(&self) {
        let mut b = [0u8; 16];
        while self.rx.recv(&mut b).is_ok() {}
    }
}

/// A group the reader polls: its lockspace's shell, and its task's queue (to wake it).
struct Entry {
    direct: Arc<Direct>,
    task: mpsc::WeakUnboundedSender<LsCommand>,
}

/// The reader's `poll` set: the device, the bell, then each group (`entries` in order).
pub(crate) struct Polled {
    bell: Arc<Bell>,
    fds: Vec<libc::pollfd>,
    entries: Vec<Entry>,
}

const DEVICE: usize = 0;
const BELL: usize = 1;
const GROUPS: usize = 2;

impl Polled {
    pub(crate) fn new(bell: Arc<Bell>, device: RawFd) -> Self {
        let bell_fd = bell.rx.as_fd().as_raw_fd();
        Self {
            bell,
            fds: vec![pollfd(device), pollfd(bell_fd)],
            entries: Vec::new(),
        }
    }

    /// Sleeps until the device (when `device`) or a group has something, or `timeout`
    /// passes; handles the groups that have. `Ok(true)`: the device is readable.
    pub(crate) fn wait(
        &mut self,
        device: bool,
        timeout: Option<Duration>,
        registry: &query::Registry,
    ) -> io::Result<bool> {
        self.fds[DEVICE].events = if device { libc::POLLIN } else { 0 };
        let ms = timeout.map_or(-1, |t| {
            i32::try_from(t.as_millis().saturating_add(1)).unwrap_or(i32::MAX)
        });
        let n = self.fds.len() as libc::nfds_t;
        // SAFETY: `fds` is a live array of `n` pollfds for the call; every fd in it is one
        // of ours (the device's, the bell's) or a group's taken from a live shell. A group
        // closed since is never read here: its readiness only sends us to its shell, which
        // says it is gone.
        let rc = unsafe { libc::poll(self.fds.as_mut_ptr(), n, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(false),
                _ => Err(e),
            };
        }
        let mut stale = self.fds[BELL].revents != 0;
        if stale {
            self.bell.quiet();
        }
        for i in GROUPS..self.fds.len() {
            let revents = self.fds[i].revents;
            if revents != 0 {
                stale |= self.dispatch(i - GROUPS, revents);
            }
        }
        if stale {
            self.refresh(registry);
        }
        Ok(device && self.fds[DEVICE].revents != 0)
    }

    /// A group with something: its deliveries dispatched and handled; `true` when the set
    /// must be taken again (the shell gone, the group failed).
    fn dispatch(&self, at: usize, revents: libc::c_short) -> bool {
        let e = &self.entries[at];
        let hangup = revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
        match e.direct.dispatch(hangup) {
            Dispatched::Handled { wake: false } => false,
            Dispatched::Handled { wake: true } => {
                wake(&e.task);
                false
            }
            Dispatched::Failed => {
                wake(&e.task);
                true
            }
            Dispatched::Gone => true,
        }
    }

    /// The groups of the lockspaces whose shells are up now.
    fn refresh(&mut self, registry: &query::Registry) {
        let Ok(tasks) = registry.lock() else {
            return;
        };
        self.fds.truncate(GROUPS);
        self.entries.clear();
        for h in tasks.values() {
            let Some(fd) = h.direct.polled_fd() else {
                continue;
            };
            self.fds.push(pollfd(fd));
            self.entries.push(Entry {
                direct: h.direct.clone(),
                task: h.tx.downgrade(),
            });
        }
    }
}

/// `fd` watched for reading.
fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn wake(task: &mpsc::WeakUnboundedSender<LsCommand>) {
    if let Some(tx) = task.upgrade() {
        let _ = tx.send(LsCommand::Wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with(
        direct: &Arc<Direct>,
    ) -> (query::Registry, mpsc::UnboundedReceiver<LsCommand>) {
        let reg = query::Registry::default();
        let (tx, rx) = mpsc::unbounded_channel();
        let h = query::LsHandle {
            tx,
            direct: direct.clone(),
        };
        reg.lock().expect("registry").insert("a".to_owned(), h);
        (reg, rx)
    }

    /// A group comes into the set when its shell's bell rings, and leaves it when the
    /// shell goes: the reader's `poll`, asleep on the device alone, wakes for each.
    #[test]
    fn the_bell_takes_the_set_again() {
        let (dev, _kernel) = UnixDatagram::pair().expect("device");
        let (group, _corosync) = UnixDatagram::pair().expect("group");
        let bell = Arc::new(Bell::new().expect("bell"));
        let direct = Arc::new(Direct::new(Some(bell.clone())));
        let (reg, _rx) = registry_with(&direct);
        let mut p = Polled::new(bell, dev.as_raw_fd());
        direct.poll_as_if_put(group.as_raw_fd());
        // the device stays quiet: only the bell ends these waits before their timeout
        let long = Some(Duration::from_secs(10));
        assert!(!p.wait(true, long, &reg).expect("wait"));
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.fds[GROUPS].fd, group.as_raw_fd());
        assert!(direct.take().is_none());
        assert!(!p.wait(true, long, &reg).expect("wait"));
        assert!(p.entries.is_empty() && p.fds.len() == GROUPS);
    }

    /// While the device's gate is closed the device is not looked at (its requests stay
    /// queued in the kernel), but the wait still ends at its timeout.
    #[test]
    fn a_closed_gate_leaves_the_device_unread() {
        let (dev, kernel) = UnixDatagram::pair().expect("device");
        kernel.send(b"request").expect("send");
        let bell = Arc::new(Bell::new().expect("bell"));
        let mut p = Polled::new(bell, dev.as_raw_fd());
        let reg = query::Registry::default();
        let short = Some(Duration::from_millis(5));
        assert!(!p.wait(false, short, &reg).expect("wait"));
        assert!(p.wait(true, short, &reg).expect("wait"));
        let mut b = [0u8; 16];
        assert_eq!(dev.recv(&mut b).expect("still queued"), 7);
    }
}
