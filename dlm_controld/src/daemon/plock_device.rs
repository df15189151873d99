//! The plock device's reader: its own task beside the lockspace tasks on the daemon's one
//! thread, so a request's hand-off to its lockspace's task is a wake-up in the same
//! scheduler, never a futex.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::{DaemonError, EEXIST, LsCommand, lockspace, query};
use crate::kernel::{MiscDevice, READ_AT_ONCE, Records};

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
    // one batch for the reader's life: a read does not clear 2 KiB first
    let mut batch = Records::default();
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
        let ctx = ReadCtx {
            limit,
            our,
            fsids: &fsids,
            registry: &registry,
        };
        if let Err(e) = read_plocks(&mut guard, &mut gate, &mut batch, &ctx) {
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

    /// How many more records (at most [`READ_AT_ONCE`], and never past the backlog bound)
    /// may be read at `now` (monotonic ms) under `limit` per second; 0 closes it.
    fn admit(&mut self, limit: i64, now: u64) -> usize {
        let room = lockspace::backlog_room().min(READ_AT_ONCE);
        if room == 0 {
            crate::metrics::get().plock_read_pauses.inc();
            self.backlogged = true;
            self.paused_until = Some(tokio::time::Instant::now() + Self::BACKLOG_RECHECK);
            return 0;
        }
        match self.rate.admit_up_to(limit, now, room as u64) {
            Ok(n) => usize::try_from(n).unwrap_or(READ_AT_ONCE),
            Err(resume) => {
                let wait = Duration::from_millis(resume.saturating_sub(now));
                self.paused_until = Some(tokio::time::Instant::now() + wait);
                0
            }
        }
    }

    /// Of the records admitted, `n` were not there to read.
    fn unused(&mut self, n: usize) {
        self.rate.unused(n as u64);
    }
}

/// What the reader hands each read: the rate limit, our node id, where requests go.
struct ReadCtx<'a> {
    limit: i64,
    our: u32,
    fsids: &'a Fsids,
    registry: &'a query::Registry,
}

/// Every request queued on the device, per wakeup (C reads one per poll), up to
/// [`READ_AT_ONCE`] per system call, while the gate lets; readiness is kept for after a
/// pause. A read that brings fewer records than it had room for emptied the device.
fn read_plocks(
    guard: &mut tokio::io::unix::AsyncFdReadyGuard<'_, PlockFd>,
    gate: &mut DeviceGate,
    batch: &mut Records,
    ctx: &ReadCtx<'_>,
) -> Result<(), DaemonError> {
    let eof = || DaemonError::Io("plock device", io::ErrorKind::UnexpectedEof.into());
    loop {
        // one clock read per read: the gate and the plock log's lines
        let now_ms = crate::clock::monotonic_ms();
        let room = gate.admit(ctx.limit, now_ms);
        if room == 0 {
            return Ok(());
        }
        batch.limit(room);
        let dev = &guard.get_inner().0;
        match dev.try_read_records(batch) {
            Ok(0) => return Err(eof()),
            Ok(n) => {
                gate.unused(room - n);
                plock_requests(batch, now_ms, ctx, dev);
                // the fake kernel gone: every read from now on brings empty records
                if batch.iter().any(<[u8]>::is_empty) {
                    return Err(eof());
                }
                if n < room {
                    guard.clear_ready();
                    return Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                gate.unused(room);
                guard.clear_ready();
                return Ok(());
            }
            Err(e) => return Err(DaemonError::Io("plock device", e)),
        }
    }
}

/// The records of one read (`process_plocks`), each to its lockspace's task or answered
/// at once. A zero-length record is the fake kernel going away: the ones before it are
/// handled, and the reader ends.
fn plock_requests(batch: &Records, now_ms: u64, ctx: &ReadCtx<'_>, device: &MiscDevice) {
    let our = ctx.our;
    let (Ok(lockspaces), Ok(fsids)) = (ctx.registry.lock(), ctx.fsids.read()) else {
        return;
    };
    // one read, one time read for the latency of all it brought
    let t0 = std::time::Instant::now();
    for bytes in batch.iter().take_while(|b| !b.is_empty()) {
        plock_request(bytes, now_ms, t0, our, &fsids, &lockspaces, device);
    }
}

/// One record from the plock device: to its lockspace's task, or an early error reply.
/// Malformed records are dropped (the kernel never sends them).
fn plock_request(
    bytes: &[u8],
    now_ms: u64,
    t0: std::time::Instant,
    our: u32,
    fsids: &BTreeMap<u32, Arc<str>>,
    lockspaces: &query::Tasks,
    device: &MiscDevice,
) {
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
    let sent = task.map(|tx| tx.send(LsCommand::Plock(info, t0)));
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
    device.write_records(&[reply.encode()], |e| tracing::error!("plock reply: {e}"));
}
