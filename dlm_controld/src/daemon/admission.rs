//! Admission to the three listeners any local user reaches — the main socket, the query
//! socket and the metrics endpoint — so that no user can starve the kernel path or root's
//! commands of descriptors or CPU (docs/operating.md, "Security and limits").
//!
//! - Peer credentials are read at accept (SO_PEERCRED; a TCP peer's uid is unknown and
//!   counts as one unprivileged user of its own).
//! - One [`Gate`] bounds connections open at once, over all three listeners: per non-root
//!   uid, for non-root users together, and in total. The total stays [`RESERVE`]
//!   descriptors below the process's soft limit, for the kernel path (every sysfs and
//!   configfs write opens a file), corosync and the lockspaces. A connection over a bound is
//!   closed at once, counted, and logged at most once a second per listener.
//! - A non-root peer must send its request within [`UNPRIVILEGED_HEADER`].
//! - A failed accept (EMFILE, ENFILE, ENOMEM, …) backs off, doubling up to a second, instead
//!   of spinning on a listener that stays readable.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::rate::LogEvery;

/// Root's uid.
pub(crate) const ROOT: u32 = 0;
/// The uid of a peer whose credentials are unknown (TCP, or SO_PEERCRED failed).
pub(crate) const UNKNOWN_UID: u32 = u32::MAX;
/// Descriptors never handed to connections.
pub(crate) const RESERVE: u64 = 256;
/// Connections of one non-root uid at once.
pub(crate) const PER_UID: usize = 16;
/// Non-root connections at once, all listeners together.
pub(crate) const UNPRIVILEGED: usize = 64;
/// Connections at once, root's included, where the descriptor limit allows it.
pub(crate) const TOTAL: usize = 512;
/// How long a non-root peer may take to send its request.
pub(crate) const UNPRIVILEGED_HEADER: Duration = Duration::from_secs(2);
/// How long root may take (a client that never sends is dropped all the same).
pub(crate) const ROOT_HEADER: Duration = Duration::from_secs(10);

/// The bounds of a [`Gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections of one non-root uid at once.
    pub(crate) per_uid: usize,
    /// Non-root connections at once.
    pub(crate) unprivileged: usize,
    /// Connections at once.
    pub(crate) total: usize,
}

impl Limits {
    /// The bounds for a process whose soft descriptor limit is `nofile`: [`RESERVE`] stay
    /// free; non-root users get at most half of what is left.
    pub(crate) fn for_nofile(nofile: u64) -> Self {
        let room = usize::try_from(nofile.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
        let total = TOTAL.min(room);
        let unprivileged = UNPRIVILEGED.min(total / 2);
        Self {
            per_uid: PER_UID.min(unprivileged),
            unprivileged,
            total,
        }
    }
}

/// Which bound refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Connections at once.
    Total,
    /// Non-root connections at once.
    Unprivileged,
    /// This uid's connections at once.
    Uid,
}

impl Refused {
    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Total => "total",
            Self::Unprivileged => "unprivileged",
            Self::Uid => "uid",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    unprivileged: usize,
    by_uid: HashMap<u32, usize>,
}

/// Connections open at once, shared by every listener.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    limits: Limits,
    counts: Arc<Mutex<Counts>>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Permit {
    uid: u32,
    counts: Arc<Mutex<Counts>>,
}

impl Gate {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            counts: Arc::default(),
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// A place for a connection of `uid`, or the bound it would cross.
    pub(crate) fn admit(&self, uid: u32) -> Result<Permit, Refused> {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.total >= self.limits.total {
            return Err(Refused::Total);
        }
        if uid != ROOT {
            if c.unprivileged >= self.limits.unprivileged {
                return Err(Refused::Unprivileged);
            }
            let mine = c.by_uid.entry(uid).or_default();
            if *mine >= self.limits.per_uid {
                return Err(Refused::Uid);
            }
            *mine += 1;
            c.unprivileged += 1;
        }
        c.total += 1;
        crate::metrics::get().connections.inc();
        Ok(Permit {
            uid,
            counts: self.counts.clone(),
        })
    }
}

impl Permit {
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    pub(crate) fn is_root(&self) -> bool {
        self.uid == ROOT
    }

    /// How long this peer may take to send its request.
    pub(crate) fn header_timeout(&self) -> Duration {
        if self.is_root() {
            ROOT_HEADER
        } else {
            UNPRIVILEGED_HEADER
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if self.uid != ROOT {
            c.unprivileged = c.unprivileged.saturating_sub(1);
            if let Some(n) = c.by_uid.get_mut(&self.uid) {
                *n -= 1;
                if *n == 0 {
                    c.by_uid.remove(&self.uid);
                }
            }
        }
        crate::metrics::get().connections.dec();
    }
}

/// The delay after a failed accept: 10 ms, doubling to 1 s, back to 10 ms after a success.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const LAST: Duration = Duration::from_secs(1);

    pub(crate) fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// The delay before the next accept after a failure.
    pub(crate) fn failed(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Self::LAST);
        d
    }

    pub(crate) fn succeeded(&mut self) {
        self.next = Self::FIRST;
    }
}

/// One listener's accept loop state: its name, its backoff and its log limits.
#[derive(Debug)]
pub(crate) struct Acceptor {
    socket: &'static str,
    gate: Gate,
    backoff: Backoff,
    error_log: LogEvery,
    refused_log: LogEvery,
}

