//! The main socket `\0dlmc_sock` (libdlmcontrol's "action" socket): commands that change
//! state. A connection stays open for any number of requests until the client closes
//! (RUN_START closes after its reply), as C's does.
//!
//! Unlike C, which lets any local user `fence_ack` a node, every command here needs the
//! peer to be root (SO_PEERCRED uid 0). A non-root connection (admitted within the bounds
//! of `admission`) gets one request, which is refused, logged and answered `-EPERM` where
//! the command has a reply, and is then closed: no other user holds this socket open.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dlm_proto::query::{Command, DlmcHeader, EXTRA_SIZE, HEADER_SIZE, MAIN_SOCK_NAME, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::admission::{Acceptor, Gate, Permit, unix_uid};
use crate::rate::LogEvery;

/// What the main task must do for a client.
#[derive(Debug)]
pub(crate) enum ControlCmd {
    /// `dlm_tool reload_config`.
    Reload,
    /// `dlm_tool set_config`: the `key=val ` text.
    SetConfig(String),
    /// `dlm_tool fence_ack <nodeid>`.
    FenceAck(u32),
    /// `dlm_tool run`: rv and the run's uuid.
    RunStart {
        /// Node to run on, 0 all.
        dest: i32,
        /// `RUN_START_NODE_*`.
        flags: u32,
        /// The command line.
        command: Vec<u8>,
        /// (rv, uuid).
        reply: tokio::sync::oneshot::Sender<(i32, String)>,
    },
    /// `dlm_tool run_check`: rv and the status bits.
    RunCheck {
        /// The run.
        uuid: String,
        /// `RUN_CHECK_*`.
        flags: u32,
        /// (rv, status).
        reply: tokio::sync::oneshot::Sender<(i32, u32)>,
    },
}

/// Binds the abstract main socket (address length 12, no trailing NUL).
pub(crate) fn bind() -> io::Result<UnixListener> {
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(MAIN_SOCK_NAME)?;
    let l = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    UnixListener::from_std(l)
}

/// Accepts forever; each admitted connection gets its own task.
pub(crate) async fn serve(
    listener: UnixListener,
    gate: Gate,
    tx: mpsc::UnboundedSender<ControlCmd>,
) {
    let mut acceptor = Acceptor::new("main", gate);
    let refusals = Arc::new(Mutex::new(LogEvery::default()));
    let mut next = 0u64;
    loop {
        let ((stream, _), permit) = acceptor
            .next(|| listener.accept(), |(s, _)| unix_uid(s))
            .await;
        next += 1;
        let tx = tx.clone();
        let ci = next;
        let refusals = refusals.clone();
        tokio::spawn(async move {
            let r = if permit.is_root() {
                connection(stream, tx, ci).await
            } else {
                refuse(stream, &permit, ci, &refusals).await
            };
            if let Err(e) = r {
                tracing::debug!("connection {ci} read error {e}");
            }
        });
    }
}

/// A non-root peer's one request: read within its header timeout, refused, closed.
async fn refuse(
    mut s: UnixStream,
    permit: &Permit,
    ci: u64,
    log: &Mutex<LogEvery>,
) -> io::Result<()> {
    let mut hb = [0u8; HEADER_SIZE];
    let Ok(read) = tokio::time::timeout(permit.header_timeout(), s.read_exact(&mut hb)).await
    else {
        return Ok(());
    };
    read?;
    let m = crate::metrics::get();
    let Ok(h) = DlmcHeader::decode(&hb) else {
        m.socket_requests
            .with_label_values(&["main", "none", "bad"])
            .inc();
        return Ok(());
    };
    // the body too (bounded, in the same time), so the client's write of it does not meet a
    // closed socket (EPIPE) before it reads our answer
    let mut extra = vec![0u8; Request::extra_len(&h).min(EXTRA_SIZE)];
    if tokio::time::timeout(permit.header_timeout(), s.read_exact(&mut extra))
        .await
        .is_err()
    {
        return Ok(());
    }
    let label = h.command.name().unwrap_or("unknown");
    m.socket_requests
        .with_label_values(&["main", label, "refused"])
        .inc();
    let held = log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .allow(crate::clock::monotonic_ms());
    if let Some(held) = held {
        tracing::error!(
            "connection {ci}: command {} refused for uid {}: needs root ({held} more not logged)",
            h.command.0,
            permit.uid()
        );
    }
    let denied = DlmcHeader {
        name: h.name,
        data: -EPERM,
        ..DlmcHeader::new(h.command)
    };
    match h.command {
        Command::FS_REGISTER | Command::FS_NOTIFIED | Command::RUN_START => {
            reply(&mut s, denied, &[]).await
        }
        Command::RUN_CHECK => reply(&mut s, denied, &0u32.to_ne_bytes()).await,
        _ => Ok(()),
    }
}

use dlm_proto::errno::{EOPNOTSUPP, EPERM};

async fn reply(s: &mut UnixStream, h: DlmcHeader, payload: &[u8]) -> io::Result<()> {
    let h = h.with_payload_len(payload.len());
    s.write_all(&h.encode()).await?;
    s.write_all(payload).await
}

