//! The plock device's reader: a thread of its own (`dlm_plock`) that sleeps in `poll` on
//! the device, as C's loop does, and performs each request in place under its lockspace's
//! shell (`direct.rs`), so a process locking alone is answered without the daemon's
//! runtime waking at all; requests it cannot perform in place go to their lockspace's task
//! on the daemon's thread.
//!
//! It reads a few records at a time ([`READ_AT_ONCE`]), each performed and answered before
//! the next read, up to [`READ_PER_WAKE`] per wake-up before it polls again, while
//! `plock_rate_limit` and the backlog allow ([`DeviceGate`]). It routes requests through a
//! copy of the registry of its own, taken again only when a lockspace comes or goes. After
//! a wake-up that found requests it may read on instead of sleeping (`spin.rs`), and with
//! one CPU it gives the CPU up once and looks again ([`Spinner::look`]).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::lockspace::Direct;
use super::{DaemonError, EEXIST, LsCommand, lockspace, query};
use crate::kernel::{MiscDevice, Records};

/// fsid → lockspace name, shared by the main task (joins, ends) and the reader.
pub(crate) type Fsids = Arc<std::sync::RwLock<BTreeMap<u32, Arc<str>>>>;

/// What the reader is given: the device, the options a reload changes, our node id and
/// where requests go.
pub(crate) struct ReaderConf {
    pub(crate) device: Arc<MiscDevice>,
    pub(crate) limit: Arc<AtomicI64>,
    pub(crate) spin_us: Arc<AtomicU64>,
    pub(crate) our: u32,
    pub(crate) fsids: Fsids,
    pub(crate) registry: query::Registry,
    /// Rung as lockspaces' groups come and go (`polled.rs`).
    pub(crate) bell: Arc<super::polled::Bell>,
}

/// Starts the reader's thread; it reads the device until it fails, and that error is sent
/// on `failed` (the daemon then ends with it). The thread enters `runtime` so that what a
/// request performed in place arms (a lockspace's timers) reaches the daemon's reactor.
pub(crate) fn spawn(
    conf: ReaderConf,
    runtime: tokio::runtime::Handle,
    failed: mpsc::UnboundedSender<DaemonError>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("dlm_plock".into())
        // libcpg's dispatch of the groups it polls puts ~1 MiB on the stack
        .stack_size(READER_STACK)
        .spawn(move || {
            let _rt = runtime.enter();
            let _ = failed.send(reader(&conf));
        })
        .map(drop)
}

/// The reader's stack: libcpg's dispatch needs 2 MiB (`check_dispatch_stack`).
const READER_STACK: usize = 8 << 20;

/// Reads the plock device until it fails, and dispatches the lockspaces' groups meanwhile
/// (`polled.rs`).
fn reader(conf: &ReaderConf) -> DaemonError {
    let dev = &*conf.device;
    let mut polled = super::polled::Polled::new(conf.bell.clone(), dev.as_fd().as_raw_fd());
    let mut gate = DeviceGate::new();
    // one batch for the reader's life: a read does not clear 2 KiB first
    let mut batch = Records::default();
    let mut routes = Routes::default();
    let mut spinner = Spinner::new(conf.spin_us.clone());
    loop {
        if !gate.open() {
            // the groups are dispatched while the device waits: the backlog that closed
            // it drains through their deliveries
            if let Err(e) = polled.wait(false, gate.closed_for(), &conf.registry) {
                return DaemonError::Io("plock device", e);
            }
            gate.reopen();
            continue;
        }
        match polled.wait(true, None, &conf.registry) {
            Err(e) => return DaemonError::Io("plock device", e),
            Ok(false) => continue,
            Ok(true) => {}
        }
        let mut ctx = ReadCtx {
            limit: conf.limit.load(Ordering::Relaxed),
            our: conf.our,
            fsids: &conf.fsids,
            registry: &conf.registry,
            routes: &mut routes,
        };
        match read_plocks(dev, &mut gate, &mut batch, &mut ctx) {
            Err(e) => return e,
            // a spurious wake-up, or more waiting (read again at once)
            Ok(0) | Ok(READ_PER_WAKE..) => {}
            Ok(_) => {
                if let Err(e) = spinner.after_wake(dev, &mut gate, &mut batch, &mut ctx) {
                    return e;
                }
            }
        }
    }
}

