//! The main task, in mini-redis's manner: the daemon's state in one struct and one small
//! method per source its loop waits on (uevents, the daemon group, agent and command
//! exits, the main socket's commands, lockspace tasks ending, the once-a-second tick,
//! the watchdog, signals). Startup (`super::daemon`) hands it over in [`Started`].

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use dlm_proto::kernel::{Uevent, UeventAction};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};

use super::agent::{AgentExit, RunExit};
use super::cluster::{CorosyncServices, QuorumState};
use super::daemon_group::{self, DaemonGroup, FenceFacts};
use super::query::LsHandle;
use super::{
    DaemonArgs, DaemonError, EEXIST, ENOENT, LsCommand, LsContext, admission, control, lockspace,
    metrics_http, notify_ready, plock_device, query, sd_notify, sinks, watchdog_interval,
};
use crate::config::Config;
use crate::kernel::{Kernel, MiscDevice};

/// What startup hands the main task.
pub(super) struct Started<'a> {
    pub(super) args: &'a DaemonArgs,
    pub(super) seam: &'a Arc<dyn Kernel>,
    pub(super) device: Option<Arc<MiscDevice>>,
    pub(super) uevents: crate::kernel::UeventSource,
    pub(super) our: u32,
    pub(super) embedded: bool,
    pub(super) dg: DaemonGroup,
    pub(super) services: Option<CorosyncServices>,
    pub(super) quorum: (watch::Sender<QuorumState>, watch::Receiver<QuorumState>),
    pub(super) facts: watch::Receiver<FenceFacts>,
    pub(super) exits: mpsc::UnboundedReceiver<AgentExit>,
    pub(super) run_exits: mpsc::UnboundedReceiver<RunExit>,
    pub(super) status: query::SharedStatus,
    pub(super) signals: Signals,
}

/// The main task's state: what its handlers read and change.
struct Daemon<'a> {
    args: &'a DaemonArgs,
    seam: &'a Arc<dyn Kernel>,
    dg: DaemonGroup,
    services: Option<CorosyncServices>,
    qtx: watch::Sender<QuorumState>,
    config: Config,
    config_dump: query::ConfigDump,
    registry: query::Registry,
    fsids: plock_device::Fsids,
    limit: Arc<std::sync::atomic::AtomicI64>,
    /// `plock_spin_us`, read by the plock device's reader at each wake-up.
    spin_us: Arc<std::sync::atomic::AtomicU64>,
    ctx: LsContext,
    uevent_log: crate::rate::LogEvery,
    quit: bool,
}

/// What the loop waits on besides the daemon group.
struct Sources {
    uevents: AsyncFd<UeventFd>,
    exits: mpsc::UnboundedReceiver<AgentExit>,
    run_exits: mpsc::UnboundedReceiver<RunExit>,
    kicks: mpsc::UnboundedReceiver<u32>,
    control: mpsc::UnboundedReceiver<control::ControlCmd>,
    done: mpsc::UnboundedReceiver<String>,
    reader_failed: mpsc::UnboundedReceiver<DaemonError>,
    /// The one-second tick and the watchdog, from their own thread (`ticks.rs`).
    ticks: mpsc::Receiver<super::ticks::Tick>,
    signals: Signals,
}

/// SIGTERM and SIGINT, caught from the start of startup: one that arrives before the main
/// loop waits for it, and is acted on there, instead of killing the daemon by its default
/// action (a daemon killed after joining its group is a failed node to the others).
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers.
    pub(super) fn new() -> Result<Self, DaemonError> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())
                .map_err(|e| DaemonError::Io("SIGTERM handler", e))?,
            int: signal(SignalKind::interrupt())
                .map_err(|e| DaemonError::Io("SIGINT handler", e))?,
        })
    }

    /// The next SIGTERM or SIGINT.
    pub(super) async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

struct UeventFd(crate::kernel::UeventSource);

impl AsRawFd for UeventFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

