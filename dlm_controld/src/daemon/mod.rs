//! The daemon's runtime: startup in the C daemon's order, then, on one current-thread
//! tokio runtime, a main task (`main_task.rs`: uevents, the daemon group, the
//! once-a-second retry, the main socket's commands, signals) and one task per lockspace
//! (`lockspace.rs`: it owns its group and its `LsCore`, in a shell it shares with the plock
//! device's reader, `direct.rs`). Other threads: the plock device's reader (`dlm_plock`,
//! `plock_device.rs`), the local sockets (`dlm_clients`, and `dlm_conns` for long or late
//! query connections), the tick and the watchdog's beat (`dlm_tick`, `ticks.rs`) and the
//! log writer (`dlm_log`). docs/ARCHITECTURE.md, "Threads".
//!
//! Runs on corosync or on the embedded single-member group.

mod admission;
mod agent;
mod cluster;
mod control;
mod daemon_group;
mod direct;
mod lockspace;
mod main_task;
mod metrics_http;
mod outstanding;
mod plock_device;
mod polled;
mod query;
mod round_trip;
mod sched;
mod spin;
mod startup;
mod ticks;

use std::fs::{self, OpenOptions};
use std::io;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::sync::Arc;
use std::time::Duration;

use cluster::{ClusterGroup, CorosyncServices, QuorumState};
use dlm_cpg::CpgError;
use dlm_proto::wire::DAEMON_GROUP_NAME;
use tokio::sync::{mpsc, watch};