/// Requests read by one system call at most: performed in place and answered before the
/// next read, so the processes answered first run while the next are read and decided (a
/// read of 16, all performed before the next, left the device unread while they were; C
/// reads one per poll).
const READ_AT_ONCE: usize = lockspace::REPLIES_EVERY;

/// Requests read per wake-up at most; then the device is polled again (it is still
/// readable), so a reload's new options and the gate are looked at between shares.
const READ_PER_WAKE: usize = 64;

/// The reader's spin ([`super::spin`]): its window, which a reload may change, what it
/// reads to see whether CPUs are free, and its counters.
struct Spinner {
    state: super::spin::Spin,
    window_us: Arc<AtomicU64>,
    cpus: usize,
    /// `/proc/loadavg`, kept open (none: no spin).
    loadavg: Option<std::fs::File>,
    found: prometheus::IntCounter,
    none: prometheus::IntCounter,
    busy: prometheus::IntCounter,
    turn: prometheus::IntCounter,
    gap_slept: prometheus::IntGauge,
    gap_spun: prometheus::IntGauge,
    window_now: prometheus::IntGauge,
    /// On one CPU: the look's back-off ([`Self::look`]).
    look: super::spin::BackOff,
    /// Looks that found requests, and that found none.
    looks: [prometheus::IntCounter; 2],
    /// The learned window was last published as zero (no spin): not again each wake-up.
    published_off: bool,
}

impl Spinner {
    fn new(window_us: Arc<AtomicU64>) -> Self {
        let m = &crate::metrics::get().plock_spins;
        let learned = &crate::metrics::get().plock_spin_us;
        Self {
            state: super::spin::Spin::default(),
            window_us,
            cpus: super::spin::cpus_allowed(),
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            found: m.with_label_values(&["request"]),
            none: m.with_label_values(&["none"]),
            busy: m.with_label_values(&["busy"]),
            turn: m.with_label_values(&["turn"]),
            gap_slept: learned.with_label_values(&["gap_slept"]),
            gap_spun: learned.with_label_values(&["gap_spun"]),
            window_now: learned.with_label_values(&["window"]),
            look: super::spin::BackOff::default(),
            looks: ["request", "none"]
                .map(|o| crate::metrics::get().plock_looks.with_label_values(&[o])),
            published_off: false,
        }
    }