/// The main task: the listeners, the plock device's reader, then the loop until a signal
/// and the last lockspace's end.
pub(super) async fn run(st: Started<'_>) -> Result<(), DaemonError> {
    // SAFETY: UeventFd owns the descriptor; it stays open and the same for as long as the
    // AsyncFd that owns the UeventFd.
    let uevents = unsafe {
        AsyncFd::register_with_interest(UeventFd(st.uevents), tokio::io::Interest::READABLE)
    }
    .map_err(|e| DaemonError::Io("uevent registration", e.into()))?;
    let registry: query::Registry = Arc::default();
    let _ = query::PUBLISHED.set(query::Published::default());
    let config = st.args.config.clone();
    let config_dump: query::ConfigDump =
        Arc::new(std::sync::Mutex::new(Arc::new(config.options.dump())));
    let control = listen(st.args, &registry, &config_dump, &st.status).await?;
    notify_ready();
    let fsids = plock_device::Fsids::default();
    let limit = Arc::new(std::sync::atomic::AtomicI64::new(
        config.options.num(crate::config::Opt::PlockRateLimit),
    ));
    let spin_us = Arc::new(std::sync::atomic::AtomicU64::new(spin_us_of(&config.file)));
    let bell = match st.device {
        Some(_) => Some(Arc::new(
            super::polled::Bell::new().map_err(|e| DaemonError::Io("plock reader bell", e))?,
        )),
        None => None,
    };
    let reader_failed = spawn_reader(
        st.device.as_ref(),
        (&limit, &spin_us),
        st.our,
        (&fsids, &registry, bell.as_ref()),
    )?;
    let (kick_tx, kicks) = mpsc::unbounded_channel();
    let (done_tx, done) = mpsc::unbounded_channel::<String>();
    let ctx = LsContext {
        kick: kick_tx,
        device: st.device.clone(),
        seam: st.seam.clone(),
        our: st.our,
        embedded: st.embedded,
        quorum: st.quorum.1,
        fencing: st.facts,
        done: done_tx,
        stateful: st.dg.stateful(),
        registry: registry.clone(),
        plock: super::PlockConf::of(&st.args.config.file),
        bell,
    };
    let sources = Sources {
        uevents,
        exits: st.exits,
        run_exits: st.run_exits,
        kicks,
        control,
        done,
        reader_failed,
        // the watchdog is fed from this loop, the one that reads the kernel and the
        // groups: if it stops turning, systemd hears nothing
        ticks: super::ticks::spawn(watchdog_interval())?,
        signals: st.signals,
    };
    let daemon = Daemon {
        args: st.args,
        seam: st.seam,
        dg: st.dg,
        services: st.services,
        qtx: st.quorum.0,
        config,
        config_dump,
        registry,
        fsids,
        limit,
        spin_us,
        ctx,
        uevent_log: crate::rate::LogEvery::default(),
        quit: false,
    };
    daemon.run(sources).await
}

/// The main socket, the metrics endpoint and the query socket, each served by its own
/// task behind one admission gate, on the clients thread ([`spawn_clients`]); the main
/// socket's commands come back on the channel.
async fn listen(
    args: &DaemonArgs,
    registry: &query::Registry,
    config_dump: &query::ConfigDump,
    status: &query::SharedStatus,
) -> Result<mpsc::UnboundedReceiver<control::ControlCmd>, DaemonError> {
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let nofile = admission::raise_nofile();
    let gate = admission::Gate::new(admission::Limits::for_nofile(nofile));
    let l = gate.limits();
    tracing::info!(
        "local connections: {} at once ({} non-root, {} per uid), descriptor limit {nofile}",
        l.total,
        l.unprivileged,
        l.per_uid
    );
    let metrics = args.metrics;
    let budget = (args.config.file.clients_cpu_budget_us)
        .unwrap_or(crate::config::CLIENTS_BUDGET_US_DEFAULT);
    let budget = Duration::from_micros(u64::from(budget));
    let (registry, config_dump, status) = (registry.clone(), config_dump.clone(), status.clone());
    spawn_clients(budget, async move {
        let control =
            control::bind().map_err(|e| DaemonError::Io("main socket \\0dlmc_sock", e))?;
        let query =
            query::bind().map_err(|e| DaemonError::Io("query socket \\0dlmc_query_sock", e))?;
        // after the binds: a client that connects meanwhile waits in the backlog
        let conns = spawn_conns().await?;
        if let Some(addr) = metrics {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => {
                    tokio::spawn(metrics_http::serve(l, gate.clone(), registry.clone()));
                }
                // metrics are not worth refusing to run for
                Err(e) => tracing::error!("metrics endpoint {addr}: {e}"),
            }
        }
        tokio::spawn(control::serve(control, gate.clone(), ctl_tx));
        Ok(query::serve(
            query,
            gate,
            registry,
            config_dump,
            status,
            conns,
        ))
    })
    .await?;
    Ok(ctl_rx)
}

