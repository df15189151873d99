//! The query socket `\0dlmc_query_sock` (libdlmcontrol, `dlm_tool`): one request per
//! connection, answered by its own task so a slow reader delays no one, and without
//! stopping the lockspaces (the C daemon holds its global lock while it writes a dump).
//!
//! Commands served: 1 DUMP_DEBUG, 2 DUMP_PLOCKS, 3 LOCKSPACE_INFO, 4 NODE_INFO,
//! 5 LOCKSPACES, 6 LOCKSPACE_NODES (3–6 from the report each lockspace task publishes at
//! its membership changes: no wait behind plock work), 11 DUMP_LOG_PLOCK, 13 DUMP_STATUS,
//! 14 DUMP_CONFIG,
//! 17 DUMP_RUN (the runs this node knows, as `dlm_tool run_list` prints them).
//! Others close the connection without a reply, as C does for commands it does not know
//! on this socket.

use std::collections::BTreeMap;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlm_proto::LockspaceName;
use dlm_proto::query::{
    Command, DUMP_SIZE, DlmcHeader, DlmcNode, FLAG_DUMP_AGES, FLAG_UNCAPPED_DUMP, FailReason,
    HEADER_SIZE, LOCKSPACE_SIZE, NodeFlags, NodesKind, QUERY_SOCK_NAME, Request,
};
use nix::sys::socket::{SockFlag, accept4};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream as StdStream;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::admission::{Acceptor, Gate, Permit, std_unix_uid};
use super::lockspace::LsCommand;
use crate::lscore::LsReport;

/// The current `dump_config` text, replaced by `reload_config`/`set_config`.
pub(crate) type ConfigDump = Arc<Mutex<Arc<String>>>;

/// The daemon-wide state DUMP_STATUS reports, kept current by the main task.
pub(crate) type SharedStatus = Arc<Mutex<crate::status::DaemonStatus>>;

/// The lockspace tasks, by name, shared with the main task.
pub(crate) type Registry = Arc<Mutex<Tasks>>;
/// The lockspace tasks by name.
pub(crate) type Tasks = BTreeMap<String, LsHandle>;

/// A lockspace task as the registry holds it: its command queue, and its shell as the plock
/// device's reader reaches it.
#[derive(Debug, Clone)]
pub(crate) struct LsHandle {
    pub(crate) tx: mpsc::UnboundedSender<LsCommand>,
    pub(crate) direct: Arc<super::lockspace::Direct>,
}

/// Each lockspace's report as its task last published it (at every membership change and
/// once a second): `dlm_tool ls` is answered from it without waiting for the task, which
/// may be busy with plock work.
pub(crate) type Published = Arc<Mutex<BTreeMap<String, Arc<LsReport>>>>;

/// The query socket, registered with the clients thread's reactor for accepts only: a
/// connection is accepted non-blocking and not registered until it must wait.
pub(crate) type Listener = AsyncFd<std::os::unix::net::UnixListener>;

/// Binds the abstract query socket (address length 18, no trailing NUL).
pub(crate) fn bind() -> io::Result<Listener> {
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(QUERY_SOCK_NAME)?;
    let l = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    // SAFETY: the AsyncFd owns the listener, so the descriptor stays open and unchanged
    // for as long as it is registered.
    unsafe { AsyncFd::register_with_interest(l, Interest::READABLE) }.map_err(io::Error::from)
}

/// The next connection, non-blocking and not registered with the reactor.
async fn accept(l: &Listener) -> io::Result<StdStream> {
    loop {
        let mut ready = l.readable().await?;
        let fd = l.get_ref().as_raw_fd();
        let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
        match ready.try_io(|_| accept4(fd, flags).map_err(io::Error::from)) {
            // SAFETY: accept4 returned a new descriptor that nothing else owns.
            Ok(r) => return r.map(|fd| unsafe { StdStream::from_raw_fd(fd) }),
            Err(_would_block) => {}
        }
    }
}