    /// The longest window now (`plock_spin_us`): zero (never tried, nothing counted) with
    /// one CPU, or while no lockspace is native (every reply then waits for a CPG round
    /// trip, and the next request of its process comes after it, never within a window).
    fn most(&self) -> Duration {
        if self.cpus <= 1 || !lockspace::any_native() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.window_us.load(Ordering::Relaxed))
    }

    /// What the spin has learned, to the metrics.
    fn publish(&self, most: Duration) {
        let learned = self.state.learned();
        let us =
            |d: Option<Duration>| d.map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        self.gap_slept.set(us(learned.slept));
        self.gap_spun.set(us(learned.spun));
        self.window_now.set(us(Some(self.state.window(most))));
    }

    /// Whether a CPU is free for the spin now (one read of `/proc/loadavg`).
    fn cpu_to_spare(&self) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(f) = self.loadavg.as_ref() else {
            return false;
        };
        let mut buf = [0u8; 128];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        let runnable = super::spin::runnable_of(&buf[..n]).unwrap_or(usize::MAX);
        super::spin::cpu_to_spare(runnable, self.cpus)
    }

    /// After a wake-up that found requests: reads on while requests keep coming within
    /// the window and no other thread wants the CPU; where no window is (one CPU, or none
    /// native), the look.
    fn after_wake(
        &mut self,
        dev: &MiscDevice,
        gate: &mut DeviceGate,
        batch: &mut Records,
        ctx: &mut ReadCtx<'_>,
    ) -> Result<(), DaemonError> {
        let most = self.most();
        if most.is_zero() {
            if !std::mem::replace(&mut self.published_off, true) {
                self.publish(most);
            }
            return self.look(dev, gate, batch, ctx);
        }
        self.published_off = false;
        let now = Instant::now();
        self.state.woke(now, most);
        let Some(mut until) = self.state.idle(now, most) else {
            self.publish(most);
            return Ok(());
        };
        let window = self.state.window(most);
        let mut load_at = now;
        while gate.open() {
            // the machine's load at the start and once a window after (the process whose
            // turn it is counts as runnable while it runs: a look every few reads fell in
            // its turn and took it for another task wanting the CPU)
            let t = Instant::now();
            if t >= load_at {
                if !self.cpu_to_spare() {
                    self.busy.inc();
                    self.state.wanted();
                    break;
                }
                load_at = t + window;
            }
            if !self.yield_cpu(window) {
                self.state.wanted();
                break;
            }
            let n = read_plocks(dev, gate, batch, ctx)?;
            let now = Instant::now();
            if n > 0 {
                self.found.inc();
                self.state.found(now);
                match self.state.idle(now, most) {
                    Some(u) => until = u,
                    None => {
                        self.turn.inc();
                        break;
                    }
                }
            } else if now >= until {
                self.none.inc();
                self.state.missed();
                break;
            }
        }
        self.publish(most);
        Ok(())
    }

    /// On one CPU, with some lockspace native, where no spin runs (it would hold the CPU
    /// the process needs): a reply's wake-up lets its process run ahead of the reader
    /// until its next request is queued; so the reader gives up the CPU once and then
    /// looks at the device again instead of sleeping in `poll`, and again after each look
    /// that finds requests, up to [`READ_PER_WAKE`] requests (then the device is polled
    /// again, and a reload's options taken). A look that finds none backs off as a missed
    /// spin window does ([`super::spin::BackOff`]); the next request then wakes the
    /// reader's `poll`.
    fn look(
        &mut self,
        dev: &MiscDevice,
        gate: &mut DeviceGate,
        batch: &mut Records,
        ctx: &mut ReadCtx<'_>,
    ) -> Result<(), DaemonError> {
        if self.cpus > 1 || !lockspace::any_native() || !self.look.allows() {
            return Ok(());
        }
        let mut read = 0;
        while gate.open() && read < READ_PER_WAKE {
            std::thread::yield_now();
            let n = read_plocks(dev, gate, batch, ctx)?;
            if n == 0 {
                self.look.missed();
                self.looks[1].inc();
                break;
            }
            read += n;
            self.look.reset();
            self.looks[0].inc();
        }
        Ok(())
    }

    /// Gives this CPU to any thread waiting for it; `false` (the spin given up until the
    /// next wake-up) when one took it for more than half a window.
    fn yield_cpu(&mut self, window: Duration) -> bool {
        let yielded = Instant::now();
        std::thread::yield_now();
        if yielded.elapsed() > window / 2 {
            self.busy.inc();
            return false;
        }
        true
    }
}

/// When the plock device may be read: `plock_rate_limit` (`limit_plocks`) and the backlog
/// bound ([`lockspace::BACKLOG_MAX`]). While it is closed the kernel queues the requests.
struct DeviceGate {
    rate: crate::rate::RateLimit,
    paused_until: Option<Instant>,
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