/// The thread of the query connections that the clients thread does not answer at once (a
/// header that comes late, an answer that needs a lockspace task or is long: plock dumps):
/// an ordinary thread, so a long answer is not held to the clients thread's budget. Its
/// runtime's handle.
async fn spawn_conns() -> Result<tokio::runtime::Handle, DaemonError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    runtime_thread("dlm_conns", move |rt| match rt {
        Ok(rt) => {
            let _ = tx.send(Ok(rt.handle().clone()));
            rt.block_on(std::future::pending::<()>());
        }
        Err(e) => {
            let _ = tx.send(Err(e));
        }
    })?;
    rx.await.unwrap_or_else(|_| {
        let e = io::Error::other("ended before its runtime was built");
        Err(DaemonError::Io("dlm_conns thread", e))
    })
}

/// A thread named `name` with a single-threaded runtime of its own, which `body` is given
/// (or the error of building it); `name` also names its errors.
fn runtime_thread(
    name: &'static str,
    body: impl FnOnce(Result<tokio::runtime::Runtime, DaemonError>) + Send + 'static,
) -> Result<(), DaemonError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| DaemonError::Io(name, e));
            body(rt);
        })
        .map(drop)
        .map_err(|e| DaemonError::Io(name, e))
}

/// The clients thread's scheduling (`sched.rs`), said in the log.
fn schedule_clients(budget: Duration) {
    let (got, errors) = super::sched::clients_thread(budget);
    let why = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    match got {
        super::sched::Scheduled::Deadline(b) => tracing::info!(
            "clients thread: SCHED_DEADLINE, {} us of every {} ms",
            b.as_micros(),
            super::sched::PERIOD.as_millis()
        ),
        super::sched::Scheduled::ShortSlice if budget.is_zero() => {
            tracing::info!("clients thread: ordinary, short slice")
        }
        super::sched::Scheduled::ShortSlice => {
            tracing::warn!("clients thread: SCHED_DEADLINE refused ({why}); ordinary, short slice")
        }
        super::sched::Scheduled::Unchanged => {
            tracing::warn!("clients thread: scheduling left as it was ({why})")
        }
    }
}

/// Runs the local sockets on a thread of their own, with a single-threaded runtime: a
/// query is answered while the worker is busy with plock work (it waited behind the
/// worker's turns, p99 of milliseconds under a storm), and plock work never waits for a
/// client. `setup` binds (its error is startup's) and returns the server to run forever.
async fn spawn_clients<S>(
    budget: Duration,
    setup: impl Future<Output = Result<S, DaemonError>> + Send + 'static,
) -> Result<(), DaemonError>
where
    S: Future<Output = ()> + 'static,
{
    let (bound_tx, bound) = tokio::sync::oneshot::channel();
    runtime_thread("dlm_clients", move |rt| {
        // a query wakes this thread on cores busy with plock work: it should run now
        schedule_clients(budget);
        let rt = match rt {
            Ok(rt) => rt,
            Err(e) => {
                let _ = bound_tx.send(Err(e));
                return;
            }
        };
        rt.block_on(async move {
            match setup.await {
                Ok(server) => {
                    let _ = bound_tx.send(Ok(()));
                    server.await;
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                }
            }
        });
    })?;
    bound.await.unwrap_or_else(|_| {
        let e = io::Error::other("ended before its sockets were bound");
        Err(DaemonError::Io("dlm_clients thread", e))
    })
}

/// `plock_spin_us` as dlm.conf says, in µs.
fn spin_us_of(file: &crate::config::ConfFile) -> u64 {
    u64::try_from(super::PlockConf::of(file).spin.as_micros()).unwrap_or(0)
}