/// Accepts forever. A request whose answer needs no lockspace task (the published
/// reports, the daemon's status, the configuration, the runs) is answered on this thread,
/// as C answers: at once when its header is there at accept, else by a task here that
/// waits once for the header (a client that connects and then writes is served at this
/// thread's priority, not queued behind the load on an ordinary thread). Any other
/// connection gets a task of its own on `conns`'s runtime (`main_task::spawn_conns`: an
/// ordinary thread, not held to this one's CPU budget), where long answers (plock dumps),
/// headers sent in pieces and slow readers are served.
pub(crate) async fn serve(
    listener: Listener,
    gate: Gate,
    registry: Registry,
    config_dump: ConfigDump,
    status: SharedStatus,
    conns: tokio::runtime::Handle,
) {
    let mut acceptor = Acceptor::new("query", gate);
    loop {
        let (stream, permit) = acceptor.next(|| accept(&listener), std_unix_uid).await;
        let c = Conn {
            permit,
            registry: registry.clone(),
            config_dump: config_dump.lock().map(|d| d.clone()).unwrap_or_default(),
            status: status.clone(),
            conns: conns.clone(),
            t0: std::time::Instant::now(),
        };
        match at_once(&stream, &c) {
            Start::Done => {}
            Start::Later(Later::Header(buf, have)) => {
                tokio::spawn(header_then_answer(stream, buf, have, c));
            }
            Start::Later(later) => c.hand_off(stream, later),
        }
    }
}

/// One accepted connection's context, from accept to its answer.
struct Conn {
    permit: Permit,
    registry: Registry,
    config_dump: Arc<String>,
    status: SharedStatus,
    conns: tokio::runtime::Handle,
    t0: std::time::Instant,
}

impl Conn {
    /// When the whole header must be there: the permit's timeout, counted from the accept
    /// on whichever thread reads it.
    fn header_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.t0) + self.permit.header_timeout()
    }

    /// The connection's task on `conns`'s runtime, registered with its reactor there.
    fn hand_off(self, stream: StdStream, later: Later) {
        let conns = self.conns.clone();
        conns.spawn(async move {
            let Ok(stream) = UnixStream::from_std(stream) else {
                return;
            };
            // a client that never reads its answer is dropped, not waited for forever
            let _ = tokio::time::timeout(Duration::from_secs(10), connection(stream, later, self))
                .await;
        });
    }
}

/// On the clients thread: one wait for the rest of the header (`dlm_tool` writes it whole,
/// just after its connect), within the permit's header timeout; then as [`at_once`]. A
/// header still short after it is read on `conns`'s runtime, so a client that sends its
/// request a few bytes at a time wakes this thread at most twice.
async fn header_then_answer(stream: StdStream, mut buf: [u8; HEADER_SIZE], have: usize, c: Conn) {
    let Ok(s) = UnixStream::from_std(stream) else {
        return;
    };
    let read = tokio::time::timeout_at(c.header_deadline(), read_more(&s, &mut buf[have..])).await;
    let Ok(Ok(n)) = read else {
        return;
    };
    // off this reactor: answered here without waiting, or served on conns's
    let Ok(stream) = s.into_std() else {
        return;
    };
    match answer_now(&stream, &buf, have + n, &c) {
        Start::Later(later) => c.hand_off(stream, later),
        Start::Done => {}
    }
}