async fn connection(
    mut s: UnixStream,
    tx: mpsc::UnboundedSender<ControlCmd>,
    ci: u64,
) -> io::Result<()> {
    while let Some((h, req)) = read_request(&mut s, ci).await? {
        if !answer(&mut s, &tx, ci, h, req).await? {
            break;
        }
    }
    Ok(())
}

/// The next request of connection `ci`, counted; `None` at its end or when it sent
/// something that is not a request (logged, and the connection closed).
async fn read_request(s: &mut UnixStream, ci: u64) -> io::Result<Option<(DlmcHeader, Request)>> {
    let mut hb = [0u8; HEADER_SIZE];
    match s.read_exact(&mut hb).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let count = |label: &str, result: &str| {
        crate::metrics::get()
            .socket_requests
            .with_label_values(&["main", label, result])
            .inc();
    };
    let h = match DlmcHeader::decode(&hb) {
        Ok(h) => h,
        Err(e) => {
            count("none", "bad");
            tracing::error!("connection {ci}: {e}");
            return Ok(None);
        }
    };
    let label = h.command.name().unwrap_or("unknown");
    let mut extra = vec![0u8; Request::extra_len(&h).min(EXTRA_SIZE)];
    // a client that announces extra bytes and never sends them is dropped
    if tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut extra))
        .await
        .is_err()
    {
        tracing::error!("connection {ci}: request body not sent");
        return Ok(None);
    }
    match Request::decode(&h, &extra) {
        Ok(r) => {
            count(label, "ok");
            Ok(Some((h, r)))
        }
        Err(e) => {
            count(label, "bad");
            tracing::error!("connection {ci}: {e}");
            Ok(None)
        }
    }
}

/// Hands request `req` to the main task and writes its reply (`process_connection`);
/// `false` when the connection ends with it (a run's start, as C).
async fn answer(
    s: &mut UnixStream,
    tx: &mpsc::UnboundedSender<ControlCmd>,
    ci: u64,
    h: DlmcHeader,
    req: Request,
) -> io::Result<bool> {
    let base = DlmcHeader {
        name: h.name,
        ..DlmcHeader::new(h.command)
    };
    match req {
        Request::ReloadConfig => {
            let _ = tx.send(ControlCmd::Reload);
        }
        Request::SetConfig { text } => {
            let _ = tx.send(ControlCmd::SetConfig(
                String::from_utf8_lossy(&text).into_owned(),
            ));
        }
        Request::FenceAck { nodeid } => match u32::try_from(nodeid) {
            Ok(n) if n > 0 => {
                let _ = tx.send(ControlCmd::FenceAck(n));
            }
            _ => tracing::error!("fence_ack {nodeid}: not a node id"),
        },
        // fs_controld mode (enable_fscontrol) is not supported, as with C's default
        Request::FsRegister(_) => {
            let r = DlmcHeader {
                data: -EOPNOTSUPP,
                ..base
            };
            reply(s, r, &[]).await?;
        }
        Request::FsNotified { nodeid, .. } => {
            let r = DlmcHeader {
                option: u32::try_from(nodeid).unwrap_or(0),
                data: -EOPNOTSUPP,
                ..base
            };
            reply(s, r, &[]).await?;
        }
        Request::FsUnregister(_) => {}
        Request::RunStart {
            dest_nodeid,
            flags,
            command,
        } => {
            run_start(s, tx, base, dest_nodeid, flags.0, command).await?;
            return Ok(false);
        }
        Request::RunCheck { uuid, flags } => run_check(s, tx, base, &uuid, flags.0).await?,
        _ => {
            tracing::error!("process_connection {ci} unknown command {}", h.command.0);
        }
    }
    Ok(true)
}

/// `dlm_tool run`: the main task starts the run; the reply names it by its uuid.
async fn run_start(
    s: &mut UnixStream,
    tx: &mpsc::UnboundedSender<ControlCmd>,
    base: DlmcHeader,
    dest: i32,
    flags: u32,
    command: Vec<u8>,
) -> io::Result<()> {
    let (otx, orx) = tokio::sync::oneshot::channel();
    let _ = tx.send(ControlCmd::RunStart {
        dest,
        flags,
        command,
        reply: otx,
    });
    let (rv, uuid) = orx.await.unwrap_or((-1, String::new()));
    let mut name = [0u8; 64];
    let n = uuid.len().min(64);
    name[..n].copy_from_slice(&uuid.as_bytes()[..n]);
    let r = DlmcHeader {
        data: rv,
        name,
        ..base
    };
    reply(s, r, &[]).await
}

/// `dlm_tool run_check`: the run's status from the main task.
async fn run_check(
    s: &mut UnixStream,
    tx: &mpsc::UnboundedSender<ControlCmd>,
    base: DlmcHeader,
    uuid: &[u8],
    flags: u32,
) -> io::Result<()> {
    let (otx, orx) = tokio::sync::oneshot::channel();
    let _ = tx.send(ControlCmd::RunCheck {
        uuid: String::from_utf8_lossy(uuid).into_owned(),
        flags,
        reply: otx,
    });
    let (rv, status) = orx.await.unwrap_or((-1, 0));
    let r = DlmcHeader { data: rv, ..base };
    reply(s, r, &status.to_ne_bytes()).await
}