/// The plock device's reader on its thread (when plocks are enabled), with its rate limit
/// (follows `set_config` and `reload_config`) and spin window (follows `reload_config`);
/// its failure comes back on the channel and ends the daemon.
fn spawn_reader(
    device: Option<&Arc<MiscDevice>>,
    (limit, spin_us): (
        &Arc<std::sync::atomic::AtomicI64>,
        &Arc<std::sync::atomic::AtomicU64>,
    ),
    our: u32,
    (fsids, registry, bell): (
        &plock_device::Fsids,
        &query::Registry,
        Option<&Arc<super::polled::Bell>>,
    ),
) -> Result<mpsc::UnboundedReceiver<DaemonError>, DaemonError> {
    let (tx, rx) = mpsc::unbounded_channel();
    if let (Some(d), Some(bell)) = (device, bell) {
        let conf = plock_device::ReaderConf {
            device: d.clone(),
            limit: limit.clone(),
            spin_us: spin_us.clone(),
            our,
            fsids: fsids.clone(),
            registry: registry.clone(),
            bell: bell.clone(),
        };
        plock_device::spawn(conf, tokio::runtime::Handle::current(), tx)
            .map_err(|e| DaemonError::Io("plock reader thread", e))?;
    }
    Ok(rx)
}

impl Daemon<'_> {
    async fn run(mut self, mut src: Sources) -> Result<(), DaemonError> {
        loop {
            self.fencing_news();
            if self.quit && self.registry.lock().is_ok_and(|m| m.is_empty()) {
                self.dg.leave();
                return Ok(());
            }
            let backlog = self.dg.backlog();
            tokio::select! {
                // corosync pushed back: retry the daemon group's queue soon, not never
                () = tokio::time::sleep(Duration::from_millis(20)), if backlog => self.dg.flush(),
                r = src.uevents.readable() => {
                    if let Ok(guard) = r {
                        self.uevent(guard)?;
                    }
                }
                ev = self.dg.group.next_event() => {
                    let ev = ev.map_err(DaemonError::Cluster)?;
                    self.dg.event(ev, self.services.as_ref());
                }
                Some(e) = src.exits.recv() => self.dg.agent_exit(e, self.services.as_ref()),
                Some(n) = src.kicks.recv() => daemon_group::kick(self.services.as_ref(), n),
                Some(e) = src.run_exits.recv() => self.dg.run_exit(e),
                Some(c) = src.control.recv() => self.control(c),
                Some(name) = src.done.recv() => self.lockspace_done(&name),
                Some(e) = src.reader_failed.recv() => return Err(e),
                t = src.ticks.recv() => match t {
                    Some(super::ticks::Tick::Second) => self.tick()?,
                    Some(super::ticks::Tick::Watchdog) => sd_notify(b"WATCHDOG=1"),
                    None => return Err(DaemonError::Io(
                        "dlm_tick thread",
                        io::Error::from(io::ErrorKind::BrokenPipe),
                    )),
                },
                () = src.signals.recv() => self.quit = true,
            }
        }
    }

    /// One uevent read (or a loss counted, or the socket's end).
    fn uevent(
        &mut self,
        mut guard: tokio::io::unix::AsyncFdReadyGuard<'_, UeventFd>,
    ) -> Result<(), DaemonError> {
        match guard.get_inner().0.try_recv() {
            Ok(bytes) if bytes.is_empty() => Err(DaemonError::Io(
                "uevent source",
                io::Error::from(io::ErrorKind::UnexpectedEof),
            )),
            Ok(bytes) => {
                handle_uevent(&self.config, &self.ctx, &bytes, &self.registry, &self.fsids);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                guard.clear_ready();
                Ok(())
            }
            Err(e) => match crate::kernel::UeventLoss::of(&e) {
                Some(loss) => {
                    uevent_loss(loss, &e, &mut self.uevent_log);
                    Ok(())
                }
                None => Err(DaemonError::Io("uevent source", e)),
            },
        }
    }

    /// A command of the main socket: fencing and runs to the daemon group, the rest
    /// changes the configuration.
    fn control(&mut self, c: control::ControlCmd) {
        let services = self.services.as_ref();
        let c = match c {
            control::ControlCmd::FenceAck(n) => return self.dg.fence_ack(n, services),
            control::ControlCmd::RunStart {
                dest,
                flags,
                command,
                reply,
            } => {
                let _ = reply.send(self.dg.run_start(dest, flags, &command));
                return;
            }
            control::ControlCmd::RunCheck { uuid, flags, reply } => {
                let _ = reply.send(self.dg.run_check(&uuid, flags));
                return;
            }
            c => c,
        };
        apply_control(
            c,
            &mut self.config,
            self.args.conf_path.as_deref(),
            &**self.seam,
        );
        self.dg.reconfigure(&self.config.options);
        self.limit.store(
            self.config.options.num(crate::config::Opt::PlockRateLimit),
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Ok(mut d) = self.config_dump.lock() {
            *d = Arc::new(self.config.options.dump());
        }
        self.reload_plock_conf();
    }

    /// `plock_spin_us` and `plock_locks_max` as dlm.conf says now (a reload replaced the
    /// file's sections): the reader's next wake-up takes the first; lockspaces joined later
    /// take the second, and each running one at once.
    fn reload_plock_conf(&mut self) {
        let spin = spin_us_of(&self.config.file);
        let was = self
            .spin_us
            .swap(spin, std::sync::atomic::Ordering::Relaxed);
        if spin != was {
            tracing::info!("plock_spin_us {spin} (was {was})");
        }
        let max = super::PlockConf::of(&self.config.file).locks_max;
        if max == self.ctx.plock.locks_max {
            return;
        }
        tracing::info!("plock_locks_max {max} (was {})", self.ctx.plock.locks_max);
        self.ctx.plock.locks_max = max;
        if let Ok(m) = self.registry.lock() {
            for h in m.values() {
                let _ = h.tx.send(LsCommand::SetLocksMax(max));
            }
        }
    }

    /// A lockspace task ended (it unregistered itself); a lockspace of that name joined
    /// again since keeps its series and its fsid.
    fn lockspace_done(&mut self, name: &str) {
        if !self.registry.lock().is_ok_and(|m| m.contains_key(name)) {
            crate::metrics::get().forget(name);
            if let Ok(mut f) = self.fsids.write() {
                f.retain(|_, n| **n != *name);
            }
        }
    }

    /// Once a second: quorum and cfg from corosync, the fencing retry, and a poll of every
    /// lockspace (their waits on fencing and quorum).
    fn tick(&mut self) -> Result<(), DaemonError> {
        if let Some(s) = self.services.as_mut() {
            s.quorum.dispatch().map_err(DaemonError::Cluster)?;
            while let Some(c) = s.quorum.poll_change() {
                tracing::debug!(
                    "cluster quorum {} seq {} nodes {}",
                    u8::from(c.quorate),
                    c.ring_seq,
                    c.nodes.len()
                );
                self.dg.quorum_change(&c, s);
                let _ = self.qtx.send(QuorumState {
                    quorate: c.quorate,
                    ring_seq: c.ring_seq,
                });
            }
            s.cfg.dispatch().map_err(DaemonError::Cluster)?;
            if s.cfg.poll_shutdown().is_some() {
                // corosync may stop only when no lockspace needs it (C's shutdown_callback)
                let idle = self.registry.lock().is_ok_and(|m| m.is_empty());
                if !idle {
                    tracing::debug!("shutdown ignored, active lockspaces");
                }
                let _ = s.cfg.reply_shutdown(idle);
            }
        }
        self.dg.tick(self.services.as_ref());
        self.poll_lockspaces();
        Ok(())
    }

    /// Every lockspace looks again at quorum and fencing (its waiting change).
    fn poll_lockspaces(&self) {
        if let Ok(m) = self.registry.lock() {
            for h in m.values() {
                let _ = h.tx.send(LsCommand::Poll);
            }
        }
    }

    /// The daemon group's fencing facts changed in this turn (a node fenced or
    /// acknowledged): a change waiting for them goes on now, not at the next tick.
    fn fencing_news(&mut self) {
        if self.ctx.fencing.has_changed().unwrap_or(false) {
            self.ctx.fencing.borrow_and_update();
            self.poll_lockspaces();
        }
    }
}

