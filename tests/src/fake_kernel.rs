//! A fake DLM kernel under a root directory, for the daemon's `--kernel-root`.
//!
//! It provides what the real kernel provides: the configfs parent
//! `sys/kernel/config/dlm`, the sysfs directory of each lockspace it announces
//! (`sys/kernel/dlm/<ls>/{control,event_done,id,nodir}`), the misc devices
//! `dev/misc/{dlm_plock,dlm-monitor,dlm-control}` as `SOCK_SEQPACKET` sockets, and
//! uevents on `run/dlm_controld/uevent.sock`. It records every mkdir, rmdir and write the
//! daemon makes under configfs and sysfs, with the exact bytes, through inotify (the daemon
//! appends on a fake root, so consecutive writes to one file stay distinct).
//!
//! `dev/misc/dlm-control` serves lockspace create and remove requests as the kernel does
//! (`dlm_tool join` / `leave`): a create announces the lockspace to the daemon and waits
//! for its `event_done`, a remove by the last user sends `offline@` and waits again. A
//! write's return value cannot travel in a packet, so after each request the fake kernel
//! sends one 4-byte packet with it (the new lockspace's minor, 0, or -errno). Each
//! lockspace's device `dev/misc/dlm_<name>` is a regular file holding its minor.
//!
//! A file created and written in a directory before inotify watches that directory is
//! read when the watch is added, in name order; so `announce` waits until the lockspace's
//! sysfs directory is watched before it sends the uevent, and the daemon's sysfs writes are
//! recorded in the order they were made.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{PlockInfo, Uevent, UeventAction};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::socket::{
    AddressFamily, Backlog, MsgFlags, SockFlag, SockType, UnixAddr, accept, bind, connect, listen,
    recv, send, socket,
};

/// One observed kernel-interface operation, with paths relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// mkdir.
    Mkdir(String),
    /// rmdir.
    Rmdir(String),
    /// One write: path and exact bytes.
    Write(String, Vec<u8>),
}

/// The bytes of every write to `path` (relative to the root), in order.
pub fn writes(records: &[Record], path: &str) -> Vec<Vec<u8>> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Write(p, b) if p == path => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// Every value written to lockspace `ls`'s sysfs `control`, run together (`"1\0"` a
/// start, `"0\0"` a stop).
pub fn control_writes(records: &[Record], ls: &str) -> Vec<u8> {
    writes(records, &format!("sys/kernel/dlm/{ls}/control")).concat()
}

/// The configfs members of lockspace `ls` after these records (mkdirs less rmdirs of
/// `.../spaces/<ls>/nodes/<id>`), sorted.
pub fn configfs_members(records: &[Record], ls: &str) -> Vec<u32> {
    let prefix = format!("sys/kernel/config/dlm/cluster/spaces/{ls}/nodes/");
    let mut m: Vec<u32> = Vec::new();
    for r in records {
        match r {
            Record::Mkdir(p) => {
                if let Some(n) = p.strip_prefix(&prefix).and_then(|n| n.parse().ok()) {
                    m.push(n);
                }
            }
            Record::Rmdir(p) => {
                if let Some(n) = p.strip_prefix(&prefix).and_then(|n| n.parse::<u32>().ok()) {
                    m.retain(|x| *x != n);
                }
            }
            Record::Write(..) => {}
        }
    }
    m.sort_unstable();
    m
}

#[derive(Debug, Default)]
struct Shared {
    records: Mutex<Vec<Record>>,
    changed: Condvar,
    conns: Mutex<BTreeMap<&'static str, OwnedFd>>,
    monitor_open: AtomicBool,
    stop: AtomicBool,
    /// Directories the watcher watches (so `announce` can wait before the uevent).
    watched: Mutex<std::collections::BTreeSet<PathBuf>>,
    /// Lockspaces created through `dlm-control`: name → (minor, users).
    created: Mutex<BTreeMap<String, (u32, u32)>>,
    /// The last sync marker the watcher has seen (see [`FakeKernel::sync`]).
    synced: std::sync::atomic::AtomicU64,
    /// The last sync marker written.
    sync_sent: std::sync::atomic::AtomicU64,
}