use crate::clock::monotonic_secs;
use crate::config::Config;
use crate::daemon_proto::QuorumView;
use crate::fencing::{FenceOpts, Fencing};
use crate::kernel::{Kernel, MiscDevice, SeamError};
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
    /// The kernel seam (`--kernel-root`).
    pub kernel: Arc<dyn Kernel>,
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
    /// `--syslog on|off`: lines to syslog (LOCAL4) as C's daemon does; on by default on
    /// the real kernel, off under a fake one.
    pub syslog: bool,
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
    /// Something the start waits for did not happen in time.
    #[error("no {0}")]
    Timeout(&'static str),
    /// Unfencing this node failed (`unfence_node`): it must not join.
    #[error(transparent)]
    Unfence(agent::UnfenceError),
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
fn pid_file(seam: &dyn Kernel) -> Result<fs::File, DaemonError> {
    let path = seam.pid_file();
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
    // one thread for the main task and the lockspaces, as C's one loop (the plock device's
    // reader on a thread of its own that performs requests in place, plock_device::spawn;
    // the local sockets on another, main_task::spawn_clients): a lockspace's hand-offs
    // never cross threads, and a current-thread scheduler costs less per wake-up
    // than one worker beside block_on's thread; a second worker takes the CPU corosync
    // needs (docs/BENCHMARKS.md, "Settings chosen by measurement")
    let rt = tokio::runtime::Builder::new_current_thread()
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

/// Where log lines go for these options (`--syslog`, `--log-format`).
fn sinks(o: &crate::config::Options, syslog: bool, json: bool) -> crate::log::Sinks {
    use crate::config::Opt;
    crate::log::Sinks {
        stderr: o.on(Opt::DaemonDebug),
        plock_stderr: o.on(Opt::PlockDebug),
        debug_logfile: o.on(Opt::DebugLogfile),
        syslog,
        json,
    }
}

/// Startup in the C daemon's order, as named steps, then the main task.
async fn daemon(args: DaemonArgs) -> Result<(), DaemonError> {
    let seam = args.kernel.clone();
    crate::log::init(
        Some(&seam.log_file()),
        sinks(&args.config.options, args.syslog, args.log_json),
    );
    let mut signals = main_task::Signals::new()?;
    let _pid = pid_file(&*seam)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "dlm_controld {} started",
        env!("CARGO_PKG_VERSION")
    );
    let embedded = args.cluster == ClusterKind::Embedded;
    let (mut services, our, cluster_name) = connect(embedded)?;
    refuse_uncontrolled(&*seam, services.as_ref(), our)?;
    // 0. unfence ourselves before anyone can fence us (after that, joining the daemon
    //    group makes us fenceable)
    let unfence = async {
        agent::unfence(&args.config.file, our)
            .await
            .map_err(DaemonError::Unfence)
    };
    if before_signal(&mut signals, unfence).await?.is_none() {
        return Ok(());
    }
    // 1. configfs cluster attributes
    seam.setup_cluster(&startup::cluster_attrs(&args.config, &cluster_name))?;
    // 2. the monitor device, before our comms entry, kept open for our lifetime
    let _monitor = seam.open_misc("dlm-monitor")?;
    // 3. comms entries for the quorum members (or just us)
    let comms = Comms::new(seam.clone(), &args.config, our);
    let quorum = first_quorum(&comms, services.as_mut(), our);
    let Some(first) = before_signal(&mut signals, quorum).await? else {
        return Ok(());
    };
    // 4. the daemon group, its protocol and fencing
    let mut joined =
        join_daemon_group(&args, services.as_ref(), our, embedded, &first, comms).await?;
    negotiate(&mut joined.dg, services.as_ref()).await?;
    // 5. the plock device, uevents, then the loop
    let device = if args.config.options.on(crate::config::Opt::EnablePlock) {
        Some(Arc::new(seam.open_misc("dlm_plock")?))
    } else {
        None
    };
    let uevents = seam.open_uevents()?;
    let started = main_task::Started {
        args: &args,
        seam: &seam,
        device,
        uevents,
        our,
        embedded,
        dg: joined.dg,
        services,
        quorum: (first.qtx, first.qrx),
        facts: joined.facts,
        exits: joined.exits,
        run_exits: joined.run_exits,
        status: joined.status,
        signals,
    };
    main_task::run(started).await
}

/// `step`, unless SIGTERM or SIGINT comes first (`None`: the daemon exits, not yet a member
/// of its group). From the join on, a signal waits for the main loop, which leaves cleanly.
async fn before_signal<T>(
    signals: &mut main_task::Signals,
    step: impl Future<Output = Result<T, DaemonError>>,
) -> Result<Option<T>, DaemonError> {
    tokio::select! {
        r = step => r.map(Some),
        () = signals.recv() => {
            tracing::info!("signal during startup: exiting");
            Ok(None)
        }
    }
}

/// corosync's services (none for the embedded group), our node id and the cluster name.
fn connect(embedded: bool) -> Result<(Option<CorosyncServices>, u32, String), DaemonError> {
    let services = if embedded {
        None
    } else {
        Some(CorosyncServices::connect().map_err(DaemonError::Cluster)?)
    };
    let our = services.as_ref().map_or(EMBEDDED_NODEID, |s| s.nodeid);
    tracing::debug!("our_nodeid {our}");
    let cluster_name = services
        .as_ref()
        .map_or_else(|| "dlm".to_owned(), |s| s.cluster_name.clone());
    Ok((services, our, cluster_name))
}

/// Kernel lockspaces without a daemon: this node must be reset, not rejoin.
fn refuse_uncontrolled(
    seam: &dyn Kernel,
    services: Option<&CorosyncServices>,
    our: u32,
) -> Result<(), DaemonError> {
    let stale = seam.uncontrolled_lockspaces();
    if stale.is_empty() {
        return Ok(());
    }
    for n in &stale {
        tracing::error!("found uncontrolled lockspace {n}");
    }
    if let Some(s) = services {
        tracing::error!("tell corosync to remove nodeid {our} from cluster");
        if let Err(e) = s.cfg.kill_node(our, "dlm_controld") {
            tracing::error!("kill node {our}: {e}");
        }
    }
    Err(DaemonError::Uncontrolled(stale))
}

/// The cluster as the first quorum notification shows it (its nodes' comms entries
/// written).
struct FirstQuorum {
    quorum: QuorumView,
    ring_seq: u64,
    nodes: Vec<u32>,
    /// `cluster_joined_monotime` / `walltime`.
    joined: (u64, u64),
    qtx: watch::Sender<QuorumState>,
    qrx: watch::Receiver<QuorumState>,
}

async fn first_quorum(
    comms: &Comms,
    services: Option<&mut CorosyncServices>,
    our: u32,
) -> Result<FirstQuorum, DaemonError> {
    let two_node = services.as_ref().is_some_and(|s| s.two_node);
    let (qtx, qrx) = watch::channel(QuorumState {
        quorate: true,
        ring_seq: 0,
    });
    let mut q = FirstQuorum {
        quorum: QuorumView {
            quorate: true,
            quorate_since: monotonic_secs(),
            two_node,
        },
        ring_seq: 0,
        nodes: vec![our],
        joined: (monotonic_secs(), wall_secs()),
        qtx,
        qrx,
    };
    let Some(s) = services else {
        comms.add_loopback()?;
        return Ok(q);
    };
    let change = wait_quorum(s).await?;
    tracing::debug!(
        "cluster quorum {} seq {} nodes {}",
        u8::from(change.quorate),
        change.ring_seq,
        change.nodes.len()
    );
    for &n in &change.nodes {
        comms.add(s, n);
    }
    q.quorum.quorate = change.quorate;
    q.ring_seq = change.ring_seq;
    q.nodes.clone_from(&change.nodes);
    let _ = q.qtx.send(QuorumState {
        quorate: change.quorate,
        ring_seq: change.ring_seq,
    });
    Ok(q)
}

/// The daemon group joined, with what its shell reports on.
struct Joined {
    dg: DaemonGroup,
    facts: watch::Receiver<FenceFacts>,
    exits: mpsc::UnboundedReceiver<agent::AgentExit>,
    run_exits: mpsc::UnboundedReceiver<agent::RunExit>,
    status: query::SharedStatus,
}

async fn join_daemon_group(
    args: &DaemonArgs,
    services: Option<&CorosyncServices>,
    our: u32,
    embedded: bool,
    q: &FirstQuorum,
    comms: Comms,
) -> Result<Joined, DaemonError> {
    use crate::config::Opt;
    let o = &args.config.options;
    let opts = FenceOpts::from_options(o, q.quorum.two_node);
    let nodelist = services.map_or_else(|| vec![our], |s| s.nodelist.clone());
    let fencing = Fencing::new(our, opts, args.config.file.clone(), &nodelist, q.joined);
    let start = crate::daemon_core::Start {
        our,
        quorum: q.quorum,
        ring_seq: q.ring_seq,
        cluster_nodes: q.nodes.clone(),
        at: crate::daemon_core::Now {
            mono: q.joined.0,
            wall: q.joined.1,
        },
        embedded,
        helper: o.on(Opt::EnableHelper),
        quorum_lockspace: o.on(Opt::EnableQuorumLockspace),
    };
    let core = crate::daemon_core::DaemonCore::new(start, fencing, opts);
    let status: query::SharedStatus =
        Arc::new(std::sync::Mutex::new(crate::status::DaemonStatus {
            our,
            quorate: q.quorum.quorate,
            cluster_ringid: q.ring_seq,
            ..Default::default()
        }));
    let (facts_tx, facts) = watch::channel(core.facts());
    let (agents, exits) = mpsc::unbounded_channel();
    let (runs, run_exits) = mpsc::unbounded_channel();
    let group = ClusterGroup::join(embedded, our, DAEMON_GROUP_NAME, false)
        .await
        .map_err(DaemonError::Cluster)?;
    let dg = DaemonGroup::new(
        group,
        core,
        status.clone(),
        facts_tx,
        daemon_group::Exits { agents, runs },
        comms,
    );
    Ok(Joined {
        dg,
        facts,
        exits,
        run_exits,
        status,
    })
}

/// Waits (60 s at most) for the protocol negotiation; then fencing work may begin
/// (`daemon_fence_allow`).
async fn negotiate(
    dg: &mut DaemonGroup,
    services: Option<&CorosyncServices>,
) -> Result<(), DaemonError> {
    let negotiated = async {
        loop {
            while let Some(ev) = dg.group.poll_event() {
                dg.event(ev, services);
            }
            if let Some(r) = dg.negotiated() {
                return r.map_err(DaemonError::Protocol);
            }
            let ev = dg.group.next_event().await.map_err(DaemonError::Cluster)?;
            dg.event(ev, services);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), negotiated)
        .await
        .map_err(|_| DaemonError::Timeout("daemon protocol negotiation within 60 s"))??;
    dg.start_fencing(services);
    Ok(())
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
    Err(DaemonError::Timeout("a quorum notification within 60 s"))
}

/// Writes the comms entries of cluster nodes (`add_configfs_node`, `del_configfs_node`);
/// which nodes is the core's (`Action::AddComms`, `Action::DelComms`).
#[derive(Debug, Clone)]
pub(super) struct Comms {
    seam: Arc<dyn Kernel>,
    marks: std::collections::BTreeMap<u32, u32>,
    our: u32,
}

impl Comms {
    fn new(seam: Arc<dyn Kernel>, cfg: &Config, our: u32) -> Self {
        Self {
            seam,
            marks: cfg.file.node_marks.clone(),
            our,
        }
    }

    fn mark(&self, n: u32) -> u32 {
        self.marks.get(&n).copied().unwrap_or(0)
    }

    /// Our own entry on 127.0.0.1 (the embedded group: no corosync).
    fn add_loopback(&self) -> Result<(), SeamError> {
        let mut addr = [0u8; 128];
        addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]);
        self.seam
            .add_comms_node(self.our, &addr, true, self.mark(self.our))
    }

    /// An entry for each of the addresses corosync has for node `n`.
    pub(super) fn add(&self, s: &CorosyncServices, n: u32) {
        for a in s.addrs(n) {
            let local = n == self.our;
            if let Err(e) = self.seam.add_comms_node(n, &a.storage, local, self.mark(n)) {
                tracing::error!("{e}");
            }
        }
    }

    /// Node `n`'s entry goes.
    pub(super) fn del(&self, n: u32) {
        if let Err(e) = self.seam.del_comms_node(n) {
            tracing::debug!("{e}");
        }
    }
}