fn fmt_value(v: &crate::config::Value) -> String {
    match v {
        crate::config::Value::Num(n) => n.to_string(),
        crate::config::Value::Str(s) => s.clone(),
    }
}

/// `reload_config` / `set_config` from the main socket, and their effects: where log lines
/// go, and `log_debug` written to configfs at once (as C does).
fn apply_control(
    c: control::ControlCmd,
    config: &mut Config,
    conf_path: Option<&std::path::Path>,
    seam: &dyn Kernel,
) {
    let file_text = conf_path.and_then(|p| fs::read_to_string(p).ok());
    let changes = match c {
        control::ControlCmd::Reload => match config.reload(file_text.as_deref()) {
            Ok(ch) => {
                for c in &ch {
                    tracing::debug!(
                        "config file {} = {} cli_set 0 use {}",
                        c.opt.spec().name,
                        fmt_value(&c.new),
                        fmt_value(&c.new)
                    );
                }
                ch
            }
            Err(e) => {
                tracing::error!("reload_config: {e}");
                return;
            }
        },
        // handled by the daemon group
        control::ControlCmd::FenceAck(_)
        | control::ControlCmd::RunStart { .. }
        | control::ControlCmd::RunCheck { .. } => return,
        control::ControlCmd::SetConfig(text) => {
            let (ch, ignored) = config.set_config(&text, file_text.as_deref());
            for c in &ch {
                tracing::debug!(
                    "config dynamic {} = {} previous use {}",
                    c.opt.spec().name,
                    fmt_value(&c.new),
                    fmt_value(&c.old)
                );
            }
            for w in ignored {
                tracing::debug!("set_config ignored {w}");
            }
            ch
        }
    };
    crate::log::set_sinks(sinks(
        &config.options,
        crate::log::syslog(),
        crate::log::json(),
    ));
    for c in changes {
        if c.opt == crate::config::Opt::LogDebug {
            let v = match &c.new {
                crate::config::Value::Num(n) => *n,
                crate::config::Value::Str(_) => 0,
            };
            if let Err(e) = seam.set_log_debug(v) {
                tracing::error!("set log_debug: {e}");
            }
        }
    }
}

