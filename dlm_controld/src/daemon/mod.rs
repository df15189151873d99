//! The daemon's runtime: startup in the C daemon's order, then one tokio task per
//! lockspace (it owns its group and its membership machine; nothing is shared) and a main
//! task for uevents, the once-a-second retry and signals.
//!
//! Runs on corosync or on the embedded single-member group (see docs/ARCHITECTURE.md).

mod admission;
mod agent;
mod cluster;
mod control;
mod daemon_group;
mod lockspace;
mod metrics_http;
mod outstanding;
mod plock_device;
mod query;
mod startup;

use std::fs::{self, OpenOptions};
use std::io;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::sync::Arc;
use std::time::Duration;

use cluster::{CorosyncServices, LsGroup, QuorumState};
use dlm_cpg::CpgError;
use dlm_proto::kernel::{Uevent, UeventAction};
use dlm_proto::wire::DAEMON_GROUP_NAME;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};

use crate::clock::monotonic_secs;
use crate::config::Config;
use crate::daemon_proto::QuorumView;
use crate::fencing::{FenceOpts, Fencing};
use crate::kernel::{KernelRoot, MiscDevice, SeamError};
use daemon_group::{DaemonGroup, FenceFacts};

pub use crate::lscore::LsReport;
pub use lockspace::{DumpJob, LsCommand};
pub(crate) use plock_device::answer_gone;

pub(crate) use dlm_proto::errno::{EEXIST, ENOENT};

/// Which group implementation carries the daemon's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterKind {
    /// corosync CPG.
    Corosync,
    /// One member, no corosync (a one-node cluster).
    Embedded,
}

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct DaemonArgs {
    /// `--kernel-root`.
    pub kernel_root: KernelRoot,
    /// `--cluster`.
    pub cluster: ClusterKind,
    /// Options and dlm.conf.
    pub config: Config,
    /// Text of dlm.conf, re-read for each lockspace's sections.
    pub conf_text: Option<String>,
    /// Where dlm.conf is, for `reload_config` and `set_config ... restore`.
    pub conf_path: Option<std::path::PathBuf>,
    /// Where to serve Prometheus metrics (`--metrics`); `None`: nowhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--log-format json`: JSON lines to the log file and stderr.
    pub log_json: bool,
}

/// Why the daemon stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A kernel interface failed at startup.
    #[error(transparent)]
    Seam(#[from] SeamError),
    /// Another daemon holds the pid file.
    #[error("another dlm_controld is running ({0})")]
    AlreadyRunning(String),
    /// Other I/O at startup.
    #[error("{0}: {1}")]
    Io(&'static str, io::Error),
    /// The daemon protocol could not be agreed.
    #[error(transparent)]
    Protocol(#[from] crate::daemon_proto::ProtoError),
    /// Not available, or not in time.
    #[error("no {0}")]
    Unsupported(&'static str),
    /// corosync failed or went away.
    #[error("corosync: {0}")]
    Cluster(CpgError),
    /// The kernel has lockspaces no daemon controls (a daemon died with them).
    #[error(
        "found uncontrolled lockspaces {0:?}: the kernel kept DLM state from a daemon that \
         died; this node must be rebooted before it rejoins (it asked corosync to remove it)"
    )]
    Uncontrolled(Vec<String>),
}

const EMBEDDED_NODEID: u32 = 1;

/// Takes the pid file with an exclusive lock: a second daemon is refused.
fn pid_file(seam: &KernelRoot) -> Result<fs::File, DaemonError> {
    let path = seam.path("run/dlm_controld/dlm_controld.pid");
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| DaemonError::Io("pid file directory", e))?;
    }
    // the mode is ours, not the inherited umask's (0 would make it world-writable)
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .open(&path)
        .map_err(|e| DaemonError::Io("pid file", e))?;
    let lock = f.try_clone().map_err(|e| DaemonError::Io("pid file", e))?;
    // the lock lives as long as the process: the descriptor is deliberately never closed
    nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map(std::mem::forget)
        .map_err(|_| DaemonError::AlreadyRunning(path.display().to_string()))?;
    f.set_len(0).map_err(|e| DaemonError::Io("pid file", e))?;
    f.set_permissions(fs::Permissions::from_mode(0o644))
        .map_err(|e| DaemonError::Io("pid file", e))?;
    (&f).write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(|e| DaemonError::Io("pid file", e))?;
    Ok(f)
}