/// What every lockspace task shares with the main task.
#[derive(Debug, Clone)]
pub(crate) struct LsContext {
    pub(crate) seam: Arc<dyn Kernel>,
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
    /// This build's own plock options of dlm.conf, read at start.
    pub(crate) plock: PlockConf,
    /// The plock device reader's bell (`polled.rs`): when there is a reader, it
    /// dispatches the lockspaces' corosync groups.
    pub(crate) bell: Option<Arc<polled::Bell>>,
}

/// This build's own plock options of dlm.conf, with their defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlockConf {
    /// `plock_native` (docs/native-mode.md): our STARTs offer native mode.
    pub(crate) native: bool,
    /// `plock_native_sync_ms`: how often our local decisions go to the other members'
    /// tables (`None`: only when they must, docs/native-mode.md).
    pub(crate) native_sync: Option<Duration>,
    /// `plock_deadlock_detect`: our STARTs offer deadlock detection.
    pub(crate) deadlock: bool,
    /// `c_peers_apply_cancel`: our STARTs say the C members apply CANCEL.
    pub(crate) c_peers_cancel: bool,
    /// `plock_locks_max` (0: no bound).
    pub(crate) locks_max: usize,
    /// `plock_spin_us`, the longest spin window (zero: the reader sleeps as soon as the
    /// device is empty).
    pub(crate) spin: Duration,
}