/// A uevent read that failed without breaking the socket: counted, logged at most once a
/// second, and the loop goes on.
fn uevent_loss(loss: crate::kernel::UeventLoss, e: &io::Error, log: &mut crate::rate::LogEvery) {
    crate::metrics::get()
        .uevents_lost
        .with_label_values(&[loss.label()])
        .inc();
    if let Some(held) = log.allow(crate::clock::monotonic_ms()) {
        tracing::error!("uevent socket: {e} ({held} more not logged)");
    }
}

fn handle_uevent(
    config: &Config,
    ctx: &LsContext,
    bytes: &[u8],
    registry: &query::Registry,
    fsids: &plock_device::Fsids,
) {
    let Ok(mut lockspaces) = registry.lock() else {
        return;
    };
    let Ok(ev) = Uevent::parse(bytes) else { return };
    let name = ev.lockspace.to_str_lossy().into_owned();
    let act = match ev.action {
        UeventAction::Online => "online@",
        UeventAction::Offline => "offline@",
    };
    // process_uevent's lines
    tracing::debug!(
        target: crate::log::PLAIN_TARGET,
        action = act,
        ls = name.as_str(),
        "kernel: {act} {name}"
    );
    match ev.action {
        UeventAction::Online => {
            if lockspaces.contains_key(&name) {
                // -EEXIST: already known, no event_done
                tracing::error!("process_uevent {act} error -{EEXIST} errno 0");
                return;
            }
            let conf = config
                .file
                .lockspaces
                .get(&name)
                .cloned()
                .unwrap_or_default();
            let (tx, rx) = mpsc::unbounded_channel();
            if let Ok(mut f) = fsids.write() {
                f.insert(
                    dlm_proto::wire::global_id(&ev.lockspace),
                    Arc::from(name.as_str()),
                );
            }
            let named: Arc<str> = Arc::from(name.as_str());
            let direct = Arc::new(lockspace::Direct::new(ctx.bell.clone()));
            lockspaces.insert(
                name,
                LsHandle {
                    tx,
                    direct: direct.clone(),
                },
            );
            tokio::spawn(crate::log::in_lockspace(
                named,
                lockspace::run(ev.lockspace, conf, ctx.clone(), direct, rx),
            ));
        }
        UeventAction::Offline => match lockspaces.get(&name) {
            Some(h) => {
                let _ = h.tx.send(LsCommand::Leave);
            }
            None => tracing::error!("process_uevent {act} error -{ENOENT} errno 0"),
        },
    }
}
