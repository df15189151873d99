//! The client side of the query socket `\0dlmc_query_sock` (libdlmcontrol's `do_dump`,
//! `dlmc_lockspace_info`, `dlmc_lockspaces`, `dlmc_lockspace_nodes`): one request per
//! connection, the reply read to its `len`.

use std::io::{self, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};

use dlm_proto::LockspaceName;
use dlm_proto::query::{
    Command, DlmcHeader, DlmcLockspace, DlmcNode, FLAG_DUMP_AGES, FLAG_UNCAPPED_DUMP, HEADER_SIZE,
    LOCKSPACE_SIZE, MAIN_SOCK_NAME, NODE_SIZE, NodesKind, QUERY_SOCK_NAME, QueryError, Request,
    StateRecord,
};

/// Why a query got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// Could not reach or talk to the daemon.
    #[error("cannot talk to dlm_controld: {0}")]
    Io(#[from] io::Error),
    /// The daemon answered bytes that are not a reply.
    #[error("bad reply from dlm_controld: {0}")]
    Reply(#[from] QueryError),
    /// The daemon closed the connection without a reply: it does not serve this command.
    #[error("dlm_controld closed the connection without a reply (command not served)")]
    NoReply,
    /// The daemon answered with an error number.
    #[error("dlm_controld answered error {0}")]
    Errno(i32),
}

const E2BIG: i32 = 7;

/// Connects to one of the daemon's abstract sockets.
fn connect(name: &[u8]) -> io::Result<UnixStream> {
    UnixStream::connect_addr(&SocketAddr::from_abstract_name(name)?)
}

/// Sends `request` and reads the whole reply: header and the `len - 96` bytes after it.
fn exchange(request: &DlmcHeader) -> Result<(DlmcHeader, Vec<u8>), ClientError> {
    let mut s = connect(QUERY_SOCK_NAME)?;
    s.write_all(&request.encode())?;
    let mut hb = [0u8; HEADER_SIZE];
    s.read_exact(&mut hb).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ClientError::NoReply,
        _ => ClientError::Io(e),
    })?;
    let h = DlmcHeader::decode(&hb)?;
    let want = usize::try_from(h.len)
        .unwrap_or(usize::MAX)
        .saturating_sub(HEADER_SIZE);
    let mut payload = Vec::new();
    // a daemon that closes early leaves a short payload; use what came
    s.take(u64::try_from(want).unwrap_or(u64::MAX))
        .read_to_end(&mut payload)?;
    Ok((h, payload))
}

/// A text dump: DUMP_CONFIG, DUMP_DEBUG, DUMP_LOG_PLOCK, or DUMP_PLOCKS of `name`, with the
/// reply's `data` (negative errno, e.g. -ENOENT for no such lockspace, -ENOSPC when a C
/// daemon cut the dump short). The text ends at the first NUL, as `dlm_tool` prints it.
pub(crate) fn dump(command: Command, name: Option<&[u8]>) -> Result<(Vec<u8>, i32), ClientError> {
    let mut h = DlmcHeader::new(command);
    if let Some(n) = name {
        h = h.with_name(n);
    }
    dump_header(h)
}

/// DUMP_PLOCKS of `name`, the whole table (our daemon; a C daemon sends the first MiB),
/// each line ending in ` age_ms <n>` when `ages` (our daemon only).
pub(crate) fn dump_plocks(name: &[u8], ages: bool) -> Result<(Vec<u8>, i32), ClientError> {
    let mut h = DlmcHeader::new(Command::DUMP_PLOCKS).with_name(name);
    h.flags |= FLAG_UNCAPPED_DUMP;
    if ages {
        h.flags |= FLAG_DUMP_AGES;
    }
    dump_header(h)
}

fn dump_header(h: DlmcHeader) -> Result<(Vec<u8>, i32), ClientError> {
    let (rh, mut text) = exchange(&h)?;
    if let Some(nul) = text.iter().position(|&b| b == 0) {
        text.truncate(nul);
    }
    Ok((text, rh.data))
}

/// The DUMP_STATUS stream: records until the daemon closes (no reply header). A record
/// that does not decode ends the list, as the C client's loop ends.
pub(crate) fn status_records() -> Result<Vec<StateRecord>, ClientError> {
    let mut s = connect(QUERY_SOCK_NAME)?;
    s.write_all(&DlmcHeader::new(Command::DUMP_STATUS).encode())?;
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match StateRecord::decode(&bytes[at..]) {
            Ok((r, used)) => {
                out.push(r);
                at += used;
            }
            Err(_) => break,
        }
    }
    Ok(out)
}