    /// How long until it may open again: the rate pause's end, or the next look at the
    /// backlog (every closing sets one of them).
    fn closed_for(&self) -> Option<Duration> {
        self.paused_until
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    fn reopen(&mut self) {
        let now = Instant::now();
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

    /// How many more records (at most `most`, and never past the backlog bound) may be
    /// read at `now` (monotonic ms) under `limit` per second; 0 closes it.
    fn admit(&mut self, limit: i64, now: u64, most: usize) -> usize {
        let room = lockspace::backlog_room().min(most);
        if room == 0 {
            crate::metrics::get().plock_read_pauses.inc();
            self.backlogged = true;
            self.paused_until = Some(Instant::now() + Self::BACKLOG_RECHECK);
            return 0;
        }
        match self.rate.admit_up_to(limit, now, room as u64) {
            Ok(n) => usize::try_from(n).unwrap_or(room),
            Err(resume) => {
                let wait = Duration::from_millis(resume.saturating_sub(now));
                self.paused_until = Some(Instant::now() + wait);
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
    routes: &'a mut Routes,
}

/// The reader's copy of where requests go: fsid → its lockspace's name and task. It is
/// taken again from `fsids` and the registry only when a request's fsid is not in it or
/// its task is gone, so a batch of requests holds no lock that the clients thread takes
/// (a `dlm_tool ls` reads the registry: it waited behind every batch, and behind the
/// whole time slice of a daemon thread preempted in one). The tasks are held weakly: a
/// lockspace task ends when the registry drops its sender, as before.
#[derive(Default)]
struct Routes(BTreeMap<u32, Route>);

struct Route {
    name: Arc<str>,
    /// `None`: the fsid is known but its task is not (ended; its name not yet forgotten).
    task: Option<(mpsc::WeakUnboundedSender<LsCommand>, Arc<Direct>)>,
}

/// Where one request goes: its lockspace's name (for the plock log) and task, when known.
struct Routed {
    name: Option<Arc<str>>,
    task: Option<Task>,
}

/// A live lockspace task: its queue, and its shell for requests performed in place.
struct Task {
    tx: mpsc::UnboundedSender<LsCommand>,
    direct: Arc<Direct>,
}

impl Routes {
    /// Where a request of `fsid` goes; the copy taken again first when it has no live task
    /// for `fsid`.
    fn get(&mut self, fsid: u32, fsids: &Fsids, registry: &query::Registry) -> Routed {
        if let Some(found) = self.live(fsid) {
            return found;
        }
        self.refresh(fsids, registry);
        self.live(fsid).unwrap_or_else(|| Routed {
            name: self.0.get(&fsid).map(|r| r.name.clone()),
            task: None,
        })
    }

    fn live(&self, fsid: u32) -> Option<Routed> {
        let r = self.0.get(&fsid)?;
        let (tx, direct) = r.task.as_ref()?;
        let tx = tx.upgrade()?;
        Some(Routed {
            name: Some(r.name.clone()),
            task: Some(Task {
                tx,
                direct: direct.clone(),
            }),
        })
    }

    fn refresh(&mut self, fsids: &Fsids, registry: &query::Registry) {
        // the registry first, as every other holder of both takes them
        let (Ok(tasks), Ok(fsids)) = (registry.lock(), fsids.read()) else {
            return;
        };
        self.0 = fsids
            .iter()
            .map(|(&fsid, name)| {
                let task = tasks
                    .get(&**name)
                    .map(|h| (h.tx.downgrade(), h.direct.clone()));
                let name = name.clone();
                (fsid, Route { name, task })
            })
            .collect();
    }
}

/// Every request queued on the device, per wakeup (C reads one per poll), up to
/// [`MiscDevice::records_per_call`] per system call and [`READ_PER_WAKE`] in all, while
/// the gate lets. A read that brings fewer records than it had room for emptied the
/// device. Returns how many were read.
fn read_plocks(
    dev: &MiscDevice,
    gate: &mut DeviceGate,
    batch: &mut Records,
    ctx: &mut ReadCtx<'_>,
) -> Result<usize, DaemonError> {
    let eof = || DaemonError::Io("plock device", io::ErrorKind::UnexpectedEof.into());
    let mut total = 0;
    loop {
        // one clock read per read: the gate, the plock log's lines and the requests'
        // latency
        let t0 = crate::clock::Stamp::now();
        let now_ms = t0.ms();
        let room = gate.admit(ctx.limit, now_ms, dev.records_per_call().min(READ_AT_ONCE));
        if room == 0 {
            return Ok(total);
        }
        batch.limit(room);
        match dev.try_read_records(batch) {
            Ok(0) => return Err(eof()),
            Ok(n) => {
                total += n;
                gate.unused(room - n);
                plock_requests(batch, now_ms, t0, ctx, dev);
                // the fake kernel gone: every read from now on brings empty records
                if batch.iter().any(<[u8]>::is_empty) {
                    return Err(eof());
                }
                if n < room {
                    return Ok(total);
                }
                // performed in place, the requests leave no backlog that would close the
                // gate: processes answered at once keep the device full, and the gate and
                // a reload's options are looked at between shares
                if total >= READ_PER_WAKE {
                    return Ok(total);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                gate.unused(room);
                return Ok(total);
            }
            Err(e) => return Err(DaemonError::Io("plock device", e)),
        }
    }
}

/// The records of one read (`process_plocks`), each performed in place, queued for its
/// lockspace's task, or answered at once. A zero-length record is the fake kernel going
/// away: the ones before it are handled, and the reader ends.
fn plock_requests(
    batch: &Records,
    now_ms: u64,
    t0: crate::clock::Stamp,
    ctx: &mut ReadCtx<'_>,
    device: &MiscDevice,
) {
    let mut in_place = InPlace::default();
    for bytes in batch.iter().take_while(|b| !b.is_empty()) {
        plock_request(bytes, now_ms, t0, ctx, device, &mut in_place);
    }
    in_place.finish();
}

/// The lockspace whose requests this read performed in place and did not yet finish
/// (their replies written, their messages sent), and how many.
#[derive(Default)]
struct InPlace(Option<(Task, usize)>);

impl InPlace {
    /// A request of `task`'s lockspace performed in place: another lockspace's before it
    /// are finished first, and this one's every few requests (the processes answered first
    /// run while the rest are decided, as the task's turn writes them).
    fn performed(&mut self, task: Task) {
        if let Some((t, n)) = self.0.as_mut() {
            if Arc::ptr_eq(&t.direct, &task.direct) {
                *n += 1;
                if *n >= lockspace::REPLIES_EVERY {
                    self.finish();
                }
                return;
            }
        }
        self.finish();
        self.0 = Some((task, 1));
    }

    /// Replies written and messages sent; the task woken if it must look again at what
    /// its turn waits for.
    fn finish(&mut self) {
        if let Some((t, _)) = self.0.take() {
            if t.direct.after() {
                let _ = t.tx.send(LsCommand::Wake);
            }
        }
    }
}

/// One record from the plock device: performed in place (`Direct`), to its lockspace's
/// task, or an early error reply. Malformed records are dropped (the kernel never sends
/// them).
fn plock_request(
    bytes: &[u8],
    now_ms: u64,
    t0: crate::clock::Stamp,
    ctx: &mut ReadCtx<'_>,
    device: &MiscDevice,
    in_place: &mut InPlace,
) {
    let mut info = match dlm_proto::kernel::PlockInfo::decode(bytes) {
        Ok(i) => i,
        Err(e) => {
            crate::metrics::get().plock_bad_records.inc();
            tracing::error!("dropped a plock record: {e}");
            return;
        }
    };
    info.nodeid = i32::try_from(ctx.our).unwrap_or(0);
    // requests for a known lockspace are counted by its task
    let Routed { name, task } = ctx.routes.get(info.fsid, ctx.fsids, ctx.registry);
    match &name {
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
    let task = match task {
        Some(t) if t.direct.perform(&info, t0) => return in_place.performed(t),
        t => t,
    };
    let sent = task.map(|t| {
        t.direct.queuing();
        t.tx.send(LsCommand::Plock(info, t0))
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Fsids, query::Registry) {
        let fsids = Fsids::default();
        fsids.write().expect("fsids").insert(7, Arc::from("a"));
        (fsids, query::Registry::default())
    }

    fn register(reg: &query::Registry, name: &str) -> mpsc::UnboundedReceiver<LsCommand> {
        let (tx, rx) = mpsc::unbounded_channel();
        let direct = Arc::default();
        let h = query::LsHandle { tx, direct };
        reg.lock().expect("registry").insert(name.to_owned(), h);
        rx
    }

    #[test]
    fn routes_follow_the_registry_when_a_task_comes_and_goes() {
        let (fsids, reg) = setup();
        let mut routes = Routes::default();
        // an unknown fsid: no name, no task; a known one without a task: its name alone
        let unknown = routes.get(9, &fsids, &reg);
        assert!(unknown.name.is_none() && unknown.task.is_none());
        let known = routes.get(7, &fsids, &reg);
        assert_eq!(known.name.as_deref(), Some("a"));
        assert!(known.task.is_none());
        // its task registered: found (the copy taken again), and requests reach it
        let mut rx = register(&reg, "a");
        let task = routes.get(7, &fsids, &reg).task;
        task.expect("task").tx.send(LsCommand::Poll).expect("sent");
        assert!(matches!(rx.try_recv(), Ok(LsCommand::Poll)));
        // unregistered: the copy's weak sender no longer reaches it, and the task's channel
        // closes, as it did when the registry held its only sender
        reg.lock().expect("registry").remove("a");
        assert!(routes.get(7, &fsids, &reg).task.is_none());
        assert!(matches!(
            rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        // a task of the same name again: the new one
        let mut rx2 = register(&reg, "a");
        let task = routes.get(7, &fsids, &reg).task;
        task.expect("task").tx.send(LsCommand::Leave).expect("sent");
        assert!(matches!(rx2.try_recv(), Ok(LsCommand::Leave)));
    }

    /// A device that stays full is read [`READ_PER_WAKE`] requests at a time, so the gate
    /// and a reload's options are looked at in between (requests
    /// performed in place leave no backlog that would stop the reads); each is answered, in
    /// order.
    #[test]
    fn a_full_device_is_read_a_share_per_wake() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        use std::os::fd::AsRawFd;
        let (ours, kernel) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_NONBLOCK,
        )
        .expect("socketpair");
        let dev = MiscDevice::of_socket(ours);
        let total = 3 * READ_PER_WAKE + 5;
        for i in 0..total {
            let at = u64::try_from(i).expect("small");
            let info = dlm_proto::kernel::PlockInfo {
                nodeid: 0,
                fsid: 99,
                start: at,
                end: at,
                ..super::super::direct::tests::info()
            };
            nix::sys::socket::send(
                kernel.as_raw_fd(),
                &info.encode(),
                nix::sys::socket::MsgFlags::empty(),
            )
            .expect("send");
        }
        let (fsids, reg) = setup();
        let mut routes = Routes::default();
        let mut gate = DeviceGate::new();
        let mut batch = Records::default();
        let mut shares = Vec::new();
        let mut cleared = false;
        while !cleared {
            let mut ctx = ReadCtx {
                limit: 0,
                our: 1,
                fsids: &fsids,
                registry: &reg,
                routes: &mut routes,
            };
            let n = read_plocks(&dev, &mut gate, &mut batch, &mut ctx).expect("read");
            cleared = n < READ_PER_WAKE;
            shares.push(n);
        }
        let r = READ_PER_WAKE;
        assert_eq!(shares, [r, r, r, 5], "read a share per wake until empty");
        // fsid 99 has no lockspace: each answered -EEXIST, in the order read
        let mut buf = [0u8; 128];
        for i in 0..total {
            let n = nix::sys::socket::recv(
                kernel.as_raw_fd(),
                &mut buf,
                nix::sys::socket::MsgFlags::empty(),
            )
            .expect("a reply");
            let reply = dlm_proto::kernel::PlockInfo::decode(&buf[..n]).expect("decodes");
            assert_eq!(
                (reply.start, reply.rv),
                (u64::try_from(i).expect("small"), -EEXIST),
                "{i}"
            );
        }
    }

    #[test]
    fn a_routed_request_takes_no_lock_the_clients_thread_holds() {
        let (fsids, reg) = setup();
        let _rx = register(&reg, "a");
        let mut routes = Routes::default();
        assert!(routes.get(7, &fsids, &reg).task.is_some());
        // the registry held elsewhere (a query), the cached route is still served
        let held = reg.lock().expect("registry");
        let (done_tx, done) = std::sync::mpsc::channel();
        let (fsids2, reg2) = (fsids.clone(), reg.clone());
        std::thread::spawn(move || {
            let found = routes.get(7, &fsids2, &reg2).task.is_some();
            let _ = done_tx.send(found);
        });
        let found = done.recv_timeout(Duration::from_secs(5));
        drop(held);
        assert_eq!(found, Ok(true), "the route waited for the registry's lock");
    }
}