impl Acceptor {
    pub(crate) fn new(socket: &'static str, gate: Gate) -> Self {
        Self {
            socket,
            gate,
            backoff: Backoff::new(),
            error_log: LogEvery::default(),
            refused_log: LogEvery::default(),
        }
    }

    /// The next admitted connection: accepts with `accept`, backing off on errors; reads
    /// the peer's uid with `uid`; closes (drops) a connection over a bound.
    pub(crate) async fn next<S, A, F>(
        &mut self,
        mut accept: A,
        uid: impl Fn(&S) -> u32,
    ) -> (S, Permit)
    where
        A: FnMut() -> F,
        F: Future<Output = io::Result<S>>,
    {
        let m = crate::metrics::get();
        loop {
            let stream = match accept().await {
                Ok(s) => {
                    self.backoff.succeeded();
                    s
                }
                Err(e) => {
                    m.accept_errors.with_label_values(&[self.socket]).inc();
                    let pause = self.backoff.failed();
                    if let Some(held) = self.error_log.allow(crate::clock::monotonic_ms()) {
                        tracing::error!(
                            "{} socket: accept: {e}; pausing {} ms ({held} more not logged)",
                            self.socket,
                            pause.as_millis()
                        );
                    }
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let peer = uid(&stream);
            match self.gate.admit(peer) {
                Ok(p) => return (stream, p),
                Err(bound) => {
                    m.socket_refused
                        .with_label_values(&[self.socket, bound.label()])
                        .inc();
                    if let Some(held) = self.refused_log.allow(crate::clock::monotonic_ms()) {
                        tracing::warn!(
                            "{} socket: connection of uid {peer} closed: {} bound reached \
                             ({held} more not logged)",
                            self.socket,
                            bound.label()
                        );
                    }
                }
            }
        }
    }
}

/// The uid of a Unix socket's peer ([`UNKNOWN_UID`] when it cannot be read).
pub(crate) fn unix_uid(s: &tokio::net::UnixStream) -> u32 {
    s.peer_cred().map_or(UNKNOWN_UID, |c| c.uid())
}

/// The uid of a Unix socket's peer, for a stream not registered with the reactor.
pub(crate) fn std_unix_uid(s: &std::os::unix::net::UnixStream) -> u32 {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(s, PeerCredentials).map_or(UNKNOWN_UID, |c| c.uid())
}

/// Raises the soft descriptor limit to the hard one (at most 2^20) and returns the soft
/// limit now in force (1024, C's default, when it cannot be read).
pub(crate) fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    let want = hard.min(1 << 20);
    if want > soft && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok() {
        return want;
    }
    soft
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_keep_the_reserve() {
        let l = Limits::for_nofile(1024);
        assert_eq!(l.total, TOTAL);
        assert_eq!(l.unprivileged, UNPRIVILEGED);
        let small = Limits::for_nofile(300);
        assert_eq!(small.total, 44);
        assert_eq!(small.unprivileged, 22);
        assert_eq!(small.per_uid, PER_UID);
        assert_eq!(
            Limits::for_nofile(100).total,
            0,
            "nothing below the reserve"
        );
    }

    #[test]
    fn bounds_per_uid_unprivileged_and_total() {
        let g = Gate::new(Limits {
            per_uid: 2,
            unprivileged: 3,
            total: 5,
        });
        let a1 = g.admit(1000).expect("first");
        let _a2 = g.admit(1000).expect("second");
        assert_eq!(g.admit(1000).err(), Some(Refused::Uid));
        let _b1 = g.admit(1001).expect("another uid");
        assert_eq!(g.admit(1002).err(), Some(Refused::Unprivileged));
        let _r1 = g
            .admit(ROOT)
            .expect("root is not bound by the users' share");
        let _r2 = g.admit(ROOT).expect("root");
        assert_eq!(g.admit(ROOT).err(), Some(Refused::Total));
        drop(a1);
        let r3 = g.admit(ROOT).expect("root takes the freed place");
        assert_eq!(
            g.admit(1000).err(),
            Some(Refused::Total),
            "the total is full"
        );
        drop(r3);
        let _a3 = g.admit(1000).expect("a place freed");
        assert!(!_a3.is_root() && _r1.is_root());
        assert_eq!(_a3.header_timeout(), UNPRIVILEGED_HEADER);
    }

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let mut b = Backoff::new();
        let d: Vec<u128> = (0..9).map(|_| b.failed().as_millis()).collect();
        assert_eq!(d, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed().as_millis(), 10);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn failed_accepts_back_off() {
        let gate = Gate::new(Limits::for_nofile(1024));
        let mut acc = Acceptor::new("test", gate);
        let mut calls = 0u32;
        let t = tokio::time::Instant::now();
        let (s, p) = acc
            .next(
                || {
                    calls += 1;
                    let n = calls;
                    async move {
                        if n <= 4 {
                            Err(io::Error::from_raw_os_error(libc::EMFILE))
                        } else {
                            Ok(n)
                        }
                    }
                },
                |_| 1000,
            )
            .await;
        assert_eq!((s, p.uid()), (5, 1000));
        assert_eq!(t.elapsed(), Duration::from_millis(10 + 20 + 40 + 80));
    }
}