/// Writes one request to the main socket (`\0dlmc_sock`) and closes: RELOAD_CONFIG and
/// SET_CONFIG have no reply.
pub(crate) fn send_main(request: &Request) -> Result<(), ClientError> {
    let mut s = connect(MAIN_SOCK_NAME)?;
    s.write_all(&request.encode())?;
    Ok(())
}

/// `dlmc_run_start`: (rv, uuid) from the reply header.
pub(crate) fn run_start(
    command: &[u8],
    dest: i32,
    flags: u32,
) -> Result<(i32, String), ClientError> {
    use dlm_proto::query::RunStartFlags;
    let mut s = connect(MAIN_SOCK_NAME)?;
    let req = Request::RunStart {
        dest_nodeid: dest,
        flags: RunStartFlags(flags),
        command: command.to_vec(),
    };
    s.write_all(&req.encode())?;
    let h = read_header(&mut s)?;
    let end = h.name.iter().position(|&b| b == 0).unwrap_or(h.name.len());
    Ok((h.data, String::from_utf8_lossy(&h.name[..end]).into_owned()))
}

/// `dlmc_run_check`: (rv, status); with `wait_sec`, asks again every second while the
/// run is still waiting, for up to that long.
pub(crate) fn run_check(uuid: &str, wait_sec: u64, flags: u32) -> Result<(i32, u32), ClientError> {
    use dlm_proto::query::{RunCheckFlags, RunStatus};
    let mut s = connect(MAIN_SOCK_NAME)?;
    let req = Request::RunCheck {
        uuid: uuid.as_bytes().to_vec(),
        flags: RunCheckFlags(flags),
    };
    let started = std::time::Instant::now();
    loop {
        s.write_all(&req.encode())?;
        let h = read_header(&mut s)?;
        let mut st = [0u8; 4];
        s.read_exact(&mut st)?;
        let status = u32::from_ne_bytes(st);
        if status & RunStatus::WAITING != 0
            && wait_sec > 0
            && started.elapsed().as_secs() < wait_sec
        {
            std::thread::sleep(std::time::Duration::from_secs(1));
            continue;
        }
        return Ok((h.data, status));
    }
}

fn read_header(s: &mut UnixStream) -> Result<DlmcHeader, ClientError> {
    let mut hb = [0u8; HEADER_SIZE];
    s.read_exact(&mut hb).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ClientError::NoReply,
        _ => ClientError::Io(e),
    })?;
    Ok(DlmcHeader::decode(&hb)?)
}

/// `dlmc_lockspace_info`.
pub(crate) fn lockspace_info(name: &[u8]) -> Result<DlmcLockspace, ClientError> {
    let (h, p) = exchange(&DlmcHeader::new(Command::LOCKSPACE_INFO).with_name(name))?;
    if h.data < 0 {
        return Err(ClientError::Errno(-h.data));
    }
    Ok(DlmcLockspace::decode(&p)?)
}

fn records<T>(
    h: &DlmcHeader,
    p: &[u8],
    size: usize,
    decode: fn(&[u8]) -> Result<T, QueryError>,
) -> Result<Vec<T>, ClientError> {
    if h.data < 0 && h.data != -E2BIG {
        return Err(ClientError::Errno(-h.data));
    }
    // every record that arrived, whatever the count says (our daemon has no max)
    p.chunks_exact(size)
        .map(|c| decode(c).map_err(ClientError::from))
        .collect()
}

/// `dlmc_lockspaces`, without a maximum.
pub(crate) fn lockspaces() -> Result<Vec<DlmcLockspace>, ClientError> {
    let mut h = DlmcHeader::new(Command::LOCKSPACES);
    h.data = i32::MAX;
    let (rh, p) = exchange(&h)?;
    records(&rh, &p, LOCKSPACE_SIZE, DlmcLockspace::decode)
}

/// `dlmc_lockspace_nodes`, without a maximum, sorted by node id as dlm_tool shows them.
pub(crate) fn lockspace_nodes(
    name: &LockspaceName,
    kind: NodesKind,
) -> Result<Vec<DlmcNode>, ClientError> {
    let mut h = DlmcHeader::new(Command::LOCKSPACE_NODES).with_name(name.as_bytes());
    h.option = kind.to_raw();
    h.data = i32::MAX;
    let (rh, p) = exchange(&h)?;
    let mut v = records(&rh, &p, NODE_SIZE, DlmcNode::decode)?;
    v.sort_by_key(|n| n.nodeid);
    Ok(v)
}