/// The bytes there once the socket is readable: how many (at least one; end of stream is
/// an error).
async fn read_more(s: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

/// What [`at_once`] leaves to do.
#[derive(Debug)]
enum Start {
    /// Answered, or closed.
    Done,
    /// For a connection's task on `conns`'s runtime.
    Later(Later),
}

/// Where a connection's task on `conns`'s runtime takes over.
#[derive(Debug)]
enum Later {
    /// The header's first bytes (how many), after the clients thread waited once.
    Header([u8; HEADER_SIZE], usize),
    /// A whole request, whose answer needs a lockspace task or may be long.
    Request(DlmcHeader, Request),
    /// An answer's bytes the socket did not take at once.
    Rest(DlmcHeader, Vec<u8>),
}

/// Reads what is there of the request without waiting; answers it if it can be answered
/// now, writing what the socket takes.
fn at_once(s: &StdStream, c: &Conn) -> Start {
    use std::io::Read;
    let mut buf = [0u8; HEADER_SIZE];
    let have = match (&*s).read(&mut buf) {
        Ok(0) => return Start::Done,
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(_) => return Start::Done,
    };
    answer_now(s, &buf, have, c)
}

/// The request's first `have` bytes read: if the header is whole and its answer needs no
/// lockspace task, the answer written now, as much of it as the socket takes.
fn answer_now(s: &StdStream, buf: &[u8; HEADER_SIZE], have: usize, c: &Conn) -> Start {
    if have < HEADER_SIZE {
        return Start::Later(Later::Header(*buf, have));
    }
    let Some((h, req)) = decode(buf) else {
        return Start::Done;
    };
    let Some(mut bytes) = bytes_now(c, &h, &req) else {
        return Start::Later(Later::Request(h, req));
    };
    let sent = write_now(s, &bytes);
    if sent < bytes.len() {
        bytes.drain(..sent);
        return Start::Later(Later::Rest(h, bytes));
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    answered(&h, Ok(true), c.t0);
    Start::Done
}

/// Writes what the socket takes without waiting; how many bytes.
fn write_now(s: &StdStream, bytes: &[u8]) -> usize {
    use std::io::Write;
    let mut sent = 0;
    while sent < bytes.len() {
        match (&*s).write(&bytes[sent..]) {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // WouldBlock: the rest goes from a task; any other error shows there too
            Err(_) => break,
        }
    }
    sent
}

/// The whole answer to `req`, as it goes on the socket, if it needs no lockspace task and
/// is short; `None` for the others.
fn bytes_now(c: &Conn, h: &DlmcHeader, req: &Request) -> Option<Vec<u8>> {
    // DUMP_STATUS has no reply header: its records, to the end of the stream
    if matches!(req, Request::DumpStatus) {
        return Some(status_bytes(&c.status));
    }
    let (reply, payload) = reply_now(&c.registry, &c.config_dump, &c.status, req)?;
    let mut bytes = reply_header(h, reply, payload.len()).encode().to_vec();
    bytes.extend_from_slice(&payload);
    Some(bytes)
}

/// The answer to `req` if it needs no lockspace task and is short (every report it reads
/// published); `None` for the others.
fn reply_now(
    reg: &Registry,
    config_dump: &Arc<String>,
    status: &SharedStatus,
    req: &Request,
) -> Option<Reply> {
    Some(match req {
        Request::NodeInfo { lockspace, nodeid } => {
            node_info_of(published(reg, lockspace)?.as_deref(), *nodeid)
        }
        Request::LockspaceInfo(name) => lockspace_info_of(published(reg, name)?.as_deref()),
        Request::Lockspaces { .. } => lockspaces_of(&all_published(reg)?),
        Request::LockspaceNodes {
            lockspace,
            kind,
            max,
        } => lockspace_nodes_of(published(reg, lockspace)?.as_deref(), *kind, *max),
        Request::DumpRun => run_list(status),
        Request::DumpConfig => config(config_dump),
        _ => return None,
    })
}

/// A lockspace's published report: `Some(None)` when there is no such lockspace, `None`
/// when it has not published yet (its task must be asked).
fn published(reg: &Registry, name: &LockspaceName) -> Option<Option<Arc<LsReport>>> {
    let name = name.to_str_lossy();
    match published_named(&name) {
        Some(r) => Some(Some(r)),
        None if !reg.lock().ok()?.contains_key(&*name) => Some(None),
        None => None,
    }
}

/// Every lockspace's published report, in name order; `None` when one has not published.
fn all_published(reg: &Registry) -> Option<Vec<Arc<LsReport>>> {
    let names: Vec<String> = reg.lock().ok()?.keys().cloned().collect();
    names.iter().map(|n| published_named(n)).collect()
}

/// The report the lockspace named `name` last published, if any.
fn published_named(name: &str) -> Option<Arc<LsReport>> {
    PUBLISHED.get()?.lock().ok()?.get(name).cloned()
}

/// A request's header and its decoded form; a bad one is counted and logged.
fn decode(buf: &[u8; HEADER_SIZE]) -> Option<(DlmcHeader, Request)> {
    let m = crate::metrics::get();
    let h = match DlmcHeader::decode(buf) {
        Ok(h) => h,
        Err(e) => {
            // bad header: closed without a reply
            m.socket_requests
                .with_label_values(&["query", "none", "bad"])
                .inc();
            tracing::error!("query socket: {e}");
            return None;
        }
    };
    match Request::decode(&h, &[]) {
        Ok(r) => Some((h, r)),
        Err(e) => {
            let label = h.command.name().unwrap_or("unknown");
            m.socket_requests
                .with_label_values(&["query", label, "bad"])
                .inc();
            tracing::error!("query socket: {e}");
            None
        }
    }
}

/// Counts a request's outcome and how long it took.
fn answered(h: &DlmcHeader, r: Result<bool, &io::Error>, t0: std::time::Instant) {
    let m = crate::metrics::get();
    let label = h.command.name().unwrap_or("unknown");
    let outcome = match r {
        Ok(true) => "ok",
        Ok(false) => "unserved",
        Err(_) => "io_error",
    };
    m.socket_requests
        .with_label_values(&["query", label, outcome])
        .inc();
    m.query_seconds
        .with_label_values(&[label])
        .observe(t0.elapsed().as_secs_f64());
}

use dlm_proto::errno::{ENOENT, ENOSPC};
/// Largest payload a reply header's `len` (u32, header included) can describe.
const MAX_REPLY: usize = u32::MAX as usize - HEADER_SIZE;

/// Plock dumps being made at once; further ones wait their turn (each holds up to its text,
/// about 100 MB at 10⁶ locks uncapped, and a share of its lockspace task's time).
const DUMPS_AT_ONCE: usize = 2;
static DUMPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(DUMPS_AT_ONCE);

/// A lockspace's plock dump, asked for a portion at a time (the task serves its requests in
/// between), up to `cap` bytes: a capped dump (C's dlm_tool, 1 MiB) stops there.
/// `None` when the lockspace ends first.
async fn plock_dump(
    tx: &mpsc::UnboundedSender<LsCommand>,
    ages: bool,
    cap: usize,
) -> Option<String> {
    let _turn = DUMPS.acquire().await.ok()?;
    let mut job = None;
    loop {
        let (rtx, rrx) = oneshot::channel();
        tx.send(LsCommand::DumpPlocks(job.take(), ages, rtx)).ok()?;
        let j = rrx.await.ok()?;
        if j.done() || j.text.len() >= cap {
            return Some(j.text);
        }
        job = Some(j);
    }
}

/// A lockspace's report: as published, or from its task when it has not published yet.
async fn report(reg: &Registry, name: &LockspaceName) -> Option<LsReport> {
    report_named(reg, &name.to_str_lossy()).await
}

/// [`report`] by the name's text.
async fn report_named(reg: &Registry, name: &str) -> Option<LsReport> {
    match published_named(name) {
        Some(r) => Some((*r).clone()),
        None => fresh_report(reg, name).await,
    }
}

/// The reports published by the lockspace tasks (set once at startup).
pub(crate) static PUBLISHED: std::sync::OnceLock<Published> = std::sync::OnceLock::new();

/// A lockspace's report from its task, exact now (the metrics endpoint's gauges).
async fn fresh_report(reg: &Registry, name: &str) -> Option<LsReport> {
    let tx = reg.lock().ok()?.get(name)?.tx.clone();
    let (rtx, rrx) = oneshot::channel();
    tx.send(LsCommand::Query(rtx)).ok()?;
    rrx.await.ok()
}

/// Every lockspace's report, in name order (a lockspace that ends meanwhile is skipped);
/// `fresh`: from each task, exact now, else as published.
pub(crate) async fn reports(reg: &Registry, fresh: bool) -> Vec<LsReport> {
    let names: Vec<String> = reg
        .lock()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for n in names {
        let r = if fresh {
            fresh_report(reg, &n).await
        } else {
            report_named(reg, &n).await
        };
        out.extend(r);
    }
    out
}

/// `_set_node_info` for one node of a lockspace, relative to `members`.
fn node(r: &LsReport, nodeid: u32, members: &[u32]) -> DlmcNode {
    let h = r.history.iter().find(|(n, _)| *n == nodeid).map(|(_, h)| h);
    let mut flags = 0;
    if members.contains(&nodeid) {
        flags |= NodeFlags::MEMBER;
    }
    if h.is_some_and(|h| h.start_time != 0) && members.contains(&nodeid) {
        flags |= NodeFlags::START;
    }
    if h.is_some_and(|h| h.need_fencing) {
        flags |= NodeFlags::NEED_FENCING;
    }
    DlmcNode {
        nodeid: i32::try_from(nodeid).unwrap_or(0),
        flags: NodeFlags(flags),
        added_seq: h.map_or(0, |h| h.add_seq),
        removed_seq: h.map_or(0, |h| h.rem_seq),
        fail_reason: FailReason::from_raw(
            h.map_or(0, |h| i32::try_from(h.fail_reason).unwrap_or(0)),
        ),
        fail_walltime: 0,
        fail_monotime: h.map_or(0, |h| h.fail_monotime),
    }
}

async fn connection(mut s: UnixStream, later: Later, c: Conn) -> io::Result<()> {
    let (h, req) = match later {
        Later::Rest(h, rest) => {
            let r = async {
                s.write_all(&rest).await?;
                s.shutdown().await
            }
            .await;
            answered(&h, r.as_ref().map(|()| true), c.t0);
            return r;
        }
        Later::Request(h, req) => (h, req),
        Later::Header(mut buf, have) => {
            let rest = s.read_exact(&mut buf[have..]);
            let Ok(read) = tokio::time::timeout_at(c.header_deadline(), rest).await else {
                return Ok(());
            };
            read?;
            let Some(d) = decode(&buf) else {
                return Ok(());
            };
            d
        }
    };
    let r = answer(&mut s, &c.registry, &c.config_dump, &c.status, &h, req).await;
    answered(&h, r.as_ref().copied(), c.t0);
    r.map(|_| ())
}

/// Serves one decoded request; `false` when the command is not served here.
async fn answer(
    s: &mut UnixStream,
    reg: &Registry,
    config_dump: &Arc<String>,
    status: &SharedStatus,
    h: &DlmcHeader,
    req: Request,
) -> io::Result<bool> {
    let (reply, payload): Reply = match req {
        Request::DumpDebug => (
            DlmcHeader::new(Command::DUMP_DEBUG),
            crate::log::dump_debug(),
        ),
        // answered as DUMP_DEBUG, as C does
        Request::DumpLogPlock => (
            DlmcHeader::new(Command::DUMP_DEBUG),
            crate::log::dump_plock(),
        ),
        Request::DumpStatus => return dump_status(s, status).await.map(|()| true),
        Request::NodeInfo { lockspace, nodeid } => {
            node_info_of(report(reg, &lockspace).await.as_ref(), nodeid)
        }
        Request::LockspaceInfo(name) => lockspace_info_of(report(reg, &name).await.as_ref()),
        Request::Lockspaces { .. } => lockspaces_of(&reports(reg, false).await),
        Request::LockspaceNodes {
            lockspace,
            kind,
            max,
        } => lockspace_nodes_of(report(reg, &lockspace).await.as_ref(), kind, max),
        Request::DumpRun => run_list(status),
        Request::DumpConfig => config(config_dump),
        Request::DumpPlocks(name) => dump_plocks(reg, &name, h.flags).await,
        other => {
            // main-socket commands and those not served yet: closed without a reply
            tracing::debug!("query socket: command {:?} not served", h.command);
            let _ = other;
            return Ok(false);
        }
    };
    s.write_all(&reply_header(h, reply, payload.len()).encode())
        .await?;
    s.write_all(&payload).await?;
    s.shutdown().await?;
    Ok(true)
}

/// A reply header (its name and payload length are filled in last) and its payload.
type Reply = (DlmcHeader, Vec<u8>);

/// `reply` as it goes to the client that sent `request`: its name, `len` bytes of payload.
fn reply_header(request: &DlmcHeader, reply: DlmcHeader, len: usize) -> DlmcHeader {
    DlmcHeader {
        name: request.name,
        ..reply
    }
    .with_payload_len(len)
}

/// `command`'s reply header with `data` (a count, 0, or a negative errno).
fn header(command: Command, data: i32) -> DlmcHeader {
    DlmcHeader {
        data,
        ..DlmcHeader::new(command)
    }
}

/// No such lockspace: -ENOENT, with the payload C's client expects to read (zeros).
fn no_lockspace(command: Command, payload_len: usize) -> Reply {
    (header(command, -ENOENT), vec![0u8; payload_len])
}

/// DUMP_STATUS: a stream of dlmc_state records without a header, then close.
async fn dump_status(s: &mut UnixStream, status: &SharedStatus) -> io::Result<()> {
    s.write_all(&status_bytes(status)).await?;
    s.shutdown().await
}

/// DUMP_STATUS's records (one per node this daemon knows and the daemon's own), encoded.
fn status_bytes(status: &SharedStatus) -> Vec<u8> {
    let recs = status
        .lock()
        .map(|st| st.records(crate::clock::monotonic_secs()))
        .unwrap_or_default();
    let mut out = Vec::new();
    for r in &recs {
        r.encode_into(&mut out);
    }
    out
}

/// NODE_INFO from the lockspace's report (`None`: no such lockspace).
fn node_info_of(r: Option<&LsReport>, nodeid: i32) -> Reply {
    let Some(r) = r else {
        return no_lockspace(Command::NODE_INFO, dlm_proto::query::NODE_SIZE);
    };
    let id = u32::try_from(nodeid).unwrap_or(0);
    // an unknown node: its id and zeros (observed)
    let rec = if r.history.iter().any(|(x, _)| *x == id) {
        node(r, id, &r.members)
    } else {
        DlmcNode {
            nodeid,
            flags: NodeFlags(0),
            added_seq: 0,
            removed_seq: 0,
            fail_reason: FailReason::from_raw(0),
            fail_walltime: 0,
            fail_monotime: 0,
        }
    };
    (DlmcHeader::new(Command::NODE_INFO), rec.encode().to_vec())
}

/// LOCKSPACE_INFO from the lockspace's report (`None`: no such lockspace).
fn lockspace_info_of(r: Option<&LsReport>) -> Reply {
    match r {
        Some(r) => (
            DlmcHeader::new(Command::LOCKSPACE_INFO),
            r.info.encode().to_vec(),
        ),
        // C sends stale stack bytes here; zeros
        None => no_lockspace(Command::LOCKSPACE_INFO, LOCKSPACE_SIZE),
    }
}

/// LOCKSPACES: 4.2.0 returns every lockspace whatever max says (observed).
fn lockspaces_of<R: std::borrow::Borrow<LsReport>>(rs: &[R]) -> Reply {
    let mut p = Vec::new();
    for r in rs {
        p.extend_from_slice(&r.borrow().info.encode());
    }
    let count = i32::try_from(rs.len()).unwrap_or(i32::MAX);
    (header(Command::LOCKSPACES, count), p)
}

/// LOCKSPACE_NODES from the lockspace's report (`None`: no such lockspace).
fn lockspace_nodes_of(r: Option<&LsReport>, kind: NodesKind, max: i32) -> Reply {
    let Some(r) = r else {
        return no_lockspace(Command::LOCKSPACE_NODES, 0);
    };
    let chosen = if r.next_members.is_empty() {
        &r.members
    } else {
        &r.next_members
    };
    let (ids, rel): (Vec<u32>, &Vec<u32>) = match kind {
        NodesKind::Members => (r.members.clone(), &r.members),
        NodesKind::Next => (r.next_members.clone(), &r.next_members),
        NodesKind::All => (r.history.iter().map(|(n, _)| *n).collect(), chosen),
        NodesKind::Other(_) => (Vec::new(), chosen),
    };
    let max = usize::try_from(max.max(0)).unwrap_or(0);
    let mut p = Vec::new();
    for id in ids.iter().take(max) {
        p.extend_from_slice(&node(r, *id, rel).encode());
    }
    let count = i32::try_from(ids.len().min(max)).unwrap_or(0);
    (header(Command::LOCKSPACE_NODES, count), p)
}

/// DUMP_RUN: the runs this node knows.
fn run_list(status: &SharedStatus) -> Reply {
    (
        DlmcHeader::new(Command::DUMP_RUN),
        status
            .lock()
            .map(|st| st.run_list.clone().into_bytes())
            .unwrap_or_default(),
    )
}

/// DUMP_CONFIG: the options in force.
fn config(config_dump: &Arc<String>) -> Reply {
    (
        DlmcHeader::new(Command::DUMP_CONFIG),
        config_dump.as_bytes().to_vec(),
    )
}

/// DUMP_PLOCKS: the real dlm_tool reads at most DLMC_DUMP_SIZE, so whole lines up to it
/// (then -ENOSPC), unless the client asked for everything (our dlm_tool does).
async fn dump_plocks(reg: &Registry, name: &LockspaceName, flags: i32) -> Reply {
    let tx = reg
        .lock()
        .ok()
        .and_then(|m| m.get(&*name.to_str_lossy()).cloned());
    let cap = if flags & FLAG_UNCAPPED_DUMP != 0 {
        MAX_REPLY
    } else {
        DUMP_SIZE
    };
    let text = match tx {
        Some(h) => plock_dump(&h.tx, flags & FLAG_DUMP_AGES != 0, cap).await,
        None => None,
    };
    let Some(t) = text else {
        return no_lockspace(Command::DUMP_PLOCKS, 0);
    };
    let mut end = t.len();
    let mut data = 0;
    if end >= cap {
        end = t.as_bytes()[..cap]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        data = -ENOSPC;
    }
    (
        header(Command::DUMP_PLOCKS, data),
        t.as_bytes()[..end].to_vec(),
    )
}