/// Sends one `sd_notify` message to systemd, when started by it (`NOTIFY_SOCKET`).
fn sd_notify(msg: &[u8]) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(msg, &a))
    } else {
        sock.send_to(msg, std::path::Path::new(&path))
    };
    if let Err(e) = sent {
        tracing::error!("sd_notify: {e}");
    }
}

/// Tells systemd we are ready (`sd_notify(0, "READY=1")`).
fn notify_ready() {
    sd_notify(b"READY=1");
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC` when systemd asks for a
/// watchdog for this process (`WATCHDOG_PID` absent or ours), as `sd_watchdog_enabled`.
fn watchdog_interval() -> Option<Duration> {
    watchdog_interval_of(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

/// [`watchdog_interval`] from the two variables' values: at least a millisecond (a zero
/// period would make `tokio::time::interval` panic).
fn watchdog_interval_of(usec: Option<&str>, pid: Option<&str>, ours: u32) -> Option<Duration> {
    let usec: u64 = usec?.parse().ok()?;
    if let Some(pid) = pid {
        if pid.parse::<u32>().ok()? != ours {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros((usec / 2).max(1_000)))
}

/// Runs the daemon until SIGTERM/SIGINT with no lockspace left. Forks into the
/// background first unless `--foreground` or `-D` (as C: the pid file is taken after).
pub fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    let o = &args.config.options;
    if !o.on(crate::config::Opt::Foreground) && !o.on(crate::config::Opt::DaemonDebug) {
        nix::unistd::daemon(false, false).map_err(|e| DaemonError::Io("daemon(3)", e.into()))?;
    }
    // two workers: a query (or a lockspace's membership work) runs beside a plock storm
    // instead of queueing behind it; one on a machine of one CPU, where a second worker only
    // adds a context switch to every hand-off
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("dlm_controld")
        .enable_all()
        .build()
        .map_err(|e| DaemonError::Io("tokio runtime", e))?;
    let r = rt.block_on(daemon(args));
    if let Err(e) = &r {
        tracing::error!("{e}");
    }
    crate::log::flush();
    r
}

/// Where log lines go for these options (syslog only for the real kernel, not in tests).
fn sinks(o: &crate::config::Options, real: bool, json: bool) -> crate::log::Sinks {
    use crate::config::Opt;
    crate::log::Sinks {
        stderr: o.on(Opt::DaemonDebug),
        plock_stderr: o.on(Opt::PlockDebug),
        debug_logfile: o.on(Opt::DebugLogfile),
        syslog: real,
        json,
    }
}

async fn daemon(args: DaemonArgs) -> Result<(), DaemonError> {
    let seam = args.kernel_root.clone();
    crate::log::init(
        Some(&seam.path("var/log/dlm_controld/dlm_controld.log")),
        sinks(&args.config.options, seam.is_real(), args.log_json),
    );
    let _pid = pid_file(&seam)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "dlm_controld {} started",
        env!("CARGO_PKG_VERSION")
    );
    let embedded = args.cluster == ClusterKind::Embedded;
    let mut services = if embedded {
        None
    } else {
        Some(CorosyncServices::connect().map_err(DaemonError::Cluster)?)
    };
    let our = services.as_ref().map_or(EMBEDDED_NODEID, |s| s.nodeid);
    tracing::debug!("our_nodeid {our}");
    let cluster_name = services
        .as_ref()
        .map_or_else(|| "dlm".to_owned(), |s| s.cluster_name.clone());
    // kernel lockspaces without a daemon: this node must be reset, not rejoin
    let stale = seam.uncontrolled_lockspaces();
    if !stale.is_empty() {
        for n in &stale {
            tracing::error!("found uncontrolled lockspace {n}");
        }
        if let Some(s) = services.as_ref() {
            tracing::error!("tell corosync to remove nodeid {our} from cluster");
            if let Err(e) = s.cfg.kill_node(our, "dlm_controld") {
                tracing::error!("kill node {our}: {e}");
            }
        }
        return Err(DaemonError::Uncontrolled(stale));
    }
    // 0. unfence ourselves before anyone can fence us (after that, joining the daemon
    //    group makes us fenceable)
    agent::unfence(&args.config.file, our)
        .await
        .map_err(|e| DaemonError::Io("unfence", io::Error::other(e)))?;
    // 1. configfs cluster attributes
    startup::setup_configfs(&seam, &args.config, &cluster_name)?;
    // 2. the monitor device, before our comms entry, kept open for our lifetime
    let _monitor = seam.open_misc("dlm-monitor")?;
    // 3. comms entries for the quorum members (or just us)
    let (qtx, qrx) = watch::channel(QuorumState {
        quorate: true,
        ring_seq: 0,
    });
    let mut comms = Comms::default();
    let mut quorum = QuorumView {
        quorate: true,
        quorate_since: monotonic_secs(),
        two_node: services.as_ref().is_some_and(|s| s.two_node),
    };
    let mut ring_seq = 0;
    // cluster_joined_monotime / walltime: the first quorum notification
    let joined = (monotonic_secs(), wall_secs());
    let mut cluster_nodes = vec![our];
    if let Some(s) = services.as_mut() {
        let change = wait_quorum(s).await?;
        tracing::debug!(
            "cluster quorum {} seq {} nodes {}",
            u8::from(change.quorate),
            change.ring_seq,
            change.nodes.len()
        );
        comms.update(&seam, &args.config, s, our, &change.nodes);
        quorum.quorate = change.quorate;
        ring_seq = change.ring_seq;
        cluster_nodes.clone_from(&change.nodes);
        let _ = qtx.send(QuorumState {
            quorate: change.quorate,
            ring_seq: change.ring_seq,
        });
    } else {
        let mut addr = [0u8; 128];
        addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]);
        let mark = args.config.file.node_marks.get(&our).copied().unwrap_or(0);
        startup::add_node(&seam, our, &addr, true, mark)?;
    }
    // 4. the daemon group, its protocol and fencing
    let o = &args.config.options;
    use crate::config::Opt;
    let opts = FenceOpts::from_options(o, quorum.two_node);
    let nodelist = services
        .as_ref()
        .map_or_else(|| vec![our], |s| s.nodelist.clone());
    let fencing = Fencing::new(our, opts, args.config.file.clone(), &nodelist, joined);
    let start = crate::daemon_core::Start {
        our,
        quorum,
        ring_seq,
        cluster_nodes,
        at: crate::daemon_core::Now {
            mono: joined.0,
            wall: joined.1,
        },
        embedded,
        helper: o.on(Opt::EnableHelper),
        quorum_lockspace: o.on(Opt::EnableQuorumLockspace),
    };
    let core = crate::daemon_core::DaemonCore::new(start, fencing, opts);
    let status: query::SharedStatus =
        Arc::new(std::sync::Mutex::new(crate::status::DaemonStatus {
            our,
            quorate: quorum.quorate,
            cluster_ringid: ring_seq,
            ..Default::default()
        }));
    let (facts_tx, facts_rx) = watch::channel(core.facts());
    let (exit_tx, exit_rx) = mpsc::unbounded_channel();
    let (run_tx, run_rx) = mpsc::unbounded_channel();
    let group = LsGroup::join(embedded, our, DAEMON_GROUP_NAME)
        .await
        .map_err(DaemonError::Cluster)?;
    let exits = daemon_group::Exits {
        agents: exit_tx,
        runs: run_tx,
    };
    let mut dg = DaemonGroup::new(group, core, status.clone(), facts_tx, exits);
    let negotiated = async {
        loop {
            while let Some(ev) = dg.group.poll_event() {
                dg.event(ev, services.as_ref());
            }
            if let Some(r) = dg.negotiated() {
                return r.map_err(DaemonError::Protocol);
            }
            let ev = dg.group.next_event().await.map_err(DaemonError::Cluster)?;
            dg.event(ev, services.as_ref());
        }
    };
    tokio::time::timeout(Duration::from_secs(60), negotiated)
        .await
        .map_err(|_| DaemonError::Unsupported("daemon protocol negotiation within 60 s"))??;
    // fencing work may begin once our protocol is set (daemon_fence_allow)
    dg.start_fencing(services.as_ref());
    // 5. the plock device, uevents, then the loop
    let device = if args.config.options.on(Opt::EnablePlock) {
        Some(Arc::new(seam.open_misc("dlm_plock")?))
    } else {
        None
    };
    let uevents = seam.open_uevents()?;
    main_loop(
        &args,
        device,
        &seam,
        uevents,
        our,
        embedded,
        &mut dg,
        services,
        (qtx, qrx),
        (facts_rx, exit_rx, run_rx),
        comms,
        status,
    )
    .await
}

/// Wall-clock seconds (`time(NULL)`).
fn wall_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn wait_quorum(s: &mut CorosyncServices) -> Result<dlm_cpg::QuorumChange, DaemonError> {
    for _ in 0..600 {
        s.quorum.dispatch().map_err(DaemonError::Cluster)?;
        if let Some(c) = s.quorum.poll_change() {
            return Ok(c);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(DaemonError::Unsupported(
        "a quorum notification within 60 s",
    ))
}

/// The comms entries written so far (`add_configfs_node` / `del_configfs_node`).
#[derive(Debug, Default)]
struct Comms {
    nodes: Vec<u32>,
}

impl Comms {
    fn update(
        &mut self,
        seam: &KernelRoot,
        cfg: &Config,
        s: &CorosyncServices,
        our: u32,
        members: &[u32],
    ) {
        let new: Vec<u32> = members
            .iter()
            .copied()
            .filter(|n| !self.nodes.contains(n))
            .collect();
        for n in new {
            let mark = cfg.file.node_marks.get(&n).copied().unwrap_or(0);
            for a in s.addrs(n) {
                if let Err(e) = startup::add_node(seam, n, &a.storage, n == our, mark) {
                    tracing::error!("{e}");
                }
            }
            self.nodes.push(n);
        }
        let gone: Vec<u32> = self
            .nodes
            .iter()
            .copied()
            .filter(|n| !members.contains(n))
            .collect();
        for n in gone {
            let _ = seam.configfs_rmdir(&format!("comms/{n}"));
            self.nodes.retain(|x| *x != n);
        }
    }
}

#[allow(clippy::too_many_arguments)] // the daemon's state, handed over once
async fn main_loop(
    args: &DaemonArgs,
    device: Option<Arc<MiscDevice>>,
    seam: &KernelRoot,
    uevents: crate::kernel::UeventSource,
    our: u32,
    embedded: bool,
    dg: &mut DaemonGroup,
    mut services: Option<CorosyncServices>,
    (qtx, qrx): (watch::Sender<QuorumState>, watch::Receiver<QuorumState>),
    (facts, mut exits, mut run_exits): (
        watch::Receiver<FenceFacts>,
        mpsc::UnboundedReceiver<agent::AgentExit>,
        mpsc::UnboundedReceiver<agent::RunExit>,
    ),
    mut comms: Comms,
    status: query::SharedStatus,
) -> Result<(), DaemonError> {
    // SAFETY: UeventFd owns the descriptor; it stays open and the same for as long as the
    // AsyncFd that owns the UeventFd.
    let uevents = unsafe {
        AsyncFd::register_with_interest(UeventFd(uevents), tokio::io::Interest::READABLE)
    }
    .map_err(|e| DaemonError::Io("uevent registration", e.into()))?;
    let registry: query::Registry = Arc::default();
    let _ = query::PUBLISHED.set(query::Published::default());
    let mut config = args.config.clone();
    let config_dump: query::ConfigDump =
        Arc::new(std::sync::Mutex::new(Arc::new(config.options.dump())));
    let (ctl_tx, mut ctl_rx) = mpsc::unbounded_channel();
    let nofile = admission::raise_nofile();
    let gate = admission::Gate::new(admission::Limits::for_nofile(nofile));
    let l = gate.limits();
    tracing::info!(
        "local connections: {} at once ({} non-root, {} per uid), descriptor limit {nofile}",
        l.total,
        l.unprivileged,
        l.per_uid
    );
    match control::bind() {
        Ok(l) => {
            tokio::spawn(control::serve(l, gate.clone(), ctl_tx));
        }
        Err(e) => return Err(DaemonError::Io("main socket \\0dlmc_sock", e)),
    }
    if let Some(addr) = args.metrics {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                tokio::spawn(metrics_http::serve(l, gate.clone(), registry.clone()));
            }
            // metrics are not worth refusing to run for
            Err(e) => tracing::error!("metrics endpoint {addr}: {e}"),
        }
    }
    match query::bind() {
        Ok(l) => {
            tokio::spawn(query::serve(
                l,
                gate,
                registry.clone(),
                config_dump.clone(),
                status.clone(),
            ));
        }
        Err(e) => return Err(DaemonError::Io("query socket \\0dlmc_query_sock", e)),
    }
    notify_ready();
    // the watchdog is fed from this loop, the one that reads the kernel and the groups:
    // if it stops turning, systemd hears nothing
    let mut watchdog = watchdog_interval().map(tokio::time::interval);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut uevent_log = admission::LogEvery::default();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| DaemonError::Io("SIGTERM handler", e))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| DaemonError::Io("SIGINT handler", e))?;
    let mut quit = false;
    let fsids = plock_device::Fsids::default();
    let limit = Arc::new(std::sync::atomic::AtomicI64::new(
        config.options.num(crate::config::Opt::PlockRateLimit),
    ));
    let (reader_tx, mut reader_failed) = mpsc::unbounded_channel();
    if let Some(d) = device.as_ref() {
        let reader = plock_device::reader(
            d.clone(),
            limit.clone(),
            our,
            fsids.clone(),
            registry.clone(),
        );
        tokio::spawn(async move {
            let _ = reader_tx.send(reader.await);
        });
    }
    let (kick_tx, mut kicks) = mpsc::unbounded_channel();
    let ctx = LsContext {
        kick: kick_tx,
        device: device.clone(),
        seam: seam.clone(),
        our,
        embedded,
        quorum: qrx,
        fencing: facts,
        done: done_tx,
        stateful: dg.stateful(),
        registry: registry.clone(),
        native: args.config.file.plock_native.unwrap_or(true),
    };
    loop {
        if quit && registry.lock().is_ok_and(|m| m.is_empty()) {
            return Ok(());
        }
        let dg_backlog = dg.backlog();
        tokio::select! {
            // corosync pushed back: retry the daemon group's queue soon, not never
            () = tokio::time::sleep(Duration::from_millis(20)), if dg_backlog => dg.flush(),
            r = uevents.readable() => {
                let Ok(mut guard) = r else { continue };
                match guard.get_inner().0.try_recv() {
                    Ok(bytes) if bytes.is_empty() => return Err(DaemonError::Io("uevent source", io::Error::from(io::ErrorKind::UnexpectedEof))),
                    Ok(bytes) => handle_uevent(&config, &ctx, &bytes, &registry, &fsids),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                    Err(e) => match crate::kernel::UeventLoss::of(&e) {
                        Some(loss) => uevent_loss(loss, &e, &mut uevent_log),
                        None => return Err(DaemonError::Io("uevent source", e)),
                    },
                }
            }
            ev = dg.group.next_event() => {
                let ev = ev.map_err(DaemonError::Cluster)?;
                dg.event(ev, services.as_ref());
            }
            Some(e) = exits.recv() => dg.agent_exit(e, services.as_ref()),
            Some(n) = kicks.recv() => daemon_group::kick(services.as_ref(), n),
            Some(e) = run_exits.recv() => dg.run_exit(e),
            Some(c) = ctl_rx.recv() => {
                let c = match c {
                    control::ControlCmd::FenceAck(n) => {
                        dg.fence_ack(n, services.as_ref());
                        continue;
                    }
                    control::ControlCmd::RunStart { dest, flags, command, reply } => {
                        let _ = reply.send(dg.run_start(dest, flags, &command));
                        continue;
                    }
                    control::ControlCmd::RunCheck { uuid, flags, reply } => {
                        let _ = reply.send(dg.run_check(&uuid, flags));
                        continue;
                    }
                    c => c,
                };
                apply_control(c, &mut config, args.conf_path.as_deref(), seam);
                dg.reconfigure(&config.options);
                limit.store(
                    config.options.num(crate::config::Opt::PlockRateLimit),
                    std::sync::atomic::Ordering::Relaxed,
                );
                if let Ok(mut d) = config_dump.lock() {
                    *d = Arc::new(config.options.dump());
                }
            }
            Some(name) = done_rx.recv() => {
                // the task unregistered itself; a lockspace of that name joined again since
                // keeps its series and its fsid
                if !registry.lock().is_ok_and(|m| m.contains_key(&name)) {
                    crate::metrics::get().forget(&name);
                    if let Ok(mut f) = fsids.write() {
                        f.retain(|_, n| **n != *name);
                    }
                }
            }
            Some(e) = reader_failed.recv() => return Err(e),
            _ = tick.tick() => {
                if let Some(s) = services.as_mut() {
                    s.quorum.dispatch().map_err(DaemonError::Cluster)?;
                    while let Some(c) = s.quorum.poll_change() {
                        tracing::debug!("cluster quorum {} seq {} nodes {}", u8::from(c.quorate), c.ring_seq, c.nodes.len());
                        dg.quorum_change(c.quorate, c.ring_seq, &c.nodes);
                        comms.update(seam, &config, s, our, &c.nodes);
                        let _ = qtx.send(QuorumState { quorate: c.quorate, ring_seq: c.ring_seq });
                    }
                    s.cfg.dispatch().map_err(DaemonError::Cluster)?;
                    if s.cfg.poll_shutdown().is_some() {
                        // corosync may stop only when no lockspace needs it (C's shutdown_callback)
                        let idle = registry.lock().is_ok_and(|m| m.is_empty());
                        if !idle {
                            tracing::debug!("shutdown ignored, active lockspaces");
                        }
                        let _ = s.cfg.reply_shutdown(idle);
                    }
                }
                dg.tick(services.as_ref());
                if let Ok(m) = registry.lock() {
                    for tx in m.values() {
                        let _ = tx.send(LsCommand::Poll);
                    }
                }
            }
            _ = async {
                match watchdog.as_mut() {
                    Some(w) => w.tick().await,
                    None => std::future::pending().await,
                }
            } => sd_notify(b"WATCHDOG=1"),
            _ = term.recv() => quit = true,
            _ = int.recv() => quit = true,
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

/// What every lockspace task shares with the main task.
#[derive(Debug, Clone)]
pub(crate) struct LsContext {
    pub(crate) seam: KernelRoot,
    pub(crate) our: u32,
    pub(crate) embedded: bool,
    pub(crate) quorum: watch::Receiver<QuorumState>,
    /// Fencing facts from the daemon group.
    pub(crate) fencing: watch::Receiver<FenceFacts>,
    pub(crate) done: mpsc::UnboundedSender<String>,
    /// Set once any lockspace has started (`set_protocol_stateful`).
    pub(crate) stateful: Arc<std::sync::atomic::AtomicBool>,
    /// The lockspace tasks by name; a task removes its own entry before it tells the
    /// kernel its join failed or its leave is done, so the next `online@` for the name
    /// (which the kernel may send at once) starts a new task.
    pub(crate) registry: query::Registry,
    /// The plock device, for replies (`None` with `enable_plock=0`).
    pub(crate) device: Option<Arc<MiscDevice>>,
    /// Nodes to have corosync remove (a lockspace member whose daemon died: PROCDOWN).
    pub(crate) kick: mpsc::UnboundedSender<u32>,
    /// `plock_native` (docs/native-mode.md): our STARTs offer native mode.
    pub(crate) native: bool,
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
    seam: &KernelRoot,
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
    crate::log::set_sinks(sinks(&config.options, seam.is_real(), crate::log::json()));
    for c in changes {
        if c.opt == crate::config::Opt::LogDebug {
            if let Err(e) = seam.configfs_write("log_debug", fmt_value(&c.new).as_bytes()) {
                tracing::error!("set log_debug: {e}");
            }
        }
    }
}

/// A uevent read that failed without breaking the socket: counted, logged at most once a
/// second, and the loop goes on.
fn uevent_loss(loss: crate::kernel::UeventLoss, e: &io::Error, log: &mut admission::LogEvery) {
    crate::metrics::get()
        .uevents_lost
        .with_label_values(&[loss.label()])
        .inc();
    if let Some(held) = log.allow(std::time::Instant::now()) {
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
            let span = tracing::debug_span!("lockspace", ls = name.as_str());
            lockspaces.insert(name, tx);
            tokio::spawn(tracing::Instrument::instrument(
                lockspace::run(ev.lockspace, conf, ctx.clone(), rx),
                span,
            ));
        }
        UeventAction::Offline => match lockspaces.get(&name) {
            Some(tx) => {
                let _ = tx.send(LsCommand::Leave);
            }
            None => tracing::error!("process_uevent {act} error -{ENOENT} errno 0"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_interval_is_half_and_never_zero() {
        let ms = |u, p| watchdog_interval_of(u, p, 42).map(|d| d.as_micros());
        assert_eq!(ms(Some("60000000"), None), Some(30_000_000));
        assert_eq!(ms(Some("60000000"), Some("42")), Some(30_000_000));
        assert_eq!(ms(Some("60000000"), Some("41")), None, "another process's");
        assert_eq!(ms(Some("1"), None), Some(1_000), "WATCHDOG_USEC=1 panicked");
        assert_eq!(ms(Some("0"), None), None);
        assert_eq!(ms(Some("x"), None), None);
        assert_eq!(ms(None, None), None);
    }
}
