//! The daemon's runtime: startup in the C daemon's order, then one tokio task per
//! lockspace (it owns its group and its membership machine; nothing is shared) and a main
//! task for uevents, the once-a-second retry and signals.
//!
//! This first version runs on the embedded single-member group only; the corosync path,
//! fencing, the query sockets and the plock path come next (see docs/ARCHITECTURE.md).

mod lockspace;
mod startup;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use dlm_cpg::{EmbeddedGroup, Event, Group};
use dlm_proto::kernel::{Uevent, UeventAction};
use dlm_proto::wire::{Body, Message};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::daemon_proto::{DaemonProtocol, Out, QuorumView};
use crate::kernel::{KernelRoot, SeamError};

pub use lockspace::LsCommand;

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
    /// Not available in this build yet.
    #[error("{0} is not implemented yet")]
    Unsupported(&'static str),
}

const OUR_NODEID: u32 = 1;

/// Takes the pid file with an exclusive lock: a second daemon is refused.
fn pid_file(seam: &KernelRoot) -> Result<fs::File, DaemonError> {
    let path = seam.path("run/dlm_controld/dlm_controld.pid");
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| DaemonError::Io("pid file directory", e))?;
    }
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| DaemonError::Io("pid file", e))?;
    nix::fcntl::Flock::lock(
        f.try_clone().map_err(|e| DaemonError::Io("pid file", e))?,
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .map(std::mem::forget)
    .map_err(|_| DaemonError::AlreadyRunning(path.display().to_string()))?;
    f.set_len(0).map_err(|e| DaemonError::Io("pid file", e))?;
    fs::write(&path, format!("{}\n", std::process::id()))
        .map_err(|e| DaemonError::Io("pid file", e))?;
    Ok(f)
}

/// Agrees the daemon protocol on the daemon group (`set_protocol`).
fn negotiate(group: &mut EmbeddedGroup, proto: &mut DaemonProtocol) -> Result<(), DaemonError> {
    let q = QuorumView {
        quorate: true,
        quorate_since: 0,
        two_node: false,
    };
    for _ in 0..1000 {
        let Some(ev) = group.poll_event() else { break };
        let out = match ev {
            Event::ConfChg {
                members,
                left,
                joined,
            } => proto.handle_confchg(
                0,
                &members.iter().map(|m| m.nodeid).collect::<Vec<_>>(),
                &left
                    .iter()
                    .map(|m| (m.nodeid, m.reason.to_raw()))
                    .collect::<Vec<_>>(),
                &joined.iter().map(|m| m.nodeid).collect::<Vec<_>>(),
            ),
            Event::Deliver {
                nodeid, payload, ..
            } => match Message::decode(&payload) {
                Ok(Message {
                    body: Body::Protocol(p),
                    ..
                }) => proto.handle_protocol(nodeid, &p, q, false),
                _ => Vec::new(),
            },
            Event::Totem { .. } => Vec::new(),
        };
        for o in out {
            if let Out::SendProtocol(p) = o {
                let _ = group.mcast(&p.encode(OUR_NODEID));
            }
        }
        if let Some(r) = proto.negotiated() {
            r?;
            return Ok(());
        }
    }
    Err(DaemonError::Unsupported(
        "daemon protocol negotiation did not finish",
    ))
}

/// Runs the daemon until SIGTERM/SIGINT with no lockspace left.
pub fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    if args.cluster == ClusterKind::Corosync {
        return Err(DaemonError::Unsupported(
            "the corosync cluster (use --cluster embedded)",
        ));
    }
    let seam = args.kernel_root.clone();
    let _pid = pid_file(&seam)?;
    // 1. configfs cluster attributes
    startup::setup_configfs(&seam, &args.config, "dlm")?;
    // 2. the monitor device, before our comms entry, kept open for our lifetime
    let _monitor = seam.open_misc("dlm-monitor")?;
    // 3. our comms entry: node 1 on 127.0.0.1
    let mut addr = [0u8; 128];
    addr[..8].copy_from_slice(&[2, 0, 0, 0, 127, 0, 0, 1]);
    let mark = args
        .config
        .file
        .node_marks
        .get(&OUR_NODEID)
        .copied()
        .unwrap_or(0);
    startup::add_node(&seam, OUR_NODEID, &addr, true, mark)?;
    // 4. the daemon group and its protocol
    let mut daemon_group = EmbeddedGroup::join(OUR_NODEID, std::process::id(), true);
    let mut proto = DaemonProtocol::new(OUR_NODEID);
    negotiate(&mut daemon_group, &mut proto)?;
    // 5. uevents, then the loop
    let uevents = seam.open_uevents()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DaemonError::Io("tokio runtime", e))?;
    rt.block_on(main_loop(args, seam, uevents))
}

async fn main_loop(
    args: DaemonArgs,
    seam: KernelRoot,
    uevents: crate::kernel::UeventSource,
) -> Result<(), DaemonError> {
    // SAFETY: UeventFd owns the descriptor; it stays open and the same for as long as the
    // AsyncFd that owns the UeventFd.
    let uevents = unsafe {
        AsyncFd::register_with_interest(UeventFd(uevents), tokio::io::Interest::READABLE)
    }
    .map_err(|e| DaemonError::Io("uevent registration", e.into()))?;
    let mut lockspaces: BTreeMap<String, mpsc::UnboundedSender<LsCommand>> = BTreeMap::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| DaemonError::Io("SIGTERM handler", e))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| DaemonError::Io("SIGINT handler", e))?;
    let mut quit = false;
    loop {
        if quit && lockspaces.is_empty() {
            return Ok(());
        }
        tokio::select! {
            r = uevents.readable() => {
                let Ok(mut guard) = r else { continue };
                match guard.get_inner().0.try_recv() {
                    Ok(bytes) if bytes.is_empty() => return Err(DaemonError::Io("uevent source", io::Error::from(io::ErrorKind::UnexpectedEof))),
                    Ok(bytes) => handle_uevent(&args, &seam, &bytes, &mut lockspaces, &done_tx),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                    Err(e) => return Err(DaemonError::Io("uevent source", e)),
                }
            }
            Some(name) = done_rx.recv() => {
                lockspaces.remove(&name);
            }
            _ = tick.tick() => {
                for tx in lockspaces.values() {
                    let _ = tx.send(LsCommand::Poll);
                }
            }
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

fn handle_uevent(
    args: &DaemonArgs,
    seam: &KernelRoot,
    bytes: &[u8],
    lockspaces: &mut BTreeMap<String, mpsc::UnboundedSender<LsCommand>>,
    done: &mpsc::UnboundedSender<String>,
) {
    let Ok(ev) = Uevent::parse(bytes) else { return };
    let name = ev.lockspace.to_str_lossy().into_owned();
    match ev.action {
        UeventAction::Online => {
            if lockspaces.contains_key(&name) {
                return; // -EEXIST: already known, no event_done
            }
            let conf = args
                .config
                .file
                .lockspaces
                .get(&name)
                .cloned()
                .unwrap_or_default();
            let (tx, rx) = mpsc::unbounded_channel();
            lockspaces.insert(name, tx);
            tokio::spawn(lockspace::run(
                ev.lockspace,
                conf,
                seam.clone(),
                OUR_NODEID,
                rx,
                done.clone(),
            ));
        }
        UeventAction::Offline => {
            if let Some(tx) = lockspaces.get(&name) {
                let _ = tx.send(LsCommand::Leave);
            }
        }
    }
}
