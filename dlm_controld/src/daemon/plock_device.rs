//! The plock device's reader: its own task, so that a request's hand-off to its lockspace's
//! task stays on the worker thread that read it (the main future runs on `block_on`'s
//! thread, and every hand-off from there woke a worker through a futex).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::{DaemonError, EEXIST, LsCommand, lockspace, query};
use crate::kernel::MiscDevice;

/// fsid → lockspace name, shared by the main task (joins, ends) and the reader.
pub(crate) type Fsids = Arc<std::sync::RwLock<BTreeMap<u32, Arc<str>>>>;

/// Reads the plock device until it fails (the daemon then ends with the error).
pub(crate) async fn reader(
    device: Arc<MiscDevice>,
    limit: Arc<AtomicI64>,
    our: u32,
    fsids: Fsids,
    registry: query::Registry,
) -> DaemonError {
    // SAFETY: the Arc keeps the device (and its descriptor) open for as long as the
    // AsyncFd that owns this clone of it.
    let fd = match unsafe {
        AsyncFd::register_with_interest(PlockFd(device), tokio::io::Interest::READABLE)
    } {
        Ok(fd) => fd,
        Err(e) => return DaemonError::Io("plock device registration", e.into()),
    };
    let mut gate = DeviceGate::new();
    loop {
        if !gate.open() {
            gate.closed().await;
            gate.reopen();
            continue;
        }
        let mut guard = match fd.readable().await {
            Ok(g) => g,
            Err(e) => return DaemonError::Io("plock device", e),
        };
        let limit = limit.load(Ordering::Relaxed);
        if let Err(e) = read_plocks(&mut guard, &mut gate, limit, our, &fsids, &registry) {
            return e;
        }
    }
}

struct PlockFd(Arc<MiscDevice>);

impl AsRawFd for PlockFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

/// When the plock device may be read: `plock_rate_limit` (`limit_plocks`) and the backlog
/// bound ([`lockspace::BACKLOG_MAX`]). While it is closed the kernel queues the requests.
struct DeviceGate {
    rate: crate::rate::RateLimit,
    paused_until: Option<tokio::time::Instant>,
    backlogged: bool,
}

impl DeviceGate {
    fn new() -> Self {
        Self {
            rate: crate::rate::RateLimit::default(),
            paused_until: None,
            backlogged: false,
        }
    }

    fn open(&self) -> bool {
        self.paused_until.is_none() && !self.backlogged
    }

    /// A look at the backlog again this long after it was over the bound.
    const BACKLOG_RECHECK: Duration = Duration::from_millis(10);

    /// Until it may open again: the rate pause's end, or the next look at the backlog (a
    /// fixed instant, so other events of the loop do not postpone it).
    async fn closed(&self) {
        match self.paused_until {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    }

    fn reopen(&mut self) {
        let now = tokio::time::Instant::now();
        if self.paused_until.is_some_and(|t| now >= t) {
            self.paused_until = None;
        }
        if self.backlogged {
            self.backlogged = lockspace::over_backlog();
            if self.backlogged {
                self.paused_until = Some(now + Self::BACKLOG_RECHECK);
            }
        }
    }

    /// One more record may be read at `now` (monotonic ms) under `limit` per second;
    /// otherwise it closes.
    fn admit(&mut self, limit: i64, now: u64) -> bool {
        if let Err(resume) = self.rate.admit(limit, now) {
            let wait = Duration::from_millis(resume.saturating_sub(now));
            self.paused_until = Some(tokio::time::Instant::now() + wait);
            return false;
        }
        if lockspace::over_backlog() {
            crate::metrics::get().plock_read_pauses.inc();
            self.backlogged = true;
            self.paused_until = Some(tokio::time::Instant::now() + Self::BACKLOG_RECHECK);
            return false;
        }
        true
    }
}

/// Every request queued on the device, per wakeup (C reads one per poll), while the gate
/// lets; readiness is kept for after a pause.
fn read_plocks(
    guard: &mut tokio::io::unix::AsyncFdReadyGuard<'_, PlockFd>,
    gate: &mut DeviceGate,
    limit: i64,
    our: u32,
    fsids: &Fsids,
    registry: &query::Registry,
) -> Result<(), DaemonError> {
    loop {
        // one clock read per record: the gate and the plock log's line
        let now_ms = crate::clock::monotonic_ms();
        if !gate.admit(limit, now_ms) {
            return Ok(());
        }
        let mut buf = [0u8; 128];
        let dev = &guard.get_inner().0;
        match dev.try_read_record(&mut buf) {
            Ok(0) => {
                let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
                return Err(DaemonError::Io("plock device", eof));
            }
            Ok(n) => plock_request(&buf[..n], now_ms, our, fsids, registry, dev),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                guard.clear_ready();
                return Ok(());
            }
            Err(e) => return Err(DaemonError::Io("plock device", e)),
        }
    }
}

/// One record from the plock device (`process_plocks`): to its lockspace's task, or an
/// early error reply. Malformed records are dropped (the kernel never sends them).
fn plock_request(
    bytes: &[u8],
    now_ms: u64,
    our: u32,
    fsids: &Fsids,
    registry: &query::Registry,
    device: &MiscDevice,
) {
    let (Ok(lockspaces), Ok(fsids)) = (registry.lock(), fsids.read()) else {
        return;
    };
    let mut info = match dlm_proto::kernel::PlockInfo::decode(bytes) {
        Ok(i) => i,
        Err(e) => {
            crate::metrics::get().plock_bad_records.inc();
            tracing::error!("dropped a plock record: {e}");
            return;
        }
    };
    info.nodeid = i32::try_from(our).unwrap_or(0);
    // requests for a known lockspace are counted by its task
    let name = fsids.get(&info.fsid);
    match name {
        Some(n) => crate::log::plock_op(now_ms / 1000, n, crate::log::PlockLine::Read, &info),
        // a plock-log line, as C: a kernel request, not bad input (and no syslog flood)
        None => {
            crate::metrics::get()
                .plock_requests
                .with_label_values(&[
                    "unknown",
                    crate::metrics::OPS[crate::metrics::op_index(info.op)],
                ])
                .inc();
            tracing::debug!(
                target: crate::log::PLOCK_TARGET,
                fsid = info.fsid,
                "process_plocks: no ls id {:x}",
                info.fsid
            );
        }
    }
    let task = name.and_then(|n| lockspaces.get(&**n));
    let sent = task.map(|tx| tx.send(LsCommand::Plock(info, std::time::Instant::now())));
    if matches!(sent, Some(Ok(()))) {
        // out of the backlog again when its task takes it (`Shell::take`)
        crate::metrics::get().plock_backlog.inc();
    } else {
        // no lockspace with that fsid (C crashes here), or its task has just ended
        answer_gone(device, &info);
    }
}

/// The reply to a request whose lockspace is gone: -EEXIST, as C answers for an unknown
/// fsid (a CLOSE has none).
pub(crate) fn answer_gone(device: &MiscDevice, info: &dlm_proto::kernel::PlockInfo) {
    if info.flags.close() {
        return;
    }
    let reply = dlm_proto::kernel::PlockInfo {
        rv: -EEXIST,
        ..*info
    };
    if let Err(e) = device.write_record(&reply.encode()) {
        tracing::error!("plock reply: {e}");
    }
}