impl PlockConf {
    /// What dlm.conf says, or the defaults.
    pub(crate) fn of(file: &crate::config::ConfFile) -> Self {
        let sync_ms = file
            .plock_native_sync_ms
            .unwrap_or(crate::config::NATIVE_SYNC_MS_DEFAULT);
        let locks_max = file
            .plock_locks_max
            .unwrap_or(crate::config::PLOCK_LOCKS_MAX_DEFAULT);
        Self {
            native: file.plock_native.unwrap_or(true),
            native_sync: (sync_ms != 0).then(|| Duration::from_millis(u64::from(sync_ms))),
            deadlock: file.plock_deadlock_detect.unwrap_or(false),
            c_peers_cancel: file.c_peers_apply_cancel.unwrap_or(false),
            locks_max: usize::try_from(locks_max).unwrap_or(usize::MAX),
            spin: Duration::from_micros(u64::from(
                file.plock_spin_us
                    .unwrap_or(crate::config::PLOCK_SPIN_US_DEFAULT),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plock_options_take_their_defaults_and_what_dlm_conf_says() {
        let of = |text| PlockConf::of(&crate::config::parse_conf(text).expect("parses"));
        let d = of("");
        assert!(d.native && !d.deadlock && !d.c_peers_cancel);
        assert_eq!(d.native_sync, Some(Duration::from_secs(10)));
        assert_eq!(d.locks_max, 1_000_000);
        assert_eq!(d.spin, Duration::from_millis(1));
        let c = of("plock_native=0\nplock_native_sync_ms=0\nplock_locks_max=5\nplock_spin_us=0\n");
        assert!(!c.native);
        assert_eq!(
            (c.native_sync, c.locks_max, c.spin),
            (None, 5, Duration::ZERO)
        );
        assert_eq!(
            of("plock_native_sync_ms=250\n").native_sync,
            Some(Duration::from_millis(250))
        );
    }

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