/// The watched directory of the sync marker (not part of any kernel tree).
const SYNC_DIR: &str = "run/fake_kernel";

impl Shared {
    fn push(&self, r: Record) {
        if let Ok(mut v) = self.records.lock() {
            v.push(r);
        }
        self.changed.notify_all();
    }
}

/// The fake kernel; dropping it stops its threads and removes what it created.
#[derive(Debug)]
pub struct FakeKernel {
    root: PathBuf,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

const DEVICES: [(&str, &str); 4] = [
    ("plock", "dev/misc/dlm_plock"),
    ("monitor", "dev/misc/dlm-monitor"),
    ("control", "dev/misc/dlm-control"),
    ("uevent", "run/dlm_controld/uevent.sock"),
];

fn seqpacket() -> io::Result<OwnedFd> {
    Ok(socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

fn listener(path: &Path) -> io::Result<OwnedFd> {
    let _ = fs::remove_file(path);
    let fd = seqpacket()?;
    bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    listen(&fd, Backlog::new(4).map_err(io::Error::from)?)?;
    Ok(fd)
}

/// The plock device under `root`, opened as a daemon opens it (for a stand-in that
/// answers in a daemon's place).
pub fn daemon_end(root: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    connect(
        fd.as_raw_fd(),
        &UnixAddr::new(&root.join("dev/misc/dlm_plock"))?,
    )?;
    Ok(fd)
}

pub(crate) fn readable(fd: &impl AsFd, ms: u16) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
}

impl FakeKernel {
    /// Creates the tree under `root` (made if missing) and starts serving.
    pub fn start(root: &Path) -> io::Result<Self> {
        for d in [
            "sys/kernel/config/dlm",
            "sys/kernel/dlm",
            "dev/misc",
            "run/dlm_controld",
            SYNC_DIR,
        ] {
            fs::create_dir_all(root.join(d))?;
        }
        let shared = Arc::new(Shared::default());
        let mut threads = Vec::new();
        for (name, rel) in DEVICES {
            let fd = listener(&root.join(rel))?;
            let sh = shared.clone();
            let r = root.to_path_buf();
            threads.push(thread::spawn(move || accept_loop(name, &fd, &sh, &r)));
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).map_err(io::Error::from)?;
        // the first watches exist before start returns, so no daemon mkdir is missed
        let mut w = Watcher {
            root: root.to_path_buf(),
            inotify,
            dirs: BTreeMap::new(),
            offsets: BTreeMap::new(),
            sh: shared.clone(),
        };
        for d in ["sys/kernel/config/dlm", "sys/kernel/dlm", SYNC_DIR] {
            let p = root.join(d);
            w.watch(&p, false);
        }
        threads.push(thread::spawn(move || watch_loop(w)));
        Ok(Self {
            root: root.to_path_buf(),
            shared,
            threads,
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<Record> {
        self.shared
            .records
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Sends `requests` in windows of `window` and waits for one reply per request
    /// (`limit` for each); whether every request was answered.
    pub fn send_answered(
        &self,
        requests: impl IntoIterator<Item = PlockInfo>,
        window: usize,
        limit: Duration,
    ) -> bool {
        let mut it = requests.into_iter().peekable();
        while it.peek().is_some() {
            let mut sent = 0;
            for r in it.by_ref().take(window.max(1)) {
                if self.send_plock(&r).is_err() {
                    return false;
                }
                sent += 1;
            }
            for _ in 0..sent {
                if self.recv_plock_raw(limit).is_none() {
                    return false;
                }
            }
        }
        true
    }

    /// Waits until the daemon has completed the join of lockspace `ls` (its `event_done`
    /// write).
    pub fn wait_joined(&self, ls: &str, limit: Duration) -> bool {
        let path = format!("sys/kernel/dlm/{ls}/event_done");
        self.wait_records(limit, |r| {
            r.iter()
                .any(|x| matches!(x, Record::Write(p, _) if *p == path))
        })
    }

    /// Waits until `pred` holds for the records (or `limit` passes); whether it held.
    pub fn wait_records(&self, limit: Duration, pred: impl Fn(&[Record]) -> bool) -> bool {
        wait_records(&self.shared, limit, pred)
    }

    fn conn_send(&self, name: &'static str, bytes: &[u8], limit: Duration) -> io::Result<()> {
        conn_send(&self.shared, name, bytes, limit)
    }

    /// Waits until a daemon listens for uevents, and the records hold everything it wrote
    /// before it did (its startup writes).
    pub fn wait_daemon(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self
                .shared
                .conns
                .lock()
                .is_ok_and(|c| c.contains_key("uevent"))
            {
                return self.sync(deadline.saturating_duration_since(Instant::now()));
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Waits until the watcher has recorded every write made before this call: it writes a
    /// marker into a watched directory of its own and waits for the watcher to see it
    /// (inotify reports events in order). The watcher runs behind the daemon, more so on a
    /// loaded machine, so a test that reads the records at once may miss the last writes.
    pub fn sync(&self, limit: Duration) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.shared.sync_sent.fetch_add(1, SeqCst) + 1;
        if fs::write(self.root.join(SYNC_DIR).join("sync"), n.to_string()).is_err() {
            return false;
        }
        let deadline = Instant::now() + limit;
        let Ok(mut guard) = self.shared.records.lock() else {
            return false;
        };
        while self.shared.synced.load(SeqCst) < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = match self.shared.changed.wait_timeout(guard, left) {
                Ok((g, _)) => g,
                Err(_) => return false,
            };
        }
        true
    }

    /// A process calls `dlm_new_lockspace(name)`: the sysfs directory appears, then the
    /// `online@` uevent goes to the daemon if one listens (like netlink, nobody listening
    /// means nobody hears it). Returns whether a daemon got it.
    pub fn announce(&self, name: &str) -> io::Result<bool> {
        announce(&self.root, &self.shared, name)
    }

    /// The last user releases the lockspace: the `offline@` uevent.
    pub fn release(&self, name: &str) -> io::Result<()> {
        release(&self.shared, name)
    }

    /// Sends a raw uevent (for bad-input tests).
    pub fn send_uevent(&self, bytes: &[u8]) -> io::Result<()> {
        self.conn_send("uevent", bytes, Duration::from_secs(10))
    }

    /// The kernel queues a plock request for the daemon (one packet = one read()).
    pub fn send_plock(&self, info: &PlockInfo) -> io::Result<()> {
        self.conn_send("plock", &info.encode(), Duration::from_secs(10))
    }

    /// Sends raw bytes on the plock device (for bad-input tests).
    pub fn send_plock_raw(&self, bytes: &[u8]) -> io::Result<()> {
        self.conn_send("plock", bytes, Duration::from_secs(10))
    }

    /// The plock device's connection for a bench driver ([`crate::plock_port`]), once a
    /// daemon has it open (waiting up to `limit`, as [`Self::send_plock`] does).
    pub fn plock_port(&self, limit: Duration) -> Option<crate::plock_port::PlockPort> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(conns) = self.shared.conns.lock() {
                if let Some(fd) = conns.get("plock") {
                    return fd.try_clone().ok().map(crate::plock_port::PlockPort);
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The next reply the daemon wrote to the plock device, raw.
    pub fn recv_plock_raw(&self, limit: Duration) -> Option<Vec<u8>> {
        let fd = self
            .shared
            .conns
            .lock()
            .ok()?
            .get("plock")?
            .try_clone()
            .ok()?;
        if !readable(&fd, u16::try_from(limit.as_millis()).unwrap_or(u16::MAX)) {
            return None;
        }
        let mut buf = vec![0u8; 256];
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).ok()?;
        buf.truncate(n);
        Some(buf)
    }

    /// The next reply the daemon wrote to the plock device, decoded (`None` if none came
    /// within `limit` or it does not decode).
    pub fn recv_plock(&self, limit: Duration) -> Option<PlockInfo> {
        self.recv_plock_raw(limit)
            .and_then(|b| PlockInfo::decode(&b).ok())
    }

    /// The plock device breaks: its connection is closed (each read of the daemon's then
    /// brings empty records), the other devices stay. Whether there was one.
    pub fn close_plock(&self) -> bool {
        let conn = self
            .shared
            .conns
            .lock()
            .ok()
            .and_then(|mut c| c.remove("plock"));
        conn.is_some()
    }

    /// Whether a daemon holds the monitor device open ("daemon available").
    pub fn monitor_open(&self) -> bool {
        self.shared.monitor_open.load(Ordering::SeqCst)
    }
}

impl Drop for FakeKernel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for (_, rel) in DEVICES {
            let _ = fs::remove_file(self.root.join(rel));
        }
    }
}

/// Sends one packet to the daemon's connection `name`, waiting up to `limit` for it.
fn conn_send(sh: &Shared, name: &'static str, bytes: &[u8], limit: Duration) -> io::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(conns) = sh.conns.lock() {
            if let Some(fd) = conns.get(name) {
                send(fd.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL)?;
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("no daemon on {name}"),
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// See [`FakeKernel::announce`].
fn announce(root: &Path, sh: &Shared, name: &str) -> io::Result<bool> {
    let dir = root.join("sys/kernel/dlm").join(name);
    fs::create_dir_all(&dir)?;
    for attr in ["control", "event_done", "id", "nodir"] {
        fs::write(dir.join(attr), b"")?;
    }
    // the watcher must see the directory before the daemon can write into it, or its
    // catch-up would record the daemon's writes in name order, not in write order
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sh.watched.lock().is_ok_and(|w| w.contains(&dir)) {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!("{} never watched", dir.display())));
        }
        thread::sleep(Duration::from_millis(1));
    }
    let ev = Uevent {
        action: UeventAction::Online,
        lockspace: LockspaceName::new(name.as_bytes())
            .map_err(|e| io::Error::other(e.to_string()))?,
        seqnum: Some(1),
    };
    match conn_send(sh, "uevent", &ev.encode(), Duration::ZERO) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}

/// See [`FakeKernel::release`].
fn release(sh: &Shared, name: &str) -> io::Result<()> {
    let ev = Uevent {
        action: UeventAction::Offline,
        lockspace: LockspaceName::new(name.as_bytes())
            .map_err(|e| io::Error::other(e.to_string()))?,
        seqnum: Some(2),
    };
    conn_send(sh, "uevent", &ev.encode(), Duration::from_secs(10))
}

/// See [`FakeKernel::wait_records`].
fn wait_records(sh: &Shared, limit: Duration, pred: impl Fn(&[Record]) -> bool) -> bool {
    let deadline = Instant::now() + limit;
    let Ok(mut guard) = sh.records.lock() else {
        return false;
    };
    loop {
        if pred(&guard) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match sh
            .changed
            .wait_timeout(guard, left.min(Duration::from_millis(50)))
        {
            Ok((g, _)) => guard = g,
            Err(_) => return false,
        }
    }
}

const EINVAL: i32 = 22;
const EUNATCH: i32 = 49;
const ENOENT: i32 = 2;
const ETIMEDOUT: i32 = 110;

fn event_done_count(sh: &Shared, name: &str) -> usize {
    let path = format!("sys/kernel/dlm/{name}/event_done");
    sh.records.lock().map_or(0, |r| {
        r.iter()
            .filter(|x| matches!(x, Record::Write(p, _) if *p == path))
            .count()
    })
}

/// The value of the daemon's newest `event_done` write for `name` (0 joined, -errno not).
fn event_done_value(sh: &Shared, name: &str) -> i32 {
    let path = format!("sys/kernel/dlm/{name}/event_done");
    sh.records.lock().map_or(-EINVAL, |r| {
        r.iter()
            .rev()
            .find_map(|x| match x {
                Record::Write(p, b) if *p == path => Some(b.clone()),
                _ => None,
            })
            .and_then(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(-EINVAL)
    })
}

/// `device_create_lockspace` → `dlm_new_lockspace`: the minor, or -errno.
fn control_create(root: &Path, sh: &Shared, name: &str) -> i32 {
    if let Ok(mut c) = sh.created.lock() {
        if let Some((minor, users)) = c.get_mut(name) {
            *users += 1;
            return i32::try_from(*minor).unwrap_or(-EINVAL);
        }
    }
    if !sh.monitor_open.load(Ordering::SeqCst) {
        return -EUNATCH; // "dlm user daemon not available"
    }
    let before = event_done_count(sh, name);
    if !matches!(announce(root, sh, name), Ok(true)) {
        return -EUNATCH;
    }
    if !wait_until(Duration::from_secs(60), || {
        event_done_count(sh, name) > before
    }) {
        return -ETIMEDOUT;
    }
    let rv = event_done_value(sh, name);
    if rv != 0 {
        return rv;
    }
    let Ok(mut c) = sh.created.lock() else {
        return -EINVAL;
    };
    let minor = 100 + u32::try_from(c.len()).unwrap_or(0);
    let _ = fs::write(
        root.join("dev/misc").join(format!("dlm_{name}")),
        minor.to_string(),
    );
    c.insert(name.to_owned(), (minor, 1));
    i32::try_from(minor).unwrap_or(-EINVAL)
}

/// `device_remove_lockspace` → `dlm_release_lockspace`: the last user's release sends
/// `offline@` and waits for the daemon's leave (FORCEFREE is about locks still held,
/// which the fake kernel has none of, not about other users).
fn control_remove(root: &Path, sh: &Shared, minor: u32) -> i32 {
    let name = {
        let Ok(mut c) = sh.created.lock() else {
            return -EINVAL;
        };
        let Some(name) = c
            .iter()
            .find(|(_, (m, _))| *m == minor)
            .map(|(n, _)| n.clone())
        else {
            return -ENOENT;
        };
        let users = c.get_mut(&name).map(|(_, u)| u);
        if let Some(u) = users {
            *u = u.saturating_sub(1);
            if *u > 0 {
                return 0;
            }
        }
        c.remove(&name);
        name
    };
    let before = event_done_count(sh, &name);
    if release(sh, &name).is_err() {
        return -EUNATCH;
    }
    if !wait_until(Duration::from_secs(60), || {
        event_done_count(sh, &name) > before
    }) {
        return -ETIMEDOUT;
    }
    let _ = fs::remove_dir_all(root.join("sys/kernel/dlm").join(&name));
    let _ = fs::remove_file(root.join("dev/misc").join(format!("dlm_{name}")));
    0
}

fn wait_until(limit: Duration, what: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Serves one `dlm-control` connection: each packet one write, answered by a 4-byte packet
/// with the write's return value.
fn control_loop(root: &Path, sh: &Shared, fd: &OwnedFd) {
    while !sh.stop.load(Ordering::SeqCst) {
        if !readable(fd, 50) {
            continue;
        }
        let mut buf = [0u8; 512];
        let n = match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let rv = match dlm_proto::kernel::ControlRequest::decode(&buf[..n]) {
            Ok(dlm_proto::kernel::ControlRequest::Create { name, .. }) => {
                control_create(root, sh, &name.to_str_lossy())
            }
            Ok(dlm_proto::kernel::ControlRequest::Remove { minor, .. }) => {
                control_remove(root, sh, minor)
            }
            Err(_) => -EINVAL,
        };
        let _ = send(fd.as_raw_fd(), &rv.to_ne_bytes(), MsgFlags::MSG_NOSIGNAL);
    }
}

fn accept_loop(name: &'static str, listener: &OwnedFd, sh: &Arc<Shared>, root: &Path) {
    let mut monitor: Option<OwnedFd> = None;
    while !sh.stop.load(Ordering::SeqCst) {
        if let Some(m) = monitor.as_ref() {
            // the monitor is "open" until the daemon's end closes
            if readable(m, 0) {
                let mut b = [0u8; 16];
                if matches!(
                    recv(m.as_raw_fd(), &mut b, MsgFlags::MSG_DONTWAIT),
                    Ok(0) | Err(_)
                ) {
                    monitor = None;
                    sh.monitor_open.store(false, Ordering::SeqCst);
                }
            }
        }
        if !readable(listener, 50) {
            continue;
        }
        let Ok(raw) = accept(listener.as_raw_fd()) else {
            continue;
        };
        // SAFETY: accept returned a new descriptor that nothing else owns.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        if name == "monitor" {
            monitor = Some(fd);
            sh.monitor_open.store(true, Ordering::SeqCst);
        } else if name == "control" {
            // each client (dlm_tool join / leave) gets its own server
            let (sh, root) = (sh.clone(), root.to_path_buf());
            thread::spawn(move || control_loop(&root, &sh, &fd));
        } else if let Ok(mut conns) = sh.conns.lock() {
            conns.insert(name, fd);
        }
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

struct Watcher {
    root: PathBuf,
    inotify: Inotify,
    dirs: BTreeMap<WatchDescriptor, PathBuf>,
    offsets: BTreeMap<PathBuf, usize>,
    sh: Arc<Shared>,
}

impl Watcher {
    fn watch(&mut self, dir: &Path, announce: bool) {
        if self.dirs.values().any(|d| d == dir) {
            return; // already seen (its creation event and a parent's catch-up both report it)
        }
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_ONLYDIR;
        let Ok(wd) = self.inotify.add_watch(dir, flags) else {
            return;
        };
        self.dirs.insert(wd, dir.to_path_buf());
        if let Ok(mut w) = self.sh.watched.lock() {
            w.insert(dir.to_path_buf());
        }
        if announce {
            self.sh.push(Record::Mkdir(rel(&self.root, dir)));
        }
        // catch up with what was made before the watch existed
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(fs::DirEntry::file_name);
        for e in entries {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if !self.dirs.values().any(|d| d == &p) {
                    self.watch(&p, announce);
                }
            } else {
                self.read_new(&p);
            }
        }
    }

    fn read_new(&mut self, p: &Path) {
        if p.starts_with(self.root.join(SYNC_DIR)) {
            return; // the sync marker is no kernel write
        }
        let Ok(bytes) = fs::read(p) else { return };
        let off = self.offsets.get(p).copied().unwrap_or(0).min(bytes.len());
        if bytes.len() > off {
            self.offsets.insert(p.to_path_buf(), bytes.len());
            self.sh
                .push(Record::Write(rel(&self.root, p), bytes[off..].to_vec()));
        }
    }
}

fn watch_loop(mut w: Watcher) {
    let root = w.root.clone();
    let sh = w.sh.clone();
    // the lockspace directories the fake kernel itself makes are not daemon mkdirs
    while !sh.stop.load(Ordering::SeqCst) {
        if !readable(&w.inotify, 50) {
            continue;
        }
        let Ok(events) = w.inotify.read_events() else {
            continue;
        };
        for ev in events {
            let Some(dir) = w.dirs.get(&ev.wd).cloned() else {
                continue;
            };
            let Some(name) = ev.name.as_ref() else {
                continue;
            };
            let p = dir.join(name);
            let is_dir = ev.mask.contains(AddWatchFlags::IN_ISDIR);
            let configfs = p.starts_with(root.join("sys/kernel/config"));
            if ev.mask.contains(AddWatchFlags::IN_CREATE) && is_dir {
                w.watch(&p, configfs);
            } else if ev.mask.contains(AddWatchFlags::IN_DELETE) && is_dir {
                if configfs {
                    sh.push(Record::Rmdir(rel(&root, &p)));
                }
                w.dirs.retain(|_, d| !d.starts_with(&p));
                if let Ok(mut set) = sh.watched.lock() {
                    set.retain(|d| !d.starts_with(&p));
                }
            } else if ev.mask.contains(AddWatchFlags::IN_DELETE) {
                w.offsets.remove(&p);
            } else if ev.mask.contains(AddWatchFlags::IN_CLOSE_WRITE) {
                if dir == root.join(SYNC_DIR) {
                    let n = fs::read_to_string(&p).ok().and_then(|t| t.parse().ok());
                    if let Some(n) = n {
                        sh.synced.fetch_max(n, Ordering::SeqCst);
                        // under the records' lock, so a waiter cannot miss the wake-up
                        let _guard = sh.records.lock();
                        sh.changed.notify_all();
                    }
                } else {
                    w.read_new(&p);
                }
            }
        }
    }
}
